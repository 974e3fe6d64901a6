# compress.mk - the gradient-compression benchmark (bench/compress.sh: time to accuracy on a
# 100 Mbit/s and a 1 Gbit/s link, with a gnuplot PNG). gnuplot is needed only here.

COMPRESS_BENCH_PKGS = gnuplot-nox iproute2

.PHONY: bench-compress
bench-compress: trainer
	@sh tools/deps.sh "the compression benchmark (make bench-compress)" $(COMPRESS_BENCH_PKGS)
	BUILD=$(BUILD) sh bench/compress.sh

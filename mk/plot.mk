# plot.mk - pictures: chorus-bench --plot and the bench/ plots draw with gnuplot (Debian package
# gnuplot-nox), which only these targets need: make and make test do not (the plot test skips,
# saying why, when gnuplot is missing and plot-deps could not install it).
#
#   make plot-deps      installs gnuplot-nox as root, else names the command
#   make plots          docs/img/scaling.png and docs/img/busbw.png (bench/plot_scaling.sh)
#   make autotune-bench CHORUS_AUTOTUNE=1 against the defaults on the engine benchmark

PLOT_PKGS = gnuplot-nox

.PHONY: plot-deps plots autotune-bench
plot-deps:
	@sh tools/deps.sh "the plots (chorus-bench --plot, make plots)" $(PLOT_PKGS)

plots: plot-deps all trainer
	BUILD=$(BUILD) sh bench/plot_scaling.sh

autotune-bench: engine
	BUILD=$(BUILD) sh bench/autotune.sh

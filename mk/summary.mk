# summary.mk - make bench-summary: docs/PERFORMANCE.md's summary table measured on this machine
# (bench/summary.sh: shared-memory and TCP allreduce against Open MPI, the MLP against PyTorch,
# static against dynamic load balancing; the host's topology with it). Knobs on the command
# line or in the environment: REPEAT=3 WRITE=1 TOL=15 PARTS="shm tcp train balance" (the rest in
# bench/README.md). Cells also go to $(BUILD)/bench-summary/<UTC stamp>.tsv, checked against the
# previous run's. Needs Open MPI (mpicc, mpirun) and Debian's python3-torch for the baselines.

.PHONY: bench-summary
bench-summary:
	$(MAKE) -j2 all
	$(MAKE) -j2 trainer
	BUILD=$(BUILD) sh bench/summary.sh

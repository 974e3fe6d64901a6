# clusters.mk - what the tests of cluster engines need (tests/net/slurm.sh, tests/net/mpirun.sh).
# slurm-wlm (slurmctld, slurmd, srun, sinfo): the Slurm that Debian ships, started by the test
#   itself on two namespace hosts, because srun's environment is only real under a real Slurm.
# munge: Slurm's authentication daemon (auth/munge is the only authentication Debian's Slurm
#   daemons accept between each other); the test runs its own munged with a key it makes.
# libpmix2: mpirun's PMIx client library, which libchorus opens at run time (dlopen) to learn
#   rank 0's address across hosts; openmpi-bin already pulls it in, it is named for clarity.
# None is linked into libchorus; without them (and not root) those tests print SKIP.
DEBIAN_PKGS += slurm-wlm munge libpmix2

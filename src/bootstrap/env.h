/*
 * env.h - what a rank learns about its job from the environment, whoever launched it:
 * chorus-run, torchrun (or RANK/WORLD_SIZE set by hand), Open MPI's mpirun, MPICH/Hydra
 * (PMI_*), Slurm's srun, a Kubernetes Indexed Job (JOB_COMPLETION_INDEX), or nothing at all
 * (a world of one).
 */
#ifndef CHORUS_ENV_H
#define CHORUS_ENV_H

#include "base/base.h"

typedef struct chorus_job {
    const char *launcher; /* "chorus-run", "torchrun", "mpirun", "pmi", "srun",
                           "kubernetes", "none" */
    int rank, size;
    int local_rank, local_size; /* -1: not given, computed from host identities */
    char job[64];               /* job id: namespaces the store and shared memory */
    char store_addr[256];       /* host:port of the store ("" with file rendezvous) */
    int serve_store;            /* this rank (0) must serve the store itself */
    char rdzv_file[256]; /* single host, no address: rank 0 writes the store's address here */
    int pmix; /* several hosts, no address, a PMIx launcher: rank 0 serves the store on an
                 address of its own and shares it through the launcher's PMIx server */
} chorus_job;

chorus_result chorus__job_from_env(chorus_job *j, chorus_errbuf *e);

#endif

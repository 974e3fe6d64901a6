/*
 * pmix.h - the meeting point of a job whose launcher runs a PMIx server (Open MPI's mpirun,
 * PRRTE, srun --mpi=pmix): rank 0 publishes its store's address there and every rank reads
 * it. libpmix is loaded at run time (dlopen), so libchorus links no MPI and no PMIx, and a
 * job that never needs it never loads it.
 */
#ifndef CHORUS_PMIX_H
#define CHORUS_PMIX_H

#include "base/base.h"

/* Rank 0 (rank == 0) publishes addr, a NUL-terminated string (its store's "ip:port", or
 * "!reason" when it could not serve one); every rank then waits at a fence of the whole job
 * until deadline (chorus__now() time), and every rank but 0 reads rank 0's string into addr
 * (len bytes). PMIx is initialised at the first call and finalised at process exit (one
 * session for every world the process forms: a second PMIx_Init after a PMIx_Finalize races
 * with the server's cleanup of the first connection). Errors (CHORUS_ERR_ENV): libpmix
 * cannot be loaded, or the process is no PMIx client, or a PMIx call fails (its status
 * named); CHORUS_ERR_TIMEOUT: some rank did not reach the fence by deadline (that fence is
 * then left behind, and PMIx is not finalised at exit). */
chorus_result chorus__pmix_share(int rank, char *addr, size_t len, double deadline,
                                 chorus_errbuf *e);

#endif

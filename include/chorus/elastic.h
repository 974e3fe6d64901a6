/*
 * chorus/elastic.h - elastic training: lose a worker, lose nothing.
 *
 * The training state (parameters, optimizer state, step counter, anything the program needs
 * to go on) is registered once as plain buffers. chorus_elastic_commit() copies it aside in
 * memory at points where every rank agrees (after an optimizer step); when a peer is lost,
 * chorus_elastic_run() restores the last commit, meets the survivors again through the
 * launcher's store, builds a new communicator (new size, new ranks), takes the state from
 * the most advanced surviving rank over the network (no disk round trip), calls the reset
 * callback so the program can rescale its learning rate and data shards, and calls the
 * training function again. Workers started by the launcher join the same way at the next
 * commit. Launch with `chorus-run --elastic -np N --min-np A --max-np B prog`; under any
 * other launcher (or without --elastic) chorus_elastic_run runs the training function once
 * and returns its error, so one program serves both.
 *
 *     static chorus_result train(chorus_elastic *el, chorus_comm *c, void *arg) {
 *         struct ctx *x = arg;
 *         while (x->step < x->steps) {
 *             compute_gradient(x, chorus_rank(c), chorus_size(c));
 *             chorus_result r = chorus_allreduce(c, x->g, x->g, x->n, CHORUS_FLOAT32, CHORUS_AVG);
 *             if (r != CHORUS_OK) return r;              // a lost peer: run() recovers
 *             apply(x);
 *             if (++x->step % 10 == 0 && (r = chorus_elastic_commit(el)) != CHORUS_OK) return r;
 *         }
 *         return CHORUS_OK;
 *     }
 *     chorus_elastic_create(&el);
 *     chorus_elastic_register(el, "weights", x.w, x.n * sizeof(float));
 *     chorus_elastic_register(el, "step", &x.step, sizeof(x.step));
 *     chorus_result r = chorus_elastic_run(el, train, reset, &x);
 *
 * All functions return a chorus_result; chorus_elastic_last_error() gives the detail.
 * See docs/FAULT_TOLERANCE.md.
 */
#ifndef CHORUS_ELASTIC_H
#define CHORUS_ELASTIC_H

#include <stddef.h>
#include <stdint.h>

#include "chorus.h"
#include "chorus/checkpoint.h" /* crash-safe state files, once declared here */

#ifdef __cplusplus
extern "C" {
#endif

typedef struct chorus_elastic chorus_elastic; /* opaque */

/* The training function: runs from the state in the registered buffers until done
 * (CHORUS_OK) or until a call fails; it should return any failure of a collective or of
 * chorus_elastic_commit unchanged. comm is valid until it returns. */
typedef chorus_result (*chorus_elastic_train_fn)(chorus_elastic *el, chorus_comm *comm, void *arg);
/* Called after every (re)formation of the job, once the state is in sync and before train:
 * the place to rescale the learning rate and re-shard the data for chorus_size(comm).
 * A failure is handled like one of train. */
typedef chorus_result (*chorus_elastic_reset_fn)(chorus_elastic *el, chorus_comm *comm, void *arg);

/* Makes the elastic state of this process (no communication yet). Elastic when launched by
 * chorus-run --elastic (CHORUS_ELASTIC=1), a plain single-attempt run otherwise. */
chorus_result chorus_elastic_create(chorus_elastic **out);

/* Finalizes the communicator (if any) and frees the state; the registered buffers stay the
 * caller's. NULL is ignored. */
void chorus_elastic_destroy(chorus_elastic *el);

/* Adds a buffer of `bytes` bytes to the state, under a unique name (at most 63 bytes).
 * Every rank must register the same names, sizes and order before chorus_elastic_run; the
 * buffer must stay valid until destroy. */
chorus_result chorus_elastic_register(chorus_elastic *el, const char *name, void *buf,
                                      size_t bytes);

/* Collective over the current communicator: saves a copy of every registered buffer in
 * memory (the state to go back to after a failure) and, in an elastic job, asks the launcher
 * whether workers are waiting to join or leave; if so every rank returns
 * CHORUS_ERR_MEMBERSHIP (the copy is already saved), and chorus_elastic_run re-forms the job
 * at this point. Returns a collective's error when a peer was lost during the call. */
chorus_result chorus_elastic_commit(chorus_elastic *el);

/* Copies the last commit back into the registered buffers (local; nothing to do when there
 * was no commit yet). */
chorus_result chorus_elastic_restore(chorus_elastic *el);

/* Collective: every rank takes the state of the rank with the most commits (the lowest such
 * rank; rank 0 when nobody has committed yet, so the initial state is rank 0's), then commits
 * it locally. Fails with CHORUS_ERR_MISMATCH when ranks registered different buffers. */
chorus_result chorus_elastic_sync(chorus_elastic *el);

/* The loop: form the job (chorus_init, or the elastic rendezvous), sync, reset, train. On
 * CHORUS_ERR_PEER_LOST, CHORUS_ERR_TIMEOUT, CHORUS_ERR_ABORTED or CHORUS_ERR_MEMBERSHIP in an
 * elastic job: restore the last commit, finalize the broken communicator, form the next
 * generation with the survivors (and newcomers) and go on. Returns CHORUS_OK when train
 * returns it, or the error that ends this worker: any error outside elastic jobs, any other
 * error (e.g. CHORUS_ERR_MISMATCH, or the train function's own), CHORUS_ERR_MEMBERSHIP when the
 * launcher retired this worker (scale-down) or the job finished without it, or the
 * rendezvous's error when the launcher stopped the job. reset may be NULL. */
chorus_result chorus_elastic_run(chorus_elastic *el, chorus_elastic_train_fn train,
                                 chorus_elastic_reset_fn reset, void *arg);

/* The current communicator (NULL outside chorus_elastic_run). */
chorus_comm *chorus_elastic_comm(const chorus_elastic *el);
/* State version: commits since the job started (identical on every rank after a sync); -1
 * before the first sync. */
int64_t chorus_elastic_commits(const chorus_elastic *el);
/* Generation of the job this worker is in (1, 2, ...; 0 before the first). */
long chorus_elastic_generation(const chorus_elastic *el);
/* Stable worker id given by chorus-run --elastic (ranks change between generations), or the
 * rank in a plain run. */
int chorus_elastic_worker_id(const chorus_elastic *el);
/* Detail of the last failure (which peer, what the survivors did); with el NULL, of this
 * thread's last failed chorus_elastic_create (include/chorus.h says the convention). */
const char *chorus_elastic_last_error(const chorus_elastic *el);

#ifdef __cplusplus
}
#endif
#endif /* CHORUS_ELASTIC_H */

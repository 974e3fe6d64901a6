/*
 * cma.h - single-copy transfers between the ranks of one host with Linux cross-memory attach
 * (process_vm_readv / process_vm_writev): a rank copies straight between a peer's buffer and
 * its own, one copy instead of two through the staging slots.
 *
 * The kernel allows it only where the reader may ptrace the peer (same user and, with Yama's
 * ptrace_scope = 1, an ancestor or a process the peer declared with PR_SET_PTRACER), and
 * container seccomp profiles often refuse the system call. So the group probes it once at
 * set-up (chorus__cma_probe, every rank reading every peer) and all ranks agree on the result
 * (comm_shm.c).
 */
#ifndef CHORUS_CMA_H
#define CHORUS_CMA_H

#include <stddef.h>
#include <stdint.h>

#include "transport/shm/shm.h"

/* Publishes what peers need to probe this rank (the address and value of a private word) and,
 * if Yama restricts ptrace to ancestors (ptrace_scope 1), lets any process of this user read
 * this one (PR_SET_PTRACER_ANY) until the last group using CMA is destroyed
 * (chorus__cma_release). Call once after attach, before the agreement. */
void chorus__cma_prepare(chorus_shm *s);
/* Reads every peer's probe word with process_vm_readv and writes it back unchanged with
 * process_vm_writev (a seccomp profile may allow one and not the other). CHORUS_OK if all reads
 * work; otherwise fails with the reason (which peer, which errno) in e. */
chorus_result chorus__cma_probe(chorus_shm *s, chorus_errbuf *e);
/* Undoes chorus__cma_prepare's PR_SET_PTRACER_ANY once no group of this process uses CMA. The
 * owner of s calls it before chorus__shm_destroy (nothing when s is NULL or never prepared). */
void chorus__cma_release(chorus_shm *s);

/* Copies n bytes from address `from` in rank peer's memory to dst (the peer must be inside the
 * same collective, its buffers published). Not thread-safe with other users of s. A dead peer is
 * CHORUS_ERR_PEER_LOST naming it; an unreadable range (the peer's buffer is shorter than the
 * collective's count, or unmapped) is CHORUS_ERR_INVALID_ARG. */
chorus_result chorus__cma_read(chorus_shm *s, int peer, void *dst, uint64_t from, size_t n,
                               chorus_errbuf *e);

/* Copies n bytes from src to address `to` in rank peer's memory; errors as for reads. The
 * peer must have published `to` as writable for this collective (it is then waiting for this
 * rank's OUT flag). */
chorus_result chorus__cma_write(chorus_shm *s, int peer, uint64_t to, const void *src, size_t n,
                                chorus_errbuf *e);

#endif

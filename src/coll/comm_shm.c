/*
 * comm_shm.c - builds a communicator's shared-memory group over its TCP connections.
 *
 * Called by chorus_init (after the TCP mesh) and chorus_comm_split (for each new
 * communicator) when every rank of the communicator is on one host and CHORUS_SHM is not 0:
 *
 *   1. rank 0 creates /dev/shm/chorus-<comm id>-<random nonce> (O_EXCL, memory reserved up
 *      front) and broadcasts the name over TCP ("" if it could not: everyone stays on TCP);
 *   2. the others map it and check its header (communicator id, size, geometry);
 *   3. an allreduce(MIN) over TCP of "mapped it" is both the agreement and a barrier: after
 *      it rank 0 unlinks the name, so nothing is left in /dev/shm whatever happens to the job
 *      later (a SIGKILL included) while every mapping stays valid.
 * If any rank failed, all of them fall back to TCP together, with a warning.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "coll/comm.h"
#include "transport/shm/cma.h"
#include "transport/shm/shm.h"
#include "wire/auth.h"

static uint64_t nonce(void)
{
    uint64_t x;
    chorus__auth_random(&x, sizeof(x));
    return x;
}

static size_t round_up(size_t x, size_t a)
{
    return (x + a - 1) / a * a;
}

/* Single-copy reads (cma.h): every rank probes every peer, then an allreduce(MIN) over TCP of
 * "the lowest rank that failed" makes all ranks agree. CHORUS_SHM_CMA=1 turns a refusal into
 * an error, auto into the staging-slot path. Called before c->shm is set (so the allreduce
 * goes over TCP). */
static chorus_result cma_setup(chorus_comm *c, chorus_shm *s)
{
    const char *mode = c->cfg.shm_cma; /* auto, 0 or 1: checked when the config was parsed */
    int want = !strcmp(mode, "0") ? 0 : !strcmp(mode, "1") ? 1 : 2;
    if (!want) {
        CHORUS_INFO(CHORUS_LOG_SHM, "single-copy allreduce off (CHORUS_SHM_CMA=0)");
        return CHORUS_OK;
    }
    chorus_errbuf e = {{0}};
    int32_t failed = INT32_MAX, first = 0;
    if (chorus__cma_probe(s, &e) != CHORUS_OK) {
        failed = c->rank;
        if (want == 1)
            CHORUS_WARN(CHORUS_LOG_SHM, "rank %d cannot use single-copy reads: %s", c->rank, e.msg);
        else
            CHORUS_INFO(CHORUS_LOG_SHM, "rank %d cannot use single-copy reads: %s", c->rank, e.msg);
    }
    CHORUS_CHECK(chorus_allreduce(c, &failed, &first, 1, CHORUS_INT32, CHORUS_MIN));
    if (first == INT32_MAX) {
        s->cma = 1;
        CHORUS_INFO(CHORUS_LOG_SHM,
                    "single-copy allreduce on (process_vm_readv/writev) from %zu B, pieces of "
                    "%zu KiB; %s",
                    s->cma_min, s->cma_piece >> 10,
                    s->tune && c->size == 2
                        ? "above the rules' CHORUS_SHM_CMA_MAX measured against "
                          "the staging slots per size"
                        : "up to CHORUS_SHM_CMA_MAX");
        return CHORUS_OK;
    }
    if (want == 1)
        return chorus__fail(&c->err, CHORUS_ERR_SYSTEM,
                            "CHORUS_SHM_CMA=1, but rank %d cannot read its peers' memory with "
                            "process_vm_readv%s%s (CHORUS_SHM_CMA=auto falls back to the "
                            "staging slots)",
                            first, first == c->rank ? ": " : "", first == c->rank ? e.msg : "");
    CHORUS_INFO(CHORUS_LOG_SHM,
                "single-copy allreduce off: rank %d cannot read its peers' memory with "
                "process_vm_readv%s%s; allreduce goes through the staging slots",
                first, first == c->rank ? ": " : "", first == c->rank ? e.msg : "");
    return CHORUS_OK;
}

/* CHORUS_SHM and CHORUS_SHM_CMA choose which collectives the set-up calls: ranks that differ
 * would call different ones and fail far from the cause (a mismatch, or a timeout naming no
 * variable). One allreduce(MIN) of each value and its negation finds a difference first and
 * names it, on every rank. */
static chorus_result agree_shm_vars(chorus_comm *c)
{
    const char *cma = c->cfg.shm_cma;
    int32_t want = !strcmp(cma, "0") ? 0 : !strcmp(cma, "1") ? 1 : 2;
    int32_t mine[4] = {c->cfg.shm ? 1 : 0, c->cfg.shm ? -1 : 0, want, -want}, all[4];
    CHORUS_CHECK(chorus_allreduce(c, mine, all, 4, CHORUS_INT32, CHORUS_MIN));
    static const char *const cma_name[] = {"0", "1", "auto"};
    if (all[0] != -all[1])
        return chorus__fail(&c->err, CHORUS_ERR_INVALID_ARG,
                            "CHORUS_SHM is 0 on some ranks and 1 on others (rank %d: %d): it "
                            "must be the same on every rank",
                            c->world[c->rank], mine[0]);
    if (all[2] != -all[3])
        return chorus__fail(&c->err, CHORUS_ERR_INVALID_ARG,
                            "CHORUS_SHM_CMA is %s on some ranks and %s on others (rank %d: %s): "
                            "it must be the same on every rank",
                            cma_name[all[2]], cma_name[-all[3]], c->world[c->rank], cma_name[want]);
    return CHORUS_OK;
}

chorus_result chorus__comm_shm_setup(chorus_comm *c)
{
    c->shm = NULL;
    if (c->size < 2 || c->nhosts != 1) return CHORUS_OK;
    CHORUS_CHECK(agree_shm_vars(c));
    if (!c->cfg.shm) {
        CHORUS_INFO(CHORUS_LOG_SHM, "shared memory off (CHORUS_SHM=0): collectives use TCP");
        return CHORUS_OK;
    }
    chorus_errbuf e = {{0}};
    chorus_shm *s = NULL;
    char name[64] = "";
    if (c->rank == 0) {
        long chunk = (long)c->cfg.shm_chunk;
        long one = (long)c->cfg.shm_oneshot_max;
        size_t min_chunk = round_up((size_t)c->size * 64, 4096);
        if (!chorus_config_is_set("CHORUS_SHM_CHUNK")) {
            /* 1 MiB slots: at 2 ranks the pipelined allreduce took 9-10 ms at 64 MiB with them,
             * 14-15 ms with 256 KiB (three synchronisations a chunk); big groups get smaller
             * slots so that the segment stays small (/dev/shm is 64 MiB in many containers) */
            size_t cap = ((size_t)32 << 20) / (2 * (size_t)c->size);
            if (cap < (size_t)chunk)
                chunk = (long)(cap > ((size_t)256 << 10) ? cap : (size_t)256 << 10);
        }
        size_t ch = chunk > 0 ? round_up((size_t)chunk, 4096) : min_chunk;
        if (ch < min_chunk) ch = min_chunk;
        if (ch > ((size_t)1 << 28)) ch = (size_t)1 << 28;
        size_t os = one > 0 ? (size_t)one : 0;
        if (os > ch) os = ch;
        snprintf(name, sizeof(name), "/chorus-%016llx-%016llx", (unsigned long long)c->id,
                 (unsigned long long)nonce());
        if (chorus__shm_create(name, c->id, c->size, ch, os, &s, &e) != CHORUS_OK) {
            CHORUS_WARN(CHORUS_LOG_SHM, "shared memory unavailable, collectives use TCP: %s",
                        e.msg);
            name[0] = 0;
        } else {
            size_t piece = c->cfg.shm_cma_piece;
            s->hdr->cma_min = s->cma_min = c->cfg.shm_cma_min;
            s->hdr->cma_max = s->cma_max = c->cfg.shm_cma_max;
            /* unset, the crossover above it is measured per host (tune.c) */
            s->tune = !chorus_config_is_set("CHORUS_SHM_CMA_MAX");
            s->hdr->cma_tune = (uint64_t)s->tune;
            s->hdr->cma_piece = s->cma_piece = piece >= 4096 ? round_up(piece, 64) : (size_t)4096;
            chorus__cma_prepare(s);
        }
    }
    chorus_result r = chorus_broadcast(c, name, sizeof(name), CHORUS_UINT8, 0);
    if (r == CHORUS_OK && !name[0]) return CHORUS_OK;
    int32_t ok = 1, all_ok = 0;
    if (r == CHORUS_OK && c->rank != 0) {
        name[sizeof(name) - 1] = 0;
        if (chorus__shm_attach(name, c->id, c->size, c->rank, &s, &e) != CHORUS_OK) {
            CHORUS_WARN(CHORUS_LOG_SHM, "cannot use the shared memory of rank 0: %s", e.msg);
            ok = 0;
        } else {
            chorus__cma_prepare(s);
        }
    }
    if (r == CHORUS_OK) r = chorus_allreduce(c, &ok, &all_ok, 1, CHORUS_INT32, CHORUS_MIN);
    /* Everyone has mapped it (or given up): the name can go. Every rank tries, so the name
     * goes even if rank 0 dies right here; all but the first get ENOENT. */
    chorus__shm_unlink(s);
    if (r != CHORUS_OK || !all_ok) {
        chorus__cma_release(s);
        chorus__shm_destroy(s);
        if (r == CHORUS_OK && c->rank == 0)
            CHORUS_WARN(CHORUS_LOG_SHM, "a rank could not map the shared memory; collectives "
                                        "use TCP");
        return r;
    }
    chorus__shm_start(s, &c->cfg, c->net, c->size);
    s->world = c->world; /* messages name job ranks, also in a split communicator */
    r = cma_setup(c, s);
    if (r != CHORUS_OK) {
        chorus__cma_release(s);
        chorus__shm_destroy(s);
        return r;
    }
    c->shm = s;
    CHORUS_INFO(CHORUS_LOG_SHM,
                "shared memory for %d ranks: %s (unlinked), %zu KiB, slots of %zu KiB, "
                "one-shot allreduce up to %zu B",
                c->size, name, s->len >> 10, s->chunk >> 10, s->oneshot_max);
    return CHORUS_OK;
}

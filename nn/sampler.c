/*
 * sampler.c - the distributed sampler: one shuffled order per epoch shared by all ranks,
 * cut into global batches, each global batch cut into contiguous slices, one per rank: near
 * equal, or of the sizes dynamic load balancing set (nn_sampler_set_shares). See nn.h for the
 * guarantees.
 */
#include <stdlib.h>

#include "chorus/nn.h"
#include "nn_internal.h"

chorus_result nn_sampler_init(nn_sampler *s, size_t n, size_t global_batch, int rank, int world,
                              uint64_t seed)
{
    if (n == 0 || n > UINT32_MAX || global_batch == 0 || world <= 0 || rank < 0 || rank >= world)
        return nn__fail(CHORUS_ERR_INVALID_ARG,
                        "nn_sampler_init: bad arguments (%zu samples, global batch %zu, rank %d "
                        "of %d)",
                        n, global_batch, rank, world);
    s->n = n;
    s->global_batch = global_batch;
    s->rank = rank;
    s->world = world;
    s->seed = seed;
    s->shares = s->tail = NULL;
    s->perm = malloc(n * sizeof(uint32_t));
    if (!s->perm)
        return nn__fail(CHORUS_ERR_NOMEM, "nn_sampler_init: out of memory for %zu samples", n);
    nn_sampler_set_epoch(s, 0);
    return CHORUS_OK;
}

void nn_sampler_free(nn_sampler *s)
{
    free(s->perm);
    free(s->shares);
    free(s->tail);
    s->perm = NULL;
    s->shares = s->tail = NULL;
}

chorus_result nn_sampler_set_shares(nn_sampler *s, const size_t *shares)
{
    if (!shares) {
        free(s->shares);
        free(s->tail);
        s->shares = s->tail = NULL;
        return CHORUS_OK;
    }
    size_t w = (size_t)s->world, sum = 0;
    for (size_t r = 0; r < w; r++) sum += shares[r];
    if (sum != s->global_batch)
        return nn__fail(CHORUS_ERR_INVALID_ARG,
                        "nn_sampler_set_shares: the shares sum to %zu, not to the global batch %zu",
                        sum, s->global_batch);
    size_t *sh = s->shares ? s->shares : malloc(w * sizeof(size_t));
    size_t *tl = s->tail ? s->tail : malloc(w * sizeof(size_t));
    double *wt = malloc(w * sizeof(double));
    if (!sh || !tl || !wt) {
        if (sh != s->shares) free(sh);
        if (tl != s->tail) free(tl);
        free(wt);
        return nn__fail(CHORUS_ERR_NOMEM, "nn_sampler_set_shares: out of memory");
    }
    s->shares = sh;
    s->tail = tl;
    for (size_t r = 0; r < w; r++) {
        sh[r] = shares[r];
        wt[r] = (double)shares[r];
    }
    size_t short_step = s->n % s->global_batch;
    chorus_result rc = nn_balance_apportion(wt, s->world, short_step, 0, tl);
    free(wt);
    return rc;
}

void nn_sampler_set_epoch(nn_sampler *s, uint64_t epoch)
{
    s->epoch = epoch;
    for (size_t i = 0; i < s->n; i++) s->perm[i] = (uint32_t)i;
    /* Fisher-Yates from a stream that depends only on (seed, epoch). */
    nn_rng r;
    nn_rng_seed(&r, nn_seed_mix(s->seed, 0x5a3b1e, epoch, 0));
    for (size_t i = s->n - 1; i > 0; i--) {
        size_t j = (size_t)nn_rng_below(&r, (uint64_t)i + 1);
        uint32_t t = s->perm[i];
        s->perm[i] = s->perm[j];
        s->perm[j] = t;
    }
}

size_t nn_sampler_steps(const nn_sampler *s)
{
    return (s->n + s->global_batch - 1) / s->global_batch;
}

size_t nn_sampler_batch(const nn_sampler *s, size_t step, const uint32_t **idx,
                        size_t *global_count)
{
    size_t start = step * s->global_batch;
    size_t count = start >= s->n ? 0 : s->n - start;
    if (count > s->global_batch) count = s->global_batch;
    size_t w = (size_t)s->world, r = (size_t)s->rank, mine, off = 0;
    if (s->shares && count) {
        /* the ranks' shares in rank order: full steps by shares, the short one by tail */
        const size_t *sh = count == s->global_batch ? s->shares : s->tail;
        for (size_t i = 0; i < r; i++) off += sh[i];
        mine = sh[r];
    } else {
        /* Rank r gets count/world samples, plus one for the first count%world ranks. */
        size_t base = count / w, extra = count % w;
        mine = base + (r < extra);
        off = r * base + (r < extra ? r : extra);
    }
    *idx = s->perm + (start < s->n ? start : s->n) + (mine ? off : 0);
    if (global_count) *global_count = count;
    return mine;
}

size_t nn_sampler_max_local(const nn_sampler *s)
{
    if (s->shares) {
        size_t most = 0;
        for (int r = 0; r < s->world; r++) {
            if (s->shares[r] > most) most = s->shares[r];
            if (s->tail[r] > most) most = s->tail[r];
        }
        return most;
    }
    size_t g = s->global_batch < s->n ? s->global_batch : s->n;
    return (g + (size_t)s->world - 1) / (size_t)s->world;
}

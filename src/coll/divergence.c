/*
 * divergence.c - weight divergence across the ranks of a communicator: every rank hashes each
 * of its tensors (64-bit, bitwise), one allgather of those hashes lets every rank see every
 * rank's, and the first tensor whose hashes differ is named with the ranks outside the
 * reference group (the largest group of ranks with equal hashes; on a tie, the group that holds
 * the lowest rank). The row format is public so that callers whose collectives are not a
 * chorus_comm's (chorus.torch's engine, the torch.distributed backend) gather it themselves and
 * share the comparison and its message.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coll/coll.h"

void chorus_divergence_row(size_t n, const void *const *bufs, const size_t *bytes,
                           const char *const *names, long long label, uint64_t *row)
{
    uint64_t n64 = n, sig = chorus__hash64(&n64, sizeof(n64));
    for (size_t i = 0; i < n; i++) {
        const char *nm = names && names[i] ? names[i] : "";
        uint64_t b = bytes[i];
        sig = chorus__hash64_seed(sig, nm, strlen(nm) + 1);
        sig = chorus__hash64_seed(sig, &b, sizeof(b));
        row[2 + i] = chorus__hash64(bufs[i], bytes[i]);
    }
    row[0] = sig;
    row[1] = (uint64_t)label;
}

/* "rank 3" or "ranks 0,2" for the ranks r with pick[r] == want, by their labels. */
static size_t ranks_text(char *out, size_t cap, const uint64_t *rows, size_t w, int nranks,
                         const int *pick, int want)
{
    size_t k = 0;
    int count = 0;
    for (int r = 0; r < nranks; r++) count += pick[r] == want;
    k += (size_t)snprintf(out, cap, "rank%s ", count > 1 ? "s" : "");
    int first = 1;
    for (int r = 0; r < nranks && k < cap; r++) {
        if (pick[r] != want) continue;
        k += (size_t)snprintf(out + k, cap - k, first ? "%lld" : ",%lld",
                              (long long)rows[(size_t)r * w + 1]);
        first = 0;
    }
    return k < cap ? k : cap - 1;
}

int chorus_divergence_compare(const uint64_t *rows, int nranks, size_t n, const char *const *names,
                              long long step, long *tensor, int *differ, char *msg, size_t cap)
{
    size_t w = n + 2;
    if (tensor) *tensor = -1;
    if (differ)
        for (int r = 0; r < nranks; r++) differ[r] = 0;
    if (cap) msg[0] = 0;
    int *grp = calloc((size_t)(nranks > 0 ? nranks : 1), sizeof(int));
    int *dif = calloc((size_t)(nranks > 0 ? nranks : 1), sizeof(int));
    if (!grp || !dif) {
        free(grp);
        free(dif);
        if (cap) snprintf(msg, cap, "divergence check: out of memory");
        return -1;
    }
    /* the column to compare: the signatures first (tensor lists), then each tensor's hash */
    long col = -1;
    for (size_t c = 0; c < w && col < 0; c++) {
        if (c == 1) continue; /* the labels */
        for (int r = 1; r < nranks; r++)
            if (rows[(size_t)r * w + c] != rows[c]) col = (long)c;
    }
    if (col < 0) {
        free(grp);
        free(dif);
        return 0;
    }
    /* groups of equal values in that column, numbered in order of their lowest rank */
    int ngroups = 0;
    for (int r = 0; r < nranks; r++) grp[r] = -1;
    for (int r = 0; r < nranks; r++) {
        if (grp[r] >= 0) continue;
        for (int q = r; q < nranks; q++)
            if (grp[q] < 0 &&
                rows[(size_t)q * w + (size_t)col] == rows[(size_t)r * w + (size_t)col])
                grp[q] = ngroups;
        ngroups++;
    }
    int ref = 0, best = 0, tie = 0;
    for (int g = 0; g < ngroups; g++) {
        int size = 0;
        for (int r = 0; r < nranks; r++) size += grp[r] == g;
        if (size > best) {
            best = size;
            ref = g;
            tie = 0;
        } else if (size == best) {
            tie = 1;
        }
    }
    for (int r = 0; r < nranks; r++) dif[r] = grp[r] != ref;
    if (differ) memcpy(differ, dif, (size_t)nranks * sizeof(int));
    if (!cap) {
        free(grp);
        free(dif);
        return col == 0 ? 2 : 1;
    }
    char bad[200], good[200];
    ranks_text(bad, sizeof(bad), rows, w, nranks, dif, 1);
    ranks_text(good, sizeof(good), rows, w, nranks, dif, 0);
    const char *why = tie ? "no majority: the reference is the group of the lowest rank"
                          : "the reference is the largest group of equal ranks";
    size_t k;
    if (col == 0) {
        k = (size_t)snprintf(msg, cap,
                             "divergence check at step %lld: the ranks hold different tensor "
                             "lists (count, names or sizes): %s differ%s from %s (%s)",
                             step, bad, strchr(bad, ',') ? "" : "s", good, why);
    } else {
        size_t i = (size_t)col - 2, ndiff = 0;
        for (size_t c = 2; c < w; c++)
            for (int r = 1; r < nranks; r++)
                if (rows[(size_t)r * w + c] != rows[c]) {
                    ndiff++;
                    break;
                }
        if (tensor) *tensor = (long)i;
        k = (size_t)snprintf(msg, cap,
                             "weights diverged at step %lld: tensor '%s' differs on %s from %s "
                             "(%s; %zu of %zu tensors differ; hashes:",
                             step, names && names[i] ? names[i] : "?", bad, good, why, ndiff, n);
        for (int g = 0; g < ngroups && k + 40 < cap; g++) {
            int first = 0;
            while (grp[first] != g) first++;
            for (int r = 0; r < nranks; r++) dif[r] = grp[r] == g;
            k += (size_t)snprintf(msg + k, cap - k, "%s ", g ? ";" : "");
            if (k < cap) k += ranks_text(msg + k, cap - k, rows, w, nranks, dif, 1);
            if (k < cap)
                k += (size_t)snprintf(msg + k, cap - k, " %016" PRIx64,
                                      rows[(size_t)first * w + (size_t)col]);
        }
        if (k + 1 < cap) snprintf(msg + k, cap - k, ")");
    }
    free(grp);
    free(dif);
    return col == 0 ? 2 : 1;
}

chorus_result chorus_check_divergence(chorus_comm *c, size_t n, const void *const *bufs,
                                      const size_t *bytes, const char *const *names,
                                      long long label, long long step)
{
    if (!c)
        return chorus__fail(chorus__init_errbuf(), CHORUS_ERR_INVALID_ARG,
                            "chorus_check_divergence: communicator is NULL");
    for (size_t i = 0; i < n; i++)
        if (bytes[i] && !bufs[i])
            return chorus__fail(&c->err, CHORUS_ERR_INVALID_ARG,
                                "chorus_check_divergence: tensor %zu ('%s') is NULL", i,
                                names && names[i] ? names[i] : "?");
    int size = chorus_size(c);
    if (label < 0) label = chorus_rank(c);
    uint64_t *row = malloc((n + 2) * sizeof(uint64_t));
    uint64_t *rows = malloc((size_t)size * (n + 2) * sizeof(uint64_t));
    chorus_result res = CHORUS_ERR_NOMEM;
    if (!row || !rows) {
        res = chorus__fail(&c->err, CHORUS_ERR_NOMEM, "chorus_check_divergence: out of memory");
        goto out;
    }
    chorus_divergence_row(n, bufs, bytes, names, label, row);
    res = chorus_allgather(c, row, rows, n + 2, CHORUS_INT64);
    if (res != CHORUS_OK) goto out;
    char msg[sizeof(c->err.msg)];
    int v = chorus_divergence_compare(rows, size, n, names, step, NULL, NULL, msg, sizeof(msg));
    if (v != 0)
        res = chorus__fail(&c->err, v < 0 ? CHORUS_ERR_NOMEM : CHORUS_ERR_MISMATCH, "%s", msg);
out:
    free(row);
    free(rows);
    return res;
}

/*
 * diverge.c - chorus-train's --check-divergence and its test-only fault injection (see
 * diverge.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "diverge.h"

#define NAME_LEN 48

/* The parameter tensors of m: views, byte sizes and names; returns their count (at most 2 per
 * layer), or -1 out of memory. */
static int tensors(const nn_model *m, int first_layer, const void ***bufs, size_t **bytes,
                   char (**names)[NAME_LEN])
{
    int cap = 2 * (m->nlayers > 0 ? m->nlayers : 1), n = 0;
    *bufs = malloc((size_t)cap * sizeof(**bufs));
    *bytes = malloc((size_t)cap * sizeof(**bytes));
    *names = malloc((size_t)cap * sizeof(**names));
    if (!*bufs || !*bytes || !*names) return -1;
    for (int i = 0; i < m->nlayers; i++) {
        const nn_layer *l = &m->layers[i];
        if (!l->nparams || !l->w) continue;
        size_t nw = l->b ? (size_t)(l->b - l->w) : l->nparams;
        const char *kind = nn_kind_name(l->kind);
        (*bufs)[n] = l->w;
        (*bytes)[n] = nw * sizeof(float);
        snprintf((*names)[n++], NAME_LEN, "layer%d.%s.weight", first_layer + i, kind);
        if (l->b) {
            (*bufs)[n] = l->b;
            (*bytes)[n] = (l->nparams - nw) * sizeof(float);
            snprintf((*names)[n++], NAME_LEN, "layer%d.%s.bias", first_layer + i, kind);
        }
    }
    return n;
}

int diverge_check(chorus_comm *world, chorus_comm *group, const nn_model *m, int first_layer,
                  uint64_t step, char *why, size_t len)
{
    const void **bufs;
    size_t *bytes;
    char(*names)[NAME_LEN];
    int n = tensors(m, first_layer, &bufs, &bytes, &names);
    const char **np = n >= 0 ? malloc(((size_t)n + 1) * sizeof(*np)) : NULL;
    if (!np) {
        free(bufs);
        free(bytes);
        free(names);
        snprintf(why, len, "--check-divergence: out of memory");
        return 1;
    }
    for (int i = 0; i < n; i++) np[i] = names[i];
    chorus_result r = chorus_check_divergence(group, (size_t)n, bufs, bytes, np, chorus_rank(world),
                                              (long long)step);
    free(bufs);
    free(bytes);
    free(names);
    free(np);
    int bad = r != CHORUS_OK;
    if (bad) snprintf(why, len, "%s", chorus_last_error(group));
    if (r != CHORUS_OK && r != CHORUS_ERR_MISMATCH) return 1; /* the group is broken */
    if (group == world) return bad;
    /* every group's verdict to every rank: the lowest world rank that found a divergence */
    int first[1] = {bad ? chorus_rank(world) : chorus_size(world)};
    if (chorus_allreduce(world, first, first, 1, CHORUS_INT32, CHORUS_MIN) != CHORUS_OK) {
        snprintf(why, len, "--check-divergence: sharing the verdict: %s", chorus_last_error(world));
        return 1;
    }
    if (!bad && first[0] < chorus_size(world))
        snprintf(why, len,
                 "weights diverged at step %llu in another group of replicas (world rank %d "
                 "names the tensor and the ranks)",
                 (unsigned long long)step, first[0]);
    return first[0] < chorus_size(world);
}

/* spec "RANK:STEP[:TENSOR]" into its parts; 0 when malformed. */
static int parse_spec(const char *spec, int *rank, unsigned long long *at, char *name)
{
    int used = 0;
    name[0] = 0;
    if (sscanf(spec, "%d:%llu%n", rank, at, &used) != 2 || *rank < 0) return 0;
    if (!spec[used]) return 1;
    return spec[used] == ':' && sscanf(spec + used + 1, "%47s", name) == 1 &&
           strlen(spec + used + 1) < NAME_LEN;
}

int diverge_perturb_valid(const char *spec)
{
    int rank;
    unsigned long long at;
    char name[NAME_LEN];
    return parse_spec(spec, &rank, &at, name);
}

int diverge_perturb(const char *spec, nn_model *m, int first_layer, int world_rank, uint64_t step,
                    char *why, size_t len)
{
    int rank;
    unsigned long long at;
    char name[NAME_LEN];
    if (!spec || !parse_spec(spec, &rank, &at, name) || rank != world_rank || at != step) return 0;
    const void **bufs;
    size_t *bytes;
    char(*names)[NAME_LEN];
    int n = tensors(m, first_layer, &bufs, &bytes, &names), hit = -1;
    for (int i = 0; i < n && hit < 0; i++)
        if (!name[0] || !strcmp(name, names[i])) hit = i;
    if (hit >= 0) {
        /* large enough that no later update rounds it away (one ulp of a zero bias would be) */
        float *p = (float *)bufs[hit];
        *p = *p * (1.0f + 0x1p-10f) + 1e-4f;
        fprintf(stderr, "chorus-train[%d]: --test-perturb: changed '%s' after step %llu\n",
                world_rank, names[hit], at);
    } else {
        snprintf(why, len, "--test-perturb %s: rank %d has no tensor '%s'", spec, world_rank, name);
    }
    free(bufs);
    free(bytes);
    free(names);
    return hit < 0;
}

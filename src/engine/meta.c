/*
 * meta.c - comparing a tensor's metadata across ranks (the coordinator's check) and the
 * message that names the first difference.
 */
#include <stdio.h>
#include <string.h>

#include "engine/engine_int.h"
#include "wire/wire.h"

/* ---- metadata ----------------------------------------------------------------------------- */

const char *chorus__kind_name(int kind)
{
    static const char *names[EK_COUNT] = {"allreduce",        "broadcast", "allgather",
                                          "reduce_scatter",   "alltoall",  "barrier",
                                          "divergence check", "join"};
    return kind >= 0 && kind < EK_COUNT ? names[kind] : "?";
}

static int rounds_equal(const eng_meta *a, const eng_meta *b)
{
    if (a->nrounds != b->nrounds) return 0;
    for (int i = 0; i < a->nrounds && i < ENG_ROUNDS_MAX; i++) {
        const eng_round *x = &a->rounds[i], *y = &b->rounds[i];
        if (x->kind != y->kind || x->op != y->op || x->wdtype != y->wdtype ||
            x->wcount != y->wcount)
            return 0;
    }
    return 1;
}

/* Shape tags are compared when both ranks gave one. */
static int shapes_agree(const eng_meta *a, const eng_meta *b)
{
    return !a->shape || !b->shape || a->shape == b->shape;
}

int chorus__meta_equal(const eng_meta *a, const eng_meta *b)
{
    return a->kind == b->kind && a->dtype == b->dtype && a->op == b->op && a->root == b->root &&
           a->count == b->count && shapes_agree(a, b) && a->prescale == b->prescale &&
           a->postscale == b->postscale && !strcmp(a->comp, b->comp) && rounds_equal(a, b);
}

/* "2 rounds: reduce sum float64 x 8, gather float32 x 20" */
static void fmt_plan(const eng_meta *m, char *out, size_t len)
{
    size_t o = (size_t)snprintf(out, len, "%d round%s", m->nrounds, m->nrounds == 1 ? "" : "s");
    for (int i = 0; i < m->nrounds && i < ENG_ROUNDS_MAX && o < len; i++) {
        const eng_round *x = &m->rounds[i];
        o += (size_t)snprintf(out + o, len - o, "%s %s%s%s %s x %llu", i ? "," : ":",
                              x->kind == ENG_ROUND_GATHER ? "gather" : "reduce",
                              x->kind == ENG_ROUND_GATHER ? "" : " ",
                              x->kind == ENG_ROUND_GATHER ? "" : chorus__op_name(x->op),
                              chorus__dtype_name(x->wdtype), (unsigned long long)x->wcount);
    }
}

void chorus__meta_diff(const eng_meta *a, int ra, const eng_meta *b, int rb, char *out, size_t len)
{
#define DIFF(fmt, what, va, vb)                                                                    \
    snprintf(out, len, "%s " fmt " on rank %d but " fmt " on rank %d", what, va, ra, vb, rb)
    if (a->kind != b->kind)
        DIFF("%s", "operation", chorus__kind_name(a->kind), chorus__kind_name(b->kind));
    else if (a->dtype != b->dtype)
        DIFF("%s", "dtype", chorus__dtype_name(a->dtype), chorus__dtype_name(b->dtype));
    else if (a->count != b->count)
        DIFF("%llu", a->kind == EK_ALLGATHER ? "row size (elements)" : "count (elements)",
             (unsigned long long)a->count, (unsigned long long)b->count);
    else if (!shapes_agree(a, b))
        snprintf(out, len,
                 "shape differs between rank %d and rank %d (both have %llu elements, in "
                 "different shapes)",
                 ra, rb, (unsigned long long)a->count);
    else if (a->op != b->op)
        DIFF("%s", "op", chorus__op_name(a->op), chorus__op_name(b->op));
    else if (a->root != b->root)
        DIFF("%d", "root", (int)a->root, (int)b->root);
    else if (a->prescale != b->prescale)
        DIFF("%g", "prescale", a->prescale, b->prescale);
    else if (a->postscale != b->postscale)
        DIFF("%g", "postscale", a->postscale, b->postscale);
    else if (strcmp(a->comp, b->comp))
        DIFF("%s", "compression", a->comp[0] ? a->comp : "none", b->comp[0] ? b->comp : "none");
    else {
        char pa[200], pb[200];
        fmt_plan(a, pa, sizeof(pa));
        fmt_plan(b, pb, sizeof(pb));
        DIFF("%s", "compression plan", pa, pb);
    }
#undef DIFF
}

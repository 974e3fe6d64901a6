/*
 * elastic_example.c - the example of docs/FAULT_TOLERANCE.md, kept compiling and running by
 * the test list: data-parallel SGD on y = 3x + 1 whose state survives lost workers.
 *
 *   chorus-run --elastic -np 4 --min-np 2 elastic_example
 */
#include <stdio.h>

#include "chorus/elastic.h"

typedef struct {
    double w[2];       /* state: the model */
    int64_t step;      /* state: where training stands */
    int first, stride; /* this rank's shard of the 64 samples, set by reset() */
} ctx;

static chorus_result reset(chorus_elastic *el, chorus_comm *c, void *arg)
{
    ctx *x = arg;
    /* re-shard the data for the new world size (a program whose global batch grows with the
     * number of workers would rescale its learning rate here too) */
    x->first = chorus_rank(c);
    x->stride = chorus_size(c);
    printf("generation %ld: rank %d of %d, step %lld\n", chorus_elastic_generation(el),
           chorus_rank(c), chorus_size(c), (long long)x->step);
    return CHORUS_OK;
}

static chorus_result train(chorus_elastic *el, chorus_comm *c, void *arg)
{
    ctx *x = arg;
    while (x->step < 300) {
        double g[2] = {0, 0};
        for (int i = x->first; i < 64; i += x->stride) {
            double in = i / 64.0, err = x->w[0] * in + x->w[1] - (3 * in + 1);
            g[0] += err * in / 64;
            g[1] += err / 64;
        }
        chorus_result r = chorus_allreduce(c, g, g, 2, CHORUS_FLOAT64, CHORUS_SUM);
        if (r != CHORUS_OK) return r; /* a lost peer: chorus_elastic_run recovers */
        x->w[0] -= 1.5 * g[0];        /* g is the gradient of the mean loss over all 64 samples */
        x->w[1] -= 1.5 * g[1];
        if (++x->step % 10 == 0 && (r = chorus_elastic_commit(el)) != CHORUS_OK) return r;
    }
    return CHORUS_OK;
}

int main(void)
{
    ctx x = {{0, 0}, 0, 0, 1};
    chorus_elastic *el;
    if (chorus_elastic_create(&el) != CHORUS_OK) return 1;
    chorus_elastic_register(el, "w", x.w, sizeof(x.w));
    chorus_elastic_register(el, "step", &x.step, sizeof(x.step));
    chorus_result r = chorus_elastic_run(el, train, reset, &x);
    if (r == CHORUS_OK)
        printf("w = %.3f %.3f after %lld steps\n", x.w[0], x.w[1], (long long)x.step);
    else
        fprintf(stderr, "training stopped: %s: %s\n", chorus_strerror(r),
                chorus_elastic_last_error(el));
    chorus_elastic_destroy(el);
    return r == CHORUS_OK ? 0 : 1;
}

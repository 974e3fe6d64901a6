/* canonical_order.c - allreduce folds every element in rank order, ((x0 + x1) + x2) + ...,
 * whatever the algorithm, the buffer size, or the element's position: with random floats
 * (where order matters) each algorithm's result equals a serial fold bit for bit, and a
 * sub-range reduced on its own equals the same elements reduced inside a larger buffer. This
 * is what lets the training runtime fuse tensors without changing results.
 * Usage: chorus-run -np N canonical_order ALGO...   (ALGO as in CHORUS_ALGO_ALLREDUCE) */
#include "harness.h"
#include "reduce/reduce.h"

static void gen(float *x, size_t n, int rank, uint64_t salt)
{
    uint64_t s = salt * 7919u + (uint64_t)rank * 104729u;
    for (size_t i = 0; i < n; i++)
        x[i] = (float)((double)(test_rand(&s) >> 11) * 0x1p-53 - 0.5) * 1e4f;
}

static void gen16(uint16_t *x, size_t n, int rank, uint64_t salt, int bf)
{
    float *f = malloc(n * sizeof(float));
    gen(f, n, rank, salt);
    for (size_t i = 0; i < n; i++)
        x[i] = bf ? chorus__f32_to_bf16(f[i] * 1e-3f) : chorus__f32_to_f16(f[i] * 1e-3f);
    free(f);
}

int main(int argc, char **argv)
{
    chorus_comm *c;
    ASSERT_OK(chorus_init(&c));
    test_rank = chorus_rank(c);
    int n = chorus_size(c), me = chorus_rank(c);
    const size_t sizes[] = {1, 7, 1000, 65537, 1 << 20};
    for (int a = 1; a < argc; a++) {
        /* "auto": the default, the rules pick by size */
        test_set_config(c, "CHORUS_ALGO_ALLREDUCE", strcmp(argv[a], "auto") ? argv[a] : NULL);
        for (size_t si = 0; si < sizeof(sizes) / sizeof(sizes[0]); si++) {
            size_t cnt = sizes[si];
            for (int dt = 0; dt < 3; dt++) {
                chorus_dtype t = dt == 0   ? CHORUS_FLOAT32
                                 : dt == 1 ? CHORUS_FLOAT16
                                           : CHORUS_BFLOAT16;
                size_t es = chorus_dtype_size(t);
                char *mine = malloc(cnt * es), *want = malloc(cnt * es), *other = malloc(cnt * es);
                uint64_t salt = si * 10 + (uint64_t)dt;
                if (t == CHORUS_FLOAT32)
                    gen((float *)mine, cnt, me, salt);
                else
                    gen16((uint16_t *)mine, cnt, me, salt, t == CHORUS_BFLOAT16);
                /* serial fold in rank order */
                for (int r = 0; r < n; r++) {
                    if (t == CHORUS_FLOAT32)
                        gen((float *)other, cnt, r, salt);
                    else
                        gen16((uint16_t *)other, cnt, r, salt, t == CHORUS_BFLOAT16);
                    if (r == 0)
                        memcpy(want, other, cnt * es);
                    else
                        chorus__reduce(want, want, other, cnt, t, CHORUS_SUM);
                }
                ASSERT_OK(chorus_allreduce(c, mine, mine, cnt, t, CHORUS_SUM));
                if (memcmp(mine, want, cnt * es))
                    test_fail(__FILE__, __LINE__,
                              "algo %s, %zu x %s: result differs from the rank-order fold", argv[a],
                              cnt, t == CHORUS_FLOAT32 ? "f32" : "f16/bf16");
                /* an inner range reduced alone gives the same bits */
                if (cnt > 10) {
                    size_t lo = cnt / 3, len = cnt / 3;
                    char *part = malloc(len * es);
                    if (t == CHORUS_FLOAT32)
                        gen((float *)other, cnt, me, salt);
                    else
                        gen16((uint16_t *)other, cnt, me, salt, t == CHORUS_BFLOAT16);
                    memcpy(part, other + lo * es, len * es);
                    ASSERT_OK(chorus_allreduce(c, part, part, len, t, CHORUS_SUM));
                    if (memcmp(part, want + lo * es, len * es))
                        test_fail(__FILE__, __LINE__,
                                  "algo %s: elements %zu.. reduced alone differ from the same "
                                  "elements in a buffer of %zu",
                                  argv[a], lo, cnt);
                    free(part);
                }
                free(mine);
                free(want);
                free(other);
            }
        }
    }
    ASSERT_OK(chorus_barrier(c));
    if (me == 0) printf("canonical order holds on %d ranks for:", n);
    for (int a = 1; a < argc && me == 0; a++) printf(" %s", argv[a]);
    if (me == 0) printf("\n");
    chorus_finalize(c);
    return 0;
}

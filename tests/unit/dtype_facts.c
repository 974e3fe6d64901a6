/* dtype_facts.c - base/dtype.c: sizes and names of every dtype, and identity elements that
 * really are identities: x op identity == x, bit for bit, for random x of every dtype and op
 * (checked through the reduction kernels, which know nothing of dtype.c). */
#include "base/base.h"
#include "harness.h"
#include "reduce/reduce.h"

int main(void)
{
    static const size_t sizes[CHORUS_DTYPE_COUNT] = {
        [CHORUS_INT8] = 1,    [CHORUS_UINT8] = 1,    [CHORUS_INT32] = 4,   [CHORUS_INT64] = 8,
        [CHORUS_FLOAT16] = 2, [CHORUS_BFLOAT16] = 2, [CHORUS_FLOAT32] = 4, [CHORUS_FLOAT64] = 8};
    static const char *names[CHORUS_DTYPE_COUNT] = {
        [CHORUS_INT8] = "int8",       [CHORUS_UINT8] = "uint8",     [CHORUS_INT32] = "int32",
        [CHORUS_INT64] = "int64",     [CHORUS_FLOAT16] = "float16", [CHORUS_BFLOAT16] = "bfloat16",
        [CHORUS_FLOAT32] = "float32", [CHORUS_FLOAT64] = "float64"};
    for (int t = 0; t < CHORUS_DTYPE_COUNT; t++) {
        ASSERT_EQ(chorus_dtype_size((chorus_dtype)t), sizes[t]);
        ASSERT(!strcmp(chorus__dtype_name(t), names[t]));
        ASSERT_EQ(chorus__dtype_is_float((chorus_dtype)t), t >= CHORUS_FLOAT16);
    }
    ASSERT_EQ(chorus_dtype_size(CHORUS_DTYPE_COUNT), 0);
    ASSERT_EQ(chorus_dtype_size((chorus_dtype)-1), 0);
    ASSERT(!strcmp(chorus__dtype_name(CHORUS_DTYPE_COUNT), "unknown-dtype"));
    unsigned char e[8];
    ASSERT_EQ(chorus__dtype_identity(CHORUS_DTYPE_COUNT, CHORUS_SUM, e), -1);
    ASSERT_EQ(chorus__dtype_identity(CHORUS_FLOAT32, CHORUS_OP_COUNT, e), -1);

    enum { N = 4096 };
    uint64_t s = 7;
    for (int t = 0; t < CHORUS_DTYPE_COUNT; t++)
        for (int op = 0; op < CHORUS_OP_COUNT; op++) {
            size_t es = sizes[t];
            if (t >= CHORUS_FLOAT16 && chorus__op_is_bitwise(op)) { /* integers only */
                ASSERT_EQ(chorus__dtype_identity((chorus_dtype)t, (chorus_op)op, e), -1);
                continue;
            }
            unsigned char x[N * 8], id[N * 8], out[N * 8];
            for (size_t i = 0; i < N * es; i++) x[i] = (unsigned char)test_rand(&s);
            if (t >= CHORUS_FLOAT16) /* no NaNs: they compare unequal to themselves */
                for (size_t i = 0; i < N; i++) {
                    unsigned char *top = x + i * es + es - 1;
                    *top &= 0x3f; /* exponent well below all-ones: finite, either sign */
                    if (test_rand(&s) & 1) *top |= 0x80;
                }
            chorus__dtype_fill_identity(id, N, (chorus_dtype)t, (chorus_op)op);
            ASSERT_EQ(chorus__dtype_identity((chorus_dtype)t, (chorus_op)op, e), 0);
            ASSERT(!memcmp(id, e, es) && !memcmp(id + (N - 1) * es, e, es));
            for (int side = 0; side < 2; side++) {
                if (side == 0)
                    chorus__reduce(out, x, id, N, (chorus_dtype)t, (chorus_op)op);
                else
                    chorus__reduce(out, id, x, N, (chorus_dtype)t, (chorus_op)op);
                for (size_t i = 0; i < N; i++) {
                    const unsigned char *xi = x + i * es, *oi = out + i * es;
                    if (!memcmp(oi, xi, es)) continue;
                    /* -0.0 + +0.0 is +0.0: the one float whose sum with 0 changes its bits */
                    int neg_zero = t >= CHORUS_FLOAT16 && (op == CHORUS_SUM || op == CHORUS_AVG) &&
                                   xi[es - 1] == 0x80;
                    for (size_t b = 0; neg_zero && b + 1 < es; b++) neg_zero = xi[b] == 0;
                    int pos_zero = 1;
                    for (size_t b = 0; b < es; b++) pos_zero &= oi[b] == 0;
                    if (!(neg_zero && pos_zero))
                        test_fail(__FILE__, __LINE__, "%s op %d: element %zu changed", names[t], op,
                                  i);
                }
            }
        }
    printf("dtype facts: sizes, names and identities of %d dtypes x %d ops\n", CHORUS_DTYPE_COUNT,
           CHORUS_OP_COUNT);
    return 0;
}

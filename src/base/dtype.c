/*
 * dtype.c - facts about the element types of chorus_dtype: size, name, whether it is a
 * floating-point type, and the identity element of each reduction op. One table, so that a
 * new dtype is one row here plus its kernels in src/reduce.
 */
#include <string.h>

#include "base/base.h"

typedef struct dtype_row {
    const char *name;
    unsigned char size;
    unsigned char is_float;
    /* identity bit patterns (little end first, `size` bytes used): prod, min, max */
    uint64_t one, largest, smallest;
} dtype_row;

/* min's identity is the largest value (+inf for floats), max's the smallest (-inf). */
static const dtype_row rows[CHORUS_DTYPE_COUNT] = {
    [CHORUS_INT8] = {"int8", 1, 0, 1, 0x7f, 0x80},
    [CHORUS_UINT8] = {"uint8", 1, 0, 1, 0xff, 0},
    [CHORUS_INT32] = {"int32", 4, 0, 1, 0x7fffffffu, 0x80000000u},
    [CHORUS_INT64] = {"int64", 8, 0, 1, 0x7fffffffffffffffull, 0x8000000000000000ull},
    [CHORUS_FLOAT16] = {"float16", 2, 1, 0x3c00, 0x7c00, 0xfc00},
    [CHORUS_BFLOAT16] = {"bfloat16", 2, 1, 0x3f80, 0x7f80, 0xff80},
    [CHORUS_FLOAT32] = {"float32", 4, 1, 0x3f800000u, 0x7f800000u, 0xff800000u},
    [CHORUS_FLOAT64] = {"float64", 8, 1, 0x3ff0000000000000ull, 0x7ff0000000000000ull,
                        0xfff0000000000000ull},
};

static const dtype_row *row(int t)
{
    return t >= 0 && t < CHORUS_DTYPE_COUNT ? &rows[t] : NULL;
}

size_t chorus_dtype_size(chorus_dtype t)
{
    const dtype_row *d = row((int)t);
    return d ? d->size : 0;
}

const char *chorus__dtype_name(int dtype)
{
    const dtype_row *d = row(dtype);
    return d ? d->name : "unknown-dtype";
}

const char *chorus_dtype_name(int t)
{
    const dtype_row *d = row(t);
    return d ? d->name : NULL;
}

int chorus__op_is_bitwise(chorus_op op)
{
    return op == CHORUS_BAND || op == CHORUS_BOR || op == CHORUS_BXOR;
}

int chorus__dtype_is_float(chorus_dtype t)
{
    const dtype_row *d = row((int)t);
    return d ? d->is_float : 0;
}

int chorus__dtype_identity(chorus_dtype t, chorus_op op, void *elem)
{
    const dtype_row *d = row((int)t);
    if (!d || (unsigned)op >= CHORUS_OP_COUNT || (d->is_float && chorus__op_is_bitwise(op)))
        return -1;
    uint64_t bits = op == CHORUS_PROD   ? d->one
                    : op == CHORUS_MIN  ? d->largest
                    : op == CHORUS_MAX  ? d->smallest
                    : op == CHORUS_BAND ? ~(uint64_t)0
                                        : 0; /* sum, avg, or, xor: 0 and +0.0 are all-zero bits */
    unsigned char *p = elem;
    for (unsigned i = 0; i < d->size; i++) p[i] = (unsigned char)(bits >> (8 * i));
    return 0;
}

void chorus__dtype_fill_identity(void *dst, size_t n, chorus_dtype t, chorus_op op)
{
    unsigned char e[8];
    if (chorus__dtype_identity(t, op, e)) return;
    size_t es = chorus_dtype_size(t), total = n * es;
    char *p = dst;
    if (!total) return;
    memcpy(p, e, es);
    for (size_t done = es; done < total; done *= 2) /* doubling: a few large copies */
        memcpy(p + done, p, done < total - done ? done : total - done);
}

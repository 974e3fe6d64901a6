/* names.c - the public names of dtypes and ops (include/chorus.h), for bindings that read
 * them from the library instead of copying the enumerations. */
#include <stddef.h>

#include "wire/wire.h"

const char *chorus_dtype_name(int t)
{
    return t >= 0 && t < CHORUS_DTYPE_COUNT ? chorus__dtype_name(t) : NULL;
}

const char *chorus_op_name(int op)
{
    return op >= 0 && op < CHORUS_OP_COUNT ? chorus__op_name(op) : NULL;
}

/* names.c - the public names of ops (include/chorus.h), for bindings that read them from the
 * library instead of copying the enumeration (dtype names are src/base/dtype.c's). */
#include <stddef.h>

#include "wire/wire.h"

const char *chorus_op_name(int op)
{
    return op >= 0 && op < CHORUS_OP_COUNT ? chorus__op_name(op) : NULL;
}

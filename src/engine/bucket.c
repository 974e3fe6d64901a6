/* bucket.c - the one bucketing rule for gradients, shared by the C trainer (nn/dist.c) and
 * chorus.torch's DistributedOptimizer. */
#include "base/base.h"
#include "chorus/engine.h"

chorus_result chorus_engine_bucket_plan(const size_t *bytes, int n, size_t bucket_bytes,
                                        size_t first_bucket_bytes, int *bucket_of, int *nbuckets)
{
    if (nbuckets) *nbuckets = 0;
    if (n < 0 || (n > 0 && (!bytes || !bucket_of)))
        return chorus__fail(chorus__init_errbuf(), CHORUS_ERR_INVALID_ARG,
                            "chorus_engine_bucket_plan: n = %d with bytes %s and bucket_of %s "
                            "(n must be >= 0, and both arrays given when n > 0)",
                            n, bytes ? "given" : "NULL", bucket_of ? "given" : "NULL");
    int cur = -1, count = 0;
    size_t filled = 0;
    for (int i = n - 1; i >= 0; i--) {
        if (bytes[i] == 0) {
            bucket_of[i] = -1;
            continue;
        }
        if (cur < 0) {
            cur = count++;
            filled = 0;
        }
        bucket_of[i] = cur;
        filled += bytes[i];
        size_t cap = cur == 0 ? first_bucket_bytes : bucket_bytes;
        if (filled >= cap) cur = -1;
    }
    if (nbuckets) *nbuckets = count;
    return CHORUS_OK;
}

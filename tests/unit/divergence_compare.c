/* divergence_compare.c - coll/divergence.c's rows and comparison, without a job: equal rows
 * agree; a changed tensor is named with the ranks outside the largest group (3 ranks), or
 * outside the lowest rank's group on a tie (2 ranks, and 2+2 of 4), by their labels; three
 * groups name the two smaller ones; -0.0 against 0.0 differs (the hash is of the bytes);
 * tensor lists that differ by a name or a size are reported as such. */
#include <string.h>

#include "chorus.h"
#include "harness.h"

enum { NT = 3, W = NT + 2 };

static float a[4] = {1, 2, 3, 4}, b[2] = {0.5f, 0}, c[1] = {7};
static const char *names[NT] = {"fc.weight", "fc.bias", "scale"};

/* Rank r's row (label 10 + r), with tensor `which` changed when `changed` is set. */
static void row(uint64_t *out, int r, int changed, int which)
{
    float a2[4], b2[2], c2[1];
    memcpy(a2, a, sizeof(a));
    memcpy(b2, b, sizeof(b));
    memcpy(c2, c, sizeof(c));
    if (changed) (which == 0 ? a2 : which == 1 ? b2 : c2)[0] += 1.0f;
    const void *bufs[NT] = {a2, b2, c2};
    size_t bytes[NT] = {sizeof(a2), sizeof(b2), sizeof(c2)};
    chorus_divergence_row(NT, bufs, bytes, names, 10 + r, out);
}

int main(void)
{
    uint64_t rows[4 * W];
    long t;
    int differ[4];
    char msg[512];
    for (int r = 0; r < 3; r++) row(rows + r * W, r, 0, 0);
    ASSERT_EQ(chorus_divergence_compare(rows, 3, NT, names, 5, &t, differ, msg, sizeof(msg)), 0);
    ASSERT_EQ(t, -1);

    /* 3 ranks, rank 1 changed: named against the majority, by label */
    row(rows + 1 * W, 1, 1, 1);
    ASSERT_EQ(chorus_divergence_compare(rows, 3, NT, names, 5, &t, differ, msg, sizeof(msg)), 1);
    ASSERT_EQ(t, 1);
    ASSERT(differ[0] == 0 && differ[1] == 1 && differ[2] == 0);
    ASSERT(strstr(msg, "weights diverged at step 5: tensor 'fc.bias' differs on rank 11 from "
                       "ranks 10,12 (the reference is the largest group of equal ranks; 1 of 3 "
                       "tensors differ; hashes: ranks 10,12 "));

    /* 2 ranks, rank 0 changed: no majority, rank 1 is named against rank 0 */
    row(rows, 0, 1, 2);
    row(rows + W, 1, 0, 0);
    ASSERT_EQ(chorus_divergence_compare(rows, 2, NT, names, 9, &t, differ, msg, sizeof(msg)), 1);
    ASSERT(t == 2 && differ[0] == 0 && differ[1] == 1);
    ASSERT(strstr(msg, "tensor 'scale' differs on rank 11 from rank 10 (no majority: the "
                       "reference is the group of the lowest rank;"));

    /* 4 ranks, 2 against 2: a tie, ranks 2,3 named */
    for (int r = 0; r < 4; r++) row(rows + r * W, r, r >= 2, 0);
    ASSERT_EQ(chorus_divergence_compare(rows, 4, NT, names, 1, &t, differ, msg, sizeof(msg)), 1);
    ASSERT(strstr(msg, "differs on ranks 12,13 from ranks 10,11 (no majority"));

    /* 4 ranks, three groups: 0,3 equal, 1 and 2 each their own */
    row(rows, 0, 0, 0);
    row(rows + W, 1, 1, 0);
    row(rows + 2 * W, 2, 1, 0);
    rows[2 * W + 2] ^= 1; /* rank 2's hash of fc.weight differs from rank 1's too */
    row(rows + 3 * W, 3, 0, 0);
    ASSERT_EQ(chorus_divergence_compare(rows, 4, NT, names, 1, &t, differ, msg, sizeof(msg)), 1);
    ASSERT(differ[0] == 0 && differ[1] == 1 && differ[2] == 1 && differ[3] == 0);
    ASSERT(
        strstr(msg, "tensor 'fc.weight' differs on ranks 11,12 from ranks 10,13 (the reference"));

    /* bitwise: -0.0 is not 0.0 */
    float z = 0.0f, nz = -0.0f;
    const void *zb[1] = {&z}, *nzb[1] = {&nz};
    size_t four[1] = {4};
    chorus_divergence_row(1, zb, four, names, 0, rows);
    chorus_divergence_row(1, nzb, four, names, 1, rows + 3);
    ASSERT_EQ(chorus_divergence_compare(rows, 2, 1, names, 1, &t, differ, msg, sizeof(msg)), 1);

    /* tensor lists: another name, then another size */
    const char *other[NT] = {"fc.weight", "fc.bias", "gain"};
    const void *bufs[NT] = {a, b, c};
    size_t bytes[NT] = {sizeof(a), sizeof(b), sizeof(c)};
    chorus_divergence_row(NT, bufs, bytes, names, 0, rows);
    chorus_divergence_row(NT, bufs, bytes, other, 1, rows + W);
    ASSERT_EQ(chorus_divergence_compare(rows, 2, NT, names, 3, &t, differ, msg, sizeof(msg)), 2);
    ASSERT_EQ(t, -1);
    ASSERT(strstr(msg, "divergence check at step 3: the ranks hold different tensor lists (count, "
                       "names or sizes): rank 1 differs from rank 0"));
    bytes[2] = 0;
    chorus_divergence_row(NT, bufs, bytes, names, 1, rows + W);
    ASSERT_EQ(chorus_divergence_compare(rows, 2, NT, names, 3, NULL, NULL, msg, sizeof(msg)), 2);
    /* a short buffer still ends in a NUL */
    ASSERT_EQ(chorus_divergence_compare(rows, 2, NT, names, 3, NULL, NULL, msg, 16), 2);
    ASSERT_EQ(strlen(msg), 15);
    return 0;
}

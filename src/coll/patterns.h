/*
 * patterns.h - the communication patterns the algorithms share, as pure arithmetic on ranks
 * and counts (no I/O): ring neighbours, the binomial tree, recursive-doubling partners, the
 * split of a buffer into one chunk per rank, and the cut of a chunk into pipeline segments.
 * Every algorithm takes these from here, so there is one definition of each.
 */
#ifndef CHORUS_PATTERNS_H
#define CHORUS_PATTERNS_H

#include <stddef.h>

/* a mod n in [0, n), also for negative a. */
static inline int chorus__mod(int a, int n)
{
    return ((a % n) + n) % n;
}

/* ---- ring: rank r sends to r+1 and receives from r-1 --------------------------------- */

static inline int chorus__ring_next(int r, int n)
{
    return (r + 1) % n;
}
static inline int chorus__ring_prev(int r, int n)
{
    return (r + n - 1) % n;
}

/* ---- chunks: count elements split in n chunks whose sizes differ by at most one ------ */

static inline size_t chorus__chunk_off(size_t count, int n, int i)
{
    size_t q = count / (size_t)n, r = count % (size_t)n;
    return q * (size_t)i + ((size_t)i < r ? (size_t)i : r);
}
static inline size_t chorus__chunk_cnt(size_t count, int n, int i)
{
    return count / (size_t)n + ((size_t)i < count % (size_t)n ? 1 : 0);
}

/* ---- segments: a chunk of cnt elements cut in pieces of segc (the last ones shorter or
 * empty, so that every chunk has the same number of segments) ------------------------- */

static inline size_t chorus__seg_lo(size_t cnt, size_t segc, int k)
{
    size_t lo = (size_t)k * segc;
    return lo < cnt ? lo : cnt;
}
static inline size_t chorus__seg_n(size_t cnt, size_t segc, int k)
{
    return chorus__seg_lo(cnt, segc, k + 1) - chorus__seg_lo(cnt, segc, k);
}

/* ---- binomial tree rooted at root ------------------------------------------------------
 * In ranks relative to the root (v = r - root mod n), the parent of v is v without its lowest
 * set bit; the children of v are v + m for the powers of two m below that bit (below n for the
 * root) with v + m < n. */

/* The parent of r (-1 for the root); *below is the bit under which r's children hang. */
static inline int chorus__tree_parent(int r, int root, int n, int *below)
{
    int v = chorus__mod(r - root, n), mask = 1;
    while (mask < n && !(v & mask)) mask <<= 1;
    *below = mask;
    return v ? (v - mask + root) % n : -1;
}
/* The child of r at bit m (m < below), or -1 when v + m is past the last rank. */
static inline int chorus__tree_child(int r, int root, int n, int m)
{
    int v = chorus__mod(r - root, n);
    return v + m < n ? (v + m + root) % n : -1;
}

/* ---- recursive doubling over any n -----------------------------------------------------
 * With n = p2 + rem (p2 the largest power of two <= n), the first 2*rem ranks pair up (even
 * folds into odd) so that p2 "virtual" ranks remain; virtual rank v exchanges with v ^ mask
 * for mask = 1, 2, ... < p2. */

static inline int chorus__pow2_floor(int n)
{
    int p = 1;
    while (p * 2 <= n) p *= 2;
    return p;
}
/* Virtual rank of r, or -1 for the even ranks that sit the rounds out. */
static inline int chorus__rd_vrank(int r, int rem)
{
    return r < 2 * rem ? (r % 2 ? r / 2 : -1) : r - rem;
}
/* The real rank of virtual rank v. */
static inline int chorus__rd_rank(int v, int rem)
{
    return v < rem ? v * 2 + 1 : v + rem;
}

#endif

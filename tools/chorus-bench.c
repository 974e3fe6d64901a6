/*
 * chorus-bench - collective benchmark in the manner of nccl-tests.
 *
 *   chorus-run -np 2 chorus-bench -c allreduce -b 8 -e 256M -f 2 -d float32 -o sum
 *
 * For each size: a verified pass (inputs chosen so the exact answer is known), then timed
 * iterations, each preceded by a barrier; an iteration's time is the slowest rank's, and the
 * table shows the median. algbw = size / time; busbw = algbw * 2(n-1)/n for allreduce,
 * (n-1)/n for allgather, reduce-scatter and alltoall, 1 for broadcast (GB = 1e9).
 * Size is the bytes of the larger buffer of one rank (allgather: the output; reduce-scatter
 * and alltoall: the input), as nccl-tests reports it.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/base.h"
#include "reduce/reduce.h"
#include "wire/wire.h"

enum { C_ALLREDUCE, C_BROADCAST, C_ALLGATHER, C_REDUCE_SCATTER, C_ALLTOALL, C_COUNT };
static const char *coll_names[] = {"allreduce", "broadcast", "allgather", "reduce_scatter",
                                   "alltoall"};

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void usage(void)
{
    fprintf(stderr,
            "usage: chorus-run -np N chorus-bench [options]\n"
            "  -c COLL   allreduce (default), broadcast, allgather, reduce_scatter, alltoall\n"
            "  -b SIZE   smallest size in bytes (default 8; K, M, G suffixes)\n"
            "  -e SIZE   largest size (default 64M)\n"
            "  -f F      multiply the size by F each row (default 2)\n"
            "  -d DTYPE  int8 uint8 int32 int64 float16 bfloat16 float32 (default) float64\n"
            "  -o OP     sum (default) prod min max avg\n"
            "  -r ROOT   broadcast root (default 0)\n"
            "  -n ITERS  timed iterations per size (default: by size)\n"
            "  -w ITERS  warm-up iterations per size (default: by size)\n"
            "  -z        check every timed iteration's result, not only the verified pass\n"
            "  --version print the version and exit\n");
}

/* Small integer input: every reduction order gives the same exact answer. */
static long long val(int rank, size_t i, chorus_op op)
{
    if (op == CHORUS_PROD) return ((i + (size_t)rank) % 5 == 0) ? 2 : 1;
    return (long long)((i * 7 + (size_t)rank * 3) % 5);
}

static void put(void *b, size_t i, chorus_dtype t, long long v)
{
    switch (t) {
    case CHORUS_INT8: ((int8_t *)b)[i] = (int8_t)v; break;
    case CHORUS_UINT8: ((uint8_t *)b)[i] = (uint8_t)v; break;
    case CHORUS_INT32: ((int32_t *)b)[i] = (int32_t)v; break;
    case CHORUS_INT64: ((int64_t *)b)[i] = v; break;
    case CHORUS_FLOAT16: ((uint16_t *)b)[i] = chorus__f32_to_f16((float)v); break;
    case CHORUS_BFLOAT16: ((uint16_t *)b)[i] = chorus__f32_to_bf16((float)v); break;
    case CHORUS_FLOAT32: ((float *)b)[i] = (float)v; break;
    case CHORUS_FLOAT64: ((double *)b)[i] = (double)v; break;
    default: break;
    }
}

static long long reduce_ref(int n, size_t i, chorus_op op)
{
    long long a = val(0, i, op);
    for (int r = 1; r < n; r++) {
        long long v = val(r, i, op);
        if (op == CHORUS_SUM || op == CHORUS_AVG) a += v;
        if (op == CHORUS_PROD) a *= v;
        if (op == CHORUS_MIN) a = v < a ? v : a;
        if (op == CHORUS_MAX) a = v > a ? v : a;
    }
    return a;
}

typedef struct bench {
    chorus_comm *c;
    int coll, rank, n, root;
    chorus_dtype t;
    chorus_op op;
    size_t es;
    char *send, *recv, *want;
} bench;

/* counts for a size in bytes: returns the element count passed to the call, 0 if too small */
static size_t call_count(const bench *b, size_t bytes)
{
    size_t elems = bytes / b->es;
    if (b->coll == C_ALLGATHER || b->coll == C_REDUCE_SCATTER || b->coll == C_ALLTOALL)
        return elems / (size_t)b->n;
    return elems;
}

static chorus_result run_once(bench *b, size_t count)
{
    switch (b->coll) {
    case C_ALLREDUCE: return chorus_allreduce(b->c, b->send, b->recv, count, b->t, b->op);
    case C_BROADCAST: return chorus_broadcast(b->c, b->recv, count, b->t, b->root);
    case C_ALLGATHER: return chorus_allgather(b->c, b->send, b->recv, count, b->t);
    case C_REDUCE_SCATTER: return chorus_reduce_scatter(b->c, b->send, b->recv, count, b->t, b->op);
    default: return chorus_alltoall(b->c, b->send, b->recv, count, b->t);
    }
}

/* Fills inputs and the expected output for count; returns the output bytes to compare. */
static size_t prepare(bench *b, size_t count)
{
    size_t n = (size_t)b->n;
    switch (b->coll) {
    case C_ALLREDUCE:
        for (size_t i = 0; i < count; i++) {
            put(b->send, i, b->t, val(b->rank, i, b->op));
            put(b->want, i, b->t, reduce_ref(b->n, i, b->op));
        }
        if (b->op == CHORUS_AVG) chorus__reduce_finish(b->want, count, b->t, b->op, b->n);
        return count * b->es;
    case C_BROADCAST:
        for (size_t i = 0; i < count; i++) {
            put(b->want, i, b->t, val(b->root, i, CHORUS_SUM));
            put(b->recv, i, b->t, b->rank == b->root ? val(b->root, i, CHORUS_SUM) : 9);
        }
        return count * b->es;
    case C_ALLGATHER:
        for (size_t i = 0; i < count; i++) put(b->send, i, b->t, val(b->rank, i, CHORUS_SUM));
        for (size_t r = 0; r < n; r++)
            for (size_t i = 0; i < count; i++)
                put(b->want, r * count + i, b->t, val((int)r, i, CHORUS_SUM));
        return count * n * b->es;
    case C_REDUCE_SCATTER:
        for (size_t i = 0; i < count * n; i++) put(b->send, i, b->t, val(b->rank, i, b->op));
        for (size_t i = 0; i < count; i++)
            put(b->want, i, b->t, reduce_ref(b->n, (size_t)b->rank * count + i, b->op));
        if (b->op == CHORUS_AVG) chorus__reduce_finish(b->want, count, b->t, b->op, b->n);
        return count * b->es;
    default:
        for (size_t j = 0; j < n; j++)
            for (size_t i = 0; i < count; i++) {
                put(b->send, j * count + i, b->t, val(b->rank * 31 + (int)j, i, CHORUS_SUM));
                put(b->want, j * count + i, b->t, val((int)j * 31 + b->rank, i, CHORUS_SUM));
            }
        return count * n * b->es;
    }
}

int main(int argc, char **argv)
{
    if (argc == 2 && !strcmp(argv[1], "--version"))
        return printf("chorus-bench %s\n", chorus_version()) < 0;
    bench b = {.coll = C_ALLREDUCE, .t = CHORUS_FLOAT32, .op = CHORUS_SUM};
    size_t minb = 8, maxb = 64u << 20;
    double factor = 2;
    int iters = 0, warm = -1, check_all = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage();
            return 0;
        }
        if (!strcmp(a, "-z")) {
            check_all = 1;
            continue;
        }
        if (!v || a[0] != '-' || strlen(a) != 2) {
            fprintf(stderr, "chorus-bench: unknown or incomplete option '%s'\n", a);
            usage();
            return 2;
        }
        i++;
        switch (a[1]) {
        case 'c':
            b.coll = -1;
            for (int k = 0; k < C_COUNT; k++)
                if (!strcmp(v, coll_names[k]) ||
                    (k == C_REDUCE_SCATTER && !strcmp(v, "reducescatter")))
                    b.coll = k;
            if (b.coll < 0) {
                fprintf(stderr, "chorus-bench: unknown collective '%s'\n", v);
                return 2;
            }
            break;
        case 'b':
        case 'e':
            if (chorus__parse_bytes(v, a[1] == 'b' ? &minb : &maxb)) {
                fprintf(stderr, "chorus-bench: -%c %s is not a size in bytes (e.g. 8, 64K, 1M)\n",
                        a[1], v);
                return 2;
            }
            break;
        case 'f': factor = atof(v); break;
        case 'n': iters = atoi(v); break;
        case 'w': warm = atoi(v); break;
        case 'r': b.root = atoi(v); break;
        case 'd':
            b.t = CHORUS_DTYPE_COUNT;
            for (int k = 0; k < CHORUS_DTYPE_COUNT; k++)
                if (!strcasecmp(v, chorus__dtype_name(k))) b.t = (chorus_dtype)k;
            if (b.t == CHORUS_DTYPE_COUNT) {
                fprintf(stderr, "chorus-bench: unknown dtype '%s'\n", v);
                return 2;
            }
            break;
        case 'o':
            b.op = CHORUS_OP_COUNT;
            for (int k = 0; k < CHORUS_OP_COUNT; k++)
                if (!strcasecmp(v, chorus__op_name(k))) b.op = (chorus_op)k;
            if (b.op == CHORUS_OP_COUNT) {
                fprintf(stderr, "chorus-bench: unknown op '%s'\n", v);
                return 2;
            }
            break;
        default:
            fprintf(stderr, "chorus-bench: unknown option '%s'\n", a);
            usage();
            return 2;
        }
    }
    if (factor <= 1) factor = 2;
    chorus_result r = chorus_init(&b.c);
    if (r != CHORUS_OK) {
        fprintf(stderr, "chorus-bench: chorus_init failed: %s\n  %s\n", chorus_strerror(r),
                chorus_last_error(NULL));
        return 1;
    }
    b.rank = chorus_rank(b.c);
    b.n = chorus_size(b.c);
    b.es = chorus_dtype_size(b.t);
    if (b.root < 0 || b.root >= b.n) {
        if (b.rank == 0) fprintf(stderr, "chorus-bench: root %d out of range\n", b.root);
        return 2;
    }
    size_t cap = maxb + 64 * b.es * (size_t)b.n;
    b.send = chorus__malloc_aligned(cap);
    b.recv = chorus__malloc_aligned(cap);
    b.want = chorus__malloc_aligned(cap);
    if (!b.send || !b.recv || !b.want) {
        fprintf(stderr, "chorus-bench: out of memory for %zu bytes\n", cap);
        return 1;
    }
    memset(b.send, 0, cap);
    memset(b.recv, 0, cap);
    double busf = b.coll == C_ALLREDUCE   ? 2.0 * (b.n - 1) / b.n
                  : b.coll == C_BROADCAST ? 1.0
                                          : (double)(b.n - 1) / b.n;
    if (b.rank == 0) {
        printf("# chorus-bench: %s, %s, %s, %d ranks (%d on this host)%s\n", coll_names[b.coll],
               chorus__dtype_name((int)b.t), chorus__op_name((int)b.op), b.n,
               chorus_local_size(b.c), check_all ? ", every iteration checked" : "");
        printf("# time: median over iterations of the slowest rank; busbw factor %.3f; GB = 1e9\n",
               busf);
        printf("#%13s %12s %8s %12s %12s %12s %6s\n", "size(B)", "count", "iters", "time(us)",
               "algbw(GB/s)", "busbw(GB/s)", "check");
    }
    int failures = 0;
    for (size_t size = minb; size <= maxb; size = (size_t)ceil((double)size * factor)) {
        size_t count = call_count(&b, size);
        if (count == 0) continue;
        size_t bytes = b.coll == C_ALLGATHER || b.coll == C_REDUCE_SCATTER || b.coll == C_ALLTOALL
                           ? count * (size_t)b.n * b.es
                           : count * b.es;
        int it = iters > 0 ? iters : (int)fmin(1000, fmax(5, 3e8 / (double)(bytes + 4096) / 8));
        int wu = warm >= 0 ? warm : (it / 10 > 2 ? it / 10 : 2);
        /* verified pass */
        size_t out_bytes = prepare(&b, count);
        r = run_once(&b, count);
        long long wrong = 0;
        if (r == CHORUS_OK && memcmp(b.recv, b.want, out_bytes)) wrong = 1;
        double *times = malloc(sizeof(double) * (size_t)it);
        for (int k = 0; k < wu + it && r == CHORUS_OK; k++) {
            if (b.coll == C_BROADCAST && b.rank == b.root) { /* root's data is the source */
            }
            r = chorus_barrier(b.c);
            double t0 = chorus__now();
            if (r == CHORUS_OK) r = run_once(&b, count);
            double dt = chorus__now() - t0;
            if (k >= wu) times[k - wu] = dt;
            if (check_all && r == CHORUS_OK && memcmp(b.recv, b.want, out_bytes)) wrong++;
        }
        if (r == CHORUS_OK)
            r = chorus_allreduce(b.c, times, times, (size_t)it, CHORUS_FLOAT64, CHORUS_MAX);
        if (r == CHORUS_OK) r = chorus_allreduce(b.c, &wrong, &wrong, 1, CHORUS_INT64, CHORUS_SUM);
        if (r != CHORUS_OK) {
            fprintf(stderr, "chorus-bench: rank %d: %s failed: %s\n  %s\n", b.rank,
                    coll_names[b.coll], chorus_strerror(r), chorus_last_error(b.c));
            return 1;
        }
        qsort(times, (size_t)it, sizeof(double), cmp_double);
        double t = it % 2 ? times[it / 2] : 0.5 * (times[it / 2 - 1] + times[it / 2]);
        double algbw = (double)bytes / t / 1e9;
        if (b.rank == 0)
            printf("%14zu %12zu %8d %12.2f %12.3f %12.3f %6s\n", bytes, count, it, t * 1e6, algbw,
                   algbw * busf, wrong ? "FAIL" : "ok");
        fflush(stdout);
        failures += wrong != 0;
        free(times);
        if (size == maxb) break;
        if ((size_t)ceil((double)size * factor) > maxb && size < maxb) {
            size = maxb; /* always end with the largest size */
            size = (size_t)((double)size / factor);
        }
    }
    if (b.rank == 0 && failures) printf("# %d size(s) gave WRONG results\n", failures);
    free(b.send);
    free(b.recv);
    free(b.want);
    chorus_finalize(b.c);
    return failures ? 1 : 0;
}

/* mpi_allreduce: Open MPI baseline for chorus-bench.
 *
 * Measures an MPI collective exactly the way chorus-bench measures its own, so the two tables
 * can be put side by side (docs/DESIGN.md section 5, nccl-tests conventions):
 *
 *   for each size S from -b to -e, multiplied by -f each step (bytes, float32, sum):
 *     W warm-up calls, then N timed calls; before each timed call an MPI_Barrier, and the
 *     call's time t_i on this rank is recorded;
 *     the iteration's time is the MAX of t_i over ranks (the array of times is reduced with
 *     MPI_MAX once, after the loop, so the reduction does not disturb the timing);
 *     the reported time is the MEDIAN over the N iterations;
 *     algbw = S / time, busbw = algbw * factor, GB = 1e9, where factor is
 *     2(n-1)/n for allreduce, (n-1)/n for allgather, reduce_scatter and alltoall, 1 for bcast.
 *   Results are checked in a separate, untimed pass with integer-valued floats, so every sum
 *   is exact and the check is an equality.
 *
 * S is the size of the whole vector as in nccl-tests: the allreduce/bcast buffer, the
 * allgather output, the reduce_scatter input and the alltoall send buffer of one rank. For the
 * last three S is rounded down to a multiple of 4*n bytes.
 *
 * Iterations by default: N = clamp(2^30 / S, 10, 1000) and W = clamp(N / 10, 2, 20), so a
 * sweep 4 B .. 64 MiB moves about 1 GiB per size; the warm-up (run with the same barriers)
 * also times one iteration, and N is cut to fit about -T seconds (default 2) per size, but
 * never below 10, so slow cases (oversubscribed ranks) finish too. -n and -w fix N and W.
 *
 * Output: header lines start with '#'; one row per size:
 *   size count time_us algbw_GBps busbw_GBps
 * Exit status 1 if any result was wrong (the row is still printed, the error goes to stderr).
 *
 * Build: mpicc -O2 -o mpi_allreduce bench/mpi_allreduce.c
 * Run:   mpirun -np 2 ./mpi_allreduce -b 4 -e 64M -f 4 [-c allreduce|bcast|allgather|
 *                                                         reduce_scatter|alltoall]
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

enum coll { COLL_ALLREDUCE, COLL_BCAST, COLL_ALLGATHER, COLL_REDUCE_SCATTER, COLL_ALLTOALL };

static const char *coll_names[] = {"allreduce", "bcast", "allgather", "reduce_scatter", "alltoall"};

struct opts {
    enum coll coll;
    size_t min_bytes, max_bytes;
    double factor;
    long iters, warmup; /* 0: adaptive */
    double budget;      /* seconds per size that adaptive iterations aim for */
    int check;
};

/* Parses "4", "64K", "64M", "1G" (powers of 1024). Returns 0 on a malformed value. */
static size_t parse_size(const char *s)
{
    char *end;
    double v = strtod(s, &end);
    if (end == s || v < 0) return 0;
    switch (*end) {
    case 'k':
    case 'K':
        v *= 1024.0;
        end++;
        break;
    case 'm':
    case 'M':
        v *= 1024.0 * 1024.0;
        end++;
        break;
    case 'g':
    case 'G':
        v *= 1024.0 * 1024.0 * 1024.0;
        end++;
        break;
    default: break;
    }
    if (*end == 'B' || *end == 'b') end++;
    return *end ? 0 : (size_t)v;
}

static void usage(const char *argv0)
{
    fprintf(stderr,
            "usage: %s [-c allreduce|bcast|allgather|reduce_scatter|alltoall] [-b min] [-e max]\n"
            "          [-f factor] [-n iters] [-w warmup] [-T seconds] [-k 0|1]\n"
            "  sizes in bytes, K/M/G suffixes (1024-based); defaults -b 4 -e 64M -f 4;\n"
            "  -n/-w 0 (default) pick iterations by size, about -T (2) seconds per size at most;\n"
            "  -k 0 skips the result check\n",
            argv0);
}

static int parse_opts(int argc, char **argv, struct opts *o)
{
    *o = (struct opts){COLL_ALLREDUCE, 4, 64u << 20, 4.0, 0, 0, 2.0, 1};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (a[0] != '-' || !a[1] || a[2] || !v) return -1;
        i++;
        switch (a[1]) {
        case 'c': {
            int found = 0;
            for (int c = 0; c < (int)(sizeof coll_names / sizeof *coll_names); c++)
                if (!strcasecmp(v, coll_names[c])) {
                    o->coll = (enum coll)c;
                    found = 1;
                }
            if (!strcasecmp(v, "reducescatter") || !strcasecmp(v, "reduce_scatter_block")) {
                o->coll = COLL_REDUCE_SCATTER;
                found = 1;
            }
            if (!strcasecmp(v, "broadcast")) {
                o->coll = COLL_BCAST;
                found = 1;
            }
            if (!found) return -1;
            break;
        }
        case 'b': o->min_bytes = parse_size(v); break;
        case 'e': o->max_bytes = parse_size(v); break;
        case 'f': o->factor = atof(v); break;
        case 'n': o->iters = atol(v); break;
        case 'w': o->warmup = atol(v); break;
        case 'T': o->budget = atof(v); break;
        case 'k': o->check = atoi(v); break;
        case 'd':
            if (strcasecmp(v, "float32") && strcasecmp(v, "float")) return -1;
            break;
        case 'o':
            if (strcasecmp(v, "sum")) return -1;
            break;
        default: return -1;
        }
    }
    if (o->min_bytes < 4 || o->max_bytes < o->min_bytes || o->factor <= 1.0 || o->iters < 0 ||
        o->warmup < 0 || o->budget <= 0)
        return -1;
    return 0;
}

static long clampl(long v, long lo, long hi)
{
    return v < lo ? lo : v > hi ? hi : v;
}

static long default_iters(size_t bytes)
{
    return clampl((long)((1ul << 30) / bytes), 10, 1000);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Element counts of the send and receive buffers for a vector of `count` floats. */
static void buffer_counts(enum coll c, size_t count, int n, size_t *scount, size_t *rcount)
{
    *scount = count;
    *rcount = count;
    switch (c) {
    case COLL_ALLREDUCE: break;
    case COLL_BCAST:
        *scount = count;
        *rcount = 0;
        break;
    case COLL_ALLGATHER:
        *scount = count / n;
        *rcount = count;
        break;
    case COLL_REDUCE_SCATTER:
        *scount = count;
        *rcount = count / n;
        break;
    case COLL_ALLTOALL: break;
    }
}

static double bus_factor(enum coll c, int n)
{
    switch (c) {
    case COLL_ALLREDUCE: return 2.0 * (n - 1) / n;
    case COLL_BCAST: return 1.0;
    default: return (double)(n - 1) / n;
    }
}

/* One call of the collective; count is the whole vector in floats. */
static void run_coll(enum coll c, float *sbuf, float *rbuf, size_t count, int n)
{
    switch (c) {
    case COLL_ALLREDUCE:
        MPI_Allreduce(sbuf, rbuf, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        break;
    case COLL_BCAST: MPI_Bcast(sbuf, (int)count, MPI_FLOAT, 0, MPI_COMM_WORLD); break;
    case COLL_ALLGATHER:
        MPI_Allgather(sbuf, (int)(count / n), MPI_FLOAT, rbuf, (int)(count / n), MPI_FLOAT,
                      MPI_COMM_WORLD);
        break;
    case COLL_REDUCE_SCATTER:
        MPI_Reduce_scatter_block(sbuf, rbuf, (int)(count / n), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        break;
    case COLL_ALLTOALL:
        MPI_Alltoall(sbuf, (int)(count / n), MPI_FLOAT, rbuf, (int)(count / n), MPI_FLOAT,
                     MPI_COMM_WORLD);
        break;
    }
}

/* Test values: small integers, exact in float32 and in any order of summation.
 * val(r, i) is what rank r contributes at element i of a reduction. */
static float val(int r, size_t i)
{
    return (float)((r + 1) * (int)(i % 13 + 1));
}

static void fill(enum coll c, float *sbuf, float *rbuf, size_t count, int rank, int n)
{
    size_t sc, rc, blk = count / n;
    buffer_counts(c, count, n, &sc, &rc);
    for (size_t i = 0; i < rc; i++) rbuf[i] = -1.0f;
    switch (c) {
    case COLL_ALLREDUCE:
    case COLL_REDUCE_SCATTER:
        for (size_t i = 0; i < sc; i++) sbuf[i] = val(rank, i);
        break;
    case COLL_BCAST:
        for (size_t i = 0; i < sc; i++) sbuf[i] = rank == 0 ? val(0, i) : -1.0f;
        break;
    case COLL_ALLGATHER: /* my block, as it will sit at offset rank*blk of the output */
        for (size_t i = 0; i < sc; i++) sbuf[i] = val(rank, rank * blk + i);
        break;
    case COLL_ALLTOALL: /* block j goes to rank j: encode (source, destination, index) */
        for (size_t j = 0; j < (size_t)n; j++)
            for (size_t i = 0; i < blk; i++)
                sbuf[j * blk + i] = (float)((rank * n + (int)j) * 16 + (int)(i % 16));
        break;
    }
}

/* Returns the number of wrong elements on this rank. */
static long verify(enum coll c, const float *sbuf, const float *rbuf, size_t count, int rank, int n)
{
    size_t blk = count / n;
    long wrong = 0;
    float tri = (float)(n * (n + 1) / 2); /* sum over r of (r+1) */
    switch (c) {
    case COLL_ALLREDUCE:
        for (size_t i = 0; i < count; i++) wrong += rbuf[i] != tri * (float)(i % 13 + 1);
        break;
    case COLL_BCAST:
        for (size_t i = 0; i < count; i++) wrong += sbuf[i] != val(0, i);
        break;
    case COLL_ALLGATHER:
        for (size_t i = 0; i < blk * n; i++) wrong += rbuf[i] != val((int)(i / blk), i);
        break;
    case COLL_REDUCE_SCATTER:
        for (size_t i = 0; i < blk; i++)
            wrong += rbuf[i] != tri * (float)((rank * blk + i) % 13 + 1);
        break;
    case COLL_ALLTOALL:
        for (size_t j = 0; j < (size_t)n; j++)
            for (size_t i = 0; i < blk; i++)
                wrong += rbuf[j * blk + i] != (float)(((int)j * n + rank) * 16 + (int)(i % 16));
        break;
    }
    return wrong;
}

int main(int argc, char **argv)
{
    int rank, n, failed = 0;
    struct opts o;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    if (parse_opts(argc, argv, &o)) {
        if (rank == 0) usage(argv[0]);
        MPI_Finalize();
        return 2;
    }

    size_t max_count = o.max_bytes / sizeof(float), sc, rc;
    buffer_counts(o.coll, max_count, n, &sc, &rc);
    float *sbuf = malloc((sc ? sc : 1) * sizeof(float));
    float *rbuf = malloc((rc ? rc : 1) * sizeof(float));
    long max_iters = o.iters ? o.iters : default_iters(4); /* the most any size gets */
    double *times = malloc(max_iters * sizeof(double));
    double *tmax = malloc(max_iters * sizeof(double));
    if (!sbuf || !rbuf || !times || !tmax) {
        fprintf(stderr, "mpi_allreduce: out of memory for %zu-byte buffers\n", o.max_bytes);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }

    if (rank == 0) {
        int len;
        char version[MPI_MAX_LIBRARY_VERSION_STRING];
        MPI_Get_library_version(version, &len);
        version[strcspn(version, "\n,")] = 0;
        printf("# mpi_allreduce: %s, %d ranks, float32 sum, %s\n", coll_names[o.coll], n, version);
        printf("# time = median over iterations of the max over ranks; barrier before each call;"
               " GB = 1e9; busbw factor %.4f\n",
               bus_factor(o.coll, n));
        if (o.iters)
            printf("# iterations %ld, check %s\n", o.iters, o.check ? "on" : "off");
        else
            printf("# iterations clamp(2^30/size, 10, 1000) cut to ~%gs per size (min 10), "
                   "warm-up clamp(iters/10, 2, 20), check %s\n",
                   o.budget, o.check ? "on" : "off");
        printf("# %10s %12s %12s %11s %11s\n", "size", "count", "time_us", "algbw_GBps",
               "busbw_GBps");
        fflush(stdout);
    }

    for (double s = (double)o.min_bytes; s <= (double)o.max_bytes * 1.000001; s *= o.factor) {
        size_t count = (size_t)s / sizeof(float);
        if (o.coll == COLL_ALLGATHER || o.coll == COLL_REDUCE_SCATTER || o.coll == COLL_ALLTOALL)
            count -= count % n;
        if (count == 0) continue;
        size_t bytes = count * sizeof(float);
        long iters = o.iters ? o.iters : default_iters(bytes);
        long warmup = o.warmup ? o.warmup : clampl(iters / 10, 2, 20);

        /* Check pass: untimed, fresh buffers. */
        long wrong = 0;
        if (o.check) {
            fill(o.coll, sbuf, rbuf, count, rank, n);
            run_coll(o.coll, sbuf, rbuf, count, n);
            long mine = verify(o.coll, sbuf, rbuf, count, rank, n);
            MPI_Allreduce(&mine, &wrong, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
        }

        /* Timed pass. Buffers keep their contents (allreduce reads sbuf and writes rbuf, so
         * values do not grow). */
        fill(o.coll, sbuf, rbuf, count, rank, n);
        double w0 = MPI_Wtime();
        for (long i = 0; i < warmup; i++) {
            MPI_Barrier(MPI_COMM_WORLD);
            run_coll(o.coll, sbuf, rbuf, count, n);
        }
        double per_iter = (MPI_Wtime() - w0) / warmup;
        MPI_Allreduce(MPI_IN_PLACE, &per_iter, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        if (!o.iters && per_iter * iters > o.budget)
            iters = clampl((long)(o.budget / per_iter), 10, iters);
        for (long i = 0; i < iters; i++) {
            MPI_Barrier(MPI_COMM_WORLD);
            double t0 = MPI_Wtime();
            run_coll(o.coll, sbuf, rbuf, count, n);
            times[i] = MPI_Wtime() - t0;
        }
        MPI_Reduce(times, tmax, (int)iters, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);

        if (rank == 0) {
            qsort(tmax, iters, sizeof(double), cmp_double);
            double t = iters % 2 ? tmax[iters / 2] : 0.5 * (tmax[iters / 2 - 1] + tmax[iters / 2]);
            double algbw = (double)bytes / t / 1e9;
            printf("%12zu %12zu %12.2f %11.3f %11.3f\n", bytes, count, t * 1e6, algbw,
                   algbw * bus_factor(o.coll, n));
            if (wrong) {
                fprintf(stderr, "mpi_allreduce: %s of %zu bytes: %ld wrong elements\n",
                        coll_names[o.coll], bytes, wrong);
                failed = 1;
            }
            fflush(stdout);
        }
    }

    free(sbuf);
    free(rbuf);
    free(times);
    free(tmax);
    MPI_Finalize();
    return failed;
}

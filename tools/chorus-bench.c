/*
 * chorus-bench - collective benchmark with the flags and the output of nccl-tests.
 *
 *   chorus-run -np 2 chorus-bench -b 8 -e 256M -f 2 -d float -o sum          (allreduce)
 *   chorus-run -np 2 chorus-bench --coll broadcast -r 1 -b 1K -e 1M
 *
 * For each size: a verified pass of each variant (inputs chosen so the exact answer is known;
 * -c 0 skips it), then warm-up and timed iterations, each preceded by a barrier. A rank's time
 * of an iteration is combined over ranks as -a says (nccl-tests' meaning: 0 rank 0's, 1 the
 * average, 2 the fastest, 3 the slowest) and the table shows the median over iterations.
 * algbw = size / time; busbw = algbw * 2(n-1)/n for allreduce, (n-1)/n for allgather,
 * reduce-scatter and alltoall, 1 for broadcast (GB = 1e9). Size is the bytes of the larger
 * buffer of one rank (allgather: the output; reduce-scatter and alltoall: the input), as
 * nccl-tests reports it. Out-of-place passes different send and receive buffers, in-place the
 * same one; a variant Chorus has no call for (out-of-place broadcast, in-place allgather and
 * reduce-scatter) shows N/A, and the closing average is over the variants measured.
 *
 * --algo a,b,... runs every size once per algorithm (CHORUS_ALGO_<COLL> set on the communicator,
 * "auto" for the rules); --plot out.png draws busbw against size, one line per algorithm, type
 * and op measured, with gnuplot (a subprocess; its absence or an unwritable path is an error
 * before anything is measured).
 */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "chorus.h"

enum { C_ALLREDUCE, C_BROADCAST, C_ALLGATHER, C_REDUCE_SCATTER, C_ALLTOALL, C_COUNT };
static const char *coll_names[] = {"allreduce", "broadcast", "allgather", "reduce_scatter",
                                   "alltoall"};

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Small integer input: every reduction order gives the same exact answer. */
static long long val(int rank, size_t i, chorus_op op)
{
    if (op == CHORUS_PROD) return ((i + (size_t)rank) % 5 == 0) ? 2 : 1;
    return (long long)((i * 7 + (size_t)rank * 3) % 5);
}

/* f rounded to nearest even at bit `drop` of its float32 encoding: the top bits of the result
 * are the narrower encoding's exponent and mantissa for a normal value. */
static uint32_t round_bits(float f, int drop)
{
    uint32_t x;
    memcpy(&x, &f, sizeof(x));
    uint32_t half = 1u << (drop - 1), rest = x & ((half << 1) - 1), keep = x >> drop;
    return keep + (rest > half || (rest == half && (keep & 1)));
}

/* The float16 encoding of f (bfloat16's is round_bits(f, 16)), rounded to nearest even, written
 * here rather than taken from the library so that the check does not trust the code it checks. f is
 * 0 or a normal value of both types (the inputs are small integers, the averages at least 1/n). */
static uint16_t to_f16(float f)
{
    if (f == 0) return 0;
    uint32_t r = round_bits(f, 13); /* sign, 8-bit exponent, 10-bit mantissa */
    uint32_t sign = (r >> 3) & 0x8000, exp = ((r >> 10) & 0xff) - 127 + 15;
    return (uint16_t)(sign | (exp << 10) | (r & 0x3ff));
}

/* Element i of buffer b of type t: v / div as the library computes it when div is the rank
 * count of an average (the sum stored in the type, then divided in the type: integers
 * truncate, 16-bit floats go through float32); div 1 stores v itself. */
static void put(void *b, size_t i, chorus_dtype t, long long v, int div)
{
    switch (t) {
    case CHORUS_INT8: ((int8_t *)b)[i] = (int8_t)((int8_t)v / div); break;
    case CHORUS_UINT8: ((uint8_t *)b)[i] = (uint8_t)((uint8_t)v / div); break;
    case CHORUS_INT32: ((int32_t *)b)[i] = (int32_t)((int32_t)v / div); break;
    case CHORUS_INT64: ((int64_t *)b)[i] = v / div; break;
    case CHORUS_FLOAT16: ((uint16_t *)b)[i] = to_f16((float)v / (float)div); break;
    case CHORUS_BFLOAT16:
        ((uint16_t *)b)[i] = (uint16_t)round_bits((float)v / (float)div, 16);
        break;
    case CHORUS_FLOAT32: ((float *)b)[i] = (float)v / (float)div; break;
    case CHORUS_FLOAT64: ((double *)b)[i] = (double)v / (double)div; break;
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
        if (op == CHORUS_BAND) a &= v;
        if (op == CHORUS_BOR) a |= v;
        if (op == CHORUS_BXOR) a ^= v;
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

/* One call, from send (b->send, or b->recv in place) into b->recv. */
static chorus_result run_once(bench *b, const void *send, size_t count)
{
    switch (b->coll) {
    case C_ALLREDUCE: return chorus_allreduce(b->c, send, b->recv, count, b->t, b->op);
    case C_BROADCAST: return chorus_broadcast(b->c, b->recv, count, b->t, b->root);
    case C_ALLGATHER: return chorus_allgather(b->c, send, b->recv, count, b->t);
    case C_REDUCE_SCATTER: return chorus_reduce_scatter(b->c, send, b->recv, count, b->t, b->op);
    default: return chorus_alltoall(b->c, send, b->recv, count, b->t);
    }
}

/* Elements of the output that differ from the expected ones. */
static long long count_wrong(const bench *b, size_t out_bytes)
{
    long long wrong = 0;
    for (size_t o = 0; o < out_bytes; o += b->es)
        wrong += memcmp(b->recv + o, b->want + o, b->es) != 0;
    return wrong;
}

/* Fills inputs and the expected output for count; returns the output bytes to compare. */
static size_t prepare(bench *b, size_t count)
{
    size_t n = (size_t)b->n;
    switch (b->coll) {
    case C_ALLREDUCE:
        for (size_t i = 0; i < count; i++) {
            put(b->send, i, b->t, val(b->rank, i, b->op), 1);
            put(b->want, i, b->t, reduce_ref(b->n, i, b->op), b->op == CHORUS_AVG ? b->n : 1);
        }
        return count * b->es;
    case C_BROADCAST:
        for (size_t i = 0; i < count; i++) {
            put(b->want, i, b->t, val(b->root, i, CHORUS_SUM), 1);
            put(b->recv, i, b->t, b->rank == b->root ? val(b->root, i, CHORUS_SUM) : 9, 1);
        }
        return count * b->es;
    case C_ALLGATHER:
        for (size_t i = 0; i < count; i++) put(b->send, i, b->t, val(b->rank, i, CHORUS_SUM), 1);
        for (size_t r = 0; r < n; r++)
            for (size_t i = 0; i < count; i++)
                put(b->want, r * count + i, b->t, val((int)r, i, CHORUS_SUM), 1);
        return count * n * b->es;
    case C_REDUCE_SCATTER:
        for (size_t i = 0; i < count * n; i++) put(b->send, i, b->t, val(b->rank, i, b->op), 1);
        for (size_t i = 0; i < count; i++)
            put(b->want, i, b->t, reduce_ref(b->n, (size_t)b->rank * count + i, b->op),
                b->op == CHORUS_AVG ? b->n : 1);
        return count * b->es;
    default:
        for (size_t j = 0; j < n; j++)
            for (size_t i = 0; i < count; i++) {
                put(b->send, j * count + i, b->t, val(b->rank * 31 + (int)j, i, CHORUS_SUM), 1);
                put(b->want, j * count + i, b->t, val((int)j * 31 + b->rank, i, CHORUS_SUM), 1);
            }
        return count * n * b->es;
    }
}

static void usage(FILE *f)
{
    fprintf(
        f,
        "usage: chorus-run -np N chorus-bench [options]\n"
        "Collective benchmark with the flags and output columns of nccl-tests.\n"
        "\n"
        "  --coll NAME            allreduce (default), broadcast, allgather, reduce_scatter,\n"
        "                         alltoall (nccl-tests has one program per collective)\n"
        "  -b, --minbytes SIZE    smallest size in bytes (default 8; K, M, G suffixes)\n"
        "  -e, --maxbytes SIZE    largest size (default 64M)\n"
        "  -f, --stepfactor F     multiply the size by F each row (default 2)\n"
        "  -i, --stepbytes SIZE   add SIZE each row instead of multiplying\n"
        "  -n, --iters N          timed iterations per size (default: by size)\n"
        "  -w, --warmup_iters N   warm-up iterations per size (default: by size)\n"
        "  -c, --check 0|1        verify each size's result, out-of-place and in-place, and\n"
        "                         report it in #wrong (default 1)\n"
        "  -o, --op OP            sum (default), prod, min, max, avg (all: these five),\n"
        "                         band, bor, bxor (integer types)\n"
        "  -d, --datatype TYPE    int8, uint8, int32, int64, half (float16), bfloat16,\n"
        "                         float (float32, default), double (float64), or all\n"
        "  -r, --root R           root of broadcast (default 0)\n"
        "  -a, --average 0-3      time over ranks: 0 rank 0's, 1 average (default), 2 min, 3 max\n"
        "  -z, --blocking 0|1     accepted; Chorus collectives always block\n"
        "  -t, --nthreads 1       one rank per process: use chorus-run -np N for more\n"
        "  -g, --ngpus 1          Chorus runs on CPUs: one rank per process\n"
        "      --algo LIST        run the sizes once per algorithm of the collective, e.g.\n"
        "                         auto,shm_oneshot,shm_pipelined,direct_ring (auto: the rules;\n"
        "                         CHORUS_DEBUG=INFO lists what the communicator has)\n"
        "      --plot FILE.png    draw busbw against size, one line per algorithm (and type,\n"
        "                         op) measured, with gnuplot (Debian: gnuplot-nox)\n"
        "  -h, --help             this help\n"
        "      --version          print the version and exit\n"
        "\n"
        "Output (rank 0): '#' header lines; per size: size count type redop root, then\n"
        "out-of-place and in-place time(us) algbw(GB/s) busbw(GB/s) #wrong; closing lines\n"
        "'# Out of bounds values : N OK|FAILED' and '# Avg bus bandwidth    : X'.\n"
        "Exit status: 0, 1 if a result was wrong or a collective failed, 2 for bad options.\n");
}

/* nccl-tests' names for the types (ours are accepted too). */
static const char *type_name(chorus_dtype t)
{
    switch (t) {
    case CHORUS_FLOAT16: return "half";
    case CHORUS_FLOAT32: return "float";
    case CHORUS_FLOAT64: return "double";
    default: return chorus_dtype_name((int)t);
    }
}

typedef struct opts {
    size_t minb, maxb, stepb;
    double factor;
    int iters, warm, check, average, quiet;
    int all_types, all_ops; /* -d all, -o all: one table section per type, per op */
    const char *algos;      /* --algo: comma-separated, or NULL */
    const char *plot;       /* --plot: the PNG to write, or NULL */
} opts;

/* Errors before chorus_init are printed by one process: rank 0, or a process started without
 * a launcher. */
static int bad(const opts *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int bad(const opts *o, const char *fmt, ...)
{
    if (!o->quiet) {
        va_list ap;
        va_start(ap, fmt);
        fprintf(stderr, "chorus-bench: ");
        vfprintf(stderr, fmt, ap);
        fprintf(stderr, "\n(chorus-bench --help lists the options)\n");
        va_end(ap);
    }
    return 2;
}

/* -n: the times of the iterations of one size are kept, combined over the ranks and sorted */
#define MAX_ITERS (1 << 24)

/* A whole decimal number from lo to hi, nothing else in the text: 0, or -1. */
static int parse_long(const char *v, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || end == v || *end || x < lo || x > hi) return -1;
    *out = x;
    return 0;
}

static int parse_int_arg(const char *v, int lo, int hi, int *out)
{
    long x;
    if (parse_long(v, lo, hi, &x)) return -1;
    *out = (int)x;
    return 0;
}

/* A size in bytes as nccl-tests writes it: digits, then nothing or one of K, M, G (either
 * case, powers of 1024). 0, or -1 (a sign, a space, another suffix, an overflow). */
static int parse_size(const char *v, size_t *out)
{
    if (!isdigit((unsigned char)*v)) return -1;
    char *end;
    errno = 0;
    unsigned long long x = strtoull(v, &end, 10);
    const char *units = "KMG", *u = *end ? strchr(units, toupper((unsigned char)*end)) : NULL;
    if (errno || (*end && (!u || !*u || end[1]))) return -1;
    for (int k = u ? (int)(u - units) + 1 : 0; k > 0; k--) {
        if (x > ULLONG_MAX / 1024) return -1;
        x *= 1024;
    }
    if (x > SIZE_MAX) return -1;
    *out = (size_t)x;
    return 0;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The long option a names, as its short letter; 0 when unknown. */
static int short_of(const char *a)
{
    static const struct {
        const char *name;
        int c;
    } longs[] = {
        {"minbytes", 'b'},   {"maxbytes", 'e'},      {"stepfactor", 'f'},  {"stepbytes", 'i'},
        {"iters", 'n'},      {"warmup_iters", 'w'},  {"check", 'c'},       {"op", 'o'},
        {"datatype", 'd'},   {"root", 'r'},          {"average", 'a'},     {"blocking", 'z'},
        {"nthreads", 't'},   {"ngpus", 'g'},         {"help", 'h'},        {"coll", 'C'},
        {"collective", 'C'}, {"agg_iters", 'm'},     {"run_cycles", 'N'},  {"timeout", 'T'},
        {"cudagraph", 'G'},  {"parallel_init", 'p'}, {"stream_null", 'y'}, {"algo", 'A'},
        {"plot", 'P'}};
    if (a[0] != '-') return 0;
    if (a[1] && a[1] != '-' && !a[2])
        return a[1] == 'C' || a[1] == 'A' || a[1] == 'P' ? 0 : a[1]; /* -C is nccl-tests' */
    if (a[1] != '-') return 0;
    for (size_t i = 0; i < sizeof(longs) / sizeof(longs[0]); i++)
        if (!strcmp(a + 2, longs[i].name)) return longs[i].c;
    return 0;
}

/* Parses argv into o and b; 0, or the exit status (2: bad option, -1: --help shown). */
static int parse_args(int argc, char **argv, opts *o, bench *b)
{
    if (argc == 2 && !strcmp(argv[1], "--version")) {
        if (!o->quiet) printf("chorus-bench %s\n", chorus_version());
        return -1;
    }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int c = short_of(a);
        if (c == 'h') return o->quiet ? -1 : (usage(stdout), -1); /* printed by rank 0 */
        if (!c) return bad(o, "unknown option '%s'", a);
        if (!v) return bad(o, "%s needs a value", a);
        i++;
        switch (c) {
        case 'C':
            b->coll = -1;
            for (int k = 0; k < C_COUNT; k++)
                if (!strcmp(v, coll_names[k]) ||
                    (k == C_REDUCE_SCATTER && !strcmp(v, "reducescatter")))
                    b->coll = k;
            if (b->coll < 0)
                return bad(o,
                           "unknown collective '%s' (allreduce, broadcast, allgather, "
                           "reduce_scatter, alltoall)",
                           v);
            break;
        case 'b':
        case 'e':
        case 'i':
            if (parse_size(v, c == 'b' ? &o->minb : c == 'e' ? &o->maxb : &o->stepb))
                return bad(o, "-%c %s is not a size in bytes (e.g. 8, 64K, 1M)", c, v);
            break;
        case 'f': {
            char *end;
            o->factor = strtod(v, &end);
            if (end == v || *end || !(o->factor > 1) || !isfinite(o->factor))
                return bad(o, "-f %s is not a step factor above 1", v);
            break;
        }
        case 'n': {
            long n;
            if (parse_long(v, 1, LONG_MAX, &n))
                return bad(o, "-n %s is not a whole number of iterations, 1 or more", v);
            if (n > MAX_ITERS)
                return bad(o,
                           "-n %s: at most %d timed iterations per size; each one's time is "
                           "kept (8 bytes) and exchanged between the ranks for the median, "
                           "%d MiB at that count",
                           v, MAX_ITERS, (int)((double)MAX_ITERS * 8 / 1048576));
            o->iters = (int)n;
            break;
        }
        case 'w':
            if (parse_int_arg(v, 0, MAX_ITERS, &o->warm))
                return bad(o, "-w %s is not a number of warm-up iterations from 0 to %d", v,
                           MAX_ITERS);
            break;
        case 'c':
            if (parse_int_arg(v, 0, 1, &o->check)) return bad(o, "-c %s is not 0 or 1 (check)", v);
            break;
        case 'a':
            if (parse_int_arg(v, 0, 3, &o->average))
                return bad(o, "-a %s is not 0 (rank 0), 1 (average), 2 (min) or 3 (max)", v);
            break;
        case 'r':
            if (parse_int_arg(v, 0, 1 << 24, &b->root)) return bad(o, "-r %s is not a rank", v);
            break;
        case 'z': {
            int z;
            if (parse_int_arg(v, 0, 1, &z)) return bad(o, "-z %s is not 0 or 1 (blocking)", v);
            break;
        }
        case 't':
        case 'g': {
            int one;
            if (parse_int_arg(v, 1, 1, &one))
                return bad(o, "%s %s: %s", a, v,
                           c == 't' ? "one rank per process; start more with chorus-run -np N"
                                    : "Chorus runs on CPUs, one rank per process; start more "
                                      "with chorus-run -np N");
            break;
        }
        case 'd':
            o->all_types = !strcasecmp(v, "all");
            if (o->all_types) break;
            b->t = CHORUS_DTYPE_COUNT;
            for (int k = 0; k < CHORUS_DTYPE_COUNT; k++)
                if (!strcasecmp(v, chorus_dtype_name(k)) || !strcasecmp(v, type_name(k)))
                    b->t = (chorus_dtype)k;
            if (b->t == CHORUS_DTYPE_COUNT)
                return bad(o,
                           "unknown datatype '%s' (int8, uint8, int32, int64, half, bfloat16, "
                           "float, double, all)",
                           v);
            break;
        case 'o':
            o->all_ops = !strcasecmp(v, "all");
            if (o->all_ops) break;
            b->op = CHORUS_OP_COUNT;
            for (int k = 0; k < CHORUS_OP_COUNT; k++)
                if (!strcasecmp(v, chorus_op_name(k))) b->op = (chorus_op)k;
            if (b->op == CHORUS_OP_COUNT)
                return bad(o, "unknown op '%s' (sum, prod, min, max, avg, band, bor, bxor, all)",
                           v);
            break;
        case 'A': o->algos = v; break;
        case 'P':
            if (!*v) return bad(o, "--plot needs a file name (e.g. busbw.png)");
            o->plot = v;
            break;
        case 'T': return bad(o, "%s: set CHORUS_TIMEOUT_S (seconds) instead", a);
        default: return bad(o, "%s is an nccl-tests option with no meaning on CPUs here", a);
        }
    }
    if (o->minb > o->maxb) return bad(o, "-b %zu is larger than -e %zu", o->minb, o->maxb);
    return 0;
}

/* Fills the input of the variant (in place: the output buffer) and the expected output for
 * count; returns the output bytes to compare. */
static size_t fill_inputs(bench *b, size_t count, int in_place)
{
    size_t out_bytes = prepare(b, count);
    if (in_place && b->coll != C_BROADCAST) /* broadcast's input is in recv already */
        memcpy(b->recv, b->send,
               b->coll == C_ALLREDUCE ? count * b->es : count * (size_t)b->n * b->es);
    return out_bytes;
}

typedef struct result {
    int ran;
    double t, algbw, busbw;
    long long wrong;
} result;

/* One variant of one size: verified pass (when checking), warm-up, timed iterations. */
static chorus_result measure(bench *b, const opts *o, size_t count, size_t bytes, double busf,
                             int in_place, result *res)
{
    res->ran = 0;
    if (in_place ? b->coll == C_ALLGATHER || b->coll == C_REDUCE_SCATTER : b->coll == C_BROADCAST)
        return CHORUS_OK; /* no such call in Chorus */
    res->ran = 1;
    const void *send = in_place ? b->recv : b->send;
    chorus_result r = CHORUS_OK;
    res->wrong = -1;
    if (o->check) {
        size_t out_bytes = fill_inputs(b, count, in_place);
        r = run_once(b, send, count);
        res->wrong = r == CHORUS_OK ? count_wrong(b, out_bytes) : 0;
        if (r == CHORUS_OK)
            r = chorus_allreduce(b->c, &res->wrong, &res->wrong, 1, CHORUS_INT64, CHORUS_SUM);
    }
    int it = o->iters > 0 ? o->iters : (int)fmin(1000, fmax(5, 3e8 / (double)(bytes + 4096) / 8));
    int wu = o->warm >= 0 ? o->warm : (it / 10 > 2 ? it / 10 : 2);
    double *times = malloc(sizeof(double) * (size_t)it);
    if (!times) return CHORUS_ERR_NOMEM;
    fill_inputs(b, count, in_place);
    for (int k = 0; k < wu + it && r == CHORUS_OK; k++) {
        r = chorus_barrier(b->c);
        double t0 = now_s();
        if (r == CHORUS_OK) r = run_once(b, send, count);
        if (k >= wu) times[k - wu] = now_s() - t0;
    }
    /* -a: combine each iteration's time over ranks */
    static const chorus_op combine[] = {CHORUS_SUM, CHORUS_AVG, CHORUS_MIN, CHORUS_MAX};
    if (r == CHORUS_OK && o->average == 0)
        r = chorus_broadcast(b->c, times, (size_t)it, CHORUS_FLOAT64, 0);
    else if (r == CHORUS_OK)
        r = chorus_allreduce(b->c, times, times, (size_t)it, CHORUS_FLOAT64, combine[o->average]);
    if (r == CHORUS_OK) {
        qsort(times, (size_t)it, sizeof(double), cmp_double);
        res->t = it % 2 ? times[it / 2] : 0.5 * (times[it / 2 - 1] + times[it / 2]);
        res->algbw = (double)bytes / res->t / 1e9;
        res->busbw = res->algbw * busf;
    }
    free(times);
    return r;
}

static void print_variant(const result *res)
{
    if (!res->ran) {
        printf("  %8s  %6s  %6s  %6s", "N/A", "N/A", "N/A", "N/A");
        return;
    }
    char wrong[24];
    if (res->wrong < 0)
        snprintf(wrong, sizeof(wrong), "N/A");
    else
        snprintf(wrong, sizeof(wrong), "%lld", res->wrong);
    printf("  %8.2f  %6.2f  %6.2f  %6s", res->t * 1e6, res->algbw, res->busbw, wrong);
}

/* Every rank's pid and host, gathered for the header (nccl-tests lists its ranks' devices). */
#define RANK_REC 80
static chorus_result gather_ranks(bench *b, char **all)
{
    char mine[RANK_REC] = {0}, host[64] = "?";
    gethostname(host, sizeof(host) - 1);
    snprintf(mine, sizeof(mine), "%d %s", (int)getpid(), host);
    *all = malloc((size_t)b->n * RANK_REC);
    if (!*all) return CHORUS_ERR_NOMEM;
    return chorus_allgather(b->c, mine, *all, RANK_REC, CHORUS_UINT8);
}

static void print_header(const bench *b, const opts *o, const char *ranks)
{
    printf("# chorus-bench %d.%d.%d: %s, %d ranks (%d on this host)\n", CHORUS_VERSION_MAJOR,
           CHORUS_VERSION_MINOR, CHORUS_VERSION_PATCH, coll_names[b->coll], b->n,
           chorus_local_size(b->c));
    char warm[16] = "by size", iters[16] = "by size";
    if (o->warm >= 0) snprintf(warm, sizeof(warm), "%d", o->warm);
    if (o->iters > 0) snprintf(iters, sizeof(iters), "%d", o->iters);
    printf("# nThread 1 nGpus 1 minBytes %zu maxBytes %zu step: %g(%s) warmup iters: %s iters: %s "
           "validation: %d average: %d\n",
           o->minb, o->maxb, o->stepb ? (double)o->stepb : o->factor, o->stepb ? "bytes" : "factor",
           warm, iters, o->check, o->average);
    printf("# time: median over iterations of each iteration's time over ranks (-a); GB = 1e9\n");
    printf("#\n# Using devices\n");
    for (int r = 0; r < b->n; r++) {
        const char *rec = ranks + (size_t)r * RANK_REC, *sp = strchr(rec, ' ');
        printf("#  Rank %2d Pid %6d on %10s device CPU\n", r, atoi(rec), sp ? sp + 1 : "?");
    }
    printf("#\n");
    printf("# %10s  %12s  %8s  %6s  %6s  %32s  %32s\n", "", "", "", "", "", "out-of-place",
           "in-place");
    printf("# %10s  %12s  %8s  %6s  %6s  %8s  %6s  %6s  %6s  %8s  %6s  %6s  %6s\n", "size", "count",
           "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw",
           "#wrong");
    printf("# %10s  %12s  %8s  %6s  %6s  %8s  %6s  %6s  %6s  %8s  %6s  %6s  %6s\n", "(B)",
           "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)",
           "");
}

typedef struct totals {
    long long wrong; /* wrong elements over every row (the same on every rank) */
    double bw_sum;   /* busbw of every variant measured, for the average */
    int bw_n;
} totals;

/* ---- --plot ------------------------------------------------------------------------------ */

/* One line of the plot: busbw (out-of-place, else in-place) of each size of one table section. */
typedef struct series {
    char label[96];
    size_t n, cap;
    double *x, *y;
} series;

static int series_add(series *s, double x, double y)
{
    if (s->n == s->cap) {
        size_t nc = s->cap ? 2 * s->cap : 64;
        double *nx = realloc(s->x, nc * sizeof(double)),
               *ny = nx ? realloc(s->y, nc * sizeof(double)) : NULL;
        if (nx) s->x = nx;
        if (!nx || !ny) return -1;
        s->y = ny;
        s->cap = nc;
    }
    s->x[s->n] = x;
    s->y[s->n++] = y;
    return 0;
}

extern char **environ;

/* Whether the program prog can be started from PATH: it is started (`prog --version`, its
 * output discarded) and waited for, as the shell that --plot's popen runs would find it. */
static int in_path(const char *prog)
{
    posix_spawn_file_actions_t fa;
    if (posix_spawn_file_actions_init(&fa)) return 0;
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    char *args[] = {(char *)prog, "--version", NULL};
    pid_t pid;
    int st = 0, started = !posix_spawnp(&pid, prog, &fa, NULL, args, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (started) waitpid(pid, &st, 0);
    return started && !(WIFEXITED(st) && WEXITSTATUS(st) == 127);
}

/* Rank 0, before measuring: can --plot be drawn? 0, or 2 after saying why. */
static int plot_check(const opts *o)
{
    if (!in_path("gnuplot")) {
        fprintf(stderr,
                "chorus-bench: --plot draws with gnuplot, which is not installed (not in PATH); "
                "install it with:  sudo apt-get install -y gnuplot-nox  (or: make plot-deps)\n");
        return 2;
    }
    FILE *f = fopen(o->plot, "wb");
    if (!f) {
        fprintf(stderr, "chorus-bench: --plot %s: cannot write it: %s\n", o->plot, strerror(errno));
        return 2;
    }
    fclose(f);
    return 0;
}

/* Draws the series into o->plot with gnuplot; 0, or 1 after saying why. */
static int plot_write(const opts *o, const bench *b, const series *s, int ns)
{
    FILE *g = popen("gnuplot", "w");
    if (!g) {
        fprintf(stderr, "chorus-bench: --plot: cannot start gnuplot: %s\n", strerror(errno));
        return 1;
    }
    fprintf(g, "set terminal png size 960,600 noenhanced\nset output '");
    for (const char *p = o->plot; *p; p++) fprintf(g, *p == '\'' ? "''" : "%c", *p);
    fprintf(g, "'\nset title \"chorus-bench %s, %d ranks: bus bandwidth\"\n", coll_names[b->coll],
            b->n);
    fprintf(g, "set xlabel \"message size (bytes)\"\nset ylabel \"busbw (GB/s)\"\n"
               "set logscale x 2\nset format x \"%%.0b %%BB\"\nset grid\nset key top left\n");
    for (int i = 0; i < ns; i++) {
        fprintf(g, "$D%d << EOD\n", i);
        for (size_t k = 0; k < s[i].n; k++) fprintf(g, "%.0f %.6g\n", s[i].x[k], s[i].y[k]);
        fprintf(g, "EOD\n");
    }
    fprintf(g, "plot");
    for (int i = 0; i < ns; i++)
        fprintf(g, "%s $D%d using 1:2 with linespoints title \"%s\"", i ? "," : "", i, s[i].label);
    fprintf(g, "\n");
    int st = pclose(g);
    struct stat sb;
    if (st != 0 || stat(o->plot, &sb) != 0 || sb.st_size == 0) {
        fprintf(stderr,
                "chorus-bench: --plot %s: gnuplot failed (status %d); its messages are above\n",
                o->plot, st);
        return 1;
    }
    printf("# plot: %s (%d line%s)\n", o->plot, ns, ns == 1 ? "" : "s");
    return 0;
}

/* The rows of every size for b's collective, type and op (busbw into ser on rank 0, when not
 * NULL); 1 when a collective failed. */
static int run_sizes(bench *b, const opts *o, totals *tot, series *ser)
{
    double busf = b->coll == C_ALLREDUCE   ? 2.0 * (b->n - 1) / b->n
                  : b->coll == C_BROADCAST ? 1.0
                                           : (double)(b->n - 1) / b->n;
    int reduces = b->coll == C_ALLREDUCE || b->coll == C_REDUCE_SCATTER;
    chorus_result r = CHORUS_OK;
    for (size_t size = o->minb; size <= o->maxb;) {
        size_t count = call_count(b, size);
        size_t bytes =
            b->coll == C_ALLGATHER || b->coll == C_REDUCE_SCATTER || b->coll == C_ALLTOALL
                ? count * (size_t)b->n * b->es
                : count * b->es;
        result res[2];
        for (int v = 0; v < 2 && count && r == CHORUS_OK; v++)
            r = measure(b, o, count, bytes, busf, v, &res[v]);
        if (r != CHORUS_OK) {
            fprintf(stderr, "chorus-bench: rank %d: %s of %zu B failed: %s\n  %s\n", b->rank,
                    coll_names[b->coll], bytes, chorus_strerror(r), chorus_last_error(b->c));
            return 1;
        }
        for (int v = 0; v < 2 && count; v++) {
            if (res[v].ran) tot->bw_sum += res[v].busbw, tot->bw_n++;
            if (res[v].ran && res[v].wrong > 0) tot->wrong += res[v].wrong;
        }
        if (count && b->rank == 0) {
            printf("  %10zu  %12zu  %8s  %6s  %6d", bytes, count, type_name(b->t),
                   reduces ? chorus_op_name((int)b->op) : "none",
                   b->coll == C_BROADCAST ? b->root : -1);
            for (int v = 0; v < 2; v++) print_variant(&res[v]);
            printf("\n");
            fflush(stdout);
            const result *shown = res[0].ran ? &res[0] : &res[1];
            if (ser && series_add(ser, (double)bytes, shown->busbw) != 0) {
                fprintf(stderr, "chorus-bench: out of memory for the plot\n");
                return 1;
            }
        }
        if (size == o->maxb) break;
        size_t next = o->stepb ? size + o->stepb : (size_t)ceil((double)size * o->factor);
        size = next > o->maxb ? o->maxb : next; /* always end with the largest size */
    }
    return 0;
}

/* ---- --algo ------------------------------------------------------------------------------ */

#define MAX_ALGOS 16

/* "CHORUS_ALGO_<COLLECTIVE>" of b's collective. */
static void algo_var(const bench *b, char *var, size_t len)
{
    snprintf(var, len, "CHORUS_ALGO_");
    for (size_t i = 0, o = strlen(var); coll_names[b->coll][i] && o + 1 < len; i++, o++) {
        var[o] = (char)toupper((unsigned char)coll_names[b->coll][i]);
        var[o + 1] = 0;
    }
}

/* Forces algorithm name ("auto": the rules) for b's collective on b's communicator; the
 * reason of a refusal is chorus_last_error(b->c). */
static chorus_result set_algo(bench *b, const char *name)
{
    char var[64];
    algo_var(b, var, sizeof(var));
    return chorus_comm_config_set(b->c, var, strcmp(name, "auto") ? name : NULL);
}

/* Splits --algo into names, each checked against the collective's algorithms (every rank
 * does the same, rank 0 tells); 0, or 2 after saying why. */
static int algo_list(bench *b, const opts *o, char names[][32], int *n)
{
    *n = 0;
    if (!o->algos) return 0;
    for (const char *p = o->algos; *p;) {
        const char *c = strchr(p, ',');
        size_t len = c ? (size_t)(c - p) : strlen(p);
        if (!len || len >= 32 || *n == MAX_ALGOS)
            return bad(o, "--algo %s: give up to %d comma-separated algorithm names", o->algos,
                       MAX_ALGOS);
        snprintf(names[*n], 32, "%.*s", (int)len, p);
        if (set_algo(b, names[*n]) != CHORUS_OK)
            return bad(o, "--algo: %s", chorus_last_error(b->c));
        (*n)++;
        p = c ? c + 1 : p + len;
    }
    return 0;
}

/* This process's rank as chorus-run set it (CHORUS_RANK), 0 without it: before chorus_init,
 * only rank 0 reports a bad command line. */
static long launched_rank(void)
{
    const char *v = chorus_config_get("CHORUS_RANK");
    long r;
    return v && !parse_long(v, 0, INT_MAX, &r) ? r : 0;
}

static void *alloc_aligned(size_t n)
{
    void *p = NULL;
    return posix_memalign(&p, 64, n ? n : 64) ? NULL : p;
}

int main(int argc, char **argv)
{
    bench b = {.coll = C_ALLREDUCE, .t = CHORUS_FLOAT32, .op = CHORUS_SUM};
    opts o = {.minb = 8,
              .maxb = 64u << 20,
              .factor = 2,
              .warm = -1,
              .iters = -1,
              .check = 1,
              .average = 1,
              .quiet = launched_rank() > 0};
    int st = parse_args(argc, argv, &o, &b);
    if (st) return st < 0 ? 0 : st;
    chorus_result r = chorus_init(&b.c);
    if (r != CHORUS_OK) {
        fprintf(stderr, "chorus-bench: chorus_init failed: %s\n  %s\n", chorus_strerror(r),
                chorus_last_error(NULL));
        return 1;
    }
    b.rank = chorus_rank(b.c);
    b.n = chorus_size(b.c);
    o.quiet = b.rank != 0;
    if (b.root >= b.n) {
        chorus_finalize(b.c);
        return bad(&o, "-r %d: the root must be a rank below %d", b.root, b.n);
    }
    char algos[MAX_ALGOS][32];
    int nalgos = 0;
    st = algo_list(&b, &o, algos, &nalgos);
    /* --plot: rank 0 checks gnuplot and the path before anything is measured, for every rank */
    int64_t plot_ok = st ? st : o.plot && b.rank == 0 ? plot_check(&o) : 0;
    if (o.plot && chorus_broadcast(b.c, &plot_ok, 1, CHORUS_INT64, 0) != CHORUS_OK) plot_ok = 1;
    if (plot_ok) {
        chorus_finalize(b.c);
        return (int)plot_ok;
    }
    size_t cap = o.maxb + 64 * sizeof(double) * (size_t)b.n; /* room for the widest type */
    b.send = alloc_aligned(cap);
    b.recv = alloc_aligned(cap);
    b.want = alloc_aligned(cap);
    if (!b.send || !b.recv || !b.want) {
        fprintf(stderr, "chorus-bench: rank %d: out of memory for %zu bytes\n", b.rank, cap);
        return 1;
    }
    memset(b.send, 0, cap);
    memset(b.recv, 0, cap);
    totals tot = {0, 0, 0};
    int types = o.all_types ? CHORUS_DTYPE_COUNT : 1;
    int ops =
        o.all_ops && (b.coll == C_ALLREDUCE || b.coll == C_REDUCE_SCATTER) ? CHORUS_AVG + 1 : 1;
    char *ranks = NULL;
    r = gather_ranks(&b, &ranks);
    if (r != CHORUS_OK) {
        fprintf(stderr, "chorus-bench: rank %d: gathering the ranks' hosts failed: %s\n", b.rank,
                chorus_strerror(r));
        return 1;
    }
    if (b.rank == 0) print_header(&b, &o, ranks);
    free(ranks);
    int nser = 0, maxser = (nalgos ? nalgos : 1) * types * ops;
    series *ser = o.plot && b.rank == 0 ? calloc((size_t)maxser, sizeof(series)) : NULL;
    if (o.plot && b.rank == 0 && !ser) {
        fprintf(stderr, "chorus-bench: out of memory for the plot\n");
        return 1;
    }
    for (int ai = 0; ai < (nalgos ? nalgos : 1); ai++)
        for (int ti = 0; ti < types; ti++)
            for (int oi = 0; oi < ops; oi++) {
                if (nalgos) set_algo(&b, algos[ai]); /* checked by algo_list */
                if (nalgos && b.rank == 0 && ti == 0 && oi == 0) {
                    char var[64];
                    algo_var(&b, var, sizeof(var));
                    printf("# %s=%s\n", var, algos[ai]);
                }
                if (o.all_types) b.t = (chorus_dtype)ti;
                if (ops > 1) b.op = (chorus_op)oi;
                b.es = chorus_dtype_size(b.t);
                series *cur = ser ? &ser[nser++] : NULL;
                if (cur)
                    snprintf(cur->label, sizeof(cur->label), "%s%s%s%s%s",
                             nalgos ? algos[ai] : coll_names[b.coll], types > 1 ? " " : "",
                             types > 1 ? type_name(b.t) : "", ops > 1 ? " " : "",
                             ops > 1 ? chorus_op_name((int)b.op) : "");
                if (run_sizes(&b, &o, &tot, cur)) return 1;
            }
    if (ser && plot_write(&o, &b, ser, nser)) st = 1;
    for (int i = 0; ser && i < nser; i++) {
        free(ser[i].x);
        free(ser[i].y);
    }
    free(ser);
    if (b.rank == 0) {
        printf("# Out of bounds values : %lld %s\n", tot.wrong, tot.wrong ? "FAILED" : "OK");
        printf("# Avg bus bandwidth    : %g \n", tot.bw_n ? tot.bw_sum / tot.bw_n : 0.0);
        printf("#\n");
    }
    free(b.send);
    free(b.recv);
    free(b.want);
    chorus_finalize(b.c);
    return tot.wrong || st ? 1 : 0;
}

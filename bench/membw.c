/* membw: memory bandwidth probe, the ceiling for collectives on one host.
 *
 * DESIGN.md section 5: an allreduce of S bytes over p ranks on one host must read p*S and write
 * p*S bytes at least, so its best possible time is about 2*p*S / (memory bandwidth). This probe
 * measures that bandwidth in the same run as the collective benchmarks:
 *
 *   copy  memcpy(dst, src, N)            counts 2N bytes (N read + N written)
 *   sum   c[i] = a[i] + b[i], float32    counts 3N bytes (2N read + N written)
 *
 * for each thread count in -t (default "1,2"): the arrays are split into one contiguous slice
 * per thread, every thread touches its own slice first (first-touch placement), then each run
 * starts all threads at a barrier and stops the clock when the last one finishes; the best of
 * -r runs (default 7) is reported. Arrays are -s bytes each (default 256M, 1024-based suffixes).
 * Write-allocate traffic (reading the destination line before writing it) is not counted, as
 * in STREAM.
 *
 * Output: '#' header lines, then rows   kernel threads GBps   (GB = 1e9), e.g.
 *   copy 1 9.812
 *   sum  2 14.020
 *
 * Build: cc -O2 -pthread -o membw bench/membw.c
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum kernel { K_COPY, K_SUM };

struct shared {
    float *a, *b, *c;
    size_t n; /* floats per array */
    int nthreads;
    enum kernel kernel;
    pthread_barrier_t start, done;
    int quit;
};

struct worker {
    struct shared *sh;
    int id;
    pthread_t tid;
};

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void slice(const struct shared *sh, int id, size_t *lo, size_t *hi)
{
    size_t per = (sh->n / sh->nthreads + 15) & ~(size_t)15; /* 64-byte multiples */
    *lo = per * id < sh->n ? per * id : sh->n;
    *hi = *lo + per < sh->n ? *lo + per : sh->n;
}

static void do_kernel(struct shared *sh, int id)
{
    size_t lo, hi;
    slice(sh, id, &lo, &hi);
    if (sh->kernel == K_COPY) {
        memcpy(sh->c + lo, sh->a + lo, (hi - lo) * sizeof(float));
    } else {
        float *restrict c = sh->c;
        const float *restrict a = sh->a, *restrict b = sh->b;
        for (size_t i = lo; i < hi; i++) c[i] = a[i] + b[i];
    }
}

/* Threads 1..nthreads-1 loop here; thread 0 is the caller of run_once(). */
static void *worker_main(void *arg)
{
    struct worker *w = arg;
    size_t lo, hi;
    slice(w->sh, w->id, &lo, &hi);
    for (size_t i = lo; i < hi; i++) { /* first touch: pages land near this thread */
        w->sh->a[i] = (float)(i & 1023);
        w->sh->b[i] = 1.0f;
        w->sh->c[i] = 0.0f;
    }
    for (;;) {
        pthread_barrier_wait(&w->sh->start);
        if (w->sh->quit) return NULL;
        do_kernel(w->sh, w->id);
        pthread_barrier_wait(&w->sh->done);
    }
}

static double run_once(struct shared *sh, enum kernel k)
{
    sh->kernel = k;
    pthread_barrier_wait(&sh->start);
    double t0 = now();
    do_kernel(sh, 0);
    pthread_barrier_wait(&sh->done);
    return now() - t0;
}

/* Returns best-of-runs GB/s for each kernel, or -1 on failure. */
static int measure(struct shared *sh, int nthreads, int runs, double gbps[2])
{
    struct worker *w = calloc(nthreads, sizeof *w);
    if (!w) return -1;
    sh->nthreads = nthreads;
    sh->quit = 0;
    pthread_barrier_init(&sh->start, NULL, nthreads);
    pthread_barrier_init(&sh->done, NULL, nthreads);
    for (int i = 1; i < nthreads; i++) {
        w[i] = (struct worker){sh, i, 0};
        if (pthread_create(&w[i].tid, NULL, worker_main, &w[i])) {
            fprintf(stderr, "membw: pthread_create failed\n");
            exit(1);
        }
    }
    size_t lo, hi;
    slice(sh, 0, &lo, &hi);
    for (size_t i = lo; i < hi; i++) {
        sh->a[i] = (float)(i & 1023);
        sh->b[i] = 1.0f;
        sh->c[i] = 0.0f;
    }
    double bytes[2] = {2.0 * sh->n * sizeof(float), 3.0 * sh->n * sizeof(float)};
    for (int k = 0; k < 2; k++) {
        double best = 1e30;
        run_once(sh, (enum kernel)k); /* warm-up */
        for (int r = 0; r < runs; r++) {
            double t = run_once(sh, (enum kernel)k);
            best = t < best ? t : best;
        }
        gbps[k] = bytes[k] / best / 1e9;
    }
    sh->quit = 1;
    pthread_barrier_wait(&sh->start);
    for (int i = 1; i < nthreads; i++) pthread_join(w[i].tid, NULL);
    pthread_barrier_destroy(&sh->start);
    pthread_barrier_destroy(&sh->done);
    free(w);
    return 0;
}

static size_t parse_size(const char *s)
{
    char *end;
    double v = strtod(s, &end);
    switch (*end) {
    case 'k':
    case 'K': v *= 1024.0; break;
    case 'm':
    case 'M': v *= 1048576.0; break;
    case 'g':
    case 'G': v *= 1073741824.0; break;
    default: break;
    }
    return v > 0 ? (size_t)v : 0;
}

int main(int argc, char **argv)
{
    size_t bytes = 256u << 20;
    int runs = 7;
    const char *threads = "1,2";
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "-s"))
            bytes = parse_size(argv[i + 1]);
        else if (!strcmp(argv[i], "-r"))
            runs = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-t"))
            threads = argv[i + 1];
        else
            break;
    }
    if (argc % 2 == 0 || bytes < 4096 || runs < 1) {
        fprintf(stderr, "usage: %s [-s bytes-per-array (256M)] [-r runs (7)] [-t 1,2]\n", argv[0]);
        return 2;
    }

    struct shared sh = {0};
    sh.n = bytes / sizeof(float);
    sh.a = aligned_alloc(64, (sh.n * sizeof(float) + 63) & ~(size_t)63);
    sh.b = aligned_alloc(64, (sh.n * sizeof(float) + 63) & ~(size_t)63);
    sh.c = aligned_alloc(64, (sh.n * sizeof(float) + 63) & ~(size_t)63);
    if (!sh.a || !sh.b || !sh.c) {
        fprintf(stderr, "membw: cannot allocate 3 x %zu bytes\n", bytes);
        return 1;
    }

    printf("# membw: %zu MiB per array, best of %d runs, GB = 1e9\n", bytes >> 20, runs);
    printf("# copy = memcpy, 2N bytes; sum = c[i]=a[i]+b[i] float32, 3N bytes\n");
    printf("# kernel threads GBps\n");
    char *list = strdup(threads), *save = NULL;
    for (char *t = strtok_r(list, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        int nt = atoi(t);
        double gbps[2];
        if (nt < 1 || measure(&sh, nt, runs, gbps)) continue;
        printf("copy %d %.3f\n", nt, gbps[0]);
        printf("sum %d %.3f\n", nt, gbps[1]);
        fflush(stdout);
    }
    /* Keep the compiler honest about the sum results. */
    if (sh.c[sh.n / 2] < 0) printf("# impossible\n");
    free(list);
    free(sh.a);
    free(sh.b);
    free(sh.c);
    return 0;
}

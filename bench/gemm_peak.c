/*
 * gemm_peak.c - the machine's measured matrix-multiply peak, for model FLOPs utilisation
 * (bench/gpt.sh): OpenBLAS's cblas_sgemm, C = A B with square float32 matrices of side N, on
 * THREADS threads (openblas_set_num_threads), REPS times; prints the best rate, the rate a
 * kernel can reach on this machine when nothing else is in its way.
 *
 *   gemm_peak N THREADS REPS
 *
 * Output: one line "gemm_peak: n N threads T core CORE best_gflops X median_gflops Y".
 * Link with -lopenblas.
 */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

/* OpenBLAS's own (cblas.h declares them for OpenBLAS; stated here for other headers) */
void openblas_set_num_threads(int);
char *openblas_get_corename(void);

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int by_value(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: gemm_peak N THREADS REPS\n");
        return 2;
    }
    int n = atoi(argv[1]), threads = atoi(argv[2]), reps = atoi(argv[3]);
    if (n <= 0 || threads <= 0 || reps <= 0) {
        fprintf(stderr, "gemm_peak: N, THREADS and REPS must be positive\n");
        return 2;
    }
    size_t nn = (size_t)n * (size_t)n;
    float *a = malloc(nn * sizeof(float)), *b = malloc(nn * sizeof(float));
    float *c = malloc(nn * sizeof(float));
    double *rate = malloc((size_t)reps * sizeof(double));
    if (!a || !b || !c || !rate) {
        fprintf(stderr, "gemm_peak: out of memory for N %d\n", n);
        return 1;
    }
    for (size_t i = 0; i < nn; i++) {
        a[i] = (float)(i % 7) * 0.25f - 0.75f;
        b[i] = (float)(i % 5) * 0.5f - 1.0f;
    }
    openblas_set_num_threads(threads);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
    for (int r = 0; r < reps; r++) {
        double t0 = now_s();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c,
                    n);
        rate[r] = 2.0 * (double)nn * n / (now_s() - t0) * 1e-9;
    }
    qsort(rate, (size_t)reps, sizeof(double), by_value);
    printf("gemm_peak: n %d threads %d core %s best_gflops %.1f median_gflops %.1f (c[0] %g)\n", n,
           threads, openblas_get_corename(), rate[reps - 1], rate[reps / 2], (double)c[0]);
    free(a);
    free(b);
    free(c);
    free(rate);
    return 0;
}

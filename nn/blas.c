/*
 * blas.c - which of OpenBLAS's kernels the process runs (include/chorus/nn/blas.h).
 */
#include <strings.h>

#include "nn_internal.h"

/* OpenBLAS's own query (cblas.h declares it in some releases only). */
char *openblas_get_corename(void);

const char *nn_blas_kernel(void)
{
    const char *core = openblas_get_corename();
    return core ? core : "unknown";
}

#if defined(__x86_64__)
/* OpenBLAS's kernel sets built on AVX-512 (0.3.21's names). */
static int core_has_avx512(const char *core)
{
    static const char *const names[] = {"SkylakeX", "Cooperlake", "SapphireRapids"};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if (!strcasecmp(core, names[i])) return 1;
    return 0;
}

int nn_blas_misses_avx512(void)
{
    __builtin_cpu_init(); /* the checks include the OS's saving of the AVX-512 registers */
    return !core_has_avx512(nn_blas_kernel()) && __builtin_cpu_supports("avx512f") &&
           __builtin_cpu_supports("avx512cd") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
}
#else
int nn_blas_misses_avx512(void)
{
    return 0;
}
#endif

/*
 * chorus/nn/blas.h - which of OpenBLAS's kernels the process runs (libchorus_nn, nn.h).
 *
 * Most of a model's time is in OpenBLAS's sgemm, and OpenBLAS built for several CPUs
 * (DYNAMIC_ARCH, as Debian's is) chooses its kernels once, when it is loaded: by the CPU's
 * identity, or by the variable OPENBLAS_CORETYPE where it is set. Debian 12's OpenBLAS 0.3.21
 * chooses its AVX-512 kernels (Cooperlake) on AMD's Zen 5 by itself; OPENBLAS_CORETYPE=Haswell
 * in the environment holds it to AVX2, at half the rate. A program reports which ran.
 */
#ifndef CHORUS_NN_BLAS_H
#define CHORUS_NN_BLAS_H

#ifdef __cplusplus
extern "C" {
#endif

/* The name of the kernels OpenBLAS runs ("Haswell", "SkylakeX", ...: openblas_get_corename). */
const char *nn_blas_kernel(void);

/* 1 when those kernels use no AVX-512 while the CPU has AVX-512 F, CD, BW, DQ and VL (and the
 * OS saves its registers): an OPENBLAS_CORETYPE of an older CPU, or an OpenBLAS older than the
 * CPU. Else 0 (also on CPUs other than x86-64). */
int nn_blas_misses_avx512(void);

#ifdef __cplusplus
}
#endif

#endif /* CHORUS_NN_BLAS_H */

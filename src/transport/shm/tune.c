/*
 * tune.c - the measured choice between single copy and the staging slots for a 2-rank
 * allreduce above CHORUS_SHM_CMA_MAX.
 *
 * Which of the two is faster for large messages depends on the host, not on the code: single
 * copy pays the kernel's pinning of every page it copies, the slots pay a second copy and a
 * transfer of every byte from the other core's cache. Where a line another core has just
 * written comes over slowly, single copy wins up to tens of MiB (a 2-vCPU Xeon VM: 1 MiB in
 * ~95 us against ~155 us, 16 MiB 2.3 ms against 2.7 ms, but 64 MiB 17 ms against 14 ms);
 * where it comes over fast, the slots win from ~512 KiB (a 2-vCPU AMD EPYC VM sharing one L3).
 * So above cma_max the allreduce measures both, per size class (2^b <= bytes < 2^(b+1)):
 *
 *   - call 0 of a class takes the slots and is not timed (it pays for first touches: the
 *     pages of a new buffer fault in, its lines come from memory);
 *   - calls 1 .. K take single copy, calls K+1 .. 2K the slots (K = TRIALS/2 + 1); the first
 *     call of each run is not timed, since it pays for the switch (each algorithm leaves the
 *     buffers' lines in the other core's cache where the other expects them in its own: single
 *     copy pushes into lines its rank wrote the call before), the others are; each rank keeps
 *     its fastest time of each in its control block in the segment (the fastest, since other
 *     work on the machine only ever adds time);
 *   - call 2K+1 takes the slots and is not timed;
 *   - from call 2K+2 on, every call takes the one whose slower rank's best time is lower.

 * Agreement needs no message: at call n of a class, both ranks' records of calls up to n-2 are
 * visible to both (a peer writes its record of call n-2 before it posts IN for call n-1, which
 * this rank has seen), so at call 2K+2 both read the same complete records and pick the
 * same. Both algorithms give identical bits (each element folded once, in rank order), so a
 * choice that differs between runs never changes a result, only its time.
 */
#include <stdint.h>

#include "base/base.h"
#include "transport/shm/shm.h"

#define K (CHORUS_SHM_TUNE_TRIALS / 2 + 1) /* calls in a run of one algorithm */

static int size_class(size_t bytes)
{
    int b = 0;
    while (b + 1 < CHORUS_SHM_TUNE_CLASSES && (bytes >> (b + 1)) != 0) b++;
    return b;
}

static uint32_t best(const chorus_shm *s, int q, int b, int cma)
{
    return __atomic_load_n(&s->ctrl[q].tune_ns[b][cma], __ATOMIC_RELAXED);
}

/* The slower rank's best trial of one algorithm (UINT32_MAX: some rank has none). */
static uint32_t slowest_best(const chorus_shm *s, int b, int cma)
{
    uint32_t worst = 0;
    for (int q = 0; q < s->size; q++) {
        uint32_t t = best(s, q, b, cma);
        if (t == 0) return UINT32_MAX;
        if (t > worst) worst = t;
    }
    return worst;
}

static int decided(const chorus_shm *s, int b)
{
    return slowest_best(s, b, 1) < slowest_best(s, b, 0);
}

int chorus__shm_tune_pick(const chorus_shm *s, size_t bytes)
{
    int b = size_class(bytes);
    int n = s->tune_calls[b];
    if (n >= 1 && n <= K) return 1;
    if (n <= 2 * K + 1) return 0;
    return decided(s, b);
}

int chorus__shm_tune_timing(const chorus_shm *s, size_t bytes)
{
    return s->tune && s->cma && s->size == 2 && bytes > s->cma_max &&
           s->tune_calls[size_class(bytes)] <= 2 * K + 2;
}

void chorus__shm_tune_record(chorus_shm *s, size_t bytes, int cma, double seconds)
{
    int b = size_class(bytes);
    int n = s->tune_calls[b];
    if ((n >= 2 && n <= K) || (n >= K + 2 && n <= 2 * K)) {
        double ns = seconds * 1e9 + 1;
        uint32_t t = ns < (double)UINT32_MAX ? (uint32_t)ns : UINT32_MAX - 1;
        uint32_t *rec = &s->ctrl[s->rank].tune_ns[b][cma];
        uint32_t old = __atomic_load_n(rec, __ATOMIC_RELAXED);
        if (old == 0 || t < old) __atomic_store_n(rec, t, __ATOMIC_RELAXED);
    } else if (n == 2 * K + 2) {
        CHORUS_INFO(CHORUS_LOG_SHM,
                    "allreduce of %zu-%zu bytes at 2 ranks: %s (measured, best of the slower "
                    "rank: single copy %.1f us, staging slots %.1f us)",
                    (size_t)1 << b, ((size_t)2 << b) - 1, decided(s, b) ? "single copy" : "slots",
                    slowest_best(s, b, 1) / 1e3, slowest_best(s, b, 0) / 1e3);
    }
    s->tune_calls[b] = (uint8_t)(n + 1);
}

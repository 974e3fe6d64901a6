/*
 * shm_cma.c - the single-copy (process_vm_readv/writev) allreduce when the kernel refuses it.
 *
 *   chorus-run -np N shm_cma refused R     rank R installs a seccomp filter that fails
 *                                          process_vm_readv with EPERM (as container profiles
 *                                          do) before chorus_init: every rank must agree to go
 *                                          without single-copy (c->shm->cma == 0) and still
 *                                          compute correct sums at every size
 *   CHORUS_SHM_CMA=1 chorus-run -np N shm_cma required R
 *                                          the same filter with single copy required: every
 *                                          rank's chorus_init fails, naming rank R
 *   chorus-run -np N shm_cma on            single copy is available here: every rank has it
 *                                          and uses it from CHORUS_SHM_CMA_MIN bytes
 *   chorus-run -np 2 shm_cma tune          above CHORUS_SHM_CMA_MAX (unset) the allreduce is
 *                                          measured per size class: 24 calls at each of two sizes
 *                                          in two classes, in place and not, fresh inputs each
 *                                          call, every element checked and both ranks' bits
 *                                          equal through the trials and after; then both ranks
 *                                          hold both algorithms' records and make the same pick
 *                                          (with CHORUS_SHM_CMA_MAX set, nothing is measured)
 *   chorus-run -np 2 shm_cma badbuf        rank 1's send buffer is unreadable where rank 0
 *                                          reads it (as if it were shorter than the count):
 *                                          both ranks fail with CHORUS_ERR_INVALID_ARG naming
 *                                          rank 1's buffer, nobody crashes or hangs (rank 1
 *                                          may compute that part itself: it can still read it)
 */
#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <signal.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>

#include "coll/coll.h"
#include "harness.h"
#include "transport/shm/shm.h"

/* A real kernel refusal: seccomp returns EPERM for process_vm_readv, nothing else changes. */
static void refuse_cma(void)
{
    struct sock_filter f[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_process_vm_readv, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog prog = {(unsigned short)(sizeof(f) / sizeof(f[0])), f};
    ASSERT(prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0);
    ASSERT(prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) == 0);
}

/* Allreduce sums of integer-valued floats at sizes around and far above the crossover. */
static void sums(chorus_comm *c)
{
    int n = chorus_size(c), me = chorus_rank(c);
    const size_t counts[] = {1, 1000, 4096, 70001, 1 << 20};
    for (size_t i = 0; i < sizeof(counts) / sizeof(counts[0]); i++) {
        size_t cnt = counts[i];
        float *x = malloc(cnt * sizeof(float));
        ASSERT(x != NULL);
        for (size_t j = 0; j < cnt; j++) x[j] = (float)((j * 7 + (size_t)me) % 1000);
        ASSERT_OK(chorus_allreduce(c, x, x, cnt, CHORUS_FLOAT32, CHORUS_SUM));
        for (size_t j = 0; j < cnt; j++) {
            float want = 0;
            for (int r = 0; r < n; r++) want += (float)((j * 7 + (size_t)r) % 1000);
            if (x[j] != want)
                test_fail(__FILE__, __LINE__, "count %zu: x[%zu] = %g, want %g", cnt, j,
                          (double)x[j], (double)want);
        }
        free(x);
    }
}

/* The measured choice above CHORUS_SHM_CMA_MAX: results right and equal on both ranks at
 * every call (trials of single copy, of the slots, the switches between them and the choice),
 * and the same choice on both ranks. Values are small integers in floats so that sums are
 * exact; a hash of each result's bits must be the same on both ranks. */
static void tune(chorus_comm *c)
{
    int me = chorus_rank(c);
    int tuned = c->shm->tune;
    const size_t counts[] = {300001, (1 << 20) + 17}; /* ~1.1 MiB and ~4 MiB: two classes */
    for (size_t i = 0; i < 2; i++) {
        size_t cnt = counts[i];
        float *x = malloc(cnt * sizeof(float)), *y = malloc(cnt * sizeof(float));
        ASSERT(x != NULL && y != NULL);
        for (int call = 0; call < 24; call++) {
            for (size_t j = 0; j < cnt; j++)
                x[j] = (float)((j * 13 + (size_t)call * 7 + (size_t)me * 5) % 997);
            int inplace = call % 3 == 2;
            ASSERT_OK(chorus_allreduce(c, x, inplace ? x : y, cnt, CHORUS_FLOAT32, CHORUS_SUM));
            const float *got = inplace ? x : y;
            uint64_t h = 1469598103934665603ull;
            for (size_t j = 0; j < cnt; j++) {
                float want = (float)((j * 13 + (size_t)call * 7) % 997) +
                             (float)((j * 13 + (size_t)call * 7 + 5) % 997);
                if (got[j] != want)
                    test_fail(__FILE__, __LINE__, "count %zu call %d: [%zu] = %g, want %g", cnt,
                              call, j, (double)got[j], (double)want);
                uint32_t bits;
                memcpy(&bits, &got[j], 4);
                h = (h ^ bits) * 1099511628211ull;
            }
            int64_t hs = (int64_t)(h >> 1), lo, hi;
            ASSERT_OK(chorus_allreduce(c, &hs, &lo, 1, CHORUS_INT64, CHORUS_MIN));
            ASSERT_OK(chorus_allreduce(c, &hs, &hi, 1, CHORUS_INT64, CHORUS_MAX));
            ASSERT_EQ(lo, hi);
        }
        size_t bytes = cnt * sizeof(float);
        int pick = chorus__shm_tune_pick(c->shm, bytes);
        int32_t mine[2] = {pick, -pick}, all[2];
        ASSERT_OK(chorus_allreduce(c, mine, all, 2, CHORUS_INT32, CHORUS_MIN));
        ASSERT_EQ(all[0], -all[1]); /* the same pick on both ranks */
        int b = 0;
        while ((bytes >> (b + 1)) != 0) b++;
        for (int q = 0; q < 2; q++)
            for (int a = 0; a < 2; a++) ASSERT_EQ(c->shm->ctrl[q].tune_ns[b][a] != 0, tuned);
        printf("shm_cma: rank %d: %zu B: %s\n", me, bytes,
               !tuned ? "not measured"
               : pick ? "single copy"
                      : "slots");
        free(x);
        free(y);
    }
}

/* Rank 1's unreadable half, and how often rank 1 touched it itself. */
static char *bad_lo;
static size_t bad_len;
static volatile sig_atomic_t bad_touched;

/* SIGSEGV in rank 1: a fault in its own unreadable half makes the half readable again and
 * the access goes on; any other fault finds the default action restored (SA_RESETHAND) and
 * kills the process as usual. */
static void own_touch(int sig, siginfo_t *si, void *ctx)
{
    (void)sig;
    (void)ctx;
    char *a = si->si_addr;
    if (a >= bad_lo && a < bad_lo + bad_len &&
        mprotect(bad_lo, bad_len, PROT_READ | PROT_WRITE) == 0)
        bad_touched++;
}

/* Makes rank 1's half unreadable to others until rank 1 itself touches it. */
static void protect_half(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_sigaction = own_touch;
    sa.sa_flags = SA_SIGINFO | SA_RESETHAND;
    sigemptyset(&sa.sa_mask);
    ASSERT(sigaction(SIGSEGV, &sa, NULL) == 0);
    ASSERT(mprotect(bad_lo, bad_len, PROT_NONE) == 0);
}

/* 2 ranks, 256 KiB of floats (single copy by the rules): rank 1's first half is inaccessible
 * (PROT_NONE), so rank 0 fails to read it when it reduces a piece there. Pieces go to whichever
 * rank claims them first, so rank 1 may reduce every piece of that half itself (rank 0 not yet
 * scheduled): it reads its own input, which a process always can, so here its first touch
 * makes the half readable again and the call succeeds. The call is repeated until rank 0 has
 * met the unreadable half, at most 200 times (rank 0 usually meets it in the first; on
 * a loaded machine rank 1 took the half in up to 15 calls in a row). */
static void badbuf(chorus_comm *c)
{
    size_t cnt = 1 << 16, bytes = cnt * sizeof(float);
    int me = chorus_rank(c);
    ASSERT_EQ(chorus_size(c), 2);
    char *send = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    float *recv = calloc(cnt, sizeof(float));
    ASSERT(send != MAP_FAILED && recv != NULL);
    memset(send, 0, bytes);
    bad_lo = send;
    bad_len = bytes / 2;
    chorus_result r = CHORUS_OK;
    int calls = 0;
    while (r == CHORUS_OK && calls < 200) {
        if (me == 1) protect_half();
        r = chorus_allreduce(c, send, recv, cnt, CHORUS_FLOAT32, CHORUS_SUM);
        calls++;
    }
    fprintf(stderr, "rank %d: %s after %d calls (own touches of the half: %d): %s\n", me,
            chorus_strerror(r), calls, (int)bad_touched, chorus_last_error(c));
    ASSERT_EQ(r, CHORUS_ERR_INVALID_ARG);
    ASSERT_STR_CONTAINS(chorus_last_error(c), "rank 0 cannot read");
    ASSERT_STR_CONTAINS(chorus_last_error(c), "bytes of rank 1's buffer in allreduce");
    printf("shm_cma: rank %d reported the unreadable buffer\n", me);
    signal(SIGSEGV, SIG_DFL);
    munmap(send, bytes);
    free(recv);
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "on";
    int victim = argc > 2 ? atoi(argv[2]) : 1;
    const char *rank_env = getenv("CHORUS_RANK");
    int rank = rank_env ? atoi(rank_env) : -1;
    if ((!strcmp(mode, "refused") || !strcmp(mode, "required")) && rank == victim) refuse_cma();
    chorus_comm *c;
    chorus_result r = chorus_init(&c);
    if (!strcmp(mode, "required")) {
        test_rank = rank;
        fprintf(stderr, "rank %d: chorus_init: %s: %s\n", rank, chorus_strerror(r),
                chorus_last_error(NULL));
        ASSERT(r != CHORUS_OK);
        char needle[64];
        snprintf(needle, sizeof(needle), "CHORUS_SHM_CMA=1, but rank %d cannot", victim);
        ASSERT_STR_CONTAINS(chorus_last_error(NULL), needle);
        printf("shm_cma: rank %d refused to start\n", rank);
        return 0;
    }
    ASSERT_OK(r);
    test_rank = chorus_rank(c);
    ASSERT(c->shm != NULL);
    if (!strcmp(mode, "tune")) {
        ASSERT_EQ(chorus_size(c), 2);
        ASSERT_EQ(c->shm->cma, 1);
        tune(c);
        chorus_finalize(c);
        return 0;
    }
    if (!strcmp(mode, "badbuf")) {
        badbuf(c);
        chorus_finalize(c);
        return 0;
    }
    int want = strcmp(mode, "refused") != 0;
    ASSERT_EQ(c->shm->cma, want);
    chorus_result sr;
    const chorus_algo *a = chorus__select(c, CHORUS_COLL_ALLREDUCE, CHORUS_MEM_HOST, 1 << 18, &sr);
    ASSERT_OK(sr);
    ASSERT_EQ(!strcmp(a->name, "shm_cma"), want);
    /* above CHORUS_SHM_CMA_MAX (384 KiB) the first call of a size class takes the pipelined
     * slots (then both are measured: the tune case) */
    a = chorus__select(c, CHORUS_COLL_ALLREDUCE, CHORUS_MEM_HOST, 1 << 20, &sr);
    ASSERT_OK(sr);
    if (chorus_size(c) == 2) ASSERT_STR_CONTAINS(a->name, "shm_pipelined");
    sums(c);
    ASSERT_OK(chorus_barrier(c));
    printf("shm_cma: rank %d %s single copy, sums correct\n", test_rank, want ? "with" : "without");
    chorus_finalize(c);
    return 0;
}

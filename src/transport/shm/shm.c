/*
 * shm.c - the shared-memory segment of a same-host communicator: create/attach/unlink,
 * waiting on peers' flags (spin, then futex sleep with liveness and deadline checks), the
 * abort word, and copies with non-temporal stores. The layout and protocol are in shm.h.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "transport/shm/shm.h"
#include "wire/wire.h"

#define SHM_MAGIC      0x314d4853524f4843ull /* "CHORSHM1" */
#define SHM_VERSION    5                     /* 5: measured allreduce records per rank */
#define SLEEP_SLICE_NS (5 * 1000 * 1000)     /* how often a sleeper checks liveness and deadline */

static size_t round_up(size_t x, size_t a)
{
    return (x + a - 1) / a * a;
}

static size_t layout(int size, size_t chunk, size_t *data_off)
{
    size_t ctrl_off = round_up(sizeof(chorus_shm_hdr), 4096);
    *data_off = round_up(ctrl_off + (size_t)size * sizeof(chorus_shm_ctrl), 4096);
    return *data_off + (size_t)size * 2 * chunk;
}

static uint64_t pidns_id(void)
{
    struct stat st;
    return stat("/proc/self/ns/pid", &st) == 0 ? (uint64_t)st.st_ino : 0;
}

static chorus_shm *map_segment(int fd, size_t total, int size, int rank, chorus_errbuf *e)
{
    chorus_shm *s = calloc(1, sizeof(*s));
    if (!s) {
        chorus__fail(e, CHORUS_ERR_NOMEM, "out of memory");
        return NULL;
    }
    s->data = calloc((size_t)size, sizeof(char *));
    s->pidfd = calloc((size_t)size, sizeof(int));
    s->pid_ok = calloc((size_t)size, sizeof(int));
    s->block = chorus__malloc_aligned(CHORUS_SHM_BLOCK);
    if (!s->data || !s->pidfd || !s->pid_ok || !s->block) {
        chorus__fail(e, CHORUS_ERR_NOMEM, "out of memory");
        chorus__shm_destroy(s);
        return NULL;
    }
    for (int q = 0; q < size; q++) s->pidfd[q] = -1;
    void *p = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
    if (p == MAP_FAILED) {
        chorus__fail(e, CHORUS_ERR_SYSTEM, "cannot map %zu bytes of shared memory: %s", total,
                     strerror(errno));
        chorus__shm_destroy(s);
        return NULL;
    }
    s->base = p;
    s->len = total;
    s->rank = rank;
    s->size = size;
    s->hdr = p;
    s->ctrl = (chorus_shm_ctrl *)((char *)p + round_up(sizeof(chorus_shm_hdr), 4096));
    s->what = "a collective";
    return s;
}

static void set_pointers(chorus_shm *s, size_t chunk)
{
    size_t data_off;
    layout(s->size, chunk, &data_off);
    s->chunk = chunk;
    for (int q = 0; q < s->size; q++)
        s->data[q] = (char *)s->base + data_off + (size_t)q * 2 * chunk;
    chorus_shm_ctrl *me = &s->ctrl[s->rank];
    me->pid = (int32_t)getpid();
    me->pidns = pidns_id();
}

chorus_result chorus__shm_create(const char *name, uint64_t comm_id, int size, size_t chunk,
                                 size_t oneshot_max, chorus_shm **out, chorus_errbuf *e)
{
    *out = NULL;
    size_t data_off, total = layout(size, chunk, &data_off);
    int fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0)
        return chorus__fail(e, CHORUS_ERR_SYSTEM, "shm_open(%s): %s", name, strerror(errno));
    int err = ftruncate(fd, (off_t)total) ? errno : posix_fallocate(fd, 0, (off_t)total);
    if (err) {
        close(fd);
        shm_unlink(name);
        return chorus__fail(e, CHORUS_ERR_SYSTEM,
                            "cannot reserve %zu bytes of shared memory for %s: %s (is /dev/shm "
                            "full or too small?)",
                            total, name, strerror(err));
    }
    chorus_shm *s = map_segment(fd, total, size, 0, e);
    close(fd);
    if (!s) {
        shm_unlink(name);
        return CHORUS_ERR_SYSTEM;
    }
    snprintf(s->name, sizeof(s->name), "%s", name);
    chorus_shm_hdr *h = s->hdr;
    h->comm_id = comm_id;
    h->size = (uint32_t)size;
    h->version = SHM_VERSION;
    h->chunk = chunk;
    h->oneshot_max = oneshot_max;
    h->total = total;
    s->oneshot_max = oneshot_max;
    set_pointers(s, chunk);
    __atomic_store_n(&h->magic, SHM_MAGIC, __ATOMIC_RELEASE);
    *out = s;
    return CHORUS_OK;
}

chorus_result chorus__shm_attach(const char *name, uint64_t comm_id, int size, int rank,
                                 chorus_shm **out, chorus_errbuf *e)
{
    *out = NULL;
    int fd = shm_open(name, O_RDWR | O_CLOEXEC, 0);
    if (fd < 0)
        return chorus__fail(e, CHORUS_ERR_SYSTEM, "shm_open(%s): %s", name, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) || (size_t)st.st_size < sizeof(chorus_shm_hdr)) {
        close(fd);
        return chorus__fail(e, CHORUS_ERR_SYSTEM, "shared memory %s is too small", name);
    }
    chorus_shm *s = map_segment(fd, (size_t)st.st_size, size, rank, e);
    close(fd);
    if (!s) return CHORUS_ERR_SYSTEM;
    snprintf(s->name, sizeof(s->name), "%s", name);
    chorus_shm_hdr *h = s->hdr;
    size_t data_off;
    if (__atomic_load_n(&h->magic, __ATOMIC_ACQUIRE) != SHM_MAGIC || h->version != SHM_VERSION ||
        h->comm_id != comm_id || h->size != (uint32_t)size || h->chunk == 0 ||
        h->cma_piece < 4096 || h->total != (uint64_t)st.st_size ||
        layout(size, h->chunk, &data_off) != h->total) {
        chorus__shm_destroy(s);
        return chorus__fail(e, CHORUS_ERR_PROTOCOL,
                            "shared memory %s does not belong to this communicator", name);
    }
    s->oneshot_max = h->oneshot_max;
    s->cma_min = h->cma_min;
    s->cma_piece = h->cma_piece;
    s->cma_max = h->cma_max;
    s->tune = h->cma_tune != 0;
    set_pointers(s, h->chunk);
    *out = s;
    return CHORUS_OK;
}

void chorus__shm_unlink(chorus_shm *s)
{
    if (!s || s->unlinked) return;
    s->unlinked = 1;
    if (shm_unlink(s->name) && errno != ENOENT)
        CHORUS_WARN(CHORUS_LOG_SHM, "shm_unlink(%s): %s", s->name, strerror(errno));
}

void chorus__shm_start(chorus_shm *s, const chorus_config *cfg, chorus_transport watch,
                       int local_size)
{
    s->watch = watch;
    long spin = cfg->shm_spin_us;
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    /* More ranks than cores: a spinning rank steals the core of the rank it waits for, so
     * it yields from the start. */
    s->yield_now = ncpu > 0 && local_size > ncpu;
    s->spin_ns = spin > 0 ? (uint64_t)spin * 1000 : 0;
    long nt = (long)cfg->shm_nt_min;
    s->nt_min = nt > 0 ? (size_t)nt : (size_t)-1;
    uint64_t myns = s->ctrl[s->rank].pidns;
    for (int q = 0; q < s->size; q++) {
        if (q == s->rank) continue;
        chorus_shm_ctrl *c = &s->ctrl[q];
        /* A pid means something only in our own pid namespace. */
        s->pid_ok[q] = c->pid > 0 && c->pidns == myns && myns != 0;
#ifdef SYS_pidfd_open
        if (s->pid_ok[q]) s->pidfd[q] = (int)syscall(SYS_pidfd_open, (pid_t)c->pid, 0);
#endif
    }
}

void chorus__shm_destroy(chorus_shm *s)
{
    if (!s) return;
    if (s->base) {
        __atomic_store_n(&s->ctrl[s->rank].finalized, 1, __ATOMIC_RELEASE);
        munmap(s->base, s->len);
    }
    for (int q = 0; s->pidfd && q < s->size; q++)
        if (s->pidfd[q] >= 0) close(s->pidfd[q]);
    free(s->pidfd);
    free(s->pid_ok);
    free(s->data);
    free(s->block);
    free(s);
}

/* ---- waking and waiting ----------------------------------------------------------------- */

static long futex(uint32_t *addr, int op, uint32_t val, const struct timespec *ts)
{
    return syscall(SYS_futex, addr, op, val, ts, NULL, 0);
}

void chorus__shm_wake(chorus_shm *s, chorus_shm_flag *f)
{
    (void)s;
    futex(&f->seq, FUTEX_WAKE, INT_MAX, NULL);
}

void chorus__shm_abort(chorus_shm *s, int culprit, chorus_result r, const char *why)
{
    if (!s) return;
    chorus_shm_hdr *h = s->hdr;
    uint32_t zero = 0;
    if (__atomic_compare_exchange_n(&h->abort, &zero, 1, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {
        h->abort_result = (int32_t)r;
        h->abort_rank = culprit;
        snprintf(h->abort_why, sizeof(h->abort_why), "%s", why);
        __atomic_store_n(&h->abort, 2, __ATOMIC_SEQ_CST);
    }
    /* Wake every sleeper, wherever it sleeps. */
    for (int q = 0; q < s->size; q++)
        for (int ch = 0; ch < CHORUS_SHM_NCH; ch++) chorus__shm_wake(s, &s->ctrl[q].ch[ch]);
}

static chorus_result aborted(chorus_shm *s, chorus_errbuf *e)
{
    chorus_shm_hdr *h = s->hdr;
    while (__atomic_load_n(&h->abort, __ATOMIC_ACQUIRE) == 1) sched_yield();
    chorus_result r = (chorus_result)h->abort_result;
    if (r == CHORUS_OK) r = CHORUS_ERR_ABORTED;
    return chorus__fail(e, r, "%s", h->abort_why);
}

chorus_result chorus__shm_check_abort(chorus_shm *s, chorus_errbuf *e)
{
    if (!__atomic_load_n(&s->hdr->abort, __ATOMIC_ACQUIRE)) return CHORUS_OK;
    return aborted(s, e);
}

chorus_result chorus__shm_blame(chorus_shm *s, int q, chorus_result r, chorus_errbuf *e)
{
    chorus__shm_abort(s, chorus__shm_wrank(s, q), r, e && e->msg[0] ? e->msg : chorus_strerror(r));
    return r;
}

static void op_abort(void *s, int culprit, chorus_result r, const char *why)
{
    chorus__shm_abort(s, culprit, r, why);
}

static chorus_result op_error(void *v, int *culprit, chorus_errbuf *e)
{
    chorus_shm *s = v;
    chorus_result r = chorus__shm_check_abort(s, e);
    if (culprit) *culprit = r == CHORUS_OK ? -1 : (int)s->hdr->abort_rank;
    return r;
}

const chorus_transport_ops chorus__shm_ops = {.name = "shm", .abort = op_abort, .error = op_error};

static int peer_dead(chorus_shm *s, int q)
{
    if (s->pidfd[q] >= 0) {
        struct pollfd p = {.fd = s->pidfd[q], .events = POLLIN};
        return poll(&p, 1, 0) > 0;
    }
    if (s->pid_ok[q]) return kill((pid_t)s->ctrl[q].pid, 0) < 0 && errno == ESRCH;
    return 0;
}

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

/* Whether rank q's process is stopped (SIGSTOP, or traced): state T or t in /proc. */
static int peer_stopped(chorus_shm *s, int q)
{
    if (!s->pid_ok[q]) return 0;
    char path[64], buf[256];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)s->ctrl[q].pid);
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    size_t len = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[len] = '\0';
    const char *paren = strrchr(buf, ')'); /* the name may hold spaces and parentheses */
    return paren && paren[1] == ' ' && (paren[2] == 'T' || paren[2] == 't');
}

/* The awaited member q is gone: it finalized, or its process exited or was killed. */
static chorus_result lost(chorus_shm *s, int q, chorus_errbuf *e)
{
    int fin = __atomic_load_n(&s->ctrl[q].finalized, __ATOMIC_ACQUIRE);
    return chorus__shm_blame(
        s, q,
        chorus__fail(e, CHORUS_ERR_PEER_LOST,
                     fin ? "rank %d (pid %d) has already finalized, but rank %d still "
                           "expects it in %s over shared memory"
                         : "rank %d (pid %d) was lost: the process exited or was killed "
                           "while rank %d waited for it in %s over shared memory",
                     chorus__shm_wrank(s, q), (int)s->ctrl[q].pid, chorus__shm_wrank(s, s->rank),
                     s->what),
        e);
}

/* A wait on peer made no progress for CHORUS_TIMEOUT_S. Blames a stopped rank when there is
 * one (the awaited rank may be alive and waiting for it too), else the awaited rank. */
static chorus_result timed_out(chorus_shm *s, int peer, chorus_errbuf *e)
{
    for (int i = 0; i < s->size; i++) {
        int q = (peer + i) % s->size; /* the awaited rank first */
        if (q != s->rank && peer_stopped(s, q))
            return chorus__shm_blame(
                s, q,
                chorus__fail(e, CHORUS_ERR_TIMEOUT,
                             "rank %d (pid %d) made no progress: its process is stopped "
                             "(SIGSTOP?); rank %d timed out waiting for rank %d in %s over "
                             "shared memory (CHORUS_TIMEOUT_S)",
                             chorus__shm_wrank(s, q), (int)s->ctrl[q].pid,
                             chorus__shm_wrank(s, s->rank), chorus__shm_wrank(s, peer), s->what),
                e);
    }
    return chorus__shm_blame(
        s, peer,
        chorus__fail(e, CHORUS_ERR_TIMEOUT,
                     "rank %d timed out waiting for rank %d (pid %d) in %s over shared "
                     "memory; that rank is stuck or not calling the same collectives "
                     "(CHORUS_TIMEOUT_S)",
                     chorus__shm_wrank(s, s->rank), chorus__shm_wrank(s, peer),
                     (int)s->ctrl[peer].pid, s->what),
        e);
}

chorus_result chorus__shm_wait_slow(chorus_shm *s, int peer, int ch, uint32_t target,
                                    chorus_errbuf *e)
{
    chorus_shm_flag *f = &s->ctrl[peer].ch[ch];
    uint32_t *ab = &s->hdr->abort;
    if (s->spin_ns) {
        /* Spin (pause) for spin_ns, longer than a sleeping CPU takes to wake (~100 us in a
         * VM): sleeping sooner makes ranks take turns oversleeping, each one's late arrival
         * sending the other to sleep. With more ranks than cores, yield between polls so that
         * the rank being waited for can run. */
        uint64_t until = chorus__now_ns() + s->spin_ns;
        for (unsigned i = 1;; i++) {
            if (s->yield_now)
                sched_yield();
            else
                cpu_relax();
            if (chorus__shm_reached(__atomic_load_n(&f->seq, __ATOMIC_ACQUIRE), target))
                return CHORUS_OK;
            if (s->yield_now || (i & 63) == 0) {
                if (__atomic_load_n(ab, __ATOMIC_RELAXED)) return aborted(s, e);
                if (chorus__now_ns() > until) break;
            }
        }
    }
    double deadline = chorus__deadline();
    for (;;) {
        if (chorus__shm_reached(__atomic_load_n(&f->seq, __ATOMIC_ACQUIRE), target))
            return CHORUS_OK;
        if (__atomic_load_n(ab, __ATOMIC_ACQUIRE)) return aborted(s, e);
        chorus_result r = chorus__tp_error(&s->watch, NULL, e);
        if (r != CHORUS_OK) return r;
        if (peer_dead(s, peer)) {
            /* it may have posted just before exiting */
            if (chorus__shm_reached(__atomic_load_n(&f->seq, __ATOMIC_ACQUIRE), target))
                return CHORUS_OK;
            return lost(s, peer, e);
        }
        if (chorus__now() > deadline) return timed_out(s, peer, e);
        __atomic_add_fetch(&f->waiters, 1, __ATOMIC_SEQ_CST);
        uint32_t v = __atomic_load_n(&f->seq, __ATOMIC_SEQ_CST);
        if (!chorus__shm_reached(v, target) && !__atomic_load_n(ab, __ATOMIC_SEQ_CST)) {
            struct timespec ts = {0, SLEEP_SLICE_NS};
            futex(&f->seq, FUTEX_WAIT, v, &ts);
        }
        __atomic_sub_fetch(&f->waiters, 1, __ATOMIC_SEQ_CST);
    }
}

chorus_result chorus__shm_wait_all(chorus_shm *s, int ch, uint64_t target, chorus_errbuf *e)
{
    for (int q = 0; q < s->size; q++)
        if (q != s->rank) CHORUS_CHECK(chorus__shm_wait(s, q, ch, target, e));
    return CHORUS_OK;
}

static void describe(uint64_t sig, uint64_t count, char *out, size_t len)
{
    unsigned kind = sig & 0xff, dt = (sig >> 8) & 0xff, op = (sig >> 16) & 0xff;
    int root = (int)(uint32_t)(sig >> 32);
    if (kind == CHORUS_COLL_BARRIER)
        snprintf(out, len, "barrier");
    else if (kind == CHORUS_COLL_BROADCAST)
        snprintf(out, len, "broadcast of %llu x %s from root %d", (unsigned long long)count,
                 chorus__dtype_name((int)dt), root);
    else if (kind == CHORUS_COLL_ALLREDUCE || kind == CHORUS_COLL_REDUCE_SCATTER)
        snprintf(out, len, "%s of %llu x %s (%s)", chorus__coll_kind_name((int)kind),
                 (unsigned long long)count, chorus__dtype_name((int)dt), chorus__op_name((int)op));
    else
        snprintf(out, len, "%s of %llu x %s", chorus__coll_kind_name((int)kind),
                 (unsigned long long)count, chorus__dtype_name((int)dt));
}

/* The call a signature describes, for chorus__call_diff (the variant is the algorithm's: not
 * something the caller chose). */
static chorus_call_sig call_sig(uint64_t sig, uint64_t count)
{
    chorus_call_sig c = {.kind = (int)(sig & 0xff),
                         .dtype = (int)((sig >> 8) & 0xff),
                         .op = (int)((sig >> 16) & 0xff),
                         .root = (int)(uint32_t)(sig >> 32),
                         .count = count};
    return c;
}

chorus_result chorus__shm_wait_in1(chorus_shm *s, int q, uint64_t g, uint64_t sig, uint64_t count,
                                   chorus_errbuf *e)
{
    CHORUS_CHECK(chorus__shm_wait(s, q, CHORUS_SHM_IN, g + 1, e));
    const chorus_shm_flag *f = &s->ctrl[q].ch[CHORUS_SHM_IN];
    if (CHORUS__LIKELY(f->sig[g & 1] == sig && f->count[g & 1] == count)) return CHORUS_OK;
    char mine[160], theirs[160], diff[160];
    describe(sig, count, mine, sizeof(mine));
    describe(f->sig[g & 1], f->count[g & 1], theirs, sizeof(theirs));
    chorus_call_sig a = call_sig(f->sig[g & 1], f->count[g & 1]), b = call_sig(sig, count);
    chorus__call_diff(&a, q, &b, s->rank, diff, sizeof(diff));
    return chorus__fail(e, CHORUS_ERR_MISMATCH,
                        "mismatched calls over shared memory: %s%srank %d called %s, rank %d "
                        "called %s%s",
                        diff, diff[0] ? " (" : "", chorus__shm_wrank(s, q), theirs,
                        chorus__shm_wrank(s, s->rank), mine, diff[0] ? ")" : "");
}

chorus_result chorus__shm_wait_in(chorus_shm *s, uint64_t g, uint64_t sig, uint64_t count,
                                  chorus_errbuf *e)
{
    for (int q = 0; q < s->size; q++)
        if (q != s->rank) CHORUS_CHECK(chorus__shm_wait_in1(s, q, g, sig, count, e));
    if (s->out_min < g) s->out_min = g; /* each peer finished chunk g-1 before posting IN */
    return CHORUS_OK;
}

/* ---- copies ----------------------------------------------------------------------------- */

#if defined(__x86_64__)
__attribute__((target("avx2"))) static void copy_nt_avx2(char *d, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i += 128) {
        __m256i a = _mm256_loadu_si256((const __m256i *)(s + i));
        __m256i b = _mm256_loadu_si256((const __m256i *)(s + i + 32));
        __m256i c = _mm256_loadu_si256((const __m256i *)(s + i + 64));
        __m256i x = _mm256_loadu_si256((const __m256i *)(s + i + 96));
        _mm256_stream_si256((__m256i *)(d + i), a);
        _mm256_stream_si256((__m256i *)(d + i + 32), b);
        _mm256_stream_si256((__m256i *)(d + i + 64), c);
        _mm256_stream_si256((__m256i *)(d + i + 96), x);
    }
}

static void copy_nt_sse2(char *d, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i += 128)
        for (size_t j = 0; j < 128; j += 16)
            _mm_stream_si128((__m128i *)(d + i + j), _mm_loadu_si128((const __m128i *)(s + i + j)));
}
#endif

void chorus__shm_copy(void *dst, const void *src, size_t n, int nt)
{
#if defined(__x86_64__)
    if (nt && n >= 4096) {
        static int have_avx2 = -1;
        if (have_avx2 < 0) have_avx2 = __builtin_cpu_supports("avx2");
        char *d = dst;
        const char *s = src;
        size_t head = (size_t)(-(uintptr_t)d & 63);
        memcpy(d, s, head);
        d += head;
        s += head;
        n -= head;
        size_t body = n & ~(size_t)127;
        if (have_avx2)
            copy_nt_avx2(d, s, body);
        else
            copy_nt_sse2(d, s, body);
        _mm_sfence();
        memcpy(d + body, s + body, n - body);
        return;
    }
#endif
    (void)nt;
    memcpy(dst, src, n);
}

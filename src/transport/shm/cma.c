/*
 * cma.c - single-copy reads from a peer's memory (process_vm_readv), the once-per-group probe
 * that tells whether the kernel allows them, and the Yama ptracer declaration. See cma.h.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/uio.h>
#include <unistd.h>

#include "transport/shm/cma.h"
#include "wire/auth.h"

#ifndef PR_SET_PTRACER
#define PR_SET_PTRACER 0x59616d61
#endif
#ifndef PR_SET_PTRACER_ANY
#define PR_SET_PTRACER_ANY ((unsigned long)-1)
#endif

/* Groups of this process holding PR_SET_PTRACER_ANY; the last one out clears it. */
static int ptracer_refs;

/* Yama's ptrace_scope: 1 restricts ptrace (and CMA) to ancestors unless the target declares
 * its tracer; 0 is the classic same-user rule; 2 and 3 no prctl can relax. -1: no Yama. */
static int yama_scope(void)
{
    int fd = open("/proc/sys/kernel/yama/ptrace_scope", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    char b[8] = {0};
    ssize_t n = read(fd, b, sizeof(b) - 1);
    close(fd);
    return n > 0 && b[0] >= '0' && b[0] <= '9' ? b[0] - '0' : -1;
}

void chorus__cma_prepare(chorus_shm *s)
{
    uint64_t v;
    chorus__auth_random(&v, sizeof(v));
    s->cma_word = v | 1;
    chorus_shm_ctrl *me = &s->ctrl[s->rank];
    me->cma_probe_addr = (uint64_t)(uintptr_t)&s->cma_word;
    me->cma_probe_val = s->cma_word;
    if (yama_scope() != 1) return;
    /* Siblings under one launcher are not each other's ancestors: without this, Yama refuses
     * every read. Any process of this user may then attach to this one, as without Yama. */
    if (__atomic_fetch_add(&ptracer_refs, 1, __ATOMIC_SEQ_CST) == 0 &&
        prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0) != 0)
        CHORUS_INFO(CHORUS_LOG_SHM, "prctl(PR_SET_PTRACER_ANY): %s", strerror(errno));
    s->cma_ptracer = 1;
    CHORUS_INFO(CHORUS_LOG_SHM, "Yama ptrace_scope is 1: processes of this user may read this one "
                                "(PR_SET_PTRACER_ANY) while its shared-memory groups live");
}

void chorus__cma_release(chorus_shm *s)
{
    if (!s || !s->cma_ptracer) return;
    s->cma_ptracer = 0;
    if (__atomic_sub_fetch(&ptracer_refs, 1, __ATOMIC_SEQ_CST) == 0)
        prctl(PR_SET_PTRACER, 0, 0, 0, 0);
}

static chorus_result cma_error(chorus_shm *s, int peer, int wr, int err, size_t n, chorus_errbuf *e)
{
    int pid = (int)s->ctrl[peer].pid;
    /* A rank that failed first (and may have exited since) has the better reason. */
    chorus_result ar = chorus__shm_check_abort(s, e);
    if (ar != CHORUS_OK) return ar;
    if (err == ESRCH) {
        /* The peer's memory is gone (it is exiting): wait, briefly, until it has exited, so
         * that its parent (chorus-run) learns of its death before it learns of ours and
         * names the rank that died first. */
        if (s->pidfd[peer] >= 0) {
            struct pollfd pf = {.fd = s->pidfd[peer], .events = POLLIN};
            (void)poll(&pf, 1, 1000);
        }
        /* the group breaks naming the lost rank, as a wait that finds it gone does */
        return chorus__shm_blame(
            s, peer,
            chorus__fail(e, CHORUS_ERR_PEER_LOST,
                         "rank %d (pid %d) was lost: the process exited or was killed while "
                         "rank %d %s its memory in %s over shared memory",
                         chorus__shm_wrank(s, peer), pid, chorus__shm_wrank(s, s->rank),
                         wr ? "wrote" : "read", s->what),
            e);
    }
    if (err == EFAULT)
        return chorus__fail(e, CHORUS_ERR_INVALID_ARG,
                            "rank %d cannot %s %zu bytes of rank %d's buffer in %s: the range "
                            "is not mapped in rank %d (is its buffer shorter than the count?)",
                            chorus__shm_wrank(s, s->rank), wr ? "write" : "read", n,
                            chorus__shm_wrank(s, peer), s->what, chorus__shm_wrank(s, peer));
    return chorus__fail(e, CHORUS_ERR_SYSTEM, "rank %d: %s to rank %d (pid %d) in %s: %s",
                        chorus__shm_wrank(s, s->rank),
                        wr ? "process_vm_writev" : "process_vm_readv", chorus__shm_wrank(s, peer),
                        pid, s->what, strerror(err));
}

/* n bytes between local and the peer's address remote, in either direction. */
static chorus_result transfer(chorus_shm *s, int peer, int wr, char *local, uint64_t remote,
                              size_t n, chorus_errbuf *e)
{
    pid_t pid = (pid_t)s->ctrl[peer].pid;
    while (n > 0) {
        struct iovec l = {local, n}, r = {(void *)(uintptr_t)remote, n};
        ssize_t got =
            wr ? process_vm_writev(pid, &l, 1, &r, 1, 0) : process_vm_readv(pid, &l, 1, &r, 1, 0);
        if (got <= 0) return cma_error(s, peer, wr, got < 0 ? errno : EFAULT, n, e);
        local += got;
        remote += (uint64_t)got;
        n -= (size_t)got;
    }
    return CHORUS_OK;
}

chorus_result chorus__cma_read(chorus_shm *s, int peer, void *dst, uint64_t from, size_t n,
                               chorus_errbuf *e)
{
    return transfer(s, peer, 0, dst, from, n, e);
}

chorus_result chorus__cma_write(chorus_shm *s, int peer, uint64_t to, const void *src, size_t n,
                                chorus_errbuf *e)
{
    return transfer(s, peer, 1, (char *)(uintptr_t)src, to, n, e);
}

chorus_result chorus__cma_probe(chorus_shm *s, chorus_errbuf *e)
{
    for (int q = 0; q < s->size; q++) {
        if (q == s->rank) continue;
        const chorus_shm_ctrl *c = &s->ctrl[q];
        if (!s->pid_ok[q])
            return chorus__fail(e, CHORUS_ERR_SYSTEM,
                                "rank %d is in another pid namespace than rank %d", q, s->rank);
        uint64_t v = 0;
        struct iovec l = {&v, sizeof(v)}, r = {(void *)(uintptr_t)c->cma_probe_addr, sizeof(v)};
        ssize_t got = process_vm_readv((pid_t)c->pid, &l, 1, &r, 1, 0);
        if (got != (ssize_t)sizeof(v))
            return chorus__fail(
                e, CHORUS_ERR_SYSTEM, "process_vm_readv from rank %d (pid %d) refused: %s%s", q,
                (int)c->pid, got < 0 ? strerror(errno) : "short read",
                got < 0 && errno == EPERM ? " (ptrace not permitted: Yama ptrace_scope, a seccomp "
                                            "profile or a non-dumpable process)"
                : got < 0 && errno == ENOSYS ? " (kernel without CMA)"
                                             : "");
        if (v != c->cma_probe_val)
            return chorus__fail(e, CHORUS_ERR_SYSTEM,
                                "process_vm_readv from rank %d (pid %d) read the wrong value", q,
                                (int)c->pid);
        got = process_vm_writev((pid_t)c->pid, &l, 1, &r, 1, 0); /* the same value back */
        if (got != (ssize_t)sizeof(v))
            return chorus__fail(e, CHORUS_ERR_SYSTEM,
                                "process_vm_writev to rank %d (pid %d) refused: %s", q, (int)c->pid,
                                got < 0 ? strerror(errno) : "short write");
    }
    return CHORUS_OK;
}

/*
 * engine_cases.c - the engine's behaviour beyond plain results, one case per run, all with
 * real ranks:  chorus-run -np N engine_cases CASE
 *
 *   mismatch    dtype, count, op, root and kind mismatches (new and cached names): every rank
 *               gets CHORUS_ERR_MISMATCH naming the tensor, the ranks and both values
 *   stall       a tensor only rank 0 submits: rank 0 warns on stderr naming it and rank 1;
 *               then a stall shutdown fails everything with CHORUS_ERR_TIMEOUT
 *   join        ranks with 2, 3, 4... batches: allreduces while others have joined (their
 *               part is zeros, an average divides by every rank, as Horovod); an allgather
 *               while a rank has joined fails naming it; join returns the last
 *   shutdown    a rank shuts down while another waits on an op: CHORUS_ERR_ABORTED, no hang;
 *               bad arguments give clear errors
 *   fusion      random floats: fusion on and off (and fp16 on the wire on and off) give the
 *               same bits as one chorus_allreduce per tensor
 *   many        thousands of small tensors per step
 *   timeline    a few steps with CHORUS_TIMELINE set (the list checks the JSON)
 *   divergence  equal weights pass; weights changed on one rank are reported with the rank
 *   compress    fp16 and bf16 on the wire, and a top-k compressor with error feedback that
 *               plugs in as a one-round gather plan
 *   death       a rank is killed while another waits: CHORUS_ERR_PEER_LOST naming it
 *   names       a name holds one op until the caller has seen it end: a second op under it
 *               is refused even after the first ended (seen by a callback alone), accepted
 *               after a wait, a poll or a release; deterministic, as Horovod's answer
 *   hold        ops enqueued under chorus_engine_hold run only after the last unhold, all in
 *               one fused allreduce (new and cached names); unhold without hold is refused;
 *               held ops end with the engine's shutdown
 *   desync      every rank waits for a name no other rank submits: CHORUS_ERR_MISMATCH on
 *               every rank naming each op and the ranks missing it; same count, other shape
 *               tags: a mismatch; the engine goes on
 */
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/base.h"
#include "chorus/engine.h"
#include "harness.h"
#include "reduce/reduce.h"

static chorus_comm *comm;
static int rank_, size_;

static chorus_engine *start(const chorus_engine_opts *o)
{
    chorus_engine *e;
    ASSERT_OK(chorus_engine_start(comm, o, &e));
    return e;
}

static void expect_fail(chorus_engine_handle *h, chorus_result want, const char *const *subs)
{
    chorus_result r = chorus_engine_wait(h);
    const char *msg = chorus_engine_handle_last_error(h);
    ASSERT_EQ(strcmp(msg, chorus_engine_handle_error(h)), 0); /* the older name says the same */
    if (r != want)
        test_fail(__FILE__, __LINE__, "'%s': got %s (%s), expected %s",
                  chorus_engine_handle_name(h), chorus_strerror(r), msg, chorus_strerror(want));
    for (int i = 0; subs && subs[i]; i++) ASSERT_STR_CONTAINS(msg, subs[i]);
    printf("%s -> %s\n", chorus_engine_handle_name(h), msg);
    chorus_engine_release(h);
}

static void fill_f32(float *x, size_t n, uint64_t seed)
{
    for (size_t i = 0; i < n; i++) {
        uint64_t r = test_rand(&seed);
        x[i] = (float)((double)(r >> 11) / 9007199254740992.0 * 2.0 - 1.0) * 3.7f;
    }
}

/* ---- mismatch ----------------------------------------------------------------------------- */

static void case_mismatch(void)
{
    ASSERT(size_ >= 3);
    chorus_engine *e = start(NULL);
    float a[16] = {0}, b[16];
    double d[16] = {0};
    chorus_engine_handle *h[6];
    /* dtype: rank 2 sends float64 */
    if (rank_ == 2)
        ASSERT_OK(chorus_engine_allreduce(e, "mm.dtype", d, d, 16, CHORUS_FLOAT64, CHORUS_SUM, NULL,
                                          &h[0]));
    else
        ASSERT_OK(chorus_engine_allreduce(e, "mm.dtype", a, b, 16, CHORUS_FLOAT32, CHORUS_SUM, NULL,
                                          &h[0]));
    /* count: rank 1 sends 15 */
    ASSERT_OK(chorus_engine_allreduce(e, "mm.count", a, b, rank_ == 1 ? 15 : 16, CHORUS_FLOAT32,
                                      CHORUS_SUM, NULL, &h[1]));
    /* op: rank 0 asks for max */
    float c[4] = {0}, cc[4];
    ASSERT_OK(chorus_engine_allreduce(e, "mm.op", c, cc, 4, CHORUS_FLOAT32,
                                      rank_ == 0 ? CHORUS_MAX : CHORUS_SUM, NULL, &h[2]));
    /* root: rank 2 names root 1 */
    float bc[4] = {0};
    ASSERT_OK(chorus_engine_broadcast(e, "mm.root", bc, 4, CHORUS_FLOAT32, rank_ == 2 ? 1 : 0, NULL,
                                      &h[3]));
    /* kind: rank 1 broadcasts what the others allreduce */
    float k[4] = {0}, kk[4];
    if (rank_ == 1)
        ASSERT_OK(chorus_engine_broadcast(e, "mm.kind", k, 4, CHORUS_FLOAT32, 0, NULL, &h[4]));
    else
        ASSERT_OK(chorus_engine_allreduce(e, "mm.kind", k, kk, 4, CHORUS_FLOAT32, CHORUS_SUM, NULL,
                                          &h[4]));
    const char *s0[] = {"mm.dtype", "dtype", "float32", "float64", "rank 2", NULL};
    const char *s1[] = {"mm.count", "count", "16", "15", "rank 1", NULL};
    const char *s2[] = {"mm.op", "op", "max", "sum", "rank 0", NULL};
    const char *s3[] = {"mm.root", "root", "rank 2", NULL};
    const char *s4[] = {"mm.kind", "operation", "broadcast", "allreduce", "rank 1", NULL};
    expect_fail(h[0], CHORUS_ERR_MISMATCH, s0);
    expect_fail(h[1], CHORUS_ERR_MISMATCH, s1);
    expect_fail(h[2], CHORUS_ERR_MISMATCH, s2);
    expect_fail(h[3], CHORUS_ERR_MISMATCH, s3);
    expect_fail(h[4], CHORUS_ERR_MISMATCH, s4);
    /* a cached name whose count changes on one rank */
    for (int step = 0; step < 3; step++) {
        size_t n = step == 2 && rank_ == 2 ? 9 : 8;
        ASSERT_OK(chorus_engine_allreduce(e, "mm.cached", a, b, n, CHORUS_FLOAT32, CHORUS_SUM, NULL,
                                          &h[5]));
        if (step < 2) {
            ASSERT_OK(chorus_engine_wait(h[5]));
            chorus_engine_release(h[5]);
        } else {
            const char *s5[] = {"mm.cached", "count", "8", "9", "rank 2", NULL};
            expect_fail(h[5], CHORUS_ERR_MISMATCH, s5);
        }
    }
    /* the engine still works, and the name can be used again */
    for (int i = 0; i < 16; i++) a[i] = (float)(rank_ + i);
    ASSERT_OK(
        chorus_engine_allreduce(e, "mm.count", a, b, 16, CHORUS_FLOAT32, CHORUS_SUM, NULL, &h[0]));
    ASSERT_OK(chorus_engine_wait(h[0]));
    chorus_engine_release(h[0]);
    for (int i = 0; i < 16; i++) ASSERT_EQ(b[i], size_ * i + size_ * (size_ - 1) / 2);
    ASSERT_OK(chorus_engine_shutdown(e));
}

/* ---- stall -------------------------------------------------------------------------------- */

static void case_stall(void)
{
    ASSERT(size_ == 2);
    char path[64] = "";
    int saved = -1;
    if (rank_ == 0) { /* catch this rank's stderr to check the warning */
        snprintf(path, sizeof(path), "/tmp/chorus_stall_%d.txt", (int)getpid());
        fflush(stderr);
        saved = dup(2);
        ASSERT(freopen(path, "w", stderr) != NULL);
    }
    chorus_engine_opts o;
    chorus_engine_opts_init(&o);
    o.stall_warn_s = 1;
    chorus_engine *e = start(&o);
    float x[8] = {1}, y[8], z[8];
    chorus_engine_handle *lonely = NULL, *shared;
    if (rank_ == 0)
        ASSERT_OK(chorus_engine_allreduce(e, "lonely.grad", x, y, 8, CHORUS_FLOAT32, CHORUS_SUM,
                                          NULL, &lonely));
    ASSERT_OK(chorus_engine_allreduce(e, "shared.grad", x, z, 8, CHORUS_FLOAT32, CHORUS_SUM, NULL,
                                      &shared));
    ASSERT_OK(chorus_engine_wait(shared));
    chorus_engine_release(shared);
    double t0 = chorus__now();
    while (chorus__now() - t0 < 2.6) usleep(50000);
    if (rank_ == 0) ASSERT(!chorus_engine_poll(lonely));
    ASSERT_OK(chorus_engine_barrier(e));
    ASSERT_OK(chorus_engine_shutdown(e));
    if (rank_ == 0) {
        const char *s[] = {"lonely.grad", "shut down", NULL};
        fflush(stderr);
        dup2(saved, 2);
        close(saved);
        FILE *f = fopen(path, "r");
        ASSERT(f != NULL);
        char buf[8192] = "";
        size_t n = fread(buf, 1, sizeof(buf) - 1, f);
        buf[n] = 0;
        fclose(f);
        unlink(path);
        printf("rank 0 stderr: %s\n", buf);
        ASSERT_STR_CONTAINS(buf, "stall");
        ASSERT_STR_CONTAINS(buf, "'lonely.grad' (ready on rank 0, missing on rank 1");
        ASSERT(strstr(buf, "shared.grad") == NULL);
        expect_fail(lonely, CHORUS_ERR_ABORTED, s);
    }
    /* stall shutdown: everything fails with a timeout on every rank, nobody hangs */
    o.stall_warn_s = 0.5;
    o.stall_shutdown_s = 1.5;
    e = start(&o);
    chorus_engine_handle *h;
    char nm[32];
    snprintf(nm, sizeof(nm), "only.rank%d", rank_);
    ASSERT_OK(chorus_engine_allreduce(e, nm, x, y, 8, CHORUS_FLOAT32, CHORUS_SUM, NULL, &h));
    const char *s2[] = {"stall shutdown", "only.rank", NULL};
    expect_fail(h, CHORUS_ERR_TIMEOUT, s2);
    ASSERT(chorus_engine_allreduce(e, "after", x, y, 8, CHORUS_FLOAT32, CHORUS_SUM, NULL, &h) ==
           CHORUS_ERR_TIMEOUT);
    ASSERT_STR_CONTAINS(chorus_engine_last_error(e), "stall shutdown");
    ASSERT(chorus_engine_shutdown(e) == CHORUS_ERR_TIMEOUT);
}

/* ---- desync ------------------------------------------------------------------------------- */

static void case_desync(void)
{
    chorus_engine_opts o;
    chorus_engine_opts_init(&o);
    o.desync_s = 0.5;
    o.stall_warn_s = 0;
    chorus_engine *e = start(&o);
    float x[8] = {1, 1, 1, 1, 1, 1, 1, 1}, y[8];
    char nm[32];
    snprintf(nm, sizeof(nm), "desync.rank%d", rank_);
    chorus_engine_handle *h;
    ASSERT_OK(chorus_engine_allreduce(e, nm, x, y, 8, CHORUS_FLOAT32, CHORUS_SUM, NULL, &h));
    const char *s[] = {"desynchronised", "'desync.rank0' (waited for on rank 0, never submitted on",
                       "'desync.rank1' (waited for on rank 1, never submitted on", NULL};
    expect_fail(h, CHORUS_ERR_MISMATCH, s);
    /* the same name with the same count but another shape tag on rank 1 */
    chorus_engine_tensor_opts t;
    chorus_engine_tensor_opts_init(&t);
    t.shape_tag = rank_ == 1 ? 0x20000001u : 0x20000002u;
    ASSERT_OK(
        chorus_engine_allreduce(e, "desync.shape", x, y, 8, CHORUS_FLOAT32, CHORUS_SUM, &t, &h));
    const char *s2[] = {"desync.shape", "shape differs between rank", "8 elements", NULL};
    expect_fail(h, CHORUS_ERR_MISMATCH, s2);
    /* the engine goes on */
    ASSERT_OK(
        chorus_engine_allreduce(e, "desync.after", x, y, 8, CHORUS_FLOAT32, CHORUS_SUM, NULL, &h));
    ASSERT_OK(chorus_engine_wait(h));
    chorus_engine_release(h);
    ASSERT_EQ(y[0], (float)size_);
    ASSERT_OK(chorus_engine_shutdown(e));
}

/* ---- join --------------------------------------------------------------------------------- */

static void case_join(void)
{
    chorus_engine *e = start(NULL);
    int mine = 2 + rank_; /* rank r has 2 + r batches */
    float g[64], out[64];
    double dsum[64];
    for (int step = 0; step < mine; step++) {
        int active = 0;
        for (int r = 0; r < size_; r++) active += step < 2 + r;
        for (int i = 0; i < 64; i++) g[i] = (float)(rank_ + 1) * (float)(i + step);
        chorus_engine_handle *h[4];
        ASSERT_OK(chorus_engine_allreduce(e, "w.grad", g, out, 64, CHORUS_FLOAT32, CHORUS_AVG, NULL,
                                          &h[0]));
        double dv = rank_ + 1.0;
        ASSERT_OK(chorus_engine_allreduce(e, "w.sum", &dv, dsum, 1, CHORUS_FLOAT64, CHORUS_SUM,
                                          NULL, &h[1]));
        int32_t rows[3] = {rank_, rank_, rank_};
        ASSERT_OK(chorus_engine_allgather(e, "rows", rows, (size_t)(rank_ % 2 + 1), 1, CHORUS_INT32,
                                          NULL, &h[2]));
        float mn = (float)(10 - rank_), mnout;
        ASSERT_OK(chorus_engine_allreduce(e, "w.min", &mn, &mnout, 1, CHORUS_FLOAT32, CHORUS_MIN,
                                          NULL, &h[3]));
        for (int k = 0; k < 4; k++)
            if (k != 2) ASSERT_OK(chorus_engine_wait(h[k]));
        if (active == size_) {
            ASSERT_OK(chorus_engine_wait(h[2]));
        } else { /* an allgather has no meaning while a rank has joined: it fails, naming it */
            ASSERT_EQ(chorus_engine_wait(h[2]), CHORUS_ERR_INVALID_ARG);
            ASSERT_STR_CONTAINS(chorus_engine_handle_error(h[2]),
                                step == 2
                                    ? "allgather 'rows' is not supported while rank 0 has joined"
                                    : "allgather 'rows' is not supported while ranks 0-");
        }
        /* the sum of the ranks that still have data, divided by every rank */
        double s = 0, want_sum = 0;
        int want_rows = 0;
        float want_min = 1e9f;
        for (int r = 0; r < size_; r++)
            if (step < 2 + r) {
                s += r + 1;
                want_sum += r + 1;
                want_rows += r % 2 + 1;
                if (10 - r < want_min) want_min = (float)(10 - r);
            }
        for (int i = 0; i < 64; i++) {
            float want = (float)s * (float)(i + step) / (float)size_;
            if (fabsf(out[i] - want) > 1e-4f * fabsf(want) + 1e-6f)
                test_fail(__FILE__, __LINE__, "step %d [%d]: %g, want %g", step, i, out[i], want);
        }
        ASSERT(dsum[0] == want_sum);
        ASSERT(mnout == want_min);
        if (active == size_) {
            size_t nrows;
            int32_t *all = chorus_engine_take_output(h[2], &nrows);
            ASSERT_EQ(nrows, want_rows);
            free(all);
        }
        for (int k = 0; k < 4; k++) chorus_engine_release(h[k]);
    }
    int last = -2;
    ASSERT_OK(chorus_engine_join(e, &last));
    ASSERT_EQ(last, size_ - 1);
    /* after everyone joined, normal ops again */
    float one = 1, tot;
    chorus_engine_handle *h;
    ASSERT_OK(chorus_engine_allreduce(e, "after.join", &one, &tot, 1, CHORUS_FLOAT32, CHORUS_SUM,
                                      NULL, &h));
    ASSERT_OK(chorus_engine_wait(h));
    chorus_engine_release(h);
    ASSERT(tot == (float)size_);
    ASSERT_OK(chorus_engine_join(e, &last)); /* everyone at once: the highest rank */
    ASSERT_EQ(last, size_ - 1);
    ASSERT_OK(chorus_engine_shutdown(e));
}

/* ---- one op per name ---------------------------------------------------------------------- */

static void on_end(chorus_engine_handle *h, chorus_result r, void *arg)
{
    (void)h;
    (void)r;
    __atomic_store_n((int *)arg, 1, __ATOMIC_RELEASE);
}

/* Enqueues an allreduce of x under name whose end sets *ended (the caller gets the handle). */
static chorus_engine_handle *sum_named(chorus_engine *e, const char *name, float *x, int *ended)
{
    chorus_engine_tensor_opts o;
    chorus_engine_tensor_opts_init(&o);
    o.callback = on_end;
    o.callback_arg = ended;
    *ended = 0;
    chorus_engine_handle *h;
    ASSERT_OK(chorus_engine_allreduce(e, name, x, x, 4, CHORUS_FLOAT32, CHORUS_SUM, &o, &h));
    return h;
}

/* Waits for the callback (the list's deadline bounds a hang); neither wait nor poll is used. */
static void until_ended(const int *ended)
{
    while (!__atomic_load_n(ended, __ATOMIC_ACQUIRE)) usleep(1000);
}

static void expect_taken(chorus_engine *e, const char *name)
{
    float x[4] = {0};
    chorus_engine_handle *h = (chorus_engine_handle *)1;
    ASSERT(chorus_engine_allreduce(e, name, x, x, 4, CHORUS_FLOAT32, CHORUS_SUM, NULL, &h) ==
           CHORUS_ERR_INVALID_ARG);
    ASSERT(h == NULL);
    const char *msg = chorus_engine_last_error(e);
    ASSERT_STR_CONTAINS(msg, name);
    ASSERT_STR_CONTAINS(msg, "still pending on this rank");
    ASSERT_STR_CONTAINS(msg, "waited for, polled to its end or released");
    printf("rank %d: %s\n", rank_, msg);
}

static void case_names(void)
{
    ASSERT(size_ == 2);
    chorus_engine *e = start(NULL);
    float x[4], y[4], z[4], w[4];
    int ex, ey, ez, ew;
    for (int i = 0; i < 4; i++) x[i] = y[i] = z[i] = w[i] = 1;
    /* ended on this rank, but the caller has not seen it: refused, every time */
    chorus_engine_handle *hx = sum_named(e, "names.x", x, &ex);
    until_ended(&ex);
    expect_taken(e, "names.x");
    ASSERT(chorus_engine_poll(hx) == 1); /* seen: the name is free again */
    chorus_engine_handle *hx2 = sum_named(e, "names.x", x, &ex);
    ASSERT_OK(chorus_engine_wait(hx2));
    ASSERT(x[0] == 4.0f); /* 1 + 1, then 2 + 2 */
    chorus_engine_release(hx);
    chorus_engine_release(hx2);
    /* released after its end: free */
    chorus_engine_handle *hy = sum_named(e, "names.y", y, &ey);
    until_ended(&ey);
    expect_taken(e, "names.y");
    chorus_engine_release(hy);
    hy = sum_named(e, "names.y", y, &ey);
    ASSERT_OK(chorus_engine_wait(hy));
    chorus_engine_release(hy);
    ASSERT(y[0] == 4.0f);
    /* released before its end: the op is still pending here, the name stays taken until it
     * ends (rank 1 submits only after rank 0's check) */
    float go = 0;
    chorus_engine_handle *hg;
    if (rank_ == 0) {
        chorus_engine_handle *hz = sum_named(e, "names.z", z, &ez);
        chorus_engine_release(hz);
        expect_taken(e, "names.z");
    }
    ASSERT_OK(chorus_engine_broadcast(e, "names.go", &go, 1, CHORUS_FLOAT32, 0, NULL, &hg));
    ASSERT_OK(chorus_engine_wait(hg));
    chorus_engine_release(hg);
    chorus_engine_handle *hz;
    if (rank_ == 1) {
        hz = sum_named(e, "names.z", z, &ez);
        ASSERT_OK(chorus_engine_wait(hz));
        chorus_engine_release(hz);
    } else {
        until_ended(&ez); /* no handle left: given back at the end, before the callback */
    }
    ASSERT_OK(
        chorus_engine_allreduce(e, "names.z", z, z, 4, CHORUS_FLOAT32, CHORUS_SUM, NULL, &hz));
    ASSERT_OK(chorus_engine_wait(hz));
    chorus_engine_release(hz);
    ASSERT(z[0] == 4.0f);
    /* a handle that outlives its engine gives its name back to a set that only it holds */
    chorus_engine_handle *hw = sum_named(e, "names.w", w, &ew);
    until_ended(&ew);
    ASSERT_OK(chorus_engine_shutdown(e));
    ASSERT_OK(chorus_engine_wait(hw));
    chorus_engine_release(hw);
    ASSERT(w[0] == 2.0f);
}

/* ---- hold ---------------------------------------------------------------------------------- */

#define NH 5

/* Enqueues NH sums named pre.j (j + 1 floats each, set to rank + j) under the holds already
 * taken; returns nothing until they are waited for. */
static void held_sums(chorus_engine *e, const char *pre, float (*x)[NH], chorus_engine_handle **h)
{
    for (int j = 0; j < NH; j++) {
        char nm[32];
        snprintf(nm, sizeof(nm), "%s.%d", pre, j);
        for (int k = 0; k <= j; k++) x[j][k] = (float)(rank_ + j);
        ASSERT_OK(chorus_engine_allreduce(e, nm, x[j], x[j], (size_t)j + 1, CHORUS_FLOAT32,
                                          CHORUS_SUM, NULL, &h[j]));
    }
}

static void wait_sums(float (*x)[NH], chorus_engine_handle **h)
{
    for (int j = 0; j < NH; j++) {
        ASSERT_OK(chorus_engine_wait(h[j]));
        chorus_engine_release(h[j]);
        for (int k = 0; k <= j; k++)
            ASSERT(x[j][k] == (float)(size_ * j + size_ * (size_ - 1) / 2));
    }
}

static uint64_t fused_calls(chorus_engine *e)
{
    chorus_engine_stats st;
    ASSERT_OK(chorus_engine_get_stats(e, &st));
    return st.fused_batches;
}

/* Ops enqueued under a hold stay with the caller until the last unhold, then reach the engine
 * together: one cycle and one fused allreduce for all of them, on new and on cached names,
 * on every rank. An unhold without a hold, or of no engine, is refused with its reason; held
 * ops end with an error when the engine shuts down. */
static void case_hold(void)
{
    chorus_engine *e = start(NULL);
    float x[NH][NH];
    chorus_engine_handle *h[NH];
    for (int step = 0; step < 3; step++) { /* new names, then cached ones */
        uint64_t before = fused_calls(e);
        ASSERT_OK(chorus_engine_hold(e));
        if (step == 2) ASSERT_OK(chorus_engine_hold(e)); /* nested */
        held_sums(e, "hold", x, h);
        usleep(20000); /* whatever the wait, a held op cannot have run */
        for (int j = 0; j < NH; j++) ASSERT(chorus_engine_poll(h[j]) == 0);
        ASSERT_OK(chorus_engine_unhold(e));
        if (step == 2) {
            usleep(20000);
            for (int j = 0; j < NH; j++) ASSERT(chorus_engine_poll(h[j]) == 0);
            ASSERT_OK(chorus_engine_unhold(e));
        }
        wait_sums(x, h);
        uint64_t calls = fused_calls(e) - before;
        if (rank_ == 0)
            printf("hold step %d: %d tensors in %llu allreduce call(s)\n", step, NH,
                   (unsigned long long)calls);
        ASSERT_EQ(calls, 1);
    }
    ASSERT(chorus_engine_unhold(e) == CHORUS_ERR_INVALID_ARG);
    ASSERT_STR_CONTAINS(chorus_engine_last_error(e),
                        "chorus_engine_unhold: the engine is not held");
    printf("unhold without hold -> %s\n", chorus_engine_last_error(e));
    ASSERT(chorus_engine_hold(NULL) == CHORUS_ERR_INVALID_ARG);
    ASSERT_STR_CONTAINS(chorus_last_error(NULL), "chorus_engine_hold: engine is NULL");
    ASSERT(chorus_engine_unhold(NULL) == CHORUS_ERR_INVALID_ARG);
    /* held at shutdown: the ops end with the engine's end, nobody hangs */
    ASSERT_OK(chorus_engine_hold(e));
    held_sums(e, "hold.never", x, h);
    ASSERT_OK(chorus_engine_shutdown(e));
    for (int j = 0; j < NH; j++) {
        chorus_result r = chorus_engine_wait(h[j]);
        if (j == 0)
            printf("held at shutdown -> %s: %s\n", chorus_strerror(r),
                   chorus_engine_handle_error(h[j]));
        ASSERT(r == CHORUS_ERR_ABORTED);
        chorus_engine_release(h[j]);
    }
}

/* ---- shutdown and bad arguments ----------------------------------------------------------- */

static void case_shutdown(void)
{
    ASSERT(size_ == 2);
    chorus_engine *e = start(NULL);
    float x[4] = {0}, y[4];
    chorus_engine_handle *h;
    /* bad arguments: clear errors, nothing enqueued */
    ASSERT(chorus_engine_allreduce(e, "", x, y, 4, CHORUS_FLOAT32, CHORUS_SUM, NULL, &h) ==
           CHORUS_ERR_INVALID_ARG);
    ASSERT_STR_CONTAINS(chorus_engine_last_error(e), "name is empty");
    ASSERT(h == NULL);
    ASSERT(chorus_engine_allreduce(e, "chorus.x", x, y, 4, CHORUS_FLOAT32, CHORUS_SUM, NULL, &h) ==
           CHORUS_ERR_INVALID_ARG);
    ASSERT_STR_CONTAINS(chorus_engine_last_error(e), "reserved");
    ASSERT(chorus_engine_allreduce(e, "x", NULL, y, 4, CHORUS_FLOAT32, CHORUS_SUM, NULL, &h) ==
           CHORUS_ERR_INVALID_ARG);
    ASSERT_STR_CONTAINS(chorus_engine_last_error(e), "NULL buffer");
    ASSERT(chorus_engine_allreduce(e, "x", x, y, 4, (chorus_dtype)99, CHORUS_SUM, NULL, &h) ==
           CHORUS_ERR_INVALID_ARG);
    ASSERT_STR_CONTAINS(chorus_engine_last_error(e), "unknown dtype 99");
    ASSERT(chorus_engine_allreduce(e, "x", x, y, 4, CHORUS_FLOAT32, (chorus_op)77, NULL, &h) ==
           CHORUS_ERR_INVALID_ARG);
    ASSERT_STR_CONTAINS(chorus_engine_last_error(e), "unknown op 77");
    ASSERT(chorus_engine_allreduce(e, "x", x, y, 4, CHORUS_FLOAT32, CHORUS_BOR, NULL, &h) ==
           CHORUS_ERR_INVALID_ARG);
    ASSERT_STR_CONTAINS(chorus_engine_last_error(e), "op bor needs an integer dtype, not float32");
    int32_t iv[4] = {0}, io[4];
    chorus_engine_tensor_opts sc = {.prescale = 0.5};
    ASSERT(chorus_engine_allreduce(e, "x", iv, io, 4, CHORUS_INT32, CHORUS_SUM, &sc, &h) ==
           CHORUS_ERR_INVALID_ARG);
    ASSERT_STR_CONTAINS(chorus_engine_last_error(e), "need a float dtype");
    ASSERT(chorus_engine_broadcast(e, "x", x, 4, CHORUS_FLOAT32, 5, NULL, &h) ==
           CHORUS_ERR_INVALID_ARG);
    ASSERT_STR_CONTAINS(chorus_engine_last_error(e), "root 5 is out of range");
    ASSERT(chorus_engine_alltoall(e, "x", x, y, 3, CHORUS_FLOAT32, NULL, &h) ==
           CHORUS_ERR_INVALID_ARG);
    ASSERT_STR_CONTAINS(chorus_engine_last_error(e), "not a multiple");
    char longname[300];
    memset(longname, 'a', sizeof(longname) - 1);
    longname[299] = 0;
    ASSERT(chorus_engine_allreduce(e, longname, x, y, 4, CHORUS_FLOAT32, CHORUS_SUM, NULL, &h) ==
           CHORUS_ERR_INVALID_ARG);
    ASSERT_STR_CONTAINS(chorus_engine_last_error(e), "longer than");
    /* the same name twice while pending */
    chorus_engine_handle *p;
    if (rank_ == 0) {
        ASSERT_OK(
            chorus_engine_allreduce(e, "pending.x", x, y, 4, CHORUS_FLOAT32, CHORUS_SUM, NULL, &p));
        ASSERT(chorus_engine_allreduce(e, "pending.x", x, y, 4, CHORUS_FLOAT32, CHORUS_SUM, NULL,
                                       &h) == CHORUS_ERR_INVALID_ARG);
        ASSERT_STR_CONTAINS(chorus_engine_last_error(e), "still pending");
        /* rank 1 never submits pending.x and shuts down: the wait ends, it does not hang */
        const char *s[] = {"shut down", "rank 1", NULL};
        expect_fail(p, CHORUS_ERR_ABORTED, s);
        ASSERT(chorus_engine_allreduce(e, "later", x, y, 4, CHORUS_FLOAT32, CHORUS_SUM, NULL, &h) ==
               CHORUS_ERR_ABORTED);
        ASSERT_STR_CONTAINS(chorus_engine_last_error(e), "shut down");
    } else {
        usleep(300000);
    }
    ASSERT_OK(chorus_engine_shutdown(e));
    ASSERT(chorus_engine_shutdown(NULL) == CHORUS_ERR_INVALID_ARG);
    chorus_engine *bad;
    ASSERT(chorus_engine_start(NULL, NULL, &bad) == CHORUS_ERR_INVALID_ARG);
    ASSERT_STR_CONTAINS(chorus_last_error(NULL), "comm is NULL");
    /* a timeline file that cannot be written: every rank fails to start, with the reason */
    chorus_engine_opts o;
    chorus_engine_opts_init(&o);
    o.timeline = "/nonexistent-dir/t%r.json";
    ASSERT(chorus_engine_start(comm, &o, &bad) != CHORUS_OK);
    ASSERT(bad == NULL);
    ASSERT_STR_CONTAINS(chorus_last_error(comm), "timeline");
}

/* ---- fusion on/off ------------------------------------------------------------------------ */

#define NF 120

static void run_set(chorus_engine *e, float **in, float **out, const size_t *cnt, int fp16,
                    int step)
{
    chorus_engine_handle *h[NF];
    chorus_engine_tensor_opts o = {.compressor = fp16 ? chorus_compressor_fp16() : NULL,
                                   .no_compression = !fp16};
    for (int j = NF - 1; j >= 0; j--) { /* backward order */
        char nm[32];
        snprintf(nm, sizeof(nm), "layer%d.grad", j);
        ASSERT_OK(chorus_engine_allreduce(e, nm, in[j], out[j], cnt[j], CHORUS_FLOAT32,
                                          j % 3 ? CHORUS_AVG : CHORUS_SUM, &o, &h[j]));
    }
    (void)step;
    for (int j = 0; j < NF; j++) {
        ASSERT_OK(chorus_engine_wait(h[j]));
        chorus_engine_release(h[j]);
    }
}

static void case_fusion(void)
{
    float *in[NF], *a[NF], *b[NF], *ref[NF];
    size_t cnt[NF];
    for (int j = 0; j < NF; j++) {
        cnt[j] = j % 25 == 0 ? 300000 + (size_t)j : 1 + (size_t)(j * 131) % 5000;
        in[j] = malloc(cnt[j] * 4);
        a[j] = malloc(cnt[j] * 4);
        b[j] = malloc(cnt[j] * 4);
        ref[j] = malloc(cnt[j] * 4);
        fill_f32(in[j], cnt[j], (uint64_t)j * 1000 + (uint64_t)rank_);
        /* reference: one plain allreduce per tensor */
        ASSERT_OK(chorus_allreduce(comm, in[j], ref[j], cnt[j], CHORUS_FLOAT32,
                                   j % 3 ? CHORUS_AVG : CHORUS_SUM));
    }
    for (int fp16 = 0; fp16 < 2; fp16++) {
        chorus_engine_opts o;
        chorus_engine_opts_init(&o);
        chorus_engine *e = start(&o); /* fusion on (default threshold) */
        for (int step = 0; step < 2; step++) run_set(e, in, a, cnt, fp16, step);
        chorus_engine_stats st;
        chorus_engine_get_stats(e, &st);
        ASSERT_OK(chorus_engine_shutdown(e));
        o.fusion_threshold = 0; /* fusion off */
        e = start(&o);
        run_set(e, in, b, cnt, fp16, 0);
        chorus_engine_stats st0;
        chorus_engine_get_stats(e, &st0);
        ASSERT_OK(chorus_engine_shutdown(e));
        if (rank_ == 0)
            printf("fp16=%d: fusion on: %llu allreduce calls for %d tensors x 2 steps; off: %llu\n",
                   fp16, (unsigned long long)st.fused_batches, NF,
                   (unsigned long long)st0.fused_batches);
        ASSERT(st.fused_batches < (uint64_t)NF); /* it did fuse */
        ASSERT_EQ(st0.fused_batches, NF);
        for (int j = 0; j < NF; j++) {
            if (memcmp(a[j], b[j], cnt[j] * 4))
                test_fail(__FILE__, __LINE__,
                          "fp16=%d tensor %d (%zu floats): fusion on and off differ", fp16, j,
                          cnt[j]);
            if (!fp16 && memcmp(a[j], ref[j], cnt[j] * 4))
                test_fail(__FILE__, __LINE__, "tensor %d differs from a plain chorus_allreduce", j);
            if (fp16) /* close to the float32 result: fp16 carries 11 bits */
                for (size_t k = 0; k < cnt[j]; k++)
                    ASSERT(fabsf(a[j][k] - ref[j][k]) <= 4e-3f * (float)size_ * 4.0f);
        }
        /* every rank holds the same bits */
        for (int j = 0; j < NF; j++) {
            uint64_t hsh = test_hash(a[j], cnt[j] * 4), mn = hsh, mx = hsh;
            ASSERT_OK(chorus_allreduce(comm, &hsh, &mn, 1, CHORUS_INT64, CHORUS_MIN));
            ASSERT_OK(chorus_allreduce(comm, &hsh, &mx, 1, CHORUS_INT64, CHORUS_MAX));
            ASSERT(mn == mx);
        }
    }
    for (int j = 0; j < NF; j++) {
        free(in[j]);
        free(a[j]);
        free(b[j]);
        free(ref[j]);
    }
}

/* ---- many small tensors ------------------------------------------------------------------- */

static void case_many(void)
{
    enum { NT = 3000 };
    chorus_engine *e = start(NULL);
    float *x = malloc(NT * 8 * sizeof(float)), *y = malloc(NT * 8 * sizeof(float));
    chorus_engine_handle **h = malloc(NT * sizeof(*h));
    for (int step = 0; step < 4; step++) {
        double t0 = chorus__now();
        for (int j = 0; j < NT; j++) {
            char nm[32];
            snprintf(nm, sizeof(nm), "p%d", j);
            size_t n = 1 + (size_t)j % 8;
            for (size_t k = 0; k < n; k++) x[j * 8 + (int)k] = (float)(rank_ + j + step + (int)k);
            ASSERT_OK(chorus_engine_allreduce(e, nm, x + j * 8, y + j * 8, n, CHORUS_FLOAT32,
                                              CHORUS_SUM, NULL, &h[j]));
        }
        for (int j = 0; j < NT; j++) {
            ASSERT_OK(chorus_engine_wait(h[j]));
            chorus_engine_release(h[j]);
            for (int k = 0; k < 1 + j % 8; k++)
                ASSERT(y[j * 8 + k] == (float)(size_ * (j + step + k) + size_ * (size_ - 1) / 2));
        }
        chorus_engine_stats st;
        chorus_engine_get_stats(e, &st);
        if (rank_ == 0)
            printf("step %d: %d tensors in %.1f ms; %llu cycles, %llu coordinator rounds, %llu "
                   "cache hits, %llu fused allreduces so far\n",
                   step, NT, (chorus__now() - t0) * 1e3, (unsigned long long)st.cycles,
                   (unsigned long long)st.coord_rounds, (unsigned long long)st.cache_hits,
                   (unsigned long long)st.fused_batches);
    }
    chorus_engine_stats st;
    chorus_engine_get_stats(e, &st);
    ASSERT(st.cache_hits >= 3 * NT); /* steps after the first agree through the cache */
    ASSERT_OK(chorus_engine_shutdown(e));
    free(x);
    free(y);
    free(h);
}

/* ---- timeline ----------------------------------------------------------------------------- */

static void case_timeline(void)
{
    chorus_engine *e = start(NULL);
    float x[1000], y[1000];
    for (int step = 0; step < 3; step++) {
        chorus_engine_handle *h[5];
        for (int j = 0; j < 4; j++) {
            char nm[40];
            snprintf(nm, sizeof(nm), "block\"%d\"\\grad", j); /* needs escaping in JSON */
            ASSERT_OK(chorus_engine_allreduce(e, nm, x, y, 250 * (size_t)(j + 1), CHORUS_FLOAT32,
                                              CHORUS_SUM, NULL, &h[j]));
        }
        int32_t r = rank_;
        ASSERT_OK(chorus_engine_allgather(e, "ranks", &r, 1, 1, CHORUS_INT32, NULL, &h[4]));
        for (int j = 0; j < 5; j++) {
            ASSERT_OK(chorus_engine_wait(h[j]));
            chorus_engine_release(h[j]);
        }
    }
    ASSERT_OK(chorus_engine_shutdown(e));
}

/* ---- divergence --------------------------------------------------------------------------- */

static void case_divergence(void)
{
    chorus_engine *e = start(NULL);
    float w[1000];
    for (int i = 0; i < 1000; i++) w[i] = (float)i * 0.5f;
    for (long long step = 0; step < 8; step++) {
        if (step == 5 && rank_ == size_ - 1) w[17] += 1e-3f; /* one rank drifts */
        chorus_result r = chorus_engine_check_divergence(e, "model", w, sizeof(w), step);
        if (step < 5) {
            ASSERT_OK(r);
        } else {
            char who[32];
            snprintf(who, sizeof(who), "rank %d hash", size_ - 1);
            ASSERT(r == CHORUS_ERR_MISMATCH);
            ASSERT_STR_CONTAINS(chorus_engine_last_error(e), "'model'");
            ASSERT_STR_CONTAINS(chorus_engine_last_error(e), who);
            ASSERT_STR_CONTAINS(chorus_engine_last_error(e), "first divergent step seen: 5");
            if (step == 5) printf("%s\n", chorus_engine_last_error(e));
        }
    }
    ASSERT_OK(chorus_engine_shutdown(e));
}

/* ---- compression -------------------------------------------------------------------------- */

/* top-k by magnitude with error feedback: what is not sent is added to the next step's input.
 * Wire: k pairs (index bits, value) as float32, gathered from every rank. */
typedef struct topk_state {
    float resid[4096];
    size_t k;
} topk_state;

static chorus_result topk_plan(void *st, const char *name, size_t count, chorus_dtype t,
                               chorus_op op, chorus_compress_plan *plan)
{
    (void)name, (void)count, (void)op;
    if (t != CHORUS_FLOAT32 || count > 4096) return CHORUS_ERR_INVALID_ARG;
    plan->nrounds = 1;
    plan->round[0] =
        (chorus_round){CHORUS_ROUND_GATHER, CHORUS_SUM, CHORUS_FLOAT32, 2 * ((topk_state *)st)->k};
    return CHORUS_OK;
}
static void topk_select(topk_state *s, const float *src, size_t n, float *wire)
{
    float acc[4096];
    for (size_t i = 0; i < n; i++) acc[i] = src[i] + s->resid[i];
    for (size_t j = 0; j < s->k; j++) {
        size_t best = 0;
        for (size_t i = 1; i < n; i++)
            if (fabsf(acc[i]) > fabsf(acc[best])) best = i;
        uint32_t bi = (uint32_t)best;
        memcpy(&wire[2 * j], &bi, 4);
        wire[2 * j + 1] = acc[best];
        acc[best] = 0;
    }
    memcpy(s->resid, acc, n * sizeof(float));
}
static chorus_result topk_prepare(void *st, const chorus_compress_call *c, const void *src,
                                  void *wire)
{
    topk_select(st, src, c->count, wire);
    return CHORUS_OK;
}
/* Adds one rank's pairs into dst. */
static void topk_add(const topk_state *s, const float *w, float *d, size_t n)
{
    for (size_t j = 0; j < s->k; j++) {
        uint32_t bi;
        memcpy(&bi, &w[2 * j], 4);
        if (bi < n) d[bi] += w[2 * j + 1];
    }
}
static chorus_result topk_finish(void *st, const chorus_compress_call *c, const void *wire,
                                 void *dst)
{
    const float *w = wire;
    memset(dst, 0, c->count * sizeof(float));
    for (int p = 0; p < c->nparts; p++)
        if (c->part_valid[p]) topk_add(st, w + (size_t)p * c->r->wire_count, dst, c->count);
    return CHORUS_OK;
}

static void case_compress(void)
{
    chorus_engine *e = start(NULL);
    enum { N = 1000 };
    float x[N], y[N], want[N];
    /* fp16 / bf16: small integers are exact in both */
    for (int c = 0; c < 2; c++) {
        chorus_engine_tensor_opts o = {.compressor =
                                           c ? chorus_compressor_bf16() : chorus_compressor_fp16()};
        for (int i = 0; i < N; i++) x[i] = (float)((i + rank_) % 9 - 4);
        chorus_engine_handle *h;
        ASSERT_OK(chorus_engine_allreduce(e, c ? "g.bf16" : "g.fp16", x, y, N, CHORUS_FLOAT32,
                                          CHORUS_SUM, &o, &h));
        ASSERT_OK(chorus_engine_wait(h));
        chorus_engine_release(h);
        for (int i = 0; i < N; i++) {
            float s = 0;
            for (int r = 0; r < size_; r++) s += (float)((i + r) % 9 - 4);
            ASSERT(y[i] == s);
        }
    }
    /* fp16 really travels as fp16: 1 + 2^-12 rounds to 1 */
    chorus_engine_tensor_opts o16 = {.compressor = chorus_compressor_fp16()};
    float fine = 1.0f + 1.0f / 4096, fout;
    chorus_engine_handle *h;
    ASSERT_OK(chorus_engine_allreduce(e, "g.fine", &fine, &fout, 1, CHORUS_FLOAT32, CHORUS_AVG,
                                      &o16, &h));
    ASSERT_OK(chorus_engine_wait(h));
    chorus_engine_release(h);
    ASSERT(fout == 1.0f);
    /* top-k with error feedback: a one-round gather plan */
    static topk_state mine, sim[16];
    mine.k = 10;
    chorus_compressor topk = {"topk10", &mine, topk_plan, topk_prepare, topk_finish};
    chorus_engine_tensor_opts ot = {.compressor = &topk};
    ASSERT(size_ <= 16);
    for (int r = 0; r < size_; r++) sim[r].k = 10;
    for (int step = 0; step < 3; step++) {
        for (int i = 0; i < N; i++)
            x[i] = (float)(((i * 7 + step * 3 + rank_ * 11) % 101) - 50) * 0.25f;
        ASSERT_OK(
            chorus_engine_allreduce(e, "g.topk", x, y, N, CHORUS_FLOAT32, CHORUS_AVG, &ot, &h));
        ASSERT_OK(chorus_engine_wait(h));
        chorus_engine_release(h);
        /* the same compression of every rank's input, simulated here */
        memset(want, 0, sizeof(want));
        for (int r = 0; r < size_; r++) {
            float xr[N], wire[20];
            for (int i = 0; i < N; i++)
                xr[i] = (float)(((i * 7 + step * 3 + r * 11) % 101) - 50) * 0.25f;
            topk_select(&sim[r], xr, N, wire);
            topk_add(&sim[r], wire, want, N);
        }
        int nz = 0;
        for (int i = 0; i < N; i++) {
            want[i] /= (float)size_;
            nz += y[i] != 0;
            if (y[i] != want[i])
                test_fail(__FILE__, __LINE__, "top-k step %d [%d]: %g vs %g", step, i, y[i],
                          want[i]);
        }
        ASSERT(nz > 0 && nz <= 10 * size_);
    }
    int32_t iv[4] = {1, 2, 3, 4}, io[4];
    ASSERT(chorus_engine_allreduce(e, "g.topk.max", x, y, N, CHORUS_FLOAT32, CHORUS_MAX, &ot, &h) ==
           CHORUS_ERR_INVALID_ARG);
    ASSERT_STR_CONTAINS(chorus_engine_last_error(e), "only sum and avg");
    /* fp16 on an int32 tensor leaves it alone */
    ASSERT_OK(chorus_engine_allreduce(e, "g.int", iv, io, 4, CHORUS_INT32, CHORUS_SUM, &o16, &h));
    ASSERT_OK(chorus_engine_wait(h));
    chorus_engine_release(h);
    ASSERT_EQ(io[3], 4 * size_);
    ASSERT_OK(chorus_engine_shutdown(e));
}

/* ---- a rank dies -------------------------------------------------------------------------- */

static void case_death(void)
{
    chorus_engine *e = start(NULL);
    float x[64] = {0}, y[64];
    chorus_engine_handle *h;
    ASSERT_OK(chorus_engine_allreduce(e, "warmup", x, y, 64, CHORUS_FLOAT32, CHORUS_SUM, NULL, &h));
    ASSERT_OK(chorus_engine_wait(h));
    chorus_engine_release(h);
    if (rank_ == 1) {
        usleep(200000);
        kill(getpid(), SIGKILL);
    }
    ASSERT_OK(chorus_engine_allreduce(e, "never.completes", x, y, 64, CHORUS_FLOAT32, CHORUS_SUM,
                                      NULL, &h));
    chorus_result r = chorus_engine_wait(h);
    printf("engine_death_reported: %s: %s\n", chorus_strerror(r), chorus_engine_handle_error(h));
    fflush(stdout);
    ASSERT(r == CHORUS_ERR_PEER_LOST);
    ASSERT_STR_CONTAINS(chorus_engine_handle_error(h), "rank 1");
    chorus_engine_release(h);
    ASSERT(chorus_engine_shutdown(e) == CHORUS_ERR_PEER_LOST);
    _exit(3);
}

int main(int argc, char **argv)
{
    ASSERT(argc > 1);
    ASSERT_OK(chorus_init(&comm));
    rank_ = test_rank = chorus_rank(comm);
    size_ = chorus_size(comm);
    const char *c = argv[1];
    if (!strcmp(c, "mismatch"))
        case_mismatch();
    else if (!strcmp(c, "stall"))
        case_stall();
    else if (!strcmp(c, "join"))
        case_join();
    else if (!strcmp(c, "shutdown"))
        case_shutdown();
    else if (!strcmp(c, "fusion"))
        case_fusion();
    else if (!strcmp(c, "many"))
        case_many();
    else if (!strcmp(c, "timeline"))
        case_timeline();
    else if (!strcmp(c, "divergence"))
        case_divergence();
    else if (!strcmp(c, "compress"))
        case_compress();
    else if (!strcmp(c, "death"))
        case_death();
    else if (!strcmp(c, "desync"))
        case_desync();
    else if (!strcmp(c, "names"))
        case_names();
    else if (!strcmp(c, "hold"))
        case_hold();
    else
        test_fail(__FILE__, __LINE__, "unknown case %s", c);
    ASSERT_OK(chorus_finalize(comm));
    if (rank_ == 0) printf("engine_cases %s: ok\n", c);
    return 0;
}

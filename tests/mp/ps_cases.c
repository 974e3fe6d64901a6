/*
 * ps_cases.c - the parameter server with real ranks, one case per run:
 *   chorus-run -np N ps_cases CASE [ARG]
 *
 *   sync K DTYPE  K servers, the other ranks work; three keys (one large enough to be cut
 *                 across the servers); every worker pushes integer-valued gradients, each pull
 *                 must equal the exact expected parameters (plain SGD, lr 0.5), with DTYPE
 *                 (float32, float16, bfloat16) on the wire; the servers' counters add up
 *   clip K        K servers, sync mode with clip_norm 10: the same three keys (the large one
 *                 cut across the servers, the small ones whole on one each), every round's
 *                 sum cut to the norm of the whole key, whichever servers hold it: each pull
 *                 within 1e-5 of the parameters computed here; every round is cut
 *   ssp S         1 server, 3 workers: worker 2 starts only once worker 0 has asked for step
 *                 S+1, so that pull must wait for worker 2's first push (whose gradient is
 *                 large enough to be seen in the parameters); the largest lead served is <= S
 *   async         the same start in async mode: nothing waits, and worker 0 runs the whole
 *                 way ahead (its lead reaches the number of steps)
 *   killed MODE   async or ssp, 1 server, 3 workers: worker 2 is killed (SIGKILL) after 3
 *                 steps; workers 0 and 1 make all their steps and leave, and the server ends
 *                 cleanly, having logged the loss (the list gives chorus-run a long --grace)
 *   errors        bad options (clip_norm negative, or outside sync mode, among them), keys,
 *                 sizes and registrations: clear errors, nothing applied
 *   stopped       as killed in async mode, but worker 2 stops itself (SIGSTOP): a worker that
 *                 falls silent is lost like a dead one, whichever deadline sees it first
 *                 (the heartbeat's or a receive's; the list sets CHORUS_TIMEOUT_S=3, which
 *                 caps both); chorus-run stops it once the others are done
 */
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "chorus/ps.h"
#include "harness.h"

static chorus_comm *comm;
static int rank_, size_;

static chorus_ps *make(chorus_ps_mode mode, int K, int S, chorus_dtype wire)
{
    chorus_ps_opts o;
    chorus_ps_opts_default(&o);
    if (K > 0) o.nservers = K; /* else chorus-run --servers */
    o.mode = mode;
    o.staleness = S;
    o.momentum = 0.0f;
    o.grad_dtype = wire;
    chorus_ps *ps;
    chorus_result r = chorus_ps_create(comm, &o, &ps);
    if (r != CHORUS_OK) test_fail(__FILE__, __LINE__, "%s", chorus_ps_last_error(NULL));
    return ps;
}

static void serve(chorus_ps *ps, chorus_ps_stats *st)
{
    chorus_result r = chorus_ps_serve(ps);
    if (r != CHORUS_OK) test_fail(__FILE__, __LINE__, "serve: %s", chorus_ps_last_error(ps));
    chorus_ps_get_stats(ps, st);
}

static void push_pull(chorus_ps *ps, int key, const float *g, float *p, size_t n, float lr)
{
    chorus_ps_handle *h[2];
    ASSERT_OK(chorus_ps_push(ps, key, g, n, lr, &h[0]));
    ASSERT_OK(chorus_ps_pull(ps, key, p, n, &h[1]));
    ASSERT_OK(chorus_ps_wait(h[0]));
    ASSERT_OK(chorus_ps_wait(h[1]));
}

/* ---- sync: exact parameters after every round ------------------------------------------- */

static const int sync_keys[3] = {10, 3, 5};
static const size_t sync_counts[3] = {20000, 7, 100};

/* The sync keys registered on ps, each starting from 0..16 repeated; returns that start
 * (20000 floats, the largest key's count), which the caller frees. */
static float *register_sync_keys(chorus_ps *ps)
{
    float *init = malloc(20000 * sizeof(float));
    ASSERT(init);
    for (size_t i = 0; i < 20000; i++) init[i] = (float)(i % 17);
    for (int k = 0; k < 3; k++)
        ASSERT_OK(chorus_ps_register(ps, sync_keys[k], sync_counts[k], init));
    return init;
}

static float grad_of(int w, size_t i, int step)
{
    return (float)((w + 1) * (int)((i + (size_t)step) % 4));
}

static void case_sync(int K, chorus_dtype wire)
{
    chorus_ps *ps = make(CHORUS_PS_SYNC, K, 0, wire);
    float *init = register_sync_keys(ps), *g = malloc(20000 * sizeof(float)),
          *p = malloc(20000 * sizeof(float));
    ASSERT(g && p);
    int W = chorus_ps_num_workers(ps), w = chorus_ps_worker_index(ps);
    const int steps = 5;
    if (chorus_ps_is_server(ps)) {
        chorus_ps_stats st;
        serve(ps, &st);
        printf("server %d: %llu updates, %llu pushes, %llu pulls, %llu bytes held\n", rank_,
               (unsigned long long)st.updates, (unsigned long long)st.pushes,
               (unsigned long long)st.pulls, (unsigned long long)st.server_bytes);
        ASSERT_EQ(st.pushes, st.updates * (uint64_t)W);
        ASSERT_EQ(st.pulls, st.pushes);
        ASSERT(st.server_bytes > 0);
        for (int v = 1; v < W; v++) ASSERT_EQ(st.worker_bytes_pushed[v], st.worker_bytes_pushed[0]);
        ASSERT(st.worker_bytes_pushed[0] > 0);
    } else {
        for (int s = 1; s <= steps; s++)
            for (int k = 0; k < 3; k++) {
                size_t n = sync_counts[k];
                for (size_t i = 0; i < n; i++) g[i] = grad_of(w, i, s);
                push_pull(ps, sync_keys[k], g, p, n, 0.5f);
                for (size_t i = 0; i < n; i++) {
                    double want = init[i];
                    for (int t = 1; t <= s; t++)
                        for (int v = 0; v < W; v++) want -= 0.5 * grad_of(v, i, t);
                    if ((double)p[i] != want)
                        test_fail(__FILE__, __LINE__, "key %d [%zu] after round %d: %g, want %g",
                                  sync_keys[k], i, s, (double)p[i], want);
                }
            }
        chorus_ps_stats st;
        chorus_ps_get_stats(ps, &st);
        ASSERT_EQ(st.pushes, 3 * steps);
        if (w == 0)
            printf("sync: %d servers, %d workers, %s gradients: %d rounds exact\n",
                   chorus_ps_num_servers(ps), W, chorus_dtype_name((int)wire), steps);
    }
    ASSERT_OK(chorus_ps_finalize(ps));
    free(init);
    free(g);
    free(p);
}

/* ---- clip: sync rounds cut to a global norm over the servers' slices --------------------- */

#define CLIP 10.0f

/* Key k's parameters after `rounds` rounds of sync_keys' gradients from W workers, each
 * round's sum cut to norm CLIP (the sum integer-valued, its squares added exactly). */
static void clipped_params(int k, int W, int rounds, const float *init, float *want)
{
    size_t n = sync_counts[k];
    for (size_t i = 0; i < n; i++) want[i] = init[i];
    for (int t = 1; t <= rounds; t++) {
        double sq = 0;
        for (size_t i = 0; i < n; i++) {
            float g = 0;
            for (int v = 0; v < W; v++) g += grad_of(v, i, t);
            sq += (double)g * g;
        }
        double norm = sqrt(sq);
        float c = norm > CLIP ? (float)(CLIP / norm) : 1.0f;
        for (size_t i = 0; i < n; i++) {
            float g = 0;
            for (int v = 0; v < W; v++) g += grad_of(v, i, t);
            want[i] -= 0.5f * (g * c);
        }
    }
}

static void case_clip(int K)
{
    chorus_ps_opts o;
    chorus_ps_opts_default(&o);
    o.nservers = K;
    o.momentum = 0.0f;
    o.clip_norm = CLIP;
    chorus_ps *ps;
    if (chorus_ps_create(comm, &o, &ps) != CHORUS_OK)
        test_fail(__FILE__, __LINE__, "%s", chorus_ps_last_error(NULL));
    float *init = register_sync_keys(ps), *g = malloc(20000 * sizeof(float)),
          *p = malloc(20000 * sizeof(float)), *want = malloc(20000 * sizeof(float));
    ASSERT(g && p && want);
    int W = chorus_ps_num_workers(ps), w = chorus_ps_worker_index(ps);
    const int steps = 4;
    if (chorus_ps_is_server(ps)) {
        chorus_ps_stats st;
        serve(ps, &st);
        printf("clip: server %d cut %llu of its %llu rounds, the last norm %.3f\n", rank_,
               (unsigned long long)st.clipped, (unsigned long long)st.updates, st.last_norm);
        ASSERT_EQ(st.clipped, st.updates); /* every round's norm is above CLIP */
    } else {
        for (int s = 1; s <= steps; s++)
            for (int k = 0; k < 3; k++) {
                size_t n = sync_counts[k];
                for (size_t i = 0; i < n; i++) g[i] = grad_of(w, i, s);
                push_pull(ps, sync_keys[k], g, p, n, 0.5f);
                clipped_params(k, W, s, init, want);
                for (size_t i = 0; i < n; i++)
                    if (fabs((double)p[i] - want[i]) > 1e-5 * (1.0 + fabs(want[i])))
                        test_fail(__FILE__, __LINE__,
                                  "key %d [%zu] after round %d: %.9g, want %.9g", sync_keys[k], i,
                                  s, (double)p[i], (double)want[i]);
            }
        if (w == 0)
            printf("clip: %d server%s, %d workers: %d rounds of 3 keys cut to the whole key's "
                   "norm\n",
                   chorus_ps_num_servers(ps), chorus_ps_num_servers(ps) > 1 ? "s" : "", W, steps);
    }
    ASSERT_OK(chorus_ps_finalize(ps));
    free(init);
    free(g);
    free(p);
    free(want);
}

/* ---- ssp and async: the lead over the slowest worker ------------------------------------ */

#define LEAD_STEPS 12
#define NOTE_TAG   77

static void case_lead(chorus_ps_mode mode, int S)
{
    ASSERT_EQ(size_, 4);
    chorus_ps *ps = make(mode, 1, S, CHORUS_FLOAT32);
    enum { N = 1000 };
    static float g[N], p[N];
    ASSERT_OK(chorus_ps_register(ps, 0, N, NULL));
    int w = chorus_ps_worker_index(ps);
    chorus_comm *wc = chorus_ps_worker_comm(ps);
    for (int i = 0; i < N; i++) g[i] = w == 2 ? 1000.0f : 1.0f; /* lr 0.01: -10 per push of 2 */
    if (chorus_ps_is_server(ps)) {
        chorus_ps_stats st;
        serve(ps, &st);
        printf("%s: max lead %llu over the slowest worker (bound %d), %llu pulls delayed, "
               "%llu updates\n",
               chorus_ps_mode_name((int)mode), (unsigned long long)st.max_staleness,
               mode == CHORUS_PS_SSP ? S : -1, (unsigned long long)st.pulls_delayed,
               (unsigned long long)st.updates);
        ASSERT_EQ(st.updates, 3 * LEAD_STEPS);
        if (mode == CHORUS_PS_SSP) {
            ASSERT(st.max_staleness <= (uint64_t)S);
        } else {
            ASSERT_EQ(st.pulls_delayed, 0);
            ASSERT(st.max_staleness >= LEAD_STEPS); /* worker 0 finished before 2 started */
        }
    } else {
        int note = 1;
        for (int s = 1; s <= LEAD_STEPS; s++) {
            if (w == 2 && s == 1) /* starts once worker 0 is far enough ahead */
                ASSERT_OK(chorus_recv(wc, &note, 1, CHORUS_INT32, 0, NOTE_TAG));
            chorus_ps_handle *h[2];
            ASSERT_OK(chorus_ps_push(ps, 0, g, N, 0.01f, &h[0]));
            ASSERT_OK(chorus_ps_pull(ps, 0, p, N, &h[1]));
            int last = mode == CHORUS_PS_SSP ? S + 1 : LEAD_STEPS;
            if (w == 0 && s == last && mode == CHORUS_PS_SSP) /* pull S+1 is posted: wake 2 */
                ASSERT_OK(chorus_send(wc, &note, 1, CHORUS_INT32, 2, NOTE_TAG));
            ASSERT_OK(chorus_ps_wait(h[0]));
            ASSERT_OK(chorus_ps_wait(h[1]));
            if (w == 0 && s == last && mode == CHORUS_PS_SSP) {
                /* S+1 pushes ahead of worker 2 until it pushed: the answer includes its push */
                if (!(p[0] < -9.0f))
                    test_fail(__FILE__, __LINE__,
                              "pull %d answered at %g, before worker 2's first push (bound %d)", s,
                              (double)p[0], S);
                printf("ssp: worker 0's pull %d waited for worker 2's first push\n", s);
            }
            if (w == 0 && s == last && mode == CHORUS_PS_ASYNC)
                ASSERT_OK(chorus_send(wc, &note, 1, CHORUS_INT32, 2, NOTE_TAG));
        }
    }
    ASSERT_OK(chorus_ps_finalize(ps));
}

/* ---- errors -------------------------------------------------------------------------------- */

static void expect(chorus_result got, chorus_result want, const chorus_ps *ps, const char *text)
{
    const char *msg = chorus_ps_last_error(ps);
    if (got != want)
        test_fail(__FILE__, __LINE__, "got %s, want %s (%s)", chorus_strerror(got),
                  chorus_strerror(want), msg);
    ASSERT_STR_CONTAINS(msg, text);
    if (rank_ == size_ - 1) printf("error as expected: %s\n", msg);
}

static void case_errors(void)
{
    chorus_ps_opts o;
    chorus_ps *ps = NULL;
    chorus_ps_opts_default(&o);
    o.mode = (chorus_ps_mode)7;
    expect(chorus_ps_create(comm, &o, &ps), CHORUS_ERR_INVALID_ARG, NULL, "unknown mode 7");
    ASSERT(ps == NULL);
    chorus_ps_opts_default(&o);
    o.nservers = size_;
    expect(chorus_ps_create(comm, &o, &ps), CHORUS_ERR_INVALID_ARG, NULL, "leaves no worker");
    chorus_ps_opts_default(&o);
    o.grad_dtype = CHORUS_INT32;
    expect(chorus_ps_create(comm, &o, &ps), CHORUS_ERR_INVALID_ARG, NULL, "not int32");
    chorus_ps_opts_default(&o);
    o.size = 8;
    expect(chorus_ps_create(comm, &o, &ps), CHORUS_ERR_INVALID_ARG, NULL, "options of size 8");
    chorus_ps_opts_default(&o);
    o.clip_norm = -1.0f;
    expect(chorus_ps_create(comm, &o, &ps), CHORUS_ERR_INVALID_ARG, NULL,
           "clip_norm -1 is not a finite norm >= 0 (0: off)");
    chorus_ps_opts_default(&o);
    o.mode = CHORUS_PS_ASYNC;
    o.clip_norm = 1.0f;
    expect(chorus_ps_create(comm, &o, &ps), CHORUS_ERR_INVALID_ARG, NULL,
           "clip_norm is for sync mode; in async mode each push is applied alone, and its "
           "worker, which holds the whole gradient, clips it before pushing");

    ps = make(CHORUS_PS_SYNC, 1, 0, CHORUS_FLOAT32);
    float v[64] = {0}, p[64];
    for (int i = 0; i < 64; i++) v[i] = (float)i;
    ASSERT_OK(chorus_ps_register(ps, 1, 64, v));
    /* the last rank registers another size: every rank fails, naming it */
    expect(chorus_ps_register(ps, 2, rank_ == size_ - 1 ? 32 : 16, NULL), CHORUS_ERR_MISMATCH, ps,
           "registered key 2 of 32 floats, rank 0 key 2 of 16 floats");
    expect(chorus_ps_register(ps, 1, 64, NULL), CHORUS_ERR_INVALID_ARG, ps,
           "key 1 is already registered");
    expect(chorus_ps_register(ps, -3, 4, NULL), CHORUS_ERR_INVALID_ARG, ps, "keys are >= 0");
    chorus_ps_handle *h = NULL;
    if (chorus_ps_is_server(ps)) {
        expect(chorus_ps_push(ps, 1, v, 64, 0.1f, &h), CHORUS_ERR_INVALID_ARG, ps,
               "is a server; only workers push and pull");
        chorus_ps_stats st;
        serve(ps, &st);
        ASSERT_EQ(st.updates, 1); /* the one good round; nothing from the bad calls */
    } else {
        expect(chorus_ps_push(ps, 9, v, 64, 0.1f, &h), CHORUS_ERR_INVALID_ARG, ps,
               "key 9 is not registered");
        ASSERT(h == NULL);
        expect(chorus_ps_push(ps, 1, v, 63, 0.1f, &h), CHORUS_ERR_INVALID_ARG, ps,
               "key 1 holds 64 floats, the call gave 63");
        expect(chorus_ps_pull(ps, 1, p, 65, &h), CHORUS_ERR_INVALID_ARG, ps,
               "key 1 holds 64 floats, the call gave 65");
        expect(chorus_ps_push(ps, 1, v, 64, 1.0f / 0.0f, &h), CHORUS_ERR_INVALID_ARG, ps,
               "the learning rate is not finite");
        expect(chorus_ps_serve(ps), CHORUS_ERR_INVALID_ARG, ps, "is a worker");
        float z[64] = {0};
        push_pull(ps, 1, z, p, 64, 0.1f); /* still works: nothing was corrupted */
        for (int i = 0; i < 64; i++) ASSERT_EQ(p[i], (float)i);
    }
    ASSERT_OK(chorus_ps_finalize(ps));
}

/* The failure cases' job: 1 server and 3 workers sharing key 0 of FAIL_N floats. */
#define FAIL_N 1000
static float fail_g[FAIL_N], fail_p[FAIL_N];

static chorus_ps *failure_job(chorus_ps_mode mode, int *w)
{
    ASSERT_EQ(size_, 4);
    chorus_ps *ps = make(mode, 1, 2, CHORUS_FLOAT32);
    ASSERT_OK(chorus_ps_register(ps, 0, FAIL_N, NULL));
    *w = chorus_ps_worker_index(ps);
    return ps;
}

static void case_killed(chorus_ps_mode mode, int sig)
{
    int w;
    chorus_ps *ps = failure_job(mode, &w);
    if (chorus_ps_is_server(ps)) {
        chorus_ps_stats st;
        serve(ps, &st);
        printf("server: served %llu updates; %d workers gone, %d of them lost\n",
               (unsigned long long)st.updates, st.workers_gone, st.workers_lost);
        ASSERT_EQ(st.workers_gone, 3);
        ASSERT_EQ(st.workers_lost, 1);
        ASSERT(st.updates >= 2 * LEAD_STEPS + 3);
    } else {
        for (int s = 1; s <= LEAD_STEPS; s++) {
            if (w == 2 && s == 4) raise(sig);
            push_pull(ps, 0, fail_g, fail_p, FAIL_N, 0.01f);
        }
        printf("worker %d made all its %d steps\n", w, LEAD_STEPS);
    }
    ASSERT_OK(chorus_ps_finalize(ps));
}

int main(int argc, char **argv)
{
    ASSERT_OK(chorus_init(&comm));
    rank_ = test_rank = chorus_rank(comm);
    size_ = chorus_size(comm);
    const char *c = argc > 1 ? argv[1] : "";
    if (!strcmp(c, "sync")) {
        const char *d = argc > 3 ? argv[3] : "float32";
        chorus_dtype t = !strcmp(d, "float16")    ? CHORUS_FLOAT16
                         : !strcmp(d, "bfloat16") ? CHORUS_BFLOAT16
                                                  : CHORUS_FLOAT32;
        case_sync(argc > 2 ? atoi(argv[2]) : 1, t); /* 0: as chorus-run --servers says */
    } else if (!strcmp(c, "ssp")) {
        case_lead(CHORUS_PS_SSP, argc > 2 ? atoi(argv[2]) : 2);
    } else if (!strcmp(c, "async")) {
        case_lead(CHORUS_PS_ASYNC, 0);
    } else if (!strcmp(c, "killed")) {
        case_killed(argc > 2 && !strcmp(argv[2], "ssp") ? CHORUS_PS_SSP : CHORUS_PS_ASYNC, SIGKILL);
    } else if (!strcmp(c, "stopped")) {
        case_killed(CHORUS_PS_ASYNC, SIGSTOP);
    } else if (!strcmp(c, "clip")) {
        case_clip(argc > 2 ? atoi(argv[2]) : 1);
    } else if (!strcmp(c, "errors")) {
        case_errors();
    } else {
        test_fail(__FILE__, __LINE__, "unknown case '%s'", c);
    }
    ASSERT_OK(chorus_finalize(comm));
    if (rank_ == 0) printf("ps_cases %s: OK\n", c);
    return 0;
}

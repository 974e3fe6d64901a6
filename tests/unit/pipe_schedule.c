/*
 * pipe_schedule.c - the pipeline schedules as tables: printed, then checked through the
 * timed simulation (every micro-batch forward before its backward on each stage, the
 * cross-stage order, no deadlock), the in-flight activations (GPipe: m; 1F1B: p - stage),
 * and the simulated bubble equal to (p-1)/(m+p-1); a broken table is refused with its reason.
 */
#include <math.h>
#include <string.h>

#include "chorus/pipeline.h"
#include "harness.h"

static void check(chorus_pipe_kind kind, int p, int m, int print)
{
    chorus_pipe_schedule s;
    chorus_pipe_sim sim;
    char why[200] = "";
    ASSERT_OK(chorus_pipe_schedule_init(&s, kind, p, m));
    if (print) {
        printf("%s p=%d m=%d:\n", chorus_pipe_kind_name(kind), p, m);
        chorus_pipe_schedule_print(&s, stdout);
    }
    if (chorus_pipe_simulate(&s, &sim, why, sizeof(why)) != CHORUS_OK)
        test_fail(__FILE__, __LINE__, "%s p=%d m=%d: %s", chorus_pipe_kind_name(kind), p, m, why);
    double want = chorus_pipe_bubble_formula(p, m);
    ASSERT_EQ(sim.makespan, 2 * (m + p - 1));
    for (int st = 0; st < p; st++) {
        ASSERT_EQ(sim.busy[st], 2 * m);
        int lim = kind == CHORUS_PIPE_GPIPE ? m : (p - st < m ? p - st : m);
        if (sim.max_inflight[st] != lim)
            test_fail(__FILE__, __LINE__, "%s p=%d m=%d stage %d: %d in flight, expected %d",
                      chorus_pipe_kind_name(kind), p, m, st, sim.max_inflight[st], lim);
        ASSERT_NEAR(sim.bubble[st], want, 1e-12);
        /* backwards in micro-batch order on every stage: gradients add up as on one rank */
        const chorus_pipe_step *l = chorus_pipe_stage_steps(&s, st);
        int nb = 0;
        for (int k = 0; k < s.nsteps; k++)
            if (l[k].op == CHORUS_PIPE_BWD) ASSERT_EQ(l[k].micro, nb++);
    }
    if (print)
        printf("  bubble per stage %.4f = (p-1)/(m+p-1) = %.4f; in flight on stage 0: %d\n",
               sim.bubble[0], want, sim.max_inflight[0]);
    chorus_pipe_sim_free(&sim);
    chorus_pipe_schedule_free(&s);
}

static void test_broken(void)
{
    chorus_pipe_schedule s;
    chorus_pipe_sim sim;
    char why[200];
    ASSERT_OK(chorus_pipe_schedule_init(&s, CHORUS_PIPE_GPIPE, 2, 2));
    /* stage 1: B0 before F0 */
    chorus_pipe_step *l = s.steps + s.nsteps;
    l[0] = (chorus_pipe_step){CHORUS_PIPE_BWD, 0};
    l[2] = (chorus_pipe_step){CHORUS_PIPE_FWD, 0};
    ASSERT_EQ(chorus_pipe_simulate(&s, &sim, why, sizeof(why)), CHORUS_ERR_INVALID_ARG);
    ASSERT_STR_CONTAINS(why, "stage 1 step 0: backward of micro-batch 0 before its forward");
    /* a deadlock: stage 0 runs B0 before F1, stage 1 wants F1 before F0 */
    chorus_pipe_schedule_free(&s);
    ASSERT_OK(chorus_pipe_schedule_init(&s, CHORUS_PIPE_GPIPE, 2, 2));
    chorus_pipe_step *a = s.steps, *b = s.steps + s.nsteps;
    a[0] = (chorus_pipe_step){CHORUS_PIPE_FWD, 0};
    a[1] = (chorus_pipe_step){CHORUS_PIPE_BWD, 0};
    a[2] = (chorus_pipe_step){CHORUS_PIPE_FWD, 1};
    a[3] = (chorus_pipe_step){CHORUS_PIPE_BWD, 1};
    b[0] = (chorus_pipe_step){CHORUS_PIPE_FWD, 1};
    b[1] = (chorus_pipe_step){CHORUS_PIPE_FWD, 0};
    b[2] = (chorus_pipe_step){CHORUS_PIPE_BWD, 0};
    b[3] = (chorus_pipe_step){CHORUS_PIPE_BWD, 1};
    ASSERT_EQ(chorus_pipe_simulate(&s, &sim, why, sizeof(why)), CHORUS_ERR_INVALID_ARG);
    printf("refused: %s\n", why);
    ASSERT_STR_CONTAINS(why, "deadlock: stage 0 waits at step 1 (backward of micro-batch 0)");
    chorus_pipe_schedule_free(&s);
    /* a second forward */
    ASSERT_OK(chorus_pipe_schedule_init(&s, CHORUS_PIPE_1F1B, 1, 2));
    s.steps[1] = (chorus_pipe_step){CHORUS_PIPE_FWD, 0};
    ASSERT_EQ(chorus_pipe_simulate(&s, &sim, why, sizeof(why)), CHORUS_ERR_INVALID_ARG);
    ASSERT_STR_CONTAINS(why, "forward of micro-batch 0 a second time");
    chorus_pipe_schedule_free(&s);
    ASSERT_EQ(chorus_pipe_schedule_init(&s, CHORUS_PIPE_GPIPE, 0, 4), CHORUS_ERR_INVALID_ARG);
    ASSERT_EQ(chorus_pipe_schedule_init(&s, CHORUS_PIPE_KIND_COUNT, 2, 4), CHORUS_ERR_INVALID_ARG);
    chorus_pipe_kind k;
    ASSERT_OK(chorus_pipe_kind_parse("1f1b", &k));
    ASSERT_EQ(k, CHORUS_PIPE_1F1B);
    ASSERT_EQ(chorus_pipe_kind_parse("pipedream", &k), CHORUS_ERR_INVALID_ARG);
}

int main(void)
{
    check(CHORUS_PIPE_GPIPE, 4, 8, 1);
    check(CHORUS_PIPE_1F1B, 4, 8, 1);
    check(CHORUS_PIPE_1F1B, 2, 4, 1);
    for (int k = 0; k < CHORUS_PIPE_KIND_COUNT; k++)
        for (int p = 1; p <= 6; p++)
            for (int m = 1; m <= 12; m++) check((chorus_pipe_kind)k, p, m, 0);
    test_broken();
    printf("pipe_schedule: ok\n");
    return 0;
}

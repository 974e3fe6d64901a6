/*
 * pipe_report.c - chorus-train's end-of-run report for --pipeline-stages: what each rank
 * measured (memory by kind, the peak of the stashed activations, the time its stage waited
 * for a neighbour) gathered on rank 0, printed and written to the metrics file.
 */
#include <malloc.h>
#include <stdlib.h>

#include "pipe_report.h"

enum { F_STAGE, F_LO, F_HI, F_PARAMS, F_GRADS, F_OPT, F_ACT, F_INFLIGHT, F_WAIT, F_STEP, NF };

static double mib(double b)
{
    return b / 1048576.0;
}

static void print_rank(const double *v, int r, int stages, int micro, FILE *f)
{
    double peak = v[F_PARAMS] + v[F_GRADS] + v[F_OPT] + v[F_ACT];
    fprintf(f,
            "memory rank %d: params %.2f MiB, grads %.2f MiB, optimizer %.2f MiB, activations "
            "%.2f MiB (peak %.2f MiB)\n",
            r, mib(v[F_PARAMS]), mib(v[F_GRADS]), mib(v[F_OPT]), mib(v[F_ACT]), mib(peak));
    fprintf(f,
            "bubble rank %d (stage %d, layers %d-%d): waited for neighbours %.1f%% of the "
            "pipeline step; formula (p-1)/(m+p-1) = %.1f%%; at most %d micro-batch%s in flight\n",
            r, (int)v[F_STAGE], (int)v[F_LO], (int)v[F_HI] - 1,
            v[F_STEP] > 0 ? 100.0 * v[F_WAIT] / v[F_STEP] : 0.0,
            100.0 * chorus_pipe_bubble_formula(stages, micro), (int)v[F_INFLIGHT],
            (int)v[F_INFLIGHT] == 1 ? "" : "es");
}

chorus_result train_pipe_report(const nn_pipe_stats *stats, chorus_comm *world, const nn_optim *opt,
                                int is_root, const char *schedule, int micro, FILE *metrics)
{
    const nn_pipe_stats st = *stats;
    double mine[NF] = {
        [F_STAGE] = st.stage,
        [F_LO] = st.layer_lo,
        [F_HI] = st.layer_hi,
        [F_PARAMS] = (double)st.params_bytes,
        [F_GRADS] = (double)st.grads_bytes,
        [F_OPT] = (double)((opt->m ? malloc_usable_size(opt->m) : 0) +
                           (opt->v ? malloc_usable_size(opt->v) : 0)),
        [F_ACT] = (double)st.activations_bytes,
        [F_INFLIGHT] = st.peak_inflight,
        [F_WAIT] = st.wait_s,
        [F_STEP] = st.step_s,
    };
    int n = chorus_size(world);
    double *all = malloc((size_t)n * NF * sizeof(double));
    if (!all) return CHORUS_ERR_NOMEM;
    chorus_result r = chorus_allgather(world, mine, all, NF, CHORUS_FLOAT64);
    if (r != CHORUS_OK || !is_root) {
        free(all);
        return r;
    }
    for (int i = 0; i < n; i++) print_rank(all + (size_t)i * NF, i, st.stages, micro, stdout);
    fflush(stdout);
    if (metrics) {
        fprintf(metrics,
                "{\"pipeline\":{\"schedule\":\"%s\",\"stages\":%d,\"replicas\":%d,"
                "\"microbatches\":%d,\"bubble_formula\":%.6f,\"bubble\":[",
                schedule, st.stages, st.replicas, micro,
                chorus_pipe_bubble_formula(st.stages, micro));
        for (int i = 0; i < n; i++) {
            const double *v = all + (size_t)i * NF;
            fprintf(metrics, "%s%.6f", i ? "," : "", v[F_STEP] > 0 ? v[F_WAIT] / v[F_STEP] : 0.0);
        }
        fprintf(metrics, "],\"inflight\":[");
        for (int i = 0; i < n; i++)
            fprintf(metrics, "%s%d", i ? "," : "", (int)all[(size_t)i * NF + F_INFLIGHT]);
        fprintf(metrics, "]}}\n{\"memory\":[");
        for (int i = 0; i < n; i++) {
            const double *v = all + (size_t)i * NF;
            fprintf(metrics,
                    "%s{\"rank\":%d,\"params\":%.0f,\"grads\":%.0f,\"optimizer\":%.0f,"
                    "\"activations\":%.0f,\"peak\":%.0f}",
                    i ? "," : "", i, v[F_PARAMS], v[F_GRADS], v[F_OPT], v[F_ACT],
                    v[F_PARAMS] + v[F_GRADS] + v[F_OPT] + v[F_ACT]);
        }
        fprintf(metrics, "]}\n");
    }
    free(all);
    return CHORUS_OK;
}

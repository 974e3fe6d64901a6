/*
 * tensor_parallel.c - Linear layers split over the ranks of a communicator (Megatron-LM's
 * column- and row-parallel layers). A column layer holds a slice of the output features and
 * needs the whole input; a row layer holds a slice of the input features and produces partial
 * outputs that one allreduce sums. Between them the activations stay split, so a column-row
 * pair costs one allreduce in forward (the row layer's output) and one in backward (the
 * column layer's input gradient).
 */
#include <cblas.h>
#include <string.h>

#include "chorus/nn.h"
#include "nn_internal.h"

/* Marks the layer just added by nn_add_linear as a slice of the unsplit layer. */
static void mark(nn_model *m, nn_tp_mode mode, chorus_comm *tp)
{
    nn_layer *L = &m->layers[m->nlayers - 1];
    L->tp = mode;
    L->tp_comm = tp;
    L->tp_rank = chorus_rank(tp);
    L->tp_size = chorus_size(tp);
}

chorus_result nn_add_linear_column(nn_model *m, int out_features, chorus_comm *tp)
{
    if (!tp) return nn__fail(CHORUS_ERR_INVALID_ARG, "nn_add_linear_column: no communicator");
    int T = chorus_size(tp);
    if (out_features <= 0 || out_features % T)
        return nn__fail(CHORUS_ERR_INVALID_ARG,
                        "nn_add_linear_column: %d output features do not split over %d ranks",
                        out_features, T);
    chorus_result r = nn_add_linear(m, out_features / T);
    if (r) return r;
    mark(m, NN_TP_COLUMN, tp);
    return CHORUS_OK;
}

chorus_result nn_add_linear_row(nn_model *m, int out_features, chorus_comm *tp)
{
    if (!tp) return nn__fail(CHORUS_ERR_INVALID_ARG, "nn_add_linear_row: no communicator");
    chorus_result r = nn_add_linear(m, out_features);
    if (r) return r;
    mark(m, NN_TP_ROW, tp);
    return CHORUS_OK;
}

chorus_result nn_model_comm_status(const nn_model *m)
{
    return m->comm_err;
}

/* Sums buf (n floats) over the layer's ranks in place; the first failure is latched in the
 * model with its message (later collectives of a failed model are skipped). */
static void tp_sum(nn_model *m, nn_layer *L, float *buf, size_t n, const char *what)
{
    if (m->comm_err) return;
    chorus_result r = chorus_allreduce(L->tp_comm, buf, buf, n, CHORUS_FLOAT32, CHORUS_SUM);
    if (r)
        m->comm_err = nn__fail(r, "tensor parallel %s (%d ranks): %s", what, L->tp_size,
                               chorus_last_error(L->tp_comm));
}

/* y (B,Fout) = sum over ranks of x_t (B,Fin/T) W_t^T, then + b: the bias is added once, after
 * the sum. */
void nn__tp_row_forward(nn_model *m, nn_layer *L, const float *x, float *y, int B)
{
    int Fin = (int)nn__in_features(L), Fout = L->out_c;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, B, Fout, Fin, 1.0f, x, Fin, L->w, Fin,
                0.0f, y, Fout);
    tp_sum(m, L, y, (size_t)B * (size_t)Fout, "row-parallel linear forward");
    for (int n = 0; n < B; n++) {
        float *r = y + (size_t)n * Fout;
        for (int o = 0; o < Fout; o++) r[o] += L->b[o];
    }
}

/* Every rank computed dx (B,Fin) from its own output features: the input gradient is their
 * sum. */
void nn__tp_column_dx(nn_model *m, nn_layer *L, float *dx, int B)
{
    tp_sum(m, L, dx, (size_t)B * nn__in_features(L), "column-parallel linear backward");
}

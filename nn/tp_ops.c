/*
 * tp_ops.c - the collectives of tensor-parallel linear layers (tensor_parallel.c builds
 * them), called from their forward and backward passes (layers.c): the row layer's sum of
 * partial outputs, the column layer's sum of input gradients. A failure is latched in the
 * model (nn_model_comm_status).
 */
#include <cblas.h>

#include "chorus/nn.h"
#include "nn_internal.h"

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

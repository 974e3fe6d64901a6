/*
 * tensor_parallel.c - Linear layers split over the ranks of a communicator (Megatron-LM's
 * column- and row-parallel layers). A column layer holds a slice of the output features and
 * needs the whole input; a row layer holds a slice of the input features and produces partial
 * outputs that one allreduce sums. Between them the activations stay split, so a column-row
 * pair costs one allreduce in forward (the row layer's output) and one in backward (the
 * column layer's input gradient). This file builds the split layers; their collectives, which
 * the layers' passes call, are in tp_ops.c.
 */

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

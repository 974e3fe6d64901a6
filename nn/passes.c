/*
 * passes.c - the model's forward and backward passes: the loops over its layers (layers.c
 * runs each one), the hooks of an overlapping runtime around them, and with recomputation the
 * backward pass segment by segment (recompute.c).
 */
#include "chorus/nn.h"
#include "nn_internal.h"

const float *nn_forward(nn_model *m, const float *x, int B)
{
    const float *cur = x;
    int owned = 0; /* whether cur is a model buffer that may be overwritten */
    for (int i = 0; i < m->nlayers; i++) {
        if (m->fwd_hook && m->layers[i].nparams) m->fwd_hook(m, i, m->fwd_hook_arg);
        cur = nn__layer_forward(m, i, cur, &owned, B);
    }
    return cur;
}

/* The backward loop; with want_dx the first layer's input gradient too, returned (a model
 * buffer, or dout itself when every layer is an identity; NULL with recomputation, which does
 * not keep it). */
static const float *backward(nn_model *m, const float *dout, int B, int want_dx)
{
    if (m->recompute) {
        nn__backward_recompute(m, dout, B);
        return NULL;
    }
    const float *dy = dout;
    int which = -1; /* index of the dbuf holding dy, -1 for the caller's buffer */
    for (int i = m->nlayers - 1; i >= 0 && dy; i--)
        dy = nn__layer_backward(m, i, dy, &which, B, i > 0 || want_dx);
    return dy;
}

void nn_backward(nn_model *m, const float *dout, int B)
{
    backward(m, dout, B, 0);
}

const float *nn_backward_input(nn_model *m, const float *dout, int B)
{
    return backward(m, dout, B, 1);
}

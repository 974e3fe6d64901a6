/*
 * models.c - the models chorus-train builds (--model), one row each: its name, the defaults
 * that depend on it, and the function that appends its layers. A new model is a function and
 * a row here.
 */
#include <stddef.h>
#include <string.h>

#include "trainer.h"

/* (B,784) -> 512 -> 256 -> 10; split over --tensor-parallel's ranks by split.c. */
static int add_mlp(nn_model *m, opts *o, int nclasses)
{
    int bad = 0;
    if (par_add_layers(&o->par, m, o->model, nclasses, &bad)) return bad;
    bad |= nn_add_linear(m, 512) | nn_add_relu(m);
    bad |= nn_add_linear(m, 256) | nn_add_relu(m);
    if (o->dropout > 0) bad |= nn_add_dropout(m, o->dropout);
    bad |= nn_add_linear(m, nclasses);
    return bad;
}

/* (B,1,28,28) -> (B,32,28,28) -> pool (B,32,14,14) -> (B,64,14,14) -> pool (B,64,7,7) ->
 * 128 -> 10 */
static int add_cnn(nn_model *m, opts *o, int nclasses)
{
    int bad = 0;
    bad |= nn_add_conv2d(m, 32, 3, 1, 1) | nn_add_relu(m) | nn_add_maxpool2d(m, 2, 2);
    bad |= nn_add_conv2d(m, 64, 3, 1, 1) | nn_add_relu(m) | nn_add_maxpool2d(m, 2, 2);
    bad |= nn_add_flatten(m) | nn_add_linear(m, 128) | nn_add_relu(m);
    if (o->dropout > 0) bad |= nn_add_dropout(m, o->dropout);
    bad |= nn_add_linear(m, nclasses);
    return bad;
}

/* (B,784) -> 1024 x8 -> 10, deep enough for recomputation to pay (split.c builds it). */
static int add_large(nn_model *m, opts *o, int nclasses)
{
    int bad = 0;
    par_add_layers(&o->par, m, o->model, nclasses, &bad);
    return bad;
}

const train_model train_models[] = {
    {"mlp", 10, 0.1f, 0.0f, 1e-3f, add_mlp, NULL, NULL},
    {"cnn", 8, 0.05f, 0.25f, 1e-3f, add_cnn, NULL, NULL},
    {"large", 10, 0.01f, 0.0f, 1e-3f, add_large, NULL, NULL},
    /* a GPT on the fortune databases (mode_gpt.c) */
    {"gpt", 1, 0.1f, 0.0f, 2e-3f, NULL, gpt_load, gpt_make},
    {NULL, 0, 0, 0, 0, NULL, NULL, NULL},
};

const train_model *train_model_named(const char *name)
{
    for (const train_model *m = train_models; m->name; m++)
        if (!strcmp(m->name, name)) return m;
    return NULL;
}

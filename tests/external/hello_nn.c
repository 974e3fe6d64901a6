/* hello_nn.c - a program written outside Chorus that uses the installed nn library: it only
 * includes <chorus/nn.h> and is built with `pkg-config --cflags --libs chorus_nn`. A linear
 * layer with weights set by hand must compute y = W x + b. */
#include <chorus/nn.h>
#include <stdio.h>

int main(void)
{
    nn_model *m = nn_model_create(3, 1, 1);
    if (!m || nn_add_linear(m, 2) != CHORUS_OK || nn_model_finalize(m, 1) != CHORUS_OK) {
        fprintf(stderr, "building the model: %s\n", nn_last_error());
        return 1;
    }
    nn_model_init_params(m, 1);
    const float w[6] = {1, 2, 3, 4, 5, 6}, b[2] = {0.5f, -1}; /* W is (2,3), row by row */
    for (int i = 0; i < 6; i++) m->layers[0].w[i] = w[i];
    for (int i = 0; i < 2; i++) m->layers[0].b[i] = b[i];
    const float x[3] = {1, 1, 2};
    const float *y = nn_forward(m, x, 1);
    int ok = m->nparams == 8 && y[0] == 9.5f && y[1] == 20.0f;
    printf("nn %s: y = (%g, %g), %zu parameters\n", ok ? "correct" : "WRONG", y[0], y[1],
           m->nparams);
    nn_model_destroy(m);
    return ok ? 0 : 1;
}

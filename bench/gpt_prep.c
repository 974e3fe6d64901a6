/*
 * gpt_prep.c - the inputs of bench/gpt.sh's baselines, from the same sources as chorus-train
 * --model gpt: the initial parameters of nn_gpt_init_params for a shape and seed (what every
 * rank of chorus-train starts from), and the byte tokens of the fortune databases' training
 * part (nn_text_load_fortunes).
 *
 *   gpt_prep OUTDIR PRESET SEED [FORTUNE_DIR]
 *
 * prints the shape of the preset (nn_gpt_preset), "gpt_prep: layers L d_model C heads H
 * context T vocab V params P tokens N", and writes into OUTDIR:
 *   params.f32   the parameters in nn/gpt.c's order (tests/python/gpt_torch.py's GPT.flat()),
 *                float32, native byte order;
 *   gpt2.bin     the same parameters as a checkpoint of llm.c's train_gpt2.c: 256 int32 of
 *                header (magic 20240326, version 3 = float32, max sequence length, vocabulary,
 *                layers, heads, width, padded vocabulary = the vocabulary), then its 16 tensors,
 *                each for all layers at once (wte, wpe, ln1w, ln1b, qkvw, qkvb, attprojw,
 *                attprojb, ln2w, ln2b, fcw, fcb, fcprojw, fcprojb, lnfw, lnfb);
 *   train.bin    the training text's tokens as llm.c's token file: 256 int32 of header (magic
 *                20240520, version 1, the number of tokens), then one uint16 per token.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chorus/nn.h"

static FILE *open_out(const char *dir, const char *name)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f) {
        perror(path);
        exit(1);
    }
    return f;
}

static void put(FILE *f, const void *p, size_t size, size_t n)
{
    if (fwrite(p, size, n, f) != n) {
        perror("gpt_prep: write");
        exit(1);
    }
}

static void close_out(FILE *f)
{
    if (fclose(f)) {
        perror("gpt_prep: close");
        exit(1);
    }
}

/* Field `off` floats into each block, `n` of them, for every block in turn. */
static void put_blocks(FILE *f, const nn_gpt *g, size_t off, size_t n)
{
    for (int l = 0; l < g->c.layers; l++) put(f, g->p.blocks[l].ln1w + off, sizeof(float), n);
}

static void write_llmc_checkpoint(const char *dir, const nn_gpt *g)
{
    const nn_gpt_config *c = &g->c;
    size_t C = (size_t)c->d_model;
    int header[256] = {20240326,  3,        c->context, c->vocab,
                       c->layers, c->heads, c->d_model, c->vocab};
    FILE *f = open_out(dir, "gpt2.bin");
    put(f, header, sizeof(int), 256);
    put(f, g->p.wte, sizeof(float), ((size_t)c->vocab + (size_t)c->context) * C); /* wte, wpe */
    /* a block's tensors follow one another from ln1w (nn/gpt.c's layout; nn_gpt_block) */
    size_t sizes[12] = {C, C, 3 * C * C, 3 * C, C * C, C, C, C, 4 * C * C, 4 * C, 4 * C * C, C};
    size_t off = 0;
    for (int i = 0; i < 12; i++) {
        put_blocks(f, g, off, sizes[i]);
        off += sizes[i];
    }
    put(f, g->p.lnfw, sizeof(float), 2 * C); /* lnfw, lnfb */
    close_out(f);
}

static void write_tokens(const char *dir, const nn_text *t)
{
    int header[256] = {20240520, 1, (int)t->n};
    uint16_t *tok = malloc(t->n * sizeof(uint16_t));
    if (!tok) {
        fprintf(stderr, "gpt_prep: out of memory\n");
        exit(1);
    }
    for (size_t i = 0; i < t->n; i++) tok[i] = t->bytes[i];
    FILE *f = open_out(dir, "train.bin");
    put(f, header, sizeof(int), 256);
    put(f, tok, sizeof(uint16_t), t->n);
    close_out(f);
    free(tok);
}

int main(int argc, char **argv)
{
    if (argc < 4 || argc > 5) {
        fprintf(stderr, "usage: gpt_prep OUTDIR PRESET SEED [FORTUNE_DIR]\n");
        return 2;
    }
    nn_gpt_config c;
    nn_gpt *g = NULL;
    if (nn_gpt_preset(argv[2], &c) || !(g = nn_gpt_create(&c, 1)) ||
        nn_gpt_init_params(g, strtoull(argv[3], NULL, 10))) {
        fprintf(stderr, "gpt_prep: %s\n", nn_last_error());
        return 1;
    }
    nn_text train, val;
    if (nn_text_load_fortunes(argc > 4 ? argv[4] : NULL, &train, &val)) {
        fprintf(stderr, "gpt_prep: %s\n", nn_last_error());
        return 1;
    }
    FILE *f = open_out(argv[1], "params.f32");
    put(f, g->m->params, sizeof(float), g->m->nparams);
    close_out(f);
    write_llmc_checkpoint(argv[1], g);
    write_tokens(argv[1], &train);
    printf("gpt_prep: layers %d d_model %d heads %d context %d vocab %d params %zu tokens %zu\n",
           c.layers, c.d_model, c.heads, c.context, c.vocab, g->m->nparams, train.n);
    nn_text_free(&train);
    nn_text_free(&val);
    nn_gpt_destroy(g);
    return 0;
}

/*
 * gpt_tp_ckpt.c - the GPT's checkpoints under --tensor-parallel: of the whole model, as every
 * other split's, so that a run resumes under another split or none. For the moment of writing
 * or reading, the first shard of the first replica (world rank 0) holds the whole model's
 * parameters and AdamW state in place of its shard; the other shards of that replica send it
 * theirs or take theirs from it (nn_gpt_tp_move puts each in its place); the other replicas
 * hold the same as the first and take part through the data-parallel broadcasts of a resume.
 */
#include <stdlib.h>

#include "chorus.h"
#include "gpt_train.h"
#include "split.h"

int gpt_tp_whole(const trainer *t)
{
    return t->gpt && t->o.par.tp > 1;
}

void gpt_tp_open(trainer *t)
{
    train_gpt *s = t->gpt;
    s->tp_w = nn_gpt_create(&s->g->c, 0);
    if (!s->tp_w) die("a checkpoint of the whole model: %s", nn_last_error());
    size_t n = s->tp_w->m->nparams;
    s->tp_opt = t->opt;
    nn_optim *o = &t->opt;
    o->n = n;
    o->m = s->tp_opt.m ? calloc(n, sizeof(float)) : NULL;
    o->v = s->tp_opt.v ? calloc(n, sizeof(float)) : NULL;
    if ((s->tp_opt.m && !o->m) || (s->tp_opt.v && !o->v))
        die("--tensor-parallel: out of memory for the whole model (%zu parameters) of a "
            "checkpoint",
            n);
    t->m = s->tp_w->m;
    t->st.model_sig = nn_model_signature(t->m); /* a checkpoint names the model it holds */
}

void gpt_tp_close(trainer *t)
{
    train_gpt *s = t->gpt;
    free(t->opt.m);
    free(t->opt.v);
    uint64_t steps = t->opt.t;
    t->opt = s->tp_opt;
    t->opt.t = steps;
    t->m = s->g->m;
    t->st.model_sig = nn_model_signature(t->m);
    nn_gpt_destroy(s->tp_w);
    s->tp_w = NULL;
}

/* One vector of the shard (mine) between this replica's shards and the whole on its first
 * (whole, on that rank only). */
static void move_one(trainer *t, float *mine, float *whole, int to_whole, int tag)
{
    train_gpt *s = t->gpt;
    chorus_comm *tc = t->o.par.tp_comm;
    int T = chorus_size(tc), me = chorus_rank(tc);
    size_t n = s->g->m->nparams;
    chorus_result r = CHORUS_OK;
    if (me != 0) {
        r = to_whole ? chorus_send(tc, mine, n, CHORUS_FLOAT32, 0, tag)
                     : chorus_recv(tc, mine, n, CHORUS_FLOAT32, 0, tag);
    } else {
        float *buf = T > 1 ? malloc(n * sizeof(float)) : NULL;
        if (T > 1 && !buf) die("out of memory");
        for (int q = 0; q < T && !r; q++) {
            float *part = q == 0 ? mine : buf;
            if (q > 0 && to_whole) r = chorus_recv(tc, buf, n, CHORUS_FLOAT32, q, tag);
            if (!r && nn_gpt_tp_move(s->g, q, part, s->tp_w, whole, to_whole))
                die("%s", nn_last_error());
            if (!r && q > 0 && !to_whole) r = chorus_send(tc, buf, n, CHORUS_FLOAT32, q, tag);
        }
        free(buf);
    }
    if (r)
        die("--tensor-parallel: %s the whole model for a checkpoint: %s",
            to_whole ? "gathering" : "scattering", chorus_last_error(tc));
}

void gpt_tp_move(trainer *t, int to_whole)
{
    train_gpt *s = t->gpt;
    int lead = s->tp_w != NULL;
    nn_model *own = s->g->m;
    const nn_optim *so = lead ? &s->tp_opt : &t->opt;
    move_one(t, own->params, lead ? t->m->params : NULL, to_whole, 1);
    if (so->m) move_one(t, so->m, lead ? t->opt.m : NULL, to_whole, 2);
    if (so->v) move_one(t, so->v, lead ? t->opt.v : NULL, to_whole, 3);
}

/*
 * checks.c - chorus-train's --check-divergence over the replicas of a mode whose replicas hold
 * the same parameters, and the test-only perturbation (diverge.h).
 */
#include <stdint.h>

#include "diverge.h"
#include "trainer.h"

/* --check-divergence: the replicas compared at this step (once), before the step's metrics
 * and any checkpoint of it; a divergence stops every rank. */
void verify_replicas(trainer *t)
{
    char why[640];
    uint64_t step = t->st.global_step;
    if (!t->o.check_div || !t->mode->replicas_agree || t->div_checked == step + 1) return;
    t->div_checked = step + 1;
    if (t->o.par.zero) par_sync(&t->o.par, t->m); /* the parameters whole: after the all-gather */
    double t0 = now_s();
    if (diverge_check(t->comm, t->replicas, t->own, t->first_layer, step, why, sizeof(why)))
        die("%s; stopping without a checkpoint of this state", why);
    t->div_s += now_s() - t0;
    t->div_n++;
}

/* After the update of a step: the test-only perturbation (diverge.h), then the replicas
 * compared every --check-divergence steps and before every checkpoint. */
void after_update(trainer *t)
{
    char why[640];
    uint64_t step = t->st.global_step, every = (uint64_t)t->o.check_div;
    long ck = t->o.ckpt_every;
    if (t->o.par.zero && t->o.perturb) par_sync(&t->o.par, t->m);
    if (diverge_perturb(t->o.perturb, t->own, t->first_layer, g_rank, step, why, sizeof(why)))
        die("%s", why);
    if (every && (step % every == 0 || (ck && step % (uint64_t)ck == 0))) verify_replicas(t);
}

/*
 * modes.c - the ways chorus-train trains, in the order they are asked whether they run the
 * options (trainer.h, struct train_mode). A new mode is a file of its own and a line here.
 */
#include <stddef.h>

#include "trainer.h"

extern const train_mode mode_gpt_pipe, mode_gpt_ps, mode_gpt, mode_pipeline, mode_ps, mode_split,
    mode_allreduce;

const train_mode *const train_modes[] = {&mode_gpt_pipe,  &mode_gpt_ps, &mode_gpt,
                                         &mode_pipeline,  &mode_ps,     &mode_split,
                                         &mode_allreduce, NULL};

const train_mode *train_mode_of(const opts *o)
{
    for (const train_mode *const *m = train_modes; *m; m++)
        if ((*m)->wanted(o)) return *m;
    die("internal error: no mode runs these options");
}

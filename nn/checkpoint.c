/*
 * checkpoint.c - saving and restoring training through the library's public checkpoint API
 * (chorus/checkpoint.h): files, durability, integrity checks, pruning and the fallback to older
 * checkpoints are the container's; the payload is encoded and decoded in ckpt_payload.c.
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chorus/checkpoint.h"
#include "chorus/nn.h"
#include "nn_internal.h"

chorus_result nn_ckpt_save(const char *dir, const nn_model *m, const nn_optim *o,
                           const nn_train_state *st)
{
    size_t len = nn_ckpt_payload_size(m, o);
    void *buf = malloc(len);
    if (!buf) return nn__fail(CHORUS_ERR_NOMEM, "checkpoint of %zu bytes: out of memory", len);
    chorus_result r = nn_ckpt_encode(m, o, st, buf, len);
    if (r == CHORUS_OK) {
        r = chorus_checkpoint_save(dir, NN_CKPT_NAME, st->global_step, buf, len, NN_CKPT_KEEP);
        if (r != CHORUS_OK) nn__fail(r, "%s", chorus_last_error(NULL));
    }
    free(buf);
    return r;
}

/* Whether dir holds checkpoints of the old standalone format (ckpt-<step>.chk). */
static int has_old_format(const char *dir, char *example, size_t len)
{
    DIR *d = opendir(dir);
    if (!d) return 0;
    int found = 0;
    struct dirent *e;
    while (!found && (e = readdir(d))) {
        unsigned long long s;
        char tail[8];
        if (sscanf(e->d_name, "ckpt-%llu.%7s", &s, tail) == 2 && !strcmp(tail, "chk")) {
            snprintf(example, len, "%s/%s", dir, e->d_name);
            found = 1;
        }
    }
    closedir(d);
    return found;
}

static chorus_result load_newest(const char *dir, int bounded, uint64_t below, nn_model *m,
                                 nn_optim *o, nn_train_state *st, nn_ckpt_info *info);

chorus_result nn_ckpt_load_latest(const char *dir, nn_model *m, nn_optim *o, nn_train_state *st,
                                  nn_ckpt_info *info)
{
    return load_newest(dir, 0, 0, m, o, st, info);
}

chorus_result nn_ckpt_load_before(const char *dir, uint64_t below, nn_model *m, nn_optim *o,
                                  nn_train_state *st, nn_ckpt_info *info)
{
    return load_newest(dir, 1, below, m, o, st, info);
}

static chorus_result load_newest(const char *dir, int bounded, uint64_t below, nn_model *m,
                                 nn_optim *o, nn_train_state *st, nn_ckpt_info *info)
{
    memset(info, 0, sizeof(*info));
    uint64_t *steps;
    size_t count;
    chorus_result r = chorus_checkpoint_list(dir, NN_CKPT_NAME, &steps, &count);
    if (r != CHORUS_OK) return nn__fail(r, "%s", chorus_last_error(NULL));
    free(steps);
    if (count == 0) {
        char old[4200];
        if (has_old_format(dir, old, sizeof(old)))
            return nn__fail(CHORUS_ERR_INVALID_ARG,
                            "%s is a checkpoint of the old format (ckpt-<step>.chk), which this "
                            "version does not read: re-create it by training from scratch, "
                            "or use another --checkpoint-dir",
                            old);
        return CHORUS_OK; /* nothing to resume from */
    }
    uint64_t step;
    void *data;
    size_t len;
    r = bounded ? chorus_checkpoint_load_before(dir, NN_CKPT_NAME, below, &step, &data, &len)
                : chorus_checkpoint_load(dir, NN_CKPT_NAME, &step, &data, &len);
    if (r != CHORUS_OK) return nn__fail(r, "%s", chorus_last_error(NULL));
    snprintf(info->skipped, sizeof(info->skipped), "%s", chorus_last_error(NULL));
    chorus_checkpoint_path(dir, NN_CKPT_NAME, step, info->path, sizeof(info->path));
    /* nn_ckpt_decode checks everything before it writes anything. */
    uint64_t pstep;
    if (nn__ckpt_payload_step(data, len, &pstep) && pstep != step)
        r = nn__fail(CHORUS_ERR_INVALID_ARG, "the payload is for step %llu, the file for step %llu",
                     (unsigned long long)pstep, (unsigned long long)step);
    else
        r = nn_ckpt_decode(data, len, m, o, st);
    free(data);
    if (r != CHORUS_OK) {
        char why[sizeof(info->skipped)];
        snprintf(why, sizeof(why), "%s", nn_last_error());
        return nn__fail(r, "%s: %s%s%s", info->path, why, info->skipped[0] ? "; " : "",
                        info->skipped);
    }
    info->found = 1;
    info->step = step;
    return CHORUS_OK;
}

/*
 * tb.c - chorus-train's TensorBoard scalars (tb.h) over the library's event-file
 * writers (chorus/tensorboard.h).
 */
#include <stdio.h>
#include <string.h>

#include "tb.h"

int train_tb_open(train_tb *tb, const char *dir, chorus_comm *comm, int reporter, char *why,
                  size_t len)
{
    memset(tb, 0, sizeof(*tb));
    tb->comm = comm;
    tb->rank = chorus_rank(comm);
    tb->reporter = reporter;
    if (!dir) return 0;
    char sub[4096];
    snprintf(sub, sizeof(sub), "%s/rank%d", dir, tb->rank);
    if ((reporter && chorus_tb_open(dir, &tb->job) != CHORUS_OK) ||
        chorus_tb_open(sub, &tb->mine) != CHORUS_OK) {
        snprintf(why, len, "--tensorboard %s: %s", dir, chorus_last_error(NULL));
        train_tb_close(tb);
        return -1;
    }
    return 0;
}

static int failed(const char *what, const char *detail, char *why, size_t len)
{
    snprintf(why, len, "%s: %s", what, detail);
    return -1;
}

int train_tb_job(train_tb *tb, const char *tag, int64_t step, double value, char *why, size_t len)
{
    if (!tb->reporter) return 0;
    if (tb->job) {
        if (chorus_tb_scalar(tb->job, tag, step, value) != CHORUS_OK)
            return failed("TensorBoard", chorus_last_error(NULL), why, len);
        return 0;
    }
    return train_tb_rank(tb, tag, step, value, why, len);
}

int train_tb_rank(train_tb *tb, const char *tag, int64_t step, double value, char *why, size_t len)
{
    if (tb->mine) {
        if (chorus_tb_scalar(tb->mine, tag, step, value) != CHORUS_OK)
            return failed("TensorBoard", chorus_last_error(NULL), why, len);
    } else if (chorus_log_scalar(tb->comm, tag, step, value) != CHORUS_OK) {
        snprintf(why, len, "%s", chorus_last_error(tb->comm)); /* names CHORUS_TENSORBOARD */
        return -1;
    }
    return 0;
}

int train_tb_log_step(train_tb *tb, const train_tb_step *s, char *why, size_t len)
{
    const struct {
        const char *tag;
        double v;
        int job;
    } rows[] = {
        {"train/loss", s->loss, 1},
        {"train/accuracy", s->acc, 1},
        {"train/learning_rate", s->lr, 1},
        {"train/samples_per_s", s->samples_s, 1},
        {"rank/samples_per_s", s->rank_samples_s, 0},
        {"comm/time_s", s->comm_s, 0},
        {"comm/bytes_sent", s->bytes_sent, 0},
        {"comm/compression_ratio", s->bytes_sent > 0 ? s->bytes_dense / s->bytes_sent : 1.0, 0},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        int rc = rows[i].job ? train_tb_job(tb, rows[i].tag, s->step, rows[i].v, why, len)
                             : train_tb_rank(tb, rows[i].tag, s->step, rows[i].v, why, len);
        if (rc) return rc;
    }
    return 0;
}

int train_tb_test(train_tb *tb, int64_t step, double acc, double loss, char *why, size_t len)
{
    if (train_tb_job(tb, "test/accuracy", step, acc, why, len)) return -1;
    return train_tb_job(tb, "test/loss", step, loss, why, len);
}

void train_tb_close(train_tb *tb)
{
    chorus_tb_close(tb->job);
    chorus_tb_close(tb->mine);
    tb->job = tb->mine = NULL;
}

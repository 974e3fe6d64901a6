/*
 * record.c - the run's configuration compared across ranks and with its checkpoints, the
 * fresh run's claim on its checkpoint directory, and each rank's compressor memory beside the
 * checkpoints (record.h).
 */
#include <dirent.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "chorus/checkpoint.h"
#include "chorus/nn.h"
#include "record.h"

#define RECORD_NAME "config"
enum { LINE = 256 };

void rec_add(rec_config *c, rec_kind kind, const char *name, const char *fmt, ...)
{
    char value[LINE];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(value, sizeof(value), fmt, ap);
    va_end(ap);
    if (c->n < sizeof(c->text))
        c->n += (size_t)snprintf(c->text + c->n, sizeof(c->text) - c->n, "%c %s %s\n", (int)kind,
                                 name, value);
    if (c->n >= sizeof(c->text)) c->n = sizeof(c->text) - 1;
}

/* Line i of text (n bytes) as kind, name and value; 0 past the last line. */
static int line_at(const char *text, size_t n, int i, char *kind, char *name, char *value)
{
    const char *p = text, *end = text + n;
    for (; i > 0 && p < end; i--) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        if (!nl) return 0;
        p = nl + 1;
    }
    if (p >= end) return 0;
    const char *nl = memchr(p, '\n', (size_t)(end - p));
    size_t len = nl ? (size_t)(nl - p) : (size_t)(end - p);
    char buf[2 * LINE];
    if (len >= sizeof(buf)) len = sizeof(buf) - 1;
    memcpy(buf, p, len);
    buf[len] = '\0';
    int off = 0;
    if (sscanf(buf, "%c %127s %n", kind, name, &off) < 2 || !off) return 0;
    snprintf(value, LINE, "%s", buf + off);
    return 1;
}

/* One record's name for the same quantity as another's: a pipeline's --microbatches is the
 * --accum of a run without stages (the same sum of micro-batch gradients per step). */
static int same_option(const char *a, const char *b)
{
    if (!strcmp(a, b)) return 1;
    return (!strcmp(a, "--accum") && !strcmp(b, "--microbatches")) ||
           (!strcmp(a, "--microbatches") && !strcmp(b, "--accum"));
}

/* The value and kind of option name in text; 0 when absent. */
static int lookup(const char *text, size_t n, const char *name, char *kind, char *value)
{
    char k, nm[128], v[LINE];
    for (int i = 0; line_at(text, n, i, &k, nm, v); i++)
        if (same_option(nm, name)) {
            if (kind) *kind = k;
            snprintf(value, LINE, "%s", v);
            return 1;
        }
    return 0;
}

/* Appends to out (len bytes, used so far *used) like printf. */
static void append(char *out, size_t len, size_t *used, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void append(char *out, size_t len, size_t *used, const char *fmt, ...)
{
    if (*used >= len) return;
    va_list ap;
    va_start(ap, fmt);
    int w = vsnprintf(out + *used, len - *used, fmt, ap);
    va_end(ap);
    if (w > 0) *used += (size_t)w;
    if (*used >= len) *used = len;
}

int rec_agree(const rec_config *c, chorus_comm *comm, char *why, size_t len)
{
    int size = chorus_size(comm);
    size_t w = sizeof(c->text);
    char *all = calloc((size_t)size, w), mine[sizeof(c->text)] = {0};
    if (!all) {
        snprintf(why, len, "out of memory comparing the ranks' options");
        return -1;
    }
    memcpy(mine, c->text, c->n);
    if (chorus_allgather(comm, mine, all, w, CHORUS_UINT8) != CHORUS_OK) {
        snprintf(why, len, "comparing the ranks' options before training: %s",
                 chorus_last_error(comm));
        free(all);
        return -1;
    }
    size_t used = 0;
    char k, name[128], v0[LINE], vr[LINE];
    const char *t0 = all;
    for (int i = 0; line_at(t0, strlen(t0), i, &k, name, v0); i++)
        for (int r = 1; r < size && k != REC_BITS; r++) {
            const char *tr = all + (size_t)r * w;
            if (lookup(tr, strnlen(tr, w), name, NULL, vr) && !strcmp(vr, v0)) continue;
            append(why, len, &used, "%s%s: rank 0 has %s, rank %d has %s", used ? "; " : "", name,
                   v0, r, lookup(tr, strnlen(tr, w), name, NULL, vr) ? vr : "(none)");
            break; /* the first rank that differs names the option */
        }
    free(all);
    return used > 0;
}

void rec_set(rec_config *c, const char *name, const char *value)
{
    rec_config out = {.n = 0};
    char k, nm[128], v[LINE];
    for (int i = 0; line_at(c->text, c->n, i, &k, nm, v); i++)
        rec_add(&out, (rec_kind)k, nm, "%s", strcmp(nm, name) ? v : value);
    *c = out;
}

int rec_load_text(const char *dir, const char *name, char **data, size_t *n)
{
    uint64_t step, *steps;
    size_t count = 0;
    void *p = NULL;
    *data = NULL;
    if (chorus_checkpoint_list(dir, name, &steps, &count) != CHORUS_OK) return -1;
    free(steps);
    if (!count) return -1;
    if (chorus_checkpoint_load(dir, name, &step, &p, n) != CHORUS_OK) {
        fprintf(stderr,
                "chorus-train: warning: %s; what it records about the run cannot be compared "
                "with this one\n",
                chorus_last_error(NULL));
        return -1;
    }
    if (chorus_last_error(NULL)[0])
        fprintf(stderr, "chorus-train: warning: %s\n", chorus_last_error(NULL));
    *data = p;
    return 0;
}

static int load_record(const char *dir, char **data, size_t *n)
{
    return rec_load_text(dir, RECORD_NAME, data, n);
}

int rec_saved_value(const char *dir, const char *name, char *out, size_t len)
{
    void *saved = NULL;
    char v[LINE];
    size_t n;
    uint64_t step;
    if (chorus_checkpoint_load(dir, RECORD_NAME, &step, &saved, &n) != CHORUS_OK) return -1;
    int found = lookup(saved, n, name, NULL, v);
    free(saved);
    if (found) snprintf(out, len, "%s", v);
    return found ? 0 : -1;
}

int rec_check_dir(const rec_config *c, const char *dir, int resume, char *why, size_t len,
                  char *note, size_t nlen)
{
    note[0] = '\0';
    uint64_t *steps;
    size_t count;
    if (chorus_checkpoint_list(dir, NN_CKPT_NAME, &steps, &count) != CHORUS_OK) {
        snprintf(why, len, "%s", chorus_last_error(NULL));
        return -1;
    }
    uint64_t newest = count ? steps[0] : 0;
    free(steps);
    if (!resume) {
        if (!count) return 0;
        char path[4200];
        chorus_checkpoint_path(dir, NN_CKPT_NAME, newest, path, sizeof(path));
        snprintf(why, len,
                 "--checkpoint-dir %s already holds checkpoints of a run (newest %s, step %llu); "
                 "a new run there would mix its checkpoints with them and delete them. Continue "
                 "that run with --resume, use another --checkpoint-dir, or remove those "
                 "checkpoints first",
                 dir, path, (unsigned long long)newest);
        return 1;
    }
    char *saved;
    size_t n;
    if (!count || load_record(dir, &saved, &n)) return 0;
    size_t used = 0, nused = 0;
    char k, sk, name[128], mine[LINE], old[LINE];
    /* every option of either side that the checkpoint's result depends on */
    for (int side = 0; side < 2; side++) {
        const char *text = side ? saved : c->text;
        size_t tn = side ? n : c->n;
        for (int i = 0; line_at(text, tn, i, &k, name, side ? old : mine); i++) {
            int have_old = lookup(saved, n, name, &sk, old);
            int have_new = lookup(c->text, c->n, name, &k, mine);
            if (side && have_new) continue; /* seen from this run's side */
            if (!have_old) sk = k;
            if (!have_new) k = sk;
            if (have_old && have_new && !strcmp(old, mine)) continue;
            if (k == REC_RESULT || sk == REC_RESULT)
                append(why, len, &used, "%s%s was %s in the checkpoint, now %s", used ? "; " : "",
                       name, have_old ? old : "not used", have_new ? mine : "not used");
            else if (k == REC_NOTE && have_old && have_new)
                append(note, nlen, &nused,
                       "%s%s %s is not used: the run goes on with the "
                       "checkpoint's %s",
                       nused ? "; " : "", name, mine, old);
            else if (k == REC_BITS && have_old && have_new)
                append(note, nlen, &nused,
                       "%s%s was %s in the checkpoint, now %s: floating-point sums run in another "
                       "order, so the last bits of the result may differ from an uninterrupted "
                       "run's",
                       nused ? "; " : "", name, old, mine);
        }
    }
    free(saved);
    if (!used) return 0;
    append(why, len, &used,
           ". These change the result; resume with the checkpoint's values, or start a new run "
           "in another --checkpoint-dir");
    return 1;
}

int rec_save(const rec_config *c, const char *dir, char *why, size_t len)
{
    if (chorus_checkpoint_save(dir, RECORD_NAME, 0, c->text, c->n, 1) == CHORUS_OK) return 0;
    snprintf(why, len, "%s", chorus_last_error(NULL));
    return -1;
}

static void comp_name(char *out, size_t len, int rank, uint64_t step)
{
    snprintf(out, len, "compress-rank%d-at-%llu", rank, (unsigned long long)step);
}

/* Deletes this rank's compressor files other than those of step keep1 and keep2. */
static void prune_compressor(const char *dir, int rank, uint64_t keep1, uint64_t keep2)
{
    DIR *dd = opendir(dir);
    if (!dd) return;
    struct dirent *e;
    char path[4200];
    while ((e = readdir(dd))) {
        int r, end = 0;
        unsigned long long at, step;
        if (sscanf(e->d_name, "compress-rank%d-at-%llu.%llu.ckpt%n", &r, &at, &step, &end) != 3 ||
            e->d_name[end] || r != rank || at != step || step == keep1 || step == keep2)
            continue;
        snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
        unlink(path);
    }
    closedir(dd);
}

int rec_save_compressor(chorus_compressor *comp, const char *dir, int rank, uint64_t step,
                        char *why, size_t len)
{
    void *data;
    size_t n;
    char name[96];
    if (chorus_compressor_save_state(comp, &data, &n) != CHORUS_OK) {
        snprintf(why, len, "saving the compressor's state: %s", chorus_last_error(NULL));
        return -1;
    }
    comp_name(name, sizeof(name), rank, step);
    chorus_result r = chorus_checkpoint_save(dir, name, step, data, n, 1);
    free(data);
    if (r != CHORUS_OK) {
        snprintf(why, len, "saving the compressor's state: %s", chorus_last_error(NULL));
        return -1;
    }
    /* rank 0 writes the step's checkpoint next and keeps it and the newest before it: so
     * does this rank with its compressor files (older ones, of runs resumed, go) */
    uint64_t *steps;
    size_t count;
    if (chorus_checkpoint_list(dir, NN_CKPT_NAME, &steps, &count) == CHORUS_OK) {
        uint64_t before = 0;
        for (size_t i = 0; i < count; i++)
            if (steps[i] < step && steps[i] > before) before = steps[i];
        free(steps);
        prune_compressor(dir, rank, step, before);
    }
    return 0;
}

int rec_load_compressor(chorus_compressor *comp, const char *dir, int rank, uint64_t step,
                        char *why, size_t len)
{
    char name[96];
    uint64_t got;
    void *data = NULL;
    size_t n = 0;
    comp_name(name, sizeof(name), rank, step);
    if (chorus_checkpoint_load(dir, name, &got, &data, &n) != CHORUS_OK) {
        snprintf(why, len,
                 "rank %d's compressor state of step %llu: %s (the error feedback would restart "
                 "from zero and the result differ from an uninterrupted run)",
                 rank, (unsigned long long)step, chorus_last_error(NULL));
        return -1;
    }
    chorus_result r = chorus_compressor_load_state(comp, data, n);
    free(data);
    if (r != CHORUS_OK) {
        snprintf(why, len, "rank %d's compressor state of step %llu: %s", rank,
                 (unsigned long long)step, chorus_last_error(NULL));
        return -1;
    }
    return 0;
}

/*
 * text.c - the GPT's text (include/chorus/nn/text.h): Debian's fortune databases read as byte
 * tokens, a held-out part made of whole fortunes, and windows of tokens.
 */
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "chorus/nn.h"
#include "nn_internal.h"

#define TEXT_MAX_BYTES ((size_t)1 << 30)

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The database names of dir, sorted, into *names (*count of them). */
static chorus_result list_databases(const char *dir, char ***names, size_t *count)
{
    *names = NULL;
    *count = 0;
    DIR *d = opendir(dir);
    if (!d)
        return nn__fail(CHORUS_ERR_INVALID_ARG,
                        "cannot read the fortune databases in %s: %s (install them with: sudo "
                        "apt-get install fortunes; or point --data at a directory of them)",
                        dir, strerror(errno));
    char **v = NULL;
    size_t n = 0, cap = 0;
    chorus_result r = CHORUS_OK;
    for (struct dirent *e; r == CHORUS_OK && (e = readdir(d));) {
        size_t len = strlen(e->d_name);
        char path[4096];
        struct stat st;
        snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
        if (len >= 4 && !strcmp(e->d_name + len - 4, ".dat")) continue;
        if (lstat(path, &st) || !S_ISREG(st.st_mode)) continue; /* ".u8" names are links */
        if (n == cap) {
            cap = cap ? 2 * cap : 64;
            char **nv = realloc(v, cap * sizeof(*v));
            if (!nv)
                r = CHORUS_ERR_NOMEM;
            else
                v = nv;
        }
        if (r == CHORUS_OK && !(v[n++] = strdup(e->d_name))) r = CHORUS_ERR_NOMEM;
    }
    closedir(d);
    if (r == CHORUS_OK && n == 0)
        r = nn__fail(CHORUS_ERR_INVALID_ARG,
                     "%s holds no fortune database (install them with: sudo apt-get install "
                     "fortunes; or point --data at a directory of them)",
                     dir);
    else if (r != CHORUS_OK)
        nn__fail(r, "out of memory listing %s", dir);
    if (r == CHORUS_OK) qsort(v, n, sizeof(*v), by_name);
    *names = v;
    *count = n;
    return r;
}

static chorus_result append(nn_text *t, size_t *cap, const char *p, size_t len)
{
    if (t->n + len > *cap) {
        size_t nc = *cap ? *cap : 1 << 20;
        while (nc < t->n + len) nc *= 2;
        uint8_t *nb = realloc(t->bytes, nc);
        if (!nb) return nn__fail(CHORUS_ERR_NOMEM, "out of memory for %zu bytes of text", nc);
        t->bytes = nb;
        *cap = nc;
    }
    memcpy(t->bytes + t->n, p, len);
    t->n += len;
    return CHORUS_OK;
}

/* Splits the database text buf (len) into fortunes and appends each to train or val; *k counts
 * the fortunes across databases. */
static chorus_result split_fortunes(const char *buf, size_t len, size_t *k, nn_text *t[2],
                                    size_t cap[2])
{
    size_t start = 0;
    for (size_t i = 0; i <= len; i++) {
        int at_sep = i == len || (buf[i] == '%' && (i == 0 || buf[i - 1] == '\n') &&
                                  (i + 1 == len || buf[i + 1] == '\n'));
        if (!at_sep) continue;
        if (i > start) { /* a fortune: buf[start, i), ending in its newline */
            int v = *k % NN_TEXT_HELD_OUT == NN_TEXT_HELD_OUT - 1;
            chorus_result r = append(t[v], &cap[v], buf + start, i - start);
            if (r == CHORUS_OK && buf[i - 1] != '\n') r = append(t[v], &cap[v], "\n", 1);
            if (r == CHORUS_OK) r = append(t[v], &cap[v], "%\n", 2);
            if (r != CHORUS_OK) return r;
            (*k)++;
        }
        start = i + 2; /* past "%\n" */
        i++;
    }
    return CHORUS_OK;
}

static chorus_result read_file(const char *path, char **buf, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return nn__fail(CHORUS_ERR_SYSTEM, "%s: cannot open: %s", path, strerror(errno));
    size_t cap = 1 << 16, n = 0;
    char *b = malloc(cap);
    while (b) {
        n += fread(b + n, 1, cap - n, f);
        if (n < cap || cap >= TEXT_MAX_BYTES) break;
        char *nb = realloc(b, cap * 2);
        if (!nb) free(b);
        b = nb, cap *= 2;
    }
    int err = ferror(f);
    fclose(f);
    if (!b) return nn__fail(CHORUS_ERR_NOMEM, "%s: out of memory", path);
    if (err || n >= TEXT_MAX_BYTES) {
        free(b);
        return nn__fail(CHORUS_ERR_SYSTEM, "%s: %s", path,
                        err ? "read error" : "larger than 1 GiB");
    }
    *buf = b;
    *len = n;
    return CHORUS_OK;
}

chorus_result nn_text_load_fortunes(const char *dir, nn_text *train, nn_text *val)
{
    memset(train, 0, sizeof(*train));
    memset(val, 0, sizeof(*val));
    if (!dir) dir = NN_FORTUNES_DEFAULT_DIR;
    char **names = NULL;
    size_t count = 0, k = 0, cap[2] = {0, 0};
    chorus_result r = list_databases(dir, &names, &count);
    nn_text *t[2] = {train, val};
    for (size_t i = 0; r == CHORUS_OK && i < count; i++) {
        char path[4096], *buf = NULL;
        size_t len = 0;
        snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
        r = read_file(path, &buf, &len);
        if (r == CHORUS_OK) r = split_fortunes(buf, len, &k, t, cap);
        if (r == CHORUS_OK) free(buf);
    }
    for (size_t i = 0; names && i < count; i++) free(names[i]);
    free(names);
    if (r == CHORUS_OK && val->n < 2)
        r = nn__fail(CHORUS_ERR_INVALID_ARG, "%s: too few fortunes (%zu) for a held-out part", dir,
                     k);
    if (r != CHORUS_OK) {
        nn_text_free(train);
        nn_text_free(val);
    }
    return r;
}

void nn_text_free(nn_text *t)
{
    free(t->bytes);
    t->bytes = NULL;
    t->n = 0;
}

size_t nn_text_windows(const nn_text *t, int context)
{
    return t->n > 1 && context > 0 ? (t->n - 1) / (size_t)context : 0;
}

void nn_text_window(const nn_text *t, int context, size_t w, int32_t *x, int32_t *y)
{
    const uint8_t *p = t->bytes + w * (size_t)context;
    for (int i = 0; i < context; i++) {
        x[i] = p[i];
        y[i] = p[i + 1];
    }
}

double nn_text_unigram_loss(const nn_text *train, const nn_text *val)
{
    double count[256], total = 256;
    for (int i = 0; i < 256; i++) count[i] = 1;
    for (size_t i = 0; i < train->n; i++) count[train->bytes[i]]++;
    total += (double)train->n;
    double loss = 0;
    for (size_t i = 0; i < val->n; i++) loss -= log(count[val->bytes[i]] / total);
    return val->n ? loss / (double)val->n : 0;
}

/*
 * checkpoint.c - saving and restoring training: parameters, optimizer state and where the
 * run stands (epoch, sampler position, step, seeds).
 *
 * File layout (host byte order, little-endian on every machine we build for):
 *   0   char[8]  "CHNNCKPT"
 *   8   u32      version (1)
 *   12  u32      optimizer kind
 *   16  u64      parameter count P
 *   24  u64      optimizer state count S
 *   32  u64      optimizer steps t
 *   40  u64[6]   epoch, step_in_epoch, global_step, seed, rng, model signature
 *   88  f32[P]   parameters
 *       f32[S]   optimizer state (m, then v)
 *       u32      CRC32 (zlib) of every byte before it
 *       char[4]  "DONE"
 * A file is written to a temporary name, fsynced, renamed into place, and the directory
 * fsynced, so a crash leaves either the old set or the new set, never a torn file under a
 * checkpoint name. The previous checkpoint is kept so a damaged newest one has a fallback.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "base/atomic_file.h"
#include "chorus/nn.h"
#include "nn_internal.h"

#define CKPT_MAGIC   "CHNNCKPT"
#define CKPT_VERSION 1u
#define CKPT_HDR     88
#define CKPT_KEEP    2

typedef struct ckpt_header {
    char magic[8];
    uint32_t version, opt_kind;
    uint64_t nparams, nstate, opt_t;
    uint64_t st[6];
} ckpt_header;

_Static_assert(sizeof(ckpt_header) == CKPT_HDR, "checkpoint header layout");

/* Steps of the checkpoints in dir, newest first; returns the count (<= max). */
static int list_ckpts(const char *dir, uint64_t *steps, int max)
{
    DIR *d = opendir(dir);
    if (!d) return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        unsigned long long s;
        char tail[8];
        if (sscanf(e->d_name, "ckpt-%llu.%7s", &s, tail) != 2 || strcmp(tail, "chk")) continue;
        if (n < max) steps[n++] = s;
    }
    closedir(d);
    for (int i = 1; i < n; i++) /* insertion sort, descending */
        for (int j = i; j > 0 && steps[j] > steps[j - 1]; j--) {
            uint64_t t = steps[j];
            steps[j] = steps[j - 1];
            steps[j - 1] = t;
        }
    return n;
}

static void ckpt_path(char *out, size_t len, const char *dir, uint64_t step)
{
    snprintf(out, len, "%s/ckpt-%08llu.chk", dir, (unsigned long long)step);
}

int nn_ckpt_save(const char *dir, const nn_model *m, const nn_optim *o, const nn_train_state *st,
                 char *err, size_t errlen)
{
    if (chorus__mkdir_p(dir))
        return nn__fail(err, errlen, "cannot create checkpoint directory %s: %s", dir,
                        strerror(errno));
    char path[4096], tmp[4200];
    ckpt_path(path, sizeof(path), dir, st->global_step);
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);

    ckpt_header h;
    memset(&h, 0, sizeof(h));
    memcpy(h.magic, CKPT_MAGIC, 8);
    h.version = CKPT_VERSION;
    h.opt_kind = (uint32_t)o->kind;
    h.nparams = m->nparams;
    h.nstate = nn_optim_state_count(o);
    h.opt_t = o->t;
    uint64_t fields[6] = {st->epoch, st->step_in_epoch, st->global_step,
                          st->seed,  st->rng,           st->model_sig};
    memcpy(h.st, fields, sizeof(fields));

    uLong crc = crc32(0L, Z_NULL, 0);
    crc = crc32_z(crc, (const Bytef *)&h, sizeof(h));
    crc = crc32_z(crc, (const Bytef *)m->params, m->nparams * sizeof(float));
    size_t nm = o->m ? o->n : 0, nv = o->v ? o->n : 0;
    if (nm) crc = crc32_z(crc, (const Bytef *)o->m, nm * sizeof(float));
    if (nv) crc = crc32_z(crc, (const Bytef *)o->v, nv * sizeof(float));
    uint32_t c32 = (uint32_t)crc;

    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    if (fd < 0) return nn__fail(err, errlen, "cannot create %s: %s", tmp, strerror(errno));
    if (chorus__write_all(fd, &h, sizeof(h)) ||
        chorus__write_all(fd, m->params, m->nparams * sizeof(float)) ||
        (nm && chorus__write_all(fd, o->m, nm * sizeof(float))) ||
        (nv && chorus__write_all(fd, o->v, nv * sizeof(float))) || chorus__write_all(fd, &c32, 4) ||
        chorus__write_all(fd, "DONE", 4) || fsync(fd)) {
        int e = errno;
        close(fd);
        unlink(tmp);
        return nn__fail(err, errlen, "cannot write %s: %s", tmp, strerror(e));
    }
    if (close(fd)) {
        int e = errno;
        unlink(tmp);
        return nn__fail(err, errlen, "cannot write %s: %s", tmp, strerror(e));
    }
    if (rename(tmp, path)) {
        int e = errno;
        unlink(tmp);
        return nn__fail(err, errlen, "cannot rename %s to %s: %s", tmp, path, strerror(e));
    }
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        fsync(dfd);
        close(dfd);
    }
    /* Keep this one and the one before it. */
    uint64_t steps[64];
    int n = list_ckpts(dir, steps, 64);
    for (int i = CKPT_KEEP; i < n; i++) {
        char old[4096];
        ckpt_path(old, sizeof(old), dir, steps[i]);
        unlink(old);
    }
    return 0;
}

int nn_ckpt_load_file(const char *path, nn_model *m, nn_optim *o, nn_train_state *st, char *err,
                      size_t errlen)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return nn__fail(err, errlen, "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb)) {
        close(fd);
        return nn__fail(err, errlen, "%s: cannot stat: %s", path, strerror(errno));
    }
    size_t nstate = nn_optim_state_count(o);
    size_t expect = CKPT_HDR + (m->nparams + nstate) * sizeof(float) + 8;
    size_t size = (size_t)sb.st_size;
    if (size < CKPT_HDR + 8) {
        close(fd);
        return nn__fail(err, errlen, "%s: truncated: %zu bytes, shorter than the header", path,
                        size);
    }
    char *buf = malloc(size);
    if (!buf) {
        close(fd);
        return nn__fail(err, errlen, "%s: out of memory", path);
    }
    size_t got = 0;
    while (got < size) {
        ssize_t r = read(fd, buf + got, size - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        got += (size_t)r;
    }
    close(fd);
    int rc = -1;
    ckpt_header h;
    memcpy(&h, buf, sizeof(h));
    uint32_t stored;
    memcpy(&stored, buf + size - 8, 4);
    if (got != size) {
        nn__fail(err, errlen, "%s: read error", path);
    } else if (memcmp(h.magic, CKPT_MAGIC, 8)) {
        nn__fail(err, errlen, "%s: not a Chorus checkpoint (bad magic)", path);
    } else if (memcmp(buf + size - 4, "DONE", 4)) {
        /* Cut short, or the write never finished. */
        if (size < expect)
            nn__fail(err, errlen, "%s: truncated: %zu bytes, expected %zu", path, size, expect);
        else
            nn__fail(err, errlen, "%s: missing end marker (incomplete write)", path);
    } else if (stored != (uint32_t)crc32_z(crc32(0L, Z_NULL, 0), (const Bytef *)buf, size - 8)) {
        /* Checked before any header field is believed. */
        nn__fail(err, errlen, "%s: CRC mismatch: the file is corrupt", path);
    } else if (h.version != CKPT_VERSION) {
        nn__fail(err, errlen, "%s: checkpoint version %u, this build reads version %u", path,
                 h.version, CKPT_VERSION);
    } else if (h.nparams != m->nparams || h.st[5] != nn_model_signature(m)) {
        nn__fail(err, errlen,
                 "%s: written for a different model (%llu parameters, this model has %zu)", path,
                 (unsigned long long)h.nparams, m->nparams);
    } else if (h.opt_kind != (uint32_t)o->kind || h.nstate != nstate) {
        nn__fail(err, errlen, "%s: written for a different optimizer", path);
    } else if (size != expect) {
        nn__fail(err, errlen, "%s: %zu bytes, expected %zu", path, size, expect);
    } else {
        const char *p = buf + CKPT_HDR;
        memcpy(m->params, p, m->nparams * sizeof(float));
        p += m->nparams * sizeof(float);
        size_t nm = o->m ? o->n : 0, nv = o->v ? o->n : 0;
        if (nm) memcpy(o->m, p, nm * sizeof(float));
        p += nm * sizeof(float);
        if (nv) memcpy(o->v, p, nv * sizeof(float));
        o->t = h.opt_t;
        st->epoch = h.st[0];
        st->step_in_epoch = h.st[1];
        st->global_step = h.st[2];
        st->seed = h.st[3];
        st->rng = h.st[4];
        st->model_sig = h.st[5];
        rc = 0;
    }
    free(buf);
    return rc;
}

int nn_ckpt_load_latest(const char *dir, nn_model *m, nn_optim *o, nn_train_state *st, char *used,
                        size_t usedlen, char *note, size_t notelen, char *err, size_t errlen)
{
    uint64_t steps[64];
    int n = list_ckpts(dir, steps, 64);
    if (note && notelen) note[0] = 0;
    if (n == 0) return 0;
    size_t nl = 0;
    char why[1024];
    for (int i = 0; i < n; i++) {
        char path[4096];
        ckpt_path(path, sizeof(path), dir, steps[i]);
        if (nn_ckpt_load_file(path, m, o, st, why, sizeof(why)) == 0) {
            if (used) snprintf(used, usedlen, "%s", path);
            if (note && i > 0 && nl < notelen)
                snprintf(note + nl, notelen - nl, "using previous %s", path);
            return 1;
        }
        if (note && nl < notelen) {
            int w = snprintf(note + nl, notelen - nl, "refusing %s; ", why);
            if (w > 0) nl += (size_t)w;
        }
        if (i == 0) snprintf(err, errlen, "%s", why);
    }
    return nn__fail(err, errlen, "no usable checkpoint in %s: %s", dir, why);
}

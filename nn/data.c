/*
 * data.c - the IDX reader (the MNIST file format, gzip-compressed or plain, through zlib)
 * and the Fashion-MNIST loader. Every failure names the file and, for bad contents, the
 * byte offset in the decompressed stream where it was found.
 */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

#include "chorus/nn.h"
#include "nn_internal.h"

#define IDX_MAX_DIM   (1 << 24)
#define IDX_MAX_BYTES ((size_t)1 << 31)

/* A byte stream from a file that may be gzip-compressed. Unlike gzread, inflate is driven
 * here so a failure is reported at the exact byte of decompressed data (and of the file)
 * where it happened. */
typedef struct src {
    FILE *f;
    const char *path;
    int gz;    /* gzip member: inflate; otherwise plain bytes */
    int ended; /* inflate reached the end of the stream */
    z_stream z;
    size_t out; /* decompressed bytes delivered so far */
    unsigned char in[1 << 16];
} src;

static chorus_result src_open(src *s, const char *path)
{
    memset(s, 0, offsetof(src, in));
    s->path = path;
    s->f = fopen(path, "rb");
    if (!s->f) return nn__fail(CHORUS_ERR_SYSTEM, "%s: cannot open: %s", path, strerror(errno));
    int c0 = fgetc(s->f), c1 = fgetc(s->f);
    rewind(s->f);
    s->gz = c0 == 0x1f && c1 == 0x8b;
    if (s->gz && inflateInit2(&s->z, 16 + MAX_WBITS) != Z_OK) {
        fclose(s->f);
        return nn__fail(CHORUS_ERR_SYSTEM, "%s: zlib initialisation failed", path);
    }
    return CHORUS_OK;
}

static void src_close(src *s)
{
    if (s->gz) inflateEnd(&s->z);
    fclose(s->f);
}

/* Reads exactly n bytes; `what` names them in the message. */
static chorus_result src_read(src *s, void *buf, size_t n, const char *what)
{
    size_t start = s->out, got = 0;
    if (!s->gz) {
        got = fread(buf, 1, n, s->f);
        s->out += got;
        if (got < n) {
            if (ferror(s->f))
                return nn__fail(CHORUS_ERR_SYSTEM, "%s: read error at byte %zu: %s", s->path,
                                s->out, strerror(errno));
            return nn__fail(CHORUS_ERR_INVALID_ARG,
                            "%s: truncated at byte %zu: %s needs %zu bytes from byte %zu, only "
                            "%zu are there",
                            s->path, s->out, what, n, start, got);
        }
        return CHORUS_OK;
    }
    while (got < n && !s->ended) {
        if (s->z.avail_in == 0) {
            size_t r = fread(s->in, 1, sizeof(s->in), s->f);
            if (r == 0) {
                if (ferror(s->f))
                    return nn__fail(CHORUS_ERR_SYSTEM, "%s: read error: %s", s->path,
                                    strerror(errno));
                break; /* end of file before the end of the compressed stream */
            }
            s->z.next_in = s->in;
            s->z.avail_in = (uInt)r;
        }
        size_t want = n - got > (1u << 30) ? (1u << 30) : n - got;
        s->z.next_out = (Bytef *)buf + got;
        s->z.avail_out = (uInt)want;
        int zr = inflate(&s->z, Z_NO_FLUSH);
        size_t produced = want - s->z.avail_out;
        got += produced;
        s->out += produced;
        if (zr == Z_STREAM_END) {
            s->ended = 1;
        } else if (zr != Z_OK && zr != Z_BUF_ERROR) {
            return nn__fail(CHORUS_ERR_INVALID_ARG,
                            "%s: corrupt compressed data at byte %zu of the data (byte %lu of the "
                            "file): %s",
                            s->path, s->out, s->z.total_in, s->z.msg ? s->z.msg : "zlib error");
        }
    }
    if (got < n)
        return nn__fail(CHORUS_ERR_INVALID_ARG,
                        "%s: truncated at byte %zu: %s needs %zu bytes from byte %zu, only %zu "
                        "are there%s",
                        s->path, s->out, what, n, start, got,
                        s->ended ? "" : " (the compressed stream is cut short)");
    return CHORUS_OK;
}

/* After the last expected byte: the gzip trailer (CRC, length) must check out and nothing
 * may follow. */
static chorus_result src_finish(src *s)
{
    unsigned char extra;
    if (!s->gz) {
        if (fread(&extra, 1, 1, s->f) == 1)
            return nn__fail(CHORUS_ERR_INVALID_ARG, "%s: unexpected data after byte %zu", s->path,
                            s->out);
        return CHORUS_OK;
    }
    if (!s->ended) {
        chorus_result r = src_read(s, &extra, 1, "the end of the data");
        if (r == CHORUS_OK)
            return nn__fail(CHORUS_ERR_INVALID_ARG, "%s: unexpected data after byte %zu", s->path,
                            s->out - 1);
        if (!s->ended) return r; /* corrupt trailer or cut short: src_read said what inflate saw */
    }
    return CHORUS_OK;
}

static uint32_t be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

chorus_result nn_idx_read(const char *path, int dims, uint8_t **data, int shape[3])
{
    *data = NULL;
    chorus_result r;
    if (dims < 1 || dims > 3)
        return nn__fail(CHORUS_ERR_INVALID_ARG, "%s: bad dimension count", path);
    src *s = malloc(sizeof(*s));
    if (!s) return nn__fail(CHORUS_ERR_NOMEM, "%s: out of memory", path);
    if ((r = src_open(s, path)) != CHORUS_OK) {
        free(s);
        return r;
    }
    uint8_t hdr[16];
    uint8_t *buf = NULL;
    if ((r = src_read(s, hdr, 4, "the IDX magic")) != CHORUS_OK) goto fail;
    uint32_t magic = be32(hdr), want = 0x0800u | (uint32_t)dims;
    if (magic != want) {
        r = nn__fail(CHORUS_ERR_INVALID_ARG,
                     "%s: bad IDX magic 0x%08x at byte 0 (expected 0x%08x: unsigned bytes, %d "
                     "dimension%s)",
                     path, magic, want, dims, dims > 1 ? "s" : "");
        goto fail;
    }
    if ((r = src_read(s, hdr + 4, 4 * (size_t)dims, "the IDX dimensions")) != CHORUS_OK) goto fail;
    size_t total = 1;
    for (int i = 0; i < dims; i++) {
        uint32_t d = be32(hdr + 4 + 4 * i);
        if (d == 0 || d > IDX_MAX_DIM) {
            r = nn__fail(CHORUS_ERR_INVALID_ARG, "%s: implausible dimension %u at byte %d", path, d,
                         4 + 4 * i);
            goto fail;
        }
        shape[i] = (int)d;
        total *= d;
        if (total > IDX_MAX_BYTES) {
            r = nn__fail(CHORUS_ERR_INVALID_ARG,
                         "%s: data size in the header at byte %d is too large", path, 4 + 4 * i);
            goto fail;
        }
    }
    buf = malloc(total);
    if (!buf) {
        r = nn__fail(CHORUS_ERR_NOMEM, "%s: out of memory for %zu bytes", path, total);
        goto fail;
    }
    if ((r = src_read(s, buf, total, "the data")) != CHORUS_OK) goto fail;
    if ((r = src_finish(s)) != CHORUS_OK) goto fail;
    src_close(s);
    free(s);
    *data = buf;
    return CHORUS_OK;
fail:
    free(buf);
    src_close(s);
    free(s);
    return r;
}

/* Picks name.gz, or name when only the uncompressed file is there. */
static int find_file(const char *dir, const char *name, char *path, size_t len)
{
    struct stat st;
    snprintf(path, len, "%s/%s.gz", dir, name);
    if (stat(path, &st) == 0) return 0;
    char plain[4096];
    snprintf(plain, sizeof(plain), "%s/%s", dir, name);
    if (stat(plain, &st) == 0) {
        snprintf(path, len, "%s", plain);
        return 0;
    }
    return -1;
}

chorus_result nn_fashion_load(const char *dir, int train, nn_dataset *ds)
{
    memset(ds, 0, sizeof(*ds));
    int is_default = dir == NULL;
    if (!dir) dir = NN_FASHION_DEFAULT_DIR;
    const char *split = train ? "train" : "t10k";
    char ipath[4096], lpath[4096], name[64];
    const char *hint = is_default ? "install it with: sudo apt-get install dataset-fashion-mnist "
                                    "(or pass --data DIR)"
                                  : "pass --data with the directory holding the four "
                                    "*-ubyte.gz files, or install the default copy with: sudo "
                                    "apt-get install dataset-fashion-mnist";
    snprintf(name, sizeof(name), "%s-images-idx3-ubyte", split);
    if (find_file(dir, name, ipath, sizeof(ipath)))
        return nn__fail(CHORUS_ERR_INVALID_ARG, "Fashion-MNIST not found: %s does not exist; %s",
                        ipath, hint);
    snprintf(name, sizeof(name), "%s-labels-idx1-ubyte", split);
    if (find_file(dir, name, lpath, sizeof(lpath)))
        return nn__fail(CHORUS_ERR_INVALID_ARG, "Fashion-MNIST not found: %s does not exist; %s",
                        lpath, hint);
    int ishape[3], lshape[3];
    chorus_result r = nn_idx_read(ipath, 3, &ds->images, ishape);
    if (r != CHORUS_OK) return r;
    if ((r = nn_idx_read(lpath, 1, &ds->labels, lshape)) != CHORUS_OK) {
        nn_dataset_free(ds);
        return r;
    }
    if (lshape[0] != ishape[0]) {
        nn_dataset_free(ds);
        return nn__fail(CHORUS_ERR_INVALID_ARG, "%s has %d labels but %s has %d images", lpath,
                        lshape[0], ipath, ishape[0]);
    }
    for (int i = 0; i < lshape[0]; i++)
        if (ds->labels[i] >= 10) {
            int v = ds->labels[i];
            nn_dataset_free(ds);
            return nn__fail(CHORUS_ERR_INVALID_ARG,
                            "%s: label %d at byte %d is not a class in 0..9", lpath, v, 8 + i);
        }
    ds->n = ishape[0];
    ds->c = 1;
    ds->h = ishape[1];
    ds->w = ishape[2];
    ds->nclasses = 10;
    /* Fashion-MNIST training-set pixel statistics. */
    ds->mean = 0.2860f;
    ds->std = 0.3530f;
    return CHORUS_OK;
}

void nn_dataset_free(nn_dataset *ds)
{
    free(ds->images);
    free(ds->labels);
    ds->images = ds->labels = NULL;
}

void nn_dataset_batch(const nn_dataset *ds, const uint32_t *idx, int B, float *x, int32_t *y)
{
    size_t F = (size_t)ds->c * ds->h * ds->w;
    float scale = 1.0f / (255.0f * ds->std), shift = -ds->mean / ds->std;
    for (int n = 0; n < B; n++) {
        const uint8_t *src = ds->images + (size_t)idx[n] * F;
        float *dst = x + (size_t)n * F;
        for (size_t i = 0; i < F; i++) dst[i] = (float)src[i] * scale + shift;
        y[n] = ds->labels[idx[n]];
    }
}

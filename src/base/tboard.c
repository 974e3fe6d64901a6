/*
 * tboard.c - TensorBoard event files (chorus/tensorboard.h): the record framing with its
 * masked CRC32C, and the few fields of TensorFlow's Event, Summary and Summary.Value messages
 * that a scalar needs, in the protobuf wire encoding. Both are written here rather than taken
 * from a library: Debian 12 packages no C library for CRC32C (only python3-crc32c, which the
 * tests use to check these files), and protobuf-c would bring a code generator into the build
 * and a run-time library into libchorus for five fields of three messages
 * (docs/MONITORING.md).
 */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "base/atomic_file.h"
#include "base/base.h"
#include "base/byteorder.h"
#include "chorus/tensorboard.h"

struct chorus_tb {
    FILE *f;
    int broken;
    char path[4096];
};

/* ---- CRC32C (Castagnoli, reflected polynomial 0x82F63B78), as TFRecord frames use ---------- */

static uint32_t crc_table[256];
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;

static void crc_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        crc_table[i] = c;
    }
}

static uint32_t crc32c(const uint8_t *p, size_t n)
{
    pthread_once(&crc_once, crc_init);
    uint32_t c = 0xFFFFFFFFu;
    while (n--) c = crc_table[(c ^ *p++) & 0xFF] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}

/* TensorFlow stores CRCs rotated and offset, so that a CRC of data holding CRCs stays strong. */
static uint32_t masked_crc(const uint8_t *p, size_t n)
{
    uint32_t c = crc32c(p, n);
    return ((c >> 15) | (c << 17)) + 0xA282EAD8u;
}

/* ---- protobuf encoding: a growing byte buffer of fields ------------------------------------ */

typedef struct pb {
    uint8_t b[512];
    size_t n;
} pb;

static void put_varint(pb *p, uint64_t v)
{
    do {
        uint8_t byte = v & 0x7F;
        v >>= 7;
        p->b[p->n++] = byte | (v ? 0x80 : 0);
    } while (v);
}

static void put_fixed(pb *p, uint64_t v, int bytes)
{
    for (int i = 0; i < bytes; i++) p->b[p->n++] = (uint8_t)(v >> (8 * i));
}

/* Field number and wire type (0 varint, 1 64-bit, 2 length-delimited, 5 32-bit). */
static void put_key(pb *p, unsigned field, unsigned wire)
{
    put_varint(p, (uint64_t)field << 3 | wire);
}

static void put_bytes(pb *p, unsigned field, const void *data, size_t len)
{
    put_key(p, field, 2);
    put_varint(p, len);
    memcpy(p->b + p->n, data, len);
    p->n += len;
}

static void put_double(pb *p, unsigned field, double v)
{
    uint64_t u;
    memcpy(&u, &v, sizeof(u));
    put_key(p, field, 1);
    put_fixed(p, u, 8);
}

/* Event: wall_time = 1 (double), step = 2 (int64), file_version = 3 (string), summary = 5. */
static void event_head(pb *p, int64_t step)
{
    struct timeval tv;
    gettimeofday(&tv, NULL);
    put_double(p, 1, (double)tv.tv_sec + (double)tv.tv_usec * 1e-6);
    if (step) {
        put_key(p, 2, 0);
        put_varint(p, (uint64_t)step);
    }
}

/* ---- the file ------------------------------------------------------------------------------- */

/* One record: length, masked CRC of the length, data, masked CRC of the data. */
static int write_record(chorus_tb *w, const pb *data)
{
    uint8_t head[12];
    chorus__put_le64(head, (uint64_t)data->n);
    uint32_t lc = masked_crc(head, 8), dc = masked_crc(data->b, data->n);
    chorus__put_le32(head + 8, lc);
    uint8_t tail[4];
    chorus__put_le32(tail, dc);
    if (fwrite(head, 1, 12, w->f) != 12 || fwrite(data->b, 1, data->n, w->f) != data->n ||
        fwrite(tail, 1, 4, w->f) != 4 || fflush(w->f) != 0) {
        w->broken = errno ? errno : EIO;
        return -1;
    }
    return 0;
}

chorus_result chorus_tb_open(const char *dir, chorus_tb **out)
{
    chorus_errbuf *e = chorus__init_errbuf();
    if (!dir || !out)
        return chorus__fail(e, CHORUS_ERR_INVALID_ARG, "chorus_tb_open: %s is NULL",
                            dir ? "out" : "dir");
    *out = NULL;
    if (chorus__mkdir_p(dir))
        return chorus__fail(e, CHORUS_ERR_SYSTEM, "cannot create the TensorBoard directory %s: %s",
                            dir, strerror(errno));
    chorus_tb *w = calloc(1, sizeof(*w));
    if (!w) return chorus__fail(e, CHORUS_ERR_NOMEM, "chorus_tb_open: out of memory");
    char host[256] = "localhost";
    gethostname(host, sizeof(host) - 1);
    long now = (long)time(NULL);
    /* a second writer of this process in this second gets a suffix, as TensorFlow's do */
    for (int k = 0; !w->f && k < 100; k++) {
        int n = snprintf(w->path, sizeof(w->path), "%s/events.out.tfevents.%ld.%s.%d", dir, now,
                         host, (int)getpid());
        if (k) snprintf(w->path + n, sizeof(w->path) - (size_t)n, ".%d", k);
        w->f = fopen(w->path, "wbx");
        if (!w->f && errno != EEXIST) break;
    }
    if (!w->f) {
        chorus__fail(e, CHORUS_ERR_SYSTEM, "cannot create the TensorBoard event file %s: %s",
                     w->path, strerror(errno));
        free(w);
        return CHORUS_ERR_SYSTEM;
    }
    pb p = {.n = 0};
    event_head(&p, 0);
    put_bytes(&p, 3, "brain.Event:2", 13);
    if (write_record(w, &p)) {
        chorus__fail(e, CHORUS_ERR_SYSTEM, "cannot write the TensorBoard event file %s: %s",
                     w->path, strerror(w->broken));
        chorus_tb_close(w);
        return CHORUS_ERR_SYSTEM;
    }
    *out = w;
    return CHORUS_OK;
}

chorus_result chorus_tb_scalar(chorus_tb *w, const char *tag, int64_t step, double value)
{
    chorus_errbuf *e = chorus__init_errbuf();
    if (!w || !tag)
        return chorus__fail(e, CHORUS_ERR_INVALID_ARG, "chorus_tb_scalar: %s is NULL",
                            w ? "tag" : "the writer");
    size_t tl = strlen(tag);
    if (tl == 0 || tl > 255)
        return chorus__fail(e, CHORUS_ERR_INVALID_ARG,
                            "chorus_tb_scalar: a tag has 1 to 255 bytes, not %zu", tl);
    if (w->broken)
        return chorus__fail(e, CHORUS_ERR_SYSTEM, "cannot write the TensorBoard event file %s: %s",
                            w->path, strerror(w->broken));
    /* Summary.Value: tag = 1 (string), simple_value = 2 (float) */
    pb v = {.n = 0};
    put_bytes(&v, 1, tag, tl);
    float f = (float)value;
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    put_key(&v, 2, 5);
    put_fixed(&v, u, 4);
    pb s = {.n = 0}; /* Summary: value = 1 (repeated Value) */
    put_bytes(&s, 1, v.b, v.n);
    pb p = {.n = 0};
    event_head(&p, step);
    put_bytes(&p, 5, s.b, s.n);
    if (write_record(w, &p))
        return chorus__fail(e, CHORUS_ERR_SYSTEM, "cannot write the TensorBoard event file %s: %s",
                            w->path, strerror(w->broken));
    return CHORUS_OK;
}

const char *chorus_tb_path(const chorus_tb *w)
{
    return w ? w->path : "";
}

void chorus_tb_close(chorus_tb *w)
{
    if (!w) return;
    if (w->f) fclose(w->f);
    free(w);
}

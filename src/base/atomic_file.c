/*
 * atomic_file.c - crash-safe checkpoint files, the public API of chorus/checkpoint.h (see
 * atomic_file.h for the layout and the guarantees): write to a temporary file, fsync, rename, fsync
 * the directory; CRC32-checked headers; keep the newest K; fall back to an older file when the
 * newest is damaged.
 */
#include <dirent.h>
#include <pthread.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/atomic_file.h"
#include "base/byteorder.h"
#include "chorus/checkpoint.h"

/* ---- CRC32 ------------------------------------------------------------------------------ */

static uint32_t crc_table[256];
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;

static void crc_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = c & 1 ? 0xedb88320u ^ (c >> 1) : c >> 1;
        crc_table[i] = c;
    }
}

uint32_t chorus__crc32(uint32_t crc, const void *p, size_t n)
{
    pthread_once(&crc_once, crc_init);
    const unsigned char *b = p;
    crc = ~crc;
    while (n--) crc = crc_table[(crc ^ *b++) & 0xff] ^ (crc >> 8);
    return ~crc;
}

/* ---- header ----------------------------------------------------------------------------- */

static void encode_header(unsigned char h[CHORUS_CKPT_HDR_LEN], uint64_t step, const void *data,
                          size_t len)
{
    memset(h, 0, CHORUS_CKPT_HDR_LEN);
    memcpy(h, CHORUS_CKPT_MAGIC, 8);
    chorus__put_le32(h + 8, CHORUS_CKPT_VERSION);
    chorus__put_le32(h + 12, CHORUS_CKPT_HDR_LEN);
    chorus__put_le64(h + 16, step);
    chorus__put_le64(h + 24, len);
    chorus__put_le32(h + 32, chorus__crc32(0, data, len));
    chorus__put_le32(h + 44, chorus__crc32(0, h, 44));
}

chorus_result chorus__ckpt_parse(const unsigned char *buf, size_t len, uint64_t *step,
                                 const unsigned char **payload, size_t *plen, char *why,
                                 size_t why_len)
{
#define BADF(...) (snprintf(why, why_len, __VA_ARGS__), CHORUS_ERR_PROTOCOL)
    if (len < CHORUS_CKPT_HDR_LEN)
        return BADF("truncated: %zu bytes, shorter than the %d-byte header", len,
                    CHORUS_CKPT_HDR_LEN);
    if (memcmp(buf, CHORUS_CKPT_MAGIC, 8)) return BADF("bad magic (not a Chorus checkpoint)");
    uint32_t hcrc = chorus__crc32(0, buf, 44);
    if (hcrc != chorus__get_le32(buf + 44))
        return BADF("header checksum mismatch (stored 0x%08x, computed 0x%08x): damaged header",
                    chorus__get_le32(buf + 44), hcrc);
    uint32_t version = chorus__get_le32(buf + 8);
    if (version != CHORUS_CKPT_VERSION)
        return BADF("version %u, this library reads version %u", version, CHORUS_CKPT_VERSION);
    if (chorus__get_le32(buf + 12) != CHORUS_CKPT_HDR_LEN)
        return BADF("header length %u, expected %d", chorus__get_le32(buf + 12),
                    CHORUS_CKPT_HDR_LEN);
    uint64_t n = chorus__get_le64(buf + 24);
    if (n > CHORUS_CKPT_MAX_PAYLOAD)
        return BADF("payload of %llu bytes is implausible", (unsigned long long)n);
    if (n != len - CHORUS_CKPT_HDR_LEN)
        return BADF("%s: the header announces %llu payload bytes, the file holds %zu",
                    n > len - CHORUS_CKPT_HDR_LEN ? "truncated (torn write?)" : "trailing bytes",
                    (unsigned long long)n, len - CHORUS_CKPT_HDR_LEN);
    uint32_t pcrc = chorus__crc32(0, buf + CHORUS_CKPT_HDR_LEN, (size_t)n);
    if (pcrc != chorus__get_le32(buf + 32))
        return BADF("payload checksum mismatch (stored 0x%08x, computed 0x%08x): damaged data",
                    chorus__get_le32(buf + 32), pcrc);
    *step = chorus__get_le64(buf + 16);
    *payload = buf + CHORUS_CKPT_HDR_LEN;
    *plen = (size_t)n;
    return CHORUS_OK;
#undef BADF
}

/* ---- files ------------------------------------------------------------------------------ */

static int valid_name(const char *name)
{
    if (!name || !*name || strlen(name) > 100) return 0;
    for (const char *p = name; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
              *p == '-' || *p == '_' || *p == '.'))
            return 0;
    return 1;
}

int chorus__write_all(int fd, const void *p, size_t n)
{
    const char *c = p;
    while (n) {
        ssize_t w = write(fd, c, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        c += w;
        n -= (size_t)w;
    }
    return 0;
}

int chorus__mkdir_p(const char *dir)
{
    char tmp[4096];
    if (snprintf(tmp, sizeof(tmp), "%s", dir) >= (int)sizeof(tmp)) {
        errno = ENAMETOOLONG;
        return -1;
    }
    for (char *p = tmp + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        if (mkdir(tmp, 0777) && errno != EEXIST) return -1;
        *p = '/';
    }
    if (mkdir(tmp, 0777) && errno != EEXIST) return -1;
    return 0;
}

static int fsync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return -1;
    int r = fsync(fd);
    close(fd);
    return r;
}

/* Parses "<name>.<20 digits>.ckpt"; returns 1 and the step when it matches. */
static int match_ckpt(const char *file, const char *name, uint64_t *step)
{
    size_t nl = strlen(name);
    if (strncmp(file, name, nl) || file[nl] != '.') return 0;
    const char *d = file + nl + 1;
    for (int i = 0; i < 20; i++)
        if (d[i] < '0' || d[i] > '9') return 0;
    if (strcmp(d + 20, ".ckpt")) return 0;
    *step = strtoull(d, NULL, 10);
    return 1;
}

/* Parses ".<name>.<pid>.tmp"; returns the writer's pid or 0. */
static long match_tmp(const char *file, const char *name)
{
    size_t nl = strlen(name);
    if (file[0] != '.' || strncmp(file + 1, name, nl) || file[nl + 1] != '.') return 0;
    char *end;
    long pid = strtol(file + nl + 2, &end, 10);
    return pid > 0 && !strcmp(end, ".tmp") ? pid : 0;
}

static int cmp_desc(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* Steps of the checkpoints of name in dir, newest first, in *out (malloc'ed; NULL when there
 * are none). A missing directory holds none. */
static chorus_result list_steps(const char *dir, const char *name, uint64_t **out, size_t *count,
                                chorus_errbuf *e)
{
    *out = NULL;
    *count = 0;
    DIR *d = opendir(dir);
    if (!d) {
        if (errno == ENOENT) return CHORUS_OK;
        return chorus__fail(e, CHORUS_ERR_SYSTEM, "cannot read checkpoint directory %s: %s", dir,
                            strerror(errno));
    }
    size_t cap = 0, n = 0;
    uint64_t *steps = NULL;
    struct dirent *de;
    while ((de = readdir(d))) {
        uint64_t s;
        if (!match_ckpt(de->d_name, name, &s)) continue;
        if (n == cap) {
            uint64_t *ns = realloc(steps, (cap ? 2 * cap : 16) * sizeof(uint64_t));
            if (!ns) {
                free(steps);
                closedir(d);
                return chorus__fail(e, CHORUS_ERR_NOMEM, "listing checkpoints in %s: out of memory",
                                    dir);
            }
            steps = ns;
            cap = cap ? 2 * cap : 16;
        }
        steps[n++] = s;
    }
    closedir(d);
    if (steps) qsort(steps, n, sizeof(uint64_t), cmp_desc);
    *out = steps;
    *count = n;
    return CHORUS_OK;
}

/* Returns 1 when the path fit into out. */
static int ckpt_path(char *out, size_t len, const char *dir, const char *name, uint64_t step)
{
    int w = snprintf(out, len, "%s/%s.%020llu.ckpt", dir, name, (unsigned long long)step);
    return w >= 0 && (size_t)w < len;
}

chorus_result chorus_checkpoint_path(const char *dir, const char *name, uint64_t step, char *out,
                                     size_t len)
{
    chorus_errbuf *e = chorus__init_errbuf();
    if (!dir || !valid_name(name) || !out || !len)
        return chorus__fail(e, CHORUS_ERR_INVALID_ARG, "checkpoint path: bad arguments");
    if (!ckpt_path(out, len, dir, name, step))
        return chorus__fail(e, CHORUS_ERR_INVALID_ARG,
                            "checkpoint path: %zu bytes are too few for the path in %s", len, dir);
    return CHORUS_OK;
}

chorus_result chorus_checkpoint_list(const char *dir, const char *name, uint64_t **steps,
                                     size_t *count)
{
    chorus_errbuf *e = chorus__init_errbuf();
    if (!dir || !valid_name(name) || !steps || !count)
        return chorus__fail(e, CHORUS_ERR_INVALID_ARG,
                            "checkpoint list: bad arguments (dir %s, name '%s')",
                            dir ? dir : "NULL", name ? name : "NULL");
    return list_steps(dir, name, steps, count, e);
}

chorus_result chorus_checkpoint_save(const char *dir, const char *name, uint64_t step,
                                     const void *data, size_t len, int keep)
{
    chorus_errbuf *e = chorus__init_errbuf();
    if (!dir || !valid_name(name) || (len && !data) || keep < 1)
        return chorus__fail(e, CHORUS_ERR_INVALID_ARG,
                            "checkpoint write: bad arguments (dir %s, name '%s', keep %d); names "
                            "use letters, digits, '-', '_' and '.'",
                            dir ? dir : "NULL", name ? name : "NULL", keep);
    if (chorus__mkdir_p(dir))
        return chorus__fail(e, CHORUS_ERR_SYSTEM, "cannot create checkpoint directory %s: %s", dir,
                            strerror(errno));
    char tmp[4200], path[4200];
    if (snprintf(tmp, sizeof(tmp), "%s/.%s.%d.tmp", dir, name, (int)getpid()) >= (int)sizeof(tmp) ||
        !ckpt_path(path, sizeof(path), dir, name, step))
        return chorus__fail(e, CHORUS_ERR_INVALID_ARG, "checkpoint directory path too long: %s",
                            dir);
    unsigned char h[CHORUS_CKPT_HDR_LEN];
    encode_header(h, step, data, len);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return chorus__fail(e, CHORUS_ERR_SYSTEM, "cannot create %s: %s", tmp, strerror(errno));
    if (chorus__write_all(fd, h, sizeof(h)) || chorus__write_all(fd, data, len) || fsync(fd)) {
        int err = errno;
        close(fd);
        unlink(tmp);
        return chorus__fail(e, CHORUS_ERR_SYSTEM, "cannot write checkpoint %s: %s", tmp,
                            strerror(err));
    }
    if (close(fd) || rename(tmp, path) || fsync_dir(dir)) {
        int err = errno;
        unlink(tmp);
        return chorus__fail(e, CHORUS_ERR_SYSTEM, "cannot put checkpoint %s in place: %s", path,
                            strerror(err));
    }
    /* The new file is durable: now, and only now, older ones may go. A failure to list them
     * leaves extra files behind, which is harmless. */
    size_t n;
    uint64_t *steps;
    chorus_errbuf ignored;
    if (list_steps(dir, name, &steps, &n, &ignored) == CHORUS_OK) {
        for (size_t i = (size_t)keep; i < n; i++) {
            ckpt_path(path, sizeof(path), dir, name, steps[i]);
            unlink(path);
        }
        free(steps);
    }
    DIR *d = opendir(dir);
    struct dirent *de;
    while (d && (de = readdir(d))) {
        long pid = match_tmp(de->d_name, name);
        if (pid && pid != (long)getpid() && kill((pid_t)pid, 0) && errno == ESRCH) {
            snprintf(tmp, sizeof(tmp), "%s/%s", dir, de->d_name);
            unlink(tmp); /* left by a writer that died mid-write */
        }
    }
    if (d) closedir(d);
    return CHORUS_OK;
}

/* Appends to a NUL-terminated buffer, truncating when full. */
static void append(char *buf, size_t cap, const char *fmt, ...) CHORUS__PRINTF(3, 4);
static void append(char *buf, size_t cap, const char *fmt, ...)
{
    size_t o = strlen(buf);
    if (o + 1 >= cap) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf + o, cap - o, fmt, ap);
    va_end(ap);
}

static int read_file(const char *path, unsigned char **buf, size_t *len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    struct stat st;
    if (fstat(fd, &st) || st.st_size < 0 || (uint64_t)st.st_size > CHORUS_CKPT_MAX_PAYLOAD) {
        close(fd);
        return -1;
    }
    size_t n = (size_t)st.st_size, got = 0;
    unsigned char *b = malloc(n ? n : 1);
    while (b && got < n) {
        ssize_t r = read(fd, b + got, n - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        got += (size_t)r;
    }
    close(fd);
    if (!b) return -1;
    *buf = b;
    *len = got;
    return 0;
}

/* chorus_checkpoint_load and chorus_checkpoint_load_before: the newest valid checkpoint,
 * of a step before `below` when bounded. */
static chorus_result load_newest(const char *dir, const char *name, int bounded, uint64_t below,
                                 uint64_t *step, void **data, size_t *len)
{
    chorus_errbuf *e = chorus__init_errbuf();
    e->msg[0] = 0;
    if (!dir || !valid_name(name) || !step || !data || !len)
        return chorus__fail(e, CHORUS_ERR_INVALID_ARG, "checkpoint read: bad arguments");
    size_t n;
    uint64_t *steps;
    CHORUS_CHECK(list_steps(dir, name, &steps, &n, e));
    char skipped[sizeof(e->msg)] = "";
    for (size_t i = 0; i < n; i++) {
        if (bounded && steps[i] >= below) continue;
        char path[4200], why[200];
        ckpt_path(path, sizeof(path), dir, name, steps[i]);
        unsigned char *buf = NULL;
        size_t blen = 0;
        uint64_t s;
        const unsigned char *payload;
        size_t plen;
        if (read_file(path, &buf, &blen)) {
            snprintf(why, sizeof(why), "cannot read it: %s", strerror(errno));
        } else if (chorus__ckpt_parse(buf, blen, &s, &payload, &plen, why, sizeof(why)) ==
                   CHORUS_OK) {
            if (s != steps[i]) {
                snprintf(why, sizeof(why), "holds step %llu but is named for step %llu",
                         (unsigned long long)s, (unsigned long long)steps[i]);
            } else {
                memmove(buf, payload, plen);
                *data = buf;
                *len = plen;
                *step = s;
                free(steps);
                snprintf(e->msg, sizeof(e->msg), "%s", skipped);
                return CHORUS_OK;
            }
        }
        free(buf);
        CHORUS_WARN(CHORUS_LOG_ALL, "checkpoint %s is damaged (%s); trying an older one", path,
                    why);
        append(skipped, sizeof(skipped), "%sskipped damaged checkpoint %s: %s",
               skipped[0] ? "; " : "", path, why);
    }
    free(steps);
    char msg[sizeof(e->msg)] = "";
    append(msg, sizeof(msg), "no valid checkpoint '%s' in %s", name, dir);
    if (bounded) append(msg, sizeof(msg), " of a step before %llu", (unsigned long long)below);
    if (skipped[0]) append(msg, sizeof(msg), " (%s)", skipped);
    return chorus__fail(e, CHORUS_ERR_INVALID_ARG, "%s", msg);
}

chorus_result chorus_checkpoint_load(const char *dir, const char *name, uint64_t *step, void **data,
                                     size_t *len)
{
    return load_newest(dir, name, 0, 0, step, data, len);
}

chorus_result chorus_checkpoint_load_before(const char *dir, const char *name, uint64_t below,
                                            uint64_t *step, void **data, size_t *len)
{
    return load_newest(dir, name, 1, below, step, data, len);
}

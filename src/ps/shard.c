/*
 * shard.c - a server's shard on disk: its slices of every key with the optimizer state, saved
 * as a crash-safe checkpoint (include/chorus/checkpoint.h: temporary file, fsync, rename) named
 * ps-shard-<server>-of-<servers>-at-<step>, and loaded back on resume. A worker asks every
 * server to save (chorus_ps_save) or load (chorus_ps_load) a given step and waits for each
 * one's answer, so that a resume takes the shards of exactly the step the trainer's own
 * checkpoint is of, even when a crash came between the two saves. Each server keeps the
 * shards of the last two steps it saved.
 *
 * Payload (little-endian, as the host): "CHPSSHRD", u32 version, u32 servers, u32 keys held,
 * then per key held: i64 key, u64 offset, u64 count, u64 optimizer steps, u32 moments (0, 1 or
 * 2), then count floats of parameters and count floats per moment.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "chorus/checkpoint.h"
#include "ps/ps_int.h"

#define SHARD_MAGIC   "CHPSSHRD"
#define SHARD_VERSION 1u

static void shard_name(const chorus_ps *ps, uint64_t step, char *out, size_t len)
{
    snprintf(out, len, "ps-shard-%d-of-%d-at-%llu", ps->server, ps->nservers,
             (unsigned long long)step);
}

/* Deletes the shard of step (saved by this server earlier; ignored when gone). */
static void drop_shard(const chorus_ps *ps, const char *dir, uint64_t step)
{
    char name[96], path[4200];
    shard_name(ps, step, name, sizeof(name));
    if (chorus_checkpoint_path(dir, name, step, path, sizeof(path)) == CHORUS_OK) unlink(path);
}

static int moments(const ps_key *k)
{
    return (k->m != NULL) + (k->v != NULL);
}

/* Server: writes its shard as checkpoint `step` in dir. */
chorus_result chorus__ps_save_shard(chorus_ps *ps, const char *dir, uint64_t step)
{
    size_t len = 8 + 3 * 4;
    uint32_t held = 0;
    for (int i = 0; i < ps->nkeys; i++)
        if (ps->keys[i].mine) {
            held++;
            len += 8 * 4 + 4 +
                   ps->keys[i].mcount * sizeof(float) * (size_t)(1 + moments(&ps->keys[i]));
        }
    unsigned char *buf = malloc(len), *p = buf;
    if (!buf) return chorus__fail(&ps->err, CHORUS_ERR_NOMEM, "saving the shard: out of memory");
#define PUT(v)                                                                                     \
    do {                                                                                           \
        memcpy(p, &(v), sizeof(v));                                                                \
        p += sizeof(v);                                                                            \
    } while (0)
    memcpy(p, SHARD_MAGIC, 8);
    p += 8;
    uint32_t ver = SHARD_VERSION, ns = (uint32_t)ps->nservers;
    PUT(ver);
    PUT(ns);
    PUT(held);
    for (int i = 0; i < ps->nkeys; i++) {
        const ps_key *k = &ps->keys[i];
        if (!k->mine) continue;
        int64_t key = k->key;
        uint64_t off = k->moff, n = k->mcount, t = k->t;
        uint32_t mo = (uint32_t)moments(k);
        PUT(key);
        PUT(off);
        PUT(n);
        PUT(t);
        PUT(mo);
        memcpy(p, k->param, n * sizeof(float));
        p += n * sizeof(float);
        if (k->m) memcpy(p, k->m, n * sizeof(float)), p += n * sizeof(float);
        if (k->v) memcpy(p, k->v, n * sizeof(float)), p += n * sizeof(float);
    }
#undef PUT
    char name[96];
    shard_name(ps, step, name, sizeof(name));
    chorus_result r = chorus_checkpoint_save(dir, name, step, buf, len, 1);
    free(buf);
    if (r != CHORUS_OK)
        return chorus__fail(&ps->err, r, "server %d: saving its shard in %s: %s", ps->rank, dir,
                            chorus_last_error(NULL));
    CHORUS_INFO(CHORUS_LOG_ALL, "server %d saved its shard of step %llu in %s", ps->rank,
                (unsigned long long)step, dir);
    /* keep this step and the one before: drop the one before that */
    if (ps->saved[0] && ps->saved[0] != step) {
        if (ps->saved[1] && ps->saved[1] != step) drop_shard(ps, dir, ps->saved[1]);
        ps->saved[1] = ps->saved[0];
    }
    ps->saved[0] = step;
    return CHORUS_OK;
}

/* Reads the shard payload in buf into the keys, after checking that it fits them. */
static chorus_result read_shard(chorus_ps *ps, const unsigned char *buf, size_t len,
                                const char *what)
{
    const unsigned char *p = buf, *end = buf + len;
    uint32_t ver, ns, held;
#define GET(v)                                                                                     \
    do {                                                                                           \
        if ((size_t)(end - p) < sizeof(v)) goto torn;                                              \
        memcpy(&(v), p, sizeof(v));                                                                \
        p += sizeof(v);                                                                            \
    } while (0)
    if (len < 8 || memcmp(p, SHARD_MAGIC, 8)) goto torn;
    p += 8;
    GET(ver);
    GET(ns);
    GET(held);
    if (ver != SHARD_VERSION || ns != (uint32_t)ps->nservers) goto other;
    uint32_t mine = 0;
    for (int i = 0; i < ps->nkeys; i++) mine += (uint32_t)ps->keys[i].mine;
    if (held != mine) goto other;
    for (uint32_t j = 0; j < held; j++) {
        int64_t key;
        uint64_t off, n, t;
        uint32_t mo;
        GET(key);
        GET(off);
        GET(n);
        GET(t);
        GET(mo);
        int i = key >= 0 && key <= INT32_MAX ? chorus__ps_find(ps, (int)key) : -1;
        if (i < 0) goto other;
        ps_key *k = &ps->keys[i];
        if (!k->mine || off != k->moff || n != k->mcount || mo != (uint32_t)moments(k)) goto other;
        if ((size_t)(end - p) < n * sizeof(float) * (1 + mo)) goto torn;
        memcpy(k->param, p, n * sizeof(float));
        p += n * sizeof(float);
        if (k->m) memcpy(k->m, p, n * sizeof(float)), p += n * sizeof(float);
        if (k->v) memcpy(k->v, p, n * sizeof(float)), p += n * sizeof(float);
        k->t = t;
    }
    if (p != end) goto torn;
    return CHORUS_OK;
#undef GET
torn:
    return chorus__fail(&ps->err, CHORUS_ERR_MISMATCH, "server %d: %s is not a shard it can read",
                        ps->rank, what);
other:
    return chorus__fail(&ps->err, CHORUS_ERR_MISMATCH,
                        "server %d: %s was saved with other keys, sizes, optimizer or number of "
                        "servers than this run registers",
                        ps->rank, what);
}

/* Server: loads its shard of checkpoint `step` from dir. */
chorus_result chorus__ps_load_shard(chorus_ps *ps, const char *dir, uint64_t step)
{
    char name[96], what[4200];
    shard_name(ps, step, name, sizeof(name));
    void *buf = NULL;
    size_t len = 0;
    uint64_t s = 0;
    chorus_result r = chorus_checkpoint_load(dir, name, &s, &buf, &len);
    if (r != CHORUS_OK)
        return chorus__fail(&ps->err, r, "server %d: no shard of step %llu: %s", ps->rank,
                            (unsigned long long)step, chorus_last_error(NULL));
    if (chorus_checkpoint_path(dir, name, s, what, sizeof(what)) != CHORUS_OK)
        snprintf(what, sizeof(what), "%s in %s", name, dir);
    r = s == step ? read_shard(ps, buf, len, what)
                  : chorus__fail(&ps->err, CHORUS_ERR_MISMATCH, "server %d: %s is of step %llu",
                                 ps->rank, what, (unsigned long long)s);
    free(buf);
    if (r == CHORUS_OK)
        CHORUS_INFO(CHORUS_LOG_ALL, "server %d loaded its shard of step %llu from %s", ps->rank,
                    (unsigned long long)step, dir);
    return r;
}

/* Worker: sends request type (PS_SAVE or PS_LOAD) for step with dir to every server and
 * waits for each one's answer. */
static chorus_result ask_servers(chorus_ps *ps, int type, const char *dir, uint64_t step,
                                 const char *call)
{
    if (!ps || !dir) return CHORUS_ERR_INVALID_ARG;
    size_t dlen = strlen(dir) + 1;
    if (ps->worker < 0 || dlen > PS_MAX_DIR)
        return chorus__fail(&ps->err, CHORUS_ERR_INVALID_ARG,
                            ps->worker < 0 ? "%s: rank %d is a server; a worker asks"
                                           : "%s: rank %d: the directory name is too long",
                            call, ps->rank);
    int64_t hd[PS_HDR_WORDS] = {type, -1, (int64_t)step, 0};
    chorus_result first = CHORUS_OK;
    for (int s = 0; s < ps->nservers && first == CHORUS_OK; s++) {
        int64_t ok = -1;
        chorus_result r = chorus_send(ps->comm, hd, PS_HDR_WORDS, CHORUS_INT64, s, PS_TAG_HDR);
        if (r == CHORUS_OK) r = chorus_send(ps->comm, dir, dlen, CHORUS_UINT8, s, PS_TAG_DATA);
        if (r == CHORUS_OK) r = chorus_recv(ps->comm, &ok, 1, CHORUS_INT64, s, PS_TAG_SAVED);
        if (r != CHORUS_OK)
            first = chorus__fail(&ps->err, r, "%s: server %d: %s", call, s,
                                 chorus_last_error(ps->comm));
        else if (ok != CHORUS_OK)
            first = chorus__fail(&ps->err, (chorus_result)ok,
                                 "%s: server %d could not %s its shard of step %llu in %s (the "
                                 "server's own message says why)",
                                 call, s, type == PS_SAVE ? "save" : "load",
                                 (unsigned long long)step, dir);
    }
    return first;
}

chorus_result chorus_ps_load(chorus_ps *ps, const char *dir, uint64_t step)
{
    return ask_servers(ps, PS_LOAD, dir, step, "chorus_ps_load");
}

chorus_result chorus_ps_save(chorus_ps *ps, const char *dir, uint64_t step)
{
    return ask_servers(ps, PS_SAVE, dir, step, "chorus_ps_save");
}

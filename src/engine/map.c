/*
 * map.c - a string-keyed hash map with open addressing and linear probing, for the engine's
 * per-name tables (pending requests, response cache, coordinator). Keys are copied.
 */
#include <stdlib.h>
#include <string.h>

#include "engine/engine_int.h"

static char tomb_;
#define TOMB (&tomb_)

static uint64_t hash_str(const char *s)
{
    return chorus__hash64(s, strlen(s));
}

void chorus__map_free(eng_map *m)
{
    for (size_t i = 0; i < m->cap; i++)
        if (m->keys[i] && m->keys[i] != TOMB) free(m->keys[i]);
    free(m->keys);
    free(m->vals);
    memset(m, 0, sizeof(*m));
}

static size_t find(const eng_map *m, const char *key)
{
    size_t mask = m->cap - 1, i = (size_t)hash_str(key) & mask;
    while (m->keys[i]) {
        if (m->keys[i] != TOMB && !strcmp(m->keys[i], key)) return i;
        i = (i + 1) & mask;
    }
    return (size_t)-1;
}

void *chorus__map_get(const eng_map *m, const char *key)
{
    if (!m->cap) return NULL;
    size_t i = find(m, key);
    return i == (size_t)-1 ? NULL : m->vals[i];
}

static int grow(eng_map *m)
{
    /* sized by the live keys, so deleted entries (tombstones) do not make it grow forever */
    size_t ncap = 64;
    while ((m->live + 1) * 2 >= ncap) ncap *= 2;
    char **ok = m->keys;
    void **ov = m->vals;
    size_t ocap = m->cap;
    m->keys = calloc(ncap, sizeof(char *));
    m->vals = calloc(ncap, sizeof(void *));
    if (!m->keys || !m->vals) {
        free(m->keys);
        free(m->vals);
        m->keys = ok;
        m->vals = ov;
        return -1;
    }
    m->cap = ncap;
    m->used = m->live;
    for (size_t i = 0; i < ocap; i++) {
        if (!ok[i] || ok[i] == TOMB) continue;
        size_t j = (size_t)hash_str(ok[i]) & (ncap - 1);
        while (m->keys[j]) j = (j + 1) & (ncap - 1);
        m->keys[j] = ok[i];
        m->vals[j] = ov[i];
    }
    free(ok);
    free(ov);
    return 0;
}

int chorus__map_put(eng_map *m, const char *key, void *val)
{
    if (m->cap) {
        size_t i = find(m, key);
        if (i != (size_t)-1) {
            m->vals[i] = val;
            return 0;
        }
    }
    if ((m->used + 1) * 4 >= m->cap * 3 && grow(m) != 0) return -1;
    char *k = strdup(key);
    if (!k) return -1;
    size_t mask = m->cap - 1, i = (size_t)hash_str(key) & mask;
    while (m->keys[i] && m->keys[i] != TOMB) i = (i + 1) & mask;
    if (!m->keys[i]) m->used++;
    m->keys[i] = k;
    m->vals[i] = val;
    m->live++;
    return 0;
}

void chorus__map_del(eng_map *m, const char *key)
{
    if (!m->cap) return;
    size_t i = find(m, key);
    if (i == (size_t)-1) return;
    free(m->keys[i]);
    m->keys[i] = TOMB;
    m->vals[i] = NULL;
    m->live--;
}

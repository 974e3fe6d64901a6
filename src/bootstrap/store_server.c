/*
 * store_server.c - the rendezvous key-value store server: one thread, poll() over the
 * clients, requests parsed by wire.c. A client must say which job it belongs to (HELLO)
 * before anything else; garbage or an oversized request closes that client only.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "bootstrap/store.h"
#include "wire/sock.h"
#include "wire/wire.h"

#define MAX_CLIENTS 4096

typedef struct entry {
    char *key; /* "job\nkey" */
    char *val;
    size_t len;
} entry;

typedef struct client {
    int fd;
    char job[CHORUS_WIRE_JOB_LEN];
    int hello;
    unsigned char hbuf[CHORUS_WIRE_HDR_LEN];
    size_t hoff;
    chorus_wire_hdr h;
    unsigned char *payload;
    size_t poff;
    char *waiting; /* full key a GET waits for */
} client;

struct chorus_store_server {
    int listen_fd;
    int wake[2];
    pthread_t thread;
    entry *entries;
    size_t nentries, cap;
    client *clients;
    int nclients;
};

static entry *find(chorus_store_server *s, const char *key)
{
    for (size_t i = 0; i < s->nentries; i++)
        if (!strcmp(s->entries[i].key, key)) return &s->entries[i];
    return NULL;
}

static int put(chorus_store_server *s, const char *key, const void *val, size_t len)
{
    entry *en = find(s, key);
    char *v = malloc(len + 1);
    if (!v) return -1;
    memcpy(v, val, len);
    v[len] = 0;
    if (en) {
        free(en->val);
    } else {
        if (s->nentries == s->cap) {
            size_t nc = s->cap ? s->cap * 2 : 64;
            entry *ne = realloc(s->entries, nc * sizeof(entry));
            if (!ne) {
                free(v);
                return -1;
            }
            s->entries = ne;
            s->cap = nc;
        }
        en = &s->entries[s->nentries++];
        en->key = strdup(key);
    }
    en->val = v;
    en->len = len;
    return 0;
}

static int reply(client *c, uint32_t op, const void *val, size_t len)
{
    size_t plen;
    unsigned char *p = chorus__wire_encode_kv(op, NULL, 0, val, (uint32_t)len, &plen);
    if (!p) return -1;
    chorus_wire_hdr h = {.type = CHORUS_MSG_KV, .len = plen};
    int rc = chorus__sock_send_msg(c->fd, &h, p, chorus__now() + 5.0);
    free(p);
    return rc;
}

static void drop(chorus_store_server *s, int i, const char *why)
{
    client *c = &s->clients[i];
    if (why) CHORUS_WARN(CHORUS_LOG_BOOT, "store: dropped a client: %s", why);
    close(c->fd);
    free(c->payload);
    free(c->waiting);
    s->clients[i] = s->clients[--s->nclients];
}

/* Handles one complete request; returns -1 when the client must be dropped. */
static int handle(chorus_store_server *s, client *c, const char **why)
{
    chorus_wire_kv kv;
    if (c->h.type != CHORUS_MSG_KV || chorus__wire_decode_kv(c->payload, c->h.len, &kv)) {
        *why = "malformed request";
        return -1;
    }
    char key[CHORUS_WIRE_JOB_LEN + CHORUS_KV_KEY_MAX + 2];
    if (kv.op == CHORUS_KV_HELLO) {
        if (kv.key_len == 0 || kv.key_len >= CHORUS_WIRE_JOB_LEN) {
            *why = "bad job id";
            return -1;
        }
        memcpy(c->job, kv.key, kv.key_len);
        c->job[kv.key_len] = 0;
        c->hello = 1;
        return reply(c, CHORUS_KV_OK, NULL, 0);
    }
    if (!c->hello) {
        *why = "request before hello";
        return -1;
    }
    snprintf(key, sizeof(key), "%s\n%.*s", c->job, (int)kv.key_len, (const char *)kv.key);
    switch (kv.op) {
    case CHORUS_KV_SET:
        if (put(s, key, kv.value, kv.value_len)) return reply(c, CHORUS_KV_ERR, "no memory", 9);
        if (reply(c, CHORUS_KV_OK, NULL, 0)) return -1;
        /* wake the GETs waiting for this key */
        for (int i = 0; i < s->nclients; i++) {
            client *w = &s->clients[i];
            if (w->waiting && !strcmp(w->waiting, key)) {
                free(w->waiting);
                w->waiting = NULL;
                reply(w, CHORUS_KV_OK, kv.value, kv.value_len);
            }
        }
        return 0;
    case CHORUS_KV_GET: {
        entry *en = find(s, key);
        if (en) return reply(c, CHORUS_KV_OK, en->val, en->len);
        free(c->waiting);
        c->waiting = strdup(key);
        return 0;
    }
    case CHORUS_KV_ADD: {
        char num[32];
        if (kv.value_len >= sizeof(num)) return reply(c, CHORUS_KV_ERR, "bad number", 10);
        memcpy(num, kv.value, kv.value_len);
        num[kv.value_len] = 0;
        entry *en = find(s, key);
        long v = (en ? strtol(en->val, NULL, 10) : 0) + strtol(num, NULL, 10);
        snprintf(num, sizeof(num), "%ld", v);
        put(s, key, num, strlen(num));
        return reply(c, CHORUS_KV_OK, num, strlen(num));
    }
    case CHORUS_KV_DEL: {
        entry *en = find(s, key);
        if (en) {
            free(en->key);
            free(en->val);
            *en = s->entries[--s->nentries];
        }
        return reply(c, CHORUS_KV_OK, NULL, 0);
    }
    default: *why = "unknown operation"; return -1;
    }
}

/* Reads what is available from client i. Returns -1 to drop it. */
static int read_client(chorus_store_server *s, int i, const char **why)
{
    client *c = &s->clients[i];
    for (;;) {
        ssize_t r;
        if (c->hoff < CHORUS_WIRE_HDR_LEN)
            r = recv(c->fd, c->hbuf + c->hoff, CHORUS_WIRE_HDR_LEN - c->hoff, MSG_DONTWAIT);
        else
            r = recv(c->fd, c->payload + c->poff, c->h.len - c->poff, MSG_DONTWAIT);
        if (r == 0) {
            *why = NULL; /* normal close */
            return -1;
        }
        if (r < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
            if (errno == EINTR) continue;
            *why = "read error";
            return -1;
        }
        if (c->hoff < CHORUS_WIRE_HDR_LEN) {
            c->hoff += (size_t)r;
            if (c->hoff < CHORUS_WIRE_HDR_LEN) continue;
            static char msg[200];
            if (chorus__wire_decode_hdr(c->hbuf, 12 + CHORUS_KV_KEY_MAX + CHORUS_KV_VALUE_MAX,
                                        &c->h, msg, sizeof(msg)) != CHORUS_OK) {
                *why = msg;
                return -1;
            }
            c->payload = malloc(c->h.len ? c->h.len : 1);
            c->poff = 0;
            if (!c->payload) {
                *why = "out of memory";
                return -1;
            }
        } else {
            c->poff += (size_t)r;
        }
        if (c->hoff == CHORUS_WIRE_HDR_LEN && c->poff == c->h.len) {
            int rc = handle(s, c, why);
            free(c->payload);
            c->payload = NULL;
            c->hoff = 0;
            if (rc) return -1;
        }
    }
}

static void *serve(void *arg)
{
    chorus_store_server *s = arg;
    struct pollfd *pfd = calloc(MAX_CLIENTS + 2, sizeof(*pfd));
    if (!pfd) return NULL;
    for (;;) {
        pfd[0] = (struct pollfd){.fd = s->wake[0], .events = POLLIN};
        pfd[1] = (struct pollfd){.fd = s->listen_fd, .events = POLLIN};
        int n = s->nclients;
        for (int i = 0; i < n; i++) pfd[2 + i] = (struct pollfd){.fd = s->clients[i].fd, .events = POLLIN};
        if (poll(pfd, (nfds_t)(n + 2), -1) < 0 && errno != EINTR) break;
        if (pfd[0].revents) break;
        for (int i = n - 1; i >= 0; i--) {
            if (!pfd[2 + i].revents) continue;
            const char *why = NULL;
            if (read_client(s, i, &why)) drop(s, i, why);
        }
        if (pfd[1].revents & POLLIN) {
            int fd = accept4(s->listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
            if (fd >= 0) {
                if (s->nclients >= MAX_CLIENTS) {
                    close(fd);
                } else {
                    s->clients[s->nclients++] = (client){.fd = fd};
                }
            }
        }
    }
    free(pfd);
    return NULL;
}

chorus_result chorus__store_server_start(const char *ip, int port, chorus_store_server **out,
                                         int *port_out, chorus_errbuf *e)
{
    chorus_store_server *s = calloc(1, sizeof(*s));
    if (!s || !(s->clients = calloc(MAX_CLIENTS, sizeof(client)))) {
        free(s);
        return chorus__fail(e, CHORUS_ERR_NOMEM, "out of memory");
    }
    chorus_result r = chorus__sock_listen(ip, port, 256, &s->listen_fd, port_out, e);
    if (r != CHORUS_OK) {
        free(s->clients);
        free(s);
        return r;
    }
    if (pipe2(s->wake, O_CLOEXEC) || pthread_create(&s->thread, NULL, serve, s)) {
        close(s->listen_fd);
        free(s->clients);
        free(s);
        return chorus__fail(e, CHORUS_ERR_SYSTEM, "cannot start the store thread");
    }
    *out = s;
    return CHORUS_OK;
}

void chorus__store_server_stop(chorus_store_server *s)
{
    if (!s) return;
    if (write(s->wake[1], "x", 1) < 0) { /* the thread polls this pipe */
    }
    pthread_join(s->thread, NULL);
    for (int i = s->nclients - 1; i >= 0; i--) drop(s, i, NULL);
    for (size_t i = 0; i < s->nentries; i++) {
        free(s->entries[i].key);
        free(s->entries[i].val);
    }
    free(s->entries);
    free(s->clients);
    close(s->listen_fd);
    close(s->wake[0]);
    close(s->wake[1]);
    free(s);
}

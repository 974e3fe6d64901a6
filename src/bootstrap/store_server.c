/*
 * store_server.c - the rendezvous key-value store server: one thread serving the clients from
 * an event loop (base/loop.h), requests parsed by wire.c. In a secured job a client must first
 * prove that it holds the job secret (auth.h) - until then at most a handshake-sized message is
 * read from it - and then say which job it belongs to (HELLO). Garbage, a failed handshake, an
 * oversized request or a client that does not authenticate within AUTH_WINDOW_S closes that
 * client only, with a WARN line; the store goes on serving the others.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/loop.h"
#include "bootstrap/store.h"
#include "wire/auth.h"
#include "wire/sock.h"
#include "wire/wire.h"

#define MAX_CLIENTS   4096
#define AUTH_WINDOW_S 10.0 /* a client must authenticate this soon after connecting */
#define MAX_REQUEST   (12 + CHORUS_KV_KEY_MAX + CHORUS_KV_VALUE_MAX)

typedef struct entry {
    char *key; /* "job\nkey" */
    char *val;
    size_t len;
} entry;

typedef struct client {
    int fd;
    chorus_store_server *server; /* the server it is a client of */
    char from[64];               /* "ip:port" for log lines */
    double since;                /* when it connected */
    chorus_auth_state auth;
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
    int threaded;
    pthread_t thread;
    chorus_auth_key key;
    chorus_loop *loop; /* watches the wake pipe, the listening socket and the clients */
    int stopping;      /* the wake pipe was written: the server stops */
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

static void on_client(chorus_loop *l, int fd, int revents, void *arg);

static void drop(chorus_store_server *s, int i, const char *why)
{
    client *c = &s->clients[i];
    if (why) CHORUS_WARN(CHORUS_LOG_BOOT, "store: dropped client %s: %s", c->from, why);
    chorus__loop_unwatch(s->loop, c->fd);
    close(c->fd);
    free(c->payload);
    free(c->waiting);
    s->clients[i] = s->clients[--s->nclients];
    /* the client moved into slot i is watched there (what it has ready waits a round) */
    if (i < s->nclients) chorus__loop_watch(s->loop, c->fd, POLLIN, on_client, c);
}

/* Handles one complete request; returns -1 when the client must be dropped. */
static int handle_auth(chorus_store_server *s, client *c, const char **why)
{
    static _Thread_local char msg[256];
    char w[200] = "";
    chorus_result r;
    if (c->auth.stage == 0) {
        unsigned char out[CHORUS_AUTH_CHALLENGE_LEN];
        if (c->h.type != CHORUS_MSG_AUTH_HELLO) {
            snprintf(msg, sizeof(msg),
                     "sent message type %u before authenticating (no "
                     "CHORUS_SECRET on that side?)",
                     c->h.type);
            *why = msg;
            return -1;
        }
        r = chorus__auth_server_on_hello(&s->key, &c->auth, c->payload, c->h.len, out, w,
                                         sizeof(w));
        if (r == CHORUS_OK) {
            chorus_wire_hdr h = {.type = CHORUS_MSG_AUTH_CHALLENGE, .len = sizeof(out)};
            if (chorus__sock_send_msg(c->fd, &h, out, chorus__now() + 5.0) == 0) return 0;
            snprintf(w, sizeof(w), "could not send the challenge");
        }
    } else {
        if (c->h.type != CHORUS_MSG_AUTH_PROOF)
            snprintf(w, sizeof(w), "message type %u instead of the authentication proof",
                     c->h.type);
        else if (chorus__auth_server_on_proof(&s->key, &c->auth, c->payload, c->h.len, w,
                                              sizeof(w)) == CHORUS_OK)
            return 0;
    }
    snprintf(msg, sizeof(msg), "refused: %s", w);
    *why = msg;
    return -1;
}

static int handle(chorus_store_server *s, client *c, const char **why)
{
    if (c->auth.stage < 2) return handle_auth(s, c, why);
    chorus_wire_kv kv;
    if (c->h.type != CHORUS_MSG_KV || chorus__wire_decode_kv(c->payload, c->h.len, &kv)) {
        *why = c->h.type == CHORUS_MSG_AUTH_HELLO && !s->key.set
                   ? "it wants to authenticate, but CHORUS_SECRET is not set for this store"
                   : "malformed request";
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
    case CHORUS_KV_CHECK: {
        entry *en = find(s, key);
        return en ? reply(c, CHORUS_KV_OK, en->val, en->len) : reply(c, CHORUS_KV_ERR, "absent", 6);
    }
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
            static _Thread_local char msg[200];
            /* Before the handshake is done only a handshake message may be read. */
            uint64_t max = c->auth.stage < 2 ? CHORUS_AUTH_MAX_MSG : MAX_REQUEST;
            if (chorus__wire_decode_hdr(c->hbuf, max, &c->h, msg, sizeof(msg)) != CHORUS_OK) {
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

static void add_client(chorus_store_server *s, int fd, const struct sockaddr_in *sa)
{
    if (s->nclients >= MAX_CLIENTS) {
        CHORUS_WARN(CHORUS_LOG_BOOT, "store: too many clients (%d); refusing one", MAX_CLIENTS);
        close(fd);
        return;
    }
    client *c = &s->clients[s->nclients];
    if (chorus__loop_watch(s->loop, fd, POLLIN, on_client, c)) {
        CHORUS_WARN(CHORUS_LOG_BOOT, "store: out of memory; refusing a client");
        close(fd);
        return;
    }
    s->nclients++;
    *c = (client){.fd = fd, .server = s, .since = chorus__now()};
    c->auth.stage = s->key.set ? 0 : 2;
    if (sa) {
        char ip[INET_ADDRSTRLEN] = "?";
        inet_ntop(AF_INET, &sa->sin_addr, ip, sizeof(ip));
        snprintf(c->from, sizeof(c->from), "%s:%d", ip, ntohs(sa->sin_port));
    } else {
        snprintf(c->from, sizeof(c->from), "fd %d", fd);
    }
}

/* A client has a request (or part of one), or closed. */
static void on_client(chorus_loop *l, int fd, int revents, void *arg)
{
    (void)l, (void)fd, (void)revents;
    client *c = arg; /* watched with the slot it is in (drop moves clients) */
    chorus_store_server *s = c->server;
    if (s->stopping) return;
    const char *why = NULL;
    int i = (int)(c - s->clients);
    if (read_client(s, i, &why)) drop(s, i, why);
}

/* A connection waits on the listening socket. */
static void on_listen(chorus_loop *l, int fd, int revents, void *arg)
{
    (void)l;
    chorus_store_server *s = arg;
    if (s->stopping || !(revents & POLLIN)) return;
    struct sockaddr_in sa;
    socklen_t sl = sizeof(sa);
    int cfd = accept4(fd, (struct sockaddr *)&sa, &sl, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (cfd >= 0) add_client(s, cfd, &sa);
}

/* The wake pipe was written: the server stops. */
static void on_wake(chorus_loop *l, int fd, int revents, void *arg)
{
    (void)l, (void)fd, (void)revents;
    chorus_store_server *s = arg;
    s->stopping = 1;
}

/* One round of the loop over the wake pipe, the listening socket and the clients. Returns -1
 * when the server must stop, else the number of clients. */
static int poll_once(chorus_store_server *s, int timeout_ms)
{
    int unauth = 0;
    for (int i = 0; i < s->nclients; i++) unauth += s->clients[i].auth.stage < 2;
    if (unauth && (timeout_ms < 0 || timeout_ms > 1000)) timeout_ms = 1000;
    double deadline = timeout_ms < 0 ? INFINITY : chorus__now() + timeout_ms / 1000.0;
    if (chorus__loop_run_once(s->loop, deadline) < 0 || s->stopping) return -1;
    /* A connection that does not authenticate in time is dropped: it must not hold a slot. */
    double now = chorus__now();
    for (int i = s->nclients - 1; i >= 0; i--)
        if (s->clients[i].auth.stage < 2 && now - s->clients[i].since > AUTH_WINDOW_S)
            drop(s, i, "did not authenticate in time");
    return s->nclients;
}

static void *serve(void *arg)
{
    chorus_store_server *s = arg;
    while (poll_once(s, -1) >= 0) {
    }
    return NULL;
}

static chorus_store_server *server_alloc(void)
{
    chorus_store_server *s = calloc(1, sizeof(*s));
    if (!s) return NULL;
    s->clients = calloc(MAX_CLIENTS, sizeof(client));
    s->loop = chorus__loop_new();
    s->listen_fd = s->wake[0] = s->wake[1] = -1;
    if (!s->clients || !s->loop) {
        free(s->clients);
        chorus__loop_free(s->loop);
        free(s);
        return NULL;
    }
    return s;
}

chorus_store_server *chorus__store_server_new(const char *secret, size_t secret_len)
{
    chorus_store_server *s = server_alloc();
    if (!s) return NULL;
    chorus__auth_key_set(&s->key, secret, secret_len);
    if (pipe2(s->wake, O_CLOEXEC) || chorus__loop_watch(s->loop, s->wake[0], POLLIN, on_wake, s)) {
        chorus__store_server_stop(s);
        return NULL;
    }
    return s;
}

int chorus__store_server_add_client(chorus_store_server *s, int fd)
{
    int fl = fcntl(fd, F_GETFL);
    fcntl(fd, F_SETFL, fl | O_NONBLOCK);
    add_client(s, fd, NULL);
    return 0;
}

int chorus__store_server_poll_once(chorus_store_server *s, int timeout_ms)
{
    return poll_once(s, timeout_ms);
}

chorus_result chorus__store_server_start(const char *ip, int port, chorus_store_server **out,
                                         int *port_out, chorus_errbuf *e)
{
    chorus_store_server *s = server_alloc();
    if (!s) return chorus__fail(e, CHORUS_ERR_NOMEM, "out of memory");
    chorus__auth_key_from_env(&s->key);
    chorus_result r = chorus__sock_listen(ip, port, 256, &s->listen_fd, port_out, e);
    if (r != CHORUS_OK) {
        chorus__store_server_stop(s);
        return r;
    }
    if (pipe2(s->wake, O_CLOEXEC) || chorus__loop_watch(s->loop, s->wake[0], POLLIN, on_wake, s) ||
        chorus__loop_watch(s->loop, s->listen_fd, POLLIN, on_listen, s) ||
        chorus__thread_start(&s->thread, serve, s)) {
        chorus__store_server_stop(s);
        return chorus__fail(e, CHORUS_ERR_SYSTEM, "cannot start the store thread");
    }
    s->threaded = 1;
    *out = s;
    return CHORUS_OK;
}

void chorus__store_server_stop(chorus_store_server *s)
{
    if (!s) return;
    if (s->threaded) {
        if (write(s->wake[1], "x", 1) < 0) { /* the thread polls this pipe */
        }
        pthread_join(s->thread, NULL);
    }
    for (int i = s->nclients - 1; i >= 0; i--) drop(s, i, NULL);
    for (size_t i = 0; i < s->nentries; i++) {
        free(s->entries[i].key);
        free(s->entries[i].val);
    }
    free(s->entries);
    free(s->clients);
    chorus__loop_free(s->loop);
    if (s->listen_fd >= 0) close(s->listen_fd);
    if (s->wake[0] >= 0) close(s->wake[0]);
    if (s->wake[1] >= 0) close(s->wake[1]);
    free(s);
}

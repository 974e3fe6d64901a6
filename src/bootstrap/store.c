/* store.c - client of the rendezvous key-value store. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bootstrap/store.h"
#include "wire/auth.h"
#include "wire/sock.h"
#include "wire/wire.h"

struct chorus_store {
    int fd;
    int authed; /* the connection went through the secret handshake */
    char addr[128];
};

/* One request and its reply. For CHECK, *absent (when given) is set when the key is missing. */
/* Seconds a new connection waits for the store's first reply (see chorus__store_connect). */
#define STORE_FIRST_REPLY_S 10.0

static chorus_result request_ex(chorus_store *s, uint32_t op, const char *key, const void *val,
                                size_t vlen, double deadline, char **out, size_t *out_len,
                                int *absent, chorus_errbuf *e)
{
    size_t plen;
    unsigned char *p =
        chorus__wire_encode_kv(op, key, (uint32_t)strlen(key), val, (uint32_t)vlen, &plen);
    if (!p) return chorus__fail(e, CHORUS_ERR_INVALID_ARG, "store key or value too long");
    chorus_wire_hdr h = {.type = CHORUS_MSG_KV, .len = plen};
    int rc = chorus__sock_send_msg(s->fd, &h, p, deadline);
    free(p);
    unsigned char *reply = NULL;
    char why[200] = "";
    if (rc == 0)
        rc = chorus__sock_recv_msg(s->fd, &h, &reply, 12 + CHORUS_KV_KEY_MAX + CHORUS_KV_VALUE_MAX,
                                   deadline, why, sizeof(why));
    else
        snprintf(why, sizeof(why), "%s", chorus__sock_errstr(rc));
    if (rc && op == CHORUS_KV_HELLO && rc == -3 && s->authed)
        return chorus__fail(e, CHORUS_ERR_AUTH,
                            "rendezvous store at %s closed the connection after our "
                            "authentication proof: it does not accept our CHORUS_SECRET",
                            s->addr);
    if (rc && op == CHORUS_KV_HELLO && rc == -3)
        return chorus__fail(e, CHORUS_ERR_AUTH,
                            "rendezvous store at %s closed the connection at once: it probably "
                            "requires authentication and CHORUS_SECRET is not set here",
                            s->addr);
    if (rc) {
        return chorus__fail(e, rc == -2 ? CHORUS_ERR_TIMEOUT : CHORUS_ERR_PEER_LOST,
                            "rendezvous store at %s: %s while waiting for '%s'", s->addr, why, key);
    }
    chorus_wire_kv kv;
    if (h.type != CHORUS_MSG_KV || chorus__wire_decode_kv(reply, h.len, &kv) != CHORUS_OK) {
        free(reply);
        return chorus__fail(e, CHORUS_ERR_PROTOCOL, "rendezvous store at %s sent a bad reply",
                            s->addr);
    }
    if (kv.op != CHORUS_KV_OK && absent && kv.value_len == 6 && !memcmp(kv.value, "absent", 6)) {
        *absent = 1;
        free(reply);
        return CHORUS_OK;
    }
    if (kv.op != CHORUS_KV_OK) {
        chorus_result r = chorus__fail(e, CHORUS_ERR_PROTOCOL, "rendezvous store at %s: %.*s",
                                       s->addr, (int)kv.value_len, (const char *)kv.value);
        free(reply);
        return r;
    }
    if (out) {
        *out = malloc(kv.value_len + 1);
        if (!*out) {
            free(reply);
            return chorus__fail(e, CHORUS_ERR_NOMEM, "out of memory");
        }
        memcpy(*out, kv.value, kv.value_len);
        (*out)[kv.value_len] = 0;
        if (out_len) *out_len = kv.value_len;
    }
    free(reply);
    return CHORUS_OK;
}

static chorus_result request(chorus_store *s, uint32_t op, const char *key, const void *val,
                             size_t vlen, double deadline, char **out, size_t *out_len,
                             chorus_errbuf *e)
{
    return request_ex(s, op, key, val, vlen, deadline, out, out_len, NULL, e);
}

chorus_result chorus__store_connect(const char *addr, const char *job, double deadline,
                                    chorus_store **out, chorus_errbuf *e)
{
    chorus_store *s = calloc(1, sizeof(*s));
    if (!s) return chorus__fail(e, CHORUS_ERR_NOMEM, "out of memory");
    snprintf(s->addr, sizeof(s->addr), "%s", addr);
    chorus_result r = chorus__sock_connect(addr, deadline, &s->fd, e);
    if (r != CHORUS_OK) {
        free(s);
        return r;
    }
    chorus_auth_key key;
    chorus__auth_key_from_env(&key);
    char what[200];
    snprintf(what, sizeof(what), "rendezvous store at %s", addr);
    /* A Chorus store answers a new connection at once; a program that is not one may accept
     * it and never answer: it gets STORE_FIRST_REPLY_S, not the whole timeout. */
    double first = chorus__now() + STORE_FIRST_REPLY_S;
    if (first > deadline) first = deadline;
    r = chorus__auth_connect(s->fd, &key, first, what, e);
    s->authed = key.set;
    if (r == CHORUS_OK) r = request(s, CHORUS_KV_HELLO, job, NULL, 0, first, NULL, NULL, e);
    const char *magic = r != CHORUS_OK && e ? strstr(e->msg, "bad magic 0x") : NULL;
    unsigned first_bytes = 0;
    char text[8] = "";
    if (magic && sscanf(magic, "bad magic 0x%x (\"%4[^\"]\")", &first_bytes, text) == 2)
        r = chorus__fail(e, CHORUS_ERR_PROTOCOL,
                         "%s is not a Chorus store: it answered \"%s\" (0x%08x), another "
                         "protocol; another program listens on that port (under torchrun, whose "
                         "own store holds MASTER_PORT, Chorus's is at MASTER_PORT+1)",
                         what, text, first_bytes);
    else if (r == CHORUS_ERR_TIMEOUT && first < deadline)
        r = chorus__fail(e, CHORUS_ERR_PROTOCOL,
                         "%s accepted the connection but sent no reply in %.0f s: it is not a "
                         "Chorus store (another program listens on that port; under torchrun, "
                         "whose own store holds MASTER_PORT, Chorus's is at MASTER_PORT+1)",
                         what, STORE_FIRST_REPLY_S);
    if (r != CHORUS_OK) {
        close(s->fd);
        free(s);
        return r;
    }
    *out = s;
    return CHORUS_OK;
}

chorus_result chorus__store_set(chorus_store *s, const char *key, const void *val, size_t len,
                                chorus_errbuf *e)
{
    return request(s, CHORUS_KV_SET, key, val, len, chorus__deadline(), NULL, NULL, e);
}

chorus_result chorus__store_get(chorus_store *s, const char *key, char **val, size_t *len,
                                double deadline, chorus_errbuf *e)
{
    return request(s, CHORUS_KV_GET, key, NULL, 0, deadline, val, len, e);
}

chorus_result chorus__store_check(chorus_store *s, const char *key, char **val, size_t *len,
                                  int *found, chorus_errbuf *e)
{
    int absent = 0;
    *found = 0;
    CHORUS_CHECK(
        request_ex(s, CHORUS_KV_CHECK, key, NULL, 0, chorus__deadline(), val, len, &absent, e));
    *found = !absent;
    return CHORUS_OK;
}

chorus_result chorus__store_add(chorus_store *s, const char *key, long delta, long *out,
                                chorus_errbuf *e)
{
    char num[32], *res = NULL;
    snprintf(num, sizeof(num), "%ld", delta);
    CHORUS_CHECK(
        request(s, CHORUS_KV_ADD, key, num, strlen(num), chorus__deadline(), &res, NULL, e));
    if (out) *out = strtol(res, NULL, 10);
    free(res);
    return CHORUS_OK;
}

int chorus__store_local_ip(chorus_store *s, char *ip, size_t len)
{
    return chorus__sock_local_ip(s->fd, ip, len);
}

void chorus__store_close(chorus_store *s)
{
    if (!s) return;
    close(s->fd);
    free(s);
}

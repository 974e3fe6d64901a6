/*
 * auth.c - the challenge-response that proves both ends of a connection hold the job's
 * secret (protocol in auth.h), with libsodium's HMAC-SHA256 and random bytes.
 */
#include <pthread.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wire/auth.h"
#include "wire/sock.h"
#include "wire/wire.h"

static const char LABEL_SERVER[] = "chorus-auth-1 server";
static const char LABEL_CLIENT[] = "chorus-auth-1 client";

static pthread_once_t sodium_once = PTHREAD_ONCE_INIT;
static int sodium_ok;

static void sodium_setup(void)
{
    sodium_ok = sodium_init() >= 0;
}

static void ensure_sodium(void)
{
    pthread_once(&sodium_once, sodium_setup);
}

void chorus__auth_random(void *buf, size_t n)
{
    ensure_sodium();
    randombytes_buf(buf, n);
}

void chorus__auth_key_set(chorus_auth_key *k, const void *secret, size_t len)
{
    ensure_sodium();
    memset(k, 0, sizeof(*k));
    if (!secret || !len) return;
    k->set = 1;
    if (len > CHORUS_AUTH_KEY_MAX) { /* HMAC hashes long keys itself; doing it here is the same */
        crypto_hash_sha256(k->k, secret, len);
        k->len = crypto_hash_sha256_BYTES;
    } else {
        memcpy(k->k, secret, len);
        k->len = len;
    }
}

void chorus__auth_key_from_env(chorus_auth_key *k)
{
    static int said_unset, said_short;
    const char *s = chorus__config()->secret;
    size_t len = s ? strlen(s) : 0;
    chorus__auth_key_set(k, s, len);
    if (!len && !__atomic_exchange_n(&said_unset, 1, __ATOMIC_RELAXED))
        CHORUS_INFO(CHORUS_LOG_BOOT, "CHORUS_SECRET is not set: this job is unauthenticated (any "
                                     "process that can reach its ports can join; chorus-run sets "
                                     "a secret, other launchers need CHORUS_SECRET exported)");
    if (len && len < 16 && !__atomic_exchange_n(&said_short, 1, __ATOMIC_RELAXED))
        CHORUS_WARN(CHORUS_LOG_BOOT,
                    "CHORUS_SECRET is only %zu bytes; use at least 16 random "
                    "bytes (e.g. 64 hex digits from /dev/urandom)",
                    len);
}

static void mac(const chorus_auth_key *k, const char *label, const unsigned char *a,
                const unsigned char *b, unsigned char out[CHORUS_AUTH_MAC])
{
    crypto_auth_hmacsha256_state st;
    crypto_auth_hmacsha256_init(&st, k->k, k->len);
    crypto_auth_hmacsha256_update(&st, (const unsigned char *)label, strlen(label));
    crypto_auth_hmacsha256_update(&st, a, CHORUS_AUTH_NONCE);
    crypto_auth_hmacsha256_update(&st, b, CHORUS_AUTH_NONCE);
    crypto_auth_hmacsha256_final(&st, out);
    sodium_memzero(&st, sizeof(st));
}

/* ---- pure steps ------------------------------------------------------------------------- */

void chorus__auth_client_hello(chorus_auth_state *st, unsigned char out[CHORUS_AUTH_HELLO_LEN])
{
    memset(st, 0, sizeof(*st));
    chorus__auth_random(st->nc, sizeof(st->nc));
    out[0] = CHORUS_AUTH_VERSION;
    out[1] = out[2] = out[3] = 0;
    memcpy(out + 4, st->nc, CHORUS_AUTH_NONCE);
}

chorus_result chorus__auth_client_on_challenge(const chorus_auth_key *k, chorus_auth_state *st,
                                               const unsigned char *in, size_t len,
                                               unsigned char proof[CHORUS_AUTH_PROOF_LEN],
                                               char *why, size_t why_len)
{
    if (len != CHORUS_AUTH_CHALLENGE_LEN) {
        snprintf(why, why_len, "malformed authentication challenge (%zu bytes)", len);
        return CHORUS_ERR_PROTOCOL;
    }
    memcpy(st->ns, in, CHORUS_AUTH_NONCE);
    unsigned char want[CHORUS_AUTH_MAC];
    mac(k, LABEL_SERVER, st->nc, st->ns, want);
    if (crypto_verify_32(want, in + CHORUS_AUTH_NONCE) != 0) {
        snprintf(why, why_len,
                 "the peer could not prove that it holds the job secret (a "
                 "different CHORUS_SECRET, or not part of this job)");
        return CHORUS_ERR_AUTH;
    }
    mac(k, LABEL_CLIENT, st->ns, st->nc, proof);
    st->stage = 2;
    return CHORUS_OK;
}

chorus_result chorus__auth_server_on_hello(const chorus_auth_key *k, chorus_auth_state *st,
                                           const unsigned char *in, size_t len,
                                           unsigned char out[CHORUS_AUTH_CHALLENGE_LEN], char *why,
                                           size_t why_len)
{
    if (st->stage != 0) {
        snprintf(why, why_len, "authentication hello out of order");
        return CHORUS_ERR_PROTOCOL;
    }
    if (len != CHORUS_AUTH_HELLO_LEN || in[0] != CHORUS_AUTH_VERSION || in[1] || in[2] || in[3]) {
        snprintf(why, why_len, "malformed authentication hello (%zu bytes, version %u)", len,
                 len ? in[0] : 0);
        return CHORUS_ERR_PROTOCOL;
    }
    memcpy(st->nc, in + 4, CHORUS_AUTH_NONCE);
    chorus__auth_random(st->ns, sizeof(st->ns));
    memcpy(out, st->ns, CHORUS_AUTH_NONCE);
    mac(k, LABEL_SERVER, st->nc, st->ns, out + CHORUS_AUTH_NONCE);
    st->stage = 1;
    return CHORUS_OK;
}

chorus_result chorus__auth_server_on_proof(const chorus_auth_key *k, chorus_auth_state *st,
                                           const unsigned char *in, size_t len, char *why,
                                           size_t why_len)
{
    if (st->stage != 1) {
        snprintf(why, why_len, "authentication proof out of order");
        return CHORUS_ERR_PROTOCOL;
    }
    if (len != CHORUS_AUTH_PROOF_LEN) {
        snprintf(why, why_len, "malformed authentication proof (%zu bytes)", len);
        return CHORUS_ERR_PROTOCOL;
    }
    unsigned char want[CHORUS_AUTH_MAC];
    mac(k, LABEL_CLIENT, st->ns, st->nc, want);
    if (crypto_verify_32(want, in) != 0) {
        snprintf(why, why_len,
                 "wrong authentication proof (wrong CHORUS_SECRET, or a replayed "
                 "handshake)");
        return CHORUS_ERR_AUTH;
    }
    st->stage = 2;
    return CHORUS_OK;
}

/* ---- blocking wrappers ------------------------------------------------------------------ */

chorus_result chorus__auth_connect(int fd, const chorus_auth_key *k, double deadline,
                                   const char *what, chorus_errbuf *e)
{
    if (!k->set) return CHORUS_OK;
    chorus_auth_state st;
    unsigned char hello[CHORUS_AUTH_HELLO_LEN], proof[CHORUS_AUTH_PROOF_LEN];
    chorus__auth_client_hello(&st, hello);
    chorus_wire_hdr h = {.type = CHORUS_MSG_AUTH_HELLO, .len = sizeof(hello)};
    int rc = chorus__sock_send_msg(fd, &h, hello, deadline);
    unsigned char *payload = NULL;
    char why[200] = "";
    if (rc == 0)
        rc = chorus__sock_recv_msg(fd, &h, &payload, CHORUS_AUTH_MAX_MSG, deadline, why,
                                   sizeof(why));
    else
        snprintf(why, sizeof(why), "%s", chorus__sock_errstr(rc));
    if (rc) {
        return chorus__fail(e, rc == -2 ? CHORUS_ERR_TIMEOUT : CHORUS_ERR_AUTH,
                            "%s refused authentication: %s (does it run with the same "
                            "CHORUS_SECRET? a peer without a secret closes the connection)",
                            what, why);
    }
    chorus_result r = CHORUS_OK;
    if (h.type != CHORUS_MSG_AUTH_CHALLENGE) {
        snprintf(why, sizeof(why), "it answered with message type %u instead of a challenge",
                 h.type);
        r = CHORUS_ERR_AUTH;
    } else {
        r = chorus__auth_client_on_challenge(k, &st, payload, h.len, proof, why, sizeof(why));
    }
    free(payload);
    if (r != CHORUS_OK)
        return chorus__fail(e, CHORUS_ERR_AUTH, "authentication with %s failed: %s", what, why);
    h = (chorus_wire_hdr){.type = CHORUS_MSG_AUTH_PROOF, .len = sizeof(proof)};
    rc = chorus__sock_send_msg(fd, &h, proof, deadline);
    if (rc)
        return chorus__fail(e, CHORUS_ERR_AUTH, "authentication with %s failed: %s", what,
                            chorus__sock_errstr(rc));
    return CHORUS_OK;
}

int chorus__auth_accept(int fd, const chorus_auth_key *k, double deadline, char *why,
                        size_t why_len)
{
    if (!k->set) return 0;
    chorus_auth_state st = {0};
    chorus_wire_hdr h;
    unsigned char *payload = NULL;
    char w[200] = "";
    int rc = chorus__sock_recv_msg(fd, &h, &payload, CHORUS_AUTH_MAX_MSG, deadline, w, sizeof(w));
    if (rc) {
        snprintf(why, why_len, "no authentication (%s): a client without CHORUS_SECRET?", w);
        return -1;
    }
    unsigned char out[CHORUS_AUTH_CHALLENGE_LEN];
    chorus_result r = CHORUS_ERR_AUTH;
    if (h.type != CHORUS_MSG_AUTH_HELLO)
        snprintf(w, sizeof(w),
                 "it sent message type %u before authenticating (no CHORUS_SECRET "
                 "on that side?)",
                 h.type);
    else
        r = chorus__auth_server_on_hello(k, &st, payload, h.len, out, w, sizeof(w));
    free(payload);
    payload = NULL;
    if (r != CHORUS_OK) {
        snprintf(why, why_len, "%s", w);
        return -1;
    }
    h = (chorus_wire_hdr){.type = CHORUS_MSG_AUTH_CHALLENGE, .len = sizeof(out)};
    rc = chorus__sock_send_msg(fd, &h, out, deadline);
    if (rc == 0)
        rc = chorus__sock_recv_msg(fd, &h, &payload, CHORUS_AUTH_MAX_MSG, deadline, w, sizeof(w));
    if (rc) {
        snprintf(why, why_len, "authentication cut short: %s",
                 rc == -4 ? w : chorus__sock_errstr(rc));
        free(payload);
        return -1;
    }
    if (h.type != CHORUS_MSG_AUTH_PROOF) {
        snprintf(w, sizeof(w), "message type %u instead of the authentication proof", h.type);
        r = CHORUS_ERR_AUTH;
    } else {
        r = chorus__auth_server_on_proof(k, &st, payload, h.len, w, sizeof(w));
    }
    free(payload);
    if (r != CHORUS_OK) {
        snprintf(why, why_len, "%s", w);
        return -1;
    }
    return 0;
}

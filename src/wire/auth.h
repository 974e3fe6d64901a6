/*
 * auth.h - proving that both ends of a connection hold the job's secret (CHORUS_SECRET),
 * before any other message is read. HMAC-SHA256 (libsodium) challenge-response with fresh
 * nonces from both sides, so a recorded handshake cannot be replayed:
 *
 *   client -> server  AUTH_HELLO      u32 version (1), Nc[32]
 *   server -> client  AUTH_CHALLENGE  Ns[32], HMAC(K, "chorus-auth-1 server" | Nc | Ns)
 *   client -> server  AUTH_PROOF      HMAC(K, "chorus-auth-1 client" | Ns | Nc)
 *
 * The two proofs carry different labels, so neither side can be used as an oracle for the
 * other's. This authenticates who connects; it does not encrypt or sign the traffic that
 * follows (see docs/SECURITY.md).
 *
 * The pure functions (no I/O) are what the fuzzers drive; the blocking wrappers are used by
 * the store client and the transport set-up, and the store server drives the pure ones from
 * its poll loop.
 */
#ifndef CHORUS_AUTH_H
#define CHORUS_AUTH_H

#include <stddef.h>
#include <stdint.h>

#include "base/base.h"

#define CHORUS_AUTH_VERSION       1
#define CHORUS_AUTH_NONCE         32
#define CHORUS_AUTH_MAC           32
#define CHORUS_AUTH_HELLO_LEN     (4 + CHORUS_AUTH_NONCE)
#define CHORUS_AUTH_CHALLENGE_LEN (CHORUS_AUTH_NONCE + CHORUS_AUTH_MAC)
#define CHORUS_AUTH_PROOF_LEN     CHORUS_AUTH_MAC
#define CHORUS_AUTH_MAX_MSG       CHORUS_AUTH_CHALLENGE_LEN /* longest handshake payload */
#define CHORUS_AUTH_KEY_MAX       64

typedef struct chorus_auth_key {
    int set; /* 0: the job is unauthenticated */
    size_t len;
    unsigned char
        k[CHORUS_AUTH_KEY_MAX]; /* secrets longer than 64 bytes are hashed (as HMAC does) */
} chorus_auth_key;

typedef struct chorus_auth_state {
    int stage; /* server: 0 wants AUTH_HELLO, 1 wants AUTH_PROOF, 2 done */
    unsigned char nc[CHORUS_AUTH_NONCE], ns[CHORUS_AUTH_NONCE];
} chorus_auth_state;

/* The key from CHORUS_SECRET (read each call, so tests may change it). Logs once at INFO when
 * it is unset (the job is unauthenticated) and at WARN when it is shorter than 16 bytes. */
void chorus__auth_key_from_env(chorus_auth_key *k);
/* A key from explicit bytes (len 0: unset). */
void chorus__auth_key_set(chorus_auth_key *k, const void *secret, size_t len);
/* n random bytes from libsodium's CSPRNG (/dev/urandom or getrandom). */
void chorus__auth_random(void *buf, size_t n);

/* ---- pure steps: return CHORUS_ERR_AUTH (or PROTOCOL for malformed input) with why ----- */
void chorus__auth_client_hello(chorus_auth_state *st, unsigned char out[CHORUS_AUTH_HELLO_LEN]);
chorus_result chorus__auth_client_on_challenge(const chorus_auth_key *k, chorus_auth_state *st,
                                               const unsigned char *in, size_t len,
                                               unsigned char proof[CHORUS_AUTH_PROOF_LEN],
                                               char *why, size_t why_len);
chorus_result chorus__auth_server_on_hello(const chorus_auth_key *k, chorus_auth_state *st,
                                           const unsigned char *in, size_t len,
                                           unsigned char out[CHORUS_AUTH_CHALLENGE_LEN], char *why,
                                           size_t why_len);
chorus_result chorus__auth_server_on_proof(const chorus_auth_key *k, chorus_auth_state *st,
                                           const unsigned char *in, size_t len, char *why,
                                           size_t why_len);

/* ---- blocking wrappers ------------------------------------------------------------------ */

/* Client side on a connected socket; nothing is sent when k is unset. what names the server
 * in messages ("rendezvous store at 10.0.0.1:2900"). */
chorus_result chorus__auth_connect(int fd, const chorus_auth_key *k, double deadline,
                                   const char *what, chorus_errbuf *e);
/* Server side on an accepted socket; when k is unset nothing is read. Returns 0 when the
 * client proved it holds the secret, else -1 with why (the caller closes and logs). */
int chorus__auth_accept(int fd, const chorus_auth_key *k, double deadline, char *why,
                        size_t why_len);

#endif

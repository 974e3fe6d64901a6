/*
 * fuzz_auth.c - libFuzzer target for the authentication handshake (src/wire/auth.c): the
 * server's handling of a client hello and proof, and the client's handling of a challenge,
 * all with attacker-chosen bytes. Only the job's key may make a proof pass.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "wire/auth.h"

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
    static chorus_auth_key key;
    if (!key.set) chorus__auth_key_set(&key, "fuzzing-secret-fuzzing-secret", 29);
    if (n < 2) return 0;
    size_t split = d[0] % (n - 1);
    const uint8_t *a = d + 1, *b = d + 1 + split;
    size_t alen = split, blen = n - 1 - split;
    char why[200];
    chorus_auth_state st = {0};
    unsigned char out[CHORUS_AUTH_CHALLENGE_LEN];
    if (chorus__auth_server_on_hello(&key, &st, a, alen, out, why, sizeof(why)) == CHORUS_OK) {
        if (st.stage != 1) abort();
        /* a random proof must not pass (2^-256), and the state must stay consistent */
        if (chorus__auth_server_on_proof(&key, &st, b, blen, why, sizeof(why)) == CHORUS_OK)
            abort();
    } else if (st.stage != 0) {
        abort();
    }
    chorus_auth_state cs;
    unsigned char hello[CHORUS_AUTH_HELLO_LEN], proof[CHORUS_AUTH_PROOF_LEN];
    chorus__auth_client_hello(&cs, hello);
    if (chorus__auth_client_on_challenge(&key, &cs, d, n, proof, why, sizeof(why)) == CHORUS_OK)
        abort(); /* the server's proof over a fresh nonce cannot be guessed */
    return 0;
}

/*
 * fuzz_store.c - libFuzzer target for the rendezvous store server's request handling
 * (src/bootstrap/store_server.c): the input is what a client sends on one connection, over a
 * socketpair to a server with no thread and no listening socket.
 *   first byte even: the server has no secret; the bytes after the mode byte are framed by the
 *       harness as a KV HELLO and then KV requests (each: one length byte, then that many
 *       payload bytes), so the fuzzer reaches the request handling with valid framing;
 *   first byte odd: the server requires the secret and the raw bytes are sent as they are (a
 *       stranger before authentication).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "bootstrap/store.h"
#include "wire/sock.h"
#include "wire/wire.h"

static void put_msg(int fd, const void *payload, size_t len)
{
    chorus_wire_hdr h = {.type = CHORUS_MSG_KV, .len = len};
    unsigned char hb[CHORUS_WIRE_HDR_LEN];
    chorus__wire_encode_hdr(&h, hb);
    if (write(fd, hb, sizeof(hb)) < 0 || (len && write(fd, payload, len) < 0)) return;
}

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
    if (n < 1 || n > 60000) return 0;
    int secured = d[0] & 1;
    chorus_store_server *s = secured ? chorus__store_server_new("fuzz-secret-0123456789", 22)
                                     : chorus__store_server_new(NULL, 0);
    if (!s) return 0;
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv)) abort();
    int big = 1 << 20;
    setsockopt(sv[1], SOL_SOCKET, SO_SNDBUF, &big, sizeof(big));
    setsockopt(sv[0], SOL_SOCKET, SO_RCVBUF, &big, sizeof(big));
    chorus__store_server_add_client(s, sv[0]);
    if (secured) {
        if (write(sv[1], d + 1, n - 1) < 0) abort();
    } else {
        size_t len;
        unsigned char *hello = chorus__wire_encode_kv(CHORUS_KV_HELLO, "job", 3, NULL, 0, &len);
        put_msg(sv[1], hello, len);
        free(hello);
        for (size_t i = 1; i < n;) {
            size_t l = d[i++];
            if (l > n - i) l = n - i;
            put_msg(sv[1], d + i, l);
            i += l;
        }
    }
    shutdown(sv[1], SHUT_WR);
    /* serve until the client is gone (EOF always ends it), draining the replies */
    for (int k = 0; k < 10000; k++) {
        int left = chorus__store_server_poll_once(s, 0);
        char junk[4096];
        while (recv(sv[1], junk, sizeof(junk), MSG_DONTWAIT) > 0) {
        }
        if (left <= 0) break;
    }
    close(sv[1]);
    chorus__store_server_stop(s);
    return 0;
}

/*
 * wire.h - the bytes Chorus puts on a socket. The only code that parses bytes from the
 * network lives in wire.c: fixed-size headers, explicit little-endian encoding, every length
 * checked against a bound before anyone allocates or copies.
 */
#ifndef CHORUS_WIRE_H
#define CHORUS_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "base/base.h"

#define CHORUS_WIRE_MAGIC   0x53524843u /* "CHRS" */
#define CHORUS_WIRE_VERSION 1
#define CHORUS_WIRE_HDR_LEN 48

enum chorus_wire_type {
    CHORUS_MSG_P2P = 1,   /* user send/recv: tag is the user's tag */
    CHORUS_MSG_COLL = 2,  /* part of a collective: tag is the step/segment index */
    CHORUS_MSG_ABORT = 3, /* the sender saw a failure: payload is chorus_wire_abort */
    CHORUS_MSG_HELLO = 4, /* first message on a transport connection */
    CHORUS_MSG_HELLO_ACK = 5,
    CHORUS_MSG_PING = 6, /* keep-alive on an idle connection */
    CHORUS_MSG_BYE = 7,  /* the sender finalized: its connection closing is not a failure */
    /* Authentication (auth.h), before any other message on a connection of a secured job. */
    CHORUS_MSG_AUTH_HELLO = 8,     /* client -> server: version, client nonce */
    CHORUS_MSG_AUTH_CHALLENGE = 9, /* server -> client: server nonce, server's proof */
    CHORUS_MSG_AUTH_PROOF = 10,    /* client -> server: client's proof */
    /* A slice of a striped message's payload on a connection other than a pair's first: seq is
     * the pair's stripe number (the order of striped messages on the first connection). */
    CHORUS_MSG_CHUNK = 11,
    CHORUS_MSG_KV = 16, /* key-value store request or response */
    CHORUS_MSG_TYPE_MAX = 17
};

typedef struct chorus_wire_hdr {
    uint16_t type;
    uint64_t comm_id;
    int32_t tag;
    uint32_t coll;  /* collective signature: kind | dtype << 8 | op << 16 */
    uint64_t seq;   /* collective sequence number on the communicator */
    uint64_t count; /* element count of the whole collective (for error messages) */
    uint64_t len;   /* payload bytes that follow */
} chorus_wire_hdr;

void chorus__wire_encode_hdr(const chorus_wire_hdr *h, unsigned char out[CHORUS_WIRE_HDR_LEN]);

/* Decodes and validates a header: magic, version, known type, len <= max_len. On error the
 * detail names what was wrong (to be logged with the peer). */
chorus_result chorus__wire_decode_hdr(const unsigned char in[CHORUS_WIRE_HDR_LEN], uint64_t max_len,
                                      chorus_wire_hdr *h, char *why, size_t why_len);

/* HELLO payload: who is connecting, and which of the pair's connections (lanes) this is. */
#define CHORUS_WIRE_JOB_LEN 64
typedef struct chorus_wire_hello {
    char job[CHORUS_WIRE_JOB_LEN]; /* NUL-terminated job id */
    int32_t rank;
    int32_t size;
    int32_t lane;  /* 0 .. lanes-1 */
    int32_t lanes; /* connections per pair of ranks the sender opens (CHORUS_TCP_LANES) */
    uint64_t stripe_min, stripe_max; /* collectives striped (CHORUS_TCP_STRIPE_MIN/_MAX) */
} chorus_wire_hello;
#define CHORUS_WIRE_HELLO_LEN (CHORUS_WIRE_JOB_LEN + 32)
#define CHORUS_WIRE_LANES_MAX 64
void chorus__wire_encode_hello(const chorus_wire_hello *h,
                               unsigned char out[CHORUS_WIRE_HELLO_LEN]);
chorus_result chorus__wire_decode_hello(const unsigned char *in, size_t len, chorus_wire_hello *h);

/* ABORT payload: the rank that failed (or -1) and why. */
#define CHORUS_WIRE_ABORT_MAX 300
typedef struct chorus_wire_abort {
    int32_t failed_rank; /* world rank */
    int32_t result;      /* chorus_result */
    char why[CHORUS_WIRE_ABORT_MAX - 8 + 1];
} chorus_wire_abort;
size_t chorus__wire_encode_abort(const chorus_wire_abort *a,
                                 unsigned char out[CHORUS_WIRE_ABORT_MAX]);
chorus_result chorus__wire_decode_abort(const unsigned char *in, size_t len, chorus_wire_abort *a);

/* Key-value store messages (payload of CHORUS_MSG_KV). */
enum chorus_kv_op {
    CHORUS_KV_HELLO = 1, /* key = job id */
    CHORUS_KV_SET = 2,
    CHORUS_KV_GET = 3, /* waits until the key exists */
    CHORUS_KV_ADD = 4, /* value = decimal delta; reply = new value */
    CHORUS_KV_DEL = 5,
    CHORUS_KV_OK = 6,    /* reply; value = result */
    CHORUS_KV_ERR = 7,   /* reply; value = message */
    CHORUS_KV_CHECK = 8, /* like GET but answers at once: OK + value, or ERR "absent" */
    CHORUS_KV_OP_MAX = 9
};
#define CHORUS_KV_KEY_MAX   256
#define CHORUS_KV_VALUE_MAX (1u << 20)
typedef struct chorus_wire_kv {
    uint32_t op;
    uint32_t key_len;
    uint32_t value_len;
    const unsigned char *key; /* points into the decoded buffer */
    const unsigned char *value;
} chorus_wire_kv;
/* Encodes into a malloc'ed payload; returns its size via *len or NULL on overflow/NOMEM. */
unsigned char *chorus__wire_encode_kv(uint32_t op, const void *key, uint32_t key_len,
                                      const void *value, uint32_t value_len, size_t *len);
chorus_result chorus__wire_decode_kv(const unsigned char *in, size_t len, chorus_wire_kv *kv);

/* Collective kinds carried in chorus_wire_hdr.coll (low byte). */
enum chorus_coll_kind {
    CHORUS_COLL_ALLREDUCE = 1,
    CHORUS_COLL_BROADCAST,
    CHORUS_COLL_ALLGATHER,
    CHORUS_COLL_REDUCE_SCATTER,
    CHORUS_COLL_ALLTOALL,
    CHORUS_COLL_BARRIER,
    CHORUS_COLL_SPLIT,
    CHORUS_COLL_KIND_MAX
};
static inline uint32_t chorus__coll_sig(int kind, int dtype, int op)
{
    return (uint32_t)kind | ((uint32_t)dtype << 8) | ((uint32_t)op << 16);
}
/* Human description of a data header, for mismatch messages. */
void chorus__wire_describe(const chorus_wire_hdr *h, char *out, size_t len);

/* What a rank called, as far as another rank can check it: the collective's kind, dtype, op
 * (none for broadcast), root (broadcast only), element count and sequence number on the
 * communicator (0 where unknown). */
typedef struct chorus_call_sig {
    int kind, dtype, op, root;
    uint64_t count, seq;
} chorus_call_sig;
/* The call a collective header describes (a broadcast carries its root in the op byte). */
chorus_call_sig chorus__wire_call_sig(const chorus_wire_hdr *h);
/* Says the first way rank a's call differs from rank b's, in the words of the API: "rank 1
 * called broadcast with root 1, rank 0 with root 0". Kind first, then dtype, op, root, count
 * and sequence; "" when they agree on all of those. */
void chorus__call_diff(const chorus_call_sig *a, int rank_a, const chorus_call_sig *b, int rank_b,
                       char *out, size_t len);
const char *chorus__op_name(int op);
/* The collective's name ("allreduce", ...; "?" for no kind): one table for every message. */
const char *chorus__coll_kind_name(int kind);
#endif

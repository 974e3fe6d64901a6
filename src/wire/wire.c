/*
 * wire.c - encoding and bounds-checked decoding of everything Chorus sends. Nothing else in
 * the library interprets bytes that came from a socket.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/byteorder.h"
#include "wire/wire.h"

void chorus__wire_encode_hdr(const chorus_wire_hdr *h, unsigned char out[CHORUS_WIRE_HDR_LEN])
{
    chorus__put_le32(out + 0, CHORUS_WIRE_MAGIC);
    chorus__put_le16(out + 4, CHORUS_WIRE_VERSION);
    chorus__put_le16(out + 6, h->type);
    chorus__put_le64(out + 8, h->comm_id);
    chorus__put_le32(out + 16, (uint32_t)h->tag);
    chorus__put_le32(out + 20, h->coll);
    chorus__put_le64(out + 24, h->seq);
    chorus__put_le64(out + 32, h->count);
    chorus__put_le64(out + 40, h->len);
}

chorus_result chorus__wire_decode_hdr(const unsigned char in[CHORUS_WIRE_HDR_LEN], uint64_t max_len,
                                      chorus_wire_hdr *h, char *why, size_t why_len)
{
    uint32_t magic = chorus__get_le32(in);
    if (magic != CHORUS_WIRE_MAGIC) {
        snprintf(why, why_len, "bad magic 0x%08x (not a Chorus peer?)", magic);
        return CHORUS_ERR_PROTOCOL;
    }
    uint16_t version = chorus__get_le16(in + 4);
    if (version != CHORUS_WIRE_VERSION) {
        snprintf(why, why_len,
                 "protocol version %u, this library speaks %u (mixed Chorus versions?)", version,
                 CHORUS_WIRE_VERSION);
        return CHORUS_ERR_PROTOCOL;
    }
    h->type = chorus__get_le16(in + 6);
    if (h->type == 0 || h->type >= CHORUS_MSG_TYPE_MAX ||
        (h->type > CHORUS_MSG_CHUNK && h->type != CHORUS_MSG_KV)) {
        snprintf(why, why_len, "unknown message type %u", h->type);
        return CHORUS_ERR_PROTOCOL;
    }
    h->comm_id = chorus__get_le64(in + 8);
    h->tag = (int32_t)chorus__get_le32(in + 16);
    h->coll = chorus__get_le32(in + 20);
    h->seq = chorus__get_le64(in + 24);
    h->count = chorus__get_le64(in + 32);
    h->len = chorus__get_le64(in + 40);
    if (h->len > max_len) {
        snprintf(why, why_len, "message of %llu bytes exceeds the limit of %llu",
                 (unsigned long long)h->len, (unsigned long long)max_len);
        return CHORUS_ERR_PROTOCOL;
    }
    return CHORUS_OK;
}

void chorus__wire_encode_hello(const chorus_wire_hello *h, unsigned char out[CHORUS_WIRE_HELLO_LEN])
{
    memset(out, 0, CHORUS_WIRE_HELLO_LEN);
    size_t n = strnlen(h->job, CHORUS_WIRE_JOB_LEN - 1);
    memcpy(out, h->job, n);
    chorus__put_le32(out + CHORUS_WIRE_JOB_LEN, (uint32_t)h->rank);
    chorus__put_le32(out + CHORUS_WIRE_JOB_LEN + 4, (uint32_t)h->size);
    chorus__put_le32(out + CHORUS_WIRE_JOB_LEN + 8, (uint32_t)h->lane);
    chorus__put_le32(out + CHORUS_WIRE_JOB_LEN + 12, (uint32_t)h->lanes);
    chorus__put_le64(out + CHORUS_WIRE_JOB_LEN + 16, h->stripe_min);
    chorus__put_le64(out + CHORUS_WIRE_JOB_LEN + 24, h->stripe_max);
}

chorus_result chorus__wire_decode_hello(const unsigned char *in, size_t len, chorus_wire_hello *h)
{
    if (len != CHORUS_WIRE_HELLO_LEN) return CHORUS_ERR_PROTOCOL;
    if (memchr(in, 0, CHORUS_WIRE_JOB_LEN) == NULL) return CHORUS_ERR_PROTOCOL;
    memcpy(h->job, in, CHORUS_WIRE_JOB_LEN);
    h->rank = (int32_t)chorus__get_le32(in + CHORUS_WIRE_JOB_LEN);
    h->size = (int32_t)chorus__get_le32(in + CHORUS_WIRE_JOB_LEN + 4);
    h->lane = (int32_t)chorus__get_le32(in + CHORUS_WIRE_JOB_LEN + 8);
    h->lanes = (int32_t)chorus__get_le32(in + CHORUS_WIRE_JOB_LEN + 12);
    h->stripe_min = chorus__get_le64(in + CHORUS_WIRE_JOB_LEN + 16);
    h->stripe_max = chorus__get_le64(in + CHORUS_WIRE_JOB_LEN + 24);
    if (h->size <= 0 || h->rank < 0 || h->rank >= h->size) return CHORUS_ERR_PROTOCOL;
    if (h->lanes < 1 || h->lanes > CHORUS_WIRE_LANES_MAX || h->lane < 0 || h->lane >= h->lanes)
        return CHORUS_ERR_PROTOCOL;
    return CHORUS_OK;
}

size_t chorus__wire_encode_abort(const chorus_wire_abort *a,
                                 unsigned char out[CHORUS_WIRE_ABORT_MAX])
{
    chorus__put_le32(out, (uint32_t)a->failed_rank);
    chorus__put_le32(out + 4, (uint32_t)a->result);
    size_t n = strnlen(a->why, CHORUS_WIRE_ABORT_MAX - 8);
    memcpy(out + 8, a->why, n);
    return 8 + n;
}

chorus_result chorus__wire_decode_abort(const unsigned char *in, size_t len, chorus_wire_abort *a)
{
    if (len < 8 || len > CHORUS_WIRE_ABORT_MAX) return CHORUS_ERR_PROTOCOL;
    a->failed_rank = (int32_t)chorus__get_le32(in);
    a->result = (int32_t)chorus__get_le32(in + 4);
    if (a->result <= CHORUS_OK || a->result >= CHORUS_RESULT_COUNT)
        a->result = CHORUS_ERR_PEER_LOST;
    size_t n = len - 8;
    memcpy(a->why, in + 8, n);
    a->why[n] = 0;
    for (size_t i = 0; i < n; i++) /* printable only: this text reaches logs and users */
        if ((unsigned char)a->why[i] < 32 || (unsigned char)a->why[i] > 126) a->why[i] = '?';
    return CHORUS_OK;
}

unsigned char *chorus__wire_encode_kv(uint32_t op, const void *key, uint32_t key_len,
                                      const void *value, uint32_t value_len, size_t *len)
{
    if (key_len > CHORUS_KV_KEY_MAX || value_len > CHORUS_KV_VALUE_MAX) return NULL;
    size_t n = 12 + (size_t)key_len + value_len;
    unsigned char *p = malloc(n);
    if (!p) return NULL;
    chorus__put_le32(p, op);
    chorus__put_le32(p + 4, key_len);
    chorus__put_le32(p + 8, value_len);
    if (key_len) memcpy(p + 12, key, key_len);
    if (value_len) memcpy(p + 12 + key_len, value, value_len);
    *len = n;
    return p;
}

chorus_result chorus__wire_decode_kv(const unsigned char *in, size_t len, chorus_wire_kv *kv)
{
    if (len < 12) return CHORUS_ERR_PROTOCOL;
    kv->op = chorus__get_le32(in);
    kv->key_len = chorus__get_le32(in + 4);
    kv->value_len = chorus__get_le32(in + 8);
    if (kv->op == 0 || kv->op >= CHORUS_KV_OP_MAX) return CHORUS_ERR_PROTOCOL;
    if (kv->key_len > CHORUS_KV_KEY_MAX || kv->value_len > CHORUS_KV_VALUE_MAX)
        return CHORUS_ERR_PROTOCOL;
    if ((size_t)12 + kv->key_len + kv->value_len != len) return CHORUS_ERR_PROTOCOL;
    kv->key = in + 12;
    kv->value = in + 12 + kv->key_len;
    return CHORUS_OK;
}

const char *chorus__op_name(int op)
{
    static const char *names[] = {"sum", "prod", "min", "max", "avg", "band", "bor", "bxor"};
    return op >= 0 && op < CHORUS_OP_COUNT ? names[op] : "unknown-op";
}

const char *chorus__coll_kind_name(int kind)
{
    static const char *kinds[] = {"?",         "allreduce",      "broadcast",
                                  "allgather", "reduce_scatter", "alltoall",
                                  "barrier",   "comm_split"};
    return kind > 0 && kind < CHORUS_COLL_KIND_MAX ? kinds[kind] : "?";
}

chorus_call_sig chorus__wire_call_sig(const chorus_wire_hdr *h)
{
    chorus_call_sig s = {.kind = (int)(h->coll & 0xff),
                         .dtype = (int)((h->coll >> 8) & 0xff),
                         .op = (int)((h->coll >> 16) & 0xff),
                         .count = h->count,
                         .seq = h->seq};
    if (s.kind == CHORUS_COLL_BROADCAST) {
        s.root = s.op;
        s.op = 0;
    }
    return s;
}

void chorus__wire_describe(const chorus_wire_hdr *h, char *out, size_t len)
{
    if (h->type == CHORUS_MSG_P2P) {
        snprintf(out, len, "send with tag %d of %llu bytes", h->tag, (unsigned long long)h->len);
        return;
    }
    chorus_call_sig s = chorus__wire_call_sig(h);
    char what[32] = "";
    if (s.kind == CHORUS_COLL_BROADCAST)
        snprintf(what, sizeof(what), ", root %d", s.root);
    else if (s.kind == CHORUS_COLL_ALLREDUCE || s.kind == CHORUS_COLL_REDUCE_SCATTER)
        snprintf(what, sizeof(what), ", %s", chorus__op_name(s.op));
    snprintf(out, len, "%s #%llu (%s%s, count %llu; message %d of %llu bytes)",
             chorus__coll_kind_name(s.kind), (unsigned long long)s.seq, chorus__dtype_name(s.dtype),
             what, (unsigned long long)s.count, h->tag, (unsigned long long)h->len);
}

void chorus__call_diff(const chorus_call_sig *a, int rank_a, const chorus_call_sig *b, int rank_b,
                       char *out, size_t len)
{
    const char *k = chorus__coll_kind_name(a->kind);
    if (a->kind != b->kind)
        snprintf(out, len, "rank %d called %s, rank %d called %s", rank_a, k, rank_b,
                 chorus__coll_kind_name(b->kind));
    else if (a->dtype != b->dtype)
        snprintf(out, len, "rank %d called %s with dtype %s, rank %d with %s", rank_a, k,
                 chorus__dtype_name(a->dtype), rank_b, chorus__dtype_name(b->dtype));
    else if (a->op != b->op)
        snprintf(out, len, "rank %d called %s with op %s, rank %d with %s", rank_a, k,
                 chorus__op_name(a->op), rank_b, chorus__op_name(b->op));
    else if (a->root != b->root)
        snprintf(out, len, "rank %d called %s with root %d, rank %d with root %d", rank_a, k,
                 a->root, rank_b, b->root);
    else if (a->count != b->count)
        snprintf(out, len, "rank %d called %s with count %llu, rank %d with count %llu", rank_a, k,
                 (unsigned long long)a->count, rank_b, (unsigned long long)b->count);
    else if (a->seq != b->seq)
        snprintf(out, len,
                 "rank %d is at its collective #%llu on this communicator, rank %d at #%llu",
                 rank_a, (unsigned long long)a->seq, rank_b, (unsigned long long)b->seq);
    else if (len)
        out[0] = '\0';
}

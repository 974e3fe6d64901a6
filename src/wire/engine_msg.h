/*
 * engine_msg.h - the training runtime's negotiation messages: what a rank tells the
 * coordinator (rank 0) about its new tensors and its stalled ones, and the coordinator's answer.
 * Explicit little-endian encoding; the reader checks every length against what is left, bounds
 * every string and refuses unknown enum values, so bytes from a peer can never make it read
 * past the end or write past a buffer (tests/fuzz/fuzz_engine_msg.c).
 *
 * A report (rank -> rank 0):  u32 n, n x {str name, meta},  u32 s, s x {str name, u32 age_ms}
 * An answer (rank 0 -> all):  u32 n, n x answer item (eng_answer)
 * str: u32 length, then the bytes (no NUL). meta: see chorus__eb_meta.
 */
#ifndef CHORUS_WIRE_ENGINE_MSG_H
#define CHORUS_WIRE_ENGINE_MSG_H

#include <stddef.h>
#include <stdint.h>

#include "base/base.h"

/* Kinds of named ops. */
enum {
    EK_ALLREDUCE,
    EK_BROADCAST,
    EK_ALLGATHER,
    EK_REDUCESCATTER,
    EK_ALLTOALL,
    EK_BARRIER,
    EK_DIVERGENCE,
    EK_JOIN,
    EK_COUNT
};

#define ENG_NAME_MAX   255  /* bytes of a tensor name */
#define ENG_COMP_MAX   31   /* bytes of a compressor name */
#define ENG_ROUNDS_MAX 4    /* rounds of a compression plan (CHORUS_COMPRESS_MAX_ROUNDS) */
#define ENG_MSG_MAX    2700 /* bytes of an error or stall message in an answer */

/* Round kinds of a compression plan (chorus_round_kind). */
enum { ENG_ROUND_REDUCE = 0, ENG_ROUND_GATHER = 1 };

/* One round of a compression plan: an elementwise reduction with op, or an allgather of
 * wcount elements of wdtype per rank. */
typedef struct eng_round {
    uint8_t kind, op, wdtype;
    uint64_t wcount;
} eng_round;

/* What every rank must agree on for a name (compared by the coordinator). */
typedef struct eng_meta {
    uint8_t kind, dtype, op;
    int32_t root;   /* broadcast */
    uint64_t count; /* elements; allgather: elements per row */
    uint64_t shape; /* the caller's shape tag (chorus_engine_tensor_opts.shape_tag), 0: none */
    double prescale, postscale;
    char comp[ENG_COMP_MAX + 1]; /* compressor name, "" for none */
    uint8_t nrounds;             /* rounds of the compressor's plan (0: not compressed) */
    eng_round rounds[ENG_ROUNDS_MAX];
} eng_meta;

/* A growing output buffer; oom is set (and further writes dropped) when realloc fails. */
typedef struct eng_buf {
    unsigned char *p;
    size_t len, cap;
    int oom;
} eng_buf;

/* A reader over len bytes; bad is set on the first short or invalid field and every later
 * read returns zeros. */
typedef struct eng_rd {
    const unsigned char *p;
    size_t len, off;
    int bad;
} eng_rd;

void chorus__eb_raw(eng_buf *b, const void *p, size_t n);
void chorus__eb_u8(eng_buf *b, uint8_t v);
void chorus__eb_u32(eng_buf *b, uint32_t v);
void chorus__eb_u64(eng_buf *b, uint64_t v);
void chorus__eb_f64(eng_buf *b, double v);
void chorus__eb_str(eng_buf *b, const char *s);
void chorus__eb_meta(eng_buf *b, const eng_meta *m);
uint8_t chorus__rd_u8(eng_rd *r);
uint32_t chorus__rd_u32(eng_rd *r);
uint64_t chorus__rd_u64(eng_rd *r);
double chorus__rd_f64(eng_rd *r);
/* Reads a string of at most max bytes into out (max + 1 bytes); an embedded NUL is bad. */
void chorus__rd_str(eng_rd *r, char *out, size_t max);
/* Reads a meta; unknown kinds, dtypes, ops, round kinds or too many rounds are bad. */
void chorus__rd_meta(eng_rd *r, eng_meta *m);

/* ---- report entries ------------------------------------------------------------------------ */

void chorus__engmsg_put_new(eng_buf *b, const char *name, const eng_meta *m);
/* 0, or -1 (r->bad set) on a malformed entry. name holds ENG_NAME_MAX + 1 bytes. */
int chorus__engmsg_read_new(eng_rd *r, char *name, eng_meta *m);
void chorus__engmsg_put_stall(eng_buf *b, const char *name, uint32_t age_ms);
int chorus__engmsg_read_stall(eng_rd *r, char *name, uint32_t *age_ms);

/* ---- answer items ------------------------------------------------------------------------- */

enum { ENG_ANS_EXEC = 1, ENG_ANS_ERROR = 2, ENG_ANS_EVICT = 3, ENG_ANS_STALL = 4 };

/* EXEC: run name with meta m, caching it in slot (-1: not cached). ERROR: end name with
 * result code and msg. EVICT: drop cache slot. STALL: stop every rank with msg. */
typedef struct eng_answer {
    uint8_t type;
    char name[ENG_NAME_MAX + 1];
    eng_meta m;
    int32_t slot;
    uint8_t code;
    char msg[ENG_MSG_MAX + 1];
} eng_answer;

void chorus__engmsg_put_answer(eng_buf *b, const eng_answer *a);
/* 0, or -1 (r->bad set) on a malformed item: unknown type, bad meta, a slot below -1, an
 * error code that is not a failure. */
int chorus__engmsg_read_answer(eng_rd *r, eng_answer *a);

#endif

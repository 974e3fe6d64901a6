/*
 * engine_codec.c - the engine's pieces that need no peers: the string map, the negotiation
 * message reader (every truncation and oversized length is refused, never read past), the
 * metadata comparison messages, identities of each op, scaling and the hash. The message
 * codec itself is src/wire/engine_msg.c (also fuzzed: tests/fuzz/fuzz_engine_msg.c).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/compress/compress.h"
#include "engine/engine_int.h"
#include "harness.h"
#include "reduce/reduce.h"

static void test_map(void)
{
    eng_map m = {0};
    char k[32];
    for (int i = 0; i < 5000; i++) {
        snprintf(k, sizeof(k), "t%d", i);
        ASSERT_EQ(chorus__map_put(&m, k, (void *)(intptr_t)(i + 1)), 0);
    }
    for (int i = 0; i < 5000; i += 2) {
        snprintf(k, sizeof(k), "t%d", i);
        chorus__map_del(&m, k);
    }
    for (int round = 0; round < 20; round++) /* churn: deleted slots are reused, no growth */
        for (int i = 0; i < 5000; i += 2) {
            snprintf(k, sizeof(k), "t%d", i);
            ASSERT_EQ(chorus__map_put(&m, k, (void *)(intptr_t)(i + 1)), 0);
            chorus__map_del(&m, k);
        }
    ASSERT(m.cap <= 16384);
    for (int i = 0; i < 5000; i++) {
        snprintf(k, sizeof(k), "t%d", i);
        intptr_t v = (intptr_t)chorus__map_get(&m, k);
        ASSERT_EQ(v, i % 2 ? i + 1 : 0);
    }
    ASSERT_EQ(m.live, 2500);
    chorus__map_free(&m);
}

static void test_reader(void)
{
    eng_meta m = {.kind = EK_ALLREDUCE,
                  .dtype = CHORUS_FLOAT32,
                  .op = CHORUS_AVG,
                  .root = 3,
                  .count = 12345,
                  .prescale = 0.5,
                  .postscale = 2,
                  .nrounds = 1,
                  .rounds = {{ENG_ROUND_REDUCE, CHORUS_SUM, CHORUS_FLOAT16, 12345}}};
    strcpy(m.comp, "fp16");
    eng_buf b = {0};
    chorus__eb_str(&b, "layer1.weight");
    chorus__eb_meta(&b, &m);
    ASSERT(!b.oom);
    /* the whole message reads back */
    eng_rd r = {b.p, b.len, 0, 0};
    char name[ENG_NAME_MAX + 1];
    eng_meta got;
    chorus__rd_str(&r, name, ENG_NAME_MAX);
    chorus__rd_meta(&r, &got);
    ASSERT(!r.bad);
    ASSERT(!strcmp(name, "layer1.weight"));
    ASSERT(chorus__meta_equal(&m, &got));
    /* every truncation is refused */
    for (size_t cut = 0; cut < b.len; cut++) {
        eng_rd t = {b.p, cut, 0, 0};
        chorus__rd_str(&t, name, ENG_NAME_MAX);
        chorus__rd_meta(&t, &got);
        ASSERT(t.bad);
        ASSERT(t.off <= cut);
    }
    /* a length beyond the bound, an embedded NUL, an unknown dtype */
    unsigned char big[8] = {0xff, 0xff, 0xff, 0x7f, 'a', 'b', 'c', 'd'};
    eng_rd t = {big, sizeof(big), 0, 0};
    chorus__rd_str(&t, name, ENG_NAME_MAX);
    ASSERT(t.bad);
    unsigned char nul[7] = {3, 0, 0, 0, 'a', 0, 'b'};
    eng_rd u = {nul, sizeof(nul), 0, 0};
    chorus__rd_str(&u, name, ENG_NAME_MAX);
    ASSERT(u.bad);
    eng_buf c = {0};
    eng_meta bad = m;
    bad.dtype = 200;
    chorus__eb_meta(&c, &bad);
    eng_rd v = {c.p, c.len, 0, 0};
    chorus__rd_meta(&v, &got);
    ASSERT(v.bad);
    /* too many rounds, an unknown round kind */
    eng_meta many = m;
    many.nrounds = ENG_ROUNDS_MAX;
    eng_buf d = {0};
    chorus__eb_meta(&d, &many);
    d.p[d.len - (size_t)ENG_ROUNDS_MAX * 11 - 1] = ENG_ROUNDS_MAX + 1; /* the round count */
    eng_rd w = {d.p, d.len, 0, 0};
    chorus__rd_meta(&w, &got);
    ASSERT(w.bad);
    free(b.p);
    free(c.p);
    free(d.p);
}

static void test_answer(void)
{
    static eng_answer a, got;
    a.type = ENG_ANS_EXEC;
    strcpy(a.name, "fc.grad");
    a.m = (eng_meta){
        .kind = EK_ALLREDUCE, .dtype = CHORUS_FLOAT32, .count = 7, .prescale = 1, .postscale = 1};
    a.slot = 3;
    eng_buf b = {0};
    chorus__engmsg_put_answer(&b, &a);
    a.type = ENG_ANS_ERROR;
    a.code = CHORUS_ERR_MISMATCH;
    strcpy(a.msg, "tensor 'fc.grad': ranks disagree");
    chorus__engmsg_put_answer(&b, &a);
    eng_rd r = {b.p, b.len, 0, 0};
    ASSERT_EQ(chorus__engmsg_read_answer(&r, &got), 0);
    ASSERT(got.type == ENG_ANS_EXEC && got.slot == 3 && !strcmp(got.name, "fc.grad"));
    ASSERT(chorus__meta_equal(&got.m, &a.m));
    ASSERT_EQ(chorus__engmsg_read_answer(&r, &got), 0);
    ASSERT(got.type == ENG_ANS_ERROR && got.code == CHORUS_ERR_MISMATCH);
    ASSERT_STR_CONTAINS(got.msg, "ranks disagree");
    ASSERT_EQ(r.off, b.len);
    /* an error item whose code is not a failure, an unknown item type */
    b.p[b.len - strlen(a.msg) - 5] = CHORUS_OK;
    eng_rd t = {b.p, b.len, 0, 0};
    ASSERT_EQ(chorus__engmsg_read_answer(&t, &got), 0);
    ASSERT_EQ(chorus__engmsg_read_answer(&t, &got), -1);
    unsigned char odd[1] = {9};
    eng_rd u = {odd, 1, 0, 0};
    ASSERT_EQ(chorus__engmsg_read_answer(&u, &got), -1);
    free(b.p);
}

static void test_diff(void)
{
    eng_meta a = {.kind = EK_ALLREDUCE,
                  .dtype = CHORUS_FLOAT32,
                  .op = CHORUS_SUM,
                  .count = 10,
                  .prescale = 1,
                  .postscale = 1};
    eng_meta b = a;
    char msg[256];
    b.dtype = CHORUS_BFLOAT16;
    chorus__meta_diff(&a, 0, &b, 3, msg, sizeof(msg));
    ASSERT_STR_CONTAINS(msg, "dtype float32 on rank 0 but bfloat16 on rank 3");
    b = a;
    b.op = CHORUS_MIN;
    chorus__meta_diff(&a, 1, &b, 2, msg, sizeof(msg));
    ASSERT_STR_CONTAINS(msg, "op sum on rank 1 but min on rank 2");
    b = a;
    b.kind = EK_ALLGATHER;
    chorus__meta_diff(&a, 0, &b, 1, msg, sizeof(msg));
    ASSERT_STR_CONTAINS(msg, "operation allreduce on rank 0 but allgather on rank 1");
    b = a;
    b.postscale = 0.5;
    chorus__meta_diff(&a, 0, &b, 1, msg, sizeof(msg));
    ASSERT_STR_CONTAINS(msg, "postscale 1 on rank 0 but 0.5 on rank 1");
    b = a;
    strcpy(b.comp, "bf16");
    chorus__meta_diff(&a, 0, &b, 1, msg, sizeof(msg));
    ASSERT_STR_CONTAINS(msg, "compression none on rank 0 but bf16 on rank 1");
    /* same compressor, different plans */
    a.nrounds = b.nrounds = 2;
    strcpy(a.comp, "lowrank");
    strcpy(b.comp, "lowrank");
    a.rounds[0] = b.rounds[0] = (eng_round){ENG_ROUND_REDUCE, CHORUS_SUM, CHORUS_FLOAT64, 8};
    a.rounds[1] = (eng_round){ENG_ROUND_REDUCE, CHORUS_SUM, CHORUS_FLOAT64, 4};
    b.rounds[1] = (eng_round){ENG_ROUND_GATHER, CHORUS_SUM, CHORUS_FLOAT32, 6};
    ASSERT(!chorus__meta_equal(&a, &b));
    chorus__meta_diff(&a, 0, &b, 2, msg, sizeof(msg));
    ASSERT_STR_CONTAINS(msg, "compression plan 2 rounds: reduce sum float64 x 8, reduce sum "
                             "float64 x 4 on rank 0 but 2 rounds: reduce sum float64 x 8, gather "
                             "float32 x 6 on rank 2");
}

static void test_identity(void)
{
    /* x op identity == x for every dtype and op */
    const chorus_op ops[] = {CHORUS_SUM, CHORUS_PROD, CHORUS_MIN, CHORUS_MAX, CHORUS_AVG};
    for (int t = 0; t < CHORUS_DTYPE_COUNT; t++)
        for (int o = 0; o < 5; o++) {
            unsigned char x[64], id[64], out[64];
            size_t n = 64 / chorus_dtype_size((chorus_dtype)t);
            for (size_t i = 0; i < sizeof(x); i++) x[i] = (unsigned char)(i * 37 + 11);
            if (t == CHORUS_FLOAT16 || t == CHORUS_BFLOAT16) /* keep them finite */
                for (size_t i = 0; i < n; i++) ((uint16_t *)x)[i] &= 0x3fff;
            if (t == CHORUS_FLOAT32)
                for (size_t i = 0; i < n; i++) ((float *)x)[i] = (float)i - 7.5f;
            if (t == CHORUS_FLOAT64)
                for (size_t i = 0; i < n; i++) ((double *)x)[i] = (double)i * 3 - 9.25;
            chorus__dtype_fill_identity(id, n, (chorus_dtype)t, ops[o]);
            chorus__reduce(out, x, id, n, (chorus_dtype)t, ops[o]);
            if (memcmp(out, x, sizeof(x)))
                test_fail(__FILE__, __LINE__, "identity of op %d for dtype %d", o, t);
        }
}

static void test_scale_hash(void)
{
    float f[3] = {1, -2, 3};
    chorus__reduce_scale(f, f, 3, CHORUS_FLOAT32, 0.5);
    ASSERT(f[0] == 0.5f && f[1] == -1.0f && f[2] == 1.5f);
    uint16_t h = chorus__f32_to_bf16(3.0f);
    chorus__reduce_scale(&h, &h, 1, CHORUS_BFLOAT16, 2.0);
    ASSERT(chorus__bf16_to_f32(h) == 6.0f);
    char a[1000], b[1000];
    for (int i = 0; i < 1000; i++) a[i] = b[i] = (char)i;
    ASSERT(chorus__hash64(a, 1000) == chorus__hash64(b, 1000));
    for (int i = 0; i < 1000; i += 97) {
        b[i] ^= 1;
        ASSERT(chorus__hash64(a, 1000) != chorus__hash64(b, 1000));
        b[i] ^= 1;
    }
    ASSERT(chorus__hash64(a, 999) != chorus__hash64(a, 1000));
    ASSERT(chorus__compressor_by_name("fp16") == chorus_compressor_fp16());
    ASSERT(chorus__compressor_by_name("none") == NULL);
}

int main(void)
{
    test_map();
    test_reader();
    test_answer();
    test_diff();
    test_identity();
    test_scale_hash();
    printf("engine_codec: ok\n");
    return 0;
}

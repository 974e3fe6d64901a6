/* wire_parse.c - the wire decoder refuses everything malformed, with a reason, and accepts
 * what the encoder writes. */
#include "harness.h"
#include "wire/wire.h"

int main(void)
{
    chorus_wire_hdr h = {.type = CHORUS_MSG_COLL,
                         .comm_id = 0x1122334455667788ull,
                         .tag = -5,
                         .coll =
                             chorus__coll_sig(CHORUS_COLL_ALLREDUCE, CHORUS_FLOAT32, CHORUS_SUM),
                         .seq = 99,
                         .count = 12345,
                         .len = 4096};
    unsigned char b[CHORUS_WIRE_HDR_LEN];
    chorus__wire_encode_hdr(&h, b);
    chorus_wire_hdr d;
    char why[200];
    ASSERT_OK(chorus__wire_decode_hdr(b, 1 << 20, &d, why, sizeof(why)));
    ASSERT(d.type == h.type && d.comm_id == h.comm_id && d.tag == h.tag && d.coll == h.coll &&
           d.seq == h.seq && d.count == h.count && d.len == h.len);
    /* a length above the bound is refused before anyone allocates */
    ASSERT_EQ(chorus__wire_decode_hdr(b, 4095, &d, why, sizeof(why)), CHORUS_ERR_PROTOCOL);
    ASSERT_STR_CONTAINS(why, "exceeds the limit");
    unsigned char bad[CHORUS_WIRE_HDR_LEN];
    memcpy(bad, b, sizeof(b));
    bad[0] ^= 0xff;
    ASSERT_EQ(chorus__wire_decode_hdr(bad, 1 << 20, &d, why, sizeof(why)), CHORUS_ERR_PROTOCOL);
    ASSERT_STR_CONTAINS(why, "bad magic");
    memcpy(bad, b, sizeof(b));
    bad[4] = 9;
    ASSERT_EQ(chorus__wire_decode_hdr(bad, 1 << 20, &d, why, sizeof(why)), CHORUS_ERR_PROTOCOL);
    ASSERT_STR_CONTAINS(why, "protocol version 9");
    memcpy(bad, b, sizeof(b));
    bad[6] = 200;
    ASSERT_EQ(chorus__wire_decode_hdr(bad, 1 << 20, &d, why, sizeof(why)), CHORUS_ERR_PROTOCOL);
    ASSERT_STR_CONTAINS(why, "unknown message type");
    /* random headers never crash and never pass with a length above the bound */
    uint64_t s = 1;
    for (int i = 0; i < 100000; i++) {
        for (int k = 0; k < CHORUS_WIRE_HDR_LEN; k++) bad[k] = (unsigned char)test_rand(&s);
        if (i % 2) memcpy(bad, b, 6); /* valid magic and version, random rest */
        if (chorus__wire_decode_hdr(bad, 1000, &d, why, sizeof(why)) == CHORUS_OK)
            ASSERT(d.len <= 1000);
    }

    chorus_wire_hello hello = {.rank = 3, .size = 4, .lane = 2, .lanes = 3}, hd;
    snprintf(hello.job, sizeof(hello.job), "job-x");
    unsigned char hb[CHORUS_WIRE_HELLO_LEN];
    chorus__wire_encode_hello(&hello, hb);
    ASSERT_OK(chorus__wire_decode_hello(hb, sizeof(hb), &hd));
    ASSERT(hd.rank == 3 && hd.size == 4 && !strcmp(hd.job, "job-x"));
    ASSERT(hd.lane == 2 && hd.lanes == 3);
    hello.lane = 3; /* lane out of range */
    chorus__wire_encode_hello(&hello, hb);
    ASSERT_EQ(chorus__wire_decode_hello(hb, sizeof(hb), &hd), CHORUS_ERR_PROTOCOL);
    hello.lane = 0;
    ASSERT_EQ(chorus__wire_decode_hello(hb, sizeof(hb) - 1, &hd), CHORUS_ERR_PROTOCOL);
    hello.rank = 4; /* rank out of range */
    chorus__wire_encode_hello(&hello, hb);
    ASSERT_EQ(chorus__wire_decode_hello(hb, sizeof(hb), &hd), CHORUS_ERR_PROTOCOL);
    memset(hb, 'A', CHORUS_WIRE_JOB_LEN); /* job id without a terminator */
    ASSERT_EQ(chorus__wire_decode_hello(hb, sizeof(hb), &hd), CHORUS_ERR_PROTOCOL);

    size_t n;
    unsigned char *kv = chorus__wire_encode_kv(CHORUS_KV_SET, "key", 3, "value", 5, &n);
    chorus_wire_kv k;
    ASSERT_OK(chorus__wire_decode_kv(kv, n, &k));
    ASSERT(k.op == CHORUS_KV_SET && k.key_len == 3 && k.value_len == 5 &&
           !memcmp(k.value, "value", 5));
    ASSERT_EQ(chorus__wire_decode_kv(kv, n - 1, &k), CHORUS_ERR_PROTOCOL); /* lengths disagree */
    kv[4] = 0xff;                                                          /* key length huge */
    ASSERT_EQ(chorus__wire_decode_kv(kv, n, &k), CHORUS_ERR_PROTOCOL);
    free(kv);
    ASSERT(chorus__wire_encode_kv(CHORUS_KV_SET, "k", CHORUS_KV_KEY_MAX + 1, NULL, 0, &n) == NULL);

    chorus_wire_abort a = {.failed_rank = 2, .result = CHORUS_ERR_PEER_LOST}, ad;
    snprintf(a.why, sizeof(a.why), "rank 2 died\n\x01");
    unsigned char ab[CHORUS_WIRE_ABORT_MAX];
    size_t an = chorus__wire_encode_abort(&a, ab);
    ASSERT_OK(chorus__wire_decode_abort(ab, an, &ad));
    ASSERT_EQ(ad.failed_rank, 2);
    ASSERT_STR_CONTAINS(ad.why, "rank 2 died??"); /* control characters neutralised */
    ASSERT_EQ(chorus__wire_decode_abort(ab, 4, &ad), CHORUS_ERR_PROTOCOL);
    printf("wire parsing ok\n");
    return 0;
}

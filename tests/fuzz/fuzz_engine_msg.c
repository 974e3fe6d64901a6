/*
 * fuzz_engine_msg.c - libFuzzer target for src/wire/engine_msg.c, the parser of the engine's
 * negotiation messages (a rank's report to the coordinator, the coordinator's answer). The
 * first byte picks the message; whatever parses is re-encoded and must give back exactly the
 * bytes it was read from, and every parsed string must be NUL-terminated within its bound.
 */
#include <stdlib.h>
#include <string.h>

#include "wire/engine_msg.h"

static void check_meta(const eng_meta *m)
{
    if (m->kind >= EK_COUNT || m->nrounds > ENG_ROUNDS_MAX || !memchr(m->comp, 0, sizeof(m->comp)))
        abort();
}

static void same(const eng_buf *b, const uint8_t *d, size_t n)
{
    if (b->oom) return;
    if (b->len != n || memcmp(b->p, d, n)) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
    if (n < 1) return 0;
    unsigned sel = d[0] % 2;
    d++;
    n--;
    eng_rd r = {d, n, 0, 0};
    eng_buf out = {0};
    static eng_answer a;
    char name[ENG_NAME_MAX + 1];
    if (sel == 0) { /* a report */
        uint32_t k = chorus__rd_u32(&r);
        chorus__eb_u32(&out, k);
        for (uint32_t i = 0; i < k && !r.bad; i++) {
            eng_meta m;
            if (chorus__engmsg_read_new(&r, name, &m) != 0) break;
            if (strlen(name) > ENG_NAME_MAX) abort();
            check_meta(&m);
            chorus__engmsg_put_new(&out, name, &m);
        }
        uint32_t s = chorus__rd_u32(&r);
        chorus__eb_u32(&out, s);
        for (uint32_t i = 0; i < s && !r.bad; i++) {
            uint32_t age;
            if (chorus__engmsg_read_stall(&r, name, &age) != 0) break;
            chorus__engmsg_put_stall(&out, name, age);
        }
    } else { /* an answer */
        uint32_t k = chorus__rd_u32(&r);
        chorus__eb_u32(&out, k);
        for (uint32_t i = 0; i < k && !r.bad; i++) {
            if (chorus__engmsg_read_answer(&r, &a) != 0) break;
            if (!memchr(a.msg, 0, sizeof(a.msg)) || !memchr(a.name, 0, sizeof(a.name))) abort();
            if (a.type == ENG_ANS_EXEC) check_meta(&a.m);
            if (a.type == ENG_ANS_ERROR && (a.code == 0 || a.code >= CHORUS_RESULT_COUNT)) abort();
            chorus__engmsg_put_answer(&out, &a);
        }
    }
    if (r.off > n) abort();
    if (!r.bad) same(&out, d, r.off);
    free(out.p);
    return 0;
}

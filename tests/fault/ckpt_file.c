/*
 * ckpt_file.c - the crash-safe checkpoint files (src/base/atomic_file.c): round trip, CRC32
 * against the standard check value, every truncation and every single-bit flip of a small
 * checkpoint detected (and the previous checkpoint used instead, with a message naming the
 * damaged file), keep-K retention, listing and paths, and the errors for bad arguments, an
 * unreadable directory and for no checkpoint.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/atomic_file.h"
#include "chorus/checkpoint.h"
#include "harness.h"

static char dir[256];

static void path_of(char *out, size_t len, uint64_t step)
{
    snprintf(out, len, "%s/state.%020llu.ckpt", dir, (unsigned long long)step);
}

static unsigned char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    ASSERT(f);
    unsigned char *b = malloc(1 << 16);
    *len = fread(b, 1, 1 << 16, f);
    fclose(f);
    return b;
}

static void put(const char *path, const unsigned char *b, size_t len)
{
    FILE *f = fopen(path, "wb");
    ASSERT(f);
    ASSERT_EQ(fwrite(b, 1, len, f), len);
    fclose(f);
}

/* The newest (damaged) checkpoint must be skipped for step 1, with a message naming it. */
static void expect_fallback(const char *what, const char *bad_path)
{
    uint64_t step = 0;
    void *data = NULL;
    size_t len = 0;
    chorus_result r = chorus_checkpoint_load(dir, "state", &step, &data, &len);
    if (r != CHORUS_OK)
        test_fail(__FILE__, __LINE__, "%s: no fallback: %s", what, chorus_last_error(NULL));
    if (step != 1)
        test_fail(__FILE__, __LINE__, "%s: loaded step %llu, expected 1", what,
                  (unsigned long long)step);
    ASSERT_EQ(len, 40);
    ASSERT_EQ(((unsigned char *)data)[39], 39);
    ASSERT_STR_CONTAINS(chorus_last_error(NULL), "skipped damaged checkpoint");
    ASSERT_STR_CONTAINS(chorus_last_error(NULL), bad_path);
    free(data);
}

int main(void)
{
    ASSERT_EQ(chorus__crc32(0, "123456789", 9), 0xCBF43926u);
    ASSERT_EQ(chorus__crc32(chorus__crc32(0, "1234", 4), "56789", 5), 0xCBF43926u);
    snprintf(dir, sizeof(dir), "%s/chorus-ckpt-test-%d",
             getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp", (int)getpid());

    /* nothing there yet */
    uint64_t step;
    void *data;
    size_t len;
    ASSERT_EQ(chorus_checkpoint_load(dir, "state", &step, &data, &len), CHORUS_ERR_INVALID_ARG);
    ASSERT_STR_CONTAINS(chorus_last_error(NULL), "no valid checkpoint 'state'");
    ASSERT_EQ(chorus_checkpoint_save(dir, "bad/name", 1, "x", 1, 2), CHORUS_ERR_INVALID_ARG);
    ASSERT_STR_CONTAINS(chorus_last_error(NULL), "names use letters, digits");
    ASSERT_EQ(chorus_checkpoint_save(dir, "state", 1, "x", 1, 0), CHORUS_ERR_INVALID_ARG);

    /* round trip, two checkpoints */
    unsigned char payload[40];
    for (int i = 0; i < 40; i++) payload[i] = (unsigned char)i;
    ASSERT_OK(chorus_checkpoint_save(dir, "state", 1, payload, sizeof(payload), 2));
    payload[0] = 99;
    ASSERT_OK(chorus_checkpoint_save(dir, "state", 2, payload, sizeof(payload), 2));
    ASSERT_OK(chorus_checkpoint_load(dir, "state", &step, &data, &len));
    ASSERT_EQ(step, 2);
    ASSERT_EQ(len, 40);
    ASSERT(memcmp(data, payload, 40) == 0);
    ASSERT_EQ(chorus_last_error(NULL)[0], 0); /* nothing skipped */
    free(data);
    /* the newest before a step: 1 before 2; none before 1 */
    ASSERT_OK(chorus_checkpoint_load_before(dir, "state", 2, &step, &data, &len));
    ASSERT_EQ(step, 1);
    ASSERT_EQ(((unsigned char *)data)[0], 0);
    free(data);
    ASSERT_OK(chorus_checkpoint_load_before(dir, "state", 1000, &step, &data, &len));
    ASSERT_EQ(step, 2);
    free(data);
    ASSERT_EQ(chorus_checkpoint_load_before(dir, "state", 1, &step, &data, &len),
              CHORUS_ERR_INVALID_ARG);
    ASSERT_STR_CONTAINS(chorus_last_error(NULL), "no valid checkpoint 'state' in ");
    ASSERT_STR_CONTAINS(chorus_last_error(NULL), " of a step before 1");

    char p2[512];
    path_of(p2, sizeof(p2), 2);
    size_t flen;
    unsigned char *good = slurp(p2, &flen);
    ASSERT_EQ(flen, CHORUS_CKPT_HDR_LEN + 40);

    /* every truncation */
    for (size_t k = 0; k < flen; k++) {
        uint64_t s;
        const unsigned char *pl;
        size_t pn;
        char why[200];
        ASSERT_EQ(chorus__ckpt_parse(good, k, &s, &pl, &pn, why, sizeof(why)), CHORUS_ERR_PROTOCOL);
        put(p2, good, k);
        char what[64];
        snprintf(what, sizeof(what), "truncated to %zu bytes", k);
        expect_fallback(what, p2);
    }
    /* an extra byte at the end */
    unsigned char *longer = malloc(flen + 1);
    memcpy(longer, good, flen);
    longer[flen] = 0;
    put(p2, longer, flen + 1);
    expect_fallback("one byte too long", p2);
    free(longer);
    /* every single-bit flip */
    int flips = 0;
    for (size_t k = 0; k < flen; k++)
        for (int bit = 0; bit < 8; bit++) {
            good[k] ^= (unsigned char)(1u << bit);
            uint64_t s;
            const unsigned char *pl;
            size_t pn;
            char why[200];
            if (chorus__ckpt_parse(good, flen, &s, &pl, &pn, why, sizeof(why)) == CHORUS_OK)
                test_fail(__FILE__, __LINE__, "flip of bit %d of byte %zu not detected", bit, k);
            put(p2, good, flen);
            expect_fallback("a flipped bit", p2);
            good[k] ^= (unsigned char)(1u << bit);
            flips++;
        }
    put(p2, good, flen);
    ASSERT_OK(chorus_checkpoint_load(dir, "state", &step, &data, &len));
    ASSERT_EQ(step, 2);
    free(data);
    free(good);

    /* both damaged: an error that lists both */
    char p1[512];
    path_of(p1, sizeof(p1), 1);
    put(p1, (const unsigned char *)"junk", 4);
    put(p2, (const unsigned char *)"CHORCKPT", 8);
    ASSERT_EQ(chorus_checkpoint_load(dir, "state", &step, &data, &len), CHORUS_ERR_INVALID_ARG);
    ASSERT_STR_CONTAINS(chorus_last_error(NULL), p1);
    ASSERT_STR_CONTAINS(chorus_last_error(NULL), p2);
    printf("damaged everywhere: %s\n", chorus_last_error(NULL));

    /* keep the newest K */
    for (uint64_t s = 3; s <= 7; s++)
        ASSERT_OK(chorus_checkpoint_save(dir, "state", s, payload, 40, 3));
    for (uint64_t s = 1; s <= 7; s++) {
        char p[512];
        path_of(p, sizeof(p), s);
        ASSERT_EQ(access(p, F_OK) == 0, s >= 5);
    }
    ASSERT_OK(chorus_checkpoint_load(dir, "state", &step, &data, &len));
    ASSERT_EQ(step, 7);
    free(data);

    /* list (newest first) and path */
    uint64_t *steps;
    size_t count;
    ASSERT_OK(chorus_checkpoint_list(dir, "state", &steps, &count));
    ASSERT_EQ(count, 3);
    ASSERT_EQ(steps[0], 7);
    ASSERT_EQ(steps[1], 6);
    ASSERT_EQ(steps[2], 5);
    free(steps);
    ASSERT_OK(chorus_checkpoint_list(dir, "other", &steps, &count));
    ASSERT_EQ(count, 0);
    ASSERT(steps == NULL);
    ASSERT_OK(chorus_checkpoint_list("/nonexistent/chorus-ckpt", "state", &steps, &count));
    ASSERT_EQ(count, 0);
    ASSERT_EQ(chorus_checkpoint_list(dir, "../state", &steps, &count), CHORUS_ERR_INVALID_ARG);
    ASSERT_STR_CONTAINS(chorus_last_error(NULL), "checkpoint list: bad arguments");
    char p7[512], got[512];
    path_of(p7, sizeof(p7), 7);
    ASSERT_OK(chorus_checkpoint_path(dir, "state", 7, got, sizeof(got)));
    ASSERT(strcmp(got, p7) == 0);
    ASSERT_EQ(chorus_checkpoint_path(dir, "state", 7, got, 10), CHORUS_ERR_INVALID_ARG);
    ASSERT_STR_CONTAINS(chorus_last_error(NULL), "bytes are too few for the path");
    /* a "directory" that is a file cannot be read */
    char notdir[600];
    snprintf(notdir, sizeof(notdir), "%s/state.%020llu.ckpt", dir, 7ull);
    ASSERT_EQ(chorus_checkpoint_list(notdir, "state", &steps, &count), CHORUS_ERR_SYSTEM);
    ASSERT_STR_CONTAINS(chorus_last_error(NULL), "cannot read checkpoint directory");
    ASSERT_EQ(chorus_checkpoint_load(notdir, "state", &step, &data, &len), CHORUS_ERR_SYSTEM);
    ASSERT_STR_CONTAINS(chorus_last_error(NULL), "Not a directory");
    printf("unreadable directory: %s\n", chorus_last_error(NULL));
    char cmd[600];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    ASSERT_EQ(system(cmd), 0);
    printf("ok: %zu truncations and %d bit flips detected, each fell back to the previous "
           "checkpoint\n",
           flen, flips);
    return 0;
}

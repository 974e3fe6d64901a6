/* tboard.c - the TensorBoard writer (chorus/tensorboard.h): 200 scalars of three tags, tags of
 * 1 and 255 bytes, negative and large steps and special values, into one event file, and a
 * second writer of the same directory in the same second in a file of its own; then
 * tests/scripts/tb_read.py checks every record of both files (CRCs, protobuf, tags, values).
 * Bad arguments are refused with a message naming them, touching no file. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chorus/tensorboard.h"
#include "harness.h"

int main(void)
{
    char dir[] = "/tmp/tboard.XXXXXX";
    ASSERT(mkdtemp(dir));
    char sub[64];
    snprintf(sub, sizeof(sub), "%s/a/b", dir);
    chorus_tb *w, *w2;
    ASSERT_OK(chorus_tb_open(sub, &w));
    ASSERT_OK(chorus_tb_open(sub, &w2));
    ASSERT(strcmp(chorus_tb_path(w), chorus_tb_path(w2)) != 0);
    char long_tag[256];
    memset(long_tag, 'x', 255);
    long_tag[255] = 0;
    for (int s = 1; s <= 200; s++) {
        ASSERT_OK(chorus_tb_scalar(w, "loss", s, 1.0 / s));
        if (s % 2) ASSERT_OK(chorus_tb_scalar(w, "t", s, -s));
    }
    ASSERT_OK(chorus_tb_scalar(w, long_tag, -5, 3.5));
    ASSERT_OK(chorus_tb_scalar(w, long_tag, (int64_t)1 << 40, INFINITY));
    ASSERT_OK(chorus_tb_scalar(w2, "other", 7, 0.25));

    ASSERT_EQ(chorus_tb_scalar(w, "", 1, 0), CHORUS_ERR_INVALID_ARG);
    ASSERT_STR_CONTAINS(chorus_last_error(NULL), "a tag has 1 to 255 bytes, not 0");
    char too_long[257];
    memset(too_long, 'y', 256);
    too_long[256] = 0;
    ASSERT_EQ(chorus_tb_scalar(w, too_long, 1, 0), CHORUS_ERR_INVALID_ARG);
    ASSERT_STR_CONTAINS(chorus_last_error(NULL), "not 256");
    ASSERT_EQ(chorus_tb_scalar(w, NULL, 1, 0), CHORUS_ERR_INVALID_ARG);
    ASSERT_EQ(chorus_tb_scalar(NULL, "x", 1, 0), CHORUS_ERR_INVALID_ARG);
    ASSERT_STR_CONTAINS(chorus_last_error(NULL), "chorus_tb_scalar: the writer is NULL");
    ASSERT_EQ(chorus_tb_open(NULL, &w2), CHORUS_ERR_INVALID_ARG);
    char bad[96];
    snprintf(bad, sizeof(bad), "%s/a/b/%s/x", dir, strrchr(chorus_tb_path(w), '/') + 1);
    chorus_tb *none = w; /* must be reset to NULL */
    ASSERT_EQ(chorus_tb_open(bad, &none), CHORUS_ERR_SYSTEM);
    ASSERT(none == NULL);
    ASSERT_STR_CONTAINS(chorus_last_error(NULL), "cannot create the TensorBoard directory");

    char a[4096], b[4096];
    snprintf(a, sizeof(a), "%s", chorus_tb_path(w));
    snprintf(b, sizeof(b), "%s", chorus_tb_path(w2));
    chorus_tb_close(w);
    chorus_tb_close(w2);
    chorus_tb_close(NULL);
    ASSERT_EQ(test_sh("/usr/bin/python3 tests/scripts/tb_read.py %s --tags loss,t,%s --min 302 "
                      "| grep -q 'loss 1:1 2:0.5 3:0.333333'",
                      a, long_tag),
              0);
    ASSERT_EQ(test_sh("/usr/bin/python3 tests/scripts/tb_read.py %s | grep -q '%s -5:3.5 "
                      "1099511627776:inf'",
                      a, long_tag),
              0);
    ASSERT_EQ(test_sh("/usr/bin/python3 tests/scripts/tb_read.py %s --tags other --min 1", b), 0);
    ASSERT_EQ(test_sh("rm -rf %s", dir), 0);
    printf("tboard: ok (%s, %s)\n", a, b);
    return 0;
}

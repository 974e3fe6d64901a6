/*
 * nn_data.c - the IDX reader and the Fashion-MNIST loader on files made here in a temporary
 * directory: good files (gzip and plain) load; a missing directory tells how to install the
 * data; bad magic, truncated and corrupt files are refused with a message that names the
 * file and the byte offset.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "chorus/nn.h"
#include "harness.h"

static char g_dir[256];

static void path_of(char *out, size_t len, const char *name)
{
    snprintf(out, len, "%s/%s", g_dir, name);
}

/* An IDX image file of n images of h x w with pixel (i, p) = (i + p) & 255, and the matching
 * label file with label i % 10. */
static size_t make_idx(uint8_t **out, int dims, int n, int h, int w)
{
    size_t hdr = 4 + 4 * (size_t)dims;
    size_t body = dims == 3 ? (size_t)n * h * w : (size_t)n;
    uint8_t *b = malloc(hdr + body);
    b[0] = b[1] = 0;
    b[2] = 0x08;
    b[3] = (uint8_t)dims;
    int sz[3] = {n, h, w};
    for (int d = 0; d < dims; d++) {
        b[4 + 4 * d] = (uint8_t)(sz[d] >> 24);
        b[5 + 4 * d] = (uint8_t)(sz[d] >> 16);
        b[6 + 4 * d] = (uint8_t)(sz[d] >> 8);
        b[7 + 4 * d] = (uint8_t)sz[d];
    }
    for (size_t i = 0; i < body; i++)
        b[hdr + i] =
            dims == 3 ? (uint8_t)(i / (size_t)(h * w) + i % (size_t)(h * w)) : (uint8_t)(i % 10);
    *out = b;
    return hdr + body;
}

static void write_gz(const char *name, const uint8_t *b, size_t n)
{
    char p[512];
    path_of(p, sizeof(p), name);
    gzFile f = gzopen(p, "wb");
    gzwrite(f, b, (unsigned)n);
    gzclose(f);
}

static void write_plain(const char *name, const uint8_t *b, size_t n)
{
    char p[512];
    path_of(p, sizeof(p), name);
    FILE *f = fopen(p, "wb");
    fwrite(b, 1, n, f);
    fclose(f);
}

static long file_size(const char *name)
{
    char p[512];
    struct stat st;
    path_of(p, sizeof(p), name);
    return stat(p, &st) ? -1 : (long)st.st_size;
}

static void truncate_file(const char *name, long len)
{
    char p[512];
    path_of(p, sizeof(p), name);
    ASSERT_EQ(truncate(p, len), 0);
}

static void flip_byte(const char *name, long off)
{
    char p[512];
    path_of(p, sizeof(p), name);
    FILE *f = fopen(p, "r+b");
    fseek(f, off, SEEK_SET);
    int c = fgetc(f);
    fseek(f, off, SEEK_SET);
    fputc(c ^ 0x5a, f);
    fclose(f);
}

static void write_split(const char *split, int n, int gz)
{
    uint8_t *img, *lab;
    size_t ni = make_idx(&img, 3, n, 28, 28), nl = make_idx(&lab, 1, n, 0, 0);
    char a[128], b[128];
    snprintf(a, sizeof(a), "%s-images-idx3-ubyte%s", split, gz ? ".gz" : "");
    snprintf(b, sizeof(b), "%s-labels-idx1-ubyte%s", split, gz ? ".gz" : "");
    if (gz) {
        write_gz(a, img, ni);
        write_gz(b, lab, nl);
    } else {
        write_plain(a, img, ni);
        write_plain(b, lab, nl);
    }
    free(img);
    free(lab);
}

static void test_good_files(void)
{
    write_split("train", 50, 1);
    write_split("t10k", 20, 0); /* plain files are read too */
    nn_dataset tr, te;
    ASSERT_NN_OK(nn_fashion_load(g_dir, 1, &tr));
    ASSERT_EQ(tr.n, 50);
    ASSERT_EQ(tr.h, 28);
    ASSERT_EQ(tr.labels[13], 3);
    ASSERT_EQ(tr.images[7 * 784 + 100], (7 + 100) & 255);
    ASSERT_NN_OK(nn_fashion_load(g_dir, 0, &te));
    ASSERT_EQ(te.n, 20);
    /* batch gather normalises (v/255 - mean)/std */
    uint32_t idx[2] = {7, 3};
    float x[2 * 784];
    int32_t y[2];
    nn_dataset_batch(&tr, idx, 2, x, y);
    ASSERT_EQ(y[0], 7);
    ASSERT_EQ(y[1], 3);
    ASSERT_NEAR(x[100], ((107.0 / 255.0) - tr.mean) / tr.std, 1e-5);
    nn_dataset_free(&tr);
    nn_dataset_free(&te);
}

static int contains(const char *s, const char *part)
{
    int ok = strstr(s, part) != NULL;
    if (!ok) fprintf(stderr, "  message \"%s\" lacks \"%s\"\n", s, part);
    return ok;
}

static void test_missing(void)
{
    nn_dataset ds;
    char nodir[512];
    snprintf(nodir, sizeof(nodir), "%s/nowhere", g_dir);
    ASSERT_EQ(nn_fashion_load(nodir, 1, &ds), CHORUS_ERR_INVALID_ARG);
    const char *err = nn_last_error();
    ASSERT(contains(err, "nowhere/train-images-idx3-ubyte.gz"));
    ASSERT(contains(err, "sudo apt-get install dataset-fashion-mnist"));
    ASSERT(contains(err, "--data"));
}

/* Loads the train split and expects failure with a message naming file and offset. */
static void expect_fail(const char *file, const char *part1, const char *part2)
{
    nn_dataset ds;
    ASSERT_EQ(nn_fashion_load(g_dir, 1, &ds), CHORUS_ERR_INVALID_ARG);
    const char *err = nn_last_error();
    ASSERT(contains(err, file));
    ASSERT(contains(err, part1));
    if (part2) ASSERT(contains(err, part2));
    fprintf(stderr, "  refused: %s\n", err);
}

static void test_bad_magic(void)
{
    write_split("train", 30, 1);
    uint8_t *img;
    size_t n = make_idx(&img, 3, 30, 28, 28);
    img[3] = 1; /* claims one dimension */
    write_gz("train-images-idx3-ubyte.gz", img, n);
    free(img);
    expect_fail("train-images-idx3-ubyte.gz", "bad IDX magic 0x00000801", "at byte 0");
}

static void test_truncated_gzip(void)
{
    write_split("train", 30, 1);
    long sz = file_size("train-images-idx3-ubyte.gz");
    truncate_file("train-images-idx3-ubyte.gz", sz / 2);
    expect_fail("train-images-idx3-ubyte.gz", "at byte", NULL);
}

static void test_truncated_plain(void)
{
    write_split("train", 30, 0);
    char p[512];
    path_of(p, sizeof(p), "train-images-idx3-ubyte.gz");
    unlink(p);
    path_of(p, sizeof(p), "train-labels-idx1-ubyte.gz");
    unlink(p);
    /* header (16) + 30*784 bytes; cut in the 5th image */
    truncate_file("train-images-idx3-ubyte", 16 + 4 * 784 + 10);
    expect_fail("train-images-idx3-ubyte", "truncated at byte 3162", NULL);
    path_of(p, sizeof(p), "train-images-idx3-ubyte");
    unlink(p);
    path_of(p, sizeof(p), "train-labels-idx1-ubyte");
    unlink(p);
}

static void test_corrupt_gzip(void)
{
    write_split("train", 30, 1);
    long sz = file_size("train-images-idx3-ubyte.gz");
    /* damage the deflate stream and, separately, the trailer CRC */
    flip_byte("train-images-idx3-ubyte.gz", sz / 2);
    flip_byte("train-images-idx3-ubyte.gz", sz / 2 + 1);
    expect_fail("train-images-idx3-ubyte.gz", "byte", "corrupt");
    write_split("train", 30, 1);
    sz = file_size("train-images-idx3-ubyte.gz");
    flip_byte("train-images-idx3-ubyte.gz", sz - 6); /* inside the CRC32 of the trailer */
    expect_fail("train-images-idx3-ubyte.gz", "corrupt", "byte");
}

static void test_label_mismatch(void)
{
    write_split("train", 30, 1);
    uint8_t *lab;
    size_t n = make_idx(&lab, 1, 29, 0, 0);
    write_gz("train-labels-idx1-ubyte.gz", lab, n);
    free(lab);
    expect_fail("train-labels-idx1-ubyte.gz", "29 labels", "30 images");
    write_split("train", 30, 1);
    n = make_idx(&lab, 1, 30, 0, 0);
    lab[8 + 12] = 42;
    write_gz("train-labels-idx1-ubyte.gz", lab, n);
    free(lab);
    expect_fail("train-labels-idx1-ubyte.gz", "label 42", "byte 20");
}

static void test_real_dataset(void)
{
    /* The Debian package, when installed: sizes and label range. */
    struct stat st;
    if (stat(NN_FASHION_DEFAULT_DIR "/t10k-images-idx3-ubyte.gz", &st)) {
        fprintf(stderr, "  (dataset-fashion-mnist not installed; skipped)\n");
        return;
    }
    nn_dataset te;
    ASSERT_NN_OK(nn_fashion_load(NULL, 0, &te));
    ASSERT_EQ(te.n, 10000);
    ASSERT_EQ(te.h * te.w, 784);
    int counts[10] = {0};
    for (int i = 0; i < te.n; i++) counts[te.labels[i]]++;
    for (int c = 0; c < 10; c++) ASSERT_EQ(counts[c], 1000);
    nn_dataset_free(&te);
}

int main(void)
{
    snprintf(g_dir, sizeof(g_dir), "%s/nn_data.XXXXXX",
             getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(g_dir)) {
        perror("mkdtemp");
        return 1;
    }
    TEST_RUN(test_good_files);
    TEST_RUN(test_missing);
    TEST_RUN(test_bad_magic);
    TEST_RUN(test_truncated_gzip);
    TEST_RUN(test_truncated_plain);
    TEST_RUN(test_corrupt_gzip);
    TEST_RUN(test_label_mismatch);
    TEST_RUN(test_real_dataset);
    char cmd[600];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", g_dir);
    if (system(cmd)) fprintf(stderr, "could not remove %s\n", g_dir);
    return 0;
}

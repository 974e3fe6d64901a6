/*
 * nn_text.c - the GPT's text (nn/text.c): fortune databases split into training and held-out
 * fortunes, index files and links skipped, windows of tokens, the unigram baseline, and the
 * message for a missing directory.
 */
#include <unistd.h>

#include "chorus/nn.h"
#include "harness.h"

static void put(const char *dir, const char *name, const char *text)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    ASSERT(f != NULL);
    fputs(text, f);
    ASSERT_EQ(fclose(f), 0);
}

/* 40 fortunes "f<k>" over two databases (b before a in the directory, a first by name): the
 * 20th and the 40th are held out. */
static void test_split(void)
{
    char dir[] = "/tmp/nn_text_XXXXXX";
    ASSERT(mkdtemp(dir) != NULL);
    char a[512] = "", b[512] = "";
    for (int k = 0; k < 40; k++) {
        char one[16];
        snprintf(one, sizeof(one), "f%02d\n%%\n", k);
        strcat(k < 25 ? a : b, one);
    }
    put(dir, "a", a);
    put(dir, "b", b);
    put(dir, "a.dat", "binary index, not text");
    char link[600];
    snprintf(link, sizeof(link), "%s/a.u8", dir);
    ASSERT_EQ(symlink("a", link), 0);
    nn_text tr, va;
    ASSERT_NN_OK(nn_text_load_fortunes(dir, &tr, &va));
    ASSERT_EQ(va.n, 2 * 6);
    ASSERT(!memcmp(va.bytes, "f19\n%\nf39\n%\n", 12));
    ASSERT_EQ(tr.n, 38 * 6);
    ASSERT(!memcmp(tr.bytes, "f00\n%\nf01\n%\n", 12));
    ASSERT(!memcmp(tr.bytes + 19 * 6, "f20\n%\n", 6)); /* f19 went to val */
    /* windows of 4 + 1 tokens every 4: (228 - 1) / 4 */
    ASSERT_EQ(nn_text_windows(&tr, 4), 56);
    int32_t x[4], y[4];
    nn_text_window(&tr, 4, 1, x, y); /* bytes 4..8: "%\nf01" */
    ASSERT_EQ(x[0], '%');
    ASSERT_EQ(x[1], '\n');
    ASSERT_EQ(x[3], '0');
    ASSERT_EQ(y[0], '\n');
    ASSERT_EQ(y[3], '1');
    double u = nn_text_unigram_loss(&tr, &va);
    ASSERT(u > 1.0 && u < log(256.0));
    nn_text_free(&tr);
    nn_text_free(&va);
    char cmd[600];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    ASSERT_EQ(system(cmd), 0);
}

static void test_missing(void)
{
    nn_text tr, va;
    ASSERT(nn_text_load_fortunes("/nonexistent/fortunes", &tr, &va) == CHORUS_ERR_INVALID_ARG);
    ASSERT(strstr(nn_last_error(), "sudo apt-get install fortunes") != NULL);
    ASSERT(tr.bytes == NULL && va.n == 0);
}

int main(void)
{
    test_split();
    test_missing();
    printf("nn_text: ok\n");
    return 0;
}

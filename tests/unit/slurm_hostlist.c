/* slurm_hostlist.c - Slurm's compressed host lists expand as Slurm expands them: ranges and
 * single numbers in one bracket, zero padding kept, suffixes after a bracket, several brackets
 * in one entry, several entries; malformed lists are refused. */
#include "bootstrap/hostlist.h"
#include "harness.h"

/* list must expand to exactly the hosts in want (space-separated). */
static void expect(const char *list, const char *want)
{
    char host[64], got[512] = "";
    int n = chorus__hostlist_host(list, 0, host, sizeof(host));
    for (int i = 0; i < n; i++) {
        ASSERT_EQ(chorus__hostlist_host(list, i, host, sizeof(host)), n);
        snprintf(got + strlen(got), sizeof(got) - strlen(got), "%s%s", i ? " " : "", host);
    }
    printf("%-28s -> %s\n", list, got);
    if (strcmp(got, want))
        test_fail(__FILE__, __LINE__, "%s: got '%s', want '%s'", list, got, want);
}

static void expect_bad(const char *list)
{
    char host[16] = "x";
    ASSERT_EQ(chorus__hostlist_host(list, 0, host, sizeof(host)), -1);
    ASSERT_EQ(host[0], 0);
    printf("%-28s -> refused\n", list);
}

int main(void)
{
    expect("node[1-3,5],other", "node1 node2 node3 node5 other");
    expect("h1", "h1");
    expect("h[1-2]", "h1 h2");
    expect("gpu[07-10],cpu1", "gpu07 gpu08 gpu09 gpu10 cpu1");
    expect("n[8-11]", "n8 n9 n10 n11");
    expect("rack[1-2]-n[01-02]", "rack1-n01 rack1-n02 rack2-n01 rack2-n02");
    expect("gpu[3,1]-ib,login", "gpu3-ib gpu1-ib login");
    expect("a,b[0-1],c", "a b0 b1 c");
    /* the host past the end is not written, the count still given */
    char host[16] = "";
    ASSERT_EQ(chorus__hostlist_host("h[1-2]", 5, host, sizeof(host)), 2);
    ASSERT_EQ(host[0], 0);
    expect_bad("");
    expect_bad("node[1-");
    expect_bad("node[3-1]");
    expect_bad("node[]");
    expect_bad("node1]");
    expect_bad("a,,b");
    expect_bad("node[[1]]");
    expect_bad("averyveryverylonghostname"); /* does not fit in 16 bytes */
    expect_bad("n[0-99999999]");
    printf("slurm host lists ok\n");
    return 0;
}

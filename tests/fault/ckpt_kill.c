/*
 * ckpt_kill.c - a writer killed with SIGKILL at random moments while it writes checkpoints
 * (1 MiB each, keep 2) never leaves the directory without a valid checkpoint, and the one
 * found is at least as new as the last write the writer reported complete.
 * Usage: ckpt_kill [TRIALS] (seed from CHORUS_TEST_SEED or the clock; printed).
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/base.h"
#include "chorus/checkpoint.h"
#include "harness.h"

#define PAYLOAD (1 << 20)

static void writer(const char *dir, uint64_t from, int fd)
{
    unsigned char *buf = malloc(PAYLOAD);
    for (uint64_t s = from;; s++) {
        memset(buf, (int)(s & 0xff), PAYLOAD);
        memcpy(buf, &s, sizeof(s));
        if (chorus_checkpoint_save(dir, "w", s, buf, PAYLOAD, 2) != CHORUS_OK) _exit(2);
        if (write(fd, &s, sizeof(s)) != (ssize_t)sizeof(s)) _exit(3);
    }
}

int main(int argc, char **argv)
{
    int trials = argc > 1 ? atoi(argv[1]) : 20;
    const char *sd = getenv("CHORUS_TEST_SEED");
    uint64_t seed = sd ? strtoull(sd, NULL, 10) : (uint64_t)time(NULL) ^ (uint64_t)getpid();
    printf("seed %llu (CHORUS_TEST_SEED replays it)\n", (unsigned long long)seed);
    char dir[256];
    snprintf(dir, sizeof(dir), "%s/chorus-ckpt-kill-%d",
             getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp", (int)getpid());
    uint64_t next = 1, done = 0;
    for (int t = 0; t < trials; t++) {
        int p[2];
        ASSERT_EQ(pipe(p), 0);
        pid_t pid = fork();
        ASSERT(pid >= 0);
        if (pid == 0) {
            close(p[0]);
            writer(dir, next, p[1]);
        }
        close(p[1]);
        long us = 2000 + (long)(test_rand(&seed) % 60000);
        struct timespec ts = {0, us * 1000};
        nanosleep(&ts, NULL);
        kill(pid, SIGKILL);
        int st;
        waitpid(pid, &st, 0);
        uint64_t s;
        while (read(p[0], &s, sizeof(s)) == (ssize_t)sizeof(s)) done = s;
        close(p[0]);
        if (WIFEXITED(st))
            test_fail(__FILE__, __LINE__, "writer failed with status %d", WEXITSTATUS(st));
        uint64_t step;
        void *data;
        size_t len;
        chorus_result r = chorus_checkpoint_load(dir, "w", &step, &data, &len);
        if (r != CHORUS_OK && done == 0) { /* killed before its first write ever finished */
            printf("trial %d: killed after %ld us, before any checkpoint completed\n", t, us);
            continue;
        }
        if (r != CHORUS_OK)
            test_fail(__FILE__, __LINE__, "trial %d: no valid checkpoint after a kill: %s", t,
                      chorus_last_error(NULL));
        ASSERT_EQ(len, PAYLOAD);
        uint64_t inside;
        memcpy(&inside, data, sizeof(inside));
        ASSERT_EQ(inside, step);
        ASSERT_EQ(((unsigned char *)data)[PAYLOAD - 1], step & 0xff);
        if (step < done)
            test_fail(__FILE__, __LINE__, "trial %d: found step %llu, but step %llu had completed",
                      t, (unsigned long long)step, (unsigned long long)done);
        printf("trial %d: killed after %ld us; last completed %llu, loaded %llu\n", t, us,
               (unsigned long long)done, (unsigned long long)step);
        free(data);
        next = step + 1;
    }
    /* a later successful write removes the temporary files of killed writers */
    ASSERT_OK(chorus_checkpoint_save(dir, "w", next, "x", 1, 2));
    char cmd[600];
    snprintf(cmd, sizeof(cmd), "ls -a '%s' | grep -c 'tmp$'", dir);
    FILE *f = popen(cmd, "r");
    int ntmp = -1;
    if (f && fscanf(f, "%d", &ntmp) != 1) ntmp = -1;
    if (f) pclose(f);
    ASSERT_EQ(ntmp, 0);
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    ASSERT_EQ(system(cmd), 0);
    printf("ok: %d kills during writes, a valid checkpoint every time\n", trials);
    return 0;
}

/*
 * common.h - what every part of chorus-train uses: stopping with a message that names the
 * rank, and the clock.
 */
#ifndef CHORUS_TRAIN_COMMON_H
#define CHORUS_TRAIN_COMMON_H

/* This process's rank in the job, named by die(); 0 until train_set_rank. */
extern int g_rank;
void train_set_rank(int rank);
/* Prints "chorus-train[RANK]: <message>" to stderr and exits with status 1. */
void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
/* Seconds on the monotonic clock. */
double now_s(void);

#endif /* CHORUS_TRAIN_COMMON_H */

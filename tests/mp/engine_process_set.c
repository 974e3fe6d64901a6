/*
 * engine_process_set.c - engines on split communicators (process sets): every rank starts an
 * engine on the world and one on its half (evens or odds, from chorus_comm_split), and a
 * third on a set that leaves rank 0 out. Steps interleave allreduces on all of them from the
 * main thread, with the same tensor names on each (names are per engine), waiting on every
 * handle only at the end of a step, so the engines' threads make progress concurrently; the
 * results are checked exactly, and every engine shuts down cleanly. Run with np 4.
 */
#include <stdio.h>
#include <string.h>

#include "chorus/engine.h"
#include "harness.h"

enum { N = 257, STEPS = 6, SETS = 3 };

static double value(int set, int r, int step, int i)
{
    return (double)(set * 1000 + r * 10 + step + i % 7);
}

int main(void)
{
    chorus_comm *world, *comm[SETS] = {0};
    ASSERT_OK(chorus_init(&world));
    int rank = chorus_rank(world), size = chorus_size(world);
    ASSERT(size >= 3);
    comm[0] = world;
    ASSERT_OK(chorus_comm_split(world, rank % 2, rank, &comm[1]));
    ASSERT_OK(chorus_comm_split(world, rank == 0 ? -1 : 1, rank, &comm[2]));
    ASSERT((comm[2] == NULL) == (rank == 0));
    chorus_engine *e[SETS] = {0};
    /* members of set s in world ranks: the world, this rank's parity, everyone but rank 0 */
    int member[SETS][64];
    for (int s = 0; s < SETS; s++)
        for (int r = 0; r < size; r++)
            member[s][r] = s == 0 ? 1 : s == 1 ? r % 2 == rank % 2 : r != 0;
    for (int s = 0; s < SETS; s++)
        if (comm[s]) ASSERT_OK(chorus_engine_start(comm[s], NULL, &e[s]));
    static double x[SETS][2][N], y[SETS][2][N];
    for (int step = 0; step < STEPS; step++) {
        chorus_engine_handle *h[SETS][2] = {{0}};
        /* interleaved: tensor 0 on every set, then tensor 1 on every set */
        for (int k = 0; k < 2; k++)
            for (int s = 0; s < SETS; s++) {
                if (!e[s]) continue;
                for (int i = 0; i < N; i++) x[s][k][i] = value(s, rank, step, i) + k;
                char name[32];
                snprintf(name, sizeof(name), "grad.%d", k);
                ASSERT_OK(chorus_engine_allreduce(e[s], name, x[s][k], y[s][k], N, CHORUS_FLOAT64,
                                                  k ? CHORUS_MAX : CHORUS_SUM, NULL, &h[s][k]));
            }
        for (int s = 0; s < SETS; s++)
            for (int k = 0; k < 2 && e[s]; k++) {
                ASSERT_OK(chorus_engine_wait(h[s][k]));
                chorus_engine_release(h[s][k]);
                for (int i = 0; i < N; i++) {
                    double want = 0;
                    for (int r = 0; r < size; r++) {
                        if (!member[s][r]) continue;
                        double v = value(s, r, step, i) + k;
                        want = k ? (v > want ? v : want) : want + v;
                    }
                    if (y[s][k][i] != want)
                        test_fail(__FILE__, __LINE__, "set %d tensor %d step %d [%d]: %g vs %g", s,
                                  k, step, i, y[s][k][i], want);
                }
            }
    }
    /* a barrier on each set, then shutdowns in a different order on even and odd ranks */
    for (int s = 0; s < SETS; s++)
        if (e[s]) ASSERT_OK(chorus_engine_barrier(e[s]));
    for (int j = 0; j < SETS; j++) {
        int s = rank % 2 ? SETS - 1 - j : j;
        if (e[s]) ASSERT_OK(chorus_engine_shutdown(e[s]));
    }
    if (comm[2]) ASSERT_OK(chorus_finalize(comm[2]));
    ASSERT_OK(chorus_finalize(comm[1]));
    ASSERT_OK(chorus_finalize(world));
    if (rank == 0) printf("engine_process_set: %d engines per rank, %d steps: ok\n", SETS, STEPS);
    return 0;
}

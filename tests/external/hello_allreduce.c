/* hello_allreduce.c - a program written outside Chorus: it only includes <chorus.h> and is
 * built with `pkg-config --cflags --libs chorus` against an installed copy. */
#include <chorus.h>
#include <stdio.h>

int main(void)
{
    chorus_comm *comm;
    chorus_result r = chorus_init(&comm);
    if (r != CHORUS_OK) {
        fprintf(stderr, "chorus_init: %s: %s\n", chorus_strerror(r), chorus_last_error(NULL));
        return 1;
    }
    int rank = chorus_rank(comm), size = chorus_size(comm);
    double x[3] = {rank, 1.0, (double)rank * rank};
    r = chorus_allreduce(comm, x, x, 3, CHORUS_FLOAT64, CHORUS_SUM);
    if (r != CHORUS_OK) {
        fprintf(stderr, "allreduce: %s: %s\n", chorus_strerror(r), chorus_last_error(comm));
        return 1;
    }
    double want0 = size * (size - 1) / 2.0, want2 = 0;
    for (int i = 0; i < size; i++) want2 += (double)i * i;
    int ok = x[0] == want0 && x[1] == size && x[2] == want2;
    printf("rank %d of %d (local %d of %d): %s\n", rank, size, chorus_local_rank(comm),
           chorus_local_size(comm), ok ? "correct" : "WRONG");
    chorus_finalize(comm);
    return ok ? 0 : 1;
}

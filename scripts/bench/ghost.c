/* Ghost-mode costs a program sees: the time MPI_Init takes (the largest over the ranks),
 * and one passive-target epoch on an MPI_Win_allocate window: lock(EXCLUSIVE, target), a
 * one-element MPI_Get, unlock, as OpenCoarrays does per element of a strided get. Prints
 * `init_ms <ms> epoch_us <us>` on rank 0. Usage: ghost [epochs] */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}

int main(int argc, char **argv) {
    double t0 = now();
    MPI_Init(&argc, &argv);
    double init = now() - t0, worst;
    int me, n, epochs = argc > 1 ? atoi(argv[1]) : 2000;
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    MPI_Reduce(&init, &worst, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    double *mem, x = 0;
    MPI_Win w;
    MPI_Win_allocate(64 * sizeof(double), sizeof(double), MPI_INFO_NULL, MPI_COMM_WORLD, &mem, &w);
    for (int i = 0; i < 64; i++) mem[i] = me;
    MPI_Barrier(MPI_COMM_WORLD);
    double t = 0;
    if (me == 0) {
        int to = (me + 1) % n;
        t = now();
        for (int i = 0; i < epochs; i++) {
            MPI_Win_lock(MPI_LOCK_EXCLUSIVE, to, 0, w);
            MPI_Get(&x, 1, MPI_DOUBLE, to, i % 64, 1, MPI_DOUBLE, w);
            MPI_Win_unlock(to, w);
        }
        t = now() - t;
        if (x != to) fprintf(stderr, "wrong value %g\n", x);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Win_free(&w);
    if (me == 0) printf("init_ms %.1f epoch_us %.2f\n", 1e3 * worst, 1e6 * t / epochs);
    MPI_Finalize();
    return 0;
}

/* A rank killed with SIGKILL in the middle of shared-memory collectives (issue 34): rank
 * KILL_RANK (default 1) raises SIGKILL during its KILL_AT-th Allreduce/Bcast pair while the
 * others keep going. Nothing may hang (the launcher ends the job) and nothing may be left in
 * /dev/shm (scripts/tests/shm-tests checks both, running it with SHIM_TRANSPORT=shm and
 * SHIM_SHM_AFTER=0, so the node transport carries every collective). Rank 0 prints "ready"
 * after 20 of them. */
#include <mpi.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    const char *k = getenv("KILL_RANK"), *a = getenv("KILL_AT");
    int victim = k ? atoi(k) : 1, at = a ? atoi(a) : 200;
    MPI_Comm comm;
    MPI_Comm_dup(MPI_COMM_WORLD, &comm);
    double x[4] = {1, 2, 3, 4}, y[4];
    for (long i = 0;; i++) {
        MPI_Allreduce(x, y, 4, MPI_DOUBLE, MPI_SUM, comm);
        if (i == 20 && rank == 0) {
            printf("ready\n");
            fflush(stdout);
        }
        if (rank == victim && i == at) raise(SIGKILL);
        MPI_Bcast(x, 4, MPI_DOUBLE, (int)(i % size), comm);
    }
    MPI_Finalize();
    return 0;
}

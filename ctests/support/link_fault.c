/* A job that runs until rank 0 says stop: 8-byte MPI_Allreduce (MPI_MAX of rank 0's "stop"
 * flag) every millisecond, for LF_SECONDS (default 120). scripts/tests/cluster-tests takes a
 * node's link down while it runs: with SHIM_TIMEOUT the job must end with an error soon
 * after, not hang (natively every rank waits forever). Prints "running" once the ranks
 * have exchanged data, then a line every 500 rounds. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    double dur = getenv("LF_SECONDS") ? atof(getenv("LF_SECONDS")) : 120;
    double t0 = MPI_Wtime();
    for (long it = 1;; it++) {
        double stop = rank == 0 && MPI_Wtime() - t0 > dur, any;
        MPI_Allreduce(&stop, &any, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        if (any > 0) break;
        if (rank == 0 && (it == 1 || it % 500 == 0)) {
            printf(it == 1 ? "running\n" : "t=%.1f s, %ld rounds\n", MPI_Wtime() - t0, it);
            fflush(stdout);
        }
        usleep(1000);
    }
    printf("rank %d done\n", rank);
    MPI_Finalize();
    return 0;
}

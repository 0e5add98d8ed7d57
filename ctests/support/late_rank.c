/* Rank 1 reaches the Barrier LATE_SECONDS (default 30) after the others: with SHIM_TIMEOUT
 * below that, the others' MPI_Barrier must end the job with the shim's message instead of
 * waiting (scripts/tests/launch-tests). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (rank == 1) sleep(getenv("LATE_SECONDS") ? atoi(getenv("LATE_SECONDS")) : 30);
    MPI_Barrier(MPI_COMM_WORLD);
    printf("late_rank %d done\n", rank);
    MPI_Finalize();
    return 0;
}

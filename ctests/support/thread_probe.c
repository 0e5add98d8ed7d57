/* Asks for MPI_THREAD_FUNNELED: the shim may initialize the MPI library with
 * MPI_THREAD_MULTIPLE for its progress thread, but the application must be told (by
 * MPI_Init_thread and MPI_Query_thread) the level it asked for. */
#include <mpi.h>
#include <stdio.h>
int main(int argc, char **argv) {
    int provided, q, rank, x = 1, y;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
    MPI_Query_thread(&q);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Request r;
    MPI_Iallreduce(&x, &y, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &r);
    MPI_Wait(&r, MPI_STATUS_IGNORE);
    if (rank == 0) printf("levels %d %d\n", provided, q);
    MPI_Finalize();
    return 0;
}

/* Asks for MPI_THREAD_FUNNELED (THREAD_PROBE_LEVEL: another level, as a number): the shim may initialize the MPI library with
 * MPI_THREAD_MULTIPLE for its progress thread, but the application must be told (by
 * MPI_Init_thread and MPI_Query_thread) the level it asked for. Also prints the
 * library's own level (PMPI_Query_thread). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
int main(int argc, char **argv) {
    int provided, q, rank, x = 1, y;
    const char *want = getenv("THREAD_PROBE_LEVEL");
    MPI_Init_thread(&argc, &argv, want ? atoi(want) : MPI_THREAD_FUNNELED, &provided);
    MPI_Query_thread(&q);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Request r;
    MPI_Iallreduce(&x, &y, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &r);
    MPI_Wait(&r, MPI_STATUS_IGNORE);
    int lib;
    PMPI_Query_thread(&lib); /* the level the MPI library itself runs at */
    if (rank == 0) printf("levels %d %d library %d\n", provided, q, lib);
    MPI_Finalize();
    return 0;
}

/* A small MPI program for the launch tests: a few collectives, then finalize. */
#include <mpi.h>
#include <stdio.h>
int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, x, y;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    x = rank;
    for (int i = 0; i < 5; i++) MPI_Allreduce(&x, &y, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) printf("stats_probe done\n");
    MPI_Finalize();
    return 0;
}

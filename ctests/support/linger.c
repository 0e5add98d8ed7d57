/* Every rank stays LINGER_MS (default 300) after MPI_Finalize before it exits, so that a
 * ghost process (SHIM_GHOSTS), which finalizes with its users, leaves before them. MPICH
 * 4.1 and later tell hydra that a process finalized only when it exits; a ghost that ended
 * without the library's exit handlers made hydra kill the whole job (scripts/tests/ghost-tests). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size, *base;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Win win;
    MPI_Win_allocate(sizeof(int), sizeof(int), MPI_INFO_NULL, MPI_COMM_WORLD, &base, &win);
    MPI_Win_free(&win);
    MPI_Finalize();
    usleep(1000 * (getenv("LINGER_MS") ? atoi(getenv("LINGER_MS")) : 300));
    if (rank == 0) printf("PASS linger (%d ranks)\n", size);
    return 0;
}

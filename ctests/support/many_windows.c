/* Many windows alive at once, each used for RMA (the pattern of Global Arrays, which keeps
 * one window per array: NWChem's DFT holds more than 64). With ghosts (SHIM_GHOSTS) every
 * window's memory is attached to its ghost's dynamic window; Open MPI's default one-sided
 * component (osc/rdma) limits a dynamic window to osc_rdma_max_attach regions (64 in 4.1),
 * and the ghost's MPI_Win_attach failed at the 65th window, ending the job.
 * Usage: many_windows [N]   (N windows, default 100). Prints "PASS many_windows N". */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#define CHECK(c, ...)                                                                   \
    do {                                                                                \
        if (!(c)) {                                                                     \
            fprintf(stderr, "FAIL rank %d: ", rank);                                    \
            fprintf(stderr, __VA_ARGS__);                                               \
            fprintf(stderr, "\n");                                                      \
            MPI_Abort(MPI_COMM_WORLD, 1);                                               \
        }                                                                               \
    } while (0)

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int n = argc > 1 ? atoi(argv[1]) : 100;
    MPI_Win *wins = calloc(n, sizeof *wins);
    int **bases = calloc(n, sizeof *bases);
    for (int i = 0; i < n; i++) {
        int rc = MPI_Win_allocate(sizeof(int) * size, sizeof(int), MPI_INFO_NULL, MPI_COMM_WORLD,
                                  &bases[i], &wins[i]);
        CHECK(rc == MPI_SUCCESS, "MPI_Win_allocate of window %d returned %d", i, rc);
        MPI_Win_lock(MPI_LOCK_EXCLUSIVE, rank, 0, wins[i]);
        for (int j = 0; j < size; j++) bases[i][j] = -1;
        MPI_Win_unlock(rank, wins[i]);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    /* every rank puts (window, rank) into its slot at every other rank, in every window */
    for (int i = 0; i < n; i++) {
        int v = i * 1000 + rank;
        for (int t = 0; t < size; t++) {
            MPI_Win_lock(MPI_LOCK_SHARED, t, 0, wins[i]);
            MPI_Put(&v, 1, MPI_INT, t, rank, 1, MPI_INT, wins[i]);
            MPI_Win_unlock(t, wins[i]);
        }
    }
    MPI_Barrier(MPI_COMM_WORLD);
    for (int i = 0; i < n; i++) {
        MPI_Win_lock(MPI_LOCK_SHARED, rank, 0, wins[i]);
        for (int j = 0; j < size; j++)
            CHECK(bases[i][j] == i * 1000 + j, "window %d slot %d holds %d, want %d", i, j,
                  bases[i][j], i * 1000 + j);
        MPI_Win_unlock(rank, wins[i]);
    }
    for (int i = n - 1; i >= 0; i--) MPI_Win_free(&wins[i]);
    free(wins);
    free(bases);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) printf("PASS many_windows %d\n", n);
    MPI_Finalize();
    return 0;
}

/* The shim's cost on its fast lane: a memoized 8-byte MPI_Allreduce (MPI_DOUBLE, MPI_SUM),
 * MPI_Bcast and MPI_Gatherv, repeated with unchanged arguments, so that every call after
 * the first matches the shim's memo of the last call handed to the system MPI
 * (src/coll/memo.rs). Meant for 1 rank under callgrind (scripts/bench/fastlane counts the
 * instructions); run it with libshim preloaded.
 *
 * Usage: fastlane allreduce|bcast|gatherv|all N
 *   calls the named collective (or each of the three in turn) N times. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s allreduce|bcast|gatherv|all N\n", argv[0]);
        return 2;
    }
    const char *what = argv[1];
    long n = atol(argv[2]);
    int all = !strcmp(what, "all");
    int ar = all || !strcmp(what, "allreduce");
    int bc = all || !strcmp(what, "bcast");
    int gv = all || !strcmp(what, "gatherv");
    if (!(ar || bc || gv) || n < 0) {
        fprintf(stderr, "%s: unknown collective %s\n", argv[0], what);
        return 2;
    }
    MPI_Init(&argc, &argv);
    int size;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    double x = 1.0, y = 0.0;
    double *gathered = calloc((size_t)size, sizeof(double));
    int *counts = malloc((size_t)size * sizeof(int));
    int *displs = malloc((size_t)size * sizeof(int));
    for (int i = 0; i < size; i++) counts[i] = 1, displs[i] = i;
    for (long i = 0; i < n; i++) {
        if (ar) MPI_Allreduce(&x, &y, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        if (bc) MPI_Bcast(&x, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
        if (gv) MPI_Gatherv(&x, 1, MPI_DOUBLE, gathered, counts, displs, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    }
    if (ar && n > 0 && y != x * size) {
        fprintf(stderr, "fastlane: Allreduce gave %g, expected %g\n", y, x * size);
        return 1;
    }
    MPI_Finalize();
    free(gathered);
    free(counts);
    free(displs);
    return 0;
}

/* Prints the libshim `auto` decision table (which algorithm each collective gets per
 * message size) for communicators of the given sizes, through shim_decision_table.
 * Run with libshim.so preloaded (scripts/tools/shim-decisions does); any SHIM_TUNING_FILE or
 * SHIM_<COLL>_ALGORITHM in the environment is taken into account.
 * Usage: decisions [-n] [ranks ...]   (-n: non-blocking calls; default ranks 2 4 8 16 64) */
#include <dlfcn.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    int (*table)(int, const int *, int, char *, size_t) =
        (int (*)(int, const int *, int, char *, size_t))dlsym(RTLD_DEFAULT, "shim_decision_table");
    if (!table) {
        fprintf(stderr, "decisions: libshim.so is not loaded (shim_decision_table not found)\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    int sizes[64], n = 0, nonblocking = 0;
    for (int i = 1; i < argc && n < 64; i++) {
        if (!strcmp(argv[i], "-n")) nonblocking = 1;
        else if (atoi(argv[i]) > 0) sizes[n++] = atoi(argv[i]);
        else {
            fprintf(stderr, "decisions: bad argument %s (want -n or a process count)\n", argv[i]);
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
    }
    if (n == 0) {
        int d[] = {2, 4, 8, 16, 64};
        for (n = 0; n < 5; n++) sizes[n] = d[n];
    }
    int need = table(n, sizes, nonblocking, NULL, 0);
    char *buf = malloc(need);
    table(n, sizes, nonblocking, buf, need);
    if (rank == 0) fputs(buf, stdout);
    free(buf);
    MPI_Finalize();
    return 0;
}

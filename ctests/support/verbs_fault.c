/* The verbs backend under injected faults (issue 36): collectives whose messages go over the
 * emulated HCA (SHIM_TRANSPORT=verbs, SHIM_VERBS_LIB=libshim-ibemu.so) while the HCA fails
 * one work request on one rank (IBEMU_FAULT, IBEMU_FAULT_RANK). With MPI_ERRORS_RETURN on
 * the communicator, the collective that meets the fault must return an error class (not
 * hang, not return success with wrong data); this program then prints the class and ends
 * the job with MPI_Abort, as an application that checks errors does (MPI-4.0 §9.3: after
 * an error the state of MPI is undefined, so the others may be left waiting).
 *
 * With VERBS_FAULT_FINALIZE=1 the program instead stops calling collectives at the error
 * and finalizes: the other ranks, waiting for a rank whose network failed, must be told
 * and get an error class too (not wait forever), and the job ends normally.
 *
 * Correct results are checked on every iteration before the fault, so a fault that
 * corrupted data silently would show as "WRONG".
 * Usage: verbs_fault [iterations] (default 200) */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
    int iters = argc > 1 ? atoi(argv[1]) : 200;
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    const char *fin = getenv("VERBS_FAULT_FINALIZE");
    int finalize_on_error = fin && atoi(fin);
    /* 8 B, 64 KiB and every tenth time 3 MiB: eager messages, rendezvous (RDMA writes),
     * and writes cut in 1 MiB pieces over several queue pairs */
    const int big = 8192, huge = 3 << 17;
    double *a = malloc(sizeof(double) * huge), *b = malloc(sizeof(double) * huge);
    int failed = 0;
    for (int it = 0; it < iters && !failed; it++) {
        int n = it % 10 == 9 ? huge : (it % 2) ? big : 1;
        for (int i = 0; i < n; i++) a[i] = rank + i + it;
        int rc = MPI_Allreduce(a, b, n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        if (rc == MPI_SUCCESS) {
            for (int i = 0; i < n; i++) {
                double want = (double)size * (i + it) + (double)size * (size - 1) / 2;
                if (b[i] != want) {
                    printf("WRONG rank %d iteration %d element %d: %g, expected %g\n", rank, it, i,
                           b[i], want);
                    fflush(stdout);
                    MPI_Abort(MPI_COMM_WORLD, 2);
                }
            }
            if (rank == 0) for (int i = 0; i < n; i++) a[i] = i - it;
            rc = MPI_Bcast(a, n, MPI_DOUBLE, 0, MPI_COMM_WORLD);
            if (rc == MPI_SUCCESS)
                for (int i = 0; i < n; i++)
                    if (a[i] != i - it) {
                        printf("WRONG Bcast rank %d iteration %d\n", rank, it);
                        fflush(stdout);
                        MPI_Abort(MPI_COMM_WORLD, 2);
                    }
        }
        if (rc != MPI_SUCCESS) {
            int cls;
            char msg[MPI_MAX_ERROR_STRING];
            int len;
            MPI_Error_class(rc, &cls);
            MPI_Error_string(rc, msg, &len);
            printf("ERROR rank %d iteration %d class %d: %s\n", rank, it, cls, msg);
            fflush(stdout);
            failed = 1;
            if (finalize_on_error) break;
            MPI_Abort(MPI_COMM_WORLD, 3);
        }
    }
    if (rank == 0 && !failed) printf("no error in %d iterations\n", iters);
    free(a);
    free(b);
    MPI_Finalize();
    return 0;
}

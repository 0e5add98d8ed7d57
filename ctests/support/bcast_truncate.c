/* A Bcast whose receiver passes a smaller count than the root's (erroneous, MPI-4.0 §6.1:
 * the amount of data sent must equal the amount received): the short rank must get
 * MPI_ERR_TRUNCATE, as a short receive does (MPI-4.0 §3.2.2) and as the library reports it,
 * never MPI_SUCCESS with the first bytes only. Run by scripts/tests/shm-tests with the
 * segment forced (SHIM_TRANSPORT=shm SHIM_SHM_AFTER=0), on one node and on nodes MPICH
 * emulates (MPIR_CVAR_NUM_CLIQUES), where the two-level Bcast fills a leader's slot for
 * its node.
 * For each form (blocking, I*, persistent), each size (BT_SIZES, in ints: with a 256-byte
 * slot, the root's and the short rank's data both in the slot, then both beyond it), each
 * short rank r (root 0; every other rank in turn): rank r passes half the root's count, the
 * others the root's. (Sizes on both sides of a selection threshold would let the short
 * rank choose another algorithm than the root's: README, "Not yet there".) Then a valid Bcast on the same communicator
 * must deliver the root's data everywhere (the program goes on, MPI-4.0 §9.3).
 * Skipped: a short leader beyond the slot on emulated nodes (BT_LEADERS: ranks that lead a
 * node): the leaders' pipelined messages then leave the root's last chunks unmatched.
 * Prints "PASS bcast_truncate" or the failures. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rank, size, failures;

static int run(int form, int *buf, int count, MPI_Comm comm) {
    MPI_Request r;
    int rc;
    switch (form) {
    case 0: return MPI_Bcast(buf, count, MPI_INT, 0, comm);
    case 1:
        rc = MPI_Ibcast(buf, count, MPI_INT, 0, comm, &r);
        return rc != MPI_SUCCESS ? rc : MPI_Wait(&r, MPI_STATUS_IGNORE);
    default:
        rc = MPI_Bcast_init(buf, count, MPI_INT, 0, comm, MPI_INFO_NULL, &r);
        if (rc != MPI_SUCCESS) return rc;
        rc = MPI_Start(&r);
        if (rc == MPI_SUCCESS) rc = MPI_Wait(&r, MPI_STATUS_IGNORE);
        MPI_Request_free(&r);
        return rc;
    }
}

int main(int argc, char **argv) {
    static const char *forms[] = {"MPI_Bcast", "MPI_Ibcast", "MPI_Bcast_init"};
    int sizes[8], nsizes = 0, leader[64] = {0};
    MPI_Init(&argc, &argv);
    setvbuf(stdout, NULL, _IONBF, 0);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    char *s = getenv("BT_SIZES") ? strdup(getenv("BT_SIZES")) : strdup("20,2000");
    for (char *t = strtok(s, ","); t && nsizes < 8; t = strtok(NULL, ",")) sizes[nsizes++] = atoi(t);
    free(s);
    if (getenv("BT_LEADERS")) {
        char *l = strdup(getenv("BT_LEADERS"));
        for (char *t = strtok(l, ","); t; t = strtok(NULL, ",")) leader[atoi(t) & 63] = 1;
        free(l);
    }
    MPI_Comm comm;
    MPI_Comm_dup(MPI_COMM_WORLD, &comm);
    MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
    for (int form = 0; form < 3; form++) {
        for (int z = 0; z < nsizes; z++) {
            for (int shortr = 1; shortr < size; shortr++) {
                int n = sizes[z];
                if (z > 0 && leader[shortr]) continue;
                int *buf = malloc(sizeof(int) * 2 * n);
                for (int i = 0; i < 2 * n; i++) buf[i] = rank == 0 ? i : -1;
                int rc = run(form, buf, rank == shortr ? n : 2 * n, comm);
                int cls = rc;
                if (rc != MPI_SUCCESS) MPI_Error_class(rc, &cls);
                if (rank == shortr && cls != MPI_ERR_TRUNCATE) {
                    printf("FAIL %s of %d ints from rank 0, rank %d passing %d: class %d, want "
                           "MPI_ERR_TRUNCATE (%d)\n", forms[form], 2 * n, rank, n, cls, MPI_ERR_TRUNCATE);
                    failures++;
                } else if (rank != shortr && cls != MPI_SUCCESS && cls != MPI_ERR_TRUNCATE) {
                    printf("FAIL %s of %d ints, rank %d short: rank %d got class %d\n", forms[form],
                           2 * n, shortr, rank, cls);
                    failures++;
                }
                /* the program goes on: a valid Bcast on the same communicator */
                for (int i = 0; i < 2 * n; i++) buf[i] = rank == 0 ? 7 * i + 1 : -1;
                rc = run(form, buf, 2 * n, comm);
                int bad = rc != MPI_SUCCESS;
                for (int i = 0; i < 2 * n && !bad; i++) bad = buf[i] != 7 * i + 1;
                if (bad) {
                    printf("FAIL %s of %d ints after the one with rank %d short: rank %d rc %d, "
                           "data wrong\n", forms[form], 2 * n, shortr, rank, rc);
                    failures++;
                }
                free(buf);
            }
        }
    }
    MPI_Comm_free(&comm);
    int all;
    MPI_Allreduce(&failures, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0 && all == 0) printf("PASS bcast_truncate\n");
    MPI_Finalize();
    return all != 0;
}

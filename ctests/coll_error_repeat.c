/* A collective that fails on its arguments, repeated, between correct ones (issue 34): with
 * MPI_ERRORS_RETURN the program may go on after an erroneous call, and the next correct
 * collectives must still complete. Under the shim every communicator gets a shared-memory
 * segment at its fifth blocking collective (SHIM_SHM_AFTER); a call that took its turn there
 * and then stopped at a bad argument must not leave the turn unused, or the collective
 * SHIM_SHM_DEPTH turns later waits for it forever. Each round: Alltoall with a valid receive
 * side and an invalid send type (MPI_ERR_TYPE), the same for Allreduce's count (-1:
 * MPI_ERR_COUNT, found before the decision) and Bcast with an invalid root, then a correct
 * Alltoall and Allreduce checked against the expected values. */
#include "common.h"

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_size);
    MPI_Comm comm;
    MPI_OK(MPI_Comm_dup(MPI_COMM_WORLD, &comm));
    MPI_OK(MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN));
    for (int i = 0; i < 6; i++) MPI_OK(MPI_Barrier(comm)); /* past SHIM_SHM_AFTER */
    int n = g_size;
    int *s = malloc(sizeof(int) * n), *r = malloc(sizeof(int) * n);
    for (int round = 0; round < 12; round++) {
        for (int i = 0; i < n; i++) s[i] = 1000 * round + 10 * g_rank + i;
        int rc = MPI_Alltoall(s, 1, MPI_DATATYPE_NULL, r, 1, MPI_INT, comm);
        int cls = -1;
        MPI_Error_class(rc, &cls);
        CHECK(cls == MPI_ERR_TYPE, "round %d: Alltoall with MPI_DATATYPE_NULL gave class %d", round, cls);
        rc = MPI_Bcast(s, 1, MPI_INT, n + 3, comm);
        MPI_Error_class(rc, &cls);
        CHECK(cls == MPI_ERR_ROOT, "round %d: Bcast with root %d gave class %d", round, n + 3, cls);
        MPI_OK(MPI_Alltoall(s, 1, MPI_INT, r, 1, MPI_INT, comm));
        for (int i = 0; i < n; i++)
            CHECK(r[i] == 1000 * round + 10 * i + g_rank, "round %d: block %d = %d", round, i, r[i]);
        int x = g_rank + round, y = -1;
        MPI_OK(MPI_Allreduce(&x, &y, 1, MPI_INT, MPI_SUM, comm));
        CHECK(y == n * (n - 1) / 2 + n * round, "round %d: sum %d", round, y);
    }
    const char *names[] = {"MPI_Alltoall", "MPI_Allreduce"};
    check_intercepted(names, 2);
    free(s);
    free(r);
    MPI_OK(MPI_Comm_free(&comm));
    MPI_Finalize();
    if (g_rank == 0) printf("coll_error_repeat: ok\n");
    return 0;
}

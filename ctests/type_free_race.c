/* Datatypes freed right after a non-blocking collective completes, and new ones created at
 * once (mpi4py's test_cco_nb_vec testAlltoallwBottom, which hung with the progress thread).
 *
 * Each round builds one struct type per peer and direction (absolute addresses, sent from
 * MPI_BOTTOM), runs MPI_Ialltoallw on a duplicate of MPI_COMM_WORLD, waits, frees the
 * types and checks the data. With SHIM_PROGRESS=thread the progress thread may still
 * hold the finished schedule when MPI_Wait returns: the program's MPI_Type_free is then
 * deferred, and the system MPI's free runs on the progress thread while the program's
 * next round already creates types, which MPICH gives the freed handles. The shim records
 * freed handles (core::retain); a record written after the library had the handle back
 * marked the program's new type as freed, so that rank alone refused the next collective
 * (MPI_ERR_TYPE) and the others waited for it forever, or refused the program's
 * MPI_Type_free of it. Errors return here (MPI_ERRORS_RETURN on the world, whose handler
 * takes errors of calls without a communicator, and on the duplicate), so such a refusal
 * fails the test at once instead of hanging it. */
#include "common.h"

int main(int argc, char **argv) {
    test_init(&argc, &argv);
    MPI_OK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    MPI_Comm comm;
    MPI_OK(MPI_Comm_dup(MPI_COMM_WORLD, &comm));
    MPI_OK(MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN));
    int size = g_size;
    /* the race is in each round's window; fewer rounds where 8 ranks share 2 cores */
    int rounds = size <= 3 ? 3000 : 9000 / size;
    int *counts = malloc(sizeof(int) * size), *displs = malloc(sizeof(int) * size);
    MPI_Datatype *st = malloc(sizeof(MPI_Datatype) * size), *rt = malloc(sizeof(MPI_Datatype) * size);
    for (int i = 0; i < size; i++) counts[i] = 1, displs[i] = 0;
    for (int round = 0; round < rounds; round++) {
        int n = 1 + round % (size + 2);
        int *sbuf = malloc(sizeof(int) * size * n), *rbuf = malloc(sizeof(int) * size * n);
        for (int i = 0; i < size * n; i++) sbuf[i] = g_rank * 1000 + round % 1000, rbuf[i] = -1;
        MPI_Aint saddr, raddr;
        MPI_OK(MPI_Get_address(sbuf, &saddr));
        MPI_OK(MPI_Get_address(rbuf, &raddr));
        for (int i = 0; i < size; i++) {
            MPI_Aint sd = saddr + (MPI_Aint)sizeof(int) * n * i, rd = raddr + (MPI_Aint)sizeof(int) * n * i;
            MPI_Datatype base = MPI_INT;
            MPI_OK(MPI_Type_create_struct(1, &n, &sd, &base, &st[i]));
            MPI_OK(MPI_Type_commit(&st[i]));
            MPI_OK(MPI_Type_create_struct(1, &n, &rd, &base, &rt[i]));
            MPI_OK(MPI_Type_commit(&rt[i]));
        }
        MPI_Request req;
        int rc = MPI_Ialltoallw(MPI_BOTTOM, counts, displs, st, MPI_BOTTOM, counts, displs, rt, comm, &req);
        CHECK(rc == MPI_SUCCESS, "round %d: MPI_Ialltoallw returned %d (a live datatype refused?)", round, rc);
        MPI_OK(MPI_Wait(&req, MPI_STATUS_IGNORE));
        for (int i = 0; i < 2 * size; i++) {
            MPI_Datatype *t = i < size ? &st[i] : &rt[i - size];
            rc = MPI_Type_free(t);
            CHECK(rc == MPI_SUCCESS, "round %d: MPI_Type_free of a live datatype returned %d", round, rc);
            CHECK(*t == MPI_DATATYPE_NULL, "MPI_Type_free left the handle");
        }
        for (int p = 0; p < size; p++)
            for (int k = 0; k < n; k++)
                CHECK(rbuf[p * n + k] == p * 1000 + round % 1000, "round %d: rbuf[%d] = %d from rank %d", round,
                      p * n + k, rbuf[p * n + k], p);
        free(sbuf);
        free(rbuf);
    }
    /* a freed handle is still refused where no new type took it (MPI-4.0 §2.5.1) */
    MPI_Datatype t, dead;
    MPI_OK(MPI_Type_contiguous(2, MPI_INT, &t));
    MPI_OK(MPI_Type_commit(&t));
    dead = t;
    MPI_OK(MPI_Type_free(&t));
    int x[2] = {0, 0};
    MPI_Request req;
    if (expect_shim()) {
        int rc = MPI_Ibcast(x, 1, dead, 0, comm, &req);
        int cls = MPI_SUCCESS;
        if (rc != MPI_SUCCESS) MPI_Error_class(rc, &cls);
        CHECK(cls == MPI_ERR_TYPE, "MPI_Ibcast of a freed datatype returned %d (class %d)", rc, cls);
    }
    const char *names[] = {"MPI_Ialltoallw", "MPI_Type_free"};
    check_intercepted(names, 2);
    free(counts);
    free(displs);
    free(st);
    free(rt);
    MPI_OK(MPI_Comm_free(&comm));
    test_pass("type_free_race");
    MPI_Finalize();
    return 0;
}

/* Reproductions of MPI libraries' own problems found by scripts/tests/matrix (README,
 * "Problems of the system MPI the tests ran into"), without the shim. Each probe prints
 * "ok" or "WRONG: ..." (or the job dies in it) and the exit status is the number of wrong
 * probes.
 * Build and run with one library's environment, e.g.
 *   eval "$(scripts/tools/mpi-env ompi5)"; $MPICC -o /tmp/p ctests/support/mpi_problems.c && $MPIRUN -n 2 /tmp/p
 * Usage: mpi_problems [probe ...]   (default: every probe) */
#include <mpi.h>
#include <stdio.h>
#include <string.h>

static int rank;

/* MPI_Pack of two MPI_C_DOUBLE_COMPLEX 24 bytes apart (an hvector) must give bytes 0-15
 * and 24-39 of the buffer. */
static int pack_hvector_complex(char *why) {
    unsigned char src[48], out[32];
    int pos = 0, bad = 0;
    for (int i = 0; i < 48; i++) src[i] = (unsigned char)i;
    MPI_Datatype t;
    MPI_Type_create_hvector(2, 1, 24, MPI_C_DOUBLE_COMPLEX, &t);
    MPI_Type_commit(&t);
    MPI_Pack(src, 1, t, out, sizeof out, &pos, MPI_COMM_WORLD);
    for (int i = 0; i < 32; i++) bad |= out[i] != (i < 16 ? i : i + 8);
    if (bad) sprintf(why, "packed bytes 16-23 are source bytes %d-%d (the gap), want 24-31", out[16], out[23]);
    MPI_Type_free(&t);
    return bad;
}

/* MPI_Type_create_darray over an old type of size and extent 0 (an hindexed type of one
 * empty block) is valid (MPI-4.1 §5.1.4 puts no bound on the old type). */
static int darray_empty(char *why) {
    int bl = 0, gs = 6, di = MPI_DISTRIBUTE_CYCLIC, da = 2, ps = 2;
    MPI_Aint d = 0;
    MPI_Datatype empty, t;
    MPI_Type_create_hindexed(1, &bl, &d, MPI_DOUBLE, &empty);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    int rc = MPI_Type_create_darray(2, 0, 1, &gs, &di, &da, &ps, MPI_ORDER_C, empty, &t);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
    if (rc == MPI_SUCCESS) MPI_Type_free(&t);
    MPI_Type_free(&empty);
    if (rc != MPI_SUCCESS) {
        int len;
        strcpy(why, "returned ");
        MPI_Error_string(rc, why + strlen(why), &len);
    }
    return rc != MPI_SUCCESS;
}

/* MPI_Comm_free with an MPI_Iallreduce pending on the communicator: the free only marks it
 * (MPI-4.1 §7.4.3), the reduction completes. 200 rounds. */
static int iallreduce_comm_free(char *why) {
    for (int round = 0; round < 200; round++) {
        MPI_Comm c;
        MPI_Request r;
        int x = rank + round, sum = 0, size;
        MPI_Comm_dup(MPI_COMM_WORLD, &c);
        MPI_Comm_size(c, &size);
        MPI_Iallreduce(&x, &sum, 1, MPI_INT, MPI_SUM, c, &r);
        MPI_Comm_free(&c);
        MPI_Wait(&r, MPI_STATUS_IGNORE);
        if (sum != size * (size - 1) / 2 + size * round) {
            sprintf(why, "round %d: sum %d", round, sum);
            return 1;
        }
    }
    return 0;
}

/* MPI_Scatterv on an intercommunicator of 1+1 processes: the root sends one
 * vector(2, 2, 3) of MPI_INT (4 ints), the other side receives 2 of
 * resized(indexed({1,1}, {-2,1}), lb -3, extent 6) of MPI_INT (4 ints, negative
 * displacements): the same type signature (MPI-4.1 §6.6), so the call must succeed. */
static int scatterv_inter_resized(char *why) {
    int size;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size != 2) return 0;
    MPI_Comm local, inter;
    MPI_Comm_split(MPI_COMM_WORLD, rank, 0, &local);
    MPI_Intercomm_create(local, 0, MPI_COMM_WORLD, 1 - rank, 7, &inter);
    MPI_Comm_set_errhandler(inter, MPI_ERRORS_RETURN);
    MPI_Datatype vec, idx, rs;
    MPI_Type_vector(2, 2, 3, MPI_INT, &vec);
    MPI_Type_commit(&vec);
    int bl[] = {1, 1}, d[] = {-2, 1};
    MPI_Type_indexed(2, bl, d, MPI_INT, &idx);
    MPI_Type_create_resized(idx, -3 * (MPI_Aint)sizeof(int), 6 * (MPI_Aint)sizeof(int), &rs);
    MPI_Type_commit(&rs);
    int sbuf[8] = {1, 2, 0, 3, 4, 0, 0, 0}, rbuf[32], one = 1, zero = 0, rc;
    for (int i = 0; i < 32; i++) rbuf[i] = -1;
    if (rank == 0)
        rc = MPI_Scatterv(sbuf, &one, &zero, vec, NULL, 0, rs, MPI_ROOT, inter);
    else /* the receive buffer starts 3 ints before rbuf + 8 (the type's lb) */
        rc = MPI_Scatterv(NULL, NULL, NULL, vec, rbuf + 8, 2, rs, 0, inter);
    int bad = rc != MPI_SUCCESS;
    if (bad) {
        int len;
        strcpy(why, "returned ");
        MPI_Error_string(rc, why + strlen(why), &len);
    } else if (rank == 1 && (rbuf[6] != 1 || rbuf[9] != 2 || rbuf[12] != 3 || rbuf[15] != 4)) {
        sprintf(why, "received %d %d %d %d, want 1 2 3 4", rbuf[6], rbuf[9], rbuf[12], rbuf[15]);
        bad = 1;
    }
    if (bad && rank == 1) printf("(rank 1: %s) ", why); /* main prints rank 0's only */
    MPI_Type_free(&vec);
    MPI_Type_free(&idx);
    MPI_Type_free(&rs);
    MPI_Comm_free(&inter);
    MPI_Comm_free(&local);
    return bad;
}

/* A user-defined handler that returns: the call returns the code the handler was passed
 * (MPI-4.0 §9.3.1: "the error code to be returned by the MPI routine that raised the
 * error"). An attribute query with MPI_KEYVAL_INVALID on a private communicator. */
static int handler_code_seen;
static void keep_code(MPI_Comm *c, int *code, ...) { (void)c, handler_code_seen = *code; }
static int handler_return_code(char *why) {
    MPI_Comm c;
    MPI_Errhandler h;
    MPI_Comm_dup(MPI_COMM_SELF, &c);
    MPI_Comm_create_errhandler(keep_code, &h);
    MPI_Comm_set_errhandler(c, h);
    void *v;
    int flag, rc;
    handler_code_seen = MPI_SUCCESS;
    rc = MPI_Comm_get_attr(c, MPI_KEYVAL_INVALID, &v, &flag);
    int bad = handler_code_seen != MPI_SUCCESS && rc != handler_code_seen;
    if (bad) sprintf(why, "the handler got code %d, the call returned %d", handler_code_seen, rc);
    MPI_Comm_free(&c);
    MPI_Errhandler_free(&h);
    return bad;
}

/* After an MPI_Igather that a root's short receive truncates (MPI_ERR_TRUNCATE at the root,
 * success elsewhere), an MPI_Comm_idup of another communicator must still complete. Debian's
 * MPICH 4.0.2 across nodes (UCX over TCP, `timeout 30 scripts/tools/cluster-mpirun -n 2`): the
 * non-root rank never leaves the duplication (right on one node, and with the blocking
 * MPI_Comm_dup alone), so the probe hangs there. The shim duplicates each communicator's
 * shadow with MPI_Comm_idup, so a program that goes on after such an error in the library's
 * own Igather hangs at its next schedule there (conform.py's errors table across nodes,
 * cases 3225 and 14525). A duplicate still pending after 5 s is reported and the job
 * aborted (it could not be finished). */
static int idup_after_truncated_igather(char *why) {
    int size, sb[4] = {1, 2, 3, 4}, rb[4 * 64], in = 1, out;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size > 64) return 0;
    MPI_Comm a, b, c;
    MPI_Request q;
    MPI_Comm_dup(MPI_COMM_WORLD, &a);
    MPI_Comm_set_errhandler(a, MPI_ERRORS_RETURN);
    if (MPI_Igather(sb, 4, MPI_INT, rb, 2, MPI_INT, 0, a, &q) == MPI_SUCCESS) MPI_Wait(&q, MPI_STATUS_IGNORE);
    MPI_Allreduce(&in, &out, 1, MPI_INT, MPI_SUM, a);
    MPI_Comm_free(&a);
    MPI_Comm_dup(MPI_COMM_WORLD, &b);
    MPI_Comm_idup(b, &c, &q);
    int done = 0;
    for (double t0 = MPI_Wtime(); !done && MPI_Wtime() - t0 < 5;) MPI_Test(&q, &done, MPI_STATUS_IGNORE);
    if (!done) {
        printf("WRONG (rank %d): MPI_Comm_idup not complete after 5 s\n", rank);
        fflush(stdout);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    MPI_Comm_free(&c);
    MPI_Comm_free(&b);
    (void)why;
    return 0;
}

static const struct {
    const char *name;
    int (*run)(char *);
} probes[] = {
    {"pack_hvector_complex", pack_hvector_complex},
    {"darray_empty", darray_empty},
    {"iallreduce_comm_free", iallreduce_comm_free},
    {"scatterv_inter_resized", scatterv_inter_resized},
    {"handler_return_code", handler_return_code},
    {"idup_after_truncated_igather", idup_after_truncated_igather},
};

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    int wrong = 0, n = (int)(sizeof probes / sizeof probes[0]);
    for (int i = 0; i < n; i++) {
        int wanted = argc < 2;
        for (int a = 1; a < argc; a++) wanted |= strcmp(argv[a], probes[i].name) == 0;
        if (!wanted) continue;
        char why[256] = "";
        if (rank == 0) printf("%s: ", probes[i].name);  /* a crash shows where */
        fflush(stdout);
        int bad = probes[i].run(why), any;
        MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
        if (rank == 0) printf(!any ? "ok\n" : bad ? "WRONG: %s\n" : "WRONG on another rank\n", why);
        fflush(stdout);
        wrong += any;
    }
    MPI_Finalize();
    return wrong;
}

/* Which error handler an error reaches (MPI-4.0 §9.3): the handler of the object the
 * program passed; for calls without one (datatype calls, request completion, an invalid
 * communicator) the handler of MPI_COMM_WORLD, as the system MPI routes them. User-defined
 * handlers record every call (handler, communicator, class), so the routing is checked
 * exactly, including that nothing reaches a handler the program did not address: the
 * shim's own MPI calls inside a collective (message completion, datatype queries) must
 * never raise an error on MPI_COMM_WORLD. Communicators made from MPI_COMM_WORLD inherit
 * its handler (MPI-4.0 §7.4.2). */
#include "harness.h"

#define MAXCALLS 16
static struct {
    int which; /* 1: world's handler, 2: the case communicator's */
    MPI_Comm comm;
    int cls;
} calls[MAXCALLS];
static int ncalls;

static void record(int which, MPI_Comm *c, int *code) {
    int cls = *code;
    PMPI_Error_class(*code, &cls);
    if (ncalls < MAXCALLS) {
        calls[ncalls].which = which;
        calls[ncalls].comm = *c;
        calls[ncalls].cls = cls;
    }
    ncalls++;
}
static void on_world(MPI_Comm *c, int *code, ...) { record(1, c, code); }
static void on_comm(MPI_Comm *c, int *code, ...) { record(2, c, code); }

/* Exactly one handler call, by `which`, with class `cls` (and communicator `comm` unless
 * it is MPI_COMM_NULL). */
static void expect_one(int id, int which, MPI_Comm comm, int cls, const char *what) {
    H_CHECK(id, ncalls == 1, "%s: %d handler calls, want 1", what, ncalls);
    if (ncalls >= 1) {
        H_CHECK(id, calls[0].which == which, "%s: the %s handler was called, want the %s one", what,
                calls[0].which == 1 ? "world's" : "communicator's", which == 1 ? "world's" : "communicator's");
        H_CHECK(id, calls[0].cls == cls, "%s: class %s, want %s", what, h_class_name(calls[0].cls),
                h_class_name(cls));
        if (comm != MPI_COMM_NULL)
            H_CHECK(id, calls[0].comm == comm, "%s: the handler got another communicator", what);
    }
    ncalls = 0;
}

/* A datatype attribute's delete callback that fails. */
static int failing_delete(MPI_Datatype t, int k, void *v, void *extra) {
    (void)t, (void)k, (void)v, (void)extra;
    return MPI_ERR_OTHER;
}

int main(int argc, char **argv) {
    h_init(&argc, &argv);
    MPI_Errhandler hw, hc;
    MPI_Comm_create_errhandler(on_world, &hw);
    MPI_Comm_create_errhandler(on_comm, &hc);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, hw);
    MPI_Comm c;
    MPI_Comm_dup(MPI_COMM_WORLD, &c);
    MPI_Comm_set_errhandler(c, hc);
    int id = 0, x[8] = {0}, y[8] = {0};

    if (h_begin(id, "MPI_Comm_get_errhandler(MPI_COMM_WORLD) returns the handler the program set")) {
        MPI_Errhandler got;
        MPI_Comm_get_errhandler(MPI_COMM_WORLD, &got);
        H_CHECK(id, got == hw, "another handler");
        MPI_Errhandler_free(&got);
        h_end(id);
    }
    id++;

    if (h_begin(id, "communicators made from MPI_COMM_WORLD inherit its handler")) {
        MPI_Comm d, s, t;
        MPI_Errhandler got;
        MPI_Comm_dup(MPI_COMM_WORLD, &d);
        MPI_Comm_get_errhandler(d, &got);
        H_CHECK(id, got == hw, "MPI_Comm_dup: another handler");
        MPI_Errhandler_free(&got);
        MPI_Comm_split(MPI_COMM_WORLD, 0, h_rank, &s);
        MPI_Comm_get_errhandler(s, &got);
        H_CHECK(id, got == hw, "MPI_Comm_split: another handler");
        MPI_Errhandler_free(&got);
        int dims[1] = {h_size}, periods[1] = {1};
        MPI_Cart_create(MPI_COMM_WORLD, 1, dims, periods, 0, &t);
        MPI_Comm_get_errhandler(t, &got);
        H_CHECK(id, got == hw, "MPI_Cart_create: another handler");
        MPI_Errhandler_free(&got);
        /* and an error there reaches it, on that communicator */
        ncalls = 0;
        MPI_Allreduce(x, y, -1, MPI_INT, MPI_SUM, d);
        expect_one(id, 1, d, MPI_ERR_COUNT, "MPI_Allreduce(count -1) on a dup of the world");
        MPI_Comm_free(&d);
        MPI_Comm_free(&s);
        MPI_Comm_free(&t);
        h_end(id);
    }
    id++;

    if (h_begin(id, "an invalid count on a communicator reaches that communicator's handler")) {
        ncalls = 0;
        MPI_Allreduce(x, y, -1, MPI_INT, MPI_SUM, c);
        expect_one(id, 2, c, MPI_ERR_COUNT, "MPI_Allreduce(count -1)");
        MPI_Bcast(x, -1, MPI_INT, 0, c);
        expect_one(id, 2, c, MPI_ERR_COUNT, "MPI_Bcast(count -1)");
        MPI_Request q;
        MPI_Iallgather(x, -1, MPI_INT, y, 1, MPI_INT, c, &q);
        expect_one(id, 2, c, MPI_ERR_COUNT, "MPI_Iallgather(sendcount -1)");
        h_end(id);
    }
    id++;

    if (h_begin(id, "an invalid datatype in a collective reaches the communicator's handler only")) {
        ncalls = 0;
        MPI_Datatype t;
        MPI_Type_contiguous(2, MPI_INT, &t); /* never committed */
        MPI_Allreduce(x, y, 1, t, MPI_SUM, c);
        H_CHECK(id, ncalls >= 1 && calls[0].which == 2, "the communicator's handler was not called first");
        for (int i = 0; i < ncalls && i < MAXCALLS; i++)
            H_CHECK(id, calls[i].which == 2, "call %d reached the world's handler (class %s)", i,
                    h_class_name(calls[i].cls));
        ncalls = 0;
        MPI_Datatype garbage = (MPI_Datatype)0x12345678;
        MPI_Bcast(x, 1, garbage, 0, c);
        H_CHECK(id, ncalls >= 1 && calls[0].which == 2 && calls[0].cls == MPI_ERR_TYPE,
                "garbage datatype: %d calls, first by %d class %s", ncalls, ncalls ? calls[0].which : 0,
                ncalls ? h_class_name(calls[0].cls) : "-");
        for (int i = 1; i < ncalls && i < MAXCALLS; i++)
            H_CHECK(id, calls[i].which == 2, "garbage datatype: call %d reached the world's handler", i);
        ncalls = 0;
        MPI_Type_free(&t);
        h_end(id);
    }
    id++;

    if (h_begin(id, "a message truncated inside a collective reaches the communicator's handler only")) {
        /* the root sends more than the others receive: erroneous, detected (MPI_ERR_TRUNCATE)
         * on the receivers; no error may reach the world's handler */
        ncalls = 0;
        int n = h_rank == 0 ? 8 : 4;
        int rc = MPI_Bcast(x, n, MPI_INT, 0, c);
        if (h_size > 1 && h_rank != 0) {
            int cls = rc;
            if (rc != MPI_SUCCESS) MPI_Error_class(rc, &cls);
            H_CHECK(id, cls == MPI_ERR_TRUNCATE, "MPI_Bcast returned %s, want MPI_ERR_TRUNCATE", h_class_name(cls));
        }
        for (int i = 0; i < ncalls && i < MAXCALLS; i++)
            H_CHECK(id, calls[i].which == 2, "call %d reached the world's handler (class %s)", i,
                    h_class_name(calls[i].cls));
        ncalls = 0;
        /* the program goes on */
        int one = 1, sum = 0;
        MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, c);
        H_CHECK(id, sum == h_size, "after the error: sum %d", sum);
        h_end(id);
    }
    id++;

    if (h_begin(id, "calls without an object and invalid communicators reach the world's handler")) {
        ncalls = 0;
        int sz;
        MPI_Type_size((MPI_Datatype)0x12345678, &sz);
        expect_one(id, 1, MPI_COMM_WORLD, MPI_ERR_TYPE, "MPI_Type_size(garbage)");
        MPI_Comm stale;
        MPI_Comm_dup(MPI_COMM_WORLD, &stale);
        MPI_Comm keep = stale;
        MPI_Comm_free(&stale);
        MPI_Allreduce(x, y, 1, MPI_INT, MPI_SUM, keep);
        expect_one(id, 1, MPI_COMM_WORLD, MPI_ERR_COMM, "MPI_Allreduce on a freed communicator");
        MPI_Barrier(MPI_COMM_NULL);
        expect_one(id, 1, MPI_COMM_WORLD, MPI_ERR_COMM, "MPI_Barrier(MPI_COMM_NULL)");
        MPI_Allreduce(x, y, -1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        expect_one(id, 1, MPI_COMM_WORLD, MPI_ERR_COUNT, "MPI_Allreduce(count -1) on MPI_COMM_WORLD");
        MPI_Comm_call_errhandler(MPI_COMM_WORLD, MPI_ERR_OTHER);
        expect_one(id, 1, MPI_COMM_WORLD, MPI_ERR_OTHER, "MPI_Comm_call_errhandler(MPI_COMM_WORLD)");
        h_end(id);
    }
    id++;

    if (h_begin(id, "with MPI_ERRORS_RETURN on MPI_COMM_WORLD, those errors are returned")) {
        MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
        ncalls = 0;
        int sz, cls = 0;
        int rc = MPI_Type_size((MPI_Datatype)0x12345678, &sz);
        if (rc != MPI_SUCCESS) MPI_Error_class(rc, &cls);
        H_CHECK(id, rc != MPI_SUCCESS && cls == MPI_ERR_TYPE, "MPI_Type_size(garbage): %s", h_class_name(cls));
        rc = MPI_Barrier(MPI_COMM_NULL);
        cls = 0;
        if (rc != MPI_SUCCESS) MPI_Error_class(rc, &cls);
        H_CHECK(id, cls == MPI_ERR_COMM, "MPI_Barrier(MPI_COMM_NULL): %s", h_class_name(cls));
        H_CHECK(id, ncalls == 0, "a handler was called");
        MPI_Errhandler got;
        MPI_Comm_get_errhandler(MPI_COMM_WORLD, &got);
        H_CHECK(id, got == MPI_ERRORS_RETURN, "MPI_Comm_get_errhandler(MPI_COMM_WORLD) is not MPI_ERRORS_RETURN");
        MPI_Comm_set_errhandler(MPI_COMM_WORLD, hw);
        h_end(id);
    }
    id++;

    /* MPI-4.0 §7.7.4 makes the call erroneous; MPICH 4.0.2 returns MPI_SUCCESS (and keeps
     * the type). Whatever the class, it may only reach the world's handler, as
     * MPI_ERR_OTHER, and the job goes on (under ghosts the shim aborted it). */
    if (h_begin(id, "a failing datatype attribute delete callback only reaches the world's handler")) {
        int kv;
        MPI_Type_create_keyval(MPI_TYPE_NULL_COPY_FN, failing_delete, &kv, NULL);
        for (int pass = 0; pass < 2; pass++) {
            if (pass == 1) MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
            MPI_Datatype t;
            MPI_Type_vector(2, 1, 2, MPI_INT, &t);
            MPI_Type_commit(&t);
            MPI_Type_set_attr(t, kv, NULL);
            /* used by a collective first: the shim caches its decoded form on the type */
            int in[3] = {1, 2, 3}, out[3];
            MPI_Allreduce(in, out, 1, t, MPI_SUM, c);
            ncalls = 0;
            int rc = MPI_Type_free(&t), cls = MPI_SUCCESS;
            if (rc != MPI_SUCCESS) MPI_Error_class(rc, &cls);
            H_CHECK(id, cls == MPI_SUCCESS || cls == MPI_ERR_OTHER, "MPI_Type_free: %s", h_class_name(cls));
            if (pass == 0 && cls != MPI_SUCCESS)
                expect_one(id, 1, MPI_COMM_WORLD, MPI_ERR_OTHER, "MPI_Type_free with a failing delete callback");
            H_CHECK(id, pass == 0 || ncalls == 0, "a handler was called with MPI_ERRORS_RETURN on the world");
            ncalls = 0;
        }
        MPI_Comm_set_errhandler(MPI_COMM_WORLD, hw);
        MPI_Type_free_keyval(&kv);
        h_end(id);
    }
    id++;

    MPI_Comm_free(&c);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
    MPI_Errhandler_free(&hw);
    MPI_Errhandler_free(&hc);
    h_finish();
    return 0;
}

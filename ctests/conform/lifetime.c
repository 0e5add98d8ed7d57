/* Object lifetimes (MPI-4.0 §5.1.10 MPI_TYPE_FREE, §6.9.5 MPI_OP_FREE, §7.4.3
 * MPI_COMM_FREE): loops that create, use and free communicators, datatypes and operations,
 * with the objects freed while operations on them are pending, and the process's resident
 * memory checked flat; and a collective on a freed communicator's stale handle, which must
 * fail with MPI_ERR_COMM (not run).
 *
 * Loop lengths: CONFORM_LEVEL=full runs the goal (100,000 dup/collective/free
 * cycles); the reduced level 20,000 (the shim leaked a context id per cycle and died after
 * about 1,050). At 3 or more ranks the loops are 20x shorter: MPICH busy-polls on the two
 * cores of the reference machine. */
#include "harness.h"

#include <stdint.h>
#include <unistd.h>

static long rss_kb(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    long pages = 0, res = 0;
    if (f) {
        if (fscanf(f, "%ld %ld", &pages, &res) != 2) res = 0;
        fclose(f);
    }
    return res * (sysconf(_SC_PAGESIZE) / 1024);
}

static int loops(int base) {
    int n = h_full ? base * 5 : base;
    return h_size <= 2 ? n : n / 20;
}

/* RSS after the first tenth of a loop (allocators and caches warmed up) and at its end:
 * growth over 4 MiB is a leak (12 KB per cycle before the fix: 240 MB at 20,000). */
typedef struct {
    long warm;
    int i, n;
} rss_t;

static void rss_step(rss_t *r, int id) {
    if (r->i == r->n / 10) r->warm = rss_kb();
    if (++r->i == r->n) {
        long end = rss_kb();
        H_CHECK(id, end - r->warm < 4096, "resident memory grew from %ld kB to %ld kB over %d cycles",
                r->warm, end, r->n - r->n / 10);
    }
}

static void add_op(void *in, void *inout, int *len, MPI_Datatype *dt) {
    (void)dt;
    for (int i = 0; i < *len; i++) ((int *)inout)[i] += ((int *)in)[i];
}

int main(int argc, char **argv) {
    h_init(&argc, &argv);
    int id = 0;

    /* 0: dup, one 1-int MPI_Allreduce, free */
    if (h_begin(id, "MPI_Comm_dup + MPI_Allreduce(1 int) + MPI_Comm_free, %d cycles", loops(20000))) {
        rss_t r = {0, 0, loops(20000)};
        for (int i = 0; i < r.n && h_ok; i++) {
            MPI_Comm c;
            int x = 1, y = 0;
            int rc = MPI_Comm_dup(MPI_COMM_WORLD, &c);
            H_CHECK(id, rc == MPI_SUCCESS, "MPI_Comm_dup failed at cycle %d (%d)", i, rc);
            if (rc != MPI_SUCCESS) break;
            MPI_Allreduce(&x, &y, 1, MPI_INT, MPI_SUM, c);
            H_CHECK(id, y == h_size, "cycle %d: sum %d, want %d", i, y, h_size);
            MPI_Comm_free(&c);
            rss_step(&r, id);
        }
        h_end(id);
    }
    id++;

    /* 1: the same with MPI_Comm_idup and a non-blocking collective left pending at free */
    if (h_begin(id, "MPI_Comm_idup + MPI_Iallreduce, MPI_Comm_free before MPI_Wait, %d cycles", loops(4000))) {
        rss_t r = {0, 0, loops(4000)};
        for (int i = 0; i < r.n && h_ok; i++) {
            MPI_Comm c;
            MPI_Request q;
            int x = i, y = -1;
            MPI_Comm_idup(MPI_COMM_WORLD, &c, &q);
            MPI_Wait(&q, MPI_STATUS_IGNORE);
            MPI_Iallreduce(&x, &y, 1, MPI_INT, MPI_SUM, c, &q);
            MPI_Comm_free(&c);
            MPI_Wait(&q, MPI_STATUS_IGNORE);
            H_CHECK(id, y == i * h_size, "cycle %d: sum %d, want %d", i, y, i * h_size);
            rss_step(&r, id);
        }
        h_end(id);
    }
    id++;

    /* 2: MPI_Comm_create_group + MPI_Barrier + free (hung at 2 ranks under the shim) */
    if (h_begin(id, "MPI_Comm_create_group + MPI_Barrier + MPI_Comm_free, %d cycles", loops(2000))) {
        MPI_Group g;
        MPI_Comm_group(MPI_COMM_WORLD, &g);
        rss_t r = {0, 0, loops(2000)};
        for (int i = 0; i < r.n && h_ok; i++) {
            MPI_Comm c;
            int rc = MPI_Comm_create_group(MPI_COMM_WORLD, g, i % 1000, &c);
            H_CHECK(id, rc == MPI_SUCCESS, "MPI_Comm_create_group failed at cycle %d", i);
            if (rc != MPI_SUCCESS) break;
            MPI_Barrier(c);
            MPI_Comm_free(&c);
            rss_step(&r, id);
        }
        MPI_Group_free(&g);
        h_end(id);
    }
    id++;

    /* 3: split into two halves, broadcast on each, free */
    if (h_begin(id, "MPI_Comm_split + MPI_Bcast + MPI_Comm_free, %d cycles", loops(4000))) {
        rss_t r = {0, 0, loops(4000)};
        for (int i = 0; i < r.n && h_ok; i++) {
            MPI_Comm c;
            MPI_Comm_split(MPI_COMM_WORLD, h_rank % 2, -h_rank, &c);
            int cr;
            MPI_Comm_rank(c, &cr);
            int v = cr == 0 ? i : -1;
            MPI_Bcast(&v, 1, MPI_INT, 0, c);
            H_CHECK(id, v == i, "cycle %d: got %d", i, v);
            MPI_Comm_free(&c);
            rss_step(&r, id);
        }
        h_end(id);
    }
    id++;

    /* 4: a persistent collective initialized and never started, freed, then its
     * communicator freed (the shim's shadow duplication must not keep it alive) */
    if (h_begin(id, "MPI_Allreduce_init never started, MPI_Request_free, MPI_Comm_free, %d cycles", loops(2000))) {
        rss_t r = {0, 0, loops(2000)};
        for (int i = 0; i < r.n && h_ok; i++) {
            MPI_Comm c;
            MPI_Request q;
            int x = 1, y;
            MPI_Comm_dup(MPI_COMM_WORLD, &c);
            int rc = MPI_Allreduce_init(&x, &y, 1, MPI_INT, MPI_SUM, c, MPI_INFO_NULL, &q);
            H_CHECK(id, rc == MPI_SUCCESS, "MPI_Allreduce_init failed at cycle %d", i);
            if (rc != MPI_SUCCESS) break;
            MPI_Request_free(&q);
            MPI_Comm_free(&c);
            rss_step(&r, id);
        }
        h_end(id);
    }
    id++;

    /* 5: derived datatypes freed while a non-blocking broadcast is pending */
    if (h_begin(id, "MPI_Type_vector + MPI_Ibcast + MPI_Type_free before MPI_Wait, %d cycles", loops(4000))) {
        rss_t r = {0, 0, loops(4000)};
        for (int i = 0; i < r.n && h_ok; i++) {
            MPI_Datatype v;
            MPI_Request q;
            int buf[8];
            for (int k = 0; k < 8; k++) buf[k] = h_rank == 0 ? i + k : -1;
            MPI_Type_vector(4, 1, 2, MPI_INT, &v);
            MPI_Type_commit(&v);
            MPI_Ibcast(buf, 1, v, 0, MPI_COMM_WORLD, &q);
            MPI_Type_free(&v);
            H_CHECK(id, v == MPI_DATATYPE_NULL, "MPI_Type_free did not set the handle to MPI_DATATYPE_NULL");
            MPI_Wait(&q, MPI_STATUS_IGNORE);
            for (int k = 0; k < 8; k += 2) H_CHECK(id, buf[k] == i + k, "cycle %d: element %d is %d", i, k, buf[k]);
            if (h_rank != 0)
                for (int k = 1; k < 8; k += 2) H_CHECK(id, buf[k] == -1, "cycle %d: hole %d written", i, k);
            rss_step(&r, id);
        }
        h_end(id);
    }
    id++;

    /* 6: user operations freed while a non-blocking reduction is pending */
    if (h_begin(id, "MPI_Op_create + MPI_Iallreduce + MPI_Op_free before MPI_Wait, %d cycles", loops(4000))) {
        rss_t r = {0, 0, loops(4000)};
        for (int i = 0; i < r.n && h_ok; i++) {
            MPI_Op op;
            MPI_Request q;
            int x[3] = {i, 1, h_rank}, y[3] = {0, 0, 0};
            MPI_Op_create(add_op, 1, &op);
            MPI_Iallreduce(x, y, 3, MPI_INT, op, MPI_COMM_WORLD, &q);
            MPI_Op_free(&op);
            H_CHECK(id, op == MPI_OP_NULL, "MPI_Op_free did not set the handle to MPI_OP_NULL");
            MPI_Wait(&q, MPI_STATUS_IGNORE);
            H_CHECK(id, y[0] == i * h_size && y[1] == h_size && y[2] == h_size * (h_size - 1) / 2,
                    "cycle %d: got %d %d %d", i, y[0], y[1], y[2]);
            rss_step(&r, id);
        }
        h_end(id);
    }
    id++;

    /* 7: a collective on a freed communicator's stale handle fails with MPI_ERR_COMM (with
     * MPI_ERRORS_RETURN on MPI_COMM_WORLD, whose handler such errors reach) and does not
     * run; the program goes on */
    if (h_begin(id, "MPI_Allreduce on a freed communicator's stale handle: MPI_ERR_COMM")) {
        MPI_Comm c, stale;
        int x = 1, y = -7;
        MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
        MPI_Comm_dup(MPI_COMM_WORLD, &c);
        MPI_Allreduce(&x, &y, 1, MPI_INT, MPI_SUM, c);
        stale = c;
        MPI_Comm_free(&c);
        y = -7;
        int rc = MPI_Allreduce(&x, &y, 1, MPI_INT, MPI_SUM, stale), cls = rc;
        if (rc != MPI_SUCCESS) MPI_Error_class(rc, &cls);
        H_CHECK(id, cls == MPI_ERR_COMM, "class %s, want MPI_ERR_COMM", h_class_name(cls));
        H_CHECK(id, y == -7, "the collective ran on the stale handle (result %d)", y);
        MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
        MPI_Allreduce(&x, &y, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        H_CHECK(id, y == h_size, "the program cannot go on: sum %d", y);
        h_end(id);
    }
    id++;

    h_finish();
    return 0;
}

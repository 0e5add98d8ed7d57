/* The RMA conformance matrix: every RMA communication call x window flavor
 * (MPI_Win_create, MPI_Win_allocate, MPI_Win_allocate_shared, dynamic) x synchronization
 * (fence, post/start/complete/wait, lock, lock_all, each with and without its assertions)
 * x datatype (predefined, a strided derived type, pair types), the data checked against
 * what MPI-4.0 chapter 12 defines; then a table of erroneous RMA calls whose error classes
 * the driver compares (MPI_ERRORS_RETURN on the window). Protocol: harness.h.
 *
 * Each rank is the origin of one operation per case, to target (rank + 1) % n, into its
 * own slot of the target's window (no two origins touch the same bytes, so every epoch
 * kind is legal, NOCHECK included), and the target checks its memory after the epoch.
 * Under ghost processes (SHIM_GHOSTS) the MPI_Win_allocate rows are the shim's own code;
 * the others are forwarded to the system MPI.
 *
 * Levels: reduced = a rotation through the product (each flavor, sync, op and type
 * appears); full = the whole product. */
#include "harness.h"

#define SLOT 8 /* elements per origin slot */

enum { F_CREATE, F_ALLOCATE, F_SHARED, F_DYNAMIC, NFLAVOR };
static const char *flavor_name[] = {"MPI_Win_create", "MPI_Win_allocate", "MPI_Win_allocate_shared",
                                    "MPI_Win_create_dynamic"};

enum {
    S_FENCE,
    S_FENCE_ASSERT, /* NOPRECEDE at the opening fence, NOSUCCEED at the closing one */
    S_PSCW,
    S_PSCW_NOCHECK,
    S_LOCK_SHARED,
    S_LOCK_EXCL,
    S_LOCK_NOCHECK,
    S_LOCKALL,
    S_LOCKALL_NOCHECK,
    S_LOCKALL_FLUSH, /* lock_all, the operation, flush, a second operation, unlock_all */
    NSYNC
};
static const char *sync_name[] = {"fence", "fence(NOPRECEDE..NOSUCCEED)", "PSCW", "PSCW(NOCHECK)",
                                  "lock(SHARED)", "lock(EXCLUSIVE)", "lock(EXCLUSIVE,NOCHECK)",
                                  "lock_all", "lock_all(NOCHECK)", "lock_all+flush"};

enum { O_PUT, O_GET, O_ACC_SUM, O_ACC_REPLACE, O_GACC_SUM, O_GACC_NOOP, O_FAO, O_CAS, O_RPUT, O_RGET,
       O_RACC, O_RGACC, NOP };
static const char *op_name[] = {"MPI_Put", "MPI_Get", "MPI_Accumulate(SUM)", "MPI_Accumulate(REPLACE)",
                                "MPI_Get_accumulate(SUM)", "MPI_Get_accumulate(NO_OP)", "MPI_Fetch_and_op(SUM)",
                                "MPI_Compare_and_swap", "MPI_Rput", "MPI_Rget", "MPI_Raccumulate(SUM)",
                                "MPI_Rget_accumulate(SUM)"};

/* Datatypes: the element type and how the target sees the slot. */
enum { T_INT, T_DOUBLE, T_VECTOR, T_DOUBLE_INT, T_2INT, NTYPE };
static const char *type_name[] = {"MPI_INT x4", "MPI_DOUBLE x4", "vector(2,1,2) of MPI_INT",
                                  "MPI_DOUBLE_INT x2", "MPI_2INT x2"};

typedef struct {
    double d;
    int i;
} dint_t;
typedef struct {
    int a, b;
} iint_t;

static int elem_size(int t) {
    switch (t) {
    case T_DOUBLE: return sizeof(double);
    case T_DOUBLE_INT: return sizeof(dint_t);
    case T_2INT: return sizeof(iint_t);
    default: return sizeof(int);
    }
}

/* The slot's element i's value on process p (initial) or from origin o (data). */
static double val(int who, int i, int data) { return data ? 100.0 * (who + 1) + i + 1 : 1000.0 * who + i; }

static void set_elem(int t, void *base, int i, double v) {
    switch (t) {
    case T_DOUBLE: ((double *)base)[i] = v; break;
    case T_DOUBLE_INT: ((dint_t *)base)[i].d = v, ((dint_t *)base)[i].i = (int)v % 97; break;
    case T_2INT: ((iint_t *)base)[i].a = (int)v, ((iint_t *)base)[i].b = (int)v % 89; break;
    default: ((int *)base)[i] = (int)v;
    }
}
static double get_elem(int t, const void *base, int i, double *second) {
    *second = 0;
    switch (t) {
    case T_DOUBLE: return ((const double *)base)[i];
    case T_DOUBLE_INT: *second = ((const dint_t *)base)[i].i; return ((const dint_t *)base)[i].d;
    case T_2INT: *second = ((const iint_t *)base)[i].b; return ((const iint_t *)base)[i].a;
    default: return ((const int *)base)[i];
    }
}
static double second_of(int t, double v) {
    return t == T_DOUBLE_INT ? (int)v % 97 : t == T_2INT ? (int)v % 89 : 0;
}
static MPI_Datatype elem_type(int t) {
    switch (t) {
    case T_DOUBLE: return MPI_DOUBLE;
    case T_DOUBLE_INT: return MPI_DOUBLE_INT;
    case T_2INT: return MPI_2INT;
    default: return MPI_INT;
    }
}

/* Which operations apply to which types (MPI-4.0 §12.3.4: MPI_SUM is not defined for the
 * pair types, MAXLOC stands in; compare-and-swap and fetch-and-op take one predefined
 * element; request-based forms need a passive-target epoch, §12.3.5). */
static int valid(int s, int o, int t) {
    int passive = s >= S_LOCK_SHARED;
    if ((o == O_RPUT || o == O_RGET || o == O_RACC || o == O_RGACC) && !passive) return 0;
    if ((o == O_FAO || o == O_CAS) && (t == T_VECTOR)) return 0;
    if (o == O_CAS && (t == T_DOUBLE || t == T_DOUBLE_INT || t == T_2INT)) return 0;
    return 1;
}
static int pair(int t) { return t == T_DOUBLE_INT || t == T_2INT; }

/* What the operation does to one element: the target's new value and the origin's result. */
static void expect(int o, int t, double init, double data, double *target, double *result) {
    double comb = pair(t) ? (data > init ? data : init) : init + data; /* MAXLOC or SUM */
    *result = init;
    switch (o) {
    case O_PUT: case O_RPUT: case O_ACC_REPLACE: *target = data; break;
    case O_GET: case O_RGET: case O_GACC_NOOP: *target = init; break;
    case O_CAS: *target = data; break; /* compare value = init: swapped */
    default: *target = comb;
    }
}

static int run_case(int id, int f, int s, int o, int t) {
    if (!h_begin(id, "%s %s %s %s", flavor_name[f], sync_name[s], op_name[o], type_name[t])) return 0;
    int n = h_size, me = h_rank, to = (me + 1) % n, from = (me + n - 1) % n;
    int es = elem_size(t);
    /* elements the operation moves: 4 (vector: 2 at stride 2 of a 4-element span), 1 for
     * the single-element atomics; pair types 2 */
    int cnt = (o == O_FAO || o == O_CAS) ? 1 : (t == T_VECTOR ? 2 : (pair(t) ? 2 : 4));
    MPI_Aint bytes = (MPI_Aint)n * SLOT * es;
    void *mem = NULL, *dyn = NULL;
    MPI_Win win = MPI_WIN_NULL;
    MPI_Aint tdisp = (MPI_Aint)me * SLOT; /* my slot at the target, in elements */
    MPI_Aint base_at_target = 0;
    int du = es;
    switch (f) {
    case F_CREATE:
        mem = malloc(bytes);
        MPI_Win_create(mem, bytes, du, MPI_INFO_NULL, MPI_COMM_WORLD, &win);
        break;
    case F_ALLOCATE:
        MPI_Win_allocate(bytes, du, MPI_INFO_NULL, MPI_COMM_WORLD, &mem, &win);
        break;
    case F_SHARED:
        MPI_Win_allocate_shared(bytes, du, MPI_INFO_NULL, MPI_COMM_WORLD, &mem, &win);
        break;
    case F_DYNAMIC: {
        MPI_Win_create_dynamic(MPI_INFO_NULL, MPI_COMM_WORLD, &win);
        dyn = mem = malloc(bytes);
        MPI_Win_attach(win, dyn, bytes);
        MPI_Aint a, *all = malloc(sizeof(MPI_Aint) * n);
        MPI_Get_address(dyn, &a);
        PMPI_Allgather(&a, 1, MPI_AINT, all, 1, MPI_AINT, h_comm);
        base_at_target = all[to];
        free(all);
        du = 1;
        break;
    }
    }
    MPI_Win_set_errhandler(win, MPI_ERRORS_RETURN);
    /* initial contents, written under an exclusive self-lock (local access to a window) */
    MPI_Win_lock(MPI_LOCK_EXCLUSIVE, me, 0, win);
    for (int i = 0; i < n * SLOT; i++) set_elem(t == T_VECTOR ? T_INT : t, mem, i, val(me, i % SLOT, 0));
    MPI_Win_unlock(me, win);
    PMPI_Barrier(h_comm);

    MPI_Datatype et = elem_type(t), tt = et, vec = MPI_DATATYPE_NULL;
    if (t == T_VECTOR) {
        MPI_Type_vector(2, 1, 2, MPI_INT, &vec);
        MPI_Type_commit(&vec);
        tt = vec;
    }
    int tcount = t == T_VECTOR ? 1 : cnt;
    int ot = t == T_VECTOR ? T_INT : t;
    char obuf[SLOT * 16], rbuf[SLOT * 16], cbuf[16];
    for (int i = 0; i < SLOT; i++) set_elem(ot, obuf, i, val(me, i, 1)), set_elem(ot, rbuf, i, -1);
    set_elem(ot, cbuf, 0, val(to, 0, 0)); /* the compare value: the target's initial one */
    MPI_Aint disp = f == F_DYNAMIC ? base_at_target + tdisp * es : tdisp;
    MPI_Op acc_op = pair(t) ? MPI_MAXLOC : MPI_SUM;

    MPI_Group wg = MPI_GROUP_NULL, tg = MPI_GROUP_NULL, og = MPI_GROUP_NULL;
    if (s == S_PSCW || s == S_PSCW_NOCHECK) {
        MPI_Win_get_group(win, &wg);
        MPI_Group_incl(wg, 1, &to, &tg);
        MPI_Group_incl(wg, 1, &from, &og);
    }
    int rc = MPI_SUCCESS, r2;
#define RC(call) \
    do { \
        if ((r2 = (call)) != MPI_SUCCESS && rc == MPI_SUCCESS) rc = r2; \
    } while (0)
    /* open */
    switch (s) {
    case S_FENCE: RC(MPI_Win_fence(0, win)); break;
    case S_FENCE_ASSERT: RC(MPI_Win_fence(MPI_MODE_NOPRECEDE, win)); break;
    case S_PSCW: RC(MPI_Win_post(og, 0, win)); RC(MPI_Win_start(tg, 0, win)); break;
    case S_PSCW_NOCHECK:
        /* NOCHECK: the matching post has completed before start (MPI-4.0 §12.5.5) */
        RC(MPI_Win_post(og, MPI_MODE_NOCHECK, win));
        PMPI_Barrier(h_comm);
        RC(MPI_Win_start(tg, MPI_MODE_NOCHECK, win));
        break;
    case S_LOCK_SHARED: RC(MPI_Win_lock(MPI_LOCK_SHARED, to, 0, win)); break;
    case S_LOCK_EXCL: RC(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, to, 0, win)); break;
    case S_LOCK_NOCHECK: RC(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, to, MPI_MODE_NOCHECK, win)); break;
    case S_LOCKALL: case S_LOCKALL_FLUSH: RC(MPI_Win_lock_all(0, win)); break;
    case S_LOCKALL_NOCHECK: RC(MPI_Win_lock_all(MPI_MODE_NOCHECK, win)); break;
    }
    /* the operation; with lock_all+flush, once more after a flush (the second adds to the
     * first's result: only for the operations whose effect composes) */
    int reps = s == S_LOCKALL_FLUSH && o != O_CAS && o != O_GET && o != O_RGET ? 2 : 1;
    for (int k = 0; k < reps; k++) {
        MPI_Request q = MPI_REQUEST_NULL;
        switch (o) {
        case O_PUT: RC(MPI_Put(obuf, cnt, et, to, disp, tcount, tt, win)); break;
        case O_GET: RC(MPI_Get(rbuf, cnt, et, to, disp, tcount, tt, win)); break;
        case O_ACC_SUM: RC(MPI_Accumulate(obuf, cnt, et, to, disp, tcount, tt, acc_op, win)); break;
        case O_ACC_REPLACE: RC(MPI_Accumulate(obuf, cnt, et, to, disp, tcount, tt, MPI_REPLACE, win)); break;
        case O_GACC_SUM:
            RC(MPI_Get_accumulate(obuf, cnt, et, rbuf, cnt, et, to, disp, tcount, tt, acc_op, win));
            break;
        case O_GACC_NOOP:
            RC(MPI_Get_accumulate(NULL, 0, et, rbuf, cnt, et, to, disp, tcount, tt, MPI_NO_OP, win));
            break;
        case O_FAO: RC(MPI_Fetch_and_op(obuf, rbuf, et, to, disp, acc_op, win)); break;
        case O_CAS: RC(MPI_Compare_and_swap(obuf, cbuf, rbuf, et, to, disp, win)); break;
        case O_RPUT: RC(MPI_Rput(obuf, cnt, et, to, disp, tcount, tt, win, &q)); break;
        case O_RGET: RC(MPI_Rget(rbuf, cnt, et, to, disp, tcount, tt, win, &q)); break;
        case O_RACC: RC(MPI_Raccumulate(obuf, cnt, et, to, disp, tcount, tt, acc_op, win, &q)); break;
        case O_RGACC:
            RC(MPI_Rget_accumulate(obuf, cnt, et, rbuf, cnt, et, to, disp, tcount, tt, acc_op, win, &q));
            break;
        }
        if (q != MPI_REQUEST_NULL) RC(MPI_Wait(&q, MPI_STATUS_IGNORE));
        if (s == S_LOCKALL_FLUSH && k + 1 < reps) RC(MPI_Win_flush(to, win));
    }
    /* close */
    switch (s) {
    case S_FENCE: RC(MPI_Win_fence(0, win)); break;
    case S_FENCE_ASSERT: RC(MPI_Win_fence(MPI_MODE_NOSUCCEED, win)); break;
    case S_PSCW: case S_PSCW_NOCHECK: RC(MPI_Win_complete(win)); RC(MPI_Win_wait(win)); break;
    case S_LOCK_SHARED: case S_LOCK_EXCL: case S_LOCK_NOCHECK: RC(MPI_Win_unlock(to, win)); break;
    default: RC(MPI_Win_unlock_all(win));
    }
    H_CHECK(id, rc == MPI_SUCCESS, "an RMA call returned %d", rc);
    PMPI_Barrier(h_comm);

    /* the origin's result buffer */
    for (int i = 0; i < cnt; i++) {
        int ti = t == T_VECTOR ? 2 * i : i; /* target element the i-th origin element maps to */
        double tgt, res, sec, got = get_elem(ot, rbuf, i, &sec);
        double init = val(to, ti, 0), data = val(me, i, 1);
        expect(o, t, init, data, &tgt, &res);
        if (reps == 2) expect(o, t, tgt, data, &tgt, &res); /* the second sees the first's */
        int has_result = o == O_GET || o == O_RGET || o == O_GACC_SUM || o == O_GACC_NOOP || o == O_FAO ||
                         o == O_CAS || o == O_RGACC;
        if (has_result && (got != res || (pair(t) && sec != second_of(t, res))))
            h_fail(id, "result[%d] = %g (second %g), want %g", i, got, sec, res);
    }
    /* the target's slot of my left neighbour, read under a self-lock */
    MPI_Win_lock(MPI_LOCK_EXCLUSIVE, me, 0, win);
    const char *slot = (const char *)mem + (size_t)from * SLOT * es;
    for (int e = 0; e < SLOT; e++) {
        double sec, got = get_elem(ot, slot, e, &sec), want = val(me, e, 0), tgt, res;
        int i = t == T_VECTOR ? (e % 2 == 0 && e / 2 < cnt ? e / 2 : -1) : (e < cnt ? e : -1);
        if (i >= 0) {
            double data = val(from, i, 1);
            expect(o, t, want, data, &tgt, &res);
            if (reps == 2) expect(o, t, tgt, data, &tgt, &res);
            want = tgt;
        }
        if (got != want || (pair(t) && sec != second_of(t, want)))
            h_fail(id, "target element %d of origin %d's slot = %g (second %g), want %g", e, from, got, sec,
                   want);
    }
    MPI_Win_unlock(me, win);
    PMPI_Barrier(h_comm);

    if (vec != MPI_DATATYPE_NULL) MPI_Type_free(&vec);
    if (wg != MPI_GROUP_NULL) MPI_Group_free(&wg), MPI_Group_free(&tg), MPI_Group_free(&og);
    if (f == F_DYNAMIC) MPI_Win_detach(win, dyn);
    MPI_Win_free(&win);
    if (f == F_CREATE || f == F_DYNAMIC) free(mem);
    h_end(id);
    return 1;
}

/* The window of an error case: 64 bytes of flavor f (not dynamic), errors returned. */
static MPI_Win error_win(int f, void **mem) {
    MPI_Win win;
    if (f == F_CREATE) {
        *mem = calloc(1, 64);
        MPI_Win_create(*mem, 64, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &win);
    } else if (f == F_ALLOCATE) {
        MPI_Win_allocate(64, 1, MPI_INFO_NULL, MPI_COMM_WORLD, mem, &win);
    } else {
        MPI_Win_allocate_shared(64, 1, MPI_INFO_NULL, MPI_COMM_WORLD, mem, &win);
    }
    MPI_Win_set_errhandler(win, MPI_ERRORS_RETURN);
    return win;
}

static void error_win_free(int f, MPI_Win *win, void *mem) {
    MPI_Win_free(win);
    if (f == F_CREATE) free(mem);
}

/* Erroneous calls (MPI-4.0 §12.3, §12.5, §9.4 classes): each on a fresh window with
 * MPI_ERRORS_RETURN, the class reported for the driver to compare natively, under the shim
 * and with ghosts. */
enum { E_PUT_NO_EPOCH, E_GET_BAD_RANK, E_UNLOCK_UNLOCKED, E_LOCK_BAD_TYPE, E_LOCK_TWICE, E_UNLOCK_ALL_NONE,
       E_FLUSH_NO_EPOCH, E_ACC_USER_OP, E_WAIT_NO_POST, E_COMPLETE_NO_START, NERR };
static const char *err_name[] = {"MPI_Put outside an epoch", "MPI_Get from rank n",
                                 "MPI_Win_unlock without a lock", "MPI_Win_lock with lock type 12345",
                                 "MPI_Win_lock twice on one target", "MPI_Win_unlock_all without lock_all",
                                 "MPI_Win_flush outside an epoch", "MPI_Accumulate with a user-defined op",
                                 "MPI_Win_wait without post", "MPI_Win_complete without start"};
static const int err_expect[] = {MPI_ERR_RMA_SYNC, MPI_ERR_RANK, MPI_ERR_RMA_SYNC, MPI_ERR_LOCKTYPE,
                                 MPI_ERR_RMA_SYNC, MPI_ERR_RMA_SYNC, MPI_ERR_RMA_SYNC, MPI_ERR_OP,
                                 MPI_ERR_RMA_SYNC, MPI_ERR_RMA_SYNC};
static void user_fn(void *in, void *inout, int *len, MPI_Datatype *dt) { (void)in, (void)inout, (void)len, (void)dt; }

/* Operations with invalid arguments inside a lock_all epoch, per flavor. */
enum { A_PUT_BAD_TYPE, A_PUT_NEG_COUNT, A_ACC_BAD_OP, A_GET_FREED_TYPE, NARG };
static const char *arg_name[] = {"MPI_Put with a garbage datatype", "MPI_Put with count -1",
                                 "MPI_Accumulate with a garbage op", "MPI_Get with a freed datatype"};
static const int arg_expect[] = {MPI_ERR_TYPE, MPI_ERR_COUNT, MPI_ERR_OP, MPI_ERR_TYPE};

/* Window creation with invalid arguments (MPI_COMM_WORLD returns errors): the class, and
 * no shared-memory object left behind (/dev/shm/shim-*, made for ghost-served windows). */
enum { W_COMM_NULL, W_NEG_SIZE, W_BAD_DISP, W_FREED_COMM, NWIN };
static const char *win_name[] = {"MPI_Win_allocate on MPI_COMM_NULL", "MPI_Win_allocate with size -1",
                                 "MPI_Win_allocate with disp_unit -4", "MPI_Win_allocate on a freed communicator"};
static const int win_expect[] = {MPI_ERR_COMM, MPI_ERR_SIZE, MPI_ERR_DISP, MPI_ERR_COMM};

#include <dirent.h>
static int shm_objects(void) {
    DIR *d = opendir("/dev/shm");
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)))
        if (strncmp(e->d_name, "shim-", 5) == 0) n++;
    if (d) closedir(d);
    return n;
}

static void arg_case(int id, int f, int a) {
    if (!h_begin(id, "errors: %s on %s", arg_name[a], flavor_name[f])) return;
    int to = (h_rank + 1) % h_size, x[4] = {0};
    void *mem = NULL;
    MPI_Win win = error_win(f, &mem);
    MPI_Datatype freed;
    MPI_Type_contiguous(2, MPI_INT, &freed);
    MPI_Type_commit(&freed);
    MPI_Type_free(&freed);
    MPI_Win_lock_all(0, win);
    int rc = MPI_SUCCESS;
    switch (a) {
    case A_PUT_BAD_TYPE: rc = MPI_Put(x, 1, (MPI_Datatype)0x12345, to, 0, 1, MPI_INT, win); break;
    case A_PUT_NEG_COUNT: rc = MPI_Put(x, -1, MPI_INT, to, 0, 1, MPI_INT, win); break;
    case A_ACC_BAD_OP: rc = MPI_Accumulate(x, 1, MPI_INT, to, 0, 1, MPI_INT, (MPI_Op)0x12345, win); break;
    case A_GET_FREED_TYPE: rc = MPI_Get(x, 1, MPI_INT, to, 0, 1, freed, win); break;
    }
    MPI_Win_unlock_all(win);
    h_rc(id, rc);
    h_expect(id, arg_expect[a]);
    PMPI_Barrier(h_comm);
    error_win_free(f, &win, mem);
    h_end(id);
}

static void win_case(int id, int w) {
    if (!h_begin(id, "errors: %s", win_name[w])) return;
    PMPI_Barrier(h_comm);
    int before = shm_objects();
    void *mem = NULL;
    MPI_Win win = MPI_WIN_NULL;
    MPI_Comm c = MPI_COMM_NULL;
    int rc = MPI_SUCCESS;
    switch (w) {
    case W_COMM_NULL: rc = MPI_Win_allocate(64, 1, MPI_INFO_NULL, MPI_COMM_NULL, &mem, &win); break;
    case W_NEG_SIZE: rc = MPI_Win_allocate(-1, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &mem, &win); break;
    case W_BAD_DISP: rc = MPI_Win_allocate(64, -4, MPI_INFO_NULL, MPI_COMM_WORLD, &mem, &win); break;
    case W_FREED_COMM: {
        MPI_Comm_dup(MPI_COMM_WORLD, &c);
        MPI_Comm stale = c;
        MPI_Comm_free(&c);
        rc = MPI_Win_allocate(64, 1, MPI_INFO_NULL, stale, &mem, &win);
        break;
    }
    }
    if (rc == MPI_SUCCESS && win != MPI_WIN_NULL) MPI_Win_free(&win);
    h_rc(id, rc);
    h_expect(id, win_expect[w]);
    PMPI_Barrier(h_comm);
    H_CHECK(id, shm_objects() <= before, "%d shared-memory objects left behind", shm_objects() - before);
    h_end(id);
}

static void err_case(int id, int f, int e) {
    if (!h_begin(id, "errors: %s on %s", err_name[e], flavor_name[f])) return;
    int me = h_rank, to = (me + 1) % h_size, x[4] = {0};
    void *mem = NULL;
    MPI_Win win = error_win(f, &mem);
    int rc = MPI_SUCCESS;
    MPI_Op uop;
    switch (e) {
    case E_PUT_NO_EPOCH: rc = MPI_Put(x, 1, MPI_INT, to, 0, 1, MPI_INT, win); break;
    case E_GET_BAD_RANK:
        MPI_Win_lock_all(0, win);
        rc = MPI_Get(x, 1, MPI_INT, h_size, 0, 1, MPI_INT, win);
        MPI_Win_unlock_all(win);
        break;
    case E_UNLOCK_UNLOCKED: rc = MPI_Win_unlock(to, win); break;
    case E_LOCK_BAD_TYPE: rc = MPI_Win_lock(12345, to, 0, win); break;
    case E_LOCK_TWICE:
        MPI_Win_lock(MPI_LOCK_SHARED, to, 0, win);
        rc = MPI_Win_lock(MPI_LOCK_SHARED, to, 0, win);
        MPI_Win_unlock(to, win);
        break;
    case E_UNLOCK_ALL_NONE: rc = MPI_Win_unlock_all(win); break;
    case E_FLUSH_NO_EPOCH: rc = MPI_Win_flush(to, win); break;
    case E_ACC_USER_OP:
        MPI_Op_create(user_fn, 1, &uop);
        MPI_Win_lock_all(0, win);
        rc = MPI_Accumulate(x, 1, MPI_INT, to, 0, 1, MPI_INT, uop, win);
        MPI_Win_unlock_all(win);
        MPI_Op_free(&uop);
        break;
    case E_WAIT_NO_POST: rc = MPI_Win_wait(win); break;
    case E_COMPLETE_NO_START: rc = MPI_Win_complete(win); break;
    }
    h_rc(id, rc);
    h_expect(id, err_expect[e]);
    PMPI_Barrier(h_comm);
    error_win_free(f, &win, mem);
    h_end(id);
}

/* Many windows alive at once (a coarray program has one per coarray), each used in a
 * passive epoch while all the others exist, freed in reverse order. */
static void many_case(int id, int nwin) {
    if (!h_begin(id, "%d MPI_Win_allocate windows alive at once, lock/put/unlock on each", nwin)) return;
    MPI_Win *w = malloc(sizeof(MPI_Win) * nwin);
    int **mem = malloc(sizeof(int *) * nwin), to = (h_rank + 1) % h_size, from = (h_rank + h_size - 1) % h_size;
    for (int i = 0; i < nwin; i++) {
        MPI_Win_allocate(sizeof(int), sizeof(int), MPI_INFO_NULL, MPI_COMM_WORLD, &mem[i], &w[i]);
        *mem[i] = -1;
    }
    PMPI_Barrier(h_comm);
    for (int i = 0; i < nwin; i++) {
        int v = 1000 * h_rank + i;
        MPI_Win_lock(MPI_LOCK_EXCLUSIVE, to, 0, w[i]);
        MPI_Put(&v, 1, MPI_INT, to, 0, 1, MPI_INT, w[i]);
        MPI_Win_unlock(to, w[i]);
    }
    PMPI_Barrier(h_comm);
    for (int i = 0; i < nwin; i++) {
        MPI_Win_lock(MPI_LOCK_SHARED, h_rank, 0, w[i]);
        H_CHECK(id, *mem[i] == 1000 * from + i, "window %d holds %d, want %d", i, *mem[i], 1000 * from + i);
        MPI_Win_unlock(h_rank, w[i]);
    }
    PMPI_Barrier(h_comm);
    for (int i = nwin - 1; i >= 0; i--) MPI_Win_free(&w[i]);
    free(w), free(mem);
    h_end(id);
}

/* The pair types (MPI-4.0 §6.9.4: MPI_FLOAT_INT, MPI_DOUBLE_INT, MPI_LONG_INT, MPI_2INT,
 * MPI_SHORT_INT, MPI_LONG_DOUBLE_INT) in every accumulate-type operation on an
 * MPI_Win_allocate window (the flavor ghosts serve): MAXLOC, MINLOC, REPLACE and NO_OP,
 * the last also with the empty origin forms (NULL, count 0, MPI_DATATYPE_NULL: ignored,
 * §12.3.4). Their size is not their extent (MPI_SHORT_INT: 6 and 8; MPI_LONG_DOUBLE_INT:
 * 20 and 32 on x86-64), so an implementation that sizes a buffer by one and walks it by
 * the other corrupts memory. The data covers each MINLOC/MAXLOC rule (§6.9.4): origin
 * value larger, smaller, equal with a lower and with a higher index (a tie keeps the
 * smaller index); the slot's elements past the operation must stay untouched; 5 elements
 * and 1000. Full level: type x form x sync
 * (lock_all, lock, fence); reduced: see main. */
#define PCNT 5     /* elements of most operations: each MINLOC/MAXLOC rule, an odd count */
#define PBIG 1000  /* elements of the large ones (an implementation may cut these in pieces) */
#define PAFTER 3   /* elements of a slot past the operation's, which must stay untouched */
enum { P_FLOAT_INT, P_DOUBLE_INT, P_LONG_INT, P_2INT, P_SHORT_INT, P_LONG_DOUBLE_INT, NPTYPE };
static const char *ptype_name[] = {"MPI_FLOAT_INT", "MPI_DOUBLE_INT", "MPI_LONG_INT", "MPI_2INT",
                                   "MPI_SHORT_INT", "MPI_LONG_DOUBLE_INT"};
typedef struct { float v; int i; } p_fi;
typedef struct { double v; int i; } p_di;
typedef struct { long v; int i; } p_li;
typedef struct { int v; int i; } p_ii;
typedef struct { short v; int i; } p_si;
typedef struct { long double v; int i; } p_ldi;
static MPI_Datatype ptype(int t) {
    const MPI_Datatype ts[] = {MPI_FLOAT_INT, MPI_DOUBLE_INT, MPI_LONG_INT, MPI_2INT, MPI_SHORT_INT,
                               MPI_LONG_DOUBLE_INT};
    return ts[t];
}
static size_t pext(int t) {
    const size_t e[] = {sizeof(p_fi), sizeof(p_di), sizeof(p_li), sizeof(p_ii), sizeof(p_si), sizeof(p_ldi)};
    return e[t];
}
static void pset(int t, void *base, int k, long v, int i) {
    switch (t) {
#define PS(T, ty) case T: ((ty *)base)[k].v = v, ((ty *)base)[k].i = i; break;
    PS(P_FLOAT_INT, p_fi) PS(P_DOUBLE_INT, p_di) PS(P_LONG_INT, p_li) PS(P_2INT, p_ii)
    PS(P_SHORT_INT, p_si) PS(P_LONG_DOUBLE_INT, p_ldi)
#undef PS
    }
}
static long pget(int t, const void *base, int k, int *i) {
    switch (t) {
#define PG(T, ty) case T: *i = ((const ty *)base)[k].i; return (long)((const ty *)base)[k].v;
    PG(P_FLOAT_INT, p_fi) PG(P_DOUBLE_INT, p_di) PG(P_LONG_INT, p_li) PG(P_2INT, p_ii)
    PG(P_SHORT_INT, p_si) PG(P_LONG_DOUBLE_INT, p_ldi)
#undef PG
    }
    return 0;
}

enum { Q_ACC, Q_GACC, Q_FAO, Q_RACC, Q_RGACC };
typedef struct {
    int call;   /* Q_* */
    int op;     /* 0 MAXLOC, 1 MINLOC, 2 REPLACE, 3 NO_OP */
    int empty;  /* NO_OP's origin: 0 the data, 1 NULL/0/MPI_DATATYPE_NULL, 2 NULL (count 0, the
                 * type), 3 the data with count 0 and MPI_DATATYPE_NULL */
    int count;  /* elements moved (Fetch_and_op: 1) */
    const char *name;
} pform_t;
static const pform_t pforms[] = {
    {Q_ACC, 0, 0, PCNT, "MPI_Accumulate(MAXLOC)"},
    {Q_ACC, 1, 0, PCNT, "MPI_Accumulate(MINLOC)"},
    {Q_ACC, 2, 0, PCNT, "MPI_Accumulate(REPLACE)"},
    {Q_GACC, 0, 0, PCNT, "MPI_Get_accumulate(MAXLOC)"},
    {Q_GACC, 1, 0, PCNT, "MPI_Get_accumulate(MINLOC)"},
    {Q_GACC, 2, 0, PCNT, "MPI_Get_accumulate(REPLACE)"},
    {Q_GACC, 3, 0, PCNT, "MPI_Get_accumulate(NO_OP)"},
    {Q_GACC, 3, 1, PCNT, "MPI_Get_accumulate(NO_OP, NULL, 0, MPI_DATATYPE_NULL)"},
    {Q_GACC, 3, 2, PCNT, "MPI_Get_accumulate(NO_OP, NULL, 0, the type)"},
    {Q_GACC, 3, 3, PCNT, "MPI_Get_accumulate(NO_OP, buffer, 0, MPI_DATATYPE_NULL)"},
    {Q_FAO, 0, 0, 1, "MPI_Fetch_and_op(MAXLOC)"},
    {Q_FAO, 1, 0, 1, "MPI_Fetch_and_op(MINLOC)"},
    {Q_FAO, 2, 0, 1, "MPI_Fetch_and_op(REPLACE)"},
    {Q_FAO, 3, 0, 1, "MPI_Fetch_and_op(NO_OP)"},
    {Q_FAO, 3, 2, 1, "MPI_Fetch_and_op(NO_OP, NULL)"},
    {Q_RACC, 1, 0, PCNT, "MPI_Raccumulate(MINLOC)"},
    {Q_RGACC, 0, 0, PCNT, "MPI_Rget_accumulate(MAXLOC)"},
    {Q_RGACC, 3, 1, PCNT, "MPI_Rget_accumulate(NO_OP, NULL, 0, MPI_DATATYPE_NULL)"},
    {Q_ACC, 0, 0, PBIG, "MPI_Accumulate(MAXLOC) x1000"},
    {Q_ACC, 2, 0, PBIG, "MPI_Accumulate(REPLACE) x1000"},
    {Q_GACC, 1, 0, PBIG, "MPI_Get_accumulate(MINLOC) x1000"},
    {Q_GACC, 3, 1, PBIG, "MPI_Get_accumulate(NO_OP, NULL, 0, MPI_DATATYPE_NULL) x1000"},
};
#define NPFORM ((int)(sizeof pforms / sizeof pforms[0]))
enum { PS_LOCKALL, PS_LOCK, PS_FENCE, NPSYNC };
static const char *psync_name[] = {"lock_all", "lock(SHARED)", "fence"};

/* Element k of process p's slot for origin o: the initial (value, index) and what o sends
 * (rule k % 4: larger, smaller, equal with a lower index, equal with a higher one). */
static long pinit(int p, int o, int k, int *i) { *i = 50 + k; return 100 + 10 * k + 3 * p + o; }
static long pdata(int p, int o, int k, int *i) {
    int ti;
    long tv = pinit(p, o, k, &ti);
    switch (k % 4) {
    case 0: *i = 7 + k; return tv + 3;
    case 1: *i = 9 + k; return tv - 3;
    case 2: *i = ti - 20; return tv;
    default: *i = ti + 20; return tv;
    }
}
/* target = origin op target (MPI-4.0 §6.9.4: MAXLOC/MINLOC, ties keep the smaller index) */
static long pcombine(int op, long tv, int ti, long ov, int oi, int *ri) {
    switch (op) {
    case 0: case 1: {
        int o_wins = op == 0 ? ov > tv : ov < tv;
        if (ov == tv) { *ri = oi < ti ? oi : ti; return tv; }
        *ri = o_wins ? oi : ti;
        return o_wins ? ov : tv;
    }
    case 2: *ri = oi; return ov;
    default: *ri = ti; return tv;
    }
}

static void pair_case(int id, int t, int f, int s) {
    const pform_t *pf = &pforms[f];
    if (!h_begin(id, "pair types: MPI_Win_allocate %s %s %s", psync_name[s], pf->name, ptype_name[t])) return;
    int n = h_size, me = h_rank, to = (me + 1) % n, from = (me + n - 1) % n;
    size_t es = pext(t);
    MPI_Datatype dt = ptype(t);
    MPI_Op ops[] = {MPI_MAXLOC, MPI_MINLOC, MPI_REPLACE, MPI_NO_OP};
    MPI_Op op = ops[pf->op];
    int cnt = pf->count, slotn = cnt + PAFTER;
    /* Fetch_and_op: one element, the rule rotating with the type and the form */
    int k0 = cnt == 1 ? (t + f) % 4 : 0;
    void *mem = NULL;
    MPI_Win win;
    MPI_Win_allocate((MPI_Aint)(n * slotn * es), (int)es, MPI_INFO_NULL, MPI_COMM_WORLD, &mem, &win);
    MPI_Win_set_errhandler(win, MPI_ERRORS_RETURN);
    MPI_Win_lock(MPI_LOCK_EXCLUSIVE, me, 0, win);
    memset(mem, 0, n * slotn * es);
    for (int o = 0; o < n; o++)
        for (int k = 0; k < slotn; k++) {
            int i;
            long v = pinit(me, o, k, &i);
            pset(t, (char *)mem + o * slotn * es, k, v, i);
        }
    MPI_Win_unlock(me, win);
    PMPI_Barrier(h_comm);
    /* origin and result buffers from the heap, sized exactly (a tool sees an overrun) */
    void *obuf = calloc(cnt, es), *rbuf = calloc(cnt, es);
    for (int c = 0; c < cnt; c++) {
        int i;
        long v = pdata(to, me, k0 + c, &i);
        pset(t, obuf, c, v, i);
        pset(t, rbuf, c, -1, -1);
    }
    MPI_Aint disp = (MPI_Aint)me * slotn + k0;
    const void *o = pf->empty == 1 || pf->empty == 2 ? NULL : obuf;
    int ocnt = pf->empty ? 0 : cnt;
    MPI_Datatype ot = pf->empty == 1 || pf->empty == 3 ? MPI_DATATYPE_NULL : dt;
    int rc = MPI_SUCCESS, r2;
    switch (s) {
    case PS_LOCKALL: RC(MPI_Win_lock_all(0, win)); break;
    case PS_LOCK: RC(MPI_Win_lock(MPI_LOCK_SHARED, to, 0, win)); break;
    default: RC(MPI_Win_fence(0, win));
    }
    MPI_Request q = MPI_REQUEST_NULL;
    switch (pf->call) {
    case Q_ACC: RC(MPI_Accumulate(o, ocnt, ot, to, disp, cnt, dt, op, win)); break;
    case Q_GACC: RC(MPI_Get_accumulate(o, ocnt, ot, rbuf, cnt, dt, to, disp, cnt, dt, op, win)); break;
    case Q_FAO: RC(MPI_Fetch_and_op(o, rbuf, dt, to, disp, op, win)); break;
    case Q_RACC:
        if (s == PS_FENCE) RC(MPI_Accumulate(o, ocnt, ot, to, disp, cnt, dt, op, win));
        else RC(MPI_Raccumulate(o, ocnt, ot, to, disp, cnt, dt, op, win, &q));
        break;
    case Q_RGACC:
        if (s == PS_FENCE) RC(MPI_Get_accumulate(o, ocnt, ot, rbuf, cnt, dt, to, disp, cnt, dt, op, win));
        else RC(MPI_Rget_accumulate(o, ocnt, ot, rbuf, cnt, dt, to, disp, cnt, dt, op, win, &q));
        break;
    }
    if (q != MPI_REQUEST_NULL) RC(MPI_Wait(&q, MPI_STATUS_IGNORE));
    switch (s) {
    case PS_LOCKALL: RC(MPI_Win_unlock_all(win)); break;
    case PS_LOCK: RC(MPI_Win_unlock(to, win)); break;
    default: RC(MPI_Win_fence(0, win));
    }
    H_CHECK(id, rc == MPI_SUCCESS, "an RMA call returned %d", rc);
    PMPI_Barrier(h_comm);
    int fetches = pf->call == Q_GACC || pf->call == Q_FAO || pf->call == Q_RGACC;
    for (int c = 0; fetches && c < cnt; c++) {
        int gi, wi;
        long got = pget(t, rbuf, c, &gi), want = pinit(to, me, k0 + c, &wi);
        if (got != want || gi != wi)
            h_fail(id, "result[%d] = (%ld, %d), want (%ld, %d)", c, got, gi, want, wi);
    }
    MPI_Win_lock(MPI_LOCK_EXCLUSIVE, me, 0, win);
    const char *slot = (const char *)mem + (size_t)from * slotn * es;
    for (int k = 0; k < slotn; k++) {
        int gi, ti, oi, wi;
        long got = pget(t, slot, k, &gi), tv = pinit(me, from, k, &ti), want = tv;
        wi = ti;
        if (k >= k0 && k < k0 + cnt) {
            long ov = pdata(me, from, k, &oi);
            want = pcombine(pf->op, tv, ti, ov, oi, &wi);
        }
        if (got != want || gi != wi)
            h_fail(id, "target element %d of origin %d's slot = (%ld, %d), want (%ld, %d)", k, from, got, gi,
                   want, wi);
    }
    MPI_Win_unlock(me, win);
    PMPI_Barrier(h_comm);
    free(obuf), free(rbuf);
    MPI_Win_free(&win);
    h_end(id);
}

int main(int argc, char **argv) {
    h_init(&argc, &argv);
    int id = 0, k = 0;
    for (int f = 0; f < NFLAVOR; f++)
        for (int s = 0; s < NSYNC; s++)
            for (int o = 0; o < NOP; o++)
                for (int t = 0; t < NTYPE; t++) {
                    if (!valid(s, o, t)) continue;
                    /* reduced: every 7th combination (7 is prime to every dimension) */
                    int take = h_full || k % 7 == 0;
                    k++;
                    if (!take) continue;
                    run_case(id++, f, s, o, t);
                }
    id = 100000; /* the error table keeps its numbers at every level */
    for (int f = 0; f < 3; f++)
        for (int e = 0; e < NERR; e++) err_case(id++, f, e);
    /* errors without a window go to MPI_COMM_WORLD's handler */
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    id = 100100;
    for (int f = 0; f < 3; f++)
        for (int a = 0; a < NARG; a++) arg_case(id++, f, a);
    id = 100200;
    for (int w = 0; w < NWIN; w++) win_case(id++, w);
    many_case(100300, 70);
    /* the pair types, numbered type x form x sync at every level. Reduced: one sync per
     * (type, form), and beyond 2 processes, where MPICH's RMA crawls on 2 oversubscribed
     * cores, only one type per form (the type rotating) */
    id = 100400;
    for (int t = 0; t < NPTYPE; t++)
        for (int f = 0; f < NPFORM; f++)
            for (int s = 0; s < NPSYNC; s++) {
                int take = h_full || (s == (t + f) % NPSYNC && (h_size <= 2 || t == f % NPTYPE));
                if (take) pair_case(id, t, f, s);
                id++;
            }
    h_finish();
    return 0;
}

/* Conformance matrix for the collectives. The oracle is the MPI-4.0 standard, not the
 * system MPI: every expected value below is computed in C from the standard's definition
 * of the collective and from a type map that each datatype constructor computes from its
 * own arguments (never MPI_Pack/Unpack or a datatype query).
 *
 * Dimensions (the tables below; one row added to a table adds its cases):
 *   colls[]   every collective the shim intercepts;
 *   forms     blocking, nonblocking (MPI_I* + a completion rotated over MPI_Wait, an
 *             MPI_Test loop, MPI_Waitall and MPI_Testall of several requests), persistent
 *             (*_init, started NSTARTS times with new send data each time) and the
 *             large-count _c version of each;
 *   tpairs[]  send and receive datatypes of one type signature (data movement);
 *   rrows[]   reduction op and datatype (predefined ops, a commutative and an associative
 *             non-commutative user op, user ops on derived datatypes);
 *   frees     nothing, the derived datatypes, the user op, or the communicator (a fresh
 *             dup) freed right after the I* or *_init call, before completion;
 *   comms     a dup of MPI_COMM_WORLD, a split with reversed rank order, an
 *             intercommunicator; for the neighbourhood collectives a periodic and a
 *             non-periodic 1-D Cartesian communicator and two distributed graphs (one
 *             with a duplicate edge, whose matching order MPI-4.0 §8.6 defines);
 *   counts    0, 1, 3 (units of the pair's type signature); roots first and last;
 *             MPI_IN_PLACE wherever the standard allows it;
 *   algos     the shim's algorithms (CONFORM_ALGOS=auto|cycle|all, see below).
 *
 * The reduced level (default) takes, per collective, the product of form x free mode x
 * type row and rotates communicator, count, root and MPI_IN_PLACE across those cases;
 * CONFORM_LEVEL=full takes the product of everything. Case ids do not depend on the
 * number of processes; cases that cannot run at this size (an intercommunicator at one
 * process) are skipped but keep their id.
 *
 * CONFORM_ALGOS (with the shim loaded; ignored without it): auto (default) never forces an
 * algorithm; cycle forces, before each case, the next algorithm of that collective
 * round-robin (by case, so CONFORM_ONLY reproduces it; shown in the case name); all runs
 * each case once per algorithm, a failure naming the algorithm. "native" is never forced
 * for the persistent forms (MPICH 4.0.2 cannot restart several persistent collectives).
 *
 * Checks: every element of every receive buffer against the standard's value; every byte
 * that is not in the receive type map (holes, padding, gaps between blocks, guard bytes
 * around the buffer) untouched; send buffers unchanged; MPI_SUCCESS from every call;
 * completed nonblocking requests set to MPI_REQUEST_NULL, completed persistent requests
 * left allocated and inactive; a user op called with the datatype the call passed.
 *
 * CONFORM_WARMUP=1: a barrier on each case's fresh communicator before the case.
 *
 * Build: mpicc -O1 -g -Wall -o coll_matrix coll_matrix.c -ldl -lm
 */
#include "harness.h"

#include <dlfcn.h>
#include <limits.h>
#include <stdint.h>

#define MAXP 64    /* most processes the program handles */
#define GUARD 64   /* guard bytes on either side of every buffer */
#define NSTARTS 2  /* starts of a persistent collective */

/* ============================ datatypes and type maps ============================ */

enum { B_INT, B_DOUBLE, B_UINT };
static const int bsize[] = {4, 8, 4};

static MPI_Datatype bdt(int b) {
    return b == B_INT ? MPI_INT : b == B_DOUBLE ? MPI_DOUBLE : MPI_UNSIGNED;
}

/* A datatype with its type map: element e is basic type bt[e] at byte disp[e]; lb and ub
 * are the MPI lower and upper bounds (extent = ub - lb), tlb and tub the true ones. */
typedef struct {
    MPI_Datatype dt; /* MPI_DATATYPE_NULL once freed */
    MPI_Datatype h0; /* the handle as created (what a user op must be called with) */
    int derived;
    long n;
    long *disp;
    unsigned char *bt;
    long lb, ub, tlb, tub;
    int align;
} Ty;

#define EXT(t) ((t)->ub - (t)->lb)

static Ty ty_map(long n) {
    Ty t;
    memset(&t, 0, sizeof t);
    t.disp = malloc(sizeof(long) * (n ? n : 1));
    t.bt = malloc(n ? n : 1);
    t.dt = t.h0 = MPI_DATATYPE_NULL;
    return t;
}

static void ty_true(Ty *t) {
    t->tlb = t->tub = 0;
    for (long e = 0; e < t->n; e++) {
        long a = t->disp[e], z = a + bsize[t->bt[e]];
        if (e == 0 || a < t->tlb) t->tlb = a;
        if (e == 0 || z > t->tub) t->tub = z;
    }
}

static Ty ty_basic(int b) {
    Ty t = ty_map(1);
    t.dt = t.h0 = bdt(b);
    t.n = 1;
    t.disp[0] = 0;
    t.bt[0] = (unsigned char)b;
    t.lb = 0;
    t.ub = t.align = bsize[b];
    ty_true(&t);
    return t;
}

/* A predefined pair type (MPI-4.0 §6.9.4 defines MPI_2INT, MPI_DOUBLE_INT as the struct
 * {a; b}: b at sizeof(a), the extent rounded up to the alignment). */
static Ty ty_pair(MPI_Datatype dt, int a, int b) {
    Ty t = ty_map(2);
    t.dt = t.h0 = dt;
    t.n = 2;
    t.disp[0] = 0;
    t.bt[0] = (unsigned char)a;
    t.disp[1] = bsize[a];
    t.bt[1] = (unsigned char)b;
    t.align = bsize[a] > bsize[b] ? bsize[a] : bsize[b];
    t.lb = 0;
    t.ub = bsize[a] + bsize[b];
    if (t.ub % t.align) t.ub += t.align - t.ub % t.align;
    ty_true(&t);
    return t;
}

/* The type map of nb blocks, block i being bl[i] consecutive copies of *ch[i] starting at
 * byte at[i] (the general constructor, MPI-4.0 §5.1.2-5.1.6); lb/ub are the least and
 * greatest bounds of the copies. */
static Ty tm_blocks(int nb, const long *bl, const long *at, Ty *const *ch) {
    long tot = 0;
    for (int i = 0; i < nb; i++) tot += bl[i] * ch[i]->n;
    Ty t = ty_map(tot);
    int any = 0;
    t.align = 1;
    for (int i = 0; i < nb; i++) {
        long ext = EXT(ch[i]);
        if (ch[i]->align > t.align) t.align = ch[i]->align;
        for (long b = 0; b < bl[i]; b++) {
            long sh = at[i] + b * ext;
            for (long e = 0; e < ch[i]->n; e++) {
                t.disp[t.n] = sh + ch[i]->disp[e];
                t.bt[t.n++] = ch[i]->bt[e];
            }
            long lo = sh + ch[i]->lb, hi = sh + ch[i]->ub;
            if (!any || lo < t.lb) t.lb = lo;
            if (!any || hi > t.ub) t.ub = hi;
            any = 1;
        }
    }
    t.derived = 1;
    ty_true(&t);
    return t;
}

static Ty ty_contig(int n, Ty *c) {
    long bl = n, at = 0;
    Ty t = tm_blocks(1, &bl, &at, &c);
    MPI_Type_contiguous(n, c->dt, &t.dt);
    return t;
}

static Ty ty_vector(int cnt, int bl, int stride, Ty *c) {
    long bls[16], at[16];
    Ty *cs[16];
    for (int i = 0; i < cnt; i++) bls[i] = bl, at[i] = (long)i * stride * EXT(c), cs[i] = c;
    Ty t = tm_blocks(cnt, bls, at, cs);
    MPI_Type_vector(cnt, bl, stride, c->dt, &t.dt);
    return t;
}

static Ty ty_hvector(int cnt, int bl, long stride, Ty *c) {
    long bls[16], at[16];
    Ty *cs[16];
    for (int i = 0; i < cnt; i++) bls[i] = bl, at[i] = (long)i * stride, cs[i] = c;
    Ty t = tm_blocks(cnt, bls, at, cs);
    MPI_Type_create_hvector(cnt, bl, (MPI_Aint)stride, c->dt, &t.dt);
    return t;
}

static Ty ty_indexed(int cnt, const int *bl, const int *d, Ty *c) {
    long bls[16], at[16];
    Ty *cs[16];
    for (int i = 0; i < cnt; i++) bls[i] = bl[i], at[i] = (long)d[i] * EXT(c), cs[i] = c;
    Ty t = tm_blocks(cnt, bls, at, cs);
    MPI_Type_indexed(cnt, bl, d, c->dt, &t.dt);
    return t;
}

static Ty ty_idxblock(int cnt, int bl, const int *d, Ty *c) {
    long bls[16], at[16];
    Ty *cs[16];
    for (int i = 0; i < cnt; i++) bls[i] = bl, at[i] = (long)d[i] * EXT(c), cs[i] = c;
    Ty t = tm_blocks(cnt, bls, at, cs);
    MPI_Type_create_indexed_block(cnt, bl, d, c->dt, &t.dt);
    return t;
}

static Ty ty_hindexed(int cnt, const int *bl, const long *d, Ty *c) {
    long bls[16], at[16];
    Ty *cs[16];
    MPI_Aint ad[16];
    for (int i = 0; i < cnt; i++) bls[i] = bl[i], at[i] = d[i], cs[i] = c, ad[i] = d[i];
    Ty t = tm_blocks(cnt, bls, at, cs);
    MPI_Type_create_hindexed(cnt, bl, ad, c->dt, &t.dt);
    return t;
}

/* MPI_Type_create_struct: the extent is rounded up to the largest alignment of its
 * elements (the epsilon of MPI-4.0 §5.1.6). */
static Ty ty_struct(int cnt, const int *bl, const long *d, Ty *const *cs) {
    long bls[16], at[16];
    MPI_Aint ad[16];
    MPI_Datatype dts[16];
    for (int i = 0; i < cnt; i++) bls[i] = bl[i], at[i] = d[i], ad[i] = d[i], dts[i] = cs[i]->dt;
    Ty t = tm_blocks(cnt, bls, at, cs);
    long ext = EXT(&t);
    if (ext % t.align) t.ub += t.align - ext % t.align;
    MPI_Type_create_struct(cnt, bl, ad, dts, &t.dt);
    return t;
}

static Ty ty_resized(Ty *c, long lb, long ext) {
    Ty t = ty_map(c->n);
    t.n = c->n;
    memcpy(t.disp, c->disp, sizeof(long) * c->n);
    memcpy(t.bt, c->bt, c->n);
    t.lb = lb;
    t.ub = lb + ext;
    t.align = c->align;
    t.derived = 1;
    ty_true(&t);
    MPI_Type_create_resized(c->dt, lb, ext, &t.dt);
    return t;
}

static void ty_free_handle(Ty *t) {
    if (t->derived && t->dt != MPI_DATATYPE_NULL) MPI_Type_free(&t->dt);
}

static void ty_drop(Ty *t) {
    ty_free_handle(t);
    free(t->disp);
    free(t->bt);
    t->disp = NULL;
    t->bt = NULL;
}

/* The datatype rows' constructors (element basic type b). */
enum {
    TK_PRED,    /* the predefined type itself */
    TK_2INT,    /* MPI_2INT */
    TK_DINT,    /* MPI_DOUBLE_INT */
    TK_CONTIG,  /* contiguous(3) */
    TK_VEC,     /* vector(2, 2, 3): a hole after each block */
    TK_IDX,     /* indexed({1,2}, {3,0}): reordered, with a hole */
    TK_TRANS,   /* hvector(3, 1, sizeof b, vector(3, 1, 3)): the transpose of a 3x3 matrix */
    TK_REVROWS, /* indexed({3,3,3}, {6,3,0}): a 3x3 matrix's rows backwards */
    TK_STRUCT,  /* struct {int @0; double @8; int[2] @24}: mixed, with holes */
    TK_RSVEC,   /* resized(vector(2, 1, -2), lb -3, extent 5 elements): negative lb */
    TK_RSIDX,   /* resized(indexed({1,1}, {-2,1}), lb -3, extent 6 elements) */
    TK_IDXBLK,  /* indexed_block(3, 1, {4,0,2}) */
    TK_HIDX,    /* hindexed({2,1}, {5 elements, 0} bytes) */
};

static Ty mk_type(int kind, int b) {
    Ty base = ty_basic(b), t, tmp;
    long sz = bsize[b];
    switch (kind) {
    case TK_PRED:
        return base;
    case TK_2INT:
        ty_drop(&base);
        return ty_pair(MPI_2INT, B_INT, B_INT);
    case TK_DINT:
        ty_drop(&base);
        return ty_pair(MPI_DOUBLE_INT, B_DOUBLE, B_INT);
    case TK_CONTIG:
        t = ty_contig(3, &base);
        break;
    case TK_VEC:
        t = ty_vector(2, 2, 3, &base);
        break;
    case TK_IDX: {
        static const int bl[] = {1, 2}, d[] = {3, 0};
        t = ty_indexed(2, bl, d, &base);
        break;
    }
    case TK_TRANS:
        tmp = ty_vector(3, 1, 3, &base);
        t = ty_hvector(3, 1, sz, &tmp);
        ty_drop(&tmp); /* freeing a component leaves the new type intact */
        break;
    case TK_REVROWS: {
        static const int bl[] = {3, 3, 3}, d[] = {6, 3, 0};
        t = ty_indexed(3, bl, d, &base);
        break;
    }
    case TK_STRUCT: {
        Ty ti = ty_basic(B_INT), td = ty_basic(B_DOUBLE);
        static const int bl[] = {1, 1, 2};
        static const long d[] = {0, 8, 24};
        Ty *cs[] = {&ti, &td, &ti};
        t = ty_struct(3, bl, d, cs);
        ty_drop(&ti);
        ty_drop(&td);
        break;
    }
    case TK_RSVEC:
        tmp = ty_vector(2, 1, -2, &base);
        t = ty_resized(&tmp, -3 * sz, 5 * sz);
        ty_drop(&tmp);
        break;
    case TK_RSIDX: {
        static const int bl[] = {1, 1}, d[] = {-2, 1};
        tmp = ty_indexed(2, bl, d, &base);
        t = ty_resized(&tmp, -3 * sz, 6 * sz);
        ty_drop(&tmp);
        break;
    }
    case TK_IDXBLK: {
        static const int d[] = {4, 0, 2};
        t = ty_idxblock(3, 1, d, &base);
        break;
    }
    default: { /* TK_HIDX */
        static const int bl[] = {2, 1};
        long d[] = {5 * sz, 0};
        t = ty_hindexed(2, bl, d, &base);
        break;
    }
    }
    ty_drop(&base);
    MPI_Type_commit(&t.dt);
    t.h0 = t.dt;
    return t;
}

/* ==================================== tables ==================================== */

/* Data movement: the senders use smul x sendtype per unit, the receivers rmul x recvtype
 * (one type signature). */
typedef struct {
    const char *name;
    int sk, sb, smul, rk, rb, rmul;
} TPair;

static const TPair tpairs[] = {
    {"int", TK_PRED, B_INT, 1, TK_PRED, B_INT, 1},
    {"double", TK_PRED, B_DOUBLE, 1, TK_PRED, B_DOUBLE, 1},
    {"2int", TK_2INT, B_INT, 1, TK_2INT, B_INT, 1},
    {"contig", TK_CONTIG, B_INT, 1, TK_CONTIG, B_INT, 1},
    {"vector", TK_VEC, B_INT, 1, TK_VEC, B_INT, 1},
    {"indexed", TK_IDX, B_INT, 1, TK_IDX, B_INT, 1},
    {"transpose>int", TK_TRANS, B_INT, 1, TK_PRED, B_INT, 9},
    {"int>revrows", TK_PRED, B_INT, 9, TK_REVROWS, B_INT, 1},
    {"transpose>revrows", TK_TRANS, B_INT, 1, TK_REVROWS, B_INT, 1},
    {"struct", TK_STRUCT, B_INT, 1, TK_STRUCT, B_INT, 1},
    {"resized-vector", TK_RSVEC, B_INT, 1, TK_RSVEC, B_INT, 1},
    {"resized-indexed", TK_RSIDX, B_INT, 1, TK_RSIDX, B_INT, 1},
    {"idxblock>contig", TK_IDXBLK, B_INT, 1, TK_CONTIG, B_INT, 1},
    {"hindexed>indexed", TK_HIDX, B_INT, 1, TK_IDX, B_INT, 1},
    {"vector>resized-indexed", TK_VEC, B_INT, 1, TK_RSIDX, B_INT, 2},
    {"dvector>dcontig", TK_VEC, B_DOUBLE, 3, TK_CONTIG, B_DOUBLE, 4},
};
#define NTPAIRS ((int)(sizeof tpairs / sizeof tpairs[0]))

enum {
    OP_SUM, OP_PROD, OP_MAX, OP_MIN, OP_BAND, OP_BOR, OP_BXOR, OP_LAND, OP_MINLOC, OP_MAXLOC,
    OP_UCOMM, /* user, commutative: a + b mod 2^32 */
    OP_UNONC, /* user, associative and non-commutative: affine maps mod 2^16 composed */
};

typedef struct {
    const char *name;
    int opk, tk, tb;
    int pre_derived; /* a predefined op on a derived datatype: rc reported, data checked on success */
} RRow;

static const RRow rrows[] = {
    {"sum/int", OP_SUM, TK_PRED, B_INT, 0},
    {"sum/double", OP_SUM, TK_PRED, B_DOUBLE, 0},
    {"prod/int", OP_PROD, TK_PRED, B_INT, 0},
    {"prod/double", OP_PROD, TK_PRED, B_DOUBLE, 0},
    {"max/int", OP_MAX, TK_PRED, B_INT, 0},
    {"min/double", OP_MIN, TK_PRED, B_DOUBLE, 0},
    {"max/unsigned", OP_MAX, TK_PRED, B_UINT, 0},
    {"band/int", OP_BAND, TK_PRED, B_INT, 0},
    {"bor/int", OP_BOR, TK_PRED, B_INT, 0},
    {"bxor/int", OP_BXOR, TK_PRED, B_INT, 0},
    {"land/int", OP_LAND, TK_PRED, B_INT, 0},
    {"minloc/2int", OP_MINLOC, TK_2INT, B_INT, 0},
    {"maxloc/double_int", OP_MAXLOC, TK_DINT, B_DOUBLE, 0},
    {"ucomm/unsigned", OP_UCOMM, TK_PRED, B_UINT, 0},
    {"unoncomm/unsigned", OP_UNONC, TK_PRED, B_UINT, 0},
    {"ucomm/contig", OP_UCOMM, TK_CONTIG, B_UINT, 0},
    {"unoncomm/vector", OP_UNONC, TK_VEC, B_UINT, 0},
    {"ucomm/transpose", OP_UCOMM, TK_TRANS, B_UINT, 0},
    {"unoncomm/revrows", OP_UNONC, TK_REVROWS, B_UINT, 0},
    {"unoncomm/resized-vector", OP_UNONC, TK_RSVEC, B_UINT, 0},
    {"ucomm/resized-indexed", OP_UCOMM, TK_RSIDX, B_UINT, 0},
    {"unoncomm/indexed", OP_UNONC, TK_IDX, B_UINT, 0},
    {"sum/contig(int)", OP_SUM, TK_CONTIG, B_INT, 1},
    {"max/vector(int)", OP_MAX, TK_VEC, B_INT, 1},
};
#define NRROWS ((int)(sizeof rrows / sizeof rrows[0]))

enum { K_SYNC, K_DATA, K_RED, K_NBR };
enum {
    X_BARRIER, X_BCAST, X_GATHER, X_GATHERV, X_SCATTER, X_SCATTERV, X_ALLGATHER, X_ALLGATHERV,
    X_ALLTOALL, X_ALLTOALLV, X_ALLTOALLW, X_REDUCE, X_ALLREDUCE, X_REDSCAT, X_REDSCATB, X_SCAN,
    X_EXSCAN, X_NALLGATHER, X_NALLGATHERV, X_NALLTOALL, X_NALLTOALLV, X_NALLTOALLW, NCOLL
};

enum { C_DUP, C_REV, C_INTER, C_CART, C_CARTNP, C_GRAPH, C_GRAPH2, NCOMM };
static const char *comm_name[] = {"dup", "revsplit", "inter", "cart", "cart-nonperiodic",
                                  "distgraph", "distgraph-dupedge"};
static const int comms_std[] = {C_DUP, C_REV, C_INTER};
static const int comms_scan[] = {C_DUP, C_REV}; /* Scan/Exscan: not defined on intercomms */
static const int comms_nbr[] = {C_CART, C_CARTNP, C_GRAPH, C_GRAPH2};

typedef struct {
    const char *name; /* the MPI name without MPI_ (and the shim's collective name) */
    int kind, rooted, inplace;
    const int *comms;
    int ncomms;
} CollDef;

#define STD comms_std, 3
static const CollDef colls[NCOLL] = {
    {"Barrier", K_SYNC, 0, 0, STD},
    {"Bcast", K_DATA, 1, 0, STD},
    {"Gather", K_DATA, 1, 1, STD},
    {"Gatherv", K_DATA, 1, 1, STD},
    {"Scatter", K_DATA, 1, 1, STD},
    {"Scatterv", K_DATA, 1, 1, STD},
    {"Allgather", K_DATA, 0, 1, STD},
    {"Allgatherv", K_DATA, 0, 1, STD},
    {"Alltoall", K_DATA, 0, 1, STD},
    {"Alltoallv", K_DATA, 0, 1, STD},
    {"Alltoallw", K_DATA, 0, 1, STD},
    {"Reduce", K_RED, 1, 1, STD},
    {"Allreduce", K_RED, 0, 1, STD},
    {"Reduce_scatter", K_RED, 0, 1, STD},
    {"Reduce_scatter_block", K_RED, 0, 1, STD},
    {"Scan", K_RED, 0, 1, comms_scan, 2},
    {"Exscan", K_RED, 0, 1, comms_scan, 2},
    {"Neighbor_allgather", K_NBR, 0, 0, comms_nbr, 4},
    {"Neighbor_allgatherv", K_NBR, 0, 0, comms_nbr, 4},
    {"Neighbor_alltoall", K_NBR, 0, 0, comms_nbr, 4},
    {"Neighbor_alltoallv", K_NBR, 0, 0, comms_nbr, 4},
    {"Neighbor_alltoallw", K_NBR, 0, 0, comms_nbr, 4},
};
#undef STD

enum { F_B, F_I, F_P, F_BC, F_IC, F_PC, NFORM };
static const char *form_name[] = {"blocking", "nonblocking", "persistent",
                                  "blocking_c", "nonblocking_c", "persistent_c"};
#define IS_I(f) ((f) == F_I || (f) == F_IC)
#define IS_P(f) ((f) == F_P || (f) == F_PC)
#define IS_C(f) ((f) >= F_BC)

enum { FR_NONE, FR_TYPE, FR_OP, FR_COMM, NFR };
static const char *free_name[] = {"none", "type", "op", "comm"};

static const int counts[] = {0, 1, 3};
#define NCOUNTS 3

static const char *compl_name[] = {"wait", "test", "waitall", "testall"};

typedef struct {
    int coll, form, fr, row, comm, cnt, root, ip, compl;
} Case;

static int nrows(int coll) {
    switch (colls[coll].kind) {
    case K_SYNC: return 1;
    case K_RED: return NRROWS;
    default: return NTPAIRS;
    }
}

static const char *row_name(int coll, int row) {
    switch (colls[coll].kind) {
    case K_SYNC: return "-";
    case K_RED: return rrows[row].name;
    default: return tpairs[row].name;
    }
}

static int row_derived(int coll, int row) {
    switch (colls[coll].kind) {
    case K_SYNC: return 0;
    case K_RED: return rrows[row].tk >= TK_CONTIG;
    default: return tpairs[row].sk >= TK_CONTIG || tpairs[row].rk >= TK_CONTIG;
    }
}

static int row_userop(int coll, int row) {
    return colls[coll].kind == K_RED && rrows[row].opk >= OP_UCOMM;
}

/* Whether free mode fr applies to (coll, form, row). */
static int free_applies(int coll, int form, int fr, int row) {
    if (fr == FR_NONE) return 1;
    if (form == F_B || form == F_BC) return 0;
    if (fr == FR_COMM) return IS_I(form);
    if (fr == FR_TYPE) return row_derived(coll, row);
    return row_userop(coll, row);
}

/* ============================== communicators ============================== */

typedef struct {
    MPI_Comm c;
    int avail, inter, p, q, me, mygrp;
    int lw[MAXP], rw[MAXP]; /* world rank of each rank of the local / remote group */
} CommInfo;

static CommInfo G[NCOMM];
static int g_wrank, g_wsize;
static MPI_Comm g_aux; /* for the point-to-point requests completed with a collective */

/* The neighbour lists of rank r (sources S, destinations D), computed from the topology's
 * definition. Graph: edges r->r+1, r->r-1, r->r+2 (mod p) without duplicates; graph2: the
 * same without removing duplicates plus a second edge r->r+1. */
static void nb_lists(int cix, int p, int r, int *S, int *ns, int *D, int *nd) {
    int cs[4], cd[4], n = 0;
    switch (cix) {
    case C_CART:
        S[0] = D[0] = (r - 1 + p) % p;
        S[1] = D[1] = (r + 1) % p;
        *ns = *nd = 2;
        return;
    case C_CARTNP:
        S[0] = D[0] = r > 0 ? r - 1 : MPI_PROC_NULL;
        S[1] = D[1] = r < p - 1 ? r + 1 : MPI_PROC_NULL;
        *ns = *nd = 2;
        return;
    case C_GRAPH2:
        D[0] = (r + 1) % p, D[1] = (r - 1 + p) % p, D[2] = (r + 2) % p, D[3] = (r + 1) % p;
        S[0] = (r - 1 + p) % p, S[1] = (r + 1) % p, S[2] = (r - 2 + 2 * p) % p, S[3] = (r - 1 + p) % p;
        *ns = *nd = 4;
        return;
    default: /* C_GRAPH */
        cd[0] = (r + 1) % p, cd[1] = (r - 1 + p) % p, cd[2] = (r + 2) % p;
        cs[0] = (r - 1 + p) % p, cs[1] = (r + 1) % p, cs[2] = (r - 2 + 2 * p) % p;
        for (int i = 0; i < 3; i++) {
            int dup = 0;
            for (int j = 0; j < n; j++) dup |= D[j] == cd[i];
            if (!dup) D[n++] = cd[i];
        }
        *nd = n;
        n = 0;
        for (int i = 0; i < 3; i++) {
            int dup = 0;
            for (int j = 0; j < n; j++) dup |= S[j] == cs[i];
            if (!dup) S[n++] = cs[i];
        }
        *ns = n;
        return;
    }
}

/* Which block of which process lands in receive block i of rank r (MPI-4.0 §8.6):
 * Cartesian: the neighbour's block in the opposite direction, i^1 (also when both
 * neighbours are one process, MPI-4.0 errata for periodic dimensions of size 1 or 2);
 * distributed graph: messages between one pair are matched in list order (the k-th
 * receive from s takes s's k-th send to r). *s = MPI_PROC_NULL: nothing lands there. */
static void nb_match(int cix, int p, int r, int i, int *s, int *j) {
    int S[8], D[8], ns, nd;
    nb_lists(cix, p, r, S, &ns, D, &nd);
    *s = S[i];
    *j = -1;
    if (*s == MPI_PROC_NULL) return;
    if (cix == C_CART || cix == C_CARTNP) {
        *j = i ^ 1;
        return;
    }
    int k = 0;
    for (int t = 0; t < i; t++) k += S[t] == *s;
    nb_lists(cix, p, *s, S, &ns, D, &nd);
    for (int t = 0; t < nd; t++)
        if (D[t] == r && k-- == 0) {
            *j = t;
            return;
        }
}

static void comms_init(void) {
    int p = g_wsize, r = g_wrank;
    for (int c = 0; c < NCOMM; c++) {
        CommInfo *g = &G[c];
        g->avail = 1;
        g->p = g->q = p;
        g->me = r;
        for (int i = 0; i < p; i++) g->lw[i] = g->rw[i] = i;
        int dims[1] = {p}, per[1] = {c == C_CART};
        switch (c) {
        case C_DUP:
            MPI_Comm_dup(MPI_COMM_WORLD, &g->c);
            break;
        case C_REV:
            MPI_Comm_split(MPI_COMM_WORLD, 0, p - r, &g->c);
            g->me = p - 1 - r;
            for (int i = 0; i < p; i++) g->lw[i] = g->rw[i] = p - 1 - i;
            break;
        case C_INTER: {
            if (p < 2) {
                g->avail = 0;
                g->c = MPI_COMM_NULL;
                continue;
            }
            int h = p / 2, grp = r >= h;
            MPI_Comm loc;
            MPI_Comm_split(MPI_COMM_WORLD, grp, r, &loc);
            MPI_Intercomm_create(loc, 0, g_aux, grp ? 0 : h, 4242, &g->c);
            MPI_Comm_free(&loc);
            g->inter = 1;
            g->mygrp = grp;
            g->p = grp ? p - h : h;
            g->q = p - g->p;
            g->me = grp ? r - h : r;
            for (int i = 0; i < g->p; i++) g->lw[i] = (grp ? h : 0) + i;
            for (int i = 0; i < g->q; i++) g->rw[i] = (grp ? 0 : h) + i;
            break;
        }
        case C_CART:
        case C_CARTNP:
            MPI_Cart_create(MPI_COMM_WORLD, 1, dims, per, 0, &g->c);
            break;
        default: {
            int S[8], D[8], ns, nd;
            nb_lists(c, p, r, S, &ns, D, &nd);
            MPI_Dist_graph_create_adjacent(MPI_COMM_WORLD, ns, S, MPI_UNWEIGHTED, nd, D,
                                           MPI_UNWEIGHTED, MPI_INFO_NULL, 0, &g->c);
            break;
        }
        }
        MPI_Comm_set_errhandler(g->c, MPI_ERRORS_RETURN);
        int me, sz;
        MPI_Comm_rank(g->c, &me);
        MPI_Comm_size(g->c, &sz);
        if (me != g->me || sz != g->p) {
            fprintf(stderr, "coll_matrix: communicator %s: rank %d size %d, expected %d %d\n",
                    comm_name[c], me, sz, g->me, g->p);
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
    }
}

static void comms_free(void) {
    for (int c = 0; c < NCOMM; c++)
        if (G[c].avail) MPI_Comm_free(&G[c].c);
}

/* ================================ values ================================ */

/* Data movement: element k of block bid of the buffer of world rank w, at start s. */
static long long dval(int w, int bid, long k, int s) {
    return 1 + (long long)w * 65536 + (long long)s * 16384 + (long long)bid * 256 + k;
}

static uint32_t uop(int opk, uint32_t a, uint32_t b) {
    if (opk == OP_UCOMM) return a + b;
    /* a = (ma, ca) is x -> ma*x + ca (mod 2^16); a o b applies a, then b */
    uint32_t ma = a >> 16, ca = a & 0xffff, mb = b >> 16, cb = b & 0xffff;
    return (((ma * mb) & 0xffff) << 16) | ((mb * ca + cb) & 0xffff);
}

/* Reductions: element k of world rank w's vector at start s (all exactly representable in
 * int, unsigned and double; products and sums stay small). */
static long long rval(int opk, int bt, int w, long k, int s) {
    long long v;
    switch (opk) {
    case OP_SUM:
        v = w * 100 + k * 3 + s * 7 + 1;
        return k % 3 == 2 ? -v : v;
    case OP_PROD:
        v = 1 + (w + k + s) % 3;
        return k % 4 == 3 ? -v : v;
    case OP_MAX:
    case OP_MIN:
        if (bt == B_UINT) return 0x7FFFFFF0LL + (w * 7 + k * 3 + s * 5) % 31;
        return (w * 7 + k * 3 + s * 5) % 11 - 5;
    case OP_BAND:
        return ((0x5A5A ^ ((w + 1) * 0x1111) ^ (k * 0x0101) ^ (s * 0x2222)) & 0xFFFF) | 0x8001;
    case OP_BOR:
    case OP_BXOR:
        return (0x5A5A ^ ((w + 1) * 0x1111) ^ (k * 0x0101) ^ (s * 0x2222)) & 0xFFFF;
    case OP_LAND:
        return (w + 2 * k + s) % 5 == 0 ? 0 : w + k + 1;
    case OP_MINLOC:
    case OP_MAXLOC: /* pairs (value, index) */
        return k % 2 == 0 ? (w * 5 + (k / 2) * 3 + s) % 4 : w * 3 + k / 2;
    case OP_UCOMM:
        return (uint32_t)(0x9E3779B9u * (uint32_t)(w + 1) + 0x01000193u * (uint32_t)k + 0x3Bu * (uint32_t)s);
    default: { /* OP_UNONC */
        uint32_t m = 2 * ((w * 3 + k + s) % 7) + 1, c = (w * 131 + k * 17 + s * 7) & 0xffff;
        return (m << 16) | c;
    }
    }
}

static long long rcomb(int opk, long long a, long long b) {
    switch (opk) {
    case OP_SUM: return a + b;
    case OP_PROD: return a * b;
    case OP_MAX: return a > b ? a : b;
    case OP_MIN: return a < b ? a : b;
    case OP_BAND: return a & b;
    case OP_BOR: return a | b;
    case OP_BXOR: return a ^ b;
    case OP_LAND: return (a && b) ? 1 : 0;
    default: return uop(opk, (uint32_t)a, (uint32_t)b);
    }
}

/* The standard's result for element k: ctr[0] o ctr[1] o ... in that (rank) order; with
 * one contributor no op is applied. */
static long long rfold(int opk, int bt, const int *ctr, int n, long k, int s) {
    if (opk == OP_MINLOC || opk == OP_MAXLOC) {
        long k0 = k & ~1L;
        long long v = rval(opk, bt, ctr[0], k0, s), ix = rval(opk, bt, ctr[0], k0 + 1, s);
        for (int i = 1; i < n; i++) {
            long long v2 = rval(opk, bt, ctr[i], k0, s), i2 = rval(opk, bt, ctr[i], k0 + 1, s);
            int better = opk == OP_MINLOC ? v2 < v : v2 > v;
            if (better) v = v2, ix = i2;
            else if (v2 == v && i2 < ix) ix = i2;
        }
        return k & 1 ? ix : v;
    }
    long long a = rval(opk, bt, ctr[0], k, s);
    for (int i = 1; i < n; i++) a = rcomb(opk, a, rval(opk, bt, ctr[i], k, s));
    return a;
}

static void put_elem(char *p, int bt, long long v) {
    if (bt == B_INT) {
        int x = (int)v;
        memcpy(p, &x, 4);
    } else if (bt == B_UINT) {
        unsigned x = (unsigned)v;
        memcpy(p, &x, 4);
    } else {
        double x = (double)v;
        memcpy(p, &x, 8);
    }
}

static double get_elem(const char *p, int bt) {
    if (bt == B_INT) {
        int x;
        memcpy(&x, p, 4);
        return x;
    } else if (bt == B_UINT) {
        unsigned x;
        memcpy(&x, p, 4);
        return x;
    }
    double x;
    memcpy(&x, p, 8);
    return x;
}

/* ============================ the user ops ============================ */

/* The op is written for the datatype of the call: it walks len instances of that type
 * through its type map (all elements MPI_UNSIGNED). MPI-4.0 §6.9.5: the datatype argument
 * is the one passed to the collective. */
static int g_opk;
static MPI_Datatype g_op_dt = MPI_DATATYPE_NULL;
static const Ty *g_op_ty;
static volatile int g_op_bad;
static char g_op_msg[160];

static void uop_run(void *in, void *io, long len, MPI_Datatype dt) {
    const Ty *t = g_op_ty;
    if (!t || dt != g_op_dt) {
        if (!g_op_bad)
            snprintf(g_op_msg, sizeof g_op_msg,
                     "user op called with datatype 0x%lx, the call passed 0x%lx (len %ld)",
                     (unsigned long)(uintptr_t)dt, (unsigned long)(uintptr_t)g_op_dt, len);
        g_op_bad = 1;
        if (dt != MPI_UNSIGNED) return;
        static const long zero = 0;
        static Ty u = {0};
        u.n = 1, u.disp = (long *)&zero, u.ub = 4;
        t = &u;
    }
    long ext = EXT(t);
    for (long i = 0; i < len; i++)
        for (long e = 0; e < t->n; e++) {
            long off = i * ext + t->disp[e];
            uint32_t a, b;
            memcpy(&a, (char *)in + off, 4);
            memcpy(&b, (char *)io + off, 4);
            b = uop(g_opk, a, b);
            memcpy((char *)io + off, &b, 4);
        }
}

static void uop_fn(void *in, void *io, int *len, MPI_Datatype *dt) { uop_run(in, io, *len, *dt); }
static void uop_fn_c(void *in, void *io, MPI_Count *len, MPI_Datatype *dt) {
    uop_run(in, io, (long)*len, *dt);
}

static MPI_Op pre_op(int opk) {
    static const MPI_Op o[] = {MPI_SUM, MPI_PROD, MPI_MAX, MPI_MIN, MPI_BAND,
                               MPI_BOR, MPI_BXOR, MPI_LAND, MPI_MINLOC, MPI_MAXLOC};
    return o[opk];
}

/* ============================== buffers ============================== */

enum { W_IN, W_EXP, W_ANY, W_NONE };

/* A block of a buffer: cnt instances of *t at byte disp. W_IN: this rank's input values;
 * W_EXP: the values the standard says arrive (from world rank src's block bid, or the
 * reduction over ctr[] at element offset kbase); W_ANY: undefined by the standard (only
 * written through the type map); W_NONE: must stay untouched (sizes the buffer). */
typedef struct {
    long disp;
    Ty *t;
    long cnt;
    int what, src, bid;
    long kbase;
    int nctr;
    int ctr[MAXP];
} Blk;

typedef struct {
    int nb, cap;
    Blk *b;
    long lo, hi, size;
    unsigned char *mem, *snap, *state;
    char *base;
    int seed, mul, used; /* the sentinel pattern: byte i = seed + start + i * mul */
} Region;

static Blk *rg_add(Region *g, long disp, Ty *t, long cnt, int what, int src, int bid) {
    if (g->nb == g->cap) {
        g->cap = g->cap ? 2 * g->cap : 8;
        g->b = realloc(g->b, sizeof(Blk) * g->cap);
    }
    Blk *b = &g->b[g->nb++];
    memset(b, 0, sizeof *b);
    b->disp = disp, b->t = t, b->cnt = cnt, b->what = what, b->src = src, b->bid = bid;
    return b;
}

static void set_ctr(Blk *b, const int *w, int n, long kbase) {
    b->nctr = n;
    memcpy(b->ctr, w, sizeof(int) * n);
    b->kbase = kbase;
}

static void rg_alloc(Region *g) {
    if (!g->nb) return;
    g->lo = g->hi = 0;
    for (int i = 0; i < g->nb; i++) {
        Blk *b = &g->b[i];
        long lo = b->disp, hi = b->disp;
        if (b->cnt > 0) {
            Ty *t = b->t;
            lo = b->disp + (t->lb < t->tlb ? t->lb : t->tlb);
            hi = b->disp + (b->cnt - 1) * EXT(t) + (t->ub > t->tub ? t->ub : t->tub);
        }
        if (lo < g->lo) g->lo = lo;
        if (hi > g->hi) g->hi = hi;
    }
    g->size = g->hi - g->lo + 2 * GUARD;
    g->mem = malloc(g->size);
    g->snap = malloc(g->size);
    g->state = malloc(g->size);
    g->base = (char *)g->mem + GUARD - g->lo;
    g->used = 1;
}

static void rg_free(Region *g) {
    free(g->b);
    free(g->mem);
    free(g->snap);
    free(g->state);
    memset(g, 0, sizeof *g);
}

/* ============================== one run ============================== */

enum { SEL_NULL, SEL_BUF, SEL_INPLACE };

typedef struct {
    int id, start;
    const Case *cs;
    const char *algo;
    int coll, form, fr, compl, ip, units, red, opk, pre_derived;
    MPI_Comm comm;
    int cix, inter, p, q, me, myw, mygrp, rootgrp, root, rootarg, isroot;
    int lw[MAXP], rw[MAXP];
    Ty st, rt;
    int smul, rmul, have_rt;
    MPI_Op op;
    int user_op, op_freed, comm_freed;
    Region gs, gr;
    int sbsel, rbsel;
    void *sb, *rb;
    int sc, rc;
    int scnt[MAXP], sdsp[MAXP], rcnt[MAXP], rdsp[MAXP];
    MPI_Count scnt_c[MAXP], rcnt_c[MAXP];
    MPI_Aint sdsp_a[MAXP], rdsp_a[MAXP];
    MPI_Datatype sty[MAXP], rty[MAXP];
    Ty *stp[MAXP], *rtp[MAXP];
    int wdisp; /* byte displacements built in sdsp_a/rdsp_a (Alltoallw, Neighbor_alltoallw) */
    MPI_Request req;
    int bad_rc; /* first error a call returned (predefined op on a derived type) */
} X;

static void xfail(X *x, const char *fmt, ...) {
    char m[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m, sizeof m, fmt, ap);
    va_end(ap);
    if (x->algo)
        h_fail(x->id, "[algo=%s start=%d] %s", x->algo, x->start, m);
    else
        h_fail(x->id, "[start=%d] %s", x->start, m);
}

static const char *errstr(int rc) {
    static char s[MPI_MAX_ERROR_STRING + 32];
    int len = 0, cls = rc;
    char e[MPI_MAX_ERROR_STRING];
    PMPI_Error_class(rc, &cls);
    PMPI_Error_string(rc, e, &len);
    snprintf(s, sizeof s, "%s (%s)", h_class_name(cls), e);
    return s;
}

/* Whether rc is MPI_SUCCESS; else reports it (or, for a predefined op on a derived
 * datatype, records it for the RC line). */
static int okrc(X *x, int rc, const char *what) {
    if (rc == MPI_SUCCESS) return 1;
    if (x->pre_derived) {
        if (x->bad_rc == MPI_SUCCESS) x->bad_rc = rc;
        return 0;
    }
    xfail(x, "%s returned %s", what, errstr(rc));
    return 0;
}

static int u1(int c, int i) { return c == 0 ? 0 : (i == 1 ? 0 : 1 + (c + i) % 3); }
static int u2(int c, int i, int j) {
    return c == 0 ? 0 : ((2 * i + j) % 4 == 3 ? 0 : 1 + (c + i + 2 * j) % 3);
}
static int u2s(int c, int i, int j) { return c == 0 ? 0 : ((i + j) % 4 == 3 ? 0 : 1 + (c + i + j) % 3); }

/* Displacements (in extents) placing the blocks in reverse order with a gap before each. */
static void rev_gaps(int n, const int *cnt, int *dsp) {
    int off = 1;
    for (int i = n - 1; i >= 0; i--) {
        dsp[i] = off;
        off += cnt[i] + 1;
    }
}

/* The same in bytes for blocks of different types (8-aligned, gaps between). */
static void rev_bytes(int n, Ty *const *t, const int *cnt, MPI_Aint *d) {
    long off = 16;
    for (int i = n - 1; i >= 0; i--) {
        long lo = t[i]->lb < t[i]->tlb ? t[i]->lb : t[i]->tlb;
        long hi = t[i]->ub > t[i]->tub ? t[i]->ub : t[i]->tub;
        long start = (off + 7) & ~7L;
        d[i] = start - lo;
        long end = cnt[i] > 0 ? d[i] + (cnt[i] - 1) * EXT(t[i]) + hi : start;
        off = end + 8;
    }
}

/* Lays out the buffers and arguments of the case on this rank (the standard's definition
 * of each collective, MPI-4.0 chapters 6 and 8). */
static void build(X *x) {
    int c = x->units, me = x->me, p = x->p;
    Ty *S = &x->st, *R = x->red ? &x->st : &x->rt;
    int sm = x->smul, rm = x->rmul;
    Region *GS = &x->gs, *GR = &x->gr;
    int intra = !x->inter;
    const int *srcw = intra ? x->lw : x->rw; /* world ranks of the group I receive from */
    int ns = intra ? p : x->q;
    int inroot = intra || x->mygrp == x->rootgrp;
    int isroot = inroot && me == x->root;
    int rootw = inroot ? x->lw[x->root] : x->rw[x->root];
    int ip = x->ip;
    Blk *b;
    x->isroot = isroot;
    x->rootarg = intra ? x->root : inroot ? (isroot ? MPI_ROOT : MPI_PROC_NULL) : x->root;
    x->sbsel = x->rbsel = SEL_NULL;

    switch (x->coll) {
    case X_BARRIER:
        break;
    case X_BCAST:
        x->sc = c * sm, x->rc = c * rm;
        if (isroot) rg_add(GS, 0, S, x->sc, W_IN, 0, 0), x->sbsel = SEL_BUF;
        else if (intra || !inroot) rg_add(GR, 0, R, x->rc, W_EXP, rootw, 0), x->rbsel = SEL_BUF;
        break;
    case X_GATHER:
    case X_GATHERV: {
        int v = x->coll == X_GATHERV;
        x->sc = (v ? u1(c, me) : c) * sm;
        x->rc = c * rm;
        if (isroot) {
            for (int i = 0; i < ns; i++) x->rcnt[i] = (v ? u1(c, i) : c) * rm;
            if (v) rev_gaps(ns, x->rcnt, x->rdsp);
            for (int i = 0; i < ns; i++) {
                long d = (long)(v ? x->rdsp[i] : i * x->rc) * EXT(R);
                if (intra && ip && i == me) rg_add(GR, d, R, x->rcnt[i], W_IN, 0, 0);
                else rg_add(GR, d, R, x->rcnt[i], W_EXP, srcw[i], 0);
            }
            x->rbsel = SEL_BUF;
        }
        if (intra ? !(isroot && ip) : !inroot) rg_add(GS, 0, S, x->sc, W_IN, 0, 0), x->sbsel = SEL_BUF;
        else if (isroot && ip) x->sbsel = SEL_INPLACE;
        break;
    }
    case X_SCATTER:
    case X_SCATTERV: {
        int v = x->coll == X_SCATTERV;
        x->sc = c * sm;
        x->rc = (v ? u1(c, me) : c) * rm;
        if (isroot) {
            for (int i = 0; i < ns; i++) x->scnt[i] = (v ? u1(c, i) : c) * sm;
            if (v) rev_gaps(ns, x->scnt, x->sdsp);
            for (int i = 0; i < ns; i++)
                rg_add(GS, (long)(v ? x->sdsp[i] : i * x->sc) * EXT(S), S, x->scnt[i], W_IN, 0, i);
            x->sbsel = SEL_BUF;
        }
        if (intra ? !(isroot && ip) : !inroot) rg_add(GR, 0, R, x->rc, W_EXP, rootw, me), x->rbsel = SEL_BUF;
        else if (isroot && ip) x->rbsel = SEL_INPLACE;
        break;
    }
    case X_ALLGATHER:
    case X_ALLGATHERV: {
        int v = x->coll == X_ALLGATHERV;
        x->sc = (v ? u1(c, me) : c) * sm;
        x->rc = c * rm;
        for (int i = 0; i < ns; i++) x->rcnt[i] = (v ? u1(c, i) : c) * rm;
        if (v) rev_gaps(ns, x->rcnt, x->rdsp);
        for (int i = 0; i < ns; i++) {
            long d = (long)(v ? x->rdsp[i] : i * x->rc) * EXT(R);
            if (ip && i == me) rg_add(GR, d, R, x->rcnt[i], W_IN, 0, 0);
            else rg_add(GR, d, R, x->rcnt[i], W_EXP, srcw[i], 0);
        }
        x->rbsel = SEL_BUF;
        if (ip) x->sbsel = SEL_INPLACE;
        else rg_add(GS, 0, S, x->sc, W_IN, 0, 0), x->sbsel = SEL_BUF;
        break;
    }
    case X_ALLTOALL:
    case X_ALLTOALLV: {
        int v = x->coll == X_ALLTOALLV;
        x->sc = c * sm, x->rc = c * rm;
        if (ip) {
            for (int j = 0; j < ns; j++) x->rcnt[j] = (v ? u2s(c, me, j) : c) * rm;
            if (v) rev_gaps(ns, x->rcnt, x->rdsp);
            for (int j = 0; j < ns; j++) {
                long d = (long)(v ? x->rdsp[j] : j * x->rc) * EXT(R);
                rg_add(GR, d, R, x->rcnt[j], W_IN, 0, j);
                rg_add(GR, d, R, x->rcnt[j], W_EXP, srcw[j], me);
            }
            x->sbsel = SEL_INPLACE;
        } else {
            for (int j = 0; j < ns; j++) x->scnt[j] = (v ? u2(c, me, j) : c) * sm;
            for (int i = 0; i < ns; i++) x->rcnt[i] = (v ? u2(c, i, me) : c) * rm;
            if (v) rev_gaps(ns, x->scnt, x->sdsp), rev_gaps(ns, x->rcnt, x->rdsp);
            for (int j = 0; j < ns; j++)
                rg_add(GS, (long)(v ? x->sdsp[j] : j * x->sc) * EXT(S), S, x->scnt[j], W_IN, 0, j);
            for (int i = 0; i < ns; i++)
                rg_add(GR, (long)(v ? x->rdsp[i] : i * x->rc) * EXT(R), R, x->rcnt[i], W_EXP, srcw[i], me);
            x->sbsel = SEL_BUF;
        }
        x->rbsel = SEL_BUF;
        break;
    }
    case X_ALLTOALLW:
        /* the block between ranks i and j uses the pair's send type then its receive type
         * when i + j is even, the other way round when odd */
        x->wdisp = 1;
        if (ip) {
            for (int j = 0; j < ns; j++) {
                int odd = (me + j) & 1;
                x->rtp[j] = odd ? S : R;
                x->rcnt[j] = u2s(c, me, j) * (odd ? sm : rm);
            }
            rev_bytes(ns, x->rtp, x->rcnt, x->rdsp_a);
            for (int j = 0; j < ns; j++) {
                rg_add(GR, x->rdsp_a[j], x->rtp[j], x->rcnt[j], W_IN, 0, j);
                rg_add(GR, x->rdsp_a[j], x->rtp[j], x->rcnt[j], W_EXP, srcw[j], me);
            }
            x->sbsel = SEL_INPLACE;
        } else {
            for (int j = 0; j < ns; j++) {
                int odd = (me + j) & 1;
                x->stp[j] = odd ? R : S;
                x->scnt[j] = u2(c, me, j) * (odd ? rm : sm);
                x->rtp[j] = odd ? S : R;
                x->rcnt[j] = u2(c, j, me) * (odd ? sm : rm);
            }
            rev_bytes(ns, x->stp, x->scnt, x->sdsp_a);
            rev_bytes(ns, x->rtp, x->rcnt, x->rdsp_a);
            for (int j = 0; j < ns; j++) rg_add(GS, x->sdsp_a[j], x->stp[j], x->scnt[j], W_IN, 0, j);
            for (int i = 0; i < ns; i++) rg_add(GR, x->rdsp_a[i], x->rtp[i], x->rcnt[i], W_EXP, srcw[i], me);
            x->sbsel = SEL_BUF;
        }
        x->rbsel = SEL_BUF;
        break;
    case X_REDUCE:
        x->sc = c;
        if (isroot) {
            if (intra && ip) rg_add(GR, 0, S, c, W_IN, 0, 0), x->sbsel = SEL_INPLACE;
            b = rg_add(GR, 0, S, c, W_EXP, 0, 0);
            set_ctr(b, srcw, ns, 0);
            x->rbsel = SEL_BUF;
        }
        if (intra ? !(isroot && ip) : !inroot) rg_add(GS, 0, S, c, W_IN, 0, 0), x->sbsel = SEL_BUF;
        break;
    case X_ALLREDUCE:
    case X_SCAN:
    case X_EXSCAN: {
        int n = x->coll == X_ALLREDUCE ? ns : x->coll == X_SCAN ? me + 1 : me;
        x->sc = c;
        if (ip) rg_add(GR, 0, S, c, W_IN, 0, 0), x->sbsel = SEL_INPLACE;
        else rg_add(GS, 0, S, c, W_IN, 0, 0), x->sbsel = SEL_BUF;
        if (n > 0) set_ctr(rg_add(GR, 0, S, c, W_EXP, 0, 0), srcw, n, 0);
        else rg_add(GR, 0, S, c, W_ANY, 0, 0); /* Exscan on rank 0: undefined */
        x->rbsel = SEL_BUF;
        break;
    }
    case X_REDSCAT:
    case X_REDSCATB: {
        /* intercomm: the reduction over the remote group's vectors of n elements is
         * scattered over the local group (MPI-4.0 §6.11); n is the same in both groups */
        long n = 0, off = 0;
        if (x->coll == X_REDSCAT) {
            if (intra) {
                for (int i = 0; i < p; i++) x->rcnt[i] = u1(c, i);
            } else {
                int tot = 3 * c;
                for (int i = 0; i < p; i++) x->rcnt[i] = tot / p + (i < tot % p);
            }
            for (int i = 0; i < p; i++) n += x->rcnt[i], off += i < me ? x->rcnt[i] : 0;
            x->rc = x->rcnt[me];
        } else {
            x->rc = intra ? c : c * x->q;
            n = (long)p * x->rc;
            off = (long)me * x->rc;
        }
        if (ip) {
            rg_add(GR, 0, S, n, W_IN, 0, 0);
            rg_add(GR, x->rc * EXT(S), S, n - x->rc, W_ANY, 0, 0);
            x->sbsel = SEL_INPLACE;
        } else {
            rg_add(GS, 0, S, n, W_IN, 0, 0), x->sbsel = SEL_BUF;
        }
        set_ctr(rg_add(GR, 0, S, x->rc, W_EXP, 0, 0), srcw, ns, off * S->n);
        x->rbsel = SEL_BUF;
        break;
    }
    case X_NALLGATHER:
    case X_NALLGATHERV:
    case X_NALLTOALL:
    case X_NALLTOALLV:
    case X_NALLTOALLW: {
        int Sl[8], Dl[8], nin, nout;
        nb_lists(x->cix, p, me, Sl, &nin, Dl, &nout);
        int kind = x->coll;
        x->sc = c * sm, x->rc = c * rm;
        x->wdisp = kind == X_NALLTOALLW;
        if (kind == X_NALLGATHER || kind == X_NALLGATHERV) {
            int v = kind == X_NALLGATHERV;
            x->sc = (v ? u1(c, me) : c) * sm;
            rg_add(GS, 0, S, x->sc, W_IN, 0, 0);
            for (int i = 0; i < nin; i++)
                x->rcnt[i] = (!v ? c : Sl[i] == MPI_PROC_NULL ? 1 : u1(c, Sl[i])) * rm;
            if (v) rev_gaps(nin, x->rcnt, x->rdsp);
            for (int i = 0; i < nin; i++) {
                long d = (long)(v ? x->rdsp[i] : i * x->rc) * EXT(R);
                if (Sl[i] == MPI_PROC_NULL) rg_add(GR, d, R, x->rcnt[i], W_NONE, 0, 0);
                else rg_add(GR, d, R, x->rcnt[i], W_EXP, x->lw[Sl[i]], 0);
            }
        } else {
            int v = kind != X_NALLTOALL, w = kind == X_NALLTOALLW;
            for (int j = 0; j < nout; j++) {
                int odd = w && (j & 1);
                x->stp[j] = odd ? R : S;
                x->scnt[j] = (v ? u2(c, me, j) : c) * (odd ? rm : sm);
            }
            int src[8], blk[8];
            for (int i = 0; i < nin; i++) {
                nb_match(x->cix, p, me, i, &src[i], &blk[i]);
                int odd = w && src[i] != MPI_PROC_NULL && (blk[i] & 1);
                x->rtp[i] = odd ? S : R;
                x->rcnt[i] = (!v ? c : src[i] == MPI_PROC_NULL ? 1 : u2(c, src[i], blk[i])) * (odd ? sm : rm);
            }
            if (w) {
                rev_bytes(nout, x->stp, x->scnt, x->sdsp_a);
                rev_bytes(nin, x->rtp, x->rcnt, x->rdsp_a);
            } else if (v) {
                rev_gaps(nout, x->scnt, x->sdsp);
                rev_gaps(nin, x->rcnt, x->rdsp);
            }
            for (int j = 0; j < nout; j++) {
                long d = w ? x->sdsp_a[j] : (long)(v ? x->sdsp[j] : j * x->sc) * EXT(S);
                rg_add(GS, d, x->stp[j], x->scnt[j], W_IN, 0, j);
            }
            for (int i = 0; i < nin; i++) {
                long d = w ? x->rdsp_a[i] : (long)(v ? x->rdsp[i] : i * x->rc) * EXT(R);
                if (src[i] == MPI_PROC_NULL) rg_add(GR, d, x->rtp[i], x->rcnt[i], W_NONE, 0, 0);
                else if (blk[i] < 0) {
                    fprintf(stderr, "coll_matrix: no edge matches block %d of rank %d\n", i, me);
                    MPI_Abort(MPI_COMM_WORLD, 3);
                } else rg_add(GR, d, x->rtp[i], x->rcnt[i], W_EXP, x->lw[src[i]], blk[i]);
            }
        }
        x->sbsel = x->rbsel = SEL_BUF;
        break;
    }
    }
    for (int i = 0; i < MAXP; i++) {
        x->scnt_c[i] = x->scnt[i];
        x->rcnt_c[i] = x->rcnt[i];
        if (x->wdisp) {
            x->sdsp[i] = (int)x->sdsp_a[i];
            x->rdsp[i] = (int)x->rdsp_a[i];
        } else {
            x->sdsp_a[i] = x->sdsp[i];
            x->rdsp_a[i] = x->rdsp[i];
        }
        x->sty[i] = x->stp[i] ? x->stp[i]->dt : S->dt;
        x->rty[i] = x->rtp[i] ? x->rtp[i]->dt : R->dt;
    }
}

/* Fills the buffers for start s: sentinels everywhere, this rank's input values in the
 * W_IN blocks; remembers every byte; marks the bytes the call may write. */
static void prepare(X *x, Region *g) {
    if (!g->used) return;
    for (long i = 0; i < g->size; i++) g->mem[i] = (unsigned char)(g->seed + x->start + i * g->mul);
    memset(g->state, 0, g->size);
    for (int bi = 0; bi < g->nb; bi++) {
        Blk *b = &g->b[bi];
        if (b->what != W_IN) continue;
        Ty *t = b->t;
        for (long c = 0; c < b->cnt; c++)
            for (long e = 0; e < t->n; e++) {
                long k = c * t->n + e, off = b->disp + c * EXT(t) + t->disp[e];
                long long v = x->red ? rval(x->opk, t->bt[e], x->myw, b->kbase + k, x->start)
                                     : dval(x->myw, b->bid, k, x->start);
                put_elem(g->base + off, t->bt[e], v);
            }
    }
    memcpy(g->snap, g->mem, g->size);
    for (int bi = 0; bi < g->nb; bi++) {
        Blk *b = &g->b[bi];
        if (b->what != W_EXP && b->what != W_ANY) continue;
        Ty *t = b->t;
        for (long c = 0; c < b->cnt; c++)
            for (long e = 0; e < t->n; e++) {
                long off = b->disp + c * EXT(t) + t->disp[e] - g->lo + GUARD;
                memset(g->state + off, b->what == W_EXP ? 1 : 2, bsize[t->bt[e]]);
            }
    }
}

static void check(X *x, Region *g, const char *what) {
    if (!g->used) return;
    for (int bi = 0; bi < g->nb; bi++) {
        Blk *b = &g->b[bi];
        if (b->what != W_EXP) continue;
        Ty *t = b->t;
        for (long c = 0; c < b->cnt; c++)
            for (long e = 0; e < t->n; e++) {
                long k = c * t->n + e, off = b->disp + c * EXT(t) + t->disp[e];
                int bt = t->bt[e];
                double got = get_elem(g->base + off, bt);
                long long want = x->red ? rfold(x->opk, bt, b->ctr, b->nctr, b->kbase + k, x->start)
                                        : dval(b->src, b->bid, k, x->start);
                if (got != (double)want) {
                    if (x->red)
                        xfail(x, "%s buffer element %ld (block %d, byte %ld): got %.17g, want %lld",
                              what, k, bi, off, got, want);
                    else
                        xfail(x, "%s buffer element %ld of the block from world rank %d "
                                 "(its block %d; byte %ld): got %.17g, want %lld",
                              what, k, b->src, b->bid, off, got, want);
                    goto bytes;
                }
            }
    }
bytes:
    for (long i = 0; i < g->size; i++)
        if (!g->state[i] && g->mem[i] != g->snap[i]) {
            xfail(x, "%s buffer byte %ld (relative to the buffer pointer; %s) changed: 0x%02x -> 0x%02x",
                  what, i - GUARD + g->lo,
                  i < GUARD || i >= g->size - GUARD ? "outside the buffer"
                  : !strcmp(what, "send")           ? "a send buffer is input only"
                                                    : "not in the receive type map",
                  g->snap[i], g->mem[i]);
            return;
        }
}

#define U(...) __VA_ARGS__
#define DISPATCH(Bn, In, A, AC)                                                         \
    switch (x->form) {                                                                \
    case F_B: rc = MPI_##Bn(U A, x->comm); break;                                     \
    case F_I: rc = MPI_##In(U A, x->comm, &x->req); break;                            \
    case F_P: rc = MPI_##Bn##_init(U A, x->comm, MPI_INFO_NULL, &x->req); break;      \
    case F_BC: rc = MPI_##Bn##_c(U AC, x->comm); break;                               \
    case F_IC: rc = MPI_##In##_c(U AC, x->comm, &x->req); break;                      \
    default: rc = MPI_##Bn##_init_c(U AC, x->comm, MPI_INFO_NULL, &x->req); break;    \
    }

static int issue(X *x) {
    int rc = MPI_SUCCESS;
    void *sb = x->sb, *rb = x->rb;
    MPI_Datatype sd = x->st.dt, rd = x->red ? x->st.dt : x->rt.dt;
    int sc = x->sc, rcv = x->rc, root = x->rootarg;
    MPI_Op op = x->op;
    int *scn = x->scnt, *sds = x->sdsp, *rcn = x->rcnt, *rds = x->rdsp;
    MPI_Count *scc = x->scnt_c, *rcc = x->rcnt_c;
    MPI_Aint *sda = x->sdsp_a, *rda = x->rdsp_a;
    MPI_Datatype *sty = x->sty, *rty = x->rty;
    switch (x->coll) {
    case X_BARRIER:
        switch (x->form) {
        case F_B: rc = MPI_Barrier(x->comm); break;
        case F_I: rc = MPI_Ibarrier(x->comm, &x->req); break;
        default: rc = MPI_Barrier_init(x->comm, MPI_INFO_NULL, &x->req); break;
        }
        break;
    case X_BCAST: {
        void *buf = x->isroot ? sb : rb;
        int n = x->isroot ? sc : rcv;
        MPI_Datatype t = x->isroot ? sd : rd;
        DISPATCH(Bcast, Ibcast, (buf, n, t, root), (buf, (MPI_Count)n, t, root));
        break;
    }
    case X_GATHER:
        DISPATCH(Gather, Igather, (sb, sc, sd, rb, rcv, rd, root), (sb, sc, sd, rb, rcv, rd, root));
        break;
    case X_GATHERV:
        DISPATCH(Gatherv, Igatherv, (sb, sc, sd, rb, rcn, rds, rd, root),
                 (sb, sc, sd, rb, rcc, rda, rd, root));
        break;
    case X_SCATTER:
        DISPATCH(Scatter, Iscatter, (sb, sc, sd, rb, rcv, rd, root), (sb, sc, sd, rb, rcv, rd, root));
        break;
    case X_SCATTERV:
        DISPATCH(Scatterv, Iscatterv, (sb, scn, sds, sd, rb, rcv, rd, root),
                 (sb, scc, sda, sd, rb, rcv, rd, root));
        break;
    case X_ALLGATHER:
        DISPATCH(Allgather, Iallgather, (sb, sc, sd, rb, rcv, rd), (sb, sc, sd, rb, rcv, rd));
        break;
    case X_ALLGATHERV:
        DISPATCH(Allgatherv, Iallgatherv, (sb, sc, sd, rb, rcn, rds, rd), (sb, sc, sd, rb, rcc, rda, rd));
        break;
    case X_ALLTOALL:
        DISPATCH(Alltoall, Ialltoall, (sb, sc, sd, rb, rcv, rd), (sb, sc, sd, rb, rcv, rd));
        break;
    case X_ALLTOALLV:
        DISPATCH(Alltoallv, Ialltoallv, (sb, scn, sds, sd, rb, rcn, rds, rd),
                 (sb, scc, sda, sd, rb, rcc, rda, rd));
        break;
    case X_ALLTOALLW:
        DISPATCH(Alltoallw, Ialltoallw, (sb, scn, sds, sty, rb, rcn, rds, rty),
                 (sb, scc, sda, sty, rb, rcc, rda, rty));
        break;
    case X_REDUCE:
        DISPATCH(Reduce, Ireduce, (sb, rb, sc, sd, op, root), (sb, rb, sc, sd, op, root));
        break;
    case X_ALLREDUCE:
        DISPATCH(Allreduce, Iallreduce, (sb, rb, sc, sd, op), (sb, rb, sc, sd, op));
        break;
    case X_REDSCAT:
        DISPATCH(Reduce_scatter, Ireduce_scatter, (sb, rb, rcn, sd, op), (sb, rb, rcc, sd, op));
        break;
    case X_REDSCATB:
        DISPATCH(Reduce_scatter_block, Ireduce_scatter_block, (sb, rb, rcv, sd, op), (sb, rb, rcv, sd, op));
        break;
    case X_SCAN:
        DISPATCH(Scan, Iscan, (sb, rb, sc, sd, op), (sb, rb, sc, sd, op));
        break;
    case X_EXSCAN:
        DISPATCH(Exscan, Iexscan, (sb, rb, sc, sd, op), (sb, rb, sc, sd, op));
        break;
    case X_NALLGATHER:
        DISPATCH(Neighbor_allgather, Ineighbor_allgather, (sb, sc, sd, rb, rcv, rd), (sb, sc, sd, rb, rcv, rd));
        break;
    case X_NALLGATHERV:
        DISPATCH(Neighbor_allgatherv, Ineighbor_allgatherv, (sb, sc, sd, rb, rcn, rds, rd),
                 (sb, sc, sd, rb, rcc, rda, rd));
        break;
    case X_NALLTOALL:
        DISPATCH(Neighbor_alltoall, Ineighbor_alltoall, (sb, sc, sd, rb, rcv, rd), (sb, sc, sd, rb, rcv, rd));
        break;
    case X_NALLTOALLV:
        DISPATCH(Neighbor_alltoallv, Ineighbor_alltoallv, (sb, scn, sds, sd, rb, rcn, rds, rd),
                 (sb, scc, sda, sd, rb, rcc, rda, rd));
        break;
    case X_NALLTOALLW:
        DISPATCH(Neighbor_alltoallw, Ineighbor_alltoallw, (sb, scn, sda, sty, rb, rcn, rda, rty),
                 (sb, scc, sda, sty, rb, rcc, rda, rty));
        break;
    }
    return rc;
}

/* Completes the request of start x->start; returns 0 when the case cannot go on. */
static int complete(X *x) {
    int rc = MPI_SUCCESS, flag = 0;
    MPI_Status st;
    if (x->form == F_B || x->form == F_BC) return 1;
    if (IS_I(x->form)) {
        int mode = x->compl;
        if (mode == 0) rc = MPI_Wait(&x->req, &st);
        else if (mode == 1) {
            do rc = MPI_Test(&x->req, &flag, &st);
            while (rc == MPI_SUCCESS && !flag);
        } else {
            /* several requests: the collective's and a message to self */
            int in = -1, out = 1000 + x->id;
            MPI_Request r[3];
            MPI_Status sts[3];
            r[0] = x->req;
            MPI_Irecv(&in, 1, MPI_INT, g_wrank, 77, g_aux, &r[1]);
            MPI_Isend(&out, 1, MPI_INT, g_wrank, 77, g_aux, &r[2]);
            if (mode == 2) rc = MPI_Waitall(3, r, sts);
            else {
                do rc = MPI_Testall(3, r, &flag, sts);
                while (rc == MPI_SUCCESS && !flag);
            }
            x->req = r[0];
            if (rc == MPI_SUCCESS && (r[1] != MPI_REQUEST_NULL || r[2] != MPI_REQUEST_NULL || in != out))
                xfail(x, "%s: the point-to-point requests did not complete", compl_name[mode]);
        }
        if (!okrc(x, rc, compl_name[mode])) return 0;
        if (x->req != MPI_REQUEST_NULL)
            xfail(x, "%s returned with the request not set to MPI_REQUEST_NULL", compl_name[mode]);
        return 1;
    }
    /* persistent: the request stays allocated, inactive */
    int mode = (x->compl + x->start) & 1;
    if (mode == 0) rc = MPI_Wait(&x->req, &st);
    else {
        do rc = MPI_Test(&x->req, &flag, &st);
        while (rc == MPI_SUCCESS && !flag);
    }
    if (!okrc(x, rc, mode ? "MPI_Test" : "MPI_Wait")) return 0;
    if (x->req == MPI_REQUEST_NULL) {
        xfail(x, "persistent request set to MPI_REQUEST_NULL by %s", mode ? "MPI_Test" : "MPI_Wait");
        return 0;
    }
    flag = 0;
    rc = MPI_Test(&x->req, &flag, &st);
    if (okrc(x, rc, "MPI_Test of the inactive request") && !flag)
        xfail(x, "MPI_Test of an inactive persistent request returned flag = false");
    return 1;
}

/* Frees what the case's free mode says right after the I* or *_init call. */
static void free_early(X *x) {
    switch (x->fr) {
    case FR_TYPE:
        ty_free_handle(&x->st);
        if (x->have_rt) ty_free_handle(&x->rt);
        break;
    case FR_OP:
        MPI_Op_free(&x->op);
        x->op_freed = 1;
        break;
    case FR_COMM:
        MPI_Comm_free(&x->comm);
        x->comm_freed = 1;
        break;
    }
}

/* ============================ algorithms ============================ */

enum { A_AUTO, A_CYCLE, A_ALL };
static int g_algmode = A_AUTO;
static int (*g_set)(const char *, const char *);
static int (*g_list)(const char *, char *, size_t);
static char g_algs[NCOLL][24][40];
static int g_nalgs[NCOLL];
static unsigned g_algctr[NCOLL];

static int g_warmup; /* CONFORM_WARMUP */

static void algos_init(void) {
    const char *w = getenv("CONFORM_WARMUP");
    g_warmup = w && *w && strcmp(w, "0");
    const char *m = getenv("CONFORM_ALGOS");
    if (m && !strcmp(m, "cycle")) g_algmode = A_CYCLE;
    else if (m && !strcmp(m, "all")) g_algmode = A_ALL;
    g_set = (int (*)(const char *, const char *))dlsym(RTLD_DEFAULT, "shim_set_algorithm");
    g_list = (int (*)(const char *, char *, size_t))dlsym(RTLD_DEFAULT, "shim_algorithms");
    if (!g_set || !g_list) {
        g_algmode = A_AUTO;
        return;
    }
    for (int c = 0; c < NCOLL; c++) {
        char name[64], buf[1024];
        snprintf(name, sizeof name, "MPI_%s", colls[c].name);
        if (g_list(name, buf, sizeof buf) <= 0) continue;
        for (char *tok = strtok(buf, ","); tok && g_nalgs[c] < 24; tok = strtok(NULL, ","))
            if (strcmp(tok, "auto")) snprintf(g_algs[c][g_nalgs[c]++], 40, "%s", tok);
    }
}

/* ============================== running a case ============================== */

/* A case's communicator is freed a few cases later, so that consecutive cases do not
 * reuse one context id. */
#define RETIRE 8
static MPI_Comm g_retired[RETIRE];
static int g_nretired;

static void comm_retire(MPI_Comm c) {
    int i = g_nretired++ % RETIRE;
    if (g_retired[i] != MPI_COMM_NULL && g_nretired > RETIRE) MPI_Comm_free(&g_retired[i]);
    g_retired[i] = c;
}

static void comm_retire_all(void) {
    for (int i = 0; i < RETIRE && i < g_nretired; i++)
        if (g_retired[i] != MPI_COMM_NULL) MPI_Comm_free(&g_retired[i]);
}

static int g_rc_first; /* the first error of a case whose rc is reported (RC line) */

static void run_once(int id, const Case *cs, const char *algo) {
    X *x = calloc(1, sizeof *x);
    const CollDef *d = &colls[cs->coll];
    CommInfo *ci = &G[cs->comm];
    char cname[64];
    snprintf(cname, sizeof cname, "MPI_%s", d->name);
    if (algo && g_set(cname, algo) != 0)
        xfail(x, "shim_set_algorithm(%s, %s) failed", cname, algo);

    x->id = id, x->cs = cs, x->algo = algo;
    x->coll = cs->coll, x->form = cs->form, x->fr = cs->fr, x->ip = cs->ip;
    x->units = counts[cs->cnt];
    x->compl = cs->compl;
    x->red = d->kind == K_RED;
    x->cix = cs->comm, x->inter = ci->inter, x->p = ci->p, x->q = ci->q, x->me = ci->me;
    x->mygrp = ci->mygrp;
    x->myw = g_wrank;
    memcpy(x->lw, ci->lw, sizeof x->lw);
    memcpy(x->rw, ci->rw, sizeof x->rw);
    if (x->inter) {
        x->rootgrp = cs->root;
        int gsize = x->rootgrp == x->mygrp ? x->p : x->q;
        x->root = cs->root ? gsize - 1 : 0;
    } else {
        x->root = cs->root ? x->p - 1 : 0;
    }
    /* every run on a fresh dup, so that a message a broken case leaves behind cannot be
     * matched in a later case (FR_COMM frees it right after the call) */
    MPI_Comm_dup(ci->c, &x->comm);
    /* CONFORM_WARMUP: one barrier on the fresh communicator first, so that a shim that
     * sets a communicator up at its first blocking collective (its shared-memory segment,
     * SHIM_SHM_AFTER=0) runs the case's non-blocking and persistent forms on it too */
    if (g_warmup) MPI_Barrier(x->comm);
    x->op = MPI_OP_NULL;
    if (d->kind == K_RED) {
        const RRow *r = &rrows[cs->row];
        x->opk = r->opk;
        x->pre_derived = r->pre_derived;
        x->st = mk_type(r->tk, r->tb);
        x->smul = x->rmul = 1;
        if (r->opk >= OP_UCOMM) {
            x->user_op = 1;
            if (IS_C(cs->form)) MPI_Op_create_c(uop_fn_c, r->opk == OP_UCOMM, &x->op);
            else MPI_Op_create(uop_fn, r->opk == OP_UCOMM, &x->op);
        } else {
            x->op = pre_op(r->opk);
        }
    } else if (d->kind != K_SYNC) {
        const TPair *t = &tpairs[cs->row];
        x->st = mk_type(t->sk, t->sb);
        x->rt = mk_type(t->rk, t->rb);
        x->have_rt = 1;
        x->smul = t->smul, x->rmul = t->rmul;
    } else {
        x->st = ty_basic(B_INT);
        x->smul = x->rmul = 1;
    }
    x->gs.seed = 0x3C, x->gs.mul = 13;
    x->gr.seed = 0xC3, x->gr.mul = 7;
    build(x);
    /* insignificant buffers: NULL, or (every other case, and always on intercomms) a
     * buffer that must stay untouched */
    if (cs->coll != X_BARRIER && (x->inter || (id & 1))) {
        if (x->sbsel == SEL_NULL) rg_add(&x->gs, 0, &x->st, 2, W_NONE, 0, 0), x->sbsel = SEL_BUF;
        if (x->rbsel == SEL_NULL) rg_add(&x->gr, 0, x->red ? &x->st : &x->rt, 2, W_NONE, 0, 0), x->rbsel = SEL_BUF;
    }
    rg_alloc(&x->gs);
    rg_alloc(&x->gr);
    x->sb = x->sbsel == SEL_INPLACE ? MPI_IN_PLACE : x->sbsel == SEL_BUF ? (void *)x->gs.base : NULL;
    x->rb = x->rbsel == SEL_INPLACE ? MPI_IN_PLACE : x->rbsel == SEL_BUF ? (void *)x->gr.base : NULL;
    x->req = MPI_REQUEST_NULL;

    g_opk = x->opk;
    g_op_dt = x->st.h0;
    g_op_ty = &x->st;
    g_op_bad = 0;

    int nst = IS_P(cs->form) ? NSTARTS : 1;
    int issued = 0;
    if (IS_P(cs->form)) {
        /* *_init with other data in the buffers: the standard moves no data before MPI_Start */
        x->start = NSTARTS + 5;
        prepare(x, &x->gs);
        prepare(x, &x->gr);
        issued = okrc(x, issue(x), "the call");
        if (issued) free_early(x);
        else nst = 0;
    }
    for (int s = 0; s < nst; s++) {
        x->start = s;
        prepare(x, &x->gs);
        prepare(x, &x->gr);
        if (!issued) {
            if (!okrc(x, issue(x), "the call")) break;
            issued = 1;
            if (IS_I(cs->form)) free_early(x);
        }
        if (IS_P(cs->form) && !okrc(x, MPI_Start(&x->req), "MPI_Start")) break;
        if (!complete(x)) break;
        check(x, &x->gs, "send");
        check(x, &x->gr, "recv");
        if (g_op_bad) {
            xfail(x, "%s", g_op_msg);
            g_op_bad = 0;
        }
    }
    if (IS_P(cs->form) && x->req != MPI_REQUEST_NULL) {
        int rc = MPI_Request_free(&x->req);
        okrc(x, rc, "MPI_Request_free");
    }
    g_op_ty = NULL;
    g_op_dt = MPI_DATATYPE_NULL;
    if (x->user_op && !x->op_freed) MPI_Op_free(&x->op);
    if (!x->comm_freed) comm_retire(x->comm);
    ty_drop(&x->st);
    if (x->have_rt) ty_drop(&x->rt);
    rg_free(&x->gs);
    rg_free(&x->gr);
    if (algo) g_set(cname, NULL);
    if (x->pre_derived && x->bad_rc != MPI_SUCCESS && g_rc_first == MPI_SUCCESS) g_rc_first = x->bad_rc;
    free(x);
}

static void run_case(int id, const Case *cs) {
    const CollDef *d = &colls[cs->coll];
    const char *algs[24];
    int na = 0, n = g_nalgs[cs->coll];
    if (g_algmode == A_CYCLE && n > 0) {
        unsigned k = g_algctr[cs->coll]++; /* by case, selected or not: CONFORM_ONLY reproduces */
        for (int t = 0; t < n && !na; t++) {
            const char *a = g_algs[cs->coll][(k + t) % n];
            if (!(IS_P(cs->form) && !strcmp(a, "native"))) algs[na++] = a;
        }
    } else if (g_algmode == A_ALL) {
        for (int t = 0; t < n; t++)
            if (!(IS_P(cs->form) && !strcmp(g_algs[cs->coll][t], "native"))) algs[na++] = g_algs[cs->coll][t];
    }
    if (!G[cs->comm].avail) return; /* skipped at this size; the id stays taken */
    char root[16] = "-", compl[24] = "";
    if (d->rooted) snprintf(root, sizeof root, "%s", cs->root ? "last" : "first");
    if (IS_I(cs->form)) snprintf(compl, sizeof compl, " compl=%s", compl_name[cs->compl]);
    if (IS_P(cs->form)) snprintf(compl, sizeof compl, " compl=%s", (cs->compl & 1) ? "test,wait" : "wait,test");
    if (!h_begin(id, "%s %s free=%s type=%s comm=%s count=%d root=%s inplace=%d%s%s%s", d->name,
                 form_name[cs->form], free_name[cs->fr], row_name(cs->coll, cs->row), comm_name[cs->comm],
                 d->kind == K_SYNC ? 0 : counts[cs->cnt], root, cs->ip, compl,
                 g_algmode == A_CYCLE && na ? " algo=" : "", g_algmode == A_CYCLE && na ? algs[0] : ""))
        return;
    g_rc_first = MPI_SUCCESS;
    if (!na) run_once(id, cs, NULL);
    for (int a = 0; a < na; a++) run_once(id, cs, algs[a]);
    if (d->kind == K_RED && rrows[cs->row].pre_derived) h_rc(id, g_rc_first);
    h_end(id);
}

/* The case list: per collective, form x free mode x row; then (full) the product with
 * communicator x count x root x in place, or (reduced) one of those combinations,
 * rotating. */
static void enumerate(void) {
    int id = 0;
    for (int coll = 0; coll < NCOLL; coll++) {
        const CollDef *d = &colls[coll];
        int nroot = d->rooted ? 2 : 1, nip = d->inplace ? 2 : 1;
        int ncnt = d->kind == K_SYNC ? 1 : NCOUNTS;
        int nv = d->ncomms * ncnt * nroot * nip;
        unsigned k = 0;
        for (int form = 0; form < NFORM; form++) {
            if (coll == X_BARRIER && IS_C(form)) continue; /* there is no MPI_Barrier_c */
            for (int fr = 0; fr < NFR; fr++)
                for (int row = 0; row < nrows(coll); row++) {
                    if (!free_applies(coll, form, fr, row)) continue;
                    for (int v0 = 0; v0 < (h_full ? nv : 1); v0++) {
                        int v = h_full ? v0 : (int)(k++ % nv);
                        Case cs = {coll, form, fr, row};
                        cs.comm = d->comms[v % d->ncomms];
                        v /= d->ncomms;
                        cs.cnt = v % ncnt;
                        v /= ncnt;
                        cs.root = v % nroot;
                        v /= nroot;
                        cs.ip = v % nip;
                        if (cs.comm == C_INTER && cs.ip) { /* no MPI_IN_PLACE on intercomms */
                            if (h_full) continue;
                            cs.ip = 0;
                        }
                        /* a predefined op on a derived datatype is checked on intracomms
                         * only: where it is an error, the processes that pass
                         * MPI_PROC_NULL on an intercomm do not see it, and the others'
                         * messages would be left behind */
                        if (cs.comm == C_INTER && d->kind == K_RED && rrows[row].pre_derived) {
                            if (h_full) continue;
                            cs.comm = C_DUP;
                        }
                        cs.compl = id % 4;
                        run_case(id++, &cs);
                    }
                }
        }
    }
}

int main(int argc, char **argv) {
    h_init(&argc, &argv);
    (void)h_expect; /* error tables only */
    /* the application's world (under ghost processes the user world, which only the
     * MPI_* calls map): the harness's duplicate of it */
    g_wrank = h_rank;
    g_wsize = h_size;
    if (g_wsize > MAXP) {
        fprintf(stderr, "coll_matrix: at most %d processes\n", MAXP);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    MPI_Comm_dup(MPI_COMM_WORLD, &g_aux);
    comms_init();
    algos_init();
    enumerate();
    comm_retire_all();
    comms_free();
    MPI_Comm_free(&g_aux);
    h_finish();
    return 0;
}

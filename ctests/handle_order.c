/* The library's datatype handle order, undisturbed by the shim (issue 33, item 6).
 *
 * A table of datatype-constructor sequences (contiguous, vector, hvector, indexed,
 * hindexed, indexed_block, hindexed_block, struct, resized, subarray, darray, dup, the
 * large-count forms; commit and free in various orders), with MPI_Pack/MPI_Unpack,
 * MPI_Type_get_envelope/MPI_Type_get_contents by the program itself, point-to-point and
 * collectives using the types (blocking and pending) in between. Every datatype handle the
 * library returns to the program is recorded. With HANDLE_ORDER_OUT set, rank r writes
 * its sequence to $HANDLE_ORDER_OUT.r; scripts/tests/handle-order diffs the files of a run
 * without the shim against runs with it (handle values depend on the whole history, so
 * two whole runs are compared).
 *
 * The first scenario is the one of a test suite the shim met (erroneous by the standard,
 * working by accident natively): an indexed type, a struct built from it, both freed, a
 * hindexed type, and a new struct built from the *old* (freed) handle variable. MPICH
 * hands the freed handle to the hindexed type (its free handles are a stack), so the new
 * struct packs like a struct of the hindexed type. Where the library is MPICH with int
 * handles that is checked here too (Pack and Unpack move the hindexed type's bytes); it
 * failed when the shim kept freed handles behind one-byte placeholder types. */
#include "common.h"

static FILE *out;

/* Handles as bytes: an int in MPICH's ABI, a pointer in Open MPI's and the standard ABI. */
static unsigned long long hval(MPI_Datatype t) {
    unsigned long long v = 0;
    memcpy(&v, &t, sizeof t < sizeof v ? sizeof t : sizeof v);
    return v;
}

/* Each value is written as the order of its first appearance (h0, h1, ...: which types
 * reuse which handles, comparable where handles are heap pointers that move from run to
 * run) and, where handles are ints, as the value itself. */
static unsigned long long seen[1024];
static int nseen;

static void rec(const char *what, MPI_Datatype t) {
    unsigned long long v = hval(t);
    int id = 0;
    while (id < nseen && seen[id] != v) id++;
    if (id == nseen && nseen < 1024) seen[nseen++] = v;
    if (!out) return;
    if (sizeof(MPI_Datatype) == sizeof(int))
        fprintf(out, "%-28s h%-3d %llx\n", what, id, v);
    else
        fprintf(out, "%-28s h%d\n", what, id);
}

static int mpich_int_handles(void) {
    char v[MPI_MAX_LIBRARY_VERSION_STRING];
    int n;
    MPI_Get_library_version(v, &n);
    return sizeof(MPI_Datatype) == sizeof(int) && strstr(v, "MPICH Version") != NULL;
}

static void commit(MPI_Datatype *t) { MPI_OK(MPI_Type_commit(t)); }
static void tfree(MPI_Datatype *t) {
    MPI_OK(MPI_Type_free(t));
    CHECK(*t == MPI_DATATYPE_NULL, "MPI_Type_free left the handle");
}

/* Packs one element of `t` from `in` and unpacks it into a zeroed `res`; the bytes packed. */
static int pack_unpack(MPI_Datatype t, const void *in, void *res, int reslen) {
    char buf[4096];
    int pos = 0, upos = 0;
    MPI_OK(MPI_Pack(in, 1, t, buf, sizeof buf, &pos, MPI_COMM_SELF));
    memset(res, 0, reslen);
    MPI_OK(MPI_Unpack(buf, sizeof buf, &upos, res, 1, t, MPI_COMM_SELF));
    CHECK(pos == upos, "packed %d bytes, unpacked %d", pos, upos);
    return pos;
}

/* 1, 2: the scenario; `struct_first`: the struct is freed before the indexed type. */
static void reuse_after_free(int struct_first) {
    int bl[2] = {1, 1}, dp[2] = {0, 2}, one = 1;
    MPI_Aint hd[2] = {0, 2 * sizeof(int)}, zero = 0;
    MPI_Datatype idx, st, hidx, st2, types[1];
    int in[4] = {1, 2, 3, 4}, res[4];
    MPI_OK(MPI_Type_indexed(2, bl, dp, MPI_INT, &idx));
    rec("indexed", idx);
    types[0] = idx;
    MPI_OK(MPI_Type_create_struct(1, &one, &zero, types, &st));
    rec("struct(indexed)", st);
    commit(&st);
    CHECK(pack_unpack(st, in, res, sizeof res) == 2 * (int)sizeof(int), "struct(indexed) packs 2 ints");
    if (struct_first) {
        tfree(&st);
        tfree(&idx);
    } else {
        tfree(&idx);
        tfree(&st);
    }
    MPI_OK(MPI_Type_create_hindexed(2, bl, hd, MPI_INT, &hidx));
    rec("hindexed", hidx);
    int reused = hval(hidx) == hval(types[0]);
    if (struct_first && mpich_int_handles())
        CHECK(reused, "MPICH handed the hindexed type %llx, not the freed indexed type's %llx",
              hval(hidx), hval(types[0]));
    if (!reused) {
        /* the old variable names no type: nothing more to do (erroneous) */
        tfree(&hidx);
        return;
    }
    /* erroneous by the standard: the old variable; the library put the hindexed type there */
    MPI_OK(MPI_Type_create_struct(1, &one, &zero, types, &st2));
    rec("struct(old variable)", st2);
    commit(&st2);
    int n = pack_unpack(st2, in, res, sizeof res);
    CHECK(n == 2 * (int)sizeof(int) && res[0] == 1 && res[1] == 0 && res[2] == 3 && res[3] == 0,
          "struct of the reused handle moved %d bytes: %d %d %d %d", n, res[0], res[1], res[2],
          res[3]);
    tfree(&st2);
    tfree(&hidx);
}

/* 3: one of every constructor, committed, packed; freed in creation order, made again in
 * another order, freed last first. */
static void make_all(MPI_Datatype *t, int *n, int reverse) {
    int bl[3] = {1, 2, 1}, dp[3] = {0, 3, 7}, sizes[2] = {4, 6}, subs[2] = {2, 3},
        starts[2] = {1, 2}, gs[2] = {4, 6}, dist[2] = {MPI_DISTRIBUTE_BLOCK, MPI_DISTRIBUTE_CYCLIC},
        darg[2] = {MPI_DISTRIBUTE_DFLT_DARG, 2}, ps[2] = {1, 1};
    MPI_Aint hd[3] = {0, 16, 40};
    MPI_Datatype stypes[3] = {MPI_INT, MPI_DOUBLE, MPI_CHAR};
    int k = 0;
    for (int j = 0; j < 13; j++) {
        int c = reverse ? 12 - j : j;
        switch (c) {
        case 0: MPI_OK(MPI_Type_contiguous(3, MPI_INT, &t[k])); rec("contiguous", t[k]); break;
        case 1: MPI_OK(MPI_Type_vector(3, 2, 4, MPI_INT, &t[k])); rec("vector", t[k]); break;
        case 2: MPI_OK(MPI_Type_create_hvector(2, 1, 24, MPI_DOUBLE, &t[k])); rec("hvector", t[k]); break;
        case 3: MPI_OK(MPI_Type_indexed(3, bl, dp, MPI_INT, &t[k])); rec("indexed", t[k]); break;
        case 4: MPI_OK(MPI_Type_create_hindexed(3, bl, hd, MPI_INT, &t[k])); rec("hindexed", t[k]); break;
        case 5: MPI_OK(MPI_Type_create_indexed_block(3, 1, dp, MPI_SHORT, &t[k])); rec("indexed_block", t[k]); break;
        case 6: MPI_OK(MPI_Type_create_hindexed_block(3, 2, hd, MPI_INT, &t[k])); rec("hindexed_block", t[k]); break;
        case 7: MPI_OK(MPI_Type_create_struct(3, bl, hd, stypes, &t[k])); rec("struct", t[k]); break;
        case 8: MPI_OK(MPI_Type_create_resized(MPI_INT, 0, 12, &t[k])); rec("resized", t[k]); break;
        case 9: MPI_OK(MPI_Type_create_subarray(2, sizes, subs, starts, MPI_ORDER_C, MPI_INT, &t[k])); rec("subarray", t[k]); break;
        case 10: MPI_OK(MPI_Type_create_darray(1, 0, 2, gs, dist, darg, ps, MPI_ORDER_FORTRAN, MPI_INT, &t[k])); rec("darray", t[k]); break;
        case 11: MPI_OK(MPI_Type_dup(MPI_DOUBLE, &t[k])); rec("dup", t[k]); break;
#if MPI_VERSION >= 4 /* Open MPI 4.1 and 5 (MPI 3.1) have no large-count forms */
        case 12: MPI_OK(MPI_Type_contiguous_c(5, MPI_CHAR, &t[k])); rec("contiguous_c", t[k]); break;
#else
        case 12: MPI_OK(MPI_Type_contiguous(5, MPI_CHAR, &t[k])); rec("contiguous", t[k]); break;
#endif
        }
        k++;
    }
    *n = k;
}

static double g_in[256], g_res[256];

static void every_constructor(void) {
    MPI_Datatype t[16];
    int n;
    make_all(t, &n, 0);
    for (int k = 0; k < n; k++) {
        commit(&t[k]);
        pack_unpack(t[k], g_in, g_res, sizeof g_res);
    }
    for (int k = 0; k < n; k++) tfree(&t[k]);
    make_all(t, &n, 1);
    for (int k = 0; k < n; k++) commit(&t[k]);
    for (int k = n - 1; k >= 0; k--) tfree(&t[k]);
}

/* 4: nested types decoded by the shim (MPI_Pack) and by the program (get_contents, whose
 * derived types are new references the program frees); inner types freed while the outer
 * ones live. */
static void nested_and_contents(void) {
    MPI_Datatype v, h, s, r, d;
    int one = 2;
    MPI_Aint zero = 0;
    MPI_OK(MPI_Type_vector(2, 1, 3, MPI_DOUBLE, &v));
    rec("vector", v);
    MPI_OK(MPI_Type_create_hvector(2, 1, 64, v, &h));
    rec("hvector(vector)", h);
    MPI_OK(MPI_Type_create_struct(1, &one, &zero, &h, &s));
    rec("struct(hvector)", s);
    tfree(&v);
    MPI_OK(MPI_Type_create_resized(s, 0, 256, &r));
    rec("resized(struct)", r);
    commit(&r);
    pack_unpack(r, g_in, g_res, sizeof g_res);
    int ni, na, nd, comb;
    MPI_OK(MPI_Type_get_envelope(r, &ni, &na, &nd, &comb));
    CHECK(comb == MPI_COMBINER_RESIZED && nd == 1, "envelope of the resized type");
    int ints[4];
    MPI_Aint addrs[4];
    MPI_Datatype types[4];
    /* the envelope's counts exactly (Open MPI 4.1 crashes with larger ones) */
    MPI_OK(MPI_Type_get_contents(r, ni, na, nd, ints, addrs, types));
    rec("contents(resized)", types[0]);
    MPI_OK(MPI_Type_get_envelope(types[0], &ni, &na, &nd, &comb));
    CHECK(comb == MPI_COMBINER_STRUCT && ni == 2 && na == 1 && nd == 1, "envelope of the struct");
    MPI_OK(MPI_Type_get_contents(types[0], ni, na, nd, ints, addrs, types + 1));
    rec("contents(struct)", types[1]);
    tfree(&h);
    MPI_OK(MPI_Type_dup(types[1], &d));
    rec("dup(contents)", d);
    commit(&d);
    pack_unpack(d, g_in, g_res, sizeof g_res);
    tfree(&types[0]);
    tfree(&s);
    tfree(&r);
    tfree(&types[1]);
    MPI_OK(MPI_Type_contiguous(4, MPI_INT, &v));
    rec("contiguous", v);
    tfree(&d);
    tfree(&v);
}

/* 5: communication with derived types in between: a send to self, blocking collectives,
 * a broadcast pending while types are made and its type freed before it completes. */
static void with_communication(void) {
    MPI_Datatype v, c, x, y;
    MPI_OK(MPI_Type_vector(4, 1, 2, MPI_INT, &v));
    rec("vector", v);
    commit(&v);
    MPI_OK(MPI_Type_contiguous(2, v, &c));
    rec("contiguous(vector)", c);
    commit(&c);
    static int a[4096], b[4096];
    MPI_OK(MPI_Sendrecv(a, 1, c, g_rank, 7, b, 1, c, g_rank, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    MPI_OK(MPI_Bcast(a, 2, c, 0, MPI_COMM_WORLD));
    MPI_OK(MPI_Allgather(a, 1, v, b, 1, v, MPI_COMM_WORLD));
    MPI_OK(MPI_Alltoall(a, 1, v, b, 1, v, MPI_COMM_WORLD));
    tfree(&v);
    MPI_OK(MPI_Type_create_resized(MPI_INT, 0, 8, &x));
    rec("resized", x);
    commit(&x);
    MPI_Request req;
    MPI_OK(MPI_Ibcast(a, 3, c, 0, MPI_COMM_WORLD, &req));
    MPI_OK(MPI_Type_vector(2, 2, 3, MPI_INT, &y));
    rec("vector (bcast pending)", y);
    tfree(&y);
    MPI_OK(MPI_Wait(&req, MPI_STATUS_IGNORE));
    MPI_OK(MPI_Ibcast(a, 3, c, 0, MPI_COMM_WORLD, &req));
    tfree(&c);
    MPI_OK(MPI_Wait(&req, MPI_STATUS_IGNORE));
    MPI_OK(MPI_Type_contiguous(3, x, &y));
    rec("contiguous (after wait)", y);
    tfree(&x);
    tfree(&y);
    /* collectives of predefined types (schedules the shim may keep) */
    MPI_OK(MPI_Allgather(a, 3, MPI_INT, b, 3, MPI_INT, MPI_COMM_WORLD));
    MPI_OK(MPI_Alltoall(a, 2, MPI_INT, b, 2, MPI_INT, MPI_COMM_WORLD));
    MPI_OK(MPI_Allreduce(a, b, 5, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
    MPI_OK(MPI_Type_vector(2, 1, 2, MPI_INT, &x));
    rec("vector (after collectives)", x);
    tfree(&x);
}

/* 6: holes in the middle: made five, freed the 2nd and 4th, made three, freed in a
 * mixed order, made again. */
static void holes(void) {
    MPI_Datatype t[8];
    char name[32];
    for (int k = 0; k < 5; k++) {
        MPI_OK(MPI_Type_contiguous(k + 1, MPI_CHAR, &t[k]));
        snprintf(name, sizeof name, "contiguous %d", k);
        rec(name, t[k]);
    }
    commit(&t[2]);
    pack_unpack(t[2], g_in, g_res, sizeof g_res);
    tfree(&t[1]);
    tfree(&t[3]);
    for (int k = 5; k < 8; k++) {
        MPI_OK(MPI_Type_vector(2, 1, k, MPI_CHAR, &t[k]));
        snprintf(name, sizeof name, "vector %d", k);
        rec(name, t[k]);
    }
    int order[6] = {5, 0, 7, 2, 4, 6};
    for (int k = 0; k < 6; k++) tfree(&t[order[k]]);
    for (int k = 0; k < 4; k++) {
        MPI_OK(MPI_Type_create_hvector(2, 1, 8 * (k + 1), MPI_INT, &t[k]));
        snprintf(name, sizeof name, "hvector %d", k);
        rec(name, t[k]);
    }
    for (int k = 3; k >= 0; k--) tfree(&t[k]);
}

int main(int argc, char **argv) {
    test_init(&argc, &argv);
    const char *path = getenv("HANDLE_ORDER_OUT");
    if (path) {
        char f[4096];
        snprintf(f, sizeof f, "%s.%d", path, g_rank);
        out = fopen(f, "w");
        CHECK(out != NULL, "cannot write %s", f);
    }
    for (int i = 0; i < 256; i++) g_in[i] = i + 1;
    static const struct {
        const char *name;
        void (*run)(void);
    } table[] = {
        {"issue: struct freed first", NULL},
        {"issue: indexed freed first", NULL},
        {"every constructor", every_constructor},
        {"nested types and get_contents", nested_and_contents},
        {"communication in between", with_communication},
        {"holes", holes},
    };
    for (int i = 0; i < (int)(sizeof table / sizeof table[0]); i++) {
        if (out) fprintf(out, "# %s\n", table[i].name);
        if (i < 2)
            reuse_after_free(i == 0);
        else
            table[i].run();
    }
    if (out) fclose(out);
    const char *names[] = {"MPI_Type_free", "MPI_Pack", "MPI_Type_indexed"};
    check_intercepted(names, 3);
    test_pass("handle_order");
    MPI_Finalize();
    return 0;
}

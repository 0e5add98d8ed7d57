/* Differential test of the collectives: every case runs through the shim (MPI_*) and
 * through the system MPI directly (PMPI_*, the oracle) in the same process, on the same
 * inputs, and the results must be equal.
 *
 * Cases are drawn from a random generator seeded identically on every rank
 * (DIFF_SEED, default 1; DIFF_CASES cases, default 120): collective, form (blocking, I*
 * completed by a random completion function, persistent started twice), communicator
 * (world, dup, split, reversed ranks, Cartesian, distributed graph), datatype (basic,
 * pair, complex, vector, indexed, struct, resized), operation (predefined, user
 * commutative, user non-commutative), count (0, 1, primes, larger), root, in-place.
 *
 * Comparison is bit-exact: integer results always; floating point data holds small
 * integers, whose sums and products are exact in any order. One type holds random
 * fractions; sums over it are compared within a relative tolerance of 1e-12 per rank,
 * because the shim combines in a different order than the system MPI.
 *
 * A second phase starts many non-blocking collectives on several communicators at once,
 * mixed with user point-to-point traffic (MPI_ANY_TAG receives on the same communicators),
 * and completes them in a rank-specific shuffled order with mixed completion functions
 * and mixed shim/native request arrays.
 *
 * DIFF_ALGOS=cycle forces, before each shim call, the next algorithm of that collective
 * (shim_set_algorithm, round robin over its list, native included), so a run covers every
 * algorithm of every collective, and checks through shim_function_paths (SHIM_STATS,
 * which this mode turns on) that the call ran that algorithm (or its documented
 * fallback, whose name says why).
 *
 * DIFF_COLLS=Name,... runs only the cases of those collectives (the others are drawn and
 * skipped, so a seed's cases stay the same).
 *
 * DIFF_ALGOS=all:<name> sets, before MPI_Init, SHIM_<COLL>_ALGORITHM=<name> for every
 * collective that has algorithm <name> (the configuration path a user takes), and checks
 * the same way that each call of those collectives ran it. */
#include "common.h"

static MPI_Comm g_pworld = MPI_COMM_NULL; /* see main */
#include <ctype.h>
#include <math.h>

/* ---- random numbers ---------------------------------------------------------------- */
typedef struct {
    uint64_t s;
} rng_t;
static uint64_t rnext(rng_t *r) {
    uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static int rint_(rng_t *r, int n) { return n <= 0 ? 0 : (int)(rnext(r) % (uint64_t)n); }

/* ---- datatypes --------------------------------------------------------------------- */
enum fill { F_INT, F_SMALL, F_FRAC, F_BOOL, F_BYTES, F_PAIR_I, F_PAIR_D, F_MAT };
#define OPS_INT (1u << 0 | 1u << 1 | 1u << 2 | 1u << 3 | 1u << 4 | 1u << 5 | 1u << 6 | 1u << 7 | 1u << 8 | 1u << 9 | 1u << 12)
typedef struct {
    const char *name;
    MPI_Datatype t;     /* built at startup for derived types */
    MPI_Datatype basic; /* element type the buffers are filled with */
    int esize;          /* its C size */
    enum fill fill;
    unsigned ops; /* bit i: OPS[i] allowed */
} dtype_t;

static MPI_Op OPS[15];
static const char *OPNAMES[15] = {"SUM", "PROD", "MAX", "MIN", "BAND", "BOR", "BXOR", "LAND", "LOR", "LXOR",
                                  "MAXLOC", "MINLOC", "user-commutative", "user-noncommutative",
                                  "user-noncommutative-strided"};
#define OP(i) (1u << (i))

static dtype_t TYPES[] = {
    {"int", 0, 0, 4, F_SMALL, OPS_INT},
    {"double(int values)", 0, 0, 8, F_SMALL, OP(0) | OP(1) | OP(2) | OP(3)},
    {"double(fractions)", 0, 0, 8, F_FRAC, OP(0) | OP(2) | OP(3)},
    {"float(int values)", 0, 0, 4, F_SMALL, OP(0) | OP(2) | OP(3)},
    {"short", 0, 0, 2, F_SMALL, OP(0) | OP(2) | OP(4) | OP(8)},
    {"unsigned char", 0, 0, 1, F_SMALL, OP(0) | OP(3) | OP(5) | OP(6)},
    {"long", 0, 0, 8, F_INT, OP(0) | OP(2) | OP(3) | OP(6)},
    {"2int", 0, 0, 4, F_PAIR_I, OP(10) | OP(11)},
    {"double_int", 0, 0, 8, F_PAIR_D, OP(10) | OP(11)},
    {"double complex(int values)", 0, 0, 8, F_SMALL, OP(0) | OP(1)},
    /* derived types: data movement only (the system MPI rejects predefined operations on
     * derived datatypes, and a user operation must know the layout) */
    {"vector(2x1 stride 2) of double", 0, 0, 8, F_SMALL, 0},
    {"indexed{2@0,1@3} of int", 0, 0, 4, F_SMALL, 0},
    {"resized int (extent 12)", 0, 0, 4, F_SMALL, 0},
    {"struct{int,double}", 0, 0, 4, F_BYTES, 0},
    {"2x2 int matrix", 0, 0, 4, F_MAT, OP(13)},
    {"C bool", 0, 0, 1, F_BOOL, OP(7) | OP(8) | OP(9)},
    {"byte", 0, 0, 1, F_BYTES, OP(4) | OP(5) | OP(6)},
    /* a reduction on a datatype with holes: the matrix's four ints every other int, an
     * element every 32 bytes (a user operation that knows the layout) */
    {"2x2 int matrix, strided", 0, 0, 4, F_MAT, OP(14)},
};
#define NTYPES ((int)(sizeof(TYPES) / sizeof(TYPES[0])))

/* inout = in ^ rotl(inout, 0): commutative, associative */
static void user_comm(void *in, void *inout, int *len, MPI_Datatype *dt) {
    (void)dt;
    int *a = in, *b = inout;
    for (int i = 0; i < *len; i++) b[i] = a[i] ^ b[i];
}
/* 2x2 integer matrix product inout = in x inout (associative, not commutative): b = a * b for `len` 2x2 matrices whose entry k lies at unsigned int s*k, one matrix every
 * 4*s ints (s = 1: "2x2 int matrix"; s = 2: "2x2 int matrix, strided", the gaps left alone) */
static void matmul(const unsigned *a, unsigned *b, int len, int s) {
    for (int i = 0; i < len; i++, a += 4 * s, b += 4 * s) {
        unsigned c[4] = {a[0] * b[0] + a[s] * b[2 * s], a[0] * b[s] + a[s] * b[3 * s],
                         a[2 * s] * b[0] + a[3 * s] * b[2 * s], a[2 * s] * b[s] + a[3 * s] * b[3 * s]};
        for (int k = 0; k < 4; k++) b[s * k] = c[k];
    }
}
static void user_matmul(void *in, void *inout, int *len, MPI_Datatype *dt) {
    (void)dt;
    matmul(in, inout, *len, 1);
}
static void user_matmul_strided(void *in, void *inout, int *len, MPI_Datatype *dt) {
    (void)dt;
    matmul(in, inout, *len, 2);
}

static void setup_types(void) {
    MPI_Datatype basics[] = {MPI_INT, MPI_DOUBLE, MPI_DOUBLE, MPI_FLOAT, MPI_SHORT, MPI_UNSIGNED_CHAR, MPI_LONG,
                             MPI_2INT, MPI_DOUBLE_INT, MPI_C_DOUBLE_COMPLEX, MPI_DOUBLE, MPI_INT, MPI_INT, MPI_INT,
                             MPI_INT, MPI_C_BOOL, MPI_BYTE, MPI_INT};
    for (int i = 0; i < NTYPES; i++) TYPES[i].t = TYPES[i].basic = basics[i];
    TYPES[9].basic = MPI_DOUBLE;
    MPI_Type_vector(2, 1, 2, MPI_DOUBLE, &TYPES[10].t);
    int bl[2] = {2, 1}, dp[2] = {0, 3};
    MPI_Type_indexed(2, bl, dp, MPI_INT, &TYPES[11].t);
    MPI_Type_create_resized(MPI_INT, 0, 12, &TYPES[12].t);
    int sbl[2] = {1, 1};
    MPI_Aint sdp[2] = {0, 8};
    MPI_Datatype sty[2] = {MPI_INT, MPI_DOUBLE};
    MPI_Type_create_struct(2, sbl, sdp, sty, &TYPES[13].t);
    MPI_Type_contiguous(4, MPI_INT, &TYPES[14].t);
    MPI_Datatype strided;
    MPI_Type_vector(4, 1, 2, MPI_INT, &strided);
    MPI_Type_create_resized(strided, 0, 32, &TYPES[17].t);
    MPI_Type_free(&strided);
    for (int i = 10; i <= 14; i++) MPI_Type_commit(&TYPES[i].t);
    MPI_Type_commit(&TYPES[17].t);
    MPI_Op_create(user_comm, 1, &OPS[12]);
    MPI_Op_create(user_matmul, 0, &OPS[13]);
    MPI_Op_create(user_matmul_strided, 0, &OPS[14]);
    MPI_Op preds[12] = {MPI_SUM, MPI_PROD, MPI_MAX, MPI_MIN, MPI_BAND, MPI_BOR, MPI_BXOR, MPI_LAND, MPI_LOR, MPI_LXOR,
                        MPI_MAXLOC, MPI_MINLOC};
    memcpy(OPS, preds, sizeof preds);
}

static MPI_Aint extent_of(MPI_Datatype t) {
    MPI_Aint lb, ext;
    MPI_Type_get_extent(t, &lb, &ext);
    return ext;
}

/* Fills `bytes` bytes with values of the type's fill kind. */
static void fill(void *buf, size_t bytes, const dtype_t *ty, rng_t *r) {
    size_t n = bytes / (size_t)ty->esize;
    switch (ty->fill) {
    case F_SMALL:
    case F_MAT:
        for (size_t i = 0; i < n; i++) {
            int v = rint_(r, 7) - 3;
            if (ty->basic == MPI_DOUBLE || ty->basic == MPI_C_DOUBLE_COMPLEX) ((double *)buf)[i] = v;
            else if (ty->basic == MPI_FLOAT) ((float *)buf)[i] = (float)v;
            else if (ty->esize == 4) ((int *)buf)[i] = v;
            else if (ty->esize == 2) ((short *)buf)[i] = (short)v;
            else ((unsigned char *)buf)[i] = (unsigned char)(v + 3);
        }
        break;
    case F_INT:
        for (size_t i = 0; i < n; i++) ((long *)buf)[i] = (long)(rnext(r) >> 8) - (1l << 54);
        break;
    case F_FRAC:
        for (size_t i = 0; i < n; i++) ((double *)buf)[i] = (double)(rnext(r) >> 11) / 9007199254740992.0 - 0.25;
        break;
    case F_BOOL:
        for (size_t i = 0; i < n; i++) ((unsigned char *)buf)[i] = (unsigned char)rint_(r, 2);
        break;
    case F_BYTES:
        for (size_t i = 0; i < bytes; i++) ((unsigned char *)buf)[i] = (unsigned char)rnext(r);
        break;
    case F_PAIR_I:
        for (size_t i = 0; i + 1 < n; i += 2) ((int *)buf)[i] = rint_(r, 4), ((int *)buf)[i + 1] = rint_(r, 16);
        break;
    case F_PAIR_D:
        for (size_t i = 0; i + 1 < bytes / 16 * 2; i += 2) {
            double *d = (double *)((char *)buf + i * 8);
            d[0] = rint_(r, 4);
            ((int *)(d + 1))[0] = rint_(r, 16);
            ((int *)(d + 1))[1] = 0;
        }
        break;
    }
}

/* ---- communicators ----------------------------------------------------------------- */
enum { C_WORLD, C_DUP, C_SPLIT, C_REV, C_CART, C_DGRAPH, NCOMMS };
static const char *CNAMES[] = {"world", "dup(world)", "split(even/odd)", "split(reversed)", "cart", "dist_graph"};
static MPI_Comm COMMS[NCOMMS];

static void setup_comms(void) {
    COMMS[C_WORLD] = MPI_COMM_WORLD;
    MPI_Comm_dup(MPI_COMM_WORLD, &COMMS[C_DUP]);
    MPI_Comm_split(MPI_COMM_WORLD, g_rank % 2, g_rank, &COMMS[C_SPLIT]);
    MPI_Comm_split(MPI_COMM_WORLD, 0, g_size - g_rank, &COMMS[C_REV]);
    int dims[2] = {0, 0}, periods[2];
    MPI_Dims_create(g_size, 2, dims);
    /* periodic only where a dimension has 3+ processes: with 1 or 2 a process is its own
     * neighbour or has one neighbour twice, where MPICH and the standard disagree */
    for (int d = 0; d < 2; d++) periods[d] = dims[d] >= 3;
    MPI_Cart_create(MPI_COMM_WORLD, 2, dims, periods, 0, &COMMS[C_CART]);
    /* edges to rank+1 and rank+3, without duplicates: with several edges between one
     * pair, the shim matches messages in list order while MPICH reverses them, and the
     * standard leaves this open, so the oracle is only compared on simple graphs */
    int src[2], dst[2], ns = 0, nd = 0;
    dst[nd++] = (g_rank + 1) % g_size;
    if ((g_rank + 3) % g_size != dst[0]) dst[nd++] = (g_rank + 3) % g_size;
    src[ns++] = (g_rank - 1 + g_size) % g_size;
    if ((g_rank - 3 + 3 * g_size) % g_size != src[0]) src[ns++] = (g_rank - 3 + 3 * g_size) % g_size;
    MPI_Dist_graph_create_adjacent(MPI_COMM_WORLD, ns, src, MPI_UNWEIGHTED, nd, dst, MPI_UNWEIGHTED, MPI_INFO_NULL, 0,
                                   &COMMS[C_DGRAPH]);
}

/* ---- cases ------------------------------------------------------------------------- */
enum coll {
    BARRIER, BCAST, GATHER, GATHERV, SCATTER, SCATTERV, ALLGATHER, ALLGATHERV, ALLTOALL, ALLTOALLV, ALLTOALLW,
    REDUCE, ALLREDUCE, REDUCE_SCATTER, REDUCE_SCATTER_BLOCK, SCAN, EXSCAN, NALLGATHER, NALLGATHERV, NALLTOALL,
    NALLTOALLV, NALLTOALLW, NCOLLS
};
static const char *COLLNAMES[] = {"Barrier", "Bcast", "Gather", "Gatherv", "Scatter", "Scatterv", "Allgather",
                                  "Allgatherv", "Alltoall", "Alltoallv", "Alltoallw", "Reduce", "Allreduce",
                                  "Reduce_scatter", "Reduce_scatter_block", "Scan", "Exscan", "Neighbor_allgather",
                                  "Neighbor_allgatherv", "Neighbor_alltoall", "Neighbor_alltoallv",
                                  "Neighbor_alltoallw"};
enum form { BLOCKING, NONBLOCKING, PERSISTENT };
static const char *FORMNAMES[] = {"blocking", "I*", "*_init"};

typedef struct {
    int id, coll, form, comm, type, op, count, root, inplace, completion;
    uint64_t seed;
} case_t;

/* the shim's shim_set_algorithm, NULL without the shim */
static int (*set_algo)(const char *, const char *);

static int is_reduction(int c) { return c >= REDUCE && c <= EXSCAN; }
static int is_neighbor(int c) { return c >= NALLGATHER; }
static int inplace_ok(int c) {
    return c == GATHER || c == GATHERV || c == SCATTER || c == SCATTERV || c == ALLGATHER || c == ALLGATHERV ||
           c == ALLTOALL || c == ALLTOALLV || c == ALLTOALLW || (c >= REDUCE && c <= EXSCAN);
}

static const int COUNTS[] = {0, 1, 1, 2, 3, 5, 7, 13, 31, 64, 127, 257, 1031};

/* DIFF_TYPES=a|b|...: only the types whose names contain one of these (cases of other
 * types are drawn again, whole); DIFF_MIN_COUNT=n: only counts from n (at most the largest
 * count). Without them the draws are those of every earlier run of a seed. */
static int type_wanted(int t) {
    const char *w = getenv("DIFF_TYPES");
    if (!w || !*w) return 1;
    char alt[128];
    for (const char *p = w; *p;) {
        size_t n = strcspn(p, "|");
        snprintf(alt, sizeof alt, "%.*s", (int)(n < sizeof alt - 1 ? n : sizeof alt - 1), p);
        if (n && strstr(TYPES[t].name, alt)) return 1;
        p += n + (p[n] == '|');
    }
    return 0;
}

static void draw(rng_t *r, case_t *c, int id) {
    int tries = 0;
again:
    if (++tries > 100000) {
        fprintf(stderr, "diff_coll: DIFF_TYPES=%s names no type\n", getenv("DIFF_TYPES"));
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    memset(c, 0, sizeof *c);
    c->id = id;
    c->coll = rint_(r, NCOLLS);
    c->form = rint_(r, 3);
    c->comm = is_neighbor(c->coll) ? (rint_(r, 2) ? C_CART : C_DGRAPH) : rint_(r, C_CART);
    if (is_reduction(c->coll)) {
        do {
            c->type = rint_(r, NTYPES);
        } while (TYPES[c->type].ops == 0);
        unsigned ops = TYPES[c->type].ops;
        do {
            c->op = rint_(r, 15);
        } while (!(ops & OP(c->op)));
    } else {
        c->type = rint_(r, NTYPES);
    }
    if (!type_wanted(c->type)) goto again;
    int ncounts = (int)(sizeof COUNTS / sizeof COUNTS[0]);
    int min = getenv("DIFF_MIN_COUNT") ? atoi(getenv("DIFF_MIN_COUNT")) : 0;
    if (min > COUNTS[ncounts - 1]) min = COUNTS[ncounts - 1];
    do {
        c->count = COUNTS[rint_(r, ncounts)];
    } while (c->count < min);
    c->inplace = inplace_ok(c->coll) && rint_(r, 3) == 0;
    c->completion = rint_(r, 6);
    c->seed = rnext(r);
}

static void describe(const case_t *c, char *out, size_t n) {
    snprintf(out, n, "case %d: %s %s on %s, type %s, count %d%s%s%s, root %d, completion %d", c->id,
             FORMNAMES[c->form], COLLNAMES[c->coll], CNAMES[c->comm], TYPES[c->type].name, c->count,
             is_reduction(c->coll) ? ", op " : "", is_reduction(c->coll) ? OPNAMES[c->op] : "",
             c->inplace ? ", in place" : "", c->root, c->completion);
}

/* ---- algorithm cycling (DIFF_ALGOS=cycle) ------------------------------------------ */
static int algo_cycle;
static char env_algo[64]; /* DIFF_ALGOS=all:<name> */
static int next_algo[NCOLLS];
static char forced[64];
static int (*list_algos)(const char *, char *, size_t);
static int (*fn_paths)(const char *, char *, size_t);

/* Whether the shim offers algorithm `name` for collective `coll`. */
static int has_algorithm(int coll, const char *name) {
    char buf[512], key[80], list[520];
    if (!list_algos || list_algos(COLLNAMES[coll], buf, sizeof buf) <= 0) return 0;
    snprintf(key, sizeof key, ",%s,", name);
    snprintf(list, sizeof list, ",%s,", buf);
    return strstr(list, key) != NULL;
}

/* Debian's MPICH 4.0.2 Gather/Scatter truncate messages when the root is not 0 and the
 * type has holes, from about 12 KB per message of its binomial tree on (a block, or a
 * subtree's blocks: 257 MPI_DOUBLE_INT per rank at 8 ranks; README, "system MPI bugs").
 * The oracle avoids them (regular_oracle); the shim never hands them to the system MPI, not
 * even with native forced (select::rooted_native_ok), so only a run without the shim uses
 * root 0 for them. */
static int mpich_rooted_bug(const case_t *c) {
    return (c->coll == GATHER || c->coll == SCATTER) && c->root != 0 && c->count >= 257;
}

/* Forces the next algorithm of collective `coll` (every rank does the same). */
static void pick_algorithm(int coll, int form, int no_native) {
    forced[0] = 0;
    if (env_algo[0]) {
        /* forced by the environment: every call of a collective that has it */
        if (has_algorithm(coll, env_algo)) snprintf(forced, sizeof forced, "%s", env_algo);
        return;
    }
    if (!algo_cycle || !set_algo) return;
    char buf[512], *names[16];
    int n = 0;
    CHECK(list_algos(COLLNAMES[coll], buf, sizeof buf) > 0, "no algorithms for %s", COLLNAMES[coll]);
    for (char *tok = strtok(buf, ","); tok && n < 16; tok = strtok(NULL, ","))
        /* the system MPI's persistent collectives cannot be restarted (README, "system MPI
         * bugs"), so persistent cases never force "native" */
        if (strcmp(tok, "auto") != 0 && !((no_native || form == PERSISTENT) && strcmp(tok, "native") == 0)) names[n++] = tok;
    snprintf(forced, sizeof forced, "%s", names[next_algo[coll]++ % n]);
    CHECK(set_algo(COLLNAMES[coll], forced) == 0, "shim_set_algorithm(%s, %s)", COLLNAMES[coll], forced);
}

/* The MPI function a case calls through the shim. */
static void fn_name(const case_t *c, char *out, size_t n) {
    char lower[48];
    snprintf(lower, sizeof lower, "%s", COLLNAMES[c->coll]);
    if (c->form == NONBLOCKING) lower[0] = (char)(lower[0] - 'A' + 'a');
    const char *fmt[] = {"MPI_%s", "MPI_I%s", "MPI_%s_init"};
    snprintf(out, n, fmt[c->form], lower);
}

/* The count recorded for path `path` ("kind:name") in a paths listing, 0 if absent. */
static long path_count(const char *list, const char *kind_name_prefix, int exact, char *which, size_t wn) {
    long total = 0;
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", list);
    for (char *save, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        char *eq = strrchr(tok, '=');
        if (!eq) continue;
        *eq = 0;
        size_t k = strlen(kind_name_prefix);
        int match = exact ? strcmp(tok, kind_name_prefix) == 0 : strncmp(tok, kind_name_prefix, k) == 0;
        if (match) {
            total += atol(eq + 1);
            if (which) snprintf(which, wn, "%s", tok);
        }
    }
    return total;
}

/* Checks that the last call of case c ran the forced algorithm: `before` is the paths
 * listing taken before it. */
static void check_algorithm(const case_t *c, const char *before, const char *desc) {
    if (!forced[0] || !fn_paths) return;
    char name[64], after[4096], want[96], which[256] = "";
    fn_name(c, name, sizeof name);
    fn_paths(name, after, sizeof after);
    if (strcmp(forced, "native") == 0)
        snprintf(want, sizeof want, "native:");
    else
        snprintf(want, sizeof want, "schedule:%s", forced);
    long grew = path_count(after, want, 0, which, sizeof which) - path_count(before, want, 0, NULL, 0);
    if (grew > 0) return;
    /* a documented fallback: another schedule whose name explains itself */
    long fb = path_count(after, "schedule:", 0, NULL, 0) - path_count(before, "schedule:", 0, NULL, 0);
    CHECK(fb > 0 && strchr(after, '('), "%s: forced %s but the paths are %s", desc, forced, after);
}

/* Completes a non-blocking shim request with one of several completion functions. */
static void complete_one(MPI_Request *req, int how) {
    int flag = 0, idx;
    MPI_Status st;
    switch (how) {
    case 0: MPI_OK(MPI_Wait(req, &st)); break;
    case 1: while (!flag) MPI_OK(MPI_Test(req, &flag, MPI_STATUS_IGNORE)); break;
    case 2: MPI_OK(MPI_Waitall(1, req, MPI_STATUSES_IGNORE)); break;
    case 3: MPI_OK(MPI_Waitany(1, req, &idx, &st)); CHECK(idx == 0, "waitany index"); break;
    case 4: {
        int out = 0, ind[1];
        while (out == 0) MPI_OK(MPI_Waitsome(1, req, &out, ind, MPI_STATUSES_IGNORE));
        break;
    }
    default:
        while (!flag) MPI_OK(MPI_Request_get_status(*req, &flag, MPI_STATUS_IGNORE));
        MPI_OK(MPI_Wait(req, MPI_STATUS_IGNORE));
    }
    CHECK(*req == MPI_REQUEST_NULL, "request not released after completion");
}

/* Buffers and arguments of one case on one communicator. */
typedef struct {
    MPI_Comm comm;
    int rank, size, indeg, outdeg;
    MPI_Datatype t;
    MPI_Aint ext;
    char *sbuf, *rbuf_shim, *rbuf_ref;
    size_t sbytes, rbytes;
    int *counts, *displs, *scounts, *sdispls, *bdispls_s, *bdispls_r;
    MPI_Datatype *types;
} args_t;

/* Puts each rank's input where an in-place (or bcast) call expects it in `rbuf`. */
static void prep(const case_t *c, args_t *a, char *rbuf) {
    int n = c->count, root = c->root;
    if (c->inplace) memcpy(rbuf, a->sbuf, a->rbytes < a->sbytes ? a->rbytes : a->sbytes);
    switch (c->coll) {
    case BCAST:
        if (a->rank == root) memcpy(rbuf, a->sbuf, a->rbytes);
        break;
    case GATHER:
        if (c->inplace && a->rank == root) memcpy(rbuf + (size_t)root * n * a->ext, a->sbuf, (size_t)n * a->ext);
        break;
    case GATHERV:
        if (c->inplace && a->rank == root)
            memcpy(rbuf + (size_t)a->displs[root] * a->ext, a->sbuf, (size_t)a->counts[a->rank] * a->ext);
        break;
    case ALLGATHER:
        if (c->inplace) memcpy(rbuf + (size_t)a->rank * n * a->ext, a->sbuf, (size_t)n * a->ext);
        break;
    case ALLGATHERV:
        if (c->inplace) memcpy(rbuf + (size_t)a->displs[a->rank] * a->ext, a->sbuf, (size_t)a->counts[a->rank] * a->ext);
        break;
    default:
        break;
    }
}

/* Runs the collective of case c through the shim (shim=1) or the system MPI (shim=0). */
/* The oracle for Gather and Scatter: PMPI_Gatherv/Scatterv with equal counts, the same
 * operation. Debian's MPICH 4.0.2 Gather/Scatter truncate messages when the root is not
 * 0 and the type has holes (MPI_DOUBLE_INT, structs) from about 12 KB per block on
 * (README, "system MPI bugs"), which would fail the oracle, not the shim. */
static int regular_oracle(const case_t *c, args_t *a, const void *s, void *r, int gather) {
    int p = a->size, n = c->count, *cnt = malloc(sizeof(int) * p), *dsp = malloc(sizeof(int) * p), rc;
    for (int i = 0; i < p; i++) cnt[i] = n, dsp[i] = i * n;
    MPI_Comm m = a->comm == MPI_COMM_WORLD ? g_pworld : a->comm; /* see run() */
    if (gather) rc = PMPI_Gatherv(s, n, a->t, r, cnt, dsp, a->t, c->root, m);
    else rc = PMPI_Scatterv(s, cnt, dsp, a->t, r, n, a->t, c->root, m);
    free(cnt);
    free(dsp);
    return rc;
}

/* The oracle for Reduce_scatter(_block) with the non-commutative operation on the strided
 * matrices: MPICH (4.0.2, 5.0.2) and Intel MPI 2021.19 combine the wrong elements there at
 * 2 and 4 ranks (README, "Problems of the system MPI"), so the system MPI reduces to rank 0
 * and scatters the blocks instead (both right there). In place, the operand is the receive
 * buffer, read before the scatter overwrites its first block. */
static int rs_holes_bug(const case_t *c) {
    return (c->coll == REDUCE_SCATTER || c->coll == REDUCE_SCATTER_BLOCK) && c->op == 14;
}
static int rs_oracle(const case_t *c, args_t *a, char *rbuf) {
    int p = a->size, *cnt = malloc(sizeof(int) * p), *dsp = malloc(sizeof(int) * p), total = 0, rc;
    for (int i = 0; i < p; i++) {
        cnt[i] = c->coll == REDUCE_SCATTER ? a->counts[i] : c->count;
        dsp[i] = total;
        total += cnt[i];
    }
    MPI_Comm m = a->comm == MPI_COMM_WORLD ? g_pworld : a->comm; /* see run() */
    char *tmp = malloc((size_t)(total + 1) * (size_t)a->ext);
    rc = PMPI_Reduce(c->inplace ? rbuf : a->sbuf, tmp, total, a->t, OPS[c->op], 0, m);
    if (rc == MPI_SUCCESS) rc = PMPI_Scatterv(tmp, cnt, dsp, a->t, rbuf, cnt[a->rank], a->t, 0, m);
    free(tmp);
    free(cnt);
    free(dsp);
    return rc;
}

/* The oracle of an in-place Reduce, Alltoall, Alltoallv or Alltoallw: the same call with a
 * copy of the receive buffer as the send buffer (in place, the send layout is the receive
 * layout). MPICH (4.0.2, 5.0.2) crashes on an in-place Reduce with a non-zero root above 2048
 * bytes, and its in-place Alltoall(v/w) uses MPI_Sendrecv_replace, which truncates padded
 * derived types from about 12 KB on (README, "Problems of the system MPI"); the shim never
 * hands such calls to it (select::rooted_native_ok, select::in_place_native_ok). */
static int in_place_oracle(const case_t *c, const args_t *a) {
    return c->inplace && (c->coll == ALLTOALL || c->coll == ALLTOALLV || c->coll == ALLTOALLW ||
                          (c->coll == REDUCE && a->rank == c->root));
}

static int run(const case_t *c, args_t *a, int shim, char *rbuf) {
    const void *sb = c->inplace ? MPI_IN_PLACE : a->sbuf;
    /* the oracle (PMPI_*) bypasses the shim, which maps MPI_COMM_WORLD to the user world
     * when ghost processes are on: it gets a duplicate of the application's world */
    MPI_Comm m = !shim && a->comm == MPI_COMM_WORLD ? g_pworld : a->comm;
    MPI_Datatype t = a->t;
    int n = c->count, root = c->root;
    MPI_Op op = OPS[c->op];
    prep(c, a, rbuf);
    char *copy = !shim && in_place_oracle(c, a) ? malloc(a->rbytes) : NULL;
    if (copy) memcpy(copy, rbuf, a->rbytes), sb = copy;
    MPI_Request req = MPI_REQUEST_NULL;
    MPI_Request *rq = shim && c->form != BLOCKING ? &req : NULL;
    int pers = shim && c->form == PERSISTENT;
    int rc = MPI_SUCCESS;
#define DO3(BLK, NB, PI)                                        \
    do {                                                        \
        if (!shim) rc = P##BLK;                                 \
        else if (!rq) rc = BLK;                                 \
        else if (pers) rc = PI;                                 \
        else rc = NB;                                           \
    } while (0)
    switch (c->coll) {
    case BARRIER: DO3(MPI_Barrier(m), MPI_Ibarrier(m, rq), MPI_Barrier_init(m, MPI_INFO_NULL, rq)); break;
    case BCAST:
        DO3(MPI_Bcast(rbuf, n, t, root, m), MPI_Ibcast(rbuf, n, t, root, m, rq), MPI_Bcast_init(rbuf, n, t, root, m, MPI_INFO_NULL, rq));
        break;
    case GATHER: {
        const void *s = (c->inplace && a->rank == root) ? MPI_IN_PLACE : a->sbuf;
        if (!shim) { /* oracle: see regular_oracle */
            rc = regular_oracle(c, a, s, rbuf, 1);
            break;
        }
        DO3(MPI_Gather(s, n, t, rbuf, n, t, root, m), MPI_Igather(s, n, t, rbuf, n, t, root, m, rq),
            MPI_Gather_init(s, n, t, rbuf, n, t, root, m, MPI_INFO_NULL, rq));
        break;
    }
    case GATHERV: {
        const void *s = (c->inplace && a->rank == root) ? MPI_IN_PLACE : a->sbuf;
        int mine = a->counts[a->rank];
        DO3(MPI_Gatherv(s, mine, t, rbuf, a->counts, a->displs, t, root, m),
            MPI_Igatherv(s, mine, t, rbuf, a->counts, a->displs, t, root, m, rq),
            MPI_Gatherv_init(s, mine, t, rbuf, a->counts, a->displs, t, root, m, MPI_INFO_NULL, rq));
        break;
    }
    case SCATTER: {
        void *r = (c->inplace && a->rank == root) ? MPI_IN_PLACE : rbuf;
        if (!shim) {
            rc = regular_oracle(c, a, a->sbuf, r, 0);
            break;
        }
        DO3(MPI_Scatter(a->sbuf, n, t, r, n, t, root, m), MPI_Iscatter(a->sbuf, n, t, r, n, t, root, m, rq),
            MPI_Scatter_init(a->sbuf, n, t, r, n, t, root, m, MPI_INFO_NULL, rq));
        break;
    }
    case SCATTERV: {
        void *r = (c->inplace && a->rank == root) ? MPI_IN_PLACE : rbuf;
        int mine = a->counts[a->rank];
        DO3(MPI_Scatterv(a->sbuf, a->counts, a->displs, t, r, mine, t, root, m),
            MPI_Iscatterv(a->sbuf, a->counts, a->displs, t, r, mine, t, root, m, rq),
            MPI_Scatterv_init(a->sbuf, a->counts, a->displs, t, r, mine, t, root, m, MPI_INFO_NULL, rq));
        break;
    }
    case ALLGATHER:
        DO3(MPI_Allgather(sb, n, t, rbuf, n, t, m), MPI_Iallgather(sb, n, t, rbuf, n, t, m, rq),
            MPI_Allgather_init(sb, n, t, rbuf, n, t, m, MPI_INFO_NULL, rq));
        break;
    case ALLGATHERV: {
        int mine = a->counts[a->rank];
        DO3(MPI_Allgatherv(sb, mine, t, rbuf, a->counts, a->displs, t, m),
            MPI_Iallgatherv(sb, mine, t, rbuf, a->counts, a->displs, t, m, rq),
            MPI_Allgatherv_init(sb, mine, t, rbuf, a->counts, a->displs, t, m, MPI_INFO_NULL, rq));
        break;
    }
    case ALLTOALL:
        DO3(MPI_Alltoall(sb, n, t, rbuf, n, t, m), MPI_Ialltoall(sb, n, t, rbuf, n, t, m, rq),
            MPI_Alltoall_init(sb, n, t, rbuf, n, t, m, MPI_INFO_NULL, rq));
        break;
    case ALLTOALLV:
        /* in place, the receive layout is used for both directions */
        DO3(MPI_Alltoallv(sb, a->scounts, a->sdispls, t, rbuf, a->counts, a->displs, t, m),
            MPI_Ialltoallv(sb, a->scounts, a->sdispls, t, rbuf, a->counts, a->displs, t, m, rq),
            MPI_Alltoallv_init(sb, a->scounts, a->sdispls, t, rbuf, a->counts, a->displs, t, m, MPI_INFO_NULL, rq));
        break;
    case ALLTOALLW:
        DO3(MPI_Alltoallw(sb, a->scounts, a->bdispls_s, a->types, rbuf, a->counts, a->bdispls_r, a->types, m),
            MPI_Ialltoallw(sb, a->scounts, a->bdispls_s, a->types, rbuf, a->counts, a->bdispls_r, a->types, m, rq),
            MPI_Alltoallw_init(sb, a->scounts, a->bdispls_s, a->types, rbuf, a->counts, a->bdispls_r, a->types, m, MPI_INFO_NULL, rq));
        break;
    case REDUCE: {
        const void *s = copy ? copy : (c->inplace && a->rank == root) ? MPI_IN_PLACE : a->sbuf;
        DO3(MPI_Reduce(s, rbuf, n, t, op, root, m), MPI_Ireduce(s, rbuf, n, t, op, root, m, rq),
            MPI_Reduce_init(s, rbuf, n, t, op, root, m, MPI_INFO_NULL, rq));
        break;
    }
    case ALLREDUCE:
        DO3(MPI_Allreduce(sb, rbuf, n, t, op, m), MPI_Iallreduce(sb, rbuf, n, t, op, m, rq),
            MPI_Allreduce_init(sb, rbuf, n, t, op, m, MPI_INFO_NULL, rq));
        break;
    case REDUCE_SCATTER:
        if (!shim && rs_holes_bug(c)) { /* oracle: see rs_oracle */
            rc = rs_oracle(c, a, rbuf);
            break;
        }
        DO3(MPI_Reduce_scatter(sb, rbuf, a->counts, t, op, m), MPI_Ireduce_scatter(sb, rbuf, a->counts, t, op, m, rq),
            MPI_Reduce_scatter_init(sb, rbuf, a->counts, t, op, m, MPI_INFO_NULL, rq));
        break;
    case REDUCE_SCATTER_BLOCK:
        if (!shim && rs_holes_bug(c)) {
            rc = rs_oracle(c, a, rbuf);
            break;
        }
        DO3(MPI_Reduce_scatter_block(sb, rbuf, n, t, op, m), MPI_Ireduce_scatter_block(sb, rbuf, n, t, op, m, rq),
            MPI_Reduce_scatter_block_init(sb, rbuf, n, t, op, m, MPI_INFO_NULL, rq));
        break;
    case SCAN:
        DO3(MPI_Scan(sb, rbuf, n, t, op, m), MPI_Iscan(sb, rbuf, n, t, op, m, rq),
            MPI_Scan_init(sb, rbuf, n, t, op, m, MPI_INFO_NULL, rq));
        break;
    case EXSCAN:
        DO3(MPI_Exscan(sb, rbuf, n, t, op, m), MPI_Iexscan(sb, rbuf, n, t, op, m, rq),
            MPI_Exscan_init(sb, rbuf, n, t, op, m, MPI_INFO_NULL, rq));
        break;
    case NALLGATHER:
        DO3(MPI_Neighbor_allgather(a->sbuf, n, t, rbuf, n, t, m), MPI_Ineighbor_allgather(a->sbuf, n, t, rbuf, n, t, m, rq),
            MPI_Neighbor_allgather_init(a->sbuf, n, t, rbuf, n, t, m, MPI_INFO_NULL, rq));
        break;
    case NALLGATHERV:
        DO3(MPI_Neighbor_allgatherv(a->sbuf, n, t, rbuf, a->counts, a->displs, t, m),
            MPI_Ineighbor_allgatherv(a->sbuf, n, t, rbuf, a->counts, a->displs, t, m, rq),
            MPI_Neighbor_allgatherv_init(a->sbuf, n, t, rbuf, a->counts, a->displs, t, m, MPI_INFO_NULL, rq));
        break;
    case NALLTOALL:
        DO3(MPI_Neighbor_alltoall(a->sbuf, n, t, rbuf, n, t, m), MPI_Ineighbor_alltoall(a->sbuf, n, t, rbuf, n, t, m, rq),
            MPI_Neighbor_alltoall_init(a->sbuf, n, t, rbuf, n, t, m, MPI_INFO_NULL, rq));
        break;
    case NALLTOALLV:
        DO3(MPI_Neighbor_alltoallv(a->sbuf, a->scounts, a->sdispls, t, rbuf, a->counts, a->displs, t, m),
            MPI_Ineighbor_alltoallv(a->sbuf, a->scounts, a->sdispls, t, rbuf, a->counts, a->displs, t, m, rq),
            MPI_Neighbor_alltoallv_init(a->sbuf, a->scounts, a->sdispls, t, rbuf, a->counts, a->displs, t, m, MPI_INFO_NULL, rq));
        break;
    case NALLTOALLW: {
        MPI_Aint bs[64], br[64];
        for (int i = 0; i < 64; i++) bs[i] = a->bdispls_s[i], br[i] = a->bdispls_r[i];
        DO3(MPI_Neighbor_alltoallw(a->sbuf, a->scounts, bs, a->types, rbuf, a->counts, br, a->types, m),
            MPI_Ineighbor_alltoallw(a->sbuf, a->scounts, bs, a->types, rbuf, a->counts, br, a->types, m, rq),
            MPI_Neighbor_alltoallw_init(a->sbuf, a->scounts, bs, a->types, rbuf, a->counts, br, a->types, m, MPI_INFO_NULL, rq));
        break;
    }
    }
    free(copy);
    if (rc != MPI_SUCCESS) return rc;
    if (rq && !pers) complete_one(rq, c->completion);
    if (pers) {
        /* start twice: the second run must give the same result (in-place inputs are
         * restored first, as an application would) */
        for (int k = 0; k < persistent_starts(); k++) {
            prep(c, a, rbuf);
            MPI_OK(MPI_Start(rq));
            MPI_OK(MPI_Wait(rq, MPI_STATUS_IGNORE));
        }
        MPI_OK(MPI_Request_free(rq));
    }
    return rc;
}

static int compare(const case_t *c, args_t *a, char *desc) {
    size_t nb = a->rbytes;
    int significant = 1;
    if ((c->coll == GATHER || c->coll == GATHERV || c->coll == REDUCE) && a->rank != c->root) significant = 0;
    if (c->coll == EXSCAN && a->rank == 0) significant = 0; /* undefined at rank 0 */
    if (c->coll == BARRIER) significant = 0;
    if (!significant) return 0;
    /* floating point: by value (the sign of a zero result depends on the combination
     * order, which differs between the shim and the system MPI) */
    if (is_reduction(c->coll) && TYPES[c->type].fill == F_SMALL &&
        (TYPES[c->type].basic == MPI_DOUBLE || TYPES[c->type].basic == MPI_FLOAT)) {
        int isd = TYPES[c->type].basic == MPI_DOUBLE;
        size_t ne = nb / (isd ? 8 : 4);
        for (size_t i = 0; i < ne; i++) {
            double x = isd ? ((double *)a->rbuf_shim)[i] : ((float *)a->rbuf_shim)[i];
            double y = isd ? ((double *)a->rbuf_ref)[i] : ((float *)a->rbuf_ref)[i];
            if (x != y && !(isnan(x) && isnan(y))) {
                fprintf(stderr, "[rank %d] MISMATCH %s: element %zu shim %.17g system %.17g\n", g_rank, desc, i, x, y);
                return 1;
            }
        }
        return 0;
    }
    if (TYPES[c->type].fill == F_FRAC && c->op == 0) {
        double *x = (double *)a->rbuf_shim, *y = (double *)a->rbuf_ref;
        for (size_t i = 0; i < nb / 8; i++) {
            double tol = 1e-12 * a->size * (fabs(y[i]) + 1.0);
            if (!(fabs(x[i] - y[i]) <= tol) && !(x[i] == y[i])) {
                fprintf(stderr, "[rank %d] MISMATCH %s: element %zu shim %.17g system %.17g\n", g_rank, desc, i, x[i], y[i]);
                return 1;
            }
        }
        return 0;
    }
    for (size_t i = 0; i < nb; i++) {
        if (a->rbuf_shim[i] != a->rbuf_ref[i]) {
            fprintf(stderr, "[rank %d] MISMATCH %s: byte %zu of %zu: shim %02x system %02x\n", g_rank, desc, i, nb,
                    (unsigned char)a->rbuf_shim[i], (unsigned char)a->rbuf_ref[i]);
            return 1;
        }
    }
    return 0;
}

/* Sets up buffers and layouts of case c on its communicator. */
static void prepare(case_t *c, args_t *a, rng_t *r) {
    memset(a, 0, sizeof *a);
    a->comm = COMMS[c->comm];
    MPI_Comm_rank(a->comm, &a->rank);
    MPI_Comm_size(a->comm, &a->size);
    a->t = TYPES[c->type].t;
    a->ext = extent_of(a->t);
    int p = a->size, n = c->count;
    a->indeg = a->outdeg = p;
    if (is_neighbor(c->coll)) {
        int topo;
        MPI_Topo_test(a->comm, &topo);
        if (topo == MPI_CART) {
            int nd;
            MPI_Cartdim_get(a->comm, &nd);
            a->indeg = a->outdeg = 2 * nd;
        } else {
            int w;
            MPI_Dist_graph_neighbors_count(a->comm, &a->indeg, &a->outdeg, &w);
        }
    }
    c->root = rint_(r, p);
    if (mpich_rooted_bug(c) && !set_algo) c->root = 0;
    int slots = p > a->indeg ? p : a->indeg;
    slots = slots > a->outdeg ? slots : a->outdeg;
    a->counts = calloc(slots, sizeof(int));
    a->displs = calloc(slots, sizeof(int));
    a->scounts = calloc(slots, sizeof(int));
    a->sdispls = calloc(slots, sizeof(int));
    a->bdispls_s = calloc(64, sizeof(int));
    a->bdispls_r = calloc(64, sizeof(int));
    a->types = calloc(slots, sizeof(MPI_Datatype));
    /* v layouts: counts depend only on the case and the peer index (all ranks agree);
     * displacements leave gaps and run backwards to catch offset mistakes */
    int total = 0;
    for (int i = 0; i < slots; i++) {
        a->counts[i] = n == 0 ? 0 : (n + i * 7) % (n + 3);
        total += a->counts[i] + 1;
    }
    for (int i = 0, d = total; i < slots; i++) {
        d -= a->counts[i] + 1;
        a->displs[i] = d;
        a->types[i] = a->t;
    }
    /* alltoallv: what rank r sends to s is counts'[r][s] = f(r, s); receives mirror it */
    if (c->coll == ALLTOALLV || c->coll == ALLTOALLW) {
        int sd = 0, rd = 0;
        for (int s = 0; s < p; s++) {
            int to = n == 0 ? 0 : (a->rank + 2 * s + n) % (n + 2);
            int from = n == 0 ? 0 : (s + 2 * a->rank + n) % (n + 2);
            /* in place, one layout serves both directions: counts must be symmetric */
            if (c->inplace) to = from = n == 0 ? 0 : (a->rank + s + n) % (n + 2);
            a->scounts[s] = to;
            a->counts[s] = from;
            a->sdispls[s] = sd;
            a->displs[s] = rd;
            sd += to + 1;
            rd += from + 1;
        }
        total = (sd > rd ? sd : rd) + 1;
        if (c->inplace)
            for (int s = 0; s < p; s++) a->sdispls[s] = a->displs[s];
    }
    if (c->coll == NALLGATHERV) /* every source sends `count` elements; gaps vary */
        for (int i = 0, d = 0; i < a->indeg; i++) a->counts[i] = n, a->displs[i] = d, d += n + 1 + i % 3;
    if (c->coll == NALLTOALLV || c->coll == NALLTOALLW) {
        for (int i = 0, d = 0; i < a->outdeg; i++) a->scounts[i] = n, a->sdispls[i] = d, d += n + 1;
        for (int i = 0, d = 0; i < a->indeg; i++) a->counts[i] = n, a->displs[i] = d, d += n + 1;
        total = (n + 1) * (a->indeg > a->outdeg ? a->indeg : a->outdeg) + 1;
    }
    if (c->coll == REDUCE_SCATTER) {
        total = 0;
        for (int i = 0; i < p; i++) total += a->counts[i];
        for (int i = 0, d = 0; i < p; i++) a->displs[i] = d, d += a->counts[i];
    }
    for (int i = 0; i < 64 && i < slots; i++) {
        a->bdispls_s[i] = (int)(a->sdispls[i] * a->ext);
        a->bdispls_r[i] = (int)(a->displs[i] * a->ext);
    }
    size_t elems = (size_t)(n + 1) * (slots + 1) + (size_t)total + 16;
    a->sbytes = a->rbytes = elems * (size_t)a->ext + 64;
    a->sbuf = malloc(a->sbytes);
    a->rbuf_shim = malloc(a->rbytes);
    a->rbuf_ref = malloc(a->rbytes);
    rng_t mine = {c->seed ^ (0x1234567ull * (uint64_t)(a->rank + 1))};
    fill(a->sbuf, a->sbytes, &TYPES[c->type], &mine);
    rng_t sentinel = {c->seed * 31 + 7};
    fill(a->rbuf_ref, a->rbytes, &TYPES[c->type], &sentinel);
    memcpy(a->rbuf_shim, a->rbuf_ref, a->rbytes);
}

static void release(args_t *a) {
    free(a->counts), free(a->displs), free(a->scounts), free(a->sdispls), free(a->types);
    free(a->bdispls_s), free(a->bdispls_r);
    free(a->sbuf), free(a->rbuf_shim), free(a->rbuf_ref);
}

/* ---- phase 2: many outstanding collectives ------------------------------------------ */
static void phase_outstanding(uint64_t seed, int batches) {
    for (int b = 0; b < batches; b++) {
        rng_t shared = {seed + 1000003ull * b};
        enum { K = 10 };
        case_t cs[K];
        args_t as[K];
        MPI_Request reqs[K + 2];
        int nreq = 0;
        for (int k = 0; k < K; k++) {
            case_t *c = &cs[k];
            do {
                draw(&shared, c, 100000 * (b + 1) + k);
            } while (c->coll == BARRIER && rint_(&shared, 2));
            c->form = NONBLOCKING;
            prepare(c, &as[k], &shared);
            if (getenv("DIFF_TRACE") && g_rank == 0) {
                char d[512];
                describe(c, d, sizeof d);
                fprintf(stderr, "batch %d: %s\n", b, d);
            }
            run(c, &as[k], 0, as[k].rbuf_ref); /* oracle first (blocking, system MPI) */
        }
        /* user traffic on world with a wildcard tag, posted before the shim's collectives
         * start (after the oracle's: MPICH's own in-place Alltoallv at 1 rank hangs when a
         * wildcard receive is pending on the communicator) */
        int umsg = -1, uout = g_rank * 11 + b;
        MPI_Request ureq[2];
        MPI_Irecv(&umsg, 1, MPI_INT, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &ureq[0]);
        for (int k = 0; k < K; k++) {
            case_t *c = &cs[k];
            args_t *a = &as[k];
            /* start through the shim without completing: a copy of run()'s dispatch for I* */
            case_t nb = *c;
            nb.form = NONBLOCKING;
            nb.completion = -1;
            MPI_Request r = MPI_REQUEST_NULL;
            /* run() completes its request; emulate 'start only' by a persistent-free path:
             * issue the I* call directly for the common collectives */
            const void *sb = c->inplace ? MPI_IN_PLACE : a->sbuf;
            int n = c->count;
            prep(c, a, a->rbuf_shim);
            /* MPICH's own I* Alltoallv/w at 1 rank hang while the wildcard receive is pending */
            pick_algorithm(c->coll, NONBLOCKING, g_size == 1);
            switch (c->coll) {
            case ALLREDUCE:
                MPI_OK(MPI_Iallreduce(sb, a->rbuf_shim, n, a->t, OPS[c->op], a->comm, &r));
                break;
            case BCAST:
                MPI_OK(MPI_Ibcast(a->rbuf_shim, n, a->t, c->root, a->comm, &r));
                break;
            case ALLGATHER:
                MPI_OK(MPI_Iallgather(sb, n, a->t, a->rbuf_shim, n, a->t, a->comm, &r));
                break;
            case ALLTOALL:
                MPI_OK(MPI_Ialltoall(sb, n, a->t, a->rbuf_shim, n, a->t, a->comm, &r));
                break;
            default:
                /* the rest: complete immediately (still interleaved with the others) */
                if (getenv("DIFF_TRACE") && g_rank == 0) fprintf(stderr, "batch %d: run case %d, algorithm %s\n", b, c->id, forced);
                run(&nb, a, 1, a->rbuf_shim);
                if (set_algo) set_algo(COLLNAMES[c->coll], NULL);
                continue;
            }
            reqs[nreq++] = r;
            cs[k].completion = nreq - 1; /* remember which request */
            if (set_algo) set_algo(COLLNAMES[c->coll], NULL);
        }
        /* the matching user message, after the collectives were started */
        MPI_Isend(&uout, 1, MPI_INT, (g_rank + 1) % g_size, 77 + b, MPI_COMM_WORLD, &ureq[1]);
        reqs[nreq++] = ureq[0];
        reqs[nreq++] = ureq[1];
        /* complete everything in a rank-specific order, with mixed functions and arrays */
        rng_t local = {seed ^ (0xabcdefull * (g_rank + 3)) ^ (uint64_t)b};
        int left = nreq;
        while (left > 0) {
            int how = rint_(&local, 4);
            if (how == 0) {
                int i = rint_(&local, nreq);
                MPI_OK(MPI_Wait(&reqs[i], MPI_STATUS_IGNORE));
            } else if (how == 1) {
                int idx;
                MPI_OK(MPI_Waitany(nreq, reqs, &idx, MPI_STATUS_IGNORE));
            } else if (how == 2) {
                int out, ind[K + 2];
                MPI_Status sts[K + 2];
                MPI_OK(MPI_Testsome(nreq, reqs, &out, ind, sts));
            } else {
                int flag;
                MPI_OK(MPI_Testall(nreq, reqs, &flag, MPI_STATUSES_IGNORE));
            }
            left = 0;
            for (int i = 0; i < nreq; i++) left += reqs[i] != MPI_REQUEST_NULL;
        }
        CHECK(umsg == (g_rank - 1 + g_size) % g_size * 11 + b, "user message %d crossed with collective traffic", umsg);
        for (int k = 0; k < K; k++) {
            char desc[512];
            describe(&cs[k], desc, sizeof desc);
            int bad = compare(&cs[k], &as[k], desc);
            int anybad;
            PMPI_Allreduce(&bad, &anybad, 1, MPI_INT, MPI_MAX, g_pworld);
            CHECK(!anybad, "outstanding batch %d: %s", b, desc);
            release(&as[k]);
        }
    }
}

/* DIFF_COLLS=Name,Name,...: only the cases of these collectives (COLLNAMES) run; the
 * others are still drawn, so a seed gives the same cases with and without it */
static int coll_wanted(int coll) {
    const char *want = getenv("DIFF_COLLS");
    if (!want) return 1;
    size_t n = strlen(COLLNAMES[coll]);
    for (const char *p = want; (p = strstr(p, COLLNAMES[coll])) != NULL; p += n)
        if ((p == want || p[-1] == ',') && (p[n] == ',' || p[n] == '\0')) return 1;
    return 0;
}

int main(int argc, char **argv) {
    algo_cycle = getenv("DIFF_ALGOS") && strcmp(getenv("DIFF_ALGOS"), "cycle") == 0;
    if (algo_cycle && !getenv("SHIM_STATS")) setenv("SHIM_STATS", "rank", 1); /* paths are recorded with stats on */
    const char *da = getenv("DIFF_ALGOS");
    if (da && strncmp(da, "all:", 4) == 0) {
        /* set SHIM_<COLL>_ALGORITHM before MPI_Init, where the shim reads its configuration */
        snprintf(env_algo, sizeof env_algo, "%s", da + 4);
        list_algos = (int (*)(const char *, char *, size_t))dlsym(RTLD_DEFAULT, "shim_algorithms");
        if (!getenv("SHIM_STATS")) setenv("SHIM_STATS", "rank", 1);
        for (int i = 0; i < NCOLLS; i++) {
            char var[96];
            if (!has_algorithm(i, env_algo)) continue;
            snprintf(var, sizeof var, "SHIM_%s_ALGORITHM", COLLNAMES[i]);
            for (char *p = var; *p; p++) *p = (char)toupper((unsigned char)*p);
            setenv(var, env_algo, 1);
        }
    }
    test_init(&argc, &argv);
    /* the oracle's agreement calls go straight to the system MPI: on a duplicate of the
     * application's world, which with ghost processes (SHIM_GHOSTS) is not the real one */
    MPI_Comm_dup(MPI_COMM_WORLD, &g_pworld);
    set_algo = (int (*)(const char *, const char *))dlsym(RTLD_DEFAULT, "shim_set_algorithm");
    list_algos = (int (*)(const char *, char *, size_t))dlsym(RTLD_DEFAULT, "shim_algorithms");
    fn_paths = (int (*)(const char *, char *, size_t))dlsym(RTLD_DEFAULT, "shim_function_paths");
    if (algo_cycle && expect_shim()) CHECK(set_algo && list_algos && fn_paths, "DIFF_ALGOS=cycle needs the shim");
    setup_types();
    setup_comms();
    uint64_t seed = getenv("DIFF_SEED") ? strtoull(getenv("DIFF_SEED"), 0, 10) : 1;
    int ncases = getenv("DIFF_CASES") ? atoi(getenv("DIFF_CASES")) : 120;
    rng_t shared = {seed};
    int failures = 0, ran = 0;
    for (int id = 0; id < ncases; id++) {
        case_t c;
        args_t a;
        draw(&shared, &c, id);
        prepare(&c, &a, &shared);
        char desc[512];
        describe(&c, desc, sizeof desc);
        if ((getenv("DIFF_ONLY") && atoi(getenv("DIFF_ONLY")) != id) || !coll_wanted(c.coll)) {
            release(&a);
            continue;
        }
        ran++;
        int rc1 = run(&c, &a, 0, a.rbuf_ref);
        char before[4096] = "", fname[64];
        pick_algorithm(c.coll, c.form, mpich_rooted_bug(&c));
        if (getenv("DIFF_TRACE") && g_rank == 0) fprintf(stderr, "%s%s%s\n", desc, forced[0] ? ", algorithm " : "", forced);
        fn_name(&c, fname, sizeof fname);
        if (fn_paths) fn_paths(fname, before, sizeof before);
        int rc2 = run(&c, &a, 1, a.rbuf_shim);
        check_algorithm(&c, before, desc);
        if (set_algo) set_algo(COLLNAMES[c.coll], NULL);
        CHECK(rc1 == MPI_SUCCESS && rc2 == MPI_SUCCESS, "%s: system %d shim %d", desc, rc1, rc2);
        int bad = compare(&c, &a, desc), anybad;
        PMPI_Allreduce(&bad, &anybad, 1, MPI_INT, MPI_MAX, g_pworld);
        failures += anybad;
        release(&a);
    }
    CHECK(failures == 0, "%d of %d cases differ from the system MPI", failures, ran);
    int batches = getenv("DIFF_BATCHES") ? atoi(getenv("DIFF_BATCHES")) : 4;
    phase_outstanding(seed, batches);
    /* every case went through one of the shim's collective entry points */
    uint64_t total = 0;
    for (int i = 0; i < NCOLLS; i++) {
        const char *fmt[] = {"MPI_%s", "MPI_I%s", "MPI_%s_init"};
        for (int f = 0; f < 3; f++) {
            char name[64], lower[48];
            snprintf(lower, sizeof lower, "%s", COLLNAMES[i]);
            if (f == 1) lower[0] = (char)(lower[0] - 'A' + 'a');
            snprintf(name, sizeof name, fmt[f], lower);
            total += shim_count(name);
        }
    }
    if (expect_shim()) CHECK(total >= (uint64_t)ran, "only %llu collective calls intercepted", (unsigned long long)total);
    const char *names[] = {"MPI_Wait", "MPI_Init"};
    check_intercepted(names, 2);
        test_pass("diff_coll");
    for (int i = 10; i <= 14; i++) MPI_Type_free(&TYPES[i].t);
    MPI_Type_free(&TYPES[17].t);
    MPI_Op_free(&OPS[12]);
    MPI_Op_free(&OPS[13]);
    MPI_Op_free(&OPS[14]);
    MPI_Comm_free(&g_pworld);
    MPI_Finalize();
    return 0;
}

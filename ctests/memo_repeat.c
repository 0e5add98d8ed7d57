/* Repeated collective calls with unchanged arguments, the case the shim's per-thread memo
 * of calls handed to the system MPI shortens (src/services/coll/memo.rs): results must follow
 * whatever changed behind unchanged arguments.
 *
 * For Gatherv, Scatterv, Allgatherv, Alltoallv, Alltoallw, Reduce_scatter and, as
 * controls, Bcast and Allreduce, small messages (where `auto` hands most calls to the
 * system MPI) are repeated with
 *   - the same buffers and arrays but new data every call;
 *   - the same array pointers with new contents (counts and displacements rewritten in
 *     place between two calls);
 *   - a communicator freed and replaced by one of another size or rank order (MPICH
 *     reuses the handle), with the same arguments otherwise;
 * and every result is compared with the system MPI's (PMPI_*) on the same inputs. */
#include "common.h"

#define MAXN 16
#define CAP 64

static int me, np;

/* Fills counts (1..3 per rank, shifted by `salt`) and packed displacements. */
static void layout(int n, int salt, int *counts, int *displs) {
    int off = 0;
    for (int i = 0; i < n; i++) {
        counts[i] = 1 + (i + salt) % 3;
        displs[i] = off;
        off += counts[i] + salt % 2; /* a gap when salt is odd */
    }
}

static void fill(int *b, int n, int seed) {
    for (int i = 0; i < n; i++) b[i] = seed * 1000 + me * 100 + i;
}

static void same(const int *a, const int *b, int n, const char *what, int round) {
    for (int i = 0; i < n; i++)
        CHECK(a[i] == b[i], "%s round %d: element %d = %d, system MPI %d", what, round, i, a[i], b[i]);
}

/* One round of every collective on `c`, with the arrays laid out by `salt` and the data
 * by `seed`; the arrays are shared between the shim call and the oracle call. */
static void round_on(MPI_Comm c, int salt, int seed, int round) {
    int rank, n;
    MPI_Comm_rank(c, &rank);
    MPI_Comm_size(c, &n);
    static int counts[MAXN], displs[MAXN], scounts[MAXN], sdispls[MAXN], bsdispls[MAXN];
    static MPI_Datatype types[MAXN];
    static int sbuf[CAP * MAXN], a[CAP * MAXN], b[CAP * MAXN];
    layout(n, salt, counts, displs);
    /* Alltoallv/w: what rank r sends to j, f(r, j), is symmetric, so one array serves as
     * both the send and the receive counts */
    int off = 0;
    for (int j = 0; j < n; j++) {
        scounts[j] = 1 + (rank + j + salt) % 3;
        sdispls[j] = off;
        bsdispls[j] = off * 4;
        off += scounts[j] + salt % 2;
        types[j] = MPI_INT;
    }
    int xtotal = off;
    fill(sbuf, CAP * MAXN, seed);
    int total = displs[n - 1] + counts[n - 1];
    int mine = counts[rank];
    int root = (seed + salt) % n;

    /* Gatherv: the root's arrays, each rank's own count */
    memset(a, 0, sizeof a), memset(b, 0, sizeof b);
    MPI_OK(MPI_Gatherv(sbuf, mine, MPI_INT, a, counts, displs, MPI_INT, root, c));
    MPI_OK(PMPI_Gatherv(sbuf, mine, MPI_INT, b, counts, displs, MPI_INT, root, c));
    if (rank == root) same(a, b, total, "Gatherv", round);
    /* Scatterv */
    memset(a, 0, sizeof a), memset(b, 0, sizeof b);
    MPI_OK(MPI_Scatterv(sbuf, counts, displs, MPI_INT, a, mine, MPI_INT, root, c));
    MPI_OK(PMPI_Scatterv(sbuf, counts, displs, MPI_INT, b, mine, MPI_INT, root, c));
    same(a, b, mine, "Scatterv", round);
    /* Allgatherv */
    memset(a, 0, sizeof a), memset(b, 0, sizeof b);
    MPI_OK(MPI_Allgatherv(sbuf, mine, MPI_INT, a, counts, displs, MPI_INT, c));
    MPI_OK(PMPI_Allgatherv(sbuf, mine, MPI_INT, b, counts, displs, MPI_INT, c));
    same(a, b, total, "Allgatherv", round);
    /* Alltoallv */
    memset(a, 0, sizeof a), memset(b, 0, sizeof b);
    MPI_OK(MPI_Alltoallv(sbuf, scounts, sdispls, MPI_INT, a, scounts, sdispls, MPI_INT, c));
    MPI_OK(PMPI_Alltoallv(sbuf, scounts, sdispls, MPI_INT, b, scounts, sdispls, MPI_INT, c));
    same(a, b, xtotal, "Alltoallv", round);
    /* Alltoallw, byte displacements */
    memset(a, 0, sizeof a), memset(b, 0, sizeof b);
    MPI_OK(MPI_Alltoallw(sbuf, scounts, bsdispls, types, a, scounts, bsdispls, types, c));
    MPI_OK(PMPI_Alltoallw(sbuf, scounts, bsdispls, types, b, scounts, bsdispls, types, c));
    same(a, b, xtotal, "Alltoallw", round);
    /* Reduce_scatter: counts as the result blocks */
    memset(a, 0, sizeof a), memset(b, 0, sizeof b);
    MPI_OK(MPI_Reduce_scatter(sbuf, a, counts, MPI_INT, MPI_SUM, c));
    MPI_OK(PMPI_Reduce_scatter(sbuf, b, counts, MPI_INT, MPI_SUM, c));
    same(a, b, mine, "Reduce_scatter", round);
    /* controls without arrays */
    memcpy(a, sbuf, sizeof(int) * 3), memcpy(b, sbuf, sizeof(int) * 3);
    MPI_OK(MPI_Bcast(a, 3, MPI_INT, root, c));
    MPI_OK(PMPI_Bcast(b, 3, MPI_INT, root, c));
    same(a, b, 3, "Bcast", round);
    MPI_OK(MPI_Allreduce(sbuf, a, 3, MPI_INT, MPI_SUM, c));
    MPI_OK(PMPI_Allreduce(sbuf, b, 3, MPI_INT, MPI_SUM, c));
    same(a, b, 3, "Allreduce", round);
}

int main(int argc, char **argv) {
    test_init(&argc, &argv);
    me = g_rank, np = g_size;
    CHECK(np <= MAXN, "at most %d ranks", MAXN);
    int round = 0;
    /* the same arguments, new data, then the same array pointers with new contents */
    for (int salt = 0; salt < 3; salt++)
        for (int rep = 0; rep < 4; rep++) round_on(MPI_COMM_WORLD, salt, rep + 1, round++);
    /* communicators freed and replaced: the handle may come back naming a communicator of
     * another size, or with this process at another rank */
    for (int k = 0; k < 6; k++) {
        MPI_Comm c;
        int color = k % 2 ? me % 2 : 0;       /* halves, or everyone */
        int key = k % 3 == 2 ? np - me : me;   /* reversed order now and then */
        MPI_OK(MPI_Comm_split(MPI_COMM_WORLD, color, key, &c));
        for (int rep = 0; rep < 3; rep++) round_on(c, 1, rep + 7, round++);
        MPI_OK(MPI_Comm_free(&c));
    }
    static const char *const names[] = {"MPI_Gatherv", "MPI_Scatterv", "MPI_Allgatherv", "MPI_Alltoallv",
                                        "MPI_Alltoallw", "MPI_Reduce_scatter"};
    check_intercepted(names, 6);
    test_pass("memo_repeat");
    MPI_Finalize();
    return 0;
}

/* Repeated blocking collectives on the node transport, the case the shim's lane shortens
 * (src/services/coll/lane.rs: a call that repeats one that ran in shared memory runs the
 * remembered schedule at once): results must follow whatever changed behind unchanged
 * arguments, on every rank, whichever rank's call takes the lane.
 *
 * Every collective with a shared-memory algorithm (Barrier, Bcast, Gather, Scatter,
 * Allgather, Alltoall, Reduce, Allreduce, Reduce_scatter_block, Scan, Exscan, and Gatherv,
 * Scatterv, Allgatherv, Alltoallv with arrays whose contents change) is called
 * REPS times in a row with the same arguments and new data each time, interleaved so that
 * each function keeps its own remembered call, and compared with the system MPI (PMPI_*)
 * on the same inputs:
 *   - rounds with the root, MPI_IN_PLACE and the count changing between rounds;
 *   - communicators freed and replaced by ones of another size or rank order (MPICH reuses
 *     the handle), with the same arguments otherwise;
 *   - an algorithm forced and released through the shim's C API between two repeats (a
 *     remembered call must not outlive it);
 *   - a second communicator's calls between the first one's (one entry per function);
 *   - the root moving to the next rank on every repeat, as IMB does (each root keeps its
 *     own remembered call, up to four; with more ranks a root takes another's entry).
 * Run with SHIM_TRANSPORT=shm SHIM_SHM_AFTER=0 (scripts/tests/shm-tests); without the
 * transport it checks the ordinary path. */
#include "common.h"

#define MAXN 16
#define CAP 8
#define REPS 4

static int me, np;
static int (*set_algo)(const char *, const char *);

static void fill(int *b, int n, int seed) {
    for (int i = 0; i < n; i++) b[i] = seed * 1000 + me * 100 + i;
}

static void same(const int *a, const int *b, int n, const char *what, int round) {
    for (int i = 0; i < n; i++)
        CHECK(a[i] == b[i], "%s round %d: element %d = %d, system MPI %d", what, round, i, a[i], b[i]);
}

/* One round on `c`: each collective REPS times with the same arguments (count `k`, root,
 * in place or not from `salt`), new data each time; with `rotate` the root moves to the
 * next rank on every repeat. */
static void round_rooted(MPI_Comm c, int salt, int k, int round, int rotate) {
    int rank, n;
    MPI_Comm_rank(c, &rank);
    MPI_Comm_size(c, &n);
    static int sbuf[CAP * MAXN], a[CAP * MAXN], b[CAP * MAXN], ia[CAP * MAXN], ib[CAP * MAXN];
    int inplace = salt % 2;
    for (int rep = 0; rep < REPS; rep++) {
        int root = (salt + round + (rotate ? rep : 0)) % n;
        int seed = round * 10 + rep + 1;
        fill(sbuf, CAP * MAXN, seed);
        MPI_OK(MPI_Barrier(c));
        /* Bcast */
        memcpy(a, sbuf, sizeof(int) * k), memcpy(b, sbuf, sizeof(int) * k);
        MPI_OK(MPI_Bcast(a, k, MPI_INT, root, c));
        MPI_OK(PMPI_Bcast(b, k, MPI_INT, root, c));
        same(a, b, k, "Bcast", round);
        /* Gather */
        memset(a, 0, sizeof a), memset(b, 0, sizeof b);
        MPI_OK(MPI_Gather(sbuf, k, MPI_INT, a, k, MPI_INT, root, c));
        MPI_OK(PMPI_Gather(sbuf, k, MPI_INT, b, k, MPI_INT, root, c));
        if (rank == root) same(a, b, k * n, "Gather", round);
        /* Scatter */
        memset(a, 0, sizeof a), memset(b, 0, sizeof b);
        MPI_OK(MPI_Scatter(sbuf, k, MPI_INT, a, k, MPI_INT, root, c));
        MPI_OK(PMPI_Scatter(sbuf, k, MPI_INT, b, k, MPI_INT, root, c));
        same(a, b, k, "Scatter", round);
        /* Allgather */
        memset(a, 0, sizeof a), memset(b, 0, sizeof b);
        MPI_OK(MPI_Allgather(sbuf, k, MPI_INT, a, k, MPI_INT, c));
        MPI_OK(PMPI_Allgather(sbuf, k, MPI_INT, b, k, MPI_INT, c));
        same(a, b, k * n, "Allgather", round);
        /* Alltoall */
        memset(a, 0, sizeof a), memset(b, 0, sizeof b);
        MPI_OK(MPI_Alltoall(sbuf, k, MPI_INT, a, k, MPI_INT, c));
        MPI_OK(PMPI_Alltoall(sbuf, k, MPI_INT, b, k, MPI_INT, c));
        same(a, b, k * n, "Alltoall", round);
        /* the v forms (each block through a slot or by address, algo/single.rs): the same
         * count and displacement arrays (the same pointers) whose contents change every
         * other repeat, so a remembered call must compare what they hold */
        static int cnt[MAXN], dsp[MAXN], scnt[MAXN], sdsp[MAXN], rcnt[MAXN], rdsp[MAXN];
        int shift = round + rep / 2;
        for (int i = 0, at = 0, sa = 0, ra = 0; i < n; i++) {
            cnt[i] = 1 + (i + shift) % k, dsp[i] = at, at += cnt[i];
            scnt[i] = 1 + (rank + 2 * i + shift) % k, sdsp[i] = sa, sa += scnt[i];
            rcnt[i] = 1 + (i + 2 * rank + shift) % k, rdsp[i] = ra, ra += rcnt[i];
        }
        memset(a, 0, sizeof a), memset(b, 0, sizeof b);
        MPI_OK(MPI_Gatherv(sbuf, cnt[rank], MPI_INT, a, cnt, dsp, MPI_INT, root, c));
        MPI_OK(PMPI_Gatherv(sbuf, cnt[rank], MPI_INT, b, cnt, dsp, MPI_INT, root, c));
        if (rank == root) same(a, b, CAP * MAXN, "Gatherv", round);
        memset(a, 0, sizeof a), memset(b, 0, sizeof b);
        MPI_OK(MPI_Scatterv(sbuf, cnt, dsp, MPI_INT, a, cnt[rank], MPI_INT, root, c));
        MPI_OK(PMPI_Scatterv(sbuf, cnt, dsp, MPI_INT, b, cnt[rank], MPI_INT, root, c));
        same(a, b, CAP * MAXN, "Scatterv", round);
        memset(a, 0, sizeof a), memset(b, 0, sizeof b);
        MPI_OK(MPI_Allgatherv(sbuf, cnt[rank], MPI_INT, a, cnt, dsp, MPI_INT, c));
        MPI_OK(PMPI_Allgatherv(sbuf, cnt[rank], MPI_INT, b, cnt, dsp, MPI_INT, c));
        same(a, b, CAP * MAXN, "Allgatherv", round);
        memset(a, 0, sizeof a), memset(b, 0, sizeof b);
        MPI_OK(MPI_Alltoallv(sbuf, scnt, sdsp, MPI_INT, a, rcnt, rdsp, MPI_INT, c));
        MPI_OK(PMPI_Alltoallv(sbuf, scnt, sdsp, MPI_INT, b, rcnt, rdsp, MPI_INT, c));
        same(a, b, CAP * MAXN, "Alltoallv", round);
        /* Reduce, in place at the root on odd salts */
        memcpy(ia, sbuf, sizeof(int) * k), memcpy(ib, sbuf, sizeof(int) * k);
        const void *rs = inplace && rank == root ? MPI_IN_PLACE : sbuf;
        MPI_OK(MPI_Reduce(rs, ia, k, MPI_INT, MPI_SUM, root, c));
        MPI_OK(PMPI_Reduce(rs, ib, k, MPI_INT, MPI_SUM, root, c));
        if (rank == root) same(ia, ib, k, "Reduce", round);
        /* Allreduce, in place on odd salts */
        memcpy(ia, sbuf, sizeof(int) * k), memcpy(ib, sbuf, sizeof(int) * k);
        const void *as = inplace ? MPI_IN_PLACE : sbuf;
        MPI_OK(MPI_Allreduce(as, ia, k, MPI_INT, MPI_MAX, c));
        MPI_OK(PMPI_Allreduce(as, ib, k, MPI_INT, MPI_MAX, c));
        same(ia, ib, k, "Allreduce", round);
        /* Reduce_scatter_block */
        memset(a, 0, sizeof a), memset(b, 0, sizeof b);
        MPI_OK(MPI_Reduce_scatter_block(sbuf, a, k, MPI_INT, MPI_SUM, c));
        MPI_OK(PMPI_Reduce_scatter_block(sbuf, b, k, MPI_INT, MPI_SUM, c));
        same(a, b, k, "Reduce_scatter_block", round);
        /* Scan and Exscan (Exscan's result at rank 0 is undefined) */
        memset(a, 0, sizeof a), memset(b, 0, sizeof b);
        MPI_OK(MPI_Scan(sbuf, a, k, MPI_INT, MPI_SUM, c));
        MPI_OK(PMPI_Scan(sbuf, b, k, MPI_INT, MPI_SUM, c));
        same(a, b, k, "Scan", round);
        MPI_OK(MPI_Exscan(sbuf, a, k, MPI_INT, MPI_PROD, c));
        MPI_OK(PMPI_Exscan(sbuf, b, k, MPI_INT, MPI_PROD, c));
        if (rank > 0) same(a, b, k, "Exscan", round);
    }
}

static void round_on(MPI_Comm c, int salt, int k, int round) {
    round_rooted(c, salt, k, round, 0);
}

int main(int argc, char **argv) {
    test_init(&argc, &argv);
    me = g_rank, np = g_size;
    CHECK(np <= MAXN, "at most %d ranks", MAXN);
    set_algo = (int (*)(const char *, const char *))dlsym(RTLD_DEFAULT, "shim_set_algorithm");
    int round = 0;
    /* the same arguments, new data; then the root, MPI_IN_PLACE and the count change */
    for (int salt = 0; salt < 4; salt++) round_on(MPI_COMM_WORLD, salt, 1 + salt % 3 * 3, round++);
    /* communicators freed and replaced: the handle may come back naming a communicator of
     * another size, or with this process at another rank */
    for (int k = 0; k < 6; k++) {
        MPI_Comm c;
        int color = k % 2 ? me % 2 : 0;     /* halves, or everyone */
        int key = k % 3 == 2 ? np - me : me; /* reversed order now and then */
        MPI_OK(MPI_Comm_split(MPI_COMM_WORLD, color, key, &c));
        round_on(c, 1, 3, round++);
        MPI_OK(MPI_Comm_free(&c));
    }
    /* an algorithm forced between repeats, then released (every rank alike) */
    if (set_algo) {
        round_on(MPI_COMM_WORLD, 2, 3, round++);
        CHECK(set_algo("Allreduce", "native") == 0, "shim_set_algorithm(Allreduce, native)");
        CHECK(set_algo("Bcast", "native") == 0, "shim_set_algorithm(Bcast, native)");
        round_on(MPI_COMM_WORLD, 2, 3, round++);
        CHECK(set_algo("Allreduce", "auto") == 0, "shim_set_algorithm(Allreduce, auto)");
        CHECK(set_algo("Bcast", "auto") == 0, "shim_set_algorithm(Bcast, auto)");
        round_on(MPI_COMM_WORLD, 2, 3, round++);
    }
    /* two communicators alternating: each call replaces the other's remembered one */
    MPI_Comm d;
    MPI_OK(MPI_Comm_dup(MPI_COMM_WORLD, &d));
    for (int r = 0; r < 3; r++) {
        round_on(d, r, 2, round++);
        round_on(MPI_COMM_WORLD, r, 2, round++);
    }
    MPI_OK(MPI_Comm_free(&d));
    /* the root moving on every call: twice through the same roots, then a new count */
    for (int r = 0; r < 3; r++) round_rooted(MPI_COMM_WORLD, 0, r < 2 ? 2 : 5, round++, 1);
    static const char *const names[] = {"MPI_Bcast", "MPI_Allreduce", "MPI_Reduce", "MPI_Barrier"};
    check_intercepted(names, 4);
    test_pass("shm_lane");
    MPI_Finalize();
    return 0;
}

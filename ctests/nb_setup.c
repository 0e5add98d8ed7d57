/* A communicator whose collectives are all non-blocking gets its shared-memory segment
 * (issue 34): the set-up starts in the (SHIM_SHM_AFTER+1)-th non-blocking call that could
 * take it, without waiting for the other ranks there (a non-blocking collective's call is
 * local, MPI-4.0 §6.12), and the calls from that one on run on the segment once it is there.
 * 1. Locality: rank 0 makes ROUNDS rounds of non-blocking collectives (past the set-up's
 *    call) and only then sends rank 1 the message that lets rank 1 start its own; the ranks
 *    past 1 start theirs at once. A call that waited for the others would hang here.
 * 2. Mixed forms while the set-up may still go on: the ranks start non-blocking calls, then
 *    one rank (the last) makes a blocking Allreduce and a persistent initialization before
 *    waiting, the others wait first. Where the library gets the Allreduce (Intel MPI at 3
 *    ranks), the last rank must complete its non-blocking calls on the communicator before
 *    it enters the library's (it hung there: the others wait for them first).
 * 3. Iallreduce, Ibcast, Ireduce, Iallgather, Ialltoall, Igather, Iscatter, Iscan and
 *    Ibarrier of 1-64 longs on a fresh communicator, many outstanding at once, results
 *    checked.
 * 4. A communicator that makes only persistent collectives: its first initialization starts
 *    the set-up without waiting, the initializations while it goes on hold channels reserved
 *    for them, more than SHIM_SHM_CHANNELS of them are initialized (some get a channel given
 *    back, the rest point-to-point), one is freed before it ever starts and one half-way
 *    through and initialized again; every start's results checked. Then, the segment there,
 *    an initialization that fails at the root only and is made again there; the same on a
 *    communicator whose segment its blocking calls set up.
 * 5. Beyond the slot on a communicator that makes only non-blocking collectives: part 3's
 *    collectives of BIG longs a block, and Iallgatherv, Ialltoallv, Igatherv and Iscatterv
 *    of blocks of different sizes, results checked (the segment with one copy where the
 *    node allows it, else point-to-point beside the instance the call took).
 * With EXPECT_SEGMENT=1 (SHIM_STATS=1, the node transport on): Iallreduce and Ibcast on the
 * communicators that make no blocking collective before must have run on the segment, and
 * so must Bcast_init and Reduce_init, made on the persistent-only communicator alone, and
 * Iallgatherv and Ialltoallv and some Iallreduce with one copy (EXPECT_SINGLE=1: where the
 * kernel allows it). With EXPECT_SEGMENT=0 (SHIM_STATS=1, the segment's set-up failing):
 * none of them may be noted on the segment.
 * Usage: nb_setup [rounds] */
#include "common.h"

enum { K = 8 };

/* Round r of Iallreduce and Ibcast (root r % size) of one long each, started. */
static void start_round(MPI_Comm comm, int r, long *in, long *out, long *bc, MPI_Request *q) {
    *in = 3L * r + g_rank;
    *out = -1;
    *bc = g_rank == r % g_size ? 7L * r : -1;
    MPI_OK(MPI_Iallreduce(in, out, 1, MPI_LONG, MPI_SUM, comm, &q[0]));
    MPI_OK(MPI_Ibcast(bc, 1, MPI_LONG, r % g_size, comm, &q[1]));
}

static void check_round(int r, long out, long bc) {
    long want = 3L * r * g_size + (long)g_size * (g_size - 1) / 2;
    CHECK(out == want, "round %d: Iallreduce gave %ld, not %ld", r, out, want);
    CHECK(bc == 7L * r, "round %d: Ibcast gave %ld", r, bc);
}

static void locality(int rounds) {
    MPI_Comm comm;
    MPI_OK(MPI_Comm_dup(MPI_COMM_WORLD, &comm));
    long *v = malloc(sizeof(long) * 3 * rounds);
    MPI_Request *q = malloc(sizeof(MPI_Request) * 2 * rounds);
    CHECK(v && q, "no memory");
    int token = 42;
    if (g_rank == 1) MPI_OK(MPI_Recv(&token, 1, MPI_INT, 0, 5, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    for (int r = 0; r < rounds; r++) start_round(comm, r, &v[3 * r], &v[3 * r + 1], &v[3 * r + 2], &q[2 * r]);
    if (g_rank == 0) MPI_OK(MPI_Send(&token, 1, MPI_INT, 1, 5, MPI_COMM_WORLD));
    MPI_OK(MPI_Waitall(2 * rounds, q, MPI_STATUSES_IGNORE));
    for (int r = 0; r < rounds; r++) check_round(r, v[3 * r + 1], v[3 * r + 2]);
    CHECK(token == 42, "the token");
    /* and more rounds, the segment there */
    for (int r = 0; r < rounds; r++) {
        start_round(comm, r, &v[0], &v[1], &v[2], q);
        MPI_OK(MPI_Waitall(2, q, MPI_STATUSES_IGNORE));
        check_round(r, v[1], v[2]);
    }
    free(v), free(q);
    MPI_OK(MPI_Comm_free(&comm));
}

static void mixed(int rounds) {
    MPI_Comm comm;
    MPI_OK(MPI_Comm_dup(MPI_COMM_WORLD, &comm));
    long v[3 * K];
    MPI_Request q[2 * K];
    for (int r = 0; r < K; r++) start_round(comm, r, &v[3 * r], &v[3 * r + 1], &v[3 * r + 2], &q[2 * r]);
    if (g_rank != g_size - 1) MPI_OK(MPI_Waitall(2 * K, q, MPI_STATUSES_IGNORE));
    long one = g_rank, all = -1, p_in[2], p_out[2];
    MPI_OK(MPI_Allreduce(&one, &all, 1, MPI_LONG, MPI_SUM, comm));
    CHECK(all == (long)g_size * (g_size - 1) / 2, "Allreduce gave %ld", all);
    MPI_Request p;
    MPI_OK(MPI_Allreduce_init(p_in, p_out, 2, MPI_LONG, MPI_MAX, comm, MPI_INFO_NULL, &p));
    if (g_rank == g_size - 1) MPI_OK(MPI_Waitall(2 * K, q, MPI_STATUSES_IGNORE));
    for (int r = 0; r < K; r++) check_round(r, v[3 * r + 1], v[3 * r + 2]);
    for (int r = 0; r < rounds; r++) {
        p_in[0] = r + g_rank, p_in[1] = -r - g_rank;
        MPI_OK(MPI_Start(&p));
        MPI_OK(MPI_Wait(&p, MPI_STATUS_IGNORE));
        CHECK(p_out[0] == r + g_size - 1 && p_out[1] == -r, "Allreduce_init %d gave %ld %ld", r, p_out[0],
              p_out[1]);
        start_round(comm, r, &v[0], &v[1], &v[2], q);
        MPI_OK(MPI_Waitall(2, q, MPI_STATUSES_IGNORE));
        check_round(r, v[1], v[2]);
    }
    MPI_OK(MPI_Request_free(&p));
    MPI_OK(MPI_Comm_free(&comm));
}

/* Every collective of `n` longs, all outstanding at once, round `r`. */
static void every(MPI_Comm comm, int n, int r) {
    int p = g_size, root = r % p;
    long *b = malloc(sizeof(long) * (size_t)n * p * 12);
    CHECK(b, "no memory");
    long *in = b, *sum = in + n, *red = sum + n, *bc = red + n, *scan = bc + n, *ag = scan + n,
         *a2a_in = ag + (size_t)n * p, *a2a = a2a_in + (size_t)n * p, *ga = a2a + (size_t)n * p,
         *sc_in = ga + (size_t)n * p, *sc = sc_in + (size_t)n * p;
    for (int i = 0; i < n; i++) in[i] = 100L * r + 10L * g_rank + i, bc[i] = g_rank == root ? 5L * r + i : -1;
    for (int i = 0; i < n * p; i++) a2a_in[i] = 1000L * g_rank + i + r, sc_in[i] = 7L * i + r;
    MPI_Request q[9];
    MPI_OK(MPI_Iallreduce(in, sum, n, MPI_LONG, MPI_SUM, comm, &q[0]));
    MPI_OK(MPI_Ireduce(in, red, n, MPI_LONG, MPI_MAX, root, comm, &q[1]));
    MPI_OK(MPI_Ibcast(bc, n, MPI_LONG, root, comm, &q[2]));
    MPI_OK(MPI_Iscan(in, scan, n, MPI_LONG, MPI_SUM, comm, &q[3]));
    MPI_OK(MPI_Iallgather(in, n, MPI_LONG, ag, n, MPI_LONG, comm, &q[4]));
    MPI_OK(MPI_Ialltoall(a2a_in, n, MPI_LONG, a2a, n, MPI_LONG, comm, &q[5]));
    MPI_OK(MPI_Igather(in, n, MPI_LONG, ga, n, MPI_LONG, root, comm, &q[6]));
    MPI_OK(MPI_Iscatter(sc_in, n, MPI_LONG, sc, n, MPI_LONG, root, comm, &q[7]));
    MPI_OK(MPI_Ibarrier(comm, &q[8]));
    MPI_OK(MPI_Waitall(9, q, MPI_STATUSES_IGNORE));
    for (int i = 0; i < n; i++) {
        long s = 100L * r * p + 10L * p * (p - 1) / 2 + (long)i * p;
        CHECK(sum[i] == s, "n=%d round %d: Iallreduce[%d] gave %ld, not %ld", n, r, i, sum[i], s);
        CHECK(g_rank != root || red[i] == 100L * r + 10L * (p - 1) + i, "n=%d round %d: Ireduce[%d] gave %ld", n,
              r, i, red[i]);
        CHECK(bc[i] == 5L * r + i, "n=%d round %d: Ibcast[%d] gave %ld", n, r, i, bc[i]);
        long sc_want = 100L * r * (g_rank + 1) + 10L * g_rank * (g_rank + 1) / 2 + (long)i * (g_rank + 1);
        CHECK(scan[i] == sc_want, "n=%d round %d: Iscan[%d] gave %ld, not %ld", n, r, i, scan[i], sc_want);
        CHECK(sc[i] == 7L * (g_rank * n + i) + r, "n=%d round %d: Iscatter[%d] gave %ld", n, r, i, sc[i]);
    }
    for (int k = 0; k < p; k++)
        for (int i = 0; i < n; i++) {
            CHECK(ag[k * n + i] == 100L * r + 10L * k + i, "n=%d round %d: Iallgather[%d][%d] gave %ld", n, r, k,
                  i, ag[k * n + i]);
            CHECK(g_rank != root || ga[k * n + i] == 100L * r + 10L * k + i, "n=%d round %d: Igather[%d][%d]", n,
                  r, k, i);
            CHECK(a2a[k * n + i] == 1000L * k + g_rank * n + i + r, "n=%d round %d: Ialltoall[%d][%d] gave %ld", n,
                  r, k, i, a2a[k * n + i]);
        }
    free(b);
}

enum { N = 4 };

/* An initialization that fails at the root only (its send buffer NULL, MPI-4.0 §6.6),
 * which the root makes again (the other ranks' calls were valid, MPI-4.0 §9.3): it must get
 * the channel the others got, or their starts never meet (a hang with the build before, on
 * a communicator whose segment a blocking call set up). */
static void failed_init_repeated(MPI_Comm comm, int rounds) {
    /* (the shim's part: without it, whether the library checks the buffer is its own
     * business; Open MPI 5.0.11 returns MPI_SUCCESS there, the standard names no class) */
    if (!expect_shim()) return;
    int p = g_size, root = p - 1;
    long *sc_in = malloc(sizeof(long) * N * (size_t)p), sc[N];
    CHECK(sc_in, "no memory");
    MPI_OK(MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN));
    MPI_Request s;
    if (g_rank == root) {
        int rc = MPI_Scatter_init(NULL, N, MPI_LONG, sc, N, MPI_LONG, root, comm, MPI_INFO_NULL, &s);
        int cls = MPI_SUCCESS;
        MPI_Error_class(rc, &cls);
        CHECK(cls == MPI_ERR_BUFFER, "Scatter_init with a NULL send buffer at the root returned class %d", cls);
    }
    MPI_OK(MPI_Scatter_init(sc_in, N, MPI_LONG, sc, N, MPI_LONG, root, comm, MPI_INFO_NULL, &s));
    for (int r = 0; r < 3 && r < rounds; r++) {
        for (int i = 0; i < N * p; i++) sc_in[i] = 7L * i + r;
        MPI_OK(MPI_Start(&s));
        MPI_OK(MPI_Wait(&s, MPI_STATUS_IGNORE));
        for (int i = 0; i < N; i++)
            CHECK(sc[i] == 7L * (g_rank * N + i) + r, "round %d: Scatter_init[%d] gave %ld", r, i, sc[i]);
    }
    MPI_OK(MPI_Request_free(&s));
    free(sc_in);
}

/* Part 4: the persistent collectives of one round's inputs, checked. */
static void persistent_only(int rounds) {
    MPI_Comm comm;
    MPI_OK(MPI_Comm_dup(MPI_COMM_WORLD, &comm));
    int p = g_size, root = p - 1;
    long *b = malloc(sizeof(long) * N * (5 + 3 * (size_t)p));
    CHECK(b, "no memory");
    long *in = b, *sum = in + N, *red = sum + N, *bc = red + N, *scan = bc + N, *ag = scan + N,
         *a2a_in = ag + (size_t)N * p, *a2a = a2a_in + (size_t)N * p;
    enum { NP = 7 };
    MPI_Request q[NP], gone;
    /* the first initialization starts the set-up; freed before it ever starts */
    MPI_OK(MPI_Allreduce_init(in, sum, N, MPI_LONG, MPI_SUM, comm, MPI_INFO_NULL, &gone));
    MPI_OK(MPI_Request_free(&gone));
    MPI_OK(MPI_Allreduce_init(in, sum, N, MPI_LONG, MPI_SUM, comm, MPI_INFO_NULL, &q[0]));
    MPI_OK(MPI_Reduce_init(in, red, N, MPI_LONG, MPI_MAX, root, comm, MPI_INFO_NULL, &q[1]));
    MPI_OK(MPI_Bcast_init(bc, N, MPI_LONG, 0, comm, MPI_INFO_NULL, &q[2]));
    MPI_OK(MPI_Scan_init(in, scan, N, MPI_LONG, MPI_SUM, comm, MPI_INFO_NULL, &q[3]));
    MPI_OK(MPI_Allgather_init(in, N, MPI_LONG, ag, N, MPI_LONG, comm, MPI_INFO_NULL, &q[4]));
    MPI_OK(MPI_Alltoall_init(a2a_in, N, MPI_LONG, a2a, N, MPI_LONG, comm, MPI_INFO_NULL, &q[5]));
    MPI_OK(MPI_Barrier_init(comm, MPI_INFO_NULL, &q[6]));
    /* (CTEST_PERSISTENT_STARTS: the system MPI's may not restart, see common.h) */
    if (getenv("CTEST_PERSISTENT_STARTS")) rounds = persistent_starts();
    for (int r = 0; r < rounds; r++) {
        if (r == rounds / 2) {
            /* freed half-way (its channel given back) and initialized again */
            MPI_OK(MPI_Request_free(&q[2]));
            MPI_OK(MPI_Bcast_init(bc, N, MPI_LONG, 0, comm, MPI_INFO_NULL, &q[2]));
        }
        for (int i = 0; i < N; i++) in[i] = 100L * r + 10L * g_rank + i, bc[i] = g_rank == 0 ? 5L * r + i : -1;
        for (int i = 0; i < N * p; i++) a2a_in[i] = 1000L * g_rank + i + r;
        MPI_OK(MPI_Startall(NP, q));
        MPI_OK(MPI_Waitall(NP, q, MPI_STATUSES_IGNORE));
        for (int i = 0; i < N; i++) {
            long s = 100L * r * p + 10L * p * (p - 1) / 2 + (long)i * p;
            CHECK(sum[i] == s, "round %d: Allreduce_init[%d] gave %ld, not %ld", r, i, sum[i], s);
            CHECK(g_rank != root || red[i] == 100L * r + 10L * (p - 1) + i, "round %d: Reduce_init[%d] gave %ld",
                  r, i, red[i]);
            CHECK(bc[i] == 5L * r + i, "round %d: Bcast_init[%d] gave %ld", r, i, bc[i]);
            long sc = 100L * r * (g_rank + 1) + 10L * g_rank * (g_rank + 1) / 2 + (long)i * (g_rank + 1);
            CHECK(scan[i] == sc, "round %d: Scan_init[%d] gave %ld, not %ld", r, i, scan[i], sc);
        }
        for (int k = 0; k < p; k++)
            for (int i = 0; i < N; i++) {
                CHECK(ag[k * N + i] == 100L * r + 10L * k + i, "round %d: Allgather_init[%d][%d] gave %ld", r, k, i,
                      ag[k * N + i]);
                CHECK(a2a[k * N + i] == 1000L * k + g_rank * N + i + r, "round %d: Alltoall_init[%d][%d] gave %ld",
                      r, k, i, a2a[k * N + i]);
            }
    }
    for (int i = 0; i < NP; i++) MPI_OK(MPI_Request_free(&q[i]));
    failed_init_repeated(comm, rounds);
    free(b);
    MPI_OK(MPI_Comm_free(&comm));
}

enum { BIG = 4096 };

/* The v forms, blocks of (k + 1) * m longs from or to rank k, round r, all outstanding. */
static void every_v(MPI_Comm comm, int m, int r) {
    int p = g_size, root = r % p;
    int *cnt = malloc(sizeof(int) * 4 * p), *dsp = cnt + p, *mine = dsp + p, *mdsp = mine + p;
    CHECK(cnt, "no memory");
    int tot = 0;
    for (int k = 0; k < p; k++) cnt[k] = (k + 1) * m, dsp[k] = tot, tot += cnt[k];
    /* Ialltoallv: rank g sends (g + 1) * m longs to every rank, so each receives cnt[] */
    int own = (g_rank + 1) * m;
    for (int k = 0; k < p; k++) mine[k] = own, mdsp[k] = k * own;
    long *b = malloc(sizeof(long) * ((size_t)tot * 4 + (size_t)own * p * 2 + own));
    CHECK(b, "no memory");
    long *ag = b, *a2a = ag + tot, *ga = a2a + tot, *sc_in = ga + tot, *a2a_in = sc_in + tot,
         *in = a2a_in + (size_t)own * p, *sc = in + own;
    for (int i = 0; i < own; i++) in[i] = 1000L * g_rank + i + r;
    for (int k = 0; k < p; k++)
        for (int i = 0; i < own; i++) a2a_in[k * own + i] = 100000L * g_rank + 100L * k + i + r;
    for (int i = 0; i < tot; i++) sc_in[i] = 3L * i + r;
    MPI_Request q[4];
    MPI_OK(MPI_Iallgatherv(in, own, MPI_LONG, ag, cnt, dsp, MPI_LONG, comm, &q[0]));
    MPI_OK(MPI_Ialltoallv(a2a_in, mine, mdsp, MPI_LONG, a2a, cnt, dsp, MPI_LONG, comm, &q[1]));
    MPI_OK(MPI_Igatherv(in, own, MPI_LONG, ga, cnt, dsp, MPI_LONG, root, comm, &q[2]));
    MPI_OK(MPI_Iscatterv(sc_in, cnt, dsp, MPI_LONG, sc, own, MPI_LONG, root, comm, &q[3]));
    MPI_OK(MPI_Waitall(4, q, MPI_STATUSES_IGNORE));
    for (int k = 0; k < p; k++)
        for (int i = 0; i < cnt[k]; i++) {
            CHECK(ag[dsp[k] + i] == 1000L * k + i + r, "m=%d round %d: Iallgatherv[%d][%d] gave %ld", m, r, k, i,
                  ag[dsp[k] + i]);
            CHECK(a2a[dsp[k] + i] == 100000L * k + 100L * g_rank + i + r, "m=%d round %d: Ialltoallv[%d][%d] gave %ld",
                  m, r, k, i, a2a[dsp[k] + i]);
            CHECK(g_rank != root || ga[dsp[k] + i] == 1000L * k + i + r, "m=%d round %d: Igatherv[%d][%d]", m, r, k,
                  i);
        }
    for (int i = 0; i < own; i++)
        CHECK(sc[i] == 3L * (dsp[g_rank] + i) + r, "m=%d round %d: Iscatterv[%d] gave %ld", m, r, i, sc[i]);
    free(b), free(cnt);
}

/* Whether `name` ran with one copy on the segment (SHIM_STATS). */
static int single_copy(const char *name) {
    int (*paths)(const char *, char *, size_t) =
        (int (*)(const char *, char *, size_t))dlsym(RTLD_DEFAULT, "shim_function_paths");
    char buf[512] = "";
    if (!paths || paths(name, buf, sizeof buf) < 0) return 0;
    return strstr(buf, "shm:single-copy") != NULL;
}

int main(int argc, char **argv) {
    test_init(&argc, &argv);
    int rounds = argc > 1 ? atoi(argv[1]) : 20;
    if (g_size >= 2) locality(rounds);
    mixed(rounds);
    MPI_Comm comm;
    MPI_OK(MPI_Comm_dup(MPI_COMM_WORLD, &comm));
    for (int r = 0; r < rounds; r++)
        for (int n = 1; n <= 64; n *= 4) every(comm, n, r);
    MPI_OK(MPI_Comm_free(&comm));
    persistent_only(rounds);
    /* the same failed initialization on a communicator whose blocking calls set its segment up */
    MPI_OK(MPI_Comm_dup(MPI_COMM_WORLD, &comm));
    for (int i = 0; i < 8; i++) {
        long one = 1, all = 0;
        MPI_OK(MPI_Allreduce(&one, &all, 1, MPI_LONG, MPI_SUM, comm));
        CHECK(all == g_size, "Allreduce gave %ld", all);
    }
    failed_init_repeated(comm, getenv("CTEST_PERSISTENT_STARTS") ? persistent_starts() : rounds);
    MPI_OK(MPI_Comm_free(&comm));
    /* 5: beyond the slot, non-blocking calls only */
    MPI_OK(MPI_Comm_dup(MPI_COMM_WORLD, &comm));
    for (int r = 0; r < 6; r++) {
        every(comm, r % 2 ? 1 : BIG, r);
        every_v(comm, r % 2 ? 1 : BIG / 2, r);
    }
    MPI_OK(MPI_Comm_free(&comm));
    const char *e = getenv("EXPECT_SEGMENT");
    const char *es = getenv("EXPECT_SINGLE");
    if (es && strcmp(es, "1") == 0 && g_size >= 2) {
        CHECK(on_segment("MPI_Iallgatherv"), "no MPI_Iallgatherv ran on the segment");
        CHECK(on_segment("MPI_Ialltoallv"), "no MPI_Ialltoallv ran on the segment");
        CHECK(single_copy("MPI_Iallreduce"), "no MPI_Iallreduce ran with one copy");
        CHECK(single_copy("MPI_Ibcast"), "no MPI_Ibcast ran with one copy");
    }
    if (e && strcmp(e, "1") == 0 && g_size >= 2) {
        CHECK(on_segment("MPI_Iallreduce"), "no MPI_Iallreduce ran on the segment");
        CHECK(on_segment("MPI_Ibcast"), "no MPI_Ibcast ran on the segment");
        CHECK(on_segment("MPI_Bcast_init"), "no MPI_Bcast_init ran on the segment");
        CHECK(on_segment("MPI_Reduce_init"), "no MPI_Reduce_init ran on the segment");
    }
    if (e && strcmp(e, "0") == 0) {
        static const char *const names[] = {
            "MPI_Iallreduce", "MPI_Ibcast",  "MPI_Ireduce",     "MPI_Iallgather",  "MPI_Ialltoall",
            "MPI_Igather",    "MPI_Iscatter", "MPI_Iscan",      "MPI_Ibarrier",    "MPI_Iallgatherv",
            "MPI_Ialltoallv", "MPI_Igatherv", "MPI_Iscatterv",  "MPI_Bcast_init",  "MPI_Reduce_init",
            "MPI_Allreduce"};
        for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
            CHECK(!on_segment(names[i]), "%s noted on the segment, which was never set up", names[i]);
    }
    test_pass("nb_setup");
    MPI_Finalize();
    return 0;
}

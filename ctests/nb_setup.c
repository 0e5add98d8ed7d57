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
 * With EXPECT_SEGMENT=1 (SHIM_STATS=1, the node transport on): Iallreduce and Ibcast on the
 * communicators that make no blocking collective before must have run on the segment.
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
    const char *e = getenv("EXPECT_SEGMENT");
    if (e && strcmp(e, "1") == 0 && g_size >= 2) {
        CHECK(on_segment("MPI_Iallreduce"), "no MPI_Iallreduce ran on the segment");
        CHECK(on_segment("MPI_Ibcast"), "no MPI_Ibcast ran on the segment");
    }
    test_pass("nb_setup");
    MPI_Finalize();
    return 0;
}

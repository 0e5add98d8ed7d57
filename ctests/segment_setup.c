/* Where a communicator's shared-memory segment is set up and how its channels are handed
 * out besides its blocking collectives that take it (issue 34).
 * 1. A communicator that makes persistent and non-blocking collectives and no blocking one
 *    (a persistent initialization does not set the segment up, README, "Where the segment
 *    is set up"; since stop 67 its non-blocking calls do, without waiting, and the
 *    initializations made while that may go on wait for it). Non-blocking calls come
 *    before the initializations and between the starts.
 * 2. A communicator whose blocking Gathers of BYTES (argument) per rank all go to the
 *    library (a tuning row says so) and whose Igathers would take the segment: the blocking
 *    calls count towards the set-up once an Igather was made. Rank 0 alternates two buffers
 *    (the shim's memo never holds its blocking call) while the others repeat one (theirs
 *    does, until the first Igather empties it): every rank must count alike, or one sets up
 *    alone and hangs.
 * 3. On a communicator whose blocking calls set the segment up, persistent collectives
 *    initialized and freed in turn, more than the segment has channels (SHIM_SHM_CHANNELS,
 *    default 4), after more live at once than it has: each gets one, a freed request's
 *    channel being reused once every rank freed it; before, the first 4 took them for good.
 * Every result is checked. With EXPECT_SEGMENT=1 (a run with SHIM_STATS=1 and the segment
 * on), some Igather's path must name the segment, and every Reduce_init's and
 * Allgather_init's must be it.
 * Usage: segment_setup [rounds [bytes]] */
#include "common.h"

static void nb_round(MPI_Comm comm, int round) {
    /* (Iallreduce and Ibcast of one long) */
    long in = round + g_rank, out = -1, bc = g_rank == 0 ? 5L * round : -1;
    MPI_Request req[2];
    MPI_OK(MPI_Iallreduce(&in, &out, 1, MPI_LONG, MPI_SUM, comm, &req[0]));
    MPI_OK(MPI_Ibcast(&bc, 1, MPI_LONG, 0, comm, &req[1]));
    MPI_OK(MPI_Waitall(2, req, MPI_STATUSES_IGNORE));
    CHECK(out == (long)g_size * round + (long)g_size * (g_size - 1) / 2, "round %d: Iallreduce gave %ld",
          round, out);
    CHECK(bc == 5L * round, "round %d: Ibcast gave %ld", round, bc);
}

/* Whether every schedule SHIM_STATS recorded for `name` ran on the segment. */
static int only_segment(const char *name) {
    int (*paths)(const char *, char *, size_t) =
        (int (*)(const char *, char *, size_t))dlsym(RTLD_DEFAULT, "shim_function_paths");
    char buf[512] = "";
    if (!paths || paths(name, buf, sizeof buf) < 0 || !strstr(buf, "schedule:")) return 0;
    for (char *t = strtok(buf, ","); t; t = strtok(NULL, ","))
        if (strncmp(t, "schedule:", 9) == 0 && strncmp(t, "schedule:shm", 12) != 0) return 0;
    return 1;
}

/* Persistent collectives initialized and freed in turn, more than the segment has
 * channels (SHIM_SHM_CHANNELS, default 4), after more live at once than it has: a freed
 * request's channel is reused once every rank has freed it (the ranks agree at an
 * initialization that finds none left). */
static void channel_cycles(MPI_Comm comm, int cycles) {
    enum { LIVE = 6 };
    long in[LIVE], out[LIVE];
    MPI_Request q[LIVE];
    for (int k = 0; k < LIVE; k++) {
        in[k] = g_rank + k;
        MPI_OK(MPI_Scan_init(&in[k], &out[k], 1, MPI_LONG, MPI_SUM, comm, MPI_INFO_NULL, &q[k]));
    }
    MPI_OK(MPI_Startall(LIVE, q));
    MPI_OK(MPI_Waitall(LIVE, q, MPI_STATUSES_IGNORE));
    for (int k = 0; k < LIVE; k++) {
        long want = (long)g_rank * (g_rank + 1) / 2 + (long)(g_rank + 1) * k;
        CHECK(out[k] == want, "Scan_init %d gave %ld, not %ld", k, out[k], want);
        MPI_OK(MPI_Request_free(&q[k]));
    }
    for (int c = 0; c < cycles; c++) {
        long v = c + g_rank, sum = -1, all[64];
        CHECK(g_size <= 64, "at most 64 ranks");
        MPI_Request p[2];
        MPI_OK(MPI_Reduce_init(&v, &sum, 1, MPI_LONG, MPI_SUM, 0, comm, MPI_INFO_NULL, &p[0]));
        MPI_OK(MPI_Allgather_init(&v, 1, MPI_LONG, all, 1, MPI_LONG, comm, MPI_INFO_NULL, &p[1]));
        int starts = getenv("CTEST_PERSISTENT_STARTS") ? persistent_starts() : 3;
        for (int s = 0; s < starts; s++) {
            v = 10L * c + s + g_rank;
            MPI_OK(MPI_Startall(2, p));
            MPI_OK(MPI_Waitall(2, p, MPI_STATUSES_IGNORE));
            long want = (10L * c + s) * g_size + (long)g_size * (g_size - 1) / 2;
            CHECK(g_rank != 0 || sum == want, "cycle %d: Reduce_init gave %ld, not %ld", c, sum, want);
            for (int r = 0; r < g_size; r++)
                CHECK(all[r] == 10L * c + s + r, "cycle %d: Allgather_init block %d gave %ld", c, r, all[r]);
        }
        /* rank 0 frees in the other order */
        MPI_OK(MPI_Request_free(&p[g_rank == 0 ? 1 : 0]));
        MPI_OK(MPI_Request_free(&p[g_rank == 0 ? 0 : 1]));
    }
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_size);
    int rounds = argc > 1 ? atoi(argv[1]) : 40;
    int bytes = argc > 2 ? atoi(argv[2]) : 4096;
    MPI_Comm comm;
    MPI_OK(MPI_Comm_dup(MPI_COMM_WORLD, &comm));
    for (int r = 0; r < 7; r++) nb_round(comm, r);
    long in[3], sum[3], bc[2];
    MPI_Request p[3];
    MPI_OK(MPI_Allreduce_init(in, sum, 3, MPI_LONG, MPI_SUM, comm, MPI_INFO_NULL, &p[0]));
    MPI_OK(MPI_Bcast_init(bc, 2, MPI_LONG, g_size - 1, comm, MPI_INFO_NULL, &p[1]));
    MPI_OK(MPI_Barrier_init(comm, MPI_INFO_NULL, &p[2]));
    /* (CTEST_PERSISTENT_STARTS: the system MPI's may not restart, see common.h) */
    int starts = getenv("CTEST_PERSISTENT_STARTS") ? persistent_starts() : rounds;
    for (int r = 0; r < starts; r++) {
        for (int k = 0; k < 3; k++) in[k] = (long)r * (k + 1) + g_rank, sum[k] = -1;
        bc[0] = g_rank == g_size - 1 ? 3L * r : -1;
        bc[1] = g_rank == g_size - 1 ? -r : 1;
        MPI_OK(MPI_Startall(3, p));
        MPI_OK(MPI_Waitall(3, p, MPI_STATUSES_IGNORE));
        for (int k = 0; k < 3; k++) {
            long want = (long)g_size * r * (k + 1) + (long)g_size * (g_size - 1) / 2;
            CHECK(sum[k] == want, "round %d: Allreduce_init element %d gave %ld, not %ld", r, k, sum[k], want);
        }
        CHECK(bc[0] == 3L * r && bc[1] == -r, "round %d: Bcast_init gave %ld %ld", r, bc[0], bc[1]);
        nb_round(comm, 7 + r);
    }
    for (int k = 0; k < 3; k++) MPI_OK(MPI_Request_free(&p[k]));
    MPI_OK(MPI_Comm_free(&comm));

    MPI_OK(MPI_Comm_dup(MPI_COMM_WORLD, &comm));
    int n = bytes / (int)sizeof(long);
    long *mine[2] = {malloc(bytes), malloc(bytes)}, *all = malloc((size_t)bytes * g_size);
    CHECK(mine[0] && mine[1] && all, "no memory");
    for (int r = 0; r < rounds; r++) {
        long *b = mine[g_rank == 0 ? r % 2 : 0];
        for (int i = 0; i < n; i++) b[i] = 11L * r + i + 1000L * g_rank;
        MPI_OK(MPI_Gather(b, n, MPI_LONG, all, n, MPI_LONG, 0, comm));
        for (int k = 0; g_rank == 0 && k < g_size * n; k++)
            CHECK(all[k] == 11L * r + k % n + 1000L * (k / n), "round %d: Gather element %d gave %ld", r, k, all[k]);
        if (r < 2) continue; /* blocking calls remembered before the first Igather */
        MPI_Request q;
        for (int i = 0; i < n; i++) b[i] = -7L * r - i - 1000L * g_rank;
        MPI_OK(MPI_Igather(b, n, MPI_LONG, all, n, MPI_LONG, 0, comm, &q));
        MPI_OK(MPI_Wait(&q, MPI_STATUS_IGNORE));
        for (int k = 0; g_rank == 0 && k < g_size * n; k++)
            CHECK(all[k] == -7L * r - k % n - 1000L * (k / n), "round %d: Igather element %d gave %ld", r, k, all[k]);
    }
    free(mine[0]), free(mine[1]), free(all);
    MPI_OK(MPI_Comm_free(&comm));
    MPI_OK(MPI_Comm_dup(MPI_COMM_WORLD, &comm));
    for (int i = 0; i < 6; i++) {
        long v = g_rank, t = -1;
        MPI_OK(MPI_Allreduce(&v, &t, 1, MPI_LONG, MPI_SUM, comm));
        CHECK(t == (long)g_size * (g_size - 1) / 2, "Allreduce gave %ld", t);
    }
    channel_cycles(comm, getenv("CTEST_PERSISTENT_STARTS") ? 1 : 10);
    MPI_OK(MPI_Comm_free(&comm));
    const char *e = getenv("EXPECT_SEGMENT");
    if (e && strcmp(e, "1") == 0) {
        CHECK(on_segment("MPI_Igather"), "no MPI_Igather ran on the segment");
        CHECK(only_segment("MPI_Reduce_init"), "a MPI_Reduce_init did not run on the segment");
        CHECK(only_segment("MPI_Allgather_init"), "a MPI_Allgather_init did not run on the segment");
    }
    if (g_rank == 0) printf("PASS segment_setup (%d ranks, %d rounds)\n", g_size, rounds);
    MPI_Finalize();
    return 0;
}

/* Where a communicator's shared-memory segment is set up besides its blocking collectives
 * that take it (issue 34); before, only those did, and a communicator without them kept the
 * point-to-point path for good.
 * 1. A communicator that makes persistent and non-blocking collectives and no blocking one:
 *    the initialization of a persistent collective is non-local and ordered like a
 *    collective (MPI-4.0 §6.13), so the segment is set up there. Non-blocking calls come
 *    before the initializations (the segment's first non-blocking instance is their count at
 *    the set-up) and between the starts.
 * 2. A communicator whose blocking Gathers of BYTES (argument) per rank all go to the
 *    library (a tuning row says so) and whose Igathers would take the segment: the blocking
 *    calls count towards the set-up once an Igather was made. Rank 0 alternates two buffers
 *    (the shim's memo never holds its blocking call) while the others repeat one (theirs
 *    does, until the first Igather empties it): every rank must count alike, or one sets up
 *    alone and hangs.
 * Every result is checked. With EXPECT_SEGMENT=1 (a run with SHIM_STATS=1 and the segment
 * on), the persistent calls' and the Igathers' paths must name it.
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

/* Whether the paths SHIM_STATS recorded for `name` include the segment's. */
static int on_segment(const char *name) {
    int (*paths)(const char *, char *, size_t) =
        (int (*)(const char *, char *, size_t))dlsym(RTLD_DEFAULT, "shim_function_paths");
    char buf[512] = "";
    if (!paths || paths(name, buf, sizeof buf) < 0) return 0;
    return strstr(buf, "schedule:shm") != NULL;
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
    const char *e = getenv("EXPECT_SEGMENT");
    if (e && strcmp(e, "1") == 0) {
        CHECK(on_segment("MPI_Allreduce_init"), "MPI_Allreduce_init did not run on the segment");
        CHECK(on_segment("MPI_Bcast_init"), "MPI_Bcast_init did not run on the segment");
        CHECK(on_segment("MPI_Igather"), "no MPI_Igather ran on the segment");
    }
    if (g_rank == 0) printf("PASS segment_setup (%d ranks, %d rounds)\n", g_size, rounds);
    MPI_Finalize();
    return 0;
}

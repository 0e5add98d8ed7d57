/* Non-blocking collectives before a communicator's shared-memory segment exists, remembered
 * on some ranks only (issue 34). Every rank counts the non-blocking calls that could have
 * used the segment, and the segment's first non-blocking instance is the count at its set-up
 * (the largest any rank reports), so every rank must count every such call, including
 * those the shim's per-thread memo sends to the library at once. Here rank 0 alternates
 * two buffers (its memo never holds the call it makes) while the others repeat one (theirs
 * always does); then blocking calls set the segment up (SHIM_SHM_AFTER below their count),
 * and the non-blocking calls after it must all run on the same path on every rank: a rank
 * that counted fewer would take the library's path while the others wait in the segment
 * (a hang, which the test's timeout turns into a failure) or read a wrong value.
 * Usage: nb_count [rounds] */
#include "common.h"

static void round_of(MPI_Comm comm, int round, int alternate) {
    static long in[2][3], out[2][3], bc[2];
    int n = g_size, w = alternate ? round % 2 : 0;
    MPI_Request req[3];
    in[w][0] = round + g_rank;
    bc[w] = g_rank == 0 ? 7L * round : -1;
    MPI_OK(MPI_Iallreduce(in[w], out[w], 1, MPI_LONG, MPI_SUM, comm, &req[0]));
    MPI_OK(MPI_Ibcast(&bc[w], 1, MPI_LONG, 0, comm, &req[1]));
    MPI_OK(MPI_Ibarrier(comm, &req[2]));
    MPI_OK(MPI_Waitall(3, req, MPI_STATUSES_IGNORE));
    CHECK(out[w][0] == (long)n * round + (long)n * (n - 1) / 2, "round %d: Iallreduce gave %ld",
          round, out[w][0]);
    CHECK(bc[w] == 7L * round, "round %d: Ibcast gave %ld", round, bc[w]);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_size);
    int rounds = argc > 1 ? atoi(argv[1]) : 50;
    MPI_Comm comm;
    MPI_OK(MPI_Comm_dup(MPI_COMM_WORLD, &comm));
    /* before the segment: rank 0's calls miss the memo, the others' hit it */
    for (int r = 0; r < rounds; r++) round_of(comm, r, g_rank == 0);
    /* blocking calls that set it up */
    long v = g_rank, s = 0;
    for (int i = 0; i < 6; i++) MPI_OK(MPI_Allreduce(&v, &s, 1, MPI_LONG, MPI_SUM, comm));
    CHECK(s == (long)g_size * (g_size - 1) / 2, "Allreduce gave %ld", s);
    /* on it: the same calls, remembered (the shared-memory lane) on every rank */
    for (int r = 0; r < rounds; r++) round_of(comm, rounds + r, g_rank == 0);
    for (int r = 0; r < rounds; r++) round_of(comm, 2 * rounds + r, 0);
    MPI_OK(MPI_Comm_free(&comm));
    if (g_rank == 0) printf("PASS nb_count (%d ranks, %d rounds)\n", g_size, rounds);
    MPI_Finalize();
    return 0;
}

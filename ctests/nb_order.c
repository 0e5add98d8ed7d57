/* Non-blocking collectives completed out of order on one communicator (issue 34): each
 * round starts K collectives (Ibcast from rotating roots, Iallreduce, Igather, Iscatter,
 * Ibarrier) and completes them in reverse, in a random order through MPI_Waitany, or all at
 * once, then checks every result. On the shared-memory transport (SHIM_TRANSPORT=shm,
 * SHIM_SHM_AFTER=0) a rank acknowledges the instances of the non-blocking channel in order,
 * holding back one that ends before an earlier one; with SHIM_SHM_DEPTH=2 most of the K
 * collectives must wait for regions that earlier ones still hold. A lost or early
 * acknowledgement shows here as a wrong value (a slot overwritten while a rank still reads
 * it) or a hang. */
#include "common.h"

#define K 7

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_size);
    int n = g_size, rounds = argc > 1 ? atoi(argv[1]) : 40;
    MPI_Comm comm;
    MPI_OK(MPI_Comm_dup(MPI_COMM_WORLD, &comm));
    for (int i = 0; i < 6; i++) MPI_OK(MPI_Barrier(comm)); /* past SHIM_SHM_AFTER */
    long bc[K], red[K], sum[K];
    long *gat = malloc(sizeof(long) * n * K), *sca = malloc(sizeof(long) * n * K);
    long got[K];
    MPI_Request req[K];
    for (int round = 0; round < rounds; round++) {
        for (int k = 0; k < K; k++) {
            int root = (round + k) % n;
            long v = 1000L * round + k;
            switch (k % 5) {
            case 0:
                bc[k] = g_rank == root ? v : -1;
                MPI_OK(MPI_Ibcast(&bc[k], 1, MPI_LONG, root, comm, &req[k]));
                break;
            case 1:
                red[k] = v + g_rank;
                MPI_OK(MPI_Iallreduce(&red[k], &sum[k], 1, MPI_LONG, MPI_SUM, comm, &req[k]));
                break;
            case 2:
                red[k] = v + 7 * g_rank;
                MPI_OK(MPI_Igather(&red[k], 1, MPI_LONG, gat + (long)k * n, 1, MPI_LONG, root,
                                   comm, &req[k]));
                break;
            case 3:
                for (int r = 0; r < n; r++) sca[(long)k * n + r] = v + 3 * r;
                MPI_OK(MPI_Iscatter(sca + (long)k * n, 1, MPI_LONG, &got[k], 1, MPI_LONG, root,
                                    comm, &req[k]));
                break;
            default:
                MPI_OK(MPI_Ibarrier(comm, &req[k]));
            }
        }
        switch (round % 3) {
        case 0:
            for (int k = K - 1; k >= 0; k--) MPI_OK(MPI_Wait(&req[k], MPI_STATUS_IGNORE));
            break;
        case 1:
            for (int left = K; left > 0; left--) {
                int idx;
                MPI_OK(MPI_Waitany(K, req, &idx, MPI_STATUS_IGNORE));
            }
            break;
        default:
            MPI_OK(MPI_Waitall(K, req, MPI_STATUSES_IGNORE));
        }
        for (int k = 0; k < K; k++) {
            int root = (round + k) % n;
            long v = 1000L * round + k;
            switch (k % 5) {
            case 0: CHECK(bc[k] == v, "round %d Ibcast %d: %ld, want %ld", round, k, bc[k], v); break;
            case 1: {
                long want = n * v + (long)n * (n - 1) / 2;
                CHECK(sum[k] == want, "round %d Iallreduce %d: %ld, want %ld", round, k, sum[k], want);
                break;
            }
            case 2:
                if (g_rank == root)
                    for (int r = 0; r < n; r++)
                        CHECK(gat[(long)k * n + r] == v + 7 * r, "round %d Igather %d from %d: %ld",
                              round, k, r, gat[(long)k * n + r]);
                break;
            case 3:
                CHECK(got[k] == v + 3 * g_rank, "round %d Iscatter %d: %ld, want %ld", round, k,
                      got[k], v + 3 * g_rank);
                break;
            }
        }
    }
    MPI_OK(MPI_Comm_free(&comm));
    free(gat);
    free(sca);
    test_pass("nb_order");
    MPI_Finalize();
    return 0;
}

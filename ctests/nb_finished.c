/* Requests of non-blocking collectives through every completion call (MPI-4.0 §3.7.3-§3.7.5,
 * §6.12), after the communicator's shared-memory segment is set up, where a repeated call
 * often finishes inside the call itself (issue 34: the shim then hands out a request that
 * names a finished collective, with nothing kept). Whatever path a request took, each call
 * must complete it: MPI_Wait, MPI_Test and the any/all/some forms set it to
 * MPI_REQUEST_NULL, MPI_Request_get_status leaves it as it is, requests outstanding at once
 * are distinct handles, a Fortran integer names the same request, and a request mixed with
 * the library's own completes with it. Every round checks the data of an Ibcast from
 * rotating roots and of an Iallreduce, with an Ibarrier beside them.
 * Usage: nb_finished [rounds] */
#include "common.h"

#define K 3

static long bc, in, out;

/* Starts an Ibcast from root r % size, an Iallreduce and an Ibarrier on comm for round r,
 * with the same buffers every round (so that repeated calls take the shim's lane). */
static void start(MPI_Comm comm, int r, MPI_Request *req) {
    int root = r % g_size;
    bc = g_rank == root ? 1000L * r : -1;
    in = r + g_rank;
    out = -1;
    MPI_OK(MPI_Ibcast(&bc, 1, MPI_LONG, root, comm, &req[0]));
    MPI_OK(MPI_Iallreduce(&in, &out, 1, MPI_LONG, MPI_SUM, comm, &req[1]));
    MPI_OK(MPI_Ibarrier(comm, &req[2]));
    for (int i = 0; i < K; i++)
        for (int j = i + 1; j < K; j++)
            CHECK(req[i] != req[j], "round %d: requests %d and %d are the same handle", r, i, j);
}

/* The result of request k of round r, once complete. */
static void check(int r, int k) {
    long n = g_size;
    if (k == 0) CHECK(bc == 1000L * r, "round %d: Ibcast gave %ld", r, bc);
    if (k == 1)
        CHECK(out == n * r + n * (n - 1) / 2, "round %d: Iallreduce gave %ld", r, out);
}

static void all_null(const MPI_Request *req, int n, int r, const char *how) {
    for (int k = 0; k < n; k++)
        CHECK(req[k] == MPI_REQUEST_NULL, "round %d: %s left request %d set", r, how, k);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_size);
    int rounds = argc > 1 ? atoi(argv[1]) : 40;
    MPI_Comm comm;
    MPI_OK(MPI_Comm_dup(MPI_COMM_WORLD, &comm));
    long v = g_rank, s = 0;
    for (int i = 0; i < 8; i++) MPI_OK(MPI_Allreduce(&v, &s, 1, MPI_LONG, MPI_SUM, comm));
    MPI_Request req[K + 1];
    MPI_Status st[K + 1];
    int idx[K + 1];
    for (int r = 0; r < rounds; r++) {
        int how = r % 8, flag = 0, done = 0, cnt = 0;
        start(comm, r, req);
        switch (how) {
        case 0: /* MPI_Wait, with and without a status */
            for (int k = 0; k < K; k++) {
                MPI_OK(MPI_Wait(&req[k], k % 2 ? &st[0] : MPI_STATUS_IGNORE));
                check(r, k);
            }
            break;
        case 1: /* MPI_Test until done */
            for (int k = 0; k < K; k++) {
                do MPI_OK(MPI_Test(&req[k], &flag, MPI_STATUS_IGNORE));
                while (!flag);
                check(r, k);
            }
            break;
        case 2: /* MPI_Waitall with one of the library's own requests among them */
            MPI_OK(MPI_Irecv(&s, 1, MPI_LONG, MPI_PROC_NULL, 0, comm, &req[K]));
            MPI_OK(MPI_Waitall(K + 1, req, st));
            for (int k = 0; k < K; k++) check(r, k);
            all_null(req, K + 1, r, "MPI_Waitall");
            break;
        case 3: /* MPI_Waitany until MPI_UNDEFINED */
            while (1) {
                int i;
                MPI_OK(MPI_Waitany(K, req, &i, MPI_STATUS_IGNORE));
                if (i == MPI_UNDEFINED) break;
                CHECK(i >= 0 && i < K && req[i] == MPI_REQUEST_NULL, "round %d: Waitany gave %d",
                      r, i);
                check(r, i);
                done++;
            }
            CHECK(done == K, "round %d: Waitany completed %d of %d", r, done, K);
            break;
        case 4: /* MPI_Waitsome and MPI_Testsome */
            while (done < K) {
                if (done % 2)
                    MPI_OK(MPI_Testsome(K, req, &cnt, idx, st));
                else
                    MPI_OK(MPI_Waitsome(K, req, &cnt, idx, st));
                CHECK(cnt != MPI_UNDEFINED, "round %d: nothing was active", r);
                for (int j = 0; j < cnt; j++) check(r, idx[j]);
                done += cnt;
            }
            all_null(req, K, r, "MPI_Waitsome");
            break;
        case 5: /* MPI_Testall and MPI_Testany */
            do MPI_OK(MPI_Testany(K, req, &idx[0], &flag, MPI_STATUS_IGNORE));
            while (!flag);
            CHECK(idx[0] >= 0 && idx[0] < K, "round %d: Testany gave %d", r, idx[0]);
            do MPI_OK(MPI_Testall(K, req, &flag, MPI_STATUSES_IGNORE));
            while (!flag);
            for (int k = 0; k < K; k++) check(r, k);
            all_null(req, K, r, "MPI_Testall");
            break;
        case 6: /* MPI_Request_get_status leaves the request to a later wait */
            for (int k = 0; k < K; k++) {
                MPI_Request keep = req[k];
                do MPI_OK(MPI_Request_get_status(req[k], &flag, MPI_STATUS_IGNORE));
                while (!flag);
                CHECK(req[k] == keep, "round %d: get_status changed request %d", r, k);
                check(r, k);
                MPI_OK(MPI_Wait(&req[k], MPI_STATUS_IGNORE));
            }
            all_null(req, K, r, "MPI_Wait after MPI_Request_get_status");
            break;
        default: /* through Fortran integers (the standard ABI's integers) and back */
            for (int k = 0; k < K; k++) {
#ifdef MPI_ABI_VERSION
                MPI_Request back = MPI_Request_fromint(MPI_Request_toint(req[k]));
#else
                MPI_Request back = MPI_Request_f2c(MPI_Request_c2f(req[k]));
#endif
                CHECK(back == req[k], "round %d: c2f/f2c changed request %d", r, k);
                MPI_OK(MPI_Wait(&back, MPI_STATUS_IGNORE));
                CHECK(back == MPI_REQUEST_NULL, "round %d: the wait left request %d set", r, k);
                check(r, k);
            }
            break;
        }
    }
    MPI_OK(MPI_Comm_free(&comm));
    if (g_rank == 0) printf("PASS nb_finished (%d ranks, %d rounds)\n", g_size, rounds);
    MPI_Finalize();
    return 0;
}

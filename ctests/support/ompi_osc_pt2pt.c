/* Open MPI 4.1's osc/pt2pt on the ghost layer's access pattern, without the shim.
 *
 * The last two ranks play ghosts: they attach memory to a dynamic window and sit in an
 * MPI_Iprobe loop (with short naps) until every other rank, a "user", says it is done. Each
 * user then runs one of these sequences on that window, 20 times:
 *   bug-flush-local  lock_all; Get from both targets; flush_local each; unlock_all
 *   bug-unlock       lock(A); lock(B); Get from B; unlock(A); unlock(B)
 *   workaround       both sequences as the shim's Open MPI build issues them: full flushes
 *                    instead of local ones, and every lock flushed before the first unlock
 *                    (src/services/ghost/win.rs, FULL_FLUSH_ONLY and FLUSH_BEFORE_UNLOCK)
 * With Debian's Open MPI 4.1.4 (`--mca osc pt2pt`) both bug-* modes hang at 3 and 4 ranks
 * (the first at the flush_local, the second at unlock(A)); `workaround` passes and is what
 * scripts/ompi-tests runs, so that a change of Open MPI that breaks the workaround shows.
 * Usage: ompi_osc_pt2pt [workaround|bug-flush-local|bug-unlock] */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { ITERS = 20, GHOSTS = 2, DONE_TAG = 99 };

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    const char *mode = argc > 1 ? argv[1] : "workaround";
    int fix = !strcmp(mode, "workaround");
    int users = size - GHOSTS, ghost = rank >= users;
    if (users < 1) {
        if (rank == 0) fprintf(stderr, "ompi_osc_pt2pt: needs at least 3 ranks\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    MPI_Win w;
    MPI_Win_create_dynamic(MPI_INFO_NULL, MPI_COMM_WORLD, &w);
    long *mem = NULL;
    MPI_Aint addr = 0, *addrs = malloc(sizeof(MPI_Aint) * size);
    if (ghost) {
        mem = calloc(64, sizeof(long));
        MPI_Win_attach(w, mem, 64 * sizeof(long));
        MPI_Get_address(mem, &addr);
    }
    MPI_Allgather(&addr, 1, MPI_AINT, addrs, 1, MPI_AINT, MPI_COMM_WORLD);
    if (ghost) {
        struct timespec nap = {0, 20000};
        for (int stops = 0; stops < users;) {
            int flag;
            MPI_Status st;
            MPI_Iprobe(MPI_ANY_SOURCE, DONE_TAG, MPI_COMM_WORLD, &flag, &st);
            if (flag) {
                MPI_Recv(NULL, 0, MPI_INT, st.MPI_SOURCE, DONE_TAG, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                stops++;
            } else {
                nanosleep(&nap, NULL);
            }
        }
    } else {
        int A = users, B = users + 1;
        long got[2];
        for (int it = 0; it < ITERS; it++) {
            if (fix || !strcmp(mode, "bug-flush-local")) {
                MPI_Win_lock_all(0, w);
                MPI_Get(&got[0], 1, MPI_LONG, A, addrs[A], 1, MPI_LONG, w);
                MPI_Get(&got[1], 1, MPI_LONG, B, addrs[B], 1, MPI_LONG, w);
                for (int t = A; t <= B; t++) fix ? MPI_Win_flush(t, w) : MPI_Win_flush_local(t, w);
                if (fix) MPI_Win_flush(A, w), MPI_Win_flush(B, w);
                MPI_Win_unlock_all(w);
            }
            if (fix || !strcmp(mode, "bug-unlock")) {
                MPI_Win_lock(MPI_LOCK_SHARED, A, 0, w);
                MPI_Win_lock(MPI_LOCK_SHARED, B, 0, w);
                MPI_Get(&got[1], 1, MPI_LONG, B, addrs[B], 1, MPI_LONG, w);
                if (fix) MPI_Win_flush(A, w), MPI_Win_flush(B, w);
                MPI_Win_unlock(A, w);
                MPI_Win_unlock(B, w);
            }
        }
        for (int g = A; g <= B; g++) MPI_Send(NULL, 0, MPI_INT, g, DONE_TAG, MPI_COMM_WORLD);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (ghost) MPI_Win_detach(w, mem);
    MPI_Win_free(&w);
    if (rank == 0) printf("PASS ompi_osc_pt2pt %s (%d ranks)\n", mode, size);
    free(mem), free(addrs);
    MPI_Finalize();
    return 0;
}

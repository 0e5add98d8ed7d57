/* Non-blocking collectives advance while one rank computes without calling MPI (MPI-4.0
 * §3.7.4's progress rule, "strong" form): rank 0 starts each collective, then computes for
 * COMPUTE_MS (default 20; a sleep: no MPI call, no processor taken) before its MPI_Wait; the other ranks
 * wait at once and time their wait. Each collective needs rank 0's progress after its start
 * (a 1 MiB message to or from rank 0, or a second round), so without something advancing it
 * in the background the others wait until rank 0 stops computing.
 *
 * argv[1]: the count of doubles (default 16384: 128 KiB; scripts/tests/progress-tests runs
 * 1 MiB and 200 ms).
 *
 * Every run checks the results. With LIBRARY_PROGRESS_STRICT=1 the waits must also end
 * before rank 0 stops computing (less than half of COMPUTE_MS): that is what the shim's
 * SHIM_PROGRESS=library gives under MPICH 5 with MPICH's own progress thread
 * (MPIR_CVAR_ASYNC_PROGRESS=1), and SHIM_PROGRESS=thread with its own. With
 * LIBRARY_PROGRESS_STRICT=0 one of the waits at least must last about the whole computation
 * (the test's own control: nothing advances rank 0's part; a library that pulls a large
 * message from its sender's memory completes the others without it). */
#include <time.h>

#include "common.h"


static double now(void) { return MPI_Wtime(); }

static void compute(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0) {
    }
}

int main(int argc, char **argv) {
    int provided;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_size);
    const char *s = getenv("LIBRARY_PROGRESS_STRICT");
    int strict = s ? atoi(s) : -1;
    const char *c = getenv("COMPUTE_MS");
    int ms = c ? atoi(c) : 20;
    int N = argc > 1 ? atoi(argv[1]) : 16 * 1024;
    double *a = malloc(sizeof(double) * N), *b = malloc(sizeof(double) * N);
    const char *names[] = {"MPI_Iallreduce", "MPI_Ibcast", "MPI_Ireduce"};
    double worst[3] = {0, 0, 0};
    for (int k = 0; k < 3; k++) {
        for (int i = 0; i < N; i++) a[i] = g_rank + i % 7 + k, b[i] = -1;
        MPI_Request r;
        MPI_OK(MPI_Barrier(MPI_COMM_WORLD));
        double t0 = now();
        if (k == 0) MPI_OK(MPI_Iallreduce(a, b, N, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD, &r));
        if (k == 1) MPI_OK(MPI_Ibcast(a, N, MPI_DOUBLE, 0, MPI_COMM_WORLD, &r));
        if (k == 2) MPI_OK(MPI_Ireduce(a, b, N, MPI_DOUBLE, MPI_SUM, 1 % g_size, MPI_COMM_WORLD, &r));
        if (g_rank == 0) compute(ms);
        MPI_OK(MPI_Wait(&r, MPI_STATUS_IGNORE));
        double waited = (now() - t0) * 1e3;
        for (int i = 0; i < N; i += 997) {
            double base = i % 7 + k, sum = g_size * base + g_size * (g_size - 1) / 2.0;
            if (k == 0) CHECK(b[i] == sum, "%s: element %d is %g, not %g", names[k], i, b[i], sum);
            if (k == 1) CHECK(a[i] == base, "%s: element %d is %g, not %g", names[k], i, a[i], base);
            if (k == 2 && g_rank == 1 % g_size)
                CHECK(b[i] == sum, "%s: element %d is %g, not %g", names[k], i, b[i], sum);
        }
        MPI_OK(MPI_Reduce(g_rank ? &waited : (double[]){0}, &worst[k], 1, MPI_DOUBLE, MPI_MAX, 0,
                          MPI_COMM_WORLD));
        if (g_rank == 0 && g_size > 1) {
            printf("%s: the other ranks waited up to %.1f ms while rank 0 computed %d ms\n", names[k],
                   worst[k], ms);
            if (strict == 1)
                CHECK(worst[k] < ms / 2.0, "%s did not advance while rank 0 computed: a wait of %.1f ms",
                      names[k], worst[k]);
        }
    }
    if (g_rank == 0 && g_size > 1 && strict == 0) {
        double longest = worst[0] > worst[1] ? worst[0] : worst[1];
        longest = longest > worst[2] ? longest : worst[2];
        CHECK(longest > ms * 0.8, "every collective completed (%.1f ms at most) while rank 0 computed: control failed", longest);
    }
    free(a);
    free(b);
    MPI_Finalize();
    if (g_rank == 0) printf("library_progress: ok (%d ranks)\n", g_size);
    return 0;
}

/* Helpers shared by the C test programs.
 *
 * The shim's C API is found with dlsym so that one binary runs preloaded, relinked with
 * -lshim, or without the shim. EXPECT_SHIM (environment) says what the run expects:
 *   1 (default): every checked MPI call must have been intercepted;
 *   0: nothing may have been intercepted (SHIM_DISABLE=1, or no shim loaded).
 */
#ifndef SHIM_CTESTS_COMMON_H
#define SHIM_CTESTS_COMMON_H

#include <dlfcn.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int g_rank = -1, g_size = 0;

#define CHECK(cond, ...)                                                             \
    do {                                                                             \
        if (!(cond)) {                                                               \
            fprintf(stderr, "[rank %d] FAIL %s:%d: %s: ", g_rank, __FILE__, __LINE__, \
                    #cond);                                                          \
            fprintf(stderr, __VA_ARGS__);                                            \
            fprintf(stderr, "\n");                                                   \
            fflush(stderr);                                                          \
            MPI_Abort(MPI_COMM_WORLD, 1);                                            \
        }                                                                            \
    } while (0)

#define MPI_OK(call)                                                                 \
    do {                                                                             \
        int rc_ = (call);                                                            \
        CHECK(rc_ == MPI_SUCCESS, "%s returned %d", #call, rc_);                     \
    } while (0)

static uint64_t shim_count(const char *name) {
    uint64_t (*f)(const char *) = (uint64_t(*)(const char *))dlsym(RTLD_DEFAULT, "shim_call_count");
    return f ? f(name) : 0;
}

static int expect_shim(void) {
    const char *e = getenv("EXPECT_SHIM");
    return !e || strcmp(e, "0") != 0;
}

/* Checks that each named function was intercepted (or, with EXPECT_SHIM=0, was not). */
static void check_intercepted(const char *const *names, int n) {
    int want = expect_shim();
    if (want) {
        const char *(*ver)(void) = (const char *(*)(void))dlsym(RTLD_DEFAULT, "shim_version");
        CHECK(ver != NULL, "libshim is not loaded (neither preloaded nor linked)");
    }
    for (int i = 0; i < n; i++) {
        uint64_t c = shim_count(names[i]);
        if (want)
            CHECK(c > 0, "%s was not intercepted by the shim", names[i]);
        else
            CHECK(c == 0, "%s was intercepted (%llu calls) but the shim should be off", names[i],
                  (unsigned long long)c);
    }
}

static void test_init(int *argc, char ***argv) {
    MPI_Init(argc, argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_size);
}

static void test_pass(const char *what) {
    MPI_Barrier(MPI_COMM_WORLD);
    if (g_rank == 0) {
        printf("PASS %s (%d ranks)\n", what, g_size);
        fflush(stdout);
    }
}

/* Whether the paths SHIM_STATS recorded for `name` (shim_function_paths) include the
 * node segment's ("schedule:shm..."). */
static inline int on_segment(const char *name) {
    int (*paths)(const char *, char *, size_t) =
        (int (*)(const char *, char *, size_t))dlsym(RTLD_DEFAULT, "shim_function_paths");
    char buf[512] = "";
    if (!paths || paths(name, buf, sizeof buf) < 0) return 0;
    return strstr(buf, "schedule:shm") != NULL;
}

/* How often each persistent collective is started (CTEST_PERSISTENT_STARTS, default 3).
 * Debian's MPICH 4.0.2 fails on the second MPI_Start of several persistent collectives
 * (Scatter_init at 3+ ranks, Gather/Bcast/Barrier_init at 5), so runs whose persistent
 * collectives are carried out by the system MPI start them once. */
static inline int persistent_starts(void) {
    const char *s = getenv("CTEST_PERSISTENT_STARTS");
    return s ? atoi(s) : 3;
}

#endif

/* The floor under any shared-memory collective on this machine: the one-way latency of one
 * cache line between two processes. Two processes (fork) share one mapping; each writes only
 * its own flag (a 64-bit counter alone on a cache line) and spins on the other's, as the
 * shim's transport flags do (core/transport/flag.rs). One round trip is two one-way
 * transfers; the report is the median over repeats of (round-trip time / 2), with the
 * processes pinned to two different processors when the machine has them.
 * Usage: floor [rounds per repeat (100000)] [repeats (11)]
 * Build: gcc -O2 -o floor scripts/bench/floor.c */
#define _GNU_SOURCE
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

struct line { _Atomic uint64_t v; char pad[56]; };

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static void pin(int cpu) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    if (n < 2) return;
    cpu_set_t s;
    CPU_ZERO(&s);
    CPU_SET(cpu % n, &s);
    sched_setaffinity(0, sizeof s, &s);
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    long rounds = argc > 1 ? atol(argv[1]) : 100000;
    int reps = argc > 2 ? atoi(argv[2]) : 11;
    if (rounds < 1 || reps < 1 || reps > 1000) { fprintf(stderr, "usage: floor [rounds] [repeats]\n"); return 2; }
    struct line *l = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (l == MAP_FAILED) { perror("mmap"); return 1; }
    long total = rounds * (reps + 1); /* one warm-up repeat */
    pid_t pid = fork();
    if (pid < 0) { perror("fork"); return 1; }
    if (pid == 0) { /* the echo: waits for each ping, answers it */
        pin(1);
        for (uint64_t i = 1; i <= (uint64_t)total; i++) {
            while (atomic_load_explicit(&l[0].v, memory_order_acquire) != i) ;
            atomic_store_explicit(&l[1].v, i, memory_order_release);
        }
        _exit(0);
    }
    pin(0);
    double *t = malloc(sizeof(double) * reps);
    uint64_t i = 0;
    for (int r = -1; r < reps; r++) {
        double t0 = now();
        for (long k = 0; k < rounds; k++) {
            i++;
            atomic_store_explicit(&l[0].v, i, memory_order_release);
            while (atomic_load_explicit(&l[1].v, memory_order_acquire) != i) ;
        }
        if (r >= 0) t[r] = (now() - t0) / rounds / 2 * 1e9;
    }
    waitpid(pid, NULL, 0);
    qsort(t, reps, sizeof(double), cmp);
    printf("one-way cache-line latency between two processes: median %.1f ns (min %.1f, max %.1f; %d repeats of %ld round trips)\n",
           t[reps / 2], t[0], t[reps - 1], reps, rounds);
    return 0;
}

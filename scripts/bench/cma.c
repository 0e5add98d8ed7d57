/* The limit under single copy on this machine: one process reading another's memory with
 * process_vm_readv (CMA, what the shim's single-copy algorithms do) against memcpy of the
 * same bytes within one process, 16 KiB .. 4 MiB, 64 MiB moved per size. No MPI.
 * Build: gcc -O2 -o cma scripts/bench/cma.c      Run: ./cma */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(void) {
    const size_t max = 4 << 20;
    char *src = malloc(max), *dst = malloc(max);
    if (!src || !dst) return 1;
    memset(src, 1, max);
    memset(dst, 2, max);
    /* the child holds a copy of src at the same address (fork) and waits to be read */
    pid_t child = fork();
    if (child == 0) {
        pause();
        return 0;
    }
    printf("| bytes | memcpy (us) | GB/s | process_vm_readv (us) | GB/s | CMA/memcpy |\n|---|---|---|---|---|---|\n");
    for (size_t n = 16384; n <= max; n *= 4) {
        int reps = (int)((64 << 20) / n);
        double t = now();
        for (int r = 0; r < reps; r++) {
            memcpy(dst, src, n);
            __asm__ volatile("" ::: "memory");
        }
        double m = (now() - t) / reps;
        struct iovec local = {dst, n}, remote = {src, n};
        t = now();
        for (int r = 0; r < reps; r++)
            if (process_vm_readv(child, &local, 1, &remote, 1, 0) != (ssize_t)n) {
                perror("process_vm_readv");
                kill(child, SIGKILL);
                return 1;
            }
        double v = (now() - t) / reps;
        printf("| %zu | %.2f | %.1f | %.2f | %.1f | %.2f |\n", n, m * 1e6, n / m / 1e9, v * 1e6, n / v / 1e9, v / m);
    }
    kill(child, SIGKILL);
    waitpid(child, NULL, 0);
    return 0;
}

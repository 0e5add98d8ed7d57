/* What this machine allows, independently of the shim: the bounds behind the targets of
 * the progress, packing and Open MPI issues that the closing notes call physical. No MPI.
 *
 *   limits copy            memcpy throughput on 1 and 2 threads, 1 MiB .. 256 MiB, and the
 *                          ratio (the ceiling of 2-thread packing, which is a copy with
 *                          gaps: run-pack's 2t/1t);
 *   limits wake            CPU time a thread spends per timed sleep of 100 us (what each
 *                          poll of a progress thread costs before it does any work), with
 *                          the other cores idle and with every core busy;
 *   limits tcp-recv PORT   /  limits tcp-send HOST PORT MIB
 *                          one TCP stream: wall time and the CPU time (user + system) of
 *                          each end, in % of the wall time. On the emulated 2 Gbit/s
 *                          network this is the CPU the kernel's TCP path takes from the
 *                          computing cores whoever moves the data (the application in
 *                          MPI_Wait or the progress thread): the floor of the progress
 *                          thread's CPU cost and the ceiling of overlap without an idle
 *                          core.
 * Output: one line per measurement, `key value` pairs (scripts/bench/run-limits formats them). */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static double cpu_self(int who) {
    struct rusage r;
    getrusage(who, &r);
    return r.ru_utime.tv_sec + r.ru_utime.tv_usec * 1e-6 + r.ru_stime.tv_sec + r.ru_stime.tv_usec * 1e-6;
}

static int cmpd(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* ---- copy ------------------------------------------------------------------------- */
/* A spinning barrier: the helper thread polls, as the packing pool's workers do between
 * back-to-back jobs, so the 2-thread figure is the copy itself, not a wake-up. */
typedef struct {
    volatile int count, phase;
} spin_bar;

static void spin_wait(spin_bar *b, int n) {
    int ph = b->phase;
    if (__atomic_add_fetch(&b->count, 1, __ATOMIC_ACQ_REL) == n) {
        b->count = 0;
        __atomic_store_n(&b->phase, ph + 1, __ATOMIC_RELEASE);
    } else {
        while (__atomic_load_n(&b->phase, __ATOMIC_ACQUIRE) == ph) __builtin_ia32_pause();
    }
}

typedef struct {
    char *dst, *src;
    size_t n;
    int reps;
    spin_bar *bar;
} copy_arg;

static void *copy_part(void *p) {
    copy_arg *a = p;
    for (int r = 0; r < a->reps; r++) {
        spin_wait(a->bar, 2);
        memcpy(a->dst, a->src, a->n);
        spin_wait(a->bar, 2);
    }
    return NULL;
}

/* GB/s of one memcpy of n bytes split over t (1 or 2) threads, median of reps (each rep
 * one synchronised copy, like one packing job). */
static double copy_rate(char *dst, char *src, size_t n, int t, int reps) {
    spin_bar bar = {0, 0};
    pthread_t th;
    copy_arg args[2];
    for (int i = 0; i < t; i++) args[i] = (copy_arg){dst + n / t * i, src + n / t * i, n / t, reps, &bar};
    if (t == 2) pthread_create(&th, NULL, copy_part, &args[1]);
    double *ts = malloc(sizeof(double) * reps);
    for (int r = 0; r < reps; r++) {
        if (t == 2) spin_wait(&bar, 2);
        double t0 = now();
        memcpy(args[0].dst, args[0].src, args[0].n);
        if (t == 2) spin_wait(&bar, 2);
        ts[r] = now() - t0;
    }
    if (t == 2) pthread_join(th, NULL);
    qsort(ts, reps, sizeof(double), cmpd);
    double rate = n / ts[reps / 2] / 1e9;
    free(ts);
    return rate;
}

static void copy_main(void) {
    for (size_t mib = 1; mib <= 256; mib *= 4) {
        size_t n = mib << 20;
        char *src = malloc(n), *dst = malloc(n);
        memset(src, 1, n), memset(dst, 2, n);
        int reps = (int)(2048 / mib) + 5;
        double r1[5], r2[5];
        for (int k = 0; k < 5; k++) { /* alternate, median of 5 medians */
            r1[k] = copy_rate(dst, src, n, 1, reps);
            r2[k] = copy_rate(dst, src, n, 2, reps);
        }
        qsort(r1, 5, sizeof(double), cmpd), qsort(r2, 5, sizeof(double), cmpd);
        printf("copy bytes %zu gbs1 %.2f gbs2 %.2f ratio %.2f\n", n, r1[2], r2[2], r2[2] / r1[2]);
        fflush(stdout);
        free(src), free(dst);
    }
}

/* ---- wake ------------------------------------------------------------------------- */
static volatile int spin_stop;
static void *spinner(void *p) {
    (void)p;
    volatile uint64_t x = 0;
    while (!spin_stop) x++;
    return NULL;
}

static void wake_main(void) {
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    for (int busy = 0; busy < 2; busy++) {
        pthread_t th[64];
        int ns = busy ? (int)(ncpu < 64 ? ncpu : 64) : 0;
        spin_stop = 0;
        for (int i = 0; i < ns; i++) pthread_create(&th[i], NULL, spinner, NULL);
        usleep(20000);
        const int n = 2000;
        struct timespec d = {0, 100000};
        double c0 = cpu_self(RUSAGE_THREAD), t0 = now();
        for (int i = 0; i < n; i++) nanosleep(&d, NULL);
        double c1 = cpu_self(RUSAGE_THREAD), t1 = now();
        spin_stop = 1;
        for (int i = 0; i < ns; i++) pthread_join(th[i], NULL);
        printf("wake cores_busy %d sleeps %d cpu_us_per_sleep %.1f wall_us_per_sleep %.1f\n", busy ? (int)ncpu : 0, n,
               (c1 - c0) / n * 1e6, (t1 - t0) / n * 1e6);
        fflush(stdout);
    }
}

/* ---- tcp -------------------------------------------------------------------------- */
enum { CHUNK = 4 << 20 };

static void tcp_report(const char *side, double bytes, double wall, double cpu) {
    printf("tcp side %s mbs %.1f wall_s %.3f cpu_s %.3f cpu_pct %.1f ns_per_byte %.3f\n", side, bytes / wall / 1e6, wall,
           cpu, 100 * cpu / wall, cpu / bytes * 1e9);
    fflush(stdout);
}

static int tcp_recv(int port) {
    int s = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port), .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (bind(s, (struct sockaddr *)&a, sizeof a) || listen(s, 1)) return perror("bind/listen"), 1;
    int c = accept(s, NULL, NULL);
    if (c < 0) return perror("accept"), 1;
    char *buf = malloc(CHUNK);
    double got = 0, t0 = 0, c0 = 0;
    ssize_t k;
    while ((k = recv(c, buf, CHUNK, 0)) > 0) {
        if (got == 0) t0 = now(), c0 = cpu_self(RUSAGE_SELF);
        got += k;
    }
    tcp_report("recv", got, now() - t0, cpu_self(RUSAGE_SELF) - c0);
    return 0;
}

static int tcp_send(const char *host, int port, long mib) {
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    inet_pton(AF_INET, host, &a.sin_addr);
    for (int i = 0; connect(s, (struct sockaddr *)&a, sizeof a) != 0; i++) {
        if (i > 200) return perror("connect"), 1;
        usleep(10000);
    }
    char *buf = malloc(CHUNK);
    memset(buf, 7, CHUNK);
    double total = (double)mib * (1 << 20), sent = 0, t0 = now(), c0 = cpu_self(RUSAGE_SELF);
    while (sent < total) {
        ssize_t k = send(s, buf, CHUNK, 0);
        if (k <= 0) return perror("send"), 1;
        sent += k;
    }
    tcp_report("send", sent, now() - t0, cpu_self(RUSAGE_SELF) - c0);
    close(s);
    return 0;
}

int main(int argc, char **argv) {
    if (argc >= 2 && !strcmp(argv[1], "copy")) return copy_main(), 0;
    if (argc >= 2 && !strcmp(argv[1], "wake")) return wake_main(), 0;
    if (argc >= 3 && !strcmp(argv[1], "tcp-recv")) return tcp_recv(atoi(argv[2]));
    if (argc >= 5 && !strcmp(argv[1], "tcp-send")) return tcp_send(argv[2], atoi(argv[3]), atol(argv[4]));
    fprintf(stderr, "usage: limits copy | wake | tcp-recv PORT | tcp-send HOST PORT MIB\n");
    return 2;
}

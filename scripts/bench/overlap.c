/* Overlap of non-blocking collectives with computation (NBCBench, OSU, IMB-NBC, CRESTA).
 *
 * For each collective and size, on the MPI this process runs with (the system MPI, or the
 * shim when preloaded), NBCBench's four configurations (Hoefler digest §9.4):
 *   blocking   : the blocking collective;                               t_blk
 *   pure       : I* then Wait at once (pure communication time);        t_pure
 *   overlap    : I*, compute, Wait, with no MPI call during the compute;
 *   overlap+test: the same with MPI_Test calls spread over the compute;
 *   long       : I*, a compute three times as long, Wait: all communication can hide, so
 *                wl_ovh (t_ovl - t_cpu) is CPU taken from the compute, NBCBench's
 *                workload-based overhead, and is also given in % of t_cpu (wl_pct).
 * The compute is a fixed workload (a dense 32x32 mat-vec loop, like OSU's) calibrated to
 * take t_pure when run alone (t_cpu). Reported per point (means over iterations, maximum
 * over ranks):
 *   t_ovl      start + compute + wait, overlapped;
 *   t_comp     the compute inside the overlapped run (includes the MPI_Test calls);
 *   t_test     time in MPI_Test calls;  t_mpi = time in I* + Test + Wait (CPU overhead of the
 *              calling thread, the time-based overhead);
 *   wl_ovh     workload-based overhead t_ovl - t_cpu (charges stolen cycles, context
 *              switches and cache pollution: Hoefler digest §9.4);
 *   osu%       max(0, 100 - 100 (t_ovl - (t_comp - t_test)) / t_pure)       (OSU)
 *   imb%       100 max(0, min(1, (t_pure + t_cpu - t_ovl) / max(t_pure, t_cpu)))  (IMB-NBC)
 *   beta       (t_pure + t_cpu - t_ovl) / t_ovl                              (CRESTA Eq. 5)
 *   thr_pct    CPU time of the shim's progress thread during the overlapped runs, in % of
 *              the compute time (0 without the shim or without a thread)
 *   wl_pct     wl_ovh in % of t_cpu
 *
 * Usage: overlap [-c Ibcast,Iallreduce,...] [-s minbytes] [-S maxbytes] [-i iters]
 *                [-t tests] [-l label]
 * Output: CSV rows on rank 0's stdout (header first). */
#include <dlfcn.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { IBARRIER, IBCAST, IREDUCE, IALLREDUCE, IGATHER, ISCATTER, IALLGATHER, IALLTOALL, IREDUCE_SCATTER_BLOCK, NCOLL };
static const char *NAMES[] = {"Ibarrier", "Ibcast", "Ireduce", "Iallreduce", "Igather", "Iscatter", "Iallgather",
                              "Ialltoall", "Ireduce_scatter_block"};
static int rank, size;
static char *sbuf, *rbuf;

static void start(int c, long bytes, MPI_Request *r) {
    int n = (int)(bytes / 8);
    MPI_Comm w = MPI_COMM_WORLD;
    switch (c) {
    case IBARRIER: MPI_Ibarrier(w, r); break;
    case IBCAST: MPI_Ibcast(sbuf, n, MPI_DOUBLE, 0, w, r); break;
    case IREDUCE: MPI_Ireduce(sbuf, rbuf, n, MPI_DOUBLE, MPI_SUM, 0, w, r); break;
    case IALLREDUCE: MPI_Iallreduce(sbuf, rbuf, n, MPI_DOUBLE, MPI_SUM, w, r); break;
    case IGATHER: MPI_Igather(sbuf, n, MPI_DOUBLE, rbuf, n, MPI_DOUBLE, 0, w, r); break;
    case ISCATTER: MPI_Iscatter(sbuf, n, MPI_DOUBLE, rbuf, n, MPI_DOUBLE, 0, w, r); break;
    case IALLGATHER: MPI_Iallgather(sbuf, n, MPI_DOUBLE, rbuf, n, MPI_DOUBLE, w, r); break;
    case IALLTOALL: MPI_Ialltoall(sbuf, n, MPI_DOUBLE, rbuf, n, MPI_DOUBLE, w, r); break;
    case IREDUCE_SCATTER_BLOCK: MPI_Ireduce_scatter_block(sbuf, rbuf, n, MPI_DOUBLE, MPI_SUM, w, r); break;
    }
}

static void blocking(int c, long bytes) {
    int n = (int)(bytes / 8);
    MPI_Comm w = MPI_COMM_WORLD;
    switch (c) {
    case IBARRIER: MPI_Barrier(w); break;
    case IBCAST: MPI_Bcast(sbuf, n, MPI_DOUBLE, 0, w); break;
    case IREDUCE: MPI_Reduce(sbuf, rbuf, n, MPI_DOUBLE, MPI_SUM, 0, w); break;
    case IALLREDUCE: MPI_Allreduce(sbuf, rbuf, n, MPI_DOUBLE, MPI_SUM, w); break;
    case IGATHER: MPI_Gather(sbuf, n, MPI_DOUBLE, rbuf, n, MPI_DOUBLE, 0, w); break;
    case ISCATTER: MPI_Scatter(sbuf, n, MPI_DOUBLE, rbuf, n, MPI_DOUBLE, 0, w); break;
    case IALLGATHER: MPI_Allgather(sbuf, n, MPI_DOUBLE, rbuf, n, MPI_DOUBLE, w); break;
    case IALLTOALL: MPI_Alltoall(sbuf, n, MPI_DOUBLE, rbuf, n, MPI_DOUBLE, w); break;
    case IREDUCE_SCATTER_BLOCK: MPI_Reduce_scatter_block(sbuf, rbuf, n, MPI_DOUBLE, MPI_SUM, w); break;
    }
}

/* The workload: `units` passes of a 32x32 mat-vec (about a microsecond each). */
#define DIM 32
static double A[DIM][DIM], x[DIM], y[DIM];
static volatile double sink;
static void work(long units) {
    for (long u = 0; u < units; u++) {
        for (int i = 0; i < DIM; i++) {
            double s = 0;
            for (int j = 0; j < DIM; j++) s += A[i][j] * x[j];
            y[i] = s;
        }
        x[u % DIM] = y[(u + 1) % DIM] * 0.5 + 1.0;
    }
    sink = y[0];
}

/* Runs the workload in `chunks` pieces with MPI_Test after each; returns time in tests. */
static double work_with_tests(long units, int chunks, MPI_Request *r, int *done) {
    double tt = 0;
    if (chunks <= 0) {
        work(units);
        return 0;
    }
    long per = units / chunks;
    for (int k = 0; k < chunks; k++) {
        work(k == chunks - 1 ? units - per * (chunks - 1) : per);
        if (!*done) {
            double t0 = MPI_Wtime();
            MPI_Test(r, done, MPI_STATUS_IGNORE);
            tt += MPI_Wtime() - t0;
        }
    }
    return tt;
}

/* CPU time of the shim's progress thread, if the shim is loaded. */
static uint64_t thread_cpu(void) {
    static uint64_t (*f)(void);
    static int looked;
    if (!looked) f = (uint64_t(*)(void))dlsym(RTLD_DEFAULT, "shim_progress_thread_cpu_ns"), looked = 1;
    return f ? f() : 0;
}

static int cmpd(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double maxall(double v) {
    double m;
    MPI_Allreduce(&v, &m, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return m;
}

int main(int argc, char **argv) {
    int provided;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_SINGLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    long minb = 1024, maxb = 4l << 20;
    int iters = 20, tests = 8;
    const char *colls = NULL, *label = "run";
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "-c")) colls = argv[i + 1];
        else if (!strcmp(argv[i], "-s")) minb = atol(argv[i + 1]);
        else if (!strcmp(argv[i], "-S")) maxb = atol(argv[i + 1]);
        else if (!strcmp(argv[i], "-i")) iters = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-t")) tests = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-l")) label = argv[i + 1];
    }
    size_t cap = (size_t)maxb * size + 64;
    sbuf = calloc(cap, 1);
    rbuf = calloc(cap, 1);
    for (int i = 0; i < DIM; i++)
        for (int j = 0; j < DIM; j++) A[i][j] = 1.0 / (1 + i + j);
    /* workload calibration: units per second */
    work(2000);
    double t0 = MPI_Wtime();
    work(20000);
    double mine = 20000 / (MPI_Wtime() - t0), ups; /* units per second, slowest rank */
    MPI_Allreduce(&mine, &ups, 1, MPI_DOUBLE, MPI_MIN, MPI_COMM_WORLD);
    if (rank == 0) {
        printf("label,collective,bytes,mode,t_blk_us,t_pure_us,t_cpu_us,t_ovl_us,t_comp_us,t_test_us,t_mpi_us,wl_ovh_us,"
               "osu_pct,imb_pct,beta,thr_pct,wl_pct\n");
        fflush(stdout);
    }
    for (int c = 0; c < NCOLL; c++) {
        if (colls) {
            char key[64], list[1024];
            snprintf(key, sizeof key, ",%s,", NAMES[c]);
            snprintf(list, sizeof list, ",%s,", colls);
            if (!strstr(list, key)) continue;
        }
        for (long bytes = minb; bytes <= maxb; bytes *= 4) {
            if (c == IBARRIER && bytes > minb) break;
            MPI_Request r;
            /* warm up (and build cached schedules) */
            for (int k = 0; k < 3; k++) {
                blocking(c, bytes);
                start(c, bytes, &r);
                MPI_Wait(&r, MPI_STATUS_IGNORE);
            }
            double tb = 0, tp = 0;
            for (int k = 0; k < iters; k++) {
                MPI_Barrier(MPI_COMM_WORLD);
                double a = MPI_Wtime();
                blocking(c, bytes);
                tb += MPI_Wtime() - a;
            }
            for (int k = 0; k < iters; k++) {
                MPI_Barrier(MPI_COMM_WORLD);
                double a = MPI_Wtime();
                start(c, bytes, &r);
                MPI_Wait(&r, MPI_STATUS_IGNORE);
                tp += MPI_Wtime() - a;
            }
            tb = maxall(tb / iters);
            tp = maxall(tp / iters);
                        /* calibrate the workload to take t_pure alone (three refinements on the
             * median of 5 runs, the slowest rank deciding) */
            long units = (long)(tp * ups);
            if (units < 1) units = 1;
            for (int round = 0; round < 3; round++) {
                double ts[5];
                for (int k = 0; k < 5; k++) {
                    double a = MPI_Wtime();
                    work(units);
                    ts[k] = MPI_Wtime() - a;
                }
                qsort(ts, 5, sizeof(double), cmpd);
                double med = maxall(ts[2]);
                units = (long)(units * tp / med);
                if (units < 1) units = 1;
                MPI_Bcast(&units, 1, MPI_LONG, 0, MPI_COMM_WORLD);
            }
            /* the workload alone */
            double tc = 0;
            for (int k = 0; k < iters; k++) {
                double a = MPI_Wtime();
                work(units);
                tc += MPI_Wtime() - a;
            }
            tc = maxall(tc / iters);
                        long base_units = units;
            double base_tc = tc;
            for (int mode = 0; mode < 3; mode++) {
                int chunks = mode == 1 ? tests : 0;
                units = mode == 2 ? 3 * base_units : base_units;
                if (mode == 2) {
                    /* the long workload alone */
                    tc = 0;
                    for (int k = 0; k < iters; k++) {
                        double a = MPI_Wtime();
                        work(units);
                        tc += MPI_Wtime() - a;
                    }
                    tc = maxall(tc / iters);
                } else {
                    tc = base_tc;
                }
                double to = 0, tcomp = 0, ttest = 0, tmpi = 0;
                uint64_t cpu0 = thread_cpu();
                for (int k = 0; k < iters; k++) {
                    MPI_Barrier(MPI_COMM_WORLD);
                    double a = MPI_Wtime();
                    start(c, bytes, &r);
                    double b = MPI_Wtime();
                    int done = 0;
                    double tt = work_with_tests(units, chunks, &r, &done);
                    double d = MPI_Wtime();
                    MPI_Wait(&r, MPI_STATUS_IGNORE);
                    double e = MPI_Wtime();
                    to += e - a;
                    tcomp += d - b;
                    ttest += tt;
                    tmpi += (b - a) + tt + (e - d);
                }
                double thr = maxall((double)(thread_cpu() - cpu0) / 1e9 / iters / tc * 100);
                to = maxall(to / iters);
                tcomp = maxall(tcomp / iters);
                ttest = maxall(ttest / iters);
                tmpi = maxall(tmpi / iters);
                double osu = 100 - 100 * (to - (tcomp - ttest)) / tp;
                if (osu < 0) osu = 0;
                double big = tp > tc ? tp : tc;
                double imb = (tp + tc - to) / big;
                imb = 100 * (imb < 0 ? 0 : imb > 1 ? 1 : imb);
                double beta = (tp + tc - to) / to;
                if (rank == 0) {
                    static const char *MODES[] = {"overlap", "overlap+test", "long"};
                    printf("%s,%s,%ld,%s,%.2f,%.2f,%.2f,%.2f,%.2f,%.2f,%.2f,%.2f,%.1f,%.1f,%.3f,%.1f,%.1f\n", label,
                           NAMES[c], c == IBARRIER ? 0 : bytes, MODES[mode], tb * 1e6, tp * 1e6, tc * 1e6, to * 1e6,
                           tcomp * 1e6, ttest * 1e6, tmpi * 1e6, (to - tc) * 1e6, osu, imb, beta, thr,
                           100 * (to - tc) / tc);
                    fflush(stdout);
                }
            }
        }
    }
    MPI_Finalize();
    return 0;
}

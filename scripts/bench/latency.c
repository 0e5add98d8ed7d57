/* Collective latency, the shim versus the system MPI, in one run.
 *
 * Run with libshim preloaded: MPI_* calls go through the shim, PMPI_* calls straight to
 * the system MPI. For every collective, form (blocking; I* + Wait) and size, the two are
 * measured alternately, REPS times each; a measurement is the maximum over ranks of the
 * mean time per call over a loop; the table gives the median of each and the ratio.
 *
 * Usage: latency [-a] [-R] [-c coll,coll,...] [-s minbytes] [-S maxbytes] [-r reps] [-f forms] [-x growth] [-o tuning]
 *   sizes grow by 8x from minbytes (8), ending at maxbytes (4 MiB); forms: b (blocking), n (I*+Wait),
 *   p (the shim's persistent collective, initialized once per point, Start+Wait, against the system
 *   MPI's I*+Wait: not every library has persistent collectives; one root throughout; each point's
 *   request is freed before the next is initialized, so it takes the channel the last one held);
 *   -R: the rooted collectives move their root to the next rank on every call, as IMB does
 * Output: one markdown table row per point on rank 0's stdout.
 *
 * All-algorithms mode (-a): blocking form; for every collective, size and algorithm the
 * shim offers (shim_algorithms / shim_set_algorithm, found with dlsym), plus the shim's
 * automatic choice and the system MPI, all measured alternately in the same run. One
 * markdown table per collective (median microseconds per column, auto/best and
 * auto/system), then a summary against the targets: auto within 10% of the best
 * algorithm, never more than 5% slower than the system MPI, geometric mean speedup over
 * the system MPI, Reduce at >= 256 KiB. With -o FILE the best algorithm of every point is
 * written as tuning rows ("best MPI_<coll> <ranks> <bytes> <algorithm>", the format of
 * SHIM_TUNING_FILE; scripts/tools/shim-tune uses it). Sizes grow by -x (default 4). */
#include <dlfcn.h>
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { BARRIER, BCAST, GATHER, GATHERV, SCATTER, SCATTERV, ALLGATHER, ALLGATHERV, ALLTOALL, ALLTOALLV, ALLTOALLW,
       REDUCE, ALLREDUCE, REDUCE_SCATTER, REDUCE_SCATTER_BLOCK, SCAN, EXSCAN, NALLGATHER, NALLTOALL, NCOLL };
static const char *NAMES[] = {"Barrier", "Bcast", "Gather", "Gatherv", "Scatter", "Scatterv", "Allgather",
                              "Allgatherv", "Alltoall", "Alltoallv", "Alltoallw", "Reduce", "Allreduce",
                              "Reduce_scatter", "Reduce_scatter_block", "Scan", "Exscan", "Neighbor_allgather",
                              "Neighbor_alltoall"};

static int rank, size;
/* on how many nodes the ranks are (MPI_COMM_TYPE_SHARED): tuning rows measured across
 * nodes name it ("best MPI_<coll> <ranks>/<nodes> ..."), the shim uses them only there */
static int nodes = 1;
static char at[32];
/* -R: the root of the next rooted call (0 throughout without -R) */
static int rotate, root;
static double *sbuf, *rbuf;
static int *counts, *displs, *bdispls;
static MPI_Datatype *types;
static MPI_Comm ring;

/* The v and w forms' arguments: n doubles per rank, blocks in rank order. */
static void blocks(int n) {
    for (int i = 0; i < size; i++) counts[i] = n, displs[i] = i * n, bdispls[i] = i * n * 8;
}

/* One call of collective c with n doubles per block, through the shim or the system MPI. */
static void call(int c, int n, int shim, int nb) {
    MPI_Request rq;
    MPI_Request *r = nb ? &rq : NULL;
    MPI_Comm w = MPI_COMM_WORLD;
    blocks(n);
    const int rt = root;
    if (rotate) root = (root + 1) % size;
#define PICK(BLK, NB) \
    do { \
        if (!shim) { if (r) P##NB; else P##BLK; } \
        else { if (r) NB; else BLK; } \
    } while (0)
    switch (c) {
    case BARRIER: PICK(MPI_Barrier(w), MPI_Ibarrier(w, r)); break;
    case BCAST: PICK(MPI_Bcast(sbuf, n, MPI_DOUBLE, rt, w), MPI_Ibcast(sbuf, n, MPI_DOUBLE, rt, w, r)); break;
    case GATHER: PICK(MPI_Gather(sbuf, n, MPI_DOUBLE, rbuf, n, MPI_DOUBLE, rt, w), MPI_Igather(sbuf, n, MPI_DOUBLE, rbuf, n, MPI_DOUBLE, rt, w, r)); break;
    case GATHERV: PICK(MPI_Gatherv(sbuf, n, MPI_DOUBLE, rbuf, counts, displs, MPI_DOUBLE, rt, w), MPI_Igatherv(sbuf, n, MPI_DOUBLE, rbuf, counts, displs, MPI_DOUBLE, rt, w, r)); break;
    case SCATTER: PICK(MPI_Scatter(sbuf, n, MPI_DOUBLE, rbuf, n, MPI_DOUBLE, rt, w), MPI_Iscatter(sbuf, n, MPI_DOUBLE, rbuf, n, MPI_DOUBLE, rt, w, r)); break;
    case SCATTERV: PICK(MPI_Scatterv(sbuf, counts, displs, MPI_DOUBLE, rbuf, n, MPI_DOUBLE, rt, w), MPI_Iscatterv(sbuf, counts, displs, MPI_DOUBLE, rbuf, n, MPI_DOUBLE, rt, w, r)); break;
    case ALLGATHER: PICK(MPI_Allgather(sbuf, n, MPI_DOUBLE, rbuf, n, MPI_DOUBLE, w), MPI_Iallgather(sbuf, n, MPI_DOUBLE, rbuf, n, MPI_DOUBLE, w, r)); break;
    case ALLGATHERV: PICK(MPI_Allgatherv(sbuf, n, MPI_DOUBLE, rbuf, counts, displs, MPI_DOUBLE, w), MPI_Iallgatherv(sbuf, n, MPI_DOUBLE, rbuf, counts, displs, MPI_DOUBLE, w, r)); break;
    case ALLTOALL: PICK(MPI_Alltoall(sbuf, n, MPI_DOUBLE, rbuf, n, MPI_DOUBLE, w), MPI_Ialltoall(sbuf, n, MPI_DOUBLE, rbuf, n, MPI_DOUBLE, w, r)); break;
    case ALLTOALLV: PICK(MPI_Alltoallv(sbuf, counts, displs, MPI_DOUBLE, rbuf, counts, displs, MPI_DOUBLE, w), MPI_Ialltoallv(sbuf, counts, displs, MPI_DOUBLE, rbuf, counts, displs, MPI_DOUBLE, w, r)); break;
    case ALLTOALLW: PICK(MPI_Alltoallw(sbuf, counts, bdispls, types, rbuf, counts, bdispls, types, w), MPI_Ialltoallw(sbuf, counts, bdispls, types, rbuf, counts, bdispls, types, w, r)); break;
    case REDUCE: PICK(MPI_Reduce(sbuf, rbuf, n, MPI_DOUBLE, MPI_SUM, rt, w), MPI_Ireduce(sbuf, rbuf, n, MPI_DOUBLE, MPI_SUM, rt, w, r)); break;
    case ALLREDUCE: PICK(MPI_Allreduce(sbuf, rbuf, n, MPI_DOUBLE, MPI_SUM, w), MPI_Iallreduce(sbuf, rbuf, n, MPI_DOUBLE, MPI_SUM, w, r)); break;
    case REDUCE_SCATTER: PICK(MPI_Reduce_scatter(sbuf, rbuf, counts, MPI_DOUBLE, MPI_SUM, w), MPI_Ireduce_scatter(sbuf, rbuf, counts, MPI_DOUBLE, MPI_SUM, w, r)); break;
    case REDUCE_SCATTER_BLOCK: PICK(MPI_Reduce_scatter_block(sbuf, rbuf, n, MPI_DOUBLE, MPI_SUM, w), MPI_Ireduce_scatter_block(sbuf, rbuf, n, MPI_DOUBLE, MPI_SUM, w, r)); break;
    case SCAN: PICK(MPI_Scan(sbuf, rbuf, n, MPI_DOUBLE, MPI_SUM, w), MPI_Iscan(sbuf, rbuf, n, MPI_DOUBLE, MPI_SUM, w, r)); break;
    case EXSCAN: PICK(MPI_Exscan(sbuf, rbuf, n, MPI_DOUBLE, MPI_SUM, w), MPI_Iexscan(sbuf, rbuf, n, MPI_DOUBLE, MPI_SUM, w, r)); break;
    case NALLGATHER: PICK(MPI_Neighbor_allgather(sbuf, n, MPI_DOUBLE, rbuf, n, MPI_DOUBLE, ring), MPI_Ineighbor_allgather(sbuf, n, MPI_DOUBLE, rbuf, n, MPI_DOUBLE, ring, r)); break;
    case NALLTOALL: PICK(MPI_Neighbor_alltoall(sbuf, n, MPI_DOUBLE, rbuf, n, MPI_DOUBLE, ring), MPI_Ineighbor_alltoall(sbuf, n, MPI_DOUBLE, rbuf, n, MPI_DOUBLE, ring, r)); break;
    }
    if (r) {
        if (shim) MPI_Wait(r, MPI_STATUS_IGNORE);
        else PMPI_Wait(r, MPI_STATUS_IGNORE);
    }
}

#if MPI_VERSION < 4 && !(defined(OMPI_MAJOR_VERSION) && OMPI_MAJOR_VERSION >= 5)
/* An MPI-3 header (Open MPI 4.1): the preloaded shim exports the MPI-4.0 persistent collectives
   (weak: the library has none, so the program links without them). */
#define LATENCY_WEAK_PERSISTENT 1
__attribute__((weak)) int MPI_Barrier_init(MPI_Comm, MPI_Info, MPI_Request *);
__attribute__((weak)) int MPI_Bcast_init(void *, int, MPI_Datatype, int, MPI_Comm, MPI_Info, MPI_Request *);
__attribute__((weak)) int MPI_Gather_init(const void *, int, MPI_Datatype, void *, int, MPI_Datatype, int, MPI_Comm, MPI_Info, MPI_Request *);
__attribute__((weak)) int MPI_Gatherv_init(const void *, int, MPI_Datatype, void *, const int[], const int[], MPI_Datatype, int, MPI_Comm,
                     MPI_Info, MPI_Request *);
__attribute__((weak)) int MPI_Scatter_init(const void *, int, MPI_Datatype, void *, int, MPI_Datatype, int, MPI_Comm, MPI_Info, MPI_Request *);
__attribute__((weak)) int MPI_Scatterv_init(const void *, const int[], const int[], MPI_Datatype, void *, int, MPI_Datatype, int, MPI_Comm,
                      MPI_Info, MPI_Request *);
__attribute__((weak)) int MPI_Allgather_init(const void *, int, MPI_Datatype, void *, int, MPI_Datatype, MPI_Comm, MPI_Info, MPI_Request *);
__attribute__((weak)) int MPI_Allgatherv_init(const void *, int, MPI_Datatype, void *, const int[], const int[], MPI_Datatype, MPI_Comm,
                        MPI_Info, MPI_Request *);
__attribute__((weak)) int MPI_Alltoall_init(const void *, int, MPI_Datatype, void *, int, MPI_Datatype, MPI_Comm, MPI_Info, MPI_Request *);
__attribute__((weak)) int MPI_Alltoallv_init(const void *, const int[], const int[], MPI_Datatype, void *, const int[], const int[],
                       MPI_Datatype, MPI_Comm, MPI_Info, MPI_Request *);
__attribute__((weak)) int MPI_Alltoallw_init(const void *, const int[], const int[], const MPI_Datatype[], void *, const int[], const int[],
                       const MPI_Datatype[], MPI_Comm, MPI_Info, MPI_Request *);
__attribute__((weak)) int MPI_Reduce_init(const void *, void *, int, MPI_Datatype, MPI_Op, int, MPI_Comm, MPI_Info, MPI_Request *);
__attribute__((weak)) int MPI_Allreduce_init(const void *, void *, int, MPI_Datatype, MPI_Op, MPI_Comm, MPI_Info, MPI_Request *);
__attribute__((weak)) int MPI_Reduce_scatter_init(const void *, void *, const int[], MPI_Datatype, MPI_Op, MPI_Comm, MPI_Info, MPI_Request *);
__attribute__((weak)) int MPI_Reduce_scatter_block_init(const void *, void *, int, MPI_Datatype, MPI_Op, MPI_Comm, MPI_Info, MPI_Request *);
__attribute__((weak)) int MPI_Scan_init(const void *, void *, int, MPI_Datatype, MPI_Op, MPI_Comm, MPI_Info, MPI_Request *);
__attribute__((weak)) int MPI_Exscan_init(const void *, void *, int, MPI_Datatype, MPI_Op, MPI_Comm, MPI_Info, MPI_Request *);
__attribute__((weak)) int MPI_Neighbor_allgather_init(const void *, int, MPI_Datatype, void *, int, MPI_Datatype, MPI_Comm, MPI_Info,
                                MPI_Request *);
__attribute__((weak)) int MPI_Neighbor_alltoall_init(const void *, int, MPI_Datatype, void *, int, MPI_Datatype, MPI_Comm, MPI_Info,
                               MPI_Request *);
#endif

/* The persistent form of collective c with n doubles per block, through the shim (MPI-4.0 §6.13). */
static void pinit(int c, int n, MPI_Request *r) {
    MPI_Comm w = MPI_COMM_WORLD;
    MPI_Info i = MPI_INFO_NULL;
    blocks(n);
    const int rt = root;
    switch (c) {
    case BARRIER: MPI_Barrier_init(w, i, r); break;
    case BCAST: MPI_Bcast_init(sbuf, n, MPI_DOUBLE, rt, w, i, r); break;
    case GATHER: MPI_Gather_init(sbuf, n, MPI_DOUBLE, rbuf, n, MPI_DOUBLE, rt, w, i, r); break;
    case GATHERV: MPI_Gatherv_init(sbuf, n, MPI_DOUBLE, rbuf, counts, displs, MPI_DOUBLE, rt, w, i, r); break;
    case SCATTER: MPI_Scatter_init(sbuf, n, MPI_DOUBLE, rbuf, n, MPI_DOUBLE, rt, w, i, r); break;
    case SCATTERV: MPI_Scatterv_init(sbuf, counts, displs, MPI_DOUBLE, rbuf, n, MPI_DOUBLE, rt, w, i, r); break;
    case ALLGATHER: MPI_Allgather_init(sbuf, n, MPI_DOUBLE, rbuf, n, MPI_DOUBLE, w, i, r); break;
    case ALLGATHERV: MPI_Allgatherv_init(sbuf, n, MPI_DOUBLE, rbuf, counts, displs, MPI_DOUBLE, w, i, r); break;
    case ALLTOALL: MPI_Alltoall_init(sbuf, n, MPI_DOUBLE, rbuf, n, MPI_DOUBLE, w, i, r); break;
    case ALLTOALLV: MPI_Alltoallv_init(sbuf, counts, displs, MPI_DOUBLE, rbuf, counts, displs, MPI_DOUBLE, w, i, r); break;
    case ALLTOALLW: MPI_Alltoallw_init(sbuf, counts, bdispls, types, rbuf, counts, bdispls, types, w, i, r); break;
    case REDUCE: MPI_Reduce_init(sbuf, rbuf, n, MPI_DOUBLE, MPI_SUM, rt, w, i, r); break;
    case ALLREDUCE: MPI_Allreduce_init(sbuf, rbuf, n, MPI_DOUBLE, MPI_SUM, w, i, r); break;
    case REDUCE_SCATTER: MPI_Reduce_scatter_init(sbuf, rbuf, counts, MPI_DOUBLE, MPI_SUM, w, i, r); break;
    case REDUCE_SCATTER_BLOCK: MPI_Reduce_scatter_block_init(sbuf, rbuf, n, MPI_DOUBLE, MPI_SUM, w, i, r); break;
    case SCAN: MPI_Scan_init(sbuf, rbuf, n, MPI_DOUBLE, MPI_SUM, w, i, r); break;
    case EXSCAN: MPI_Exscan_init(sbuf, rbuf, n, MPI_DOUBLE, MPI_SUM, w, i, r); break;
    case NALLGATHER: MPI_Neighbor_allgather_init(sbuf, n, MPI_DOUBLE, rbuf, n, MPI_DOUBLE, ring, i, r); break;
    case NALLTOALL: MPI_Neighbor_alltoall_init(sbuf, n, MPI_DOUBLE, rbuf, n, MPI_DOUBLE, ring, i, r); break;
    }
}

/* Mean seconds per call over `iters` calls, maximum over ranks. */
static MPI_Request persistent = MPI_REQUEST_NULL; /* the point's, form p */
static double measure(int c, int n, int shim, int nb, int iters) {
    PMPI_Barrier(MPI_COMM_WORLD);
    double t0 = PMPI_Wtime();
    if (nb == 2 && shim)
        for (int i = 0; i < iters; i++) MPI_Start(&persistent), MPI_Wait(&persistent, MPI_STATUS_IGNORE);
    else
        for (int i = 0; i < iters; i++) call(c, n, shim, nb != 0);
    double t = (PMPI_Wtime() - t0) / iters, tmax;
    PMPI_Allreduce(&t, &tmax, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return tmax;
}

static int cmpd(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static int (*set_algo)(const char *, const char *);
static int (*list_algos)(const char *, char *, size_t);

/* One median per column of one point. */
typedef struct {
    const char *coll;
    long bytes;
    double system, autot, best;
    char best_name[32];
} point_t;

/* Whether collective c is in the -c list (all when there is none). */
static int selected(const char *colls, int c) {
    if (!colls) return 1;
    char key[64], list[1024];
    snprintf(key, sizeof key, ",%s,", NAMES[c]);
    snprintf(list, sizeof list, ",%s,", colls);
    return strstr(list, key) != NULL;
}

/* Collectives whose message size not every rank knows: the shim decides them by the
 * process count alone (src/hooks/coll.rs), so their tuning is one row at size 0. The v/w
 * forms on two processes are sized (both ends know the one message between them;
 * CollSpec::sized_at in src/services/coll/select/mod.rs). */
static int unsized(int c, int size) {
    if (c == GATHERV || c == SCATTERV || c == ALLTOALLV || c == ALLTOALLW) return size != 2;
    return c == NALLGATHER || c == NALLTOALL;
}

static long next_size(long bytes, long maxb, int grow) {
    return (bytes < maxb && bytes * grow > maxb) ? maxb : bytes * grow;
}

/* The all-algorithms mode: returns the number of points that miss a target. */
static int all_algorithms(const char *colls, long minb, long maxb, int reps, int grow, const char *tune_out) {
    set_algo = (int (*)(const char *, const char *))dlsym(RTLD_DEFAULT, "shim_set_algorithm");
    list_algos = (int (*)(const char *, char *, size_t))dlsym(RTLD_DEFAULT, "shim_algorithms");
    if (!set_algo || !list_algos) {
        if (rank == 0) fprintf(stderr, "latency -a: run with libshim.so preloaded (shim_set_algorithm not found)\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    FILE *tune = NULL;
    if (tune_out && rank == 0) {
        tune = fopen(tune_out, "w");
        if (!tune) { perror(tune_out); MPI_Abort(MPI_COMM_WORLD, 2); }
        fprintf(tune, "# measured by scripts/bench/latency -a at %d ranks: the fastest algorithm per point\n", size);
        /* the model parameters this run used (calibrated with SHIM_CALIBRATE=1) */
        int (*tuning)(char *, size_t) = (int (*)(char *, size_t))dlsym(RTLD_DEFAULT, "shim_tuning");
        int need = tuning ? tuning(NULL, 0) : 0;
        char *text = need > 0 ? malloc(need) : NULL;
        if (text && tuning(text, need) > 0)
            for (char *save, *l = strtok_r(text, "\n", &save); l; l = strtok_r(NULL, "\n", &save))
                if (!strncmp(l, "param ", 6) && strncmp(l, "param shm_rows ", 15)) fprintf(tune, "%s\n", l);
        free(text);
        /* the segment's algorithms (copy-in-copy-out, and single copy beyond the slot) are
         * among the candidates measured: the rows decide where `auto` takes the segment */
        fprintf(tune, "param shm_rows 1\n");
    }
    point_t *pts = calloc(4096, sizeof(point_t));
    int npts = 0;
    double *tab = malloc(sizeof(double) * reps * 32);
    for (int c = 0; c < NCOLL; c++) {
        if (!selected(colls, c)) continue;
        char buf[1024], *names[32];
        int na = 0;
        if (list_algos(NAMES[c], buf, sizeof buf) <= 0) continue;
        for (char *save, *t = strtok_r(buf, ",", &save); t && na < 31; t = strtok_r(NULL, ",", &save)) names[na++] = t;
        /* columns: 0 = system MPI, 1.. = the shim's names ("auto" first) */
        if (rank == 0) {
            printf("\n#### %s (%d ranks%s, blocking, median us)\n\n| bytes | system MPI |", NAMES[c], size, nodes > 1 ? at + strlen(at) + 1 : "");
            for (int a = 0; a < na; a++) printf(" %s |", names[a]);
            printf(" best | auto/best | auto/system |\n|---|---|");
            for (int a = 0; a < na; a++) printf("---|");
            printf("---|---|---|\n");
            fflush(stdout);
        }
        double lgsum[32] = {0}, worst[32] = {0};
        for (long bytes = minb; bytes <= maxb; bytes = next_size(bytes, maxb, grow)) {
            if (c == BARRIER && bytes > minb) break;
            int n = c == BARRIER ? 0 : (int)(bytes / 8);
            double probe = measure(c, n, 0, 0, 2);
            int iters = (int)(0.01 / (probe > 1e-7 ? probe : 1e-7));
            if (iters < 2) iters = 2;
            if (iters > 1000) iters = 1000;
            PMPI_Bcast(&iters, 1, MPI_INT, 0, MPI_COMM_WORLD);
            for (int a = 0; a < na; a++) { /* warm every schedule cache */
                set_algo(NAMES[c], names[a]);
                measure(c, n, 1, 0, 1);
            }
            for (int k = 0; k < reps; k++) {
                /* the order rotates per repetition: at large sizes a column measured right
                 * after another inherits its cache state, which must not favour one column */
                for (int j = 0; j <= na; j++) {
                    int a = (j + k) % (na + 1) - 1; /* -1: the system MPI */
                    if (a < 0) {
                        tab[k] = measure(c, n, 0, 0, iters);
                    } else {
                        set_algo(NAMES[c], names[a]);
                        tab[(a + 1) * reps + k] = measure(c, n, 1, 0, iters);
                    }
                }
            }
            set_algo(NAMES[c], NULL);
            double med[32];
            for (int a = 0; a <= na; a++) {
                qsort(tab + a * reps, reps, sizeof(double), cmpd);
                med[a] = tab[a * reps + reps / 2] * 1e6;
            }
            point_t *p = &pts[npts++];
            p->coll = NAMES[c];
            p->bytes = c == BARRIER ? 0 : bytes;
            p->system = med[0];
            p->autot = med[1];
            p->best = 1e300;
            for (int a = 1; a < na; a++) /* the explicit algorithms, native included */
                if (med[a + 1] < p->best) p->best = med[a + 1], snprintf(p->best_name, sizeof p->best_name, "%s", names[a]);
            if (rank == 0) {
                printf("| %ld | %.2f |", p->bytes, p->system);
                for (int a = 0; a < na; a++) printf(" %.2f |", med[a + 1]);
                printf(" %s | %.2f | %.2f |\n", p->best_name, p->autot / p->best, p->autot / p->system);
                fflush(stdout);
                /* the size the shim decides by: the total for Reduce_scatter(_block) */
                long key = (c == REDUCE_SCATTER || c == REDUCE_SCATTER_BLOCK) ? p->bytes * size : p->bytes;
                if (tune && !unsized(c, size)) fprintf(tune, "best MPI_%s %s %ld %s\n", NAMES[c], at, key, p->best_name);
            }
            for (int a = 1; a < na; a++) {
                lgsum[a] += log(med[a + 1] / p->best);
                if (med[a + 1] / p->best > worst[a]) worst[a] = med[a + 1] / p->best;
            }
        }
        if (tune && unsized(c, size)) {
            /* one row for all sizes: the algorithm whose worst ratio to the best is smallest
             * (a bounded slowdown at every size; ties by the geometric mean) */
            int b = 1;
            for (int a = 1; a < na; a++)
                if (worst[a] < worst[b] - 1e-9 || (fabs(worst[a] - worst[b]) < 1e-9 && lgsum[a] < lgsum[b])) b = a;
            fprintf(tune, "best MPI_%s %s 0 %s\n", NAMES[c], at, names[b]);
        }
    }
    int miss = 0;
    if (rank == 0) {
        double lg = 0, worst_best = 0, worst_sys = 0, reduce_min = 1e300;
        int over_best = 0, over_sys = 0, nreduce = 0;
        for (int i = 0; i < npts; i++) {
            point_t *p = &pts[i];
            lg += log(p->system / p->autot);
            double rb = p->autot / p->best, rs = p->autot / p->system;
            if (rb > worst_best) worst_best = rb;
            if (rs > worst_sys) worst_sys = rs;
            if (rb > 1.10) over_best++, printf("# miss: %s %ld B: auto %.2f us, best (%s) %.2f us, ratio %.2f\n", p->coll, p->bytes, p->autot, p->best_name, p->best, rb);
            if (rs > 1.05) over_sys++, printf("# miss: %s %ld B: auto %.2f us, system MPI %.2f us, ratio %.2f\n", p->coll, p->bytes, p->autot, p->system, rs);
            if (!strcmp(p->coll, "Reduce") && p->bytes >= 256 << 10) {
                nreduce++;
                if (p->system / p->autot < reduce_min) reduce_min = p->system / p->autot;
            }
        }
        printf("\n#### Summary (%d ranks, %d points)\n\n", size, npts);
        printf("- auto within 10%% of the best algorithm: %d of %d points (worst auto/best %.2f)\n", npts - over_best, npts, worst_best);
        printf("- auto at most 5%% slower than the system MPI: %d of %d points (worst auto/system %.2f)\n", npts - over_sys, npts, worst_sys);
        printf("- geometric mean speedup over the system MPI: %.3f\n", npts ? exp(lg / npts) : 0.0);
        if (nreduce) printf("- Reduce at >= 256 KiB: at least %.2fx faster than the system MPI\n", reduce_min);
        fflush(stdout);
        miss = over_best + over_sys + (nreduce && reduce_min < 2.0) + (npts && exp(lg / npts) <= 1.0);
        if (tune) fclose(tune);
    }
    PMPI_Bcast(&miss, 1, MPI_INT, 0, MPI_COMM_WORLD);
    free(pts);
    free(tab);
    return miss;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    {
        MPI_Comm node;
        int lr, first;
        MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
        MPI_Comm_rank(node, &lr);
        first = lr == 0;
        MPI_Allreduce(&first, &nodes, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        MPI_Comm_free(&node);
        /* "P" or "P/N", then (after its NUL) " on N nodes" for the tables' headings */
        int n = nodes > 1 ? snprintf(at, sizeof at, "%d/%d", size, nodes) : snprintf(at, sizeof at, "%d", size);
        snprintf(at + n + 1, sizeof at - n - 1, " on %d nodes", nodes);
    }
    long minb = 8, maxb = 4l << 20;
    int reps = 7;
    const char *colls = NULL, *forms = "bn", *tune_out = NULL;
    int all = 0, grow = 0;
    for (int i = 1; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : "0";
        if (!strcmp(argv[i], "-a")) { all = 1; continue; }
        if (!strcmp(argv[i], "-R")) { rotate = 1; continue; }
        if (!strcmp(argv[i], "-c")) colls = v;
        else if (!strcmp(argv[i], "-s")) minb = atol(v);
        else if (!strcmp(argv[i], "-S")) maxb = atol(v);
        else if (!strcmp(argv[i], "-r")) reps = atoi(v);
        else if (!strcmp(argv[i], "-f")) forms = v;
        else if (!strcmp(argv[i], "-x")) grow = atoi(v);
        else if (!strcmp(argv[i], "-o")) tune_out = v;
        else {
            if (rank == 0) fprintf(stderr, "latency: unknown option %s\n", argv[i]);
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
        i++;
    }
    size_t elems = (size_t)(maxb / 8 + 1) * size;
    sbuf = calloc(elems, 8);
    rbuf = calloc(elems, 8);
    counts = calloc(size, sizeof(int));
    displs = calloc(size, sizeof(int));
    bdispls = calloc(size, sizeof(int));
    types = calloc(size, sizeof(MPI_Datatype));
    for (int i = 0; i < size; i++) types[i] = MPI_DOUBLE;
    int dims[1] = {size}, periods[1] = {1};
    MPI_Cart_create(MPI_COMM_WORLD, 1, dims, periods, 0, &ring);
    if (all) {
        all_algorithms(colls, minb, maxb, reps, grow ? grow : 4, tune_out);
        MPI_Comm_free(&ring);
        MPI_Finalize();
        return 0;
    }
    if (!grow) grow = 8;
    if (rank == 0) {
        printf("| collective | form | bytes | system MPI (us) | shim (us) | shim/system |\n");
        printf("|---|---|---|---|---|---|\n");
        fflush(stdout);
    }
    double *tn = malloc(sizeof(double) * reps), *ts = malloc(sizeof(double) * reps);
    for (int c = 0; c < NCOLL; c++) {
        if (!selected(colls, c)) continue;
        for (const char *f = forms; *f; f++) {
            int nb = *f == 'n' ? 1 : *f == 'p' ? 2 : 0;
            for (long bytes = minb; bytes <= maxb; bytes = next_size(bytes, maxb, grow)) {
                if (c == BARRIER && bytes > minb) break;
                int n = c == BARRIER ? 0 : (int)(bytes / 8);
                /* about 20 ms of work per measurement, at least 3 calls */
                double probe = measure(c, n, 0, nb, 2);
                int iters = (int)(0.02 / (probe > 1e-7 ? probe : 1e-7));
                if (iters < 3) iters = 3;
                if (iters > 2000) iters = 2000;
                PMPI_Bcast(&iters, 1, MPI_INT, 0, MPI_COMM_WORLD);
                /* one persistent collective per point, freed at its end: the next one
                   takes its channel of the segment (before stop 64 the first
                   SHIM_SHM_CHANNELS initialized took them all, so runs set it to 64) */
#ifdef LATENCY_WEAK_PERSISTENT
                if (nb == 2 && !MPI_Bcast_init) {
                    if (rank == 0) fprintf(stderr, "latency: -f p needs libshim.so preloaded\n");
                    MPI_Abort(MPI_COMM_WORLD, 2);
                }
#endif
                if (nb == 2) pinit(c, n, &persistent);
                measure(c, n, 1, nb, 2); /* warm the shim's schedule cache */
                for (int k = 0; k < reps; k++) {
                    tn[k] = measure(c, n, 0, nb, iters);
                    ts[k] = measure(c, n, 1, nb, iters);
                }
                if (nb == 2) MPI_Request_free(&persistent);
                qsort(tn, reps, sizeof(double), cmpd);
                qsort(ts, reps, sizeof(double), cmpd);
                double a = tn[reps / 2] * 1e6, b = ts[reps / 2] * 1e6;
                if (rank == 0) {
                    printf("| %s | %s | %ld | %.2f | %.2f | %.2f |\n", NAMES[c],
                           nb == 2 ? "persistent" : nb ? "I*+Wait" : "blocking",
                           c == BARRIER ? 0 : bytes, a, b, b / a);
                    fflush(stdout);
                }
            }
        }
    }
    MPI_Comm_free(&ring);
    MPI_Finalize();
    return 0;
}

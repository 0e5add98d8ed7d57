/* Collective latency, the shim versus the system MPI, in one run.
 *
 * Run with libshim preloaded: MPI_* calls go through the shim, PMPI_* calls straight to
 * the system MPI. For every collective, form (blocking; I* + Wait) and size, the two are
 * measured alternately, REPS times each; a measurement is the maximum over ranks of the
 * mean time per call over a loop; the table gives the median of each and the ratio.
 *
 * Usage: latency [-c coll,coll,...] [-s minbytes] [-S maxbytes] [-r reps] [-f forms]
 *   sizes grow by 8x from minbytes (8), ending at maxbytes (4 MiB); forms: b (blocking), n (I*+Wait)
 * Output: one markdown table row per point on rank 0's stdout. */
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
static double *sbuf, *rbuf;
static int *counts, *displs, *bdispls;
static MPI_Datatype *types;
static MPI_Comm ring;

/* One call of collective c with n doubles per block, through the shim or the system MPI. */
static void call(int c, int n, int shim, int nb) {
    MPI_Request rq;
    MPI_Request *r = nb ? &rq : NULL;
    MPI_Comm w = MPI_COMM_WORLD;
    for (int i = 0; i < size; i++) counts[i] = n, displs[i] = i * n, bdispls[i] = i * n * 8;
#define PICK(BLK, NB) \
    do { \
        if (!shim) { if (r) P##NB; else P##BLK; } \
        else { if (r) NB; else BLK; } \
    } while (0)
    switch (c) {
    case BARRIER: PICK(MPI_Barrier(w), MPI_Ibarrier(w, r)); break;
    case BCAST: PICK(MPI_Bcast(sbuf, n, MPI_DOUBLE, 0, w), MPI_Ibcast(sbuf, n, MPI_DOUBLE, 0, w, r)); break;
    case GATHER: PICK(MPI_Gather(sbuf, n, MPI_DOUBLE, rbuf, n, MPI_DOUBLE, 0, w), MPI_Igather(sbuf, n, MPI_DOUBLE, rbuf, n, MPI_DOUBLE, 0, w, r)); break;
    case GATHERV: PICK(MPI_Gatherv(sbuf, n, MPI_DOUBLE, rbuf, counts, displs, MPI_DOUBLE, 0, w), MPI_Igatherv(sbuf, n, MPI_DOUBLE, rbuf, counts, displs, MPI_DOUBLE, 0, w, r)); break;
    case SCATTER: PICK(MPI_Scatter(sbuf, n, MPI_DOUBLE, rbuf, n, MPI_DOUBLE, 0, w), MPI_Iscatter(sbuf, n, MPI_DOUBLE, rbuf, n, MPI_DOUBLE, 0, w, r)); break;
    case SCATTERV: PICK(MPI_Scatterv(sbuf, counts, displs, MPI_DOUBLE, rbuf, n, MPI_DOUBLE, 0, w), MPI_Iscatterv(sbuf, counts, displs, MPI_DOUBLE, rbuf, n, MPI_DOUBLE, 0, w, r)); break;
    case ALLGATHER: PICK(MPI_Allgather(sbuf, n, MPI_DOUBLE, rbuf, n, MPI_DOUBLE, w), MPI_Iallgather(sbuf, n, MPI_DOUBLE, rbuf, n, MPI_DOUBLE, w, r)); break;
    case ALLGATHERV: PICK(MPI_Allgatherv(sbuf, n, MPI_DOUBLE, rbuf, counts, displs, MPI_DOUBLE, w), MPI_Iallgatherv(sbuf, n, MPI_DOUBLE, rbuf, counts, displs, MPI_DOUBLE, w, r)); break;
    case ALLTOALL: PICK(MPI_Alltoall(sbuf, n, MPI_DOUBLE, rbuf, n, MPI_DOUBLE, w), MPI_Ialltoall(sbuf, n, MPI_DOUBLE, rbuf, n, MPI_DOUBLE, w, r)); break;
    case ALLTOALLV: PICK(MPI_Alltoallv(sbuf, counts, displs, MPI_DOUBLE, rbuf, counts, displs, MPI_DOUBLE, w), MPI_Ialltoallv(sbuf, counts, displs, MPI_DOUBLE, rbuf, counts, displs, MPI_DOUBLE, w, r)); break;
    case ALLTOALLW: PICK(MPI_Alltoallw(sbuf, counts, bdispls, types, rbuf, counts, bdispls, types, w), MPI_Ialltoallw(sbuf, counts, bdispls, types, rbuf, counts, bdispls, types, w, r)); break;
    case REDUCE: PICK(MPI_Reduce(sbuf, rbuf, n, MPI_DOUBLE, MPI_SUM, 0, w), MPI_Ireduce(sbuf, rbuf, n, MPI_DOUBLE, MPI_SUM, 0, w, r)); break;
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

/* Mean seconds per call over `iters` calls, maximum over ranks. */
static double measure(int c, int n, int shim, int nb, int iters) {
    PMPI_Barrier(MPI_COMM_WORLD);
    double t0 = PMPI_Wtime();
    for (int i = 0; i < iters; i++) call(c, n, shim, nb);
    double t = (PMPI_Wtime() - t0) / iters, tmax;
    PMPI_Allreduce(&t, &tmax, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return tmax;
}

static int cmpd(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    long minb = 8, maxb = 4l << 20;
    int reps = 7;
    const char *colls = NULL, *forms = "bn";
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "-c")) colls = argv[i + 1];
        else if (!strcmp(argv[i], "-s")) minb = atol(argv[i + 1]);
        else if (!strcmp(argv[i], "-S")) maxb = atol(argv[i + 1]);
        else if (!strcmp(argv[i], "-r")) reps = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-f")) forms = argv[i + 1];
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
    if (rank == 0) {
        printf("| collective | form | bytes | system MPI (us) | shim (us) | shim/system |\n");
        printf("|---|---|---|---|---|---|\n");
        fflush(stdout);
    }
    double *tn = malloc(sizeof(double) * reps), *ts = malloc(sizeof(double) * reps);
    for (int c = 0; c < NCOLL; c++) {
        if (colls) {
            char key[64];
            snprintf(key, sizeof key, ",%s,", NAMES[c]);
            char list[1024];
            snprintf(list, sizeof list, ",%s,", colls);
            if (!strstr(list, key)) continue;
        }
        for (const char *f = forms; *f; f++) {
            int nb = *f == 'n';
            for (long bytes = minb; bytes <= maxb; bytes = (bytes < maxb && bytes * 8 > maxb) ? maxb : bytes * 8) {
                if (c == BARRIER && bytes > minb) break;
                int n = c == BARRIER ? 0 : (int)(bytes / 8);
                /* about 20 ms of work per measurement, at least 3 calls */
                double probe = measure(c, n, 0, nb, 2);
                int iters = (int)(0.02 / (probe > 1e-7 ? probe : 1e-7));
                if (iters < 3) iters = 3;
                if (iters > 2000) iters = 2000;
                PMPI_Bcast(&iters, 1, MPI_INT, 0, MPI_COMM_WORLD);
                measure(c, n, 1, nb, 2); /* warm the shim's schedule cache */
                for (int k = 0; k < reps; k++) {
                    tn[k] = measure(c, n, 0, nb, iters);
                    ts[k] = measure(c, n, 1, nb, iters);
                }
                qsort(tn, reps, sizeof(double), cmpd);
                qsort(ts, reps, sizeof(double), cmpd);
                double a = tn[reps / 2] * 1e6, b = ts[reps / 2] * 1e6;
                if (rank == 0) {
                    printf("| %s | %s | %ld | %.2f | %.2f | %.2f |\n", NAMES[c], nb ? "I*+Wait" : "blocking",
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

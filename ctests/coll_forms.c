/* Every MPI-4.0 collective in every form the shim exports: blocking, non-blocking (I*),
 * persistent (*_init, started twice), and the large-count _c variants of each, plus the
 * neighbourhood collectives on a periodic Cartesian ring. Results are checked against
 * values computed here; at the end every form must have been intercepted. */
#include "common.h"

enum form { BLK, NB, PERS, BLK_C, NB_C, PERS_C, NFORMS };
static const char *form_name[] = {"blocking", "I*", "*_init", "_c", "I*_c", "*_init_c"};

/* Completes one collective call in the given form (`req` from the I* or *_init call). */
static void complete(enum form f, MPI_Request *req) {
    if (f == NB || f == NB_C) {
        MPI_OK(MPI_Wait(req, MPI_STATUS_IGNORE));
    } else if (f == PERS || f == PERS_C) {
        for (int k = persistent_starts(); k > 0; k--) {
            MPI_OK(MPI_Start(req));
            MPI_OK(MPI_Wait(req, MPI_STATUS_IGNORE));
        }
        MPI_OK(MPI_Request_free(req));
    }
}

/* CTEST_SKIP="t_scatter:*_init,..." skips forms (to survey several failures at once). */
static int skipped(const char *fn, enum form f) {
    const char *s = getenv("CTEST_SKIP");
    char key[96];
    snprintf(key, sizeof key, "%s:%s", fn, form_name[f]);
    return s && strstr(s, key) != NULL;
}

#define DISPATCH(f, req, BLKCALL, NBCALL, PCALL, BLKC, NBC, PC) \
    if (getenv("CTEST_TRACE") && g_rank == 0)                    \
        fprintf(stderr, "trace: %s %s\n", __func__, form_name[f]); \
    if (skipped(__func__, f)) return;                            \
    switch (f) {                                                  \
    case BLK: MPI_OK(BLKCALL); break;                            \
    case NB: MPI_OK(NBCALL); break;                              \
    case PERS: MPI_OK(PCALL); break;                             \
    case BLK_C: MPI_OK(BLKC); break;                             \
    case NB_C: MPI_OK(NBC); break;                               \
    case PERS_C: MPI_OK(PC); break;                              \
    default: break;                                              \
    }                                                            \
    complete(f, &req)

static void t_barrier(enum form f) {
    MPI_Request req;
    if (f >= BLK_C) return; /* no _c forms */
    DISPATCH(f, req, MPI_Barrier(MPI_COMM_WORLD), MPI_Ibarrier(MPI_COMM_WORLD, &req),
             MPI_Barrier_init(MPI_COMM_WORLD, MPI_INFO_NULL, &req), 0, 0, 0);
}

static void t_bcast(enum form f) {
    int buf[3], root = g_size - 1;
    MPI_Request req;
    for (int i = 0; i < 3; i++) buf[i] = g_rank == root ? 100 + i : -1;
    DISPATCH(f, req, MPI_Bcast(buf, 3, MPI_INT, root, MPI_COMM_WORLD),
             MPI_Ibcast(buf, 3, MPI_INT, root, MPI_COMM_WORLD, &req),
             MPI_Bcast_init(buf, 3, MPI_INT, root, MPI_COMM_WORLD, MPI_INFO_NULL, &req),
             MPI_Bcast_c(buf, 3, MPI_INT, root, MPI_COMM_WORLD),
             MPI_Ibcast_c(buf, 3, MPI_INT, root, MPI_COMM_WORLD, &req),
             MPI_Bcast_init_c(buf, 3, MPI_INT, root, MPI_COMM_WORLD, MPI_INFO_NULL, &req));
    for (int i = 0; i < 3; i++) CHECK(buf[i] == 100 + i, "bcast %s: buf[%d]=%d", form_name[f], i, buf[i]);
}

static void t_gather(enum form f) {
    int send[2] = {g_rank * 10, g_rank * 10 + 1}, root = 0;
    int *recv = malloc(sizeof(int) * 2 * g_size);
    MPI_Request req;
    DISPATCH(f, req, MPI_Gather(send, 2, MPI_INT, recv, 2, MPI_INT, root, MPI_COMM_WORLD),
             MPI_Igather(send, 2, MPI_INT, recv, 2, MPI_INT, root, MPI_COMM_WORLD, &req),
             MPI_Gather_init(send, 2, MPI_INT, recv, 2, MPI_INT, root, MPI_COMM_WORLD, MPI_INFO_NULL, &req),
             MPI_Gather_c(send, 2, MPI_INT, recv, 2, MPI_INT, root, MPI_COMM_WORLD),
             MPI_Igather_c(send, 2, MPI_INT, recv, 2, MPI_INT, root, MPI_COMM_WORLD, &req),
             MPI_Gather_init_c(send, 2, MPI_INT, recv, 2, MPI_INT, root, MPI_COMM_WORLD, MPI_INFO_NULL, &req));
    if (g_rank == root)
        for (int r = 0; r < g_size; r++)
            CHECK(recv[2 * r] == r * 10 && recv[2 * r + 1] == r * 10 + 1, "gather %s from %d", form_name[f], r);
    free(recv);
}

/* v-variants: rank r contributes r+1 ints of value r */
static void vlayout(int *counts, int *displs, MPI_Count *ccounts, MPI_Aint *cdispls, int *total) {
    int d = 0;
    for (int r = 0; r < g_size; r++) {
        counts[r] = r + 1;
        displs[r] = d;
        ccounts[r] = r + 1;
        cdispls[r] = d;
        d += r + 1;
    }
    *total = d;
}

static void check_vlayout(const int *buf, const char *what, enum form f) {
    int k = 0;
    for (int r = 0; r < g_size; r++)
        for (int i = 0; i <= r; i++, k++) CHECK(buf[k] == r, "%s %s: element %d = %d", what, form_name[f], k, buf[k]);
}

static void t_gatherv(enum form f) {
    int counts[64], displs[64], total, root = g_size / 2;
    MPI_Count cc[64];
    MPI_Aint cd[64];
    vlayout(counts, displs, cc, cd, &total);
    int *send = malloc(sizeof(int) * (g_rank + 1)), *recv = malloc(sizeof(int) * total);
    for (int i = 0; i <= g_rank; i++) send[i] = g_rank;
    MPI_Request req;
    DISPATCH(f, req, MPI_Gatherv(send, g_rank + 1, MPI_INT, recv, counts, displs, MPI_INT, root, MPI_COMM_WORLD),
             MPI_Igatherv(send, g_rank + 1, MPI_INT, recv, counts, displs, MPI_INT, root, MPI_COMM_WORLD, &req),
             MPI_Gatherv_init(send, g_rank + 1, MPI_INT, recv, counts, displs, MPI_INT, root, MPI_COMM_WORLD, MPI_INFO_NULL, &req),
             MPI_Gatherv_c(send, g_rank + 1, MPI_INT, recv, cc, cd, MPI_INT, root, MPI_COMM_WORLD),
             MPI_Igatherv_c(send, g_rank + 1, MPI_INT, recv, cc, cd, MPI_INT, root, MPI_COMM_WORLD, &req),
             MPI_Gatherv_init_c(send, g_rank + 1, MPI_INT, recv, cc, cd, MPI_INT, root, MPI_COMM_WORLD, MPI_INFO_NULL, &req));
    if (g_rank == root) check_vlayout(recv, "gatherv", f);
    free(send);
    free(recv);
}

static void t_scatter(enum form f) {
    int root = 0, recv[2] = {-1, -1};
    int *send = malloc(sizeof(int) * 2 * g_size);
    for (int i = 0; i < 2 * g_size; i++) send[i] = i;
    MPI_Request req;
    DISPATCH(f, req, MPI_Scatter(send, 2, MPI_INT, recv, 2, MPI_INT, root, MPI_COMM_WORLD),
             MPI_Iscatter(send, 2, MPI_INT, recv, 2, MPI_INT, root, MPI_COMM_WORLD, &req),
             MPI_Scatter_init(send, 2, MPI_INT, recv, 2, MPI_INT, root, MPI_COMM_WORLD, MPI_INFO_NULL, &req),
             MPI_Scatter_c(send, 2, MPI_INT, recv, 2, MPI_INT, root, MPI_COMM_WORLD),
             MPI_Iscatter_c(send, 2, MPI_INT, recv, 2, MPI_INT, root, MPI_COMM_WORLD, &req),
             MPI_Scatter_init_c(send, 2, MPI_INT, recv, 2, MPI_INT, root, MPI_COMM_WORLD, MPI_INFO_NULL, &req));
    CHECK(recv[0] == 2 * g_rank && recv[1] == 2 * g_rank + 1, "scatter %s: %d %d", form_name[f], recv[0], recv[1]);
    free(send);
}

static void t_scatterv(enum form f) {
    int counts[64], displs[64], total, root = g_size - 1;
    MPI_Count cc[64];
    MPI_Aint cd[64];
    vlayout(counts, displs, cc, cd, &total);
    int *send = malloc(sizeof(int) * total), *recv = malloc(sizeof(int) * (g_rank + 1));
    for (int r = 0, k = 0; r < g_size; r++)
        for (int i = 0; i <= r; i++) send[k++] = r;
    MPI_Request req;
    DISPATCH(f, req, MPI_Scatterv(send, counts, displs, MPI_INT, recv, g_rank + 1, MPI_INT, root, MPI_COMM_WORLD),
             MPI_Iscatterv(send, counts, displs, MPI_INT, recv, g_rank + 1, MPI_INT, root, MPI_COMM_WORLD, &req),
             MPI_Scatterv_init(send, counts, displs, MPI_INT, recv, g_rank + 1, MPI_INT, root, MPI_COMM_WORLD, MPI_INFO_NULL, &req),
             MPI_Scatterv_c(send, cc, cd, MPI_INT, recv, g_rank + 1, MPI_INT, root, MPI_COMM_WORLD),
             MPI_Iscatterv_c(send, cc, cd, MPI_INT, recv, g_rank + 1, MPI_INT, root, MPI_COMM_WORLD, &req),
             MPI_Scatterv_init_c(send, cc, cd, MPI_INT, recv, g_rank + 1, MPI_INT, root, MPI_COMM_WORLD, MPI_INFO_NULL, &req));
    for (int i = 0; i <= g_rank; i++) CHECK(recv[i] == g_rank, "scatterv %s", form_name[f]);
    free(send);
    free(recv);
}

static void t_allgather(enum form f) {
    int send = g_rank * 3, *recv = malloc(sizeof(int) * g_size);
    MPI_Request req;
    DISPATCH(f, req, MPI_Allgather(&send, 1, MPI_INT, recv, 1, MPI_INT, MPI_COMM_WORLD),
             MPI_Iallgather(&send, 1, MPI_INT, recv, 1, MPI_INT, MPI_COMM_WORLD, &req),
             MPI_Allgather_init(&send, 1, MPI_INT, recv, 1, MPI_INT, MPI_COMM_WORLD, MPI_INFO_NULL, &req),
             MPI_Allgather_c(&send, 1, MPI_INT, recv, 1, MPI_INT, MPI_COMM_WORLD),
             MPI_Iallgather_c(&send, 1, MPI_INT, recv, 1, MPI_INT, MPI_COMM_WORLD, &req),
             MPI_Allgather_init_c(&send, 1, MPI_INT, recv, 1, MPI_INT, MPI_COMM_WORLD, MPI_INFO_NULL, &req));
    for (int r = 0; r < g_size; r++) CHECK(recv[r] == 3 * r, "allgather %s", form_name[f]);
    free(recv);
}

static void t_allgatherv(enum form f) {
    int counts[64], displs[64], total;
    MPI_Count cc[64];
    MPI_Aint cd[64];
    vlayout(counts, displs, cc, cd, &total);
    int *send = malloc(sizeof(int) * (g_rank + 1)), *recv = malloc(sizeof(int) * total);
    for (int i = 0; i <= g_rank; i++) send[i] = g_rank;
    MPI_Request req;
    DISPATCH(f, req, MPI_Allgatherv(send, g_rank + 1, MPI_INT, recv, counts, displs, MPI_INT, MPI_COMM_WORLD),
             MPI_Iallgatherv(send, g_rank + 1, MPI_INT, recv, counts, displs, MPI_INT, MPI_COMM_WORLD, &req),
             MPI_Allgatherv_init(send, g_rank + 1, MPI_INT, recv, counts, displs, MPI_INT, MPI_COMM_WORLD, MPI_INFO_NULL, &req),
             MPI_Allgatherv_c(send, g_rank + 1, MPI_INT, recv, cc, cd, MPI_INT, MPI_COMM_WORLD),
             MPI_Iallgatherv_c(send, g_rank + 1, MPI_INT, recv, cc, cd, MPI_INT, MPI_COMM_WORLD, &req),
             MPI_Allgatherv_init_c(send, g_rank + 1, MPI_INT, recv, cc, cd, MPI_INT, MPI_COMM_WORLD, MPI_INFO_NULL, &req));
    check_vlayout(recv, "allgatherv", f);
    free(send);
    free(recv);
}

static void t_alltoall(enum form f) {
    int *send = malloc(sizeof(int) * g_size), *recv = malloc(sizeof(int) * g_size);
    for (int r = 0; r < g_size; r++) send[r] = g_rank * 1000 + r;
    MPI_Request req;
    DISPATCH(f, req, MPI_Alltoall(send, 1, MPI_INT, recv, 1, MPI_INT, MPI_COMM_WORLD),
             MPI_Ialltoall(send, 1, MPI_INT, recv, 1, MPI_INT, MPI_COMM_WORLD, &req),
             MPI_Alltoall_init(send, 1, MPI_INT, recv, 1, MPI_INT, MPI_COMM_WORLD, MPI_INFO_NULL, &req),
             MPI_Alltoall_c(send, 1, MPI_INT, recv, 1, MPI_INT, MPI_COMM_WORLD),
             MPI_Ialltoall_c(send, 1, MPI_INT, recv, 1, MPI_INT, MPI_COMM_WORLD, &req),
             MPI_Alltoall_init_c(send, 1, MPI_INT, recv, 1, MPI_INT, MPI_COMM_WORLD, MPI_INFO_NULL, &req));
    for (int r = 0; r < g_size; r++) CHECK(recv[r] == r * 1000 + g_rank, "alltoall %s", form_name[f]);
    free(send);
    free(recv);
}

/* alltoallv/w: rank r sends (s+1) ints of value r*100+s to rank s */
static void t_alltoallv(enum form f, int w) {
    int sc[64], sd[64], rc[64], rd[64], st = 0, rt = 0;
    MPI_Count csc[64], crc[64];
    MPI_Aint csd[64], crd[64], bsd[64], brd[64];
    MPI_Datatype types[64];
    for (int r = 0; r < g_size; r++) {
        sc[r] = r + 1, sd[r] = st, st += r + 1;
        rc[r] = g_rank + 1, rd[r] = rt, rt += g_rank + 1;
        csc[r] = sc[r], csd[r] = sd[r], crc[r] = rc[r], crd[r] = rd[r];
        bsd[r] = sd[r] * (MPI_Aint)sizeof(int), brd[r] = rd[r] * (MPI_Aint)sizeof(int);
        types[r] = MPI_INT;
    }
    int *send = malloc(sizeof(int) * st), *recv = malloc(sizeof(int) * rt);
    for (int r = 0; r < g_size; r++)
        for (int i = 0; i < sc[r]; i++) send[sd[r] + i] = g_rank * 100 + r;
    MPI_Request req;
    if (!w) {
        DISPATCH(f, req, MPI_Alltoallv(send, sc, sd, MPI_INT, recv, rc, rd, MPI_INT, MPI_COMM_WORLD),
                 MPI_Ialltoallv(send, sc, sd, MPI_INT, recv, rc, rd, MPI_INT, MPI_COMM_WORLD, &req),
                 MPI_Alltoallv_init(send, sc, sd, MPI_INT, recv, rc, rd, MPI_INT, MPI_COMM_WORLD, MPI_INFO_NULL, &req),
                 MPI_Alltoallv_c(send, csc, csd, MPI_INT, recv, crc, crd, MPI_INT, MPI_COMM_WORLD),
                 MPI_Ialltoallv_c(send, csc, csd, MPI_INT, recv, crc, crd, MPI_INT, MPI_COMM_WORLD, &req),
                 MPI_Alltoallv_init_c(send, csc, csd, MPI_INT, recv, crc, crd, MPI_INT, MPI_COMM_WORLD, MPI_INFO_NULL, &req));
    } else {
        int bsdi[64], brdi[64];
        for (int r = 0; r < g_size; r++) bsdi[r] = (int)bsd[r], brdi[r] = (int)brd[r];
        DISPATCH(f, req, MPI_Alltoallw(send, sc, bsdi, types, recv, rc, brdi, types, MPI_COMM_WORLD),
                 MPI_Ialltoallw(send, sc, bsdi, types, recv, rc, brdi, types, MPI_COMM_WORLD, &req),
                 MPI_Alltoallw_init(send, sc, bsdi, types, recv, rc, brdi, types, MPI_COMM_WORLD, MPI_INFO_NULL, &req),
                 MPI_Alltoallw_c(send, csc, bsd, types, recv, crc, brd, types, MPI_COMM_WORLD),
                 MPI_Ialltoallw_c(send, csc, bsd, types, recv, crc, brd, types, MPI_COMM_WORLD, &req),
                 MPI_Alltoallw_init_c(send, csc, bsd, types, recv, crc, brd, types, MPI_COMM_WORLD, MPI_INFO_NULL, &req));
    }
    for (int r = 0; r < g_size; r++)
        for (int i = 0; i < rc[r]; i++)
            CHECK(recv[rd[r] + i] == r * 100 + g_rank, "alltoall%s %s from %d", w ? "w" : "v", form_name[f], r);
    free(send);
    free(recv);
}

static void t_reduce(enum form f) {
    int send[2] = {g_rank + 1, -g_rank}, recv[2] = {0, 0}, root = g_size - 1;
    MPI_Request req;
    DISPATCH(f, req, MPI_Reduce(send, recv, 2, MPI_INT, MPI_SUM, root, MPI_COMM_WORLD),
             MPI_Ireduce(send, recv, 2, MPI_INT, MPI_SUM, root, MPI_COMM_WORLD, &req),
             MPI_Reduce_init(send, recv, 2, MPI_INT, MPI_SUM, root, MPI_COMM_WORLD, MPI_INFO_NULL, &req),
             MPI_Reduce_c(send, recv, 2, MPI_INT, MPI_SUM, root, MPI_COMM_WORLD),
             MPI_Ireduce_c(send, recv, 2, MPI_INT, MPI_SUM, root, MPI_COMM_WORLD, &req),
             MPI_Reduce_init_c(send, recv, 2, MPI_INT, MPI_SUM, root, MPI_COMM_WORLD, MPI_INFO_NULL, &req));
    int n = g_size;
    if (g_rank == root) CHECK(recv[0] == n * (n + 1) / 2 && recv[1] == -n * (n - 1) / 2, "reduce %s", form_name[f]);
}

static void t_allreduce(enum form f) {
    double send = g_rank, recv = -1;
    MPI_Request req;
    DISPATCH(f, req, MPI_Allreduce(&send, &recv, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD),
             MPI_Iallreduce(&send, &recv, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD, &req),
             MPI_Allreduce_init(&send, &recv, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD, MPI_INFO_NULL, &req),
             MPI_Allreduce_c(&send, &recv, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD),
             MPI_Iallreduce_c(&send, &recv, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD, &req),
             MPI_Allreduce_init_c(&send, &recv, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD, MPI_INFO_NULL, &req));
    CHECK(recv == g_size - 1, "allreduce %s: %g", form_name[f], recv);
}

static void t_reduce_scatter(enum form f) {
    int counts[64], displs[64], total;
    MPI_Count cc[64];
    MPI_Aint cd[64];
    vlayout(counts, displs, cc, cd, &total);
    int *send = malloc(sizeof(int) * total), *recv = malloc(sizeof(int) * (g_rank + 1));
    for (int i = 0; i < total; i++) send[i] = i + g_rank;
    MPI_Request req;
    DISPATCH(f, req, MPI_Reduce_scatter(send, recv, counts, MPI_INT, MPI_SUM, MPI_COMM_WORLD),
             MPI_Ireduce_scatter(send, recv, counts, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &req),
             MPI_Reduce_scatter_init(send, recv, counts, MPI_INT, MPI_SUM, MPI_COMM_WORLD, MPI_INFO_NULL, &req),
             MPI_Reduce_scatter_c(send, recv, cc, MPI_INT, MPI_SUM, MPI_COMM_WORLD),
             MPI_Ireduce_scatter_c(send, recv, cc, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &req),
             MPI_Reduce_scatter_init_c(send, recv, cc, MPI_INT, MPI_SUM, MPI_COMM_WORLD, MPI_INFO_NULL, &req));
    int n = g_size;
    for (int i = 0; i <= g_rank; i++) {
        int idx = displs[g_rank] + i;
        CHECK(recv[i] == n * idx + n * (n - 1) / 2, "reduce_scatter %s", form_name[f]);
    }
    free(send);
    free(recv);
}

static void t_reduce_scatter_block(enum form f) {
    int *send = malloc(sizeof(int) * 2 * g_size), recv[2];
    for (int i = 0; i < 2 * g_size; i++) send[i] = i * (g_rank + 1);
    MPI_Request req;
    DISPATCH(f, req, MPI_Reduce_scatter_block(send, recv, 2, MPI_INT, MPI_SUM, MPI_COMM_WORLD),
             MPI_Ireduce_scatter_block(send, recv, 2, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &req),
             MPI_Reduce_scatter_block_init(send, recv, 2, MPI_INT, MPI_SUM, MPI_COMM_WORLD, MPI_INFO_NULL, &req),
             MPI_Reduce_scatter_block_c(send, recv, 2, MPI_INT, MPI_SUM, MPI_COMM_WORLD),
             MPI_Ireduce_scatter_block_c(send, recv, 2, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &req),
             MPI_Reduce_scatter_block_init_c(send, recv, 2, MPI_INT, MPI_SUM, MPI_COMM_WORLD, MPI_INFO_NULL, &req));
    int n = g_size, s = n * (n + 1) / 2;
    CHECK(recv[0] == 2 * g_rank * s && recv[1] == (2 * g_rank + 1) * s, "reduce_scatter_block %s", form_name[f]);
    free(send);
}

static void t_scan(enum form f, int ex) {
    long send = g_rank + 1, recv = -7;
    MPI_Request req;
    if (!ex) {
        DISPATCH(f, req, MPI_Scan(&send, &recv, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD),
                 MPI_Iscan(&send, &recv, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD, &req),
                 MPI_Scan_init(&send, &recv, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD, MPI_INFO_NULL, &req),
                 MPI_Scan_c(&send, &recv, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD),
                 MPI_Iscan_c(&send, &recv, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD, &req),
                 MPI_Scan_init_c(&send, &recv, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD, MPI_INFO_NULL, &req));
        CHECK(recv == (long)(g_rank + 1) * (g_rank + 2) / 2, "scan %s", form_name[f]);
    } else {
        DISPATCH(f, req, MPI_Exscan(&send, &recv, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD),
                 MPI_Iexscan(&send, &recv, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD, &req),
                 MPI_Exscan_init(&send, &recv, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD, MPI_INFO_NULL, &req),
                 MPI_Exscan_c(&send, &recv, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD),
                 MPI_Iexscan_c(&send, &recv, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD, &req),
                 MPI_Exscan_init_c(&send, &recv, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD, MPI_INFO_NULL, &req));
        if (g_rank > 0) CHECK(recv == (long)g_rank * (g_rank + 1) / 2, "exscan %s", form_name[f]);
    }
}

/* Neighbourhood collectives on a periodic 1-D Cartesian ring: neighbours are (left, right). */
static void t_neighbor(enum form f, MPI_Comm ring) {
    int left = (g_rank - 1 + g_size) % g_size, right = (g_rank + 1) % g_size;
    int send[2] = {g_rank, g_rank}, recv[2] = {-1, -1};
    int c1[2] = {1, 1}, d1[2] = {0, 1};
    MPI_Count cc1[2] = {1, 1};
    MPI_Aint cd1[2] = {0, 1}, bd[2] = {0, sizeof(int)};
    int bdi[2] = {0, sizeof(int)};
    MPI_Datatype ty[2] = {MPI_INT, MPI_INT};
    MPI_Request req;
    DISPATCH(f, req, MPI_Neighbor_allgather(send, 1, MPI_INT, recv, 1, MPI_INT, ring),
             MPI_Ineighbor_allgather(send, 1, MPI_INT, recv, 1, MPI_INT, ring, &req),
             MPI_Neighbor_allgather_init(send, 1, MPI_INT, recv, 1, MPI_INT, ring, MPI_INFO_NULL, &req),
             MPI_Neighbor_allgather_c(send, 1, MPI_INT, recv, 1, MPI_INT, ring),
             MPI_Ineighbor_allgather_c(send, 1, MPI_INT, recv, 1, MPI_INT, ring, &req),
             MPI_Neighbor_allgather_init_c(send, 1, MPI_INT, recv, 1, MPI_INT, ring, MPI_INFO_NULL, &req));
    CHECK(recv[0] == left && recv[1] == right, "neighbor_allgather %s: %d %d", form_name[f], recv[0], recv[1]);
    recv[0] = recv[1] = -1;
    DISPATCH(f, req, MPI_Neighbor_allgatherv(send, 1, MPI_INT, recv, c1, d1, MPI_INT, ring),
             MPI_Ineighbor_allgatherv(send, 1, MPI_INT, recv, c1, d1, MPI_INT, ring, &req),
             MPI_Neighbor_allgatherv_init(send, 1, MPI_INT, recv, c1, d1, MPI_INT, ring, MPI_INFO_NULL, &req),
             MPI_Neighbor_allgatherv_c(send, 1, MPI_INT, recv, cc1, cd1, MPI_INT, ring),
             MPI_Ineighbor_allgatherv_c(send, 1, MPI_INT, recv, cc1, cd1, MPI_INT, ring, &req),
             MPI_Neighbor_allgatherv_init_c(send, 1, MPI_INT, recv, cc1, cd1, MPI_INT, ring, MPI_INFO_NULL, &req));
    CHECK(recv[0] == left && recv[1] == right, "neighbor_allgatherv %s", form_name[f]);
    /* alltoall: send[0] goes to left, send[1] to right; we receive from left its send[1]. */
    send[0] = g_rank * 10, send[1] = g_rank * 10 + 1, recv[0] = recv[1] = -1;
    DISPATCH(f, req, MPI_Neighbor_alltoall(send, 1, MPI_INT, recv, 1, MPI_INT, ring),
             MPI_Ineighbor_alltoall(send, 1, MPI_INT, recv, 1, MPI_INT, ring, &req),
             MPI_Neighbor_alltoall_init(send, 1, MPI_INT, recv, 1, MPI_INT, ring, MPI_INFO_NULL, &req),
             MPI_Neighbor_alltoall_c(send, 1, MPI_INT, recv, 1, MPI_INT, ring),
             MPI_Ineighbor_alltoall_c(send, 1, MPI_INT, recv, 1, MPI_INT, ring, &req),
             MPI_Neighbor_alltoall_init_c(send, 1, MPI_INT, recv, 1, MPI_INT, ring, MPI_INFO_NULL, &req));
    /* With 1 or 2 ranks a process is its own neighbour or has one neighbour twice, and
     * which block arrives where is the MPI library's choice: check rings of 3 and more. */
    if (g_size > 2)
        CHECK(recv[0] == left * 10 + 1 && recv[1] == right * 10, "neighbor_alltoall %s: %d %d", form_name[f], recv[0], recv[1]);
    recv[0] = recv[1] = -1;
    DISPATCH(f, req, MPI_Neighbor_alltoallv(send, c1, d1, MPI_INT, recv, c1, d1, MPI_INT, ring),
             MPI_Ineighbor_alltoallv(send, c1, d1, MPI_INT, recv, c1, d1, MPI_INT, ring, &req),
             MPI_Neighbor_alltoallv_init(send, c1, d1, MPI_INT, recv, c1, d1, MPI_INT, ring, MPI_INFO_NULL, &req),
             MPI_Neighbor_alltoallv_c(send, cc1, cd1, MPI_INT, recv, cc1, cd1, MPI_INT, ring),
             MPI_Ineighbor_alltoallv_c(send, cc1, cd1, MPI_INT, recv, cc1, cd1, MPI_INT, ring, &req),
             MPI_Neighbor_alltoallv_init_c(send, cc1, cd1, MPI_INT, recv, cc1, cd1, MPI_INT, ring, MPI_INFO_NULL, &req));
    if (g_size > 2)
        CHECK(recv[0] == left * 10 + 1 && recv[1] == right * 10, "neighbor_alltoallv %s", form_name[f]);
    recv[0] = recv[1] = -1;
    DISPATCH(f, req, MPI_Neighbor_alltoallw(send, c1, bd, ty, recv, c1, bd, ty, ring),
             MPI_Ineighbor_alltoallw(send, c1, bd, ty, recv, c1, bd, ty, ring, &req),
             MPI_Neighbor_alltoallw_init(send, c1, bd, ty, recv, c1, bd, ty, ring, MPI_INFO_NULL, &req),
             MPI_Neighbor_alltoallw_c(send, cc1, bd, ty, recv, cc1, bd, ty, ring),
             MPI_Ineighbor_alltoallw_c(send, cc1, bd, ty, recv, cc1, bd, ty, ring, &req),
             MPI_Neighbor_alltoallw_init_c(send, cc1, bd, ty, recv, cc1, bd, ty, ring, MPI_INFO_NULL, &req));
    (void)bdi;
    if (g_size > 2)
        CHECK(recv[0] == left * 10 + 1 && recv[1] == right * 10, "neighbor_alltoallw %s", form_name[f]);
}

/* User operations (MPI-4.0 §6.9.5): MPI_Op_create's function gets an int length,
 * MPI_Op_create_c's an MPI_Count one; each must see a length within the call's count
 * (a library without large counts calls the classic prototype: the shim must adapt it). */
static long g_uop_bad;
static void uop_check(long len, MPI_Datatype dt) {
    if (len < 0 || len > 3 || dt != MPI_INT) g_uop_bad = len ? len : -1;
}
static void uop_fn(void *in, void *io, int *len, MPI_Datatype *dt) {
    uop_check(*len, *dt);
    for (int i = 0; i < *len && !g_uop_bad; i++) ((int *)io)[i] += ((int *)in)[i] + 1;
}
static void uop_fn_c(void *in, void *io, MPI_Count *len, MPI_Datatype *dt) {
    uop_check((long)*len, *dt);
    for (MPI_Count i = 0; i < *len && !g_uop_bad; i++) ((int *)io)[i] += ((int *)in)[i] + 1;
}

/* Allreduce of 3 ints with a commutative, associative user op (a + b + 1: n values reduce
 * to their sum + n - 1 in any order), then MPI_Reduce_local(_c). On an intercommunicator
 * (`color` the group: even or odd world ranks) the result is the remote group's. */
static void t_user_op(enum form f, MPI_Comm comm, int inter, int color) {
    MPI_Op op;
    int c = f >= BLK_C;
    if (c) MPI_OK(MPI_Op_create_c(uop_fn_c, 1, &op));
    else MPI_OK(MPI_Op_create(uop_fn, 1, &op));
    int send[3], recv[3] = {-1, -1, -1}, n;
    if (inter) MPI_Comm_remote_size(comm, &n);
    else MPI_Comm_size(comm, &n);
    for (int i = 0; i < 3; i++) send[i] = g_rank + i;
    MPI_Request req;
    g_uop_bad = 0;
    DISPATCH(f, req, MPI_Allreduce(send, recv, 3, MPI_INT, op, comm),
             MPI_Iallreduce(send, recv, 3, MPI_INT, op, comm, &req),
             MPI_Allreduce_init(send, recv, 3, MPI_INT, op, comm, MPI_INFO_NULL, &req),
             MPI_Allreduce_c(send, recv, 3, MPI_INT, op, comm),
             MPI_Iallreduce_c(send, recv, 3, MPI_INT, op, comm, &req),
             MPI_Allreduce_init_c(send, recv, 3, MPI_INT, op, comm, MPI_INFO_NULL, &req));
    CHECK(!g_uop_bad, "user op %s (inter %d): called with length %ld", form_name[f], inter, g_uop_bad);
    /* the world ranks of the n contributing processes: all, or the other parity */
    int sum = 0;
    for (int r = 0; r < n; r++) sum += inter ? 2 * r + (1 - color) : r;
    for (int i = 0; i < 3; i++)
        CHECK(recv[i] == sum + n * i + n - 1, "user op %s (inter %d): element %d = %d, want %d", form_name[f], inter, i,
              recv[i], sum + n * i + n - 1);
    if (f == BLK || f == BLK_C) {
        int a[3] = {1, 2, 3}, b[3] = {10, 20, 30};
        if (c) MPI_OK(MPI_Reduce_local_c(a, b, 3, MPI_INT, op));
        else MPI_OK(MPI_Reduce_local(a, b, 3, MPI_INT, op));
        CHECK(!g_uop_bad && b[0] == 12 && b[1] == 23 && b[2] == 34, "reduce_local %s: %d %d %d (length %ld)",
              form_name[f], b[0], b[1], b[2], g_uop_bad);
    }
    MPI_OK(MPI_Op_free(&op));
}

/* The v and w collectives on an intercommunicator (even and odd world ranks), MPI-4.0
 * §6.2.2: every local process exchanges with the remote group; remote rank j is world
 * rank 2j + (1 - color) and contributes j % 2 + 1 ints (Allgatherv, Gatherv, Scatterv). */
static void t_inter(enum form f, MPI_Comm inter, int color) {
    int lr, p, q;
    MPI_Comm_rank(inter, &lr);
    MPI_Comm_size(inter, &p);
    MPI_Comm_remote_size(inter, &q);
    int rc[64], rd[64], total = 0, ones[64], idx[64], bd[64];
    MPI_Count crc[64], cones[64];
    MPI_Aint crd[64], cidx[64], cbd[64];
    MPI_Datatype ty[64];
    for (int j = 0; j < q; j++) {
        rc[j] = crc[j] = j % 2 + 1;
        rd[j] = crd[j] = total;
        total += j % 2 + 1;
        ones[j] = cones[j] = 1;
        idx[j] = cidx[j] = j;
        bd[j] = cbd[j] = j * (int)sizeof(int);
        ty[j] = MPI_INT;
    }
#define WORLD(j) (2 * (j) + (1 - color))
    int me = lr % 2 + 1, send[64], recv[256];
    MPI_Request req;
    /* Allgatherv */
    for (int k = 0; k < me; k++) send[k] = g_rank * 10 + k;
    for (int k = 0; k < 256; k++) recv[k] = -1;
    DISPATCH(f, req, MPI_Allgatherv(send, me, MPI_INT, recv, rc, rd, MPI_INT, inter),
             MPI_Iallgatherv(send, me, MPI_INT, recv, rc, rd, MPI_INT, inter, &req),
             MPI_Allgatherv_init(send, me, MPI_INT, recv, rc, rd, MPI_INT, inter, MPI_INFO_NULL, &req),
             MPI_Allgatherv_c(send, me, MPI_INT, recv, crc, crd, MPI_INT, inter),
             MPI_Iallgatherv_c(send, me, MPI_INT, recv, crc, crd, MPI_INT, inter, &req),
             MPI_Allgatherv_init_c(send, me, MPI_INT, recv, crc, crd, MPI_INT, inter, MPI_INFO_NULL, &req));
    for (int j = 0; j < q; j++)
        for (int k = 0; k < rc[j]; k++)
            CHECK(recv[rd[j] + k] == WORLD(j) * 10 + k, "inter allgatherv %s: from %d element %d = %d", form_name[f],
                  j, k, recv[rd[j] + k]);
    /* Gatherv to world rank 0 (local rank 0 of the even group), Scatterv from it */
    int root = color == 0 ? (lr == 0 ? MPI_ROOT : MPI_PROC_NULL) : 0;
    for (int k = 0; k < 256; k++) recv[k] = -1;
    DISPATCH(f, req, MPI_Gatherv(send, me, MPI_INT, recv, rc, rd, MPI_INT, root, inter),
             MPI_Igatherv(send, me, MPI_INT, recv, rc, rd, MPI_INT, root, inter, &req),
             MPI_Gatherv_init(send, me, MPI_INT, recv, rc, rd, MPI_INT, root, inter, MPI_INFO_NULL, &req),
             MPI_Gatherv_c(send, me, MPI_INT, recv, crc, crd, MPI_INT, root, inter),
             MPI_Igatherv_c(send, me, MPI_INT, recv, crc, crd, MPI_INT, root, inter, &req),
             MPI_Gatherv_init_c(send, me, MPI_INT, recv, crc, crd, MPI_INT, root, inter, MPI_INFO_NULL, &req));
    if (root == MPI_ROOT)
        for (int j = 0; j < q; j++)
            for (int k = 0; k < rc[j]; k++)
                CHECK(recv[rd[j] + k] == WORLD(j) * 10 + k, "inter gatherv %s: from %d element %d = %d", form_name[f],
                      j, k, recv[rd[j] + k]);
    int big[256];
    for (int j = 0; j < q; j++)
        for (int k = 0; k < rc[j]; k++) big[rd[j] + k] = WORLD(j) * 10 + k;
    for (int k = 0; k < 64; k++) recv[k] = -1;
    DISPATCH(f, req, MPI_Scatterv(big, rc, rd, MPI_INT, recv, me, MPI_INT, root, inter),
             MPI_Iscatterv(big, rc, rd, MPI_INT, recv, me, MPI_INT, root, inter, &req),
             MPI_Scatterv_init(big, rc, rd, MPI_INT, recv, me, MPI_INT, root, inter, MPI_INFO_NULL, &req),
             MPI_Scatterv_c(big, crc, crd, MPI_INT, recv, me, MPI_INT, root, inter),
             MPI_Iscatterv_c(big, crc, crd, MPI_INT, recv, me, MPI_INT, root, inter, &req),
             MPI_Scatterv_init_c(big, crc, crd, MPI_INT, recv, me, MPI_INT, root, inter, MPI_INFO_NULL, &req));
    if (color == 1)
        for (int k = 0; k < me; k++)
            CHECK(recv[k] == g_rank * 10 + k, "inter scatterv %s: element %d = %d", form_name[f], k, recv[k]);
    /* Alltoallv and Alltoallw: one int to each remote process, world rank * 100 + its rank */
    for (int j = 0; j < q; j++) send[j] = g_rank * 100 + j;
    for (int w = 0; w < 2; w++) {
        for (int k = 0; k < 64; k++) recv[k] = -1;
        if (!w) {
            DISPATCH(f, req, MPI_Alltoallv(send, ones, idx, MPI_INT, recv, ones, idx, MPI_INT, inter),
                     MPI_Ialltoallv(send, ones, idx, MPI_INT, recv, ones, idx, MPI_INT, inter, &req),
                     MPI_Alltoallv_init(send, ones, idx, MPI_INT, recv, ones, idx, MPI_INT, inter, MPI_INFO_NULL, &req),
                     MPI_Alltoallv_c(send, cones, cidx, MPI_INT, recv, cones, cidx, MPI_INT, inter),
                     MPI_Ialltoallv_c(send, cones, cidx, MPI_INT, recv, cones, cidx, MPI_INT, inter, &req),
                     MPI_Alltoallv_init_c(send, cones, cidx, MPI_INT, recv, cones, cidx, MPI_INT, inter, MPI_INFO_NULL,
                                          &req));
        } else {
            DISPATCH(f, req, MPI_Alltoallw(send, ones, bd, ty, recv, ones, bd, ty, inter),
                     MPI_Ialltoallw(send, ones, bd, ty, recv, ones, bd, ty, inter, &req),
                     MPI_Alltoallw_init(send, ones, bd, ty, recv, ones, bd, ty, inter, MPI_INFO_NULL, &req),
                     MPI_Alltoallw_c(send, cones, cbd, ty, recv, cones, cbd, ty, inter),
                     MPI_Ialltoallw_c(send, cones, cbd, ty, recv, cones, cbd, ty, inter, &req),
                     MPI_Alltoallw_init_c(send, cones, cbd, ty, recv, cones, cbd, ty, inter, MPI_INFO_NULL, &req));
        }
        for (int j = 0; j < q; j++)
            CHECK(recv[j] == WORLD(j) * 100 + lr, "inter alltoall%c %s: from %d = %d", w ? 'w' : 'v', form_name[f], j,
                  recv[j]);
    }
    /* Reduce_scatter (MPI-4.0 §6.10.1): the remote group's vectors of p * q ints, element k
     * world rank + k, summed; q elements to each local process */
    int lc[64];
    MPI_Count clc[64];
    for (int i = 0; i < p; i++) lc[i] = clc[i] = q;
    for (int k = 0; k < p * q; k++) big[k] = g_rank + k;
    for (int k = 0; k < 64; k++) recv[k] = -1;
    DISPATCH(f, req, MPI_Reduce_scatter(big, recv, lc, MPI_INT, MPI_SUM, inter),
             MPI_Ireduce_scatter(big, recv, lc, MPI_INT, MPI_SUM, inter, &req),
             MPI_Reduce_scatter_init(big, recv, lc, MPI_INT, MPI_SUM, inter, MPI_INFO_NULL, &req),
             MPI_Reduce_scatter_c(big, recv, clc, MPI_INT, MPI_SUM, inter),
             MPI_Ireduce_scatter_c(big, recv, clc, MPI_INT, MPI_SUM, inter, &req),
             MPI_Reduce_scatter_init_c(big, recv, clc, MPI_INT, MPI_SUM, inter, MPI_INFO_NULL, &req));
    int s = 0;
    for (int j = 0; j < q; j++) s += WORLD(j);
    for (int k = 0; k < q; k++)
        CHECK(recv[k] == s + q * (lr * q + k), "inter reduce_scatter %s: element %d = %d", form_name[f], k, recv[k]);
#undef WORLD
}

int main(int argc, char **argv) {
    test_init(&argc, &argv);
    CHECK(g_size <= 64, "at most 64 ranks");
    int dims[1] = {g_size}, periods[1] = {1};
    MPI_Comm ring;
    MPI_OK(MPI_Cart_create(MPI_COMM_WORLD, 1, dims, periods, 0, &ring));
    for (int f = 0; f < NFORMS; f++) {
        t_barrier(f);
        t_bcast(f);
        t_gather(f);
        t_gatherv(f);
        t_scatter(f);
        t_scatterv(f);
        t_allgather(f);
        t_allgatherv(f);
        t_alltoall(f);
        t_alltoallv(f, 0);
        t_alltoallv(f, 1);
        t_reduce(f);
        t_allreduce(f);
        t_reduce_scatter(f);
        t_reduce_scatter_block(f);
        t_scan(f, 0);
        t_scan(f, 1);
        t_neighbor(f, ring);
        t_user_op(f, MPI_COMM_WORLD, 0, 0);
    }
    MPI_Comm_free(&ring);
    if (g_size >= 2 && g_size <= 64) {
        /* even and odd world ranks; leaders world ranks 0 and 1 */
        int color = g_rank % 2;
        MPI_Comm local, inter;
        MPI_OK(MPI_Comm_split(MPI_COMM_WORLD, color, g_rank, &local));
        MPI_OK(MPI_Intercomm_create(local, 0, MPI_COMM_WORLD, 1 - color, 11, &inter));
        for (int f = 0; f < NFORMS; f++) {
            t_inter(f, inter, color);
            t_user_op(f, inter, 1, color);
        }
        MPI_OK(MPI_Comm_free(&inter));
        MPI_OK(MPI_Comm_free(&local));
    }

    /* Every exported collective entry point must have been intercepted. */
    const char *bases[] = {"Bcast", "Gather", "Gatherv", "Scatter", "Scatterv", "Allgather", "Allgatherv",
                           "Alltoall", "Alltoallv", "Alltoallw", "Reduce", "Allreduce", "Reduce_scatter",
                           "Reduce_scatter_block", "Scan", "Exscan", "Neighbor_allgather",
                           "Neighbor_allgatherv", "Neighbor_alltoall", "Neighbor_alltoallv",
                           "Neighbor_alltoallw"};
    const char *names[256];
    char store[256][64];
    int n = 0;
    for (size_t b = 0; b < sizeof(bases) / sizeof(bases[0]); b++) {
        const char *fmt[] = {"MPI_%s", "MPI_I%s", "MPI_%s_init", "MPI_%s_c", "MPI_I%s_c", "MPI_%s_init_c"};
        for (int k = 0; k < 6; k++) {
            char lower[64];
            snprintf(lower, sizeof lower, "%s", bases[b]);
            if (k == 1 || k == 4) lower[0] = (char)(lower[0] - 'A' + 'a'); /* MPI_Iallreduce */
            snprintf(store[n], sizeof store[n], fmt[k], (k == 1 || k == 4) ? lower : bases[b]);
            names[n] = store[n];
            n++;
        }
    }
    names[n++] = "MPI_Barrier";
    names[n++] = "MPI_Ibarrier";
    names[n++] = "MPI_Barrier_init";
    names[n++] = "MPI_Start";
    names[n++] = "MPI_Wait";
    names[n++] = "MPI_Request_free";
    names[n++] = "MPI_Init";
    check_intercepted(names, n);
    test_pass("coll_forms");
    MPI_Finalize();
    return 0;
}

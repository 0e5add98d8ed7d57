/* Pack/unpack throughput and a halo exchange, the system MPI against the shim, in one run
 * (driven by scripts/bench/run-pack).
 *
 * Part 1 (rank 0 only): for each type family and payload size, MPI_Pack / MPI_Unpack
 * throughput (GB/s of packed bytes) of the system MPI (PMPI_Pack / PMPI_Unpack) and of
 * the shim (MPI_Pack / MPI_Unpack) at 1 and 2 threads (shim_set_pack_threads), the
 * variants interleaved per repetition; median of the repetitions.
 *   vec8     vector of doubles, blocks of 1 double (8 B), stride 2
 *   vec4k    vector, blocks of 512 doubles (4 KiB), stride 1024
 *   indexed  indexed doubles, block lengths cycling 1..7, gaps of 1..3
 *   struct   struct {int; double[2]; char} repeated (resized to 40 B), count elements
 *   face-xz  3-D subarray: the X-Z face (y = 1 plane) of an N^3 double array (runs of N)
 *   face-yz  3-D subarray: the Y-Z face (x = 1) of an N^3 double array (single doubles)
 * Part 2 (2 ranks): a 3-D halo exchange of a local n^3 double block with its neighbours
 * along x, y and z (periodic 1-D decomposition of the ranks, all 6 faces exchanged with
 * subarray datatypes and MPI_Sendrecv), system (PMPI_Sendrecv) against shim
 * (MPI_Sendrecv) at 1 and 2 threads; median time per exchange.
 *
 * With BENCH_EXTERNAL=1, Part 1 measures MPI_Pack_external / MPI_Unpack_external
 * ("external32", big-endian) instead (not for struct, which Debian's MPICH cannot pack).
 *
 * Output lines (CSV): pack,<type>,<bytes>,<variant>,<op>,<GBps>
 *                     halo,<n>,<bytes per exchange>,<variant>,<usec> */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dlfcn.h>

static void (*set_threads)(int);
static int external; /* BENCH_EXTERNAL=1: MPI_Pack_external/MPI_Unpack_external instead */
static int reps = 7;

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}
static double median(double *v, int n) {
    qsort(v, n, sizeof *v, cmp);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* A type of the family whose packed size is about `bytes`; returns count 1 of it. */
static MPI_Datatype make(const char *fam, long bytes, long *span) {
    MPI_Datatype t;
    if (!strcmp(fam, "vec8")) {
        long n = bytes / 8;
        MPI_Type_vector((int)n, 1, 2, MPI_DOUBLE, &t);
    } else if (!strcmp(fam, "vec4k")) {
        long n = bytes / 4096;
        if (n < 1) n = 1;
        MPI_Type_vector((int)n, 512, 1024, MPI_DOUBLE, &t);
    } else if (!strcmp(fam, "indexed")) {
        long n = 0, got = 0, at = 0;
        int cap = (int)(bytes / 8) + 8;
        int *bl = malloc(sizeof(int) * cap), *d = malloc(sizeof(int) * cap);
        while (got < bytes / 8) {
            bl[n] = 1 + (int)(n % 7);
            d[n] = (int)at;
            at += bl[n] + 1 + n % 3;
            got += bl[n];
            n++;
        }
        MPI_Type_indexed((int)n, bl, d, MPI_DOUBLE, &t);
        free(bl), free(d);
    } else if (!strcmp(fam, "struct")) {
        int bl[3] = {1, 2, 1};
        MPI_Aint d[3] = {0, 8, 24};
        MPI_Datatype ts[3] = {MPI_INT, MPI_DOUBLE, MPI_CHAR}, s, r;
        MPI_Type_create_struct(3, bl, d, ts, &s);
        MPI_Type_create_resized(s, 0, 40, &r);
        MPI_Type_free(&s);
        long n = bytes / 21;
        MPI_Type_contiguous((int)n, r, &t);
        MPI_Type_free(&r);
    } else { /* faces of a 512^3 double array: a x a sub-face, k layers thick */
        int N = 512, k = 1, f = (int)sqrt((double)bytes / 8.0);
        if (f > N) f = N, k = (int)(bytes / (8L * N * N));
        if (k > N / 2) k = N / 2;
        int sizes[3] = {N, N, N}, sub[3], start[3] = {0, 0, 0};
        if (!strcmp(fam, "face-xz")) /* y = 1..k: runs of f doubles, stride N^2 */
            sub[0] = f, sub[1] = k, sub[2] = f, start[1] = 1;
        else /* face-yz: z = 1..k: runs of k doubles, stride N */
            sub[0] = f, sub[1] = f, sub[2] = k, start[2] = 1;
        MPI_Type_create_subarray(3, sizes, sub, start, MPI_ORDER_C, MPI_DOUBLE, &t);
    }
    MPI_Type_commit(&t);
    MPI_Aint lb, ext, tlb, text;
    MPI_Type_get_extent(t, &lb, &ext);
    MPI_Type_get_true_extent(t, &tlb, &text);
    *span = tlb + text;
    return t;
}

static void bench_pack(const char *fam, long bytes) {
    long span;
    MPI_Datatype t = make(fam, bytes, &span);
    int sz;
    MPI_Type_size(t, &sz);
    char *src = malloc(span + 64), *buf = malloc(sz + 64);
    memset(src, 1, span + 64);
    memset(buf, 2, sz + 64);
    const char *names[3] = {"system", "shim-1t", "shim-2t"};
    double *tp[3][2];
    for (int v = 0; v < 3; v++)
        for (int o = 0; o < 2; o++) tp[v][o] = malloc(sizeof(double) * reps);
    /* inner repetitions so that one sample moves about 40 MB (PACK_INNER_BYTES): the
     * packing threads then run in steady state, not mostly waking up */
    int inner = (int)(getenv("PACK_INNER_BYTES") ? atof(getenv("PACK_INNER_BYTES")) : 4e7) / (sz + 1) + 1;
    for (int r = 0; r < reps; r++) {
        for (int v0 = 0; v0 < 3; v0++) {
            int v = (v0 + r) % 3; /* rotate the order per repetition */
            if (set_threads) set_threads(v == 2 ? 2 : 1);
            for (int o = 0; o < 2; o++) {
                double t0 = MPI_Wtime();
                for (int i = 0; i < inner; i++) {
                    int pos = 0;
                    MPI_Aint xpos = 0;
                    if (external) { /* "external32" (BENCH_EXTERNAL=1) */
                        if (o == 0) {
                            if (v == 0) PMPI_Pack_external("external32", src, 1, t, buf, sz, &xpos);
                            else MPI_Pack_external("external32", src, 1, t, buf, sz, &xpos);
                        } else {
                            if (v == 0) PMPI_Unpack_external("external32", buf, sz, &xpos, src, 1, t);
                            else MPI_Unpack_external("external32", buf, sz, &xpos, src, 1, t);
                        }
                    } else if (o == 0) {
                        if (v == 0) PMPI_Pack(src, 1, t, buf, sz, &pos, MPI_COMM_SELF);
                        else MPI_Pack(src, 1, t, buf, sz, &pos, MPI_COMM_SELF);
                    } else {
                        if (v == 0) PMPI_Unpack(buf, sz, &pos, src, 1, t, MPI_COMM_SELF);
                        else MPI_Unpack(buf, sz, &pos, src, 1, t, MPI_COMM_SELF);
                    }
                }
                double dt = (MPI_Wtime() - t0) / inner;
                tp[v][o][r] = sz / dt / 1e9;
            }
        }
    }
    for (int v = 0; v < 3; v++)
        for (int o = 0; o < 2; o++) {
            printf("pack,%s,%d,%s,%s,%.3f\n", fam, sz, names[v], o ? "unpack" : "pack", median(tp[v][o], reps));
            free(tp[v][o]);
        }
    fflush(stdout);
    if (set_threads) set_threads(0);
    MPI_Type_free(&t);
    free(src), free(buf);
}

/* 3-D halo exchange on 2 ranks: every face of a local (n+2)^3 block (one ghost layer)
 * goes to the neighbour (the other rank) with subarray types. */
static void bench_halo(int n, int iters) {
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int peer = (rank + 1) % size, from = (rank + size - 1) % size;
    int N = n + 2, sizes[3] = {N, N, N};
    size_t cells = (size_t)N * N * N;
    double *a = malloc(cells * sizeof(double));
    for (size_t i = 0; i < cells; i++) a[i] = rank + i * 1e-9;
    MPI_Datatype send[6], recv[6];
    long face_bytes = 0;
    for (int d = 0; d < 3; d++)
        for (int s = 0; s < 2; s++) {
            int sub[3] = {n, n, n}, st[3] = {1, 1, 1}, rt[3] = {1, 1, 1};
            sub[d] = 1;
            st[d] = s ? n : 1;      /* interior face */
            rt[d] = s ? 0 : n + 1;  /* ghost layer on the other side */
            MPI_Type_create_subarray(3, sizes, sub, st, MPI_ORDER_C, MPI_DOUBLE, &send[2 * d + s]);
            MPI_Type_create_subarray(3, sizes, sub, rt, MPI_ORDER_C, MPI_DOUBLE, &recv[2 * d + s]);
            MPI_Type_commit(&send[2 * d + s]);
            MPI_Type_commit(&recv[2 * d + s]);
            face_bytes += (long)n * n * 8;
        }
    const char *names[3] = {"system", "shim-1t", "shim-2t"};
    double *tv[3];
    for (int v = 0; v < 3; v++) tv[v] = malloc(sizeof(double) * reps);
    for (int r = 0; r < reps; r++) {
        for (int v0 = 0; v0 < 3; v0++) {
            int v = (v0 + r) % 3;
            if (set_threads) set_threads(v == 2 ? 2 : 1);
            MPI_Barrier(MPI_COMM_WORLD);
            double t0 = MPI_Wtime();
            for (int it = 0; it < iters; it++)
                for (int f = 0; f < 6; f++) {
                    if (v == 0)
                        PMPI_Sendrecv(a, 1, send[f], peer, f, a, 1, recv[f], from, f, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                    else
                        MPI_Sendrecv(a, 1, send[f], peer, f, a, 1, recv[f], from, f, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                }
            double dt = (MPI_Wtime() - t0) / iters, mx;
            MPI_Allreduce(&dt, &mx, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
            tv[v][r] = mx * 1e6;
        }
    }
    if (rank == 0)
        for (int v = 0; v < 3; v++) printf("halo,%d,%ld,%s,%.1f\n", n, face_bytes, names[v], median(tv[v], reps));
    fflush(stdout);
    if (set_threads) set_threads(0);
    for (int f = 0; f < 6; f++) MPI_Type_free(&send[f]), MPI_Type_free(&recv[f]);
    for (int v = 0; v < 3; v++) free(tv[v]);
    free(a);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    set_threads = (void (*)(int))dlsym(RTLD_DEFAULT, "shim_set_pack_threads");
    external = getenv("BENCH_EXTERNAL") != NULL && atoi(getenv("BENCH_EXTERNAL")) != 0;
    if (!set_threads && rank == 0) fprintf(stderr, "warning: libshim is not loaded; shim columns are the system MPI\n");
    if (getenv("BENCH_REPS")) reps = atoi(getenv("BENCH_REPS"));
    long lo = getenv("BENCH_MIN") ? atol(getenv("BENCH_MIN")) : 65536;
    long hi = getenv("BENCH_MAX") ? atol(getenv("BENCH_MAX")) : 256L << 20;
    const char *fams = getenv("BENCH_TYPES") ? getenv("BENCH_TYPES") : "vec8,vec4k,indexed,struct,face-xz,face-yz";
    if (rank == 0 && !getenv("BENCH_NO_PACK")) {
        char *list = strdup(fams);
        for (char *f = strtok(list, ","); f; f = strtok(NULL, ","))
            for (long b = lo; b <= hi; b *= 4) bench_pack(f, b);
        free(list);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    const char *halo = getenv("BENCH_HALO") ? getenv("BENCH_HALO") : "64,128,256";
    char *hl = strdup(halo);
    for (char *h = strtok(hl, ","); h; h = strtok(NULL, ",")) {
        int n = atoi(h);
        if (n > 0) bench_halo(n, n >= 256 ? 3 : n >= 128 ? 10 : 40);
    }
    free(hl);
    MPI_Finalize();
    return 0;
}

/* A 3-D FFT with a pipelined transpose: the application kernel of the asynchronous-progress
 * benchmarks (Hoefler digest §10.4: tiling + a window of outstanding non-blocking
 * collectives).
 *
 * An N^3 complex grid is distributed in z-slabs (N/P planes per rank). Each plane gets a
 * 2-D FFT (radix-2, along x then y); then the data is transposed to y-slabs with an
 * all-to-all, and the FFT along z is done locally. Two versions:
 *   blocking : for each tile of planes, FFT the tile, then MPI_Alltoall it;
 *   overlap  : for each tile, FFT it, start MPI_Ialltoall, and keep up to W tiles in
 *              flight (wait for the oldest when the window is full), so the transpose of
 *              one tile overlaps the FFTs of the next ones.
 * Both compute the same result (checked: the checksums must agree bit for bit).
 *
 * Usage: fft3d [-n N] [-t tile] [-w window] [-r repeats] [-l label]
 * Output: "label,version,N,P,tile,window,seconds" CSV rows (median of repeats) on rank 0. */
#include <complex.h>
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef double complex cplx;

static void fft(cplx *a, int n, int stride) {
    /* iterative radix-2 Cooley-Tukey on a[0], a[stride], ... (n a power of two) */
    for (int i = 1, j = 0; i < n; i++) {
        int bit = n >> 1;
        for (; j & bit; bit >>= 1) j ^= bit;
        j ^= bit;
        if (i < j) {
            cplx t = a[i * stride];
            a[i * stride] = a[j * stride];
            a[j * stride] = t;
        }
    }
    for (int len = 2; len <= n; len <<= 1) {
        double ang = -2 * M_PI / len;
        cplx wl = cos(ang) + I * sin(ang);
        for (int i = 0; i < n; i += len) {
            cplx w = 1;
            for (int k = 0; k < len / 2; k++) {
                cplx u = a[(i + k) * stride], v = a[(i + k + len / 2) * stride] * w;
                a[(i + k) * stride] = u + v;
                a[(i + k + len / 2) * stride] = u - v;
                w *= wl;
            }
        }
    }
}

static int N, P, rank, NZ; /* NZ = N / P planes per rank */

/* 2-D FFT of plane z of `grid` (layout [z][y][x]) */
static void fft_plane(cplx *grid, int z) {
    cplx *p = grid + (size_t)z * N * N;
    for (int y = 0; y < N; y++) fft(p + (size_t)y * N, N, 1);
    for (int x = 0; x < N; x++) fft(p + x, N, N);
}

/* Packs tile [z0, z0+t) for the transpose: block q holds rows y in [q*NZ, (q+1)*NZ). */
static void pack(const cplx *grid, cplx *out, int z0, int t) {
    for (int q = 0; q < P; q++)
        for (int z = 0; z < t; z++)
            for (int y = 0; y < NZ; y++)
                memcpy(out + (((size_t)q * t + z) * NZ + y) * N, grid + ((size_t)(z0 + z) * N + q * NZ + y) * N,
                       sizeof(cplx) * N);
}

/* Unpacks a received tile into the y-slab layout [y][zglobal][x]. */
static void unpack(cplx *slab, const cplx *in, int z0, int t) {
    for (int q = 0; q < P; q++)
        for (int z = 0; z < t; z++)
            for (int y = 0; y < NZ; y++)
                memcpy(slab + ((size_t)y * N + (q * NZ + z0 + z)) * N, in + (((size_t)q * t + z) * NZ + y) * N,
                       sizeof(cplx) * N);
}

static double run(int overlap, int tile, int window, cplx *grid0, double *checksum) {
    size_t plane = (size_t)N * N, local = plane * NZ;
    cplx *grid = malloc(sizeof(cplx) * local), *slab = malloc(sizeof(cplx) * local);
    memcpy(grid, grid0, sizeof(cplx) * local);
    int ntiles = NZ / tile;
    size_t tilesz = (size_t)tile * plane;
    cplx *sb = malloc(sizeof(cplx) * tilesz * ntiles), *rb = malloc(sizeof(cplx) * tilesz * ntiles);
    MPI_Request *req = malloc(sizeof(MPI_Request) * ntiles);
    int count = (int)(2 * tilesz / P); /* doubles per peer */
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (int k = 0; k < ntiles; k++) {
        for (int z = 0; z < tile; z++) fft_plane(grid, k * tile + z);
        pack(grid, sb + k * tilesz, k * tile, tile);
        if (!overlap) {
            MPI_Alltoall(sb + k * tilesz, count, MPI_DOUBLE, rb + k * tilesz, count, MPI_DOUBLE, MPI_COMM_WORLD);
            unpack(slab, rb + k * tilesz, k * tile, tile);
        } else {
            MPI_Ialltoall(sb + k * tilesz, count, MPI_DOUBLE, rb + k * tilesz, count, MPI_DOUBLE, MPI_COMM_WORLD,
                          &req[k]);
            if (k >= window - 1) {
                int old = k - (window - 1);
                MPI_Wait(&req[old], MPI_STATUS_IGNORE);
                unpack(slab, rb + old * tilesz, old * tile, tile);
            }
        }
    }
    if (overlap)
        for (int old = ntiles - (window - 1) < 0 ? 0 : ntiles - (window - 1); old < ntiles; old++) {
            MPI_Wait(&req[old], MPI_STATUS_IGNORE);
            unpack(slab, rb + old * tilesz, old * tile, tile);
        }
    /* FFT along z on the y-slabs: for each local y, the N x N plane [z][x] */
    for (int y = 0; y < NZ; y++)
        for (int x = 0; x < N; x++) fft(slab + (size_t)y * plane + x, N, N);
    double t = MPI_Wtime() - t0;
    double s = 0;
    for (size_t i = 0; i < local; i++) s += creal(slab[i]) * (double)(i % 7 + 1) + cimag(slab[i]);
    MPI_Allreduce(&s, checksum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    double tmax;
    MPI_Allreduce(&t, &tmax, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    free(grid), free(slab), free(sb), free(rb), free(req);
    return tmax;
}

static int cmpd(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &P);
    N = 128;
    int tile = 2, window = 3, reps = 5;
    const char *label = "run";
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "-n")) N = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-t")) tile = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-w")) window = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-r")) reps = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-l")) label = argv[i + 1];
    }
    NZ = N / P;
    if (N % P || (N & (N - 1)) || NZ % tile || window < 1) {
        if (rank == 0) fprintf(stderr, "N must be a power of two divisible by P, N/P divisible by the tile\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    size_t local = (size_t)N * N * NZ;
    cplx *grid0 = malloc(sizeof(cplx) * local);
    for (size_t i = 0; i < local; i++) grid0[i] = sin(0.001 * (double)(i + rank * local)) + I * cos(0.002 * (double)i);
    double sums[2], *ts = malloc(sizeof(double) * reps);
    for (int v = 0; v < 2; v++) {
        run(v, tile, window, grid0, &sums[v]); /* warm-up */
        for (int r = 0; r < reps; r++) ts[r] = run(v, tile, window, grid0, &sums[v]);
        qsort(ts, reps, sizeof(double), cmpd);
        if (rank == 0) printf("%s,%s,%d,%d,%d,%d,%.6f\n", label, v ? "overlap" : "blocking", N, P, tile, window, ts[reps / 2]);
        fflush(stdout);
    }
    if (rank == 0 && sums[0] != sums[1]) {
        fprintf(stderr, "checksums differ: %.17g %.17g\n", sums[0], sums[1]);
        MPI_Abort(MPI_COMM_WORLD, 3);
    }
    MPI_Finalize();
    return 0;
}

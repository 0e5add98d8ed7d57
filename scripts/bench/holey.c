/* Reductions on datatypes with holes: MPI_DOUBLE_INT with MPI_MAXLOC (12 bytes every 16)
 * and a user operation on a strided vector of doubles (every other double), blocking
 * Allreduce, Reduce, Scan, Exscan and Reduce_scatter_block (each rank's block: the count
 * over the ranks), median µs per call over `reps` timed batches.
 * Usage: holey [-s minbytes] [-S maxbytes] [-r reps] [-c ncolls]  (bytes: the buffers'
 * extent; -c 2: Allreduce and Reduce only) */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void vsum(void *in, void *inout, int *len, MPI_Datatype *dt) {
    (void)dt;
    double *a = in, *b = inout;
    for (int i = 0; i < *len; i++) b[2 * i] += a[2 * i];
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    long minb = 16384, maxb = 1 << 20;
    int reps = 9, ncolls = 5;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "-s")) minb = atol(argv[i + 1]);
        else if (!strcmp(argv[i], "-S")) maxb = atol(argv[i + 1]);
        else if (!strcmp(argv[i], "-r")) reps = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-c")) ncolls = atoi(argv[i + 1]);
    }
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Datatype strided;
    MPI_Type_create_resized(MPI_DOUBLE, 0, 16, &strided);
    MPI_Type_commit(&strided);
    MPI_Op op;
    MPI_Op_create(vsum, 1, &op);
    char *sb = calloc(1, (size_t)maxb), *rb = calloc(1, (size_t)maxb);
    double *t = malloc(sizeof(double) * (size_t)reps);
    struct { const char *name; MPI_Datatype dt; MPI_Op op; } cases[] = {
        {"double_int/MAXLOC", MPI_DOUBLE_INT, MPI_MAXLOC}, {"strided-double/user", strided, op}};
    if (rank == 0) printf("%-20s %-10s %10s %12s\n", "type/op", "coll", "bytes", "median_us");
    const char *names[] = {"Allreduce", "Reduce", "Scan", "Exscan", "RSB"};
    for (int c = 0; c < 2; c++)
        for (int coll = 0; coll < ncolls && coll < 5; coll++)
            for (long b = minb; b <= maxb; b *= 4) {
                int n = (int)(b / 16);
                int iters = b <= 65536 ? 20 : 5;
                for (int r = 0; r < reps; r++) {
                    MPI_Barrier(MPI_COMM_WORLD);
                    double t0 = MPI_Wtime();
                    for (int i = 0; i < iters; i++) {
                        MPI_Datatype dt = cases[c].dt;
                        MPI_Op o = cases[c].op;
                        switch (coll) {
                        case 0: MPI_Allreduce(sb, rb, n, dt, o, MPI_COMM_WORLD); break;
                        case 1: MPI_Reduce(sb, rb, n, dt, o, 0, MPI_COMM_WORLD); break;
                        case 2: MPI_Scan(sb, rb, n, dt, o, MPI_COMM_WORLD); break;
                        case 3: MPI_Exscan(sb, rb, n, dt, o, MPI_COMM_WORLD); break;
                        default: MPI_Reduce_scatter_block(sb, rb, n / size, dt, o, MPI_COMM_WORLD);
                        }
                    }
                    t[r] = (MPI_Wtime() - t0) / iters * 1e6;
                }
                qsort(t, (size_t)reps, sizeof *t, cmp);
                if (rank == 0)
                    printf("%-20s %-10s %10ld %12.1f\n", cases[c].name, names[coll], b,
                           t[reps / 2]);
            }
    MPI_Op_free(&op);
    MPI_Type_free(&strided);
    free(sb);
    free(rb);
    free(t);
    MPI_Finalize();
    return 0;
}

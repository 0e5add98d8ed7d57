/* The README's demo (also run as a test): a small conjugate-gradient-style loop on a
 * distributed vector. Each iteration does a dot product (MPI_Allreduce), broadcasts a
 * step size chosen by rank 0 (MPI_Bcast), overlaps a non-blocking reduction with local
 * work (MPI_Iallreduce + MPI_Wait), and finally gathers a checksum (MPI_Gather). Run it
 * with the shim preloaded and SHIM_STATS=1 to see what the shim intercepted. */
#include "common.h"
#include <math.h>

#define N 4096

int main(int argc, char **argv) {
    test_init(&argc, &argv);
    static double x[N], r[N];
    for (int i = 0; i < N; i++) x[i] = 0.0, r[i] = 1.0 + (g_rank + i) % 7;
    double rr = 0, alpha = 0;
    for (int it = 0; it < 20; it++) {
        double local = 0;
        for (int i = 0; i < N; i++) local += r[i] * r[i];
        MPI_OK(MPI_Allreduce(&local, &rr, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD));
        if (g_rank == 0) alpha = 0.5 / (1.0 + it);
        MPI_OK(MPI_Bcast(&alpha, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD));
        double norm_local = 0, norm = 0;
        MPI_Request req;
        for (int i = 0; i < N; i++) norm_local += fabs(r[i]);
        MPI_OK(MPI_Iallreduce(&norm_local, &norm, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD, &req));
        for (int i = 0; i < N; i++) x[i] += alpha * r[i], r[i] *= (1.0 - alpha);
        MPI_OK(MPI_Wait(&req, MPI_STATUS_IGNORE));
        CHECK(norm > 0, "norm");
    }
    double sum = 0, *sums = malloc(sizeof(double) * g_size);
    for (int i = 0; i < N; i++) sum += x[i];
    MPI_OK(MPI_Gather(&sum, 1, MPI_DOUBLE, sums, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD));
    if (g_rank == 0) {
        double total = 0;
        for (int i = 0; i < g_size; i++) total += sums[i];
        printf("demo: %d ranks, 20 iterations, checksum %.6f, residual %.6e\n", g_size, total, sqrt(rr));
    }
    free(sums);
    const char *names[] = {"MPI_Allreduce", "MPI_Bcast", "MPI_Iallreduce", "MPI_Wait", "MPI_Gather"};
    check_intercepted(names, 5);
    test_pass("demo");
    MPI_Finalize();
    return 0;
}

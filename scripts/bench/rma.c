/* RMA latency while the target computes: does an operation complete without the
 * target's participation (asynchronous progress, e.g. the shim's ghost processes)?
 *
 * User rank 0 (the origin) issues one operation followed by MPI_Win_flush to user rank 1
 * (the target) while the target busy-loops for T ms without calling MPI. A sample:
 *   barrier; target: compute T ms | origin: t0; op; MPI_Win_flush(1); t1; barrier.
 * The origin's latency is t1 - t0. Everything runs inside one MPI_Win_lock_all epoch
 * (opened before the loop). Per point (op, count, T) one untimed warm-up sample, then R
 * samples; the median, minimum and maximum are reported. Other ranks only join barriers.
 *
 * Operations: acc (MPI_Accumulate, MPI_DOUBLE, MPI_SUM), accv (MPI_Accumulate with a
 * derived target datatype: vector of `count` doubles with stride 2), put, get. Counts are
 * in doubles.
 *
 * Usage: rma [-w allocate|create] [-t 0,1,10,100] [-c 1,64,4096] [-o acc,accv,put,get]
 *            [-r reps] [-l label] [-s] [-H]
 *   -l label: the config column (default: $BENCH_LABEL, else "run")
 *   -s: also print every sample ("sample,label,op,count,T_ms,rep,us")
 *   -H: no CSV header
 * Output (rank 0, stdout): CSV "label,op,count,T_ms,median_us,min_us,max_us".
 * Note: Debian's MPICH 4.0.2 misroutes RMA on MPI_Win_allocate windows that it handles
 * itself; measure the system MPI with -w create. */
#include <dlfcn.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAXL 32
enum { ACC, ACCV, PUT, GET, NOPS };
static const char *OPNAMES[] = {"acc", "accv", "put", "get"};

static int parse_list(const char *s, long *out) {
    int n = 0;
    while (s && *s && n < MAXL) {
        char *end;
        out[n++] = strtol(s, &end, 10);
        if (end == s) return -1;
        s = *end == ',' ? end + 1 : end;
        if (*end && *end != ',') return -1;
    }
    return n;
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* T ms of computation, no MPI call. */
static volatile double sink;
static void compute(double ms) {
    double end = now() + ms * 1e-3, x = 1.0;
    while (now() < end)
        for (int i = 0; i < 1000; i++) x = x * 1.0000001 + 1e-9;
    sink = x;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void usage(void) {
    fprintf(stderr, "usage: rma [-w allocate|create] [-t 0,1,10,100] [-c 1,64,4096] [-o acc,accv,put,get] "
                    "[-r reps] [-l label] [-s] [-H]\n");
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int alloc = 1, reps = 7, samples = 0, header = 1, ops[NOPS], nops = 0;
    long ts[MAXL] = {0, 1, 10, 100}, counts[MAXL] = {1, 64, 4096};
    int nts = 4, ncounts = 3;
    const char *label = getenv("BENCH_LABEL") ? getenv("BENCH_LABEL") : "run";
    for (int i = 0; i < NOPS; i++) ops[nops++] = i;
    int bad = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-s")) samples = 1;
        else if (!strcmp(a, "-H")) header = 0;
        else if (!v) bad = 1;
        else if (!strcmp(a, "-w")) {
            i++;
            if (!strcmp(v, "allocate")) alloc = 1;
            else if (!strcmp(v, "create")) alloc = 0;
            else bad = 1;
        } else if (!strcmp(a, "-t")) {
            i++;
            if ((nts = parse_list(v, ts)) <= 0) bad = 1;
        } else if (!strcmp(a, "-c")) {
            i++;
            if ((ncounts = parse_list(v, counts)) <= 0) bad = 1;
            for (int k = 0; k < ncounts; k++)
                if (counts[k] < 1) bad = 1;
        } else if (!strcmp(a, "-o")) {
            i++;
            nops = 0;
            char buf[256];
            snprintf(buf, sizeof buf, "%s", v);
            for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
                int found = -1;
                for (int k = 0; k < NOPS; k++)
                    if (!strcmp(tok, OPNAMES[k])) found = k;
                if (found < 0 || nops >= NOPS) bad = 1;
                else ops[nops++] = found;
            }
            if (nops == 0) bad = 1;
        } else if (!strcmp(a, "-r")) {
            i++;
            reps = atoi(v);
            if (reps < 1) bad = 1;
        } else if (!strcmp(a, "-l")) {
            i++;
            label = v;
        } else bad = 1;
    }
    if (bad || size < 2) {
        if (rank == 0) {
            if (size < 2) fprintf(stderr, "rma: needs at least 2 ranks (user ranks 0 and 1)\n");
            usage();
        }
        MPI_Finalize();
        return 2;
    }

    long maxc = 1;
    for (int k = 0; k < ncounts; k++)
        if (counts[k] > maxc) maxc = counts[k];
    MPI_Aint bytes = (MPI_Aint)(2 * maxc) * sizeof(double); /* room for the stride-2 vector */
    double *base, *mem = NULL;
    MPI_Win win;
    if (alloc) {
        MPI_Win_allocate(bytes, sizeof(double), MPI_INFO_NULL, MPI_COMM_WORLD, &base, &win);
    } else {
        mem = malloc(bytes);
        base = mem;
        MPI_Win_create(base, bytes, sizeof(double), MPI_INFO_NULL, MPI_COMM_WORLD, &win);
    }
    double *origin = malloc(sizeof(double) * maxc), *lat = malloc(sizeof(double) * reps);
    for (long i = 0; i < maxc; i++) origin[i] = 1.0;
    MPI_Win_lock_all(0, win);
    for (long i = 0; i < 2 * maxc; i++) base[i] = 0;
    MPI_Win_sync(win);
    MPI_Barrier(MPI_COMM_WORLD);

    int (*ghosts)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "shim_ghosts_per_node");
    uint64_t (*redirected)(void) = (uint64_t(*)(void))dlsym(RTLD_DEFAULT, "shim_rma_redirected");
    if (rank == 0) {
        fprintf(stderr, "# rma: %s, %d ranks, window by %s, ghosts per node %d%s\n", label, size,
                alloc ? "MPI_Win_allocate" : "MPI_Win_create", ghosts ? ghosts() : 0,
                alloc && !(ghosts && ghosts() > 0)
                    ? " (warning: the system MPI misroutes RMA on MPI_Win_allocate windows; use -w create)"
                    : "");
        if (header) printf("label,op,count,T_ms,median_us,min_us,max_us\n");
    }

    for (int oi = 0; oi < nops; oi++) {
        int op = ops[oi];
        for (int ci = 0; ci < ncounts; ci++) {
            int n = (int)counts[ci];
            MPI_Datatype vec = MPI_DATATYPE_NULL;
            if (op == ACCV) {
                MPI_Type_vector(n, 1, 2, MPI_DOUBLE, &vec);
                MPI_Type_commit(&vec);
            }
            for (int ti = 0; ti < nts; ti++) {
                double T = (double)ts[ti];
                for (int r = -1; r < reps; r++) { /* r = -1: warm-up */
                    MPI_Barrier(MPI_COMM_WORLD);
                    if (rank == 1) {
                        compute(T);
                    } else if (rank == 0) {
                        double t0 = MPI_Wtime();
                        switch (op) {
                        case ACC: MPI_Accumulate(origin, n, MPI_DOUBLE, 1, 0, n, MPI_DOUBLE, MPI_SUM, win); break;
                        case ACCV: MPI_Accumulate(origin, n, MPI_DOUBLE, 1, 0, 1, vec, MPI_SUM, win); break;
                        case PUT: MPI_Put(origin, n, MPI_DOUBLE, 1, 0, n, MPI_DOUBLE, win); break;
                        case GET: MPI_Get(origin, n, MPI_DOUBLE, 1, 0, n, MPI_DOUBLE, win); break;
                        }
                        MPI_Win_flush(1, win);
                        double us = (MPI_Wtime() - t0) * 1e6;
                        if (r >= 0) {
                            lat[r] = us;
                            if (samples) printf("sample,%s,%s,%d,%g,%d,%.3f\n", label, OPNAMES[op], n, T, r, us);
                        }
                    }
                    MPI_Barrier(MPI_COMM_WORLD);
                }
                if (rank == 0) {
                    qsort(lat, reps, sizeof(double), cmp_double);
                    double med = reps % 2 ? lat[reps / 2] : (lat[reps / 2 - 1] + lat[reps / 2]) / 2;
                    printf("%s,%s,%d,%g,%.3f,%.3f,%.3f\n", label, OPNAMES[op], n, T, med, lat[0], lat[reps - 1]);
                    fflush(stdout);
                }
            }
            if (vec != MPI_DATATYPE_NULL) MPI_Type_free(&vec);
            if (op == GET) /* restore the origin buffer for later operations */
                for (long i = 0; i < maxc; i++) origin[i] = 1.0;
        }
    }
    MPI_Win_unlock_all(win);
    uint64_t (*direct)(void) = (uint64_t(*)(void))dlsym(RTLD_DEFAULT, "shim_rma_direct");
    if (rank == 0 && redirected)
        fprintf(stderr, "# rma: %s: %llu operations redirected to ghosts, %llu done directly in shared memory\n",
                label, (unsigned long long)redirected(), direct ? (unsigned long long)direct() : 0ULL);
    MPI_Win_free(&win);
    if (rank == 0) { /* scripts/bench/run-rma keeps the samples if MPI_Finalize then hangs (see there) */
        printf("done,%s\n", label);
        fflush(stdout);
    }
    free(mem);
    free(origin);
    free(lat);
    MPI_Finalize();
    return 0;
}

/* An application that uses MPI_THREAD_MULTIPLE itself: several threads per rank, each
 * with its own communicator, run blocking and non-blocking collectives concurrently
 * (including several outstanding at once, completed in reverse order), while the main
 * thread checks MPI_Query_thread and runs its own collectives on MPI_COMM_WORLD. Results
 * are checked against values computed here. Run with SHIM_PROGRESS=none and thread. */
#include "common.h"
#include <pthread.h>

#define NT 3
#define ROUNDS 40

typedef struct {
    int id;
    MPI_Comm comm;
    int failed;
} targ_t;

static void *worker(void *p) {
    targ_t *t = p;
    int r, n;
    MPI_Comm_rank(t->comm, &r);
    MPI_Comm_size(t->comm, &n);
    for (int it = 0; it < ROUNDS; it++) {
        long v = (long)(r + 1) * (t->id + 1) + it, sum = -1;
        MPI_Allreduce(&v, &sum, 1, MPI_LONG, MPI_SUM, t->comm);
        long want = (long)(t->id + 1) * n * (n + 1) / 2 + (long)it * n;
        if (sum != want) t->failed = 1;
        /* three outstanding non-blocking collectives, completed in reverse order */
        int b = r == it % n ? 1000 * t->id + it : -1, *g = malloc(sizeof(int) * n), x = r * 7 + t->id;
        double d = r, dmax = -1;
        MPI_Request q[3];
        MPI_Ibcast(&b, 1, MPI_INT, it % n, t->comm, &q[0]);
        MPI_Iallgather(&x, 1, MPI_INT, g, 1, MPI_INT, t->comm, &q[1]);
        MPI_Iallreduce(&d, &dmax, 1, MPI_DOUBLE, MPI_MAX, t->comm, &q[2]);
        MPI_Wait(&q[2], MPI_STATUS_IGNORE);
        MPI_Wait(&q[1], MPI_STATUS_IGNORE);
        MPI_Wait(&q[0], MPI_STATUS_IGNORE);
        if (b != 1000 * t->id + it || dmax != n - 1) t->failed = 1;
        for (int i = 0; i < n; i++)
            if (g[i] != i * 7 + t->id) t->failed = 1;
        free(g);
        if (it % 10 == 0) MPI_Barrier(t->comm);
    }
    return NULL;
}

int main(int argc, char **argv) {
    int provided;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_size);
    CHECK(provided == MPI_THREAD_MULTIPLE, "MPI_THREAD_MULTIPLE not provided (%d)", provided);
    int q;
    MPI_Query_thread(&q);
    CHECK(q == provided, "MPI_Query_thread says %d, MPI_Init_thread said %d", q, provided);
    targ_t ts[NT];
    pthread_t th[NT];
    for (int i = 0; i < NT; i++) {
        ts[i].id = i;
        ts[i].failed = 0;
        MPI_Comm_dup(MPI_COMM_WORLD, &ts[i].comm);
    }
    for (int i = 0; i < NT; i++) pthread_create(&th[i], NULL, worker, &ts[i]);
    /* the main thread keeps using world meanwhile */
    for (int it = 0; it < ROUNDS; it++) {
        int v = g_rank, s;
        MPI_Allreduce(&v, &s, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        CHECK(s == g_size * (g_size - 1) / 2, "world allreduce %d", s);
    }
    for (int i = 0; i < NT; i++) pthread_join(th[i], NULL);
    for (int i = 0; i < NT; i++) {
        CHECK(!ts[i].failed, "thread %d computed a wrong collective result", i);
        MPI_Comm_free(&ts[i].comm);
    }
    const char *names[] = {"MPI_Allreduce", "MPI_Iallreduce", "MPI_Ibcast", "MPI_Iallgather", "MPI_Wait"};
    check_intercepted(names, 5);
    test_pass("mt_coll");
    MPI_Finalize();
    return 0;
}

/* cluster-ucx-finalize: a preload for MPICH 4.0.x over UCX (Debian's mpich 4.0.2 with UCX
 * 1.13) that `scripts/tools/cluster run` adds to its jobs, working around a native hang in
 * MPI_Finalize whenever UCX carries TCP traffic (between nodes of the cluster, or on one
 * host with UCX_TLS=tcp,self: 3 runs in 10 of a 4-rank job hang there too).
 *
 * The hang: MPICH 4.0's MPIDI_UCX_mpi_finalize_hook calls ucp_disconnect_nb (a close with
 * flush) on the endpoint of every rank, progresses the worker until its own requests have
 * completed, and then blocks in the PMI barrier without progressing UCX. The flush of a TCP
 * endpoint whose wireup was started late (by the first message to that peer) waits for the
 * peer's answer; a peer that has already reached the PMI barrier never answers, and the
 * rank spins in ucp_worker_progress forever, its peers wait in the barrier. (Later MPICH
 * versions put a PMI barrier before the disconnects.)
 *
 * The workaround: ucp_disconnect_nb flushes the endpoint while progressing the worker for
 * at most CLUSTER_UCX_FLUSH_MS milliseconds (default 500) and then leaves the endpoint
 * open; ucp_worker_destroy, which MPICH calls next, destroys it. Every MPI operation has
 * completed by then, so what is dropped is the wireup handshake, not data.
 *
 * No link against libucp: the real functions are found with dlsym(RTLD_NEXT), so processes
 * without UCX are untouched; a process whose UCX is not in the global scope is left alone. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

typedef void *ucp_ep_h;
typedef void *ucp_worker_h;
typedef void *ucp_context_h;
typedef void *ucs_status_ptr_t;
typedef int ucs_status_t;
#define UCS_INPROGRESS 1
#define UCS_ERR_LAST (-100)
#define PTR_IS_PTR(p) (((uintptr_t)(p) - 1) < ((uintptr_t)UCS_ERR_LAST - 1))
#define MAX_WORKERS 64

static ucp_worker_h workers[MAX_WORKERS];
static int nworkers;

ucs_status_t ucp_worker_create(ucp_context_h ctx, const void *params, ucp_worker_h *worker)
{
    static ucs_status_t (*real)(ucp_context_h, const void *, ucp_worker_h *);
    if (!real) real = (ucs_status_t(*)(ucp_context_h, const void *, ucp_worker_h *))dlsym(RTLD_NEXT, "ucp_worker_create");
    if (!real) return -1; /* UCS_ERR_NO_MESSAGE: cannot happen where libucp is linked */
    ucs_status_t st = real(ctx, params, worker);
    if (st == 0 && nworkers < MAX_WORKERS) workers[nworkers++] = *worker;
    return st;
}

static void flush_cb(void *request, ucs_status_t status) { (void)request; (void)status; }

ucs_status_ptr_t ucp_disconnect_nb(ucp_ep_h ep)
{
    static ucs_status_ptr_t (*flush)(ucp_ep_h, unsigned, void (*)(void *, ucs_status_t));
    static ucs_status_t (*check)(void *);
    static unsigned (*progress)(ucp_worker_h);
    static void (*release)(void *);
    static ucs_status_ptr_t (*real)(ucp_ep_h);
    if (!real) {
        real = (ucs_status_ptr_t(*)(ucp_ep_h))dlsym(RTLD_NEXT, "ucp_disconnect_nb");
        flush = (ucs_status_ptr_t(*)(ucp_ep_h, unsigned, void (*)(void *, ucs_status_t)))dlsym(RTLD_NEXT, "ucp_ep_flush_nb");
        check = (ucs_status_t(*)(void *))dlsym(RTLD_NEXT, "ucp_request_check_status");
        progress = (unsigned (*)(ucp_worker_h))dlsym(RTLD_NEXT, "ucp_worker_progress");
        release = (void (*)(void *))dlsym(RTLD_NEXT, "ucp_request_free");
    }
    if (!flush || !check || !progress || !release || nworkers == 0) return real ? real(ep) : NULL;
    const char *e = getenv("CLUSTER_UCX_FLUSH_MS");
    long ms = e ? atol(e) : 500;
    ucs_status_ptr_t req = flush(ep, 0, flush_cb);
    if (PTR_IS_PTR(req)) {
        struct timespec t0, t;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        while (check(req) == UCS_INPROGRESS) {
            for (int i = 0; i < nworkers; i++) progress(workers[i]);
            clock_gettime(CLOCK_MONOTONIC, &t);
            if ((t.tv_sec - t0.tv_sec) * 1000L + (t.tv_nsec - t0.tv_nsec) / 1000000L >= ms) break;
        }
        release(req);
    }
    return NULL; /* UCS_OK: nothing left for the caller to wait for */
}

/* One-sided communication in every epoch type, every RMA operation (and its R* and _c
 * forms), window flavours, and the request-completion family (Wait/Test and their
 * any/all/some forms, Request_get_status, Request_free, Cancel, Start/Startall) with
 * point-to-point requests. Results are checked; at the end every function used must have
 * been intercepted.
 *
 * Data is checked on MPI_Win_create windows over MPI_Alloc_mem memory: Debian's MPICH
 * 4.0.2 (ch4:ucx) delivers RMA on MPI_Win_allocate windows to the wrong process (a
 * regression of 4.0.1, pmodels/mpich#6110), so with the system MPI as the oracle those
 * windows are only created, synchronized and freed here. */
#include "common.h"

/* A window of `bytes` bytes over MPI_Alloc_mem memory (see above). */
static void *make_win(MPI_Aint bytes, int disp_unit, MPI_Win *win) {
    void *base;
    MPI_OK(MPI_Alloc_mem(bytes, MPI_INFO_NULL, &base));
    MPI_OK(MPI_Win_create(base, bytes, disp_unit, MPI_INFO_NULL, MPI_COMM_WORLD, win));
    return base;
}

static void free_win(MPI_Win *win, void *base) {
    MPI_OK(MPI_Win_free(win));
    MPI_OK(MPI_Free_mem(base));
}

static void t_win_allocate(void) {
    void *base;
    MPI_Win win;
    MPI_OK(MPI_Win_allocate(64, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &base, &win));
    MPI_OK(MPI_Win_fence(0, win));
    MPI_OK(MPI_Win_fence(0, win));
    MPI_OK(MPI_Win_free(&win));
}

static void t_fence_put_get(void) {
    MPI_Win win;
    int *base = make_win(sizeof(int) * g_size, sizeof(int), &win);
    for (int i = 0; i < g_size; i++) base[i] = -1;
    MPI_OK(MPI_Win_fence(0, win));
    int right = (g_rank + 1) % g_size, val = g_rank;
    MPI_OK(MPI_Put(&val, 1, MPI_INT, right, g_rank, 1, MPI_INT, win));
    MPI_OK(MPI_Win_fence(0, win));
    int left = (g_rank - 1 + g_size) % g_size;
    CHECK(base[left] == left, "fence/put: base[%d]=%d", left, base[left]);
    int got = -1;
    MPI_OK(MPI_Get(&got, 1, MPI_INT, right, g_rank, 1, MPI_INT, win));
    MPI_OK(MPI_Win_fence(0, win));
    CHECK(got == g_rank, "fence/get: %d", got);
    /* large-count forms */
    val = g_rank + 1000;
    MPI_OK(MPI_Put_c(&val, 1, MPI_INT, right, g_rank, 1, MPI_INT, win));
    MPI_OK(MPI_Win_fence(0, win));
    CHECK(base[left] == left + 1000, "put_c");
    MPI_OK(MPI_Get_c(&got, 1, MPI_INT, right, g_rank, 1, MPI_INT, win));
    MPI_OK(MPI_Win_fence(0, win));
    CHECK(got == g_rank + 1000, "get_c");
    free_win(&win, base);
}

static void t_lock_accumulate(void) {
    MPI_Win win;
    long *base = make_win(sizeof(long) * 4, sizeof(long), &win);
    for (int i = 0; i < 4; i++) base[i] = 0;
    MPI_Barrier(MPI_COMM_WORLD);
    /* every rank adds rank+1 to slot 0 of rank 0 under a shared lock */
    long one = g_rank + 1, old = -1, cmp, res;
    MPI_OK(MPI_Win_lock(MPI_LOCK_SHARED, 0, 0, win));
    MPI_OK(MPI_Accumulate(&one, 1, MPI_LONG, 0, 0, 1, MPI_LONG, MPI_SUM, win));
    MPI_OK(MPI_Accumulate_c(&one, 1, MPI_LONG, 0, 1, 1, MPI_LONG, MPI_SUM, win));
    MPI_OK(MPI_Win_flush(0, win));
    MPI_OK(MPI_Fetch_and_op(&one, &old, MPI_LONG, 0, 2, MPI_SUM, win));
    MPI_OK(MPI_Win_flush_local(0, win));
    MPI_OK(MPI_Get_accumulate(&one, 1, MPI_LONG, &res, 1, MPI_LONG, 0, 3, 1, MPI_LONG, MPI_SUM, win));
    MPI_OK(MPI_Win_unlock(0, win));
    MPI_Barrier(MPI_COMM_WORLD);
    long n = g_size, total = n * (n + 1) / 2;
    if (g_rank == 0) {
        MPI_OK(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 0, 0, win));
        CHECK(base[0] == total && base[1] == total && base[2] == total && base[3] == total,
              "accumulate: %ld %ld %ld %ld (want %ld)", base[0], base[1], base[2], base[3], total);
        MPI_OK(MPI_Win_unlock(0, win));
    }
    CHECK(old >= 0 && old < total, "fetch_and_op old=%ld", old);
    MPI_Barrier(MPI_COMM_WORLD);
    /* compare-and-swap: exactly one rank wins slot 0 of rank 0 after resetting it */
    if (g_rank == 0) {
        MPI_OK(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 0, 0, win));
        base[0] = -1;
        MPI_OK(MPI_Win_unlock(0, win));
    }
    MPI_Barrier(MPI_COMM_WORLD);
    cmp = -1;
    long mine = g_rank;
    MPI_OK(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 0, 0, win));
    MPI_OK(MPI_Compare_and_swap(&mine, &cmp, &res, MPI_LONG, 0, 0, win));
    MPI_OK(MPI_Win_unlock(0, win));
    int won = res == -1, winners = 0;
    MPI_Allreduce(&won, &winners, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    CHECK(winners == 1, "compare_and_swap winners=%d", winners);
    free_win(&win, base);
}

static void t_lockall_requests(void) {
    MPI_Win win;
    int *base = make_win(sizeof(int) * 2 * g_size, sizeof(int), &win);
    for (int i = 0; i < 2 * g_size; i++) base[i] = 0;
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_OK(MPI_Win_lock_all(0, win));
    int right = (g_rank + 1) % g_size, v = g_rank + 1, w = 2 * (g_rank + 1), r1 = -1, r2 = -1, acc = 1;
    MPI_Request rq[6];
    MPI_OK(MPI_Rput(&v, 1, MPI_INT, right, g_rank, 1, MPI_INT, win, &rq[0]));
    MPI_OK(MPI_Raccumulate(&acc, 1, MPI_INT, right, g_size + g_rank, 1, MPI_INT, MPI_SUM, win, &rq[1]));
    MPI_OK(MPI_Waitall(2, rq, MPI_STATUSES_IGNORE));
    MPI_OK(MPI_Win_flush_all(win));
    MPI_OK(MPI_Rget(&r1, 1, MPI_INT, right, g_rank, 1, MPI_INT, win, &rq[2]));
    MPI_OK(MPI_Wait(&rq[2], MPI_STATUS_IGNORE));
    CHECK(r1 == g_rank + 1, "rput/rget: %d", r1);
    MPI_OK(MPI_Rget_accumulate(&w, 1, MPI_INT, &r2, 1, MPI_INT, right, g_rank, 1, MPI_INT, MPI_REPLACE, win, &rq[3]));
    MPI_OK(MPI_Wait(&rq[3], MPI_STATUS_IGNORE));
    CHECK(r2 == g_rank + 1, "rget_accumulate old value %d", r2);
    MPI_OK(MPI_Rput_c(&w, 1, MPI_INT, right, g_rank, 1, MPI_INT, win, &rq[4]));
    MPI_OK(MPI_Wait(&rq[4], MPI_STATUS_IGNORE));
    MPI_OK(MPI_Win_flush_local_all(win));
    MPI_OK(MPI_Win_sync(win));
    MPI_OK(MPI_Win_unlock_all(win));
    MPI_Barrier(MPI_COMM_WORLD);
    int left = (g_rank - 1 + g_size) % g_size;
    MPI_OK(MPI_Win_lock(MPI_LOCK_SHARED, g_rank, 0, win));
    CHECK(base[left] == 2 * (left + 1), "lock_all result %d", base[left]);
    CHECK(base[g_size + left] == 1, "raccumulate result %d", base[g_size + left]);
    MPI_OK(MPI_Win_unlock(g_rank, win));
    free_win(&win, base);
}

static void t_pscw_create(void) {
    int buf[2] = {-1, -1};
    MPI_Win win;
    MPI_OK(MPI_Win_create(buf, sizeof buf, sizeof(int), MPI_INFO_NULL, MPI_COMM_WORLD, &win));
    MPI_Group world, peers;
    MPI_Comm_group(MPI_COMM_WORLD, &world);
    int left = (g_rank - 1 + g_size) % g_size, right = (g_rank + 1) % g_size;
    int ranks[2] = {left, right}, n = (left == right) ? 1 : 2;
    MPI_Group_incl(world, n, ranks, &peers);
    /* exposure to both neighbours, access to both neighbours */
    MPI_OK(MPI_Win_post(peers, 0, win));
    MPI_OK(MPI_Win_start(peers, 0, win));
    int v = g_rank;
    MPI_OK(MPI_Put(&v, 1, MPI_INT, right, 0, 1, MPI_INT, win));
    MPI_OK(MPI_Win_complete(win));
    int flag = 0;
    MPI_OK(MPI_Win_test(win, &flag));
    if (!flag) MPI_OK(MPI_Win_wait(win));
    CHECK(buf[0] == left, "pscw: %d", buf[0]);
    MPI_Group_free(&peers);
    MPI_Group_free(&world);
    MPI_OK(MPI_Win_free(&win));
}

static void t_shared_dynamic(void) {
    MPI_Comm node;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
    int nr, ns;
    MPI_Comm_rank(node, &nr);
    MPI_Comm_size(node, &ns);
    int *mem;
    MPI_Win sw;
    MPI_OK(MPI_Win_allocate_shared(sizeof(int), sizeof(int), MPI_INFO_NULL, node, &mem, &sw));
    MPI_OK(MPI_Win_lock_all(0, sw));
    *mem = nr * 7;
    MPI_OK(MPI_Win_sync(sw));
    MPI_Barrier(node);
    MPI_OK(MPI_Win_sync(sw));
    MPI_Aint sz;
    int du, *peer;
    MPI_OK(MPI_Win_shared_query(sw, (nr + 1) % ns, &sz, &du, &peer));
    CHECK(*peer == ((nr + 1) % ns) * 7, "shared query: %d", *peer);
    MPI_OK(MPI_Win_unlock_all(sw));
    MPI_OK(MPI_Win_free(&sw));
    MPI_Comm_free(&node);

    MPI_Win dw;
    int slot = -1;
    MPI_OK(MPI_Win_create_dynamic(MPI_INFO_NULL, MPI_COMM_WORLD, &dw));
    MPI_OK(MPI_Win_attach(dw, &slot, sizeof slot));
    MPI_Aint addr, *addrs = malloc(sizeof(MPI_Aint) * g_size);
    MPI_Get_address(&slot, &addr);
    MPI_Allgather(&addr, 1, MPI_AINT, addrs, 1, MPI_AINT, MPI_COMM_WORLD);
    MPI_OK(MPI_Win_fence(0, dw));
    int right = (g_rank + 1) % g_size, v = 40 + g_rank;
    MPI_OK(MPI_Put(&v, 1, MPI_INT, right, addrs[right], 1, MPI_INT, dw));
    MPI_OK(MPI_Win_fence(0, dw));
    CHECK(slot == 40 + (g_rank - 1 + g_size) % g_size, "dynamic window: %d", slot);
    MPI_OK(MPI_Win_detach(dw, &slot));
    MPI_OK(MPI_Win_free(&dw));
    free(addrs);
}

static void t_requests(void) {
    int right = (g_rank + 1) % g_size, left = (g_rank - 1 + g_size) % g_size;
    int out[4], in[4], idx, flag, cnt, idxs[4];
    MPI_Request r[4];
    MPI_Status st[4];
    for (int i = 0; i < 4; i++) out[i] = g_rank * 10 + i, in[i] = -1;
    /* Waitany / Waitsome / Waitall */
    for (int i = 0; i < 2; i++) {
        MPI_Irecv(&in[i], 1, MPI_INT, left, i, MPI_COMM_WORLD, &r[i]);
        MPI_Isend(&out[i], 1, MPI_INT, right, i, MPI_COMM_WORLD, &r[2 + i]);
    }
    MPI_OK(MPI_Waitany(4, r, &idx, &st[0]));
    CHECK(idx >= 0 && idx < 4 && r[idx] == MPI_REQUEST_NULL, "waitany idx=%d", idx);
    MPI_OK(MPI_Waitsome(4, r, &cnt, idxs, st));
    CHECK(cnt >= 0, "waitsome");
    MPI_OK(MPI_Waitall(4, r, st));
    CHECK(in[0] == left * 10 && in[1] == left * 10 + 1, "wait family data %d %d", in[0], in[1]);
    /* Test family */
    MPI_Irecv(&in[2], 1, MPI_INT, left, 2, MPI_COMM_WORLD, &r[0]);
    MPI_Isend(&out[2], 1, MPI_INT, right, 2, MPI_COMM_WORLD, &r[1]);
    do { MPI_OK(MPI_Testall(2, r, &flag, MPI_STATUSES_IGNORE)); } while (!flag);
    MPI_Irecv(&in[3], 1, MPI_INT, left, 3, MPI_COMM_WORLD, &r[0]);
    MPI_Isend(&out[3], 1, MPI_INT, right, 3, MPI_COMM_WORLD, &r[1]);
    int done = 0;
    while (done < 2) {
        MPI_OK(MPI_Testany(2, r, &idx, &flag, MPI_STATUS_IGNORE));
        if (flag && idx != MPI_UNDEFINED) done++;
        if (flag && idx == MPI_UNDEFINED) break;
    }
    CHECK(in[2] == left * 10 + 2 && in[3] == left * 10 + 3, "test family data");
    MPI_Irecv(&in[0], 1, MPI_INT, left, 4, MPI_COMM_WORLD, &r[0]);
    MPI_Isend(&out[0], 1, MPI_INT, right, 4, MPI_COMM_WORLD, &r[1]);
    int left_to_do = 2;
    while (left_to_do > 0) {
        MPI_OK(MPI_Testsome(2, r, &cnt, idxs, st));
        if (cnt == MPI_UNDEFINED) break;
        left_to_do -= cnt;
    }
    MPI_Irecv(&in[1], 1, MPI_INT, left, 5, MPI_COMM_WORLD, &r[0]);
    MPI_Isend(&out[1], 1, MPI_INT, right, 5, MPI_COMM_WORLD, &r[1]);
    flag = 0;
    while (!flag) MPI_OK(MPI_Request_get_status(r[0], &flag, &st[0]));
    CHECK(st[0].MPI_SOURCE == left && st[0].MPI_TAG == 5, "request_get_status status");
    MPI_OK(MPI_Wait(&r[0], MPI_STATUS_IGNORE));
    flag = 0;
    while (!flag) MPI_OK(MPI_Test(&r[1], &flag, MPI_STATUS_IGNORE));
    /* Request_free on a send request; Cancel on a receive that never matches */
    MPI_Isend(&out[2], 1, MPI_INT, right, 6, MPI_COMM_WORLD, &r[0]);
    MPI_OK(MPI_Request_free(&r[0]));
    MPI_Recv(&in[2], 1, MPI_INT, left, 6, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    MPI_Irecv(&in[3], 1, MPI_INT, left, 999, MPI_COMM_WORLD, &r[0]);
    MPI_OK(MPI_Cancel(&r[0]));
    MPI_OK(MPI_Wait(&r[0], &st[0]));
    MPI_Test_cancelled(&st[0], &flag);
    CHECK(flag, "cancelled receive not reported as cancelled");
    /* persistent point-to-point with Start and Startall */
    MPI_Recv_init(&in[0], 1, MPI_INT, left, 7, MPI_COMM_WORLD, &r[0]);
    MPI_Send_init(&out[0], 1, MPI_INT, right, 7, MPI_COMM_WORLD, &r[1]);
    for (int it = 0; it < 3; it++) {
        out[0] = it * 100 + g_rank;
        if (it == 0) {
            MPI_OK(MPI_Start(&r[0]));
            MPI_OK(MPI_Start(&r[1]));
        } else {
            MPI_OK(MPI_Startall(2, r));
        }
        MPI_OK(MPI_Waitall(2, r, MPI_STATUSES_IGNORE));
        CHECK(in[0] == it * 100 + left, "persistent p2p iteration %d: %d", it, in[0]);
    }
    MPI_Request_free(&r[0]);
    MPI_Request_free(&r[1]);
}

int main(int argc, char **argv) {
    test_init(&argc, &argv);
    t_win_allocate();
    t_fence_put_get();
    t_lock_accumulate();
    t_lockall_requests();
    t_pscw_create();
    t_shared_dynamic();
    t_requests();
    const char *names[] = {
        "MPI_Win_allocate", "MPI_Win_create", "MPI_Win_allocate_shared", "MPI_Win_create_dynamic",
        "MPI_Win_free", "MPI_Win_fence", "MPI_Win_lock", "MPI_Win_unlock", "MPI_Win_lock_all",
        "MPI_Win_unlock_all", "MPI_Win_flush", "MPI_Win_flush_all", "MPI_Win_flush_local",
        "MPI_Win_flush_local_all", "MPI_Win_sync", "MPI_Win_post", "MPI_Win_start", "MPI_Win_complete",
        "MPI_Win_test", "MPI_Win_shared_query", "MPI_Win_attach", "MPI_Win_detach", "MPI_Put", "MPI_Get",
        "MPI_Put_c", "MPI_Get_c", "MPI_Accumulate", "MPI_Accumulate_c", "MPI_Get_accumulate",
        "MPI_Fetch_and_op", "MPI_Compare_and_swap", "MPI_Rput", "MPI_Rget", "MPI_Raccumulate",
        "MPI_Rget_accumulate", "MPI_Rput_c", "MPI_Wait", "MPI_Waitall", "MPI_Waitany", "MPI_Waitsome",
        "MPI_Testall", "MPI_Testany", "MPI_Testsome", "MPI_Test", "MPI_Request_get_status",
        "MPI_Request_free", "MPI_Cancel", "MPI_Start", "MPI_Startall", "MPI_Init"};
    check_intercepted(names, sizeof(names) / sizeof(names[0]));
    test_pass("rma_req");
    MPI_Finalize();
    return 0;
}

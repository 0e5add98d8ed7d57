/*
 * ibemu_test: self-contained test of the emulated HCA (libshim-ibemu.so).
 * No MPI: each case forks 1-3 processes that talk through the emulator and
 * exchange their addressing (GID, QPN, rkeys) over socketpairs made before
 * fork(). Every wait has a timeout; the parent kills a case that overruns.
 * Exit 0 when every case passes.
 *
 * Usage: ibemu_test [--net local|tcp] [case-name ...]   (default: all cases)
 *
 * --net tcp sets IBEMU_NET=tcp and IBEMU_NET_ADDR=127.0.0.1 for every process
 * of every case, so the same cases run over the emulator's TCP data path;
 * cases that only make sense in one mode are skipped with the reason. The
 * emulator's agent thread (IBEMU_AGENT=1, the default) works while a process
 * makes no verbs call; a process waiting on its control socket in tcp mode
 * still polls its CQ meanwhile (as any program waiting for the network does,
 * and as IBEMU_AGENT=0 needs), unless a case turns that off. The agent_*
 * cases check the agent (and, with IBEMU_AGENT=0, that they would stall
 * without it); tcp_sleepy checks the calling-thread path with IBEMU_AGENT=0.
 */
#define _GNU_SOURCE
#include <infiniband/verbs.h>

#include <arpa/inet.h>
#include <dirent.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static const char *g_case = "";
static int g_net;                       /* --net tcp */
static struct ibv_cq *g_hook_cq;        /* tcp: polled while waiting on a socket
					 * (needed with IBEMU_AGENT=0) */

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void sleep_us(long us)
{
	struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
	nanosleep(&ts, NULL);
}

static void fail_at(int line, const char *cond, const char *fmt, ...)
{
	va_list ap;
	fprintf(stderr, "    [%s, pid %d] line %d: (%s) ", g_case, (int)getpid(), line, cond);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

/* In functions returning int: 0 = ok, nonzero = failed (already reported). */
#define CHECK(cond, ...)                                          \
	do {                                                      \
		if (!(cond)) {                                    \
			fail_at(__LINE__, #cond, __VA_ARGS__);    \
			return 1;                                 \
		}                                                 \
	} while (0)
#define TRY(x)                       \
	do {                         \
		if (x)               \
			return 1;    \
	} while (0)

#define ACC (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ)
#define WAIT_MS 5000

/* ------------------------------------------------------------------------ */
/* Sockets between the processes of a case                                   */

static int xread(int fd, void *p, size_t n, int ms)
{
	double end = now_s() + ms / 1000.0;
	char *c = p;
	while (n) {
		struct pollfd pfd = {.fd = fd, .events = POLLIN};
		int left = (int)((end - now_s()) * 1000);
		ssize_t r;
		CHECK(left > 0, "timed out reading from peer socket");
		if (g_net && g_hook_cq) {
			/* tcp mode, IBEMU_AGENT=0: the HCA works only inside
			 * verbs calls. */
			ibv_poll_cq(g_hook_cq, 0, NULL);
			if (poll(&pfd, 1, 0) <= 0) {
				sleep_us(50);
				continue;
			}
		} else if (poll(&pfd, 1, left) <= 0)
			continue;
		r = read(fd, c, n);
		CHECK(r > 0, "peer socket closed (%s)", r < 0 ? strerror(errno) : "EOF");
		c += r;
		n -= (size_t)r;
	}
	return 0;
}

static int xwrite(int fd, const void *p, size_t n)
{
	CHECK(write(fd, p, n) == (ssize_t)n, "socket write: %s", strerror(errno));
	return 0;
}

static int xchg(int fd, const void *mine, void *theirs, size_t n)
{
	TRY(xwrite(fd, mine, n));
	return xread(fd, theirs, n, 10000);
}

static int sync_peer(int fd)
{
	char a = 's', b;
	return xchg(fd, &a, &b, 1);
}

/* ------------------------------------------------------------------------ */
/* Verbs helpers                                                             */

struct node {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_srq *srq;
	char *buf;
	size_t len;
	struct ibv_mr *mr;
};

struct info {                   /* what peers exchange */
	union ibv_gid gid;
	uint32_t qpn, qpn2;
	uint32_t rkey, rkey2;
	uint64_t addr, addr2;
	int32_t pid;
	uint32_t pad;
};

static int node_open(struct node *n, size_t len, int cqe)
{
	int num = -1;
	struct ibv_device **l;
	struct ibv_srq_init_attr sa = {.attr = {.max_wr = 256, .max_sge = 4}};

	memset(n, 0, sizeof(*n));
	l = ibv_get_device_list(&num);
	CHECK(l && num == 1, "device list: %p num %d", (void *)l, num);
	n->ctx = ibv_open_device(l[0]);
	ibv_free_device_list(l);
	CHECK(n->ctx, "ibv_open_device: %s", strerror(errno));
	CHECK((n->pd = ibv_alloc_pd(n->ctx)), "alloc_pd");
	CHECK((n->cq = ibv_create_cq(n->ctx, cqe, NULL, NULL, 0)), "create_cq: %s", strerror(errno));
	CHECK((n->srq = ibv_create_srq(n->pd, &sa)), "create_srq: %s", strerror(errno));
	n->len = len;
	n->buf = aligned_alloc(4096, (len + 4095) & ~(size_t)4095);
	CHECK(n->buf, "malloc");
	memset(n->buf, 0, len);
	CHECK((n->mr = ibv_reg_mr(n->pd, n->buf, len, ACC)), "reg_mr: %s", strerror(errno));
	g_hook_cq = n->cq;
	return 0;
}

/* Inode numbers of the TCP sockets of this network namespace. */
static int tcp_inodes(unsigned long *ino, int max)
{
	static const char *const tabs[] = {"/proc/self/net/tcp", "/proc/self/net/tcp6"};
	char line[512];
	int k = 0;
	for (unsigned t = 0; t < 2; t++) {
		FILE *f = fopen(tabs[t], "r");
		if (!f)
			continue;
		while (fgets(line, sizeof(line), f) && k < max) {
			unsigned long v;
			char *p = line;
			int field = 0;
			while (*p && field < 9) {       /* inode is the 10th column */
				while (*p == ' ')
					p++;
				while (*p && *p != ' ')
					p++;
				field++;
			}
			if (sscanf(p, " %lu", &v) == 1 && v)
				ino[k++] = v;
		}
		fclose(f);
	}
	return k;
}

/* The emulator's agent threads in this process (one per open context with
 * IBEMU_AGENT=1), by name: sanitizers may run threads of their own. */
static int nagents(void)
{
	DIR *d = opendir("/proc/self/task");
	struct dirent *de;
	int k = 0;
	if (!d)
		return -1;
	while ((de = readdir(d))) {
		char p[300], name[32] = "";
		FILE *f;
		if (de->d_name[0] == '.')
			continue;
		snprintf(p, sizeof(p), "/proc/self/task/%s/comm", de->d_name);
		if ((f = fopen(p, "r"))) {
			if (fgets(name, sizeof(name), f))
				k += !strcmp(name, "ibemu-agent\n");
			fclose(f);
		}
	}
	closedir(d);
	return k;
}

/* The emulator's memfds (ours and mapped peers') must be gone after close,
 * and so must its TCP sockets and epoll set (tcp mode), its agent thread
 * and the agent's eventfd. */
static int no_memfd_left(void)
{
	char line[512];
	FILE *f = fopen("/proc/self/maps", "r");
	DIR *d;
	struct dirent *de;
	static unsigned long ino[65536];
	int nino = tcp_inodes(ino, 65536);
	CHECK(f, "open maps");
	while (fgets(line, sizeof(line), f)) {
		if (strstr(line, "memfd:ibemu")) {
			fclose(f);
			CHECK(0, "mapping left after ibv_close_device: %s", line);
		}
	}
	fclose(f);
	d = opendir("/proc/self/fd");
	CHECK(d, "opendir");
	while ((de = readdir(d))) {
		char p[300], t[256];
		ssize_t k;
		snprintf(p, sizeof(p), "/proc/self/fd/%s", de->d_name);
		k = readlink(p, t, sizeof(t) - 1);
		if (k > 0) {
			t[k] = 0;
			unsigned long v;
			if (strstr(t, "memfd:ibemu") || strstr(t, "[eventpoll]") || strstr(t, "[eventfd]")) {
				closedir(d);
				CHECK(0, "fd left after ibv_close_device: %s", t);
			}
			if (sscanf(t, "socket:[%lu]", &v) == 1)
				for (int i = 0; i < nino; i++)
					if (ino[i] == v) {
						closedir(d);
						CHECK(0, "TCP socket left after ibv_close_device: fd %s", de->d_name);
					}
		}
	}
	closedir(d);
	CHECK(nagents() == 0, "%d agent threads left after ibv_close_device (they must be joined)", nagents());
	return 0;
}

/* Destroys the QPs given (NULL-terminated), then everything else. */
static int node_close(struct node *n, struct ibv_qp **qps)
{
	for (; qps && *qps; qps++)
		CHECK(ibv_destroy_qp(*qps) == 0, "destroy_qp");
	CHECK(ibv_dereg_mr(n->mr) == 0, "dereg_mr");
	CHECK(ibv_destroy_srq(n->srq) == 0, "destroy_srq");
	CHECK(ibv_destroy_cq(n->cq) == 0, "destroy_cq");
	CHECK(ibv_dealloc_pd(n->pd) == 0, "dealloc_pd");
	CHECK(ibv_close_device(n->ctx) == 0, "close_device");
	if (g_hook_cq == n->cq)
		g_hook_cq = NULL;
	free(n->buf);
	return no_memfd_left();
}

static struct ibv_qp *mkqp_cq(struct node *n, struct ibv_cq *cq, int use_srq, uint32_t max_send_wr,
			      uint32_t inl)
{
	struct ibv_qp_init_attr ia = {
		.send_cq = cq,
		.recv_cq = cq,
		.srq = use_srq ? n->srq : NULL,
		.cap = {.max_send_wr = max_send_wr, .max_recv_wr = 64, .max_send_sge = 4, .max_recv_sge = 4,
			.max_inline_data = inl},
		.qp_type = IBV_QPT_RC,
	};
	struct ibv_qp *qp = ibv_create_qp(n->pd, &ia);
	if (!qp)
		fail_at(__LINE__, "create_qp", "%s", strerror(errno));
	else if (ia.cap.max_inline_data != inl)
		fail_at(__LINE__, "create_qp", "max_inline_data reported %u", ia.cap.max_inline_data);
	return qp;
}

static struct ibv_qp *mkqp(struct node *n, int use_srq, uint32_t max_send_wr, uint32_t inl)
{
	return mkqp_cq(n, n->cq, use_srq, max_send_wr, inl);
}

struct copts { uint8_t timeout, retry_cnt, rnr_retry, min_rnr_timer; };
static const struct copts C_DEF = {14, 7, 7, 1};      /* 14: 67 ms ACK timeout */

static const int M_INIT = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
static const int M_RTR = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
			 IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
static const int M_RTS = IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
			 IBV_QP_MAX_QP_RD_ATOMIC;

static struct ibv_qp_attr a_init(void)
{
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = 1,
				.qp_access_flags = ACC};
	return a;
}

static struct ibv_qp_attr a_rtr(const union ibv_gid *dgid, uint32_t dqpn, struct copts o)
{
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_RTR, .path_mtu = IBV_MTU_4096, .dest_qp_num = dqpn,
				.rq_psn = 0, .max_dest_rd_atomic = 4, .min_rnr_timer = o.min_rnr_timer};
	a.ah_attr.is_global = 1;
	a.ah_attr.port_num = 1;
	a.ah_attr.grh.dgid = *dgid;
	a.ah_attr.grh.sgid_index = 0;
	a.ah_attr.grh.hop_limit = 1;
	return a;
}

static struct ibv_qp_attr a_rts(struct copts o)
{
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_RTS, .timeout = o.timeout, .retry_cnt = o.retry_cnt,
				.rnr_retry = o.rnr_retry, .sq_psn = 0, .max_rd_atomic = 4};
	return a;
}

static int qp_up(struct ibv_qp *qp, const union ibv_gid *dgid, uint32_t dqpn, struct copts o)
{
	struct ibv_qp_attr a = a_init();
	int rc = ibv_modify_qp(qp, &a, M_INIT);
	CHECK(rc == 0, "to INIT: %s", strerror(rc));
	a = a_rtr(dgid, dqpn, o);
	rc = ibv_modify_qp(qp, &a, M_RTR);
	CHECK(rc == 0, "to RTR: %s", strerror(rc));
	a = a_rts(o);
	rc = ibv_modify_qp(qp, &a, M_RTS);
	CHECK(rc == 0, "to RTS: %s", strerror(rc));
	return 0;
}

static union ibv_gid my_gid(struct node *n)
{
	union ibv_gid g;
	memset(&g, 0, sizeof(g));
	if (ibv_query_gid(n->ctx, 1, 0, &g))
		fail_at(__LINE__, "query_gid", "%s", strerror(errno));
	return g;
}

static struct ibv_sge sge(struct ibv_mr *mr, const void *p, uint32_t len)
{
	struct ibv_sge s = {.addr = (uintptr_t)p, .length = len, .lkey = mr->lkey};
	return s;
}

static int post(struct ibv_qp *qp, uint64_t wr_id, enum ibv_wr_opcode op, unsigned flags, struct ibv_sge *sg,
		int nsge, uint32_t imm_host, uint64_t raddr, uint32_t rkey)
{
	struct ibv_send_wr wr, *bad = NULL;
	int rc;
	memset(&wr, 0, sizeof(wr));
	wr.wr_id = wr_id;
	wr.opcode = op;
	wr.send_flags = flags;
	wr.sg_list = sg;
	wr.num_sge = nsge;
	wr.imm_data = htonl(imm_host);
	wr.wr.rdma.remote_addr = raddr;
	wr.wr.rdma.rkey = rkey;
	rc = ibv_post_send(qp, &wr, &bad);
	CHECK(rc == 0, "post_send wr_id %#llx: %s", (unsigned long long)wr_id, strerror(rc));
	return 0;
}

static int post_srq(struct ibv_srq *srq, uint64_t wr_id, struct ibv_sge *sg, int n)
{
	struct ibv_recv_wr wr = {.wr_id = wr_id, .sg_list = sg, .num_sge = n}, *bad;
	int rc = ibv_post_srq_recv(srq, &wr, &bad);
	CHECK(rc == 0, "post_srq_recv: %s", strerror(rc));
	return 0;
}

static int post_rq(struct ibv_qp *qp, uint64_t wr_id, struct ibv_sge *sg, int n)
{
	struct ibv_recv_wr wr = {.wr_id = wr_id, .sg_list = sg, .num_sge = n}, *bad;
	int rc = ibv_post_recv(qp, &wr, &bad);
	CHECK(rc == 0, "post_recv: %s", strerror(rc));
	return 0;
}

/* 1: got one, 0: timeout, -1: poll error. Sleeps between empty polls. */
static int wait_wc(struct ibv_cq *cq, struct ibv_wc *wc, int ms)
{
	double end = now_s() + ms / 1000.0;
	for (;;) {
		int n = ibv_poll_cq(cq, 1, wc);
		if (n)
			return n < 0 ? -1 : 1;
		if (now_s() > end)
			return 0;
		sleep_us(50);
	}
}

static int expect_wc(struct ibv_cq *cq, enum ibv_wc_status st, int opcode, uint64_t wr_id, struct ibv_wc *out)
{
	struct ibv_wc wc;
	int n = wait_wc(cq, &wc, WAIT_MS);
	CHECK(n == 1, "no completion (poll %d) while waiting for wr_id %#llx status '%s'", n,
	      (unsigned long long)wr_id, ibv_wc_status_str(st));
	CHECK(wc.wr_id == wr_id && wc.status == st && (opcode < 0 || (int)wc.opcode == opcode),
	      "got wr_id %#llx status '%s' opcode %d; want wr_id %#llx status '%s' opcode %d",
	      (unsigned long long)wc.wr_id, ibv_wc_status_str(wc.status), wc.opcode, (unsigned long long)wr_id,
	      ibv_wc_status_str(st), opcode);
	CHECK(wc.vendor_err == 0, "vendor_err %u", wc.vendor_err);
	if (out)
		*out = wc;
	return 0;
}

static int expect_none(struct ibv_cq *cq, int ms)
{
	struct ibv_wc wc;
	int n = wait_wc(cq, &wc, ms);
	CHECK(n == 0, "unexpected completion: poll %d wr_id %#llx status '%s'", n, (unsigned long long)wc.wr_id,
	      ibv_wc_status_str(wc.status));
	return 0;
}

static enum ibv_qp_state qp_state(struct ibv_qp *qp)
{
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;
	if (ibv_query_qp(qp, &a, IBV_QP_STATE, &ia))
		return (enum ibv_qp_state)-1;
	return a.qp_state;
}

static void pattern(char *p, size_t n, unsigned seed)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (char)(seed * 37u + i * 7u + (i >> 8));
}

static int check_pattern(const char *p, size_t n, unsigned seed)
{
	for (size_t i = 0; i < n; i++)
		CHECK(p[i] == (char)(seed * 37u + i * 7u + (i >> 8)), "data mismatch at byte %zu of %zu (seed %u)", i,
		      n, seed);
	return 0;
}

static int all_zero(const char *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		CHECK(p[i] == 0, "byte %zu was written (%#x), expected untouched", i, (unsigned char)p[i]);
	return 0;
}

/* Connects two QPs of one context to each other (loopback). */
static int loop_up(struct node *n, struct ibv_qp *a, struct ibv_qp *b)
{
	union ibv_gid g = my_gid(n);
	TRY(qp_up(a, &g, b->qp_num, C_DEF));
	return qp_up(b, &g, a->qp_num, C_DEF);
}

/* Captures this process's stderr into a memfd while `on`. */
static int cap_fd = -1, saved_err = -1;
static void capture(int on)
{
	fflush(stderr);
	if (on) {
		cap_fd = memfd_create("cap", 0);
		saved_err = dup(2);
		dup2(cap_fd, 2);
	} else {
		dup2(saved_err, 2);
		close(saved_err);
	}
}
static char *captured(void)
{
	static char b[4096];
	ssize_t k = pread(cap_fd, b, sizeof(b) - 1, 0);
	b[k > 0 ? k : 0] = 0;
	close(cap_fd);
	return b;
}

/* ------------------------------------------------------------------------ */
/* Cases: device, environment, QP state machine (single process)             */

static char tmpbuf_inline[256];         /* not registered: inline ignores lkeys */
static int req_notify_ok(struct ibv_context *ctx);

static int c_device(int rank, int *fd)
{
	int num = -1;
	struct ibv_device **l;
	struct ibv_context *ctx, *ctx2;
	struct ibv_device_attr da;
	struct ibv_port_attr pa;
	union ibv_gid g, g2;
	uint32_t v;
	char path[64], target[256];
	ssize_t k;
	Dl_info di;
	void *h;
	(void)rank;
	(void)fd;

	l = ibv_get_device_list(&num);
	CHECK(l && num == 1 && l[0] && !l[1], "want exactly one device (num %d)", num);
	CHECK(!strcmp(ibv_get_device_name(l[0]), "ibemu0"), "name %s", ibv_get_device_name(l[0]));
	CHECK(ibv_get_device_guid(l[0]) != 0 && ibv_get_device_guid(l[0]) == ibv_get_device_guid(l[0]), "guid");
	ctx = ibv_open_device(l[0]);
	CHECK(ctx, "open: %s", strerror(errno));
	CHECK(ctx->device == l[0] && !ctx->abi_compat && ctx->ops.post_send && ctx->ops.post_recv &&
		      ctx->ops.post_srq_recv && ctx->ops.poll_cq && ctx->ops.req_notify_cq,
	      "context fields/ops not filled");
	CHECK(ibv_query_device(ctx, &da) == 0, "query_device");
	CHECK(da.max_qp == 65536 && da.max_qp_wr == 16384 && da.max_sge == 16 && da.max_cq == 65536 &&
		      da.max_cqe == 1 << 20 && da.max_mr == 1 << 20 && da.max_srq == 1024 &&
		      da.max_srq_wr == 16384 && da.max_srq_sge == 16 && da.max_qp_rd_atom == 16 &&
		      da.phys_port_cnt == 1 && da.node_guid == ibv_get_device_guid(l[0]),
	      "device limits");
	/* Through the header's macro: ___ibv_query_port -> exported ibv_query_port. */
	memset(&pa, 0xff, sizeof(pa));
	CHECK(ibv_query_port(ctx, 1, &pa) == 0, "query_port");
	CHECK(pa.state == IBV_PORT_ACTIVE && pa.active_mtu == IBV_MTU_4096 && pa.max_mtu == IBV_MTU_4096 &&
		      pa.link_layer == IBV_LINK_LAYER_ETHERNET && pa.gid_tbl_len == 1 && pa.lid == 0 &&
		      pa.max_msg_sz == 1u << 31 && pa.pkey_tbl_len == 1 && pa.flags == 0,
	      "port attrs: state %d mtu %d ll %d gids %d", pa.state, pa.active_mtu, pa.link_layer, pa.gid_tbl_len);
	CHECK(ibv_query_port(ctx, 2, &pa) != 0, "port 2 must not exist");
	CHECK(ibv_query_gid(ctx, 1, 0, &g) == 0, "query_gid");
	if (g_net) {
		/* fe80:6974, IPv4 address, port, 0, nonce; the listener answers. */
		struct sockaddr_in sa = {.sin_family = AF_INET};
		int s;
		CHECK(g.raw[0] == 0xfe && g.raw[1] == 0x80 && g.raw[2] == 0x69 && g.raw[3] == 0x74, "tcp GID magic");
		memcpy(&sa.sin_addr, g.raw + 4, 4);
		memcpy(&sa.sin_port, g.raw + 8, 2);
		CHECK(sa.sin_addr.s_addr == htonl(INADDR_LOOPBACK) && sa.sin_port && !g.raw[10] && !g.raw[11],
		      "GID address %s port %u (IBEMU_NET_ADDR=127.0.0.1)", inet_ntoa(sa.sin_addr), ntohs(sa.sin_port));
		s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		CHECK(s >= 0 && connect(s, (struct sockaddr *)&sa, sizeof(sa)) == 0, "GID's port does not listen: %s",
		      strerror(errno));
		close(s);
		(void)v;
		(void)path;
		(void)target;
		(void)k;
	} else {
		CHECK(g.raw[0] == 0xfe && g.raw[1] == 0x80 && g.raw[2] == 0x69 && g.raw[3] == 0x65, "GID magic");
		memcpy(&v, g.raw + 4, 4);
		CHECK(ntohl(v) == (uint32_t)getpid(), "GID pid %u", ntohl(v));
		memcpy(&v, g.raw + 8, 4);
		snprintf(path, sizeof(path), "/proc/self/fd/%u", ntohl(v));
		k = readlink(path, target, sizeof(target) - 1);
		CHECK(k > 0, "GID fd %u is not open", ntohl(v));
		target[k] = 0;
		CHECK(strstr(target, "memfd:ibemu"), "GID fd is %s, not the memfd", target);
	}
	CHECK(ibv_query_gid(ctx, 1, 1, &g2) == -1, "gid index 1 must fail");
	ctx2 = ibv_open_device(l[0]);
	CHECK(ctx2, "second open");
	CHECK(ibv_query_gid(ctx2, 1, 0, &g2) == 0 && memcmp(&g, &g2, sizeof(g)) != 0, "two contexts, one GID");
	CHECK(ibv_close_device(ctx2) == 0, "close 2");
	CHECK(!strcmp(ibv_wc_status_str(IBV_WC_RETRY_EXC_ERR), "transport retry counter exceeded") &&
		      !strcmp(ibv_wc_status_str(IBV_WC_SUCCESS), "success"),
	      "wc_status_str");
	CHECK(ibv_fork_init() == 0, "fork_init");
	CHECK(req_notify_ok(ctx), "req_notify");

	/* As the shim loads it: dlopen by path, dlsym / dlvsym. */
	CHECK(dladdr((void *)ibv_open_device, &di) && di.dli_fname, "dladdr");
	h = dlopen(di.dli_fname, RTLD_NOW | RTLD_LOCAL);
	CHECK(h, "dlopen %s: %s", di.dli_fname, dlerror());
	CHECK(dlsym(h, "ibv_reg_mr") && dlsym(h, "ibv_query_port") && dlsym(h, "ibv_reg_mr_iova2") &&
		      dlsym(h, "ibv_get_device_list"),
	      "dlsym");
	CHECK(dlvsym(h, "ibv_query_port", "IBVERBS_1.1") && dlvsym(h, "ibv_reg_mr", "IBVERBS_1.1") &&
		      dlvsym(h, "ibv_modify_qp", "IBVERBS_1.1") && dlvsym(h, "ibv_reg_mr_iova2", "IBVERBS_1.1") &&
		      dlvsym(h, "ibv_reg_mr_iova2", "IBVERBS_1.8") && dlvsym(h, "ibv_reg_mr_iova", "IBVERBS_1.7"),
	      "dlvsym");
	CHECK(!dlsym(h, "emu_reg_mr_iova2") && !dlsym(h, "progress") && !dlsym(h, "execute"),
	      "internal symbols must be local");
	dlclose(h);
	{       /* the real libibverbs must not have been pulled in */
		char line[512];
		FILE *f = fopen("/proc/self/maps", "r");
		int bad = 0;
		while (f && fgets(line, sizeof(line), f))
			bad |= strstr(line, "libibverbs") != NULL;
		if (f)
			fclose(f);
		CHECK(!bad, "libibverbs is mapped");
	}
	ibv_free_device_list(l);
	CHECK(ibv_close_device(ctx) == 0, "close");
	return no_memfd_left();
}

static int req_notify_ok(struct ibv_context *ctx)
{
	struct ibv_cq *cq = ibv_create_cq(ctx, 8, NULL, NULL, 0);
	int ok = cq && ibv_req_notify_cq(cq, 0) == 0 && cq->cqe == 8 && cq->context == ctx;
	if (cq)
		ibv_destroy_cq(cq);
	return ok;
}

static int open_fails(const char *var, const char *val)
{
	int num;
	struct ibv_device **l = ibv_get_device_list(&num);
	struct ibv_context *ctx;
	char *msg, *old = getenv(var) ? strdup(getenv(var)) : NULL;
	CHECK(l && num == 1, "list");
	setenv(var, val, 1);
	capture(1);
	errno = 0;
	ctx = ibv_open_device(l[0]);
	int e = errno;
	capture(0);
	msg = captured();
	if (old)                        /* e.g. IBEMU_NET under --net tcp */
		setenv(var, old, 1);
	else
		unsetenv(var);
	free(old);
	ibv_free_device_list(l);
	CHECK(!ctx && e == EINVAL, "%s='%s' must fail open with EINVAL (ctx %p errno %d)", var, val, (void *)ctx, e);
	CHECK(strstr(msg, var) && strstr(msg, val) && strchr(msg, '\n') == msg + strlen(msg) - 1,
	      "want one stderr line naming %s and '%s', got: %s", var, val, msg);
	return 0;
}

static int c_env(int rank, int *fd)
{
	int num = -1;
	struct ibv_device **l;
	struct ibv_context *ctx;
	char *msg;
	(void)rank;
	(void)fd;

	setenv("IBEMU_NODEV", "1", 1);
	errno = 0;
	l = ibv_get_device_list(&num);
	CHECK(l && num == 0 && l[0] == NULL && errno == ENODEV, "IBEMU_NODEV=1: list %p num %d errno %d", (void *)l,
	      num, errno);
	ibv_free_device_list(l);
	setenv("IBEMU_NODEV", "yes", 1);
	capture(1);
	l = ibv_get_device_list(&num);
	capture(0);
	msg = captured();
	CHECK(!l && errno == EINVAL && strstr(msg, "IBEMU_NODEV"), "IBEMU_NODEV=yes must be refused");
	setenv("IBEMU_NODEV", "0", 1);
	l = ibv_get_device_list(&num);
	CHECK(l && num == 1, "IBEMU_NODEV=0");
	ibv_free_device_list(l);
	unsetenv("IBEMU_NODEV");

	TRY(open_fails("IBEMU_FAULT", "bogus"));
	TRY(open_fails("IBEMU_FAULT", "rem_access"));
	TRY(open_fails("IBEMU_FAULT", "rem_access:0"));
	TRY(open_fails("IBEMU_FAULT", "qp_err:x"));
	TRY(open_fails("IBEMU_FAULT", "qp_err:2,teleport:1"));
	TRY(open_fails("IBEMU_FAULT_RANK", "one"));
	TRY(open_fails("IBEMU_TRACE", "2"));
	TRY(open_fails("IBEMU_AGENT", "2"));
	TRY(open_fails("IBEMU_AGENT", "on"));

	/* IBEMU_AGENT: one thread per context (default 1), none with 0. */
	{
		struct ibv_context *c1, *c2;
		l = ibv_get_device_list(&num);
		CHECK(l && num == 1, "list");
		setenv("IBEMU_AGENT", "0", 1);
		c1 = ibv_open_device(l[0]);
		CHECK(c1 && nagents() == 0, "IBEMU_AGENT=0: ctx %p, %d agents", (void *)c1, nagents());
		setenv("IBEMU_AGENT", "1", 1);
		c2 = ibv_open_device(l[0]);
		CHECK(c2 && nagents() == 1, "IBEMU_AGENT=1: ctx %p, %d agents", (void *)c2, nagents());
		unsetenv("IBEMU_AGENT");
		ctx = ibv_open_device(l[0]);
		CHECK(ctx && nagents() == 2, "IBEMU_AGENT unset: ctx %p, %d agents", (void *)ctx, nagents());
		CHECK(ibv_close_device(c2) == 0 && nagents() == 1, "close: %d agents", nagents());
		CHECK(ibv_close_device(ctx) == 0 && ibv_close_device(c1) == 0 && nagents() == 0, "close all");
		ibv_free_device_list(l);
	}

	/* Valid combinations open fine. */
	setenv("IBEMU_FAULT", "rem_access:1,qp_err:3,retry_exc:2", 1);
	setenv("IBEMU_FAULT_RANK", "0", 1);
	l = ibv_get_device_list(&num);
	CHECK(l && num == 1, "list");
	ctx = ibv_open_device(l[0]);
	CHECK(ctx, "valid IBEMU_FAULT refused: %s", strerror(errno));
	ibv_close_device(ctx);
	unsetenv("IBEMU_FAULT");
	unsetenv("IBEMU_FAULT_RANK");

	/* IBEMU_TRACE=1: one line per executed WR. */
	{
		struct node n;
		struct ibv_qp *a, *b, *qps[3];
		struct ibv_sge s;
		setenv("IBEMU_TRACE", "1", 1);
		TRY(node_open(&n, 4096, 16));
		unsetenv("IBEMU_TRACE");
		CHECK((a = mkqp(&n, 0, 4, 0)) && (b = mkqp(&n, 0, 4, 0)), "qps");
		TRY(loop_up(&n, a, b));
		s = sge(n.mr, n.buf + 64, 16);
		TRY(post_rq(b, 1, &s, 1));
		s = sge(n.mr, n.buf, 16);
		capture(1);
		int rc = post(a, 2, IBV_WR_SEND, IBV_SEND_SIGNALED, &s, 1, 0, 0, 0);
		capture(0);
		msg = captured();
		TRY(rc);
		CHECK(strstr(msg, "SEND") && strstr(msg, "success"), "trace line missing: '%s'", msg);
		TRY(expect_wc(n.cq, IBV_WC_SUCCESS, IBV_WC_RECV, 1, NULL));
		TRY(expect_wc(n.cq, IBV_WC_SUCCESS, IBV_WC_SEND, 2, NULL));
		qps[0] = a;
		qps[1] = b;
		qps[2] = NULL;
		TRY(node_close(&n, qps));
	}
	l = ibv_get_device_list(&num);
	ibv_free_device_list(l);
	return 0;
}

static int c_qp_state(int rank, int *fd)
{
	struct node n;
	struct ibv_qp *qp, *more[10], *qps[2] = {NULL, NULL};
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;
	struct ibv_send_wr wr, *bad;
	struct ibv_sge s;
	struct ibv_wc wc;
	union ibv_gid g, zero;
	int rc;
	(void)rank;
	(void)fd;

	TRY(node_open(&n, 1 << 16, 64));
	g = my_gid(&n);
	CHECK((qp = mkqp(&n, 0, 16, 64)), "create qp");
	CHECK(qp->qp_num && qp->qp_num < (1u << 24) && qp->state == IBV_QPS_RESET && qp->qp_type == IBV_QPT_RC &&
		      qp->send_cq == n.cq && qp->recv_cq == n.cq && !qp->srq && qp->pd == n.pd &&
		      qp->context == n.ctx,
	      "qp fields");
	CHECK(n.mr->lkey == n.mr->rkey && n.mr->addr == n.buf && n.mr->length == n.len && n.mr->pd == n.pd &&
		      n.mr->context == n.ctx && n.pd->context == n.ctx && n.srq->pd == n.pd && n.cq->cqe == 64,
	      "mr/pd/srq/cq fields");

	/* Bad transitions and attr masks return EINVAL (ibv_modify_qp(3)). */
	a = a_init();
	CHECK(ibv_modify_qp(qp, &a, M_INIT & ~IBV_QP_ACCESS_FLAGS) == EINVAL, "INIT without ACCESS_FLAGS");
	CHECK(ibv_modify_qp(qp, &a, M_INIT & ~IBV_QP_PORT) == EINVAL, "INIT without PORT");
	CHECK(ibv_modify_qp(qp, &a, M_INIT | IBV_QP_CAP) == EINVAL, "INIT with a foreign attr bit");
	a.port_num = 2;
	CHECK(ibv_modify_qp(qp, &a, M_INIT) == EINVAL, "INIT on port 2");
	a = a_rtr(&g, qp->qp_num, C_DEF);
	CHECK(ibv_modify_qp(qp, &a, M_RTR) == EINVAL, "RESET -> RTR");
	a = a_init();
	CHECK(ibv_modify_qp(qp, &a, M_INIT) == 0, "RESET -> INIT");
	CHECK(qp->state == IBV_QPS_INIT && qp_state(qp) == IBV_QPS_INIT, "state INIT");
	s = sge(n.mr, n.buf + 1024, 64);
	TRY(post_rq(qp, 100, &s, 1));           /* receives may be posted in INIT */
	memset(&wr, 0, sizeof(wr));
	s = sge(n.mr, n.buf, 16);
	wr.wr_id = 1;
	wr.opcode = IBV_WR_SEND;
	wr.sg_list = &s;
	wr.num_sge = 1;
	bad = NULL;
	CHECK(ibv_post_send(qp, &wr, &bad) == EINVAL && bad == &wr, "post_send in INIT must be EINVAL with bad_wr");
	a = a_rtr(&g, qp->qp_num, C_DEF);
	CHECK(ibv_modify_qp(qp, &a, M_RTR & ~IBV_QP_MIN_RNR_TIMER) == EINVAL, "RTR without MIN_RNR_TIMER");
	CHECK(ibv_modify_qp(qp, &a, M_RTR & ~IBV_QP_AV) == EINVAL, "RTR without AV");
	zero = g;                               /* right pid/fd/nonce, wrong magic */
	zero.raw[3] ^= 0xff;
	a = a_rtr(&zero, qp->qp_num, C_DEF);
	CHECK(ibv_modify_qp(qp, &a, M_RTR) == EINVAL, "RTR to a GID without the ibemu magic");
	memset(&zero, 0, sizeof(zero));         /* an ordinary link-local GID */
	zero.raw[0] = 0xfe;
	zero.raw[1] = 0x80;
	zero.raw[15] = 1;
	a = a_rtr(&zero, qp->qp_num, C_DEF);
	CHECK(ibv_modify_qp(qp, &a, M_RTR) == EINVAL, "RTR to fe80::1");
	a = a_rtr(&g, qp->qp_num, C_DEF);
	a.ah_attr.is_global = 0;
	CHECK(ibv_modify_qp(qp, &a, M_RTR) == EINVAL, "RTR without GRH");
	a = a_rts(C_DEF);
	CHECK(ibv_modify_qp(qp, &a, M_RTS) == EINVAL, "INIT -> RTS");
	/* Self-connected QP (loopback onto its own RQ). */
	a = a_rtr(&g, qp->qp_num, C_DEF);
	CHECK(ibv_modify_qp(qp, &a, M_RTR) == 0, "INIT -> RTR");
	bad = NULL;
	CHECK(ibv_post_send(qp, &wr, &bad) == EINVAL && bad == &wr, "post_send in RTR must be EINVAL");
	a = a_rts(C_DEF);
	CHECK(ibv_modify_qp(qp, &a, M_RTS & ~IBV_QP_SQ_PSN) == EINVAL, "RTS without SQ_PSN");
	CHECK(ibv_modify_qp(qp, &a, M_RTS & ~IBV_QP_RNR_RETRY) == EINVAL, "RTS without RNR_RETRY");
	CHECK(ibv_modify_qp(qp, &a, M_RTS) == 0, "RTR -> RTS");
	a = a_rtr(&g, qp->qp_num, C_DEF);
	CHECK(ibv_modify_qp(qp, &a, IBV_QP_STATE) == EINVAL, "RTS -> RTR");
	a.min_rnr_timer = 3;
	CHECK(ibv_modify_qp(qp, &a, IBV_QP_MIN_RNR_TIMER) == 0, "RTS -> RTS modify min_rnr_timer");
	CHECK(ibv_query_qp(qp, &a, IBV_QP_STATE | IBV_QP_DEST_QPN, &ia) == 0, "query_qp");
	CHECK(a.qp_state == IBV_QPS_RTS && a.dest_qp_num == qp->qp_num && a.timeout == 14 && a.rnr_retry == 7 &&
		      a.min_rnr_timer == 3 && a.cap.max_send_wr == 16 && a.cap.max_inline_data == 64 &&
		      ia.send_cq == n.cq && ia.qp_type == IBV_QPT_RC && a.ah_attr.is_global == 1,
	      "query_qp values");
	pattern(n.buf, 16, 1);
	wr.send_flags = IBV_SEND_SIGNALED;
	CHECK(ibv_post_send(qp, &wr, &bad) == 0, "loopback send");
	TRY(expect_wc(n.cq, IBV_WC_SUCCESS, IBV_WC_RECV, 100, &wc));
	CHECK(wc.byte_len == 16 && wc.qp_num == qp->qp_num && wc.src_qp == qp->qp_num, "loopback recv wc");
	TRY(check_pattern(n.buf + 1024, 16, 1));
	TRY(expect_wc(n.cq, IBV_WC_SUCCESS, IBV_WC_SEND, 1, NULL));

	/* To ERR: the QP's own RQ is flushed; later sends complete flushed. */
	s = sge(n.mr, n.buf + 2048, 64);
	TRY(post_rq(qp, 101, &s, 1));
	a.qp_state = IBV_QPS_ERR;
	CHECK(ibv_modify_qp(qp, &a, IBV_QP_STATE) == 0, "-> ERR");
	TRY(expect_wc(n.cq, IBV_WC_WR_FLUSH_ERR, -1, 101, NULL));
	CHECK(qp_state(qp) == IBV_QPS_ERR && qp->state == IBV_QPS_ERR, "state ERR");
	wr.wr_id = 2;
	wr.send_flags = 0;              /* error completions come even unsignaled */
	CHECK(ibv_post_send(qp, &wr, &bad) == 0, "post_send in ERR is accepted");
	TRY(expect_wc(n.cq, IBV_WC_WR_FLUSH_ERR, -1, 2, NULL));
	a.qp_state = IBV_QPS_RTS;
	CHECK(ibv_modify_qp(qp, &a, IBV_QP_STATE) == EINVAL, "ERR -> RTS");
	a.qp_state = IBV_QPS_RESET;
	CHECK(ibv_modify_qp(qp, &a, IBV_QP_STATE) == 0, "ERR -> RESET");
	a = a_init();
	CHECK(ibv_modify_qp(qp, &a, M_INIT) == 0, "RESET -> INIT again");
	TRY(expect_none(n.cq, 20));

	/* QPNs: nonzero, 24-bit, unique. EBUSY while objects are in use. */
	for (int i = 0; i < 10; i++) {
		CHECK((more[i] = mkqp(&n, 1, 4, 0)), "qp %d", i);
		CHECK(more[i]->qp_num && more[i]->qp_num < (1u << 24) && more[i]->qp_num != qp->qp_num &&
			      more[i]->srq == n.srq,
		      "qpn %#x", more[i]->qp_num);
		for (int j = 0; j < i; j++)
			CHECK(more[i]->qp_num != more[j]->qp_num, "duplicate qpn %#x", more[i]->qp_num);
	}
	CHECK(ibv_destroy_cq(n.cq) == EBUSY, "destroy_cq with QPs must be EBUSY");
	CHECK(ibv_destroy_srq(n.srq) == EBUSY, "destroy_srq with QPs must be EBUSY");
	CHECK(ibv_dealloc_pd(n.pd) == EBUSY, "dealloc_pd with objects must be EBUSY");
	for (int i = 0; i < 10; i++)
		CHECK(ibv_destroy_qp(more[i]) == 0, "destroy");
	{       /* RC only */
		struct ibv_qp_init_attr ud = {.send_cq = n.cq, .recv_cq = n.cq, .qp_type = IBV_QPT_UD,
					      .cap = {.max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1,
						      .max_recv_sge = 1}};
		CHECK(!ibv_create_qp(n.pd, &ud), "UD QP must be refused");
	}

	/* CQ overrun: the CQ goes to error, poll_cq returns -1 (one stderr line). */
	{
		struct ibv_cq *small = ibv_create_cq(n.ctx, 4, NULL, NULL, 0);
		struct ibv_qp *o;
		char *msg;
		CHECK(small, "small cq");
		CHECK((o = mkqp_cq(&n, small, 0, 16, 0)), "qp on small cq");
		a = a_init();
		CHECK(ibv_modify_qp(o, &a, M_INIT) == 0, "init");
		a = a_rtr(&g, o->qp_num, C_DEF);
		CHECK(ibv_modify_qp(o, &a, M_RTR) == 0, "rtr");
		a = a_rts(C_DEF);
		CHECK(ibv_modify_qp(o, &a, M_RTS) == 0, "rts");
		for (int i = 0; i < 4; i++) {
			s = sge(n.mr, n.buf + 4096 + 64 * i, 64);
			TRY(post_rq(o, 200 + i, &s, 1));
		}
		s = sge(n.mr, n.buf, 8);
		for (int i = 0; i < 4; i++)
			TRY(post(o, 300 + i, IBV_WR_SEND, IBV_SEND_SIGNALED, &s, 1, 0, 0, 0));
		capture(1);
		rc = ibv_poll_cq(small, 1, &wc);
		int rc2 = ibv_poll_cq(small, 1, &wc);
		capture(0);
		msg = captured();
		CHECK(rc == -1 && rc2 == -1, "overrun CQ must return -1 (got %d, %d)", rc, rc2);
		CHECK(strstr(msg, "overrun") && strchr(msg, '\n') == msg + strlen(msg) - 1,
		      "want one line about the overrun, got '%s'", msg);
		CHECK(ibv_destroy_qp(o) == 0 && ibv_destroy_cq(small) == 0, "destroy");
	}
	qps[0] = qp;
	return node_close(&n, qps);
}

/* ------------------------------------------------------------------------ */
/* Two-process cases. Rank 0 is the receiver/target, rank 1 the sender.      */

struct pair {
	struct node n;
	struct ibv_qp *qp, *qp2;
	struct info me, peer;
};

/* Opens a node, two QPs (qp on the SRQ, qp2 with its own RQ unless
 * qp2_srq), exchanges addresses and brings both to RTS. */
static int pair_up(struct pair *p, int fd, size_t len, int qp2_srq, struct copts o, struct copts o2)
{
	TRY(node_open(&p->n, len, 1024));
	CHECK((p->qp = mkqp(&p->n, 1, 256, 256)), "qp");
	CHECK((p->qp2 = mkqp(&p->n, qp2_srq, 64, 0)), "qp2");
	memset(&p->me, 0, sizeof(p->me));
	p->me.gid = my_gid(&p->n);
	p->me.qpn = p->qp->qp_num;
	p->me.qpn2 = p->qp2->qp_num;
	p->me.rkey = p->n.mr->rkey;
	p->me.addr = (uintptr_t)p->n.buf;
	p->me.pid = getpid();
	TRY(xchg(fd, &p->me, &p->peer, sizeof(p->me)));
	TRY(qp_up(p->qp, &p->peer.gid, p->peer.qpn, o));
	TRY(qp_up(p->qp2, &p->peer.gid, p->peer.qpn2, o2));
	return sync_peer(fd);                   /* both sides in RTS */
}

static int pair_down(struct pair *p, int fd)
{
	struct ibv_qp *qps[3] = {p->qp, p->qp2, NULL};
	TRY(sync_peer(fd));                     /* nobody tears down under the other */
	return node_close(&p->n, qps);
}

static int c_send_recv(int rank, int *fd)
{
	struct pair p;
	struct ibv_sge s[3];
	struct ibv_wc wc;
	TRY(pair_up(&p, fd[1 - rank], 1 << 20, 0, C_DEF, C_DEF));
	char *b = p.n.buf;
	if (rank == 0) {
		/* SRQ receives, consumed in order: 1 SGE, 3 SGEs, 1, 3, 1. */
		s[0] = sge(p.n.mr, b, 4096);
		TRY(post_srq(p.n.srq, 101, s, 1));
		s[0] = sge(p.n.mr, b + 8192, 100);
		s[1] = sge(p.n.mr, b + 16384, 200);
		s[2] = sge(p.n.mr, b + 24576, 4000);
		TRY(post_srq(p.n.srq, 102, s, 3));
		s[0] = sge(p.n.mr, b + 32768, 4096);
		TRY(post_srq(p.n.srq, 103, s, 1));
		s[0] = sge(p.n.mr, b + 40960, 50);
		s[1] = sge(p.n.mr, b + 45056, 50);
		s[2] = sge(p.n.mr, b + 49152, 100);
		TRY(post_srq(p.n.srq, 104, s, 3));
		s[0] = sge(p.n.mr, b + 53248, 16);
		TRY(post_srq(p.n.srq, 105, s, 1));
		s[0] = sge(p.n.mr, b + 65536, 4096);    /* qp2's own RQ */
		TRY(post_rq(p.qp2, 201, s, 1));
		TRY(sync_peer(fd[1]));                  /* receives are posted */
		static const uint64_t ids[] = {101, 102, 103, 104, 105};
		static const uint32_t lens[] = {3000, 1000, 200, 150, 0};
		for (int i = 0; i < 5; i++) {
			TRY(expect_wc(p.n.cq, IBV_WC_SUCCESS, IBV_WC_RECV, ids[i], &wc));
			CHECK(wc.byte_len == lens[i] && wc.qp_num == p.qp->qp_num && wc.src_qp == p.peer.qpn &&
				      !(wc.wc_flags & IBV_WC_WITH_IMM),
			      "recv %d: byte_len %u qp_num %#x src_qp %#x flags %#x", i, wc.byte_len, wc.qp_num,
			      wc.src_qp, wc.wc_flags);
		}
		TRY(expect_wc(p.n.cq, IBV_WC_SUCCESS, IBV_WC_RECV, 201, &wc));
		CHECK(wc.byte_len == 500 && wc.qp_num == p.qp2->qp_num && wc.src_qp == p.peer.qpn2, "qp2 recv");
		TRY(check_pattern(b, 3000, 1));
		/* 1000 bytes scattered over 100 + 200 + 700 (of 4000). */
		char tmp[1000];
		memcpy(tmp, b + 8192, 100);
		memcpy(tmp + 100, b + 16384, 200);
		memcpy(tmp + 300, b + 24576, 700);
		TRY(check_pattern(tmp, 1000, 2));
		TRY(all_zero(b + 24576 + 700, 100));
		TRY(check_pattern(b + 32768, 200, 3));
		memcpy(tmp, b + 40960, 50);
		memcpy(tmp + 50, b + 45056, 50);
		memcpy(tmp + 100, b + 49152, 50);
		TRY(check_pattern(tmp, 150, 4));
		TRY(all_zero(b + 53248, 16));
		TRY(check_pattern(b + 65536, 500, 6));
		TRY(expect_none(p.n.cq, 20));
	} else {
		TRY(sync_peer(fd[0]));
		pattern(b, 3000, 1);
		s[0] = sge(p.n.mr, b, 3000);
		TRY(post(p.qp, 1, IBV_WR_SEND, IBV_SEND_SIGNALED, s, 1, 0, 0, 0));
		/* 3 SGEs from scattered places, unsignaled. */
		char msg[1000];
		pattern(msg, 1000, 2);
		memcpy(b + 8192, msg, 300);
		memcpy(b + 20000, msg + 300, 700);
		s[0] = sge(p.n.mr, b + 8192, 300);
		s[1] = sge(p.n.mr, b + 20000, 300);
		s[2] = sge(p.n.mr, b + 20300, 400);
		TRY(post(p.qp, 2, IBV_WR_SEND, 0, s, 3, 0, 0, 0));
		/* Inline: copied at post time, the buffer is clobbered right after. */
		pattern(b + 32768, 200, 3);
		s[0] = sge(p.n.mr, b + 32768, 200);
		s[0].lkey = 0xdead;                     /* lkey is not used for inline data */
		TRY(post(p.qp, 3, IBV_WR_SEND, IBV_SEND_SIGNALED | IBV_SEND_INLINE, s, 1, 0, 0, 0));
		memset(b + 32768, 0x5a, 200);
		pattern(tmpbuf_inline, 150, 4);
		s[0] = sge(p.n.mr, tmpbuf_inline, 50);
		s[1] = sge(p.n.mr, tmpbuf_inline + 50, 50);
		s[2] = sge(p.n.mr, tmpbuf_inline + 100, 50);
		TRY(post(p.qp, 4, IBV_WR_SEND, IBV_SEND_INLINE, s, 3, 0, 0, 0));
		memset(tmpbuf_inline, 0x5a, 150);
		TRY(post(p.qp, 5, IBV_WR_SEND, IBV_SEND_SIGNALED, NULL, 0, 0, 0, 0));   /* 0 bytes */
		pattern(b + 65536, 500, 6);
		s[0] = sge(p.n.mr, b + 65536, 500);
		TRY(post(p.qp2, 6, IBV_WR_SEND, IBV_SEND_SIGNALED, s, 1, 0, 0, 0));
		/* Only the signaled WRs complete. */
		TRY(expect_wc(p.n.cq, IBV_WC_SUCCESS, IBV_WC_SEND, 1, &wc));
		CHECK(wc.qp_num == p.qp->qp_num, "send wc qp_num");
		TRY(expect_wc(p.n.cq, IBV_WC_SUCCESS, IBV_WC_SEND, 3, NULL));
		TRY(expect_wc(p.n.cq, IBV_WC_SUCCESS, IBV_WC_SEND, 5, NULL));
		TRY(expect_wc(p.n.cq, IBV_WC_SUCCESS, IBV_WC_SEND, 6, &wc));
		CHECK(wc.qp_num == p.qp2->qp_num, "send wc qp_num (qp2)");
		TRY(expect_none(p.n.cq, 20));
	}
	return pair_down(&p, fd[1 - rank]);
}

static int c_send_imm(int rank, int *fd)
{
	struct pair p;
	struct ibv_sge s;
	struct ibv_wc wc;
	TRY(pair_up(&p, fd[1 - rank], 1 << 16, 0, C_DEF, C_DEF));
	if (rank == 0) {
		s = sge(p.n.mr, p.n.buf, 256);
		TRY(post_srq(p.n.srq, 1, &s, 1));
		s = sge(p.n.mr, p.n.buf + 256, 256);
		TRY(post_srq(p.n.srq, 2, &s, 1));
		TRY(sync_peer(fd[1]));
		TRY(expect_wc(p.n.cq, IBV_WC_SUCCESS, IBV_WC_RECV, 1, &wc));
		CHECK(wc.byte_len == 64 && (wc.wc_flags & IBV_WC_WITH_IMM) && wc.imm_data == htonl(0xdeadbeef) &&
			      wc.src_qp == p.peer.qpn,
		      "imm recv: len %u flags %#x imm %#x", wc.byte_len, wc.wc_flags, wc.imm_data);
		TRY(check_pattern(p.n.buf, 64, 9));
		TRY(expect_wc(p.n.cq, IBV_WC_SUCCESS, IBV_WC_RECV, 2, &wc));
		CHECK(wc.byte_len == 0 && (wc.wc_flags & IBV_WC_WITH_IMM) && wc.imm_data == htonl(7),
		      "0-byte imm recv: len %u imm %#x", wc.byte_len, wc.imm_data);
	} else {
		TRY(sync_peer(fd[0]));
		pattern(p.n.buf, 64, 9);
		s = sge(p.n.mr, p.n.buf, 64);
		TRY(post(p.qp, 11, IBV_WR_SEND_WITH_IMM, IBV_SEND_SIGNALED, &s, 1, 0xdeadbeef, 0, 0));
		TRY(post(p.qp, 12, IBV_WR_SEND_WITH_IMM, IBV_SEND_SIGNALED, NULL, 0, 7, 0, 0));
		TRY(expect_wc(p.n.cq, IBV_WC_SUCCESS, IBV_WC_SEND, 11, NULL));
		TRY(expect_wc(p.n.cq, IBV_WC_SUCCESS, IBV_WC_SEND, 12, NULL));
	}
	return pair_down(&p, fd[1 - rank]);
}

static int c_rdma_write(int rank, int *fd)
{
	struct pair p;
	struct ibv_sge s[2];
	struct ibv_wc wc;
	const size_t MB = 1 << 20;
	TRY(pair_up(&p, fd[1 - rank], 2 * MB, 0, C_DEF, C_DEF));
	char *b = p.n.buf;
	if (rank == 0) {
		memset(b + MB + MB / 2, 0xaa, 8192);    /* receive buffers: must stay untouched */
		s[0] = sge(p.n.mr, b + MB + MB / 2, 4096);
		TRY(post_srq(p.n.srq, 301, s, 1));
		s[0] = sge(p.n.mr, b + MB + MB / 2 + 4096, 4096);
		TRY(post_srq(p.n.srq, 302, s, 1));
		TRY(sync_peer(fd[1]));
		/* The data of the WRITE (and of all earlier WRs) precedes the CQE. */
		TRY(expect_wc(p.n.cq, IBV_WC_SUCCESS, IBV_WC_RECV_RDMA_WITH_IMM, 301, &wc));
		TRY(check_pattern(b, MB, 11));
		CHECK(wc.byte_len == 0 && (wc.wc_flags & IBV_WC_WITH_IMM) && wc.imm_data == htonl(1) &&
			      wc.qp_num == p.qp->qp_num && wc.src_qp == p.peer.qpn,
		      "write-imm wc: len %u flags %#x imm %#x", wc.byte_len, wc.wc_flags, wc.imm_data);
		TRY(expect_wc(p.n.cq, IBV_WC_SUCCESS, IBV_WC_RECV_RDMA_WITH_IMM, 302, &wc));
		CHECK(wc.byte_len == 4096 && wc.imm_data == htonl(2), "write-imm 2 wc: len %u", wc.byte_len);
		TRY(check_pattern(b + MB, 4096, 12));
		for (int i = 0; i < 8192; i++)
			CHECK((unsigned char)b[MB + MB / 2 + i] == 0xaa, "receive buffer written at %d", i);
	} else {
		TRY(sync_peer(fd[0]));
		pattern(b, MB, 11);
		pattern(b + MB, 4096, 12);
		s[0] = sge(p.n.mr, b, MB / 2);
		s[1] = sge(p.n.mr, b + MB / 2, MB / 2);
		TRY(post(p.qp, 11, IBV_WR_RDMA_WRITE, 0, s, 2, 0, p.peer.addr, p.peer.rkey));
		/* 0 bytes: the rkey is not checked (IB spec C9-88), rkey 0 is fine. */
		TRY(post(p.qp, 12, IBV_WR_RDMA_WRITE_WITH_IMM, IBV_SEND_SIGNALED, NULL, 0, 1, 0, 0));
		s[0] = sge(p.n.mr, b + MB, 2048);
		s[1] = sge(p.n.mr, b + MB + 2048, 2048);
		TRY(post(p.qp, 13, IBV_WR_RDMA_WRITE_WITH_IMM, IBV_SEND_SIGNALED, s, 2, 2, p.peer.addr + MB,
			 p.peer.rkey));
		TRY(expect_wc(p.n.cq, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE, 12, NULL));
		TRY(expect_wc(p.n.cq, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE, 13, NULL));
		TRY(expect_none(p.n.cq, 20));
	}
	return pair_down(&p, fd[1 - rank]);
}

static int c_rdma_read(int rank, int *fd)
{
	struct pair p;
	struct ibv_sge s[2];
	struct ibv_wc wc;
	TRY(pair_up(&p, fd[1 - rank], 1 << 20, 0, C_DEF, C_DEF));
	char *b = p.n.buf;
	if (rank == 0) {
		pattern(b + 4096, 65536, 21);
		TRY(sync_peer(fd[1]));          /* data ready */
	} else {
		TRY(sync_peer(fd[0]));
		s[0] = sge(p.n.mr, b + 200000, 32768);
		s[1] = sge(p.n.mr, b + 300000, 32768);
		TRY(post(p.qp, 21, IBV_WR_RDMA_READ, IBV_SEND_SIGNALED, s, 2, 0, p.peer.addr + 4096, p.peer.rkey));
		TRY(expect_wc(p.n.cq, IBV_WC_SUCCESS, IBV_WC_RDMA_READ, 21, &wc));
		CHECK(wc.byte_len == 65536 && wc.qp_num == p.qp->qp_num, "read wc byte_len %u", wc.byte_len);
		memmove(b + 200000 + 32768, b + 300000, 32768);
		TRY(check_pattern(b + 200000, 65536, 21));
		/* The destination of a READ needs local write access: LOC_PROT_ERR. */
		static char ro[4096];
		struct ibv_mr *mr = ibv_reg_mr(p.n.pd, ro, sizeof(ro), 0);
		CHECK(mr, "reg read-only mr");
		s[0] = sge(mr, ro, 4096);
		TRY(post(p.qp, 22, IBV_WR_RDMA_READ, IBV_SEND_SIGNALED, s, 1, 0, p.peer.addr, p.peer.rkey));
		TRY(expect_wc(p.n.cq, IBV_WC_LOC_PROT_ERR, -1, 22, NULL));
		CHECK(ibv_dereg_mr(mr) == 0, "dereg");
	}
	return pair_down(&p, fd[1 - rank]);
}

/* RNR: everything is posted before any receive exists; once the receiver
 * posts, all 100 arrive, in order. Then rnr_retry 2 against an RQ that
 * stays empty ends in RNR_RETRY_EXC_ERR. */
static int c_rnr(int rank, int *fd)
{
	struct pair p;
	struct ibv_sge s;
	struct ibv_wc wc;
	struct copts o2 = C_DEF;
	enum { N = 100 };
	o2.rnr_retry = 2;
	TRY(pair_up(&p, fd[1 - rank], 1 << 20, 0, C_DEF, o2));
	char *b = p.n.buf;
	if (rank == 0) {
		char go;
		TRY(xread(fd[1], &go, 1, 10000));      /* sender has posted everything */
		sleep_us(30000);                        /* let it hit RNR a few times */
		for (int i = 0; i < N; i++) {
			s = sge(p.n.mr, b + 1024 * i, 1024);
			TRY(post_srq(p.n.srq, 1000 + i, &s, 1));
			if (i % 10 == 9)
				sleep_us(2000);
		}
		for (int i = 0; i < N; i++) {
			uint32_t seq;
			TRY(expect_wc(p.n.cq, IBV_WC_SUCCESS, IBV_WC_RECV, 1000 + i, &wc));
			memcpy(&seq, b + 1024 * i, 4);
			CHECK(seq == (uint32_t)i && wc.byte_len == 8 + (uint32_t)i % 50,
			      "message %d carries seq %u len %u", i, seq, wc.byte_len);
		}
		TRY(expect_none(p.n.cq, 50));   /* qp2's RQ: nothing posted, nothing consumed */
	} else {
		char go = 'g';
		for (int i = 0; i < N; i++) {
			uint32_t seq = (uint32_t)i;
			memcpy(b + 1024 * i, &seq, 4);
			s = sge(p.n.mr, b + 1024 * i, 8 + (uint32_t)i % 50);
			TRY(post(p.qp, (uint64_t)i, IBV_WR_SEND, IBV_SEND_SIGNALED, &s, 1, 0, 0, 0));
		}
		TRY(expect_none(p.n.cq, 10));   /* all blocked behind the first RNR */
		TRY(xwrite(fd[0], &go, 1));
		for (int i = 0; i < N; i++)
			TRY(expect_wc(p.n.cq, IBV_WC_SUCCESS, IBV_WC_SEND, (uint64_t)i, NULL));
		/* rnr_retry 2 (and min_rnr_timer 1 at the responder): gives up. */
		s = sge(p.n.mr, b, 8);
		TRY(post(p.qp2, 7, IBV_WR_SEND, 0, &s, 1, 0, 0, 0));
		TRY(post(p.qp2, 8, IBV_WR_SEND, IBV_SEND_SIGNALED, &s, 1, 0, 0, 0));
		TRY(expect_wc(p.n.cq, IBV_WC_RNR_RETRY_EXC_ERR, -1, 7, NULL));
		TRY(expect_wc(p.n.cq, IBV_WC_WR_FLUSH_ERR, -1, 8, NULL));
		CHECK(qp_state(p.qp2) == IBV_QPS_ERR, "qp2 must be in ERR");
	}
	return pair_down(&p, fd[1 - rank]);
}

/* A bad rkey (and an out-of-range address): REM_ACCESS_ERR at the sender,
 * the WRs behind it flushed, nothing written, SRQ receives not flushed. */
static int c_bad_rkey(int rank, int *fd)
{
	struct pair p;
	struct ibv_sge s;
	TRY(pair_up(&p, fd[1 - rank], 1 << 16, 1, C_DEF, C_DEF));
	char *b = p.n.buf;
	if (rank == 0) {
		s = sge(p.n.mr, b + 60000, 100);
		TRY(post_srq(p.n.srq, 1, &s, 1));
		TRY(post_srq(p.n.srq, 2, &s, 1));
		TRY(sync_peer(fd[1]));
		TRY(sync_peer(fd[1]));          /* sender done */
		TRY(all_zero(b, 1 << 16));
		TRY(expect_none(p.n.cq, 50));   /* SRQ receives stay posted */
		CHECK(qp_state(p.qp) == IBV_QPS_ERR && qp_state(p.qp2) == IBV_QPS_ERR,
		      "responder QPs go to ERR after an access violation (states %d %d)", qp_state(p.qp),
		      qp_state(p.qp2));
	} else {
		struct ibv_send_wr w[3], *bad = NULL;
		TRY(sync_peer(fd[0]));
		pattern(b, 8192, 5);
		s = sge(p.n.mr, b, 4096);
		memset(w, 0, sizeof(w));
		for (int i = 0; i < 3; i++) {
			w[i].wr_id = 41 + (uint64_t)i;
			w[i].sg_list = &s;
			w[i].num_sge = 1;
			w[i].opcode = IBV_WR_RDMA_WRITE;
			w[i].wr.rdma.remote_addr = p.peer.addr;
			w[i].wr.rdma.rkey = p.peer.rkey;
			w[i].next = i < 2 ? &w[i + 1] : NULL;
		}
		w[0].wr.rdma.rkey = p.peer.rkey ^ 0x5a5a00;
		w[0].send_flags = IBV_SEND_SIGNALED;
		w[2].opcode = IBV_WR_SEND;
		CHECK(ibv_post_send(p.qp, w, &bad) == 0, "post list");
		TRY(expect_wc(p.n.cq, IBV_WC_REM_ACCESS_ERR, IBV_WC_RDMA_WRITE, 41, NULL));
		TRY(expect_wc(p.n.cq, IBV_WC_WR_FLUSH_ERR, -1, 42, NULL));
		TRY(expect_wc(p.n.cq, IBV_WC_WR_FLUSH_ERR, -1, 43, NULL));
		CHECK(qp_state(p.qp) == IBV_QPS_ERR && p.qp->state == IBV_QPS_ERR, "sender QP must be in ERR");
		TRY(post(p.qp, 44, IBV_WR_SEND, 0, &s, 1, 0, 0, 0));
		TRY(expect_wc(p.n.cq, IBV_WC_WR_FLUSH_ERR, -1, 44, NULL));
		/* Valid rkey, range past the end of the MR. */
		TRY(post(p.qp2, 45, IBV_WR_RDMA_WRITE, 0, &s, 1, 0, p.peer.addr + (1 << 16) - 100, p.peer.rkey));
		TRY(expect_wc(p.n.cq, IBV_WC_REM_ACCESS_ERR, -1, 45, NULL));
		TRY(sync_peer(fd[0]));
	}
	return pair_down(&p, fd[1 - rank]);
}

/* A deregistered MR's rkey fails afterwards (right away, and after the
 * slot has been reused by new registrations); keys are never reused. */
static int c_dereg(int rank, int *fd)
{
	struct pair p;
	struct ibv_sge s;
	struct { uint32_t rkey, pad; uint64_t addr; } k;
	int f = fd[1 - rank];
	TRY(pair_up(&p, f, 1 << 16, 1, C_DEF, C_DEF));
	if (rank == 0) {
		static char area[8192];
		uint32_t keys[101];
		int nk = 0;
		struct ibv_mr *mr = ibv_reg_mr(p.n.pd, area, sizeof(area), ACC), *m = NULL;
		CHECK(mr, "reg");
		memset(&k, 0, sizeof(k));
		k.rkey = mr->rkey;
		k.addr = (uintptr_t)area;
		TRY(xwrite(f, &k, sizeof(k)));
		TRY(sync_peer(f));              /* first write done */
		TRY(check_pattern(area, 4096, 8));
		keys[nk++] = mr->rkey;
		CHECK(ibv_dereg_mr(mr) == 0, "dereg");
		memset(area, 0, sizeof(area));
		TRY(sync_peer(f));              /* the old key is dead now */
		TRY(sync_peer(f));              /* write with it has failed */
		TRY(all_zero(area, sizeof(area)));
		for (int i = 0; i < 100; i++) {
			CHECK((m = ibv_reg_mr(p.n.pd, area, sizeof(area), ACC)), "re-reg");
			for (int j = 0; j < nk; j++)
				CHECK(m->rkey != keys[j] && m->lkey != keys[j], "key %#x reused", m->rkey);
			keys[nk++] = m->rkey;
			if (i < 99)
				CHECK(ibv_dereg_mr(m) == 0, "dereg");
		}
		TRY(sync_peer(f));              /* area registered again, new key */
		TRY(sync_peer(f));              /* old key failed again */
		TRY(all_zero(area, sizeof(area)));
		CHECK(ibv_dereg_mr(m) == 0, "dereg");
	} else {
		TRY(xread(f, &k, sizeof(k), 10000));
		pattern(p.n.buf, 4096, 8);
		s = sge(p.n.mr, p.n.buf, 4096);
		TRY(post(p.qp, 1, IBV_WR_RDMA_WRITE, IBV_SEND_SIGNALED, &s, 1, 0, k.addr, k.rkey));
		TRY(expect_wc(p.n.cq, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE, 1, NULL));
		TRY(sync_peer(f));
		TRY(sync_peer(f));
		TRY(post(p.qp, 2, IBV_WR_RDMA_WRITE, IBV_SEND_SIGNALED, &s, 1, 0, k.addr, k.rkey));
		TRY(expect_wc(p.n.cq, IBV_WC_REM_ACCESS_ERR, IBV_WC_RDMA_WRITE, 2, NULL));
		TRY(sync_peer(f));
		TRY(sync_peer(f));
		TRY(post(p.qp2, 3, IBV_WR_RDMA_WRITE, IBV_SEND_SIGNALED, &s, 1, 0, k.addr, k.rkey));
		TRY(expect_wc(p.n.cq, IBV_WC_REM_ACCESS_ERR, IBV_WC_RDMA_WRITE, 3, NULL));
		TRY(sync_peer(f));
	}
	return pair_down(&p, f);
}

/* SEND longer than the receive WQE: REM_INV_REQ_ERR / LOC_LEN_ERR. */
static int c_short_recv(int rank, int *fd)
{
	struct pair p;
	struct ibv_sge s;
	int f = fd[1 - rank];
	TRY(pair_up(&p, f, 1 << 16, 1, C_DEF, C_DEF));
	if (rank == 0) {
		s = sge(p.n.mr, p.n.buf, 16);
		TRY(post_srq(p.n.srq, 501, &s, 1));
		s = sge(p.n.mr, p.n.buf + 4096, 64);
		TRY(post_srq(p.n.srq, 502, &s, 1));
		TRY(sync_peer(f));
		TRY(expect_wc(p.n.cq, IBV_WC_LOC_LEN_ERR, -1, 501, NULL));
		/* The failed WQE was consumed: qp2's message takes the next one. */
		TRY(expect_wc(p.n.cq, IBV_WC_SUCCESS, IBV_WC_RECV, 502, NULL));
		TRY(sync_peer(f));
		CHECK(qp_state(p.qp) == IBV_QPS_ERR && qp_state(p.qp2) == IBV_QPS_RTS,
		      "receiver QP must be in ERR, the other one not");
	} else {
		TRY(sync_peer(f));
		s = sge(p.n.mr, p.n.buf, 64);
		TRY(post(p.qp, 51, IBV_WR_SEND, IBV_SEND_SIGNALED, &s, 1, 0, 0, 0));
		TRY(expect_wc(p.n.cq, IBV_WC_REM_INV_REQ_ERR, IBV_WC_SEND, 51, NULL));
		CHECK(qp_state(p.qp) == IBV_QPS_ERR, "sender QP must be in ERR");
		s = sge(p.n.mr, p.n.buf, 8);
		TRY(post(p.qp2, 52, IBV_WR_SEND, IBV_SEND_SIGNALED, &s, 1, 0, 0, 0));
		TRY(expect_wc(p.n.cq, IBV_WC_SUCCESS, IBV_WC_SEND, 52, NULL));
		TRY(sync_peer(f));
	}
	return pair_down(&p, f);
}

/* The responder's QP is destroyed, then the responder is killed with
 * SIGKILL: the requester gets RETRY_EXC_ERR within the retry window. */
static int c_peer_kill(int rank, int *fd)
{
	struct pair p;
	struct ibv_sge s;
	int f = fd[1 - rank];
	double t0, dt;
	TRY(pair_up(&p, f, 1 << 16, 1, C_DEF, C_DEF));
	if (rank == 1) {                        /* the victim */
		s = sge(p.n.mr, p.n.buf, 1024);
		TRY(post_srq(p.n.srq, 1, &s, 1));
		TRY(sync_peer(f));
		TRY(expect_wc(p.n.cq, IBV_WC_SUCCESS, IBV_WC_RECV, 1, NULL));
		CHECK(ibv_destroy_qp(p.qp2) == 0, "destroy qp2");
		TRY(sync_peer(f));
		for (int i = 0; i < 3000; i++) {        /* killed long before this ends */
			struct ibv_wc wc;
			ibv_poll_cq(p.n.cq, 1, &wc);    /* tcp: answers the sender's requests */
			sleep_us(5000);
		}
		CHECK(0, "victim was not killed");
	}
	TRY(sync_peer(f));
	s = sge(p.n.mr, p.n.buf, 64);
	TRY(post(p.qp, 1, IBV_WR_SEND, IBV_SEND_SIGNALED, &s, 1, 0, 0, 0));
	TRY(expect_wc(p.n.cq, IBV_WC_SUCCESS, IBV_WC_SEND, 1, NULL));
	TRY(sync_peer(f));                      /* its qp2 is destroyed */
	t0 = now_s();
	TRY(post(p.qp2, 2, IBV_WR_SEND, IBV_SEND_SIGNALED, &s, 1, 0, 0, 0));
	TRY(expect_wc(p.n.cq, IBV_WC_RETRY_EXC_ERR, -1, 2, NULL));
	dt = now_s() - t0;
	CHECK(dt >= 0.25 && dt < 4, "destroyed remote QP: RETRY_EXC_ERR after %.2f s", dt);
	CHECK(kill(p.peer.pid, SIGKILL) == 0, "kill");
	t0 = now_s();
	TRY(post(p.qp, 3, IBV_WR_SEND, IBV_SEND_SIGNALED, &s, 1, 0, 0, 0));
	TRY(post(p.qp, 4, IBV_WR_RDMA_WRITE, 0, &s, 1, 0, p.peer.addr, p.peer.rkey));
	TRY(expect_wc(p.n.cq, IBV_WC_RETRY_EXC_ERR, -1, 3, NULL));
	dt = now_s() - t0;
	TRY(expect_wc(p.n.cq, IBV_WC_WR_FLUSH_ERR, -1, 4, NULL));
	/* tcp: a WR already on the wire when the peer's connection breaks
	 * fails at once; one sent later waits out the window (refused). */
	CHECK((g_net || dt >= 0.25) && dt < 4, "killed peer: RETRY_EXC_ERR after %.2f s", dt);
	CHECK(qp_state(p.qp) == IBV_QPS_ERR, "QP must be in ERR");
	if (g_net)
		fprintf(stderr, "    (killed peer: RETRY_EXC_ERR after %.2f s: %s)\n", dt,
			dt < 0.25 ? "its connection broke with the WR on the wire"
				  : "connection refused until the retry window ended");
	else
		fprintf(stderr, "    (retry window with timeout 14, retry_cnt 7: RETRY_EXC_ERR after %.2f s)\n", dt);
	{
		struct ibv_qp *qps[3] = {p.qp, p.qp2, NULL};
		return node_close(&p.n, qps);   /* no final sync: the peer is dead */
	}
}

/* A process killed while it holds a peer's lock (its RDMA WRITE copies
 * into the peer under the peer's lock) must not hang the peer: the lock is
 * robust. The victim writes 128 MiB per WR back to back, so the kill almost
 * always lands inside the critical section; the trace line says so. */
static int c_lock_kill(int rank, int *fd)
{
	struct pair p;
	struct ibv_sge s;
	struct ibv_wc wc;
	int f = fd[1 - rank];
	const size_t LEN = 128u << 20;
	if (rank == 0)
		setenv("IBEMU_TRACE", "1", 1);
	TRY(pair_up(&p, f, LEN, 1, C_DEF, C_DEF));
	unsetenv("IBEMU_TRACE");
	if (rank == 1) {                        /* the victim */
		char go = 'g';
		s = sge(p.n.mr, p.n.buf, (uint32_t)LEN);
		for (uint64_t i = 0;; i++) {
			TRY(post(p.qp, i, IBV_WR_RDMA_WRITE, IBV_SEND_SIGNALED, &s, 1, 0, p.peer.addr, p.peer.rkey));
			TRY(expect_wc(p.n.cq, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE, i, NULL));
			if (i == 0)
				TRY(xwrite(f, &go, 1));
		}
	}
	char go, *msg;
	struct ibv_qp *a = NULL, *b = NULL;
	double t0;
	int rc;
	TRY(xread(f, &go, 1, 10000));
	sleep_us(30000);
	capture(1);
	rc = kill(p.peer.pid, SIGKILL);
	t0 = now_s();
	int k = ibv_poll_cq(p.n.cq, 1, &wc);    /* takes our lock: must not hang */
	double dt = now_s() - t0;
	/* The context still works: loopback on two new QPs. */
	int bad = !(a = mkqp(&p.n, 0, 4, 0)) || !(b = mkqp(&p.n, 0, 4, 0)) || loop_up(&p.n, a, b);
	if (!bad) {
		s = sge(p.n.mr, p.n.buf + 64, 16);
		bad = post_rq(b, 1, &s, 1);
		s = sge(p.n.mr, p.n.buf, 16);
		bad = bad || post(a, 2, IBV_WR_SEND, IBV_SEND_SIGNALED, &s, 1, 0, 0, 0);
		bad = bad || expect_wc(p.n.cq, IBV_WC_SUCCESS, IBV_WC_RECV, 1, NULL) ||
		      expect_wc(p.n.cq, IBV_WC_SUCCESS, IBV_WC_SEND, 2, NULL);
	}
	capture(0);
	msg = captured();
	CHECK(rc == 0 && k == 0 && !bad, "after the kill: poll %d, loopback %s; stderr: %s", k, bad ? "failed" : "ok",
	      msg);
	CHECK(dt < 2, "poll_cq took %.2f s after the kill", dt);
	fprintf(stderr, "    (%s)\n",
		strstr(msg, "recovered") ? "killed inside the critical section: robust lock recovered"
					 : "killed outside the critical section this time: nothing to recover");
	{
		struct ibv_qp *all[5] = {p.qp, p.qp2, a, b, NULL};
		return node_close(&p.n, all);   /* no final sync: the peer is dead */
	}
}

/* IBEMU_FAULT kinds, in the sender (rank 1) only. */
static int g_fault;
static const char *const fault_spec[] = {"rem_access:2", "retry_exc:3", "qp_err:2"};

static int c_fault(int rank, int *fd)
{
	struct pair p;
	struct ibv_sge s;
	int f = fd[1 - rank];
	if (rank == 1)
		setenv("IBEMU_FAULT", fault_spec[g_fault], 1);
	TRY(pair_up(&p, f, 1 << 16, 1, C_DEF, C_DEF));
	unsetenv("IBEMU_FAULT");
	char *b = p.n.buf;
	if (rank == 0) {
		for (int i = 0; i < 4; i++) {
			s = sge(p.n.mr, b + 32768 + 256 * i, 256);
			TRY(post_srq(p.n.srq, 1 + (uint64_t)i, &s, 1));
		}
		TRY(sync_peer(f));
		TRY(sync_peer(f));              /* sender done */
		TRY(expect_wc(p.n.cq, IBV_WC_SUCCESS, IBV_WC_RECV, 1, NULL));
		TRY(expect_none(p.n.cq, 20));
		if (g_fault != 2)
			TRY(check_pattern(b, 4096, 31));
		TRY(all_zero(b + 8192, 4096));
		CHECK(qp_state(p.qp) == IBV_QPS_RTS, "an injected fault is local to the sender");
	} else {
		struct ibv_send_wr w[2], *bad = NULL;
		struct ibv_sge m;               /* SENDs: fit the 256-byte receives */
		TRY(sync_peer(f));
		pattern(b, 4096, 31);
		s = sge(p.n.mr, b, 4096);
		m = sge(p.n.mr, b, 200);
		memset(w, 0, sizeof(w));
		switch (g_fault) {
		case 0:         /* the 2nd RDMA WR fails, nothing written, rest flushed */
			TRY(post(p.qp, 1, IBV_WR_RDMA_WRITE, IBV_SEND_SIGNALED, &s, 1, 0, p.peer.addr, p.peer.rkey));
			TRY(post(p.qp, 2, IBV_WR_SEND, IBV_SEND_SIGNALED, &m, 1, 0, 0, 0));
			TRY(post(p.qp, 3, IBV_WR_RDMA_WRITE, IBV_SEND_SIGNALED, &s, 1, 0, p.peer.addr + 8192,
				 p.peer.rkey));
			TRY(post(p.qp, 4, IBV_WR_SEND, 0, &m, 1, 0, 0, 0));
			TRY(expect_wc(p.n.cq, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE, 1, NULL));
			TRY(expect_wc(p.n.cq, IBV_WC_SUCCESS, IBV_WC_SEND, 2, NULL));
			TRY(expect_wc(p.n.cq, IBV_WC_REM_ACCESS_ERR, IBV_WC_RDMA_WRITE, 3, NULL));
			TRY(expect_wc(p.n.cq, IBV_WC_WR_FLUSH_ERR, -1, 4, NULL));
			break;
		case 1:         /* the 3rd WR of any kind fails */
			TRY(post(p.qp, 1, IBV_WR_SEND, IBV_SEND_SIGNALED, &m, 1, 0, 0, 0));
			TRY(post(p.qp, 2, IBV_WR_RDMA_WRITE, IBV_SEND_SIGNALED, &s, 1, 0, p.peer.addr, p.peer.rkey));
			w[0].wr_id = 3;
			w[0].opcode = IBV_WR_SEND;
			w[0].sg_list = &m;
			w[0].num_sge = 1;
			w[0].send_flags = IBV_SEND_SIGNALED;
			w[0].next = &w[1];
			w[1] = w[0];
			w[1].wr_id = 4;
			w[1].send_flags = 0;
			w[1].next = NULL;
			CHECK(ibv_post_send(p.qp, w, &bad) == 0, "post list");
			TRY(expect_wc(p.n.cq, IBV_WC_SUCCESS, IBV_WC_SEND, 1, NULL));
			TRY(expect_wc(p.n.cq, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE, 2, NULL));
			TRY(expect_wc(p.n.cq, IBV_WC_RETRY_EXC_ERR, -1, 3, NULL));
			TRY(expect_wc(p.n.cq, IBV_WC_WR_FLUSH_ERR, -1, 4, NULL));
			break;
		default:        /* the 2nd post_send call: its QP goes to ERR first */
			TRY(post(p.qp, 1, IBV_WR_SEND, IBV_SEND_SIGNALED, &m, 1, 0, 0, 0));
			w[0].wr_id = 2;
			w[0].opcode = IBV_WR_SEND;
			w[0].sg_list = &m;
			w[0].num_sge = 1;
			w[0].next = &w[1];
			w[1] = w[0];
			w[1].wr_id = 3;
			w[1].opcode = IBV_WR_RDMA_WRITE;
			w[1].sg_list = &s;
			w[1].wr.rdma.remote_addr = p.peer.addr + 8192;
			w[1].wr.rdma.rkey = p.peer.rkey;
			w[1].next = NULL;
			CHECK(ibv_post_send(p.qp, w, &bad) == 0, "post list");
			TRY(expect_wc(p.n.cq, IBV_WC_SUCCESS, IBV_WC_SEND, 1, NULL));
			TRY(expect_wc(p.n.cq, IBV_WC_WR_FLUSH_ERR, -1, 2, NULL));
			TRY(expect_wc(p.n.cq, IBV_WC_WR_FLUSH_ERR, -1, 3, NULL));
			break;
		}
		CHECK(qp_state(p.qp) == IBV_QPS_ERR, "sender QP must be in ERR");
		TRY(expect_none(p.n.cq, 20));
		TRY(sync_peer(f));
	}
	return pair_down(&p, f);
}

/* IBEMU_FAULT_RANK: the fault applies only where the rank matches. */
static int loop_send_status(enum ibv_wc_status want)
{
	struct node n;
	struct ibv_qp *a, *b, *qps[3];
	struct ibv_sge s;
	TRY(node_open(&n, 4096, 16));
	CHECK((a = mkqp(&n, 0, 4, 0)) && (b = mkqp(&n, 0, 4, 0)), "qps");
	TRY(loop_up(&n, a, b));
	s = sge(n.mr, n.buf + 64, 16);
	TRY(post_rq(b, 1, &s, 1));
	s = sge(n.mr, n.buf, 16);
	TRY(post(a, 2, IBV_WR_SEND, IBV_SEND_SIGNALED, &s, 1, 0, 0, 0));
	if (want == IBV_WC_SUCCESS)
		TRY(expect_wc(n.cq, IBV_WC_SUCCESS, IBV_WC_RECV, 1, NULL));
	TRY(expect_wc(n.cq, want, -1, 2, NULL));
	qps[0] = a;
	qps[1] = b;
	qps[2] = NULL;
	return node_close(&n, qps);
}

static int c_fault_rank(int rank, int *fd)
{
	(void)rank;
	(void)fd;
	unsetenv("OMPI_COMM_WORLD_RANK");
	unsetenv("PMIX_RANK");
	setenv("IBEMU_FAULT", "retry_exc:1", 1);
	setenv("IBEMU_FAULT_RANK", "0", 1);
	setenv("PMI_RANK", "1", 1);
	TRY(loop_send_status(IBV_WC_SUCCESS));
	setenv("PMI_RANK", "0", 1);
	TRY(loop_send_status(IBV_WC_RETRY_EXC_ERR));
	unsetenv("PMI_RANK");
	setenv("PMIX_RANK", "0", 1);            /* third in line, still honored */
	TRY(loop_send_status(IBV_WC_RETRY_EXC_ERR));
	unsetenv("IBEMU_FAULT_RANK");           /* unset: every process */
	unsetenv("PMIX_RANK");
	TRY(loop_send_status(IBV_WC_RETRY_EXC_ERR));
	unsetenv("IBEMU_FAULT");
	return 0;
}

/* ------------------------------------------------------------------------ */
/* 3 processes all-to-all: each sends A_N messages of random size 0-64 KiB
 * to each other one, alternating SEND (into SRQ buffers) and RDMA WRITE +
 * RDMA WRITE WITH IMM (into a ring of A_K slots at the receiver, flow-
 * controlled by credits the receiver RDMA-writes back, inline). Every byte
 * is checked against the generator and per-pair checksums are compared.  */

#define A_N 1000
#define A_K 8
#define A_S 16
#define A_MSG 65536
#define A_SRQ 128
#define A_SQ 256
#define A_ENC(t, d, i, q) \
	(((uint64_t)(t) << 60) | ((uint64_t)(d) << 56) | ((uint64_t)((i) & 0xffffff) << 24) | ((q) & 0xffffffu))

struct a_info { union ibv_gid gid; uint32_t qpn, rkey; uint64_t ring, credit; };
struct a_peer {
	int fd;
	struct ibv_qp *qp;
	struct a_info r;
	uint32_t sent, completed, recvd, wr_posted, wr_retired, credits_posted;
	int credit_pending, final_done, heard;
	uint64_t ck_sent, ck_recv, bytes_recv;
	char *stage, *ring;
	volatile uint64_t *credit_in;
};

static uint64_t splitmix(uint64_t *x)
{
	uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static uint64_t a_seed(int s, int d, uint32_t i)
{
	return ((uint64_t)s << 40) ^ ((uint64_t)d << 32) ^ i ^ 0x5eed0000ull;
}

static uint32_t a_size(int s, int d, uint32_t i)
{
	uint64_t x = a_seed(s, d, i), r = splitmix(&x);
	/* 1 in 8 tiny (0..64 bytes: zero-length and inline paths), else 0..64 KiB */
	return (r & 7) == 0 ? (uint32_t)((r >> 8) % 65) : (uint32_t)((r >> 8) % (A_MSG + 1));
}

static void a_fill(int s, int d, uint32_t i, char *p, uint32_t n)
{
	uint64_t x = a_seed(s, d, i) * 3 + 1, v;
	uint32_t k = 0;
	for (; k + 8 <= n; k += 8) {
		v = splitmix(&x);
		memcpy(p + k, &v, 8);
	}
	if (k < n) {
		v = splitmix(&x);
		memcpy(p + k, &v, n - k);
	}
}

static uint64_t a_ck(uint64_t ck, const char *p, uint32_t n)
{
	uint64_t h = 0xcbf29ce484222325ull ^ n, v;
	uint32_t k = 0;
	for (; k + 8 <= n; k += 8) {
		memcpy(&v, p + k, 8);
		h = (h ^ v) * 0x100000001b3ull;
	}
	for (; k < n; k++)
		h = (h ^ (unsigned char)p[k]) * 0x100000001b3ull;
	return ck * 1000003ull + h;
}

static int a_post_one(struct node *n, int me, int d, struct a_peer *P)
{
	uint32_t i = P->sent, sz = a_size(me, d, i);
	char *data = P->stage + (size_t)(i % A_S) * A_MSG;
	struct ibv_sge s[3];
	struct ibv_send_wr w[2], *bad = NULL;
	int rc;

	if (i & 1) {    /* RDMA path needs a free ring slot at the receiver */
		uint32_t r = i / 2;
		if (r >= A_K && *P->credit_in < 2ull * (r - A_K) + 2)
			return 0;
	}
	a_fill(me, d, i, data, sz);
	P->ck_sent = a_ck(P->ck_sent, data, sz);
	memset(w, 0, sizeof(w));
	if (!(i & 1)) {
		s[0] = sge(n->mr, data, sz);
		w[0].wr_id = A_ENC(1, d, i, P->wr_posted);
		w[0].opcode = IBV_WR_SEND;
		w[0].send_flags = IBV_SEND_SIGNALED | (sz <= 64 ? IBV_SEND_INLINE : 0);
		w[0].sg_list = s;
		w[0].num_sge = sz ? 1 : 0;
		P->wr_posted++;
	} else {
		uint32_t h = sz / 2, rest = sz - h;
		uint64_t raddr = P->r.ring + (uint64_t)((i / 2) % A_K) * A_MSG;
		s[0] = sge(n->mr, data, h);
		w[0].wr_id = A_ENC(2, d, i, P->wr_posted);
		w[0].opcode = IBV_WR_RDMA_WRITE;
		w[0].sg_list = s;
		w[0].num_sge = h ? 1 : 0;
		w[0].wr.rdma.remote_addr = raddr;
		w[0].wr.rdma.rkey = P->r.rkey;
		w[0].next = &w[1];
		s[1] = sge(n->mr, data + h, rest / 2);
		s[2] = sge(n->mr, data + h + rest / 2, rest - rest / 2);
		w[1].wr_id = A_ENC(1, d, i, P->wr_posted + 1);
		w[1].opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
		w[1].send_flags = IBV_SEND_SIGNALED;
		w[1].imm_data = htonl(i);
		w[1].sg_list = &s[1];
		w[1].num_sge = rest ? 2 : 0;
		w[1].wr.rdma.remote_addr = raddr + h;
		w[1].wr.rdma.rkey = P->r.rkey;
		P->wr_posted += 2;
	}
	rc = ibv_post_send(P->qp, w, &bad);
	CHECK(rc == 0, "post_send to %d msg %u: %s", d, i, strerror(rc));
	P->sent++;
	return 0;
}

static int a_post_credit(int d, struct a_peer *P)
{
	uint64_t val = P->recvd;
	int sig = (++P->credits_posted % 16 == 0) || val == A_N;
	struct ibv_sge s = {.addr = (uintptr_t)&val, .length = 8, .lkey = 0};
	struct ibv_send_wr w, *bad = NULL;
	int rc;
	memset(&w, 0, sizeof(w));
	w.wr_id = A_ENC(3, d, val, P->wr_posted);
	w.opcode = IBV_WR_RDMA_WRITE;
	w.send_flags = IBV_SEND_INLINE | (sig ? IBV_SEND_SIGNALED : 0);
	w.sg_list = &s;
	w.num_sge = 1;
	w.wr.rdma.remote_addr = P->r.credit;
	w.wr.rdma.rkey = P->r.rkey;
	rc = ibv_post_send(P->qp, &w, &bad);
	CHECK(rc == 0, "credit post: %s", strerror(rc));
	P->wr_posted++;
	P->credit_pending = 0;
	return 0;
}

static int c_alltoall(int rank, int *fd)
{
	const int NP = 3, me = rank;
	struct node n;
	struct a_peer P[3];
	const size_t srq_bytes = (size_t)A_SRQ * A_MSG, ring_bytes = (size_t)A_K * A_MSG,
		     stage_bytes = (size_t)A_S * A_MSG;
	const size_t total = srq_bytes + NP * (ring_bytes + stage_bytes) + NP * 64;
	char *cmp = malloc(A_MSG);
	struct ibv_wc wc[32];
	double t0 = now_s();
	struct ibv_qp *qps[3] = {NULL, NULL, NULL};
	int nq = 0;

	CHECK(cmp, "malloc");
	TRY(node_open(&n, total, 4096));
	memset(P, 0, sizeof(P));
	for (int d = 0; d < NP; d++) {
		struct a_info mine;
		if (d == me)
			continue;
		P[d].fd = fd[d];
		P[d].ring = n.buf + srq_bytes + (size_t)d * ring_bytes;        /* d writes here */
		P[d].stage = n.buf + srq_bytes + NP * ring_bytes + (size_t)d * stage_bytes;
		P[d].credit_in = (volatile uint64_t *)(n.buf + srq_bytes + NP * (ring_bytes + stage_bytes) + d * 64);
		CHECK((P[d].qp = mkqp(&n, 1, A_SQ, 64)), "qp");
		qps[nq++] = P[d].qp;
		mine.gid = my_gid(&n);
		mine.qpn = P[d].qp->qp_num;
		mine.rkey = n.mr->rkey;
		mine.ring = (uintptr_t)P[d].ring;
		mine.credit = (uintptr_t)P[d].credit_in;
		TRY(xwrite(fd[d], &mine, sizeof(mine)));
	}
	for (int d = 0; d < NP; d++) {
		if (d == me)
			continue;
		TRY(xread(fd[d], &P[d].r, sizeof(P[d].r), 10000));
		TRY(qp_up(P[d].qp, &P[d].r.gid, P[d].r.qpn, C_DEF));
	}
	for (int i = 0; i < A_SRQ; i++) {
		struct ibv_sge s = sge(n.mr, n.buf + (size_t)i * A_MSG, A_MSG);
		TRY(post_srq(n.srq, (uint64_t)i, &s, 1));
	}
	for (int d = 0; d < NP; d++)
		if (d != me)
			TRY(sync_peer(fd[d]));          /* everyone is in RTS with receives */

	for (;;) {
		int busy = 0, done = 1, k;
		CHECK(now_s() - t0 < 25, "all-to-all timed out (sent/completed/recvd: %u/%u/%u, %u/%u/%u)",
		      P[(me + 1) % 3].sent, P[(me + 1) % 3].completed, P[(me + 1) % 3].recvd, P[(me + 2) % 3].sent,
		      P[(me + 2) % 3].completed, P[(me + 2) % 3].recvd);
		for (int d = 0; d < NP; d++) {
			struct a_peer *Q = &P[d];
			if (d == me)
				continue;
			if (Q->credit_pending && Q->wr_posted - Q->wr_retired + 1 <= A_SQ) {
				TRY(a_post_credit(d, Q));
				busy = 1;
			}
			if (Q->sent < A_N && Q->sent - Q->completed < A_S && Q->wr_posted - Q->wr_retired + 3 <= A_SQ) {
				uint32_t before = Q->sent;
				TRY(a_post_one(&n, me, d, Q));
				busy |= Q->sent != before;
			}
			done &= Q->completed == A_N && Q->recvd == A_N && Q->final_done;
		}
		k = ibv_poll_cq(n.cq, 32, wc);
		CHECK(k >= 0, "poll_cq failed");
		for (int j = 0; j < k; j++) {
			struct ibv_wc *c = &wc[j];
			CHECK(c->status == IBV_WC_SUCCESS, "completion wr_id %#llx: %s", (unsigned long long)c->wr_id,
			      ibv_wc_status_str(c->status));
			if (c->opcode == IBV_WC_RECV || c->opcode == IBV_WC_RECV_RDMA_WITH_IMM) {
				int d = -1;
				for (int x = 0; x < NP; x++)
					if (x != me && P[x].qp->qp_num == c->qp_num)
						d = x;
				CHECK(d >= 0 && c->src_qp == P[d].r.qpn, "receive on unknown qp %#x", c->qp_num);
				struct a_peer *Q = &P[d];
				uint32_t i = Q->recvd, sz = a_size(d, me, i);
				const char *data;
				if (c->opcode == IBV_WC_RECV) {
					CHECK(!(i & 1) && c->byte_len == sz, "from %d msg %u: SEND of %u bytes, want %u", d,
					      i, c->byte_len, sz);
					data = n.buf + c->wr_id * A_MSG;
				} else {
					CHECK((i & 1) && ntohl(c->imm_data) == i && c->byte_len == sz - sz / 2 &&
						      (c->wc_flags & IBV_WC_WITH_IMM),
					      "from %d msg %u: write-imm imm %u len %u", d, i, ntohl(c->imm_data),
					      c->byte_len);
					data = Q->ring + (size_t)((i / 2) % A_K) * A_MSG;
				}
				a_fill(d, me, i, cmp, sz);
				CHECK(memcmp(cmp, data, sz) == 0, "from %d msg %u (%u bytes): payload differs", d, i, sz);
				Q->ck_recv = a_ck(Q->ck_recv, data, sz);
				Q->bytes_recv += sz;
				Q->recvd++;
				Q->credit_pending = 1;
				struct ibv_sge s = sge(n.mr, n.buf + c->wr_id * A_MSG, A_MSG);
				TRY(post_srq(n.srq, c->wr_id, &s, 1));
			} else {
				int t = (int)(c->wr_id >> 60), d = (int)((c->wr_id >> 56) & 15);
				uint32_t idx = (uint32_t)((c->wr_id >> 24) & 0xffffff);
				CHECK(d < NP && d != me, "bad wr_id %#llx", (unsigned long long)c->wr_id);
				P[d].wr_retired = (uint32_t)(c->wr_id & 0xffffff) + 1;
				if (t == 1)
					P[d].completed = idx + 1;
				else if (t == 3 && idx == A_N)
					P[d].final_done = 1;
			}
		}
		if (done)
			break;
		if (!busy && k == 0)
			sleep_us(20);
	}
	/* Compare checksums, keep our QPs alive until every peer is done. */
	for (int d = 0; d < NP; d++)
		if (d != me)
			TRY(xwrite(fd[d], &P[d].ck_sent, 8));
	for (int d = 0; d < NP; d++) {
		uint64_t theirs;
		if (d == me)
			continue;
		TRY(xread(fd[d], &theirs, 8, 20000));
		CHECK(theirs == P[d].ck_recv, "checksum from %d: sent %#llx, received %#llx", d,
		      (unsigned long long)theirs, (unsigned long long)P[d].ck_recv);
	}
	for (int d = 0; d < NP; d++)
		if (d != me)
			TRY(sync_peer(fd[d]));
	if (me == 0)
		fprintf(stderr, "    (all-to-all: 3 x 2 x %d messages; rank 0 received %.1f MB; %.2f s)\n", A_N,
			(double)P[0 + 1].bytes_recv / 1e6 + (double)P[2].bytes_recv / 1e6, now_s() - t0);
	free(cmp);
	return node_close(&n, qps);
}

/* ------------------------------------------------------------------------ */
/* Mixing modes, and the IBEMU_NET variables (both modes)                    */

static struct ibv_context *open_with(const char *net, const char *addr)
{
	int num;
	struct ibv_device **l = ibv_get_device_list(&num);
	struct ibv_context *ctx;
	char *on = getenv("IBEMU_NET") ? strdup(getenv("IBEMU_NET")) : NULL;
	char *oa = getenv("IBEMU_NET_ADDR") ? strdup(getenv("IBEMU_NET_ADDR")) : NULL;
	if (net)
		setenv("IBEMU_NET", net, 1);
	else
		unsetenv("IBEMU_NET");
	if (addr)
		setenv("IBEMU_NET_ADDR", addr, 1);
	else
		unsetenv("IBEMU_NET_ADDR");
	ctx = l && num == 1 ? ibv_open_device(l[0]) : NULL;
	int e = errno;
	if (on)
		setenv("IBEMU_NET", on, 1);
	else
		unsetenv("IBEMU_NET");
	if (oa)
		setenv("IBEMU_NET_ADDR", oa, 1);
	else
		unsetenv("IBEMU_NET_ADDR");
	free(on);
	free(oa);
	ibv_free_device_list(l);
	errno = e;
	return ctx;
}

static int c_net_mix(int rank, int *fd)
{
	struct ibv_context *cl, *ct, *cl2;
	struct ibv_pd *pl, *pt;
	struct ibv_cq *ql, *qt;
	struct ibv_qp *xl, *xt;
	union ibv_gid gl, gt;
	struct ibv_qp_attr a;
	char *msg;
	(void)rank;
	(void)fd;

	CHECK((cl = open_with(NULL, NULL)), "open, IBEMU_NET unset: %s", strerror(errno));
	CHECK((cl2 = open_with("local", "bogus")), "open, IBEMU_NET=local: %s", strerror(errno));
	CHECK((ct = open_with("tcp", "127.0.0.1")), "open, IBEMU_NET=tcp: %s", strerror(errno));
	CHECK(ibv_query_gid(cl, 1, 0, &gl) == 0 && ibv_query_gid(ct, 1, 0, &gt) == 0, "query_gid");
	CHECK(gl.raw[3] == 0x65 && gt.raw[3] == 0x74, "GID magics %02x %02x", gl.raw[3], gt.raw[3]);
	CHECK((pl = ibv_alloc_pd(cl)) && (pt = ibv_alloc_pd(ct)), "pd");
	CHECK((ql = ibv_create_cq(cl, 8, NULL, NULL, 0)) && (qt = ibv_create_cq(ct, 8, NULL, NULL, 0)), "cq");
	{
		struct ibv_qp_init_attr ia = {.send_cq = ql, .recv_cq = ql, .qp_type = IBV_QPT_RC,
					      .cap = {.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1,
						      .max_recv_sge = 1}};
		CHECK((xl = ibv_create_qp(pl, &ia)), "qp local");
		ia.send_cq = ia.recv_cq = qt;
		CHECK((xt = ibv_create_qp(pt, &ia)), "qp tcp");
	}
	a = a_init();
	CHECK(ibv_modify_qp(xl, &a, M_INIT) == 0 && ibv_modify_qp(xt, &a, M_INIT) == 0, "INIT");
	a = a_rtr(&gt, xt->qp_num, C_DEF);
	CHECK(ibv_modify_qp(xl, &a, M_RTR) == EINVAL, "local QP to a tcp GID must be EINVAL");
	a = a_rtr(&gl, xl->qp_num, C_DEF);
	CHECK(ibv_modify_qp(xt, &a, M_RTR) == EINVAL, "tcp QP to a local GID must be EINVAL");
	CHECK(qp_state(xl) == IBV_QPS_INIT && qp_state(xt) == IBV_QPS_INIT, "states unchanged");
	CHECK(ibv_destroy_qp(xl) == 0 && ibv_destroy_qp(xt) == 0 && ibv_destroy_cq(ql) == 0 &&
		      ibv_destroy_cq(qt) == 0 && ibv_dealloc_pd(pl) == 0 && ibv_dealloc_pd(pt) == 0,
	      "destroy");
	CHECK(ibv_close_device(cl) == 0 && ibv_close_device(cl2) == 0 && ibv_close_device(ct) == 0, "close");

	/* Invalid values: one line, EINVAL. */
	TRY(open_fails("IBEMU_NET", "udp"));
	TRY(open_fails("IBEMU_NET", "TCP"));
	{
		char *on = getenv("IBEMU_NET") ? strdup(getenv("IBEMU_NET")) : NULL;
		setenv("IBEMU_NET", "tcp", 1);
		TRY(open_fails("IBEMU_NET_ADDR", "10.77.0"));
		TRY(open_fails("IBEMU_NET_ADDR", "::1"));
		if (on)
			setenv("IBEMU_NET", on, 1);
		else
			unsetenv("IBEMU_NET");
		free(on);
	}
	/* A well-formed address that is not this host's: one line, no context. */
	capture(1);
	errno = 0;
	ct = open_with("tcp", "203.0.113.77");
	int e = errno;
	capture(0);
	msg = captured();
	CHECK(!ct && e == EADDRNOTAVAIL && strstr(msg, "203.0.113.77") && strchr(msg, '\n') == msg + strlen(msg) - 1,
	      "IBEMU_NET_ADDR not on this host: ctx %p errno %d, stderr '%s'", (void *)ct, e, msg);
	return no_memfd_left();
}

/* ------------------------------------------------------------------------ */
/* tcp-only cases                                                            */

/* Reads without making verbs progress (as if blocked in an MPI collective). */
static int raw_sync(int fd)
{
	struct ibv_cq *h = g_hook_cq;
	int rc;
	g_hook_cq = NULL;
	rc = sync_peer(fd);
	g_hook_cq = h;
	return rc;
}

/* Both sides move 8 QPs to RTR/RTS at the same moment, meet on the control
 * socket without any verbs call, then send right away: no deadlock, every
 * message arrives in order per QP. */
static int c_tcp_rtr_race(int rank, int *fd)
{
	enum { NQ = 8, NM = 16 };
	struct node n;
	struct ibv_qp *qp[NQ + 1];
	struct { union ibv_gid gid; uint32_t qpn[NQ]; } me, peer;
	int f = fd[1 - rank], got_send = 0, got_recv = 0, next[NQ];
	struct ibv_wc wc[16];
	double t0;

	TRY(node_open(&n, (size_t)2 * NQ * NM * 256, 1024));
	memset(&me, 0, sizeof(me));
	me.gid = my_gid(&n);
	for (int i = 0; i < NQ; i++) {
		CHECK((qp[i] = mkqp(&n, 1, NM, 0)), "qp");
		me.qpn[i] = qp[i]->qp_num;
		next[i] = 0;
	}
	qp[NQ] = NULL;
	for (int i = 0; i < NQ * NM; i++) {
		struct ibv_sge s = sge(n.mr, n.buf + (size_t)(NQ * NM + i) * 256, 256);
		TRY(post_srq(n.srq, (uint64_t)i, &s, 1));
	}
	TRY(xchg(f, &me, &peer, sizeof(me)));
	TRY(raw_sync(f));
	for (int i = 0; i < NQ; i++)
		TRY(qp_up(qp[i], &peer.gid, peer.qpn[i], C_DEF));
	TRY(raw_sync(f));       /* both sides in RTS, nobody polled */
	for (int i = 0; i < NQ; i++)
		for (int m = 0; m < NM; m++) {
			char *b = n.buf + (size_t)(i * NM + m) * 256;
			struct ibv_sge s = sge(n.mr, b, 64);
			uint32_t tag = (uint32_t)(rank << 16 | i << 8 | m);
			memcpy(b, &tag, 4);
			TRY(post(qp[i], (uint64_t)(i * NM + m), IBV_WR_SEND, IBV_SEND_SIGNALED, &s, 1, 0, 0, 0));
		}
	t0 = now_s();
	while (got_send < NQ * NM || got_recv < NQ * NM) {
		int k = ibv_poll_cq(n.cq, 16, wc);
		CHECK(k >= 0, "poll");
		CHECK(now_s() - t0 < 10, "stuck: %d sends and %d receives completed of %d", got_send, got_recv, NQ * NM);
		for (int j = 0; j < k; j++) {
			CHECK(wc[j].status == IBV_WC_SUCCESS, "wr_id %llu: %s", (unsigned long long)wc[j].wr_id,
			      ibv_wc_status_str(wc[j].status));
			if (wc[j].opcode == IBV_WC_RECV) {
				uint32_t tag;
				int i = -1;
				for (int x = 0; x < NQ; x++)
					if (qp[x]->qp_num == wc[j].qp_num)
						i = x;
				CHECK(i >= 0 && wc[j].byte_len == 64, "recv on qp %#x len %u", wc[j].qp_num, wc[j].byte_len);
				memcpy(&tag, n.buf + (size_t)(NQ * NM + wc[j].wr_id) * 256, 4);
				CHECK(tag == (uint32_t)((1 - rank) << 16 | i << 8 | next[i]),
				      "qp %d: got message %#x, want #%d", i, tag, next[i]);
				next[i]++;
				got_recv++;
			} else
				got_send++;
		}
		if (!k)
			sleep_us(20);
	}
	TRY(sync_peer(f));
	return node_close(&n, qp);
}

/* One 64 MiB RDMA WRITE (two 32 MiB SGEs, streamed over partial writes),
 * then WRITE_WITH_IMM to tell the target; and a 16 MiB RDMA READ back. */
static int c_tcp_write64m(int rank, int *fd)
{
	const size_t BIG = 64u << 20, RD = 16u << 20;
	struct pair p;
	struct ibv_sge s[2];
	struct ibv_wc wc;
	int f = fd[1 - rank];
	double t0;
	TRY(pair_up(&p, f, BIG + RD, 0, C_DEF, C_DEF));
	char *b = p.n.buf;
	if (rank == 0) {
		s[0] = sge(p.n.mr, b + BIG, 64);
		TRY(post_srq(p.n.srq, 7, s, 1));
		TRY(sync_peer(f));
		TRY(expect_wc(p.n.cq, IBV_WC_SUCCESS, IBV_WC_RECV_RDMA_WITH_IMM, 7, &wc));
		CHECK(wc.imm_data == htonl(64) && wc.byte_len == 0, "imm %#x len %u", wc.imm_data, wc.byte_len);
		TRY(check_pattern(b, BIG, 64));
		TRY(sync_peer(f));      /* checked; now the sender reads it back */
		TRY(sync_peer(f));
	} else {
		pattern(b, BIG, 64);
		TRY(sync_peer(f));
		t0 = now_s();
		s[0] = sge(p.n.mr, b, (uint32_t)(BIG / 2));
		s[1] = sge(p.n.mr, b + BIG / 2, (uint32_t)(BIG / 2));
		TRY(post(p.qp, 1, IBV_WR_RDMA_WRITE, IBV_SEND_SIGNALED, s, 2, 0, p.peer.addr, p.peer.rkey));
		TRY(post(p.qp, 2, IBV_WR_RDMA_WRITE_WITH_IMM, IBV_SEND_SIGNALED, NULL, 0, 64, 0, 0));
		TRY(expect_wc(p.n.cq, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE, 1, NULL));
		TRY(expect_wc(p.n.cq, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE, 2, NULL));
		double dt = now_s() - t0;
		TRY(sync_peer(f));
		memset(b + BIG, 0, RD);
		s[0] = sge(p.n.mr, b + BIG, (uint32_t)RD);
		t0 = now_s();
		TRY(post(p.qp, 3, IBV_WR_RDMA_READ, IBV_SEND_SIGNALED, s, 1, 0, p.peer.addr + BIG - RD, p.peer.rkey));
		TRY(expect_wc(p.n.cq, IBV_WC_SUCCESS, IBV_WC_RDMA_READ, 3, &wc));
		CHECK(wc.byte_len == RD, "read byte_len %u", wc.byte_len);
		memmove(b, b + BIG, RD);        /* compare with what was written there */
		pattern(b + RD, BIG - RD, 64);
		TRY(check_pattern(b + BIG - RD, RD, 64));
		CHECK(memcmp(b, b + BIG - RD, RD) == 0, "RDMA READ returned other data");
		fprintf(stderr, "    (64 MiB write: %.0f MB/s; 16 MiB read: %.0f MB/s)\n", BIG / 1e6 / dt,
			RD / 1e6 / (now_s() - t0));
		TRY(sync_peer(f));
	}
	return pair_down(&p, f);
}

/* The target dies while 32 MiB writes stream to it: the WR in flight fails
 * with RETRY_EXC_ERR within the retry window, the rest is flushed; a WR
 * posted afterwards on another QP to the dead peer (connection refused)
 * fails after the window. */
static int c_tcp_kill_mid(int rank, int *fd)
{
	const size_t LEN = 32u << 20;
	struct pair p;
	struct ibv_sge s;
	struct ibv_wc wc;
	int f = fd[1 - rank];
	double t0, dt;
	TRY(pair_up(&p, f, LEN, 1, C_DEF, C_DEF));
	if (rank == 1) {                        /* the victim: polls until killed */
		for (;;) {
			ibv_poll_cq(p.n.cq, 1, &wc);
			sleep_us(100);
		}
	}
	s = sge(p.n.mr, p.n.buf, (uint32_t)LEN);
	for (int i = 0; i < 8; i++)
		TRY(post(p.qp, (uint64_t)i, IBV_WR_RDMA_WRITE, IBV_SEND_SIGNALED, &s, 1, 0, p.peer.addr, p.peer.rkey));
	TRY(expect_wc(p.n.cq, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE, 0, NULL));
	CHECK(kill(p.peer.pid, SIGKILL) == 0, "kill");
	t0 = now_s();
	/* Writes the victim acknowledged before the signal landed complete
	 * (its agent may run on the other core meanwhile): a prefix of
	 * successes, then the one in flight fails and the rest are flushed. */
	int failed = 1;
	for (;; failed++) {
		CHECK(failed < 8, "all 8 writes of 32 MiB completed after the kill");
		CHECK(wait_wc(p.n.cq, &wc, WAIT_MS) == 1, "no completion for wr_id %d", failed);
		CHECK(wc.wr_id == (uint64_t)failed, "wr_id %#llx, want %d", (unsigned long long)wc.wr_id, failed);
		if (wc.status != IBV_WC_SUCCESS)
			break;
	}
	CHECK(wc.status == IBV_WC_RETRY_EXC_ERR && wc.opcode == IBV_WC_RDMA_WRITE && wc.vendor_err == 0,
	      "wr_id %d: status '%s' opcode %d; want 'transport retry counter exceeded'", failed,
	      ibv_wc_status_str(wc.status), wc.opcode);
	dt = now_s() - t0;
	for (int i = failed + 1; i < 8; i++)
		TRY(expect_wc(p.n.cq, IBV_WC_WR_FLUSH_ERR, -1, (uint64_t)i, NULL));
	CHECK(dt < 3.5, "RETRY_EXC_ERR %.2f s after the kill", dt);
	CHECK(qp_state(p.qp) == IBV_QPS_ERR && qp_state(p.qp2) == IBV_QPS_RTS, "states %d %d", qp_state(p.qp),
	      qp_state(p.qp2));
	t0 = now_s();
	s = sge(p.n.mr, p.n.buf, 64);
	TRY(post(p.qp2, 9, IBV_WR_SEND, 0, &s, 1, 0, 0, 0));
	TRY(expect_wc(p.n.cq, IBV_WC_RETRY_EXC_ERR, IBV_WC_SEND, 9, NULL));
	double dt2 = now_s() - t0;
	CHECK(dt2 >= 0.25 && dt2 < 4, "send to the dead peer: RETRY_EXC_ERR after %.2f s", dt2);
	fprintf(stderr, "    (in flight at the kill: write %d, RETRY_EXC_ERR after %.3f s; posted later: after %.2f s)\n",
		failed, dt, dt2);
	{
		struct ibv_qp *qps[3] = {p.qp, p.qp2, NULL};
		return node_close(&p.n, qps);
	}
}

/* The calling-thread path (IBEMU_AGENT=0 on both sides): the receiver goes
 * to sleep for 1 s without any verbs call (right after RTR: it has not even
 * accepted the connection) while 200 sends of up to 64 KiB are posted to
 * it: nothing completes meanwhile (completion means acknowledged) and
 * nothing fails; afterwards all arrive, in order. (With the agent, the
 * receiver's agent would serve them during the sleep: agent_responder.) */
static int c_tcp_sleepy(int rank, int *fd)
{
	enum { N = 200, SZ = 65536 };
	struct node n;
	struct ibv_qp *qp, *qps[2];
	struct info me, peer;
	struct ibv_wc wc;
	int f = fd[1 - rank];
	char go = 'g';

	setenv("IBEMU_AGENT", "0", 1);
	TRY(node_open(&n, (size_t)N * SZ, 1024));
	unsetenv("IBEMU_AGENT");
	g_hook_cq = NULL;                       /* no progress behind our back */
	CHECK((qp = mkqp(&n, 1, 256, 0)), "qp");
	memset(&me, 0, sizeof(me));
	me.gid = my_gid(&n);
	me.qpn = qp->qp_num;
	TRY(xchg(f, &me, &peer, sizeof(me)));
	TRY(qp_up(qp, &peer.gid, peer.qpn, C_DEF));
	if (rank == 0) {
		for (int i = 0; i < N; i++) {
			struct ibv_sge s = sge(n.mr, n.buf + (size_t)i * SZ, SZ);
			TRY(post_srq(n.srq, (uint64_t)i, &s, 1));
		}
		TRY(xwrite(f, &go, 1));
		sleep_us(1000000);
		for (int i = 0; i < N; i++) {
			uint32_t seq;
			TRY(expect_wc(n.cq, IBV_WC_SUCCESS, IBV_WC_RECV, (uint64_t)i, &wc));
			memcpy(&seq, n.buf + (size_t)i * SZ, 4);
			CHECK(seq == (uint32_t)i && wc.byte_len == 4096u + (uint32_t)i * 300u,
			      "message %d: seq %u len %u", i, seq, wc.byte_len);
		}
	} else {
		double t0;
		TRY(xread(f, &go, 1, 10000));
		t0 = now_s();
		for (int i = 0; i < N; i++) {
			char *b = n.buf + (size_t)i * SZ;
			struct ibv_sge s = sge(n.mr, b, 4096u + (uint32_t)i * 300u);
			uint32_t seq = (uint32_t)i;
			memcpy(b, &seq, 4);
			TRY(post(qp, (uint64_t)i, IBV_WR_SEND, IBV_SEND_SIGNALED, &s, 1, 0, 0, 0));
		}
		TRY(expect_none(n.cq, 700));    /* the receiver sleeps: no ACK yet */
		for (int i = 0; i < N; i++)
			TRY(expect_wc(n.cq, IBV_WC_SUCCESS, IBV_WC_SEND, (uint64_t)i, NULL));
		CHECK(now_s() - t0 > 0.8, "completions before the receiver woke up");
		CHECK(qp_state(qp) == IBV_QPS_RTS, "QP state %d", qp_state(qp));
	}
	g_hook_cq = n.cq;
	TRY(sync_peer(f));
	qps[0] = qp;
	qps[1] = NULL;
	return node_close(&n, qps);
}

/* IBEMU_NET_ADDR unset: the first non-loopback IPv4 address of the host
 * (else 127.0.0.1); a SEND, an RDMA WRITE and a READ over it. A connection
 * to a closed port, and one to a live port whose nonce is wrong (HELLO
 * refused), end in RETRY_EXC_ERR after the retry window. */
static int c_tcp_ifaddr(int rank, int *fd)
{
	struct pair p;
	struct ibv_sge s;
	struct ibv_wc wc;
	struct ifaddrs *ifs, *i;
	struct in_addr want = {.s_addr = htonl(INADDR_LOOPBACK)}, got;
	int f = fd[1 - rank];

	if (getifaddrs(&ifs) == 0) {
		for (i = ifs; i; i = i->ifa_next)
			if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET && (i->ifa_flags & IFF_UP) &&
			    !(i->ifa_flags & IFF_LOOPBACK)) {
				want = ((struct sockaddr_in *)i->ifa_addr)->sin_addr;
				break;
			}
		freeifaddrs(ifs);
	}
	unsetenv("IBEMU_NET_ADDR");
	TRY(pair_up(&p, f, 1 << 20, 0, C_DEF, C_DEF));
	memcpy(&got, p.me.gid.raw + 4, 4);
	CHECK(got.s_addr == want.s_addr, "GID address %s", inet_ntoa(got));
	if (rank == 0) {
		fprintf(stderr, "    (address from getifaddrs: %s)\n", inet_ntoa(got));
		s = sge(p.n.mr, p.n.buf, 4096);
		TRY(post_srq(p.n.srq, 1, &s, 1));
		pattern(p.n.buf + 8192, 4096, 3);
		TRY(sync_peer(f));
		TRY(expect_wc(p.n.cq, IBV_WC_SUCCESS, IBV_WC_RECV, 1, &wc));
		TRY(check_pattern(p.n.buf, 1000, 1));
		TRY(check_pattern(p.n.buf + 65536, 100000, 2));
		TRY(sync_peer(f));
	} else {
		pattern(p.n.buf, 1000, 1);
		pattern(p.n.buf + 65536, 100000, 2);
		TRY(sync_peer(f));
		s = sge(p.n.mr, p.n.buf + 65536, 100000);
		TRY(post(p.qp, 1, IBV_WR_RDMA_WRITE, 0, &s, 1, 0, p.peer.addr + 65536, p.peer.rkey));
		s = sge(p.n.mr, p.n.buf, 1000);
		TRY(post(p.qp, 2, IBV_WR_SEND, IBV_SEND_SIGNALED, &s, 1, 0, 0, 0));
		TRY(expect_wc(p.n.cq, IBV_WC_SUCCESS, IBV_WC_SEND, 2, NULL));
		s = sge(p.n.mr, p.n.buf + 300000, 4096);
		TRY(post(p.qp2, 3, IBV_WR_RDMA_READ, IBV_SEND_SIGNALED, &s, 1, 0, p.peer.addr + 8192, p.peer.rkey));
		TRY(expect_wc(p.n.cq, IBV_WC_SUCCESS, IBV_WC_RDMA_READ, 3, NULL));
		TRY(check_pattern(p.n.buf + 300000, 4096, 3));
		TRY(sync_peer(f));
	}
	TRY(pair_down(&p, f));
	if (rank == 1)
		return 0;

	/* Unreachable peers (rank 0 alone): a closed port, a wrong nonce. */
	{
		struct node a, b;
		struct ibv_qp *qa, *qb, *qps[2] = {NULL, NULL};
		union ibv_gid gb;
		double t0, dt;
		TRY(node_open(&b, 4096, 16));
		CHECK((qb = mkqp(&b, 1, 4, 0)), "qp");
		gb = my_gid(&b);
		qps[0] = qb;
		TRY(node_close(&b, qps));       /* its port is closed now */
		TRY(node_open(&a, 4096, 16));
		CHECK((qa = mkqp(&a, 1, 4, 0)), "qp");
		TRY(qp_up(qa, &gb, 0x123, C_DEF));
		s = sge(a.mr, a.buf, 64);
		t0 = now_s();
		TRY(post(qa, 1, IBV_WR_SEND, 0, &s, 1, 0, 0, 0));
		TRY(expect_wc(a.cq, IBV_WC_RETRY_EXC_ERR, IBV_WC_SEND, 1, NULL));
		dt = now_s() - t0;
		CHECK(dt >= 0.25 && dt < 4, "closed port: RETRY_EXC_ERR after %.2f s", dt);
		/* A live context, wrong nonce: it refuses the HELLO (while polling). */
		TRY(node_open(&b, 4096, 16));
		gb = my_gid(&b);
		gb.raw[15] ^= 1;
		{
			struct ibv_qp *qa2;
			struct ibv_qp_attr at;
			CHECK((qa2 = mkqp(&a, 1, 4, 0)), "qp");
			TRY(qp_up(qa2, &gb, 0x123, C_DEF));
			t0 = now_s();
			TRY(post(qa2, 2, IBV_WR_SEND, 0, &s, 1, 0, 0, 0));
			for (;;) {
				int k = ibv_poll_cq(a.cq, 1, &wc);
				ibv_poll_cq(b.cq, 0, NULL);     /* b answers (refuses) */
				CHECK(k >= 0 && now_s() - t0 < 5, "no completion");
				if (k)
					break;
				sleep_us(100);
			}
			dt = now_s() - t0;
			CHECK(wc.wr_id == 2 && wc.status == IBV_WC_RETRY_EXC_ERR && dt >= 0.25 && dt < 4,
			      "wrong nonce: wr_id %llu '%s' after %.2f s", (unsigned long long)wc.wr_id,
			      ibv_wc_status_str(wc.status), dt);
			at.qp_state = IBV_QPS_RESET;
			CHECK(ibv_modify_qp(qa2, &at, IBV_QP_STATE) == 0, "reset");
			CHECK(ibv_destroy_qp(qa2) == 0, "destroy");
		}
		CHECK(ibv_dereg_mr(b.mr) == 0 && ibv_destroy_srq(b.srq) == 0 && ibv_destroy_cq(b.cq) == 0 &&
			      ibv_dealloc_pd(b.pd) == 0 && ibv_close_device(b.ctx) == 0,
		      "close b");
		free(b.buf);
		qps[0] = qa;
		return node_close(&a, qps);
	}
}

/* ------------------------------------------------------------------------ */
/* The agent (IBEMU_AGENT): the HCA works while the program makes no call   */

/* CPU time of this process (all threads), in seconds. */
static double cpu_s(void)
{
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	return (double)ru.ru_utime.tv_sec + (double)ru.ru_stime.tv_sec +
	       ((double)ru.ru_utime.tv_usec + (double)ru.ru_stime.tv_usec) * 1e-6;
}

/* Blocks in read() on the control socket: no verbs call, no polling. */
static int block_read(int fd, char *c, int ms)
{
	struct pollfd pfd = {.fd = fd, .events = POLLIN};
	int r = poll(&pfd, 1, ms);
	CHECK(r == 1, "nothing from the peer within %d ms", ms);
	CHECK(read(fd, c, 1) == 1, "peer socket closed");
	return 0;
}

/* One RC QP on the SRQ each, connected; nothing polled behind our back. */
static int agent_pair(struct node *n, struct ibv_qp **qp, struct info *peer, int f, size_t len, const char *agent)
{
	struct info me;
	setenv("IBEMU_AGENT", agent, 1);
	TRY(node_open(n, len, 1024));
	unsetenv("IBEMU_AGENT");
	g_hook_cq = NULL;
	CHECK(nagents() == (agent[0] == '1'), "IBEMU_AGENT=%s: %d agent threads", agent, nagents());
	CHECK((*qp = mkqp(n, 1, 512, 0)), "qp");
	memset(&me, 0, sizeof(me));
	me.gid = my_gid(n);
	me.qpn = (*qp)->qp_num;
	me.rkey = n->mr->rkey;
	me.addr = (uintptr_t)n->buf;
	me.pid = getpid();
	TRY(xchg(f, &me, peer, sizeof(me)));
	TRY(qp_up(*qp, &peer->gid, peer->qpn, C_DEF));
	return raw_sync(f);
}

static uint32_t ar_len(int i)
{
	return 65536u - (uint32_t)(i % 61) * 16u;
}

/* RNR, then silence (g_fault 0: IBEMU_AGENT=1): the receiver (rank 0) has
 * posted 50 receives; the sender posts 300 SENDs of ~64 KiB, then blocks in
 * read() on its control socket and makes no verbs call at all. The receiver
 * posts the other 250 receives over ~100 ms and must get all 300, in order:
 * the sender's agent retries the RNR'd WRs (local mode) or streams the rest
 * and reads the ACKs (tcp mode). g_fault 1 (IBEMU_AGENT=0): the same stalls
 * (shown for 500 ms); once the sender polls again, everything arrives. */
static int c_agent_rnr(int rank, int *fd)
{
	enum { N = 300, FIRST = 50, SZ = 65536 };
	int off = g_fault == 1, f = fd[1 - rank];
	struct node n;
	struct ibv_qp *qp, *qps[2] = {NULL, NULL};
	struct info peer;
	struct ibv_wc wc[16];
	char c;

	TRY(agent_pair(&n, &qp, &peer, f, (size_t)N * SZ, off ? "0" : "1"));
	qps[0] = qp;
	if (rank == 0) {
		int got = 0, posted = 0;
		double t0, tall = 0;
		for (; posted < FIRST; posted++) {
			struct ibv_sge s = sge(n.mr, n.buf + (size_t)posted * SZ, SZ);
			TRY(post_srq(n.srq, (uint64_t)posted, &s, 1));
		}
		TRY(xwrite(f, "r", 1));                 /* receives posted */
		TRY(block_read(f, &c, 10000));          /* the sender has posted all */
		t0 = now_s();
		for (;;) {
			int k = ibv_poll_cq(n.cq, 16, wc);
			CHECK(k >= 0, "poll_cq");
			for (int j = 0; j < k; j++, got++) {
				uint32_t seq;
				CHECK(wc[j].status == IBV_WC_SUCCESS && wc[j].opcode == IBV_WC_RECV &&
					      wc[j].wr_id == (uint64_t)got,
				      "receive %d: wr_id %llu status '%s'", got, (unsigned long long)wc[j].wr_id,
				      ibv_wc_status_str(wc[j].status));
				memcpy(&seq, n.buf + (size_t)got * SZ, 4);
				CHECK(seq == (uint32_t)got && wc[j].byte_len == ar_len(got), "message %d: seq %u len %u",
				      got, seq, wc[j].byte_len);
				TRY(check_pattern(n.buf + (size_t)got * SZ + 4, 60, (unsigned)got));
			}
			/* 25 more receives every 10 ms, the SRQ (256) never over-full */
			if (posted < N && now_s() - t0 >= (posted - FIRST) / 25 * 0.01 && posted - got + 25 <= 256)
				for (int e = posted + 25; posted < e && posted < N; posted++) {
					struct ibv_sge s = sge(n.mr, n.buf + (size_t)posted * SZ, SZ);
					TRY(post_srq(n.srq, (uint64_t)posted, &s, 1));
				}
			if (posted == N && !tall)
				tall = now_s();
			if (got == N)
				break;
			if (off && tall && now_s() - tall > 0.5)
				break;
			CHECK(now_s() - t0 < 10, "stuck: %d of %d messages arrived (%d receives posted)", got, N,
			      posted);
			if (!k)
				sleep_us(50);
		}
		if (off) {
			/* Without the agent the rest waits for the sender's calls. */
			CHECK(got < N, "IBEMU_AGENT=0: all %d arrived while the sender made no verbs call", N);
			fprintf(stderr, "    (IBEMU_AGENT=0: %d of %d arrived while the sender made no verbs call)\n",
				got, N);
			TRY(xwrite(f, "w", 1));         /* wake up and poll */
			while (got < N) {
				int k = ibv_poll_cq(n.cq, 16, wc);
				CHECK(k >= 0 && now_s() - t0 < 15, "after the sender woke: %d of %d", got, N);
				for (int j = 0; j < k; j++, got++)
					CHECK(wc[j].status == IBV_WC_SUCCESS && wc[j].wr_id == (uint64_t)got,
					      "receive %d: wr_id %llu", got, (unsigned long long)wc[j].wr_id);
				if (!k)
					sleep_us(50);
			}
		} else {
			fprintf(stderr, "    (all %d arrived %.0f ms after the last receive was posted, the sender "
					"asleep)\n", N, (now_s() - tall) * 1e3);
			TRY(xwrite(f, "d", 1));
		}
		TRY(block_read(f, &c, 10000));          /* the sender has its CQEs */
	} else {
		double cpu0, t0;
		TRY(block_read(f, &c, 10000));
		for (int i = 0; i < N; i++) {
			char *b = n.buf + (size_t)i * SZ;
			struct ibv_sge s = sge(n.mr, b, ar_len(i));
			uint32_t seq = (uint32_t)i;
			pattern(b + 4, 60, (unsigned)i);
			memcpy(b, &seq, 4);
			TRY(post(qp, (uint64_t)i, IBV_WR_SEND, IBV_SEND_SIGNALED, &s, 1, 0, 0, 0));
		}
		cpu0 = cpu_s();
		t0 = now_s();
		TRY(xwrite(f, "p", 1));
		TRY(block_read(f, &c, 15000));          /* asleep: not a single verbs call */
		if (!off)
			fprintf(stderr, "    (sender asleep %.0f ms with RNR'd work queued: %.1f ms CPU)\n",
				(now_s() - t0) * 1e3, (cpu_s() - cpu0) * 1e3);
		for (int i = 0; i < N; i++) {
			struct ibv_wc w;
			TRY(expect_wc(n.cq, IBV_WC_SUCCESS, IBV_WC_SEND, (uint64_t)i, &w));
		}
		TRY(expect_none(n.cq, 10));
		CHECK(qp_state(qp) == IBV_QPS_RTS, "QP state %d", qp_state(qp));
		TRY(xwrite(f, "c", 1));
	}
	g_hook_cq = n.cq;
	TRY(sync_peer(f));
	return node_close(&n, qps);
}

/* The responder (rank 0) posts 21 receives, then sleeps in read() and makes
 * no verbs call; the requester does an 8 MiB RDMA WRITE, a 4 MiB RDMA READ,
 * 20 SENDs and a WRITE_WITH_IMM, and gets every completion (acknowledged:
 * the responder's agent placed the data, wrote the RECV CQEs and answered)
 * while the responder sleeps. In local mode the requester does all of it
 * itself (checked all the same). g_fault 1 (tcp only): the responder has
 * IBEMU_AGENT=0, and nothing completes while it sleeps (shown for 500 ms);
 * once it polls again, everything does. */
static int c_agent_responder(int rank, int *fd)
{
	enum { NS = 20, W = 8 << 20, R = 4 << 20, MSG = 65536 };
	const size_t LEN = (size_t)W + R + (size_t)(NS + 1) * MSG;
	int f = fd[1 - rank], off = g_fault == 1;
	struct node n;
	struct ibv_qp *qp, *qps[2] = {NULL, NULL};
	struct info peer;
	char c;

	TRY(agent_pair(&n, &qp, &peer, f, LEN, off && rank == 0 ? "0" : "1"));
	qps[0] = qp;
	char *b = n.buf, *rd = b + W, *msgs = b + W + R;
	if (rank == 0) {
		struct ibv_wc wc;
		double cpu0, t0;
		pattern(rd, R, 77);
		for (int i = 0; i <= NS; i++) {
			struct ibv_sge s = sge(n.mr, msgs + (size_t)i * MSG, MSG);
			TRY(post_srq(n.srq, 100 + (uint64_t)i, &s, 1));
		}
		cpu0 = cpu_s();
		t0 = now_s();
		TRY(xwrite(f, "r", 1));
		TRY(block_read(f, &c, 15000));          /* asleep until the requester is done */
		if (off) {
			/* 'w': serve the requester in our own calls now (xread
			 * polls the CQ), until it is done. */
			CHECK(c == 'w', "got '%c'", c);
			g_hook_cq = n.cq;
			TRY(xread(f, &c, 1, 10000));
			g_hook_cq = NULL;
		} else if (g_net)
			fprintf(stderr, "    (responder asleep %.0f ms, served by its agent: %.1f ms CPU)\n",
				(now_s() - t0) * 1e3, (cpu_s() - cpu0) * 1e3);
		CHECK(c == 'd', "got '%c'", c);
		for (int i = 0; i < NS; i++) {
			TRY(expect_wc(n.cq, IBV_WC_SUCCESS, IBV_WC_RECV, 100 + (uint64_t)i, &wc));
			CHECK(wc.byte_len == 1000u + (uint32_t)i * 3000u && wc.src_qp == peer.qpn, "recv %d: len %u", i,
			      wc.byte_len);
			TRY(check_pattern(msgs + (size_t)i * MSG, wc.byte_len, 200 + (unsigned)i));
		}
		TRY(expect_wc(n.cq, IBV_WC_SUCCESS, IBV_WC_RECV_RDMA_WITH_IMM, 100 + NS, &wc));
		CHECK(wc.imm_data == htonl(0xa9e47) && wc.byte_len == 4096, "write-imm: imm %#x len %u", wc.imm_data,
		      wc.byte_len);
		TRY(check_pattern(b, W, 88));
		TRY(check_pattern(msgs + (size_t)NS * MSG, 4096, 99));
		TRY(expect_none(n.cq, 10));
	} else {
		struct ibv_sge s;
		double t0;
		pattern(b, W, 88);
		memset(rd, 0, R);
		TRY(block_read(f, &c, 10000));
		t0 = now_s();
		s = sge(n.mr, b, W);
		TRY(post(qp, 1, IBV_WR_RDMA_WRITE, IBV_SEND_SIGNALED, &s, 1, 0, peer.addr, peer.rkey));
		s = sge(n.mr, rd, R);
		TRY(post(qp, 2, IBV_WR_RDMA_READ, IBV_SEND_SIGNALED, &s, 1, 0, peer.addr + W, peer.rkey));
		for (int i = 0; i < NS; i++) {
			char *m = msgs + (size_t)i * MSG;
			pattern(m, 1000u + (uint32_t)i * 3000u, 200 + (unsigned)i);
			s = sge(n.mr, m, 1000u + (uint32_t)i * 3000u);
			TRY(post(qp, 10 + (uint64_t)i, IBV_WR_SEND, IBV_SEND_SIGNALED, &s, 1, 0, 0, 0));
		}
		pattern(msgs + (size_t)NS * MSG, 4096, 99);
		s = sge(n.mr, msgs + (size_t)NS * MSG, 4096);
		TRY(post(qp, 3, IBV_WR_RDMA_WRITE_WITH_IMM, IBV_SEND_SIGNALED, &s, 1, 0xa9e47,
			 peer.addr + W + R + (size_t)NS * MSG, peer.rkey));
		if (off) {
			/* Without its agent the sleeping responder answers nothing. */
			TRY(expect_none(n.cq, 500));
			fprintf(stderr, "    (responder with IBEMU_AGENT=0 asleep: no completion in 500 ms)\n");
			TRY(xwrite(f, "w", 1));
		}
		TRY(expect_wc(n.cq, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE, 1, NULL));
		TRY(expect_wc(n.cq, IBV_WC_SUCCESS, IBV_WC_RDMA_READ, 2, NULL));
		for (int i = 0; i < NS; i++)
			TRY(expect_wc(n.cq, IBV_WC_SUCCESS, IBV_WC_SEND, 10 + (uint64_t)i, NULL));
		TRY(expect_wc(n.cq, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE, 3, NULL));
		TRY(check_pattern(rd, R, 77));
		if (!off)
			fprintf(stderr, "    (all %d WRs completed in %.0f ms while the responder made no verbs call)\n",
				NS + 3, (now_s() - t0) * 1e3);
		TRY(xwrite(f, "d", 1));
	}
	g_hook_cq = n.cq;
	TRY(sync_peer(f));
	return node_close(&n, qps);
}

/* An idle context costs (next to) nothing: two connected processes sleep
 * 1 s (IBEMU_IDLE_S) without a verbs call; each may use at most 0.5% of a
 * core meanwhile (the agent blocks; tcp mode: wakes every 50 ms at most). */
static int c_agent_idle(int rank, int *fd)
{
	int f = fd[1 - rank];
	struct node n;
	struct ibv_qp *qp, *qps[2] = {NULL, NULL};
	struct info peer;
	const char *e = getenv("IBEMU_IDLE_S");
	double secs = e ? atof(e) : 1.0, cpu0, t0, cpu, dt;
	struct ibv_sge s;

	TRY(agent_pair(&n, &qp, &peer, f, 1 << 16, "1"));
	qps[0] = qp;
	/* One message each way first, so that the connections are up. */
	s = sge(n.mr, n.buf + 4096, 64);
	TRY(post_srq(n.srq, 1, &s, 1));
	TRY(raw_sync(f));
	s = sge(n.mr, n.buf, 64);
	TRY(post(qp, 2, IBV_WR_SEND, IBV_SEND_SIGNALED, &s, 1, 0, 0, 0));
	for (int i = 0, seen = 0; i < 2; i++) {
		struct ibv_wc wc;
		CHECK(wait_wc(n.cq, &wc, WAIT_MS) == 1 && wc.status == IBV_WC_SUCCESS && (wc.wr_id == 1 || wc.wr_id == 2) &&
			      !(seen & (1 << wc.wr_id)),
		      "completion %d: wr_id %llu '%s'", i, (unsigned long long)wc.wr_id, ibv_wc_status_str(wc.status));
		seen |= 1 << wc.wr_id;
	}
	TRY(raw_sync(f));
	cpu0 = cpu_s();
	t0 = now_s();
	sleep_us((long)(secs * 1e6));
	cpu = cpu_s() - cpu0;
	dt = now_s() - t0;
	fprintf(stderr, "    (rank %d idle %.1f s with a connected QP: %.2f ms CPU, %.3f%% of a core)\n", rank, dt,
		cpu * 1e3, cpu / dt * 100);
	CHECK(cpu / dt < 0.005, "idle context used %.2f%% of a core", cpu / dt * 100);
	g_hook_cq = n.cq;
	TRY(sync_peer(f));
	return node_close(&n, qps);
}

/* ------------------------------------------------------------------------ */
/* Runner                                                                    */

typedef int (*case_fn)(int rank, int *fd);
struct tcase {
	const char *name;
	case_fn fn;
	int nproc;
	int killed;             /* rank expected to die of SIGKILL, or -1 */
	int check_shm;
	double timeout;
	int fault;
	int only;               /* 'l': local mode only, 't': tcp mode only */
	const char *why;        /* ... because */
};

/* Entries other jobs on this machine may create while we run (MPI, UCX). */
static int foreign_shm(const char *n)
{
	static const char *const pfx[] = {"mpich", "ompi", "vader", "sem.mpich", "ucx", "psm", "cma", "shm-", "openmpi"};
	for (unsigned i = 0; i < sizeof(pfx) / sizeof(pfx[0]); i++)
		if (!strncmp(n, pfx[i], strlen(pfx[i])))
			return 1;
	return 0;
}

static int shm_list(char names[][256], int max)
{
	DIR *d = opendir("/dev/shm");
	struct dirent *de;
	int k = 0;
	if (!d)
		return 0;
	while ((de = readdir(d)) && k < max)
		if (de->d_name[0] != '.')
			snprintf(names[k++], 256, "%s", de->d_name);
	closedir(d);
	return k;
}

static int run_case(const struct tcase *t)
{
	int sp[3][3], ok = 1, left;
	pid_t pid[3];
	int done[3] = {0, 0, 0};
	static char before[1024][256], after[1024][256];
	int nb = 0, na;
	double t0, deadline;

	for (int i = 0; i < 3; i++)
		for (int j = 0; j < 3; j++)
			sp[i][j] = -1;
	for (int i = 0; i < t->nproc; i++)
		for (int j = i + 1; j < t->nproc; j++) {
			int pr[2];
			if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pr)) {
				perror("socketpair");
				return 0;
			}
			sp[i][j] = pr[0];
			sp[j][i] = pr[1];
		}
	if (t->check_shm)
		nb = shm_list(before, 1024);
	g_fault = t->fault;
	fflush(stdout);
	fflush(stderr);
	t0 = now_s();
	for (int r = 0; r < t->nproc; r++) {
		pid[r] = fork();
		if (pid[r] == 0) {
			int rc;
			g_case = t->name;
			for (int i = 0; i < 3; i++)
				for (int j = 0; j < 3; j++)
					if (i != r && sp[i][j] >= 0)
						close(sp[i][j]);
			alarm((unsigned)t->timeout + 5);        /* backstop */
			rc = t->fn(r, sp[r]);
			fflush(stdout);
			fflush(stderr);
			_exit(rc ? 1 : 0);
		}
	}
	for (int i = 0; i < 3; i++)
		for (int j = 0; j < 3; j++)
			if (sp[i][j] >= 0)
				close(sp[i][j]);
	deadline = t0 + t->timeout;
	left = t->nproc;
	while (left) {
		for (int r = 0; r < t->nproc; r++) {
			int st;
			if (done[r] || waitpid(pid[r], &st, WNOHANG) != pid[r])
				continue;
			done[r] = 1;
			left--;
			if (r == t->killed) {
				if (!WIFSIGNALED(st) || WTERMSIG(st) != SIGKILL) {
					fprintf(stderr, "    rank %d should have been killed (status %#x)\n", r, st);
					ok = 0;
				}
			} else if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
				if (WIFSIGNALED(st))
					fprintf(stderr, "    rank %d died of signal %d\n", r, WTERMSIG(st));
				ok = 0;
			}
		}
		if (left && now_s() > deadline) {
			fprintf(stderr, "    timed out after %.0f s, killing the case\n", t->timeout);
			for (int r = 0; r < t->nproc; r++)
				if (!done[r]) {
					kill(pid[r], SIGKILL);
					waitpid(pid[r], NULL, 0);
					done[r] = 1;
				}
			left = 0;
			ok = 0;
		}
		if (left)
			sleep_us(2000);
	}
	if (t->check_shm) {
		na = shm_list(after, 1024);
		for (int i = 0; i < na; i++) {
			int seen = 0;
			for (int j = 0; j < nb && !seen; j++)
				seen = !strcmp(after[i], before[j]);
			if (!seen && !foreign_shm(after[i])) {
				fprintf(stderr, "    new entry left in /dev/shm: %s\n", after[i]);
				ok = 0;
			}
		}
	}
	printf("%s %-14s (%.2f s)\n", ok ? "PASS" : "FAIL", t->name, now_s() - t0);
	fflush(stdout);
	return ok;
}

static const struct tcase cases[] = {
	{"device", c_device, 1, -1, 0, 10, 0, 0, NULL},
	{"env_nodev", c_env, 1, -1, 0, 10, 0, 0, NULL},
	{"qp_state", c_qp_state, 1, -1, 0, 10, 0, 0, NULL},
	{"send_recv", c_send_recv, 2, -1, 0, 10, 0, 0, NULL},
	{"send_imm", c_send_imm, 2, -1, 0, 10, 0, 0, NULL},
	{"rdma_write", c_rdma_write, 2, -1, 0, 10, 0, 0, NULL},
	{"rdma_read", c_rdma_read, 2, -1, 0, 10, 0, 0, NULL},
	{"rnr_order", c_rnr, 2, -1, 0, 10, 0, 0, NULL},
	{"bad_rkey", c_bad_rkey, 2, -1, 0, 10, 0, 0, NULL},
	{"dereg_mr", c_dereg, 2, -1, 0, 10, 0, 0, NULL},
	{"short_recv", c_short_recv, 2, -1, 0, 10, 0, 0, NULL},
	{"peer_kill", c_peer_kill, 2, 1, 1, 15, 0, 0, NULL},
	{"lock_kill", c_lock_kill, 2, 1, 1, 15, 0, 'l',
	 "inherently local: a peer killed while holding this HCA's shared lock; tcp mode shares no memory"},
	{"fault_rem_acc", c_fault, 2, -1, 0, 10, 0, 0, NULL},
	{"fault_retry", c_fault, 2, -1, 0, 10, 1, 0, NULL},
	{"fault_qp_err", c_fault, 2, -1, 0, 10, 2, 0, NULL},
	{"fault_rank", c_fault_rank, 1, -1, 0, 10, 0, 0, NULL},
	{"alltoall3", c_alltoall, 3, -1, 0, 28, 0, 0, NULL},
	{"net_mix", c_net_mix, 1, -1, 0, 10, 0, 0, NULL},
	{"tcp_rtr_race", c_tcp_rtr_race, 2, -1, 0, 15, 0, 't', "tcp only"},
	{"tcp_write64m", c_tcp_write64m, 2, -1, 0, 20, 0, 't', "tcp only"},
	{"tcp_kill_mid", c_tcp_kill_mid, 2, 1, 1, 15, 0, 't', "tcp only"},
	{"tcp_sleepy", c_tcp_sleepy, 2, -1, 0, 15, 0, 't', "tcp only"},
	{"tcp_ifaddr", c_tcp_ifaddr, 2, -1, 0, 15, 0, 't', "tcp only"},
	{"agent_rnr", c_agent_rnr, 2, -1, 0, 15, 0, 0, NULL},
	{"agent_off_rnr", c_agent_rnr, 2, -1, 0, 20, 1, 0, NULL},
	{"agent_responder", c_agent_responder, 2, -1, 0, 15, 0, 0, NULL},
	{"agent_off_resp", c_agent_responder, 2, -1, 0, 15, 1, 't',
	 "tcp only: in local mode the requester does the responder's part itself"},
	{"agent_idle", c_agent_idle, 2, -1, 0, 15, 0, 0, NULL},
};

int main(int argc, char **argv)
{
	int fails = 0, ran = 0, skipped = 0, first = 1;
	double t0 = now_s();
	signal(SIGPIPE, SIG_IGN);
	if (argc > 1 && !strncmp(argv[1], "--net", 5)) {
		const char *m = argv[1][5] == '=' ? argv[1] + 6 : argc > 2 ? argv[2] : "";
		first = argv[1][5] == '=' ? 2 : 3;
		if (!strcmp(m, "tcp")) {
			g_net = 1;
			setenv("IBEMU_NET", "tcp", 1);
			setenv("IBEMU_NET_ADDR", "127.0.0.1", 1);
		} else if (!strcmp(m, "local")) {
			unsetenv("IBEMU_NET");
		} else {
			fprintf(stderr, "usage: ibemu_test [--net local|tcp] [case ...]\n");
			return 2;
		}
	} else if (getenv("IBEMU_NET") && !strcmp(getenv("IBEMU_NET"), "tcp"))
		g_net = 1;
	printf("mode: %s\n", g_net ? "tcp (IBEMU_NET=tcp IBEMU_NET_ADDR=127.0.0.1)" : "local");
	for (unsigned i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		int want = argc <= first;
		for (int a = first; a < argc; a++)
			want |= !strcmp(argv[a], cases[i].name);
		if (!want)
			continue;
		if ((cases[i].only == 'l' && g_net) || (cases[i].only == 't' && !g_net)) {
			printf("SKIP %-14s (%s)\n", cases[i].name, cases[i].why);
			skipped++;
			continue;
		}
		ran++;
		fails += !run_case(&cases[i]);
	}
	if (!ran && skipped) {
		printf("OK: 0 cases run, %d skipped\n", skipped);
		return 0;
	}
	if (!ran) {
		fprintf(stderr, "no such case; cases:");
		for (unsigned i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
			fprintf(stderr, " %s", cases[i].name);
		fputc('\n', stderr);
		return 2;
	}
	printf("%s: %d of %d cases passed, %d skipped (%s mode, %.2f s)\n", fails ? "FAIL" : "OK", ran - fails, ran,
	       skipped, g_net ? "tcp" : "local", now_s() - t0);
	return fails ? 1 : 0;
}

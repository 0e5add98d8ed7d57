/*
 * ibemu: an emulated InfiniBand HCA (RC transport) in user space, for testing
 * the libshim verbs backend on machines without RDMA hardware.
 *
 * Loaded with dlopen() in place of libibverbs. It exports the libibverbs
 * control-path functions and fills struct ibv_context.ops (the legacy table)
 * so that the header's static inline data-path calls (ibv_post_send,
 * ibv_poll_cq, ...) land here. It does not link or touch the real libibverbs.
 *
 * Design (see README.md):
 *  - Each opened context ("HCA") keeps its remotely visible state in one memfd:
 *    a robust process-shared mutex, the QP table, the MR table, and a heap that
 *    holds the CQ rings and the SRQ/RQ rings. The GID of port 1 encodes
 *    magic + pid + memfd number + nonce; a peer that connects to the GID
 *    (modify_qp to RTR) maps /proc/<pid>/fd/<fd>. Nothing is ever created in
 *    /dev/shm or on disk, so kill -9 leaves nothing behind.
 *  - post_send executes what it can at once and keeps the rest (RNR, remote
 *    not ready) in a private send queue that every later post_send/poll_cq
 *    of this process retries. As a real HCA keeps working after the post
 *    returned, one "agent" thread per context (IBEMU_AGENT=1, the default)
 *    does the same work on its own while the program makes no verbs call:
 *    it retries queued WRs on the RNR and transport timers and, in tcp mode,
 *    serves the sockets (see "The agent" below). It takes plock like a verbs
 *    call, so the lock order is unchanged.
 *  - Payloads move with process_vm_writev/readv between the processes.
 *  - Lock order: the context's private lock (plock), then at most ONE shared
 *    lock (ours or a peer's) at a time. Never two shared locks at once, so two
 *    processes sending to each other cannot deadlock.
 *  - IBEMU_NET=tcp (per context, at ibv_open_device): peers are reached over
 *    TCP instead (as soft-RoCE does over Ethernet), so that processes in
 *    different PID/network namespaces can talk. The GID then encodes
 *    magic + IPv4 address + port of the context's listening socket + nonce.
 *    The memfd still holds the context's own state, but no peer maps it:
 *    requests (with their payload), ACK/NAKs and RDMA READ data travel on
 *    non-blocking sockets, and all work is done inside the verbs calls of
 *    the process that owns the memory. See "TCP mode" below.
 */
#define _GNU_SOURCE
#include <infiniband/verbs.h>

#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

/* The header turns these into macros/inlines; we export the plain symbols. */
#undef ibv_reg_mr
#undef ibv_reg_mr_iova
#undef ibv_query_port

#ifndef PR_SET_PTRACER
#define PR_SET_PTRACER 0x59616d61
#endif
#ifndef PR_SET_PTRACER_ANY
#define PR_SET_PTRACER_ANY ((unsigned long)-1)
#endif
#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif

#define EXPORT __attribute__((visibility("default")))

/* ------------------------------------------------------------------------ */
/* Limits reported by ibv_query_device and enforced here.                    */

#define EMU_QP_SLOTS    65536u          /* QPN = gen << 16 | slot (24 bits)   */
#define EMU_MR_SLOTS    (1u << 20)      /* key = gen << 20 | slot             */
#define EMU_MR_GEN_MAX  4095u           /* 12-bit generation, then retire     */
#define EMU_MAX_WR      16384
#define EMU_MAX_SGE     16
#define EMU_MAX_INLINE  256
#define EMU_MAX_CQ      65536
#define EMU_MAX_CQE     (1 << 20)
#define EMU_MAX_SRQ     1024
#define EMU_MAX_RD_ATOM 16
#define EMU_MAX_MSG     (1ull << 31)
#define EMU_SHM_SIZE    (256ull << 20)  /* sparse: only touched pages cost    */

#define SHM_MAGIC   0x3155484d45424931ull   /* first word of every ibemu memfd */
#define SHM_VERSION 1u
/* First 4 bytes of our GIDs: fe80 (link-local, as RoCE) + "ie". */
static const uint8_t gid_magic[4] = {0xfe, 0x80, 0x69, 0x65};
/* TCP mode (IBEMU_NET=tcp): fe80 + "it", then IPv4 address, port, 0, nonce. */
static const uint8_t gid_magic_tcp[4] = {0xfe, 0x80, 0x69, 0x74};

/* ------------------------------------------------------------------------ */
/* Shared state (lives in the memfd, read and written by peers).             */
/* Only fixed-size types; offsets are relative to the mapping base.          */

struct shm_mr {
	uint32_t key;       /* lkey == rkey; 0: slot free */
	uint32_t access;    /* IBV_ACCESS_* */
	uint32_t gen;       /* generation of the slot, survives dereg */
	uint32_t pad;
	uint64_t va;        /* address in the owner's process */
	uint64_t iova;      /* address remote peers use (== va for ibv_reg_mr) */
	uint64_t len;
};

struct shm_qp {
	uint32_t qpn;           /* 0: slot free */
	uint32_t gen;
	uint32_t state;         /* enum ibv_qp_state: the truth (peers may set ERR) */
	uint32_t access;        /* qp_access_flags: remote ops allowed on this QP */
	uint32_t min_rnr_timer; /* what an RNR NAK from us tells the requester */
	uint32_t dest_qpn;      /* connected peer QP, valid from RTR */
	uint32_t has_srq;
	uint32_t pad;
	uint64_t recv_cq;       /* offset of shm_cq */
	uint64_t rq;            /* offset of shm_rq (the SRQ's or the QP's own) */
	uint8_t dgid[16];       /* connected peer's GID */
};

struct shm_cqe {
	struct ibv_wc wc;
	uint32_t sq_qpn;    /* nonzero: a send-queue CQE of this local QP ... */
	uint32_t pad;
	uint64_t sq_seq;    /* ... retiring its send WRs up to this sequence */
};

struct shm_cq {
	uint32_t size;
	uint32_t overflow;  /* overrun: the CQ is in error (IBV_EVENT_CQ_ERR in
			     * ibv_get_async_event(3)), unusable from then on */
	uint64_t head;      /* consumed */
	uint64_t tail;      /* produced */
	uint64_t pad;
	struct shm_cqe e[];
};

struct shm_rwqe {
	uint64_t wr_id;
	uint32_t num_sge;
	uint32_t pad;
	struct ibv_sge sge[];
};

struct shm_rq {
	uint32_t size;
	uint32_t max_sge;
	uint64_t head;
	uint64_t tail;
	uint64_t stride;
	/* entries follow */
};

struct shm_hdr {
	uint64_t magic;
	uint32_t version;
	uint32_t nonce;     /* tells a reused pid/fd apart */
	int32_t pid;
	int32_t fd;
	uint64_t size;
	uint64_t qp_tab;
	uint64_t mr_tab;
	uint64_t heap;
	pthread_mutex_t lock;   /* robust, process-shared */
};

/* ------------------------------------------------------------------------ */
/* Private (per-process) state.                                              */

struct emu_peer {
	struct emu_peer *next;
	int refs;
	int self;           /* loopback into our own context */
	int32_t pid, fd;
	uint32_t nonce;
	int pidfd;          /* -1 (old kernel, valgrind): use procfd */
	int procfd;         /* /proc/<pid>, held: goes stale when the process dies */
	struct shm_hdr *shm;
	size_t size;
};

struct swqe {               /* a posted send WR, copied (verbs allow reuse of wr) */
	uint64_t wr_id, seq, raddr, len;
	uint32_t opcode, signaled, imm, rkey;
	uint32_t num_sge, fault, is_inline;
	uint32_t lerr;          /* TCP mode: completes with this status, not sent */
	struct ibv_sge sge[EMU_MAX_SGE];
};

enum { FAULT_REM_ACCESS = 1, FAULT_RETRY_EXC = 2, FAULT_QP_ERR = 3 };

struct emu_pd  { struct ibv_pd ib; int refs; struct emu_pd *next; };
struct emu_mr  { struct ibv_mr ib; struct emu_pd *pd; uint32_t slot; struct emu_mr *next; };
struct emu_cq  { struct ibv_cq ib; uint64_t off; int refs; int reported; struct emu_cq *next; };
struct emu_srq { struct ibv_srq ib; struct emu_pd *pd; uint64_t off, bytes; uint32_t max_wr, max_sge;
		 int refs; struct emu_srq *next; };

struct emu_conn;

struct emu_qp {
	struct ibv_qp ib;
	struct emu_qp *next;            /* all QPs of the context */
	struct emu_qp *pnext;           /* QPs with queued send work */
	int pending;
	struct emu_pd *pd;
	struct emu_cq *scq, *rcq;
	struct emu_srq *srq;
	uint32_t slot;
	struct ibv_qp_init_attr init;
	struct ibv_qp_attr attr;        /* last values set by modify_qp */
	struct emu_peer *peer;
	uint64_t rq_off, rq_bytes;      /* own receive queue (no SRQ) */
	/* send queue: ring of WRs not executed yet */
	struct swqe *ring;
	uint8_t *inl;                   /* max_inline bytes per ring slot */
	uint32_t cap, head, count;
	uint64_t posted, retired;       /* SQ accounting, see emu_poll_cq */
	/* retry state of the WR at the head */
	uint64_t next_try, deadline;
	uint32_t rnr_tries;
	/* TCP mode: the WRs [head, head + sent) are on the wire, awaiting their
	 * ACK/NAK; gen tags them (bumped on every rewind, error or reset so that
	 * stale frames and responses are recognized); a qp_err fault lets the
	 * WRs in flight finish and moves the QP to ERR at barrier_seq. */
	struct emu_conn *conn;
	uint32_t sent, gen;
	int probe;                      /* after NOTREADY: one WR on the wire */
	int barrier;
	uint64_t barrier_seq;
};

struct emu_fault { int kind; uint64_t n; };

struct emu_ctx {
	struct ibv_context ib;          /* first: ctx == &ctx->ib */
	pthread_mutex_t plock;
	int memfd;
	struct shm_hdr *shm;
	size_t size;
	uint32_t nonce;
	union ibv_gid gid;
	struct emu_peer *peers;
	struct emu_qp **qp_slots;       /* slot -> live QP, for SQ retirement */
	uint32_t qp_hint, nqp;
	uint32_t *mr_free;              /* LIFO of reusable MR slots */
	uint32_t mr_nfree, mr_capfree, mr_fresh;
	struct { uint64_t off, len; } *ext;  /* heap free extents, sorted */
	int next_, capext;
	uint32_t next_handle;
	int ncq, nsrq;
	struct emu_pd *pds;
	struct emu_mr *mrs;
	struct emu_cq *cqs;
	struct emu_srq *srqs;
	struct emu_qp *qps;
	struct emu_qp *pend;            /* QPs with queued send work */
	struct emu_fault faults[16];
	int nfaults;
	uint64_t cnt_post, cnt_wr, cnt_rdma;
	int trace;
	/* TCP mode */
	int net;                        /* 0: local (memfd + process_vm), 1: tcp */
	int lfd, epfd;                  /* listening socket, epoll set */
	struct sockaddr_in laddr;       /* where lfd listens */
	struct emu_conn *conns;
	/* The agent thread (IBEMU_AGENT). agent_stop, agent_wake and
	 * last_call are atomics (written under plock, read by the agent
	 * without it); moved under plock; the counters are the agent's. */
	int agent_on;                   /* IBEMU_AGENT=1 (default) */
	int agent_started;
	pthread_t agent;
	int agent_efd;                  /* eventfd: wakes it (poke, stop) */
	int agent_stop;
	uint64_t agent_wake;            /* when it plans to run next; 0: now
					 * (running, poked, or no agent) */
	uint64_t agent_passes, agent_defers;
	uint64_t last_call;             /* the program's last progressing verbs call */
	uint64_t moved;                 /* WRs completed, bytes sent or received,
					 * connections accepted: did a pass help? */
};

#define ctx_of(x) ((struct emu_ctx *)(x))

/* ------------------------------------------------------------------------ */
/* Helpers                                                                   */

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int g_trace;     /* IBEMU_TRACE=1 in some context of this process */

/* Stamped at the end of the verbs calls that progress the whole context
 * (the agent leaves the work to them meanwhile); caller holds plock, the
 * agent reads it without. */
static void called(struct emu_ctx *c)
{
	__atomic_store_n(&c->last_call, now_ns(), __ATOMIC_RELAXED);
}

/* A peer that died holding the lock must not hang anyone: robust mutex.
 * What it was doing is either done or not started (every update publishes
 * last), so the state stays usable. */
static int shm_lock(struct shm_hdr *h)
{
	int r = pthread_mutex_lock(&h->lock);
	if (r == EOWNERDEAD) {
		pthread_mutex_consistent(&h->lock);
		if (g_trace)
			fprintf(stderr, "ibemu[%d]: lock of the HCA of pid %d recovered (its holder died)\n",
				(int)getpid(), (int)h->pid);
		r = 0;
	}
	return r;
}

static void shm_unlock(struct shm_hdr *h)
{
	pthread_mutex_unlock(&h->lock);
}

/* Bounds-checked pointer into a (possibly peer's) mapping. */
static void *shm_at(struct shm_hdr *h, size_t size, uint64_t off, uint64_t len)
{
	if (off == 0 || off > size || len > size - off)
		return NULL;
	return (char *)h + off;
}

static struct shm_qp *shm_qp_tab(struct shm_hdr *h)
{
	return (struct shm_qp *)((char *)h + h->qp_tab);
}

static struct shm_mr *shm_mr_tab(struct shm_hdr *h)
{
	return (struct shm_mr *)((char *)h + h->mr_tab);
}

static struct shm_qp *shm_qp_find(struct shm_hdr *h, uint32_t qpn)
{
	struct shm_qp *q;
	if (qpn == 0)
		return NULL;
	q = &shm_qp_tab(h)[qpn & (EMU_QP_SLOTS - 1)];
	return q->qpn == qpn ? q : NULL;
}

static struct shm_mr *shm_mr_find(struct shm_hdr *h, uint32_t key)
{
	struct shm_mr *m;
	if (key == 0)
		return NULL;
	m = &shm_mr_tab(h)[key & (EMU_MR_SLOTS - 1)];
	return m->key == key ? m : NULL;
}

static const char *wr_op_name(unsigned op)
{
	switch (op) {
	case IBV_WR_SEND: return "SEND";
	case IBV_WR_SEND_WITH_IMM: return "SEND_WITH_IMM";
	case IBV_WR_RDMA_WRITE: return "RDMA_WRITE";
	case IBV_WR_RDMA_WRITE_WITH_IMM: return "RDMA_WRITE_WITH_IMM";
	case IBV_WR_RDMA_READ: return "RDMA_READ";
	default: return "?";
	}
}

static enum ibv_wc_opcode wc_op_of(unsigned op)
{
	switch (op) {
	case IBV_WR_RDMA_WRITE:
	case IBV_WR_RDMA_WRITE_WITH_IMM: return IBV_WC_RDMA_WRITE;
	case IBV_WR_RDMA_READ: return IBV_WC_RDMA_READ;
	default: return IBV_WC_SEND;
	}
}

/* ------------------------------------------------------------------------ */
/* CQ and receive-queue rings (caller holds the owning context's shm lock).  */

static void cq_push(struct shm_hdr *h, size_t size, uint64_t cq_off, const struct ibv_wc *wc,
		    uint32_t sq_qpn, uint64_t sq_seq)
{
	struct shm_cq *cq = shm_at(h, size, cq_off, sizeof(*cq));
	struct shm_cqe *e;
	if (!cq || cq->overflow)
		return;
	if (!shm_at(h, size, cq_off, sizeof(*cq) + (uint64_t)cq->size * sizeof(struct shm_cqe)))
		return;
	if (cq->tail - cq->head >= cq->size) {
		cq->overflow = 1;       /* reported by the owner's poll_cq */
		return;
	}
	e = &cq->e[cq->tail % cq->size];
	e->wc = *wc;
	e->sq_qpn = sq_qpn;
	e->sq_seq = sq_seq;
	cq->tail++;                     /* entry first, then publish (same lock) */
}

static struct shm_rq *rq_get(struct shm_hdr *h, size_t size, uint64_t off)
{
	struct shm_rq *rq = shm_at(h, size, off, sizeof(*rq));
	if (!rq || rq->size == 0 || !shm_at(h, size, off, sizeof(*rq) + rq->size * rq->stride))
		return NULL;
	return rq;
}

static struct shm_rwqe *rq_entry(struct shm_rq *rq, uint64_t idx)
{
	return (struct shm_rwqe *)((char *)(rq + 1) + (idx % rq->size) * rq->stride);
}

static struct shm_rwqe *rq_head(struct shm_rq *rq)
{
	return rq->head == rq->tail ? NULL : rq_entry(rq, rq->head);
}

static int rq_push(struct shm_rq *rq, struct ibv_recv_wr *wr)
{
	struct shm_rwqe *e;
	if (rq->tail - rq->head >= rq->size)
		return ENOMEM;
	e = rq_entry(rq, rq->tail);
	e->wr_id = wr->wr_id;
	e->num_sge = (uint32_t)wr->num_sge;
	memcpy(e->sge, wr->sg_list, sizeof(struct ibv_sge) * (size_t)wr->num_sge);
	rq->tail++;
	return 0;
}

/* A QP entering Error flushes its own receive queue (IBA vol. 1, QP state
 * Error: outstanding WRs complete with flush error); receives on an SRQ stay
 * there for the other QPs, as on real HCAs. Caller holds h's lock. */
static void shm_qp_to_err(struct shm_hdr *h, size_t size, struct shm_qp *q)
{
	struct shm_rq *rq;
	struct shm_rwqe *e;
	if (q->state == IBV_QPS_ERR)
		return;
	__atomic_store_n(&q->state, IBV_QPS_ERR, __ATOMIC_RELEASE);
	if (q->has_srq || !(rq = rq_get(h, size, q->rq)))
		return;
	while ((e = rq_head(rq))) {
		struct ibv_wc wc = {.wr_id = e->wr_id, .status = IBV_WC_WR_FLUSH_ERR,
				    .opcode = IBV_WC_RECV, .qp_num = q->qpn, .src_qp = q->dest_qpn};
		cq_push(h, size, q->recv_cq, &wc, 0, 0);
		rq->head++;
	}
}

/* ------------------------------------------------------------------------ */
/* The memfd heap (rings). Private free list; only the owner allocates.      */

static uint64_t heap_alloc(struct emu_ctx *c, uint64_t len)
{
	len = (len + 63) & ~63ull;
	for (int i = 0; i < c->next_; i++) {
		if (c->ext[i].len >= len) {
			uint64_t off = c->ext[i].off;
			c->ext[i].off += len;
			c->ext[i].len -= len;
			if (c->ext[i].len == 0) {
				memmove(&c->ext[i], &c->ext[i + 1], sizeof(c->ext[0]) * (size_t)(c->next_ - i - 1));
				c->next_--;
			}
			return off;
		}
	}
	return 0;
}

static void heap_free(struct emu_ctx *c, uint64_t off, uint64_t len)
{
	int i;
	uint64_t lo, hi, pg = (uint64_t)sysconf(_SC_PAGESIZE);
	if (!off)
		return;
	len = (len + 63) & ~63ull;
	if (c->next_ == c->capext) {
		int ncap = c->capext ? c->capext * 2 : 16;
		void *p = realloc(c->ext, sizeof(c->ext[0]) * (size_t)ncap);
		if (!p)
			return;         /* leak the range rather than corrupt */
		c->ext = p;
		c->capext = ncap;
	}
	for (i = 0; i < c->next_ && c->ext[i].off < off; i++)
		;
	memmove(&c->ext[i + 1], &c->ext[i], sizeof(c->ext[0]) * (size_t)(c->next_ - i));
	c->ext[i].off = off;
	c->ext[i].len = len;
	c->next_++;
	if (i + 1 < c->next_ && c->ext[i].off + c->ext[i].len == c->ext[i + 1].off) {
		c->ext[i].len += c->ext[i + 1].len;
		memmove(&c->ext[i + 1], &c->ext[i + 2], sizeof(c->ext[0]) * (size_t)(c->next_ - i - 2));
		c->next_--;
	}
	if (i > 0 && c->ext[i - 1].off + c->ext[i - 1].len == c->ext[i].off) {
		c->ext[i - 1].len += c->ext[i].len;
		memmove(&c->ext[i], &c->ext[i + 1], sizeof(c->ext[0]) * (size_t)(c->next_ - i - 1));
		c->next_--;
		i--;
	}
	/* Give whole free pages back to the kernel. */
	lo = (c->ext[i].off + pg - 1) & ~(pg - 1);
	hi = (c->ext[i].off + c->ext[i].len) & ~(pg - 1);
	if (hi > lo)
		fallocate(c->memfd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)lo, (off_t)(hi - lo));
}

/* ------------------------------------------------------------------------ */
/* Peers: other contexts reached through their GID.                          */

static int gid_decode(const uint8_t *g, int32_t *pid, int32_t *fd, uint32_t *nonce)
{
	uint32_t v[3];
	if (memcmp(g, gid_magic, 4) != 0)
		return -1;
	memcpy(v, g + 4, sizeof(v));
	*pid = (int32_t)be32toh(v[0]);
	*fd = (int32_t)be32toh(v[1]);
	*nonce = be32toh(v[2]);
	return *pid > 0 && *fd >= 0 ? 0 : -1;
}

static struct emu_peer *peer_get(struct emu_ctx *c, const uint8_t *gid)
{
	int32_t pid, fd;
	uint32_t nonce;
	struct emu_peer *p;
	char path[64];
	struct stat st;
	int f;
	void *m;

	if (c->net) {
		/* TCP mode: only a QP connected into its own context takes this
		 * (direct) path, as an HCA loops back internally. */
		if (memcmp(gid, c->gid.raw, 16) != 0)
			return NULL;
		pid = getpid();
		fd = c->memfd;
		nonce = c->nonce;
	} else if (gid_decode(gid, &pid, &fd, &nonce))
		return NULL;
	for (p = c->peers; p; p = p->next) {
		if (p->pid == pid && p->fd == fd && p->nonce == nonce) {
			p->refs++;
			return p;
		}
	}
	p = calloc(1, sizeof(*p));
	if (!p)
		return NULL;
	p->pid = pid;
	p->fd = fd;
	p->nonce = nonce;
	p->refs = 1;
	p->pidfd = -1;
	p->procfd = -1;
	if (pid == getpid() && fd == c->memfd && nonce == c->nonce) {
		p->self = 1;
		p->shm = c->shm;
		p->size = c->size;
	} else {
		/* pidfd first: once we hold it, a recycled pid cannot fool us. */
		p->pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
		if (p->pidfd < 0) {
			snprintf(path, sizeof(path), "/proc/%d", (int)pid);
			p->procfd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		}
		snprintf(path, sizeof(path), "/proc/%d/fd/%d", (int)pid, (int)fd);
		f = open(path, O_RDWR | O_CLOEXEC);
		if (f < 0)
			goto fail;
		if (fstat(f, &st) || (size_t)st.st_size < sizeof(struct shm_hdr)) {
			close(f);
			goto fail;
		}
		m = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, f, 0);
		close(f);               /* the mapping keeps the memfd alive */
		if (m == MAP_FAILED)
			goto fail;
		p->shm = m;
		p->size = (size_t)st.st_size;
		if (p->shm->magic != SHM_MAGIC || p->shm->version != SHM_VERSION ||
		    p->shm->nonce != nonce || p->shm->pid != pid || p->shm->size != p->size) {
			munmap(m, p->size);
			goto fail;
		}
		madvise(m, p->size, MADV_DONTFORK);
	}
	p->next = c->peers;
	c->peers = p;
	return p;
fail:
	if (p->pidfd >= 0)
		close(p->pidfd);
	if (p->procfd >= 0)
		close(p->procfd);
	free(p);
	return NULL;
}

static void peer_put(struct emu_ctx *c, struct emu_peer *p)
{
	struct emu_peer **pp;
	if (!p || --p->refs > 0)
		return;
	for (pp = &c->peers; *pp; pp = &(*pp)->next) {
		if (*pp == p) {
			*pp = p->next;
			break;
		}
	}
	if (!p->self)
		munmap(p->shm, p->size);
	if (p->pidfd >= 0)
		close(p->pidfd);
	if (p->procfd >= 0)
		close(p->procfd);
	free(p);
}

/* Dead (or zombie) peers cannot answer: a pidfd becomes readable at exit.
 * Without pidfd: a held /proc/<pid> fd refuses lookups once that process
 * is gone (even if the pid is reused), and its stat shows a zombie. */
static int peer_alive(struct emu_peer *p)
{
	char st[512], *rp;
	ssize_t k;
	int f;
	if (p->self)
		return 1;
	if (p->pidfd >= 0) {
		struct pollfd pfd = {.fd = p->pidfd, .events = POLLIN};
		return poll(&pfd, 1, 0) == 0;
	}
	if (p->procfd < 0)
		return kill(p->pid, 0) == 0 || errno == EPERM;
	f = openat(p->procfd, "stat", O_RDONLY | O_CLOEXEC);
	if (f < 0)
		return 0;
	k = read(f, st, sizeof(st) - 1);
	close(f);
	if (k <= 0)
		return 0;
	st[k] = 0;
	rp = strrchr(st, ')');          /* "pid (comm) S ..." */
	return rp && rp[1] == ' ' && rp[2] != 'Z' && rp[2] != 'X';
}

/* ------------------------------------------------------------------------ */
/* Device list                                                               */

static struct ibv_device g_dev = {
	.node_type = IBV_NODE_CA,
	.transport_type = IBV_TRANSPORT_IB,
	.name = "ibemu0",
	.dev_name = "uverbs_ibemu0",
	.dev_path = "/sys/class/infiniband_verbs/uverbs_ibemu0",
	.ibdev_path = "/sys/class/infiniband/ibemu0",
};

#define EMU_GUID 0x02e1be00000000e1ull

static void env_error(const char *var, const char *val, const char *allowed)
{
	fprintf(stderr, "ibemu: invalid %s='%s' (allowed: %s)\n", var, val, allowed);
}

EXPORT struct ibv_device **ibv_get_device_list(int *num_devices)
{
	const char *nd = getenv("IBEMU_NODEV");
	int none = 0;
	struct ibv_device **l;

	if (nd && *nd && strcmp(nd, "0") != 0) {
		if (strcmp(nd, "1") != 0) {
			env_error("IBEMU_NODEV", nd, "0 or 1");
			if (num_devices)
				*num_devices = 0;
			errno = EINVAL;
			return NULL;
		}
		none = 1;
	}
	l = calloc(2, sizeof(*l));
	if (!l) {
		errno = ENOMEM;
		return NULL;
	}
	if (!none)
		l[0] = &g_dev;
	if (num_devices)
		*num_devices = none ? 0 : 1;
	if (none)
		errno = ENODEV;
	return l;
}

EXPORT void ibv_free_device_list(struct ibv_device **list)
{
	free(list);
}

EXPORT const char *ibv_get_device_name(struct ibv_device *device)
{
	return device ? device->name : NULL;
}

EXPORT __be64 ibv_get_device_guid(struct ibv_device *device)
{
	(void)device;
	return htobe64(EMU_GUID);
}

EXPORT int ibv_fork_init(void)
{
	return 0;
}

/* ------------------------------------------------------------------------ */
/* Context                                                                   */

static int emu_post_send(struct ibv_qp *, struct ibv_send_wr *, struct ibv_send_wr **);
static int emu_post_recv(struct ibv_qp *, struct ibv_recv_wr *, struct ibv_recv_wr **);
static int emu_post_srq_recv(struct ibv_srq *, struct ibv_recv_wr *, struct ibv_recv_wr **);
static int emu_poll_cq(struct ibv_cq *, int, struct ibv_wc *);
static int emu_req_notify_cq(struct ibv_cq *, int);
static int net_open(struct emu_ctx *c);
static void net_close(struct emu_ctx *c);
static int agent_start(struct emu_ctx *c);
static void agent_stop(struct emu_ctx *c);

static int parse_u64(const char *s, uint64_t *v)
{
	char *end;
	unsigned long long x;
	if (!s || *s < '0' || *s > '9')
		return -1;
	errno = 0;
	x = strtoull(s, &end, 10);
	if (errno || *end)
		return -1;
	*v = x;
	return 0;
}

/* IBEMU_FAULT=<kind>:<n>[,...], IBEMU_FAULT_RANK=<r>, IBEMU_TRACE=0|1,
 * IBEMU_AGENT=0|1, IBEMU_NET=local|tcp, IBEMU_NET_ADDR=<IPv4>.
 * The fault counters belong to the context (a process opens one). */
static int parse_env(struct emu_ctx *c)
{
	const char *f = getenv("IBEMU_FAULT"), *fr = getenv("IBEMU_FAULT_RANK");
	const char *tr = getenv("IBEMU_TRACE"), *ag = getenv("IBEMU_AGENT");
	static const char *const allowed_fault =
		"comma-separated kind:n with kind rem_access|retry_exc|qp_err and n >= 1";
	const char *net = getenv("IBEMU_NET");
	uint64_t want;

	if (net && *net && strcmp(net, "local") != 0) {
		if (strcmp(net, "tcp") != 0) {
			env_error("IBEMU_NET", net, "local or tcp");
			return -1;
		}
		c->net = 1;
	}
	if (c->net) {
		const char *a = getenv("IBEMU_NET_ADDR");
		c->laddr.sin_family = AF_INET;
		if (a && *a) {
			if (inet_pton(AF_INET, a, &c->laddr.sin_addr) != 1) {
				env_error("IBEMU_NET_ADDR", a, "an IPv4 address of this host, e.g. 10.77.0.1");
				return -1;
			}
		} else {
			/* The first non-loopback IPv4 address, else 127.0.0.1. */
			struct ifaddrs *ifs = NULL, *i;
			c->laddr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
			if (getifaddrs(&ifs) == 0) {
				for (i = ifs; i; i = i->ifa_next) {
					if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET && (i->ifa_flags & IFF_UP) &&
					    !(i->ifa_flags & IFF_LOOPBACK)) {
						c->laddr.sin_addr = ((struct sockaddr_in *)i->ifa_addr)->sin_addr;
						break;
					}
				}
				freeifaddrs(ifs);
			}
		}
	}
	c->agent_on = 1;
	if (ag && *ag) {
		if (strcmp(ag, "0") && strcmp(ag, "1")) {
			env_error("IBEMU_AGENT", ag, "0 or 1");
			return -1;
		}
		c->agent_on = ag[0] == '1';
	}
	if (tr && *tr) {
		if (strcmp(tr, "0") && strcmp(tr, "1")) {
			env_error("IBEMU_TRACE", tr, "0 or 1");
			return -1;
		}
		c->trace = tr[0] == '1';
		g_trace |= c->trace;
	}
	if (fr && *fr && parse_u64(fr, &want)) {
		env_error("IBEMU_FAULT_RANK", fr, "a rank number >= 0");
		return -1;
	}
	if (!f || !*f)
		return 0;
	{
		char buf[512], *save = NULL, *tok;
		if (strlen(f) >= sizeof(buf)) {
			env_error("IBEMU_FAULT", f, allowed_fault);
			return -1;
		}
		strcpy(buf, f);
		for (tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
			char *colon = strchr(tok, ':');
			struct emu_fault ft = {0, 0};
			if (colon) {
				*colon = 0;
				if (!strcmp(tok, "rem_access"))
					ft.kind = FAULT_REM_ACCESS;
				else if (!strcmp(tok, "retry_exc"))
					ft.kind = FAULT_RETRY_EXC;
				else if (!strcmp(tok, "qp_err"))
					ft.kind = FAULT_QP_ERR;
			}
			if (!ft.kind || parse_u64(colon + 1, &ft.n) || ft.n == 0 ||
			    c->nfaults == (int)(sizeof(c->faults) / sizeof(c->faults[0]))) {
				env_error("IBEMU_FAULT", f, allowed_fault);
				return -1;
			}
			c->faults[c->nfaults++] = ft;
		}
	}
	if (fr && *fr) {
		static const char *const rank_vars[] = {"PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK"};
		uint64_t r;
		const char *v = NULL;
		for (unsigned i = 0; i < 3 && !v; i++)
			v = getenv(rank_vars[i]);
		if (!v || parse_u64(v, &r) || r != want)
			c->nfaults = 0;         /* not the targeted process */
	}
	return 0;
}

static int fault_hit(struct emu_ctx *c, int kind, uint64_t count)
{
	for (int i = 0; i < c->nfaults; i++)
		if (c->faults[i].kind == kind && c->faults[i].n == count)
			return 1;
	return 0;
}

EXPORT struct ibv_context *ibv_open_device(struct ibv_device *device)
{
	struct emu_ctx *c;
	struct shm_hdr *h;
	pthread_mutexattr_t ma;
	uint32_t v[3];
	uint64_t qp_tab, mr_tab, heap;

	if (device != &g_dev) {
		errno = ENODEV;
		return NULL;
	}
	c = calloc(1, sizeof(*c));
	if (!c) {
		errno = ENOMEM;
		return NULL;
	}
	c->memfd = -1;
	c->lfd = c->epfd = c->agent_efd = -1;
	if (parse_env(c)) {
		free(c);
		errno = EINVAL;
		return NULL;
	}
	c->qp_slots = calloc(EMU_QP_SLOTS, sizeof(*c->qp_slots));
	if (!c->qp_slots)
		goto nomem;
	c->size = EMU_SHM_SIZE;
	c->memfd = memfd_create("ibemu", MFD_CLOEXEC);
	if (c->memfd < 0 || ftruncate(c->memfd, (off_t)c->size))
		goto fail;
	h = mmap(NULL, c->size, PROT_READ | PROT_WRITE, MAP_SHARED, c->memfd, 0);
	if (h == MAP_FAILED)
		goto fail;
	/* A fork()ed child must not inherit (and scribble on) the HCA. */
	madvise(h, c->size, MADV_DONTFORK);
	c->shm = h;
	if (getrandom(&c->nonce, sizeof(c->nonce), GRND_NONBLOCK) != sizeof(c->nonce))
		c->nonce = (uint32_t)now_ns() ^ ((uint32_t)getpid() << 16);
	if (!c->nonce)
		c->nonce = 1;

	qp_tab = 4096;
	mr_tab = (qp_tab + EMU_QP_SLOTS * sizeof(struct shm_qp) + 4095) & ~4095ull;
	heap = (mr_tab + (uint64_t)EMU_MR_SLOTS * sizeof(struct shm_mr) + 4095) & ~4095ull;
	h->version = SHM_VERSION;
	h->nonce = c->nonce;
	h->pid = getpid();
	h->fd = c->memfd;
	h->size = c->size;
	h->qp_tab = qp_tab;
	h->mr_tab = mr_tab;
	h->heap = heap;
	pthread_mutexattr_init(&ma);
	pthread_mutexattr_setpshared(&ma, PTHREAD_PROCESS_SHARED);
	pthread_mutexattr_setrobust(&ma, PTHREAD_MUTEX_ROBUST);
	pthread_mutex_init(&h->lock, &ma);
	pthread_mutexattr_destroy(&ma);
	__atomic_store_n(&h->magic, SHM_MAGIC, __ATOMIC_RELEASE);
	c->ext = malloc(sizeof(c->ext[0]) * 16);
	if (!c->ext)
		goto fail;
	c->capext = 16;
	c->next_ = 1;
	c->ext[0].off = heap;
	c->ext[0].len = c->size - heap;

	if (c->net) {
		if (net_open(c))
			goto fail;
	} else {
		memcpy(c->gid.raw, gid_magic, 4);
		v[0] = htobe32((uint32_t)getpid());
		v[1] = htobe32((uint32_t)c->memfd);
		v[2] = htobe32(c->nonce);
		memcpy(c->gid.raw + 4, v, sizeof(v));
	}

	pthread_mutex_init(&c->plock, NULL);
	c->ib.device = device;
	c->ib.cmd_fd = c->memfd;
	c->ib.async_fd = -1;
	c->ib.num_comp_vectors = 1;
	pthread_mutex_init(&c->ib.mutex, NULL);
	c->ib.abi_compat = NULL;        /* header inlines take the legacy ops path */
	c->ib.ops.post_send = emu_post_send;
	c->ib.ops.post_recv = emu_post_recv;
	c->ib.ops.post_srq_recv = emu_post_srq_recv;
	c->ib.ops.poll_cq = emu_poll_cq;
	c->ib.ops.req_notify_cq = emu_req_notify_cq;
	c->next_handle = 1;

	/* Peers write into us with process_vm_writev; Yama (ptrace_scope 1) would
	 * refuse a non-ancestor otherwise. Failure is fine (no Yama). */
	prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);
	/* Last: from here on the agent may work on the context. */
	if (c->agent_on && (errno = agent_start(c)))
		goto fail;
	return &c->ib;

nomem:
	errno = ENOMEM;
fail: {
	int e = errno ? errno : ENOMEM;
	if (c->shm)
		munmap(c->shm, c->size);
	if (c->memfd >= 0)
		close(c->memfd);
	if (c->lfd >= 0)
		close(c->lfd);
	if (c->epfd >= 0)
		close(c->epfd);
	if (c->agent_efd >= 0)
		close(c->agent_efd);
	free(c->ext);
	free(c->qp_slots);
	free(c);
	errno = e;
	return NULL;
}
}

EXPORT int ibv_destroy_qp(struct ibv_qp *qp);
EXPORT int ibv_destroy_srq(struct ibv_srq *srq);
EXPORT int ibv_destroy_cq(struct ibv_cq *cq);
EXPORT int ibv_dereg_mr(struct ibv_mr *mr);
EXPORT int ibv_dealloc_pd(struct ibv_pd *pd);

/* Releases everything still open, as the kernel would on close(cmd_fd). */
EXPORT int ibv_close_device(struct ibv_context *context)
{
	struct emu_ctx *c = ctx_of(context);
	if (!c)
		return -1;
	agent_stop(c);                  /* joined: nothing runs behind our back */
	while (c->qps)
		ibv_destroy_qp(&c->qps->ib);
	while (c->srqs)
		ibv_destroy_srq(&c->srqs->ib);
	while (c->cqs)
		ibv_destroy_cq(&c->cqs->ib);
	while (c->mrs)
		ibv_dereg_mr(&c->mrs->ib);
	while (c->pds) {
		c->pds->refs = 0;
		ibv_dealloc_pd(&c->pds->ib);
	}
	while (c->peers) {
		c->peers->refs = 1;
		peer_put(c, c->peers);
	}
	net_close(c);
	munmap(c->shm, c->size);
	close(c->memfd);
	pthread_mutex_destroy(&c->plock);
	pthread_mutex_destroy(&c->ib.mutex);
	free(c->ext);
	free(c->mr_free);
	free(c->qp_slots);
	free(c);
	return 0;
}

EXPORT int ibv_query_device(struct ibv_context *context, struct ibv_device_attr *a)
{
	if (!context || !a)
		return EINVAL;
	memset(a, 0, sizeof(*a));
	snprintf(a->fw_ver, sizeof(a->fw_ver), "ibemu-1.0");
	a->node_guid = htobe64(EMU_GUID);
	a->sys_image_guid = htobe64(EMU_GUID);
	a->max_mr_size = EMU_MAX_MSG * 16;
	a->page_size_cap = 0xfffff000u;
	a->vendor_id = 0;
	a->vendor_part_id = 0;
	a->hw_ver = 1;
	a->max_qp = (int)EMU_QP_SLOTS;
	a->max_qp_wr = EMU_MAX_WR;
	a->device_cap_flags = IBV_DEVICE_RC_RNR_NAK_GEN | IBV_DEVICE_PORT_ACTIVE_EVENT;
	a->max_sge = EMU_MAX_SGE;
	a->max_sge_rd = EMU_MAX_SGE;
	a->max_cq = EMU_MAX_CQ;
	a->max_cqe = EMU_MAX_CQE;
	a->max_mr = (int)EMU_MR_SLOTS;
	a->max_pd = 1 << 24;
	a->max_qp_rd_atom = EMU_MAX_RD_ATOM;
	a->max_res_rd_atom = EMU_MAX_RD_ATOM * (int)EMU_QP_SLOTS;
	a->max_qp_init_rd_atom = EMU_MAX_RD_ATOM;
	a->atomic_cap = IBV_ATOMIC_NONE;
	a->max_srq = EMU_MAX_SRQ;
	a->max_srq_wr = EMU_MAX_WR;
	a->max_srq_sge = EMU_MAX_SGE;
	a->max_pkeys = 1;
	a->local_ca_ack_delay = 16;
	a->phys_port_cnt = 1;
	return 0;
}

/* The exported symbol takes the compat struct; the header's inline
 * ___ibv_query_port passes a full struct ibv_port_attr (memset first). */
EXPORT int ibv_query_port(struct ibv_context *context, uint8_t port_num,
			  struct _compat_ibv_port_attr *port_attr)
{
	struct ibv_port_attr *a = (struct ibv_port_attr *)port_attr;
	if (!context || !a || port_num != 1)
		return EINVAL;
	memset(a, 0, sizeof(*a));
	a->state = IBV_PORT_ACTIVE;
	a->max_mtu = IBV_MTU_4096;
	a->active_mtu = IBV_MTU_4096;
	a->gid_tbl_len = 1;
	a->port_cap_flags = IBV_PORT_CM_SUP | IBV_PORT_IP_BASED_GIDS;
	a->max_msg_sz = (uint32_t)EMU_MAX_MSG;
	a->pkey_tbl_len = 1;
	a->lid = 0;                     /* RoCE: no LIDs, the GRH addresses */
	a->max_vl_num = 1;
	a->active_width = 2;            /* 4x */
	a->active_speed = 32;           /* EDR */
	a->phys_state = 5;              /* LinkUp */
	a->link_layer = IBV_LINK_LAYER_ETHERNET;
	return 0;
}

EXPORT int ibv_query_gid(struct ibv_context *context, uint8_t port_num, int index, union ibv_gid *gid)
{
	if (!context || !gid || port_num != 1 || index != 0) {
		errno = EINVAL;
		return -1;
	}
	*gid = ctx_of(context)->gid;
	return 0;
}

/* ------------------------------------------------------------------------ */
/* PD, MR                                                                    */

EXPORT struct ibv_pd *ibv_alloc_pd(struct ibv_context *context)
{
	struct emu_ctx *c = ctx_of(context);
	struct emu_pd *pd = calloc(1, sizeof(*pd));
	if (!pd) {
		errno = ENOMEM;
		return NULL;
	}
	pthread_mutex_lock(&c->plock);
	pd->ib.context = context;
	pd->ib.handle = c->next_handle++;
	pd->next = c->pds;
	c->pds = pd;
	pthread_mutex_unlock(&c->plock);
	return &pd->ib;
}

EXPORT int ibv_dealloc_pd(struct ibv_pd *ibpd)
{
	struct emu_pd *pd = (struct emu_pd *)ibpd, **pp;
	struct emu_ctx *c = ctx_of(ibpd->context);
	pthread_mutex_lock(&c->plock);
	if (pd->refs) {                 /* MRs/QPs/SRQs still use it (kernel: EBUSY) */
		pthread_mutex_unlock(&c->plock);
		return EBUSY;
	}
	for (pp = &c->pds; *pp; pp = &(*pp)->next)
		if (*pp == pd) {
			*pp = pd->next;
			break;
		}
	pthread_mutex_unlock(&c->plock);
	free(pd);
	return 0;
}

/* ibv_reg_mr_iova2: versioned below (IBVERBS_1.8 default, also IBVERBS_1.1). */
EXPORT struct ibv_mr *emu_reg_mr_iova2(struct ibv_pd *ibpd, void *addr, size_t length, uint64_t iova,
				       unsigned int access)
{
	struct emu_pd *pd = (struct emu_pd *)ibpd;
	struct emu_ctx *c;
	struct emu_mr *mr;
	struct shm_mr *m;
	uint32_t slot;

	if (!ibpd || !addr || length == 0) {
		errno = EINVAL;
		return NULL;
	}
	/* ibv_reg_mr(3): REMOTE_WRITE (or ATOMIC) requires LOCAL_WRITE. */
	if ((access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) &&
	    !(access & IBV_ACCESS_LOCAL_WRITE)) {
		errno = EINVAL;
		return NULL;
	}
	c = ctx_of(ibpd->context);
	mr = calloc(1, sizeof(*mr));
	if (!mr) {
		errno = ENOMEM;
		return NULL;
	}
	pthread_mutex_lock(&c->plock);
	if (c->mr_nfree)
		slot = c->mr_free[--c->mr_nfree];
	else if (c->mr_fresh < EMU_MR_SLOTS)
		slot = c->mr_fresh++;
	else {
		pthread_mutex_unlock(&c->plock);
		free(mr);
		errno = ENOMEM;
		return NULL;
	}
	m = &shm_mr_tab(c->shm)[slot];
	shm_lock(c->shm);
	m->gen++;                       /* keys never repeat: slot retires at EMU_MR_GEN_MAX */
	m->access = access;
	m->va = (uintptr_t)addr;
	m->iova = iova;
	m->len = length;
	m->key = (m->gen << 20) | slot;
	shm_unlock(c->shm);
	mr->slot = slot;
	mr->pd = pd;
	mr->ib.context = ibpd->context;
	mr->ib.pd = ibpd;
	mr->ib.addr = addr;
	mr->ib.length = length;
	mr->ib.handle = c->next_handle++;
	mr->ib.lkey = mr->ib.rkey = m->key;
	pd->refs++;
	mr->next = c->mrs;
	c->mrs = mr;
	pthread_mutex_unlock(&c->plock);
	return &mr->ib;
}

EXPORT struct ibv_mr *ibv_reg_mr(struct ibv_pd *pd, void *addr, size_t length, int access)
{
	return emu_reg_mr_iova2(pd, addr, length, (uintptr_t)addr, (unsigned)access);
}

EXPORT struct ibv_mr *emu_reg_mr_iova(struct ibv_pd *pd, void *addr, size_t length, uint64_t iova, int access)
{
	return emu_reg_mr_iova2(pd, addr, length, iova, (unsigned)access);
}

/* The real library has ibv_reg_mr_iova@@IBVERBS_1.7 and
 * ibv_reg_mr_iova2@@IBVERBS_1.8; we also answer dlvsym(..., "IBVERBS_1.1")
 * for them, as for every other function (glibc-style .symver binding). */
EXPORT struct ibv_mr *emu_reg_mr_iova2_v11(struct ibv_pd *, void *, size_t, uint64_t, unsigned int)
	__attribute__((alias("emu_reg_mr_iova2")));
EXPORT struct ibv_mr *emu_reg_mr_iova_v11(struct ibv_pd *, void *, size_t, uint64_t, int)
	__attribute__((alias("emu_reg_mr_iova")));
__asm__(".symver emu_reg_mr_iova2, ibv_reg_mr_iova2@@IBVERBS_1.8");
__asm__(".symver emu_reg_mr_iova2_v11, ibv_reg_mr_iova2@IBVERBS_1.1");
__asm__(".symver emu_reg_mr_iova, ibv_reg_mr_iova@@IBVERBS_1.7");
__asm__(".symver emu_reg_mr_iova_v11, ibv_reg_mr_iova@IBVERBS_1.1");

EXPORT int ibv_dereg_mr(struct ibv_mr *ibmr)
{
	struct emu_mr *mr = (struct emu_mr *)ibmr, **pp;
	struct emu_ctx *c = ctx_of(ibmr->context);
	struct shm_mr *m;

	pthread_mutex_lock(&c->plock);
	m = &shm_mr_tab(c->shm)[mr->slot];
	shm_lock(c->shm);
	m->key = 0;                     /* peers' rkey checks fail from now on */
	shm_unlock(c->shm);
	if (m->gen < EMU_MR_GEN_MAX) {
		if (c->mr_nfree == c->mr_capfree) {
			uint32_t ncap = c->mr_capfree ? c->mr_capfree * 2 : 64;
			uint32_t *p = realloc(c->mr_free, sizeof(*p) * ncap);
			if (p) {
				c->mr_free = p;
				c->mr_capfree = ncap;
			}
		}
		if (c->mr_nfree < c->mr_capfree)
			c->mr_free[c->mr_nfree++] = mr->slot;
	}
	mr->pd->refs--;
	for (pp = &c->mrs; *pp; pp = &(*pp)->next)
		if (*pp == mr) {
			*pp = mr->next;
			break;
		}
	pthread_mutex_unlock(&c->plock);
	free(mr);
	return 0;
}

/* ------------------------------------------------------------------------ */
/* CQ, SRQ                                                                   */

EXPORT struct ibv_cq *ibv_create_cq(struct ibv_context *context, int cqe, void *cq_context,
				    struct ibv_comp_channel *channel, int comp_vector)
{
	struct emu_ctx *c = ctx_of(context);
	struct emu_cq *cq;
	struct shm_cq *s;
	uint64_t bytes;

	(void)comp_vector;
	if (channel) {                  /* completion events are not emulated */
		errno = EOPNOTSUPP;
		return NULL;
	}
	if (cqe < 1 || cqe > EMU_MAX_CQE) {
		errno = EINVAL;
		return NULL;
	}
	cq = calloc(1, sizeof(*cq));
	if (!cq) {
		errno = ENOMEM;
		return NULL;
	}
	bytes = sizeof(struct shm_cq) + (uint64_t)cqe * sizeof(struct shm_cqe);
	pthread_mutex_lock(&c->plock);
	if (c->ncq >= EMU_MAX_CQ || !(cq->off = heap_alloc(c, bytes))) {
		pthread_mutex_unlock(&c->plock);
		free(cq);
		errno = ENOMEM;
		return NULL;
	}
	s = (struct shm_cq *)((char *)c->shm + cq->off);
	shm_lock(c->shm);
	s->size = (uint32_t)cqe;
	s->overflow = 0;
	s->head = s->tail = 0;
	shm_unlock(c->shm);
	cq->ib.context = context;
	cq->ib.cq_context = cq_context;
	cq->ib.handle = c->next_handle++;
	cq->ib.cqe = cqe;
	pthread_mutex_init(&cq->ib.mutex, NULL);
	pthread_cond_init(&cq->ib.cond, NULL);
	cq->next = c->cqs;
	c->cqs = cq;
	c->ncq++;
	pthread_mutex_unlock(&c->plock);
	return &cq->ib;
}

EXPORT int ibv_destroy_cq(struct ibv_cq *ibcq)
{
	struct emu_cq *cq = (struct emu_cq *)ibcq, **pp;
	struct emu_ctx *c = ctx_of(ibcq->context);
	struct shm_cq *s;

	pthread_mutex_lock(&c->plock);
	if (cq->refs) {
		pthread_mutex_unlock(&c->plock);
		return EBUSY;
	}
	s = (struct shm_cq *)((char *)c->shm + cq->off);
	heap_free(c, cq->off, sizeof(struct shm_cq) + (uint64_t)s->size * sizeof(struct shm_cqe));
	for (pp = &c->cqs; *pp; pp = &(*pp)->next)
		if (*pp == cq) {
			*pp = cq->next;
			break;
		}
	c->ncq--;
	pthread_mutex_unlock(&c->plock);
	pthread_mutex_destroy(&cq->ib.mutex);
	pthread_cond_destroy(&cq->ib.cond);
	free(cq);
	return 0;
}

/* Allocates and initializes a receive ring; caller holds plock. */
static uint64_t rq_create(struct emu_ctx *c, uint32_t size, uint32_t max_sge, uint64_t *bytes)
{
	uint64_t stride = sizeof(struct shm_rwqe) + (uint64_t)max_sge * sizeof(struct ibv_sge);
	uint64_t off;
	struct shm_rq *rq;
	*bytes = sizeof(struct shm_rq) + stride * size;
	off = heap_alloc(c, *bytes);
	if (!off)
		return 0;
	rq = (struct shm_rq *)((char *)c->shm + off);
	shm_lock(c->shm);
	rq->size = size;
	rq->max_sge = max_sge;
	rq->stride = stride;
	rq->head = rq->tail = 0;
	shm_unlock(c->shm);
	return off;
}

EXPORT struct ibv_srq *ibv_create_srq(struct ibv_pd *ibpd, struct ibv_srq_init_attr *ia)
{
	struct emu_pd *pd = (struct emu_pd *)ibpd;
	struct emu_ctx *c;
	struct emu_srq *srq;
	uint32_t wr, sge;

	if (!ibpd || !ia) {
		errno = EINVAL;
		return NULL;
	}
	c = ctx_of(ibpd->context);
	wr = ia->attr.max_wr ? ia->attr.max_wr : 1;
	sge = ia->attr.max_sge ? ia->attr.max_sge : 1;
	if (wr > EMU_MAX_WR || sge > EMU_MAX_SGE) {
		errno = EINVAL;
		return NULL;
	}
	srq = calloc(1, sizeof(*srq));
	if (!srq) {
		errno = ENOMEM;
		return NULL;
	}
	pthread_mutex_lock(&c->plock);
	if (c->nsrq >= EMU_MAX_SRQ || !(srq->off = rq_create(c, wr, sge, &srq->bytes))) {
		pthread_mutex_unlock(&c->plock);
		free(srq);
		errno = ENOMEM;
		return NULL;
	}
	srq->pd = pd;
	srq->max_wr = wr;
	srq->max_sge = sge;
	srq->ib.context = ibpd->context;
	srq->ib.srq_context = ia->srq_context;
	srq->ib.pd = ibpd;
	srq->ib.handle = c->next_handle++;
	pthread_mutex_init(&srq->ib.mutex, NULL);
	pthread_cond_init(&srq->ib.cond, NULL);
	pd->refs++;
	srq->next = c->srqs;
	c->srqs = srq;
	c->nsrq++;
	pthread_mutex_unlock(&c->plock);
	/* ibv_create_srq(3): attr returns the actual values. */
	ia->attr.max_wr = wr;
	ia->attr.max_sge = sge;
	return &srq->ib;
}

EXPORT int ibv_destroy_srq(struct ibv_srq *ibsrq)
{
	struct emu_srq *srq = (struct emu_srq *)ibsrq, **pp;
	struct emu_ctx *c = ctx_of(ibsrq->context);

	pthread_mutex_lock(&c->plock);
	if (srq->refs) {
		pthread_mutex_unlock(&c->plock);
		return EBUSY;
	}
	heap_free(c, srq->off, srq->bytes);
	srq->pd->refs--;
	for (pp = &c->srqs; *pp; pp = &(*pp)->next)
		if (*pp == srq) {
			*pp = srq->next;
			break;
		}
	c->nsrq--;
	pthread_mutex_unlock(&c->plock);
	pthread_mutex_destroy(&srq->ib.mutex);
	pthread_cond_destroy(&srq->ib.cond);
	free(srq);
	return 0;
}

/* ------------------------------------------------------------------------ */
/* QP                                                                        */

EXPORT struct ibv_qp *ibv_create_qp(struct ibv_pd *ibpd, struct ibv_qp_init_attr *ia)
{
	struct emu_pd *pd = (struct emu_pd *)ibpd;
	struct emu_ctx *c;
	struct emu_qp *qp;
	struct ibv_qp_cap cap;
	struct shm_qp *s;
	uint32_t slot, i;

	if (!ibpd || !ia || !ia->send_cq || !ia->recv_cq) {
		errno = EINVAL;
		return NULL;
	}
	c = ctx_of(ibpd->context);
	if (ia->qp_type != IBV_QPT_RC) {        /* only RC is emulated */
		errno = EOPNOTSUPP;
		return NULL;
	}
	if (ia->send_cq->context != ibpd->context || ia->recv_cq->context != ibpd->context ||
	    (ia->srq && ia->srq->context != ibpd->context)) {
		errno = EINVAL;
		return NULL;
	}
	cap = ia->cap;
	if (!cap.max_send_wr)
		cap.max_send_wr = 1;
	if (!cap.max_send_sge)
		cap.max_send_sge = 1;
	if (ia->srq) {
		cap.max_recv_wr = 0;
		cap.max_recv_sge = 0;
	} else {
		if (!cap.max_recv_wr)
			cap.max_recv_wr = 1;
		if (!cap.max_recv_sge)
			cap.max_recv_sge = 1;
	}
	if (cap.max_send_wr > EMU_MAX_WR || cap.max_recv_wr > EMU_MAX_WR || cap.max_send_sge > EMU_MAX_SGE ||
	    cap.max_recv_sge > EMU_MAX_SGE || cap.max_inline_data > EMU_MAX_INLINE) {
		errno = EINVAL;
		return NULL;
	}
	qp = calloc(1, sizeof(*qp));
	if (!qp)
		goto nomem;
	qp->cap = cap.max_send_wr;
	qp->ring = calloc(cap.max_send_wr, sizeof(*qp->ring));
	if (!qp->ring)
		goto nomem;
	if (cap.max_inline_data && !(qp->inl = malloc((size_t)cap.max_send_wr * cap.max_inline_data)))
		goto nomem;

	pthread_mutex_lock(&c->plock);
	if (c->nqp >= EMU_QP_SLOTS) {
		pthread_mutex_unlock(&c->plock);
		goto nomem;
	}
	/* Round-robin slots so a QPN is not reused soon after destroy. */
	for (i = 0, slot = c->qp_hint; i < EMU_QP_SLOTS; i++, slot = (slot + 1) & (EMU_QP_SLOTS - 1))
		if (!c->qp_slots[slot])
			break;
	c->qp_hint = (slot + 1) & (EMU_QP_SLOTS - 1);
	if (!ia->srq && !(qp->rq_off = rq_create(c, cap.max_recv_wr, cap.max_recv_sge, &qp->rq_bytes))) {
		pthread_mutex_unlock(&c->plock);
		goto nomem;
	}
	s = &shm_qp_tab(c->shm)[slot];
	shm_lock(c->shm);
	s->gen = s->gen % 255 + 1;      /* 24-bit nonzero QPN: gen(8) | slot(16) */
	s->state = IBV_QPS_RESET;
	s->access = 0;
	s->min_rnr_timer = 0;
	s->dest_qpn = 0;
	s->has_srq = ia->srq != NULL;
	s->recv_cq = ((struct emu_cq *)ia->recv_cq)->off;
	s->rq = ia->srq ? ((struct emu_srq *)ia->srq)->off : qp->rq_off;
	memset(s->dgid, 0, sizeof(s->dgid));
	s->qpn = (s->gen << 16) | slot;
	shm_unlock(c->shm);

	qp->slot = slot;
	qp->gen = (uint32_t)now_ns();  /* TCP mode: distinct from a reused QPN's */
	qp->pd = pd;
	qp->scq = (struct emu_cq *)ia->send_cq;
	qp->rcq = (struct emu_cq *)ia->recv_cq;
	qp->srq = (struct emu_srq *)ia->srq;
	qp->init = *ia;
	qp->init.cap = cap;
	qp->ib.context = ibpd->context;
	qp->ib.qp_context = ia->qp_context;
	qp->ib.pd = ibpd;
	qp->ib.send_cq = ia->send_cq;
	qp->ib.recv_cq = ia->recv_cq;
	qp->ib.srq = ia->srq;
	qp->ib.handle = c->next_handle++;
	qp->ib.qp_num = s->qpn;
	qp->ib.state = IBV_QPS_RESET;
	qp->ib.qp_type = IBV_QPT_RC;
	pthread_mutex_init(&qp->ib.mutex, NULL);
	pthread_cond_init(&qp->ib.cond, NULL);
	pd->refs++;
	qp->scq->refs++;
	qp->rcq->refs++;
	if (qp->srq)
		qp->srq->refs++;
	c->qp_slots[slot] = qp;
	c->nqp++;
	qp->next = c->qps;
	c->qps = qp;
	pthread_mutex_unlock(&c->plock);
	/* ibv_create_qp(3): cap returns the actual values. */
	ia->cap = cap;
	return &qp->ib;
nomem:
	if (qp) {
		free(qp->inl);
		free(qp->ring);
		free(qp);
	}
	errno = ENOMEM;
	return NULL;
}

/* TCP mode, defined below. */
static struct emu_conn *conn_get(struct emu_ctx *c, const uint8_t *gid);
static void conn_put(struct emu_ctx *c, struct emu_conn *k);
static void oq_drop_qp(struct emu_conn *k, uint32_t qpn);
static int tcp_gid_decode(const uint8_t *g, struct sockaddr_in *sa);
static void net_progress(struct emu_ctx *c);

static void pend_remove(struct emu_ctx *c, struct emu_qp *qp)
{
	struct emu_qp **pp;
	if (!qp->pending)
		return;
	for (pp = &c->pend; *pp; pp = &(*pp)->pnext)
		if (*pp == qp) {
			*pp = qp->pnext;
			break;
		}
	qp->pending = 0;
}

static void pend_add(struct emu_ctx *c, struct emu_qp *qp)
{
	if (qp->pending)
		return;
	qp->pnext = c->pend;
	c->pend = qp;
	qp->pending = 1;
}

static void sq_reset(struct emu_qp *qp)
{
	qp->head = qp->count = 0;
	qp->next_try = qp->deadline = 0;
	qp->rnr_tries = 0;
	qp->sent = 0;
	qp->barrier = 0;
	qp->probe = 0;
	if (qp->conn) {
		/* Frames not started are withdrawn; responses to the rest are
		 * recognized as stale by their generation. */
		qp->gen++;
		oq_drop_qp(qp->conn, qp->ib.qp_num);
	}
}

/* TCP mode: retransmit from the head (after a "not ready" NAK or a
 * connection that failed before it was confirmed). */
static void qp_rewind(struct emu_qp *qp)
{
	qp->sent = 0;
	qp->gen++;
	if (qp->conn)
		oq_drop_qp(qp->conn, qp->ib.qp_num);
}

/* Releases the QP's binding to its peer (local mapping or TCP connection). */
static void qp_unbind(struct emu_ctx *c, struct emu_qp *qp)
{
	if (qp->conn) {
		oq_drop_qp(qp->conn, qp->ib.qp_num);
		conn_put(c, qp->conn);
		qp->conn = NULL;
	}
	peer_put(c, qp->peer);
	qp->peer = NULL;
}

/* Completes the SQ's remaining WRs with IBV_WC_WR_FLUSH_ERR. A WR that
 * completes in error always produces a CQE, IBV_SEND_SIGNALED or not. */
static void sq_flush(struct emu_ctx *c, struct emu_qp *qp)
{
	if (!qp->count)
		return;
	shm_lock(c->shm);
	while (qp->count) {
		struct swqe *w = &qp->ring[qp->head];
		struct ibv_wc wc = {.wr_id = w->wr_id, .status = IBV_WC_WR_FLUSH_ERR,
				    .opcode = wc_op_of(w->opcode), .qp_num = qp->ib.qp_num,
				    .src_qp = qp->attr.dest_qp_num};
		cq_push(c->shm, c->size, qp->scq->off, &wc, qp->ib.qp_num, w->seq);
		qp->head = (qp->head + 1) % qp->cap;
		qp->count--;
	}
	shm_unlock(c->shm);
	sq_reset(qp);
}

/* Moves a local QP to Error: flush its RQ (not an SRQ) and its SQ. */
static void qp_enter_err(struct emu_ctx *c, struct emu_qp *qp)
{
	struct shm_qp *s = &shm_qp_tab(c->shm)[qp->slot];
	shm_lock(c->shm);
	shm_qp_to_err(c->shm, c->size, s);
	shm_unlock(c->shm);
	qp->ib.state = IBV_QPS_ERR;
	sq_flush(c, qp);
}

EXPORT int ibv_destroy_qp(struct ibv_qp *ibqp)
{
	struct emu_qp *qp = (struct emu_qp *)ibqp, **pp;
	struct emu_ctx *c = ctx_of(ibqp->context);
	struct shm_qp *s;

	pthread_mutex_lock(&c->plock);
	pend_remove(c, qp);
	s = &shm_qp_tab(c->shm)[qp->slot];
	shm_lock(c->shm);
	s->qpn = 0;             /* peers now see an unknown QPN: retry exceeded */
	s->state = IBV_QPS_RESET;
	shm_unlock(c->shm);
	if (qp->rq_off)
		heap_free(c, qp->rq_off, qp->rq_bytes);
	qp_unbind(c, qp);
	qp->pd->refs--;
	qp->scq->refs--;
	qp->rcq->refs--;
	if (qp->srq)
		qp->srq->refs--;
	c->qp_slots[qp->slot] = NULL;
	c->nqp--;
	for (pp = &c->qps; *pp; pp = &(*pp)->next)
		if (*pp == qp) {
			*pp = qp->next;
			break;
		}
	pthread_mutex_unlock(&c->plock);
	pthread_mutex_destroy(&qp->ib.mutex);
	pthread_cond_destroy(&qp->ib.cond);
	free(qp->inl);
	free(qp->ring);
	free(qp);
	return 0;
}

/* RC rows of the kernel's qp_state_table (drivers/infiniband/core/verbs.c,
 * the table ibv_modify_qp(3) documents): required and optional attr_mask bits. */
static int qp_transition(enum ibv_qp_state cur, enum ibv_qp_state next, int *req, int *opt)
{
	*req = *opt = 0;
	if (next == IBV_QPS_RESET || next == IBV_QPS_ERR)
		return cur <= IBV_QPS_ERR;
	switch (cur) {
	case IBV_QPS_RESET:
		if (next != IBV_QPS_INIT)
			return 0;
		*req = IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
		return 1;
	case IBV_QPS_INIT:
		if (next == IBV_QPS_INIT) {
			*opt = IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
			return 1;
		}
		if (next != IBV_QPS_RTR)
			return 0;
		*req = IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
		       IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
		*opt = IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX;
		return 1;
	case IBV_QPS_RTR:
		if (next != IBV_QPS_RTS)
			return 0;
		*req = IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
		       IBV_QP_MAX_QP_RD_ATOMIC;
		*opt = IBV_QP_CUR_STATE | IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_MIN_RNR_TIMER |
		       IBV_QP_PATH_MIG_STATE;
		return 1;
	case IBV_QPS_RTS:
		if (next != IBV_QPS_RTS)
			return 0;
		*opt = IBV_QP_CUR_STATE | IBV_QP_ACCESS_FLAGS | IBV_QP_ALT_PATH | IBV_QP_PATH_MIG_STATE |
		       IBV_QP_MIN_RNR_TIMER;
		return 1;
	default:                        /* SQD/SQE are not emulated */
		return 0;
	}
}

EXPORT int ibv_modify_qp(struct ibv_qp *ibqp, struct ibv_qp_attr *attr, int mask)
{
	struct emu_qp *qp = (struct emu_qp *)ibqp;
	struct emu_ctx *c = ctx_of(ibqp->context);
	struct shm_qp *s;
	enum ibv_qp_state cur, next;
	int req, opt, rc = EINVAL;
	struct emu_peer *npeer = NULL;
	struct emu_conn *nconn = NULL;

	if (!attr)
		return EINVAL;
	pthread_mutex_lock(&c->plock);
	s = &shm_qp_tab(c->shm)[qp->slot];
	cur = (enum ibv_qp_state)__atomic_load_n(&s->state, __ATOMIC_ACQUIRE);
	if ((mask & IBV_QP_CUR_STATE) && attr->cur_qp_state != cur)
		goto out;
	next = (mask & IBV_QP_STATE) ? attr->qp_state : cur;
	if (!qp_transition(cur, next, &req, &opt))
		goto out;
	if ((mask & req) != req || (mask & ~(req | opt | IBV_QP_STATE | IBV_QP_CUR_STATE)))
		goto out;
	/* Value checks, as the kernel does for a one-port device with one GID/pkey. */
	if ((mask & IBV_QP_PORT) && attr->port_num != 1)
		goto out;
	if ((mask & IBV_QP_PKEY_INDEX) && attr->pkey_index != 0)
		goto out;
	if ((mask & IBV_QP_PATH_MTU) && (attr->path_mtu < IBV_MTU_256 || attr->path_mtu > IBV_MTU_4096))
		goto out;
	if ((mask & IBV_QP_MAX_DEST_RD_ATOMIC) && attr->max_dest_rd_atomic > EMU_MAX_RD_ATOM)
		goto out;
	if ((mask & IBV_QP_MAX_QP_RD_ATOMIC) && attr->max_rd_atomic > EMU_MAX_RD_ATOM)
		goto out;
	if ((mask & IBV_QP_MIN_RNR_TIMER) && attr->min_rnr_timer > 31)
		goto out;
	if ((mask & IBV_QP_TIMEOUT) && attr->timeout > 31)
		goto out;
	if ((mask & IBV_QP_RETRY_CNT) && attr->retry_cnt > 7)
		goto out;
	if ((mask & IBV_QP_RNR_RETRY) && attr->rnr_retry > 7)
		goto out;
	if (mask & IBV_QP_AV) {
		int32_t pid, fd;
		uint32_t nonce;
		struct sockaddr_in sa;
		const uint8_t *dg = attr->ah_attr.grh.dgid.raw;
		/* RoCE: the GRH carries the address; it must be one of ours, of
		 * this context's mode (a local GID in tcp mode or vice versa:
		 * EINVAL). */
		if (!attr->ah_attr.is_global || attr->ah_attr.port_num != 1 ||
		    attr->ah_attr.grh.sgid_index != 0 ||
		    (c->net ? tcp_gid_decode(dg, &sa) : gid_decode(dg, &pid, &fd, &nonce)))
			goto out;
	}
	/* TCP mode: take the connection (or the loopback) before applying
	 * anything, so that a failure leaves the QP as it was. */
	if (c->net && (mask & IBV_QP_AV) && next == IBV_QPS_RTR) {
		const uint8_t *dg = attr->ah_attr.grh.dgid.raw;
		if (memcmp(dg, c->gid.raw, 16) == 0)
			npeer = peer_get(c, dg);
		else
			nconn = conn_get(c, dg);
		if (!npeer && !nconn) {
			rc = ENOMEM;
			goto out;
		}
	}

	/* Apply. */
	if (mask & IBV_QP_ACCESS_FLAGS)
		qp->attr.qp_access_flags = attr->qp_access_flags;
	if (mask & IBV_QP_PKEY_INDEX)
		qp->attr.pkey_index = attr->pkey_index;
	if (mask & IBV_QP_PORT)
		qp->attr.port_num = attr->port_num;
	if (mask & IBV_QP_AV)
		qp->attr.ah_attr = attr->ah_attr;
	if (mask & IBV_QP_ALT_PATH) {
		qp->attr.alt_ah_attr = attr->alt_ah_attr;
		qp->attr.alt_pkey_index = attr->alt_pkey_index;
		qp->attr.alt_port_num = attr->alt_port_num;
		qp->attr.alt_timeout = attr->alt_timeout;
	}
	if (mask & IBV_QP_PATH_MTU)
		qp->attr.path_mtu = attr->path_mtu;
	if (mask & IBV_QP_DEST_QPN)
		qp->attr.dest_qp_num = attr->dest_qp_num;
	if (mask & IBV_QP_RQ_PSN)
		qp->attr.rq_psn = attr->rq_psn;
	if (mask & IBV_QP_SQ_PSN)
		qp->attr.sq_psn = attr->sq_psn;
	if (mask & IBV_QP_MAX_DEST_RD_ATOMIC)
		qp->attr.max_dest_rd_atomic = attr->max_dest_rd_atomic;
	if (mask & IBV_QP_MAX_QP_RD_ATOMIC)
		qp->attr.max_rd_atomic = attr->max_rd_atomic;
	if (mask & IBV_QP_MIN_RNR_TIMER)
		qp->attr.min_rnr_timer = attr->min_rnr_timer;
	if (mask & IBV_QP_TIMEOUT)
		qp->attr.timeout = attr->timeout;
	if (mask & IBV_QP_RETRY_CNT)
		qp->attr.retry_cnt = attr->retry_cnt;
	if (mask & IBV_QP_RNR_RETRY)
		qp->attr.rnr_retry = attr->rnr_retry;
	if (mask & IBV_QP_PATH_MIG_STATE)
		qp->attr.path_mig_state = attr->path_mig_state;

	if (next == IBV_QPS_RESET) {
		/* Back to RESET: queues emptied without completions (as the kernel does). */
		struct shm_rq *rq = qp->rq_off ? rq_get(c->shm, c->size, qp->rq_off) : NULL;
		pend_remove(c, qp);
		sq_reset(qp);
		qp->retired = qp->posted;
		qp_unbind(c, qp);
		memset(&qp->attr, 0, sizeof(qp->attr));
		shm_lock(c->shm);
		s->state = IBV_QPS_RESET;
		s->access = 0;
		s->dest_qpn = 0;
		memset(s->dgid, 0, sizeof(s->dgid));
		if (rq)
			rq->head = rq->tail;
		shm_unlock(c->shm);
	} else if (next == IBV_QPS_ERR) {
		qp_enter_err(c, qp);
	} else {
		if ((mask & IBV_QP_AV) && next == IBV_QPS_RTR) {
			if (c->net) {
				/* Connect now (non-blocking); accepted by the peer
				 * inside its own verbs calls. */
				qp_unbind(c, qp);
				qp->peer = npeer;
				qp->conn = nconn;
				npeer = NULL;
				nconn = NULL;
			} else {
				/* Map the peer now if it is there; else at the first send. */
				peer_put(c, qp->peer);
				qp->peer = peer_get(c, attr->ah_attr.grh.dgid.raw);
			}
		}
		shm_lock(c->shm);
		s->access = qp->attr.qp_access_flags;
		s->min_rnr_timer = qp->attr.min_rnr_timer;
		s->dest_qpn = qp->attr.dest_qp_num;
		memcpy(s->dgid, qp->attr.ah_attr.grh.dgid.raw, 16);
		__atomic_store_n(&s->state, next, __ATOMIC_RELEASE);
		shm_unlock(c->shm);
	}
	qp->attr.qp_state = next;
	qp->ib.state = next;
	rc = 0;
	if (c->net) {
		net_progress(c);        /* accept / finish connecting, if ready */
		called(c);
	}
out:
	if (npeer)
		peer_put(c, npeer);
	if (nconn)
		conn_put(c, nconn);
	pthread_mutex_unlock(&c->plock);
	return rc;
}

EXPORT int ibv_query_qp(struct ibv_qp *ibqp, struct ibv_qp_attr *attr, int mask, struct ibv_qp_init_attr *init)
{
	struct emu_qp *qp = (struct emu_qp *)ibqp;
	struct emu_ctx *c = ctx_of(ibqp->context);
	(void)mask;                     /* like real providers: fill everything */
	if (!attr || !init)
		return EINVAL;
	pthread_mutex_lock(&c->plock);
	*attr = qp->attr;
	attr->qp_state = (enum ibv_qp_state)__atomic_load_n(&shm_qp_tab(c->shm)[qp->slot].state,
							    __ATOMIC_ACQUIRE);
	attr->cur_qp_state = attr->qp_state;
	attr->cap = qp->init.cap;
	*init = qp->init;
	pthread_mutex_unlock(&c->plock);
	return 0;
}

/* ------------------------------------------------------------------------ */
/* Data path: executing send WRs                                             */

enum { X_DONE, X_RNR, X_NOTREADY };

/* RNR NAK timer encoding (IBA vol. 1, 9.7.5.2.8; ibv_modify_qp(3)
 * min_rnr_timer): code -> units of 10 us; 0 means 655.36 ms. */
static const uint32_t rnr_timer_10us[32] = {
	65536, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192,
	256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096, 6144, 8192, 12288, 16384, 24576, 32768, 49152};

static uint64_t rnr_delay_ns(uint32_t t)
{
	uint64_t ns = (uint64_t)rnr_timer_10us[t & 31] * 10000;
	/* Capped (an emulator need not wait 655 ms; the agent or the
	 * program's next verbs call retries). */
	return ns > 20000000ull ? 20000000ull : ns;
}

/* Transport retry window: local ACK timeout 4.096 us * 2^timeout
 * (ibv_modify_qp(3) "timeout") times retry_cnt + 1 attempts, clamped to
 * [300 ms, 3 s]; timeout 0 means "infinite" and gets the cap. */
static uint64_t retry_window_ns(struct emu_qp *qp)
{
	uint64_t ns = qp->attr.timeout ? (4096ull << qp->attr.timeout) * (qp->attr.retry_cnt + 1u)
				       : 3000000000ull;
	if (ns < 300000000ull)
		ns = 300000000ull;
	if (ns > 3000000000ull)
		ns = 3000000000ull;
	return ns;
}

/* Validates a local SGE list against this context's MRs (lkey, range,
 * access) and builds the iovec. Caller holds plock (reg/dereg take it). */
static int local_iov(struct emu_ctx *c, const struct ibv_sge *sge, uint32_t n, unsigned need,
		     struct iovec *iov, int *niov)
{
	*niov = 0;
	for (uint32_t i = 0; i < n; i++) {
		struct shm_mr *m;
		if (sge[i].length == 0)
			continue;
		m = shm_mr_find(c->shm, sge[i].lkey);
		if (!m || (m->access & need) != need || sge[i].addr < m->va ||
		    sge[i].addr - m->va > m->len || sge[i].length > m->len - (sge[i].addr - m->va))
			return -1;
		iov[*niov].iov_base = (void *)(uintptr_t)sge[i].addr;
		iov[*niov].iov_len = sge[i].length;
		(*niov)++;
	}
	return 0;
}

/* rkey check at the responder: the MR and the QP (qp_access_flags,
 * ibv_modify_qp(3)) must both allow the access and the range must fit.
 * A zero-length RDMA operation carries no valid R_Key and is not checked
 * (IBA vol. 1, ch. 9: DMA length 0), as real HCAs do. */
static int remote_range(struct shm_hdr *h, struct shm_qp *rq, uint32_t rkey, uint64_t raddr, uint64_t len,
			unsigned need, struct iovec *iov)
{
	struct shm_mr *m;
	iov->iov_base = NULL;
	iov->iov_len = 0;
	if (len == 0)
		return 0;
	m = shm_mr_find(h, rkey);
	if (!m || !(m->access & need) || !(rq->access & need) || raddr < m->iova || raddr - m->iova > m->len ||
	    len > m->len - (raddr - m->iova))
		return -1;
	iov->iov_base = (void *)(uintptr_t)(m->va + (raddr - m->iova));
	iov->iov_len = len;
	return 0;
}

/* process_vm_{read,write}v move at most MAX_RW_COUNT (~2 GiB) per call and
 * stop early on a fault: continue after partial progress. Returns 0 or an
 * errno (ESRCH: the process is gone; EFAULT: bad address on either side). */
static int pvm_copy(pid_t pid, int rd, struct iovec *l, unsigned long nl, struct iovec *r, unsigned long nr,
		    uint64_t len)
{
	while (len) {
		ssize_t n = rd ? process_vm_readv(pid, l, nl, r, nr, 0) : process_vm_writev(pid, l, nl, r, nr, 0);
		if (n <= 0)
			return n < 0 ? errno : EFAULT;
		len -= (uint64_t)n;
		for (uint64_t k = (uint64_t)n; k; ) {    /* advance the local side */
			uint64_t step = k < l->iov_len ? k : l->iov_len;
			l->iov_base = (char *)l->iov_base + step;
			l->iov_len -= step;
			k -= step;
			if (!l->iov_len && nl > 1) {
				l++;
				nl--;
			}
		}
		for (uint64_t k = (uint64_t)n; k; ) {    /* and the remote side */
			uint64_t step = k < r->iov_len ? k : r->iov_len;
			r->iov_base = (char *)r->iov_base + step;
			r->iov_len -= step;
			k -= step;
			if (!r->iov_len && nr > 1) {
				r++;
				nr--;
			}
		}
	}
	return 0;
}

static void trace_wr(struct emu_ctx *c, struct emu_qp *qp, struct swqe *w, const char *what)
{
	if (c->trace)
		fprintf(stderr, "ibemu[%d]: qp %#x -> %#x %s wr_id %#llx len %llu: %s\n", (int)getpid(),
			qp->ib.qp_num, qp->attr.dest_qp_num, wr_op_name(w->opcode), (unsigned long long)w->wr_id,
			(unsigned long long)w->len, what);
}

/* Executes the WR at the head of qp's SQ. Returns X_DONE with *st set, or
 * X_RNR (with the responder's RNR timer) / X_NOTREADY when it must be
 * retried later (it stays queued). */
static int execute(struct emu_ctx *c, struct emu_qp *qp, struct swqe *w, enum ibv_wc_status *st,
		   uint32_t *rnr_timer)
{
	struct iovec liov[EMU_MAX_SGE], riov[EMU_MAX_SGE];
	int nl = 0, nr = 0, rc = X_DONE;
	struct emu_peer *p;
	struct shm_hdr *h;
	struct shm_qp *rq;
	struct shm_rq *ring = NULL;
	struct shm_rwqe *rw = NULL;
	int err;
	int is_send = w->opcode == IBV_WR_SEND || w->opcode == IBV_WR_SEND_WITH_IMM;
	int takes_recv = is_send || w->opcode == IBV_WR_RDMA_WRITE_WITH_IMM;

	*st = IBV_WC_SUCCESS;
	if (w->fault == FAULT_RETRY_EXC) {
		*st = IBV_WC_RETRY_EXC_ERR;
		return X_DONE;
	}
	if (w->fault == FAULT_REM_ACCESS) {
		*st = IBV_WC_REM_ACCESS_ERR;
		return X_DONE;
	}
	if (w->len > EMU_MAX_MSG) {
		*st = IBV_WC_LOC_LEN_ERR;
		return X_DONE;
	}
	if (w->is_inline) {
		liov[0].iov_base = qp->inl + (size_t)(w - qp->ring) * qp->init.cap.max_inline_data;
		liov[0].iov_len = w->len;
		nl = w->len ? 1 : 0;
	} else if (local_iov(c, w->sge, w->num_sge,
			     w->opcode == IBV_WR_RDMA_READ ? IBV_ACCESS_LOCAL_WRITE : 0, liov, &nl)) {
		*st = IBV_WC_LOC_PROT_ERR;
		return X_DONE;
	}

	if (!qp->peer)
		qp->peer = peer_get(c, qp->attr.ah_attr.grh.dgid.raw);
	p = qp->peer;
	if (!p || !peer_alive(p))
		return X_NOTREADY;
	h = p->shm;
	if (shm_lock(h))
		return X_NOTREADY;
	/* An RC responder accepts packets only from its connected QP; anything
	 * else is dropped, which the requester sees as a transport timeout. */
	rq = shm_qp_find(h, qp->attr.dest_qp_num);
	if (!rq || (rq->state != IBV_QPS_RTR && rq->state != IBV_QPS_RTS) || rq->dest_qpn != qp->ib.qp_num ||
	    memcmp(rq->dgid, c->gid.raw, 16) != 0) {
		rc = X_NOTREADY;
		goto out;
	}
	if (takes_recv) {
		ring = rq_get(h, p->size, rq->rq);
		rw = ring ? rq_head(ring) : NULL;
		if (!rw) {              /* no receive WQE: RNR NAK (IBA 9.7.5.2.8) */
			*rnr_timer = rq->min_rnr_timer;
			rc = X_RNR;
			goto out;
		}
		if (rw->num_sge > ring->max_sge)
			rw->num_sge = ring->max_sge;
	}
	if (is_send) {
		uint64_t room = 0;
		struct ibv_wc wc = {.wr_id = rw->wr_id, .opcode = IBV_WC_RECV, .qp_num = rq->qpn,
				    .src_qp = qp->ib.qp_num};
		for (uint32_t i = 0; i < rw->num_sge; i++)
			room += rw->sge[i].length;
		if (w->len > room) {
			/* Message longer than the receive WQE: the responder NAKs
			 * "invalid request" (sender REM_INV_REQ_ERR) and completes
			 * the WQE with LOC_LEN_ERR; both QPs go to Error. */
			wc.status = IBV_WC_LOC_LEN_ERR;
			ring->head++;
			cq_push(h, p->size, rq->recv_cq, &wc, 0, 0);
			shm_qp_to_err(h, p->size, rq);
			*st = IBV_WC_REM_INV_REQ_ERR;
			goto out;
		}
		/* The receive WQE's lkeys are checked in the responder's MR table. */
		for (uint32_t i = 0; i < rw->num_sge; i++) {
			struct shm_mr *m = shm_mr_find(h, rw->sge[i].lkey);
			const struct ibv_sge *g = &rw->sge[i];
			if (g->length == 0)
				continue;
			if (!m || !(m->access & IBV_ACCESS_LOCAL_WRITE) || g->addr < m->va ||
			    g->addr - m->va > m->len || g->length > m->len - (g->addr - m->va)) {
				*st = IBV_WC_REM_OP_ERR;
				break;
			}
			riov[nr].iov_base = (void *)(uintptr_t)g->addr;
			riov[nr].iov_len = g->length;
			nr++;
		}
		if (*st) {
			/* Responder protection error: receiver LOC_PROT_ERR, sender REM_OP_ERR. */
			wc.status = IBV_WC_LOC_PROT_ERR;
			ring->head++;
			cq_push(h, p->size, rq->recv_cq, &wc, 0, 0);
			shm_qp_to_err(h, p->size, rq);
			goto out;
		}
	} else {
		unsigned need = w->opcode == IBV_WR_RDMA_READ ? IBV_ACCESS_REMOTE_READ : IBV_ACCESS_REMOTE_WRITE;
		if (remote_range(h, rq, w->rkey, w->raddr, w->len, need, &riov[0])) {
			/* Remote access error NAK; the responder QP goes to Error as
			 * well (IBV_EVENT_QP_ACCESS_ERR on real HCAs). */
			shm_qp_to_err(h, p->size, rq);
			*st = IBV_WC_REM_ACCESS_ERR;
			goto out;
		}
		nr = w->len ? 1 : 0;
	}

	/* Move the data while holding the responder's lock, so that its CQE
	 * (appended below, under the same lock) can never precede the data. */
	/* (Loopback too: process_vm_* on our own pid is a checked memcpy.) */
	if (w->len && (err = pvm_copy(p->pid, w->opcode == IBV_WR_RDMA_READ, liov, (unsigned long)nl, riov,
				      (unsigned long)nr, w->len))) {
		if (err == ESRCH) {             /* died under us: like no ACK */
			rc = X_NOTREADY;
			goto out;
		}
		/* Unmapped memory behind a valid key: a protection error. */
		*st = w->opcode == IBV_WR_RDMA_READ || !is_send ? IBV_WC_REM_ACCESS_ERR : IBV_WC_REM_OP_ERR;
		if (is_send) {
			struct ibv_wc wc = {.wr_id = rw->wr_id, .status = IBV_WC_LOC_PROT_ERR, .opcode = IBV_WC_RECV,
					    .qp_num = rq->qpn, .src_qp = qp->ib.qp_num};
			ring->head++;
			cq_push(h, p->size, rq->recv_cq, &wc, 0, 0);
		}
		shm_qp_to_err(h, p->size, rq);
		goto out;
	}
	if (takes_recv) {
		struct ibv_wc wc = {.wr_id = rw->wr_id, .status = IBV_WC_SUCCESS,
				    .opcode = is_send ? IBV_WC_RECV : IBV_WC_RECV_RDMA_WITH_IMM,
				    .byte_len = (uint32_t)w->len, .qp_num = rq->qpn, .src_qp = qp->ib.qp_num};
		if (w->opcode != IBV_WR_SEND) {
			wc.wc_flags = IBV_WC_WITH_IMM;
			wc.imm_data = w->imm;   /* network order, copied untouched */
		}
		ring->head++;
		cq_push(h, p->size, rq->recv_cq, &wc, 0, 0);
	}
out:
	shm_unlock(h);
	return rc;
}

/* Completes the WR at the head of the SQ with st (a CQE if signaled or an
 * error); an error moves the QP to Error and flushes the rest. */
static void sq_complete_head(struct emu_ctx *c, struct emu_qp *qp, enum ibv_wc_status st)
{
	struct swqe *w = &qp->ring[qp->head];
	trace_wr(c, qp, w, ibv_wc_status_str(st));
	c->moved++;
	if (st != IBV_WC_SUCCESS || w->signaled) {
		struct ibv_wc wc = {.wr_id = w->wr_id, .status = st, .opcode = wc_op_of(w->opcode),
				    .byte_len = (uint32_t)w->len, .qp_num = qp->ib.qp_num,
				    .src_qp = qp->attr.dest_qp_num};
		shm_lock(c->shm);
		cq_push(c->shm, c->size, qp->scq->off, &wc, qp->ib.qp_num, w->seq);
		shm_unlock(c->shm);
	}
	qp->head = (qp->head + 1) % qp->cap;
	qp->count--;
	if (qp->sent)
		qp->sent--;
	qp->next_try = qp->deadline = 0;
	qp->rnr_tries = 0;
	qp->probe = 0;
	if (st != IBV_WC_SUCCESS) {
		/* A completion error moves the QP to Error; the rest is flushed. */
		qp_enter_err(c, qp);
		return;
	}
	if (qp->barrier && !qp->sent && (!qp->count || qp->ring[qp->head].seq >= qp->barrier_seq)) {
		qp->barrier = 0;        /* qp_err fault: what was in flight is done */
		qp_enter_err(c, qp);
	}
}

static void qp_net_progress(struct emu_ctx *c, struct emu_qp *qp);

/* Runs qp's queued WRs in order until one has to wait. Caller holds plock. */
static void qp_progress(struct emu_ctx *c, struct emu_qp *qp)
{
	struct shm_qp *s = &shm_qp_tab(c->shm)[qp->slot];
	uint64_t now = 0;

	/* A peer may have moved us to Error (responder-side error). */
	if (__atomic_load_n(&s->state, __ATOMIC_ACQUIRE) == IBV_QPS_ERR) {
		qp->ib.state = IBV_QPS_ERR;
		sq_flush(c, qp);
	}
	if (qp->conn) {
		qp_net_progress(c, qp);
		return;
	}
	while (qp->count) {
		struct swqe *w = &qp->ring[qp->head];
		enum ibv_wc_status st;
		uint32_t rnr_timer = 0;
		int r;

		if (qp->next_try) {
			if (!now)
				now = now_ns();
			if (now < qp->next_try)
				return;
		}
		r = execute(c, qp, w, &st, &rnr_timer);
		if (r == X_RNR || r == X_NOTREADY) {
			now = now_ns();
			if (r == X_RNR) {
				qp->deadline = 0;
				/* rnr_retry 7 = retry forever (IBA 9.7.5.2.8). */
				if (qp->attr.rnr_retry != 7 && qp->rnr_tries >= qp->attr.rnr_retry) {
					st = IBV_WC_RNR_RETRY_EXC_ERR;
					goto done;
				}
				qp->rnr_tries++;
				qp->next_try = now + rnr_delay_ns(rnr_timer);
				trace_wr(c, qp, w, "RNR, will retry");
				return;
			}
			if (!qp->deadline)
				qp->deadline = now + retry_window_ns(qp);
			if (now >= qp->deadline) {
				st = IBV_WC_RETRY_EXC_ERR;
				goto done;
			}
			qp->next_try = now + 1000000;   /* 1 ms between transport retries */
			return;
		}
done:
		sq_complete_head(c, qp, st);
		if (st != IBV_WC_SUCCESS)
			return;
	}
}

static void progress(struct emu_ctx *c)
{
	struct emu_qp **pp = &c->pend;
	while (*pp) {
		struct emu_qp *qp = *pp;
		qp_progress(c, qp);
		if (!qp->count) {
			*pp = qp->pnext;
			qp->pending = 0;
		} else
			pp = &qp->pnext;
	}
}

/* ------------------------------------------------------------------------ */
/* TCP mode (IBEMU_NET=tcp)                                                  */
/*
 * Connections. Each context listens on one non-blocking TCP socket. A QP's
 * RTR to a remote GID takes (or shares) this context's OUTGOING connection
 * to that context: our requests go out on it and the peer's responses (ACK,
 * NAK, RDMA READ data) come back on it. The peer's requests to us arrive on
 * the connection it opened to us (INCOMING here), accepted inside any of
 * our verbs calls. So a pair of contexts uses two connections, one per
 * direction. Nobody ever waits for the other side to call accept(): each
 * side drives the connection its own requests need (the kernel completes
 * the TCP handshake from the listen backlog), and a responder that stops
 * reading its request stream (RNR) cannot hold up the ACKs for its own
 * requests, which come back on the other connection.
 *
 * Frames: struct wire, then len payload bytes (HELLO body, SEND/WRITE data,
 * READ response data). Both sides start with a HELLO naming both GIDs, so a
 * stale GID (a port reused by another context) is refused. The requester
 * sends each WR as a REQ, tagged with its QPN, the WR's sequence number and
 * the QP's generation; the responder processes them in stream order and
 * answers each with ACK, NAK (an error status), NOTREADY (no such QP, or not
 * connected to the requester: the requester retries until its retry window
 * ends) or RDATA. After a NAK or NOTREADY the responder drops the rest of
 * that (QP, generation): the requester rewinds and resends with the next
 * generation, so nothing executes out of order. A SEND or WRITE_WITH_IMM
 * without a receive WQE is RNR: the responder stops reading that stream and
 * retries on its next calls (after the QP's min_rnr_timer; the requester's
 * rnr_retry travels in the frame, 7 = forever).
 *
 * Requester completions are written when the ACK/NAK arrives, in order per
 * QP. A confirmed connection that breaks (EOF, ECONNRESET) fails every QP
 * that has WRs outstanding on it (RETRY_EXC_ERR, then flush); a connection
 * that cannot be made (refused, unreachable) or is refused at HELLO is
 * retried every 20 ms until the QP's retry window (timeout/retry_cnt, 0.3-3 s)
 * ends. Payloads are written straight from the sender's memory (non-inline
 * data is read when the socket takes it) and read straight into the
 * receiver's, or copied from the input buffer; nothing blocks.
 */

#define NET_MAGIC       0x3150435455424945ull   /* "EIBUTCP1" */
#define NET_VERSION     1u
#define NET_IBUF        (64u << 10)     /* input buffer per connection */
#define NET_DIRECT      (16u << 10)     /* larger remainders: readv into place */
#define NET_BUDGET      (16ull << 20)   /* bytes read per connection per call */
#define NET_RECONNECT   20000000ull     /* 20 ms between connection attempts */
#define NET_NOTREADY    1000000ull      /* 1 ms before resending after NOTREADY */
#define NET_MAXIOV      64

enum { W_HELLO = 1, W_REQ, W_ACK, W_NAK, W_NOTREADY, W_RDATA };

struct wire {
	uint8_t type;
	uint8_t op;             /* REQ: IBV_WR_*; NAK: the requester's wc status */
	uint8_t rnr_retry;      /* REQ: the requester's rnr_retry */
	uint8_t pad;
	uint32_t sqpn;          /* requester QP (responses: the QP they answer) */
	uint32_t dqpn;          /* responder QP */
	uint32_t gen;           /* requester QP's generation */
	uint64_t seq;           /* requester WR sequence number */
	uint64_t len;           /* REQ: message length; RDATA/HELLO: payload */
	uint64_t raddr;
	uint32_t rkey;
	uint32_t imm;           /* network order, as posted */
};

struct wire_hello {
	uint64_t magic;
	uint32_t version, pad;
	uint8_t from[16], to[16];
};

/* A frame in a connection's output queue. iov[0] points into buf (header
 * and owned bytes); the others into the application's registered memory. */
struct ofr {
	struct ofr *next;
	uint32_t qpn;           /* a request of this local QP; 0: anything else */
	uint32_t started;       /* bytes of it are on the wire: cannot withdraw */
	uint64_t seq;
	uint64_t zleft;         /* after EFAULT: send this many zeros instead */
	int niov, cur;
	struct iovec iov[1 + EMU_MAX_SGE];
	unsigned char buf[];
};

enum { C_IDLE, C_CONNECTING, C_HELLO, C_UP, C_DEAD };
enum { R_HDR, R_DATA, R_SKIP, R_HELD };
enum { D_NONE, D_ACK, D_RECV, D_RDATA };

struct emu_conn {
	struct emu_conn *next;
	int fd;
	int out;                /* 1: ours (requests out, responses in) */
	int state;
	int refs;               /* out: QPs bound to it */
	int want;               /* out, C_IDLE: a QP waits for it */
	int readable, more, connready;
	int broken;             /* EPOLLERR/EPOLLHUP while a request is held */
	uint32_t wev;           /* the epoll events registered for fd */
	uint8_t gid[16];        /* the peer context */
	struct sockaddr_in sa;
	uint64_t retry_at;
	struct ofr *oq, *oq_last;
	/* input */
	unsigned char *ib;
	uint32_t ib_off, ib_len;
	int rstate;             /* R_*: what the next input bytes are */
	int rdone;              /* D_*: what to do when the payload is in */
	int rfault;             /* storing the payload faulted */
	struct wire h;          /* the frame being handled */
	struct iovec riov[EMU_MAX_SGE];
	int rniov, rcur;
	uint64_t rleft;         /* payload bytes still to come */
	uint64_t rwr_id;        /* receive WQE taken for it */
	uint32_t rqpn;          /* our QP it is for */
	uint32_t held_tries;    /* R_HELD: RNR retries done */
	uint64_t held_next;     /* R_HELD: next counted retry */
	/* responder: per requester QP, the generation whose rest is dropped */
	struct { uint32_t qpn, gen; } *dead;
	uint32_t ndead, capdead;
};

static const char g_zero[65536];

static int tcp_gid_decode(const uint8_t *g, struct sockaddr_in *sa)
{
	if (memcmp(g, gid_magic_tcp, 4) != 0)
		return -1;
	memset(sa, 0, sizeof(*sa));
	sa->sin_family = AF_INET;
	memcpy(&sa->sin_addr, g + 4, 4);
	memcpy(&sa->sin_port, g + 8, 2);
	return sa->sin_port != 0 && sa->sin_addr.s_addr != 0 ? 0 : -1;
}

static const char *gid_str(const uint8_t *g, char *buf, size_t n)
{
	struct sockaddr_in sa = {.sin_port = 0};
	char a[INET_ADDRSTRLEN] = "?";
	if (tcp_gid_decode(g, &sa) == 0)
		inet_ntop(AF_INET, &sa.sin_addr, a, sizeof(a));
	snprintf(buf, n, "%s:%u", a, (unsigned)ntohs(sa.sin_port));
	return buf;
}

static void net_trace(struct emu_ctx *c, struct emu_conn *k, const char *what)
{
	char g[64];
	if (c->trace)
		fprintf(stderr, "ibemu[%d]: tcp %s %s: %s\n", (int)getpid(), k->out ? "to" : "from",
			gid_str(k->gid, g, sizeof(g)), what);
}

/* Opens the listening socket; the GID names it. */
static int net_open(struct emu_ctx *c)
{
	struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
	socklen_t l = sizeof(c->laddr);
	uint32_t nonce = htobe32(c->nonce);
	char a[INET_ADDRSTRLEN];

	c->laddr.sin_family = AF_INET;
	c->laddr.sin_port = 0;
	c->lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (c->lfd < 0)
		return -1;
	if (bind(c->lfd, (struct sockaddr *)&c->laddr, sizeof(c->laddr)) || listen(c->lfd, SOMAXCONN) ||
	    getsockname(c->lfd, (struct sockaddr *)&c->laddr, &l)) {
		int e = errno;
		inet_ntop(AF_INET, &c->laddr.sin_addr, a, sizeof(a));
		fprintf(stderr, "ibemu: IBEMU_NET=tcp: cannot listen on %s: %s\n", a, strerror(e));
		errno = e;
		return -1;
	}
	c->epfd = epoll_create1(EPOLL_CLOEXEC);
	if (c->epfd < 0 || epoll_ctl(c->epfd, EPOLL_CTL_ADD, c->lfd, &ev))
		return -1;
	memcpy(c->gid.raw, gid_magic_tcp, 4);
	memcpy(c->gid.raw + 4, &c->laddr.sin_addr, 4);
	memcpy(c->gid.raw + 8, &c->laddr.sin_port, 2);
	c->gid.raw[10] = c->gid.raw[11] = 0;
	memcpy(c->gid.raw + 12, &nonce, 4);
	return 0;
}

/* --- output queue -------------------------------------------------------- */

static struct ofr *ofr_new(size_t body)
{
	struct ofr *f = malloc(sizeof(*f) + sizeof(struct wire) + body);
	if (!f)
		return NULL;
	memset(f, 0, sizeof(*f) + sizeof(struct wire));
	f->iov[0].iov_base = f->buf;
	f->iov[0].iov_len = sizeof(struct wire) + body;
	f->niov = 1;
	return f;
}

static void oq_push(struct emu_conn *k, struct ofr *f)
{
	f->next = NULL;
	if (k->oq_last)
		k->oq_last->next = f;
	else
		k->oq = f;
	k->oq_last = f;
}

static void oq_free(struct emu_conn *k)
{
	while (k->oq) {
		struct ofr *f = k->oq;
		k->oq = f->next;
		free(f);
	}
	k->oq_last = NULL;
}

static void oq_drop_qp(struct emu_conn *k, uint32_t qpn)
{
	struct ofr **pp = &k->oq, *f;
	k->oq_last = NULL;
	while ((f = *pp)) {
		if (f->qpn == qpn && !f->started) {
			*pp = f->next;
			free(f);
			continue;
		}
		k->oq_last = f;
		pp = &f->next;
	}
}

/* Queues a frame without payload (ACK, NAK, NOTREADY) answering h. */
static void send_ctl(struct emu_conn *k, int type, int op, const struct wire *h)
{
	struct ofr *f = ofr_new(0);
	struct wire *w;
	if (!f)
		return;                 /* the requester waits, as for a lost ACK */
	w = (struct wire *)f->buf;
	w->type = (uint8_t)type;
	w->op = (uint8_t)op;
	w->sqpn = h->sqpn;
	w->dqpn = h->dqpn;
	w->gen = h->gen;
	w->seq = h->seq;
	oq_push(k, f);
}

static void send_hello(struct emu_ctx *c, struct emu_conn *k)
{
	struct ofr *f = ofr_new(sizeof(struct wire_hello));
	struct wire *w;
	struct wire_hello hl = {.magic = NET_MAGIC, .version = NET_VERSION};
	if (!f)
		return;
	w = (struct wire *)f->buf;
	w->type = W_HELLO;
	w->len = sizeof(hl);
	memcpy(hl.from, c->gid.raw, 16);
	memcpy(hl.to, k->gid, 16);
	memcpy(f->buf + sizeof(*w), &hl, sizeof(hl));
	oq_push(k, f);
}

static struct swqe *wr_by_seq(struct emu_ctx *c, uint32_t qpn, uint64_t seq)
{
	struct emu_qp *qp = c->qp_slots[qpn & (EMU_QP_SLOTS - 1)];
	uint64_t j;
	if (!qp || qp->ib.qp_num != qpn || !qp->count)
		return NULL;
	j = seq - qp->ring[qp->head].seq;
	if (j >= qp->count)
		return NULL;
	return &qp->ring[(qp->head + j) % qp->cap];
}

/* Writes what the socket takes, several frames per call. 0: done or would
 * block; -1: the connection is broken. */
static int conn_output(struct emu_ctx *c, struct emu_conn *k)
{
	while (k->oq) {
		struct iovec v[NET_MAXIOV];
		struct msghdr m;
		struct ofr *f;
		int nv = 0;
		ssize_t n;
		size_t left;

		for (f = k->oq; f && nv < NET_MAXIOV; f = f->next) {
			if (f->zleft) {
				v[nv].iov_base = (void *)g_zero;
				v[nv++].iov_len = f->zleft < sizeof(g_zero) ? f->zleft : sizeof(g_zero);
				break;
			}
			for (int i = f->cur; i < f->niov && nv < NET_MAXIOV; i++)
				if (f->iov[i].iov_len)
					v[nv++] = f->iov[i];
		}
		memset(&m, 0, sizeof(m));
		m.msg_iov = v;
		m.msg_iovlen = (size_t)nv;
		n = nv ? sendmsg(k->fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT) : 0;
		if (n < 0) {
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				return 0;
			if (errno == EINTR)
				continue;
			if (errno == EFAULT) {
				/* The application's memory under the head frame is
				 * gone: keep the stream framed with zeros and fail
				 * that WR locally when it is answered. */
				struct swqe *w;
				f = k->oq;
				for (int i = f->cur; i < f->niov; i++)
					f->zleft += f->iov[i].iov_len;
				f->niov = f->cur;
				f->started = 1;
				if (f->qpn && (w = wr_by_seq(c, f->qpn, f->seq)) && !w->lerr)
					w->lerr = IBV_WC_LOC_PROT_ERR;
				if (!f->zleft)
					return -1;
				continue;
			}
			return -1;
		}
		left = (size_t)n;
		c->moved += n > 0;
		while ((f = k->oq)) {
			if (f->zleft) {
				size_t s = left < f->zleft ? left : (size_t)f->zleft;
				f->zleft -= s;
				left -= s;
				if (f->zleft)
					break;
			} else {
				while (f->cur < f->niov) {
					struct iovec *io = &f->iov[f->cur];
					size_t s = left < io->iov_len ? left : io->iov_len;
					io->iov_base = (char *)io->iov_base + s;
					io->iov_len -= s;
					left -= s;
					if (s)
						f->started = 1;
					if (io->iov_len)
						break;
					f->cur++;
				}
				if (f->cur < f->niov)
					break;
			}
			k->oq = f->next;
			if (!k->oq)
				k->oq_last = NULL;
			free(f);
		}
		if (n == 0)
			return 0;
	}
	return 0;
}

/* --- connections --------------------------------------------------------- */

static void conn_watch(struct emu_ctx *c, struct emu_conn *k, uint32_t events, int op)
{
	struct epoll_event ev = {.events = events, .data.ptr = k};
	epoll_ctl(c->epfd, op, k->fd, &ev);
	k->wev = events;
}

/* What a connection in C_HELLO/C_UP is watched for, so that the epoll set
 * is readable exactly when there is something to do (the agent sleeps on
 * it): input, unless a request is held (RNR: the stream is not read until a
 * receive is posted, which the program's own post_recv handles); output
 * room while frames wait in the output queue. EPOLLERR/EPOLLHUP are always
 * reported. */
static void conn_rewatch(struct emu_ctx *c, struct emu_conn *k)
{
	uint32_t ev = (k->rstate == R_HELD ? 0u : (uint32_t)EPOLLIN) | (k->oq ? (uint32_t)EPOLLOUT : 0u);
	if (k->fd >= 0 && (k->state == C_HELLO || k->state == C_UP) && ev != k->wev)
		conn_watch(c, k, ev, EPOLL_CTL_MOD);
}

static struct emu_conn *conn_new(struct emu_ctx *c, int fd, int out)
{
	struct emu_conn *k = calloc(1, sizeof(*k));
	if (!k)
		return NULL;
	k->ib = malloc(NET_IBUF);
	if (!k->ib) {
		free(k);
		return NULL;
	}
	k->fd = fd;
	k->out = out;
	k->rstate = R_HDR;
	k->next = c->conns;
	c->conns = k;
	return k;
}

static void conn_free(struct emu_ctx *c, struct emu_conn *k)
{
	struct emu_conn **pp;
	for (pp = &c->conns; *pp; pp = &(*pp)->next)
		if (*pp == k) {
			*pp = k->next;
			break;
		}
	if (k->fd >= 0) {
		epoll_ctl(c->epfd, EPOLL_CTL_DEL, k->fd, NULL);
		close(k->fd);
	}
	oq_free(k);
	free(k->dead);
	free(k->ib);
	free(k);
}

/* Starts a (re)connection attempt; the HELLO goes first once connected. */
static void conn_connect(struct emu_ctx *c, struct emu_conn *k, uint64_t now)
{
	int one = 1, fd;
	k->want = 0;
	k->retry_at = now + NET_RECONNECT;
	fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	k->fd = fd;
	if (connect(fd, (struct sockaddr *)&k->sa, sizeof(k->sa)) == 0) {
		k->state = C_HELLO;
		send_hello(c, k);
		conn_watch(c, k, EPOLLIN, EPOLL_CTL_ADD);
		net_trace(c, k, "connected, HELLO sent");
	} else if (errno == EINPROGRESS) {
		k->state = C_CONNECTING;
		conn_watch(c, k, EPOLLIN | EPOLLOUT, EPOLL_CTL_ADD);
	} else {
		net_trace(c, k, strerror(errno));
		close(fd);
		k->fd = -1;
	}
}

/* The outgoing connection to gid, shared by all our QPs connected there. */
static struct emu_conn *conn_get(struct emu_ctx *c, const uint8_t *gid)
{
	struct emu_conn *k;
	for (k = c->conns; k; k = k->next)
		if (k->out && memcmp(k->gid, gid, 16) == 0) {
			k->refs++;
			return k;
		}
	k = conn_new(c, -1, 1);
	if (!k)
		return NULL;
	memcpy(k->gid, gid, 16);
	tcp_gid_decode(gid, &k->sa);
	k->refs = 1;
	k->state = C_IDLE;
	conn_connect(c, k, now_ns());
	return k;
}

static void conn_put(struct emu_ctx *c, struct emu_conn *k)
{
	if (k && --k->refs <= 0)
		conn_free(c, k);        /* nothing of ours is outstanding on it */
}

/* A connection broke (or was refused). Outgoing: a confirmed one fails the
 * QPs with WRs outstanding; an unconfirmed one is retried (the QPs resend
 * from their head on the next one). Incoming: a receive WQE taken for a
 * message that never finished is flushed and its QP goes to Error. */
static void conn_lost(struct emu_ctx *c, struct emu_conn *k, const char *why)
{
	int was_up = k->state == C_UP;
	net_trace(c, k, why);
	if (k->fd >= 0) {
		epoll_ctl(c->epfd, EPOLL_CTL_DEL, k->fd, NULL);
		close(k->fd);
		k->fd = -1;
	}
	oq_free(k);
	if (!k->out) {
		if (k->rdone == D_RECV && (k->rstate == R_DATA || k->rstate == R_SKIP)) {
			struct shm_qp *q;
			shm_lock(c->shm);
			if ((q = shm_qp_find(c->shm, k->rqpn))) {
				struct ibv_wc wc = {.wr_id = k->rwr_id, .status = IBV_WC_WR_FLUSH_ERR,
						    .opcode = IBV_WC_RECV, .qp_num = q->qpn, .src_qp = k->h.sqpn};
				cq_push(c->shm, c->size, q->recv_cq, &wc, 0, 0);
				shm_qp_to_err(c->shm, c->size, q);
			}
			shm_unlock(c->shm);
		}
		k->state = C_DEAD;      /* freed by net_progress */
		return;
	}
	k->state = C_IDLE;
	k->rstate = R_HDR;
	k->rdone = D_NONE;
	k->ib_off = k->ib_len = 0;
	k->readable = k->more = k->connready = k->broken = 0;
	k->retry_at = now_ns() + (was_up ? 0 : NET_RECONNECT);
	for (struct emu_qp *qp = c->qps; qp; qp = qp->next) {
		if (qp->conn != k)
			continue;
		if (was_up) {
			if (qp->count)
				sq_complete_head(c, qp, IBV_WC_RETRY_EXC_ERR);
		} else
			qp_rewind(qp);
	}
}

static void net_close(struct emu_ctx *c)
{
	while (c->conns)
		conn_free(c, c->conns);
	if (c->lfd >= 0)
		close(c->lfd);
	if (c->epfd >= 0)
		close(c->epfd);
	c->lfd = c->epfd = -1;
}

static void accept_all(struct emu_ctx *c)
{
	for (;;) {
		int one = 1, fd = accept4(c->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		struct emu_conn *k;
		if (fd < 0) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			return;         /* EAGAIN; EMFILE etc.: try again next call */
		}
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		if (!(k = conn_new(c, fd, 0))) {
			close(fd);
			continue;
		}
		k->state = C_HELLO;
		k->readable = 1;
		c->moved++;
		conn_watch(c, k, EPOLLIN, EPOLL_CTL_ADD);
	}
}

/* --- responder side ------------------------------------------------------ */

static int dead_is(struct emu_conn *k, uint32_t qpn, uint32_t gen)
{
	for (uint32_t i = 0; i < k->ndead; i++)
		if (k->dead[i].qpn == qpn)
			return k->dead[i].gen == gen;
	return 0;
}

static void dead_set(struct emu_conn *k, uint32_t qpn, uint32_t gen)
{
	uint32_t i;
	for (i = 0; i < k->ndead; i++)
		if (k->dead[i].qpn == qpn) {
			k->dead[i].gen = gen;
			return;
		}
	if (k->ndead == k->capdead) {
		uint32_t ncap = k->capdead ? k->capdead * 2 : 8;
		void *p = realloc(k->dead, sizeof(k->dead[0]) * ncap);
		if (!p)
			return;
		k->dead = p;
		k->capdead = ncap;
	}
	k->dead[k->ndead].qpn = qpn;
	k->dead[k->ndead++].gen = gen;
}

/* Consume (and drop) the payload of the current frame. */
static int r_skip(struct emu_conn *k, uint64_t plen)
{
	k->rstate = R_SKIP;
	k->rleft = plen;
	return 1;
}

/* Answer the current request with a NAK/NOTREADY, drop the rest of its
 * (QP, generation), and skip its payload. */
static int r_nak(struct emu_conn *k, int type, int status, uint64_t plen)
{
	send_ctl(k, type, status, &k->h);
	dead_set(k, k->h.sqpn, k->h.gen);
	k->rdone = D_NONE;
	return r_skip(k, plen);
}

/* Starts executing the request in k->h. Returns 1 when the frame is taken
 * (its payload follows), 0 when it is held (RNR). */
static int req_begin(struct emu_ctx *c, struct emu_conn *k)
{
	struct wire *h = &k->h;
	unsigned op = h->op;
	int is_send = op == IBV_WR_SEND || op == IBV_WR_SEND_WITH_IMM;
	int takes_recv = is_send || op == IBV_WR_RDMA_WRITE_WITH_IMM;
	int held = k->rstate == R_HELD;
	uint64_t plen = op == IBV_WR_RDMA_READ ? 0 : h->len;
	struct shm_hdr *sh = c->shm;
	struct shm_qp *q;
	struct shm_rq *ring = NULL;
	struct shm_rwqe *rw = NULL;
	struct iovec io;

	k->rdone = D_NONE;
	k->rfault = 0;
	k->rniov = k->rcur = 0;
	if (dead_is(k, h->sqpn, h->gen))
		return r_skip(k, plen);
	if (op != IBV_WR_SEND && op != IBV_WR_SEND_WITH_IMM && op != IBV_WR_RDMA_WRITE &&
	    op != IBV_WR_RDMA_WRITE_WITH_IMM && op != IBV_WR_RDMA_READ)
		return r_nak(k, W_NAK, IBV_WC_REM_INV_REQ_ERR, h->len);
	shm_lock(sh);
	/* As in local mode: only the connected QP, in RTR/RTS, is answered. */
	q = shm_qp_find(sh, h->dqpn);
	if (!q || (q->state != IBV_QPS_RTR && q->state != IBV_QPS_RTS) || q->dest_qpn != h->sqpn ||
	    memcmp(q->dgid, k->gid, 16) != 0) {
		shm_unlock(sh);
		return r_nak(k, W_NOTREADY, 0, plen);
	}
	if (takes_recv) {
		ring = rq_get(sh, c->size, q->rq);
		rw = ring ? rq_head(ring) : NULL;
		if (!rw) {
			/* RNR: hold the stream here (IBA 9.7.5.2.8). Counted retries
			 * follow the responder's min_rnr_timer; in between, any call
			 * may find a newly posted receive. */
			uint64_t now = now_ns();
			if (!held)
				k->held_tries = 0;
			if (!held || now >= k->held_next) {
				if (h->rnr_retry != 7 && k->held_tries >= h->rnr_retry) {
					shm_unlock(sh);
					return r_nak(k, W_NAK, IBV_WC_RNR_RETRY_EXC_ERR, plen);
				}
				k->held_tries++;
				k->held_next = now + rnr_delay_ns(q->min_rnr_timer);
			}
			shm_unlock(sh);
			k->rstate = R_HELD;
			return 0;
		}
		if (rw->num_sge > ring->max_sge)
			rw->num_sge = ring->max_sge;
	}
	if (is_send) {
		uint64_t room = 0, need = h->len;
		int bad = 0;
		struct ibv_wc wc = {.wr_id = rw->wr_id, .opcode = IBV_WC_RECV, .qp_num = q->qpn, .src_qp = h->sqpn};
		for (uint32_t i = 0; i < rw->num_sge; i++)
			room += rw->sge[i].length;
		if (h->len > room) {
			/* Longer than the receive: LOC_LEN_ERR here, REM_INV_REQ_ERR
			 * at the requester, this QP to Error (as local mode). */
			wc.status = IBV_WC_LOC_LEN_ERR;
			ring->head++;
			cq_push(sh, c->size, q->recv_cq, &wc, 0, 0);
			shm_qp_to_err(sh, c->size, q);
			shm_unlock(sh);
			return r_nak(k, W_NAK, IBV_WC_REM_INV_REQ_ERR, plen);
		}
		for (uint32_t i = 0; i < rw->num_sge; i++) {
			struct shm_mr *m = shm_mr_find(sh, rw->sge[i].lkey);
			const struct ibv_sge *g = &rw->sge[i];
			if (g->length == 0)
				continue;
			if (!m || !(m->access & IBV_ACCESS_LOCAL_WRITE) || g->addr < m->va ||
			    g->addr - m->va > m->len || g->length > m->len - (g->addr - m->va)) {
				bad = 1;
				break;
			}
			if (need) {
				k->riov[k->rniov].iov_base = (void *)(uintptr_t)g->addr;
				k->riov[k->rniov].iov_len = need < g->length ? need : g->length;
				need -= k->riov[k->rniov].iov_len;
				k->rniov++;
			}
		}
		if (bad) {
			/* Receive WQE protection error: LOC_PROT_ERR here, REM_OP_ERR
			 * at the requester. */
			wc.status = IBV_WC_LOC_PROT_ERR;
			ring->head++;
			cq_push(sh, c->size, q->recv_cq, &wc, 0, 0);
			shm_qp_to_err(sh, c->size, q);
			shm_unlock(sh);
			k->rniov = 0;
			return r_nak(k, W_NAK, IBV_WC_REM_OP_ERR, plen);
		}
		k->rwr_id = rw->wr_id;  /* taken now: another stream may use the SRQ */
		ring->head++;
		k->rdone = D_RECV;
	} else {
		unsigned need = op == IBV_WR_RDMA_READ ? IBV_ACCESS_REMOTE_READ : IBV_ACCESS_REMOTE_WRITE;
		if (remote_range(sh, q, h->rkey, h->raddr, h->len, need, &io)) {
			shm_qp_to_err(sh, c->size, q);
			shm_unlock(sh);
			return r_nak(k, W_NAK, IBV_WC_REM_ACCESS_ERR, plen);
		}
		if (op == IBV_WR_RDMA_READ) {
			/* The data goes back from our memory as the socket takes it. */
			struct ofr *f = ofr_new(0);
			shm_unlock(sh);
			if (f) {
				struct wire *w = (struct wire *)f->buf;
				w->type = W_RDATA;
				w->sqpn = h->sqpn;
				w->dqpn = h->dqpn;
				w->gen = h->gen;
				w->seq = h->seq;
				w->len = h->len;
				if (h->len)
					f->iov[f->niov++] = io;
				oq_push(k, f);
			}
			return r_skip(k, 0);
		}
		if (h->len)
			k->riov[k->rniov++] = io;
		if (op == IBV_WR_RDMA_WRITE_WITH_IMM) {
			k->rwr_id = rw->wr_id;
			ring->head++;
			k->rdone = D_RECV;
		} else
			k->rdone = D_ACK;
	}
	k->rqpn = q->qpn;
	shm_unlock(sh);
	k->rstate = R_DATA;
	k->rleft = plen;
	return 1;
}

/* The payload of the current request is in (or was skipped). */
static void req_finish(struct emu_ctx *c, struct emu_conn *k)
{
	struct wire *h = &k->h;
	struct shm_qp *q;
	if (k->rdone == D_RECV) {
		struct ibv_wc wc = {.wr_id = k->rwr_id, .status = k->rfault ? IBV_WC_LOC_PROT_ERR : IBV_WC_SUCCESS,
				    .opcode = h->op == IBV_WR_RDMA_WRITE_WITH_IMM ? IBV_WC_RECV_RDMA_WITH_IMM : IBV_WC_RECV,
				    .byte_len = (uint32_t)h->len, .qp_num = k->rqpn, .src_qp = h->sqpn};
		if (h->op != IBV_WR_SEND) {
			wc.wc_flags = IBV_WC_WITH_IMM;
			wc.imm_data = h->imm;
		}
		shm_lock(c->shm);
		if ((q = shm_qp_find(c->shm, k->rqpn))) {       /* still there */
			cq_push(c->shm, c->size, q->recv_cq, &wc, 0, 0);
			if (k->rfault)
				shm_qp_to_err(c->shm, c->size, q);
		}
		shm_unlock(c->shm);
	} else if (k->rfault) {
		shm_lock(c->shm);
		if ((q = shm_qp_find(c->shm, k->rqpn)))
			shm_qp_to_err(c->shm, c->size, q);
		shm_unlock(c->shm);
	}
	if (k->rfault) {
		/* Unmapped memory behind a valid key: a protection error. */
		send_ctl(k, W_NAK, h->op == IBV_WR_SEND || h->op == IBV_WR_SEND_WITH_IMM ? IBV_WC_REM_OP_ERR
											  : IBV_WC_REM_ACCESS_ERR, h);
		dead_set(k, h->sqpn, h->gen);
	} else
		send_ctl(k, W_ACK, 0, h);
}

/* --- requester side ------------------------------------------------------ */

/* Our QP the response in k->h answers, if it is still current. */
static struct emu_qp *resp_qp(struct emu_ctx *c, struct emu_conn *k)
{
	struct emu_qp *qp = c->qp_slots[k->h.sqpn & (EMU_QP_SLOTS - 1)];
	if (!qp || qp->ib.qp_num != k->h.sqpn || qp->conn != k || qp->gen != k->h.gen || !qp->sent ||
	    !qp->count || qp->ring[qp->head].seq != k->h.seq)
		return NULL;
	return qp;
}

static int resp_begin(struct emu_ctx *c, struct emu_conn *k)
{
	struct wire *h = &k->h;
	uint64_t plen = h->type == W_RDATA ? h->len : 0;
	struct emu_qp *qp = resp_qp(c, k);
	struct swqe *w;
	uint64_t now;

	k->rdone = D_NONE;
	k->rfault = 0;
	k->rniov = k->rcur = 0;
	if (!qp)
		return r_skip(k, plen);         /* stale: flushed, reset, rewound */
	w = &qp->ring[qp->head];
	switch (h->type) {
	case W_ACK:
		sq_complete_head(c, qp, w->lerr ? (enum ibv_wc_status)w->lerr : IBV_WC_SUCCESS);
		break;
	case W_NAK:
		sq_complete_head(c, qp, (enum ibv_wc_status)h->op);
		break;
	case W_NOTREADY:
		/* Remote QP missing or not connected to us: like packets that
		 * are never answered, retried until the retry window ends. */
		now = now_ns();
		if (!qp->deadline)
			qp->deadline = now + retry_window_ns(qp);
		if (now >= qp->deadline) {
			sq_complete_head(c, qp, IBV_WC_RETRY_EXC_ERR);
			break;
		}
		qp_rewind(qp);
		qp->next_try = now + NET_NOTREADY;
		qp->probe = 1;          /* resend the head alone until it is answered */
		break;
	case W_RDATA:
		if (w->opcode != IBV_WR_RDMA_READ || h->len != w->len) {
			sq_complete_head(c, qp, IBV_WC_BAD_RESP_ERR);
			break;
		}
		if (local_iov(c, w->sge, w->num_sge, IBV_ACCESS_LOCAL_WRITE, k->riov, &k->rniov)) {
			k->rniov = 0;
			k->rfault = 1;          /* MR deregistered meanwhile */
		}
		k->rdone = D_RDATA;
		k->rstate = k->rfault ? R_SKIP : R_DATA;
		k->rleft = plen;
		return 1;
	}
	return r_skip(k, plen);
}

static void resp_finish(struct emu_ctx *c, struct emu_conn *k)
{
	struct emu_qp *qp = resp_qp(c, k);
	if (qp)
		sq_complete_head(c, qp, k->rfault ? IBV_WC_LOC_PROT_ERR : IBV_WC_SUCCESS);
}

/* --- input --------------------------------------------------------------- */

/* More bytes into the input buffer: 1 got some, 0 would block, -1 EOF/error. */
static int conn_fill(struct emu_conn *k)
{
	ssize_t n;
	if (k->ib_off) {
		memmove(k->ib, k->ib + k->ib_off, k->ib_len - k->ib_off);
		k->ib_len -= k->ib_off;
		k->ib_off = 0;
	}
	do
		n = recv(k->fd, k->ib + k->ib_len, NET_IBUF - k->ib_len, MSG_DONTWAIT);
	while (n < 0 && errno == EINTR);
	if (n > 0) {
		k->ib_len += (uint32_t)n;
		return 1;
	}
	if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
		k->readable = 0;
		return 0;
	}
	if (n == 0)
		errno = 0;
	return -1;
}

static void r_advance(struct emu_conn *k, size_t n)
{
	while (n && k->rcur < k->rniov) {
		struct iovec *io = &k->riov[k->rcur];
		size_t s = n < io->iov_len ? n : io->iov_len;
		io->iov_base = (char *)io->iov_base + s;
		io->iov_len -= s;
		n -= s;
		if (!io->iov_len)
			k->rcur++;
	}
}

/* Handles a complete HELLO (header in k->h, body at the buffer). */
static int hello_in(struct emu_ctx *c, struct emu_conn *k)
{
	struct wire_hello hl;
	memcpy(&hl, k->ib + k->ib_off, sizeof(hl));
	k->ib_off += sizeof(hl);
	if (hl.magic != NET_MAGIC || hl.version != NET_VERSION || memcmp(hl.to, c->gid.raw, 16) != 0)
		return -1;              /* not for this context (stale GID) */
	if (k->out) {
		if (memcmp(hl.from, k->gid, 16) != 0)
			return -1;
		k->state = C_UP;
		for (struct emu_qp *qp = c->qps; qp; qp = qp->next)
			if (qp->conn == k)
				qp->deadline = 0;       /* connected: now only waiting */
		net_trace(c, k, "connection confirmed");
	} else {
		memcpy(k->gid, hl.from, 16);
		send_hello(c, k);
		k->state = C_UP;
		net_trace(c, k, "connection accepted");
	}
	return 0;
}

/* Reads and handles what has arrived on k. 0: fine (maybe more later),
 * -1: the connection broke (conn_lost done). */
static int conn_input(struct emu_ctx *c, struct emu_conn *k)
{
	uint64_t budget = NET_BUDGET;
	k->more = 0;
	while (k->fd >= 0) {
		uint32_t avail = k->ib_len - k->ib_off;
		int r;
		if (k->rstate == R_HELD) {
			if (!req_begin(c, k))
				return 0;       /* still RNR: leave the stream alone */
			continue;
		}
		if (k->rstate == R_DATA || k->rstate == R_SKIP) {
			if (!k->rleft) {
				int d = k->rdone;
				k->rstate = R_HDR;
				if (d == D_RDATA)
					resp_finish(c, k);
				else if (d == D_ACK || d == D_RECV)
					req_finish(c, k);
				k->rdone = D_NONE;
				continue;
			}
			if (avail) {
				uint64_t n = avail < k->rleft ? avail : k->rleft;
				if (k->rstate == R_DATA) {
					const unsigned char *p = k->ib + k->ib_off;
					for (uint64_t left = n; left && k->rcur < k->rniov; ) {
						struct iovec *io = &k->riov[k->rcur];
						size_t s = left < io->iov_len ? left : io->iov_len;
						memcpy(io->iov_base, p, s);
						p += s;
						left -= s;
						r_advance(k, s);
					}
				}
				k->ib_off += (uint32_t)n;
				k->rleft -= n;
				budget -= n < budget ? n : budget;
				continue;
			}
			if (!budget) {
				k->more = 1;
				return 0;
			}
			if (k->rstate == R_DATA && k->rcur >= k->rniov) {
				k->rstate = R_SKIP;     /* cannot happen: targets cover rleft */
				continue;
			}
			if (k->rstate == R_DATA && k->rleft >= NET_DIRECT) {
				/* Large: straight into place (EFAULT-safe). */
				ssize_t n;
				int cnt = k->rniov - k->rcur;
				do
					n = readv(k->fd, &k->riov[k->rcur], cnt > 1024 ? 1024 : cnt);
				while (n < 0 && errno == EINTR);
				if (n > 0) {
					c->moved++;
					r_advance(k, (size_t)n);
					k->rleft -= (uint64_t)n;
					budget -= (uint64_t)n < budget ? (uint64_t)n : budget;
					continue;
				}
				if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
					k->readable = 0;
					return 0;
				}
				if (n < 0 && errno == EFAULT) {
					k->rfault = 1;
					k->rstate = R_SKIP;
					continue;
				}
				conn_lost(c, k, n == 0 ? "closed by the peer" : strerror(errno));
				return -1;
			}
			if ((r = conn_fill(k)) == 0)
				return 0;
			if (r < 0) {
				conn_lost(c, k, errno ? strerror(errno) : "closed by the peer");
				return -1;
			}
			c->moved++;
			continue;
		}
		/* R_HDR: a whole header (and a HELLO's body) from the buffer. */
		if (avail >= sizeof(struct wire)) {
			memcpy(&k->h, k->ib + k->ib_off, sizeof(k->h));
			if (k->h.type != W_HELLO || avail >= sizeof(struct wire) + sizeof(struct wire_hello)) {
				int ok;
				k->ib_off += sizeof(struct wire);
				budget -= sizeof(struct wire) < budget ? sizeof(struct wire) : budget;
				if (k->h.len > EMU_MAX_MSG)
					ok = -1;
				else if (k->state == C_HELLO)
					ok = k->h.type == W_HELLO && k->h.len == sizeof(struct wire_hello) ? hello_in(c, k)
													    : -1;
				else if (!k->out)
					ok = k->h.type == W_REQ ? (req_begin(c, k), 0) : -1;
				else
					ok = k->h.type >= W_ACK && k->h.type <= W_RDATA ? (resp_begin(c, k), 0) : -1;
				if (ok < 0) {
					conn_lost(c, k, "protocol error (or HELLO for another HCA)");
					return -1;
				}
				continue;
			}
		}
		if (!budget) {
			k->more = 1;
			return 0;
		}
		if ((r = conn_fill(k)) == 0)
			return 0;
		if (r < 0) {
			conn_lost(c, k, errno ? strerror(errno) : "closed by the peer");
			return -1;
		}
		c->moved++;
	}
	return -1;
}

/* --- requester: transmit -------------------------------------------------- */

/* Puts WR w on the wire (queues its frame). -1: not sent; w->lerr set when it
 * fails locally (it completes with that status once it is the head). */
static int net_tx(struct emu_ctx *c, struct emu_qp *qp, struct swqe *w)
{
	struct iovec liov[EMU_MAX_SGE];
	int nl = 0;
	size_t body = 0;
	struct ofr *f;
	struct wire *h;

	/* Faults are decided here, at the sender, as in local mode. */
	if (w->fault == FAULT_RETRY_EXC)
		w->lerr = IBV_WC_RETRY_EXC_ERR;
	else if (w->fault == FAULT_REM_ACCESS)
		w->lerr = IBV_WC_REM_ACCESS_ERR;
	else if (w->len > EMU_MAX_MSG)
		w->lerr = IBV_WC_LOC_LEN_ERR;
	else if (!w->is_inline && local_iov(c, w->sge, w->num_sge,
					     w->opcode == IBV_WR_RDMA_READ ? IBV_ACCESS_LOCAL_WRITE : 0, liov, &nl))
		w->lerr = IBV_WC_LOC_PROT_ERR;
	if (w->lerr)
		return -1;
	if (w->is_inline)
		body = (size_t)w->len;
	if (!(f = ofr_new(body)))
		return -1;
	h = (struct wire *)f->buf;
	h->type = W_REQ;
	h->op = (uint8_t)w->opcode;
	h->rnr_retry = (uint8_t)qp->attr.rnr_retry;
	h->sqpn = qp->ib.qp_num;
	h->dqpn = qp->attr.dest_qp_num;
	h->gen = qp->gen;
	h->seq = w->seq;
	h->len = w->len;
	h->raddr = w->raddr;
	h->rkey = w->rkey;
	h->imm = w->imm;
	f->qpn = qp->ib.qp_num;
	f->seq = w->seq;
	if (w->is_inline)
		memcpy(f->buf + sizeof(*h), qp->inl + (size_t)(w - qp->ring) * qp->init.cap.max_inline_data, body);
	else if (w->opcode != IBV_WR_RDMA_READ)
		for (int i = 0; i < nl; i++)
			f->iov[f->niov++] = liov[i];
	oq_push(qp->conn, f);
	return 0;
}

/* TCP counterpart of the local execute loop: completes a locally failed
 * head, (re)sends what is not on the wire yet, and keeps the retry window
 * while the connection cannot be made. Caller holds plock. */
static void qp_net_progress(struct emu_ctx *c, struct emu_qp *qp)
{
	struct emu_conn *k = qp->conn;
	uint64_t now;

	while (qp->count && !qp->sent) {
		struct swqe *w = &qp->ring[qp->head];
		if (qp->barrier && w->seq >= qp->barrier_seq) {
			qp->barrier = 0;
			qp_enter_err(c, qp);
			return;
		}
		if (!w->lerr)
			break;
		sq_complete_head(c, qp, (enum ibv_wc_status)w->lerr);   /* -> ERR */
	}
	if (qp->sent == qp->count)
		return;                 /* all on the wire (or nothing to do) */
	now = now_ns();
	if (qp->next_try) {
		if (now < qp->next_try)
			return;
		qp->next_try = 0;
	}
	if (k->state != C_UP && k->state != C_HELLO) {
		/* Not connected (yet): the transport retry window runs. A peer
		 * whose kernel took the connection but that does not call
		 * verbs (C_HELLO) is only waited for. */
		k->want = 1;
		if (!qp->deadline)
			qp->deadline = now + retry_window_ns(qp);
		if (now >= qp->deadline)
			sq_complete_head(c, qp, IBV_WC_RETRY_EXC_ERR);
		return;
	}
	while (qp->sent < qp->count && !(qp->probe && qp->sent)) {
		struct swqe *w = &qp->ring[(qp->head + qp->sent) % qp->cap];
		if ((qp->barrier && w->seq >= qp->barrier_seq) || w->lerr || net_tx(c, qp, w))
			break;
		qp->sent++;
	}
	if (!qp->sent && qp->count && qp->ring[qp->head].lerr)
		sq_complete_head(c, qp, (enum ibv_wc_status)qp->ring[qp->head].lerr);
}

static void agent_poke(struct emu_ctx *c);

/* The HCA's work in TCP mode, done inside every verbs data-path call and by
 * the agent: accept, finish connects, read and handle frames, send new WRs,
 * write. Caller holds plock. */
static void net_progress(struct emu_ctx *c)
{
	struct epoll_event ev[64];
	struct emu_conn *k, **kp;
	uint64_t now;
	int n;

	n = epoll_wait(c->epfd, ev, 64, 0);
	for (int i = 0; i < n; i++) {
		if (!ev[i].data.ptr) {
			accept_all(c);
			continue;
		}
		k = ev[i].data.ptr;
		if (k->state == C_CONNECTING && (ev[i].events & (EPOLLOUT | EPOLLERR | EPOLLHUP)))
			k->connready = 1;
		if (ev[i].events & (EPOLLIN | EPOLLERR | EPOLLHUP | EPOLLRDHUP))
			k->readable = 1;
		if (k->rstate == R_HELD && (ev[i].events & (EPOLLERR | EPOLLHUP)))
			k->broken = 1;
	}
	for (k = c->conns; k; k = k->next) {
		if (k->state == C_CONNECTING && k->connready) {
			int err = 0;
			socklen_t l = sizeof(err);
			k->connready = 0;
			if (getsockopt(k->fd, SOL_SOCKET, SO_ERROR, &err, &l) || err) {
				errno = err;
				conn_lost(c, k, err ? strerror(err) : "connect failed");
				continue;
			}
			k->state = C_HELLO;
			send_hello(c, k);
			conn_watch(c, k, EPOLLIN, EPOLL_CTL_MOD);
			net_trace(c, k, "connected, HELLO sent");
		}
	}
	for (k = c->conns; k; k = k->next) {
		if (k->broken && k->rstate == R_HELD && k->state != C_DEAD) {
			/* Reset while its stream was held (RNR): the requester
			 * is gone, nothing behind the held request can matter. */
			conn_lost(c, k, "connection reset while a request was held (RNR)");
			continue;
		}
		k->broken = 0;
		if (k->fd >= 0 && k->state != C_CONNECTING && k->state != C_DEAD &&
		    (k->readable || k->more || k->rstate == R_HELD))
			conn_input(c, k);
	}
	progress(c);
	now = now_ns();
	for (k = c->conns; k; k = k->next) {
		if (k->out && k->state == C_IDLE && k->want && now >= k->retry_at)
			conn_connect(c, k, now);
		if (k->fd >= 0 && k->oq && (k->state == C_HELLO || k->state == C_UP) && conn_output(c, k) < 0)
			conn_lost(c, k, strerror(errno));
		conn_rewatch(c, k);
	}
	for (kp = &c->conns; (k = *kp);) {
		if (k->state == C_DEAD) {
			*kp = k->next;
			k->next = NULL;
			conn_free(c, k);        /* not in the list any more: no-op unlink */
		} else
			kp = &k->next;
	}
	agent_poke(c);
}

/* ------------------------------------------------------------------------ */
/* The agent (IBEMU_AGENT=1, the default)                                   */
/*
 * A real HCA keeps working after ibv_post_send returned: it retries an RNR'd
 * SEND on its own, and it answers the peers' requests whether or not the
 * program calls verbs. Programs rely on that (an MPI library completes an
 * eager send once posted and may then block elsewhere), so each context has
 * one thread that does what a verbs call does for pending work, when no verbs
 * call does it:
 *  - local mode: runs the queued send WRs (progress) on their RNR and
 *    transport retry timers. Nothing else: the peers write into this
 *    process themselves.
 *  - tcp mode: net_progress (accept, connect, read ACK/NAK/READ data and
 *    write the sender CQEs, serve the peers' requests into this process's
 *    memory with RECV CQEs and answers, flush output queues) when the epoll
 *    set says there is something (it is watched for input and, while frames
 *    wait, for output room), or when a timer is due.
 *
 * It sleeps in ppoll (nanosecond timeout; the epoll set in tcp mode, and an
 * eventfd through which close, or a verbs call that queued timed work while
 * the agent sleeps long, wakes it) and runs at most once per AGENT_TICK_NS,
 * so it never spins. Timed retries that keep finding nothing to do (a long
 * RNR) back off to AGENT_BACKOFF_NS between passes: a wake-up costs 10-40 us
 * of CPU on a small VM, every 200 us that would be 4% of a core. With
 * nothing outstanding it blocks (up to AGENT_IDLE_NS, a safety net).
 *
 * It is the fallback for a program that does not call: while the program
 * makes verbs calls that progress the whole context (post_send, poll_cq; in
 * tcp mode also post_recv, post_srq_recv, modify_qp), those do the work and
 * the agent only looks again AGENT_QUIET_NS after the latest one (backing
 * off to AGENT_QUIET_MAX_NS while the program stays busy), so a
 * busy-polling program and its agent do not compete for plock or the cores.
 *
 * Locking: it takes plock with trylock (busy: the program is inside a verbs
 * call, which does this work), holds it for one pass only, takes at most
 * one shared lock under it, as a verbs call does, and writes CQEs under the
 * owner's shared lock like everyone else, so ibv_poll_cq stays consistent.
 * ibv_close_device stops and joins it first. All signals are blocked in it.
 * Not fork-safe (neither was the rest: a child must not use a context of
 * its parent; it has no agent).
 */

#define AGENT_TICK_NS       200000ull           /* 200 us: at most one pass per tick */
#define AGENT_BACKOFF_NS    5000000ull          /* retries that find nothing: up to 5 ms apart */
#define AGENT_HELD_NS       100000000ull        /* tcp: a held request, re-checked */
#define AGENT_IDLE_NS       1000000000ull       /* nothing timed: wake anyway (safety net) */
#define AGENT_QUIET_NS      1000000ull          /* the program called verbs within 1 ms: it works */
#define AGENT_QUIET_MAX_NS  8000000ull          /* ... look again after at most 8 ms */

/* When pending work needs a pass that no event announces (RNR and transport
 * retries, reconnects, counted RNR holds, input left over by the budget):
 * an absolute time, or UINT64_MAX when only events (or nothing) are
 * awaited. Caller holds plock. */
static uint64_t agent_due(struct emu_ctx *c, uint64_t now)
{
	uint64_t t = UINT64_MAX;
	for (struct emu_qp *qp = c->pend; qp; qp = qp->pnext) {
		uint64_t at;
		if (!qp->count)
			continue;
		/* tcp: all it may send is on the wire; the answers are input. */
		if (qp->conn && !qp->next_try && (qp->sent == qp->count || (qp->probe && qp->sent)))
			continue;
		at = qp->next_try ? qp->next_try : now;
		if (at < t)
			t = at;
	}
	for (struct emu_conn *k = c->conns; k; k = k->next) {
		uint64_t at = UINT64_MAX;
		if (k->more)
			at = now;
		else if (k->rstate == R_HELD)
			/* The next counted RNR retry; with rnr_retry 7 the program's
			 * post_recv resumes it, but its QP may have gone meanwhile. */
			at = k->h.rnr_retry != 7 ? k->held_next : now + AGENT_HELD_NS;
		else if (k->out && k->state == C_IDLE && k->want)
			at = k->retry_at;
		if (at < t)
			t = at;
	}
	return t;
}

/* Called at the end of verbs calls that may queue timed work: wakes the
 * agent when that work is due before it planned to run. Caller holds plock. */
static void agent_poke(struct emu_ctx *c)
{
	uint64_t now, one = 1, w = __atomic_load_n(&c->agent_wake, __ATOMIC_RELAXED);
	if (!w)                         /* no agent, or it runs / was poked */
		return;
	now = now_ns();
	/* The program calls now, so the agent would act AGENT_QUIET_NS from
	 * now at the earliest; if it looks again within AGENT_QUIET_MAX_NS
	 * anyway, leave it asleep. */
	if (w <= now + AGENT_QUIET_MAX_NS)
		return;
	if (agent_due(c, now) < w) {
		__atomic_store_n(&c->agent_wake, 0, __ATOMIC_RELAXED);
		if (write(c->agent_efd, &one, sizeof(one)) < 0) {
			/* cannot fail (the counter would have to overflow) */
		}
	}
}

static void sleep_until(uint64_t t)
{
	struct timespec ts = {.tv_sec = (time_t)(t / 1000000000ull), .tv_nsec = (long)(t % 1000000000ull)};
	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
		;
}

static void *agent_main(void *arg)
{
	struct emu_ctx *c = arg;
	struct pollfd pf[2] = {{.fd = c->agent_efd, .events = POLLIN}, {.fd = c->epfd, .events = POLLIN}};
	uint64_t last = 0, wake = UINT64_MAX, now, v, lc, moved = 0, gap = AGENT_TICK_NS, quiet = AGENT_QUIET_NS;
	int events = c->net;            /* wake on the epoll set too */

	for (;;) {
		now = now_ns();
		if (wake == UINT64_MAX)
			wake = now + AGENT_IDLE_NS;
		if (wake > now) {
			struct timespec ts = {.tv_sec = (time_t)((wake - now) / 1000000000ull),
					      .tv_nsec = (long)((wake - now) % 1000000000ull)};
			if (ppoll(pf, events ? 2 : 1, &ts, NULL) > 0 && (pf[0].revents & POLLIN) &&
			    read(c->agent_efd, &v, sizeof(v)) < 0) {
				/* EAGAIN: drained already */
			}
			now = now_ns();
		}
		/* Woken by an event within a tick of the last pass: never two
		 * passes within a tick (wake itself is always a tick later). */
		if (now < last + AGENT_TICK_NS) {
			sleep_until(last + AGENT_TICK_NS);
			now = now_ns();
		}
		if (__atomic_load_n(&c->agent_stop, __ATOMIC_ACQUIRE))
			break;
		lc = __atomic_load_n(&c->last_call, __ATOMIC_RELAXED);
		if (pthread_mutex_trylock(&c->plock)) {
			/* Inside a verbs call, which does this very work: look
			 * again later (less often while it stays busy). */
			goto defer;
		}
		if (c->agent_stop) {
			pthread_mutex_unlock(&c->plock);
			break;
		}
		if (now < lc + AGENT_QUIET_NS) {
			/* The program is calling verbs. If work waits (input or
			 * output room its calls have not taken yet, a timer due
			 * soon), look again once it may have gone quiet; else
			 * sleep as after a pass. */
			struct pollfd ep = {.fd = c->epfd, .events = POLLIN};
			wake = agent_due(c, now);
			if ((c->net && poll(&ep, 1, 0) > 0) || wake < now + AGENT_QUIET_MAX_NS) {
				pthread_mutex_unlock(&c->plock);
				goto defer;
			}
			events = c->net;
			last = now;
			__atomic_store_n(&c->agent_wake, wake == UINT64_MAX ? now + AGENT_IDLE_NS : wake,
					 __ATOMIC_RELAXED);
			pthread_mutex_unlock(&c->plock);
			c->agent_defers++;
			continue;
		}
		quiet = AGENT_QUIET_NS;         /* quiet: we work */
		events = c->net;
		__atomic_store_n(&c->agent_wake, 0, __ATOMIC_RELAXED);        /* no pokes while we work */
		if (c->net)
			net_progress(c);
		else if (c->pend)
			progress(c);
		c->agent_passes++;
		last = now_ns();
		/* A pass that moved nothing doubles the gap to the next timed
		 * one (up to AGENT_BACKOFF_NS); one that did resets it. */
		if (c->moved != moved)
			gap = AGENT_TICK_NS;
		else if (gap < AGENT_BACKOFF_NS)
			gap = gap * 2 < AGENT_BACKOFF_NS ? gap * 2 : AGENT_BACKOFF_NS;
		moved = c->moved;
		wake = agent_due(c, last);
		if (wake != UINT64_MAX && wake < last + gap)
			wake = last + gap;
		__atomic_store_n(&c->agent_wake, wake == UINT64_MAX ? last + AGENT_IDLE_NS : wake, __ATOMIC_RELAXED);
		pthread_mutex_unlock(&c->plock);
		continue;
defer:
		/* Events do not wake us meanwhile: they are the program's. */
		wake = (lc > now ? lc : now) + quiet;
		quiet = quiet * 2 < AGENT_QUIET_MAX_NS ? quiet * 2 : AGENT_QUIET_MAX_NS;
		events = 0;
		last = now;
		__atomic_store_n(&c->agent_wake, wake, __ATOMIC_RELAXED);
		c->agent_defers++;              /* (read after the join only) */
	}
	return NULL;
}

/* 0 or an errno. */
static int agent_start(struct emu_ctx *c)
{
	pthread_attr_t at;
	sigset_t all, old;
	int rc;

	c->agent_efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (c->agent_efd < 0)
		return errno;
	c->agent_wake = now_ns() + AGENT_IDLE_NS;
	pthread_attr_init(&at);
	pthread_attr_setstacksize(&at, 256u << 10);
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);      /* inherited: no signal lands in it */
	rc = pthread_create(&c->agent, &at, agent_main, c);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	pthread_attr_destroy(&at);
	if (rc) {
		fprintf(stderr, "ibemu: cannot start the agent thread: %s\n", strerror(rc));
		close(c->agent_efd);
		c->agent_efd = -1;
		c->agent_wake = 0;
		return rc;
	}
	pthread_setname_np(c->agent, "ibemu-agent");
	c->agent_started = 1;
	return 0;
}

static void agent_stop(struct emu_ctx *c)
{
	uint64_t one = 1;
	if (!c->agent_started)
		return;
	pthread_mutex_lock(&c->plock);
	__atomic_store_n(&c->agent_stop, 1, __ATOMIC_RELEASE);
	__atomic_store_n(&c->agent_wake, 0, __ATOMIC_RELAXED);
	pthread_mutex_unlock(&c->plock);
	if (write(c->agent_efd, &one, sizeof(one)) < 0) {
		/* cannot fail; the agent also sees agent_stop within its idle time */
	}
	pthread_join(c->agent, NULL);
	c->agent_started = 0;
	c->agent_wake = 0;              /* (it may have planned another look) */
	close(c->agent_efd);
	c->agent_efd = -1;
	if (c->trace)
		fprintf(stderr, "ibemu[%d]: agent thread stopped after %llu passes (%llu times deferred to the program)\n",
			(int)getpid(), (unsigned long long)c->agent_passes, (unsigned long long)c->agent_defers);
}

static int emu_post_send(struct ibv_qp *ibqp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
	struct emu_qp *qp = (struct emu_qp *)ibqp;
	struct emu_ctx *c = ctx_of(ibqp->context);
	struct shm_qp *s;
	enum ibv_qp_state state;
	int rc = 0;

	pthread_mutex_lock(&c->plock);
	s = &shm_qp_tab(c->shm)[qp->slot];
	c->cnt_post++;
	if (fault_hit(c, FAULT_QP_ERR, c->cnt_post)) {
		if (qp->conn && qp->sent && !qp->barrier) {
			/* TCP mode: the WRs already on the wire complete as they
			 * would have (local mode executes them at once); the QP
			 * goes to ERR before anything not yet sent. */
			qp->barrier = 1;
			qp->barrier_seq = qp->ring[qp->head].seq + qp->sent;
		} else
			qp_enter_err(c, qp);
	}
	state = (enum ibv_qp_state)__atomic_load_n(&s->state, __ATOMIC_ACQUIRE);
	/* Posting to the SQ before RTS is an immediate error; in Error the WRs
	 * are accepted and complete with flush error (IBA QP state Error; rxe
	 * and mlx5 behave so). */
	if (state != IBV_QPS_RTS && state != IBV_QPS_ERR) {
		*bad = wr;
		rc = EINVAL;
		goto out;
	}
	for (; wr; wr = wr->next) {
		struct swqe *w;
		uint64_t len = 0;
		unsigned op = wr->opcode;
		int inl = (wr->send_flags & IBV_SEND_INLINE) != 0;
		if (op != IBV_WR_SEND && op != IBV_WR_SEND_WITH_IMM && op != IBV_WR_RDMA_WRITE &&
		    op != IBV_WR_RDMA_WRITE_WITH_IMM && op != IBV_WR_RDMA_READ) {
			rc = EINVAL;
			break;
		}
		if (wr->num_sge < 0 || (uint32_t)wr->num_sge > qp->init.cap.max_send_sge || (wr->num_sge && !wr->sg_list)) {
			rc = EINVAL;
			break;
		}
		for (int i = 0; i < wr->num_sge; i++)
			len += wr->sg_list[i].length;
		if (inl && (op == IBV_WR_RDMA_READ || len > qp->init.cap.max_inline_data)) {
			rc = EINVAL;
			break;
		}
		/* SQ slots free only when a later CQE of this SQ is polled (verbs:
		 * unsignaled WRs are retired by a following signaled completion). */
		if (qp->posted - qp->retired >= qp->cap) {
			rc = ENOMEM;
			break;
		}
		w = &qp->ring[(qp->head + qp->count) % qp->cap];
		memset(w, 0, offsetof(struct swqe, sge));
		w->wr_id = wr->wr_id;
		w->seq = qp->posted++;
		w->opcode = op;
		w->signaled = (wr->send_flags & IBV_SEND_SIGNALED) || qp->init.sq_sig_all;
		w->imm = wr->imm_data;
		w->raddr = wr->wr.rdma.remote_addr;
		w->rkey = wr->wr.rdma.rkey;
		w->len = len;
		w->num_sge = (uint32_t)wr->num_sge;
		if (inl) {
			/* Inline data is copied now; the buffer may be reused at once. */
			uint8_t *d = qp->inl + (size_t)(w - qp->ring) * qp->init.cap.max_inline_data;
			for (int i = 0; i < wr->num_sge; i++) {
				memcpy(d, (void *)(uintptr_t)wr->sg_list[i].addr, wr->sg_list[i].length);
				d += wr->sg_list[i].length;
			}
			w->is_inline = 1;
		} else if (wr->num_sge)
			memcpy(w->sge, wr->sg_list, sizeof(struct ibv_sge) * (size_t)wr->num_sge);
		c->cnt_wr++;
		if (fault_hit(c, FAULT_RETRY_EXC, c->cnt_wr))
			w->fault = FAULT_RETRY_EXC;
		if (op == IBV_WR_RDMA_WRITE || op == IBV_WR_RDMA_WRITE_WITH_IMM || op == IBV_WR_RDMA_READ) {
			c->cnt_rdma++;
			if (fault_hit(c, FAULT_REM_ACCESS, c->cnt_rdma))
				w->fault = FAULT_REM_ACCESS;
		}
		qp->count++;
	}
	if (rc)
		*bad = wr;
	if (qp->count)
		pend_add(c, qp);
	if (state == IBV_QPS_ERR) {
		qp->ib.state = IBV_QPS_ERR;
		sq_flush(c, qp);
	}
	/* Do the HCA's work now: this QP and anything else queued. */
	if (c->net)
		net_progress(c);        /* (pokes the agent) */
	else {
		progress(c);
		agent_poke(c);          /* RNR'd or blocked WRs: the agent retries them */
	}
	called(c);
out:
	pthread_mutex_unlock(&c->plock);
	return rc;
}

static int post_recv_common(struct emu_ctx *c, uint64_t rq_off, uint32_t max_sge, struct shm_qp *flush_qp,
			    struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	struct shm_rq *rq;
	int rc = 0;
	shm_lock(c->shm);
	rq = rq_get(c->shm, c->size, rq_off);
	for (; wr; wr = wr->next) {
		if (!rq || wr->num_sge < 0 || (uint32_t)wr->num_sge > max_sge || (wr->num_sge && !wr->sg_list)) {
			rc = EINVAL;
			break;
		}
		if (flush_qp && flush_qp->state == IBV_QPS_ERR) {
			/* Receives posted to a QP in Error complete flushed. */
			struct ibv_wc wc = {.wr_id = wr->wr_id, .status = IBV_WC_WR_FLUSH_ERR,
					    .opcode = IBV_WC_RECV, .qp_num = flush_qp->qpn,
					    .src_qp = flush_qp->dest_qpn};
			cq_push(c->shm, c->size, flush_qp->recv_cq, &wc, 0, 0);
			continue;
		}
		if ((rc = rq_push(rq, wr)))
			break;
	}
	shm_unlock(c->shm);
	if (rc)
		*bad = wr;
	return rc;
}

static int emu_post_recv(struct ibv_qp *ibqp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	struct emu_qp *qp = (struct emu_qp *)ibqp;
	struct emu_ctx *c = ctx_of(ibqp->context);
	struct shm_qp *s = &shm_qp_tab(c->shm)[qp->slot];
	/* A QP attached to an SRQ has no RQ; receives may be posted from INIT. */
	int rc;
	if (qp->srq || __atomic_load_n(&s->state, __ATOMIC_ACQUIRE) == IBV_QPS_RESET) {
		*bad = wr;
		return EINVAL;
	}
	rc = post_recv_common(c, qp->rq_off, qp->init.cap.max_recv_sge, s, wr, bad);
	if (c->net) {                   /* a held (RNR) message may fit now */
		pthread_mutex_lock(&c->plock);
		net_progress(c);
		called(c);
		pthread_mutex_unlock(&c->plock);
	}
	return rc;
}

static int emu_post_srq_recv(struct ibv_srq *ibsrq, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	struct emu_srq *srq = (struct emu_srq *)ibsrq;
	struct emu_ctx *c = ctx_of(ibsrq->context);
	int rc = post_recv_common(c, srq->off, srq->max_sge, NULL, wr, bad);
	if (c->net) {
		pthread_mutex_lock(&c->plock);
		net_progress(c);
		called(c);
		pthread_mutex_unlock(&c->plock);
	}
	return rc;
}

static int emu_poll_cq(struct ibv_cq *ibcq, int num, struct ibv_wc *wc)
{
	struct emu_cq *cq = (struct emu_cq *)ibcq;
	struct emu_ctx *c = ctx_of(ibcq->context);
	struct shm_cq *s;
	int n = 0;

	if (num < 0)
		return -1;
	pthread_mutex_lock(&c->plock);
	if (c->net)
		net_progress(c);        /* also serves the peers' requests */
	else if (c->pend)
		progress(c);
	called(c);
	s = (struct shm_cq *)((char *)c->shm + cq->off);
	shm_lock(c->shm);
	if (s->overflow) {
		shm_unlock(c->shm);
		if (!cq->reported) {
			cq->reported = 1;
			fprintf(stderr, "ibemu[%d]: CQ %p overrun (%d entries): CQ in error\n", (int)getpid(),
				(void *)ibcq, ibcq->cqe);
		}
		pthread_mutex_unlock(&c->plock);
		return -1;
	}
	while (n < num && s->head != s->tail) {
		struct shm_cqe *e = &s->e[s->head % s->size];
		wc[n++] = e->wc;
		if (e->sq_qpn) {
			struct emu_qp *qp = c->qp_slots[e->sq_qpn & (EMU_QP_SLOTS - 1)];
			if (qp && qp->ib.qp_num == e->sq_qpn && e->sq_seq + 1 > qp->retired)
				qp->retired = e->sq_seq + 1;
		}
		s->head++;
	}
	shm_unlock(c->shm);
	pthread_mutex_unlock(&c->plock);
	return n;
}

static int emu_req_notify_cq(struct ibv_cq *cq, int solicited_only)
{
	(void)cq;
	(void)solicited_only;
	return 0;                       /* completion channels are not emulated */
}

/* ------------------------------------------------------------------------ */

EXPORT const char *ibv_wc_status_str(enum ibv_wc_status status)
{
	/* Same strings as libibverbs. */
	static const char *const str[] = {
		[IBV_WC_SUCCESS] = "success",
		[IBV_WC_LOC_LEN_ERR] = "local length error",
		[IBV_WC_LOC_QP_OP_ERR] = "local QP operation error",
		[IBV_WC_LOC_EEC_OP_ERR] = "local EE context operation error",
		[IBV_WC_LOC_PROT_ERR] = "local protection error",
		[IBV_WC_WR_FLUSH_ERR] = "Work Request Flushed Error",
		[IBV_WC_MW_BIND_ERR] = "memory management operation error",
		[IBV_WC_BAD_RESP_ERR] = "bad response error",
		[IBV_WC_LOC_ACCESS_ERR] = "local access error",
		[IBV_WC_REM_INV_REQ_ERR] = "remote invalid request error",
		[IBV_WC_REM_ACCESS_ERR] = "remote access error",
		[IBV_WC_REM_OP_ERR] = "remote operation error",
		[IBV_WC_RETRY_EXC_ERR] = "transport retry counter exceeded",
		[IBV_WC_RNR_RETRY_EXC_ERR] = "RNR retry counter exceeded",
		[IBV_WC_LOC_RDD_VIOL_ERR] = "local RDD violation error",
		[IBV_WC_REM_INV_RD_REQ_ERR] = "remote invalid RD request",
		[IBV_WC_REM_ABORT_ERR] = "aborted error",
		[IBV_WC_INV_EECN_ERR] = "invalid EE context number",
		[IBV_WC_INV_EEC_STATE_ERR] = "invalid EE context state",
		[IBV_WC_FATAL_ERR] = "fatal error",
		[IBV_WC_RESP_TIMEOUT_ERR] = "response timeout error",
		[IBV_WC_GENERAL_ERR] = "general error",
		[IBV_WC_TM_ERR] = "TM error",
		[IBV_WC_TM_RNDV_INCOMPLETE] = "TM software rendezvous",
	};
	if ((unsigned)status < sizeof(str) / sizeof(str[0]) && str[status])
		return str[status];
	return "unknown";
}

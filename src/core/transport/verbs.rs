//! Layer: core. May use: platform.
//!
//! The verbs backend of the transport: the point-to-point messages of the shim's schedules
//! over reliable-connected queue pairs, without the MPI library.
//!
//! One process-wide [`Fabric`]: the device (the first one the loaded verbs library lists,
//! port 1), one protection domain, one completion queue for everything, one shared receive
//! queue with registered buffers for the eager messages and the control messages. Queue
//! pairs are per pair of processes (`SHIM_VERBS_QPS` of them), made when a communicator
//! that needs them sets up its [`Wire`] (a collective: the addresses go over the library's
//! point-to-point through the communicator's shadow), and shared by every communicator.
//!
//! The protocol, with the matching rule of MPI (MPI-4.0 §3.5: messages between two
//! processes with the same communicator and tag are received in the order sent), kept by
//! sending every eager message and every request to send on the first queue pair of the
//! pair, whose messages arrive in order (InfiniBand's reliable connection):
//! - up to [`EAGER`] bytes: a send of the header and the data from a registered bounce
//!   buffer; the send completes once posted to the HCA, which delivers it without this
//!   process;
//! - beyond: the sender sends a request (`RTS`), the receiver answers with its buffer's
//!   address and key once a receive matches (`CTS`), the sender writes the data with RDMA
//!   writes spread over the pair's queue pairs, and signals the arrival with a zero-byte
//!   RDMA write with immediate on the first queue pair once the other queue pairs' writes
//!   have completed (their writes are not ordered with the first queue pair's); the
//!   immediate names the receive.
//!
//! Registrations of the application's buffers live for one run of a schedule ([`Regs`]):
//! MPI forbids freeing or reusing a buffer while the operation that uses it is pending
//! (MPI-4.0 §3.7.2), so within a run no registration can go stale; the shim's own
//! staging buffers stay alive until the run ends for the same reason.
//!
//! Any failure (a completion in error, a queue pair that cannot be posted to) fails every
//! pending operation and every later one with `MPI_ERR_OTHER`: the collectives in flight
//! end with that class, and the wire stays failed (the ranks cannot agree on a fallback
//! without the network that failed). The failing process tells every other rank of every
//! wire through the library (a message on each wire's notice communicator, which every
//! rank keeps a receive posted on and tests while it waits): a reliable connection in
//! error says nothing to a peer that only receives, which would otherwise wait forever.

use core::ffi::c_int;
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};

use crate::platform::abi::*;
use crate::platform::mpi::{coll as mpi_coll, comm as mpi_comm, p2p};
use crate::platform::verbs::*;

/// Bytes of a receive buffer and of a bounce buffer.
const BUF: usize = 8192;
/// The header every send carries.
const HDR: usize = core::mem::size_of::<Hdr>();
/// Messages up to this size go eagerly.
pub const EAGER: usize = BUF - HDR;
/// Receive buffers posted on the shared receive queue.
const RECVS: usize = 512;
/// Bounce buffers for eager and control sends.
const BOUNCES: usize = 512;
/// Signaled work requests outstanding at once (also each queue pair's send queue).
const IN_FLIGHT: usize = 1024;
/// An RDMA write carries at least this much of a large message, and a message is cut in
/// at most [`MAX_CHUNKS`] writes (so that one message always fits the send queues).
const CHUNK: usize = 1 << 20;
const MAX_CHUNKS: usize = 256;

/// The bytes of each RDMA write of an `n`-byte message.
fn chunk_of(n: usize) -> usize {
    CHUNK.max(n.div_ceil(MAX_CHUNKS))
}

const EAGER_MSG: u32 = 1;
const RTS: u32 = 2;
const CTS: u32 = 3;

/// Work request ids: the kind in the top byte, an index below.
const WR_RECV: u64 = 1 << 56;
const WR_SLOT: u64 = 2 << 56;
const WR_WRITE: u64 = 3 << 56;
const WR_IMM: u64 = 4 << 56;
const WR_KIND: u64 = 0xff << 56;

/// What every message starts with.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
struct Hdr {
    kind: u32,
    comm: u32,
    tag: i32,
    /// The sender's operation (`RTS`, `CTS`).
    sid: u32,
    /// The message's length (`EAGER_MSG`, `RTS`), or the receive's capacity (`CTS`).
    len: u64,
    /// The receive buffer (`CTS`).
    addr: u64,
    rkey: u32,
    /// The receive (`CTS`), the immediate of the final write.
    rid: u32,
}

/// How an operation ended: the bytes moved, or an MPI error code.
pub type Outcome = Result<usize, c_int>;

/// What a receive finds before it is posted.
enum Arrival {
    Eager(Vec<u8>),
    Rts { len: u64, sid: u32 },
}

struct SendOp {
    peer: i32,
    buf: *const u8,
    len: usize,
    lkey: u32,
    /// RDMA writes not yet completed.
    writes: u32,
    rid: u32,
    /// The receive's capacity, buffer and key (from its `CTS`).
    cap: usize,
    raddr: u64,
    rkey: u32,
    done: Option<Outcome>,
}

struct RecvOp {
    buf: *mut u8,
    cap: usize,
    rkey: u32,
    /// A registration made when a large message came for a receive posted as a small
    /// one (the ranks' eager sizes differ): released with the receive.
    own: *mut ibv_mr,
    /// The length the sender announced (`RTS`).
    expect: usize,
    done: Option<Outcome>,
}

enum Op {
    Free,
    Send(SendOp),
    Recv(RecvOp),
}

/// Work that waits for a bounce buffer or for room in the send queues, in order.
enum Work {
    /// A send from a bounce buffer; `done`: the eager send it completes once posted.
    Ctrl {
        peer: i32,
        hdr: Hdr,
        data: Vec<u8>,
        done: Option<u32>,
    },
    Writes {
        id: u32,
    },
    Imm {
        id: u32,
    },
}

/// Registered memory owned by the fabric.
struct Region {
    mem: Vec<u8>,
    mr: *mut ibv_mr,
}

/// The process's verbs resources and the state of every operation on them.
pub struct Fabric {
    v: Verbs,
    ctx: *mut ibv_context,
    pd: *mut ibv_pd,
    cq: *mut ibv_cq,
    srq: *mut ibv_srq,
    gid: [u64; 2],
    lid: u16,
    global: bool,
    mtu: u32,
    qps_per_peer: usize,
    recv: Region,
    bounce: Region,
    free_slots: Vec<u32>,
    /// My rank in the library's world (how peers are named across communicators).
    me: i32,
    peers: HashMap<i32, Vec<*mut ibv_qp>>,
    by_qpn: HashMap<u32, i32>,
    next_comm: u32,
    ops: Vec<Op>,
    gens: Vec<u32>,
    free_ops: Vec<u32>,
    posted: HashMap<(i32, u32, i32), VecDeque<u32>>,
    unexpected: HashMap<(i32, u32, i32), VecDeque<Arrival>>,
    backlog: VecDeque<Work>,
    in_flight: usize,
    failed: Option<String>,
    /// Messages up to this size go eagerly (`SHIM_VERBS_EAGER`, at most [`EAGER`]).
    eager: usize,
    device: String,
    /// For `SHIM_STATS`: eager and rendezvous messages sent, their bytes.
    sent_eager: u64,
    sent_rdv: u64,
    sent_bytes: u64,
    /// Every wire, to tell their ranks of a failure.
    wires: Vec<Weak<Wire>>,
    /// Tests of the wires since their notices were last looked at.
    tests: u32,
}

// SAFETY: the raw pointers are verbs objects and registered memory of this process, used
// only under the fabric's mutex.
unsafe impl Send for Fabric {}

/// The process's fabric: opened at the first wire, `Err` (kept) where it cannot be.
static FABRIC: OnceLock<Result<Mutex<Fabric>, String>> = OnceLock::new();

fn lock(f: &Mutex<Fabric>) -> MutexGuard<'_, Fabric> {
    f.lock().unwrap_or_else(|e| e.into_inner())
}

/// Operation ids: an index in the low 20 bits, a generation above (an immediate names a
/// receive, and a stale one must not complete a later receive in the same slot).
fn op_id(index: u32, gen_: u32) -> u32 {
    (gen_ << 20) | index
}

fn op_index(id: u32) -> usize {
    (id & 0xfffff) as usize
}

impl Fabric {
    fn open(lib: &str, qps_per_peer: usize, eager: usize) -> Result<Fabric, String> {
        let v = Verbs::load(lib)?;
        let mut n = 0;
        // SAFETY: the loaded library's ibv_get_device_list with a count out-parameter.
        let list = unsafe { (v.get_device_list)(&mut n) };
        if list.is_null() || n <= 0 {
            if !list.is_null() {
                // SAFETY: the list it returned.
                unsafe { (v.free_device_list)(list) };
            }
            return Err(format!("{lib}: no RDMA device"));
        }
        // SAFETY: a list of n devices; the first one is named and opened, then the list
        // freed (the context keeps its device).
        let device = unsafe {
            let p = (v.get_device_name)(*list);
            if p.is_null() {
                String::from("?")
            } else {
                core::ffi::CStr::from_ptr(p).to_string_lossy().into_owned()
            }
        };
        // SAFETY: as above.
        let ctx = unsafe {
            let c = (v.open_device)(*list);
            (v.free_device_list)(list);
            c
        };
        if ctx.is_null() {
            return Err(format!("{lib}: cannot open the device"));
        }
        let mut f = Fabric {
            v,
            ctx,
            pd: core::ptr::null_mut(),
            cq: core::ptr::null_mut(),
            srq: core::ptr::null_mut(),
            gid: [0; 2],
            lid: 0,
            global: false,
            mtu: 5,
            qps_per_peer,
            recv: Region {
                mem: Vec::new(),
                mr: core::ptr::null_mut(),
            },
            bounce: Region {
                mem: Vec::new(),
                mr: core::ptr::null_mut(),
            },
            free_slots: (0..BOUNCES as u32).rev().collect(),
            me: mpi_comm::rank(MPI_COMM_WORLD()).unwrap_or(-1),
            peers: HashMap::new(),
            by_qpn: HashMap::new(),
            next_comm: 1,
            ops: Vec::new(),
            gens: Vec::new(),
            free_ops: Vec::new(),
            posted: HashMap::new(),
            unexpected: HashMap::new(),
            backlog: VecDeque::new(),
            in_flight: 0,
            failed: None,
            eager: eager.min(EAGER),
            device,
            sent_eager: 0,
            sent_rdv: 0,
            sent_bytes: 0,
            wires: Vec::new(),
            tests: 0,
        };
        f.resources().inspect_err(|_| f.close())?;
        Ok(f)
    }

    /// Port, protection domain, queues and the registered buffers.
    fn resources(&mut self) -> Result<(), String> {
        let mut port = ibv_port_attr::default();
        // SAFETY: our context; port 1; a zeroed attribute block large enough.
        if unsafe { (self.v.query_port)(self.ctx, 1, &mut port) } != 0 {
            return Err("cannot query port 1".into());
        }
        if port.state != IBV_PORT_ACTIVE {
            return Err(format!("port 1 is not active (state {})", port.state));
        }
        self.lid = port.lid;
        self.mtu = port.active_mtu;
        // SAFETY: our context, GID index 0 into a 16-byte block.
        if unsafe { (self.v.query_gid)(self.ctx, 1, 0, &mut self.gid) } != 0 {
            return Err("cannot query GID 0".into());
        }
        // RoCE has no LIDs: its connections are addressed by the GID (the GRH)
        self.global = port.link_layer == IBV_LINK_LAYER_ETHERNET || port.lid == 0;
        // SAFETY: our context.
        self.pd = unsafe { (self.v.alloc_pd)(self.ctx) };
        if self.pd.is_null() {
            return Err("cannot allocate a protection domain".into());
        }
        let cqe = (RECVS + IN_FLIGHT + 64) as c_int;
        // SAFETY: our context; no channel, no context, vector 0.
        self.cq = unsafe {
            (self.v.create_cq)(
                self.ctx,
                cqe,
                core::ptr::null_mut(),
                core::ptr::null_mut(),
                0,
            )
        };
        if self.cq.is_null() {
            return Err("cannot create a completion queue".into());
        }
        let mut sa = ibv_srq_init_attr {
            srq_context: core::ptr::null_mut(),
            attr: ibv_srq_attr {
                max_wr: RECVS as u32,
                max_sge: 1,
                srq_limit: 0,
            },
        };
        // SAFETY: our protection domain and a filled attribute block.
        self.srq = unsafe { (self.v.create_srq)(self.pd, &mut sa) };
        if self.srq.is_null() {
            return Err("cannot create a shared receive queue".into());
        }
        self.recv = self.region(RECVS * BUF)?;
        self.bounce = self.region(BOUNCES * BUF)?;
        for i in 0..RECVS {
            self.post_recv_buffer(i)?;
        }
        Ok(())
    }

    fn region(&self, len: usize) -> Result<Region, String> {
        let mut mem = vec![0u8; len];
        let mr = self.register(mem.as_mut_ptr(), len)?;
        Ok(Region { mem, mr })
    }

    fn register(&self, addr: *mut u8, len: usize) -> Result<*mut ibv_mr, String> {
        let access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
        // SAFETY: memory of this process that stays allocated while registered (the
        // callers keep it: fabric regions, or a run's buffers until the run ends).
        let mr = unsafe { (self.v.reg_mr)(self.pd, addr.cast(), len.max(1), access) };
        if mr.is_null() {
            return Err(format!(
                "cannot register {len} bytes: {}",
                std::io::Error::last_os_error()
            ));
        }
        Ok(mr)
    }

    fn post_recv_buffer(&mut self, i: usize) -> Result<(), String> {
        // SAFETY: the receive region's mr, made by register.
        let lkey = unsafe { (*self.recv.mr).lkey };
        let mut sge = ibv_sge {
            addr: self.recv.mem.as_ptr() as u64 + (i * BUF) as u64,
            length: BUF as u32,
            lkey,
        };
        let mut wr = ibv_recv_wr {
            wr_id: WR_RECV | i as u64,
            next: core::ptr::null_mut(),
            sg_list: &mut sge,
            num_sge: 1,
        };
        // SAFETY: our shared receive queue; one buffer of the registered region.
        let rc = unsafe { post_srq_recv(self.srq, &mut wr) };
        if rc != 0 {
            return Err(format!("cannot post a receive buffer (error {rc})"));
        }
        Ok(())
    }

    fn close(&mut self) {
        // SAFETY: objects this fabric created, destroyed once, children first.
        unsafe {
            for qps in self.peers.values() {
                for &qp in qps {
                    (self.v.destroy_qp)(qp);
                }
            }
            for mr in [self.recv.mr, self.bounce.mr] {
                if !mr.is_null() {
                    (self.v.dereg_mr)(mr);
                }
            }
            if !self.srq.is_null() {
                (self.v.destroy_srq)(self.srq);
            }
            if !self.cq.is_null() {
                (self.v.destroy_cq)(self.cq);
            }
            if !self.pd.is_null() {
                (self.v.dealloc_pd)(self.pd);
            }
            (self.v.close_device)(self.ctx);
        }
        self.peers.clear();
        self.recv.mr = core::ptr::null_mut();
        self.bounce.mr = core::ptr::null_mut();
        self.srq = core::ptr::null_mut();
        self.cq = core::ptr::null_mut();
        self.pd = core::ptr::null_mut();
    }

    fn new_qp(&mut self) -> Result<*mut ibv_qp, String> {
        let mut ia = ibv_qp_init_attr {
            qp_context: core::ptr::null_mut(),
            send_cq: self.cq,
            recv_cq: self.cq,
            srq: self.srq,
            cap: ibv_qp_cap {
                max_send_wr: IN_FLIGHT as u32,
                max_recv_wr: 0,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 0,
            },
            qp_type: IBV_QPT_RC,
            sq_sig_all: 0,
        };
        // SAFETY: our protection domain, queues and a filled attribute block.
        let qp = unsafe { (self.v.create_qp)(self.pd, &mut ia) };
        if qp.is_null() {
            return Err("cannot create a queue pair".into());
        }
        let mut a = ibv_qp_attr {
            qp_state: IBV_QPS_INIT,
            pkey_index: 0,
            port_num: 1,
            qp_access_flags: (IBV_ACCESS_LOCAL_WRITE
                | IBV_ACCESS_REMOTE_WRITE
                | IBV_ACCESS_REMOTE_READ) as u32,
            ..Default::default()
        };
        let mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
        // SAFETY: the queue pair just created.
        let rc = unsafe { (self.v.modify_qp)(qp, &mut a, mask) };
        if rc != 0 {
            // SAFETY: as above.
            unsafe { (self.v.destroy_qp)(qp) };
            return Err(format!("cannot move a queue pair to INIT (error {rc})"));
        }
        Ok(qp)
    }

    /// RESET→INIT (done) →RTR→RTS towards the remote queue pair `qpn` at `gid`/`lid`.
    fn connect_qp(&self, qp: *mut ibv_qp, qpn: u32, gid: [u64; 2], lid: u16) -> Result<(), String> {
        let mut a = ibv_qp_attr {
            qp_state: IBV_QPS_RTR,
            path_mtu: self.mtu,
            dest_qp_num: qpn,
            rq_psn: 0,
            max_dest_rd_atomic: 1,
            min_rnr_timer: 12,
            ..Default::default()
        };
        a.ah_attr.dlid = lid;
        a.ah_attr.port_num = 1;
        if self.global {
            a.ah_attr.is_global = 1;
            a.ah_attr.grh.dgid = gid;
            a.ah_attr.grh.hop_limit = 1;
        }
        let mask = IBV_QP_STATE
            | IBV_QP_AV
            | IBV_QP_PATH_MTU
            | IBV_QP_DEST_QPN
            | IBV_QP_RQ_PSN
            | IBV_QP_MAX_DEST_RD_ATOMIC
            | IBV_QP_MIN_RNR_TIMER;
        // SAFETY: our queue pair; a filled attribute block.
        let rc = unsafe { (self.v.modify_qp)(qp, &mut a, mask) };
        if rc != 0 {
            return Err(format!("cannot move a queue pair to RTR (error {rc})"));
        }
        let mut a = ibv_qp_attr {
            qp_state: IBV_QPS_RTS,
            timeout: 14,
            retry_cnt: 7,
            // 7: retry forever while the receiver has no receive posted (it is computing)
            rnr_retry: 7,
            sq_psn: 0,
            max_rd_atomic: 1,
            ..Default::default()
        };
        let mask = IBV_QP_STATE
            | IBV_QP_TIMEOUT
            | IBV_QP_RETRY_CNT
            | IBV_QP_RNR_RETRY
            | IBV_QP_SQ_PSN
            | IBV_QP_MAX_QP_RD_ATOMIC;
        // SAFETY: as above.
        let rc = unsafe { (self.v.modify_qp)(qp, &mut a, mask) };
        if rc != 0 {
            return Err(format!("cannot move a queue pair to RTS (error {rc})"));
        }
        Ok(())
    }

    fn new_op(&mut self, op: Op) -> u32 {
        let i = match self.free_ops.pop() {
            Some(i) => i as usize,
            None => {
                self.ops.push(Op::Free);
                self.gens.push(0);
                self.ops.len() - 1
            }
        };
        self.gens[i] = (self.gens[i] + 1) & 0xfff;
        self.ops[i] = op;
        op_id(i as u32, self.gens[i])
    }

    fn live(&self, id: u32) -> bool {
        let i = op_index(id);
        i < self.ops.len()
            && op_id(i as u32, self.gens[i]) == id
            && !matches!(self.ops[i], Op::Free)
    }

    fn finish(&mut self, id: u32, out: Outcome) {
        if !self.live(id) {
            return;
        }
        match &mut self.ops[op_index(id)] {
            Op::Send(s) => s.done = Some(out),
            Op::Recv(r) => r.done = Some(out),
            Op::Free => {}
        }
    }

    /// Fails everything pending: a completion in error or a post that was refused; the
    /// ranks of every wire are told (see the module docs).
    fn fail(&mut self, why: String) {
        if self.failed.is_none() {
            tracing::warn!(target: "shim::verbs", "the verbs transport failed: {why}");
            self.failed = Some(why);
            self.wires.retain(|w| w.strong_count() > 0);
            for w in self.wires.iter().filter_map(Weak::upgrade) {
                w.notify();
            }
        }
        for op in &mut self.ops {
            match op {
                Op::Send(s) if s.done.is_none() => s.done = Some(Err(MPI_ERR_OTHER)),
                Op::Recv(r) if r.done.is_none() => r.done = Some(Err(MPI_ERR_OTHER)),
                _ => {}
            }
        }
        self.backlog.clear();
        self.posted.clear();
    }

    /// Delivers what arrived for a receive: a copy, or the request to send answered.
    fn deliver(&mut self, id: u32, peer: i32, a: Arrival) {
        let Op::Recv(r) = &mut self.ops[op_index(id)] else {
            return;
        };
        match a {
            Arrival::Eager(data) => {
                let n = data.len().min(r.cap);
                // SAFETY: the receive's buffer holds cap bytes (the run's schedule).
                unsafe { core::ptr::copy_nonoverlapping(data.as_ptr(), r.buf, n) };
                r.done = Some(if data.len() > r.cap {
                    Err(MPI_ERR_TRUNCATE)
                } else {
                    Ok(data.len())
                });
            }
            Arrival::Rts { len, sid } => {
                r.expect = len as usize;
                if r.rkey == 0 && r.cap > 0 {
                    let (buf, cap) = (r.buf, r.cap);
                    match self.register(buf, cap) {
                        Ok(mr) => {
                            let Op::Recv(r) = &mut self.ops[op_index(id)] else {
                                return;
                            };
                            r.own = mr;
                            // SAFETY: the registration just made.
                            r.rkey = unsafe { (*mr).rkey };
                        }
                        Err(e) => return self.fail(e),
                    }
                }
                let Op::Recv(r) = &mut self.ops[op_index(id)] else {
                    return;
                };
                // a receive too small for a large message gets nothing written (and
                // reports the truncation); a zero-byte write still names it
                let (addr, rkey, cap) = if r.rkey != 0 && r.cap > 0 {
                    (r.buf as u64, r.rkey, r.cap)
                } else {
                    // SAFETY: the receive region's mr.
                    (
                        self.recv.mem.as_ptr() as u64,
                        unsafe { (*self.recv.mr).rkey },
                        0,
                    )
                };
                let hdr = Hdr {
                    kind: CTS,
                    sid,
                    len: cap as u64,
                    addr,
                    rkey,
                    rid: id,
                    ..Default::default()
                };
                self.backlog.push_back(Work::Ctrl {
                    peer,
                    hdr,
                    data: Vec::new(),
                    done: None,
                });
            }
        }
    }

    fn arrived(&mut self, peer: i32, h: Hdr, a: Arrival) {
        let key = (peer, h.comm, h.tag);
        let waiting = self.posted.get_mut(&key).and_then(|q| q.pop_front());
        match waiting {
            Some(id) => self.deliver(id, peer, a),
            None => self.unexpected.entry(key).or_default().push_back(a),
        }
    }

    /// Takes the completions there are and moves the work that waits; never blocks.
    pub fn progress(&mut self) {
        if self.failed.is_some() {
            return;
        }
        let mut wcs = [ibv_wc::default(); 32];
        loop {
            // SAFETY: our completion queue; room for 32 completions.
            let n = unsafe { poll_cq(self.cq, &mut wcs) };
            if n < 0 {
                return self.fail("the completion queue is in error".into());
            }
            for wc in &wcs[..n as usize] {
                self.completion(wc);
                if self.failed.is_some() {
                    return;
                }
            }
            if (n as usize) < wcs.len() {
                break;
            }
        }
        self.drain();
    }

    fn completion(&mut self, wc: &ibv_wc) {
        let kind = wc.wr_id & WR_KIND;
        let index = (wc.wr_id & !WR_KIND) as u32;
        if kind != WR_RECV {
            self.in_flight = self.in_flight.saturating_sub(1);
        }
        if wc.status != IBV_WC_SUCCESS {
            let peer = self.by_qpn.get(&wc.qp_num).copied().unwrap_or(-1);
            return self.fail(format!(
                "a work completion with peer {peer} in error: {} (vendor error {})",
                self.v.status_name(wc.status),
                wc.vendor_err
            ));
        }
        match kind {
            WR_SLOT => self.free_slots.push(index),
            WR_WRITE => {
                if let Op::Send(s) = &mut self.ops[op_index(index)] {
                    s.writes -= 1;
                    if s.writes == 0 {
                        self.backlog.push_back(Work::Imm { id: index });
                    }
                }
            }
            WR_IMM => {
                if let Op::Send(s) = &self.ops[op_index(index)] {
                    let n = s.len.min(s.cap);
                    self.finish(index, Ok(n));
                }
            }
            WR_RECV => self.received(wc, index as usize),
            _ => {}
        }
    }

    fn received(&mut self, wc: &ibv_wc, i: usize) {
        let peer = self.by_qpn.get(&wc.qp_num).copied().unwrap_or(-1);
        if wc.opcode == IBV_WC_RECV_RDMA_WITH_IMM {
            let id = wc.imm_data;
            if self.live(id) {
                if let Op::Recv(r) = &self.ops[op_index(id)] {
                    let out = if r.expect > r.cap {
                        Err(MPI_ERR_TRUNCATE)
                    } else {
                        Ok(r.expect)
                    };
                    self.finish(id, out);
                }
            }
        } else {
            let at = i * BUF;
            // SAFETY: a received buffer of ours holds at least the header (every sender
            // sends one); read unaligned from the byte buffer.
            let h: Hdr = unsafe { core::ptr::read_unaligned(self.recv.mem[at..].as_ptr().cast()) };
            match h.kind {
                EAGER_MSG => {
                    let n = (h.len as usize).min(EAGER);
                    let data = self.recv.mem[at + HDR..at + HDR + n].to_vec();
                    self.arrived(peer, h, Arrival::Eager(data));
                }
                RTS => self.arrived(
                    peer,
                    h,
                    Arrival::Rts {
                        len: h.len,
                        sid: h.sid,
                    },
                ),
                CTS if self.live(h.sid) => self.answered(h.sid, &h),
                _ => {}
            }
        }
        if let Err(e) = self.post_recv_buffer(i) {
            self.fail(e);
        }
    }

    /// Queues the RDMA writes of a send whose receive answered (its `CTS`).
    fn answered(&mut self, id: u32, h: &Hdr) {
        let Op::Send(s) = &mut self.ops[op_index(id)] else {
            return;
        };
        s.rid = h.rid;
        s.cap = h.len as usize;
        s.raddr = h.addr;
        s.rkey = h.rkey;
        let n = s.len.min(s.cap);
        let chunks = n.div_ceil(chunk_of(n));
        s.writes = chunks as u32;
        self.backlog.push_back(if chunks == 0 {
            // nothing to write: straight to the final write with immediate
            Work::Imm { id }
        } else {
            Work::Writes { id }
        });
    }

    /// Posts queued work while there are bounce buffers and room in the send queues.
    fn drain(&mut self) {
        while let Some(w) = self.backlog.pop_front() {
            let need = match &w {
                Work::Writes { id } => match &self.ops[op_index(*id)] {
                    Op::Send(s) => s.writes as usize,
                    _ => 0,
                },
                _ => 1,
            };
            let slot_needed = matches!(w, Work::Ctrl { .. });
            if self.in_flight + need > IN_FLIGHT || (slot_needed && self.free_slots.is_empty()) {
                self.backlog.push_front(w);
                return;
            }
            let r = match w {
                Work::Ctrl {
                    peer,
                    hdr,
                    data,
                    done,
                } => self.send_ctrl(peer, &hdr, &data).map(|()| {
                    if let Some(id) = done {
                        self.finish(id, Ok(data.len()));
                    }
                }),
                Work::Writes { id } => self.send_writes(id),
                Work::Imm { id } => self.send_imm(id),
            };
            if let Err(e) = r {
                return self.fail(e);
            }
        }
    }

    fn qp(&self, peer: i32, k: usize) -> Result<*mut ibv_qp, String> {
        self.peers
            .get(&peer)
            .and_then(|q| q.get(k % q.len()).copied())
            .ok_or_else(|| format!("no queue pair to process {peer}"))
    }

    fn post(&mut self, qp: *mut ibv_qp, wr: &mut ibv_send_wr) -> Result<(), String> {
        // SAFETY: a connected queue pair of ours; the request's memory is registered.
        let rc = unsafe { post_send(qp, wr) };
        if rc != 0 {
            return Err(format!("a post to a queue pair failed (error {rc})"));
        }
        self.in_flight += 1;
        Ok(())
    }

    fn send_ctrl(&mut self, peer: i32, hdr: &Hdr, data: &[u8]) -> Result<(), String> {
        let slot = self.free_slots.pop().expect("a free slot (checked)") as usize;
        let at = slot * BUF;
        // SAFETY: the slot's bytes hold the header and up to EAGER bytes of data.
        unsafe {
            core::ptr::write_unaligned(self.bounce.mem[at..].as_mut_ptr().cast(), *hdr);
        }
        self.bounce.mem[at + HDR..at + HDR + data.len()].copy_from_slice(data);
        // SAFETY: the bounce region's mr.
        let lkey = unsafe { (*self.bounce.mr).lkey };
        let mut sge = ibv_sge {
            addr: self.bounce.mem.as_ptr() as u64 + at as u64,
            length: (HDR + data.len()) as u32,
            lkey,
        };
        let mut wr = ibv_send_wr {
            wr_id: WR_SLOT | slot as u64,
            sg_list: &mut sge,
            num_sge: 1,
            opcode: IBV_WR_SEND,
            send_flags: IBV_SEND_SIGNALED,
            ..Default::default()
        };
        let qp = self.qp(peer, 0)?;
        self.post(qp, &mut wr)
    }

    fn send_writes(&mut self, id: u32) -> Result<(), String> {
        let Op::Send(s) = &self.ops[op_index(id)] else {
            return Ok(());
        };
        let (peer, buf, lkey, addr, rkey) = (s.peer, s.buf, s.lkey, s.raddr, s.rkey);
        let n = s.len.min(s.cap);
        let mut off = 0;
        let mut k = 0;
        while off < n {
            let len = (n - off).min(chunk_of(n));
            let mut sge = ibv_sge {
                addr: buf as u64 + off as u64,
                length: len as u32,
                lkey,
            };
            let mut wr = ibv_send_wr {
                wr_id: WR_WRITE | id as u64,
                sg_list: &mut sge,
                num_sge: 1,
                opcode: IBV_WR_RDMA_WRITE,
                send_flags: IBV_SEND_SIGNALED,
                remote_addr: addr + off as u64,
                rkey,
                ..Default::default()
            };
            // Franke's parallel engines: the chunks go round the pair's queue pairs
            let qp = self.qp(peer, k)?;
            self.post(qp, &mut wr)?;
            off += len;
            k += 1;
        }
        Ok(())
    }

    fn send_imm(&mut self, id: u32) -> Result<(), String> {
        let Op::Send(s) = &self.ops[op_index(id)] else {
            return Ok(());
        };
        let (peer, rid, addr, rkey) = (s.peer, s.rid, s.raddr, s.rkey);
        let mut wr = ibv_send_wr {
            wr_id: WR_IMM | id as u64,
            sg_list: core::ptr::null_mut(),
            num_sge: 0,
            opcode: IBV_WR_RDMA_WRITE_WITH_IMM,
            send_flags: IBV_SEND_SIGNALED,
            imm_data: rid,
            remote_addr: addr,
            rkey,
            ..Default::default()
        };
        let qp = self.qp(peer, 0)?;
        self.post(qp, &mut wr)
    }
}

/// Registrations of one run's buffers (see the module docs): found again when a buffer is
/// sent to several peers, released when the run ends.
#[derive(Default)]
pub struct Regs {
    list: Vec<(usize, usize, *mut ibv_mr)>,
}

// SAFETY: registrations of this process, used under the fabric's mutex.
unsafe impl Send for Regs {}

impl Regs {
    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// The registration covering `len` bytes at `addr`, made if there is none.
    fn get(&mut self, f: &Fabric, addr: usize, len: usize) -> Result<*mut ibv_mr, String> {
        if let Some(&(_, _, mr)) = self
            .list
            .iter()
            .find(|&&(a, l, _)| a <= addr && addr + len <= a + l)
        {
            return Ok(mr);
        }
        let mr = f.register(addr as *mut u8, len)?;
        self.list.push((addr, len, mr));
        Ok(mr)
    }
}

/// A communicator's way onto the fabric: its id, the same on every rank, and its ranks'
/// ranks in the library's world.
pub struct Wire {
    pub comm: u32,
    members: Vec<i32>,
    me: c_int,
    fabric: &'static Mutex<Fabric>,
    /// A duplicate of the communicator's shadow for failure notices, the receive posted on
    /// it, and the word it receives into.
    notice: Mutex<Notice>,
}

struct Notice {
    comm: MPI_Comm,
    req: MPI_Request,
    word: Box<c_int>,
    told: bool,
}

impl Drop for Wire {
    /// The notice receive and communicator go with the wire (at the latest at finalize: no
    /// request of the shim's may outlive `MPI_Finalize`, MPI-4.0 §11.2).
    fn drop(&mut self) {
        let n = self.notice.get_mut().unwrap_or_else(|e| e.into_inner());
        if n.req != MPI_REQUEST_NULL() {
            let _ = p2p::cancel(&mut n.req);
            let _ = p2p::wait(&mut n.req);
        }
        if n.comm != MPI_COMM_NULL() {
            // notices of several failing ranks: the ones that arrived are taken, so that no
            // message is left unmatched on the communicator
            while let Ok(Some(st)) = p2p::iprobe(MPI_ANY_SOURCE, 0, n.comm) {
                let mut w: c_int = 0;
                // SAFETY: one int into a local word.
                let r = unsafe {
                    p2p::recv(
                        (&mut w as *mut c_int).cast(),
                        1,
                        MPI_INT(),
                        st.MPI_SOURCE,
                        0,
                        n.comm,
                    )
                };
                if r.is_err() {
                    break;
                }
            }
            let _ = mpi_comm::free(&mut n.comm);
        }
    }
}

impl std::fmt::Debug for Wire {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Wire(comm {}, {} ranks)", self.comm, self.members.len())
    }
}

/// Sets up the wire of the communicator whose shadow is `shadow`: a collective over it
/// (every rank calls it at the same blocking collective). Opens the process's fabric
/// (`lib`, `qps` queue pairs per peer) the first time, connects the pairs of processes
/// that have no queue pairs yet, and agrees on the communicator's id. `Err` on every rank
/// alike where any rank cannot.
pub fn connect(shadow: MPI_Comm, lib: &str, qps: usize, eager: usize) -> Result<Arc<Wire>, String> {
    let opened = FABRIC.get_or_init(|| Fabric::open(lib, qps, eager).map(Mutex::new));
    let n = mpi_comm::size(shadow).map_err(|e| format!("MPI error {}", e.code()))? as usize;
    let me = mpi_comm::rank(shadow).map_err(|e| format!("MPI error {}", e.code()))? as usize;
    let gather = |mine: &[i64]| -> Result<Vec<i64>, String> {
        let mut all = vec![0i64; mine.len() * n];
        // SAFETY: `all` holds mine.len() words for every rank.
        unsafe { mpi_coll::allgather_i64(mine, &mut all, shadow) }
            .map_err(|e| format!("MPI error {} exchanging addresses", e.code()))?;
        Ok(all)
    };
    const W: usize = 7;
    let mine = match opened {
        Ok(f) => {
            let f = lock(f);
            [
                1,
                f.me as i64,
                f.gid[0] as i64,
                f.gid[1] as i64,
                f.lid as i64,
                f.next_comm as i64,
                f.eager as i64,
            ]
        }
        Err(_) => [0; W],
    };
    let info = gather(&mine)?;
    if let Some(r) = (0..n).find(|&r| info[r * W] == 0) {
        return Err(match opened {
            Err(e) if r == me => e.clone(),
            _ => format!("rank {r} of the communicator has no verbs device"),
        });
    }
    let Ok(fm) = opened else {
        unreachable!("every rank opened its fabric")
    };
    let mut f = lock(fm);
    let members: Vec<i32> = (0..n).map(|r| info[r * W + 1] as i32).collect();
    let comm = (0..n).map(|r| info[r * W + 5] as u32).max().unwrap_or(1);
    f.next_comm = comm + 1;
    // a receive registers its buffer where the sender may announce instead of sending
    // eagerly: the ranks agree on the smallest eager size
    f.eager = (0..n).map(|r| info[r * W + 6] as usize).min().unwrap_or(0);
    // the pairs without queue pairs yet: the same on both sides, since pairs are only
    // ever connected by collectives both belong to
    let mut created: HashMap<usize, Vec<*mut ibv_qp>> = HashMap::new();
    let mut err = None;
    for (j, &w) in members.iter().enumerate() {
        if j == me || w == f.me || f.peers.contains_key(&w) {
            continue;
        }
        let mut v = Vec::new();
        for _ in 0..f.qps_per_peer {
            match f.new_qp() {
                Ok(q) => v.push(q),
                Err(e) => err = Some(e),
            }
        }
        created.insert(j, v);
    }
    let k = f.qps_per_peer;
    let mut row = vec![0i64; n * k];
    for (&j, v) in &created {
        for (i, &q) in v.iter().enumerate() {
            // SAFETY: a queue pair just created.
            row[j * k + i] = unsafe { (*q).qp_num } as i64;
        }
    }
    let all = gather(&row)?;
    if err.is_none() {
        for (&j, v) in &created {
            let gid = [info[j * W + 2] as u64, info[j * W + 3] as u64];
            let lid = info[j * W + 4] as u16;
            for (i, &q) in v.iter().enumerate() {
                let qpn = all[j * n * k + me * k + i] as u32;
                if let Err(e) = f.connect_qp(q, qpn, gid, lid) {
                    err = Some(e);
                }
            }
        }
    }
    // every rank's queue pairs are ready to receive before anyone sends
    let ok = gather(&[err.is_none() as i64])?;
    if let Some(r) = ok.iter().position(|&o| o == 0) {
        for v in created.values() {
            for &q in v {
                // SAFETY: queue pairs this call created and nobody else knows.
                unsafe { (f.v.destroy_qp)(q) };
            }
        }
        return Err(match err {
            Some(e) => e,
            None => format!("rank {r} could not connect its queue pairs"),
        });
    }
    for (j, v) in created {
        for &q in &v {
            // SAFETY: as above.
            let qpn = unsafe { (*q).qp_num };
            f.by_qpn.insert(qpn, members[j]);
        }
        f.peers.insert(members[j], v);
    }
    let mut notice = Notice {
        comm: mpi_comm::dup(shadow).map_err(|e| format!("MPI error {} duplicating", e.code()))?,
        req: MPI_REQUEST_NULL(),
        word: Box::new(0),
        told: false,
    };
    // SAFETY: the word lives in the wire (boxed) until the receive is cancelled in drop.
    notice.req = unsafe {
        p2p::irecv(
            (&mut *notice.word as *mut c_int).cast(),
            1,
            MPI_INT(),
            MPI_ANY_SOURCE,
            0,
            notice.comm,
        )
    }
    .map_err(|e| format!("MPI error {} posting the notice receive", e.code()))?;
    let w = Arc::new(Wire {
        comm,
        members,
        me: me as c_int,
        fabric: fm,
        notice: Mutex::new(notice),
    });
    f.wires.retain(|w| w.strong_count() > 0);
    f.wires.push(Arc::downgrade(&w));
    Ok(w)
}

impl Wire {
    /// Tells every other rank of the communicator that this process's fabric failed (once),
    /// unless another rank's notice has arrived: that rank told them all already. (A rank
    /// whose peer failed first finds out late, from its own completions once the retries
    /// run out; a second notice sent then reached ranks that had drained theirs and left
    /// an unmatched message at finalize, once in CI.)
    fn notify(&self) {
        let mut n = self.notice.lock().unwrap_or_else(|e| e.into_inner());
        if n.req != MPI_REQUEST_NULL() && matches!(p2p::test(&mut n.req), Ok(true)) {
            n.told = true;
        }
        if n.told {
            return;
        }
        n.told = true;
        static WORD: c_int = 1;
        for r in (0..self.members.len() as c_int).filter(|&r| r != self.me) {
            // SAFETY: a static word; the request is freed and completes in the background.
            if let Ok(mut req) =
                unsafe { p2p::isend((&WORD as *const c_int).cast(), 1, MPI_INT(), r, 0, n.comm) }
            {
                let _ = p2p::request_free(&mut req);
            }
        }
    }

    /// Whether another rank reported a failure (its notice arrived).
    fn noticed(&self) -> bool {
        let mut n = self.notice.lock().unwrap_or_else(|e| e.into_inner());
        if n.req == MPI_REQUEST_NULL() {
            return false;
        }
        match p2p::test(&mut n.req) {
            Ok(true) => {
                n.told = true;
                true
            }
            _ => false,
        }
    }

    fn world(&self, peer: c_int) -> Result<i32, c_int> {
        self.members.get(peer as usize).copied().ok_or(MPI_ERR_RANK)
    }

    /// Posts a send of `len` bytes at `buf` to `peer` (a rank of the communicator, or
    /// `MPI_PROC_NULL`) with `tag`; the buffer must stay until the operation is done.
    pub fn send(
        &self,
        regs: &mut Regs,
        buf: *const u8,
        len: usize,
        peer: c_int,
        tag: c_int,
    ) -> Result<u32, c_int> {
        let mut f = lock(self.fabric);
        if f.failed.is_some() {
            return Err(MPI_ERR_OTHER);
        }
        let mut op = SendOp {
            peer: 0,
            buf,
            len,
            lkey: 0,
            writes: 0,
            rid: 0,
            cap: 0,
            raddr: 0,
            rkey: 0,
            done: None,
        };
        if peer == MPI_PROC_NULL {
            op.done = Some(Ok(0));
            return Ok(f.new_op(Op::Send(op)));
        }
        let w = self.world(peer)?;
        op.peer = w;
        let hdr = Hdr {
            kind: EAGER_MSG,
            comm: self.comm,
            tag,
            len: len as u64,
            ..Default::default()
        };
        let copy = || {
            // SAFETY: the schedule's send buffer holds `len` bytes.
            unsafe { core::slice::from_raw_parts(buf, len) }.to_vec()
        };
        if w == f.me {
            op.done = Some(Ok(len));
            let id = f.new_op(Op::Send(op));
            f.arrived(w, hdr, Arrival::Eager(copy()));
            return Ok(id);
        }
        f.sent_bytes += len as u64;
        if len <= f.eager {
            f.sent_eager += 1;
            // done once handed to the HCA, not before: a send that completed in the shim's
            // backlog would go nowhere once the process stops calling the shim (a rank that
            // left its last collective and waits in the library: its peer would wait
            // forever); then the HCA delivers it without this process
            let id = f.new_op(Op::Send(op));
            f.backlog.push_back(Work::Ctrl {
                peer: w,
                hdr,
                data: copy(),
                done: Some(id),
            });
            f.drain();
            return Ok(id);
        }
        f.sent_rdv += 1;
        let mr = match regs.get(&f, buf as usize, len) {
            Ok(m) => m,
            Err(e) => {
                f.fail(e);
                return Err(MPI_ERR_OTHER);
            }
        };
        // SAFETY: a registration made by the fabric.
        op.lkey = unsafe { (*mr).lkey };
        let id = f.new_op(Op::Send(op));
        f.backlog.push_back(Work::Ctrl {
            peer: w,
            hdr: Hdr {
                kind: RTS,
                sid: id,
                ..hdr
            },
            data: Vec::new(),
            done: None,
        });
        f.drain();
        Ok(id)
    }

    /// Posts a receive of up to `cap` bytes into `buf` from `peer` with `tag`.
    pub fn recv(
        &self,
        regs: &mut Regs,
        buf: *mut u8,
        cap: usize,
        peer: c_int,
        tag: c_int,
    ) -> Result<u32, c_int> {
        let mut f = lock(self.fabric);
        if f.failed.is_some() {
            return Err(MPI_ERR_OTHER);
        }
        let mut op = RecvOp {
            buf,
            cap,
            rkey: 0,
            own: core::ptr::null_mut(),
            expect: 0,
            done: None,
        };
        if peer == MPI_PROC_NULL {
            op.done = Some(Ok(0));
            return Ok(f.new_op(Op::Recv(op)));
        }
        let w = self.world(peer)?;
        if cap > f.eager && w != f.me {
            match regs.get(&f, buf as usize, cap) {
                // SAFETY: a registration made by the fabric.
                Ok(mr) => op.rkey = unsafe { (*mr).rkey },
                Err(e) => {
                    f.fail(e);
                    return Err(MPI_ERR_OTHER);
                }
            }
        }
        let id = f.new_op(Op::Recv(op));
        let key = (w, self.comm, tag);
        match f.unexpected.get_mut(&key).and_then(|q| q.pop_front()) {
            Some(a) => f.deliver(id, w, a),
            None => f.posted.entry(key).or_default().push_back(id),
        }
        f.drain();
        Ok(id)
    }

    /// Moves the fabric along, then reports each of `ids` that is done (and forgets it):
    /// `(position in ids, outcome)`.
    pub fn test(&self, ids: &[u32], out: &mut Vec<(usize, Outcome)>) {
        let mut f = lock(self.fabric);
        f.progress();
        // another rank's failure: looked for now and then while operations wait
        f.tests = f.tests.wrapping_add(1);
        if f.failed.is_none() && f.tests % 64 == 0 && self.noticed() {
            f.fail("another rank's verbs transport failed (its notice arrived)".into());
        }
        for (k, &id) in ids.iter().enumerate() {
            if !f.live(id) {
                continue;
            }
            let i = op_index(id);
            let done = match &f.ops[i] {
                Op::Send(s) => s.done,
                Op::Recv(r) => r.done,
                Op::Free => None,
            };
            if let Some(o) = done {
                if let Op::Recv(r) = &f.ops[i] {
                    if !r.own.is_null() {
                        // SAFETY: the receive's own registration; the data has arrived.
                        unsafe { (f.v.dereg_mr)(r.own) };
                    }
                }
                f.ops[i] = Op::Free;
                f.free_ops.push(i as u32);
                out.push((k, o));
            }
        }
    }

    /// Forgets operations of a run that stopped: receives no longer match (the caller then
    /// revokes their registrations with [`Wire::release`]). Sends already handed to the
    /// network go on; their memory is the caller's to keep.
    pub fn cancel(&self, ids: &[u32]) {
        let mut f = lock(self.fabric);
        for &id in ids {
            if !f.live(id) {
                continue;
            }
            for q in f.posted.values_mut() {
                q.retain(|&x| x != id);
            }
            let i = op_index(id);
            let own = match &mut f.ops[i] {
                Op::Recv(r) => core::mem::replace(&mut r.own, core::ptr::null_mut()),
                _ => core::ptr::null_mut(),
            };
            if !own.is_null() {
                // SAFETY: the receive's own registration, revoked with it.
                unsafe { (f.v.dereg_mr)(own) };
            }
            let in_network = matches!(&f.ops[i], Op::Send(s) if s.done.is_none());
            if !in_network {
                f.ops[i] = Op::Free;
                f.free_ops.push(i as u32);
            }
        }
    }

    /// Deregisters a finished run's buffers.
    pub fn release(&self, regs: &mut Regs) {
        let f = lock(self.fabric);
        for (_, _, mr) in regs.list.drain(..) {
            // SAFETY: a registration of the fabric's, no longer used by any operation.
            unsafe { (f.v.dereg_mr)(mr) };
        }
    }
}

/// The verbs line of the `SHIM_STATS` report (empty where no fabric was opened).
pub fn stats_line() -> String {
    match FABRIC.get() {
        Some(Ok(f)) => {
            let f = lock(f);
            format!(
                "verbs (this rank): device {}, {} peers x {} queue pairs, {} eager and {} rendezvous messages sent, {} bytes{}\n",
                f.device,
                f.peers.len(),
                f.qps_per_peer,
                f.sent_eager,
                f.sent_rdv,
                f.sent_bytes,
                f.failed
                    .as_ref()
                    .map(|w| format!(", failed: {w}"))
                    .unwrap_or_default()
            )
        }
        Some(Err(e)) => format!("verbs (this rank): not available ({e})\n"),
        None => String::new(),
    }
}

/// Closes the fabric at finalize (after every communicator's runs are done).
pub fn finalize() {
    if let Some(Ok(f)) = FABRIC.get() {
        lock(f).close();
    }
}

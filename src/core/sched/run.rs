//! Layer: core. May use: platform.
//!
//! One execution of a schedule: bound buffers, a scratch arena, dependency counters and
//! the outstanding point-to-point requests.
//!
//! `advance` does all the work that is possible without waiting: it executes ready local
//! actions, posts ready sends and receives (in channel order), and tests the outstanding
//! requests with one `PMPI_Testsome`, repeating while that completes something. It never
//! blocks, so it can be called from any MPI call, the progress thread, or a wait loop.

use core::ffi::{c_int, c_void};
use std::collections::VecDeque;
use std::mem::MaybeUninit;
use std::sync::Arc;

use super::{ALL_PEERS, Action, ActionId, Addr, Data, Schedule};
use crate::core::comm::CommState;
use crate::core::transport::node::{NONBLOCKING, Node, Place, Setup, phase_value};
use crate::core::transport::verbs::{Outcome, Regs, Wire};
use crate::platform::abi::*;
use crate::platform::mpi::{comm as mpi_comm, p2p};

#[repr(C, align(64))]
#[derive(Clone, Copy)]
struct Line([u8; 64]);

const WAITING: u8 = 0;
const READY: u8 = 1;
/// Ready, but an earlier action on the same channel is not posted yet.
const BLOCKED: u8 = 2;
const POSTED: u8 = 3;
const DONE: u8 = 4;

/// The shim's packed copy of a non-contiguous message (see `crate::hooks::p2p`): the bytes
/// of a send, or the buffer of a receive with the address to unpack it to.
enum Packed {
    Out(crate::core::dtype::bufpool::Bytes),
    In(crate::core::dtype::p2p::PackedBuf, *mut c_void),
}

/// A message's bytes on the verbs wire: the application's own where its layout is dense,
/// else the shim's packed copy (kept until the run ends: see `transport::verbs`).
enum Staged {
    Direct,
    Out(Vec<u8>),
    /// A packed receive: the bytes, and the count and datatype to unpack to at the address.
    In(Vec<u8>, *mut c_void, i64, MPI_Datatype),
}

/// A run's messages on the verbs wire.
struct OnWire {
    wire: Arc<Wire>,
    regs: Regs,
    ids: Vec<u32>,
    actions: Vec<ActionId>,
    staged: Vec<Staged>,
    /// Packed copies of finished messages, kept while their registrations are.
    kept: Vec<Vec<u8>>,
    out: Vec<(usize, Outcome)>,
}

/// A run's bookkeeping: per action, the dependencies left and the state; the ready
/// actions; per outstanding request, its action and packed message; `Testsome`'s output;
/// the shared-memory waits. Kept between runs (`BOOKS`), emptied: they were nine
/// allocations of every point-to-point run.
#[derive(Default)]
struct Book {
    remaining: Vec<u32>,
    state: Vec<u8>,
    ready: VecDeque<ActionId>,
    reqs: Vec<MPI_Request>,
    req_action: Vec<ActionId>,
    /// Per outstanding request: the packed message it moves, if the shim packs it.
    req_packed: Vec<Option<Packed>>,
    indices: Vec<c_int>,
    statuses: Vec<MPI_Status>,
    /// Shared-memory waits (`Watch`, `Claim`) not yet satisfied.
    watches: Vec<ActionId>,
}

// SAFETY: a book in `BOOKS` is empty (no request, no packed buffer); one in a run moves
// with its run, which is `Send` itself.
unsafe impl Send for Book {}

/// Emptied books, for the next runs (at most `BOOKS_KEPT`, of schedules up to
/// `BOOK_ACTIONS` actions: a large one's arrays are not worth keeping).
static BOOKS: std::sync::Mutex<Vec<Book>> = std::sync::Mutex::new(Vec::new());
const BOOKS_KEPT: usize = 32;
const BOOK_ACTIONS: usize = 1024;

impl Book {
    fn take() -> Book {
        BOOKS
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .pop()
            .unwrap_or_default()
    }

    /// Empties the book and keeps it for a later run (or frees it).
    fn give_back(mut self) {
        if self.state.capacity() == 0 || self.state.capacity() > BOOK_ACTIONS {
            return;
        }
        self.remaining.clear();
        self.state.clear();
        self.ready.clear();
        self.reqs.clear();
        self.req_action.clear();
        self.req_packed.clear();
        self.indices.clear();
        self.statuses.clear();
        self.watches.clear();
        let mut kept = BOOKS.lock().unwrap_or_else(|e| e.into_inner());
        if kept.len() < BOOKS_KEPT {
            kept.push(self);
        }
    }
}

impl Drop for Run {
    fn drop(&mut self) {
        std::mem::take(&mut self.book).give_back();
    }
}

/// The running state of one collective instance.
pub struct Run {
    sched: Arc<Schedule>,
    comm: Arc<CommState>,
    tag: c_int,
    bases: [usize; 4],
    _scratch: Box<[MaybeUninit<Line>]>,
    /// The communicator's shared-memory segment and this instance's place in it, for a
    /// schedule with shared-memory actions.
    shm: Option<(Arc<Node>, Place)>,
    /// The actions run one after another in the order built, as [`run_inline`] runs them
    /// (a schedule it accepts, [`inline_ok`]): `done` is the next one, and the dependency
    /// bookkeeping (`book`) is never taken.
    seq: bool,
    /// The communicator's verbs wire, where its messages go instead of the library.
    wire: Option<Box<OnWire>>,
    /// A non-blocking collective started while its segment was being set up: it runs
    /// there once the set-up is done, else this run's own (point-to-point) schedule.
    deferred: Option<Box<Deferred>>,
    /// The dependency and request bookkeeping (`Book`), taken at the start.
    book: Book,
    done: u32,
    started: bool,
    finished: bool,
    /// First error (an MPI error code), or MPI_SUCCESS.
    pub error: c_int,
    /// First truncation (a message or copy with more data than its destination): reported
    /// when the run finishes, which it still does, as the system MPI's collectives do. A
    /// run that stopped at the first truncation left the collective's other messages
    /// unmatched, to be matched by a later one.
    truncated: c_int,
}

/// See [`Run::deferred`].
struct Deferred {
    setup: Arc<Setup>,
    sched: Arc<Schedule>,
    at: Awaits,
    /// The call and its own (point-to-point) path, noted (`SHIM_STATS`) once the run knows
    /// which it takes.
    note: Option<(crate::platform::api::Fid, &'static str)>,
}

/// Where a deferred run goes on the segment once it is set up.
#[derive(Clone, Copy, Debug)]
pub enum Awaits {
    /// A non-blocking collective: its instance of the non-blocking channel.
    Instance(u32),
    /// The same, with one copy: where the node refuses it (`Node::cma`, the same on every
    /// rank) the run passes through the instance and runs its own schedule
    /// (`with_pass_through`).
    SingleCopy(u32),
    /// A start of a persistent collective: the next instance of its channel.
    Channel(u32),
}

// SAFETY: a Run only holds addresses of the application's buffers (which MPI requires to
// stay valid until the operation completes) and its own allocations; it is advanced by
// one thread at a time (it lives behind a Mutex).
unsafe impl Send for Run {}

impl Run {
    /// Binds a schedule to buffers (`send`, `recv` as the application passed them), a
    /// communicator and the instance's tag. Nothing is posted until `advance`.
    pub fn new(
        sched: Arc<Schedule>,
        comm: Arc<CommState>,
        tag: c_int,
        send: *const c_void,
        recv: *mut c_void,
    ) -> Run {
        // the shadow communicator is duplicated when the first schedule needs it
        comm.ensure_shadow();
        let lines = sched.scratch.div_ceil(64);
        let mut scratch: Box<[MaybeUninit<Line>]> = Box::new_uninit_slice(lines);
        let n = sched.len();
        let bases = [
            send as usize,
            recv as usize,
            scratch.as_mut_ptr() as usize,
            0,
        ];
        let wire = comm.wire().map(|wire| {
            Box::new(OnWire {
                wire,
                regs: Regs::default(),
                ids: Vec::new(),
                actions: Vec::new(),
                staged: Vec::new(),
                kept: Vec::new(),
                out: Vec::new(),
            })
        });
        Run {
            wire,
            deferred: None,
            // (taken at the start of a run that is not sequential)
            book: Book::default(),
            done: 0,
            started: false,
            finished: n == 0,
            error: MPI_SUCCESS,
            truncated: MPI_SUCCESS,
            sched,
            comm,
            tag,
            bases,
            _scratch: scratch,
            shm: None,
            seq: false,
        }
    }

    /// Gives a shared-memory schedule's run its place in the communicator's segment (the
    /// next instance of its channel, taken in the order every rank starts them).
    pub fn in_shm(mut self, node: Arc<Node>, place: Place) -> Run {
        self.bases[3] = place.region as usize;
        self.shm = Some((node, place));
        self.seq = inline_ok(&self.sched);
        self
    }

    /// Makes this (point-to-point) run wait for the communicator's segment, set up without
    /// waiting for the other ranks (`node::Setup`), and then run `sched` there `at` its
    /// place; where the segment cannot be, it runs its own schedule (every rank learns the
    /// same outcome, so their instances all go the same way). `note`: the call and its own
    /// path, for `SHIM_STATS`, which notes the path the run takes.
    pub fn deferred(
        mut self,
        setup: Arc<Setup>,
        sched: Arc<Schedule>,
        at: Awaits,
        note: Option<(crate::platform::api::Fid, &'static str)>,
    ) -> Run {
        self.deferred = Some(Box::new(Deferred {
            setup,
            sched,
            at,
            note,
        }));
        self.finished = false;
        self
    }

    /// Whether the run waits for its segment's set-up.
    pub fn is_deferred(&self) -> bool {
        self.deferred.is_some()
    }

    /// A deferred run once its segment's set-up is done: the run it becomes; false while
    /// the set-up goes on.
    fn resolve(&mut self) -> bool {
        let Some(d) = &self.deferred else {
            return true;
        };
        let comm = &self.comm;
        let Some(outcome) = d.setup.poll(|| comm.shadow_ready().then(|| comm.shadow())) else {
            return false;
        };
        let Some(d) = self.deferred.take() else {
            return true;
        };
        let segment = outcome
            .as_ref()
            .is_some_and(|node| node.cma || !matches!(d.at, Awaits::SingleCopy(_)));
        if let Some((fid, own)) = d.note {
            let path = if segment { d.sched.algorithm } else { own };
            crate::platform::counters::note_path(fid, "schedule", path);
        }
        match outcome {
            Some(node) => {
                let place = match d.at {
                    Awaits::Instance(i) | Awaits::SingleCopy(i) => {
                        node.place(NONBLOCKING, i.wrapping_sub(node.nb_from))
                    }
                    Awaits::Channel(ch) => node.next_persistent(ch),
                };
                let sched = if segment {
                    d.sched
                } else {
                    Arc::new(super::with_pass_through(&self.sched, self.comm.size))
                };
                let (send, recv) = (self.bases[0] as *const c_void, self.bases[1] as *mut c_void);
                *self = Run::new(sched, Arc::clone(&self.comm), self.tag, send, recv)
                    .in_shm(node, place);
            }
            None => self.finished = self.sched.len() == 0,
        }
        true
    }

    /// The communicator it runs on, as the program and the library name it.
    pub fn comm_handle(&self) -> MPI_Comm {
        self.comm.user
    }

    pub fn schedule(&self) -> &Arc<Schedule> {
        &self.sched
    }

    pub fn is_finished(&self) -> bool {
        self.finished
    }

    /// Actions completed so far (to tell whether an advance achieved anything).
    pub fn completed(&self) -> u32 {
        self.done
    }

    fn addr(&self, a: Addr) -> *mut c_void {
        self.bases[a.base as usize].wrapping_add_signed(a.off) as *mut c_void
    }

    /// Advances as far as possible without waiting; returns true once finished.
    pub fn advance(&mut self) -> bool {
        if self.deferred.is_some() && !self.resolve() {
            return false;
        }
        if self.finished {
            return true;
        }
        if !self.started {
            // The communicator's shadow may still be under construction (MPI_Comm_idup).
            if !self.comm.shadow_ready() {
                return false;
            }
            self.started = true;
            if !self.seq {
                self.book = Book::take();
                self.book.remaining.extend_from_slice(&self.sched.indeg);
                self.book.state.resize(self.sched.len(), WAITING);
                for v in 0..self.sched.len() as ActionId {
                    if self.book.remaining[v as usize] == 0 {
                        self.book.state[v as usize] = READY;
                        self.book.ready.push_back(v);
                    }
                }
            }
        }
        if self.seq {
            return self.advance_seq();
        }
        loop {
            while let Some(v) = self.book.ready.pop_front() {
                self.execute(v);
                if self.error != MPI_SUCCESS {
                    self.fail();
                    return true;
                }
            }
            let watched = !self.book.watches.is_empty() && self.check_watches();
            let tested = !self.book.reqs.is_empty() && self.test();
            let wired = self.wire.as_ref().is_some_and(|w| !w.ids.is_empty()) && self.test_wire();
            if !watched && !tested && !wired {
                break;
            }
            if self.error != MPI_SUCCESS {
                self.fail();
                return true;
            }
        }
        if self.done as usize == self.sched.len() {
            self.finish();
        }
        self.finished
    }

    /// Every action done: the run's result is its first truncation, if any.
    fn finish(&mut self) {
        self.finished = true;
        self.error = self.truncated;
        if let Some(w) = &mut self.wire {
            w.wire.release(&mut w.regs);
            w.kept.clear();
        }
        if let Some((node, place)) = &self.shm {
            drive_after(&self.sched, node, place);
        }
    }

    /// [`advance`](Self::advance) of a sequential run: the actions from the next one on
    /// until a wait that is not over yet.
    fn advance_seq(&mut self) -> bool {
        if self.error != MPI_SUCCESS {
            // failed before the run was made (`resumed`)
            self.fail();
            return true;
        }
        let Some((node, place)) = &self.shm else {
            self.error = MPI_ERR_INTERN;
            self.fail();
            return true;
        };
        let bases = self.bases;
        let addr = |a: Addr| bases[a.base as usize].wrapping_add_signed(a.off) as *mut c_void;
        match seq_steps(
            &self.sched,
            node,
            place,
            addr,
            &mut self.done,
            &mut self.truncated,
        ) {
            Seq::Waiting => false,
            Seq::Done => {
                self.finish();
                true
            }
            Seq::Failed(rc) => {
                self.error = rc;
                self.fail();
                true
            }
        }
    }

    /// A sequential run of a schedule whose first `done` actions the caller already
    /// carried out ([`seq_steps`]), with `truncated` and `error` as they left them.
    pub fn resumed(mut self, done: u32, truncated: c_int, error: c_int) -> Run {
        debug_assert!(self.seq);
        self.done = done;
        self.truncated = truncated;
        self.error = error;
        self
    }

    /// Whether an error code is a truncation, which the run records and goes on after.
    fn truncation(&mut self, rc: c_int) -> bool {
        let class = mpi_comm::error_class(rc).unwrap_or(rc);
        if class != MPI_ERR_TRUNCATE {
            return false;
        }
        if self.truncated == MPI_SUCCESS {
            self.truncated = rc;
        }
        true
    }

    fn execute(&mut self, v: ActionId) {
        // (a copy: the shared-memory actions take no reference count; the messages, which
        // ask the schedule about their channel, one)
        let action = self.sched.actions[v as usize];
        match action {
            Action::Send {
                data,
                peer,
                tag_offset,
            }
            | Action::Recv {
                data,
                peer,
                tag_offset,
            } => {
                let sched = Arc::clone(&self.sched);
                if let Some(p) = sched.has_prev_on_channel(v) {
                    if self.book.state[p as usize] < POSTED {
                        self.book.state[v as usize] = BLOCKED;
                        return;
                    }
                }
                let send = matches!(action, Action::Send { .. });
                let tag = self.tag + tag_offset;
                let rc = if self.wire.is_some() {
                    self.post_wire(send, data, peer, tag, v)
                } else {
                    let mut req = MPI_REQUEST_NULL();
                    let (rc, packed) = self.post(send, data, peer, tag, &mut req);
                    if rc == MPI_SUCCESS {
                        self.book.reqs.push(req);
                        self.book.req_action.push(v);
                        self.book.req_packed.push(packed);
                    }
                    rc
                };
                if rc != MPI_SUCCESS {
                    self.error = rc;
                    return;
                }
                self.book.state[v as usize] = POSTED;
                if let Some(n) = sched.next_on_channel(v) {
                    if self.book.state[n as usize] == BLOCKED {
                        self.book.state[n as usize] = READY;
                        self.book.ready.push_front(n);
                    }
                }
            }
            Action::Watch { .. } | Action::Claim => {
                if self.shm.is_none() {
                    return self.no_segment();
                }
                if self.satisfied(v) {
                    self.complete(v);
                } else {
                    self.book.state[v as usize] = POSTED;
                    self.book.watches.push(v);
                }
            }
            ref a => {
                let shm = self.shm.as_ref().map(|(node, place)| (&**node, place));
                let rc = step(a, shm, |x| self.addr(x));
                self.local_done(v, rc);
            }
        }
    }

    /// A shared-memory action in a run without a segment: the shim's own error.
    fn no_segment(&mut self) {
        self.error = MPI_ERR_INTERN;
    }

    /// Whether a shared-memory wait is over.
    fn satisfied(&self, v: ActionId) -> bool {
        match &self.shm {
            Some((node, place)) => wait_over(&self.sched.actions[v as usize], node, place),
            None => false,
        }
    }

    /// Completes the satisfied shared-memory waits; true if any was.
    fn check_watches(&mut self) -> bool {
        let mut any = false;
        let mut i = 0;
        while i < self.book.watches.len() {
            let v = self.book.watches[i];
            if self.satisfied(v) {
                self.book.watches.swap_remove(i);
                self.complete(v);
                any = true;
            } else {
                i += 1;
            }
        }
        any
    }

    /// Posts a message; a non-contiguous one of at least `SHIM_PACK_MIN_BYTES` travels as
    /// bytes the shim packs (design note seed-si-casper-mtmpi-thesis.md §3: the packing
    /// then runs on the worker pool), which every receive of the same type signature
    /// matches.
    fn post(
        &self,
        send: bool,
        d: Data,
        peer: c_int,
        tag: c_int,
        req: &mut MPI_Request,
    ) -> (c_int, Option<Packed>) {
        let buf = self.addr(d.addr);
        let mut d = d;
        d.dt = match self.sched.mpi_type(d.dt) {
            Ok(t) => t,
            Err(rc) => return (rc, None),
        };
        let comm = self.comm.shadow();
        let mut packed = if send {
            // SAFETY: buffers as for Copy.
            unsafe { crate::core::dtype::p2p::outgoing(buf, d.count, d.dt, peer) }.map(Packed::Out)
        } else {
            crate::core::dtype::p2p::incoming(d.count, d.dt, peer).map(|i| Packed::In(i, buf))
        };
        let posted = match &mut packed {
            // SAFETY: our packed buffers, kept with the request until it completes.
            Some(Packed::Out(b)) => unsafe {
                p2p::isend_c(
                    b.as_ptr().cast(),
                    b.len() as MPI_Count,
                    MPI_PACKED(),
                    peer,
                    tag,
                    comm,
                )
            },
            Some(Packed::In(i, _)) => unsafe {
                p2p::irecv_c(i.ptr(), i.len(), MPI_PACKED(), peer, tag, comm)
            },
            None => Self::post_typed(send, buf, d, peer, tag, comm),
        };
        match posted {
            Ok(r) => {
                *req = r;
                (MPI_SUCCESS, packed)
            }
            Err(e) => (e.code(), packed),
        }
    }

    /// Posts a message on the verbs wire: the bytes of a dense layout where they are, any
    /// other layout packed (by the shim's packer, or the library's for a type it cannot
    /// decode).
    fn post_wire(&mut self, send: bool, d: Data, peer: c_int, tag: c_int, v: ActionId) -> c_int {
        let buf = self.addr(d.addr);
        let dt = match self.sched.mpi_type(d.dt) {
            Ok(t) => t,
            Err(rc) => return rc,
        };
        let ti = match crate::core::dtype::info(dt) {
            Ok(t) => t,
            Err(rc) => return rc,
        };
        let bytes = (d.count.max(0) * ti.size) as usize;
        let (ptr, staged) = if ti.dense() || bytes == 0 {
            (
                (buf as *mut u8).wrapping_offset(ti.lb as isize),
                Staged::Direct,
            )
        } else if send {
            let mut b = vec![0u8; bytes];
            // SAFETY: the schedule's buffer holds count elements of dt; ours `bytes`.
            if let Err(rc) = unsafe { pack_message(buf, d.count, dt, &mut b) } {
                return rc;
            }
            (b.as_mut_ptr(), Staged::Out(b))
        } else {
            let mut b = vec![0u8; bytes];
            (b.as_mut_ptr(), Staged::In(b, buf, d.count, dt))
        };
        let Some(w) = self.wire.as_mut() else {
            return MPI_ERR_INTERN;
        };
        let posted = if send {
            w.wire.send(&mut w.regs, ptr, bytes, peer, tag)
        } else {
            w.wire.recv(&mut w.regs, ptr, bytes, peer, tag)
        };
        match posted {
            Ok(id) => {
                w.ids.push(id);
                w.actions.push(v);
                w.staged.push(staged);
                MPI_SUCCESS
            }
            Err(rc) => rc,
        }
    }

    /// Takes the wire's finished messages; true if any finished.
    fn test_wire(&mut self) -> bool {
        let Some(mut w) = self.wire.take() else {
            return false;
        };
        w.out.clear();
        w.wire.test(&w.ids, &mut w.out);
        let any = !w.out.is_empty();
        let mut finished = std::mem::take(&mut w.out);
        // positions from the highest, so each removal leaves the others in place
        finished.sort_unstable_by_key(|&(k, _)| std::cmp::Reverse(k));
        for &(k, outcome) in &finished {
            let v = w.actions.swap_remove(k);
            w.ids.swap_remove(k);
            let staged = w.staged.swap_remove(k);
            let got = match outcome {
                Ok(n) => n,
                Err(rc) => {
                    if !self.truncation(rc) {
                        self.error = rc;
                    }
                    usize::MAX
                }
            };
            match staged {
                Staged::In(b, user, count, dt) => {
                    let got = got.min(b.len());
                    // SAFETY: the receive's destination for count elements of dt; `got`
                    // bytes of ours arrived.
                    if let Err(rc) = unsafe { unpack_message(&b[..got], user, count, dt) } {
                        self.error = rc;
                    }
                    w.kept.push(b);
                }
                Staged::Out(b) => w.kept.push(b),
                Staged::Direct => {}
            }
            self.complete(v);
        }
        w.out = finished;
        self.wire = Some(w);
        any
    }

    /// Posts a message with its datatype, packed by the system MPI.
    fn post_typed(
        send: bool,
        buf: *mut c_void,
        d: Data,
        peer: c_int,
        tag: c_int,
        comm: MPI_Comm,
    ) -> crate::platform::mpi::MpiResult<MPI_Request> {
        // SAFETY: buffers as for Copy.
        unsafe {
            match (send, d.count <= c_int::MAX as i64) {
                (true, true) => p2p::isend(buf, d.count as c_int, d.dt, peer, tag, comm),
                (true, false) => p2p::isend_c(buf, d.count, d.dt, peer, tag, comm),
                (false, true) => p2p::irecv(buf, d.count as c_int, d.dt, peer, tag, comm),
                (false, false) => p2p::irecv_c(buf, d.count, d.dt, peer, tag, comm),
            }
        }
    }

    fn local_done(&mut self, v: ActionId, rc: c_int) {
        if rc != MPI_SUCCESS && !self.truncation(rc) {
            self.error = rc;
            return;
        }
        self.complete(v);
    }

    fn complete(&mut self, v: ActionId) {
        self.book.state[v as usize] = DONE;
        self.done += 1;
        // (the fields apart: no reference count taken per action)
        for &s in self.sched.successors(v) {
            let r = &mut self.book.remaining[s as usize];
            *r -= 1;
            if *r == 0 {
                self.book.state[s as usize] = READY;
                self.book.ready.push_back(s);
            }
        }
    }

    /// Tests the outstanding requests once; true if any completed.
    fn test(&mut self) -> bool {
        let n = self.book.reqs.len();
        self.book.indices.resize(n, 0);
        self.book.statuses.resize(n, MPI_Status::default());
        // arrays of n requests, n indices and n statuses
        let (outcount, in_status) = match p2p::testsome(
            &mut self.book.reqs,
            &mut self.book.indices,
            &mut self.book.statuses,
        ) {
            Ok(r) => r,
            Err(e) => {
                self.error = e.code();
                return true;
            }
        };
        if outcount == MPI_UNDEFINED || outcount <= 0 {
            return false;
        }
        for k in 0..outcount as usize {
            let i = self.book.indices[k] as usize;
            let e = self.book.statuses[k].MPI_ERROR;
            if in_status && e != MPI_SUCCESS && !self.truncation(e) {
                self.error = e;
            }
            if let Some(Packed::In(inc, user)) = &self.book.req_packed[i] {
                // SAFETY: the completed receive's status; the schedule's destination.
                unsafe { inc.finish(*user, &self.book.statuses[k]) };
            }
            self.book.req_packed[i] = None;
            let v = self.book.req_action[i];
            self.complete(v);
        }
        // drop completed requests (Testsome set them to MPI_REQUEST_NULL)
        let mut j = 0;
        for i in 0..n {
            if self.book.reqs[i] != MPI_REQUEST_NULL() {
                self.book.reqs[j] = self.book.reqs[i];
                self.book.req_action[j] = self.book.req_action[i];
                self.book.req_packed.swap(i, j);
                j += 1;
            }
        }
        self.book.reqs.truncate(j);
        self.book.req_action.truncate(j);
        self.book.req_packed.truncate(j);
        true
    }

    /// Stops after an error: outstanding requests are released (they complete in the
    /// background) and the run counts as finished, carrying the error.
    fn fail(&mut self) {
        for r in self.book.reqs.iter_mut() {
            // A receive left posted would match a message of a later collective (the
            // system MPI may give the shadow's context to a new communicator once it is
            // freed): it is cancelled first. A valid outstanding request of this run.
            let _ = p2p::cancel(r);
            let _ = p2p::request_free(r);
        }
        self.book.reqs.clear();
        self.book.req_action.clear();
        // the freed requests may still use the packed buffers: they are leaked
        for p in self.book.req_packed.drain(..).flatten() {
            std::mem::forget(p);
        }
        if let Some(w) = self.wire.take() {
            // receives no longer match, and their buffers are deregistered: a peer that
            // has not heard of the failure yet may still write into a buffer it was given,
            // which the program may reuse once the call returned; after deregistration
            // such a write fails at the peer. The shim's packed copies are leaked (as the
            // library's freed requests keep theirs).
            let OnWire {
                wire,
                mut regs,
                ids,
                staged,
                kept,
                ..
            } = *w;
            wire.cancel(&ids);
            wire.release(&mut regs);
            std::mem::forget((staged, kept));
        }
        self.book.ready.clear();
        self.book.watches.clear();
        if let Some((node, place)) = &self.shm {
            // the other ranks must not wait for this one forever
            node.abandon(place);
        }
        self.finished = true;
        tracing::debug!(target: "shim::sched", "{} failed with MPI error {}", self.sched.algorithm, self.error);
    }
}

/// The single-copy actions ([`Action::Expose`], [`Action::Fetch`]) on the segment of
/// `node`, with the run's addresses; the MPI error code.
/// Packs `count` elements of `dt` at `user` into `out` (its size is their type size).
///
/// # Safety
/// `user` holds `count` elements of `dt`.
unsafe fn pack_message(
    user: *const c_void,
    count: i64,
    dt: MPI_Datatype,
    out: &mut [u8],
) -> Result<(), c_int> {
    use crate::core::dtype::{flat, pack};
    match flat::get(dt) {
        // SAFETY: the caller's buffer; `out` holds count * size bytes.
        Ok(f) => unsafe {
            pack::run(
                &f,
                count,
                user as *mut u8,
                out.as_mut_ptr(),
                pack::Dir::Pack,
            )
        },
        Err(_) => {
            let mut pos = 0;
            // SAFETY: as above; the library packs a type the shim cannot decode.
            unsafe {
                crate::platform::mpi::dtype::pack_c(
                    user,
                    count,
                    dt,
                    out,
                    &mut pos,
                    MPI_COMM_WORLD(),
                )
            }
            .map_err(|e| e.code())?
        }
    }
    Ok(())
}

/// Unpacks the bytes that arrived (`got`) into `count` elements of `dt` at `user`.
///
/// # Safety
/// `user` holds `count` elements of `dt`; `got` is at most their packed size.
unsafe fn unpack_message(
    got: &[u8],
    user: *mut c_void,
    count: i64,
    dt: MPI_Datatype,
) -> Result<(), c_int> {
    use crate::core::dtype::{flat, pack};
    match flat::get(dt) {
        // SAFETY: the caller's buffer; `got` within the packed size.
        Ok(f) => unsafe {
            pack::run_bytes(
                &f,
                count,
                user as *mut u8,
                got.as_ptr() as *mut u8,
                got.len() as i64,
                pack::Dir::Unpack,
            )
        },
        Err(_) => {
            let size = crate::core::dtype::info(dt)?.size.max(1);
            let mut pos = 0;
            // SAFETY: as above; whole elements only.
            unsafe {
                crate::platform::mpi::dtype::unpack_c(
                    got,
                    &mut pos,
                    user,
                    got.len() as i64 / size,
                    dt,
                    MPI_COMM_WORLD(),
                )
            }
            .map_err(|e| e.code())?
        }
    }
    Ok(())
}

/// Whether a shared-memory wait (`Watch`, `Claim`; any other action: true) is over.
fn wait_over(a: &Action, node: &Node, place: &Place) -> bool {
    match *a {
        Action::Watch { peer, phase } => {
            let target = phase_value(place.instance, phase as u32);
            if peer == ALL_PEERS {
                (0..node.geo.ranks)
                    .filter(|&r| r != node.rank)
                    .all(|r| node.flag(place.region, r).is_reached(target))
            } else {
                node.flag(place.region, peer as u32).is_reached(target)
            }
        }
        Action::Claim => node.claim(place).is_ok(),
        _ => true,
    }
}

/// The addresses of a schedule without scratch on the segment: the caller's buffers and
/// its place (`Addr::base` 0, 1 and 3).
pub fn addresses(send: usize, recv: usize, place: &Place) -> impl Fn(Addr) -> *mut c_void {
    let bases = [send, recv, 0, place.region as usize];
    move |a: Addr| bases[a.base as usize].wrapping_add_signed(a.off) as *mut c_void
}

/// Where [`seq_steps`] stopped.
#[derive(Debug, PartialEq, Eq)]
pub enum Seq {
    /// At a wait that is not over.
    Waiting,
    /// Every action done (the truncation it met, if any, in `truncated`).
    Done,
    /// An action failed with this MPI error code (the run must fail: `Run::fail`).
    Failed(c_int),
}

/// Carries out a schedule [`inline_ok`] accepts one action after another, from action
/// `*done` on, as far as the first wait that is not over, without waiting; `*done` counts
/// the actions done, `*truncated` keeps the first truncation (the run goes on after one).
/// A run's sequential form, and a non-blocking call's first step before it makes a run
/// (`services::coll::lane`): it often finishes there.
pub fn seq_steps(
    sched: &Schedule,
    node: &Node,
    place: &Place,
    addr: impl Fn(Addr) -> *mut c_void,
    done: &mut u32,
    truncated: &mut c_int,
) -> Seq {
    while let Some(a) = sched.actions.get(*done as usize) {
        let rc = match a {
            Action::Watch { .. } | Action::Claim if !wait_over(a, node, place) => {
                return Seq::Waiting;
            }
            Action::Watch { .. } | Action::Claim => MPI_SUCCESS,
            a => step(a, Some((node, place)), &addr),
        };
        if rc != MPI_SUCCESS {
            let class = mpi_comm::error_class(rc).unwrap_or(rc);
            if class != MPI_ERR_TRUNCATE {
                return Seq::Failed(rc);
            }
            if *truncated == MPI_SUCCESS {
                *truncated = rc;
            }
        }
        *done += 1;
    }
    Seq::Done
}

/// At the end of a sequential run's first step outside a run ([`seq_steps`] said `Done`):
/// as a run's end ([`drive_after`]).
pub fn seq_finished(sched: &Schedule, node: &Node, place: &Place) {
    drive_after(sched, node, place);
}

/// Carries out an action that neither waits nor sends: a copy, a reduction, or one on the
/// segment (`shm`: the run's node and place; without them such an action is the shim's own
/// error). The MPI error code.
fn step(a: &Action, shm: Option<(&Node, &Place)>, addr: impl Fn(Addr) -> *mut c_void) -> c_int {
    match (*a, shm) {
        // SAFETY: the schedule addresses the caller's buffers and the scratch arena within
        // the extents the algorithm computed from the call's arguments.
        (Action::Copy { src, dst }, _) => unsafe {
            crate::core::dtype::copy(
                addr(src.addr),
                src.count,
                src.dt,
                addr(dst.addr),
                dst.count,
                dst.dt,
            )
        },
        // SAFETY: as for Copy.
        (
            Action::Reduce {
                src,
                dst,
                count,
                dt,
                op,
            },
            _,
        ) => unsafe { crate::core::ops::reduce_local(addr(src), addr(dst), count, dt, op) },
        (Action::Nop, _) => MPI_SUCCESS,
        (Action::Post { phase }, Some((node, place))) => {
            node.post(place.region, phase_value(place.instance, phase as u32));
            MPI_SUCCESS
        }
        (Action::Release, Some((node, place))) => {
            node.release(place);
            MPI_SUCCESS
        }
        (Action::Expose { .. } | Action::Fetch { .. }, Some((node, _))) => {
            single_copy(a, node, addr)
        }
        (Action::Length { at, bytes, check }, Some(_)) => {
            // (sizes beyond 4 GiB read as 4 GiB - 1: a slot holds less)
            let p = addr(at).cast::<u32>();
            if !check {
                // SAFETY: the size word of this rank's own cell (`node::LENGTH`).
                unsafe { p.write_volatile(bytes.clamp(0, u32::MAX as i64) as u32) };
                MPI_SUCCESS
            // SAFETY: the root's size word, written before the flag this check waited for.
            } else if unsafe { p.read_volatile() } as i64 > bytes {
                MPI_ERR_TRUNCATE
            } else {
                MPI_SUCCESS
            }
        }
        // a segment action without a segment, or a wait or message (the callers' own)
        _ => MPI_ERR_INTERN,
    }
}

fn single_copy(a: &Action, node: &Node, addr: impl Fn(Addr) -> *mut c_void) -> c_int {
    use crate::platform::shm::{Cma, cma};
    match *a {
        Action::Expose { src, at } => {
            // SAFETY: `at` is 8 bytes of this rank's own slot (the builder's layout).
            unsafe { addr(at).cast::<u64>().write_unaligned(addr(src) as u64) };
            MPI_SUCCESS
        }
        Action::Fetch {
            peer,
            at,
            off,
            dst,
            bytes,
        } => {
            // SAFETY: the peer wrote its address there before the flag this fetch waited
            // for (release and acquire).
            let remote = unsafe { addr(at).cast::<u64>().read_unaligned() } as usize;
            let Some(&pid) = node.pids.get(peer as usize) else {
                return MPI_ERR_INTERN;
            };
            // SAFETY: `dst` holds `bytes` bytes of this rank's buffer or scratch (the
            // extents the builder computed from the call); the kernel checks the peer's.
            let r = unsafe {
                cma(
                    Cma::Read,
                    pid,
                    addr(dst).cast(),
                    remote.wrapping_add_signed(off as isize),
                    bytes as usize,
                )
            };
            match r {
                Ok(()) => MPI_SUCCESS,
                Err(e) => {
                    tracing::warn!(target: "shim::shm", "single copy of {bytes} bytes from rank {peer} of the node failed: {e}");
                    MPI_ERR_OTHER
                }
            }
        }
        _ => MPI_ERR_INTERN,
    }
}

/// Runs a shared-memory schedule of a blocking collective to completion on the calling
/// thread, without a `Run`: its actions one after another in the order built (a topological
/// order in which every `Post` comes before the waits of the same schedule, so no rank
/// waits for something it has yet to do itself). Only schedules without messages and
/// scratch qualify ([`inline_ok`]). Waits share the cores (`transport::flag::wait`) and
/// call `progress` now and then (the caller's: it advances the other outstanding
/// schedules). Returns the MPI error code.
pub fn run_inline(
    sched: &Schedule,
    node: &Node,
    place: Place,
    send: *const c_void,
    recv: *mut c_void,
    progress: fn(),
) -> c_int {
    use crate::core::transport::flag;
    let addr = addresses(send as usize, recv as usize, &place);
    let policy = wait_policy();
    let poll = || -> Result<(), ()> {
        progress();
        node.drive();
        Ok(())
    };
    let me = node.rank;
    let mut truncated = MPI_SUCCESS;
    for a in &sched.actions {
        let rc = match *a {
            Action::Watch { peer, phase } => {
                let target = phase_value(place.instance, phase as u32);
                for r in 0..node.geo.ranks {
                    if r != me && (peer == ALL_PEERS || peer as u32 == r) {
                        let _ = flag::wait(node.flag(place.region, r), target, &policy, poll);
                    }
                }
                MPI_SUCCESS
            }
            Action::Claim => {
                let target = node.claim_target(&place);
                while let Err(r) = node.claim(&place) {
                    let _ = flag::wait(node.ack(place.channel, r), target, &policy, poll);
                }
                MPI_SUCCESS
            }
            ref a => step(a, Some((node, &place)), &addr),
        };
        if rc != MPI_SUCCESS {
            let class = mpi_comm::error_class(rc).unwrap_or(rc);
            if class == MPI_ERR_TRUNCATE {
                if truncated == MPI_SUCCESS {
                    truncated = rc;
                }
                continue;
            }
            // as `Run::fail`: the others must not wait for this rank
            node.abandon(&place);
            return rc;
        }
    }
    drive_after(sched, node, &place);
    truncated
}

/// At the end of a collective on the segment: lets the library run once if a rank this
/// one watched marked its cell at this instance (`Node::post`: its process had called the
/// library), or if this process called it since it last looked, as a collective through
/// the library would have run the library's progress at both ends.
fn drive_after(sched: &Schedule, node: &Node, place: &Place) {
    let me = node.rank;
    let marked = |r: u32| r != me && node.had_traffic(place.region, r, place.instance);
    let need = crate::core::transport::take_library_traffic()
        || sched.actions.iter().any(|a| match *a {
            Action::Watch { peer, .. } if peer == ALL_PEERS => (0..node.geo.ranks).any(marked),
            Action::Watch { peer, .. } => marked(peer as u32),
            _ => false,
        });
    if need {
        // the communicator's private duplicate and the library's world
        node.drive();
    }
}

/// How a blocking shared-memory collective waits: spinning first where every rank has a
/// processor, yielding almost at once where ranks outnumber them (the rank waited for
/// needs this processor).
fn wait_policy() -> crate::core::transport::flag::WaitPolicy {
    let mut p = crate::core::transport::flag::WaitPolicy::default();
    // The first polls go without the library: most waits of a collective between ranks
    // that each have a processor end within a few hundred polls. Then the library runs
    // every few polls and at every yield, and the wait never sleeps, as the libraries'
    // own collectives never do: a peer may need this rank's library to move before it can
    // come here (its passive-target RMA on this rank, as in OpenCoarrays' lock loops:
    // 10^5 epochs that each wait for polls of the target, which sleeps would stretch).
    p.poll_every = 8;
    p.poll_after = 256;
    if crate::platform::proc::oversubscribed() {
        p.spins = 16;
        p.poll_after = 0;
    }
    p
}

/// Whether [`run_inline`] can carry a schedule: shared memory only, no scratch.
pub fn inline_ok(sched: &Schedule) -> bool {
    sched.shm && sched.scratch == 0 && !sched.messages
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::sched::{Addr, Builder, Data};
    use crate::platform::mpi::fake::{self, Call};

    /// The request of the shadow's duplication and the shadow the fake hands out.
    const DUP_REQ: i64 = 90;
    const SHADOW: i64 = 0x4400_0123;
    const TAG: c_int = 640;
    /// Error codes as an MPI library returns them (more than the class).
    const CODE: c_int = 0x0004_2a06;
    const CODE_TRUNC: c_int = 0x0004_2a0e;

    /// A fake MPI for runs: `custom` answers first (`None`: the default). Defaults: the
    /// user communicator has no state yet (rank 0 of 2); its duplicate is `SHADOW`,
    /// complete at the first test; posts get requests 100, 101, ...; `testsome` completes
    /// every request; `error_class` is the identity.
    fn mpi(
        mut custom: impl FnMut(&Call) -> Option<Result<Vec<i64>, c_int>> + 'static,
    ) -> fake::Guard {
        let mut next = 100;
        fake::install(move |c| {
            if let Some(r) = custom(c) {
                return r;
            }
            if let Some(words) = fake::rank0_of_two(c.name) {
                return Ok(words);
            }
            Ok(match c.name {
                "comm_idup" => vec![DUP_REQ, SHADOW],
                "test" => vec![1],
                "isend" | "irecv" | "isend_c" | "irecv_c" => {
                    next += 1;
                    vec![next - 1]
                }
                "testsome" => std::iter::once(c.args[0]).chain(0..c.args[0]).collect(),
                "error_class" => vec![c.args[0]],
                _ => vec![],
            })
        })
    }

    /// A run of `b` on a fresh state of the user communicator `user` (every test its own
    /// handle: the state is cached per thread and communicator).
    fn run_of(b: Builder, user: i64, send: *const c_void, recv: *mut c_void) -> Run {
        let st =
            crate::core::comm::get(user as MPI_Comm).expect("a state for the fake communicator");
        Run::new(Arc::new(b.finish()), st, TAG, send, recv)
    }

    /// The messages posted so far: (call, [count, peer, tag, comm]).
    fn posts() -> Vec<(&'static str, Vec<i64>)> {
        fake::calls()
            .into_iter()
            .filter(|c| c.name.starts_with("isend") || c.name.starts_with("irecv"))
            // the seam records (buf, count, datatype, peer, tag, comm): keep count, peer, tag, comm
            .map(|c| (c.name, vec![c.args[1], c.args[3], c.args[4], c.args[5]]))
            .collect()
    }

    fn args_of(name: &str) -> Vec<Vec<i64>> {
        fake::calls()
            .into_iter()
            .filter(|c| c.name == name)
            .map(|c| c.args)
            .collect()
    }

    const NOBUF: *mut c_void = core::ptr::null_mut();

    /// A schedule on the segment without messages runs its actions one after another: as
    /// far as the first wait that is not over, then on from there (rank 0 of two reads
    /// rank 1's block, `Watch` then `Copy` then `Release`).
    #[test]
    fn a_run_on_the_segment_goes_action_by_action_to_the_first_open_wait() {
        use crate::core::transport::node::{self, DATA};
        let _g = mpi(|c| (c.name == "test").then(|| Ok(vec![1])));
        let n = Arc::new(node::for_tests(2, 4));
        let place = n.place(node::NONBLOCKING, 0);
        let cell = n.geo.cell() as i64;
        let mut b = Builder::new("t");
        let w = b.watch(1, 1, &[]);
        let src = Data::new(Addr::shm(cell + DATA as i64), 2, MPI_INT());
        let cp = b.copy(src, Data::new(Addr::recv(0), 2, MPI_INT()), &[w]);
        b.release(&[cp]);
        let mut got = [0i32; 2];
        let mut run =
            run_of(b, 0x4400_1011, NOBUF, got.as_mut_ptr().cast()).in_shm(Arc::clone(&n), place);
        assert!(run.seq, "no messages, no scratch: the sequential form");
        assert!(!run.advance());
        assert_eq!(run.completed(), 0, "rank 1 has not posted");
        assert!(!run.advance());
        // rank 1 writes its block and posts phase 1 of instance 0
        // SAFETY: rank 1's slot in the test's own segment, 8 bytes from its start.
        unsafe {
            place
                .region
                .add(cell as usize + DATA)
                .cast::<[i32; 2]>()
                .write_unaligned([7, 9])
        };
        n.flag(place.region, 1).publish(phase_value(0, 1));
        assert!(run.advance());
        assert_eq!(run.completed(), 3);
        assert_eq!((run.error, got), (MPI_SUCCESS, [7, 9]));
        assert_eq!(n.ack(node::NONBLOCKING, 0).load(), 1, "released");
        // a finished run stays finished
        assert!(run.advance());
        assert_eq!(run.completed(), 3);
    }

    #[test]
    fn messages_wait_for_the_shadow_and_go_on_it_with_the_instance_tag() {
        let mut tests = 0;
        let _g = mpi(move |c| {
            (c.name == "test").then(|| {
                tests += 1;
                Ok(vec![(tests > 1) as i64])
            })
        });
        let mut b = Builder::new("t");
        b.send(Data::new(Addr::send(0), 3, MPI_INT()), 1, &[]);
        b.recv(Data::new(Addr::recv(0), 3, MPI_INT()), 1, &[]);
        let user = 0x4400_1001;
        let mut run = run_of(b, user, NOBUF, NOBUF);
        // the duplicate of the user communicator starts with the run
        assert_eq!(args_of("comm_idup"), [vec![user]]);
        // not duplicated yet: nothing is posted
        assert!(!run.advance());
        assert!(posts().is_empty());
        assert_eq!(args_of("test"), [vec![DUP_REQ]]);
        // duplicated: errors are returned on the shadow, and both messages go on it
        assert!(run.advance());
        assert_eq!(
            args_of("comm_set_errhandler"),
            [vec![SHADOW, MPI_ERRORS_RETURN() as i64]]
        );
        assert_eq!(
            posts(),
            [
                ("isend", vec![3, 1, TAG as i64, SHADOW]),
                ("irecv", vec![3, 1, TAG as i64, SHADOW])
            ]
        );
        assert_eq!(args_of("testsome"), [vec![2]]);
        assert_eq!(run.error, MPI_SUCCESS);
        assert!(run.is_finished());
        assert_eq!(run.completed(), 2);
        // a finished run makes no more calls
        let n = fake::calls().len();
        assert!(run.advance());
        assert_eq!(fake::calls().len(), n);
    }

    #[test]
    fn dependencies_and_channel_order_decide_when_messages_are_posted() {
        let mut testsomes = 0;
        let _g = mpi(move |c| {
            (c.name == "testsome" && {
                testsomes += 1;
                testsomes == 1
            })
            .then(|| Ok(vec![0]))
        });
        let mut b = Builder::new("t");
        let r = b.recv(Data::new(Addr::recv(0), 1, MPI_INT()), 2, &[]);
        // the first send to 1 waits for the receive; the second has no dependency but
        // must follow the first on the channel to 1
        b.send(Data::new(Addr::send(0), 1, MPI_INT()), 1, &[r]);
        b.send(Data::new(Addr::send(4), 2, MPI_INT()), 1, &[]);
        // another channel (tag offset 3) is not held up
        b.send_tagged(Data::new(Addr::send(0), 4, MPI_INT()), 1, 3, &[]);
        let mut run = run_of(b, 0x4400_1002, NOBUF, NOBUF);
        assert!(!run.advance(), "nothing completed yet");
        assert_eq!(
            posts(),
            [
                ("irecv", vec![1, 2, TAG as i64, SHADOW]),
                ("isend", vec![4, 1, TAG as i64 + 3, SHADOW])
            ]
        );
        assert!(run.advance());
        assert_eq!(
            posts()[2..],
            [
                ("isend", vec![1, 1, TAG as i64, SHADOW]),
                ("isend", vec![2, 1, TAG as i64, SHADOW])
            ]
        );
        assert_eq!(run.error, MPI_SUCCESS);
    }

    #[test]
    fn an_error_posting_stops_the_run_and_cancels_and_frees_what_was_posted() {
        let _g = mpi(|c| (c.name == "isend").then_some(Err(CODE)));
        let mut b = Builder::new("t");
        b.recv(Data::new(Addr::recv(0), 1, MPI_INT()), 1, &[]);
        b.send(Data::new(Addr::send(0), 1, MPI_INT()), 1, &[]);
        let mut run = run_of(b, 0x4400_1003, NOBUF, NOBUF);
        assert!(run.advance(), "a failed run is finished");
        assert_eq!(run.error, CODE, "the code comes back unchanged");
        assert!(run.is_finished());
        // the posted receive would match a later collective's message: cancelled, freed
        assert_eq!(args_of("cancel"), [vec![100]]);
        assert_eq!(args_of("request_free"), [vec![100]]);
        assert!(args_of("testsome").is_empty());
        assert_eq!(run.completed(), 0);
    }

    #[test]
    fn an_error_of_testsome_fails_the_run_with_its_code() {
        let _g = mpi(|c| (c.name == "testsome").then_some(Err(CODE)));
        let mut b = Builder::new("t");
        b.recv(Data::new(Addr::recv(0), 1, MPI_INT()), 1, &[]);
        b.send(Data::new(Addr::send(0), 1, MPI_INT()), 1, &[]);
        let mut run = run_of(b, 0x4400_1004, NOBUF, NOBUF);
        assert!(run.advance());
        assert_eq!(run.error, CODE);
        assert_eq!(args_of("cancel"), [vec![100], vec![101]]);
        assert_eq!(args_of("request_free"), [vec![100], vec![101]]);
    }

    #[test]
    fn errors_in_statuses_fail_the_run_unless_they_are_truncations() {
        // (code in the completed request's status, its class, the run goes on)
        let cases = [
            (CODE_TRUNC, MPI_ERR_TRUNCATE, true),
            (CODE, MPI_ERR_OTHER, false),
        ];
        for (k, (code, class, goes_on)) in cases.into_iter().enumerate() {
            let mut testsomes = 0;
            let _g = mpi(move |c| match c.name {
                "error_class" => Some(Ok(vec![if c.args[0] == code as i64 {
                    class as i64
                } else {
                    c.args[0]
                }])),
                // the first request completes with an error in its status
                "testsome" => {
                    testsomes += 1;
                    (testsomes == 1).then(|| Ok(vec![1, 0, code as i64]))
                }
                _ => None,
            });
            let mut b = Builder::new("t");
            b.recv(Data::new(Addr::recv(0), 1, MPI_INT()), 1, &[]);
            b.recv(Data::new(Addr::recv(4), 1, MPI_INT()), 2, &[]);
            let mut run = run_of(b, 0x4400_1010 + k as i64, NOBUF, NOBUF);
            assert!(run.advance());
            assert!(run.is_finished());
            // the code, not its class, comes back
            assert_eq!(run.error, code, "case {k}");
            assert_eq!(args_of("error_class"), [vec![code as i64]]);
            if goes_on {
                // a truncation is reported at the end; the other message still completed
                assert_eq!(run.completed(), 2);
                assert!(args_of("cancel").is_empty());
            } else {
                assert_eq!(run.completed(), 1);
                assert_eq!(args_of("cancel"), [vec![101]]);
                assert_eq!(args_of("request_free"), [vec![101]]);
            }
        }
    }

    #[test]
    fn local_actions_need_no_mpi_call_and_release_their_successors() {
        let _g = mpi(|_| None);
        let src = [1i32, 2, 3];
        let mut dst = [0i32; 3];
        let mut b = Builder::new("t");
        let c = b.copy(
            Data::new(Addr::send(0), 3, MPI_INT()),
            Data::new(Addr::recv(0), 3, MPI_INT()),
            &[],
        );
        let r = b.reduce(Addr::send(0), Addr::recv(0), 3, MPI_INT(), MPI_SUM(), &[c]);
        b.send(Data::new(Addr::recv(0), 3, MPI_INT()), 1, &[r]);
        let mut run = run_of(b, 0x4400_1005, src.as_ptr().cast(), dst.as_mut_ptr().cast());
        assert!(run.advance());
        assert_eq!(dst, [2, 4, 6]);
        assert_eq!(posts(), [("isend", vec![3, 1, TAG as i64, SHADOW])]);
        assert!(!fake::names().contains(&"reduce_local"));
        assert_eq!(run.error, MPI_SUCCESS);
    }

    #[test]
    fn a_truncating_copy_is_reported_when_the_run_finishes() {
        let _g = mpi(|_| None);
        let src = [7i32, 8];
        let mut dst = [0i32; 1];
        let mut b = Builder::new("t");
        let c = b.copy(
            Data::new(Addr::send(0), 2, MPI_INT()),
            Data::new(Addr::recv(0), 1, MPI_INT()),
            &[],
        );
        b.send(Data::new(Addr::recv(0), 1, MPI_INT()), 1, &[c]);
        let mut run = run_of(b, 0x4400_1006, src.as_ptr().cast(), dst.as_mut_ptr().cast());
        assert!(run.advance());
        // what fits is copied, and the send after it still goes
        assert_eq!(dst, [7]);
        assert_eq!(posts().len(), 1);
        assert_eq!(run.error, MPI_ERR_TRUNCATE);
    }

    #[test]
    fn counts_beyond_int_use_the_large_count_calls() {
        let big = c_int::MAX as i64 + 1;
        for (k, (count, send, recv)) in [(5i64, "isend", "irecv"), (big, "isend_c", "irecv_c")]
            .into_iter()
            .enumerate()
        {
            let _g = mpi(|_| None);
            let mut b = Builder::new("t");
            b.send(Data::new(Addr::send(0), count, MPI_BYTE()), 1, &[]);
            b.recv(Data::new(Addr::recv(0), count, MPI_BYTE()), 1, &[]);
            let mut run = run_of(b, 0x4400_1020 + k as i64, NOBUF, NOBUF);
            assert!(run.advance());
            assert_eq!(
                posts(),
                [
                    (send, vec![count, 1, TAG as i64, SHADOW]),
                    (recv, vec![count, 1, TAG as i64, SHADOW])
                ]
            );
        }
    }
}

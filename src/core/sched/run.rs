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

use super::{Action, ActionId, Addr, Data, Schedule};
use crate::core::comm::CommState;
use crate::platform::abi::*;
use crate::platform::api::pmpi;

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

/// The running state of one collective instance.
pub struct Run {
    sched: Arc<Schedule>,
    comm: Arc<CommState>,
    tag: c_int,
    bases: [usize; 3],
    _scratch: Box<[MaybeUninit<Line>]>,
    remaining: Vec<u32>,
    state: Vec<u8>,
    ready: VecDeque<ActionId>,
    reqs: Vec<MPI_Request>,
    req_action: Vec<ActionId>,
    /// Per outstanding request: the packed message it moves, if the shim packs it.
    req_packed: Vec<Option<Packed>>,
    indices: Vec<c_int>,
    statuses: Vec<MPI_Status>,
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
        let bases = [send as usize, recv as usize, scratch.as_mut_ptr() as usize];
        Run {
            remaining: sched.indeg.clone(),
            state: vec![WAITING; n],
            ready: VecDeque::new(),
            reqs: Vec::new(),
            req_action: Vec::new(),
            req_packed: Vec::new(),
            indices: Vec::new(),
            statuses: Vec::new(),
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
        }
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
        if self.finished {
            return true;
        }
        if !self.started {
            // The communicator's shadow may still be under construction (MPI_Comm_idup).
            if !self.comm.shadow_ready() {
                return false;
            }
            self.started = true;
            for v in 0..self.sched.len() as ActionId {
                if self.remaining[v as usize] == 0 {
                    self.state[v as usize] = READY;
                    self.ready.push_back(v);
                }
            }
        }
        loop {
            while let Some(v) = self.ready.pop_front() {
                self.execute(v);
                if self.error != MPI_SUCCESS {
                    self.fail();
                    return true;
                }
            }
            if self.reqs.is_empty() || !self.test() {
                break;
            }
            if self.error != MPI_SUCCESS {
                self.fail();
                return true;
            }
        }
        if self.done as usize == self.sched.len() {
            self.finished = true;
            self.error = self.truncated;
        }
        self.finished
    }

    /// Whether an error code is a truncation, which the run records and goes on after.
    fn truncation(&mut self, rc: c_int) -> bool {
        let mut class = rc;
        // SAFETY: valid out-pointer.
        unsafe { pmpi::PMPI_Error_class(rc, &mut class) };
        if class != MPI_ERR_TRUNCATE {
            return false;
        }
        if self.truncated == MPI_SUCCESS {
            self.truncated = rc;
        }
        true
    }

    fn execute(&mut self, v: ActionId) {
        let sched = Arc::clone(&self.sched);
        match sched.actions[v as usize] {
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
                if let Some(p) = sched.has_prev_on_channel(v) {
                    if self.state[p as usize] < POSTED {
                        self.state[v as usize] = BLOCKED;
                        return;
                    }
                }
                let send = matches!(sched.actions[v as usize], Action::Send { .. });
                let mut req = MPI_REQUEST_NULL();
                let (rc, packed) = self.post(send, data, peer, self.tag + tag_offset, &mut req);
                if rc != MPI_SUCCESS {
                    self.error = rc;
                    return;
                }
                self.state[v as usize] = POSTED;
                self.reqs.push(req);
                self.req_action.push(v);
                self.req_packed.push(packed);
                if let Some(n) = sched.next_on_channel(v) {
                    if self.state[n as usize] == BLOCKED {
                        self.state[n as usize] = READY;
                        self.ready.push_front(n);
                    }
                }
            }
            Action::Copy { src, dst } => {
                // SAFETY: the schedule addresses the caller's buffers and the scratch arena
                // within the extents the algorithm computed from the call's arguments.
                let rc = unsafe {
                    crate::core::dtype::copy(
                        self.addr(src.addr),
                        src.count,
                        src.dt,
                        self.addr(dst.addr),
                        dst.count,
                        dst.dt,
                    )
                };
                self.local_done(v, rc);
            }
            Action::Reduce {
                src,
                dst,
                count,
                dt,
                op,
            } => {
                // SAFETY: as for Copy.
                let rc = unsafe {
                    crate::core::ops::reduce_local(self.addr(src), self.addr(dst), count, dt, op)
                };
                self.local_done(v, rc);
            }
            Action::Nop => self.local_done(v, MPI_SUCCESS),
        }
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
        let rc = match &mut packed {
            // SAFETY: our packed buffers, kept with the request until it completes.
            Some(Packed::Out(b)) => unsafe {
                pmpi::PMPI_Isend_c(
                    b.as_ptr().cast(),
                    b.len() as MPI_Count,
                    MPI_PACKED(),
                    peer,
                    tag,
                    comm,
                    req,
                )
            },
            Some(Packed::In(i, _)) => unsafe {
                pmpi::PMPI_Irecv_c(i.ptr(), i.len(), MPI_PACKED(), peer, tag, comm, req)
            },
            None => Self::post_typed(send, buf, d, peer, tag, comm, req),
        };
        (rc, packed)
    }

    /// Posts a message with its datatype, packed by the system MPI.
    fn post_typed(
        send: bool,
        buf: *mut c_void,
        d: Data,
        peer: c_int,
        tag: c_int,
        comm: MPI_Comm,
        req: &mut MPI_Request,
    ) -> c_int {
        // SAFETY: buffers as for Copy; `req` is a valid out-pointer.
        unsafe {
            match (send, d.count <= c_int::MAX as i64) {
                (true, true) => pmpi::PMPI_Isend(buf, d.count as c_int, d.dt, peer, tag, comm, req),
                (true, false) => pmpi::PMPI_Isend_c(buf, d.count, d.dt, peer, tag, comm, req),
                (false, true) => {
                    pmpi::PMPI_Irecv(buf, d.count as c_int, d.dt, peer, tag, comm, req)
                }
                (false, false) => pmpi::PMPI_Irecv_c(buf, d.count, d.dt, peer, tag, comm, req),
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
        self.state[v as usize] = DONE;
        self.done += 1;
        let sched = Arc::clone(&self.sched);
        for &s in sched.successors(v) {
            let r = &mut self.remaining[s as usize];
            *r -= 1;
            if *r == 0 {
                self.state[s as usize] = READY;
                self.ready.push_back(s);
            }
        }
    }

    /// Tests the outstanding requests once; true if any completed.
    fn test(&mut self) -> bool {
        let n = self.reqs.len();
        self.indices.resize(n, 0);
        self.statuses.resize(n, MPI_Status::default());
        let mut outcount: c_int = 0;
        // SAFETY: arrays of n requests, n indices and n statuses.
        let rc = unsafe {
            pmpi::PMPI_Testsome(
                n as c_int,
                self.reqs.as_mut_ptr(),
                &mut outcount,
                self.indices.as_mut_ptr(),
                self.statuses.as_mut_ptr(),
            )
        };
        if rc != MPI_SUCCESS && rc != MPI_ERR_IN_STATUS {
            self.error = rc;
            return true;
        }
        if outcount == MPI_UNDEFINED || outcount <= 0 {
            return false;
        }
        for k in 0..outcount as usize {
            let i = self.indices[k] as usize;
            let e = self.statuses[k].MPI_ERROR;
            if rc == MPI_ERR_IN_STATUS && e != MPI_SUCCESS && !self.truncation(e) {
                self.error = e;
            }
            if let Some(Packed::In(inc, user)) = &self.req_packed[i] {
                // SAFETY: the completed receive's status; the schedule's destination.
                unsafe { inc.finish(*user, &self.statuses[k]) };
            }
            self.req_packed[i] = None;
            let v = self.req_action[i];
            self.complete(v);
        }
        // drop completed requests (Testsome set them to MPI_REQUEST_NULL)
        let mut j = 0;
        for i in 0..n {
            if self.reqs[i] != MPI_REQUEST_NULL() {
                self.reqs[j] = self.reqs[i];
                self.req_action[j] = self.req_action[i];
                self.req_packed.swap(i, j);
                j += 1;
            }
        }
        self.reqs.truncate(j);
        self.req_action.truncate(j);
        self.req_packed.truncate(j);
        true
    }

    /// Stops after an error: outstanding requests are released (they complete in the
    /// background) and the run counts as finished, carrying the error.
    fn fail(&mut self) {
        for r in self.reqs.iter_mut() {
            // A receive left posted would match a message of a later collective (the
            // system MPI may give the shadow's context to a new communicator once it is
            // freed): it is cancelled first. SAFETY: a valid outstanding request of this run.
            unsafe {
                pmpi::PMPI_Cancel(r);
                pmpi::PMPI_Request_free(r);
            }
        }
        self.reqs.clear();
        self.req_action.clear();
        // the freed requests may still use the packed buffers: they are leaked
        for p in self.req_packed.drain(..).flatten() {
            std::mem::forget(p);
        }
        self.ready.clear();
        self.finished = true;
        tracing::debug!(target: "shim::sched", "{} failed with MPI error {}", self.sched.algorithm, self.error);
    }
}

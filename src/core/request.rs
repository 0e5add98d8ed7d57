//! Layer: core. May use: platform.
//!
//! Requests for the shim's collectives, and the request-completion family.
//!
//! Choice (design notes, "Decisions left to you"): shim-owned handle values rather than
//! generalized requests. A generalized request cannot be restarted, so persistent
//! collectives would need a second mechanism anyway, and completion would depend on the
//! system MPI calling back into the shim. Shim handles are integers MPICH never produces:
//! handle kind 0 ("invalid" in MPICH's encoding) with the request object type, i.e.
//! `MPI_REQUEST_NULL + index` (see `abi::shim_request_*`). Every function that takes a
//! request is intercepted; arrays that mix shim and native requests are split, the native
//! part handed to the system MPI and the shim part completed here, with
//! `MPI_STATUS(ES)_IGNORE` passed through.
//!
//! Semantics (MPI-4.0 §3.7, §6.12, §6.13): a completed collective's status has count 0
//! and, as the system MPI reports them, source and tag 0. `MPI_Cancel` and
//! `MPI_Request_free` on a collective request are erroneous (`MPI_ERR_REQUEST`), except
//! freeing an inactive persistent request. Waiting on or testing an inactive persistent
//! request returns at once with an empty status.
//!
//! The same handles carry point-to-point messages the shim packs (`crate::hooks::p2p`):
//! their status is the system MPI's (source, tag, byte count, cancelled), they can be
//! cancelled, and one freed while active (allowed for point-to-point, MPI-4.0 §3.7.3) is
//! kept in a list that later calls complete.

use core::ffi::c_int;
use std::sync::{Arc, Mutex};

use crate::core::comm::CommState;
use crate::core::dtype::p2p::PackedReq;
use crate::core::progress::{self, RunCell};
use crate::core::sched::Schedule;
use crate::core::sched::run::Run;
use crate::platform::abi::*;
use crate::platform::api::Fid;

/// A persistent collective: its schedule, bound buffers and tag, and the current run.
pub struct Persistent {
    pub sched: Arc<Schedule>,
    pub comm: Arc<CommState>,
    pub tag: c_int,
    pub send: usize,
    pub recv: usize,
    pub active: Option<Arc<RunCell>>,
    /// The path each start counts under (`SHIM_STATS`): the schedule's algorithm, or its
    /// name as a forced `native`'s fallback.
    pub path: &'static str,
}

pub(crate) enum Kind {
    Nonblocking(Arc<RunCell>),
    Persistent(Box<Persistent>),
    /// A point-to-point request whose message the shim packs (non-blocking or persistent).
    Packed(Arc<PackedReq>),
}

struct Slot {
    kind: Kind,
    comm: MPI_Comm,
    fid: Fid,
}

#[derive(Default)]
struct Table {
    slots: Vec<Option<Slot>>,
    free: Vec<usize>,
}

static TABLE: Mutex<Table> = Mutex::new(Table {
    slots: Vec::new(),
    free: Vec::new(),
});

fn table() -> std::sync::MutexGuard<'static, Table> {
    TABLE.lock().unwrap_or_else(|e| e.into_inner())
}

fn insert(slot: Slot) -> MPI_Request {
    let mut t = table();
    let i = match t.free.pop() {
        Some(i) => {
            t.slots[i] = Some(slot);
            i
        }
        None => {
            t.slots.push(Some(slot));
            t.slots.len() - 1
        }
    };
    shim_request_handle(i)
}

/// A request for a started non-blocking collective.
pub fn insert_nonblocking(cell: Arc<RunCell>, comm: MPI_Comm, fid: Fid) -> MPI_Request {
    insert(Slot {
        kind: Kind::Nonblocking(cell),
        comm,
        fid,
    })
}

/// An inactive persistent collective request.
pub fn insert_persistent(p: Persistent, comm: MPI_Comm, fid: Fid) -> MPI_Request {
    insert(Slot {
        kind: Kind::Persistent(Box::new(p)),
        comm,
        fid,
    })
}

/// A request for a packed point-to-point message (see `crate::hooks::p2p`).
pub fn insert_packed(p: Arc<PackedReq>, comm: MPI_Comm, fid: Fid) -> MPI_Request {
    insert(Slot {
        kind: Kind::Packed(p),
        comm,
        fid,
    })
}

pub(crate) fn remove(h: MPI_Request) {
    if let Some(i) = shim_request_index(h) {
        let mut t = table();
        if i < t.slots.len() && t.slots[i].take().is_some() {
            t.free.push(i);
        }
    }
}

/// What a started shim request runs.
#[derive(Clone)]
pub(crate) enum Pending {
    Coll(Arc<RunCell>),
    P2p(Arc<PackedReq>),
}

impl Pending {
    /// Advances it; true once complete.
    pub(crate) fn poke(&self) -> bool {
        match self {
            Pending::Coll(c) => c.poke(),
            Pending::P2p(p) => p.poke(),
        }
    }

    /// The completed request's status into `st`; returns its error code.
    pub(crate) fn status_into(&self, st: *mut MPI_Status) -> c_int {
        match self {
            Pending::Coll(c) => {
                set_done_status(st);
                c.error()
            }
            // SAFETY: the caller's status pointer (or an ignore value).
            Pending::P2p(p) => unsafe { p.status_into(st) },
        }
    }

    pub(crate) fn what(&self) -> &'static str {
        match self {
            Pending::Coll(_) => "the collective failed",
            Pending::P2p(_) => "the packed point-to-point operation failed",
        }
    }
}

/// What a shim request currently is.
#[derive(Clone)]
pub(crate) enum State {
    /// Not a shim request (or unknown index): hand it to the system MPI.
    Native,
    /// An inactive persistent request.
    Inactive,
    /// Started: what runs, and whether the request is persistent.
    Running(Pending, bool),
}

pub(crate) fn state(h: MPI_Request) -> State {
    let Some(i) = shim_request_index(h) else {
        return State::Native;
    };
    let t = table();
    match t.slots.get(i).and_then(|s| s.as_ref()) {
        None => State::Native,
        Some(s) => match &s.kind {
            Kind::Nonblocking(c) => State::Running(Pending::Coll(Arc::clone(c)), false),
            Kind::Persistent(p) => match &p.active {
                None => State::Inactive,
                Some(c) => State::Running(Pending::Coll(Arc::clone(c)), true),
            },
            Kind::Packed(p) if p.is_persistent() && !p.is_active() => State::Inactive,
            Kind::Packed(p) => State::Running(Pending::P2p(Arc::clone(p)), p.is_persistent()),
        },
    }
}

pub(crate) fn slot_comm(h: MPI_Request) -> MPI_Comm {
    shim_request_index(h)
        .and_then(|i| {
            table()
                .slots
                .get(i)
                .and_then(|s| s.as_ref().map(|s| s.comm))
        })
        .unwrap_or_else(crate::platform::proc::user_world)
}

/// The status of a completed collective, as the system MPI reports it.
fn set_done_status(st: *mut MPI_Status) {
    if st.is_null() || st == MPI_STATUS_IGNORE {
        return;
    }
    // SAFETY: a caller-provided status.
    unsafe {
        (*st).clear_count();
        (*st).MPI_SOURCE = 0;
        (*st).MPI_TAG = 0;
    }
}

/// The empty status (MPI-4.0 §3.7.3) for null and inactive requests.
pub(crate) fn set_empty_status(st: *mut MPI_Status) {
    if st.is_null() || st == MPI_STATUS_IGNORE {
        return;
    }
    // SAFETY: a caller-provided status.
    unsafe {
        (*st).clear_count();
        (*st).MPI_SOURCE = MPI_ANY_SOURCE;
        (*st).MPI_TAG = MPI_ANY_TAG;
        (*st).MPI_ERROR = MPI_SUCCESS;
    }
}

/// Finishes a done request: frees a non-blocking one (`*h` becomes `MPI_REQUEST_NULL`) or
/// makes a persistent one inactive. Returns the operation's error code.
pub(crate) fn retire(
    h: &mut MPI_Request,
    pending: &Pending,
    persistent: bool,
    st: *mut MPI_Status,
) -> c_int {
    let err = pending.status_into(st);
    if persistent {
        if let Some(i) = shim_request_index(*h) {
            if let Some(Some(s)) = table().slots.get_mut(i) {
                match &mut s.kind {
                    Kind::Persistent(p) => p.active = None,
                    Kind::Packed(p) => p.retire(),
                    Kind::Nonblocking(_) => {}
                }
            }
        }
    } else {
        remove(*h);
        *h = MPI_REQUEST_NULL();
    }
    err
}

/// Starts an inactive persistent request.
pub(crate) fn start(h: MPI_Request) -> c_int {
    let Some(i) = shim_request_index(h) else {
        return MPI_ERR_REQUEST;
    };
    let cell = {
        let mut t = table();
        let Some(Some(s)) = t.slots.get_mut(i) else {
            return MPI_ERR_REQUEST;
        };
        let fid = s.fid;
        let p = match &mut s.kind {
            Kind::Persistent(p) => p,
            Kind::Packed(p) => return p.start(),
            Kind::Nonblocking(_) => return MPI_ERR_REQUEST,
        };
        if p.active.is_some() {
            return MPI_ERR_REQUEST;
        }
        let run = Run::new(
            Arc::clone(&p.sched),
            Arc::clone(&p.comm),
            p.tag,
            p.send as *const _,
            p.recv as *mut _,
        );
        let cell = RunCell::new(run);
        p.active = Some(Arc::clone(&cell));
        crate::platform::counters::note_path(fid, "schedule", p.path);
        cell
    };
    progress::submit(&cell);
    MPI_SUCCESS
}

/// The packed point-to-point request behind `h`, if it is one.
pub(crate) fn packed(h: MPI_Request) -> Option<Arc<PackedReq>> {
    let i = shim_request_index(h)?;
    match &table().slots.get(i)?.as_ref()?.kind {
        Kind::Packed(p) => Some(Arc::clone(p)),
        _ => None,
    }
}

/// A request handle the application freed (see `retain`): `MPI_ERR_REQUEST`, raised as
/// the system MPI raises request errors (on `MPI_COMM_WORLD`'s handler); the system MPI
/// itself would crash on it.
pub(crate) fn freed_request(function: &str) -> c_int {
    crate::platform::errors::raise_no_object(MPI_ERR_REQUEST, function, "the request was freed")
}

/// [`freed_request`] for the first freed handle in an array of `n` requests.
pub(crate) fn freed_entry(reqs: *const MPI_Request, n: c_int) -> Option<c_int> {
    // SAFETY: the caller's array of n requests.
    (0..n.max(0) as usize)
        .any(|i| crate::core::retain::request_freed(unsafe { *reqs.add(i) }))
        .then(|| freed_request("a request completion function"))
}

pub(crate) fn has_shim(reqs: *const MPI_Request, n: c_int) -> bool {
    // SAFETY: the caller's array of n requests.
    (0..n.max(0) as usize).any(|i| unsafe { is_shim_request(*reqs.add(i)) })
}

pub(crate) fn status_at(statuses: *mut MPI_Status, i: usize) -> *mut MPI_Status {
    if statuses == MPI_STATUSES_IGNORE || statuses.is_null() {
        MPI_STATUS_IGNORE
    } else {
        // SAFETY: the caller's array has an entry per request.
        unsafe { statuses.add(i) }
    }
}

/// The native requests of a mixed array, for a sub-call to the system MPI.
pub(crate) struct Native {
    pub(crate) idx: Vec<usize>,
    pub(crate) reqs: Vec<MPI_Request>,
    pub(crate) statuses: Vec<MPI_Status>,
}

impl Native {
    pub(crate) fn of(reqs: *const MPI_Request, n: usize) -> Native {
        let mut idx = Vec::new();
        let mut rs = Vec::new();
        for i in 0..n {
            // SAFETY: the caller's array of n requests.
            let h = unsafe { *reqs.add(i) };
            if !is_shim_request(h) {
                idx.push(i);
                rs.push(h);
            }
        }
        let statuses = vec![MPI_Status::default(); idx.len()];
        Native {
            idx,
            reqs: rs,
            statuses,
        }
    }

    /// The requests and, if wanted, their statuses, for a sub-call to the system MPI.
    pub(crate) fn parts(&mut self, want: bool) -> (&mut [MPI_Request], Option<&mut [MPI_Status]>) {
        let statuses = if want {
            Some(&mut self.statuses[..])
        } else {
            None
        };
        (&mut self.reqs, statuses)
    }

    /// Writes the (possibly completed) handles and statuses back into the caller's arrays.
    pub(crate) fn write_back(
        &self,
        reqs: *mut MPI_Request,
        statuses: *mut MPI_Status,
        which: Option<&[usize]>,
    ) {
        for (k, &i) in self.idx.iter().enumerate() {
            // SAFETY: the caller's arrays of n entries.
            unsafe { *reqs.add(i) = self.reqs[k] };
            let dst = status_at(statuses, i);
            let write = which.is_none_or(|w| w.contains(&k));
            if write && dst != MPI_STATUS_IGNORE {
                // SAFETY: as above.
                unsafe { *dst = self.statuses[k] };
            }
        }
    }
}

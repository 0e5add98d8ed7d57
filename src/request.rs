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
//! The same handles carry point-to-point messages the shim packs (`crate::dtype::p2p`):
//! their status is the system MPI's (source, tag, byte count, cancelled), they can be
//! cancelled, and one freed while active (allowed for point-to-point, MPI-4.0 §3.7.3) is
//! kept in a list that later calls complete.

use core::ffi::c_int;
use std::sync::{Arc, Mutex};

use crate::abi::*;
use crate::api::Fid;
use crate::comm::CommState;
use crate::dtype::p2p::PackedReq;
use crate::pmpi;
use crate::progress::{self, RunCell};
use crate::sched::Schedule;
use crate::sched::run::Run;

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

enum Kind {
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

/// A request for a packed point-to-point message (see `crate::dtype::p2p`).
pub fn insert_packed(p: Arc<PackedReq>, comm: MPI_Comm, fid: Fid) -> MPI_Request {
    insert(Slot {
        kind: Kind::Packed(p),
        comm,
        fid,
    })
}

/// Packed requests the application freed while active (MPI-4.0 §3.7.3 allows it): they
/// still have to complete, a receive still has to be unpacked. Polled with the schedules
/// and drained at finalize.
static DETACHED: Mutex<Vec<Arc<PackedReq>>> = Mutex::new(Vec::new());
static N_DETACHED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

fn detach(p: Arc<PackedReq>) {
    let mut d = DETACHED.lock().unwrap_or_else(|e| e.into_inner());
    d.push(p);
    N_DETACHED.store(d.len(), std::sync::atomic::Ordering::Relaxed);
    crate::coll::memo::pending(crate::coll::memo::DETACHED, true);
}

/// Advances the freed packed requests; true when none is left.
#[inline]
pub fn poll_detached() -> bool {
    // the common case inline: every intercepted call comes here
    N_DETACHED.load(std::sync::atomic::Ordering::Relaxed) == 0 || poll_detached_slow()
}

#[inline(never)]
fn poll_detached_slow() -> bool {
    use std::sync::atomic::Ordering::Relaxed;
    let Ok(mut d) = DETACHED.try_lock() else {
        return false;
    };
    d.retain(|p| {
        let done = p.poke();
        if done && p.is_persistent() {
            p.release();
        }
        !done
    });
    N_DETACHED.store(d.len(), Relaxed);
    crate::coll::memo::pending(crate::coll::memo::DETACHED, !d.is_empty());
    d.is_empty()
}

/// Completes every freed packed request (called in `MPI_Finalize`).
pub fn drain_detached() {
    progress::wait_until(poll_detached);
}

fn remove(h: MPI_Request) {
    if let Some(i) = shim_request_index(h) {
        let mut t = table();
        if i < t.slots.len() && t.slots[i].take().is_some() {
            t.free.push(i);
        }
    }
}

/// What a started shim request runs.
#[derive(Clone)]
enum Pending {
    Coll(Arc<RunCell>),
    P2p(Arc<PackedReq>),
}

impl Pending {
    /// Advances it; true once complete.
    fn poke(&self) -> bool {
        match self {
            Pending::Coll(c) => c.poke(),
            Pending::P2p(p) => p.poke(),
        }
    }

    /// The completed request's status into `st`; returns its error code.
    fn status_into(&self, st: *mut MPI_Status) -> c_int {
        match self {
            Pending::Coll(c) => {
                set_done_status(st);
                c.error()
            }
            // SAFETY: the caller's status pointer (or an ignore value).
            Pending::P2p(p) => unsafe { p.status_into(st) },
        }
    }

    fn what(&self) -> &'static str {
        match self {
            Pending::Coll(_) => "the collective failed",
            Pending::P2p(_) => "the packed point-to-point operation failed",
        }
    }
}

/// What a shim request currently is.
#[derive(Clone)]
enum State {
    /// Not a shim request (or unknown index): hand it to the system MPI.
    Native,
    /// An inactive persistent request.
    Inactive,
    /// Started: what runs, and whether the request is persistent.
    Running(Pending, bool),
}

fn state(h: MPI_Request) -> State {
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

fn slot_comm(h: MPI_Request) -> MPI_Comm {
    shim_request_index(h)
        .and_then(|i| {
            table()
                .slots
                .get(i)
                .and_then(|s| s.as_ref().map(|s| s.comm))
        })
        .unwrap_or_else(crate::ghost::user_world)
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
fn set_empty_status(st: *mut MPI_Status) {
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
fn retire(h: &mut MPI_Request, pending: &Pending, persistent: bool, st: *mut MPI_Status) -> c_int {
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
fn start(h: MPI_Request) -> c_int {
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
        crate::stats::note_path(fid, "schedule", p.path);
        cell
    };
    progress::submit(&cell);
    MPI_SUCCESS
}

/// The packed point-to-point request behind `h`, if it is one.
fn packed(h: MPI_Request) -> Option<Arc<PackedReq>> {
    let i = shim_request_index(h)?;
    match &table().slots.get(i)?.as_ref()?.kind {
        Kind::Packed(p) => Some(Arc::clone(p)),
        _ => None,
    }
}

/// A request handle the application freed (see `retain`): `MPI_ERR_REQUEST`, raised as
/// the system MPI raises request errors (on `MPI_COMM_WORLD`'s handler); the system MPI
/// itself would crash on it.
fn freed_request(function: &str) -> c_int {
    crate::errors::raise_no_object(MPI_ERR_REQUEST, function, "the request was freed")
}

/// [`freed_request`] for the first freed handle in an array of `n` requests.
fn freed_entry(reqs: *const MPI_Request, n: c_int) -> Option<c_int> {
    // SAFETY: the caller's array of n requests.
    (0..n.max(0) as usize)
        .any(|i| crate::retain::request_freed(unsafe { *reqs.add(i) }))
        .then(|| freed_request("a request completion function"))
}

fn has_shim(reqs: *const MPI_Request, n: c_int) -> bool {
    // SAFETY: the caller's array of n requests.
    (0..n.max(0) as usize).any(|i| unsafe { is_shim_request(*reqs.add(i)) })
}

fn status_at(statuses: *mut MPI_Status, i: usize) -> *mut MPI_Status {
    if statuses == MPI_STATUSES_IGNORE || statuses.is_null() {
        MPI_STATUS_IGNORE
    } else {
        // SAFETY: the caller's array has an entry per request.
        unsafe { statuses.add(i) }
    }
}

/// The native requests of a mixed array, for a sub-call to the system MPI.
struct Native {
    idx: Vec<usize>,
    reqs: Vec<MPI_Request>,
    statuses: Vec<MPI_Status>,
}

impl Native {
    fn of(reqs: *const MPI_Request, n: usize) -> Native {
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

    fn status_ptr(&mut self, want: bool) -> *mut MPI_Status {
        if want {
            self.statuses.as_mut_ptr()
        } else {
            MPI_STATUSES_IGNORE
        }
    }

    /// Writes the (possibly completed) handles and statuses back into the caller's arrays.
    fn write_back(
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

/// Hooks (see `src/abi/mpi_functions.txt`). Safety: the arguments are the application's,
/// passed unchanged; the MPI standard's rules for them are the contract.
#[allow(non_snake_case, clippy::missing_safety_doc)]
pub mod hooks {
    use super::*;

    pub unsafe fn MPI_Wait(
        request: *mut MPI_Request,
        status: *mut MPI_Status,
        native: &dyn Fn() -> c_int,
    ) -> c_int {
        // SAFETY: the caller's request pointer.
        let h = if request.is_null() {
            MPI_REQUEST_NULL()
        } else {
            unsafe { *request }
        };
        if crate::retain::request_freed(h) {
            return freed_request("MPI_Wait");
        }
        match state(h) {
            State::Native => {
                if !progress::any_active() || h == MPI_REQUEST_NULL() {
                    return native();
                }
                let mut rc = MPI_SUCCESS;
                progress::wait_until(|| {
                    let mut flag = 0;
                    // SAFETY: the caller's request and status.
                    rc = unsafe { pmpi::PMPI_Test(request, &mut flag, status) };
                    rc != MPI_SUCCESS || flag != 0
                });
                rc
            }
            State::Inactive => {
                set_empty_status(status);
                MPI_SUCCESS
            }
            State::Running(cell, persistent) => {
                progress::wait_until(|| cell.poke());
                let comm = slot_comm(h);
                // SAFETY: the caller's request.
                let err = retire(unsafe { &mut *request }, &cell, persistent, status);
                if err != MPI_SUCCESS {
                    crate::errors::raise(comm, err, "MPI_Wait", cell.what())
                } else {
                    MPI_SUCCESS
                }
            }
        }
    }

    pub unsafe fn MPI_Test(
        request: *mut MPI_Request,
        flag: *mut c_int,
        status: *mut MPI_Status,
        native: &dyn Fn() -> c_int,
    ) -> c_int {
        // SAFETY: the caller's request pointer.
        let h = if request.is_null() {
            MPI_REQUEST_NULL()
        } else {
            unsafe { *request }
        };
        if crate::retain::request_freed(h) {
            return freed_request("MPI_Test");
        }
        match state(h) {
            State::Native => native(),
            State::Inactive => {
                // SAFETY: the caller's flag.
                unsafe { *flag = 1 };
                set_empty_status(status);
                MPI_SUCCESS
            }
            State::Running(cell, persistent) => {
                progress::progress_all();
                if !cell.poke() {
                    // SAFETY: the caller's flag.
                    unsafe { *flag = 0 };
                    return MPI_SUCCESS;
                }
                // SAFETY: the caller's flag and request.
                unsafe { *flag = 1 };
                let comm = slot_comm(h);
                let err = retire(unsafe { &mut *request }, &cell, persistent, status);
                if err != MPI_SUCCESS {
                    crate::errors::raise(comm, err, "MPI_Test", cell.what())
                } else {
                    MPI_SUCCESS
                }
            }
        }
    }

    pub unsafe fn MPI_Request_get_status(
        request: MPI_Request,
        flag: *mut c_int,
        status: *mut MPI_Status,
        native: &dyn Fn() -> c_int,
    ) -> c_int {
        if crate::retain::request_freed(request) {
            return freed_request("MPI_Request_get_status");
        }
        match state(request) {
            State::Native => native(),
            State::Inactive => {
                // SAFETY: the caller's flag.
                unsafe { *flag = 1 };
                set_empty_status(status);
                MPI_SUCCESS
            }
            State::Running(cell, _) => {
                progress::progress_all();
                let done = cell.poke();
                // SAFETY: the caller's flag.
                unsafe { *flag = c_int::from(done) };
                if done {
                    cell.status_into(status);
                }
                MPI_SUCCESS
            }
        }
    }

    pub unsafe fn MPI_Request_free(request: *mut MPI_Request, native: &dyn Fn() -> c_int) -> c_int {
        // SAFETY: the caller's request pointer.
        let h = if request.is_null() {
            MPI_REQUEST_NULL()
        } else {
            unsafe { *request }
        };
        if crate::retain::request_freed(h) {
            return freed_request("MPI_Request_free");
        }
        match state(h) {
            State::Native => {
                // Only a complete request (an inactive persistent one, or one already
                // finished) is released at once and its handle quarantined. An active one
                // lives on in the library until it completes: allocating a placeholder then
                // may take over a handle MPICH 4.0.2 still uses (a freed Isend to self
                // whose message was never received is lost).
                let mut done: c_int = 0;
                if h != MPI_REQUEST_NULL() {
                    // SAFETY: valid out-pointer; an invalid handle only yields a code (the
                    // real world returns errors), reported again by the free below.
                    unsafe { pmpi::PMPI_Request_get_status(h, &mut done, MPI_STATUS_IGNORE) };
                }
                let rc = native();
                if rc == MPI_SUCCESS && done != 0 {
                    crate::retain::request_quarantine(h);
                }
                rc
            }
            State::Inactive => {
                if let Some(p) = packed(h) {
                    p.release();
                }
                remove(h);
                // SAFETY: the caller's request.
                unsafe { *request = MPI_REQUEST_NULL() };
                MPI_SUCCESS
            }
            State::Running(Pending::P2p(p), _) => {
                // the operation goes on; it is completed in the background
                detach(p);
                remove(h);
                // SAFETY: the caller's request.
                unsafe { *request = MPI_REQUEST_NULL() };
                MPI_SUCCESS
            }
            State::Running(..) => crate::errors::raise(
                slot_comm(h),
                MPI_ERR_REQUEST,
                "MPI_Request_free",
                "freeing an active collective request is erroneous (MPI-4.0 §6.12, §6.13)",
            ),
        }
    }

    pub unsafe fn MPI_Cancel(request: *mut MPI_Request, native: &dyn Fn() -> c_int) -> c_int {
        // SAFETY: the caller's request pointer.
        let h = if request.is_null() {
            MPI_REQUEST_NULL()
        } else {
            unsafe { *request }
        };
        if crate::retain::request_freed(h) {
            return freed_request("MPI_Cancel");
        }
        if let Some(p) = packed(h) {
            return p.cancel();
        }
        match state(h) {
            State::Native => native(),
            _ => crate::errors::raise(
                slot_comm(h),
                MPI_ERR_REQUEST,
                "MPI_Cancel",
                "a collective request cannot be cancelled (MPI-4.0 §6.12)",
            ),
        }
    }

    pub unsafe fn MPI_Start(request: *mut MPI_Request, native: &dyn Fn() -> c_int) -> c_int {
        // SAFETY: the caller's request pointer.
        let h = if request.is_null() {
            MPI_REQUEST_NULL()
        } else {
            unsafe { *request }
        };
        if crate::retain::request_freed(h) {
            return freed_request("MPI_Start");
        }
        match state(h) {
            State::Native => native(),
            _ => {
                let rc = start(h);
                if rc != MPI_SUCCESS {
                    return crate::errors::raise(
                        slot_comm(h),
                        rc,
                        "MPI_Start",
                        "the persistent request is already active or could not start",
                    );
                }
                MPI_SUCCESS
            }
        }
    }

    pub unsafe fn MPI_Startall(
        count: c_int,
        reqs: *mut MPI_Request,
        native: &dyn Fn() -> c_int,
    ) -> c_int {
        if reqs.is_null() || count < 0 {
            // an invalid array or count: the system MPI reports it (MPI_ERR_ARG, _COUNT)
            return native();
        }
        if let Some(rc) = freed_entry(reqs, count) {
            return rc;
        }
        if !has_shim(reqs, count) {
            return native();
        }
        let mut nat = Native::of(reqs, count as usize);
        for i in 0..count as usize {
            // SAFETY: the caller's array of count requests.
            let h = unsafe { *reqs.add(i) };
            if is_shim_request(h) {
                let rc = start(h);
                if rc != MPI_SUCCESS {
                    return crate::errors::raise(
                        slot_comm(h),
                        rc,
                        "MPI_Startall",
                        "a persistent request is already active or could not start",
                    );
                }
            }
        }
        if !nat.reqs.is_empty() {
            // SAFETY: the native sub-array.
            let rc = unsafe { pmpi::PMPI_Startall(nat.reqs.len() as c_int, nat.reqs.as_mut_ptr()) };
            nat.write_back(reqs, MPI_STATUSES_IGNORE, Some(&[]));
            return rc;
        }
        MPI_SUCCESS
    }

    /// Shared body of Waitall (`wait`) and Testall.
    fn all(
        count: c_int,
        reqs: *mut MPI_Request,
        flag: *mut c_int,
        statuses: *mut MPI_Status,
        wait: bool,
        native: &dyn Fn() -> c_int,
    ) -> c_int {
        if reqs.is_null() || count < 0 {
            // an invalid array or count: the system MPI reports it (MPI_ERR_ARG, _COUNT)
            return native();
        }
        if let Some(rc) = freed_entry(reqs, count) {
            return rc;
        }
        if !has_shim(reqs, count) && (!wait || !progress::any_active()) {
            return native();
        }
        let n = count.max(0) as usize;
        let want = statuses != MPI_STATUSES_IGNORE && !statuses.is_null();
        let mut nat = Native::of(reqs, n);
        let mut rc = MPI_SUCCESS;
        let mut complete = false;
        let mut check = || {
            progress::progress_all();
            for i in 0..n {
                // SAFETY: the caller's array.
                if let State::Running(c, _) = state(unsafe { *reqs.add(i) }) {
                    if !c.poke() {
                        return false;
                    }
                }
            }
            if !nat.reqs.is_empty() {
                let mut f: c_int = 0;
                let sp = nat.status_ptr(want);
                // SAFETY: the native sub-array and its statuses.
                rc = unsafe {
                    pmpi::PMPI_Testall(nat.reqs.len() as c_int, nat.reqs.as_mut_ptr(), &mut f, sp)
                };
                if f == 0 && rc == MPI_SUCCESS {
                    return false;
                }
            }
            complete = true;
            true
        };
        if wait {
            progress::wait_until(&mut check);
        } else {
            check();
        }
        if !flag.is_null() {
            // SAFETY: the caller's flag.
            unsafe { *flag = c_int::from(complete) };
        }
        if !complete {
            return MPI_SUCCESS;
        }
        nat.write_back(reqs, statuses, None);
        let mut errors = false;
        for i in 0..n {
            // SAFETY: the caller's arrays.
            let h = unsafe { &mut *reqs.add(i) };
            let st = status_at(statuses, i);
            match state(*h) {
                State::Running(c, p) => {
                    let e = retire(h, &c, p, st);
                    if want {
                        // SAFETY: st points into the caller's status array.
                        unsafe { (*st).MPI_ERROR = e };
                    }
                    errors |= e != MPI_SUCCESS;
                }
                State::Inactive => set_empty_status(st),
                State::Native => {}
            }
        }
        if errors { MPI_ERR_IN_STATUS } else { rc }
    }

    pub unsafe fn MPI_Waitall(
        count: c_int,
        reqs: *mut MPI_Request,
        statuses: *mut MPI_Status,
        native: &dyn Fn() -> c_int,
    ) -> c_int {
        all(count, reqs, core::ptr::null_mut(), statuses, true, native)
    }

    pub unsafe fn MPI_Testall(
        count: c_int,
        reqs: *mut MPI_Request,
        flag: *mut c_int,
        statuses: *mut MPI_Status,
        native: &dyn Fn() -> c_int,
    ) -> c_int {
        all(count, reqs, flag, statuses, false, native)
    }

    /// Shared body of Waitany and Testany.
    fn any(
        count: c_int,
        reqs: *mut MPI_Request,
        index: *mut c_int,
        flag: *mut c_int,
        status: *mut MPI_Status,
        wait: bool,
        native: &dyn Fn() -> c_int,
    ) -> c_int {
        if reqs.is_null() || count < 0 {
            // an invalid array or count: the system MPI reports it (MPI_ERR_ARG, _COUNT)
            return native();
        }
        if let Some(rc) = freed_entry(reqs, count) {
            return rc;
        }
        if !has_shim(reqs, count) && (!wait || !progress::any_active()) {
            return native();
        }
        let n = count.max(0) as usize;
        let mut nat = Native::of(reqs, n);
        let mut result: Option<(c_int, c_int)> = None; // (index or UNDEFINED, rc)
        let mut check = || {
            progress::progress_all();
            let mut active = false;
            for i in 0..n {
                // SAFETY: the caller's array.
                let h = unsafe { &mut *reqs.add(i) };
                if let State::Running(c, p) = state(*h) {
                    active = true;
                    if c.poke() {
                        let comm = slot_comm(*h);
                        let e = retire(h, &c, p, status);
                        let rc = if e != MPI_SUCCESS {
                            crate::errors::raise(comm, e, "MPI_Waitany", c.what())
                        } else {
                            MPI_SUCCESS
                        };
                        result = Some((i as c_int, rc));
                        return true;
                    }
                }
            }
            if !nat.reqs.is_empty() {
                let (mut idx, mut f): (c_int, c_int) = (MPI_UNDEFINED, 0);
                // SAFETY: the native sub-array.
                let rc = unsafe {
                    pmpi::PMPI_Testany(
                        nat.reqs.len() as c_int,
                        nat.reqs.as_mut_ptr(),
                        &mut idx,
                        &mut f,
                        status,
                    )
                };
                if rc != MPI_SUCCESS || (f != 0 && idx != MPI_UNDEFINED) {
                    nat.write_back(reqs, MPI_STATUSES_IGNORE, Some(&[]));
                    let gi = if idx == MPI_UNDEFINED {
                        MPI_UNDEFINED
                    } else {
                        nat.idx[idx as usize] as c_int
                    };
                    result = Some((gi, rc));
                    return true;
                }
                if f == 0 {
                    active = true;
                }
            }
            if !active {
                // every request is null or inactive
                set_empty_status(status);
                result = Some((MPI_UNDEFINED, MPI_SUCCESS));
                return true;
            }
            false
        };
        if wait {
            progress::wait_until(&mut check);
        } else {
            check();
        }
        match result {
            Some((i, rc)) => {
                // SAFETY: the caller's out-pointers.
                unsafe {
                    *index = i;
                    if !flag.is_null() {
                        *flag = 1;
                    }
                }
                rc
            }
            None => {
                // SAFETY: as above.
                unsafe {
                    *index = MPI_UNDEFINED;
                    if !flag.is_null() {
                        *flag = 0;
                    }
                }
                MPI_SUCCESS
            }
        }
    }

    pub unsafe fn MPI_Waitany(
        count: c_int,
        reqs: *mut MPI_Request,
        index: *mut c_int,
        status: *mut MPI_Status,
        native: &dyn Fn() -> c_int,
    ) -> c_int {
        any(
            count,
            reqs,
            index,
            core::ptr::null_mut(),
            status,
            true,
            native,
        )
    }

    pub unsafe fn MPI_Testany(
        count: c_int,
        reqs: *mut MPI_Request,
        index: *mut c_int,
        flag: *mut c_int,
        status: *mut MPI_Status,
        native: &dyn Fn() -> c_int,
    ) -> c_int {
        any(count, reqs, index, flag, status, false, native)
    }

    /// Shared body of Waitsome and Testsome.
    fn some(
        incount: c_int,
        reqs: *mut MPI_Request,
        outcount: *mut c_int,
        indices: *mut c_int,
        statuses: *mut MPI_Status,
        wait: bool,
        native: &dyn Fn() -> c_int,
    ) -> c_int {
        if reqs.is_null() || incount < 0 {
            // an invalid array or count: the system MPI reports it (MPI_ERR_ARG, _COUNT)
            return native();
        }
        if let Some(rc) = freed_entry(reqs, incount) {
            return rc;
        }
        if !has_shim(reqs, incount) && (!wait || !progress::any_active()) {
            return native();
        }
        let n = incount.max(0) as usize;
        let want = statuses != MPI_STATUSES_IGNORE && !statuses.is_null();
        let mut nat = Native::of(reqs, n);
        let mut out: Vec<(usize, c_int)> = Vec::new();
        let mut rc = MPI_SUCCESS;
        let mut none_active = false;
        let mut check = || {
            progress::progress_all();
            let mut active = false;
            for i in 0..n {
                // SAFETY: the caller's array.
                let h = unsafe { &mut *reqs.add(i) };
                if let State::Running(c, p) = state(*h) {
                    active = true;
                    if c.poke() {
                        // the status goes to position out.len() of the output
                        let st = status_at(statuses, out.len());
                        let e = retire(h, &c, p, st);
                        out.push((i, e));
                    }
                }
            }
            if !nat.reqs.is_empty() {
                let mut cnt: c_int = 0;
                let mut idx = vec![0 as c_int; nat.reqs.len()];
                let sp = nat.status_ptr(want);
                // SAFETY: the native sub-array and buffers of its length.
                rc = unsafe {
                    pmpi::PMPI_Testsome(
                        nat.reqs.len() as c_int,
                        nat.reqs.as_mut_ptr(),
                        &mut cnt,
                        idx.as_mut_ptr(),
                        sp,
                    )
                };
                if cnt != MPI_UNDEFINED {
                    active = true;
                    for (j, &k) in idx[..cnt.max(0) as usize].iter().enumerate() {
                        let i = nat.idx[k as usize];
                        if want {
                            // SAFETY: status array of incount entries; Testsome fills its
                            // statuses in completion order.
                            unsafe { *statuses.add(out.len()) = nat.statuses[j] };
                        }
                        // SAFETY: the caller's array.
                        unsafe { *reqs.add(i) = nat.reqs[k as usize] };
                        out.push((i, MPI_SUCCESS));
                    }
                }
            }
            if !active {
                none_active = true;
                return true;
            }
            !out.is_empty()
        };
        if wait {
            progress::wait_until(&mut check);
        } else {
            check();
        }
        if none_active && out.is_empty() {
            // SAFETY: the caller's outcount.
            unsafe { *outcount = MPI_UNDEFINED };
            return MPI_SUCCESS;
        }
        let mut errors = false;
        for (k, &(i, e)) in out.iter().enumerate() {
            // SAFETY: the caller's indices array has incount entries.
            unsafe { *indices.add(k) = i as c_int };
            if e != MPI_SUCCESS {
                errors = true;
                if want {
                    // SAFETY: as above.
                    unsafe { (*statuses.add(k)).MPI_ERROR = e };
                }
            }
        }
        // SAFETY: the caller's outcount.
        unsafe { *outcount = out.len() as c_int };
        if errors { MPI_ERR_IN_STATUS } else { rc }
    }

    pub unsafe fn MPI_Waitsome(
        incount: c_int,
        reqs: *mut MPI_Request,
        outcount: *mut c_int,
        indices: *mut c_int,
        statuses: *mut MPI_Status,
        native: &dyn Fn() -> c_int,
    ) -> c_int {
        some(incount, reqs, outcount, indices, statuses, true, native)
    }

    pub unsafe fn MPI_Testsome(
        incount: c_int,
        reqs: *mut MPI_Request,
        outcount: *mut c_int,
        indices: *mut c_int,
        statuses: *mut MPI_Status,
        native: &dyn Fn() -> c_int,
    ) -> c_int {
        some(incount, reqs, outcount, indices, statuses, false, native)
    }
}

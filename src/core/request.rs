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
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use crate::core::comm::CommState;
use crate::core::dtype::p2p::PackedReq;
use crate::core::progress::{self, RunCell};
use crate::core::sched::Schedule;
use crate::core::sched::run::{Awaits, Run};
use crate::platform::abi::*;
use crate::platform::api::Fid;

/// A persistent collective: its schedule, bound buffers and tag, and the current run.
pub struct Persistent {
    /// The communicator's shared-memory segment and the request's own channel there, for
    /// a shared-memory schedule.
    pub shm: Option<crate::core::transport::node::Lease>,
    /// Initialized while the segment was being set up: its channel there and its
    /// shared-memory schedule, taken at the first start after the set-up is done (until
    /// then, each start waits for it); `sched` is the point-to-point one.
    pub pending: Option<PendingShm>,
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

/// See [`Persistent::pending`].
pub struct PendingShm {
    pub lease: crate::core::transport::node::PendingLease,
    pub sched: Arc<Schedule>,
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
            assert!(
                t.slots.len() < FINISHED,
                "too many outstanding shim requests"
            );
            t.slots.push(Some(slot));
            t.slots.len() - 1
        }
    };
    shim_request_handle(i)
}

/// Handles from this index on name non-blocking collectives that finished without error
/// inside their call (a collective on the segment often does): no table entry, no run
/// kept, and a wait on one looks at nothing. `FINISHED` values in turn, so that requests
/// outstanding at once differ (after that many calls a value comes back; both then
/// name a finished collective). Every ABI's shim handles and Fortran integers hold
/// indices up to `2 * FINISHED`.
const FINISHED: usize = 1 << 24;
static NEXT_FINISHED: AtomicUsize = AtomicUsize::new(0);
/// The communicators of the last `RECENT` finished requests, for the error an erroneous
/// call on one raises through its communicator's handler (`MPI_Request_free` and
/// `MPI_Cancel` on a collective's request, MPI-4.0 §6.12): a plain store per call.
const RECENT: usize = 1024;
static FINISHED_COMM: [AtomicUsize; RECENT] = [const { AtomicUsize::new(0) }; RECENT];

/// A request for a non-blocking collective on `comm` that finished without error inside
/// its call.
pub fn insert_finished(comm: MPI_Comm) -> MPI_Request {
    let k = NEXT_FINISHED.fetch_add(1, Ordering::Relaxed) % FINISHED;
    FINISHED_COMM[k % RECENT].store(comm as usize, Ordering::Relaxed);
    shim_request_handle(FINISHED + k)
}

/// The communicator of finished request `i` (the world's once `RECENT` later ones have
/// finished since).
fn finished_comm(i: usize) -> MPI_Comm {
    match FINISHED_COMM[(i - FINISHED) % RECENT].load(Ordering::Relaxed) {
        0 => crate::platform::proc::user_world(),
        c => c as MPI_Comm,
    }
}

fn is_finished(i: usize) -> bool {
    i >= FINISHED
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
    if let Some(i) = shim_request_index(h).filter(|&i| !is_finished(i)) {
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
    /// A collective that finished without error inside its call ([`insert_finished`]).
    Finished,
}

impl Pending {
    /// Advances it; true once complete.
    pub(crate) fn poke(&self) -> bool {
        match self {
            Pending::Coll(c) => c.poke(),
            Pending::P2p(p) => p.poke(),
            Pending::Finished => true,
        }
    }

    /// The completed request's status into `st`; returns its error code.
    pub(crate) fn status_into(&self, st: *mut MPI_Status) -> c_int {
        match self {
            Pending::Coll(c) => {
                set_done_status(st);
                c.error()
            }
            Pending::Finished => {
                set_done_status(st);
                MPI_SUCCESS
            }
            // SAFETY: the caller's status pointer (or an ignore value).
            Pending::P2p(p) => unsafe { p.status_into(st) },
        }
    }

    pub(crate) fn what(&self) -> &'static str {
        match self {
            Pending::Coll(_) | Pending::Finished => "the collective failed",
            Pending::P2p(_) => "the packed point-to-point operation failed",
        }
    }
}

/// What a shim request currently is.
#[derive(Clone)]
pub(crate) enum State {
    /// Not a shim request (or unknown index): hand it to the system MPI.
    Native,
    /// An inactive persistent request, and whether a start of it sends or receives through
    /// the library (not a collective on the shared-memory segment).
    Inactive(bool),
    /// Started: what runs, and whether the request is persistent.
    Running(Pending, bool),
}

pub(crate) fn state(h: MPI_Request) -> State {
    find(h).0
}

/// What a completion call on `h` works with, from one look at the table: its state and
/// the communicator of a shim request (the world's for any other). Notes library traffic
/// as [`note_traffic`] does. A shim request is never one the program freed
/// (`retain::request_freed` holds only the library's handles).
pub(crate) fn entry(h: MPI_Request) -> (State, MPI_Comm) {
    let (st, comm) = find(h);
    note_state(&st, h);
    (st, comm.unwrap_or_else(crate::platform::proc::user_world))
}

/// Takes `h` off the table if it is a non-blocking collective that has already finished
/// (a collective on the segment often finishes inside its `I*` call): the common case of
/// `MPI_Wait` with one look at the table, the run and its communicator out of it. Notes
/// library traffic as [`note_traffic`] does, and forgets the run as [`retire`] does.
pub(crate) fn take_finished(h: MPI_Request) -> Option<(Pending, MPI_Comm)> {
    let i = shim_request_index(h)?;
    if is_finished(i) {
        return Some((Pending::Finished, finished_comm(i)));
    }
    let mut t = table();
    let slot = t.slots.get_mut(i)?;
    if !matches!(slot, Some(Slot { kind: Kind::Nonblocking(c), .. }) if c.is_done()) {
        return None;
    }
    let Some(Slot {
        kind: Kind::Nonblocking(c),
        comm,
        ..
    }) = slot.take()
    else {
        return None;
    };
    t.free.push(i);
    drop(t);
    if c.has_messages() {
        crate::core::transport::note_library_call();
    }
    progress::forget(&c);
    Some((Pending::Coll(c), comm))
}

fn find(h: MPI_Request) -> (State, Option<MPI_Comm>) {
    let Some(i) = shim_request_index(h) else {
        return (State::Native, None);
    };
    if is_finished(i) {
        return (
            State::Running(Pending::Finished, false),
            Some(finished_comm(i)),
        );
    }
    let t = table();
    match t.slots.get(i).and_then(|s| s.as_ref()) {
        None => (State::Native, None),
        Some(s) => (slot_state(s), Some(s.comm)),
    }
}

fn slot_state(s: &Slot) -> State {
    match &s.kind {
        Kind::Nonblocking(c) => State::Running(Pending::Coll(Arc::clone(c)), false),
        Kind::Persistent(p) => match &p.active {
            None => State::Inactive(p.sched.messages),
            Some(c) => State::Running(Pending::Coll(Arc::clone(c)), true),
        },
        Kind::Packed(p) if p.is_persistent() && !p.is_active() => State::Inactive(true),
        Kind::Packed(p) => State::Running(Pending::P2p(Arc::clone(p)), p.is_persistent()),
    }
}

/// Notes (`transport::note_library_call`) a completion or start call on `h` unless it
/// cannot leave the library anything to do: a request of the shim's whose schedule has no
/// messages (a collective on the shared-memory segment). Waiting for such a collective
/// used to mark the process, and every non-blocking collective on the segment then drove
/// the library before it published (two probes and a lock, an eighth of an 8-byte
/// `MPI_Ibcast` and its wait).
pub(crate) fn note_traffic(h: MPI_Request) {
    note_state(&state(h), h);
}

fn note_state(st: &State, h: MPI_Request) {
    if !quiet(st, h) {
        crate::core::transport::note_library_call();
    }
}

/// Whether a completion or start call on `h`, in state `st`, cannot leave the library
/// anything to do.
fn quiet(st: &State, h: MPI_Request) -> bool {
    match st {
        State::Running(Pending::Coll(c), _) => !c.has_messages(),
        State::Running(Pending::Finished, _) => true,
        // a start of a persistent collective on the segment: its waits and tests leave
        // the library nothing to do either (`Node::post` drove the library at every start:
        // two probes and a lock, 4-8 µs of a 0.5-2 µs collective under Intel MPI)
        State::Inactive(messages) => !messages,
        _ => h == MPI_REQUEST_NULL(),
    }
}

/// [`note_traffic`] for an array of `n` requests (an invalid array: noted).
pub(crate) fn note_traffic_all(reqs: *const MPI_Request, n: c_int) {
    if reqs.is_null() || n < 0 {
        crate::core::transport::note_library_call();
        return;
    }
    // SAFETY: the caller's array of n requests.
    for i in 0..n as usize {
        note_traffic(unsafe { *reqs.add(i) });
    }
}

pub(crate) fn slot_comm(h: MPI_Request) -> MPI_Comm {
    if let Some(i) = shim_request_index(h).filter(|&i| is_finished(i)) {
        return finished_comm(i);
    }
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
    if let Pending::Coll(c) = pending {
        progress::forget(c);
    }
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
        if let Some(outcome) = p.pending.as_mut().and_then(|w| w.lease.resolve()) {
            let w = p.pending.take();
            if let (Some(lease), Some(w)) = (outcome, w) {
                p.shm = Some(lease);
                p.path = w.sched.algorithm;
                p.sched = w.sched;
            }
        }
        let mut run = Run::new(
            Arc::clone(&p.sched),
            Arc::clone(&p.comm),
            p.tag,
            p.send as *const _,
            p.recv as *mut _,
        );
        if let Some(l) = &p.shm {
            run = run.in_shm(Arc::clone(&l.node), l.next());
        }
        match &p.pending {
            // (its path is noted where the run knows it, `Run::resolve`)
            Some(w) if p.shm.is_none() => {
                let (setup, ch) = (Arc::clone(w.lease.setup()), w.lease.channel());
                let note = Some((fid, p.path));
                run = run.deferred(setup, Arc::clone(&w.sched), Awaits::Channel(ch), note);
            }
            _ => crate::platform::counters::note_path(fid, "schedule", p.path),
        }
        let cell = RunCell::new(run);
        p.active = Some(Arc::clone(&cell));
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

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::platform::mpi::fake;

    /// The request table is the process's: tests that insert into it and then look at
    /// retired handles run one at a time (a retired index may be handed out again).
    pub(crate) fn serial() -> std::sync::MutexGuard<'static, ()> {
        static SERIAL: Mutex<()> = Mutex::new(());
        SERIAL.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A status whose every byte is 0xff.
    fn garbage() -> MPI_Status {
        let mut st = MPI_Status::default();
        // SAFETY: a plain C struct of integers; any bytes are a value.
        unsafe { core::ptr::write_bytes(&mut st, 0xff, 1) };
        st
    }

    #[test]
    fn handles_handed_out_are_recognised_and_retired() {
        let _l = serial();
        let comm = MPI_COMM_SELF();
        let p = PackedReq::for_tests(0x10, true, false);
        let mut h = insert_packed(Arc::clone(&p), comm, Fid::MPI_Irecv);
        assert!(is_shim_request(h) && h != MPI_REQUEST_NULL());
        assert_eq!(slot_comm(h), comm);
        assert!(packed(h).is_some_and(|q| Arc::ptr_eq(&q, &p)));
        let State::Running(pending, false) = state(h) else {
            panic!("a started non-blocking request");
        };
        let _g = fake::install(|c| match c.name {
            "test" => Ok(vec![1, 3, 4]),
            "test_cancelled" => Ok(vec![0]),
            _ => Err(MPI_ERR_OTHER),
        });
        assert!(pending.poke());
        let old = h;
        let mut st = garbage();
        assert_eq!(retire(&mut h, &pending, false, &mut st), MPI_SUCCESS);
        // a completed non-blocking request is freed and its handle set to null (§3.7.3)
        assert_eq!(h, MPI_REQUEST_NULL());
        assert_eq!((st.MPI_SOURCE, st.MPI_TAG), (3, 4));
        assert_eq!(
            st.MPI_ERROR, -1,
            "the single-completion status keeps MPI_ERROR"
        );
        // the old handle is no longer the shim's: it goes to the system MPI, which
        // reports it; starting it is MPI_ERR_REQUEST
        assert!(matches!(state(old), State::Native));
        assert!(packed(old).is_none());
        assert_eq!(start(old), MPI_ERR_REQUEST);
    }

    /// A collective that finished inside its call: a shim handle with nothing behind it,
    /// complete at once for every completion call, never the same as another
    /// outstanding one, and not an entry a later request can take.
    #[test]
    fn a_finished_collective_s_handle_is_complete_and_holds_no_entry() {
        let _l = serial();
        let comm = MPI_COMM_SELF();
        let hs: Vec<MPI_Request> = (0..3).map(|_| insert_finished(comm)).collect();
        assert!(hs[0] != hs[1] && hs[1] != hs[2] && hs[0] != hs[2]);
        let slots = table().slots.len();
        for &h in &hs {
            assert!(is_shim_request(h) && h != MPI_REQUEST_NULL());
            // an erroneous call on it raises through its communicator's handler
            assert_eq!(slot_comm(h), comm);
            let State::Running(p, false) = state(h) else {
                panic!("a finished non-blocking request is a running one that is done");
            };
            assert!(p.poke());
            let mut st = garbage();
            let mut h2 = h;
            assert_eq!(retire(&mut h2, &p, false, &mut st), MPI_SUCCESS);
            assert_eq!(h2, MPI_REQUEST_NULL());
            assert_eq!(
                (st.MPI_SOURCE, st.MPI_TAG),
                (0, 0),
                "as the library reports one"
            );
            assert!(matches!(take_finished(h), Some((Pending::Finished, _))));
        }
        assert_eq!(table().slots.len(), slots, "no entry made or freed");
        // a request with an entry keeps an index below the finished ones
        let h = an_entry();
        assert!(shim_request_index(h).is_some_and(|i| !is_finished(i)));
        remove(h);
    }

    /// A request with a table entry (a packed receive).
    fn an_entry() -> MPI_Request {
        insert(Slot {
            kind: Kind::Packed(PackedReq::for_tests(0x30, true, false)),
            comm: MPI_COMM_SELF(),
            fid: Fid::MPI_Iallreduce,
        })
    }

    #[test]
    fn a_persistent_request_is_inactive_until_started_and_again_once_complete() {
        let _l = serial();
        let mut h = insert_packed(
            PackedReq::for_tests(0x20, false, true),
            MPI_COMM_SELF(),
            Fid::MPI_Send_init,
        );
        assert!(matches!(state(h), State::Inactive(_)));
        let _g = fake::install(|c| match c.name {
            "start" | "test_cancelled" => Ok(vec![0]),
            "test" => Ok(vec![1]),
            _ => Err(MPI_ERR_OTHER),
        });
        for round in 0..2 {
            assert_eq!(start(h), MPI_SUCCESS);
            let State::Running(pending, true) = state(h) else {
                panic!("round {round}: a started persistent request");
            };
            assert_eq!(start(h), MPI_ERR_REQUEST, "starting an active request");
            assert!(pending.poke());
            let kept = h;
            assert_eq!(
                retire(&mut h, &pending, true, MPI_STATUS_IGNORE),
                MPI_SUCCESS
            );
            assert_eq!(
                h, kept,
                "a persistent request stays allocated (MPI-4.0 §3.9)"
            );
            assert!(matches!(state(h), State::Inactive(_)));
        }
        let round = ["start", "test", "test_cancelled"];
        assert_eq!(fake::names(), [round, round].concat());
        remove(h);
        assert!(matches!(state(h), State::Native));
    }

    /// A start of a persistent collective on the segment leaves the library nothing to do,
    /// as a wait for one does: noting it made every start on the segment drive the library
    /// (two probes and a lock, 4-8 µs of a 0.5-2 µs collective under Intel MPI). A start of one with
    /// messages, or of a packed point-to-point request, is noted.
    #[test]
    fn a_start_is_library_traffic_only_where_the_request_has_messages() {
        let _l = serial();
        let _g = fake::install(|c| Ok(fake::rank0_of_two(c.name).unwrap_or_default()));
        let st = crate::core::comm::get(0x5e6 as MPI_Comm).expect("a fake communicator's state");
        let persistent = |b: crate::core::sched::Builder| Persistent {
            shm: None,
            pending: None,
            sched: Arc::new(b.finish()),
            comm: Arc::clone(&st),
            tag: 0,
            send: 0,
            recv: 0,
            active: None,
            path: "t",
        };
        let on_segment = crate::core::sched::Builder::new("shm");
        let mut through_library = crate::core::sched::Builder::new("linear");
        through_library.send(
            crate::core::sched::Data::new(crate::core::sched::Addr::send(0), 1, MPI_INT()),
            1,
            &[],
        );
        for (b, noted) in [(on_segment, false), (through_library, true)] {
            let h = insert_persistent(persistent(b), st.user, Fid::MPI_Bcast_init);
            let s = state(h);
            assert!(matches!(s, State::Inactive(m) if m == noted));
            assert_eq!(quiet(&s, h), !noted);
            remove(h);
        }
        let h = insert_packed(
            PackedReq::for_tests(0x20, false, true),
            MPI_COMM_SELF(),
            Fid::MPI_Send_init,
        );
        assert!(!quiet(&state(h), h), "a packed persistent send");
        remove(h);
        assert!(quiet(&State::Native, MPI_REQUEST_NULL()));
    }

    #[test]
    fn start_refuses_what_is_not_an_inactive_persistent_request() {
        let _l = serial();
        let _g = fake::install(|c| match c.name {
            "start" => Err(MPI_ERR_OTHER),
            _ => Ok(vec![]),
        });
        let native = 0x1000 as MPI_Request;
        assert_eq!(start(native), MPI_ERR_REQUEST, "not the shim's");
        assert_eq!(start(MPI_REQUEST_NULL()), MPI_ERR_REQUEST);
        assert_eq!(
            start(shim_request_handle(0x3ff_0000)),
            MPI_ERR_REQUEST,
            "never issued"
        );
        let h = insert_packed(
            PackedReq::for_tests(0x10, true, false),
            MPI_COMM_SELF(),
            Fid::MPI_Irecv,
        );
        assert_eq!(start(h), MPI_ERR_REQUEST, "a non-blocking request");
        remove(h);
        assert_eq!(start(h), MPI_ERR_REQUEST, "a retired handle");
        assert!(fake::calls().is_empty(), "all refused without asking MPI");
        // a persistent request the system MPI cannot start: its code, unchanged
        let p = insert_packed(
            PackedReq::for_tests(0x20, true, true),
            MPI_COMM_SELF(),
            Fid::MPI_Recv_init,
        );
        assert_eq!(start(p), MPI_ERR_OTHER);
        assert!(matches!(state(p), State::Inactive(_)));
        remove(p);
    }

    #[test]
    fn null_and_inactive_requests_have_the_empty_status() {
        // MPI-4.0 §3.7.3: source MPI_ANY_SOURCE, tag MPI_ANY_TAG, error MPI_SUCCESS,
        // count 0 (for any datatype), not cancelled
        let mut want = MPI_Status {
            MPI_SOURCE: MPI_ANY_SOURCE,
            MPI_TAG: MPI_ANY_TAG,
            MPI_ERROR: MPI_SUCCESS,
            ..Default::default()
        };
        want.clear_count();
        let mut st = garbage();
        set_empty_status(&mut st);
        assert_eq!(st, want);
        // nothing is written through the ignore value or a null pointer
        set_empty_status(MPI_STATUS_IGNORE);
        set_empty_status(core::ptr::null_mut());
    }

    #[test]
    fn a_completed_collective_reports_source_and_tag_zero_and_no_data() {
        let mut st = garbage();
        set_done_status(&mut st);
        let mut want = MPI_Status {
            MPI_ERROR: -1,
            ..Default::default()
        };
        want.clear_count();
        assert_eq!(
            st, want,
            "MPI_ERROR is left to the multiple-completion calls"
        );
        set_done_status(MPI_STATUS_IGNORE);
    }

    #[test]
    fn mixed_arrays_hand_only_the_native_requests_to_mpi() {
        let (a, b, null) = (
            0x1000 as MPI_Request,
            0x2000 as MPI_Request,
            MPI_REQUEST_NULL(),
        );
        let shim = shim_request_handle(7);
        let mut reqs = [a, shim, b, null];
        assert!(has_shim(reqs.as_ptr(), 4));
        assert!(!has_shim(reqs.as_ptr(), 1));
        assert!(!has_shim(reqs.as_ptr(), -1), "a negative count is no array");
        assert!(freed_entry(reqs.as_ptr(), 4).is_none(), "nothing was freed");
        let mut nat = Native::of(reqs.as_ptr(), 4);
        assert_eq!(nat.idx, [0, 2, 3]);
        assert_eq!(nat.reqs, [a, b, null]);
        let (r, s) = nat.parts(true);
        assert_eq!((r.len(), s.map(|s| s.len())), (3, Some(3)));
        assert!(nat.parts(false).1.is_none());
        // the system MPI completed `b` (entry 1 of the sub-array)
        nat.reqs[1] = null;
        nat.statuses[1].MPI_TAG = 9;
        let mut statuses = [garbage(); 4];
        nat.write_back(reqs.as_mut_ptr(), statuses.as_mut_ptr(), Some(&[1]));
        assert_eq!(reqs, [a, shim, null, null]);
        assert_eq!(statuses[2].MPI_TAG, 9);
        for i in [0, 1, 3] {
            assert_eq!(
                statuses[i],
                garbage(),
                "status {i} is not the completed one's"
            );
        }
        nat.write_back(reqs.as_mut_ptr(), MPI_STATUSES_IGNORE, None);
        let base = statuses.as_mut_ptr();
        assert_eq!(status_at(base, 2), base.wrapping_add(2));
        assert_eq!(status_at(MPI_STATUSES_IGNORE, 2), MPI_STATUS_IGNORE);
        assert_eq!(status_at(core::ptr::null_mut(), 2), MPI_STATUS_IGNORE);
    }

    #[test]
    fn a_failed_packed_operation_gives_its_code_and_the_native_status() {
        let _g = fake::install(|c| match c.name {
            "test" => Err(MPI_ERR_TRUNCATE),
            _ => Err(MPI_ERR_OTHER),
        });
        let pending = Pending::P2p(PackedReq::for_tests(0x10, true, false));
        assert!(pending.poke());
        let mut st = garbage();
        assert_eq!(pending.status_into(&mut st), MPI_ERR_TRUNCATE);
        assert_eq!(st.MPI_ERROR, -1, "the code is returned, not written");
        assert_eq!(pending.what(), "the packed point-to-point operation failed");
    }
}

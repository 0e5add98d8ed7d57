//! Layer: services. May use: core, platform.
//!
//! The node transport's counterpart of `platform::memo`: a per-thread memo of blocking and
//! non-blocking collective calls that ran on the communicator's shared-memory segment with
//! a cached schedule ([`Ctx::launch`](super::Ctx::launch) offers them, the hook stores
//! them). A call that repeats one of them (same function, communicator and scalar
//! arguments, compared as the memo compares them) takes the next instance of its channel
//! and runs the remembered schedule at once (a blocking call inline, a non-blocking one as
//! a request the progress engine advances): the communicator lookup, the argument checks,
//! the decision and the schedule cache would all come out the same.
//!
//! Why the ranks still agree: each rank's decision to use the segment depends only on the
//! arguments the standard makes equal on every rank, the configuration, the communicator's
//! size and the segment existing (see `Ctx::shm_decide`). While the memo's epoch lasts none
//! of these change: freeing a communicator, forcing an algorithm, turning the shim off
//! ([`memo::invalidate`]) end it. So a rank whose call misses here (another function took
//! its entry) decides the same way on the ordinary path, and takes the same instance.
//!
//! Only calls whose datatypes and operation are predefined are remembered (those whose
//! schedules the cache keeps, `coll::key`): a derived type's handle may name another type
//! after the program frees it. Calls under `SHIM_STATS` skip the lane, so that every call's
//! path is counted.

use core::cell::{Cell, RefCell};
use core::ffi::{c_int, c_void};
use std::sync::{Arc, Weak};

use crate::core::comm::CommState;
use crate::core::progress::{self, RunCell};
use crate::core::request;
use crate::core::sched::Schedule;
use crate::core::sched::run::{Run, Seq, addresses, inline_ok, seq_finished, seq_steps};
use crate::core::transport::node::{self, Node};
use crate::platform::abi::*;
use crate::platform::api::{Fid, NAMES};
use crate::platform::memo::{self, Arrays, Match, Shape, Words};

/// Entries per thread, chosen by function id and, for rooted collectives, the root (as the
/// memo's).
const SLOTS: usize = memo::SLOTS;
const WAYS: usize = memo::WAYS;

/// What a remembered call runs: its schedule on its segment, with its buffers.
pub(super) struct Remembered {
    /// The communicator's state: a repeated call takes its tag as `Ctx::launch` does
    /// (weak: a remembered call must not keep a freed communicator's shadow alive).
    pub comm: Weak<CommState>,
    pub node: Arc<Node>,
    pub sched: Arc<Schedule>,
    pub send: usize,
    pub recv: usize,
    /// An `I*` call's: a repeat numbers its instance on the non-blocking channel.
    pub nonblocking: bool,
}

struct Entry {
    stamp: Cell<u64>,
    fid: Cell<u16>,
    words: [Cell<usize>; memo::WORDS],
    /// A v or w form's arrays and the communicator's shape they were read with (as the
    /// memo keeps them).
    len: Cell<usize>,
    v: [Cell<i64>; memo::ARRAY],
    shape: Cell<Shape>,
    run: RefCell<Option<Remembered>>,
}

thread_local! {
    static LANE: [[Entry; WAYS]; SLOTS] = const {
        [const {
            [const {
                Entry {
                    stamp: Cell::new(0),
                    fid: Cell::new(0),
                    words: [const { Cell::new(0) }; memo::WORDS],
                    len: Cell::new(0),
                    v: [const { Cell::new(0) }; memo::ARRAY],
                    shape: Cell::new(Shape::new(0, 0)),
                    run: RefCell::new(None),
                }
            }; WAYS]
        }; SLOTS]
    };
    /// What the call in progress ran, offered by `Ctx::launch` for [`store`].
    static OFFERED: RefCell<Option<Remembered>> = const { RefCell::new(None) };
}

/// Runs a call of `fid` on `comm` that repeats the one remembered in its `way` (`same`
/// compares its communicator and scalar arguments, as for `memo::hit`); `None` sends it the ordinary
/// way. Called on the ordinary path (`edge::entry::slow`: re-entry mark, panic guard and
/// the progress rule already served).
#[inline]
pub fn hit(
    fid: Fid,
    way: usize,
    comm: MPI_Comm,
    variant: super::Variant,
    same: impl FnOnce(&mut Words<'_>) -> bool,
) -> Option<c_int> {
    hit_with(fid, way, comm, variant, same, |_, _| true)
}

/// As [`hit`] for a call with array arguments (a v or w form), which `arrays` compares
/// as for `memo::hit_with`.
#[inline]
pub fn hit_with(
    fid: Fid,
    way: usize,
    comm: MPI_Comm,
    variant: super::Variant,
    same: impl FnOnce(&mut Words<'_>) -> bool,
    arrays: impl FnOnce(&Shape, &mut Match<'_>) -> bool,
) -> Option<c_int> {
    if crate::platform::counters::enabled() {
        return None;
    }
    LANE.try_with(|lane| {
        let e = &lane[fid as usize % SLOTS][way % WAYS];
        if e.stamp.get() != memo::epoch()
            || e.fid.get() != fid as u16
            || !same(&mut Words::over(&e.words))
        {
            return None;
        }
        let mut m = Match::over(&e.v);
        if !(arrays(&e.shape.get(), &mut m) && m.whole(e.len.get())) {
            return None;
        }
        let run = e.run.try_borrow().ok()?;
        let r = run.as_ref()?;
        // (before the instance is taken: a miss must leave both as they were)
        let state = r.comm.upgrade()?;
        if r.nonblocking {
            return start(fid, comm, variant, r, state);
        }
        let place = r.node.next(node::BLOCKING);
        let _ = state.next_tag(true);
        drop(state);
        let rc = crate::core::sched::run::run_inline(
            &r.sched,
            &r.node,
            place,
            r.send as *const c_void,
            r.recv as *mut c_void,
            progress::poll_while_waiting,
        );
        drop(run);
        Some(if rc == MPI_SUCCESS {
            rc
        } else {
            // as `Ctx::launch` raises it
            crate::platform::errors::raise(
                comm,
                rc,
                NAMES[fid as usize],
                "a step of the collective failed",
            )
        })
    })
    .ok()
    .flatten()
}

/// Starts a remembered non-blocking call as `Ctx::launch` does: the next instance
/// counted on the non-blocking channel (as `Ctx::shm_decide` counts it: every instance from
/// the segment's first one on runs there, so this one does), a run on it, a request.
fn start(
    fid: Fid,
    comm: MPI_Comm,
    variant: super::Variant,
    r: &Remembered,
    state: Arc<CommState>,
) -> Option<c_int> {
    let super::Variant::Nonblocking(req) = variant else {
        return None;
    };
    if req.is_null() {
        // the ordinary path raises it
        return None;
    }
    let i = state
        .nb_eligible
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let place = r
        .node
        .place(node::NONBLOCKING, i.wrapping_sub(r.node.nb_from));
    let tag = state.next_tag(false);
    // The first step before any run is made: a collective without messages often finishes
    // here (a root whose data went into its slot, a rank whose peers were there first),
    // and then needs no run kept and no request entry, only a handle that says it
    // finished; a rank the others wait for posts its flag without a run's set-up first.
    let (send, recv) = (r.send, r.recv);
    let (mut done, mut truncated) = (0, MPI_SUCCESS);
    let first = if inline_ok(&r.sched) {
        let addr = addresses(send, recv, &place);
        seq_steps(&r.sched, &r.node, &place, addr, &mut done, &mut truncated)
    } else {
        Seq::Waiting
    };
    let h = if first == Seq::Done && truncated == MPI_SUCCESS {
        seq_finished(&r.sched, &r.node, &place);
        request::insert_finished(comm)
    } else {
        let error = match first {
            Seq::Failed(rc) => rc,
            _ => MPI_SUCCESS,
        };
        let mut run = Run::new(
            Arc::clone(&r.sched),
            state,
            tag,
            send as *const c_void,
            recv as *mut c_void,
        )
        .in_shm(Arc::clone(&r.node), place);
        if done > 0 || first != Seq::Waiting {
            run = run.resumed(done, truncated, error);
        }
        let cell = RunCell::new(run);
        progress::submit(&cell);
        request::insert_nonblocking(cell, comm, fid)
    };
    // SAFETY: a non-NULL request pointer from the application.
    unsafe { *req = h };
    Some(MPI_SUCCESS)
}

/// Before a call's checks and decision: nothing offered yet.
#[inline]
pub fn arm() {
    let _ = OFFERED.try_with(|o| o.replace(None));
}

/// The call in progress ran `r` inline on its segment with a cached schedule.
pub(super) fn offer(r: Remembered) {
    let _ = OFFERED.try_with(|o| o.replace(Some(r)));
}

/// After a call: remembers what it ran, if it offered anything and succeeded, under `key`
/// (the memo's key of its arguments) and the `epoch` read before its checks (so that an
/// invalidation racing with the call leaves the entry stale).
pub fn store(key: &memo::Key, rc: c_int, epoch: u64) {
    store_with(key, &Arrays::NONE, Shape::new(0, 0), rc, epoch)
}

/// As [`store`] for a call with array arguments: `arrays` as read with `shape`.
pub fn store_with(key: &memo::Key, arrays: &Arrays, shape: Shape, rc: c_int, epoch: u64) {
    let Some(r) = OFFERED.try_with(|o| o.take()).ok().flatten() else {
        return;
    };
    if rc != MPI_SUCCESS || crate::platform::counters::enabled() {
        return;
    }
    let _ = LANE.try_with(|lane| {
        let e = &lane[key.fid() as usize % SLOTS][key.way()];
        let Ok(mut run) = e.run.try_borrow_mut() else {
            return;
        };
        *run = Some(r);
        e.stamp.set(epoch);
        e.fid.set(key.fid());
        for (c, w) in e.words.iter().zip(key.words()) {
            c.set(w);
        }
        let v = arrays.entries();
        e.len.set(v.len());
        for (c, &a) in e.v.iter().zip(v) {
            c.set(a);
        }
        e.shape.set(shape);
    });
}

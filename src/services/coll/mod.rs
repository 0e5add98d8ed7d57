//! Layer: services. May use: core, platform.
//!
//! The collectives (MPI-4.0 chapters 6 and 8.6) on the schedule engine.
//!
//! `hooks::coll` translates each collective's C arguments (all forms: blocking, `I*`,
//! `*_init`, `_c`) into buffers, counts and datatypes, validates them, and hands a schedule
//! builder from `algo` to [`Ctx::launch`], which runs the schedule according to the form: to
//! completion (blocking), as a request (`I*`), or as an inactive persistent request
//! (`*_init`). Blocking inter-communicator collectives are forwarded to the system MPI
//! (unless it lacks their large-count `_c` function), the other forms run on the schedules
//! of `inter`.
//!
//! A hook's body tells how the call ended with a `Result<Done, Raised>`: `Ok(`[`Done`]`)`
//! when the shim raised no error, saying who did the work (a schedule of the shim, or the
//! system MPI with its return code); `Err(`[`Raised`]`)` when the shim found an error and
//! has already raised it through the communicator's error handler ([`Ctx::fail`]), so
//! that `?` returns it as it is. Either way [`return_code`] is what the MPI call returns.

pub mod algo;
pub mod inter;
pub mod lane;

pub mod select;

use core::cell::{Cell, RefCell};
use core::ffi::{c_int, c_void};
use std::fmt::Display;
use std::sync::Arc;

use crate::core::comm::{CommState, NodeState, WireState};
use crate::core::dtype::TypeInfo;
use crate::core::progress::{self, RunCell};
use crate::core::request::{self, PendingShm, Persistent};
use crate::core::sched::Schedule;
use crate::core::sched::cache::Key;
use crate::core::sched::run::{Awaits, Run};
use crate::core::transport::node::{self, Node, Place, Setup};
use crate::platform::abi::*;
use crate::platform::api::{Fid, NAMES};
use crate::platform::config::{ShmConfig, Transport, VerbsConfig};
use crate::platform::memo;

/// Which form of a collective the application called.
#[derive(Clone, Copy, Debug)]
pub enum Variant {
    /// `MPI_Allreduce`
    Blocking,
    /// `MPI_Iallreduce`: the request to fill in.
    Nonblocking(*mut MPI_Request),
    /// `MPI_Allreduce_init`: info and the persistent request to fill in.
    Persistent(MPI_Info, *mut MPI_Request),
}

/// What the generated entry point tells a collective hook about the call.
#[derive(Clone, Copy, Debug)]
pub struct Call {
    pub fid: Fid,
    pub variant: Variant,
}

/// Collective identifiers for cache keys.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Coll {
    Barrier = 1,
    Bcast,
    Gather,
    Gatherv,
    Scatter,
    Scatterv,
    Allgather,
    Allgatherv,
    Alltoall,
    Alltoallv,
    Alltoallw,
    Reduce,
    Allreduce,
    ReduceScatter,
    ReduceScatterBlock,
    Scan,
    Exscan,
    NeighborAllgather,
    NeighborAllgatherv,
    NeighborAlltoall,
    NeighborAlltoallv,
    NeighborAlltoallw,
}

impl Coll {
    /// How many collectives there are (the tables indexed by `Coll as usize - 1`).
    pub const COUNT: usize = Coll::NeighborAlltoallw as usize;
}

/// How a collective call ended when the shim raised no error: who carried it out, and so
/// what the call returns ([`Done::code`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Done {
    /// A schedule of the shim carried the call ([`Ctx::launch`]): run to completion
    /// (blocking), started (`I*`) or set up as an inactive persistent request (`*_init`).
    /// The call returns `MPI_SUCCESS`.
    Scheduled,
    /// The selection chose `native` and the system MPI's own implementation ran
    /// ([`Ctx::native`]): its return code, which the system MPI has already handed to the
    /// error handler if it is an error. The calls that `memo` remembers end this way.
    Native(c_int),
    /// The shim has no schedule for the call and handed it to the system MPI
    /// ([`Ctx::forward`]): its return code, as for `Native`. (An invalid communicator and
    /// the blocking inter-communicator calls are handed over before any hook body runs:
    /// [`Ctx::begin`].)
    Forwarded(c_int),
}

impl Done {
    /// What the MPI call returns.
    pub fn code(self) -> c_int {
        match self {
            Done::Scheduled => MPI_SUCCESS,
            Done::Native(rc) | Done::Forwarded(rc) => rc,
        }
    }
}

/// An error the shim found in a collective call and has raised through the communicator's
/// error handler ([`Ctx::fail`], `platform::errors::raise`): the call does nothing more and
/// returns the error class (when the handler returns at all). Only `Ctx::fail` makes one,
/// so an `Err(Raised)` always means that the handler has run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Raised(c_int);

impl Raised {
    /// What the MPI call returns: the error class raised.
    pub fn code(self) -> c_int {
        self.0
    }
}

/// What a collective call returns, however it ended.
pub fn return_code(outcome: Result<Done, Raised>) -> c_int {
    match outcome {
        Ok(done) => done.code(),
        Err(raised) => raised.code(),
    }
}

/// A remembered non-blocking call that counted towards its communicator's first instance
/// on the segment (`Ctx::shm_decide`, `memo::Hit::Counted`) counts again and goes to the
/// system MPI: every rank must number those calls alike, whichever of its calls the memo
/// kept. The memo is emptied when the segment is set up, so the count is still open.
/// `None` from the count where a non-blocking call may start the set-up: the hook decides
/// it in full.
pub fn count_again(comm: MPI_Comm, native: &dyn Fn() -> c_int) -> Option<c_int> {
    if let Ok(st) = crate::core::comm::get(comm) {
        // from the count that may start the segment's set-up without waiting on (the
        // memo differs between ranks), the call is decided in full (`Ctx::shm_decide`)
        // (the cheap tests first: the lock only where the count may start the set-up)
        let nb_setup_at = TRANSPORT
            .get()
            .and_then(|(_, cfg)| cfg.nb_setup.then_some(cfg.after));
        let n = st.nb_eligible.load(std::sync::atomic::Ordering::Relaxed);
        if nb_setup_at.is_some_and(|after| n >= after)
            && st.nodes() == 1
            && matches!(
                *st.node.lock().unwrap_or_else(|e| e.into_inner()),
                NodeState::Counting(_)
            )
        {
            return None;
        }
        st.nb_eligible
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
    Some(native())
}

/// `SHIM_TRANSPORT` and `SHIM_SHM_*`, handed over at init.
static TRANSPORT: std::sync::OnceLock<(Transport, ShmConfig)> = std::sync::OnceLock::new();

/// Installs `SHIM_TRANSPORT` and the `SHIM_SHM_*` settings as read at init.
pub fn configure_transport(t: Transport, shm: ShmConfig, verbs: VerbsConfig) {
    let _ = TRANSPORT.set((t, shm));
    let _ = VERBS.set(verbs);
}

/// `SHIM_VERBS_*`, handed over at init.
static VERBS: std::sync::OnceLock<VerbsConfig> = std::sync::OnceLock::new();

/// A call's place in its communicator's shared-memory segment.
enum Ticket {
    /// A blocking or non-blocking collective: its instance of the channel.
    Place(Arc<Node>, Place),
    /// A persistent collective: a channel it holds until it is freed (its starts are the
    /// channel's next instances; a call that does not keep it gives it back).
    Channel(node::Lease),
    /// A non-blocking collective's instance while the segment is being set up (`Setup`):
    /// its run waits for it (`Run::deferred`); `true`: with one copy, which the node may
    /// refuse (`Awaits::SingleCopy`).
    Deferred(Arc<Setup>, u32, bool),
    /// A non-blocking collective's instance that the segment cannot serve after all (one
    /// copy where the node refuses it): the call runs on point-to-point and passes through
    /// the instance (`sched::with_pass_through`).
    PassThrough(Arc<Node>, Place),
    /// A persistent collective's channel reserved while the segment is being set up: its
    /// starts wait for it until it is there.
    Reserved(node::PendingLease),
}

impl Ticket {
    fn node(&self) -> Option<&Arc<Node>> {
        match self {
            Ticket::Place(n, _) | Ticket::PassThrough(n, _) => Some(n),
            Ticket::Channel(l) => Some(&l.node),
            Ticket::Deferred(..) | Ticket::Reserved(_) => None,
        }
    }

    /// The slots' size, known before the segment exists.
    fn cell(&self) -> usize {
        match self {
            Ticket::Deferred(s, ..) => s.geo.cell(),
            Ticket::Reserved(l) => l.setup().geo.cell(),
            t => t.node().map_or(0, |n| n.geo.cell()),
        }
    }

    /// Whether the call waits for its segment's set-up (`Stash`).
    fn deferred(&self) -> bool {
        matches!(self, Ticket::Deferred(..) | Ticket::Reserved(_))
    }
}

/// A collective deferred until its segment is set up (`Ticket::Deferred`,
/// `Ticket::Reserved`), between the hook's two passes: the first builds its shared-memory
/// schedule, the second its point-to-point one and the request (see `hooks::coll`).
pub struct Stash {
    ticket: Ticket,
    sched: Arc<Schedule>,
}

/// A region's pass-through: claims it and releases it (see `Ctx`'s drop).
fn skip() -> Arc<Schedule> {
    let none = crate::core::sched::Builder::new("shm:skip").finish();
    Arc::new(crate::core::sched::with_pass_through(&none, 0))
}

/// A validated call on an intra-communicator, ready to launch.
pub struct Ctx<'a> {
    pub call: Call,
    pub comm: MPI_Comm,
    pub st: Arc<CommState>,
    native: &'a dyn Fn() -> c_int,
    /// A forced `native` runs a schedule instead (see `select::choose`).
    fallback: Cell<bool>,
    /// A forced `shm` that cannot run here runs another schedule (named as a fallback).
    shm_fallback: Cell<bool>,
    /// Whether the shared-memory decision was made (once per call: it takes an instance).
    shm_decided: Cell<bool>,
    /// The call runs on the segment with one copy (`algo::single`; set with the ticket).
    single: Cell<bool>,
    /// Allgatherv's largest block in bytes (every rank knows them all), `-1` elsewhere.
    largest: Cell<i64>,
    ticket: RefCell<Option<Ticket>>,
    /// The call could use shared memory once the segment exists: its verdict must not be
    /// remembered (`memo`), or the ranks would stop counting alike.
    no_memo: Cell<bool>,
    /// A reduction's datatype and count (`Ctx::reduction`), for its footprint.
    red: Cell<Option<(TypeInfo, i64)>>,
    /// Whether the reduction's operation is predefined (not the program's function).
    red_builtin: Cell<bool>,
    /// The call must not go to the library: on some rank it may wait for the segment's
    /// set-up and then run on point-to-point (`CommState::nb_setup`).
    no_native: Cell<bool>,
    /// A deferred call's shared-memory schedule: built by the first pass, launched by the
    /// second.
    stash: RefCell<Option<Stash>>,
    /// The call started its communicator's set-up from `Counting` at this count.
    started: Cell<Option<u32>>,
}

impl Drop for Ctx<'_> {
    /// A call that took its instance of a shared-memory channel and then stopped (an error
    /// found after the decision) still passes through its region, claiming and releasing it,
    /// or the instance `depth` later would wait for its acknowledgement forever.
    /// (A reserved persistent channel just goes back: nothing started on it.)
    fn drop(&mut self) {
        let stashed = self.stash.get_mut().take().map(|s| s.ticket);
        for ticket in [self.ticket.get_mut().take(), stashed]
            .into_iter()
            .flatten()
        {
            match ticket {
                Ticket::Deferred(setup, instance, _) => {
                    let none = Arc::new(crate::core::sched::Builder::new("none").finish());
                    let run = Run::new(
                        none,
                        Arc::clone(&self.st),
                        0,
                        core::ptr::null(),
                        core::ptr::null_mut(),
                    )
                    .deferred(setup, skip(), Awaits::Instance(instance), None);
                    progress::submit(&RunCell::new(run));
                }
                Ticket::Place(node, place) | Ticket::PassThrough(node, place) => {
                    let _ = crate::core::sched::run::run_inline(
                        &skip(),
                        &node,
                        place,
                        core::ptr::null(),
                        core::ptr::null_mut(),
                        progress::poll_while_waiting,
                    );
                }
                // a persistent initialization that failed on this rank is made again
                // (the others may wait for it): it must take the channel the others took,
                // and start the set-up where they did (MPI-4.0 §9.3, the program goes on)
                Ticket::Channel(lease) => lease.revert(),
                Ticket::Reserved(lease) => {
                    let setup = Arc::clone(lease.setup());
                    lease.revert();
                    if let Some(n) = self.started.get() {
                        let mut g = self.st.node.lock().unwrap_or_else(|e| e.into_inner());
                        let ours = matches!(&*g, NodeState::Pending(s) if Arc::ptr_eq(s, &setup));
                        if ours && setup.untouched() {
                            *g = NodeState::Counting(n);
                            self.st
                                .nb_setup
                                .store(false, std::sync::atomic::Ordering::Relaxed);
                        }
                    }
                }
            }
        }
    }
}

impl<'a> Ctx<'a> {
    /// Looks the communicator up. `Err(rc)` means the call was handed to the system MPI
    /// (an invalid communicator, which it reports, or an inter-communicator, whose
    /// collectives it carries out) and `rc` is the result.
    pub fn begin(
        call: Call,
        comm: MPI_Comm,
        native: &'a dyn Fn() -> c_int,
    ) -> Result<Ctx<'a>, c_int> {
        let name = NAMES[call.fid as usize];
        let has_native = native_exists(call.fid, name);
        let st = match crate::core::comm::get(comm) {
            Ok(s) => s,
            Err(_) if has_native => return Err(native()),
            // the library has no such function to report it: the shim does (an invalid
            // communicator's error belongs to no object, so the world's handler runs)
            Err(_) => {
                return Err(crate::platform::errors::raise(
                    comm,
                    MPI_ERR_COMM,
                    name,
                    "the communicator is not valid",
                ));
            }
        };
        // blocking calls on an intercommunicator are the system MPI's; the other forms, the
        // large-count forms the library lacks, and Open MPI's Scatterv (which reports a
        // truncation where the receive type has a negative displacement: README, "Problems
        // of the system MPI") run on the shim's schedules (see `inter`)
        let wrong = cfg!(feature = "abi-ompi") && name.starts_with("MPI_Scatterv");
        if st.inter && matches!(call.variant, Variant::Blocking) && has_native && !wrong {
            crate::platform::counters::note_path(call.fid, "forwarded", "inter-communicator");
            return Err(native());
        }
        Ok(Ctx {
            call,
            comm,
            st,
            native,
            fallback: Cell::new(false),
            shm_fallback: Cell::new(false),
            shm_decided: Cell::new(false),
            single: Cell::new(false),
            largest: Cell::new(-1),
            ticket: RefCell::new(None),
            no_memo: Cell::new(false),
            red: Cell::new(None),
            red_builtin: Cell::new(false),
            no_native: Cell::new(false),
            stash: RefCell::new(None),
            started: Cell::new(None),
        })
    }

    /// After the hook's first pass: a call deferred until its segment is set up, whose
    /// point-to-point alternative the second pass builds (with a fresh context given this).
    pub fn take_stash(&self) -> Option<Stash> {
        self.stash.borrow_mut().take()
    }

    /// The second pass of a deferred call: no segment now, no library, and the run it
    /// launches waits for the segment first.
    pub fn adopt(&self, stash: Stash) {
        self.shm_decided.set(true);
        self.no_native.set(true);
        self.no_memo.set(true);
        *self.stash.borrow_mut() = Some(stash);
    }

    pub fn name(&self) -> &'static str {
        NAMES[self.call.fid as usize]
    }

    pub fn rank(&self) -> c_int {
        self.st.rank
    }

    pub fn size(&self) -> c_int {
        self.st.size
    }

    pub fn me(&self) -> algo::Rank {
        algo::Rank {
            rank: self.st.rank,
            size: self.st.size,
        }
    }

    /// Raises an error class on the communicator; returns it as `Err` for `?`.
    pub fn fail<T>(&self, class: c_int, why: impl Display) -> Result<T, Raised> {
        Err(Raised(crate::platform::errors::raise(
            self.comm,
            class,
            self.name(),
            &why.to_string(),
        )))
    }

    pub fn check_count(&self, count: i64, what: &str) -> Result<(), Raised> {
        if count < 0 {
            self.fail(MPI_ERR_COUNT, format_args!("{what} is negative ({count})"))
        } else {
            Ok(())
        }
    }

    pub fn check_root(&self, root: c_int) -> Result<(), Raised> {
        if root < 0 || root >= self.size() {
            self.fail(
                MPI_ERR_ROOT,
                format_args!(
                    "root {root} is not a rank of a communicator of size {}",
                    self.size()
                ),
            )
        } else {
            Ok(())
        }
    }

    /// A datatype that must be valid (and committed).
    pub fn type_info(&self, dt: MPI_Datatype, what: &str) -> Result<TypeInfo, Raised> {
        match crate::core::dtype::check_usable(dt) {
            Ok(i) => Ok(i),
            Err(c) => self.fail(c, format_args!("{what} is not a valid committed datatype")),
        }
    }

    /// Checks an operation against a datatype (see `ops::check`).
    pub fn check_op(&self, op: MPI_Op, dt: MPI_Datatype) -> Result<(), Raised> {
        match crate::core::ops::check(op, dt) {
            Ok(()) => Ok(()),
            Err(c) => self.fail(c, "the operation is not defined for this datatype"),
        }
    }

    /// The reduction parameters after checking count, datatype and operation.
    pub fn reduction(
        &self,
        count: i64,
        dt: MPI_Datatype,
        op: MPI_Op,
    ) -> Result<algo::Reduction, Raised> {
        self.check_count(count, "count")?;
        let ti = self.type_info(dt, "datatype")?;
        self.check_op(op, dt)?;
        crate::platform::counters::note_bytes((count * ti.size) as u64);
        self.red.set(Some((ti, count)));
        self.red_builtin
            .set(crate::platform::abi::is_builtin_op(op));
        Ok(algo::Reduction {
            count,
            dt,
            ti,
            op,
            commutative: crate::core::ops::commutative(op),
        })
    }

    /// A buffer that must be a real address when it describes data of a predefined type
    /// (`MPI_BOTTOM`, i.e. NULL, is legal with absolute-address derived datatypes).
    pub fn check_buffer(
        &self,
        buf: *const c_void,
        count: i64,
        dt: MPI_Datatype,
        what: &str,
    ) -> Result<(), Raised> {
        if crate::core::dtype::null_buffer(buf, count, dt) {
            return self.fail(MPI_ERR_BUFFER, format_args!("{what} is NULL"));
        }
        if core::ptr::eq(buf, MPI_IN_PLACE) {
            return self.fail(
                MPI_ERR_BUFFER,
                format_args!("MPI_IN_PLACE is not allowed for {what} here"),
            );
        }
        Ok(())
    }

    /// Send and receive buffers that alias (the same address where the call moves data
    /// between them) are erroneous: the standard forbids aliased arguments other than
    /// `MPI_IN_PLACE`. `applies` is the condition under which the system MPI checks it
    /// (MPICH's `MPIR_ERRTEST_ALIAS_COLL`, whose class the shim reports too).
    pub fn check_alias(
        &self,
        applies: bool,
        send: *const c_void,
        recv: *const c_void,
    ) -> Result<(), Raised> {
        if applies && core::ptr::eq(send, recv) {
            return self.fail(
                MPI_ERR_BUFFER,
                "the send and receive buffers are the same (aliased arguments; use MPI_IN_PLACE)",
            );
        }
        Ok(())
    }

    /// Runs `build`'s schedule (or the cached one for `key`) in the form the application
    /// called: to completion, as a request, or as a persistent request ([`Done::Scheduled`];
    /// a message that fails, a NULL request or an invalid info is raised).
    pub fn launch(
        &self,
        key: Option<Key>,
        send: *const c_void,
        recv: *mut c_void,
        build: impl FnOnce() -> Result<Schedule, Raised>,
    ) -> Result<Done, Raised> {
        // a schedule the cache keeps (predefined datatypes and operation) is one the lane
        // may remember
        let cacheable = key.is_some();
        let cached = key.as_ref().and_then(|k| {
            self.st
                .cache
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get(k)
        });
        let sched = match cached {
            Some(s) => s,
            None => {
                let s = Arc::new(build()?);
                if let Some(k) = key {
                    self.st
                        .cache
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .put(k, Arc::clone(&s));
                }
                s
            }
        };
        let path = if self.fallback.get() {
            select::fallback_name(sched.algorithm)
        } else if self.shm_fallback.get() {
            select::shm_fallback_name(sched.algorithm)
        } else {
            sched.algorithm
        };
        match self.call.variant {
            Variant::Blocking => {
                crate::platform::counters::note_path(self.call.fid, "schedule", path);
                // before the inline path, which a two-level schedule takes on some ranks
                // only (the set-up is a collective)
                self.ensure_wire();
                if crate::core::sched::run::inline_ok(&sched) {
                    if let Some(Ticket::Place(node, place)) = self.ticket.borrow_mut().take() {
                        // every blocking collective takes a tag, whatever path it runs on
                        // here: whether a rank's schedule has messages or scratch (a
                        // two-level leader's, a single copy through scratch) differs
                        // between ranks, and the tags of the point-to-point collectives
                        // after it must not
                        let _ = self.st.next_tag(true);
                        let rc = crate::core::sched::run::run_inline(
                            &sched,
                            &node,
                            place,
                            send,
                            recv,
                            progress::poll_while_waiting,
                        );
                        if rc != MPI_SUCCESS {
                            return self.fail(rc, "a step of the collective failed");
                        }
                        if cacheable {
                            lane::offer(lane::Remembered {
                                comm: Arc::downgrade(&self.st),
                                node,
                                sched,
                                send: send as usize,
                                recv: recv as usize,
                                nonblocking: false,
                            });
                        }
                        return Ok(Done::Scheduled);
                    }
                }
                let shm = sched.shm;
                let mut run = Run::new(
                    sched,
                    Arc::clone(&self.st),
                    self.st.next_tag(true),
                    send,
                    recv,
                );
                if shm {
                    run = self.bind(run);
                }
                let rc = progress::run_blocking(&mut run);
                if rc != MPI_SUCCESS {
                    return self.fail(rc, "a message of the collective failed");
                }
                Ok(Done::Scheduled)
            }
            Variant::Nonblocking(req) => {
                if req.is_null() {
                    return self.fail(MPI_ERR_ARG, "the request argument is NULL");
                }
                if self.stash_deferred(&sched) {
                    return Ok(Done::Scheduled);
                }
                let shm = sched.shm;
                if shm && cacheable {
                    if let Some(Ticket::Place(node, _)) = &*self.ticket.borrow() {
                        lane::offer(lane::Remembered {
                            comm: Arc::downgrade(&self.st),
                            node: Arc::clone(node),
                            sched: Arc::clone(&sched),
                            send: send as usize,
                            recv: recv as usize,
                            nonblocking: true,
                        });
                    }
                }
                // (one copy that the node refuses: point-to-point beside the instance)
                let pass = if matches!(*self.ticket.borrow(), Some(Ticket::PassThrough(..))) {
                    self.ticket.borrow_mut().take()
                } else {
                    None
                };
                let sched = match pass {
                    Some(_) => Arc::new(crate::core::sched::with_pass_through(&sched, self.size())),
                    None => sched,
                };
                let mut run = Run::new(
                    sched,
                    Arc::clone(&self.st),
                    self.st.next_tag(false),
                    send,
                    recv,
                );
                if shm {
                    run = self.bind(run);
                }
                if let Some(Ticket::PassThrough(node, place)) = pass {
                    run = run.in_shm(node, place);
                }
                // (a deferred call's path is noted where its run knows it, `Run::resolve`)
                match self.stash.borrow_mut().take() {
                    Some(Stash {
                        ticket: Ticket::Deferred(setup, instance, single),
                        sched,
                    }) => {
                        let at = if single {
                            Awaits::SingleCopy(instance)
                        } else {
                            Awaits::Instance(instance)
                        };
                        run = run.deferred(setup, sched, at, Some((self.call.fid, path)));
                    }
                    _ => crate::platform::counters::note_path(self.call.fid, "schedule", path),
                }
                let cell = RunCell::new(run);
                progress::submit(&cell);
                // SAFETY: a non-NULL request pointer from the application.
                unsafe { *req = request::insert_nonblocking(cell, self.comm, self.call.fid) };
                Ok(Done::Scheduled)
            }
            Variant::Persistent(info, req) => {
                if req.is_null() {
                    return self.fail(MPI_ERR_ARG, "the request argument is NULL");
                }
                if info != MPI_INFO_NULL() {
                    // an invalid handle yields an error code
                    if crate::platform::mpi::comm::info_get_nkeys(info).is_err() {
                        return self
                            .fail(MPI_ERR_INFO, "the info argument is not a valid info object");
                    }
                }
                // the initialization is ordered like a collective (its starts need not
                // be), so the shadow's duplication starts here
                self.st.ensure_shadow();
                if self.stash_deferred(&sched) {
                    return Ok(Done::Scheduled);
                }
                let shm = match self.ticket.borrow_mut().take() {
                    Some(Ticket::Channel(lease)) if sched.shm => Some(lease),
                    _ => None,
                };
                let pending = match self.stash.borrow_mut().take() {
                    Some(Stash {
                        ticket: Ticket::Reserved(lease),
                        sched,
                    }) => Some(PendingShm { lease, sched }),
                    _ => None,
                };
                let p = Persistent {
                    shm,
                    pending,
                    sched,
                    comm: Arc::clone(&self.st),
                    tag: self.st.next_persistent_tag(),
                    send: send as usize,
                    recv: recv as usize,
                    active: None,
                    path,
                };
                // SAFETY: a non-NULL request pointer from the application.
                unsafe { *req = request::insert_persistent(p, self.comm, self.call.fid) };
                Ok(Done::Scheduled)
            }
        }
    }

    /// The hook's first pass of a call deferred until its segment is set up: its
    /// shared-memory schedule is kept for the second pass (`Stash`).
    fn stash_deferred(&self, sched: &Arc<Schedule>) -> bool {
        if !self.ticket.borrow().as_ref().is_some_and(Ticket::deferred) {
            return false;
        }
        // the set-up's exchanges run on the private duplicate (begun here on every rank
        // alike: the call is valid)
        self.st.ensure_shadow();
        if let Some(ticket) = self.ticket.borrow_mut().take() {
            *self.stash.borrow_mut() = Some(Stash {
                ticket,
                sched: Arc::clone(sched),
            });
        }
        true
    }

    /// Where the ranks' slots lie in a region of the segment this call got
    /// ([`Self::shm_decide`]); only asked for shared-memory calls.
    pub fn slots(&self) -> algo::shm::Slots {
        let cell = self.ticket.borrow().as_ref().map_or(0, |t| t.cell() as i64);
        algo::shm::Slots {
            cell,
            data: node::DATA as i64,
        }
    }

    /// Notes Allgatherv's largest block (`bytes`), which every rank knows, for
    /// [`Self::shm_decide`]: where all fit the slots it needs no CMA.
    pub fn note_largest_block(&self, bytes: i64) {
        self.largest.set(bytes);
    }

    /// How the blocks of a v or w form travel on the segment (`algo::single::Inline`):
    /// through the slots below `SHIM_SHM_SINGLE_COPY`, by address from there.
    pub fn inline(&self) -> algo::single::Inline {
        let max = TRANSPORT
            .get()
            .and_then(|(_, cfg)| cfg.single_copy)
            .map_or(i64::MAX, |t| t as i64 - 1);
        algo::single::Inline { max }
    }

    /// This rank's place among the nodes when the call runs on the segment of a
    /// communicator that spans several (`algo::hier`).
    pub fn hier(&self) -> Option<algo::hier::Hier> {
        let t = self.ticket.borrow();
        let l = t.as_ref()?.node()?.layout.as_ref()?;
        Some(algo::hier::Hier {
            layout: Arc::clone(l),
            me: self.me(),
        })
    }

    /// The leaders' algorithm of a two-level collective: the automatic choice among the
    /// shim's schedules for as many ranks as nodes (each on its own).
    pub fn leaders_choice(
        &self,
        h: &algo::hier::Hier,
        coll: Coll,
        bytes: i64,
        commutative: bool,
    ) -> select::Choice {
        let leaders = h.leaders().size;
        select::choose(
            coll,
            self.form(),
            leaders,
            leaders,
            bytes,
            commutative,
            false,
        )
    }

    /// Gives a shared-memory run its place (taken by [`Self::shm_decide`]).
    fn bind(&self, run: Run) -> Run {
        match self.ticket.borrow_mut().take() {
            Some(Ticket::Place(node, place)) => run.in_shm(node, place),
            // not reached: a shared-memory schedule is built only after a ticket; its
            // shared-memory actions then fail with MPI_ERR_INTERN
            _ => run,
        }
    }

    /// The bytes of a rank's slot the call's shared-memory algorithm needs (`bytes`: the
    /// size the call decides by).
    fn footprint(&self, coll: Coll, bytes: i64) -> i64 {
        let n = self.size() as i64;
        let span = |count: i64| self.red.get().map_or(i64::MAX, |(ti, _)| ti.span(count));
        let count = self.red.get().map_or(0, |(_, c)| c);
        match coll {
            Coll::Barrier => 0,
            Coll::Scatter | Coll::Alltoall => bytes.saturating_mul(n),
            Coll::Reduce | Coll::Allreduce | Coll::Scan | Coll::Exscan => span(count),
            Coll::ReduceScatterBlock => span(count.saturating_mul(n)),
            // (every rank's whole operand: `bytes` is all the blocks' bytes)
            Coll::ReduceScatter => self.red.get().map_or(i64::MAX, |(ti, _)| {
                if ti.size == 0 {
                    0
                } else {
                    ti.span(bytes / ti.size)
                }
            }),
            // only the root (each pair) knows the blocks: no size all ranks agree on, so as
            // large as any, and the choice does not depend on it (single copy, where forced)
            _ if !select::spec_of(coll).sized => i64::MAX,
            _ => bytes,
        }
    }

    /// Whether this call runs on the communicator's shared-memory segment: the
    /// configuration allows it (`SHIM_TRANSPORT`, `SHIM_<COLL>_ALGORITHM`), its data fits a
    /// slot, and the segment exists; for a non-blocking call, also that its instance is one
    /// every rank runs in shared memory. The segment is set up here, at the
    /// `SHIM_SHM_AFTER`-th blocking call that could use it. Every input is the same on
    /// every rank (sizes the standard makes equal, counts of calls every rank makes in the
    /// same order), so all ranks decide alike. Decided once per call.
    fn shm_decide(&self, coll: Coll, bytes: i64, commutative: bool) -> bool {
        let footprint = self.footprint(coll, bytes);
        if self.shm_decided.replace(true) {
            return self
                .ticket
                .borrow()
                .as_ref()
                .is_some_and(|t| !matches!(t, Ticket::PassThrough(..)));
        }
        let Some(&(transport, cfg)) = TRANSPORT.get() else {
            return false;
        };
        // (its set-up is a collective on the private duplicate, as the segment's would be)
        let verbs = transport == Transport::Verbs;
        // under `verbs` the segment serves a node as under `auto`; the messages that are
        // left (between nodes, or where the segment does not win) take the queue pairs
        let transport = match transport {
            Transport::Verbs => Transport::Auto,
            t => t,
        };
        let allowed = select::shm_allowed(coll);
        if transport == Transport::Pmpi || self.size() < 2 || self.st.inter || allowed.is_none() {
            // (before the rules below, which every call that is decided would ask)
            return false;
        }
        let form = self.form();
        // `auto` takes the segment where it was measured to win: one rule on one node,
        // another across nodes (known once the segment exists, below)
        let auto = transport == Transport::Auto && allowed == Some(false);
        // beyond the slot, or from `SHIM_SHM_SINGLE_COPY`, one copy from the others' memory
        // (`algo::single`), where the collective has it and the node allows it (below)
        // (the v and w forms: as if beyond the slot, see `mixed` below)
        let big = footprint > cfg.slot as i64 || !select::copy_in_out_serves(coll);
        // (a reduction reads its operands' slices in place: a datatype without holes; it
        // stages one with holes, `algo::single::reduction_serves`: `auto` takes that with
        // a predefined operation, the pair types' MINLOC and MAXLOC (README, "The node
        // transport"), a user operation only where forced)
        let dense = self.red.get().is_none_or(|(ti, _)| ti.dense());
        let staged = (!auto || self.red_builtin.get())
            && self
                .red
                .get()
                .is_some_and(|(ti, _)| algo::single::reduction_serves(&ti));
        // (the v and w forms: each block its own way, through a slot or by address, so
        // from any size where single copy is on; `algo::single::Inline`)
        let mixed = select::mixed_serves(coll);
        // a non-blocking call on a communicator whose segment was set up without waiting:
        // single copy by `nb_single` below (the set-up's outcome does not change its
        // decision, see `nb_deferrable`)
        let nb_set_up = self.st.nb_setup.load(std::sync::atomic::Ordering::Relaxed);
        let nb_rules = form == select::Form::Nonblocking && nb_set_up;
        let single_ok = select::single_copy_serves(coll)
            && cfg
                .single_copy
                .is_some_and(|t| mixed || footprint as u64 >= t)
            && (dense || staged)
            && (!select::single_copy_addresses(coll) || 8 * self.size() as u64 <= cfg.slot);
        let mut single = !nb_rules && single_ok;
        // this machine's measured rows (across nodes: measured across as many), where there
        // are any, else the rules
        let nodes = self.st.nodes();
        let row = (form == select::Form::Blocking)
            .then(|| select::segment_measured(coll, self.size(), nodes, bytes))
            .flatten();
        let copy_wins = row.unwrap_or_else(|| select::shm_wins(coll, form, self.size(), footprint));
        let single_rule = || {
            row.unwrap_or_else(|| {
                if mixed {
                    select::mixed_wins(coll, form, self.size(), footprint, cfg.slot as i64)
                } else {
                    select::single_copy_wins(coll, form, self.size(), footprint)
                }
            })
        };
        let single_wins = single && single_rule();
        let one_node = copy_wins || single_wins;
        let across = (nodes > 1)
            .then_some(row)
            .flatten()
            .unwrap_or_else(|| select::hier_wins(coll, form, self.size(), nodes, footprint));
        // a blocking call the library takes where its `I*` form would take the segment
        // (under Open MPI, Bcast and Gather from 2 KiB at 2 ranks): on a communicator that
        // has made such `I*` calls it counts towards the set-up, and still goes to the
        // library; else a communicator whose blocking calls all go there kept its `I*` calls
        // on point-to-point for good
        let for_nb = auto
            && form == select::Form::Blocking
            && !one_node
            && nodes == 1
            && !big
            && select::shm_wins(coll, select::Form::Nonblocking, self.size(), footprint);
        // where a segment may be set up without waiting for the other ranks (`node::Setup`):
        // one node, not under `verbs`, the nodes the census found (`ShmConfig::nb_setup`)
        let set_up_unwaited = nodes == 1 && !verbs && cfg.nb_setup;
        // beyond the slot (and the v and w forms) with one copy, decided without the node's
        // CMA, which a rank whose set-up is not done does not know yet: where the node
        // refuses it, every rank passes through the call's instance and runs it on
        // point-to-point (`Ticket::PassThrough`, `Awaits::SingleCopy`)
        let nb_single = form == select::Form::Nonblocking
            && set_up_unwaited
            && big
            && single_ok
            && (!auto || single_rule());
        // a non-blocking call on one node that the segment takes, whatever the set-up
        // found (through the slots, or `nb_single`): one that may start the set-up without waiting
        // (`node::Setup`), and once it was started, one whose run waits for it on a rank
        // where it is not done yet and runs on point-to-point where it failed, so that it
        // must not go to the library on the ranks where it is done or failed either (the
        // ranks' collectives on the communicator would then differ)
        let nb_deferrable = form == select::Form::Nonblocking
            && set_up_unwaited
            && if big { nb_single } else { !auto || copy_wins };
        // the same for a persistent initialization, which reserves its channel while the
        // set-up goes on (`Setup::reserve`); one with single copy waits for the set-up (the
        // node's CMA decides it)
        let p_deferrable = form == select::Form::Persistent
            && cfg.channels > 0
            && set_up_unwaited
            && !big
            && !single
            && (!auto || copy_wins);
        if (auto && !one_node && !across && !for_nb && !nb_single)
            || (big && !single && !nb_single)
            // no data: nothing to move, and nothing to wait for (MPI-4.0 §6.1: a collective
            // may complete as soon as the caller's part is done); the point-to-point path's
            // schedules are empty there (0.6 µs against 0.03 for MPICH's 0-byte Bcast)
            || (footprint == 0 && coll != Coll::Barrier)
        {
            return false;
        }
        let mut g = self.st.node.lock().unwrap_or_else(|e| e.into_inner());
        if let NodeState::Pending(setup) = &*g {
            if p_deferrable {
                if let Some(lease) = setup.reserve() {
                    self.no_memo.set(true);
                    *self.ticket.borrow_mut() = Some(Ticket::Reserved(lease));
                    return true;
                }
            }
            // a blocking or persistent call waits for the set-up (its call may), so that
            // its decision is the one the ranks that are done make
            if form != select::Form::Nonblocking {
                let setup = Arc::clone(setup);
                drop(g);
                let st = &self.st;
                progress::wait_until(|| {
                    setup
                        .poll(|| st.shadow_ready().then(|| st.shadow()))
                        .is_some()
                });
                g = self.st.node.lock().unwrap_or_else(|e| e.into_inner());
            }
        }
        if let NodeState::Pending(setup) = &*g {
            if let Some(outcome) = setup.outcome() {
                *g = match outcome {
                    Some(node) => NodeState::Ready(node),
                    None => NodeState::Off,
                };
                memo::invalidate();
            }
        }
        if matches!(*g, NodeState::Off) {
            if (nb_rules && nb_deferrable) || (nb_set_up && p_deferrable) {
                self.no_native.set(true);
            }
            return false;
        }
        let count_nb = || {
            self.st
                .nb_eligible
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        };
        if let NodeState::Counting(n) = &mut *g {
            if form == select::Form::Nonblocking {
                let i = count_nb();
                if i == 0 {
                    // the first: blocking calls that count for it (`for_nb`) may be
                    // remembered as the library's on some ranks (a memo hit never counts)
                    memo::invalidate();
                }
                if nb_deferrable && i >= cfg.after {
                    // set up from here without waiting: this instance is the segment's first
                    let setup = self.start_setup(&mut g, &cfg, i);
                    *self.ticket.borrow_mut() = Some(Ticket::Deferred(setup, i, nb_single));
                    self.single.set(nb_single);
                    return true;
                }
                // remembered, a repeat counts again (`count_again`): a program whose
                // non-blocking calls repeat pays the decision once, not on every call
                memo::note_counted();
                return false;
            }
            if p_deferrable {
                // a persistent collective is made to be started many times (MPI-4.0
                // §6.13): its first initialization sets the segment up, without waiting,
                // and the next non-blocking instance is the segment's first
                let nb_from = self
                    .st
                    .nb_eligible
                    .load(std::sync::atomic::Ordering::Relaxed);
                self.started.set(Some(*n));
                let setup = self.start_setup(&mut g, &cfg, nb_from);
                let Some(lease) = setup.reserve() else {
                    return false;
                };
                *self.ticket.borrow_mut() = Some(Ticket::Reserved(lease));
                return true;
            }
            if for_nb
                && self
                    .st
                    .nb_eligible
                    .load(std::sync::atomic::Ordering::Relaxed)
                    == 0
            {
                return false;
            }
            self.no_memo.set(true);
            if form != select::Form::Blocking {
                return false;
            }
            if *n < cfg.after {
                *n += 1;
                return false;
            }
            *g = match self.setup_node(&cfg) {
                Some(node) => NodeState::Ready(Arc::new(node)),
                None => NodeState::Off,
            };
            // verdicts remembered before may now differ
            memo::invalidate();
        }
        if let NodeState::Pending(..) = &*g {
            // (a non-blocking call: the others waited above)
            if !nb_deferrable {
                return false;
            }
            let i = count_nb();
            let NodeState::Pending(setup) = &*g else {
                return false;
            };
            self.no_memo.set(true);
            *self.ticket.borrow_mut() = Some(Ticket::Deferred(Arc::clone(setup), i, nb_single));
            self.single.set(nb_single);
            return true;
        }
        let NodeState::Ready(node) = &*g else {
            return false;
        };
        if for_nb {
            return false;
        }
        // a non-blocking call with one copy on a communicator set up without waiting:
        // decided as a rank whose set-up is not done decides it (`Run::resolve`), whatever
        // the node's CMA (where it refuses single copy, a pass-through below)
        let nb_one = nb_rules && nb_single;
        // across nodes, the collectives with a two-level algorithm (`algo::hier`); decided
        // before the non-blocking instance is counted: a counted instance must run on the
        // segment, or the ones after it would wait for its acknowledgement
        // a Bcast, Reduce, Allreduce, Reduce_scatter_block, Gather or Scatter beyond the slot
        // across nodes: its node phase with one copy (`algo::hier::bcast_pipelined`,
        // `reduce_pipelined`, `gather_single`, `scatter_single`), where single copy is
        // allowed at this size (Reduce_scatter_block where the nodes' vector is in rank
        // order, `hier::Across::Blocks`)
        let pipelined = node
            .layout
            .as_ref()
            .is_some_and(|l| coll != Coll::ReduceScatterBlock || l.blocks())
            && matches!(
                coll,
                Coll::Bcast
                    | Coll::Reduce
                    | Coll::Allreduce
                    | Coll::Gather
                    | Coll::Scatter
                    | Coll::ReduceScatterBlock
            )
            && big
            && single
            && dense
            && node.cma;
        // Allgatherv without CMA: its blocks all through the slots, where every block fits
        // (every rank knows them all; `algo::single::Inline`)
        let inline_only =
            mixed && (0..=(cfg.slot as i64).min(self.inline().max)).contains(&self.largest.get());
        if single && (node.layout.is_some() || !node.cma) && !(node.layout.is_none() && inline_only)
        {
            // no single copy across nodes or where the kernel refused it: the slots take
            // what fits
            single = false;
        }
        let wins = nb_one
            || match &node.layout {
                // Allgather's and Alltoall's node phase reads the ranks' memory (one copy): any
                // size (Allgatherv, which has no copy-in-copy-out form: from the single-copy size)
                Some(_) if matches!(coll, Coll::Allgather | Coll::Allgatherv | Coll::Alltoall) => {
                    node.cma && (!auto || across)
                }
                Some(l) if pipelined => {
                    hier_serves(coll, commutative || l.blocks()) && (!auto || across)
                }
                Some(l) => {
                    !big && hier_serves(coll, commutative || l.blocks()) && (!auto || across)
                }
                None if big && !single => false,
                None => !auto || if single { single_wins } else { copy_wins },
            };
        if !wins {
            return false;
        }
        let nb = (form == select::Form::Nonblocking).then(count_nb);
        let node = Arc::clone(node);
        drop(g);
        let ticket = match (form, nb) {
            (select::Form::Blocking, _) => {
                let place = node.next(node::BLOCKING);
                Ticket::Place(node, place)
            }
            (select::Form::Nonblocking, Some(i)) => {
                if i.wrapping_sub(node.nb_from) as i32 >= 0 {
                    let place = node.place(node::NONBLOCKING, i.wrapping_sub(node.nb_from));
                    if nb_one && !node.cma {
                        self.no_memo.set(true);
                        self.no_native.set(true);
                        *self.ticket.borrow_mut() = Some(Ticket::PassThrough(node, place));
                        return false;
                    }
                    Ticket::Place(node, place)
                } else {
                    return false;
                }
            }
            (select::Form::Persistent, _) => {
                // none left: the ranks agree on the channels every one has given back, an
                // allgather (an initialization is non-local and ordered like a collective,
                // MPI-4.0 §6.13); after the arguments were found valid, as the ranks whose
                // call failed make it again
                let ch = node.persistent_channel().or_else(|| {
                    node.reclaim_channels(self.st.shadow(), self.size() as usize)
                        .ok()
                        .and_then(|()| node.persistent_channel())
                });
                match ch {
                    Some(lease) => Ticket::Channel(lease),
                    None => return false,
                }
            }
            _ => return false,
        };
        if let Ticket::Place(_, p) = &ticket {
            tracing::trace!(target: "shim::shm", "{} instance {} ({:?})", self.name(), p.instance, form);
        }
        if nb_one {
            self.no_memo.set(true);
        }
        *self.ticket.borrow_mut() = Some(ticket);
        self.single.set(single || pipelined || nb_one);
        true
    }

    /// Starts the segment's set-up without waiting for the other ranks (`node::Setup`;
    /// every rank starts it at the same call): `nb_from` is the segment's first non-blocking
    /// instance. From here the communicator's non-blocking calls follow the rules that
    /// keep every rank's decision alike while the set-up goes on (`CommState::nb_setup`).
    fn start_setup(&self, g: &mut NodeState, cfg: &ShmConfig, nb_from: u32) -> Arc<Setup> {
        let geo = node::Geometry {
            ranks: 0,
            channels: 2 + cfg.channels,
            depth: cfg.depth,
            slot: cfg.slot as usize,
        };
        // (the private duplicate, on which the exchanges run, is begun where the call is
        // known to be valid: `launch`; a duplication begun on some ranks only would hang)
        let cma = cfg.single_copy.is_some();
        let setup = Arc::new(Setup::start(self.rank(), self.size(), geo, nb_from, cma));
        *g = NodeState::Pending(Arc::clone(&setup));
        self.st
            .nb_setup
            .store(true, std::sync::atomic::Ordering::Relaxed);
        // verdicts remembered before may now differ
        memo::invalidate();
        self.no_memo.set(true);
        setup
    }

    /// Whether this call, on the segment, moves its data with one copy (`algo::single`;
    /// across nodes: the two-level Bcast, Reduce, Allreduce, Reduce_scatter_block, Gather and
    /// Scatter beyond the slot, `algo::hier`).
    pub fn single_copy(&self) -> bool {
        self.single.get()
    }

    /// Sets the segment up (every rank of the communicator is in this call): `None` where
    /// shared memory cannot serve it, with a one-line warning when something failed.
    fn setup_node(&self, cfg: &ShmConfig) -> Option<Node> {
        self.st.ensure_shadow();
        progress::wait_until(|| self.st.shadow_ready());
        let nb = self
            .st
            .nb_eligible
            .load(std::sync::atomic::Ordering::Relaxed);
        match Node::setup(
            self.st.shadow(),
            self.size(),
            cfg.channels,
            cfg.depth,
            cfg.slot as usize,
            nb,
            cfg.single_copy.is_some(),
        ) {
            Ok(Some(n)) => Some(n),
            Ok(None) => {
                tracing::info!(target: "shim::shm", "no shared memory on any rank: point-to-point");
                None
            }
            Err(e) => {
                static WARNED: std::sync::atomic::AtomicBool =
                    std::sync::atomic::AtomicBool::new(false);
                if self.rank() == 0 && !WARNED.swap(true, std::sync::atomic::Ordering::Relaxed) {
                    tracing::warn!(target: "shim::shm", "no shared memory for collectives ({e}): point-to-point");
                }
                None
            }
        }
    }

    /// Sets up the communicator's verbs wire under `SHIM_TRANSPORT=verbs`, at its first
    /// blocking collective that runs a schedule: every rank reaches it at the same call
    /// (the path is chosen alike everywhere), and the set-up is a collective over the
    /// shadow. The runs started after it (on every rank alike) send through it.
    fn ensure_wire(&self) {
        let verbs = matches!(TRANSPORT.get(), Some((Transport::Verbs, _)));
        if !verbs || self.st.inter {
            return;
        }
        let mut g = self.st.wire.lock().unwrap_or_else(|e| e.into_inner());
        if !matches!(*g, WireState::Unset) {
            return;
        }
        let Some(cfg) = VERBS.get() else {
            *g = WireState::Off;
            return;
        };
        self.st.ensure_shadow();
        progress::wait_until(|| self.st.shadow_ready());
        *g = match crate::core::transport::verbs::connect(
            self.st.shadow(),
            &cfg.lib,
            cfg.qps as usize,
            cfg.eager as usize,
        ) {
            Ok(w) => {
                tracing::debug!(target: "shim::verbs", "{w:?} set up");
                WireState::Ready(w)
            }
            Err(e) => {
                static WARNED: std::sync::atomic::AtomicBool =
                    std::sync::atomic::AtomicBool::new(false);
                if self.rank() == 0 && !WARNED.swap(true, std::sync::atomic::Ordering::Relaxed) {
                    tracing::warn!(target: "shim::verbs", "no verbs transport ({e}): point-to-point through the library");
                }
                WireState::Off
            }
        };
    }

    /// Hands the call to the system MPI (used where the shim has no schedule).
    pub fn forward(&self, why: &'static str) -> Done {
        crate::platform::counters::note_path(self.call.fid, "forwarded", why);
        Done::Forwarded((self.native)())
    }

    /// How the call was made, for selection.
    pub fn form(&self) -> select::Form {
        match self.call.variant {
            Variant::Blocking => select::Form::Blocking,
            Variant::Nonblocking(_) => select::Form::Nonblocking,
            Variant::Persistent(..) => select::Form::Persistent,
        }
    }

    /// The algorithm for this call (see `select`): `bytes` must be a size every rank of
    /// the communicator agrees on.
    pub fn choose(&self, coll: Coll, bytes: i64, commutative: bool) -> select::Choice {
        self.choose_with(coll, bytes, commutative, true)
    }

    /// [`Self::choose`] for a call the system MPI may be known to get wrong (`native_ok`
    /// false; see `select::choose`).
    pub fn choose_with(
        &self,
        coll: Coll,
        bytes: i64,
        commutative: bool,
        native_ok: bool,
    ) -> select::Choice {
        let native_ok =
            native_ok && !self.no_native.get() && native_exists(self.call.fid, self.name());
        let holey_user = self
            .red
            .get()
            .is_some_and(|(ti, _)| !ti.dense() && !self.red_builtin.get());
        let shm_forced = TRANSPORT.get().is_some_and(|t| t.0 == Transport::Shm);
        if holey_user
            && native_ok
            && !shm_forced
            && select::holey_user_reduction_native(coll, self.form(), self.size(), bytes)
        {
            return select::Choice::new(select::Algo::Native);
        }
        if self.shm_decide(coll, bytes, commutative) {
            return select::Choice::new(select::Algo::Shm);
        }
        if select::shm_allowed(coll) == Some(true) {
            self.shm_fallback.set(true);
        }
        let ch = select::choose(
            coll,
            self.form(),
            self.size(),
            self.st.nodes(),
            bytes,
            commutative,
            native_ok,
        );
        if ch.fallback {
            self.fallback.set(true);
        }
        ch
    }

    /// Runs the system MPI's own implementation (the `native` algorithm).
    pub fn native(&self) -> Done {
        if !self.no_memo.get() {
            memo::note_native();
        }
        crate::platform::counters::note_path(self.call.fid, "native", "system MPI");
        Done::Native((self.native)())
    }
}

/// Whether a two-level algorithm (`algo::hier`) serves `coll` across nodes (`in_order`:
/// the operation commutes, or a reduction in node order is in rank order).
fn hier_serves(coll: Coll, in_order: bool) -> bool {
    match coll {
        Coll::Barrier | Coll::Bcast | Coll::Gather | Coll::Scatter => true,
        Coll::Reduce | Coll::Allreduce | Coll::ReduceScatterBlock => in_order,
        _ => false,
    }
}

/// Whether the system MPI has the function the application called: a large-count (`_c`)
/// call the library lacks (Open MPI 4.1 and 5.0 have none) must never be handed to it,
/// since the `PMPI_*_c` forwarders of the count-array forms have no classic equivalent to
/// fall back on; the shim's schedules carry it out instead.
fn native_exists(fid: Fid, name: &str) -> bool {
    !name.ends_with("_c") || crate::platform::symbols::provides(fid as usize, name)
}

/// A cache key, or `None` when the call's datatypes or operation are not all predefined
/// (see `sched::cache`).
pub fn key(
    coll: Coll,
    choice: &select::Choice,
    root: c_int,
    flags: u8,
    op: MPI_Op,
    types: Vec<MPI_Datatype>,
    counts: Vec<i64>,
) -> Option<Key> {
    if !types.iter().all(|&t| is_predefined_datatype(t))
        || (op != MPI_OP_NULL() && !is_builtin_op(op))
    {
        return None;
    }
    Some(Key {
        coll: coll as u8,
        algo: choice.pack(),
        root,
        flags,
        op,
        types,
        counts,
    })
}

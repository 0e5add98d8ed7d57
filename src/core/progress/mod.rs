//! Layer: core. May use: platform.
//!
//! Progress of outstanding schedules (`SHIM_PROGRESS`).
//!
//! `none`: schedules advance inside MPI calls: every intercepted call first advances all
//! outstanding schedules (one atomic load when there are none), and every call that waits
//! (a blocking collective, `MPI_Wait*`, the blocking point-to-point calls in `blocking`)
//! polls all of them while it waits. That is MPI's progress rule (MPI-4.0 §3.7.4: a
//! non-blocking operation must complete while its peers are blocked in other MPI calls),
//! which the system MPI's own progress engine cannot provide for the shim's schedules.
//!
//! `thread`: in addition, the progress thread (`thread`) advances them while the
//! application computes.
//!
//! `library`: in addition, the MPI library's progress engine does (`library`).
//!
//! Each run sits behind its own mutex and is advanced by whichever thread gets it
//! (`try_lock`): never by two threads at once, and a thread never waits for another's
//! advance.

pub mod library;
pub mod thread;

use core::ffi::c_int;
use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use crate::core::dtype::p2p::PackedReq;
use crate::core::sched::run::Run;
use crate::platform::abi::MPI_SUCCESS;

/// A run shared between its request and the progress machinery.
pub struct RunCell {
    run: Mutex<Run>,
    done: AtomicBool,
    error: AtomicI32,
    /// The progress thread takes this run on (`Schedule::needs_progress`).
    for_thread: bool,
    /// Its schedule has messages (`Schedule::messages`).
    messages: bool,
    /// The communicator it runs on (the program's handle, as the library knows it; a
    /// handle is a pointer in some ABIs).
    comm: usize,
}

impl RunCell {
    pub fn new(run: Run) -> Arc<RunCell> {
        // (a run waiting for its segment's set-up advances it through the library)
        let for_thread = run.schedule().for_progress_thread() || run.is_deferred();
        let messages = run.schedule().messages || run.is_deferred();
        let comm = run.comm_handle() as usize;
        Arc::new(RunCell {
            comm,
            run: Mutex::new(run),
            done: AtomicBool::new(false),
            error: AtomicI32::new(MPI_SUCCESS),
            for_thread,
            messages,
        })
    }

    /// Whether the run sends or receives through the library (or the wire).
    pub fn has_messages(&self) -> bool {
        self.messages
    }

    pub fn is_done(&self) -> bool {
        self.done.load(Ordering::Acquire)
    }

    /// The run's error code (valid once done).
    pub fn error(&self) -> c_int {
        self.error.load(Ordering::Acquire)
    }

    /// Advances the run unless another thread is doing so; returns whether it is done.
    pub fn poke(&self) -> bool {
        self.poke_counting().0
    }

    /// Like `poke`; also tells whether any action completed.
    pub fn poke_counting(&self) -> (bool, bool) {
        if self.is_done() {
            return (true, false);
        }
        let mut progressed = false;
        if let Ok(mut r) = self.run.try_lock() {
            let before = r.completed();
            if r.advance() {
                self.error.store(r.error, Ordering::Release);
                self.done.store(true, Ordering::Release);
            }
            progressed = r.completed() != before;
        }
        (self.is_done(), progressed)
    }

    /// Name of the schedule's algorithm.
    pub fn algorithm(&self) -> &'static str {
        self.run
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .schedule()
            .algorithm
    }
}

static ACTIVE: Mutex<Vec<Arc<RunCell>>> = Mutex::new(Vec::new());
static N_ACTIVE: AtomicUsize = AtomicUsize::new(0);
/// Outstanding runs the progress thread takes on.
static N_FOR_THREAD: AtomicUsize = AtomicUsize::new(0);
/// Application threads currently waiting (and advancing schedules) in an MPI call.
static WAITERS: AtomicUsize = AtomicUsize::new(0);

pub fn waiters() -> usize {
    WAITERS.load(Ordering::Relaxed)
}

thread_local! {
    static SNAPSHOT: RefCell<Vec<Arc<RunCell>>> = const { RefCell::new(Vec::new()) };
}

/// Whether any run is outstanding.
#[inline]
pub fn any_active() -> bool {
    N_ACTIVE.load(Ordering::Relaxed) > 0 || pretending()
}

#[cfg(not(test))]
#[inline(always)]
fn pretending() -> bool {
    false
}

#[cfg(test)]
thread_local! {
    static PRETEND: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

#[cfg(test)]
fn pretending() -> bool {
    PRETEND.with(|p| p.get() > 0)
}

/// Unit tests: while the guard lives, [`any_active`] holds on this thread as if a run were
/// outstanding (none is: progress polls nothing), so the calls that wait take their
/// polling path.
#[cfg(test)]
pub(crate) fn pretend_active() -> PretendActive {
    PRETEND.with(|p| p.set(p.get() + 1));
    PretendActive
}

/// See [`pretend_active`].
#[cfg(test)]
pub(crate) struct PretendActive;

#[cfg(test)]
impl Drop for PretendActive {
    fn drop(&mut self) {
        PRETEND.with(|p| p.set(p.get() - 1));
    }
}

/// Whether any outstanding run needs the progress thread (the others complete inside the
/// application's MPI calls: waking a thread for them only takes processor time from the
/// application; in a virtual machine each timed wake-up costs 15-25 µs of CPU).
#[inline]
pub fn thread_work() -> bool {
    N_FOR_THREAD.load(Ordering::Relaxed) > 0
}

/// Whether any outstanding run is not the progress thread's, and so advances only in the
/// application's MPI calls.
#[inline]
pub fn app_work() -> bool {
    N_ACTIVE.load(Ordering::Relaxed) > N_FOR_THREAD.load(Ordering::Relaxed)
}

fn recount(a: &[Arc<RunCell>]) {
    N_ACTIVE.store(a.len(), Ordering::Relaxed);
    crate::platform::memo::pending(crate::platform::memo::SCHEDULES, !a.is_empty());
    N_FOR_THREAD.store(a.iter().filter(|c| c.for_thread).count(), Ordering::Relaxed);
}

/// Starts a run that completes later (non-blocking and persistent collectives).
pub fn submit(cell: &Arc<RunCell>) {
    if cell.poke() {
        return;
    }
    {
        let mut a = ACTIVE.lock().unwrap_or_else(|e| e.into_inner());
        a.push(Arc::clone(cell));
        recount(&a);
    }
    library::arm();
    if cell.for_thread {
        thread::notify();
    }
}

/// Packed requests the application freed while active (MPI-4.0 §3.7.3 allows it): they
/// still have to complete, a receive still has to be unpacked. Polled with the schedules
/// and drained at finalize.
static DETACHED: Mutex<Vec<Arc<PackedReq>>> = Mutex::new(Vec::new());
static N_DETACHED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

pub fn detach(p: Arc<PackedReq>) {
    let mut d = DETACHED.lock().unwrap_or_else(|e| e.into_inner());
    d.push(p);
    N_DETACHED.store(d.len(), std::sync::atomic::Ordering::Relaxed);
    crate::platform::memo::pending(crate::platform::memo::DETACHED, true);
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
    crate::platform::memo::pending(crate::platform::memo::DETACHED, !d.is_empty());
    d.is_empty()
}

/// Completes every freed packed request (called in `MPI_Finalize`).
pub fn drain_detached() {
    wait_until(poll_detached);
}

/// Advances every outstanding run once and forgets the finished ones; also completes
/// the packed point-to-point requests the application freed while active.
#[inline]
pub fn progress_all() {
    poll_detached();
    progress_all_counting();
}

/// Like `progress_all`; tells whether any action of any run completed.
#[inline]
pub fn progress_all_counting() -> bool {
    any_active() && progress_active()
}

/// `progress_all_counting` with runs outstanding.
#[inline(never)]
fn progress_active() -> bool {
    SNAPSHOT.with(|s| {
        let Ok(mut snap) = s.try_borrow_mut() else {
            return false;
        };
        snap.clear();
        snap.extend(
            ACTIVE
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .iter()
                .cloned(),
        );
        let mut finished = false;
        let mut progressed = false;
        for c in snap.iter() {
            let (d, p) = c.poke_counting();
            finished |= d;
            progressed |= p;
        }
        snap.clear();
        if finished {
            let mut a = ACTIVE.lock().unwrap_or_else(|e| e.into_inner());
            a.retain(|c| !c.is_done());
            recount(&a);
        }
        progressed
    })
}

/// Whether a run on `comm` (the program's handle) is outstanding.
pub fn pending_on(comm: crate::platform::abi::MPI_Comm) -> bool {
    any_active()
        && ACTIVE
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .any(|c| c.comm == comm as usize && !c.is_done())
}

/// After a wait or test found `cell` done: takes it off the outstanding runs at once, so
/// that the next call's progress does not have to find it done first.
pub fn forget(cell: &Arc<RunCell>) {
    if N_ACTIVE.load(Ordering::Relaxed) == 0 {
        return;
    }
    let mut a = ACTIVE.lock().unwrap_or_else(|e| e.into_inner());
    let n = a.len();
    a.retain(|c| !Arc::ptr_eq(c, cell));
    if a.len() != n {
        recount(&a);
    }
}

/// Polls until `done()` holds, advancing every outstanding run meanwhile. Yields the
/// processor now and then: ranks often outnumber cores in tests.
pub fn wait_until(mut done: impl FnMut() -> bool) {
    if done() {
        return;
    }
    WAITERS.fetch_add(1, Ordering::Relaxed);
    let mut spins: u32 = 0;
    while !done() {
        progress_all();
        spins = spins.wrapping_add(1);
        if spins % 64 == 0 {
            drive_library();
            std::thread::yield_now();
        }
    }
    WAITERS.fetch_sub(1, Ordering::Relaxed);
}

/// Lets the system MPI's progress engine run once (an `MPI_Iprobe` on the library's world).
/// The waits of schedules without messages (shared memory) call no MPI function otherwise.
pub fn drive_library() {
    crate::core::transport::drive_library();
}

/// What a blocking shared-memory wait does now and then besides driving its
/// communicator's library progress: advances the other outstanding schedules.
pub fn poll_while_waiting() {
    progress_all();
}

/// Runs a blocking collective's schedule to completion; returns its error code.
pub fn run_blocking(run: &mut Run) -> c_int {
    wait_until(|| run.advance());
    run.error
}

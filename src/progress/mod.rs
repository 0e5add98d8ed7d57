//! Progress of outstanding schedules.
//!
//! Without a progress thread (this module's only mode so far), schedules advance inside
//! MPI calls: every intercepted call first advances all outstanding schedules (one
//! atomic load when there are none), and every call that waits (a blocking collective,
//! `MPI_Wait*`, the blocking point-to-point calls in `blocking`) polls all of them while
//! it waits. That is MPI's progress rule (MPI-4.0 §3.7.4: a non-blocking operation must
//! complete while its peers are blocked in other MPI calls), which the system MPI's own
//! progress engine cannot provide for the shim's schedules.
//!
//! Each run sits behind its own mutex and is advanced by whichever thread gets it
//! (`try_lock`): never by two threads at once, and a thread never waits for another's
//! advance.

pub mod blocking;

use core::ffi::c_int;
use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use crate::abi::MPI_SUCCESS;
use crate::sched::run::Run;

/// A run shared between its request and the progress machinery.
pub struct RunCell {
    run: Mutex<Run>,
    done: AtomicBool,
    error: AtomicI32,
}

impl RunCell {
    pub fn new(run: Run) -> Arc<RunCell> {
        Arc::new(RunCell {
            run: Mutex::new(run),
            done: AtomicBool::new(false),
            error: AtomicI32::new(MPI_SUCCESS),
        })
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
        if self.is_done() {
            return true;
        }
        if let Ok(mut r) = self.run.try_lock() {
            if r.advance() {
                self.error.store(r.error, Ordering::Release);
                self.done.store(true, Ordering::Release);
            }
        }
        self.is_done()
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

thread_local! {
    static SNAPSHOT: RefCell<Vec<Arc<RunCell>>> = const { RefCell::new(Vec::new()) };
}

/// Whether any run is outstanding.
#[inline]
pub fn any_active() -> bool {
    N_ACTIVE.load(Ordering::Relaxed) > 0
}

/// Starts a run that completes later (non-blocking and persistent collectives).
pub fn submit(cell: &Arc<RunCell>) {
    if cell.poke() {
        return;
    }
    let mut a = ACTIVE.lock().unwrap_or_else(|e| e.into_inner());
    a.push(Arc::clone(cell));
    N_ACTIVE.store(a.len(), Ordering::Relaxed);
}

/// Advances every outstanding run once and forgets the finished ones.
pub fn progress_all() {
    if !any_active() {
        return;
    }
    SNAPSHOT.with(|s| {
        let Ok(mut snap) = s.try_borrow_mut() else {
            return;
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
        for c in snap.iter() {
            finished |= c.poke();
        }
        snap.clear();
        if finished {
            let mut a = ACTIVE.lock().unwrap_or_else(|e| e.into_inner());
            a.retain(|c| !c.is_done());
            N_ACTIVE.store(a.len(), Ordering::Relaxed);
        }
    });
}

/// Polls until `done()` holds, advancing every outstanding run meanwhile. Yields the
/// processor now and then: ranks often outnumber cores in tests.
pub fn wait_until(mut done: impl FnMut() -> bool) {
    let mut spins: u32 = 0;
    while !done() {
        progress_all();
        spins = spins.wrapping_add(1);
        if spins % 64 == 0 {
            std::thread::yield_now();
        }
    }
}

/// Runs a blocking collective's schedule to completion; returns its error code.
pub fn run_blocking(run: &mut Run) -> c_int {
    wait_until(|| run.advance());
    run.error
}

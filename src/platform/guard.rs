//! Layer: platform. May use: nothing.
//!
//! What every exported entry point does around its hook.
//!
//! Fast path first (design notes, "Decisions already made"): when the shim is inactive
//! (before `MPI_Init*`, after `MPI_Finalize`, or `SHIM_DISABLE=1`) or the calling thread
//! is already inside the shim (a user callback, an MPI library calling back into `MPI_*`),
//! the call goes straight to `PMPI_*`. Otherwise the hook runs with the re-entry flag set,
//! the per-function counters updated, and a panic guard: a panic must never unwind into C
//! (undefined behaviour, and since Rust 1.81 an abort of this rank alone, which leaves the
//! other ranks hanging), so it is caught, logged, and turned into `PMPI_Abort`.

use std::any::Any;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use core::ffi::c_int;

use crate::platform::api::Fid;
use crate::platform::memo::{self, Memo};

static ACTIVE: AtomicBool = AtomicBool::new(false);

/// Function id (+1) whose hook must panic (`SHIM_FAULT_INJECT`), 0 for none.
static FAULT: AtomicU32 = AtomicU32::new(0);

/// Arms `SHIM_FAULT_INJECT=panic:<name>`.
pub fn arm_fault(name: &str) {
    if let Some(i) = crate::platform::api::NAMES.iter().position(|n| *n == name) {
        FAULT.store(i as u32 + 1, Ordering::Relaxed);
        // a remembered call of that function would skip the injection (`lane`)
        memo::invalidate();
    }
}

/// Turns interception on (after a successful `MPI_Init*`) or off (at `MPI_Finalize`).
pub fn set_active(on: bool) {
    ACTIVE.store(on, Ordering::Release);
    // the fast lane does not look at ACTIVE: remembered calls must not outlive it
    memo::invalidate();
}

pub fn is_active() -> bool {
    ACTIVE.load(Ordering::Acquire)
}

/// True when the call must go straight to the system MPI.
#[inline(always)]
pub fn bypass() -> bool {
    !ACTIVE.load(Ordering::Relaxed) || memo::local().in_shim.get()
}

/// Marks the calling thread (the progress thread) as permanently inside the shim: any MPI
/// call it makes through a callback goes straight to the MPI library.
pub fn enter_forever() {
    memo::local().in_shim.set(true);
}

/// Whether the calling thread is inside a hook right now.
pub fn inside() -> bool {
    memo::local().in_shim.get()
}

/// Marks the calling thread as inside the shim; returns the previous mark for [`leave`].
#[inline(always)]
pub fn enter() -> bool {
    let outer = memo::local().in_shim.replace(true);
    if !outer {
        if COUNTING.load(Ordering::Relaxed) {
            count_in();
        }
        crate::platform::watchdog::entered();
    }
    outer
}

/// Restores the mark [`enter`] returned.
#[inline(always)]
pub fn leave(outer: bool) {
    if !outer {
        if COUNTED.get() {
            count_out();
        }
        crate::platform::watchdog::left();
    }
    memo::local().in_shim.set(outer);
}

// `SHIM_PROGRESS=library`: the library's progress engine runs the shim's schedules from a
// poll function while it holds its own locks. A thread inside the shim may hold the shim's
// locks and be about to call the library, which would wait for the library's locks: the
// two would wait for each other (MPICH 5.0.2 with its progress thread, ctests/mt_coll.c).
// So the poll runs the schedules only while no thread is inside the shim, and threads that
// enter meanwhile wait at the door, holding nothing.

/// Whether threads are counted in and out ([`count_threads`]).
static COUNTING: AtomicBool = AtomicBool::new(false);
/// Threads inside the shim, or -1 while the library's progress runs the schedules.
static INSIDE: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);

thread_local! {
    /// This thread's outermost entry was counted (counting may start while it is inside).
    static COUNTED: core::cell::Cell<bool> = const { core::cell::Cell::new(false) };
}

/// Starts counting the threads inside the shim (`SHIM_PROGRESS=library`).
pub fn count_threads() {
    COUNTING.store(true, Ordering::Release);
}

#[inline(never)]
fn count_in() {
    let mut n = INSIDE.load(Ordering::Relaxed);
    let mut waits: u32 = 0;
    loop {
        if n < 0 {
            // the poll's thread may have lost its processor (ranks and the library's
            // progress threads often outnumber the cores): give it back soon
            waits += 1;
            if waits > 64 {
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
            n = INSIDE.load(Ordering::Relaxed);
            continue;
        }
        match INSIDE.compare_exchange_weak(n, n + 1, Ordering::Acquire, Ordering::Relaxed) {
            Ok(_) => break,
            Err(m) => n = m,
        }
    }
    COUNTED.set(true);
}

#[inline(never)]
fn count_out() {
    COUNTED.set(false);
    INSIDE.fetch_sub(1, Ordering::Release);
}

/// Enters the shim alone, if no thread is inside it: returns the mark for
/// [`leave_alone`], or `None` (some thread is inside; it advances the schedules itself).
pub fn enter_alone() -> Option<bool> {
    INSIDE
        .compare_exchange(0, -1, Ordering::Acquire, Ordering::Relaxed)
        .ok()?;
    Some(memo::local().in_shim.replace(true))
}

/// Ends [`enter_alone`].
pub fn leave_alone(outer: bool) {
    memo::local().in_shim.set(outer);
    INSIDE.store(0, Ordering::Release);
}

/// Panics when `SHIM_FAULT_INJECT` armed this function (the test of the panic guard).
#[inline(always)]
pub fn check_fault(fid: Fid) {
    if FAULT.load(Ordering::Relaxed) == fid as u32 + 1 {
        panic!("fault injected by SHIM_FAULT_INJECT");
    }
}

/// The fast lane of a collective hook: a call that `repeats` the last call of its function
/// that went to the system MPI (`platform::memo`), with no other work pending, goes there
/// at once, with the re-entry mark set and counted as `edge::entry::run` would; `None` sends
/// it the ordinary way (`edge::entry::slow`). Nothing here can panic (comparisons, then the
/// C library), so it needs no panic guard; the progress rule holds as the memo's gate
/// covers the pending work, and `SHIM_STATS` (fixed from init on) keeps calls out of the memo.
#[inline(always)]
pub fn lane(
    fid: Fid,
    repeats: impl FnOnce(&Memo) -> bool,
    native: &impl Fn() -> c_int,
) -> Option<c_int> {
    let l = memo::local();
    if l.in_shim.get() || !repeats(&l.memo) {
        return None;
    }
    let outer = enter();
    crate::platform::watchdog::call(fid as u32);
    crate::platform::counters::count(fid);
    let rc = native();
    leave(outer);
    Some(rc)
}

/// Installs a panic hook for panics inside the shim: one line with the rank and location,
/// at once (a job-wide abort follows, and a slow backtrace on many ranks would be cut off
/// by it); the backtrace only when `verbose` (SHIM_LOG at debug or trace). Panics in the
/// rest of the process (a Rust application) go to the hook that was there before.
pub fn install_panic_hook(verbose: bool) {
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if !memo::local().in_shim.get() {
            return previous(info);
        }
        let loc = info
            .location()
            .map(|l| format!(" at {}:{}", l.file(), l.line()))
            .unwrap_or_default();
        crate::platform::log::raw_stderr(&format!(
            "{} panic{loc}: {}\n",
            crate::platform::log::prefix(),
            payload_text(info.payload())
        ));
        if verbose {
            crate::platform::log::raw_stderr(&format!(
                "{}\n",
                std::backtrace::Backtrace::force_capture()
            ));
        }
    }));
}

fn payload_text(payload: &(dyn Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic payload".to_string())
}

/// Panic guard for the shim's own C API and for callbacks the MPI library calls.
pub fn guard<R>(what: &str, f: impl FnOnce() -> R) -> R {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(v) => v,
        Err(payload) => panic_abort(what, payload),
    }
}

#[cold]
#[inline(never)]
pub fn panic_abort(what: &str, payload: Box<dyn Any + Send>) -> ! {
    let msg = payload_text(payload.as_ref());
    if crate::platform::log::to_file() {
        tracing::error!("internal error (panic) in {what}: {msg}; aborting the job");
    }
    crate::platform::log::raw_stderr(&format!(
        "{} internal error (panic) in {what}: {msg}; aborting the job with PMPI_Abort\n",
        crate::platform::log::prefix()
    ));
    crate::platform::proc::abort_job(70);
}

#[cfg(test)]
mod alone_tests {
    use super::*;

    /// The library's poll runs the schedules only while no thread is inside the shim, and a
    /// thread that enters while it does waits at the door.
    #[test]
    fn the_library_poll_runs_only_while_no_thread_is_inside() {
        count_threads();
        let outer = enter();
        assert!(enter_alone().is_none(), "this thread is inside");
        let (tx, rx) = std::sync::mpsc::channel();
        let t = std::thread::spawn(move || {
            // other tests' threads may be inside for a moment
            let t0 = std::time::Instant::now();
            let mark = loop {
                if let Some(m) = enter_alone() {
                    break m;
                }
                assert!(
                    t0.elapsed().as_secs() < 20,
                    "some thread stays inside the shim"
                );
                std::thread::yield_now();
            };
            tx.send(()).unwrap();
            std::thread::sleep(std::time::Duration::from_millis(50));
            leave_alone(mark);
        });
        leave(outer);
        rx.recv().unwrap();
        let t0 = std::time::Instant::now();
        let again = enter();
        assert!(
            t0.elapsed() >= std::time::Duration::from_millis(20),
            "entered while the poll ran"
        );
        leave(again);
        t.join().unwrap();
    }
}

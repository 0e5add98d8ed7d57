//! What every exported entry point does around its hook.
//!
//! Fast path first (design notes, "Decisions already made"): when the shim is inactive
//! (before `MPI_Init*`, after `MPI_Finalize`, or `SHIM_DISABLE=1`) or the calling thread
//! is already inside the shim (a user callback, an MPI library calling back into `MPI_*`),
//! the call goes straight to `PMPI_*`. Otherwise the hook runs with the re-entry flag set,
//! the per-function counters updated, and a panic guard: a panic must never unwind into C
//! (undefined behaviour, and since Rust 1.81 an abort of this rank alone, which leaves the
//! other ranks hanging), so it is caught, logged, and turned into `PMPI_Abort`.
//!
//! The collective hooks come here themselves (`slow`), after their fast lane (`lane`): a
//! call repeating the last one of its function that went to the system MPI
//! (`coll::memo`) goes there with only the re-entry flag and the counter.

use std::any::Any;
use std::cell::Cell;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use core::ffi::c_int;

use crate::api::Fid;
use crate::coll::memo::Memo;

/// The calling thread's state on the entry path, in one thread-local: in a shared library
/// each thread-local a function touches costs it a `__tls_get_addr` call (general-dynamic
/// model), so the re-entry flag and the memo share one, which [`lane`] reads once.
struct Local {
    /// Inside the shim: a hook is running, or this is the progress thread.
    in_shim: Cell<bool>,
    memo: Memo,
}

thread_local! {
    static LOCAL: Local = const {
        Local {
            in_shim: Cell::new(false),
            memo: Memo::new(),
        }
    };
}

static ACTIVE: AtomicBool = AtomicBool::new(false);

/// Function id (+1) whose hook must panic (`SHIM_FAULT_INJECT`), 0 for none.
static FAULT: AtomicU32 = AtomicU32::new(0);

/// Arms `SHIM_FAULT_INJECT=panic:<name>`.
pub fn arm_fault(name: &str) {
    if let Some(i) = crate::api::NAMES.iter().position(|n| *n == name) {
        FAULT.store(i as u32 + 1, Ordering::Relaxed);
        // a remembered call of that function would skip the injection (`lane`)
        crate::coll::memo::invalidate();
    }
}

/// Turns interception on (after a successful `MPI_Init*`) or off (at `MPI_Finalize`).
pub fn set_active(on: bool) {
    ACTIVE.store(on, Ordering::Release);
    // the fast lane does not look at ACTIVE: remembered calls must not outlive it
    crate::coll::memo::invalidate();
}

pub fn is_active() -> bool {
    ACTIVE.load(Ordering::Acquire)
}

/// True when the call must go straight to the system MPI.
#[inline(always)]
pub fn bypass() -> bool {
    !ACTIVE.load(Ordering::Relaxed) || LOCAL.with(|l| l.in_shim.get())
}

/// Marks the calling thread (the progress thread) as permanently inside the shim: any MPI
/// call it makes through a callback goes straight to the MPI library.
pub fn enter_forever() {
    LOCAL.with(|l| l.in_shim.set(true));
}

/// Whether the calling thread is inside a hook right now.
pub fn inside() -> bool {
    LOCAL.with(|l| l.in_shim.get())
}

/// The calling thread's memo.
#[inline(always)]
pub fn with_memo<R>(f: impl FnOnce(&Memo) -> R) -> R {
    LOCAL.with(|l| f(&l.memo))
}

/// The fast lane of a collective hook: a call that `repeats` the last call of its function
/// that went to the system MPI (`coll::memo`), with no other work pending, goes there at once,
/// with the re-entry flag set and counted as [`run`] would; `None` sends it the ordinary way
/// ([`slow`]). Nothing here can panic (comparisons, then the C library), so it needs no
/// panic guard; the progress rule holds as the memo's stamp covers the pending work, and
/// `SHIM_STATS` (fixed from init on) keeps calls out of the memo.
#[inline(always)]
pub fn lane(
    fid: Fid,
    repeats: impl FnOnce(&Memo) -> bool,
    native: &impl Fn() -> c_int,
) -> Option<c_int> {
    // the address only, so that `with` stays small enough to be inlined (a call to it
    // costs more than the lane's checks)
    let l = LOCAL.with(|l| l as *const Local);
    // SAFETY: the thread-local has no destructor, so it lives as long as this thread, and
    // the reference does not outlive this call.
    let l = unsafe { &*l };
    if l.in_shim.get() || !repeats(&l.memo) {
        return None;
    }
    l.in_shim.set(true);
    crate::stats::count(fid);
    let rc = native();
    l.in_shim.set(false);
    Some(rc)
}

/// The ordinary path of a collective hook, whose [`lane`] did not take the call: straight
/// to the system MPI when bypassed, else the hook (given `native`) under [`run`]. Out of
/// line, so that the lanes inlined into the entry points stay small.
#[inline(never)]
pub fn slow(
    fid: Fid,
    native: &dyn Fn() -> c_int,
    hook: impl FnOnce(&dyn Fn() -> c_int) -> c_int,
) -> c_int {
    if bypass() {
        return native();
    }
    run(fid, || hook(native))
}

/// Runs a hook for function `fid` with the re-entry flag, counters and panic guard.
#[inline]
pub fn run<R>(fid: Fid, hook: impl FnOnce() -> R) -> R {
    let outer = LOCAL.with(|l| l.in_shim.replace(true));
    crate::stats::count(fid);
    let t0 = crate::stats::start();
    let r = catch_unwind(AssertUnwindSafe(|| {
        if FAULT.load(Ordering::Relaxed) == fid as u32 + 1 {
            panic!("fault injected by SHIM_FAULT_INJECT");
        }
        // Every intercepted call advances the outstanding schedules (progress rule) and
        // the freed packed requests; with the progress thread, the schedules only when some
        // of them are not the thread's (`SHIM_PROGRESS_MIN_BYTES`: left to the
        // application's calls, which must then advance them as without the thread).
        if crate::progress::thread::running() && !crate::progress::app_work() {
            crate::request::poll_detached();
        } else {
            crate::progress::progress_all();
        }
        hook()
    }));
    LOCAL.with(|l| l.in_shim.set(outer));
    match r {
        Ok(v) => {
            crate::stats::stop(fid, t0);
            v
        }
        Err(payload) => panic_abort(crate::api::NAMES[fid as usize], payload),
    }
}

/// Like [`run`] for `MPI_Init*`/`MPI_Finalize`, whose hooks run while the shim is not (or
/// no longer) active: the call is counted only if the shim is active before or after it,
/// so `SHIM_DISABLE=1` leaves every counter at zero.
pub fn run_init<R>(fid: Fid, hook: impl FnOnce() -> R) -> R {
    let was_active = is_active();
    let outer = LOCAL.with(|l| l.in_shim.replace(true));
    let r = catch_unwind(AssertUnwindSafe(hook));
    LOCAL.with(|l| l.in_shim.set(outer));
    match r {
        Ok(v) => {
            if was_active || is_active() {
                crate::stats::count(fid);
            }
            v
        }
        Err(payload) => panic_abort(crate::api::NAMES[fid as usize], payload),
    }
}

/// Installs a panic hook for panics inside the shim: one line with the rank and location,
/// at once (a job-wide abort follows, and a slow backtrace on many ranks would be cut off
/// by it); the backtrace only when `verbose` (SHIM_LOG at debug or trace). Panics in the
/// rest of the process (a Rust application) go to the hook that was there before.
pub fn install_panic_hook(verbose: bool) {
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if !inside() {
            return previous(info);
        }
        let loc = info
            .location()
            .map(|l| format!(" at {}:{}", l.file(), l.line()))
            .unwrap_or_default();
        crate::log::raw_stderr(&format!(
            "{} panic{loc}: {}\n",
            crate::log::prefix(),
            payload_text(info.payload())
        ));
        if verbose {
            crate::log::raw_stderr(&format!("{}\n", std::backtrace::Backtrace::force_capture()));
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
fn panic_abort(what: &str, payload: Box<dyn Any + Send>) -> ! {
    let msg = payload_text(payload.as_ref());
    if crate::log::to_file() {
        tracing::error!("internal error (panic) in {what}: {msg}; aborting the job");
    }
    crate::log::raw_stderr(&format!(
        "{} internal error (panic) in {what}: {msg}; aborting the job with PMPI_Abort\n",
        crate::log::prefix()
    ));
    crate::init::abort_job(70);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lane_sets_the_reentry_flag_and_counts() {
        let fid = Fid::MPI_Neighbor_alltoallw_init_c;
        let before = crate::stats::calls(fid as usize);
        let native = || {
            assert!(inside(), "the system MPI's callbacks must bypass the shim");
            // a call from inside (a callback) never takes the lane
            assert_eq!(lane(fid, |_| true, &|| 1), None);
            7
        };
        assert_eq!(lane(fid, |_| true, &native), Some(7));
        assert!(!inside());
        assert_eq!(crate::stats::calls(fid as usize), before + 1);
        assert_eq!(
            lane(fid, |_| false, &|| -> c_int { panic!("not a repeat") }),
            None
        );
        assert_eq!(crate::stats::calls(fid as usize), before + 1);
    }
}

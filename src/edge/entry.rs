//! Layer: edge. May use: hooks, services, core, platform.
//!
//! What every exported entry point does around its hook: the re-entry mark, the
//! per-function counters, the progress rule (every intercepted call advances the
//! outstanding schedules) and the panic guard (`platform::guard`: a panic must never unwind
//! into C). The fast path (`guard::bypass`) is taken by the generated code before this.

use std::panic::{AssertUnwindSafe, catch_unwind};

use core::ffi::c_int;

use crate::platform::api::Fid;
use crate::platform::guard;

/// The ordinary path of a collective hook, whose fast lane (`guard::lane`) did not take the
/// call: straight to the system MPI when bypassed, else the hook (given `native`) under
/// [`run`]. Out of line, so that the lanes inlined into the entry points stay small.
#[inline(never)]
pub fn slow(
    fid: Fid,
    native: &dyn Fn() -> c_int,
    hook: impl FnOnce(&dyn Fn() -> c_int) -> c_int,
) -> c_int {
    if guard::bypass() {
        return native();
    }
    run(fid, || hook(native))
}

/// Runs a hook for function `fid` with the re-entry flag, counters and panic guard.
#[inline]
pub fn run<R>(fid: Fid, hook: impl FnOnce() -> R) -> R {
    let outer = guard::enter();
    crate::platform::watchdog::call(fid as u32);
    crate::platform::counters::count(fid);
    let t0 = crate::platform::counters::start();
    // point-to-point, RMA and file calls (request calls: `hooks::request`, by the request)
    // may leave messages in the library that a later shared-memory collective must let move
    if crate::platform::api::LIBRARY_TRAFFIC[fid as usize] {
        crate::core::transport::note_library_call();
    }
    let r = catch_unwind(AssertUnwindSafe(|| {
        guard::check_fault(fid);
        // Every intercepted call advances the outstanding schedules (progress rule) and
        // the freed packed requests; with the progress thread, the schedules only when some
        // of them are not the thread's (`SHIM_PROGRESS_MIN_BYTES`: left to the
        // application's calls, which must then advance them as without the thread).
        if crate::core::progress::thread::running() && !crate::core::progress::app_work() {
            crate::core::progress::poll_detached();
        } else {
            crate::core::progress::progress_all();
        }
        hook()
    }));
    guard::leave(outer);
    match r {
        Ok(v) => {
            crate::platform::counters::stop(fid, t0);
            v
        }
        Err(payload) => guard::panic_abort(crate::platform::api::NAMES[fid as usize], payload),
    }
}

/// Like [`run`] for `MPI_Init*`/`MPI_Finalize`, whose hooks run while the shim is not (or
/// no longer) active: the call is counted only if the shim is active before or after it,
/// so `SHIM_DISABLE=1` leaves every counter at zero.
pub fn run_init<R>(fid: Fid, hook: impl FnOnce() -> R) -> R {
    let was_active = guard::is_active();
    let outer = guard::enter();
    let r = catch_unwind(AssertUnwindSafe(hook));
    guard::leave(outer);
    match r {
        Ok(v) => {
            if was_active || guard::is_active() {
                crate::platform::counters::count(fid);
            }
            v
        }
        Err(payload) => guard::panic_abort(crate::platform::api::NAMES[fid as usize], payload),
    }
}

/// Adds `count` elements of `datatype` to the byte count of the call in progress.
pub fn note_typed_bytes(count: i64, datatype: crate::platform::abi::MPI_Datatype) {
    if count > 0 {
        if let Some(size) = crate::core::dtype::size_of(datatype) {
            crate::platform::counters::note_bytes(count as u64 * size as u64);
        }
    }
}

//! Layer: core. May use: platform.
//!
//! `SHIM_PROGRESS=library`: the MPI library's own progress engine advances the shim's
//! outstanding schedules. MPICH 4.3 and later take a poll function into their progress
//! (`MPIX_Async_start`); registered while any schedule is outstanding, it runs wherever the
//! library makes progress: in its own progress thread (`MPIR_CVAR_ASYNC_PROGRESS=1`) while
//! the application computes, and in the library's waits outside the shim's calls. The
//! shim's own calls already advance the schedules where they wait, so a poll on a thread
//! that is inside one of them does nothing: that thread may hold the shim's locks, and the
//! call will advance the schedules itself.
//!
//! Inside the poll no MPI call may run the library's progress engine again
//! (`platform::mpi::p2p::LibraryProgress`): the schedules post their messages and harvest
//! the ones that are complete, and the shared-memory waits do not drive the library.

use core::ffi::{c_int, c_void};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::platform::mpi::p2p::{self, LibraryProgress, MPIX_ASYNC_DONE, MPIX_ASYNC_NOPROGRESS};

/// `SHIM_PROGRESS=library` is on (between init and finalize).
static ENABLED: AtomicBool = AtomicBool::new(false);
/// A poll function is registered with the library.
static REGISTERED: AtomicBool = AtomicBool::new(false);
/// Polls that advanced the schedules (`SHIM_STATS`).
pub static POLLS: AtomicU64 = AtomicU64::new(0);

/// Turns the mode on; false when the library has no `MPIX_Async_start`.
pub fn enable() -> bool {
    let ok = p2p::library_progress_available();
    if ok {
        crate::platform::guard::count_threads();
    }
    ENABLED.store(ok, Ordering::Release);
    ok
}

pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// Turns the mode off before `MPI_Finalize`, whose library waits until every poll function
/// has returned done.
pub fn disable() {
    ENABLED.store(false, Ordering::Release);
}

/// A schedule became outstanding: registers the poll function unless it is.
pub fn arm() {
    if enabled() && !REGISTERED.swap(true, Ordering::AcqRel) && p2p::async_start(poll).is_err() {
        REGISTERED.store(false, Ordering::Release);
    }
}

/// The poll function (`MPIX_Async_poll_function`). A panic must not unwind into the
/// library.
unsafe extern "C" fn poll(_thing: *mut c_void) -> c_int {
    match catch_unwind(AssertUnwindSafe(poll_once)) {
        Ok(v) => v,
        Err(payload) => {
            crate::platform::guard::panic_abort("the MPIX_Async poll function", payload)
        }
    }
}

fn poll_once() -> c_int {
    if !enabled() {
        REGISTERED.store(false, Ordering::Release);
        return MPIX_ASYNC_DONE;
    }
    if !super::any_active() {
        REGISTERED.store(false, Ordering::Release);
        // a schedule submitted meanwhile found the flag still set and registered nothing
        if super::any_active() && !REGISTERED.swap(true, Ordering::AcqRel) {
            return MPIX_ASYNC_NOPROGRESS;
        }
        return MPIX_ASYNC_DONE;
    }
    // only while no thread is inside the shim (see `platform::guard::enter_alone`)
    let Some(outer) = crate::platform::guard::enter_alone() else {
        return MPIX_ASYNC_NOPROGRESS;
    };
    let quiet = LibraryProgress::enter();
    POLLS.fetch_add(1, Ordering::Relaxed);
    super::progress_all_counting();
    drop(quiet);
    crate::platform::guard::leave_alone(outer);
    MPIX_ASYNC_NOPROGRESS
}

//! Layer: platform. May use: nothing.
//!
//! Reporting errors the way the application asked for: through the handler of the object
//! it passed (MPI-4.0 §9.3), with the MPI error classes of the system MPI's ABI.
//!
//! **The world's handler is the application's, but not the system MPI's.** The system MPI
//! raises every error that belongs to no object (a datatype query, a request completion, an
//! invalid communicator) on `MPI_COMM_WORLD`'s handler (MPICH: `MPIR_Err_return_comm` with
//! no communicator). The shim's own calls (`PMPI_Testsome` on its schedules' messages,
//! datatype queries while validating the application's arguments) would then abort a job
//! whose world handler is fatal, from a function the program never called, although the
//! program passed a communicator whose handler returns errors. So at init the real
//! `MPI_COMM_WORLD` gets `MPI_ERRORS_RETURN`, and the handler the application sets on
//! `MPI_COMM_WORLD` is kept on a private communicator (the *keeper*). Under ghost
//! processes the application's `MPI_COMM_WORLD` is the user world: its handler is a
//! trampoline ([`user_world_handler`]) that invokes the application's handler on
//! `MPI_COMM_WORLD`, so that a handler function is passed the handle the program knows
//! (MPI-4.0 §9.3.1: the handler gets the communicator the call was made on). Every exported entry
//! point whose call failed then raises the error where the system MPI would have raised it
//! on the world ([`checked`]): on the keeper's handler, invoked on `MPI_COMM_WORLD`.
//! Communicators made from `MPI_COMM_WORLD` inherit the application's handler ([`inherit`]).
//!
//! **A library that drops the code.** MPI-4.0 §9.3.1: the code a user-defined handler is
//! passed is "the error code to be returned by the MPI routine that raised the error".
//! MPICH 5.0.2 returns `MPI_SUCCESS` instead once a user-defined handler has returned
//! (any communicator, whatever the handler does with the code; MPICH 4.0.2 returns the
//! code). The shim's recorder is such a handler, so there every error the library raised
//! on the real world, the shim's own argument checks included (a datatype's size, whether
//! a communicator is valid), would read as success. Init finds out with one failing call
//! ([`probe_swallowing`]); on such a library the recorder (and the ghosts' trampoline) keep
//! the code and every `PMPI_*` call that returned `MPI_SUCCESS` returns it ([`unswallow`]).

use core::cell::Cell;
use core::ffi::c_int;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};

use crate::platform::abi::*;
use crate::platform::api::pmpi;

/// The world's handler is virtual (set at init, unless the shim is disabled).
static VIRTUAL: AtomicBool = AtomicBool::new(false);
/// The communicator that holds the application's handler for `MPI_COMM_WORLD`.
static KEEPER: AtomicI64 = AtomicI64::new(0);
/// The user world (ghost processes), 0 without.
static USER_WORLD: AtomicI64 = AtomicI64::new(0);
/// The user world's handler (the trampoline), 0 until created.
static TRAMPOLINE: AtomicI64 = AtomicI64::new(0);
/// The application's world handler is `MPI_ERRORS_RETURN` (nothing to raise).
static WORLD_RETURNS: AtomicBool = AtomicBool::new(false);
/// The system MPI returns `MPI_SUCCESS` from a call whose error a user-defined handler
/// took (see the module comment): the shim's handlers keep the code for [`unswallow`].
static SWALLOWS: AtomicBool = AtomicBool::new(false);

/// The handler the real world gets instead of `MPI_ERRORS_RETURN` (0 until created): it
/// records each error the system MPI raises on the world and returns, so that an entry
/// point knows whether the error it returns was raised there ([`after_failure`]). The
/// library raises a request's error on the request's communicator in `MPI_Wait`, but
/// errors of several requests (`MPI_Waitall`) and errors without an object on the world.
static RECORDER: AtomicI64 = AtomicI64::new(0);

thread_local! {
    /// The error class a hook raised itself (through [`raise`]) in the current call, so
    /// that the entry point does not raise it a second time.
    static RAISED: Cell<c_int> = const { Cell::new(MPI_SUCCESS) };
    /// The last error code the system MPI raised on the real world (see [`RECORDER`]).
    static WORLD_RAISED: Cell<c_int> = const { Cell::new(MPI_SUCCESS) };
    /// The code a handler of the shim's was passed during the `PMPI_*` call in progress,
    /// for [`unswallow`] (MPI_SUCCESS: none).
    static SWALLOWED: Cell<c_int> = const { Cell::new(MPI_SUCCESS) };
}

/// The result of every `PMPI_*` call that returns an error code (generated forwarders):
/// on a library that drops the code after a user-defined handler (see the module comment),
/// a call that returned `MPI_SUCCESS` although it passed a code to one of the shim's
/// handlers returns that code, as `MPI_ERRORS_RETURN` would have made it.
#[inline(always)]
pub fn unswallow(rc: c_int) -> c_int {
    if SWALLOWS.load(Ordering::Relaxed) {
        take_swallowed(rc)
    } else {
        rc
    }
}

#[inline(never)]
fn take_swallowed(rc: c_int) -> c_int {
    let code = SWALLOWED.replace(MPI_SUCCESS);
    if rc == MPI_SUCCESS { code } else { rc }
}

/// After `PMPI_*_call_errhandler`, which returns `MPI_SUCCESS` when the handler returns
/// (MPI-4.0 §9.3.1): a code the shim's handler kept must not reach the next call.
#[inline(always)]
pub fn forget_swallowed() {
    if SWALLOWS.load(Ordering::Relaxed) {
        SWALLOWED.set(MPI_SUCCESS);
    }
}

/// The real world's handler: records the code and returns (MPI-4.0 §9.3.1: a user
/// handler that returns lets the call return the code).
unsafe extern "C" fn record(_comm: *mut MPI_Comm, code: *mut c_int) {
    if !code.is_null() {
        // SAFETY: the system MPI passes a pointer to the error code.
        let code = unsafe { *code };
        WORLD_RAISED.set(code);
        SWALLOWED.set(code);
    }
}

/// The user world's handler: an error the system MPI (or the shim) raises on the user
/// world reaches the application's world handler, invoked on `MPI_COMM_WORLD`.
unsafe extern "C" fn user_world_handler(_comm: *mut MPI_Comm, code: *mut c_int) {
    if code.is_null() {
        return;
    }
    // SAFETY: the system MPI passes a pointer to the error code.
    let code = unsafe { *code };
    // the entry point must not raise it a second time (`after_failure`)
    RAISED.set(code);
    raise_on_world(code, "");
    SWALLOWED.set(code);
}

/// Is `c` the application's `MPI_COMM_WORLD` (the real one, or the user world it maps to)?
pub(crate) fn is_world(c: MPI_Comm) -> bool {
    c == MPI_COMM_WORLD() || {
        let uw = USER_WORLD.load(Ordering::Acquire);
        uw != 0 && c as i64 == uw
    }
}

/// What the real world's handler is while the application's lives on the keeper.
fn quiet() -> MPI_Errhandler {
    match RECORDER.load(Ordering::Acquire) {
        0 => MPI_ERRORS_RETURN(),
        h => h as MPI_Errhandler,
    }
}

pub(crate) fn keeper() -> MPI_Comm {
    KEEPER.load(Ordering::Acquire) as MPI_Comm
}

/// Whether the world's handler is virtual (see the module comment).
pub fn virtualized() -> bool {
    VIRTUAL.load(Ordering::Acquire)
}

/// At init, once the user world exists (`user_world` under ghost processes, else `None`):
/// the application's world handler moves to the keeper and the real world returns errors.
pub fn init_world(user_world: Option<MPI_Comm>) {
    let mut k: MPI_Comm = MPI_COMM_NULL();
    let mut h: MPI_Errhandler = MPI_ERRHANDLER_NULL();
    // SAFETY: MPI is initialized; valid out-pointers; MPI_COMM_SELF involves this
    // process only.
    unsafe {
        if pmpi::PMPI_Comm_dup(MPI_COMM_SELF(), &mut k) != MPI_SUCCESS {
            return;
        }
    }
    let mut rec: MPI_Errhandler = MPI_ERRHANDLER_NULL();
    // SAFETY: a handler function of the standard's C signature (the variadic tail is
    // unused); valid out-pointer.
    if unsafe { pmpi::PMPI_Comm_create_errhandler(record as *mut core::ffi::c_void, &mut rec) }
        == MPI_SUCCESS
    {
        RECORDER.store(rec as i64, Ordering::Release);
        SWALLOWS.store(probe_swallowing(k, rec), Ordering::Release);
    }
    // SAFETY: the keeper is ours; valid out-pointer.
    unsafe {
        pmpi::PMPI_Comm_get_errhandler(MPI_COMM_WORLD(), &mut h);
        pmpi::PMPI_Comm_set_errhandler(k, h);
        pmpi::PMPI_Errhandler_free(&mut h);
    }
    KEEPER.store(k as i64, Ordering::Release);
    refresh_world_returns();
    if let Some(uw) = user_world {
        let mut t: MPI_Errhandler = MPI_ERRHANDLER_NULL();
        // SAFETY: as above; the user world is valid.
        unsafe {
            if pmpi::PMPI_Comm_create_errhandler(
                user_world_handler as *mut core::ffi::c_void,
                &mut t,
            ) == MPI_SUCCESS
            {
                TRAMPOLINE.store(t as i64, Ordering::Release);
                pmpi::PMPI_Comm_set_errhandler(uw, t);
            }
        }
        USER_WORLD.store(uw as i64, Ordering::Release);
    }
    // SAFETY: a valid handler on the predefined communicator.
    unsafe { pmpi::PMPI_Comm_set_errhandler(MPI_COMM_WORLD(), quiet()) };
    VIRTUAL.store(true, Ordering::Release);
}

/// Whether the system MPI drops the code after a user-defined handler returns (see the
/// module comment): one call that fails on `probe` (a private communicator, which gets the
/// recorder `rec`), an attribute query with `MPI_KEYVAL_INVALID` (MPI_ERR_KEYVAL, raised
/// on the communicator). A library that raises nothing there is taken to keep the code.
fn probe_swallowing(probe: MPI_Comm, rec: MPI_Errhandler) -> bool {
    let mut val: *mut core::ffi::c_void = core::ptr::null_mut();
    let mut flag: c_int = 0;
    SWALLOWED.set(MPI_SUCCESS);
    // SAFETY: the communicator is ours and valid; valid out-pointers.
    let rc = unsafe {
        pmpi::PMPI_Comm_set_errhandler(probe, rec);
        pmpi::PMPI_Comm_get_attr(
            probe,
            MPI_KEYVAL_INVALID,
            (&mut val as *mut *mut core::ffi::c_void).cast(),
            &mut flag,
        )
    };
    let seen = SWALLOWED.replace(MPI_SUCCESS);
    WORLD_RAISED.set(MPI_SUCCESS);
    let swallows = rc == MPI_SUCCESS && seen != MPI_SUCCESS;
    tracing::debug!(
        target: "shim::errors",
        "the system MPI {} the code a user-defined handler was passed",
        if swallows { "drops (the shim returns it)" } else { "returns" }
    );
    swallows
}

/// At finalize (while MPI works): the world gets the application's handler back and the
/// keeper is released.
pub fn finalize_world() {
    if !VIRTUAL.swap(false, Ordering::AcqRel) {
        return;
    }
    let mut k = keeper();
    let mut h: MPI_Errhandler = MPI_ERRHANDLER_NULL();
    // SAFETY: the keeper is a valid communicator until freed here.
    unsafe {
        if pmpi::PMPI_Comm_get_errhandler(k, &mut h) == MPI_SUCCESS {
            pmpi::PMPI_Comm_set_errhandler(MPI_COMM_WORLD(), h);
            pmpi::PMPI_Errhandler_free(&mut h);
        }
        let uw = USER_WORLD.swap(0, Ordering::AcqRel);
        if uw != 0 && pmpi::PMPI_Comm_get_errhandler(k, &mut h) == MPI_SUCCESS {
            pmpi::PMPI_Comm_set_errhandler(uw as MPI_Comm, h);
            pmpi::PMPI_Errhandler_free(&mut h);
        }
        pmpi::PMPI_Comm_free(&mut k);
        for slot in [&RECORDER, &TRAMPOLINE] {
            let mut eh = slot.swap(0, Ordering::AcqRel) as MPI_Errhandler;
            if eh as i64 != 0 {
                // communicators that still use it keep a reference (MPI-4.0 §9.3.4)
                pmpi::PMPI_Errhandler_free(&mut eh);
            }
        }
    }
}

pub(crate) fn refresh_world_returns() {
    let mut h: MPI_Errhandler = MPI_ERRHANDLER_NULL();
    // SAFETY: the keeper is valid while virtualized; valid out-pointer.
    let returns = unsafe {
        pmpi::PMPI_Comm_get_errhandler(keeper(), &mut h) == MPI_SUCCESS && {
            let r = h == MPI_ERRORS_RETURN();
            pmpi::PMPI_Errhandler_free(&mut h);
            r
        }
    };
    WORLD_RETURNS.store(returns, Ordering::Release);
}

/// The communicator whose handler serves `comm`: the keeper for `MPI_COMM_WORLD`.
pub(crate) fn holder(comm: MPI_Comm) -> MPI_Comm {
    if virtualized() && is_world(comm) {
        keeper()
    } else {
        comm
    }
}

/// Invokes the application's world handler with `code` on `MPI_COMM_WORLD` (a handler
/// function gets the world's handle, as without the shim). Returns `code`.
pub(crate) fn raise_on_world(code: c_int, why: &str) -> c_int {
    if !virtualized() {
        // SAFETY: the predefined communicator.
        unsafe { pmpi::PMPI_Comm_call_errhandler(MPI_COMM_WORLD(), code) };
        return code;
    }
    if WORLD_RETURNS.load(Ordering::Acquire) {
        return code;
    }
    let mut h: MPI_Errhandler = MPI_ERRHANDLER_NULL();
    // SAFETY: the keeper is valid; the world's handler is restored to MPI_ERRORS_RETURN
    // after the call (a fatal handler does not return).
    unsafe {
        if pmpi::PMPI_Comm_get_errhandler(keeper(), &mut h) != MPI_SUCCESS {
            return code;
        }
        if !why.is_empty() && (h == MPI_ERRORS_ARE_FATAL() || h == MPI_ERRORS_ABORT()) {
            crate::platform::log::raw_stderr(&format!(
                "{} {why}\n",
                crate::platform::log::prefix()
            ));
        }
        pmpi::PMPI_Comm_set_errhandler(MPI_COMM_WORLD(), h);
        pmpi::PMPI_Comm_call_errhandler(MPI_COMM_WORLD(), code);
        pmpi::PMPI_Comm_set_errhandler(MPI_COMM_WORLD(), quiet());
        pmpi::PMPI_Errhandler_free(&mut h);
    }
    code
}

/// Raises error class `class` on `comm` and returns it (if the handler returns). With a
/// fatal handler, the reason is printed first, since the MPI library only knows the class.
pub fn raise(comm: MPI_Comm, class: c_int, function: &str, why: &str) -> c_int {
    tracing::debug!(target: "shim::errors", "{function}: {why} (error class {class})");
    RAISED.set(class);
    if virtualized() && is_world(comm) {
        return raise_on_world(class, &format!("{function}: {why}"));
    }
    let mut eh: MPI_Errhandler = MPI_ERRHANDLER_NULL();
    // SAFETY: valid out-pointer; an invalid communicator yields an error code.
    let got = unsafe { pmpi::PMPI_Comm_get_errhandler(comm, &mut eh) };
    if got != MPI_SUCCESS {
        // no such communicator: the error belongs to no object (the world's handler)
        return raise_on_world(class, &format!("{function}: {why}"));
    }
    print_if_fatal(got, eh, &format!("{function}: {why}"));
    // SAFETY: the handle the caller passed.
    unsafe { pmpi::PMPI_Comm_call_errhandler(comm, class) };
    class
}

/// Raises an error that belongs to no object (a datatype or operation call, a request):
/// the world's handler, as the system MPI does.
pub fn raise_no_object(class: c_int, function: &str, why: &str) -> c_int {
    tracing::debug!(target: "shim::errors", "{function}: {why} (error class {class})");
    RAISED.set(class);
    raise_on_world(class, &format!("{function}: {why}"))
}

/// Raises `MPI_ERR_TYPE` for a datatype argument the program freed, where the call's
/// errors go (its communicator's or window's handler, else the world's, as MPICH does).
#[cold]
#[inline(never)]
pub fn raise_freed_type(obj: Obj, function: &str) -> c_int {
    const WHY: &str = "a datatype argument was freed";
    match obj {
        Obj::Comm(c) => raise(c, MPI_ERR_TYPE, function, WHY),
        Obj::Win(w) => raise_win(w, MPI_ERR_TYPE, &format!("{function}: {WHY}")),
        Obj::None | Obj::Other => raise_no_object(MPI_ERR_TYPE, function, WHY),
    }
}

/// Raises `MPI_ERR_UNSUPPORTED_OPERATION` for a function the MPI library does not have,
/// where the call's errors go.
#[cold]
#[inline(never)]
pub fn raise_unsupported(obj: Obj, function: &str) -> c_int {
    const WHY: &str = "the MPI library does not provide this function";
    match obj {
        Obj::Comm(c) => raise(c, MPI_ERR_UNSUPPORTED_OPERATION, function, WHY),
        Obj::Win(w) => raise_win(
            w,
            MPI_ERR_UNSUPPORTED_OPERATION,
            &format!("{function}: {WHY}"),
        ),
        Obj::None | Obj::Other => raise_no_object(MPI_ERR_UNSUPPORTED_OPERATION, function, WHY),
    }
}

/// [`raise`] for a window (MPI-4.0 §9.3.2: window errors go to the window's handler).
pub fn raise_win(win: MPI_Win, class: c_int, why: &str) -> c_int {
    tracing::debug!(target: "shim::errors", "{why} (error class {class})");
    RAISED.set(class);
    let mut eh: MPI_Errhandler = MPI_ERRHANDLER_NULL();
    // SAFETY: valid out-pointer; an invalid window yields an error code.
    let got = unsafe { pmpi::PMPI_Win_get_errhandler(win, &mut eh) };
    if got != MPI_SUCCESS {
        return raise_on_world(class, why);
    }
    print_if_fatal(got, eh, why);
    // SAFETY: the handle the caller passed.
    unsafe { pmpi::PMPI_Win_call_errhandler(win, class) };
    class
}

/// With a fatal handler the reason is printed first (the MPI library only knows the
/// class); the handler reference obtained by the caller is released.
fn print_if_fatal(got: c_int, mut eh: MPI_Errhandler, why: &str) {
    if got != MPI_SUCCESS {
        return;
    }
    if eh == MPI_ERRORS_ARE_FATAL() || eh == MPI_ERRORS_ABORT() {
        crate::platform::log::raw_stderr(&format!("{} {why}\n", crate::platform::log::prefix()));
    }
    // SAFETY: the reference returned by *_get_errhandler.
    unsafe { pmpi::PMPI_Errhandler_free(&mut eh) };
}

/// The object an entry point's errors belong to (the first communicator or window it
/// takes; `Other` for files and sessions, whose handlers the system MPI invokes itself).
#[derive(Clone, Copy, Debug)]
pub enum Obj {
    None,
    Comm(MPI_Comm),
    Win(MPI_Win),
    Other,
}

/// What every exported entry point does with its result: a failed call whose error the
/// system MPI raised on the (virtual) world is raised on the application's world handler.
#[inline(always)]
pub fn checked(obj: Obj, rc: c_int) -> c_int {
    if rc == MPI_SUCCESS {
        rc
    } else {
        after_failure(obj, rc)
    }
}

#[cold]
#[inline(never)]
fn after_failure(obj: Obj, rc: c_int) -> c_int {
    let raised = RAISED.replace(MPI_SUCCESS);
    let world_raised = WORLD_RAISED.replace(MPI_SUCCESS);
    if !virtualized() || raised != MPI_SUCCESS {
        return rc;
    }
    let on_world = match obj {
        Obj::Other => false,
        // no object: where the system MPI raised it (a request's error in MPI_Wait goes to
        // the request's communicator), or the world if that is unknown
        Obj::None => world_raised == rc || RECORDER.load(Ordering::Acquire) == 0,
        // a valid communicator other than the world: the system MPI used its handler
        Obj::Comm(c) => is_world(c) || !comm_valid(c),
        Obj::Win(w) => !win_valid(w),
    };
    if on_world {
        raise_on_world(rc, "");
    }
    rc
}

pub(crate) fn comm_valid(c: MPI_Comm) -> bool {
    if c == MPI_COMM_NULL() {
        return false;
    }
    let mut h: MPI_Errhandler = MPI_ERRHANDLER_NULL();
    // SAFETY: valid out-pointer; the real world returns errors, so an invalid handle
    // only yields a code.
    unsafe {
        let ok = pmpi::PMPI_Comm_get_errhandler(c, &mut h) == MPI_SUCCESS;
        if ok {
            pmpi::PMPI_Errhandler_free(&mut h);
        }
        ok
    }
}

fn win_valid(w: MPI_Win) -> bool {
    if w == MPI_WIN_NULL() {
        return false;
    }
    let mut h: MPI_Errhandler = MPI_ERRHANDLER_NULL();
    // SAFETY: as for comm_valid.
    unsafe {
        let ok = pmpi::PMPI_Win_get_errhandler(w, &mut h) == MPI_SUCCESS;
        if ok {
            pmpi::PMPI_Errhandler_free(&mut h);
        }
        ok
    }
}

/// After a communicator constructor: a communicator made from `MPI_COMM_WORLD` that
/// inherited the real world's `MPI_ERRORS_RETURN` gets the application's world handler,
/// as it would have without the shim (MPI-4.0 §7.4.2: `MPI_COMM_DUP` and the constructors
/// that follow it copy the parent's handler).
pub fn inherit(parent: MPI_Comm, newcomm: *mut MPI_Comm, rc: c_int) {
    if rc != MPI_SUCCESS
        || newcomm.is_null()
        || !virtualized()
        || !is_world(parent)
        || WORLD_RETURNS.load(Ordering::Acquire)
    {
        return;
    }
    // SAFETY: the constructor succeeded and wrote the new handle.
    let nc = unsafe { *newcomm };
    if nc == MPI_COMM_NULL() {
        return;
    }
    let (mut now, mut app) = (MPI_ERRHANDLER_NULL(), MPI_ERRHANDLER_NULL());
    // SAFETY: valid communicators and out-pointers.
    unsafe {
        if pmpi::PMPI_Comm_get_errhandler(nc, &mut now) != MPI_SUCCESS {
            return;
        }
        let tramp = TRAMPOLINE.load(Ordering::Acquire);
        if (now == MPI_ERRORS_RETURN() || now == quiet() || (tramp != 0 && now as i64 == tramp))
            && pmpi::PMPI_Comm_get_errhandler(keeper(), &mut app) == MPI_SUCCESS
        {
            pmpi::PMPI_Comm_set_errhandler(nc, app);
            pmpi::PMPI_Errhandler_free(&mut app);
        }
        pmpi::PMPI_Errhandler_free(&mut now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A library that drops the code after a user-defined handler (MPICH 5.0.2): the code
    /// the recorder kept is what the call returns, once.
    #[test]
    fn a_dropped_code_comes_back_once() {
        let mut code: c_int = 0x2a00_0005;
        // SAFETY: a valid pointer to the error code, as the system MPI passes.
        unsafe { record(core::ptr::null_mut(), &mut code) };
        assert_eq!(take_swallowed(MPI_SUCCESS), code);
        assert_eq!(
            take_swallowed(MPI_SUCCESS),
            MPI_SUCCESS,
            "not for the next call"
        );
        // a call that returned its own code keeps it, and the kept one does not linger
        // SAFETY: as above.
        unsafe { record(core::ptr::null_mut(), &mut code) };
        assert_eq!(take_swallowed(7), 7);
        assert_eq!(take_swallowed(MPI_SUCCESS), MPI_SUCCESS);
    }

    /// A library that returns the code (the probe found no dropping): results unchanged.
    #[test]
    fn a_returned_code_is_left_alone() {
        assert!(!SWALLOWS.load(Ordering::Relaxed));
        let mut code: c_int = 0x2a00_0005;
        // SAFETY: as above.
        unsafe { record(core::ptr::null_mut(), &mut code) };
        assert_eq!(unswallow(MPI_SUCCESS), MPI_SUCCESS);
        assert_eq!(unswallow(code), code);
    }
}

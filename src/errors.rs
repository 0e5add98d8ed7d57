//! Reporting errors the way the application asked for: through the communicator's error
//! handler (MPI-4.0 §9.3), with the MPI error classes of the system MPI's ABI.

use core::ffi::c_int;

use crate::abi::*;
use crate::pmpi;

/// Raises error class `class` on `comm` and returns it (if the handler returns). With a
/// fatal handler, the reason is printed first, since the MPI library only knows the class.
pub fn raise(comm: MPI_Comm, class: c_int, function: &str, why: &str) -> c_int {
    tracing::debug!(target: "shim::errors", "{function}: {why} (error class {class})");
    let mut eh: MPI_Errhandler = MPI_ERRHANDLER_NULL();
    // SAFETY: valid out-pointer; an invalid communicator yields an error code.
    let got = unsafe { pmpi::PMPI_Comm_get_errhandler(comm, &mut eh) };
    print_if_fatal(got, eh, &format!("{function}: {why}"));
    // SAFETY: the handle the caller passed.
    unsafe { pmpi::PMPI_Comm_call_errhandler(comm, class) };
    class
}

/// [`raise`] for a window (MPI-4.0 §9.3.2: window errors go to the window's handler).
pub fn raise_win(win: MPI_Win, class: c_int, why: &str) -> c_int {
    tracing::debug!(target: "shim::errors", "{why} (error class {class})");
    let mut eh: MPI_Errhandler = MPI_ERRHANDLER_NULL();
    // SAFETY: valid out-pointer; an invalid window yields an error code.
    let got = unsafe { pmpi::PMPI_Win_get_errhandler(win, &mut eh) };
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
        crate::log::raw_stderr(&format!("{} {why}\n", crate::log::prefix()));
    }
    // SAFETY: the reference returned by *_get_errhandler.
    unsafe { pmpi::PMPI_Errhandler_free(&mut eh) };
}

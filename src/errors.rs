//! Reporting errors the way the application asked for: through the communicator's error
//! handler (MPI-4.0 §9.3), with the MPI error classes of the system MPI's ABI.

use core::ffi::c_int;

use crate::abi::*;
use crate::pmpi;

/// Raises error class `class` on `comm` and returns it (if the handler returns). With a
/// fatal handler, the reason is printed first, since the MPI library only knows the class.
pub fn raise(comm: MPI_Comm, class: c_int, function: &str, why: &str) -> c_int {
    tracing::debug!(target: "shim::errors", "{function}: {why} (error class {class})");
    let mut eh: MPI_Errhandler = MPI_ERRHANDLER_NULL;
    // SAFETY: valid out-pointer; the reference obtained is released below.
    unsafe {
        if pmpi::PMPI_Comm_get_errhandler(comm, &mut eh) == MPI_SUCCESS {
            if eh == MPI_ERRORS_ARE_FATAL || eh == MPI_ERRORS_ABORT {
                crate::log::raw_stderr(&format!("{} {function}: {why}\n", crate::log::prefix()));
            }
            pmpi::PMPI_Errhandler_free(&mut eh);
        }
        pmpi::PMPI_Comm_call_errhandler(comm, class);
    }
    class
}

//! Layer: hooks. May use: services, core, platform.
//!
//! Hooks (see `src/platform/abi/mpi_functions.txt`): the world's handler is the keeper's.
#![allow(non_snake_case, clippy::missing_safety_doc)]
use crate::platform::abi::*;
use crate::platform::api::pmpi;
use core::ffi::c_int;

use crate::platform::errors::*;

pub unsafe fn MPI_Comm_set_errhandler(
    comm: MPI_Comm,
    errhandler: MPI_Errhandler,
    _native: &dyn Fn() -> c_int,
) -> c_int {
    let h = holder(comm);
    // SAFETY: the application's arguments, on the communicator that holds the handler.
    let rc = unsafe { pmpi::PMPI_Comm_set_errhandler(h, errhandler) };
    if virtualized() && h == keeper() {
        refresh_world_returns();
    }
    rc
}

pub unsafe fn MPI_Errhandler_set(
    comm: MPI_Comm,
    errhandler: MPI_Errhandler,
    native: &dyn Fn() -> c_int,
) -> c_int {
    // SAFETY: as above (the MPI-1 name of the same call).
    unsafe { MPI_Comm_set_errhandler(comm, errhandler, native) }
}

pub unsafe fn MPI_Comm_get_errhandler(
    comm: MPI_Comm,
    errhandler: *mut MPI_Errhandler,
    _native: &dyn Fn() -> c_int,
) -> c_int {
    // SAFETY: the application's arguments.
    unsafe { pmpi::PMPI_Comm_get_errhandler(holder(comm), errhandler) }
}

pub unsafe fn MPI_Errhandler_get(
    comm: MPI_Comm,
    errhandler: *mut MPI_Errhandler,
    native: &dyn Fn() -> c_int,
) -> c_int {
    // SAFETY: as above.
    unsafe { MPI_Comm_get_errhandler(comm, errhandler, native) }
}

pub unsafe fn MPI_Comm_call_errhandler(
    comm: MPI_Comm,
    errorcode: c_int,
    native: &dyn Fn() -> c_int,
) -> c_int {
    if virtualized() && is_world(comm) {
        raise_on_world(errorcode, "");
        // the handler returned (MPI-4.0 §9.3.6)
        return MPI_SUCCESS;
    }
    native()
}

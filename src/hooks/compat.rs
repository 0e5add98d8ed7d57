//! Layer: hooks. May use: services, core, platform.
//!
//! MPI-4 calls that need the shim's own requests where the MPI library lacks them
//! (Open MPI 4.1 implements MPI-3.1): a program finds the shim's symbol (mpi4py's binary
//! wheel looks each one up at run time and has its own fallback only when none is found),
//! so the shim must do what the call does, not report it missing. Calls without a request
//! are in `platform::abi::absent`.
#![allow(non_snake_case, clippy::missing_safety_doc)]
use core::ffi::c_int;

use crate::core::dtype::p2p::PackedReq;
use crate::platform::abi::*;
use crate::platform::api::{Fid, pmpi};

/// `MPI_Comm_idup_with_info` (MPI-4.0 §7.4.2) on MPI-3's `MPI_Comm_idup`: the duplicate's
/// hints are set from a copy of `info` (the program may free its info at once, MPI-4.0
/// §10) when the duplication completes, and the request handed back is the shim's. The
/// parent's hints that `info` does not name stay on the duplicate: MPI-3 has no call that
/// removes a hint, and an implementation may ignore hints (MPI-4.0 §7.4.4).
pub unsafe fn MPI_Comm_idup_with_info(
    comm: MPI_Comm,
    info: MPI_Info,
    newcomm: *mut MPI_Comm,
    request: *mut MPI_Request,
    native: &dyn Fn() -> c_int,
) -> c_int {
    let fid = Fid::MPI_Comm_idup_with_info;
    if crate::platform::symbols::provides(fid as usize, "MPI_Comm_idup_with_info") {
        return native();
    }
    let mut hints = MPI_INFO_NULL();
    if info != MPI_INFO_NULL() {
        // SAFETY: the application's info handle (the library reports a bad one); our
        // out-pointer.
        let rc = unsafe { pmpi::PMPI_Info_dup(info, &mut hints) };
        if rc != MPI_SUCCESS {
            return rc;
        }
    }
    // SAFETY: the application's arguments; the library reports a bad one (a NULL pointer
    // included) through the communicator's handler.
    let rc = unsafe { pmpi::PMPI_Comm_idup(comm, newcomm, request) };
    if rc != MPI_SUCCESS || hints == MPI_INFO_NULL() {
        if hints != MPI_INFO_NULL() {
            // SAFETY: our copy.
            unsafe { pmpi::PMPI_Info_free(&mut hints) };
        }
        return rc;
    }
    // SAFETY: the library wrote both handles (a successful MPI_Comm_idup returns the new
    // handle at once in every library the shim serves; it is usable once the request
    // completes).
    let (dup, native_req) = unsafe { (*newcomm, *request) };
    let then = Box::new(move || {
        let mut hints = hints;
        // SAFETY: the completed duplicate and our copy of the hints, freed here.
        unsafe {
            pmpi::PMPI_Comm_set_info(dup, hints);
            pmpi::PMPI_Info_free(&mut hints);
        }
    });
    let p = PackedReq::then(native_req, then);
    // SAFETY: the application's request out-pointer, written above by the library.
    unsafe { *request = crate::core::request::insert_packed(p, comm, fid) };
    MPI_SUCCESS
}

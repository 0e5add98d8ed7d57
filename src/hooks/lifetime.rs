//! Layer: hooks. May use: services, core, platform.
//!
//! Frees of objects the shim may still hold (MPI-4.0 §7.4.3, §5.1.10, §6.9.5): a
//! communicator with a pending shadow duplication, datatypes and operations that pending
//! schedules reference (freed for the program now, for the system MPI when they complete).
#![allow(non_snake_case, clippy::missing_safety_doc)]
use core::ffi::c_int;

use crate::core::comm::*;
use crate::core::retain::{
    Kind, defer, drop_extra_reference, free_type, is_freed_op, is_freed_type, quarantine,
};
use crate::platform::abi::*;

/// Completes a shadow duplication still pending (a persistent collective initialized
/// and never started) before the system MPI frees the communicator: the pending
/// `MPI_Comm_idup` would keep the communicator alive (see the module comment). Every
/// rank started it at the same point, and every rank frees the communicator
/// (collective, MPI-4.0 §7.4.3), so waiting for it here cannot deadlock; the wait
/// advances the shim's other schedules too.
pub unsafe fn MPI_Comm_free(comm: *mut MPI_Comm, native: &dyn Fn() -> c_int) -> c_int {
    // SAFETY: the caller's pointer.
    unsafe { complete_shadow(comm) };
    native()
}

/// As `MPI_Comm_free` (MPI-4.0 §11.10.4: it also frees the communicator).
pub unsafe fn MPI_Comm_disconnect(comm: *mut MPI_Comm, native: &dyn Fn() -> c_int) -> c_int {
    // SAFETY: the caller's pointer.
    unsafe { complete_shadow(comm) };
    native()
}

/// Waits for a shadow duplication still pending on `*comm` (see `MPI_Comm_free`).
unsafe fn complete_shadow(comm: *mut MPI_Comm) {
    if !comm.is_null() {
        // SAFETY: a non-NULL pointer to the application's handle.
        if let Some(st) = existing(unsafe { *comm }) {
            while st.dup_pending() && !st.shadow_ready() {
                crate::core::progress::progress_all();
                std::thread::yield_now();
            }
        }
    }
}

pub unsafe fn MPI_Type_free(datatype: *mut MPI_Datatype, native: &dyn Fn() -> c_int) -> c_int {
    if datatype.is_null() {
        // the system MPI dereferences it
        return crate::platform::errors::raise_no_object(
            MPI_ERR_ARG,
            "MPI_Type_free",
            "the datatype argument is NULL",
        );
    }
    // SAFETY: a non-NULL pointer to the application's handle.
    let dt = unsafe { *datatype };
    if is_freed_type(dt) {
        return crate::platform::errors::raise_no_object(
            MPI_ERR_TYPE,
            "MPI_Type_free",
            "the datatype was already freed",
        );
    }
    if drop_extra_reference(dt) {
        // one of several references the program holds (from MPI_Type_get_contents): the
        // type lives on, for the program and for any schedule using it
        return native();
    }
    match defer(Kind::Datatype, dt as usize) {
        Ok(true) => {
            // SAFETY: as above.
            unsafe { *datatype = MPI_DATATYPE_NULL() };
            MPI_SUCCESS
        }
        // recorded as freed before the system MPI's free (see `free_type`)
        Ok(false) => free_type(dt as usize, native),
        Err(()) => crate::platform::errors::raise_no_object(
            MPI_ERR_TYPE,
            "MPI_Type_free",
            "the datatype was already freed",
        ),
    }
}

pub unsafe fn MPI_Op_free(op: *mut MPI_Op, native: &dyn Fn() -> c_int) -> c_int {
    if op.is_null() {
        return native();
    }
    // SAFETY: a non-NULL pointer to the application's handle.
    let o = unsafe { *op };
    if is_freed_op(o) {
        return crate::platform::errors::raise_no_object(
            MPI_ERR_OP,
            "MPI_Op_free",
            "the operation was already freed",
        );
    }
    match defer(Kind::Op, o as usize) {
        Ok(true) => {
            // SAFETY: as above.
            unsafe { *op = MPI_OP_NULL() };
            MPI_SUCCESS
        }
        Ok(false) => {
            let rc = native();
            if rc == MPI_SUCCESS {
                quarantine(Kind::Op, o as usize);
            }
            rc
        }
        Err(()) => crate::platform::errors::raise_no_object(
            MPI_ERR_OP,
            "MPI_Op_free",
            "the operation was already freed",
        ),
    }
}

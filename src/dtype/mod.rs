//! Datatype helpers shared by the hooks.

use core::ffi::c_int;

use crate::abi::*;

/// Size in bytes of one element of `dt` (the type signature's size, MPI-4.0 §5.1.5), or
/// `None` if the MPI library rejects the handle.
pub fn size_of(dt: MPI_Datatype) -> Option<usize> {
    if let Some(s) = builtin_size(dt) {
        return Some(s);
    }
    let mut s: c_int = 0;
    // SAFETY: out-pointer is a valid local; an invalid handle yields an error code.
    let rc = unsafe { crate::pmpi::PMPI_Type_size(dt, &mut s) };
    (rc == MPI_SUCCESS && s >= 0).then_some(s as usize)
}

//! Layer: platform. May use: nothing.
//!
//! Communicators, groups and attributes (MPI-4.0 chapters 7 and 9).

use core::ffi::c_int;

use super::{MpiResult, check, fake_first};
use crate::platform::abi::*;
use crate::platform::api::pmpi;

/// `MPI_Comm_rank`.
pub fn rank(comm: MPI_Comm) -> MpiResult<c_int> {
    fake_first!("comm_rank", [comm], |v: Vec<i64>| v[0] as c_int);
    let mut r = 0;
    // SAFETY: a valid out-pointer; MPI reports a bad handle as an error.
    check(unsafe { pmpi::PMPI_Comm_rank(comm, &mut r) })?;
    Ok(r)
}

/// `MPI_Comm_size`.
pub fn size(comm: MPI_Comm) -> MpiResult<c_int> {
    fake_first!("comm_size", [comm], |v: Vec<i64>| v[0] as c_int);
    let mut n = 0;
    // SAFETY: a valid out-pointer; MPI reports a bad handle as an error.
    check(unsafe { pmpi::PMPI_Comm_size(comm, &mut n) })?;
    Ok(n)
}

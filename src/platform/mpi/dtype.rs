//! Layer: platform. May use: nothing.
//!
//! Datatypes (MPI-4.0 chapter 5).

#[allow(unused_imports)]
use super::{MpiResult, check, fake_first};

use core::ffi::c_int;

use crate::platform::abi::*;
use crate::platform::api::pmpi;

/// `MPI_Type_size`.
pub fn size(dt: MPI_Datatype) -> MpiResult<c_int> {
    fake_first!("type_size", [dt], |v: Vec<i64>| v[0] as c_int);
    let mut n = 0;
    // SAFETY: a valid out-pointer; MPI reports a bad handle as an error.
    check(unsafe { pmpi::PMPI_Type_size(dt, &mut n) })?;
    Ok(n)
}

//! Layer: platform. May use: nothing.
//!
//! The collectives the shim issues itself on its own communicators (MPI-4.0 chapter 6).

#[allow(unused_imports)]
use super::{MpiResult, check, fake_first};

use core::ffi::c_int;

use crate::platform::abi::*;
use crate::platform::api::pmpi;

/// `MPI_Barrier`.
pub fn barrier(comm: MPI_Comm) -> MpiResult<()> {
    fake_first!("barrier", [comm], |_v: Vec<i64>| ());
    // SAFETY: a plain handle; MPI reports a bad one as an error.
    check(unsafe { pmpi::PMPI_Barrier(comm) })
}

/// `MPI_Allgather` of the shim's own int64 words (`MPI_INT64_T`): `send.len()` from every
/// process, in rank order into `recv`. In unit tests the fake's words are the result.
///
/// # Safety
/// `recv` holds `send.len()` words for every process of `comm`.
pub unsafe fn allgather_i64(send: &[i64], recv: &mut [i64], comm: MPI_Comm) -> MpiResult<()> {
    fake_first!("allgather", [send.len(), recv.len(), comm], |v: Vec<
        i64,
    >| {
        let n = v.len().min(recv.len());
        recv[..n].copy_from_slice(&v[..n]);
    });
    // SAFETY: `send.len()` words out; room for as many per process in `recv` (the caller).
    check(unsafe {
        pmpi::PMPI_Allgather(
            send.as_ptr().cast(),
            send.len() as c_int,
            MPI_INT64_T(),
            recv.as_mut_ptr().cast(),
            send.len() as c_int,
            MPI_INT64_T(),
            comm,
        )
    })
}

//! Layer: platform. May use: nothing.
//!
//! The collectives the shim issues itself on its own communicators (MPI-4.0 chapter 6).

#[allow(unused_imports)]
use super::{MpiResult, check, fake_first};

// The shim's own collectives (imports as globs, so that other additions to this file that
// import the same names do not clash).
#[allow(unused_imports)]
use crate::platform::abi::*;
#[allow(unused_imports)]
use crate::platform::api::*;
#[allow(unused_imports)]
use core::ffi::*;

/// `MPI_Barrier`.
pub fn barrier(comm: MPI_Comm) -> MpiResult<()> {
    fake_first!("barrier", [comm], |_v: Vec<i64>| ());
    // SAFETY: a handle only; MPI reports a bad one as an error.
    check(unsafe { pmpi::PMPI_Barrier(comm) })
}

/// `MPI_Allreduce`.
///
/// # Safety
/// `count` elements of `dt` at `sendbuf` (or `MPI_IN_PLACE`) and room for them at `recvbuf`.
pub unsafe fn allreduce(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: c_int,
    dt: MPI_Datatype,
    op: MPI_Op,
    comm: MPI_Comm,
) -> MpiResult<()> {
    fake_first!("allreduce", [count, dt, op, comm], |_v: Vec<i64>| ());
    // SAFETY: the caller's buffers.
    check(unsafe { pmpi::PMPI_Allreduce(sendbuf, recvbuf, count, dt, op, comm) })
}

/// `MPI_Bcast`.
///
/// # Safety
/// `count` elements of `dt` at `buf` (room for them at non-roots).
pub unsafe fn bcast(
    buf: *mut c_void,
    count: c_int,
    dt: MPI_Datatype,
    root: c_int,
    comm: MPI_Comm,
) -> MpiResult<()> {
    fake_first!("bcast", [count, dt, root, comm], |_v: Vec<i64>| ());
    // SAFETY: the caller's buffer.
    check(unsafe { pmpi::PMPI_Bcast(buf, count, dt, root, comm) })
}

/// `MPI_Gather`.
///
/// # Safety
/// `sendcount` elements of `sendtype` at `sendbuf`; at the root, room for `recvcount`
/// elements of `recvtype` per process at `recvbuf`.
#[allow(clippy::too_many_arguments)]
pub unsafe fn gather(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: MPI_Datatype,
    root: c_int,
    comm: MPI_Comm,
) -> MpiResult<()> {
    fake_first!(
        "gather",
        [sendcount, sendtype, recvcount, recvtype, root, comm],
        |_v: Vec<i64>| ()
    );
    // SAFETY: the caller's buffers.
    check(unsafe {
        pmpi::PMPI_Gather(
            sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm,
        )
    })
}

/// `MPI_Gatherv`.
///
/// # Safety
/// `sendcount` elements of `sendtype` at `sendbuf`; at the root, `recvcounts` and `displs`
/// hold one entry per process and describe room at `recvbuf`.
#[allow(clippy::too_many_arguments)]
pub unsafe fn gatherv(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcounts: *const c_int,
    displs: *const c_int,
    recvtype: MPI_Datatype,
    root: c_int,
    comm: MPI_Comm,
) -> MpiResult<()> {
    fake_first!(
        "gatherv",
        [sendcount, sendtype, recvtype, root, comm],
        |_v: Vec<i64>| ()
    );
    // SAFETY: the caller's buffers and arrays.
    check(unsafe {
        pmpi::PMPI_Gatherv(
            sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, root, comm,
        )
    })
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

/// `MPI_Iallgather` of the shim's own int64 words, as [`allgather_i64`]: the request.
///
/// # Safety
/// `send` and `recv` (which holds `send.len()` words for every process of `comm`) stay
/// where they are, untouched, until the request completes.
pub unsafe fn iallgather_i64(
    send: &[i64],
    recv: &mut [i64],
    comm: MPI_Comm,
) -> MpiResult<MPI_Request> {
    let mut req = MPI_REQUEST_NULL();
    // SAFETY: as for `allgather_i64`; the caller keeps the buffers until completion.
    check(unsafe {
        pmpi::PMPI_Iallgather(
            send.as_ptr().cast(),
            send.len() as c_int,
            MPI_INT64_T(),
            recv.as_mut_ptr().cast(),
            send.len() as c_int,
            MPI_INT64_T(),
            comm,
            &mut req,
        )
    })?;
    Ok(req)
}

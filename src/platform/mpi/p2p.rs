//! Layer: platform. May use: nothing.
//!
//! Point-to-point communication, requests and probes (MPI-4.0 chapter 3).

#[allow(unused_imports)]
use super::{MpiResult, check, fake_first};

use core::ffi::{c_int, c_void};

use crate::platform::abi::*;
use crate::platform::api::pmpi;

/// `MPI_Send` of the shim's own int64 words (`MPI_INT64_T`).
pub fn send_i64(buf: &[i64], dest: c_int, tag: c_int, comm: MPI_Comm) -> MpiResult<()> {
    fake_first!("send", [buf.len(), dest, tag, comm], |_v: Vec<i64>| ());
    // SAFETY: `buf.len()` int64s, read during the call.
    check(unsafe {
        pmpi::PMPI_Send(
            buf.as_ptr().cast(),
            buf.len() as c_int,
            MPI_INT64_T(),
            dest,
            tag,
            comm,
        )
    })
}

/// `MPI_Recv` into the shim's own int64 words (`MPI_INT64_T`, status ignored). In unit
/// tests the fake's words are the message.
pub fn recv_i64(buf: &mut [i64], source: c_int, tag: c_int, comm: MPI_Comm) -> MpiResult<()> {
    fake_first!("recv", [buf.len(), source, tag, comm], |v: Vec<i64>| {
        let n = v.len().min(buf.len());
        buf[..n].copy_from_slice(&v[..n]);
    });
    // SAFETY: room for `buf.len()` int64s; the status is ignored.
    check(unsafe {
        pmpi::PMPI_Recv(
            buf.as_mut_ptr().cast(),
            buf.len() as c_int,
            MPI_INT64_T(),
            source,
            tag,
            comm,
            MPI_STATUS_IGNORE,
        )
    })
}

/// `MPI_Recv` with the status ignored.
///
/// # Safety
/// Room for `count` elements of `dt` at `buf` (nothing for a zero count).
pub unsafe fn recv(
    buf: *mut c_void,
    count: c_int,
    dt: MPI_Datatype,
    source: c_int,
    tag: c_int,
    comm: MPI_Comm,
) -> MpiResult<()> {
    fake_first!("recv", [count, source, tag, comm], |_v: Vec<i64>| ());
    // SAFETY: the caller's buffer; the status is ignored.
    check(unsafe { pmpi::PMPI_Recv(buf, count, dt, source, tag, comm, MPI_STATUS_IGNORE) })
}

/// `MPI_Isend`: the request.
///
/// # Safety
/// `count` elements of `dt` at `buf`, unchanged until the request completes.
pub unsafe fn isend(
    buf: *const c_void,
    count: c_int,
    dt: MPI_Datatype,
    dest: c_int,
    tag: c_int,
    comm: MPI_Comm,
) -> MpiResult<MPI_Request> {
    fake_first!("isend", [count, dest, tag, comm], |v: Vec<i64>| v
        .first()
        .map_or(MPI_REQUEST_NULL(), |&r| r as MPI_Request));
    let mut r = MPI_REQUEST_NULL();
    // SAFETY: the caller's buffer; a valid out-pointer.
    check(unsafe { pmpi::PMPI_Isend(buf, count, dt, dest, tag, comm, &mut r) })?;
    Ok(r)
}

/// `MPI_Irecv`: the request.
///
/// # Safety
/// Room for `count` elements of `dt` at `buf`, valid until the request completes.
pub unsafe fn irecv(
    buf: *mut c_void,
    count: c_int,
    dt: MPI_Datatype,
    source: c_int,
    tag: c_int,
    comm: MPI_Comm,
) -> MpiResult<MPI_Request> {
    fake_first!("irecv", [count, source, tag, comm], |v: Vec<i64>| v
        .first()
        .map_or(MPI_REQUEST_NULL(), |&r| r as MPI_Request));
    let mut r = MPI_REQUEST_NULL();
    // SAFETY: the caller's buffer; a valid out-pointer.
    check(unsafe { pmpi::PMPI_Irecv(buf, count, dt, source, tag, comm, &mut r) })?;
    Ok(r)
}

/// `MPI_Request_free`: `*req` becomes `MPI_REQUEST_NULL` on success.
pub fn request_free(req: &mut MPI_Request) -> MpiResult<()> {
    fake_first!("request_free", [*req], |_v: Vec<i64>| *req =
        MPI_REQUEST_NULL());
    // SAFETY: a valid handle pointer.
    check(unsafe { pmpi::PMPI_Request_free(req) })
}

/// `MPI_Waitall` with the statuses ignored (completed requests become `MPI_REQUEST_NULL`).
pub fn waitall(reqs: &mut [MPI_Request]) -> MpiResult<()> {
    fake_first!("waitall", [reqs.len()], |_v: Vec<i64>| reqs
        .iter_mut()
        .for_each(|r| *r = MPI_REQUEST_NULL()));
    // SAFETY: `reqs.len()` handles; the statuses are ignored.
    check(unsafe {
        pmpi::PMPI_Waitall(reqs.len() as c_int, reqs.as_mut_ptr(), MPI_STATUSES_IGNORE)
    })
}

/// `MPI_Testall` with the statuses ignored: whether all completed. In unit tests the fake's
/// first word is the flag.
pub fn testall(reqs: &mut [MPI_Request]) -> MpiResult<bool> {
    fake_first!("testall", [reqs.len()], |v: Vec<i64>| {
        let done = v.first().is_some_and(|&f| f != 0);
        if done {
            reqs.iter_mut().for_each(|r| *r = MPI_REQUEST_NULL());
        }
        done
    });
    let mut flag = 0;
    // SAFETY: `reqs.len()` handles and a valid flag; the statuses are ignored.
    check(unsafe {
        pmpi::PMPI_Testall(
            reqs.len() as c_int,
            reqs.as_mut_ptr(),
            &mut flag,
            MPI_STATUSES_IGNORE,
        )
    })?;
    Ok(flag != 0)
}

/// `MPI_Iprobe`: the matching message's status, if there is one. In unit tests the fake's
/// words are the flag, the source and the tag.
pub fn iprobe(source: c_int, tag: c_int, comm: MPI_Comm) -> MpiResult<Option<MPI_Status>> {
    fake_first!("iprobe", [source, tag, comm], |v: Vec<i64>| {
        v.first().is_some_and(|&f| f != 0).then(|| MPI_Status {
            MPI_SOURCE: v.get(1).copied().unwrap_or(0) as c_int,
            MPI_TAG: v.get(2).copied().unwrap_or(0) as c_int,
            ..MPI_Status::default()
        })
    });
    let mut flag = 0;
    let mut st = MPI_Status::default();
    // SAFETY: valid out-pointers.
    check(unsafe { pmpi::PMPI_Iprobe(source, tag, comm, &mut flag, &mut st) })?;
    Ok((flag != 0).then_some(st))
}

/// `MPI_Status_set_elements`.
pub fn status_set_elements(st: &mut MPI_Status, dt: MPI_Datatype, count: c_int) -> MpiResult<()> {
    fake_first!("status_set_elements", [dt, count], |_v: Vec<i64>| ());
    // SAFETY: a valid status.
    check(unsafe { pmpi::PMPI_Status_set_elements(st, dt, count) })
}

/// `MPI_Status_set_cancelled`.
pub fn status_set_cancelled(st: &mut MPI_Status, cancelled: bool) -> MpiResult<()> {
    fake_first!("status_set_cancelled", [cancelled], |_v: Vec<i64>| ());
    // SAFETY: a valid status.
    check(unsafe { pmpi::PMPI_Status_set_cancelled(st, cancelled as c_int) })
}

/// `MPI_Grequest_start`: the generalized request.
///
/// # Safety
/// `query`, `free` and `cancel` are functions with the signatures of MPI-4.0 §13.2
/// (`MPI_Grequest_query_function`, ...), and `extra` is what they expect, valid until the
/// request is freed.
pub unsafe fn grequest_start(
    query: *mut c_void,
    free: *mut c_void,
    cancel: *mut c_void,
    extra: *mut c_void,
) -> MpiResult<MPI_Request> {
    fake_first!(
        "grequest_start",
        [
            query as usize,
            free as usize,
            cancel as usize,
            extra as usize
        ],
        |v: Vec<i64>| v.first().map_or(MPI_REQUEST_NULL(), |&r| r as MPI_Request)
    );
    let mut r = MPI_REQUEST_NULL();
    // SAFETY: the caller's callbacks and state; a valid out-pointer.
    check(unsafe { pmpi::PMPI_Grequest_start(query, free, cancel, extra, &mut r) })?;
    Ok(r)
}

/// `MPI_Grequest_complete`.
pub fn grequest_complete(req: MPI_Request) -> MpiResult<()> {
    fake_first!("grequest_complete", [req], |_v: Vec<i64>| ());
    // SAFETY: a plain handle; MPI reports a bad one as an error.
    check(unsafe { pmpi::PMPI_Grequest_complete(req) })
}

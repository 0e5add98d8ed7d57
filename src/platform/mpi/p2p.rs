//! Layer: platform. May use: nothing.
//!
//! Point-to-point communication, requests and probes (MPI-4.0 chapter 3).

#[allow(unused_imports)]
use super::{MpiResult, check, fake_first};

// The calls of the collective engine and the shim's own communicators (imports as globs,
// so that other additions to this file that import the same names do not clash). The
// fake's arguments of a message are `[count, peer, tag, comm]`, its answer the request.
#[allow(unused_imports)]
use crate::platform::abi::*;
#[allow(unused_imports)]
use crate::platform::api::*;
#[allow(unused_imports)]
use core::ffi::*;

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

/// `MPI_Isend_c`: the request.
///
/// # Safety
/// `count` elements of `dt` at `buf`, unchanged until the request completes.
pub unsafe fn isend_c(
    buf: *const c_void,
    count: MPI_Count,
    dt: MPI_Datatype,
    dest: c_int,
    tag: c_int,
    comm: MPI_Comm,
) -> MpiResult<MPI_Request> {
    fake_first!("isend_c", [count, dest, tag, comm], |v: Vec<i64>| v
        .first()
        .map_or(MPI_REQUEST_NULL(), |&r| r as MPI_Request));
    let mut r = MPI_REQUEST_NULL();
    // SAFETY: the caller's buffer; a valid out-pointer.
    check(unsafe { pmpi::PMPI_Isend_c(buf, count, dt, dest, tag, comm, &mut r) })?;
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

/// `MPI_Irecv_c`: the request.
///
/// # Safety
/// Room for `count` elements of `dt` at `buf`, valid until the request completes.
pub unsafe fn irecv_c(
    buf: *mut c_void,
    count: MPI_Count,
    dt: MPI_Datatype,
    source: c_int,
    tag: c_int,
    comm: MPI_Comm,
) -> MpiResult<MPI_Request> {
    fake_first!("irecv_c", [count, source, tag, comm], |v: Vec<i64>| v
        .first()
        .map_or(MPI_REQUEST_NULL(), |&r| r as MPI_Request));
    let mut r = MPI_REQUEST_NULL();
    // SAFETY: the caller's buffer; a valid out-pointer.
    check(unsafe { pmpi::PMPI_Irecv_c(buf, count, dt, source, tag, comm, &mut r) })?;
    Ok(r)
}

/// `MPI_Send`.
///
/// # Safety
/// `count` elements of `dt` at `buf`.
pub unsafe fn send(
    buf: *const c_void,
    count: c_int,
    dt: MPI_Datatype,
    dest: c_int,
    tag: c_int,
    comm: MPI_Comm,
) -> MpiResult<()> {
    fake_first!("send", [count, dest, tag, comm], |_v: Vec<i64>| ());
    // SAFETY: the caller's buffer.
    check(unsafe { pmpi::PMPI_Send(buf, count, dt, dest, tag, comm) })
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

/// `MPI_Recv_init`: the (inactive) persistent request.
///
/// # Safety
/// Room for `count` elements of `dt` at `buf` whenever the request is active.
pub unsafe fn recv_init(
    buf: *mut c_void,
    count: c_int,
    dt: MPI_Datatype,
    source: c_int,
    tag: c_int,
    comm: MPI_Comm,
) -> MpiResult<MPI_Request> {
    fake_first!("recv_init", [count, source, tag, comm], |v: Vec<i64>| v
        .first()
        .map_or(MPI_REQUEST_NULL(), |&r| r as MPI_Request));
    let mut r = MPI_REQUEST_NULL();
    // SAFETY: the caller's buffer; a valid out-pointer.
    check(unsafe { pmpi::PMPI_Recv_init(buf, count, dt, source, tag, comm, &mut r) })?;
    Ok(r)
}

/// `MPI_Test` with the status ignored: whether the request completed (a completed
/// non-persistent request becomes `MPI_REQUEST_NULL`; the fake's first word is the flag,
/// and it nulls the request on a nonzero flag).
pub fn test(req: &mut MPI_Request) -> MpiResult<bool> {
    fake_first!("test", [*req], |v: Vec<i64>| {
        let done = v.first().is_some_and(|&f| f != 0);
        if done {
            *req = MPI_REQUEST_NULL();
        }
        done
    });
    let mut flag: c_int = 0;
    // SAFETY: a valid handle pointer; the status is ignored.
    check(unsafe { pmpi::PMPI_Test(req, &mut flag, MPI_STATUS_IGNORE) })?;
    Ok(flag != 0)
}

/// `MPI_Wait` with the status ignored (the request becomes `MPI_REQUEST_NULL`, with the
/// fake too).
pub fn wait(req: &mut MPI_Request) -> MpiResult<()> {
    fake_first!("wait", [*req], |_v: Vec<i64>| *req = MPI_REQUEST_NULL());
    // SAFETY: a valid handle pointer; the status is ignored.
    check(unsafe { pmpi::PMPI_Wait(req, MPI_STATUS_IGNORE) })
}

/// `MPI_Cancel`.
pub fn cancel(req: MPI_Request) -> MpiResult<()> {
    fake_first!("cancel", [req], |_v: Vec<i64>| ());
    let mut r = req;
    // SAFETY: a valid handle pointer (MPI only reads it).
    check(unsafe { pmpi::PMPI_Cancel(&mut r) })
}

/// `MPI_Request_free`: `*req` becomes `MPI_REQUEST_NULL` on success.
pub fn request_free(req: &mut MPI_Request) -> MpiResult<()> {
    fake_first!("request_free", [*req], |_v: Vec<i64>| *req =
        MPI_REQUEST_NULL());
    // SAFETY: a valid handle pointer.
    check(unsafe { pmpi::PMPI_Request_free(req) })
}

/// `MPI_Testsome` over `reqs`, with room for as many indices and statuses (`MPI_ERR_ARG`
/// otherwise): `Ok((outcount, errors_in_status))`, `outcount` as MPI gives it
/// (`MPI_UNDEFINED` when no request is active). `MPI_ERR_IN_STATUS` is not a failure of
/// the call: the completed requests' codes are in their statuses' `MPI_ERROR`, and
/// `errors_in_status` is true. Completed non-persistent requests become `MPI_REQUEST_NULL`.
///
/// The fake answers `[outcount, index...]`, optionally followed by one error code per
/// completion (then written to the statuses, as `MPI_ERR_IN_STATUS`); it nulls the
/// completed requests.
pub fn testsome(
    reqs: &mut [MPI_Request],
    indices: &mut [c_int],
    statuses: &mut [MPI_Status],
) -> MpiResult<(c_int, bool)> {
    fake_first!("testsome", [reqs.len()], |v: Vec<i64>| {
        let out = v.first().copied().unwrap_or(0);
        let k = out.max(0) as usize;
        for j in 0..k {
            let i = v[1 + j] as usize;
            indices[j] = i as c_int;
            reqs[i] = MPI_REQUEST_NULL();
        }
        let in_status = v.len() >= 1 + 2 * k && k > 0;
        if in_status {
            for j in 0..k {
                statuses[j].MPI_ERROR = v[1 + k + j] as c_int;
            }
        }
        (out as c_int, in_status)
    });
    let n = reqs.len();
    if indices.len() < n || statuses.len() < n {
        return Err(super::MpiError(MPI_ERR_ARG));
    }
    let Ok(incount) = c_int::try_from(n) else {
        return Err(super::MpiError(MPI_ERR_ARG));
    };
    let mut outcount: c_int = 0;
    // SAFETY: arrays of n requests and at least n indices and statuses (checked above).
    let rc = unsafe {
        pmpi::PMPI_Testsome(
            incount,
            reqs.as_mut_ptr(),
            &mut outcount,
            indices.as_mut_ptr(),
            statuses.as_mut_ptr(),
        )
    };
    if rc == MPI_ERR_IN_STATUS {
        return Ok((outcount, true));
    }
    check(rc)?;
    Ok((outcount, false))
}

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

//! Layer: platform. May use: nothing.
//!
//! Point-to-point communication, requests and probes (MPI-4.0 chapter 3).

#[allow(unused_imports)]
use super::{MpiResult, check, fake_first};

use core::ffi::{c_int, c_void};

use crate::platform::abi::*;
use crate::platform::api::pmpi;

/// Unit tests: word `i` of the fake's answer, 0 when the answer is shorter.
#[cfg(test)]
fn word(v: &[i64], i: usize) -> i64 {
    v.get(i).copied().unwrap_or(0)
}

/// Unit tests: the fake's words `[source, tag]` (those given) into `st` unless it is
/// ignored.
///
/// # Safety
/// `st` is null, `MPI_STATUS_IGNORE` or a writable status.
#[cfg(test)]
unsafe fn fake_status(st: *mut MPI_Status, words: &[i64]) {
    if st.is_null() || st == MPI_STATUS_IGNORE {
        return;
    }
    // SAFETY: a writable status (the caller's contract).
    unsafe {
        if let Some(&s) = words.first() {
            (*st).MPI_SOURCE = s as c_int;
        }
        if let Some(&t) = words.get(1) {
            (*st).MPI_TAG = t as c_int;
        }
    }
}

/// The non-blocking and persistent sends: `buf, count, datatype, dest, tag, comm`, the new
/// request returned. Fake: the answer's word 0 is the request.
macro_rules! post_send {
    ($($(#[$doc:meta])* $name:ident = $pmpi:ident($n:ty), $fake:literal;)*) => {$(
        $(#[$doc])*
        ///
        /// # Safety
        /// `buf` holds `count` elements of `datatype` and stays valid until the request
        /// completes (MPI-4.0 §3.7.2).
        pub unsafe fn $name(
            buf: *const c_void,
            count: $n,
            datatype: MPI_Datatype,
            dest: c_int,
            tag: c_int,
            comm: MPI_Comm,
        ) -> MpiResult<MPI_Request> {
            fake_first!($fake, [buf, count, datatype, dest, tag, comm], |v: Vec<i64>| {
                word(&v, 0) as MPI_Request
            });
            let mut r = MPI_REQUEST_NULL();
            // SAFETY: the caller's buffer; a valid out-pointer.
            check(unsafe { pmpi::$pmpi(buf, count, datatype, dest, tag, comm, &mut r) })?;
            Ok(r)
        }
    )*};
}

post_send! {
    /// `MPI_Isend`.
    isend = PMPI_Isend(c_int), "isend";
    /// `MPI_Isend_c`.
    isend_c = PMPI_Isend_c(MPI_Count), "isend_c";
    /// `MPI_Issend`.
    issend = PMPI_Issend(c_int), "issend";
    /// `MPI_Issend_c`.
    issend_c = PMPI_Issend_c(MPI_Count), "issend_c";
    /// `MPI_Irsend`.
    irsend = PMPI_Irsend(c_int), "irsend";
    /// `MPI_Irsend_c`.
    irsend_c = PMPI_Irsend_c(MPI_Count), "irsend_c";
    /// `MPI_Ibsend`.
    ibsend = PMPI_Ibsend(c_int), "ibsend";
    /// `MPI_Ibsend_c`.
    ibsend_c = PMPI_Ibsend_c(MPI_Count), "ibsend_c";
    /// `MPI_Send_init_c` (an inactive persistent request).
    send_init_c = PMPI_Send_init_c(MPI_Count), "send_init_c";
    /// `MPI_Ssend_init_c` (an inactive persistent request).
    ssend_init_c = PMPI_Ssend_init_c(MPI_Count), "ssend_init_c";
    /// `MPI_Rsend_init_c` (an inactive persistent request).
    rsend_init_c = PMPI_Rsend_init_c(MPI_Count), "rsend_init_c";
    /// `MPI_Bsend_init_c` (an inactive persistent request).
    bsend_init_c = PMPI_Bsend_init_c(MPI_Count), "bsend_init_c";
}

/// The non-blocking and persistent receives: `buf, count, datatype, source, tag, comm`,
/// the new request returned. Fake: the answer's word 0 is the request.
macro_rules! post_recv {
    ($($(#[$doc:meta])* $name:ident = $pmpi:ident($n:ty), $fake:literal;)*) => {$(
        $(#[$doc])*
        ///
        /// # Safety
        /// `buf` has room for `count` elements of `datatype` and stays valid until the
        /// request completes (MPI-4.0 §3.7.2).
        pub unsafe fn $name(
            buf: *mut c_void,
            count: $n,
            datatype: MPI_Datatype,
            source: c_int,
            tag: c_int,
            comm: MPI_Comm,
        ) -> MpiResult<MPI_Request> {
            fake_first!($fake, [buf, count, datatype, source, tag, comm], |v: Vec<i64>| {
                word(&v, 0) as MPI_Request
            });
            let mut r = MPI_REQUEST_NULL();
            // SAFETY: the caller's buffer; a valid out-pointer.
            check(unsafe { pmpi::$pmpi(buf, count, datatype, source, tag, comm, &mut r) })?;
            Ok(r)
        }
    )*};
}

post_recv! {
    /// `MPI_Irecv`.
    irecv = PMPI_Irecv(c_int), "irecv";
    /// `MPI_Irecv_c`.
    irecv_c = PMPI_Irecv_c(MPI_Count), "irecv_c";
    /// `MPI_Recv_init_c` (an inactive persistent request).
    recv_init_c = PMPI_Recv_init_c(MPI_Count), "recv_init_c";
}

/// The matched non-blocking receives: `buf, count, datatype, message`, the new request
/// returned; `*message` becomes `MPI_MESSAGE_NULL` (MPI-4.0 §3.8.3). Fake: the answer's
/// word 0 is the request, and the message is set to `MPI_MESSAGE_NULL`.
macro_rules! post_mrecv {
    ($($(#[$doc:meta])* $name:ident = $pmpi:ident($n:ty), $fake:literal;)*) => {$(
        $(#[$doc])*
        ///
        /// # Safety
        /// `buf` has room for `count` elements of `datatype` and stays valid until the
        /// request completes; `message` points to a message handle.
        pub unsafe fn $name(
            buf: *mut c_void,
            count: $n,
            datatype: MPI_Datatype,
            message: *mut MPI_Message,
        ) -> MpiResult<MPI_Request> {
            fake_first!($fake, [buf, count, datatype, message], |v: Vec<i64>| {
                if !message.is_null() {
                    // SAFETY: the caller's message handle.
                    unsafe { *message = MPI_MESSAGE_NULL() };
                }
                word(&v, 0) as MPI_Request
            });
            let mut r = MPI_REQUEST_NULL();
            // SAFETY: the caller's buffer and message handle; a valid out-pointer.
            check(unsafe { pmpi::$pmpi(buf, count, datatype, message, &mut r) })?;
            Ok(r)
        }
    )*};
}

post_mrecv! {
    /// `MPI_Imrecv`.
    imrecv = PMPI_Imrecv(c_int), "imrecv";
    /// `MPI_Imrecv_c`.
    imrecv_c = PMPI_Imrecv_c(MPI_Count), "imrecv_c";
}

/// The blocking sends of large counts: `buf, count, datatype, dest, tag, comm`.
macro_rules! blocking_send {
    ($($(#[$doc:meta])* $name:ident = $pmpi:ident, $fake:literal;)*) => {$(
        $(#[$doc])*
        ///
        /// # Safety
        /// `buf` holds `count` elements of `datatype`.
        pub unsafe fn $name(
            buf: *const c_void,
            count: MPI_Count,
            datatype: MPI_Datatype,
            dest: c_int,
            tag: c_int,
            comm: MPI_Comm,
        ) -> MpiResult<()> {
            fake_first!($fake, [buf, count, datatype, dest, tag, comm], |_v: Vec<i64>| ());
            // SAFETY: the caller's buffer.
            check(unsafe { pmpi::$pmpi(buf, count, datatype, dest, tag, comm) })
        }
    )*};
}

blocking_send! {
    /// `MPI_Send_c`.
    send_c = PMPI_Send_c, "send_c";
    /// `MPI_Ssend_c`.
    ssend_c = PMPI_Ssend_c, "ssend_c";
    /// `MPI_Rsend_c`.
    rsend_c = PMPI_Rsend_c, "rsend_c";
    /// `MPI_Bsend_c`.
    bsend_c = PMPI_Bsend_c, "bsend_c";
}

/// `MPI_Recv_c`. Fake: the answer's words `[source, tag]` go into the status.
///
/// # Safety
/// `buf` has room for `count` elements of `datatype`; `status` is `MPI_STATUS_IGNORE` or
/// writable.
pub unsafe fn recv_c(
    buf: *mut c_void,
    count: MPI_Count,
    datatype: MPI_Datatype,
    source: c_int,
    tag: c_int,
    comm: MPI_Comm,
    status: *mut MPI_Status,
) -> MpiResult<()> {
    fake_first!(
        "recv_c",
        [buf, count, datatype, source, tag, comm, status],
        |v: Vec<i64>| {
            // SAFETY: the caller's status.
            unsafe { fake_status(status, &v) }
        }
    );
    // SAFETY: the caller's buffer and status.
    check(unsafe { pmpi::PMPI_Recv_c(buf, count, datatype, source, tag, comm, status) })
}

/// `MPI_Mrecv_c`. Fake: the answer's words `[source, tag]` go into the status, and the
/// message becomes `MPI_MESSAGE_NULL`.
///
/// # Safety
/// `buf` has room for `count` elements of `datatype`; `message` points to a message
/// handle; `status` is `MPI_STATUS_IGNORE` or writable.
pub unsafe fn mrecv_c(
    buf: *mut c_void,
    count: MPI_Count,
    datatype: MPI_Datatype,
    message: *mut MPI_Message,
    status: *mut MPI_Status,
) -> MpiResult<()> {
    fake_first!(
        "mrecv_c",
        [buf, count, datatype, message, status],
        |v: Vec<i64>| {
            // SAFETY: the caller's message handle and status.
            unsafe {
                if !message.is_null() {
                    *message = MPI_MESSAGE_NULL();
                }
                fake_status(status, &v)
            }
        }
    );
    // SAFETY: the caller's buffer, message and status.
    check(unsafe { pmpi::PMPI_Mrecv_c(buf, count, datatype, message, status) })
}

/// `MPI_Sendrecv_c`. Fake: the answer's words `[source, tag]` go into the status.
///
/// # Safety
/// `sendbuf` holds `sendcount` elements of `sendtype`, `recvbuf` has room for
/// `recvcount` elements of `recvtype`; `status` is `MPI_STATUS_IGNORE` or writable.
#[allow(clippy::too_many_arguments)]
pub unsafe fn sendrecv_c(
    sendbuf: *const c_void,
    sendcount: MPI_Count,
    sendtype: MPI_Datatype,
    dest: c_int,
    sendtag: c_int,
    recvbuf: *mut c_void,
    recvcount: MPI_Count,
    recvtype: MPI_Datatype,
    source: c_int,
    recvtag: c_int,
    comm: MPI_Comm,
    status: *mut MPI_Status,
) -> MpiResult<()> {
    fake_first!(
        "sendrecv_c",
        [
            sendbuf, sendcount, sendtype, dest, sendtag, recvbuf, recvcount, recvtype, source,
            recvtag, comm, status
        ],
        |v: Vec<i64>| {
            // SAFETY: the caller's status.
            unsafe { fake_status(status, &v) }
        }
    );
    // SAFETY: the caller's buffers and status.
    check(unsafe {
        pmpi::PMPI_Sendrecv_c(
            sendbuf, sendcount, sendtype, dest, sendtag, recvbuf, recvcount, recvtype, source,
            recvtag, comm, status,
        )
    })
}

/// `MPI_Test`: whether the request completed (a completed non-persistent request becomes
/// `MPI_REQUEST_NULL`, MPI-4.0 §3.7.3). Fake: the answer's words `[flag, source, tag]`;
/// with a nonzero flag the request becomes `MPI_REQUEST_NULL` and the status is written.
///
/// # Safety
/// `status` is `MPI_STATUS_IGNORE` or writable.
pub unsafe fn test_status(request: &mut MPI_Request, status: *mut MPI_Status) -> MpiResult<bool> {
    fake_first!("test", [*request, status], |v: Vec<i64>| {
        let done = word(&v, 0) != 0;
        if done {
            *request = MPI_REQUEST_NULL();
            // SAFETY: the caller's status.
            unsafe { fake_status(status, v.get(1..).unwrap_or(&[])) };
        }
        done
    });
    if unfinished_in_library_progress(*request) {
        return Ok(false);
    }
    let mut flag: c_int = 0;
    // SAFETY: a valid request and flag; the caller's status.
    check(unsafe { pmpi::PMPI_Test(request, &mut flag, status) })?;
    Ok(flag != 0)
}

/// `MPI_Testall`: whether all completed; `statuses` (one per request) or ignored. The
/// requests are updated in place even when an error is returned. Fake: the answer's word 0
/// is the flag; with a nonzero flag every request becomes `MPI_REQUEST_NULL`.
pub fn testall_statuses(
    requests: &mut [MPI_Request],
    statuses: Option<&mut [MPI_Status]>,
) -> MpiResult<bool> {
    let n = requests.len();
    let st = match statuses {
        Some(s) => {
            assert!(s.len() >= n, "testall: fewer statuses than requests");
            s.as_mut_ptr()
        }
        None => MPI_STATUSES_IGNORE,
    };
    fake_first!("testall", [n], |v: Vec<i64>| {
        let done = word(&v, 0) != 0;
        if done {
            requests.fill(MPI_REQUEST_NULL());
        }
        done
    });
    let mut flag: c_int = 0;
    // SAFETY: arrays of n requests and (unless ignored) n statuses; a valid flag.
    check(unsafe { pmpi::PMPI_Testall(n as c_int, requests.as_mut_ptr(), &mut flag, st) })?;
    Ok(flag != 0)
}

/// `MPI_Testany`: `index` and `flag` are written as MPI writes them, also when an error is
/// returned (the index of the failed request). Fake: the answer's words
/// `[flag, index, source, tag]`; with a nonzero flag and a defined index that request
/// becomes `MPI_REQUEST_NULL` and the status is written.
///
/// # Safety
/// `status` is `MPI_STATUS_IGNORE` or writable.
pub unsafe fn testany(
    requests: &mut [MPI_Request],
    index: &mut c_int,
    flag: &mut c_int,
    status: *mut MPI_Status,
) -> MpiResult<()> {
    let n = requests.len();
    fake_first!("testany", [n, status], |v: Vec<i64>| {
        *flag = word(&v, 0) as c_int;
        *index = if v.len() > 1 {
            word(&v, 1) as c_int
        } else {
            MPI_UNDEFINED
        };
        if *flag != 0 && *index >= 0 && (*index as usize) < n {
            requests[*index as usize] = MPI_REQUEST_NULL();
            // SAFETY: the caller's status.
            unsafe { fake_status(status, v.get(2..).unwrap_or(&[])) };
        }
    });
    // SAFETY: an array of n requests; valid out-pointers; the caller's status.
    check(unsafe { pmpi::PMPI_Testany(n as c_int, requests.as_mut_ptr(), index, flag, status) })
}

/// `MPI_Testsome`: `outcount` and `indices` (room for one per request) are written as MPI
/// writes them, also when an error is returned (`MPI_ERR_IN_STATUS`). Fake: the answer's
/// words `[outcount, indices...]`; the requests at those indices become
/// `MPI_REQUEST_NULL`.
pub fn testsome_statuses(
    requests: &mut [MPI_Request],
    outcount: &mut c_int,
    indices: &mut [c_int],
    statuses: Option<&mut [MPI_Status]>,
) -> MpiResult<()> {
    let n = requests.len();
    assert!(indices.len() >= n, "testsome: fewer indices than requests");
    let st = match statuses {
        Some(s) => {
            assert!(s.len() >= n, "testsome: fewer statuses than requests");
            s.as_mut_ptr()
        }
        None => MPI_STATUSES_IGNORE,
    };
    fake_first!("testsome", [n], |v: Vec<i64>| {
        *outcount = word(&v, 0) as c_int;
        for (k, &i) in v.iter().skip(1).enumerate() {
            indices[k] = i as c_int;
            requests[i as usize] = MPI_REQUEST_NULL();
        }
    });
    // SAFETY: arrays of n requests, n indices and (unless ignored) n statuses.
    check(unsafe {
        pmpi::PMPI_Testsome(
            n as c_int,
            requests.as_mut_ptr(),
            outcount,
            indices.as_mut_ptr(),
            st,
        )
    })
}

/// `MPI_Start`.
pub fn start(request: &mut MPI_Request) -> MpiResult<()> {
    fake_first!("start", [*request], |_v: Vec<i64>| ());
    // SAFETY: a valid request pointer; MPI reports a bad handle as an error.
    check(unsafe { pmpi::PMPI_Start(request) })
}

/// `MPI_Startall`.
pub fn startall(requests: &mut [MPI_Request]) -> MpiResult<()> {
    fake_first!("startall", [requests.len()], |_v: Vec<i64>| ());
    // SAFETY: an array of as many requests as we pass.
    check(unsafe { pmpi::PMPI_Startall(requests.len() as c_int, requests.as_mut_ptr()) })
}

/// `MPI_Cancel`.
pub fn cancel(request: &mut MPI_Request) -> MpiResult<()> {
    fake_first!("cancel", [*request], |_v: Vec<i64>| ());
    // SAFETY: a valid request pointer; MPI reports a bad handle as an error.
    check(unsafe { pmpi::PMPI_Cancel(request) })
}

/// `MPI_Request_free`: the request becomes `MPI_REQUEST_NULL`. Fake: likewise on success.
pub fn request_free(request: &mut MPI_Request) -> MpiResult<()> {
    fake_first!("request_free", [*request], |_v: Vec<i64>| {
        *request = MPI_REQUEST_NULL();
    });
    // SAFETY: a valid request pointer; MPI reports a bad handle as an error.
    check(unsafe { pmpi::PMPI_Request_free(request) })
}

/// `MPI_Request_get_status`: whether the request is complete (it is not freed). Fake: the
/// answer's words `[flag, source, tag]`.
pub fn request_get_status(
    request: MPI_Request,
    status: Option<&mut MPI_Status>,
) -> MpiResult<bool> {
    let st = status.map_or(MPI_STATUS_IGNORE, |s| s as *mut MPI_Status);
    fake_first!("request_get_status", [request], |v: Vec<i64>| {
        let done = word(&v, 0) != 0;
        if done {
            // SAFETY: our status or MPI_STATUS_IGNORE.
            unsafe { fake_status(st, v.get(1..).unwrap_or(&[])) };
        }
        done
    });
    let mut flag: c_int = 0;
    // SAFETY: valid out-pointers; MPI reports a bad handle as an error.
    check(unsafe { pmpi::PMPI_Request_get_status(request, &mut flag, st) })?;
    Ok(flag != 0)
}

/// `MPI_Test_cancelled` of a completed status. Fake: word 0 is the flag.
pub fn test_cancelled(status: &MPI_Status) -> MpiResult<bool> {
    fake_first!(
        "test_cancelled",
        [status.MPI_SOURCE, status.MPI_TAG],
        |v: Vec<i64>| { word(&v, 0) != 0 }
    );
    let mut flag: c_int = 0;
    // SAFETY: a status and a valid out-pointer.
    check(unsafe { pmpi::PMPI_Test_cancelled(status, &mut flag) })?;
    Ok(flag != 0)
}

/// `MPI_Get_count_c`: elements of `datatype` a completed status counts. Fake: word 0 is
/// the count.
pub fn get_count_c(status: &MPI_Status, datatype: MPI_Datatype) -> MpiResult<MPI_Count> {
    fake_first!(
        "get_count_c",
        [status.MPI_SOURCE, status.MPI_TAG, datatype],
        |v: Vec<i64>| word(&v, 0) as MPI_Count
    );
    let mut count: MPI_Count = 0;
    // SAFETY: a status and a valid out-pointer.
    check(unsafe { pmpi::PMPI_Get_count_c(status, datatype, &mut count) })?;
    Ok(count)
}

/// `MPI_Iprobe`: whether a matching message is there. Fake: the answer's words
/// `[flag, source, tag]`.
///
/// # Safety
/// `status` is `MPI_STATUS_IGNORE` or writable.
pub unsafe fn iprobe_status(
    source: c_int,
    tag: c_int,
    comm: MPI_Comm,
    status: *mut MPI_Status,
) -> MpiResult<bool> {
    fake_first!("iprobe", [source, tag, comm, status], |v: Vec<i64>| {
        let found = word(&v, 0) != 0;
        if found {
            // SAFETY: the caller's status.
            unsafe { fake_status(status, v.get(1..).unwrap_or(&[])) };
        }
        found
    });
    let mut flag: c_int = 0;
    // SAFETY: a valid flag; the caller's status.
    check(unsafe { pmpi::PMPI_Iprobe(source, tag, comm, &mut flag, status) })?;
    Ok(flag != 0)
}

/// `MPI_Improbe`: whether a matching message was matched (then `*message` is its handle).
/// Fake: the answer's words `[flag, message, source, tag]`.
///
/// # Safety
/// `message` points to a writable message handle; `status` is `MPI_STATUS_IGNORE` or
/// writable.
pub unsafe fn improbe(
    source: c_int,
    tag: c_int,
    comm: MPI_Comm,
    message: *mut MPI_Message,
    status: *mut MPI_Status,
) -> MpiResult<bool> {
    fake_first!("improbe", [source, tag, comm, message, status], |v: Vec<
        i64,
    >| {
        let found = word(&v, 0) != 0;
        if found {
            // SAFETY: the caller's message handle and status.
            unsafe {
                *message = word(&v, 1) as MPI_Message;
                fake_status(status, v.get(2..).unwrap_or(&[]));
            }
        }
        found
    });
    let mut flag: c_int = 0;
    // SAFETY: a valid flag; the caller's message handle and status.
    check(unsafe { pmpi::PMPI_Improbe(source, tag, comm, &mut flag, message, status) })?;
    Ok(flag != 0)
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
    if unfinished_in_library_progress(*req) {
        return Ok(false);
    }
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
    if in_library_progress() && !any_complete(reqs) {
        let null = MPI_REQUEST_NULL();
        let none = reqs.iter().all(|&r| r == null);
        return Ok((if none { MPI_UNDEFINED } else { 0 }, false));
    }
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
    if in_library_progress() {
        return Ok(None);
    }
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

// The library's own progress engine (MPICH 4.3 and later: `MPIX_Async_start`). A poll
// function registered there runs inside the library's progress, holding the library's lock
// on its list of polls: an MPI call that itself runs the progress engine from there
// re-enters that lock (MPICH 5.0.2 under `MPI_THREAD_MULTIPLE` aborts with "Resource
// deadlock avoided"). Posting a send or a receive is safe there; testing is safe only once
// a request is complete (`MPIX_Request_is_complete`, which never progresses; `MPI_Testsome`
// then skips the progress engine because something completed). So while a thread runs
// such a poll, [`test`], [`test_status`] and [`testsome`] ask first and [`iprobe`]
// answers "nothing".

thread_local! {
    static IN_LIBRARY_PROGRESS: core::cell::Cell<bool> = const { core::cell::Cell::new(false) };
}

/// Whether this thread is running a poll function inside the library's progress engine.
#[inline]
pub fn in_library_progress() -> bool {
    IN_LIBRARY_PROGRESS.with(|c| c.get())
}

/// Marks this thread as inside the library's progress engine while it lives.
pub struct LibraryProgress(bool);

impl LibraryProgress {
    pub fn enter() -> LibraryProgress {
        LibraryProgress(IN_LIBRARY_PROGRESS.with(|c| c.replace(true)))
    }
}

impl Drop for LibraryProgress {
    fn drop(&mut self) {
        IN_LIBRARY_PROGRESS.with(|c| c.set(self.0));
    }
}

/// `MPIX_Async_poll_function`: gets the library's opaque `MPIX_Async_thing`.
pub type AsyncPoll = unsafe extern "C" fn(thing: *mut c_void) -> c_int;
/// What a poll function returns: still pending.
pub const MPIX_ASYNC_NOPROGRESS: c_int = 0;
/// What a poll function returns: done, the library forgets it.
pub const MPIX_ASYNC_DONE: c_int = 1;

type AsyncStartFn = unsafe extern "C" fn(AsyncPoll, *mut c_void, c_int) -> c_int;
type IsCompleteFn = unsafe extern "C" fn(MPI_Request) -> c_int;

/// `PMPIX_Async_start` and `PMPIX_Request_is_complete`, both or neither.
fn async_fns() -> Option<(AsyncStartFn, IsCompleteFn)> {
    static FNS: std::sync::OnceLock<Option<(usize, usize)>> = std::sync::OnceLock::new();
    let (s, c) = (*FNS.get_or_init(|| {
        // only the MPICH ABI: there `MPIX_Stream` is an int handle
        if !cfg!(feature = "abi-mpich") {
            return None;
        }
        let s = crate::platform::symbols::optional(c"PMPIX_Async_start");
        let c = crate::platform::symbols::optional(c"PMPIX_Request_is_complete");
        (!s.is_null() && !c.is_null()).then_some((s as usize, c as usize))
    }))?;
    // SAFETY: the library's own functions, with the prototypes of MPICH's mpi.h.
    Some(unsafe {
        (
            core::mem::transmute::<usize, AsyncStartFn>(s),
            core::mem::transmute::<usize, IsCompleteFn>(c),
        )
    })
}

/// Whether the library takes poll functions into its progress engine.
pub fn library_progress_available() -> bool {
    async_fns().is_some()
}

/// `MPIX_Async_start(poll, NULL, MPIX_STREAM_NULL)`.
pub fn async_start(poll: AsyncPoll) -> MpiResult<()> {
    let Some((start, _)) = async_fns() else {
        return Err(super::MpiError(MPI_ERR_OTHER));
    };
    /// MPICH's `MPIX_STREAM_NULL`.
    const MPIX_STREAM_NULL: c_int = 0x3c00_0000;
    // SAFETY: a poll function that lives as long as the library (a static function).
    check(unsafe { start(poll, core::ptr::null_mut(), MPIX_STREAM_NULL) })
}

/// Inside the library's progress, a live request that is not complete: testing it would
/// run the progress engine again (a null request `MPI_Test` answers at once).
fn unfinished_in_library_progress(req: MPI_Request) -> bool {
    in_library_progress() && req != MPI_REQUEST_NULL() && !any_complete(&[req])
}

/// Inside the library's progress: whether any of `reqs` is complete, without progress.
fn any_complete(reqs: &[MPI_Request]) -> bool {
    let Some((_, is_complete)) = async_fns() else {
        return true;
    };
    let null = MPI_REQUEST_NULL();
    // SAFETY: live requests of this process.
    reqs.iter()
        .any(|&r| r != null && unsafe { is_complete(r) } != 0)
}

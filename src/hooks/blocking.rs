//! Layer: hooks. May use: services, core, platform.
//!
//! Blocking point-to-point calls while schedules are outstanding.
//!
//! A rank blocked in `MPI_Recv` must still advance its outstanding collective schedules:
//! the peer it waits for may itself be waiting for one of them (MPI-4.0 §3.7.4). When no
//! schedule is outstanding these hooks call the system MPI directly; otherwise they start
//! the non-blocking form of the same call and poll it, advancing the schedules between
//! tests.
#![allow(non_snake_case, clippy::missing_safety_doc, clippy::too_many_arguments)]

use core::ffi::{c_int, c_void};

use crate::core::dtype::p2p::PackedBuf;
use crate::platform::abi::*;
use crate::platform::mpi::{self, MpiResult};

/// The return code of a call made through the seam (`MPI_SUCCESS` or its error code).
fn code(r: MpiResult<()>) -> c_int {
    r.map_or_else(|e| e.code(), |()| MPI_SUCCESS)
}

/// Completes `req` (a native request on `comm`) while advancing the shim's schedules. A
/// failure is raised on `comm`, as the blocking call would raise it: the system MPI raises
/// a request's errors on the world's handler, which is not the program's (src/errors.rs).
fn poll(req: &mut MPI_Request, status: *mut MPI_Status, comm: MPI_Comm) -> c_int {
    let mut rc = MPI_SUCCESS;
    crate::core::progress::wait_until(|| {
        // SAFETY: a valid request and the caller's status pointer (or MPI_STATUS_IGNORE).
        match unsafe { mpi::p2p::test(req, status) } {
            Ok(done) => done,
            Err(e) => {
                rc = e.code();
                true
            }
        }
    });
    raise_on(comm, rc)
}

/// Raises a failed completion on the communicator of the call.
fn raise_on(comm: MPI_Comm, rc: c_int) -> c_int {
    if rc == MPI_SUCCESS {
        return rc;
    }
    crate::platform::errors::raise(comm, rc, "point-to-point", "the message failed")
}

/// The blocking call `native`, or, with schedules outstanding, its non-blocking form
/// (`start`) completed by polling. An error of `start` is returned unchanged.
fn via(
    native: &dyn Fn() -> c_int,
    status: *mut MPI_Status,
    comm: MPI_Comm,
    start: impl FnOnce() -> MpiResult<MPI_Request>,
) -> c_int {
    if !crate::core::progress::any_active() {
        return native();
    }
    match start() {
        Ok(mut req) => poll(&mut req, status, comm),
        Err(e) => e.code(),
    }
}

/// A Sendrecv of the given sides, blocking (`native`, or `MPI_Sendrecv_c`) or, with
/// schedules outstanding, as a receive and a send (what Sendrecv is, MPI-4.0 §3.10)
/// polled together. Not by the system MPI's `MPI_Isendrecv`: Debian's MPICH 4.0.2
/// completes it with a wrong status (count 0, a stale tag; found by ctests/pack_types),
/// and Open MPI 4.x has none.
///
/// # Safety
/// Valid send and receive sides (buffers alive until this returns).
unsafe fn sendrecv_via(
    native: Option<&dyn Fn() -> c_int>,
    (send_buf, send_count, send_type, dest, send_tag): (
        *const c_void,
        MPI_Count,
        MPI_Datatype,
        c_int,
        c_int,
    ),
    (recv_buf, recv_count, recv_type, source, recv_tag): (
        *mut c_void,
        MPI_Count,
        MPI_Datatype,
        c_int,
        c_int,
    ),
    comm: MPI_Comm,
    status: *mut MPI_Status,
) -> c_int {
    if !crate::core::progress::any_active() {
        return match native {
            Some(f) => f(),
            // SAFETY: the caller's sides.
            None => code(unsafe {
                mpi::p2p::sendrecv_c(
                    send_buf, send_count, send_type, dest, send_tag, recv_buf, recv_count,
                    recv_type, source, recv_tag, comm, status,
                )
            }),
        };
    }
    let mut reqs = [MPI_REQUEST_NULL(); 2];
    // SAFETY: the caller's sides; the receive is posted first, as Sendrecv may need.
    match unsafe { mpi::p2p::irecv_c(recv_buf, recv_count, recv_type, source, recv_tag, comm) } {
        Ok(r) => reqs[0] = r,
        Err(e) => return e.code(),
    }
    // SAFETY: as above.
    match unsafe { mpi::p2p::isend_c(send_buf, send_count, send_type, dest, send_tag, comm) } {
        Ok(r) => reqs[1] = r,
        Err(e) => return e.code(),
    }
    let mut rc = MPI_SUCCESS;
    crate::core::progress::wait_until(|| {
        for (i, req) in reqs.iter_mut().enumerate() {
            if *req != MPI_REQUEST_NULL() {
                let st = if i == 0 { status } else { IGNORE };
                // SAFETY: our request; the status (the receive's) or none.
                if let Err(e) = unsafe { mpi::p2p::test(req, st) } {
                    rc = e.code();
                    return true;
                }
            }
        }
        reqs.iter().all(|r| *r == MPI_REQUEST_NULL())
    });
    raise_on(comm, rc)
}

/// A Sendrecv_replace the shim does not pack: the system MPI's, or with schedules
/// outstanding a packed copy of the send side sent beside a receive into the buffer
/// (not `MPI_Isendrecv_replace`, for the reason given at `sendrecv_via`).
///
/// # Safety
/// The application's arguments.
unsafe fn sendrecv_replace(
    native: &dyn Fn() -> c_int,
    (buf, count, datatype): (*mut c_void, MPI_Count, MPI_Datatype),
    (dest, send_tag, source, recv_tag): (c_int, c_int, c_int, c_int),
    comm: MPI_Comm,
    status: *mut MPI_Status,
) -> c_int {
    if !crate::core::progress::any_active() {
        return native();
    }
    // SAFETY: the application's buffer.
    let copy = match unsafe { crate::core::dtype::p2p::copy_packed(buf, count, datatype, comm) } {
        Ok(v) => v,
        Err(rc) => return rc,
    };
    let send = (
        copy.as_ptr().cast::<c_void>(),
        copy.len() as MPI_Count,
        MPI_PACKED(),
        dest,
        send_tag,
    );
    let recv = (buf, count, datatype, source, recv_tag);
    // SAFETY: our copy and the application's buffer, alive until this returns.
    unsafe { sendrecv_via(None, send, recv, comm, status) }
}

/// Like `via` for the probes, which have no request: polls the non-blocking probe. An
/// error is returned unchanged.
fn probe(native: &dyn Fn() -> c_int, mut iprobe: impl FnMut() -> MpiResult<bool>) -> c_int {
    if !crate::core::progress::any_active() {
        return native();
    }
    let mut rc = MPI_SUCCESS;
    crate::core::progress::wait_until(|| match iprobe() {
        Ok(found) => found,
        Err(e) => {
            rc = e.code();
            true
        }
    });
    rc
}

/// A blocking send of large counts (`mpi::p2p::send_c`, ...).
type BlockingSend =
    unsafe fn(*const c_void, MPI_Count, MPI_Datatype, c_int, c_int, MPI_Comm) -> MpiResult<()>;
/// A non-blocking send of large counts (`mpi::p2p::isend_c`, ...).
type StartSend = unsafe fn(
    *const c_void,
    MPI_Count,
    MPI_Datatype,
    c_int,
    c_int,
    MPI_Comm,
) -> MpiResult<MPI_Request>;

/// Sends the packed bytes of a non-contiguous message (see `crate::hooks::p2p`): the
/// blocking call `blocking`, or its non-blocking form while schedules are outstanding.
fn send_packed(
    packed: &[u8],
    blocking: BlockingSend,
    start: StartSend,
    dest: c_int,
    tag: c_int,
    comm: MPI_Comm,
) -> c_int {
    let (buf, count) = (packed.as_ptr().cast::<c_void>(), packed.len() as MPI_Count);
    // SAFETY: our packed buffer, alive until the send completes (both forms complete here).
    via(
        &|| code(unsafe { blocking(buf, count, MPI_PACKED(), dest, tag, comm) }),
        IGNORE,
        comm,
        || unsafe { start(buf, count, MPI_PACKED(), dest, tag, comm) },
    )
}

/// Receives into a packed buffer and unpacks what arrived into `user`.
///
/// # Safety
/// `user` is the application's receive buffer for the counted elements.
unsafe fn recv_packed(
    incoming: PackedBuf,
    user: *mut c_void,
    source: c_int,
    tag: c_int,
    comm: MPI_Comm,
    status: *mut MPI_Status,
) -> c_int {
    // SAFETY (both): our buffer (buf, count) and a status we can read back.
    let blocking = |buf, count, st| unsafe {
        mpi::p2p::recv_c(buf, count, MPI_PACKED(), source, tag, comm, st)
    };
    let start =
        |buf, count| unsafe { mpi::p2p::irecv_c(buf, count, MPI_PACKED(), source, tag, comm) };
    // SAFETY: the caller's buffer; the calls receive into the buffer they are given.
    unsafe { packed_receive(incoming, user, status, comm, blocking, start) }
}

/// A receive of packed bytes by `blocking(buf, bytes, status)` or, with schedules
/// outstanding, `start(buf, bytes)` (the request) plus polling; then what arrived is
/// unpacked into `user` and the status (the caller's, or a local one for
/// `MPI_STATUS_IGNORE`) kept.
///
/// # Safety
/// `user` is the application's receive buffer for the counted elements; the two calls
/// receive into the buffer they are given.
unsafe fn packed_receive(
    mut incoming: PackedBuf,
    user: *mut c_void,
    status: *mut MPI_Status,
    comm: MPI_Comm,
    blocking: impl Fn(*mut c_void, MPI_Count, *mut MPI_Status) -> MpiResult<()>,
    start: impl Fn(*mut c_void, MPI_Count) -> MpiResult<MPI_Request>,
) -> c_int {
    let mut local = MPI_Status::default();
    let status_ptr = if status == IGNORE || status.is_null() {
        &mut local as *mut MPI_Status
    } else {
        status
    };
    let (buf, count) = (incoming.ptr(), incoming.len());
    let rc = via(
        &|| code(blocking(buf, count, status_ptr)),
        status_ptr,
        comm,
        || start(buf, count),
    );
    if rc == MPI_SUCCESS {
        // SAFETY: the completed status; the caller's buffer.
        unsafe { incoming.finish(user, status_ptr) };
    }
    rc
}

/// Sendrecv with either side packed by the shim (see `crate::hooks::p2p`).
///
/// # Safety
/// The application's Sendrecv arguments.
unsafe fn sendrecv_packed(
    (send_buf, send_count, send_type, dest, send_tag): (
        *const c_void,
        MPI_Count,
        MPI_Datatype,
        c_int,
        c_int,
    ),
    (recv_buf, recv_count, recv_type, source, recv_tag): (
        *mut c_void,
        MPI_Count,
        MPI_Datatype,
        c_int,
        c_int,
    ),
    comm: MPI_Comm,
    status: *mut MPI_Status,
) -> Option<c_int> {
    // SAFETY: the application's send buffer.
    let outgoing =
        unsafe { crate::core::dtype::p2p::outgoing(send_buf, send_count, send_type, dest) };
    let mut incoming = crate::core::dtype::p2p::incoming(recv_count, recv_type, source);
    if outgoing.is_none() && incoming.is_none() {
        return None;
    }
    let send = match &outgoing {
        Some(p) => (
            p.as_ptr().cast::<c_void>(),
            p.len() as MPI_Count,
            MPI_PACKED(),
        ),
        None => (send_buf, send_count, send_type),
    };
    let recv = match &mut incoming {
        Some(i) => (i.ptr(), i.len(), MPI_PACKED()),
        None => (recv_buf, recv_count, recv_type),
    };
    let mut local = MPI_Status::default();
    let status_ptr = if status == IGNORE || status.is_null() {
        &mut local as *mut MPI_Status
    } else {
        status
    };
    // SAFETY: the application's or our packed buffers, alive until completion here.
    let rc = unsafe {
        sendrecv_via(
            None,
            (send.0, send.1, send.2, dest, send_tag),
            (recv.0, recv.1, recv.2, source, recv_tag),
            comm,
            status_ptr,
        )
    };
    if rc == MPI_SUCCESS {
        if let Some(i) = &incoming {
            // SAFETY: the completed status; the application's receive buffer.
            unsafe { i.finish(recv_buf, status_ptr) };
        }
    }
    Some(rc)
}

/// Sendrecv_replace: packed by the shim when the datatype qualifies (the send side is
/// packed before the receive lands), else `sendrecv_replace`.
///
/// # Safety
/// The application's arguments.
unsafe fn replace(
    native: &dyn Fn() -> c_int,
    (buf, count, datatype): (*mut c_void, MPI_Count, MPI_Datatype),
    (dest, send_tag, source, recv_tag): (c_int, c_int, c_int, c_int),
    comm: MPI_Comm,
    status: *mut MPI_Status,
) -> c_int {
    let send = (buf as *const c_void, count, datatype, dest, send_tag);
    let recv = (buf, count, datatype, source, recv_tag);
    // SAFETY: the application's arguments, the same buffer on both sides.
    if let Some(rc) = unsafe { sendrecv_packed(send, recv, comm, status) } {
        return rc;
    }
    let tags = (dest, send_tag, source, recv_tag);
    // SAFETY: the application's arguments.
    unsafe { sendrecv_replace(native, (buf, count, datatype), tags, comm, status) }
}

/// A matched receive (`MPI_Mrecv`) packed by the shim, or `None` to receive as asked.
///
/// # Safety
/// The application's arguments.
unsafe fn mrecv_packed(
    buf: *mut c_void,
    count: MPI_Count,
    datatype: MPI_Datatype,
    message: *mut MPI_Message,
    status: *mut MPI_Status,
) -> Option<c_int> {
    // SAFETY: the application's message handle.
    let peer = unsafe { crate::core::dtype::p2p::message_peer(message) };
    let incoming = crate::core::dtype::p2p::incoming(count, datatype, peer)?;
    // SAFETY (both): our buffer, the application's message, a status we can read back.
    let blocking =
        |packed, bytes, st| unsafe { mpi::p2p::mrecv_c(packed, bytes, MPI_PACKED(), message, st) };
    let start = |packed, bytes| unsafe { mpi::p2p::imrecv_c(packed, bytes, MPI_PACKED(), message) };
    // SAFETY: the application's buffer; the calls receive into the buffer they are given.
    Some(unsafe { packed_receive(incoming, buf, status, MPI_COMM_NULL(), blocking, start) })
}

const IGNORE: *mut MPI_Status = MPI_STATUS_IGNORE;

// Hooks (see `src/platform/abi/mpi_functions.txt`), with the MPI standard's parameter
// names. Safety: the arguments are the application's, passed unchanged to the
// non-blocking form of the same call.

/// A blocking send: packed by the shim when the datatype qualifies (`$blk`/`$nb` send
/// the packed bytes), else the system MPI's call, or with schedules outstanding its
/// non-blocking form (`$nbn`) plus polling. For buffered sends the packed bytes fit the
/// attached buffer: they are no more than `MPI_Pack_size` of the application's message.
macro_rules! send_hook {
    ($name:ident, $n:ty, $blk:path, $nb:path, $nbn:path) => {
        pub unsafe fn $name(
            buf: *const c_void,
            count: $n,
            datatype: MPI_Datatype,
            dest: c_int,
            tag: c_int,
            comm: MPI_Comm,
            native: &dyn Fn() -> c_int,
        ) -> c_int {
            // SAFETY: the application's buffer for count elements of datatype.
            let packed =
                unsafe { crate::core::dtype::p2p::outgoing(buf, count as i64, datatype, dest) };
            if let Some(p) = packed {
                return send_packed(&p, $blk, $nb, dest, tag, comm);
            }
            // SAFETY: the application's arguments, unchanged.
            via(native, IGNORE, comm, || unsafe {
                $nbn(buf, count, datatype, dest, tag, comm)
            })
        }
    };
}
send_hook!(
    MPI_Send,
    c_int,
    mpi::p2p::send_c,
    mpi::p2p::isend_c,
    mpi::p2p::isend
);
send_hook!(
    MPI_Send_c,
    MPI_Count,
    mpi::p2p::send_c,
    mpi::p2p::isend_c,
    mpi::p2p::isend_c
);
send_hook!(
    MPI_Ssend,
    c_int,
    mpi::p2p::ssend_c,
    mpi::p2p::issend_c,
    mpi::p2p::issend
);
send_hook!(
    MPI_Ssend_c,
    MPI_Count,
    mpi::p2p::ssend_c,
    mpi::p2p::issend_c,
    mpi::p2p::issend_c
);
send_hook!(
    MPI_Rsend,
    c_int,
    mpi::p2p::rsend_c,
    mpi::p2p::irsend_c,
    mpi::p2p::irsend
);
send_hook!(
    MPI_Rsend_c,
    MPI_Count,
    mpi::p2p::rsend_c,
    mpi::p2p::irsend_c,
    mpi::p2p::irsend_c
);
send_hook!(
    MPI_Bsend,
    c_int,
    mpi::p2p::bsend_c,
    mpi::p2p::ibsend_c,
    mpi::p2p::ibsend
);
send_hook!(
    MPI_Bsend_c,
    MPI_Count,
    mpi::p2p::bsend_c,
    mpi::p2p::ibsend_c,
    mpi::p2p::ibsend_c
);
pub unsafe fn MPI_Recv(
    buf: *mut c_void,
    count: c_int,
    datatype: MPI_Datatype,
    source: c_int,
    tag: c_int,
    comm: MPI_Comm,
    status: *mut MPI_Status,
    native: &dyn Fn() -> c_int,
) -> c_int {
    if let Some(incoming) = crate::core::dtype::p2p::incoming(count as i64, datatype, source) {
        // SAFETY: the application's receive buffer.
        return unsafe { recv_packed(incoming, buf, source, tag, comm, status) };
    }
    via(native, status, comm, || unsafe {
        mpi::p2p::irecv(buf, count, datatype, source, tag, comm)
    })
}
pub unsafe fn MPI_Recv_c(
    buf: *mut c_void,
    count: MPI_Count,
    datatype: MPI_Datatype,
    source: c_int,
    tag: c_int,
    comm: MPI_Comm,
    status: *mut MPI_Status,
    native: &dyn Fn() -> c_int,
) -> c_int {
    if let Some(incoming) = crate::core::dtype::p2p::incoming(count, datatype, source) {
        // SAFETY: the application's receive buffer.
        return unsafe { recv_packed(incoming, buf, source, tag, comm, status) };
    }
    via(native, status, comm, || unsafe {
        mpi::p2p::irecv_c(buf, count, datatype, source, tag, comm)
    })
}
pub unsafe fn MPI_Sendrecv(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: MPI_Datatype,
    dest: c_int,
    sendtag: c_int,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: MPI_Datatype,
    source: c_int,
    recvtag: c_int,
    comm: MPI_Comm,
    status: *mut MPI_Status,
    native: &dyn Fn() -> c_int,
) -> c_int {
    let send = (sendbuf, sendcount as MPI_Count, sendtype, dest, sendtag);
    let recv = (recvbuf, recvcount as MPI_Count, recvtype, source, recvtag);
    // SAFETY: the application's arguments.
    if let Some(rc) = unsafe { sendrecv_packed(send, recv, comm, status) } {
        return rc;
    }
    // SAFETY: the application's arguments.
    unsafe { sendrecv_via(Some(native), send, recv, comm, status) }
}
pub unsafe fn MPI_Sendrecv_c(
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
    native: &dyn Fn() -> c_int,
) -> c_int {
    let send = (sendbuf, sendcount, sendtype, dest, sendtag);
    let recv = (recvbuf, recvcount, recvtype, source, recvtag);
    // SAFETY: the application's arguments.
    if let Some(rc) = unsafe { sendrecv_packed(send, recv, comm, status) } {
        return rc;
    }
    // SAFETY: the application's arguments.
    unsafe { sendrecv_via(Some(native), send, recv, comm, status) }
}
pub unsafe fn MPI_Sendrecv_replace(
    buf: *mut c_void,
    count: c_int,
    datatype: MPI_Datatype,
    dest: c_int,
    sendtag: c_int,
    source: c_int,
    recvtag: c_int,
    comm: MPI_Comm,
    status: *mut MPI_Status,
    native: &dyn Fn() -> c_int,
) -> c_int {
    let tags = (dest, sendtag, source, recvtag);
    // SAFETY: the application's arguments.
    unsafe {
        replace(
            native,
            (buf, count as MPI_Count, datatype),
            tags,
            comm,
            status,
        )
    }
}
pub unsafe fn MPI_Sendrecv_replace_c(
    buf: *mut c_void,
    count: MPI_Count,
    datatype: MPI_Datatype,
    dest: c_int,
    sendtag: c_int,
    source: c_int,
    recvtag: c_int,
    comm: MPI_Comm,
    status: *mut MPI_Status,
    native: &dyn Fn() -> c_int,
) -> c_int {
    let tags = (dest, sendtag, source, recvtag);
    // SAFETY: the application's arguments.
    unsafe { replace(native, (buf, count, datatype), tags, comm, status) }
}
pub unsafe fn MPI_Mrecv(
    buf: *mut c_void,
    count: c_int,
    datatype: MPI_Datatype,
    message: *mut MPI_Message,
    status: *mut MPI_Status,
    native: &dyn Fn() -> c_int,
) -> c_int {
    // SAFETY: the application's arguments.
    if let Some(rc) = unsafe { mrecv_packed(buf, count as MPI_Count, datatype, message, status) } {
        return rc;
    }
    // a matched receive has no communicator argument: its errors belong to no object
    via(native, status, MPI_COMM_NULL(), || unsafe {
        mpi::p2p::imrecv(buf, count, datatype, message)
    })
}
pub unsafe fn MPI_Mrecv_c(
    buf: *mut c_void,
    count: MPI_Count,
    datatype: MPI_Datatype,
    message: *mut MPI_Message,
    status: *mut MPI_Status,
    native: &dyn Fn() -> c_int,
) -> c_int {
    // SAFETY: the application's arguments.
    if let Some(rc) = unsafe { mrecv_packed(buf, count, datatype, message, status) } {
        return rc;
    }
    via(native, status, MPI_COMM_NULL(), || unsafe {
        mpi::p2p::imrecv_c(buf, count, datatype, message)
    })
}
pub unsafe fn MPI_Probe(
    source: c_int,
    tag: c_int,
    comm: MPI_Comm,
    status: *mut MPI_Status,
    native: &dyn Fn() -> c_int,
) -> c_int {
    probe(native, || unsafe {
        mpi::p2p::iprobe(source, tag, comm, status)
    })
}
pub unsafe fn MPI_Mprobe(
    source: c_int,
    tag: c_int,
    comm: MPI_Comm,
    message: *mut MPI_Message,
    status: *mut MPI_Status,
    native: &dyn Fn() -> c_int,
) -> c_int {
    probe(native, || unsafe {
        mpi::p2p::improbe(source, tag, comm, message, status)
    })
}

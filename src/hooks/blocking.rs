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

/// A blocking collective the system MPI carries out (`blocking`, on `comm`): the rank's
/// outstanding schedules on `comm` complete first, polled. A peer may wait for one of them
/// (which may not even have started: a schedule starts once its communicator's private
/// duplicate exists, which only the shim's progress finds) before it makes this
/// collective, and inside the library's call this rank would not advance it (MPI-4.0
/// §6.12: a non-blocking collective completes while its peers are in other MPI calls;
/// Intel MPI's Allreduce waited there for the peers at 3 ranks). Every peer makes the
/// earlier collectives on `comm` before this one, and advances them in its own MPI calls,
/// so the wait ends wherever this collective may synchronize (a correct program cannot
/// rely on it not to). The library's non-blocking form, polled, would not do: it does not
/// match the blocking form the other ranks make (MPI-4.0 §6.12). Schedules on other
/// communicators still wait inside the library's call (without the progress thread).
#[inline]
pub fn collective(comm: MPI_Comm, blocking: impl FnOnce() -> c_int) -> c_int {
    if crate::core::progress::any_active() {
        crate::core::progress::wait_until(|| !crate::core::progress::pending_on(comm));
    }
    blocking()
}

/// Completes `req` (a native request on `comm`) while advancing the shim's schedules. A
/// failure is raised on `comm`, as the blocking call would raise it: the system MPI raises
/// a request's errors on the world's handler, which is not the program's (src/errors.rs).
fn poll(req: &mut MPI_Request, status: *mut MPI_Status, comm: MPI_Comm) -> c_int {
    let mut rc = MPI_SUCCESS;
    crate::core::progress::wait_until(|| {
        // SAFETY: a valid request and the caller's status pointer (or MPI_STATUS_IGNORE).
        match unsafe { mpi::p2p::test_status(req, status) } {
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
                if let Err(e) = unsafe { mpi::p2p::test_status(req, st) } {
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
        mpi::p2p::iprobe_status(source, tag, comm, status)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::progress::pretend_active;
    use crate::platform::mpi::fake;
    use std::cell::Cell;

    /// A hook's `native`: counts its calls and returns `code`.
    struct Native {
        calls: Cell<usize>,
        code: c_int,
    }

    impl Native {
        fn returning(code: c_int) -> Native {
            Native {
                calls: Cell::new(0),
                code,
            }
        }
        fn call(&self) -> c_int {
            self.calls.set(self.calls.get() + 1);
            self.code
        }
    }

    /// An application's buffers, status and message handle for the hooks.
    struct App {
        send: [i32; 4],
        recv: [i32; 4],
        status: MPI_Status,
        message: MPI_Message,
    }

    impl App {
        fn new() -> App {
            App {
                send: [1, 2, 3, 4],
                recv: [0; 4],
                status: MPI_Status::default(),
                message: 0x77 as MPI_Message,
            }
        }
        fn send_buf(&self) -> *const c_void {
            self.send.as_ptr().cast()
        }
        fn recv_buf(&mut self) -> *mut c_void {
            self.recv.as_mut_ptr().cast()
        }
    }

    type Hook = fn(&mut App, &dyn Fn() -> c_int) -> c_int;

    const COMM: fn() -> MPI_Comm = MPI_COMM_WORLD;

    /// Every blocking hook, called as a program would (4 ints, peer 1, tag 5), with the
    /// non-blocking call it is made of while schedules are outstanding (and the buffer
    /// that call must get: the application's send buffer, else its receive buffer).
    fn hooks() -> Vec<(&'static str, Hook, &'static str, bool)> {
        // SAFETY (all): the App's buffers of 4 ints, its status and message handle.
        vec![
            (
                "MPI_Send",
                |a, n| unsafe { MPI_Send(a.send_buf(), 4, MPI_INT(), 1, 5, COMM(), n) },
                "isend",
                true,
            ),
            (
                "MPI_Send_c",
                |a, n| unsafe { MPI_Send_c(a.send_buf(), 4, MPI_INT(), 1, 5, COMM(), n) },
                "isend_c",
                true,
            ),
            (
                "MPI_Ssend",
                |a, n| unsafe { MPI_Ssend(a.send_buf(), 4, MPI_INT(), 1, 5, COMM(), n) },
                "issend",
                true,
            ),
            (
                "MPI_Ssend_c",
                |a, n| unsafe { MPI_Ssend_c(a.send_buf(), 4, MPI_INT(), 1, 5, COMM(), n) },
                "issend_c",
                true,
            ),
            (
                "MPI_Rsend",
                |a, n| unsafe { MPI_Rsend(a.send_buf(), 4, MPI_INT(), 1, 5, COMM(), n) },
                "irsend",
                true,
            ),
            (
                "MPI_Rsend_c",
                |a, n| unsafe { MPI_Rsend_c(a.send_buf(), 4, MPI_INT(), 1, 5, COMM(), n) },
                "irsend_c",
                true,
            ),
            (
                "MPI_Bsend",
                |a, n| unsafe { MPI_Bsend(a.send_buf(), 4, MPI_INT(), 1, 5, COMM(), n) },
                "ibsend",
                true,
            ),
            (
                "MPI_Bsend_c",
                |a, n| unsafe { MPI_Bsend_c(a.send_buf(), 4, MPI_INT(), 1, 5, COMM(), n) },
                "ibsend_c",
                true,
            ),
            (
                "MPI_Recv",
                |a, n| unsafe {
                    MPI_Recv(a.recv_buf(), 4, MPI_INT(), 1, 5, COMM(), &mut a.status, n)
                },
                "irecv",
                false,
            ),
            (
                "MPI_Recv_c",
                |a, n| unsafe {
                    MPI_Recv_c(a.recv_buf(), 4, MPI_INT(), 1, 5, COMM(), &mut a.status, n)
                },
                "irecv_c",
                false,
            ),
            (
                "MPI_Mrecv",
                |a, n| unsafe {
                    MPI_Mrecv(a.recv_buf(), 4, MPI_INT(), &mut a.message, &mut a.status, n)
                },
                "imrecv",
                false,
            ),
            (
                "MPI_Mrecv_c",
                |a, n| unsafe {
                    MPI_Mrecv_c(a.recv_buf(), 4, MPI_INT(), &mut a.message, &mut a.status, n)
                },
                "imrecv_c",
                false,
            ),
        ]
    }

    #[test]
    fn without_schedules_every_blocking_call_is_the_system_mpis() {
        let _g = fake::install(|_| Err(MPI_ERR_OTHER));
        let mut all = hooks();
        // SAFETY (all): the App's buffers, status and message handle.
        let others: Vec<(&'static str, Hook)> = vec![
            ("MPI_Sendrecv", |a, n| unsafe {
                let r = a.recv_buf();
                MPI_Sendrecv(
                    a.send_buf(),
                    4,
                    MPI_INT(),
                    1,
                    5,
                    r,
                    4,
                    MPI_INT(),
                    1,
                    5,
                    COMM(),
                    &mut a.status,
                    n,
                )
            }),
            ("MPI_Sendrecv_replace", |a, n| unsafe {
                MPI_Sendrecv_replace(
                    a.recv_buf(),
                    4,
                    MPI_INT(),
                    1,
                    5,
                    1,
                    5,
                    COMM(),
                    &mut a.status,
                    n,
                )
            }),
            ("MPI_Probe", |a, n| unsafe {
                MPI_Probe(1, 5, COMM(), &mut a.status, n)
            }),
            ("MPI_Mprobe", |a, n| unsafe {
                MPI_Mprobe(1, 5, COMM(), &mut a.message, &mut a.status, n)
            }),
        ];
        all.extend(
            others
                .into_iter()
                .map(|(name, hook)| (name, hook, "", false)),
        );
        for (name, hook, _, _) in all {
            // any code the system MPI returns (an error too) comes back as it is
            for code in [MPI_SUCCESS, MPI_ERR_TAG] {
                let native = Native::returning(code);
                assert_eq!(hook(&mut App::new(), &|| native.call()), code, "{name}");
                assert_eq!(native.calls.get(), 1, "{name}");
            }
        }
        assert!(fake::calls().is_empty(), "{:?}", fake::names());
    }

    #[test]
    fn with_schedules_the_call_is_posted_and_completed_while_progressing() {
        let _active = pretend_active();
        for (name, hook, post, send) in hooks() {
            let mut polls = 0;
            let _g = fake::install(move |c| match c.name {
                "test" => {
                    polls += 1;
                    Ok(if polls < 3 { vec![0] } else { vec![1, 1, 5] })
                }
                n if n == post => Ok(vec![0x4242]),
                _ => Err(MPI_ERR_OTHER),
            });
            let mut app = App::new();
            let native = Native::returning(MPI_ERR_OTHER);
            assert_eq!(hook(&mut app, &|| native.call()), MPI_SUCCESS, "{name}");
            assert_eq!(native.calls.get(), 0, "{name}: not the blocking call");
            assert_eq!(fake::names(), [post, "test", "test", "test"], "{name}");
            let calls = fake::calls();
            let buf = if send {
                app.send.as_ptr() as i64
            } else {
                app.recv.as_ptr() as i64
            };
            let args = &calls[0].args;
            // the application's buffer, count and datatype, unchanged
            assert_eq!(args[..3], [buf, 4, MPI_INT() as i64], "{name}");
            if post.starts_with("imrecv") {
                assert_eq!(args[3], &app.message as *const MPI_Message as i64);
            } else {
                assert_eq!(args[3..], [1, 5, COMM() as i64], "{name}: peer, tag, comm");
            }
            // the request it made is the one polled
            assert!(calls[1..].iter().all(|c| c.args[0] == 0x4242), "{name}");
            if !send {
                // the receive's status is the application's
                let st = &app.status as *const MPI_Status as i64;
                assert_eq!(calls[1].args[1], st, "{name}");
                assert_eq!(
                    (app.status.MPI_SOURCE, app.status.MPI_TAG),
                    (1, 5),
                    "{name}"
                );
            }
        }
    }

    #[test]
    fn with_schedules_a_call_that_cannot_start_returns_mpis_code() {
        let _active = pretend_active();
        for (name, hook, post, _) in hooks() {
            let _g = fake::install(move |c| {
                if c.name == post {
                    Err(MPI_ERR_RANK)
                } else {
                    Ok(vec![1])
                }
            });
            let native = Native::returning(MPI_SUCCESS);
            assert_eq!(
                hook(&mut App::new(), &|| native.call()),
                MPI_ERR_RANK,
                "{name}"
            );
            assert_eq!(fake::names(), [post], "{name}: nothing to poll");
            assert_eq!(native.calls.get(), 0);
        }
    }

    /// The answers for a Sendrecv posted as a receive (0x10) and a send (0x20), the send
    /// completing on its second test.
    fn sendrecv_script() -> impl FnMut(&fake::Call) -> Result<Vec<i64>, c_int> {
        let mut send_tests = 0;
        move |c| match c.name {
            "pack_size_c" | "pack_c" => Ok(vec![16]),
            "irecv_c" => Ok(vec![0x10]),
            "isend_c" => Ok(vec![0x20]),
            "test" if c.args[0] == 0x10 => Ok(vec![1, 2, 6]),
            "test" => {
                send_tests += 1;
                Ok(vec![(send_tests > 1) as i64])
            }
            _ => Err(MPI_ERR_OTHER),
        }
    }

    #[test]
    fn with_schedules_sendrecv_posts_the_receive_first_and_completes_both() {
        let _active = pretend_active();
        let _g = fake::install(sendrecv_script());
        let mut app = App::new();
        let native = Native::returning(MPI_ERR_OTHER);
        let r = app.recv_buf();
        // SAFETY: the App's buffers of 4 ints and its status.
        let rc = unsafe {
            MPI_Sendrecv(
                app.send_buf(),
                4,
                MPI_INT(),
                3,
                7,
                r,
                4,
                MPI_INT(),
                2,
                6,
                COMM(),
                &mut app.status,
                &|| native.call(),
            )
        };
        assert_eq!(rc, MPI_SUCCESS);
        assert_eq!(native.calls.get(), 0);
        let calls = fake::calls();
        assert_eq!(fake::names()[..2], ["irecv_c", "isend_c"]);
        let comm = COMM() as i64;
        let int = MPI_INT() as i64;
        assert_eq!(calls[0].args, [r as i64, 4, int, 2, 6, comm]);
        assert_eq!(
            calls[1].args,
            [app.send.as_ptr() as i64, 4, int, 3, 7, comm]
        );
        let tests: Vec<(i64, i64)> = calls[2..].iter().map(|c| (c.args[0], c.args[1])).collect();
        let (st, ignored) = (
            &app.status as *const MPI_Status as i64,
            MPI_STATUS_IGNORE as i64,
        );
        // each request tested until it is null; only the receive writes the status
        assert_eq!(tests, [(0x10, st), (0x20, ignored), (0x20, ignored)]);
        assert_eq!((app.status.MPI_SOURCE, app.status.MPI_TAG), (2, 6));
    }

    #[test]
    fn with_schedules_sendrecv_errors_come_back_unchanged() {
        let _active = pretend_active();
        for (failing, code) in [("irecv_c", MPI_ERR_TAG), ("isend_c", MPI_ERR_RANK)] {
            let mut script = sendrecv_script();
            let _g = fake::install(move |c| {
                if c.name == failing {
                    Err(code)
                } else {
                    script(c)
                }
            });
            let mut app = App::new();
            let native = Native::returning(MPI_SUCCESS);
            let r = app.recv_buf();
            // SAFETY: the App's buffers of 4 ints and its status.
            let rc = unsafe {
                MPI_Sendrecv(
                    app.send_buf(),
                    4,
                    MPI_INT(),
                    3,
                    7,
                    r,
                    4,
                    MPI_INT(),
                    2,
                    6,
                    COMM(),
                    &mut app.status,
                    &|| native.call(),
                )
            };
            assert_eq!(rc, code);
            assert_eq!(fake::names().last(), Some(&failing), "nothing polled");
        }
    }

    #[test]
    fn with_schedules_sendrecv_replace_sends_a_packed_copy_of_the_buffer() {
        let _active = pretend_active();
        let _g = fake::install(sendrecv_script());
        let mut app = App::new();
        let native = Native::returning(MPI_ERR_OTHER);
        let b = app.recv_buf();
        // SAFETY: the App's buffer of 4 ints and its status.
        let rc = unsafe {
            MPI_Sendrecv_replace(
                b,
                4,
                MPI_INT(),
                3,
                7,
                2,
                6,
                COMM(),
                &mut app.status,
                &|| native.call(),
            )
        };
        assert_eq!(rc, MPI_SUCCESS);
        assert_eq!(
            fake::names()[..4],
            ["pack_size_c", "pack_c", "irecv_c", "isend_c"]
        );
        let calls = fake::calls();
        let comm = COMM() as i64;
        // the receive lands in the buffer; the send takes the copy packed before it
        assert_eq!(calls[2].args, [b as i64, 4, MPI_INT() as i64, 2, 6, comm]);
        assert_ne!(calls[3].args[0], b as i64);
        assert_eq!(calls[3].args[1..], [16, MPI_PACKED() as i64, 3, 7, comm]);
        // a copy that cannot be made: its code, and nothing posted
        let _g = fake::install(|c| match c.name {
            "pack_size_c" => Err(MPI_ERR_TYPE),
            _ => Ok(vec![1]),
        });
        // SAFETY: as above.
        let rc = unsafe {
            MPI_Sendrecv_replace(
                b,
                4,
                MPI_INT(),
                3,
                7,
                2,
                6,
                COMM(),
                &mut app.status,
                &|| native.call(),
            )
        };
        assert_eq!(rc, MPI_ERR_TYPE);
        assert_eq!(fake::names(), ["pack_size_c"]);
    }

    #[test]
    fn with_schedules_the_probes_poll_until_a_message_is_there() {
        let _active = pretend_active();
        let mut polls = 0;
        let _g = fake::install(move |c| {
            polls += 1;
            match (c.name, polls) {
                ("iprobe", 1..=2) => Ok(vec![0]),
                ("iprobe", _) => Ok(vec![1, 4, 2]),
                _ => Err(MPI_ERR_OTHER),
            }
        });
        let mut app = App::new();
        let native = Native::returning(MPI_ERR_OTHER);
        // SAFETY: the App's status.
        let rc = unsafe {
            MPI_Probe(MPI_ANY_SOURCE, 2, COMM(), &mut app.status, &|| {
                native.call()
            })
        };
        assert_eq!(rc, MPI_SUCCESS);
        assert_eq!(fake::names(), ["iprobe"; 3]);
        let any = MPI_ANY_SOURCE as i64;
        assert_eq!(fake::calls()[0].args[..3], [any, 2, COMM() as i64]);
        assert_eq!((app.status.MPI_SOURCE, app.status.MPI_TAG), (4, 2));

        let mut polls = 0;
        let _g = fake::install(move |c| {
            polls += 1;
            match (c.name, polls) {
                ("improbe", 1) => Ok(vec![0]),
                ("improbe", _) => Ok(vec![1, 0x99, 4, 2]),
                _ => Err(MPI_ERR_OTHER),
            }
        });
        // SAFETY: the App's message handle and status.
        let rc = unsafe {
            MPI_Mprobe(4, 2, COMM(), &mut app.message, &mut app.status, &|| {
                native.call()
            })
        };
        assert_eq!(rc, MPI_SUCCESS);
        assert_eq!(fake::names(), ["improbe"; 2]);
        assert_eq!(
            app.message, 0x99 as MPI_Message,
            "the matched message is handed out"
        );
        assert_eq!(native.calls.get(), 0);
    }

    #[test]
    fn with_schedules_a_probe_error_comes_back_unchanged() {
        let _active = pretend_active();
        let _g = fake::install(|_| Err(MPI_ERR_COMM));
        let mut app = App::new();
        let native = Native::returning(MPI_SUCCESS);
        // SAFETY: the App's status and message handle.
        unsafe {
            assert_eq!(
                MPI_Probe(1, 5, COMM(), &mut app.status, &|| native.call()),
                MPI_ERR_COMM
            );
            let m = &mut app.message;
            assert_eq!(
                MPI_Mprobe(1, 5, COMM(), m, IGNORE, &|| native.call()),
                MPI_ERR_COMM
            );
        }
        assert_eq!(fake::names(), ["iprobe", "improbe"], "tried once each");
    }
}

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

use crate::platform::abi::*;
use crate::platform::api::pmpi;

/// Completes `req` (a native request on `c`) while advancing the shim's schedules. A
/// failure is raised on `c`, as the blocking call would raise it: the system MPI raises a
/// request's errors on the world's handler, which is not the program's (src/errors.rs).
fn poll(req: &mut MPI_Request, status: *mut MPI_Status, c: MPI_Comm) -> c_int {
    let mut rc = MPI_SUCCESS;
    crate::core::progress::wait_until(|| {
        let mut flag: c_int = 0;
        // SAFETY: a valid request and the caller's status pointer (or MPI_STATUS_IGNORE).
        rc = unsafe { pmpi::PMPI_Test(req, &mut flag, status) };
        rc != MPI_SUCCESS || flag != 0
    });
    raise_on(c, rc)
}

/// Raises a failed completion on the communicator of the call.
fn raise_on(c: MPI_Comm, rc: c_int) -> c_int {
    if rc == MPI_SUCCESS {
        return rc;
    }
    crate::platform::errors::raise(c, rc, "point-to-point", "the message failed")
}

/// The blocking call `native`, or, with schedules outstanding, its non-blocking form
/// (`start`) completed by polling.
fn via(
    native: &dyn Fn() -> c_int,
    status: *mut MPI_Status,
    c: MPI_Comm,
    start: impl FnOnce(&mut MPI_Request) -> c_int,
) -> c_int {
    if !crate::core::progress::any_active() {
        return native();
    }
    let mut req = MPI_REQUEST_NULL();
    let rc = start(&mut req);
    if rc != MPI_SUCCESS {
        rc
    } else {
        poll(&mut req, status, c)
    }
}

/// A Sendrecv of the given sides, blocking (`native`, or `PMPI_Sendrecv_c`) or, with
/// schedules outstanding, as a receive and a send (what Sendrecv is, MPI-4.0 §3.10)
/// polled together. Not by the system MPI's `MPI_Isendrecv`: Debian's MPICH 4.0.2
/// completes it with a wrong status (count 0, a stale tag; found by ctests/pack_types),
/// and Open MPI 4.x has none.
///
/// # Safety
/// Valid send and receive sides (buffers alive until this returns).
unsafe fn sendrecv_via(
    native: Option<&dyn Fn() -> c_int>,
    (sb, sn, stt, d, sg): (*const c_void, MPI_Count, MPI_Datatype, c_int, c_int),
    (rb, rn, rt, s, rg): (*mut c_void, MPI_Count, MPI_Datatype, c_int, c_int),
    c: MPI_Comm,
    st: *mut MPI_Status,
) -> c_int {
    if !crate::core::progress::any_active() {
        return match native {
            Some(f) => f(),
            // SAFETY: the caller's sides.
            None => unsafe { pmpi::PMPI_Sendrecv_c(sb, sn, stt, d, sg, rb, rn, rt, s, rg, c, st) },
        };
    }
    let mut reqs = [MPI_REQUEST_NULL(); 2];
    // SAFETY: the caller's sides; the receive is posted first, as Sendrecv may need.
    let rc = unsafe { pmpi::PMPI_Irecv_c(rb, rn, rt, s, rg, c, &mut reqs[0]) };
    if rc != MPI_SUCCESS {
        return rc;
    }
    // SAFETY: as above.
    let rc = unsafe { pmpi::PMPI_Isend_c(sb, sn, stt, d, sg, c, &mut reqs[1]) };
    if rc != MPI_SUCCESS {
        return rc;
    }
    let mut rc = MPI_SUCCESS;
    crate::core::progress::wait_until(|| {
        for (i, r) in reqs.iter_mut().enumerate() {
            if *r != MPI_REQUEST_NULL() {
                let mut flag: c_int = 0;
                // SAFETY: our request; the status (the receive's) or none.
                rc = unsafe { pmpi::PMPI_Test(r, &mut flag, if i == 0 { st } else { IGNORE }) };
                if rc != MPI_SUCCESS {
                    return true;
                }
            }
        }
        reqs.iter().all(|r| *r == MPI_REQUEST_NULL())
    });
    raise_on(c, rc)
}

/// A Sendrecv_replace the shim does not pack: the system MPI's, or with schedules
/// outstanding a packed copy of the send side sent beside a receive into the buffer
/// (not `MPI_Isendrecv_replace`, for the reason given at `sendrecv_via`).
///
/// # Safety
/// The application's arguments.
unsafe fn sendrecv_replace(
    native: &dyn Fn() -> c_int,
    (b, n, t): (*mut c_void, MPI_Count, MPI_Datatype),
    (d, sg, s, rg): (c_int, c_int, c_int, c_int),
    c: MPI_Comm,
    st: *mut MPI_Status,
) -> c_int {
    if !crate::core::progress::any_active() {
        return native();
    }
    // SAFETY: the application's buffer.
    let copy = match unsafe { crate::core::dtype::p2p::copy_packed(b, n, t, c) } {
        Ok(v) => v,
        Err(rc) => return rc,
    };
    let send = (
        copy.as_ptr().cast::<c_void>(),
        copy.len() as MPI_Count,
        MPI_PACKED(),
        d,
        sg,
    );
    // SAFETY: our copy and the application's buffer, alive until this returns.
    unsafe { sendrecv_via(None, send, (b, n, t, s, rg), c, st) }
}

/// Like `via` for the probes, which have no request: polls the non-blocking probe.
fn probe(native: &dyn Fn() -> c_int, mut iprobe: impl FnMut(&mut c_int) -> c_int) -> c_int {
    if !crate::core::progress::any_active() {
        return native();
    }
    let mut rc = MPI_SUCCESS;
    crate::core::progress::wait_until(|| {
        let mut flag: c_int = 0;
        rc = iprobe(&mut flag);
        rc != MPI_SUCCESS || flag != 0
    });
    rc
}

/// Sends the packed bytes of a non-contiguous message (see `crate::hooks::p2p`): the
/// blocking call `blocking`, or its non-blocking form while schedules are outstanding.
fn send_packed(
    p: &[u8],
    blocking: unsafe fn(*const c_void, MPI_Count, MPI_Datatype, c_int, c_int, MPI_Comm) -> c_int,
    start: unsafe fn(
        *const c_void,
        MPI_Count,
        MPI_Datatype,
        c_int,
        c_int,
        MPI_Comm,
        *mut MPI_Request,
    ) -> c_int,
    d: c_int,
    g: c_int,
    c: MPI_Comm,
) -> c_int {
    let (b, n) = (p.as_ptr().cast::<c_void>(), p.len() as MPI_Count);
    // SAFETY: our packed buffer, alive until the send completes (both forms complete here).
    via(
        &|| unsafe { blocking(b, n, MPI_PACKED(), d, g, c) },
        IGNORE,
        c,
        |r| unsafe { start(b, n, MPI_PACKED(), d, g, c, r) },
    )
}

/// Receives into a packed buffer and unpacks what arrived into `user`.
///
/// # Safety
/// `user` is the application's receive buffer for the counted elements.
unsafe fn recv_packed(
    inc: crate::core::dtype::p2p::PackedBuf,
    user: *mut c_void,
    s: c_int,
    g: c_int,
    c: MPI_Comm,
    st: *mut MPI_Status,
) -> c_int {
    // SAFETY: our buffer (b, n) and a status we can read back.
    unsafe {
        packed_receive(
            inc,
            user,
            st,
            c,
            |b, n, stp| pmpi::PMPI_Recv_c(b, n, MPI_PACKED(), s, g, c, stp),
            |b, n, r| pmpi::PMPI_Irecv_c(b, n, MPI_PACKED(), s, g, c, r),
        )
    }
}

/// A receive of packed bytes by `blocking(buf, bytes, status)` or, with schedules
/// outstanding, `start(buf, bytes, request)` plus polling; then what arrived is unpacked
/// into `user` and the status (the caller's, or a local one for `MPI_STATUS_IGNORE`) kept.
///
/// # Safety
/// `user` is the application's receive buffer for the counted elements; the two calls
/// receive into the buffer they are given.
unsafe fn packed_receive(
    mut inc: crate::core::dtype::p2p::PackedBuf,
    user: *mut c_void,
    st: *mut MPI_Status,
    comm: MPI_Comm,
    blocking: impl Fn(*mut c_void, MPI_Count, *mut MPI_Status) -> c_int,
    start: impl Fn(*mut c_void, MPI_Count, *mut MPI_Request) -> c_int,
) -> c_int {
    let mut local = MPI_Status::default();
    let stp = if st == IGNORE || st.is_null() {
        &mut local as *mut MPI_Status
    } else {
        st
    };
    let (b, n) = (inc.ptr(), inc.len());
    let rc = via(&|| blocking(b, n, stp), stp, comm, |r| start(b, n, r));
    if rc == MPI_SUCCESS {
        // SAFETY: the completed status; the caller's buffer.
        unsafe { inc.finish(user, stp) };
    }
    rc
}

/// Sendrecv with either side packed by the shim (see `crate::hooks::p2p`).
///
/// # Safety
/// The application's Sendrecv arguments.
unsafe fn sendrecv_packed(
    (sb, sn, stt, d, sg): (*const c_void, MPI_Count, MPI_Datatype, c_int, c_int),
    (rb, rn, rt, s, rg): (*mut c_void, MPI_Count, MPI_Datatype, c_int, c_int),
    c: MPI_Comm,
    st: *mut MPI_Status,
) -> Option<c_int> {
    // SAFETY: the application's send buffer.
    let out = unsafe { crate::core::dtype::p2p::outgoing(sb, sn, stt, d) };
    let mut inc = crate::core::dtype::p2p::incoming(rn, rt, s);
    if out.is_none() && inc.is_none() {
        return None;
    }
    let (sb, sn, stt) = match &out {
        Some(p) => (
            p.as_ptr().cast::<c_void>(),
            p.len() as MPI_Count,
            MPI_PACKED(),
        ),
        None => (sb, sn, stt),
    };
    let (rb2, rn2, rt2) = match &mut inc {
        Some(i) => (i.ptr(), i.len(), MPI_PACKED()),
        None => (rb, rn, rt),
    };
    let mut local = MPI_Status::default();
    let stp = if st == IGNORE || st.is_null() {
        &mut local as *mut MPI_Status
    } else {
        st
    };
    // SAFETY: the application's or our packed buffers, alive until completion here.
    let rc = unsafe { sendrecv_via(None, (sb, sn, stt, d, sg), (rb2, rn2, rt2, s, rg), c, stp) };
    if rc == MPI_SUCCESS {
        if let Some(i) = &inc {
            // SAFETY: the completed status; the application's receive buffer.
            unsafe { i.finish(rb, stp) };
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
    (b, n, t): (*mut c_void, MPI_Count, MPI_Datatype),
    (d, sg, s, rg): (c_int, c_int, c_int, c_int),
    c: MPI_Comm,
    st: *mut MPI_Status,
) -> c_int {
    // SAFETY: the application's arguments, the same buffer on both sides.
    if let Some(rc) = unsafe { sendrecv_packed((b, n, t, d, sg), (b, n, t, s, rg), c, st) } {
        return rc;
    }
    // SAFETY: the application's arguments.
    unsafe { sendrecv_replace(native, (b, n, t), (d, sg, s, rg), c, st) }
}

/// A matched receive (`MPI_Mrecv`) packed by the shim, or `None` to receive as asked.
///
/// # Safety
/// The application's arguments.
unsafe fn mrecv_packed(
    b: *mut c_void,
    n: MPI_Count,
    t: MPI_Datatype,
    m: *mut MPI_Message,
    st: *mut MPI_Status,
) -> Option<c_int> {
    // SAFETY: the application's message handle.
    let inc = crate::core::dtype::p2p::incoming(n, t, unsafe {
        crate::core::dtype::p2p::message_peer(m)
    })?;
    // SAFETY: our buffer, the application's message and buffer, a status we can read back.
    Some(unsafe {
        packed_receive(
            inc,
            b,
            st,
            MPI_COMM_NULL(),
            |pb, pn, stp| pmpi::PMPI_Mrecv_c(pb, pn, MPI_PACKED(), m, stp),
            |pb, pn, r| pmpi::PMPI_Imrecv_c(pb, pn, MPI_PACKED(), m, r),
        )
    })
}

const IGNORE: *mut MPI_Status = MPI_STATUS_IGNORE;

// Hooks (see `src/platform/abi/mpi_functions.txt`). Safety: the arguments are the application's,
// passed unchanged to the non-blocking form of the same call.

/// A blocking send: packed by the shim when the datatype qualifies (`$blk`/`$nb` send
/// the packed bytes), else the system MPI's call, or with schedules outstanding its
/// non-blocking form (`$nbn`) plus polling. For buffered sends the packed bytes fit the
/// attached buffer: they are no more than `MPI_Pack_size` of the application's message.
macro_rules! send_hook {
    ($name:ident, $n:ty, $blk:path, $nb:path, $nbn:path) => {
        pub unsafe fn $name(
            b: *const c_void,
            n: $n,
            t: MPI_Datatype,
            d: c_int,
            g: c_int,
            c: MPI_Comm,
            native: &dyn Fn() -> c_int,
        ) -> c_int {
            // SAFETY: the application's buffer for n elements of t.
            if let Some(p) = unsafe { crate::core::dtype::p2p::outgoing(b, n as i64, t, d) } {
                return send_packed(&p, $blk, $nb, d, g, c);
            }
            // SAFETY: the application's arguments, unchanged.
            via(native, IGNORE, c, |r| unsafe { $nbn(b, n, t, d, g, c, r) })
        }
    };
}
send_hook!(
    MPI_Send,
    c_int,
    pmpi::PMPI_Send_c,
    pmpi::PMPI_Isend_c,
    pmpi::PMPI_Isend
);
send_hook!(
    MPI_Send_c,
    MPI_Count,
    pmpi::PMPI_Send_c,
    pmpi::PMPI_Isend_c,
    pmpi::PMPI_Isend_c
);
send_hook!(
    MPI_Ssend,
    c_int,
    pmpi::PMPI_Ssend_c,
    pmpi::PMPI_Issend_c,
    pmpi::PMPI_Issend
);
send_hook!(
    MPI_Ssend_c,
    MPI_Count,
    pmpi::PMPI_Ssend_c,
    pmpi::PMPI_Issend_c,
    pmpi::PMPI_Issend_c
);
send_hook!(
    MPI_Rsend,
    c_int,
    pmpi::PMPI_Rsend_c,
    pmpi::PMPI_Irsend_c,
    pmpi::PMPI_Irsend
);
send_hook!(
    MPI_Rsend_c,
    MPI_Count,
    pmpi::PMPI_Rsend_c,
    pmpi::PMPI_Irsend_c,
    pmpi::PMPI_Irsend_c
);
send_hook!(
    MPI_Bsend,
    c_int,
    pmpi::PMPI_Bsend_c,
    pmpi::PMPI_Ibsend_c,
    pmpi::PMPI_Ibsend
);
send_hook!(
    MPI_Bsend_c,
    MPI_Count,
    pmpi::PMPI_Bsend_c,
    pmpi::PMPI_Ibsend_c,
    pmpi::PMPI_Ibsend_c
);
pub unsafe fn MPI_Recv(
    b: *mut c_void,
    n: c_int,
    t: MPI_Datatype,
    s: c_int,
    g: c_int,
    c: MPI_Comm,
    st: *mut MPI_Status,
    native: &dyn Fn() -> c_int,
) -> c_int {
    if let Some(inc) = crate::core::dtype::p2p::incoming(n as i64, t, s) {
        // SAFETY: the application's receive buffer.
        return unsafe { recv_packed(inc, b, s, g, c, st) };
    }
    via(native, st, c, |r| unsafe {
        pmpi::PMPI_Irecv(b, n, t, s, g, c, r)
    })
}
pub unsafe fn MPI_Recv_c(
    b: *mut c_void,
    n: MPI_Count,
    t: MPI_Datatype,
    s: c_int,
    g: c_int,
    c: MPI_Comm,
    st: *mut MPI_Status,
    native: &dyn Fn() -> c_int,
) -> c_int {
    if let Some(inc) = crate::core::dtype::p2p::incoming(n, t, s) {
        // SAFETY: the application's receive buffer.
        return unsafe { recv_packed(inc, b, s, g, c, st) };
    }
    via(native, st, c, |r| unsafe {
        pmpi::PMPI_Irecv_c(b, n, t, s, g, c, r)
    })
}
pub unsafe fn MPI_Sendrecv(
    sb: *const c_void,
    sn: c_int,
    stt: MPI_Datatype,
    d: c_int,
    sg: c_int,
    rb: *mut c_void,
    rn: c_int,
    rt: MPI_Datatype,
    s: c_int,
    rg: c_int,
    c: MPI_Comm,
    st: *mut MPI_Status,
    native: &dyn Fn() -> c_int,
) -> c_int {
    // SAFETY: the application's arguments.
    if let Some(rc) = unsafe {
        sendrecv_packed(
            (sb, sn as i64, stt, d, sg),
            (rb, rn as i64, rt, s, rg),
            c,
            st,
        )
    } {
        return rc;
    }
    let (sn, rn) = (sn as MPI_Count, rn as MPI_Count);
    // SAFETY: the application's arguments.
    unsafe {
        sendrecv_via(
            Some(native),
            (sb, sn, stt, d, sg),
            (rb, rn, rt, s, rg),
            c,
            st,
        )
    }
}
pub unsafe fn MPI_Sendrecv_c(
    sb: *const c_void,
    sn: MPI_Count,
    stt: MPI_Datatype,
    d: c_int,
    sg: c_int,
    rb: *mut c_void,
    rn: MPI_Count,
    rt: MPI_Datatype,
    s: c_int,
    rg: c_int,
    c: MPI_Comm,
    st: *mut MPI_Status,
    native: &dyn Fn() -> c_int,
) -> c_int {
    // SAFETY: the application's arguments.
    if let Some(rc) = unsafe { sendrecv_packed((sb, sn, stt, d, sg), (rb, rn, rt, s, rg), c, st) } {
        return rc;
    }
    // SAFETY: the application's arguments.
    unsafe {
        sendrecv_via(
            Some(native),
            (sb, sn, stt, d, sg),
            (rb, rn, rt, s, rg),
            c,
            st,
        )
    }
}
pub unsafe fn MPI_Sendrecv_replace(
    b: *mut c_void,
    n: c_int,
    t: MPI_Datatype,
    d: c_int,
    sg: c_int,
    s: c_int,
    rg: c_int,
    c: MPI_Comm,
    st: *mut MPI_Status,
    native: &dyn Fn() -> c_int,
) -> c_int {
    // SAFETY: the application's arguments.
    unsafe { replace(native, (b, n as MPI_Count, t), (d, sg, s, rg), c, st) }
}
pub unsafe fn MPI_Sendrecv_replace_c(
    b: *mut c_void,
    n: MPI_Count,
    t: MPI_Datatype,
    d: c_int,
    sg: c_int,
    s: c_int,
    rg: c_int,
    c: MPI_Comm,
    st: *mut MPI_Status,
    native: &dyn Fn() -> c_int,
) -> c_int {
    // SAFETY: the application's arguments.
    unsafe { replace(native, (b, n, t), (d, sg, s, rg), c, st) }
}
pub unsafe fn MPI_Mrecv(
    b: *mut c_void,
    n: c_int,
    t: MPI_Datatype,
    m: *mut MPI_Message,
    st: *mut MPI_Status,
    native: &dyn Fn() -> c_int,
) -> c_int {
    // SAFETY: the application's arguments.
    if let Some(rc) = unsafe { mrecv_packed(b, n as MPI_Count, t, m, st) } {
        return rc;
    }
    // a matched receive has no communicator argument: its errors belong to no object
    via(native, st, MPI_COMM_NULL(), |r| unsafe {
        pmpi::PMPI_Imrecv(b, n, t, m, r)
    })
}
pub unsafe fn MPI_Mrecv_c(
    b: *mut c_void,
    n: MPI_Count,
    t: MPI_Datatype,
    m: *mut MPI_Message,
    st: *mut MPI_Status,
    native: &dyn Fn() -> c_int,
) -> c_int {
    // SAFETY: the application's arguments.
    if let Some(rc) = unsafe { mrecv_packed(b, n, t, m, st) } {
        return rc;
    }
    via(native, st, MPI_COMM_NULL(), |r| unsafe {
        pmpi::PMPI_Imrecv_c(b, n, t, m, r)
    })
}
pub unsafe fn MPI_Probe(
    s: c_int,
    g: c_int,
    c: MPI_Comm,
    st: *mut MPI_Status,
    native: &dyn Fn() -> c_int,
) -> c_int {
    probe(native, |f| unsafe { pmpi::PMPI_Iprobe(s, g, c, f, st) })
}
pub unsafe fn MPI_Mprobe(
    s: c_int,
    g: c_int,
    c: MPI_Comm,
    m: *mut MPI_Message,
    st: *mut MPI_Status,
    native: &dyn Fn() -> c_int,
) -> c_int {
    probe(native, |f| unsafe { pmpi::PMPI_Improbe(s, g, c, f, m, st) })
}

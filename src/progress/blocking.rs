//! Blocking point-to-point calls while schedules are outstanding.
//!
//! A rank blocked in `MPI_Recv` must still advance its outstanding collective schedules:
//! the peer it waits for may itself be waiting for one of them (MPI-4.0 §3.7.4). When no
//! schedule is outstanding these hooks call the system MPI directly; otherwise they start
//! the non-blocking form of the same call and poll it, advancing the schedules between
//! tests.

use core::ffi::{c_int, c_void};

use crate::abi::*;
use crate::pmpi;

/// Completes `req` (a native request) while advancing the shim's schedules.
fn poll(req: &mut MPI_Request, status: *mut MPI_Status) -> c_int {
    let mut rc = MPI_SUCCESS;
    super::wait_until(|| {
        let mut flag: c_int = 0;
        // SAFETY: a valid request and the caller's status pointer (or MPI_STATUS_IGNORE).
        rc = unsafe { pmpi::PMPI_Test(req, &mut flag, status) };
        rc != MPI_SUCCESS || flag != 0
    });
    rc
}

/// The blocking call `native`, or, with schedules outstanding, its non-blocking form
/// (`start`) completed by polling.
fn via(
    native: &dyn Fn() -> c_int,
    status: *mut MPI_Status,
    start: impl FnOnce(&mut MPI_Request) -> c_int,
) -> c_int {
    if !super::any_active() {
        return native();
    }
    let mut req = MPI_REQUEST_NULL;
    let rc = start(&mut req);
    if rc != MPI_SUCCESS {
        rc
    } else {
        poll(&mut req, status)
    }
}

/// Like `via` for the probes, which have no request: polls the non-blocking probe.
fn probe(native: &dyn Fn() -> c_int, mut iprobe: impl FnMut(&mut c_int) -> c_int) -> c_int {
    if !super::any_active() {
        return native();
    }
    let mut rc = MPI_SUCCESS;
    super::wait_until(|| {
        let mut flag: c_int = 0;
        rc = iprobe(&mut flag);
        rc != MPI_SUCCESS || flag != 0
    });
    rc
}

const IGNORE: *mut MPI_Status = MPI_STATUS_IGNORE;

/// Hooks (see `src/abi/mpi_functions.txt`). Safety: the arguments are the application's,
/// passed unchanged to the non-blocking form of the same call.
#[allow(non_snake_case, clippy::missing_safety_doc, clippy::too_many_arguments)]
pub mod hooks {
    use super::*;

    pub unsafe fn MPI_Send(
        b: *const c_void,
        n: c_int,
        t: MPI_Datatype,
        d: c_int,
        g: c_int,
        c: MPI_Comm,
        native: &dyn Fn() -> c_int,
    ) -> c_int {
        via(native, IGNORE, |r| unsafe {
            pmpi::PMPI_Isend(b, n, t, d, g, c, r)
        })
    }
    pub unsafe fn MPI_Send_c(
        b: *const c_void,
        n: MPI_Count,
        t: MPI_Datatype,
        d: c_int,
        g: c_int,
        c: MPI_Comm,
        native: &dyn Fn() -> c_int,
    ) -> c_int {
        via(native, IGNORE, |r| unsafe {
            pmpi::PMPI_Isend_c(b, n, t, d, g, c, r)
        })
    }
    pub unsafe fn MPI_Ssend(
        b: *const c_void,
        n: c_int,
        t: MPI_Datatype,
        d: c_int,
        g: c_int,
        c: MPI_Comm,
        native: &dyn Fn() -> c_int,
    ) -> c_int {
        via(native, IGNORE, |r| unsafe {
            pmpi::PMPI_Issend(b, n, t, d, g, c, r)
        })
    }
    pub unsafe fn MPI_Ssend_c(
        b: *const c_void,
        n: MPI_Count,
        t: MPI_Datatype,
        d: c_int,
        g: c_int,
        c: MPI_Comm,
        native: &dyn Fn() -> c_int,
    ) -> c_int {
        via(native, IGNORE, |r| unsafe {
            pmpi::PMPI_Issend_c(b, n, t, d, g, c, r)
        })
    }
    pub unsafe fn MPI_Rsend(
        b: *const c_void,
        n: c_int,
        t: MPI_Datatype,
        d: c_int,
        g: c_int,
        c: MPI_Comm,
        native: &dyn Fn() -> c_int,
    ) -> c_int {
        via(native, IGNORE, |r| unsafe {
            pmpi::PMPI_Irsend(b, n, t, d, g, c, r)
        })
    }
    pub unsafe fn MPI_Rsend_c(
        b: *const c_void,
        n: MPI_Count,
        t: MPI_Datatype,
        d: c_int,
        g: c_int,
        c: MPI_Comm,
        native: &dyn Fn() -> c_int,
    ) -> c_int {
        via(native, IGNORE, |r| unsafe {
            pmpi::PMPI_Irsend_c(b, n, t, d, g, c, r)
        })
    }
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
        via(native, st, |r| unsafe {
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
        via(native, st, |r| unsafe {
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
        via(native, st, |r| unsafe {
            pmpi::PMPI_Isendrecv(sb, sn, stt, d, sg, rb, rn, rt, s, rg, c, r)
        })
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
        via(native, st, |r| unsafe {
            pmpi::PMPI_Isendrecv_c(sb, sn, stt, d, sg, rb, rn, rt, s, rg, c, r)
        })
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
        via(native, st, |r| unsafe {
            pmpi::PMPI_Isendrecv_replace(b, n, t, d, sg, s, rg, c, r)
        })
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
        via(native, st, |r| unsafe {
            pmpi::PMPI_Isendrecv_replace_c(b, n, t, d, sg, s, rg, c, r)
        })
    }
    pub unsafe fn MPI_Mrecv(
        b: *mut c_void,
        n: c_int,
        t: MPI_Datatype,
        m: *mut MPI_Message,
        st: *mut MPI_Status,
        native: &dyn Fn() -> c_int,
    ) -> c_int {
        via(native, st, |r| unsafe { pmpi::PMPI_Imrecv(b, n, t, m, r) })
    }
    pub unsafe fn MPI_Mrecv_c(
        b: *mut c_void,
        n: MPI_Count,
        t: MPI_Datatype,
        m: *mut MPI_Message,
        st: *mut MPI_Status,
        native: &dyn Fn() -> c_int,
    ) -> c_int {
        via(native, st, |r| unsafe {
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
}

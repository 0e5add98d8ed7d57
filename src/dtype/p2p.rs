//! Point-to-point messages with non-contiguous datatypes, packed by the shim.
//!
//! A send packs into a buffer and sends `MPI_PACKED` bytes; a receive receives
//! `MPI_PACKED` bytes into a buffer and unpacks what arrived. Both ends stay compatible with
//! any peer: a message sent as `MPI_PACKED` matches a receive of any datatype with the
//! same type signature, and a receive of `MPI_PACKED` matches any message (MPI-4.0 §3.3.1,
//! §5.2.1); the status counts bytes, so `MPI_Get_count`/`MPI_Get_elements` with the
//! application's datatype give what they would have given (MPICH keeps the byte count).
//! Only messages of at least `SHIM_PACK_MIN_BYTES` take this path: below it the system
//! MPI's own packing is as fast and needs no extra buffer.

use core::ffi::{c_int, c_void};
use std::sync::Arc;

use super::flat::{self, Flat};
use super::pack::{self, Dir};
use crate::abi::*;
use crate::pmpi;

/// The layout of `count` elements of `dt` if the shim should pack them for a message.
pub(crate) fn eligible(count: i64, dt: MPI_Datatype, peer: c_int) -> Option<Arc<Flat>> {
    if count <= 0 || peer == MPI_PROC_NULL || is_predefined_datatype(dt) {
        return None;
    }
    let f = flat::get(dt).ok()?;
    let bytes = count.checked_mul(f.size)?;
    if f.contiguous.is_some() || bytes < crate::config::get().pack_min_bytes as i64 {
        return None;
    }
    // an uncommitted type is an error the system MPI reports
    super::check_usable(dt).ok()?;
    Some(f)
}

/// The packed bytes of a send, or `None` to send as the application asked.
///
/// # Safety
/// `buf` must hold `count` elements of `dt`.
pub unsafe fn outgoing(
    buf: *const c_void,
    count: i64,
    dt: MPI_Datatype,
    dest: c_int,
) -> Option<Vec<u8>> {
    let mut m = PackedBuf::new(count, dt, dest)?;
    // SAFETY: the caller's buffer.
    unsafe { m.pack_from(buf) };
    Some(m.buf)
}

/// The packed bytes of one message (`count` elements of a layout): filled from the
/// application's buffer by `pack_from` (a send) or unpacked into it by `finish` (a receive).
pub struct PackedBuf {
    flat: Arc<Flat>,
    count: i64,
    pub buf: Vec<u8>,
}

/// A packed receive for `count` elements of `dt`, or `None` to receive as asked.
pub fn incoming(count: i64, dt: MPI_Datatype, source: c_int) -> Option<PackedBuf> {
    PackedBuf::new(count, dt, source)
}

impl PackedBuf {
    /// A buffer for `count` elements of `dt` to or from `peer`, if the shim packs them.
    fn new(count: i64, dt: MPI_Datatype, peer: c_int) -> Option<PackedBuf> {
        let flat = eligible(count, dt, peer)?;
        Some(PackedBuf {
            buf: vec![0u8; (count * flat.size) as usize],
            flat,
            count,
        })
    }

    /// Packs the application's `count` elements into the buffer.
    ///
    /// # Safety
    /// `user` must hold `count` elements of the layout.
    pub unsafe fn pack_from(&mut self, user: *const c_void) {
        // SAFETY: the caller's buffer; ours holds count * size bytes.
        unsafe {
            pack::run(
                &self.flat,
                self.count,
                user as *mut u8,
                self.buf.as_mut_ptr(),
                Dir::Pack,
            )
        };
    }

    pub fn ptr(&mut self) -> *mut c_void {
        self.buf.as_mut_ptr().cast()
    }

    pub fn len(&self) -> MPI_Count {
        self.buf.len() as MPI_Count
    }

    /// Unpacks the bytes that arrived (the status's count) into the application's buffer.
    ///
    /// # Safety
    /// `user` must be the receive buffer for `count` elements; `st` a completed status.
    pub unsafe fn finish(&self, user: *mut c_void, st: *const MPI_Status) {
        let mut got: MPI_Count = 0;
        // SAFETY: a status the receive filled.
        unsafe { pmpi::PMPI_Get_count_c(st, MPI_BYTE(), &mut got) };
        let got = got.clamp(0, self.len());
        // SAFETY: `got` bytes of our buffer into the caller's receive buffer.
        unsafe {
            pack::run_bytes(
                &self.flat,
                self.count,
                user as *mut u8,
                self.buf.as_ptr() as *mut u8,
                got,
                Dir::Unpack,
            )
        };
    }
}

/// A non-blocking or persistent point-to-point request whose message the shim packs:
/// the system MPI's request moves the packed bytes; a send packs before it starts, a
/// receive unpacks when it completes (MPI-4.0 §3.7.2: the receive buffer may only be read
/// after completion, so unpacking then is invisible to the application).
pub struct PackedReq {
    inner: std::sync::Mutex<Inner>,
    recv: bool,
    persistent: bool,
}

struct Inner {
    native: MPI_Request,
    msg: PackedBuf,
    /// The application's buffer.
    user: usize,
    active: bool,
    done: bool,
    status: MPI_Status,
    error: c_int,
}

// SAFETY: `user` is the address of the application's buffer, which MPI requires to stay
// valid until the request completes; everything else is owned. Access is serialized by
// the mutex.
unsafe impl Send for Inner {}

/// How a packed request's system MPI request is made from (bytes, byte count): the `_c`
/// non-blocking or persistent call with `MPI_PACKED` and the application's peer, tag and
/// communicator.
pub type Post<'a> = &'a dyn Fn(*mut c_void, MPI_Count, *mut MPI_Request) -> c_int;

impl PackedReq {
    /// A packed send (`recv` false) or receive of `count` elements of `dt` at `user` with
    /// `peer`, or `None` to let the system MPI carry it. A non-persistent send packs and
    /// every request is made (`post`) at once; a persistent one starts at `MPI_Start`.
    ///
    /// # Safety
    /// `user` holds `count` elements of `dt` and stays valid until the request completes.
    pub unsafe fn new(
        user: *mut c_void,
        count: i64,
        dt: MPI_Datatype,
        peer: c_int,
        recv: bool,
        persistent: bool,
        post: Post,
    ) -> Option<Result<Arc<PackedReq>, c_int>> {
        let mut msg = PackedBuf::new(count, dt, peer)?;
        if !recv && !persistent {
            // SAFETY: the caller's buffer.
            unsafe { msg.pack_from(user) };
        }
        let mut native = MPI_REQUEST_NULL();
        let rc = post(msg.ptr(), msg.len(), &mut native);
        if rc != MPI_SUCCESS {
            return Some(Err(rc));
        }
        Some(Ok(Arc::new(PackedReq {
            inner: std::sync::Mutex::new(Inner {
                native,
                msg,
                user: user as usize,
                active: !persistent,
                done: false,
                status: MPI_Status::default(),
                error: MPI_SUCCESS,
            }),
            recv,
            persistent,
        })))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn is_persistent(&self) -> bool {
        self.persistent
    }

    /// Whether the request is started and not yet retired.
    pub fn is_active(&self) -> bool {
        self.lock().active
    }

    /// Tests the system MPI's request; on completion unpacks a receive. Returns whether the
    /// request is complete.
    pub fn poke(&self) -> bool {
        let mut g = self.lock();
        if g.done || !g.active {
            return true;
        }
        let mut flag: c_int = 0;
        let inner = &mut *g;
        // SAFETY: our started request; a status we own.
        let rc = unsafe { pmpi::PMPI_Test(&mut inner.native, &mut flag, &mut inner.status) };
        if rc != MPI_SUCCESS {
            inner.error = rc;
            inner.done = true;
            return true;
        }
        if flag == 0 {
            return false;
        }
        let mut cancelled: c_int = 0;
        // SAFETY: the completed status.
        unsafe { pmpi::PMPI_Test_cancelled(&inner.status, &mut cancelled) };
        if self.recv && cancelled == 0 {
            // SAFETY: the application's receive buffer (valid until completion, which is
            // now) and the completed status.
            unsafe { inner.msg.finish(inner.user as *mut c_void, &inner.status) };
        }
        inner.done = true;
        true
    }

    /// The completed request's status (source, tag, byte count, cancelled flag) into
    /// `st`, unless it is ignored; the error code is returned, not written.
    ///
    /// # Safety
    /// `st` is null, `MPI_STATUS_IGNORE` or a writable status.
    pub unsafe fn status_into(&self, st: *mut MPI_Status) -> c_int {
        let g = self.lock();
        if !st.is_null() && st != MPI_STATUS_IGNORE {
            // SAFETY: the caller's status.
            unsafe {
                let e = (*st).MPI_ERROR;
                *st = g.status;
                (*st).MPI_ERROR = e;
            }
        }
        g.error
    }

    /// Retires a completed request: a persistent one becomes inactive.
    pub fn retire(&self) {
        let mut g = self.lock();
        g.active = false;
        g.done = false;
        g.error = MPI_SUCCESS;
    }

    /// Starts an inactive persistent request: a send packs the application's buffer now
    /// (MPI-4.0 §3.9: the buffer's contents at `MPI_Start` are sent).
    pub fn start(&self) -> c_int {
        let mut g = self.lock();
        if g.active {
            return MPI_ERR_REQUEST;
        }
        if !self.recv {
            let inner = &mut *g;
            // SAFETY: the application's send buffer, valid while the request is active.
            unsafe { inner.msg.pack_from(inner.user as *const c_void) };
        }
        // SAFETY: our inactive persistent request.
        let rc = unsafe { pmpi::PMPI_Start(&mut g.native) };
        if rc == MPI_SUCCESS {
            g.active = true;
            g.done = false;
        }
        rc
    }

    /// `MPI_Cancel` of the system MPI's request.
    pub fn cancel(&self) -> c_int {
        let mut g = self.lock();
        // SAFETY: our request.
        unsafe { pmpi::PMPI_Cancel(&mut g.native) }
    }

    /// Frees the system MPI's request of an inactive persistent request.
    pub fn release(&self) -> c_int {
        let mut g = self.lock();
        if g.native == MPI_REQUEST_NULL() {
            return MPI_SUCCESS;
        }
        // SAFETY: our inactive request.
        unsafe { pmpi::PMPI_Request_free(&mut g.native) }
    }
}

/// Hooks (see `src/abi/mpi_functions.txt`) for the non-blocking and persistent sends and
/// receives: the message is packed by the shim when `PackedReq` takes it, and the request
/// handed back is the shim's (see `crate::request`); otherwise the system MPI's.
#[allow(non_snake_case, clippy::missing_safety_doc, clippy::too_many_arguments)]
pub mod hooks {
    use super::*;
    use crate::api::Fid;

    /// The outcome of a packed request as the hook returns it.
    fn hand_out(
        made: Option<Result<Arc<PackedReq>, c_int>>,
        comm: MPI_Comm,
        fid: Fid,
        r: *mut MPI_Request,
        native: &dyn Fn() -> c_int,
    ) -> c_int {
        match made {
            None => native(),
            Some(Err(rc)) => rc,
            Some(Ok(p)) => {
                // SAFETY: the application's request out-pointer.
                unsafe { *r = crate::request::insert_packed(p, comm, fid) };
                MPI_SUCCESS
            }
        }
    }

    /// One send-side hook: `$name` takes a count of type `$n`, posts with `$post` (a `_c`
    /// call: packed bytes may exceed `int`), persistent or not.
    macro_rules! send_hook {
        ($name:ident, $n:ty, $post:path, $persistent:expr) => {
            pub unsafe fn $name(
                b: *const c_void,
                n: $n,
                t: MPI_Datatype,
                d: c_int,
                g: c_int,
                c: MPI_Comm,
                r: *mut MPI_Request,
                native: &dyn Fn() -> c_int,
            ) -> c_int {
                // SAFETY: the application's buffer, peer, tag and communicator; our bytes.
                let post: Post =
                    &|pb, pn, req| unsafe { $post(pb, pn, MPI_PACKED(), d, g, c, req) };
                // SAFETY: the application's send buffer for n elements of t.
                let made = unsafe {
                    PackedReq::new(b as *mut c_void, n as i64, t, d, false, $persistent, post)
                };
                hand_out(made, c, Fid::$name, r, native)
            }
        };
    }

    macro_rules! recv_hook {
        ($name:ident, $n:ty, $post:path, $persistent:expr) => {
            pub unsafe fn $name(
                b: *mut c_void,
                n: $n,
                t: MPI_Datatype,
                s: c_int,
                g: c_int,
                c: MPI_Comm,
                r: *mut MPI_Request,
                native: &dyn Fn() -> c_int,
            ) -> c_int {
                // SAFETY: the application's source, tag and communicator; our bytes.
                let post: Post =
                    &|pb, pn, req| unsafe { $post(pb, pn, MPI_PACKED(), s, g, c, req) };
                // SAFETY: the application's receive buffer for n elements of t.
                let made = unsafe { PackedReq::new(b, n as i64, t, s, true, $persistent, post) };
                hand_out(made, c, Fid::$name, r, native)
            }
        };
    }

    send_hook!(MPI_Isend, c_int, pmpi::PMPI_Isend_c, false);
    send_hook!(MPI_Isend_c, MPI_Count, pmpi::PMPI_Isend_c, false);
    send_hook!(MPI_Issend, c_int, pmpi::PMPI_Issend_c, false);
    send_hook!(MPI_Issend_c, MPI_Count, pmpi::PMPI_Issend_c, false);
    send_hook!(MPI_Irsend, c_int, pmpi::PMPI_Irsend_c, false);
    send_hook!(MPI_Irsend_c, MPI_Count, pmpi::PMPI_Irsend_c, false);
    send_hook!(MPI_Send_init, c_int, pmpi::PMPI_Send_init_c, true);
    send_hook!(MPI_Send_init_c, MPI_Count, pmpi::PMPI_Send_init_c, true);
    send_hook!(MPI_Ssend_init, c_int, pmpi::PMPI_Ssend_init_c, true);
    send_hook!(MPI_Ssend_init_c, MPI_Count, pmpi::PMPI_Ssend_init_c, true);
    send_hook!(MPI_Rsend_init, c_int, pmpi::PMPI_Rsend_init_c, true);
    send_hook!(MPI_Rsend_init_c, MPI_Count, pmpi::PMPI_Rsend_init_c, true);
    recv_hook!(MPI_Irecv, c_int, pmpi::PMPI_Irecv_c, false);
    recv_hook!(MPI_Irecv_c, MPI_Count, pmpi::PMPI_Irecv_c, false);
    recv_hook!(MPI_Recv_init, c_int, pmpi::PMPI_Recv_init_c, true);
    recv_hook!(MPI_Recv_init_c, MPI_Count, pmpi::PMPI_Recv_init_c, true);
}

//! Layer: core. May use: platform.
//!
//! Point-to-point messages with non-contiguous datatypes, packed by the shim.
//!
//! A send packs into a buffer and sends `MPI_PACKED` bytes; a receive receives
//! `MPI_PACKED` bytes into a buffer and unpacks what arrived. Both ends stay compatible with
//! any peer: a message sent as `MPI_PACKED` matches a receive of any datatype with the
//! same type signature, and a receive of `MPI_PACKED` matches any message (MPI-4.0 §3.3.1,
//! §5.2.1); the status counts bytes, so `MPI_Get_count`/`MPI_Get_elements` with the
//! application's datatype give what they would have given (MPICH keeps the byte count).
//! Which messages take this path ([`eligible`]): those of at least `SHIM_PACK_MIN_BYTES`
//! (the size from which packing is split over threads), and at any size those whose
//! contiguous runs average under [`SHORT_RUN`] bytes. For the latter the shim's packer
//! beats the system MPI's own handling of the datatype even with the extra copies a packed
//! message costs (Sendrecv of vectors between 2 ranks in shared memory, 1 thread: runs of
//! 8-128 B 0.06-0.97x the system MPI's time from 1 KiB to 256 KiB, 2-20 KiB subarray
//! halo faces 0.85-0.97x, structs 0.3-0.5x); longer runs below that size are left to the
//! system MPI (runs of 256 B-4 KiB at 16-64 KiB: 0.9-1.45x, the extra copies showing).
#![allow(clippy::missing_safety_doc, clippy::too_many_arguments)]

use core::ffi::{c_int, c_void};
use std::sync::Arc;

use crate::core::dtype::bufpool::Bytes;
use crate::core::dtype::flat::{self, Flat};
use crate::core::dtype::pack::{self, Dir};
use crate::platform::abi::*;
use crate::platform::mpi::{self, MpiResult};

/// Mean contiguous run (bytes) under which the shim packs a message of any size (see the
/// module docs).
pub const SHORT_RUN: i64 = 256;

/// The layout of `count` elements of `dt` if the shim should pack them for a message.
pub(crate) fn eligible(count: i64, dt: MPI_Datatype, peer: c_int) -> Option<Arc<Flat>> {
    if count <= 0 || peer == MPI_PROC_NULL || is_predefined_datatype(dt) {
        return None;
    }
    let f = flat::get(dt).ok()?;
    if !worth_packing(count, &f) {
        return None;
    }
    // an uncommitted type is an error the system MPI reports
    crate::core::dtype::check_usable(dt).ok()?;
    Some(f)
}

/// The size rule of [`eligible`] for `count` elements of layout `f`: never a contiguous
/// layout (one copy is all the system MPI needs); from `SHIM_PACK_MIN_BYTES` on; below
/// that only when the runs are short (mean under [`SHORT_RUN`]).
fn worth_packing(count: i64, f: &Flat) -> bool {
    let Some(bytes) = count.checked_mul(f.size) else {
        return false;
    };
    let short_runs = f.mean_run() < SHORT_RUN;
    f.contiguous.is_none() && (bytes >= super::pool::min_bytes() || short_runs)
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
) -> Option<Bytes> {
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
    pub buf: Bytes,
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
            buf: Bytes::new((count * flat.size) as usize),
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
        // SAFETY: a status the receive filled. A failure leaves nothing to unpack.
        let got = mpi::p2p::get_count_c(unsafe { &*st }, MPI_BYTE()).unwrap_or(0);
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
    /// The send of an `MPI_Isendrecv`, posted as a receive (`native`) and a send; else
    /// null.
    send_native: MPI_Request,
    /// The packed message: filled at start (a send) or unpacked at completion (a
    /// receive). `None` for an `MPI_Isendrecv` whose receive side is not packed.
    msg: Option<PackedBuf>,
    /// An `MPI_Isendrecv`'s packed send bytes, kept until the request completes.
    keep: Option<Bytes>,
    /// The application's buffer.
    user: usize,
    active: bool,
    done: bool,
    status: MPI_Status,
    error: c_int,
    /// What the request's completion finishes on the shim's side (an emulated call's
    /// last step); run once, unless the request failed or was cancelled.
    then: Option<Box<dyn FnOnce() + Send>>,
}

// SAFETY: `user` is the address of the application's buffer, which MPI requires to stay
// valid until the request completes; everything else is owned. Access is serialized by
// the mutex.
unsafe impl Send for Inner {}

/// How a packed request's system MPI request is made from (bytes, byte count): the `_c`
/// non-blocking or persistent call with `MPI_PACKED` and the application's peer, tag and
/// communicator.
pub type Post<'a> = &'a dyn Fn(*mut c_void, MPI_Count) -> MpiResult<MPI_Request>;

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
        let native = match post(msg.ptr(), msg.len()) {
            Ok(r) => r,
            Err(e) => return Some(Err(e.code())),
        };
        Some(Ok(Self::made(
            [native, MPI_REQUEST_NULL()],
            Some(msg),
            None,
            user,
            recv,
            persistent,
        )))
    }

    /// An `MPI_Isendrecv(_replace)` with its send side (`out`, already packed) or its
    /// receive side (`inc`, unpacked into `user` at completion) packed by the shim, or
    /// neither. `post` makes the system MPI's requests (a receive, then a send) from the
    /// packed (pointer, byte count) of each side, `None` for a side sent as asked; its
    /// error code is returned unchanged.
    ///
    /// # Safety
    /// `user` is the receive buffer for `inc`'s elements, valid until completion.
    pub unsafe fn sendrecv(
        mut out: Option<Bytes>,
        mut inc: Option<PackedBuf>,
        user: *mut c_void,
        post: impl FnOnce(
            Option<(*const c_void, MPI_Count)>,
            Option<(*mut c_void, MPI_Count)>,
        ) -> MpiResult<[MPI_Request; 2]>,
    ) -> Result<Arc<PackedReq>, c_int> {
        let o = out
            .as_mut()
            .map(|p| (p.as_ptr().cast::<c_void>(), p.len() as MPI_Count));
        let i = inc.as_mut().map(|m| (m.ptr(), m.len()));
        let natives = post(o, i).map_err(|e| e.code())?;
        Ok(Self::made(natives, inc, out, user, true, false))
    }

    /// The system MPI's non-blocking request `native` as a shim request that runs `then`
    /// when it completes successfully: a call the library lacks, emulated by one it has
    /// and a last step (`MPI_Comm_idup_with_info` on MPI-3's `MPI_Comm_idup`).
    pub fn then(native: MPI_Request, then: Box<dyn FnOnce() + Send>) -> Arc<PackedReq> {
        let null = core::ptr::null_mut();
        let p = Self::made([native, MPI_REQUEST_NULL()], None, None, null, false, false);
        p.lock().then = Some(then);
        p
    }

    /// Unit tests (`core::request`): a request over the system MPI's request `native`,
    /// with no packed message.
    #[cfg(test)]
    pub(crate) fn for_tests(native: MPI_Request, recv: bool, persistent: bool) -> Arc<PackedReq> {
        let null = core::ptr::null_mut();
        Self::made(
            [native, MPI_REQUEST_NULL()],
            None,
            None,
            null,
            recv,
            persistent,
        )
    }

    fn made(
        [native, send_native]: [MPI_Request; 2],
        msg: Option<PackedBuf>,
        keep: Option<Bytes>,
        user: *mut c_void,
        recv: bool,
        persistent: bool,
    ) -> Arc<PackedReq> {
        Arc::new(PackedReq {
            inner: std::sync::Mutex::new(Inner {
                native,
                send_native,
                msg,
                keep,
                user: user as usize,
                active: !persistent,
                done: false,
                status: MPI_Status::default(),
                error: MPI_SUCCESS,
                then: None,
            }),
            recv,
            persistent,
        })
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
        let inner = &mut *g;
        if inner.send_native != MPI_REQUEST_NULL() {
            // SAFETY: our started send (set to null when it completes); no status.
            match unsafe { mpi::p2p::test_status(&mut inner.send_native, MPI_STATUS_IGNORE) } {
                Err(e) => {
                    inner.error = e.code();
                    inner.done = true;
                    return true;
                }
                Ok(false) => return false,
                Ok(true) => {}
            }
        }
        // SAFETY: our started request; a status we own.
        match unsafe { mpi::p2p::test_status(&mut inner.native, &mut inner.status) } {
            Err(e) => {
                inner.error = e.code();
                inner.done = true;
                return true;
            }
            Ok(false) => return false,
            Ok(true) => {}
        }
        // a failure reads as not cancelled
        let cancelled = mpi::p2p::test_cancelled(&inner.status).unwrap_or(false);
        if let (true, false, Some(msg)) = (self.recv, cancelled, &inner.msg) {
            // SAFETY: the application's receive buffer (valid until completion, which is
            // now) and the completed status.
            unsafe { msg.finish(inner.user as *mut c_void, &inner.status) };
        }
        if let (false, Some(then)) = (cancelled, inner.then.take()) {
            then();
        }
        inner.keep = None;
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
            if let Some(msg) = inner.msg.as_mut() {
                // SAFETY: the application's send buffer, valid while the request is active.
                unsafe { msg.pack_from(inner.user as *const c_void) };
            }
        }
        match mpi::p2p::start(&mut g.native) {
            Ok(()) => {
                g.active = true;
                g.done = false;
                MPI_SUCCESS
            }
            Err(e) => e.code(),
        }
    }

    /// `MPI_Cancel` of the system MPI's request.
    pub fn cancel(&self) -> c_int {
        let mut g = self.lock();
        if g.send_native != MPI_REQUEST_NULL() {
            let _ = mpi::p2p::cancel(&mut g.send_native);
        }
        mpi::p2p::cancel(&mut g.native).map_or_else(|e| e.code(), |()| MPI_SUCCESS)
    }

    /// Frees the system MPI's request of an inactive persistent request.
    pub fn release(&self) -> c_int {
        let mut g = self.lock();
        if g.native == MPI_REQUEST_NULL() {
            return MPI_SUCCESS;
        }
        mpi::p2p::request_free(&mut g.native).map_or_else(|e| e.code(), |()| MPI_SUCCESS)
    }
}
/// The peer a matched message counts as for `eligible`: none for the message of a probe of
/// `MPI_PROC_NULL`, which receives nothing.
///
/// # Safety
/// `m` is the application's message handle pointer.
pub(crate) unsafe fn message_peer(m: *const MPI_Message) -> c_int {
    // SAFETY: the caller's handle.
    if m.is_null() || unsafe { *m } == MPI_MESSAGE_NO_PROC() {
        MPI_PROC_NULL
    } else {
        0
    }
}

/// `n` elements of `t` at `b` copied into packed bytes (`MPI_Pack`): the send side of a
/// Sendrecv_replace that the receive will overwrite, where the library cannot do it.
///
/// # Safety
/// `b` holds `n` elements of `t`.
pub(crate) unsafe fn copy_packed(
    b: *const c_void,
    n: MPI_Count,
    t: MPI_Datatype,
    c: MPI_Comm,
) -> Result<Bytes, c_int> {
    let size = mpi::dtype::pack_size_c(n, t, c).map_err(|e| e.code())?;
    let mut v = Bytes::new(size.max(0) as usize);
    let mut pos: MPI_Count = 0;
    // SAFETY: the caller's buffer; `v` holds `size` bytes, what MPI_Pack_size asked for.
    unsafe { mpi::dtype::pack_c(b, n, t, &mut v, &mut pos, c) }.map_err(|e| e.code())?;
    v.truncate(pos.max(0) as usize);
    Ok(v)
}

/// An `MPI_Isendrecv(_replace)` as a shim request: a receive and a send (what a
/// Sendrecv is, MPI-4.0 §3.10), either side packed by the shim when its datatype
/// qualifies. The system MPI's own `MPI_Isendrecv` is not used: Debian's MPICH 4.0.2
/// completes it with a status whose count is 0 and whose tag is stale (found by
/// ctests/pack_types), and Open MPI 4.x has none. For `_replace` (`replace`) the send side
/// is packed or copied before the receive is posted.
///
/// # Safety
/// The application's Isendrecv arguments.
pub(crate) unsafe fn isendrecv(
    (sb, sn, stt, d, sg): (*const c_void, i64, MPI_Datatype, c_int, c_int),
    (rb, rn, rt, s, rg): (*mut c_void, i64, MPI_Datatype, c_int, c_int),
    c: MPI_Comm,
    replace: bool,
) -> Option<Result<Arc<PackedReq>, c_int>> {
    // SAFETY: the application's send buffer.
    let mut out = unsafe { outgoing(sb, sn, stt, d) };
    let inc = incoming(rn, rt, s);
    if replace && out.is_none() && d != MPI_PROC_NULL {
        // SAFETY: the application's buffer.
        match unsafe { copy_packed(sb, sn, stt, c) } {
            Ok(v) => out = Some(v),
            Err(rc) => return Some(Err(rc)),
        }
    }
    let post = |o: Option<(*const c_void, MPI_Count)>, i: Option<(*mut c_void, MPI_Count)>| {
        let (sb, sn, stt) = o.map_or((sb, sn, stt), |(p, n)| (p, n, MPI_PACKED()));
        let (rb, rn, rt) = i.map_or((rb, rn, rt), |(p, n)| (p, n, MPI_PACKED()));
        // SAFETY: the application's or our packed buffers, alive until completion.
        let mut recv = unsafe { mpi::p2p::irecv_c(rb, rn, rt, s, rg, c) }?;
        // SAFETY: as above.
        match unsafe { mpi::p2p::isend_c(sb, sn, stt, d, sg, c) } {
            Ok(send) => Ok([recv, send]),
            Err(e) => {
                // an invalid send side (a wrong tag, rank, ...): the call fails as a whole,
                // and its receive must not stay posted to take a later message
                let _ = mpi::p2p::cancel(&mut recv);
                let _ = mpi::p2p::request_free(&mut recv);
                Err(e)
            }
        }
    };
    // SAFETY: the receive buffer stays valid until the request completes (MPI rule).
    Some(unsafe { PackedReq::sendrecv(out, inc, rb, post) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::dtype::flat::Node;
    use crate::platform::mpi::fake;

    /// `MPI_STATUS_IGNORE` as the fake records it.
    fn ignored() -> i64 {
        MPI_STATUS_IGNORE as i64
    }

    /// A fake that answers nothing: any MPI call fails (and is recorded).
    fn no_mpi() -> fake::Guard {
        fake::install(|_| Err(MPI_ERR_OTHER))
    }

    /// One element of `blocks` runs of `len` bytes every `stride` bytes (an
    /// `MPI_Type_vector` of bytes), its extent ending at the last run.
    fn vector(blocks: i64, len: i64, stride: i64) -> Arc<Flat> {
        let body = Node::Run { off: 0, len };
        let node = Node::Loop {
            off: 0,
            count: blocks,
            stride,
            body: Arc::new(body),
            bsize: len,
        };
        Arc::new(Flat::new(node, (blocks - 1) * stride + len))
    }

    /// The packed bytes of `count` elements of `flat`, as `PackedBuf::new` makes them.
    fn packed(flat: Arc<Flat>, count: i64) -> PackedBuf {
        PackedBuf {
            buf: Bytes::new((count * flat.size) as usize),
            flat,
            count,
        }
    }

    #[test]
    fn predefined_types_and_empty_messages_are_not_packed_and_ask_nothing() {
        let _g = no_mpi();
        let big = 1 << 30;
        for (count, dt, peer) in [
            (0, MPI_BYTE(), 1),
            (-1, MPI_INT(), 1),
            (big, MPI_DOUBLE(), 1),
            (big, MPI_INT(), 0),
            (1, MPI_PACKED(), 2),
            // nothing goes to or comes from MPI_PROC_NULL, whatever the type
            (4, MPI_DATATYPE_NULL(), MPI_PROC_NULL),
        ] {
            assert!(eligible(count, dt, peer).is_none(), "{count} {dt} {peer}");
            assert!(incoming(count, dt, peer).is_none());
            let buf = [0u8; 8];
            // SAFETY: never read: the message is not packed.
            assert!(unsafe { outgoing(buf.as_ptr().cast(), count, dt, peer) }.is_none());
            let post: Post = &|_, _| panic!("nothing is posted for a message the shim leaves");
            for (recv, persistent) in [(false, false), (true, false), (false, true)] {
                let b = buf.as_ptr() as *mut c_void;
                // SAFETY: as above.
                let made = unsafe { PackedReq::new(b, count, dt, peer, recv, persistent, post) };
                assert!(made.is_none());
            }
        }
        assert!(fake::calls().is_empty(), "{:?}", fake::names());
    }

    #[test]
    fn contiguous_layouts_are_never_packed() {
        let min = crate::core::dtype::pool::min_bytes();
        // a dense element, and one with a lower-bound gap but nothing between elements
        let dense = Arc::new(Flat::new(Node::Run { off: 0, len: 64 }, 64));
        let shifted = Arc::new(Flat::new(Node::Run { off: 8, len: 16 }, 16));
        for f in [dense, shifted] {
            assert!(f.contiguous.is_some());
            for count in [1, min, min * 1024] {
                assert!(!worth_packing(count, &f), "{count}");
            }
        }
    }

    #[test]
    fn short_runs_at_any_size_long_runs_from_the_threshold() {
        let min = crate::core::dtype::pool::min_bytes();
        // (layout, count, packed?)
        let short = vector(4, 8, 16); // 8-byte runs
        let edge = vector(2, SHORT_RUN, 2 * SHORT_RUN); // runs of exactly SHORT_RUN: long
        let long = vector(2, 512, 1024);
        let at = |f: &Flat| (min + f.size - 1) / f.size; // first count reaching `min` bytes
        let table = [
            (&short, 1, true),
            (&short, at(&short), true),
            (&edge, 1, false),
            (&edge, at(&edge) - 1, false),
            (&edge, at(&edge), true),
            (&long, 1, false),
            (&long, at(&long) - 1, false),
            (&long, at(&long), true),
            // a byte count that overflows is never packed
            (&short, i64::MAX, false),
        ];
        for (f, count, want) in table {
            assert_eq!(
                worth_packing(count, f),
                want,
                "runs of {} x {count}",
                f.mean_run()
            );
        }
    }

    #[test]
    fn copy_packed_sizes_packs_and_keeps_what_was_packed() {
        let _g = fake::install(|c| match c.name {
            "pack_size_c" => Ok(vec![100]),
            "pack_c" => Ok(vec![60]),
            _ => Err(MPI_ERR_OTHER),
        });
        let user = [7i32; 5];
        let comm = MPI_COMM_WORLD();
        // SAFETY: 5 ints.
        let v = unsafe { copy_packed(user.as_ptr().cast(), 5, MPI_INT(), comm) }.unwrap();
        assert_eq!(v.len(), 60, "truncated to the position MPI_Pack reached");
        let calls = fake::calls();
        assert_eq!(fake::names(), ["pack_size_c", "pack_c"]);
        assert_eq!(calls[0].args, [5, MPI_INT() as i64, comm as i64]);
        let user_at = user.as_ptr() as i64;
        // from position 0 into a buffer of the size MPI_Pack_size gave
        assert_eq!(
            calls[1].args,
            [user_at, 5, MPI_INT() as i64, 100, 0, comm as i64]
        );
    }

    #[test]
    fn copy_packed_errors_come_back_unchanged() {
        for (failing, code) in [("pack_size_c", MPI_ERR_TYPE), ("pack_c", MPI_ERR_TRUNCATE)] {
            let _g = fake::install(move |c| {
                if c.name == failing {
                    Err(code)
                } else {
                    Ok(vec![8])
                }
            });
            let user = [0u8; 8];
            // SAFETY: 8 bytes.
            let r = unsafe { copy_packed(user.as_ptr().cast(), 8, MPI_BYTE(), MPI_COMM_SELF()) };
            assert_eq!(r.err(), Some(code));
            assert_eq!(
                fake::names().last(),
                Some(&failing),
                "nothing after the failure"
            );
        }
    }

    /// The answers of a successful Isendrecv_replace of predefined data.
    fn replace_script(c: &fake::Call) -> Result<Vec<i64>, c_int> {
        match c.name {
            "pack_size_c" | "pack_c" => Ok(vec![20]),
            "irecv_c" => Ok(vec![0x111]),
            "isend_c" => Ok(vec![0x222]),
            "test" => Ok(vec![1, 4, 8]),
            "test_cancelled" => Ok(vec![0]),
            _ => Err(MPI_ERR_OTHER),
        }
    }

    #[test]
    fn isendrecv_replace_sends_a_packed_copy_to_the_peer_and_receives_as_asked() {
        let _g = fake::install(replace_script);
        let mut user = [1i32, 2, 3, 4, 5];
        let comm = MPI_COMM_WORLD();
        let b = user.as_mut_ptr().cast::<c_void>();
        // SAFETY: 5 ints, alive until the request completes below.
        let req =
            unsafe { isendrecv((b, 5, MPI_INT(), 3, 7), (b, 5, MPI_INT(), 4, 8), comm, true) }
                .expect("a shim request")
                .expect("posted");
        assert_eq!(
            fake::names(),
            ["pack_size_c", "pack_c", "irecv_c", "isend_c"]
        );
        let calls = fake::calls();
        let (recv, send) = (&calls[2].args, &calls[3].args);
        // the receive is the application's, unchanged; posted before the send
        assert_eq!(recv, &[b as i64, 5, MPI_INT() as i64, 4, 8, comm as i64]);
        // the send: the packed bytes (not the buffer the receive overwrites), MPI_PACKED
        assert_ne!(send[0], b as i64);
        assert_eq!(send[1..], [20, MPI_PACKED() as i64, 3, 7, comm as i64]);
        // completion: the send, then the receive with our status
        assert!(req.poke());
        let tests: Vec<_> = fake::calls()
            .into_iter()
            .filter(|c| c.name == "test")
            .collect();
        assert_eq!(tests[0].args, [0x222, ignored()]);
        assert_eq!(tests[1].args[0], 0x111);
        let mut st = MPI_Status {
            MPI_ERROR: 99,
            ..Default::default()
        };
        // SAFETY: a writable status.
        assert_eq!(unsafe { req.status_into(&mut st) }, MPI_SUCCESS);
        assert_eq!((st.MPI_SOURCE, st.MPI_TAG), (4, 8));
        assert_eq!(st.MPI_ERROR, 99, "MPI_ERROR is not the request's to write");
    }

    #[test]
    fn isendrecv_that_cannot_send_withdraws_its_receive() {
        let _g = fake::install(|c| match c.name {
            "irecv_c" => Ok(vec![0x111]),
            "isend_c" => Err(MPI_ERR_RANK),
            "cancel" | "request_free" => Ok(vec![]),
            _ => Err(MPI_ERR_OTHER),
        });
        let (mut rbuf, sbuf) = ([0i32; 2], [0i32; 2]);
        let comm = MPI_COMM_WORLD();
        let send = (sbuf.as_ptr().cast(), 2, MPI_INT(), 99, 1);
        let recv = (rbuf.as_mut_ptr().cast(), 2, MPI_INT(), 0, 1);
        // SAFETY: two ints each side.
        let r = unsafe { isendrecv(send, recv, comm, false) }.expect("a shim request");
        assert_eq!(r.err(), Some(MPI_ERR_RANK));
        assert_eq!(
            fake::names(),
            ["irecv_c", "isend_c", "cancel", "request_free"]
        );
        assert_eq!(fake::calls()[2].args, [0x111]);
        assert_eq!(fake::calls()[3].args, [0x111]);
    }

    #[test]
    fn isendrecv_that_cannot_receive_posts_no_send() {
        let _g = fake::install(|c| match c.name {
            "irecv_c" => Err(MPI_ERR_TAG),
            _ => Ok(vec![1]),
        });
        let (mut rbuf, sbuf) = ([0i32; 2], [0i32; 2]);
        let send = (sbuf.as_ptr().cast(), 2, MPI_INT(), 1, 1);
        let recv = (rbuf.as_mut_ptr().cast(), 2, MPI_INT(), 1, -5);
        // SAFETY: two ints each side.
        let r = unsafe { isendrecv(send, recv, MPI_COMM_WORLD(), false) }.unwrap();
        assert_eq!(r.err(), Some(MPI_ERR_TAG));
        assert_eq!(fake::names(), ["irecv_c"]);
    }

    /// Completes a packed receive of 2 elements of 3 four-byte runs every 8 bytes (extent
    /// 20) into a 40-byte buffer of 0xee, with `arrived` bytes counted by the status and
    /// `cancelled` as the status says; returns the buffer and the request.
    fn receive(arrived: i64, cancelled: bool) -> (Vec<u8>, Arc<PackedReq>) {
        let mut user = vec![0xeeu8; 40];
        let mut msg = packed(vector(3, 4, 8), 2);
        for (i, b) in msg.buf.iter_mut().enumerate() {
            *b = i as u8 + 1;
        }
        let null = MPI_REQUEST_NULL();
        let user_ptr = user.as_mut_ptr().cast();
        let req = PackedReq::made([0x10, null], Some(msg), None, user_ptr, true, false);
        let _g = fake::install(move |c| match c.name {
            "test" => Ok(vec![1, 5, 9]),
            "test_cancelled" => Ok(vec![cancelled as i64]),
            "get_count_c" => Ok(vec![arrived]),
            _ => Err(MPI_ERR_OTHER),
        });
        assert!(req.poke());
        (user, req)
    }

    #[test]
    fn a_packed_receive_unpacks_the_bytes_the_status_counts() {
        let (user, req) = receive(16, false);
        let e = 0xee;
        #[rustfmt::skip]
        let want = [
            1, 2, 3, 4, e, e, e, e, 5, 6, 7, 8, e, e, e, e, 9, 10, 11, 12,
            13, 14, 15, 16, e, e, e, e, e, e, e, e, e, e, e, e, e, e, e, e,
        ];
        assert_eq!(user, want, "16 bytes arrived: one element and a run");
        let mut st = MPI_Status::default();
        // SAFETY: a writable status.
        assert_eq!(unsafe { req.status_into(&mut st) }, MPI_SUCCESS);
        assert_eq!((st.MPI_SOURCE, st.MPI_TAG), (5, 9));
    }

    #[test]
    fn the_count_is_asked_in_bytes_and_clamped_to_the_buffer() {
        let (user, _) = receive(1000, false);
        assert_eq!(
            user.iter().filter(|&&b| b != 0xee).count(),
            24,
            "all 24 bytes, no more"
        );
        // the fake of `receive` is gone; check what it was asked on a fresh one
        let _g = fake::install(|c| match c.name {
            "get_count_c" => Ok(vec![0]),
            _ => Err(MPI_ERR_OTHER),
        });
        let msg = packed(vector(3, 4, 8), 1);
        let st = MPI_Status::default();
        let mut out = [0u8; 20];
        // SAFETY: a 20-byte buffer for one element; a status.
        unsafe { msg.finish(out.as_mut_ptr().cast(), &st) };
        assert_eq!(fake::calls()[0].args[2], MPI_BYTE() as i64);
        assert_eq!(out, [0; 20], "nothing arrived, nothing unpacked");
    }

    #[test]
    fn a_cancelled_receive_is_not_unpacked() {
        let (user, _) = receive(24, true);
        assert!(user.iter().all(|&b| b == 0xee));
    }

    #[test]
    fn a_failed_completion_keeps_its_code_and_unpacks_nothing() {
        let mut user = vec![0xeeu8; 20];
        let msg = packed(vector(3, 4, 8), 1);
        let null = MPI_REQUEST_NULL();
        let user_ptr = user.as_mut_ptr().cast();
        let req = PackedReq::made([0x10, null], Some(msg), None, user_ptr, true, false);
        let _g = fake::install(|c| match c.name {
            "test" => Err(MPI_ERR_TRUNCATE),
            _ => Ok(vec![]),
        });
        assert!(req.poke(), "an error completes the request");
        assert_eq!(fake::names(), ["test"]);
        // SAFETY: MPI_STATUS_IGNORE.
        assert_eq!(
            unsafe { req.status_into(MPI_STATUS_IGNORE) },
            MPI_ERR_TRUNCATE
        );
        assert!(user.iter().all(|&b| b == 0xee));
    }

    /// A request made by `PackedReq::then` over a fake whose test answers `test`, and how
    /// many times its last step ran after `pokes` pokes.
    fn then_runs(test: fn() -> Result<Vec<i64>, c_int>, pokes: usize) -> usize {
        let ran = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let r = Arc::clone(&ran);
        let req = PackedReq::then(
            0x10,
            Box::new(move || {
                r.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }),
        );
        let _g = fake::install(move |c| match c.name {
            "test" => test(),
            "test_cancelled" => Ok(vec![0]),
            _ => Err(MPI_ERR_OTHER),
        });
        for _ in 0..pokes {
            req.poke();
        }
        ran.load(std::sync::atomic::Ordering::SeqCst)
    }

    #[test]
    fn the_last_step_runs_once_when_the_request_completes() {
        assert_eq!(then_runs(|| Ok(vec![0]), 3), 0, "not before completion");
        assert_eq!(
            then_runs(|| Ok(vec![1, 0, 0]), 3),
            1,
            "once, however often poked"
        );
    }

    #[test]
    fn a_failed_request_skips_its_last_step() {
        assert_eq!(then_runs(|| Err(MPI_ERR_COMM), 2), 0);
    }

    #[test]
    fn an_unfinished_send_keeps_the_request_open() {
        let req = PackedReq::made([0x10, 0x20], None, None, core::ptr::null_mut(), true, false);
        let mut answers = vec![vec![0], vec![1], vec![0], vec![1], vec![0]].into_iter();
        let _g = fake::install(move |c| match c.name {
            "test" => Ok(answers.next().unwrap()),
            _ => Ok(vec![0]),
        });
        assert!(!req.poke(), "the send is not done");
        assert!(!req.poke(), "the send is done, the receive not");
        assert!(req.poke());
        let tested: Vec<i64> = fake::calls()
            .iter()
            .filter(|c| c.name == "test")
            .map(|c| c.args[0])
            .collect();
        // the send until it completes (then it is null and not tested again), then the receive
        assert_eq!(tested, [0x20, 0x20, 0x10, 0x10]);
    }

    #[test]
    fn a_persistent_send_packs_at_start() {
        let mut user: Vec<u8> = (0..20).collect();
        let msg = packed(vector(3, 4, 8), 1);
        let user_ptr = user.as_mut_ptr().cast();
        let req = PackedReq::made(
            [0x30, MPI_REQUEST_NULL()],
            Some(msg),
            None,
            user_ptr,
            false,
            true,
        );
        assert!(!req.is_active());
        // the buffer's contents at MPI_Start are what is sent (MPI-4.0 §3.9)
        user[0] = 100;
        let _g = fake::install(|c| match c.name {
            "start" => Ok(vec![]),
            _ => Err(MPI_ERR_OTHER),
        });
        assert_eq!(req.start(), MPI_SUCCESS);
        assert!(req.is_active());
        assert_eq!(fake::calls()[0].args, [0x30]);
        let g = req.lock();
        let bytes = &g.msg.as_ref().unwrap().buf[..];
        assert_eq!(bytes, [100, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19]);
        drop(g);
        assert_eq!(req.start(), MPI_ERR_REQUEST, "already active");
        assert_eq!(fake::names(), ["start"], "refused without asking MPI");
    }

    #[test]
    fn start_cancel_and_release_return_mpis_codes() {
        let req = PackedReq::made([0x30, 0x31], None, None, core::ptr::null_mut(), false, true);
        let _g = fake::install(|c| match c.name {
            "start" => Err(MPI_ERR_REQUEST),
            "cancel" if c.args[0] == 0x31 => Err(MPI_ERR_OTHER),
            "cancel" => Err(MPI_ERR_PENDING),
            "request_free" => Err(MPI_ERR_COMM),
            _ => Ok(vec![]),
        });
        assert_eq!(req.start(), MPI_ERR_REQUEST);
        assert!(!req.is_active(), "a failed start leaves it inactive");
        // both requests are cancelled; the code is the receive's (`native`)
        assert_eq!(req.cancel(), MPI_ERR_PENDING);
        assert_eq!(req.release(), MPI_ERR_COMM);
        assert_eq!(fake::names(), ["start", "cancel", "cancel", "request_free"]);
        // nothing to free for a null request
        let none = PackedReq::for_tests(MPI_REQUEST_NULL(), false, true);
        assert_eq!(none.release(), MPI_SUCCESS);
        assert_eq!(fake::names().len(), 4);
    }
}

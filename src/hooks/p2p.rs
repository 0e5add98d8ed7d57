//! Layer: hooks. May use: services, core, platform.
//!
//! Hooks of the point-to-point calls that the shim's packer may take
//! (`core::dtype::p2p`): the non-blocking and persistent sends and receives, whose
//! request handed back is the shim's when the message is packed, and the buffered sends.
#![allow(non_snake_case, clippy::missing_safety_doc, clippy::too_many_arguments)]

use core::ffi::{c_int, c_void};
use std::sync::Arc;

use crate::core::dtype::p2p::*;
use crate::platform::abi::*;
use crate::platform::mpi;

// Hooks (see `src/platform/abi/mpi_functions.txt`) for the non-blocking and persistent sends and
// receives: the message is packed by the shim when `PackedReq` takes it, and the request
// handed back is the shim's (see `crate::core::request`); otherwise the system MPI's.
use crate::platform::api::Fid;

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
            unsafe { *r = crate::core::request::insert_packed(p, comm, fid) };
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
            if r.is_null() {
                // the system MPI reports the missing request before anything is posted
                return native();
            }
            // SAFETY: the application's buffer, peer, tag and communicator; our bytes.
            let post: Post = &|pb, pn| unsafe { $post(pb, pn, MPI_PACKED(), d, g, c) };
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
            if r.is_null() {
                // the system MPI reports the missing request before anything is posted
                return native();
            }
            // SAFETY: the application's source, tag and communicator; our bytes.
            let post: Post = &|pb, pn| unsafe { $post(pb, pn, MPI_PACKED(), s, g, c) };
            // SAFETY: the application's receive buffer for n elements of t.
            let made = unsafe { PackedReq::new(b, n as i64, t, s, true, $persistent, post) };
            hand_out(made, c, Fid::$name, r, native)
        }
    };
}

send_hook!(MPI_Isend, c_int, mpi::p2p::isend_c, false);
send_hook!(MPI_Isend_c, MPI_Count, mpi::p2p::isend_c, false);
send_hook!(MPI_Issend, c_int, mpi::p2p::issend_c, false);
send_hook!(MPI_Issend_c, MPI_Count, mpi::p2p::issend_c, false);
send_hook!(MPI_Irsend, c_int, mpi::p2p::irsend_c, false);
send_hook!(MPI_Irsend_c, MPI_Count, mpi::p2p::irsend_c, false);
send_hook!(MPI_Send_init, c_int, mpi::p2p::send_init_c, true);
send_hook!(MPI_Send_init_c, MPI_Count, mpi::p2p::send_init_c, true);
send_hook!(MPI_Ssend_init, c_int, mpi::p2p::ssend_init_c, true);
send_hook!(MPI_Ssend_init_c, MPI_Count, mpi::p2p::ssend_init_c, true);
send_hook!(MPI_Rsend_init, c_int, mpi::p2p::rsend_init_c, true);
send_hook!(MPI_Rsend_init_c, MPI_Count, mpi::p2p::rsend_init_c, true);
recv_hook!(MPI_Irecv, c_int, mpi::p2p::irecv_c, false);
recv_hook!(MPI_Irecv_c, MPI_Count, mpi::p2p::irecv_c, false);
recv_hook!(MPI_Recv_init, c_int, mpi::p2p::recv_init_c, true);
recv_hook!(MPI_Recv_init_c, MPI_Count, mpi::p2p::recv_init_c, true);
// Buffered sends: the packed bytes are no larger than MPI_Pack_size of the
// application's (count, datatype), so they fit the space the application attached.
send_hook!(MPI_Ibsend, c_int, mpi::p2p::ibsend_c, false);
send_hook!(MPI_Ibsend_c, MPI_Count, mpi::p2p::ibsend_c, false);
send_hook!(MPI_Bsend_init, c_int, mpi::p2p::bsend_init_c, true);
send_hook!(MPI_Bsend_init_c, MPI_Count, mpi::p2p::bsend_init_c, true);

/// A matched receive: the probed message is received as `MPI_PACKED` bytes (which
/// matches any message, MPI-4.0 §5.2.1) and unpacked at completion.
macro_rules! mrecv_hook {
    ($name:ident, $n:ty) => {
        pub unsafe fn $name(
            b: *mut c_void,
            n: $n,
            t: MPI_Datatype,
            m: *mut MPI_Message,
            r: *mut MPI_Request,
            native: &dyn Fn() -> c_int,
        ) -> c_int {
            if r.is_null() {
                // the system MPI reports the missing request before anything is posted
                return native();
            }
            // SAFETY: the application's message handle; our bytes.
            let post: Post = &|pb, pn| unsafe { mpi::p2p::imrecv_c(pb, pn, MPI_PACKED(), m) };
            // SAFETY: the application's receive buffer and message handle.
            let made =
                unsafe { PackedReq::new(b, n as i64, t, message_peer(m), true, false, post) };
            hand_out(made, MPI_COMM_WORLD(), Fid::$name, r, native)
        }
    };
}
mrecv_hook!(MPI_Imrecv, c_int);
mrecv_hook!(MPI_Imrecv_c, MPI_Count);

/// `MPI_Isendrecv` and its `_c` form: a shim request holding the receive and the send.
macro_rules! isendrecv_hook {
    ($name:ident, $n:ty) => {
        pub unsafe fn $name(
            sb: *const c_void,
            sn: $n,
            stt: MPI_Datatype,
            d: c_int,
            sg: c_int,
            rb: *mut c_void,
            rn: $n,
            rt: MPI_Datatype,
            s: c_int,
            rg: c_int,
            c: MPI_Comm,
            r: *mut MPI_Request,
            native: &dyn Fn() -> c_int,
        ) -> c_int {
            if r.is_null() {
                // the system MPI reports the missing request before anything is posted
                return native();
            }
            // SAFETY: the application's arguments.
            let made = unsafe {
                isendrecv(
                    (sb, sn as i64, stt, d, sg),
                    (rb, rn as i64, rt, s, rg),
                    c,
                    false,
                )
            };
            hand_out(made, c, Fid::$name, r, native)
        }
    };
}
isendrecv_hook!(MPI_Isendrecv, c_int);
isendrecv_hook!(MPI_Isendrecv_c, MPI_Count);

/// `MPI_Isendrecv_replace` and its `_c` form: the send side is packed (copied) before
/// the receive may overwrite the buffer.
macro_rules! isendrecv_replace_hook {
    ($name:ident, $n:ty) => {
        pub unsafe fn $name(
            b: *mut c_void,
            n: $n,
            t: MPI_Datatype,
            d: c_int,
            sg: c_int,
            s: c_int,
            rg: c_int,
            c: MPI_Comm,
            r: *mut MPI_Request,
            native: &dyn Fn() -> c_int,
        ) -> c_int {
            if r.is_null() {
                // the system MPI reports the missing request before anything is posted
                return native();
            }
            let n = n as i64;
            if crate::core::dtype::null_buffer(b, n, t) {
                // copying the send side would read it (the system MPI reports it too)
                let why = "the buffer is NULL";
                return crate::platform::errors::raise(c, MPI_ERR_BUFFER, stringify!($name), why);
            }
            // SAFETY: the application's arguments.
            let made = unsafe { isendrecv((b, n, t, d, sg), (b, n, t, s, rg), c, true) };
            hand_out(made, c, Fid::$name, r, native)
        }
    };
}
isendrecv_replace_hook!(MPI_Isendrecv_replace, c_int);
isendrecv_replace_hook!(MPI_Isendrecv_replace_c, MPI_Count);

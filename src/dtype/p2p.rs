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
fn eligible(count: i64, dt: MPI_Datatype, peer: c_int) -> Option<Arc<Flat>> {
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
    let f = eligible(count, dt, dest)?;
    let mut out = vec![0u8; (count * f.size) as usize];
    // SAFETY: the caller's buffer; `out` holds count * size bytes.
    unsafe { pack::run(&f, count, buf as *mut u8, out.as_mut_ptr(), Dir::Pack) };
    Some(out)
}

/// A receive into a packed buffer, unpacked by `finish`.
pub struct Incoming {
    flat: Arc<Flat>,
    count: i64,
    pub buf: Vec<u8>,
}

/// A packed receive for `count` elements of `dt`, or `None` to receive as asked.
pub fn incoming(count: i64, dt: MPI_Datatype, source: c_int) -> Option<Incoming> {
    let f = eligible(count, dt, source)?;
    Some(Incoming {
        buf: vec![0u8; (count * f.size) as usize],
        flat: f,
        count,
    })
}

impl Incoming {
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
        unsafe { pmpi::PMPI_Get_count_c(st, MPI_BYTE, &mut got) };
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

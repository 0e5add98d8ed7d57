//! Layer: hooks. May use: services, core, platform.
//!
//! Hooks (see `src/platform/abi/mpi_functions.txt`): `MPI_Pack`/`MPI_Unpack` and their `_c` forms
//! on the shim's packer. Anything the packer does not take (predefined or contiguous
//! types, types it does not decode, arguments the system MPI must judge) is forwarded.
#![allow(non_snake_case, clippy::missing_safety_doc, clippy::too_many_arguments)]
use crate::platform::abi::*;
use core::ffi::{c_int, c_void};

use crate::core::dtype::*;
use core::ffi::{CStr, c_char};
use pack::Dir;

/// The packer's share of one Pack/Unpack call: `Some(bytes)` when it takes it.
fn plan(
    count: i64,
    dt: MPI_Datatype,
    position: i64,
    size: i64,
) -> Option<(std::sync::Arc<flat::Flat>, i64)> {
    if count < 0 || position < 0 || is_predefined_datatype(dt) {
        return None;
    }
    check_usable(dt).ok()?;
    let f = flat::get(dt).ok()?;
    let bytes = count.checked_mul(f.size)?;
    (position.checked_add(bytes)? <= size).then_some((f, bytes))
}

/// What a Pack/Unpack hook does with a call: the new position when the packer took
/// it, `Err(None)` to forward it, `Err(Some(class))` to raise that error.
type Step = Result<i64, Option<c_int>>;

/// Null buffers of a call that moves `bytes > 0` bytes: the packed buffer must exist
/// (the system MPI dereferences it and crashes; MPI-4.0 §5.2 names `MPI_ERR_BUFFER`);
/// a null user buffer is `MPI_BOTTOM`, valid with absolute addresses, so only one whose
/// data would start in the never-mapped first page is left to the system MPI to report.
fn null_buffers(
    user: *const c_void,
    packed: *const c_void,
    dt: MPI_Datatype,
    bytes: i64,
) -> Result<(), Option<c_int>> {
    if bytes <= 0 {
        return Ok(());
    }
    if packed.is_null() {
        return Err(Some(MPI_ERR_BUFFER));
    }
    if user.is_null() && info(dt).map_or(true, |i| i.true_lb < 4096) {
        return Err(None);
    }
    Ok(())
}

/// Bytes of data in `count` elements of `dt` (0 when either is invalid: the call is
/// then the system MPI's to judge).
fn moved(count: i64, dt: MPI_Datatype) -> i64 {
    info(dt).map_or(0, |i| count.saturating_mul(i.size))
}

unsafe fn pack_at(
    inbuf: *const c_void,
    incount: i64,
    dt: MPI_Datatype,
    outbuf: *mut c_void,
    outsize: i64,
    position: i64,
) -> Step {
    null_buffers(inbuf, outbuf, dt, moved(incount, dt))?;
    let (f, bytes) = plan(incount, dt, position, outsize).ok_or(None)?;
    // SAFETY: the application's buffers; the packed range fits in outsize.
    unsafe {
        pack::run(
            &f,
            incount,
            inbuf as *mut u8,
            (outbuf as *mut u8).add(position as usize),
            Dir::Pack,
        )
    };
    Ok(position + bytes)
}

unsafe fn unpack_at(
    inbuf: *const c_void,
    insize: i64,
    position: i64,
    outbuf: *mut c_void,
    outcount: i64,
    dt: MPI_Datatype,
) -> Step {
    null_buffers(outbuf, inbuf, dt, moved(outcount, dt))?;
    let (f, bytes) = plan(outcount, dt, position, insize).ok_or(None)?;
    // SAFETY: the application's buffers; the packed range lies within insize.
    unsafe {
        pack::run(
            &f,
            outcount,
            outbuf as *mut u8,
            (inbuf as *mut u8).add(position as usize),
            Dir::Unpack,
        )
    };
    Ok(position + bytes)
}

/// The position bookkeeping shared by the four hooks: `step` maps the position to the
/// new one when the packer takes the call; otherwise (or for arguments the system MPI
/// must judge) the call is forwarded. The new position never exceeds the buffer size,
/// which has the position's own type, so the conversion back cannot fail.
/// `comm` is `None` for the external forms, which take no communicator (their errors
/// are raised as the system MPI raises them, on `MPI_COMM_WORLD`'s handler).
unsafe fn at_position<P: Copy + Into<i64> + TryFrom<i64>>(
    position: *mut P,
    comm: Option<MPI_Comm>,
    function: &str,
    native: &dyn Fn() -> c_int,
    step: impl FnOnce(i64) -> Step,
) -> c_int {
    if position.is_null() || comm.is_some_and(|c| !crate::core::comm::valid(c)) {
        return native();
    }
    // SAFETY: the application's position.
    let step = step(unsafe { *position }.into());
    match step.map(|p| P::try_from(p).ok()) {
        Ok(Some(p)) => {
            // SAFETY: as above.
            unsafe { *position = p };
            MPI_SUCCESS
        }
        Ok(None) | Err(None) => native(),
        Err(Some(class)) => {
            let why = "the packed buffer is NULL";
            match comm {
                Some(c) => crate::platform::errors::raise(c, class, function, why),
                None => crate::platform::errors::raise_no_object(class, function, why),
            }
        }
    }
}

pub unsafe fn MPI_Pack(
    inbuf: *const c_void,
    incount: c_int,
    dt: MPI_Datatype,
    outbuf: *mut c_void,
    outsize: c_int,
    position: *mut c_int,
    comm: MPI_Comm,
    native: &dyn Fn() -> c_int,
) -> c_int {
    // SAFETY: the application's buffers.
    unsafe {
        at_position(position, Some(comm), "MPI_Pack", native, |p| {
            pack_at(inbuf, incount.into(), dt, outbuf, outsize.into(), p)
        })
    }
}

pub unsafe fn MPI_Pack_c(
    inbuf: *const c_void,
    incount: MPI_Count,
    dt: MPI_Datatype,
    outbuf: *mut c_void,
    outsize: MPI_Count,
    position: *mut MPI_Count,
    comm: MPI_Comm,
    native: &dyn Fn() -> c_int,
) -> c_int {
    // SAFETY: the application's buffers.
    unsafe {
        at_position(position, Some(comm), "MPI_Pack_c", native, |p| {
            pack_at(inbuf, incount, dt, outbuf, outsize, p)
        })
    }
}

pub unsafe fn MPI_Unpack(
    inbuf: *const c_void,
    insize: c_int,
    position: *mut c_int,
    outbuf: *mut c_void,
    outcount: c_int,
    dt: MPI_Datatype,
    comm: MPI_Comm,
    native: &dyn Fn() -> c_int,
) -> c_int {
    // SAFETY: the application's buffers.
    unsafe {
        at_position(position, Some(comm), "MPI_Unpack", native, |p| {
            unpack_at(inbuf, insize.into(), p, outbuf, outcount.into(), dt)
        })
    }
}

pub unsafe fn MPI_Unpack_c(
    inbuf: *const c_void,
    insize: MPI_Count,
    position: *mut MPI_Count,
    outbuf: *mut c_void,
    outcount: MPI_Count,
    dt: MPI_Datatype,
    comm: MPI_Comm,
    native: &dyn Fn() -> c_int,
) -> c_int {
    // SAFETY: the application's buffers.
    unsafe {
        at_position(position, Some(comm), "MPI_Unpack_c", native, |p| {
            unpack_at(inbuf, insize, p, outbuf, outcount, dt)
        })
    }
}

/// The byte-swap unit of elements of the predefined type `d` in the "external32"
/// representation (MPI-4.0 §14.5.2:
/// big-endian IEEE and two's complement), when that representation is the native bytes
/// with every unit reversed: an integer, logical, character or IEEE float type
/// (complex: two floats) for which the system MPI's own
/// `PMPI_Pack_external` of one element gives exactly those bytes (probed once per
/// type). Others are the system MPI's to convert: mixed structs; `MPI_LONG` and
/// `MPI_WCHAR`, which MPICH narrows to 4 and 2 bytes (Open MPI 4.1 narrows `MPI_LONG`
/// too, though its `MPI_Pack_external_size` says 8); long double and REAL16, whose
/// formats differ; pair types.
fn external32_unit(d: crate::platform::abi::Dt) -> Option<usize> {
    use crate::platform::abi::Dt::*;
    use std::sync::atomic::{AtomicU8, Ordering};
    /// Per predefined type: 0 not probed, 1 not taken, 2 + unit taken.
    static PROBED: [AtomicU8; 64] = [const { AtomicU8::new(0) }; 64];
    const _: () = assert!(crate::platform::abi::Dt::ALL.len() <= 64);
    let e = d.handle();
    let slot = PROBED.get(d as usize)?;
    match slot.load(Ordering::Relaxed) {
        0 => {}
        1 => return None,
        v => return Some(v as usize - 2),
    }
    let native = size_of(e)?;
    let unit = match d {
        CHAR | SIGNED_CHAR | UNSIGNED_CHAR | CHARACTER | BYTE | C_BOOL | CXX_BOOL | INT8_T
        | UINT8_T | INTEGER1 => 1,
        SHORT | UNSIGNED_SHORT | INT | UNSIGNED | LONG | UNSIGNED_LONG | LONG_LONG
        | UNSIGNED_LONG_LONG | INT16_T | INT32_T | INT64_T | UINT16_T | UINT32_T | UINT64_T
        | INTEGER | INTEGER2 | INTEGER4 | INTEGER8 | AINT | OFFSET | COUNT | FLOAT | DOUBLE
        | REAL | DOUBLE_PRECISION | REAL4 | REAL8 | LOGICAL => native,
        COMPLEX | DOUBLE_COMPLEX | C_FLOAT_COMPLEX | C_DOUBLE_COMPLEX | CXX_FLOAT_COMPLEX
        | CXX_DOUBLE_COMPLEX | COMPLEX8 | COMPLEX16 => native / 2,
        _ => 0,
    };
    let taken = unit > 0 && native <= 16 && native % unit == 0 && {
        // one element of bytes 1, 2, ..., through the system MPI
        let src: [u8; 16] = core::array::from_fn(|i| i as u8 + 1);
        let mut out = [0u8; 32];
        let mut pos: MPI_Aint = 0;
        // SAFETY: one element of at most 16 bytes read, at most 32 written.
        let rc = unsafe {
            crate::platform::api::pmpi::PMPI_Pack_external(
                c"external32".as_ptr(),
                src.as_ptr().cast(),
                1,
                e,
                out.as_mut_ptr().cast(),
                32,
                &mut pos,
            )
        };
        let mut want = src;
        want[..native].chunks_mut(unit).for_each(<[u8]>::reverse);
        rc == MPI_SUCCESS && pos == native as MPI_Aint && out[..native] == want[..native]
    };
    slot.store(if taken { 2 + unit as u8 } else { 1 }, Ordering::Relaxed);
    taken.then_some(unit)
}

/// Whether the application names the "external32" representation.
///
/// # Safety
/// `datarep` is null or a NUL-terminated string.
unsafe fn is_external32(datarep: *const c_char) -> bool {
    // SAFETY: the caller's contract.
    !datarep.is_null() && unsafe { CStr::from_ptr(datarep) }.to_bytes() == b"external32"
}

/// The layout of a usable `dt` and its external32 swap unit, when the packer converts
/// it: every basic element one predefined type that `external32_unit` takes.
fn external_layout(dt: MPI_Datatype) -> Option<(std::sync::Arc<flat::Flat>, usize)> {
    check_usable(dt).ok()?;
    let f = flat::get(dt).ok()?;
    let unit = external32_unit(f.element(dt)?)?;
    Some((f, unit))
}

/// The packer's share of one external32 call: the layout, the bytes and the unit.
unsafe fn external_plan(
    datarep: *const c_char,
    count: i64,
    dt: MPI_Datatype,
    position: i64,
    size: i64,
) -> Option<(std::sync::Arc<flat::Flat>, i64, usize)> {
    // SAFETY: the application's representation name.
    if !unsafe { is_external32(datarep) } || count < 0 || position < 0 {
        return None;
    }
    let (f, unit) = external_layout(dt)?;
    let bytes = count.checked_mul(f.size)?;
    (position.checked_add(bytes)? <= size).then_some((f, bytes, unit))
}

/// `MPI_Pack_external`/`MPI_Unpack_external` and `_c` (MPI-4.0 §5.2.3) on the shim's
/// packer, swapping to or from big-endian as it copies: `count` elements of `dt` at
/// `user`, the external32 bytes at `packed + position` (`psize` bytes in all). The
/// application's packed bytes are only read when unpacking. `None`: forwarded.
#[allow(clippy::too_many_arguments)]
unsafe fn external_at(
    datarep: *const c_char,
    user: *const c_void,
    count: i64,
    dt: MPI_Datatype,
    packed: *const c_void,
    psize: i64,
    position: i64,
    dir: Dir,
) -> Step {
    // SAFETY: the application's name.
    if count == 0 && position >= 0 && unsafe { external_size(datarep, 0, dt) } == Some(0) {
        return Ok(position);
    }
    // SAFETY: as above.
    null_buffers(user, packed, dt, moved(count, dt))?;
    let (f, bytes, unit) =
        unsafe { external_plan(datarep, count, dt, position, psize) }.ok_or(None)?;
    // SAFETY: the application's buffers; the packed range lies within psize.
    unsafe {
        let p = (packed as *mut u8).add(position as usize);
        pack::run_swapped(&f, count, user as *mut u8, p, dir, unit)
    };
    Ok(position + bytes)
}

pub unsafe fn MPI_Pack_external(
    datarep: *const c_char,
    inbuf: *const c_void,
    incount: c_int,
    dt: MPI_Datatype,
    outbuf: *mut c_void,
    outsize: MPI_Aint,
    position: *mut MPI_Aint,
    native: &dyn Fn() -> c_int,
) -> c_int {
    // SAFETY: the application's buffers.
    unsafe {
        at_position(position, None, "MPI_Pack_external", native, |p| {
            external_at(
                datarep,
                inbuf,
                incount.into(),
                dt,
                outbuf,
                outsize,
                p,
                Dir::Pack,
            )
        })
    }
}

pub unsafe fn MPI_Pack_external_c(
    datarep: *const c_char,
    inbuf: *const c_void,
    incount: MPI_Count,
    dt: MPI_Datatype,
    outbuf: *mut c_void,
    outsize: MPI_Count,
    position: *mut MPI_Count,
    native: &dyn Fn() -> c_int,
) -> c_int {
    // SAFETY: the application's buffers.
    unsafe {
        at_position(position, None, "MPI_Pack_external_c", native, |p| {
            external_at(datarep, inbuf, incount, dt, outbuf, outsize, p, Dir::Pack)
        })
    }
}

pub unsafe fn MPI_Unpack_external(
    datarep: *const c_char,
    inbuf: *const c_void,
    insize: MPI_Aint,
    position: *mut MPI_Aint,
    outbuf: *mut c_void,
    outcount: c_int,
    dt: MPI_Datatype,
    native: &dyn Fn() -> c_int,
) -> c_int {
    // SAFETY: the application's buffers.
    unsafe {
        at_position(position, None, "MPI_Unpack_external", native, |p| {
            external_at(
                datarep,
                outbuf,
                outcount.into(),
                dt,
                inbuf,
                insize,
                p,
                Dir::Unpack,
            )
        })
    }
}

pub unsafe fn MPI_Unpack_external_c(
    datarep: *const c_char,
    inbuf: *const c_void,
    insize: MPI_Count,
    position: *mut MPI_Count,
    outbuf: *mut c_void,
    outcount: MPI_Count,
    dt: MPI_Datatype,
    native: &dyn Fn() -> c_int,
) -> c_int {
    // SAFETY: the application's buffers.
    unsafe {
        at_position(position, None, "MPI_Unpack_external_c", native, |p| {
            external_at(datarep, outbuf, outcount, dt, inbuf, insize, p, Dir::Unpack)
        })
    }
}

/// `MPI_Pack_external_size`: for the types the packer converts, external32 is as long
/// as the native type size; a zero count is zero bytes for any valid type (Debian's
/// MPICH 4.0.2 stops with SIGILL on zero counts of some derived types). Otherwise, and
/// for other representations, the system MPI answers.
unsafe fn external_size(datarep: *const c_char, count: i64, dt: MPI_Datatype) -> Option<i64> {
    // SAFETY: the application's representation name.
    if !unsafe { is_external32(datarep) } || count < 0 {
        return None;
    }
    if count == 0 {
        return check_usable(dt).ok().map(|_| 0);
    }
    count.checked_mul(external_layout(dt)?.0.size)
}

/// Both forms of `MPI_Pack_external_size` (`MPI_Aint` and `MPI_Count` are both `i64`):
/// the size written when the shim knows it, else the system MPI's answer.
///
/// # Safety
/// As for `external_size`; `size` null or the application's out-pointer.
unsafe fn external_size_out(
    datarep: *const c_char,
    count: i64,
    dt: MPI_Datatype,
    size: *mut i64,
    native: &dyn Fn() -> c_int,
) -> c_int {
    // SAFETY: the application's name.
    match unsafe { external_size(datarep, count, dt) } {
        Some(n) if !size.is_null() => {
            // SAFETY: the application's out-pointer.
            unsafe { *size = n };
            MPI_SUCCESS
        }
        _ => native(),
    }
}

pub unsafe fn MPI_Pack_external_size(
    datarep: *const c_char,
    incount: c_int,
    dt: MPI_Datatype,
    size: *mut MPI_Aint,
    native: &dyn Fn() -> c_int,
) -> c_int {
    // SAFETY: the application's name and out-pointer.
    unsafe { external_size_out(datarep, incount.into(), dt, size, native) }
}

pub unsafe fn MPI_Pack_external_size_c(
    datarep: *const c_char,
    incount: MPI_Count,
    dt: MPI_Datatype,
    size: *mut MPI_Count,
    native: &dyn Fn() -> c_int,
) -> c_int {
    // SAFETY: the application's name and out-pointer.
    unsafe { external_size_out(datarep, incount, dt, size, native) }
}

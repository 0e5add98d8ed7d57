//! Layer: platform. May use: nothing.
//!
//! One-sided communication (MPI-4.0 chapter 12).

#[allow(unused_imports)]
use super::{MpiResult, check, fake_first};

use core::ffi::{c_int, c_void};

use crate::platform::abi::*;
use crate::platform::api::pmpi;

/// `MPI_Win_create` over `size` bytes at `base`.
///
/// # Safety
/// `base` is `size` bytes that stay valid, and are only accessed as MPI allows, until the
/// window is freed (MPI-4.0 §12.2.1).
pub unsafe fn create(
    base: *mut c_void,
    size: MPI_Aint,
    disp_unit: c_int,
    info: MPI_Info,
    comm: MPI_Comm,
) -> MpiResult<MPI_Win> {
    fake_first!(
        "win_create",
        [base as usize, size, disp_unit, info, comm],
        |v: Vec<i64>| v[0] as MPI_Win
    );
    let mut w: MPI_Win = MPI_WIN_NULL();
    // SAFETY: the caller's memory; a valid out-pointer.
    check(unsafe { pmpi::PMPI_Win_create(base, size, disp_unit, info, comm, &mut w) })?;
    Ok(w)
}

/// `MPI_Win_allocate` of `size` bytes; returns the window and its memory.
pub fn allocate(
    size: MPI_Aint,
    disp_unit: c_int,
    info: MPI_Info,
    comm: MPI_Comm,
) -> MpiResult<(MPI_Win, *mut c_void)> {
    fake_first!("win_allocate", [size, disp_unit, info, comm], |v: Vec<
        i64,
    >| (
        v[0] as MPI_Win,
        core::ptr::null_mut()
    ));
    let mut w: MPI_Win = MPI_WIN_NULL();
    let mut base: *mut c_void = core::ptr::null_mut();
    // SAFETY: valid out-pointers (baseptr is a `void **` in disguise, MPI-4.0 §12.2.2).
    check(unsafe {
        pmpi::PMPI_Win_allocate(
            size,
            disp_unit,
            info,
            comm,
            (&mut base as *mut *mut c_void).cast(),
            &mut w,
        )
    })?;
    Ok((w, base))
}

/// `MPI_Win_create_dynamic`.
pub fn create_dynamic(info: MPI_Info, comm: MPI_Comm) -> MpiResult<MPI_Win> {
    fake_first!("win_create_dynamic", [info, comm], |v: Vec<i64>| v[0]
        as MPI_Win);
    let mut w: MPI_Win = MPI_WIN_NULL();
    // SAFETY: a valid out-pointer; MPI reports a bad handle as an error.
    check(unsafe { pmpi::PMPI_Win_create_dynamic(info, comm, &mut w) })?;
    Ok(w)
}

/// `MPI_Win_attach`: exposes `size` bytes at `base` in the dynamic window `win`.
///
/// # Safety
/// `base` is `size` bytes that stay valid until they are detached (MPI-4.0 §12.2.4).
pub unsafe fn attach(win: MPI_Win, base: *mut c_void, size: MPI_Aint) -> MpiResult<()> {
    fake_first!("win_attach", [win, base as usize, size], |_v: Vec<i64>| ());
    // SAFETY: the caller's memory.
    check(unsafe { pmpi::PMPI_Win_attach(win, base, size) })
}

/// `MPI_Win_detach` of the region attached at `base`.
///
/// # Safety
/// `base` is the start of a region attached to `win` (MPI-4.0 §12.2.4); MPI stops
/// accessing it.
pub unsafe fn detach(win: MPI_Win, base: *const c_void) -> MpiResult<()> {
    fake_first!("win_detach", [win, base as usize], |_v: Vec<i64>| ());
    // SAFETY: the caller's attached region.
    check(unsafe { pmpi::PMPI_Win_detach(win, base) })
}

/// `MPI_Win_free`: `*win` becomes `MPI_WIN_NULL` on success.
pub fn free(win: &mut MPI_Win) -> MpiResult<()> {
    fake_first!("win_free", [*win], |_v: Vec<i64>| *win = MPI_WIN_NULL());
    // SAFETY: a valid handle pointer.
    check(unsafe { pmpi::PMPI_Win_free(win) })
}

/// Whether the system MPI accepts `win` as a window (a null, garbage or freed handle is
/// not: it then reports the error itself; the real world returns errors, `errors.rs`).
pub fn valid(win: MPI_Win) -> bool {
    #[cfg(test)]
    if let Some(r) = super::fake::answer("win_valid", &[win as i64]) {
        return r.is_ok();
    }
    if win == MPI_WIN_NULL() {
        return false;
    }
    let mut eh: MPI_Errhandler = MPI_ERRHANDLER_NULL();
    // SAFETY: a valid out-pointer; an invalid window yields an error code.
    if unsafe { pmpi::PMPI_Win_get_errhandler(win, &mut eh) } != MPI_SUCCESS {
        return false;
    }
    // SAFETY: the reference MPI_Win_get_errhandler returned.
    unsafe { pmpi::PMPI_Errhandler_free(&mut eh) };
    true
}

/// `MPI_Win_lock`.
pub fn lock(lock_type: c_int, rank: c_int, assert: c_int, win: MPI_Win) -> MpiResult<()> {
    fake_first!("win_lock", [lock_type, rank, assert, win], |_v: Vec<
        i64,
    >| ());
    // SAFETY: plain values; MPI reports a bad handle as an error.
    check(unsafe { pmpi::PMPI_Win_lock(lock_type, rank, assert, win) })
}

/// `MPI_Win_unlock`.
pub fn unlock(rank: c_int, win: MPI_Win) -> MpiResult<()> {
    fake_first!("win_unlock", [rank, win], |_v: Vec<i64>| ());
    // SAFETY: plain values; MPI reports a bad handle as an error.
    check(unsafe { pmpi::PMPI_Win_unlock(rank, win) })
}

/// `MPI_Win_lock_all`.
pub fn lock_all(assert: c_int, win: MPI_Win) -> MpiResult<()> {
    fake_first!("win_lock_all", [assert, win], |_v: Vec<i64>| ());
    // SAFETY: plain values; MPI reports a bad handle as an error.
    check(unsafe { pmpi::PMPI_Win_lock_all(assert, win) })
}

/// `MPI_Win_unlock_all`.
pub fn unlock_all(win: MPI_Win) -> MpiResult<()> {
    fake_first!("win_unlock_all", [win], |_v: Vec<i64>| ());
    // SAFETY: a plain handle; MPI reports a bad one as an error.
    check(unsafe { pmpi::PMPI_Win_unlock_all(win) })
}

/// `MPI_Win_flush`.
pub fn flush(rank: c_int, win: MPI_Win) -> MpiResult<()> {
    fake_first!("win_flush", [rank, win], |_v: Vec<i64>| ());
    // SAFETY: plain values; MPI reports a bad handle as an error.
    check(unsafe { pmpi::PMPI_Win_flush(rank, win) })
}

/// `MPI_Win_flush_local`.
pub fn flush_local(rank: c_int, win: MPI_Win) -> MpiResult<()> {
    fake_first!("win_flush_local", [rank, win], |_v: Vec<i64>| ());
    // SAFETY: plain values; MPI reports a bad handle as an error.
    check(unsafe { pmpi::PMPI_Win_flush_local(rank, win) })
}

/// `MPI_Win_flush_all`.
pub fn flush_all(win: MPI_Win) -> MpiResult<()> {
    fake_first!("win_flush_all", [win], |_v: Vec<i64>| ());
    // SAFETY: a plain handle; MPI reports a bad one as an error.
    check(unsafe { pmpi::PMPI_Win_flush_all(win) })
}

/// `MPI_Win_flush_local_all`.
pub fn flush_local_all(win: MPI_Win) -> MpiResult<()> {
    fake_first!("win_flush_local_all", [win], |_v: Vec<i64>| ());
    // SAFETY: a plain handle; MPI reports a bad one as an error.
    check(unsafe { pmpi::PMPI_Win_flush_local_all(win) })
}

/// `MPI_Win_sync`.
pub fn sync(win: MPI_Win) -> MpiResult<()> {
    fake_first!("win_sync", [win], |_v: Vec<i64>| ());
    // SAFETY: a plain handle; MPI reports a bad one as an error.
    check(unsafe { pmpi::PMPI_Win_sync(win) })
}

/// `MPI_Fetch_and_op` of one element of `dt`. In unit tests the fake's first word is the
/// target's previous value, stored at `result` as an int64 when `dt` is `MPI_INT64_T`.
///
/// # Safety
/// One element of `dt` at `origin` and at `result`, both valid until the operation
/// completes (a flush or the end of the epoch, MPI-4.0 §12.5): `result` is written then.
pub unsafe fn fetch_and_op(
    origin: *const c_void,
    result: *mut c_void,
    dt: MPI_Datatype,
    target: c_int,
    disp: MPI_Aint,
    op: MPI_Op,
    win: MPI_Win,
) -> MpiResult<()> {
    fake_first!(
        "fetch_and_op",
        [
            // SAFETY: (tests) the caller's int64 origin.
            if dt == MPI_INT64_T() {
                unsafe { *origin.cast::<i64>() }
            } else {
                0
            },
            dt,
            target,
            disp,
            op,
            win
        ],
        |v: Vec<i64>| if let (Some(&old), true) = (v.first(), dt == MPI_INT64_T()) {
            // SAFETY: (tests) the caller's int64 result.
            unsafe { *result.cast::<i64>() = old }
        }
    );
    // SAFETY: the caller's buffers.
    check(unsafe { pmpi::PMPI_Fetch_and_op(origin, result, dt, target, disp, op, win) })
}

/// `MPI_Compare_and_swap` of one element of `dt`. In unit tests the fake's first word is
/// the target's previous value, stored at `result` as an int64 when `dt` is `MPI_INT64_T`.
///
/// # Safety
/// One element of `dt` at `origin`, `compare` and `result`, all valid until the
/// operation completes (a flush or the end of the epoch, MPI-4.0 §12.5).
pub unsafe fn compare_and_swap(
    origin: *const c_void,
    compare: *const c_void,
    result: *mut c_void,
    dt: MPI_Datatype,
    target: c_int,
    disp: MPI_Aint,
    win: MPI_Win,
) -> MpiResult<()> {
    fake_first!(
        "compare_and_swap",
        [
            // SAFETY: (tests) the caller's int64 origin and compare values.
            if dt == MPI_INT64_T() {
                unsafe { *origin.cast::<i64>() }
            } else {
                0
            },
            if dt == MPI_INT64_T() {
                unsafe { *compare.cast::<i64>() }
            } else {
                0
            },
            dt,
            target,
            disp,
            win
        ],
        |v: Vec<i64>| if let (Some(&old), true) = (v.first(), dt == MPI_INT64_T()) {
            // SAFETY: (tests) the caller's int64 result.
            unsafe { *result.cast::<i64>() = old }
        }
    );
    // SAFETY: the caller's buffers.
    check(unsafe { pmpi::PMPI_Compare_and_swap(origin, compare, result, dt, target, disp, win) })
}

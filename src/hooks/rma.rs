//! Layer: hooks. May use: services, core, platform.
//!
//! Hooks of the table entries marked `ghost`: window creation and epochs. Each handles a
//! ghost-served window and forwards everything else unchanged (`native`).
//!
//! Safety of every hook: the arguments are the application's, passed on unchanged by the
//! generated entry point; pointers are only dereferenced as the MPI standard defines them.
#![allow(non_snake_case, clippy::missing_safety_doc, clippy::too_many_arguments)]

use core::ffi::{c_int, c_void};

use crate::platform::abi::*;
use crate::platform::api::pmpi;
use crate::services::ghost::win;

type Native<'a> = &'a dyn Fn() -> c_int;

pub unsafe fn MPI_Win_allocate(
    size: MPI_Aint,
    disp_unit: c_int,
    info: MPI_Info,
    comm: MPI_Comm,
    baseptr: *mut c_void,
    w: *mut MPI_Win,
    native: Native,
) -> c_int {
    win::allocate(size, disp_unit as i64, info, comm, baseptr, w).or_native(native)
}

pub unsafe fn MPI_Win_allocate_c(
    size: MPI_Aint,
    disp_unit: MPI_Aint,
    info: MPI_Info,
    comm: MPI_Comm,
    baseptr: *mut c_void,
    w: *mut MPI_Win,
    native: Native,
) -> c_int {
    if disp_unit > c_int::MAX as MPI_Aint {
        return native();
    }
    win::allocate(size, disp_unit, info, comm, baseptr, w).or_native(native)
}

/// Windows the ghosts cannot serve (their memory is the application's, which a ghost
/// cannot map; thesis §4.4) are forwarded.
fn unserved(what: &str) {
    if crate::platform::proc::ghosts_active() {
        tracing::debug!(target: "shim::ghost", "{what}: forwarded; only MPI_Win_allocate windows get asynchronous progress from ghosts");
    }
}

pub unsafe fn MPI_Win_create(
    _base: *mut c_void,
    _size: MPI_Aint,
    _disp_unit: c_int,
    _info: MPI_Info,
    _comm: MPI_Comm,
    _win: *mut MPI_Win,
    native: Native,
) -> c_int {
    unserved("MPI_Win_create");
    native()
}

pub unsafe fn MPI_Win_create_c(
    _base: *mut c_void,
    _size: MPI_Aint,
    _disp_unit: MPI_Aint,
    _info: MPI_Info,
    _comm: MPI_Comm,
    _win: *mut MPI_Win,
    native: Native,
) -> c_int {
    unserved("MPI_Win_create_c");
    native()
}

pub unsafe fn MPI_Win_create_dynamic(
    _info: MPI_Info,
    _comm: MPI_Comm,
    _win: *mut MPI_Win,
    native: Native,
) -> c_int {
    unserved("MPI_Win_create_dynamic");
    native()
}

pub unsafe fn MPI_Win_allocate_shared(
    _size: MPI_Aint,
    _disp_unit: c_int,
    _info: MPI_Info,
    _comm: MPI_Comm,
    _baseptr: *mut c_void,
    _win: *mut MPI_Win,
    native: Native,
) -> c_int {
    unserved("MPI_Win_allocate_shared");
    native()
}

pub unsafe fn MPI_Win_allocate_shared_c(
    _size: MPI_Aint,
    _disp_unit: MPI_Aint,
    _info: MPI_Info,
    _comm: MPI_Comm,
    _baseptr: *mut c_void,
    _win: *mut MPI_Win,
    native: Native,
) -> c_int {
    unserved("MPI_Win_allocate_shared_c");
    native()
}

pub unsafe fn MPI_Win_free(w: *mut MPI_Win, native: Native) -> c_int {
    win::free(w).or_native(native)
}

pub unsafe fn MPI_Win_fence(assert: c_int, w: MPI_Win, native: Native) -> c_int {
    win::fence(assert, w).or_native(native)
}

pub unsafe fn MPI_Win_post(group: MPI_Group, assert: c_int, w: MPI_Win, native: Native) -> c_int {
    win::post(group, assert, w).or_native(native)
}

pub unsafe fn MPI_Win_start(group: MPI_Group, assert: c_int, w: MPI_Win, native: Native) -> c_int {
    win::start(group, assert, w).or_native(native)
}

pub unsafe fn MPI_Win_complete(w: MPI_Win, native: Native) -> c_int {
    win::complete(w).or_native(native)
}

pub unsafe fn MPI_Win_wait(w: MPI_Win, native: Native) -> c_int {
    win::wait(w).or_native(native)
}

pub unsafe fn MPI_Win_test(w: MPI_Win, flag: *mut c_int, native: Native) -> c_int {
    win::test(w, flag).or_native(native)
}

pub unsafe fn MPI_Win_lock(
    lock_type: c_int,
    rank: c_int,
    assert: c_int,
    w: MPI_Win,
    native: Native,
) -> c_int {
    win::lock(lock_type, rank, assert, w).or_native(native)
}

pub unsafe fn MPI_Win_unlock(rank: c_int, w: MPI_Win, native: Native) -> c_int {
    win::unlock(rank, w).or_native(native)
}

pub unsafe fn MPI_Win_lock_all(assert: c_int, w: MPI_Win, native: Native) -> c_int {
    win::lock_all(assert, w).or_native(native)
}

pub unsafe fn MPI_Win_unlock_all(w: MPI_Win, native: Native) -> c_int {
    win::unlock_all(w).or_native(native)
}

pub unsafe fn MPI_Win_flush(rank: c_int, w: MPI_Win, native: Native) -> c_int {
    win::flush(rank, w, false).or_native(native)
}

pub unsafe fn MPI_Win_flush_local(rank: c_int, w: MPI_Win, native: Native) -> c_int {
    win::flush(rank, w, true).or_native(native)
}

pub unsafe fn MPI_Win_flush_all(w: MPI_Win, native: Native) -> c_int {
    win::flush_all(w, false).or_native(native)
}

pub unsafe fn MPI_Win_flush_local_all(w: MPI_Win, native: Native) -> c_int {
    win::flush_all(w, true).or_native(native)
}

pub unsafe fn MPI_Win_sync(w: MPI_Win, native: Native) -> c_int {
    win::sync(w).or_native(native)
}

/// The user window is made with `MPI_Win_create` over the node-shared memory; the
/// application asked for `MPI_Win_allocate` and must see that flavor.
pub unsafe fn MPI_Win_get_attr(
    w: MPI_Win,
    win_keyval: c_int,
    attribute_val: *mut c_void,
    flag: *mut c_int,
    native: Native,
) -> c_int {
    if let Some(a) = win::predefined_attr(w, win_keyval) {
        // SAFETY: for a predefined window attribute the value argument is a `void **`.
        unsafe {
            *attribute_val.cast::<*const c_void>() = a.c;
            if !flag.is_null() {
                *flag = 1;
            }
        }
        return MPI_SUCCESS;
    }
    native()
}

pub unsafe fn MPI_Comm_get_attr(
    comm: MPI_Comm,
    comm_keyval: c_int,
    attribute_val: *mut c_void,
    flag: *mut c_int,
    native: Native,
) -> c_int {
    let c = crate::services::ghost::world_attr_comm(comm, comm_keyval);
    if c != comm {
        // SAFETY: the caller's arguments, on the real world.
        return unsafe { pmpi::PMPI_Comm_get_attr(c, comm_keyval, attribute_val, flag) };
    }
    native()
}

pub unsafe fn MPI_Attr_get(
    comm: MPI_Comm,
    keyval: c_int,
    attribute_val: *mut c_void,
    flag: *mut c_int,
    native: Native,
) -> c_int {
    let c = crate::services::ghost::world_attr_comm(comm, keyval);
    if c != comm {
        // SAFETY: the caller's arguments, on the real world.
        return unsafe { pmpi::PMPI_Attr_get(c, keyval, attribute_val, flag) };
    }
    native()
}

/// `MPI_Fetch_and_op` on a window the ghost layer does not serve. MPICH 5.0.2 and Intel
/// MPI 2021.19 write only the first 6 bytes (the type's size) of an `MPI_SHORT_INT` result
/// element, whose integer lies at bytes 4-7 (README, "Problems of the system MPI"); their
/// `MPI_Get_accumulate` of one element, which is the same operation (MPI-4.0 §12.3.4),
/// writes it right. The origin buffer is ignored with `MPI_NO_OP`, so it may be NULL there.
pub unsafe fn fetch_and_op(
    origin: *const c_void,
    result: *mut c_void,
    dt: MPI_Datatype,
    target: c_int,
    disp: MPI_Aint,
    op: MPI_Op,
    w: MPI_Win,
    native: Native,
) -> c_int {
    if dt != MPI_SHORT_INT() {
        return native();
    }
    // SAFETY: the caller's arguments, one element of `dt` at `origin` and `result`.
    unsafe { pmpi::PMPI_Get_accumulate(origin, 1, dt, result, 1, dt, target, disp, 1, dt, op, w) }
}

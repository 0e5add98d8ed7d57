//! Fortran entry points for `mpif.h` and `use mpi` programs (MPICH ABI).
//!
//! # Who calls what in MPICH's Fortran library
//!
//! Checked on Debian's MPICH 4.0.2 (`libmpichfort.so.12`) by disassembling every binding
//! (`objdump -d`, calls per function; `scripts/fortran-tests` repeats the check):
//! - the `mpif.h`/`use mpi` bindings (`mpi_allreduce_`, `mpi_barrier_`, `mpi_init_`, ...,
//!   424 of them) call the C `MPI_*` functions, after converting handles and the Fortran
//!   sentinels, so the shim's C entry points see them (MPICH's `binding_f77.py` calls
//!   `PMPI_*` only in `F77_USE_PMPI` builds). The exceptions are the attribute routines
//!   (`mpi_attr_get_`, `mpi_attr_put_`, `mpi_{comm,type,win}_{get,set}_attr_`), which call
//!   MPICH internals (`MPII_Comm_get_attr` with the attribute kind `MPIR_ATTR_AINT`/`INT`);
//! - the `mpi_f08` bindings (`mpi_barrier_f08_`, `mpi_allreduce_f08ts_`, `mpi_init_f08_`)
//!   call `PMPI_*` directly: all ~270 undefined `PMPI_*` references of `libmpichfort`
//!   are theirs. `use mpi_f08` programs therefore bypass the shim entirely; their
//!   `MPI_Init` is `PMPI_Init`, so the shim never activates and they run on the system
//!   MPI unchanged (README, "Ways in").
//!
//! # What the shim exports
//!
//! `build_fortran.rs` generates, from the API table, the four name forms of every hooked
//! or `W` function whose arguments convert mechanically; each converts and calls the
//! shim's own C `MPI_*` entry point (counters, hooks, world mapping). The rest reach the
//! shim through MPICH's binding (see [`LEFT_TO_MPI`]). Hand-written here: `MPI_INIT`,
//! `MPI_INIT_THREAD` (the system's `pmpi_init_` runs MPICH's Fortran setup, `mpirinitf_`,
//! then calls the C `MPI_Init`, which is the shim's) and the attribute routines (the
//! communicator is mapped and counted here, MPICH's binding does the rest).
//!
//! # Conversions (MPI-4.0 §19.3)
//!
//! Handles: `MPI_Fint` and every MPICH handle except `MPI_File` are `int`, and
//! `MPI_Comm_f2c`/`c2f` are casts (`mpi.h`: `#define MPI_Comm_c2f(comm) (MPI_Fint)(comm)`).
//! Statuses: a Fortran status is `MPI_STATUS_SIZE` = 5 integers in the C `MPI_Status`
//! layout (`MPI_Status_f2c` is a copy). Sentinels: `MPI_BOTTOM`, `MPI_IN_PLACE` and
//! `MPI_STATUS_IGNORE` are the members of the common block `/MPIPRIV1/`,
//! `MPI_STATUSES_IGNORE` the first of `/MPIPRIV2/` (`mpif.h`); the executable holds the
//! one copy of each (copy relocation), found with `dlsym(RTLD_DEFAULT)` and recognized by
//! address. LOGICALs: `.TRUE.` is 1 and `.FALSE.` 0 for gfortran, the values MPICH's
//! configure found (it has no run-time variable for them).

use core::ffi::{CStr, c_int, c_void};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::abi::*;
use crate::api::Fid;

include!(concat!(env!("OUT_DIR"), "/fortran_gen.rs"));

// Handles are passed as `MPI_Fint` arrays and single values; MPICH's f2c is a cast.
const _: () = assert!(core::mem::size_of::<MPI_Fint>() == core::mem::size_of::<MPI_Comm>());
const _: () = assert!(core::mem::size_of::<MPI_Status>() == 5 * core::mem::size_of::<MPI_Fint>());

macro_rules! handle_conversions {
    ($($f2c:ident, $c2f:ident: $t:ty;)*) => {$(
        /// `MPI_<T>_f2c`: a cast in MPICH (`mpi.h`).
        #[inline]
        pub fn $f2c(f: MPI_Fint) -> $t {
            f as $t
        }
        /// `MPI_<T>_c2f`: a cast in MPICH (`mpi.h`).
        #[inline]
        pub fn $c2f(c: $t) -> MPI_Fint {
            c as MPI_Fint
        }
    )*};
}

handle_conversions! {
    f2c_comm, c2f_comm: MPI_Comm;
    f2c_datatype, c2f_datatype: MPI_Datatype;
    f2c_op, c2f_op: MPI_Op;
    f2c_win, c2f_win: MPI_Win;
    f2c_group, c2f_group: MPI_Group;
    f2c_request, c2f_request: MPI_Request;
    f2c_info, c2f_info: MPI_Info;
    f2c_errhandler, c2f_errhandler: MPI_Errhandler;
    f2c_message, c2f_message: MPI_Message;
    f2c_session, c2f_session: MPI_Session;
}

/// An array of Fortran handles as C handles (same `int`s, checked above).
#[inline]
pub fn cast_const<T>(p: *const MPI_Fint) -> *const T {
    p.cast()
}

/// A writable array of Fortran handles as C handles.
#[inline]
pub fn cast_mut<T>(p: *mut MPI_Fint) -> *mut T {
    p.cast()
}

/// gfortran's LOGICAL values (MPICH's `MPIR_F_TRUE`/`MPIR_F_FALSE` at configure time).
pub const FORTRAN_TRUE: MPI_Fint = 1;
pub const FORTRAN_FALSE: MPI_Fint = 0;

/// A LOGICAL argument as a C boolean (MPICH: `MPII_FROM_FLOG`).
#[inline]
pub fn logical_in(v: MPI_Fint) -> c_int {
    (v != FORTRAN_FALSE) as c_int
}

/// Turns the C boolean the call wrote into a LOGICAL (MPICH: `MPII_TO_FLOG`).
#[inline]
pub(crate) fn logical_out(rc: c_int, flag: *mut MPI_Fint) {
    if rc == MPI_SUCCESS && !flag.is_null() {
        // SAFETY: the caller's LOGICAL, just written by the C call.
        unsafe {
            *flag = if *flag != 0 {
                FORTRAN_TRUE
            } else {
                FORTRAN_FALSE
            }
        };
    }
}

/// Addresses of the Fortran sentinels in this process (null when the program has none).
#[derive(Clone, Copy, Debug)]
pub struct Sentinels {
    pub bottom: usize,
    pub in_place: usize,
    pub status_ignore: usize,
    pub statuses_ignore: usize,
}

fn global(name: &CStr) -> *mut c_void {
    // SAFETY: dlsym with a NUL-terminated name; RTLD_DEFAULT searches the executable
    // first, which holds the copy of a common block every library refers to.
    unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) }
}

/// The sentinels, from the common blocks of `mpif.h` (technique 2 of the design notes,
/// §1.8), cross-checked once against MPICH's own record of them.
pub fn sentinels() -> Sentinels {
    static S: OnceLock<Sentinels> = OnceLock::new();
    *S.get_or_init(|| {
        fortran_setup();
        let p1 = global(c"mpipriv1_") as usize;
        let p2 = global(c"mpipriv2_") as usize;
        let at = |base: usize, off: usize| if base == 0 { 0 } else { base + off };
        let s = Sentinels {
            bottom: at(p1, 0),
            in_place: at(p1, 4),
            status_ignore: at(p1, 8),
            statuses_ignore: p2,
        };
        // MPICH's record (filled by mpirinitf_): `MPIR_F_MPI_IN_PLACE` (a `void *` in
        // libmpichfort) and the standard's `MPI_F_STATUS_IGNORE` (MPI-4.0 §19.3.5).
        let read = |n: &CStr| {
            let v = global(n).cast::<usize>();
            // SAFETY: both are pointer-sized global variables of the MPI library.
            if v.is_null() { 0 } else { unsafe { v.read_volatile() } }
        };
        let (mpich_in_place, mpich_status) =
            (read(c"MPIR_F_MPI_IN_PLACE"), read(c"MPI_F_STATUS_IGNORE"));
        if (mpich_in_place != 0 && mpich_in_place != s.in_place)
            || (mpich_status != 0 && mpich_status != s.status_ignore)
        {
            tracing::warn!(target: "shim::fortran", "Fortran sentinels: common blocks say {s:x?}, MPICH says MPI_IN_PLACE={mpich_in_place:#x} MPI_STATUS_IGNORE={mpich_status:#x}; using MPICH's");
            return Sentinels {
                in_place: if mpich_in_place != 0 { mpich_in_place } else { s.in_place },
                status_ignore: if mpich_status != 0 { mpich_status } else { s.status_ignore },
                ..s
            };
        }
        tracing::debug!(target: "shim::fortran", "Fortran sentinels {s:x?} (MPICH agrees)");
        s
    })
}

/// A Fortran choice buffer as the C binding's: `MPI_BOTTOM` and `MPI_IN_PLACE` by address.
#[inline]
pub fn choice<T>(p: *const T) -> *mut c_void {
    let s = sentinels();
    let a = p as usize;
    if a == 0 {
        p as *mut c_void
    } else if a == s.bottom {
        MPI_BOTTOM
    } else if a == s.in_place {
        MPI_IN_PLACE
    } else {
        p as *mut c_void
    }
}

/// A Fortran status (5 integers, the C layout) or `MPI_STATUS_IGNORE`.
#[inline]
pub fn status(p: *mut MPI_Fint) -> *mut MPI_Status {
    let s = sentinels().status_ignore;
    if s != 0 && p as usize == s {
        MPI_STATUS_IGNORE
    } else {
        p.cast()
    }
}

/// An array of Fortran statuses or `MPI_STATUSES_IGNORE`.
#[inline]
pub fn statuses(p: *mut MPI_Fint) -> *mut MPI_Status {
    let s = sentinels().statuses_ignore;
    if s != 0 && p as usize == s {
        MPI_STATUSES_IGNORE
    } else {
        p.cast()
    }
}

/// MPICH's lazy Fortran setup, as its own bindings do it on every call
/// (`if (MPIR_F_NeedInit) { mpirinitf_(); MPIR_F_NeedInit = 0; }`): it records the
/// sentinels' addresses that MPICH's bindings compare against.
fn fortran_setup() {
    static DONE: AtomicBool = AtomicBool::new(false);
    if DONE.swap(true, Ordering::AcqRel) {
        return;
    }
    let need = global(c"MPIR_F_NeedInit").cast::<c_int>();
    let init = global(c"mpirinitf_");
    if need.is_null() || init.is_null() {
        return;
    }
    // SAFETY: `MPIR_F_NeedInit` is an int of libmpichfort and `mpirinitf_` a Fortran
    // subroutine without arguments; calling it before MPI_Init is what MPICH does.
    unsafe {
        if need.read_volatile() != 0 {
            let f: unsafe extern "C" fn() = core::mem::transmute(init);
            f();
            need.write_volatile(0);
        }
    }
}

/// Runs a Fortran entry point: the panic guard (a panic must not unwind into Fortran),
/// then the error code into `ierr`.
#[inline]
pub(crate) fn call(name: &str, ierr: *mut MPI_Fint, f: impl FnOnce() -> c_int) {
    let rc = crate::entry::guard(name, f);
    if !ierr.is_null() {
        // SAFETY: the Fortran caller's IERROR argument.
        unsafe { *ierr = rc };
    }
}

/// A Fortran binding of the system MPI (`pmpi_init_`, ...), or null.
fn system(name: &'static CStr) -> *mut c_void {
    crate::symbols::lookup(name)
}

/// Defines the four Fortran name forms of a hand-written entry point.
macro_rules! fortran_names {
    ($inner:ident ($($a:ident : $t:ty),*) => $sym:ident $(, $rest:ident)*) => {
        #[unsafe(no_mangle)]
        #[allow(non_snake_case, clippy::missing_safety_doc)]
        pub unsafe extern "C" fn $sym($($a: $t),*) {
            // SAFETY: the Fortran caller's arguments, passed on unchanged.
            unsafe { $inner($($a),*) }
        }
        fortran_names!($inner ($($a: $t),*) => $($rest),*);
    };
    ($inner:ident ($($a:ident : $t:ty),*) => ) => {};
}

type InitF = unsafe extern "C" fn(*mut MPI_Fint);
type InitThreadF = unsafe extern "C" fn(*const MPI_Fint, *mut MPI_Fint, *mut MPI_Fint);

/// `MPI_INIT(IERROR)`: the system's Fortran binding runs MPICH's Fortran setup and calls
/// the C `MPI_Init`, which is the shim's (the dynamic linker finds it first); ghost
/// processes stay inside it as for C programs. Without a Fortran binding in the process
/// (a relinked program that lost libmpichfort), the shim's C `MPI_Init` directly.
unsafe fn init(ierr: *mut MPI_Fint) {
    let sys = system(c"pmpi_init_");
    if sys.is_null() {
        // SAFETY: MPI-4.0 §11.2.1 allows NULL argc/argv.
        let rc =
            unsafe { crate::api::exports::MPI_Init(core::ptr::null_mut(), core::ptr::null_mut()) };
        call("MPI_INIT", ierr, || rc);
        return;
    }
    // SAFETY: MPICH's `pmpi_init_(MPI_Fint *ierr)`.
    let f: InitF = unsafe { core::mem::transmute(sys) };
    crate::entry::guard("MPI_INIT", || unsafe { f(ierr) });
}
fortran_names!(init(ierr: *mut MPI_Fint) => MPI_INIT, mpi_init, mpi_init_, mpi_init__);

/// `MPI_INIT_THREAD(REQUIRED, PROVIDED, IERROR)`, like [`init`].
unsafe fn init_thread(required: *const MPI_Fint, provided: *mut MPI_Fint, ierr: *mut MPI_Fint) {
    let sys = system(c"pmpi_init_thread_");
    if sys.is_null() {
        // SAFETY: NULL argc/argv are allowed; the caller's REQUIRED and PROVIDED.
        let rc = unsafe {
            crate::api::exports::MPI_Init_thread(
                core::ptr::null_mut(),
                core::ptr::null_mut(),
                *required,
                provided,
            )
        };
        call("MPI_INIT_THREAD", ierr, || rc);
        return;
    }
    // SAFETY: MPICH's `pmpi_init_thread_(MPI_Fint *required, MPI_Fint *provided, MPI_Fint *ierr)`.
    let f: InitThreadF = unsafe { core::mem::transmute(sys) };
    crate::entry::guard("MPI_INIT_THREAD", || unsafe { f(required, provided, ierr) });
}
fortran_names!(init_thread(required: *const MPI_Fint, provided: *mut MPI_Fint, ierr: *mut MPI_Fint)
    => MPI_INIT_THREAD, mpi_init_thread, mpi_init_thread_, mpi_init_thread__);

/// The C value of a predefined attribute keyval, for comparisons: MPICH's C keyvals are
/// odd and its Fortran constants the next even number (`mpi.h`: `MPI_TAG_UB 0x64400001`,
/// `mpif.h`: `MPI_TAG_UB=1681915906`; `MPI_WIN_CREATE_FLAVOR` 0x66000007 and 1711276040),
/// the mark by which its attribute code returns the value rather than a pointer to it.
/// User keyvals are handles of another kind, which no predefined C keyval equals either way.
fn c_keyval(k: MPI_Fint) -> c_int {
    if k & 1 == 0 { k.wrapping_sub(1) } else { k }
}

/// `(handle, keyval, attribute_val, flag, ierr)` of MPICH's Fortran attribute getters.
type GetAttrF = unsafe extern "C" fn(
    *const MPI_Fint,
    *const MPI_Fint,
    *mut c_void,
    *mut MPI_Fint,
    *mut MPI_Fint,
);
/// `(comm, keyval, attribute_val, ierr)` of the setters.
type SetAttrF =
    unsafe extern "C" fn(*const MPI_Fint, *const MPI_Fint, *const c_void, *mut MPI_Fint);

/// Looks up a system Fortran binding; a missing one is reported through `ierr`.
fn system_or_error(name: &'static CStr, ierr: *mut MPI_Fint) -> Option<*mut c_void> {
    let p = system(name);
    if p.is_null() {
        tracing::error!(target: "shim::fortran", "the MPI library has no Fortran {}", name.to_string_lossy());
        call("Fortran attribute", ierr, || MPI_ERR_INTERN);
        return None;
    }
    Some(p)
}

/// A communicator attribute query from Fortran: the communicator is mapped (user world)
/// and the world's hidden attributes read on the real world, as the C hook does
/// (`crate::ghost::hooks::MPI_Comm_get_attr`); MPICH's binding then answers by value.
unsafe fn comm_get_attr(
    fid: Fid,
    sys: &'static CStr,
    comm: *const MPI_Fint,
    keyval: *const MPI_Fint,
    val: *mut c_void,
    flag: *mut MPI_Fint,
    ierr: *mut MPI_Fint,
) {
    let Some(p) = system_or_error(sys, ierr) else {
        return;
    };
    // SAFETY: MPICH's getter, with the Fortran argument list.
    let f: GetAttrF = unsafe { core::mem::transmute(p) };
    crate::entry::guard(crate::api::NAMES[fid as usize], || {
        // SAFETY: the caller's COMM and KEYVAL.
        let (c, k) = unsafe { (crate::ghost::map_world(f2c_comm(*comm)), *keyval) };
        // SAFETY: a valid communicator and the caller's remaining arguments.
        let go = move |c: MPI_Comm| unsafe { f(&c2f_comm(c), keyval, val, flag, ierr) };
        if crate::entry::bypass() {
            return go(c);
        }
        crate::entry::run(fid, move || {
            go(crate::ghost::world_attr_comm(c, c_keyval(k)))
        });
    });
}

unsafe fn comm_get_attr_f(
    comm: *const MPI_Fint,
    keyval: *const MPI_Fint,
    val: *mut MPI_Aint,
    flag: *mut MPI_Fint,
    ierr: *mut MPI_Fint,
) {
    let sys = c"pmpi_comm_get_attr_";
    unsafe {
        comm_get_attr(
            Fid::MPI_Comm_get_attr,
            sys,
            comm,
            keyval,
            val.cast(),
            flag,
            ierr,
        )
    }
}
fortran_names!(comm_get_attr_f(comm: *const MPI_Fint, keyval: *const MPI_Fint, val: *mut MPI_Aint, flag: *mut MPI_Fint, ierr: *mut MPI_Fint)
    => MPI_COMM_GET_ATTR, mpi_comm_get_attr, mpi_comm_get_attr_, mpi_comm_get_attr__);

/// `MPI_ATTR_GET` (deprecated form, INTEGER value).
unsafe fn attr_get_f(
    comm: *const MPI_Fint,
    keyval: *const MPI_Fint,
    val: *mut MPI_Fint,
    flag: *mut MPI_Fint,
    ierr: *mut MPI_Fint,
) {
    let sys = c"pmpi_attr_get_";
    unsafe { comm_get_attr(Fid::MPI_Attr_get, sys, comm, keyval, val.cast(), flag, ierr) }
}
fortran_names!(attr_get_f(comm: *const MPI_Fint, keyval: *const MPI_Fint, val: *mut MPI_Fint, flag: *mut MPI_Fint, ierr: *mut MPI_Fint)
    => MPI_ATTR_GET, mpi_attr_get, mpi_attr_get_, mpi_attr_get__);

/// A communicator attribute set from Fortran, on the mapped communicator.
unsafe fn comm_set_attr(
    fid: Fid,
    sys: &'static CStr,
    comm: *const MPI_Fint,
    keyval: *const MPI_Fint,
    val: *const c_void,
    ierr: *mut MPI_Fint,
) {
    let Some(p) = system_or_error(sys, ierr) else {
        return;
    };
    // SAFETY: MPICH's setter, with the Fortran argument list.
    let f: SetAttrF = unsafe { core::mem::transmute(p) };
    crate::entry::guard(crate::api::NAMES[fid as usize], || {
        // SAFETY: the caller's COMM.
        let c = crate::ghost::map_world(f2c_comm(unsafe { *comm }));
        // SAFETY: a valid communicator and the caller's remaining arguments.
        let go = move || unsafe { f(&c2f_comm(c), keyval, val, ierr) };
        if crate::entry::bypass() {
            return go();
        }
        crate::entry::run(fid, go);
    });
}

unsafe fn comm_set_attr_f(
    comm: *const MPI_Fint,
    keyval: *const MPI_Fint,
    val: *const MPI_Aint,
    ierr: *mut MPI_Fint,
) {
    let sys = c"pmpi_comm_set_attr_";
    unsafe { comm_set_attr(Fid::MPI_Comm_set_attr, sys, comm, keyval, val.cast(), ierr) }
}
fortran_names!(comm_set_attr_f(comm: *const MPI_Fint, keyval: *const MPI_Fint, val: *const MPI_Aint, ierr: *mut MPI_Fint)
    => MPI_COMM_SET_ATTR, mpi_comm_set_attr, mpi_comm_set_attr_, mpi_comm_set_attr__);

unsafe fn attr_put_f(
    comm: *const MPI_Fint,
    keyval: *const MPI_Fint,
    val: *const MPI_Fint,
    ierr: *mut MPI_Fint,
) {
    let sys = c"pmpi_attr_put_";
    unsafe { comm_set_attr(Fid::MPI_Attr_put, sys, comm, keyval, val.cast(), ierr) }
}
fortran_names!(attr_put_f(comm: *const MPI_Fint, keyval: *const MPI_Fint, val: *const MPI_Fint, ierr: *mut MPI_Fint)
    => MPI_ATTR_PUT, mpi_attr_put, mpi_attr_put_, mpi_attr_put__);

/// `MPI_WIN_GET_ATTR`: a ghost-served window reports the flavor the application asked
/// for (`MPI_WIN_FLAVOR_ALLOCATE`), by value as Fortran expects, as the C hook does
/// (`crate::ghost::hooks::MPI_Win_get_attr`); everything else is MPICH's binding.
unsafe fn win_get_attr_f(
    win: *const MPI_Fint,
    keyval: *const MPI_Fint,
    val: *mut MPI_Aint,
    flag: *mut MPI_Fint,
    ierr: *mut MPI_Fint,
) {
    let Some(p) = system_or_error(c"pmpi_win_get_attr_", ierr) else {
        return;
    };
    // SAFETY: MPICH's getter, with the Fortran argument list.
    let f: GetAttrF = unsafe { core::mem::transmute(p) };
    // SAFETY: the caller's arguments.
    let go = move || unsafe { f(win, keyval, val.cast(), flag, ierr) };
    crate::entry::guard("MPI_Win_get_attr", || {
        if crate::entry::bypass() {
            return go();
        }
        crate::entry::run(Fid::MPI_Win_get_attr, || {
            // SAFETY: the caller's WIN, KEYVAL and output arguments.
            unsafe {
                if c_keyval(*keyval) == MPI_WIN_CREATE_FLAVOR
                    && crate::ghost::win::is_ghost_window(f2c_win(*win))
                {
                    *val = MPI_WIN_FLAVOR_ALLOCATE as MPI_Aint;
                    *flag = FORTRAN_TRUE;
                    *ierr = MPI_SUCCESS;
                    return;
                }
            }
            go()
        })
    });
}
fortran_names!(win_get_attr_f(win: *const MPI_Fint, keyval: *const MPI_Fint, val: *mut MPI_Aint, flag: *mut MPI_Fint, ierr: *mut MPI_Fint)
    => MPI_WIN_GET_ATTR, mpi_win_get_attr, mpi_win_get_attr_, mpi_win_get_attr__);

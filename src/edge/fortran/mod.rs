//! Layer: edge. May use: hooks, services, core, platform.
//!
//! Fortran entry points for `mpif.h` and `use mpi` programs.
//!
//! This file holds what both ABIs share (the generated entry points, argument helpers,
//! the attribute routines); `mpich.rs` and `ompi.rs` hold the handle conversions, the
//! sentinels and `MPI_INIT` of each. The Open MPI side is described in `ompi.rs`: its
//! bindings call `PMPI_*`, so there the shim's entry points are the only way in.
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
//! one copy of each, found with `dlsym(RTLD_DEFAULT)` and recognized by address. The
//! executable exports it because `libmpichfort`, or libshim (`mpich.rs` defines the blocks
//! for a program linked with a plain `-lshim`, which loses `libmpichfort`), defines it. LOGICALs: `.TRUE.` is 1 and `.FALSE.` 0 for gfortran, the values MPICH's
//! configure found (it has no run-time variable for them).

use core::ffi::{CStr, c_char, c_int, c_void};

use crate::platform::abi::*;
use crate::platform::api::Fid;
use crate::platform::api::pmpi;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};

include!(concat!(env!("OUT_DIR"), "/fortran_gen.rs"));

#[cfg(feature = "abi-mpich")]
mod mpich;
#[cfg(feature = "abi-mpich")]
pub use mpich::*;
#[cfg(feature = "abi-ompi")]
mod ompi;
#[cfg(feature = "abi-ompi")]
pub use ompi::*;

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
    pub unweighted: usize,
    pub weights_empty: usize,
}

pub(crate) fn global(name: &CStr) -> *mut c_void {
    // SAFETY: dlsym with a NUL-terminated name; RTLD_DEFAULT searches the executable
    // first, which holds the copy of a common block every library refers to.
    unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) }
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

/// An input array of Fortran handles as the C binding's: cast where Fortran and C
/// handles agree (MPICH), converted element by element otherwise (Open MPI).
pub struct HandlesIn<T> {
    fortran: *const MPI_Fint,
    c: Vec<T>,
}

impl<T: Copy> HandlesIn<T> {
    /// `len` is evaluated only when the array is converted.
    pub fn new(p: *const MPI_Fint, len: impl FnOnce() -> c_int, f2c: fn(MPI_Fint) -> T) -> Self {
        let c = if HANDLE_ARRAYS_CAST || p.is_null() {
            Vec::new()
        } else {
            // SAFETY: the Fortran array holds `len` handles (the call's count argument).
            (0..len().max(0) as usize)
                .map(|i| f2c(unsafe { *p.add(i) }))
                .collect()
        };
        HandlesIn { fortran: p, c }
    }

    pub fn ptr(&self) -> *const T {
        if HANDLE_ARRAYS_CAST || self.fortran.is_null() {
            self.fortran.cast()
        } else {
            self.c.as_ptr()
        }
    }
}

/// An in/out array of Fortran handles (requests): converted in, and back after the call.
pub struct HandlesMut<T>(HandlesIn<T>);

impl<T: Copy> HandlesMut<T> {
    pub fn new(p: *mut MPI_Fint, len: impl FnOnce() -> c_int, f2c: fn(MPI_Fint) -> T) -> Self {
        HandlesMut(HandlesIn::new(p, len, f2c))
    }

    pub fn ptr_mut(&mut self) -> *mut T {
        if HANDLE_ARRAYS_CAST || self.0.fortran.is_null() {
            self.0.fortran.cast_mut().cast()
        } else {
            self.0.c.as_mut_ptr()
        }
    }

    /// Writes the (possibly completed, now null) handles back into the Fortran array.
    pub fn write_back(&self, c2f: fn(T) -> MPI_Fint) {
        if HANDLE_ARRAYS_CAST {
            return;
        }
        let p = self.0.fortran.cast_mut();
        for (i, &h) in self.0.c.iter().enumerate() {
            // SAFETY: the caller's array, as long as the converted one.
            unsafe { *p.add(i) = c2f(h) };
        }
    }
}

/// A LOGICAL input array as C booleans.
pub fn logicals_in(p: *const MPI_Fint, len: c_int) -> Vec<c_int> {
    if p.is_null() {
        return Vec::new();
    }
    // SAFETY: the Fortran array holds `len` LOGICALs (the call's dimension argument).
    (0..len.max(0) as usize)
        .map(|i| logical_in(unsafe { *p.add(i) }))
        .collect()
}

/// Turns the C booleans the call wrote into LOGICALs.
pub fn logicals_out(rc: c_int, p: *mut MPI_Fint, len: c_int) {
    for i in 0..len.max(0) as usize {
        // SAFETY: the caller's array of `len` LOGICALs.
        logical_out(rc, unsafe { p.add(i) });
    }
}

/// `MPI_WAITANY`/`MPI_TESTANY` index: 1-based in Fortran (MPI-4.0 §19.1.6);
/// `MPI_UNDEFINED` stays.
pub fn index_out(rc: c_int, p: *mut MPI_Fint) {
    // SAFETY: the caller's INDEX, written by the C call.
    unsafe {
        if rc == MPI_SUCCESS && !p.is_null() && *p >= 0 {
            *p += 1;
        }
    }
}

/// `MPI_WAITSOME`/`MPI_TESTSOME` indices, `*outcount` of them.
pub fn indices_out(rc: c_int, p: *mut MPI_Fint, outcount: *const MPI_Fint) {
    if rc != MPI_SUCCESS && rc != MPI_ERR_IN_STATUS {
        return;
    }
    // SAFETY: the caller's OUTCOUNT and its array of at least that many indices.
    unsafe {
        if *outcount == MPI_UNDEFINED {
            return;
        }
        for i in 0..(*outcount).max(0) as usize {
            *p.add(i) += 1;
        }
    }
}

/// A `CHARACTER` argument as a C string: leading and trailing blanks are not part of
/// the value (MPI-4.0 §19.1.2, as Open MPI's own bindings trim them).
pub fn str_in(p: *const c_char, len: usize) -> std::ffi::CString {
    let bytes = if p.is_null() {
        &[][..]
    } else {
        // SAFETY: gfortran passes the character data and its length.
        unsafe { core::slice::from_raw_parts(p.cast::<u8>(), len) }
    };
    let t = bytes.trim_ascii();
    let t = &t[..t.iter().position(|&b| b == 0).unwrap_or(t.len())];
    std::ffi::CString::new(t).expect("NUL removed above")
}

/// A buffer for a C string result that goes back into a blank-padded `CHARACTER`.
pub struct StrOut(Vec<c_char>);

impl StrOut {
    pub fn new(len: usize) -> Self {
        StrOut(vec![0; len.max(MPI_MAX_OBJECT_NAME) + 1])
    }

    pub fn ptr(&mut self) -> *mut c_char {
        self.0.as_mut_ptr()
    }

    pub fn write_back(&self, rc: c_int, p: *mut c_char, len: usize) {
        if rc != MPI_SUCCESS || p.is_null() {
            return;
        }
        let n = self.0.iter().position(|&b| b == 0).unwrap_or(self.0.len());
        for i in 0..len {
            let b = if i < n { self.0[i] } else { b' ' as c_char };
            // SAFETY: the caller's CHARACTER*(len).
            unsafe { *p.add(i) = b };
        }
    }
}

/// Length of the `sendtypes`/`recvtypes` arrays of an Alltoallw form: the (remote) group
/// size, or the topology's out/in degree for the neighbourhood forms (MPI-4.0 §6.8, §8.6),
/// from the same neighbour lists the schedules use (`crate::core::comm::query_neighbors`).
pub fn types_len(comm: MPI_Fint, neighbor: bool, send: bool) -> c_int {
    let c = crate::platform::proc::map_world(f2c_comm(comm));
    if neighbor {
        // An invalid communicator or one without a topology gives 0; the call reports it.
        return crate::core::comm::query_neighbors(c, 0)
            .map(|nb| if send { nb.dests.len() } else { nb.sources.len() } as c_int)
            .unwrap_or(0);
    }
    let (mut n, mut inter) = (0, 0);
    // SAFETY: out-pointers to locals; an invalid communicator leaves 0 and the call
    // itself reports the error.
    unsafe {
        pmpi::PMPI_Comm_test_inter(c, &mut inter);
        if inter != 0 {
            pmpi::PMPI_Comm_remote_size(c, &mut n);
        } else {
            pmpi::PMPI_Comm_size(c, &mut n);
        }
    }
    n
}

/// Number of dimensions of a Cartesian communicator (the length of `remain_dims`).
pub fn cart_ndims(comm: MPI_Fint) -> c_int {
    let mut n = 0;
    // SAFETY: an out-pointer to a local.
    unsafe { pmpi::PMPI_Cartdim_get(crate::platform::proc::map_world(f2c_comm(comm)), &mut n) };
    n
}

/// Runs a Fortran entry point: the panic guard (a panic must not unwind into Fortran),
/// then the error code into `ierr`.
#[inline]
pub(crate) fn call(name: &str, ierr: *mut MPI_Fint, f: impl FnOnce() -> c_int) {
    let rc = crate::platform::guard::guard(name, f);
    if !ierr.is_null() {
        // SAFETY: the Fortran caller's IERROR argument.
        unsafe { *ierr = rc };
    }
}

/// A Fortran binding of the system MPI (`pmpi_init_`, ...), or null. A program relinked
/// with `-lshim` may have lost the MPI's Fortran library under `--as-needed` (the shim
/// defines every Fortran name it calls), so it is loaded here when needed.
pub(crate) fn system(name: &'static CStr) -> *mut c_void {
    let p = crate::platform::symbols::lookup(name);
    if !p.is_null() {
        return p;
    }
    static LIB: OnceLock<usize> = OnceLock::new();
    let lib = *LIB.get_or_init(|| {
        for l in FORTRAN_LIBRARIES {
            // SAFETY: dlopen of a library name; its constructors are the MPI's own.
            let h = unsafe { libc::dlopen(l.as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL) };
            if !h.is_null() {
                LOST.store(true, Ordering::Relaxed);
                tracing::debug!(target: "shim::fortran", "loaded {} for the system's Fortran bindings", l.to_string_lossy());
                return h as usize;
            }
        }
        0
    });
    if lib == 0 {
        return core::ptr::null_mut();
    }
    // SAFETY: a handle from dlopen and a NUL-terminated name.
    unsafe { libc::dlsym(lib as *mut c_void, name.as_ptr()) }
}

/// The program was linked without the MPI library's Fortran library (a linker with
/// `--as-needed` drops it when libshim defines every name the program calls), so the
/// shim loaded it. The shim defines the `mpif.h` common blocks too, so such a program
/// exports its own copies and the sentinels are still recognized by address; only a
/// program whose copies stayed private (linked against a libshim without those
/// definitions) passes addresses that no library knows.
static LOST: AtomicBool = AtomicBool::new(false);

/// After `MPI_INIT`: says so, once, on rank 0, when the sentinels cannot be recognized.
fn warn_if_lost() {
    if LOST.load(Ordering::Relaxed)
        && sentinels_are_own()
        && crate::platform::proc::world().rank == 0
    {
        tracing::warn!(target: "shim::fortran", "this Fortran program was linked without the MPI library's Fortran library ({}) and does not export its mpif.h common blocks: MPI_IN_PLACE, MPI_BOTTOM and MPI_STATUS(ES)_IGNORE are not recognized. Relink it against this libshim, or with $(pkg-config --libs shim) or -Wl,--no-as-needed before -lshim (README, \"Ways in\")", FORTRAN_LIBRARIES[0].to_string_lossy());
    }
}

unsafe fn init_checked(ierr: *mut MPI_Fint) {
    // SAFETY: the caller's IERROR.
    unsafe { init(ierr) };
    warn_if_lost();
}

unsafe fn init_thread_checked(
    required: *const MPI_Fint,
    provided: *mut MPI_Fint,
    ierr: *mut MPI_Fint,
) {
    // SAFETY: the caller's REQUIRED, PROVIDED and IERROR.
    unsafe { init_thread(required, provided, ierr) };
    warn_if_lost();
}

/// `MPI_INIT` without the system's Fortran binding: the shim's C `MPI_Init` with no
/// arguments (what Open MPI's binding does with `PMPI_Init`; MPICH's fallback when the
/// program lost `libmpichfort`).
unsafe fn init_direct(ierr: *mut MPI_Fint) {
    // SAFETY: MPI-4.0 §11.2.1 allows NULL argc/argv.
    let rc = unsafe {
        crate::edge::api::exports::MPI_Init(core::ptr::null_mut(), core::ptr::null_mut())
    };
    call("MPI_INIT", ierr, || rc);
}

/// `MPI_INIT_THREAD` without the system's Fortran binding, like [`init_direct`].
unsafe fn init_thread_direct(
    required: *const MPI_Fint,
    provided: *mut MPI_Fint,
    ierr: *mut MPI_Fint,
) {
    // SAFETY: NULL argc/argv are allowed; the caller's REQUIRED and PROVIDED.
    let rc = unsafe {
        crate::edge::api::exports::MPI_Init_thread(
            core::ptr::null_mut(),
            core::ptr::null_mut(),
            *required,
            provided,
        )
    };
    call("MPI_INIT_THREAD", ierr, || rc);
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

fortran_names!(init_checked(ierr: *mut MPI_Fint) => MPI_INIT, mpi_init, mpi_init_, mpi_init__);

fortran_names!(init_thread_checked(required: *const MPI_Fint, provided: *mut MPI_Fint, ierr: *mut MPI_Fint)
    => MPI_INIT_THREAD, mpi_init_thread, mpi_init_thread_, mpi_init_thread__);

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
/// (`crate::hooks::rma::MPI_Comm_get_attr`); MPICH's binding then answers by value.
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
    crate::platform::guard::guard(crate::platform::api::NAMES[fid as usize], || {
        // SAFETY: the caller's COMM and KEYVAL.
        let (c, k) = unsafe { (crate::platform::proc::map_world(f2c_comm(*comm)), *keyval) };
        // SAFETY: a valid communicator and the caller's remaining arguments.
        let go = move |c: MPI_Comm| unsafe { f(&c2f_comm(c), keyval, val, flag, ierr) };
        if crate::platform::guard::bypass() {
            return go(c);
        }
        crate::edge::entry::run(fid, move || {
            go(crate::services::ghost::world_attr_comm(c, c_keyval(k)))
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
    crate::platform::guard::guard(crate::platform::api::NAMES[fid as usize], || {
        // SAFETY: the caller's COMM.
        let c = crate::platform::proc::map_world(f2c_comm(unsafe { *comm }));
        // SAFETY: a valid communicator and the caller's remaining arguments.
        let go = move || unsafe { f(&c2f_comm(c), keyval, val, ierr) };
        if crate::platform::guard::bypass() {
            return go();
        }
        crate::edge::entry::run(fid, go);
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

/// `MPI_WIN_GET_ATTR`: a ghost-served window reports its predefined attributes as the
/// application created it (base, size, displacement unit, `MPI_WIN_FLAVOR_ALLOCATE`),
/// by value as Fortran expects, as the C hook does
/// (`crate::hooks::rma::MPI_Win_get_attr`); everything else is MPICH's binding.
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
    crate::platform::guard::guard("MPI_Win_get_attr", || {
        if crate::platform::guard::bypass() {
            return go();
        }
        crate::edge::entry::run(Fid::MPI_Win_get_attr, || {
            // SAFETY: the caller's WIN, KEYVAL and output arguments.
            unsafe {
                if let Some(a) =
                    crate::services::ghost::win::predefined_attr(f2c_win(*win), c_keyval(*keyval))
                {
                    *val = a.fortran;
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

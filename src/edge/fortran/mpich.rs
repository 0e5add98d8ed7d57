//! Layer: edge. May use: hooks, services, core, platform.
//!
//! The MPICH ABI side of the Fortran entry points: handle conversions are casts, the
//! sentinels live in MPICH's `mpif.h` common blocks, and `MPI_INIT` goes through MPICH's
//! own binding (which runs its Fortran setup and then calls the C `MPI_Init`, the shim's).

use core::ffi::{CStr, c_int, c_void};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};

use super::{Sentinels, global, system};
use crate::platform::abi::*;

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

/// Fortran and C handles are the same `int`s: arrays are passed as they are.
pub const HANDLE_ARRAYS_CAST: bool = true;

/// The MPI's Fortran library (for [`super::system`] when the program lost it).
pub const FORTRAN_LIBRARIES: &[&CStr] = &[c"libmpichfort.so.12", c"libmpifort.so.12"];

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
            // MPICH's weights sentinels are not translated here: its binding is used.
            unweighted: 0,
            weights_empty: 0,
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

type InitF = unsafe extern "C" fn(*mut MPI_Fint);
type InitThreadF = unsafe extern "C" fn(*const MPI_Fint, *mut MPI_Fint, *mut MPI_Fint);

/// `MPI_INIT(IERROR)`: the system's Fortran binding runs MPICH's Fortran setup and calls
/// the C `MPI_Init`, which is the shim's (the dynamic linker finds it first); ghost
/// processes stay inside it as for C programs. Without a Fortran binding in the process
/// (a relinked program that lost libmpichfort), the shim's C `MPI_Init` directly.
pub(crate) unsafe fn init(ierr: *mut MPI_Fint) {
    let sys: *mut c_void = system(c"pmpi_init_");
    if sys.is_null() {
        // SAFETY: the caller's IERROR.
        return unsafe { super::init_direct(ierr) };
    }
    // SAFETY: MPICH's `pmpi_init_(MPI_Fint *ierr)`.
    let f: InitF = unsafe { core::mem::transmute(sys) };
    crate::platform::guard::guard("MPI_INIT", || unsafe { f(ierr) });
}

/// `MPI_INIT_THREAD(REQUIRED, PROVIDED, IERROR)`, like [`init`].
pub(crate) unsafe fn init_thread(
    required: *const MPI_Fint,
    provided: *mut MPI_Fint,
    ierr: *mut MPI_Fint,
) {
    let sys = system(c"pmpi_init_thread_");
    if sys.is_null() {
        // SAFETY: the caller's REQUIRED, PROVIDED and IERROR.
        return unsafe { super::init_thread_direct(required, provided, ierr) };
    }
    // SAFETY: MPICH's `pmpi_init_thread_(MPI_Fint *required, MPI_Fint *provided, MPI_Fint *ierr)`.
    let f: InitThreadF = unsafe { core::mem::transmute(sys) };
    crate::platform::guard::guard("MPI_INIT_THREAD", || unsafe { f(required, provided, ierr) });
}

/// Defines the common blocks of MPICH's `mpif.h` in the shim too, with the sizes of
/// `libmpichfort`'s definitions. Why: a program linked with a plain `-lshim`, whose every
/// MPI Fortran symbol the shim defines, loses `libmpichfort` under `--as-needed`; its
/// common blocks would then be private to the executable, and the shim (`sentinels`) and
/// `libmpichfort` (loaded by the shim for `pmpi_init_`) would not know the addresses the
/// program passes as `MPI_IN_PLACE` etc. A definition in a library the program links
/// makes the linker export the executable's copy, which every library then binds to.
/// In a process without the executable's copies (a C program) these are the ones all
/// Fortran code shares, as `libmpichfort`'s own would be.
macro_rules! sentinel_commons {
    ($($name:ident: [$t:ty; $n:literal];)*) => {$(
        #[unsafe(no_mangle)]
        #[allow(non_upper_case_globals)]
        pub static mut $name: [$t; $n] = [0; $n];
    )*};
}

sentinel_commons! {
    // MPI_BOTTOM, MPI_IN_PLACE, MPI_STATUS_IGNORE(5)
    mpipriv1_: [MPI_Fint; 7];
    // MPI_STATUSES_IGNORE(5,1), MPI_ERRCODES_IGNORE(1)
    mpipriv2_: [MPI_Fint; 6];
    // MPI_ARGVS_NULL(1,1), MPI_ARGV_NULL(1) (CHARACTER*1)
    mpiprivc_: [u8; 2];
    // MPI_UNWEIGHTED
    mpifcmb5_: [MPI_Fint; 1];
    // MPI_WEIGHTS_EMPTY
    mpifcmb9_: [MPI_Fint; 1];
}

/// Whether the sentinels found are the shim's own copies of the common blocks while the
/// program passes its own (a program linked against a shim without these definitions,
/// whose copies the linker did not export): then they cannot be recognized.
pub(super) fn sentinels_are_own() -> bool {
    crate::platform::symbols::is_own_symbol(global(c"mpipriv1_"))
}

/// The C value of a predefined attribute keyval, for comparisons: MPICH's C keyvals are
/// odd and its Fortran constants the next even number (`mpi.h`: `MPI_TAG_UB 0x64400001`,
/// `mpif.h`: `MPI_TAG_UB=1681915906`; `MPI_WIN_CREATE_FLAVOR` 0x66000007 and 1711276040),
/// the mark by which its attribute code returns the value rather than a pointer to it.
/// User keyvals are handles of another kind, which no predefined C keyval equals either way.
pub(crate) fn c_keyval(k: MPI_Fint) -> c_int {
    if k & 1 == 0 { k.wrapping_sub(1) } else { k }
}

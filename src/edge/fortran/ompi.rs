//! Layer: edge. May use: hooks, services, core, platform.
//!
//! The Open MPI ABI side of the Fortran entry points.
//!
//! Open MPI 4.1's `mpif.h`/`use mpi` bindings (`libmpi_mpifh`: `mpi_allreduce_`, ...) call
//! `PMPI_*` directly (all 367 of its undefined MPI references are `PMPI_*`, `nm -D`), so a
//! Fortran call reaches the shim only through the shim's own Fortran entry point, which
//! the dynamic linker finds before Open MPI's (weak) ones. Hence, unlike MPICH:
//! - handles are converted with Open MPI's `PMPI_<T>_f2c`/`c2f` (Fortran handles are
//!   indices into Open MPI's tables; C handles are pointers), arrays element by element;
//! - the shim's own requests (schedules, packed messages) get Fortran handles of their
//!   own, the negative integers `-2 - index`, which no Open MPI table index equals; the C
//!   `MPI_Request_c2f`/`f2c` are exported here too, so C code and mpi4py's `py2f` agree;
//! - `MPI_INIT` calls the shim's C `MPI_Init` itself (Open MPI's `ompi_init_f` only calls
//!   `PMPI_Init(0, NULL)`, nothing Fortran-specific);
//! - the sentinels are the common blocks `/mpi_fortran_bottom/` etc. (`mpif-sentinels.h`).
//!
//! Statuses need no conversion: `MPI_STATUS_SIZE` is 6 and the C `MPI_Status` is 24 bytes
//! in the same order (Open MPI's `MPI_Status_f2c` is a copy).

use core::ffi::{CStr, c_int};
use std::sync::OnceLock;

use super::{Sentinels, global};
use crate::platform::abi::*;

const _: () = assert!(core::mem::size_of::<MPI_Status>() == 6 * core::mem::size_of::<MPI_Fint>());

/// Looks a converter up once; 0 when this Open MPI lacks it.
fn converter(cell: &OnceLock<usize>, name: &CStr) -> usize {
    *cell.get_or_init(|| crate::platform::symbols::lookup(name) as usize)
}

macro_rules! handle_conversions {
    ($($f2c:ident, $c2f:ident: $t:ty, $pf2c:literal, $pc2f:literal, $null:expr;)*) => {$(
        /// `MPI_<T>_f2c` of Open MPI (a table lookup in `libmpi`).
        pub fn $f2c(f: MPI_Fint) -> $t {
            static P: OnceLock<usize> = OnceLock::new();
            let p = converter(&P, $pf2c);
            if p == 0 {
                return $null;
            }
            // SAFETY: `MPI_<T> PMPI_<T>_f2c(MPI_Fint)` (Open MPI's mpi.h).
            unsafe { core::mem::transmute::<usize, unsafe extern "C" fn(MPI_Fint) -> $t>(p)(f) }
        }
        /// `MPI_<T>_c2f` of Open MPI (registers the object in its Fortran table).
        pub fn $c2f(c: $t) -> MPI_Fint {
            static P: OnceLock<usize> = OnceLock::new();
            let p = converter(&P, $pc2f);
            if p == 0 {
                return -1;
            }
            // SAFETY: `MPI_Fint PMPI_<T>_c2f(MPI_<T>)` (Open MPI's mpi.h).
            unsafe { core::mem::transmute::<usize, unsafe extern "C" fn($t) -> MPI_Fint>(p)(c) }
        }
    )*};
}

handle_conversions! {
    f2c_comm, c2f_comm: MPI_Comm, c"PMPI_Comm_f2c", c"PMPI_Comm_c2f", MPI_COMM_NULL();
    f2c_datatype, c2f_datatype: MPI_Datatype, c"PMPI_Type_f2c", c"PMPI_Type_c2f", MPI_DATATYPE_NULL();
    f2c_op, c2f_op: MPI_Op, c"PMPI_Op_f2c", c"PMPI_Op_c2f", MPI_OP_NULL();
    f2c_win, c2f_win: MPI_Win, c"PMPI_Win_f2c", c"PMPI_Win_c2f", MPI_WIN_NULL();
    f2c_group, c2f_group: MPI_Group, c"PMPI_Group_f2c", c"PMPI_Group_c2f", MPI_GROUP_NULL();
    f2c_system_request, c2f_system_request: MPI_Request, c"PMPI_Request_f2c", c"PMPI_Request_c2f", MPI_REQUEST_NULL();
    f2c_info, c2f_info: MPI_Info, c"PMPI_Info_f2c", c"PMPI_Info_c2f", MPI_INFO_NULL();
    f2c_errhandler, c2f_errhandler: MPI_Errhandler, c"PMPI_Errhandler_f2c", c"PMPI_Errhandler_c2f", MPI_ERRHANDLER_NULL();
    f2c_message, c2f_message: MPI_Message, c"PMPI_Message_f2c", c"PMPI_Message_c2f", MPI_MESSAGE_NULL();
    f2c_session, c2f_session: MPI_Session, c"PMPI_Session_f2c", c"PMPI_Session_c2f", MPI_SESSION_NULL();
}

/// Fortran handles are table indices, C handles pointers: arrays are converted.
pub const HANDLE_ARRAYS_CAST: bool = false;

/// The Fortran handle of the shim request with this index.
fn shim_fortran_request(index: usize) -> MPI_Fint {
    MPI_Fint::try_from(index)
        .ok()
        .and_then(|i| (-2 as MPI_Fint).checked_sub(i))
        .expect("too many outstanding shim requests for Fortran handles")
}

/// `MPI_Request_f2c`: the shim's negative handles name shim requests.
pub fn f2c_request(f: MPI_Fint) -> MPI_Request {
    if f <= -2 {
        shim_request_handle((-2 - f as i64) as usize)
    } else {
        f2c_system_request(f)
    }
}

/// `MPI_Request_c2f`.
pub fn c2f_request(c: MPI_Request) -> MPI_Fint {
    match shim_request_index(c) {
        Some(i) => shim_fortran_request(i),
        None => c2f_system_request(c),
    }
}

/// C `MPI_Request_c2f`, so that C code (and mpi4py's `Request.py2f`) hands Fortran the
/// same handle the shim's Fortran entry points understand.
#[unsafe(no_mangle)]
pub extern "C" fn MPI_Request_c2f(request: MPI_Request) -> MPI_Fint {
    crate::platform::guard::guard("MPI_Request_c2f", || c2f_request(request))
}

/// C `MPI_Request_f2c`.
#[unsafe(no_mangle)]
pub extern "C" fn MPI_Request_f2c(request: MPI_Fint) -> MPI_Request {
    crate::platform::guard::guard("MPI_Request_f2c", || f2c_request(request))
}

/// C `MPI_Comm_c2f`: with ghost processes, `MPI_COMM_WORLD` is the user world here too
/// (Open MPI's converter is a function, so it can be intercepted; MPICH's is a macro).
#[unsafe(no_mangle)]
pub extern "C" fn MPI_Comm_c2f(comm: MPI_Comm) -> MPI_Fint {
    crate::platform::guard::guard("MPI_Comm_c2f", || {
        c2f_comm(crate::platform::proc::map_world(comm))
    })
}

/// The MPI's Fortran library (for [`super::system`] when the program lost it).
pub const FORTRAN_LIBRARIES: &[&CStr] = &[c"libmpi_mpifh.so.40", c"libmpi_mpifh.so"];

/// The sentinels: the common blocks of Open MPI's `mpif-sentinels.h` (gfortran, ifort
/// and flang name them with one trailing underscore).
pub fn sentinels() -> Sentinels {
    static S: OnceLock<Sentinels> = OnceLock::new();
    *S.get_or_init(|| {
        let s = Sentinels {
            bottom: global(c"mpi_fortran_bottom_") as usize,
            in_place: global(c"mpi_fortran_in_place_") as usize,
            status_ignore: global(c"mpi_fortran_status_ignore_") as usize,
            statuses_ignore: global(c"mpi_fortran_statuses_ignore_") as usize,
            unweighted: global(c"mpi_fortran_unweighted_") as usize,
            weights_empty: global(c"mpi_fortran_weights_empty_") as usize,
        };
        tracing::debug!(target: "shim::fortran", "Fortran sentinels {s:x?}");
        s
    })
}

/// Whether the sentinels found are the shim's own copies of the common blocks (see
/// `super::LOST`): the program's copies were not exported, so they cannot be recognized.
pub(super) fn sentinels_are_own() -> bool {
    crate::platform::symbols::is_own_symbol(global(c"mpi_fortran_in_place_"))
}

/// A Fortran weights array as the C binding's (`MPI_UNWEIGHTED`, `MPI_WEIGHTS_EMPTY`).
pub fn weights(p: *mut c_int) -> *mut c_int {
    let s = sentinels();
    match p as usize {
        0 => p,
        a if a == s.unweighted => MPI_UNWEIGHTED,
        a if a == s.weights_empty => MPI_WEIGHTS_EMPTY,
        _ => p,
    }
}

/// `MPI_INIT`/`MPI_INIT_THREAD`: the shim's C functions directly (Open MPI's binding only
/// calls `PMPI_Init(0, NULL)`).
pub(super) use super::{init_direct as init, init_thread_direct as init_thread};

/// Open MPI's Fortran keyvals are the C ones.
pub(crate) fn c_keyval(k: MPI_Fint) -> c_int {
    k
}

/// Defines the common blocks of Open MPI's `mpif-sentinels.h` in the shim too (sizes as
/// gfortran allocates them). Why: a program relinked with `-lshim` whose every MPI
/// Fortran symbol the shim defines loses `libmpi_mpifh` under `--as-needed`; its common
/// blocks would then be private to the executable, and `libmpi` (loaded later) and the
/// shim would not see the addresses the program passes. A definition in a library the
/// program links makes the linker export the executable's copy, which every library
/// then binds to (and `sentinels()` finds with `dlsym`).
macro_rules! sentinel_commons {
    ($($name:ident: $n:literal;)*) => {$(
        #[unsafe(no_mangle)]
        #[allow(non_upper_case_globals)]
        pub static mut $name: [MPI_Fint; $n] = [0; $n];
    )*};
}

sentinel_commons! {
    mpi_fortran_bottom_: 1;
    mpi_fortran_in_place_: 1;
    mpi_fortran_argv_null_: 1;
    mpi_fortran_argvs_null_: 1;
    mpi_fortran_errcodes_ignore_: 1;
    mpi_fortran_status_ignore_: 6;
    mpi_fortran_statuses_ignore_: 6;
    mpi_fortran_unweighted_: 1;
    mpi_fortran_weights_empty_: 1;
}

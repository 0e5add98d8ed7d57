//! Layer: edge. May use: hooks, services, core, platform.
//!
//! Fortran under the MPI-5 standard ABI. The library's Fortran binding (`libmpifort_abi`,
//! Intel MPI 2021.19) calls the C `MPI_*` functions (551 of its undefined symbols, `nm -D`),
//! so Fortran calls reach the shim's C entry points and the shim defines no Fortran names
//! of its own. What it must define are the handle converters that binding uses
//! (`MPI_<T>_toint`/`fromint`, MPI-5.0 §20.3.2, and the classic `c2f`/`f2c`) for the
//! handles the library does not know: the shim's own requests get the negative integers
//! `-2 - index`, which no library handle converts to; with ghost processes,
//! `MPI_COMM_WORLD` converts as the user world.

use core::ffi::{CStr, c_int, c_void};
use std::sync::OnceLock;

use crate::platform::abi::*;
use crate::platform::guard::guard;

/// The library's `PMPI_` converter `name`, looked up once (not in the function table: the
/// other ABIs have no such functions, so the shim exports them only here).
fn converter(cell: &OnceLock<usize>, name: &CStr) -> *mut c_void {
    let p = *cell.get_or_init(|| crate::platform::symbols::lookup(name) as usize);
    assert!(
        p != 0,
        "the MPI library lacks {name:?}, which the MPI-5 standard ABI requires"
    );
    p as *mut c_void
}

macro_rules! library_converter {
    ($($f:ident: fn($a:ty) -> $r:ty = $sym:literal;)*) => {$(
        fn $f(x: $a) -> $r {
            static P: OnceLock<usize> = OnceLock::new();
            let p = converter(&P, $sym);
            // SAFETY: the standard ABI's signature of this converter (mpi_abi.h).
            unsafe { core::mem::transmute::<*mut c_void, unsafe extern "C" fn($a) -> $r>(p)(x) }
        }
    )*};
}

library_converter! {
    pmpi_request_toint: fn(MPI_Request) -> c_int = c"PMPI_Request_toint";
    pmpi_request_fromint: fn(c_int) -> MPI_Request = c"PMPI_Request_fromint";
    pmpi_comm_toint: fn(MPI_Comm) -> c_int = c"PMPI_Comm_toint";
    pmpi_comm_c2f: fn(MPI_Comm) -> MPI_Fint = c"PMPI_Comm_c2f";
}

/// The integer of the shim request with this index.
fn shim_int(index: usize) -> c_int {
    c_int::try_from(index)
        .ok()
        .and_then(|i| (-2 as c_int).checked_sub(i))
        .expect("too many outstanding shim requests for Fortran handles")
}

fn request_toint(request: MPI_Request) -> c_int {
    match shim_request_index(request) {
        Some(i) => shim_int(i),
        None => pmpi_request_toint(request),
    }
}

fn request_fromint(i: c_int) -> MPI_Request {
    if i <= -2 {
        shim_request_handle((-2 - i as i64) as usize)
    } else {
        pmpi_request_fromint(i)
    }
}

/// `MPI_Request_toint` (MPI-5.0 §20.3.2).
#[unsafe(no_mangle)]
pub extern "C" fn MPI_Request_toint(request: MPI_Request) -> c_int {
    guard("MPI_Request_toint", || request_toint(request))
}

/// `MPI_Request_fromint`.
#[unsafe(no_mangle)]
pub extern "C" fn MPI_Request_fromint(request: c_int) -> MPI_Request {
    guard("MPI_Request_fromint", || request_fromint(request))
}

/// `MPI_Request_c2f`: the same integers as `toint` (C code and mpi4py's `py2f` agree with
/// the Fortran binding).
#[unsafe(no_mangle)]
pub extern "C" fn MPI_Request_c2f(request: MPI_Request) -> MPI_Fint {
    guard("MPI_Request_c2f", || request_toint(request))
}

/// `MPI_Request_f2c`.
#[unsafe(no_mangle)]
pub extern "C" fn MPI_Request_f2c(request: MPI_Fint) -> MPI_Request {
    guard("MPI_Request_f2c", || request_fromint(request))
}

/// `MPI_Comm_toint`: with ghost processes, `MPI_COMM_WORLD` is the user world.
#[unsafe(no_mangle)]
pub extern "C" fn MPI_Comm_toint(comm: MPI_Comm) -> c_int {
    guard("MPI_Comm_toint", || {
        pmpi_comm_toint(crate::platform::proc::map_world(comm))
    })
}

/// `MPI_Comm_c2f`.
#[unsafe(no_mangle)]
pub extern "C" fn MPI_Comm_c2f(comm: MPI_Comm) -> MPI_Fint {
    guard("MPI_Comm_c2f", || {
        pmpi_comm_c2f(crate::platform::proc::map_world(comm))
    })
}

//! Layer: edge. May use: hooks, services, core, platform.
//!
//! What the program and the MPI library call: the generated `MPI_*` entry points
//! ([`api`]) and what each does around its hook ([`entry`]), the shim's own C API
//! ([`capi`], `include/shim.h`), and the Fortran entry points ([`fortran`]; with the
//! standard ABI, the handle converters the library's Fortran binding calls, [`toint`]).

pub mod api;
pub mod capi;
pub mod entry;
#[cfg(not(feature = "abi-std"))]
pub mod fortran;
#[cfg(feature = "abi-std")]
pub mod toint;

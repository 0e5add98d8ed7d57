//! libshim: a drop-in MPI shim between an unmodified MPI application and the system MPI,
//! through the PMPI profiling interface (MPI-4.0 §15.2).
//!
//! Where things live:
//! - [`abi`]: handle types and constants of the MPI ABI this build serves;
//!   `abi/mpi_functions.txt` is the single table of the MPI C API that `build.rs` turns
//!   into [`api`] (function ids, [`pmpi`] forwarders, exported `MPI_*` entry points).
//! - [`symbols`]: run-time lookup of `PMPI_*` (no `libmpi` in `DT_NEEDED`).
//! - [`entry`]: fast path, re-entry guard, counters and panic guard around every hook.
//! - [`init`]: `MPI_Init*`/`MPI_Finalize`, ABI check, job-wide configuration errors.
//! - [`coll`]: the collectives (argument translation in `coll::api`, schedule builders in
//!   `coll::algo`); [`sched`]: schedules and their execution; [`comm`]: per-communicator
//!   state (shadow communicator, tags, schedule cache); [`request`]: the shim's requests
//!   and the completion family; [`progress`]: advancing outstanding schedules;
//!   [`ops`]: local reductions; [`dtype`]: datatype helpers; [`errors`]: error handlers.
//! - [`config`]: every `SHIM_*` variable; [`log`]: `tracing` with rank prefixes;
//!   [`stats`]: counters and the `SHIM_STATS` report; [`capi`]: the shim's own C API.

pub mod abi;
pub mod capi;
pub mod coll;
pub mod comm;
pub mod config;
pub mod dtype;
pub mod entry;
pub mod errors;
pub mod ghost;
pub mod init;
pub mod log;
pub mod ops;
pub mod progress;
pub mod request;
pub mod sched;
pub mod stats;
pub mod symbols;

/// Generated from `src/abi/mpi_functions.txt` by `build.rs`.
#[allow(clippy::all, non_upper_case_globals)]
pub mod api {
    use crate::abi::*;
    use core::ffi::{c_char, c_int, c_void};
    include!(concat!(env!("OUT_DIR"), "/api_gen.rs"));
}

pub use api::pmpi;

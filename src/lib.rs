//! Layer: edge. May use: hooks, services, core, platform.
//!
//! libshim: a drop-in MPI shim between an unmodified MPI application and the system MPI,
//! through the PMPI profiling interface (MPI-4.0 §15.2).
//!
//! Five layers, each a folder; an import only goes down (`tests/layers.rs` checks it, and
//! every file names its layer in its first line):
//! - [`edge`]: the generated `MPI_*` entry points, the shim's C API, Fortran;
//! - [`hooks`]: one file per MPI family; `hooks::init` is the composition root;
//! - [`services`]: the collectives (algorithms, selection) and ghosts for RMA;
//! - [`core`]: requests, progress, communicators, schedules, datatypes, ops;
//! - [`platform`]: ABI, `PMPI_*` forwarders, configuration, process facts, guards,
//!   counters, errors, logging, symbols and the safe seam over the shim's own MPI calls.
//!
//! One import goes up, named with its reason in `tests/layers.rs` and the README: the
//! collective hooks call `edge::entry::slow` after their fast lane.

pub mod core;
pub mod edge;
pub mod hooks;
pub mod platform;
pub mod services;

//! Layer: platform. May use: nothing.
//!
//! The bottom of the shim: the MPI ABI this build serves and the generated `PMPI_*`
//! forwarders, symbol lookup, configuration as plain data, process facts, the re-entry and
//! panic guards, counters, error handlers, logging, the safe seam over the MPI calls
//! the shim makes for itself, and the system calls of shared memory ([`shm`]). Nothing here knows a collective, a schedule or a ghost.

pub mod abi;
pub mod api;
pub mod config;
pub mod counters;
pub mod errors;
pub mod guard;
pub mod log;
pub mod memo;
pub mod mpi;
pub mod proc;
pub mod shm;
pub mod symbols;
pub mod verbs;
pub mod watchdog;

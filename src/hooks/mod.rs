//! Layer: hooks. May use: services, core, platform.
//!
//! One file per family of MPI functions the shim takes over, each a set of hooks the
//! generated entry points call with the application's arguments and a `native` closure
//! (the `PMPI_*` call): the table column `hook` of `src/platform/abi/mpi_functions.txt`
//! names the file. `init` is the composition root: it reads the configuration once and hands
//! each service and core module its settings.

pub mod blocking;
pub mod coll;
pub mod compat;
pub mod errors;
pub mod init;
pub mod lifetime;
pub mod p2p;
pub mod pack;
pub mod report;
pub mod request;
pub mod rma;

//! Layer: services. May use: core, platform.
//!
//! What the shim adds to MPI: the collectives ([`coll`]: schedule builders, the algorithm
//! registry, selection and its tuning) and asynchronous RMA through ghost processes
//! ([`ghost`]).

pub mod coll;
pub mod ghost;

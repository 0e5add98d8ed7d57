//! Layer: core. May use: platform.
//!
//! The engine the services build on: the shim's requests and their completion
//! ([`request`]), progress of outstanding schedules ([`progress`]), per-communicator state
//! ([`comm`]), schedules and their execution ([`sched`]), datatypes and packing
//! ([`dtype`]), local reductions ([`ops`]) and the shim's references on the application's
//! datatypes and operations ([`retain`]), and the transport's shared-memory primitives
//! ([`transport`]).

pub mod comm;
pub mod dtype;
pub mod ops;
pub mod progress;
pub mod request;
pub mod retain;
pub mod sched;
pub mod transport;

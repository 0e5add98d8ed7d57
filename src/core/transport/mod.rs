//! Layer: core. May use: platform.
//!
//! What a schedule's actions need from the wire, below the schedules: the shared-memory
//! signal ([`flag`]: single-writer sequence counters and waiting that shares the cores),
//! over the segments and CMA of `platform::shm`.

pub mod flag;
pub mod node;

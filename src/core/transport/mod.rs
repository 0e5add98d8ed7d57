//! Layer: core. May use: platform.
//!
//! What a schedule's actions need from the wire, below the schedules: the shared-memory
//! signal ([`flag`]: single-writer sequence counters and waiting that shares the cores),
//! over the segments, CMA and futexes of `platform::shm`.

pub mod flag;
pub mod node;

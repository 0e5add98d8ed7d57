//! Layer: edge. May use: hooks, services, core, platform.
//!
//! Generated from `src/platform/abi/mpi_functions.txt` by `build.rs`: the exported
//! `MPI_*` entry points. Each takes the fast path straight to `PMPI_*` when the shim is
//! inactive or re-entered, and otherwise runs its hook inside [`crate::edge::entry::run`].
#![allow(clippy::all, non_upper_case_globals)]

use crate::platform::abi::*;
use crate::platform::api::*;
use core::ffi::{c_char, c_int, c_void};
include!(concat!(env!("OUT_DIR"), "/exports_gen.rs"));

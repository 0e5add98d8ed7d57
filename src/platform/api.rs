//! Layer: platform. May use: nothing.
//!
//! Generated from `src/platform/abi/mpi_functions.txt` by `build.rs`: function ids, names
//! and categories (for counters and `SHIM_STATS`), and the lazily resolved `PMPI_*`
//! forwarders of the system MPI (dlsym at run time: no `libmpi` in `DT_NEEDED`).
#![allow(clippy::all, non_upper_case_globals)]

use crate::platform::abi::*;
use core::ffi::{c_char, c_int, c_void};
include!(concat!(env!("OUT_DIR"), "/api_gen.rs"));

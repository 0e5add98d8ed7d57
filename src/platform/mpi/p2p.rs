//! Layer: platform. May use: nothing.
//!
//! Point-to-point communication, requests and probes (MPI-4.0 chapter 3).

#[allow(unused_imports)]
use super::{MpiResult, check, fake_first};

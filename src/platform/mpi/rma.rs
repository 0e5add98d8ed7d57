//! Layer: platform. May use: nothing.
//!
//! One-sided communication (MPI-4.0 chapter 12).

#[allow(unused_imports)]
use super::{MpiResult, check, fake_first};

//! Layer: platform. May use: nothing.
//!
//! The collectives the shim issues itself on its own communicators (MPI-4.0 chapter 6).

#[allow(unused_imports)]
use super::{MpiResult, check, fake_first};

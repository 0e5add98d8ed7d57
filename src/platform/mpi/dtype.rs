//! Layer: platform. May use: nothing.
//!
//! Datatypes (MPI-4.0 chapter 5).

#[allow(unused_imports)]
use super::{MpiResult, check, fake_first};

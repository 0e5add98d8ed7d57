//! The collectives (MPI-4.0 chapters 6 and 8.6).

pub mod api;

use crate::abi::{MPI_Info, MPI_Request};
use crate::api::Fid;

/// Which form of a collective the application called.
#[derive(Clone, Copy, Debug)]
pub enum Variant {
    /// `MPI_Allreduce`
    Blocking,
    /// `MPI_Iallreduce`: the request to fill in.
    Nonblocking(*mut MPI_Request),
    /// `MPI_Allreduce_init`: info and the persistent request to fill in.
    Persistent(MPI_Info, *mut MPI_Request),
}

/// What the generated entry point tells a collective hook about the call.
#[derive(Clone, Copy, Debug)]
pub struct Call {
    pub fid: Fid,
    pub variant: Variant,
}

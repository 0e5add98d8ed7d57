//! Schedule builders, one module per collective (family). Each takes this rank's view of
//! the call (`Me`, blocks of data, reduction parameters) and returns a schedule. They are
//! correct for every process count, powers of two or not.
//!
//! A block whose type signature is empty (no bytes) is neither sent nor received: both
//! sides of a message know its signature (MPI-4.0 §6.1: send and receive signatures of
//! collectives must match), so they agree on skipping it.

pub mod allgather;
pub mod alltoall;
pub mod barrier;
pub mod bcast;
pub mod neighbor;
pub mod reduce;
pub mod rooted;
pub mod scan;

use crate::abi::{MPI_Datatype, MPI_Op};
use crate::dtype::TypeInfo;
use crate::sched::{Addr, Data};

/// This rank in its communicator.
#[derive(Clone, Copy, Debug)]
pub struct Me {
    pub rank: i32,
    pub size: i32,
}

/// A block of data: where, how much, and how many bytes its signature has. `lo..hi` is
/// the byte range (relative to the base) that the block's data touches.
#[derive(Clone, Copy, Debug)]
pub struct Blk {
    pub d: Data,
    pub bytes: i64,
    pub lo: i64,
    pub hi: i64,
}

impl Blk {
    pub fn new(addr: Addr, count: i64, dt: MPI_Datatype, ti: &TypeInfo) -> Blk {
        let lo = addr.off as i64 + ti.true_lb;
        Blk {
            d: Data::new(addr, count, dt),
            bytes: count * ti.size,
            lo,
            hi: lo + ti.span(count),
        }
    }

    pub fn empty(&self) -> bool {
        self.bytes == 0
    }
}

/// The parameters of a reduction.
#[derive(Clone, Copy, Debug)]
pub struct Red {
    pub count: i64,
    pub dt: MPI_Datatype,
    pub ti: TypeInfo,
    pub op: MPI_Op,
    pub commutative: bool,
}

impl Red {
    pub fn data(&self, a: Addr) -> Data {
        Data::new(a, self.count, self.dt)
    }
    pub fn bytes(&self) -> i64 {
        self.count * self.ti.size
    }
}

/// `(a - b) mod n` for ranks.
pub fn sub_mod(a: i32, b: i32, n: i32) -> i32 {
    ((a - b) % n + n) % n
}

//! Layer: services. May use: core, platform.
//!
//! Schedule builders, one module per collective (family). Each takes this rank's view of
//! the call (its [`Rank`], [`Block`]s of data, a [`Reduction`]'s parameters) and returns a
//! schedule. They are correct for every process count, powers of two or not.
//!
//! A block whose type signature is empty (no bytes) is neither sent nor received: both
//! sides of a message know its signature (MPI-4.0 §6.1: send and receive signatures of
//! collectives must match), so they agree on skipping it.

pub mod allgather;
pub mod alltoall;
pub mod barrier;
pub mod bcast;
pub mod hier;
pub mod inter;
pub mod neighbor;
pub mod reduce;
pub mod reduce_scatter;
pub mod rooted;
#[cfg(test)]
pub mod scaling;
pub mod scan;
pub mod shm;
pub mod single;

use crate::core::dtype::TypeInfo;
use crate::core::sched::{ActionId, Addr, Builder, Data};
use crate::platform::abi::{MPI_Datatype, MPI_Op, MPI_PACKED};

/// This process's place in its communicator: its rank and the communicator's size.
#[derive(Clone, Copy, Debug)]
pub struct Rank {
    pub rank: i32,
    pub size: i32,
}

/// A block of data: where, how much, and how many bytes its signature has. `lo..hi` is
/// the byte range (relative to the base) that the block's data touches.
#[derive(Clone, Copy, Debug)]
pub struct Block {
    pub data: Data,
    pub bytes: i64,
    pub lo: i64,
    pub hi: i64,
    /// Extent of the datatype (to tell whether two blocks continue each other).
    pub extent: i64,
    /// Its bytes lie one after another in type map order from `lo` (`TypeInfo::dense`).
    pub dense: bool,
}

impl Block {
    pub fn new(addr: Addr, count: i64, dt: MPI_Datatype, ti: &TypeInfo) -> Block {
        let lo = addr.off as i64 + ti.true_lb;
        Block {
            data: Data::new(addr, count, dt),
            bytes: count * ti.size,
            lo,
            hi: lo + ti.span(count),
            extent: ti.extent,
            dense: ti.dense(),
        }
    }

    pub fn empty(&self) -> bool {
        self.bytes == 0
    }

    /// The block as a part of a composite message (see `Builder::blocks`).
    pub fn part(&self) -> (Addr, i64, MPI_Datatype, i64) {
        (self.data.addr, self.data.count, self.data.dt, self.extent)
    }
}

/// One message carrying several blocks, in the given order.
pub fn multi<'a>(b: &mut Builder, blocks: impl IntoIterator<Item = &'a Block>) -> Data {
    let parts: Vec<_> = blocks.into_iter().map(Block::part).collect();
    b.blocks(&parts)
}

/// Data of `count` elements of a type seen as packed bytes (`MPI_PACKED`, which matches
/// any type signature of the same bytes, MPI-4.0 §5.2.1): in place when the type is dense,
/// else in scratch, filled by [`Packed::pack`] and emptied by [`Packed::unpack`]. Every
/// rank agrees on the byte count (the signatures match), whatever its own layout.
#[derive(Clone, Copy, Debug)]
pub struct Packed {
    pub typed: Data,
    pub at: Addr,
    pub bytes: i64,
    pub dense: bool,
}

impl Packed {
    pub fn new(b: &mut Builder, typed: Data, ti: &TypeInfo) -> Packed {
        let bytes = typed.count * ti.size;
        if ti.dense() {
            Packed {
                typed,
                at: typed.addr.add(ti.lb),
                bytes,
                dense: true,
            }
        } else {
            Packed {
                typed,
                at: Addr::scratch(b.scratch(bytes)),
                bytes,
                dense: false,
            }
        }
    }

    /// `n` bytes from byte `off`.
    pub fn slice(&self, off: i64, n: i64) -> Data {
        Data::new(self.at.add(off), n, MPI_PACKED())
    }

    /// Copies the typed data into the packed view (nothing when dense).
    pub fn pack(&self, b: &mut Builder, deps: &[ActionId]) -> Vec<ActionId> {
        if self.dense || self.bytes == 0 {
            deps.to_vec()
        } else {
            vec![b.copy(self.typed, self.slice(0, self.bytes), deps)]
        }
    }

    /// Copies the packed view back into the typed data (nothing when dense).
    pub fn unpack(&self, b: &mut Builder, deps: &[ActionId]) -> Vec<ActionId> {
        if self.dense || self.bytes == 0 {
            deps.to_vec()
        } else {
            vec![b.copy(self.slice(0, self.bytes), self.typed, deps)]
        }
    }
}

/// Splits `n` items into `parts` nearly equal pieces: (start, len) of piece `i`.
pub fn split(n: i64, parts: i64, i: i64) -> (i64, i64) {
    let q = n / parts;
    let r = n % parts;
    let start = i * q + i.min(r);
    (start, q + i64::from(i < r))
}

/// Largest power of two not above `p` (p >= 1).
pub fn pof2_floor(p: i32) -> i32 {
    1 << (31 - (p as u32).leading_zeros())
}

/// ceil(log_k(p)) for p >= 1, k >= 2.
pub fn ceil_log(k: i64, p: i64) -> u32 {
    let mut n = 0;
    let mut x = 1i64;
    while x < p {
        x = x.saturating_mul(k);
        n += 1;
    }
    n
}

/// The parameters of a reduction.
#[derive(Clone, Copy, Debug)]
pub struct Reduction {
    pub count: i64,
    pub dt: MPI_Datatype,
    pub ti: TypeInfo,
    pub op: MPI_Op,
    pub commutative: bool,
}

impl Reduction {
    pub fn data(&self, a: Addr) -> Data {
        Data::new(a, self.count, self.dt)
    }
    pub fn bytes(&self) -> i64 {
        self.count * self.ti.size
    }
    /// Whether the system MPI reduces this operation and datatype right (`ops`).
    pub fn native_trusted(&self) -> bool {
        crate::core::ops::native_trusted(self.op, self.dt)
    }
}

/// `(a - b) mod n` for ranks.
pub fn sub_mod(a: i32, b: i32, n: i32) -> i32 {
    ((a - b) % n + n) % n
}

/// ceil(a / b) for a >= 0, b > 0.
pub fn ceil_div(a: i64, b: i64) -> i64 {
    (a + b - 1) / b
}

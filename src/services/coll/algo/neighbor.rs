//! Layer: services. May use: core, platform.
//!
//! Neighbourhood collectives: one round, a send to every destination and a receive from
//! every source, all posted at once (MPI-4.0 §8.6).
//!
//! Cartesian topologies match messages by direction (MPI-4.0 §8.6): the block sent to
//! neighbour 2d (the -1 side of dimension d) is the one the peer receives from its
//! neighbour 2d+1, and vice versa. With periodic dimensions of size 1 or 2 the same peer
//! is both neighbours, so order alone cannot tell the blocks apart: each direction gets
//! its own tag (the sender's neighbour index). Graph topologies match in list order.

use super::{Block, Rank};
use crate::core::sched::{Builder, Schedule};
use crate::platform::abi::MPI_PROC_NULL;

pub fn single_round(
    _me: Rank,
    sends: &[(Block, i32)],
    recvs: &[(Block, i32)],
    cart: bool,
) -> Schedule {
    let mut b = Builder::new("single-round");
    for (i, (blk, peer)) in recvs.iter().enumerate() {
        if *peer == MPI_PROC_NULL || blk.empty() {
            continue;
        }
        if cart {
            b.recv_tagged(blk.data, *peer, (i ^ 1) as i32, &[]);
        } else {
            b.recv(blk.data, *peer, &[]);
        }
    }
    for (j, (blk, peer)) in sends.iter().enumerate() {
        if *peer == MPI_PROC_NULL || blk.empty() {
            continue;
        }
        if cart {
            b.send_tagged(blk.data, *peer, j as i32, &[]);
        } else {
            b.send(blk.data, *peer, &[]);
        }
    }
    b.finish()
}

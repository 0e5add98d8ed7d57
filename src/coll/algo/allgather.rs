//! Allgather(v): ring (Kumar & Kale digest; Hoefler digest §3). In step s every rank
//! forwards to its right neighbour the block it received in step s-1 (its own block in
//! step 0) and receives a new block from its left neighbour; after P-1 steps every rank
//! has every block. Bandwidth-optimal, P-1 latency terms.

use super::{Blk, Me, sub_mod};
use crate::sched::{Builder, Schedule};

/// `send`: this rank's contribution (`None` = in place, already in its block); `blocks`:
/// the receive buffer's blocks, one per rank.
pub fn ring(me: Me, send: Option<Blk>, blocks: &[Blk]) -> Schedule {
    let mut b = Builder::new("ring");
    let p = me.size;
    let r = me.rank;
    // the action that filled each block (None: filled before the collective started)
    let mut filled: Vec<Option<u32>> = vec![None; p as usize];
    if let Some(s) = send {
        if !s.empty() {
            filled[r as usize] = Some(b.copy(s.d, blocks[r as usize].d, &[]));
        }
    }
    let right = (r + 1) % p;
    let left = sub_mod(r, 1, p);
    for step in 0..p - 1 {
        let out = sub_mod(r, step, p) as usize;
        let inc = sub_mod(r, step + 1, p) as usize;
        if !blocks[out].empty() {
            let deps: Vec<u32> = filled[out].into_iter().collect();
            b.send(blocks[out].d, right, &deps);
        }
        if !blocks[inc].empty() {
            filled[inc] = Some(b.recv(blocks[inc].d, left, &[]));
        }
    }
    b.finish()
}

//! Alltoall(v, w): linear with all messages posted at once (Hoefler digest §3), in the
//! pairwise order `rank ± i` so that peers meet in a balanced pattern. In place, the
//! receive buffer's blocks are first copied to scratch (at the same relative positions)
//! and sent from there; a block's receive waits for its copy.

use super::{Blk, Me, sub_mod};
use crate::sched::{Addr, Base, Builder, Schedule};

/// `send`: blocks to send, one per rank (ignored in place); `recv`: blocks to receive.
pub fn linear(me: Me, send: &[Blk], recv: &[Blk], inplace: bool) -> Schedule {
    let mut b = Builder::new("linear");
    let p = me.size;
    let r = me.rank;
    let mut sources: Vec<Blk> = send.to_vec();
    let mut copied: Vec<Option<u32>> = vec![None; p as usize];
    if inplace {
        let lo = recv
            .iter()
            .filter(|x| !x.empty())
            .map(|x| x.lo)
            .min()
            .unwrap_or(0);
        let hi = recv
            .iter()
            .filter(|x| !x.empty())
            .map(|x| x.hi)
            .max()
            .unwrap_or(0);
        let base = b.scratch(hi - lo) - lo;
        sources = recv.to_vec();
        for (j, blk) in recv.iter().enumerate() {
            if j as i32 == r || blk.empty() {
                continue;
            }
            let mut s = *blk;
            s.d.addr = Addr {
                base: Base::Scratch,
                off: base as isize + blk.d.addr.off,
            };
            copied[j] = Some(b.copy(blk.d, s.d, &[]));
            sources[j] = s;
        }
    } else if !send[r as usize].empty() {
        b.copy(send[r as usize].d, recv[r as usize].d, &[]);
    }
    for i in 1..p {
        let from = sub_mod(r, i, p) as usize;
        let to = ((r + i) % p) as usize;
        if !recv[from].empty() {
            let deps: Vec<u32> = copied[from].into_iter().collect();
            b.recv(recv[from].d, from as i32, &deps);
        }
        if !sources[to].empty() {
            let deps: Vec<u32> = copied[to].into_iter().collect();
            b.send(sources[to].d, to as i32, &deps);
        }
    }
    b.finish()
}

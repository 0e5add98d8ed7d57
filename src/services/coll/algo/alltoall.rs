//! Layer: services. May use: core, platform.
//!
//! Alltoall(v, w) (Hoefler digest §3; MPICH's algorithm set).
//! - `linear`: every message posted at once, in the order rank ± i so that peers meet in
//!   a balanced pattern.
//! - `pairwise`: P-1 steps; step i sends to rank + i and receives from rank - i, one step
//!   after the other (few messages in flight, for large blocks).
//! - `bruck` (Alltoall only, where every block has the same size): ceil(log2 P) steps; in
//!   step k every block whose relative destination has bit k set moves 2^k ranks on, all
//!   such blocks in one message. Fewer, larger messages: for small blocks.
//!
//! In place, the receive buffer's blocks are first copied to scratch (at the same relative
//! positions) and sent from there; a block's receive waits for its copy.

use super::{Block, Rank, sub_mod};
use crate::core::sched::{ActionId, Addr, Base, Builder, Data, Schedule};
use crate::platform::abi::MPI_PACKED;
use crate::services::coll::select::{Algo, Choice};

/// `send`: blocks to send, one per rank (ignored in place); `recv`: blocks to receive;
/// `regular`: every block has the same size on every rank (MPI_Alltoall).
pub fn build(
    ch: &Choice,
    me: Rank,
    send: &[Block],
    recv: &[Block],
    inplace: bool,
    regular: bool,
) -> Schedule {
    match ch.algo {
        Algo::Pairwise => exchange(me, send, recv, inplace, true),
        Algo::Bruck if regular => bruck(me, send, recv, inplace),
        Algo::Bruck => {
            let mut s = exchange(me, send, recv, inplace, false);
            s.algorithm = "linear (bruck needs equal block sizes)";
            s
        }
        _ => exchange(me, send, recv, inplace, false),
    }
}

/// The sources of the blocks to send: the send buffer, or in place a scratch copy of the
/// receive buffer (with the copy actions to wait for).
fn sources(
    b: &mut Builder,
    me: Rank,
    send: &[Block],
    recv: &[Block],
    inplace: bool,
) -> (Vec<Block>, Vec<Option<ActionId>>) {
    let p = me.size as usize;
    let mut copied: Vec<Option<ActionId>> = vec![None; p];
    if !inplace {
        return (send.to_vec(), copied);
    }
    let live = || recv.iter().filter(|x| !x.empty());
    let lo = live().map(|x| x.lo).min().unwrap_or(0);
    let hi = live().map(|x| x.hi).max().unwrap_or(0);
    let base = b.scratch(hi - lo) - lo;
    let mut sources = recv.to_vec();
    for (j, blk) in recv.iter().enumerate() {
        if j as i32 == me.rank || blk.empty() {
            continue;
        }
        let mut s = *blk;
        s.data.addr = Addr {
            base: Base::Scratch,
            off: base as isize + blk.data.addr.off,
        };
        copied[j] = Some(b.copy(blk.data, s.data, &[]));
        sources[j] = s;
    }
    (sources, copied)
}

fn exchange(me: Rank, send: &[Block], recv: &[Block], inplace: bool, stepwise: bool) -> Schedule {
    let mut b = Builder::new(if stepwise { "pairwise" } else { "linear" });
    let p = me.size;
    let r = me.rank;
    let (sources, copied) = sources(&mut b, me, send, recv, inplace);
    if !inplace && !send[r as usize].empty() {
        b.copy(send[r as usize].data, recv[r as usize].data, &[]);
    }
    let mut prev: Vec<ActionId> = Vec::new();
    for i in 1..p {
        let from = sub_mod(r, i, p) as usize;
        let to = ((r + i) % p) as usize;
        let mut this = Vec::new();
        if !recv[from].empty() {
            let mut deps: Vec<ActionId> = copied[from].into_iter().collect();
            if stepwise {
                deps.extend(&prev);
            }
            this.push(b.recv(recv[from].data, from as i32, &deps));
        }
        if !sources[to].empty() {
            let mut deps: Vec<ActionId> = copied[to].into_iter().collect();
            if stepwise {
                deps.extend(&prev);
            }
            this.push(b.send(sources[to].data, to as i32, &deps));
        }
        if stepwise && !this.is_empty() {
            prev = this;
        }
    }
    b.finish()
}

fn bruck(me: Rank, send: &[Block], recv: &[Block], inplace: bool) -> Schedule {
    let mut b = Builder::new("bruck");
    let p = me.size as usize;
    let r = me.rank as usize;
    let bb = recv[r].bytes;
    if bb == 0 {
        return b.finish();
    }
    let src = if inplace { recv } else { send };
    let slot = |x: Addr| Data::new(x, bb, MPI_PACKED());
    // rotation: slot j holds the block for rank r + j
    let a = Addr::scratch(b.scratch(p as i64 * bb));
    let mut loc: Vec<Addr> = (0..p).map(|j| a.add(j as i64 * bb)).collect();
    let rotated: Vec<ActionId> = (0..p)
        .map(|j| b.copy(src[(r + j) % p].data, slot(loc[j]), &[]))
        .collect();
    let mut ready: Vec<Vec<ActionId>> = (0..p).map(|j| vec![rotated[j]]).collect();
    let mut k = 1usize;
    while k < p {
        let moving: Vec<usize> = (1..p).filter(|j| j & k != 0).collect();
        let parts: Vec<_> = moving
            .iter()
            .map(|&j| (loc[j], bb, MPI_PACKED(), 1))
            .collect();
        let d = b.blocks(&parts);
        let mut deps: Vec<ActionId> = moving.iter().flat_map(|&j| ready[j].clone()).collect();
        deps.sort_unstable();
        deps.dedup();
        b.send(d, ((r + k) % p) as i32, &deps);
        let region = Addr::scratch(b.scratch(moving.len() as i64 * bb));
        for (i, &j) in moving.iter().enumerate() {
            loc[j] = region.add(i as i64 * bb);
        }
        let parts: Vec<_> = moving
            .iter()
            .map(|&j| (loc[j], bb, MPI_PACKED(), 1))
            .collect();
        let d = b.blocks(&parts);
        let rv = b.recv(d, ((r + p - k) % p) as i32, &[]);
        for &j in &moving {
            ready[j] = vec![rv];
        }
        k *= 2;
    }
    // slot j now holds the block from rank r - j; in place, nothing is written before
    // every rotation copy has read the receive buffer
    for j in 0..p {
        let mut deps = ready[j].clone();
        if inplace {
            deps.extend(&rotated);
        }
        b.copy(slot(loc[j]), recv[(r + p - j) % p].data, &deps);
    }
    b.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::sched::sim::{self, Bufs, Mode};
    use crate::platform::abi::MPI_UINT64_T;

    fn blk(addr: Addr, n: i64) -> Block {
        Block::new(
            addr,
            n,
            MPI_UINT64_T(),
            &crate::core::dtype::info(MPI_UINT64_T()).unwrap(),
        )
    }

    #[test]
    fn every_alltoall_algorithm_exchanges() {
        for algo in [Algo::Linear, Algo::Pairwise, Algo::Bruck] {
            for p in 1..=13i32 {
                for regular in [true, false] {
                    for inplace in [false, true] {
                        check(algo, p, regular, inplace);
                    }
                }
            }
        }
    }

    /// count of the block from rank s to rank d
    fn cnt(regular: bool, s: usize, d: usize) -> usize {
        if regular { 2 } else { (s * 3 + d * 5) % 4 }
    }

    fn check(algo: Algo, p: i32, regular: bool, inplace: bool) {
        if inplace && !regular {
            // in place, send and receive blocks are the same: counts must be symmetric
            return;
        }
        let pu = p as usize;
        let ch = Choice::new(algo);
        let layout = |r: usize, send: bool| -> (Vec<usize>, usize) {
            // blocks in reverse order with a one-element gap
            let mut d = vec![0; pu];
            let mut at = 0;
            for i in (0..pu).rev() {
                d[i] = at;
                at += if send {
                    cnt(regular, r, i)
                } else {
                    cnt(regular, i, r)
                } + 1;
            }
            (d, at)
        };
        let scheds: Vec<Schedule> = (0..pu)
            .map(|r| {
                let (sd, _) = layout(r, true);
                let (rd, _) = layout(r, false);
                let send: Vec<Block> = (0..pu)
                    .map(|i| blk(Addr::send(sd[i] as i64 * 8), cnt(regular, r, i) as i64))
                    .collect();
                let recv: Vec<Block> = (0..pu)
                    .map(|i| blk(Addr::recv(rd[i] as i64 * 8), cnt(regular, i, r) as i64))
                    .collect();
                build(
                    &ch,
                    Rank {
                        rank: r as i32,
                        size: p,
                    },
                    &send,
                    &recv,
                    inplace,
                    regular,
                )
            })
            .collect();
        let what = format!("{algo:?} p={p} regular={regular} inplace={inplace}");
        for mode in [Mode::Eager, Mode::Rendezvous] {
            let mut bufs: Vec<Bufs> = (0..pu)
                .map(|r| {
                    let (sd, slen) = layout(r, true);
                    let (_, rlen) = layout(r, false);
                    let mut s = vec![0u64; slen];
                    for i in 0..pu {
                        for j in 0..cnt(regular, r, i) {
                            s[sd[i] + j] = sim::val(r * 100 + i, j);
                        }
                    }
                    if inplace {
                        Bufs {
                            send: vec![],
                            recv: sim::to_bytes(&s),
                        }
                    } else {
                        Bufs {
                            send: sim::to_bytes(&s),
                            recv: vec![0; rlen * 8],
                        }
                    }
                })
                .collect();
            sim::run(&scheds, &mut bufs, mode, p as u64).unwrap_or_else(|e| panic!("{what}: {e}"));
            for r in 0..pu {
                let (rd, rlen) = layout(r, false);
                let got = sim::from_bytes(&bufs[r].recv);
                assert_eq!(got.len(), rlen);
                for i in 0..pu {
                    for j in 0..cnt(regular, i, r) {
                        assert_eq!(
                            got[rd[i] + j],
                            sim::val(i * 100 + r, j),
                            "{what}: rank {r} block {i}"
                        );
                    }
                }
            }
        }
    }
}

//! Layer: services. May use: core, platform.
//!
//! Gather(v) and Scatter(v).
//! - `linear`: the root posts one receive (send) per rank at once and the system MPI moves
//!   them concurrently; every other rank sends (receives) one block.
//! - `binomial`: a binomial tree over ranks relative to the root; inner nodes forward
//!   their whole subtree's blocks as one packed message, so the root handles ceil(log2 P)
//!   messages instead of P - 1. It needs every rank to know the block size, which only
//!   Gather and Scatter guarantee: Gatherv and Scatterv fall back to `linear` (only the
//!   root knows their counts).
//!
//! The root's own block is a local typed copy unless it is `MPI_IN_PLACE`. Intermediate
//! data is kept as `MPI_PACKED` bytes (which match any type signature of the same size,
//! MPI-4.0 §5.2.1), so ranks may use different datatypes for matching signatures. In the
//! binomial tree a datatype with holes is packed (unpacked) by the shim at either end, so
//! every message is `MPI_PACKED` on both sides: MPICH 4.0.2 truncates a typed message of a
//! padded datatype such as `MPI_DOUBLE_INT` received as `MPI_PACKED` (or the reverse) from
//! about 12 KB (README, "Problems of the system MPI").

use super::bcast::knomial_tree;
use super::{Block, Rank, multi, sub_mod};
use crate::core::sched::{ActionId, Addr, Builder, Data, Schedule};
use crate::platform::abi::MPI_PACKED;
use crate::services::coll::select::{Algo, Choice};

/// `send`: this rank's contribution (`None` = in place at the root); `recv`: the root's
/// blocks, one per rank (ignored elsewhere); `block_bytes`: the size of every block when
/// all ranks know it (Gather), else `None` (Gatherv).
pub fn gather(
    ch: &Choice,
    me: Rank,
    send: Option<Block>,
    recv: &[Block],
    root: i32,
    block_bytes: Option<i64>,
) -> Schedule {
    match (ch.algo, block_bytes) {
        (Algo::Binomial, Some(bb)) => gather_binomial(me, send, recv, root, bb),
        (Algo::Binomial, None) => {
            let mut s = gather_linear(me, send, recv, root);
            s.algorithm = "linear (binomial needs the counts at every rank)";
            s
        }
        _ => gather_linear(me, send, recv, root),
    }
}

/// `send`: the root's blocks, one per rank; `recv`: this rank's block (`None` = in place
/// at the root).
pub fn scatter(
    ch: &Choice,
    me: Rank,
    send: &[Block],
    recv: Option<Block>,
    root: i32,
    block_bytes: Option<i64>,
) -> Schedule {
    match (ch.algo, block_bytes) {
        (Algo::Binomial, Some(bb)) => scatter_binomial(me, send, recv, root, bb),
        (Algo::Binomial, None) => {
            let mut s = scatter_linear(me, send, recv, root);
            s.algorithm = "linear (binomial needs the counts at every rank)";
            s
        }
        _ => scatter_linear(me, send, recv, root),
    }
}

pub fn gather_linear(me: Rank, send: Option<Block>, recv: &[Block], root: i32) -> Schedule {
    let mut b = Builder::new("linear");
    if me.rank == root {
        for (i, r) in recv.iter().enumerate() {
            let i = i as i32;
            if i == root {
                if let Some(s) = send {
                    if !s.empty() {
                        b.copy(s.data, r.data, &[]);
                    }
                }
            } else if !r.empty() {
                b.recv(r.data, i, &[]);
            }
        }
    } else if let Some(s) = send {
        if !s.empty() {
            b.send(s.data, root, &[]);
        }
    }
    b.finish()
}

pub fn scatter_linear(me: Rank, send: &[Block], recv: Option<Block>, root: i32) -> Schedule {
    let mut b = Builder::new("linear");
    if me.rank == root {
        for (i, s) in send.iter().enumerate() {
            let i = i as i32;
            if i == root {
                if let Some(r) = recv {
                    if !r.empty() {
                        b.copy(s.data, r.data, &[]);
                    }
                }
            } else if !s.empty() {
                b.send(s.data, i, &[]);
            }
        }
    } else if let Some(r) = recv {
        if !r.empty() {
            b.recv(r.data, root, &[]);
        }
    }
    b.finish()
}

fn packed(addr: Addr, bytes: i64) -> Data {
    Data::new(addr, bytes, MPI_PACKED())
}

fn gather_binomial(me: Rank, send: Option<Block>, recv: &[Block], root: i32, bb: i64) -> Schedule {
    let mut b = Builder::new("binomial");
    let p = me.size as i64;
    let vr = sub_mod(me.rank, root, me.size) as i64;
    let abs = |v: i64| ((v + root as i64) % p) as i32;
    if bb == 0 {
        return b.finish();
    }
    let (parent, children) = knomial_tree(vr, p, 2);
    match parent {
        None => {
            if let Some(s) = send {
                b.copy(s.data, recv[root as usize].data, &[]);
            }
            for (c, size) in children {
                let blocks = (c..c + size).map(|v| &recv[abs(v) as usize]);
                if blocks.clone().all(|x| x.dense) {
                    let d = multi(&mut b, blocks);
                    b.recv(d, abs(c), &[]);
                } else {
                    let buf = Addr::scratch(b.scratch(size * bb));
                    let got = b.recv(packed(buf, size * bb), abs(c), &[]);
                    unpack_blocks(&mut b, buf, blocks, bb, &[got]);
                }
            }
        }
        Some(q) => {
            let s = send.expect("a non-root rank has a send buffer");
            if children.is_empty() && s.dense {
                b.send(s.data, abs(q), &[]);
            } else {
                // this rank's block, then its subtree's (a leaf: its own only)
                let size = (vr & -vr).min(p - vr);
                let buf = Addr::scratch(b.scratch(size * bb));
                let mut deps = pack_blocks(&mut b, [&s].into_iter(), buf, bb, &[]);
                for (c, csize) in children {
                    let at = buf.add((c - vr) * bb);
                    deps.push(b.recv(packed(at, csize * bb), abs(c), &[]));
                }
                b.send(packed(buf, size * bb), abs(q), &deps);
            }
        }
    }
    b.finish()
}

/// Copies `blocks` of `bb` bytes of data each into consecutive packed slots at `buf`.
fn pack_blocks<'a>(
    b: &mut Builder,
    blocks: impl Iterator<Item = &'a Block>,
    buf: Addr,
    bb: i64,
    deps: &[ActionId],
) -> Vec<ActionId> {
    // block by block: a copy takes one datatype, not `multi`'s blocks
    blocks
        .enumerate()
        .map(|(i, x)| b.copy(x.data, packed(buf.add(i as i64 * bb), bb), deps))
        .collect()
}

/// The reverse of [`pack_blocks`].
fn unpack_blocks<'a>(
    b: &mut Builder,
    buf: Addr,
    blocks: impl Iterator<Item = &'a Block>,
    bb: i64,
    deps: &[ActionId],
) -> Vec<ActionId> {
    blocks
        .enumerate()
        .map(|(i, x)| b.copy(packed(buf.add(i as i64 * bb), bb), x.data, deps))
        .collect()
}

fn scatter_binomial(me: Rank, send: &[Block], recv: Option<Block>, root: i32, bb: i64) -> Schedule {
    let mut b = Builder::new("binomial");
    let p = me.size as i64;
    let vr = sub_mod(me.rank, root, me.size) as i64;
    let abs = |v: i64| ((v + root as i64) % p) as i32;
    if bb == 0 {
        return b.finish();
    }
    let (parent, children) = knomial_tree(vr, p, 2);
    match parent {
        None => {
            for (c, size) in children {
                let blocks = (c..c + size).map(|v| &send[abs(v) as usize]);
                if blocks.clone().all(|x| x.dense) {
                    let d = multi(&mut b, blocks);
                    b.send(d, abs(c), &[]);
                } else {
                    let buf = Addr::scratch(b.scratch(size * bb));
                    let cps = pack_blocks(&mut b, blocks, buf, bb, &[]);
                    b.send(packed(buf, size * bb), abs(c), &cps);
                }
            }
            if let Some(r) = recv {
                b.copy(send[root as usize].data, r.data, &[]);
            }
        }
        Some(q) => {
            let r = recv.expect("a non-root rank has a receive buffer");
            if children.is_empty() && r.dense {
                b.recv(r.data, abs(q), &[]);
            } else {
                // this rank's block, then its subtree's (a leaf: its own only)
                let size = (vr & -vr).min(p - vr);
                let buf = Addr::scratch(b.scratch(size * bb));
                let got = [b.recv(packed(buf, size * bb), abs(q), &[])];
                for (c, csize) in children {
                    let at = buf.add((c - vr) * bb);
                    b.send(packed(at, csize * bb), abs(c), &got);
                }
                unpack_blocks(&mut b, buf, [&r].into_iter(), bb, &got);
            }
        }
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
    fn gather_and_scatter_all_algorithms() {
        for algo in [Algo::Linear, Algo::Binomial] {
            for regular in [true, false] {
                for p in 1..=12i32 {
                    for n in [0i64, 1, 3] {
                        for root in [0, p / 2, p - 1] {
                            for inplace in [false, true] {
                                check(algo, p, n, root, inplace, regular);
                            }
                        }
                    }
                }
            }
        }
    }

    fn check(algo: Algo, p: i32, n: i64, root: i32, inplace: bool, regular: bool) {
        let ch = Choice::new(algo);
        let pu = p as usize;
        let nu = n as usize;
        let blocks: Vec<Block> = (0..p as i64)
            .map(|i| blk(Addr::recv(i * n * 8), n))
            .collect();
        let sblocks: Vec<Block> = (0..p as i64)
            .map(|i| blk(Addr::send(i * n * 8), n))
            .collect();
        let bb = regular.then_some(n * 8);
        let what = format!("{algo:?} p={p} n={n} root={root} inplace={inplace} regular={regular}");
        // gather
        let scheds: Vec<Schedule> = (0..p)
            .map(|r| {
                let me = Rank { rank: r, size: p };
                let is_root = r == root;
                let send = if is_root && inplace {
                    None
                } else {
                    Some(blk(Addr::send(0), n))
                };
                gather(&ch, me, send, if is_root { &blocks } else { &[] }, root, bb)
            })
            .collect();
        for mode in [Mode::Eager, Mode::Rendezvous] {
            let mut bufs: Vec<Bufs> = (0..pu)
                .map(|r| {
                    let mine: Vec<u64> = (0..nu).map(|i| sim::val(r, i)).collect();
                    let mut recv = vec![0u64; pu * nu];
                    if r == root as usize && inplace {
                        recv[r * nu..(r + 1) * nu].copy_from_slice(&mine);
                    }
                    Bufs {
                        send: sim::to_bytes(&mine),
                        recv: sim::to_bytes(&recv),
                    }
                })
                .collect();
            sim::run(&scheds, &mut bufs, mode, 11).unwrap_or_else(|e| panic!("gather {what}: {e}"));
            let want: Vec<u64> = (0..pu)
                .flat_map(|r| (0..nu).map(move |i| sim::val(r, i)))
                .collect();
            assert_eq!(
                sim::from_bytes(&bufs[root as usize].recv),
                want,
                "gather {what}"
            );
        }
        // scatter
        let scheds: Vec<Schedule> = (0..p)
            .map(|r| {
                let me = Rank { rank: r, size: p };
                let is_root = r == root;
                let recv = if is_root && inplace {
                    None
                } else {
                    Some(blk(Addr::recv(0), n))
                };
                scatter(
                    &ch,
                    me,
                    if is_root { &sblocks } else { &[] },
                    recv,
                    root,
                    bb,
                )
            })
            .collect();
        for mode in [Mode::Eager, Mode::Rendezvous] {
            let all: Vec<u64> = (0..pu)
                .flat_map(|r| (0..nu).map(move |i| sim::val(r, i)))
                .collect();
            let mut bufs: Vec<Bufs> = (0..pu)
                .map(|r| Bufs {
                    send: if r == root as usize {
                        sim::to_bytes(&all)
                    } else {
                        vec![]
                    },
                    recv: vec![0; nu * 8],
                })
                .collect();
            sim::run(&scheds, &mut bufs, mode, 13)
                .unwrap_or_else(|e| panic!("scatter {what}: {e}"));
            for r in 0..pu {
                if r == root as usize && inplace {
                    continue;
                }
                assert_eq!(
                    sim::from_bytes(&bufs[r].recv),
                    all[r * nu..(r + 1) * nu].to_vec(),
                    "scatter {what} rank {r}"
                );
            }
        }
    }
}

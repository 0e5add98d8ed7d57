//! Layer: services. May use: core, platform.
//!
//! Allgather(v) (Kumar & Kale digest; Hoefler digest §3). All ranks know every block's
//! size (Allgatherv passes all counts everywhere), so several blocks can travel as one
//! message ([`multi`]); every algorithm places received blocks straight into the receive
//! buffer, in rank order, whatever its layout.
//! - `ring`: P-1 steps, forward the block received last to the right neighbour.
//! - `recursive-doubling` (dimension exchange): log2 P steps exchanging everything held
//!   with rank ^ 2^k; ranks above the largest power of two first hand their block to a
//!   partner below it and get everything back at the end (Kumar & Kale Eq. 5).
//! - `bruck`: ceil(log2 P) steps; in step k a rank sends what it holds (its block and the
//!   next 2^k - 1) to rank - 2^k. Any P.
//! - `mesh`: a virtual 2-D mesh of ceil(sqrt P) columns; a row exchange, then each rank
//!   sends its row's blocks down its column. A hole in the last row is covered by the last
//!   row's ranks in turn (the rank in column `x mod len(last row)` sends the last row's
//!   blocks to row x of a hole's column; the digest's hole rule, with the senders chosen
//!   so that every rank is served exactly once).
//! - `prefix` (prefix-send): step i exchanges the own block with rank XOR i; P must be a
//!   power of two (else `ring`).
//! - `kprefix`: prefix-send inside aligned partitions of k ranks plus a ring across
//!   partitions (k a power of two dividing P, else `ring`; `SHIM_ALLGATHER_K`, default 4).
//! - `kshift`: P/k phases; the block of the phase goes to the k-1 nearest ranks and hops
//!   k ranks on (P a multiple of k, else `ring`; default k = 4).
//! - `hypercube`: the hybrid hypercube: dimension exchange over all but the lowest ζ
//!   dimensions, then a direct exchange inside each ζ-dimensional subcube (ζ =
//!   `SHIM_ALLGATHER_K`, default 2), with the same fold as recursive doubling.

use super::{Block, Rank, multi, pof2_floor, sub_mod};
use crate::core::sched::{ActionId, Builder, Schedule};
use crate::services::coll::select::{Algo, Choice};

/// `send`: this rank's contribution (`None` = in place, already in its block); `blocks`:
/// the receive buffer's blocks, one per rank.
pub fn build(ch: &Choice, me: Rank, send: Option<Block>, blocks: &[Block]) -> Schedule {
    let p = me.size;
    let k = ch.k as i32;
    match ch.algo {
        Algo::RecursiveDoubling => hypercube(me, send, blocks, 0, "recursive-doubling"),
        Algo::Hypercube => hypercube(me, send, blocks, if k == 0 { 2 } else { k }, "hypercube"),
        Algo::Bruck => bruck(me, send, blocks),
        Algo::Mesh => mesh(me, send, blocks),
        Algo::Prefix if p.count_ones() == 1 => prefix(me, send, blocks),
        Algo::Prefix => ring(me, send, blocks, "ring (prefix needs a power-of-two size)"),
        Algo::KPrefix => {
            let k = if k == 0 { 4 } else { k };
            if k.count_ones() == 1 && k <= p && p % k == 0 {
                kprefix(me, send, blocks, k)
            } else {
                ring(
                    me,
                    send,
                    blocks,
                    "ring (kprefix needs a power-of-two k dividing the size)",
                )
            }
        }
        Algo::KShift => {
            let k = if k == 0 { 4 } else { k };
            if k <= p && p % k == 0 {
                kshift(me, send, blocks, k)
            } else {
                ring(me, send, blocks, "ring (kshift needs k dividing the size)")
            }
        }
        _ => ring(me, send, blocks, "ring"),
    }
}

/// A schedule builder over the call's blocks that knows which action made each block
/// available locally (the dependencies of sending it on).
struct BlockBuilder<'a> {
    b: Builder,
    blocks: &'a [Block],
    ready: Vec<Vec<ActionId>>,
}

impl<'a> BlockBuilder<'a> {
    fn new(
        name: &'static str,
        me: Rank,
        send: Option<Block>,
        blocks: &'a [Block],
    ) -> BlockBuilder<'a> {
        let mut b = Builder::new(name);
        let mut ready = vec![Vec::new(); blocks.len()];
        if let Some(s) = send {
            let mine = &blocks[me.rank as usize];
            if !s.empty() && !mine.empty() {
                ready[me.rank as usize] = vec![b.copy(s.data, mine.data, &[])];
            }
        }
        BlockBuilder { b, blocks, ready }
    }

    /// Sends blocks `idx` (in that order) as one message, after they are available.
    fn send(&mut self, idx: &[usize], peer: i32) {
        let d = multi(&mut self.b, idx.iter().map(|&i| &self.blocks[i]));
        if d.count == 0 {
            return;
        }
        let mut deps: Vec<ActionId> = idx.iter().flat_map(|&i| self.ready[i].clone()).collect();
        deps.sort_unstable();
        deps.dedup();
        self.b.send(d, peer, &deps);
    }

    /// Receives blocks `idx` (in that order) as one message.
    fn recv(&mut self, idx: &[usize], peer: i32) {
        let d = multi(&mut self.b, idx.iter().map(|&i| &self.blocks[i]));
        if d.count == 0 {
            return;
        }
        let v = self.b.recv(d, peer, &[]);
        for &i in idx {
            self.ready[i] = vec![v];
        }
    }

    fn finish(self) -> Schedule {
        self.b.finish()
    }
}

pub fn ring(me: Rank, send: Option<Block>, blocks: &[Block], name: &'static str) -> Schedule {
    let mut s = BlockBuilder::new(name, me, send, blocks);
    let p = me.size;
    let r = me.rank;
    let right = (r + 1) % p;
    let left = sub_mod(r, 1, p);
    for step in 0..p - 1 {
        let out = sub_mod(r, step, p) as usize;
        let inc = sub_mod(r, step + 1, p) as usize;
        s.send(&[out], right);
        s.recv(&[inc], left);
    }
    s.finish()
}

/// Blocks of a set of ranks below the largest power of two, followed by those of their
/// fold partners (rank + pof2), in rank order: the block list of one message.
fn with_partners(set: &[usize], pof2: usize, p: usize) -> Vec<usize> {
    let mut v: Vec<usize> = set.to_vec();
    v.extend(set.iter().map(|&x| x + pof2).filter(|&x| x < p));
    v
}

/// Recursive doubling (zeta = 0) and the hybrid hypercube.
fn hypercube(
    me: Rank,
    send: Option<Block>,
    blocks: &[Block],
    zeta: i32,
    name: &'static str,
) -> Schedule {
    let mut s = BlockBuilder::new(name, me, send, blocks);
    let p = me.size as usize;
    let r = me.rank as usize;
    if p == 1 {
        return s.finish();
    }
    let pof2 = pof2_floor(me.size) as usize;
    if r >= pof2 {
        // fold: hand the own block to the partner, get all the others back
        let partner = (r - pof2) as i32;
        s.send(&[r], partner);
        let rest: Vec<usize> = (0..p).filter(|&i| i != r).collect();
        s.recv(&rest, partner);
        return s.finish();
    }
    if r + pof2 < p {
        s.recv(&[r + pof2], (r + pof2) as i32);
    }
    let dims = pof2.trailing_zeros();
    let zeta = (zeta.max(0) as u32).min(dims);
    let low = (1usize << zeta) - 1;
    // ranks whose difference from x lies within `bits`
    let group = |x: usize, bits: usize| -> Vec<usize> {
        (0..pof2).filter(|&y| (x ^ y) & !bits == 0).collect()
    };
    let mut done_bits = 0usize;
    for d in zeta..dims {
        let m = 1usize << d;
        let peer = r ^ m;
        let mine = with_partners(&group(r, done_bits), pof2, p);
        let theirs = with_partners(&group(peer, done_bits), pof2, p);
        s.send(&mine, peer as i32);
        s.recv(&theirs, peer as i32);
        done_bits |= m;
    }
    // direct exchange inside the subcube of the low zeta dimensions
    let mine = with_partners(&group(r, done_bits), pof2, p);
    for q in group(r, low) {
        if q != r {
            s.send(&mine, q as i32);
        }
    }
    for q in group(r, low) {
        if q != r {
            let theirs = with_partners(&group(q, done_bits), pof2, p);
            s.recv(&theirs, q as i32);
        }
    }
    if r + pof2 < p {
        let rest: Vec<usize> = (0..p).filter(|&i| i != r + pof2).collect();
        s.send(&rest, (r + pof2) as i32);
    }
    s.finish()
}

fn bruck(me: Rank, send: Option<Block>, blocks: &[Block]) -> Schedule {
    let mut s = BlockBuilder::new("bruck", me, send, blocks);
    let p = me.size as usize;
    let r = me.rank as usize;
    let mut dist = 1usize;
    while dist < p {
        let cnt = dist.min(p - dist);
        let out: Vec<usize> = (0..cnt).map(|i| (r + i) % p).collect();
        let inc: Vec<usize> = (0..cnt).map(|i| (r + dist + i) % p).collect();
        s.send(&out, ((r + p - dist) % p) as i32);
        s.recv(&inc, ((r + dist) % p) as i32);
        dist *= 2;
    }
    s.finish()
}

fn mesh(me: Rank, send: Option<Block>, blocks: &[Block]) -> Schedule {
    let mut s = BlockBuilder::new("mesh", me, send, blocks);
    let p = me.size as usize;
    let r = me.rank as usize;
    if p == 1 {
        return s.finish();
    }
    let cols = (p as f64).sqrt().ceil() as usize;
    let cols = if (cols - 1) * (cols - 1) >= p {
        cols - 1
    } else {
        cols
    };
    let rows = p.div_ceil(cols);
    let last = rows - 1;
    let len_last = p - last * cols;
    let row_len = |x: usize| if x == last { len_last } else { cols };
    let row_blocks = |x: usize| -> Vec<usize> { (x * cols..x * cols + row_len(x)).collect() };
    let (my_row, my_col) = (r / cols, r % cols);
    // phase 1: the row
    for j in 0..row_len(my_row) {
        if j != my_col {
            s.send(&[r], (my_row * cols + j) as i32);
        }
    }
    for j in 0..row_len(my_row) {
        if j != my_col {
            let q = my_row * cols + j;
            s.recv(&[q], q as i32);
        }
    }
    // phase 2: the row's blocks down the column, and hole duty for the last row
    let mine = row_blocks(my_row);
    for x in 0..rows {
        if x != my_row && my_col < row_len(x) {
            s.send(&mine, (x * cols + my_col) as i32);
        }
    }
    if my_row == last {
        for k in len_last..cols {
            for x in 0..last {
                if x % len_last == my_col {
                    s.send(&mine, (x * cols + k) as i32);
                }
            }
        }
    }
    for x in 0..rows {
        if x == my_row {
            continue;
        }
        let src = if my_col < row_len(x) {
            x * cols + my_col
        } else {
            // x is the last row and (x, my_col) a hole
            x * cols + my_row % len_last
        };
        s.recv(&row_blocks(x), src as i32);
    }
    s.finish()
}

fn prefix(me: Rank, send: Option<Block>, blocks: &[Block]) -> Schedule {
    let mut s = BlockBuilder::new("prefix", me, send, blocks);
    let p = me.size as usize;
    let r = me.rank as usize;
    for i in 1..p {
        s.send(&[r], (r ^ i) as i32);
        s.recv(&[r ^ i], (r ^ i) as i32);
    }
    s.finish()
}

fn kprefix(me: Rank, send: Option<Block>, blocks: &[Block], k: i32) -> Schedule {
    let mut s = BlockBuilder::new("kprefix", me, send, blocks);
    let p = me.size as usize;
    let r = me.rank as usize;
    let k = k as usize;
    let phases = p / k;
    // in phase t, rank x circulates the block of rank x - t*k
    let cur = |x: usize, t: usize| (x + p * phases - t * k) % p;
    for t in 0..phases {
        for i in 1..k {
            let q = r ^ i;
            s.send(&[cur(r, t)], q as i32);
            s.recv(&[cur(q, t)], q as i32);
        }
        if t + 1 < phases {
            s.send(&[cur(r, t)], ((r + k) % p) as i32);
            s.recv(&[cur(r, t + 1)], ((r + p - k) % p) as i32);
        }
    }
    s.finish()
}

fn kshift(me: Rank, send: Option<Block>, blocks: &[Block], k: i32) -> Schedule {
    let mut s = BlockBuilder::new("kshift", me, send, blocks);
    let p = me.size as i64;
    let r = me.rank as i64;
    let k = k as i64;
    let phases = p / k;
    let m = |x: i64| x.rem_euclid(p) as usize;
    // the window: k - 1 offsets around 0
    let window: Vec<i64> = (-((k - 1 + 1) / 2)..=(k - 1) / 2)
        .filter(|&d| d != 0)
        .collect();
    for t in 0..phases {
        let cur = m(r - t * k);
        for &d in &window {
            s.send(&[cur], m(r + d) as i32);
        }
        if t + 1 < phases {
            s.send(&[cur], m(r + k) as i32);
        }
        for &d in &window {
            s.recv(&[m(r - d - t * k)], m(r - d) as i32);
        }
        if t + 1 < phases {
            s.recv(&[m(r - (t + 1) * k)], m(r - k) as i32);
        }
    }
    s.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::sched::Addr;
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

    const ALGOS: [Algo; 8] = [
        Algo::Ring,
        Algo::RecursiveDoubling,
        Algo::Bruck,
        Algo::Mesh,
        Algo::Prefix,
        Algo::KPrefix,
        Algo::KShift,
        Algo::Hypercube,
    ];

    /// Regular and irregular counts, in place or not, with gaps and reversed layouts.
    #[test]
    fn every_allgather_algorithm_gathers() {
        for algo in ALGOS {
            for k in [0u32, 1, 2, 3, 4, 8] {
                for p in 1..=17i32 {
                    for pattern in 0..3 {
                        for inplace in [false, true] {
                            check(algo, k, p, pattern, inplace);
                        }
                    }
                }
            }
        }
    }

    fn check(algo: Algo, k: u32, p: i32, pattern: usize, inplace: bool) {
        let pu = p as usize;
        // counts per rank: regular 2, irregular (some empty), or regular 0
        let counts: Vec<usize> = (0..pu)
            .map(|i| match pattern {
                0 => 2,
                1 => (i * 7 + 3) % 4,
                _ => 0,
            })
            .collect();
        // layout: reversed order with a gap of one element between blocks
        let mut displs = vec![0usize; pu];
        let mut at = 0;
        for i in (0..pu).rev() {
            displs[i] = at;
            at += counts[i] + 1;
        }
        let total = at;
        let blocks: Vec<Block> = (0..pu)
            .map(|i| blk(Addr::recv(displs[i] as i64 * 8), counts[i] as i64))
            .collect();
        let ch = Choice {
            algo,
            k,
            seg: 0,
            fallback: false,
        };
        let scheds: Vec<Schedule> = (0..p)
            .map(|r| {
                let send = (!inplace).then(|| blk(Addr::send(0), counts[r as usize] as i64));
                build(&ch, Rank { rank: r, size: p }, send, &blocks)
            })
            .collect();
        let what = format!("{algo:?} k={k} p={p} pattern={pattern} inplace={inplace}");
        for mode in [Mode::Eager, Mode::Rendezvous] {
            let mut bufs: Vec<Bufs> = (0..pu)
                .map(|r| {
                    let mine: Vec<u64> = (0..counts[r]).map(|i| sim::val(r, i)).collect();
                    let mut recv = vec![7u64; total];
                    if inplace {
                        recv[displs[r]..displs[r] + counts[r]].copy_from_slice(&mine);
                    }
                    Bufs {
                        send: sim::to_bytes(&mine),
                        recv: sim::to_bytes(&recv),
                    }
                })
                .collect();
            sim::run(&scheds, &mut bufs, mode, (p as u64) << 8 | k as u64)
                .unwrap_or_else(|e| panic!("{what}: {e}"));
            let mut want = vec![7u64; total];
            for (i, &c) in counts.iter().enumerate() {
                for j in 0..c {
                    want[displs[i] + j] = sim::val(i, j);
                }
            }
            for (r, bf) in bufs.iter().enumerate() {
                assert_eq!(sim::from_bytes(&bf.recv), want, "{what} rank {r}");
            }
        }
    }

    #[test]
    fn fallbacks_are_named() {
        let blocks: Vec<Block> = (0..6).map(|i| blk(Addr::recv(i * 8), 1)).collect();
        let me = Rank { rank: 0, size: 6 };
        let s = build(&Choice::new(Algo::Prefix), me, None, &blocks);
        assert!(s.algorithm.starts_with("ring (prefix"));
        let s = build(
            &Choice {
                algo: Algo::KPrefix,
                k: 4,
                seg: 0,
                fallback: false,
            },
            me,
            None,
            &blocks,
        );
        assert!(s.algorithm.starts_with("ring (kprefix"));
        let s = build(
            &Choice {
                algo: Algo::KPrefix,
                k: 2,
                seg: 0,
                fallback: false,
            },
            me,
            None,
            &blocks,
        );
        assert_eq!(s.algorithm, "kprefix");
    }
}

//! Layer: services. May use: core, platform.
//!
//! Reduce_scatter and Reduce_scatter_block (Franke digest §5.3; MPICH). Block i of the
//! reduced vector (`counts[i]` elements) goes to rank i; in place the input vector is the
//! receive buffer and the result lands at its start.
//! - `ring`: P-1 steps; the partial result of a block travels round the ring, each rank
//!   adding its contribution, until it reaches its owner. Bandwidth-optimal.
//! - `recursive-halving`: log2 P steps exchanging half of the remaining blocks with
//!   rank ^ distance (distance halving), with the usual fold for P not a power of two.
//! - `pairwise`: P-1 steps, step i sends the block of rank + i to it and receives this
//!   rank's block from rank - i.
//! - `reduce-scatterv`: a reduce of the whole vector to rank 0 and a scatter of the
//!   blocks; it keeps rank order, so non-commutative operations use it whatever was asked
//!   (the three above combine in ring or butterfly order).

use super::{Rank, Reduction, pof2_floor};
use crate::core::sched::{ActionId, Addr, Builder, Data, Schedule};
use crate::services::coll::select::{Algo, Choice};

pub fn build(ch: &Choice, me: Rank, r: &Reduction, counts: &[i64], inplace: bool) -> Schedule {
    let ordered = |name: &'static str| {
        let mut s = via_reduce(me, r, counts, inplace);
        s.algorithm = name;
        s
    };
    match ch.algo {
        Algo::Ring if r.commutative => ring(me, r, counts, inplace, false),
        Algo::Pairwise if r.commutative => ring(me, r, counts, inplace, true),
        Algo::RecursiveHalving if r.commutative => recursive_halving(me, r, counts, inplace),
        Algo::Ring | Algo::Pairwise | Algo::RecursiveHalving => {
            ordered("reduce-scatterv (the algorithm chosen needs a commutative operation)")
        }
        _ => via_reduce(me, r, counts, inplace),
    }
}

/// Element offset of each block (and the total at index P).
fn offsets(counts: &[i64]) -> Vec<i64> {
    let mut o = vec![0i64; counts.len() + 1];
    for (i, &c) in counts.iter().enumerate() {
        o[i + 1] = o[i] + c;
    }
    o
}

fn input_of(inplace: bool) -> Addr {
    if inplace {
        Addr::recv(0)
    } else {
        Addr::send(0)
    }
}

/// The ring (`pairwise` = false) and pairwise reduce-scatters. Commutative operations.
fn ring(me: Rank, r: &Reduction, counts: &[i64], inplace: bool, pairwise: bool) -> Schedule {
    let mut b = Builder::new(if pairwise { "pairwise" } else { "ring" });
    let p = me.size as i64;
    let rank = me.rank as i64;
    let off = offsets(counts);
    let ext = r.ti.extent;
    let input = input_of(inplace);
    let blk = |a: Addr, i: i64| Data::new(a.add(off[i as usize] * ext), counts[i as usize], r.dt);
    let mine = counts[rank as usize];
    if r.ti.size == 0 || off[p as usize] == 0 {
        return b.finish();
    }
    // the accumulator of this rank's block, and every action that read the input
    let acc = b.scratch_for(mine, &r.ti);
    let acc_d = Data::new(acc, mine, r.dt);
    let mut reads: Vec<ActionId> = Vec::new();
    let mut last: Vec<ActionId> = Vec::new();
    if pairwise {
        if mine > 0 {
            let c = b.copy(blk(input, rank), acc_d, &[]);
            reads.push(c);
            last = vec![c];
        }
        let mut prev: Vec<ActionId> = Vec::new();
        for i in 1..p {
            let to = (rank + i) % p;
            let from = (rank - i).rem_euclid(p);
            let mut step = Vec::new();
            if counts[to as usize] > 0 {
                let s = b.send(blk(input, to), to as i32, &prev);
                reads.push(s);
                step.push(s);
            }
            if mine > 0 {
                let t = b.scratch_for(mine, &r.ti);
                let rv = b.recv(Data::new(t, mine, r.dt), from as i32, &prev);
                let mut d = last.clone();
                d.push(rv);
                last = vec![b.reduce(t, acc, mine, r.dt, r.op, &d)];
                step.push(rv);
            }
            if !step.is_empty() {
                prev = step;
            }
        }
    } else {
        // step s: send the partial of block rank - s - 1, receive that of rank - s - 2
        let right = ((rank + 1) % p) as i32;
        let left = ((rank - 1).rem_euclid(p)) as i32;
        let mut partial: Option<(Addr, Vec<ActionId>)> = None; // the block being passed on
        for s in 0..p - 1 {
            let out = (rank - s - 1).rem_euclid(p);
            let inc = (rank - s - 2).rem_euclid(p);
            if counts[out as usize] > 0 {
                let (src, deps) = match partial.take() {
                    Some((a, d)) => (Data::new(a, counts[out as usize], r.dt), d),
                    None => (blk(input, out), Vec::new()),
                };
                let sv = b.send(src, right, &deps);
                if s == 0 {
                    reads.push(sv);
                }
            }
            if counts[inc as usize] > 0 {
                let n = counts[inc as usize];
                let t = b.scratch_for(n, &r.ti);
                let rv = b.recv(Data::new(t, n, r.dt), left, &[]);
                // t = input block op t
                let in_blk = input.add(off[inc as usize] * ext);
                let red = b.reduce(in_blk, t, n, r.dt, r.op, &[rv]);
                reads.push(red);
                partial = Some((t, vec![red]));
            } else {
                partial = None;
            }
        }
        if mine > 0 {
            match partial {
                Some((t, d)) => {
                    last = vec![b.copy(Data::new(t, mine, r.dt), acc_d, &d)];
                }
                None => {
                    // P = 1: the block is the input
                    let c = b.copy(blk(input, rank), acc_d, &[]);
                    reads.push(c);
                    last = vec![c];
                }
            }
        }
    }
    if mine > 0 {
        // in place the result overwrites the input: after everything read it
        let mut d = last;
        d.extend(&reads);
        b.copy(acc_d, Data::new(Addr::recv(0), mine, r.dt), &d);
    }
    b.finish()
}

/// Recursive halving (distance halving) with a fold: ranks 2i < 2*rem send their whole
/// vector to 2i + 1, which also does the work for 2i's block and sends it back at the end.
/// Commutative operations.
fn recursive_halving(me: Rank, r: &Reduction, counts: &[i64], inplace: bool) -> Schedule {
    let mut b = Builder::new("recursive-halving");
    let p = me.size as i64;
    let rank = me.rank as i64;
    let off = offsets(counts);
    let total = off[p as usize];
    let ext = r.ti.extent;
    let input = input_of(inplace);
    let mine = counts[rank as usize];
    let out = Data::new(Addr::recv(0), mine, r.dt);
    if r.ti.size == 0 || total == 0 {
        return b.finish();
    }
    let pof2 = pof2_floor(me.size) as i64;
    let rem = p - pof2;
    let full = Reduction { count: total, ..*r };
    let range = |a: Addr, lo: i64, hi: i64| Data::new(a.add(lo * ext), hi - lo, r.dt);
    if rank < 2 * rem && rank % 2 == 0 {
        let s = b.send(full.data(input), (rank + 1) as i32, &[]);
        if mine > 0 {
            b.recv(out, (rank + 1) as i32, &[s]);
        }
        return b.finish();
    }
    let a = b.scratch_for(total, &r.ti);
    let tmp = b.scratch_for(total, &r.ti);
    let c = b.copy(full.data(input), full.data(a), &[]);
    let mut reads = vec![c];
    let mut last = vec![c];
    if rank < 2 * rem {
        let rv = b.recv(full.data(tmp), (rank - 1) as i32, &[]);
        last = vec![b.reduce(tmp, a, total, r.dt, r.op, &[rv, c])];
    }
    let newrank = if rank < 2 * rem { rank / 2 } else { rank - rem };
    let real = |nr: i64| if nr < rem { nr * 2 + 1 } else { nr + rem } as i32;
    // element range of the blocks of new ranks lo..hi
    let first_rank = |nr: i64| if nr < rem { nr * 2 } else { nr + rem };
    let span = |lo: i64, hi: i64| {
        let a = off[first_rank(lo) as usize];
        let z = if hi >= pof2 {
            total
        } else {
            off[first_rank(hi) as usize]
        };
        (a, z)
    };
    let (mut lo, mut hi) = (0i64, pof2);
    let mut mask = pof2 / 2;
    while mask >= 1 {
        let partner = newrank ^ mask;
        let mid = lo + (hi - lo) / 2;
        let (keep, give) = if newrank < partner {
            ((lo, mid), (mid, hi))
        } else {
            ((mid, hi), (lo, mid))
        };
        let (g0, g1) = span(give.0, give.1);
        let (k0, k1) = span(keep.0, keep.1);
        if g1 > g0 {
            reads.push(b.send(range(a, g0, g1), real(partner), &last));
        }
        if k1 > k0 {
            let rv = b.recv(range(tmp, k0, k1), real(partner), &last);
            let mut d = last.clone();
            d.push(rv);
            last = vec![b.reduce(tmp.add(k0 * ext), a.add(k0 * ext), k1 - k0, r.dt, r.op, &d)];
        }
        (lo, hi) = keep;
        mask /= 2;
    }
    // a holds the blocks of this new rank's original ranks
    if rank < 2 * rem {
        let even = rank - 1;
        let n = counts[even as usize];
        if n > 0 {
            b.send(
                Data::new(a.add(off[even as usize] * ext), n, r.dt),
                even as i32,
                &last,
            );
        }
    }
    if mine > 0 {
        let mut d = last;
        d.extend(&reads);
        b.copy(
            Data::new(a.add(off[rank as usize] * ext), mine, r.dt),
            out,
            &d,
        );
    }
    b.finish()
}

/// Reduce of the whole vector to rank 0 (scratch there), then a scatter of the blocks.
fn via_reduce(me: Rank, r: &Reduction, counts: &[i64], inplace: bool) -> Schedule {
    let mut b = Builder::new(if r.commutative {
        "reduce-scatterv"
    } else {
        "reduce-scatterv-ordered"
    });
    let total: i64 = counts.iter().sum();
    let full = Reduction { count: total, ..*r };
    let input = input_of(inplace);
    let tmp = if me.rank == 0 {
        b.scratch_for(total, &r.ti)
    } else {
        Addr::scratch(0)
    };
    let last = super::reduce::tree(&mut b, me, &full, input, tmp, 0, 2, &[]);
    let ext = r.ti.extent;
    if me.rank == 0 {
        let mut off = 0;
        for (i, &c) in counts.iter().enumerate() {
            if c > 0 && r.ti.size > 0 {
                let src = Data::new(tmp.add(off * ext), c, r.dt);
                if i == 0 {
                    b.copy(src, Data::new(Addr::recv(0), c, r.dt), &last);
                } else {
                    b.send(src, i as i32, &last);
                }
            }
            off += c;
        }
    } else {
        let c = counts[me.rank as usize];
        if c > 0 && r.ti.size > 0 {
            // in place the input is the receive buffer: after this rank's part was sent
            b.recv(Data::new(Addr::recv(0), c, r.dt), 0, &last);
        }
    }
    b.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::sched::sim::{self, Bufs, Mode};
    use crate::services::coll::algo::reduce::tests::{expect, input, reduction};

    #[test]
    fn every_reduce_scatter_algorithm() {
        for algo in [
            Algo::Ring,
            Algo::RecursiveHalving,
            Algo::Pairwise,
            Algo::ReduceScatterv,
        ] {
            for p in 1..=12i32 {
                for pattern in 0..4 {
                    for commutative in [true, false] {
                        for inplace in [false, true] {
                            check(algo, p, pattern, commutative, inplace);
                        }
                    }
                }
            }
        }
    }

    fn check(algo: Algo, p: i32, pattern: usize, commutative: bool, inplace: bool) {
        let pu = p as usize;
        let counts: Vec<i64> = (0..pu)
            .map(|i| match pattern {
                0 => 2,
                1 => ((i * 5 + 1) % 4) as i64,
                2 => 0,
                _ => (i == pu / 2) as i64 * 3,
            })
            .collect();
        let total: i64 = counts.iter().sum();
        let n = total as usize;
        let ch = Choice::new(algo);
        let scheds: Vec<Schedule> = (0..p)
            .map(|x| {
                let r = reduction(counts[x as usize], commutative);
                build(&ch, Rank { rank: x, size: p }, &r, &counts, inplace)
            })
            .collect();
        let what = format!("{algo:?} p={p} counts={counts:?} comm={commutative} inplace={inplace}");
        for mode in [Mode::Eager, Mode::Rendezvous] {
            let mut bufs: Vec<Bufs> = (0..pu)
                .map(|x| {
                    let all: Vec<u64> = (0..n).map(|i| input(commutative, x, i)).collect();
                    if inplace {
                        Bufs {
                            send: vec![],
                            recv: sim::to_bytes(&all),
                        }
                    } else {
                        Bufs {
                            send: sim::to_bytes(&all),
                            recv: vec![0; counts[x] as usize * 8],
                        }
                    }
                })
                .collect();
            sim::run(&scheds, &mut bufs, mode, 3).unwrap_or_else(|e| panic!("{what}: {e}"));
            let mut at = 0usize;
            for (x, bf) in bufs.iter().enumerate() {
                let c = counts[x] as usize;
                let want: Vec<u64> = (at..at + c)
                    .map(|i| expect(commutative, 0, pu - 1, i))
                    .collect();
                let got = sim::from_bytes(&bf.recv);
                assert_eq!(&got[..c], &want[..], "{what} ({mode:?}) rank {x}");
                at += c;
            }
        }
    }
}

//! Layer: services. May use: core, platform.
//!
//! Scan and Exscan (Franke digest §5.4).
//! - `recursive-doubling` (the MPICH algorithm): in step k a rank exchanges its partial
//!   result (the reduction of a contiguous range of ranks ending at itself) with
//!   rank ^ 2^k. Data from a lower rank is combined on the left, so non-commutative
//!   operations see rank order; a higher rank's data only extends the partial result that
//!   is passed on.
//! - `pipeline` (linear): rank r receives the prefix of ranks 0..r-1 from r-1, segment by
//!   segment (`SHIM_SCAN_SEGMENT`), combines it on the left of its own data and passes
//!   the new prefix on. P-1 steps, but each segment moves as soon as it is ready.

use super::{Rank, Reduction};
use crate::core::sched::{ActionId, Addr, Builder, Data, Schedule};
use crate::services::coll::select::{Algo, Choice};

pub fn build(ch: &Choice, me: Rank, r: &Reduction, inplace: bool, exclusive: bool) -> Schedule {
    match ch.algo {
        Algo::Pipeline => pipeline(me, r, inplace, exclusive, ch.seg),
        _ => recursive_doubling(me, r, inplace, exclusive),
    }
}

fn pipeline(me: Rank, r: &Reduction, inplace: bool, exclusive: bool, seg: i64) -> Schedule {
    let mut b = Builder::new("pipeline");
    let res = Addr::recv(0);
    let input = if inplace { res } else { Addr::send(0) };
    if r.bytes() == 0 {
        return b.finish();
    }
    let rank = me.rank;
    let last = rank == me.size - 1;
    let per = if seg <= 0 || r.ti.size == 0 {
        r.count
    } else {
        (seg / r.ti.size).max(1)
    };
    let ext = r.ti.extent;
    let part = |a: Addr, lo: i64, n: i64| Data::new(a.add(lo * ext), n, r.dt);
    // exclusive scan: the prefix to pass on is computed in scratch
    let fwd = if exclusive && rank > 0 && !last {
        b.scratch_for(r.count, &r.ti)
    } else {
        Addr::scratch(0)
    };
    let mut lo = 0;
    while lo < r.count {
        let n = per.min(r.count - lo);
        if !exclusive {
            // res = input, then res = prefix(r-1) op res
            let mut ready: Vec<ActionId> = if inplace {
                Vec::new()
            } else {
                vec![b.copy(part(input, lo, n), part(res, lo, n), &[])]
            };
            if rank > 0 {
                let t = b.scratch_for(n, &r.ti);
                let rv = b.recv(part(t, 0, n), rank - 1, &[]);
                let mut d = ready.clone();
                d.push(rv);
                ready = vec![b.reduce(t, res.add(lo * ext), n, r.dt, r.op, &d)];
            }
            if !last {
                b.send(part(res, lo, n), rank + 1, &ready);
            }
        } else if rank == 0 {
            if !last {
                b.send(part(input, lo, n), 1, &[]);
            }
        } else {
            // res = prefix(r-1); pass on prefix(r-1) op input
            let copied: Vec<ActionId> = if last {
                Vec::new()
            } else {
                vec![b.copy(part(input, lo, n), part(fwd, lo, n), &[])]
            };
            // in place, the input is read before the prefix overwrites it
            let rv = b.recv(
                part(res, lo, n),
                rank - 1,
                if inplace { &copied } else { &[] },
            );
            if !last {
                let mut d = copied;
                d.push(rv);
                let red = b.reduce(res.add(lo * ext), fwd.add(lo * ext), n, r.dt, r.op, &d);
                b.send(part(fwd, lo, n), rank + 1, &[red]);
            }
        }
        lo += n;
    }
    b.finish()
}

fn recursive_doubling(me: Rank, r: &Reduction, inplace: bool, exclusive: bool) -> Schedule {
    let mut b = Builder::new("recursive-doubling");
    let p = me.size;
    let rank = me.rank;
    let res = Addr::recv(0);
    let input = if inplace { res } else { Addr::send(0) };
    if r.bytes() == 0 {
        return b.finish();
    }
    let mut partial = b.scratch_for(r.count, &r.ti);
    let mut tmp = b.scratch_for(r.count, &r.ti);
    let c = b.copy(r.data(input), r.data(partial), &[]);
    let mut partial_ready: Vec<ActionId> = vec![c];
    // The result buffer: inclusive scan starts from the own contribution.
    let mut res_ready: Vec<ActionId> = Vec::new();
    let mut res_valid = !exclusive;
    if !exclusive && !inplace {
        res_ready = vec![b.copy(r.data(input), r.data(res), &[])];
    }
    if exclusive && inplace {
        // the input in the result buffer is read (copied to `partial`) before any write
        res_ready = vec![c];
    }
    let mut prev_step: Vec<ActionId> = vec![c];
    let mut mask = 1;
    while mask < p {
        let dst = rank ^ mask;
        if dst < p {
            let s = b.send(r.data(partial), dst, &partial_ready);
            let rv = b.recv(r.data(tmp), dst, &prev_step);
            let mut step = vec![s, rv];
            if dst < rank {
                // tmp holds lower ranks: partial = tmp op partial, result = tmp op result
                let red = b.reduce(tmp, partial, r.count, r.dt, r.op, &[rv, s]);
                step.push(red);
                partial_ready = vec![red];
                let mut d = res_ready.clone();
                d.push(rv);
                let w = if res_valid {
                    b.reduce(tmp, res, r.count, r.dt, r.op, &d)
                } else {
                    res_valid = true;
                    b.copy(r.data(tmp), r.data(res), &d)
                };
                step.push(w);
                res_ready = vec![w];
            } else if r.commutative {
                let red = b.reduce(tmp, partial, r.count, r.dt, r.op, &[rv, s]);
                step.push(red);
                partial_ready = vec![red];
            } else {
                // partial = partial op tmp: computed into tmp, then the buffers swap
                let red = b.reduce(partial, tmp, r.count, r.dt, r.op, &[rv]);
                step.push(red);
                partial_ready = vec![red];
                std::mem::swap(&mut partial, &mut tmp);
            }
            prev_step = step;
        }
        mask <<= 1;
    }
    b.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::sched::sim::{self, Bufs, Mode};
    use crate::services::coll::algo::reduce::tests::{expect, input, reduction};

    #[test]
    fn every_scan_algorithm() {
        for algo in [Algo::RecursiveDoubling, Algo::Pipeline] {
            for seg in [0i64, 8, 24] {
                for p in 1..=11i32 {
                    for count in [0i64, 1, 4, 9] {
                        for commutative in [true, false] {
                            for inplace in [false, true] {
                                for exclusive in [false, true] {
                                    check(algo, seg, p, count, commutative, inplace, exclusive);
                                }
                            }
                        }
                    }
                }
            }
        }
    }

    fn check(
        algo: Algo,
        seg: i64,
        p: i32,
        count: i64,
        commutative: bool,
        inplace: bool,
        exclusive: bool,
    ) {
        let ch = Choice {
            algo,
            k: 0,
            seg,
            fallback: false,
        };
        let r = reduction(count, commutative);
        let scheds: Vec<Schedule> = (0..p)
            .map(|x| build(&ch, Rank { rank: x, size: p }, &r, inplace, exclusive))
            .collect();
        let what = format!(
            "{algo:?} seg={seg} p={p} count={count} comm={commutative} inplace={inplace} excl={exclusive}"
        );
        let n = count as usize;
        for mode in [Mode::Eager, Mode::Rendezvous] {
            let mut bufs: Vec<Bufs> = (0..p as usize)
                .map(|x| {
                    let mine: Vec<u64> = (0..n).map(|i| input(commutative, x, i)).collect();
                    if inplace {
                        Bufs {
                            send: vec![],
                            recv: sim::to_bytes(&mine),
                        }
                    } else {
                        Bufs {
                            send: sim::to_bytes(&mine),
                            recv: vec![0; n * 8],
                        }
                    }
                })
                .collect();
            sim::run(&scheds, &mut bufs, mode, 5).unwrap_or_else(|e| panic!("{what}: {e}"));
            for (x, bf) in bufs.iter().enumerate() {
                if exclusive && x == 0 {
                    continue;
                }
                let hi = if exclusive { x - 1 } else { x };
                let want: Vec<u64> = (0..n).map(|i| expect(commutative, 0, hi, i)).collect();
                assert_eq!(
                    sim::from_bytes(&bf.recv),
                    want,
                    "{what} ({mode:?}) rank {x}"
                );
            }
        }
    }
}

//! Layer: services. May use: core, platform.
//!
//! Reduce and Allreduce (Franke digest §5; Hoefler digest §3, §8.4; Thakur, Rabenseifner
//! and Gropp).
//!
//! Combination order: `Reduce` actions compute `dst = src op dst` (MPI_Reduce_local's
//! order). Non-commutative operations must combine in rank order (MPI-4.0 §6.9.1), so
//! every builder that accepts them arranges for the lower ranks' partial result to be the
//! left operand; where that needs the result in the other buffer, the builder swaps the
//! roles of the two buffers instead of copying. Algorithms that cannot keep the order
//! (ring, n-way dissemination) fall back, for non-commutative operations, to one that can.
//!
//! Reduce:
//! - `binomial` / `knomial`: a k-nomial tree (k = 2: binomial). Commutative operations use
//!   the tree over ranks relative to the root; non-commutative ones the tree over natural
//!   ranks rooted at 0 (every subtree is a contiguous range of ranks, combined in order),
//!   and rank 0 then sends the result to the root.
//! - `rabenseifner`: reduce-scatter by recursive vector halving and distance doubling,
//!   then a binomial gather of the pieces to the root (ranks above the largest power of
//!   two fold into a partner first).
//! - `pipeline`: a chain towards the root, segment by segment (`SHIM_REDUCE_SEGMENT`).
//!
//! Allreduce:
//! - `recursive-doubling`: log2 P exchanges of the whole vector, with a fold for P not a
//!   power of two.
//! - `nway-dissemination`: round r exchanges with the n ranks p ± i(n+1)^r (Hoefler
//!   Eq. III.6) over the largest power of n+1; the others fold in and out. Commutative.
//! - `rabenseifner`: the reduce-scatter above, then an allgather by recursive vector
//!   doubling and distance halving.
//! - `ring`: a ring reduce-scatter of P chunks and a ring allgather (2P-2 steps; Hoefler
//!   Eq. III.7), chunks cut into pieces of at most `SHIM_ALLREDUCE_SEGMENT` bytes.
//!   Commutative.
//! - `reduce-bcast`: a binomial reduce to rank 0 and a binomial broadcast.

use super::bcast::knomial_tree;
use super::{Rank, Reduction, pof2_floor, split, sub_mod};
use crate::core::sched::{ActionId, Addr, Builder, Data, Schedule};
use crate::services::coll::select::{Algo, Choice};

fn copy_to(
    b: &mut Builder,
    r: &Reduction,
    from: Addr,
    to: Addr,
    deps: &[ActionId],
) -> Vec<ActionId> {
    if from == to || r.count == 0 {
        deps.to_vec()
    } else {
        vec![b.copy(r.data(from), r.data(to), deps)]
    }
}

/// Elements `lo..lo + n` of a vector at `base`.
fn part(r: &Reduction, base: Addr, lo: i64, n: i64) -> Data {
    Data::new(base.add(lo * r.ti.extent), n, r.dt)
}

/// `dst[lo..lo+n] = src[lo..lo+n] op dst[lo..lo+n]`.
fn reduce_part(
    b: &mut Builder,
    r: &Reduction,
    src: Addr,
    dst: Addr,
    lo: i64,
    n: i64,
    deps: &[ActionId],
) -> ActionId {
    let off = lo * r.ti.extent;
    b.reduce(src.add(off), dst.add(off), n, r.dt, r.op, deps)
}

pub fn reduce(ch: &Choice, me: Rank, r: &Reduction, inplace: bool, root: i32) -> Schedule {
    let input = if inplace && me.rank == root {
        Addr::recv(0)
    } else {
        Addr::send(0)
    };
    match ch.algo {
        Algo::Rabenseifner => reduce_rabenseifner(me, r, input, root),
        Algo::Pipeline => reduce_pipeline(me, r, input, root, ch.seg),
        Algo::Knomial => {
            let mut b = Builder::new(if r.commutative {
                "knomial"
            } else {
                "knomial-ordered"
            });
            tree(
                &mut b,
                me,
                r,
                input,
                Addr::recv(0),
                root,
                ch.k.max(2) as i64,
                &[],
            );
            b.finish()
        }
        _ => {
            let mut b = Builder::new(if r.commutative {
                "binomial"
            } else {
                "binomial-ordered"
            });
            tree(&mut b, me, r, input, Addr::recv(0), root, 2, &[]);
            b.finish()
        }
    }
}

pub fn allreduce(ch: &Choice, me: Rank, r: &Reduction, inplace: bool) -> Schedule {
    match ch.algo {
        Algo::NwayDissemination if r.commutative => nway(me, r, inplace, ch.k.max(1) as i64),
        Algo::Rabenseifner => allreduce_rabenseifner(me, r, inplace),
        Algo::Ring if r.commutative => ring(me, r, inplace, ch.seg),
        Algo::ReduceBcast => reduce_bcast(me, r, inplace),
        Algo::NwayDissemination | Algo::Ring => {
            let mut s = recursive_doubling(me, r, inplace);
            s.algorithm = "recursive-doubling (the algorithm chosen needs a commutative operation)";
            s
        }
        _ => recursive_doubling(me, r, inplace),
    }
}

/// Reduces every rank's `input` into `output` at `root` over a k-nomial tree. Returns
/// this rank's last action(s): callers chain on them before reusing the buffers.
#[allow(clippy::too_many_arguments)]
pub fn tree(
    b: &mut Builder,
    me: Rank,
    r: &Reduction,
    input: Addr,
    output: Addr,
    root: i32,
    k: i64,
    deps: &[ActionId],
) -> Vec<ActionId> {
    let p = me.size as i64;
    if r.bytes() == 0 {
        return deps.to_vec();
    }
    if p == 1 {
        return copy_to(b, r, input, output, deps);
    }
    if r.commutative {
        let vr = sub_mod(me.rank, root, me.size) as i64;
        let abs = |v: i64| ((v + root as i64) % p) as i32;
        let (parent, children) = knomial_tree(vr, p, k);
        let mut last = deps.to_vec();
        let acc = if children.is_empty() {
            input
        } else {
            let acc = if parent.is_none() {
                output
            } else {
                b.scratch_for(r.count, &r.ti)
            };
            last = copy_to(b, r, input, acc, &last);
            acc
        };
        let tmps: Vec<(Addr, ActionId)> = children
            .iter()
            .map(|&(c, _)| {
                let t = b.scratch_for(r.count, &r.ti);
                (t, b.recv(r.data(t), abs(c), &[]))
            })
            .collect();
        for (t, rv) in tmps {
            let mut d = last.clone();
            d.push(rv);
            last = vec![b.reduce(t, acc, r.count, r.dt, r.op, &d)];
        }
        match parent {
            Some(q) => vec![b.send(r.data(acc), abs(q), &last)],
            None => last,
        }
    } else {
        // natural ranks, rooted at 0: children in ascending order extend the range
        let rank = me.rank as i64;
        let (parent, mut children) = knomial_tree(rank, p, k);
        children.sort_unstable();
        let mut acc = input;
        let mut last = deps.to_vec();
        let tmps: Vec<(Addr, ActionId)> = children
            .iter()
            .map(|&(c, _)| {
                let t = b.scratch_for(r.count, &r.ti);
                (t, b.recv(r.data(t), c as i32, &[]))
            })
            .collect();
        for (t, rv) in tmps {
            let mut d = last.clone();
            d.push(rv);
            // t = acc op t: the accumulator holds the lower ranks
            last = vec![b.reduce(acc, t, r.count, r.dt, r.op, &d)];
            acc = t;
        }
        let mut out = match parent {
            Some(q) => vec![b.send(r.data(acc), q as i32, &last)],
            None if root == 0 => copy_to(b, r, acc, output, &last),
            None => vec![b.send(r.data(acc), root, &last)],
        };
        if me.rank == root && root != 0 {
            // in place the input is the output: receive after this rank's part read it
            out = vec![b.recv(r.data(output), 0, &out)];
        }
        out
    }
}

/// The allreduce used before (recursive doubling) with a fold for P not a power of two:
/// pairs 2i, 2i+1 combine first (the even rank sits out and gets the result at the end),
/// which keeps every partial result a contiguous, ordered range of ranks.
pub fn recursive_doubling(me: Rank, r: &Reduction, inplace: bool) -> Schedule {
    let mut b = Builder::new("recursive-doubling");
    let p = me.size;
    let rank = me.rank;
    let res = Addr::recv(0);
    let mut last = if inplace {
        Vec::new()
    } else {
        copy_to(&mut b, r, Addr::send(0), res, &[])
    };
    if p == 1 || r.bytes() == 0 {
        return b.finish();
    }
    let pof2 = pof2_floor(p);
    let rem = p - pof2;
    let mut other = b.scratch_for(r.count, &r.ti);
    let mut cur = res;
    let newrank;
    let mut fold_send = None;
    if rank < 2 * rem {
        if rank % 2 == 0 {
            fold_send = Some(b.send(r.data(cur), rank + 1, &last));
            newrank = -1;
        } else {
            let rv = b.recv(r.data(other), rank - 1, &[]);
            let mut d = last.clone();
            d.push(rv);
            // the even partner is the lower rank: cur = other op cur
            last = vec![b.reduce(other, cur, r.count, r.dt, r.op, &d)];
            newrank = rank / 2;
        }
    } else {
        newrank = rank - rem;
    }
    if newrank >= 0 {
        let mut mask = 1;
        let mut prev_send: Vec<ActionId> = Vec::new();
        while mask < pof2 {
            let nd = newrank ^ mask;
            let dst = if nd < rem { nd * 2 + 1 } else { nd + rem };
            let s = b.send(r.data(cur), dst, &last);
            let mut rdeps = last.clone();
            rdeps.extend(&prev_send);
            let rv = b.recv(r.data(other), dst, &rdeps);
            if r.commutative || dst < rank {
                last = vec![b.reduce(other, cur, r.count, r.dt, r.op, &[rv, s])];
            } else {
                last = vec![b.reduce(cur, other, r.count, r.dt, r.op, &[rv])];
                std::mem::swap(&mut cur, &mut other);
            }
            prev_send = vec![s];
            mask <<= 1;
        }
        let mut d = last.clone();
        d.extend(&prev_send);
        last = copy_to(&mut b, r, cur, res, &d);
        if rank < 2 * rem {
            b.send(r.data(res), rank - 1, &last);
        }
    } else {
        let d: Vec<ActionId> = fold_send.into_iter().collect();
        b.recv(r.data(res), rank + 1, &d);
    }
    b.finish()
}

/// n-way dissemination over Q = (n+1)^j ranks; rank y >= Q folds into y mod Q first and
/// gets the result back at the end. Commutative operations only.
fn nway(me: Rank, r: &Reduction, inplace: bool, n: i64) -> Schedule {
    let mut b = Builder::new("nway-dissemination");
    let p = me.size as i64;
    let rank = me.rank as i64;
    let res = Addr::recv(0);
    let mut last = if inplace {
        Vec::new()
    } else {
        copy_to(&mut b, r, Addr::send(0), res, &[])
    };
    if p == 1 || r.bytes() == 0 {
        return b.finish();
    }
    let n = n.min(p - 1).max(1);
    let mut q = 1i64;
    while q * (n + 1) <= p {
        q *= n + 1;
    }
    if rank >= q {
        let s = b.send(r.data(res), (rank % q) as i32, &last);
        b.recv(r.data(res), (rank % q) as i32, &[s]);
        return b.finish();
    }
    // fold in the ranks rank + Q, rank + 2Q, ...
    let mut y = rank + q;
    while y < p {
        let t = b.scratch_for(r.count, &r.ti);
        let rv = b.recv(r.data(t), y as i32, &[]);
        let mut d = last.clone();
        d.push(rv);
        last = vec![b.reduce(t, res, r.count, r.dt, r.op, &d)];
        y += q;
    }
    let tmps: Vec<Addr> = (0..n).map(|_| b.scratch_for(r.count, &r.ti)).collect();
    let mut dist = 1i64;
    let mut prev_reads: Vec<ActionId> = Vec::new();
    while dist < q {
        let mut sends = Vec::new();
        for i in 1..=n {
            if i * dist >= q {
                break;
            }
            sends.push(b.send(r.data(res), ((rank + i * dist) % q) as i32, &last));
        }
        let mut rvs = Vec::new();
        for i in 1..=n {
            if i * dist >= q {
                break;
            }
            let from = ((rank - i * dist) % q + q) % q;
            let t = tmps[(i - 1) as usize];
            rvs.push((t, b.recv(r.data(t), from as i32, &prev_reads)));
        }
        // the result may change only after this round's sends have read it
        let mut d = last.clone();
        d.extend(&sends);
        prev_reads.clear();
        for (t, rv) in rvs {
            let mut dd = d.clone();
            dd.push(rv);
            let red = b.reduce(t, res, r.count, r.dt, r.op, &dd);
            d = vec![red];
            prev_reads.push(red);
        }
        last = d;
        dist *= n + 1;
    }
    let mut y = rank + q;
    while y < p {
        b.send(r.data(res), y as i32, &last);
        y += q;
    }
    b.finish()
}

/// The element range a rank of the power-of-two group keeps after the reduce-scatter
/// steps with masks 1, 2, .. up to and including `upto` (0 = none yet).
fn kept(newrank: i64, count: i64, upto: i64) -> (i64, i64) {
    let (mut lo, mut hi) = (0, count);
    let mut mask = 1;
    while mask <= upto {
        let mid = lo + (hi - lo) / 2;
        if newrank & mask == 0 {
            hi = mid;
        } else {
            lo = mid;
        }
        mask <<= 1;
    }
    (lo, hi)
}

/// State after Rabenseifner's reduce-scatter on one rank.
struct RabenseifnerState {
    /// This rank's index in the power-of-two group, or -1 if it folded out.
    newrank: i64,
    pof2: i64,
    rem: i64,
    /// Where the kept range lives (buffer `a` or the scratch `b`).
    loc: Addr,
    /// The last reduction / copy, and every send so far (their buffers are reused).
    last: Vec<ActionId>,
    sends: Vec<ActionId>,
}

/// Reduce-scatter by recursive vector halving and distance doubling. `a` holds this
/// rank's input (after `deps`); `other` is a second full-length buffer. Ranks 2i < 2*rem
/// fold into 2i + 1 first.
fn rabenseifner_rs(
    b: &mut Builder,
    me: Rank,
    r: &Reduction,
    a: Addr,
    other: Addr,
    deps: &[ActionId],
) -> RabenseifnerState {
    let p = me.size as i64;
    let rank = me.rank as i64;
    let pof2 = pof2_floor(me.size) as i64;
    let rem = p - pof2;
    let mut last = deps.to_vec();
    let mut sends = Vec::new();
    let newrank = if rank < 2 * rem {
        if rank % 2 == 0 {
            sends.push(b.send(r.data(a), (rank + 1) as i32, &last));
            -1
        } else {
            let rv = b.recv(r.data(other), (rank - 1) as i32, &[]);
            let mut d = last.clone();
            d.push(rv);
            last = vec![b.reduce(other, a, r.count, r.dt, r.op, &d)];
            rank / 2
        }
    } else {
        rank - rem
    };
    let real = |nr: i64| if nr < rem { nr * 2 + 1 } else { nr + rem } as i32;
    let mut loc = a;
    if newrank >= 0 {
        let mut mask = 1;
        while mask < pof2 {
            let partner = newrank ^ mask;
            let (lo, hi) = kept(newrank, r.count, mask / 2);
            let mid = lo + (hi - lo) / 2;
            let (keep, give) = if newrank & mask == 0 {
                ((lo, mid), (mid, hi))
            } else {
                ((mid, hi), (lo, mid))
            };
            let oth = if loc == a { other } else { a };
            if give.1 > give.0 {
                sends.push(b.send(part(r, loc, give.0, give.1 - give.0), real(partner), &last));
            }
            if keep.1 > keep.0 {
                let rv = b.recv(part(r, oth, keep.0, keep.1 - keep.0), real(partner), &last);
                let mut d = last.clone();
                d.push(rv);
                let n = keep.1 - keep.0;
                if r.commutative || partner < newrank {
                    // loc = oth op loc: the partner holds the lower ranks
                    last = vec![reduce_part(b, r, oth, loc, keep.0, n, &d)];
                } else {
                    last = vec![reduce_part(b, r, loc, oth, keep.0, n, &d)];
                    loc = oth;
                }
            }
            mask <<= 1;
        }
    }
    RabenseifnerState {
        newrank,
        pof2,
        rem,
        loc,
        last,
        sends,
    }
}

fn allreduce_rabenseifner(me: Rank, r: &Reduction, inplace: bool) -> Schedule {
    let mut b = Builder::new("rabenseifner");
    let res = Addr::recv(0);
    let start = if inplace {
        Vec::new()
    } else {
        copy_to(&mut b, r, Addr::send(0), res, &[])
    };
    if me.size == 1 || r.bytes() == 0 {
        return b.finish();
    }
    let other = b.scratch_for(r.count, &r.ti);
    let rs = rabenseifner_rs(&mut b, me, r, res, other, &start);
    let rank = me.rank as i64;
    let real = |nr: i64| if nr < rs.rem { nr * 2 + 1 } else { nr + rs.rem } as i32;
    if rs.newrank < 0 {
        b.recv(r.data(res), (rank + 1) as i32, &rs.sends);
        return b.finish();
    }
    let nr = rs.newrank;
    let (lo, hi) = kept(nr, r.count, rs.pof2 / 2);
    let mut last = rs.last.clone();
    last.extend(&rs.sends);
    if rs.loc != res && hi > lo {
        last = vec![b.copy(
            part(r, rs.loc, lo, hi - lo),
            part(r, res, lo, hi - lo),
            &last,
        )];
    }
    // allgather: recursive vector doubling, distance halving
    let mut mask = rs.pof2 / 2;
    while mask >= 1 {
        let partner = nr ^ mask;
        let mine = kept(nr, r.count, mask);
        let theirs = kept(partner, r.count, mask);
        let mut step = Vec::new();
        if mine.1 > mine.0 {
            step.push(b.send(part(r, res, mine.0, mine.1 - mine.0), real(partner), &last));
        }
        if theirs.1 > theirs.0 {
            step.push(b.recv(
                part(r, res, theirs.0, theirs.1 - theirs.0),
                real(partner),
                &last,
            ));
        }
        if !step.is_empty() {
            last = step;
        }
        mask /= 2;
    }
    if rank < 2 * rs.rem {
        b.send(r.data(res), (rank - 1) as i32, &last);
    }
    b.finish()
}

fn reduce_rabenseifner(me: Rank, r: &Reduction, input: Addr, root: i32) -> Schedule {
    let mut b = Builder::new("rabenseifner");
    let out = Addr::recv(0);
    if me.size == 1 || r.bytes() == 0 {
        copy_to(&mut b, r, input, out, &[]);
        return b.finish();
    }
    let p = me.size as i64;
    let rank = me.rank as i64;
    let pof2 = pof2_floor(me.size) as i64;
    let rem = p - pof2;
    let newrank_of = |x: i64| -> i64 {
        if x < 2 * rem {
            if x % 2 == 0 { -1 } else { x / 2 }
        } else {
            x - rem
        }
    };
    // the group member that gathers: the root, or its fold partner
    let g_rank = if newrank_of(root as i64) < 0 {
        root as i64 + 1
    } else {
        root as i64
    };
    let g = newrank_of(g_rank);
    // the working vector: the output where the root gathers, else scratch
    let a = if rank == root as i64 && rank == g_rank {
        out
    } else {
        b.scratch_for(r.count, &r.ti)
    };
    let start = copy_to(&mut b, r, input, a, &[]);
    let other = b.scratch_for(r.count, &r.ti);
    let rs = rabenseifner_rs(&mut b, me, r, a, other, &start);
    let real = |nr: i64| if nr < rem { nr * 2 + 1 } else { nr + rem } as i32;
    if rs.newrank < 0 {
        if rank == root as i64 {
            b.recv(r.data(out), g_rank as i32, &rs.sends);
        }
        return b.finish();
    }
    let nr = rs.newrank;
    let (lo, hi) = kept(nr, r.count, pof2 / 2);
    let mut last = rs.last.clone();
    last.extend(&rs.sends);
    if rs.loc != a && hi > lo {
        last = vec![b.copy(part(r, rs.loc, lo, hi - lo), part(r, a, lo, hi - lo), &last)];
    }
    // binomial gather towards g: at mask m the pair (x, x ^ m) of still active ranks
    // merges; the one whose bit m agrees with g's receives
    let mut mask = pof2 / 2;
    while mask >= 1 {
        if (nr ^ g) & !(2 * mask - 1) != 0 {
            break; // sent already
        }
        let partner = nr ^ mask;
        if (nr ^ g) & mask == 0 {
            let theirs = kept(partner, r.count, mask);
            if theirs.1 > theirs.0 {
                last = vec![b.recv(
                    part(r, a, theirs.0, theirs.1 - theirs.0),
                    real(partner),
                    &last,
                )];
            }
        } else {
            let mine = kept(nr, r.count, mask);
            if mine.1 > mine.0 {
                b.send(part(r, a, mine.0, mine.1 - mine.0), real(partner), &last);
            }
            break;
        }
        mask /= 2;
    }
    if nr == g && g_rank != root as i64 {
        b.send(r.data(a), root, &last);
    }
    b.finish()
}

/// Splits `count` elements into segments of about `seg` bytes: (start, len) pairs.
fn segments(r: &Reduction, seg: i64) -> Vec<(i64, i64)> {
    let per = if seg <= 0 || r.ti.size == 0 {
        r.count.max(1)
    } else {
        (seg / r.ti.size).max(1)
    };
    let n = super::ceil_div(r.count, per).max(1);
    (0..n)
        .map(|i| (i * per, per.min(r.count - i * per)))
        .collect()
}

/// A chain towards the root, segment by segment: for commutative operations over ranks
/// relative to the root (the chain ends at the root), else over natural ranks ending at
/// rank 0, which forwards to the root.
fn reduce_pipeline(me: Rank, r: &Reduction, input: Addr, root: i32, seg: i64) -> Schedule {
    let mut b = Builder::new(if r.commutative {
        "pipeline"
    } else {
        "pipeline-ordered"
    });
    let out = Addr::recv(0);
    if me.size == 1 || r.bytes() == 0 {
        copy_to(&mut b, r, input, out, &[]);
        return b.finish();
    }
    let p = me.size;
    // position in the chain: 0 is its end, p - 1 its start
    let (pos, end) = if r.commutative {
        (sub_mod(me.rank, root, p), root)
    } else {
        (me.rank, 0)
    };
    let from = |pos: i32| (pos + end) % p;
    let segs = segments(r, seg);
    let tmp = b.scratch_for(r.count, &r.ti);
    let is_end = pos == 0;
    for &(lo, n) in &segs {
        // the partial result of this segment (covering this rank and those after it)
        let (acc, done): (Addr, Vec<ActionId>) = if pos == p - 1 {
            (input, Vec::new())
        } else {
            let rv = b.recv(part(r, tmp, lo, n), from(pos + 1), &[]);
            // tmp = input op tmp: this rank comes before the ranks in tmp
            let red = reduce_part(&mut b, r, input, tmp, lo, n, &[rv]);
            (tmp, vec![red])
        };
        let sent: Vec<ActionId> = if !is_end {
            vec![b.send(part(r, acc, lo, n), from(pos - 1), &done)]
        } else if me.rank == root {
            if acc != out {
                b.copy(part(r, acc, lo, n), part(r, out, lo, n), &done);
            }
            Vec::new()
        } else {
            vec![b.send(part(r, acc, lo, n), root, &done)]
        };
        if !is_end && me.rank == root {
            // the result comes from rank 0; in place, after this rank's part read the input
            let mut d = done;
            d.extend(sent);
            b.recv(part(r, out, lo, n), end, &d);
        }
    }
    b.finish()
}

/// Ring allreduce: reduce-scatter then allgather of P chunks around the ring, in pieces of
/// at most `seg` bytes. Commutative operations only.
fn ring(me: Rank, r: &Reduction, inplace: bool, seg: i64) -> Schedule {
    let mut b = Builder::new("ring");
    let res = Addr::recv(0);
    let start = if inplace {
        Vec::new()
    } else {
        copy_to(&mut b, r, Addr::send(0), res, &[])
    };
    let p = me.size as i64;
    if p == 1 || r.bytes() == 0 {
        return b.finish();
    }
    let rank = me.rank as i64;
    let right = ((rank + 1) % p) as i32;
    let left = ((rank - 1 + p) % p) as i32;
    let chunk = |c: i64| split(r.count, p, c.rem_euclid(p));
    let per = if seg <= 0 || r.ti.size == 0 {
        i64::MAX
    } else {
        (seg / r.ti.size).max(1)
    };
    let pieces = |c: i64| -> Vec<(i64, i64)> {
        let (lo, n) = chunk(c);
        let k = if n == 0 {
            0
        } else {
            super::ceil_div(n, per.min(n))
        };
        (0..k)
            .map(|i| (lo + i * per.min(n), per.min(n).min(n - i * per.min(n))))
            .collect()
    };
    // per chunk: the actions after which it is final / was last read by a send
    let mut ready: Vec<Vec<ActionId>> = vec![start.clone(); p as usize];
    let mut sent: Vec<Vec<ActionId>> = vec![Vec::new(); p as usize];
    let tmp = b.scratch_for(split(r.count, p, 0).1, &r.ti);
    let mut tmp_free: Vec<ActionId> = Vec::new();
    for s in 0..p - 1 {
        let out = (rank - s).rem_euclid(p);
        let inc = (rank - s - 1).rem_euclid(p);
        let mut new_ready = Vec::new();
        let mut reads = Vec::new();
        for (lo, n) in pieces(out) {
            reads.push(b.send(part(r, res, lo, n), right, &ready[out as usize]));
        }
        sent[out as usize] = reads;
        let (ilo, _) = chunk(inc);
        let mut frees = Vec::new();
        for (lo, n) in pieces(inc) {
            let t = tmp.add((lo - ilo) * r.ti.extent);
            let rv = b.recv(Data::new(t, n, r.dt), left, &tmp_free);
            let mut d = ready[inc as usize].clone();
            d.push(rv);
            let red = b.reduce(t, res.add(lo * r.ti.extent), n, r.dt, r.op, &d);
            new_ready.push(red);
            frees.push(red);
        }
        // a step with an empty chunk receives nothing: the next receive into `tmp` must
        // still wait for the last reductions that read it
        if !frees.is_empty() {
            tmp_free = frees;
        }
        if !new_ready.is_empty() {
            ready[inc as usize] = new_ready;
        }
    }
    // allgather: the chunk completed here goes round
    for s in 0..p - 1 {
        let out = (rank + 1 - s).rem_euclid(p);
        let inc = (rank - s).rem_euclid(p);
        for (lo, n) in pieces(out) {
            b.send(part(r, res, lo, n), right, &ready[out as usize]);
        }
        let mut got = Vec::new();
        for (lo, n) in pieces(inc) {
            got.push(b.recv(part(r, res, lo, n), left, &sent[inc as usize]));
        }
        if !got.is_empty() {
            ready[inc as usize] = got;
        }
    }
    b.finish()
}

/// A binomial reduce to rank 0, then a binomial broadcast from it.
fn reduce_bcast(me: Rank, r: &Reduction, inplace: bool) -> Schedule {
    let mut b = Builder::new("reduce-bcast");
    let res = Addr::recv(0);
    let input = if inplace { res } else { Addr::send(0) };
    if r.bytes() == 0 {
        return b.finish();
    }
    let done = tree(&mut b, me, r, input, res, 0, 2, &[]);
    let p = me.size as i64;
    let (parent, children) = knomial_tree(me.rank as i64, p, 2);
    let got: Vec<ActionId> = match parent {
        // the result may overwrite the input (in place) only after it was sent up
        Some(q) => vec![b.recv(r.data(res), q as i32, &done)],
        None => done,
    };
    for (c, _) in children {
        b.send(r.data(res), c as i32, &got);
    }
    b.finish()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::core::sched::sim::{self, Bufs, Mode, NONCOMM, iv};
    use crate::platform::abi::{MPI_SUM, MPI_UINT64_T};

    pub fn reduction(count: i64, commutative: bool) -> Reduction {
        Reduction {
            count,
            dt: MPI_UINT64_T(),
            ti: crate::core::dtype::info(MPI_UINT64_T()).unwrap(),
            op: if commutative { MPI_SUM() } else { NONCOMM },
            commutative,
        }
    }

    /// The input of rank `r`, element `i`.
    pub fn input(commutative: bool, r: usize, i: usize) -> u64 {
        if commutative {
            sim::val(r, i)
        } else {
            iv(i as u64, r as u64, r as u64)
        }
    }

    /// The reduction over ranks lo..=hi of element i.
    pub fn expect(commutative: bool, lo: usize, hi: usize, i: usize) -> u64 {
        if commutative {
            (lo..=hi).fold(0u64, |a, r| a.wrapping_add(sim::val(r, i)))
        } else {
            iv(i as u64, lo as u64, hi as u64)
        }
    }

    const COUNTS: [i64; 6] = [0, 1, 2, 5, 16, 23];

    #[test]
    fn every_allreduce_algorithm() {
        for algo in [
            Algo::RecursiveDoubling,
            Algo::NwayDissemination,
            Algo::Rabenseifner,
            Algo::Ring,
            Algo::ReduceBcast,
        ] {
            for (k, seg) in [(1u32, 0i64), (2, 16), (3, 8)] {
                for p in 1..=13i32 {
                    for count in COUNTS {
                        for commutative in [true, false] {
                            for inplace in [false, true] {
                                let ch = Choice {
                                    algo,
                                    k,
                                    seg,
                                    fallback: false,
                                };
                                let r = reduction(count, commutative);
                                let scheds: Vec<Schedule> = (0..p)
                                    .map(|x| allreduce(&ch, Rank { rank: x, size: p }, &r, inplace))
                                    .collect();
                                run_check(
                                    &scheds,
                                    p,
                                    count,
                                    commutative,
                                    inplace,
                                    None,
                                    &format!(
                                        "allreduce {algo:?} k={k} seg={seg} p={p} count={count} comm={commutative} inplace={inplace}"
                                    ),
                                );
                            }
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn every_reduce_algorithm() {
        for algo in [
            Algo::Binomial,
            Algo::Knomial,
            Algo::Rabenseifner,
            Algo::Pipeline,
        ] {
            for (k, seg) in [(2u32, 0i64), (3, 16), (4, 8)] {
                for p in 1..=11i32 {
                    for count in COUNTS {
                        for commutative in [true, false] {
                            for root in [0, p / 2, p - 1] {
                                for inplace in [false, true] {
                                    let ch = Choice {
                                        algo,
                                        k,
                                        seg,
                                        fallback: false,
                                    };
                                    let r = reduction(count, commutative);
                                    let scheds: Vec<Schedule> = (0..p)
                                        .map(|x| {
                                            reduce(
                                                &ch,
                                                Rank { rank: x, size: p },
                                                &r,
                                                inplace,
                                                root,
                                            )
                                        })
                                        .collect();
                                    run_check(
                                        &scheds,
                                        p,
                                        count,
                                        commutative,
                                        inplace,
                                        Some(root),
                                        &format!(
                                            "reduce {algo:?} k={k} seg={seg} p={p} count={count} comm={commutative} root={root} inplace={inplace}"
                                        ),
                                    );
                                }
                            }
                        }
                    }
                }
            }
        }
    }

    /// Runs all-reduce-style schedules (`root` = None) or reduce ones and checks results.
    fn run_check(
        scheds: &[Schedule],
        p: i32,
        count: i64,
        commutative: bool,
        inplace: bool,
        root: Option<i32>,
        what: &str,
    ) {
        let pu = p as usize;
        let n = count as usize;
        for mode in [Mode::Eager, Mode::Rendezvous] {
            let mut bufs: Vec<Bufs> = (0..pu)
                .map(|x| {
                    let mine: Vec<u64> = (0..n).map(|i| input(commutative, x, i)).collect();
                    let in_recv = inplace && root.is_none_or(|rt| rt as usize == x);
                    if in_recv {
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
            sim::run(scheds, &mut bufs, mode, 17 + p as u64)
                .unwrap_or_else(|e| panic!("{what}: {e}"));
            let want: Vec<u64> = (0..n).map(|i| expect(commutative, 0, pu - 1, i)).collect();
            for (x, bf) in bufs.iter().enumerate() {
                if root.is_none_or(|rt| rt as usize == x) {
                    assert_eq!(
                        sim::from_bytes(&bf.recv),
                        want,
                        "{what} ({mode:?}) rank {x}"
                    );
                }
            }
        }
    }

    #[test]
    fn fallbacks_keep_order() {
        let r = reduction(4, false);
        let me = Rank { rank: 0, size: 4 };
        for a in [Algo::Ring, Algo::NwayDissemination] {
            let s = allreduce(&Choice::new(a), me, &r, false);
            assert!(
                s.algorithm.starts_with("recursive-doubling ("),
                "{}",
                s.algorithm
            );
        }
    }
}

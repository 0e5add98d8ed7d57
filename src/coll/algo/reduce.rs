//! Reduce, Allreduce, Reduce_scatter(_block) (Franke digest; Hoefler digest §3).
//!
//! Combination order: `Reduce` actions compute `dst = src op dst` (MPI_Reduce_local's
//! order). Non-commutative operations must combine in rank order (MPI-4.0 §6.9.1), so
//! every builder arranges for the lower ranks' partial result to be the left operand;
//! where that needs the result in the other buffer, the builder swaps the roles of the two
//! buffers instead of copying.

use super::{Me, Red, sub_mod};
use crate::sched::{Addr, Builder, Data, Schedule, V};

fn copy_to(b: &mut Builder, r: &Red, from: Addr, to: Addr, deps: &[V]) -> Vec<V> {
    if from == to || r.count == 0 {
        deps.to_vec()
    } else {
        vec![b.copy(r.data(from), r.data(to), deps)]
    }
}

/// Reduces every rank's `input` into `output` at `root`. Returns this rank's last
/// action(s): callers chain on them before reusing the buffers.
///
/// Commutative operations use a binomial tree over ranks relative to the root (a leaf
/// sends its input directly, inner nodes accumulate in scratch or, at the root, in the
/// output). Non-commutative ones use the tree rooted at rank 0 over natural ranks, where
/// each node's accumulator covers a contiguous, ordered range of ranks, and rank 0 then
/// sends the result to the root.
pub fn tree(
    b: &mut Builder,
    me: Me,
    r: &Red,
    input: Addr,
    output: Addr,
    root: i32,
    deps: &[V],
) -> Vec<V> {
    let p = me.size;
    if r.bytes() == 0 {
        return deps.to_vec();
    }
    if p == 1 {
        return copy_to(b, r, input, output, deps);
    }
    if r.commutative {
        let vr = sub_mod(me.rank, root, p);
        let mut children = Vec::new();
        let mut parent = None;
        let mut mask = 1;
        while mask < p {
            if vr & mask != 0 {
                parent = Some((vr - mask + root) % p);
                break;
            }
            if vr + mask < p {
                children.push((vr + mask + root) % p);
            }
            mask <<= 1;
        }
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
        let tmps: Vec<(Addr, V)> = children
            .iter()
            .map(|&c| {
                let t = b.scratch_for(r.count, &r.ti);
                (t, b.recv(r.data(t), c, &[]))
            })
            .collect();
        for (t, rv) in tmps {
            let mut d = last.clone();
            d.push(rv);
            last = vec![b.reduce(t, acc, r.count, r.dt, r.op, &d)];
        }
        match parent {
            Some(par) => vec![b.send(r.data(acc), par, &last)],
            None => {
                if acc != output {
                    copy_to(b, r, acc, output, &last)
                } else {
                    last
                }
            }
        }
    } else {
        let rank = me.rank;
        let mut acc = input;
        let mut last = deps.to_vec();
        let mut mask = 1;
        let mut sent = false;
        while mask < p {
            if rank & mask != 0 {
                last = vec![b.send(r.data(acc), rank - mask, &last)];
                sent = true;
                break;
            }
            if rank + mask < p {
                let t = b.scratch_for(r.count, &r.ti);
                let rv = b.recv(r.data(t), rank + mask, &[]);
                let mut d = last.clone();
                d.push(rv);
                // t = acc op t: the accumulator holds the lower ranks
                last = vec![b.reduce(acc, t, r.count, r.dt, r.op, &d)];
                acc = t;
            }
            mask <<= 1;
        }
        if !sent {
            // rank 0 holds the full result
            if root == 0 {
                last = copy_to(b, r, acc, output, &last);
            } else {
                last = vec![b.send(r.data(acc), root, &last)];
            }
        }
        if rank == root && root != 0 {
            last = vec![b.recv(r.data(output), 0, &last)];
        }
        last
    }
}

/// MPI_Reduce: `input` is the send buffer, or the receive buffer at the root in place.
pub fn reduce_binomial(me: Me, r: &Red, inplace: bool, root: i32) -> Schedule {
    let mut b = Builder::new(if r.commutative {
        "binomial"
    } else {
        "binomial-ordered"
    });
    let input = if inplace && me.rank == root {
        Addr::recv(0)
    } else {
        Addr::send(0)
    };
    tree(&mut b, me, r, input, Addr::recv(0), root, &[]);
    b.finish()
}

/// MPI_Allreduce: recursive doubling (Thakur, Rabenseifner, Gropp), with the ranks above
/// the largest power of two folded in first (pairs 2i, 2i+1 combine; the even rank sits
/// out and gets the result at the end), which keeps every partial result a contiguous,
/// ordered range of ranks for non-commutative operations.
pub fn allreduce_recursive_doubling(me: Me, r: &Red, inplace: bool) -> Schedule {
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
    let pof2 = 1 << (31 - (p as u32).leading_zeros());
    let rem = p - pof2;
    let mut other = b.scratch_for(r.count, &r.ti);
    let mut cur = res;
    // fold the first 2*rem ranks into rem ranks
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
        let mut prev_send: Vec<V> = Vec::new();
        while mask < pof2 {
            let nd = newrank ^ mask;
            let dst = if nd < rem { nd * 2 + 1 } else { nd + rem };
            let s = b.send(r.data(cur), dst, &last);
            let mut rdeps = last.clone();
            rdeps.extend(&prev_send);
            let rv = b.recv(r.data(other), dst, &rdeps);
            if r.commutative || dst < rank {
                // cur = other op cur (other holds the lower ranks, or order is free)
                last = vec![b.reduce(other, cur, r.count, r.dt, r.op, &[rv, s])];
            } else {
                // other = cur op other, then the buffers swap roles
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
        let d: Vec<V> = fold_send.into_iter().collect();
        b.recv(r.data(res), rank + 1, &d);
    }
    b.finish()
}

/// MPI_Reduce_scatter(_block): reduce the whole vector to rank 0 (scratch there), then
/// scatter the blocks. `counts[i]` elements go to rank i; in place, the input vector is
/// the receive buffer.
pub fn reduce_scatter_via_reduce(me: Me, r: &Red, counts: &[i64], inplace: bool) -> Schedule {
    let mut b = Builder::new(if r.commutative {
        "reduce+scatterv"
    } else {
        "ordered-reduce+scatterv"
    });
    let total: i64 = counts.iter().sum();
    let full = Red { count: total, ..*r };
    let input = if inplace {
        Addr::recv(0)
    } else {
        Addr::send(0)
    };
    let tmp = if me.rank == 0 {
        b.scratch_for(total, &r.ti)
    } else {
        Addr::scratch(0)
    };
    let last = tree(&mut b, me, &full, input, tmp, 0, &[]);
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
            b.recv(Data::new(Addr::recv(0), c, r.dt), 0, &last);
        }
    }
    b.finish()
}

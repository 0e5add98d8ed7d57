//! Scan and Exscan: recursive doubling (Franke digest; the MPICH algorithm). In step k a
//! rank exchanges its partial result (the reduction of a contiguous range of ranks ending
//! at itself) with rank ^ 2^k. Data from a lower rank is combined on the left, so
//! non-commutative operations see rank order; a higher rank's data only extends the
//! partial result that is passed on.

use super::{Me, Red};
use crate::sched::{Addr, Builder, Schedule, V};

pub fn recursive_doubling(me: Me, r: &Red, inplace: bool, exclusive: bool) -> Schedule {
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
    let mut partial_ready: Vec<V> = vec![c];
    // The result buffer: inclusive scan starts from the own contribution.
    let mut res_ready: Vec<V> = Vec::new();
    let mut res_valid = !exclusive;
    if !exclusive && !inplace {
        res_ready = vec![b.copy(r.data(input), r.data(res), &[])];
    }
    if exclusive && inplace {
        // the input in the result buffer is read (copied to `partial`) before any write
        res_ready = vec![c];
    }
    let mut prev_step: Vec<V> = vec![c];
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

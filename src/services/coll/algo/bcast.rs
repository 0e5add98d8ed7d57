//! Layer: services. May use: core, platform.
//!
//! Broadcast (Hoefler digest §3 and §8.4, Eq. III.1-III.4; van de Geijn). Ranks are
//! taken relative to the root (`vr = rank - root mod P`).
//! - `linear`: the root sends to every rank.
//! - `binomial`: a rank receives once from its parent and forwards to its children,
//!   largest subtree first.
//! - `knomial`: the same over base-k digits: a node forwards to k-1 children per level,
//!   so the tree has ceil(log_k P) levels.
//! - `pipeline`: a chain root -> vr 1 -> vr 2 ..., the message cut into segments of
//!   `SHIM_BCAST_SEGMENT` bytes, each forwarded as soon as it arrives.
//! - `scatter-allgather` (van de Geijn): a binomial scatter of P chunks, then a ring
//!   allgather of the chunks; bandwidth-optimal for long messages.
//!
//! The segmented algorithms work on the message as packed bytes ([`Packed`]): every rank
//! agrees on the byte count, whatever datatype it passed.

use super::{Packed, Rank, ceil_log, split, sub_mod};
use crate::core::dtype::TypeInfo;
use crate::core::sched::{ActionId, Builder, Data, Schedule};
use crate::services::coll::select::{Algo, Choice};

pub fn build(ch: &Choice, me: Rank, data: Data, ti: &TypeInfo, root: i32) -> Schedule {
    let bytes = data.count * ti.size;
    match ch.algo {
        Algo::Linear => linear(me, data, bytes, root),
        Algo::Knomial => knomial(me, data, bytes, root, ch.k.max(2) as i64, "knomial"),
        Algo::Pipeline => pipeline(me, data, ti, root, ch.seg),
        Algo::ScatterAllgather => scatter_allgather(me, data, ti, root),
        _ => knomial(me, data, bytes, root, 2, "binomial"),
    }
}

fn linear(me: Rank, data: Data, bytes: i64, root: i32) -> Schedule {
    let mut b = Builder::new("linear");
    if bytes == 0 || me.size == 1 {
        return b.finish();
    }
    if me.rank == root {
        for i in 1..me.size {
            b.send(data, (root + i) % me.size, &[]);
        }
    } else {
        b.recv(data, root, &[]);
    }
    b.finish()
}

/// The k-nomial tree over relative ranks: (parent, children largest subtree first, the
/// size of each child's subtree). k = 2 is the binomial tree.
pub fn knomial_tree(vr: i64, p: i64, k: i64) -> (Option<i64>, Vec<(i64, i64)>) {
    let levels = ceil_log(k, p);
    // the lowest non-zero digit of vr decides its parent and the levels below it
    let mut top = levels;
    let mut parent = None;
    let mut w = 1i64;
    for lvl in 0..levels {
        let digit = (vr / w) % k;
        if digit != 0 {
            parent = Some(vr - digit * w);
            top = lvl;
            break;
        }
        w *= k;
    }
    let mut children = Vec::new();
    for lvl in (0..top).rev() {
        let w = k.pow(lvl);
        for d in 1..k {
            let c = vr + d * w;
            if c < p {
                children.push((c, w.min(p - c)));
            }
        }
    }
    (parent, children)
}

fn knomial(me: Rank, data: Data, bytes: i64, root: i32, k: i64, name: &'static str) -> Schedule {
    let mut b = Builder::new(name);
    let p = me.size as i64;
    if bytes == 0 || p == 1 {
        return b.finish();
    }
    let vr = sub_mod(me.rank, root, me.size) as i64;
    let (parent, children) = knomial_tree(vr, p, k);
    let abs = |v: i64| ((v + root as i64) % p) as i32;
    let got: Vec<ActionId> = parent
        .map(|q| b.recv(data, abs(q), &[]))
        .into_iter()
        .collect();
    for (c, _) in children {
        b.send(data, abs(c), &got);
    }
    b.finish()
}

fn pipeline(me: Rank, data: Data, ti: &TypeInfo, root: i32, seg: i64) -> Schedule {
    let mut b = Builder::new("pipeline");
    let p = me.size;
    let pk = Packed::new(&mut b, data, ti);
    if pk.bytes == 0 || p == 1 {
        return b.finish();
    }
    let seg = if seg <= 0 { pk.bytes } else { seg };
    let nseg = super::ceil_div(pk.bytes, seg);
    let vr = sub_mod(me.rank, root, p);
    let prev = (vr > 0).then(|| (me.rank - 1 + p) % p);
    let next = (vr + 1 < p).then(|| (me.rank + 1) % p);
    let packed = if vr == 0 {
        pk.pack(&mut b, &[])
    } else {
        Vec::new()
    };
    let mut all = Vec::new();
    for i in 0..nseg {
        let (off, n) = (i * seg, seg.min(pk.bytes - i * seg));
        let d = pk.slice(off, n);
        let have: Vec<ActionId> = match prev {
            Some(q) => {
                let r = b.recv(d, q, &[]);
                all.push(r);
                vec![r]
            }
            None => packed.clone(),
        };
        if let Some(n) = next {
            all.push(b.send(d, n, &have));
        }
    }
    if vr != 0 {
        pk.unpack(&mut b, &all);
    }
    b.finish()
}

fn scatter_allgather(me: Rank, data: Data, ti: &TypeInfo, root: i32) -> Schedule {
    let mut b = Builder::new("scatter-allgather");
    let p = me.size as i64;
    let pk = Packed::new(&mut b, data, ti);
    if pk.bytes == 0 || p == 1 {
        return b.finish();
    }
    let vr = sub_mod(me.rank, root, me.size) as i64;
    let abs = |v: i64| ((v + root as i64) % p) as i32;
    // chunk v covers bytes start(v)..start(v + 1)
    let start = |v: i64| {
        if v >= p {
            pk.bytes
        } else {
            split(pk.bytes, p, v).0
        }
    };
    let range = |lo: i64, hi: i64| pk.slice(start(lo), start(hi.min(p)) - start(lo));
    // binomial scatter of the chunks: vr's subtree is vr .. vr + its size
    let (parent, children) = knomial_tree(vr, p, 2);
    let mut have: Vec<ActionId> = if vr == 0 {
        pk.pack(&mut b, &[])
    } else {
        Vec::new()
    };
    let subtree = match parent {
        Some(_) => (vr & -vr).min(p - vr),
        None => p,
    };
    // the chunk of each relative rank: the action after which this rank holds it
    let mut filled: Vec<Option<ActionId>> = vec![None; p as usize];
    if let Some(q) = parent {
        let d = range(vr, vr + subtree);
        if d.count > 0 {
            have = vec![b.recv(d, abs(q), &[])];
        }
    }
    for v in vr..vr + subtree {
        filled[v as usize] = have.first().copied();
    }
    let mut sends = Vec::new();
    for (c, size) in children {
        let d = range(c, c + size);
        if d.count > 0 {
            sends.push(b.send(d, abs(c), &have));
        }
    }
    // ring allgather over relative ranks; a chunk is not sent to a rank that already
    // holds it from the scatter (its subtree)
    let holds = |w: i64, c: i64| {
        let size = if w == 0 { p } else { (w & -w).min(p - w) };
        c >= w && c < w + size
    };
    let right = abs((vr + 1) % p);
    let left = abs((vr - 1 + p) % p);
    let mut all = sends;
    for s in 0..p - 1 {
        let out = (vr - s + p) % p;
        let inc = (vr - s - 1 + 2 * p) % p;
        let d = range(out, out + 1);
        if d.count > 0 && !holds((vr + 1) % p, out) {
            let deps: Vec<ActionId> = filled[out as usize].into_iter().collect();
            all.push(b.send(d, right, &deps));
        }
        let d = range(inc, inc + 1);
        if d.count > 0 && !holds(vr, inc) {
            let r = b.recv(d, left, &[]);
            filled[inc as usize] = Some(r);
            all.push(r);
        }
    }
    if vr != 0 {
        pk.unpack(&mut b, &all);
    }
    b.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::sched::Addr;
    use crate::core::sched::sim::{self, Bufs, Mode};
    use crate::platform::abi::MPI_UINT64_T;

    fn ti8() -> TypeInfo {
        crate::core::dtype::info(MPI_UINT64_T()).unwrap()
    }

    #[test]
    fn knomial_tree_covers_every_rank_once() {
        for k in 2..6 {
            for p in 1..40 {
                let mut seen = vec![0; p as usize];
                seen[0] += 1;
                for v in 0..p {
                    let (parent, children) = knomial_tree(v, p, k);
                    assert_eq!(parent.is_none(), v == 0);
                    for (c, size) in children {
                        assert_eq!(knomial_tree(c, p, k).0, Some(v));
                        assert!(size >= 1 && c + size <= p);
                        seen[c as usize] += 1;
                    }
                }
                assert!(seen.iter().all(|&x| x == 1), "k={k} p={p}: {seen:?}");
            }
        }
    }

    /// A non-blocking call every rank counted for the segment that runs on point-to-point
    /// after all (its node refused single copy) passes through its instance beside its
    /// messages (`sched::with_pass_through`): the same data arrives, through scratch too
    /// (the pipeline packs), and the region is claimed and released once.
    #[test]
    fn a_schedule_beside_a_pass_through_its_instance_delivers() {
        use crate::core::sched::{Action, with_pass_through};
        for algo in [Algo::Binomial, Algo::Pipeline, Algo::ScatterAllgather] {
            for p in [2, 3, 5] {
                let ch = Choice {
                    algo,
                    k: 2,
                    seg: 16,
                    fallback: false,
                };
                let count = 37usize;
                let data = Data::new(Addr::recv(0), count as i64, MPI_UINT64_T());
                let scheds: Vec<Schedule> = (0..p)
                    .map(|r| {
                        let sub = build(&ch, Rank { rank: r, size: p }, data, &ti8(), 1);
                        with_pass_through(&sub, p)
                    })
                    .collect();
                for s in &scheds {
                    let n = |f: fn(&Action) -> bool| s.actions.iter().filter(|a| f(a)).count();
                    assert_eq!(n(|a| matches!(a, Action::Claim)), 1);
                    assert_eq!(n(|a| matches!(a, Action::Release)), 1);
                }
                let want: Vec<u64> = (0..count).map(|i| sim::val(7, i)).collect();
                let mut bufs: Vec<Bufs> = (0..p)
                    .map(|r| Bufs {
                        send: vec![],
                        recv: if r == 1 {
                            sim::to_bytes(&want)
                        } else {
                            vec![0; count * 8]
                        },
                    })
                    .collect();
                sim::run_shm(&scheds, &mut bufs, 4096, p as u64)
                    .unwrap_or_else(|e| panic!("{algo:?} p={p}: {e}"));
                for (r, bf) in bufs.iter().enumerate() {
                    assert_eq!(sim::from_bytes(&bf.recv), want, "{algo:?} p={p} rank {r}");
                }
            }
        }
    }

    #[test]
    fn every_bcast_algorithm_delivers() {
        let algos = [
            Algo::Linear,
            Algo::Binomial,
            Algo::Knomial,
            Algo::Pipeline,
            Algo::ScatterAllgather,
        ];
        for algo in algos {
            for p in 1..=11 {
                for count in [0usize, 1, 3, 16, 37] {
                    for root in [0, p / 2, p - 1] {
                        for (k, seg) in [(2u32, 8i64), (3, 24), (5, 1000)] {
                            let ch = Choice {
                                algo,
                                k,
                                seg,
                                fallback: false,
                            };
                            let data = Data::new(Addr::recv(0), count as i64, MPI_UINT64_T());
                            let scheds: Vec<Schedule> = (0..p)
                                .map(|r| build(&ch, Rank { rank: r, size: p }, data, &ti8(), root))
                                .collect();
                            let want: Vec<u64> = (0..count).map(|i| sim::val(99, i)).collect();
                            for mode in [Mode::Eager, Mode::Rendezvous] {
                                let mut bufs: Vec<Bufs> = (0..p)
                                    .map(|r| Bufs {
                                        send: vec![],
                                        recv: if r == root {
                                            sim::to_bytes(&want)
                                        } else {
                                            vec![0; count * 8]
                                        },
                                    })
                                    .collect();
                                sim::run(&scheds, &mut bufs, mode, (p * 7 + root) as u64)
                                    .unwrap_or_else(|e| {
                                        panic!("{algo:?} p={p} count={count} root={root}: {e}")
                                    });
                                for (r, bf) in bufs.iter().enumerate() {
                                    assert_eq!(
                                        sim::from_bytes(&bf.recv),
                                        want,
                                        "{algo:?} p={p} count={count} root={root} rank {r}"
                                    );
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

//! Layer: services. May use: core, platform.
//!
//! Barrier (Hoefler digest §3, §II.3.1):
//! - `dissemination` (Hensgen, Finkel, Manber): in round k every rank signals rank + 2^k
//!   and waits for rank - 2^k; after ceil(log2 P) rounds everyone has heard, directly or
//!   not, from everyone.
//! - `nway-dissemination`: round r signals the n ranks p + i(n+1)^r (i = 1..n) and waits
//!   for p - i(n+1)^r (Hoefler Eq. II.13-14): ceil(log_{n+1} P) rounds.
//! - `recursive-doubling`: ranks above the largest power of two first signal a partner
//!   below it, the power-of-two group exchanges with rank ^ 2^k, then the partners
//!   release the extra ranks.

use super::{Rank, ceil_log, pof2_floor, sub_mod};
use crate::core::sched::{ActionId, Addr, Builder, Data, Schedule};
use crate::platform::abi::MPI_BYTE;
use crate::services::coll::select::{Algo, Choice};

fn empty() -> Data {
    Data::new(Addr::recv(0), 0, MPI_BYTE())
}

pub fn build(ch: &Choice, me: Rank) -> Schedule {
    match ch.algo {
        Algo::NwayDissemination => nway(me, ch.k.max(1) as i32, "nway-dissemination"),
        Algo::RecursiveDoubling => recursive_doubling(me),
        _ => nway(me, 1, "dissemination"),
    }
}

/// n-way dissemination; n = 1 is the classic dissemination barrier.
fn nway(me: Rank, n: i32, name: &'static str) -> Schedule {
    let mut b = Builder::new(name);
    let p = me.size as i64;
    let n = (n as i64).min((p - 1).max(1));
    let rounds = ceil_log(n + 1, p);
    let mut prev: Vec<ActionId> = Vec::new();
    let mut dist = 1i64;
    for _ in 0..rounds {
        let mut this = Vec::new();
        for i in 1..=n {
            let d = i * dist;
            if d >= p {
                break;
            }
            let to = ((me.rank as i64 + d) % p) as i32;
            b.send(empty(), to, &prev);
        }
        for i in 1..=n {
            let d = i * dist;
            if d >= p {
                break;
            }
            let from = sub_mod(me.rank, (d % p) as i32, p as i32);
            this.push(b.recv(empty(), from, &prev));
        }
        prev = this;
        dist *= n + 1;
    }
    b.finish()
}

fn recursive_doubling(me: Rank) -> Schedule {
    let mut b = Builder::new("recursive-doubling");
    let p = me.size;
    let r = me.rank;
    if p == 1 {
        return b.finish();
    }
    let pof2 = pof2_floor(p);
    if r >= pof2 {
        // an extra rank: signal the partner, wait for the release
        let s = b.send(empty(), r - pof2, &[]);
        b.recv(empty(), r - pof2, &[s]);
        return b.finish();
    }
    let mut prev: Vec<ActionId> = Vec::new();
    if r + pof2 < p {
        prev = vec![b.recv(empty(), r + pof2, &[])];
    }
    let mut mask = 1;
    while mask < pof2 {
        let peer = r ^ mask;
        let s = b.send(empty(), peer, &prev);
        let rv = b.recv(empty(), peer, &prev);
        prev = vec![s, rv];
        mask <<= 1;
    }
    if r + pof2 < p {
        b.send(empty(), r + pof2, &prev);
    }
    b.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::sched::sim::{self, Bufs, Mode};

    #[test]
    fn barriers_complete_and_synchronize() {
        for algo in [
            Algo::Dissemination,
            Algo::NwayDissemination,
            Algo::RecursiveDoubling,
        ] {
            for k in [1u32, 2, 3, 7] {
                for p in 1..=17 {
                    let ch = Choice {
                        algo,
                        k,
                        seg: 0,
                        fallback: false,
                    };
                    let scheds: Vec<Schedule> = (0..p)
                        .map(|r| build(&ch, Rank { rank: r, size: p }))
                        .collect();
                    // a barrier must not finish on any rank while one rank has not started:
                    // withholding rank `late`'s actions must deadlock everyone else
                    for mode in [Mode::Eager, Mode::Rendezvous] {
                        let mut bufs = vec![Bufs::default(); p as usize];
                        sim::run(&scheds, &mut bufs, mode, p as u64 * 31 + k as u64)
                            .unwrap_or_else(|e| panic!("{algo:?} k={k} p={p}: {e}"));
                    }
                    if p > 1 {
                        for late in 0..p as usize {
                            let mut s2: Vec<Schedule> = (0..p)
                                .map(|r| build(&ch, Rank { rank: r, size: p }))
                                .collect();
                            s2[late] = Builder::new("absent").finish();
                            let fin = sim::finished(&s2, Mode::Eager, 5).unwrap();
                            for (r, f) in fin.iter().enumerate() {
                                assert!(
                                    r == late || !f,
                                    "{algo:?} k={k} p={p}: rank {r} passed without {late}"
                                );
                            }
                        }
                    }
                }
            }
        }
    }
}

//! Layer: services. May use: core, platform.
//!
//! The cost model: LogGP (Hoefler digest §8; Culler et al., Alexandrov et al.) with a
//! per-byte reduction cost γ (Franke digest §4) and a rendezvous round trip for messages
//! above the eager limit (LogGPS). For each algorithm it predicts the completion time and
//! the CPU time the calling process spends (the o, γ and copy terms), which is what a
//! non-blocking collective costs the application when a progress engine overlaps the
//! rest (Hoefler digest §8.4: "optimize first for low CPU overhead").
//!
//! The formulas are the digest's (Eq. III.1-III.7) and Thakur, Rabenseifner and Gropp's,
//! written with two helpers: `msg(m)`, one message of m bytes end to end
//! (`L + 2o + G·m`, plus `2L + 2o` in rendezvous), and `fanout(n, m)`, n messages of m
//! bytes posted back to back by one rank (LogGP: they leave `max(o, g + G·m)` apart).
//!
//! `native` is modelled as the algorithm the system MPI (MPICH 4.0's defaults, design
//! notes anchors-nbc-progress-rma.md §3.3) picks, with its own per-call overhead; the
//! measured table of a tuning file overrides the model where the MPI does worse than its
//! algorithm predicts (MPICH's Reduce in shared memory, for one).

use super::{Algo, Coll};

/// Model parameters, in microseconds (per byte where named so).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Params {
    /// L: latency.
    pub l: f64,
    /// o: CPU overhead per message of the shim's schedules (posting plus completion).
    pub o: f64,
    /// g: gap between consecutive messages.
    pub g: f64,
    /// G: gap per byte.
    pub big_g: f64,
    /// γ: reduction cost per byte.
    pub gamma: f64,
    /// Local copy cost per byte.
    pub copy: f64,
    /// Fixed CPU cost of one collective call through a shim schedule.
    pub sched: f64,
    /// Per-message overhead inside the system MPI's collectives.
    pub o_native: f64,
    /// Fixed cost of one call of the system MPI's collective.
    pub native_call: f64,
    /// Messages above this many bytes pay a rendezvous round trip.
    pub eager: f64,
    /// Bytes from which `auto` reduces with one copy on the node segment (beyond the slot
    /// in any case; `algo::single`): measured per library with `scripts/bench/single-copy`.
    pub single_reduce: f64,
    /// The same for Reduce (`algo::single::reduce`: the root waits for every slice, the
    /// others for the root), where some libraries' own Reduce is faster than their Allreduce.
    pub single_root: f64,
    /// Bytes from which `auto` takes an `I*` data mover (Bcast, Gather, Scatter, Allgather(v),
    /// Alltoall) beyond the slot to single copy, where the library's own `I*` is the other
    /// choice: 0 (the default) but where its own was faster (Intel MPI: never), measured
    /// per library with `scripts/bench/latency.c -f n`.
    pub single_nb_move: f64,
    /// The most slot bytes a reduction may need for `auto` to take it to the segment's
    /// copy-in-copy-out (`select::shm_wins`): measured per library with IMB.
    pub shm_reduce_max: f64,
    /// The same for the data movers (Bcast, Gather, Scatter, Allgather, Alltoall) on two
    /// ranks (`select::shm_wins`; more ranks: [`super::AUTO_SHM_MAX_BYTES`]): measured per
    /// library with IMB.
    pub shm_move_max: f64,
    /// 1 when the rows were measured with the segment's algorithms among the candidates
    /// (`scripts/tools/shim-tune` on this machine): where a row exists, it decides whether
    /// `auto` takes the segment (`select::segment_measured`), beyond the slot too. The
    /// shipped rows predate single copy: 0 there.
    pub shm_rows: f64,
    /// 1 when the library's own waits give the core up on an oversubscribed node (Intel
    /// MPI, Open MPI), so `auto` may hand it calls there (`select::native_allowed`); 0 where
    /// they spin (both MPICH: a collective takes a scheduler's time slice there), and the
    /// segment takes every collective instead (`select::shm_wins`): measured per library
    /// at 4 ranks on 2 cores with IMB.
    pub oversub_yield: f64,
    /// Where the library's waits yield (`oversub_yield`), the smallest slot footprint from
    /// which the segment's copy-in-copy-out beat its own collectives on an oversubscribed
    /// node (`select::shm_wins`; Open MPI: 1 KiB; never under Intel MPI, the default).
    pub oversub_shm_min: f64,
    /// The most slot bytes an `I*` call on two ranks may need for `auto` to take it to the
    /// segment's copy-in-copy-out where the library's own is the other choice, when that is
    /// more than the blocking form's limit (`shm_move_max`, `shm_reduce_max`): where its
    /// non-blocking collectives are slower than its blocking ones (Intel MPI: up to the
    /// slot), measured per library with IMB-NBC (`select::shm_wins`).
    pub shm_nb_max: f64,
    /// Where the library is not handed an Allreduce (a persistent call; an `I*` call under
    /// Open MPI), the most slot bytes for which `auto` takes it to the segment rather than
    /// the shim's point-to-point schedules (`select::shm_wins`): the slot (the default)
    /// but where the library's point-to-point makes recursive doubling faster (Intel MPI:
    /// 1 KiB), measured per library with `scripts/bench/latency.c -f p`.
    pub shm_sched_allreduce_max: f64,
    /// 1 where, across nodes in a job with an oversubscribed node, the shim's two-level
    /// algorithms beat the library's own collectives although its waits yield
    /// (`oversub_yield`): Intel MPI, measured at 2 x 2 on 2 cores with IMB
    /// (`select::hier_oversubscribed_wins`); 0 where not measured (Open MPI).
    pub oversub_hier: f64,
    /// Between nodes (machines of their own): L, o, g and G of one message through the
    /// network, for the model that weighs the two-level algorithms against the flat ones
    /// ([`across`]). The defaults are HDR InfiniBand's published figures, as in
    /// `scripts/bench/sim/fabric.params` (which cites them).
    pub net_l: f64,
    pub net_o: f64,
    pub net_g: f64,
    pub net_big_g: f64,
    /// From a rank's flag store in the node segment until another rank's poll sees it: one
    /// cache line's trip between cores (README, "The floor").
    pub shm_flag: f64,
}

impl Default for Params {
    /// Measured on the reference machine (2 cores, MPICH 4.0.2 ch4:ucx, shared memory)
    /// with `SHIM_CALIBRATE=1`.
    fn default() -> Self {
        Params {
            l: 0.35,
            o: 0.30,
            g: 0.10,
            big_g: 1.0e-4,
            gamma: 2.0e-4,
            copy: 1.0e-4,
            sched: 1.2,
            o_native: 0.15,
            native_call: 0.15,
            eager: 65536.0,
            single_reduce: 0.0,
            single_root: 0.0,
            single_nb_move: 0.0,
            shm_reduce_max: super::AUTO_SHM_MAX_BYTES as f64,
            shm_move_max: super::AUTO_SHM_MAX_BYTES as f64,
            shm_rows: 0.0,
            oversub_yield: 0.0,
            oversub_shm_min: 1e18,
            shm_nb_max: 0.0,
            shm_sched_allreduce_max: 1e18,
            oversub_hier: 0.0,
            net_l: 0.8,
            net_o: 0.2,
            net_g: 0.2,
            net_big_g: 4.8e-5,
            shm_flag: 0.06,
        }
    }
}

/// The names in a tuning file, with accessors.
pub const NAMES: &[&str] = &[
    "L",
    "o",
    "g",
    "G",
    "gamma",
    "copy",
    "sched",
    "o_native",
    "native_call",
    "eager",
    "single_reduce",
    "single_root",
    "single_nb_move",
    "shm_reduce_max",
    "shm_move_max",
    "shm_rows",
    "oversub_yield",
    "oversub_shm_min",
    "shm_nb_max",
    "shm_sched_allreduce_max",
    "oversub_hier",
    "net_L",
    "net_o",
    "net_g",
    "net_G",
    "shm_flag",
];

impl Params {
    /// Whether the library's own waits give the core up on an oversubscribed node
    /// (`oversub_yield`): the one question `select` asks of it, in every rule that
    /// depends on it.
    pub fn waits_yield(&self) -> bool {
        self.oversub_yield > 0.0
    }

    pub fn get(&self, name: &str) -> Option<f64> {
        Some(match name {
            "L" => self.l,
            "o" => self.o,
            "g" => self.g,
            "G" => self.big_g,
            "gamma" => self.gamma,
            "copy" => self.copy,
            "sched" => self.sched,
            "o_native" => self.o_native,
            "native_call" => self.native_call,
            "eager" => self.eager,
            "single_reduce" => self.single_reduce,
            "single_root" => self.single_root,
            "single_nb_move" => self.single_nb_move,
            "shm_reduce_max" => self.shm_reduce_max,
            "shm_move_max" => self.shm_move_max,
            "shm_rows" => self.shm_rows,
            "oversub_yield" => self.oversub_yield,
            "oversub_shm_min" => self.oversub_shm_min,
            "shm_nb_max" => self.shm_nb_max,
            "shm_sched_allreduce_max" => self.shm_sched_allreduce_max,
            "oversub_hier" => self.oversub_hier,
            "net_L" => self.net_l,
            "net_o" => self.net_o,
            "net_g" => self.net_g,
            "net_G" => self.net_big_g,
            "shm_flag" => self.shm_flag,
            _ => return None,
        })
    }

    pub fn set(&mut self, name: &str, v: f64) -> bool {
        let slot = match name {
            "L" => &mut self.l,
            "o" => &mut self.o,
            "g" => &mut self.g,
            "G" => &mut self.big_g,
            "gamma" => &mut self.gamma,
            "copy" => &mut self.copy,
            "sched" => &mut self.sched,
            "o_native" => &mut self.o_native,
            "native_call" => &mut self.native_call,
            "eager" => &mut self.eager,
            "single_reduce" => &mut self.single_reduce,
            "single_root" => &mut self.single_root,
            "single_nb_move" => &mut self.single_nb_move,
            "shm_reduce_max" => &mut self.shm_reduce_max,
            "shm_move_max" => &mut self.shm_move_max,
            "shm_rows" => &mut self.shm_rows,
            "oversub_yield" => &mut self.oversub_yield,
            "oversub_shm_min" => &mut self.oversub_shm_min,
            "shm_nb_max" => &mut self.shm_nb_max,
            "shm_sched_allreduce_max" => &mut self.shm_sched_allreduce_max,
            "oversub_hier" => &mut self.oversub_hier,
            "net_L" => &mut self.net_l,
            "net_o" => &mut self.net_o,
            "net_g" => &mut self.net_g,
            "net_G" => &mut self.net_big_g,
            "shm_flag" => &mut self.shm_flag,
            _ => return false,
        };
        *slot = v;
        true
    }

    pub fn describe(&self) -> String {
        NAMES
            .iter()
            .map(|n| format!("{n}={:.3e}", self.get(n).unwrap_or(0.0)))
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// Predicted cost of one call.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Cost {
    /// Completion time (µs).
    pub time: f64,
    /// CPU time of the busiest process (µs).
    pub cpu: f64,
}

/// Whether `algo` runs as itself for this collective, size and operation (rather than
/// falling back to another algorithm, which the model then need not consider twice).
pub fn applicable(coll: Coll, algo: Algo, p: i32, commutative: bool, k: u32) -> bool {
    let pof2 = p > 0 && (p & (p - 1)) == 0;
    match (coll, algo) {
        // decided outside the model: where a node segment exists and the data fits
        // (`Ctx::choose_with`)
        (_, Algo::Shm) => false,
        (Coll::Allreduce, Algo::Ring | Algo::NwayDissemination) => commutative,
        (
            Coll::ReduceScatter | Coll::ReduceScatterBlock,
            Algo::Ring | Algo::Pairwise | Algo::RecursiveHalving,
        ) => commutative,
        (Coll::Allgather | Coll::Allgatherv, Algo::Prefix) => pof2,
        (Coll::Allgather | Coll::Allgatherv, Algo::KPrefix) => {
            let k = if k == 0 { 4 } else { k as i32 };
            k.count_ones() == 1 && k <= p && p % k == 0
        }
        (Coll::Allgather | Coll::Allgatherv, Algo::KShift) => {
            let k = if k == 0 { 4 } else { k as i32 };
            k <= p && p % k == 0
        }
        (Coll::Gatherv | Coll::Scatterv, Algo::Binomial) => false,
        _ => true,
    }
}

/// The algorithm that actually runs when `algo` is asked for: `algo` itself where it is
/// [`applicable`], else the builder's fallback (e.g. `kshift` on 2 processes runs `ring`).
/// A tuning file measured with the forced name holds the fallback's time under that name.
pub fn runs_as(coll: Coll, algo: Algo, p: i32, commutative: bool, k: u32) -> Algo {
    if applicable(coll, algo, p, commutative, k) {
        return algo;
    }
    match coll {
        Coll::Allgather | Coll::Allgatherv => Algo::Ring,
        Coll::Allreduce => Algo::RecursiveDoubling,
        Coll::ReduceScatter | Coll::ReduceScatterBlock => Algo::ReduceScatterv,
        Coll::Gatherv | Coll::Scatterv => Algo::Linear,
        _ => algo,
    }
}

fn log2c(p: f64) -> f64 {
    if p <= 1.0 { 0.0 } else { p.log2().ceil() }
}

fn logk(k: f64, p: f64) -> f64 {
    let mut n = 0.0;
    let mut x = 1.0;
    while x < p {
        x *= k;
        n += 1.0;
    }
    n
}

/// The model evaluated with one per-message overhead (the shim's or the system MPI's).
struct M<'a> {
    q: &'a Params,
    o: f64,
}

impl M<'_> {
    fn rv(&self, m: f64) -> f64 {
        if m > self.q.eager {
            2.0 * self.q.l + 2.0 * self.o
        } else {
            0.0
        }
    }
    fn msg(&self, m: f64) -> f64 {
        self.q.l + 2.0 * self.o + self.q.big_g * m + self.rv(m)
    }
    fn fanout(&self, n: f64, m: f64) -> f64 {
        if n <= 0.0 {
            return 0.0;
        }
        self.msg(m) + (n - 1.0) * self.o.max(self.q.g + self.q.big_g * m)
    }
    fn red(&self, m: f64) -> f64 {
        self.q.gamma * m
    }
    fn cp(&self, m: f64) -> f64 {
        self.q.copy * m
    }
}

/// Cost of `algo` for `coll` at `p` ranks and `m` bytes (per block for the gather /
/// scatter / allgather / alltoall families, the whole vector for the others). `k` and
/// `seg` are the algorithm's parameters (0: its default).
#[allow(clippy::too_many_arguments)]
pub fn cost(
    q: &Params,
    coll: Coll,
    algo: Algo,
    p: i32,
    m: i64,
    k: u32,
    seg: i64,
    nonblocking: bool,
) -> Cost {
    let pf = p.max(1) as f64;
    let m = m.max(0) as f64;
    if algo == Algo::Native {
        let c = shape(q, coll, native_algo(coll, p, m), pf, m, 0, 0, q.o_native);
        let time = c.time + q.native_call;
        // without a progress engine a non-blocking call makes progress only in Wait,
        // which then costs the application the whole communication
        return Cost {
            time,
            cpu: if nonblocking {
                time
            } else {
                c.cpu + q.native_call
            },
        };
    }
    let c = shape(q, coll, algo, pf, m, k, seg, q.o);
    Cost {
        time: c.time + q.sched,
        cpu: c.cpu + q.sched,
    }
}

/// The largest size (bytes of the vector; Barrier: none) [`across`] predicts: the small
/// messages, whose time is the messages' count and latency. Beyond it the two-level
/// reductions move the whole vector between leaders where the flat Rabenseifner moves
/// less, and the simulation has them lose (README, "Scale by simulation").
pub const ACROSS_MAX_BYTES: i64 = 4096;

/// Predicted times (µs) of one call of `coll` with `m` bytes on `nodes` nodes of `ppn`
/// ranks each (consecutive ranks on a node), the shim's flat algorithm against its
/// two-level one (`algo::hier`): the cost model that knows the node layout and both
/// levels' parameters (issue 35, item 2). A closed form of what the timing simulator
/// (`core::sched::timing`, `algo::scaling`) runs message by message, checked against its
/// predictions in the tests below:
/// - flat: the rounds of the flat algorithm, each at the level its messages cross. A tree
///   (Bcast, Reduce: binomial, k-nomial) sends farthest first, across the network while a
///   round's distance reaches past a node and inside the nodes after; a chain leaves each
///   node once; recursive doubling and dissemination (Barrier, Allreduce) cross the
///   network in every round whose distance reaches another node, where a node's ranks all
///   send at once and their bytes share its one link;
/// - two-level: the leaders' algorithm on `nodes` ranks over the network, and each node
///   phase a flag's trip through the segment plus its copies (and, for a reduction, the
///   leader's combining of the node's operands).
///
/// `flat` and `lead` are the algorithms (and their k) `auto` picks for the whole
/// communicator and for the leaders (`select::choose`). `None` for collectives and sizes
/// it does not cover: up to [`ACROSS_MAX_BYTES`], Barrier, Bcast, Reduce and Allreduce.
pub fn across(
    q: &Params,
    coll: Coll,
    nodes: i32,
    ppn: i32,
    m: i64,
    flat: (Algo, u32),
    lead: (Algo, u32),
) -> Option<(f64, f64)> {
    if m > ACROSS_MAX_BYTES
        || nodes < 2
        || ppn < 1
        || !matches!(
            coll,
            Coll::Barrier | Coll::Bcast | Coll::Reduce | Coll::Allreduce
        )
    {
        return None;
    }
    let m = m.max(0) as f64;
    let net = Params {
        l: q.net_l,
        o: q.net_o,
        g: q.net_g,
        big_g: q.net_big_g,
        ..*q
    };
    let time = |q: &Params, algo: Algo, n: i32, k: u32| {
        if n <= 1 {
            0.0
        } else {
            shape(q, coll, algo, n as f64, m, k, 0, q.o).time
        }
    };
    use Algo::*;
    let p = nodes * ppn;
    let msg = |q: &Params, m: f64| q.l + 2.0 * q.o + q.big_g * m;
    // a round in which `c` ranks of each node send across the network at once: their
    // messages share the node's link
    let crossing = |c: f64| msg(&net, m) + (c - 1.0).max(0.0) * net.big_g * m;
    let red = if coll == Coll::Allreduce {
        q.gamma * m
    } else {
        0.0
    };
    // (a Reduce combines at every hop of a chain)
    let red_hop = if coll == Coll::Reduce {
        q.gamma * m
    } else {
        0.0
    };
    // the leaders' algorithm over the network
    let lead = time(&net, lead.0, nodes, lead.1);
    // the flat algorithm's rounds at the levels they cross
    let (fa, fk) = flat;
    let flat = match fa {
        // recursive doubling: the distance-d rounds stay on the node while d < ppn (the
        // partner differs in a bit below the node's), then all cross; a count that is not
        // a power of two folds the extra ranks in and out across the network
        RecursiveDoubling => {
            let pof2 = 1i32 << (31 - p.leading_zeros());
            (0..pof2.trailing_zeros())
                .map(|j| {
                    red + if (1i32 << j) < ppn {
                        msg(q, m)
                    } else {
                        crossing(ppn as f64)
                    }
                })
                .sum::<f64>()
                + if pof2 < p {
                    2.0 * msg(&net, m) + red
                } else {
                    0.0
                }
        }
        // dissemination, n peers a round at distances d, 2d, .. nd (d = (n + 1)^j): the
        // ranks of each node within that distance of its end (all, once it reaches ppn)
        // send to another node
        Dissemination | NwayDissemination => {
            let n = if fa == Dissemination {
                1
            } else {
                fk.max(1) as i64
            };
            let mut d = 1i64;
            let mut t = 0.0;
            while d < p as i64 {
                let c: i64 = (1..=n).map(|i| (i * d).min(ppn as i64)).sum();
                t += crossing(c as f64) + (n - 1) as f64 * (net.o + red) + red;
                d *= n + 1;
            }
            t
        }
        // the root sends every message itself, most of them across
        Linear => time(&net, fa, p, fk),
        // a chain through the ranks in order: one hop in ppn leaves the node
        Pipeline => {
            let hops = |q: &Params, n: i32| n as f64 * (msg(q, m) + red_hop);
            hops(&net, nodes - 1) + hops(q, p - nodes)
        }
        // a tree (binomial: k = 2) of ceil(log_k p) rounds, farthest first: in the round
        // of distance d a rank sends to d, 2d, .. (k - 1)d further, across the network
        // while that reaches past its node
        Binomial | Knomial => {
            let k = if fa == Knomial { fk.max(2) as i64 } else { 2 };
            let mut d = 1i64;
            while d * k < p as i64 {
                d *= k;
            }
            let mut t = 0.0;
            while d >= 1 {
                let level = if (k - 1) * d >= ppn as i64 { &net } else { q };
                let x = M {
                    q: level,
                    o: level.o,
                };
                let fan = (k - 1) as f64;
                t += x.fanout(fan, m)
                    + if coll == Coll::Reduce {
                        fan * q.gamma * m
                    } else {
                        0.0
                    };
                d /= k;
            }
            t
        }
        // (the large-message algorithms: beyond what this covers)
        _ => return None,
    };
    // (a node of one rank: no flags to watch, only its copies in and out of the slot)
    let (flag, k) = (if ppn > 1 { q.shm_flag } else { 0.0 }, ppn as f64 - 1.0);
    let node = match coll {
        Coll::Barrier => 2.0 * flag,
        Coll::Bcast => flag + 2.0 * q.copy * m,
        Coll::Reduce => flag + q.copy * m + k * q.gamma * m,
        _ => 2.0 * flag + 2.0 * q.copy * m + k * q.gamma * m,
    };
    Some((flat, lead + node))
}

/// The algorithm MPICH 4.0 picks by default (its `generic.json` and CVAR defaults).
fn native_algo(coll: Coll, p: i32, m: f64) -> Algo {
    let pf = p as f64;
    let pof2 = p > 0 && (p & (p - 1)) == 0;
    match coll {
        Coll::Barrier => Algo::Dissemination,
        Coll::Bcast => {
            if p < 8 || m < 12288.0 {
                Algo::Binomial
            } else {
                Algo::ScatterAllgather
            }
        }
        Coll::Gather | Coll::Gatherv | Coll::Scatter | Coll::Scatterv => Algo::Binomial,
        Coll::Allgather | Coll::Allgatherv => {
            let total = m * pf;
            if pof2 && total < 524288.0 {
                Algo::RecursiveDoubling
            } else if !pof2 && total < 81920.0 {
                Algo::Bruck
            } else {
                Algo::Ring
            }
        }
        Coll::Alltoall | Coll::Alltoallv | Coll::Alltoallw => {
            if p >= 8 && m <= 256.0 {
                Algo::Bruck
            } else if m <= 32768.0 {
                Algo::Linear
            } else {
                Algo::Pairwise
            }
        }
        Coll::Reduce => {
            if m > 2048.0 {
                Algo::Rabenseifner
            } else {
                Algo::Binomial
            }
        }
        Coll::Allreduce => {
            if m > 2048.0 {
                Algo::Rabenseifner
            } else {
                Algo::RecursiveDoubling
            }
        }
        Coll::ReduceScatter | Coll::ReduceScatterBlock => {
            if m < 524288.0 {
                Algo::RecursiveHalving
            } else {
                Algo::Pairwise
            }
        }
        Coll::Scan | Coll::Exscan => Algo::RecursiveDoubling,
        _ => Algo::SingleRound,
    }
}

/// The communication and computation of an algorithm, with per-message overhead `o`.
#[allow(clippy::too_many_arguments)]
fn shape(q: &Params, coll: Coll, algo: Algo, p: f64, m: f64, k: u32, seg: i64, o: f64) -> Cost {
    let x = M { q, o };
    if p <= 1.0 {
        return Cost {
            time: x.cp(m),
            cpu: x.cp(m),
        };
    }
    let lg = log2c(p);
    let pof2 = 2f64.powf(p.log2().floor());
    let folded = if pof2 < p { 1.0 } else { 0.0 };
    let lgf = pof2.log2();
    let segs = |seg: i64| -> f64 {
        if seg <= 0 || m <= 0.0 {
            1.0
        } else {
            (m / seg as f64).ceil().max(1.0)
        }
    };
    let t = |time: f64, cpu: f64| Cost { time, cpu };
    use Algo::*;
    match (coll, algo) {
        (Coll::Barrier, NwayDissemination) => {
            let n = (k.max(1) as f64).min(p - 1.0);
            let r = logk(n + 1.0, p);
            t(r * x.fanout(n, 0.0), r * 2.0 * n * o)
        }
        (Coll::Barrier, RecursiveDoubling) => {
            let r = lgf + 2.0 * folded;
            t(r * x.msg(0.0), r * 2.0 * o)
        }
        (Coll::Barrier, _) => t(lg * x.msg(0.0), lg * 2.0 * o),

        (Coll::Bcast, Linear) => t(x.fanout(p - 1.0, m), (p - 1.0) * o),
        (Coll::Bcast, Knomial) => {
            let kk = k.max(2) as f64;
            let r = logk(kk, p);
            t(r * x.fanout(kk - 1.0, m), r * (kk - 1.0) * o + o)
        }
        (Coll::Bcast, Pipeline) => {
            let s = segs(seg);
            let ms = m / s;
            let time = (p - 1.0) * x.msg(ms) + (s - 1.0) * (2.0 * o).max(q.g + q.big_g * ms);
            t(time, s * 2.0 * o)
        }
        (Coll::Bcast, ScatterAllgather) => {
            let time =
                lg * (q.l + 2.0 * o) + q.big_g * m * (p - 1.0) / p + (p - 1.0) * x.msg(m / p);
            t(time, (lg + 2.0 * (p - 1.0)) * o)
        }
        (Coll::Bcast, _) => t(lg * x.msg(m), lg * o + o),

        (Coll::Gather | Coll::Gatherv | Coll::Scatter | Coll::Scatterv, Binomial) => {
            let time = lg * (q.l + 2.0 * o) + q.big_g * m * (p - 1.0) + x.cp(m * p / 2.0);
            t(time, lg * 2.0 * o + x.cp(m * p / 2.0))
        }
        (Coll::Gather | Coll::Gatherv | Coll::Scatter | Coll::Scatterv, _) => {
            t(x.fanout(p - 1.0, m), (p - 1.0) * o)
        }

        (Coll::Allgather | Coll::Allgatherv, RecursiveDoubling) => {
            let time = lgf * (q.l + 2.0 * o)
                + q.big_g * m * (pof2 - 1.0)
                + folded * (x.msg(m) + x.msg(m * p));
            t(time, 2.0 * (lgf + 2.0 * folded) * o)
        }
        (Coll::Allgather | Coll::Allgatherv, Bruck) => {
            t(lg * (q.l + 2.0 * o) + q.big_g * m * (p - 1.0), 2.0 * lg * o)
        }
        (Coll::Allgather | Coll::Allgatherv, Mesh) => {
            let cols = p.sqrt().ceil();
            let rows = (p / cols).ceil();
            let time = x.fanout(cols - 1.0, m) + x.fanout(rows - 1.0, cols * m);
            t(time, 2.0 * (cols + rows - 2.0) * o)
        }
        (Coll::Allgather | Coll::Allgatherv, Prefix) => {
            t(x.fanout(p - 1.0, m), 2.0 * (p - 1.0) * o)
        }
        (Coll::Allgather | Coll::Allgatherv, KPrefix) => {
            let kk = if k == 0 { 4.0 } else { k as f64 };
            let ph = p / kk;
            let time = ph * x.fanout(kk - 1.0, m) + (ph - 1.0) * x.msg(m);
            t(time, 2.0 * (p - 1.0) * o)
        }
        (Coll::Allgather | Coll::Allgatherv, KShift) => {
            let kk = if k == 0 { 4.0 } else { k as f64 };
            let ph = p / kk;
            t(ph * x.fanout(kk, m), 2.0 * (p - 1.0) * o)
        }
        (Coll::Allgather | Coll::Allgatherv, Hypercube) => {
            let z = (if k == 0 { 2.0 } else { k as f64 }).min(lgf);
            let sub = 2f64.powf(z);
            let col = pof2 / sub;
            let time = (lgf - z) * (q.l + 2.0 * o)
                + q.big_g * m * (col - 1.0)
                + x.fanout(sub - 1.0, m * col)
                + folded * (x.msg(m) + x.msg(m * p));
            t(time, 2.0 * (lgf - z + sub - 1.0 + 2.0 * folded) * o)
        }
        (Coll::Allgather | Coll::Allgatherv, _) => t((p - 1.0) * x.msg(m), 2.0 * (p - 1.0) * o),

        (Coll::Alltoall | Coll::Alltoallv | Coll::Alltoallw, Pairwise) => {
            t((p - 1.0) * x.msg(m), 2.0 * (p - 1.0) * o)
        }
        (Coll::Alltoall | Coll::Alltoallv | Coll::Alltoallw, Bruck) => {
            let copies = x.cp(2.0 * m * p);
            t(lg * x.msg(m * p / 2.0) + copies, 2.0 * lg * o + copies)
        }
        (Coll::Alltoall | Coll::Alltoallv | Coll::Alltoallw, _) => {
            let time = q.l + 2.0 * o + (p - 1.0) * (2.0 * o).max(q.g + q.big_g * m) + x.rv(m);
            t(time, 2.0 * (p - 1.0) * o)
        }

        (Coll::Reduce, Knomial) => {
            let kk = k.max(2) as f64;
            let r = logk(kk, p);
            let step = x.fanout(kk - 1.0, m) + (kk - 1.0) * x.red(m);
            t(r * step, r * ((kk - 1.0) * (o + x.red(m)) + o))
        }
        (Coll::Reduce, Rabenseifner) => {
            let time = 2.0 * lg * (q.l + 2.0 * o)
                + 2.0 * q.big_g * m * (p - 1.0) / p
                + x.red(m) * (p - 1.0) / p
                + folded * (x.msg(m) + x.red(m));
            t(time, 4.0 * lg * o + x.red(m) * (1.0 + folded))
        }
        (Coll::Reduce, Pipeline) => {
            let s = segs(seg);
            let ms = m / s;
            let time = (p - 1.0) * (x.msg(ms) + x.red(ms))
                + (s - 1.0) * (2.0 * o + x.red(ms)).max(q.g + q.big_g * ms);
            t(time, s * 2.0 * o + x.red(m))
        }
        (Coll::Reduce, _) => t(lg * (x.msg(m) + x.red(m)), lg * (2.0 * o + x.red(m))),

        (Coll::Allreduce, NwayDissemination) => {
            let n = (k.max(1) as f64).min(p - 1.0);
            let mut qn = 1.0;
            while qn * (n + 1.0) <= p {
                qn *= n + 1.0;
            }
            let r = logk(n + 1.0, qn);
            let fold = if qn < p {
                2.0 * x.msg(m) + x.red(m)
            } else {
                0.0
            };
            let time = r * (x.fanout(n, m) + n * x.red(m)) + fold;
            t(time, r * n * (2.0 * o + x.red(m)) + fold)
        }
        (Coll::Allreduce, Rabenseifner) => {
            let time = 2.0 * lgf * (q.l + 2.0 * o)
                + 2.0 * q.big_g * m * (pof2 - 1.0) / pof2
                + x.red(m) * (pof2 - 1.0) / pof2
                + folded * (2.0 * x.msg(m) + x.red(m));
            t(time, 4.0 * lgf * o + x.red(m))
        }
        (Coll::Allreduce, Ring) => {
            let time = (2.0 * p - 2.0) * x.msg(m / p) + (p - 1.0) * x.red(m / p);
            t(time, (4.0 * p - 4.0) * o + x.red(m))
        }
        (Coll::Allreduce, ReduceBcast) => {
            let time = lg * (2.0 * x.msg(m) + x.red(m));
            t(time, lg * (4.0 * o + x.red(m)))
        }
        (Coll::Allreduce, _) => {
            let time = lgf * (x.msg(m) + x.red(m)) + folded * (2.0 * x.msg(m) + x.red(m));
            t(time, (lgf + folded) * (2.0 * o + x.red(m)))
        }

        (Coll::ReduceScatter | Coll::ReduceScatterBlock, Ring | Pairwise) => {
            let b = m / p;
            t(
                (p - 1.0) * (x.msg(b) + x.red(b)),
                (p - 1.0) * (2.0 * o + x.red(b)),
            )
        }
        (Coll::ReduceScatter | Coll::ReduceScatterBlock, RecursiveHalving) => {
            let time = lg * (q.l + 2.0 * o)
                + (p - 1.0) / p * m * (q.big_g + q.gamma)
                + folded * (x.msg(m) + x.red(m));
            t(time, 2.0 * lg * o + x.red(m))
        }
        (Coll::ReduceScatter | Coll::ReduceScatterBlock, _) => {
            let time = lg * (x.msg(m) + x.red(m)) + x.fanout(p - 1.0, m / p);
            t(time, lg * (2.0 * o + x.red(m)) + (p - 1.0) * o)
        }

        (Coll::Scan | Coll::Exscan, Pipeline) => {
            let s = segs(seg);
            let ms = m / s;
            let time = (p - 1.0) * (x.msg(ms) + x.red(ms))
                + (s - 1.0) * (2.0 * o + x.red(ms)).max(q.g + q.big_g * ms);
            t(time, s * 2.0 * o + x.red(m))
        }
        (Coll::Scan | Coll::Exscan, _) => t(
            lg * (x.msg(m) + 2.0 * x.red(m)),
            lg * (2.0 * o + 2.0 * x.red(m)),
        ),

        // neighbourhood: a degree the model does not know; one round of messages
        _ => t(x.fanout(2.0, m), 4.0 * o),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn best(coll: Coll, algos: &[Algo], p: i32, m: i64, nb: bool) -> Algo {
        let q = Params {
            native_call: 1e9, // leave the system MPI out
            ..Params::default()
        };
        *algos
            .iter()
            .filter(|&&a| applicable(coll, a, p, true, 0))
            .min_by(|&&a, &&b| {
                let ca = cost(&q, coll, a, p, m, 0, 64 << 10, nb);
                let cb = cost(&q, coll, b, p, m, 0, 64 << 10, nb);
                let (x, y) = if nb {
                    (ca.cpu, cb.cpu)
                } else {
                    (ca.time, cb.time)
                };
                x.partial_cmp(&y).unwrap()
            })
            .unwrap()
    }

    #[test]
    fn textbook_crossovers() {
        use Algo::*;
        // allreduce: recursive doubling for short vectors, bandwidth-optimal for long
        let ar = [RecursiveDoubling, Rabenseifner, Ring, ReduceBcast];
        assert_eq!(best(Coll::Allreduce, &ar, 16, 8, false), RecursiveDoubling);
        assert!(matches!(
            best(Coll::Allreduce, &ar, 16, 8 << 20, false),
            Rabenseifner | Ring
        ));
        // bcast: a tree for short messages, scatter-allgather or a pipeline for long ones
        let bc = [Linear, Binomial, Knomial, Pipeline, ScatterAllgather];
        assert!(matches!(
            best(Coll::Bcast, &bc, 32, 8, false),
            Binomial | Knomial
        ));
        assert!(matches!(
            best(Coll::Bcast, &bc, 32, 16 << 20, false),
            ScatterAllgather | Pipeline
        ));
        // allgather: few rounds for small blocks (the ring's P - 1 rounds lose)
        let ag = [Ring, RecursiveDoubling, Bruck, Mesh];
        assert_ne!(best(Coll::Allgather, &ag, 64, 8, false), Ring);
    }

    #[test]
    fn native_is_priced_as_its_algorithm() {
        let q = Params::default();
        let n = cost(&q, Coll::Allreduce, Algo::Native, 8, 8, 0, 0, false);
        let s = cost(
            &q,
            Coll::Allreduce,
            Algo::RecursiveDoubling,
            8,
            8,
            0,
            0,
            false,
        );
        assert!(n.time < s.time, "the system MPI has less overhead per call");
        // non-blocking: the system MPI's work all lands in Wait
        let nb = cost(&q, Coll::Allreduce, Algo::Native, 8, 1 << 20, 0, 0, true);
        assert_eq!(nb.cpu, nb.time);
    }

    /// The timing simulator's predictions (`scripts/tools/simulate`, both parameter sets)
    /// that [`across`] must agree with.
    const SIMULATED: [(&str, &str); 2] = [
        (
            "fabric",
            include_str!("../../../../scripts/bench/results/sim/scaling-fabric.csv"),
        ),
        (
            "emulated",
            include_str!("../../../../scripts/bench/results/sim/scaling-emulated.csv"),
        ),
    ];

    /// The network of a parameter set as the simulation had it (the `inter.*` lines of
    /// `scripts/bench/sim/SET.params`, read as the simulator reads them; inside a node both
    /// sets use this model's defaults).
    fn with_net(set: &str) -> Params {
        let net = crate::services::coll::algo::scaling::params(set)
            .unwrap()
            .inter;
        Params {
            net_l: net.l,
            net_o: net.o,
            net_g: net.g,
            net_big_g: net.big_g,
            ..Params::default()
        }
    }

    /// (set, collective, bytes, nodes, ppn, simulated flat, simulated two-level, the flat
    /// algorithm, the leaders')
    #[allow(clippy::type_complexity)]
    fn simulated() -> Vec<(&'static str, Coll, i64, i32, i32, f64, f64, Algo, Algo)> {
        let mut v = Vec::new();
        for (set, csv) in SIMULATED {
            for line in csv.lines().skip(1) {
                let f: Vec<&str> = line.split(',').collect();
                let coll = match f[1] {
                    "barrier" => Coll::Barrier,
                    "bcast" => Coll::Bcast,
                    "reduce" => Coll::Reduce,
                    _ => Coll::Allreduce,
                };
                let (Ok(flat), Ok(two)) = (f[5].parse::<f64>(), f[6].parse::<f64>()) else {
                    continue; // over the simulator's bound of actions
                };
                v.push((
                    set,
                    coll,
                    f[2].parse().unwrap(),
                    f[3].parse().unwrap(),
                    f[4].parse().unwrap(),
                    flat,
                    two,
                    Algo::from_name(f[7]).unwrap(),
                    Algo::from_name(f[8]).unwrap(),
                ));
            }
        }
        v
    }

    #[test]
    fn across_nodes_the_model_picks_as_the_simulator_does() {
        let (mut agree, mut decisive, mut points, mut close_flat) = (0, 0, 0, 0);
        // (the simulation ran the k-nomial algorithms with k = 4, n-way dissemination with 2)
        let k = |a: Algo| match a {
            Algo::Knomial => 4,
            Algo::NwayDissemination => 2,
            _ => 0,
        };
        for (set, coll, bytes, nodes, ppn, flat, two, fa, la) in simulated() {
            let q = with_net(set);
            let Some((mf, mt)) = across(&q, coll, nodes, ppn, bytes, (fa, k(fa)), (la, k(la)))
            else {
                continue;
            };
            if two / flat < 0.8 || two / flat > 1.25 {
                decisive += 1;
                if (mt < mf) == (two < flat) {
                    agree += 1;
                }
            }
            points += 1;
            close_flat += usize::from((0.75..=1.25).contains(&(mf / flat)));
            assert!(
                (0.9..=1.1).contains(&(mt / two)),
                "{set} {coll:?} {bytes} B {nodes}x{ppn}: two-level {mt} against {two}"
            );
        }
        eprintln!("agree {agree} of {decisive}, flat within 25% at {close_flat} of {points}");
        // where the simulator has one ahead by a quarter, the model picks the same
        assert_eq!(agree, decisive);
        assert!(decisive > 300, "{decisive}");
        assert!(close_flat * 10 >= points * 9, "{close_flat} of {points}");
    }
}

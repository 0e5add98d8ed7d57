//! Layer: services. May use: core, platform.
//!
//! Algorithm selection: the registry of algorithms per collective, forced choices
//! (`SHIM_<COLL>_ALGORITHM`, `_K`, `_SEGMENT`, or `shim_set_algorithm` at run time), and
//! `auto`, which asks the cost model (`model`) and the measured table of a tuning file
//! (`tuning`) which algorithm to run.
//!
//! Every input of a decision is known identically on every rank of the communicator
//! (the collective, the form, the communicator size, the commutativity of the operation,
//! and a size in bytes that the standard makes equal everywhere: signature sizes of the
//! data per block), so all ranks pick the same algorithm; collectives whose sizes only
//! some ranks know (the v/w forms other than Allgatherv and Reduce_scatter, the
//! neighbourhood ones) decide by communicator size alone, except the v/w forms on two
//! processes, where both ends know the one message between them (`CollSpec::sized_at`). A mismatch would deadlock,
//! which is why the configuration is also checked to be identical on all ranks at init.

pub mod calibrate;
pub mod env;
pub mod model;
pub mod tuning;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{LazyLock, Mutex, OnceLock, RwLock};

use super::Coll;

/// The algorithms, over all collectives (each collective accepts a subset, see [`COLLS`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum Algo {
    Auto = 0,
    Native,
    Linear,
    Binomial,
    Knomial,
    Pipeline,
    ScatterAllgather,
    Dissemination,
    NwayDissemination,
    RecursiveDoubling,
    Rabenseifner,
    Ring,
    ReduceBcast,
    RecursiveHalving,
    Pairwise,
    ReduceScatterv,
    Bruck,
    Mesh,
    Prefix,
    KPrefix,
    KShift,
    Hypercube,
    SingleRound,
    /// The shared-memory algorithms (`algo::shm`), where the communicator has a node
    /// segment and the data fits (`SHIM_TRANSPORT`).
    Shm,
}

/// Every algorithm, in `repr` order.
pub const ALL_ALGOS: &[Algo] = &[
    Algo::Auto,
    Algo::Native,
    Algo::Linear,
    Algo::Binomial,
    Algo::Knomial,
    Algo::Pipeline,
    Algo::ScatterAllgather,
    Algo::Dissemination,
    Algo::NwayDissemination,
    Algo::RecursiveDoubling,
    Algo::Rabenseifner,
    Algo::Ring,
    Algo::ReduceBcast,
    Algo::RecursiveHalving,
    Algo::Pairwise,
    Algo::ReduceScatterv,
    Algo::Bruck,
    Algo::Mesh,
    Algo::Prefix,
    Algo::KPrefix,
    Algo::KShift,
    Algo::Hypercube,
    Algo::SingleRound,
    Algo::Shm,
];

impl Algo {
    pub fn name(self) -> &'static str {
        match self {
            Algo::Auto => "auto",
            Algo::Native => "native",
            Algo::Linear => "linear",
            Algo::Binomial => "binomial",
            Algo::Knomial => "knomial",
            Algo::Pipeline => "pipeline",
            Algo::ScatterAllgather => "scatter-allgather",
            Algo::Dissemination => "dissemination",
            Algo::NwayDissemination => "nway-dissemination",
            Algo::RecursiveDoubling => "recursive-doubling",
            Algo::Rabenseifner => "rabenseifner",
            Algo::Ring => "ring",
            Algo::ReduceBcast => "reduce-bcast",
            Algo::RecursiveHalving => "recursive-halving",
            Algo::Pairwise => "pairwise",
            Algo::ReduceScatterv => "reduce-scatterv",
            Algo::Bruck => "bruck",
            Algo::Mesh => "mesh",
            Algo::Prefix => "prefix",
            Algo::KPrefix => "kprefix",
            Algo::KShift => "kshift",
            Algo::Hypercube => "hypercube",
            Algo::SingleRound => "single-round",
            Algo::Shm => "shm",
        }
    }

    pub fn from_name(s: &str) -> Option<Algo> {
        let s = s.trim().to_ascii_lowercase().replace('_', "-");
        ALL_ALGOS.iter().copied().find(|a| a.name() == s)
    }

    fn from_u8(v: u8) -> Algo {
        ALL_ALGOS[v as usize]
    }
}

/// A parameter an algorithm family takes: (default, minimum, maximum).
#[derive(Clone, Copy, Debug)]
pub struct Param {
    pub default: i64,
    pub min: i64,
    pub max: i64,
    pub doc: &'static str,
}

/// One collective's entry in the registry.
pub struct CollSpec {
    pub coll: Coll,
    /// The name in `SHIM_<NAME>_ALGORITHM`.
    pub env: &'static str,
    /// The MPI name, for messages and tables.
    pub mpi: &'static str,
    /// The algorithms it accepts besides `auto`.
    pub algos: &'static [Algo],
    /// `SHIM_<NAME>_K`, if the collective has a fan-out parameter.
    pub k: Option<Param>,
    /// `SHIM_<NAME>_SEGMENT` (bytes), if it has a segment size.
    pub segment: Option<Param>,
    /// Whether every rank knows the data size (else decisions ignore it).
    pub sized: bool,
}

impl CollSpec {
    /// Whether decisions on `p` processes use the data size. Besides the `sized`
    /// collectives: the rooted v-forms and Alltoallv/w on two processes, where the one
    /// message each way is known to both ends (a block count times the type size, equal
    /// by the matching rules, MPI-4.1 §6.1), so both pick alike.
    pub fn sized_at(&self, p: i32) -> bool {
        self.sized
            || (p == 2
                && matches!(
                    self.coll,
                    Coll::Gatherv | Coll::Scatterv | Coll::Alltoallv | Coll::Alltoallw
                ))
    }
}

const BARRIER_ALGOS: &[Algo] = &[
    Algo::Native,
    Algo::Dissemination,
    Algo::NwayDissemination,
    Algo::RecursiveDoubling,
    Algo::Shm,
];
const BCAST_ALGOS: &[Algo] = &[
    Algo::Native,
    Algo::Linear,
    Algo::Binomial,
    Algo::Knomial,
    Algo::Pipeline,
    Algo::ScatterAllgather,
    Algo::Shm,
];
const ROOTED_ALGOS: &[Algo] = &[Algo::Native, Algo::Linear, Algo::Binomial, Algo::Shm];
const ROOTED_V_ALGOS: &[Algo] = &[Algo::Native, Algo::Linear, Algo::Binomial, Algo::Shm];
const ALLGATHERV_ALGOS: &[Algo] = &[
    Algo::Native,
    Algo::Ring,
    Algo::RecursiveDoubling,
    Algo::Bruck,
    Algo::Mesh,
    Algo::Prefix,
    Algo::KPrefix,
    Algo::KShift,
    Algo::Hypercube,
    Algo::Shm,
];
const ALLGATHER_ALGOS: &[Algo] = &[
    Algo::Native,
    Algo::Ring,
    Algo::RecursiveDoubling,
    Algo::Bruck,
    Algo::Mesh,
    Algo::Prefix,
    Algo::KPrefix,
    Algo::KShift,
    Algo::Hypercube,
    Algo::Shm,
];
const ALLTOALL_ALGOS: &[Algo] = &[
    Algo::Native,
    Algo::Linear,
    Algo::Pairwise,
    Algo::Bruck,
    Algo::Shm,
];
const ALLTOALLV_ALGOS: &[Algo] = &[Algo::Native, Algo::Linear, Algo::Pairwise, Algo::Shm];
const REDUCE_ALGOS: &[Algo] = &[
    Algo::Native,
    Algo::Binomial,
    Algo::Knomial,
    Algo::Rabenseifner,
    Algo::Pipeline,
    Algo::Shm,
];
const ALLREDUCE_ALGOS: &[Algo] = &[
    Algo::Native,
    Algo::RecursiveDoubling,
    Algo::NwayDissemination,
    Algo::Rabenseifner,
    Algo::Ring,
    Algo::ReduceBcast,
    Algo::Shm,
];
const REDSCAT_ALGOS: &[Algo] = &[
    Algo::Native,
    Algo::Ring,
    Algo::RecursiveHalving,
    Algo::Pairwise,
    Algo::ReduceScatterv,
    Algo::Shm,
];
const REDSCAT_BLOCK_ALGOS: &[Algo] = &[
    Algo::Native,
    Algo::Ring,
    Algo::RecursiveHalving,
    Algo::Pairwise,
    Algo::ReduceScatterv,
    Algo::Shm,
];
const SCAN_ALGOS: &[Algo] = &[
    Algo::Native,
    Algo::RecursiveDoubling,
    Algo::Pipeline,
    Algo::Shm,
];
const NEIGHBOR_ALGOS: &[Algo] = &[Algo::Native, Algo::SingleRound];

const SEGMENT: Param = Param {
    default: 64 << 10,
    min: 1,
    max: 1 << 40,
    doc: "segment size in bytes of `pipeline`",
};
const KNOMIAL_K: Param = Param {
    default: 4,
    min: 2,
    max: 64,
    doc: "fan-out k of `knomial`",
};
const NWAY_K: Param = Param {
    default: 2,
    min: 1,
    max: 64,
    doc: "peers n per round of `nway-dissemination`",
};

const fn spec(
    coll: Coll,
    env: &'static str,
    mpi: &'static str,
    algos: &'static [Algo],
    k: Option<Param>,
    segment: Option<Param>,
    sized: bool,
) -> CollSpec {
    CollSpec {
        coll,
        env,
        mpi,
        algos,
        k,
        segment,
        sized,
    }
}

/// The registry, indexed by `Coll as usize - 1`.
pub static COLLS: [CollSpec; Coll::COUNT] = [
    spec(
        Coll::Barrier,
        "BARRIER",
        "MPI_Barrier",
        BARRIER_ALGOS,
        Some(NWAY_K),
        None,
        true,
    ),
    spec(
        Coll::Bcast,
        "BCAST",
        "MPI_Bcast",
        BCAST_ALGOS,
        Some(KNOMIAL_K),
        Some(SEGMENT),
        true,
    ),
    spec(
        Coll::Gather,
        "GATHER",
        "MPI_Gather",
        ROOTED_ALGOS,
        None,
        None,
        true,
    ),
    spec(
        Coll::Gatherv,
        "GATHERV",
        "MPI_Gatherv",
        ROOTED_V_ALGOS,
        None,
        None,
        false,
    ),
    spec(
        Coll::Scatter,
        "SCATTER",
        "MPI_Scatter",
        ROOTED_ALGOS,
        None,
        None,
        true,
    ),
    spec(
        Coll::Scatterv,
        "SCATTERV",
        "MPI_Scatterv",
        ROOTED_V_ALGOS,
        None,
        None,
        false,
    ),
    spec(
        Coll::Allgather,
        "ALLGATHER",
        "MPI_Allgather",
        ALLGATHER_ALGOS,
        Some(Param {
            default: 0,
            min: 0,
            max: 1 << 20,
            doc: "partition size of `kprefix` (default 4), window of `kshift` (default 4), direct-stage dimension of `hypercube` (default 2); 0 = those defaults",
        }),
        None,
        true,
    ),
    spec(
        Coll::Allgatherv,
        "ALLGATHERV",
        "MPI_Allgatherv",
        ALLGATHERV_ALGOS,
        Some(Param {
            default: 0,
            min: 0,
            max: 1 << 20,
            doc: "as `SHIM_ALLGATHER_K`",
        }),
        None,
        true,
    ),
    spec(
        Coll::Alltoall,
        "ALLTOALL",
        "MPI_Alltoall",
        ALLTOALL_ALGOS,
        None,
        None,
        true,
    ),
    spec(
        Coll::Alltoallv,
        "ALLTOALLV",
        "MPI_Alltoallv",
        ALLTOALLV_ALGOS,
        None,
        None,
        false,
    ),
    spec(
        Coll::Alltoallw,
        "ALLTOALLW",
        "MPI_Alltoallw",
        ALLTOALLV_ALGOS,
        None,
        None,
        false,
    ),
    spec(
        Coll::Reduce,
        "REDUCE",
        "MPI_Reduce",
        REDUCE_ALGOS,
        Some(KNOMIAL_K),
        Some(SEGMENT),
        true,
    ),
    spec(
        Coll::Allreduce,
        "ALLREDUCE",
        "MPI_Allreduce",
        ALLREDUCE_ALGOS,
        Some(NWAY_K),
        Some(Param {
            default: 0,
            min: 0,
            max: 1 << 40,
            doc: "largest message in bytes of `ring` (its chunks are split into pieces of at most this size; 0 = no limit)",
        }),
        true,
    ),
    spec(
        Coll::ReduceScatter,
        "REDUCE_SCATTER",
        "MPI_Reduce_scatter",
        REDSCAT_ALGOS,
        None,
        None,
        true,
    ),
    spec(
        Coll::ReduceScatterBlock,
        "REDUCE_SCATTER_BLOCK",
        "MPI_Reduce_scatter_block",
        REDSCAT_BLOCK_ALGOS,
        None,
        None,
        true,
    ),
    spec(
        Coll::Scan,
        "SCAN",
        "MPI_Scan",
        SCAN_ALGOS,
        None,
        Some(SEGMENT),
        true,
    ),
    spec(
        Coll::Exscan,
        "EXSCAN",
        "MPI_Exscan",
        SCAN_ALGOS,
        None,
        Some(SEGMENT),
        true,
    ),
    spec(
        Coll::NeighborAllgather,
        "NEIGHBOR_ALLGATHER",
        "MPI_Neighbor_allgather",
        NEIGHBOR_ALGOS,
        None,
        None,
        false,
    ),
    spec(
        Coll::NeighborAllgatherv,
        "NEIGHBOR_ALLGATHERV",
        "MPI_Neighbor_allgatherv",
        NEIGHBOR_ALGOS,
        None,
        None,
        false,
    ),
    spec(
        Coll::NeighborAlltoall,
        "NEIGHBOR_ALLTOALL",
        "MPI_Neighbor_alltoall",
        NEIGHBOR_ALGOS,
        None,
        None,
        false,
    ),
    spec(
        Coll::NeighborAlltoallv,
        "NEIGHBOR_ALLTOALLV",
        "MPI_Neighbor_alltoallv",
        NEIGHBOR_ALGOS,
        None,
        None,
        false,
    ),
    spec(
        Coll::NeighborAlltoallw,
        "NEIGHBOR_ALLTOALLW",
        "MPI_Neighbor_alltoallw",
        NEIGHBOR_ALGOS,
        None,
        None,
        false,
    ),
];

pub fn spec_of(coll: Coll) -> &'static CollSpec {
    &COLLS[coll as usize - 1]
}

/// The registry entry for a `SHIM_<NAME>` collective name (case-insensitive) or an MPI
/// name (`MPI_Allreduce`, `allreduce`).
pub fn find(name: &str) -> Option<&'static CollSpec> {
    let n = name.trim().to_ascii_uppercase();
    let n = n.strip_prefix("MPI_").unwrap_or(&n);
    COLLS.iter().find(|c| c.env == n)
}

/// A decision: the algorithm and its parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Choice {
    pub algo: Algo,
    /// Fan-out / partition parameter (`SHIM_<COLL>_K`; 0 = the algorithm's default).
    pub k: u32,
    /// Segment size in bytes (`SHIM_<COLL>_SEGMENT`; 0 = unsegmented where allowed).
    pub seg: i64,
    /// `native` was forced but the system MPI gets this call wrong (see [`choose`]): the
    /// algorithm is the best schedule instead, and the call's path says so.
    pub fallback: bool,
}

impl Choice {
    pub fn new(algo: Algo) -> Choice {
        Choice {
            algo,
            k: 0,
            seg: 0,
            fallback: false,
        }
    }

    /// A compact encoding (for caches and schedule-cache keys).
    pub fn pack(&self) -> u64 {
        (self.algo as u64) | ((self.k as u64) << 8) | ((self.seg as u64) << 24)
    }
}

/// What the application asked for, per collective: the configuration's values, which
/// `shim_set_algorithm` may replace at run time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Forced {
    pub algo: Algo,
    pub k: Option<i64>,
    pub seg: Option<i64>,
}

impl Default for Forced {
    fn default() -> Self {
        Forced {
            algo: Algo::Auto,
            k: None,
            seg: None,
        }
    }
}

/// Run-time overrides (algorithm + 1, 0 = none), set through the C API.
static OVERRIDE: [AtomicU32; Coll::COUNT] = [const { AtomicU32::new(0) }; Coll::COUNT];

/// Replaces the configured algorithm of a collective for the rest of the run (all ranks
/// must do the same). `Algo::Auto` returns to automatic selection; `None` restores the
/// configuration.
pub fn set_override(coll: Coll, algo: Option<Algo>) {
    let v = algo.map_or(0, |a| a as u32 + 1);
    OVERRIDE[coll as usize - 1].store(v, Ordering::Relaxed);
    // The cached automatic decisions stay: they do not depend on what is forced (a forced
    // algorithm bypasses them), and re-deciding every bucket after each switch made `auto`
    // look slower than it is in the all-algorithms benchmark. Calls memoized as native
    // must see the new choice.
    crate::platform::memo::invalidate();
}

/// The forced choices of `SHIM_<COLL>_*` ([`env`]), handed over at init.
static FORCED: OnceLock<[Forced; Coll::COUNT]> = OnceLock::new();

/// Installs the forced choices parsed at init (first call wins).
pub fn configure(forced: [Forced; Coll::COUNT]) {
    let _ = FORCED.set(forced);
}

fn forced(coll: Coll) -> Forced {
    let mut f = FORCED
        .get()
        .map_or_else(Forced::default, |t| t[coll as usize - 1]);
    let o = OVERRIDE[coll as usize - 1].load(Ordering::Relaxed);
    if o != 0 {
        f.algo = Algo::from_u8((o - 1) as u8);
    }
    f
}

/// Whether the configuration lets `coll` run its shared-memory algorithm: `Some(true)` when
/// `SHIM_<COLL>_ALGORITHM=shm` forces it, `Some(false)` under `auto`, `None` when another
/// algorithm is forced or the collective has none.
pub fn shm_allowed(coll: Coll) -> Option<bool> {
    if !spec_of(coll).algos.contains(&Algo::Shm) {
        return None;
    }
    match forced(coll).algo {
        Algo::Shm => Some(true),
        Algo::Auto => Some(false),
        _ => None,
    }
}

/// The most slot bytes a call may need for `SHIM_TRANSPORT=auto` to take it to the segment
/// (a reduction: unless the library's tuning says otherwise, `shm_reduce_max`): up to 1 KiB
/// the segment beat all three libraries measured at 2 ranks (Intel MPI's own shared-memory
/// collectives tie it from 2 KiB and win some from 4 KiB, MPICH 5's Allreduce, Reduce and
/// Bcast from 2 KiB; Debian's MPICH 4.0.2's reductions lose to it up to the slot, its Bcast,
/// Gather and Scatter from 2 to 8 KiB did not in the last runs).
pub const AUTO_SHM_MAX_BYTES: i64 = 1024;

/// Whether `SHIM_TRANSPORT=auto` takes `coll`, called in `form` on `p` ranks and needing
/// `footprint` slot bytes, to the shared-memory segment: where it was measured to win
/// (README, "The node transport"). Where the library's own is not the other choice (a
/// collective it is never handed, a persistent call, an `I*` call under Open MPI:
/// [`native_allowed`]), only the shim's point-to-point schedules are, and copy-in-copy-out
/// beat them up to the slot (the caller checks it) under every library. In a job with an
/// oversubscribed node a waiting rank and the rank it waits for share a core, and what
/// decides is how soon the waiter gives it up, at once on the segment: up to the slot
/// where the library's own waits spin (the tuning's `oversub_yield` 0), from its
/// `oversub_shm_min` where they yield too. Else not above [`AUTO_SHM_MAX_BYTES`] (a
/// reduction: the library's `shm_reduce_max`; a data mover on two ranks: its
/// `shm_move_max`, where handing the call to the library between calls on the segment lost
/// and the segment won up to the slot under both MPICH; an `I*` call on two ranks: up to
/// its `shm_nb_max` where that is more). Bcast from 8 ranks stays, though MPICH 5's own was
/// up to 1.3 times faster there on 16 cores: handing it to the library while the calls
/// around it (IMB's Barriers) run on the segment made it twice as slow as the library's
/// (0.34 against 0.17 µs at 2 ranks here, 1.24 against 0.58 at 8 on 16 cores), each rank
/// leaving the segment's Barrier at its own moment. Every input is the same on every rank
/// (`proc::any_oversubscribed` is the job's), so all ranks decide alike.
pub fn shm_wins(coll: Coll, form: Form, p: i32, footprint: i64) -> bool {
    shm_wins_with(
        &tuning::get(),
        crate::platform::proc::any_oversubscribed(),
        coll,
        form,
        p,
        footprint,
    )
}

/// [`shm_wins`] with the tuning data and whether a node of the job is oversubscribed.
fn shm_wins_with(
    tun: &tuning::Tuning,
    oversubscribed: bool,
    coll: Coll,
    form: Form,
    p: i32,
    footprint: i64,
) -> bool {
    if !(native_trusted(coll) && native_allowed_with(tun, oversubscribed, form, p)) {
        // the library is not handed it: the shim's point-to-point schedules are all the
        // segment has to beat, and copy-in-copy-out did up to the slot under every library,
        // oversubscribed too (README, "The node transport"; `I*` calls under Open MPI
        // 0.28-0.78 of the library's time at 2-16 KiB where they took 1.2-1.6 through its
        // point-to-point), but the Allreduce where the library's point-to-point is fast
        // (`shm_sched_allreduce_max`)
        return oversubscribed
            || coll != Coll::Allreduce
            || footprint as f64 <= tun.params.shm_sched_allreduce_max;
    }
    if oversubscribed && tun.params.waits_yield() {
        // the library's own collectives give the core up as the segment's waits do, and
        // won there below `oversub_shm_min` (at 4 ranks on 2 cores: Intel MPI everywhere,
        // Open MPI below 1 KiB); from it up to the slot (the caller checks) the segment
        return footprint as f64 >= tun.params.oversub_shm_min;
    }
    if oversubscribed {
        // a waiting rank gives its core up at once on the segment, while the library's
        // point-to-point path (the other choice: `native_allowed`) waits a scheduler's
        // time slice: the segment won every point up to the slot (README, "The node
        // transport")
        return true;
    }
    let reduction = matches!(
        coll,
        Coll::Reduce | Coll::Allreduce | Coll::ReduceScatterBlock | Coll::Scan | Coll::Exscan
    );
    let max = if reduction {
        tun.params.shm_reduce_max
    } else if p == 2 {
        tun.params.shm_move_max
    } else {
        AUTO_SHM_MAX_BYTES as f64
    };
    let max = if form == Form::Nonblocking && p == 2 {
        max.max(tun.params.shm_nb_max)
    } else {
        max
    };
    footprint as f64 <= max
}

/// Whether `SHIM_TRANSPORT=auto` takes `coll`, called in `form` and needing `footprint`
/// slot bytes, on a communicator whose ranks are on several nodes to its two-level
/// algorithm (`algo::hier`): where that beat both MPICH 5's own collective and the shim's
/// flat schedules at 8 and 16 ranks on 2 and 4 emulated nodes (README, "An emulated cluster"): the
/// non-blocking Barrier, the Allreduce from 64 B to 4 KiB blocking and up to 4 KiB
/// non-blocking. Its Bcast and small Reduce lost there and are taken only where forced.
/// Where each of the `p` ranks is alone on its node (`nodes == p`) the node phases have
/// nothing to do and the leaders' phase is all there is: at 2 x 1 the blocking Allreduce
/// won there up to 1 KiB and lost from 2 KiB (README, "An emulated cluster"), so it is
/// taken up to [`HIER_ALONE_MAX_BYTES`]. In a job with an oversubscribed node,
/// [`hier_oversubscribed_wins`]. Where every node is a machine of its own (a real network
/// between them, which none of those measurements had), also where the cost model
/// predicts the two-level algorithm well ahead of the flat one ([`hier_model_wins`]).
/// Every input is the same on every rank.
pub fn hier_wins(coll: Coll, form: Form, p: i32, nodes: i32, footprint: i64) -> bool {
    use crate::platform::proc;
    let tun = tuning::get();
    if proc::any_oversubscribed() {
        return hier_oversubscribed_wins(&tun, coll, form, p, footprint);
    }
    hier_measured_wins(coll, form, p, nodes, footprint)
        || (proc::nodes_are_machines() && hier_model_wins(&tun, coll, form, p, nodes, footprint))
}

/// The flat time the model must predict the two-level algorithm within for
/// [`hier_model_wins`] to take it: its flat times were within 25% of the simulator's at
/// 591 of 618 points, its two-level ones within 10% at all (`model::across`).
pub const HIER_MODEL_MARGIN: f64 = 0.8;

/// Whether the cost model (`model::across`, both levels' parameters: this node's and the
/// tuning's `net_*`) predicts the two-level algorithm at most [`HIER_MODEL_MARGIN`] of the
/// flat one's time, for `p` ranks on `nodes` nodes, where the shim's flat schedule is the
/// other choice: a non-blocking or persistent call `auto` does not hand the library, or a
/// blocking one the library is not handed. A call the library would take stays with the
/// measured rules: the model does not know the library's own node-aware algorithms.
fn hier_model_wins(
    tun: &tuning::Tuning,
    coll: Coll,
    form: Form,
    p: i32,
    nodes: i32,
    footprint: i64,
) -> bool {
    let native_ok = native_trusted(coll) && native_allowed_with(tun, false, form, p);
    if nodes < 2 || (form == Form::Blocking && native_ok) {
        return false;
    }
    let ppn = (p + nodes - 1) / nodes;
    let flat = choose(coll, form, p, nodes, footprint, true, native_ok);
    if flat.algo == Algo::Native {
        return false;
    }
    let lead = choose(coll, form, nodes, nodes, footprint, true, false);
    let times = model::across(
        &tun.params,
        coll,
        nodes,
        ppn,
        footprint,
        (flat.algo, flat.k),
        (lead.algo, lead.k),
    );
    tracing::debug!(target: "shim::coll", "{coll:?} {form:?} {footprint} B on {nodes} x {ppn}: model (flat {:?}, two-level with {:?}) {times:?}", flat.algo, lead.algo);
    times.is_some_and(|(flat, two)| two <= HIER_MODEL_MARGIN * flat)
}

/// [`hier_wins`]'s measured rules, outside a job with an oversubscribed node.
fn hier_measured_wins(coll: Coll, form: Form, p: i32, nodes: i32, footprint: i64) -> bool {
    if nodes >= p && footprint > HIER_ALONE_MAX_BYTES {
        return false;
    }
    match (coll, form) {
        (Coll::Barrier, Form::Nonblocking | Form::Persistent) => true,
        (Coll::Allreduce, Form::Blocking) => (64..=HIER_MAX_BYTES).contains(&footprint),
        (Coll::Allreduce, _) => footprint <= HIER_MAX_BYTES,
        _ => false,
    }
}

/// [`hier_wins`] in a job with an oversubscribed node: where the library's waits spin
/// (both MPICH, the tuning's `oversub_yield` 0) it is not handed the call
/// ([`native_allowed`]) and the other choice is the shim's flat point-to-point schedules,
/// whose ranks all wait on the network and share the cores. The two-level algorithm beat
/// them in IMB-MPI1 at 2 nodes x 2 ranks on 2 cores under Debian's MPICH (README, "An
/// emulated cluster"): Barrier (0.5 of its time), Bcast and Reduce at every size (0.26-0.97,
/// 4 B to 4 MiB), Allreduce and Reduce_scatter_block up to 16 KiB (0.44-0.81; Allreduce lost
/// from 64 KiB, 1.25-1.54), Gather up to 4 KiB blocks and Scatter up to 16 KiB in all
/// (0.52-0.97; both lost at 16 KiB blocks); Allgather and Alltoall tied or lost. Blocking
/// calls only (the others were not measured there). Where the library's waits yield it is
/// the other choice: under Intel MPI (the tuning's `oversub_hier`) its own collectives took
/// 1.8-37 ms at 2 x 2 on 2 cores and the two-level ones 0.01-0.49 of that, every
/// collective with a two-level algorithm, 4 B to 1 MiB a block (README, "An emulated
/// cluster"): taken up to [`HIER_OVERSUB_YIELD_MAX_BYTES`] a block; not measured under Open
/// MPI (IMB does not run there), which keeps its own.
fn hier_oversubscribed_wins(
    tun: &tuning::Tuning,
    coll: Coll,
    form: Form,
    p: i32,
    footprint: i64,
) -> bool {
    if form != Form::Blocking {
        return false;
    }
    if tun.params.waits_yield() {
        // (Scatter's, Alltoall's and Reduce_scatter_block's footprint holds a block per rank)
        let block = match coll {
            Coll::Scatter | Coll::Alltoall | Coll::ReduceScatterBlock => {
                footprint / p.max(1) as i64
            }
            _ => footprint,
        };
        return tun.params.oversub_hier > 0.0 && block <= HIER_OVERSUB_YIELD_MAX_BYTES;
    }
    match coll {
        Coll::Barrier | Coll::Bcast | Coll::Reduce => true,
        Coll::Allreduce | Coll::ReduceScatterBlock | Coll::Scatter => {
            footprint <= HIER_OVERSUB_MAX_BYTES
        }
        Coll::Gather => footprint <= HIER_OVERSUB_GATHER_MAX_BYTES,
        _ => false,
    }
}

/// Whether `coll` has a single-copy algorithm on the segment (`algo::single`).
pub fn single_copy_serves(coll: Coll) -> bool {
    matches!(
        coll,
        Coll::Bcast
            | Coll::Gather
            | Coll::Scatter
            | Coll::Allgather
            | Coll::Alltoall
            | Coll::Reduce
            | Coll::Allreduce
            | Coll::ReduceScatter
            | Coll::ReduceScatterBlock
            | Coll::Gatherv
            | Coll::Scatterv
            | Coll::Allgatherv
            | Coll::Alltoallv
            | Coll::Alltoallw
            | Coll::Scan
            | Coll::Exscan
    )
}

/// Whether `coll` has a copy-in-copy-out algorithm on the segment (`algo::shm`) for all of
/// its data: all that have a shared-memory one but the v and w forms, whose blocks each
/// take their own way ([`mixed_serves`]).
pub fn copy_in_out_serves(coll: Coll) -> bool {
    !mixed_serves(coll)
}

/// Whether `coll` is a v or w form whose blocks each take their own way on the segment
/// (`algo::single::Inline`: through the sender's slot where it fits, by its address where
/// not): all but Reduce_scatter.
pub fn mixed_serves(coll: Coll) -> bool {
    matches!(
        coll,
        Coll::Gatherv | Coll::Scatterv | Coll::Allgatherv | Coll::Alltoallv | Coll::Alltoallw
    )
}

/// Whether `SHIM_TRANSPORT=auto` takes a v or w form ([`mixed_serves`]) on `p` ranks of
/// one node to the segment. Allgatherv, whose blocks every rank knows, as Allgather by its
/// average block (`footprint`): through the slots where [`shm_wins`], beyond the slot
/// where [`single_copy_wins`]. The others, whose blocks' sizes only some ranks know, where
/// the segment wins their fixed form at every size: up to the `slot` ([`shm_wins`]; single
/// copy beyond it won wherever it was measured),
/// but Gatherv: the library's own (one eager message per rank at 2 ranks under MPICH) tied
/// the slots up to 512 B and beat them from 2 to 8 KiB with a fixed root (README, "The
/// node transport").
pub fn mixed_wins(coll: Coll, form: Form, p: i32, footprint: i64, slot: i64) -> bool {
    match coll {
        Coll::Gatherv => false,
        Coll::Allgatherv if footprint > slot => single_copy_wins(coll, form, p, footprint),
        Coll::Allgatherv => shm_wins(coll, form, p, footprint),
        _ => shm_wins(coll, form, p, slot),
    }
}

/// Whether `coll`'s single-copy algorithm exposes one address per rank in the slot (only
/// the sender knows where each block lies): the slot must hold 8 bytes per rank.
pub fn single_copy_addresses(coll: Coll) -> bool {
    matches!(coll, Coll::Scatterv | Coll::Alltoallv | Coll::Alltoallw)
}

/// Whether `SHIM_TRANSPORT=auto` takes `coll` on one node, needing `footprint` bytes
/// (beyond the slot), to the single-copy algorithm: where it was measured to win (README,
/// "The node transport"): the data movers, Reduce_scatter(_block), Scan and Exscan beyond
/// the slot under all four libraries measured; Allreduce from the library's `single_reduce`
/// parameter (Open MPI 4.1's own won below 1 MiB, Intel MPI's at some sizes up to 4 MiB:
/// never there), Reduce from its `single_root` (Open MPI 4.1's own won at every size).
/// In a job with an oversubscribed node every collective with a size all ranks know where
/// the library's own waits spin, only those it is never handed where they yield (see
/// [`shm_wins`]). An `I*` data mover from the library's `single_nb_move`.
pub fn single_copy_wins(coll: Coll, form: Form, _p: i32, footprint: i64) -> bool {
    single_copy_wins_with(
        &tuning::get(),
        crate::platform::proc::any_oversubscribed(),
        coll,
        form,
        footprint,
    )
}

/// [`single_copy_wins`] with the tuning data and whether a node of the job is
/// oversubscribed.
fn single_copy_wins_with(
    tun: &tuning::Tuning,
    oversubscribed: bool,
    coll: Coll,
    form: Form,
    footprint: i64,
) -> bool {
    if !single_copy_serves(coll) {
        return false;
    }
    match coll {
        // (as in `shm_wins`: beyond the slot too)
        _ if oversubscribed && tun.params.waits_yield() => {
            spec_of(coll).sized && !native_trusted(coll)
        }
        _ if oversubscribed => spec_of(coll).sized,
        Coll::Allreduce => footprint as f64 >= tun.params.single_reduce,
        Coll::Reduce => footprint as f64 >= tun.params.single_root,
        // (measured against the library's own `I*` calls: set where they won)
        Coll::Bcast
        | Coll::Gather
        | Coll::Scatter
        | Coll::Allgather
        | Coll::Allgatherv
        | Coll::Alltoall
            if form == Form::Nonblocking && (footprint as f64) < tun.params.single_nb_move =>
        {
            false
        }
        // no size every rank knows (only the root, or each pair, knows the blocks): taken
        // where forced
        _ if !spec_of(coll).sized => false,
        _ => true,
    }
}

/// Whether a tuning measured on this machine with the segment's algorithms among its
/// candidates (`shm_rows`, written by `scripts/tools/shim-tune`) named the segment for a
/// blocking call at this point (`bytes` as [`choose`] decides by); `None` where it has no
/// row for it, or its rows predate single copy (the shipped ones) and this one does not
/// name the segment (a shipped row that does was set from IMB runs against the library):
/// then [`shm_wins`] and [`single_copy_wins`] rule.
/// Those rules were measured on one kind of machine; a machine where reading another
/// process's memory is slow (README, "The node transport") needs its own rows. The rows are
/// the same on every rank (checked at init), so all ranks decide alike.
///
/// On a communicator spanning `nodes` nodes, rows measured across as many (where `shm`
/// names the two-level algorithm, `algo::hier`) decide whether the two-level algorithm
/// runs; `None` where there are none ([`hier_wins`] rules).
pub fn segment_measured(coll: Coll, p: i32, nodes: i32, bytes: i64) -> Option<bool> {
    segment_measured_with(&tuning::get(), coll, p, nodes, bytes)
}

fn segment_measured_with(
    tun: &tuning::Tuning,
    coll: Coll,
    p: i32,
    nodes: i32,
    bytes: i64,
) -> Option<bool> {
    // (the v and w forms have no size every rank knows: their rules stand; rows across
    // nodes were all measured with the segment among the candidates)
    if !spec_of(coll).sized || crate::platform::proc::any_oversubscribed() {
        return None;
    }
    let row = tun.measured(coll, p, nodes.max(1), bucket_floor(bucket(bytes)));
    if tun.params.shm_rows == 0.0 && nodes <= 1 {
        // rows measured without the segment say nothing of it; one that names it was
        // measured against the library's own (set by hand from IMB: Intel MPI's)
        return row.filter(|&a| a == Algo::Shm).map(|_| true);
    }
    row.map(|a| a == Algo::Shm)
}

/// The largest footprint [`hier_wins`] takes: the largest size measured to win.
pub const HIER_MAX_BYTES: i64 = 4096;

/// The largest footprint [`hier_wins`] takes where every rank is alone on its node.
pub const HIER_ALONE_MAX_BYTES: i64 = 1024;

/// The largest footprint of an Allreduce, Reduce_scatter_block or Scatter that
/// [`hier_oversubscribed_wins`] takes: the largest size measured to win there.
pub const HIER_OVERSUB_MAX_BYTES: i64 = 16384;

/// The largest footprint of a Gather that [`hier_oversubscribed_wins`] takes (its 16 KiB
/// point lost there).
pub const HIER_OVERSUB_GATHER_MAX_BYTES: i64 = 4096;

/// The largest block [`hier_oversubscribed_wins`] takes where the library's waits yield: the
/// largest size measured.
pub const HIER_OVERSUB_YIELD_MAX_BYTES: i64 = 1 << 20;

/// The parameters a forced or automatic choice runs with.
fn params(coll: Coll, f: &Forced) -> (u32, i64) {
    let s = spec_of(coll);
    let k = f.k.or(s.k.map(|p| p.default)).unwrap_or(0) as u32;
    let seg = f.seg.or(s.segment.map(|p| p.default)).unwrap_or(0);
    (k, seg)
}

/// How the collective was called, as far as selection cares.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Form {
    /// Blocking: pick the fastest.
    Blocking,
    /// `I*`: pick the lowest CPU overhead.
    Nonblocking,
    /// `*_init`: as non-blocking, and never the system MPI's (its persistent collectives
    /// cannot be restarted reliably, see the README).
    Persistent,
}

/// Size bucket of a decision: two per power of two from 2 bytes on (boundaries at 2^n
/// and 1.5 * 2^n), so a decision is made once per bucket at its lower edge.
pub fn bucket(bytes: i64) -> u32 {
    if bytes <= 0 {
        return 0;
    }
    let b = bytes as u64;
    let lg = 63 - b.leading_zeros();
    if lg == 0 {
        return 1;
    }
    2 * lg + ((b >> (lg - 1)) & 1) as u32
}

/// The smallest size in a bucket.
pub fn bucket_floor(bucket: u32) -> i64 {
    if bucket <= 1 {
        return bucket as i64;
    }
    let base = 1i64 << (bucket / 2);
    if bucket % 2 == 1 {
        base + base / 2
    } else {
        base
    }
}

const BUCKETS: usize = 128;

/// Automatic decisions per communicator size, cached: index (coll, form, commutative,
/// native allowed, bucket), value `Choice::pack() + 1` (0 = not decided yet).
type Table = &'static [AtomicU32];
const TABLE_LEN: usize = Coll::COUNT * 3 * 2 * 2 * BUCKETS;
/// Decision tables per communicator size and number of nodes: a direct slot for small
/// sizes on one node (one atomic load on the per-call path, which the native path's
/// overhead budget needs), a map beyond. Tables live for the whole run (a few KiB per
/// communicator size and node count ever seen).
const DIRECT: usize = 1024;
static SMALL: [OnceLock<Table>; DIRECT] = [const { OnceLock::new() }; DIRECT];
static DECISIONS: LazyLock<RwLock<HashMap<(i32, i32), Table>>> = LazyLock::new(Default::default);

fn new_table() -> Table {
    Box::leak((0..TABLE_LEN).map(|_| AtomicU32::new(0)).collect())
}

fn clear_decisions() {
    crate::platform::memo::invalidate();
    let clear = |t: &Table| t.iter().for_each(|x| x.store(0, Ordering::Relaxed));
    SMALL.iter().filter_map(OnceLock::get).for_each(clear);
    DECISIONS
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .values()
        .for_each(clear);
}

/// Forgets cached automatic decisions (after new tuning data is installed).
pub fn reset() {
    clear_decisions();
}

fn table(p: i32, nodes: i32) -> Table {
    if nodes <= 1 && (p as usize) < DIRECT {
        return SMALL[p as usize].get_or_init(new_table);
    }
    let key = (p, nodes.max(1));
    if let Some(t) = DECISIONS
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .get(&key)
    {
        return t;
    }
    let mut w = DECISIONS.write().unwrap_or_else(|e| e.into_inner());
    w.entry(key).or_insert_with(new_table)
}

/// Whether the system MPI's own implementation of a collective can be trusted with any
/// call. Debian's MPICH 4.0.2 gets `MPI_Reduce_scatter_block` wrong in all its forms:
/// `MPI_MAX` on `MPI_UNSIGNED` compares as signed, user operations on derived datatypes
/// combine the wrong elements, and some calls crash (README, "Problems of the system MPI";
/// `ctests/conform/coll_matrix.c` finds them), so `auto` never hands it that collective.
fn native_trusted(coll: Coll) -> bool {
    coll != Coll::ReduceScatterBlock
}

/// Whether the system MPI can be trusted with a rooted call, from what every rank knows
/// (the root, the bytes of one block or of the whole reduction), so that all ranks decide
/// alike. MPICH (4.0.2 and 5.0.2, and what is built on it) fails rooted calls whose root is
/// not rank 0 (README, "Problems of the system MPI"): Gather and Scatter of a datatype with
/// holes report "message truncated" once a message of its binomial tree carries about 8 KB,
/// and an in-place Reduce segfaults above 2048 bytes. Whether a datatype has holes, or the
/// root passes `MPI_IN_PLACE`, is not known at every rank, so no such call goes to the
/// library from a little below those sizes. Open MPI gets them right.
pub fn rooted_native_ok(coll: Coll, p: i32, root: i32, bytes: i64) -> bool {
    if cfg!(feature = "abi-ompi") || root == 0 {
        return true;
    }
    match coll {
        // the largest message of the tree carries up to half the blocks
        Coll::Gather | Coll::Scatter => bytes.saturating_mul(i64::from(p.max(2)) / 2) < 4096,
        Coll::Reduce => bytes <= 1024,
        _ => true,
    }
}

/// Whether the system MPI can be trusted with an in-place Alltoall, Alltoallv or Alltoallw
/// (`MPI_IN_PLACE` is passed at every rank or none, MPI-4.0 §6.8, so all ranks decide
/// alike). MPICH exchanges the blocks with `MPI_Sendrecv_replace`, which truncates a padded
/// derived datatype's messages from about 12 KB, and its in-place `MPI_Ialltoallw` moves the
/// wrong bytes of derived datatypes (README, "Problems of the system MPI"); the datatypes are
/// not known at every rank, so no in-place exchange goes to it. Open MPI gets them right.
pub fn in_place_native_ok(inplace: bool) -> bool {
    cfg!(feature = "abi-ompi") || !inplace
}

/// Whether `auto` hands a blocking Allreduce or Reduce of a user operation on a datatype
/// with holes (`bytes` of data) to the library before any path of the shim's is weighed:
/// up to 32 KiB, where MPICH's own was measured faster than each of them at 2 ranks (the
/// staged single copy and the point-to-point schedules 1.3-2.5 times slower, copy-in-copy-out
/// through the slots, which packs and unpacks each operand, 1.1-2 times; README, "The node
/// transport"). Every rank passes the same datatype and operation (MPI-4.0 §6.9.1), so all
/// decide alike.
pub fn holey_user_reduction_native(coll: Coll, form: Form, p: i32, bytes: i64) -> bool {
    matches!(coll, Coll::Allreduce | Coll::Reduce)
        && form == Form::Blocking
        && bytes <= 32 << 10
        && forced(coll).algo == Algo::Auto
        && native_allowed(&tuning::get(), form, p)
}

/// The path a forced `native`'s fallback schedule counts under (`SHIM_STATS`,
/// `shim_function_paths`): the algorithm's name with the reason, interned (one string
/// per algorithm name for the whole run).
pub fn fallback_name(algorithm: &'static str) -> &'static str {
    static NAMES: Mutex<Vec<(&'static str, &'static str)>> = Mutex::new(Vec::new());
    let mut g = NAMES.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(&(_, n)) = g.iter().find(|(a, _)| *a == algorithm) {
        return n;
    }
    let n: &'static str = Box::leak(
        format!("{algorithm} (native: the system MPI gets this call wrong)").into_boxed_str(),
    );
    g.push((algorithm, n));
    n
}

/// The path a forced `shm` that cannot run counts under: the schedule's name with the
/// reason, interned like [`fallback_name`].
pub fn shm_fallback_name(algorithm: &'static str) -> &'static str {
    static NAMES: Mutex<Vec<(&'static str, &'static str)>> = Mutex::new(Vec::new());
    let mut g = NAMES.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(&(_, n)) = g.iter().find(|(a, _)| *a == algorithm) {
        return n;
    }
    let n: &'static str = Box::leak(
        format!("{algorithm} (shm: no node segment or the data exceeds a slot)").into_boxed_str(),
    );
    g.push((algorithm, n));
    n
}

/// The algorithm to run for one call on `p` ranks on `nodes` nodes. `bytes` must be a size
/// every rank agrees on (see the module docs); it is ignored for collectives that are not
/// `sized`. `native_ok` is
/// false when the call is one the system MPI is known to get wrong (a hook's test of its
/// arguments, which every rank decides alike): then neither `auto` nor a forced `native`
/// hands it to the system MPI. A forced `native` then runs the best schedule instead
/// (`Choice::fallback`), as it does for a persistent call (the system MPI's persistent
/// collectives cannot all be restarted).
pub fn choose(
    coll: Coll,
    form: Form,
    p: i32,
    nodes: i32,
    bytes: i64,
    commutative: bool,
    native_ok: bool,
) -> Choice {
    let native_ok = native_ok && native_trusted(coll);
    let mut f = forced(coll);
    let mut native_ok = native_ok;
    if f.algo == Algo::Shm {
        // the shared-memory path is decided by the caller (`shm_allowed`); where it does
        // not apply, the automatic choice among the shim's schedules (named as a fallback,
        // `shm_fallback_name`)
        f.algo = Algo::Auto;
        native_ok = false;
    }
    let (k, seg) = params(coll, &f);
    let fallback = f.algo == Algo::Native && (!native_ok || form == Form::Persistent);
    if f.algo != Algo::Auto && !fallback {
        return Choice {
            algo: f.algo,
            k,
            seg,
            fallback: false,
        };
    }
    let spec = spec_of(coll);
    let bytes = if spec.sized_at(p) { bytes } else { 0 };
    let bk = bucket(bytes) as usize;
    let form_i = match form {
        Form::Blocking => 0,
        Form::Nonblocking => 1,
        Form::Persistent => 2,
    };
    let idx = ((((coll as usize - 1) * 3 + form_i) * 2 + commutative as usize) * 2
        + native_ok as usize)
        * BUCKETS
        + bk.min(BUCKETS - 1);
    let t = table(p, nodes);
    let v = t[idx].load(Ordering::Relaxed);
    let algo = if v != 0 {
        Algo::from_u8((v - 1) as u8)
    } else {
        let a = decide(
            coll,
            form,
            p,
            nodes,
            bucket_floor(bk as u32),
            commutative,
            k,
            seg,
            native_ok,
        );
        t[idx].store(a as u32 + 1, Ordering::Relaxed);
        a
    };
    Choice {
        algo,
        k,
        seg,
        fallback,
    }
}

/// The automatic decision: a measured winner from the tuning data when there is one for
/// this collective, communicator size, number of nodes and size, else the cost model's.
#[allow(clippy::too_many_arguments)]
pub fn decide(
    coll: Coll,
    form: Form,
    p: i32,
    nodes: i32,
    bytes: i64,
    commutative: bool,
    k: u32,
    seg: i64,
    native_ok: bool,
) -> Algo {
    decide_with(
        &tuning::get(),
        coll,
        form,
        p,
        nodes,
        bytes,
        commutative,
        k,
        seg,
        native_ok,
    )
}

/// [`decide`] with the given tuning data.
#[allow(clippy::too_many_arguments)]
fn decide_with(
    tun: &tuning::Tuning,
    coll: Coll,
    form: Form,
    p: i32,
    nodes: i32,
    bytes: i64,
    commutative: bool,
    k: u32,
    seg: i64,
    native_ok: bool,
) -> Algo {
    let spec = spec_of(coll);
    let native_ok = native_ok && native_trusted(coll) && native_allowed(tun, form, p);
    if form == Form::Blocking && tun.native_only && native_ok {
        // no data describes this library: its own collective, not the model's guess
        return Algo::Native;
    }
    if form == Form::Blocking
        && native_ok
        && bytes == 0
        && spec.sized_at(p)
        && coll != Coll::Barrier
    {
        // nothing to move: the library's zero-byte path beats any schedule (IMB at 2 ranks,
        // MPICH 5: 0.04 µs for a 0-byte Alltoall, 0.57 for the shim's pairwise schedule)
        return Algo::Native;
    }
    let nodes = nodes.max(1);
    if form == Form::Blocking
        && native_ok
        && (tun.rows() > 0 || nodes > 1)
        && !tun.covers(coll, p, nodes)
    {
        // measured, but not at this communicator size: the rows cannot be carried over (the
        // 2-rank data, taken to 4-16 ranks on 16 cores, made the shim 1.64-1.72x slower than
        // MPICH 5, whose collectives switch to shared-memory algorithms there), and the model
        // knows only MPICH 4.0's point-to-point algorithms; the library's own cannot be slower
        // than itself. Nor across nodes, where no row was measured across as many: one
        // node's winners lost to MPICH's own by 1.1-1.7x at 2 KiB-32 KiB between two nodes
        // (README, "An emulated cluster": "Which measurements decide across nodes"), the
        // library's protocols switching at other sizes on its network than on shared memory.
        return Algo::Native;
    }
    // rows measured across these nodes where there are any; else (the system MPI not
    // allowed) one node's, the best guess there is
    let rows_nodes = if tun.covers(coll, p, nodes) { nodes } else { 1 };
    if form == Form::Blocking {
        if let Some(a) = tun.measured(coll, p, rows_nodes, bytes) {
            if a == Algo::Shm && native_ok {
                // the segment won, but it does not serve this call (it was decided before,
                // `Ctx::shm_decide`: not set up yet, or not allowed): the row says nothing
                // of the rest, and the model knows MPICH 4.0's point-to-point algorithms on
                // one node only (across nodes, a Reduce_scatter taken to it at 2 x 1,
                // 64 KiB: 1.66-1.73 of MPICH's time)
                return Algo::Native;
            }
            let a = model::runs_as(coll, a, p, commutative, k);
            if spec.algos.contains(&a)
                && (a != Algo::Native || native_ok)
                && model::applicable(coll, a, p, commutative, k)
            {
                return a;
            }
        }
    }
    let mut best: Option<(f64, f64, Algo)> = None;
    for &a in spec.algos {
        if a == Algo::Native && !native_ok {
            continue;
        }
        if !model::applicable(coll, a, p, commutative, k) {
            continue;
        }
        let c = model::cost(
            &tun.params,
            coll,
            a,
            p,
            bytes,
            k,
            seg,
            form != Form::Blocking,
        );
        let key = if form == Form::Blocking {
            (c.time, c.cpu)
        } else {
            (c.cpu, c.time)
        };
        if best.is_none_or(|b| key.0 < b.0 || (key.0 == b.0 && key.1 < b.1)) {
            best = Some((key.0, key.1, a));
        }
    }
    match best {
        Some(b) => b.2,
        // every collective has a schedule that applies everywhere after `native`
        None if native_ok => Algo::Native,
        None => spec.algos[1],
    }
}

/// May `auto` hand this call to the system MPI? Not for persistent calls (the system
/// MPI's cannot be restarted), not on one process (a schedule is a local copy, and MPICH
/// 4.0's own Alltoallv/w on one process hang while a wildcard receive is pending on the
/// communicator; README, "system MPI bugs"), and not when a node of the job is
/// oversubscribed under a library whose waits spin without yielding there (both MPICH:
/// a collective took a scheduler's time slice, 10 ms, at 4 ranks on 2 cores; the tuning's
/// `oversub_yield`; see `proc::oversubscribed`): asked of the whole job, so that every
/// rank of a communicator answers alike. Nor, under Open MPI,
/// for non-blocking calls: libnbc segfaults in `MPI_Wait` when the program has freed the
/// communicator meanwhile (4.1.4 and 5.0.11; README, "Problems of the system MPI"), which
/// MPI-4.1 §7.4.3 allows (the free only marks it), while the shim's schedules hold their
/// communicator until they complete.
fn native_allowed(tun: &tuning::Tuning, form: Form, p: i32) -> bool {
    native_allowed_with(tun, crate::platform::proc::any_oversubscribed(), form, p)
}

/// [`native_allowed`] with whether a node of the job is oversubscribed.
fn native_allowed_with(tun: &tuning::Tuning, oversubscribed: bool, form: Form, p: i32) -> bool {
    form != Form::Persistent
        && !(cfg!(feature = "abi-ompi") && form == Form::Nonblocking)
        && p > 1
        && (tun.params.waits_yield() || !oversubscribed)
}

/// The decision table (what `auto` picks) for the given communicator sizes, as text.
pub fn decision_table(sizes: &[i32], form: Form, commutative: bool) -> String {
    let mut s = String::new();
    let tun = tuning::get();
    s.push_str(&format!(
        "# libshim auto decisions ({} calls, {} operation), parameters: {}\n",
        match form {
            Form::Blocking => "blocking",
            Form::Nonblocking => "non-blocking",
            Form::Persistent => "persistent",
        },
        if commutative {
            "commutative"
        } else {
            "non-commutative"
        },
        tun.params.describe()
    ));
    s.push_str(&format!("# tuning: {}\n", tun.source));
    for spec in COLLS.iter() {
        for &p in sizes {
            let f = forced(spec.coll);
            let (k, seg) = params(spec.coll, &f);
            let mut ranges: Vec<(i64, Algo)> = Vec::new();
            let top = if spec.sized_at(p) { bucket(4 << 30) } else { 0 };
            for b in 0..=top {
                let lo = bucket_floor(b);
                let a = if f.algo != Algo::Auto {
                    f.algo
                } else {
                    decide(spec.coll, form, p, 1, lo, commutative, k, seg, true)
                };
                if ranges.last().is_none_or(|r| r.1 != a) {
                    ranges.push((lo, a));
                }
            }
            let parts: Vec<String> = ranges
                .iter()
                .enumerate()
                .map(|(i, (lo, a))| {
                    if !spec.sized_at(p) {
                        format!("any size: {}", a.name())
                    } else {
                        let hi = ranges.get(i + 1).map(|r| r.0);
                        match hi {
                            Some(h) => {
                                format!("{}..{}: {}", fmt_bytes(*lo), fmt_bytes(h - 1), a.name())
                            }
                            None => format!(">={}: {}", fmt_bytes(*lo), a.name()),
                        }
                    }
                })
                .collect();
            s.push_str(&format!(
                "{:<26} P={:<5} {}{}\n",
                spec.mpi,
                p,
                parts.join(", "),
                if f.algo != Algo::Auto {
                    "  (forced)"
                } else {
                    ""
                }
            ));
        }
    }
    s
}

/// 1536 -> "1.5K", 65536 -> "64K".
pub fn fmt_bytes(b: i64) -> String {
    let units = [("G", 1i64 << 30), ("M", 1 << 20), ("K", 1 << 10)];
    for (u, v) in units {
        if b >= v {
            let x = b as f64 / v as f64;
            return if (x - x.round()).abs() < 1e-9 {
                format!("{}{u}", x.round() as i64)
            } else {
                format!("{x:.1}{u}")
            };
        }
    }
    format!("{b}")
}

#[cfg(test)]
mod tests {
    #[test]
    fn rooted_calls_the_library_fails_never_reach_it() {
        // (collective, ranks, root, bytes, the MPICH-ABI answer): the sizes where MPICH was
        // seen to fail (README, "Problems of the system MPI") and a margin below them
        let cases: &[(Coll, i32, i32, i64, bool)] = &[
            (Coll::Scatter, 2, 1, 9600, false), // 800 MPI_DOUBLE_INT failed
            (Coll::Scatter, 2, 1, 4095, true),
            (Coll::Scatter, 2, 1, 4096, false),
            (Coll::Gather, 4, 3, 4800, false), // 400 per rank, two per message, failed
            (Coll::Gather, 4, 3, 2047, true),
            (Coll::Gather, 8, 5, 1024, false),
            (Coll::Gather, 4, 0, 1 << 20, true), // root 0 is right
            (Coll::Reduce, 2, 1, 2056, false),   // 257 doubles in place segfaulted
            (Coll::Reduce, 3, 2, 1024, true),
            (Coll::Reduce, 3, 2, 1032, false),
            (Coll::Reduce, 3, 0, 1 << 20, true),
            (Coll::Gatherv, 4, 3, 1 << 20, true),
            (Coll::Bcast, 4, 3, 1 << 20, true),
        ];
        for &(c, p, root, bytes, mpich) in cases {
            let want = mpich || cfg!(feature = "abi-ompi");
            assert_eq!(
                rooted_native_ok(c, p, root, bytes),
                want,
                "{c:?} p={p} root={root} {bytes} B"
            );
        }
        assert!(in_place_native_ok(false));
        assert_eq!(in_place_native_ok(true), cfg!(feature = "abi-ompi"));
    }

    #[test]
    fn holey_user_reductions_go_to_the_library_where_it_was_faster() {
        let cases: &[(Coll, Form, i32, i64, bool)] = &[
            (Coll::Allreduce, Form::Blocking, 2, 8192, true),
            (Coll::Reduce, Form::Blocking, 4, 32 << 10, true),
            (Coll::Allreduce, Form::Blocking, 2, (32 << 10) + 8, false), // measured slower
            (Coll::Allreduce, Form::Nonblocking, 2, 8192, false),        // not measured
            (Coll::Allreduce, Form::Persistent, 2, 8192, false),         // cannot restart
            (Coll::Scan, Form::Blocking, 2, 8192, false),                // the shim's won
            (Coll::Allreduce, Form::Blocking, 1, 8192, false),           // one process
        ];
        for &(c, f, p, bytes, want) in cases {
            assert_eq!(
                holey_user_reduction_native(c, f, p, bytes),
                want,
                "{c:?} {f:?} p={p} {bytes} B"
            );
        }
    }

    #[test]
    fn rows_measured_with_the_segment_decide_where_they_exist() {
        let parse = |text: &str| tuning::Tuning::parse(text, "test", &Default::default()).unwrap();
        let measured = parse(
            "param shm_rows 1\nbest MPI_Gather 2 8 shm\nbest MPI_Gather 2 32768 native\n\
             best MPI_Gatherv 2 8 shm\n",
        );
        let cases: &[(Coll, i32, i64, Option<bool>, &str)] = &[
            (Coll::Gather, 2, 8, Some(true), "the row names the segment"),
            (
                Coll::Gather,
                2,
                32768,
                Some(false),
                "beyond the slot, the library",
            ),
            (
                Coll::Gather,
                2,
                65536,
                Some(false),
                "within a factor of two of a row",
            ),
            (Coll::Gather, 2, 1 << 20, None, "no row near: the rules"),
            (Coll::Gather, 4, 8, None, "another communicator size"),
            (Coll::Bcast, 2, 8, None, "no row for the collective"),
            (Coll::Gatherv, 2, 8, None, "no size every rank knows"),
        ];
        for &(c, p, bytes, want, why) in cases {
            assert_eq!(
                segment_measured_with(&measured, c, p, 1, bytes),
                want,
                "{why}"
            );
        }
        // the shipped rows predate single copy: the rules decide, except where a row names
        // the segment (set by hand from IMB against the library)
        let shipped = parse("best MPI_Gather 2 32768 native\nbest MPI_Reduce 2 2048 shm\n");
        assert_eq!(
            segment_measured_with(&shipped, Coll::Gather, 2, 1, 32768),
            None
        );
        assert_eq!(
            segment_measured_with(&shipped, Coll::Reduce, 2, 1, 4096),
            Some(true)
        );
        assert_eq!(
            segment_measured_with(&shipped, Coll::Reduce, 2, 1, 64),
            None
        );
    }

    /// A row naming the segment for a call the segment does not take (not set up yet, or
    /// `SHIM_TRANSPORT=pmpi`) hands it to the library, which the row was measured against,
    /// not to the model's guess.
    #[test]
    fn a_segment_row_for_a_call_off_the_segment_goes_to_the_library() {
        let tun = tuning::Tuning::parse(
            // (a library the model finds slow: its guess would be a schedule of the shim's)
            "param o_native 1e3\nparam native_call 1e3\n\
             best MPI_Reduce 2 2048 shm\nbest MPI_Reduce 2 8192 shm\n",
            "test",
            &Default::default(),
        )
        .unwrap();
        for bytes in [2048, 4096, 16384] {
            let a = decide_with(
                &tun,
                Coll::Reduce,
                Form::Blocking,
                2,
                1,
                bytes,
                true,
                2,
                0,
                true,
            );
            assert_eq!(a, Algo::Native, "{bytes} bytes");
        }
    }

    #[test]
    fn every_shm_choice_has_an_algorithm_on_the_segment() {
        // a collective that accepts `shm` runs copy-in-copy-out, single copy or both, and
        // those with no size every rank knows decide without one: single copy only, never
        // by `auto`
        for spec in super::COLLS.iter() {
            let c = spec.coll;
            let shm = spec.algos.contains(&super::Algo::Shm);
            if super::single_copy_serves(c) || shm && !super::copy_in_out_serves(c) {
                assert!(shm && super::single_copy_serves(c), "{}", spec.mpi);
            }
            if shm && !spec.sized {
                assert!(!super::copy_in_out_serves(c), "{}", spec.mpi);
                assert!(
                    !super::single_copy_wins(c, Form::Blocking, 2, i64::MAX),
                    "{}",
                    spec.mpi
                );
            }
        }
    }

    use super::*;

    #[test]
    fn native_is_never_chosen_for_calls_the_system_mpi_gets_wrong() {
        // the configuration's defaults: every collective automatic
        for spec in COLLS.iter() {
            for form in [Form::Blocking, Form::Nonblocking, Form::Persistent] {
                for bytes in [0, 8, 1 << 16, 1 << 22] {
                    let ch = choose(spec.coll, form, 4, 1, bytes, true, false);
                    assert_ne!(ch.algo, Algo::Native, "{} {form:?} {bytes}", spec.mpi);
                }
            }
            let any = (0..40).any(|b| {
                choose(spec.coll, Form::Blocking, 4, 1, bucket_floor(b), true, true).algo
                    == Algo::Native
            });
            if spec.coll == Coll::ReduceScatterBlock {
                assert!(!any, "MPI_Reduce_scatter_block must never go native");
            }
        }
    }

    #[test]
    fn blocking_calls_without_data_go_to_the_library() {
        // MPICH 5's shipped rows (2 ranks) name the shim's pairwise Alltoall for 8 bytes,
        // which a 0-byte call took before (0.57 µs against the library's 0.04)
        let tun = tuning::for_library("MPICH Version:      5.0.2\nMPICH Release date: x");
        assert!(tun.covers(Coll::Alltoall, 2, 1));
        for spec in COLLS.iter() {
            let c = spec.coll;
            for p in [2, 3, 4] {
                if !spec.sized_at(p) || c == Coll::Barrier || !native_trusted(c) {
                    continue;
                }
                let got = decide_with(&tun, c, Form::Blocking, p, 1, 0, true, 2, 0, true);
                assert_eq!(got, Algo::Native, "{} at {p} ranks", spec.mpi);
            }
        }
    }

    #[test]
    fn auto_takes_the_segment_only_where_it_was_measured_to_win() {
        // (collective, ranks, slot bytes) -> whether SHIM_TRANSPORT=auto uses the segment
        // (up to the library's measured limit: here the built-in tuning's)
        let max = tuning::get().params.shm_reduce_max as i64;
        let cases = [
            (Coll::Allreduce, 2, 8, true),
            (Coll::Allreduce, 16, max, true),
            (Coll::Allreduce, 2, max + 1, false),
            // the data movers up to 1 KiB from 3 ranks, on 2 up to the library's limit
            (Coll::Bcast, 3, AUTO_SHM_MAX_BYTES, true),
            (Coll::Bcast, 3, AUTO_SHM_MAX_BYTES + 1, false),
            (Coll::Gather, 16, AUTO_SHM_MAX_BYTES + 1, false),
            (Coll::Barrier, 16, 0, true),
            (Coll::Bcast, 16, 8, true),
            (Coll::Alltoall, 8, 8, true),
        ];
        for (c, p, bytes, want) in cases {
            assert_eq!(
                shm_wins(c, Form::Blocking, p, bytes),
                want,
                "{c:?} at {p} ranks, {bytes} B"
            );
        }
    }

    #[test]
    fn auto_takes_the_data_movers_on_two_ranks_up_to_each_librarys_limit() {
        // (library version line, the most bytes a Bcast, Gather, Scatter, Allgather or
        // Alltoall at 2 ranks takes to the segment)
        let table = [
            ("MPICH Version:\t4.0.2\n", 16384),
            ("MPICH Version:      5.0.2\n", 16384),
            ("Intel(R) MPI Library 2021.19.0 for Linux* OS\n", 1024),
            ("Open MPI v4.1.4, package: Debian OpenMPI", 1024),
            ("Open MPI v5.0.11, package: Open MPI", 1024),
        ];
        let movers = [
            Coll::Bcast,
            Coll::Gather,
            Coll::Scatter,
            Coll::Allgather,
            Coll::Alltoall,
        ];
        for (version, max) in table {
            let tun = tuning::for_library(version);
            for c in movers {
                assert!(
                    shm_wins_with(&tun, false, c, Form::Blocking, 2, max),
                    "{c:?} {max} B under {version}"
                );
                assert!(
                    !shm_wins_with(&tun, false, c, Form::Blocking, 2, max + 1),
                    "{c:?} {max}+1 B under {version}"
                );
                // from 3 ranks the library's own limit does not apply
                assert_eq!(
                    shm_wins_with(&tun, false, c, Form::Blocking, 3, max),
                    max <= AUTO_SHM_MAX_BYTES,
                    "{c:?} at 3 ranks under {version}"
                );
            }
        }
    }

    /// Where the library's own is not the other choice, the segment competes with the shim's
    /// point-to-point schedules only and takes every size up to the slot: a persistent call
    /// under every library, an `I*` call under Open MPI (its libnbc is never handed one);
    /// but Allreduce under Intel MPI, whose point-to-point makes recursive doubling faster
    /// from 2 KiB.
    /// An `I*` call on two ranks where it is: up to the library's `shm_nb_max` where that is
    /// more than the blocking form's limit (Intel MPI: the slot, its non-blocking
    /// collectives being slower than its blocking ones; README, "The node transport").
    #[test]
    fn auto_weighs_the_segment_against_what_the_call_may_be_handed() {
        // (library version line, the most bytes an I* Bcast at 2 ranks takes to the
        // segment where the library may be handed it, and a blocking one)
        let libraries = [
            ("MPICH Version:\t4.0.2\n", 16384, 16384),
            ("MPICH Version:      5.0.2\n", 16384, 16384),
            (
                "Intel(R) MPI Library 2021.19.0 for Linux* OS\n",
                16384,
                1024,
            ),
            ("Open MPI v4.1.4, package: Debian OpenMPI", 1024, 1024),
            ("Open MPI v5.0.11, package: Open MPI", 1024, 1024),
        ];
        let ompi = cfg!(feature = "abi-ompi");
        for (version, nb_max, max) in libraries {
            let tun = tuning::for_library(version);
            let intel = version.starts_with("Intel");
            for spec in COLLS.iter() {
                let c = spec.coll;
                if !spec.algos.contains(&Algo::Shm) {
                    continue;
                }
                for p in [2, 3, 5] {
                    assert_eq!(
                        shm_wins_with(&tun, false, c, Form::Persistent, p, 16384),
                        !(intel && c == Coll::Allreduce),
                        "persistent {} at {p} under {version}",
                        spec.mpi
                    );
                }
            }
            let nb = |bytes| shm_wins_with(&tun, false, Coll::Bcast, Form::Nonblocking, 2, bytes);
            let nb_max = if ompi { i64::MAX } else { nb_max };
            assert!(nb(nb_max.min(16384)), "Ibcast {nb_max} B under {version}");
            assert_eq!(nb(nb_max.saturating_add(1).min(16385)), ompi, "{version}");
            let b = |bytes| shm_wins_with(&tun, false, Coll::Bcast, Form::Blocking, 2, bytes);
            assert!(b(max) && !b(max + 1), "Bcast {max} B under {version}");
            // from 3 ranks an I* call where the library may be handed it has the blocking
            // form's limit
            assert_eq!(
                shm_wins_with(&tun, false, Coll::Bcast, Form::Nonblocking, 3, 16384),
                ompi,
                "Ibcast at 3 ranks under {version}"
            );
        }
    }

    /// On an oversubscribed node the segment's waits give the core up at once. Under a
    /// library whose own waits spin there (both MPICH) it beat the point-to-point path (the
    /// library's own is not allowed) at every size: every collective with a size all ranks
    /// know takes it, through the slots or with one copy, whatever the tuning. Under one
    /// whose waits yield (Intel MPI, Open MPI) the library's own won below its
    /// `oversub_shm_min` (Intel MPI: everywhere) and beyond the slot: only what it is never
    /// handed takes the segment there (README, "The node transport").
    #[test]
    fn an_oversubscribed_job_takes_the_segment_where_the_library_spins() {
        // (library version line, whether its waits yield on an oversubscribed node, the
        // smallest footprint the segment takes there)
        let libraries = [
            ("MPICH Version:\t4.0.2\n", false, 0),
            ("MPICH Version:      5.0.2\n", false, 0),
            (
                "Intel(R) MPI Library 2021.19.0 for Linux* OS\n",
                true,
                i64::MAX,
            ),
            ("Open MPI v4.1.4, package: Debian OpenMPI", true, 1024),
            ("Open MPI v5.0.11, package: Open MPI", true, 1024),
        ];
        for (version, yields, from) in libraries {
            let tun = tuning::for_library(version);
            assert_eq!(tun.params.waits_yield(), yields, "{version}");
            for spec in COLLS.iter() {
                let c = spec.coll;
                if !spec.algos.contains(&Algo::Shm) {
                    continue;
                }
                let always = !yields || !native_trusted(c);
                for p in 2..=5 {
                    for bytes in [1, 1023, 1024, 16384, 1 << 20] {
                        assert_eq!(
                            shm_wins_with(&tun, true, c, Form::Blocking, p, bytes),
                            always || bytes >= from,
                            "{} {bytes} B at {p} under {version}",
                            spec.mpi
                        );
                    }
                }
                assert_eq!(
                    single_copy_wins_with(&tun, true, c, Form::Blocking, 1 << 20),
                    always && single_copy_serves(c) && spec.sized,
                    "{} under {version}",
                    spec.mpi
                );
            }
            // not oversubscribed, the measured limits stand (from 3 ranks 1 KiB)
            assert!(
                !shm_wins_with(&tun, false, Coll::Bcast, Form::Blocking, 3, 16384),
                "{version}"
            );
        }
    }

    #[test]
    fn an_oversubscribed_job_takes_the_two_level_algorithms_where_they_were_measured_to_win() {
        // (library version line, whether its waits spin on an oversubscribed node, whether
        // the two-level algorithms were measured to beat its own there although they yield)
        let libraries = [
            ("MPICH Version:\t4.0.2\n", true, false),
            ("MPICH Version:      5.0.2\n", true, false),
            (
                "Intel(R) MPI Library 2021.19.0 for Linux* OS\n",
                false,
                true,
            ),
            ("Open MPI v4.1.4, package: Debian OpenMPI", false, false),
        ];
        for (version, spins, beats_own) in libraries {
            let tun = tuning::for_library(version);
            // (collective, form, footprint at 4 ranks, taken where the library spins, taken
            // where the two-level ones beat its own)
            let cases = [
                (Coll::Bcast, Form::Blocking, 4 << 20, true, false),
                (Coll::Bcast, Form::Blocking, 1 << 20, true, true),
                (Coll::Reduce, Form::Blocking, 4, true, true),
                (Coll::Allreduce, Form::Blocking, 16384, true, true),
                (Coll::Allreduce, Form::Blocking, 65536, false, true),
                (Coll::ReduceScatterBlock, Form::Blocking, 16384, true, true),
                (Coll::Scatter, Form::Blocking, 16384, true, true),
                (Coll::Scatter, Form::Blocking, 65536, false, true),
                (Coll::Alltoall, Form::Blocking, 4 << 20, false, true),
                (Coll::Alltoall, Form::Blocking, 8 << 20, false, false),
                (Coll::Gather, Form::Blocking, 4096, true, true),
                (Coll::Gather, Form::Blocking, 16384, false, true),
                (Coll::Allgather, Form::Blocking, 64, false, true),
                (Coll::Alltoall, Form::Blocking, 64, false, true),
                (Coll::Barrier, Form::Blocking, 0, true, true),
                (Coll::Barrier, Form::Nonblocking, 0, false, false),
                (Coll::Bcast, Form::Nonblocking, 64, false, false),
                (Coll::Reduce, Form::Persistent, 64, false, false),
            ];
            for (c, f, bytes, where_spins, where_beaten) in cases {
                let want = if spins {
                    where_spins
                } else {
                    beats_own && where_beaten
                };
                assert_eq!(
                    hier_oversubscribed_wins(&tun, c, f, 4, bytes),
                    want,
                    "{c:?} {f:?} {bytes} B under {version}"
                );
            }
        }
    }

    #[test]
    fn on_machines_of_their_own_the_model_takes_two_levels_where_it_predicts_them_well_ahead() {
        // (collective, form, ranks, nodes, bytes, taken): the tuning's default network is
        // HDR InfiniBand's (model.rs), where the simulator has the two-level Barrier, Bcast,
        // Reduce and Allreduce of 8 B at 2 x 16 at 0.25-0.27 of the flat ones' time
        let cases = [
            (Coll::Bcast, Form::Nonblocking, 32, 2, 8, true),
            (Coll::Reduce, Form::Nonblocking, 32, 2, 8, true),
            (Coll::Allreduce, Form::Persistent, 32, 2, 8, true),
            (Coll::Barrier, Form::Persistent, 32, 2, 0, true),
            (Coll::Bcast, Form::Nonblocking, 256, 2, 8, true),
            // one rank per node: the leaders' schedule is the flat one, plus the copies
            (Coll::Bcast, Form::Nonblocking, 2, 2, 8, false),
            (Coll::Allreduce, Form::Nonblocking, 8, 8, 8, false),
            // large vectors are not modelled (the two-level reductions lose there)
            (Coll::Allreduce, Form::Nonblocking, 32, 2, 65536, false),
            // nor collectives the simulation did not check
            (Coll::Alltoall, Form::Nonblocking, 32, 2, 8, false),
            // a blocking call the library may take: its node-aware algorithms are not modelled
            (Coll::Bcast, Form::Blocking, 32, 2, 8, false),
        ];
        for version in [
            "MPICH Version:\t4.0.2\n",
            "Open MPI v4.1.4, package: Debian OpenMPI",
        ] {
            let tun = tuning::for_library(version);
            for (c, f, p, nodes, bytes, want) in cases {
                assert_eq!(
                    hier_model_wins(&tun, c, f, p, nodes, bytes),
                    want,
                    "{c:?} {f:?} {p} ranks on {nodes} nodes, {bytes} B under {version}"
                );
            }
        }
    }

    #[test]
    fn auto_takes_the_two_level_algorithms_only_where_they_were_measured_to_win() {
        if crate::platform::proc::any_oversubscribed() {
            return;
        }
        let cases = [
            (Coll::Barrier, Form::Blocking, 0, false),
            (Coll::Barrier, Form::Nonblocking, 0, true),
            (Coll::Allreduce, Form::Blocking, 8, false),
            (Coll::Allreduce, Form::Blocking, 64, true),
            (Coll::Allreduce, Form::Blocking, HIER_ALONE_MAX_BYTES, true),
            (
                Coll::Allreduce,
                Form::Blocking,
                HIER_ALONE_MAX_BYTES + 1,
                true,
            ),
            (Coll::Allreduce, Form::Blocking, HIER_MAX_BYTES, true),
            (Coll::Allreduce, Form::Blocking, HIER_MAX_BYTES + 1, false),
            (Coll::Allreduce, Form::Nonblocking, 8, true),
            (Coll::Allreduce, Form::Persistent, HIER_MAX_BYTES + 1, false),
            (Coll::Bcast, Form::Nonblocking, 8, false),
            (Coll::Reduce, Form::Blocking, 4096, false),
        ];
        for (c, f, bytes, want) in cases {
            assert_eq!(hier_wins(c, f, 4, 2, bytes), want, "{c:?} {f:?} {bytes} B");
            assert_eq!(
                hier_wins(c, f, 3, 2, bytes),
                want,
                "{c:?} {f:?} {bytes} B at 2 + 1"
            );
            // one rank per node: the leaders' phase is all there is, up to 1 KiB
            let alone = want && bytes <= HIER_ALONE_MAX_BYTES;
            assert_eq!(
                hier_wins(c, f, 2, 2, bytes),
                alone,
                "{c:?} {f:?} {bytes} B at 1 + 1"
            );
            assert_eq!(
                hier_wins(c, f, 3, 3, bytes),
                alone,
                "{c:?} {f:?} {bytes} B at 1 + 1 + 1"
            );
        }
    }

    #[test]
    fn blocking_calls_at_unmeasured_sizes_go_to_the_library() {
        // the built-in tuning holds rows at 2 processes only
        let tun = tuning::get();
        for spec in COLLS.iter() {
            let c = spec.coll;
            assert!(!tun.covers(c, 16, 1), "{}", spec.mpi);
            for bytes in [8, 4096, 1 << 20] {
                let want = if native_trusted(c) && !crate::platform::proc::any_oversubscribed() {
                    Algo::Native
                } else {
                    decide(c, Form::Blocking, 16, 1, bytes, true, 0, 0, false)
                };
                let got = decide(c, Form::Blocking, 16, 1, bytes, true, 0, 0, true);
                assert_eq!(got, want, "{} {bytes}", spec.mpi);
            }
        }
    }

    #[test]
    fn across_nodes_only_rows_measured_across_as_many_nodes_decide() {
        // one node's rows at 2 processes (the built-in tuning), and rows of 2 ranks on 2
        // nodes for Reduce only
        let mut tun = tuning::defaults();
        tun.add_best(Coll::Reduce, 2, 2, 8192, Algo::Binomial);
        tun.add_best(Coll::Reduce, 2, 2, 32768, Algo::Native);
        tun.add_best(Coll::ReduceScatter, 2, 2, 65536, Algo::Shm);
        let blocking = |c, nodes, bytes, native_ok| {
            decide_with(
                &tun,
                c,
                Form::Blocking,
                2,
                nodes,
                bytes,
                true,
                2,
                0,
                native_ok,
            )
        };
        let free = !crate::platform::proc::any_oversubscribed();
        // (collective, nodes, bytes, the system MPI allowed) -> the decision
        let cases: [(Coll, i32, i64, bool, Option<Algo>); 7] = [
            // no row across 2 nodes: the library's own
            (Coll::Allreduce, 2, 4096, true, Some(Algo::Native)),
            (Coll::Bcast, 2, 8, true, Some(Algo::Native)),
            // not across 3 nodes either, though 2 were measured
            (Coll::Reduce, 3, 8192, true, Some(Algo::Native)),
            // rows across 2 nodes decide there
            (Coll::Reduce, 2, 8192, true, Some(Algo::Binomial)),
            (Coll::Reduce, 2, 32768, true, Some(Algo::Native)),
            // the library not allowed: one node's rows, as on one node
            (Coll::Allreduce, 2, 4096, false, None),
            (Coll::Bcast, 2, 8, false, None),
        ];
        for (c, nodes, bytes, native_ok, want) in cases {
            let want = match want {
                _ if !free => continue,
                Some(a) => a,
                None => blocking(c, 1, bytes, false),
            };
            assert_eq!(
                blocking(c, nodes, bytes, native_ok),
                want,
                "{c:?} on {nodes} nodes, {bytes} B, native {native_ok}"
            );
        }
        // where the two-level algorithm won but did not serve the call: the library's own
        if free {
            assert_eq!(blocking(Coll::ReduceScatter, 2, 65536, true), Algo::Native);
        }
        // a row across nodes naming `shm` takes the two-level algorithm there, without the
        // one-node rows' `shm_rows` mark; one node's rows say nothing across nodes
        tun.add_best(Coll::Allreduce, 2, 2, 131072, Algo::Shm);
        if free {
            assert_eq!(
                segment_measured_with(&tun, Coll::Allreduce, 2, 2, 131072),
                Some(true)
            );
            assert_eq!(
                segment_measured_with(&tun, Coll::Reduce, 2, 2, 32768),
                Some(false)
            );
            assert_eq!(segment_measured_with(&tun, Coll::Allreduce, 2, 2, 8), None);
            assert_eq!(
                segment_measured_with(&tun, Coll::Allreduce, 2, 3, 131072),
                None
            );
        }
        // non-blocking calls are the model's, wherever the ranks are
        let nb = |nodes| {
            decide_with(
                &tun,
                Coll::Allreduce,
                Form::Nonblocking,
                2,
                nodes,
                8,
                true,
                2,
                0,
                true,
            )
        };
        assert_eq!(nb(2), nb(1));
    }

    #[test]
    fn forced_native_falls_back_where_the_system_mpi_is_wrong() {
        let coll = Coll::NeighborAlltoall;
        set_override(coll, Some(Algo::Native));
        let ok = choose(coll, Form::Blocking, 2, 1, 0, true, true);
        assert_eq!((ok.algo, ok.fallback), (Algo::Native, false));
        let wrong = choose(coll, Form::Blocking, 2, 1, 0, true, false);
        assert_eq!((wrong.algo, wrong.fallback), (Algo::SingleRound, true));
        let persistent = choose(coll, Form::Persistent, 2, 1, 0, true, true);
        assert!(persistent.fallback && persistent.algo != Algo::Native);
        set_override(coll, None);
        let name = fallback_name("single-round");
        assert!(name.starts_with("single-round (") && name.ends_with(')'));
        assert!(core::ptr::eq(name, fallback_name("single-round")));
    }

    #[test]
    fn names_round_trip() {
        for &a in ALL_ALGOS {
            assert_eq!(Algo::from_name(a.name()), Some(a));
            assert_eq!(Algo::from_u8(a as u8), a);
        }
        assert_eq!(
            Algo::from_name("Recursive_Doubling"),
            Some(Algo::RecursiveDoubling)
        );
        assert_eq!(Algo::from_name("bogus"), None);
    }

    #[test]
    fn registry_is_indexed_by_coll() {
        for (i, c) in COLLS.iter().enumerate() {
            assert_eq!(c.coll as usize - 1, i);
            assert_eq!(c.algos[0], Algo::Native);
        }
        assert_eq!(find("mpi_allreduce").unwrap().coll, Coll::Allreduce);
        assert_eq!(
            find("REDUCE_SCATTER_BLOCK").unwrap().coll,
            Coll::ReduceScatterBlock
        );
    }

    #[test]
    fn v_forms_are_sized_on_two_processes_only() {
        for c in [
            Coll::Gatherv,
            Coll::Scatterv,
            Coll::Alltoallv,
            Coll::Alltoallw,
        ] {
            let s = spec_of(c);
            assert!(!s.sized && s.sized_at(2) && !s.sized_at(3) && !s.sized_at(1));
        }
        assert!(!spec_of(Coll::NeighborAlltoallv).sized_at(2));
        assert!(spec_of(Coll::Bcast).sized_at(5));
    }

    #[test]
    fn measured_names_map_to_what_runs() {
        use model::runs_as;
        assert_eq!(
            runs_as(Coll::Allgatherv, Algo::KShift, 2, true, 0),
            Algo::Ring
        );
        assert_eq!(
            runs_as(Coll::Allgatherv, Algo::KShift, 4, true, 0),
            Algo::KShift
        );
        assert_eq!(
            runs_as(Coll::Allgather, Algo::Prefix, 3, true, 0),
            Algo::Ring
        );
        assert_eq!(
            runs_as(Coll::Allreduce, Algo::Ring, 4, false, 0),
            Algo::RecursiveDoubling
        );
        assert_eq!(
            runs_as(Coll::Gatherv, Algo::Binomial, 4, true, 0),
            Algo::Linear
        );
        assert_eq!(
            runs_as(Coll::Bcast, Algo::Knomial, 3, true, 0),
            Algo::Knomial
        );
    }

    #[test]
    fn buckets() {
        assert_eq!(bucket(0), 0);
        for b in 1..60 {
            let lo = bucket_floor(b);
            assert_eq!(bucket(lo), b, "bucket {b} floor {lo}");
            assert_eq!(bucket(bucket_floor(b + 1) - 1), b);
        }
        assert_eq!(bucket_floor(bucket(8)), 8);
        assert_eq!(bucket_floor(bucket(1 << 20)), 1 << 20);
        assert_eq!(fmt_bytes(1536), "1.5K");
        assert_eq!(fmt_bytes(4 << 20), "4M");
    }
}

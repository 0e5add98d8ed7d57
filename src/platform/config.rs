//! Layer: platform. May use: nothing.
//!
//! Configuration: every `SHIM_*` environment variable, parsed once at `MPI_Init*` into one
//! typed [`Config`].
//!
//! [`VARS`] is the single table of variables: the parser, the unknown-name warning and the
//! README table (checked by a test, so the documentation cannot drift) all come from it.
//! A bad value is an error naming the variable, the value and what is allowed; the init
//! hook turns it into a clean stop of every rank before any user MPI call runs. An unknown
//! `SHIM_*` name gets a warning naming the closest known one (as UCX warns on unused
//! `UCX_*` variables; design notes, anchors-interposition-style.md §4.1).

use std::fmt;

/// One documented variable.
pub struct VarSpec {
    pub name: &'static str,
    pub default: &'static str,
    pub allowed: &'static str,
    pub doc: &'static str,
}

/// Every variable the shim reads. Keep in the order of the README table.
pub static VARS: &[VarSpec] = &[
    VarSpec {
        name: "SHIM_<COLL>_ALGORITHM",
        default: "auto",
        allowed: "`auto` or an algorithm of that collective (table below); COLL is BARRIER, BCAST, GATHER, GATHERV, SCATTER, SCATTERV, ALLGATHER, ALLGATHERV, ALLTOALL, ALLTOALLV, ALLTOALLW, REDUCE, ALLREDUCE, REDUCE_SCATTER, REDUCE_SCATTER_BLOCK, SCAN, EXSCAN or NEIGHBOR_ALLGATHER(V), NEIGHBOR_ALLTOALL(V,W)",
        doc: "The algorithm of a collective, for all its forms (blocking, `I*`, `*_init`, `_c`); e.g. `SHIM_ALLREDUCE_ALGORITHM=ring`. `native` is the system MPI's own implementation; `auto` lets the cost model and the tuning data choose. An algorithm whose precondition fails for a call (e.g. `prefix` at a size that is not a power of two) runs its documented fallback.",
    },
    VarSpec {
        name: "SHIM_<COLL>_K",
        default: "(per algorithm)",
        allowed: "an integer in the range of the table below",
        doc: "The fan-out parameter of the collectives that have one (BARRIER, BCAST, REDUCE, ALLREDUCE, ALLGATHER, ALLGATHERV; see the table below).",
    },
    VarSpec {
        name: "SHIM_<COLL>_SEGMENT",
        default: "(per algorithm)",
        allowed: "bytes, with an optional K/M/G suffix",
        doc: "The segment size of the pipelined algorithms (BCAST, REDUCE, SCAN, EXSCAN: `pipeline`; ALLREDUCE: `ring`).",
    },
    VarSpec {
        name: "SHIM_CALIBRATE",
        default: "0",
        allowed: "0, 1",
        doc: "1 measures the cost model's parameters (LogGP L, o, g, G; reduction and copy cost per byte; per-call costs) at `MPI_Init`, about a second, instead of using the built-in or `SHIM_TUNING_FILE` ones.",
    },
    VarSpec {
        name: "SHIM_DISABLE",
        default: "0",
        allowed: "0, 1 (also true/false, yes/no, on/off)",
        doc: "1 makes every entry point a pure pass-through to the system MPI: nothing else is read or initialized, except that `MPI_Init` joins the ranks' check that `SHIM_DISABLE`, `SHIM_GHOSTS`, `SHIM_GHOST_*` and `SHIM_RANKS_PER_NODE` agree (one small reduction on `MPI_COMM_WORLD`; a disagreement stops every rank with status 2 instead of a hang).",
    },
    VarSpec {
        name: "SHIM_FAULT_INJECT",
        default: "(none)",
        allowed: "`panic:NAME` with NAME an MPI function, e.g. `panic:MPI_Barrier`",
        doc: "Testing aid: the shim panics inside that function's hook, to check that a panic is caught at the C boundary, logged, and aborts the whole job.",
    },
    VarSpec {
        name: "SHIM_GHOSTS",
        default: "0",
        allowed: "0 to 64 (fewer than the ranks on every node)",
        doc: "Ghost processes per node for asynchronous RMA progress (Casper-style): that many ranks of each node never return from `MPI_Init` and serve the RMA of `MPI_Win_allocate` windows; the application's `MPI_COMM_WORLD` holds the other ranks. Launch N more ranks per node. Any number of windows may be alive; start-up costs one internal window. 0: every RMA call is a plain forward.",
    },
    VarSpec {
        name: "SHIM_GHOST_BALANCE",
        default: "static",
        allowed: "static, random, op, byte",
        doc: "With several ghosts per node: where Put and Get go once the target's lock is known to be held (after a flush, or in a fence epoch): `static`, the target's bound ghost; `random`; `op`, the ghost this origin sent the fewest operations; `byte`, the fewest bytes. Accumulate-type operations always go to the bound ghost.",
    },
    VarSpec {
        name: "SHIM_GHOST_DIRECT",
        default: "on",
        allowed: "on, off (also 1, 0, true, false, yes, no)",
        doc: "On a ghost-served window whose processes all share one node, RMA operations are carried out by the origin itself in the node-shared memory (accumulate-type ones under a per-target lock in that memory), so that neither the target nor a ghost has to act; epochs still go through the ghosts. `off`: every operation goes through a ghost, as on windows spanning several nodes.",
    },
    VarSpec {
        name: "SHIM_GHOST_PLACEMENT",
        default: "last",
        allowed: "first, last, spread",
        doc: "Which ranks of a node become ghosts: the lowest local ranks, the highest, or evenly spread.",
    },
    VarSpec {
        name: "SHIM_LOG",
        default: "warn",
        allowed: "off, error, warn, info, debug, trace, or a comma list of `LEVEL` and `MODULE=LEVEL` items (modules: `shim`, `shim::init`, `shim::coll`, ...)",
        doc: "Log filter for the shim's `tracing` output; every line is prefixed with the rank.",
    },
    VarSpec {
        name: "SHIM_LOG_FILE",
        default: "(stderr)",
        allowed: "a file path; `%r` is replaced by the rank, `%p` by the process id",
        doc: "Where log lines go instead of stderr. Ignored (with a warning) in setuid and setgid programs, like every variable that names a file or a library.",
    },
    VarSpec {
        name: "SHIM_MPI_LIBRARY",
        default: "(search)",
        allowed: "a library name or path for dlopen",
        doc: "The MPI library to load when no loaded object provides `PMPI_*` (a program relinked with `-lshim` under `--as-needed` loses `libmpi`); by default `libmpi.so.12`, `libmpich.so.12`, `libmpi.so`, `libmpich.so` are tried. Ignored (with a warning) in setuid and setgid programs.",
    },
    VarSpec {
        name: "SHIM_PACK_MIN_BYTES",
        default: "256K",
        allowed: "a size in bytes, with an optional K, M or G suffix",
        doc: "Packing of non-contiguous datatypes (`MPI_Pack`/`MPI_Unpack`, point-to-point and collective messages, collective copies): below this many packed bytes one thread packs; above it the work is split by bytes over up to `SHIM_PACK_THREADS` threads (each taking at least half of this). Below it, point-to-point and collective messages of types whose contiguous runs average 256 bytes or more are left to the system MPI (shorter runs are packed by the shim at every size).",
    },
    VarSpec {
        name: "SHIM_PACK_THREADS",
        default: "processors / ranks on this node",
        allowed: "an integer from 1 to 256",
        doc: "Threads that pack and unpack one large non-contiguous message (the caller plus sleeping workers). Inside an OpenMP parallel region of the application packing always uses the calling thread only.",
    },
    VarSpec {
        name: "SHIM_PROGRESS",
        default: "auto",
        allowed: "none, thread, auto, library",
        doc: "How non-blocking collectives advance: `none`, inside MPI calls only; `thread`, also by a progress thread (the shim then asks the MPI library for `MPI_THREAD_MULTIPLE`, still reporting to the application the level it asked for, and falls back to `none` with a warning if the library cannot); `auto`, `thread` when the application asked for `MPI_THREAD_MULTIPLE`, the job has more than one rank and the node has a core to spare for it (fewer ranks than cores on the node), else `none` (a library put in `MPI_THREAD_MULTIPLE` for the thread slows every call of an application that did not ask for it: with MPICH 5 a Barrier at 2 ranks takes 2.9 µs instead of 0.36 in that mode, and at 8 ranks on 16 cores the shim with its idle thread took 9.8 µs instead of 1.7); `library`, also by the MPI library's own progress engine, where the library takes a poll function into it (MPICH 4.3 and later, the MPICH ABI build: `MPIX_Async_start`), so that the library's progress thread (`MPIR_CVAR_ASYNC_PROGRESS=1`) advances the shim's schedules while the application computes; elsewhere a warning and `none`.",
    },
    VarSpec {
        name: "SHIM_PROGRESS_CPU",
        default: "(not pinned)",
        allowed: "a comma list of CPU numbers; the progress thread of the i-th rank on a node is pinned to entry i modulo the list length",
        doc: "Pins the progress thread.",
    },
    VarSpec {
        name: "SHIM_PROGRESS_INTERVAL_US",
        default: "100",
        allowed: "1 to 1000000",
        doc: "The progress thread's sleep, in microseconds, when a poll completes nothing; it doubles twice (to 4x) while nothing happens and resets when something completes.",
    },
    VarSpec {
        name: "SHIM_PROGRESS_MIN_BYTES",
        default: "64K",
        allowed: "a size in bytes, with an optional K, M or G suffix",
        doc: "The progress thread takes on a non-blocking collective only if one of its messages is larger than this, or if a message must wait for another (a second round); a single round of smaller messages is posted when the collective starts and completes inside the application's MPI calls without help, so the thread stays asleep. 0: the thread takes on every collective.",
    },
    VarSpec {
        name: "SHIM_RANKS_PER_NODE",
        default: "(the real nodes)",
        allowed: "a positive integer",
        doc: "Splits each node into virtual nodes of that many consecutive ranks (for ghost processes), so that multi-node layouts can be tested on one machine.",
    },
    VarSpec {
        name: "SHIM_SCHED_CACHE",
        default: "32",
        allowed: "0 (no caching) to 4096",
        doc: "Built schedules cached per communicator (keyed by collective, counts, datatypes, operation, root, in-place); only calls with predefined datatypes and operations are cached.",
    },
    VarSpec {
        name: "SHIM_SHM_AFTER",
        default: "4",
        allowed: "0 to 1000000",
        doc: "Blocking collectives that could run on shared memory a communicator makes before its node segment is set up (an `MPI_Comm_split_type` and two small allgathers at that call): short-lived communicators cost nothing. Until then collectives take the point-to-point path. A communicator whose ranks are on several nodes gets a segment per node, which its two-level Barrier, Bcast, Reduce, Allreduce, Reduce_scatter_block, Gather, Scatter, Allgather(v) and Alltoall use; its other collectives take the point-to-point path. Once the communicator has made a non-blocking collective that could run on it, a blocking call the library takes where its non-blocking form would take the segment counts too (and still goes to the library). Non-blocking and persistent collectives use the segment once it exists. On a communicator whose ranks are all on this node, the non-blocking collectives that could run on it count too, and the one after this many sets it up without waiting for the other ranks (two `MPI_Iallgather`s; the non-blocking calls until it is there wait for it, then run on it), except under MPICH's emulated nodes (`MPIR_CVAR_NUM_CLIQUES`, `MPIR_CVAR_ODD_EVEN_CLIQUES`). On such a communicator a persistent collective that could run on it sets it up at its first initialization, whatever the count (it is made to be started many times), without waiting either: its starts until the segment is there wait for it.",
    },
    VarSpec {
        name: "SHIM_SHM_CHANNELS",
        default: "4",
        allowed: "0 to 64",
        doc: "Persistent collectives per communicator that may hold a shared-memory channel of their own at once (those initialized while one is left; the others use point-to-point). A freed request's channel goes to a later one once every rank has freed it: the ranks agree on that at an initialization that finds none left (non-local, MPI-4.0 §6.13).",
    },
    VarSpec {
        name: "SHIM_SHM_DEPTH",
        default: "16",
        allowed: "1 to 64",
        doc: "Collectives of one channel (blocking, non-blocking, each persistent one) that may be in flight at once in shared memory before a later one waits for every rank to be done with the earliest. A rank that writes into a region reads the other ranks' acknowledgements about once every SHIM_SHM_DEPTH - 1 collectives of the channel: on 16 cores (MPICH 5, IMB, 4-16 ranks, 8 B-4 KiB) the transport took 0.47-0.55 of the library's time at 4, 0.44-0.50 at 8, 0.42-0.46 at 16 and 0.40-0.44 at 32.",
    },
    VarSpec {
        name: "SHIM_SHM_SLOT",
        default: "16K",
        allowed: "a size in bytes from 64 to 16M, with an optional K or M suffix (rounded up to 64)",
        doc: "Bytes each rank has in shared memory per collective in flight: the largest contribution (a rank's data; all its blocks for Alltoall and for Scatter at the root; a reduction's operand by its true extent) that the copy-in-copy-out algorithms take (larger ones: SHIM_SHM_SINGLE_COPY). The segment of a communicator of n ranks holds (2 + SHIM_SHM_CHANNELS) x SHIM_SHM_DEPTH x n slots.",
    },
    VarSpec {
        name: "SHIM_SHM_SINGLE_COPY",
        default: "auto",
        allowed: "auto, off, or a size in bytes (0 up, with an optional K or M suffix)",
        doc: "Where the shared-memory Bcast, Gather(v), Scatter(v), Allgather(v), Alltoall(v, w), and Reduce, Allreduce, Reduce_scatter(_block), Scan and Exscan (of a datatype with holes through a staged copy of each operand and result; under `auto` only with a predefined operation) move data with one copy: each rank reads the others' buffers straight from their memory (`process_vm_readv`, allowed by the same ptrace rule as the segment's mapping) instead of through the slots; a reduction is split, each rank reducing its slice of every operand. `auto`: data larger than SHIM_SHM_SLOT, which copy-in-copy-out cannot take; a size: a footprint (as for SHIM_SHM_SLOT) of at least that many bytes; the v and w forms (Gatherv, Scatterv, Allgatherv, Alltoallv, Alltoallw), whose blocks differ in size, send each block below this size through the sender's slot where it fits there and every other by its address (Scatterv, Alltoallv and Alltoallw where the slot holds 8 bytes per rank), so they need it on; `off`: never, and no process is read at all (the two-level Allgather and Alltoall across nodes, which read their node's ranks, then take the point-to-point path). Where the kernel refuses it (probed at the segment's setup) the point-to-point path takes what the slots cannot.",
    },
    VarSpec {
        name: "SHIM_TIMEOUT",
        default: "off",
        allowed: "off (or 0), or seconds from 1 to 604800",
        doc: "An MPI call that has not returned after this many seconds (whether the shim runs it or hands it to the library) ends the job with a message naming the call and `MPI_Abort`, instead of hanging: a rank gone or a node's link down, which the MPI library itself may wait for forever. A watchdog thread looks once a second. Off by default: set it above the longest time a rank may rightly wait in one call (a Barrier while the others compute).",
    },
    VarSpec {
        name: "SHIM_TRANSPORT",
        default: "auto",
        allowed: "auto, pmpi, shm, verbs",
        doc: "What the shim's collective schedules move data with: `pmpi`, the MPI library's point-to-point only; `verbs`, the schedules' messages over InfiniBand (or RoCE) reliable-connected queue pairs of the shim's own, on every intra-communicator, set up at its first blocking collective through the library loaded from `SHIM_VERBS_LIB` (where any rank has no device, a one-line warning and `pmpi`), with the shared-memory segment where `auto` would take it (inside a node, and the node phase of the two-level collectives); `auto` never takes verbs: it has only run on the emulated HCA (README, \"The verbs backend\"); `shm`, a shared-memory segment per communicator whose ranks share a node, for every collective that has a shared-memory algorithm and whose data fits `SHIM_SHM_SLOT`, and beyond it with one copy (`SHIM_SHM_SINGLE_COPY`) for Bcast, Gather(v), Scatter(v), Allgather(v), Alltoall(v, w), Reduce, Allreduce, Reduce_scatter(_block), Scan and Exscan (`SHIM_<COLL>_ALGORITHM=shm` forces one collective); `auto`, `shm` where it was measured to win: up to 1 KiB of data (under both MPICH, from their tuning: the reductions up to the slot, and at 2 ranks the other collectives too; Reduce_scatter_block, which the library is never handed, up to the slot; a persistent call, which the library is never handed either, and an `I*` call under Open MPI, whose own are not used, up to the slot but Allreduce under Intel MPI; under Intel MPI at 2 ranks, from its tuning rows, Bcast from 8 KiB and Gather and Reduce from 2 KiB, and `I*` calls up to the slot), and beyond the slot with one copy all of those (but Intel MPI's `I*` Bcast, Gather, Scatter, Allgather(v) and Alltoall, whose own win there); Scatterv, Alltoallv and Alltoallw, whose sizes not every rank knows, where the segment wins their fixed forms at every size (2 ranks under both MPICH), Allgatherv as Allgather by its average block, Gatherv only where forced; with a `SHIM_TUNING_FILE` from `scripts/tools/shim-tune` (`param shm_rows 1`), for blocking calls where its rows name `shm` (in any tuning data, a row naming `shm` takes the segment); in a job with an oversubscribed node (more processes than processors), every collective under both MPICH (whose own waits spin there); under Intel MPI and Open MPI, whose waits yield, the library's own, but Reduce_scatter_block (never handed to the library) and, under Open MPI, 1 KiB to the slot (README, \"The node transport\"). Where shared memory cannot work, a one-line warning and `pmpi`. A collective on the segment calls the library only where the application's own point-to-point, request, RMA or file calls left it something to do (README, \"The node transport\").",
    },
    VarSpec {
        name: "SHIM_VERBS_LIB",
        default: "libibverbs.so.1",
        allowed: "a library name or path (at most 4096 bytes)",
        doc: "The verbs library `SHIM_TRANSPORT=verbs` loads at run time (`libshim.so` never links one): the system's rdma-core, or the emulated HCA the tests build (`scripts/tools/build-ibemu`).",
    },
    VarSpec {
        name: "SHIM_VERBS_QPS",
        default: "2",
        allowed: "1 to 16",
        doc: "Queue pairs per pair of processes under `SHIM_TRANSPORT=verbs`: a large message's RDMA writes go round them in 1 MiB pieces, so that an HCA's parallel engines move them at once (Franke's collectives); eager and control messages take the first.",
    },
    VarSpec {
        name: "SHIM_VERBS_EAGER",
        default: "8152",
        allowed: "0 to 8152 (bytes)",
        doc: "Under `SHIM_TRANSPORT=verbs`, messages up to this size travel in one send through a registered bounce buffer (the send completes once it is posted to the HCA); larger ones announce themselves, and the receiver's buffer is written with RDMA writes once a receive matches. 0 sends everything the second way (the tests use it).",
    },
    VarSpec {
        name: "SHIM_TUNING_FILE",
        default: "(built-in)",
        allowed: "the path of a regular file of at most 4 MiB in the tuning format (as written by `scripts/tools/shim-tune`)",
        doc: "Model parameters and measured fastest algorithms that `auto` uses instead of the built-in ones (measured on the reference machine). A FIFO, device or directory, a larger file or a bad line is a configuration error (quoting at most 80 characters of the line). Ignored (with a warning) in setuid and setgid programs.",
    },
    VarSpec {
        name: "SHIM_STATS",
        default: "off",
        allowed: "off, on, rank (also 0 = off, 1 = on)",
        doc: "At `MPI_Finalize` print a table of intercepted calls, time, bytes and the path each took: `on` aggregates on rank 0, `rank` prints one table per rank.",
    },
];

/// `SHIM_PROGRESS`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProgressMode {
    None,
    Thread,
    Auto,
    /// The library's own progress engine (MPICH's `MPIX_Async_start`).
    Library,
}

/// How the statistics are reported at finalize.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StatsMode {
    Off,
    Summary,
    Rank,
}

/// `SHIM_GHOST_PLACEMENT`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GhostPlacement {
    First,
    Last,
    Spread,
}

/// `SHIM_GHOST_BALANCE`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GhostBalance {
    Static,
    Random,
    Op,
    Byte,
}

/// The typed configuration.
#[derive(Clone, Debug)]
pub struct Config {
    pub disable: bool,
    pub log: String,
    pub log_file: Option<String>,
    pub stats: StatsMode,
    /// `SHIM_FAULT_INJECT=panic:<name>`: the function whose hook panics.
    pub fault_panic: Option<String>,
    /// Schedules cached per communicator.
    pub sched_cache: usize,
    /// `SHIM_TIMEOUT` in seconds; 0: off.
    pub timeout_s: u64,
    pub progress: ProgressMode,
    pub progress_interval_us: u64,
    /// `SHIM_PROGRESS_MIN_BYTES`.
    pub progress_min_bytes: u64,
    pub progress_cpus: Vec<usize>,
    /// The per-collective variables (`SHIM_<COLL>_ALGORITHM`, `_K`, `_SEGMENT`) as set,
    /// sorted by name: the collective layer parses them (`services::coll::select::env`).
    pub coll_vars: Vec<(String, String)>,
    pub tuning_file: Option<String>,
    pub calibrate: bool,
    pub ghosts: u32,
    pub ghost_placement: GhostPlacement,
    pub ghost_balance: GhostBalance,
    /// `SHIM_GHOST_DIRECT`: single-node windows move data in shared memory.
    pub ghost_direct: bool,
    pub ranks_per_node: Option<u32>,
    /// `SHIM_PACK_THREADS` (None: processors per rank of the node).
    pub pack_threads: Option<u32>,
    pub pack_min_bytes: u64,
    /// `SHIM_TRANSPORT` and the `SHIM_SHM_*` sizes.
    pub transport: Transport,
    pub shm: ShmConfig,
    /// `SHIM_VERBS_LIB` and `SHIM_VERBS_QPS`.
    pub verbs: VerbsConfig,
}

/// `SHIM_VERBS_*`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VerbsConfig {
    pub lib: String,
    pub qps: u32,
    pub eager: u32,
}

impl Default for VerbsConfig {
    fn default() -> Self {
        VerbsConfig {
            lib: "libibverbs.so.1".into(),
            qps: 2,
            eager: 8152,
        }
    }
}

/// `SHIM_TRANSPORT`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    Auto,
    Pmpi,
    Shm,
    Verbs,
}

/// `SHIM_SHM_*`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShmConfig {
    pub after: u32,
    pub channels: u32,
    pub depth: u32,
    pub slot: u64,
    /// Footprints from this many bytes move with one copy (`None`: never).
    pub single_copy: Option<u64>,
    /// Whether a non-blocking collective may set a communicator's segment up (where the
    /// census's nodes are the library's: not under MPICH's emulated nodes,
    /// `MPIR_CVAR_NUM_CLIQUES`/`MPIR_CVAR_ODD_EVEN_CLIQUES`).
    pub nb_setup: bool,
}

impl Default for ShmConfig {
    fn default() -> Self {
        ShmConfig {
            after: 4,
            channels: 4,
            depth: 16,
            slot: 16 * 1024,
            single_copy: Some(16 * 1024 + 1),
            nb_setup: true,
        }
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            disable: false,
            log: "warn".into(),
            log_file: None,
            stats: StatsMode::Off,
            fault_panic: None,
            sched_cache: 32,
            timeout_s: 0,
            progress: ProgressMode::Auto,
            progress_interval_us: 100,
            progress_min_bytes: 64 * 1024,
            progress_cpus: Vec::new(),
            coll_vars: Vec::new(),
            tuning_file: None,
            calibrate: false,
            ghosts: 0,
            ghost_placement: GhostPlacement::Last,
            ghost_balance: GhostBalance::Static,
            ghost_direct: true,
            ranks_per_node: None,
            pack_threads: None,
            pack_min_bytes: 256 * 1024,
            transport: Transport::Auto,
            shm: ShmConfig::default(),
            verbs: VerbsConfig::default(),
        }
    }
}

/// A rejected value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    pub var: String,
    pub value: String,
    pub allowed: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "invalid value {}={:?}: allowed values are {}",
            self.var, self.value, self.allowed
        )
    }
}

/// The outcome of reading the environment.
#[derive(Debug, Default)]
pub struct Loaded {
    pub config: Config,
    pub errors: Vec<ConfigError>,
    pub warnings: Vec<String>,
}

fn spec(name: &str) -> &'static VarSpec {
    VARS.iter()
        .find(|v| v.name == name)
        .expect("variable is in VARS")
}

fn error(name: &str, value: &str) -> ConfigError {
    ConfigError {
        var: name.into(),
        value: value.into(),
        allowed: spec(name).allowed.into(),
    }
}

/// Parses a boolean in the usual spellings.
pub fn parse_bool(v: &str) -> Option<bool> {
    match v.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" => Some(true),
        "0" | "false" | "no" | "off" | "" => Some(false),
        _ => None,
    }
}

/// Parses a non-negative integer with an optional binary suffix (K, M, G; KiB etc.).
pub fn parse_size(v: &str) -> Option<u64> {
    let t = v.trim();
    let lower = t.to_ascii_lowercase();
    let (num, mult) = [
        ("kib", 1u64 << 10),
        ("mib", 1 << 20),
        ("gib", 1 << 30),
        ("k", 1 << 10),
        ("m", 1 << 20),
        ("g", 1 << 30),
    ]
    .iter()
    .find_map(|(s, m)| lower.strip_suffix(s).map(|n| (n.trim().to_string(), *m)))
    .unwrap_or((lower.clone(), 1));
    num.parse::<u64>().ok()?.checked_mul(mult)
}

const LEVELS: &[&str] = &["off", "error", "warn", "info", "debug", "trace"];

/// Validates a `SHIM_LOG` filter and returns it in `tracing` directive form, with bare
/// module names qualified by the crate name (`coll=debug` means `shim::coll=debug`).
pub fn parse_log_filter(v: &str) -> Option<String> {
    let mut out = Vec::new();
    for d in v.split(',').map(str::trim).filter(|d| !d.is_empty()) {
        match d.split_once('=') {
            None => {
                let l = d.to_ascii_lowercase();
                if !LEVELS.contains(&l.as_str()) {
                    return None;
                }
                out.push(l);
            }
            Some((module, level)) => {
                let l = level.trim().to_ascii_lowercase();
                let m = module.trim();
                if !LEVELS.contains(&l.as_str())
                    || m.is_empty()
                    || !m
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
                {
                    return None;
                }
                let m = if m == "shim" || m.starts_with("shim::") {
                    m.to_string()
                } else {
                    format!("shim::{m}")
                };
                out.push(format!("{m}={l}"));
            }
        }
    }
    if out.is_empty() {
        None
    } else {
        Some(out.join(","))
    }
}

/// Edit distance, for "did you mean" suggestions.
fn levenshtein(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1];
        for (j, cb) in b.iter().enumerate() {
            let sub = prev[j] + usize::from(ca != *cb);
            cur.push(sub.min(prev[j + 1] + 1).min(cur[j] + 1));
        }
        prev = cur;
    }
    prev[b.len()]
}

/// The known variable closest to an unknown name.
pub fn closest(name: &str) -> &'static str {
    VARS.iter()
        .min_by_key(|v| levenshtein(name, v.name))
        .map(|v| v.name)
        .unwrap_or("SHIM_LOG")
}

/// The variables that name a file or a library. A process in secure-execution mode
/// ([`at_secure`]) ignores them, as the C library ignores its own (`LD_PRELOAD` paths,
/// `LD_LIBRARY_PATH`, `MALLOC_TRACE`, ...): whoever sets the environment of a setuid or
/// setgid program must not make it read, write or load files with its privileges.
pub const FILE_VARS: &[&str] = &["SHIM_LOG_FILE", "SHIM_MPI_LIBRARY", "SHIM_TUNING_FILE"];

/// Whether this process runs in secure-execution mode: the kernel's `AT_SECURE` auxiliary
/// value, set for setuid and setgid programs and those with file capabilities (the test
/// the C library makes for its own variables). Tests pass the answer to
/// [`load_from_secure`] instead.
pub fn at_secure() -> bool {
    // SAFETY: getauxval only reads the auxiliary vector; 0 when the entry is absent.
    unsafe { libc::getauxval(libc::AT_SECURE) != 0 }
}

/// Reads the configuration from `(name, value)` pairs (a test's), as a normal process.
pub fn load_from<I: IntoIterator<Item = (String, String)>>(vars: I) -> Loaded {
    load_from_secure(vars, false)
}

/// Reads the configuration from `(name, value)` pairs; `secure`: the process is in
/// secure-execution mode ([`at_secure`]), so the [`FILE_VARS`] are ignored with one
/// warning naming those that were set.
pub fn load_from_secure<I: IntoIterator<Item = (String, String)>>(vars: I, secure: bool) -> Loaded {
    let mut l = Loaded::default();
    let mut seen: Vec<(String, String)> = Vec::new();
    let mut ignored: Vec<String> = Vec::new();
    for (k, v) in vars {
        if k == "MPIR_CVAR_NUM_CLIQUES" || k == "MPIR_CVAR_ODD_EVEN_CLIQUES" {
            // MPICH splits the machine into nodes of its own: only its
            // `MPI_Comm_split_type`, a blocking call, tells a communicator's nodes then
            let odd_even = k.ends_with("ODD_EVEN_CLIQUES");
            let split = match v.trim().parse::<i64>() {
                Ok(n) => n > 1 || (odd_even && n == 1),
                Err(_) => odd_even && parse_bool(&v) == Some(true),
            };
            if split {
                l.config.shm.nb_setup = false;
            }
        }
        if !k.starts_with("SHIM_") {
            continue;
        }
        if secure && FILE_VARS.contains(&k.as_str()) {
            ignored.push(k);
        } else if VARS.iter().any(|s| s.name == k) {
            seen.push((k, v));
        } else if is_coll_var(&k) {
            l.config.coll_vars.push((k, v));
        } else {
            l.warnings.push(format!(
                "unknown variable {k} is ignored (did you mean {}?)",
                closest(&k)
            ));
        }
    }
    if !ignored.is_empty() {
        ignored.sort_unstable();
        l.warnings.push(format!(
            "secure-execution mode (setuid or setgid program, AT_SECURE): ignoring {} (variables that name files or libraries are not honoured, as the C library ignores LD_PRELOAD paths)",
            ignored.join(", ")
        ));
    }
    let get = |name: &str| seen.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
    let c = &mut l.config;
    if let Some(v) = get("SHIM_DISABLE") {
        match parse_bool(&v) {
            Some(b) => c.disable = b,
            None => l.errors.push(error("SHIM_DISABLE", &v)),
        }
    }
    if let Some(v) = get("SHIM_LOG") {
        match parse_log_filter(&v) {
            Some(f) => c.log = f,
            None => l.errors.push(error("SHIM_LOG", &v)),
        }
    }
    if let Some(v) = get("SHIM_LOG_FILE") {
        if v.trim().is_empty() {
            l.errors.push(error("SHIM_LOG_FILE", &v));
        } else {
            c.log_file = Some(v);
        }
    }
    if let Some(v) = get("SHIM_FAULT_INJECT") {
        match v.trim().strip_prefix("panic:") {
            Some(f) if crate::platform::api::NAMES.contains(&f.trim()) => {
                c.fault_panic = Some(f.trim().to_string())
            }
            _ => l.errors.push(error("SHIM_FAULT_INJECT", &v)),
        }
    }
    if let Some(v) = get("SHIM_MPI_LIBRARY") {
        if v.trim().is_empty() {
            l.errors.push(error("SHIM_MPI_LIBRARY", &v));
        }
    }
    if let Some(v) = get("SHIM_SCHED_CACHE") {
        match v.trim().parse::<usize>() {
            Ok(n) if n <= 4096 => c.sched_cache = n,
            _ => l.errors.push(error("SHIM_SCHED_CACHE", &v)),
        }
    }
    if let Some(v) = get("SHIM_TIMEOUT") {
        match v.trim().to_ascii_lowercase().as_str() {
            "off" => c.timeout_s = 0,
            t => match t.parse::<u64>() {
                Ok(n) if n <= 604_800 => c.timeout_s = n,
                _ => l.errors.push(error("SHIM_TIMEOUT", &v)),
            },
        }
    }
    if let Some(v) = get("SHIM_PROGRESS") {
        match v.trim().to_ascii_lowercase().as_str() {
            "none" => c.progress = ProgressMode::None,
            "thread" => c.progress = ProgressMode::Thread,
            "auto" => c.progress = ProgressMode::Auto,
            "library" => c.progress = ProgressMode::Library,
            _ => l.errors.push(error("SHIM_PROGRESS", &v)),
        }
    }
    if let Some(v) = get("SHIM_PROGRESS_INTERVAL_US") {
        match v.trim().parse::<u64>() {
            Ok(n) if (1..=1_000_000).contains(&n) => c.progress_interval_us = n,
            _ => l.errors.push(error("SHIM_PROGRESS_INTERVAL_US", &v)),
        }
    }
    if let Some(v) = get("SHIM_PROGRESS_MIN_BYTES") {
        match parse_size(&v) {
            Some(n) => c.progress_min_bytes = n,
            None => l.errors.push(error("SHIM_PROGRESS_MIN_BYTES", &v)),
        }
    }
    if let Some(v) = get("SHIM_PROGRESS_CPU") {
        let cpus: Result<Vec<usize>, _> = v.split(',').map(|x| x.trim().parse::<usize>()).collect();
        match cpus {
            Ok(list)
                if !list.is_empty() && list.iter().all(|&c| c < libc::CPU_SETSIZE as usize) =>
            {
                c.progress_cpus = list
            }
            _ => l.errors.push(error("SHIM_PROGRESS_CPU", &v)),
        }
    }
    l.config.coll_vars.sort();
    if let Some(v) = get("SHIM_TUNING_FILE") {
        if v.trim().is_empty() {
            l.errors.push(error("SHIM_TUNING_FILE", &v));
        } else {
            l.config.tuning_file = Some(v.trim().to_string());
        }
    }
    if let Some(v) = get("SHIM_CALIBRATE") {
        match parse_bool(&v) {
            Some(b) => l.config.calibrate = b,
            None => l.errors.push(error("SHIM_CALIBRATE", &v)),
        }
    }
    let c = &mut l.config;
    if let Some(v) = get("SHIM_GHOSTS") {
        match v.trim().parse::<u32>() {
            Ok(n) if n <= 64 => c.ghosts = n,
            _ => l.errors.push(error("SHIM_GHOSTS", &v)),
        }
    }
    if let Some(v) = get("SHIM_GHOST_PLACEMENT") {
        match v.trim().to_ascii_lowercase().as_str() {
            "first" => c.ghost_placement = GhostPlacement::First,
            "last" => c.ghost_placement = GhostPlacement::Last,
            "spread" => c.ghost_placement = GhostPlacement::Spread,
            _ => l.errors.push(error("SHIM_GHOST_PLACEMENT", &v)),
        }
    }
    if let Some(v) = get("SHIM_GHOST_BALANCE") {
        match v.trim().to_ascii_lowercase().as_str() {
            "static" => c.ghost_balance = GhostBalance::Static,
            "random" => c.ghost_balance = GhostBalance::Random,
            "op" => c.ghost_balance = GhostBalance::Op,
            "byte" => c.ghost_balance = GhostBalance::Byte,
            _ => l.errors.push(error("SHIM_GHOST_BALANCE", &v)),
        }
    }
    if let Some(v) = get("SHIM_GHOST_DIRECT") {
        match parse_bool(&v) {
            Some(b) if !v.trim().is_empty() => c.ghost_direct = b,
            _ => l.errors.push(error("SHIM_GHOST_DIRECT", &v)),
        }
    }
    if let Some(v) = get("SHIM_PACK_THREADS") {
        match v.trim().parse::<u32>() {
            Ok(n) if (1..=256).contains(&n) => c.pack_threads = Some(n),
            _ => l.errors.push(error("SHIM_PACK_THREADS", &v)),
        }
    }
    if let Some(v) = get("SHIM_PACK_MIN_BYTES") {
        match parse_size(&v) {
            Some(n) => c.pack_min_bytes = n,
            None => l.errors.push(error("SHIM_PACK_MIN_BYTES", &v)),
        }
    }
    if let Some(v) = get("SHIM_TRANSPORT") {
        match v.trim().to_ascii_lowercase().as_str() {
            "auto" => c.transport = Transport::Auto,
            "pmpi" => c.transport = Transport::Pmpi,
            "shm" => c.transport = Transport::Shm,
            "verbs" => c.transport = Transport::Verbs,
            _ => l.errors.push(error("SHIM_TRANSPORT", &v)),
        }
    }
    if let Some(v) = get("SHIM_VERBS_LIB") {
        match v.trim() {
            t if !t.is_empty() && t.len() <= 4096 && !t.contains('\0') => c.verbs.lib = t.into(),
            _ => l.errors.push(error("SHIM_VERBS_LIB", &v)),
        }
    }
    if let Some(v) = get("SHIM_VERBS_EAGER") {
        match parse_size(&v) {
            Some(n) if n <= 8152 => c.verbs.eager = n as u32,
            _ => l.errors.push(error("SHIM_VERBS_EAGER", &v)),
        }
    }
    if let Some(v) = get("SHIM_VERBS_QPS") {
        match v.trim().parse::<u32>() {
            Ok(n) if (1..=16).contains(&n) => c.verbs.qps = n,
            _ => l.errors.push(error("SHIM_VERBS_QPS", &v)),
        }
    }
    if let Some(v) = get("SHIM_SHM_AFTER") {
        match v.trim().parse::<u32>() {
            Ok(n) if n <= 1_000_000 => c.shm.after = n,
            _ => l.errors.push(error("SHIM_SHM_AFTER", &v)),
        }
    }
    if let Some(v) = get("SHIM_SHM_CHANNELS") {
        match v.trim().parse::<u32>() {
            Ok(n) if n <= 64 => c.shm.channels = n,
            _ => l.errors.push(error("SHIM_SHM_CHANNELS", &v)),
        }
    }
    if let Some(v) = get("SHIM_SHM_DEPTH") {
        match v.trim().parse::<u32>() {
            Ok(n) if (1..=64).contains(&n) => c.shm.depth = n,
            _ => l.errors.push(error("SHIM_SHM_DEPTH", &v)),
        }
    }
    if let Some(v) = get("SHIM_SHM_SLOT") {
        match parse_size(&v) {
            Some(n) if (64..=16 << 20).contains(&n) => c.shm.slot = n.div_ceil(64) * 64,
            _ => l.errors.push(error("SHIM_SHM_SLOT", &v)),
        }
    }
    // after the slot: `auto` is relative to it
    c.shm.single_copy = Some(c.shm.slot + 1);
    if let Some(v) = get("SHIM_SHM_SINGLE_COPY") {
        match v.trim().to_ascii_lowercase().as_str() {
            "auto" => {}
            "off" => c.shm.single_copy = None,
            t => match parse_size(t) {
                Some(n) => c.shm.single_copy = Some(n),
                None => l.errors.push(error("SHIM_SHM_SINGLE_COPY", &v)),
            },
        }
    }
    if let Some(v) = get("SHIM_RANKS_PER_NODE") {
        match v.trim().parse::<u32>() {
            Ok(n) if n >= 1 => c.ranks_per_node = Some(n),
            _ => l.errors.push(error("SHIM_RANKS_PER_NODE", &v)),
        }
    }
    if let Some(v) = get("SHIM_STATS") {
        match v.trim().to_ascii_lowercase().as_str() {
            "off" | "0" | "" => c.stats = StatsMode::Off,
            "on" | "1" | "summary" => c.stats = StatsMode::Summary,
            "rank" => c.stats = StatsMode::Rank,
            _ => l.errors.push(error("SHIM_STATS", &v)),
        }
    }
    l
}

/// The suffixes of the per-collective variables, `SHIM_<COLL>_<SUFFIX>` (one list, for this
/// shape check and for the collective layer's parser).
pub const COLL_VAR_SUFFIXES: [&str; 3] = ["ALGORITHM", "K", "SEGMENT"];

/// Has the shape of a per-collective variable, `SHIM_<COLL>_ALGORITHM`, `_K` or
/// `_SEGMENT`: the collective layer knows which collectives and parameters exist.
pub fn is_coll_var(name: &str) -> bool {
    let rest = name.strip_prefix("SHIM_").unwrap_or("");
    COLL_VAR_SUFFIXES.iter().any(|w| {
        rest.strip_suffix(w)
            .and_then(|r| r.strip_suffix('_'))
            .is_some_and(|coll| !coll.is_empty())
    })
}

/// Fingerprint of the settings that lay the job out (which ranks take part at all, and
/// which become ghosts): ranks that disagree would wait for each other in different
/// collectives at init.
pub fn layout_fingerprint(c: &Config) -> u64 {
    let text = format!(
        "{}|{}|{:?}|{:?}|{}|{:?}",
        c.disable, c.ghosts, c.ghost_placement, c.ghost_balance, c.ghost_direct, c.ranks_per_node
    );
    fnv1a(text.as_bytes())
}

/// FNV-1a: the fingerprints above and the node key of init.
pub(crate) fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
    })
}

/// Reads the process environment.
pub fn load() -> Loaded {
    load_from_secure(
        std::env::vars_os()
            .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?))),
        at_secure(),
    )
}

/// The README table of variables, generated from [`VARS`].
pub fn markdown_table() -> String {
    let mut s =
        String::from("| Variable | Default | Allowed values | Meaning |\n|---|---|---|---|\n");
    for v in VARS {
        s.push_str(&format!(
            "| `{}` | `{}` | {} | {} |\n",
            v.name, v.default, v.allowed, v.doc
        ));
    }
    s
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    fn load(pairs: &[(&str, &str)]) -> Loaded {
        load_from(pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())))
    }

    #[test]
    fn mpich_emulated_nodes_keep_the_segment_set_up_in_blocking_calls() {
        let cases: &[(&[(&str, &str)], bool)] = &[
            (&[], true),
            (&[("MPIR_CVAR_NUM_CLIQUES", "1")], true),
            (&[("MPIR_CVAR_NUM_CLIQUES", "2")], false),
            (&[("MPIR_CVAR_ODD_EVEN_CLIQUES", "0")], true),
            (&[("MPIR_CVAR_ODD_EVEN_CLIQUES", "1")], false),
            (&[("MPIR_CVAR_ODD_EVEN_CLIQUES", "true")], false),
            (&[("MPIR_CVAR_ODD_EVEN_CLIQUES", "no")], true),
        ];
        for (vars, nb) in cases {
            let l = load(vars);
            assert_eq!(l.config.shm.nb_setup, *nb, "{vars:?}");
            assert!(l.warnings.is_empty() && l.errors.is_empty(), "{vars:?}");
        }
    }

    #[test]
    fn defaults() {
        let l = load(&[]);
        assert!(l.errors.is_empty() && l.warnings.is_empty());
        assert!(!l.config.disable);
        assert_eq!(l.config.stats, StatsMode::Off);
        assert_eq!(l.config.log, "warn");
    }

    #[test]
    fn good_values() {
        let l = load(&[
            ("SHIM_DISABLE", "yes"),
            ("SHIM_STATS", "rank"),
            ("SHIM_LOG", "info,coll=trace"),
        ]);
        assert!(l.errors.is_empty(), "{:?}", l.errors);
        assert!(l.config.disable);
        assert_eq!(l.config.stats, StatsMode::Rank);
        assert_eq!(l.config.log, "info,shim::coll=trace");
        assert_eq!(
            load(&[("SHIM_STATS", "1")]).config.stats,
            StatsMode::Summary
        );
    }

    #[test]
    fn bad_values_name_variable_value_and_allowed() {
        let l = load(&[
            ("SHIM_STATS", "bogus"),
            ("SHIM_DISABLE", "maybe"),
            ("SHIM_LOG", "loud"),
        ]);
        assert_eq!(l.errors.len(), 3);
        let msg = l
            .errors
            .iter()
            .map(|e| e.to_string())
            .collect::<Vec<_>>()
            .join("\n");
        assert!(msg.contains("SHIM_STATS=\"bogus\""), "{msg}");
        assert!(msg.contains("off, on, rank"), "{msg}");
        assert!(msg.contains("SHIM_DISABLE=\"maybe\""), "{msg}");
        assert!(msg.contains("SHIM_LOG=\"loud\""), "{msg}");
    }

    #[test]
    fn single_copy_starts_above_the_slot_unless_told() {
        // (SHIM_SHM_SLOT, SHIM_SHM_SINGLE_COPY, the footprint single copy starts from)
        let table: [(Option<&str>, Option<&str>, Option<u64>); 7] = [
            (None, None, Some(16 * 1024 + 1)),
            (Some("4K"), None, Some(4096 + 1)),
            (Some("100"), Some("auto"), Some(128 + 1)),
            (None, Some("off"), None),
            (None, Some("0"), Some(0)),
            (Some("4K"), Some("64K"), Some(64 * 1024)),
            (None, Some(" OFF "), None),
        ];
        for (slot, single, want) in table {
            let mut env = Vec::new();
            env.extend(slot.map(|v| ("SHIM_SHM_SLOT", v)));
            env.extend(single.map(|v| ("SHIM_SHM_SINGLE_COPY", v)));
            let l = load(&env);
            assert!(l.errors.is_empty(), "{env:?}: {:?}", l.errors);
            assert_eq!(l.config.shm.single_copy, want, "{env:?}");
        }
        for bad in ["yes", "-1", "1X", ""] {
            let l = load(&[("SHIM_SHM_SINGLE_COPY", bad)]);
            assert_eq!(l.errors.len(), 1, "{bad:?}");
            assert!(l.errors[0].to_string().contains("auto, off, or a size"));
        }
    }

    #[test]
    fn unknown_names_warn_with_closest() {
        let l = load(&[("SHIM_STAT", "1"), ("OTHER", "x")]);
        assert_eq!(l.warnings.len(), 1);
        assert!(
            l.warnings[0].contains("SHIM_STAT ") && l.warnings[0].contains("SHIM_STATS"),
            "{:?}",
            l.warnings
        );
        assert!(l.errors.is_empty());
    }

    #[test]
    fn fault_injection_names_a_real_function() {
        assert_eq!(
            load(&[("SHIM_FAULT_INJECT", "panic:MPI_Barrier")])
                .config
                .fault_panic
                .as_deref(),
            Some("MPI_Barrier")
        );
        assert_eq!(
            load(&[("SHIM_FAULT_INJECT", "panic:MPI_Nope")])
                .errors
                .len(),
            1
        );
        assert_eq!(load(&[("SHIM_FAULT_INJECT", "crash")]).errors.len(), 1);
    }

    #[test]
    fn progress_settings() {
        let l = load(&[
            ("SHIM_PROGRESS", "thread"),
            ("SHIM_PROGRESS_INTERVAL_US", "50"),
            ("SHIM_PROGRESS_CPU", "1, 3"),
        ]);
        assert!(l.errors.is_empty(), "{:?}", l.errors);
        assert_eq!(l.config.progress, ProgressMode::Thread);
        assert_eq!(l.config.progress_interval_us, 50);
        assert_eq!(l.config.progress_cpus, vec![1, 3]);
        assert_eq!(load(&[]).config.progress_min_bytes, 64 * 1024);
        assert_eq!(load(&[]).config.timeout_s, 0);
        assert_eq!(load(&[("SHIM_TIMEOUT", "45")]).config.timeout_s, 45);
        assert_eq!(load(&[("SHIM_TIMEOUT", "OFF")]).config.timeout_s, 0);
        assert_eq!(load(&[("SHIM_TIMEOUT", "10s")]).errors.len(), 1);
        assert_eq!(load(&[("SHIM_TIMEOUT", "604801")]).errors.len(), 1);
        assert_eq!(
            load(&[("SHIM_PROGRESS", "Library")]).config.progress,
            ProgressMode::Library
        );
        assert_eq!(
            load(&[("SHIM_PROGRESS_MIN_BYTES", "1M")])
                .config
                .progress_min_bytes,
            1 << 20
        );
        assert_eq!(load(&[("SHIM_PROGRESS_MIN_BYTES", "big")]).errors.len(), 1);
        let bad = load(&[
            ("SHIM_PROGRESS", "threads"),
            ("SHIM_PROGRESS_INTERVAL_US", "0"),
            ("SHIM_PROGRESS_CPU", "a"),
        ]);
        assert_eq!(bad.errors.len(), 3);
        assert!(bad.errors[0].to_string().contains("none, thread, auto"));
    }

    #[test]
    fn secure_mode_ignores_file_and_library_variables() {
        let env = [
            ("SHIM_TUNING_FILE", "/tmp/t.tune"),
            ("SHIM_LOG_FILE", "/etc/passwd"),
            ("SHIM_MPI_LIBRARY", "/tmp/evil.so"),
            ("SHIM_STATS", "on"),
        ];
        let pairs = || env.iter().map(|(k, v)| (k.to_string(), v.to_string()));
        let normal = load_from_secure(pairs(), false);
        assert!(normal.warnings.is_empty(), "{:?}", normal.warnings);
        assert_eq!(normal.config.tuning_file.as_deref(), Some("/tmp/t.tune"));
        assert_eq!(normal.config.log_file.as_deref(), Some("/etc/passwd"));
        let secure = load_from_secure(pairs(), true);
        assert!(secure.errors.is_empty(), "{:?}", secure.errors);
        assert_eq!(secure.config.tuning_file, None);
        assert_eq!(secure.config.log_file, None);
        assert_eq!(
            secure.config.stats,
            StatsMode::Summary,
            "other variables still count"
        );
        assert_eq!(secure.warnings.len(), 1, "{:?}", secure.warnings);
        let w = &secure.warnings[0];
        assert!(
            w.contains("AT_SECURE")
                && w.contains("SHIM_LOG_FILE, SHIM_MPI_LIBRARY, SHIM_TUNING_FILE"),
            "{w}"
        );
        // even a bad value of an ignored variable is no error
        let empty = load_from_secure([("SHIM_TUNING_FILE".into(), " ".into())], true);
        assert!(empty.errors.is_empty() && empty.warnings.len() == 1);
        // nothing set: no warning
        assert!(load_from_secure([], true).warnings.is_empty());
        // every file-naming variable is documented, and this test process is not secure
        assert!(FILE_VARS.iter().all(|n| VARS.iter().any(|v| v.name == *n)));
        assert!(!at_secure());
    }

    #[test]
    fn ghost_direct() {
        assert!(load(&[]).config.ghost_direct);
        assert!(!load(&[("SHIM_GHOST_DIRECT", "off")]).config.ghost_direct);
        assert!(load(&[("SHIM_GHOST_DIRECT", "1")]).config.ghost_direct);
        let bad = load(&[("SHIM_GHOST_DIRECT", "sometimes")]);
        assert_eq!(bad.errors.len(), 1);
        let msg = bad.errors[0].to_string();
        assert!(
            msg.contains("SHIM_GHOST_DIRECT=\"sometimes\"") && msg.contains("on, off"),
            "{msg}"
        );
        assert_eq!(load(&[("SHIM_GHOST_DIRECT", "")]).errors.len(), 1);
    }

    #[test]
    fn log_filters() {
        assert_eq!(parse_log_filter("DEBUG").as_deref(), Some("debug"));
        assert_eq!(
            parse_log_filter("shim::init=info").as_deref(),
            Some("shim::init=info")
        );
        assert_eq!(parse_log_filter("x=y"), None);
        assert_eq!(parse_log_filter(""), None);
        assert_eq!(parse_log_filter("a b=info"), None);
    }

    #[test]
    fn sizes_and_bools() {
        assert_eq!(parse_size("64K"), Some(65536));
        assert_eq!(parse_size("2 MiB"), Some(2 << 20));
        assert_eq!(parse_size("12"), Some(12));
        assert_eq!(parse_size("x"), None);
        assert_eq!(parse_bool("Off"), Some(false));
        assert_eq!(parse_bool("2"), None);
    }

    /// Checks (or with UPDATE_README, rewrites) the README text between two markers.
    pub(crate) fn readme_section(begin: &str, end: &str, want: &str) {
        static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
        let _one_at_a_time = LOCK.lock().unwrap_or_else(|e| e.into_inner());
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/README.md");
        let readme = std::fs::read_to_string(path).unwrap();
        let (Some(b), Some(e)) = (readme.find(begin), readme.find(end)) else {
            panic!("README.md lacks the markers {begin:?}");
        };
        if std::env::var_os("UPDATE_README").is_some() {
            let updated = format!("{}{}{}", &readme[..b + begin.len()], want, &readme[e..]);
            std::fs::write(path, updated).unwrap();
            return;
        }
        assert!(
            &readme[b + begin.len()..e] == want,
            "README.md is out of date; run `UPDATE_README=1 cargo test readme`"
        );
    }

    #[test]
    fn readme_documents_every_variable() {
        readme_section(
            "<!-- BEGIN SHIM_VARS (generated from src/platform/config.rs by `UPDATE_README=1 cargo test readme`) -->\n",
            "<!-- END SHIM_VARS -->",
            &markdown_table(),
        );
    }
}

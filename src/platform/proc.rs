//! Layer: platform. May use: nothing.
//!
//! Facts about this process that are fixed at init and read everywhere below the hooks:
//! its rank and the size of the application's world, its node's processes, the processors
//! it may run on, and, with ghost processes (`SHIM_GHOSTS`), which communicator the
//! application knows as `MPI_COMM_WORLD`. `hooks::init` and the ghost service write them
//! once; everything else only reads, so they sit at the bottom of the layers.

use core::ffi::c_int;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};

use crate::platform::abi::*;
use crate::platform::api::pmpi;

/// A rank and a size.
#[derive(Clone, Copy, Debug)]
pub struct World {
    pub rank: i32,
    pub size: i32,
}

static WORLD_RANK: AtomicI32 = AtomicI32::new(-1);
static WORLD_SIZE: AtomicI32 = AtomicI32::new(0);
static LOCAL_RANK: AtomicI32 = AtomicI32::new(0);
static LOCAL_SIZE: AtomicI32 = AtomicI32::new(1);

/// Ghosts are on (this process is a user and MPI_COMM_WORLD is mapped).
static GHOSTS_ON: AtomicBool = AtomicBool::new(false);
/// The user world, set when `GHOSTS_ON` is (0 until then: not a constant in the Open MPI ABI).
static USER_WORLD: AtomicHandle = AtomicHandle::new(0);

/// This process's rank and size in the application's world.
pub fn world() -> World {
    World {
        rank: WORLD_RANK.load(Ordering::Relaxed),
        size: WORLD_SIZE.load(Ordering::Relaxed),
    }
}

/// Records the application's world (at init, and again when ghosts take their ranks out).
pub fn set_world(w: World) {
    WORLD_RANK.store(w.rank, Ordering::Relaxed);
    WORLD_SIZE.store(w.size, Ordering::Relaxed);
}

/// This process's rank among the processes of its node, and their number.
pub fn local() -> World {
    World {
        rank: LOCAL_RANK.load(Ordering::Relaxed),
        size: LOCAL_SIZE.load(Ordering::Relaxed),
    }
}

/// Records the node's processes (from the census at init).
pub fn set_local(l: World) {
    LOCAL_RANK.store(l.rank, Ordering::Relaxed);
    LOCAL_SIZE.store(l.size, Ordering::Relaxed);
}

static ONE_NODE: AtomicBool = AtomicBool::new(false);

/// Whether the whole job runs on one node (every communicator's ranks then share it).
pub fn one_node() -> bool {
    ONE_NODE.load(Ordering::Relaxed)
}

/// Records whether the job is on one node (from the census at init).
pub fn set_one_node(b: bool) {
    ONE_NODE.store(b, Ordering::Relaxed);
}

/// Each `MPI_COMM_WORLD` rank's node key (from the census at init), ghosts included.
static NODE_KEYS: std::sync::OnceLock<Vec<u64>> = std::sync::OnceLock::new();

/// Records every world rank's node key (once, at init).
pub fn set_node_keys(keys: Vec<u64>) {
    let _ = NODE_KEYS.set(keys);
}

/// On how many nodes the given `MPI_COMM_WORLD` ranks are: 1 in a job on one node or
/// before the census; a rank the census does not know (`MPI_UNDEFINED`, or a process
/// spawned later) counts as a node of its own.
pub fn nodes_of(world_ranks: &[c_int]) -> i32 {
    if one_node() {
        return 1;
    }
    NODE_KEYS
        .get()
        .map_or(1, |keys| count_nodes(keys, world_ranks))
}

/// [`nodes_of`] with the census's node keys.
fn count_nodes(keys: &[u64], world_ranks: &[c_int]) -> i32 {
    let mut seen = std::collections::HashSet::new();
    let mut strangers = 0;
    for &r in world_ranks {
        match usize::try_from(r).ok().and_then(|r| keys.get(r)) {
            Some(&k) => {
                seen.insert(k);
            }
            None => strangers += 1,
        }
    }
    (seen.len() + strangers).max(1) as i32
}

/// The job's processes on this machine (one kernel, one set of processors), which may
/// hold several nodes: containers or network namespaces with their own host names.
static MACHINE_SIZE: AtomicI32 = AtomicI32::new(1);

/// Records [`Census::machine_size`] for this rank (from the census at init).
pub fn set_machine_size(n: i32) {
    MACHINE_SIZE.store(n, Ordering::Relaxed);
}

/// More of the job's processes on this machine than processors. MPICH's own collectives
/// then busy-poll without yielding, so a waiting rank burns the time slice the rank it
/// waits for needs (measured on 2 cores: mpi4py's test_cco_vec at 3 ranks takes 153 s when
/// `auto` hands calls to the system MPI and 2.5 s on the shim's schedules, which yield
/// while waiting). Counted per machine, not per node: nodes that are namespaces of one
/// machine share its processors, and a ghost that polls there without pause keeps the
/// scheduler from ever giving two users a processor each (README, "An emulated cluster").
pub fn oversubscribed() -> bool {
    // the processor count once: `sysconf` reads sysfs on every call (microseconds), and
    // this is asked on every blocking shared-memory collective
    static CPUS: std::sync::OnceLock<i32> = std::sync::OnceLock::new();
    // a machine's processes include its node's (the node key hashes the boot id too)
    MACHINE_SIZE.load(Ordering::Relaxed) > *CPUS.get_or_init(node_cpus)
}

static ANY_OVERSUBSCRIBED: AtomicBool = AtomicBool::new(false);

/// Whether any node of the job is oversubscribed ([`oversubscribed`] there), the same
/// answer on every rank: decisions that ranks of one communicator must make alike (whether
/// `auto` may hand a call to the system MPI) use this, never the node-local fact, since the
/// ranks of one communicator may sit on nodes that differ (3 processes on one node and 2 on
/// another, of 2 processors each: the first node's ranks ran the shim's Barrier and the
/// second's the library's, and the job hung).
pub fn any_oversubscribed() -> bool {
    ANY_OVERSUBSCRIBED.load(Ordering::Relaxed)
}

static NODES_ARE_MACHINES: AtomicBool = AtomicBool::new(false);

/// Whether every node of the job is a machine of its own ([`Census::nodes_are_machines`]),
/// the same answer on every rank.
pub fn nodes_are_machines() -> bool {
    NODES_ARE_MACHINES.load(Ordering::Relaxed)
}

/// Records [`nodes_are_machines`] (from the census at init).
pub fn set_nodes_are_machines(b: bool) {
    NODES_ARE_MACHINES.store(b, Ordering::Relaxed);
}

/// Records [`any_oversubscribed`] (from the census at init).
pub fn set_any_oversubscribed(b: bool) {
    ANY_OVERSUBSCRIBED.store(b, Ordering::Relaxed);
}

/// Processors online on this node. Not [`cpus`]: a library that pins each rank to one core
/// (Intel MPI does by default) leaves every process an affinity mask of one, which would
/// make any node with two ranks look oversubscribed.
pub fn node_cpus() -> i32 {
    // SAFETY: sysconf has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    if n > 0 { n as i32 } else { cpus() }
}

/// Processors this process may run on.
pub fn cpus() -> i32 {
    std::thread::available_parallelism()
        .map(|n| n.get() as i32)
        .unwrap_or(1)
}

/// Are ghosts on (in a user process)?
#[inline]
pub fn ghosts_active() -> bool {
    GHOSTS_ON.load(Ordering::Relaxed)
}

/// With ghosts, `MPI_COMM_WORLD` is the user world from now on (`None`: no longer).
pub fn set_user_world(uw: Option<MPI_Comm>) {
    if let Some(c) = uw {
        USER_WORLD.store(c, Ordering::Relaxed);
    }
    GHOSTS_ON.store(uw.is_some(), Ordering::Relaxed);
}

/// `MPI_COMM_WORLD` as the application sees it (the user world when ghosts are on).
#[inline(always)]
pub fn map_world(comm: MPI_Comm) -> MPI_Comm {
    if GHOSTS_ON.load(Ordering::Relaxed) && comm == MPI_COMM_WORLD() {
        USER_WORLD.load(Ordering::Relaxed)
    } else {
        comm
    }
}

/// The application's world (for the shim's own collective use of it).
pub fn user_world() -> MPI_Comm {
    map_world(MPI_COMM_WORLD())
}

/// What every rank told the others at init.
pub struct Census {
    /// Each world rank's node key.
    pub nodes: Vec<u64>,
    /// Each world rank's machine key: ranks with one key share a kernel and its
    /// processors, whatever their host names.
    pub machines: Vec<u64>,
    /// Each world rank's count of its node's processors ([`node_cpus`]).
    pub cpus: Vec<u64>,
}

impl Census {
    /// Whether some machine holds more processes than it has processors (one pass: this
    /// runs at init on every rank, over every rank of the job).
    pub fn any_oversubscribed(&self) -> bool {
        let mut per_machine: std::collections::HashMap<u64, (u64, u64)> =
            std::collections::HashMap::new();
        for (&k, &c) in self.machines.iter().zip(&self.cpus) {
            let e = per_machine.entry(k).or_insert((0, u64::MAX));
            e.0 += 1;
            e.1 = e.1.min(c);
        }
        per_machine.values().any(|&(n, c)| n > c)
    }

    /// Whether every node of the job is a machine of its own (no machine holds ranks of
    /// two nodes): then the nodes talk through a real network, not through the memory
    /// of one machine as the namespaces of an emulated cluster do.
    pub fn nodes_are_machines(&self) -> bool {
        let mut node_of_machine: std::collections::HashMap<u64, u64> =
            std::collections::HashMap::new();
        self.machines
            .iter()
            .zip(&self.nodes)
            .all(|(&m, &n)| *node_of_machine.entry(m).or_insert(n) == n)
    }

    /// How many of the job's processes share `rank`'s machine.
    pub fn machine_size(&self, rank: usize) -> usize {
        let k = self.machines[rank];
        self.machines.iter().filter(|&&x| x == k).count()
    }

    /// This rank's index among the ranks of its node (in world rank order), and their number.
    pub fn local(&self, rank: usize) -> (usize, usize) {
        let k = self.nodes[rank];
        let before = self.nodes[..rank].iter().filter(|&&x| x == k).count();
        (before, self.nodes.iter().filter(|&&x| x == k).count())
    }
}

/// Aborts the whole job (every rank), or this process when MPI is not running.
pub fn abort_job(code: c_int) -> ! {
    let mut init: c_int = 0;
    let mut fin: c_int = 0;
    // SAFETY: both queries are valid at any time (MPI-4.0 §11.2.1).
    unsafe {
        pmpi::PMPI_Initialized(&mut init);
        pmpi::PMPI_Finalized(&mut fin);
        if init != 0 && fin == 0 {
            // the message written just before is on its way through the launcher's pipe:
            // an abort that reaches the launcher first can end the job before the line
            // is forwarded (hydra dropped a panic's line once in CI), so let it drain
            std::thread::sleep(std::time::Duration::from_millis(200));
            pmpi::PMPI_Abort(MPI_COMM_WORLD(), code);
        }
    }
    std::process::abort();
}

#[cfg(test)]
mod tests {
    use super::Census;

    #[test]
    fn a_communicator_spans_the_nodes_of_its_ranks() {
        // world ranks 0-1 on node 7, 2-3 on node 9, 4 on node 7
        let keys = [7, 7, 9, 9, 7];
        let cases: [(&[i32], i32); 6] = [
            (&[0, 1], 1),
            (&[0, 2], 2),
            (&[4, 0, 1], 1),
            (&[0, 1, 2, 3, 4], 2),
            // a process the census does not know (spawned, or MPI_UNDEFINED) is a node
            (&[0, 5], 2),
            (&[], 1),
        ];
        for (ranks, want) in cases {
            assert_eq!(super::count_nodes(&keys, ranks), want, "{ranks:?}");
        }
        assert_eq!(super::count_nodes(&keys, &[-32766, -32766]), 2);
    }

    #[test]
    fn one_oversubscribed_machine_makes_the_job_oversubscribed() {
        // (node keys, machine keys, processors each rank reported) -> any machine
        // oversubscribed, and how many processes share rank 0's machine
        let cases: [(&[u64], &[u64], &[u64], bool, usize); 7] = [
            (&[1, 1, 2, 2], &[1, 1, 2, 2], &[2, 2, 2, 2], false, 2),
            (&[1, 1, 1, 2, 2], &[1, 1, 1, 2, 2], &[2; 5], true, 3),
            (&[1, 2, 2, 2], &[1, 2, 2, 2], &[2, 4, 4, 4], false, 1),
            (&[1, 2, 2, 2], &[1, 2, 2, 2], &[4, 2, 2, 2], true, 1),
            (&[7], &[7], &[1], false, 1),
            // two nodes that are namespaces of one 2-processor machine: 2 + 2 processes
            // share its processors
            (&[1, 1, 2, 2], &[5, 5, 5, 5], &[2, 2, 2, 2], true, 4),
            (&[1, 2], &[5, 5], &[2, 2], false, 2),
        ];
        for (nodes, machines, cpus, want, size0) in cases {
            let c = Census {
                nodes: nodes.to_vec(),
                machines: machines.to_vec(),
                cpus: cpus.to_vec(),
            };
            assert_eq!(
                c.any_oversubscribed(),
                want,
                "{nodes:?} {machines:?} {cpus:?}"
            );
            assert_eq!(c.machine_size(0), size0, "{nodes:?} {machines:?}");
        }
    }

    #[test]
    fn nodes_are_machines_only_where_no_machine_holds_two_nodes() {
        // (node keys, machine keys) -> every node a machine of its own
        let cases: [(&[u64], &[u64], bool); 5] = [
            (&[1, 1, 2, 2], &[5, 5, 6, 6], true),
            (&[1, 2, 3], &[5, 6, 7], true),
            (&[7, 7], &[5, 5], true),
            // namespaces of one machine (the emulated cluster): one network of memory
            (&[1, 1, 2, 2], &[5, 5, 5, 5], false),
            (&[1, 2, 3], &[5, 6, 6], false),
        ];
        for (nodes, machines, want) in cases {
            let c = Census {
                nodes: nodes.to_vec(),
                machines: machines.to_vec(),
                cpus: vec![2; nodes.len()],
            };
            assert_eq!(c.nodes_are_machines(), want, "{nodes:?} {machines:?}");
        }
    }
}

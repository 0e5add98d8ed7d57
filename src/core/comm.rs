//! Layer: core. May use: platform.
//!
//! Per-communicator state of the collective engine.
//!
//! Isolation from user traffic (design notes, "Decisions already made"): every user
//! communicator gets a private shadow, a duplicate, on its first collective; all schedule
//! messages travel on the shadow, so they can never match the application's
//! point-to-point messages, whatever tags or `MPI_ANY_TAG` it uses. Each collective
//! instance gets its own block of tags on the shadow, so any number of outstanding
//! collectives on one communicator never cross-match either.
//!
//! The shadow is created with `PMPI_Comm_idup`, not `PMPI_Comm_dup`: the first collective
//! on two communicators may be non-blocking and started in different orders on different
//! ranks, which a blocking duplicate would deadlock. Schedules wait for the duplicate like
//! for any other message.
//!
//! The duplicate is started by the first schedule launched on the communicator (every rank
//! launches a schedule for the same collective instance, so every rank starts it at the
//! same point of the communicator's collective order), never for a call the system MPI
//! carries out: a pending `MPI_Comm_idup` holds a reference on its parent, so the
//! application's `MPI_Comm_free` would not release the parent (nor run the attribute
//! callback that frees the shadow), and a program that dups and frees communicators in a
//! loop runs out of context ids. Every run waits for the duplicate before it finishes, and
//! `MPI_Comm_free` completes one still pending (a persistent collective initialized and
//! never started).
//!
//! The state is cached in an attribute of the user communicator (MPI-4.0 §7.7) whose
//! delete callback releases it when the application frees the communicator; runs still in
//! flight keep it alive (it is reference counted) until they finish.

use core::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicI32, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use crate::core::sched::cache::Cache;
use crate::platform::abi::*;
use crate::platform::mpi::{comm as mpi_comm, p2p};

/// Tags are handed out in blocks of this many (Cartesian neighbourhood collectives use
/// two per dimension).
pub const TAG_BLOCK: c_int = 64;

static KEYVAL: AtomicI32 = AtomicI32::new(MPI_KEYVAL_INVALID);
static TAG_UB: AtomicI32 = AtomicI32::new(32767);

/// The neighbours of a process in a topology (MPI-4.0 §8.6).
#[derive(Clone, Debug)]
pub struct Neighbors {
    pub sources: Vec<c_int>,
    pub dests: Vec<c_int>,
    /// Cartesian: neighbour 2d is the source and 2d+1 the destination of a shift by 1 in
    /// dimension d, and messages are matched by direction.
    pub cart: bool,
    /// A process appears more than once among the sources or among the destinations.
    pub repeated: bool,
}

impl Neighbors {
    fn new(sources: Vec<c_int>, dests: Vec<c_int>, cart: bool) -> Neighbors {
        let twice = |l: &[c_int]| {
            let mut v: Vec<c_int> = l.iter().copied().filter(|&r| r != MPI_PROC_NULL).collect();
            v.sort_unstable();
            v.windows(2).any(|w| w[0] == w[1])
        };
        let repeated = twice(&sources) || twice(&dests);
        Neighbors {
            sources,
            dests,
            cart,
            repeated,
        }
    }
}

pub struct CommState {
    pub user: MPI_Comm,
    pub rank: c_int,
    pub size: c_int,
    pub inter: bool,
    /// The remote group's size (an intercommunicator's), else `size`.
    pub remote_size: c_int,
    shadow: AtomicHandle,
    /// A pending `PMPI_Comm_idup`: the request and the cell it writes the new handle to.
    dup: Mutex<Option<Box<(MPI_Request, MPI_Comm)>>>,
    seq: AtomicU32,
    bseq: AtomicU32,
    pseq: AtomicU32,
    topo: OnceLock<Result<Neighbors, c_int>>,
    pub cache: Mutex<Cache>,
    /// The shared-memory segment, once set up (see [`NodeState`]).
    pub node: Mutex<NodeState>,
    /// Non-blocking collectives started that could use shared memory (the instance
    /// numbers of the segment's non-blocking channel, from `Node::nb_from` on).
    pub nb_eligible: AtomicU32,
    /// The segment's set-up started in a non-blocking collective ([`NodeState::Pending`]),
    /// at the same call on every rank: its non-blocking calls that could take the segment
    /// may have waited for it on some rank, so they are decided alike without it.
    pub nb_setup: std::sync::atomic::AtomicBool,
    /// The verbs wire (`SHIM_TRANSPORT=verbs`), once set up.
    pub wire: Mutex<WireState>,
    /// On how many nodes its (local group's) processes are, once asked ([`Self::nodes`]).
    nodes: OnceLock<c_int>,
}

/// Where a communicator stands with the verbs wire.
pub enum WireState {
    /// Not set up yet (at its first blocking collective with a schedule).
    Unset,
    Ready(Arc<crate::core::transport::verbs::Wire>),
    /// Not possible on some rank, or not wanted.
    Off,
}

/// Where a communicator stands with its shared-memory segment.
pub enum NodeState {
    /// Blocking collectives that could have used it so far (set up at a configured count).
    Counting(u32),
    /// Being set up without waiting, from a non-blocking collective (one node only).
    Pending(Arc<crate::core::transport::node::Setup>),
    Ready(Arc<crate::core::transport::node::Node>),
    /// Not possible (ranks on several nodes, no shared memory) or not wanted.
    Off,
}

impl CommState {
    /// The state of `user`, with no shadow yet and a schedule cache of `cache` entries.
    fn new(
        user: MPI_Comm,
        rank: c_int,
        size: c_int,
        inter: bool,
        remote_size: c_int,
        cache: usize,
    ) -> CommState {
        CommState {
            user,
            rank,
            size,
            inter,
            remote_size,
            shadow: AtomicHandle::new(MPI_COMM_NULL()),
            dup: Mutex::new(None),
            seq: AtomicU32::new(0),
            bseq: AtomicU32::new(0),
            pseq: AtomicU32::new(0),
            topo: OnceLock::new(),
            cache: Mutex::new(Cache::new(cache)),
            node: Mutex::new(NodeState::Counting(0)),
            nb_eligible: AtomicU32::new(0),
            nb_setup: std::sync::atomic::AtomicBool::new(false),
            wire: Mutex::new(WireState::Unset),
            nodes: OnceLock::new(),
        }
    }

    /// On how many nodes the processes of its (local) group are, from the census taken at
    /// init: local, the same on every rank, asked during a call on it (the handle is
    /// valid) and kept. 1 in a job on one node, without a call to the library; where the
    /// group cannot be read, 1 (the one-node rules apply).
    pub fn nodes(&self) -> c_int {
        *self.nodes.get_or_init(|| {
            if crate::platform::proc::one_node() {
                return 1;
            }
            let Ok(mut mine) = mpi_comm::group(self.user) else {
                return 1;
            };
            let n = match mpi_comm::group(MPI_COMM_WORLD()) {
                Ok(mut world) => {
                    let ranks: Vec<c_int> = (0..self.size).collect();
                    let mut out = vec![MPI_UNDEFINED; ranks.len()];
                    let n = match mpi_comm::group_translate_ranks(mine, &ranks, world, &mut out) {
                        Ok(()) => crate::platform::proc::nodes_of(&out),
                        Err(_) => 1,
                    };
                    let _ = mpi_comm::group_free(&mut world);
                    n
                }
                Err(_) => 1,
            };
            let _ = mpi_comm::group_free(&mut mine);
            n
        })
    }

    /// The verbs wire the schedules of this communicator use, if it is set up (never on
    /// an inter-communicator: their peers are the remote group's).
    pub fn wire(&self) -> Option<Arc<crate::core::transport::verbs::Wire>> {
        if self.inter {
            return None;
        }
        match &*self.wire.lock().unwrap_or_else(|e| e.into_inner()) {
            WireState::Ready(w) => Some(Arc::clone(w)),
            _ => None,
        }
    }

    /// Starts the shadow's duplication if it has not been started (see the module
    /// comment): called when a schedule is launched on the communicator.
    pub fn ensure_shadow(&self) {
        if self.shadow.load(Ordering::Acquire) != MPI_COMM_NULL() {
            return;
        }
        let mut g = self.dup.lock().unwrap_or_else(|e| e.into_inner());
        if g.is_some() || self.shadow.load(Ordering::Acquire) != MPI_COMM_NULL() {
            return;
        }
        let mut cell = Box::new((MPI_REQUEST_NULL(), MPI_COMM_NULL()));
        // SAFETY: the box keeps the new handle's location at a fixed address until
        // completion; the user communicator is valid (its state exists, so it has not been
        // freed).
        if let Ok(req) = unsafe { mpi_comm::idup(self.user, &mut cell.1) } {
            cell.0 = req;
            *g = Some(cell);
        }
    }

    /// Whether a duplication is still pending.
    pub(crate) fn dup_pending(&self) -> bool {
        self.dup.lock().unwrap_or_else(|e| e.into_inner()).is_some()
    }

    /// Whether the shadow exists (testing a pending duplicate if there is one).
    pub fn shadow_ready(&self) -> bool {
        if self.shadow.load(Ordering::Acquire) != MPI_COMM_NULL() {
            return true;
        }
        let mut g = self.dup.lock().unwrap_or_else(|e| e.into_inner());
        let Some(p) = g.as_mut() else {
            drop(g);
            // not started yet (a run started before its launch asked for it, or the start
            // failed): start it now, so that the run can go on
            self.ensure_shadow();
            return false;
        };
        // p.0 is the idup request; p.1 stays at a fixed address (boxed).
        if !p2p::test(&mut p.0).unwrap_or(false) {
            return false;
        }
        let shadow = p.1;
        // a valid new communicator; schedules want error codes, not aborts
        let _ = mpi_comm::set_errhandler(shadow, MPI_ERRORS_RETURN());
        self.shadow.store(shadow, Ordering::Release);
        *g = None;
        true
    }

    /// The shadow communicator (only valid once `shadow_ready`).
    pub fn shadow(&self) -> MPI_Comm {
        self.shadow.load(Ordering::Acquire)
    }

    /// Tag blocks of the three sequences: (persistent, blocking, non-blocking).
    fn tag_blocks() -> (u32, u32, u32) {
        let total =
            ((TAG_UB.load(Ordering::Relaxed) as u32).saturating_add(1) / TAG_BLOCK as u32).max(8);
        let persistent = (total / 4).min(16384);
        let blocking = (total / 8).min(1024);
        (persistent, blocking, total - persistent - blocking)
    }

    /// First tag of a new block for a collective instance. All ranks call collectives on a
    /// communicator in the same order (MPI-4.0 §6.12), so the counters agree without
    /// communication. Blocking and non-blocking collectives count separately, as in
    /// MPICH: programs that (erroneously) interleave a blocking and a non-blocking
    /// collective in different orders on different ranks then still match, as they do
    /// with the system MPI (mpi4py's `Iagree` fallback test does this).
    pub fn next_tag(&self, blocking: bool) -> c_int {
        let (p, b, n) = Self::tag_blocks();
        let block = if blocking {
            p + self.bseq.fetch_add(1, Ordering::Relaxed) % b
        } else {
            p + b + self.seq.fetch_add(1, Ordering::Relaxed) % n
        };
        (block * TAG_BLOCK as u32) as c_int
    }

    /// First tag of a block for a persistent collective (kept for the request's life, in
    /// a range the other sequences never use).
    pub fn next_persistent_tag(&self) -> c_int {
        let (p, _, _) = Self::tag_blocks();
        ((self.pseq.fetch_add(1, Ordering::Relaxed) % p) * TAG_BLOCK as u32) as c_int
    }

    /// Neighbour lists of the user communicator's topology (`Err(MPI_ERR_TOPOLOGY)`
    /// without one).
    pub fn neighbors(&self) -> Result<&Neighbors, c_int> {
        self.topo
            .get_or_init(|| query_neighbors(self.user, self.rank))
            .as_ref()
            .map_err(|e| *e)
    }
}

impl Drop for CommState {
    fn drop(&mut self) {
        // the segment may outlive the state (a thread's lane holds it), its driving
        // receive must not
        if let NodeState::Ready(n) = &*self.node.get_mut().unwrap_or_else(|e| e.into_inner()) {
            n.retire();
        }
        let pending = self.dup.get_mut().unwrap_or_else(|e| e.into_inner()).take();
        // handles owned by this state
        if let Some(mut p) = pending {
            let _ = p2p::wait(&mut p.0);
            self.shadow.store(p.1, Ordering::Relaxed);
        }
        let mut s = self.shadow.load(Ordering::Relaxed);
        if s != MPI_COMM_NULL() && !mpi_comm::finalized().unwrap_or(false) {
            let _ = mpi_comm::free(&mut s);
        }
    }
}

/// Neighbour lists of `comm`'s process topology, queried from the MPI library.
pub(crate) fn query_neighbors(comm: MPI_Comm, _rank: c_int) -> Result<Neighbors, c_int> {
    // Return codes are not checked: a failed query leaves the defaults below (as the
    // out-values a failing call does not write); arrays are sized by the counts MPI reports.
    match mpi_comm::topo_test(comm).unwrap_or(MPI_UNDEFINED) {
        MPI_CART => {
            let ndims = mpi_comm::cartdim_get(comm).unwrap_or(0);
            let mut list = Vec::with_capacity(2 * ndims.max(0) as usize);
            for d in 0..ndims {
                let (src, dst) =
                    mpi_comm::cart_shift(comm, d, 1).unwrap_or((MPI_PROC_NULL, MPI_PROC_NULL));
                list.push(src);
                list.push(dst);
            }
            Ok(Neighbors::new(list.clone(), list, true))
        }
        MPI_GRAPH => {
            let rank = mpi_comm::rank(comm).unwrap_or(0);
            let n = mpi_comm::graph_neighbors_count(comm, rank).unwrap_or(0);
            let mut list = vec![0; n.max(0) as usize];
            let _ = mpi_comm::graph_neighbors(comm, rank, &mut list);
            Ok(Neighbors::new(list.clone(), list, false))
        }
        MPI_DIST_GRAPH => {
            let (indeg, outdeg, _weighted) =
                mpi_comm::dist_graph_neighbors_count(comm).unwrap_or((0, 0, false));
            let mut src = vec![0; indeg.max(0) as usize];
            let mut dst = vec![0; outdeg.max(0) as usize];
            let mut sw = vec![0; indeg.max(1) as usize];
            let mut dw = vec![0; outdeg.max(1) as usize];
            let _ = mpi_comm::dist_graph_neighbors(comm, &mut src, &mut sw, &mut dst, &mut dw);
            Ok(Neighbors::new(src, dst, false))
        }
        _ => Err(MPI_ERR_TOPOLOGY),
    }
}

/// Attribute delete callback: the user freed the communicator (or MPI is finalizing).
unsafe extern "C" fn delete_state(
    _comm: MPI_Comm,
    _keyval: c_int,
    value: *mut c_void,
    _extra: *mut c_void,
) -> c_int {
    crate::platform::guard::guard("communicator attribute delete callback", || {
        GENERATION.fetch_add(1, Ordering::AcqRel);
        // a new communicator may reuse the handle: remembered calls on it are void
        crate::platform::memo::invalidate();
        if !value.is_null() {
            // SAFETY: the attribute holds one strong count of an Arc<CommState>.
            drop(unsafe { Arc::from_raw(value as *const CommState) });
        }
    });
    MPI_SUCCESS
}

/// Creates the attribute key and reads `MPI_TAG_UB` (at init).
pub fn init() {
    let del: unsafe extern "C" fn(MPI_Comm, c_int, *mut c_void, *mut c_void) -> c_int =
        delete_state;
    // SAFETY: a copy function that copies nothing (MPI_COMM_NULL_COPY_FN: duplicates do
    // not inherit the state) and our delete callback, which takes the values `lookup` sets.
    let kv = unsafe {
        mpi_comm::create_keyval(
            crate::platform::abi::null_copy_attr as *mut c_void,
            del as *mut c_void,
            core::ptr::null_mut(),
        )
    }
    .unwrap_or(MPI_KEYVAL_INVALID);
    if let Ok(Some(ub)) = mpi_comm::get_attr(MPI_COMM_WORLD(), MPI_TAG_UB) {
        if !ub.is_null() {
            // SAFETY: MPI_TAG_UB's value is a pointer to the int (MPI-4.0 §9.1.2).
            TAG_UB.store(unsafe { *(ub as *const c_int) }, Ordering::Relaxed);
        }
    }
    KEYVAL.store(kv, Ordering::Relaxed);
}

/// Every state created, to empty their schedule caches at finalize: MPI runs no delete
/// callback for communicators the application never freed, and cached schedules hold
/// derived datatypes that must be freed while MPI still works.
static LIVE: Mutex<Vec<std::sync::Weak<CommState>>> = Mutex::new(Vec::new());

/// Releases the states of the predefined communicators and the cached schedules of all
/// others (at finalize, while MPI works).
pub fn finalize() {
    let live = std::mem::take(&mut *LIVE.lock().unwrap_or_else(|e| e.into_inner()));
    for st in live.iter().filter_map(|w| w.upgrade()) {
        st.cache.lock().unwrap_or_else(|e| e.into_inner()).clear();
        // the segment goes now, with the receive it keeps pending on a duplicate to drive
        // the library (`transport::node`): no request of the shim's may outlive
        // MPI_Finalize (MPI-4.0 §11.2), and the communicators still alive here (the
        // world's, the ones the program never freed) would keep it past it
        let node = std::mem::replace(
            &mut *st.node.lock().unwrap_or_else(|e| e.into_inner()),
            NodeState::Off,
        );
        if let NodeState::Ready(n) = &node {
            n.retire();
        }
        drop(node);
        *st.wire.lock().unwrap_or_else(|e| e.into_inner()) = WireState::Off;
    }
    crate::core::transport::verbs::finalize();
    let mut kv = KEYVAL.swap(MPI_KEYVAL_INVALID, Ordering::Relaxed);
    if kv == MPI_KEYVAL_INVALID {
        return;
    }
    // Deleting an attribute that is not set is an error in Open MPI (MPICH ignores it).
    let delete_if_set = |comm: MPI_Comm| {
        // deleting our own attribute runs delete_state
        if let Ok(Some(_)) = mpi_comm::get_attr(comm, kv) {
            let _ = mpi_comm::delete_attr(comm, kv);
        }
    };
    delete_if_set(MPI_COMM_WORLD());
    if crate::platform::proc::ghosts_active() {
        delete_if_set(crate::platform::proc::user_world());
    }
    delete_if_set(MPI_COMM_SELF());
    // our key, no longer used
    let _ = mpi_comm::free_keyval(&mut kv);
}

/// The state of `comm`, created on first use. `Err(code)` if the handle is not a valid
/// communicator (the caller lets the system MPI report it).
pub fn get(comm: MPI_Comm) -> Result<Arc<CommState>, c_int> {
    if comm == MPI_COMM_NULL() {
        return Err(MPI_ERR_COMM);
    }
    if let Some(st) = recent(comm) {
        return Ok(st);
    }
    let st = lookup(comm)?;
    remember(comm, &st);
    Ok(st)
}

/// Bumped whenever a state is released (a communicator freed, finalize): entries of the
/// per-thread memo below from an older generation are not trusted.
/// `SHIM_SCHED_CACHE`: schedules kept per communicator. Handed over at init.
static SCHED_CACHE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(32);

/// Installs `SHIM_SCHED_CACHE` as read at init.
pub fn configure(sched_cache: usize) {
    SCHED_CACHE.store(sched_cache, Ordering::Relaxed);
}

static GENERATION: AtomicU64 = AtomicU64::new(0);

/// Entries in each thread's memo of recently used communicators.
const RECENT: usize = 4;

thread_local! {
    /// (communicator, generation, state) of the last communicators this thread used: the
    /// system MPI's attribute lookup (`PMPI_Comm_get_attr`, which takes MPICH's global lock)
    /// was a quarter of the shim's per-call cost for small collectives handed to `native`.
    /// The entries hold no reference: while the generation is unchanged, the attribute still
    /// holds its own (a communicator freed while another thread calls a collective on it is
    /// erroneous, MPI-4.0 §7.4.3).
    static MEMO: std::cell::Cell<[(MPI_Comm, u64, usize); RECENT]> =
        const { std::cell::Cell::new([(0 as MPI_Comm, u64::MAX, 0); RECENT]) };
}

fn recent(comm: MPI_Comm) -> Option<Arc<CommState>> {
    let generation = GENERATION.load(Ordering::Acquire);
    let memo = MEMO.get();
    let &(_, _, ptr) = memo.iter().find(|e| e.0 == comm && e.1 == generation)?;
    // SAFETY: the generation is unchanged since `ptr` was read from the attribute, so the
    // attribute still holds its strong count and the state is alive; take one for the caller.
    unsafe {
        Arc::increment_strong_count(ptr as *const CommState);
        Some(Arc::from_raw(ptr as *const CommState))
    }
}

fn remember(comm: MPI_Comm, st: &Arc<CommState>) {
    // Read before the state is published here: a release after this read makes the entry
    // stale at once.
    let generation = GENERATION.load(Ordering::Acquire);
    let mut memo = MEMO.get();
    memo.rotate_right(1);
    memo[0] = (comm, generation, Arc::as_ptr(st) as usize);
    MEMO.set(memo);
}

/// The state from the communicator's attribute, or a new one.
fn lookup(comm: MPI_Comm) -> Result<Arc<CommState>, c_int> {
    let kv = KEYVAL.load(Ordering::Relaxed);
    // an invalid communicator yields an error code
    let value = mpi_comm::get_attr(comm, kv).map_err(|e| e.code())?;
    if let Some(value) = value.filter(|v| !v.is_null()) {
        // SAFETY: the attribute holds a strong count; take another for the caller.
        unsafe {
            Arc::increment_strong_count(value as *const CommState);
            return Ok(Arc::from_raw(value as *const CommState));
        }
    }
    // a valid communicator (the attribute query succeeded); codes unchecked as before
    let inter = mpi_comm::test_inter(comm).unwrap_or(false);
    let rank = mpi_comm::rank(comm).unwrap_or(0);
    let size = mpi_comm::size(comm).unwrap_or(0);
    let mut remote_size = size;
    if inter {
        remote_size = mpi_comm::remote_size(comm).unwrap_or(remote_size);
    }
    let state = Arc::new(CommState::new(
        comm,
        rank,
        size,
        inter,
        remote_size,
        SCHED_CACHE.load(Ordering::Relaxed),
    ));
    {
        let mut live = LIVE.lock().unwrap_or_else(|e| e.into_inner());
        live.retain(|w| w.strong_count() > 0);
        live.push(Arc::downgrade(&state));
    }
    let raw = Arc::into_raw(Arc::clone(&state));
    // SAFETY: the attribute takes over one strong count (released by delete_state).
    let _ = unsafe { mpi_comm::set_attr(comm, kv, raw as *mut c_void) };
    Ok(state)
}

/// Whether the system MPI accepts `comm` as a communicator (a null, garbage or freed
/// handle is not: it then reports the error itself).
pub fn valid(comm: MPI_Comm) -> bool {
    if comm == MPI_COMM_NULL() {
        return false;
    }
    // an invalid handle yields an error code (the real world's handler is
    // MPI_ERRORS_RETURN, src/errors.rs)
    mpi_comm::size(comm).is_ok()
}

/// The state of `comm` if the shim made one (no new state, no error).
pub(crate) fn existing(comm: MPI_Comm) -> Option<Arc<CommState>> {
    let kv = KEYVAL.load(Ordering::Relaxed);
    if kv == MPI_KEYVAL_INVALID || comm == MPI_COMM_NULL() {
        return None;
    }
    // an invalid communicator yields an error code (the real world returns errors,
    // src/errors.rs)
    let value = mpi_comm::get_attr(comm, kv).ok().flatten()?;
    if value.is_null() {
        return None;
    }
    // SAFETY: the attribute holds a strong count; take another for the caller.
    unsafe {
        Arc::increment_strong_count(value as *const CommState);
        Some(Arc::from_raw(value as *const CommState))
    }
}
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repeated_neighbours_are_found() {
        // a periodic dimension of size 2: both neighbours are the other process
        assert!(Neighbors::new(vec![1, 1], vec![1, 1], true).repeated);
        // of size 1 or non-periodic ends: MPI_PROC_NULL repeats without harm
        assert!(!Neighbors::new(vec![MPI_PROC_NULL, 1], vec![1, MPI_PROC_NULL], true).repeated);
        assert!(!Neighbors::new(vec![MPI_PROC_NULL; 2], vec![MPI_PROC_NULL; 2], true).repeated);
        // a graph with a repeated edge, in either direction
        assert!(Neighbors::new(vec![0, 2, 0], vec![1], false).repeated);
        assert!(Neighbors::new(vec![1], vec![3, 2, 3], false).repeated);
        assert!(!Neighbors::new(vec![0, 1, 2], vec![2, 1, 0], false).repeated);
    }

    use crate::platform::mpi::fake;
    use std::cell::RefCell;
    use std::collections::HashMap;
    use std::rc::Rc;

    const DUP_REQ: i64 = 90;
    const SHADOW: i64 = 0x4400_0123;
    /// An error code as an MPI library returns it (more than the class).
    const CODE: c_int = 0x0004_2a05;

    /// A state of `user` made directly, without MPI calls (rank 0 of 2).
    fn state(user: i64) -> CommState {
        CommState::new(user as MPI_Comm, 0, 2, false, 2, 4)
    }

    fn args_of(name: &str) -> Vec<Vec<i64>> {
        fake::calls()
            .into_iter()
            .filter(|c| c.name == name)
            .map(|c| c.args)
            .collect()
    }

    #[test]
    fn the_state_comes_from_mpi_queries_and_lives_in_an_attribute() {
        // (test_inter, size, remote_size): an intercommunicator also asks its remote size
        for (k, (inter, size, remote)) in [(false, 4, 4), (true, 3, 5)].into_iter().enumerate() {
            let user = 0x4400_2001 + k as i64;
            // the attribute as MPI keeps it: what set_attr stored, get_attr returns
            let attrs: Rc<RefCell<HashMap<i64, i64>>> = Default::default();
            let a = Rc::clone(&attrs);
            let _g = fake::install(move |c| {
                Ok(match c.name {
                    "comm_get_attr" => match a.borrow().get(&c.args[0]) {
                        Some(&v) => vec![1, v],
                        None => vec![0, 0],
                    },
                    "comm_set_attr" => {
                        a.borrow_mut().insert(c.args[0], c.args[2]);
                        vec![]
                    }
                    "comm_test_inter" => vec![inter as i64],
                    "comm_rank" => vec![1],
                    "comm_size" => vec![size],
                    "comm_remote_size" => vec![remote],
                    _ => return Err(MPI_ERR_OTHER),
                })
            });
            let st = get(user as MPI_Comm).unwrap();
            assert_eq!(
                (st.user, st.rank, st.size),
                (user as MPI_Comm, 1, size as c_int)
            );
            assert_eq!((st.inter, st.remote_size), (inter, remote as c_int));
            let mut expected = vec![
                "comm_get_attr",
                "comm_test_inter",
                "comm_rank",
                "comm_size",
                "comm_set_attr",
            ];
            if inter {
                expected.insert(4, "comm_remote_size");
            }
            assert_eq!(fake::names(), expected);
            // the attribute holds the state (one strong count of its own)
            assert_eq!(attrs.borrow()[&user], Arc::as_ptr(&st) as i64);
            assert_eq!(Arc::strong_count(&st), 2);
            // the next call finds the same state, without asking for it again
            let again = get(user as MPI_Comm).unwrap();
            assert!(Arc::ptr_eq(&st, &again));
            assert_eq!(args_of("comm_test_inter").len(), 1);
            assert_eq!(args_of("comm_set_attr").len(), 1);
            drop(again);
            // the delete callback (the application frees the communicator) releases the
            // attribute's count; the state lives on while a run holds it
            let raw = attrs.borrow_mut().remove(&user).unwrap();
            // SAFETY: the value the attribute holds, handed over as MPI would.
            let rc = unsafe {
                delete_state(
                    user as MPI_Comm,
                    0,
                    raw as usize as *mut c_void,
                    core::ptr::null_mut(),
                )
            };
            assert_eq!(rc, MPI_SUCCESS);
            assert_eq!(Arc::strong_count(&st), 1);
            // a state without a shadow frees nothing
            let n = fake::calls().len();
            drop(st);
            assert_eq!(fake::calls().len(), n);
        }
    }

    #[test]
    fn an_invalid_communicator_gives_back_the_code_of_the_attribute_query() {
        let _g = fake::install(|_| Err(CODE));
        assert_eq!(get(0x4400_2010 as MPI_Comm).err(), Some(CODE));
        assert_eq!(fake::names(), ["comm_get_attr"]);
        assert!(!valid(0x4400_2010 as MPI_Comm));
        // the null handle is rejected without asking MPI
        let n = fake::calls().len();
        assert_eq!(get(MPI_COMM_NULL()).err(), Some(MPI_ERR_COMM));
        assert!(!valid(MPI_COMM_NULL()));
        assert_eq!(fake::calls().len(), n);
    }

    #[test]
    fn the_shadow_is_duplicated_once_and_ready_when_its_request_completes() {
        let done = Rc::new(RefCell::new(false));
        let d = Rc::clone(&done);
        let _g = fake::install(move |c| {
            Ok(match c.name {
                "comm_idup" => vec![DUP_REQ, SHADOW],
                "test" => vec![*d.borrow() as i64],
                "comm_set_errhandler" | "finalized" | "comm_free" => vec![0],
                _ => return Err(MPI_ERR_OTHER),
            })
        });
        let st = state(0x4400_2020);
        st.ensure_shadow();
        st.ensure_shadow();
        assert_eq!(args_of("comm_idup"), [vec![0x4400_2020]], "one duplicate");
        assert!(st.dup_pending());
        assert!(!st.shadow_ready());
        assert_eq!(st.shadow(), MPI_COMM_NULL());
        *done.borrow_mut() = true;
        assert!(st.shadow_ready());
        assert_eq!(st.shadow(), SHADOW as MPI_Comm);
        assert!(!st.dup_pending());
        // the schedules want error codes on the shadow, not the default abort
        assert_eq!(
            args_of("comm_set_errhandler"),
            [vec![SHADOW, MPI_ERRORS_RETURN() as i64]]
        );
        assert_eq!(args_of("test"), [vec![DUP_REQ], vec![DUP_REQ]]);
        // ready: no more tests, no new duplicate
        assert!(st.shadow_ready());
        st.ensure_shadow();
        assert_eq!(args_of("test").len(), 2);
        assert_eq!(args_of("comm_idup").len(), 1);
        drop(st);
        assert_eq!(args_of("comm_free"), [vec![SHADOW]]);
    }

    #[test]
    fn a_duplicate_that_failed_to_start_is_started_again_by_the_run() {
        let mut idups = 0;
        let _g = fake::install(move |c| match c.name {
            "comm_idup" => {
                idups += 1;
                if idups == 1 {
                    Err(CODE)
                } else {
                    Ok(vec![DUP_REQ, SHADOW])
                }
            }
            "test" | "finalized" => Ok(vec![0]),
            _ => Ok(vec![]),
        });
        let st = state(0x4400_2030);
        st.ensure_shadow();
        assert!(!st.dup_pending(), "a failed start leaves nothing pending");
        assert!(!st.shadow_ready());
        assert!(st.dup_pending());
        assert_eq!(fake::names(), ["comm_idup", "comm_idup"]);
        // the pending duplicate is tested from now on
        assert!(!st.shadow_ready());
        assert_eq!(args_of("test"), [vec![DUP_REQ]]);
        // dropped with the duplicate pending: it is completed first
        drop(st);
        assert_eq!(args_of("wait"), [vec![DUP_REQ]]);
        assert_eq!(args_of("comm_free"), [vec![SHADOW]]);
    }

    #[test]
    fn dropping_a_state_completes_its_duplicate_and_frees_the_shadow_unless_finalized() {
        // (duplicate pending, shadow ready, MPI finalized) -> calls at drop
        let cases: [(bool, bool, bool, &[&str]); 5] = [
            (true, false, false, &["wait", "finalized", "comm_free"]),
            (true, false, true, &["wait", "finalized"]),
            (false, true, false, &["finalized", "comm_free"]),
            (false, true, true, &["finalized"]),
            (false, false, false, &[]),
        ];
        for (pending, ready, finalized, calls) in cases {
            let _g = fake::install(move |c| {
                Ok(match c.name {
                    "finalized" => vec![finalized as i64],
                    _ => vec![],
                })
            });
            let st = state(0x4400_2040);
            if pending {
                *st.dup.lock().unwrap() =
                    Some(Box::new((DUP_REQ as MPI_Request, SHADOW as MPI_Comm)));
            }
            if ready {
                st.shadow.store(SHADOW as MPI_Comm, Ordering::Release);
            }
            drop(st);
            assert_eq!(fake::names(), calls, "{pending} {ready} {finalized}");
            if pending {
                assert_eq!(args_of("wait"), [vec![DUP_REQ]]);
            }
            if !finalized && (pending || ready) {
                assert_eq!(args_of("comm_free"), [vec![SHADOW]]);
            }
        }
    }

    #[test]
    fn tag_blocks_follow_the_collective_order_per_sequence() {
        let tag_ub = TAG_UB.load(Ordering::Relaxed);
        let (a, b) = (state(0x4400_2050), state(0x4400_2051));
        // rank A starts blocking and non-blocking collectives interleaved, rank B all
        // blocking ones first: each sequence still agrees between them
        let mut a_blocking = Vec::new();
        let mut a_nonblocking = Vec::new();
        for _ in 0..100 {
            a_blocking.push(a.next_tag(true));
            a_nonblocking.push(a.next_tag(false));
        }
        let b_blocking: Vec<c_int> = (0..100).map(|_| b.next_tag(true)).collect();
        let b_nonblocking: Vec<c_int> = (0..100).map(|_| b.next_tag(false)).collect();
        assert_eq!(a_blocking, b_blocking);
        assert_eq!(a_nonblocking, b_nonblocking);
        let persistent: Vec<c_int> = (0..100).map(|_| a.next_persistent_tag()).collect();
        // every tag of every block is a valid tag
        for &t in a_blocking.iter().chain(&a_nonblocking).chain(&persistent) {
            assert_eq!(t % TAG_BLOCK, 0);
            assert!(t >= 0 && t + TAG_BLOCK - 1 <= tag_ub, "{t}");
        }
        // the three ranges never meet
        let set = |v: &[c_int]| v.iter().copied().collect::<std::collections::HashSet<_>>();
        let (sb, sn, sp) = (set(&a_blocking), set(&a_nonblocking), set(&persistent));
        assert!(sb.is_disjoint(&sn) && sb.is_disjoint(&sp) && sn.is_disjoint(&sp));
        // consecutive collectives get different blocks until the range wraps around
        let (_, blocking, _) = CommState::tag_blocks();
        let wrap = blocking as usize;
        assert_eq!(sb.len(), wrap.min(100));
        assert_eq!(a_blocking[wrap], a_blocking[0]);
        assert!(a_blocking[..wrap].windows(2).all(|w| w[0] != w[1]));
    }

    #[test]
    fn neighbours_come_from_the_topology_queries() {
        let p = MPI_PROC_NULL as i64;
        // (topology kind, answers by call, sources, destinations, cartesian)
        type Case = (
            c_int,
            Vec<(&'static str, Vec<i64>)>,
            Vec<c_int>,
            Vec<c_int>,
            bool,
        );
        let cases: Vec<Case> = vec![
            (
                MPI_CART,
                vec![
                    ("cartdim_get", vec![2]),
                    ("cart_shift", vec![3, 1]),
                    ("cart_shift", vec![p, 2]),
                ],
                vec![3, 1, MPI_PROC_NULL, 2],
                vec![3, 1, MPI_PROC_NULL, 2],
                true,
            ),
            (
                MPI_GRAPH,
                vec![
                    ("comm_rank", vec![4]),
                    ("graph_neighbors_count", vec![3]),
                    ("graph_neighbors", vec![1, 2, 1]),
                ],
                vec![1, 2, 1],
                vec![1, 2, 1],
                false,
            ),
            (
                MPI_DIST_GRAPH,
                vec![
                    ("dist_graph_neighbors_count", vec![2, 1, 0]),
                    ("dist_graph_neighbors", vec![0, 2, 5]),
                ],
                vec![0, 2],
                vec![5],
                false,
            ),
        ];
        for (kind, answers, sources, dests, cart) in cases {
            let mut script = answers.clone().into_iter();
            let _g = fake::install(move |c| {
                if c.name == "topo_test" {
                    return Ok(vec![kind as i64]);
                }
                let (name, words) = script.next().expect("an expected call");
                assert_eq!(c.name, name);
                Ok(words)
            });
            let n = query_neighbors(0x4400_2060 as MPI_Comm, 0).unwrap();
            assert_eq!((n.sources, n.dests, n.cart), (sources, dests, cart));
            let expected: Vec<&str> = std::iter::once("topo_test")
                .chain(answers.iter().map(|a| a.0))
                .collect();
            assert_eq!(fake::names(), expected);
            match kind {
                // a shift by one in each dimension
                MPI_CART => assert_eq!(
                    args_of("cart_shift"),
                    [vec![0x4400_2060, 0, 1], vec![0x4400_2060, 1, 1]]
                ),
                // the neighbours of this process's rank, as many as counted
                MPI_GRAPH => assert_eq!(args_of("graph_neighbors"), [vec![0x4400_2060, 4, 3]]),
                _ => assert_eq!(args_of("dist_graph_neighbors"), [vec![0x4400_2060, 2, 1]]),
            }
        }
        // no topology
        let _g = fake::install(|_| Ok(vec![MPI_UNDEFINED as i64]));
        assert_eq!(
            query_neighbors(0x4400_2061 as MPI_Comm, 0).err(),
            Some(MPI_ERR_TOPOLOGY)
        );
    }

    #[test]
    fn init_creates_the_key_and_finalize_deletes_the_predefined_states_and_the_key() {
        static UB: c_int = 32767;
        let _g = fake::install(|c| {
            Ok(match c.name {
                "comm_create_keyval" => vec![77],
                "comm_get_attr" if c.args[1] == MPI_TAG_UB as i64 => {
                    vec![1, &UB as *const c_int as i64]
                }
                // the world carries a state, the self communicator none
                "comm_get_attr" => vec![(c.args[0] == MPI_COMM_WORLD() as i64) as i64, 0],
                _ => vec![],
            })
        });
        init();
        assert_eq!(KEYVAL.load(Ordering::Relaxed), 77);
        assert_eq!(TAG_UB.load(Ordering::Relaxed), UB);
        let kv = &fake::calls()[0];
        assert_eq!(kv.name, "comm_create_keyval");
        // The callbacks are checked by what they do, not by address: an optimized build may
        // merge identical functions or give one function several addresses.
        assert_eq!(kv.args[2], 0, "no extra state");
        type CopyFn = unsafe extern "C" fn(
            MPI_Comm,
            c_int,
            *mut c_void,
            *mut c_void,
            *mut c_void,
            *mut c_int,
        ) -> c_int;
        type DelFn = unsafe extern "C" fn(MPI_Comm, c_int, *mut c_void, *mut c_void) -> c_int;
        assert!(kv.args[0] != 0 && kv.args[1] != 0);
        // SAFETY: the addresses init passed as the keyval's callbacks, with these signatures.
        let (copy, del): (CopyFn, DelFn) = unsafe {
            (
                std::mem::transmute::<usize, CopyFn>(kv.args[0] as usize),
                std::mem::transmute::<usize, DelFn>(kv.args[1] as usize),
            )
        };
        // the copy function copies nothing (duplicates do not inherit the state)
        let mut flag: c_int = 1;
        let mut out: *mut c_void = std::ptr::null_mut();
        // SAFETY: valid out-pointers.
        let rc = unsafe {
            copy(
                MPI_COMM_WORLD(),
                77,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                &mut out as *mut *mut c_void as *mut c_void,
                &mut flag,
            )
        };
        assert_eq!((rc, flag), (MPI_SUCCESS, 0));
        // the delete function releases the one strong count the attribute holds
        let state = Arc::new(CommState::new(MPI_COMM_WORLD(), 0, 1, false, 1, 1));
        let weak = Arc::downgrade(&state);
        let raw = Arc::into_raw(state) as *mut c_void;
        let generation = GENERATION.load(Ordering::Acquire);
        // SAFETY: `raw` carries one strong count, as the attribute does.
        assert_eq!(
            unsafe { del(MPI_COMM_WORLD(), 77, raw, std::ptr::null_mut()) },
            MPI_SUCCESS
        );
        assert!(weak.upgrade().is_none());
        assert!(GENERATION.load(Ordering::Acquire) > generation);
        finalize();
        assert_eq!(KEYVAL.load(Ordering::Relaxed), MPI_KEYVAL_INVALID);
        // an attribute is deleted only where it is set (Open MPI reports the others)
        assert_eq!(
            args_of("comm_delete_attr"),
            [vec![MPI_COMM_WORLD() as i64, 77]]
        );
        assert_eq!(args_of("comm_free_keyval"), [vec![77]]);
        assert_eq!(fake::names().last(), Some(&"comm_free_keyval"));
    }
}

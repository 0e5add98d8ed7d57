//! Layer: services. May use: core, platform.
//!
//! The user side of ghost RMA: windows in node-shared memory, redirection of operations
//! to ghosts, and the epochs translated to passive target (thesis §4.4–4.10).
//!
//! One internal window serves every ghost-served window: a dynamic window over users and
//! ghosts, created at init, to which each ghost attaches the memory of every window of its
//! node, and which every user keeps locked (`lock_all`) for its whole life. Operations go
//! there, to a ghost of the target's node, at displacement (address of the target's memory
//! in that ghost) + disp * disp_unit (§4.5). Accumulate-type operations always go to the
//! target's bound ghost (static rank binding, §4.9.1); Put and Get may be spread over the
//! target's node's ghosts inside an epoch, as `SHIM_GHOST_BALANCE` says (§4.9.3: once the
//! lock is held, which it is here when `MPI_Win_lock` returns).
//!
//! Passive-target locks are the shim's own, not the MPI library's (Casper keeps one set of
//! internal windows per user window, created collectively with the ghosts, and translates
//! the locks to them; that costs window creations at init or a global ordering of
//! creations, and a lock per ghost per epoch). Each target has a reader-writer lock word in
//! the hidden bytes after its window memory, changed with atomic operations: in shared
//! memory when every process of the window is on one node (`SHIM_GHOST_DIRECT`), otherwise
//! with `MPI_Compare_and_swap`/`MPI_Fetch_and_op` at the target's bound ghost (one process
//! applies them all, so they are atomic, MPI-4.0 §12.7.1). A lock is acquired before
//! `MPI_Win_lock` returns (the standard allows either, §12.5.3), released after the
//! epoch's operations are complete at the target; `MPI_MODE_NOCHECK` takes no lock at all
//! (§12.5.5: the program guarantees that no conflicting lock is held or attempted).

use core::ffi::{c_int, c_void};
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock, Mutex, RwLock};

use super::common::{Cmd, Handled, Layout, command, global, layout};
use crate::platform::abi::*;
use crate::platform::config::GhostBalance;
use crate::platform::mpi::{coll, comm, dtype, p2p, rma};
use crate::platform::shm;

/// RMA operations this process redirected to ghosts.
pub static REDIRECTED: AtomicU64 = AtomicU64::new(0);

/// One target of a window.
#[derive(Clone, Debug)]
struct Target {
    disp_unit: i64,
    /// Its window size in bytes.
    size: i64,
    /// Offset of its hidden bytes (after its window memory).
    hidden: i64,
    /// World ranks of its node's ghosts, and where its memory is in each.
    ghosts: Vec<i32>,
    addrs: Vec<i64>,
    /// The ghost its accumulates (and bound Put/Get, and its lock word's atomics) go to.
    bound: usize,
}

/// A passive-target lock epoch this origin has open to one target.
#[derive(Clone, Copy, Debug)]
struct Lock {
    /// The lock word is held (not under `MPI_MODE_NOCHECK`), and how.
    held: Option<bool>,
    /// The second, uncontended self-lock on the user window (§4.8).
    self_lock: bool,
}

/// A window allocated with ghosts.
struct UserWin {
    win: MPI_Win,
    /// Duplicate of the window's communicator, for the shim's own synchronisation.
    ctl: MPI_Comm,
    me: i32,
    targets: Vec<Target>,
    base: *mut c_void,
    map_len: usize,
    locks_used: bool,
    no_local_load_store: bool,
    fence: bool,
    /// An access epoch (`MPI_Win_start`) is open, to these targets.
    started: bool,
    access: Vec<i32>,
    exposure: Vec<MPI_Request>,
    locked: HashMap<i32, Lock>,
    /// A `lock_all` epoch is open; whether it holds the lock words (not NOCHECK).
    lock_all: Option<bool>,
    /// Per ghost (world rank): operations and bytes sent there.
    sent: HashMap<i32, (u64, u64)>,
    rng: u64,
    id: usize,
    /// `SHIM_GHOST_DIRECT` on a single-node window: every target's memory mapped here (by
    /// comm rank), operations done in shared memory (`direct.rs`).
    direct: Option<Vec<Peer>>,
    /// Operations done directly.
    direct_ops: u64,
    /// The window's predefined attributes as the program created it (MPI-4.0 §12.2.6):
    /// the shim answers them, since the library's window may not be over this memory.
    attrs: Box<Attrs>,
}

/// Storage for the predefined attributes whose C value is a pointer (MPI-4.0 §12.2.6):
/// it lives as long as the window.
struct Attrs {
    size: MPI_Aint,
    disp_unit: c_int,
    flavor: c_int,
}

/// A predefined window attribute of a ghost-served window (MPI-4.0 §12.2.6): `c` is
/// what `MPI_Win_get_attr` stores in C (the base address itself, or a pointer to the
/// value, valid while the window lives), `fortran` the value Fortran gets.
pub struct Predefined {
    pub c: *const c_void,
    pub fortran: MPI_Aint,
}

/// The shim's answer for a predefined attribute (`MPI_WIN_BASE`, `MPI_WIN_SIZE`,
/// `MPI_WIN_DISP_UNIT`, `MPI_WIN_CREATE_FLAVOR`) of a window the ghosts serve: what the
/// program asked `MPI_Win_allocate` for. `None` for any other window or key (the
/// library answers those, `MPI_WIN_MODEL` included).
pub fn predefined_attr(win: MPI_Win, keyval: c_int) -> Option<Predefined> {
    let arc = lookup(win)?;
    let w = arc.lock().unwrap_or_else(|e| e.into_inner());
    let a: &Attrs = &w.attrs;
    Some(if keyval == MPI_WIN_BASE {
        Predefined {
            c: w.base,
            fortran: w.base as MPI_Aint,
        }
    } else if keyval == MPI_WIN_SIZE {
        Predefined {
            c: (&a.size as *const MPI_Aint).cast(),
            fortran: a.size,
        }
    } else if keyval == MPI_WIN_DISP_UNIT {
        Predefined {
            c: (&a.disp_unit as *const c_int).cast(),
            fortran: a.disp_unit as MPI_Aint,
        }
    } else if keyval == MPI_WIN_CREATE_FLAVOR {
        Predefined {
            c: (&a.flavor as *const c_int).cast(),
            fortran: a.flavor as MPI_Aint,
        }
    } else {
        return None;
    })
}

/// A target's memory mapped by this process (direct windows).
#[derive(Debug)]
struct Peer {
    base: *mut u8,
    map_len: usize,
    /// Mapped for this window (to be unmapped at free); false for this process's own.
    mapped: bool,
}

// SAFETY: the raw pointers are mappings of this process; the window is used under a Mutex.
unsafe impl Send for UserWin {}

type Registry = RwLock<HashMap<MPI_Win, Arc<Mutex<UserWin>>>>;
static WINS: LazyLock<Registry> = LazyLock::new(Default::default);
static NEXT_ID: AtomicUsize = AtomicUsize::new(0);

const POST_TAG: c_int = 7311;
const DONE_TAG: c_int = 7312;
/// Bytes after each target's window memory: a byte no operation touches, the direct
/// accumulate lock at +8 (`direct.rs`) and the reader-writer lock word at +16.
const HIDDEN_BYTES: usize = 64;
const LOCK_WORD_AT: i64 = 16;
/// The lock word's value while a writer holds it (readers count up from 0; a reader that
/// finds it negative takes its increment back and retries).
const WRITER: i64 = -(1 << 40);

/// Where a target's hidden bytes start, for a window of `size` bytes.
fn hidden_at(size: i64) -> i64 {
    ((size.max(0) as usize).div_ceil(HIDDEN_BYTES) * HIDDEN_BYTES) as i64
}

fn lookup(win: MPI_Win) -> Option<Arc<Mutex<UserWin>>> {
    if !crate::platform::proc::ghosts_active() {
        return None;
    }
    WINS.read()
        .unwrap_or_else(|e| e.into_inner())
        .get(&win)
        .cloned()
}

fn raise(win: MPI_Win, class: c_int, what: &str) -> c_int {
    crate::platform::errors::raise_win(win, class, what)
}

/// Where a redirected operation goes.
pub struct Route {
    pub rank: c_int,
    pub disp: MPI_Aint,
    pub win: MPI_Win,
}

/// How an operation on a ghost-served window is carried out.
pub enum Routed {
    /// By a ghost: the same call with the target translated.
    Ghost(Route),
    /// By this process, in node-shared memory (`direct.rs`).
    Direct(super::direct::Direct),
}

/// RMA operations this process carried out directly in node-shared memory.
pub static DIRECT: AtomicU64 = AtomicU64::new(0);

impl UserWin {
    /// Is an access epoch to target `t` open?
    fn in_epoch(&self, t: i32) -> bool {
        self.lock_all.is_some()
            || self.locked.contains_key(&t)
            || self.fence
            || (self.started && self.access.contains(&t))
    }
    fn pick(&mut self, t: i32, acc: bool) -> usize {
        let tg = &self.targets[t as usize];
        let policy = layout().map_or(GhostBalance::Static, |l| l.balance);
        if acc || tg.ghosts.len() == 1 || policy == GhostBalance::Static {
            return tg.bound;
        }
        let load = |g: &i32| self.sent.get(g).copied().unwrap_or((0, 0));
        match policy {
            GhostBalance::Random => {
                // xorshift: origin-local, no coordination needed
                self.rng ^= self.rng << 13;
                self.rng ^= self.rng >> 7;
                self.rng ^= self.rng << 17;
                (self.rng % tg.ghosts.len() as u64) as usize
            }
            GhostBalance::Op => (0..tg.ghosts.len())
                .min_by_key(|&i| load(&tg.ghosts[i]).0)
                .unwrap_or(tg.bound),
            GhostBalance::Byte => (0..tg.ghosts.len())
                .min_by_key(|&i| load(&tg.ghosts[i]).1)
                .unwrap_or(tg.bound),
            GhostBalance::Static => tg.bound,
        }
    }
}

/// Translates an RMA operation on a ghost-served window (called by the generated
/// entry points of the `rma-op` table entries). `Ok(None)`: not such a window.
pub fn route(
    win: MPI_Win,
    target: c_int,
    disp: MPI_Aint,
    acc: bool,
    count: i64,
    dt: MPI_Datatype,
    fname: &str,
) -> Result<Option<Routed>, c_int> {
    let Some(w) = lookup(win) else {
        return Ok(None);
    };
    let mut w = w.lock().unwrap_or_else(|e| e.into_inner());
    w.route_op(target, disp, acc, count, dt, fname)
        .map(Some)
        .map_err(|(class, why)| raise(win, class, &why))
}

impl UserWin {
    /// Where an operation to `target` at `disp` goes (`route`), or the error to raise.
    fn route_op(
        &mut self,
        target: c_int,
        disp: MPI_Aint,
        acc: bool,
        count: i64,
        dt: MPI_Datatype,
        fname: &str,
    ) -> Result<Routed, Fail> {
        let win = self.win;
        let w = self;
        if target == MPI_PROC_NULL {
            // a no-op, on a window that is always in an epoch
            return Ok(Routed::Ghost(Route {
                rank: MPI_PROC_NULL,
                disp,
                win: global(),
            }));
        }
        if target < 0 || target as usize >= w.targets.len() {
            return Err((
                MPI_ERR_RANK,
                format!("{fname}: target rank {target} is not in the window's group"),
            ));
        }
        if !w.in_epoch(target) {
            return Err((
                MPI_ERR_RMA_SYNC,
                format!("{fname}: no access epoch to target {target} is open"),
            ));
        }
        if let Some(peers) = &w.direct {
            let (p, tg) = (&peers[target as usize], &w.targets[target as usize]);
            let d = super::direct::Direct {
                base: p.base,
                size: tg.size,
                offset: disp * tg.disp_unit,
                lock: p.base.wrapping_offset(tg.hidden as isize + 8).cast(),
                win,
            };
            w.direct_ops += 1;
            DIRECT.fetch_add(1, Ordering::Relaxed);
            return Ok(Routed::Direct(d));
        }
        let bytes = if layout().is_some_and(|l| l.balance == GhostBalance::Byte) {
            // an invalid type is reported by the real call
            let sz = dtype::size(dt).unwrap_or(0);
            (count.max(0) * sz.max(0) as i64) as u64
        } else {
            0
        };
        let gi = w.pick(target, acc);
        let tg = &w.targets[target as usize];
        let (rank, addr, du) = (tg.ghosts[gi], tg.addrs[gi], tg.disp_unit);
        let e = w.sent.entry(rank).or_default();
        e.0 += 1;
        e.1 += bytes;
        REDIRECTED.fetch_add(1, Ordering::Relaxed);
        Ok(Routed::Ghost(Route {
            rank,
            disp: addr + disp * du,
            win: global(),
        }))
    }
}

/// Reads an info value (None if unset).
fn info_get(info: MPI_Info, key: &std::ffi::CStr) -> Option<String> {
    if info == MPI_INFO_NULL() {
        return None;
    }
    // MPI_MAX_INFO_VAL bytes plus the terminator
    let mut buf = vec![0u8; MPI_MAX_INFO_VAL as usize + 1];
    if !comm::info_get(info, key, &mut buf).unwrap_or(false) {
        return None;
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    Some(String::from_utf8_lossy(&buf[..end]).trim().to_string())
}

/// Comm ranks -> user-world ranks.
fn to_user_world(c: MPI_Comm, n: i32) -> Vec<i32> {
    let ranks: Vec<i32> = (0..n).collect();
    let mut out = vec![0; n as usize];
    // the groups are freed
    let mut g1 = comm::group(c).unwrap_or(MPI_GROUP_NULL());
    let mut g2 = comm::group(crate::platform::proc::user_world()).unwrap_or(MPI_GROUP_NULL());
    let _ = comm::group_translate_ranks(g1, &ranks, g2, &mut out);
    let _ = comm::group_free(&mut g1);
    let _ = comm::group_free(&mut g2);
    out
}

/// Group ranks -> ranks in the window's communicator.
fn group_to_comm(group: MPI_Group, ctl: MPI_Comm) -> Vec<i32> {
    let n = comm::group_size(group).unwrap_or(0);
    let ranks: Vec<i32> = (0..n).collect();
    let mut out = vec![0; n.max(0) as usize];
    // the group is freed
    let mut cg = comm::group(ctl).unwrap_or(MPI_GROUP_NULL());
    let _ = comm::group_translate_ranks(group, &ranks, cg, &mut out);
    let _ = comm::group_free(&mut cg);
    out
}

/// Arguments the ghosts can serve: a valid intracommunicator, size >= 0, disp_unit > 0,
/// a valid info, non-null out-pointers. Anything else goes to the system MPI, which
/// reports it with its own class through the communicator's handler, before the shim has
/// created anything (a shared-memory object, an attachment at the ghosts).
fn servable(
    size: MPI_Aint,
    disp_unit: i64,
    info: MPI_Info,
    comm: MPI_Comm,
    out: [bool; 2],
) -> bool {
    if size < 0
        || disp_unit <= 0
        || out.contains(&true)
        || !crate::platform::errors::comm_valid(comm)
    {
        return false;
    }
    // a valid communicator; an invalid info yields an error code (the real world, where
    // it would be raised, only records it)
    comm::test_inter(comm) == Ok(false)
        && (info == MPI_INFO_NULL() || comm::info_get_nkeys(info).is_ok())
}

/// `MPI_Win_allocate(_c)` with ghosts. `NotOurs`: not handled (ghosts off,
/// `async_config=off`, arguments the system MPI must judge); the caller forwards.
pub fn allocate(
    size: MPI_Aint,
    disp_unit: i64,
    info: MPI_Info,
    comm: MPI_Comm,
    baseptr: *mut c_void,
    win: *mut MPI_Win,
) -> Handled {
    let Some(lay) = layout() else {
        return Handled::NotOurs;
    };
    if !crate::platform::proc::ghosts_active()
        || !servable(
            size,
            disp_unit,
            info,
            comm,
            [baseptr.is_null(), win.is_null()],
        )
    {
        return Handled::NotOurs;
    }
    if info_get(info, c"async_config").is_some_and(|v| v.eq_ignore_ascii_case("off")) {
        tracing::debug!(target: "shim::ghost", "MPI_Win_allocate with async_config=off: forwarded");
        return Handled::NotOurs;
    }
    let epochs = info_get(info, c"epochs_used");
    let locks_used = epochs.as_ref().is_none_or(|e| {
        e.split([',', '|', ';'])
            .any(|x| matches!(x.trim(), "lock" | "lockall"))
    });
    let no_lls = info_get(info, c"no_local_load_store").is_some_and(|v| v == "true");
    // a valid communicator (`servable`)
    let me = comm::rank(comm).unwrap_or(0);
    let n = comm::size(comm).unwrap_or(0);
    let size = size as usize;
    let hidden = hidden_at(size as i64) as usize;
    let map_len = hidden + HIDDEN_BYTES;
    let uw_rank = crate::platform::proc::world().rank as usize;
    let my_ghosts = &lay.node_ghosts[lay.user_node[uw_rank]];
    let g = lay.ghosts;
    // the window's memory, mapped by the node's ghosts (and direct peers)
    let (base, mut mem, addrs) = window_memory(lay, my_ghosts, map_len);
    // what every rank tells the others: disp_unit, size, whether it may go direct, where
    // its memory is (pid, descriptor or -1, object number, random part), and where each
    // ghost of its node mapped it
    const HEAD: usize = 7;
    let uranks = to_user_world(comm, n);
    let one_node = uranks
        .iter()
        .all(|&u| lay.user_node[u as usize] == lay.user_node[uw_rank]);
    let may_direct = lay.direct && one_node;
    if !may_direct {
        // the ghosts have it mapped
        mem.forget();
    }
    let mut rec = vec![0i64; HEAD + g];
    rec[0] = disp_unit;
    rec[1] = size as i64;
    rec[2] = may_direct as i64;
    rec[3] = std::process::id() as i64;
    [rec[4], rec[5], rec[6]] = mem.wire();
    rec[HEAD..HEAD + addrs.len()].copy_from_slice(&addrs);
    let mut all = vec![0i64; (HEAD + g) * n as usize];
    // collective calls over the window's communicator in the same order on every rank
    // SAFETY: HEAD + g int64 per rank into a buffer for the n ranks of `comm`.
    let _ = unsafe { coll::allgather_i64(&rec, &mut all, comm) };
    let ctl = comm::dup(comm).unwrap_or(MPI_COMM_NULL());
    let recs: Vec<&[i64]> = all.chunks(HEAD + g).collect();
    let targets: Vec<Target> = (0..n as usize)
        .map(|t| {
            let u = uranks[t] as usize;
            let r = recs[t];
            let ghosts = lay.node_ghosts[lay.user_node[u]].clone();
            Target {
                disp_unit: r[0],
                size: r[1],
                hidden: hidden_at(r[1]),
                bound: lay.user_local[u] % ghosts.len(),
                ghosts,
                addrs: r[HEAD..].to_vec(),
            }
        })
        .collect();
    // direct only if every rank may (the same decision everywhere) and every rank could
    // map every other's memory
    let direct = if recs.iter().all(|r| r[2] == 1) {
        let peers: Vec<Option<Peer>> = (0..n as usize)
            .map(|t| {
                let (r, me) = (recs[t], t as i32 == me);
                let len = hidden_at(r[1]) as usize + HIDDEN_BYTES;
                if me {
                    return Some(Peer { base: base.cast(), map_len: len, mapped: false });
                }
                let at = Memory::location_of(r[3], [r[4], r[5], r[6]]);
                shm::Segment::open_location(&at, len)
                    .map_err(|e| {
                        // once per process: a program may make thousands of windows
                        static TOLD: std::sync::Once = std::sync::Once::new();
                        TOLD.call_once(|| tracing::warn!(target: "shim::ghost", "a window not direct (through the ghosts): cannot map rank {t}'s memory ({at}): {e}"));
                        tracing::debug!(target: "shim::ghost", "a window not direct: cannot map rank {t}'s memory ({at}): {e}");
                    })
                    .ok()
                    .map(|seg| Peer { base: seg.into_raw(), map_len: len, mapped: true })
            })
            .collect();
        let mut ok = peers.iter().all(Option::is_some) as c_int;
        // collective over the window's duplicate (after it nobody opens the memory)
        // SAFETY: one int, in place.
        let _ = unsafe {
            coll::allreduce(
                MPI_IN_PLACE,
                (&mut ok as *mut c_int).cast(),
                1,
                MPI_INT(),
                MPI_MIN(),
                ctl,
            )
        };
        mem.forget();
        let peers: Vec<Peer> = peers.into_iter().flatten().collect();
        if ok == 1 {
            Some(peers)
        } else {
            for p in peers.iter().filter(|p| p.mapped) {
                // SAFETY: a mapping made just above, used by nobody.
                unsafe { shm::unmap(p.base, p.map_len) };
            }
            None
        }
    } else {
        // another rank chose not to go direct
        mem.forget();
        None
    };
    // The library's window: the program's handle (its group, name, error handler, info,
    // model), made once the object's name is gone (above). Over one process it is a
    // zero-byte MPI_Win_allocate (Open MPI 4.1's osc/rdma refuses MPI_Win_create over one
    // process); the shim answers the predefined attributes itself (`predefined_attr`).
    let made = if n == 1 {
        rma::allocate(0, disp_unit as c_int, info, comm).map(|(w, _)| w)
    } else {
        // SAFETY: the object's mapping of map_len >= size bytes, unmapped only when the
        // window is freed.
        unsafe { rma::create(base, size as MPI_Aint, disp_unit as c_int, info, comm) }
    };
    let uwin = match made {
        Ok(w) => w,
        Err(e) => {
            // Nothing of the window stays: the ghosts let go of the memory, then the
            // mappings and the duplicate go (MPI_ERRORS_RETURN lets the program go on).
            let mine = &targets[me as usize];
            detach(lay, &mine.ghosts, &mine.addrs);
            let mut ctl = ctl;
            // SAFETY: the mappings made above, reachable by nobody now.
            unsafe { unmap_all(base, map_len, direct.as_deref(), &mut ctl) };
            return Handled::Served(e.code());
        }
    };
    let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    let w = UserWin {
        win: uwin,
        ctl,
        me,
        targets,
        base,
        map_len,
        locks_used,
        no_local_load_store: no_lls,
        fence: false,
        started: false,
        access: Vec::new(),
        exposure: Vec::new(),
        locked: HashMap::new(),
        lock_all: None,
        sent: HashMap::new(),
        rng: 0x9e37_79b9_7f4a_7c15 ^ ((uw_rank as u64 + 1) << 20) ^ id as u64,
        id,
        direct,
        direct_ops: 0,
        attrs: Box::new(Attrs {
            size: size as MPI_Aint,
            disp_unit: disp_unit as c_int,
            flavor: MPI_WIN_FLAVOR_ALLOCATE,
        }),
    };
    WINS.write()
        .unwrap_or_else(|e| e.into_inner())
        .insert(uwin, Arc::new(Mutex::new(w)));
    // SAFETY: the caller's out-pointers (baseptr is a `void **` in disguise).
    unsafe {
        *baseptr.cast::<*mut c_void>() = base;
        *win = uwin;
    }
    tracing::debug!(target: "shim::ghost", "window {id}: {size} bytes, {n} processes");
    Handled::Served(MPI_SUCCESS)
}

/// Where the processes of a node find a window's memory until they have mapped it.
enum Memory {
    /// An anonymous segment (memfd), held open by its creator: it has no name anywhere,
    /// so a `kill -9` at any moment leaves nothing behind.
    Anonymous(std::os::fd::OwnedFd),
    /// A named object, where a ghost could not open the creator's descriptor (a ptrace
    /// policy that refuses `/proc/<pid>/fd`): `/dev/shm/shim-...` until unlinked.
    Named { name: String, obj: i64, nonce: u64 },
    /// Mapped by everyone who needs it: nothing left to close or unlink.
    Gone,
}

impl Memory {
    /// Where this process's memory is, for a ghost or a peer of the node.
    fn location(&self) -> String {
        Memory::location_of(std::process::id() as i64, self.wire())
    }

    /// The three words that tell the window's other ranks where it is: descriptor (or -1),
    /// object number and random part (or 0).
    fn wire(&self) -> [i64; 3] {
        use std::os::fd::AsRawFd;
        match self {
            Memory::Anonymous(fd) => [fd.as_raw_fd() as i64, 0, 0],
            Memory::Named { obj, nonce, .. } => [-1, *obj, *nonce as i64],
            Memory::Gone => [-1, -1, 0],
        }
    }

    /// Where process `pid`'s memory is, from its three words ([`Memory::wire`]).
    fn location_of(pid: i64, w: [i64; 3]) -> String {
        if w[0] >= 0 {
            shm::peer_location(pid as libc::pid_t, w[0] as i32)
        } else {
            object_name(pid, w[1], w[2] as u64)
        }
    }

    /// Everyone who needs the memory has mapped it: the descriptor is closed, the name
    /// unlinked (the mappings keep the memory).
    fn forget(&mut self) {
        if let Memory::Named { name, .. } = self {
            let _ = shm::unlink(name);
        }
        *self = Memory::Gone;
    }
}

/// A window's memory, `map_len` bytes, mapped by this process and by `ghosts` (the
/// node's ghosts): its base, where it is until forgotten, and each ghost's address of
/// it. An anonymous segment first; a named object where a ghost cannot open that. Aborts
/// the job when neither works (`MPI_Win_allocate` is collective).
fn window_memory(lay: &Layout, ghosts: &[i32], map_len: usize) -> (*mut c_void, Memory, Vec<i64>) {
    static OBJ: AtomicUsize = AtomicUsize::new(0);
    let attach = |mem: &Memory| -> Vec<i64> {
        let at = mem.location();
        ghosts
            .iter()
            .map(|&gh| command(lay, gh, Cmd::Attach, &[map_len as i64], Some(&at))[0])
            .collect()
    };
    if let Ok((seg, fd)) = shm::Segment::create_anonymous("libshim-win", map_len) {
        let mem = Memory::Anonymous(fd);
        let addrs = attach(&mem);
        if addrs.iter().all(|&a| a != 0) {
            return (seg.into_raw().cast(), mem, addrs);
        }
        tracing::info!(target: "shim::ghost", "a ghost cannot map a window's anonymous memory: a named object instead");
        detach(lay, ghosts, &addrs);
    }
    let obj = OBJ.fetch_add(1, Ordering::Relaxed) as i64;
    let nonce = object_nonce().unwrap_or_else(|e| object_failed(&e));
    let name = object_name(std::process::id() as i64, obj, nonce);
    let base = create_object(&name, map_len).unwrap_or_else(|e| object_failed(&e));
    let mut mem = Memory::Named { name, obj, nonce };
    let addrs = attach(&mem);
    if addrs.iter().any(|&a| a == 0) {
        mem.forget();
        object_failed("a ghost could not map the window's memory (see SHIM_LOG=info)");
    }
    (base, mem, addrs)
}

/// Has each of `ghosts` let go of this process's memory that it mapped at the matching
/// address of `addrs` (0: it did not map it, nothing to say).
fn detach(lay: &Layout, ghosts: &[i32], addrs: &[i64]) {
    for (&gh, &a) in ghosts.iter().zip(addrs).filter(|(_, a)| **a != 0) {
        command(lay, gh, Cmd::Detach, &[a], None);
    }
}

/// The POSIX shared-memory object of a window's memory (`/dev/shm/shim-...`): the
/// creator's pid, its window number and 64 random bits, so that no other process of the
/// node can guess the name to create the object first or to open it. The other ranks of
/// the window learn the name from the creator (the allocation's allgather; the ghosts in
/// their attach command).
fn object_name(pid: i64, obj: i64, nonce: u64) -> String {
    format!("/shim-{pid}-{obj}-{nonce:016x}")
}

/// 64 random bits for an object name, from getrandom(2).
fn object_nonce() -> Result<u64, String> {
    let mut b = [0u8; 8];
    shm::random_bytes(&mut b).map_err(|e| {
        format!("cannot draw a random name for the node-shared memory object (getrandom: {e})")
    })?;
    Ok(u64::from_ne_bytes(b))
}

/// Creates a window's shared-memory object, exclusively (`O_CREAT|O_EXCL`, mode 0600: an
/// existing object of that name is an error, never reused), sized `len` bytes and mapped
/// read-write. An object created here and then not usable is unlinked again.
fn create_object(name: &str, len: usize) -> Result<*mut c_void, String> {
    shm::create_named(name, len)
        .map(|seg| seg.into_raw().cast())
        .map_err(|e| format!("cannot create the node-shared memory object /dev/shm{name} ({e})"))
}

/// A window's shared memory cannot be set up: `MPI_Win_allocate` is collective and the
/// other ranks would wait for this one, so the message goes to stderr and the whole job
/// is aborted (exit status 71, EX_OSERR).
fn object_failed(msg: &str) -> ! {
    crate::platform::log::raw_stderr(&format!(
        "{} MPI_Win_allocate with ghosts: {msg}; aborting the job\n",
        crate::platform::log::prefix()
    ));
    crate::platform::proc::abort_job(71)
}

/// `MPI_Win_free` of a ghost-served window.
pub fn free(win: *mut MPI_Win) -> Handled {
    // SAFETY: the caller's handle pointer.
    let Some(h) = unsafe { win.as_ref() }.copied() else {
        return Handled::NotOurs;
    };
    if lookup(h).is_none() {
        return Handled::NotOurs;
    }
    let Some(lay) = layout() else {
        return Handled::NotOurs;
    };
    let Some(arc) = WINS.write().unwrap_or_else(|e| e.into_inner()).remove(&h) else {
        return Handled::NotOurs;
    };
    let mut w = arc.lock().unwrap_or_else(|e| e.into_inner());
    let rc = w.release_all(lay);
    // SAFETY: the caller's handle pointer (non-null, read above).
    unsafe { *win = MPI_WIN_NULL() };
    w.report_counts();
    Handled::Served(rc)
}

/// Unmaps a window's own object and the peers' objects it mapped (direct windows) and
/// frees its private duplicate.
///
/// # Safety
/// `base`/`map_len` and the peers' mappings must be this window's, reachable by nobody.
unsafe fn unmap_all(
    base: *mut c_void,
    map_len: usize,
    direct: Option<&[Peer]>,
    ctl: &mut MPI_Comm,
) {
    // SAFETY: the caller's promise.
    unsafe {
        shm::unmap(base.cast(), map_len);
        for p in direct.into_iter().flatten().filter(|p| p.mapped) {
            shm::unmap(p.base.cast(), p.map_len);
        }
    }
    let _ = comm::free(ctl);
}

impl UserWin {
    /// Frees the window's resources (collective over the window's processes): its memory
    /// leaves the ghosts, then the user window, the mappings and the duplicate go. The
    /// return code is `MPI_Win_free`'s.
    fn release_all(&mut self, lay: &Layout) -> c_int {
        let w = self;
        // Nobody may still reach this memory through a ghost once it is detached.
        // collective over the window's private duplicate
        let _ = coll::barrier(w.ctl);
        let mine = &w.targets[w.me as usize];
        detach(lay, &mine.ghosts, &mine.addrs);
        // collective over the duplicate; then only this rank's own objects are freed
        let _ = coll::barrier(w.ctl);
        let rc = rma::free(&mut w.win)
            .err()
            .map_or(MPI_SUCCESS, |e| e.code());
        // SAFETY: this window's mappings, no longer reachable through MPI.
        unsafe { unmap_all(w.base, w.map_len, w.direct.as_deref(), &mut w.ctl) };
        rc
    }

    /// With counters on: how the window's operations went (at free).
    fn report_counts(&self) {
        let w = self;
        if crate::platform::counters::enabled() && w.direct.is_some() {
            crate::platform::log::raw_stderr(&format!(
                "{} window {}: {} RMA operations done directly in node-shared memory\n",
                crate::platform::log::prefix(),
                w.id,
                w.direct_ops
            ));
        }
        if crate::platform::counters::enabled() && !w.sent.is_empty() {
            let mut per: Vec<_> = w.sent.iter().collect();
            per.sort();
            let list: Vec<String> = per
                .iter()
                .map(|(g, (ops, _))| format!("ghost {g}: {ops}"))
                .collect();
            crate::platform::log::raw_stderr(&format!(
                "{} window {}: RMA operations redirected per ghost (world rank): {}\n",
                crate::platform::log::prefix(),
                w.id,
                list.join(", ")
            ));
        }
    }
}

/// Windows still alive at finalize are left to the system MPI's finalize; their ghosts'
/// mappings go when the ghosts exit.
pub fn report_unfreed_windows() {
    let n = WINS.read().unwrap_or_else(|e| e.into_inner()).len();
    if n > 0 {
        tracing::debug!(target: "shim::ghost", "{n} ghost-served window(s) not freed before MPI_Finalize");
    }
}

/// Runs `f` on a ghost-served window; `NotOurs` if `win` is not one.
fn with(win: MPI_Win, f: impl FnOnce(&mut UserWin) -> c_int) -> Handled {
    let Some(arc) = lookup(win) else {
        return Handled::NotOurs;
    };
    let mut w = arc.lock().unwrap_or_else(|e| e.into_inner());
    Handled::Served(f(&mut w))
}

/// An error to raise on the window: its class (or the code MPI returned) and the reason.
type Fail = (c_int, String);

fn result(win: MPI_Win, r: Result<(), Fail>) -> c_int {
    match r {
        Ok(()) => MPI_SUCCESS,
        Err((class, why)) => raise(win, class, &why),
    }
}

fn sync_err(what: &str) -> Fail {
    (MPI_ERR_RMA_SYNC, what.to_string())
}

/// `MPI_Win_fence`: flush_all on the global window (unless NOPRECEDE), `Win_sync`, and a
/// barrier of the users, skipped only when NOPRECEDE, NOSTORE and NOPUT are all given
/// (thesis §4.10, Appendix A: the test is `(assert & ALL3) == ALL3`).
pub fn fence(assert: c_int, win: MPI_Win) -> Handled {
    with(win, |w| result(win, w.fence_epoch(assert)))
}

/// `MPI_Win_post`: the exposure epoch's completion notices are received as they come;
/// unless NOCHECK, each origin is told that it may start.
pub fn post(group: MPI_Group, assert: c_int, win: MPI_Win) -> Handled {
    with(win, |w| result(win, w.post_epoch(group, assert)))
}

/// A zero-byte notice that completes on its own: the peer may be this process, whose
/// receive is posted later (a blocking send to self can wait for it forever).
fn notify(to: c_int, tag: c_int, comm: MPI_Comm) {
    // SAFETY: a zero-byte send on the window's private communicator.
    let mut r = unsafe { p2p::isend(std::ptr::null(), 0, MPI_BYTE(), to, tag, comm) }
        .unwrap_or(MPI_REQUEST_NULL());
    // freeing an active send request lets it complete in the background (MPI-4.0 §3.7.3)
    let _ = p2p::request_free(&mut r);
}

/// `MPI_Win_start`: waits for each target's post notice (unless NOCHECK).
pub fn start(group: MPI_Group, assert: c_int, win: MPI_Win) -> Handled {
    with(win, |w| result(win, w.start_epoch(group, assert)))
}

/// `MPI_Win_complete`: completes the operations at the targets' ghosts, then notifies
/// each target.
pub fn complete(win: MPI_Win) -> Handled {
    with(win, |w| result(win, w.complete_epoch()))
}

/// `MPI_Win_wait`.
pub fn wait(win: MPI_Win) -> Handled {
    with(win, |w| result(win, w.wait_epoch()))
}

/// `MPI_Win_test`.
pub fn test(win: MPI_Win, flag: *mut c_int) -> Handled {
    with(win, |w| match w.test_epoch() {
        Ok(f) => {
            if !flag.is_null() {
                // SAFETY: the caller's out-pointer.
                unsafe { *flag = f as c_int };
            }
            MPI_SUCCESS
        }
        Err(e) => result(win, Err(e)),
    })
}

/// The active-target epochs (fence and post/start/complete/wait) on one window; the
/// public functions above raise the errors on the window.
impl UserWin {
    fn fence_epoch(&mut self, assert: c_int) -> Result<(), Fail> {
        let w = self;
        if !w.locked.is_empty() || w.lock_all.is_some() || w.started {
            return Err(sync_err(
                "MPI_Win_fence: a passive-target or PSCW epoch is open",
            ));
        }
        let g = global();
        std::sync::atomic::fence(Ordering::SeqCst);
        // the global window is always in the users' lock_all epoch
        if assert & MPI_MODE_NOPRECEDE == 0 && w.direct.is_none() {
            rma::flush_all(g).map_err(|e| (e.code(), "flush".into()))?;
        }
        let _ = rma::sync(g);
        let all3 = MPI_MODE_NOPRECEDE | MPI_MODE_NOSTORE | MPI_MODE_NOPUT;
        if assert & all3 != all3 {
            coll::barrier(w.ctl).map_err(|e| (e.code(), "barrier".into()))?;
        }
        w.fence = assert & MPI_MODE_NOSUCCEED == 0;
        Ok(())
    }

    fn post_epoch(&mut self, group: MPI_Group, assert: c_int) -> Result<(), Fail> {
        let w = self;
        if !w.exposure.is_empty() {
            return Err(sync_err("MPI_Win_post: an exposure epoch is open"));
        }
        let origins = group_to_comm(group, w.ctl);
        std::sync::atomic::fence(Ordering::SeqCst);
        let ctl = w.ctl;
        w.exposure = origins
            .iter()
            .map(|&o| {
                // SAFETY: a zero-byte receive on the window's private communicator.
                unsafe { p2p::irecv(std::ptr::null_mut(), 0, MPI_BYTE(), o, DONE_TAG, ctl) }
                    .unwrap_or(MPI_REQUEST_NULL())
            })
            .collect();
        if w.exposure.is_empty() {
            // an empty group still opens an epoch that wait/test closes
            w.exposure.push(MPI_REQUEST_NULL());
        }
        if assert & MPI_MODE_NOCHECK == 0 {
            for &o in &origins {
                notify(o, POST_TAG, w.ctl);
            }
        }
        Ok(())
    }

    fn start_epoch(&mut self, group: MPI_Group, assert: c_int) -> Result<(), Fail> {
        let w = self;
        if w.started {
            return Err(sync_err("MPI_Win_start: an access epoch is open"));
        }
        let targets = group_to_comm(group, w.ctl);
        if assert & MPI_MODE_NOCHECK == 0 {
            for &t in &targets {
                // SAFETY: a zero-byte receive.
                let _ =
                    unsafe { p2p::recv(std::ptr::null_mut(), 0, MPI_BYTE(), t, POST_TAG, w.ctl) };
            }
        }
        w.access = targets;
        w.started = true;
        Ok(())
    }

    fn complete_epoch(&mut self) -> Result<(), Fail> {
        let w = self;
        if !w.started {
            return Err(sync_err("MPI_Win_complete: no access epoch is open"));
        }
        let g = global();
        let mut done = HashSet::new();
        std::sync::atomic::fence(Ordering::SeqCst);
        let via_ghosts: &[i32] = if w.direct.is_some() { &[] } else { &w.access };
        for &t in via_ghosts {
            for &gh in &w.targets[t as usize].ghosts {
                if done.insert(gh) {
                    // the global window is in the lock_all epoch
                    let _ = rma::flush(gh, g);
                }
            }
        }
        for &t in &w.access {
            notify(t, DONE_TAG, w.ctl);
        }
        w.access.clear();
        w.started = false;
        Ok(())
    }

    fn wait_epoch(&mut self) -> Result<(), Fail> {
        let w = self;
        if w.exposure.is_empty() {
            return Err(sync_err("MPI_Win_wait: no exposure epoch is open"));
        }
        // the receives posted by `post`
        let _ = p2p::waitall(&mut w.exposure);
        let _ = rma::sync(global());
        w.exposure.clear();
        std::sync::atomic::fence(Ordering::SeqCst);
        Ok(())
    }

    /// Whether the exposure epoch ended (it is closed then).
    fn test_epoch(&mut self) -> Result<bool, Fail> {
        let w = self;
        if w.exposure.is_empty() {
            return Err(sync_err("MPI_Win_test: no exposure epoch is open"));
        }
        // the receives posted by `post`
        let f = p2p::testall(&mut w.exposure).unwrap_or(false);
        if f {
            w.exposure.clear();
            // as in wait
            let _ = rma::sync(global());
            std::sync::atomic::fence(Ordering::SeqCst);
        }
        Ok(f)
    }
}

/// A target's lock word: in this process's mapping (direct windows), or at its bound
/// ghost in the internal window.
enum Word {
    Here(&'static AtomicI64),
    Ghost { gh: i32, disp: MPI_Aint },
}

impl Word {
    /// Adds `v` and returns the previous value, once the addition is done at the word: MPI
    /// completes an operation only at a synchronization call (MPI-4.0 §12.5), and Open
    /// MPI's osc/pt2pt keeps an unflushed accumulate at the origin, so a release left in
    /// flight kept the lock from every other process (ompi-tests' rma_ghost hung).
    fn fetch_add(&self, v: i64) -> i64 {
        match self {
            Word::Here(a) => a.fetch_add(v, Ordering::AcqRel),
            Word::Ghost { gh, disp } => {
                let mut old: i64 = 0;
                // SAFETY: one int64 each way, alive until the flush below completes the
                // operation; the internal window is in the standing lock_all epoch.
                let _ = unsafe {
                    rma::fetch_and_op(
                        (&v as *const i64).cast(),
                        (&mut old as *mut i64).cast(),
                        MPI_INT64_T(),
                        *gh,
                        *disp,
                        MPI_SUM(),
                        global(),
                    )
                };
                let _ = rma::flush(*gh, global());
                old
            }
        }
    }
    /// Replaces `current` with `new`; returns the previous value.
    fn compare_exchange(&self, current: i64, new: i64) -> i64 {
        match self {
            Word::Here(a) => a
                .compare_exchange(current, new, Ordering::AcqRel, Ordering::Acquire)
                .unwrap_or_else(|v| v),
            Word::Ghost { gh, disp } => {
                let mut old: i64 = 0;
                // SAFETY: as in fetch_add.
                let _ = unsafe {
                    rma::compare_and_swap(
                        (&new as *const i64).cast(),
                        (&current as *const i64).cast(),
                        (&mut old as *mut i64).cast(),
                        MPI_INT64_T(),
                        *gh,
                        *disp,
                        global(),
                    )
                };
                let _ = rma::flush(*gh, global());
                old
            }
        }
    }
}

/// Waiting for a lock another process holds: spin briefly, then yield the core (the
/// holder may share it), then nap.
fn backoff(tries: &mut u32) {
    *tries += 1;
    if *tries < 16 {
        core::hint::spin_loop();
    } else if *tries < 64 {
        std::thread::yield_now();
    } else {
        std::thread::sleep(std::time::Duration::from_micros(20));
    }
}

impl UserWin {
    fn word(&self, t: i32) -> Word {
        let tg = &self.targets[t as usize];
        match &self.direct {
            Some(peers) => {
                let p = &peers[t as usize];
                // SAFETY: the lock word lies in the target's hidden bytes, mapped for the
                // window's life, 8-byte aligned (hidden bytes start at a multiple of 64).
                Word::Here(unsafe {
                    &*p.base
                        .wrapping_offset((tg.hidden + LOCK_WORD_AT) as isize)
                        .cast::<AtomicI64>()
                })
            }
            None => Word::Ghost {
                gh: tg.ghosts[tg.bound],
                disp: tg.addrs[tg.bound] + tg.hidden + LOCK_WORD_AT,
            },
        }
    }
    /// Takes target `t`'s lock word, shared or exclusive; returns when it is held.
    fn acquire(&self, t: i32, exclusive: bool) {
        let word = self.word(t);
        let mut tries = 0;
        if exclusive {
            while word.compare_exchange(0, WRITER) != 0 {
                backoff(&mut tries);
            }
        } else {
            while word.fetch_add(1) < 0 {
                word.fetch_add(-1);
                backoff(&mut tries);
            }
        }
    }
    fn release(&self, t: i32, exclusive: bool) {
        self.word(t).fetch_add(if exclusive { -WRITER } else { -1 });
    }
    /// Completes this origin's operations to target `t` at the target.
    fn complete_at(&self, t: i32) -> Result<(), Fail> {
        if self.direct.is_some() {
            // the operations completed when they were issued (`direct.rs`)
            std::sync::atomic::fence(Ordering::SeqCst);
            return Ok(());
        }
        for &gh in &self.targets[t as usize].ghosts {
            // the internal window is in the standing lock_all epoch
            rma::flush(gh, global()).map_err(|e| (e.code(), "MPI_Win_flush".to_string()))?;
        }
        Ok(())
    }
    fn check_target(&self, rank: c_int, what: &str) -> Result<(), Fail> {
        if rank < 0 || rank as usize >= self.targets.len() {
            return Err((
                MPI_ERR_RANK,
                format!("{what}: rank {rank} is not in the window's group"),
            ));
        }
        Ok(())
    }
}

/// `MPI_Win_lock`: the target's lock word, unless NOCHECK; a self-lock is doubled on the
/// user window (§4.8). On a window the ghosts do not serve, an invalid lock type is
/// raised here with the class MPI-4.0 §12.5.3 and §9.4 give it, `MPI_ERR_LOCKTYPE`: MPICH
/// (4.0.2, 5.0.2) and Intel MPI report it as `MPI_ERR_ARG` (README, "Problems of the
/// system MPI"); everything else goes to the library.
pub fn lock(lock_type: c_int, rank: c_int, assert: c_int, win: MPI_Win) -> Handled {
    match with(win, |w| result(win, w.lock_target(lock_type, rank, assert))) {
        Handled::NotOurs if !lock_type_valid(lock_type) && rma::valid(win) => {
            Handled::Served(result(win, Err(bad_lock_type(lock_type))))
        }
        h => h,
    }
}

/// `MPI_LOCK_EXCLUSIVE` or `MPI_LOCK_SHARED`, the only lock types (MPI-4.1 §12.5.3).
fn lock_type_valid(lock_type: c_int) -> bool {
    lock_type == MPI_LOCK_EXCLUSIVE || lock_type == MPI_LOCK_SHARED
}

fn bad_lock_type(lock_type: c_int) -> Fail {
    (
        MPI_ERR_LOCKTYPE,
        format!("MPI_Win_lock: lock type {lock_type}"),
    )
}

/// `MPI_Win_unlock`: the epoch's operations complete at the target, then the lock word is
/// released.
pub fn unlock(rank: c_int, win: MPI_Win) -> Handled {
    with(win, |w| result(win, w.unlock_target(rank)))
}

/// `MPI_Win_lock_all`: a shared lock on every target's word, unless NOCHECK (§12.5.3:
/// the epoch is a shared lock on every process of the window).
pub fn lock_all(assert: c_int, win: MPI_Win) -> Handled {
    with(win, |w| result(win, w.open_lock_all(assert)))
}

/// `MPI_Win_unlock_all`.
pub fn unlock_all(win: MPI_Win) -> Handled {
    with(win, |w| result(win, w.close_lock_all()))
}

/// The passive-target epochs on one window; the public functions above raise the errors
/// on the window.
impl UserWin {
    fn lock_target(&mut self, lock_type: c_int, rank: c_int, assert: c_int) -> Result<(), Fail> {
        let w = self;
        // the lock type first, as both library families check it (and a window the
        // ghosts do not serve, `lock`): an invalid one is an error on MPI_PROC_NULL too
        if !lock_type_valid(lock_type) {
            return Err(bad_lock_type(lock_type));
        }
        if rank == MPI_PROC_NULL {
            return Ok(());
        }
        w.check_target(rank, "MPI_Win_lock")?;
        if !w.locks_used {
            return Err(sync_err(
                "MPI_Win_lock on a window whose info epochs_used excludes lock",
            ));
        }
        if w.locked.contains_key(&rank) || w.lock_all.is_some() {
            return Err(sync_err("MPI_Win_lock: the target is already locked"));
        }
        let exclusive = lock_type == MPI_LOCK_EXCLUSIVE;
        let held = (assert & MPI_MODE_NOCHECK == 0).then_some(exclusive);
        if held.is_some() {
            w.acquire(rank, exclusive);
        }
        let mut l = Lock {
            held,
            self_lock: false,
        };
        if rank == w.me && !w.no_local_load_store {
            // an uncontended lock: nobody else locks the user window
            let _ = rma::lock(lock_type, w.me, 0, w.win);
            l.self_lock = true;
        }
        std::sync::atomic::fence(Ordering::SeqCst);
        w.locked.insert(rank, l);
        Ok(())
    }

    fn unlock_target(&mut self, rank: c_int) -> Result<(), Fail> {
        let w = self;
        if rank == MPI_PROC_NULL {
            return Ok(());
        }
        w.check_target(rank, "MPI_Win_unlock")?;
        let Some(l) = w.locked.remove(&rank) else {
            return Err(sync_err("MPI_Win_unlock: the target is not locked"));
        };
        std::sync::atomic::fence(Ordering::SeqCst);
        w.complete_at(rank)?;
        if l.self_lock {
            // the second self-lock taken by `lock`
            let _ = rma::unlock(w.me, w.win);
        }
        if let Some(exclusive) = l.held {
            w.release(rank, exclusive);
        }
        Ok(())
    }

    fn open_lock_all(&mut self, assert: c_int) -> Result<(), Fail> {
        let w = self;
        if !w.locks_used {
            return Err(sync_err(
                "MPI_Win_lock_all on a window whose info epochs_used excludes lockall",
            ));
        }
        if w.lock_all.is_some() || !w.locked.is_empty() {
            return Err(sync_err("MPI_Win_lock_all: a lock is already held"));
        }
        let held = assert & MPI_MODE_NOCHECK == 0;
        if held {
            for t in 0..w.targets.len() as i32 {
                w.acquire(t, false);
            }
        }
        std::sync::atomic::fence(Ordering::SeqCst);
        w.lock_all = Some(held);
        Ok(())
    }

    fn close_lock_all(&mut self) -> Result<(), Fail> {
        let w = self;
        let Some(held) = w.lock_all else {
            return Err(sync_err("MPI_Win_unlock_all: no lock_all epoch is open"));
        };
        std::sync::atomic::fence(Ordering::SeqCst);
        if w.direct.is_none() {
            // the internal window is in the standing lock_all epoch
            rma::flush_all(global()).map_err(|e| (e.code(), "MPI_Win_unlock_all".to_string()))?;
        }
        if held {
            for t in 0..w.targets.len() as i32 {
                w.release(t, false);
            }
        }
        w.lock_all = None;
        Ok(())
    }

    fn flush_rank(&mut self, rank: c_int, local: bool) -> Result<(), Fail> {
        if rank == MPI_PROC_NULL {
            return Ok(());
        }
        self.check_target(rank, "MPI_Win_flush")?;
        flush_target(self, rank, local)
    }

    fn flush_every(&mut self, local: bool) -> Result<(), Fail> {
        let w = self;
        let targets: Vec<i32> = if w.lock_all.is_some() {
            (0..w.targets.len() as i32).collect()
        } else {
            let mut v: Vec<i32> = w.locked.keys().copied().collect();
            v.sort_unstable();
            v
        };
        for t in targets {
            flush_target(w, t, local)?;
        }
        let g = global();
        // the global window is always in the lock_all epoch
        let _ = if local && !FULL_FLUSH_ONLY {
            rma::flush_local_all(g)
        } else {
            rma::flush_all(g)
        };
        Ok(())
    }
}

/// A workaround for Open MPI 4.1's osc/pt2pt (the component its TCP transport uses), for
/// epochs that reach more than one ghost, reproduced without the shim with Debian's Open
/// MPI 4.1.4 (`--mca osc pt2pt`) on a dynamic window whose targets sit in `MPI_Iprobe`
/// loops as ghosts do: `MPI_Win_flush_local` never returns after an `MPI_Get` in a
/// `lock_all` epoch with two such targets; `MPI_Win_flush` does. So local flushes on the
/// internal window are full flushes (a full flush also completes the operations locally,
/// MPI-4.0 §12.5.4).
const FULL_FLUSH_ONLY: bool = cfg!(feature = "abi-ompi");

/// Flushes (or locally flushes) the ghosts serving `rank`.
fn flush_target(w: &mut UserWin, rank: c_int, local: bool) -> Result<(), Fail> {
    if !w.in_epoch(rank) {
        return Err(sync_err("MPI_Win_flush: no epoch is open to the target"));
    }
    if w.direct.is_some() || !local || FULL_FLUSH_ONLY {
        return w.complete_at(rank);
    }
    for &gh in &w.targets[rank as usize].ghosts {
        // the internal window is in the standing lock_all epoch
        rma::flush_local(gh, global())
            .map_err(|e| (e.code(), "MPI_Win_flush_local".to_string()))?;
    }
    Ok(())
}

/// `MPI_Win_flush(_local)`.
pub fn flush(rank: c_int, win: MPI_Win, local: bool) -> Handled {
    with(win, |w| result(win, w.flush_rank(rank, local)))
}

/// `MPI_Win_flush_all` / `MPI_Win_flush_local_all`: every target in an epoch.
pub fn flush_all(win: MPI_Win, local: bool) -> Handled {
    with(win, |w| result(win, w.flush_every(local)))
}

/// `MPI_Win_sync`: the memory barrier the MPI library issues, on the windows in use.
pub fn sync(win: MPI_Win) -> Handled {
    with(win, |_w| {
        std::sync::atomic::fence(Ordering::SeqCst);
        // the global window is always in the lock_all epoch
        rma::sync(global()).err().map_or(MPI_SUCCESS, |e| e.code())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::platform::mpi::fake;

    /// The internal window's handle in every test.
    fn g() -> i64 {
        super::super::common::set_global_for_tests(7001 as MPI_Win) as i64
    }
    const USER_WIN: i64 = 501;
    const CTL: i64 = 601;

    /// A target whose node has the ghosts `ghosts` (its memory at `addrs` in each), bound to
    /// `ghosts[bound]`.
    fn target(ghosts: &[i32], addrs: &[i64], disp_unit: i64, size: i64, bound: usize) -> Target {
        Target {
            disp_unit,
            size,
            hidden: hidden_at(size),
            ghosts: ghosts.to_vec(),
            addrs: addrs.to_vec(),
            bound,
        }
    }

    impl UserWin {
        /// A window served by ghosts (not direct), this process being `me`.
        fn for_tests(me: i32, targets: Vec<Target>) -> UserWin {
            g();
            UserWin {
                win: USER_WIN as MPI_Win,
                ctl: CTL as MPI_Comm,
                me,
                targets,
                base: std::ptr::null_mut(),
                map_len: 0,
                locks_used: true,
                no_local_load_store: false,
                fence: false,
                started: false,
                access: Vec::new(),
                exposure: Vec::new(),
                locked: HashMap::new(),
                lock_all: None,
                sent: HashMap::new(),
                rng: 1,
                id: 0,
                direct: None,
                direct_ops: 0,
                attrs: Box::new(Attrs {
                    size: 0,
                    disp_unit: 1,
                    flavor: MPI_WIN_FLAVOR_ALLOCATE,
                }),
            }
        }
    }

    /// Three processes: target 1's node has ghosts 10 and 11, its memory (100 bytes,
    /// disp_unit 8) at 1000 and 2000 there, bound to 11; targets 0 and 2 have ghost 20.
    fn three() -> UserWin {
        UserWin::for_tests(
            0,
            vec![
                target(&[20], &[300], 4, 64, 0),
                target(&[10, 11], &[1000, 2000], 8, 100, 1),
                target(&[20], &[500], 4, 64, 0),
            ],
        )
    }

    /// Target 1's lock word, at its bound ghost: its address there + the hidden bytes
    /// (after 100 bytes: 128) + the word's offset.
    const WORD_1: i64 = 2000 + 128 + LOCK_WORD_AT;

    fn calls() -> Vec<(&'static str, Vec<i64>)> {
        fake::calls()
            .into_iter()
            .map(|c| (c.name, c.args))
            .collect()
    }

    /// Answers every call with success; `cas` and `fao` give the lock word's successive
    /// previous values (0 once they run out).
    fn word_fake(cas: Vec<i64>, fao: Vec<i64>) -> fake::Guard {
        let (mut cas, mut fao) = (cas.into_iter(), fao.into_iter());
        fake::install(move |c| match c.name {
            "compare_and_swap" => Ok(vec![cas.next().unwrap_or(0)]),
            "fetch_and_op" => Ok(vec![fao.next().unwrap_or(0)]),
            _ => Ok(vec![]),
        })
    }

    fn cas(new: i64, cmp: i64) -> (&'static str, Vec<i64>) {
        (
            "compare_and_swap",
            vec![new, cmp, MPI_INT64_T() as i64, 11, WORD_1, g()],
        )
    }
    fn fao(v: i64) -> (&'static str, Vec<i64>) {
        (
            "fetch_and_op",
            vec![v, MPI_INT64_T() as i64, 11, WORD_1, MPI_SUM() as i64, g()],
        )
    }
    fn flush(gh: i64) -> (&'static str, Vec<i64>) {
        ("win_flush", vec![gh, g()])
    }

    #[test]
    fn exclusive_lock_swaps_the_word_in_at_the_bound_ghost_and_unlock_flushes_the_release() {
        let _f = word_fake(vec![0], vec![WRITER]);
        let mut w = three();
        assert_eq!(w.lock_target(MPI_LOCK_EXCLUSIVE, 1, 0), Ok(()));
        // acquired before MPI_Win_lock returns: the swap is complete at the ghost
        assert_eq!(calls(), [cas(WRITER, 0), flush(11)]);
        assert_eq!(w.locked[&1].held, Some(true));
        let _f = word_fake(vec![], vec![WRITER]);
        assert_eq!(w.unlock_target(1), Ok(()));
        // the epoch's operations complete at every ghost of the target, then the word is
        // released, and that release is flushed too (Open MPI osc/pt2pt keeps an
        // unflushed accumulate at the origin)
        assert_eq!(calls(), [flush(10), flush(11), fao(-WRITER), flush(11)]);
        assert!(w.locked.is_empty());
    }

    #[test]
    fn exclusive_lock_waits_while_readers_or_a_writer_hold_the_word() {
        let _f = word_fake(vec![WRITER, 2, 0], vec![]);
        let mut w = three();
        assert_eq!(w.lock_target(MPI_LOCK_EXCLUSIVE, 1, 0), Ok(()));
        let n: Vec<_> = fake::names();
        assert_eq!(
            n,
            [
                "compare_and_swap",
                "win_flush",
                "compare_and_swap",
                "win_flush",
                "compare_and_swap",
                "win_flush"
            ]
        );
        assert!(
            calls()
                .iter()
                .filter(|c| c.0 == "compare_and_swap")
                .all(|c| *c == cas(WRITER, 0))
        );
    }

    #[test]
    fn shared_lock_counts_in_and_takes_its_increment_back_from_a_writer() {
        // the first increment finds a writer (negative), the second finds one reader
        let _f = word_fake(vec![], vec![WRITER, WRITER + 1, 1]);
        let mut w = three();
        assert_eq!(w.lock_target(MPI_LOCK_SHARED, 1, 0), Ok(()));
        assert_eq!(
            calls(),
            [fao(1), flush(11), fao(-1), flush(11), fao(1), flush(11)]
        );
        assert_eq!(w.locked[&1].held, Some(false));
        let _f = word_fake(vec![], vec![2]);
        assert_eq!(w.unlock_target(1), Ok(()));
        assert_eq!(calls(), [flush(10), flush(11), fao(-1), flush(11)]);
    }

    #[test]
    fn nocheck_takes_no_lock() {
        let _f = word_fake(vec![], vec![]);
        let mut w = three();
        for lt in [MPI_LOCK_EXCLUSIVE, MPI_LOCK_SHARED] {
            assert_eq!(w.lock_target(lt, 1, MPI_MODE_NOCHECK), Ok(()));
            assert_eq!(w.locked[&1].held, None);
            assert_eq!(w.unlock_target(1), Ok(()));
        }
        // only the completions of the two epochs, no atomic on the lock word
        assert_eq!(calls(), [flush(10), flush(11), flush(10), flush(11)]);
        let _f = word_fake(vec![], vec![]);
        assert_eq!(w.open_lock_all(MPI_MODE_NOCHECK), Ok(()));
        assert_eq!(w.close_lock_all(), Ok(()));
        assert_eq!(calls(), [("win_flush_all", vec![g()])]);
    }

    #[test]
    fn lock_all_shares_every_word_and_unlock_all_completes_before_releasing() {
        let _f = word_fake(vec![], vec![]);
        let mut w = three();
        assert_eq!(w.open_lock_all(0), Ok(()));
        let got = calls();
        let adds: Vec<(i64, i64, i64)> = got
            .iter()
            .filter(|c| c.0 == "fetch_and_op")
            .map(|c| (c.1[0], c.1[2], c.1[3]))
            .collect();
        // one shared increment per target, at each target's bound ghost and lock word
        assert_eq!(
            adds,
            [
                (1, 20, 300 + 64 + LOCK_WORD_AT),
                (1, 11, WORD_1),
                (1, 20, 500 + 64 + LOCK_WORD_AT)
            ]
        );
        assert_eq!(w.lock_all, Some(true));
        let _f = word_fake(vec![], vec![]);
        assert_eq!(w.close_lock_all(), Ok(()));
        let got = calls();
        assert_eq!(got[0], ("win_flush_all", vec![g()]));
        let releases: Vec<i64> = got
            .iter()
            .filter(|c| c.0 == "fetch_and_op")
            .map(|c| c.1[0])
            .collect();
        assert_eq!(releases, [-1, -1, -1]);
        assert_eq!(w.lock_all, None);
    }

    #[test]
    fn a_self_lock_is_doubled_on_the_user_window() {
        let _f = word_fake(vec![0], vec![]);
        let mut w = three();
        assert_eq!(w.lock_target(MPI_LOCK_EXCLUSIVE, 0, 0), Ok(()));
        assert_eq!(fake::names(), ["compare_and_swap", "win_flush", "win_lock"]);
        assert_eq!(calls()[2].1, [MPI_LOCK_EXCLUSIVE as i64, 0, 0, USER_WIN]);
        let _f = word_fake(vec![], vec![WRITER]);
        assert_eq!(w.unlock_target(0), Ok(()));
        // the user window's lock goes after the completion, before the word's release
        assert_eq!(
            fake::names(),
            ["win_flush", "win_unlock", "fetch_and_op", "win_flush"]
        );
        assert_eq!(calls()[1].1, [0, USER_WIN]);
    }

    #[test]
    fn lock_arguments_are_checked_before_anything_is_taken() {
        let bad = MPI_LOCK_EXCLUSIVE + MPI_LOCK_SHARED + 1;
        // (lock type, rank) -> the error class, or None for success without any call
        let cases = [
            (bad, 1, Some(MPI_ERR_LOCKTYPE)),
            (-1, 2, Some(MPI_ERR_LOCKTYPE)),
            (bad, 3, Some(MPI_ERR_LOCKTYPE)),
            (MPI_LOCK_SHARED, 3, Some(MPI_ERR_RANK)),
            (MPI_LOCK_SHARED, -2, Some(MPI_ERR_RANK)),
            (bad, MPI_PROC_NULL, Some(MPI_ERR_LOCKTYPE)),
            (MPI_LOCK_EXCLUSIVE, MPI_PROC_NULL, None),
        ];
        for (lt, rank, class) in cases {
            let _f = word_fake(vec![], vec![]);
            let mut w = three();
            let r = w.lock_target(lt, rank, 0);
            assert_eq!(
                r.map_err(|e| e.0).err(),
                class,
                "lock type {lt}, rank {rank}"
            );
            assert!(fake::calls().is_empty(), "lock type {lt}, rank {rank}");
            assert!(w.locked.is_empty());
        }
    }

    #[test]
    fn epochs_out_of_order_are_rma_sync_errors() {
        let _f = word_fake(vec![], vec![]);
        type Step = fn(&mut UserWin) -> Result<(), Fail>;
        let cases: [(&str, Step, Step); 8] = [
            ("complete without start", |_| Ok(()), |w| w.complete_epoch()),
            ("wait without post", |_| Ok(()), |w| w.wait_epoch()),
            (
                "test without post",
                |_| Ok(()),
                |w| w.test_epoch().map(|_| ()),
            ),
            ("unlock without lock", |_| Ok(()), |w| w.unlock_target(1)),
            (
                "unlock_all without lock_all",
                |_| Ok(()),
                |w| w.close_lock_all(),
            ),
            (
                "lock twice",
                |w| w.lock_target(MPI_LOCK_SHARED, 1, 0),
                |w| w.lock_target(MPI_LOCK_SHARED, 1, 0),
            ),
            (
                "lock inside lock_all",
                |w| w.open_lock_all(0),
                |w| w.lock_target(MPI_LOCK_SHARED, 2, 0),
            ),
            (
                "fence inside a lock epoch",
                |w| w.lock_target(MPI_LOCK_SHARED, 1, 0),
                |w| w.fence_epoch(0),
            ),
        ];
        for (what, first, then) in cases {
            let mut w = three();
            assert_eq!(first(&mut w), Ok(()), "{what}");
            let n = fake::calls().len();
            let r = then(&mut w);
            assert_eq!(r.map_err(|e| e.0), Err(MPI_ERR_RMA_SYNC), "{what}");
            assert_eq!(fake::calls().len(), n, "{what}: no MPI call");
        }
        // a window whose info excludes locks
        let mut w = three();
        w.locks_used = false;
        assert_eq!(
            w.lock_target(MPI_LOCK_SHARED, 1, 0).map_err(|e| e.0),
            Err(MPI_ERR_RMA_SYNC)
        );
        assert_eq!(w.open_lock_all(0).map_err(|e| e.0), Err(MPI_ERR_RMA_SYNC));
    }

    #[test]
    fn operations_go_to_the_bound_ghost_at_the_translated_displacement() {
        let _f = word_fake(vec![], vec![]);
        let mut w = three();
        let dt = MPI_INT64_T();
        // outside an epoch: MPI_ERR_RMA_SYNC; outside the group: MPI_ERR_RANK
        let e = w.route_op(1, 5, true, 1, dt, "MPI_Accumulate").err();
        assert_eq!(e.map(|e| e.0), Some(MPI_ERR_RMA_SYNC));
        w.lock_all = Some(true);
        for bad in [3, -2] {
            let e = w.route_op(bad, 5, true, 1, dt, "MPI_Put").err();
            assert_eq!(e.map(|e| e.0), Some(MPI_ERR_RANK));
        }
        // (target, disp, accumulate) -> (ghost, displacement in the internal window)
        let cases = [
            (1, 5, true, 11, 2000 + 5 * 8),
            (1, 0, false, 11, 2000),
            (0, 3, true, 20, 300 + 3 * 4),
            (2, 7, false, 20, 500 + 7 * 4),
        ];
        for (t, disp, acc, gh, at) in cases {
            match w.route_op(t, disp, acc, 1, dt, "MPI_Accumulate") {
                Ok(Routed::Ghost(r)) => {
                    assert_eq!((r.rank, r.disp), (gh, at), "target {t}");
                    assert_eq!(r.win as i64, g());
                }
                _ => panic!("target {t}: not routed to a ghost"),
            }
        }
        assert_eq!(w.sent[&11].0, 2);
        assert_eq!(w.sent[&20].0, 2);
        assert!(!w.sent.contains_key(&10));
        // MPI_PROC_NULL stays a no-op
        match w.route_op(MPI_PROC_NULL, 9, false, 1, dt, "MPI_Get") {
            Ok(Routed::Ghost(r)) => assert_eq!((r.rank, r.disp), (MPI_PROC_NULL, 9)),
            _ => panic!("MPI_PROC_NULL"),
        }
        assert!(fake::calls().is_empty());
    }

    #[test]
    fn errors_from_mpi_come_back_unchanged() {
        const CODE: c_int = 4242;
        type Step = fn(&mut UserWin) -> Result<(), Fail>;
        // (what, the failing call, the epoch opened first, the call that returns the code)
        let cases: [(&str, &str, Step, Step); 5] = [
            (
                "unlock",
                "win_flush",
                |w| w.lock_target(MPI_LOCK_SHARED, 1, MPI_MODE_NOCHECK),
                |w| w.unlock_target(1),
            ),
            (
                "flush",
                "win_flush",
                |w| w.lock_target(MPI_LOCK_SHARED, 1, MPI_MODE_NOCHECK),
                |w| w.flush_rank(1, false),
            ),
            (
                "unlock_all",
                "win_flush_all",
                |w| w.open_lock_all(MPI_MODE_NOCHECK),
                |w| w.close_lock_all(),
            ),
            (
                "fence flush",
                "win_flush_all",
                |_| Ok(()),
                |w| w.fence_epoch(0),
            ),
            ("fence barrier", "barrier", |_| Ok(()), |w| w.fence_epoch(0)),
        ];
        for (what, failing, first, then) in cases {
            let _f = fake::install(move |c| {
                if c.name == failing {
                    Err(CODE)
                } else {
                    Ok(vec![0])
                }
            });
            let mut w = three();
            assert_eq!(first(&mut w), Ok(()), "{what}");
            assert_eq!(then(&mut w).map_err(|e| e.0), Err(CODE), "{what}");
        }
        if !FULL_FLUSH_ONLY {
            let _f = fake::install(|c| {
                if c.name == "win_flush_local" {
                    Err(CODE)
                } else {
                    Ok(vec![])
                }
            });
            let mut w = three();
            w.lock_all = Some(false);
            assert_eq!(w.flush_rank(1, true).map_err(|e| e.0), Err(CODE));
        }
    }

    #[test]
    fn flush_all_flushes_the_locked_targets_ghosts_then_the_internal_window() {
        let _f = word_fake(vec![], vec![]);
        let mut w = three();
        for t in [2, 1] {
            assert_eq!(w.lock_target(MPI_LOCK_SHARED, t, MPI_MODE_NOCHECK), Ok(()));
        }
        assert_eq!(w.flush_every(false), Ok(()));
        assert_eq!(
            calls(),
            [
                flush(10),
                flush(11),
                flush(20),
                ("win_flush_all", vec![g()])
            ]
        );
        if !FULL_FLUSH_ONLY {
            let _f = word_fake(vec![], vec![]);
            assert_eq!(w.flush_every(true), Ok(()));
            assert_eq!(
                fake::names(),
                [
                    "win_flush_local",
                    "win_flush_local",
                    "win_flush_local",
                    "win_flush_local_all"
                ]
            );
        }
        // a target outside every epoch cannot be flushed
        assert_eq!(
            w.flush_rank(0, false).map_err(|e| e.0),
            Err(MPI_ERR_RMA_SYNC)
        );
        // MPI_PROC_NULL: nothing to do
        let _f = word_fake(vec![], vec![]);
        assert_eq!(w.flush_rank(MPI_PROC_NULL, false), Ok(()));
        assert!(fake::calls().is_empty());
    }

    #[test]
    fn fence_skips_the_barrier_only_under_noprecede_nostore_and_noput() {
        let all3 = MPI_MODE_NOPRECEDE | MPI_MODE_NOSTORE | MPI_MODE_NOPUT;
        let cases: [(c_int, &[&str]); 4] = [
            (0, &["win_flush_all", "win_sync", "barrier"]),
            (MPI_MODE_NOPRECEDE, &["win_sync", "barrier"]),
            (
                MPI_MODE_NOSTORE | MPI_MODE_NOPUT,
                &["win_flush_all", "win_sync", "barrier"],
            ),
            (all3, &["win_sync"]),
        ];
        for (assert, names) in cases {
            let _f = word_fake(vec![], vec![]);
            let mut w = three();
            assert_eq!(w.fence_epoch(assert), Ok(()));
            assert_eq!(fake::names(), names, "assert {assert}");
            assert!(w.fence, "a fence opens the next epoch");
            assert!(calls().iter().all(|c| c.1 == [g()] || c.1 == [CTL]));
        }
        let _f = word_fake(vec![], vec![]);
        let mut w = three();
        assert_eq!(w.fence_epoch(MPI_MODE_NOSUCCEED), Ok(()));
        assert!(!w.fence, "NOSUCCEED: no epoch follows");
    }

    /// Group calls answered as if the group were ranks `ranks` of the window.
    fn group_fake(ranks: Vec<i64>) -> fake::Guard {
        fake::install(move |c| match c.name {
            "group_size" => Ok(vec![ranks.len() as i64]),
            "group_translate_ranks" => Ok(ranks.clone()),
            "comm_group" => Ok(vec![77]),
            // the seam records (buf, count, datatype, peer, tag, comm): the request names the peer
            "isend" | "irecv" => Ok(vec![900 + c.args[3]]),
            _ => Ok(vec![]),
        })
    }

    #[test]
    fn complete_completes_at_each_ghost_once_then_notifies_every_target() {
        let _f = group_fake(vec![1, 2]);
        let mut w = three();
        assert_eq!(w.start_epoch(5 as MPI_Group, MPI_MODE_NOCHECK), Ok(()));
        assert_eq!(w.access, [1, 2]);
        let _f = group_fake(vec![]);
        assert_eq!(w.complete_epoch(), Ok(()));
        let got = calls();
        let flushed: Vec<i64> = got
            .iter()
            .filter(|c| c.0 == "win_flush")
            .map(|c| c.1[0])
            .collect();
        assert_eq!(flushed, [10, 11, 20]);
        let notices: Vec<Vec<i64>> = got
            .iter()
            .filter(|c| c.0 == "isend")
            // the seam records (buf, count, datatype, dest, tag, comm)
            .map(|c| {
                c.1[1..]
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| *i != 1)
                    .map(|(_, w)| *w)
                    .collect::<Vec<i64>>()
            })
            .collect();
        assert_eq!(
            notices,
            [
                vec![0, 1, DONE_TAG as i64, CTL],
                vec![0, 2, DONE_TAG as i64, CTL]
            ]
        );
        // each notice's request is freed to complete on its own, after the flushes
        assert_eq!(got.iter().filter(|c| c.0 == "request_free").count(), 2);
        let last_flush = got.iter().rposition(|c| c.0 == "win_flush").unwrap();
        assert!(got.iter().position(|c| c.0 == "isend").unwrap() > last_flush);
        assert!(!w.started && w.access.is_empty());
    }

    #[test]
    fn start_waits_for_each_post_notice_unless_nocheck() {
        let _f = group_fake(vec![2, 0]);
        let mut w = three();
        assert_eq!(w.start_epoch(5 as MPI_Group, 0), Ok(()));
        let recvs: Vec<Vec<i64>> = calls()
            .into_iter()
            .filter(|c| c.0 == "recv")
            .map(|c| c.1)
            .collect();
        assert_eq!(
            recvs,
            [
                vec![0, 2, POST_TAG as i64, CTL],
                vec![0, 0, POST_TAG as i64, CTL]
            ]
        );
        // the window's group translated to its communicator, the group freed again
        assert!(calls().contains(&("group_free", vec![77])));
        assert_eq!(
            w.start_epoch(5 as MPI_Group, 0).map_err(|e| e.0),
            Err(MPI_ERR_RMA_SYNC)
        );
    }

    #[test]
    fn post_then_test_and_wait_close_the_exposure_epoch() {
        let _f = group_fake(vec![1, 2]);
        let mut w = three();
        assert_eq!(w.post_epoch(5 as MPI_Group, 0), Ok(()));
        // a receive for each origin's completion notice, and a post notice to each
        assert_eq!(w.exposure, [901 as MPI_Request, 902 as MPI_Request]);
        let notices: Vec<i64> = calls()
            .iter()
            .filter(|c| c.0 == "isend")
            .map(|c| c.1[3])
            .collect();
        assert_eq!(notices, [1, 2]);
        assert_eq!(
            w.post_epoch(5 as MPI_Group, 0).map_err(|e| e.0),
            Err(MPI_ERR_RMA_SYNC)
        );
        // not done yet: the epoch stays open
        let _f = fake::install(|c| Ok(if c.name == "testall" { vec![0] } else { vec![] }));
        assert_eq!(w.test_epoch(), Ok(false));
        assert_eq!(fake::names(), ["testall"]);
        assert_eq!(w.exposure.len(), 2);
        let _f = fake::install(|c| Ok(if c.name == "testall" { vec![1] } else { vec![] }));
        assert_eq!(w.test_epoch(), Ok(true));
        assert_eq!(fake::names(), ["testall", "win_sync"]);
        assert!(w.exposure.is_empty());
        // NOCHECK: no post notices; an empty group still opens an epoch that wait closes
        let _f = group_fake(vec![]);
        assert_eq!(w.post_epoch(5 as MPI_Group, MPI_MODE_NOCHECK), Ok(()));
        assert!(!fake::names().contains(&"isend"));
        assert_eq!(w.exposure.len(), 1);
        let _f = group_fake(vec![]);
        assert_eq!(w.wait_epoch(), Ok(()));
        assert_eq!(calls(), [("waitall", vec![1]), ("win_sync", vec![g()])]);
        assert!(w.exposure.is_empty());
    }

    #[test]
    fn free_detaches_at_the_ghosts_between_barriers_and_returns_win_free_code() {
        let lay = Layout {
            ghosts: 2,
            user_world_rank: vec![0, 3, 4],
            user_node: vec![0, 0, 1],
            user_local: vec![0, 1, 0],
            node_ghosts: vec![vec![10, 11], vec![20]],
            ctl: 999 as MPI_Comm,
            balance: GhostBalance::Static,
            direct: false,
        };
        let _f = fake::install(|c| match c.name {
            "win_free" => Err(4343),
            _ => Ok(vec![0]),
        });
        let mut w = UserWin::for_tests(
            1,
            vec![
                target(&[20], &[300], 4, 64, 0),
                target(&[10, 11], &[1000, 2000], 8, 100, 1),
            ],
        );
        assert_eq!(w.release_all(&lay), 4343);
        assert_eq!(
            fake::names(),
            [
                "barrier",
                "send",
                "recv",
                "send",
                "recv",
                "barrier",
                "win_free",
                "comm_free"
            ]
        );
        let got = calls();
        // each of this process's ghosts detaches its memory, on the control communicator
        let to: Vec<(i64, i64)> = got
            .iter()
            .filter(|c| c.0 == "send")
            .map(|c| (c.1[1], c.1[3]))
            .collect();
        assert_eq!(to, [(10, 999), (11, 999)]);
        assert_eq!(got[0].1, [CTL]);
        assert_eq!(got[6].1, [USER_WIN]);
    }

    #[test]
    fn object_names_are_unguessable() {
        let (a, b) = (object_nonce().unwrap(), object_nonce().unwrap());
        assert_ne!(a, b);
        let (na, nb) = (object_name(4242, 7, a), object_name(4242, 7, b));
        assert_ne!(na, nb);
        let rand = na.strip_prefix("/shim-4242-7-").expect(&na);
        assert_eq!(rand.len(), 16, "{na}");
        assert!(rand.bytes().all(|c| c.is_ascii_hexdigit()), "{na}");
        assert_eq!(object_name(1, 2, 0xab), "/shim-1-2-00000000000000ab");
        // the longest name fits the name area of a ghost command
        assert!(object_name(i64::from(u32::MAX), i64::MAX, u64::MAX).len() < 64);
    }

    #[test]
    fn objects_are_created_exclusively() {
        let name = object_name(std::process::id() as i64, 999_999, object_nonce().unwrap());
        let p = create_object(&name, 4096).unwrap();
        let cname = std::ffi::CString::new(name.clone()).unwrap();
        // SAFETY: the 4096-byte mapping made above; the object is this test's.
        unsafe {
            *p.cast::<u8>() = 1;
            let mut st: libc::stat = std::mem::zeroed();
            let path = std::ffi::CString::new(format!("/dev/shm{name}")).unwrap();
            assert_eq!(libc::stat(path.as_ptr(), &mut st), 0);
            assert_eq!(st.st_mode & 0o777, 0o600);
            // an existing object of that name is never reused
            let e = create_object(&name, 4096).unwrap_err();
            assert!(
                e.contains(&format!("/dev/shm{name}")) && e.contains("File exists"),
                "{e}"
            );
            libc::munmap(p, 4096);
            assert_eq!(libc::shm_unlink(cname.as_ptr()), 0);
        }
    }
}

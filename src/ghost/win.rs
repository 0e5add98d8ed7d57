//! The user side of ghost RMA: windows in node-shared memory, redirection of operations
//! to ghosts, and the epochs translated to passive target (thesis §4.4–4.10).
//!
//! Internal windows are a pool of slots created at init over users and ghosts (see the
//! module docs of `ghost`). A slot is one dynamic "lock window" per local user index
//! (the i-th user of every node is reached through lock window i, so that exclusive locks
//! on two users of one node never nest at their shared ghost, §4.7) and one global window
//! that every user keeps locked (`lock_all`) for fence and PSCW epochs (§4.10).
//!
//! An operation to user t goes to a ghost of t's node on the window of t's epoch, at
//! displacement (address of t's memory in that ghost) + disp * disp_unit (§4.5). Accumulate
//! -type operations always go to t's bound ghost (static rank binding, §4.9.1); Put and Get
//! may be spread over t's node's ghosts once t's lock is known to be held (after a flush)
//! or in a fence epoch (§4.9.3), as `SHIM_GHOST_BALANCE` says.

use core::ffi::{c_int, c_void};
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock, Mutex, OnceLock, RwLock};

use super::serve::{self, Cmd};
use super::{Layout, layout};
use crate::abi::*;
use crate::config::{self, GhostBalance};
use crate::pmpi;

/// Internal windows of one slot.
#[derive(Debug)]
pub struct Slot {
    pub lock: Vec<MPI_Win>,
    pub global: MPI_Win,
}

impl Slot {
    /// (ghost) Exposes `len` bytes at `ptr` in the slot's windows.
    pub fn attach(&self, ptr: *mut c_void, len: usize, locks: bool) {
        // SAFETY: a live mapping of `len` bytes; dynamic windows of this process.
        unsafe {
            pmpi::PMPI_Win_attach(self.global, ptr, len as MPI_Aint);
            if locks {
                for &w in &self.lock {
                    pmpi::PMPI_Win_attach(w, ptr, len as MPI_Aint);
                }
            }
        }
    }
    /// (ghost) Withdraws a region attached by `attach`.
    pub fn detach(&self, ptr: *mut c_void, locks: bool) {
        // SAFETY: the region was attached to these windows.
        unsafe {
            pmpi::PMPI_Win_detach(self.global, ptr);
            if locks {
                for &w in &self.lock {
                    pmpi::PMPI_Win_detach(w, ptr);
                }
            }
        }
    }
    fn free(&self) {
        let mut all = self.lock.clone();
        all.push(self.global);
        for mut w in all {
            // SAFETY: windows of the pool, freed once, collectively, at finalize.
            unsafe { pmpi::PMPI_Win_free(&mut w) };
        }
    }
}

static POOL: OnceLock<Vec<Slot>> = OnceLock::new();

/// Creates the slots (collective over users and ghosts, at init).
pub fn create_pool(lay: &Layout) -> &'static [Slot] {
    let n = config::get().ghost_windows as usize;
    let pool = (0..n)
        .map(|_| {
            let mk = || {
                let mut w: MPI_Win = MPI_WIN_NULL();
                // SAFETY: collective over the control communicator; valid out-pointer.
                unsafe { pmpi::PMPI_Win_create_dynamic(MPI_INFO_NULL(), lay.ctl, &mut w) };
                w
            };
            Slot {
                lock: (0..lay.max_local_users).map(|_| mk()).collect(),
                global: mk(),
            }
        })
        .collect();
    POOL.get_or_init(|| pool)
}

/// (user) Opens the global windows' standing `lock_all`.
pub fn open_pool(slots: &[Slot]) {
    for s in slots {
        // SAFETY: a window of the pool; shared locks never conflict.
        unsafe { pmpi::PMPI_Win_lock_all(0, s.global) };
    }
}

/// (user) Closes and frees the pool at finalize.
pub fn close_pool() {
    if let Some(slots) = POOL.get() {
        for s in slots {
            // SAFETY: the lock_all opened by `open_pool`.
            unsafe { pmpi::PMPI_Win_unlock_all(s.global) };
        }
        for s in slots {
            s.free();
        }
    }
    finalize_barrier();
}

/// (ghost) Frees the pool at finalize, with the users.
pub fn close_pool_ghost(slots: &[Slot]) {
    for s in slots {
        s.free();
    }
    finalize_barrier();
}

/// Users and ghosts enter `MPI_Finalize` together. Over TCP, MPICH 4.0 (ch4:ucx) could
/// hang in a ghost's finalize (closing its endpoints while the users already waited in
/// the process manager's barrier, no longer progressing the network).
fn finalize_barrier() {
    if let Some(lay) = layout() {
        // SAFETY: collective over the control communicator, in every user and ghost.
        unsafe { pmpi::PMPI_Barrier(lay.ctl) };
    }
}

/// RMA operations this process redirected to ghosts.
pub static REDIRECTED: AtomicU64 = AtomicU64::new(0);

/// One target of a window.
#[derive(Clone, Debug)]
struct Target {
    disp_unit: i64,
    /// Its window size in bytes.
    size: i64,
    /// Local user index on its node (its lock window).
    local: usize,
    /// World ranks of its node's ghosts, and where its memory is in each.
    ghosts: Vec<i32>,
    addrs: Vec<i64>,
    /// The ghost its accumulates (and bound Put/Get) go to.
    bound: usize,
}

/// A passive-target lock this origin holds.
#[derive(Clone, Copy, Debug)]
struct Lock {
    /// A flush completed since the lock: the lock is held on every ghost.
    flushed: bool,
    /// The second, uncontended self-lock on the user window (§4.8).
    self_lock: bool,
}

/// A window allocated with ghosts.
struct UserWin {
    win: MPI_Win,
    /// Duplicate of the window's communicator, for the shim's own synchronisation.
    ctl: MPI_Comm,
    me: i32,
    slot: usize,
    targets: Vec<Target>,
    base: *mut c_void,
    map_len: usize,
    /// Offset of the hidden bytes (self-lock acquisition) in every user's memory.
    hidden: i64,
    locks_used: bool,
    no_local_load_store: bool,
    fence: bool,
    access: Vec<i32>,
    exposure: Vec<MPI_Request>,
    locked: HashMap<i32, Lock>,
    lock_all: bool,
    all_flushed: HashSet<i32>,
    /// Per ghost (world rank): operations and bytes sent there.
    sent: HashMap<i32, (u64, u64)>,
    rng: u64,
    id: usize,
    /// `SHIM_GHOST_DIRECT` on a single-node window: every target's memory mapped here (by
    /// comm rank), operations done in shared memory (`direct.rs`).
    direct: Option<Vec<Peer>>,
    /// Operations done directly.
    direct_ops: u64,
}

/// A target's memory mapped by this process (direct windows).
#[derive(Debug)]
struct Peer {
    base: *mut u8,
    map_len: usize,
    /// Offset of its hidden bytes.
    hidden: i64,
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
const HIDDEN_BYTES: usize = 64;

fn lookup(win: MPI_Win) -> Option<Arc<Mutex<UserWin>>> {
    if !super::active() {
        return None;
    }
    WINS.read()
        .unwrap_or_else(|e| e.into_inner())
        .get(&win)
        .cloned()
}

/// Is this a window the ghosts serve?
pub fn is_ghost_window(win: MPI_Win) -> bool {
    lookup(win).is_some()
}

fn raise(win: MPI_Win, class: c_int, what: &str) -> c_int {
    crate::errors::raise_win(win, class, what)
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
    fn slot(&self) -> &'static Slot {
        &POOL.get().expect("pool")[self.slot]
    }
    /// The internal window of target `t`'s current epoch, or None outside any.
    fn epoch_win(&self, t: i32) -> Option<MPI_Win> {
        if self.lock_all || self.locked.contains_key(&t) {
            Some(self.slot().lock[self.targets[t as usize].local])
        } else if self.fence || self.access.contains(&t) {
            Some(self.slot().global)
        } else {
            None
        }
    }
    fn binding_free(&self, t: i32) -> bool {
        if let Some(l) = self.locked.get(&t) {
            l.flushed
        } else if self.lock_all {
            self.all_flushed.contains(&t)
        } else {
            self.fence
        }
    }
    fn pick(&mut self, t: i32, acc: bool) -> usize {
        let tg = &self.targets[t as usize];
        let policy = config::get().ghost_balance;
        if acc || tg.ghosts.len() == 1 || policy == GhostBalance::Static || !self.binding_free(t) {
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
    if target == MPI_PROC_NULL {
        // a no-op, on a window that is always in an epoch
        return Ok(Some(Routed::Ghost(Route {
            rank: MPI_PROC_NULL,
            disp,
            win: w.slot().global,
        })));
    }
    if target < 0 || target as usize >= w.targets.len() {
        return Err(raise(
            win,
            MPI_ERR_RANK,
            &format!("{fname}: target rank {target} is not in the window's group"),
        ));
    }
    let Some(iw) = w.epoch_win(target) else {
        return Err(raise(
            win,
            MPI_ERR_RMA_SYNC,
            &format!("{fname}: no access epoch to target {target} is open"),
        ));
    };
    if let Some(peers) = &w.direct {
        let (p, tg) = (&peers[target as usize], &w.targets[target as usize]);
        let d = super::direct::Direct {
            base: p.base,
            size: tg.size,
            offset: disp * tg.disp_unit,
            lock: p.base.wrapping_offset(p.hidden as isize + 8).cast(),
            win,
        };
        w.direct_ops += 1;
        DIRECT.fetch_add(1, Ordering::Relaxed);
        return Ok(Some(Routed::Direct(d)));
    }
    let bytes = if config::get().ghost_balance == GhostBalance::Byte {
        let mut sz: c_int = 0;
        // SAFETY: valid out-pointer; an invalid type is reported by the real call.
        unsafe { pmpi::PMPI_Type_size(dt, &mut sz) };
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
    Ok(Some(Routed::Ghost(Route {
        rank,
        disp: addr + disp * du,
        win: iw,
    })))
}

/// Reads an info value (None if unset).
fn info_get(info: MPI_Info, key: &std::ffi::CStr) -> Option<String> {
    if info == MPI_INFO_NULL() {
        return None;
    }
    let mut buf = vec![0u8; MPI_MAX_INFO_VAL as usize + 1];
    let mut flag = 0;
    // SAFETY: the buffer holds MPI_MAX_INFO_VAL bytes plus the terminator.
    unsafe {
        pmpi::PMPI_Info_get(
            info,
            key.as_ptr(),
            MPI_MAX_INFO_VAL,
            buf.as_mut_ptr().cast(),
            &mut flag,
        )
    };
    if flag == 0 {
        return None;
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    Some(String::from_utf8_lossy(&buf[..end]).trim().to_string())
}

/// Comm ranks -> user-world ranks.
fn to_user_world(comm: MPI_Comm, n: i32) -> Vec<i32> {
    let (mut g1, mut g2): (MPI_Group, MPI_Group) = (MPI_GROUP_NULL(), MPI_GROUP_NULL());
    let ranks: Vec<i32> = (0..n).collect();
    let mut out = vec![0; n as usize];
    // SAFETY: valid communicators and arrays of n ints; the groups are freed.
    unsafe {
        pmpi::PMPI_Comm_group(comm, &mut g1);
        pmpi::PMPI_Comm_group(super::user_world(), &mut g2);
        pmpi::PMPI_Group_translate_ranks(g1, n, ranks.as_ptr(), g2, out.as_mut_ptr());
        pmpi::PMPI_Group_free(&mut g1);
        pmpi::PMPI_Group_free(&mut g2);
    }
    out
}

/// Group ranks -> ranks in the window's communicator.
fn group_to_comm(group: MPI_Group, ctl: MPI_Comm) -> Vec<i32> {
    let mut n = 0;
    let mut cg: MPI_Group = MPI_GROUP_NULL();
    // SAFETY: valid handles, out-pointers and arrays of n ints; the group is freed.
    unsafe {
        pmpi::PMPI_Group_size(group, &mut n);
        let ranks: Vec<i32> = (0..n).collect();
        let mut out = vec![0; n.max(0) as usize];
        pmpi::PMPI_Comm_group(ctl, &mut cg);
        pmpi::PMPI_Group_translate_ranks(group, n, ranks.as_ptr(), cg, out.as_mut_ptr());
        pmpi::PMPI_Group_free(&mut cg);
        out
    }
}

/// `MPI_Win_allocate(_c)` with ghosts. None: not handled (ghosts off, `async_config=off`,
/// no free slot); the caller forwards.
pub fn allocate(
    size: MPI_Aint,
    disp_unit: i64,
    info: MPI_Info,
    comm: MPI_Comm,
    baseptr: *mut c_void,
    win: *mut MPI_Win,
) -> Option<c_int> {
    let lay = layout()?;
    if !super::active() {
        return None;
    }
    if info_get(info, c"async_config").is_some_and(|v| v.eq_ignore_ascii_case("off")) {
        tracing::debug!(target: "shim::ghost", "MPI_Win_allocate with async_config=off: forwarded");
        return None;
    }
    let epochs = info_get(info, c"epochs_used");
    let locks_used = epochs.as_ref().is_none_or(|e| {
        e.split([',', '|', ';'])
            .any(|x| matches!(x.trim(), "lock" | "lockall"))
    });
    let no_lls = info_get(info, c"no_local_load_store").is_some_and(|v| v == "true");
    let (mut me, mut n) = (0, 0);
    // SAFETY: valid communicator and out-pointers.
    unsafe {
        pmpi::PMPI_Comm_rank(comm, &mut me);
        pmpi::PMPI_Comm_size(comm, &mut n);
    }
    // A slot: the communicator's rank 0 asks the slot server, everyone learns it.
    let mut slot: i64 = 0;
    if me == 0 {
        slot = serve::command(lay, serve::slot_server(lay), Cmd::SlotAlloc, &[], None)[0];
    }
    // SAFETY: one int64, collective over the window's communicator.
    unsafe { pmpi::PMPI_Bcast((&mut slot as *mut i64).cast(), 1, MPI_INT64_T(), 0, comm) };
    if slot < 0 {
        if me == 0 {
            tracing::warn!(target: "shim::ghost", "more than SHIM_GHOST_WINDOWS={} windows alive: this MPI_Win_allocate is forwarded without asynchronous progress", config::get().ghost_windows);
        }
        return None;
    }
    let slot = slot as usize;
    let size = size.max(0) as usize;
    let hidden = size.div_ceil(HIDDEN_BYTES) * HIDDEN_BYTES;
    let map_len = hidden + HIDDEN_BYTES;
    static OBJ: AtomicUsize = AtomicUsize::new(0);
    let obj = OBJ.fetch_add(1, Ordering::Relaxed);
    // a fresh object, unlinked once the node's ghosts (and direct peers) have mapped it
    let nonce = object_nonce().unwrap_or_else(|e| object_failed(&e));
    let name = object_name(std::process::id() as i64, obj as i64, nonce);
    let base = create_object(&name, map_len).unwrap_or_else(|e| object_failed(&e));
    let cname = std::ffi::CString::new(name.clone()).expect("no NUL");
    let uw_rank = crate::init::world().rank as usize;
    let my_ghosts = &lay.node_ghosts[lay.user_node[uw_rank]];
    let g = lay.ghosts;
    // what every rank tells the others: disp_unit, size, whether it may go direct, its
    // object's name (pid, number, random part), and where each ghost of its node mapped
    // the object
    const HEAD: usize = 6;
    let uranks = to_user_world(comm, n);
    let one_node = uranks
        .iter()
        .all(|&u| lay.user_node[u as usize] == lay.user_node[uw_rank]);
    let may_direct = config::get().ghost_direct && one_node;
    let mut rec = vec![0i64; HEAD + g];
    rec[0] = disp_unit;
    rec[1] = size as i64;
    rec[2] = may_direct as i64;
    rec[3] = std::process::id() as i64;
    rec[4] = obj as i64;
    rec[5] = nonce as i64;
    for (j, &gh) in my_ghosts.iter().enumerate() {
        rec[HEAD + j] = serve::command(
            lay,
            gh,
            Cmd::Attach,
            &[slot as i64, map_len as i64, locks_used as i64],
            Some(&name),
        )[0];
    }
    if !may_direct {
        // SAFETY: the name of the object created above (the ghosts have it mapped).
        unsafe { libc::shm_unlink(cname.as_ptr()) };
    }
    let mut all = vec![0i64; (HEAD + g) * n as usize];
    let mut ctl: MPI_Comm = MPI_COMM_NULL();
    let mut uwin: MPI_Win = MPI_WIN_NULL();
    // SAFETY: HEAD + g int64 per rank into a buffer for n ranks; collective calls over the
    // window's communicator in the same order on every rank.
    let rc = unsafe {
        pmpi::PMPI_Allgather(
            rec.as_ptr().cast(),
            (HEAD + g) as c_int,
            MPI_INT64_T(),
            all.as_mut_ptr().cast(),
            (HEAD + g) as c_int,
            MPI_INT64_T(),
            comm,
        );
        pmpi::PMPI_Comm_dup(comm, &mut ctl);
        pmpi::PMPI_Win_create(
            base,
            size as MPI_Aint,
            disp_unit as c_int,
            info,
            comm,
            &mut uwin,
        )
    };
    if rc != MPI_SUCCESS {
        return Some(rc);
    }
    let recs: Vec<&[i64]> = all.chunks(HEAD + g).collect();
    let targets: Vec<Target> = (0..n as usize)
        .map(|t| {
            let u = uranks[t] as usize;
            let r = recs[t];
            let ghosts = lay.node_ghosts[lay.user_node[u]].clone();
            Target {
                disp_unit: r[0],
                size: r[1],
                local: lay.user_local[u],
                bound: lay.user_local[u] % ghosts.len(),
                ghosts,
                addrs: r[HEAD..].to_vec(),
            }
        })
        .collect();
    // direct only if every rank may (the same decision everywhere)
    let direct = if recs.iter().all(|r| r[2] == 1) {
        let peers = (0..n as usize)
            .map(|t| {
                let (r, me) = (recs[t], t as i32 == me);
                let hidden = (r[1].max(0) as usize).div_ceil(HIDDEN_BYTES) * HIDDEN_BYTES;
                let len = hidden + HIDDEN_BYTES;
                Peer {
                    base: if me {
                        base.cast()
                    } else {
                        map_object(&object_name(r[3], r[4], r[5] as u64), len)
                    },
                    map_len: len,
                    hidden: hidden as i64,
                    mapped: !me,
                }
            })
            .collect();
        // SAFETY: collective over the window's duplicate; then nobody opens the object.
        unsafe {
            pmpi::PMPI_Barrier(ctl);
            libc::shm_unlink(cname.as_ptr());
        }
        Some(peers)
    } else {
        if may_direct {
            // SAFETY: as above, when another rank chose not to go direct.
            unsafe { libc::shm_unlink(cname.as_ptr()) };
        }
        None
    };
    let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    let w = UserWin {
        win: uwin,
        ctl,
        me,
        slot,
        targets,
        base,
        map_len,
        hidden: hidden as i64,
        locks_used,
        no_local_load_store: no_lls,
        fence: false,
        access: Vec::new(),
        exposure: Vec::new(),
        locked: HashMap::new(),
        lock_all: false,
        all_flushed: HashSet::new(),
        sent: HashMap::new(),
        rng: 0x9e37_79b9_7f4a_7c15 ^ ((uw_rank as u64 + 1) << 20) ^ id as u64,
        id,
        direct,
        direct_ops: 0,
    };
    WINS.write()
        .unwrap_or_else(|e| e.into_inner())
        .insert(uwin, Arc::new(Mutex::new(w)));
    // SAFETY: the caller's out-pointers (baseptr is a `void **` in disguise).
    unsafe {
        *baseptr.cast::<*mut c_void>() = base;
        *win = uwin;
    }
    tracing::debug!(target: "shim::ghost", "window {id}: {size} bytes in slot {slot}, {n} processes");
    Some(MPI_SUCCESS)
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
    let mut got = 0;
    while got < b.len() {
        // SAFETY: writes at most the remaining bytes of `b`.
        let n = unsafe { libc::getrandom(b[got..].as_mut_ptr().cast(), b.len() - got, 0) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(format!(
                "cannot draw a random name for the node-shared memory object (getrandom: {e})"
            ));
        }
        got += n as usize;
    }
    Ok(u64::from_ne_bytes(b))
}

/// Creates a window's shared-memory object, exclusively (`O_CREAT|O_EXCL`, mode 0600: an
/// existing object of that name is an error, never reused), sized `len` bytes and mapped
/// read-write. An object created here and then not usable is unlinked again.
fn create_object(name: &str, len: usize) -> Result<*mut c_void, String> {
    let cname = std::ffi::CString::new(name).map_err(|e| e.to_string())?;
    let failed = |what: &str, e: std::io::Error| {
        format!("cannot create the node-shared memory object /dev/shm{name} ({what}: {e})")
    };
    // SAFETY: a NUL-terminated name; the descriptor is closed after mapping, and the
    // object is unlinked if it cannot be sized or mapped.
    unsafe {
        let fd = libc::shm_open(
            cname.as_ptr(),
            libc::O_CREAT | libc::O_EXCL | libc::O_RDWR,
            0o600,
        );
        if fd < 0 {
            let e = std::io::Error::last_os_error();
            return Err(failed("shm_open with O_CREAT|O_EXCL, mode 0600", e));
        }
        let p = if libc::ftruncate(fd, len as libc::off_t) != 0 {
            Err(failed("ftruncate", std::io::Error::last_os_error()))
        } else {
            let p = libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                0,
            );
            if p == libc::MAP_FAILED {
                Err(failed("mmap", std::io::Error::last_os_error()))
            } else {
                Ok(p)
            }
        };
        libc::close(fd);
        if p.is_err() {
            libc::shm_unlink(cname.as_ptr());
        }
        p
    }
}

/// A window's shared memory cannot be set up: `MPI_Win_allocate` is collective and the
/// other ranks would wait for this one, so the message goes to stderr and the whole job
/// is aborted (exit status 71, EX_OSERR).
fn object_failed(msg: &str) -> ! {
    crate::log::raw_stderr(&format!(
        "{} MPI_Win_allocate with ghosts: {msg}; aborting the job\n",
        crate::log::prefix()
    ));
    crate::init::abort_job(71)
}

/// Maps another user's window object (direct windows); aborts the job if it cannot (the
/// collective allocation cannot fail on one rank alone).
fn map_object(name: &str, len: usize) -> *mut u8 {
    let cname = std::ffi::CString::new(name).expect("no NUL");
    // SAFETY: an existing object of at least `len` bytes (its owner sized it), mapped
    // read-write and shared.
    unsafe {
        let fd = libc::shm_open(cname.as_ptr(), libc::O_RDWR, 0);
        let p = if fd < 0 {
            libc::MAP_FAILED
        } else {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                0,
            )
        };
        let e = std::io::Error::last_os_error();
        if fd >= 0 {
            libc::close(fd);
        }
        if p == libc::MAP_FAILED {
            object_failed(&format!(
                "cannot map another rank's node-shared memory object /dev/shm{name}: {e}"
            ));
        }
        p.cast()
    }
}

/// `MPI_Win_free` of a ghost-served window.
pub fn free(win: *mut MPI_Win) -> Option<c_int> {
    // SAFETY: the caller's handle pointer.
    let h = unsafe { win.as_ref() }.copied()?;
    lookup(h)?;
    let lay = layout()?;
    let arc = WINS.write().unwrap_or_else(|e| e.into_inner()).remove(&h)?;
    let mut w = arc.lock().unwrap_or_else(|e| e.into_inner());
    // Nobody may still reach this memory through a ghost once it is detached.
    // SAFETY: collective over the window's private duplicate.
    unsafe { pmpi::PMPI_Barrier(w.ctl) };
    let mine = w.targets[w.me as usize].clone();
    for (j, &gh) in mine.ghosts.iter().enumerate() {
        serve::command(
            lay,
            gh,
            Cmd::Detach,
            &[w.slot as i64, mine.addrs[j], w.locks_used as i64],
            None,
        );
    }
    // SAFETY: collective over the duplicate; then only this rank's own objects are freed.
    let rc = unsafe {
        pmpi::PMPI_Barrier(w.ctl);
        if w.me == 0 {
            serve::command(
                lay,
                serve::slot_server(lay),
                Cmd::SlotFree,
                &[w.slot as i64],
                None,
            );
        }
        let rc = pmpi::PMPI_Win_free(&mut w.win);
        libc::munmap(w.base, w.map_len);
        for p in w.direct.iter().flatten().filter(|p| p.mapped) {
            libc::munmap(p.base.cast(), p.map_len);
        }
        pmpi::PMPI_Comm_free(&mut w.ctl);
        *win = MPI_WIN_NULL();
        rc
    };
    if crate::stats::enabled() && w.direct.is_some() {
        crate::log::raw_stderr(&format!(
            "{} window {}: {} RMA operations done directly in node-shared memory\n",
            crate::log::prefix(),
            w.id,
            w.direct_ops
        ));
    }
    if crate::stats::enabled() && !w.sent.is_empty() {
        let mut per: Vec<_> = w.sent.iter().collect();
        per.sort();
        let list: Vec<String> = per
            .iter()
            .map(|(g, (ops, _))| format!("ghost {g}: {ops}"))
            .collect();
        crate::log::raw_stderr(&format!(
            "{} window {}: RMA operations redirected per ghost (world rank): {}\n",
            crate::log::prefix(),
            w.id,
            list.join(", ")
        ));
    }
    Some(rc)
}

/// Windows still alive at finalize are left to the system MPI's finalize; their ghosts'
/// mappings go when the ghosts exit.
pub fn report_unfreed_windows() {
    let n = WINS.read().unwrap_or_else(|e| e.into_inner()).len();
    if n > 0 {
        tracing::debug!(target: "shim::ghost", "{n} ghost-served window(s) not freed before MPI_Finalize");
    }
}

/// Runs `f` on a ghost-served window; None if `win` is not one.
fn with<R>(win: MPI_Win, f: impl FnOnce(&mut UserWin) -> R) -> Option<R> {
    let arc = lookup(win)?;
    let mut w = arc.lock().unwrap_or_else(|e| e.into_inner());
    Some(f(&mut w))
}

fn check(rc: c_int) -> Result<(), c_int> {
    if rc == MPI_SUCCESS { Ok(()) } else { Err(rc) }
}

fn result(win: MPI_Win, r: Result<(), (c_int, String)>) -> c_int {
    match r {
        Ok(()) => MPI_SUCCESS,
        Err((class, why)) => raise(win, class, &why),
    }
}

fn sync_err(what: &str) -> (c_int, String) {
    (MPI_ERR_RMA_SYNC, what.to_string())
}

/// `MPI_Win_fence`: flush_all on the global window (unless NOPRECEDE), `Win_sync`, and a
/// barrier of the users, skipped only when NOPRECEDE, NOSTORE and NOPUT are all given
/// (thesis §4.10, Appendix A: the test is `(assert & ALL3) == ALL3`).
pub fn fence(assert: c_int, win: MPI_Win) -> Option<c_int> {
    with(win, |w| {
        let r = (|| {
            if !w.locked.is_empty() || w.lock_all || !w.access.is_empty() {
                return Err(sync_err(
                    "MPI_Win_fence: a passive-target or PSCW epoch is open",
                ));
            }
            let g = w.slot().global;
            std::sync::atomic::fence(Ordering::SeqCst);
            // SAFETY: the global window is always in the users' lock_all epoch.
            unsafe {
                if assert & MPI_MODE_NOPRECEDE == 0 && w.direct.is_none() {
                    check(pmpi::PMPI_Win_flush_all(g)).map_err(|c| (c, "flush".into()))?;
                }
                pmpi::PMPI_Win_sync(g);
                let all3 = MPI_MODE_NOPRECEDE | MPI_MODE_NOSTORE | MPI_MODE_NOPUT;
                if assert & all3 != all3 {
                    check(pmpi::PMPI_Barrier(w.ctl)).map_err(|c| (c, "barrier".into()))?;
                }
            }
            w.fence = assert & MPI_MODE_NOSUCCEED == 0;
            Ok(())
        })();
        result(win, r)
    })
}

/// `MPI_Win_post`: the exposure epoch's completion notices are received as they come;
/// unless NOCHECK, each origin is told that it may start.
pub fn post(group: MPI_Group, assert: c_int, win: MPI_Win) -> Option<c_int> {
    with(win, |w| {
        if !w.exposure.is_empty() {
            return result(
                win,
                Err(sync_err("MPI_Win_post: an exposure epoch is open")),
            );
        }
        let origins = group_to_comm(group, w.ctl);
        std::sync::atomic::fence(Ordering::SeqCst);
        w.exposure = origins
            .iter()
            .map(|&o| {
                let mut r = MPI_REQUEST_NULL();
                // SAFETY: a zero-byte receive on the window's private communicator.
                unsafe {
                    pmpi::PMPI_Irecv(
                        std::ptr::null_mut(),
                        0,
                        MPI_BYTE(),
                        o,
                        DONE_TAG,
                        w.ctl,
                        &mut r,
                    )
                };
                r
            })
            .collect();
        if w.exposure.is_empty() {
            // an empty group still opens an epoch that wait/test closes
            w.exposure.push(MPI_REQUEST_NULL());
        }
        if assert & MPI_MODE_NOCHECK == 0 {
            for &o in &origins {
                // SAFETY: a zero-byte send (eager: completes at once).
                unsafe { pmpi::PMPI_Send(std::ptr::null(), 0, MPI_BYTE(), o, POST_TAG, w.ctl) };
            }
        }
        MPI_SUCCESS
    })
}

/// `MPI_Win_start`: waits for each target's post notice (unless NOCHECK).
pub fn start(group: MPI_Group, assert: c_int, win: MPI_Win) -> Option<c_int> {
    with(win, |w| {
        if !w.access.is_empty() {
            return result(win, Err(sync_err("MPI_Win_start: an access epoch is open")));
        }
        let targets = group_to_comm(group, w.ctl);
        if assert & MPI_MODE_NOCHECK == 0 {
            for &t in &targets {
                // SAFETY: a zero-byte receive.
                unsafe {
                    pmpi::PMPI_Recv(
                        std::ptr::null_mut(),
                        0,
                        MPI_BYTE(),
                        t,
                        POST_TAG,
                        w.ctl,
                        MPI_STATUS_IGNORE,
                    )
                };
            }
        }
        w.access = targets;
        MPI_SUCCESS
    })
}

/// `MPI_Win_complete`: completes the operations at the targets' ghosts, then notifies
/// each target.
pub fn complete(win: MPI_Win) -> Option<c_int> {
    with(win, |w| {
        let g = w.slot().global;
        let mut done = HashSet::new();
        std::sync::atomic::fence(Ordering::SeqCst);
        let via_ghosts: &[i32] = if w.direct.is_some() { &[] } else { &w.access };
        for &t in via_ghosts {
            for &gh in &w.targets[t as usize].ghosts {
                if done.insert(gh) {
                    // SAFETY: the global window is in the lock_all epoch.
                    unsafe { pmpi::PMPI_Win_flush(gh, g) };
                }
            }
        }
        for &t in &w.access {
            // SAFETY: a zero-byte send.
            unsafe { pmpi::PMPI_Send(std::ptr::null(), 0, MPI_BYTE(), t, DONE_TAG, w.ctl) };
        }
        w.access.clear();
        MPI_SUCCESS
    })
}

/// `MPI_Win_wait`.
pub fn wait(win: MPI_Win) -> Option<c_int> {
    with(win, |w| {
        if w.exposure.is_empty() {
            return result(
                win,
                Err(sync_err("MPI_Win_wait: no exposure epoch is open")),
            );
        }
        // SAFETY: the receives posted by `post`.
        unsafe {
            pmpi::PMPI_Waitall(
                w.exposure.len() as c_int,
                w.exposure.as_mut_ptr(),
                MPI_STATUSES_IGNORE,
            );
            pmpi::PMPI_Win_sync(w.slot().global);
        }
        w.exposure.clear();
        std::sync::atomic::fence(Ordering::SeqCst);
        MPI_SUCCESS
    })
}

/// `MPI_Win_test`.
pub fn test(win: MPI_Win, flag: *mut c_int) -> Option<c_int> {
    with(win, |w| {
        if w.exposure.is_empty() {
            return result(
                win,
                Err(sync_err("MPI_Win_test: no exposure epoch is open")),
            );
        }
        let mut f = 0;
        // SAFETY: the receives posted by `post`.
        unsafe {
            pmpi::PMPI_Testall(
                w.exposure.len() as c_int,
                w.exposure.as_mut_ptr(),
                &mut f,
                MPI_STATUSES_IGNORE,
            );
        }
        if f != 0 {
            w.exposure.clear();
            // SAFETY: as in wait.
            unsafe { pmpi::PMPI_Win_sync(w.slot().global) };
            std::sync::atomic::fence(Ordering::SeqCst);
        }
        if !flag.is_null() {
            // SAFETY: the caller's out-pointer.
            unsafe { *flag = f };
        }
        MPI_SUCCESS
    })
}

impl UserWin {
    /// Forces the lock on this process's own memory to be held before returning: a
    /// one-byte Get of the hidden bytes through the bound ghost, then a flush (§4.8).
    fn force_self(&self, iw: MPI_Win) {
        let t = &self.targets[self.me as usize];
        force(t.ghosts[t.bound], t.addrs[t.bound] + self.hidden, iw);
    }
    /// On a direct window, operations never reach the ghosts, so a lock (which the MPI
    /// library acquires lazily, at the first operation) is forced at every ghost of the
    /// target before the lock call returns: otherwise two exclusive locks, or a shared and
    /// an exclusive one, could both be "held" (`direct.rs`).
    fn force_direct(&self, rank: i32, iw: MPI_Win) {
        if self.direct.is_some() {
            let t = &self.targets[rank as usize];
            let hidden = (t.size.max(0) as usize).div_ceil(HIDDEN_BYTES) * HIDDEN_BYTES;
            for (j, &gh) in t.ghosts.iter().enumerate() {
                force(gh, t.addrs[j] + hidden as i64, iw);
            }
        }
    }
    fn check_target(&self, rank: c_int, what: &str) -> Result<(), (c_int, String)> {
        if rank < 0 || rank as usize >= self.targets.len() {
            return Err((
                MPI_ERR_RANK,
                format!("{what}: rank {rank} is not in the window's group"),
            ));
        }
        Ok(())
    }
}

/// A one-byte Get of hidden bytes at `addr` through ghost `gh`, then a flush: the lock on
/// `iw` at `gh` is then held.
fn force(gh: i32, addr: i64, iw: MPI_Win) {
    let mut byte = 0u8;
    // SAFETY: one byte into a local; the hidden bytes are never user data.
    unsafe {
        pmpi::PMPI_Get(
            (&mut byte as *mut u8).cast(),
            1,
            MPI_BYTE(),
            gh,
            addr,
            1,
            MPI_BYTE(),
            iw,
        );
        pmpi::PMPI_Win_flush(gh, iw);
    }
}

/// The assert for the internal locks. MPI_MODE_NOCHECK is not passed on: MPICH 4.0
/// skips acquiring such a lock at the target but still releases it there at unlock, and a
/// later exclusive lock at that ghost then waits forever (found by ctests/rma_ghost.c).
/// It still shortens the self-lock protocol (§4.8).
fn internal_assert(assert: c_int) -> c_int {
    assert & !MPI_MODE_NOCHECK
}

/// `MPI_Win_lock`: the lock on every ghost of the target's node, on the target's lock
/// window; a self-lock is forced to be acquired and doubled on the user window (§4.8).
pub fn lock(lock_type: c_int, rank: c_int, assert: c_int, win: MPI_Win) -> Option<c_int> {
    with(win, |w| {
        let r = (|| {
            if rank == MPI_PROC_NULL {
                return Ok(());
            }
            w.check_target(rank, "MPI_Win_lock")?;
            if !w.locks_used {
                return Err(sync_err(
                    "MPI_Win_lock on a window whose info epochs_used excludes lock",
                ));
            }
            if w.locked.contains_key(&rank) || w.lock_all {
                return Err(sync_err("MPI_Win_lock: the target is already locked"));
            }
            let t = w.targets[rank as usize].clone();
            let iw = w.slot().lock[t.local];
            for &gh in &t.ghosts {
                // SAFETY: a lock on an internal window of the pool.
                check(unsafe { pmpi::PMPI_Win_lock(lock_type, gh, internal_assert(assert), iw) })
                    .map_err(|c| (c, "MPI_Win_lock".to_string()))?;
            }
            let mut l = Lock {
                flushed: false,
                self_lock: false,
            };
            if assert & MPI_MODE_NOCHECK == 0 {
                w.force_direct(rank, iw);
            }
            if rank == w.me && !w.no_local_load_store {
                if assert & MPI_MODE_NOCHECK == 0 {
                    w.force_self(iw);
                    l.flushed = true;
                }
                // SAFETY: an uncontended lock: nobody else locks the user window.
                unsafe { pmpi::PMPI_Win_lock(lock_type, w.me, 0, w.win) };
                l.self_lock = true;
            }
            w.locked.insert(rank, l);
            Ok(())
        })();
        result(win, r)
    })
}

/// `MPI_Win_unlock`.
pub fn unlock(rank: c_int, win: MPI_Win) -> Option<c_int> {
    with(win, |w| {
        let r = (|| {
            if rank == MPI_PROC_NULL {
                return Ok(());
            }
            w.check_target(rank, "MPI_Win_unlock")?;
            let Some(l) = w.locked.remove(&rank) else {
                return Err(sync_err("MPI_Win_unlock: the target is not locked"));
            };
            std::sync::atomic::fence(Ordering::SeqCst);
            let t = &w.targets[rank as usize];
            let iw = w.slot().lock[t.local];
            flush_before_unlock(t.ghosts.iter().map(|&gh| (gh, iw)));
            for &gh in &t.ghosts {
                // SAFETY: the lock taken by `lock`.
                check(unsafe { pmpi::PMPI_Win_unlock(gh, iw) })
                    .map_err(|c| (c, "MPI_Win_unlock".to_string()))?;
            }
            if l.self_lock {
                // SAFETY: the second self-lock taken by `lock`.
                unsafe { pmpi::PMPI_Win_unlock(w.me, w.win) };
            }
            Ok(())
        })();
        result(win, r)
    })
}

/// `MPI_Win_lock_all`: a shared lock on every ghost, on every target's lock window, so
/// that another origin's exclusive lock conflicts as it must (§4.10).
pub fn lock_all(assert: c_int, win: MPI_Win) -> Option<c_int> {
    with(win, |w| {
        let r = (|| {
            if !w.locks_used {
                return Err(sync_err(
                    "MPI_Win_lock_all on a window whose info epochs_used excludes lockall",
                ));
            }
            if w.lock_all || !w.locked.is_empty() {
                return Err(sync_err("MPI_Win_lock_all: a lock is already held"));
            }
            let slot = w.slot();
            for t in &w.targets {
                for &gh in &t.ghosts {
                    // SAFETY: a shared lock on an internal window of the pool.
                    check(unsafe {
                        pmpi::PMPI_Win_lock(
                            MPI_LOCK_SHARED,
                            gh,
                            internal_assert(assert),
                            slot.lock[t.local],
                        )
                    })
                    .map_err(|c| (c, "MPI_Win_lock_all".to_string()))?;
                }
            }
            w.lock_all = true;
            w.all_flushed.clear();
            if assert & MPI_MODE_NOCHECK == 0 {
                for t in 0..w.targets.len() {
                    w.force_direct(t as i32, slot.lock[w.targets[t].local]);
                }
            }
            if !w.no_local_load_store && assert & MPI_MODE_NOCHECK == 0 {
                let t = &w.targets[w.me as usize];
                w.force_self(slot.lock[t.local]);
                w.all_flushed.insert(w.me);
            }
            Ok(())
        })();
        result(win, r)
    })
}

/// `MPI_Win_unlock_all`.
pub fn unlock_all(win: MPI_Win) -> Option<c_int> {
    with(win, |w| {
        let r = (|| {
            if !w.lock_all {
                return Err(sync_err("MPI_Win_unlock_all: no lock_all epoch is open"));
            }
            std::sync::atomic::fence(Ordering::SeqCst);
            let slot = w.slot();
            flush_before_unlock(
                w.targets
                    .iter()
                    .flat_map(|t| t.ghosts.iter().map(|&gh| (gh, slot.lock[t.local]))),
            );
            for t in &w.targets {
                for &gh in &t.ghosts {
                    // SAFETY: the locks taken by `lock_all`.
                    check(unsafe { pmpi::PMPI_Win_unlock(gh, slot.lock[t.local]) })
                        .map_err(|c| (c, "MPI_Win_unlock_all".to_string()))?;
                }
            }
            w.lock_all = false;
            w.all_flushed.clear();
            Ok(())
        })();
        result(win, r)
    })
}

/// Two workarounds for Open MPI 4.1's osc/pt2pt (the component its TCP transport uses), for
/// epochs that reach more than one ghost. Both hangs were reproduced without the shim, with
/// Debian's Open MPI 4.1.4 (`--mca osc pt2pt`), on a dynamic window whose targets sit in
/// `MPI_Iprobe` loops as ghosts do:
/// - `MPI_Win_flush_local` never returns after an `MPI_Get` in a `lock_all` epoch with two
///   such targets; `MPI_Win_flush` does. So local flushes on the internal windows are full
///   flushes (a full flush also completes the operations locally, MPI-4.0 §12.5.4).
/// - With locks on targets A and B and an `MPI_Get` from B outstanding, `MPI_Win_unlock(A)`
///   never returns (one origin suffices); after flushing both it does. So every lock is
///   flushed before the first of a group of unlocks.
const FULL_FLUSH_ONLY: bool = cfg!(feature = "abi-ompi");
const FLUSH_BEFORE_UNLOCK: bool = cfg!(feature = "abi-ompi");

/// Flushes the (ghost, internal window) locks about to be released, where the MPI library
/// needs it ([`FLUSH_BEFORE_UNLOCK`]).
fn flush_before_unlock(locks: impl Iterator<Item = (c_int, MPI_Win)>) {
    if FLUSH_BEFORE_UNLOCK {
        for (gh, iw) in locks {
            // SAFETY: a passive-target epoch to `gh` on `iw` is open (the caller unlocks it next).
            unsafe { pmpi::PMPI_Win_flush(gh, iw) };
        }
    }
}

/// Flushes (or locally flushes) the ghosts serving `rank`; a completed flush starts a
/// binding-free interval (§4.9.3).
fn flush_target(w: &mut UserWin, rank: c_int, local: bool) -> Result<(), (c_int, String)> {
    let iw = w
        .epoch_win(rank)
        .ok_or_else(|| sync_err("MPI_Win_flush: no epoch is open to the target"))?;
    if w.direct.is_some() {
        // the operations completed when they were issued (`direct.rs`)
        std::sync::atomic::fence(Ordering::SeqCst);
        return Ok(());
    }
    for &gh in &w.targets[rank as usize].ghosts {
        // SAFETY: `iw` is in a passive epoch to `gh` (a lock or the standing lock_all).
        let rc = unsafe {
            if local && !FULL_FLUSH_ONLY {
                pmpi::PMPI_Win_flush_local(gh, iw)
            } else {
                pmpi::PMPI_Win_flush(gh, iw)
            }
        };
        check(rc).map_err(|c| (c, "MPI_Win_flush".to_string()))?;
    }
    if !local {
        if let Some(l) = w.locked.get_mut(&rank) {
            l.flushed = true;
        } else if w.lock_all {
            w.all_flushed.insert(rank);
        }
    }
    Ok(())
}

/// `MPI_Win_flush(_local)`.
pub fn flush(rank: c_int, win: MPI_Win, local: bool) -> Option<c_int> {
    with(win, |w| {
        let r = (|| {
            if rank == MPI_PROC_NULL {
                return Ok(());
            }
            w.check_target(rank, "MPI_Win_flush")?;
            flush_target(w, rank, local)
        })();
        result(win, r)
    })
}

/// `MPI_Win_flush_all` / `MPI_Win_flush_local_all`: every target in an epoch.
pub fn flush_all(win: MPI_Win, local: bool) -> Option<c_int> {
    with(win, |w| {
        let r = (|| {
            let targets: Vec<i32> = if w.lock_all {
                (0..w.targets.len() as i32).collect()
            } else {
                let mut v: Vec<i32> = w.locked.keys().copied().collect();
                v.sort_unstable();
                v
            };
            for t in targets {
                flush_target(w, t, local)?;
            }
            let g = w.slot().global;
            // SAFETY: the global window is always in the lock_all epoch.
            unsafe {
                if local && !FULL_FLUSH_ONLY {
                    pmpi::PMPI_Win_flush_local_all(g);
                } else {
                    pmpi::PMPI_Win_flush_all(g);
                }
            }
            Ok(())
        })();
        result(win, r)
    })
}

/// `MPI_Win_sync`: the memory barrier the MPI library issues, on the windows in use.
pub fn sync(win: MPI_Win) -> Option<c_int> {
    with(win, |w| {
        std::sync::atomic::fence(Ordering::SeqCst);
        // SAFETY: the global window is always in the lock_all epoch.
        unsafe { pmpi::PMPI_Win_sync(w.slot().global) }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

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

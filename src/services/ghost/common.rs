//! Layer: services. May use: core, platform.
//!
//! What users and ghosts share (Casper's `common/`): the layout of the job, the command
//! protocol and the internal window.
//!
//! Protocol: a user sends a ghost of its node one command of [`WORDS`] int64s on the
//! control communicator (`Layout::ctl`) with tag [`CMD_TAG`]: word 0 the [`Cmd`], words
//! 1.. its arguments, words [`NAME_AT`].. a shared-memory object's name (NUL-terminated).
//! Commands that reply ([`Cmd::replies`]) get one message of [`WORDS`] int64s back with tag
//! [`REPLY_TAG`]: `Attach` the address at which the ghost attached the object to the
//! internal window, `Detach` 0. `Finalize` has no reply; a ghost that has received it from
//! every user of its node frees the internal window with them and finalizes.
//!
//! The internal window: one dynamic window over users and ghosts, created at init; ghosts
//! attach every window's memory to it, users keep a standing `lock_all` on it.

use core::ffi::{c_int, c_void};
use std::sync::OnceLock;

use crate::platform::abi::*;
use crate::platform::mpi::{coll, p2p, rma};

/// What a ghost hook did with a call (`win.rs`'s public functions).
#[must_use]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Handled {
    /// A ghost-served window: the call was carried out here; its return code.
    Served(c_int),
    /// Not a ghost-served window (or arguments the system MPI must judge): the caller
    /// forwards the call to the system MPI.
    NotOurs,
}

impl Handled {
    /// The return code: the served one, or what `native` (the forwarded call) returns.
    pub fn or_native(self, native: impl FnOnce() -> c_int) -> c_int {
        match self {
            Handled::Served(rc) => rc,
            Handled::NotOurs => native(),
        }
    }
}

/// Tag of commands from users to ghosts, on the control communicator.
pub(crate) const CMD_TAG: c_int = 7301;
/// Tag of a ghost's replies.
pub(crate) const REPLY_TAG: c_int = 7302;

/// Where every process is: built identically on every process at init.
#[derive(Debug)]
pub struct Layout {
    /// Ghosts per node.
    pub ghosts: usize,
    /// World rank of each user, in user-world rank order.
    pub user_world_rank: Vec<i32>,
    /// Node index of each user (by user-world rank).
    pub user_node: Vec<usize>,
    /// Index of each user among the users of its node.
    pub user_local: Vec<usize>,
    /// World ranks of each node's ghosts.
    pub node_ghosts: Vec<Vec<i32>>,
    /// A duplicate of the real MPI_COMM_WORLD: commands, replies and the internal windows.
    pub ctl: MPI_Comm,
    /// `SHIM_GHOST_BALANCE`: how Put and Get spread over a node's ghosts.
    pub balance: crate::platform::config::GhostBalance,
    /// `SHIM_GHOST_DIRECT`: single-node windows in shared memory, without the ghosts.
    pub direct: bool,
}

static LAYOUT: OnceLock<Layout> = OnceLock::new();

/// The layout, when ghosts are on.
pub fn layout() -> Option<&'static Layout> {
    LAYOUT.get()
}

/// Words in a command or reply.
pub const WORDS: usize = 16;
/// Words of a command that carry the shared-memory object's name.
pub(crate) const NAME_AT: usize = 8;

/// What a user asks of a ghost.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(i64)]
pub enum Cmd {
    /// args: bytes; name. Reply: the address.
    Attach = 1,
    /// args: address. Reply: 0.
    Detach = 2,
    /// No reply.
    Finalize = 5,
}

impl Cmd {
    pub(crate) fn from(v: i64) -> Option<Cmd> {
        Some(match v {
            1 => Cmd::Attach,
            2 => Cmd::Detach,
            5 => Cmd::Finalize,
            _ => return None,
        })
    }
    pub(crate) fn replies(self) -> bool {
        matches!(self, Cmd::Attach | Cmd::Detach)
    }
}

/// Sends a command to ghost `to` (a world rank) and returns its reply, if it has one.
pub fn command(lay: &Layout, to: i32, cmd: Cmd, args: &[i64], name: Option<&str>) -> [i64; WORDS] {
    let m = message(cmd, args, name);
    let mut reply = [0i64; WORDS];
    // WORDS int64s out and in, on the control communicator
    let _ = p2p::send_i64(&m, to, CMD_TAG, lay.ctl);
    if cmd.replies() {
        let _ = p2p::recv_i64(&mut reply, to, REPLY_TAG, lay.ctl);
    }
    reply
}

/// A command's words: the command, its arguments, the object's name.
pub(crate) fn message(cmd: Cmd, args: &[i64], name: Option<&str>) -> [i64; WORDS] {
    let mut m = [0i64; WORDS];
    m[0] = cmd as i64;
    m[1..1 + args.len()].copy_from_slice(args);
    if let Some(n) = name {
        let bytes = n.as_bytes();
        assert!(bytes.len() < (WORDS - NAME_AT) * 8, "object name too long");
        // SAFETY: the name area is (WORDS - NAME_AT) * 8 bytes of `m`, larger than the name.
        unsafe {
            std::ptr::copy_nonoverlapping(
                bytes.as_ptr(),
                m[NAME_AT..].as_mut_ptr().cast::<u8>(),
                bytes.len(),
            );
        }
    }
    m
}

pub(crate) fn name_of(m: &[i64; WORDS]) -> String {
    // SAFETY: reading the name area of the command as bytes.
    let bytes: &[u8] = unsafe {
        std::slice::from_raw_parts(m[NAME_AT..].as_ptr().cast::<u8>(), (WORDS - NAME_AT) * 8)
    };
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    String::from_utf8_lossy(&bytes[..end]).into_owned()
}

static GLOBAL: OnceLock<MPI_Win> = OnceLock::new();

/// The internal window.
pub(crate) fn global() -> MPI_Win {
    *GLOBAL
        .get()
        .expect("the internal window exists while ghosts are on")
}

/// Creates the internal window (collective over users and ghosts, at init).
pub fn create_global(lay: &Layout) {
    // collective over the control communicator
    let w = rma::create_dynamic(MPI_INFO_NULL(), lay.ctl).unwrap_or(MPI_WIN_NULL());
    GLOBAL.get_or_init(|| w);
}

/// (ghost) Exposes `len` bytes at `ptr` in the internal window.
pub(crate) fn attach(ptr: *mut c_void, len: usize) {
    // SAFETY: a live mapping of `len` bytes, detached before it is unmapped; the dynamic
    // window of this process.
    let _ = unsafe { rma::attach(global(), ptr, len as MPI_Aint) };
}

/// (ghost) Withdraws a region attached by `attach`.
pub(crate) fn detach(ptr: *mut c_void) {
    // SAFETY: the region was attached to the internal window.
    let _ = unsafe { rma::detach(global(), ptr) };
}

/// (user) Opens the internal window's standing `lock_all`.
pub fn open_global() {
    // the internal window; shared locks never conflict
    let _ = rma::lock_all(0, global());
}

/// (user) Closes the standing `lock_all` and frees the internal window at finalize.
pub fn close_global() {
    if let Some(&w) = GLOBAL.get() {
        // the lock_all opened by `open_global`
        let _ = rma::unlock_all(w);
    }
    close_global_ghost();
}

/// (ghost, and users after their unlock) Frees the internal window at finalize, together.
pub fn close_global_ghost() {
    if let Some(&w) = GLOBAL.get() {
        let mut w = w;
        // freed once, collectively, at finalize
        let _ = rma::free(&mut w);
    }
    finalize_barrier();
}

/// Users and ghosts enter `MPI_Finalize` together. Over TCP, MPICH 4.0 (ch4:ucx) could
/// hang in a ghost's finalize (closing its endpoints while the users already waited in
/// the process manager's barrier, no longer progressing the network).
fn finalize_barrier() {
    if let Some(lay) = layout() {
        // collective over the control communicator, in every user and ghost
        let _ = coll::barrier(lay.ctl);
    }
}

/// Records the layout (once, at init).
pub(crate) fn set_layout(lay: Layout) -> &'static Layout {
    LAYOUT.get_or_init(|| lay)
}

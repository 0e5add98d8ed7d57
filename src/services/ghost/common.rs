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
use crate::platform::api::pmpi;

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
    let mut reply = [0i64; WORDS];
    // SAFETY: WORDS int64s out and in; `ctl` is the control communicator.
    unsafe {
        pmpi::PMPI_Send(
            m.as_ptr().cast(),
            WORDS as c_int,
            MPI_INT64_T(),
            to,
            CMD_TAG,
            lay.ctl,
        );
        if cmd.replies() {
            pmpi::PMPI_Recv(
                reply.as_mut_ptr().cast(),
                WORDS as c_int,
                MPI_INT64_T(),
                to,
                REPLY_TAG,
                lay.ctl,
                MPI_STATUS_IGNORE,
            );
        }
    }
    reply
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
    let mut w: MPI_Win = MPI_WIN_NULL();
    // SAFETY: collective over the control communicator; valid out-pointer.
    unsafe { pmpi::PMPI_Win_create_dynamic(MPI_INFO_NULL(), lay.ctl, &mut w) };
    GLOBAL.get_or_init(|| w);
}

/// (ghost) Exposes `len` bytes at `ptr` in the internal window.
pub(crate) fn attach(ptr: *mut c_void, len: usize) {
    // SAFETY: a live mapping of `len` bytes; the dynamic window of this process.
    unsafe { pmpi::PMPI_Win_attach(global(), ptr, len as MPI_Aint) };
}

/// (ghost) Withdraws a region attached by `attach`.
pub(crate) fn detach(ptr: *mut c_void) {
    // SAFETY: the region was attached to the internal window.
    unsafe { pmpi::PMPI_Win_detach(global(), ptr) };
}

/// (user) Opens the internal window's standing `lock_all`.
pub fn open_global() {
    // SAFETY: the internal window; shared locks never conflict.
    unsafe { pmpi::PMPI_Win_lock_all(0, global()) };
}

/// (user) Closes the standing `lock_all` and frees the internal window at finalize.
pub fn close_global() {
    if let Some(&w) = GLOBAL.get() {
        // SAFETY: the lock_all opened by `open_global`.
        unsafe { pmpi::PMPI_Win_unlock_all(w) };
    }
    close_global_ghost();
}

/// (ghost, and users after their unlock) Frees the internal window at finalize, together.
pub fn close_global_ghost() {
    if let Some(&w) = GLOBAL.get() {
        let mut w = w;
        // SAFETY: freed once, collectively, at finalize.
        unsafe { pmpi::PMPI_Win_free(&mut w) };
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

/// Records the layout (once, at init).
pub(crate) fn set_layout(lay: Layout) -> &'static Layout {
    LAYOUT.get_or_init(|| lay)
}

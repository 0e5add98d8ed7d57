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

/// (tests) Sets the internal window's handle (the same one for every test).
#[cfg(test)]
pub(crate) fn set_global_for_tests(w: MPI_Win) -> MPI_Win {
    *GLOBAL.get_or_init(|| w)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::platform::mpi::fake;

    fn lay() -> Layout {
        Layout {
            ghosts: 1,
            user_world_rank: vec![0],
            user_node: vec![0],
            user_local: vec![0],
            node_ghosts: vec![vec![1]],
            ctl: 999 as MPI_Comm,
            balance: crate::platform::config::GhostBalance::Static,
            direct: false,
        }
    }

    #[test]
    fn a_message_carries_the_command_its_arguments_and_the_name() {
        let m = message(Cmd::Attach, &[4096], Some("/shim-12-3-00000000000000ab"));
        assert_eq!(Cmd::from(m[0]), Some(Cmd::Attach));
        assert_eq!(m[1], 4096);
        assert!(m[2..NAME_AT].iter().all(|&w| w == 0));
        assert_eq!(name_of(&m), "/shim-12-3-00000000000000ab");
        let d = message(Cmd::Detach, &[7, 8], None);
        assert_eq!(d[..3], [Cmd::Detach as i64, 7, 8]);
        assert_eq!(name_of(&d), "");
        // the longest name that fits leaves its terminating NUL
        let long = "x".repeat((WORDS - NAME_AT) * 8 - 1);
        assert_eq!(name_of(&message(Cmd::Attach, &[1], Some(&long))), long);
    }

    #[test]
    fn commands_and_replies() {
        assert!(Cmd::Attach.replies() && Cmd::Detach.replies());
        assert!(!Cmd::Finalize.replies());
        for c in [Cmd::Attach, Cmd::Detach, Cmd::Finalize] {
            assert_eq!(Cmd::from(c as i64), Some(c));
        }
        assert_eq!(Cmd::from(3), None);
        assert_eq!(Cmd::from(0), None);
    }

    #[test]
    fn a_command_waits_for_the_ghost_s_reply_only_when_it_has_one() {
        let _f = fake::install(|c| match c.name {
            "recv" => Ok(vec![0x7f00_1000, 5]),
            _ => Ok(vec![]),
        });
        let r = command(&lay(), 3, Cmd::Attach, &[64], Some("/shim-1-2-3"));
        assert_eq!(r[..3], [0x7f00_1000, 5, 0]);
        let w = WORDS as i64;
        let calls: Vec<_> = fake::calls()
            .into_iter()
            .map(|c| (c.name, c.args))
            .collect();
        assert_eq!(
            calls,
            [
                ("send", vec![w, 3, CMD_TAG as i64, 999]),
                ("recv", vec![w, 3, REPLY_TAG as i64, 999])
            ]
        );
        let _f = fake::install(|_| Ok(vec![1]));
        assert_eq!(command(&lay(), 3, Cmd::Finalize, &[], None), [0; WORDS]);
        assert_eq!(fake::names(), ["send"]);
    }

    #[test]
    fn handled_forwards_only_what_is_not_ours() {
        assert_eq!(Handled::Served(7).or_native(|| panic!("forwarded")), 7);
        assert_eq!(Handled::Served(MPI_SUCCESS).or_native(|| 1), MPI_SUCCESS);
        assert_eq!(Handled::NotOurs.or_native(|| 3), 3);
    }

    #[test]
    fn the_standing_lock_all_opens_and_closes_before_the_window_is_freed() {
        let g = set_global_for_tests(7001 as MPI_Win) as i64;
        let _f = fake::install(|_| Ok(vec![]));
        open_global();
        close_global();
        let calls: Vec<_> = fake::calls()
            .into_iter()
            .map(|c| (c.name, c.args))
            .collect();
        assert_eq!(
            calls[..3],
            [
                ("win_lock_all", vec![0, g]),
                ("win_unlock_all", vec![g]),
                ("win_free", vec![g])
            ]
        );
    }
}

//! Layer: services. May use: core, platform.
//!
//! The ghost side: a loop inside the MPI library that serves commands from the users of
//! its node until they have all finalized (thesis §4.3: ghosts "loop on MPI_Recv waiting
//! for commands"; being inside MPI is what lets RMA aimed at them complete).
//!
//! Every command is local work (map a shared-memory object and attach it to the internal
//! dynamic window, or detach and unmap it), so a ghost never blocks in anything that
//! belongs to one window or epoch (thesis §4.5.4, pitfall 8).

use std::collections::HashMap;

use super::common::{self, CMD_TAG, Cmd, Layout, REPLY_TAG, WORDS, name_of};
use crate::platform::abi::*;
use crate::platform::api::pmpi;
use crate::platform::mpi::{comm, p2p};
use crate::platform::shm::{self, Segment};

/// A ghost's nap between polls when its node has more processes than cores (microseconds).
const GHOST_NAP_US: u64 = 20;

/// Serves until every user of this node has finalized, then finalizes and exits 0.
pub fn run(lay: &'static Layout, _ghost_comm: MPI_Comm) -> ! {
    let me = comm::rank(lay.ctl).unwrap_or(0);
    let node = lay
        .node_ghosts
        .iter()
        .position(|g| g.contains(&me))
        .expect("a ghost is on a node");
    let users_here = lay.user_node.iter().filter(|&&n| n == node).count();
    let mut maps = Maps::new();
    let mut finalized = 0;
    let mut idle: u32 = 0;
    let oversubscribed = crate::platform::proc::oversubscribed();
    if oversubscribed {
        // SAFETY: prctl with an integer argument; a precise timer for the naps below.
        unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1000u64) };
        short_slice();
    }
    tracing::debug!(target: "shim::ghost", "ghost (world rank {me}) serving {users_here} users");
    while finalized < users_here {
        // probing is where MPI progresses RMA aimed at us
        let probed = p2p::iprobe(MPI_ANY_SOURCE, CMD_TAG, lay.ctl).unwrap_or(None);
        let Some(st) = probed else {
            idle = idle.saturating_add(1);
            if oversubscribed && idle > 16 {
                // Sharing cores with busy users, a ghost that polls without pause only
                // gets its fair share of a core, whenever the scheduler gets to it. A ghost
                // that sleeps a little between polls is woken ahead of the busy processes
                // (it has used little CPU), so RMA aimed at it waits about one nap.
                std::thread::sleep(std::time::Duration::from_micros(GHOST_NAP_US));
            } else if idle > 64 {
                std::thread::yield_now();
            }
            continue;
        };
        idle = 0;
        let from = st.MPI_SOURCE;
        let mut m = [0i64; WORDS];
        // WORDS int64s into `m`, the message probed above
        let _ = p2p::recv_i64(&mut m, from, CMD_TAG, lay.ctl);
        if let Some(reply) = serve_command(from, &m, &mut maps, &mut finalized) {
            // WORDS int64s to the asking user
            let _ = p2p::send_i64(&reply, from, REPLY_TAG, lay.ctl);
        }
    }
    common::close_global_ghost();
    for (_, (ptr, len)) in maps.drain() {
        // SAFETY: mappings made by `attach`; the windows they were attached to are freed.
        unsafe { shm::unmap(ptr.cast(), len.max(1)) };
    }
    // The ghost ends as a rank returning from main would (Casper's ghosts too): through
    // `exit`, whose handlers include the library's own end of the process. MPICH 4.1 and
    // later tell the process manager that a process finalized only there (MPI-4.0 §11.3
    // lets a process initialize MPI again through sessions after `MPI_Finalize`); hydra
    // ends the whole job when a process exits without having said so, and with `_exit`
    // that was the ghost, whenever it left before its users.
    // SAFETY: the ghost's last MPI call, then the end of the process.
    unsafe {
        pmpi::PMPI_Finalize();
        libc::exit(0);
    }
}

/// A ghost's mappings of its users' windows: (user, address) -> (address, length).
type Maps = HashMap<(i32, i64), (*mut libc::c_void, usize)>;

/// Carries out command `m` of user `from` (`finalized` counts the users that have
/// finalized); the reply, for a command that has one.
fn serve_command(
    from: i32,
    m: &[i64; WORDS],
    maps: &mut Maps,
    finalized: &mut usize,
) -> Option<[i64; WORDS]> {
    let mut reply = [0i64; WORDS];
    match Cmd::from(m[0]) {
        Some(Cmd::Attach) => {
            let len = m[1] as usize;
            reply[0] = match attach(&name_of(m), len) {
                Ok(ptr) => {
                    common::attach(ptr, len);
                    maps.insert((from, ptr as i64), (ptr, len));
                    ptr as i64
                }
                Err(e) => {
                    // the user falls back to a named object, or aborts the job
                    tracing::info!(target: "shim::ghost", "cannot map a window's memory: {e}");
                    0
                }
            };
        }
        Some(Cmd::Detach) => {
            let addr = m[1];
            if let Some((ptr, len)) = maps.remove(&(from, addr)) {
                common::detach(ptr);
                // SAFETY: the mapping made by `attach`, no longer attached anywhere.
                unsafe { shm::unmap(ptr.cast(), len.max(1)) };
            }
        }
        Some(Cmd::Finalize) => *finalized += 1,
        other => {
            tracing::error!(target: "shim::ghost", "unexpected command {other:?} ({}) from {from}", m[0]);
        }
    }
    Cmd::from(m[0]).is_some_and(Cmd::replies).then_some(reply)
}

/// Maps a user's window memory, from where the user said it is (its anonymous segment's
/// descriptor, or a shared-memory name).
fn attach(name: &str, len: usize) -> Result<*mut libc::c_void, String> {
    Segment::open_location(name, len.max(1))
        .map(|seg| seg.into_raw().cast())
        .map_err(|e| format!("cannot map {name}: {e}"))
}

/// `struct sched_attr` (linux/sched/types.h, SCHED_ATTR_SIZE_VER1).
#[repr(C)]
struct SchedAttr {
    size: u32,
    policy: u32,
    flags: u64,
    nice: i32,
    priority: u32,
    runtime: u64,
    deadline: u64,
    period: u64,
    util_min: u32,
    util_max: u32,
}

/// Requested time slice of ghosts and users when they share cores (100 µs).
const SHARED_CORE_SLICE_NS: u64 = 100_000;

/// Asks the scheduler for a short time slice (EEVDF, Linux 6.12+: `sched_runtime` of a
/// SCHED_OTHER task is its requested slice; a shorter slice gives an earlier deadline, so
/// the task preempts busy ones when it wakes, instead of waiting for the running task's
/// default slice of about 3 ms). Unprivileged; older kernels ignore it. Measured (Open
/// MPI TCP, 3 ranks on 2 cores, Accumulate + flush to a target computing 100 ms, 5 runs
/// each): medians 181-4,712 us and 5 of 15 points with a maximum over 2.5 ms without it;
/// medians 134-201 us and 1 of 15 with it.
pub fn short_slice() {
    let ns = SHARED_CORE_SLICE_NS;
    let a = SchedAttr {
        size: core::mem::size_of::<SchedAttr>() as u32,
        policy: 0,
        flags: 0,
        nice: 0,
        priority: 0,
        runtime: ns,
        deadline: 0,
        period: 0,
        util_min: 0,
        util_max: 0,
    };
    // SAFETY: sched_setattr on the calling thread with a valid, sized attribute.
    let rc = unsafe { libc::syscall(libc::SYS_sched_setattr, 0, &a as *const SchedAttr, 0) };
    tracing::debug!(target: "shim::ghost", "sched_setattr slice {ns} ns: {rc}");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::platform::mpi::fake;

    /// A shared-memory object of `len` bytes whose first byte is `first`, unlinked on drop.
    struct Object(String);

    impl Object {
        fn new(len: usize, first: u8) -> Object {
            static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
            let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let name = format!("/shim-serve-test-{}-{n}", std::process::id());
            let c = std::ffi::CString::new(name.clone()).unwrap();
            // SAFETY: a NUL-terminated name; the descriptor is closed here.
            unsafe {
                let fd = libc::shm_open(
                    c.as_ptr(),
                    libc::O_CREAT | libc::O_EXCL | libc::O_RDWR,
                    0o600,
                );
                assert!(fd >= 0);
                assert_eq!(libc::ftruncate(fd, len as libc::off_t), 0);
                assert_eq!(libc::write(fd, (&first as *const u8).cast(), 1), 1);
                libc::close(fd);
            }
            Object(name)
        }
    }

    impl Drop for Object {
        fn drop(&mut self) {
            let c = std::ffi::CString::new(self.0.clone()).unwrap();
            // SAFETY: the test's own object.
            unsafe { libc::shm_unlink(c.as_ptr()) };
        }
    }

    fn calls() -> Vec<(&'static str, Vec<i64>)> {
        fake::calls()
            .into_iter()
            .map(|c| (c.name, c.args))
            .collect()
    }

    #[test]
    fn attach_maps_the_object_into_the_internal_window_and_detach_withdraws_it() {
        let g = common::set_global_for_tests(7001 as MPI_Win) as i64;
        let obj = Object::new(4096, 0x5a);
        let (mut maps, mut fin) = (Maps::new(), 0);
        let _f = fake::install(|_| Ok(vec![]));
        let m = common::message(Cmd::Attach, &[4096], Some(&obj.0));
        let reply = serve_command(3, &m, &mut maps, &mut fin).expect("attach replies");
        let addr = reply[0];
        assert_ne!(addr, 0);
        // SAFETY: the mapping the ghost made, 4096 bytes.
        assert_eq!(unsafe { *(addr as *const u8) }, 0x5a, "the user's object");
        assert_eq!(calls(), [("win_attach", vec![g, addr, 4096])]);
        // another user's detach of that address is not this mapping's
        let _f = fake::install(|_| Ok(vec![]));
        let d = common::message(Cmd::Detach, &[addr], None);
        assert_eq!(serve_command(4, &d, &mut maps, &mut fin), Some([0; WORDS]));
        assert!(fake::calls().is_empty());
        assert_eq!(maps.len(), 1);
        // its owner's is
        assert_eq!(serve_command(3, &d, &mut maps, &mut fin), Some([0; WORDS]));
        assert_eq!(calls(), [("win_detach", vec![g, addr])]);
        assert!(maps.is_empty());
        assert_eq!(fin, 0);
    }

    #[test]
    fn an_object_that_cannot_be_mapped_is_answered_with_address_zero() {
        let (mut maps, mut fin) = (Maps::new(), 0);
        let _f = fake::install(|_| Ok(vec![]));
        let m = common::message(Cmd::Attach, &[64], Some("/shim-serve-test-no-such-object"));
        assert_eq!(serve_command(1, &m, &mut maps, &mut fin), Some([0; WORDS]));
        assert!(fake::calls().is_empty(), "nothing attached");
        assert!(maps.is_empty());
    }

    #[test]
    fn finalize_and_unknown_commands_have_no_reply() {
        let (mut maps, mut fin) = (Maps::new(), 0);
        let _f = fake::install(|_| Ok(vec![]));
        let f = common::message(Cmd::Finalize, &[], None);
        assert_eq!(serve_command(1, &f, &mut maps, &mut fin), None);
        assert_eq!(serve_command(2, &f, &mut maps, &mut fin), None);
        assert_eq!(fin, 2);
        let mut junk = [0i64; WORDS];
        junk[0] = 99;
        assert_eq!(serve_command(1, &junk, &mut maps, &mut fin), None);
        assert_eq!(fin, 2);
        assert!(fake::calls().is_empty());
    }
}

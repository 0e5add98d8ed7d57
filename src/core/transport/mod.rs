//! Layer: core. May use: platform.
//!
//! What a schedule's actions need from the wire, below the schedules: the shared-memory
//! signal ([`flag`]: single-writer sequence counters and waiting that shares the cores),
//! over the segments and CMA of `platform::shm`; and the verbs backend ([`verbs`]): the
//! schedules' point-to-point messages over InfiniBand queue pairs.

pub mod flag;
pub mod node;
pub mod verbs;

use std::sync::atomic::{AtomicU32, Ordering};

/// Set by every point-to-point, RMA and file call of the application, and a request call
/// on a request that may leave the library work (`core::request::note_traffic`)
/// ([`note_library_call`]): the library may hold messages of this process that a peer's
/// progress must take in, or messages from peers this process's progress must. A
/// collective through the library would run the library's progress at both ends, and
/// programs count on it (mpi4py's `testStartCompletePostTest`: `MPI_Win_complete`, a
/// Barrier on both ranks, then `MPI_Win_test` at the target must be true); a collective on
/// the shared-memory segment calls no MPI function, so it carries this mark instead
/// (`node::Node::post`: the rank drives its library before it publishes, the ranks that
/// watch it drive theirs at the end).
///
/// A count of those calls (wrapping) and the count when last asked, with plain loads and
/// stores: a read-modify-write (the swap this was before) is a full barrier on x86, and
/// just before a flag is published it waited for the stores ahead of it (the slot's data,
/// whose lines the reader's core took), a tenth of an 8-byte non-blocking Bcast's time. Two
/// threads noting at once may count one; neither mark is lost, as the count still moves.
static LIBRARY_CALLS: AtomicU32 = AtomicU32::new(0);
static CALLS_SEEN: AtomicU32 = AtomicU32::new(0);

/// Notes a call that may leave messages in flight in the library.
#[inline]
pub fn note_library_call() {
    LIBRARY_CALLS.store(
        LIBRARY_CALLS.load(Ordering::Relaxed).wrapping_add(1),
        Ordering::Relaxed,
    );
}

/// Whether the application called the library ([`note_library_call`]) since the last
/// time this was asked (by any thread); clears the mark.
#[inline]
pub fn take_library_traffic() -> bool {
    let now = LIBRARY_CALLS.load(Ordering::Relaxed);
    if now == CALLS_SEEN.load(Ordering::Relaxed) {
        return false;
    }
    CALLS_SEEN.store(now, Ordering::Relaxed);
    true
}

/// Lets the system MPI's progress engine run once (an `MPI_Iprobe` on the library's world).
pub fn drive_library() {
    let _ = crate::platform::mpi::p2p::iprobe(
        crate::platform::abi::MPI_ANY_SOURCE,
        crate::platform::abi::MPI_ANY_TAG,
        crate::platform::abi::MPI_COMM_WORLD(),
    );
}

//! Layer: core. May use: platform.
//!
//! The shared-memory segment of a communicator whose ranks all share a node, and how it is
//! set up.
//!
//! Layout: a header line, the acknowledgement lines, then cells. A cell belongs to one
//! rank in one region; a region is one collective in flight on one channel (channel 0:
//! blocking collectives, 1: non-blocking ones, 2 and up: one per persistent collective;
//! each channel has `depth` regions used in turn). A cell is the rank's `flag` (its
//! progress in the collective) and its data slot, which starts in the flag's line: a
//! contribution of up to `INLINE` bytes travels with the flag in one cache line, so a
//! reader pays one transfer for both. Each rank has one `ack` line per channel: every
//! instance of the channel up to the value is done with at this rank. Every line has one
//! writer, the rank it belongs to (single-writer sequence counters, `flag`), so ranks
//! never write the same cache line.
//!
//! Instance `i` of a channel uses region `i % depth`. Before a rank writes into its cell
//! there, it waits until every rank's `ack` of the channel says instance `i - depth` is
//! done (a slow rank never finds its slot overwritten), and it acknowledges instance `i`
//! when its part is over. One ack per channel rather than per region lets a rank remember
//! the smallest ack it saw and skip the reads while that still covers the claim: a claim
//! reads the other ranks' lines about once every `depth - 1` instances instead of every
//! time (each read is a cache miss, `size - 1` of them per claim). Acks are published in
//! instance order; on the non-blocking channel, where instances may end out of order, an
//! instance's ack waits locally until every earlier one is done.
//!
//! The memory is an anonymous `memfd` of one rank (`platform::shm`); the others map it
//! through `/proc/<pid>/fd`, after which it is closed: no name ever exists, so a `kill -9`
//! of any rank at any moment leaves nothing in `/dev/shm`.

use core::ffi::c_int;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use super::flag::{SeqFlag, reached};
use crate::platform::abi::*;
use crate::platform::mpi::{coll as mpi_coll, comm as mpi_comm, p2p};
use crate::platform::shm::Segment;

/// A byte every rank owns whose address it tells the others at setup, so that each can
/// try one single-copy read before relying on it.
static CMA_PROBE: u8 = 0x5a;
/// Words per rank in the node's setup allgather.
const W: usize = 5;

/// Bytes before the acknowledgement lines.
const HEADER: usize = 64;
/// Offset of a cell's flag.
const FLAG: usize = 0;
/// Offset of a cell's traffic mark: in the flag's line, after the flag. The phase value of
/// the flag the rank published right after calling the library's progress because its
/// process had called the library since its previous collective on a segment
/// (`transport::take_library_traffic`); a rank that sees it at an instance it watches lets
/// its own library run once at the end of the collective.
const TRAFFIC: usize = FLAG + 8;
/// Offset of a cell's size word: in the flag's line, after the traffic mark; a rooted
/// collective's root writes its bytes there for the receivers' truncation check
/// (`sched::Action::Length`).
pub const LENGTH: usize = TRAFFIC + 4;
/// Offset of a cell's data slot: in the flag's line, 16 bytes in (the flag's 8 bytes, and
/// the alignment of the widest predefined type).
pub const DATA: usize = FLAG + 16;
/// Bytes of a slot in the flag's cache line.
pub const INLINE: usize = FLAG + 64 - DATA;
/// Flag values per instance: a schedule's phases are `1..PHASES - 1` (`PHASES - 1`: an
/// abandoned instance, [`Node::abandon`]; the two-level pipelined Bcast takes up to 9).
pub const PHASES: u32 = 16;

/// The shape of a segment, the same on every rank.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    pub ranks: u32,
    /// Channels: blocking, non-blocking, then the persistent ones.
    pub channels: u32,
    pub depth: u32,
    /// Data bytes per cell (a multiple of 64).
    pub slot: usize,
}

impl Geometry {
    /// Bytes of one cell (whole cache lines).
    pub fn cell(&self) -> usize {
        (DATA + self.slot).next_multiple_of(64)
    }

    /// Offset of rank `r`'s acknowledgement line of channel `ch`.
    pub fn ack(&self, ch: u32, r: u32) -> usize {
        HEADER + (ch * self.ranks + r) as usize * 64
    }

    /// Offset of region `k` of channel `ch`.
    pub fn region(&self, ch: u32, k: u32) -> usize {
        self.ack(self.channels, 0)
            + ((ch * self.depth + k) as usize * self.ranks as usize) * self.cell()
    }

    /// Bytes of the whole segment.
    pub fn bytes(&self) -> usize {
        self.region(self.channels, 0)
    }
}

/// The nodes of a communicator that spans several: each node's ranks, in the
/// communicator's order; the first is the node's leader. Nodes are numbered in the order
/// of their leaders.
#[derive(Debug, PartialEq, Eq)]
pub struct Layout {
    /// Per node: its ranks, ascending.
    pub nodes: Vec<Vec<i32>>,
    /// Per rank: its node.
    pub node_of: Vec<u32>,
    /// Per rank: its index on its node.
    pub local_of: Vec<u32>,
}

impl Layout {
    /// The layout from each rank's leader (the lowest rank on its node); `None` when every
    /// rank has the same one.
    pub fn of(leaders: &[i32]) -> Option<Layout> {
        let mut firsts: Vec<i32> = leaders.to_vec();
        firsts.sort_unstable();
        firsts.dedup();
        if firsts.len() < 2 {
            return None;
        }
        let mut nodes = vec![Vec::new(); firsts.len()];
        let mut node_of = vec![0u32; leaders.len()];
        let mut local_of = vec![0u32; leaders.len()];
        for (r, l) in leaders.iter().enumerate() {
            let k = firsts.binary_search(l).unwrap_or(0);
            node_of[r] = k as u32;
            local_of[r] = nodes[k].len() as u32;
            nodes[k].push(r as i32);
        }
        Some(Layout {
            nodes,
            node_of,
            local_of,
        })
    }

    /// Whether every node's ranks are consecutive: the nodes, in order, then hold
    /// ascending blocks of ranks (a reduction in node order is in rank order).
    pub fn blocks(&self) -> bool {
        self.nodes
            .iter()
            .all(|n| n.windows(2).all(|w| w[1] == w[0] + 1))
    }

    /// Each node's leader (its first rank), in node order.
    pub fn leaders(&self) -> Vec<i32> {
        self.nodes.iter().map(|n| n[0]).collect()
    }
}

/// The channel of blocking collectives.
pub const BLOCKING: u32 = 0;
/// The channel of non-blocking collectives.
pub const NONBLOCKING: u32 = 1;

/// A communicator's mapped segment.
pub struct Node {
    seg: Segment,
    /// The node's part of the communicator: its size (`geo.ranks`) and this rank's index.
    pub geo: Geometry,
    pub rank: u32,
    /// Where the communicator's ranks live when it spans several nodes (`None`: all on
    /// this one).
    pub layout: Option<std::sync::Arc<Layout>>,
    /// The process of each rank of the node (single copy reads from it).
    pub pids: Vec<libc::pid_t>,
    /// Whether every rank of the communicator may read its node's other ranks' memory
    /// (CMA, `process_vm_readv`): the single-copy algorithms need it.
    pub cma: bool,
    /// The first instance of the non-blocking channel that runs in shared memory (see
    /// [`Node::setup`]).
    pub nb_from: u32,
    /// The next instance of the blocking and the non-blocking channel.
    next: [AtomicU32; 2],
    /// The persistent channels: handed out, given back, reused ([`Node::persistent_channel`]).
    channels: Mutex<Channels>,
    /// Per channel: instances started so far; a persistent channel's count goes on from
    /// one request that holds it to the next, so that its flags and acks keep growing.
    starts: Vec<AtomicU32>,
    /// Per channel: an ack value every rank was seen to have reached (acks only grow, so
    /// it stays true); a claim it covers reads no other rank's line.
    seen: Vec<AtomicU32>,
    /// The non-blocking channel's instances done at this rank but not yet acknowledged
    /// (an earlier one is still running): the next ack to publish, and a bit per instance
    /// after it (fewer than `depth` <= 64 can be done ahead, see [`Node::release`]).
    nb_done: Mutex<(u32, u64)>,
    /// A private duplicate of the communicator, probed to run the system MPI's progress
    /// engine for these peers ([`Node::drive`]).
    driver: std::sync::Mutex<Option<Driver>>,
}

struct Driver {
    comm: MPI_Comm,
}

/// A persistent channel held by one persistent collective (from its initialization until
/// it is freed); dropping it gives the channel back ([`Node::persistent_channel`]).
pub struct Lease {
    pub node: Arc<Node>,
    pub ch: u32,
    /// Whether it was a fresh channel (else one given back everywhere), for [`Lease::revert`].
    fresh: bool,
    /// Whether the channel goes back to the node as the lease drops (not after a revert).
    held: bool,
}

impl Lease {
    /// The place of the channel's next instance.
    pub fn next(&self) -> Place {
        self.node.next_persistent(self.ch)
    }

    /// Undoes the hand-out of the channel just taken, for an initialization that failed
    /// after it took it: the ranks whose call failed make it again (MPI-4.0 §9.3, the
    /// program goes on), and must get the channel the others got.
    pub fn revert(mut self) {
        self.node.take_back(self.ch, self.fresh);
        self.held = false;
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if self.held {
            self.node.give_back_channel(self.ch);
        }
    }
}

/// Where the persistent channels (`2..geo.channels`, at most 64) stand at this rank.
#[derive(Default)]
struct Channels {
    /// Channels never handed out yet (the first `fresh` of them were).
    fresh: u32,
    /// Channels every rank gave back, agreed by [`Node::reclaim_channels`], in the order
    /// they are handed out again (the same on every rank).
    free: std::collections::VecDeque<u32>,
    /// Channels this rank gave back that are not yet known to be given back everywhere
    /// (bit `ch - 2`).
    given_back: u64,
}

impl Drop for Node {
    fn drop(&mut self) {
        self.retire();
    }
}

/// One collective's place in the segment: its region and instance.
#[derive(Clone, Copy, Debug)]
pub struct Place {
    pub region: *mut u8,
    pub instance: u32,
    pub channel: u32,
}

impl Node {
    /// Sets up the segment of the communicator whose private duplicate is `comm` (every
    /// rank calls this at the same collective): one segment per node, shared by the
    /// communicator's ranks there, and the [`Layout`] of the nodes when there are several.
    /// `None` when shared memory does not work here on any rank (the reason is logged);
    /// `Err` when it works for some ranks only (the caller warns). Either way every rank
    /// gets the same answer. `nb_seq` is how many non-blocking collectives this rank has
    /// started on the communicator: the first instance that uses shared memory is the
    /// largest over the ranks, so that a program that (wrongly) starts them in a different
    /// order around this blocking call still matches. `cma`: whether single copy may be
    /// used at all (`SHIM_SHM_SINGLE_COPY=off` says no: not even the probe reads a peer).
    pub fn setup(
        comm: MPI_Comm,
        size: c_int,
        channels: u32,
        depth: u32,
        slot: usize,
        nb_seq: u32,
        cma: bool,
    ) -> Result<Option<Node>, String> {
        let rank = mpi_comm::rank(comm).map_err(|e| format!("MPI_Comm_rank: {}", e.code()))?;
        let mut node_comm = mpi_comm::split_type_shared(comm)
            .map_err(|e| format!("MPI_Comm_split_type: {}", e.code()))?;
        let shape = Geometry {
            ranks: 0,
            channels: 2 + channels,
            depth,
            slot,
        };
        let r = Self::on_node(comm, node_comm, rank, size, nb_seq, shape, cma);
        let _ = mpi_comm::free(&mut node_comm);
        r
    }

    /// [`Node::setup`] once the node communicator `node_comm` exists (`geo` without its
    /// rank count, which is the node's).
    fn on_node(
        comm: MPI_Comm,
        node_comm: MPI_Comm,
        rank: c_int,
        size: c_int,
        nb_seq: u32,
        geo: Geometry,
        cma: bool,
    ) -> Result<Option<Node>, String> {
        let code = |what: &str, e: crate::platform::mpi::MpiError| format!("{what}: {}", e.code());
        let local_size = mpi_comm::size(node_comm).map_err(|e| code("MPI_Comm_size", e))?;
        let local = mpi_comm::rank(node_comm).map_err(|e| code("MPI_Comm_rank", e))?;
        let mut j = Joining::new(rank, local, local_size, size, geo);
        // SAFETY: W words from every rank of the node.
        unsafe { mpi_coll::allgather_i64(&j.mine, &mut j.here, node_comm) }
            .map_err(|e| code("MPI_Allgather", e))?;
        j.map(cma, nb_seq);
        // SAFETY: four words from every rank.
        unsafe { mpi_coll::allgather_i64(&j.word, &mut j.all, comm) }
            .map_err(|e| code("MPI_Allgather", e))?;
        j.finish(|| mpi_comm::dup(comm).ok())
    }

    /// Lets the system MPI's progress engine run once, for this communicator's peers. A
    /// rank waiting on a flag calls no MPI function otherwise, and a peer may need this
    /// rank's library to move before it can come: MPICH's passive-target RMA completes at
    /// the target only while the target's engine runs (OpenCoarrays' lock loops). A probe on
    /// the private duplicate, where nothing is ever sent, finds nothing queued and so runs
    /// the engine on the communicator's own channel of the library; the probe on the
    /// library's world runs its RMA progress. No receive stays posted (a request of the
    /// shim's pending in the library for the segment's whole life).
    pub fn drive(&self) {
        if let Ok(g) = self.driver.try_lock() {
            if let Some(d) = g.as_ref() {
                let _ = p2p::iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, d.comm);
            }
            let _ = p2p::iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD());
        }
    }

    /// Frees the duplicate that drives the library (at finalize, or when the segment goes):
    /// no communicator of the shim's may outlive `MPI_Finalize` (MPI-4.0 §11.2), and a
    /// thread's lane (`services::coll::lane`) may hold the segment past it.
    pub fn retire(&self) {
        let d = self.driver.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(mut d) = d {
            if !mpi_comm::finalized().unwrap_or(true) {
                let _ = mpi_comm::free(&mut d.comm);
            }
        }
    }

    /// The next instance of channel `BLOCKING` or `NONBLOCKING` and its place.
    pub fn next(&self, ch: u32) -> Place {
        let i = self.next[ch as usize].fetch_add(1, Ordering::Relaxed);
        self.place(ch, i)
    }

    /// The place of instance `i` of channel `ch`.
    pub fn place(&self, ch: u32, i: u32) -> Place {
        let off = self.geo.region(ch, i % self.geo.depth);
        Place {
            // SAFETY: within the segment (`Geometry::len`).
            region: unsafe { self.seg.as_ptr().add(off) },
            instance: i,
            channel: ch,
        }
    }

    /// A channel of its own for a persistent collective, if one is left: a fresh one, else
    /// one every rank gave back. Every rank initializes the communicator's persistent
    /// collectives in the same order and learns what was given back at the same
    /// initializations ([`Node::reclaim_channels`]), so every rank hands out the same. The
    /// channel is given back when the lease drops.
    pub fn persistent_channel(self: &Arc<Self>) -> Option<Lease> {
        let mut c = self.channels.lock().unwrap_or_else(|e| e.into_inner());
        let fresh = c.fresh + 2 < self.geo.channels;
        let ch = if fresh {
            c.fresh += 1;
            c.fresh + 1
        } else {
            c.free.pop_front()?
        };
        Some(Lease {
            node: Arc::clone(self),
            ch,
            fresh,
            held: true,
        })
    }

    /// Puts channel `ch`, just handed out, back where it was taken from (a fresh one, the
    /// last handed out, or the head of the agreed free list), as if never handed out.
    fn take_back(&self, ch: u32, fresh: bool) {
        let mut c = self.channels.lock().unwrap_or_else(|e| e.into_inner());
        if !fresh {
            c.free.push_front(ch);
        } else if c.fresh + 1 == ch {
            c.fresh -= 1;
        }
    }

    /// The channel of a persistent collective this rank is done with (freed: inactive,
    /// every instance it started has ended here, MPI-4.0 §6.13; or never run there), to be
    /// reused once every rank has.
    fn give_back_channel(&self, ch: u32) {
        if (2..self.geo.channels).contains(&ch) {
            let mut c = self.channels.lock().unwrap_or_else(|e| e.into_inner());
            c.given_back |= 1u64 << (ch - 2);
        }
    }

    /// Learns which channels every rank of the communicator (its private duplicate `comm`,
    /// of `size` ranks) has given back: an allgather of each rank's set, so every rank
    /// must call it at the same point, a persistent initialization that found no channel
    /// (non-local, MPI-4.0 §6.13). Those channels are handed out again, lowest first.
    pub fn reclaim_channels(&self, comm: MPI_Comm, size: usize) -> Result<(), String> {
        let mine = self
            .channels
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .given_back;
        let mut all = vec![0i64; size];
        // SAFETY: one word from every rank of `comm`.
        unsafe { mpi_coll::allgather_i64(&[mine as i64], &mut all, comm) }
            .map_err(|e| format!("MPI_Allgather: {}", e.code()))?;
        let everywhere = all.iter().fold(u64::MAX, |m, &w| m & w as u64);
        let mut c = self.channels.lock().unwrap_or_else(|e| e.into_inner());
        c.given_back &= !everywhere;
        c.free
            .extend((0..64).filter(|b| everywhere >> b & 1 == 1).map(|b| b + 2));
        Ok(())
    }

    /// The place of the next instance of persistent channel `ch`.
    pub fn next_persistent(&self, ch: u32) -> Place {
        let i = self.starts[ch as usize].fetch_add(1, Ordering::Relaxed);
        self.place(ch, i)
    }

    /// Rank `r`'s progress flag in a region.
    pub fn flag(&self, region: *mut u8, r: u32) -> &SeqFlag {
        // SAFETY: in a cell of this segment, at the start of a cache line (the segment is
        // page aligned, the header and cells are whole lines); the slot begins after it;
        // lives as long as `self`.
        unsafe { &*(region.add(r as usize * self.geo.cell() + FLAG) as *const SeqFlag) }
    }

    /// Publishes this rank's flag at `value` in `region`; first, if the application called
    /// the library since this process's last collective on a segment, lets the library
    /// run once (its messages go out) and marks the cell so that the watching ranks let
    /// theirs run at the end of the collective (`transport::take_library_traffic`).
    pub fn post(&self, region: *mut u8, value: u32) {
        if super::take_library_traffic() {
            self.drive();
            self.traffic(region, self.rank)
                .store(value, Ordering::Relaxed);
        }
        self.flag(region, self.rank).publish(value);
    }

    /// Whether rank `r` marked its cell of `region` at `instance` (read after its flag of
    /// that instance was seen: the release store of the flag orders the mark before it).
    pub fn had_traffic(&self, region: *mut u8, r: u32, instance: u32) -> bool {
        let m = self.traffic(region, r).load(Ordering::Relaxed);
        m.wrapping_sub(phase_value(instance, 0)) < PHASES
    }

    fn traffic(&self, region: *mut u8, r: u32) -> &AtomicU32 {
        // SAFETY: 4 aligned bytes of rank r's flag line in this segment (`TRAFFIC`), which
        // only that rank writes; lives as long as `self`.
        unsafe { &*(region.add(r as usize * self.geo.cell() + TRAFFIC) as *const AtomicU32) }
    }

    /// Rank `r`'s acknowledgement line of channel `ch`.
    pub fn ack(&self, ch: u32, r: u32) -> &SeqFlag {
        // SAFETY: a line of this segment's acknowledgement area (`Geometry::ack`), which
        // holds nothing else; lives as long as `self`.
        unsafe { &*(self.seg.as_ptr().add(self.geo.ack(ch, r)) as *const SeqFlag) }
    }

    /// Whether this rank may write its cell of `place`: every rank is done with the
    /// instance `depth` before it (the first `depth` instances find the zeroed segment:
    /// the difference wraps to >= 0). `Err(r)`: rank `r` is not yet.
    pub fn claim(&self, place: &Place) -> Result<(), u32> {
        let target = self.claim_target(place);
        let seen = &self.seen[place.channel as usize];
        if reached(seen.load(Ordering::Relaxed), target) {
            return Ok(());
        }
        let mut least = u32::MAX;
        for r in 0..self.geo.ranks {
            let ahead = self.ack(place.channel, r).load().wrapping_sub(target);
            if (ahead as i32) < 0 {
                return Err(r);
            }
            least = least.min(ahead);
        }
        // a racing store of an older value only costs a later claim a read
        seen.store(target.wrapping_add(least), Ordering::Relaxed);
        Ok(())
    }

    /// The value every rank's ack must reach before [`Node::claim`] of `place` succeeds.
    pub fn claim_target(&self, place: &Place) -> u32 {
        place.instance.wrapping_add(1).wrapping_sub(self.geo.depth)
    }

    /// Gives up this rank's part of `place` after an error: its flag jumps past every
    /// phase and it lets the region go, so that no other rank waits for it forever (their
    /// results are then undefined, as after any failed collective).
    pub fn abandon(&self, place: &Place) {
        self.flag(place.region, self.rank)
            .publish(phase_value(place.instance, PHASES - 1));
        self.release(place);
    }

    /// Acknowledges `place`'s instance (this rank is done with it: its reads are over, its
    /// slot may be overwritten). Acks go out in instance order: on the non-blocking
    /// channel an instance that ends before an earlier one is remembered until the earlier
    /// one ends. No instance can end `depth` or more ahead of an unacknowledged one here:
    /// it would need a writer's claim that covers this rank's missing ack.
    pub fn release(&self, place: &Place) {
        let ack = self.ack(place.channel, self.rank);
        if place.channel != NONBLOCKING {
            // blocking and persistent instances end in order
            ack.publish(place.instance.wrapping_add(1));
            return;
        }
        let mut g = self.nb_done.lock().unwrap_or_else(|e| e.into_inner());
        let (next, mask) = &mut *g;
        let ahead = place.instance.wrapping_sub(*next);
        if ahead >= 64 {
            // older than the next (a failed run's second release) or impossibly far ahead
            return;
        }
        *mask |= 1u64 << ahead;
        let run = mask.trailing_ones();
        if run > 0 {
            *mask = mask.checked_shr(run).unwrap_or(0);
            *next = next.wrapping_add(run);
            ack.publish(*next);
        }
    }
}

/// The value of a flag at `phase` of instance `i`.
pub fn phase_value(i: u32, phase: u32) -> u32 {
    i.wrapping_mul(PHASES).wrapping_add(phase)
}

/// Where a rank stands in a segment's set-up, around its two exchanges: the first among
/// the node's ranks (who created the memory and where, every rank's process), the second
/// among the communicator's (who mapped it, and could read a peer's memory). The blocking
/// set-up ([`Node::setup`]) makes them with `MPI_Allgather`, the non-blocking one
/// ([`Setup`]) with `MPI_Iallgather`; the words live here, at fixed addresses while one is
/// in flight (the joining is boxed there).
struct Joining {
    local: c_int,
    local_size: c_int,
    size: c_int,
    geo: Geometry,
    created: Option<Segment>,
    fd_kept: Option<std::os::fd::OwnedFd>,
    /// This rank's words of the first exchange: [communicator rank, creator's pid, its
    /// descriptor, own pid, an address of its own for the single-copy probe].
    mine: [i64; W],
    /// Every node rank's `mine`.
    here: Vec<i64>,
    pids: Vec<libc::pid_t>,
    /// This rank's words of the second exchange: [its node's first rank, non-blocking
    /// instances started, mapped, single copy works].
    word: [i64; 4],
    /// Every rank's `word`.
    all: Vec<i64>,
}

impl Joining {
    /// Rank `local` of `local_size` on its node (`rank` of `size` in the communicator):
    /// the node's first rank creates the memory (`geo` without its rank count, which is the
    /// node's), the others learn where it is from the first exchange.
    fn new(rank: c_int, local: c_int, local_size: c_int, size: c_int, geo: Geometry) -> Joining {
        let geo = Geometry {
            ranks: local_size as u32,
            ..geo
        };
        let mut created = None;
        let mut fd_kept = None;
        let mut mine = [
            rank as i64,
            -1,
            -1,
            std::process::id() as i64,
            core::ptr::addr_of!(CMA_PROBE) as i64,
        ];
        if local == 0 {
            match Segment::create_anonymous("libshim-node", geo.bytes()) {
                Ok((seg, fd)) => {
                    use std::os::fd::AsRawFd;
                    mine[1] = std::process::id() as i64;
                    mine[2] = fd.as_raw_fd() as i64;
                    created = Some(seg);
                    fd_kept = Some(fd);
                }
                Err(e) => tracing::info!(target: "shim::shm", "no node segment: {e}"),
            }
        }
        Joining {
            local,
            local_size,
            size,
            geo,
            created,
            fd_kept,
            mine,
            here: vec![0; W * local_size as usize],
            pids: Vec::new(),
            word: [0; 4],
            all: vec![0; 4 * size as usize],
        }
    }

    /// After the first exchange: maps the creator's memory, and reads a byte of the next
    /// rank's (single copy needs the ptrace policy's consent: Yama, containers, seccomp;
    /// only a real read tells). `cma`: whether single copy may be used at all
    /// (`SHIM_SHM_SINGLE_COPY=off`: not even the probe reads a peer); `nb_seq`: the
    /// non-blocking instances this rank started.
    fn map(&mut self, cma: bool, nb_seq: u32) {
        let here = &self.here;
        let (pid, fd) = (here[1], here[2]);
        self.pids = here.chunks(W).map(|w| w[3] as libc::pid_t).collect();
        let (local, n) = (self.local as usize, self.local_size as usize);
        let next = (local + 1) % n;
        let cma_ok = cma
            && (next == local
                || crate::platform::shm::cma_probe(self.pids[next], here[W * next + 4] as usize)
                .map_err(|e| tracing::info!(target: "shim::shm", "no single copy (CMA) from rank {next} of the node: {e}"))
                    .is_ok());
        if self.created.is_none() && pid >= 0 {
            match Segment::open_peer(pid as libc::pid_t, fd as i32, self.geo.bytes()) {
                Ok(s) => self.created = Some(s),
                Err(e) => {
                    tracing::info!(target: "shim::shm", "cannot map the node segment of the node's first rank: {e}")
                }
            }
        }
        self.word = [
            here[0],
            nb_seq as i64,
            self.created.is_some() as i64,
            cma_ok as i64,
        ];
    }

    /// After the second exchange: every rank of the node has mapped the memory (or given
    /// up), so the creator's descriptor goes; the node, the same answer on every rank
    /// (`None`: shared memory works for no rank; `Err`: for some only). `driver`: a
    /// duplicate of the communicator to drive the library with, asked for only when the
    /// segment is there (on every rank alike).
    fn finish(mut self, driver: impl FnOnce() -> Option<MPI_Comm>) -> Result<Option<Node>, String> {
        drop(self.fd_kept.take());
        let (size, all, here) = (self.size as usize, &self.all, &self.here);
        let at = |r: usize, k: usize| all[4 * r + k];
        // the first instance on the segment: the largest over the ranks, so that a program
        // that (wrongly) starts them in a different order around a blocking set-up still
        // matches
        let nb_from = (0..size).map(|r| at(r, 1) as u32).max().unwrap_or(0);
        let oks = (0..size).filter(|&r| at(r, 2) != 0).count();
        if oks == 0 {
            return Ok(None);
        }
        let Some(seg) = self.created.take().filter(|_| oks == size) else {
            return Err("a rank could not map its node's segment (see SHIM_LOG=info)".into());
        };
        let rank = self.mine[0] as usize;
        let leaders: Vec<i32> = (0..size).map(|r| at(r, 0) as i32).collect();
        let layout = Layout::of(&leaders);
        if let Some(l) = &layout {
            // the node communicator orders its ranks as the communicator does (MPI-4.0
            // §7.4.2, MPI_Comm_split_type with equal keys): the layout's local indices agree
            let node = &l.nodes[l.node_of[rank] as usize];
            let same = node.len() == self.local_size as usize
                && (0..node.len()).all(|k| here[W * k] == node[k] as i64);
            if !same {
                return Err(
                    "the node communicator's ranks are not in the communicator's order".into(),
                );
            }
        }
        let geo = self.geo;
        Ok(Some(Node {
            seg,
            geo,
            rank: self.local as u32,
            layout: layout.map(Arc::new),
            pids: std::mem::take(&mut self.pids),
            cma: (0..size).all(|r| at(r, 3) != 0),
            nb_from,
            next: [AtomicU32::new(0), AtomicU32::new(0)],
            channels: Mutex::new(Channels::default()),
            starts: (0..geo.channels).map(|_| AtomicU32::new(0)).collect(),
            seen: (0..geo.channels).map(|_| AtomicU32::new(0)).collect(),
            nb_done: Mutex::new((0, 0)),
            driver: std::sync::Mutex::new(driver().map(Driver::of)),
        }))
    }
}

/// A segment set up without waiting for the other ranks, for a communicator whose ranks all
/// share the node and that reached its set-up in a non-blocking collective (whose call is
/// local, MPI-4.0 §6.12: it must not wait there). The two exchanges of [`Joining`] are
/// `MPI_Iallgather`s on the communicator's private duplicate, advanced by [`Setup::poll`]
/// from the runs that wait for it. Every rank starts it at the same call, and its
/// non-blocking instances from that one on (`nb_from`) run on the segment once it is
/// there, on every rank alike (where it cannot be, on point-to-point). A persistent
/// collective initialized meanwhile holds a channel reserved for it ([`Setup::reserve`]).
pub struct Setup {
    /// The segment's geometry (its ranks: the communicator's), known before it exists.
    pub geo: Geometry,
    /// The first non-blocking instance on the segment: the one that started the set-up,
    /// or the next one where a persistent initialization started it.
    pub nb_from: u32,
    cma: bool,
    step: Mutex<Step>,
    /// The persistent channels handed out before the segment exists; the outcome is set
    /// under this lock, so that a reservation and a reserved channel's return both land
    /// on the node.
    reserved: Mutex<Reserved>,
    result: std::sync::OnceLock<Option<Arc<Node>>>,
}

/// See [`Setup::reserved`].
#[derive(Default)]
struct Reserved {
    /// Fresh channels handed out so far (the node's [`Channels::fresh`] once it exists).
    fresh: u32,
    /// Reserved channels given back before the segment existed (bit `ch - 2`).
    given_back: u64,
}

/// A persistent channel reserved while the segment is being set up (see [`Setup`]): the
/// same channel on every rank (every rank initializes the communicator's persistent
/// collectives in the same order, MPI-4.0 §6.13), a [`Lease`] once the segment exists.
/// Dropped before that, it gives the channel back.
pub struct PendingLease {
    setup: Arc<Setup>,
    ch: u32,
    resolved: bool,
}

impl PendingLease {
    pub fn setup(&self) -> &Arc<Setup> {
        &self.setup
    }

    pub fn channel(&self) -> u32 {
        self.ch
    }

    /// Once the set-up is done: the lease on the segment (`Some(None)` where it could not
    /// be); `None` while it goes on.
    pub fn resolve(&mut self) -> Option<Option<Lease>> {
        if self.resolved {
            return Some(None);
        }
        let outcome = self.setup.outcome()?;
        self.resolved = true;
        Some(outcome.map(|node| Lease {
            node,
            ch: self.ch,
            fresh: true,
            held: true,
        }))
    }

    /// Undoes the reservation just made, for an initialization that failed after it
    /// (see [`Lease::revert`]).
    pub fn revert(mut self) {
        let mut r = self.setup.reservations();
        match self.setup.result.get() {
            None if r.fresh + 1 == self.ch => r.fresh -= 1,
            // Reserved channels are the node's first fresh ones (`Setup::conclude`).
            Some(Some(node)) => node.take_back(self.ch, true),
            _ => {}
        }
        self.resolved = true;
    }
}

impl Drop for PendingLease {
    fn drop(&mut self) {
        if self.resolved {
            return;
        }
        let mut r = self.setup.reservations();
        match self.setup.result.get() {
            Some(Some(node)) => node.give_back_channel(self.ch),
            Some(None) => {}
            None => r.given_back |= 1u64 << (self.ch - 2),
        }
    }
}

enum Step {
    /// Waiting for the communicator's private duplicate.
    Start(Box<Joining>),
    /// An exchange in flight on the duplicate (`second`: the last one).
    Exchange {
        j: Box<Joining>,
        req: MPI_Request,
        comm: MPI_Comm,
        second: bool,
    },
    Done,
}

// SAFETY: the joining's memory and MPI handles, used by one thread at a time (the mutex).
unsafe impl Send for Step {}

impl Setup {
    /// Starts the set-up at rank `rank` of `size` (all on this node): the first rank
    /// creates the memory now; the exchanges start once the duplicate exists.
    pub fn start(rank: c_int, size: c_int, geo: Geometry, nb_from: u32, cma: bool) -> Setup {
        let j = Joining::new(rank, rank, size, size, geo);
        Setup {
            geo: j.geo,
            nb_from,
            cma,
            step: Mutex::new(Step::Start(Box::new(j))),
            reserved: Mutex::new(Reserved::default()),
            result: std::sync::OnceLock::new(),
        }
    }

    fn reservations(&self) -> std::sync::MutexGuard<'_, Reserved> {
        self.reserved.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A persistent channel for a persistent collective initialized while the set-up goes
    /// on, as [`Node::persistent_channel`] would hand out: `None` once the set-up is done
    /// (the node hands it out) or when no fresh channel is left (reclaiming needs the node).
    pub fn reserve(self: &Arc<Self>) -> Option<PendingLease> {
        let mut r = self.reservations();
        if self.result.get().is_some() || r.fresh + 2 >= self.geo.channels {
            return None;
        }
        r.fresh += 1;
        Some(PendingLease {
            setup: Arc::clone(self),
            ch: r.fresh + 1,
            resolved: false,
        })
    }

    /// Whether the set-up can be dropped as if it had never started (for the call that
    /// started it, which failed right after): no channel reserved, no exchange begun. It
    /// cannot begin after this says yes: the caller holds its communicator's state, from
    /// which alone the set-up is reached.
    pub fn untouched(&self) -> bool {
        let r = self.reservations();
        r.fresh == 0
            && r.given_back == 0
            && self.result.get().is_none()
            && self
                .step
                .try_lock()
                .is_ok_and(|g| matches!(*g, Step::Start(_)))
    }

    /// Sets the outcome (once), with the channels reserved so far taken on the node.
    fn conclude(&self, node: Option<Node>) {
        let r = self.reservations();
        if let Some(n) = &node {
            let mut c = n.channels.lock().unwrap_or_else(|e| e.into_inner());
            c.fresh = r.fresh;
            c.given_back |= r.given_back;
        }
        let _ = self.result.set(node.map(Arc::new));
    }

    /// The outcome once known: the segment, or `None` where shared memory cannot serve
    /// (the same on every rank).
    pub fn outcome(&self) -> Option<Option<Arc<Node>>> {
        self.result.get().cloned()
    }

    /// Advances the set-up unless another thread is doing so (`shadow`: the private
    /// duplicate once it exists); returns the outcome once known.
    pub fn poll(&self, shadow: impl FnOnce() -> Option<MPI_Comm>) -> Option<Option<Arc<Node>>> {
        if let Some(r) = self.outcome() {
            return Some(r);
        }
        let Ok(mut g) = self.step.try_lock() else {
            return None;
        };
        let mut shadow = Some(shadow);
        loop {
            match std::mem::replace(&mut *g, Step::Done) {
                Step::Start(j) => {
                    let Some(comm) = shadow.take().and_then(|f| f()) else {
                        *g = Step::Start(j);
                        return None;
                    };
                    match self.exchange(j, comm, false) {
                        Some(step) => *g = step,
                        None => return self.outcome(),
                    }
                }
                Step::Exchange {
                    mut j,
                    mut req,
                    comm,
                    second,
                } => match p2p::test(&mut req) {
                    Ok(false) => {
                        *g = Step::Exchange {
                            j,
                            req,
                            comm,
                            second,
                        };
                        return None;
                    }
                    Err(e) => {
                        self.fail(format!("MPI_Test: {}", e.code()));
                        return self.outcome();
                    }
                    Ok(true) if !second => {
                        j.map(self.cma, self.nb_from);
                        match self.exchange(j, comm, true) {
                            Some(step) => *g = step,
                            None => return self.outcome(),
                        }
                    }
                    Ok(true) => {
                        let node = j.finish(|| None).unwrap_or_else(|e| {
                            tracing::warn!(target: "shim::shm", "no shared memory for collectives ({e}): point-to-point");
                            None
                        });
                        self.conclude(node);
                        return self.outcome();
                    }
                },
                Step::Done => return self.outcome(),
            }
        }
    }

    /// Posts exchange one or two (`second`) of `j` on `comm`; `None` (the set-up failed,
    /// its outcome set) when the library refused it.
    fn exchange(&self, mut j: Box<Joining>, comm: MPI_Comm, second: bool) -> Option<Step> {
        // SAFETY: the words stay in the box (a fixed address) until the request completes.
        let r = unsafe {
            if second {
                mpi_coll::iallgather_i64(&j.word, &mut j.all, comm)
            } else {
                mpi_coll::iallgather_i64(&j.mine, &mut j.here, comm)
            }
        };
        match r {
            Ok(req) => Some(Step::Exchange {
                j,
                req,
                comm,
                second,
            }),
            Err(e) => {
                self.fail(format!("MPI_Iallgather: {}", e.code()));
                None
            }
        }
    }

    fn fail(&self, why: String) {
        tracing::warn!(target: "shim::shm", "no shared memory for collectives ({why}): point-to-point");
        self.conclude(None);
    }
}

impl Driver {
    /// A duplicate of the communicator, made by every rank of it (its errors returned).
    fn of(dup: MPI_Comm) -> Driver {
        let _ = mpi_comm::set_errhandler(dup, MPI_ERRORS_RETURN());
        Driver { comm: dup }
    }
}

// SAFETY: a communicator handle, used under the node's mutex.
unsafe impl Send for Driver {}

/// Rank 0's view of a node of `ranks` ranks whose segment nobody else maps (unit tests of
/// other modules write the other ranks' lines themselves).
#[cfg(test)]
pub(crate) fn for_tests(ranks: u32, depth: u32) -> Node {
    tests::local(tests::geo(ranks, depth))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Rank 0's view of a segment of `geo` nobody else maps (the other ranks' lines are
    /// written by the test).
    pub(super) fn local(geo: Geometry) -> Node {
        let (seg, _fd) = Segment::create_anonymous("shimtest-node", geo.bytes()).unwrap();
        Node {
            seg,
            geo,
            rank: 0,
            layout: None,
            pids: vec![std::process::id() as libc::pid_t; geo.ranks as usize],
            cma: true,
            nb_from: 0,
            next: [AtomicU32::new(0), AtomicU32::new(0)],
            channels: Mutex::new(Channels::default()),
            starts: (0..geo.channels).map(|_| AtomicU32::new(0)).collect(),
            seen: (0..geo.channels).map(|_| AtomicU32::new(0)).collect(),
            nb_done: Mutex::new((0, 0)),
            driver: Mutex::new(None),
        }
    }

    pub(super) fn geo(ranks: u32, depth: u32) -> Geometry {
        Geometry {
            ranks,
            channels: 3,
            depth,
            slot: 256,
        }
    }

    /// A persistent collective initialized while the segment is set up holds the channel
    /// the node would have handed out there: the node starts after the reserved ones, takes
    /// back those given back meanwhile, and a reservation after the set-up (or beyond the
    /// fresh channels) is refused, so that every rank hands out the same channels.
    #[test]
    fn channels_reserved_during_the_set_up_are_the_nodes_first_ones() {
        let geo = Geometry {
            channels: 5,
            ..geo(1, 4)
        };
        let setup = Arc::new(Setup::start(0, 1, geo, 0, false));
        let mut kept = setup.reserve().unwrap();
        let dropped = setup.reserve().unwrap();
        let last = setup.reserve().unwrap();
        assert_eq!(
            (kept.channel(), dropped.channel(), last.channel()),
            (2, 3, 4)
        );
        assert!(setup.reserve().is_none(), "no fresh channel left");
        assert!(kept.resolve().is_none(), "still pending");
        drop(dropped);
        setup.conclude(Some(local(geo)));
        assert!(setup.reserve().is_none(), "the node hands channels out now");
        let node = setup.outcome().flatten().unwrap();
        {
            let c = node.channels.lock().unwrap();
            assert_eq!((c.fresh, c.given_back), (3, 1 << (3 - 2)));
        }
        let lease = kept.resolve().unwrap().unwrap();
        assert_eq!(lease.ch, 2);
        drop(kept);
        drop(last);
        assert_eq!(
            node.channels.lock().unwrap().given_back,
            1 << 1 | 1 << 2,
            "a resolved reservation goes back through its lease, an unresolved one at once"
        );
        drop(lease);
        assert_eq!(node.channels.lock().unwrap().given_back, 0b111);
        assert!(node.persistent_channel().is_none(), "given back here only");
    }

    #[test]
    fn the_layout_numbers_nodes_by_their_leaders() {
        assert_eq!(Layout::of(&[0, 0, 0]), None, "one node");
        // ranks 0, 2, 4 on one node, 1 and 3 on another (round-robin placement)
        let l = Layout::of(&[0, 1, 0, 1, 0]).unwrap();
        assert_eq!(l.nodes, vec![vec![0, 2, 4], vec![1, 3]]);
        assert_eq!(l.node_of, vec![0, 1, 0, 1, 0]);
        assert_eq!(l.local_of, vec![0, 0, 1, 1, 2]);
        assert_eq!(l.leaders(), vec![0, 1]);
        assert!(!l.blocks());
        assert!(Layout::of(&[0, 0, 2, 2, 2]).unwrap().blocks());
    }

    #[test]
    fn every_line_has_one_owner() {
        let g = geo(5, 4);
        let mut lines = std::collections::HashSet::new();
        for ch in 0..g.channels {
            for r in 0..g.ranks {
                assert!(lines.insert(g.ack(ch, r) / 64), "ack {ch} {r}");
            }
        }
        for ch in 0..g.channels {
            for k in 0..g.depth {
                for r in 0..g.ranks as usize {
                    let cell = g.region(ch, k) + r * g.cell();
                    assert_eq!(cell % 64, FLAG, "a flag starts a line");
                    for l in cell / 64..(cell + g.cell()) / 64 {
                        assert!(lines.insert(l), "cell {ch} {k} {r}");
                    }
                }
            }
        }
        assert_eq!(g.bytes() / 64, lines.len() + HEADER / 64);
    }

    /// Persistent channels go back into use only once every rank has given them back
    /// (a rank may free its request before another has finished with it), in the same
    /// order on every rank, and a channel's instances go on from one request to the next.
    #[test]
    fn persistent_channels_are_reused_once_every_rank_gave_them_back() {
        use crate::platform::mpi::fake;
        let n = Arc::new(local(Geometry {
            channels: 5,
            ..geo(2, 4)
        }));
        let mut leases: Vec<Lease> = (0..3).filter_map(|_| n.persistent_channel()).collect();
        assert_eq!(leases.iter().map(|l| l.ch).collect::<Vec<_>>(), [2, 3, 4]);
        assert!(n.persistent_channel().is_none());
        let first = leases[1].next().instance;
        leases[1].next();
        leases.truncate(1); // channels 3 and 4 given back
        leases.pop(); // and 2
        n.give_back_channel(NONBLOCKING); // not a persistent channel: ignored
        // the other rank has given back channel 3 only, then 2 as well (4 it holds)
        let mut answers = vec![vec![0b111, 0b10], vec![0b101, 0b01]].into_iter();
        let _g = fake::install(move |c| match c.name {
            "allgather" => Ok(answers.next().unwrap()),
            _ => Ok(vec![]),
        });
        n.reclaim_channels(0x5e7 as MPI_Comm, 2).unwrap();
        assert_eq!(
            fake::calls()[0].args[..2],
            [1, 2],
            "one word from each of 2 ranks"
        );
        let again = n.persistent_channel().expect("channel 3");
        assert_eq!(again.ch, 3);
        assert!(n.persistent_channel().is_none());
        assert_eq!(again.next().instance, first + 2, "the count goes on");
        n.reclaim_channels(0x5e7 as MPI_Comm, 2).unwrap();
        assert_eq!(
            n.channels.lock().unwrap().given_back,
            0b100,
            "4: not yet everywhere"
        );
        assert_eq!(n.persistent_channel().map(|l| l.ch), Some(2));
    }

    #[test]
    fn non_blocking_acks_go_out_in_instance_order() {
        let n = local(geo(2, 4));
        let at = |i| n.place(NONBLOCKING, i);
        let ack = || n.ack(NONBLOCKING, 0).load();
        n.release(&at(2));
        n.release(&at(1));
        assert_eq!(ack(), 0, "instance 0 is still running");
        n.release(&at(0));
        assert_eq!(ack(), 3);
        n.release(&at(1));
        assert_eq!(
            ack(),
            3,
            "a second release of an old instance changes nothing"
        );
        n.release(&at(3));
        assert_eq!(ack(), 4);
        // blocking instances end in order: published at once
        n.release(&n.place(BLOCKING, 0));
        assert_eq!(n.ack(BLOCKING, 0).load(), 1);
    }

    #[test]
    fn non_blocking_acks_cross_the_wrap() {
        let n = local(geo(2, 4));
        *n.nb_done.lock().unwrap() = (u32::MAX - 1, 0);
        n.release(&n.place(NONBLOCKING, 0));
        n.release(&n.place(NONBLOCKING, u32::MAX));
        assert_eq!(
            n.ack(NONBLOCKING, 0).load(),
            0,
            "u32::MAX - 1 is still running"
        );
        n.release(&n.place(NONBLOCKING, u32::MAX - 1));
        assert_eq!(n.ack(NONBLOCKING, 0).load(), 1);
    }

    #[test]
    fn a_claim_reads_the_acks_only_when_what_it_saw_falls_short() {
        let n = local(geo(3, 4));
        let b = |i| n.place(BLOCKING, i);
        // the first `depth` instances find the zeroed segment
        for i in 0..4 {
            assert_eq!(n.claim(&b(i)), Ok(()));
        }
        // instance 4 needs every rank done with instance 0
        n.ack(BLOCKING, 0).publish(4);
        n.ack(BLOCKING, 2).publish(3);
        assert_eq!(n.claim(&b(4)), Err(1));
        n.ack(BLOCKING, 1).publish(2);
        assert_eq!(n.claim(&b(4)), Ok(()));
        // the least ack seen (2) covers instance 5 without reading: a line that (as no
        // real rank could) went back would show at instance 6
        n.ack(BLOCKING, 2).publish(0);
        assert_eq!(n.claim(&b(5)), Ok(()));
        n.ack(BLOCKING, 1).publish(3);
        assert_eq!(n.claim(&b(6)), Err(2));
        // other channels keep their own
        assert_eq!(n.claim(&n.place(NONBLOCKING, 5)), Err(0));
    }
}

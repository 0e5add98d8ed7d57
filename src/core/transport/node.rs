//! Layer: core. May use: platform.
//!
//! The shared-memory segment of a communicator whose ranks all share a node, and how it is
//! set up.
//!
//! Layout: a header line, then cells. A cell belongs to one rank in one region; a region is
//! one collective in flight on one channel (channel 0: blocking collectives, 1: non-blocking
//! ones, 2 and up: one per persistent collective; each channel has `depth` regions used in
//! turn). A cell is the rank's `ack` line (the last collective of this region it is done
//! with), then its `flag` (its progress in the collective) and its data slot, which starts
//! in the flag's line: a contribution of up to `INLINE` bytes travels with the flag in one
//! cache line, so a reader pays one transfer for both. Every line has one writer, the
//! cell's rank (single-writer sequence counters, `flag`; only a reader about to sleep
//! announces itself in the flag's second word), so ranks never write the same cache line.
//!
//! Instance `i` of a channel uses region `i % depth`. Before a rank touches the region it
//! waits until every rank's `ack` there says instance `i - depth` is done (a slow rank never
//! finds its slot overwritten), and it acknowledges instance `i` when its part is over.
//!
//! The memory is an anonymous `memfd` of one rank (`platform::shm`); the others map it
//! through `/proc/<pid>/fd`, after which it is closed: no name ever exists, so a `kill -9`
//! of any rank at any moment leaves nothing in `/dev/shm`.

use core::ffi::c_int;
use std::sync::atomic::{AtomicU32, Ordering};

use super::flag::SeqFlag;
use crate::platform::abi::*;
use crate::platform::mpi::{coll as mpi_coll, comm as mpi_comm, p2p};
use crate::platform::shm::Segment;

/// Bytes before the first cell.
const HEADER: usize = 64;
/// Offset of a cell's flag (after its ack line).
const FLAG: usize = 64;
/// Offset of a cell's data slot: in the flag's line, 16 bytes in (the flag's 8 bytes, and
/// the alignment of the widest predefined type).
pub const DATA: usize = FLAG + 16;
/// Bytes of a slot in the flag's cache line.
pub const INLINE: usize = FLAG + 64 - DATA;
/// Flag values per instance: a schedule's phases are `1..PHASES`.
pub const PHASES: u32 = 8;

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

    /// Offset of region `k` of channel `ch`.
    pub fn region(&self, ch: u32, k: u32) -> usize {
        HEADER + ((ch * self.depth + k) as usize * self.ranks as usize) * self.cell()
    }

    /// Bytes of the whole segment.
    pub fn bytes(&self) -> usize {
        self.region(self.channels, 0)
    }
}

/// The channel of blocking collectives.
pub const BLOCKING: u32 = 0;
/// The channel of non-blocking collectives.
pub const NONBLOCKING: u32 = 1;

/// A communicator's mapped segment.
pub struct Node {
    seg: Segment,
    pub geo: Geometry,
    pub rank: u32,
    /// The first instance of the non-blocking channel that runs in shared memory (see
    /// [`Node::setup`]).
    pub nb_from: u32,
    /// The next instance of the blocking and the non-blocking channel.
    next: [AtomicU32; 2],
    /// Persistent channels handed out so far.
    persistent: AtomicU32,
    /// A receive nothing ever matches, pending on a private duplicate of the communicator:
    /// testing it runs the system MPI's progress engine for these peers ([`Node::drive`]).
    driver: std::sync::Mutex<Option<Driver>>,
}

struct Driver {
    comm: MPI_Comm,
    req: MPI_Request,
    _buf: Box<u64>,
}

impl Drop for Node {
    fn drop(&mut self) {
        let d = self
            .driver
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(mut d) = d {
            if !mpi_comm::finalized().unwrap_or(true) {
                let _ = p2p::cancel(&mut d.req);
                let _ = p2p::wait(&mut d.req);
                let _ = mpi_comm::free(&mut d.comm);
            }
        }
    }
}

/// One collective's place in the segment: its region and instance.
#[derive(Clone, Copy, Debug)]
pub struct Place {
    pub region: *mut u8,
    pub instance: u32,
}

impl Node {
    /// Sets up the segment of the communicator whose private duplicate is `comm` (every
    /// rank calls this at the same collective): `None` when its ranks are not all on one
    /// node or shared memory does not work here (then every rank gets `None`; the reason
    /// is logged, and `warn` makes it a warning). `nb_seq` is how many non-blocking
    /// collectives this rank has started on the communicator: the first instance that
    /// uses shared memory is the largest over the ranks, so that a program that (wrongly)
    /// starts them in a different order around this blocking call still matches.
    pub fn setup(
        comm: MPI_Comm,
        size: c_int,
        channels: u32,
        depth: u32,
        slot: usize,
        nb_seq: u32,
    ) -> Result<Option<Node>, String> {
        let rank = mpi_comm::rank(comm).map_err(|e| format!("MPI_Comm_rank: {}", e.code()))?;
        let node = mpi_comm::split_type_shared(comm)
            .map_err(|e| format!("MPI_Comm_split_type: {}", e.code()))?;
        let mut node_comm = node;
        let node_size = mpi_comm::size(node_comm).unwrap_or(0);
        let _ = mpi_comm::free(&mut node_comm);
        if node_size != size {
            // every rank sees a smaller node communicator: all return here
            return Ok(None);
        }
        let geo = Geometry {
            ranks: size as u32,
            channels: 2 + channels,
            depth,
            slot,
        };
        let len = geo.bytes();
        let mut created: Option<Segment> = None;
        let mut fd_kept: Option<std::os::fd::OwnedFd> = None;
        let mut mine = [-1i64; 4];
        mine[2] = nb_seq as i64;
        if rank == 0 {
            match Segment::create_anonymous("libshim-node", len) {
                Ok((seg, fd)) => {
                    use std::os::fd::AsRawFd;
                    mine[0] = std::process::id() as i64;
                    mine[1] = fd.as_raw_fd() as i64;
                    created = Some(seg);
                    fd_kept = Some(fd);
                }
                Err(e) => tracing::info!(target: "shim::shm", "no node segment: {e}"),
            }
        }
        let mut all = vec![0i64; 4 * size as usize];
        // SAFETY: four words from every rank.
        unsafe { mpi_coll::allgather_i64(&mine, &mut all, comm) }
            .map_err(|e| format!("MPI_Allgather: {}", e.code()))?;
        let (pid, fd) = (all[0], all[1]);
        let nb_from = (0..size as usize)
            .map(|r| all[4 * r + 2] as u32)
            .max()
            .unwrap_or(0);
        if created.is_none() && pid >= 0 {
            match Segment::open_peer(pid as libc::pid_t, fd as i32, len) {
                Ok(s) => created = Some(s),
                Err(e) => {
                    tracing::info!(target: "shim::shm", "cannot map the node segment of rank 0: {e}")
                }
            }
        }
        let ok = created.is_some();
        let mut oks = vec![0i64; size as usize];
        // SAFETY: one word from every rank.
        unsafe { mpi_coll::allgather_i64(&[ok as i64], &mut oks, comm) }
            .map_err(|e| format!("MPI_Allgather: {}", e.code()))?;
        // every rank has mapped it (or given up): the creator's descriptor goes
        drop(fd_kept);
        let Some(seg) = created else {
            return Ok(None);
        };
        if oks.contains(&0) {
            return Err("a rank could not map the node segment (see SHIM_LOG=info)".into());
        }
        Ok(Some(Node {
            seg,
            geo,
            rank: rank as u32,
            nb_from,
            next: [AtomicU32::new(0), AtomicU32::new(0)],
            persistent: AtomicU32::new(0),
            driver: std::sync::Mutex::new(Driver::new(comm)),
        }))
    }

    /// Lets the system MPI's progress engine run once, for this communicator's peers. A
    /// rank waiting on a flag calls no MPI function otherwise, and a peer may need this
    /// rank's library to move before it can come: MPICH's passive-target RMA completes at
    /// the target only while the target's engine runs (OpenCoarrays' lock loops). Testing an
    /// incomplete request runs the engine, on the communicator's own channel of the library
    /// (a probe may answer from its queues, a self communicator from a local path).
    pub fn drive(&self) {
        if let Ok(mut g) = self.driver.try_lock() {
            if let Some(d) = g.as_mut() {
                let _ = p2p::test(&mut d.req);
            }
            let _ = p2p::iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD());
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
        }
    }

    /// A channel of its own for a persistent collective, if one is left.
    pub fn persistent_channel(&self) -> Option<u32> {
        let k = self.persistent.fetch_add(1, Ordering::Relaxed);
        (k + 2 < self.geo.channels).then_some(k + 2)
    }

    /// Rank `r`'s progress flag in a region.
    pub fn flag(&self, region: *mut u8, r: u32) -> &SeqFlag {
        // SAFETY: in a cell of this segment, at the start of a cache line (the segment is
        // page aligned, the header and cells are whole lines); the slot begins after it;
        // lives as long as `self`.
        unsafe { &*(region.add(r as usize * self.geo.cell() + FLAG) as *const SeqFlag) }
    }

    /// Rank `r`'s acknowledgement in a region.
    pub fn ack(&self, region: *mut u8, r: u32) -> &SeqFlag {
        // SAFETY: as for `flag`: the cell's first line, which holds nothing else.
        unsafe { &*(region.add(r as usize * self.geo.cell()) as *const SeqFlag) }
    }
}

/// The value of a flag at `phase` of instance `i`.
pub fn phase_value(i: u32, phase: u32) -> u32 {
    i.wrapping_mul(PHASES).wrapping_add(phase)
}

impl Driver {
    /// Duplicates `comm` (all its ranks are in the setup) and posts the receive.
    fn new(comm: MPI_Comm) -> Option<Driver> {
        let mut dup = mpi_comm::dup(comm).ok()?;
        let _ = mpi_comm::set_errhandler(dup, MPI_ERRORS_RETURN());
        let mut buf = Box::new(0u64);
        // SAFETY: one byte into a heap buffer the Driver keeps until the request is gone.
        let req = unsafe {
            p2p::irecv(
                (&mut *buf as *mut u64).cast(),
                1,
                MPI_BYTE(),
                MPI_ANY_SOURCE,
                0,
                dup,
            )
        };
        match req {
            Ok(req) => Some(Driver {
                comm: dup,
                req,
                _buf: buf,
            }),
            Err(_) => {
                let _ = mpi_comm::free(&mut dup);
                None
            }
        }
    }
}

// SAFETY: handles and a heap buffer the request writes to; used under the node's mutex.
unsafe impl Send for Driver {}

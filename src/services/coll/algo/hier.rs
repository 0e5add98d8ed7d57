//! Layer: services. May use: core, platform.
//!
//! Two-level (node-aware) collectives for a communicator whose ranks live on several
//! nodes (`core::transport::node::Layout`). The ranks of a node meet in their node's
//! segment, copy in and copy out as in [`super::shm`]; only one rank per node, its leader
//! (its lowest rank), talks to the other nodes, through a point-to-point schedule among
//! the leaders that is built by the flat builders and embedded in the collective's
//! (`Builder::embed`); in Gather and Scatter each node's blocks travel as one message
//! between its leader and the root, in Allgather and Alltoall between every pair of
//! leaders (their node phase reads the ranks' memory with one copy, `super::single`). A flat algorithm sends up to one message per rank
//! across the network per step; these send one per node.
//!
//! Phases of a rank's flag: [`PUT`] (its operand or the root's data is in its slot) and
//! [`DONE`] (a leader's slot holds the result for its node). A reduction combines a node's
//! operands in rank order and the leaders' in node order, so it is right for
//! non-commutative operations where every node's ranks are consecutive (`Layout::blocks`).

use std::sync::Arc;

use super::shm::{PUT, Slots, combine, operand, put_operand, slice};
use super::{Block, Rank, Reduction, barrier, bcast, reduce, reduce_scatter, single};
use crate::core::dtype::TypeInfo;
use crate::core::sched::{ALL_PEERS, Addr, Builder, Data, Schedule};
use crate::core::transport::node::Layout;
use crate::platform::abi::MPI_PACKED;
use crate::services::coll::select::Choice;

/// The flag phase at which a leader's slot holds its node's result.
const DONE: u8 = 2;

/// The flag phase at which a rank has read all it needs from its leader (Allgather).
const READ: u8 = 3;

/// The flag phase at which a rank's slice of its node's combination is in its slot
/// ([`node_sum_split`]; after [`PUT`], and a leader never posts it).
const SLICED: u8 = 3;

/// Where a leader exposes what its node's ranks read from it (Alltoall), in its slot.
const RESULT: i64 = 8;

/// The leader's index on its node.
const LEADER: i32 = 0;

/// This rank's place in a communicator that spans several nodes.
#[derive(Clone, Debug)]
pub struct Hier {
    pub layout: Arc<Layout>,
    /// This rank in the communicator.
    pub me: Rank,
}

impl Hier {
    fn node_of(&self, r: i32) -> i32 {
        self.layout.node_of[r as usize] as i32
    }
    fn local_of(&self, r: i32) -> i32 {
        self.layout.local_of[r as usize] as i32
    }
    /// This rank on its node.
    fn local(&self) -> Rank {
        let node = self.node_of(self.me.rank);
        Rank {
            rank: self.local_of(self.me.rank),
            size: self.layout.nodes[node as usize].len() as i32,
        }
    }
    fn is_leader(&self) -> bool {
        self.local().rank == LEADER
    }
    /// The ranks of node `k`, in order (the first is its leader).
    fn ranks_of(&self, k: i32) -> &[i32] {
        &self.layout.nodes[k as usize]
    }
    /// This node among the nodes (a leader's rank among the leaders).
    pub fn leaders(&self) -> Rank {
        Rank {
            rank: self.node_of(self.me.rank),
            size: self.layout.nodes.len() as i32,
        }
    }
}

/// Embeds the leaders' part `sub` (built for [`Hier::leaders`]) after `deps`.
fn leaders_part(
    b: &mut Builder,
    h: &Hier,
    sub: &Schedule,
    deps: &[u32],
    send: Addr,
    recv: Addr,
) -> u32 {
    b.embed(sub, deps, &h.layout.leaders(), send, recv)
}

/// Barrier: the node's ranks check in with their leader, the leaders run a barrier, each
/// leader lets its node go.
pub fn barrier(h: &Hier, lead: &Choice) -> Schedule {
    let mut b = Builder::new("shm:two-level");
    let c = b.claim();
    let p = b.post(PUT, &[c]);
    if h.is_leader() {
        let w = b.watch(ALL_PEERS, PUT, &[p]);
        let sub = barrier::build(lead, h.leaders());
        let x = leaders_part(&mut b, h, &sub, &[w], Addr::send(0), Addr::recv(0));
        let d = b.post(DONE, &[x]);
        b.release(&[d]);
    } else {
        let w = b.watch(LEADER, DONE, &[p]);
        b.release(&[w]);
    }
    b.finish()
}

/// Bcast of `data` (`bytes` bytes of signature) from `root`: the root's node reads the
/// root's slot, the root's leader sends to the other leaders, each of them hands it to
/// its node through its slot. Whoever fills a slot writes its size beside its flag, and a
/// reader whose count is smaller reports the truncation (MPI-4.0 §6.1; `shm::bcast`); the
/// leaders' messages report theirs as messages do.
pub fn bcast(sl: Slots, h: &Hier, lead: &Choice, data: Data, ti: &TypeInfo, root: i32) -> Schedule {
    let bytes = data.count * ti.size;
    let mut b = Builder::new("shm:two-level");
    let me = h.local();
    let root_local = h.local_of(root);
    let on_root_node = h.node_of(root) == h.leaders().rank;
    let sub = || bcast::build(lead, h.leaders(), data, ti, h.node_of(root));
    if h.me.rank == root {
        let c = b.claim();
        let cp = b.copy(data, sl.packed(me.rank, 0, bytes), &[c]);
        let cp = b.length(sl.length(me.rank), bytes, false, &[cp]);
        if me.rank == LEADER {
            let p = b.post(DONE, &[cp]);
            let x = leaders_part(&mut b, h, &sub(), &[], Addr::send(0), Addr::recv(0));
            b.release(&[p, x]);
        } else {
            let p = b.post(PUT, &[cp]);
            b.release(&[p]);
        }
    } else if on_root_node {
        // a rank that writes nothing into its cell claims nothing (see `Builder::claim`)
        let phase = if root_local == LEADER { DONE } else { PUT };
        let w = b.watch(root_local, phase, &[]);
        let cp = b.copy(sl.packed(root_local, 0, bytes), data, &[w]);
        let l = b.length(sl.length(root_local), bytes, true, &[w]);
        if me.rank == LEADER {
            let x = leaders_part(&mut b, h, &sub(), &[cp], Addr::send(0), Addr::recv(0));
            b.release(&[x, l]);
        } else {
            b.release(&[cp, l]);
        }
    } else if me.rank == LEADER {
        let c = b.claim();
        let x = leaders_part(&mut b, h, &sub(), &[], Addr::send(0), Addr::recv(0));
        let cp = b.copy(data, sl.packed(me.rank, 0, bytes), &[c, x]);
        let l = b.length(sl.length(me.rank), bytes, false, &[cp]);
        let p = b.post(DONE, &[l]);
        b.release(&[p]);
    } else {
        let w = b.watch(LEADER, DONE, &[]);
        let cp = b.copy(sl.packed(LEADER, 0, bytes), data, &[w]);
        let l = b.length(sl.length(LEADER), bytes, true, &[w]);
        b.release(&[cp, l]);
    }
    b.finish()
}

/// The most chunks the pipelined Bcast ([`bcast_pipelined`]) cuts its data into: each is a
/// phase of a leader's flag ([`CHUNK`] + its index).
const MAX_CHUNKS: i64 = 8;

/// The flag phase at which a leader of the pipelined Bcast has chunk 0 in its buffer
/// (chunk i: `CHUNK + i`).
const CHUNK: u8 = 1;

/// The flag phase at which a rank of the pipelined Bcast is done reading (past every
/// chunk's phase).
const READ_ALL: u8 = CHUNK + MAX_CHUNKS as u8;

/// The chunks the pipelined Bcast of `bytes` bytes takes: a slot's bytes each, up to
/// [`MAX_CHUNKS`] (then larger). The same on every rank (the slot and the signature's size
/// are).
pub fn bcast_chunks(sl: Slots, bytes: i64) -> i64 {
    super::ceil_div(bytes, sl.bytes().max(1)).clamp(1, MAX_CHUNKS)
}

/// The bytes of a chunk of the pipelined Bcast of `bytes` bytes (its leaders' algorithm is
/// chosen for this size).
pub fn bcast_chunk_bytes(sl: Slots, bytes: i64) -> i64 {
    super::ceil_div(bytes, bcast_chunks(sl, bytes))
}

/// Bcast of data larger than a slot (`data`: the buffer, `ti`: its datatype), pipelined,
/// with one copy inside a node (`super::single`: the node must allow CMA). The data, as
/// packed bytes (the buffer itself where its datatype is dense), is cut into
/// [`bcast_chunks`] chunks; the leaders broadcast each with their own schedule (from the
/// root's node's leader) and each leader announces every chunk as it arrives, so its
/// node's ranks read chunk i from its buffer while chunk i + 1 crosses the network. The
/// root exposes its buffer, and the ranks of its node read it from there (its leader chunk
/// by chunk, so the first chunk leaves the node early). A rank whose memory is read
/// returns once every reader is done ([`READ_ALL`]; MPI-4.0 §6.1: the buffer is the
/// caller's again). The sizes are checked as in [`bcast`].
pub fn bcast_pipelined(
    sl: Slots,
    h: &Hier,
    lead: &Choice,
    data: Data,
    ti: &TypeInfo,
    root: i32,
) -> Schedule {
    let mut b = Builder::new("shm:two-level-pipelined");
    let me = h.local();
    let root_local = h.local_of(root);
    let root_node = h.node_of(root);
    let on_root_node = root_node == h.leaders().rank;
    let c = b.claim();
    let pk = super::Packed::new(&mut b, data, ti);
    let k = bcast_chunks(sl, pk.bytes);
    let chunk = |i: i64| super::split(pk.bytes, k, i);
    let bytes_ti = TypeInfo {
        size: 1,
        lb: 0,
        extent: 1,
        true_lb: 0,
        true_extent: 1,
        contiguous: true,
    };
    // chunk i's leaders' part, on this leader's packed bytes (its own schedule: the choice
    // is the same for every chunk, whose sizes differ by at most a byte)
    let leaders = |b: &mut Builder, i: i64, deps: &[u32]| {
        let (off, n) = chunk(i);
        let piece = Data::new(Addr::recv(0), n, MPI_PACKED());
        let sub = bcast::build(lead, h.leaders(), piece, &bytes_ti, root_node);
        let at = pk.at.add(off);
        leaders_part(b, h, &sub, deps, at, at)
    };
    if h.me.rank == root {
        let packed = pk.pack(&mut b, &[c]);
        let e = b.expose(pk.at, sl.at(me.rank, 0), &packed);
        let l = b.length(sl.length(me.rank), pk.bytes, false, &[e]);
        let p = b.post(PUT, &[l]);
        let mut rest = vec![p];
        if me.rank == LEADER {
            for i in 0..k {
                rest.push(leaders(&mut b, i, &packed));
            }
        }
        rest.push(b.watch(ALL_PEERS, READ_ALL, &[p]));
        b.release(&rest);
    } else if on_root_node {
        // read from the root; its node's leader chunk by chunk, each sent on as it comes
        let w = b.watch(root_local, PUT, &[]);
        let mut reads = Vec::new();
        let mut rest = vec![b.length(sl.length(root_local), pk.bytes, true, &[w])];
        let pieces = if me.rank == LEADER { k } else { 1 };
        for i in 0..pieces {
            let (off, n) = if pieces == 1 { (0, pk.bytes) } else { chunk(i) };
            let f = b.fetch(
                root_local,
                sl.at(root_local, 0),
                off,
                pk.at.add(off),
                n,
                &[w],
            );
            reads.push(f);
            if me.rank == LEADER {
                rest.push(leaders(&mut b, i, &[f]));
            }
        }
        rest.extend(pk.unpack(&mut b, &reads));
        reads.push(c);
        rest.push(b.post(READ_ALL, &reads));
        b.release(&rest);
    } else if me.rank == LEADER {
        // each chunk announced as it arrives, in order (a flag only moves forward)
        let e = b.expose(pk.at, sl.at(LEADER, 0), &[c]);
        let mut last = b.length(sl.length(LEADER), pk.bytes, false, &[e]);
        let mut got = Vec::new();
        for i in 0..k {
            let x = leaders(&mut b, i, &[c]);
            got.push(x);
            last = b.post(CHUNK + i as u8, &[last, x]);
        }
        let mut rest = pk.unpack(&mut b, &got);
        rest.push(b.watch(ALL_PEERS, READ_ALL, &[last]));
        b.release(&rest);
    } else {
        let mut reads = Vec::new();
        let mut check = None;
        for i in 0..k {
            let (off, n) = chunk(i);
            let w = b.watch(LEADER, CHUNK + i as u8, &[]);
            if i == 0 {
                check = Some(b.length(sl.length(LEADER), pk.bytes, true, &[w]));
            }
            reads.push(b.fetch(LEADER, sl.at(LEADER, 0), off, pk.at.add(off), n, &[w]));
        }
        let mut rest = pk.unpack(&mut b, &reads);
        rest.extend(check);
        reads.push(c);
        rest.push(b.post(READ_ALL, &reads));
        b.release(&rest);
    }
    b.finish()
}

/// The flag phase at which a rank of the pipelined reduction ([`reduce_pipelined`]) has
/// reduced its slice of chunk 0 (chunk i: `SUMMED + i`); a leader's flag takes the same
/// values when it holds the reduction across nodes of the chunk.
const SUMMED: u8 = 2;

/// The flag phase at which a rank of the pipelined reduction has read every chunk of the
/// result it needs (past every chunk's phase).
const FETCHED: u8 = SUMMED + MAX_CHUNKS as u8;

/// The chunks the pipelined reduction of `red` takes: as the pipelined Bcast's
/// ([`bcast_chunks`]), and at most one per element.
pub fn reduce_chunks(sl: Slots, red: &Reduction) -> i64 {
    bcast_chunks(sl, red.bytes()).min(red.count.max(1))
}

/// The bytes of a chunk of the pipelined reduction of `red` (its leaders' algorithm is
/// chosen for this size).
pub fn reduce_chunk_bytes(sl: Slots, red: &Reduction) -> i64 {
    super::ceil_div(red.count, reduce_chunks(sl, red)) * red.ti.size
}

/// What the leaders of [`reduce_pipelined`] make of their nodes' sums, and who gets it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Across {
    /// Allreduce: every rank gets the whole result.
    All,
    /// Reduce: the root (a rank of the communicator) gets it.
    Root(i32),
    /// Reduce_scatter_block of blocks of this many elements (the reduction's count is the
    /// whole vector, every rank's block): every rank gets its block. Only where every
    /// node's ranks are consecutive (`Layout::blocks`), so that the vector's node order is
    /// its rank order; in one chunk (a chunk of the vector is not a reduce-scatter).
    Blocks(i64),
}

/// Reduce (to a root), Allreduce or Reduce_scatter_block (`across`) of a datatype without
/// holes larger than a slot, pipelined across nodes, with one copy inside a node
/// (`super::single`: the node must allow CMA). The elements are cut into [`reduce_chunks`]
/// chunks, each chunk into one slice per rank of the node. Every rank exposes its operand
/// and where its partial results go, and reduces its slice of each chunk of its node's
/// operands, in rank order, reading them where they lie ([`single::reduce_slice`]), and
/// says so chunk by chunk ([`SUMMED`]); the leader reads the node's slices of a chunk as
/// soon as they are there, and the leaders reduce (to the root's node), allreduce or
/// reduce-scatter (each node its ranks' blocks) the chunk with their own schedule while
/// their nodes sum the next. A leader with the result announces each chunk, and its node's
/// ranks (Reduce: the root) read what they get from the leader's memory meanwhile. A
/// node's operands are combined in rank order and the leaders' results in node order:
/// right for non-commutative operations where every node's ranks are consecutive
/// (`Layout::blocks`). A rank whose memory is read returns once its readers are done (a
/// leader sees every slice of the last chunk; a rank that reads the result says
/// [`FETCHED`]).
pub fn reduce_pipelined(
    sl: Slots,
    h: &Hier,
    lead: &Choice,
    red: &Reduction,
    inplace: bool,
    across: Across,
) -> Schedule {
    let mut b = Builder::new("shm:two-level-pipelined");
    let me = h.local();
    let (lo, ext, size) = (red.ti.true_lb, red.ti.extent, red.ti.size);
    let k = match across {
        Across::Blocks(_) => 1,
        _ => reduce_chunks(sl, red),
    };
    let chunk = |i: i64| super::split(red.count, k, i);
    // rank q's slice of chunk i: (first element, elements)
    let part = |i: i64, q: i32| {
        let (f, n) = chunk(i);
        let (g, m) = super::split(n, me.size as i64, q as i64);
        (f + g, m)
    };
    let node = h.leaders().rank;
    let root = match across {
        Across::Root(r) => Some(r),
        _ => None,
    };
    // whether this rank reads the result from its leader
    let reader = me.rank != LEADER && root.is_none_or(|r| r == h.me.rank);
    // where this rank's sums (a leader's: its node's, then the chunks' results) go: the
    // receive buffer where it holds the whole result (the root, or everyone in Allreduce)
    let acc = match across {
        Across::All => Addr::recv(0),
        Across::Root(r) if r == h.me.rank => Addr::recv(0),
        _ => b.scratch_for(red.count, &red.ti),
    };
    let c = b.claim();
    let mut owns = Vec::new();
    let mut ready = vec![c];
    for i in 0..k {
        let (f, n) = part(i, me.rank);
        let (own, deps) = single::own_operand(&mut b, red, inplace, f, n, &[c]);
        owns.push(own);
        ready.extend(deps);
    }
    ready.sort_unstable();
    ready.dedup();
    let e0 = b.expose(operand(inplace).add(lo), sl.at(me.rank, 0), &ready);
    let e1 = b.expose(acc.add(lo), sl.at(me.rank, RESULT), &[c]);
    let p = b.post(PUT, &[e0, e1]);
    let sums: Vec<u32> = (0..k)
        .map(|i| match part(i, me.rank) {
            (_, 0) => p,
            (f, n) => {
                let into = acc.add(f * ext);
                let own = owns[i as usize];
                single::reduce_slice(&mut b, sl, me, red, (f, n), me.size, own, into, p)
            }
        })
        .collect();
    let phase = |i: i64| SUMMED + i as u8;
    let mut said = p;
    if me.rank != LEADER {
        let mut posts = Vec::new();
        for (i, &s) in sums.iter().enumerate() {
            said = b.post(phase(i as i64), &[said, s]);
            posts.push(said);
        }
        if !reader {
            // the leader has read every slice once it holds the last chunk's result
            let w = b.watch(LEADER, phase(k - 1), &[said]);
            b.release(&[w]);
            return b.finish();
        }
        let mut reads = vec![said];
        for i in 0..k {
            // (Reduce_scatter_block: this rank's block, among its node's at the start)
            let (f, n, to) = match across {
                Across::Blocks(n) => (me.rank as i64 * n, n, 0),
                _ => {
                    let (f, n) = chunk(i);
                    (f, n, f)
                }
            };
            let w = b.watch(LEADER, phase(i), &[posts[i as usize]]);
            reads.push(if n > 0 {
                let into = Addr::recv(lo + to * ext);
                b.fetch(LEADER, sl.at(LEADER, RESULT), f * ext, into, n * size, &[w])
            } else {
                w
            });
        }
        let d = b.post(FETCHED, &reads);
        b.release(&[d]);
        return b.finish();
    }
    let mut rest = Vec::new();
    for i in 0..k {
        let (f, n) = chunk(i);
        let w = b.watch(ALL_PEERS, phase(i), &[p]);
        let mut got = vec![sums[i as usize], w];
        for q in 1..me.size {
            let (g, m) = part(i, q);
            if m > 0 {
                let into = acc.add(lo + g * ext);
                got.push(b.fetch(q, sl.at(q, RESULT), g * ext, into, m * size, &[w]));
            }
        }
        let x = if n > 0 {
            let at = acc.add(f * ext);
            let piece = Reduction { count: n, ..*red };
            match across {
                Across::All => {
                    let sub = reduce::allreduce(lead, h.leaders(), &piece, true);
                    leaders_part(&mut b, h, &sub, &got, at, at)
                }
                Across::Root(r) => {
                    let at_root = node == h.node_of(r);
                    let sub = reduce::reduce(lead, h.leaders(), &piece, at_root, h.node_of(r));
                    // (a leader that is not the root's sends from `acc`; its receive
                    // buffer is not used, MPI-4.0 §6.9.1)
                    let recv = if at_root { at } else { Addr::recv(0) };
                    leaders_part(&mut b, h, &sub, &got, at, recv)
                }
                Across::Blocks(n) => {
                    // in place: this node's blocks at the start of `acc`, then this rank's
                    let counts: Vec<i64> = (0..h.leaders().size)
                        .map(|j| h.ranks_of(j).len() as i64 * n)
                        .collect();
                    let ours = Reduction {
                        count: counts[node as usize],
                        ..*red
                    };
                    let sub = reduce_scatter::build(lead, h.leaders(), &ours, &counts, true);
                    let x = leaders_part(&mut b, h, &sub, &got, acc, acc);
                    let mine = Data::new(acc, n, red.dt);
                    rest.push(b.copy(mine, Data::new(Addr::recv(0), n, red.dt), &[x]));
                    x
                }
            }
        } else {
            b.nop(&got)
        };
        said = b.post(phase(i), &[said, x]);
    }
    // the ranks that read the result from this leader
    rest.push(match root {
        None => b.watch(ALL_PEERS, FETCHED, &[said]),
        Some(r) if h.node_of(r) == node && r != h.me.rank => {
            b.watch(h.local_of(r), FETCHED, &[said])
        }
        Some(_) => said,
    });
    b.release(&rest);
    b.finish()
}

/// A leader's combination of its node's operands, in rank order, into `into` (after `w`,
/// the watch of every operand).
fn node_sum(b: &mut Builder, sl: Slots, me: Rank, red: &Reduction, into: Addr, w: u32) -> u32 {
    combine(b, sl, red, 0..me.size, 0, red.count, into, &[w]).unwrap_or(w)
}

/// A leader hands the result at `from` to its node: into its slot, then [`DONE`].
fn to_node(b: &mut Builder, sl: Slots, red: &Reduction, from: Addr, after: u32) -> u32 {
    let cp = b.copy(
        red.data(from),
        sl.typed(LEADER, red, 0, red.count),
        &[after],
    );
    b.post(DONE, &[cp])
}

/// A rank takes its leader's result into its receive buffer.
fn from_leader(b: &mut Builder, sl: Slots, red: &Reduction, after: u32) -> u32 {
    let w = b.watch(LEADER, DONE, &[after]);
    b.copy(
        sl.typed(LEADER, red, 0, red.count),
        red.data(Addr::recv(0)),
        &[w],
    )
}

/// Reduce to `root`: each leader combines its node's operands (shared as in
/// [`allreduce`]), the leaders reduce to the root's leader, which hands the result to the
/// root through its slot if it is not the root itself.
pub fn reduce(
    sl: Slots,
    h: &Hier,
    lead: &Choice,
    red: &Reduction,
    inplace: bool,
    root: i32,
) -> Schedule {
    let mut b = Builder::new("shm:two-level");
    let me = h.local();
    let c = b.claim();
    let p = put_operand(&mut b, sl, me, red, operand(inplace), red.count, c);
    let lroot = h.node_of(root);
    let split = split_node(me.size, red);
    if me.rank != LEADER {
        // (its slice in scratch: only the root has a receive buffer)
        let part = if split {
            let into = b.scratch_for(red.count, &red.ti);
            node_sum_split(&mut b, sl, me, red, into, p)
        } else {
            p
        };
        let last = if h.me.rank == root {
            from_leader(&mut b, sl, red, part)
        } else {
            part
        };
        b.release(&[last]);
        return b.finish();
    }
    let (acc, end) = if h.me.rank == root {
        (Addr::recv(0), None)
    } else {
        let acc = b.scratch_for(red.count, &red.ti);
        (acc, Some(acc))
    };
    let sum = if split {
        node_sum_split(&mut b, sl, me, red, acc, p)
    } else {
        let w = b.watch(ALL_PEERS, PUT, &[p]);
        node_sum(&mut b, sl, me, red, acc, w)
    };
    // the leaders' reduce: at their root in place (in the receive buffer, or for a root
    // that is not its node's leader in `acc`), elsewhere from `acc`
    let at_root = h.leaders().rank == lroot;
    let sub = reduce::reduce(lead, h.leaders(), red, at_root, lroot);
    let recv = if at_root { acc } else { Addr::recv(0) };
    let x = leaders_part(&mut b, h, &sub, &[sum], acc, recv);
    let last = match end {
        Some(acc) if at_root => to_node(&mut b, sl, red, acc, x),
        _ => x,
    };
    b.release(&[last]);
    b.finish()
}

/// Whether the ranks of a node of `ppn` share its combination, each its slice of every
/// operand, rather than its leader doing all of it: the leader's part grows with
/// `ppn` x the message, which the scaling simulation showed dominating two-level
/// reductions of large messages at many ranks per node (README, "Scale by simulation").
fn split_node(ppn: i32, red: &Reduction) -> bool {
    ppn >= 3 && red.count >= ppn as i64 && red.bytes() >= 2048
}

/// The combination of a node's operands shared by its ranks ([`split_node`]): each rank
/// combines its slice of every rank's operand (in rank order) into `into` at the slice's
/// place, a rank that is not the leader puts it back over its own operand's slice in its
/// slot (which no other rank reads) and says [`SLICED`], and the leader gathers the others'
/// slices from their slots into `into`. Returns what the leader's sum (or the rank's part)
/// ends with.
fn node_sum_split(
    b: &mut Builder,
    sl: Slots,
    me: Rank,
    red: &Reduction,
    into: Addr,
    p: u32,
) -> u32 {
    let w = b.watch(ALL_PEERS, PUT, &[p]);
    let ext = red.ti.extent;
    let (first, n) = slice(red.count, me.size, me.rank);
    let mine = into.add(first * ext);
    let last = combine(b, sl, red, 0..me.size, first, n, mine, &[w]).unwrap_or(w);
    if me.rank != LEADER {
        let back = b.copy(
            Data::new(mine, n, red.dt),
            sl.typed(me.rank, red, first, n),
            &[last],
        );
        return b.post(SLICED, &[back]);
    }
    let got = b.watch(ALL_PEERS, SLICED, &[last]);
    let mut all = vec![got];
    for k in 1..me.size {
        let (f, m) = slice(red.count, me.size, k);
        all.push(b.copy(
            sl.typed(k, red, f, m),
            Data::new(into.add(f * ext), m, red.dt),
            &[got],
        ));
    }
    b.nop(&all)
}

/// Allreduce: each leader combines its node's operands (with its node's ranks, each a
/// slice, for large messages on many ranks: [`split_node`]), the leaders allreduce, each
/// leader hands the result to its node through its slot.
pub fn allreduce(sl: Slots, h: &Hier, lead: &Choice, red: &Reduction, inplace: bool) -> Schedule {
    let mut b = Builder::new("shm:two-level");
    let me = h.local();
    let c = b.claim();
    let p = put_operand(&mut b, sl, me, red, operand(inplace), red.count, c);
    let split = split_node(me.size, red);
    let last = if me.rank == LEADER {
        let sum = if split {
            node_sum_split(&mut b, sl, me, red, Addr::recv(0), p)
        } else {
            let w = b.watch(ALL_PEERS, PUT, &[p]);
            node_sum(&mut b, sl, me, red, Addr::recv(0), w)
        };
        let sub = reduce::allreduce(lead, h.leaders(), red, true);
        let recv = Addr::recv(0);
        let x = leaders_part(&mut b, h, &sub, &[sum], Addr::send(0), recv);
        to_node(&mut b, sl, red, recv, x)
    } else if split {
        let part = node_sum_split(&mut b, sl, me, red, Addr::recv(0), p);
        from_leader(&mut b, sl, red, part)
    } else {
        from_leader(&mut b, sl, red, p)
    };
    b.release(&[last]);
    b.finish()
}

/// Reduce_scatter_block (`red.count` elements a block, one block per rank): each leader
/// combines its node's operands (every rank's whole vector, rank order) into a vector in
/// node order (the blocks of node 0's ranks, then node 1's, ...), the leaders
/// reduce-scatter it so that each receives its node's blocks, and each rank reads its block
/// from its leader's slot. One message per leader and step crosses the network, with a
/// node's blocks together, where a flat algorithm sends each rank's.
pub fn reduce_scatter_block(
    sl: Slots,
    h: &Hier,
    lead: &Choice,
    red: &Reduction,
    inplace: bool,
) -> Schedule {
    let mut b = Builder::new("shm:two-level");
    let me = h.local();
    let n = h.me.size as i64;
    let count = red.count;
    let c = b.claim();
    let p = put_operand(&mut b, sl, me, red, operand(inplace), n * count, c);
    if me.rank != LEADER {
        let w = b.watch(LEADER, DONE, &[p]);
        let mine = sl.typed(LEADER, red, me.rank as i64 * count, count);
        let cp = b.copy(mine, red.data(Addr::recv(0)), &[w]);
        b.release(&[cp]);
        return b.finish();
    }
    let w = b.watch(ALL_PEERS, PUT, &[p]);
    let acc = b.scratch_for(n * count, &red.ti);
    let blocks = |k: i32| h.ranks_of(k).len() as i64 * count;
    let nodes = h.leaders().size;
    // the node-order vector: in rank order already where every node's ranks are
    // consecutive, else block by block (a commutative operation: `hier_serves`)
    let sums: Vec<u32> = if h.layout.blocks() {
        combine(&mut b, sl, red, 0..me.size, 0, n * count, acc, &[w])
            .into_iter()
            .collect()
    } else {
        let order = (0..nodes).flat_map(|k| h.ranks_of(k).iter().copied());
        order
            .enumerate()
            .filter_map(|(pos, r)| {
                let into = acc.add(pos as i64 * count * red.ti.extent);
                combine(
                    &mut b,
                    sl,
                    red,
                    0..me.size,
                    r as i64 * count,
                    count,
                    into,
                    &[w],
                )
            })
            .collect()
    };
    // the leaders' reduce-scatter, in place: this node's blocks at the start of `acc`
    let counts: Vec<i64> = (0..nodes).map(blocks).collect();
    let ours = counts[h.leaders().rank as usize];
    let lred = Reduction {
        count: ours,
        ..*red
    };
    let sub = reduce_scatter::build(lead, h.leaders(), &lred, &counts, true);
    let x = leaders_part(&mut b, h, &sub, &sums, acc, acc);
    let own = b.copy(red.data(acc), red.data(Addr::recv(0)), &[x]);
    let mut last = vec![own];
    if me.size > 1 {
        let cp = b.copy(
            Data::new(acc, ours, red.dt),
            sl.typed(LEADER, red, 0, ours),
            &[x],
        );
        last.push(b.post(DONE, &[cp]));
    }
    b.release(&last);
    b.finish()
}

/// The root's messages with every node but its own (`root_node`): each node's blocks of
/// `blocks` as one message, sent to its leader (`send`) or received from it.
fn other_nodes(
    b: &mut Builder,
    h: &Hier,
    blocks: &[Block],
    root_node: i32,
    send: bool,
) -> Vec<u32> {
    (0..h.leaders().size)
        .filter(|&k| k != root_node)
        .map(|k| {
            let ranks = h.ranks_of(k);
            let data = super::multi(b, ranks.iter().map(|&r| &blocks[r as usize]));
            if send {
                b.send(data, ranks[0], &[])
            } else {
                b.recv(data, ranks[0], &[])
            }
        })
        .collect()
}

/// Gather of `block`-byte blocks to `root` (`send`: this rank's, `None` in place at the
/// root; `recv`: the root's blocks). The root reads its own node's slots; every other
/// node's leader sends the node's blocks, straight from their slots, as one message to the
/// root, which receives them into their places.
pub fn gather(
    sl: Slots,
    h: &Hier,
    send: Option<Block>,
    recv: &[Block],
    root: i32,
    block: i64,
) -> Schedule {
    let mut b = Builder::new("shm:two-level");
    let me = h.local();
    let root_node = h.node_of(root);
    if h.me.rank == root {
        // the root only reads its node's slots: no claim
        let mut done = Vec::new();
        if let Some(s) = send {
            done.push(b.copy(s.data, recv[root as usize].data, &[]));
        }
        let w = b.watch(ALL_PEERS, PUT, &[]);
        done.push(w);
        for &r in h.ranks_of(root_node) {
            if r != root {
                let from = sl.packed(h.local_of(r), 0, block);
                done.push(b.copy(from, recv[r as usize].data, &[w]));
            }
        }
        done.extend(other_nodes(&mut b, h, recv, root_node, false));
        b.release(&done);
        return b.finish();
    }
    let c = b.claim();
    let mine = send.map_or(Vec::new(), |s| {
        vec![b.copy(s.data, sl.packed(me.rank, 0, block), &[c])]
    });
    let p = b.post(PUT, &[&mine[..], &[c]].concat());
    let mut done = vec![p];
    if me.rank == LEADER && h.leaders().rank != root_node {
        let w = b.watch(ALL_PEERS, PUT, &[p]);
        // (one rank on the node: `blocks` gives its slot as plain data)
        let parts: Vec<_> = (0..me.size)
            .map(|l| (sl.at(l, 0), block, MPI_PACKED(), 1))
            .collect();
        let from = b.blocks(&parts);
        done.push(b.send(from, root, &[w]));
    }
    b.release(&done);
    b.finish()
}

/// Scatter of `block`-byte blocks from `root` (`send`: the root's blocks; `recv`: this
/// rank's, `None` in place at the root). The root puts its own node's blocks into its slot
/// and sends each other node's blocks as one message to its leader, which receives them
/// into its slot; every rank reads its block from the slot of its node's source.
pub fn scatter(
    sl: Slots,
    h: &Hier,
    send: &[Block],
    recv: Option<Block>,
    root: i32,
    block: i64,
) -> Schedule {
    let mut b = Builder::new("shm:two-level");
    let me = h.local();
    let root_node = h.node_of(root);
    let on_root_node = h.leaders().rank == root_node;
    // where this rank's node finds the blocks: the root's slot, or its leader's
    let source = if on_root_node {
        h.local_of(root)
    } else {
        LEADER
    };
    if h.me.rank == root {
        let c = b.claim();
        let mut copies = vec![c];
        for (l, &r) in h.ranks_of(root_node).iter().enumerate() {
            if r != root {
                let to = sl.packed(me.rank, l as i64 * block, block);
                copies.push(b.copy(send[r as usize].data, to, &[c]));
            }
        }
        let p = b.post(PUT, &copies);
        let mut done = vec![p];
        done.extend(other_nodes(&mut b, h, send, root_node, true));
        if let Some(rv) = recv {
            done.push(b.copy(send[root as usize].data, rv.data, &[]));
        }
        b.release(&done);
        return b.finish();
    }
    let mut done = Vec::new();
    let ready = if me.rank == LEADER && !on_root_node {
        let c = b.claim();
        let into = sl.packed(LEADER, 0, me.size as i64 * block);
        let r = b.recv(into, root, &[c]);
        let p = b.post(PUT, &[r]);
        done.push(p);
        p
    } else {
        b.watch(source, PUT, &[])
    };
    done.push(ready);
    if let Some(rv) = recv {
        let from = sl.packed(source, me.rank as i64 * block, block);
        done.push(b.copy(from, rv.data, &[ready]));
    }
    b.release(&done);
    b.finish()
}

/// Gather beyond the slot (arguments as [`gather`]), with one copy inside a node
/// (`super::single`: the node must allow CMA). Every rank but the root exposes its block;
/// the root reads its own node's from their ranks' memory, and every other node's leader
/// reads its node's into one message (rank order) to the root, which receives it into the
/// blocks' places. A rank whose block is read returns once its reader is done.
pub fn gather_single(
    sl: Slots,
    h: &Hier,
    send: Option<Block>,
    recv: &[Block],
    root: i32,
    block: i64,
) -> Schedule {
    let mut b = Builder::new("shm:two-level-single-copy");
    let me = h.local();
    let node = h.leaders().rank;
    let root_node = h.node_of(root);
    let c = b.claim();
    if h.me.rank == root {
        let mut reads = vec![c];
        let mut rest = Vec::new();
        if let Some(s) = send {
            rest.push(b.copy(s.data, recv[root as usize].data, &[]));
        }
        for &r in h.ranks_of(root_node).iter().filter(|&&r| r != root) {
            let l = h.local_of(r);
            let w = b.watch(l, PUT, &[]);
            let (f, last) = single::fetch_into(&mut b, sl, l, 0, &recv[r as usize], &[w]);
            reads.push(f);
            rest.push(last);
        }
        rest.extend(other_nodes(&mut b, h, recv, root_node, false));
        rest.push(b.post(single::READ, &reads));
        b.release(&rest);
        return b.finish();
    }
    if me.rank != LEADER || node == root_node {
        // read by the root on its node, else by the leader
        let reader = if node == root_node {
            h.local_of(root)
        } else {
            LEADER
        };
        let blocks: Vec<Block> = send.into_iter().collect();
        let (src, ds) = single::source(&mut b, &blocks, false, &[c]);
        let p = single::expose(&mut b, sl, me, src, &ds);
        let w = b.watch(reader, single::READ, &[p]);
        b.release(&[w]);
        return b.finish();
    }
    let all = Data::new(
        Addr::scratch(b.scratch(me.size as i64 * block)),
        me.size as i64 * block,
        MPI_PACKED(),
    );
    let mut got = vec![c];
    if let Some(s) = send {
        got.push(b.copy(s.data, all.with_count(block), &[]));
    }
    for l in 1..me.size {
        let w = b.watch(l, PUT, &[]);
        let at = all.addr.add(l as i64 * block);
        got.push(b.fetch(l, sl.at(l, 0), 0, at, block, &[w]));
    }
    let d = b.post(single::READ, &got);
    let s = b.send(all, root, &got);
    b.release(&[d, s]);
    b.finish()
}

/// Scatter beyond the slot (arguments as [`scatter`]), with one copy inside a node
/// (`super::single`: the node must allow CMA). The root exposes its own node's blocks and
/// sends every other node's as one message (rank order) to its leader, which exposes
/// them; every rank reads its block from its node's source. A rank whose memory is read
/// returns once its readers are done.
pub fn scatter_single(
    sl: Slots,
    h: &Hier,
    send: &[Block],
    recv: Option<Block>,
    root: i32,
    block: i64,
) -> Schedule {
    let mut b = Builder::new("shm:two-level-single-copy");
    let me = h.local();
    let node = h.leaders().rank;
    let root_node = h.node_of(root);
    let c = b.claim();
    if h.me.rank == root {
        let ours: Vec<Block> = h
            .ranks_of(root_node)
            .iter()
            .map(|&r| send[r as usize])
            .collect();
        let (src, ds) = single::source(&mut b, &ours, false, &[c]);
        let p = single::expose(&mut b, sl, me, src, &ds);
        let mut after = vec![b.watch(ALL_PEERS, single::READ, &[p])];
        after.extend(other_nodes(&mut b, h, send, root_node, true));
        if let Some(rv) = recv {
            after.push(b.copy(send[root as usize].data, rv.data, &[]));
        }
        b.release(&after);
        return b.finish();
    }
    // (a Scatter's rank other than the root has a receive buffer)
    let Some(rv) = recv else {
        b.release(&[c]);
        return b.finish();
    };
    if me.rank == LEADER && node != root_node {
        let n = me.size as i64 * block;
        let all = Data::new(Addr::scratch(b.scratch(n)), n, MPI_PACKED());
        let r = b.recv(all, root, &[c]);
        let e = b.expose(all.addr, sl.at(LEADER, 0), &[r]);
        let p = b.post(PUT, &[e]);
        let own = b.copy(all.with_count(block), rv.data, &[r]);
        let w = b.watch(ALL_PEERS, single::READ, &[p]);
        b.release(&[own, w]);
        return b.finish();
    }
    let source = if node == root_node {
        h.local_of(root)
    } else {
        LEADER
    };
    let w = b.watch(source, PUT, &[]);
    let off = me.rank as i64 * block;
    let (f, last) = single::fetch_into(&mut b, sl, source, off, &rv, &[w]);
    let d = b.post(single::READ, &[f, c]);
    b.release(&[last, d]);
    b.finish()
}

/// Allgather and Allgatherv (`send`: this rank's block, `None` in place; `recv`: every
/// rank's), with one copy inside a node (`algo::single`: the node must allow CMA). The
/// leader reads its node's blocks from their ranks' memory into its receive buffer, sends
/// them to every other leader as one message and receives each other node's likewise; its
/// node's ranks then read every other block from its buffer.
pub fn allgather(sl: Slots, h: &Hier, send: Option<Block>, recv: &[Block]) -> Schedule {
    let mut b = Builder::new("shm:two-level");
    let me = h.local();
    let at = h.me.rank as usize;
    let own = send.map(|s| b.copy(s.data, recv[at].data, &[]));
    let c = b.claim();
    if me.rank != LEADER {
        let (src, ds) = single::source(&mut b, &[send.unwrap_or(recv[at])], false, &[c]);
        let p = single::expose(&mut b, sl, me, src, &ds);
        // the leader is done with this rank's block once its node's result is out
        let w = b.watch(LEADER, DONE, &[p]);
        let mut reads = vec![w];
        let mut rest: Vec<u32> = own.into_iter().collect();
        // where the leader's blocks lie, one after another
        let from = single::offsets(recv);
        for (r, blk) in recv
            .iter()
            .enumerate()
            .filter(|&(r, x)| r != at && !x.empty())
        {
            let (f, last) = single::fetch_into(&mut b, sl, LEADER, from[r], blk, &[w]);
            reads.push(f);
            rest.push(last);
        }
        rest.push(b.post(READ, &reads));
        b.release(&rest);
        return b.finish();
    }
    let node = h.leaders().rank;
    let mut got: Vec<u32> = own.into_iter().collect();
    for &r in h
        .ranks_of(node)
        .iter()
        .filter(|&&r| r != h.me.rank && !recv[r as usize].empty())
    {
        let l = h.local_of(r);
        let w = b.watch(l, PUT, &[]);
        got.push(single::fetch_into(&mut b, sl, l, 0, &recv[r as usize], &[w]).1);
    }
    // one message each way per other node (their blocks are disjoint from this node's)
    let mut all = got.clone();
    let out = super::multi(&mut b, h.ranks_of(node).iter().map(|&r| &recv[r as usize]));
    for k in (0..h.leaders().size).filter(|&k| k != node) {
        let ranks = h.ranks_of(k);
        all.push(b.send(out, ranks[0], &got));
        let to = super::multi(&mut b, ranks.iter().map(|&r| &recv[r as usize]));
        all.push(b.recv(to, ranks[0], &[]));
    }
    let (src, ds) = single::source(&mut b, recv, false, &all);
    let e = b.expose(src, sl.at(LEADER, 0), &ds);
    let p = b.post(DONE, &[e, c]);
    let w = b.watch(ALL_PEERS, READ, &[p]);
    b.release(&[w]);
    b.finish()
}

/// Alltoall of `block`-byte blocks (`send`: the blocks for every rank, `recv`: from every
/// rank; in place, `recv` holds both), node-aggregated with one copy inside a node
/// (`super::single`: the node must allow CMA). Every rank exposes its blocks; the ranks of a
/// node read their blocks from each other directly; the leader reads its node's blocks for
/// each other node into one message to that node's leader, receives that node's blocks
/// for its own ranks likewise, and its ranks read theirs from it. One message per pair of
/// nodes crosses the network where a flat algorithm sends one per pair of ranks.
pub fn alltoall(
    sl: Slots,
    h: &Hier,
    send: &[Block],
    recv: &[Block],
    inplace: bool,
    block: i64,
) -> Schedule {
    let mut b = Builder::new("shm:two-level");
    let me = h.local();
    let at = h.me.rank as usize;
    let node = h.leaders().rank;
    let mine = h.ranks_of(node).to_vec();
    let nl = mine.len() as i64;
    let c = b.claim();
    // in place, every rank overwrites what the others read: they read a copy
    let (src, ds) = single::source(&mut b, if inplace { recv } else { send }, inplace, &[c]);
    let p = single::expose(&mut b, sl, me, src, &ds);
    let mut reads = Vec::new();
    let mut rest = Vec::new();
    if !inplace {
        rest.push(b.copy(send[at].data, recv[at].data, &[]));
    }
    for &q in mine.iter().filter(|&&q| q != h.me.rank) {
        let l = h.local_of(q);
        let w = b.watch(l, PUT, &[p]);
        let (f, last) = single::fetch_into(
            &mut b,
            sl,
            l,
            h.me.rank as i64 * block,
            &recv[q as usize],
            &[w],
        );
        reads.push(f);
        rest.push(last);
    }
    // the other nodes' blocks for this node: in the leader's scratch, node by node, each
    // node's as [its rank][this node's rank] blocks
    let others: Vec<i32> = (0..h.leaders().size).filter(|&k| k != node).collect();
    let mut inbound = Vec::new();
    let mut off = 0i64;
    for &k in &others {
        inbound.push(off);
        off += h.ranks_of(k).len() as i64 * nl * block;
    }
    let in_bytes = off;
    let done = if me.rank == LEADER {
        let in_base = b.scratch(in_bytes);
        let mut outs = Vec::new();
        let mut arrived = Vec::new();
        for (&k, &koff) in others.iter().zip(&inbound) {
            let theirs = h.ranks_of(k);
            let nk = theirs.len() as i64;
            let out = b.scratch(nl * nk * block);
            let mut got = Vec::new();
            for (i, &q) in mine.iter().enumerate() {
                let l = h.local_of(q);
                let w = (q != h.me.rank).then(|| b.watch(l, PUT, &[p]));
                for (j, &d) in theirs.iter().enumerate() {
                    let to = Addr::scratch(out + (i as i64 * nk + j as i64) * block);
                    got.push(match w {
                        Some(w) => b.fetch(l, sl.at(l, 0), d as i64 * block, to, block, &[w]),
                        None => b.copy(
                            Data::new(src.add(d as i64 * block), block, MPI_PACKED()),
                            Data::new(to, block, MPI_PACKED()),
                            &ds,
                        ),
                    });
                }
            }
            let msg = Data::new(Addr::scratch(out), nl * nk * block, MPI_PACKED());
            outs.extend(got.iter().copied());
            rest.push(b.send(msg, theirs[0], &got));
            let into = Data::new(Addr::scratch(in_base + koff), nk * nl * block, MPI_PACKED());
            arrived.push(b.recv(into, theirs[0], &[]));
        }
        let x = b.expose(Addr::scratch(in_base), sl.at(LEADER, RESULT), &arrived);
        outs.push(x);
        outs.push(p);
        let d = b.post(DONE, &outs);
        // the leader's own blocks from the other nodes
        for (&k, &koff) in others.iter().zip(&inbound) {
            for (i, &s) in h.ranks_of(k).iter().enumerate() {
                let from = in_base + koff + (i as i64 * nl + me.rank as i64) * block;
                let blk = &recv[s as usize];
                rest.push(b.copy(
                    Data::new(Addr::scratch(from), block, MPI_PACKED()),
                    blk.data,
                    &[d],
                ));
            }
        }
        d
    } else {
        let w = b.watch(LEADER, DONE, &[p]);
        for (&k, &koff) in others.iter().zip(&inbound) {
            for (i, &s) in h.ranks_of(k).iter().enumerate() {
                let from = koff + (i as i64 * nl + me.rank as i64) * block;
                let at = sl.at(LEADER, RESULT);
                let (f, last) =
                    single::fetch_exposed(&mut b, at, LEADER, from, &recv[s as usize], &[w]);
                reads.push(f);
                rest.push(last);
            }
        }
        w
    };
    reads.push(done);
    let r = b.post(READ, &reads);
    let w = b.watch(ALL_PEERS, READ, &[r]);
    rest.push(w);
    b.release(&rest);
    b.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pipelined_bcast_cuts_slots_and_its_phases_fit_a_flag() {
        let sl = Slots {
            cell: 1064,
            data: 64,
        };
        assert_eq!(bcast_chunks(sl, 100), 1);
        assert_eq!(bcast_chunks(sl, 4900), 5);
        assert_eq!(bcast_chunks(sl, 100_000), MAX_CHUNKS);
        assert_eq!(bcast_chunk_bytes(sl, 100_000), 12_500);
        // every chunk's phase and the readers' below the abandoned instance's
        assert!(READ_ALL as u32 <= crate::core::transport::node::PHASES - 2);
        assert!(FETCHED as u32 <= crate::core::transport::node::PHASES - 2);
    }

    #[test]
    fn the_pipelined_reduction_has_a_chunk_per_element_at_most() {
        let sl = Slots {
            cell: 1064,
            data: 64,
        };
        let red = |count| Reduction {
            count,
            dt: crate::platform::abi::MPI_DOUBLE(),
            ti: crate::core::dtype::info(crate::platform::abi::MPI_DOUBLE()).unwrap(),
            op: crate::platform::abi::MPI_SUM(),
            commutative: true,
        };
        // 100 KB: 8 chunks of 1563 doubles (the last ones a double fewer)
        assert_eq!(reduce_chunks(sl, &red(12_500)), MAX_CHUNKS);
        assert_eq!(reduce_chunk_bytes(sl, &red(12_500)), 1563 * 8);
        // 2 elements of a huge size would make 8 chunks: 2
        let mut big = red(2);
        big.ti.size = 4000;
        assert_eq!(reduce_chunks(sl, &big), 2);
    }
}

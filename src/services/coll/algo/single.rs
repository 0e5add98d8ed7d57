//! Layer: services. May use: core, platform.
//!
//! Single-copy algorithms on the node segment, for data larger than a slot: a rank that
//! has data exposes where it lies (an address in its slot, then its flag), and each rank
//! that needs it reads it straight from that rank's memory with one `process_vm_readv`
//! (CMA), into its own buffer. One copy instead of copy-in-copy-out's two, and no slot
//! limits the size. A rank whose memory is read waits until every reader has said it is
//! done (phase [`READ`]) before it returns: the buffer is the caller's again after that
//! (MPI-4.0 §6.1: a blocking collective returns once its buffers may be used).
//!
//! Data that is not one run of bytes (a datatype with holes, blocks not one after another)
//! is copied into the run's scratch first, and a reader whose own buffer has holes reads
//! into scratch and unpacks; in-place Alltoall reads from a copy, since each rank
//! overwrites its buffer while the others read it.
//!
//! Reductions (datatypes without holes: the operands are read in place; one with holes:
//! staged copies, [`Staging`]) are split: rank r
//! reads slice r of every other operand and reduces the slices in rank order, so every
//! byte is read once, non-commutative operations are right and every rank gets the same
//! bits; Allreduce then reads the other slices from their ranks' receive buffers, and
//! Reduce_scatter(_block)'s slices are its blocks. Scan's rank r reads the whole operands
//! of the ranks below it.
//!
//! The v and w forms: Gatherv's and Allgatherv's readers know every block's size (the
//! root, or everyone); in Scatterv and Alltoallv(w) only the sender knows where each block
//! lies, so it exposes one address per rank.

use super::shm::{PUT, Slots};
use super::{Block, Rank, Reduction};
use crate::core::sched::{ALL_PEERS, ActionId, Addr, Builder, Data, Schedule};
use crate::platform::abi::MPI_PACKED;

/// The flag phase at which a rank is done reading the memory the others exposed.
pub const READ: u8 = 2;

const NAME: &str = "shm:single-copy";

/// Where a block's bytes start when they are one run in type map order (no holes, and
/// not a permutation: both ends' datatypes may differ, only the signatures match).
fn contiguous(blk: &Block) -> Option<Addr> {
    blk.dense.then_some(Addr {
        base: blk.data.addr.base,
        off: blk.lo as isize,
    })
}

/// Where each of `blocks` starts when they lie one after another: the sums of the sizes
/// before it.
pub(super) fn offsets(blocks: &[Block]) -> Vec<i64> {
    blocks
        .iter()
        .scan(0, |at, x| {
            let o = *at;
            *at += x.bytes;
            Some(o)
        })
        .collect()
}

/// The bytes of `blocks`, one after another (at [`offsets`]), for the others to read:
/// where they already lie so, unless `copy`, else copied into scratch. Returns the address
/// and what must be done before it is exposed.
pub(super) fn source(
    b: &mut Builder,
    blocks: &[Block],
    copy: bool,
    deps: &[ActionId],
) -> (Addr, Vec<ActionId>) {
    let at = offsets(blocks);
    // (an empty block may lie anywhere)
    let start = blocks.iter().find(|x| !x.empty()).and_then(contiguous);
    if let Some(first) = start.filter(|_| !copy) {
        let run = blocks
            .iter()
            .zip(&at)
            .all(|(x, &o)| x.empty() || contiguous(x) == Some(first.add(o)));
        if run {
            return (first, deps.to_vec());
        }
    }
    let off = b.scratch(blocks.iter().map(|x| x.bytes).sum());
    let mut done: Vec<ActionId> = Vec::new();
    for (x, &o) in blocks.iter().zip(&at).filter(|(x, _)| !x.empty()) {
        let to = Data::new(Addr::scratch(off + o), x.bytes, MPI_PACKED());
        done.push(b.copy(x.data, to, deps));
    }
    if done.is_empty() {
        done = deps.to_vec();
    }
    (Addr::scratch(off), done)
}

/// Reads `dst.bytes` bytes from rank `peer`, `off` bytes into what it exposed, into `dst`
/// (through scratch when `dst` has holes). Returns the read and the last action.
pub(super) fn fetch_into(
    b: &mut Builder,
    sl: Slots,
    peer: i32,
    off: i64,
    dst: &Block,
    deps: &[ActionId],
) -> (ActionId, ActionId) {
    fetch_exposed(b, sl.at(peer, 0), peer, off, dst, deps)
}

/// [`fetch_into`] of what `peer` exposed at `at` (an address in its slot).
pub(super) fn fetch_exposed(
    b: &mut Builder,
    at: Addr,
    peer: i32,
    off: i64,
    dst: &Block,
    deps: &[ActionId],
) -> (ActionId, ActionId) {
    match contiguous(dst) {
        Some(to) => {
            let f = b.fetch(peer, at, off, to, dst.bytes, deps);
            (f, f)
        }
        None => {
            let s = Addr::scratch(b.scratch(dst.bytes));
            let f = b.fetch(peer, at, off, s, dst.bytes, deps);
            let u = b.copy(Data::new(s, dst.bytes, MPI_PACKED()), dst.data, &[f]);
            (f, u)
        }
    }
}

/// Exposes the bytes at `src` in this rank's slot and publishes it; returns the post.
pub(super) fn expose(
    b: &mut Builder,
    sl: Slots,
    me: Rank,
    src: Addr,
    deps: &[ActionId],
) -> ActionId {
    let e = b.expose(src, sl.at(me.rank, 0), deps);
    b.post(PUT, &[e])
}

/// The end of a rank whose memory `peer` (every other rank: `ALL_PEERS`) reads until it
/// reaches `phase`: waits for that, then releases.
fn wait_readers(b: &mut Builder, peer: i32, phase: u8, after: &[ActionId]) {
    let w = b.watch(peer, phase, after);
    let mut done = after.to_vec();
    done.push(w);
    b.release(&done);
}

/// The end of a reader: says its reads (`reads`) are over, then releases once `rest` is
/// done too.
fn done_reading(b: &mut Builder, reads: &[ActionId], rest: &[ActionId]) -> ActionId {
    let c = b.claim();
    let mut deps = reads.to_vec();
    deps.push(c);
    let d = b.post(READ, &deps);
    let mut all = rest.to_vec();
    all.push(d);
    b.release(&all)
}

/// Bcast of `data` from `root`: every other rank reads the root's buffer.
pub fn bcast(sl: Slots, me: Rank, data: Block, root: i32) -> Schedule {
    let mut b = Builder::new(NAME);
    if me.rank == root {
        let c = b.claim();
        let (src, ds) = source(&mut b, &[data], false, &[c]);
        let p = expose(&mut b, sl, me, src, &ds);
        wait_readers(&mut b, ALL_PEERS, READ, &[p]);
    } else {
        let w = b.watch(root, PUT, &[]);
        let (f, last) = fetch_into(&mut b, sl, root, 0, &data, &[w]);
        done_reading(&mut b, &[f], &[last]);
    }
    b.finish()
}

/// Gather and Gatherv: `send` is this rank's block (`None`: in place at the root), `recv`
/// the root's blocks; the root reads every other rank's send buffer.
pub fn gather(sl: Slots, me: Rank, send: Option<Block>, recv: &[Block], root: i32) -> Schedule {
    let mut b = Builder::new(NAME);
    if me.rank != root {
        let c = b.claim();
        let blocks: Vec<Block> = send.into_iter().collect();
        let (src, ds) = source(&mut b, &blocks, false, &[c]);
        let p = expose(&mut b, sl, me, src, &ds);
        wait_readers(&mut b, root, READ, &[p]);
        return b.finish();
    }
    let mut reads = Vec::new();
    let mut rest = Vec::new();
    if let Some(s) = send {
        rest.push(b.copy(s.data, recv[root as usize].data, &[]));
    }
    // (Gatherv: a rank with nothing to send is not read)
    for (r, blk) in recv
        .iter()
        .enumerate()
        .filter(|&(r, x)| r as i32 != root && !x.empty())
    {
        let w = b.watch(r as i32, PUT, &[]);
        let (f, last) = fetch_into(&mut b, sl, r as i32, 0, blk, &[w]);
        reads.push(f);
        rest.push(last);
    }
    done_reading(&mut b, &reads, &rest);
    b.finish()
}

/// Scatter: `send` is the root's blocks (all of `block` bytes), `recv` this rank's block
/// (`None`: in place at the root); every other rank reads its block from the root.
pub fn scatter(
    sl: Slots,
    me: Rank,
    send: &[Block],
    recv: Option<Block>,
    root: i32,
    block: i64,
) -> Schedule {
    let mut b = Builder::new(NAME);
    if me.rank == root {
        let c = b.claim();
        let (src, ds) = source(&mut b, send, false, &[c]);
        let p = expose(&mut b, sl, me, src, &ds);
        let mut after = vec![p];
        if let Some(rv) = recv {
            after.push(b.copy(send[root as usize].data, rv.data, &[]));
        }
        wait_readers(&mut b, ALL_PEERS, READ, &after);
    } else if let Some(rv) = recv {
        let w = b.watch(root, PUT, &[]);
        let (f, last) = fetch_into(&mut b, sl, root, me.rank as i64 * block, &rv, &[w]);
        done_reading(&mut b, &[f], &[last]);
    }
    b.finish()
}

/// Where rank `q` (Scatterv's root, or any rank in Alltoallv) exposes its block for rank
/// `r`: one address per rank, `r` words into its slot (the slot holds one per rank:
/// `Ctx::shm_decide`).
fn block_address(sl: Slots, q: i32, r: i32) -> Addr {
    sl.at(q, 8 * r as i64)
}

/// Exposes `blocks[r]` for every other rank r at its [`block_address`] in this rank's slot
/// (through scratch where it has holes, or where `copy`), once `c` is done, and publishes
/// them; returns the post.
fn expose_each(
    b: &mut Builder,
    sl: Slots,
    me: Rank,
    blocks: &[Block],
    copy: bool,
    c: ActionId,
) -> ActionId {
    let mut ready = vec![c];
    for (r, blk) in blocks
        .iter()
        .enumerate()
        .filter(|&(r, x)| r as i32 != me.rank && !x.empty())
    {
        let (src, ds) = source(b, core::slice::from_ref(blk), copy, &[c]);
        ready.push(b.expose(src, block_address(sl, me.rank, r as i32), &ds));
    }
    b.post(PUT, &ready)
}

/// Scatterv: `send` is the root's blocks (any sizes, anywhere in its buffer), `recv` this
/// rank's block (`None`: in place at the root). Only the root knows where each block lies:
/// it exposes one address per rank, and every other rank reads its block from there.
pub fn scatterv(sl: Slots, me: Rank, send: &[Block], recv: Option<Block>, root: i32) -> Schedule {
    let mut b = Builder::new(NAME);
    if me.rank == root {
        let c = b.claim();
        let p = expose_each(&mut b, sl, me, send, false, c);
        let mut after = vec![p];
        if let Some(rv) = recv {
            after.push(b.copy(send[root as usize].data, rv.data, &[]));
        }
        wait_readers(&mut b, ALL_PEERS, READ, &after);
        return b.finish();
    }
    // a rank with nothing to receive still says it is done, for the root's wait
    let (reads, rest) = match recv.filter(|x| !x.empty()) {
        Some(rv) => {
            let w = b.watch(root, PUT, &[]);
            let at = block_address(sl, root, me.rank);
            let (f, last) = fetch_exposed(&mut b, at, root, 0, &rv, &[w]);
            (vec![f], vec![last])
        }
        None => (Vec::new(), Vec::new()),
    };
    done_reading(&mut b, &reads, &rest);
    b.finish()
}

/// The part every rank of Allgather and Alltoall(v, w) shares: reads `recv[r]` from every
/// other rank r (`from(r)`: where in r's slot its address lies, and the offset from it)
/// once it has published (after this rank's own `published`), says so, and waits until
/// every rank is done reading this one's; `own`: this rank's own block's copy.
fn read_all(
    b: &mut Builder,
    me: Rank,
    published: ActionId,
    recv: &[Block],
    from: impl Fn(i32) -> (Addr, i64),
    own: Option<ActionId>,
) {
    let mut reads = Vec::new();
    let mut rest: Vec<ActionId> = own.into_iter().collect();
    for (r, blk) in recv
        .iter()
        .enumerate()
        .filter(|&(r, x)| r as i32 != me.rank && !x.empty())
    {
        let w = b.watch(r as i32, PUT, &[published]);
        let (at, off) = from(r as i32);
        let (f, last) = fetch_exposed(b, at, r as i32, off, blk, &[w]);
        reads.push(f);
        rest.push(last);
    }
    if reads.is_empty() {
        reads.push(published);
    }
    let d = b.post(READ, &reads);
    let w = b.watch(ALL_PEERS, READ, &[d]);
    rest.push(w);
    b.release(&rest);
}

/// Alltoallv and Alltoallw: `send` holds the block for every rank (in place: `recv` does),
/// any sizes and types, anywhere in the buffer. Only the sender knows where its block for
/// rank r lies: it exposes one address per rank (as Scatterv's root), and rank r reads its
/// block of every other rank from there. In place, each rank overwrites what the others
/// read: they read copies.
pub fn alltoallv(sl: Slots, me: Rank, send: &[Block], recv: &[Block], inplace: bool) -> Schedule {
    let mut b = Builder::new(NAME);
    let c = b.claim();
    let p = expose_each(
        &mut b,
        sl,
        me,
        if inplace { recv } else { send },
        inplace,
        c,
    );
    let own = (!inplace).then(|| {
        let me = me.rank as usize;
        b.copy(send[me].data, recv[me].data, &[])
    });
    read_all(
        &mut b,
        me,
        p,
        recv,
        |r| (block_address(sl, r, me.rank), 0),
        own,
    );
    b.finish()
}

/// Allgather and Allgatherv: `send` is this rank's block (`None`: in place, it is
/// `recv[me]`), `recv` every rank's block.
pub fn allgather(sl: Slots, me: Rank, send: Option<Block>, recv: &[Block]) -> Schedule {
    let mut b = Builder::new(NAME);
    let c = b.claim();
    let mine = send.unwrap_or(recv[me.rank as usize]);
    let (src, ds) = source(&mut b, &[mine], false, &[c]);
    let own = send.map(|s| b.copy(s.data, recv[me.rank as usize].data, &[]));
    let p = expose(&mut b, sl, me, src, &ds);
    read_all(&mut b, me, p, recv, |r| (sl.at(r, 0), 0), own);
    b.finish()
}

/// Alltoall: `send` holds the blocks for every rank (in place: `recv` does), each of
/// `block` bytes; rank r reads block r of every other rank's.
pub fn alltoall(
    sl: Slots,
    me: Rank,
    send: &[Block],
    recv: &[Block],
    inplace: bool,
    block: i64,
) -> Schedule {
    let mut b = Builder::new(NAME);
    let c = b.claim();
    // in place, each rank overwrites the blocks the others read: they read a copy
    let (src, ds) = source(&mut b, if inplace { recv } else { send }, inplace, &[c]);
    let own = (!inplace).then(|| {
        let me = me.rank as usize;
        b.copy(send[me].data, recv[me].data, &[])
    });
    // rank r's block is r blocks into what each rank exposes
    let p = expose(&mut b, sl, me, src, &ds);
    read_all(
        &mut b,
        me,
        p,
        recv,
        |r| (sl.at(r, 0), me.rank as i64 * block),
        own,
    );
    b.finish()
}

/// The flag phase at which a rank's reduced slice is ready (its reads of the others'
/// operands are then over).
const REDUCED: u8 = 2;
/// The flag phase at which a rank has read every reduced slice it needs.
const GOT: u8 = 3;

/// Where this rank's reduced slice goes, as offsets of its slot: its operand's address at
/// 0, its slice's at [`RESULT`].
const RESULT: i64 = 8;

/// The reduction of slice `first..first + n` (elements) of the operands of ranks
/// `0..upto`, in rank order, into `acc` (typed): the others' slices are read into scratch,
/// this rank's is at `own`. Returns the last action (the reads included); `upto` is at
/// least 1.
#[allow(clippy::too_many_arguments)]
pub(super) fn reduce_slice(
    b: &mut Builder,
    sl: Slots,
    me: Rank,
    red: &Reduction,
    (first, n): (i64, i64),
    upto: i32,
    own: Addr,
    acc: Addr,
    after: ActionId,
) -> ActionId {
    let (lo, ext) = (red.ti.true_lb, red.ti.extent);
    let top = upto - 1;
    // the operand the reduction starts from, read straight into `acc`: the last one, or,
    // where the operation commutes (any order, MPI-4.0 §6.9.1), another rank's rather than
    // this rank's own, which would have to be copied there
    let base = if red.commutative && top == me.rank && upto > 1 {
        top - 1
    } else {
        top
    };
    // operand j's slice: (typed address, the action that brought it)
    let mut x: Vec<(Addr, ActionId)> = Vec::with_capacity(upto as usize);
    for j in 0..upto {
        if j == me.rank {
            x.push((own, after));
            continue;
        }
        let s = if j == base {
            acc
        } else {
            b.scratch_for(n, &red.ti)
        };
        let w = b.watch(j, PUT, &[after]);
        // (each operand is exposed from its true lower bound, so slice `first` starts
        // `first` extents after it)
        let f = b.fetch(j, sl.at(j, 0), first * ext, s.add(lo), red.ti.span(n), &[w]);
        x.push((s, f));
    }
    let (at, got) = x[base as usize];
    let mut last = if base == me.rank {
        b.copy(
            red.data(at).with_count(n),
            red.data(acc).with_count(n),
            &[got],
        )
    } else {
        got
    };
    // the others from the last down: acc = x_j op acc, so rank order where it matters
    for (_, &(src, got)) in x
        .iter()
        .enumerate()
        .rev()
        .filter(|&(j, _)| j != base as usize)
    {
        last = b.reduce(src, acc, n, red.dt, red.op, &[last, got]);
    }
    last
}

/// This rank's operand for the slice (`first`, `n`): where it lies, or, in place (where the
/// receive buffer is overwritten by the result), a copy in scratch.
pub(super) fn own_operand(
    b: &mut Builder,
    red: &Reduction,
    inplace: bool,
    first: i64,
    n: i64,
    deps: &[ActionId],
) -> (Addr, Vec<ActionId>) {
    let at = super::shm::operand(inplace).add(first * red.ti.extent);
    if !inplace || n == 0 {
        return (at, deps.to_vec());
    }
    let s = b.scratch_for(n, &red.ti);
    let cp = b.copy(red.data(at).with_count(n), red.data(s).with_count(n), deps);
    (s, vec![cp])
}

/// Whether [`allreduce`] and [`reduce`] serve this datatype: one without holes (read in
/// place), or one with holes whose elements do not interleave (each element's bytes lie
/// within its extent, MPI-4.0 §5.1.7), so that a run of elements is one span of bytes
/// that a staged copy holds whole.
pub fn reduction_serves(ti: &crate::core::dtype::TypeInfo) -> bool {
    ti.dense() || (ti.extent > 0 && ti.true_extent <= ti.extent)
}

/// Where a single-copy reduction's operands and results lie for the others to read: a
/// datatype without holes in place (the operand, the receive buffer); one with holes in
/// staged copies in scratch, whole spans of elements (the holes there are the run's own
/// memory, so a span is read as one run of bytes, and the program's buffer, whose holes
/// may be anywhere, is only touched by typed copies).
struct Staging {
    /// Where operand element 0 lies for the others (typed address).
    operand: Addr,
    /// Where result element 0 lies for the others (typed address).
    result: Addr,
    /// This rank's operand for its slice.
    own: Addr,
    /// The action after which `operand` and `own` hold their values.
    ready: Vec<ActionId>,
}

impl Staging {
    /// Claims the region and stages as the datatype needs; `result`: whether this rank
    /// has a result for the others to read (not a Reduce's rank other than the root).
    fn new(
        b: &mut Builder,
        red: &Reduction,
        inplace: bool,
        (first, n): (i64, i64),
        result: bool,
    ) -> Self {
        let c = b.claim();
        let ext = red.ti.extent;
        if red.ti.dense() {
            let (own, ready) = own_operand(b, red, inplace, first, n, &[c]);
            return Staging {
                operand: super::shm::operand(inplace),
                result: Addr::recv(0),
                own,
                ready,
            };
        }
        let st = b.scratch_for(red.count, &red.ti);
        let cp = b.copy(red.data(super::shm::operand(inplace)), red.data(st), &[c]);
        Staging {
            operand: st,
            result: if result {
                b.scratch_for(red.count, &red.ti)
            } else {
                Addr::recv(0)
            },
            own: st.add(first * ext),
            ready: vec![cp],
        }
    }

    /// Exposes the whole operand at offset 0 of this rank's slot.
    fn expose(&self, b: &mut Builder, sl: Slots, me: Rank, red: &Reduction) -> ActionId {
        let at = self.operand.add(red.ti.true_lb);
        b.expose(at, sl.at(me.rank, 0), &self.ready)
    }

    /// The result's elements copied to the receive buffer, where they were staged (in
    /// scratch, not the receive buffer itself).
    fn unstage(&self, b: &mut Builder, red: &Reduction, deps: &[ActionId]) -> Vec<ActionId> {
        if self.result != Addr::recv(0) && red.count > 0 {
            vec![b.copy(red.data(self.result), red.data(Addr::recv(0)), deps)]
        } else {
            deps.to_vec()
        }
    }
}

/// Allreduce: every rank exposes its operand; rank r reads slice r of every other operand,
/// reduces them in rank order (so non-commutative operations are right and every rank gets
/// the same bits) into slice r of its result, and then reads the other slices from their
/// ranks' results. Each byte of each operand is copied once (a datatype with holes: into a
/// staged copy first, [`Staging`]).
pub fn allreduce(sl: Slots, me: Rank, red: &Reduction, inplace: bool) -> Schedule {
    let mut b = Builder::new(NAME);
    let (lo, ext) = (red.ti.true_lb, red.ti.extent);
    let (first, n) = super::split(red.count, me.size as i64, me.rank as i64);
    let st = Staging::new(&mut b, red, inplace, (first, n), true);
    let e0 = st.expose(&mut b, sl, me, red);
    let e1 = b.expose(st.result.add(lo), sl.at(me.rank, RESULT), &st.ready);
    let p = b.post(PUT, &[e0, e1]);
    let last = if n > 0 {
        reduce_slice(
            &mut b,
            sl,
            me,
            red,
            (first, n),
            me.size,
            st.own,
            st.result.add(first * ext),
            p,
        )
    } else {
        p
    };
    let r = b.post(REDUCED, &[last]);
    let mut reads = Vec::new();
    for q in (0..me.size).filter(|&q| q != me.rank) {
        let (f, m) = super::split(red.count, me.size as i64, q as i64);
        if m == 0 {
            continue;
        }
        let w = b.watch(q, REDUCED, &[r]);
        let at = st.result.add(lo + f * ext);
        reads.push(b.fetch(q, sl.at(q, RESULT), f * ext, at, red.ti.span(m), &[w]));
    }
    reads.push(r);
    let g = b.post(GOT, &reads);
    let out = st.unstage(&mut b, red, &[g]);
    wait_readers(&mut b, ALL_PEERS, GOT, &out);
    b.finish()
}

/// Reduce: as [`allreduce`], but a rank other than the root reduces its slice into
/// scratch, and the root reads the slices into its result.
pub fn reduce(sl: Slots, me: Rank, red: &Reduction, inplace: bool, root: i32) -> Schedule {
    let mut b = Builder::new(NAME);
    let (lo, ext) = (red.ti.true_lb, red.ti.extent);
    let (first, n) = super::split(red.count, me.size as i64, me.rank as i64);
    let st = Staging::new(&mut b, red, inplace, (first, n), me.rank == root);
    let e0 = st.expose(&mut b, sl, me, red);
    let p = b.post(PUT, &[e0]);
    let acc = if me.rank == root {
        st.result.add(first * ext)
    } else {
        b.scratch_for(n, &red.ti)
    };
    let mut last = if n > 0 {
        reduce_slice(&mut b, sl, me, red, (first, n), me.size, st.own, acc, p)
    } else {
        p
    };
    if me.rank != root {
        last = b.expose(acc.add(lo), sl.at(me.rank, RESULT), &[last]);
    }
    let r = b.post(REDUCED, &[last]);
    if me.rank != root {
        // the root says GOT once every rank is done reading every operand and it has read
        // every slice: this rank's operand and scratch are free then
        wait_readers(&mut b, root, GOT, &[r]);
        return b.finish();
    }
    let mut reads = vec![r];
    for q in (0..me.size).filter(|&q| q != me.rank) {
        let (f, m) = super::split(red.count, me.size as i64, q as i64);
        let w = b.watch(q, REDUCED, &[r]);
        if m > 0 {
            let at = st.result.add(lo + f * ext);
            reads.push(b.fetch(q, sl.at(q, RESULT), 0, at, red.ti.span(m), &[w]));
        } else {
            reads.push(w);
        }
    }
    let g = b.post(GOT, &reads);
    let out = st.unstage(&mut b, red, &[g]);
    b.release(&out);
    b.finish()
}

/// Reduce_scatter and Reduce_scatter_block: every rank exposes its operand (the blocks of
/// `counts`, one after another); rank r reads block r of every other operand and reduces
/// them in rank order into its receive buffer. Each byte of each operand is read once.
pub fn reduce_scatter(
    sl: Slots,
    me: Rank,
    red: &Reduction,
    counts: &[i64],
    inplace: bool,
) -> Schedule {
    let first: i64 = counts[..me.rank as usize].iter().sum();
    let n = counts[me.rank as usize];
    let whole = counts.iter().sum();
    reduce_own(sl, me, red, inplace, whole, (first, n), me.size)
}

/// Scan and Exscan (`exclusive`): every rank exposes its operand; rank r reads the whole
/// operands of ranks 0..r and reduces them, with its own for Scan, in rank order into its
/// receive buffer (Exscan's rank 0 leaves it untouched, MPI-4.0 §6.11.2).
pub fn scan(sl: Slots, me: Rank, red: &Reduction, inplace: bool, exclusive: bool) -> Schedule {
    let upto = if exclusive { me.rank } else { me.rank + 1 };
    reduce_own(sl, me, red, inplace, red.count, (0, red.count), upto)
}

/// The reductions whose result is this rank's alone: exposes this rank's operand (`whole`
/// elements), reduces elements `first..first + n` of the operands of ranks `0..upto` in rank order into the
/// receive buffer, and waits until every rank is done reading its operand. In place the
/// receive buffer holds the operand the others read: the result goes to scratch and is
/// copied there once every rank is done. A datatype with holes is exposed from a staged
/// copy and reduced in scratch ([`Staging`]'s reasons), copied to the receive buffer as
/// soon as it is complete.
fn reduce_own(
    sl: Slots,
    me: Rank,
    red: &Reduction,
    inplace: bool,
    whole: i64,
    (first, n): (i64, i64),
    upto: i32,
) -> Schedule {
    let mut b = Builder::new(NAME);
    let c = b.claim();
    let dense = red.ti.dense();
    let (operand, ready) = if dense {
        (super::shm::operand(inplace), c)
    } else {
        let st = b.scratch_for(whole, &red.ti);
        let from = red.data(super::shm::operand(inplace)).with_count(whole);
        (st, b.copy(from, red.data(st).with_count(whole), &[c]))
    };
    let e = b.expose(operand.add(red.ti.true_lb), sl.at(me.rank, 0), &[ready]);
    let p = b.post(PUT, &[e]);
    let acc = if inplace || !dense {
        b.scratch_for(n, &red.ti)
    } else {
        Addr::recv(0)
    };
    let any = n > 0 && upto > 0;
    let last = if any {
        let own = operand.add(first * red.ti.extent);
        reduce_slice(&mut b, sl, me, red, (first, n), upto, own, acc, p)
    } else {
        p
    };
    let r = b.post(REDUCED, &[last]);
    let w = b.watch(ALL_PEERS, REDUCED, &[r]);
    let mut done = vec![w];
    if acc != Addr::recv(0) && any {
        // staged, the receive buffer is no one's operand: the result goes there at once
        let after = if dense { w } else { last };
        let to = red.data(Addr::recv(0)).with_count(n);
        done.push(b.copy(red.data(acc).with_count(n), to, &[after]));
    }
    b.release(&done);
    b.finish()
}

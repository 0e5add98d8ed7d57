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
//! lies, so it exposes one address per rank. Their blocks differ in size and no rank knows
//! them all, so each block takes its own way: through the sender's slot (copy in, copy
//! out) where it fits ([`Inline`]), by its address where not. Sender and reader know the
//! block's size alike (its type signatures match, MPI-4.0 §6.1), so they choose alike, and
//! a sender waits only for the readers of what it exposed.

use super::shm::{PUT, Slots};
use super::{Block, Rank, Reduction};
use crate::core::sched::{ALL_PEERS, ActionId, Addr, Builder, Data, Schedule};
use crate::platform::abi::MPI_PACKED;

/// The flag phase at which a rank is done reading the memory the others exposed.
pub const READ: u8 = 2;

const NAME: &str = "shm:single-copy";

/// The name of a schedule of a v or w form none of whose blocks this rank exposes or
/// reads by address.
const INLINE_NAME: &str = "shm:copy-in-out";

/// How a v or w form's blocks travel: a block of up to `max` bytes (below
/// `SHIM_SHM_SINGLE_COPY`) through its sender's slot where the slot's layout has room
/// for it, any other by its address. An empty block does not travel.
#[derive(Clone, Copy, Debug)]
pub struct Inline {
    pub max: i64,
}

impl Inline {
    /// Whether `blk` goes through the slot (or nowhere) when `room` bytes of the slot are
    /// its place.
    fn fits(self, blk: &Block, room: i64) -> bool {
        blk.empty() || blk.bytes <= self.max.min(room)
    }
}

/// Where Scatterv's root and each rank of Alltoallv(w) put a block for rank r in its slot:
/// the addresses first (one word per rank, [`block_address`]), then an equal share per
/// rank. Returns (where the shares start, a share's bytes).
fn shares(sl: Slots, n: i32) -> (i64, i64) {
    let words = 8 * n as i64;
    (words, ((sl.bytes() - words).max(0) / n as i64) & !7)
}

/// Where a reader finds a block: copied into the sender's slot (what to copy out), or
/// exposed (where in the sender's slot its address lies, and the offset from it).
enum Src {
    Slot(Data),
    Exposed(Addr, i64),
}

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
    // the root's size beside its address: a receiver whose count is smaller reports the
    // truncation (`shm::bcast`)
    if me.rank == root {
        let c = b.claim();
        let (src, ds) = source(&mut b, &[data], false, &[c]);
        let l = b.length(sl.length(root), data.bytes, false, &ds);
        let p = expose(&mut b, sl, me, src, &[l]);
        wait_readers(&mut b, ALL_PEERS, READ, &[p]);
    } else {
        let w = b.watch(root, PUT, &[]);
        let l = b.length(sl.length(root), data.bytes, true, &[w]);
        let (f, last) = fetch_into(&mut b, sl, root, 0, &data, &[w]);
        done_reading(&mut b, &[f, l], &[last]);
    }
    b.finish()
}

/// Gather and Gatherv: `send` is this rank's block (`None`: in place at the root), `recv`
/// the root's blocks; the root reads every other rank's block from its slot where it fits
/// there ([`Inline`]), else from its send buffer.
pub fn gather(
    sl: Slots,
    me: Rank,
    send: Option<Block>,
    recv: &[Block],
    root: i32,
    inline: Inline,
) -> Schedule {
    let fits = |x: &Block| inline.fits(x, sl.bytes());
    if me.rank != root {
        match send {
            // copied in: the root copies it out, and this rank need not wait for that
            Some(s) if fits(&s) => {
                let mut b = Builder::new(INLINE_NAME);
                let c = b.claim();
                let mut deps = vec![c];
                if !s.empty() {
                    deps = vec![b.copy(s.data, sl.packed(me.rank, 0, s.bytes), &[c])];
                }
                let p = b.post(PUT, &deps);
                b.release(&[p]);
                return b.finish();
            }
            _ => {
                let mut b = Builder::new(NAME);
                let c = b.claim();
                let blocks: Vec<Block> = send.into_iter().collect();
                let (src, ds) = source(&mut b, &blocks, false, &[c]);
                let p = expose(&mut b, sl, me, src, &ds);
                wait_readers(&mut b, root, READ, &[p]);
                return b.finish();
            }
        }
    }
    let mut b = Builder::new(INLINE_NAME);
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
        if fits(blk) {
            rest.push(b.copy(sl.packed(r as i32, 0, blk.bytes), blk.data, &[w]));
        } else {
            let (f, last) = fetch_into(&mut b, sl, r as i32, 0, blk, &[w]);
            reads.push(f);
            rest.push(last);
        }
    }
    if reads.is_empty() {
        // nothing read from the others' memory: nobody waits for this rank, which writes
        // nothing into its cell
        b.release(&rest);
    } else {
        b.rename(NAME);
        done_reading(&mut b, &reads, &rest);
    }
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

/// Puts `blocks[r]` for every other rank r where it reads it, once `c` is done, and
/// publishes them; returns the post. A block that fits its share of this rank's slot
/// ([`shares`]) is copied there; any other is exposed at its [`block_address`] (through
/// scratch where it has holes, or where `copy`).
fn put_each(
    b: &mut Builder,
    sl: Slots,
    me: Rank,
    blocks: &[Block],
    copy: bool,
    inline: Inline,
    c: ActionId,
) -> ActionId {
    let (start, share) = shares(sl, me.size);
    let mut ready = vec![c];
    for (r, blk) in blocks
        .iter()
        .enumerate()
        .filter(|&(r, x)| r as i32 != me.rank && !x.empty())
    {
        if inline.fits(blk, share) {
            let to = sl.packed(me.rank, start + r as i64 * share, blk.bytes);
            ready.push(b.copy(blk.data, to, &[c]));
        } else {
            let (src, ds) = source(b, core::slice::from_ref(blk), copy, &[c]);
            ready.push(b.expose(src, block_address(sl, me.rank, r as i32), &ds));
        }
    }
    b.post(PUT, &ready)
}

/// Where rank `me` finds its block `blk` from rank `q` that [`put_each`] put.
fn put_by(sl: Slots, q: i32, me: Rank, blk: &Block, inline: Inline) -> Src {
    let (start, share) = shares(sl, me.size);
    if inline.fits(blk, share) {
        Src::Slot(sl.packed(q, start + me.rank as i64 * share, blk.bytes))
    } else {
        Src::Exposed(block_address(sl, q, me.rank), 0)
    }
}

/// Scatterv: `send` is the root's blocks (any sizes, anywhere in its buffer), `recv` this
/// rank's block (`None`: in place at the root). Only the root knows where each block lies:
/// it puts each in its slot or exposes its address ([`put_each`]), and every other rank
/// reads its block from there.
pub fn scatterv(
    sl: Slots,
    me: Rank,
    send: &[Block],
    recv: Option<Block>,
    root: i32,
    inline: Inline,
) -> Schedule {
    let (_, share) = shares(sl, me.size);
    if me.rank == root {
        // the ranks that read the root's memory, and only they, say when they are done
        let readers: Vec<i32> = (0..me.size)
            .filter(|&r| r != root && !inline.fits(&send[r as usize], share))
            .collect();
        let mut b = Builder::new(if readers.is_empty() {
            INLINE_NAME
        } else {
            NAME
        });
        let c = b.claim();
        let p = put_each(&mut b, sl, me, send, false, inline, c);
        let mut after = vec![p];
        if let Some(rv) = recv {
            after.push(b.copy(send[root as usize].data, rv.data, &[]));
        }
        wait_for(&mut b, me, &readers, &after);
        return b.finish();
    }
    let Some(rv) = recv.filter(|x| !x.empty()) else {
        let mut b = Builder::new(INLINE_NAME);
        b.release(&[]);
        return b.finish();
    };
    let src = put_by(sl, root, me, &rv, inline);
    let mut b = Builder::new(match src {
        Src::Slot(_) => INLINE_NAME,
        Src::Exposed(..) => NAME,
    });
    let w = b.watch(root, PUT, &[]);
    match src {
        Src::Slot(from) => {
            let cp = b.copy(from, rv.data, &[w]);
            b.release(&[cp]);
        }
        Src::Exposed(at, off) => {
            let (f, last) = fetch_exposed(&mut b, at, root, off, &rv, &[w]);
            done_reading(&mut b, &[f], &[last]);
        }
    }
    b.finish()
}

/// The end of a rank whose memory the ranks `readers` read: waits until each has said it
/// is done (all the others: one watch), then releases once `after` is done too.
fn wait_for(b: &mut Builder, me: Rank, readers: &[i32], after: &[ActionId]) {
    match readers.len() {
        0 => {
            b.release(after);
        }
        n if n + 1 == me.size as usize => wait_readers(b, ALL_PEERS, READ, after),
        _ => {
            let mut done = after.to_vec();
            done.extend(readers.iter().map(|&r| b.watch(r, READ, after)));
            b.release(&done);
        }
    }
}

/// The part every rank of Allgather(v) and Alltoall(v, w) shares: reads `recv[r]` from
/// every other rank r (from `from(r)`) once it has published (after this rank's own
/// `published`), says so where it read any rank's memory, and waits until the ranks that
/// read this one's (`readers`) are done; `own`: this rank's own block's copy.
fn read_all(
    b: &mut Builder,
    me: Rank,
    published: ActionId,
    recv: &[Block],
    from: impl Fn(i32) -> Src,
    readers: &[i32],
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
        match from(r as i32) {
            Src::Slot(src) => rest.push(b.copy(src, blk.data, &[w])),
            Src::Exposed(at, off) => {
                let (f, last) = fetch_exposed(b, at, r as i32, off, blk, &[w]);
                reads.push(f);
                rest.push(last);
            }
        }
    }
    if !reads.is_empty() {
        rest.push(b.post(READ, &reads));
    }
    rest.push(published);
    wait_for(b, me, readers, &rest);
}

/// Alltoallv and Alltoallw: `send` holds the block for every rank (in place: `recv` does),
/// any sizes and types, anywhere in the buffer. Only the sender knows where its block for
/// rank r lies: it puts it in its slot or exposes its address (as Scatterv's root), and
/// rank r reads its block of every other rank from there. In place, each rank overwrites
/// what the others read: they read copies.
pub fn alltoallv(
    sl: Slots,
    me: Rank,
    send: &[Block],
    recv: &[Block],
    inplace: bool,
    inline: Inline,
) -> Schedule {
    let out = if inplace { recv } else { send };
    let (_, share) = shares(sl, me.size);
    let far = |x: &Block| !inline.fits(x, share);
    let readers: Vec<i32> = (0..me.size)
        .filter(|&r| r != me.rank && far(&out[r as usize]))
        .collect();
    let reads_far = (0..me.size).any(|r| r != me.rank && far(&recv[r as usize]));
    let mut b = Builder::new(if readers.is_empty() && !reads_far {
        INLINE_NAME
    } else {
        NAME
    });
    let c = b.claim();
    let p = put_each(&mut b, sl, me, out, inplace, inline, c);
    let own = (!inplace).then(|| {
        let me = me.rank as usize;
        b.copy(send[me].data, recv[me].data, &[])
    });
    let from = |r: i32| put_by(sl, r, me, &recv[r as usize], inline);
    read_all(&mut b, me, p, recv, from, &readers, own);
    b.finish()
}

/// Allgather and Allgatherv: `send` is this rank's block (`None`: in place, it is
/// `recv[me]`), `recv` every rank's block; each block goes through its rank's slot where it
/// fits there, else by its address.
pub fn allgather(
    sl: Slots,
    me: Rank,
    send: Option<Block>,
    recv: &[Block],
    inline: Inline,
) -> Schedule {
    let fits = |x: &Block| inline.fits(x, sl.bytes());
    // (every rank sees this rank's block as `recv[me]`: its size decides)
    let at = me.rank as usize;
    let exposed = !fits(&recv[at]);
    let inline_only = recv.iter().all(fits);
    let mut b = Builder::new(if inline_only { INLINE_NAME } else { NAME });
    let c = b.claim();
    let mine = send.unwrap_or(recv[at]);
    let p = if exposed {
        let (src, ds) = source(&mut b, &[mine], false, &[c]);
        expose(&mut b, sl, me, src, &ds)
    } else if mine.empty() {
        b.post(PUT, &[c])
    } else {
        let cp = b.copy(mine.data, sl.packed(me.rank, 0, mine.bytes), &[c]);
        b.post(PUT, &[cp])
    };
    let own = send.map(|s| b.copy(s.data, recv[at].data, &[]));
    let readers: Vec<i32> = if exposed {
        (0..me.size).filter(|&r| r != me.rank).collect()
    } else {
        Vec::new()
    };
    let from = |r: i32| {
        let blk = &recv[r as usize];
        if fits(blk) {
            Src::Slot(sl.packed(r, 0, blk.bytes))
        } else {
            Src::Exposed(sl.at(r, 0), 0)
        }
    };
    read_all(&mut b, me, p, recv, from, &readers, own);
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
    // every rank reads every other's memory (no block of a size above the slot fits one)
    let readers: Vec<i32> = if block == 0 {
        Vec::new()
    } else {
        (0..me.size).filter(|&r| r != me.rank).collect()
    };
    let from = |r: i32| Src::Exposed(sl.at(r, 0), me.rank as i64 * block);
    read_all(&mut b, me, p, recv, from, &readers, own);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::sched::sim::{self, Bufs};
    use crate::platform::abi::MPI_BYTE;

    /// Single copy's Bcast reports a receive shorter than the root's data from the root's
    /// size word, as the copy through the slots does (`shm`'s test).
    #[test]
    fn bcast_reports_a_receive_shorter_than_the_roots_data() {
        let ti = crate::core::dtype::info(MPI_BYTE()).expect("MPI_BYTE");
        let build = |sl: Slots, me: Rank, n: i64| {
            bcast(sl, me, Block::new(Addr::recv(0), n, MPI_BYTE(), &ti), 0)
        };
        let truncated = super::super::shm::tests::bcast_truncated;
        assert!(
            truncated(&build, 100, 60),
            "100 bytes at the root, 60 elsewhere"
        );
        assert!(!truncated(&build, 9000, 9000), "9000 bytes everywhere");
    }

    /// Byte blocks of the given sizes, one after another from `from` bytes into a buffer
    /// (`at`: send or receive).
    fn blocks_at(at: fn(i64) -> Addr, from: i64, sizes: &[i64]) -> Vec<Block> {
        let ti = crate::core::dtype::info(MPI_BYTE()).expect("MPI_BYTE");
        let mut off = from;
        sizes
            .iter()
            .map(|&n| {
                let b = Block::new(at(off), n, MPI_BYTE(), &ti);
                off += n;
                b
            })
            .collect()
    }

    fn blocks(at: fn(i64) -> Addr, sizes: &[i64]) -> Vec<Block> {
        blocks_at(at, 0, sizes)
    }

    /// Byte `i` of the block rank `q` sends rank `r`.
    fn byte(q: i32, r: i32, i: i64) -> u8 {
        (q as i64 * 37 + r as i64 * 11 + i * 3 + 1) as u8
    }

    /// The bytes of the blocks from ranks `from` to rank `r`, one after another.
    fn expect(from: impl Iterator<Item = i32>, r: i32, size: impl Fn(i32) -> i64) -> Vec<u8> {
        from.flat_map(|q| (0..size(q)).map(move |i| byte(q, r, i)))
            .collect()
    }

    /// The bytes of the blocks rank `q` sends ranks `to`, one after another.
    fn sends(q: i32, to: impl Iterator<Item = i32>, size: impl Fn(i32) -> i64) -> Vec<u8> {
        to.flat_map(|r| (0..size(r)).map(move |i| byte(q, r, i)))
            .collect()
    }

    /// Runs every rank's schedule of one instance on one node over real bytes
    /// (`sim::run_shm`: slots of 1 KiB after 64 bytes of flag).
    fn run(
        p: i32,
        bufs: &mut [Bufs],
        build: impl Fn(Slots, Rank) -> Schedule,
    ) -> Result<(), String> {
        let sl = Slots {
            cell: 64 + 1024,
            data: 64,
        };
        let scheds: Vec<Schedule> = (0..p)
            .map(|r| build(sl, Rank { rank: r, size: p }))
            .collect();
        sim::run_shm(
            &scheds,
            bufs,
            (sl.cell * p as i64) as usize,
            p as u64 * 7 + 1,
        )
    }

    /// Sizes of the block from rank q to rank r: empty, through the slot and by address
    /// mixed, differently for every pair.
    fn size(q: i32, r: i32, seed: i32) -> i64 {
        [0, 8, 100, 300, 1000, 5000][((q * 7 + r * 3 + seed) % 6) as usize]
    }

    /// The v and w forms (and the fixed forms through the same functions), every rank's
    /// schedule run over real bytes: blocks through the slots, by address and empty mixed,
    /// every root, in place or not. A rank reading a block from the wrong place, a sender
    /// returning while a reader still reads its memory, or a reader never saying it is
    /// done fails it.
    #[test]
    fn the_v_forms_deliver_every_block_whichever_way_it_takes() {
        for p in 1..=5 {
            for seed in 0..6 {
                for max in [-1, 0, 64, 4096, i64::MAX] {
                    let inline = Inline { max };
                    let what = format!("{p} ranks, seed {seed}, inline {max}");
                    let sz = |q: i32, r: i32| size(q, r, seed);
                    for root in 0..p {
                        for inplace in [false, true] {
                            // Gatherv: rank q's block of size(q, root) bytes
                            let mut bufs: Vec<Bufs> = (0..p)
                                .map(|q| Bufs {
                                    send: sends(q, core::iter::once(root), |r| sz(q, r)),
                                    recv: if q == root {
                                        let mut v = vec![
                                            0u8;
                                            (0..p).map(|x| sz(x, root)).sum::<i64>()
                                                as usize
                                        ];
                                        if inplace {
                                            let at: i64 = (0..root).map(|x| sz(x, root)).sum();
                                            let own = sends(root, core::iter::once(root), |r| {
                                                sz(root, r)
                                            });
                                            v[at as usize..at as usize + own.len()]
                                                .copy_from_slice(&own);
                                        }
                                        v
                                    } else {
                                        Vec::new()
                                    },
                                })
                                .collect();
                            run(p, &mut bufs, |sl, me| {
                                let sizes: Vec<i64> = (0..p).map(|q| sz(q, root)).collect();
                                let send = (!(inplace && me.rank == root))
                                    .then(|| blocks(Addr::send, &[sz(me.rank, root)])[0]);
                                let recv = if me.rank == root {
                                    blocks(Addr::recv, &sizes)
                                } else {
                                    Vec::new()
                                };
                                gather(sl, me, send, &recv, root, inline)
                            })
                            .unwrap_or_else(|e| {
                                panic!("Gatherv to {root} (in place {inplace}), {what}: {e}")
                            });
                            assert_eq!(
                                bufs[root as usize].recv,
                                expect(0..p, root, |q| sz(q, root)),
                                "Gatherv to {root} (in place {inplace}), {what}"
                            );
                            // Scatterv: the root's block for r of size(root, r) bytes
                            let mut bufs: Vec<Bufs> = (0..p)
                                .map(|q| Bufs {
                                    send: if q == root {
                                        sends(root, 0..p, |r| sz(root, r))
                                    } else {
                                        Vec::new()
                                    },
                                    recv: vec![0u8; sz(root, q) as usize],
                                })
                                .collect();
                            run(p, &mut bufs, |sl, me| {
                                let sizes: Vec<i64> = (0..p).map(|r| sz(root, r)).collect();
                                let send = if me.rank == root {
                                    blocks(Addr::send, &sizes)
                                } else {
                                    Vec::new()
                                };
                                let recv = (!(inplace && me.rank == root))
                                    .then(|| blocks(Addr::recv, &[sz(root, me.rank)])[0]);
                                scatterv(sl, me, &send, recv, root, inline)
                            })
                            .unwrap_or_else(|e| {
                                panic!("Scatterv from {root} (in place {inplace}), {what}: {e}")
                            });
                            for r in (0..p).filter(|&r| !(inplace && r == root)) {
                                assert_eq!(
                                    bufs[r as usize].recv,
                                    sends(root, core::iter::once(r), |x| sz(root, x)),
                                    "Scatterv from {root} to {r}, {what}"
                                );
                            }
                        }
                    }
                    for inplace in [false, true] {
                        // Allgatherv: rank q's block of size(q, 0) bytes (byte(q, 0, i))
                        let each = |q: i32| sz(q, 0);
                        let total: i64 = (0..p).map(each).sum();
                        let mut bufs: Vec<Bufs> = (0..p)
                            .map(|q| {
                                let own = sends(q, core::iter::once(0), |_| each(q));
                                let mut recv = vec![0u8; total as usize];
                                if inplace {
                                    let at = (0..q).map(each).sum::<i64>() as usize;
                                    recv[at..at + own.len()].copy_from_slice(&own);
                                }
                                Bufs { send: own, recv }
                            })
                            .collect();
                        run(p, &mut bufs, |sl, me| {
                            let sizes: Vec<i64> = (0..p).map(each).collect();
                            let send = (!inplace).then(|| blocks(Addr::send, &[each(me.rank)])[0]);
                            allgather(sl, me, send, &blocks(Addr::recv, &sizes), inline)
                        })
                        .unwrap_or_else(|e| panic!("Allgatherv (in place {inplace}), {what}: {e}"));
                        for r in 0..p {
                            assert_eq!(
                                bufs[r as usize].recv,
                                expect(0..p, 0, each),
                                "Allgatherv at {r}, {what}"
                            );
                        }
                        // Alltoallv: size(q, r) bytes from q to r; in place both ways alike
                        let pair = |q: i32, r: i32| {
                            if inplace {
                                sz(q.min(r), q.max(r))
                            } else {
                                sz(q, r)
                            }
                        };
                        let mut bufs: Vec<Bufs> = (0..p)
                            .map(|q| {
                                let out = sends(q, 0..p, |r| pair(q, r));
                                if inplace {
                                    // the buffer holds what goes out, and the own block stays
                                    Bufs {
                                        send: Vec::new(),
                                        recv: out,
                                    }
                                } else {
                                    let n = (0..p).map(|x| pair(x, q)).sum::<i64>() as usize;
                                    Bufs {
                                        send: out,
                                        recv: vec![0u8; n],
                                    }
                                }
                            })
                            .collect();
                        run(p, &mut bufs, |sl, me| {
                            let out: Vec<i64> = (0..p).map(|r| pair(me.rank, r)).collect();
                            let inn: Vec<i64> = (0..p).map(|q| pair(q, me.rank)).collect();
                            alltoallv(
                                sl,
                                me,
                                &blocks(Addr::send, &out),
                                &blocks(Addr::recv, &inn),
                                inplace,
                                inline,
                            )
                        })
                        .unwrap_or_else(|e| panic!("Alltoallv (in place {inplace}), {what}: {e}"));
                        for r in 0..p {
                            // in place, this rank's own block is what it sent itself
                            let got = expect(0..p, r, |q| pair(q, r));
                            let got = if inplace {
                                (0..p)
                                    .flat_map(|q| {
                                        let from = if q == r { r } else { q };
                                        (0..pair(q, r)).map(move |i| byte(from, r, i))
                                    })
                                    .collect()
                            } else {
                                got
                            };
                            assert_eq!(
                                bufs[r as usize].recv, got,
                                "Alltoallv at {r} (in place {inplace}), {what}"
                            );
                        }
                    }
                }
            }
        }
    }

    /// The fixed forms' single copy (every block by address, or none when empty): Alltoall
    /// from one run of blocks, Scatter and Bcast.
    #[test]
    fn the_fixed_forms_single_copy_delivers() {
        for p in 1..=5 {
            for block in [0i64, 8, 3000] {
                let mut bufs: Vec<Bufs> = (0..p)
                    .map(|q| Bufs {
                        send: sends(q, 0..p, |_| block),
                        recv: vec![0u8; (block * p as i64) as usize],
                    })
                    .collect();
                run(p, &mut bufs, |sl, me| {
                    let each = vec![block; p as usize];
                    alltoall(
                        sl,
                        me,
                        &blocks(Addr::send, &each),
                        &blocks(Addr::recv, &each),
                        false,
                        block,
                    )
                })
                .unwrap_or_else(|e| panic!("Alltoall of {block} B at {p} ranks: {e}"));
                for r in 0..p {
                    assert_eq!(
                        bufs[r as usize].recv,
                        expect(0..p, r, |_| block),
                        "Alltoall at {r}"
                    );
                }
            }
        }
    }
}

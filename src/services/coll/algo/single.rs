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

use super::shm::{PUT, Slots};
use super::{Block, Rank};
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

/// The bytes of `blocks` (each of `block` bytes), one after another, for the others to
/// read: where they already lie so, unless `copy`, else copied into scratch. Returns the
/// address and what must be done before it is exposed.
fn source(
    b: &mut Builder,
    blocks: &[Block],
    block: i64,
    copy: bool,
    deps: &[ActionId],
) -> (Addr, Vec<ActionId>) {
    if let Some(first) = blocks.first().and_then(contiguous).filter(|_| !copy) {
        let run = blocks
            .iter()
            .enumerate()
            .all(|(r, x)| x.bytes == block && contiguous(x) == Some(first.add(r as i64 * block)));
        if run {
            return (first, deps.to_vec());
        }
    }
    let off = b.scratch(block * blocks.len() as i64);
    let mut done: Vec<ActionId> = Vec::new();
    for (r, x) in blocks.iter().enumerate().filter(|(_, x)| !x.empty()) {
        let to = Data::new(Addr::scratch(off + r as i64 * block), x.bytes, MPI_PACKED());
        done.push(b.copy(x.data, to, deps));
    }
    if done.is_empty() {
        done = deps.to_vec();
    }
    (Addr::scratch(off), done)
}

/// Reads `dst.bytes` bytes from rank `peer`, `off` bytes into what it exposed, into `dst`
/// (through scratch when `dst` has holes). Returns the read and the last action.
fn fetch_into(
    b: &mut Builder,
    sl: Slots,
    peer: i32,
    off: i64,
    dst: &Block,
    deps: &[ActionId],
) -> (ActionId, ActionId) {
    match contiguous(dst) {
        Some(at) => {
            let f = b.fetch(peer, sl.at(peer, 0), off, at, dst.bytes, deps);
            (f, f)
        }
        None => {
            let s = Addr::scratch(b.scratch(dst.bytes));
            let f = b.fetch(peer, sl.at(peer, 0), off, s, dst.bytes, deps);
            let u = b.copy(Data::new(s, dst.bytes, MPI_PACKED()), dst.data, &[f]);
            (f, u)
        }
    }
}

/// Exposes the bytes at `src` in this rank's slot and publishes it; returns the post.
fn expose(b: &mut Builder, sl: Slots, me: Rank, src: Addr, deps: &[ActionId]) -> ActionId {
    let e = b.expose(src, sl.at(me.rank, 0), deps);
    b.post(PUT, &[e])
}

/// The end of a rank whose memory the others read: waits until they all have.
fn wait_readers(b: &mut Builder, peer: i32, after: &[ActionId]) {
    let w = b.watch(peer, READ, after);
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
        let (src, ds) = source(&mut b, &[data], data.bytes, false, &[c]);
        let p = expose(&mut b, sl, me, src, &ds);
        wait_readers(&mut b, ALL_PEERS, &[p]);
    } else {
        let w = b.watch(root, PUT, &[]);
        let (f, last) = fetch_into(&mut b, sl, root, 0, &data, &[w]);
        done_reading(&mut b, &[f], &[last]);
    }
    b.finish()
}

/// Gather: `send` is this rank's block (`None`: in place at the root), `recv` the root's
/// blocks, all of `block` bytes; the root reads every other rank's send buffer.
pub fn gather(
    sl: Slots,
    me: Rank,
    send: Option<Block>,
    recv: &[Block],
    root: i32,
    block: i64,
) -> Schedule {
    let mut b = Builder::new(NAME);
    if me.rank != root {
        let c = b.claim();
        let blocks: Vec<Block> = send.into_iter().collect();
        let (src, ds) = source(&mut b, &blocks, block, false, &[c]);
        let p = expose(&mut b, sl, me, src, &ds);
        wait_readers(&mut b, root, &[p]);
        return b.finish();
    }
    let mut reads = Vec::new();
    let mut rest = Vec::new();
    if let Some(s) = send {
        rest.push(b.copy(s.data, recv[root as usize].data, &[]));
    }
    for (r, blk) in recv.iter().enumerate().filter(|&(r, _)| r as i32 != root) {
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
        let (src, ds) = source(&mut b, send, block, false, &[c]);
        let p = expose(&mut b, sl, me, src, &ds);
        let mut after = vec![p];
        if let Some(rv) = recv {
            after.push(b.copy(send[root as usize].data, rv.data, &[]));
        }
        wait_readers(&mut b, ALL_PEERS, &after);
    } else if let Some(rv) = recv {
        let w = b.watch(root, PUT, &[]);
        let (f, last) = fetch_into(&mut b, sl, root, me.rank as i64 * block, &rv, &[w]);
        done_reading(&mut b, &[f], &[last]);
    }
    b.finish()
}

/// The part every rank of Allgather and Alltoall shares: exposes `src` (ready after
/// `ready`), reads from every other rank `off(r)` bytes into its exposed memory into
/// `recv[r]`, and waits until every rank is done reading this one's.
fn all_read_all(
    b: &mut Builder,
    sl: Slots,
    me: Rank,
    src: Addr,
    ready: &[ActionId],
    recv: &[Block],
    off: impl Fn(i32) -> i64,
    own: Option<ActionId>,
) {
    let p = expose(b, sl, me, src, ready);
    let mut reads = Vec::new();
    let mut rest: Vec<ActionId> = own.into_iter().collect();
    for (r, blk) in recv
        .iter()
        .enumerate()
        .filter(|&(r, _)| r as i32 != me.rank)
    {
        let w = b.watch(r as i32, PUT, &[p]);
        let (f, last) = fetch_into(b, sl, r as i32, off(r as i32), blk, &[w]);
        reads.push(f);
        rest.push(last);
    }
    if reads.is_empty() {
        reads.push(p);
    }
    let d = b.post(READ, &reads);
    let w = b.watch(ALL_PEERS, READ, &[d]);
    rest.push(w);
    b.release(&rest);
}

/// Allgather: `send` is this rank's block (`None`: in place, it is `recv[me]`), `recv`
/// every rank's block (all of `block` bytes).
pub fn allgather(sl: Slots, me: Rank, send: Option<Block>, recv: &[Block], block: i64) -> Schedule {
    let mut b = Builder::new(NAME);
    let c = b.claim();
    let mine = send.unwrap_or(recv[me.rank as usize]);
    let (src, ds) = source(&mut b, &[mine], block, false, &[c]);
    let own = send.map(|s| b.copy(s.data, recv[me.rank as usize].data, &[]));
    all_read_all(&mut b, sl, me, src, &ds, recv, |_| 0, own);
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
    let (src, ds) = source(
        &mut b,
        if inplace { recv } else { send },
        block,
        inplace,
        &[c],
    );
    let own = (!inplace).then(|| {
        let me = me.rank as usize;
        b.copy(send[me].data, recv[me].data, &[])
    });
    all_read_all(
        &mut b,
        sl,
        me,
        src,
        &ds,
        recv,
        |_| me.rank as i64 * block,
        own,
    );
    b.finish()
}

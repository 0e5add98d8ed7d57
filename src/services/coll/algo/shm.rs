//! Layer: services. May use: core, platform.
//!
//! The shared-memory algorithms (`SHIM_TRANSPORT`, `core::transport::node`): copy in, copy
//! out. Each rank writes its contribution into its own slot of the collective's region and
//! publishes its flag; the ranks that need it wait for the flag and read the slot directly
//! (one copy in, one copy out, no message matching, no library in the path). A schedule
//! starts by claiming the region (every rank is done with the instance that used it
//! before) and ends by releasing it.
//!
//! Contributions travel as packed bytes (`MPI_PACKED`, which matches any type signature of
//! the same size, MPI-4.0 §5.2.1), so ranks may describe the same data with different
//! datatypes; a reduction's operands keep the datatype's layout, which the standard makes
//! the same on every rank. Reductions combine in rank order, `x0 op (x1 op (... op
//! xn-1))`, so non-commutative operations are right and every rank gets the same bits.

use super::{Block, Rank, Reduction};
use crate::core::dtype::TypeInfo;
use crate::core::sched::{ALL_PEERS, ActionId, Addr, Builder, Data, Schedule};
use crate::platform::abi::MPI_PACKED;

/// Where the ranks' slots lie in a region: rank r's at `r * cell + data`.
#[derive(Clone, Copy, Debug)]
pub struct Slots {
    pub cell: i64,
    pub data: i64,
}

impl Slots {
    /// The bytes of data a slot holds.
    pub fn bytes(&self) -> i64 {
        self.cell - self.data
    }

    /// Rank `r`'s size word (`node::LENGTH`, in its flag's line).
    pub(super) fn length(&self, r: i32) -> Addr {
        Addr::shm(r as i64 * self.cell + crate::core::transport::node::LENGTH as i64)
    }

    /// Rank `r`'s slot, `off` bytes in.
    pub(super) fn at(&self, r: i32, off: i64) -> Addr {
        Addr::shm(r as i64 * self.cell + self.data + off)
    }

    /// `bytes` packed bytes in rank `r`'s slot, `off` bytes in.
    pub(super) fn packed(&self, r: i32, off: i64, bytes: i64) -> Data {
        Data::new(self.at(r, off), bytes, MPI_PACKED())
    }

    /// `count` elements of a reduction's datatype in rank `r`'s slot, `first` elements in
    /// (the slot holds the datatype's true extent from its start).
    pub(super) fn typed(&self, r: i32, red: &Reduction, first: i64, count: i64) -> Data {
        let off = first * red.ti.extent - red.ti.true_lb;
        Data::new(self.at(r, off), count, red.dt)
    }
}

/// The flag phase at which a rank's slot holds its contribution.
pub(super) const PUT: u8 = 1;

/// Barrier: every rank publishes its flag and waits for all the others'.
pub fn barrier(_sl: Slots, _me: Rank) -> Schedule {
    let mut b = Builder::new("shm:flags");
    let c = b.claim();
    let p = b.post(PUT, &[c]);
    let w = b.watch(ALL_PEERS, PUT, &[p]);
    b.release(&[w]);
    b.finish()
}

/// Bcast of `data` (of datatype layout `ti`) from `root`. Data of a dense datatype
/// larger than [`BCAST_PIECE`] goes in pieces: the root copies piece i into its slot and
/// posts phase i + 1, so the readers copy piece i out while piece i + 1 goes in (README,
/// "The node transport"); a datatype with holes goes whole (its packing has no piece
/// boundaries).
pub fn bcast(sl: Slots, me: Rank, data: Data, ti: &TypeInfo, root: i32) -> Schedule {
    let bytes = data.count * ti.size;
    let mut b = Builder::new("shm:copy-in-out");
    let pieces = if ti.dense() { bcast_pieces(bytes) } else { 1 };
    if pieces > 1 {
        b.rename("shm:copy-in-out-pipelined");
    }
    // piece i of the packed bytes: in the buffer itself (dense; `Packed` allocates no
    // scratch then) or the whole typed data
    let dense = (pieces > 1).then(|| super::Packed::new(&mut b, data, ti));
    let piece = |i: i64| -> (Data, Data) {
        match dense {
            None => (data, sl.packed(root, 0, bytes)),
            Some(p) => {
                let (off, n) = super::split(bytes, pieces, i);
                (p.slice(off, n), sl.packed(root, off, n))
            }
        }
    };
    // the root's size, in its flag's line: a receiver whose count is smaller reports the
    // truncation (written right before the first flag: the line the receivers watch is
    // taken from them once, not twice)
    let length = sl.length(root);
    if me.rank == root {
        let c = b.claim();
        let mut last = c;
        for i in 0..pieces {
            let (mine, slot) = piece(i);
            let mut cp = b.copy(mine, slot, &[c]);
            if i == 0 {
                cp = b.length(length, bytes, false, &[cp]);
            }
            last = b.post(PUT + i as u8, &[cp, last]);
        }
        b.release(&[last]);
    } else {
        // a rank that writes nothing into its cell claims nothing (see `Builder::claim`)
        let mut copies = Vec::new();
        let mut w = None;
        for i in 0..pieces {
            let (mine, slot) = piece(i);
            let wi = b.watch(root, PUT + i as u8, w.as_slice());
            copies.push(b.copy(slot, mine, &[wi]));
            if i == 0 {
                copies.push(b.length(length, bytes, true, &[wi]));
            }
            w = Some(wi);
        }
        b.release(&copies);
    }
    b.finish()
}

/// Pieces of at least this many bytes in a pipelined Bcast ([`bcast`]).
const BCAST_PIECE: i64 = 4096;

/// At most this many pieces (each a flag phase, `core::transport::node::PHASES`).
const BCAST_PIECES_MAX: i64 = 8;

/// The pieces [`bcast`] cuts `bytes` of a dense datatype into.
fn bcast_pieces(bytes: i64) -> i64 {
    (bytes / BCAST_PIECE).clamp(1, BCAST_PIECES_MAX)
}

/// Gather: `send` is this rank's block (`None`: in place at the root), `recv` the root's
/// blocks.
pub fn gather(sl: Slots, me: Rank, send: Option<Block>, recv: &[Block], root: i32) -> Schedule {
    let mut b = Builder::new("shm:copy-in-out");
    if me.rank != root {
        let c = b.claim();
        let mut deps = vec![c];
        if let Some(s) = send {
            deps = vec![b.copy(s.data, sl.packed(me.rank, 0, s.bytes), &[c])];
        }
        let p = b.post(PUT, &deps);
        b.release(&[p]);
        return b.finish();
    }
    // the root only reads: no claim
    let mut done = Vec::new();
    if let Some(s) = send {
        done.push(b.copy(s.data, recv[root as usize].data, &[]));
    }
    let w = b.watch(ALL_PEERS, PUT, &[]);
    for (r, blk) in recv.iter().enumerate() {
        if r as i32 != root {
            done.push(b.copy(sl.packed(r as i32, 0, blk.bytes), blk.data, &[w]));
        }
    }
    done.push(w);
    b.release(&done);
    b.finish()
}

/// Scatter: `send` is the root's blocks (all of `block` bytes), `recv` this rank's block
/// (`None`: in place at the root).
pub fn scatter(
    sl: Slots,
    me: Rank,
    send: &[Block],
    recv: Option<Block>,
    root: i32,
    block: i64,
) -> Schedule {
    let mut b = Builder::new("shm:copy-in-out");
    if me.rank == root {
        let c = b.claim();
        let mut copies = vec![c];
        for (r, blk) in send.iter().enumerate() {
            if r as i32 != root {
                copies.push(b.copy(blk.data, sl.packed(root, r as i64 * block, block), &[c]));
            }
        }
        let p = b.post(PUT, &copies);
        let mut done = vec![p];
        if let Some(rv) = recv {
            done.push(b.copy(send[root as usize].data, rv.data, &[c]));
        }
        b.release(&done);
    } else {
        let w = b.watch(root, PUT, &[]);
        let mut done = vec![w];
        if let Some(rv) = recv {
            done.push(b.copy(
                sl.packed(root, me.rank as i64 * block, block),
                rv.data,
                &[w],
            ));
        }
        b.release(&done);
    }
    b.finish()
}

/// Allgather: `send` is this rank's block (`None`: in place, it is `recv[me]`), `recv` the
/// blocks of every rank (all of `block` bytes).
pub fn allgather(sl: Slots, me: Rank, send: Option<Block>, recv: &[Block], block: i64) -> Schedule {
    let mut b = Builder::new("shm:copy-in-out");
    let c = b.claim();
    let mine = send.map_or(recv[me.rank as usize].data, |s| s.data);
    let cp = b.copy(mine, sl.packed(me.rank, 0, block), &[c]);
    let p = b.post(PUT, &[cp]);
    let mut done = vec![p];
    if let Some(s) = send {
        done.push(b.copy(s.data, recv[me.rank as usize].data, &[c]));
    }
    let w = b.watch(ALL_PEERS, PUT, &[p]);
    done.push(w);
    for (r, blk) in recv.iter().enumerate() {
        if r as i32 != me.rank {
            done.push(b.copy(sl.packed(r as i32, 0, block), blk.data, &[w]));
        }
    }
    b.release(&done);
    b.finish()
}

/// Alltoall: `send` holds the blocks for every rank (in place: `recv` does), each of
/// `block` bytes; this rank's slot holds them all, rank r reads its own from each slot.
pub fn alltoall(
    sl: Slots,
    me: Rank,
    send: &[Block],
    recv: &[Block],
    inplace: bool,
    block: i64,
) -> Schedule {
    let mut b = Builder::new("shm:copy-in-out");
    let c = b.claim();
    let src = if inplace { recv } else { send };
    let copies: Vec<ActionId> = src
        .iter()
        .enumerate()
        .map(|(r, blk)| b.copy(blk.data, sl.packed(me.rank, r as i64 * block, block), &[c]))
        .collect();
    let mut deps = copies.clone();
    deps.push(c);
    let p = b.post(PUT, &deps);
    let w = b.watch(ALL_PEERS, PUT, &[p]);
    let mut done = vec![w];
    for (r, blk) in recv.iter().enumerate() {
        let from = sl.packed(r as i32, me.rank as i64 * block, block);
        done.push(b.copy(from, blk.data, &[w]));
    }
    b.release(&done);
    b.finish()
}

/// Writes this rank's reduction operand (`count` elements at `src`) into its slot and
/// publishes it; returns the post.
pub(super) fn put_operand(
    b: &mut Builder,
    sl: Slots,
    me: Rank,
    red: &Reduction,
    src: Addr,
    count: i64,
    c: ActionId,
) -> ActionId {
    let cp = b.copy(
        Data::new(src, count, red.dt),
        sl.typed(me.rank, red, 0, count),
        &[c],
    );
    b.post(PUT, &[cp])
}

/// `dst = x[from] op ... op x[to - 1]`, each operand being `count` elements `first`
/// elements into a rank's slot, combined in rank order; `after` are the dependencies of
/// the first step. Returns the last action (`None` for an empty range).
#[allow(clippy::too_many_arguments)]
pub(super) fn combine(
    b: &mut Builder,
    sl: Slots,
    red: &Reduction,
    ranks: core::ops::Range<i32>,
    first: i64,
    count: i64,
    dst: Addr,
    after: &[ActionId],
) -> Option<ActionId> {
    let mut last = None;
    for r in ranks.rev() {
        let src = sl.typed(r, red, first, count);
        let deps: Vec<ActionId> = match last {
            Some(l) => vec![l],
            None => after.to_vec(),
        };
        last = Some(match last {
            None => b.copy(src, Data::new(dst, count, red.dt), &deps),
            Some(_) => b.reduce(src.addr, dst, count, red.dt, red.op, &deps),
        });
    }
    last
}

/// [`combine`] of whole operands (`red.count` elements) into the receive buffer.
fn combine_whole(
    b: &mut Builder,
    sl: Slots,
    red: &Reduction,
    ranks: core::ops::Range<i32>,
    first: i64,
    after: &[ActionId],
) -> Option<ActionId> {
    combine(b, sl, red, ranks, first, red.count, Addr::recv(0), after)
}

/// The address of this rank's operand: the receive buffer in place, else the send buffer.
pub(super) fn operand(inplace: bool) -> Addr {
    if inplace {
        Addr::recv(0)
    } else {
        Addr::send(0)
    }
}

/// The flag phase at which a rank's slot holds its reduced slice (`allreduce`).
const REDUCED: u8 = 2;

/// Allreduce: every rank combines every slot; from 8 ranks on, where each rank's share
/// is at least a cache line, split: rank r combines slice r of every slot, publishes it in
/// its own slot, and every rank copies the slices (each rank reads the data once, not
/// `size` times; a slice is combined once, so every rank still gets the same bits).
pub fn allreduce(sl: Slots, me: Rank, red: &Reduction, inplace: bool) -> Schedule {
    let size = me.size as i64;
    if size >= 8 && red.count >= size && red.bytes() >= 64 * size {
        return allreduce_split(sl, me, red, inplace);
    }
    let mut b = Builder::new("shm:copy-in-out");
    let c = b.claim();
    let p = put_operand(&mut b, sl, me, red, operand(inplace), red.count, c);
    let w = b.watch(ALL_PEERS, PUT, &[p]);
    let last = combine_whole(&mut b, sl, red, 0..me.size, 0, &[w]);
    b.release(&[last.unwrap_or(w)]);
    b.finish()
}

/// Slice `k` of `size` of a reduction's `count` elements: (first, count).
pub(super) fn slice(count: i64, size: i32, k: i32) -> (i64, i64) {
    let lo = count * k as i64 / size as i64;
    let hi = count * (k as i64 + 1) / size as i64;
    (lo, hi - lo)
}

/// Allreduce in two steps through the slots (see [`allreduce`]). This rank's slice goes
/// into the receive buffer first (its slot still holds its operand, which the chain needs),
/// then over its own operand's slice in the slot, which no other rank reads.
fn allreduce_split(sl: Slots, me: Rank, red: &Reduction, inplace: bool) -> Schedule {
    let mut b = Builder::new("shm:reduce-scatter-allgather");
    let c = b.claim();
    let p = put_operand(&mut b, sl, me, red, operand(inplace), red.count, c);
    let w = b.watch(ALL_PEERS, PUT, &[p]);
    let ext = red.ti.extent;
    let (first, n) = slice(red.count, me.size, me.rank);
    let mine = Addr::recv(first * ext);
    let last = combine(&mut b, sl, red, 0..me.size, first, n, mine, &[w]).unwrap_or(w);
    let back = b.copy(
        Data::new(mine, n, red.dt),
        sl.typed(me.rank, red, first, n),
        &[last],
    );
    let posted = b.post(REDUCED, &[back]);
    let got = b.watch(ALL_PEERS, REDUCED, &[posted]);
    let mut done = vec![got];
    for k in 0..me.size {
        if k != me.rank {
            let (f, m) = slice(red.count, me.size, k);
            if m > 0 {
                done.push(b.copy(
                    sl.typed(k, red, f, m),
                    Data::new(Addr::recv(f * ext), m, red.dt),
                    &[got],
                ));
            }
        }
    }
    b.release(&done);
    b.finish()
}

/// Reduce: the root combines every slot.
pub fn reduce(sl: Slots, me: Rank, red: &Reduction, inplace: bool, root: i32) -> Schedule {
    let mut b = Builder::new("shm:copy-in-out");
    let c = b.claim();
    let p = put_operand(&mut b, sl, me, red, operand(inplace), red.count, c);
    if me.rank != root {
        b.release(&[p]);
        return b.finish();
    }
    let w = b.watch(ALL_PEERS, PUT, &[p]);
    let last = combine_whole(&mut b, sl, red, 0..me.size, 0, &[w]);
    b.release(&[last.unwrap_or(w)]);
    b.finish()
}

/// Reduce_scatter_block: every rank's operand is `size` blocks of `red.count` elements;
/// rank r combines block r of every slot into its receive buffer.
pub fn reduce_scatter_block(sl: Slots, me: Rank, red: &Reduction, inplace: bool) -> Schedule {
    let mut b = Builder::new("shm:copy-in-out");
    let c = b.claim();
    let total = red.count * me.size as i64;
    let p = put_operand(&mut b, sl, me, red, operand(inplace), total, c);
    let w = b.watch(ALL_PEERS, PUT, &[p]);
    let first = me.rank as i64 * red.count;
    let last = combine_whole(&mut b, sl, red, 0..me.size, first, &[w]);
    b.release(&[last.unwrap_or(w)]);
    b.finish()
}

/// Reduce_scatter: every rank's operand is the blocks of all ranks, `counts` elements
/// each, one after another; rank r combines block r of every slot into its receive buffer
/// (`red.count` is its own block's count).
pub fn reduce_scatter(
    sl: Slots,
    me: Rank,
    red: &Reduction,
    counts: &[i64],
    inplace: bool,
) -> Schedule {
    let mut b = Builder::new("shm:copy-in-out");
    let c = b.claim();
    let total = counts.iter().sum();
    let p = put_operand(&mut b, sl, me, red, operand(inplace), total, c);
    let w = b.watch(ALL_PEERS, PUT, &[p]);
    let first = counts[..me.rank as usize].iter().sum();
    let last = combine_whole(&mut b, sl, red, 0..me.size, first, &[w]);
    b.release(&[last.unwrap_or(w)]);
    b.finish()
}

/// Scan (`exclusive`: Exscan): rank r combines the slots of ranks 0..=r (0..r).
pub fn scan(sl: Slots, me: Rank, red: &Reduction, inplace: bool, exclusive: bool) -> Schedule {
    let mut b = Builder::new("shm:copy-in-out");
    let c = b.claim();
    let p = put_operand(&mut b, sl, me, red, operand(inplace), red.count, c);
    let upto = if exclusive { me.rank } else { me.rank + 1 };
    let mut waits = vec![p];
    for r in 0..me.rank {
        waits.push(b.watch(r, PUT, &[p]));
    }
    let last = combine_whole(&mut b, sl, red, 0..upto, 0, &waits);
    b.release(&[last.unwrap_or(p)]);
    b.finish()
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::core::sched::sim::{self, Bufs};
    use crate::services::coll::algo::reduce::tests::{expect, input, reduction};

    /// Reduce_scatter through the slots, every rank's schedule run over real bytes
    /// (`sim::run_shm`): blocks of different sizes (empty ones too), commutative and not
    /// (combined in rank order), in place or not.
    #[test]
    fn reduce_scatter_combines_each_block_of_every_slot_in_rank_order() {
        for p in 1..=5i32 {
            for shape in 0..4 {
                let counts: Vec<i64> = (0..p as i64).map(|r| (r * 3 + shape) % 5).collect();
                let total: i64 = counts.iter().sum();
                for commutative in [true, false] {
                    for inplace in [false, true] {
                        let what = format!(
                            "{p} ranks, counts {counts:?}, commutative {commutative}, in place {inplace}"
                        );
                        let operand = |r: usize| -> Vec<u64> {
                            (0..total as usize)
                                .map(|i| input(commutative, r, i))
                                .collect()
                        };
                        let mut bufs: Vec<Bufs> = (0..p as usize)
                            .map(|r| {
                                let mine = sim::to_bytes(&operand(r));
                                if inplace {
                                    Bufs {
                                        send: Vec::new(),
                                        recv: mine,
                                    }
                                } else {
                                    Bufs {
                                        send: mine,
                                        recv: vec![0u8; 8 * counts[r] as usize],
                                    }
                                }
                            })
                            .collect();
                        let sl = Slots {
                            cell: 64 + 1024,
                            data: 64,
                        };
                        let scheds: Vec<Schedule> = (0..p)
                            .map(|r| {
                                let red = reduction(counts[r as usize], commutative);
                                reduce_scatter(
                                    sl,
                                    Rank { rank: r, size: p },
                                    &red,
                                    &counts,
                                    inplace,
                                )
                            })
                            .collect();
                        sim::run_shm(&scheds, &mut bufs, (sl.cell * p as i64) as usize, 3)
                            .unwrap_or_else(|e| panic!("{what}: {e}"));
                        let mut first = 0;
                        for r in 0..p as usize {
                            let n = counts[r] as usize;
                            let got = sim::from_bytes(&bufs[r].recv[..8 * n]);
                            let want: Vec<u64> = (first..first + n)
                                .map(|i| expect(commutative, 0, p as usize - 1, i))
                                .collect();
                            assert_eq!(got, want, "rank {r}: {what}");
                            first += n;
                        }
                    }
                }
            }
        }
    }

    /// Bcast through the slots, whole and in pieces, every rank's schedule run over real
    /// bytes: every root, sizes below, at and between the piece boundaries. A reader that
    /// copies a piece before its phase, or a piece from the wrong offset, fails it.
    #[test]
    fn bcast_delivers_every_piece_from_every_root() {
        use crate::platform::abi::MPI_BYTE;
        let sl = Slots {
            cell: 64 + 40 * 1024,
            data: 64,
        };
        let ti = crate::core::dtype::info(MPI_BYTE()).expect("MPI_BYTE");
        for p in 1..=4i32 {
            for bytes in [0i64, 1, 100, 4095, 4096, 8191, 8192, 12289, 16384, 40000] {
                for root in 0..p {
                    let what = format!("{p} ranks, {bytes} bytes, root {root}");
                    let want: Vec<u8> = (0..bytes).map(|i| (i * 7 + 3) as u8).collect();
                    let mut bufs: Vec<Bufs> = (0..p)
                        .map(|r| Bufs {
                            send: Vec::new(),
                            recv: if r == root {
                                want.clone()
                            } else {
                                vec![0u8; bytes as usize]
                            },
                        })
                        .collect();
                    let scheds: Vec<Schedule> = (0..p)
                        .map(|r| {
                            let data = Data::new(Addr::recv(0), bytes, MPI_BYTE());
                            bcast(sl, Rank { rank: r, size: p }, data, &ti, root)
                        })
                        .collect();
                    let pieces = bcast_pieces(bytes);
                    assert!(pieces <= BCAST_PIECES_MAX, "{what}");
                    if pieces > 1 {
                        assert_eq!(scheds[0].algorithm, "shm:copy-in-out-pipelined", "{what}");
                    }
                    for seed in 0..4 {
                        sim::run_shm(&scheds, &mut bufs, (sl.cell * p as i64) as usize, seed)
                            .unwrap_or_else(|e| panic!("{what}, seed {seed}: {e}"));
                        for (r, b) in bufs.iter_mut().enumerate() {
                            assert_eq!(b.recv, want, "rank {r}: {what}, seed {seed}");
                            if r as i32 != root {
                                b.recv.fill(0);
                            }
                        }
                    }
                }
            }
        }
    }

    /// Runs a Bcast of `root_bytes` at root 0 and `other_bytes` elsewhere, 3 ranks, built by
    /// `build` (slots, rank, its bytes): whether a truncation was reported.
    pub(in crate::services::coll::algo) fn bcast_truncated(
        build: &dyn Fn(Slots, Rank, i64) -> Schedule,
        root_bytes: i64,
        other_bytes: i64,
    ) -> bool {
        let sl = Slots {
            cell: 64 + 40 * 1024,
            data: 64,
        };
        let p = 3;
        let bytes = |r: i32| if r == 0 { root_bytes } else { other_bytes };
        let mut bufs: Vec<Bufs> = (0..p)
            .map(|r| Bufs {
                send: Vec::new(),
                recv: vec![1u8; bytes(r) as usize],
            })
            .collect();
        let scheds: Vec<Schedule> = (0..p)
            .map(|r| build(sl, Rank { rank: r, size: p }, bytes(r)))
            .collect();
        match sim::run_shm(&scheds, &mut bufs, (sl.cell * p as i64) as usize, 1) {
            Ok(()) => false,
            Err(e) if e.contains("truncated") => true,
            Err(e) => panic!("root {root_bytes} bytes, the others {other_bytes}: {e}"),
        }
    }

    /// A receiver whose count is smaller than the root's learns it from the root's size
    /// word and reports the truncation (the library does; before, the segment's Bcast
    /// quietly delivered the first bytes); one whose count is larger reports nothing, as a
    /// receive longer than its message does not. (Single copy: `single`'s tests.)
    #[test]
    fn bcast_reports_a_receive_shorter_than_the_roots_data() {
        use crate::platform::abi::MPI_BYTE;
        let ti = crate::core::dtype::info(MPI_BYTE()).expect("MPI_BYTE");
        let build = |sl: Slots, me: Rank, n: i64| {
            bcast(sl, me, Data::new(Addr::recv(0), n, MPI_BYTE()), &ti, 0)
        };
        for (root_bytes, other_bytes, truncated) in [
            (100i64, 60i64, true),
            (9000, 8999, true),
            (60, 100, false),
            (0, 0, false),
        ] {
            assert_eq!(
                bcast_truncated(&build, root_bytes, other_bytes),
                truncated,
                "root {root_bytes} bytes, the others {other_bytes}"
            );
        }
    }

    #[test]
    fn slices_cover_every_element_once_in_order() {
        for size in 1..=17 {
            for count in [size as i64, size as i64 + 1, 100, 1031] {
                let mut next = 0;
                for k in 0..size {
                    let (first, n) = slice(count, size, k);
                    assert_eq!(first, next, "count {count} size {size} slice {k}");
                    assert!(n >= 1, "count >= size: no empty slice");
                    next = first + n;
                }
                assert_eq!(next, count);
            }
        }
    }
}

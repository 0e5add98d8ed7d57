//! Layer: core. May use: platform.
//!
//! Test-only simulator: runs the schedules of all ranks of one collective in a single
//! process over real byte buffers, with a simulated message layer, so every algorithm can
//! be checked exhaustively (many process counts, counts, roots) without `mpirun`.
//!
//! It follows the engine's rules (dependencies, channel order, tag offsets) and checks
//! what the engine cannot: every access stays inside its buffer, a receive gets exactly
//! the bytes it expects, and nothing deadlocks. In `Rendezvous` mode a send's data is
//! read only when a receive matches it (as a large MPI message is), which exposes
//! schedules that overwrite a buffer an outstanding send still reads; in `Eager` mode it
//! is read at once. The order in which ranks and ready actions run is shuffled by a seed.
//!
//! Only predefined, dense datatypes are supported (plus composite messages of them).
//! [`NONCOMM`] is a non-commutative test operation on `MPI_UINT64_T` that detects any
//! combination out of rank order (see [`iv`]).

use std::collections::{HashMap, VecDeque};

use super::{Action, ActionId, Addr, Base, Data, Schedule};
use crate::platform::abi::*;

/// The non-commutative test operation.
pub const NONCOMM: MPI_Op = 0x9800_0777u32 as MPI_Op;

/// Encodes "element `idx`, reduction of ranks lo..=hi" as a u64.
pub fn iv(idx: u64, lo: u64, hi: u64) -> u64 {
    ((idx & 0xffff) << 48) | ((lo & 0xff_ffff) << 24) | (hi & 0xff_ffff)
}

/// The marker of a combination out of order.
pub const IV_ERROR: u64 = u64::MAX;

fn iv_op(a: u64, b: u64) -> u64 {
    if a == IV_ERROR || b == IV_ERROR {
        return IV_ERROR;
    }
    let (ia, la, ha) = (a >> 48, (a >> 24) & 0xff_ffff, a & 0xff_ffff);
    let (ib, lb, hb) = (b >> 48, (b >> 24) & 0xff_ffff, b & 0xff_ffff);
    if ia != ib || ha + 1 != lb {
        return IV_ERROR;
    }
    iv(ia, la, hb)
}

/// One rank's buffers.
#[derive(Clone, Debug, Default)]
pub struct Bufs {
    pub send: Vec<u8>,
    pub recv: Vec<u8>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Eager,
    Rendezvous,
}

/// What a run did.
#[derive(Clone, Debug, Default)]
pub struct Stats {
    /// Messages sent by each rank.
    pub sends: Vec<usize>,
    /// Bytes sent by each rank.
    pub bytes: Vec<usize>,
}

const WAITING: u8 = 0;
const READY: u8 = 1;
const BLOCKED: u8 = 2;
const POSTED: u8 = 3;
const DONE: u8 = 4;

struct RankState {
    scratch: Vec<u8>,
    remaining: Vec<u32>,
    state: Vec<u8>,
    ready: Vec<u32>,
    done: usize,
}

/// A posted send waiting to be matched (rendezvous) or its data (eager).
struct Msg {
    rank: usize,
    action: u32,
    data: Option<Vec<u8>>,
}

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

fn elem_size(dt: MPI_Datatype) -> Result<usize, String> {
    builtin_size(dt).ok_or_else(|| format!("simulator: unsupported datatype {dt:#x}"))
}

/// The byte ranges (relative to the base) a message's data covers, in message order.
fn ranges(s: &Schedule, d: &Data) -> Result<Vec<(isize, usize)>, String> {
    if let Some(i) = super::composite_index(d.dt) {
        let parts = &s.composites[i];
        parts
            .iter()
            .map(|p| Ok((d.addr.off + p.off, p.count as usize * elem_size(p.dt)?)))
            .collect()
    } else {
        Ok(vec![(d.addr.off, d.count as usize * elem_size(d.dt)?)])
    }
}

fn buf<'a>(
    bufs: &'a mut [Bufs],
    st: &'a mut [RankState],
    seg: &'a mut Vec<u8>,
    rank: usize,
    base: Base,
) -> &'a mut Vec<u8> {
    match base {
        Base::Send => &mut bufs[rank].send,
        Base::Recv => &mut bufs[rank].recv,
        Base::Scratch => &mut st[rank].scratch,
        Base::Shm => seg,
    }
}

fn check(len: usize, off: isize, n: usize, what: &str, rank: usize) -> Result<usize, String> {
    if off < 0 || off as usize + n > len {
        return Err(format!(
            "rank {rank}: {what} at offset {off} of {n} bytes leaves its buffer of {len} bytes"
        ));
    }
    Ok(off as usize)
}

fn read(
    bufs: &mut [Bufs],
    st: &mut [RankState],
    seg: &mut Vec<u8>,
    s: &Schedule,
    rank: usize,
    d: &Data,
) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    for (off, n) in ranges(s, d)? {
        let b = buf(bufs, st, seg, rank, d.addr.base);
        let o = check(b.len(), off, n, "read", rank)?;
        out.extend_from_slice(&b[o..o + n]);
    }
    Ok(out)
}

fn write(
    bufs: &mut [Bufs],
    st: &mut [RankState],
    seg: &mut Vec<u8>,
    s: &Schedule,
    rank: usize,
    d: &Data,
    bytes: &[u8],
) -> Result<(), String> {
    let rs = ranges(s, d)?;
    let total: usize = rs.iter().map(|r| r.1).sum();
    if total != bytes.len() {
        return Err(format!(
            "rank {rank}: a receive of {total} bytes matched a message of {} bytes",
            bytes.len()
        ));
    }
    let mut at = 0;
    for (off, n) in rs {
        let b = buf(bufs, st, seg, rank, d.addr.base);
        let o = check(b.len(), off, n, "write", rank)?;
        b[o..o + n].copy_from_slice(&bytes[at..at + n]);
        at += n;
    }
    Ok(())
}

fn reduce(
    a: &[u8],
    b: &mut [u8],
    dt: MPI_Datatype,
    op: MPI_Op,
    count: usize,
) -> Result<(), String> {
    if op == NONCOMM {
        if dt != MPI_UINT64_T() {
            return Err("NONCOMM needs MPI_UINT64_T".into());
        }
        for i in 0..count {
            let x = u64::from_ne_bytes(a[i * 8..i * 8 + 8].try_into().unwrap());
            let y = u64::from_ne_bytes(b[i * 8..i * 8 + 8].try_into().unwrap());
            b[i * 8..i * 8 + 8].copy_from_slice(&iv_op(x, y).to_ne_bytes());
        }
        return Ok(());
    }
    // SAFETY: both slices hold `count` elements of the predefined type `dt`.
    let rc = unsafe {
        crate::core::ops::reduce_local(
            a.as_ptr().cast(),
            b.as_mut_ptr().cast(),
            count as i64,
            dt,
            op,
        )
    };
    if rc != MPI_SUCCESS {
        return Err(format!("reduction of {dt:#x} by {op:#x} failed"));
    }
    Ok(())
}

/// Runs one schedule per rank to completion over `bufs`; a deadlock is an error.
pub fn run(scheds: &[Schedule], bufs: &mut [Bufs], mode: Mode, seed: u64) -> Result<Stats, String> {
    let (stats, _, stuck) = simulate(scheds, bufs, mode, seed)?;
    match stuck {
        Some(e) => Err(e),
        None => Ok(stats),
    }
}

/// Which ranks finish when the schedules run as far as they can.
pub fn finished(scheds: &[Schedule], mode: Mode, seed: u64) -> Result<Vec<bool>, String> {
    let mut bufs = vec![Bufs::default(); scheds.len()];
    Ok(simulate(scheds, &mut bufs, mode, seed)?.1)
}

/// Runs as far as possible: the statistics, which ranks finished, and a description of
/// what is stuck (a deadlock or an unmatched send), if anything. Hard errors (an access
/// outside a buffer, a size mismatch) are `Err`.
#[allow(clippy::type_complexity)]
/// Schedules above this many actions are not checked for races (the check is quadratic).
const RACE_CHECK_MAX: usize = 6000;

/// Static race check: every two actions that touch overlapping bytes, one of them writing,
/// must be ordered by dependencies. The simulator alone cannot see this: it writes a
/// receive's bytes when the message matches, while MPI may write them at any time between
/// posting and completion, so two receives posted at once into one scratch region, or a
/// receive posted into a region a pending reduction still reads, corrupt data only now
/// and then on a real run.
pub fn check_races(s: &Schedule) -> Result<(), String> {
    let n = s.len();
    if n > RACE_CHECK_MAX {
        return Ok(());
    }
    // (base, lo, hi, action, writes)
    let mut acc: Vec<(u8, isize, isize, usize, bool)> = Vec::new();
    let mut add = |d: &Data, v: usize, w: bool| -> Result<(), String> {
        for (off, len) in ranges(s, d)? {
            if len > 0 {
                acc.push((d.addr.base as u8, off, off + len as isize, v, w));
            }
        }
        Ok(())
    };
    for (v, a) in s.actions.iter().enumerate() {
        match *a {
            Action::Send { data, .. } => add(&data, v, false)?,
            Action::Recv { data, .. } => add(&data, v, true)?,
            Action::Copy { src, dst } => {
                add(&src, v, false)?;
                add(&dst, v, true)?;
            }
            Action::Reduce {
                src,
                dst,
                count,
                dt,
                ..
            } => {
                add(&Data::new(src, count, dt), v, false)?;
                add(&Data::new(dst, count, dt), v, true)?;
            }
            Action::Nop
            | Action::Post { .. }
            | Action::Watch { .. }
            | Action::Claim
            | Action::Release
            | Action::Expose { .. }
            | Action::Fetch { .. }
            | Action::Length { .. } => {}
        }
    }
    // ancestors as bit sets: the builder only lets an action depend on earlier ones
    let words = n.div_ceil(64);
    let mut anc = vec![0u64; n * words];
    for u in 0..n {
        for &w in s.successors(u as ActionId) {
            let w = w as usize;
            if w <= u {
                return Err(format!("action {w} depends on the later action {u}"));
            }
            let (lo, hi) = anc.split_at_mut(w * words);
            let (au, aw) = (&lo[u * words..(u + 1) * words], &mut hi[..words]);
            for (x, y) in aw.iter_mut().zip(au) {
                *x |= *y;
            }
            aw[u / 64] |= 1 << (u % 64);
        }
    }
    let before = |a: usize, b: usize| anc[b * words + a / 64] >> (a % 64) & 1 == 1;
    acc.sort_by_key(|x| (x.0, x.1));
    for i in 0..acc.len() {
        let (base, _, hi, v, w) = acc[i];
        for &(base2, lo2, _, v2, w2) in &acc[i + 1..] {
            if base2 != base || lo2 >= hi {
                break;
            }
            if v2 != v && (w || w2) && !before(v.min(v2), v.max(v2)) {
                return Err(format!(
                    "race: actions #{v} {:?} and #{v2} {:?} touch the same bytes unordered",
                    s.actions[v], s.actions[v2]
                ));
            }
        }
    }
    Ok(())
}

pub fn simulate(
    scheds: &[Schedule],
    bufs: &mut [Bufs],
    mode: Mode,
    seed: u64,
) -> Result<(Stats, Vec<bool>, Option<String>), String> {
    simulate_on(scheds, bufs, mode, seed, 0)
}

/// Runs the shared-memory schedules of one collective instance (`algo::shm`,
/// `algo::single`) over real bytes: a segment region of `seg_len` bytes shared by every
/// rank, each rank's flag (the highest phase it posted: phases only grow, as the engine's
/// sequence counters), claims and releases as no-ops (one instance), an `Expose` as a
/// token in the slot that a `Fetch` resolves to the exposing rank's buffer. Beyond
/// [`run`]'s checks: a `Fetch` must name the rank whose token it reads, and must not read
/// the memory of a rank whose schedule has ended (its buffers are the caller's again).
pub fn run_shm(
    scheds: &[Schedule],
    bufs: &mut [Bufs],
    seg_len: usize,
    seed: u64,
) -> Result<(), String> {
    let (_, _, stuck) = simulate_on(scheds, bufs, Mode::Eager, seed, seg_len)?;
    stuck.map_or(Ok(()), Err)
}

fn simulate_on(
    scheds: &[Schedule],
    bufs: &mut [Bufs],
    mode: Mode,
    seed: u64,
    seg_len: usize,
) -> Result<(Stats, Vec<bool>, Option<String>), String> {
    let p = scheds.len();
    let mut seg = vec![0x5a_u8; seg_len];
    // the highest phase each rank posted, the Watches not yet satisfied, and what each
    // Expose token stands for (the exposing rank, the address)
    let mut flags = vec![0u8; p];
    let mut watching: Vec<(usize, u32)> = Vec::new();
    let mut exposed: Vec<(usize, Addr)> = Vec::new();
    assert_eq!(bufs.len(), p);
    for (rank, s) in scheds.iter().enumerate() {
        check_races(s).map_err(|e| format!("rank {rank} ({}): {e}", s.algorithm))?;
    }
    let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    let mut st: Vec<RankState> = scheds
        .iter()
        .map(|s| RankState {
            scratch: vec![0xa5; s.scratch],
            remaining: s.indeg.clone(),
            state: vec![WAITING; s.len()],
            ready: (0..s.len() as u32)
                .filter(|&v| s.indeg[v as usize] == 0)
                .collect(),
            done: 0,
        })
        .collect();
    for r in st.iter_mut() {
        for &v in &r.ready {
            r.state[v as usize] = READY;
        }
    }
    let mut stats = Stats {
        sends: vec![0; p],
        bytes: vec![0; p],
    };
    // channel (src, dst, tag offset) -> queued sends and posted receives (rank, action)
    let mut sends: HashMap<(usize, usize, i32), VecDeque<Msg>> = HashMap::new();
    let mut recvs: HashMap<(usize, usize, i32), VecDeque<(usize, u32)>> = HashMap::new();
    let complete = |st: &mut Vec<RankState>, rank: usize, v: u32| {
        let s = &scheds[rank];
        let r = &mut st[rank];
        r.state[v as usize] = DONE;
        r.done += 1;
        for &n in s.successors(v) {
            r.remaining[n as usize] -= 1;
            if r.remaining[n as usize] == 0 {
                r.state[n as usize] = READY;
                r.ready.push(n);
            }
        }
    };
    loop {
        let mut progressed = false;
        let start = if p > 0 { rng.below(p) } else { 0 };
        for i in 0..p {
            let rank = (start + i) % p;
            let s = &scheds[rank];
            // a few actions per visit, so the ranks' schedules interleave (a reader may
            // run between two of a writer's posts)
            let mut budget = 1 + rng.below(3);
            while !st[rank].ready.is_empty() && budget > 0 {
                budget -= 1;
                let k = rng.below(st[rank].ready.len());
                let v = st[rank].ready.swap_remove(k);
                progressed = true;
                match s.actions[v as usize] {
                    Action::Send {
                        data,
                        peer,
                        tag_offset,
                    }
                    | Action::Recv {
                        data,
                        peer,
                        tag_offset,
                    } => {
                        if let Some(prev) = s.has_prev_on_channel(v) {
                            if st[rank].state[prev as usize] < POSTED {
                                st[rank].state[v as usize] = BLOCKED;
                                continue;
                            }
                        }
                        if peer < 0 || peer as usize >= p {
                            return Err(format!("rank {rank}: peer {peer} out of range"));
                        }
                        let send = matches!(s.actions[v as usize], Action::Send { .. });
                        st[rank].state[v as usize] = POSTED;
                        if send {
                            let key = (rank, peer as usize, tag_offset);
                            stats.sends[rank] += 1;
                            let data_now = if mode == Mode::Eager {
                                let d = read(bufs, &mut st, &mut seg, s, rank, &data)?;
                                stats.bytes[rank] += d.len();
                                Some(d)
                            } else {
                                None
                            };
                            sends.entry(key).or_default().push_back(Msg {
                                rank,
                                action: v,
                                data: data_now,
                            });
                            if mode == Mode::Eager {
                                complete(&mut st, rank, v);
                            }
                        } else {
                            let key = (peer as usize, rank, tag_offset);
                            recvs.entry(key).or_default().push_back((rank, v));
                        }
                        if let Some(n) = s.next_on_channel(v) {
                            if st[rank].state[n as usize] == BLOCKED {
                                st[rank].state[n as usize] = READY;
                                st[rank].ready.push(n);
                            }
                        }
                    }
                    Action::Copy { src, dst } => {
                        if src.count * elem_size(src.dt)? as i64
                            != dst.count * elem_size(dst.dt)? as i64
                        {
                            return Err(format!("rank {rank}: copy between different sizes"));
                        }
                        let d = read(bufs, &mut st, &mut seg, s, rank, &src)?;
                        write(bufs, &mut st, &mut seg, s, rank, &dst, &d)?;
                        complete(&mut st, rank, v);
                    }
                    Action::Reduce {
                        src,
                        dst,
                        count,
                        dt,
                        op,
                    } => {
                        let n = count as usize * elem_size(dt)?;
                        let a = read(bufs, &mut st, &mut seg, s, rank, &Data::new(src, count, dt))?;
                        let b = buf(bufs, &mut st, &mut seg, rank, dst.base);
                        let o = check(b.len(), dst.off, n, "reduce", rank)?;
                        reduce(&a, &mut b[o..o + n], dt, op, count as usize)?;
                        complete(&mut st, rank, v);
                    }
                    Action::Nop | Action::Claim | Action::Release => complete(&mut st, rank, v),
                    _ if seg_len == 0 => {
                        return Err("shared-memory schedules run only in `run_shm`".into());
                    }
                    Action::Post { phase } => {
                        flags[rank] = flags[rank].max(phase);
                        complete(&mut st, rank, v);
                    }
                    Action::Watch { .. } => watching.push((rank, v)),
                    Action::Expose { src, at } => {
                        exposed.push((rank, src));
                        let token = (exposed.len() as u64).to_ne_bytes();
                        let o = check(seg.len(), at.off, 8, "expose", rank)?;
                        if at.base != Base::Shm {
                            return Err(format!(
                                "rank {rank}: an address exposed outside the slots"
                            ));
                        }
                        seg[o..o + 8].copy_from_slice(&token);
                        complete(&mut st, rank, v);
                    }
                    Action::Length {
                        at,
                        bytes,
                        check: reads,
                    } => {
                        let o = check(seg.len(), at.off, 4, "length", rank)?;
                        if !reads {
                            seg[o..o + 4].copy_from_slice(&(bytes as u32).to_ne_bytes());
                        } else if u32::from_ne_bytes(seg[o..o + 4].try_into().unwrap()) as i64
                            > bytes
                        {
                            return Err(format!("rank {rank}: truncated"));
                        }
                        complete(&mut st, rank, v);
                    }
                    Action::Fetch {
                        peer,
                        at,
                        off,
                        dst,
                        bytes,
                    } => {
                        let o = check(seg.len(), at.off, 8, "fetch", rank)?;
                        let token = u64::from_ne_bytes(seg[o..o + 8].try_into().unwrap());
                        let Some(&(owner, src)) =
                            (token as usize).checked_sub(1).and_then(|i| exposed.get(i))
                        else {
                            return Err(format!(
                                "rank {rank}: a fetch from rank {peer} finds no address"
                            ));
                        };
                        if owner != peer as usize {
                            return Err(format!(
                                "rank {rank}: a fetch from rank {peer} reads rank {owner}'s address"
                            ));
                        }
                        if st[owner].done == scheds[owner].len() {
                            return Err(format!(
                                "rank {rank}: reads rank {owner}'s memory after its call returned"
                            ));
                        }
                        let n = bytes as usize;
                        let from = buf(bufs, &mut st, &mut seg, owner, src.base);
                        let fo = check(from.len(), src.off + off as isize, n, "fetched", owner)?;
                        let d = from[fo..fo + n].to_vec();
                        let to = buf(bufs, &mut st, &mut seg, rank, dst.base);
                        let t = check(to.len(), dst.off, n, "fetch into", rank)?;
                        to[t..t + n].copy_from_slice(&d);
                        complete(&mut st, rank, v);
                    }
                }
            }
        }
        // Watches whose flags arrived
        let mut k = 0;
        while k < watching.len() {
            let (rank, v) = watching[k];
            let Action::Watch { peer, phase } = scheds[rank].actions[v as usize] else {
                unreachable!()
            };
            let seen = |r: usize| flags[r] >= phase;
            let ok = if peer == super::ALL_PEERS {
                (0..p).filter(|&r| r != rank).all(seen)
            } else {
                peer >= 0 && (peer as usize) < p && seen(peer as usize)
            };
            if ok {
                watching.swap_remove(k);
                complete(&mut st, rank, v);
                progressed = true;
            } else {
                k += 1;
            }
        }
        // match heads of channels
        let keys: Vec<_> = recvs.keys().copied().collect();
        for key in keys {
            loop {
                let (Some(q), Some(sq)) = (recvs.get_mut(&key), sends.get_mut(&key)) else {
                    break;
                };
                if q.is_empty() || sq.is_empty() {
                    break;
                }
                let (rrank, rv) = q.pop_front().unwrap();
                let m = sq.pop_front().unwrap();
                let data = match m.data {
                    Some(d) => d,
                    None => {
                        let s = &scheds[m.rank];
                        let Action::Send { data, .. } = s.actions[m.action as usize] else {
                            unreachable!()
                        };
                        let d = read(bufs, &mut st, &mut seg, s, m.rank, &data)?;
                        stats.bytes[m.rank] += d.len();
                        complete(&mut st, m.rank, m.action);
                        d
                    }
                };
                let s = &scheds[rrank];
                let Action::Recv { data: rd, .. } = s.actions[rv as usize] else {
                    unreachable!()
                };
                write(bufs, &mut st, &mut seg, s, rrank, &rd, &data)?;
                complete(&mut st, rrank, rv);
                progressed = true;
            }
        }
        if !progressed {
            break;
        }
    }
    let finished: Vec<bool> = st
        .iter()
        .enumerate()
        .map(|(rank, r)| r.done == scheds[rank].len())
        .collect();
    for (rank, r) in st.iter().enumerate() {
        if r.done != scheds[rank].len() {
            let pending: Vec<String> = (0..scheds[rank].len())
                .filter(|&v| r.state[v] != DONE)
                .take(6)
                .map(|v| format!("#{v} {:?} (state {})", scheds[rank].actions[v], r.state[v]))
                .collect();
            let e = format!(
                "deadlock: rank {rank} finished {}/{} actions; pending: {}",
                r.done,
                scheds[rank].len(),
                pending.join("; ")
            );
            return Ok((stats, finished, Some(e)));
        }
    }
    for (key, q) in &sends {
        if !q.is_empty() {
            let e = format!("unmatched send on channel {key:?}");
            return Ok((stats, finished, Some(e)));
        }
    }
    Ok((stats, finished, None))
}

/// Helpers for tests: u64 buffers.
pub fn to_bytes(v: &[u64]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_ne_bytes()).collect()
}

pub fn from_bytes(b: &[u8]) -> Vec<u64> {
    b.chunks_exact(8)
        .map(|c| u64::from_ne_bytes(c.try_into().unwrap()))
        .collect()
}

/// A deterministic pseudo-random value for (rank, element), for sums that would reveal a
/// missing or doubled contribution.
pub fn val(rank: usize, i: usize) -> u64 {
    let mut x = (rank as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15)
        ^ (i as u64).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x ^= x >> 31;
    x.wrapping_mul(0x94d0_49bb_1331_11eb)
}

/// Whether an address lies in a base (for tests asserting where results land).
pub fn base_of(a: Addr) -> Base {
    a.base
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::sched::Builder;

    #[test]
    fn exchange_and_deadlock_detection() {
        // two ranks swap 4 u64 with send before receive: fine in both modes
        let mk = |peer: i32| {
            let mut b = Builder::new("t");
            let d = Data::new(Addr::send(0), 4, MPI_UINT64_T());
            b.send(d, peer, &[]);
            b.recv(Data::new(Addr::recv(0), 4, MPI_UINT64_T()), peer, &[]);
            b.finish()
        };
        let scheds = vec![mk(1), mk(0)];
        for mode in [Mode::Eager, Mode::Rendezvous] {
            let mut bufs: Vec<Bufs> = (0..2)
                .map(|r| Bufs {
                    send: to_bytes(&[r as u64; 4]),
                    recv: vec![0; 32],
                })
                .collect();
            run(&scheds, &mut bufs, mode, 7).unwrap();
            assert_eq!(from_bytes(&bufs[0].recv), vec![1; 4]);
            assert_eq!(from_bytes(&bufs[1].recv), vec![0; 4]);
        }
        // receive, then send (dependent): deadlocks
        let mk2 = |peer: i32| {
            let mut b = Builder::new("t");
            let r = b.recv(Data::new(Addr::recv(0), 1, MPI_UINT64_T()), peer, &[]);
            b.send(Data::new(Addr::send(0), 1, MPI_UINT64_T()), peer, &[r]);
            b.finish()
        };
        let mut bufs = vec![
            Bufs {
                send: vec![0; 8],
                recv: vec![0; 8]
            };
            2
        ];
        let e = run(&[mk2(1), mk2(0)], &mut bufs, Mode::Eager, 1).unwrap_err();
        assert!(e.contains("deadlock"), "{e}");
    }

    #[test]
    fn interval_op_detects_order() {
        assert_eq!(iv_op(iv(3, 0, 1), iv(3, 2, 2)), iv(3, 0, 2));
        assert_eq!(iv_op(iv(3, 2, 2), iv(3, 0, 1)), IV_ERROR);
        assert_eq!(iv_op(iv(3, 0, 1), iv(4, 2, 2)), IV_ERROR);
    }

    #[test]
    fn composite_messages() {
        // rank 0 sends blocks 0 and 2 of its send buffer as one message; rank 1 receives
        // them into blocks 1 and 3
        let mut b0 = Builder::new("t");
        let d = b0.blocks(&[
            (Addr::send(0), 1, MPI_UINT64_T(), 8),
            (Addr::send(16), 1, MPI_UINT64_T(), 8),
        ]);
        b0.send(d, 1, &[]);
        let mut b1 = Builder::new("t");
        let d = b1.blocks(&[
            (Addr::recv(8), 1, MPI_UINT64_T(), 8),
            (Addr::recv(24), 1, MPI_UINT64_T(), 8),
        ]);
        b1.recv(d, 0, &[]);
        let mut bufs = vec![
            Bufs {
                send: to_bytes(&[10, 11, 12, 13]),
                recv: vec![0; 32],
            },
            Bufs {
                send: vec![],
                recv: vec![0; 32],
            },
        ];
        run(&[b0.finish(), b1.finish()], &mut bufs, Mode::Rendezvous, 3).unwrap();
        assert_eq!(from_bytes(&bufs[1].recv), vec![0, 10, 0, 12]);
        // contiguous neighbours merge into plain data
        let mut b = Builder::new("t");
        let d = b.blocks(&[
            (Addr::recv(0), 2, MPI_UINT64_T(), 8),
            (Addr::recv(16), 3, MPI_UINT64_T(), 8),
            (Addr::recv(40), 0, MPI_UINT64_T(), 8),
        ]);
        assert_eq!(d, Data::new(Addr::recv(0), 5, MPI_UINT64_T()));
    }
}

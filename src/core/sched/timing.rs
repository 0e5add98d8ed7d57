//! Layer: core. May use: platform.
//!
//! Timing simulator: runs the schedules of all ranks of one collective as a deterministic
//! discrete-event simulation in which nothing is moved, only time passes, to predict how
//! long an algorithm takes on machines this one is not (issue 35, "scale by simulation").
//! Costs follow LogGP (the `select::model` conventions: microseconds, per-byte gaps), one
//! parameter set per level: between ranks of one node and between nodes.
//!
//! Rules (close to LogGOPSim's, Hoefler et al., HPDC 2010):
//! - each rank is one CPU that runs one action at a time; among the ready actions it takes
//!   the lowest id (builders number actions in a topological order, so this is the order
//!   a schedule's author meant);
//! - a Send costs `o` on the CPU; its message leaves no earlier than `g` after the
//!   previous one of the rank on that level, and, between nodes, after the node's link
//!   has carried the previous message of any of the node's ranks (`G` per byte: the ranks
//!   of a node share one NIC), and arrives `L + G·bytes` later (the receiving node's link
//!   is shared likewise);
//! - a Recv is posted at no cost and completes `o` of CPU time after both its posting and
//!   the arrival of its message; messages above `eager` bytes wait for the receive's
//!   posting (a rendezvous round trip) and the Send completes only on delivery;
//! - Copy, Reduce and Fetch cost their bytes on the CPU; a Post publishes the rank's flag;
//!   a Watch completes `flag` after the watched ranks published the phase.
//!
//! Send/Recv matching is sim.rs's: per (source, destination, tag offset) channel, in the
//! order the builder created them, and a channel's actions are posted in that order.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};

use super::{ALL_PEERS, Action, Data, Schedule};
use crate::platform::abi::builtin_size;

/// LogGP parameters of one level, in microseconds (`big_g`: per byte).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LogGP {
    pub l: f64,
    pub o: f64,
    pub g: f64,
    pub big_g: f64,
}

/// The costs of every kind of action.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Levels {
    /// Messages between ranks of one node (the MPI library's shared-memory path).
    pub intra: LogGP,
    /// Messages between nodes.
    pub inter: LogGP,
    pub copy_per_byte: f64,
    pub gamma_per_byte: f64,
    /// From a Post until a Watch on the node sees it (a cache line's trip).
    pub flag: f64,
    /// Fixed cost of one `process_vm_readv`.
    pub cma_call: f64,
    pub cma_per_byte: f64,
    /// Cost of an Expose (a few stores into the rank's slot).
    pub expose: f64,
    /// Messages above this many bytes take the rendezvous path (infinite: never).
    pub eager: f64,
}

/// What a simulation predicts.
#[derive(Clone, Debug)]
pub struct Outcome {
    /// When each rank's last action completed (all start at 0).
    pub finish: Vec<f64>,
    /// The latest of them: the collective's time.
    pub max: f64,
    /// Actions simulated, for the caller's bookkeeping of work.
    pub actions: usize,
}

/// A multiplicative hasher: the channel table holds millions of small integer keys, for
/// which SipHash would dominate the run time.
#[derive(Default)]
struct Mix(u64);
impl Hasher for Mix {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(b as u64);
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = (self.0.rotate_left(5) ^ v).wrapping_mul(0x517c_c1b7_2722_0a95);
    }
    fn write_u32(&mut self, v: u32) {
        self.write_u64(v as u64);
    }
    fn write_i32(&mut self, v: i32) {
        self.write_u64(v as u32 as u64);
    }
    fn write_usize(&mut self, v: usize) {
        self.write_u64(v as u64);
    }
}
type Fast<K, V> = HashMap<K, V, BuildHasherDefault<Mix>>;

/// Bytes of a message's data (a composite: the sum of its blocks).
fn bytes_of(s: &Schedule, d: &Data) -> Result<f64, String> {
    let size = |dt| {
        builtin_size(dt)
            .map(|n| n as f64)
            .ok_or_else(|| format!("timing: unsupported datatype {dt:#x}"))
    };
    match super::composite_index(d.dt) {
        Some(k) => {
            let mut sum = 0.0;
            for p in &s.composites[k] {
                sum += p.count as f64 * size(p.dt)?;
            }
            Ok(sum * d.count as f64)
        }
        None => Ok(d.count as f64 * size(d.dt)?),
    }
}

/// Event kinds; at equal times the lower one goes first, so that everything that becomes
/// ready at an instant is seen by the CPU's choice at that instant.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    /// Action `v` of the rank completed.
    Done = 0,
    /// A receive's message is there (and the receive posted): its completion may run.
    Arrived = 1,
    /// The rank's CPU is free: it takes the lowest ready task.
    Cpu = 2,
}

#[derive(Clone, Copy)]
struct Event {
    t: f64,
    kind: Kind,
    seq: u64,
    rank: u32,
    v: u32,
}
// ordered by time, then kind, then creation: the run is deterministic
impl PartialEq for Event {
    fn eq(&self, o: &Self) -> bool {
        self.cmp(o).is_eq()
    }
}
impl Eq for Event {}
impl PartialOrd for Event {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Event {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        self.t
            .total_cmp(&o.t)
            .then(self.kind.cmp(&o.kind))
            .then(self.seq.cmp(&o.seq))
    }
}

/// A matched or waiting message end: a send's (departure info) or a receive's posting.
#[derive(Clone, Copy)]
struct SendEnd {
    rank: u32,
    v: u32,
    /// When the send was handed over (its CPU overhead paid).
    t: f64,
    bytes: f64,
    /// An eager message's arrival, known when it leaves; a rendezvous one's is known only
    /// once its receive is posted.
    arrive: Option<f64>,
}
#[derive(Clone, Copy)]
struct RecvEnd {
    rank: u32,
    v: u32,
    t: f64,
}

#[derive(Default)]
struct Chan {
    sends: VecDeque<SendEnd>,
    recvs: VecDeque<RecvEnd>,
}

/// One rank's state.
struct Cpu {
    remaining: Vec<u32>,
    /// Posted (for channel order): sends and receives only.
    posted: Vec<bool>,
    /// Waiting for its channel predecessor's posting.
    blocked: Vec<bool>,
    /// Ready tasks: `v << 1` starts action v, `v << 1 | 1` completes receive v.
    ready: BinaryHeap<Reverse<u64>>,
    free_at: f64,
    cpu_pending: bool,
    /// Per level (intra, inter): when the next message may leave.
    nic: [f64; 2],
    done: usize,
    finish: f64,
    /// Earliest time the flag reached each phase (infinite: not yet).
    flag_at: Vec<f64>,
}

const PHASES: usize = 16;

/// A Watch waiting for flags: how many ranks it still needs and the latest post seen.
struct Waiter {
    rank: u32,
    v: u32,
    phase: u8,
    left: u32,
    latest: f64,
    started: f64,
}

/// Runs the schedules (one per rank; `node_of[r]`, `local_of[r]`: rank r's node and its
/// index there) and returns when each rank finishes. A deadlock is an error.
pub fn simulate(
    scheds: &[Schedule],
    node_of: &[u32],
    local_of: &[u32],
    lv: &Levels,
) -> Result<Outcome, String> {
    let p = scheds.len();
    if node_of.len() != p || local_of.len() != p {
        return Err("timing: one node and local index per rank".into());
    }
    let nnodes = node_of.iter().map(|&n| n as usize + 1).max().unwrap_or(0);
    let mut members: Vec<Vec<u32>> = vec![Vec::new(); nnodes];
    for r in 0..p {
        let m = &mut members[node_of[r] as usize];
        let l = local_of[r] as usize;
        if m.len() <= l {
            m.resize(l + 1, u32::MAX);
        }
        m[l] = r as u32;
    }
    let mut cpus: Vec<Cpu> = scheds
        .iter()
        .map(|s| Cpu {
            remaining: s.indeg.clone(),
            posted: vec![false; s.len()],
            blocked: vec![false; s.len()],
            ready: BinaryHeap::new(),
            free_at: 0.0,
            cpu_pending: false,
            nic: [0.0; 2],
            done: 0,
            finish: 0.0,
            flag_at: vec![f64::INFINITY; PHASES],
        })
        .collect();
    let mut net = Net {
        node_of,
        lv,
        link_out: vec![0.0; nnodes],
        link_in: vec![0.0; nnodes],
    };
    let mut chans: Fast<(u32, u32, i32), Chan> = Fast::default();
    // watchers of a rank's flag
    let mut watchers: Vec<Vec<usize>> = vec![Vec::new(); p];
    let mut waiters: Vec<Waiter> = Vec::new();
    let mut q: BinaryHeap<Reverse<Event>> = BinaryHeap::new();
    let mut seq = 0u64;
    let mut push = |q: &mut BinaryHeap<Reverse<Event>>, t: f64, kind: Kind, rank: u32, v: u32| {
        seq += 1;
        q.push(Reverse(Event {
            t,
            kind,
            seq,
            rank,
            v,
        }));
    };
    // a task became ready at t: the CPU looks at it when free
    fn wake(
        c: &mut Cpu,
        t: f64,
        rank: u32,
        q: &mut BinaryHeap<Reverse<Event>>,
        push: &mut impl FnMut(&mut BinaryHeap<Reverse<Event>>, f64, Kind, u32, u32),
    ) {
        if !c.cpu_pending {
            c.cpu_pending = true;
            push(q, t.max(c.free_at), Kind::Cpu, rank, 0);
        }
    }
    for (r, s) in scheds.iter().enumerate() {
        for v in 0..s.len() {
            if s.indeg[v] == 0 {
                cpus[r].ready.push(Reverse((v as u64) << 1));
            }
        }
        if !cpus[r].ready.is_empty() {
            wake(&mut cpus[r], 0.0, r as u32, &mut q, &mut push);
        }
    }
    let mut total = 0usize;
    while let Some(Reverse(ev)) = q.pop() {
        let t = ev.t;
        let rank = ev.rank as usize;
        let s = &scheds[rank];
        match ev.kind {
            Kind::Done => {
                let c = &mut cpus[rank];
                c.done += 1;
                total += 1;
                c.finish = c.finish.max(t);
                let mut any = false;
                for &n in s.successors(ev.v) {
                    c.remaining[n as usize] -= 1;
                    if c.remaining[n as usize] == 0 {
                        c.ready.push(Reverse((n as u64) << 1));
                        any = true;
                    }
                }
                if any {
                    wake(c, t, ev.rank, &mut q, &mut push);
                }
            }
            Kind::Arrived => {
                let c = &mut cpus[rank];
                c.ready.push(Reverse(((ev.v as u64) << 1) | 1));
                wake(c, t, ev.rank, &mut q, &mut push);
            }
            Kind::Cpu => {
                cpus[rank].cpu_pending = false;
                let Some(Reverse(task)) = cpus[rank].ready.pop() else {
                    continue;
                };
                let v = (task >> 1) as u32;
                let mut cost = 0.0;
                if task & 1 == 1 {
                    // a receive's completion: its overhead on this CPU
                    cost = lv.intra.o;
                    if let Action::Recv { peer, .. } = s.actions[v as usize] {
                        if node_of[peer as usize] != node_of[rank] {
                            cost = lv.inter.o;
                        }
                    }
                    push(&mut q, t + cost, Kind::Done, ev.rank, v);
                } else {
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
                                if !cpus[rank].posted[prev as usize] {
                                    // posted with its predecessor (channel order)
                                    cpus[rank].blocked[v as usize] = true;
                                    end_cpu(&mut cpus[rank], t, ev.rank, &mut q, &mut push);
                                    continue;
                                }
                            }
                            if peer < 0 || peer as usize >= p {
                                return Err(format!("rank {rank}: peer {peer} out of range"));
                            }
                            let send = matches!(s.actions[v as usize], Action::Send { .. });
                            cpus[rank].posted[v as usize] = true;
                            if let Some(n) = s.next_on_channel(v) {
                                if cpus[rank].blocked[n as usize] {
                                    cpus[rank].blocked[n as usize] = false;
                                    cpus[rank].ready.push(Reverse((n as u64) << 1));
                                }
                            }
                            let peer = peer as usize;
                            let remote = node_of[peer] != node_of[rank];
                            let ll = if remote { &lv.inter } else { &lv.intra };
                            let key = if send {
                                (rank as u32, peer as u32, tag_offset)
                            } else {
                                (peer as u32, rank as u32, tag_offset)
                            };
                            let ch = chans.entry(key).or_default();
                            if send {
                                cost = ll.o;
                                let bytes = bytes_of(s, &data)?;
                                let arrive = (bytes <= lv.eager)
                                    .then(|| net.carry(&mut cpus, rank, peer, t + cost, bytes));
                                ch.sends.push_back(SendEnd {
                                    rank: ev.rank,
                                    v,
                                    t: t + cost,
                                    bytes,
                                    arrive,
                                });
                                if bytes <= lv.eager {
                                    // eager: the buffer is free once handed over
                                    push(&mut q, t + cost, Kind::Done, ev.rank, v);
                                }
                            } else {
                                ch.recvs.push_back(RecvEnd {
                                    rank: ev.rank,
                                    v,
                                    t,
                                });
                            }
                            // match the channel's heads, in order
                            while let (Some(&se), Some(&re)) = (ch.sends.front(), ch.recvs.front())
                            {
                                ch.sends.pop_front();
                                ch.recvs.pop_front();
                                let arrive = match se.arrive {
                                    Some(a) => a,
                                    None => {
                                        let (src, dst) = (se.rank as usize, re.rank as usize);
                                        let ll = if node_of[src] != node_of[dst] {
                                            &lv.inter
                                        } else {
                                            &lv.intra
                                        };
                                        // request to send, clear to send: two latencies
                                        let ready = (se.t + ll.l).max(re.t) + ll.l;
                                        net.carry(&mut cpus, src, dst, ready, se.bytes)
                                    }
                                };
                                let rdv = se.arrive.is_none();
                                if rdv {
                                    push(&mut q, arrive.max(t), Kind::Done, se.rank, se.v);
                                }
                                push(
                                    &mut q,
                                    arrive.max(re.t).max(t),
                                    Kind::Arrived,
                                    re.rank,
                                    re.v,
                                );
                            }
                            if !send {
                                // posting a receive costs nothing; its completion does
                                end_cpu(&mut cpus[rank], t, ev.rank, &mut q, &mut push);
                                continue;
                            }
                        }
                        Action::Copy { src, .. } => {
                            cost = bytes_of(s, &src)? * lv.copy_per_byte;
                            push(&mut q, t + cost, Kind::Done, ev.rank, v);
                        }
                        Action::Reduce { count, dt, .. } => {
                            let n = count as f64
                                * builtin_size(dt).ok_or("timing: unsupported datatype")? as f64;
                            cost = n * lv.gamma_per_byte;
                            push(&mut q, t + cost, Kind::Done, ev.rank, v);
                        }
                        Action::Fetch { bytes, .. } => {
                            cost = lv.cma_call + bytes as f64 * lv.cma_per_byte;
                            push(&mut q, t + cost, Kind::Done, ev.rank, v);
                        }
                        Action::Expose { .. } => {
                            cost = lv.expose;
                            push(&mut q, t + cost, Kind::Done, ev.rank, v);
                        }
                        Action::Nop | Action::Claim | Action::Release | Action::Length { .. } => {
                            push(&mut q, t, Kind::Done, ev.rank, v);
                        }
                        Action::Post { phase } => {
                            let ph = phase as usize;
                            if ph >= PHASES {
                                return Err(format!("rank {rank}: phase {ph} out of range"));
                            }
                            // flags only grow: reaching `ph` reaches every phase below
                            let c = &mut cpus[rank];
                            for f in c.flag_at[..=ph].iter_mut() {
                                if f.is_infinite() {
                                    *f = t;
                                }
                            }
                            for &w in &watchers[rank] {
                                let wt = &mut waiters[w];
                                if wt.left > 0 && wt.phase as usize <= ph {
                                    wt.left -= 1;
                                    wt.latest = wt.latest.max(t);
                                    if wt.left == 0 {
                                        let at = (wt.latest + lv.flag).max(wt.started);
                                        push(&mut q, at, Kind::Done, wt.rank, wt.v);
                                    }
                                }
                            }
                            watchers[rank].retain(|&w| waiters[w].left > 0);
                            push(&mut q, t, Kind::Done, ev.rank, v);
                        }
                        Action::Watch { peer, phase } => {
                            let node = node_of[rank] as usize;
                            let me = local_of[rank];
                            let peers: Vec<u32> = if peer == ALL_PEERS {
                                members[node]
                                    .iter()
                                    .enumerate()
                                    .filter(|&(l, _)| l as u32 != me)
                                    .map(|(_, &r)| r)
                                    .collect()
                            } else {
                                match members[node].get(peer as usize) {
                                    Some(&r) if r != u32::MAX => vec![r],
                                    _ => {
                                        return Err(format!(
                                            "rank {rank}: watches local rank {peer}, not on its node"
                                        ));
                                    }
                                }
                            };
                            let ph = (phase as usize).min(PHASES - 1);
                            let id = waiters.len();
                            let mut wt = Waiter {
                                rank: ev.rank,
                                v,
                                phase,
                                left: 0,
                                latest: f64::NEG_INFINITY,
                                started: t,
                            };
                            for &r in &peers {
                                let at = cpus[r as usize].flag_at[ph];
                                if at.is_finite() {
                                    wt.latest = wt.latest.max(at);
                                } else {
                                    wt.left += 1;
                                    watchers[r as usize].push(id);
                                }
                            }
                            if wt.left == 0 {
                                let at = if wt.latest.is_finite() {
                                    (wt.latest + lv.flag).max(t)
                                } else {
                                    t
                                };
                                push(&mut q, at, Kind::Done, ev.rank, v);
                            }
                            waiters.push(wt);
                        }
                    }
                }
                let c = &mut cpus[rank];
                c.free_at = t + cost;
                if !c.ready.is_empty() {
                    c.cpu_pending = true;
                    push(&mut q, c.free_at, Kind::Cpu, ev.rank, 0);
                }
            }
        }
    }
    for (r, c) in cpus.iter().enumerate() {
        if c.done != scheds[r].len() {
            let stuck: Vec<String> = (0..scheds[r].len())
                .filter(|&v| c.remaining[v] == 0)
                .filter(|&v| {
                    matches!(
                        scheds[r].actions[v],
                        Action::Send { .. } | Action::Recv { .. } | Action::Watch { .. }
                    )
                })
                .take(4)
                .map(|v| format!("#{v} {:?}", scheds[r].actions[v]))
                .collect();
            return Err(format!(
                "timing: deadlock: rank {r} ({}) finished {} of {} actions; waiting: {}",
                scheds[r].algorithm,
                c.done,
                scheds[r].len(),
                stuck.join(", ")
            ));
        }
    }
    let finish: Vec<f64> = cpus.iter().map(|c| c.finish).collect();
    let max = finish.iter().copied().fold(0.0, f64::max);
    Ok(Outcome {
        finish,
        max,
        actions: total,
    })
}

/// The wires: per node, when its link is next free out and in (its ranks share it).
struct Net<'a> {
    node_of: &'a [u32],
    lv: &'a Levels,
    link_out: Vec<f64>,
    link_in: Vec<f64>,
}

impl Net<'_> {
    /// A message of `bytes` from `src` to `dst` that may leave at `ready`: when it arrives.
    fn carry(&mut self, cpus: &mut [Cpu], src: usize, dst: usize, ready: f64, bytes: f64) -> f64 {
        let (ns, nd) = (self.node_of[src] as usize, self.node_of[dst] as usize);
        let remote = ns != nd;
        let ll = if remote {
            &self.lv.inter
        } else {
            &self.lv.intra
        };
        let lvl = remote as usize;
        let wire = ll.big_g * bytes;
        let mut depart = ready.max(cpus[src].nic[lvl]);
        if remote {
            depart = depart.max(self.link_out[ns]);
            self.link_out[ns] = depart + wire;
        }
        cpus[src].nic[lvl] = depart + ll.g.max(wire);
        let mut arrive = depart + ll.l + wire;
        if remote {
            arrive = arrive.max(self.link_in[nd] + wire);
            self.link_in[nd] = arrive;
        }
        arrive
    }
}

/// The CPU took a task that costs nothing (a posting, a blocked one): it looks again now.
fn end_cpu(
    c: &mut Cpu,
    t: f64,
    rank: u32,
    q: &mut BinaryHeap<Reverse<Event>>,
    push: &mut impl FnMut(&mut BinaryHeap<Reverse<Event>>, f64, Kind, u32, u32),
) {
    c.free_at = t;
    if !c.ready.is_empty() {
        c.cpu_pending = true;
        push(q, t, Kind::Cpu, rank, 0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::sched::{Addr, Builder};
    use crate::platform::abi::MPI_BYTE;

    const INTER: LogGP = LogGP {
        l: 2.0,
        o: 0.5,
        g: 0.3,
        big_g: 1e-3,
    };

    fn levels() -> Levels {
        Levels {
            intra: LogGP {
                l: 0.3,
                o: 0.2,
                g: 0.1,
                big_g: 1e-4,
            },
            inter: INTER,
            copy_per_byte: 1e-4,
            gamma_per_byte: 2e-4,
            flag: 0.06,
            cma_call: 0.5,
            cma_per_byte: 1e-4,
            expose: 0.01,
            eager: f64::INFINITY,
        }
    }

    fn bytes(n: i64) -> Data {
        Data::new(Addr::recv(0), n, MPI_BYTE())
    }

    /// Every rank on its own node.
    fn apart(p: usize) -> (Vec<u32>, Vec<u32>) {
        ((0..p as u32).collect(), vec![0; p])
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    #[test]
    fn a_ping_takes_latency_two_overheads_and_the_bytes() {
        let m = 1000;
        let mut b0 = Builder::new("ping");
        b0.send(bytes(m), 1, &[]);
        let mut b1 = Builder::new("ping");
        b1.recv(bytes(m), 0, &[]);
        let (n, l) = apart(2);
        let out = simulate(&[b0.finish(), b1.finish()], &n, &l, &levels()).unwrap();
        let want = INTER.l + 2.0 * INTER.o + INTER.big_g * m as f64;
        assert!(close(out.max, want), "{} != {want}", out.max);
        assert!(close(out.finish[0], INTER.o), "the sender is done after o");
    }

    #[test]
    fn a_rendezvous_waits_for_the_receive() {
        let mut lv = levels();
        lv.eager = 0.0;
        let mut b0 = Builder::new("ping");
        b0.send(bytes(8), 1, &[]);
        let mut b1 = Builder::new("ping");
        b1.recv(bytes(8), 0, &[]);
        let (n, l) = apart(2);
        let out = simulate(&[b0.finish(), b1.finish()], &n, &l, &lv).unwrap();
        let want = 3.0 * INTER.l + 2.0 * INTER.o + INTER.big_g * 8.0;
        assert!(close(out.max, want), "{} != {want}", out.max);
    }

    /// Binomial tree from 0 (the shape of `bcast::knomial` with k = 2): receive from the
    /// parent, then send to the children, farthest subtree first.
    fn binomial(p: i32, me: i32, m: i64) -> Schedule {
        let mut b = Builder::new("binomial");
        let mut after = Vec::new();
        let mut mask = 1;
        while mask < p {
            if me & mask != 0 {
                after.push(b.recv(bytes(m), me - mask, &[]));
                break;
            }
            mask <<= 1;
        }
        mask >>= 1;
        while mask > 0 {
            if me + mask < p {
                b.send(bytes(m), me + mask, &after);
            }
            mask >>= 1;
        }
        b.finish()
    }

    #[test]
    fn a_binomial_bcast_takes_log_p_hops() {
        let p = 8;
        let scheds: Vec<Schedule> = (0..p).map(|r| binomial(p, r, 8)).collect();
        let (n, l) = apart(p as usize);
        let out = simulate(&scheds, &n, &l, &levels()).unwrap();
        let hop = INTER.l + 2.0 * INTER.o + INTER.big_g * 8.0;
        // three hops on the critical path, plus the senders' gaps between children
        assert!(out.max >= 3.0 * hop - 1e-9, "{}", out.max);
        assert!(
            out.max <= 3.0 * hop + 3.0 * INTER.o.max(INTER.g),
            "{}",
            out.max
        );
    }

    #[test]
    fn a_watch_sees_a_post_after_the_flag_latency() {
        let mut b0 = Builder::new("flags");
        b0.post(1, &[]);
        let mut b1 = Builder::new("flags");
        b1.watch(0, 1, &[]);
        let mut b2 = Builder::new("flags");
        b2.watch(ALL_PEERS, 1, &[]);
        let scheds = [b0.finish(), b1.finish(), b2.finish()];
        // b2 waits for rank 1 too, which never posts: give it its own post first
        let out = simulate(&scheds[..2], &[0, 0], &[0, 1], &levels()).unwrap();
        assert!(close(out.finish[1], levels().flag), "{:?}", out.finish);
        let err = simulate(&scheds, &[0, 0, 0], &[0, 1, 2], &levels()).unwrap_err();
        assert!(err.contains("deadlock"), "{err}");
    }

    #[test]
    fn local_work_runs_one_action_at_a_time() {
        let lv = levels();
        let mut b = Builder::new("local");
        let c = b.copy(bytes(1000), bytes(1000), &[]);
        let c2 = b.copy(bytes(1000), bytes(1000), &[]);
        b.fetch(0, Addr::shm(0), 0, Addr::recv(0), 100, &[c, c2]);
        let out = simulate(&[b.finish()], &[0], &[0], &lv).unwrap();
        let want = 2.0 * 1000.0 * lv.copy_per_byte + lv.cma_call + 100.0 * lv.cma_per_byte;
        assert!(close(out.max, want), "{} != {want}", out.max);
    }

    #[test]
    fn ranks_of_a_node_share_its_link() {
        // two ranks of node 0 send 1000 bytes each to node 1: the second waits for the
        // first's bytes on the link
        let m = 1000;
        let mk = |send: bool, peer: i32| {
            let mut b = Builder::new("share");
            if send {
                b.send(bytes(m), peer, &[]);
            } else {
                b.recv(bytes(m), peer, &[]);
            }
            b.finish()
        };
        let scheds = [mk(true, 2), mk(true, 3), mk(false, 0), mk(false, 1)];
        let out = simulate(&scheds, &[0, 0, 1, 1], &[0, 1, 0, 1], &levels()).unwrap();
        let one = INTER.l + 2.0 * INTER.o + INTER.big_g * m as f64;
        assert!(close(out.finish[2], one));
        assert!(
            close(out.finish[3], one + INTER.big_g * m as f64),
            "{:?}",
            out.finish
        );
    }
}

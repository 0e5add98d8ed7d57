//! Layer: core. May use: platform.
//!
//! Collective schedules (LibNBC-style, Hoefler digest §2-4), as a dependency DAG.
//!
//! A schedule is a list of actions (send, receive, typed copy, local reduction, no-op),
//! each with the actions it depends on. An action starts when its dependencies have
//! completed; a send or receive completes when its `PMPI_Isend`/`PMPI_Irecv` request
//! does. The DAG was chosen over strict rounds (design notes §8.2) because pipelines and
//! trees then need no artificial barriers; a round is just a `nop` that depends on the
//! previous round's actions.
//!
//! Addresses are offsets from three bases, bound only when a schedule runs: the caller's
//! send buffer, receive buffer, and a scratch arena the run owns. A built schedule is
//! therefore independent of the buffers and can be cached and re-run (repeated calls with
//! the same arguments, persistent collectives).
//!
//! Several blocks can travel as one message ([`Builder::blocks`]): the builder records
//! the blocks under a schedule-local "composite" datatype handle, and the engine turns
//! it into an MPI struct datatype once per schedule (freed with the schedule). Both sides
//! of such a message list the same blocks in the same order, so the type signatures
//! match whatever layout each side's buffers have.
//!
//! Matching: all messages of one collective instance use one tag on the communicator's
//! private shadow (plus `tag_offset`, for Cartesian neighbourhood collectives), so two
//! messages between the same pair are told apart only by order. The engine therefore
//! posts the sends to one peer, and the receives from one peer, in the order the builder
//! created them (the "channel order"), whatever order their dependencies complete in.

pub mod cache;
pub mod run;
#[cfg(test)]
pub mod sim;
#[cfg(test)]
pub mod timing;

use core::ffi::c_int;
use std::sync::OnceLock;

pub use crate::core::dtype::Part;
use crate::platform::abi::{MPI_Datatype, MPI_Op};

pub use crate::platform::abi::{composite_handle, composite_index};

/// Whether `dt` is a schedule-local composite handle (`crate::platform::abi::composite_handle`).
pub fn is_composite(dt: MPI_Datatype) -> bool {
    composite_index(dt).is_some()
}

/// Which buffer an address is relative to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Base {
    Send = 0,
    Recv = 1,
    Scratch = 2,
    /// The run's region of its communicator's shared-memory segment
    /// (`core::transport::node`): rank r's data slot starts at `r * cell + node::DATA`.
    Shm = 3,
}

/// A byte address relative to a base (may be negative: a datatype's lower bound).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Addr {
    pub base: Base,
    pub off: isize,
}

impl Addr {
    pub const fn send(off: i64) -> Addr {
        Addr {
            base: Base::Send,
            off: off as isize,
        }
    }
    pub const fn recv(off: i64) -> Addr {
        Addr {
            base: Base::Recv,
            off: off as isize,
        }
    }
    pub const fn scratch(off: i64) -> Addr {
        Addr {
            base: Base::Scratch,
            off: off as isize,
        }
    }
    pub const fn shm(off: i64) -> Addr {
        Addr {
            base: Base::Shm,
            off: off as isize,
        }
    }
    /// The same base, `bytes` further.
    pub const fn add(self, bytes: i64) -> Addr {
        Addr {
            base: self.base,
            off: self.off + bytes as isize,
        }
    }
}

/// `count` elements of `dt` at `addr`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Data {
    pub addr: Addr,
    pub count: i64,
    pub dt: MPI_Datatype,
}

impl Data {
    pub const fn new(addr: Addr, count: i64, dt: MPI_Datatype) -> Data {
        Data { addr, count, dt }
    }
    /// The same datatype and address, `count` elements.
    pub const fn with_count(self, count: i64) -> Data {
        Data { count, ..self }
    }
}

/// One step of a schedule.
#[derive(Clone, Copy, Debug)]
pub enum Action {
    Send {
        data: Data,
        peer: c_int,
        tag_offset: c_int,
    },
    Recv {
        data: Data,
        peer: c_int,
        tag_offset: c_int,
    },
    /// Typed copy between matching type signatures.
    Copy {
        src: Data,
        dst: Data,
    },
    /// `dst = src op dst` (the `MPI_Reduce_local` argument order).
    Reduce {
        src: Addr,
        dst: Addr,
        count: i64,
        dt: MPI_Datatype,
        op: MPI_Op,
    },
    Nop,
    /// Shared memory: publishes this rank's flag at `phase` (1 to `node::PHASES - 2`) of the
    /// run's instance (what it wrote before is then visible to the ranks that watch it).
    Post {
        phase: u8,
    },
    /// Shared memory: waits until rank `peer`'s flag (every other rank's, with
    /// [`ALL_PEERS`]) reaches `phase` of the run's instance.
    Watch {
        peer: c_int,
        phase: u8,
    },
    /// Shared memory: waits until every rank is done with the previous instance that used
    /// the run's region. A rank's writes into its own cell (its slot, its flag) depend on
    /// it. A rank that only reads other cells needs none: each read waits for the writer's
    /// flag of this instance, which the writer publishes only after its own claim, and its
    /// acknowledgement is its own line, written in order (a root's Bcast or Scatter
    /// part, a Gather root's: one cache miss per rank per call less).
    Claim,
    /// Shared memory: tells the other ranks that this rank is done with the region (its
    /// slot may be overwritten, its reads are over).
    Release,
    /// Single copy: writes where `src` is in this process (an address) at `at`, in this
    /// rank's own slot, for the ranks that [`Action::Fetch`] from it. The bytes there must
    /// stay as they are until those ranks say they are done.
    Expose {
        src: Addr,
        at: Addr,
    },
    /// Shared memory: a rooted collective's size check (MPI-4.0 §6.1: the amount of data
    /// sent must equal the amount received). The root writes its `bytes` at `at`, in its
    /// own slot; a receiver (`check`) reads the root's there after its flag and reports
    /// `MPI_ERR_TRUNCATE` where they exceed its own `bytes`, as the library does.
    Length {
        at: Addr,
        bytes: i64,
        check: bool,
    },
    /// Single copy: `bytes` bytes from rank `peer`'s memory, `off` bytes after the address
    /// it exposed at `at` (in its slot), into `dst` here, with one `process_vm_readv`.
    Fetch {
        peer: c_int,
        at: Addr,
        off: i64,
        dst: Addr,
        bytes: i64,
    },
}

/// `Action::Watch` of every rank but this one.
pub const ALL_PEERS: c_int = -1;

/// Index of an action in its schedule (a vertex of the DAG): what builders return for
/// each action they add and take as dependencies.
pub type ActionId = u32;
const NONE: u32 = u32::MAX;

/// A built, immutable schedule.
#[derive(Debug)]
pub struct Schedule {
    pub actions: Vec<Action>,
    /// Number of dependencies of each action.
    pub indeg: Vec<u32>,
    /// Successors of action `v`: `succ[succ_start[v]..succ_start[v + 1]]`.
    pub succ_start: Vec<u32>,
    pub succ: Vec<u32>,
    /// The previous / next action on the same (peer, direction, tag offset) channel.
    pub chan_prev: Vec<u32>,
    pub chan_next: Vec<u32>,
    /// Scratch bytes a run needs.
    pub scratch: usize,
    /// Tags one instance uses (tag offsets are below this).
    pub ntags: c_int,
    /// Name of the algorithm, for `SHIM_STATS`.
    pub algorithm: &'static str,
    /// Whether its actions use the communicator's shared-memory segment (a run then needs
    /// its place there, `run::Run::in_shm`).
    pub shm: bool,
    /// Whether it has messages (`Send`, `Recv`): a run without any leaves the library
    /// nothing to do (`core::request::library_traffic`).
    pub messages: bool,
    /// The blocks of each composite datatype (see [`Builder::blocks`]).
    pub composites: Vec<Vec<Part>>,
    /// The MPI datatypes made from `composites`, created on first use.
    types: OnceLock<Result<Vec<MPI_Datatype>, c_int>>,
    /// `needs_progress` at the configured `SHIM_PROGRESS_MIN_BYTES`, found on first use
    /// (a cached or persistent schedule is started many times).
    for_thread: OnceLock<bool>,
    /// References on the application's derived datatypes and user operations that the
    /// actions use: the application may free them while a run is pending
    /// (`crate::core::retain`).
    _retained: Vec<crate::core::retain::Retained>,
}

impl Drop for Schedule {
    fn drop(&mut self) {
        if let Some(Ok(types)) = self.types.get() {
            crate::core::dtype::free_types(types);
        }
    }
}

impl Schedule {
    /// The MPI datatype to post for `dt`: itself, or the struct type of a composite.
    pub fn mpi_type(&self, dt: MPI_Datatype) -> Result<MPI_Datatype, c_int> {
        if !is_composite(dt) {
            return Ok(dt);
        }
        let types = self
            .types
            .get_or_init(|| crate::core::dtype::struct_types(&self.composites));
        match types {
            Ok(t) => Ok(t[composite_index(dt).unwrap_or_default()]),
            Err(e) => Err(*e),
        }
    }

    pub fn len(&self) -> usize {
        self.actions.len()
    }
    pub fn is_empty(&self) -> bool {
        self.actions.is_empty()
    }

    /// Whether a run of this schedule needs someone to act between MPI calls to finish
    /// (`SHIM_PROGRESS_MIN_BYTES`): a message that waits for another message (a second
    /// round), or a message larger than `min_bytes` (the MPI library's rendezvous wants the
    /// peers to take part). A single round of small messages is posted when the collective
    /// starts (local copies ahead of it run then too) and completes without help.
    pub fn needs_progress(&self, min_bytes: i64) -> bool {
        if min_bytes == 0 {
            return true;
        }
        // after_msg[v]: some message precedes action v (builders add an action after its
        // dependencies, so index order is a topological order)
        let mut after_msg = vec![false; self.actions.len()];
        for (v, a) in self.actions.iter().enumerate() {
            let msg = match a {
                Action::Send { data, .. } | Action::Recv { data, .. } => {
                    if after_msg[v] || self.message_bytes(data) > min_bytes {
                        return true;
                    }
                    true
                }
                // a shared-memory wait: someone must poll the flag
                Action::Watch { .. } => return true,
                _ => false,
            };
            if msg || after_msg[v] {
                for &s in self.successors(v as ActionId) {
                    after_msg[s as usize] = true;
                }
            }
        }
        false
    }

    /// Whether the progress thread takes runs of this schedule on: `needs_progress` at
    /// `SHIM_PROGRESS_MIN_BYTES`, computed once per schedule.
    pub fn for_progress_thread(&self) -> bool {
        *self.for_thread.get_or_init(|| {
            self.needs_progress(PROGRESS_MIN_BYTES.load(std::sync::atomic::Ordering::Relaxed))
        })
    }

    /// Bytes of one message (a composite message: the sum of its blocks).
    fn message_bytes(&self, d: &Data) -> i64 {
        let size = |count: i64, dt: MPI_Datatype| {
            crate::core::dtype::info(dt).map_or(i64::MAX, |i| count.saturating_mul(i.size))
        };
        match composite_index(d.dt) {
            Some(k) => self.composites[k]
                .iter()
                .map(|p| size(p.count, p.dt))
                .fold(0i64, i64::saturating_add)
                .saturating_mul(d.count),
            _ => size(d.count, d.dt),
        }
    }

    pub fn successors(&self, v: ActionId) -> &[ActionId] {
        &self.succ[self.succ_start[v as usize] as usize..self.succ_start[v as usize + 1] as usize]
    }
    pub fn has_prev_on_channel(&self, v: ActionId) -> Option<ActionId> {
        let p = self.chan_prev[v as usize];
        (p != NONE).then_some(p)
    }
    pub fn next_on_channel(&self, v: ActionId) -> Option<ActionId> {
        let n = self.chan_next[v as usize];
        (n != NONE).then_some(n)
    }
}

/// `SHIM_PROGRESS_MIN_BYTES`: schedules that move less are left to the application's
/// calls when the progress thread runs. Handed over at init ([`configure`]).
static PROGRESS_MIN_BYTES: std::sync::atomic::AtomicI64 =
    std::sync::atomic::AtomicI64::new(64 * 1024);

/// Installs `SHIM_PROGRESS_MIN_BYTES` as read at init.
pub fn configure(progress_min_bytes: u64) {
    PROGRESS_MIN_BYTES.store(
        progress_min_bytes as i64,
        std::sync::atomic::Ordering::Relaxed,
    );
}

/// Builds a schedule; algorithms call it once per collective call (or cache the result).
#[derive(Default)]
pub struct Builder {
    actions: Vec<Action>,
    deps: Vec<Vec<ActionId>>,
    scratch: usize,
    ntags: c_int,
    algorithm: &'static str,
    composites: Vec<Vec<Part>>,
}

impl Builder {
    pub fn new(algorithm: &'static str) -> Builder {
        Builder {
            ntags: 1,
            algorithm,
            ..Default::default()
        }
    }

    fn push(&mut self, a: Action, deps: &[ActionId]) -> ActionId {
        let v = self.actions.len() as ActionId;
        debug_assert!(deps.iter().all(|&d| d < v), "dependencies must precede");
        self.actions.push(a);
        self.deps.push(deps.to_vec());
        v
    }

    pub fn send(&mut self, data: Data, peer: c_int, deps: &[ActionId]) -> ActionId {
        self.push(
            Action::Send {
                data,
                peer,
                tag_offset: 0,
            },
            deps,
        )
    }
    pub fn recv(&mut self, data: Data, peer: c_int, deps: &[ActionId]) -> ActionId {
        self.push(
            Action::Recv {
                data,
                peer,
                tag_offset: 0,
            },
            deps,
        )
    }
    pub fn send_tagged(
        &mut self,
        data: Data,
        peer: c_int,
        tag_offset: c_int,
        deps: &[ActionId],
    ) -> ActionId {
        self.ntags = self.ntags.max(tag_offset + 1);
        self.push(
            Action::Send {
                data,
                peer,
                tag_offset,
            },
            deps,
        )
    }
    pub fn recv_tagged(
        &mut self,
        data: Data,
        peer: c_int,
        tag_offset: c_int,
        deps: &[ActionId],
    ) -> ActionId {
        self.ntags = self.ntags.max(tag_offset + 1);
        self.push(
            Action::Recv {
                data,
                peer,
                tag_offset,
            },
            deps,
        )
    }
    pub fn copy(&mut self, src: Data, dst: Data, deps: &[ActionId]) -> ActionId {
        self.push(Action::Copy { src, dst }, deps)
    }
    /// `dst = src op dst`.
    pub fn reduce(
        &mut self,
        src: Addr,
        dst: Addr,
        count: i64,
        dt: MPI_Datatype,
        op: MPI_Op,
        deps: &[ActionId],
    ) -> ActionId {
        self.push(
            Action::Reduce {
                src,
                dst,
                count,
                dt,
                op,
            },
            deps,
        )
    }
    /// See [`Action::Length`].
    pub fn length(&mut self, at: Addr, bytes: i64, check: bool, deps: &[ActionId]) -> ActionId {
        self.push(Action::Length { at, bytes, check }, deps)
    }
    pub fn nop(&mut self, deps: &[ActionId]) -> ActionId {
        self.push(Action::Nop, deps)
    }
    pub fn post(&mut self, phase: u8, deps: &[ActionId]) -> ActionId {
        self.push(Action::Post { phase }, deps)
    }
    pub fn watch(&mut self, peer: c_int, phase: u8, deps: &[ActionId]) -> ActionId {
        self.push(Action::Watch { peer, phase }, deps)
    }
    pub fn claim(&mut self) -> ActionId {
        self.push(Action::Claim, &[])
    }
    pub fn release(&mut self, deps: &[ActionId]) -> ActionId {
        self.push(Action::Release, deps)
    }
    pub fn expose(&mut self, src: Addr, at: Addr, deps: &[ActionId]) -> ActionId {
        self.push(Action::Expose { src, at }, deps)
    }
    pub fn fetch(
        &mut self,
        peer: c_int,
        at: Addr,
        off: i64,
        dst: Addr,
        bytes: i64,
        deps: &[ActionId],
    ) -> ActionId {
        self.push(
            Action::Fetch {
                peer,
                at,
                off,
                dst,
                bytes,
            },
            deps,
        )
    }

    /// Reserves `bytes` of scratch (64-byte aligned) and returns its offset.
    pub fn scratch(&mut self, bytes: i64) -> i64 {
        let off = self.scratch.div_ceil(64) * 64;
        self.scratch = off + bytes.max(0) as usize;
        off as i64
    }

    /// Reserves scratch for `count` elements of a type and returns the address to hand to
    /// MPI (start minus the true lower bound, MPI-4.0 §5.1.8).
    pub fn scratch_for(&mut self, count: i64, ti: &crate::core::dtype::TypeInfo) -> Addr {
        let off = self.scratch(ti.span(count));
        Addr::scratch(off - ti.true_lb)
    }

    /// Names the algorithm (for builders that fall back to another one).
    pub fn rename(&mut self, algorithm: &'static str) {
        self.algorithm = algorithm;
    }

    /// Describes several blocks as the data of one message. `parts` are (address, count,
    /// datatype, extent), all relative to the same base, in message order; empty blocks
    /// are dropped and neighbours that continue each other with the same datatype are
    /// merged. Returns plain data when one block remains (a count of 0 when none does).
    pub fn blocks(&mut self, parts: &[(Addr, i64, MPI_Datatype, i64)]) -> Data {
        let mut out: Vec<(Addr, i64, MPI_Datatype, i64)> = Vec::new();
        for &(a, n, dt, ext) in parts.iter().filter(|p| p.1 > 0) {
            if let Some(last) = out.last_mut() {
                assert_eq!(last.0.base, a.base, "one message, one base");
                if last.2 == dt && last.0.off + (last.1 * last.3) as isize == a.off {
                    last.1 += n;
                    continue;
                }
            }
            out.push((a, n, dt, ext));
        }
        match out.len() {
            0 => Data::new(
                parts.first().map_or(Addr::recv(0), |p| p.0),
                0,
                crate::platform::abi::MPI_BYTE(),
            ),
            1 => Data::new(out[0].0, out[0].1, out[0].2),
            _ => {
                let id = self.composites.len();
                assert!(id < 1 << 24, "too many composite messages");
                self.composites.push(
                    out.iter()
                        .map(|&(a, count, dt, _)| Part {
                            off: a.off,
                            count,
                            dt,
                        })
                        .collect(),
                );
                Data::new(
                    Addr {
                        base: out[0].0.base,
                        off: 0,
                    },
                    1,
                    composite_handle(id),
                )
            }
        }
    }

    /// Appends `sub`, a point-to-point schedule built for a subset of the ranks (the nodes'
    /// leaders of a two-level collective), as a part of this one: its rank `k` is
    /// `peers[k]` here, its send and receive buffers are at `send` and `recv`, its scratch
    /// is reserved here, and its first actions depend on `deps`. Returns an action that
    /// completes when all of `sub` has. Its messages keep their order per peer, so the
    /// channel order of both sides still matches.
    pub fn embed(
        &mut self,
        sub: &Schedule,
        deps: &[ActionId],
        peers: &[c_int],
        send: Addr,
        recv: Addr,
    ) -> ActionId {
        let scratch = self.scratch(sub.scratch as i64);
        let place = |a: Addr| match a.base {
            Base::Send => send.add(a.off as i64),
            Base::Recv => recv.add(a.off as i64),
            Base::Scratch => Addr::scratch(scratch + a.off as i64),
            Base::Shm => a,
        };
        let first = self.actions.len() as ActionId;
        let mut sub_deps = vec![Vec::new(); sub.len()];
        for v in 0..sub.len() as ActionId {
            for &s in sub.successors(v) {
                sub_deps[s as usize].push(first + v);
            }
        }
        let mut sinks = Vec::new();
        for (v, a) in sub.actions.iter().enumerate() {
            let mut data = |d: Data| match composite_index(d.dt) {
                None => Data::new(place(d.addr), d.count, d.dt),
                Some(k) => {
                    let parts: Vec<(Addr, &Part)> = sub.composites[k]
                        .iter()
                        .map(|p| (place(d.addr.add(p.off as i64)), p))
                        .collect();
                    let base = parts.first().map_or(d.addr.base, |p| p.0.base);
                    self.composites.push(
                        parts
                            .iter()
                            .map(|(a, p)| Part {
                                off: a.off,
                                count: p.count,
                                dt: p.dt,
                            })
                            .collect(),
                    );
                    Data::new(
                        Addr { base, off: 0 },
                        d.count,
                        composite_handle(self.composites.len() - 1),
                    )
                }
            };
            let action = match *a {
                Action::Send {
                    data: d,
                    peer,
                    tag_offset,
                } => Action::Send {
                    data: data(d),
                    peer: peers[peer as usize],
                    tag_offset,
                },
                Action::Recv {
                    data: d,
                    peer,
                    tag_offset,
                } => Action::Recv {
                    data: data(d),
                    peer: peers[peer as usize],
                    tag_offset,
                },
                Action::Copy { src, dst } => Action::Copy {
                    src: data(src),
                    dst: data(dst),
                },
                Action::Reduce {
                    src,
                    dst,
                    count,
                    dt,
                    op,
                } => Action::Reduce {
                    src: place(src),
                    dst: place(dst),
                    count,
                    dt,
                    op,
                },
                Action::Nop => Action::Nop,
                _ => unreachable!("a shared-memory action in an embedded schedule"),
            };
            let ds = if sub_deps[v].is_empty() {
                deps.to_vec()
            } else {
                std::mem::take(&mut sub_deps[v])
            };
            let id = self.push(action, &ds);
            if sub.successors(v as ActionId).is_empty() {
                sinks.push(id);
            }
        }
        self.ntags = self.ntags.max(sub.ntags);
        if sinks.is_empty() {
            return self.nop(deps);
        }
        self.nop(&sinks)
    }

    pub fn len(&self) -> usize {
        self.actions.len()
    }
    pub fn is_empty(&self) -> bool {
        self.actions.is_empty()
    }

    pub fn finish(self) -> Schedule {
        let n = self.actions.len();
        let mut indeg = vec![0u32; n];
        let mut counts = vec![0u32; n + 1];
        for (v, ds) in self.deps.iter().enumerate() {
            // duplicates in a dependency list are harmless but must be counted once
            let mut ds = ds.clone();
            ds.sort_unstable();
            ds.dedup();
            indeg[v] = ds.len() as u32;
            for &d in &ds {
                counts[d as usize + 1] += 1;
            }
        }
        for i in 0..n {
            counts[i + 1] += counts[i];
        }
        let succ_start = counts.clone();
        let mut fill = counts;
        let mut succ = vec![0u32; *succ_start.last().unwrap_or(&0) as usize];
        for (v, ds) in self.deps.iter().enumerate() {
            let mut ds = ds.clone();
            ds.sort_unstable();
            ds.dedup();
            for &d in &ds {
                succ[fill[d as usize] as usize] = v as u32;
                fill[d as usize] += 1;
            }
        }
        // channel order: (direction, peer, tag offset) -> last action seen
        let mut chan_prev = vec![NONE; n];
        let mut chan_next = vec![NONE; n];
        let mut last: std::collections::HashMap<(bool, c_int, c_int), u32> = Default::default();
        for (v, a) in self.actions.iter().enumerate() {
            let key = match *a {
                Action::Send {
                    peer, tag_offset, ..
                } => (true, peer, tag_offset),
                Action::Recv {
                    peer, tag_offset, ..
                } => (false, peer, tag_offset),
                _ => continue,
            };
            if let Some(&p) = last.get(&key) {
                chan_prev[v] = p;
                chan_next[p as usize] = v as u32;
            }
            last.insert(key, v as u32);
        }
        let retained = retain_objects(&self.actions, &self.composites);
        Schedule {
            messages: !last.is_empty(),
            shm: self.actions.iter().any(|a| {
                matches!(
                    a,
                    Action::Claim
                        | Action::Post { .. }
                        | Action::Watch { .. }
                        | Action::Release
                        | Action::Expose { .. }
                        | Action::Fetch { .. }
                        | Action::Length { .. }
                )
            }),
            _retained: retained,
            actions: self.actions,
            indeg,
            succ_start,
            succ,
            chan_prev,
            chan_next,
            scratch: self.scratch,
            ntags: self.ntags,
            algorithm: self.algorithm,
            composites: self.composites,
            types: OnceLock::new(),
            for_thread: OnceLock::new(),
        }
    }
}

/// One reference per derived datatype and user operation the actions name.
fn retain_objects(
    actions: &[Action],
    composites: &[Vec<Part>],
) -> Vec<crate::core::retain::Retained> {
    let mut types: Vec<MPI_Datatype> = Vec::new();
    let mut ops: Vec<MPI_Op> = Vec::new();
    let mut add = |dt: MPI_Datatype| match composite_index(dt) {
        Some(k) => types.extend(composites[k].iter().map(|p| p.dt)),
        None => types.push(dt),
    };
    for a in actions {
        match *a {
            Action::Send { data, .. } | Action::Recv { data, .. } => add(data.dt),
            Action::Copy { src, dst } => {
                add(src.dt);
                add(dst.dt);
            }
            Action::Reduce { dt, op, .. } => {
                add(dt);
                ops.push(op);
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
    types.sort_unstable();
    types.dedup();
    ops.sort_unstable();
    ops.dedup();
    types
        .into_iter()
        .filter_map(crate::core::retain::datatype)
        .chain(ops.into_iter().filter_map(crate::core::retain::op))
        .collect()
}

/// `sub`, a point-to-point schedule of the whole communicator (`size` ranks), beside a pass
/// through the region of the shared-memory instance the call took (claimed and released
/// at once, as `Ctx`'s drop does for a call that stopped): a non-blocking instance every
/// rank counted for the segment, where the segment cannot serve it after all (its node
/// refused single copy), runs on point-to-point and the instances after it still find
/// theirs acknowledged.
pub fn with_pass_through(sub: &Schedule, size: c_int) -> Schedule {
    let mut b = Builder::new(sub.algorithm);
    let c = b.claim();
    b.release(&[c]);
    if !sub.is_empty() {
        let peers: Vec<c_int> = (0..size).collect();
        b.embed(sub, &[], &peers, Addr::send(0), Addr::recv(0));
    }
    b.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::platform::abi::MPI_INT;

    #[test]
    fn an_embedded_schedule_keeps_its_order_on_new_peers_buffers_and_scratch() {
        let d = |a| Data::new(a, 2, MPI_INT());
        let mut sub = Builder::new("sub");
        let t = sub.scratch(8);
        let r = sub.recv(d(Addr::scratch(t)), 1, &[]);
        let x = sub.reduce(Addr::scratch(t), Addr::recv(4), 2, MPI_INT(), 0, &[r]);
        let s = sub.send_tagged(d(Addr::send(0)), 0, 2, &[]);
        let two = sub.blocks(&[
            (Addr::recv(0), 1, MPI_INT(), 4),
            (Addr::recv(16), 1, MPI_INT(), 4),
        ]);
        sub.send(two, 1, &[x, s]);
        let sub = sub.finish();

        let mut b = Builder::new("outer");
        let before = b.scratch(100);
        let w = b.nop(&[]);
        let end = b.embed(&sub, &[w], &[7, 3], Addr::scratch(before), Addr::send(64));
        let s = b.finish();
        assert_eq!(s.len(), 6);
        let at = |v: usize| s.actions[v];
        let Action::Recv { data, peer, .. } = at(1) else {
            panic!()
        };
        assert_eq!(peer, 3, "rank 1 of the sub-schedule is rank 3 here");
        assert_eq!(data.addr.base, Base::Scratch);
        assert!(data.addr.off >= 100, "its scratch follows this builder's");
        let Action::Reduce { dst, .. } = at(2) else {
            panic!()
        };
        assert_eq!(dst, Addr::send(68), "its receive buffer is at send + 64");
        let Action::Send {
            data,
            peer,
            tag_offset,
        } = at(3)
        else {
            panic!()
        };
        assert_eq!(
            (peer, tag_offset, data.addr),
            (7, 2, Addr::scratch(before as i64))
        );
        assert_eq!(s.ntags, 3);
        let Action::Send { data, .. } = at(4) else {
            panic!()
        };
        let k = composite_index(data.dt).unwrap();
        assert_eq!(data.addr.base, Base::Send);
        let offs: Vec<isize> = s.composites[k].iter().map(|p| p.off).collect();
        assert_eq!(offs, vec![64, 80]);
        // the first actions wait for `w`; the end waits for the last
        assert_eq!(s.indeg[1..4].to_vec(), vec![1, 1, 1]);
        assert!(s.successors(w).contains(&1) && s.successors(w).contains(&3));
        assert_eq!(s.successors(4), &[end]);
    }

    #[test]
    fn dag_and_channels() {
        let mut b = Builder::new("test");
        let d = Data::new(Addr::recv(0), 1, MPI_INT());
        let r0 = b.recv(d, 1, &[]);
        let r1 = b.recv(d, 1, &[]);
        let s = b.send(d, 2, &[r0, r1, r0]);
        let n = b.nop(&[s]);
        let sch = b.finish();
        assert_eq!(sch.indeg, vec![0, 0, 2, 1]);
        assert_eq!(sch.successors(r0), &[s]);
        assert_eq!(sch.successors(s), &[n]);
        assert_eq!(sch.next_on_channel(r0), Some(r1));
        assert_eq!(sch.has_prev_on_channel(r1), Some(r0));
        assert_eq!(sch.has_prev_on_channel(s), None);
    }

    #[test]
    fn which_schedules_need_the_progress_thread() {
        let small = Data::new(Addr::recv(0), 4, MPI_INT());
        // one round, local work ahead of and after it: no
        let mut b = Builder::new("test");
        let c = b.copy(small, Data::new(Addr::scratch(0), 4, MPI_INT()), &[]);
        let s = b.send(small, 1, &[c]);
        let r = b.recv(small, 1, &[]);
        b.nop(&[s, r]);
        assert!(!b.finish().needs_progress(1024));
        // a second round: yes
        let mut b = Builder::new("test");
        let r = b.recv(small, 1, &[]);
        let c = b.copy(small, Data::new(Addr::scratch(0), 4, MPI_INT()), &[r]);
        b.send(small, 2, &[c]);
        assert!(b.finish().needs_progress(1024));
        // a message above the size: yes (and with size 0, every message is)
        let mut b = Builder::new("test");
        b.send(Data::new(Addr::send(0), 1000, MPI_INT()), 1, &[]);
        let sch = b.finish();
        assert!(sch.needs_progress(1024));
        assert!(!sch.needs_progress(4000));
        assert!(sch.needs_progress(0));
    }

    #[test]
    fn scratch_is_aligned() {
        let mut b = Builder::new("test");
        assert_eq!(b.scratch(10), 0);
        assert_eq!(b.scratch(1), 64);
        assert_eq!(b.finish().scratch, 65);
    }
}

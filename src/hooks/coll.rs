//! Layer: hooks. May use: services, core, platform.
//!
//! Collective hooks: one function per base collective, called by the generated entry
//! points of all its forms (blocking, `I*`, `*_init`, and the `_c` large-count forms, with
//! counts already widened to i64). Each validates the arguments that are significant on
//! this rank (MPI-4.0 chapter 6 says which), describes its buffers as blocks, and launches
//! a schedule from `algo`.
//!
//! `MPI_IN_PLACE` is accepted exactly where MPI-4.0 allows it: the root's send buffer of
//! Gather(v) and Reduce, the root's receive buffer of Scatter(v), the send buffer of
//! Allgather(v), Alltoall(v, w), Allreduce, Reduce_scatter(_block), Scan and Exscan.
//!
//! Safety of the hooks: the arguments are the application's, passed unchanged (counts
//! widened); the MPI standard's rules for them are the contract.
#![allow(clippy::too_many_arguments, clippy::missing_safety_doc)]

use core::ffi::{c_int, c_void};

use crate::core::dtype::TypeInfo;
use crate::core::sched::Addr;
use crate::platform::abi::*;
use crate::platform::memo;
use crate::services::coll::algo::{self, Block};
use crate::services::coll::select::{self, Algo};
use crate::services::coll::{Call, Coll, Ctx, Done, Raised, inter, key, return_code};

/// Runs a hook body on an intra-communicator (or forwards, see `Ctx::begin`), under
/// `entry::slow` (the re-entry bypass, then `entry::run`): the generated entry points call
/// the hooks directly, so that a memoized call takes its fast lane (`platform::guard::lane`) before
/// any of that.
macro_rules! hook {
    // A collective without array arguments: a call equal to the last one that went to the
    // system MPI goes there at once (see `memo`).
    // A rooted collective names its root (`root r`): each root's call has its own entry.
    ($call:expr, $comm:expr, $native:ident,
     memo[$($a:expr),*; types $($t:expr),*; ops $($o:expr),* $(; root $r:expr)?], |$c:ident| $body:block) => {{
        // by value (`move`): no address escapes before the lane's checks
        let fid = $call.fid;
        let comm = $comm;
        let way: usize = 0 $(+ memo::way($r))?;
        let same = move |w: &mut memo::Words<'_>| w.is(comm) $(&& w.is($a))*;
        match crate::platform::guard::lane(fid, move |m| m.repeats(memo::open(), fid, way, same), $native) {
            Some(rc) => rc,
            // the ordinary path takes the address of a copy: the caller's closure stays in
            // registers on the lane
            None => crate::edge::entry::slow(fid, &{ *$native }, move |$native| {
                if let Some(rc) = crate::services::coll::lane::hit(fid, way, comm, $call.variant, same) {
                    return rc;
                }
                match memo::hit(fid, way, same) {
                    memo::Hit::Miss => {}
                    memo::Hit::Native => return $native(),
                    memo::Hit::Counted => {
                        if let Some(rc) = crate::services::coll::count_again(comm, $native) {
                            return rc;
                        }
                    }
                }
                // a datatype the program freed: the calls that go native check only some
                // types first, and MPICH 4.0.2 crashes on a freed one (`core::retain`)
                if crate::core::retain::any_freed_type(&[$($t),*]) {
                    return crate::platform::errors::raise(
                        comm,
                        MPI_ERR_TYPE,
                        crate::platform::api::NAMES[fid as usize],
                        "a datatype argument was freed",
                    );
                }
                let epoch = memo::epoch();
                memo::arm();
                crate::services::coll::lane::arm();
                let rc = hook!(@ctx $call, comm, $native, |$c| $body);
                let key = memo::Key::new(fid, way, comm, &[$(memo::Word::word($a)),*]);
                crate::services::coll::lane::store(&key, rc, epoch);
                memo::store(key, &memo::Arrays::NONE, memo::Shape::default(), rc, &[$($t),*], &[$($o),*], epoch);
                rc
            }),
        }
    }};
    // A collective with array arguments: as above, with the arrays' contents in the key
    // (`arrays` appends them to `a`, or compares them with a remembered call's, false when
    // they cannot be read, do not fit or differ; `types` the datatypes that must all be
    // predefined for the call to be remembered). The arrays' lengths depend on the
    // communicator (`m.size()`, `m.rank()`): a call whose scalar arguments match a
    // remembered one reads them with the remembered shape first, and looks the
    // communicator up only when that is not a hit.
    ($call:expr, $comm:expr, $native:ident,
     memo_v[$($a:expr),*; arrays |$ac:ident, $aa:ident| $arr:expr; types $t:expr; ops $($o:expr),* $(; root $r:expr)?],
     |$c:ident| $body:block) => {{
        let fid = $call.fid;
        let comm = $comm;
        let way: usize = 0 $(+ memo::way($r))?;
        let same = move |w: &mut memo::Words<'_>| w.is(comm) $(&& w.is($a))*;
        let same_arrays = move |$ac: &memo::Shape, $aa: &mut memo::Match<'_>| -> bool { $arr };
        match crate::platform::guard::lane(fid, move |m| m.repeats_with(memo::open(), fid, way, same, same_arrays), $native) {
            Some(rc) => rc,
            None => crate::edge::entry::slow(fid, &{ *$native }, move |$native| {
                if let Some(rc) = crate::services::coll::lane::hit_with(fid, way, comm, $call.variant, same, same_arrays) {
                    return rc;
                }
                match memo::hit_with(fid, way, same, same_arrays) {
                    memo::Hit::Miss => {}
                    memo::Hit::Native => return $native(),
                    memo::Hit::Counted => {
                        if let Some(rc) = crate::services::coll::count_again(comm, $native) {
                            return rc;
                        }
                    }
                }
                match Ctx::begin($call, comm, $native) {
                    Err(rc) => rc,
                    Ok(ctx) => {
                        let shape = memo::Shape::new(ctx.size(), ctx.rank());
                        // an intercommunicator's arrays are sized by the remote group
                        let arrays = if ctx.st.inter {
                            None
                        } else {
                            let $ac = &shape;
                            let mut arrays = memo::Arrays::new();
                            let readable = {
                                let $aa = &mut arrays;
                                $arr
                            };
                            readable.then_some(arrays)
                        };
                        let epoch = memo::epoch();
                        memo::arm();
                        crate::services::coll::lane::arm();
                        let rc = hook!(@passes ctx, $call, comm, $native, |$c| $body);
                        if let Some(arrays) = arrays {
                            // `types` may read the arrays too (Alltoallw's), with the same shape
                            #[allow(unused_variables)]
                            let $ac = &shape;
                            let key = memo::Key::new(fid, way, comm, &[$(memo::Word::word($a)),*]);
                            crate::services::coll::lane::store_with(&key, &arrays, shape, rc, epoch);
                            memo::store(key, &arrays, shape, rc, &$t, &[$($o),*], epoch);
                        }
                        rc
                    }
                }
            }),
        }
    }};
    ($call:expr, $comm:expr, $native:ident, |$c:ident| $body:block) => {{
        crate::edge::entry::slow($call.fid, $native, move |$native| hook!(@ctx $call, $comm, $native, |$c| $body))
    }};
    (@ctx $call:expr, $comm:expr, $native:expr, |$c:ident| $body:block) => {{
        match Ctx::begin($call, $comm, $native) {
            Err(rc) => rc,
            Ok(ctx) => hook!(@passes ctx, $call, $comm, $native, |$c| $body),
        }
    }};
    // The body, run once; a non-blocking call deferred until its communicator's segment is
    // set up (`Ctx::take_stash`) runs it again for its point-to-point schedule, which it
    // launches (the first pass built the shared-memory one).
    (@passes $ctx:ident, $call:expr, $comm:expr, $native:expr, |$c:ident| $body:block) => {{
        let body = |$c: &Ctx<'_>| -> Result<Done, Raised> { $body };
        let r = body(&$ctx);
        match (r, $ctx.take_stash()) {
            (Ok(_), Some(stash)) => match Ctx::begin($call, $comm, $native) {
                Ok(again) => {
                    again.adopt(stash);
                    return_code(body(&again))
                }
                // (not reached: the first pass found the communicator; the instance
                // still passes through the segment, `Ctx`'s drop)
                Err(rc) => {
                    $ctx.adopt(stash);
                    rc
                }
            },
            (r, stash) => {
                if let Some(stash) = stash {
                    $ctx.adopt(stash);
                }
                return_code(r)
            }
        }
    }};
}

fn in_place(p: *const c_void) -> bool {
    core::ptr::eq(p, MPI_IN_PLACE)
}

/// Per-rank blocks of a buffer laid out by element displacements (`displs[i] * extent`).
fn blocks(
    base: fn(i64) -> Addr,
    counts: &[i64],
    displs: &[i64],
    dt: MPI_Datatype,
    ti: &TypeInfo,
) -> Vec<Block> {
    counts
        .iter()
        .zip(displs)
        .map(|(&c, &d)| Block::new(base(d * ti.extent), c, dt, ti))
        .collect()
}

/// One side (send or receive) of a rooted call, as [`Ctx::rooted_native_first`] reads it.
struct Side<'a> {
    buf: *const c_void,
    count: i64,
    dt: MPI_Datatype,
    names: (&'a str, &'a str),
}

impl<'a> Side<'a> {
    fn new<T>(buf: *const T, count: i64, dt: MPI_Datatype, n: &'a str, t: &'a str) -> Self {
        Side {
            buf: buf.cast(),
            count,
            dt,
            names: (n, t),
        }
    }
}

impl Ctx<'_> {
    /// Hands the call to the system MPI at once when the choice for it is `native`, before
    /// any per-rank block list is built: on that path the shim's per-call cost is all that
    /// small messages pay on top of the system MPI (README, "Algorithms and selection").
    /// `count` elements of `dt` must be the size the full path decides by on this rank;
    /// `trusted` says from that size whether the system MPI gets the call right.
    fn native_first(
        &self,
        coll: Coll,
        count: i64,
        dt: MPI_Datatype,
        names: (&str, &str),
        trusted: impl FnOnce(i64) -> bool,
    ) -> Result<Option<Done>, Raised> {
        self.check_count(count, names.0)?;
        let ti = self.type_info(dt, names.1)?;
        let bytes = count * ti.size;
        if self.choose_with(coll, bytes, true, trusted(bytes)).algo != Algo::Native {
            return Ok(None);
        }
        crate::platform::counters::note_bytes((count * ti.size) as u64);
        Ok(Some(self.native()))
    }

    /// [`Self::native_first`] for Gather and Scatter: the root decides by its side of the
    /// call (`root_side`, one block per rank), every other rank by its own single block;
    /// `MPI_IN_PLACE` there is an error, left to the full path to report.
    fn rooted_native_first(
        &self,
        coll: Coll,
        root: c_int,
        root_side: Side<'_>,
        own: Side<'_>,
    ) -> Result<Option<Done>, Raised> {
        self.check_root(root)?;
        let side = if self.rank() == root {
            root_side
        } else if !in_place(own.buf) {
            own
        } else {
            return Ok(None);
        };
        let trusted = |b| select::rooted_native_ok(coll, self.size(), root, b);
        self.native_first(coll, side.count, side.dt, side.names, trusted)
    }

    /// Reads a count array of `n` entries, each non-negative.
    pub(crate) fn counts(&self, c: Counts, n: usize, what: &str) -> Result<Vec<i64>, Raised> {
        if c.is_null() && n > 0 {
            return self.fail(MPI_ERR_ARG, format_args!("{what} is NULL"));
        }
        // SAFETY: the standard sizes this array by the group or topology size.
        let v = unsafe { c.to_vec(n) };
        if let Some(bad) = v.iter().find(|&&x| x < 0) {
            return self.fail(
                MPI_ERR_COUNT,
                format_args!("{what} contains a negative count ({bad})"),
            );
        }
        Ok(v)
    }

    /// Reads a displacement array of `n` entries.
    pub(crate) fn displs(&self, d: Counts, n: usize, what: &str) -> Result<Vec<i64>, Raised> {
        if d.is_null() && n > 0 {
            return self.fail(MPI_ERR_ARG, format_args!("{what} is NULL"));
        }
        // SAFETY: as for counts.
        Ok(unsafe { d.to_vec(n) })
    }

    /// Reads `n` datatypes and their infos.
    pub(crate) fn types(
        &self,
        t: *const MPI_Datatype,
        n: usize,
        what: &str,
    ) -> Result<(Vec<MPI_Datatype>, Vec<TypeInfo>), Raised> {
        if t.is_null() && n > 0 {
            return self.fail(MPI_ERR_ARG, format_args!("{what} is NULL"));
        }
        // SAFETY: an array of n datatypes (group or topology size).
        let v: Vec<MPI_Datatype> = (0..n).map(|i| unsafe { *t.add(i) }).collect();
        let infos = v
            .iter()
            .map(|&d| self.type_info(d, what))
            .collect::<Result<Vec<_>, _>>()?;
        Ok((v, infos))
    }
}

#[inline]
pub unsafe fn barrier(call: Call, comm: MPI_Comm, native: &(impl Fn() -> c_int + Copy)) -> c_int {
    hook!(call, comm, native, memo[; types MPI_DATATYPE_NULL(); ops MPI_OP_NULL()], |c| {
        if c.st.inter {
            return inter::barrier(c);
        }
        let ch = c.choose(Coll::Barrier, 0, true);
        if ch.algo == Algo::Native {
            return Ok(c.native());
        }
        let me = c.me();
        let k = key(Coll::Barrier, &ch, 0, 0, MPI_OP_NULL(), Vec::new(), Vec::new());
        c.launch(k, core::ptr::null(), core::ptr::null_mut(), || {
            Ok(match ch.algo {
                Algo::Shm => match c.hier() {
                    Some(h) => algo::hier::barrier(&h, &c.leaders_choice(&h, Coll::Barrier, 0, true)),
                    None => algo::shm::barrier(c.slots(), me),
                },
                _ => algo::barrier::build(&ch, me),
            })
        })
    })
}

#[inline]
pub unsafe fn bcast(
    call: Call,
    buffer: *mut c_void,
    count: i64,
    datatype: MPI_Datatype,
    root: c_int,
    comm: MPI_Comm,
    native: &(impl Fn() -> c_int + Copy),
) -> c_int {
    hook!(call, comm, native, memo[buffer, count, datatype, root; types datatype; ops MPI_OP_NULL(); root root], |c| {
        if c.st.inter {
            return inter::bcast(c, buffer, count, datatype, root);
        }
        c.check_count(count, "count")?;
        c.check_root(root)?;
        let ti = c.type_info(datatype, "datatype")?;
        c.check_buffer(buffer, count, datatype, "the buffer")?;
        crate::platform::counters::note_bytes((count * ti.size) as u64);
        let ch = c.choose(Coll::Bcast, count * ti.size, true);
        if ch.algo == Algo::Native {
            return Ok(c.native());
        }
        let me = c.me();
        let data = crate::core::sched::Data::new(Addr::recv(0), count, datatype);
        let k = key(
            Coll::Bcast,
            &ch,
            root,
            0,
            MPI_OP_NULL(),
            vec![datatype],
            vec![count],
        );
        c.launch(k, core::ptr::null(), buffer, || {
            Ok(match ch.algo {
                Algo::Shm => match c.hier() {
                    Some(h) if c.single_copy() => {
                        let chunk = algo::hier::bcast_chunk_bytes(c.slots(), count * ti.size);
                        let lead = c.leaders_choice(&h, Coll::Bcast, chunk, true);
                        algo::hier::bcast_pipelined(c.slots(), &h, &lead, data, &ti, root)
                    }
                    Some(h) => {
                        let lead = c.leaders_choice(&h, Coll::Bcast, count * ti.size, true);
                        algo::hier::bcast(c.slots(), &h, &lead, data, &ti, root)
                    }
                    None if c.single_copy() => {
                        let blk = algo::Block::new(Addr::recv(0), count, datatype, &ti);
                        algo::single::bcast(c.slots(), me, blk, root)
                    }
                    None => algo::shm::bcast(c.slots(), me, data, &ti, root),
                },
                _ => algo::bcast::build(&ch, me, data, &ti, root),
            })
        })
    })
}

/// The block index a rooted collective's size is read from: on two processes the other
/// rank's (the only message), else the first (all equal where the size is used).
fn peer_of(c: &Ctx<'_>, me: c_int) -> usize {
    if c.size() == 2 { (1 - me) as usize } else { 0 }
}

/// Shared by Gather and Gatherv: `recv` describes the root's blocks (counts, displs).
fn gather_common(
    c: &Ctx<'_>,
    coll: Coll,
    sendbuf: *const c_void,
    sendcount: i64,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recv: Option<(Vec<i64>, Vec<i64>, MPI_Datatype)>,
    root: c_int,
) -> Result<Done, Raised> {
    c.check_root(root)?;
    let is_root = c.rank() == root;
    let inplace = in_place(sendbuf);
    if inplace && !is_root {
        return c.fail(MPI_ERR_BUFFER, "MPI_IN_PLACE is only allowed at the root");
    }
    // (sized once: they become the schedule cache's key, made on every call)
    let blocks_known = recv.as_ref().map_or(0, |r| 2 * r.0.len());
    let mut types = Vec::with_capacity(2);
    let mut kc = Vec::with_capacity(1 + blocks_known);
    let send = if inplace {
        None
    } else {
        c.check_count(sendcount, "sendcount")?;
        let sti = c.type_info(sendtype, "sendtype")?;
        c.check_buffer(sendbuf, sendcount, sendtype, "the send buffer")?;
        crate::platform::counters::note_bytes((sendcount * sti.size) as u64);
        types.push(sendtype);
        kc.push(sendcount);
        Some(Block::new(Addr::send(0), sendcount, sendtype, &sti))
    };
    let mut rblocks = Vec::new();
    if let Some((counts, displs, rt)) = recv {
        let rti = c.type_info(rt, "recvtype")?;
        if counts.iter().any(|&x| x > 0) {
            c.check_buffer(recvbuf, 1, rt, "the receive buffer")?;
        }
        rblocks = blocks(Addr::recv, &counts, &displs, rt, &rti);
        if !inplace {
            // the root's own block must not be its send buffer
            let me = c.rank() as usize;
            let own = if coll == Coll::Gather {
                sendcount == counts[me] && sendcount != 0
            } else {
                sendcount != 0 && counts[me] != 0
            };
            let at = (recvbuf as *const u8).wrapping_offset((displs[me] * rti.size) as isize);
            c.check_alias(sendtype == rt && own, sendbuf, at.cast())?;
        }
        types.push(rt);
        kc.extend(counts);
        kc.extend(displs);
    }
    // Gather: every rank knows the block size (equal signatures); Gatherv: only the root,
    // but on two processes both ends know the other's block (`select::CollSpec::sized_at`)
    let regular = coll == Coll::Gather;
    let block = match (is_root, send) {
        (true, _) => rblocks.get(peer_of(c, root)).map_or(0, |b| b.bytes),
        (false, Some(s)) => s.bytes,
        (false, None) => 0,
    };
    let ok = select::rooted_native_ok(coll, c.size(), root, block);
    let ch = c.choose_with(coll, block, true, ok);
    if ch.algo == Algo::Native {
        return Ok(c.native());
    }
    let me = c.me();
    let k = key(coll, &ch, root, inplace as u8, MPI_OP_NULL(), types, kc);
    c.launch(k, sendbuf, recvbuf, || {
        if ch.algo == Algo::Shm {
            return Ok(match c.hier() {
                Some(h) if c.single_copy() => {
                    algo::hier::gather_single(c.slots(), &h, send, &rblocks, root, block)
                }
                Some(h) => algo::hier::gather(c.slots(), &h, send, &rblocks, root, block),
                None if c.single_copy() => {
                    algo::single::gather(c.slots(), me, send, &rblocks, root, c.inline())
                }
                None => algo::shm::gather(c.slots(), me, send, &rblocks, root),
            });
        }
        Ok(algo::rooted::gather(
            &ch,
            me,
            send,
            &rblocks,
            root,
            regular.then_some(block),
        ))
    })
}

#[inline]
pub unsafe fn gather(
    call: Call,
    sendbuf: *const c_void,
    sendcount: i64,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcount: i64,
    recvtype: MPI_Datatype,
    root: c_int,
    comm: MPI_Comm,
    native: &(impl Fn() -> c_int + Copy),
) -> c_int {
    hook!(call, comm, native, memo[sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root; types sendtype, recvtype; ops MPI_OP_NULL(); root root], |c| {
        if c.st.inter {
            let q = c.remote() as i64;
            let recv = || Ok((vec![recvcount; q as usize], (0..q).map(|i| i * recvcount).collect()));
            return inter::gather(c, Coll::Gather, sendbuf, sendcount, sendtype, recvbuf, &recv, recvtype, root);
        }
        let root_side = Side::new(recvbuf, recvcount, recvtype, "recvcount", "recvtype");
        let own = Side::new(sendbuf, sendcount, sendtype, "sendcount", "sendtype");
        if let Some(done) = c.rooted_native_first(Coll::Gather, root, root_side, own)? {
            return Ok(done);
        }
        let recv = if c.rank() == root {
            let p = c.size() as i64;
            Some((
                vec![recvcount; p as usize],
                (0..p).map(|i| i * recvcount).collect(),
                recvtype,
            ))
        } else {
            None
        };
        gather_common(
            c,
            Coll::Gather,
            sendbuf,
            sendcount,
            sendtype,
            recvbuf,
            recv,
            root,
        )
    })
}

#[inline]
pub unsafe fn gatherv(
    call: Call,
    sendbuf: *const c_void,
    sendcount: i64,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcounts: Counts,
    displs: Counts,
    recvtype: MPI_Datatype,
    root: c_int,
    comm: MPI_Comm,
    native: &(impl Fn() -> c_int + Copy),
) -> c_int {
    hook!(call, comm, native, memo_v[sendbuf, sendcount, sendtype, recvbuf, recvtype, root;
        arrays |m, a| {
            let n = m.size() as usize;
            // SAFETY: significant at the root only, sized by the group (MPI-4.0 §6.5)
            m.rank() != root || unsafe { a.counts(recvcounts, n) && a.counts(displs, n) }
        };
        types [sendtype, recvtype]; ops MPI_OP_NULL(); root root], |c| {
        if c.st.inter {
            let q = c.remote() as usize;
            let recv = || Ok((c.counts(recvcounts, q, "recvcounts")?, c.displs(displs, q, "displs")?));
            return inter::gather(c, Coll::Gatherv, sendbuf, sendcount, sendtype, recvbuf, &recv, recvtype, root);
        }
        let recv = if c.rank() == root {
            let n = c.size() as usize;
            Some((
                c.counts(recvcounts, n, "recvcounts")?,
                c.displs(displs, n, "displs")?,
                recvtype,
            ))
        } else {
            None
        };
        gather_common(
            c,
            Coll::Gatherv,
            sendbuf,
            sendcount,
            sendtype,
            recvbuf,
            recv,
            root,
        )
    })
}

/// Shared by Scatter and Scatterv: `send` describes the root's blocks.
fn scatter_common(
    c: &Ctx<'_>,
    coll: Coll,
    sendbuf: *const c_void,
    send: Option<(Vec<i64>, Vec<i64>, MPI_Datatype)>,
    recvbuf: *mut c_void,
    recvcount: i64,
    recvtype: MPI_Datatype,
    root: c_int,
) -> Result<Done, Raised> {
    c.check_root(root)?;
    let is_root = c.rank() == root;
    let inplace = in_place(recvbuf);
    if inplace && !is_root {
        return c.fail(MPI_ERR_BUFFER, "MPI_IN_PLACE is only allowed at the root");
    }
    let blocks_known = send.as_ref().map_or(0, |s| 2 * s.0.len());
    let mut types = Vec::with_capacity(2);
    let mut kc = Vec::with_capacity(1 + blocks_known);
    let recv = if inplace {
        None
    } else {
        c.check_count(recvcount, "recvcount")?;
        let rti = c.type_info(recvtype, "recvtype")?;
        c.check_buffer(recvbuf, recvcount, recvtype, "the receive buffer")?;
        crate::platform::counters::note_bytes((recvcount * rti.size) as u64);
        types.push(recvtype);
        kc.push(recvcount);
        Some(Block::new(Addr::recv(0), recvcount, recvtype, &rti))
    };
    let mut sblocks = Vec::new();
    if let Some((counts, displs, st)) = send {
        let sti = c.type_info(st, "sendtype")?;
        if counts.iter().any(|&x| x > 0) {
            c.check_buffer(sendbuf, 1, st, "the send buffer")?;
        }
        sblocks = blocks(Addr::send, &counts, &displs, st, &sti);
        if !inplace {
            // the root's own block must not be its receive buffer
            let me = c.rank() as usize;
            let own = if coll == Coll::Scatter {
                recvcount == counts[me] && recvcount != 0
            } else {
                recvcount != 0 && counts[me] != 0
            };
            let at = (sendbuf as *const u8).wrapping_offset((displs[me] * sti.size) as isize);
            c.check_alias(st == recvtype && own, recvbuf, at.cast())?;
        }
        types.push(st);
        kc.extend(counts);
        kc.extend(displs);
    }
    // as in `gather_common`
    let regular = coll == Coll::Scatter;
    let block = match (is_root, recv) {
        (true, _) => sblocks.get(peer_of(c, root)).map_or(0, |b| b.bytes),
        (false, Some(r)) => r.bytes,
        (false, None) => 0,
    };
    let ok = select::rooted_native_ok(coll, c.size(), root, block);
    let ch = c.choose_with(coll, block, true, ok);
    if ch.algo == Algo::Native {
        return Ok(c.native());
    }
    let me = c.me();
    let k = key(coll, &ch, root, inplace as u8, MPI_OP_NULL(), types, kc);
    c.launch(k, sendbuf, recvbuf, || {
        if ch.algo == Algo::Shm {
            return Ok(match c.hier() {
                Some(h) if c.single_copy() => {
                    algo::hier::scatter_single(c.slots(), &h, &sblocks, recv, root, block)
                }
                Some(h) => algo::hier::scatter(c.slots(), &h, &sblocks, recv, root, block),
                None if c.single_copy() && !regular => {
                    algo::single::scatterv(c.slots(), me, &sblocks, recv, root, c.inline())
                }
                None if c.single_copy() => {
                    algo::single::scatter(c.slots(), me, &sblocks, recv, root, block)
                }
                None => algo::shm::scatter(c.slots(), me, &sblocks, recv, root, block),
            });
        }
        Ok(algo::rooted::scatter(
            &ch,
            me,
            &sblocks,
            recv,
            root,
            regular.then_some(block),
        ))
    })
}

#[inline]
pub unsafe fn scatter(
    call: Call,
    sendbuf: *const c_void,
    sendcount: i64,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcount: i64,
    recvtype: MPI_Datatype,
    root: c_int,
    comm: MPI_Comm,
    native: &(impl Fn() -> c_int + Copy),
) -> c_int {
    hook!(call, comm, native, memo[sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root; types sendtype, recvtype; ops MPI_OP_NULL(); root root], |c| {
        if c.st.inter {
            let q = c.remote() as i64;
            let send = || Ok((vec![sendcount; q as usize], (0..q).map(|i| i * sendcount).collect()));
            return inter::scatter(c, Coll::Scatter, sendbuf, &send, sendtype, recvbuf, recvcount, recvtype, root);
        }
        let root_side = Side::new(sendbuf, sendcount, sendtype, "sendcount", "sendtype");
        let own = Side::new(recvbuf, recvcount, recvtype, "recvcount", "recvtype");
        if let Some(done) = c.rooted_native_first(Coll::Scatter, root, root_side, own)? {
            return Ok(done);
        }
        let send = if c.rank() == root {
            let p = c.size() as i64;
            Some((
                vec![sendcount; p as usize],
                (0..p).map(|i| i * sendcount).collect(),
                sendtype,
            ))
        } else {
            None
        };
        scatter_common(
            c,
            Coll::Scatter,
            sendbuf,
            send,
            recvbuf,
            recvcount,
            recvtype,
            root,
        )
    })
}

#[inline]
pub unsafe fn scatterv(
    call: Call,
    sendbuf: *const c_void,
    sendcounts: Counts,
    displs: Counts,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcount: i64,
    recvtype: MPI_Datatype,
    root: c_int,
    comm: MPI_Comm,
    native: &(impl Fn() -> c_int + Copy),
) -> c_int {
    hook!(call, comm, native, memo_v[sendbuf, sendtype, recvbuf, recvcount, recvtype, root;
        arrays |m, a| {
            let n = m.size() as usize;
            // SAFETY: significant at the root only, sized by the group (MPI-4.0 §6.6)
            m.rank() != root || unsafe { a.counts(sendcounts, n) && a.counts(displs, n) }
        };
        types [sendtype, recvtype]; ops MPI_OP_NULL(); root root], |c| {
        if c.st.inter {
            let q = c.remote() as usize;
            let send = || Ok((c.counts(sendcounts, q, "sendcounts")?, c.displs(displs, q, "displs")?));
            return inter::scatter(c, Coll::Scatterv, sendbuf, &send, sendtype, recvbuf, recvcount, recvtype, root);
        }
        let send = if c.rank() == root {
            let n = c.size() as usize;
            Some((
                c.counts(sendcounts, n, "sendcounts")?,
                c.displs(displs, n, "displs")?,
                sendtype,
            ))
        } else {
            None
        };
        scatter_common(
            c,
            Coll::Scatterv,
            sendbuf,
            send,
            recvbuf,
            recvcount,
            recvtype,
            root,
        )
    })
}

/// Shared by Allgather and Allgatherv.
fn allgather_common(
    c: &Ctx<'_>,
    coll: Coll,
    sendbuf: *const c_void,
    sendcount: i64,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    counts: Vec<i64>,
    displs: Vec<i64>,
    recvtype: MPI_Datatype,
) -> Result<Done, Raised> {
    let inplace = in_place(sendbuf);
    let mut types = Vec::with_capacity(2);
    let mut kc = Vec::with_capacity(1 + counts.len() + displs.len());
    let send = if inplace {
        None
    } else {
        c.check_count(sendcount, "sendcount")?;
        let sti = c.type_info(sendtype, "sendtype")?;
        c.check_buffer(sendbuf, sendcount, sendtype, "the send buffer")?;
        crate::platform::counters::note_bytes((sendcount * sti.size) as u64);
        types.push(sendtype);
        kc.push(sendcount);
        Some(Block::new(Addr::send(0), sendcount, sendtype, &sti))
    };
    let rti = c.type_info(recvtype, "recvtype")?;
    if counts.iter().any(|&x| x > 0) {
        c.check_buffer(recvbuf, 1, recvtype, "the receive buffer")?;
    }
    if !inplace {
        let me = c.rank() as usize;
        let own = if coll == Coll::Allgather {
            sendcount == counts[me] && sendcount != 0
        } else {
            sendcount != 0 && counts[me] != 0
        };
        let at = (recvbuf as *const u8).wrapping_offset((displs[me] * rti.size) as isize);
        c.check_alias(sendtype == recvtype && own, sendbuf, at.cast())?;
    }
    let rblocks = blocks(Addr::recv, &counts, &displs, recvtype, &rti);
    // every rank knows all counts: decide by the average block
    let avg = rblocks.iter().map(|b| b.bytes).sum::<i64>() / c.size() as i64;
    if coll == Coll::Allgatherv {
        c.note_largest_block(rblocks.iter().map(|b| b.bytes).max().unwrap_or(0));
    }
    types.push(recvtype);
    // MPICH 4.0.2's Allgatherv on one process copies the block to displacement 0
    let native_ok = !(coll == Coll::Allgatherv && c.size() == 1 && !inplace && displs[0] != 0);
    kc.extend(counts);
    kc.extend(displs);
    let ch = c.choose_with(coll, avg, true, native_ok);
    if ch.algo == Algo::Native {
        return Ok(c.native());
    }
    let me = c.me();
    let k = key(coll, &ch, 0, inplace as u8, MPI_OP_NULL(), types, kc);
    c.launch(k, sendbuf, recvbuf, || {
        Ok(match ch.algo {
            Algo::Shm => match c.hier() {
                Some(h) => algo::hier::allgather(c.slots(), &h, send, &rblocks),
                None if c.single_copy() => {
                    algo::single::allgather(c.slots(), me, send, &rblocks, c.inline())
                }
                None => algo::shm::allgather(c.slots(), me, send, &rblocks, avg),
            },
            _ => algo::allgather::build(&ch, me, send, &rblocks),
        })
    })
}

#[inline]
pub unsafe fn allgather(
    call: Call,
    sendbuf: *const c_void,
    sendcount: i64,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcount: i64,
    recvtype: MPI_Datatype,
    comm: MPI_Comm,
    native: &(impl Fn() -> c_int + Copy),
) -> c_int {
    hook!(call, comm, native, memo[sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype; types sendtype, recvtype; ops MPI_OP_NULL()], |c| {
        if c.st.inter {
            let q = c.remote() as i64;
            let rext = c.type_info(recvtype, "recvtype")?.extent;
            let send = (0..q).map(|_| (0, sendcount, sendtype)).collect();
            let recv = (0..q).map(|i| (i * recvcount * rext, recvcount, recvtype)).collect();
            return inter::exchange(c, Coll::Allgather, sendbuf, send, recvbuf, recv);
        }
        let names = ("recvcount", "recvtype");
        if let Some(done) = c.native_first(Coll::Allgather, recvcount, recvtype, names, |_| true)? {
            return Ok(done);
        }
        let p = c.size() as i64;
        let counts = vec![recvcount; p as usize];
        let displs = (0..p).map(|i| i * recvcount).collect();
        allgather_common(
            c,
            Coll::Allgather,
            sendbuf,
            sendcount,
            sendtype,
            recvbuf,
            counts,
            displs,
            recvtype,
        )
    })
}

#[inline]
pub unsafe fn allgatherv(
    call: Call,
    sendbuf: *const c_void,
    sendcount: i64,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcounts: Counts,
    displs: Counts,
    recvtype: MPI_Datatype,
    comm: MPI_Comm,
    native: &(impl Fn() -> c_int + Copy),
) -> c_int {
    hook!(call, comm, native, memo_v[sendbuf, sendcount, sendtype, recvbuf, recvtype;
        // SAFETY: sized by the group (MPI-4.0 §6.7)
        arrays |m, a| unsafe {
            let n = m.size() as usize;
            a.counts(recvcounts, n) && a.counts(displs, n)
        };
        types [sendtype, recvtype]; ops MPI_OP_NULL()], |c| {
        if c.st.inter {
            let q = c.remote() as usize;
            let rc = c.counts(recvcounts, q, "recvcounts")?;
            let rd = c.displs(displs, q, "displs")?;
            let rext = c.type_info(recvtype, "recvtype")?.extent;
            let send = (0..q).map(|_| (0, sendcount, sendtype)).collect();
            let recv = (0..q).map(|i| (rd[i] * rext, rc[i], recvtype)).collect();
            return inter::exchange(c, Coll::Allgatherv, sendbuf, send, recvbuf, recv);
        }
        let n = c.size() as usize;
        let counts = c.counts(recvcounts, n, "recvcounts")?;
        let displs = c.displs(displs, n, "displs")?;
        allgather_common(
            c,
            Coll::Allgatherv,
            sendbuf,
            sendcount,
            sendtype,
            recvbuf,
            counts,
            displs,
            recvtype,
        )
    })
}

/// Whether data sent and data received overlap when both buffers are the same address
/// (blocks relative to their buffers): aliased arguments, erroneous (MPI-4.0 §2.3). Used
/// where the system MPI has no aliasing check of its own and crashes (Alltoallv/w, the
/// neighbourhood collectives); elsewhere the shim applies the system MPI's rule.
fn overlapping(sends: &[Block], recvs: &[Block]) -> bool {
    sends.iter().any(|s| {
        recvs
            .iter()
            .any(|r| !s.empty() && !r.empty() && s.lo < r.hi && r.lo < s.hi)
    })
}

/// Shared by the three Alltoall forms: blocks given as (byte displacement, count, type).
fn alltoall_common(
    c: &Ctx<'_>,
    coll: Coll,
    sendbuf: *const c_void,
    send: Vec<(i64, i64, MPI_Datatype)>,
    recvbuf: *mut c_void,
    recv: Vec<(i64, i64, MPI_Datatype)>,
) -> Result<Done, Raised> {
    let inplace = in_place(sendbuf);
    let mut kc = Vec::with_capacity(2 * (send.len() + recv.len()));
    let mut types = Vec::with_capacity(send.len() + recv.len());
    let mut sblocks = Vec::with_capacity(send.len());
    if !inplace {
        for &(d, n, t) in &send {
            let ti = c.type_info(t, "sendtype")?;
            crate::platform::counters::note_bytes((n * ti.size) as u64);
            sblocks.push(Block::new(Addr::send(d), n, t, &ti));
            kc.extend([d, n]);
            types.push(t);
        }
        if send.iter().any(|x| x.1 > 0) {
            c.check_buffer(sendbuf, 1, send[0].2, "the send buffer")?;
        }
    }
    let mut rblocks = Vec::new();
    for &(d, n, t) in &recv {
        let ti = c.type_info(t, "recvtype")?;
        rblocks.push(Block::new(Addr::recv(d), n, t, &ti));
        kc.extend([d, n]);
        types.push(t);
    }
    if recv.iter().any(|x| x.1 > 0) {
        c.check_buffer(recvbuf, 1, recv[0].2, "the receive buffer")?;
    }
    if coll != Coll::Alltoall {
        c.check_alias(overlapping(&sblocks, &rblocks), sendbuf, recvbuf)?;
    }
    // only Alltoall's block size is known to every rank; on two processes the larger of
    // the two messages between them is known to both (`select::CollSpec::sized_at`)
    let regular = coll == Coll::Alltoall;
    let bytes = if regular {
        rblocks.first().map_or(0, |b| b.bytes)
    } else if c.size() == 2 {
        let peer = peer_of(c, c.rank());
        // in place, the block sent to the peer is the one received from it
        let sent = sblocks.get(peer).or(rblocks.get(peer));
        sent.map_or(0, |b| b.bytes)
            .max(rblocks.get(peer).map_or(0, |b| b.bytes))
    } else {
        0
    };
    let ch = c.choose_with(coll, bytes, true, select::in_place_native_ok(inplace));
    if ch.algo == Algo::Native {
        return Ok(c.native());
    }
    let me = c.me();
    let k = key(coll, &ch, 0, inplace as u8, MPI_OP_NULL(), types, kc);
    c.launch(k, sendbuf, recvbuf, || {
        Ok(match ch.algo {
            Algo::Shm => match c.hier() {
                Some(h) => algo::hier::alltoall(c.slots(), &h, &sblocks, &rblocks, inplace, bytes),
                None if c.single_copy() && !regular => {
                    algo::single::alltoallv(c.slots(), me, &sblocks, &rblocks, inplace, c.inline())
                }
                None if c.single_copy() => {
                    algo::single::alltoall(c.slots(), me, &sblocks, &rblocks, inplace, bytes)
                }
                None => algo::shm::alltoall(c.slots(), me, &sblocks, &rblocks, inplace, bytes),
            },
            _ => algo::alltoall::build(&ch, me, &sblocks, &rblocks, inplace, regular),
        })
    })
}

/// (byte displacement, count, type) triples for element displacements of one type.
fn triples(
    c: &Ctx<'_>,
    counts: &[i64],
    displs: &[i64],
    dt: MPI_Datatype,
    what: &str,
) -> Result<Vec<(i64, i64, MPI_Datatype)>, Raised> {
    let ti = c.type_info(dt, what)?;
    Ok(counts
        .iter()
        .zip(displs)
        .map(|(&n, &d)| (d * ti.extent, n, dt))
        .collect())
}

#[inline]
pub unsafe fn alltoall(
    call: Call,
    sendbuf: *const c_void,
    sendcount: i64,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcount: i64,
    recvtype: MPI_Datatype,
    comm: MPI_Comm,
    native: &(impl Fn() -> c_int + Copy),
) -> c_int {
    hook!(call, comm, native, memo[sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype; types sendtype, recvtype; ops MPI_OP_NULL()], |c| {
        if c.st.inter {
            let q = c.remote() as i64;
            let sext = c.type_info(sendtype, "sendtype")?.extent;
            let rext = c.type_info(recvtype, "recvtype")?.extent;
            let send = (0..q).map(|i| (i * sendcount * sext, sendcount, sendtype)).collect();
            let recv = (0..q).map(|i| (i * recvcount * rext, recvcount, recvtype)).collect();
            return inter::exchange(c, Coll::Alltoall, sendbuf, send, recvbuf, recv);
        }
        let names = ("recvcount", "recvtype");
        if let Some(done) = c.native_first(Coll::Alltoall, recvcount, recvtype, names, |_| select::in_place_native_ok(in_place(sendbuf)))? {
            return Ok(done);
        }
        let p = c.size() as i64;
        let recv = triples(
            c,
            &vec![recvcount; p as usize],
            &(0..p).map(|i| i * recvcount).collect::<Vec<_>>(),
            recvtype,
            "recvtype",
        )?;
        let send = if in_place(sendbuf) {
            Vec::new()
        } else {
            c.check_count(sendcount, "sendcount")?;
            let same = sendtype == recvtype && sendcount == recvcount && sendcount != 0;
            c.check_alias(same, sendbuf, recvbuf)?;
            triples(
                c,
                &vec![sendcount; p as usize],
                &(0..p).map(|i| i * sendcount).collect::<Vec<_>>(),
                sendtype,
                "sendtype",
            )?
        };
        alltoall_common(c, Coll::Alltoall, sendbuf, send, recvbuf, recv)
    })
}

#[inline]
pub unsafe fn alltoallv(
    call: Call,
    sendbuf: *const c_void,
    sendcounts: Counts,
    sdispls: Counts,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcounts: Counts,
    rdispls: Counts,
    recvtype: MPI_Datatype,
    comm: MPI_Comm,
    native: &(impl Fn() -> c_int + Copy),
) -> c_int {
    hook!(call, comm, native, memo_v[sendbuf, sendtype, recvbuf, recvtype;
        // SAFETY: sized by the group (MPI-4.0 §6.8); the send side is ignored in place
        arrays |m, a| unsafe {
            let n = m.size() as usize;
            a.counts(recvcounts, n)
                && a.counts(rdispls, n)
                && (in_place(sendbuf) || a.counts(sendcounts, n) && a.counts(sdispls, n))
        };
        types [sendtype, recvtype]; ops MPI_OP_NULL()], |c| {
        if c.st.inter {
            let q = c.remote() as usize;
            c.no_in_place(sendbuf, "the send buffer")?;
            let recv = triples(c, &c.counts(recvcounts, q, "recvcounts")?, &c.displs(rdispls, q, "rdispls")?, recvtype, "recvtype")?;
            let send = triples(c, &c.counts(sendcounts, q, "sendcounts")?, &c.displs(sdispls, q, "sdispls")?, sendtype, "sendtype")?;
            return inter::exchange(c, Coll::Alltoallv, sendbuf, send, recvbuf, recv);
        }
        let n = c.size() as usize;
        let recv = triples(
            c,
            &c.counts(recvcounts, n, "recvcounts")?,
            &c.displs(rdispls, n, "rdispls")?,
            recvtype,
            "recvtype",
        )?;
        let send = if in_place(sendbuf) {
            Vec::new()
        } else {
            let same = sendtype == recvtype && sendcounts.addr() == recvcounts.addr();
            c.check_alias(same, sendbuf, recvbuf)?;
            triples(
                c,
                &c.counts(sendcounts, n, "sendcounts")?,
                &c.displs(sdispls, n, "sdispls")?,
                sendtype,
                "sendtype",
            )?
        };
        alltoall_common(c, Coll::Alltoallv, sendbuf, send, recvbuf, recv)
    })
}

/// Every datatype of an Alltoallw call (the send side only when it is not in place).
///
/// # Safety
/// The arrays hold one entry per rank of the group whose size `m` gives.
unsafe fn all_types(
    m: &memo::Shape,
    sendbuf: *const c_void,
    sendtypes: *const MPI_Datatype,
    recvtypes: *const MPI_Datatype,
) -> Vec<MPI_Datatype> {
    let n = m.size() as usize;
    // SAFETY: the caller's contract.
    let mut v: Vec<MPI_Datatype> = (0..n).map(|i| unsafe { *recvtypes.add(i) }).collect();
    if !in_place(sendbuf) {
        // SAFETY: as above.
        v.extend((0..n).map(|i| unsafe { *sendtypes.add(i) }));
    }
    v
}

#[inline]
pub unsafe fn alltoallw(
    call: Call,
    sendbuf: *const c_void,
    sendcounts: Counts,
    sdispls: Counts,
    sendtypes: *const MPI_Datatype,
    recvbuf: *mut c_void,
    recvcounts: Counts,
    rdispls: Counts,
    recvtypes: *const MPI_Datatype,
    comm: MPI_Comm,
    native: &(impl Fn() -> c_int + Copy),
) -> c_int {
    hook!(call, comm, native, memo_v[sendbuf, recvbuf;
        // SAFETY: sized by the group (MPI-4.0 §6.8); the send side is ignored in place
        arrays |m, a| unsafe {
            let n = m.size() as usize;
            a.counts(recvcounts, n)
                && a.counts(rdispls, n)
                && a.types(recvtypes, n)
                && (in_place(sendbuf)
                    || a.counts(sendcounts, n) && a.counts(sdispls, n) && a.types(sendtypes, n))
        };
        // SAFETY: read only after a successful call, which read them too
        types unsafe { all_types(m, sendbuf, sendtypes, recvtypes) }; ops MPI_OP_NULL()], |c| {
        if c.st.inter {
            let q = c.remote() as usize;
            c.no_in_place(sendbuf, "the send buffer")?;
            let side = |t: *const MPI_Datatype, n: Counts, d: Counts, names: [&str; 3]| -> Result<Vec<(i64, i64, MPI_Datatype)>, Raised> {
                let (t, _) = c.types(t, q, names[0])?;
                let n = c.counts(n, q, names[1])?;
                let d = c.displs(d, q, names[2])?;
                Ok((0..q).map(|i| (d[i], n[i], t[i])).collect())
            };
            let recv = side(recvtypes, recvcounts, rdispls, ["recvtypes", "recvcounts", "rdispls"])?;
            let send = side(sendtypes, sendcounts, sdispls, ["sendtypes", "sendcounts", "sdispls"])?;
            return inter::exchange(c, Coll::Alltoallw, sendbuf, send, recvbuf, recv);
        }
        let n = c.size() as usize;
        let (rt, _) = c.types(recvtypes, n, "recvtypes")?;
        let rc = c.counts(recvcounts, n, "recvcounts")?;
        let rd = c.displs(rdispls, n, "rdispls")?;
        let recv = (0..n).map(|i| (rd[i], rc[i], rt[i])).collect();
        let send = if in_place(sendbuf) {
            Vec::new()
        } else {
            let same = sendtypes == recvtypes && sendcounts.addr() == recvcounts.addr();
            c.check_alias(same, sendbuf, recvbuf)?;
            let (st, _) = c.types(sendtypes, n, "sendtypes")?;
            let sc = c.counts(sendcounts, n, "sendcounts")?;
            let sd = c.displs(sdispls, n, "sdispls")?;
            (0..n).map(|i| (sd[i], sc[i], st[i])).collect()
        };
        alltoall_common(c, Coll::Alltoallw, sendbuf, send, recvbuf, recv)
    })
}

#[inline]
pub unsafe fn reduce(
    call: Call,
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: i64,
    datatype: MPI_Datatype,
    op: MPI_Op,
    root: c_int,
    comm: MPI_Comm,
    native: &(impl Fn() -> c_int + Copy),
) -> c_int {
    hook!(call, comm, native, memo[sendbuf, recvbuf, count, datatype, op, root; types datatype; ops op; root root], |c| {
        if c.st.inter {
            return inter::reduce(c, sendbuf, recvbuf, count, datatype, op, root);
        }
        c.check_root(root)?;
        let r = c.reduction(count, datatype, op)?;
        let is_root = c.rank() == root;
        let inplace = in_place(sendbuf);
        if inplace && !is_root {
            return c.fail(MPI_ERR_BUFFER, "MPI_IN_PLACE is only allowed at the root");
        }
        if !inplace {
            c.check_buffer(sendbuf, count, datatype, "the send buffer")?;
        }
        if is_root {
            c.check_buffer(recvbuf, count, datatype, "the receive buffer")?;
            c.check_alias(count > 0 && !inplace, sendbuf, recvbuf)?;
        }
        let ok = r.native_trusted() && select::rooted_native_ok(Coll::Reduce, c.size(), root, r.bytes());
        let ch = c.choose_with(Coll::Reduce, r.bytes(), r.commutative, ok);
        if ch.algo == Algo::Native {
            return Ok(c.native());
        }
        let me = c.me();
        let k = key(
            Coll::Reduce,
            &ch,
            root,
            inplace as u8,
            op,
            vec![datatype],
            vec![count],
        );
        c.launch(k, sendbuf, recvbuf, || {
            Ok(match ch.algo {
                Algo::Shm => match c.hier() {
                    Some(h) if c.single_copy() => {
                        let chunk = algo::hier::reduce_chunk_bytes(c.slots(), &r);
                        let lead = c.leaders_choice(&h, Coll::Reduce, chunk, r.commutative);
                        algo::hier::reduce_pipelined(c.slots(), &h, &lead, &r, inplace, algo::hier::Across::Root(root))
                    }
                    Some(h) => {
                        let lead = c.leaders_choice(&h, Coll::Reduce, r.bytes(), r.commutative);
                        algo::hier::reduce(c.slots(), &h, &lead, &r, inplace, root)
                    }
                    None if c.single_copy() => algo::single::reduce(c.slots(), me, &r, inplace, root),
                    None => algo::shm::reduce(c.slots(), me, &r, inplace, root),
                },
                _ => algo::reduce::reduce(&ch, me, &r, inplace, root),
            })
        })
    })
}

#[inline]
pub unsafe fn allreduce(
    call: Call,
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: i64,
    datatype: MPI_Datatype,
    op: MPI_Op,
    comm: MPI_Comm,
    native: &(impl Fn() -> c_int + Copy),
) -> c_int {
    hook!(call, comm, native, memo[sendbuf, recvbuf, count, datatype, op; types datatype; ops op], |c| {
        if c.st.inter {
            return inter::allreduce(c, sendbuf, recvbuf, count, datatype, op);
        }
        let r = c.reduction(count, datatype, op)?;
        let inplace = in_place(sendbuf);
        if !inplace {
            c.check_buffer(sendbuf, count, datatype, "the send buffer")?;
        }
        c.check_buffer(recvbuf, count, datatype, "the receive buffer")?;
        c.check_alias(!inplace && count != 0, sendbuf, recvbuf)?;
        let ch = c.choose_with(Coll::Allreduce, r.bytes(), r.commutative, r.native_trusted());
        if ch.algo == Algo::Native {
            return Ok(c.native());
        }
        let me = c.me();
        let k = key(
            Coll::Allreduce,
            &ch,
            0,
            inplace as u8,
            op,
            vec![datatype],
            vec![count],
        );
        c.launch(k, sendbuf, recvbuf, || {
            Ok(match ch.algo {
                Algo::Shm => match c.hier() {
                    Some(h) if c.single_copy() => {
                        let chunk = algo::hier::reduce_chunk_bytes(c.slots(), &r);
                        let lead = c.leaders_choice(&h, Coll::Allreduce, chunk, r.commutative);
                        algo::hier::reduce_pipelined(c.slots(), &h, &lead, &r, inplace, algo::hier::Across::All)
                    }
                    Some(h) => {
                        let lead = c.leaders_choice(&h, Coll::Allreduce, r.bytes(), r.commutative);
                        algo::hier::allreduce(c.slots(), &h, &lead, &r, inplace)
                    }
                    None if c.single_copy() => algo::single::allreduce(c.slots(), me, &r, inplace),
                    None => algo::shm::allreduce(c.slots(), me, &r, inplace),
                },
                _ => algo::reduce::allreduce(&ch, me, &r, inplace),
            })
        })
    })
}

fn reduce_scatter_common(
    c: &Ctx<'_>,
    coll: Coll,
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    counts: Vec<i64>,
    datatype: MPI_Datatype,
    op: MPI_Op,
) -> Result<Done, Raised> {
    let total: i64 = counts.iter().sum();
    let r = c.reduction(counts[c.rank() as usize], datatype, op)?;
    let inplace = in_place(sendbuf);
    if !inplace {
        c.check_buffer(sendbuf, total, datatype, "the send buffer")?;
    }
    c.check_buffer(
        recvbuf,
        if inplace { total } else { r.count },
        datatype,
        "the receive buffer",
    )?;
    c.check_alias(!inplace && total != 0, sendbuf, recvbuf)?;
    // MPICH (4.0.2, 5.0.2) and Intel MPI 2021.19 combine the wrong elements in a
    // Reduce_scatter with a non-commutative user operation on a datatype with holes at 2
    // and 4 ranks (README, "Problems of the system MPI"): never theirs (Reduce_scatter_block
    // is never handed to the system MPI, `select::native_trusted`)
    let trusted = r.native_trusted() && (r.commutative || r.ti.dense());
    let ch = c.choose_with(coll, total * r.ti.size, r.commutative, trusted);
    if ch.algo == Algo::Native {
        return Ok(c.native());
    }
    let me = c.me();
    let k = key(
        coll,
        &ch,
        0,
        inplace as u8,
        op,
        vec![datatype],
        counts.clone(),
    );
    c.launch(k, sendbuf, recvbuf, || {
        Ok(match ch.algo {
            Algo::Shm => match c.hier() {
                // (across nodes only Reduce_scatter_block: `hier_serves`; beyond the slot
                // where the nodes' ranks are consecutive, `Ctx::shm_decide`)
                Some(h) => {
                    let bytes = total * r.ti.size;
                    let lead = c.leaders_choice(&h, Coll::ReduceScatter, bytes, r.commutative);
                    if c.single_copy() {
                        let whole = algo::Reduction { count: total, ..r };
                        let across = algo::hier::Across::Blocks(r.count);
                        algo::hier::reduce_pipelined(c.slots(), &h, &lead, &whole, inplace, across)
                    } else {
                        algo::hier::reduce_scatter_block(c.slots(), &h, &lead, &r, inplace)
                    }
                }
                None if c.single_copy() => {
                    algo::single::reduce_scatter(c.slots(), me, &r, &counts, inplace)
                }
                None if coll == Coll::ReduceScatter => {
                    algo::shm::reduce_scatter(c.slots(), me, &r, &counts, inplace)
                }
                None => algo::shm::reduce_scatter_block(c.slots(), me, &r, inplace),
            },
            _ => algo::reduce_scatter::build(&ch, me, &r, &counts, inplace),
        })
    })
}

#[inline]
pub unsafe fn reduce_scatter(
    call: Call,
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    recvcounts: Counts,
    datatype: MPI_Datatype,
    op: MPI_Op,
    comm: MPI_Comm,
    native: &(impl Fn() -> c_int + Copy),
) -> c_int {
    hook!(call, comm, native, memo_v[sendbuf, recvbuf, datatype, op;
        // SAFETY: sized by the group (MPI-4.0 §6.10.1)
        arrays |m, a| unsafe { a.counts(recvcounts, m.size() as usize) };
        types [datatype]; ops op], |c| {
        if c.st.inter {
            let counts = c.counts(recvcounts, c.size() as usize, "recvcounts")?;
            return inter::reduce_scatter(c, Coll::ReduceScatter, sendbuf, recvbuf, counts, datatype, op);
        }
        let counts = c.counts(recvcounts, c.size() as usize, "recvcounts")?;
        reduce_scatter_common(
            c,
            Coll::ReduceScatter,
            sendbuf,
            recvbuf,
            counts,
            datatype,
            op,
        )
    })
}

#[inline]
pub unsafe fn reduce_scatter_block(
    call: Call,
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    recvcount: i64,
    datatype: MPI_Datatype,
    op: MPI_Op,
    comm: MPI_Comm,
    native: &(impl Fn() -> c_int + Copy),
) -> c_int {
    hook!(call, comm, native, memo[sendbuf, recvbuf, recvcount, datatype, op; types datatype; ops op], |c| {
        if c.st.inter {
            c.check_count(recvcount, "recvcount")?;
            let counts = vec![recvcount; c.size() as usize];
            return inter::reduce_scatter(c, Coll::ReduceScatterBlock, sendbuf, recvbuf, counts, datatype, op);
        }
        c.check_count(recvcount, "recvcount")?;
        let counts = vec![recvcount; c.size() as usize];
        reduce_scatter_common(
            c,
            Coll::ReduceScatterBlock,
            sendbuf,
            recvbuf,
            counts,
            datatype,
            op,
        )
    })
}

fn scan_common(
    c: &Ctx<'_>,
    coll: Coll,
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: i64,
    datatype: MPI_Datatype,
    op: MPI_Op,
) -> Result<Done, Raised> {
    if c.st.inter {
        return inter::scan(c);
    }
    let r = c.reduction(count, datatype, op)?;
    let inplace = in_place(sendbuf);
    if !inplace {
        c.check_buffer(sendbuf, count, datatype, "the send buffer")?;
    }
    c.check_buffer(recvbuf, count, datatype, "the receive buffer")?;
    c.check_alias(!inplace && count != 0, sendbuf, recvbuf)?;
    let ch = c.choose_with(coll, r.bytes(), r.commutative, r.native_trusted());
    if ch.algo == Algo::Native {
        return Ok(c.native());
    }
    let me = c.me();
    let exclusive = coll == Coll::Exscan;
    let k = key(coll, &ch, 0, inplace as u8, op, vec![datatype], vec![count]);
    c.launch(k, sendbuf, recvbuf, || {
        Ok(match ch.algo {
            Algo::Shm if c.single_copy() => {
                algo::single::scan(c.slots(), me, &r, inplace, exclusive)
            }
            Algo::Shm => algo::shm::scan(c.slots(), me, &r, inplace, exclusive),
            _ => algo::scan::build(&ch, me, &r, inplace, exclusive),
        })
    })
}

#[inline]
pub unsafe fn scan(
    call: Call,
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: i64,
    datatype: MPI_Datatype,
    op: MPI_Op,
    comm: MPI_Comm,
    native: &(impl Fn() -> c_int + Copy),
) -> c_int {
    hook!(call, comm, native, memo[sendbuf, recvbuf, count, datatype, op; types datatype; ops op], |c| {
        scan_common(c, Coll::Scan, sendbuf, recvbuf, count, datatype, op)
    })
}

#[inline]
pub unsafe fn exscan(
    call: Call,
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: i64,
    datatype: MPI_Datatype,
    op: MPI_Op,
    comm: MPI_Comm,
    native: &(impl Fn() -> c_int + Copy),
) -> c_int {
    hook!(call, comm, native, memo[sendbuf, recvbuf, count, datatype, op; types datatype; ops op], |c| {
        scan_common(c, Coll::Exscan, sendbuf, recvbuf, count, datatype, op)
    })
}

/// Shared by the neighbourhood collectives: blocks per destination and per source.
fn neighbor_common(
    c: &Ctx<'_>,
    coll: Coll,
    sendbuf: *const c_void,
    send: &dyn Fn(usize) -> (i64, i64, MPI_Datatype),
    recvbuf: *mut c_void,
    recv: &dyn Fn(usize) -> (i64, i64, MPI_Datatype),
) -> Result<Done, Raised> {
    if in_place(sendbuf) || in_place(recvbuf) {
        return c.fail(
            MPI_ERR_BUFFER,
            "MPI_IN_PLACE is not allowed in neighbourhood collectives",
        );
    }
    let nb = match c.st.neighbors() {
        Ok(n) => n.clone(),
        Err(e) => return c.fail(e, "the communicator has no process topology"),
    };
    let mut kc = Vec::new();
    let mut types = Vec::new();
    let mut sends = Vec::new();
    for (j, &peer) in nb.dests.iter().enumerate() {
        let (d, n, t) = send(j);
        c.check_count(n, "a send count")?;
        let ti = c.type_info(t, "sendtype")?;
        crate::platform::counters::note_bytes((n * ti.size) as u64);
        sends.push((Block::new(Addr::send(d), n, t, &ti), peer));
        kc.extend([d, n]);
        types.push(t);
    }
    let mut recvs = Vec::new();
    for (i, &peer) in nb.sources.iter().enumerate() {
        let (d, n, t) = recv(i);
        c.check_count(n, "a receive count")?;
        let ti = c.type_info(t, "recvtype")?;
        recvs.push((Block::new(Addr::recv(d), n, t, &ti), peer));
        kc.extend([d, n]);
        types.push(t);
    }
    // the system MPI does not check aliased buffers here, and crashes
    let (send_blocks, recv_blocks): (Vec<Block>, Vec<Block>) = (
        sends.iter().map(|x| x.0).collect(),
        recvs.iter().map(|x| x.0).collect(),
    );
    c.check_alias(overlapping(&send_blocks, &recv_blocks), sendbuf, recvbuf)?;
    // with a process listed twice among the neighbours (a periodic dimension of size 1 or
    // 2, a graph with a repeated edge), MPICH 4.0.2 matches the messages out of the order
    // MPI-4.0 §8.6 defines (README, "Problems of the system MPI")
    let ch = c.choose_with(coll, 0, true, !nb.repeated);
    if ch.algo == Algo::Native {
        return Ok(c.native());
    }
    let me = c.me();
    let cart = nb.cart;
    let k = key(coll, &ch, 0, 0, MPI_OP_NULL(), types, kc);
    c.launch(k, sendbuf, recvbuf, || {
        Ok(algo::neighbor::single_round(me, &sends, &recvs, cart))
    })
}

fn extent(c: &Ctx<'_>, dt: MPI_Datatype, what: &str) -> Result<i64, Raised> {
    Ok(c.type_info(dt, what)?.extent)
}

/// Number of sources and destinations of the communicator's topology.
fn degrees(c: &Ctx<'_>) -> Result<(usize, usize), Raised> {
    match c.st.neighbors() {
        Ok(n) => Ok((n.sources.len(), n.dests.len())),
        Err(e) => c.fail(e, "the communicator has no process topology"),
    }
}

#[inline]
pub unsafe fn neighbor_allgather(
    call: Call,
    sendbuf: *const c_void,
    sendcount: i64,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcount: i64,
    recvtype: MPI_Datatype,
    comm: MPI_Comm,
    native: &(impl Fn() -> c_int + Copy),
) -> c_int {
    hook!(call, comm, native, memo[sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype; types sendtype, recvtype; ops MPI_OP_NULL()], |c| {
        let rext = extent(c, recvtype, "recvtype")?;
        neighbor_common(
            c,
            Coll::NeighborAllgather,
            sendbuf,
            &|_| (0, sendcount, sendtype),
            recvbuf,
            &|i| (i as i64 * recvcount * rext, recvcount, recvtype),
        )
    })
}

pub unsafe fn neighbor_allgatherv(
    call: Call,
    sendbuf: *const c_void,
    sendcount: i64,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcounts: Counts,
    displs: Counts,
    recvtype: MPI_Datatype,
    comm: MPI_Comm,
    native: &dyn Fn() -> c_int,
) -> c_int {
    hook!(call, comm, native, |c| {
        let (indeg, _) = degrees(c)?;
        let rc = c.counts(recvcounts, indeg, "recvcounts")?;
        let rd = c.displs(displs, indeg, "displs")?;
        let rext = extent(c, recvtype, "recvtype")?;
        neighbor_common(
            c,
            Coll::NeighborAllgatherv,
            sendbuf,
            &|_| (0, sendcount, sendtype),
            recvbuf,
            &|i| (rd[i] * rext, rc[i], recvtype),
        )
    })
}

#[inline]
pub unsafe fn neighbor_alltoall(
    call: Call,
    sendbuf: *const c_void,
    sendcount: i64,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcount: i64,
    recvtype: MPI_Datatype,
    comm: MPI_Comm,
    native: &(impl Fn() -> c_int + Copy),
) -> c_int {
    hook!(call, comm, native, memo[sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype; types sendtype, recvtype; ops MPI_OP_NULL()], |c| {
        let sext = extent(c, sendtype, "sendtype")?;
        let rext = extent(c, recvtype, "recvtype")?;
        neighbor_common(
            c,
            Coll::NeighborAlltoall,
            sendbuf,
            &|j| (j as i64 * sendcount * sext, sendcount, sendtype),
            recvbuf,
            &|i| (i as i64 * recvcount * rext, recvcount, recvtype),
        )
    })
}

pub unsafe fn neighbor_alltoallv(
    call: Call,
    sendbuf: *const c_void,
    sendcounts: Counts,
    sdispls: Counts,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcounts: Counts,
    rdispls: Counts,
    recvtype: MPI_Datatype,
    comm: MPI_Comm,
    native: &dyn Fn() -> c_int,
) -> c_int {
    hook!(call, comm, native, |c| {
        let (indeg, outdeg) = degrees(c)?;
        let sc = c.counts(sendcounts, outdeg, "sendcounts")?;
        let sd = c.displs(sdispls, outdeg, "sdispls")?;
        let rc = c.counts(recvcounts, indeg, "recvcounts")?;
        let rd = c.displs(rdispls, indeg, "rdispls")?;
        let sext = extent(c, sendtype, "sendtype")?;
        let rext = extent(c, recvtype, "recvtype")?;
        neighbor_common(
            c,
            Coll::NeighborAlltoallv,
            sendbuf,
            &|j| (sd[j] * sext, sc[j], sendtype),
            recvbuf,
            &|i| (rd[i] * rext, rc[i], recvtype),
        )
    })
}

pub unsafe fn neighbor_alltoallw(
    call: Call,
    sendbuf: *const c_void,
    sendcounts: Counts,
    sdispls: Counts,
    sendtypes: *const MPI_Datatype,
    recvbuf: *mut c_void,
    recvcounts: Counts,
    rdispls: Counts,
    recvtypes: *const MPI_Datatype,
    comm: MPI_Comm,
    native: &dyn Fn() -> c_int,
) -> c_int {
    hook!(call, comm, native, |c| {
        let (indeg, outdeg) = degrees(c)?;
        let sc = c.counts(sendcounts, outdeg, "sendcounts")?;
        let sd = c.displs(sdispls, outdeg, "sdispls")?;
        let (st, _) = c.types(sendtypes, outdeg, "sendtypes")?;
        let rc = c.counts(recvcounts, indeg, "recvcounts")?;
        let rd = c.displs(rdispls, indeg, "rdispls")?;
        let (rt, _) = c.types(recvtypes, indeg, "recvtypes")?;
        neighbor_common(
            c,
            Coll::NeighborAlltoallw,
            sendbuf,
            &|j| (sd[j], sc[j], st[j]),
            recvbuf,
            &|i| (rd[i], rc[i], rt[i]),
        )
    })
}

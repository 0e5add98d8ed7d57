//! Layer: services. May use: core, platform.
//!
//! RMA carried out by the origin itself in node-shared memory (`SHIM_GHOST_DIRECT`).
//!
//! A ghost exists to act for a target that does not call MPI. When every process of a
//! window shares one node, no process has to act at all: the window's memory is a POSIX
//! shared-memory object that each user of the node maps too (`win::allocate`), so the
//! origin copies the data itself, in any datatype, with the shim's datatype engine. This is
//! what MPI shared-memory windows do, and the Casper thesis notes that on one node
//! redirection through ghosts is pure cost (§5.6.2.2, lessons in the design digest).
//!
//! What stays as with ghosts: the epochs. Locks are still taken at the target's ghosts
//! (and forced to be acquired before the lock call returns, since the MPI library would
//! otherwise acquire them lazily at the first operation, which never comes), fences and
//! post/start/complete/wait still synchronize the users, and an operation outside an epoch
//! is still an `MPI_ERR_RMA_SYNC` error.
//!
//! Atomicity (MPI-4.0 §12.7): accumulate-type operations to one target apply under that
//! target's lock word in its hidden bytes, taken by every origin, so concurrent
//! accumulates are element-wise atomic and those of one origin apply in program order.
//! A window goes direct only if all its processes are on one node and all of them chose it
//! (every accumulate to a target then takes this path, never mixed with a ghost applying
//! another origin's accumulate). Put and Get copy without the lock, as MPI allows (a
//! concurrent conflicting Put is erroneous).
//!
//! Completion: an operation is complete at the target when the call returns; flushes,
//! unlocks and epoch ends issue a memory fence. The request-based forms return a
//! generalized request that is already complete.

use core::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicU32, Ordering};

use crate::core::dtype::{self, TypeInfo};
use crate::platform::abi::*;
use crate::platform::mpi::p2p;

/// Where a direct operation lands (from `win::route`).
#[derive(Clone, Copy, Debug)]
pub struct Direct {
    /// Start of the target's window memory, in this process's mapping.
    pub base: *mut u8,
    /// The target's window size in bytes.
    pub size: i64,
    /// The operation's byte displacement (target_disp * the target's disp_unit).
    pub offset: i64,
    /// The target's accumulate lock word, in its hidden bytes.
    pub lock: *const AtomicU32,
    /// The user window, for error reports.
    pub win: MPI_Win,
}

impl Direct {
    fn fail(&self, class: c_int, what: &str, why: &str) -> c_int {
        crate::platform::errors::raise_win(self.win, class, &format!("{what}: {why}"))
    }

    /// The target address of `count` elements of `dt`, after checking that they lie in the
    /// target's window (MPI-4.0 §12.3: `MPI_ERR_RMA_RANGE`).
    fn target(&self, count: i64, dt: MPI_Datatype, what: &str) -> Result<*mut u8, c_int> {
        let ti =
            dtype::check_usable(dt).map_err(|c| self.fail(c, what, "invalid target datatype"))?;
        if count < 0 {
            return Err(self.fail(MPI_ERR_COUNT, what, "negative target count"));
        }
        if count > 0 && ti.size > 0 {
            let (lo, hi) = span(&ti, count);
            if self.offset + lo < 0 || self.offset + hi > self.size {
                return Err(self.fail(
                    MPI_ERR_RMA_RANGE,
                    what,
                    &format!(
                        "bytes {}..{} are outside the target's window of {} bytes",
                        self.offset + lo,
                        self.offset + hi,
                        self.size
                    ),
                ));
            }
        }
        Ok(self.base.wrapping_offset(self.offset as isize))
    }

    /// Checks an origin (or result) buffer's count and datatype, as the MPI library checks
    /// them before anything moves (MPI-4.0 §12.3: `MPI_ERR_COUNT`, `MPI_ERR_TYPE`).
    fn buffer(&self, count: i64, dt: MPI_Datatype, what: &str) -> Result<(), c_int> {
        if count < 0 {
            return Err(self.fail(MPI_ERR_COUNT, what, "negative count"));
        }
        dtype::check_usable(dt)
            .map(|_| ())
            .map_err(|c| self.fail(c, what, "invalid datatype"))
    }

    /// Holds the target's accumulate lock until dropped.
    fn locked(&self) -> Guard {
        // SAFETY: the lock word lives in the target's mapped hidden bytes for the window's
        // life, 4-byte aligned (hidden bytes start at a multiple of 64).
        let l = unsafe { &*self.lock };
        let mut spins = 0u32;
        while l
            .compare_exchange_weak(0, 1, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            spins += 1;
            if spins < 100 {
                core::hint::spin_loop();
            } else {
                // the holder may be descheduled on an oversubscribed node
                std::thread::yield_now();
            }
        }
        Guard(l)
    }
}

struct Guard(&'static AtomicU32);

impl Drop for Guard {
    fn drop(&mut self) {
        self.0.store(0, Ordering::Release);
    }
}

/// Lowest and one-past-highest byte of `count` elements of a type, relative to the buffer.
fn span(ti: &TypeInfo, count: i64) -> (i64, i64) {
    let (lo, hi) = (ti.true_lb, ti.true_lb + ti.true_extent);
    let shift = (count - 1) * ti.extent;
    (lo.min(lo + shift), hi.max(hi + shift))
}

/// A scratch buffer of `bytes`, aligned for any predefined type (the reduction kernels
/// want natural alignment).
fn scratch(bytes: usize) -> Vec<u128> {
    vec![0u128; bytes.div_ceil(16).max(1)]
}

/// The bytes that `n` consecutive elements of a type take from the buffer's start: `n`
/// whole extents (the reduction kernels view an element as a C struct of the extent's
/// size), or the span of their data if longer (MPI-4.0 §5.1.8).
fn scratch_bytes(ei: &TypeInfo, n: i64) -> usize {
    let n = n.max(0);
    (ei.true_lb.max(0) + ei.span(n).max(n * ei.extent)).max(0) as usize
}

/// `MPI_Put` (and `MPI_Rput`'s work): origin elements into the target's layout.
///
/// # Safety
/// The application's origin buffer for `oc` elements of `ot`.
pub unsafe fn put(
    d: Direct,
    o: *const c_void,
    oc: i64,
    ot: MPI_Datatype,
    tc: i64,
    tt: MPI_Datatype,
) -> c_int {
    // SAFETY: the caller's origin buffer.
    unsafe { transfer(d, o.cast_mut(), (oc, ot), (tc, tt), true) }
}

/// `MPI_Get`: target elements into the origin's layout.
///
/// # Safety
/// The application's origin buffer for `oc` elements of `ot`.
pub unsafe fn get(
    d: Direct,
    o: *mut c_void,
    oc: i64,
    ot: MPI_Datatype,
    tc: i64,
    tt: MPI_Datatype,
) -> c_int {
    // SAFETY: the caller's origin buffer.
    unsafe { transfer(d, o, (oc, ot), (tc, tt), false) }
}

/// Put (`to_target`) or Get: a typed copy between the origin and the checked target range.
///
/// # Safety
/// The origin buffer for `oc` elements of `ot` (only read for a Put).
unsafe fn transfer(
    d: Direct,
    o: *mut c_void,
    (oc, ot): (i64, MPI_Datatype),
    (tc, tt): (i64, MPI_Datatype),
    to_target: bool,
) -> c_int {
    let what = if to_target { "MPI_Put" } else { "MPI_Get" };
    if let Err(rc) = d.buffer(oc, ot, what) {
        return rc;
    }
    let t = match d.target(tc, tt, what) {
        Ok(t) => t.cast::<c_void>(),
        Err(rc) => return rc,
    };
    // SAFETY: the origin per the caller; the target range checked above.
    let rc = unsafe {
        if to_target {
            dtype::copy(o, oc, ot, t, tc, tt)
        } else {
            dtype::copy(t, tc, tt, o, oc, ot)
        }
    };
    done(d, rc, what)
}

fn done(d: Direct, rc: c_int, what: &str) -> c_int {
    if rc == MPI_SUCCESS {
        MPI_SUCCESS
    } else {
        d.fail(rc, what, "the data could not be copied")
    }
}

/// `MPI_Accumulate`.
///
/// # Safety
/// As for [`put`].
pub unsafe fn accumulate(
    d: Direct,
    o: *const c_void,
    oc: i64,
    ot: MPI_Datatype,
    tc: i64,
    tt: MPI_Datatype,
    op: MPI_Op,
) -> c_int {
    // SAFETY: the caller's buffers.
    unsafe { apply(d, (o, oc, ot), None, (tc, tt), op, "MPI_Accumulate") }
}

/// `MPI_Get_accumulate`.
///
/// # Safety
/// As for [`put`], and the result buffer for `rc` elements of `rt`.
#[allow(clippy::too_many_arguments)]
pub unsafe fn get_accumulate(
    d: Direct,
    o: *const c_void,
    oc: i64,
    ot: MPI_Datatype,
    r: *mut c_void,
    rc: i64,
    rt: MPI_Datatype,
    tc: i64,
    tt: MPI_Datatype,
    op: MPI_Op,
) -> c_int {
    // SAFETY: the caller's buffers.
    unsafe {
        apply(
            d,
            (o, oc, ot),
            Some((r, rc, rt)),
            (tc, tt),
            op,
            "MPI_Get_accumulate",
        )
    }
}

/// `MPI_Fetch_and_op`: `MPI_Get_accumulate` of one element.
///
/// # Safety
/// One element of `dt` at `o` and at `r`.
pub unsafe fn fetch_and_op(
    d: Direct,
    o: *const c_void,
    r: *mut c_void,
    dt: MPI_Datatype,
    op: MPI_Op,
) -> c_int {
    // SAFETY: the caller's buffers.
    unsafe {
        apply(
            d,
            (o, 1, dt),
            Some((r, 1, dt)),
            (1, dt),
            op,
            "MPI_Fetch_and_op",
        )
    }
}

/// The accumulate-type operations: under the target's lock, the target elements are read
/// into a scratch buffer (returned in `result` if asked for), combined with the origin's
/// (`target = origin op target`; `MPI_REPLACE` stores the origin's, `MPI_NO_OP` nothing)
/// and written back.
///
/// # Safety
/// The application's origin and result buffers for their counts and datatypes.
unsafe fn apply(
    d: Direct,
    (o, oc, ot): (*const c_void, i64, MPI_Datatype),
    result: Option<(*mut c_void, i64, MPI_Datatype)>,
    (tc, tt): (i64, MPI_Datatype),
    op: MPI_Op,
    what: &str,
) -> c_int {
    // MPI_NO_OP ignores the origin buffer (MPI-4.0 §12.3.4)
    if op != MPI_NO_OP() {
        if let Err(rc) = d.buffer(oc, ot, what) {
            return rc;
        }
    }
    if let Some((_, rn, rt)) = result {
        if let Err(rc) = d.buffer(rn, rt, what) {
            return rc;
        }
    }
    let t = match d.target(tc, tt, what) {
        Ok(t) => t,
        Err(rc) => return rc,
    };
    let elem = match dtype::flat::element_type(tt) {
        Ok(Some(e)) => e,
        Ok(None) => {
            return d.fail(
                MPI_ERR_TYPE,
                what,
                "the target datatype mixes predefined types",
            );
        }
        Err(c) => return d.fail(c, what, "invalid target datatype"),
    };
    let no_op = op == MPI_NO_OP();
    if !no_op && op != MPI_REPLACE() {
        if !is_builtin_op(op) {
            return d.fail(
                MPI_ERR_OP,
                what,
                "only predefined operations apply to RMA (MPI-4.0 §12.3.4)",
            );
        }
        if let Err(c) = crate::core::ops::check(op, elem) {
            return d.fail(c, what, "the operation is not defined for the datatype");
        }
    }
    let ei = match dtype::info(elem) {
        Ok(i) if i.size > 0 => i,
        _ => return d.fail(MPI_ERR_TYPE, what, "an empty element type"),
    };
    let es = ei.size as usize;
    let tsize = match dtype::info(tt) {
        Ok(i) => i.size * tc,
        Err(c) => return d.fail(c, what, "invalid target datatype"),
    };
    let n = tsize / es as i64;
    // the origin (and the result) must carry the same elements (MPI-4.0 §12.3.4): a shorter
    // origin would be combined with zeros
    let same = |count: i64, dt: MPI_Datatype| {
        dtype::flat::element_type(dt).ok().flatten() == Some(elem)
            && dtype::info(dt).is_ok_and(|i| i.size * count == tsize)
    };
    if !no_op && !same(oc, ot) {
        return d.fail(
            MPI_ERR_TYPE,
            what,
            "the origin data does not match the target's elements",
        );
    }
    if let Some((_, rn, rt)) = result {
        if !same(rn, rt) {
            return d.fail(
                MPI_ERR_TYPE,
                what,
                "the result buffer does not match the target's elements",
            );
        }
    }
    // The scratch buffers hold n elements laid out by the element's extent, as the copies
    // and the reduction below walk them: a pair type's size is not its extent (MPI-4.0
    // §6.9.4, MPI_SHORT_INT: 6 bytes of data in 8), and sizing them by size overran them.
    let bytes = scratch_bytes(&ei, n);
    let mut a = scratch(bytes);
    let ap = a.as_mut_ptr().cast::<c_void>();
    if !no_op {
        // SAFETY: the origin per the caller; `a` holds n elements.
        let rc = unsafe { dtype::copy(o, oc, ot, ap, n, elem) };
        if rc != MPI_SUCCESS {
            return d.fail(rc, what, "the origin data could not be read");
        }
    }
    let mut b = scratch(bytes);
    let bp = b.as_mut_ptr().cast::<c_void>();
    let _g = d.locked();
    let read = result.is_some() || !(no_op || op == MPI_REPLACE());
    // SAFETY (below): the target range was checked; the scratch buffers hold n elements;
    // the result buffer per the caller.
    unsafe {
        if read {
            let rc = dtype::copy(t.cast(), tc, tt, bp, n, elem);
            if rc != MPI_SUCCESS {
                return d.fail(rc, what, "the target data could not be read");
            }
        }
        if let Some((r, rn, rt)) = result {
            let rc = dtype::copy(bp, n, elem, r, rn, rt);
            if rc != MPI_SUCCESS {
                return d.fail(rc, what, "the result could not be stored");
            }
        }
        let src = if no_op {
            return MPI_SUCCESS;
        } else if op == MPI_REPLACE() {
            ap
        } else {
            let rc = crate::core::ops::reduce_local(ap, bp, n, elem, op);
            if rc != MPI_SUCCESS {
                return d.fail(rc, what, "the reduction failed");
            }
            bp
        };
        done(d, dtype::copy(src, n, elem, t.cast(), tc, tt), what)
    }
}

/// `MPI_Compare_and_swap`: under the target's lock, the old value goes to `r` and is
/// replaced by `o` if its bytes equal `cmp`'s.
///
/// # Safety
/// One element of `dt` at each of `o`, `cmp` and `r`.
pub unsafe fn compare_and_swap(
    d: Direct,
    o: *const c_void,
    cmp: *const c_void,
    r: *mut c_void,
    dt: MPI_Datatype,
) -> c_int {
    let what = "MPI_Compare_and_swap";
    let t = match d.target(1, dt, what) {
        Ok(t) => t,
        Err(rc) => return rc,
    };
    if !is_predefined_datatype(dt) {
        return d.fail(MPI_ERR_TYPE, what, "the datatype must be predefined");
    }
    let Some(n) = dtype::size_of(dt) else {
        return d.fail(MPI_ERR_TYPE, what, "invalid datatype");
    };
    let _g = d.locked();
    // SAFETY: n bytes at each of the caller's buffers and at the checked target.
    unsafe {
        let old = core::slice::from_raw_parts(t, n).to_vec();
        core::ptr::copy_nonoverlapping(old.as_ptr(), r.cast::<u8>(), n);
        if old.as_slice() == core::slice::from_raw_parts(cmp.cast::<u8>(), n) {
            core::ptr::copy_nonoverlapping(o.cast::<u8>(), t, n);
        }
    }
    MPI_SUCCESS
}

/// Generalized-request callbacks of an operation that completed when it was issued.
unsafe extern "C" fn query(_extra: *mut c_void, status: *mut MPI_Status) -> c_int {
    // SAFETY: the status MPI hands us.
    let Some(st) = (unsafe { status.as_mut() }) else {
        return MPI_SUCCESS;
    };
    // an RMA request reports no data (MPI-4.0 §12.3.5)
    let _ = p2p::status_set_elements(st, MPI_BYTE(), 0);
    let _ = p2p::status_set_cancelled(st, false);
    st.MPI_SOURCE = MPI_UNDEFINED;
    st.MPI_TAG = MPI_UNDEFINED;
    MPI_SUCCESS
}
unsafe extern "C" fn free_fn(_extra: *mut c_void) -> c_int {
    MPI_SUCCESS
}
unsafe extern "C" fn cancel_fn(_extra: *mut c_void, _complete: c_int) -> c_int {
    MPI_SUCCESS
}

/// Stores a complete request in `*req` after the operation `rc` (the request-based forms).
///
/// # Safety
/// `req` is the application's request out-pointer.
pub unsafe fn completed(rc: c_int, req: *mut MPI_Request) -> c_int {
    if rc != MPI_SUCCESS {
        return rc;
    }
    if req.is_null() {
        return MPI_ERR_REQUEST;
    }
    type Q = unsafe extern "C" fn(*mut c_void, *mut MPI_Status) -> c_int;
    type F = unsafe extern "C" fn(*mut c_void) -> c_int;
    type C = unsafe extern "C" fn(*mut c_void, c_int) -> c_int;
    let (q, f, c): (Q, F, C) = (query, free_fn, cancel_fn);
    // SAFETY: callbacks with the MPI signatures, no extra state.
    let started = unsafe {
        p2p::grequest_start(
            q as *mut c_void,
            f as *mut c_void,
            c as *mut c_void,
            core::ptr::null_mut(),
        )
    };
    let r = match started {
        Ok(r) => r,
        Err(e) => return e.code(),
    };
    // SAFETY: the caller's out-pointer, checked non-null above.
    unsafe { *req = r };
    // the request is ours to complete at once
    p2p::grequest_complete(r)
        .err()
        .map_or(MPI_SUCCESS, |e| e.code())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::platform::mpi::fake;

    #[test]
    fn scratch_buffers_span_extents_not_sizes() {
        // (type, size, extent, true extent, elements, bytes): the pair types' size is not
        // their extent (MPICH on x86-64), a buffer of n * size bytes was overrun
        let cases = [
            ("MPI_INT", 4, 4, 4, 3, 12),
            ("MPI_FLOAT_INT", 8, 8, 8, 5, 40),
            ("MPI_SHORT_INT", 6, 8, 8, 5, 40),
            ("MPI_DOUBLE_INT", 12, 16, 12, 5, 80),
            ("MPI_LONG_INT", 12, 16, 12, 1, 16),
            ("MPI_LONG_DOUBLE_INT", 20, 32, 20, 1000, 32000),
            ("MPI_LONG_DOUBLE_INT", 20, 32, 20, 0, 0),
        ];
        for (name, size, extent, true_extent, n, bytes) in cases {
            let ei = TypeInfo {
                size,
                lb: 0,
                extent,
                true_lb: 0,
                true_extent,
                contiguous: size == extent,
            };
            assert_eq!(scratch_bytes(&ei, n), bytes, "{name} x{n}");
            assert!(scratch_bytes(&ei, n) as i64 >= n * size, "{name} x{n}");
        }
    }

    #[test]
    fn a_failed_operation_returns_its_code_and_starts_no_request() {
        let _f = fake::install(|_| Ok(vec![1]));
        let mut req = 5 as MPI_Request;
        // SAFETY: a valid request out-pointer.
        assert_eq!(
            unsafe { completed(MPI_ERR_RMA_RANGE, &mut req) },
            MPI_ERR_RMA_RANGE
        );
        assert_eq!(req, 5 as MPI_Request);
        // SAFETY: a NULL out-pointer is checked.
        assert_eq!(
            unsafe { completed(MPI_SUCCESS, std::ptr::null_mut()) },
            MPI_ERR_REQUEST
        );
        assert!(fake::calls().is_empty());
    }

    #[test]
    fn a_request_based_operation_gets_a_completed_generalized_request() {
        let _f = fake::install(|c| match c.name {
            "grequest_start" => Ok(vec![555]),
            _ => Ok(vec![]),
        });
        let mut req = MPI_REQUEST_NULL();
        // SAFETY: a valid request out-pointer.
        assert_eq!(unsafe { completed(MPI_SUCCESS, &mut req) }, MPI_SUCCESS);
        assert_eq!(req, 555 as MPI_Request);
        let calls = fake::calls();
        assert_eq!(fake::names(), ["grequest_start", "grequest_complete"]);
        // three callbacks and no extra state
        assert!(calls[0].args[..3].iter().all(|&f| f != 0));
        assert_eq!(calls[0].args[3], 0);
        assert_eq!(calls[1].args, [555]);
    }

    #[test]
    fn errors_of_the_generalized_request_come_back_unchanged() {
        // (failing call, the calls made)
        let cases: [(&str, &[&str]); 2] = [
            ("grequest_start", &["grequest_start"]),
            (
                "grequest_complete",
                &["grequest_start", "grequest_complete"],
            ),
        ];
        for (failing, names) in cases {
            let _f = fake::install(move |c| {
                if c.name == failing {
                    Err(4242)
                } else {
                    Ok(vec![9])
                }
            });
            let mut req = MPI_REQUEST_NULL();
            // SAFETY: a valid request out-pointer.
            assert_eq!(
                unsafe { completed(MPI_SUCCESS, &mut req) },
                4242,
                "{failing}"
            );
            assert_eq!(fake::names(), names);
        }
    }

    #[test]
    fn the_query_reports_no_data_and_no_cancellation() {
        let _f = fake::install(|_| Ok(vec![]));
        let mut st = MPI_Status::default();
        // SAFETY: a valid status.
        assert_eq!(unsafe { query(std::ptr::null_mut(), &mut st) }, MPI_SUCCESS);
        assert_eq!((st.MPI_SOURCE, st.MPI_TAG), (MPI_UNDEFINED, MPI_UNDEFINED));
        let calls: Vec<_> = fake::calls()
            .into_iter()
            .map(|c| (c.name, c.args))
            .collect();
        assert_eq!(
            calls,
            [
                ("status_set_elements", vec![MPI_BYTE() as i64, 0]),
                ("status_set_cancelled", vec![0])
            ]
        );
    }
}

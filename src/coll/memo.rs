//! A per-thread memo of collective calls that went to the system MPI.
//!
//! For small messages `auto` hands most collectives to `native`, and then the shim's own
//! per-call work (communicator state, argument checks, the decision) is all it adds to the
//! system MPI's 0.2-0.5 µs: measured with callgrind, about 600 instructions on top of
//! MPICH's 550 for an 8-byte `MPI_Allreduce`. A program repeats such calls with the same
//! arguments, so when a call matches the last one of the same function that went native
//! (same communicator, buffers, counts, predefined datatypes, predefined operation, root),
//! the checks and the decision would come out the same, and the call goes to the system
//! MPI at once.
//!
//! What a verdict depends on besides the arguments: the communicator's size and rank (fixed
//! while the handle names the same communicator), the datatypes' sizes (predefined types
//! only, whose handles never change meaning), the operation's commutativity (predefined
//! operations only), the forced algorithms (changed at run time through the C API) and the
//! decision tables (cleared with them). [`invalidate`] starts a new epoch whenever one of
//! these can change: a communicator is freed (its handle may be reused) or an algorithm is
//! overridden. Calls under `SHIM_STATS` skip the memo, so every call's path and bytes are
//! counted as before. The v- and w-collectives' arrays are part of the key by content
//! ([`Arrays`]: an array may change behind an unchanged pointer).

use core::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::abi::*;
use crate::api::Fid;
use core::ffi::c_int;

/// Arguments a memo key holds (the longest is Gather/Scatter: two buffers, two counts, two
/// datatypes and the root).
const ARGS: usize = 7;
/// Entries per thread, chosen by function id: a loop alternating a few collectives keeps
/// them all.
const SLOTS: usize = 8;

/// The epoch (counted in units of [`EPOCH_UNIT`]) and, in the bits below, the work that
/// every intercepted call must advance ([`SCHEDULES`], [`DETACHED`]): one word that a
/// check before that work can compare with an entry's stamp (the epoch it was stored in,
/// flags clear), so that a single load tells both that the entry is current and that the
/// call has nothing else to do.
static GATE: AtomicU64 = AtomicU64::new(EPOCH_UNIT);
/// Outstanding schedules (`progress`).
pub const SCHEDULES: u64 = 1;
/// Outstanding freed packed requests (`request`).
pub const DETACHED: u64 = 2;
const FLAGS: u64 = SCHEDULES | DETACHED;
const EPOCH_UNIT: u64 = FLAGS + 1;

/// Forgets every thread's memo (see the module docs for when).
pub fn invalidate() {
    GATE.fetch_add(EPOCH_UNIT, Ordering::AcqRel);
}

/// Raises or clears a flag of pending work (`SCHEDULES`, `DETACHED`).
pub fn pending(flag: u64, on: bool) {
    if on {
        GATE.fetch_or(flag, Ordering::AcqRel);
    } else {
        GATE.fetch_and(!flag, Ordering::AcqRel);
    }
}

/// The stamp an entry must carry for a call with no work pending: the current epoch, and
/// no flag up.
#[inline(always)]
pub fn open() -> u64 {
    GATE.load(Ordering::Acquire)
}

/// Array elements a key can hold (counts, displacements, datatypes of the v- and
/// w-collectives); calls with longer arrays are not memoized.
const ARRAY: usize = 16;

/// The scalar part of a call: the arrays' contents are kept apart ([`Arrays`]), so that the
/// calls without arrays build only this on their way to the system MPI.
#[derive(Clone, Copy)]
pub struct Key {
    fid: u16,
    comm: usize,
    args: [usize; ARGS],
}

impl Key {
    /// `args`: every scalar argument that the checks and the decision read (at most
    /// [`ARGS`]; buffers as addresses, handles and counts as integers).
    #[inline]
    pub fn new(fid: Fid, comm: MPI_Comm, args: &[usize]) -> Key {
        let mut a = [0usize; ARGS];
        a[..args.len()].copy_from_slice(args);
        Key {
            fid: fid as u16,
            comm: comm as usize,
            args: a,
        }
    }
}

/// The contents of a call's arrays, compared exactly (an array may change behind an
/// unchanged pointer, so its address alone proves nothing), in a fixed inline buffer (no
/// allocation on the path the memo exists to shorten).
#[derive(Clone, Copy)]
pub struct Arrays {
    len: usize,
    v: [i64; ARRAY],
}

/// Word by word, with early exits: the derived and slice comparisons call `memcmp`, and a
/// vectorized comparison reads the key just built on the stack with 16-byte loads over
/// 8-byte stores, which stalls store forwarding; either was a sixth of a memoized call's
/// time (perf). The arrays are compared only as far as they are filled.
impl PartialEq for Key {
    #[inline]
    fn eq(&self, o: &Key) -> bool {
        self.fid == o.fid
            && self.comm == o.comm
            && self.args.iter().zip(&o.args).all(|(a, b)| a == b)
    }
}
impl Eq for Key {}

impl PartialEq for Arrays {
    #[inline]
    fn eq(&self, o: &Arrays) -> bool {
        self.len == o.len && (0..self.len.min(ARRAY)).all(|i| self.v[i] == o.v[i])
    }
}
impl Eq for Arrays {}

impl Arrays {
    /// No arrays: the calls without array arguments.
    pub const NONE: Arrays = Arrays::new();

    pub const fn new() -> Arrays {
        Arrays {
            len: 0,
            v: [0; ARRAY],
        }
    }

    fn push(&mut self, n: usize, at: impl Fn(usize) -> i64) -> bool {
        if self.len + n > ARRAY {
            return false;
        }
        for i in 0..n {
            self.v[self.len + i] = at(i);
        }
        self.len += n;
        true
    }

    /// Appends a count or displacement array of `n` entries; false if it is NULL (the call
    /// will report that) or does not fit.
    ///
    /// # Safety
    /// A non-NULL `c` holds `n` entries (its length is fixed by the standard).
    pub unsafe fn counts(&mut self, c: Counts, n: usize) -> bool {
        // SAFETY: the caller's contract.
        !(c.is_null() && n > 0) && self.push(n, |i| unsafe { c.get(i) })
    }

    /// Appends `n` datatype handles.
    ///
    /// # Safety
    /// As for [`Arrays::counts`].
    pub unsafe fn types(&mut self, t: *const MPI_Datatype, n: usize) -> bool {
        // SAFETY: the caller's contract.
        !(t.is_null() && n > 0) && self.push(n, |i| unsafe { *t.add(i) } as i64)
    }
}

/// The communicator's size and this process's rank in it, as a remembered call saw them:
/// what the v- and w-collectives' array lengths depend on. While the epoch lasts the
/// handle names the same communicator, so they can be read from the memo instead of the
/// communicator (a lookup that cost a third of a memoized Gatherv: callgrind, 247 -> 157
/// instructions per call on top of the system MPI).
#[derive(Clone, Copy, Default)]
pub struct Shape {
    size: c_int,
    rank: c_int,
}

impl Shape {
    pub fn new(size: c_int, rank: c_int) -> Shape {
        Shape { size, rank }
    }
    pub fn size(&self) -> c_int {
        self.size
    }
    pub fn rank(&self) -> c_int {
        self.rank
    }
}

/// One remembered call: its epoch, scalar key, arrays and communicator shape.
type Entry = (u64, Key, Arrays, Shape);

thread_local! {
    static MEMO: [RefCell<Entry>; SLOTS] = const {
        [const {
            RefCell::new((0, Key { fid: 0, comm: 0, args: [0; ARGS] }, Arrays::new(), Shape { size: 0, rank: 0 }))
        }; SLOTS]
    };
    static WENT_NATIVE: Cell<bool> = const { Cell::new(false) };
}

/// Whether `key` with `arrays` matches a call that went to the system MPI in this epoch.
#[inline]
pub fn hit(key: &Key, arrays: &Arrays) -> bool {
    if crate::stats::enabled() {
        return false;
    }
    let now = epoch();
    MEMO.with(|m| {
        let e = m[key.fid as usize % SLOTS].borrow();
        e.0 == now && e.1 == *key && e.2 == *arrays
    })
}

/// Whether a call with array arguments matches a remembered one: its scalar arguments
/// `key`, and the arrays that `arrays` reads with the communicator shape remembered with
/// them (None: unreadable), so that a hit never looks the communicator up.
#[inline]
pub fn hit_with(key: &Key, arrays: impl FnOnce(&Shape) -> Option<Arrays>) -> bool {
    if crate::stats::enabled() {
        return false;
    }
    let now = epoch();
    MEMO.with(|m| {
        let e = m[key.fid as usize % SLOTS].borrow();
        e.0 == now && e.1 == *key && arrays(&e.3).is_some_and(|a| a == e.2)
    })
}

/// Before a call's checks and decision: nothing has gone native yet.
#[inline]
pub fn arm() {
    WENT_NATIVE.set(false);
}

/// The call is being handed to the system MPI (`Ctx::native`).
#[inline]
pub fn note_native() {
    WENT_NATIVE.set(true);
}

/// After a call: remembers it if it went native, succeeded, and its datatypes and
/// operation are all predefined (`types`, `ops`; `MPI_DATATYPE_NULL`/`MPI_OP_NULL` stand
/// for "none"), with the communicator's `shape` (of use to calls with arrays). The epoch is
/// read before anything is stored, so an invalidation racing with this call leaves the
/// entry stale.
pub fn store(
    key: Key,
    arrays: &Arrays,
    shape: Shape,
    rc: c_int,
    types: &[MPI_Datatype],
    ops: &[MPI_Op],
    epoch: u64,
) {
    if rc != MPI_SUCCESS || !WENT_NATIVE.get() || crate::stats::enabled() {
        return;
    }
    let fixed_types = types
        .iter()
        .all(|&t| t == MPI_DATATYPE_NULL() || is_predefined_datatype(t));
    let fixed_ops = ops.iter().all(|&o| o == MPI_OP_NULL() || is_builtin_op(o));
    if !(fixed_types && fixed_ops) {
        return;
    }
    MEMO.with(|m| *m[key.fid as usize % SLOTS].borrow_mut() = (epoch, key, *arrays, shape));
}

/// The current epoch, to pass to [`store`] (read before the call's checks).
#[inline]
pub fn epoch() -> u64 {
    GATE.load(Ordering::Acquire) & !FLAGS
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(count: usize) -> Key {
        Key::new(Fid::MPI_Allreduce, MPI_COMM_WORLD(), &[8, 16, count, 3, 4])
    }

    fn remember(k: Key, rc: c_int, types: &[MPI_Datatype]) {
        let e = epoch();
        arm();
        note_native();
        store(
            k,
            &Arrays::NONE,
            Shape::default(),
            rc,
            types,
            &[MPI_SUM()],
            e,
        );
    }

    #[test]
    fn hits_only_what_went_native_with_predefined_handles() {
        remember(key(1), MPI_SUCCESS, &[MPI_DOUBLE()]);
        assert!(hit(&key(1), &Arrays::NONE));
        assert!(!hit(&key(2), &Arrays::NONE), "other arguments");
        // a failed call, a derived datatype, or a call that ran a schedule: not remembered
        remember(key(3), MPI_ERR_COUNT, &[MPI_DOUBLE()]);
        assert!(!hit(&key(3), &Arrays::NONE));
        remember(key(4), MPI_SUCCESS, &[0x8c00_0010u32 as MPI_Datatype]);
        assert!(
            !hit(&key(4), &Arrays::NONE),
            "a derived datatype handle can be reused"
        );
        let e = epoch();
        arm();
        store(
            key(5),
            &Arrays::NONE,
            Shape::default(),
            MPI_SUCCESS,
            &[MPI_DOUBLE()],
            &[MPI_SUM()],
            e,
        );
        assert!(!hit(&key(5), &Arrays::NONE), "did not go native");
    }

    #[test]
    fn calls_with_arrays_read_them_with_the_remembered_shape() {
        let k = Key::new(Fid::MPI_Gatherv, MPI_COMM_WORLD(), &[8, 1, 3, 16, 3, 0]);
        let counts = |v: &[i64]| {
            let mut a = Arrays::new();
            assert!(a.push(v.len(), |i| v[i]));
            a
        };
        let e = epoch();
        arm();
        note_native();
        store(
            k,
            &counts(&[1, 1, 1]),
            Shape::new(3, 0),
            MPI_SUCCESS,
            &[MPI_DOUBLE()],
            &[],
            e,
        );
        let mut seen = None;
        assert!(hit_with(&k, |s| {
            seen = Some((s.size(), s.rank()));
            Some(counts(&[1, 1, 1]))
        }));
        assert_eq!(seen, Some((3, 0)));
        assert!(
            !hit_with(&k, |_| Some(counts(&[1, 2, 1]))),
            "an array changed behind the same pointer"
        );
        assert!(!hit_with(&k, |_| None), "arrays that cannot be read");
        let other = Key::new(Fid::MPI_Gatherv, MPI_COMM_WORLD(), &[8, 1, 3, 16, 3, 1]);
        assert!(
            !hit_with(&other, |_| panic!("arrays read for another call")),
            "other scalar arguments: the arrays are not even read"
        );
    }

    #[test]
    fn a_new_epoch_forgets() {
        remember(key(6), MPI_SUCCESS, &[MPI_DOUBLE()]);
        assert!(hit(&key(6), &Arrays::NONE));
        invalidate();
        assert!(!hit(&key(6), &Arrays::NONE));
        // an invalidation between reading the epoch and storing leaves the entry stale
        let e = epoch();
        arm();
        note_native();
        invalidate();
        store(
            key(7),
            &Arrays::NONE,
            Shape::default(),
            MPI_SUCCESS,
            &[MPI_DOUBLE()],
            &[MPI_SUM()],
            e,
        );
        assert!(!hit(&key(7), &Arrays::NONE));
    }

    #[test]
    fn pending_work_shows_in_the_gate_not_in_the_epoch() {
        pending(DETACHED, true);
        assert_eq!(open() & DETACHED, DETACHED);
        assert_eq!(epoch() & FLAGS, 0);
        pending(DETACHED, false);
        assert_eq!(open() & DETACHED, 0);
    }
}

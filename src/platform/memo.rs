//! Layer: platform. May use: nothing.
//!
//! A per-thread memo of collective calls that went to the system MPI, and the calling
//! thread's re-entry mark beside it (one thread-local: see below). It knows calls only as a
//! function id, a communicator and argument words; `hooks::coll` decides what goes in a
//! key, so it sits at the bottom with the other per-call facilities.
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
//! overridden; and, since the fast lane looks at nothing else, when the shim is turned on
//! or off, `SHIM_STATS` is set or a fault is armed. Calls under `SHIM_STATS` skip the memo, so every call's path and bytes are
//! counted as before. The v- and w-collectives' arrays are part of the key by content
//! ([`Arrays`]: an array may change behind an unchanged pointer).
//!
//! The check runs first thing in the hook, before the re-entry bookkeeping and the panic
//! guard (`guard::lane`, the fast lane): the memo sits in the same thread-local as the
//! re-entry flag, its entries are cells compared word by word in place ([`Words`],
//! [`Match`]), and one word (`GATE`) holds the epoch and whether work is pending that
//! every call must advance, so a hit needs one thread-local access and one global load
//! besides the comparison (`scripts/bench/run-fastlane` counts the instructions).

use core::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::platform::abi::*;
use crate::platform::api::Fid;
use core::ffi::c_int;

/// Arguments a memo key holds (the longest is Gather/Scatter: two buffers, two counts, two
/// datatypes and the root).
const ARGS: usize = 7;
/// Entries per thread, chosen by function id: a loop alternating a few collectives keeps
/// them all. With 32 the blocking collectives each have their own (with 8, `MPI_Barrier`
/// and `MPI_Allreduce` shared one, and IMB's Allreduce loop, a Barrier after each call,
/// never hit).
pub const SLOTS: usize = 32;
/// Entries per function: a rooted collective's calls take the entry of their root (modulo
/// `WAYS`), so that a loop rotating the root among up to `WAYS` ranks (IMB does, on every
/// call) keeps every root's call; the other collectives use the first only.
pub const WAYS: usize = 4;

/// The entry (way) a call with `root` takes among its function's; 0 for calls without a
/// root. Negative roots (an intercommunicator's `MPI_ROOT`, `MPI_PROC_NULL`) take a way too:
/// the words still compare the root exactly.
#[inline(always)]
pub fn way(root: c_int) -> usize {
    root as u32 as usize % WAYS
}

/// The epoch (counted in units of [`EPOCH_UNIT`]) and, in the bits below, the work that
/// every intercepted call must advance ([`SCHEDULES`], [`DETACHED`]): one word that the fast
/// lane compares with an entry's stamp (the epoch it was stored in, flags clear), so that a
/// single load tells both that the entry is current and that the call has nothing else to
/// do (`guard::lane`).
static GATE: AtomicU64 = AtomicU64::new(EPOCH_UNIT);
/// Outstanding schedules (`progress`).
pub const SCHEDULES: u64 = 1;
/// Outstanding freed packed requests (`request`).
pub const DETACHED: u64 = 2;
const FLAGS: u64 = SCHEDULES | DETACHED;
/// In an entry's stamp only, never in `GATE`: the call was counted where it went native
/// ([`note_counted`]), so the fast lane never takes it and [`hit`] says so ([`Hit::Counted`]).
const COUNTED: u64 = FLAGS + 1;
const EPOCH_UNIT: u64 = COUNTED << 1;

/// Forgets every thread's memo (see the module docs for when).
pub fn invalidate() {
    GATE.fetch_add(EPOCH_UNIT, Ordering::AcqRel);
}

/// Raises or clears a flag of pending work (`SCHEDULES`, `DETACHED`): while one is up, the
/// fast lane is shut and every call takes the path that advances that work.
pub fn pending(flag: u64, on: bool) {
    if on {
        GATE.fetch_or(flag, Ordering::AcqRel);
    } else {
        GATE.fetch_and(!flag, Ordering::AcqRel);
    }
}

/// The stamp an entry must carry for the fast lane to take the call: the current epoch with
/// no work pending.
#[inline(always)]
pub fn open() -> u64 {
    GATE.load(Ordering::Acquire)
}

/// Array elements a key can hold (counts, displacements, datatypes of the v- and
/// w-collectives); calls with longer arrays are not memoized.
pub const ARRAY: usize = 16;

/// The scalar part of a call: the arrays' contents are kept apart ([`Arrays`]), so that the
/// calls without arrays build only this on their way to the system MPI.
#[derive(Clone, Copy)]
pub struct Key {
    fid: u16,
    way: usize,
    comm: usize,
    args: [usize; ARGS],
}

/// The words a key compares: the communicator, then the scalar arguments.
pub const WORDS: usize = 1 + ARGS;

impl Key {
    /// The function id.
    pub fn fid(&self) -> u16 {
        self.fid
    }

    /// The entry among its function's ([`way`]).
    pub fn way(&self) -> usize {
        self.way
    }

    /// The communicator and the scalar arguments, in the order [`Words`] compares them.
    pub fn words(&self) -> [usize; WORDS] {
        let mut w = [self.comm; WORDS];
        w[1..].copy_from_slice(&self.args);
        w
    }

    /// `args`: every scalar argument that the checks and the decision read (at most
    /// [`ARGS`]; buffers as addresses, handles and counts as integers); `way`: the entry
    /// among the function's ([`way`]).
    #[inline]
    pub fn new(fid: Fid, way: usize, comm: MPI_Comm, args: &[usize]) -> Key {
        let mut a = [0usize; ARGS];
        a[..args.len()].copy_from_slice(args);
        Key {
            fid: fid as u16,
            way: way % WAYS,
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

impl Arrays {
    /// The entries appended, in order.
    pub fn entries(&self) -> &[i64] {
        &self.v[..self.len]
    }

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
    pub const fn new(size: c_int, rank: c_int) -> Shape {
        Shape { size, rank }
    }
    pub fn size(&self) -> c_int {
        self.size
    }
    pub fn rank(&self) -> c_int {
        self.rank
    }
}

/// One remembered call: its stamp, scalar key, arrays and communicator shape, in cells, so
/// that a check reads the words it compares in place (no borrow flag, no copy; the fast lane
/// cannot panic).
struct Entry {
    stamp: Cell<u64>,
    fid: Cell<u16>,
    /// The communicator, then the scalar arguments.
    words: [Cell<usize>; 1 + ARGS],
    len: Cell<usize>,
    v: [Cell<i64>; ARRAY],
    shape: Cell<Shape>,
}

/// A thread's remembered calls (kept in `entry`'s thread-local with the re-entry flag: one
/// thread-local access serves the fast lane).
pub struct Memo {
    slots: [[Entry; WAYS]; SLOTS],
}

impl Memo {
    pub const fn new() -> Memo {
        Memo {
            slots: [const {
                [const {
                    Entry {
                        stamp: Cell::new(0),
                        fid: Cell::new(0),
                        words: [const { Cell::new(0) }; 1 + ARGS],
                        len: Cell::new(0),
                        v: [const { Cell::new(0) }; ARRAY],
                        shape: Cell::new(Shape { size: 0, rank: 0 }),
                    }
                }; WAYS]
            }; SLOTS],
        }
    }

    #[inline(always)]
    fn entry(&self, fid: usize, way: usize) -> &Entry {
        &self.slots[fid % SLOTS][way % WAYS]
    }

    /// Whether a call of `fid` repeats the remembered one stamped `stamp` in its `way`
    /// ([`way`]): `same` compares its communicator and then its scalar arguments, in
    /// [`Key::new`]'s order, through [`Words`]. A function's calls all have the same
    /// arguments, and arrays or none, so for the calls without arrays this is the whole
    /// comparison.
    #[inline(always)]
    pub fn repeats(
        &self,
        stamp: u64,
        fid: Fid,
        way: usize,
        same: impl FnOnce(&mut Words<'_>) -> bool,
    ) -> bool {
        let e = self.entry(fid as usize, way);
        e.stamp.get() == stamp && e.fid.get() == fid as u16 && same(&mut Words(e.words.iter()))
    }

    /// As [`Memo::repeats`], and the call's arrays, which `arrays` compares (through
    /// [`Match`], with the communicator shape remembered with them) in the order the
    /// remembered call's were appended.
    #[inline(always)]
    pub fn repeats_with(
        &self,
        stamp: u64,
        fid: Fid,
        way: usize,
        same: impl FnOnce(&mut Words<'_>) -> bool,
        arrays: impl FnOnce(&Shape, &mut Match<'_>) -> bool,
    ) -> bool {
        if !self.repeats(stamp, fid, way, same) {
            return false;
        }
        let e = self.entry(fid as usize, way);
        let mut m = Match::over(&e.v);
        arrays(&e.shape.get(), &mut m) && m.whole(e.len.get())
    }

    fn put(&self, stamp: u64, key: &Key, arrays: &Arrays, shape: Shape) {
        let e = self.entry(key.fid as usize, key.way);
        e.stamp.set(stamp);
        e.fid.set(key.fid);
        let words = core::iter::once(&key.comm).chain(&key.args);
        for (c, w) in e.words.iter().zip(words) {
            c.set(*w);
        }
        e.len.set(arrays.len);
        for (c, a) in e.v.iter().zip(&arrays.v[..arrays.len.min(ARRAY)]) {
            c.set(*a);
        }
        e.shape.set(shape);
    }
}

/// A scalar argument of a memo key (a buffer address, a count, a handle).
pub trait Word: Copy {
    /// The word the memo keeps.
    fn word(self) -> usize;
    /// Whether `w`, kept for an argument of the same type, is this argument's word.
    #[inline(always)]
    fn is(self, w: usize) -> bool {
        self.word() == w
    }
}

impl Word for c_int {
    #[inline(always)]
    fn word(self) -> usize {
        self as usize
    }
    /// The low half decides: one 32-bit comparison, no sign extension.
    #[inline(always)]
    fn is(self, w: usize) -> bool {
        w as c_int == self
    }
}

impl Word for i64 {
    #[inline(always)]
    fn word(self) -> usize {
        self as usize
    }
}

impl Word for usize {
    #[inline(always)]
    fn word(self) -> usize {
        self
    }
}

impl<T> Word for *const T {
    #[inline(always)]
    fn word(self) -> usize {
        self as usize
    }
}

impl<T> Word for *mut T {
    #[inline(always)]
    fn word(self) -> usize {
        self as usize
    }
}

/// A call's scalar arguments compared with a remembered call's words, in order, in place.
pub struct Words<'a>(core::slice::Iter<'a, Cell<usize>>);

impl Words<'_> {
    /// The comparison against `cells` (a communicator and arguments kept as a [`Key`]'s
    /// words): for other memos of calls by their arguments (`services::coll::lane`).
    pub fn over(cells: &[Cell<usize>]) -> Words<'_> {
        Words(cells.iter())
    }

    /// Whether the next remembered word is `x`'s.
    #[inline(always)]
    pub fn is(&mut self, x: impl Word) -> bool {
        self.0.next().is_some_and(|w| x.is(w.get()))
    }
}

impl Default for Memo {
    fn default() -> Memo {
        Memo::new()
    }
}

/// A call's arrays compared with a remembered call's, as they are read: exactly (an array
/// may change behind an unchanged pointer), in place, stopping at the first difference.
pub struct Match<'a> {
    v: &'a [Cell<i64>],
    at: usize,
}

impl<'a> Match<'a> {
    /// The comparison against `v`, a remembered call's arrays as [`Arrays`] kept them:
    /// for other memos of calls by their arguments (`services::coll::lane`).
    pub fn over(v: &'a [Cell<i64>]) -> Match<'a> {
        Match { v, at: 0 }
    }

    /// Whether exactly the remembered arrays' `len` entries were compared.
    pub fn whole(&self, len: usize) -> bool {
        self.at == len
    }

    #[inline(always)]
    fn next(&mut self, n: usize, at: impl Fn(usize) -> i64) -> bool {
        let end = self.at.saturating_add(n);
        let Some(want) = self.v.get(self.at..end) else {
            return false;
        };
        if !want.iter().enumerate().all(|(i, w)| w.get() == at(i)) {
            return false;
        }
        self.at = end;
        true
    }

    /// Compares a count or displacement array of `n` entries (as [`Arrays::counts`]).
    ///
    /// # Safety
    /// As for [`Arrays::counts`].
    #[inline]
    pub unsafe fn counts(&mut self, c: Counts, n: usize) -> bool {
        // SAFETY: the caller's contract.
        !(c.is_null() && n > 0) && self.next(n, |i| unsafe { c.get(i) })
    }

    /// Compares `n` datatype handles (as [`Arrays::types`]).
    ///
    /// # Safety
    /// As for [`Arrays::counts`].
    #[inline]
    pub unsafe fn types(&mut self, t: *const MPI_Datatype, n: usize) -> bool {
        // SAFETY: the caller's contract.
        !(t.is_null() && n > 0) && self.next(n, |i| unsafe { *t.add(i) } as i64)
    }
}

/// Whether a call of `fid` whose scalar arguments `same` compares (as for
/// [`Memo::repeats`]; no arrays) repeats a call that went to the system MPI in this epoch,
/// on the ordinary path (which advances the pending work itself).
/// What [`hit`] found for a call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hit {
    Miss,
    /// The call went to the system MPI and may go there at once.
    Native,
    /// As `Native`, after counting it as the call did (`note_counted`).
    Counted,
}

/// Whether the entry of `fid` and `way` holds this call from the current epoch.
#[inline]
fn found(m: &Memo, fid: Fid, way: usize, matches: impl FnOnce(&Memo, u64) -> bool) -> Hit {
    if crate::platform::counters::enabled() {
        return Hit::Miss;
    }
    let stamp = m.entry(fid as usize, way).stamp.get();
    if stamp & !COUNTED != epoch() || !matches(m, stamp) {
        Hit::Miss
    } else if stamp & COUNTED != 0 {
        Hit::Counted
    } else {
        Hit::Native
    }
}

#[inline]
pub fn hit(fid: Fid, way: usize, same: impl FnOnce(&mut Words<'_>) -> bool) -> Hit {
    with_memo(|m| found(m, fid, way, |m, stamp| m.repeats(stamp, fid, way, same)))
}

#[inline]
pub fn hit_with(
    fid: Fid,
    way: usize,
    same: impl FnOnce(&mut Words<'_>) -> bool,
    arrays: impl FnOnce(&Shape, &mut Match<'_>) -> bool,
) -> Hit {
    with_memo(|m| {
        found(m, fid, way, |m, stamp| {
            m.repeats_with(stamp, fid, way, same, arrays)
        })
    })
}

thread_local! {
    static WENT_NATIVE: Cell<bool> = const { Cell::new(false) };
    static COUNTS: Cell<bool> = const { Cell::new(false) };
}

/// Before a call's checks and decision: nothing has gone native yet.
#[inline]
pub fn arm() {
    WENT_NATIVE.set(false);
    COUNTS.set(false);
}

/// The call is being handed to the system MPI (`Ctx::native`).
#[inline]
pub fn note_native() {
    WENT_NATIVE.set(true);
}

/// The call did something besides its verdict that a repeat must do again (it counted
/// towards a communicator's first non-blocking instance on the segment): remembered, a
/// repeat is [`Hit::Counted`] and the fast lane leaves it to the hook.
#[inline]
pub fn note_counted() {
    COUNTS.set(true);
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
    if rc != MPI_SUCCESS || !WENT_NATIVE.get() || crate::platform::counters::enabled() {
        return;
    }
    let fixed_types = types
        .iter()
        .all(|&t| t == MPI_DATATYPE_NULL() || is_predefined_datatype(t));
    let fixed_ops = ops.iter().all(|&o| o == MPI_OP_NULL() || is_builtin_op(o));
    if !(fixed_types && fixed_ops) {
        return;
    }
    let stamp = if COUNTS.get() { epoch | COUNTED } else { epoch };
    with_memo(|m| m.put(stamp, &key, arrays, shape));
}

/// The current epoch, to pass to [`store`] (read before the call's checks).
#[inline]
pub fn epoch() -> u64 {
    GATE.load(Ordering::Acquire) & !FLAGS
}

/// The calling thread's state on the entry path, in one thread-local: in a shared library
/// each thread-local a function touches costs it a `__tls_get_addr` call (general-dynamic
/// model), so the re-entry mark (`platform::guard`) and the memo share one, which
/// `guard::lane` reads once.
pub struct Local {
    /// Inside the shim: a hook is running, or this is the progress thread.
    pub in_shim: Cell<bool>,
    pub memo: Memo,
}

thread_local! {
    static LOCAL: Local = const {
        Local {
            in_shim: Cell::new(false),
            memo: Memo::new(),
        }
    };
}

/// The calling thread's entry-path state.
#[inline(always)]
pub fn local() -> &'static Local {
    // the address only, so that `with` stays small enough to be inlined (a call to it
    // costs more than the lane's checks)
    let l = LOCAL.with(|l| l as *const Local);
    // SAFETY: the thread-local has no destructor, so it lives as long as this thread; the
    // reference is used by this thread only (`Local` is not `Sync`).
    unsafe { &*l }
}

/// The calling thread's memo.
#[inline(always)]
pub fn with_memo<R>(f: impl FnOnce(&Memo) -> R) -> R {
    f(&local().memo)
}

#[cfg(test)]
mod tests {
    use super::*;

    const ARGS5: [usize; 5] = [8, 16, 0, 3, 4];

    fn args(count: usize) -> [usize; 5] {
        let mut a = ARGS5;
        a[2] = count;
        a
    }

    /// Compares as the hooks' `same` closures do: the communicator, then the arguments.
    fn same(a: &[usize]) -> impl FnOnce(&mut Words<'_>) -> bool + '_ {
        move |w| w.is(MPI_COMM_WORLD()) && a.iter().all(|x| w.is(*x))
    }

    fn key(fid: Fid, a: &[usize]) -> Key {
        Key::new(fid, 0, MPI_COMM_WORLD(), a)
    }

    fn remember(count: usize, rc: c_int, types: &[MPI_Datatype]) {
        let e = epoch();
        arm();
        note_native();
        store(
            key(Fid::MPI_Allreduce, &args(count)),
            &Arrays::NONE,
            Shape::default(),
            rc,
            types,
            &[MPI_SUM()],
            e,
        );
    }

    fn hits(count: usize) -> bool {
        hit(Fid::MPI_Allreduce, 0, same(&args(count))) == Hit::Native
    }

    fn native_with(
        fid: Fid,
        way: usize,
        same: impl FnOnce(&mut Words<'_>) -> bool,
        arrays: impl FnOnce(&Shape, &mut Match<'_>) -> bool,
    ) -> bool {
        hit_with(fid, way, same, arrays) == Hit::Native
    }

    #[test]
    fn hits_only_what_went_native_with_predefined_handles() {
        remember(1, MPI_SUCCESS, &[MPI_DOUBLE()]);
        assert!(hits(1));
        assert!(!hits(2), "other arguments");
        assert!(
            hit(Fid::MPI_Iallreduce, 0, same(&args(1))) == Hit::Miss,
            "another function in the same slot"
        );
        // a failed call, a derived datatype, or a call that ran a schedule: not remembered
        remember(3, MPI_ERR_COUNT, &[MPI_DOUBLE()]);
        assert!(!hits(3));
        remember(4, MPI_SUCCESS, &[0x8c00_0010u32 as MPI_Datatype]);
        assert!(!hits(4), "a derived datatype handle can be reused");
        let e = epoch();
        arm();
        store(
            key(Fid::MPI_Allreduce, &args(5)),
            &Arrays::NONE,
            Shape::default(),
            MPI_SUCCESS,
            &[MPI_DOUBLE()],
            &[MPI_SUM()],
            e,
        );
        assert!(!hits(5), "did not go native");
    }

    #[test]
    fn calls_with_arrays_compare_them_with_the_remembered_shape() {
        let a = [8, 1, 3, 16, 3, 0];
        let counts = |v: &[i64]| {
            let mut a = Arrays::new();
            assert!(a.push(v.len(), |i| v[i]));
            a
        };
        let e = epoch();
        arm();
        note_native();
        store(
            key(Fid::MPI_Gatherv, &a),
            &counts(&[1, 1, 1]),
            Shape::new(3, 0),
            MPI_SUCCESS,
            &[MPI_DOUBLE()],
            &[],
            e,
        );
        let ones = [1i32; 3];
        let twos = [1i32, 2, 1];
        let c = |p: &[i32]| Counts::I32(p.as_ptr());
        let mut seen = None;
        // SAFETY (all `counts` calls below): the arrays hold the 3 entries read.
        assert!(native_with(Fid::MPI_Gatherv, 0, same(&a), |s, m| {
            seen = Some((s.size(), s.rank()));
            unsafe { m.counts(c(&ones), s.size() as usize) }
        }));
        assert_eq!(seen, Some((3, 0)));
        assert!(
            !native_with(Fid::MPI_Gatherv, 0, same(&a), |_, m| unsafe {
                m.counts(c(&twos), 3)
            }),
            "an array changed behind the same pointer"
        );
        assert!(
            !native_with(Fid::MPI_Gatherv, 0, same(&a), |_, m| unsafe {
                m.counts(c(&ones), 2)
            }),
            "fewer entries"
        );
        assert!(
            !native_with(Fid::MPI_Gatherv, 0, same(&a), |_, m| unsafe {
                m.counts(c(&ones), 3) && m.counts(c(&ones), 1)
            }),
            "more entries"
        );
        assert!(
            !native_with(Fid::MPI_Gatherv, 0, same(&a), |_, m| unsafe {
                m.counts(Counts::I32(core::ptr::null()), 3)
            }),
            "a NULL array is not read"
        );
        assert!(
            !native_with(Fid::MPI_Gatherv, 0, same(&a), |_, _| false),
            "arrays that cannot be read"
        );
        let other = [8, 1, 3, 16, 3, 1];
        assert!(
            !native_with(Fid::MPI_Gatherv, 0, same(&other), |_, _| panic!(
                "arrays read for another call"
            )),
            "other scalar arguments: the arrays are not even read"
        );
    }

    #[test]
    fn a_rotating_root_keeps_every_roots_call() {
        // IMB's Bcast, Gather, Scatter and Reduce move the root on every call: each root's
        // call has its own entry, up to WAYS roots, and the root is still compared exactly
        let m = Memo::new();
        let with_root = |r: usize| [8, 1, 3, r];
        let remember = |r: usize| {
            let k = Key::new(
                Fid::MPI_Bcast,
                way(r as c_int),
                MPI_COMM_WORLD(),
                &with_root(r),
            );
            m.put(EPOCH_UNIT, &k, &Arrays::NONE, Shape::default());
        };
        let hits =
            |r: usize, a: &[usize]| m.repeats(EPOCH_UNIT, Fid::MPI_Bcast, way(r as c_int), same(a));
        (0..WAYS).for_each(remember);
        for r in 0..WAYS {
            assert!(hits(r, &with_root(r)), "root {r}");
            let other = with_root((r + 1) % WAYS);
            assert!(!hits(r, &other), "root {r}'s entry holds root {r} only");
        }
        // one more root than ways takes the entry of the root WAYS below it
        remember(WAYS);
        assert!(!hits(0, &with_root(0)));
        assert!(hits(1, &with_root(1)));
        // an intercommunicator's negative roots have a way too
        assert!(way(MPI_ROOT) < WAYS && way(MPI_PROC_NULL) < WAYS);
    }

    #[test]
    fn a_counted_call_is_left_to_the_hook() {
        // a call that counted towards the segment's first non-blocking instance: its
        // repeat must count again, which the fast lane cannot do
        let e = epoch();
        arm();
        note_native();
        note_counted();
        store(
            key(Fid::MPI_Iallreduce, &args(9)),
            &Arrays::NONE,
            Shape::default(),
            MPI_SUCCESS,
            &[MPI_DOUBLE()],
            &[MPI_SUM()],
            e,
        );
        assert_eq!(hit(Fid::MPI_Iallreduce, 0, same(&args(9))), Hit::Counted);
        assert_eq!(hit(Fid::MPI_Iallreduce, 0, same(&args(8))), Hit::Miss);
        assert!(!with_memo(|m| m.repeats(
            open(),
            Fid::MPI_Iallreduce,
            0,
            same(&args(9))
        )));
        // the next call arms afresh: not counted unless it says so
        remember(9, MPI_SUCCESS, &[MPI_DOUBLE()]);
        assert!(hits(9));
        invalidate();
        assert_eq!(hit(Fid::MPI_Iallreduce, 0, same(&args(9))), Hit::Miss);
    }

    #[test]
    fn a_new_epoch_forgets() {
        remember(6, MPI_SUCCESS, &[MPI_DOUBLE()]);
        assert!(hits(6));
        invalidate();
        assert!(!hits(6));
        // an invalidation between reading the epoch and storing leaves the entry stale
        let e = epoch();
        arm();
        note_native();
        invalidate();
        store(
            key(Fid::MPI_Allreduce, &args(7)),
            &Arrays::NONE,
            Shape::default(),
            MPI_SUCCESS,
            &[MPI_DOUBLE()],
            &[MPI_SUM()],
            e,
        );
        assert!(!hits(7));
    }

    #[test]
    fn pending_work_shuts_the_fast_lane_only() {
        // an entry's stamp has the flags clear: the lane's stamp (`open`) with a flag up
        // never matches it, the ordinary path's (`epoch`) ignores the flags
        let m = Memo::new();
        let k = key(Fid::MPI_Bcast, &ARGS5);
        m.put(8 * EPOCH_UNIT, &k, &Arrays::NONE, Shape::default());
        assert!(m.repeats(8 * EPOCH_UNIT, Fid::MPI_Bcast, 0, same(&ARGS5)));
        for flag in [SCHEDULES, DETACHED] {
            assert!(!m.repeats(8 * EPOCH_UNIT | flag, Fid::MPI_Bcast, 0, same(&ARGS5)));
        }
        pending(DETACHED, true);
        assert_eq!(open() & DETACHED, DETACHED);
        assert_eq!(epoch() & FLAGS, 0);
        pending(DETACHED, false);
        assert_eq!(open() & DETACHED, 0);
    }

    #[test]
    fn words_compare_exactly() {
        let m = Memo::new();
        let k = Key::new(
            Fid::MPI_Bcast,
            0,
            MPI_COMM_WORLD(),
            &[
                (-5i32).word(),
                (-1i64).word(),
                (0x10usize as *const u8).word(),
            ],
        );
        m.put(EPOCH_UNIT, &k, &Arrays::NONE, Shape::default());
        let with = |a: c_int, b: i64, p: usize| {
            m.repeats(EPOCH_UNIT, Fid::MPI_Bcast, 0, |w| {
                w.is(MPI_COMM_WORLD()) && w.is(a) && w.is(b) && w.is(p as *const u8)
            })
        };
        assert!(with(-5, -1, 0x10));
        assert!(!with(5, -1, 0x10));
        assert!(!with(-5, 0xffff_ffff, 0x10), "an i64 compares all its bits");
        assert!(!with(-5, -1, 0x1_0000_0010));
        assert!(
            !m.repeats(EPOCH_UNIT, Fid::MPI_Bcast, 0, |w| {
                w.is(MPI_COMM_WORLD())
                    && w.is(-5i32)
                    && w.is(-1i64)
                    && w.is(0x10usize)
                    && w.is(0usize)
                    && w.is(0usize)
                    && w.is(0usize)
                    && w.is(0usize)
                    && w.is(0usize)
            }),
            "more words than a key holds"
        );
    }
}

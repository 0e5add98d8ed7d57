//! Layer: core. May use: platform.
//!
//! The references the shim holds on the application's datatypes and operations.
//!
//! MPI-4.0 §5.1.10 (`MPI_TYPE_FREE`): "Any communication that is currently using this
//! datatype will complete normally", and §6.9.5 (`MPI_OP_FREE`) likewise for operations.
//! The system MPI keeps that promise for the operations it runs, by reference counts the
//! application cannot see; the shim's schedules post their messages, copies and reductions
//! later, from its own code, so it needs a reference of its own. MPI has no call that
//! takes one, so the shim defers the application's free instead: while a schedule uses a
//! derived datatype or a user operation (a [`Retained`] is alive), `MPI_Type_free` and
//! `MPI_Op_free` set the application's handle to the null handle and return at once; the
//! system MPI's free runs when the last schedule using the object drops its reference.
//! Predefined objects are never freed and need no reference.
//!
//! Freed handles. A datatype, operation or request handle the application freed is invalid
//! (MPI-4.0 §2.5.1), and with `MPI_ERRORS_RETURN` a call that passes one should return
//! `MPI_ERR_TYPE`/`MPI_ERR_OP`/`MPI_ERR_REQUEST`; Debian's MPICH 4.0.2 instead crashes in
//! many calls (the handle indexes a freed object), and the shim's own decoding of datatypes
//! (`PMPI_Type_get_envelope`) would crash in all of them. So the shim remembers the last
//! [`QUARANTINE`] freed handles of each kind, and the hooks reject them (`is_freed`).
//!
//! The system MPI reuses a freed handle for the next object it creates, so a freed value
//! stops being freed when the library hands it out again. Datatypes: the value is only
//! recorded, and forgotten when a call returns it again ([`types_handed_out`]: every
//! datatype constructor, `MPI_Type_get_contents`, `MPI_File_get_view`, the shim's own
//! struct types). Nothing is allocated in the program's `MPI_Type_free`, so the library's
//! handle order stays the one the program would see without the shim (a program that
//! builds a type from a freed handle's value, erroneously, still gets the type the library
//! put there; ctests/handle_order.c compares the sequences). The record is written before
//! the system MPI's free ([`free_type`]): once the library has the slot back, a
//! constructor on another thread may be handed the value at once (the program's, while the
//! progress thread runs a deferred free; the progress thread's struct types, while the
//! program frees), and the record must be there for it to clear. Operations and requests: a
//! placeholder (a no-op operation, an inactive persistent receive from `MPI_PROC_NULL`) is
//! created right after the free, which the library allocates at the freed slot, so no new
//! object gets that handle while it is quarantined.

use core::ffi::{c_int, c_void};
use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU8, Ordering};

use crate::platform::abi::*;
use crate::platform::mpi::{comm as mpi_comm, dtype as mpi_dtype, p2p};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Kind {
    Datatype,
    Op,
    /// Requests are only quarantined (see [`request_freed`]), never retained.
    Request,
}

#[derive(Default)]
struct Entry {
    uses: usize,
    /// The application freed the object while it was in use.
    free_pending: bool,
}

static IN_USE: Mutex<Option<HashMap<(Kind, usize), Entry>>> = Mutex::new(None);

fn with<R>(f: impl FnOnce(&mut HashMap<(Kind, usize), Entry>) -> R) -> R {
    let mut g = IN_USE.lock().unwrap_or_else(|e| e.into_inner());
    f(g.get_or_insert_with(HashMap::new))
}

/// A reference on a derived datatype or user operation, released on drop.
#[derive(Debug)]
pub struct Retained {
    kind: Kind,
    handle: usize,
}

impl Retained {
    fn take(kind: Kind, handle: usize) -> Retained {
        with(|m| m.entry((kind, handle)).or_default().uses += 1);
        Retained { kind, handle }
    }
}

impl Drop for Retained {
    fn drop(&mut self) {
        let free = with(|m| {
            let key = (self.kind, self.handle);
            let e = m.get_mut(&key)?;
            e.uses -= 1;
            if e.uses > 0 {
                return None;
            }
            m.remove(&key).filter(|e| e.free_pending).map(|_| ())
        });
        if free.is_none() || finalized() {
            return;
        }
        // the application freed this handle while the shim used it: the system MPI's free
        // runs now (often on the progress thread, while the program creates new types),
        // and the handle goes into quarantine
        if self.kind == Kind::Datatype {
            let mut dt = self.handle as MPI_Datatype;
            free_type(self.handle, || {
                mpi_dtype::free(&mut dt).map_or_else(|e| e.code(), |()| MPI_SUCCESS)
            });
        } else {
            free_native(self.kind, self.handle);
            quarantine(self.kind, self.handle);
        }
    }
}

/// Freed handles kept unusable per kind (see the module docs).
const QUARANTINE: usize = 64;

static FREED: Mutex<Option<HashMap<Kind, VecDeque<usize>>>> = Mutex::new(None);

/// How many quarantined handles hash to each slot: the checks on every call (request
/// arrays in particular) look here first and take the lock only on a hit.
static FILTER: [AtomicU8; 1024] = [const { AtomicU8::new(0) }; 1024];

fn slot(kind: Kind, handle: usize) -> &'static AtomicU8 {
    let h = (handle as u64 ^ (kind as u64) << 40).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    &FILTER[(h >> 54) as usize]
}

unsafe extern "C" fn placeholder_op(
    _inv: *mut c_void,
    _inoutv: *mut c_void,
    _len: *mut c_int,
    _dt: *mut MPI_Datatype,
) {
}

/// After the system MPI freed the application's operation or request `handle`: occupies
/// its slot with a placeholder and remembers it (see the module docs), forgetting the
/// oldest beyond [`QUARANTINE`]. A library that does not reuse the slot at once gets its
/// placeholder back at once (nothing is kept): whoever got the slot in between, on any
/// thread, holds a valid handle. Datatypes go through [`free_type`] instead.
pub(crate) fn quarantine(kind: Kind, handle: usize) {
    // The placeholders are the shim's own objects; a failed creation leaves the null
    // handle (codes unchecked).
    let placeholder = match kind {
        Kind::Request => {
            // SAFETY: a receive of zero bytes from MPI_PROC_NULL: no buffer is touched.
            unsafe {
                p2p::recv_init(
                    core::ptr::null_mut(),
                    0,
                    MPI_BYTE(),
                    MPI_PROC_NULL,
                    0,
                    MPI_COMM_SELF(),
                )
            }
            .unwrap_or(MPI_REQUEST_NULL()) as usize
        }
        Kind::Op => mpi_dtype::op_create(placeholder_op, true).unwrap_or(MPI_OP_NULL()) as usize,
        Kind::Datatype => unreachable!("datatypes are recorded by free_type"),
    };
    let release = if placeholder != handle {
        Some(placeholder)
    } else {
        remember(kind, handle).inspect(|&old| forget_slot(kind, old))
    };
    if let Some(h) = release {
        free_native(kind, h);
    }
}

/// Frees the application's datatype `handle` by `free` (the system MPI's `MPI_Type_free`,
/// its code returned) and records the value as freed, without a placeholder: the program's
/// next constructor gets the slot it gets without the shim.
///
/// The record comes first. From the moment the library has the slot back, a constructor
/// on another thread may be handed the value (the program's own, while the progress thread
/// runs a deferred free; the progress thread's struct types of a schedule, while the
/// program frees), and its [`type_handed_out`] must find the record to clear it. A record
/// written after the free could land after that hand-out, marking a live type as freed on
/// this rank alone: its next collective was refused there (`MPI_ERR_TYPE`) while the other
/// ranks waited for it (ctests/type_free_race.c). A failed free takes the record back.
pub(crate) fn free_type(handle: usize, free: impl FnOnce() -> c_int) -> c_int {
    let dt = handle as MPI_Datatype;
    if is_predefined_datatype(dt) || dt == MPI_DATATYPE_NULL() {
        // never a freed handle: the library refuses the free
        return free();
    }
    if let Some(old) = remember(Kind::Datatype, handle) {
        forget_slot(Kind::Datatype, old);
    }
    let rc = free();
    if rc != MPI_SUCCESS {
        // the value is still the program's type
        forget_last(Kind::Datatype, handle);
    }
    rc
}

/// Takes back the newest record of `handle` (written by [`free_type`] before a free that
/// failed).
fn forget_last(kind: Kind, handle: usize) {
    let mut g = FREED.lock().unwrap_or_else(|e| e.into_inner());
    let Some(q) = g.as_mut().and_then(|m| m.get_mut(&kind)) else {
        return;
    };
    if let Some(i) = q.iter().rposition(|&x| x == handle) {
        q.remove(i);
        forget_slot(kind, handle);
    }
}

/// Records `handle` as freed; returns the oldest record dropped beyond [`QUARANTINE`].
fn remember(kind: Kind, handle: usize) -> Option<usize> {
    let mut g = FREED.lock().unwrap_or_else(|e| e.into_inner());
    let q = g.get_or_insert_with(HashMap::new).entry(kind).or_default();
    q.push_back(handle);
    slot(kind, handle).fetch_add(1, Ordering::Relaxed);
    (q.len() > QUARANTINE).then(|| q.pop_front()).flatten()
}

fn forget_slot(kind: Kind, handle: usize) {
    slot(kind, handle).fetch_sub(1, Ordering::Relaxed);
}

/// Datatype references the program holds beyond one per value: `MPI_Type_get_contents`
/// returns a derived type as a new reference (MPI-4.0 §5.1.13), which MPICH and Open MPI
/// give as the same handle value, so the program frees that value once per reference
/// and only the last free makes it invalid.
static EXTRA: Mutex<Option<HashMap<usize, usize>>> = Mutex::new(None);

/// The system MPI handed out these datatype handles: `fresh`, new types (a
/// constructor's, a file view's, the shim's own), else new references to existing ones
/// (`MPI_Type_get_contents`). A freed value among them is valid again.
///
/// # Safety
/// `types` must be NULL or point to `n` readable handles.
pub unsafe fn types_handed_out(types: *const MPI_Datatype, n: i64, fresh: bool) {
    if types.is_null() || n <= 0 {
        return;
    }
    // SAFETY: per the caller's contract.
    let types = unsafe { core::slice::from_raw_parts(types, n as usize) };
    for &t in types {
        type_handed_out(t, fresh);
    }
}

/// As [`types_handed_out`], for one handle.
pub fn type_handed_out(dt: MPI_Datatype, fresh: bool) {
    if is_predefined_datatype(dt) || dt == MPI_DATATYPE_NULL() {
        return;
    }
    let h = dt as usize;
    let was_freed = unmark(h);
    let mut g = EXTRA.lock().unwrap_or_else(|e| e.into_inner());
    let m = g.get_or_insert_with(HashMap::new);
    if fresh {
        // a new object at this value: no reference of an older one counts
        m.remove(&h);
    } else if !was_freed {
        *m.entry(h).or_default() += 1;
    }
}

/// Whether the program's free of `dt` drops one of several references it holds (see
/// [`EXTRA`]): the value stays valid. Counts that reference as freed.
pub(crate) fn drop_extra_reference(dt: MPI_Datatype) -> bool {
    let mut g = EXTRA.lock().unwrap_or_else(|e| e.into_inner());
    let Some(m) = g.as_mut() else {
        return false;
    };
    let h = dt as usize;
    match m.get_mut(&h) {
        Some(n) if *n > 1 => {
            *n -= 1;
            true
        }
        Some(_) => {
            m.remove(&h);
            true
        }
        None => false,
    }
}

/// Forgets `h` as a freed datatype; whether it was recorded.
fn unmark(h: usize) -> bool {
    if slot(Kind::Datatype, h).load(Ordering::Relaxed) == 0 {
        return false;
    }
    let mut g = FREED.lock().unwrap_or_else(|e| e.into_inner());
    let Some(q) = g.as_mut().and_then(|m| m.get_mut(&Kind::Datatype)) else {
        return false;
    };
    let before = q.len();
    q.retain(|&x| x != h);
    for _ in q.len()..before {
        forget_slot(Kind::Datatype, h);
    }
    q.len() < before
}

fn free_native(kind: Kind, handle: usize) {
    // a handle the shim owns (a placeholder) or the application freed through the shim (a
    // deferred free); codes unchecked
    match kind {
        Kind::Datatype => {
            let mut dt = handle as MPI_Datatype;
            let _ = mpi_dtype::free(&mut dt);
        }
        Kind::Op => {
            let mut op = handle as MPI_Op;
            let _ = mpi_dtype::op_free(&mut op);
        }
        Kind::Request => {
            let mut r = handle as MPI_Request;
            let _ = p2p::request_free(&mut r);
        }
    }
}

/// Whether `handle` is in quarantine. A handle whose free is deferred (a schedule still
/// uses it) is not: it is valid, for the shim's schedules that hold it.
fn freed(kind: Kind, handle: usize) -> bool {
    if slot(kind, handle).load(Ordering::Relaxed) == 0 {
        return false;
    }
    FREED
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .as_ref()
        .and_then(|m| m.get(&kind))
        .is_some_and(|q| q.contains(&handle))
}

/// Whether the application freed this request with `MPI_Request_free` (see the module
/// docs): its slot is held by an inactive persistent receive from `MPI_PROC_NULL`.
pub fn request_freed(r: MPI_Request) -> bool {
    r != MPI_REQUEST_NULL() && freed(Kind::Request, r as usize)
}

/// After the system MPI freed the application's request `r`.
pub fn request_quarantine(r: MPI_Request) {
    quarantine(Kind::Request, r as usize);
}

/// At `MPI_Finalize`: the placeholders are released (the library reports handles still
/// allocated at finalize as leaks).
pub fn finalize() {
    let all = FREED
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .take()
        .unwrap_or_default();
    for (kind, q) in all {
        for h in q {
            forget_slot(kind, h);
            // a freed datatype's value is only a record: nothing of the shim's is there
            if kind != Kind::Datatype {
                free_native(kind, h);
            }
        }
    }
}

/// Whether the application freed this datatype handle (see the module docs).
pub fn is_freed_type(dt: MPI_Datatype) -> bool {
    !is_predefined_datatype(dt) && dt != MPI_DATATYPE_NULL() && freed(Kind::Datatype, dt as usize)
}

/// Whether any of these datatype arguments is a handle the application freed (one load
/// per argument while nothing of that slot is recorded).
#[inline]
pub fn any_freed_type(types: &[MPI_Datatype]) -> bool {
    types
        .iter()
        .any(|&t| slot(Kind::Datatype, t as usize).load(Ordering::Relaxed) != 0 && is_freed_type(t))
}

/// Whether the application freed this operation handle.
pub fn is_freed_op(op: MPI_Op) -> bool {
    !is_builtin_op(op) && op != MPI_OP_NULL() && freed(Kind::Op, op as usize)
}

fn finalized() -> bool {
    // MPI_Finalized may be called at any time
    mpi_comm::finalized().unwrap_or(false)
}

/// A reference on `dt` if it is a derived datatype (predefined ones need none).
pub fn datatype(dt: MPI_Datatype) -> Option<Retained> {
    if is_predefined_datatype(dt) || dt == MPI_DATATYPE_NULL() {
        return None;
    }
    Some(Retained::take(Kind::Datatype, dt as usize))
}

/// A reference on `op` if it is a user-defined operation.
pub fn op(op: MPI_Op) -> Option<Retained> {
    if is_builtin_op(op) || op == MPI_OP_NULL() {
        return None;
    }
    Some(Retained::take(Kind::Op, op as usize))
}

/// Whether the application's free of `handle` is deferred: true when the shim holds a
/// reference (the free is then recorded). Freeing it a second time is the application's
/// error, reported as the system MPI would report a freed handle.
pub(crate) fn defer(kind: Kind, handle: usize) -> Result<bool, ()> {
    with(|m| match m.get_mut(&(kind, handle)) {
        Some(e) if e.free_pending => Err(()),
        Some(e) => {
            e.free_pending = true;
            Ok(true)
        }
        None => Ok(false),
    })
}
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_count_and_free_is_deferred_once() {
        let h = 0x4c00_1234usize; // a derived-type-like handle no test creates
        let a = Retained::take(Kind::Datatype, h);
        let b = Retained::take(Kind::Datatype, h);
        assert_eq!(defer(Kind::Datatype, h), Ok(true));
        assert_eq!(defer(Kind::Datatype, h), Err(()));
        drop(a);
        assert_eq!(with(|m| m[&(Kind::Datatype, h)].uses), 1);
        // the last reference would free it through MPI: take the entry out first
        with(|m| m.get_mut(&(Kind::Datatype, h)).unwrap().free_pending = false);
        drop(b);
        assert!(with(|m| !m.contains_key(&(Kind::Datatype, h))));
        assert_eq!(defer(Kind::Datatype, h), Ok(false));
    }

    use crate::platform::mpi::fake;

    /// A handle as the shim keeps it: the C handle's value, widened (an MPICH handle is a
    /// negative `int` for derived types, user operations and requests).
    fn handle(h: u32) -> usize {
        h as i32 as MPI_Datatype as usize
    }

    fn args_of(name: &str) -> Vec<Vec<i64>> {
        fake::calls()
            .into_iter()
            .filter(|c| c.name == name)
            .map(|c| c.args)
            .collect()
    }

    #[test]
    fn a_freed_request_is_held_by_a_placeholder_only_when_the_library_reuses_it() {
        let h = handle(0x2c00_6001);
        // the library reuses the freed slot: the placeholder keeps it
        let _g = fake::install(move |_| Ok(vec![h as i64]));
        quarantine(Kind::Request, h);
        // an inactive persistent receive of nothing from MPI_PROC_NULL
        assert_eq!(
            args_of("recv_init"),
            [vec![0, MPI_PROC_NULL as i64, 0, MPI_COMM_SELF() as i64]]
        );
        assert!(args_of("request_free").is_empty());
        assert!(freed(Kind::Request, h));
        drop(_g);
        // another slot: the placeholder is given back at once, nothing is held
        let other = h + 1;
        let _g = fake::install(move |_| Ok(vec![other as i64 + 1]));
        quarantine(Kind::Request, other);
        assert_eq!(args_of("request_free"), [vec![other as i64 + 1]]);
        assert!(!freed(Kind::Request, other));
        assert!(request_freed(h as MPI_Request));
    }

    #[test]
    fn a_freed_datatype_is_recorded_without_a_call_until_the_library_hands_it_out() {
        let h = handle(0x8c00_6001);
        let _g = fake::install(|_| Ok(vec![]));
        // nothing is created: the program's next constructor gets the slot as without the
        // shim (the free itself is the caller's)
        free_type(h, || MPI_SUCCESS);
        assert!(fake::calls().is_empty());
        assert!(is_freed_type(h as MPI_Datatype));
        // freed twice (a deferred free after a record of the same value) and handed out
        // once: valid again
        free_type(h, || MPI_SUCCESS);
        let out = [MPI_INT(), h as MPI_Datatype];
        // SAFETY: two handles.
        unsafe { types_handed_out(out.as_ptr(), 2, true) };
        assert!(!is_freed_type(h as MPI_Datatype));
        // SAFETY: NULL is ignored.
        unsafe { types_handed_out(core::ptr::null(), 3, true) };
        assert!(fake::calls().is_empty());
        // two more references from MPI_Type_get_contents: three frees, the last counts
        type_handed_out(h as MPI_Datatype, false);
        type_handed_out(h as MPI_Datatype, false);
        assert!(drop_extra_reference(h as MPI_Datatype));
        assert!(drop_extra_reference(h as MPI_Datatype));
        assert!(!drop_extra_reference(h as MPI_Datatype));
        free_type(h, || MPI_SUCCESS);
        assert!(is_freed_type(h as MPI_Datatype));
        // a reference handed out after the free makes the value valid, counting once
        type_handed_out(h as MPI_Datatype, false);
        assert!(!is_freed_type(h as MPI_Datatype));
        assert!(!drop_extra_reference(h as MPI_Datatype));
        // a new type at the value drops older references
        type_handed_out(h as MPI_Datatype, false);
        type_handed_out(h as MPI_Datatype, true);
        assert!(!drop_extra_reference(h as MPI_Datatype));
    }

    #[test]
    fn a_datatype_handed_out_while_its_free_runs_is_valid() {
        // the program's free, deferred while a schedule used the type, runs when the
        // schedule drops its reference (on the progress thread); the program's next
        // constructor, on its own thread, is handed the value as soon as the library has
        // it back: here, inside the system MPI's free
        let h = handle(0x8c00_6201);
        let _g = fake::install(move |c| {
            Ok(match c.name {
                "finalized" => vec![0],
                "type_free" => {
                    type_handed_out(h as MPI_Datatype, true);
                    vec![]
                }
                _ => vec![],
            })
        });
        let r = datatype(h as MPI_Datatype).unwrap();
        assert_eq!(defer(Kind::Datatype, h), Ok(true));
        drop(r);
        assert_eq!(args_of("type_free"), [vec![h as i64]]);
        // the new type is the program's, not a freed one
        assert!(!is_freed_type(h as MPI_Datatype));
        assert!(!any_freed_type(&[h as MPI_Datatype]));
        drop(_g);
        // the program frees while the progress thread makes a schedule's struct type
        let h = handle(0x8c00_6202);
        assert_eq!(
            free_type(h, || {
                type_handed_out(h as MPI_Datatype, true);
                MPI_SUCCESS
            }),
            MPI_SUCCESS
        );
        assert!(!is_freed_type(h as MPI_Datatype));
        // nobody took it: freed
        assert_eq!(free_type(h, || MPI_SUCCESS), MPI_SUCCESS);
        assert!(is_freed_type(h as MPI_Datatype));
        // a free the library refuses leaves no record
        assert_eq!(free_type(MPI_INT() as usize, || MPI_ERR_TYPE), MPI_ERR_TYPE);
        assert!(!any_freed_type(&[MPI_INT()]));
        let h = handle(0x8c00_6203);
        assert_eq!(free_type(h, || MPI_ERR_TYPE), MPI_ERR_TYPE);
        assert!(!is_freed_type(h as MPI_Datatype));
        assert!(!any_freed_type(&[h as MPI_Datatype]));
    }

    #[test]
    fn the_oldest_placeholder_is_released_beyond_the_quarantine() {
        // operations: only this test quarantines them
        let base = handle(0x9800_6100);
        let mut created = 0;
        let _g = fake::install(move |c| {
            Ok(match c.name {
                // the placeholder takes the slot just freed
                "op_create" => {
                    created += 1;
                    vec![(base + created - 1) as i64]
                }
                _ => vec![],
            })
        });
        for k in 0..=QUARANTINE {
            quarantine(Kind::Op, base + k);
        }
        assert_eq!(args_of("op_create").len(), QUARANTINE + 1);
        // the user function is the shim's no-op, commutative
        assert_eq!(args_of("op_create")[0][1], 1);
        assert_eq!(args_of("op_free"), [vec![base as i64]]);
        assert!(!is_freed_op(base as MPI_Op));
        assert!(is_freed_op((base + 1) as MPI_Op));
        assert!(is_freed_op((base + QUARANTINE) as MPI_Op));
    }

    #[test]
    fn the_last_reference_runs_a_deferred_free_unless_mpi_is_finalized() {
        for (k, finalized) in [false, true].into_iter().enumerate() {
            let h = handle(0x8c00_6101) + k;
            let _g = fake::install(move |c| {
                Ok(match c.name {
                    "finalized" => vec![finalized as i64],
                    "type_contiguous" => vec![h as i64],
                    _ => vec![],
                })
            });
            let r = datatype(h as MPI_Datatype).unwrap();
            assert_eq!(defer(Kind::Datatype, h), Ok(true));
            assert!(fake::calls().is_empty(), "the free waits for the reference");
            drop(r);
            if finalized {
                // the library released everything already
                assert_eq!(fake::names(), ["finalized"]);
                assert!(!is_freed_type(h as MPI_Datatype));
            } else {
                // recorded, no placeholder
                assert_eq!(fake::names(), ["finalized", "type_free"]);
                assert_eq!(args_of("type_free"), [vec![h as i64]]);
                assert!(is_freed_type(h as MPI_Datatype));
            }
        }
        // predefined objects take no reference
        assert!(datatype(MPI_INT()).is_none());
        assert!(op(MPI_SUM()).is_none());
    }
}

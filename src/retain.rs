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

use core::ffi::c_int;
use std::collections::HashMap;
use std::sync::Mutex;

use crate::abi::*;
use crate::pmpi;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Kind {
    Datatype,
    Op,
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
        // SAFETY: the application freed this handle while the shim used it; the deferred
        // free is the system MPI's, on the handle it created.
        unsafe {
            match self.kind {
                Kind::Datatype => {
                    let mut dt = self.handle as MPI_Datatype;
                    pmpi::PMPI_Type_free(&mut dt);
                }
                Kind::Op => {
                    let mut op = self.handle as MPI_Op;
                    pmpi::PMPI_Op_free(&mut op);
                }
            }
        }
    }
}

fn finalized() -> bool {
    let mut fin: c_int = 0;
    // SAFETY: valid out-pointer; PMPI_Finalized may be called at any time.
    unsafe { pmpi::PMPI_Finalized(&mut fin) };
    fin != 0
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
fn defer(kind: Kind, handle: usize) -> Result<bool, ()> {
    with(|m| match m.get_mut(&(kind, handle)) {
        Some(e) if e.free_pending => Err(()),
        Some(e) => {
            e.free_pending = true;
            Ok(true)
        }
        None => Ok(false),
    })
}

/// Hooks (see `src/abi/mpi_functions.txt`).
#[allow(non_snake_case, clippy::missing_safety_doc)]
pub mod hooks {
    use super::*;

    pub unsafe fn MPI_Type_free(datatype: *mut MPI_Datatype, native: &dyn Fn() -> c_int) -> c_int {
        if datatype.is_null() {
            return native();
        }
        // SAFETY: a non-NULL pointer to the application's handle.
        let dt = unsafe { *datatype };
        match defer(Kind::Datatype, dt as usize) {
            Ok(true) => {
                // SAFETY: as above.
                unsafe { *datatype = MPI_DATATYPE_NULL() };
                MPI_SUCCESS
            }
            Ok(false) => native(),
            Err(()) => crate::errors::raise_no_object(
                MPI_ERR_TYPE,
                "MPI_Type_free",
                "the datatype was already freed",
            ),
        }
    }

    pub unsafe fn MPI_Op_free(op: *mut MPI_Op, native: &dyn Fn() -> c_int) -> c_int {
        if op.is_null() {
            return native();
        }
        // SAFETY: a non-NULL pointer to the application's handle.
        let o = unsafe { *op };
        match defer(Kind::Op, o as usize) {
            Ok(true) => {
                // SAFETY: as above.
                unsafe { *op = MPI_OP_NULL() };
                MPI_SUCCESS
            }
            Ok(false) => native(),
            Err(()) => crate::errors::raise_no_object(
                MPI_ERR_OP,
                "MPI_Op_free",
                "the operation was already freed",
            ),
        }
    }
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
}

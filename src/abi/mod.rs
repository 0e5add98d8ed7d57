//! ABI bindings: the handle types and constants of the MPI library the shim runs on, and
//! the small argument-translation types shared by the hooks.
//!
//! One build serves one ABI (design notes, anchors-interposition-style.md §0): MPICH
//! handles are `int`, Open MPI's are pointers, the `MPI_Status` layouts and `MPI_IN_PLACE`
//! differ, so no single binary can serve both. The ABI is chosen by a cargo feature and
//! checked at run time against `MPI_Get_library_version` (see `crate::init`).

#[cfg(feature = "abi-mpich")]
mod mpich;
#[cfg(feature = "abi-mpich")]
pub use mpich::*;

use core::ffi::c_int;

/// A count or displacement array as the C caller passed it: `int[]` in the classic
/// bindings, `MPI_Count[]`/`MPI_Aint[]` in the large-count `_c` bindings (MPI-4.0 §2.5.8).
/// The hooks read it as i64 either way.
#[derive(Clone, Copy, Debug)]
pub enum Counts {
    I32(*const c_int),
    I64(*const i64),
}

impl Counts {
    /// Whether the caller passed NULL (allowed for arguments that are not significant).
    pub fn is_null(&self) -> bool {
        match *self {
            Counts::I32(p) => p.is_null(),
            Counts::I64(p) => p.is_null(),
        }
    }

    /// Reads element `i`.
    ///
    /// # Safety
    /// The array must hold at least `i + 1` elements (the standard fixes its length by the
    /// communicator or topology size, which the caller checks).
    pub unsafe fn get(&self, i: usize) -> i64 {
        // SAFETY: bounds are the caller's contract (see above).
        unsafe {
            match *self {
                Counts::I32(p) => *p.add(i) as i64,
                Counts::I64(p) => *p.add(i),
            }
        }
    }

    /// Copies the first `n` elements into a vector (empty for NULL).
    ///
    /// # Safety
    /// As for [`Counts::get`].
    pub unsafe fn to_vec(&self, n: usize) -> Vec<i64> {
        if self.is_null() {
            return Vec::new();
        }
        // SAFETY: as for `get`.
        (0..n).map(|i| unsafe { self.get(i) }).collect()
    }
}

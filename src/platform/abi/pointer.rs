//! Layer: platform. May use: nothing.
//!
//! What the two pointer-handle ABIs (Open MPI's and the MPI-5 standard ABI) share: their
//! predefined datatype handles are not a closed integer range as in MPICH, so which handles
//! are predefined, and their sizes, are asked from the library once.

use core::ffi::c_int;
use std::sync::OnceLock;

use super::*;

/// Every predefined datatype except `MPI_DATATYPE_NULL` (and the removed `MPI_LB`/`MPI_UB`,
/// which the standard ABI does not have).
const PREDEFINED_DATATYPES: &[fn() -> MPI_Datatype] = &[
    MPI_CHAR,
    MPI_SIGNED_CHAR,
    MPI_UNSIGNED_CHAR,
    MPI_BYTE,
    MPI_WCHAR,
    MPI_SHORT,
    MPI_UNSIGNED_SHORT,
    MPI_INT,
    MPI_UNSIGNED,
    MPI_LONG,
    MPI_UNSIGNED_LONG,
    MPI_FLOAT,
    MPI_DOUBLE,
    MPI_LONG_DOUBLE,
    MPI_LONG_LONG_INT,
    MPI_LONG_LONG,
    MPI_UNSIGNED_LONG_LONG,
    MPI_PACKED,
    MPI_FLOAT_INT,
    MPI_DOUBLE_INT,
    MPI_LONG_INT,
    MPI_SHORT_INT,
    MPI_2INT,
    MPI_LONG_DOUBLE_INT,
    MPI_COMPLEX,
    MPI_DOUBLE_COMPLEX,
    MPI_LOGICAL,
    MPI_REAL,
    MPI_DOUBLE_PRECISION,
    MPI_INTEGER,
    MPI_2INTEGER,
    MPI_2REAL,
    MPI_2DOUBLE_PRECISION,
    MPI_CHARACTER,
    MPI_REAL4,
    MPI_REAL8,
    MPI_REAL16,
    MPI_COMPLEX8,
    MPI_COMPLEX16,
    MPI_COMPLEX32,
    MPI_INTEGER1,
    MPI_INTEGER2,
    MPI_INTEGER4,
    MPI_INTEGER8,
    MPI_INT8_T,
    MPI_INT16_T,
    MPI_INT32_T,
    MPI_INT64_T,
    MPI_UINT8_T,
    MPI_UINT16_T,
    MPI_UINT32_T,
    MPI_UINT64_T,
    MPI_C_BOOL,
    MPI_C_FLOAT_COMPLEX,
    MPI_C_COMPLEX,
    MPI_C_DOUBLE_COMPLEX,
    MPI_C_LONG_DOUBLE_COMPLEX,
    MPI_AINT,
    MPI_OFFSET,
    MPI_COUNT,
    MPI_CXX_BOOL,
    MPI_CXX_FLOAT_COMPLEX,
    MPI_CXX_DOUBLE_COMPLEX,
    MPI_CXX_LONG_DOUBLE_COMPLEX,
];

/// (handle, size in bytes) of every predefined datatype, sorted by handle; sizes are asked
/// once from the library (the shim calls this only after `MPI_Init`).
fn predefined_table() -> &'static [(MPI_Datatype, usize)] {
    static TABLE: OnceLock<Vec<(MPI_Datatype, usize)>> = OnceLock::new();
    TABLE.get_or_init(|| {
        let mut v: Vec<(MPI_Datatype, usize)> = PREDEFINED_DATATYPES
            .iter()
            .map(|f| {
                let dt = f();
                let mut size: c_int = 0;
                // SAFETY: a predefined datatype and a valid out-pointer.
                unsafe { crate::platform::api::pmpi::PMPI_Type_size(dt, &mut size) };
                (dt, size.max(0) as usize)
            })
            .collect();
        v.sort_unstable();
        v.dedup_by_key(|e| e.0);
        v
    })
}

/// Whether a datatype handle is predefined (named).
#[inline]
pub fn is_predefined_datatype(dt: MPI_Datatype) -> bool {
    predefined_table()
        .binary_search_by_key(&dt, |e| e.0)
        .is_ok()
}

/// Size in bytes of a dense predefined datatype (every one but the pair types, as in the
/// MPICH module), `None` otherwise.
#[inline]
pub fn builtin_size(dt: MPI_Datatype) -> Option<usize> {
    let t = predefined_table();
    let i = t.binary_search_by_key(&dt, |e| e.0).ok()?;
    (!is_pair_type(dt)).then_some(t[i].1)
}

/// Whether an op handle is a predefined operation.
#[inline]
pub fn is_builtin_op(op: MPI_Op) -> bool {
    super::Op::of(op).is_some()
}

//! Layer: platform. May use: nothing.
//!
//! ABI bindings: the handle types and constants of the MPI library the shim runs on, and
//! the small argument-translation types shared by the hooks.
//!
//! One build serves one ABI (design notes, anchors-interposition-style.md §0): MPICH
//! handles are `int`, Open MPI's are pointers, the `MPI_Status` layouts and `MPI_IN_PLACE`
//! differ, so no single binary can serve both. The ABI is chosen by a cargo feature and
//! checked at run time against `MPI_Get_library_version` (see `crate::hooks::init`).

#[cfg(feature = "abi-mpich")]
mod mpich;
#[cfg(feature = "abi-mpich")]
pub use mpich::*;
#[cfg(feature = "abi-ompi")]
mod ompi;
#[cfg(feature = "abi-ompi")]
pub use ompi::*;
#[cfg(feature = "abi-std")]
mod standard;
#[cfg(feature = "abi-std")]
pub use standard::*;
#[cfg(any(feature = "abi-ompi", feature = "abi-std"))]
mod pointer;
#[cfg(any(feature = "abi-ompi", feature = "abi-std"))]
pub use pointer::*;

#[cfg(any(
    all(feature = "abi-mpich", feature = "abi-ompi"),
    all(feature = "abi-mpich", feature = "abi-std"),
    all(feature = "abi-ompi", feature = "abi-std")
))]
compile_error!(
    "choose one ABI: build with --no-default-features --features abi-ompi (Open MPI) or abi-std (MPI-5 standard ABI)"
);
#[cfg(not(any(feature = "abi-mpich", feature = "abi-ompi", feature = "abi-std")))]
compile_error!("no ABI selected: enable the abi-mpich (default), abi-ompi or abi-std feature");

use core::ffi::c_void;

/// The typedefs both ABIs share (x86-64 Linux, MPI-4.0 §2.5.8): ROMIO's file handle is a
/// pointer in both, addresses, counts and offsets are 64-bit, Fortran handles are `int`.
#[allow(non_camel_case_types)]
pub type MPI_File = *mut c_void;
#[allow(non_camel_case_types)]
pub type MPI_Aint = i64;
#[allow(non_camel_case_types)]
pub type MPI_Count = i64;
#[allow(non_camel_case_types)]
pub type MPI_Offset = i64;
#[allow(non_camel_case_types)]
pub type MPI_Fint = c_int;

use core::ffi::c_int;

/// Attribute callback types (MPI-4.0 §7.7.2).
#[allow(non_camel_case_types)]
pub type MPI_Comm_copy_attr_function = unsafe extern "C" fn(
    MPI_Comm,
    c_int,
    *mut c_void,
    *mut c_void,
    *mut c_void,
    *mut c_int,
) -> c_int;
#[allow(non_camel_case_types)]
pub type MPI_Comm_delete_attr_function =
    unsafe extern "C" fn(MPI_Comm, c_int, *mut c_void, *mut c_void) -> c_int;
#[allow(non_camel_case_types)]
pub type MPI_User_function =
    unsafe extern "C" fn(*mut c_void, *mut c_void, *mut c_int, *mut MPI_Datatype);

/// A count or displacement array as the C caller passed it: `int[]` in the classic
/// bindings, `MPI_Count[]`/`MPI_Aint[]` in the large-count `_c` bindings (MPI-4.0 §2.5.8).
/// The hooks read it as i64 either way.
#[derive(Clone, Copy, Debug)]
pub enum Counts {
    I32(*const c_int),
    I64(*const i64),
}

impl Counts {
    /// The array's address (the system MPI compares send and receive count arrays by
    /// address when it checks for aliased buffers).
    pub fn addr(&self) -> usize {
        match *self {
            Counts::I32(p) => p as usize,
            Counts::I64(p) => p as usize,
        }
    }

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

/// Whether `dt` is one of the MINLOC/MAXLOC pair types with a gap or an int after a value
/// of another size (`struct { T v; int i; }`, MPI-4.0 §6.9.4); the dense pairs (`MPI_2INT`,
/// `MPI_2REAL`, ...) are plain predefined types. In MPICH these five are direct handles
/// without the builtin size encoding.
#[inline]
pub fn is_pair_type(dt: MPI_Datatype) -> bool {
    [
        MPI_FLOAT_INT(),
        MPI_DOUBLE_INT(),
        MPI_LONG_INT(),
        MPI_SHORT_INT(),
        MPI_LONG_DOUBLE_INT(),
    ]
    .contains(&dt)
}

/// Whether `h` is one of the shim's own request handles (`shim_request_handle`).
#[inline]
pub fn is_shim_request(h: MPI_Request) -> bool {
    shim_request_index(h).is_some()
}

/// Declares an enum of predefined handles (one variant per MPI name, without the `MPI_`
/// prefix) with `handle()` and a lookup `of(h)`. Predefined handles are compile-time
/// constants only in the MPICH ABI (Open MPI's are addresses of objects in `libmpi`,
/// known at run time), so code that dispatches on a predefined datatype or operation
/// matches on these enums instead of on handle values.
macro_rules! predefined_kinds {
    ($(#[$m:meta])* $enum:ident: $ty:ty { $($name:ident => $f:ident),* $(,)? }) => {
        $(#[$m])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        #[allow(non_camel_case_types)]
        pub enum $enum { $($name),* }

        impl $enum {
            pub const ALL: &'static [$enum] = &[$($enum::$name),*];

            /// The library's handle for this predefined object.
            #[inline]
            pub fn handle(self) -> $ty {
                match self { $($enum::$name => $f()),* }
            }

            /// The predefined object a handle names, `None` for any other handle.
            pub fn of(h: $ty) -> Option<$enum> {
                static TABLE: std::sync::OnceLock<Vec<($ty, $enum)>> = std::sync::OnceLock::new();
                let t = TABLE.get_or_init(|| {
                    let mut v: Vec<($ty, $enum)> = Self::ALL.iter().map(|&k| (k.handle(), k)).collect();
                    // aliases (MPI_LONG_LONG and MPI_LONG_LONG_INT, ...) keep the first name
                    v.sort_by_key(|&(h, _)| h);
                    v.dedup_by_key(|&mut (h, _)| h);
                    v
                });
                t.binary_search_by_key(&h, |&(h, _)| h).ok().map(|i| t[i].1)
            }
        }
    };
}

predefined_kinds! {
    /// The predefined datatypes that local reductions know (MPI-4.0 §6.9.2).
    Dt: MPI_Datatype {
        CHAR => MPI_CHAR, SIGNED_CHAR => MPI_SIGNED_CHAR, UNSIGNED_CHAR => MPI_UNSIGNED_CHAR,
        CHARACTER => MPI_CHARACTER, SHORT => MPI_SHORT, UNSIGNED_SHORT => MPI_UNSIGNED_SHORT,
        INT => MPI_INT, UNSIGNED => MPI_UNSIGNED, LONG => MPI_LONG,
        UNSIGNED_LONG => MPI_UNSIGNED_LONG, LONG_LONG => MPI_LONG_LONG,
        UNSIGNED_LONG_LONG => MPI_UNSIGNED_LONG_LONG, INT8_T => MPI_INT8_T,
        INT16_T => MPI_INT16_T, INT32_T => MPI_INT32_T, INT64_T => MPI_INT64_T,
        UINT8_T => MPI_UINT8_T, UINT16_T => MPI_UINT16_T, UINT32_T => MPI_UINT32_T,
        UINT64_T => MPI_UINT64_T, INTEGER => MPI_INTEGER, INTEGER1 => MPI_INTEGER1,
        INTEGER2 => MPI_INTEGER2, INTEGER4 => MPI_INTEGER4, INTEGER8 => MPI_INTEGER8,
        AINT => MPI_AINT, OFFSET => MPI_OFFSET, COUNT => MPI_COUNT, BYTE => MPI_BYTE,
        FLOAT => MPI_FLOAT, DOUBLE => MPI_DOUBLE, LONG_DOUBLE => MPI_LONG_DOUBLE,
        REAL => MPI_REAL, DOUBLE_PRECISION => MPI_DOUBLE_PRECISION, REAL4 => MPI_REAL4,
        REAL8 => MPI_REAL8, REAL16 => MPI_REAL16, C_BOOL => MPI_C_BOOL,
        CXX_BOOL => MPI_CXX_BOOL, LOGICAL => MPI_LOGICAL, COMPLEX => MPI_COMPLEX,
        DOUBLE_COMPLEX => MPI_DOUBLE_COMPLEX, C_FLOAT_COMPLEX => MPI_C_FLOAT_COMPLEX,
        C_DOUBLE_COMPLEX => MPI_C_DOUBLE_COMPLEX,
        C_LONG_DOUBLE_COMPLEX => MPI_C_LONG_DOUBLE_COMPLEX,
        CXX_FLOAT_COMPLEX => MPI_CXX_FLOAT_COMPLEX,
        CXX_DOUBLE_COMPLEX => MPI_CXX_DOUBLE_COMPLEX,
        CXX_LONG_DOUBLE_COMPLEX => MPI_CXX_LONG_DOUBLE_COMPLEX, COMPLEX8 => MPI_COMPLEX8,
        COMPLEX16 => MPI_COMPLEX16, COMPLEX32 => MPI_COMPLEX32, FLOAT_INT => MPI_FLOAT_INT,
        DOUBLE_INT => MPI_DOUBLE_INT, LONG_INT => MPI_LONG_INT, SHORT_INT => MPI_SHORT_INT,
        TWO_INT => MPI_2INT, LONG_DOUBLE_INT => MPI_LONG_DOUBLE_INT,
        TWO_INTEGER => MPI_2INTEGER, TWO_REAL => MPI_2REAL,
        TWO_DOUBLE_PRECISION => MPI_2DOUBLE_PRECISION,
    }
}

predefined_kinds! {
    /// The predefined reduction operations (MPI-4.0 §6.9.2, §12.3.4).
    Op: MPI_Op {
        MAX => MPI_MAX, MIN => MPI_MIN, SUM => MPI_SUM, PROD => MPI_PROD, LAND => MPI_LAND,
        BAND => MPI_BAND, LOR => MPI_LOR, BOR => MPI_BOR, LXOR => MPI_LXOR, BXOR => MPI_BXOR,
        MINLOC => MPI_MINLOC, MAXLOC => MPI_MAXLOC, REPLACE => MPI_REPLACE, NO_OP => MPI_NO_OP,
    }
}

/// The behaviour of `MPI_COMM_NULL_COPY_FN`/`MPI_TYPE_NULL_COPY_FN` (MPI-4.0 §7.7.2: the
/// attribute is not copied). MPICH's constants are NULL, Open MPI's are functions in
/// `libmpi` and it rejects NULL, so the shim passes this function on both.
///
/// # Safety
/// `flag` must be valid (the MPI library passes its own out-pointer).
pub unsafe extern "C" fn null_copy_attr(
    _old: MPI_Comm,
    _keyval: c_int,
    _extra: *mut c_void,
    _attr_in: *mut c_void,
    _attr_out: *mut c_void,
    flag: *mut c_int,
) -> c_int {
    // SAFETY: the library's out-pointer.
    unsafe { *flag = 0 };
    MPI_SUCCESS
}

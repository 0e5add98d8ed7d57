//! Layer: platform. May use: nothing.
//!
//! The MPICH ABI (MPICH, Intel MPI, MVAPICH, Cray MPICH): handle typedefs, `MPI_Status`,
//! predefined objects and constants, hand-written from the ABI (values as in MPICH's
//! `mpi.h`; MPI-4.0 Annex A lists the names). Handles are `int`; handle values encode
//! kind (bits 30-31), object type (bits 26-29) and, for datatypes, the size in bytes
//! (bits 8-15).
#![allow(
    non_camel_case_types,
    non_upper_case_globals,
    non_snake_case,
    dead_code
)]

use core::ffi::{c_int, c_void};

pub type MPI_Comm = c_int;
pub type MPI_Datatype = c_int;
pub type MPI_Op = c_int;
pub type MPI_Win = c_int;
pub type MPI_Group = c_int;
pub type MPI_Request = c_int;
pub type MPI_Info = c_int;
pub type MPI_Errhandler = c_int;
pub type MPI_Message = c_int;
pub type MPI_Session = c_int;
/// An atomic cell holding a handle.
pub type AtomicHandle = core::sync::atomic::AtomicI32;

/// `MPI_Status` in the MPICH ABI: five ints, the public fields at offsets 8, 12 and 16.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MPI_Status {
    pub count_lo: c_int,
    pub count_hi_and_cancelled: c_int,
    pub MPI_SOURCE: c_int,
    pub MPI_TAG: c_int,
    pub MPI_ERROR: c_int,
}
const _: () = assert!(core::mem::size_of::<MPI_Status>() == 20);

impl MPI_Status {
    /// Zero elements received, not cancelled (the hidden fields of the ABI).
    pub fn clear_count(&mut self) {
        self.count_lo = 0;
        self.count_hi_and_cancelled = 0;
    }
}

pub const ABI_NAME: &str = "MPICH";

// Null handles
pub const fn MPI_COMM_NULL() -> MPI_Comm {
    0x04000000
}
pub const fn MPI_OP_NULL() -> MPI_Op {
    0x18000000
}
pub const fn MPI_GROUP_NULL() -> MPI_Group {
    0x08000000
}
pub const fn MPI_DATATYPE_NULL() -> MPI_Datatype {
    0x0c000000
}
pub const fn MPI_REQUEST_NULL() -> MPI_Request {
    0x2c000000
}
pub const fn MPI_ERRHANDLER_NULL() -> MPI_Errhandler {
    0x14000000
}
pub const fn MPI_MESSAGE_NULL() -> MPI_Message {
    0x2c000000
}
pub const fn MPI_MESSAGE_NO_PROC() -> MPI_Message {
    0x6c000000
}
pub const fn MPI_INFO_NULL() -> MPI_Info {
    0x1c000000
}
pub const fn MPI_INFO_ENV() -> MPI_Info {
    0x5c000001
}
pub const fn MPI_WIN_NULL() -> MPI_Win {
    0x20000000
}
pub const fn MPI_SESSION_NULL() -> MPI_Session {
    0x38000000
}
pub const fn MPI_GROUP_EMPTY() -> MPI_Group {
    0x48000000
}

// Communicators
pub const fn MPI_COMM_WORLD() -> MPI_Comm {
    0x44000000
}
pub const fn MPI_COMM_SELF() -> MPI_Comm {
    0x44000001
}

// Comparison results
pub const MPI_IDENT: c_int = 0;
pub const MPI_CONGRUENT: c_int = 1;
pub const MPI_SIMILAR: c_int = 2;
pub const MPI_UNEQUAL: c_int = 3;

// Predefined datatypes (C)
pub const fn MPI_CHAR() -> MPI_Datatype {
    0x4c000101
}
pub const fn MPI_SIGNED_CHAR() -> MPI_Datatype {
    0x4c000118
}
pub const fn MPI_UNSIGNED_CHAR() -> MPI_Datatype {
    0x4c000102
}
pub const fn MPI_BYTE() -> MPI_Datatype {
    0x4c00010d
}
pub const fn MPI_WCHAR() -> MPI_Datatype {
    0x4c00040e
}
pub const fn MPI_SHORT() -> MPI_Datatype {
    0x4c000203
}
pub const fn MPI_UNSIGNED_SHORT() -> MPI_Datatype {
    0x4c000204
}
pub const fn MPI_INT() -> MPI_Datatype {
    0x4c000405
}
pub const fn MPI_UNSIGNED() -> MPI_Datatype {
    0x4c000406
}
pub const fn MPI_LONG() -> MPI_Datatype {
    0x4c000807
}
pub const fn MPI_UNSIGNED_LONG() -> MPI_Datatype {
    0x4c000808
}
pub const fn MPI_FLOAT() -> MPI_Datatype {
    0x4c00040a
}
pub const fn MPI_DOUBLE() -> MPI_Datatype {
    0x4c00080b
}
pub const fn MPI_LONG_DOUBLE() -> MPI_Datatype {
    0x4c00100c
}
pub const fn MPI_LONG_LONG_INT() -> MPI_Datatype {
    0x4c000809
}
pub const fn MPI_LONG_LONG() -> MPI_Datatype {
    MPI_LONG_LONG_INT()
}
pub const fn MPI_UNSIGNED_LONG_LONG() -> MPI_Datatype {
    0x4c000819
}
pub const fn MPI_PACKED() -> MPI_Datatype {
    0x4c00010f
}
pub const fn MPI_LB() -> MPI_Datatype {
    0x4c000010
}
pub const fn MPI_UB() -> MPI_Datatype {
    0x4c000011
}
// Pair types for MINLOC/MAXLOC
pub const fn MPI_FLOAT_INT() -> MPI_Datatype {
    0x8c000000u32 as i32
}
pub const fn MPI_DOUBLE_INT() -> MPI_Datatype {
    0x8c000001u32 as i32
}
pub const fn MPI_LONG_INT() -> MPI_Datatype {
    0x8c000002u32 as i32
}
pub const fn MPI_SHORT_INT() -> MPI_Datatype {
    0x8c000003u32 as i32
}
pub const fn MPI_2INT() -> MPI_Datatype {
    0x4c000816
}
pub const fn MPI_LONG_DOUBLE_INT() -> MPI_Datatype {
    0x8c000004u32 as i32
}
// Fortran types
pub const fn MPI_COMPLEX() -> MPI_Datatype {
    0x4c00081e
}
pub const fn MPI_DOUBLE_COMPLEX() -> MPI_Datatype {
    0x4c001022
}
pub const fn MPI_LOGICAL() -> MPI_Datatype {
    0x4c00041d
}
pub const fn MPI_REAL() -> MPI_Datatype {
    0x4c00041c
}
pub const fn MPI_DOUBLE_PRECISION() -> MPI_Datatype {
    0x4c00081f
}
pub const fn MPI_INTEGER() -> MPI_Datatype {
    0x4c00041b
}
pub const fn MPI_2INTEGER() -> MPI_Datatype {
    0x4c000820
}
pub const fn MPI_2REAL() -> MPI_Datatype {
    0x4c000821
}
pub const fn MPI_2DOUBLE_PRECISION() -> MPI_Datatype {
    0x4c001023
}
pub const fn MPI_CHARACTER() -> MPI_Datatype {
    0x4c00011a
}
pub const fn MPI_REAL4() -> MPI_Datatype {
    0x4c000427
}
pub const fn MPI_REAL8() -> MPI_Datatype {
    0x4c000829
}
pub const fn MPI_REAL16() -> MPI_Datatype {
    0x4c00102b
}
pub const fn MPI_COMPLEX8() -> MPI_Datatype {
    0x4c000828
}
pub const fn MPI_COMPLEX16() -> MPI_Datatype {
    0x4c00102a
}
pub const fn MPI_COMPLEX32() -> MPI_Datatype {
    0x4c00202c
}
pub const fn MPI_INTEGER1() -> MPI_Datatype {
    0x4c00012d
}
pub const fn MPI_INTEGER2() -> MPI_Datatype {
    0x4c00022f
}
pub const fn MPI_INTEGER4() -> MPI_Datatype {
    0x4c000430
}
pub const fn MPI_INTEGER8() -> MPI_Datatype {
    0x4c000831
}
// Fixed-width C types
pub const fn MPI_INT8_T() -> MPI_Datatype {
    0x4c000137
}
pub const fn MPI_INT16_T() -> MPI_Datatype {
    0x4c000238
}
pub const fn MPI_INT32_T() -> MPI_Datatype {
    0x4c000439
}
pub const fn MPI_INT64_T() -> MPI_Datatype {
    0x4c00083a
}
pub const fn MPI_UINT8_T() -> MPI_Datatype {
    0x4c00013b
}
pub const fn MPI_UINT16_T() -> MPI_Datatype {
    0x4c00023c
}
pub const fn MPI_UINT32_T() -> MPI_Datatype {
    0x4c00043d
}
pub const fn MPI_UINT64_T() -> MPI_Datatype {
    0x4c00083e
}
pub const fn MPI_C_BOOL() -> MPI_Datatype {
    0x4c00013f
}
pub const fn MPI_C_FLOAT_COMPLEX() -> MPI_Datatype {
    0x4c000840
}
pub const fn MPI_C_COMPLEX() -> MPI_Datatype {
    MPI_C_FLOAT_COMPLEX()
}
pub const fn MPI_C_DOUBLE_COMPLEX() -> MPI_Datatype {
    0x4c001041
}
pub const fn MPI_C_LONG_DOUBLE_COMPLEX() -> MPI_Datatype {
    0x4c002042
}
pub const fn MPI_AINT() -> MPI_Datatype {
    0x4c000843
}
pub const fn MPI_OFFSET() -> MPI_Datatype {
    0x4c000844
}
pub const fn MPI_COUNT() -> MPI_Datatype {
    0x4c000845
}
pub const fn MPI_CXX_BOOL() -> MPI_Datatype {
    0x4c000133
}
pub const fn MPI_CXX_FLOAT_COMPLEX() -> MPI_Datatype {
    0x4c000834
}
pub const fn MPI_CXX_DOUBLE_COMPLEX() -> MPI_Datatype {
    0x4c001035
}
pub const fn MPI_CXX_LONG_DOUBLE_COMPLEX() -> MPI_Datatype {
    0x4c002036
}

// Predefined reduction operations
pub const fn MPI_MAX() -> MPI_Op {
    0x58000001
}
pub const fn MPI_MIN() -> MPI_Op {
    0x58000002
}
pub const fn MPI_SUM() -> MPI_Op {
    0x58000003
}
pub const fn MPI_PROD() -> MPI_Op {
    0x58000004
}
pub const fn MPI_LAND() -> MPI_Op {
    0x58000005
}
pub const fn MPI_BAND() -> MPI_Op {
    0x58000006
}
pub const fn MPI_LOR() -> MPI_Op {
    0x58000007
}
pub const fn MPI_BOR() -> MPI_Op {
    0x58000008
}
pub const fn MPI_LXOR() -> MPI_Op {
    0x58000009
}
pub const fn MPI_BXOR() -> MPI_Op {
    0x5800000a
}
pub const fn MPI_MINLOC() -> MPI_Op {
    0x5800000b
}
pub const fn MPI_MAXLOC() -> MPI_Op {
    0x5800000c
}
pub const fn MPI_REPLACE() -> MPI_Op {
    0x5800000d
}
pub const fn MPI_NO_OP() -> MPI_Op {
    0x5800000e
}

// Error handlers
pub const fn MPI_ERRORS_ARE_FATAL() -> MPI_Errhandler {
    0x54000000
}
pub const fn MPI_ERRORS_RETURN() -> MPI_Errhandler {
    0x54000001
}
pub const fn MPI_ERRORS_ABORT() -> MPI_Errhandler {
    0x54000003
}

// Predefined attribute keys
pub const MPI_TAG_UB: c_int = 0x64400001;
pub const MPI_HOST: c_int = 0x64400003;
pub const MPI_IO: c_int = 0x64400005;
pub const MPI_WTIME_IS_GLOBAL: c_int = 0x64400007;
pub const MPI_UNIVERSE_SIZE: c_int = 0x64400009;
pub const MPI_LASTUSEDCODE: c_int = 0x6440000b;
pub const MPI_APPNUM: c_int = 0x6440000d;
pub const MPI_WIN_BASE: c_int = 0x66000001;
pub const MPI_WIN_SIZE: c_int = 0x66000003;
pub const MPI_WIN_DISP_UNIT: c_int = 0x66000005;
pub const MPI_WIN_CREATE_FLAVOR: c_int = 0x66000007;
pub const MPI_WIN_MODEL: c_int = 0x66000009;
pub const MPI_MAX_INFO_VAL: c_int = 1024;
pub const MPI_KEYVAL_INVALID: c_int = 0x24000000;

// Sentinels and special values
pub const MPI_UNDEFINED: c_int = -32766;
pub const MPI_PROC_NULL: c_int = -1;
pub const MPI_ANY_SOURCE: c_int = -2;
pub const MPI_ROOT: c_int = -3;
pub const MPI_ANY_TAG: c_int = -1;
pub const MPI_LOCK_EXCLUSIVE: c_int = 234;
pub const MPI_LOCK_SHARED: c_int = 235;
pub const MPI_BOTTOM: *mut c_void = core::ptr::null_mut();
/// `(void *) -1`
pub const MPI_IN_PLACE: *mut c_void = core::ptr::without_provenance_mut(usize::MAX);
/// `(MPI_Status *) 1`
pub const MPI_STATUS_IGNORE: *mut MPI_Status = core::ptr::without_provenance_mut(1);
pub const MPI_STATUSES_IGNORE: *mut MPI_Status = core::ptr::without_provenance_mut(1);
pub const MPI_ERRCODES_IGNORE: *mut c_int = core::ptr::null_mut();

// Thread levels
pub const MPI_THREAD_SINGLE: c_int = 0;
pub const MPI_THREAD_FUNNELED: c_int = 1;
pub const MPI_THREAD_SERIALIZED: c_int = 2;
pub const MPI_THREAD_MULTIPLE: c_int = 3;

// Topologies
pub const MPI_GRAPH: c_int = 1;
pub const MPI_CART: c_int = 2;
pub const MPI_DIST_GRAPH: c_int = 3;

// Window assertions and flavors
pub const MPI_MODE_NOCHECK: c_int = 1024;
pub const MPI_MODE_NOSTORE: c_int = 2048;
pub const MPI_MODE_NOPUT: c_int = 4096;
pub const MPI_MODE_NOPRECEDE: c_int = 8192;
pub const MPI_MODE_NOSUCCEED: c_int = 16384;
pub const MPI_COMM_TYPE_SHARED: c_int = 1;
pub const MPI_WIN_FLAVOR_CREATE: c_int = 1;
pub const MPI_WIN_FLAVOR_ALLOCATE: c_int = 2;
pub const MPI_WIN_FLAVOR_DYNAMIC: c_int = 3;
pub const MPI_WIN_FLAVOR_SHARED: c_int = 4;

// Datatype combiners (MPI-4.0 §5.1.13)
// Array order and distributions of subarray/darray types (mpi.h).
pub const MPI_ORDER_C: c_int = 56;
pub const MPI_ORDER_FORTRAN: c_int = 57;
pub const MPI_DISTRIBUTE_BLOCK: c_int = 121;
pub const MPI_DISTRIBUTE_CYCLIC: c_int = 122;
pub const MPI_DISTRIBUTE_NONE: c_int = 123;
pub const MPI_DISTRIBUTE_DFLT_DARG: c_int = -49767;
pub const MPI_COMBINER_NAMED: c_int = 1;
pub const MPI_COMBINER_DUP: c_int = 2;
pub const MPI_COMBINER_CONTIGUOUS: c_int = 3;
pub const MPI_COMBINER_VECTOR: c_int = 4;
pub const MPI_COMBINER_HVECTOR: c_int = 6;
pub const MPI_COMBINER_INDEXED: c_int = 7;
pub const MPI_COMBINER_HINDEXED: c_int = 9;
pub const MPI_COMBINER_INDEXED_BLOCK: c_int = 10;
pub const MPI_COMBINER_STRUCT: c_int = 12;
pub const MPI_COMBINER_SUBARRAY: c_int = 13;
pub const MPI_COMBINER_DARRAY: c_int = 14;
pub const MPI_COMBINER_F90_REAL: c_int = 15;
pub const MPI_COMBINER_F90_COMPLEX: c_int = 16;
pub const MPI_COMBINER_F90_INTEGER: c_int = 17;
pub const MPI_COMBINER_RESIZED: c_int = 18;
pub const MPI_COMBINER_HINDEXED_BLOCK: c_int = 19;

// Error classes (MPI-4.0 §9.4, values of the MPICH ABI)
pub const MPI_SUCCESS: c_int = 0;
pub const MPI_ERR_BUFFER: c_int = 1;
pub const MPI_ERR_COUNT: c_int = 2;
pub const MPI_ERR_TYPE: c_int = 3;
pub const MPI_ERR_TAG: c_int = 4;
pub const MPI_ERR_COMM: c_int = 5;
pub const MPI_ERR_RANK: c_int = 6;
pub const MPI_ERR_ROOT: c_int = 7;
pub const MPI_ERR_GROUP: c_int = 8;
pub const MPI_ERR_OP: c_int = 9;
pub const MPI_ERR_TOPOLOGY: c_int = 10;
pub const MPI_ERR_DIMS: c_int = 11;
pub const MPI_ERR_ARG: c_int = 12;
pub const MPI_ERR_UNKNOWN: c_int = 13;
pub const MPI_ERR_TRUNCATE: c_int = 14;
pub const MPI_ERR_OTHER: c_int = 15;
pub const MPI_ERR_INTERN: c_int = 16;
pub const MPI_ERR_IN_STATUS: c_int = 17;
pub const MPI_ERR_PENDING: c_int = 18;
pub const MPI_ERR_REQUEST: c_int = 19;
pub const MPI_ERR_INFO: c_int = 28;
pub const MPI_ERR_NO_MEM: c_int = 34;
pub const MPI_ERR_NOT_SAME: c_int = 35;
pub const MPI_ERR_UNSUPPORTED_OPERATION: c_int = 44;
pub const MPI_ERR_WIN: c_int = 45;
pub const MPI_ERR_BASE: c_int = 46;
pub const MPI_ERR_LOCKTYPE: c_int = 47;
pub const MPI_ERR_KEYVAL: c_int = 48;
pub const MPI_ERR_RMA_CONFLICT: c_int = 49;
pub const MPI_ERR_RMA_SYNC: c_int = 50;
pub const MPI_ERR_SIZE: c_int = 51;
pub const MPI_ERR_DISP: c_int = 52;
pub const MPI_ERR_ASSERT: c_int = 53;
pub const MPI_ERR_RMA_RANGE: c_int = 55;
pub const MPI_ERR_RMA_ATTACH: c_int = 56;
pub const MPI_ERR_RMA_SHARED: c_int = 57;
pub const MPI_ERR_RMA_FLAVOR: c_int = 58;

pub const MPI_MAX_LIBRARY_VERSION_STRING: usize = 8192;
pub const MPI_MAX_OBJECT_NAME: usize = 128;
pub const MPI_MAX_ERROR_STRING: usize = 512;

/// Whether a datatype handle is predefined (named): MPICH builtin handles have kind 1 in
/// bits 30-31 and object type 3 (datatype) in bits 26-29; the pair types are listed.
#[inline]
pub fn is_predefined_datatype(dt: MPI_Datatype) -> bool {
    use super::is_pair_type;
    ((dt as u32) >> 26) == 0x13 || is_pair_type(dt)
}

/// Size in bytes encoded in a builtin datatype handle (MPICH encodes it in bits 8-15);
/// `None` for pair types and non-builtin handles, whose size must be asked for.
#[inline]
pub fn builtin_size(dt: MPI_Datatype) -> Option<usize> {
    if ((dt as u32) >> 26) == 0x13 {
        Some((((dt as u32) >> 8) & 0xff) as usize)
    } else {
        None
    }
}

/// Whether an op handle is a predefined operation (builtin kind, op object type).
#[inline]
pub fn is_builtin_op(op: MPI_Op) -> bool {
    ((op as u32) & 0xfc00_0000) == 0x5800_0000
}

/// Handles of the shim's own requests: MPICH never allocates handle kind 0 ("invalid" in
/// its encoding), so `MPI_REQUEST_NULL + 1 + index` (kind 0, request object type) can
/// never collide with a request of the MPI library.
pub fn shim_request_handle(index: usize) -> MPI_Request {
    assert!(index < 0x03ff_fffe, "too many outstanding shim requests");
    MPI_REQUEST_NULL() + 1 + index as i32
}

/// The index of a shim request handle, `None` for any other handle.
pub fn shim_request_index(h: MPI_Request) -> Option<usize> {
    let u = h as u32;
    (u & 0xfc00_0000 == 0x2c00_0000 && u != 0x2c00_0000).then(|| (u & 0x03ff_ffff) as usize - 1)
}

/// Handles of schedule-local composite datatypes (`crate::core::sched`): kind 0 in bits 30-31,
/// which MPICH never allocates, so they never collide with a real handle.
pub fn composite_handle(index: usize) -> MPI_Datatype {
    assert!(
        index < 0x0100_0000,
        "too many composite datatypes in one schedule"
    );
    0x0f00_0000 | index as MPI_Datatype
}

/// The index of a composite datatype handle, `None` for any other handle.
pub fn composite_index(dt: MPI_Datatype) -> Option<usize> {
    ((dt as u32) & 0xff00_0000 == 0x0f00_0000).then_some((dt as u32 & 0x00ff_ffff) as usize)
}

/// Recognises the library version strings of MPICH-ABI implementations; the same
/// implementations' `libmpi_abi.so` (the standard ABI) says so in `MPI_Abi_get_version`.
pub fn library_is_compatible(version: &str, std_abi: Option<(c_int, c_int)>) -> bool {
    const FAMILY: &[&str] = &["MPICH", "Intel(R) MPI", "MVAPICH", "CRAY MPICH"];
    !version.starts_with("Open MPI")
        && FAMILY.iter().any(|f| version.contains(f))
        && std_abi.is_none()
}

/// Sonames tried when no loaded object provides the MPI (`crate::platform::symbols`).
pub const MPI_LIBRARY_CANDIDATES: &[&str] =
    &["libmpi.so.12", "libmpich.so.12", "libmpi.so", "libmpich.so"];

pub const SUPPORTED_DESCRIPTION: &str =
    "the MPICH ABI (MPICH 3.x/4.x, Intel MPI, MVAPICH, Cray MPICH)";

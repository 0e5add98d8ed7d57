//! Layer: platform. May use: nothing.
//!
//! The Open MPI ABI (Open MPI 4.x): handle typedefs, `MPI_Status`, predefined objects and
//! constants. Handles are pointers; a predefined handle is the address of an object in
//! `libmpi` (`MPI_COMM_WORLD` is `&ompi_mpi_comm_world`, mpi.h's `OMPI_PREDEFINED_GLOBAL`),
//! so the shim resolves those addresses at run time (`dlsym`, like the `PMPI_*` functions)
//! and the predefined handles are functions, as in the MPICH module where they are
//! `const fn`s. The integer constants were printed by a C program compiled against
//! Open MPI 4.1's `mpi.h` (`scripts/abi-consts`).
#![allow(
    non_camel_case_types,
    non_upper_case_globals,
    non_snake_case,
    dead_code
)]

use core::ffi::{c_int, c_void};
use std::sync::OnceLock;

use super::{MPI_Aint, MPI_Count};

/// Every handle is a pointer to an Open MPI object; the shim keeps it as an address
/// (`usize` has the same size and calling convention as a pointer on every platform Open
/// MPI supports, and is `Send`, `Hash` and `Ord`, which the shim's tables need).
pub type MPI_Comm = usize;
pub type MPI_Datatype = usize;
pub type MPI_Op = usize;
pub type MPI_Win = usize;
pub type MPI_Group = usize;
pub type MPI_Request = usize;
pub type MPI_Info = usize;
pub type MPI_Errhandler = usize;
pub type MPI_Message = usize;
pub type MPI_Session = usize;
/// An atomic cell holding a handle.
pub type AtomicHandle = core::sync::atomic::AtomicUsize;

/// `MPI_Status` in Open MPI (`struct ompi_status_public_t`): the public fields first, then
/// the cancelled flag and the received byte count.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MPI_Status {
    pub MPI_SOURCE: c_int,
    pub MPI_TAG: c_int,
    pub MPI_ERROR: c_int,
    pub _cancelled: c_int,
    pub _ucount: usize,
}
const _: () = assert!(core::mem::size_of::<MPI_Status>() == 24);

impl MPI_Status {
    /// Zero elements received, not cancelled (the hidden fields of the ABI).
    pub fn clear_count(&mut self) {
        self._cancelled = 0;
        self._ucount = 0;
    }
}

pub const ABI_NAME: &str = "Open MPI";

/// Declares the predefined handles: one function per name returning the address of its
/// `libmpi` object, all resolved together on first use.
macro_rules! predefined {
    ($($name:ident: $ty:ident = $sym:ident;)*) => {
        #[allow(non_camel_case_types, clippy::upper_case_acronyms)]
        #[derive(Clone, Copy)]
        #[repr(usize)]
        enum Sym { $($name),* }
        const SYMBOLS: &[&str] = &[$(concat!(stringify!($sym), "\0")),*];
        $(
            #[inline]
            pub fn $name() -> $ty {
                address(Sym::$name as usize)
            }
        )*
    };
}

/// The address of predefined object `i`. An object this Open MPI does not have (a newer
/// version's `MPI_ERRORS_ABORT`, the removed `MPI_LB`) gets a distinct odd value, which is
/// never the address of an object, so it compares unequal to every real handle.
#[inline]
fn address(i: usize) -> usize {
    static TABLE: OnceLock<Vec<usize>> = OnceLock::new();
    TABLE.get_or_init(|| {
        SYMBOLS
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let name = core::ffi::CStr::from_bytes_with_nul(s.as_bytes()).expect("symbol name");
                let p = crate::platform::symbols::lookup_data(name) as usize;
                if p == 0 { usize::MAX - 2 * i } else { p }
            })
            .collect()
    })[i]
}

predefined! {
    MPI_COMM_NULL: MPI_Comm = ompi_mpi_comm_null;
    MPI_OP_NULL: MPI_Op = ompi_mpi_op_null;
    MPI_GROUP_NULL: MPI_Group = ompi_mpi_group_null;
    MPI_DATATYPE_NULL: MPI_Datatype = ompi_mpi_datatype_null;
    MPI_REQUEST_NULL: MPI_Request = ompi_request_null;
    MPI_ERRHANDLER_NULL: MPI_Errhandler = ompi_mpi_errhandler_null;
    MPI_MESSAGE_NULL: MPI_Message = ompi_message_null;
    MPI_MESSAGE_NO_PROC: MPI_Message = ompi_message_no_proc;
    MPI_INFO_NULL: MPI_Info = ompi_mpi_info_null;
    MPI_INFO_ENV: MPI_Info = ompi_mpi_info_env;
    MPI_WIN_NULL: MPI_Win = ompi_mpi_win_null;
    MPI_SESSION_NULL: MPI_Session = ompi_mpi_instance_null;
    MPI_GROUP_EMPTY: MPI_Group = ompi_mpi_group_empty;
    MPI_COMM_WORLD: MPI_Comm = ompi_mpi_comm_world;
    MPI_COMM_SELF: MPI_Comm = ompi_mpi_comm_self;
    MPI_CHAR: MPI_Datatype = ompi_mpi_char;
    MPI_SIGNED_CHAR: MPI_Datatype = ompi_mpi_signed_char;
    MPI_UNSIGNED_CHAR: MPI_Datatype = ompi_mpi_unsigned_char;
    MPI_BYTE: MPI_Datatype = ompi_mpi_byte;
    MPI_WCHAR: MPI_Datatype = ompi_mpi_wchar;
    MPI_SHORT: MPI_Datatype = ompi_mpi_short;
    MPI_UNSIGNED_SHORT: MPI_Datatype = ompi_mpi_unsigned_short;
    MPI_INT: MPI_Datatype = ompi_mpi_int;
    MPI_UNSIGNED: MPI_Datatype = ompi_mpi_unsigned;
    MPI_LONG: MPI_Datatype = ompi_mpi_long;
    MPI_UNSIGNED_LONG: MPI_Datatype = ompi_mpi_unsigned_long;
    MPI_FLOAT: MPI_Datatype = ompi_mpi_float;
    MPI_DOUBLE: MPI_Datatype = ompi_mpi_double;
    MPI_LONG_DOUBLE: MPI_Datatype = ompi_mpi_long_double;
    MPI_LONG_LONG_INT: MPI_Datatype = ompi_mpi_long_long_int;
    MPI_LONG_LONG: MPI_Datatype = ompi_mpi_long_long_int;
    MPI_UNSIGNED_LONG_LONG: MPI_Datatype = ompi_mpi_unsigned_long_long;
    MPI_PACKED: MPI_Datatype = ompi_mpi_packed;
    MPI_LB: MPI_Datatype = ompi_mpi_lb;
    MPI_UB: MPI_Datatype = ompi_mpi_ub;
    MPI_FLOAT_INT: MPI_Datatype = ompi_mpi_float_int;
    MPI_DOUBLE_INT: MPI_Datatype = ompi_mpi_double_int;
    MPI_LONG_INT: MPI_Datatype = ompi_mpi_long_int;
    MPI_SHORT_INT: MPI_Datatype = ompi_mpi_short_int;
    MPI_2INT: MPI_Datatype = ompi_mpi_2int;
    MPI_LONG_DOUBLE_INT: MPI_Datatype = ompi_mpi_longdbl_int;
    MPI_COMPLEX: MPI_Datatype = ompi_mpi_cplex;
    MPI_DOUBLE_COMPLEX: MPI_Datatype = ompi_mpi_dblcplex;
    MPI_LOGICAL: MPI_Datatype = ompi_mpi_logical;
    MPI_REAL: MPI_Datatype = ompi_mpi_real;
    MPI_DOUBLE_PRECISION: MPI_Datatype = ompi_mpi_dblprec;
    MPI_INTEGER: MPI_Datatype = ompi_mpi_integer;
    MPI_2INTEGER: MPI_Datatype = ompi_mpi_2integer;
    MPI_2REAL: MPI_Datatype = ompi_mpi_2real;
    MPI_2DOUBLE_PRECISION: MPI_Datatype = ompi_mpi_2dblprec;
    MPI_CHARACTER: MPI_Datatype = ompi_mpi_character;
    MPI_REAL4: MPI_Datatype = ompi_mpi_real4;
    MPI_REAL8: MPI_Datatype = ompi_mpi_real8;
    MPI_REAL16: MPI_Datatype = ompi_mpi_real16;
    MPI_COMPLEX8: MPI_Datatype = ompi_mpi_complex8;
    MPI_COMPLEX16: MPI_Datatype = ompi_mpi_complex16;
    MPI_COMPLEX32: MPI_Datatype = ompi_mpi_complex32;
    MPI_INTEGER1: MPI_Datatype = ompi_mpi_integer1;
    MPI_INTEGER2: MPI_Datatype = ompi_mpi_integer2;
    MPI_INTEGER4: MPI_Datatype = ompi_mpi_integer4;
    MPI_INTEGER8: MPI_Datatype = ompi_mpi_integer8;
    MPI_INT8_T: MPI_Datatype = ompi_mpi_int8_t;
    MPI_INT16_T: MPI_Datatype = ompi_mpi_int16_t;
    MPI_INT32_T: MPI_Datatype = ompi_mpi_int32_t;
    MPI_INT64_T: MPI_Datatype = ompi_mpi_int64_t;
    MPI_UINT8_T: MPI_Datatype = ompi_mpi_uint8_t;
    MPI_UINT16_T: MPI_Datatype = ompi_mpi_uint16_t;
    MPI_UINT32_T: MPI_Datatype = ompi_mpi_uint32_t;
    MPI_UINT64_T: MPI_Datatype = ompi_mpi_uint64_t;
    MPI_C_BOOL: MPI_Datatype = ompi_mpi_c_bool;
    MPI_C_FLOAT_COMPLEX: MPI_Datatype = ompi_mpi_c_float_complex;
    MPI_C_COMPLEX: MPI_Datatype = ompi_mpi_c_float_complex;
    MPI_C_DOUBLE_COMPLEX: MPI_Datatype = ompi_mpi_c_double_complex;
    MPI_C_LONG_DOUBLE_COMPLEX: MPI_Datatype = ompi_mpi_c_long_double_complex;
    MPI_AINT: MPI_Datatype = ompi_mpi_aint;
    MPI_OFFSET: MPI_Datatype = ompi_mpi_offset;
    MPI_COUNT: MPI_Datatype = ompi_mpi_count;
    MPI_CXX_BOOL: MPI_Datatype = ompi_mpi_cxx_bool;
    MPI_CXX_FLOAT_COMPLEX: MPI_Datatype = ompi_mpi_cxx_cplex;
    MPI_CXX_DOUBLE_COMPLEX: MPI_Datatype = ompi_mpi_cxx_dblcplex;
    MPI_CXX_LONG_DOUBLE_COMPLEX: MPI_Datatype = ompi_mpi_cxx_ldblcplex;
    MPI_MAX: MPI_Op = ompi_mpi_op_max;
    MPI_MIN: MPI_Op = ompi_mpi_op_min;
    MPI_SUM: MPI_Op = ompi_mpi_op_sum;
    MPI_PROD: MPI_Op = ompi_mpi_op_prod;
    MPI_LAND: MPI_Op = ompi_mpi_op_land;
    MPI_BAND: MPI_Op = ompi_mpi_op_band;
    MPI_LOR: MPI_Op = ompi_mpi_op_lor;
    MPI_BOR: MPI_Op = ompi_mpi_op_bor;
    MPI_LXOR: MPI_Op = ompi_mpi_op_lxor;
    MPI_BXOR: MPI_Op = ompi_mpi_op_bxor;
    MPI_MINLOC: MPI_Op = ompi_mpi_op_minloc;
    MPI_MAXLOC: MPI_Op = ompi_mpi_op_maxloc;
    MPI_REPLACE: MPI_Op = ompi_mpi_op_replace;
    MPI_NO_OP: MPI_Op = ompi_mpi_op_no_op;
    MPI_ERRORS_ARE_FATAL: MPI_Errhandler = ompi_mpi_errors_are_fatal;
    MPI_ERRORS_RETURN: MPI_Errhandler = ompi_mpi_errors_return;
    MPI_ERRORS_ABORT: MPI_Errhandler = ompi_mpi_errors_abort;
}

// Integer constants (Open MPI 4.1 mpi.h)
pub const MPI_IDENT: c_int = 0;
pub const MPI_CONGRUENT: c_int = 1;
pub const MPI_SIMILAR: c_int = 2;
pub const MPI_UNEQUAL: c_int = 3;
pub const MPI_TAG_UB: c_int = 0;
pub const MPI_HOST: c_int = 1;
pub const MPI_IO: c_int = 2;
pub const MPI_WTIME_IS_GLOBAL: c_int = 3;
pub const MPI_UNIVERSE_SIZE: c_int = 6;
pub const MPI_LASTUSEDCODE: c_int = 5;
pub const MPI_APPNUM: c_int = 4;
pub const MPI_WIN_BASE: c_int = 7;
pub const MPI_WIN_SIZE: c_int = 8;
pub const MPI_WIN_DISP_UNIT: c_int = 9;
pub const MPI_WIN_CREATE_FLAVOR: c_int = 10;
pub const MPI_WIN_MODEL: c_int = 11;
pub const MPI_MAX_INFO_VAL: c_int = 256;
pub const MPI_KEYVAL_INVALID: c_int = -1;
pub const MPI_UNDEFINED: c_int = -32766;
pub const MPI_PROC_NULL: c_int = -2;
pub const MPI_ANY_SOURCE: c_int = -1;
pub const MPI_ROOT: c_int = -4;
pub const MPI_ANY_TAG: c_int = -1;
pub const MPI_LOCK_EXCLUSIVE: c_int = 1;
pub const MPI_LOCK_SHARED: c_int = 2;
pub const MPI_THREAD_SINGLE: c_int = 0;
pub const MPI_THREAD_FUNNELED: c_int = 1;
pub const MPI_THREAD_SERIALIZED: c_int = 2;
pub const MPI_THREAD_MULTIPLE: c_int = 3;
pub const MPI_GRAPH: c_int = 2;
pub const MPI_CART: c_int = 1;
pub const MPI_DIST_GRAPH: c_int = 3;
pub const MPI_MODE_NOCHECK: c_int = 1;
pub const MPI_MODE_NOSTORE: c_int = 8;
pub const MPI_MODE_NOPUT: c_int = 4;
pub const MPI_MODE_NOPRECEDE: c_int = 2;
pub const MPI_MODE_NOSUCCEED: c_int = 16;
pub const MPI_COMM_TYPE_SHARED: c_int = 0;
pub const MPI_WIN_FLAVOR_CREATE: c_int = 1;
pub const MPI_WIN_FLAVOR_ALLOCATE: c_int = 2;
pub const MPI_WIN_FLAVOR_DYNAMIC: c_int = 3;
pub const MPI_WIN_FLAVOR_SHARED: c_int = 4;
pub const MPI_ORDER_C: c_int = 0;
pub const MPI_ORDER_FORTRAN: c_int = 1;
pub const MPI_DISTRIBUTE_BLOCK: c_int = 0;
pub const MPI_DISTRIBUTE_CYCLIC: c_int = 1;
pub const MPI_DISTRIBUTE_NONE: c_int = 2;
pub const MPI_DISTRIBUTE_DFLT_DARG: c_int = -1;
pub const MPI_COMBINER_NAMED: c_int = 0;
pub const MPI_COMBINER_DUP: c_int = 1;
pub const MPI_COMBINER_CONTIGUOUS: c_int = 2;
pub const MPI_COMBINER_VECTOR: c_int = 3;
pub const MPI_COMBINER_HVECTOR: c_int = 5;
pub const MPI_COMBINER_INDEXED: c_int = 6;
pub const MPI_COMBINER_HINDEXED: c_int = 8;
pub const MPI_COMBINER_INDEXED_BLOCK: c_int = 9;
pub const MPI_COMBINER_STRUCT: c_int = 11;
pub const MPI_COMBINER_SUBARRAY: c_int = 12;
pub const MPI_COMBINER_DARRAY: c_int = 13;
pub const MPI_COMBINER_F90_REAL: c_int = 14;
pub const MPI_COMBINER_F90_COMPLEX: c_int = 15;
pub const MPI_COMBINER_F90_INTEGER: c_int = 16;
pub const MPI_COMBINER_RESIZED: c_int = 17;
pub const MPI_COMBINER_HINDEXED_BLOCK: c_int = 18;
pub const MPI_SUCCESS: c_int = 0;
pub const MPI_ERR_BUFFER: c_int = 1;
pub const MPI_ERR_COUNT: c_int = 2;
pub const MPI_ERR_TYPE: c_int = 3;
pub const MPI_ERR_TAG: c_int = 4;
pub const MPI_ERR_COMM: c_int = 5;
pub const MPI_ERR_RANK: c_int = 6;
pub const MPI_ERR_ROOT: c_int = 8;
pub const MPI_ERR_GROUP: c_int = 9;
pub const MPI_ERR_OP: c_int = 10;
pub const MPI_ERR_TOPOLOGY: c_int = 11;
pub const MPI_ERR_DIMS: c_int = 12;
pub const MPI_ERR_ARG: c_int = 13;
pub const MPI_ERR_UNKNOWN: c_int = 14;
pub const MPI_ERR_TRUNCATE: c_int = 15;
pub const MPI_ERR_OTHER: c_int = 16;
pub const MPI_ERR_INTERN: c_int = 17;
pub const MPI_ERR_IN_STATUS: c_int = 18;
pub const MPI_ERR_PENDING: c_int = 19;
pub const MPI_ERR_REQUEST: c_int = 7;
pub const MPI_ERR_INFO: c_int = 34;
pub const MPI_ERR_NO_MEM: c_int = 39;
pub const MPI_ERR_NOT_SAME: c_int = 40;
pub const MPI_ERR_UNSUPPORTED_OPERATION: c_int = 52;
pub const MPI_ERR_WIN: c_int = 53;
pub const MPI_ERR_BASE: c_int = 24;
pub const MPI_ERR_LOCKTYPE: c_int = 37;
pub const MPI_ERR_KEYVAL: c_int = 36;
pub const MPI_ERR_RMA_CONFLICT: c_int = 46;
pub const MPI_ERR_RMA_SYNC: c_int = 47;
pub const MPI_ERR_SIZE: c_int = 49;
pub const MPI_ERR_DISP: c_int = 26;
pub const MPI_ERR_ASSERT: c_int = 22;
pub const MPI_ERR_RMA_RANGE: c_int = 68;
pub const MPI_ERR_RMA_ATTACH: c_int = 69;
pub const MPI_ERR_RMA_SHARED: c_int = 71;
pub const MPI_ERR_RMA_FLAVOR: c_int = 70;
pub const MPI_MAX_LIBRARY_VERSION_STRING: usize = 256;
pub const MPI_MAX_OBJECT_NAME: usize = 64;
pub const MPI_MAX_ERROR_STRING: usize = 256;

pub const MPI_BOTTOM: *mut c_void = core::ptr::null_mut();
pub const MPI_IN_PLACE: *mut c_void = core::ptr::without_provenance_mut(1);
pub const MPI_STATUS_IGNORE: *mut MPI_Status = core::ptr::null_mut();
pub const MPI_STATUSES_IGNORE: *mut MPI_Status = core::ptr::null_mut();
pub const MPI_ERRCODES_IGNORE: *mut c_int = core::ptr::null_mut();
/// `((int *) 2)` and `((int *) 3)` in Open MPI's mpi.h.
pub const MPI_UNWEIGHTED: *mut c_int = 2usize as *mut c_int;
pub const MPI_WEIGHTS_EMPTY: *mut c_int = 3usize as *mut c_int;

/// Handles of the shim's own requests: Open MPI's requests are pointers to aligned
/// objects, so an address with the low bits `0b0011` is never one of them.
pub fn shim_request_handle(index: usize) -> MPI_Request {
    assert!(index < (1 << 40), "too many outstanding shim requests");
    (index << 4) | 0x3
}

/// The index of a shim request handle, `None` for any other handle.
#[inline]
pub fn shim_request_index(h: MPI_Request) -> Option<usize> {
    (h & 0xf == 0x3 && h < (1 << 44)).then_some(h >> 4)
}

/// Handles of schedule-local composite datatypes (`crate::core::sched`): low bits `0b0101`, never
/// the address of an Open MPI object.
pub fn composite_handle(index: usize) -> MPI_Datatype {
    assert!(
        index < (1 << 40),
        "too many composite datatypes in one schedule"
    );
    (index << 4) | 0x5
}

/// The index of a composite datatype handle, `None` for any other handle.
pub fn composite_index(dt: MPI_Datatype) -> Option<usize> {
    (dt & 0xf == 0x5 && dt < (1 << 44)).then_some(dt >> 4)
}

/// Recognises Open MPI's library version string.
pub fn library_is_compatible(version: &str, std_abi: Option<(c_int, c_int)>) -> bool {
    version.starts_with("Open MPI") && std_abi.is_none()
}

/// Sonames tried when no loaded object provides the MPI (`crate::platform::symbols`).
pub const MPI_LIBRARY_CANDIDATES: &[&str] = &["libmpi.so.40", "libmpi.so"];

pub const SUPPORTED_DESCRIPTION: &str = "the Open MPI ABI (Open MPI 4.x)";

/// Functions of the shim's table that Open MPI does not have as symbols, which a program
/// finds in the shim (mpi4py's binary wheel looks each one up at run time) and which need no
/// library support. The generated `PMPI_*` forwarders call these only when the library
/// lacks the symbol (so an Open MPI that has them is used).
#[allow(non_snake_case, clippy::too_many_arguments)]
pub mod absent {
    use core::ffi::c_char;

    use super::*;
    use crate::platform::api::pmpi;

    pub const MPI_T_ERR_NOT_INITIALIZED: c_int = 55;
    pub const MPI_T_ERR_INVALID_INDEX: c_int = 57;
    pub const MPI_T_ERR_INVALID_HANDLE: c_int = 59;
    pub const MPI_T_ERR_INVALID_NAME: c_int = 73;

    /// `MPI_Aint_add` (MPI-4.0 §5.1.5): on the flat address spaces Open MPI serves, the sum
    /// (mpi.h's own macro is `(MPI_Aint)((char *)(base) + (disp))`).
    pub unsafe fn PMPI_Aint_add(base: MPI_Aint, disp: MPI_Aint) -> MPI_Aint {
        base.wrapping_add(disp)
    }

    /// `MPI_Aint_diff`: the difference, as mpi.h's macro.
    pub unsafe fn PMPI_Aint_diff(addr1: MPI_Aint, addr2: MPI_Aint) -> MPI_Aint {
        addr1.wrapping_sub(addr2)
    }

    /// `MPI_Info_get_string` (MPI-4.0 §10) on MPI-3's `MPI_Info_get_valuelen` and
    /// `MPI_Info_get`, for Open MPI 4.1: `*buflen` on return is the value's length with its
    /// terminator; a shorter buffer gets the value truncated and terminated; a `*buflen`
    /// of 0 leaves `value` alone. The library checks the arguments (a NULL `buflen` is
    /// handed on as NULL so that it reports it).
    pub unsafe fn PMPI_Info_get_string(
        info: MPI_Info,
        key: *const c_char,
        buflen: *mut c_int,
        value: *mut c_char,
        flag: *mut c_int,
    ) -> c_int {
        let mut len: c_int = 0;
        let lenp = if buflen.is_null() {
            core::ptr::null_mut()
        } else {
            &mut len as *mut c_int
        };
        // SAFETY: the caller's arguments (checked by the library) and our out-pointer.
        let rc = unsafe { pmpi::PMPI_Info_get_valuelen(info, key, lenp, flag) };
        // SAFETY: `flag` was written by the successful call.
        if rc != MPI_SUCCESS || unsafe { *flag } == 0 {
            return rc;
        }
        // SAFETY: non-NULL (the library would have failed otherwise): the caller's in/out.
        let cap = unsafe { *buflen };
        if cap == 1 {
            // SAFETY: the caller's buffer of one character.
            unsafe { *value = 0 };
        } else if cap > 1 {
            // MPI_Info_get writes at most valuelen characters and a terminator
            // SAFETY: the caller's buffer of `cap` characters.
            let rc = unsafe { pmpi::PMPI_Info_get(info, key, cap - 1, value, flag) };
            if rc != MPI_SUCCESS {
                return rc;
            }
        }
        // SAFETY: as above.
        unsafe { *buflen = len.saturating_add(1) };
        MPI_SUCCESS
    }

    /// `MPI_Info_create_env` (MPI-4.0 §11.2.1) for Open MPI 4.1: a copy of `MPI_INFO_ENV`,
    /// the info MPI-3 already derives from how the processes were started (the standard
    /// leaves the values to the implementation). MPI-4 allows the call before MPI is
    /// initialized, which Open MPI 4.1's `MPI_Info_dup` does not: the error class for an
    /// operation the library cannot do then, not the abort that call would be.
    pub unsafe fn PMPI_Info_create_env(
        _argc: c_int,
        _argv: *mut *mut c_char,
        info: *mut MPI_Info,
    ) -> c_int {
        let (mut init, mut fin) = (0, 0);
        // SAFETY: our out-pointers (both calls are allowed at any time).
        unsafe {
            pmpi::PMPI_Initialized(&mut init);
            pmpi::PMPI_Finalized(&mut fin);
        }
        if init == 0 || fin != 0 {
            return crate::platform::errors::raise_unsupported(
                crate::platform::errors::Obj::None,
                "MPI_Info_create_env (before MPI_Init under this library)",
            );
        }
        // SAFETY: the predefined info and the caller's out-pointer (checked by the library).
        unsafe { pmpi::PMPI_Info_dup(MPI_INFO_ENV(), info) }
    }

    /// `MPI_SUCCESS` once the tool interface is initialized (the library's own answer to a
    /// call that needs it: `MPI_T_ERR_NOT_INITIALIZED` before `MPI_T_init_thread`), and
    /// the number of categories.
    fn tool_ready() -> Result<c_int, c_int> {
        let mut n: c_int = 0;
        // SAFETY: an out-pointer of ours.
        match unsafe { pmpi::PMPI_T_category_get_num(&mut n) } {
            MPI_SUCCESS => Ok(n),
            rc => Err(rc),
        }
    }

    /// The answer for a call naming event or source `_index` of a library with none:
    /// `MPI_T_ERR_INVALID_INDEX` (MPI-4.0 §15.3.8), once the interface is initialized.
    fn no_such_index() -> c_int {
        tool_ready().err().unwrap_or(MPI_T_ERR_INVALID_INDEX)
    }

    /// A registration or event instance cannot exist without events: every handle is
    /// invalid.
    fn no_such_handle() -> c_int {
        tool_ready().err().unwrap_or(MPI_T_ERR_INVALID_HANDLE)
    }

    /// Writes `v` through `p` if it is not NULL.
    ///
    /// # Safety
    /// `p` must be NULL or valid for a write.
    unsafe fn put(p: *mut c_int, v: c_int) {
        if !p.is_null() {
            // SAFETY: the caller's valid out-pointer.
            unsafe { *p = v };
        }
    }

    /// `MPI_T_event_get_num`: no event types.
    pub unsafe fn PMPI_T_event_get_num(num: *mut c_int) -> c_int {
        match tool_ready() {
            // SAFETY: the caller's out-pointer.
            Ok(_) => unsafe {
                put(num, 0);
                MPI_SUCCESS
            },
            Err(rc) => rc,
        }
    }

    /// `MPI_T_source_get_num`: no sources.
    pub unsafe fn PMPI_T_source_get_num(num: *mut c_int) -> c_int {
        // SAFETY: as above.
        unsafe { PMPI_T_event_get_num(num) }
    }

    /// `MPI_T_category_get_num_events`: no category holds an event; a category index out
    /// of range is `MPI_T_ERR_INVALID_INDEX`.
    pub unsafe fn PMPI_T_category_get_num_events(cat_index: c_int, num: *mut c_int) -> c_int {
        match tool_ready() {
            Ok(n) if (0..n).contains(&cat_index) => {
                // SAFETY: the caller's out-pointer.
                unsafe { put(num, 0) };
                MPI_SUCCESS
            }
            Ok(_) => MPI_T_ERR_INVALID_INDEX,
            Err(rc) => rc,
        }
    }

    /// `MPI_T_category_get_events`: nothing to write.
    pub unsafe fn PMPI_T_category_get_events(
        cat_index: c_int,
        _len: c_int,
        _indices: *mut c_int,
    ) -> c_int {
        let mut n = 0;
        // SAFETY: an out-pointer of ours.
        unsafe { PMPI_T_category_get_num_events(cat_index, &mut n) }
    }

    /// `MPI_T_event_get_index`: no event has a name.
    pub unsafe fn PMPI_T_event_get_index(_name: *const c_char, _index: *mut c_int) -> c_int {
        tool_ready().err().unwrap_or(MPI_T_ERR_INVALID_NAME)
    }

    pub unsafe fn PMPI_T_event_get_info(
        _event_index: c_int,
        _name: *mut c_char,
        _name_len: *mut c_int,
        _verbosity: *mut c_int,
        _types: *mut MPI_Datatype,
        _displs: *mut MPI_Aint,
        _num_elements: *mut c_int,
        _enumtype: *mut *mut c_void,
        _info: *mut MPI_Info,
        _desc: *mut c_char,
        _desc_len: *mut c_int,
        _bind: *mut c_int,
    ) -> c_int {
        no_such_index()
    }

    pub unsafe fn PMPI_T_event_handle_alloc(
        _event_index: c_int,
        _obj_handle: *mut c_void,
        _info: MPI_Info,
        _registration: *mut *mut c_void,
    ) -> c_int {
        no_such_index()
    }

    pub unsafe fn PMPI_T_source_get_info(
        _source_index: c_int,
        _name: *mut c_char,
        _name_len: *mut c_int,
        _desc: *mut c_char,
        _desc_len: *mut c_int,
        _ordering: *mut c_int,
        _ticks_per_second: *mut MPI_Count,
        _max_ticks: *mut MPI_Count,
        _info: *mut MPI_Info,
    ) -> c_int {
        no_such_index()
    }

    pub unsafe fn PMPI_T_source_get_timestamp(
        _source_index: c_int,
        _timestamp: *mut MPI_Count,
    ) -> c_int {
        no_such_index()
    }

    pub unsafe fn PMPI_T_event_handle_free(
        _registration: *mut c_void,
        _user_data: *mut c_void,
        _free_cb: *mut c_void,
    ) -> c_int {
        no_such_handle()
    }

    pub unsafe fn PMPI_T_event_handle_get_info(
        _registration: *mut c_void,
        _info_used: *mut MPI_Info,
    ) -> c_int {
        no_such_handle()
    }

    pub unsafe fn PMPI_T_event_handle_set_info(
        _registration: *mut c_void,
        _info: MPI_Info,
    ) -> c_int {
        no_such_handle()
    }

    pub unsafe fn PMPI_T_event_callback_get_info(
        _registration: *mut c_void,
        _cb_safety: c_int,
        _info_used: *mut MPI_Info,
    ) -> c_int {
        no_such_handle()
    }

    pub unsafe fn PMPI_T_event_callback_set_info(
        _registration: *mut c_void,
        _cb_safety: c_int,
        _info: MPI_Info,
    ) -> c_int {
        no_such_handle()
    }

    pub unsafe fn PMPI_T_event_register_callback(
        _registration: *mut c_void,
        _cb_safety: c_int,
        _info: MPI_Info,
        _user_data: *mut c_void,
        _cb: *mut c_void,
    ) -> c_int {
        no_such_handle()
    }

    pub unsafe fn PMPI_T_event_set_dropped_handler(
        _registration: *mut c_void,
        _cb: *mut c_void,
    ) -> c_int {
        no_such_handle()
    }

    pub unsafe fn PMPI_T_event_copy(_instance: *mut c_void, _buffer: *mut c_void) -> c_int {
        no_such_handle()
    }

    pub unsafe fn PMPI_T_event_read(
        _instance: *mut c_void,
        _element_index: c_int,
        _buffer: *mut c_void,
    ) -> c_int {
        no_such_handle()
    }

    pub unsafe fn PMPI_T_event_get_source(
        _instance: *mut c_void,
        _source_index: *mut c_int,
    ) -> c_int {
        no_such_handle()
    }

    pub unsafe fn PMPI_T_event_get_timestamp(
        _instance: *mut c_void,
        _timestamp: *mut MPI_Count,
    ) -> c_int {
        no_such_handle()
    }
}

/// Large-count functions the shim uses internally whose classic form has another shape,
/// built on the classic calls for an Open MPI without `_c` symbols (4.x). The generated
/// `PMPI_*_c` forwarders call these only when the library lacks the symbol.
#[allow(non_snake_case)]
pub mod large_count {
    use super::*;
    use crate::platform::api::pmpi;

    /// `MPI_Type_get_envelope_c`: classic envelopes never have large counts.
    ///
    /// # Safety
    /// The out-pointers must be valid.
    pub unsafe fn PMPI_Type_get_envelope_c(
        dt: MPI_Datatype,
        ni: *mut MPI_Count,
        na: *mut MPI_Count,
        nl: *mut MPI_Count,
        nd: *mut MPI_Count,
        combiner: *mut c_int,
    ) -> c_int {
        let (mut i, mut a, mut d) = (0, 0, 0);
        // SAFETY: valid out-pointers (ours and the caller's).
        unsafe {
            let rc = pmpi::PMPI_Type_get_envelope(dt, &mut i, &mut a, &mut d, combiner);
            *ni = i as MPI_Count;
            *na = a as MPI_Count;
            *nl = 0;
            *nd = d as MPI_Count;
            rc
        }
    }

    /// `MPI_Op_create_c` on `MPI_Op_create`. The user function has the large-count
    /// prototype (`MPI_User_function_c`, MPI-4.0 §6.9.5: `MPI_Count *len`); the library
    /// calls the classic one (`int *len`), so registering it as it is would make it read an
    /// `MPI_Count` from the library's `int` (a garbage length). The library gets instead
    /// a trampoline of the classic prototype that widens the length and calls the user's
    /// function (see [`user_fn_c`]). `MPI_ERR_INTERN`, raised on the world's handler (no
    /// object), when every trampoline is taken.
    ///
    /// # Safety
    /// `user_fn` must be an `MPI_User_function_c` (or NULL, which the library rejects);
    /// `op` must be valid.
    pub unsafe fn PMPI_Op_create_c(user_fn: *mut c_void, commute: c_int, op: *mut MPI_Op) -> c_int {
        let f = if user_fn.is_null() {
            // the library reports the NULL function itself
            core::ptr::null_mut()
        } else {
            match user_fn_c::trampoline(user_fn) {
                Some(t) => t as *mut c_void,
                None => {
                    return crate::platform::errors::raise_no_object(
                        MPI_ERR_INTERN,
                        "MPI_Op_create_c",
                        "no trampoline left for another large-count user function (128 at most)",
                    );
                }
            }
        };
        // SAFETY: a function of the classic prototype and the caller's out-pointer.
        unsafe { pmpi::PMPI_Op_create(f, commute, op) }
    }

    /// A caller's array converted for the classic call. A NULL array stays NULL, so that
    /// the library reports it as it would the application's own call.
    struct Arr<T>(Option<Vec<T>>);

    impl<T> Arr<T> {
        fn ptr(&self) -> *const T {
            self.0.as_ref().map_or(core::ptr::null(), |v| v.as_ptr())
        }
    }

    /// The caller's `n` counts at `p` as `int`s (`None` if one does not fit); no elements
    /// when `n` is not positive, whatever `p` is (a zero-length array may be NULL).
    ///
    /// # Safety
    /// `p` must be NULL or point to `n` elements when `n > 0`.
    unsafe fn narrow(p: *const MPI_Count, n: c_int) -> Option<Arr<c_int>> {
        if p.is_null() {
            return Some(Arr(None));
        }
        if n <= 0 {
            return Some(Arr(Some(Vec::new())));
        }
        // SAFETY: the caller's array of n counts.
        let v = unsafe { core::slice::from_raw_parts(p, n as usize) };
        v.iter()
            .map(|&x| c_int::try_from(x).ok())
            .collect::<Option<Vec<c_int>>>()
            .map(|v| Arr(Some(v)))
    }

    /// The caller's `n` displacements at `p` as `MPI_Aint`s (the same 64 bits here).
    ///
    /// # Safety
    /// `p` must be NULL or point to `n` elements when `n > 0`.
    unsafe fn addresses(p: *const MPI_Count, n: c_int) -> Arr<MPI_Aint> {
        if p.is_null() {
            return Arr(None);
        }
        // SAFETY: the caller's array of n displacements.
        let v = unsafe { core::slice::from_raw_parts(p, n.max(0) as usize) };
        Arr(Some(v.iter().map(|&x| x as MPI_Aint).collect()))
    }

    /// A count argument as an `int`, or `MPI_ERR_COUNT` from the caller.
    macro_rules! int_or_count_error {
        ($e:expr) => {
            match $e {
                Some(v) => v,
                None => return MPI_ERR_COUNT,
            }
        };
    }

    /// `MPI_Type_contiguous_c` on the classic calls. A count beyond an `int` becomes a
    /// struct of `q` blocks of `INT_MAX` elements (a vector) and the `r` left (a contiguous
    /// type) at the displacement where the blocks end: the same type map, as BigMPI
    /// (Hammond et al., ExaMPI 2014) and mpi4py's own fallback build it, so a program gets
    /// the same type whether the shim is there or not.
    ///
    /// # Safety
    /// `newtype` must be valid.
    pub unsafe fn PMPI_Type_contiguous_c(
        count: MPI_Count,
        oldtype: MPI_Datatype,
        newtype: *mut MPI_Datatype,
    ) -> c_int {
        if let Ok(n) = c_int::try_from(count) {
            // SAFETY: the caller's arguments.
            return unsafe { pmpi::PMPI_Type_contiguous(n, oldtype, newtype) };
        }
        let block = c_int::MAX as MPI_Count;
        let (Ok(q), r) = (c_int::try_from(count / block), (count % block) as c_int) else {
            return MPI_ERR_COUNT;
        };
        let (mut lb, mut extent): (MPI_Aint, MPI_Aint) = (0, 0);
        let mut parts = [MPI_DATATYPE_NULL(); 2];
        // SAFETY: the classic calls on the caller's old type and our own out-pointers.
        unsafe {
            let mut rc = pmpi::PMPI_Type_vector(q, c_int::MAX, c_int::MAX, oldtype, &mut parts[0]);
            if rc == MPI_SUCCESS {
                rc = pmpi::PMPI_Type_contiguous(r, oldtype, &mut parts[1]);
            }
            if rc == MPI_SUCCESS {
                rc = pmpi::PMPI_Type_get_extent(oldtype, &mut lb, &mut extent);
            }
            if rc == MPI_SUCCESS {
                let blocklengths: [c_int; 2] = [1, 1];
                let displs: [MPI_Aint; 2] = [0, (q as MPI_Aint) * (block as MPI_Aint) * extent];
                rc = pmpi::PMPI_Type_create_struct(
                    2,
                    blocklengths.as_ptr(),
                    displs.as_ptr(),
                    parts.as_ptr(),
                    newtype,
                );
            }
            for t in &mut parts {
                if *t != MPI_DATATYPE_NULL() {
                    pmpi::PMPI_Type_free(t);
                }
            }
            rc
        }
    }

    /// `MPI_Type_create_struct_c` on `MPI_Type_create_struct` (block lengths must fit in
    /// an `int`).
    ///
    /// # Safety
    /// The arrays must hold `count` elements; `newtype` must be valid.
    pub unsafe fn PMPI_Type_create_struct_c(
        count: MPI_Count,
        blocklengths: *const MPI_Count,
        displs: *const MPI_Count,
        types: *const MPI_Datatype,
        newtype: *mut MPI_Datatype,
    ) -> c_int {
        let n = int_or_count_error!(c_int::try_from(count).ok());
        // SAFETY: the caller's arrays of count elements.
        let (bl, dp) = unsafe {
            (
                int_or_count_error!(narrow(blocklengths, n)),
                addresses(displs, n),
            )
        };
        // SAFETY: arrays of n elements (or NULL) and the caller's type array and out-pointer.
        unsafe { pmpi::PMPI_Type_create_struct(n, bl.ptr(), dp.ptr(), types, newtype) }
    }

    /// `MPI_Type_indexed_c` on `MPI_Type_indexed` (every count must fit in an `int`,
    /// else `MPI_ERR_COUNT`, as in every classic fallback here).
    ///
    /// # Safety
    /// The arrays must hold `count` elements; `newtype` must be valid.
    pub unsafe fn PMPI_Type_indexed_c(
        count: MPI_Count,
        blocklengths: *const MPI_Count,
        displs: *const MPI_Count,
        oldtype: MPI_Datatype,
        newtype: *mut MPI_Datatype,
    ) -> c_int {
        let n = int_or_count_error!(c_int::try_from(count).ok());
        // SAFETY: the caller's arrays of count elements.
        let (bl, dp) = unsafe {
            (
                int_or_count_error!(narrow(blocklengths, n)),
                int_or_count_error!(narrow(displs, n)),
            )
        };
        // SAFETY: arrays of n elements (or none) and the caller's out-pointer.
        unsafe { pmpi::PMPI_Type_indexed(n, bl.ptr(), dp.ptr(), oldtype, newtype) }
    }

    /// `MPI_Type_create_indexed_block_c` on `MPI_Type_create_indexed_block`.
    ///
    /// # Safety
    /// `displs` must hold `count` elements; `newtype` must be valid.
    pub unsafe fn PMPI_Type_create_indexed_block_c(
        count: MPI_Count,
        blocklength: MPI_Count,
        displs: *const MPI_Count,
        oldtype: MPI_Datatype,
        newtype: *mut MPI_Datatype,
    ) -> c_int {
        let n = int_or_count_error!(c_int::try_from(count).ok());
        let b = int_or_count_error!(c_int::try_from(blocklength).ok());
        // SAFETY: the caller's array of count elements.
        let dp = unsafe { int_or_count_error!(narrow(displs, n)) };
        // SAFETY: an array of n elements (or none) and the caller's out-pointer.
        unsafe { pmpi::PMPI_Type_create_indexed_block(n, b, dp.ptr(), oldtype, newtype) }
    }

    /// `MPI_Type_create_hindexed_c` on `MPI_Type_create_hindexed`.
    ///
    /// # Safety
    /// The arrays must hold `count` elements; `newtype` must be valid.
    pub unsafe fn PMPI_Type_create_hindexed_c(
        count: MPI_Count,
        blocklengths: *const MPI_Count,
        displs: *const MPI_Count,
        oldtype: MPI_Datatype,
        newtype: *mut MPI_Datatype,
    ) -> c_int {
        let n = int_or_count_error!(c_int::try_from(count).ok());
        // SAFETY: the caller's arrays of count elements.
        let (bl, dp) = unsafe {
            (
                int_or_count_error!(narrow(blocklengths, n)),
                addresses(displs, n),
            )
        };
        // SAFETY: arrays of n elements (or none) and the caller's out-pointer.
        unsafe { pmpi::PMPI_Type_create_hindexed(n, bl.ptr(), dp.ptr(), oldtype, newtype) }
    }

    /// `MPI_Type_create_hindexed_block_c` on `MPI_Type_create_hindexed_block`.
    ///
    /// # Safety
    /// `displs` must hold `count` elements; `newtype` must be valid.
    pub unsafe fn PMPI_Type_create_hindexed_block_c(
        count: MPI_Count,
        blocklength: MPI_Count,
        displs: *const MPI_Count,
        oldtype: MPI_Datatype,
        newtype: *mut MPI_Datatype,
    ) -> c_int {
        let n = int_or_count_error!(c_int::try_from(count).ok());
        let b = int_or_count_error!(c_int::try_from(blocklength).ok());
        // SAFETY: the caller's array of count elements.
        let dp = unsafe { addresses(displs, n) };
        // SAFETY: an array of n elements (or none) and the caller's out-pointer.
        unsafe { pmpi::PMPI_Type_create_hindexed_block(n, b, dp.ptr(), oldtype, newtype) }
    }

    /// `MPI_Type_create_subarray_c` on `MPI_Type_create_subarray`.
    ///
    /// # Safety
    /// The arrays must hold `ndims` elements; `newtype` must be valid.
    pub unsafe fn PMPI_Type_create_subarray_c(
        ndims: c_int,
        sizes: *const MPI_Count,
        subsizes: *const MPI_Count,
        starts: *const MPI_Count,
        order: c_int,
        oldtype: MPI_Datatype,
        newtype: *mut MPI_Datatype,
    ) -> c_int {
        // SAFETY: the caller's arrays of ndims elements.
        let (sz, sub, st) = unsafe {
            (
                int_or_count_error!(narrow(sizes, ndims)),
                int_or_count_error!(narrow(subsizes, ndims)),
                int_or_count_error!(narrow(starts, ndims)),
            )
        };
        // SAFETY: arrays of ndims elements (or none) and the caller's out-pointer.
        unsafe {
            pmpi::PMPI_Type_create_subarray(
                ndims,
                sz.ptr(),
                sub.ptr(),
                st.ptr(),
                order,
                oldtype,
                newtype,
            )
        }
    }

    /// `MPI_Type_create_darray_c` on `MPI_Type_create_darray` (only the global sizes are
    /// large counts).
    ///
    /// # Safety
    /// The arrays must hold `ndims` elements; `newtype` must be valid.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn PMPI_Type_create_darray_c(
        size: c_int,
        rank: c_int,
        ndims: c_int,
        gsizes: *const MPI_Count,
        distribs: *const c_int,
        dargs: *const c_int,
        psizes: *const c_int,
        order: c_int,
        oldtype: MPI_Datatype,
        newtype: *mut MPI_Datatype,
    ) -> c_int {
        // SAFETY: the caller's array of ndims elements.
        let g = unsafe { int_or_count_error!(narrow(gsizes, ndims)) };
        // SAFETY: an array of ndims elements (or none), the caller's others and out-pointer.
        unsafe {
            pmpi::PMPI_Type_create_darray(
                size,
                rank,
                ndims,
                g.ptr(),
                distribs,
                dargs,
                psizes,
                order,
                oldtype,
                newtype,
            )
        }
    }

    /// `MPI_Type_get_contents_c` on `MPI_Type_get_contents`: a type built by the classic
    /// calls has no large counts (its `MPI_Type_get_envelope_c` says 0), so the large-count
    /// array is left alone.
    ///
    /// # Safety
    /// The arrays must hold the given maximum numbers of elements.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn PMPI_Type_get_contents_c(
        dt: MPI_Datatype,
        max_integers: MPI_Count,
        max_addresses: MPI_Count,
        _max_large_counts: MPI_Count,
        max_datatypes: MPI_Count,
        integers: *mut c_int,
        addrs: *mut MPI_Aint,
        _large_counts: *mut MPI_Count,
        types: *mut MPI_Datatype,
    ) -> c_int {
        // (a maximum beyond an int is more room than any classic envelope asks for)
        let clamp = |m: MPI_Count| m.clamp(0, c_int::MAX as MPI_Count) as c_int;
        // SAFETY: the caller's arrays, at most as long as it says.
        unsafe {
            pmpi::PMPI_Type_get_contents(
                dt,
                clamp(max_integers),
                clamp(max_addresses),
                clamp(max_datatypes),
                integers,
                addrs,
                types,
            )
        }
    }

    /// Trampolines of the classic `MPI_User_function` prototype for the user functions of
    /// `MPI_Op_create_c` (large counts): the library calls a user operation with no
    /// argument that says which operation it is, so each distinct user function gets its
    /// own trampoline, whose slot holds it. Slots are keyed by the function, not the
    /// operation, and never released: a program has finitely many functions, and an
    /// operation created again with the same function reuses its slot.
    pub mod user_fn_c {
        use core::sync::atomic::{AtomicPtr, Ordering};

        use super::*;
        use crate::platform::abi::MPI_User_function;

        /// `MPI_User_function_c` (MPI-4.0 §6.9.5).
        type UserFnC =
            unsafe extern "C" fn(*mut c_void, *mut c_void, *mut MPI_Count, *mut MPI_Datatype);

        /// Distinct large-count user functions a process can register.
        pub const SLOTS: usize = 128;

        static FNS: [AtomicPtr<c_void>; SLOTS] =
            [const { AtomicPtr::new(core::ptr::null_mut()) }; SLOTS];

        /// Trampoline `I`: widens the library's `int` length and calls slot `I`'s function.
        unsafe extern "C" fn tramp<const I: usize>(
            invec: *mut c_void,
            inoutvec: *mut c_void,
            len: *mut c_int,
            datatype: *mut MPI_Datatype,
        ) {
            let f = FNS[I].load(Ordering::Acquire);
            if f.is_null() || len.is_null() {
                return;
            }
            // SAFETY: the library passes a valid length; slot I holds an
            // `MPI_User_function_c` (set before the trampoline was handed out).
            unsafe {
                let mut n = *len as MPI_Count;
                let f: UserFnC = core::mem::transmute::<*mut c_void, UserFnC>(f);
                f(invec, inoutvec, &mut n, datatype);
            }
        }

        macro_rules! table {
            ($($i:literal)*) => { [$(tramp::<$i> as MPI_User_function),*] };
        }
        static TRAMPS: [MPI_User_function; SLOTS] = table!(
            0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30 31
            32 33 34 35 36 37 38 39 40 41 42 43 44 45 46 47 48 49 50 51 52 53 54 55 56 57 58 59
            60 61 62 63 64 65 66 67 68 69 70 71 72 73 74 75 76 77 78 79 80 81 82 83 84 85 86 87
            88 89 90 91 92 93 94 95 96 97 98 99 100 101 102 103 104 105 106 107 108 109 110 111
            112 113 114 115 116 117 118 119 120 121 122 123 124 125 126 127
        );

        /// The trampoline for user function `f` (its slot, or a free one); `None` when all
        /// slots hold other functions.
        pub fn trampoline(f: *mut c_void) -> Option<MPI_User_function> {
            for (i, slot) in FNS.iter().enumerate() {
                match slot.compare_exchange(
                    core::ptr::null_mut(),
                    f,
                    Ordering::AcqRel,
                    Ordering::Acquire,
                ) {
                    Ok(_) => return Some(TRAMPS[i]),
                    Err(held) if held == f => return Some(TRAMPS[i]),
                    Err(_) => {}
                }
            }
            None
        }

        #[cfg(test)]
        mod tests {
            use super::*;

            static SEEN: AtomicPtr<c_void> = AtomicPtr::new(core::ptr::null_mut());

            unsafe extern "C" fn add_c(
                a: *mut c_void,
                b: *mut c_void,
                len: *mut MPI_Count,
                _dt: *mut MPI_Datatype,
            ) {
                // SAFETY: the test passes arrays of `*len` i64.
                unsafe {
                    let (a, b) = (a as *const i64, b as *mut i64);
                    for i in 0..*len as usize {
                        *b.add(i) += *a.add(i);
                    }
                }
                SEEN.store(len.cast(), Ordering::Relaxed);
            }

            #[test]
            fn a_trampoline_widens_the_length_for_a_large_count_function() {
                let f = add_c as *mut c_void;
                let t = trampoline(f).expect("a free slot");
                // the same function gets the same trampoline
                assert_eq!(trampoline(f).map(|g| g as usize), Some(t as usize));
                let a = [1i64, 2, 3];
                let mut b = [10i64, 20, 30];
                // an int length next to garbage: a callee reading 8 bytes would see it
                #[repr(C)]
                struct Len {
                    n: c_int,
                    junk: c_int,
                }
                let mut len = Len { n: 3, junk: -1 };
                let mut dt: MPI_Datatype = unsafe { core::mem::zeroed() };
                // SAFETY: arrays of 3 i64 and a valid length and datatype.
                unsafe {
                    t(
                        a.as_ptr() as *mut c_void,
                        b.as_mut_ptr().cast(),
                        &mut len.n,
                        &mut dt,
                    )
                };
                assert_eq!(b, [11, 22, 33]);
                assert!(!SEEN.load(Ordering::Relaxed).is_null());
            }
        }
    }
}

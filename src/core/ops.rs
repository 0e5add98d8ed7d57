//! Layer: core. May use: platform.
//!
//! Local reductions `inout = in op inout` (the `MPI_Reduce_local` contract, MPI-4.0
//! §6.9.7): Rust kernels for the predefined operations on the predefined C types, written
//! as plain element loops the compiler vectorizes, and `PMPI_Reduce_local` for everything
//! else (user operations, derived datatypes, long double, Fortran logicals, ...).
//!
//! The kernels reproduce MPICH's element rules so that results are bit-identical where
//! the combination order is the same: `MAX(a, b) = a > b ? a : b` with `a` the input
//! element, MINLOC/MAXLOC keep the lower index on ties, integer arithmetic wraps, logical
//! operations yield 0 or 1.
//!
//! Which (operation, datatype) pairs are valid follows what the system MPI accepts (the
//! MPI-4.0 §6.9.2 table, plus MPICH's extensions: integer operations on `MPI_CHAR`,
//! logical operations on Fortran reals), except pairs on which MPICH crashes instead of
//! reporting an error: those are rejected with `MPI_ERR_OP`. MPICH also rejects every
//! predefined operation on a derived datatype (even a duplicate of `MPI_INT`), and so does
//! the shim.

use core::ffi::{c_int, c_void};

use crate::platform::abi::*;
use crate::platform::mpi::dtype as mpi_dtype;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Class {
    /// C and Fortran integers, `MPI_CHAR`, the multi-language types.
    Int,
    Byte,
    CFloat,
    FortranReal,
    Logical,
    Complex,
    Pair,
    /// Predefined, but no predefined operation applies (`MPI_WCHAR`, `MPI_PACKED`, ...).
    None,
}

fn class_of(dt: MPI_Datatype) -> Option<Class> {
    use Class::*;
    let Some(d) = Dt::of(dt) else {
        return if is_predefined_datatype(dt) {
            Some(Class::None)
        } else {
            Option::None
        };
    };
    Some(match d {
        Dt::CHAR
        | Dt::SIGNED_CHAR
        | Dt::UNSIGNED_CHAR
        | Dt::CHARACTER
        | Dt::SHORT
        | Dt::UNSIGNED_SHORT
        | Dt::INT
        | Dt::UNSIGNED
        | Dt::LONG
        | Dt::UNSIGNED_LONG
        | Dt::LONG_LONG
        | Dt::UNSIGNED_LONG_LONG
        | Dt::INT8_T
        | Dt::INT16_T
        | Dt::INT32_T
        | Dt::INT64_T
        | Dt::UINT8_T
        | Dt::UINT16_T
        | Dt::UINT32_T
        | Dt::UINT64_T
        | Dt::INTEGER
        | Dt::INTEGER1
        | Dt::INTEGER2
        | Dt::INTEGER4
        | Dt::INTEGER8
        | Dt::AINT
        | Dt::OFFSET
        | Dt::COUNT => Int,
        Dt::BYTE => Byte,
        Dt::FLOAT | Dt::DOUBLE | Dt::LONG_DOUBLE => CFloat,
        Dt::REAL | Dt::DOUBLE_PRECISION | Dt::REAL4 | Dt::REAL8 | Dt::REAL16 => FortranReal,
        Dt::C_BOOL | Dt::CXX_BOOL | Dt::LOGICAL => Logical,
        Dt::COMPLEX
        | Dt::DOUBLE_COMPLEX
        | Dt::C_FLOAT_COMPLEX
        | Dt::C_DOUBLE_COMPLEX
        | Dt::C_LONG_DOUBLE_COMPLEX
        | Dt::CXX_FLOAT_COMPLEX
        | Dt::CXX_DOUBLE_COMPLEX
        | Dt::CXX_LONG_DOUBLE_COMPLEX
        | Dt::COMPLEX8
        | Dt::COMPLEX16
        | Dt::COMPLEX32 => Complex,
        Dt::FLOAT_INT
        | Dt::DOUBLE_INT
        | Dt::LONG_INT
        | Dt::SHORT_INT
        | Dt::TWO_INT
        | Dt::LONG_DOUBLE_INT
        | Dt::TWO_INTEGER
        | Dt::TWO_REAL
        | Dt::TWO_DOUBLE_PRECISION => Pair,
    })
}

/// Checks a reduction's operation against its datatype. `Err(class)` for a pair the
/// system MPI rejects (or crashes on). User operations accept any datatype.
pub fn check(op: MPI_Op, dt: MPI_Datatype) -> Result<(), c_int> {
    if LAST_VALID.get() == Some((op, dt)) {
        return Ok(());
    }
    let r = check_uncached(op, dt);
    if r.is_ok() && is_builtin_op(op) {
        // a predefined operation accepts only predefined datatypes: both handles are
        // permanent, so the verdict is too
        LAST_VALID.set(Some((op, dt)));
    }
    r
}

thread_local! {
    /// The last (predefined operation, datatype) pair found valid on this thread: most
    /// programs reduce one or two pairs, and the full check was a sixth of the per-call
    /// cost of a small reduction handed to the system MPI.
    static LAST_VALID: core::cell::Cell<Option<(MPI_Op, MPI_Datatype)>> =
        const { core::cell::Cell::new(None) };
}

fn check_uncached(op: MPI_Op, dt: MPI_Datatype) -> Result<(), c_int> {
    if op == MPI_OP_NULL() || crate::core::retain::is_freed_op(op) {
        return Err(MPI_ERR_OP);
    }
    if !is_builtin_op(op) {
        // a user operation: the system MPI knows whether the handle is one (it returns
        // errors here: the real world's handler is MPI_ERRORS_RETURN, src/errors.rs)
        return match mpi_dtype::op_commutative(op) {
            Ok(_) => Ok(()),
            Err(_) => Err(MPI_ERR_OP),
        };
    }
    if op == MPI_REPLACE() || op == MPI_NO_OP() {
        // valid only for RMA accumulate operations (MPI-4.0 §12.3.4)
        return Err(MPI_ERR_OP);
    }
    let Some(class) = class_of(dt) else {
        return Err(MPI_ERR_OP);
    };
    use Class::*;
    let Some(k) = Op::of(op) else {
        return Err(MPI_ERR_OP);
    };
    let ok = match k {
        Op::MAX | Op::MIN => matches!(class, Int | CFloat | FortranReal),
        Op::SUM | Op::PROD => matches!(class, Int | CFloat | FortranReal | Complex),
        Op::LAND | Op::LOR => matches!(class, Int | FortranReal | Logical),
        Op::LXOR => matches!(class, Int | CFloat | FortranReal | Logical),
        Op::BAND | Op::BOR | Op::BXOR => matches!(class, Int | Byte),
        Op::MINLOC | Op::MAXLOC => class == Pair,
        _ => false,
    };
    if ok { Ok(()) } else { Err(MPI_ERR_OP) }
}

/// Whether `op` is commutative (predefined operations all are, MPI-4.0 §6.9.2).
/// Whether the system MPI computes `op` on `dt` right. Debian's MPICH 4.0.2 compares
/// unsigned integers as signed in `MPI_MAX` and `MPI_MIN` (every reduction, every process
/// count: the maximum of 0x7ffffff9 and 0x80000000 comes out as 0x7ffffff9; README,
/// "Problems of the system MPI"), so those reductions run on the shim's kernels.
pub fn native_trusted(op: MPI_Op, dt: MPI_Datatype) -> bool {
    let min_max = matches!(Op::of(op), Some(Op::MAX | Op::MIN));
    let unsigned = matches!(
        Dt::of(dt),
        Some(
            Dt::UNSIGNED_CHAR
                | Dt::UNSIGNED_SHORT
                | Dt::UNSIGNED
                | Dt::UNSIGNED_LONG
                | Dt::UNSIGNED_LONG_LONG
                | Dt::UINT8_T
                | Dt::UINT16_T
                | Dt::UINT32_T
                | Dt::UINT64_T
        )
    );
    !(min_max && unsigned)
}

pub fn commutative(op: MPI_Op) -> bool {
    if is_builtin_op(op) {
        return true;
    }
    // an error leaves the operation commutative, as the unwritten flag did
    mpi_dtype::op_commutative(op).unwrap_or(true)
}

macro_rules! int_kernel {
    ($t:ty, $op:expr, $a:expr, $b:expr, $n:expr) => {{
        // SAFETY: the caller checked alignment and that both buffers hold n elements.
        let a = unsafe { core::slice::from_raw_parts($a as *const $t, $n) };
        let b = unsafe { core::slice::from_raw_parts_mut($b as *mut $t, $n) };
        match $op {
            Op::SUM => b
                .iter_mut()
                .zip(a)
                .for_each(|(y, x)| *y = x.wrapping_add(*y)),
            Op::PROD => b
                .iter_mut()
                .zip(a)
                .for_each(|(y, x)| *y = x.wrapping_mul(*y)),
            Op::MAX => b
                .iter_mut()
                .zip(a)
                .for_each(|(y, x)| *y = if *x > *y { *x } else { *y }),
            Op::MIN => b
                .iter_mut()
                .zip(a)
                .for_each(|(y, x)| *y = if *x < *y { *x } else { *y }),
            Op::BAND => b.iter_mut().zip(a).for_each(|(y, x)| *y &= *x),
            Op::BOR => b.iter_mut().zip(a).for_each(|(y, x)| *y |= *x),
            Op::BXOR => b.iter_mut().zip(a).for_each(|(y, x)| *y ^= *x),
            Op::LAND => b
                .iter_mut()
                .zip(a)
                .for_each(|(y, x)| *y = ((*x != 0) && (*y != 0)) as $t),
            Op::LOR => b
                .iter_mut()
                .zip(a)
                .for_each(|(y, x)| *y = ((*x != 0) || (*y != 0)) as $t),
            Op::LXOR => b
                .iter_mut()
                .zip(a)
                .for_each(|(y, x)| *y = ((*x != 0) != (*y != 0)) as $t),
            _ => return false,
        }
        true
    }};
}

macro_rules! float_kernel {
    ($t:ty, $op:expr, $a:expr, $b:expr, $n:expr) => {{
        // SAFETY: as for int_kernel.
        let a = unsafe { core::slice::from_raw_parts($a as *const $t, $n) };
        let b = unsafe { core::slice::from_raw_parts_mut($b as *mut $t, $n) };
        match $op {
            Op::SUM => b.iter_mut().zip(a).for_each(|(y, x)| *y += *x),
            Op::PROD => b.iter_mut().zip(a).for_each(|(y, x)| *y *= *x),
            Op::MAX => b
                .iter_mut()
                .zip(a)
                .for_each(|(y, x)| *y = if *x > *y { *x } else { *y }),
            Op::MIN => b
                .iter_mut()
                .zip(a)
                .for_each(|(y, x)| *y = if *x < *y { *x } else { *y }),
            _ => return false,
        }
        true
    }};
}

macro_rules! complex_kernel {
    ($t:ty, $op:expr, $a:expr, $b:expr, $n:expr) => {{
        // SAFETY: as for int_kernel; a complex element is two consecutive reals.
        let a = unsafe { core::slice::from_raw_parts($a as *const [$t; 2], $n) };
        let b = unsafe { core::slice::from_raw_parts_mut($b as *mut [$t; 2], $n) };
        match $op {
            Op::SUM => b
                .iter_mut()
                .zip(a)
                .for_each(|(y, x)| *y = [x[0] + y[0], x[1] + y[1]]),
            Op::PROD => b
                .iter_mut()
                .zip(a)
                .for_each(|(y, x)| *y = [x[0] * y[0] - x[1] * y[1], x[0] * y[1] + x[1] * y[0]]),
            _ => return false,
        }
        true
    }};
}

/// MINLOC/MAXLOC on `{value, index}` pairs laid out as a C struct.
macro_rules! loc_kernel {
    ($v:ty, $i:ty, $op:expr, $a:expr, $b:expr, $n:expr) => {{
        #[repr(C)]
        #[derive(Clone, Copy)]
        struct P {
            v: $v,
            i: $i,
        }
        // SAFETY: as for int_kernel; MPICH's pair types have this C layout (mpi.h).
        let a = unsafe { core::slice::from_raw_parts($a as *const P, $n) };
        let b = unsafe { core::slice::from_raw_parts_mut($b as *mut P, $n) };
        let max = $op == Op::MAXLOC;
        for (y, x) in b.iter_mut().zip(a) {
            let better = if max { x.v > y.v } else { x.v < y.v };
            if better {
                *y = *x;
            } else if x.v == y.v && x.i < y.i {
                y.i = x.i;
            }
        }
        true
    }};
}

/// Runs a Rust kernel if one covers (op, dt); false means "use PMPI_Reduce_local".
fn kernel(src: *const c_void, dst: *mut c_void, n: usize, dt: MPI_Datatype, op: MPI_Op) -> bool {
    let aligned = |a: usize| (src as usize) % a == 0 && (dst as usize) % a == 0;
    let (Some(dt), Some(op)) = (Dt::of(dt), Op::of(op)) else {
        return false;
    };
    match dt {
        Dt::INT8_T | Dt::SIGNED_CHAR | Dt::CHAR | Dt::INTEGER1 => int_kernel!(i8, op, src, dst, n),
        Dt::UINT8_T | Dt::UNSIGNED_CHAR | Dt::BYTE | Dt::CHARACTER => {
            int_kernel!(u8, op, src, dst, n)
        }
        Dt::INT16_T | Dt::SHORT | Dt::INTEGER2 if aligned(2) => int_kernel!(i16, op, src, dst, n),
        Dt::UINT16_T | Dt::UNSIGNED_SHORT if aligned(2) => int_kernel!(u16, op, src, dst, n),
        Dt::INT32_T | Dt::INT | Dt::INTEGER | Dt::INTEGER4 if aligned(4) => {
            int_kernel!(i32, op, src, dst, n)
        }
        Dt::UINT32_T | Dt::UNSIGNED if aligned(4) => int_kernel!(u32, op, src, dst, n),
        Dt::INT64_T
        | Dt::LONG
        | Dt::LONG_LONG
        | Dt::INTEGER8
        | Dt::AINT
        | Dt::OFFSET
        | Dt::COUNT
            if aligned(8) =>
        {
            int_kernel!(i64, op, src, dst, n)
        }
        Dt::UINT64_T | Dt::UNSIGNED_LONG | Dt::UNSIGNED_LONG_LONG if aligned(8) => {
            int_kernel!(u64, op, src, dst, n)
        }
        Dt::FLOAT | Dt::REAL | Dt::REAL4 if aligned(4) => float_kernel!(f32, op, src, dst, n),
        Dt::DOUBLE | Dt::DOUBLE_PRECISION | Dt::REAL8 if aligned(8) => {
            float_kernel!(f64, op, src, dst, n)
        }
        Dt::C_FLOAT_COMPLEX | Dt::COMPLEX | Dt::CXX_FLOAT_COMPLEX | Dt::COMPLEX8 if aligned(4) => {
            complex_kernel!(f32, op, src, dst, n)
        }
        Dt::C_DOUBLE_COMPLEX | Dt::DOUBLE_COMPLEX | Dt::CXX_DOUBLE_COMPLEX | Dt::COMPLEX16
            if aligned(8) =>
        {
            complex_kernel!(f64, op, src, dst, n)
        }
        Dt::C_BOOL | Dt::CXX_BOOL => match op {
            Op::LAND | Op::LOR | Op::LXOR => int_kernel!(u8, op, src, dst, n),
            _ => false,
        },
        Dt::TWO_INT | Dt::TWO_INTEGER if aligned(4) => loc_kernel!(i32, i32, op, src, dst, n),
        Dt::FLOAT_INT if aligned(4) => loc_kernel!(f32, i32, op, src, dst, n),
        Dt::DOUBLE_INT if aligned(8) => loc_kernel!(f64, i32, op, src, dst, n),
        Dt::LONG_INT if aligned(8) => loc_kernel!(i64, i32, op, src, dst, n),
        Dt::SHORT_INT if aligned(4) => loc_kernel!(i16, i32, op, src, dst, n),
        Dt::TWO_REAL if aligned(4) => loc_kernel!(f32, f32, op, src, dst, n),
        Dt::TWO_DOUBLE_PRECISION if aligned(8) => loc_kernel!(f64, f64, op, src, dst, n),
        _ => false,
    }
}

/// `dst = src op dst` over `count` elements of `dt` (the `MPI_Reduce_local` contract).
///
/// # Safety
/// Both buffers must hold `count` elements of `dt` and must not overlap.
pub unsafe fn reduce_local(
    src: *const c_void,
    dst: *mut c_void,
    count: i64,
    dt: MPI_Datatype,
    op: MPI_Op,
) -> c_int {
    if count <= 0 {
        return MPI_SUCCESS;
    }
    if is_builtin_op(op)
        && (builtin_size(dt).is_some() || is_pair_type(dt))
        && kernel(src, dst, count as usize, dt, op)
    {
        return MPI_SUCCESS;
    }
    // SAFETY: buffers per the caller's contract.
    let r = unsafe {
        if count <= c_int::MAX as i64 {
            mpi_dtype::reduce_local(src, dst, count as c_int, dt, op)
        } else {
            mpi_dtype::reduce_local_c(src, dst, count, dt, op)
        }
    };
    match r {
        Ok(()) => MPI_SUCCESS,
        Err(e) => e.code(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unsigned_min_max_are_never_trusted_to_the_system_mpi() {
        for dt in [
            MPI_UNSIGNED(),
            MPI_UNSIGNED_CHAR(),
            MPI_UINT64_T(),
            MPI_UNSIGNED_LONG(),
        ] {
            assert!(!native_trusted(MPI_MAX(), dt));
            assert!(!native_trusted(MPI_MIN(), dt));
            assert!(native_trusted(MPI_SUM(), dt));
        }
        assert!(native_trusted(MPI_MAX(), MPI_INT()));
        assert!(native_trusted(MPI_MIN(), MPI_DOUBLE()));
    }

    fn run<T: Copy>(a: &[T], b: &mut [T], dt: MPI_Datatype, op: MPI_Op) -> bool {
        kernel(a.as_ptr().cast(), b.as_mut_ptr().cast(), a.len(), dt, op)
    }

    #[test]
    fn integer_ops_wrap_and_logicals_are_0_or_1() {
        let a = [i32::MAX, 5, 0, -3];
        let mut b = [1, 7, 9, -3];
        assert!(run(&a, &mut b, MPI_INT(), MPI_SUM()));
        assert_eq!(b, [i32::MIN, 12, 9, -6]);
        let mut c = [1, 0, 9, 0];
        assert!(run(&a, &mut c, MPI_INT(), MPI_LAND()));
        assert_eq!(c, [1, 0, 0, 0]);
        let mut d = [1, 0, 9, 0];
        assert!(run(&a, &mut d, MPI_INT(), MPI_LXOR()));
        assert_eq!(d, [0, 1, 1, 1]);
    }

    #[test]
    fn max_keeps_mpich_nan_rule() {
        let a = [f64::NAN, 1.0];
        let mut b = [2.0, f64::NAN];
        assert!(run(&a, &mut b, MPI_DOUBLE(), MPI_MAX()));
        assert_eq!(b[0], 2.0); // NaN > 2 is false: keep inout
        assert!(b[1].is_nan()); // 1 > NaN is false: keep inout
    }

    #[test]
    fn maxloc_ties_take_lower_index() {
        #[repr(C)]
        #[derive(Clone, Copy, Debug, PartialEq)]
        struct DI {
            v: f64,
            i: i32,
        }
        let a = [
            DI { v: 3.0, i: 4 },
            DI { v: 1.0, i: 0 },
            DI { v: 5.0, i: 9 },
        ];
        let mut b = [
            DI { v: 3.0, i: 2 },
            DI { v: 2.0, i: 7 },
            DI { v: 5.0, i: 3 },
        ];
        assert!(run(&a, &mut b, MPI_DOUBLE_INT(), MPI_MAXLOC()));
        assert_eq!(
            b,
            [
                DI { v: 3.0, i: 2 },
                DI { v: 2.0, i: 7 },
                DI { v: 5.0, i: 3 }
            ]
        );
        let mut c = [
            DI { v: 3.0, i: 7 },
            DI { v: 2.0, i: 7 },
            DI { v: 4.0, i: 3 },
        ];
        assert!(run(&a, &mut c, MPI_DOUBLE_INT(), MPI_MAXLOC()));
        assert_eq!(
            c,
            [
                DI { v: 3.0, i: 4 },
                DI { v: 2.0, i: 7 },
                DI { v: 5.0, i: 9 }
            ]
        );
    }

    #[test]
    fn complex_product() {
        let a = [[1.0f64, 2.0]];
        let mut b = [[3.0f64, -1.0]];
        assert!(run(&a, &mut b, MPI_C_DOUBLE_COMPLEX(), MPI_PROD()));
        assert_eq!(b, [[5.0, 5.0]]);
    }

    #[test]
    fn validity_follows_the_system_mpi() {
        assert!(check(MPI_SUM(), MPI_INT()).is_ok());
        assert!(check(MPI_BAND(), MPI_BYTE()).is_ok());
        assert_eq!(check(MPI_SUM(), MPI_BYTE()), Err(MPI_ERR_OP));
        assert_eq!(check(MPI_BAND(), MPI_DOUBLE()), Err(MPI_ERR_OP));
        assert_eq!(check(MPI_LAND(), MPI_DOUBLE()), Err(MPI_ERR_OP)); // MPICH asserts here
        assert!(check(MPI_LAND(), MPI_REAL()).is_ok());
        assert_eq!(check(MPI_MAX(), MPI_C_DOUBLE_COMPLEX()), Err(MPI_ERR_OP));
        assert!(check(MPI_MAXLOC(), MPI_2INT()).is_ok());
        assert_eq!(check(MPI_MAXLOC(), MPI_INT()), Err(MPI_ERR_OP));
        assert_eq!(check(MPI_REPLACE(), MPI_INT()), Err(MPI_ERR_OP));
        assert_eq!(check(MPI_SUM(), MPI_WCHAR()), Err(MPI_ERR_OP));
        assert_eq!(
            check(MPI_SUM(), 0x8c00_0100u32 as MPI_Datatype),
            Err(MPI_ERR_OP)
        ); // a derived type
        // a user operation's handle is judged by the MPI library (PMPI_Op_commutative):
        // ctests/conform's error table checks garbage and freed ones under mpirun
    }

    use crate::platform::mpi::fake;

    /// A user operation's handle (MPICH's user kind), and an MPI error code.
    const USER_OP: i64 = 0x9800_0007u32 as i32 as i64;
    const CODE: c_int = 0x0004_2a09;

    #[test]
    fn a_user_operation_is_valid_when_the_library_knows_it() {
        // (answer of Op_commutative) -> verdict, on any datatype, never cached
        for (answer, verdict) in [(Ok(vec![0]), Ok(())), (Err(CODE), Err(MPI_ERR_OP))] {
            let _g = fake::install(move |_| answer.clone());
            assert_eq!(check(USER_OP as MPI_Op, MPI_INT()), verdict);
            assert_eq!(check(USER_OP as MPI_Op, MPI_INT()), verdict);
            assert_eq!(
                fake::calls().len(),
                2,
                "a user operation is asked every time"
            );
            assert_eq!(fake::calls()[0].name, "op_commutative");
            assert_eq!(fake::calls()[0].args, [USER_OP]);
        }
        // a predefined operation needs no call
        let _g = fake::install(|_| Err(CODE));
        assert!(check(MPI_SUM(), MPI_INT()).is_ok());
        assert!(fake::calls().is_empty());
    }

    #[test]
    fn commutativity_of_user_operations_comes_from_the_library() {
        // (answer) -> commutative; an error keeps the default, commutative
        for (answer, c) in [(Ok(vec![0]), false), (Ok(vec![1]), true), (Err(CODE), true)] {
            let _g = fake::install(move |_| answer.clone());
            assert_eq!(commutative(USER_OP as MPI_Op), c);
            assert_eq!(fake::names(), ["op_commutative"]);
        }
        let _g = fake::install(|_| Ok(vec![0]));
        assert!(
            commutative(MPI_MAX()),
            "MPI-4.0 §6.9.2: predefined operations commute"
        );
        assert!(fake::calls().is_empty());
    }

    #[test]
    fn reductions_without_a_kernel_go_to_the_library_with_their_code() {
        let a = [1i32, 2];
        let mut b = [10i32, 20];
        let big = c_int::MAX as i64 + 1;
        // (count, op, answer) -> (call, result)
        let cases = [
            (2i64, USER_OP, Ok(vec![]), Some("reduce_local"), MPI_SUCCESS),
            (2, USER_OP, Err(CODE), Some("reduce_local"), CODE),
            (
                big,
                USER_OP,
                Ok(vec![]),
                Some("reduce_local_c"),
                MPI_SUCCESS,
            ),
            // a predefined operation on a predefined type: the kernel, no call
            (2, MPI_SUM() as i64, Err(CODE), None, MPI_SUCCESS),
            // nothing to reduce
            (0, USER_OP, Err(CODE), None, MPI_SUCCESS),
        ];
        for (count, op, answer, call, rc) in cases {
            let _g = fake::install(move |_| answer.clone());
            // SAFETY: the fake touches no buffer; the kernel case reduces two ints.
            let r = unsafe {
                reduce_local(
                    a.as_ptr().cast(),
                    b.as_mut_ptr().cast(),
                    count,
                    MPI_INT(),
                    op as MPI_Op,
                )
            };
            assert_eq!(r, rc, "{count} {op:#x}");
            match call {
                Some(name) => {
                    assert_eq!(fake::names(), [name]);
                    let args = &fake::calls()[0].args;
                    assert_eq!(
                        args[..],
                        [
                            a.as_ptr() as i64,
                            b.as_ptr() as i64,
                            count,
                            MPI_INT() as i64,
                            op
                        ]
                    );
                }
                None => assert!(fake::calls().is_empty()),
            }
        }
        assert_eq!(b, [11, 22], "the kernel ran once");
    }
}

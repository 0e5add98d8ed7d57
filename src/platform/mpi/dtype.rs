//! Layer: platform. May use: nothing.
//!
//! Datatypes (MPI-4.0 chapter 5).

#[allow(unused_imports)]
use super::{MpiResult, check, fake_first};

// The seam's datatype and operation calls (imports as globs, so that other additions to
// this file that import the same names do not clash).
#[allow(unused_imports)]
use crate::platform::abi::*;
#[allow(unused_imports)]
use crate::platform::api::*;
#[allow(unused_imports)]
use core::ffi::*;

/// `MPI_Type_size_x`.
pub fn size_x(datatype: MPI_Datatype) -> MpiResult<MPI_Count> {
    fake_first!("type_size_x", [datatype], |v: Vec<i64>| v[0] as MPI_Count);
    let mut size: MPI_Count = 0;
    // SAFETY: a valid out-pointer; MPI reports a bad handle as an error.
    check(unsafe { pmpi::PMPI_Type_size_x(datatype, &mut size) })?;
    Ok(size)
}

/// `MPI_Type_get_extent_x`: `(lb, extent)`.
pub fn get_extent_x(datatype: MPI_Datatype) -> MpiResult<(MPI_Count, MPI_Count)> {
    fake_first!("type_get_extent_x", [datatype], |v: Vec<i64>| (v[0], v[1]));
    let (mut lb, mut extent): (MPI_Count, MPI_Count) = (0, 0);
    // SAFETY: valid out-pointers.
    check(unsafe { pmpi::PMPI_Type_get_extent_x(datatype, &mut lb, &mut extent) })?;
    Ok((lb, extent))
}

/// `MPI_Type_get_true_extent_x`: `(true_lb, true_extent)`.
pub fn get_true_extent_x(datatype: MPI_Datatype) -> MpiResult<(MPI_Count, MPI_Count)> {
    fake_first!("type_get_true_extent_x", [datatype], |v: Vec<i64>| (
        v[0], v[1]
    ));
    let (mut lb, mut extent): (MPI_Count, MPI_Count) = (0, 0);
    // SAFETY: valid out-pointers.
    check(unsafe { pmpi::PMPI_Type_get_true_extent_x(datatype, &mut lb, &mut extent) })?;
    Ok((lb, extent))
}

/// `MPI_Pack_size`.
pub fn pack_size(incount: c_int, datatype: MPI_Datatype, comm: MPI_Comm) -> MpiResult<c_int> {
    fake_first!("pack_size", [incount, datatype, comm], |v: Vec<i64>| v[0]
        as c_int);
    let mut size: c_int = 0;
    // SAFETY: a valid out-pointer.
    check(unsafe { pmpi::PMPI_Pack_size(incount, datatype, comm, &mut size) })?;
    Ok(size)
}

/// `MPI_Pack_size_c`.
pub fn pack_size_c(
    incount: MPI_Count,
    datatype: MPI_Datatype,
    comm: MPI_Comm,
) -> MpiResult<MPI_Count> {
    fake_first!("pack_size_c", [incount, datatype, comm], |v: Vec<i64>| v[0]);
    let mut size: MPI_Count = 0;
    // SAFETY: a valid out-pointer.
    check(unsafe { pmpi::PMPI_Pack_size_c(incount, datatype, comm, &mut size) })?;
    Ok(size)
}

/// `MPI_Pack_c` into the shim's buffer `outbuf` (`outsize` is its length), from
/// `*position` on (advanced past the packed bytes; the fake's word is the new position).
///
/// # Safety
/// `inbuf` must hold `incount` elements of `datatype`.
pub unsafe fn pack_c(
    inbuf: *const c_void,
    incount: MPI_Count,
    datatype: MPI_Datatype,
    outbuf: &mut [u8],
    position: &mut MPI_Count,
    comm: MPI_Comm,
) -> MpiResult<()> {
    fake_first!(
        "pack_c",
        [
            inbuf as usize,
            incount,
            datatype,
            outbuf.len(),
            *position,
            comm
        ],
        |v: Vec<i64>| *position = v[0]
    );
    // SAFETY: `inbuf` per the caller's contract; `outbuf` holds `outbuf.len()` bytes.
    check(unsafe {
        pmpi::PMPI_Pack_c(
            inbuf,
            incount,
            datatype,
            outbuf.as_mut_ptr().cast(),
            outbuf.len() as MPI_Count,
            position,
            comm,
        )
    })
}

/// `MPI_Unpack_c` from the shim's buffer `inbuf` (`insize` is its length), from
/// `*position` on (advanced; the fake's word is the new position).
///
/// # Safety
/// `outbuf` must hold `outcount` elements of `datatype`.
pub unsafe fn unpack_c(
    inbuf: &[u8],
    position: &mut MPI_Count,
    outbuf: *mut c_void,
    outcount: MPI_Count,
    datatype: MPI_Datatype,
    comm: MPI_Comm,
) -> MpiResult<()> {
    fake_first!(
        "unpack_c",
        [
            inbuf.len(),
            *position,
            outbuf as usize,
            outcount,
            datatype,
            comm
        ],
        |v: Vec<i64>| *position = v[0]
    );
    // SAFETY: `inbuf` holds `inbuf.len()` bytes; `outbuf` per the caller's contract.
    check(unsafe {
        pmpi::PMPI_Unpack_c(
            inbuf.as_ptr().cast(),
            inbuf.len() as MPI_Count,
            position,
            outbuf,
            outcount,
            datatype,
            comm,
        )
    })
}

/// `MPI_Type_create_struct_c` over three arrays of one length each (`MPI_ERR_ARG` if the
/// lengths differ): the new (uncommitted) type.
pub fn create_struct_c(
    blocklengths: &[MPI_Count],
    displacements: &[MPI_Count],
    types: &[MPI_Datatype],
) -> MpiResult<MPI_Datatype> {
    fake_first!(
        "type_create_struct_c",
        [blocklengths.len(), displacements.len(), types.len()],
        |v: Vec<i64>| v[0] as MPI_Datatype
    );
    let n = blocklengths.len();
    if displacements.len() != n || types.len() != n {
        return Err(super::MpiError(MPI_ERR_ARG));
    }
    let mut t = MPI_DATATYPE_NULL();
    // SAFETY: three arrays of n entries and a valid out-pointer.
    check(unsafe {
        pmpi::PMPI_Type_create_struct_c(
            n as MPI_Count,
            blocklengths.as_ptr(),
            displacements.as_ptr(),
            types.as_ptr(),
            &mut t,
        )
    })?;
    Ok(t)
}

/// `MPI_Type_contiguous`: the new (uncommitted) type.
pub fn contiguous(count: c_int, oldtype: MPI_Datatype) -> MpiResult<MPI_Datatype> {
    fake_first!("type_contiguous", [count, oldtype], |v: Vec<i64>| v[0]
        as MPI_Datatype);
    let mut t = MPI_DATATYPE_NULL();
    // SAFETY: a valid out-pointer.
    check(unsafe { pmpi::PMPI_Type_contiguous(count, oldtype, &mut t) })?;
    Ok(t)
}

/// `MPI_Type_commit` (the handle may change; the fake leaves it).
pub fn commit(datatype: &mut MPI_Datatype) -> MpiResult<()> {
    fake_first!("type_commit", [*datatype], |_v: Vec<i64>| ());
    // SAFETY: a valid in/out handle location.
    check(unsafe { pmpi::PMPI_Type_commit(datatype) })
}

/// `MPI_Type_free`: frees `*datatype` and sets it to `MPI_DATATYPE_NULL` (the fake too,
/// on success).
pub fn free(datatype: &mut MPI_Datatype) -> MpiResult<()> {
    fake_first!("type_free", [*datatype], |_v: Vec<i64>| *datatype =
        MPI_DATATYPE_NULL());
    // SAFETY: a valid in/out handle location.
    check(unsafe { pmpi::PMPI_Type_free(datatype) })
}

/// `MPI_Type_get_envelope_c`: `(num_integers, num_addresses, num_large_counts,
/// num_datatypes, combiner)`.
pub fn get_envelope_c(
    datatype: MPI_Datatype,
) -> MpiResult<(MPI_Count, MPI_Count, MPI_Count, MPI_Count, c_int)> {
    fake_first!("type_get_envelope_c", [datatype], |v: Vec<i64>| (
        v[0],
        v[1],
        v[2],
        v[3],
        v[4] as c_int
    ));
    let (mut ni, mut na, mut nl, mut nd): (MPI_Count, MPI_Count, MPI_Count, MPI_Count) =
        (0, 0, 0, 0);
    let mut combiner: c_int = 0;
    // SAFETY: valid out-pointers.
    check(unsafe {
        pmpi::PMPI_Type_get_envelope_c(datatype, &mut ni, &mut na, &mut nl, &mut nd, &mut combiner)
    })?;
    Ok((ni, na, nl, nd, combiner))
}

/// Copies the fake's next words into `out` (test double only): the words of several
/// output arrays follow each other.
#[cfg(test)]
fn fill<T>(out: &mut [T], words: &mut std::slice::Iter<i64>, conv: impl Fn(i64) -> T) {
    for (o, &w) in out.iter_mut().zip(words) {
        *o = conv(w);
    }
}

/// `MPI_Type_get_contents` into arrays of the sizes the envelope gave (`max_integers` is
/// `integers.len()`, and so on). The fake's words fill the integers, then the addresses,
/// then the datatypes.
pub fn get_contents(
    datatype: MPI_Datatype,
    integers: &mut [c_int],
    addresses: &mut [MPI_Aint],
    datatypes: &mut [MPI_Datatype],
) -> MpiResult<()> {
    fake_first!(
        "type_get_contents",
        [datatype, integers.len(), addresses.len(), datatypes.len()],
        |v: Vec<i64>| {
            let mut w = v.iter();
            fill(integers, &mut w, |x| x as c_int);
            fill(addresses, &mut w, |x| x);
            fill(datatypes, &mut w, |x| x as MPI_Datatype);
        }
    );
    let (Ok(ni), Ok(na), Ok(nd)) = (
        c_int::try_from(integers.len()),
        c_int::try_from(addresses.len()),
        c_int::try_from(datatypes.len()),
    ) else {
        return Err(super::MpiError(MPI_ERR_ARG));
    };
    // SAFETY: arrays of exactly the sizes passed.
    check(unsafe {
        pmpi::PMPI_Type_get_contents(
            datatype,
            ni,
            na,
            nd,
            integers.as_mut_ptr(),
            addresses.as_mut_ptr(),
            datatypes.as_mut_ptr(),
        )
    })
}

/// `MPI_Type_get_contents_c` (arrays as in [`get_contents`], plus the large counts; the
/// fake's words fill integers, addresses, large counts, datatypes).
pub fn get_contents_c(
    datatype: MPI_Datatype,
    integers: &mut [c_int],
    addresses: &mut [MPI_Aint],
    large_counts: &mut [MPI_Count],
    datatypes: &mut [MPI_Datatype],
) -> MpiResult<()> {
    fake_first!(
        "type_get_contents_c",
        [
            datatype,
            integers.len(),
            addresses.len(),
            large_counts.len(),
            datatypes.len()
        ],
        |v: Vec<i64>| {
            let mut w = v.iter();
            fill(integers, &mut w, |x| x as c_int);
            fill(addresses, &mut w, |x| x);
            fill(large_counts, &mut w, |x| x);
            fill(datatypes, &mut w, |x| x as MPI_Datatype);
        }
    );
    // SAFETY: arrays of exactly the sizes passed.
    check(unsafe {
        pmpi::PMPI_Type_get_contents_c(
            datatype,
            integers.len() as MPI_Count,
            addresses.len() as MPI_Count,
            large_counts.len() as MPI_Count,
            datatypes.len() as MPI_Count,
            integers.as_mut_ptr(),
            addresses.as_mut_ptr(),
            large_counts.as_mut_ptr(),
            datatypes.as_mut_ptr(),
        )
    })
}

/// `MPI_Type_create_keyval`: a new attribute key for datatypes.
///
/// # Safety
/// `copy_fn` and `delete_fn` must be a datatype copy and delete callback
/// (`MPI_Type_copy_attr_function`, `MPI_Type_delete_attr_function`) or the predefined
/// ones, sound to call with `extra_state` and the values later set under the key.
pub unsafe fn create_keyval(
    copy_fn: *mut c_void,
    delete_fn: *mut c_void,
    extra_state: *mut c_void,
) -> MpiResult<c_int> {
    fake_first!(
        "type_create_keyval",
        [copy_fn as usize, delete_fn as usize, extra_state as usize],
        |v: Vec<i64>| v[0] as c_int
    );
    let mut kv: c_int = MPI_KEYVAL_INVALID;
    // SAFETY: the callbacks per the caller's contract; a valid out-pointer.
    check(unsafe { pmpi::PMPI_Type_create_keyval(copy_fn, delete_fn, &mut kv, extra_state) })?;
    Ok(kv)
}

/// `MPI_Type_free_keyval`: frees `*keyval` and sets it to `MPI_KEYVAL_INVALID`.
pub fn free_keyval(keyval: &mut c_int) -> MpiResult<()> {
    fake_first!("type_free_keyval", [*keyval], |_v: Vec<i64>| *keyval =
        MPI_KEYVAL_INVALID);
    // SAFETY: a valid in/out location.
    check(unsafe { pmpi::PMPI_Type_free_keyval(keyval) })
}

/// `MPI_Type_get_attr`: the attribute's value, `None` if it is not set. The fake answers
/// `[flag, value]`.
pub fn get_attr(datatype: MPI_Datatype, keyval: c_int) -> MpiResult<Option<*mut c_void>> {
    fake_first!("type_get_attr", [datatype, keyval], |v: Vec<i64>| (v[0]
        != 0)
        .then(|| v[1] as usize as *mut c_void));
    let mut value: *mut c_void = core::ptr::null_mut();
    let mut flag: c_int = 0;
    // SAFETY: valid out-pointers; an attribute value is a pointer-sized slot.
    check(unsafe {
        pmpi::PMPI_Type_get_attr(
            datatype,
            keyval,
            (&mut value as *mut *mut c_void).cast(),
            &mut flag,
        )
    })?;
    Ok((flag != 0).then_some(value))
}

/// `MPI_Type_set_attr`.
///
/// # Safety
/// `value` must be what the key's copy and delete callbacks expect.
pub unsafe fn set_attr(datatype: MPI_Datatype, keyval: c_int, value: *mut c_void) -> MpiResult<()> {
    fake_first!(
        "type_set_attr",
        [datatype, keyval, value as usize],
        |_v: Vec<i64>| ()
    );
    // SAFETY: the value per the caller's contract.
    check(unsafe { pmpi::PMPI_Type_set_attr(datatype, keyval, value) })
}

/// `MPI_Op_commutative`.
pub fn op_commutative(op: MPI_Op) -> MpiResult<bool> {
    fake_first!("op_commutative", [op], |v: Vec<i64>| v[0] != 0);
    let mut c: c_int = 0;
    // SAFETY: a valid out-pointer; an invalid handle yields an error code.
    check(unsafe { pmpi::PMPI_Op_commutative(op, &mut c) })?;
    Ok(c != 0)
}

/// `MPI_Op_create` with a Rust callback.
pub fn op_create(user_fn: MPI_User_function, commute: bool) -> MpiResult<MPI_Op> {
    fake_first!("op_create", [user_fn as usize, commute as i64], |v: Vec<
        i64,
    >| v[0]
        as MPI_Op);
    let mut op = MPI_OP_NULL();
    // SAFETY: a function of the user-function type; a valid out-pointer.
    check(unsafe { pmpi::PMPI_Op_create(user_fn as *mut c_void, commute as c_int, &mut op) })?;
    Ok(op)
}

/// `MPI_Op_free`: frees `*op` and sets it to `MPI_OP_NULL` (the fake too, on success).
pub fn op_free(op: &mut MPI_Op) -> MpiResult<()> {
    fake_first!("op_free", [*op], |_v: Vec<i64>| *op = MPI_OP_NULL());
    // SAFETY: a valid in/out handle location.
    check(unsafe { pmpi::PMPI_Op_free(op) })
}

/// `MPI_Reduce_local`: `inoutbuf = inbuf op inoutbuf`.
///
/// # Safety
/// Both buffers must hold `count` elements of `datatype`.
pub unsafe fn reduce_local(
    inbuf: *const c_void,
    inoutbuf: *mut c_void,
    count: c_int,
    datatype: MPI_Datatype,
    op: MPI_Op,
) -> MpiResult<()> {
    fake_first!(
        "reduce_local",
        [inbuf as usize, inoutbuf as usize, count, datatype, op],
        |_v: Vec<i64>| ()
    );
    // SAFETY: buffers per the caller's contract.
    check(unsafe { pmpi::PMPI_Reduce_local(inbuf, inoutbuf, count, datatype, op) })
}

/// `MPI_Reduce_local_c`.
///
/// # Safety
/// Both buffers must hold `count` elements of `datatype`.
pub unsafe fn reduce_local_c(
    inbuf: *const c_void,
    inoutbuf: *mut c_void,
    count: MPI_Count,
    datatype: MPI_Datatype,
    op: MPI_Op,
) -> MpiResult<()> {
    fake_first!(
        "reduce_local_c",
        [inbuf as usize, inoutbuf as usize, count, datatype, op],
        |_v: Vec<i64>| ()
    );
    // SAFETY: buffers per the caller's contract.
    check(unsafe { pmpi::PMPI_Reduce_local_c(inbuf, inoutbuf, count, datatype, op) })
}

/// `MPI_Type_size`.
pub fn size(dt: MPI_Datatype) -> MpiResult<c_int> {
    fake_first!("type_size", [dt], |v: Vec<i64>| v[0] as c_int);
    let mut n = 0;
    // SAFETY: a valid out-pointer; MPI reports a bad handle as an error.
    check(unsafe { pmpi::PMPI_Type_size(dt, &mut n) })?;
    Ok(n)
}

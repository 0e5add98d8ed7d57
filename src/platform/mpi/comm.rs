//! Layer: platform. May use: nothing.
//!
//! Communicators, groups and attributes (MPI-4.0 chapters 7 and 9).

use core::ffi::c_int;

use super::{MpiResult, check, fake_first};
use crate::platform::abi::*;
use crate::platform::api::pmpi;

/// `MPI_Comm_rank`.
pub fn rank(comm: MPI_Comm) -> MpiResult<c_int> {
    fake_first!("comm_rank", [comm], |v: Vec<i64>| v[0] as c_int);
    let mut r = 0;
    // SAFETY: a valid out-pointer; MPI reports a bad handle as an error.
    check(unsafe { pmpi::PMPI_Comm_rank(comm, &mut r) })?;
    Ok(r)
}

/// `MPI_Comm_size`.
pub fn size(comm: MPI_Comm) -> MpiResult<c_int> {
    fake_first!("comm_size", [comm], |v: Vec<i64>| v[0] as c_int);
    let mut n = 0;
    // SAFETY: a valid out-pointer; MPI reports a bad handle as an error.
    check(unsafe { pmpi::PMPI_Comm_size(comm, &mut n) })?;
    Ok(n)
}

/// `MPI_Comm_split`.
pub fn split(comm: MPI_Comm, color: c_int, key: c_int) -> MpiResult<MPI_Comm> {
    fake_first!("comm_split", [comm, color, key], |v: Vec<i64>| v[0]
        as MPI_Comm);
    let mut c = MPI_COMM_NULL();
    // SAFETY: a valid out-pointer; MPI reports a bad handle as an error.
    check(unsafe { pmpi::PMPI_Comm_split(comm, color, key, &mut c) })?;
    Ok(c)
}

/// `MPI_Comm_dup`.
pub fn dup(comm: MPI_Comm) -> MpiResult<MPI_Comm> {
    fake_first!("comm_dup", [comm], |v: Vec<i64>| v[0] as MPI_Comm);
    let mut c = MPI_COMM_NULL();
    // SAFETY: a valid out-pointer; MPI reports a bad handle as an error.
    check(unsafe { pmpi::PMPI_Comm_dup(comm, &mut c) })?;
    Ok(c)
}

/// `MPI_Comm_free`: `*comm` becomes `MPI_COMM_NULL` on success.
pub fn free(comm: &mut MPI_Comm) -> MpiResult<()> {
    fake_first!("comm_free", [*comm], |_v: Vec<i64>| *comm = MPI_COMM_NULL());
    // SAFETY: a valid handle pointer.
    check(unsafe { pmpi::PMPI_Comm_free(comm) })
}

/// `MPI_Comm_set_name`.
pub fn set_name(comm: MPI_Comm, name: &core::ffi::CStr) -> MpiResult<()> {
    fake_first!("comm_set_name", [comm], |_v: Vec<i64>| ());
    // SAFETY: a NUL-terminated name.
    check(unsafe { pmpi::PMPI_Comm_set_name(comm, name.as_ptr()) })
}

/// `MPI_Comm_group`.
pub fn group(comm: MPI_Comm) -> MpiResult<MPI_Group> {
    fake_first!("comm_group", [comm], |v: Vec<i64>| v[0] as MPI_Group);
    let mut g = MPI_GROUP_NULL();
    // SAFETY: a valid out-pointer; MPI reports a bad handle as an error.
    check(unsafe { pmpi::PMPI_Comm_group(comm, &mut g) })?;
    Ok(g)
}

/// `MPI_Comm_test_inter`: whether `comm` is an intercommunicator.
pub fn test_inter(comm: MPI_Comm) -> MpiResult<bool> {
    fake_first!("comm_test_inter", [comm], |v: Vec<i64>| v[0] != 0);
    let mut f = 0;
    // SAFETY: a valid out-pointer; MPI reports a bad handle as an error.
    check(unsafe { pmpi::PMPI_Comm_test_inter(comm, &mut f) })?;
    Ok(f != 0)
}

/// `MPI_Group_size`.
pub fn group_size(group: MPI_Group) -> MpiResult<c_int> {
    fake_first!("group_size", [group], |v: Vec<i64>| v[0] as c_int);
    let mut n = 0;
    // SAFETY: a valid out-pointer; MPI reports a bad handle as an error.
    check(unsafe { pmpi::PMPI_Group_size(group, &mut n) })?;
    Ok(n)
}

/// `MPI_Group_translate_ranks`: `ranks` of `g1` into `out` (ranks of `g2`, or
/// `MPI_UNDEFINED`). In unit tests the fake's words are the translated ranks.
///
/// Panics if `out` is shorter than `ranks`.
pub fn group_translate_ranks(
    g1: MPI_Group,
    ranks: &[c_int],
    g2: MPI_Group,
    out: &mut [c_int],
) -> MpiResult<()> {
    assert!(out.len() >= ranks.len(), "room for every translated rank");
    fake_first!("group_translate_ranks", [g1, ranks.len(), g2], |v: Vec<
        i64,
    >| {
        for (o, w) in out.iter_mut().zip(v) {
            *o = w as c_int;
        }
    });
    // SAFETY: `ranks.len()` ranks in, as many out (checked above).
    check(unsafe {
        pmpi::PMPI_Group_translate_ranks(
            g1,
            ranks.len() as c_int,
            ranks.as_ptr(),
            g2,
            out.as_mut_ptr(),
        )
    })
}

/// `MPI_Group_free`: `*group` becomes `MPI_GROUP_NULL` on success.
pub fn group_free(group: &mut MPI_Group) -> MpiResult<()> {
    fake_first!("group_free", [*group], |_v: Vec<i64>| *group =
        MPI_GROUP_NULL());
    // SAFETY: a valid handle pointer.
    check(unsafe { pmpi::PMPI_Group_free(group) })
}

/// `MPI_Info_get` into `value` (at most `value.len() - 1` characters and the NUL): whether
/// the key is set.
///
/// Panics if `value` is empty.
pub fn info_get(info: MPI_Info, key: &core::ffi::CStr, value: &mut [u8]) -> MpiResult<bool> {
    assert!(!value.is_empty(), "room for the terminating NUL");
    fake_first!("info_get", [info, value.len()], |v: Vec<i64>| v[0] != 0);
    let len = (value.len() - 1).min(c_int::MAX as usize) as c_int;
    let mut flag = 0;
    // SAFETY: a NUL-terminated key; room for `len` characters and the NUL.
    check(unsafe {
        pmpi::PMPI_Info_get(
            info,
            key.as_ptr(),
            len,
            value.as_mut_ptr().cast(),
            &mut flag,
        )
    })?;
    Ok(flag != 0)
}

/// `MPI_Info_get_nkeys`.
pub fn info_get_nkeys(info: MPI_Info) -> MpiResult<c_int> {
    fake_first!("info_get_nkeys", [info], |v: Vec<i64>| v[0] as c_int);
    let mut n = 0;
    // SAFETY: a valid out-pointer; MPI reports a bad handle as an error.
    check(unsafe { pmpi::PMPI_Info_get_nkeys(info, &mut n) })?;
    Ok(n)
}

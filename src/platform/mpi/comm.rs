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

/// `MPI_Comm_idup`: starts duplicating `comm`; returns the request. The new handle is
/// written to `*newcomm` by the time the request completes (the fake, `"comm_idup"`,
/// answers `[request, newcomm]` and writes `newcomm` at once).
///
/// # Safety
/// `newcomm` must stay valid for writes until the returned request completes.
pub unsafe fn idup(comm: MPI_Comm, newcomm: *mut MPI_Comm) -> MpiResult<MPI_Request> {
    fake_first!("comm_idup", [comm], |v: Vec<i64>| {
        // SAFETY: the caller vouches for `newcomm`.
        unsafe { *newcomm = v[1] as MPI_Comm };
        v[0] as MPI_Request
    });
    let mut req = MPI_REQUEST_NULL();
    // SAFETY: `newcomm` per the caller's contract; `req` is a valid out-pointer.
    check(unsafe { pmpi::PMPI_Comm_idup(comm, newcomm, &mut req) })?;
    Ok(req)
}

/// `MPI_Comm_set_errhandler`.
pub fn set_errhandler(comm: MPI_Comm, errhandler: MPI_Errhandler) -> MpiResult<()> {
    fake_first!("comm_set_errhandler", [comm, errhandler], |_v: Vec<i64>| ());
    // SAFETY: handles only; MPI reports a bad one as an error.
    check(unsafe { pmpi::PMPI_Comm_set_errhandler(comm, errhandler) })
}

/// `MPI_Comm_free`: frees `*comm` and sets it to `MPI_COMM_NULL` (the fake too, on success).
pub fn free(comm: &mut MPI_Comm) -> MpiResult<()> {
    fake_first!("comm_free", [*comm], |_v: Vec<i64>| *comm = MPI_COMM_NULL());
    // SAFETY: a valid in/out handle location.
    check(unsafe { pmpi::PMPI_Comm_free(comm) })
}

/// `MPI_Finalized` (MPI-4.0 §11.2.3: callable at any time).
pub fn finalized() -> MpiResult<bool> {
    fake_first!("finalized", [], |v: Vec<i64>| v[0] != 0);
    let mut flag: c_int = 0;
    // SAFETY: a valid out-pointer.
    check(unsafe { pmpi::PMPI_Finalized(&mut flag) })?;
    Ok(flag != 0)
}

/// `MPI_Error_class` (MPI-4.0 §9.4).
pub fn error_class(errorcode: c_int) -> MpiResult<c_int> {
    fake_first!("error_class", [errorcode], |v: Vec<i64>| v[0] as c_int);
    let mut class = errorcode;
    // SAFETY: a valid out-pointer.
    check(unsafe { pmpi::PMPI_Error_class(errorcode, &mut class) })?;
    Ok(class)
}

/// `MPI_Topo_test`: `MPI_CART`, `MPI_GRAPH`, `MPI_DIST_GRAPH` or `MPI_UNDEFINED`.
pub fn topo_test(comm: MPI_Comm) -> MpiResult<c_int> {
    fake_first!("topo_test", [comm], |v: Vec<i64>| v[0] as c_int);
    let mut kind: c_int = MPI_UNDEFINED;
    // SAFETY: a valid out-pointer.
    check(unsafe { pmpi::PMPI_Topo_test(comm, &mut kind) })?;
    Ok(kind)
}

/// `MPI_Cartdim_get`.
pub fn cartdim_get(comm: MPI_Comm) -> MpiResult<c_int> {
    fake_first!("cartdim_get", [comm], |v: Vec<i64>| v[0] as c_int);
    let mut ndims: c_int = 0;
    // SAFETY: a valid out-pointer.
    check(unsafe { pmpi::PMPI_Cartdim_get(comm, &mut ndims) })?;
    Ok(ndims)
}

/// `MPI_Cart_shift`: `(source, dest)` of a shift by `disp` in dimension `direction`.
pub fn cart_shift(comm: MPI_Comm, direction: c_int, disp: c_int) -> MpiResult<(c_int, c_int)> {
    fake_first!("cart_shift", [comm, direction, disp], |v: Vec<i64>| (
        v[0] as c_int,
        v[1] as c_int
    ));
    let (mut src, mut dst) = (MPI_PROC_NULL, MPI_PROC_NULL);
    // SAFETY: valid out-pointers.
    check(unsafe { pmpi::PMPI_Cart_shift(comm, direction, disp, &mut src, &mut dst) })?;
    Ok((src, dst))
}

/// `MPI_Graph_neighbors_count`.
pub fn graph_neighbors_count(comm: MPI_Comm, rank: c_int) -> MpiResult<c_int> {
    fake_first!("graph_neighbors_count", [comm, rank], |v: Vec<i64>| v[0]
        as c_int);
    let mut n: c_int = 0;
    // SAFETY: a valid out-pointer.
    check(unsafe { pmpi::PMPI_Graph_neighbors_count(comm, rank, &mut n) })?;
    Ok(n)
}

/// `MPI_Graph_neighbors`: fills `neighbors` (its length is `maxneighbors`; the fake's
/// words are the neighbours).
pub fn graph_neighbors(comm: MPI_Comm, rank: c_int, neighbors: &mut [c_int]) -> MpiResult<()> {
    fake_first!(
        "graph_neighbors",
        [comm, rank, neighbors.len()],
        |v: Vec<i64>| {
            for (o, w) in neighbors.iter_mut().zip(v) {
                *o = w as c_int;
            }
        }
    );
    let Ok(max) = c_int::try_from(neighbors.len()) else {
        return Err(super::MpiError(MPI_ERR_ARG));
    };
    // SAFETY: an array of `max` ints.
    check(unsafe { pmpi::PMPI_Graph_neighbors(comm, rank, max, neighbors.as_mut_ptr()) })
}

/// `MPI_Dist_graph_neighbors_count`: `(indegree, outdegree, weighted)`.
pub fn dist_graph_neighbors_count(comm: MPI_Comm) -> MpiResult<(c_int, c_int, bool)> {
    fake_first!("dist_graph_neighbors_count", [comm], |v: Vec<i64>| (
        v[0] as c_int,
        v[1] as c_int,
        v[2] != 0
    ));
    let (mut indeg, mut outdeg, mut weighted) = (0, 0, 0);
    // SAFETY: valid out-pointers.
    check(unsafe {
        pmpi::PMPI_Dist_graph_neighbors_count(comm, &mut indeg, &mut outdeg, &mut weighted)
    })?;
    Ok((indeg, outdeg, weighted != 0))
}

/// `MPI_Dist_graph_neighbors`: `maxindegree` is `sources.len()`, `maxoutdegree` is
/// `dests.len()`; each weight array must be at least as long as its rank array
/// (`MPI_ERR_ARG` otherwise). The fake's words are the sources, then the destinations.
pub fn dist_graph_neighbors(
    comm: MPI_Comm,
    sources: &mut [c_int],
    sourceweights: &mut [c_int],
    dests: &mut [c_int],
    destweights: &mut [c_int],
) -> MpiResult<()> {
    fake_first!(
        "dist_graph_neighbors",
        [comm, sources.len(), dests.len()],
        |v: Vec<i64>| {
            let (s, d) = v.split_at(sources.len().min(v.len()));
            for (o, &w) in sources.iter_mut().zip(s) {
                *o = w as c_int;
            }
            for (o, &w) in dests.iter_mut().zip(d) {
                *o = w as c_int;
            }
        }
    );
    if sourceweights.len() < sources.len() || destweights.len() < dests.len() {
        return Err(super::MpiError(MPI_ERR_ARG));
    }
    let (Ok(maxin), Ok(maxout)) = (c_int::try_from(sources.len()), c_int::try_from(dests.len()))
    else {
        return Err(super::MpiError(MPI_ERR_ARG));
    };
    // SAFETY: arrays of at least maxin and maxout ints (checked above).
    check(unsafe {
        pmpi::PMPI_Dist_graph_neighbors(
            comm,
            maxin,
            sources.as_mut_ptr(),
            sourceweights.as_mut_ptr(),
            maxout,
            dests.as_mut_ptr(),
            destweights.as_mut_ptr(),
        )
    })
}

/// `MPI_Comm_create_keyval`: a new attribute key.
///
/// # Safety
/// `copy_fn` and `delete_fn` must be a communicator copy and delete callback
/// (`MPI_Comm_copy_attr_function`, `MPI_Comm_delete_attr_function`) or the predefined
/// ones, sound to call with `extra_state` and the values later set under the key.
pub unsafe fn create_keyval(
    copy_fn: *mut core::ffi::c_void,
    delete_fn: *mut core::ffi::c_void,
    extra_state: *mut core::ffi::c_void,
) -> MpiResult<c_int> {
    fake_first!(
        "comm_create_keyval",
        [copy_fn as usize, delete_fn as usize, extra_state as usize],
        |v: Vec<i64>| v[0] as c_int
    );
    let mut kv: c_int = MPI_KEYVAL_INVALID;
    // SAFETY: the callbacks per the caller's contract; a valid out-pointer.
    check(unsafe { pmpi::PMPI_Comm_create_keyval(copy_fn, delete_fn, &mut kv, extra_state) })?;
    Ok(kv)
}

/// `MPI_Comm_free_keyval`: frees `*keyval` and sets it to `MPI_KEYVAL_INVALID`.
pub fn free_keyval(keyval: &mut c_int) -> MpiResult<()> {
    fake_first!("comm_free_keyval", [*keyval], |_v: Vec<i64>| *keyval =
        MPI_KEYVAL_INVALID);
    // SAFETY: a valid in/out location.
    check(unsafe { pmpi::PMPI_Comm_free_keyval(keyval) })
}

/// `MPI_Comm_get_attr`: the attribute's value, `None` if it is not set. The fake answers
/// `[flag, value]`.
pub fn get_attr(comm: MPI_Comm, keyval: c_int) -> MpiResult<Option<*mut core::ffi::c_void>> {
    fake_first!("comm_get_attr", [comm, keyval], |v: Vec<i64>| (v[0] != 0)
        .then(|| v[1] as usize as *mut core::ffi::c_void));
    let mut value: *mut core::ffi::c_void = core::ptr::null_mut();
    let mut flag: c_int = 0;
    // SAFETY: valid out-pointers; an attribute value is a pointer-sized slot.
    check(unsafe {
        pmpi::PMPI_Comm_get_attr(
            comm,
            keyval,
            (&mut value as *mut *mut core::ffi::c_void).cast(),
            &mut flag,
        )
    })?;
    Ok((flag != 0).then_some(value))
}

/// `MPI_Comm_set_attr`.
///
/// # Safety
/// `value` must be what the key's copy and delete callbacks expect.
pub unsafe fn set_attr(
    comm: MPI_Comm,
    keyval: c_int,
    value: *mut core::ffi::c_void,
) -> MpiResult<()> {
    fake_first!(
        "comm_set_attr",
        [comm, keyval, value as usize],
        |_v: Vec<i64>| ()
    );
    // SAFETY: the value per the caller's contract.
    check(unsafe { pmpi::PMPI_Comm_set_attr(comm, keyval, value) })
}

/// `MPI_Comm_delete_attr` (runs the key's delete callback).
pub fn delete_attr(comm: MPI_Comm, keyval: c_int) -> MpiResult<()> {
    fake_first!("comm_delete_attr", [comm, keyval], |_v: Vec<i64>| ());
    // SAFETY: handles only; the callback was vouched for at `create_keyval`/`set_attr`.
    check(unsafe { pmpi::PMPI_Comm_delete_attr(comm, keyval) })
}

/// `MPI_Comm_test_inter`.
pub fn test_inter(comm: MPI_Comm) -> MpiResult<bool> {
    fake_first!("comm_test_inter", [comm], |v: Vec<i64>| v[0] != 0);
    let mut flag: c_int = 0;
    // SAFETY: a valid out-pointer.
    check(unsafe { pmpi::PMPI_Comm_test_inter(comm, &mut flag) })?;
    Ok(flag != 0)
}

/// `MPI_Comm_remote_size`.
pub fn remote_size(comm: MPI_Comm) -> MpiResult<c_int> {
    fake_first!("comm_remote_size", [comm], |v: Vec<i64>| v[0] as c_int);
    let mut n: c_int = 0;
    // SAFETY: a valid out-pointer.
    check(unsafe { pmpi::PMPI_Comm_remote_size(comm, &mut n) })?;
    Ok(n)
}

/// `MPI_Info_get_nkeys`.
pub fn info_get_nkeys(info: MPI_Info) -> MpiResult<c_int> {
    fake_first!("info_get_nkeys", [info], |v: Vec<i64>| v[0] as c_int);
    let mut n: c_int = 0;
    // SAFETY: a valid out-pointer.
    check(unsafe { pmpi::PMPI_Info_get_nkeys(info, &mut n) })?;
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

/// `MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)`: the processes of `comm` that share this
/// one's node.
pub fn split_type_shared(comm: MPI_Comm) -> MpiResult<MPI_Comm> {
    fake_first!("comm_split_type", [comm], |v: Vec<i64>| v[0] as MPI_Comm);
    let mut c = MPI_COMM_NULL();
    // SAFETY: a valid out-pointer; MPI reports a bad handle as an error.
    check(unsafe {
        pmpi::PMPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL(), &mut c)
    })?;
    Ok(c)
}

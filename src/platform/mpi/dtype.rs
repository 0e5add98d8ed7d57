//! Layer: platform. May use: nothing.
//!
//! Datatypes (MPI-4.0 chapter 5).

#[allow(unused_imports)]
use super::{MpiResult, check, fake_first};

/// `MPI_Pack_size_c`: an upper bound of the bytes `incount` elements of `datatype` pack
/// into. Fake: word 0 is the size.
pub fn pack_size_c(
    incount: crate::platform::abi::MPI_Count,
    datatype: crate::platform::abi::MPI_Datatype,
    comm: crate::platform::abi::MPI_Comm,
) -> MpiResult<crate::platform::abi::MPI_Count> {
    fake_first!("pack_size_c", [incount, datatype, comm], |v: Vec<i64>| v
        .first()
        .copied()
        .unwrap_or(0)
        as crate::platform::abi::MPI_Count);
    let mut size: crate::platform::abi::MPI_Count = 0;
    // SAFETY: a valid out-pointer; MPI reports a bad handle as an error.
    check(unsafe {
        crate::platform::api::pmpi::PMPI_Pack_size_c(incount, datatype, comm, &mut size)
    })?;
    Ok(size)
}

/// `MPI_Pack_c` into `outbuf` from `*position` on; `*position` advances past the packed
/// bytes. Fake: word 0 is the new position (the bytes are not written).
///
/// # Safety
/// `inbuf` holds `incount` elements of `datatype`.
pub unsafe fn pack_c(
    inbuf: *const core::ffi::c_void,
    incount: crate::platform::abi::MPI_Count,
    datatype: crate::platform::abi::MPI_Datatype,
    outbuf: &mut [u8],
    position: &mut crate::platform::abi::MPI_Count,
    comm: crate::platform::abi::MPI_Comm,
) -> MpiResult<()> {
    fake_first!(
        "pack_c",
        [inbuf, incount, datatype, outbuf.len(), *position, comm],
        |v: Vec<i64>| *position =
            v.first().copied().unwrap_or(0) as crate::platform::abi::MPI_Count
    );
    // SAFETY: the caller's input; our output of outbuf.len() bytes; a valid position.
    check(unsafe {
        crate::platform::api::pmpi::PMPI_Pack_c(
            inbuf,
            incount,
            datatype,
            outbuf.as_mut_ptr().cast(),
            outbuf.len() as crate::platform::abi::MPI_Count,
            position,
            comm,
        )
    })
}

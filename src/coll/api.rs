//! Collective hooks: one function per base collective, called by the generated entry
//! points of all its forms (blocking, `I*`, `*_init`, and the `_c` large-count forms, with
//! counts already widened to i64).
//!
//! At this stage every collective is forwarded to the system MPI through `native` (the
//! schedule engine replaces this); the hook records the bytes this rank contributes and
//! the path taken, for `SHIM_STATS`.

use core::ffi::{c_int, c_void};

use crate::abi::*;
use crate::coll::Call;
use crate::stats;

/// Declares forwarding hooks: `name(args) => bytes-expression;`.
macro_rules! forwarding_hooks {
    ($( $name:ident ( $($arg:ident : $ty:ty),* ) => $bytes:expr ; )*) => {$(
        #[allow(unused_variables, clippy::too_many_arguments, clippy::missing_safety_doc)]
        pub unsafe fn $name(call: Call, $($arg: $ty,)* native: &dyn Fn() -> c_int) -> c_int {
            if stats::enabled() {
                let (count, datatype): (i64, MPI_Datatype) = $bytes;
                stats::note_typed_bytes(count, datatype);
                stats::note_path(call.fid, "forwarded");
            }
            native()
        }
    )*};
}

forwarding_hooks! {
    barrier(comm: MPI_Comm) => (0, MPI_BYTE);
    bcast(buffer: *mut c_void, count: i64, datatype: MPI_Datatype, root: c_int, comm: MPI_Comm) => (count, datatype);
    gather(sendbuf: *const c_void, sendcount: i64, sendtype: MPI_Datatype, recvbuf: *mut c_void, recvcount: i64, recvtype: MPI_Datatype, root: c_int, comm: MPI_Comm) => (sendcount, sendtype);
    gatherv(sendbuf: *const c_void, sendcount: i64, sendtype: MPI_Datatype, recvbuf: *mut c_void, recvcounts: Counts, displs: Counts, recvtype: MPI_Datatype, root: c_int, comm: MPI_Comm) => (sendcount, sendtype);
    scatter(sendbuf: *const c_void, sendcount: i64, sendtype: MPI_Datatype, recvbuf: *mut c_void, recvcount: i64, recvtype: MPI_Datatype, root: c_int, comm: MPI_Comm) => (recvcount, recvtype);
    scatterv(sendbuf: *const c_void, sendcounts: Counts, displs: Counts, sendtype: MPI_Datatype, recvbuf: *mut c_void, recvcount: i64, recvtype: MPI_Datatype, root: c_int, comm: MPI_Comm) => (recvcount, recvtype);
    allgather(sendbuf: *const c_void, sendcount: i64, sendtype: MPI_Datatype, recvbuf: *mut c_void, recvcount: i64, recvtype: MPI_Datatype, comm: MPI_Comm) => (recvcount, recvtype);
    allgatherv(sendbuf: *const c_void, sendcount: i64, sendtype: MPI_Datatype, recvbuf: *mut c_void, recvcounts: Counts, displs: Counts, recvtype: MPI_Datatype, comm: MPI_Comm) => (sendcount, sendtype);
    alltoall(sendbuf: *const c_void, sendcount: i64, sendtype: MPI_Datatype, recvbuf: *mut c_void, recvcount: i64, recvtype: MPI_Datatype, comm: MPI_Comm) => (recvcount, recvtype);
    alltoallv(sendbuf: *const c_void, sendcounts: Counts, sdispls: Counts, sendtype: MPI_Datatype, recvbuf: *mut c_void, recvcounts: Counts, rdispls: Counts, recvtype: MPI_Datatype, comm: MPI_Comm) => (0, recvtype);
    alltoallw(sendbuf: *const c_void, sendcounts: Counts, sdispls: Counts, sendtypes: *const MPI_Datatype, recvbuf: *mut c_void, recvcounts: Counts, rdispls: Counts, recvtypes: *const MPI_Datatype, comm: MPI_Comm) => (0, MPI_BYTE);
    reduce(sendbuf: *const c_void, recvbuf: *mut c_void, count: i64, datatype: MPI_Datatype, op: MPI_Op, root: c_int, comm: MPI_Comm) => (count, datatype);
    allreduce(sendbuf: *const c_void, recvbuf: *mut c_void, count: i64, datatype: MPI_Datatype, op: MPI_Op, comm: MPI_Comm) => (count, datatype);
    reduce_scatter(sendbuf: *const c_void, recvbuf: *mut c_void, recvcounts: Counts, datatype: MPI_Datatype, op: MPI_Op, comm: MPI_Comm) => (0, datatype);
    reduce_scatter_block(sendbuf: *const c_void, recvbuf: *mut c_void, recvcount: i64, datatype: MPI_Datatype, op: MPI_Op, comm: MPI_Comm) => (recvcount, datatype);
    scan(sendbuf: *const c_void, recvbuf: *mut c_void, count: i64, datatype: MPI_Datatype, op: MPI_Op, comm: MPI_Comm) => (count, datatype);
    exscan(sendbuf: *const c_void, recvbuf: *mut c_void, count: i64, datatype: MPI_Datatype, op: MPI_Op, comm: MPI_Comm) => (count, datatype);
    neighbor_allgather(sendbuf: *const c_void, sendcount: i64, sendtype: MPI_Datatype, recvbuf: *mut c_void, recvcount: i64, recvtype: MPI_Datatype, comm: MPI_Comm) => (sendcount, sendtype);
    neighbor_allgatherv(sendbuf: *const c_void, sendcount: i64, sendtype: MPI_Datatype, recvbuf: *mut c_void, recvcounts: Counts, displs: Counts, recvtype: MPI_Datatype, comm: MPI_Comm) => (sendcount, sendtype);
    neighbor_alltoall(sendbuf: *const c_void, sendcount: i64, sendtype: MPI_Datatype, recvbuf: *mut c_void, recvcount: i64, recvtype: MPI_Datatype, comm: MPI_Comm) => (sendcount, sendtype);
    neighbor_alltoallv(sendbuf: *const c_void, sendcounts: Counts, sdispls: Counts, sendtype: MPI_Datatype, recvbuf: *mut c_void, recvcounts: Counts, rdispls: Counts, recvtype: MPI_Datatype, comm: MPI_Comm) => (0, sendtype);
    neighbor_alltoallw(sendbuf: *const c_void, sendcounts: Counts, sdispls: Counts, sendtypes: *const MPI_Datatype, recvbuf: *mut c_void, recvcounts: Counts, rdispls: Counts, recvtypes: *const MPI_Datatype, comm: MPI_Comm) => (0, MPI_BYTE);
}

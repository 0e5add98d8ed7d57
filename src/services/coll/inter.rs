//! Layer: services. May use: core, platform.
//!
//! The non-blocking and persistent collectives on intercommunicators (MPI-4.0 §6.2.2),
//! on the schedules of `algo::inter`. Blocking calls on intercommunicators go to the system
//! MPI (`Ctx::begin`); these forms do not, because Debian's MPICH 4.0.2 gets them wrong
//! (its persistent Gather, Scatter and Allgather move the data of the `*_init` call, not of
//! each `MPI_Start`; its `MPI_Ibcast` from the last rank of a group of two delivers
//! nothing; its persistent `MPI_Reduce_scatter_block` reduces stale data: README,
//! "Problems of the system MPI"). The blocking large-count (`_c`) calls run here too when
//! the library lacks them (Open MPI 4.1 and 5.0).
//!
//! Arguments are checked as on an intra-communicator, with the intercommunicator's rules:
//! the root argument is `MPI_ROOT` at the root, `MPI_PROC_NULL` at the other processes of
//! its group and the root's rank in the remote group elsewhere; arrays of counts,
//! displacements and datatypes have one entry per remote process (Reduce_scatter's
//! `recvcounts` one per local process); `MPI_IN_PLACE` is not allowed; Scan and Exscan are
//! not defined (`MPI_ERR_COMM`, as the system MPI reports).
#![allow(clippy::too_many_arguments)]

use core::ffi::{c_int, c_void};

use super::algo::Block;
use super::algo::inter::{self, Role};
use super::select::{Algo, Choice};
use super::{Coll, Ctx, Done, Raised, key};
use crate::core::sched::{Addr, Base, Data};
use crate::platform::abi::*;

fn choice() -> Choice {
    Choice::new(Algo::Linear)
}

impl Ctx<'_> {
    /// Processes in the remote group.
    pub fn remote(&self) -> c_int {
        self.st.remote_size
    }

    fn role(&self, root: c_int) -> Result<Role, Raised> {
        match root {
            MPI_ROOT => Ok(Role::Root),
            MPI_PROC_NULL => Ok(Role::Idle),
            r if (0..self.remote()).contains(&r) => Ok(Role::Leaf(r)),
            r => self.fail(
                MPI_ERR_ROOT,
                format_args!(
                    "root {r} is neither MPI_ROOT, MPI_PROC_NULL nor a rank of the remote group \
                     (size {})",
                    self.remote()
                ),
            ),
        }
    }

    pub(crate) fn no_in_place(&self, buf: *const c_void, what: &str) -> Result<(), Raised> {
        if core::ptr::eq(buf, MPI_IN_PLACE) {
            return self.fail(
                MPI_ERR_BUFFER,
                format_args!("MPI_IN_PLACE is not allowed for {what} on an intercommunicator"),
            );
        }
        Ok(())
    }

    /// A block of `count` elements of `dt` at `at`, checked.
    fn block(
        &self,
        at: Addr,
        buf: *const c_void,
        count: i64,
        dt: MPI_Datatype,
        names: (&str, &str),
    ) -> Result<Block, Raised> {
        self.check_count(count, names.0)?;
        let ti = self.type_info(dt, names.1)?;
        self.check_buffer(buf, count, dt, "the buffer")?;
        if at.base == Base::Send {
            crate::platform::counters::note_bytes((count * ti.size) as u64);
        }
        Ok(Block::new(at, count, dt, &ti))
    }
}

pub fn barrier(c: &Ctx<'_>) -> Result<Done, Raised> {
    let q = c.remote();
    let k = key(
        Coll::Barrier,
        &choice(),
        0,
        0,
        MPI_OP_NULL(),
        Vec::new(),
        Vec::new(),
    );
    c.launch(k, core::ptr::null(), core::ptr::null_mut(), || {
        Ok(inter::barrier(q))
    })
}

pub fn bcast(
    c: &Ctx<'_>,
    buffer: *mut c_void,
    count: i64,
    datatype: MPI_Datatype,
    root: c_int,
) -> Result<Done, Raised> {
    let role = c.role(root)?;
    c.no_in_place(buffer, "the buffer")?;
    let b = if role == Role::Idle {
        None
    } else {
        Some(c.block(
            Addr::recv(0),
            buffer,
            count,
            datatype,
            ("count", "datatype"),
        )?)
    };
    let q = c.remote();
    let data = b.map_or(Data::new(Addr::recv(0), 0, MPI_BYTE()), |b| b.data);
    let k = key(
        Coll::Bcast,
        &choice(),
        root,
        0,
        MPI_OP_NULL(),
        vec![datatype],
        vec![count],
    );
    c.launch(k, core::ptr::null(), buffer, || {
        Ok(inter::bcast(role, data, q))
    })
}

/// The root's blocks of Gather(v)/Scatter(v): `counts[j]` elements at `displs[j]`.
fn rooted_blocks(
    c: &Ctx<'_>,
    at: fn(i64) -> Addr,
    buf: *const c_void,
    counts: &[i64],
    displs: &[i64],
    dt: MPI_Datatype,
    names: (&str, &str),
) -> Result<Vec<Block>, Raised> {
    let ti = c.type_info(dt, names.1)?;
    if counts.iter().any(|&n| n > 0) {
        c.check_buffer(buf, 1, dt, "the root's buffer")?;
    }
    Ok(counts
        .iter()
        .zip(displs)
        .map(|(&n, &d)| Block::new(at(d * ti.extent), n, dt, &ti))
        .collect())
}

/// One side of a rooted call (the root's many blocks, or another process's one block).
struct Side<'n> {
    buf: *const c_void,
    at: fn(i64) -> Addr,
    dt: MPI_Datatype,
    names: (&'n str, &'n str),
}

/// Gather(v) and Scatter(v) alike: the root checks its blocks, one per remote process from
/// `arrays` (counts, displacements), a process of the other group its one block of `count`
/// elements, the root's other group members nothing. Returns the role, the root's blocks,
/// the other block and the counts for the cache key.
fn rooted_parts(
    c: &Ctx<'_>,
    root: c_int,
    root_side: Side<'_>,
    arrays: &dyn Fn() -> Result<(Vec<i64>, Vec<i64>), Raised>,
    own: Side<'_>,
    count: i64,
) -> Result<(Role, Vec<Block>, Option<Block>, Vec<i64>), Raised> {
    let role = c.role(root)?;
    let (mut blocks, mut one, mut kc) = (Vec::new(), None, Vec::new());
    match role {
        Role::Root => {
            c.no_in_place(root_side.buf, "the root's buffer")?;
            let (counts, displs) = arrays()?;
            let (buf, at, dt) = (root_side.buf, root_side.at, root_side.dt);
            blocks = rooted_blocks(c, at, buf, &counts, &displs, dt, root_side.names)?;
            kc.extend(counts);
            kc.extend(displs);
        }
        Role::Leaf(_) => {
            c.no_in_place(own.buf, "the buffer")?;
            one = Some(c.block((own.at)(0), own.buf, count, own.dt, own.names)?);
            kc.push(count);
        }
        Role::Idle => {}
    }
    Ok((role, blocks, one, kc))
}

/// Gather and Gatherv: `recv` is the root's (counts, displacements), one per remote rank.
pub fn gather(
    c: &Ctx<'_>,
    coll: Coll,
    sendbuf: *const c_void,
    sendcount: i64,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recv: &dyn Fn() -> Result<(Vec<i64>, Vec<i64>), Raised>,
    recvtype: MPI_Datatype,
    root: c_int,
) -> Result<Done, Raised> {
    let root_side = Side {
        buf: recvbuf,
        at: Addr::recv,
        dt: recvtype,
        names: ("recvcounts", "recvtype"),
    };
    let own = Side {
        buf: sendbuf,
        at: Addr::send,
        dt: sendtype,
        names: ("sendcount", "sendtype"),
    };
    let (role, rblocks, send, kc) = rooted_parts(c, root, root_side, recv, own, sendcount)?;
    let types = [sendtype, recvtype];
    let k = key(coll, &choice(), root, 0, MPI_OP_NULL(), types.to_vec(), kc);
    c.launch(k, sendbuf, recvbuf, || {
        Ok(inter::gather(role, send, &rblocks))
    })
}

/// Scatter and Scatterv: `send` is the root's (counts, displacements), one per remote rank.
pub fn scatter(
    c: &Ctx<'_>,
    coll: Coll,
    sendbuf: *const c_void,
    send: &dyn Fn() -> Result<(Vec<i64>, Vec<i64>), Raised>,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcount: i64,
    recvtype: MPI_Datatype,
    root: c_int,
) -> Result<Done, Raised> {
    let root_side = Side {
        buf: sendbuf,
        at: Addr::send,
        dt: sendtype,
        names: ("sendcounts", "sendtype"),
    };
    let own = Side {
        buf: recvbuf,
        at: Addr::recv,
        dt: recvtype,
        names: ("recvcount", "recvtype"),
    };
    let (role, sblocks, recv, kc) = rooted_parts(c, root, root_side, send, own, recvcount)?;
    let types = [sendtype, recvtype];
    let k = key(coll, &choice(), root, 0, MPI_OP_NULL(), types.to_vec(), kc);
    c.launch(k, sendbuf, recvbuf, || {
        Ok(inter::scatter(role, &sblocks, recv))
    })
}

/// Allgather(v) and Alltoall(v, w): (byte displacement, count, type) per remote rank for
/// each side (Allgather's send side repeats its one block).
pub fn exchange(
    c: &Ctx<'_>,
    coll: Coll,
    sendbuf: *const c_void,
    send: Vec<(i64, i64, MPI_Datatype)>,
    recvbuf: *mut c_void,
    recv: Vec<(i64, i64, MPI_Datatype)>,
) -> Result<Done, Raised> {
    c.no_in_place(sendbuf, "the send buffer")?;
    let (mut types, mut kc) = (Vec::new(), Vec::new());
    let mut side =
        |at: fn(i64) -> Addr, buf: *const c_void, v: &[(i64, i64, MPI_Datatype)], names| {
            v.iter()
                .map(|&(d, n, t)| {
                    types.push(t);
                    kc.extend([d, n]);
                    c.block(at(d), buf, n, t, names)
                })
                .collect::<Result<Vec<Block>, Raised>>()
        };
    let sblocks = side(Addr::send, sendbuf, &send, ("sendcount", "sendtype"))?;
    let rblocks = side(Addr::recv, recvbuf, &recv, ("recvcount", "recvtype"))?;
    let k = key(coll, &choice(), 0, 0, MPI_OP_NULL(), types, kc);
    c.launch(k, sendbuf, recvbuf, || {
        Ok(inter::exchange(&sblocks, &rblocks))
    })
}

pub fn reduce(
    c: &Ctx<'_>,
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: i64,
    datatype: MPI_Datatype,
    op: MPI_Op,
    root: c_int,
) -> Result<Done, Raised> {
    let role = c.role(root)?;
    let r = c.reduction(count, datatype, op)?;
    match role {
        Role::Root => {
            c.no_in_place(recvbuf, "the receive buffer")?;
            c.check_buffer(recvbuf, count, datatype, "the receive buffer")?;
        }
        Role::Leaf(_) => {
            c.no_in_place(sendbuf, "the send buffer")?;
            c.check_buffer(sendbuf, count, datatype, "the send buffer")?;
        }
        Role::Idle => {}
    }
    let q = c.remote();
    let k = key(
        Coll::Reduce,
        &choice(),
        root,
        0,
        op,
        vec![datatype],
        vec![count],
    );
    c.launch(k, sendbuf, recvbuf, || Ok(inter::reduce(role, &r, q)))
}

pub fn allreduce(
    c: &Ctx<'_>,
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: i64,
    datatype: MPI_Datatype,
    op: MPI_Op,
) -> Result<Done, Raised> {
    let r = c.reduction(count, datatype, op)?;
    c.no_in_place(sendbuf, "the send buffer")?;
    c.check_buffer(sendbuf, count, datatype, "the send buffer")?;
    c.check_buffer(recvbuf, count, datatype, "the receive buffer")?;
    let q = c.remote();
    let k = key(
        Coll::Allreduce,
        &choice(),
        0,
        0,
        op,
        vec![datatype],
        vec![count],
    );
    c.launch(k, sendbuf, recvbuf, || Ok(inter::allreduce(&r, q)))
}

/// Reduce_scatter(_block). The two groups' vectors have the same length n (MPI-4.0
/// §6.10): Reduce_scatter_block's is this group's size times `recvcounts[0]`, split
/// evenly over the remote group; Reduce_scatter's is the sum of this group's
/// `recvcounts`, and since the senders do not know how the remote group splits it, each
/// sends its whole vector and each receiver keeps its block.
pub fn reduce_scatter(
    c: &Ctx<'_>,
    coll: Coll,
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    counts: Vec<i64>,
    datatype: MPI_Datatype,
    op: MPI_Op,
) -> Result<Done, Raised> {
    let me = c.rank() as usize;
    let r = c.reduction(counts[me], datatype, op)?;
    let n: i64 = counts.iter().sum();
    c.no_in_place(sendbuf, "the send buffer")?;
    c.check_buffer(sendbuf, n, datatype, "the send buffer")?;
    c.check_buffer(recvbuf, r.count, datatype, "the receive buffer")?;
    let q = c.remote() as i64;
    let (len, at, sends): (i64, i64, Vec<(i64, i64)>) = if coll == Coll::ReduceScatterBlock {
        if n % q != 0 {
            return c.fail(
                MPI_ERR_COUNT,
                format_args!(
                    "the send vector ({n} elements) does not split evenly over the remote group \
                     ({q} processes): the groups' vectors differ in length"
                ),
            );
        }
        let b = n / q;
        (r.count, 0, (0..q).map(|j| (j * b, b)).collect())
    } else {
        let at = counts[..me].iter().sum();
        (n, at, (0..q).map(|_| (0, n)).collect())
    };
    let k = key(coll, &choice(), 0, 0, op, vec![datatype], counts.clone());
    c.launch(k, sendbuf, recvbuf, || {
        Ok(inter::reduce_scatter(&r, len, at, &sends))
    })
}

/// Scan and Exscan are defined on intra-communicators only (MPI-4.0 §6.11).
pub fn scan(c: &Ctx<'_>) -> Result<Done, Raised> {
    c.fail(
        MPI_ERR_COMM,
        "scans are not defined on intercommunicators (MPI-4.0 §6.11)",
    )
}

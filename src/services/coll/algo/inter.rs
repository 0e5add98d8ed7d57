//! Layer: services. May use: core, platform.
//!
//! Intercommunicator collectives (MPI-4.0 §6.2.2): every message goes between the two
//! groups, so every peer below is a rank of the remote group (of size `remote`).
//!
//! One algorithm, `inter-linear`: each process exchanges its blocks directly with the
//! remote processes that need them. An intercommunicator carries no messages within a
//! group, so the trees of the intra-communicator algorithms would need a second
//! communicator; the system MPI (`native`) keeps serving blocking calls, and these
//! schedules serve the non-blocking and persistent forms, which Debian's MPICH 4.0.2 gets
//! wrong on intercommunicators (README, "Problems of the system MPI").
//!
//! Reductions combine the remote group's contributions in rank order (`dst = src op dst`
//! from the highest rank down), so non-commutative operations are correct.

use super::{Block, Reduction};
use crate::core::sched::{ActionId, Addr, Builder, Data, Schedule};

pub const NAME: &str = "inter-linear";

/// This process's part in a rooted intercommunicator collective (the `root` argument).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// `MPI_ROOT`: the root, talking to every process of the remote group.
    Root,
    /// `MPI_PROC_NULL`: another process of the root's group, which takes no part.
    Idle,
    /// A process of the other group; the root is this rank of the remote group.
    Leaf(i32),
}

/// Every process has entered once every remote process has (MPI-4.0 §6.3).
pub fn barrier(remote: i32) -> Schedule {
    let mut b = Builder::new(NAME);
    let token = Data::new(Addr::recv(0), 0, crate::platform::abi::MPI_BYTE());
    for j in 0..remote {
        b.send(token, j, &[]);
        b.recv(token, j, &[]);
    }
    b.finish()
}

/// Bcast: the root's buffer to every remote process.
pub fn bcast(role: Role, data: Data, remote: i32) -> Schedule {
    let mut b = Builder::new(NAME);
    match role {
        Role::Root => {
            for j in 0..remote {
                b.send(data, j, &[]);
            }
        }
        Role::Leaf(root) => {
            b.recv(data, root, &[]);
        }
        Role::Idle => {}
    }
    b.finish()
}

/// Gather(v): the root receives block `j` from remote process `j`.
pub fn gather(role: Role, send: Option<Block>, recv: &[Block]) -> Schedule {
    let mut b = Builder::new(NAME);
    match role {
        Role::Root => {
            for (j, r) in recv.iter().enumerate() {
                if !r.empty() {
                    b.recv(r.data, j as i32, &[]);
                }
            }
        }
        Role::Leaf(root) => {
            if let Some(s) = send.filter(|s| !s.empty()) {
                b.send(s.data, root, &[]);
            }
        }
        Role::Idle => {}
    }
    b.finish()
}

/// Scatter(v): the root sends block `j` to remote process `j`.
pub fn scatter(role: Role, send: &[Block], recv: Option<Block>) -> Schedule {
    let mut b = Builder::new(NAME);
    match role {
        Role::Root => {
            for (j, s) in send.iter().enumerate() {
                if !s.empty() {
                    b.send(s.data, j as i32, &[]);
                }
            }
        }
        Role::Leaf(root) => {
            if let Some(r) = recv.filter(|r| !r.empty()) {
                b.recv(r.data, root, &[]);
            }
        }
        Role::Idle => {}
    }
    b.finish()
}

/// Allgather(v), Alltoall(v, w): block `sends[j]` to remote process `j`, block
/// `recvs[j]` from it (Allgather sends the same block to all).
pub fn exchange(sends: &[Block], recvs: &[Block]) -> Schedule {
    let mut b = Builder::new(NAME);
    for (j, (s, r)) in sends.iter().zip(recvs).enumerate() {
        if !r.empty() {
            b.recv(r.data, j as i32, &[]);
        }
        if !s.empty() {
            b.send(s.data, j as i32, &[]);
        }
    }
    b.finish()
}

/// Receives `len` elements of `r`'s type from every remote process into scratch and
/// reduces the elements `at..at + r.count` of them, in remote rank order, into `out`.
/// Returns the last action.
fn combine(
    b: &mut Builder,
    r: &Reduction,
    len: i64,
    at: i64,
    remote: i32,
    out: Addr,
) -> Option<ActionId> {
    if r.count == 0 || remote == 0 {
        return None;
    }
    let whole = Reduction { count: len, ..*r };
    let bufs: Vec<(Addr, ActionId)> = (0..remote)
        .map(|j| {
            let t = b.scratch_for(len, &r.ti);
            (t, b.recv(whole.data(t), j, &[]))
        })
        .collect();
    let part = |a: Addr| a.add(at * r.ti.extent);
    let (last_buf, last_recv) = bufs[remote as usize - 1];
    let mut last = b.copy(r.data(part(last_buf)), r.data(out), &[last_recv]);
    for &(t, rv) in bufs[..remote as usize - 1].iter().rev() {
        last = b.reduce(part(t), out, r.count, r.dt, r.op, &[last, rv]);
    }
    Some(last)
}

/// Reduce: the root's result is the remote group's vectors combined in rank order.
pub fn reduce(role: Role, r: &Reduction, remote: i32) -> Schedule {
    let mut b = Builder::new(NAME);
    match role {
        Role::Root => {
            combine(&mut b, r, r.count, 0, remote, Addr::recv(0));
        }
        Role::Leaf(root) => {
            if r.count > 0 {
                b.send(r.data(Addr::send(0)), root, &[]);
            }
        }
        Role::Idle => {}
    }
    b.finish()
}

/// Allreduce: every process's result is the remote group's vectors combined.
pub fn allreduce(r: &Reduction, remote: i32) -> Schedule {
    let mut b = Builder::new(NAME);
    if r.count > 0 {
        for j in 0..remote {
            b.send(r.data(Addr::send(0)), j, &[]);
        }
    }
    combine(&mut b, r, r.count, 0, remote, Addr::recv(0));
    b.finish()
}

/// Reduce_scatter(_block): `r.count` elements of the result reach this process, taken at
/// element `at` of the `len` elements each remote process sends it; `sends[j]` is the
/// (first element, count) of this process's send vector that remote process `j` gets.
pub fn reduce_scatter(r: &Reduction, len: i64, at: i64, sends: &[(i64, i64)]) -> Schedule {
    let mut b = Builder::new(NAME);
    for (j, &(lo, n)) in sends.iter().enumerate() {
        if n > 0 {
            let d = Data::new(Addr::send(lo * r.ti.extent), n, r.dt);
            b.send(d, j as i32, &[]);
        }
    }
    combine(&mut b, r, len, at, sends.len() as i32, Addr::recv(0));
    b.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::sched::Action;

    fn peers(s: &Schedule) -> (Vec<i32>, Vec<i32>) {
        let (mut snd, mut rcv) = (Vec::new(), Vec::new());
        for a in &s.actions {
            match a {
                Action::Send { peer, .. } => snd.push(*peer),
                Action::Recv { peer, .. } => rcv.push(*peer),
                _ => {}
            }
        }
        (snd, rcv)
    }

    #[test]
    fn barrier_talks_to_every_remote_process() {
        let (s, r) = peers(&barrier(3));
        assert_eq!(s, vec![0, 1, 2]);
        assert_eq!(r, vec![0, 1, 2]);
    }

    #[test]
    fn only_the_root_and_the_remote_group_move_data() {
        let d = Data::new(Addr::recv(0), 4, crate::platform::abi::MPI_INT());
        assert_eq!(peers(&bcast(Role::Root, d, 3)).0, vec![0, 1, 2]);
        assert_eq!(peers(&bcast(Role::Leaf(1), d, 3)).1, vec![1]);
        assert!(bcast(Role::Idle, d, 3).is_empty());
    }
}

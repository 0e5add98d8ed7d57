//! Gather(v) and Scatter(v): linear. The root posts one receive (send) per rank at once
//! and the system MPI moves them concurrently; every other rank sends (receives) one block.
//! The root's own block is a local typed copy unless it is `MPI_IN_PLACE`.

use super::{Blk, Me};
use crate::sched::{Builder, Schedule};

/// `send`: this rank's contribution (`None` = in place at the root); `recv`: the root's
/// blocks, one per rank (ignored elsewhere).
pub fn gather_linear(me: Me, send: Option<Blk>, recv: &[Blk], root: i32) -> Schedule {
    let mut b = Builder::new("linear");
    if me.rank == root {
        for (i, r) in recv.iter().enumerate() {
            let i = i as i32;
            if i == root {
                if let Some(s) = send {
                    if !s.empty() {
                        b.copy(s.d, r.d, &[]);
                    }
                }
            } else if !r.empty() {
                b.recv(r.d, i, &[]);
            }
        }
    } else if let Some(s) = send {
        if !s.empty() {
            b.send(s.d, root, &[]);
        }
    }
    b.finish()
}

/// `send`: the root's blocks, one per rank; `recv`: this rank's block (`None` = in place
/// at the root).
pub fn scatter_linear(me: Me, send: &[Blk], recv: Option<Blk>, root: i32) -> Schedule {
    let mut b = Builder::new("linear");
    if me.rank == root {
        for (i, s) in send.iter().enumerate() {
            let i = i as i32;
            if i == root {
                if let Some(r) = recv {
                    if !r.empty() {
                        b.copy(s.d, r.d, &[]);
                    }
                }
            } else if !s.empty() {
                b.send(s.d, i, &[]);
            }
        }
    } else if let Some(r) = recv {
        if !r.empty() {
            b.recv(r.d, root, &[]);
        }
    }
    b.finish()
}

//! Barrier: dissemination (Hensgen, Finkel, Manber; Hoefler digest §3): in round k every
//! rank signals rank + 2^k and waits for rank - 2^k; after ceil(log2 P) rounds everyone
//! has heard, directly or not, from everyone.

use super::Me;
use crate::abi::MPI_BYTE;
use crate::sched::{Addr, Builder, Data, Schedule};

pub fn dissemination(me: Me) -> Schedule {
    let mut b = Builder::new("dissemination");
    let empty = Data::new(Addr::recv(0), 0, MPI_BYTE);
    let mut prev: Option<u32> = None;
    let mut k = 1;
    while k < me.size {
        let to = (me.rank + k) % me.size;
        let from = super::sub_mod(me.rank, k, me.size);
        let deps: Vec<u32> = prev.into_iter().collect();
        b.send(empty, to, &deps);
        prev = Some(b.recv(empty, from, &deps));
        k *= 2;
    }
    b.finish()
}

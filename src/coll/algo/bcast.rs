//! Broadcast: binomial tree over ranks relative to the root (Hoefler digest §3): a rank
//! receives once from its parent and forwards to its children, largest subtree first.

use super::{Me, sub_mod};
use crate::sched::{Builder, Data, Schedule};

pub fn binomial(me: Me, data: Data, bytes: i64, root: i32) -> Schedule {
    let mut b = Builder::new("binomial");
    if bytes == 0 || me.size == 1 {
        return b.finish();
    }
    let p = me.size;
    let vr = sub_mod(me.rank, root, p);
    let mut mask = 1;
    let mut got: Vec<u32> = Vec::new();
    while mask < p {
        if vr & mask != 0 {
            got.push(b.recv(data, (vr - mask + root) % p, &[]));
            break;
        }
        mask <<= 1;
    }
    mask >>= 1;
    while mask > 0 {
        if vr + mask < p {
            b.send(data, (vr + mask + root) % p, &got);
        }
        mask >>= 1;
    }
    b.finish()
}

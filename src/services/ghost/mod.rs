//! Layer: services. May use: core, platform.
//!
//! Casper-style ghost processes: asynchronous progress for MPI RMA.
//!
//! Design: `../shared/design/seed-si-casper-mtmpi-thesis.md` §4 and Appendix A. With
//! `SHIM_GHOSTS=N`, `MPI_Init*` sets N ranks of every (virtual) node aside as ghosts. They
//! never return to the application: they sit in the MPI library (so its progress engine
//! runs, and the RMA aimed at them completes while the users compute) and serve commands
//! until every user of their node has finalized. The application sees a user world without
//! them: every `MPI_COMM_WORLD` argument is mapped (`map_world`, called by the generated
//! entry points of every table entry marked `W`).
//!
//! Windows (`win.rs`) differ from Casper's in one point: ghosts never take part in a
//! collective call after init. Casper has ghosts join each window's creation, which needs
//! a global lock to order concurrent creations on overlapping groups. Here one internal
//! dynamic window over users and ghosts, created at init, serves every window; a window's
//! node-shared memory is a POSIX shared-memory object that the node's ghosts map and attach
//! on command, both local operations, and passive-target locks are the shim's own lock
//! words in that memory.

pub mod common;
pub mod direct;
pub mod serve;
pub mod win;

use core::ffi::c_int;

use crate::platform::abi::*;
use crate::platform::api::pmpi;
use crate::platform::config::{self, GhostPlacement};
use crate::platform::mpi::{coll, comm};

pub use common::{Handled, Layout, layout};
pub use win::{Routed, route};

/// Which local ranks of a node of `n` processes are ghosts.
pub fn ghost_positions(n: usize, g: usize, how: GhostPlacement) -> Vec<usize> {
    match how {
        GhostPlacement::First => (0..g).collect(),
        GhostPlacement::Last => (n - g..n).collect(),
        GhostPlacement::Spread => (0..g).map(|i| i * n / g).collect(),
    }
}

/// Prints the reason on this rank and ends the job cleanly on every rank (all of them
/// call this with the same decision), with the status of every configuration error (2).
fn fail_everywhere(msg: &str) -> ! {
    crate::platform::log::raw_stderr(&format!(
        "{} configuration error: {msg}\n",
        crate::platform::log::prefix()
    ));
    // MPI is initialized; every process makes these calls
    let _ = coll::barrier(MPI_COMM_WORLD());
    // SAFETY: the process's last MPI call (it exits next).
    unsafe { pmpi::PMPI_Finalize() };
    std::process::exit(2);
}

/// Where one process sits: its (virtual) node, its index there and the node's size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Place {
    node: (u64, usize),
    local: usize,
    size: usize,
}

/// Every world rank's place, from the census of init: a node's processes in world rank
/// order ([`crate::platform::proc::Census::local`]), split into virtual nodes of `rpn` processes.
fn places(census: &crate::platform::proc::Census, rpn: Option<u32>) -> Vec<Place> {
    (0..census.nodes.len())
        .map(|r| {
            let k = census.nodes[r];
            let (pl, ps) = census.local(r);
            match rpn.map(|k| k as usize) {
                Some(v) => Place {
                    node: (k, pl / v),
                    local: pl % v,
                    size: v.min(ps - (pl / v) * v),
                },
                None => Place {
                    node: (k, 0),
                    local: pl,
                    size: ps,
                },
            }
        })
        .collect()
}

/// Sets the ghosts aside (called in `MPI_Init*` after the configuration was agreed on, with
/// every rank's node from that agreement). Returns in user processes only; ghosts serve
/// and exit. Every rank computes the same layout from the census, so the only collective
/// calls are the user world's split, the control duplicate and the internal window.
pub fn setup(c: &config::Config, census: &crate::platform::proc::Census) {
    if c.ghosts == 0 {
        return;
    }
    let g = c.ghosts as usize;
    // MPI is initialized
    let rank = comm::rank(MPI_COMM_WORLD()).unwrap_or(0);
    let all = places(census, c.ranks_per_node);
    // Every rank sees the same table and decides alike, before anyone becomes a ghost.
    let min_local = all.iter().map(|p| p.size).min().unwrap_or(0);
    if g >= min_local {
        let vnode = match c.ranks_per_node {
            Some(k) => format!(" (SHIM_RANKS_PER_NODE={k})"),
            None => String::new(),
        };
        fail_everywhere(&format!(
            "SHIM_GHOSTS={g} leaves a node without user processes: the smallest node{vnode} has {min_local} processes; launch more ranks per node or set fewer ghosts (SHIM_GHOSTS must be below the number of processes on every node)"
        ));
    }
    let ghost_at = |p: &Place| ghost_positions(p.size, g, c.ghost_placement).contains(&p.local);
    let is_ghost = ghost_at(&all[rank as usize]);
    // collective calls over the real world in the same order everywhere
    let split = comm::split(MPI_COMM_WORLD(), is_ghost as c_int, rank).unwrap_or(MPI_COMM_NULL());
    let ctl = comm::dup(MPI_COMM_WORLD()).unwrap_or(MPI_COMM_NULL());
    let mut keys: Vec<(u64, usize)> = all.iter().map(|p| p.node).collect();
    keys.sort_unstable();
    keys.dedup();
    let node_of = |k: (u64, usize)| keys.binary_search(&k).expect("node key");
    let mut lay = Layout {
        ghosts: g,
        user_world_rank: Vec::new(),
        user_node: Vec::new(),
        user_local: Vec::new(),
        node_ghosts: vec![Vec::new(); keys.len()],
        ctl,
        balance: c.ghost_balance,
        direct: c.ghost_direct,
    };
    let mut users_on = vec![0usize; keys.len()];
    for (r, p) in all.iter().enumerate() {
        let n = node_of(p.node);
        if ghost_at(p) {
            lay.node_ghosts[n].push(r as i32);
        } else {
            lay.user_world_rank.push(r as i32);
            lay.user_node.push(n);
            lay.user_local.push(users_on[n]);
            users_on[n] += 1;
        }
    }
    let lay = common::set_layout(lay);
    common::create_global(lay);
    if is_ghost {
        serve::run(lay, split);
    }
    if crate::platform::proc::oversubscribed() {
        // Users too: an origin waiting for a ghost's answer on a core shared with a
        // computing rank is the other half of the delay (see `serve::short_slice`).
        serve::short_slice();
    }
    let _ = comm::set_name(split, c"MPI_COMM_WORLD");
    crate::platform::proc::set_user_world(Some(split));
    common::open_global();
    tracing::info!(target: "shim::ghost", "{} ghost(s) per node: {} users, {} nodes", g, lay.user_world_rank.len(), keys.len());
}

/// In a user's `MPI_Finalize`, before the shim's own finalization: tells the node's
/// ghosts, and frees the internal windows with them (collective over the real world).
pub fn finalize_user() {
    let Some(lay) = layout() else {
        return;
    };
    if !crate::platform::proc::ghosts_active() {
        return;
    }
    win::report_unfreed_windows();
    let me = crate::platform::proc::world().rank as usize;
    for &gh in &lay.node_ghosts[lay.user_node[me]] {
        common::command(lay, gh, common::Cmd::Finalize, &[], None);
    }
    common::close_global();
    crate::platform::proc::set_user_world(None);
}

/// The predefined world attributes (`MPI_TAG_UB`, `MPI_UNIVERSE_SIZE`, `MPI_APPNUM`, ...)
/// live on the real world (MPI-4.0 §9.1.2 attaches them to `MPI_COMM_WORLD`; MPICH
/// answers them on every communicator, Open MPI only there): a query on the user world
/// for one of them goes there.
pub fn world_attr_comm(comm: MPI_Comm, keyval: c_int) -> MPI_Comm {
    if crate::platform::proc::ghosts_active()
        && comm == crate::platform::proc::user_world()
        && matches!(
            keyval,
            MPI_TAG_UB
                | MPI_HOST
                | MPI_IO
                | MPI_WTIME_IS_GLOBAL
                | MPI_UNIVERSE_SIZE
                | MPI_APPNUM
                | MPI_LASTUSEDCODE
        )
    {
        MPI_COMM_WORLD()
    } else {
        comm
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn places_from_the_census() {
        // ranks 0, 2, 3 on host A; 1, 4 on host B
        let c = crate::platform::proc::Census {
            nodes: vec![7, 9, 7, 7, 9],
            machines: vec![7, 9, 7, 7, 9],
            cpus: vec![2; 5],
        };
        let p = places(&c, None);
        assert_eq!(
            p[3],
            Place {
                node: (7, 0),
                local: 2,
                size: 3
            }
        );
        assert_eq!(
            p[4],
            Place {
                node: (9, 0),
                local: 1,
                size: 2
            }
        );
        // virtual nodes of 2: A = {0, 2} {3}, B = {1, 4}
        let v = places(&c, Some(2));
        assert_eq!(
            v[2],
            Place {
                node: (7, 0),
                local: 1,
                size: 2
            }
        );
        assert_eq!(
            v[3],
            Place {
                node: (7, 1),
                local: 0,
                size: 1
            }
        );
        assert_eq!(
            v[1],
            Place {
                node: (9, 0),
                local: 0,
                size: 2
            }
        );
    }

    #[test]
    fn placements() {
        assert_eq!(ghost_positions(4, 1, GhostPlacement::First), vec![0]);
        assert_eq!(ghost_positions(4, 1, GhostPlacement::Last), vec![3]);
        assert_eq!(ghost_positions(4, 2, GhostPlacement::Last), vec![2, 3]);
        assert_eq!(ghost_positions(8, 2, GhostPlacement::Spread), vec![0, 4]);
        assert_eq!(ghost_positions(5, 3, GhostPlacement::Spread), vec![0, 1, 3]);
    }
}

//! Layer: services. May use: core, platform.
//!
//! `SHIM_CALIBRATE=1`: measures the model's parameters at `MPI_Init` (a fraction of a
//! second). Rank 0 measures, with rank 1 as its partner, and broadcasts the result, so
//! every rank decides with the same numbers.
//!
//! Point-to-point parameters follow Hoefler's low-overhead LogGP method (digest §8.3):
//! `PRTT(n, d, s)` is the time for n messages of s bytes sent d µs apart and one reply;
//! `o = (PRTT(n, d, s) - PRTT(1, 0, s)) / (n - 1) - d` with d larger than the gap,
//! `g + (s - 1) G = (PRTT(n, 0, s) - PRTT(1, 0, s)) / (n - 1)` (g from small s, G from the
//! slope between large s), and `L = PRTT(1, 0, 1) / 2 - 2o`. The eager limit is where the
//! one-way time jumps by more than a latency beyond what G predicts. γ and the copy cost
//! are timed on this rank; the per-call and per-message costs of the shim's own schedules
//! (`sched`, `o`) by running schedules on `MPI_COMM_SELF`, those of the system MPI
//! (`native_call`) by its own collective there.

use core::ffi::{c_int, c_void};
use std::sync::Arc;

use super::model::{NAMES, Params};
use crate::core::sched::run::Run;
use crate::core::sched::{Addr, Builder, Data};
use crate::platform::abi::*;
use crate::platform::api::pmpi;
use crate::platform::mpi::{coll, comm as mpi_comm, p2p};

fn now() -> f64 {
    // MPI_Wtime reports no error (MPI-4.0 §9.6): it stays a direct call.
    // SAFETY: no arguments.
    unsafe { pmpi::PMPI_Wtime() * 1e6 }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    v[v.len() / 2]
}

fn spin(us: f64) {
    let t = now();
    while now() - t < us {}
}

/// PRTT(n, d, s) between ranks 0 and 1 of `comm`, median of `reps`, as seen by rank 0
/// (rank 1 returns 0).
fn prtt(comm: MPI_Comm, rank: c_int, n: usize, d: f64, s: usize, reps: usize) -> f64 {
    let mut buf = vec![0u8; s.max(1)];
    let mut times = Vec::with_capacity(reps);
    let tag = 7;
    // codes unchecked, as the measurement never did
    let _ = coll::barrier(comm);
    // SAFETY: `buf` holds at least `s` bytes and outlives the blocking calls; statuses are
    // ignored.
    unsafe {
        for _ in 0..reps + 2 {
            if rank == 0 {
                let t = now();
                for i in 0..n {
                    if i > 0 && d > 0.0 {
                        spin(d);
                    }
                    let _ = p2p::send(
                        buf.as_mut_ptr().cast(),
                        s as c_int,
                        MPI_BYTE(),
                        1,
                        tag,
                        comm,
                    );
                }
                let _ = p2p::recv(
                    buf.as_mut_ptr().cast(),
                    s as c_int,
                    MPI_BYTE(),
                    1,
                    tag,
                    comm,
                );
                times.push(now() - t);
            } else if rank == 1 {
                for _ in 0..n {
                    let _ = p2p::recv(
                        buf.as_mut_ptr().cast(),
                        s as c_int,
                        MPI_BYTE(),
                        0,
                        tag,
                        comm,
                    );
                }
                let _ = p2p::send(
                    buf.as_mut_ptr().cast(),
                    s as c_int,
                    MPI_BYTE(),
                    0,
                    tag,
                    comm,
                );
            }
        }
    }
    if rank == 0 {
        median(times.split_off(2))
    } else {
        0.0
    }
}

/// Point-to-point parameters, measured by ranks 0 and 1 (others get zeros).
fn point_to_point(p: &mut Params, comm: MPI_Comm, rank: c_int) {
    let n = 16;
    let reps = 15;
    let base = prtt(comm, rank, 1, 0.0, 8, reps);
    let o = ((prtt(comm, rank, n, base, 8, reps) - base) / (n - 1) as f64 - base).max(0.01);
    let g = ((prtt(comm, rank, n, 0.0, 8, reps) - base) / (n - 1) as f64).max(0.0);
    let gap = |s: usize| (prtt(comm, rank, 4, 0.0, s, 7) - prtt(comm, rank, 1, 0.0, s, 7)) / 3.0;
    let (s1, s2) = (256usize << 10, 2usize << 20);
    let big_g = ((gap(s2) - gap(s1)) / (s2 - s1) as f64).max(1e-6);
    let l = (prtt(comm, rank, 1, 0.0, 1, reps) / 2.0 - 2.0 * o).max(0.05);
    // eager limit: the first doubling whose one-way time grows by a latency more than G
    let mut eager = p.eager;
    let mut prev = prtt(comm, rank, 1, 0.0, 1024, 7) / 2.0;
    let mut s = 2048usize;
    while s <= 1 << 20 {
        let t = prtt(comm, rank, 1, 0.0, s, 7) / 2.0;
        if rank == 0 && t - prev > big_g * (s / 2) as f64 + l.max(0.5) && eager == p.eager {
            eager = (s / 2) as f64;
        }
        prev = t;
        s *= 2;
    }
    if rank == 0 {
        p.o_native = o;
        p.g = g;
        p.big_g = big_g;
        p.l = l;
        p.eager = eager;
    }
}

/// γ and the copy cost per byte on this rank.
fn local(p: &mut Params) {
    let n = 1 << 19; // 4 MiB of doubles
    let a = vec![1.0f64; n];
    let mut b = vec![2.0f64; n];
    let mut tg = Vec::new();
    let mut tc = Vec::new();
    for _ in 0..5 {
        let t = now();
        // SAFETY: two distinct buffers of n doubles.
        unsafe {
            crate::core::ops::reduce_local(
                a.as_ptr().cast(),
                b.as_mut_ptr().cast(),
                n as i64,
                MPI_DOUBLE(),
                MPI_SUM(),
            );
        }
        tg.push(now() - t);
        let t = now();
        b.copy_from_slice(&a);
        tc.push(now() - t);
        std::hint::black_box(&mut b);
    }
    let bytes = (n * 8) as f64;
    p.gamma = median(tg) / bytes;
    p.copy = median(tc) / bytes;
}

/// The cost of a call through the shim's schedules and through the system MPI, on
/// `MPI_COMM_SELF`.
fn overheads(p: &mut Params) {
    let Ok(st) = crate::core::comm::get(MPI_COMM_SELF()) else {
        return;
    };
    let mut x = [0.0f64; 64];
    let mut y = [0.0f64; 64];
    let run =
        |sched: &Arc<crate::core::sched::Schedule>, x: &mut [f64; 64], y: &mut [f64; 64]| -> f64 {
            let t = now();
            let mut r = Run::new(
                Arc::clone(sched),
                Arc::clone(&st),
                st.next_tag(true),
                x.as_ptr() as *const c_void,
                y.as_mut_ptr() as *mut c_void,
            );
            crate::core::progress::run_blocking(&mut r);
            now() - t
        };
    // one local copy: the fixed cost of a schedule run
    let mut b = Builder::new("calibrate");
    b.copy(
        Data::new(Addr::send(0), 1, MPI_DOUBLE()),
        Data::new(Addr::recv(0), 1, MPI_DOUBLE()),
        &[],
    );
    let one = Arc::new(b.finish());
    // 16 messages to itself: the cost per message
    let mut b = Builder::new("calibrate");
    for i in 0..16 {
        b.send(Data::new(Addr::send(i * 8), 1, MPI_DOUBLE()), 0, &[]);
        b.recv(Data::new(Addr::recv(i * 8), 1, MPI_DOUBLE()), 0, &[]);
    }
    let many = Arc::new(b.finish());
    let t1 = median((0..200).map(|_| run(&one, &mut x, &mut y)).collect());
    let t16 = median((0..200).map(|_| run(&many, &mut x, &mut y)).collect());
    // the hook's own work (validation, selection, schedule cache) comes on top
    p.sched = t1 + 0.5;
    p.o = ((t16 - t1) / 32.0).max(0.01);
    let mut v = 1.0f64;
    let mut w = 0.0f64;
    let tn: Vec<f64> = (0..200)
        .map(|_| {
            let t = now();
            // SAFETY: one double in and out.
            let _ = unsafe {
                coll::allreduce(
                    (&mut v as *mut f64).cast(),
                    (&mut w as *mut f64).cast(),
                    1,
                    MPI_DOUBLE(),
                    MPI_SUM(),
                    MPI_COMM_SELF(),
                )
            };
            now() - t
        })
        .collect();
    p.native_call = median(tn);
}

/// Measures the parameters (collective over `MPI_COMM_WORLD`); every rank returns rank
/// 0's numbers.
pub fn run(base: &Params) -> Params {
    let mut p = *base;
    // codes unchecked: a failed query leaves rank 0 of 1
    let rank = mpi_comm::rank(crate::platform::proc::user_world()).unwrap_or(0);
    let size = mpi_comm::size(crate::platform::proc::user_world()).unwrap_or(1);
    if size >= 2 {
        point_to_point(&mut p, crate::platform::proc::user_world(), rank);
    } else {
        p.o_native = p.o_native.min(p.o);
    }
    if rank == 0 {
        local(&mut p);
        overheads(&mut p);
    }
    let mut v: Vec<f64> = NAMES.iter().map(|n| p.get(n).unwrap_or(0.0)).collect();
    // SAFETY: an array of NAMES.len() doubles on every rank.
    let _ = unsafe {
        coll::bcast(
            v.as_mut_ptr().cast(),
            v.len() as c_int,
            MPI_DOUBLE(),
            0,
            crate::platform::proc::user_world(),
        )
    };
    for (n, x) in NAMES.iter().zip(v) {
        p.set(n, x);
    }
    p
}

//! Layer: platform. May use: nothing.
//!
//! Per-function counters and the paths calls took, for `SHIM_STATS` (`hooks::report`).
//!
//! Calls are always counted, so tests and the C API can check that interception really
//! happened: each thread counts in an array of its own with a plain load and store, which
//! a reader sums. (A locked add waits for every store before it to reach the cache: right
//! after a collective wrote a shared-memory slot, for each of its lines to come back from
//! the core that read it last; README, "The node transport".) Time and bytes are only
//! measured when `SHIM_STATS` is on.

use std::cell::Cell;
use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

use crate::platform::api::{Fid, N_FUNCS};

pub struct Counter {
    pub time_ns: AtomicU64,
    pub bytes: AtomicU64,
}

static COUNTERS: [Counter; N_FUNCS] = [const {
    Counter {
        time_ns: AtomicU64::new(0),
        bytes: AtomicU64::new(0),
    }
}; N_FUNCS];

/// One thread's call counts: written by that thread only, read by anyone.
type Calls = [AtomicU64; N_FUNCS];

/// The threads' arrays.
struct Arrays {
    /// every thread's (an array outlives its thread: the counts stay in the sums)
    all: Vec<&'static Calls>,
    /// those whose thread has ended, for the next new thread to go on counting in
    free: Vec<&'static Calls>,
}

static THREADS: Mutex<Arrays> = Mutex::new(Arrays {
    all: Vec::new(),
    free: Vec::new(),
});

/// Calls made by threads whose array had already gone back (from their destructors).
static LATE: Calls = [const { AtomicU64::new(0) }; N_FUNCS];

/// The calling thread's array (from its first call on).
struct Mine(Cell<Option<&'static Calls>>);

impl Drop for Mine {
    fn drop(&mut self) {
        if let Some(calls) = self.0.get() {
            // this thread writes it no more
            THREADS
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .free
                .push(calls);
        }
    }
}

static ENABLED: AtomicBool = AtomicBool::new(false);

/// How each call was carried out, per function: (kind, name), e.g. ("schedule",
/// "binomial") or ("forwarded", "inter").
pub(crate) static PATHS: Mutex<BTreeMap<(u16, &'static str, &'static str), u64>> =
    Mutex::new(BTreeMap::new());

thread_local! {
    static PENDING_BYTES: Cell<u64> = const { Cell::new(0) };
    static MINE: Mine = const { Mine(Cell::new(None)) };
}

/// The calling thread's array: one handed back by an ended thread, or a new one.
#[cold]
fn register() -> &'static Calls {
    let mut g = THREADS.lock().unwrap_or_else(|e| e.into_inner());
    g.free.pop().unwrap_or_else(|| {
        let new: &'static Calls = Box::leak(Box::new([const { AtomicU64::new(0) }; N_FUNCS]));
        g.all.push(new);
        new
    })
}

pub fn set_enabled(on: bool) {
    ENABLED.store(on, Ordering::Relaxed);
}

#[inline(always)]
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

#[inline]
pub fn count(fid: Fid) {
    let bump = |calls: &Calls| {
        let c = &calls[fid as usize];
        c.store(c.load(Ordering::Relaxed).wrapping_add(1), Ordering::Relaxed);
    };
    let counted = MINE.try_with(|m| {
        let calls = m.0.get().unwrap_or_else(|| {
            let new = register();
            m.0.set(Some(new));
            new
        });
        bump(calls);
    });
    if counted.is_err() {
        // a call from a thread's own destructors, after its array went back
        LATE[fid as usize].fetch_add(1, Ordering::Relaxed);
    }
}

#[inline]
pub fn start() -> Option<Instant> {
    if enabled() {
        Some(Instant::now())
    } else {
        None
    }
}

#[inline]
pub fn stop(fid: Fid, t0: Option<Instant>) {
    if let Some(t0) = t0 {
        let c = &COUNTERS[fid as usize];
        c.time_ns
            .fetch_add(t0.elapsed().as_nanos() as u64, Ordering::Relaxed);
        let b = PENDING_BYTES.take();
        if b > 0 {
            c.bytes.fetch_add(b, Ordering::Relaxed);
        }
    }
}

/// Adds to the byte count of the call in progress.
#[inline]
pub fn note_bytes(n: u64) {
    PENDING_BYTES.set(PENDING_BYTES.get().wrapping_add(n));
}

/// Records which path a call took (only when stats are on): `kind` is "schedule" (with
/// the algorithm as `name`) or "forwarded" (with the reason).
pub fn note_path(fid: Fid, kind: &'static str, name: &'static str) {
    if enabled() {
        let mut m = PATHS.lock().unwrap_or_else(|e| e.into_inner());
        *m.entry((fid as u16, kind, name)).or_insert(0) += 1;
    }
}

/// Every array of counts (each thread's and the late calls'), under the lock.
fn each_array(f: impl FnMut(&Calls)) {
    let g = THREADS.lock().unwrap_or_else(|e| e.into_inner());
    g.all.iter().copied().chain([&LATE]).for_each(f);
}

pub fn calls(idx: usize) -> u64 {
    let mut sum = 0u64;
    each_array(|c| sum = sum.wrapping_add(c[idx].load(Ordering::Relaxed)));
    sum
}
pub fn time_ns(idx: usize) -> u64 {
    COUNTERS[idx].time_ns.load(Ordering::Relaxed)
}
pub fn bytes(idx: usize) -> u64 {
    COUNTERS[idx].bytes.load(Ordering::Relaxed)
}

pub fn reset() {
    each_array(|calls| calls.iter().for_each(|c| c.store(0, Ordering::Relaxed)));
    for c in &COUNTERS {
        c.time_ns.store(0, Ordering::Relaxed);
        c.bytes.store(0, Ordering::Relaxed);
    }
    PATHS.lock().unwrap_or_else(|e| e.into_inner()).clear();
}

/// The paths recorded for one function in this process, as ("kind:name", count).
pub fn paths_of(idx: usize) -> Vec<(String, u64)> {
    let m = PATHS.lock().unwrap_or_else(|e| e.into_inner());
    m.iter()
        .filter(|((f, _, _), _)| *f as usize == idx)
        .map(|((_, k, p), n)| (format!("{k}:{p}"), *n))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Counts made on several threads, some of which end before the sum is read, all add
    /// up; an ended thread's array goes on counting for the next thread, without losing
    /// what it held.
    #[test]
    fn every_thread_s_calls_add_up_after_the_threads_end() {
        let fid = Fid::MPI_Attr_delete;
        let before = calls(fid as usize);
        let rounds = 4;
        let per_thread = 1000;
        for _ in 0..rounds {
            let threads: Vec<_> = (0..3)
                .map(|_| {
                    std::thread::spawn(move || {
                        for _ in 0..per_thread {
                            count(fid);
                        }
                    })
                })
                .collect();
            for t in threads {
                t.join().expect("counting thread");
            }
        }
        assert_eq!(calls(fid as usize) - before, rounds * 3 * per_thread);
        // the ended threads' arrays were handed on: at most the threads alive at once, plus
        // this one and the other tests' threads, ever made
        let made = THREADS.lock().unwrap().all.len();
        assert!(made < 64, "{made} arrays for 12 short threads");
    }
}

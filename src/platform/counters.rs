//! Layer: platform. May use: nothing.
//!
//! Per-function counters and the paths calls took, for `SHIM_STATS` (`hooks::report`).
//!
//! Calls are always counted (one relaxed atomic add per intercepted call), so tests and the
//! C API can check that interception really happened. Time and bytes are only measured
//! when `SHIM_STATS` is on.

use std::cell::Cell;
use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

use crate::platform::api::{Fid, N_FUNCS};

pub struct Counter {
    pub calls: AtomicU64,
    pub time_ns: AtomicU64,
    pub bytes: AtomicU64,
}

static COUNTERS: [Counter; N_FUNCS] = [const {
    Counter {
        calls: AtomicU64::new(0),
        time_ns: AtomicU64::new(0),
        bytes: AtomicU64::new(0),
    }
}; N_FUNCS];

static ENABLED: AtomicBool = AtomicBool::new(false);

/// How each call was carried out, per function: (kind, name), e.g. ("schedule",
/// "binomial") or ("forwarded", "inter").
pub(crate) static PATHS: Mutex<BTreeMap<(u16, &'static str, &'static str), u64>> =
    Mutex::new(BTreeMap::new());

thread_local! {
    static PENDING_BYTES: Cell<u64> = const { Cell::new(0) };
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
    COUNTERS[fid as usize].calls.fetch_add(1, Ordering::Relaxed);
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

pub fn calls(idx: usize) -> u64 {
    COUNTERS[idx].calls.load(Ordering::Relaxed)
}
pub fn time_ns(idx: usize) -> u64 {
    COUNTERS[idx].time_ns.load(Ordering::Relaxed)
}
pub fn bytes(idx: usize) -> u64 {
    COUNTERS[idx].bytes.load(Ordering::Relaxed)
}

pub fn reset() {
    for c in &COUNTERS {
        c.calls.store(0, Ordering::Relaxed);
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

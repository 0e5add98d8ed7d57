//! Per-function counters and the `SHIM_STATS` report.
//!
//! Calls are always counted (one relaxed atomic add per intercepted call), so tests and the
//! C API can check that interception really happened. Time and bytes are only measured
//! when `SHIM_STATS` is on. The report is printed at `MPI_Finalize`, before
//! `PMPI_Finalize`, either per rank or aggregated on rank 0 (mpiP-style table).

use std::cell::Cell;
use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

use crate::api::{CATEGORIES, Fid, N_FUNCS, NAMES};
use crate::config::StatsMode;

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
static PATHS: Mutex<BTreeMap<(u16, &'static str, &'static str), u64>> = Mutex::new(BTreeMap::new());

thread_local! {
    static PENDING_BYTES: Cell<u64> = const { Cell::new(0) };
}

pub fn set_enabled(on: bool) {
    ENABLED.store(on, Ordering::Relaxed);
    // counted calls skip the memo, whose fast lane does not look at this flag
    crate::coll::memo::invalidate();
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

/// Adds `count` elements of `datatype` to the byte count of the call in progress.
pub fn note_typed_bytes(count: i64, datatype: crate::abi::MPI_Datatype) {
    if count > 0 {
        if let Some(size) = crate::dtype::size_of(datatype) {
            note_bytes(count as u64 * size as u64);
        }
    }
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

fn paths_string(idx: usize) -> String {
    paths_of(idx)
        .iter()
        .map(|(p, n)| format!("{p}={n}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// Sums every rank's path counts on rank 0 (empty elsewhere). Paths travel as text lines
/// "fid path count", gathered with `PMPI_Gatherv`.
fn gather_paths(comm: crate::abi::MPI_Comm, rank: i32, size: i32) -> BTreeMap<(u16, String), u64> {
    let text: String = {
        let m = PATHS.lock().unwrap_or_else(|e| e.into_inner());
        m.iter()
            .map(|((f, k, p), n)| format!("{f} {k}:{p} {n}\n"))
            .collect()
    };
    let len = text.len() as i32;
    let mut lens = vec![0i32; if rank == 0 { size as usize } else { 0 }];
    // SAFETY: one int per rank into `lens` (size ints at the root).
    unsafe {
        crate::pmpi::PMPI_Gather(
            (&len as *const i32).cast(),
            1,
            crate::abi::MPI_INT(),
            lens.as_mut_ptr().cast(),
            1,
            crate::abi::MPI_INT(),
            0,
            comm,
        );
    }
    let displs: Vec<i32> = lens
        .iter()
        .scan(0, |acc, &l| {
            let d = *acc;
            *acc += l;
            Some(d)
        })
        .collect();
    let total: i32 = lens.iter().sum();
    let mut all = vec![0u8; total as usize];
    // SAFETY: the counts and displacements describe `all` exactly at the root.
    unsafe {
        crate::pmpi::PMPI_Gatherv(
            text.as_ptr().cast(),
            len,
            crate::abi::MPI_CHAR(),
            all.as_mut_ptr().cast(),
            lens.as_ptr(),
            displs.as_ptr(),
            crate::abi::MPI_CHAR(),
            0,
            comm,
        );
    }
    let mut out = BTreeMap::new();
    for line in String::from_utf8_lossy(&all).lines() {
        let mut it = line.split(' ');
        if let (Some(f), Some(p), Some(n)) = (it.next(), it.next(), it.next()) {
            if let (Ok(f), Ok(n)) = (f.parse::<u16>(), n.parse::<u64>()) {
                *out.entry((f, p.to_string())).or_insert(0) += n;
            }
        }
    }
    out
}

/// One row of the report.
struct Row {
    name: &'static str,
    category: &'static str,
    calls: u64,
    min_calls: u64,
    max_calls: u64,
    time_ms: f64,
    max_time_ms: f64,
    bytes: u64,
    paths: String,
}

fn format_table(title: &str, rows: &[Row]) -> String {
    let mut s = String::new();
    s.push_str(&format!("@--- libshim statistics: {title} ---\n"));
    s.push_str(&format!(
        "{:<32} {:<8} {:>10} {:>9} {:>9} {:>12} {:>12} {:>14}  {}\n",
        "Function",
        "Category",
        "Calls",
        "Min/rank",
        "Max/rank",
        "Time(ms)",
        "MaxRank(ms)",
        "Bytes",
        "Paths"
    ));
    for r in rows {
        s.push_str(&format!(
            "{:<32} {:<8} {:>10} {:>9} {:>9} {:>12.3} {:>12.3} {:>14}  {}\n",
            r.name,
            r.category,
            r.calls,
            r.min_calls,
            r.max_calls,
            r.time_ms,
            r.max_time_ms,
            r.bytes,
            r.paths
        ));
    }
    s.push_str(&crate::dtype::pack::stats_line());
    s.push_str("@--- end of libshim statistics ---\n");
    s
}

/// Prints the report; called in `MPI_Finalize` before `PMPI_Finalize`, collectively over
/// `comm` (all ranks take part when the mode aggregates).
pub fn report(mode: StatsMode, comm: crate::abi::MPI_Comm, rank: i32, size: i32) {
    match mode {
        StatsMode::Off => {}
        StatsMode::Rank => {
            let rows: Vec<Row> = (0..N_FUNCS)
                .filter(|&i| calls(i) > 0)
                .map(|i| Row {
                    name: NAMES[i],
                    category: CATEGORIES[i],
                    calls: calls(i),
                    min_calls: calls(i),
                    max_calls: calls(i),
                    time_ms: time_ns(i) as f64 / 1e6,
                    max_time_ms: time_ns(i) as f64 / 1e6,
                    bytes: bytes(i),
                    paths: paths_string(i),
                })
                .collect();
            crate::log::raw_stderr(&format_table(&format!("rank {rank} of {size}"), &rows));
        }
        StatsMode::Summary => {
            // Gather [calls, time, bytes] of every function to rank 0.
            let mine: Vec<u64> = (0..N_FUNCS)
                .flat_map(|i| [calls(i), time_ns(i), bytes(i)])
                .collect();
            let n = mine.len();
            let mut all = if rank == 0 {
                vec![0u64; n * size as usize]
            } else {
                Vec::new()
            };
            // SAFETY: buffers sized n and n*size; MPI_UINT64_T matches u64.
            let rc = unsafe {
                crate::pmpi::PMPI_Gather(
                    mine.as_ptr().cast(),
                    n as i32,
                    crate::abi::MPI_UINT64_T(),
                    all.as_mut_ptr().cast(),
                    n as i32,
                    crate::abi::MPI_UINT64_T(),
                    0,
                    comm,
                )
            };
            let paths = gather_paths(comm, rank, size);
            if rc != 0 || rank != 0 {
                return;
            }
            let mut rows = Vec::new();
            for i in 0..N_FUNCS {
                let per: Vec<(u64, u64, u64)> = (0..size as usize)
                    .map(|r| {
                        (
                            all[r * n + 3 * i],
                            all[r * n + 3 * i + 1],
                            all[r * n + 3 * i + 2],
                        )
                    })
                    .collect();
                let total: u64 = per.iter().map(|p| p.0).sum();
                if total == 0 {
                    continue;
                }
                rows.push(Row {
                    name: NAMES[i],
                    category: CATEGORIES[i],
                    calls: total,
                    min_calls: per.iter().map(|p| p.0).min().unwrap_or(0),
                    max_calls: per.iter().map(|p| p.0).max().unwrap_or(0),
                    time_ms: per.iter().map(|p| p.1).sum::<u64>() as f64 / 1e6,
                    max_time_ms: per.iter().map(|p| p.1).max().unwrap_or(0) as f64 / 1e6,
                    bytes: per.iter().map(|p| p.2).sum(),
                    paths: paths
                        .iter()
                        .filter(|((f, _), _)| *f as usize == i)
                        .map(|((_, p), n)| format!("{p}={n}"))
                        .collect::<Vec<_>>()
                        .join(","),
                });
            }
            let title = format!("{size} ranks aggregated on rank 0");
            crate::log::raw_stderr(&format_table(&title, &rows));
        }
    }
}

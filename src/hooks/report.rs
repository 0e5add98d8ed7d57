//! Layer: hooks. May use: services, core, platform.
//!
//! The `SHIM_STATS` report at `MPI_Finalize`, before `PMPI_Finalize`: per rank or
//! aggregated on rank 0 (mpiP-style table), from `platform::counters` and the packer's
//! own figures.

use std::collections::BTreeMap;

use crate::platform::api::{CATEGORIES, N_FUNCS, NAMES};
use crate::platform::config::StatsMode;
use crate::platform::counters::{PATHS, bytes, calls, paths_of, time_ns};

fn paths_string(idx: usize) -> String {
    paths_of(idx)
        .iter()
        .map(|(p, n)| format!("{p}={n}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// Sums every rank's path counts on rank 0 (empty elsewhere). Paths travel as text lines
/// "fid path count", gathered with `PMPI_Gatherv`.
fn gather_paths(
    comm: crate::platform::abi::MPI_Comm,
    rank: i32,
    size: i32,
) -> BTreeMap<(u16, String), u64> {
    let text: String = {
        let m = PATHS.lock().unwrap_or_else(|e| e.into_inner());
        m.iter()
            .map(|((f, k, p), n)| format!("{f} {k}:{p} {n}\n"))
            .collect()
    };
    let len = text.len() as i32;
    let mut lens = vec![0i32; if rank == 0 { size as usize } else { 0 }];
    // SAFETY: one int per rank into `lens` (size ints at the root).
    let _ = unsafe {
        crate::platform::mpi::coll::gather(
            (&len as *const i32).cast(),
            1,
            crate::platform::abi::MPI_INT(),
            lens.as_mut_ptr().cast(),
            1,
            crate::platform::abi::MPI_INT(),
            0,
            comm,
        )
    };
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
    let _ = unsafe {
        crate::platform::mpi::coll::gatherv(
            text.as_ptr().cast(),
            len,
            crate::platform::abi::MPI_CHAR(),
            all.as_mut_ptr().cast(),
            lens.as_ptr(),
            displs.as_ptr(),
            crate::platform::abi::MPI_CHAR(),
            0,
            comm,
        )
    };
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
    s.push_str(&crate::core::dtype::pack::stats_line());
    s.push_str(&crate::core::transport::verbs::stats_line());
    s.push_str(&format!(
        "tuning for auto: {}\n",
        crate::services::coll::select::tuning::get().source
    ));
    s.push_str("@--- end of libshim statistics ---\n");
    s
}

/// Prints the report; called in `MPI_Finalize` before `PMPI_Finalize`, collectively over
/// `comm` (all ranks take part when the mode aggregates).
pub fn report(mode: StatsMode, comm: crate::platform::abi::MPI_Comm, rank: i32, size: i32) {
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
            crate::platform::log::raw_stderr(&format_table(
                &format!("rank {rank} of {size}"),
                &rows,
            ));
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
            let gathered = unsafe {
                crate::platform::mpi::coll::gather(
                    mine.as_ptr().cast(),
                    n as i32,
                    crate::platform::abi::MPI_UINT64_T(),
                    all.as_mut_ptr().cast(),
                    n as i32,
                    crate::platform::abi::MPI_UINT64_T(),
                    0,
                    comm,
                )
            };
            let paths = gather_paths(comm, rank, size);
            if gathered.is_err() || rank != 0 {
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
            crate::platform::log::raw_stderr(&format_table(&title, &rows));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::platform::abi::{MPI_CHAR, MPI_Comm, MPI_INT, MPI_UINT64_T};
    use crate::platform::mpi::fake;

    const COMM: i64 = 0x4400_7001;

    #[test]
    fn a_summary_takes_every_rank_through_the_same_gathers_even_after_a_failure() {
        let n = 3 * N_FUNCS as i64;
        // (rank, the first gather fails)
        for (rank, fails) in [(1, false), (1, true), (0, true)] {
            let mut first = true;
            let _g = fake::install(move |c| {
                if c.name == "gather" && std::mem::take(&mut first) && fails {
                    Err(crate::platform::abi::MPI_ERR_OTHER)
                } else {
                    Ok(vec![])
                }
            });
            report(StatsMode::Summary, COMM as MPI_Comm, rank, 4);
            // the counters, the path text lengths, then the path texts, all to rank 0
            assert_eq!(fake::names(), ["gather", "gather", "gatherv"]);
            let calls = fake::calls();
            let u64t = MPI_UINT64_T() as i64;
            assert_eq!(calls[0].args, [n, u64t, n, u64t, 0, COMM]);
            let int = MPI_INT() as i64;
            assert_eq!(calls[1].args, [1, int, 1, int, 0, COMM]);
            let ch = MPI_CHAR() as i64;
            assert_eq!(calls[2].args[1..], [ch, ch, 0, COMM]);
        }
    }

    #[test]
    fn no_report_communicates_nothing() {
        let _g = fake::install(|_| Ok(vec![]));
        report(StatsMode::Off, COMM as MPI_Comm, 0, 4);
        assert!(fake::calls().is_empty());
    }
}

//! Layer: services. May use: core, platform.
//!
//! Test only.
//!
//! Scale by simulation (issue 35 item 4): the flat and the two-level schedules of Bcast,
//! Allreduce, Barrier and Reduce, built for every rank of layouts from 2 to 1024 nodes
//! times 1 to 128 ranks per node, run through the timing simulator
//! (`core::sched::timing`) with LogGP parameters per level, to predict where the two-level
//! algorithms win. `scripts/tools/simulate` runs [`tests::scaling_prediction`];
//! `scripts/bench/sim/plot.py` draws its CSV.

use std::sync::Arc;

use super::hier::{self, Hier};
use super::shm::Slots;
use super::{Rank, Reduction, barrier, bcast, reduce};
use crate::core::sched::timing::{self, Levels, LogGP};
use crate::core::sched::{Addr, Data, Schedule};
use crate::core::transport::node::Layout;
use crate::platform::abi::{MPI_BYTE, MPI_DOUBLE, MPI_SUM};
use crate::services::coll::Coll;
use crate::services::coll::select::{self, Form};

/// The parameter sets kept in the repository (the one place their values live).
const EMULATED: &str = include_str!("../../../../scripts/bench/sim/emulated.params");
const FABRIC: &str = include_str!("../../../../scripts/bench/sim/fabric.params");

/// The collectives predicted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Case {
    Bcast,
    Allreduce,
    Barrier,
    Reduce,
}

impl Case {
    pub fn name(self) -> &'static str {
        match self {
            Case::Bcast => "bcast",
            Case::Allreduce => "allreduce",
            Case::Barrier => "barrier",
            Case::Reduce => "reduce",
        }
    }
    fn coll(self) -> Coll {
        match self {
            Case::Bcast => Coll::Bcast,
            Case::Allreduce => Coll::Allreduce,
            Case::Barrier => Coll::Barrier,
            Case::Reduce => Coll::Reduce,
        }
    }
}

/// Reads `key = value` lines (`#` starts a comment); every key of [`Levels`] is required,
/// so that a file cannot silently leave a level at a default.
pub fn parse_params(text: &str) -> Result<Levels, String> {
    let mut kv = std::collections::HashMap::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let (k, v) = line
            .split_once('=')
            .ok_or_else(|| format!("line {}: not key = value", n + 1))?;
        let v: f64 = v
            .trim()
            .parse()
            .map_err(|e| format!("line {}: {e}", n + 1))?;
        kv.insert(k.trim().to_string(), v);
    }
    let get = |k: &str| kv.get(k).copied().ok_or_else(|| format!("missing {k}"));
    let level = |p: &str| -> Result<LogGP, String> {
        Ok(LogGP {
            l: get(&format!("{p}.L"))?,
            o: get(&format!("{p}.o"))?,
            g: get(&format!("{p}.g"))?,
            big_g: get(&format!("{p}.G"))?,
        })
    };
    Ok(Levels {
        intra: level("intra")?,
        inter: level("inter")?,
        copy_per_byte: get("copy")?,
        gamma_per_byte: get("gamma")?,
        flag: get("flag")?,
        cma_call: get("cma_call")?,
        cma_per_byte: get("cma_per_byte")?,
        expose: get("expose")?,
        eager: get("eager")?,
    })
}

/// `emulated`, `fabric`, or the path of a parameter file.
pub fn params(name: &str) -> Result<Levels, String> {
    match name {
        "emulated" => parse_params(EMULATED),
        "fabric" => parse_params(FABRIC),
        path => {
            let text = std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))?;
            parse_params(&text).map_err(|e| format!("{path}: {e}"))
        }
    }
}

/// Predicted times of one call, in microseconds; `None` where the schedules were too
/// large to simulate within the bound.
#[derive(Clone, Copy, Debug)]
pub struct Prediction {
    pub flat: Option<f64>,
    pub two_level: Option<f64>,
    /// The flat algorithm and the leaders' (what a measurement must force to compare).
    pub flat_algo: &'static str,
    pub lead_algo: &'static str,
}

fn reduction(bytes: i64) -> Reduction {
    Reduction {
        count: bytes / 8,
        dt: MPI_DOUBLE(),
        ti: crate::core::dtype::info(MPI_DOUBLE()).expect("MPI_DOUBLE"),
        op: MPI_SUM(),
        commutative: true,
    }
}

/// Builds the schedule of every rank, giving up (`None`) once they hold more than
/// `max_actions` actions together: the estimate from the first and last ranks first,
/// so that a hopeless case costs two builds.
fn build_all(p: i32, max_actions: usize, build: impl Fn(i32) -> Schedule) -> Option<Vec<Schedule>> {
    let est = build(0).len().max(build(p - 1).len());
    if est.saturating_mul(p as usize) > max_actions {
        return None;
    }
    let mut all = Vec::with_capacity(p as usize);
    let mut total = 0usize;
    for r in 0..p {
        let s = build(r);
        total += s.len();
        if total > max_actions {
            return None;
        }
        all.push(s);
    }
    Some(all)
}

/// Predicts `case` with `bytes` bytes (Allreduce, Reduce: of MPI_DOUBLE with MPI_SUM) on
/// `nodes` nodes of `ppn` ranks (consecutive ranks on a node, root 0): the flat schedule
/// that the shim's `auto` picks for all the ranks, and the two-level one with `auto`'s
/// pick for the leaders.
pub fn predict(
    case: Case,
    bytes: i64,
    nodes: i32,
    ppn: i32,
    lv: &Levels,
    max_actions: usize,
) -> Result<Prediction, String> {
    let p = nodes * ppn;
    let leaders: Vec<i32> = (0..p).map(|r| r - r % ppn).collect();
    let layout = Arc::new(Layout::of(&leaders).ok_or("one node: nothing to predict")?);
    // the slots' place in the segment does not matter to the timing
    let sl = Slots {
        cell: 1 << 24,
        data: 64,
    };
    let coll = case.coll();
    let flat = select::choose(coll, Form::Blocking, p, nodes, bytes, true, false);
    let lead = select::choose(coll, Form::Blocking, nodes, nodes, bytes, true, false);
    let ti = crate::core::dtype::info(MPI_BYTE()).expect("MPI_BYTE");
    let data = Data::new(Addr::recv(0), bytes, MPI_BYTE());
    let red = reduction(bytes);
    let me = |r: i32| Rank { rank: r, size: p };
    let hier = |r: i32| Hier {
        layout: Arc::clone(&layout),
        me: me(r),
    };
    let flat_build = |r: i32| flat_schedule(case, &flat, me(r), bytes);
    let two_build = |r: i32| match case {
        Case::Barrier => hier::barrier(&hier(r), &lead),
        Case::Bcast => hier::bcast(sl, &hier(r), &lead, data, &ti, 0),
        Case::Allreduce => hier::allreduce(sl, &hier(r), &lead, &red, false),
        Case::Reduce => hier::reduce(sl, &hier(r), &lead, &red, false, 0),
    };
    let run = |scheds: Option<Vec<Schedule>>| -> Result<Option<f64>, String> {
        match scheds {
            None => Ok(None),
            Some(s) => timing::simulate(&s, &layout.node_of, &layout.local_of, lv)
                .map(|o| Some(o.max))
                .map_err(|e| format!("{} {bytes} B {nodes}x{ppn}: {e}", case.name())),
        }
    };
    let flat_t = run(build_all(p, max_actions, flat_build))?;
    let two_t = run(build_all(p, max_actions, two_build))?;
    Ok(Prediction {
        flat: flat_t,
        two_level: two_t,
        flat_algo: flat_build(0).algorithm,
        lead_algo: flat_schedule(
            case,
            &lead,
            Rank {
                rank: 0,
                size: nodes,
            },
            bytes,
        )
        .algorithm,
    })
}

/// The flat schedule `ch` builds for `case` with `bytes` bytes, for rank `me`.
fn flat_schedule(case: Case, ch: &select::Choice, me: Rank, bytes: i64) -> Schedule {
    let ti = crate::core::dtype::info(MPI_BYTE()).expect("MPI_BYTE");
    let data = Data::new(Addr::recv(0), bytes, MPI_BYTE());
    let red = reduction(bytes);
    match case {
        Case::Barrier => barrier::build(ch, me),
        Case::Bcast => bcast::build(ch, me, data, &ti, 0),
        Case::Allreduce => reduce::allreduce(ch, me, &red, false),
        Case::Reduce => reduce::reduce(ch, me, &red, false, 0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    const CASES: &[(Case, i64)] = &[
        (Case::Bcast, 8),
        (Case::Bcast, 65536),
        (Case::Allreduce, 8),
        (Case::Allreduce, 65536),
        (Case::Barrier, 0),
        (Case::Reduce, 8),
        (Case::Reduce, 65536),
    ];
    const PPN: &[i32] = &[1, 2, 4, 8, 16, 32, 64, 128];
    /// Layouts above this many ranks are not simulated (memory and time of one run).
    const MAX_RANKS: i32 = 140_000;

    #[test]
    fn the_kept_parameter_sets_parse() {
        let e = params("emulated").unwrap();
        let f = params("fabric").unwrap();
        assert!(
            f.inter.l < e.inter.l,
            "a real fabric beats the emulated link"
        );
        assert!(
            parse_params("intra.L = 1").is_err(),
            "every key is required"
        );
    }

    /// Simulates the schedules `build` gives every rank (its slots, its place, the number
    /// of nodes) on the nodes `leaders` gives (each rank's leader), slots of `slot` bytes,
    /// with the emulated cluster's parameters: when the last rank is done, or the
    /// simulator's error (a deadlock).
    fn on_layout(
        leaders: &[i32],
        slot: i64,
        build: impl Fn(Slots, &Hier, i32) -> Schedule,
    ) -> Result<f64, String> {
        let layout = Arc::new(Layout::of(leaders).expect("several nodes"));
        let p = leaders.len() as i32;
        let sl = Slots {
            cell: 64 + slot,
            data: 64,
        };
        let nodes = layout.nodes.len() as i32;
        let scheds: Vec<Schedule> = (0..p)
            .map(|r| {
                let h = Hier {
                    layout: Arc::clone(&layout),
                    me: Rank { rank: r, size: p },
                };
                build(sl, &h, nodes)
            })
            .collect();
        let lv = params("emulated")?;
        timing::simulate(&scheds, &layout.node_of, &layout.local_of, &lv).map(|o| o.max)
    }

    /// The pipelined two-level Bcast (`hier::bcast_pipelined`) of `bytes` bytes from `root`,
    /// simulated as [`on_layout`].
    fn pipelined(leaders: &[i32], root: i32, bytes: i64, slot: i64) -> Result<f64, String> {
        let ti = crate::core::dtype::info(MPI_BYTE()).expect("MPI_BYTE");
        let data = Data::new(Addr::recv(0), bytes, MPI_BYTE());
        on_layout(leaders, slot, |sl, h, nodes| {
            let chunk = hier::bcast_chunk_bytes(sl, bytes);
            let lead = select::choose(
                Coll::Bcast,
                Form::Blocking,
                nodes,
                nodes,
                chunk,
                true,
                false,
            );
            hier::bcast_pipelined(sl, h, &lead, data, &ti, root)
        })
    }

    /// The pipelined two-level Reduce to `root` (Allreduce: `None`) of `bytes` bytes of
    /// doubles (`hier::reduce_pipelined`), simulated as [`on_layout`].
    fn pipelined_reduction(
        leaders: &[i32],
        across: hier::Across,
        bytes: i64,
        slot: i64,
    ) -> Result<f64, String> {
        let red = reduction(bytes);
        let coll = match across {
            hier::Across::All => Coll::Allreduce,
            hier::Across::Root(_) => Coll::Reduce,
            hier::Across::Blocks(_) => Coll::ReduceScatter,
        };
        on_layout(leaders, slot, |sl, h, nodes| {
            let chunk = hier::reduce_chunk_bytes(sl, &red);
            let lead = select::choose(coll, Form::Blocking, nodes, nodes, chunk, true, false);
            hier::reduce_pipelined(sl, h, &lead, &red, false, across)
        })
    }

    /// The layouts the pipelined algorithms are simulated on: 2 x 1, 2 x 2, 3 x 2, 1 + 3,
    /// {0, 2} + {1, 3} (not consecutive), 2 + 1 + 3.
    const LAYOUTS: &[&[i32]] = &[
        &[0, 1],
        &[0, 0, 2, 2],
        &[0, 0, 2, 2, 4, 4],
        &[0, 1, 1, 1],
        &[0, 1, 0, 1],
        &[0, 0, 2, 3, 3, 3],
    ];

    #[test]
    fn the_pipelined_bcast_completes_on_every_layout_from_every_root() {
        for l in LAYOUTS {
            for root in 0..l.len() as i32 {
                // 1 chunk, 5, and the most (8) with larger ones
                for bytes in [100, 4900, 100_000] {
                    let t = pipelined(l, root, bytes, 1000);
                    assert!(
                        t.as_ref().is_ok_and(|t| t.is_finite()),
                        "{l:?} root {root} {bytes} B: {t:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn the_pipelined_reductions_complete_on_every_layout_from_every_root() {
        use hier::Across;
        for l in LAYOUTS {
            let p = l.len() as i64;
            let roots = (0..p as i32).map(Across::Root).chain([Across::All]);
            for across in roots {
                // 1 chunk, 5, the most (8), and fewer elements in a chunk than ranks on a node
                for bytes in [800, 4800, 100_000, 16] {
                    let t = pipelined_reduction(l, across, bytes, 1000);
                    assert!(
                        t.as_ref().is_ok_and(|t| t.is_finite()),
                        "{l:?} {across:?} {bytes} B: {t:?}"
                    );
                }
            }
            // Reduce_scatter_block (consecutive nodes only): blocks of 1 and 100 doubles
            if Layout::of(l).is_some_and(|x| x.blocks()) {
                for n in [1, 100] {
                    let t = pipelined_reduction(l, Across::Blocks(n), p * n * 8, 1000);
                    assert!(
                        t.as_ref().is_ok_and(|t| t.is_finite()),
                        "{l:?} blocks of {n}: {t:?}"
                    );
                }
            }
        }
        // 1 MiB on 2 nodes of 4: 8 chunks overlap the node's sums with the network
        let l = [0, 0, 0, 0, 4, 4, 4, 4];
        let one = pipelined_reduction(&l, Across::All, 1 << 20, 1 << 21).unwrap();
        let eight = pipelined_reduction(&l, Across::All, 1 << 20, 1 << 17).unwrap();
        eprintln!("Allreduce 2 x 4, 1 MiB: 1 chunk {one:.1} µs, 8 chunks {eight:.1} µs");
        assert!(eight < one, "8 chunks {eight} µs, 1 chunk {one} µs");
    }

    #[test]
    fn the_single_copy_gather_and_scatter_complete_on_every_layout_from_every_root() {
        let ti = crate::core::dtype::info(MPI_BYTE()).expect("MPI_BYTE");
        for l in LAYOUTS {
            let p = l.len() as i64;
            for root in 0..p as i32 {
                for block in [8, 3000] {
                    let blocks = |at: fn(i64) -> Addr| -> Vec<super::super::Block> {
                        (0..p)
                            .map(|r| {
                                super::super::Block::new(at(r * block), block, MPI_BYTE(), &ti)
                            })
                            .collect()
                    };
                    let (send, recv) = (blocks(Addr::send), blocks(Addr::recv));
                    let gather = on_layout(l, 1000, |sl, h, _| {
                        let mine = Some(send[h.me.rank as usize]);
                        hier::gather_single(sl, h, mine, &recv, root, block)
                    });
                    let scatter = on_layout(l, 1000, |sl, h, _| {
                        let mine = Some(recv[h.me.rank as usize]);
                        hier::scatter_single(sl, h, &send, mine, root, block)
                    });
                    for (name, t) in [("Gather", gather), ("Scatter", scatter)] {
                        assert!(
                            t.as_ref().is_ok_and(|t| t.is_finite()),
                            "{name} {l:?} root {root} {block} B: {t:?}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn pipelining_lets_the_node_phase_overlap_the_network() {
        // 1 MiB on 2 nodes of 4: in 8 chunks against one slot-sized chunk
        let l = [0, 0, 0, 0, 4, 4, 4, 4];
        let one = pipelined(&l, 0, 1 << 20, 1 << 21).unwrap();
        let eight = pipelined(&l, 0, 1 << 20, 1 << 17).unwrap();
        eprintln!("2 x 4, 1 MiB: 1 chunk {one:.1} µs, 8 chunks {eight:.1} µs");
        assert!(eight < one, "8 chunks {eight} µs, 1 chunk {one} µs");
    }

    #[test]
    fn small_layouts_run_to_completion_and_the_network_dominates() {
        let lv = params("emulated").unwrap();
        for &(case, bytes) in CASES {
            for (nodes, ppn) in [(2, 1), (2, 2), (3, 1), (4, 1)] {
                let pr = predict(case, bytes, nodes, ppn, &lv, 1 << 20).unwrap();
                let (f, t) = (pr.flat.unwrap(), pr.two_level.unwrap());
                eprintln!(
                    "{} {bytes} {nodes}x{ppn}: flat {} {f:.2} two-level (leaders {}) {t:.2}",
                    case.name(),
                    pr.flat_algo,
                    pr.lead_algo
                );
                // at least one message crosses the network on the critical path
                let hop = lv.inter.l + 2.0 * lv.inter.o;
                assert!(
                    f >= hop && t >= hop,
                    "{case:?} {bytes} {nodes}x{ppn}: {f} {t}"
                );
                assert!(f.is_finite() && t.is_finite());
            }
        }
    }

    /// The scaling table: `SIM_OUT` (CSV path, default stdout), `SIM_PARAMS` (`emulated`,
    /// `fabric` or a file), `SIM_MAX_NODES` (default 1024), `SIM_MAX_ACTIONS` (default 3M
    /// per schedule set), `SIM_LAYOUTS` (`2x1,3x1`: only these nodes x ranks per node). Run by `scripts/tools/simulate`.
    #[test]
    #[ignore = "minutes in release: scripts/tools/simulate"]
    fn scaling_prediction() {
        let pname = std::env::var("SIM_PARAMS").unwrap_or_else(|_| "emulated".into());
        let lv = params(&pname).unwrap();
        let label = std::path::Path::new(&pname)
            .file_stem()
            .map_or(pname.clone(), |s| s.to_string_lossy().into_owned());
        let max_nodes: i32 = std::env::var("SIM_MAX_NODES")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(1024);
        let max_actions: usize = std::env::var("SIM_MAX_ACTIONS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(3_000_000);
        let mut out: Box<dyn Write> = match std::env::var("SIM_OUT") {
            Ok(path) => Box::new(std::fs::File::create(&path).unwrap()),
            Err(_) => Box::new(std::io::stdout()),
        };
        // SIM_LAYOUTS=2x1,3x1,...: only these layouts (the measured points), else the sweep
        let only: Option<Vec<(i32, i32)>> = std::env::var("SIM_LAYOUTS").ok().map(|v| {
            v.split(',')
                .filter_map(|l| l.split_once('x'))
                .map(|(n, k)| (n.trim().parse().unwrap(), k.trim().parse().unwrap()))
                .collect()
        });
        let layouts: Vec<(i32, i32)> = only.unwrap_or_else(|| {
            let nodes =
                std::iter::successors(Some(2), |n| Some(n * 2)).take_while(|&n| n <= max_nodes);
            nodes
                .flat_map(|n| PPN.iter().map(move |&k| (n, k)))
                .collect()
        });
        writeln!(
            out,
            "params,coll,bytes,nodes,ppn,flat_us,two_level_us,flat_algo,lead_algo"
        )
        .unwrap();
        let fmt = |x: Option<f64>| x.map_or(String::new(), |v| format!("{v:.3}"));
        for &(case, bytes) in CASES {
            {
                for &(nodes, ppn) in &layouts {
                    if nodes * ppn > MAX_RANKS {
                        eprintln!("skip {} {bytes} {nodes}x{ppn}: too many ranks", case.name());
                        continue;
                    }
                    let t0 = std::time::Instant::now();
                    let pr = predict(case, bytes, nodes, ppn, &lv, max_actions).unwrap();
                    for (what, x) in [("flat", pr.flat), ("two-level", pr.two_level)] {
                        if x.is_none() {
                            eprintln!(
                                "skip {what} {} {bytes} {nodes}x{ppn}: over {max_actions} actions",
                                case.name()
                            );
                        }
                    }
                    eprintln!(
                        "{} {bytes} {nodes}x{ppn}: flat {} two-level {} ({:.1} s)",
                        case.name(),
                        fmt(pr.flat),
                        fmt(pr.two_level),
                        t0.elapsed().as_secs_f64()
                    );
                    writeln!(
                        out,
                        "{label},{},{bytes},{nodes},{ppn},{},{},{},{}",
                        case.name(),
                        fmt(pr.flat),
                        fmt(pr.two_level),
                        pr.flat_algo,
                        pr.lead_algo
                    )
                    .unwrap();
                    out.flush().unwrap();
                }
            }
        }
    }
}

//! Layer: services. May use: core, platform.
//!
//! Tuning data: the model's parameters and a table of measured winners.
//!
//! A tuning file is text, one item per line (`#` starts a comment):
//! ```text
//! param L 0.35                     # a model parameter (see model::NAMES), µs or µs/byte
//! best MPI_Allreduce 2 65536 ring  # measured fastest (blocking) at P = 2, 64 KiB
//! best MPI_Reduce 2/2 8192 knomial # the same, P = 2 ranks on 2 nodes
//! ```
//! `scripts/shim-tune` writes one (`SHIM_CALIBRATE=1` for the parameters, the latency
//! benchmark's all-algorithms mode for the table); `SHIM_TUNING_FILE` loads it. Without a
//! file, the data shipped for the running MPI library applies (`tune/<library>-<version>.tune`,
//! chosen at init from `MPI_Get_library_version`, [`for_library`]); a library with no
//! shipped data gets none: `auto` then hands blocking calls to the library's own
//! collectives (the shim's only cost is its per-call overhead), unless `SHIM_CALIBRATE=1`
//! measured the model's parameters on it. Measured rows decide blocking calls at
//! their communicator size within a factor of two of their message size; at a size the
//! rows do not reach the model decides; at a communicator size with no row for the
//! collective, the library's own collective does (the model knows nothing of the
//! library's node-level algorithms, which 2-rank measurements never exercise). Rows
//! measured on one node (`P`) decide on one node only, rows measured across N nodes
//! (`P/N`) on communicators spanning N nodes only: across nodes without such rows the
//! library's own collective decides blocking calls.
//!
//! The file comes from the environment, so it is read defensively ([`read_capped`]): only
//! a regular file (a FIFO, device or directory is refused before anything is read, and
//! the open itself cannot block), at most [`MAX_FILE_BYTES`], and an error quotes at most
//! [`QUOTE_CHARS`] characters of a bad line (none in secure-execution mode).

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, RwLock};

use super::model::{NAMES, Params};
use super::{Algo, COLLS, Coll, find, spec_of};

/// Tuning in force.
#[derive(Clone, Debug, Default)]
pub struct Tuning {
    pub params: Params,
    /// (coll, P, nodes) -> (bytes, algorithm), sorted by bytes: rows measured on a
    /// communicator of P ranks on that many nodes.
    best: HashMap<(u8, i32, i32), Vec<(i64, Algo)>>,
    /// Where it came from, for the decision table and logs.
    pub source: String,
    /// No data describes this library: blocking calls go to its own collectives.
    pub native_only: bool,
}

impl Tuning {
    /// The measured winner for a blocking call on `p` ranks on `nodes` nodes, if a row is
    /// close enough.
    pub fn measured(&self, coll: Coll, p: i32, nodes: i32, bytes: i64) -> Option<Algo> {
        let rows = self.best.get(&(coll as u8, p, nodes))?;
        if let [(0, a)] = rows[..] {
            // one row at size 0: a decision for every size (collectives decided by the
            // process count alone, or files written before they were sized)
            return Some(a);
        }
        // the row nearest on a logarithmic scale, within a factor of 2: compared by the
        // ratio of the sizes, which orders them as the distance of their logarithms does
        // (asked on every call that is decided: no logarithm per row)
        let x = bytes.max(1) as f64;
        let ratio = |b: i64| {
            let b = b.max(1) as f64;
            (b / x).max(x / b)
        };
        let (r, a) = rows
            .iter()
            .map(|&(b, a)| (ratio(b), a))
            .min_by(|u, v| u.0.partial_cmp(&v.0).unwrap_or(std::cmp::Ordering::Equal))?;
        (r <= 2.0 * (1.0 + 1e-9)).then_some(a)
    }

    /// Whether any row was measured for this collective at this communicator size and
    /// number of nodes.
    pub fn covers(&self, coll: Coll, p: i32, nodes: i32) -> bool {
        self.best.contains_key(&(coll as u8, p, nodes))
    }

    pub fn add_best(&mut self, coll: Coll, p: i32, nodes: i32, bytes: i64, algo: Algo) {
        let v = self.best.entry((coll as u8, p, nodes)).or_default();
        v.retain(|r| r.0 != bytes);
        v.push((bytes, algo));
        v.sort_unstable_by_key(|r| r.0);
    }

    pub fn rows(&self) -> usize {
        self.best.values().map(Vec::len).sum()
    }

    /// The file form.
    pub fn to_text(&self) -> String {
        let mut s = String::from("# libshim tuning file (see src/coll/select/tuning.rs)\n");
        for n in NAMES {
            s.push_str(&format!(
                "param {n} {:e}\n",
                self.params.get(n).unwrap_or(0.0)
            ));
        }
        let mut keys: Vec<_> = self.best.keys().copied().collect();
        keys.sort_unstable();
        for (c, p, nodes) in keys {
            let spec = &COLLS[c as usize - 1];
            let at = if nodes > 1 {
                format!("{p}/{nodes}")
            } else {
                p.to_string()
            };
            for &(b, a) in &self.best[&(c, p, nodes)] {
                s.push_str(&format!("best {} {at} {b} {}\n", spec.mpi, a.name()));
            }
        }
        s
    }

    /// Parses a tuning file; `base` supplies what the file does not set.
    pub fn parse(text: &str, source: &str, base: &Tuning) -> Result<Tuning, String> {
        Self::parse_quoting(text, source, base, true)
    }

    /// [`Tuning::parse`]; `quote`: whether an error may show (the start of) the bad line.
    fn parse_quoting(
        text: &str,
        source: &str,
        base: &Tuning,
        quote: bool,
    ) -> Result<Tuning, String> {
        let mut t = base.clone();
        t.source = source.to_string();
        for (i, raw) in text.lines().enumerate() {
            let line = raw.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let err = |what: &str| {
                if quote {
                    format!("{source}:{}: {what}: {}", i + 1, quote_line(raw))
                } else {
                    format!("{source}:{}: {what}", i + 1)
                }
            };
            let f: Vec<&str> = line.split_whitespace().collect();
            match f.as_slice() {
                ["param", name, v] => {
                    let v: f64 = v.parse().map_err(|_| err("not a number"))?;
                    if !v.is_finite() || v < 0.0 {
                        return Err(err("a parameter must be a non-negative number"));
                    }
                    if !t.params.set(name, v) {
                        return Err(err(&format!(
                            "unknown parameter (known: {})",
                            NAMES.join(", ")
                        )));
                    }
                }
                ["best", coll, p, bytes, algo] => {
                    let spec = find(coll).ok_or_else(|| err("unknown collective"))?;
                    // `P` (one node) or `P/N` (P ranks on N nodes)
                    let (p, nodes) = p.split_once('/').unwrap_or((p, "1"));
                    let p: i32 = p.parse().map_err(|_| err("bad process count"))?;
                    let nodes: i32 = nodes.parse().map_err(|_| err("bad node count"))?;
                    let bytes: i64 = bytes.parse().map_err(|_| err("bad byte count"))?;
                    let a = Algo::from_name(algo)
                        .filter(|a| spec_of(spec.coll).algos.contains(a))
                        .ok_or_else(|| {
                            err(&format!(
                                "not an algorithm of {} (valid: {})",
                                spec.mpi,
                                spec.algos
                                    .iter()
                                    .map(|a| a.name())
                                    .collect::<Vec<_>>()
                                    .join(", ")
                            ))
                        })?;
                    if p < 1 || bytes < 0 {
                        return Err(err("process count and bytes must be positive"));
                    }
                    if nodes < 1 || nodes > p {
                        return Err(err("the node count must be 1 to the process count"));
                    }
                    t.add_best(spec.coll, p, nodes, bytes, a);
                }
                _ => {
                    return Err(err(
                        "expected `param NAME VALUE` or `best COLL P[/NODES] BYTES ALGORITHM`",
                    ));
                }
            }
        }
        Ok(t)
    }
}

/// Tuning data shipped for each MPI library and version ([`library_key`] form), measured
/// with `scripts/tools/shim-tune` on the reference machine (2 cores, shared memory).
const SHIPPED: &[(&str, &str)] = &[
    ("MPICH 4.0.2", include_str!("tune/mpich-4.0.2.tune")),
    ("MPICH 5.0.2", include_str!("tune/mpich-5.0.2.tune")),
    (
        "Intel MPI 2021.19.0",
        include_str!("tune/impi-2021.19.0.tune"),
    ),
    ("Open MPI 4.1.4", include_str!("tune/ompi-4.1.4.tune")),
    ("Open MPI 5.0.11", include_str!("tune/ompi-5.0.11.tune")),
];

/// The reference data (Debian's MPICH 4.0.2): the defaults before init and in unit tests.
fn builtin() -> Tuning {
    Tuning::parse(SHIPPED[0].1, "built-in: MPICH 4.0.2", &Tuning::default())
        .expect("the built-in tuning parses")
}

/// The library and version the tuning data is keyed by, from the first line of
/// `MPI_Get_library_version` (MPI-4.0 §9.1.1): "MPICH 5.0.2", "Intel MPI 2021.19.0",
/// "Open MPI 4.1.4"; `None` for a library it does not recognise.
pub fn library_key(version: &str) -> Option<String> {
    let first = version.lines().next().unwrap_or("");
    let number = |s: &str| -> Option<String> {
        let v: String = s
            .trim_start_matches(|c: char| !c.is_ascii_digit())
            .chars()
            .take_while(|c| c.is_ascii_digit() || *c == '.')
            .collect();
        (!v.is_empty()).then(|| v.trim_end_matches('.').to_string())
    };
    if let Some(rest) = first.strip_prefix("Intel(R) MPI Library") {
        return number(rest).map(|v| format!("Intel MPI {v}"));
    }
    if let Some(rest) = first.strip_prefix("Open MPI") {
        return number(rest.split(',').next().unwrap_or("")).map(|v| format!("Open MPI {v}"));
    }
    if let Some(rest) = first.strip_prefix("MPICH Version:") {
        return number(rest).map(|v| format!("MPICH {v}"));
    }
    None
}

/// The tuning for the running library: its shipped data, or none (blocking calls go to the
/// library's own collectives; the model keeps the reference parameters for the rest).
pub fn for_library(version: &str) -> Tuning {
    let key = library_key(version);
    if let Some((k, text)) = SHIPPED.iter().find(|(k, _)| Some(*k) == key.as_deref()) {
        return Tuning::parse(text, &format!("built-in: {k}"), &Tuning::default())
            .expect("the shipped tuning parses");
    }
    let mut t = builtin();
    t.best.clear();
    t.native_only = true;
    let name = key.unwrap_or_else(|| version.lines().next().unwrap_or("").to_string());
    t.source = format!(
        "none for {name}: auto forwards blocking collectives to the library's own (SHIM_CALIBRATE=1 or SHIM_TUNING_FILE to use the shim's)"
    );
    t
}

static CURRENT: LazyLock<RwLock<Arc<Tuning>>> = LazyLock::new(|| RwLock::new(Arc::new(builtin())));

#[cfg(test)]
mod library_tests {
    use super::*;

    #[test]
    fn single_copy_reductions_start_where_each_library_was_measured() {
        // (library version line, the bytes from which auto takes one copy for Allreduce,
        // and for Reduce)
        let table = [
            ("MPICH Version:\t4.0.2\n", 0.0, 0.0),
            ("MPICH Version:      5.0.2\n", 0.0, 0.0),
            (
                "Intel(R) MPI Library 2021.19.0 for Linux* OS\n",
                1e18,
                1048576.0,
            ),
            ("Open MPI v4.1.4, package: Debian OpenMPI", 0.0, 1e18),
            ("Open MPI v5.0.11, package: Open MPI", 0.0, 0.0),
            ("Some MPI 1.0", 0.0, 0.0),
        ];
        for (version, all, root) in table {
            let p = for_library(version).params;
            assert_eq!((p.single_reduce, p.single_root), (all, root), "{version}");
            // and up to where copy-in-copy-out is taken: the slot only where MPICH's own
            // lost up to it (an unknown library takes Debian's MPICH's tuning)
            let mpich = version.starts_with("MPICH") || version.starts_with("Some");
            let max = if mpich { 16384.0 } else { 1024.0 };
            assert_eq!(p.shm_reduce_max, max, "{version}");
        }
    }

    #[test]
    fn libraries_are_keyed_by_name_and_version() {
        let cases = [
            (
                "MPICH Version:\t4.0.2\nMPICH Release date: Thu Apr  7 2022",
                Some("MPICH 4.0.2"),
            ),
            (
                "MPICH Version:      5.0.2\nMPICH Release date: Fri Sep 25",
                Some("MPICH 5.0.2"),
            ),
            (
                "Intel(R) MPI Library 2021.19.0 for Linux* OS\n",
                Some("Intel MPI 2021.19.0"),
            ),
            (
                "Open MPI v4.1.4, package: Debian OpenMPI, ident: 4.1.4",
                Some("Open MPI 4.1.4"),
            ),
            (
                "Open MPI v5.0.11, package: Open MPI user@localhost",
                Some("Open MPI 5.0.11"),
            ),
            ("MVAPICH2 Version 2.3", None),
            ("", None),
        ];
        for (v, want) in cases {
            assert_eq!(library_key(v).as_deref(), want, "{v:?}");
        }
    }

    #[test]
    fn a_library_without_data_forwards_blocking_calls() {
        let t = for_library("MPICH Version:\t4.0.2\n");
        assert!(!t.native_only && t.rows() > 0, "{}", t.source);
        for v in [
            "Intel(R) MPI Library 2021.19.0 for Linux* OS",
            "MPICH Version:      5.0.2\n",
            "Open MPI v4.1.4, package: Debian OpenMPI",
            "Open MPI v5.0.11, package: Open MPI",
        ] {
            let t = for_library(v);
            assert!(!t.native_only && t.rows() > 0, "{v}: {}", t.source);
        }
        let t = for_library("Intel(R) MPI Library 2021.20.0 for Linux* OS");
        assert!(t.native_only && t.rows() == 0);
        assert!(
            t.source.contains("none for Intel MPI 2021.20.0"),
            "{}",
            t.source
        );
    }
}

/// The tuning in force.
pub fn get() -> Arc<Tuning> {
    Arc::clone(&CURRENT.read().unwrap_or_else(|e| e.into_inner()))
}

/// Replaces the tuning (at init: a file, a calibration) and forgets cached decisions.
pub fn install(t: Tuning) {
    *CURRENT.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(t);
    super::reset();
}

/// The largest tuning file read, in bytes (4 MiB). A file of `scripts/shim-tune` holds a
/// few hundred rows of about 40 bytes; the built-in one is about 7 KB.
pub const MAX_FILE_BYTES: u64 = 4 << 20;

/// The most characters of a bad line an error quotes.
pub const QUOTE_CHARS: usize = 80;

/// A bad line for an error message: at most [`QUOTE_CHARS`] characters, escaped, with `…`
/// and the line's length when it is cut.
fn quote_line(raw: &str) -> String {
    match raw.char_indices().nth(QUOTE_CHARS) {
        None => format!("{raw:?}"),
        Some((cut, _)) => format!(
            "{:?}… (the first {QUOTE_CHARS} of {} characters)",
            &raw[..cut],
            raw.chars().count()
        ),
    }
}

/// What a file that is not a regular file is, for the refusal.
fn kind(ft: std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if ft.is_dir() {
        "a directory"
    } else if ft.is_fifo() {
        "a FIFO"
    } else if ft.is_char_device() {
        "a character device"
    } else if ft.is_block_device() {
        "a block device"
    } else if ft.is_socket() {
        "a socket"
    } else {
        "not a regular file"
    }
}

/// Reads a text file named by the environment, defensively: opened without blocking
/// (`O_NONBLOCK`, so that a FIFO without a writer cannot stall the open) and without
/// becoming a controlling terminal, checked with `fstat` to be a regular file, and read
/// up to `cap` bytes (a larger file is refused, not truncated). The error never quotes
/// the file's contents.
pub fn read_capped(path: &str, cap: u64) -> Result<String, String> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .map_err(|e| format!("cannot open {path}: {e}"))?;
    let meta = f
        .metadata()
        .map_err(|e| format!("cannot stat {path}: {e}"))?;
    if !meta.is_file() {
        return Err(format!(
            "{path} is {}; only a regular file is read",
            kind(meta.file_type())
        ));
    }
    let too_big = || {
        let limit = if cap >= 1 << 20 && cap % (1 << 20) == 0 {
            format!("{} MiB", cap >> 20)
        } else {
            format!("{cap} bytes")
        };
        format!("{path} is larger than the limit of {limit}")
    };
    if meta.len() > cap {
        return Err(too_big());
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    f.take(cap + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read {path}: {e}"))?;
    if bytes.len() as u64 > cap {
        // it grew while being read (or its size was not its length, as in /proc)
        return Err(too_big());
    }
    String::from_utf8(bytes).map_err(|e| {
        format!(
            "{path} is not text (invalid UTF-8 at byte {})",
            e.utf8_error().valid_up_to()
        )
    })
}

/// Loads `SHIM_TUNING_FILE` on top of the built-in defaults (see [`read_capped`]). In
/// secure-execution mode the variable is ignored at configuration time; should the file
/// be read anyway, errors do not quote it.
pub fn load_file(path: &str) -> Result<Tuning, String> {
    load_file_with(path, MAX_FILE_BYTES, crate::platform::config::at_secure())
}

fn load_file_with(path: &str, cap: u64, secure: bool) -> Result<Tuning, String> {
    let text = read_capped(path, cap)?;
    Tuning::parse_quoting(&text, path, &builtin(), !secure)
}

/// The built-in tuning (for tests and the decision table).
pub fn defaults() -> Tuning {
    builtin()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_lookup() {
        let text = "param L 2.5\nparam gamma 1e-4 # comment\nbest MPI_Allreduce 2 1024 ring\nbest allreduce 2 65536 rabenseifner\n";
        let t = Tuning::parse(text, "t", &Tuning::default()).unwrap();
        assert_eq!(t.params.l, 2.5);
        assert_eq!(t.measured(Coll::Allreduce, 2, 1, 1024), Some(Algo::Ring));
        assert_eq!(t.measured(Coll::Allreduce, 2, 1, 1500), Some(Algo::Ring));
        assert_eq!(
            t.measured(Coll::Allreduce, 2, 1, 60000),
            Some(Algo::Rabenseifner)
        );
        assert_eq!(t.measured(Coll::Allreduce, 2, 1, 8192), None); // too far from both
        assert_eq!(t.measured(Coll::Allreduce, 3, 1, 1024), None);
        // a single row at size 0 answers for every size
        let u = Tuning::parse(
            "best MPI_Alltoallv 4 0 pairwise
",
            "u",
            &t,
        )
        .unwrap();
        assert_eq!(
            u.measured(Coll::Alltoallv, 4, 1, 1 << 20),
            Some(Algo::Pairwise)
        );
        let again = Tuning::parse(&t.to_text(), "t2", &Tuning::default()).unwrap();
        assert_eq!(again.params, t.params);
        assert_eq!(again.rows(), 2);
    }

    #[test]
    fn the_nearest_row_is_the_one_nearest_on_a_log_scale() {
        // the definition: the least distance of the sizes' logarithms, at most 1 (the
        // first row of several as near)
        let by_log = |t: &Tuning, coll: Coll, p: i32, nodes: i32, bytes: i64| {
            let rows = t.best.get(&(coll as u8, p, nodes))?;
            if let [(0, a)] = rows[..] {
                return Some(a);
            }
            let lg = |b: i64| (b.max(1) as f64).log2();
            let (d, a) = rows
                .iter()
                .map(|&(b, a)| ((lg(b) - lg(bytes)).abs(), a))
                .min_by(|u, v| u.0.partial_cmp(&v.0).unwrap())?;
            (d <= 1.0 + 1e-9).then_some(a)
        };
        let mut sizes: Vec<i64> = (0..=32)
            .flat_map(|e| [(1i64 << e) - 1, 1 << e, 3 << e >> 1])
            .collect();
        sizes.extend([0, 5, 100, 1000, 3000, 10_000, 100_000, 1_000_000]);
        for (name, text) in SHIPPED {
            let t = Tuning::parse(text, name, &Tuning::default()).unwrap();
            for &(c, p, nodes) in t.best.keys() {
                let coll = COLLS[c as usize - 1].coll;
                for &b in &sizes {
                    assert_eq!(
                        t.measured(coll, p, nodes, b),
                        by_log(&t, coll, p, nodes, b),
                        "{name}: {coll:?} at {p}/{nodes}, {b} bytes"
                    );
                }
            }
        }
    }

    #[test]
    fn rows_measured_across_nodes_answer_only_there() {
        let text = "best MPI_Allreduce 2 4096 ring\nbest MPI_Allreduce 2/2 4096 recursive-doubling\nbest MPI_Bcast 8/4 0 binomial\n";
        let t = Tuning::parse(text, "t", &Tuning::default()).unwrap();
        assert_eq!(t.measured(Coll::Allreduce, 2, 1, 4096), Some(Algo::Ring));
        assert_eq!(
            t.measured(Coll::Allreduce, 2, 2, 4096),
            Some(Algo::RecursiveDoubling)
        );
        assert!(t.covers(Coll::Bcast, 8, 4));
        assert!(!t.covers(Coll::Bcast, 8, 1) && !t.covers(Coll::Bcast, 8, 2));
        assert!(!t.covers(Coll::Allreduce, 2, 3));
        // the file form keeps the node count
        let again = Tuning::parse(&t.to_text(), "t2", &Tuning::default()).unwrap();
        assert_eq!(
            again.measured(Coll::Allreduce, 2, 2, 4096),
            Some(Algo::RecursiveDoubling)
        );
        assert_eq!(again.rows(), 3);
        // a node count outside 1..=P, or not a number, is refused with the line
        for bad in [
            "best MPI_Bcast 2/3 8 binomial",
            "best MPI_Bcast 2/0 8 binomial",
            "best MPI_Bcast 2/x 8 binomial",
        ] {
            let e = Tuning::parse(bad, "f", &Tuning::default()).unwrap_err();
            assert!(e.starts_with("f:1: "), "{e}");
        }
    }

    #[test]
    fn errors_name_the_line() {
        let e = Tuning::parse("param L x\n", "f", &Tuning::default()).unwrap_err();
        assert!(e.contains("f:1") && e.contains("not a number"), "{e}");
        let e = Tuning::parse("best MPI_Bcast 2 8 ring\n", "f", &Tuning::default()).unwrap_err();
        assert!(e.contains("valid: native, linear"), "{e}");
        let e = Tuning::parse("param Z 1\n", "f", &Tuning::default()).unwrap_err();
        assert!(e.contains("unknown parameter"), "{e}");
    }

    #[test]
    fn builtin_parses() {
        let _ = builtin();
    }

    /// A fresh directory for a test's files.
    fn scratch(name: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("shim-tuning-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn reads_only_regular_files() {
        let d = scratch("kinds");
        let good = d.join("good.tune");
        std::fs::write(&good, "param L 2.5\n").unwrap();
        let t = load_file(good.to_str().unwrap()).unwrap();
        assert_eq!(t.params.l, 2.5);
        // a directory, a device, a FIFO (with no writer: neither the open nor the read
        // may block) are refused by what they are
        let e = read_capped(d.to_str().unwrap(), MAX_FILE_BYTES).unwrap_err();
        assert!(
            e.contains("is a directory; only a regular file is read"),
            "{e}"
        );
        let e = read_capped("/dev/null", MAX_FILE_BYTES).unwrap_err();
        assert!(e.contains("/dev/null is a character device"), "{e}");
        let fifo = d.join("fifo");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let t0 = std::time::Instant::now();
        let e = load_file(fifo.to_str().unwrap()).unwrap_err();
        assert!(e.contains("is a FIFO; only a regular file is read"), "{e}");
        assert!(t0.elapsed() < std::time::Duration::from_secs(5));
        let e = load_file(d.join("missing").to_str().unwrap()).unwrap_err();
        assert!(
            e.contains("cannot open") && e.contains("No such file"),
            "{e}"
        );
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn dev_zero_is_refused_without_reading() {
        let e = load_file("/dev/zero").unwrap_err();
        assert!(e.contains("/dev/zero is a character device"), "{e}");
    }

    #[test]
    fn reads_at_most_the_cap() {
        let d = scratch("cap");
        let f = d.join("big.tune");
        let line = "param L 1\n";
        std::fs::write(
            &f,
            line.repeat(((MAX_FILE_BYTES as usize) / line.len()) + 1),
        )
        .unwrap();
        let e = load_file(f.to_str().unwrap()).unwrap_err();
        assert!(
            e.ends_with("big.tune is larger than the limit of 4 MiB"),
            "{e}"
        );
        // exactly at the cap is read
        std::fs::write(&f, "#".repeat(99) + "\n").unwrap();
        assert!(read_capped(f.to_str().unwrap(), 100).is_ok());
        let e = read_capped(f.to_str().unwrap(), 99).unwrap_err();
        assert!(e.ends_with("is larger than the limit of 99 bytes"), "{e}");
        // not text: refused without quoting
        std::fs::write(&f, b"param L \xff\xfe secret\n").unwrap();
        let e = load_file(f.to_str().unwrap()).unwrap_err();
        assert!(e.contains("is not text") && !e.contains("secret"), "{e}");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_bad_line_is_quoted_short() {
        let d = scratch("quote");
        let f = d.join("bad.tune");
        let long = format!("param L 1\n{}\n", "x".repeat(1 << 20));
        std::fs::write(&f, &long).unwrap();
        let e = load_file(f.to_str().unwrap()).unwrap_err();
        assert!(
            e.len() < 400,
            "{} bytes: {}",
            e.len(),
            &e[..400.min(e.len())]
        );
        assert!(e.contains("bad.tune:2: expected `param NAME VALUE`"), "{e}");
        let shown = format!(
            "\"{}\"… (the first 80 of 1048576 characters)",
            "x".repeat(80)
        );
        assert!(e.ends_with(&shown), "{e}");
        // multi-byte characters are cut at a character boundary
        let e = Tuning::parse(&"é".repeat(100), "u", &Tuning::default()).unwrap_err();
        assert!(e.contains(&format!("\"{}\"…", "é".repeat(80))), "{e}");
        // a short line is quoted whole
        let e = Tuning::parse("bogus line\n", "s", &Tuning::default()).unwrap_err();
        assert!(e.ends_with(": \"bogus line\""), "{e}");
        // secure-execution mode: the line number only, no contents
        std::fs::write(&f, "param L 1\nsecret contents\n").unwrap();
        let e = load_file_with(f.to_str().unwrap(), MAX_FILE_BYTES, true).unwrap_err();
        assert!(
            e.ends_with(
                "bad.tune:2: expected `param NAME VALUE` or `best COLL P[/NODES] BYTES ALGORITHM`"
            ),
            "{e}"
        );
        std::fs::remove_dir_all(&d).unwrap();
    }
}

//! Tuning data: the model's parameters and a table of measured winners.
//!
//! A tuning file is text, one item per line (`#` starts a comment):
//! ```text
//! param L 0.35                     # a model parameter (see model::NAMES), µs or µs/byte
//! best MPI_Allreduce 2 65536 ring  # measured fastest (blocking) at P = 2, 64 KiB
//! ```
//! `scripts/shim-tune` writes one (`SHIM_CALIBRATE=1` for the parameters, the latency
//! benchmark's all-algorithms mode for the table); `SHIM_TUNING_FILE` loads it. Without a
//! file the built-in defaults apply: parameters and a table measured on the reference
//! machine (`default.tune` next to this file). Measured rows decide blocking calls at
//! their communicator size within a factor of two of their message size; elsewhere the
//! model decides.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, RwLock};

use super::model::{NAMES, Params};
use super::{Algo, COLLS, Coll, find, spec_of};

/// Tuning in force.
#[derive(Clone, Debug, Default)]
pub struct Tuning {
    pub params: Params,
    /// (coll, P) -> (bytes, algorithm), sorted by bytes.
    best: HashMap<(u8, i32), Vec<(i64, Algo)>>,
    /// Where it came from, for the decision table and logs.
    pub source: String,
}

impl Tuning {
    /// The measured winner for a blocking call, if a row is close enough.
    pub fn measured(&self, coll: Coll, p: i32, bytes: i64) -> Option<Algo> {
        let rows = self.best.get(&(coll as u8, p))?;
        if let [(0, a)] = rows[..] {
            // one row at size 0: a decision for every size (collectives decided by the
            // process count alone, or files written before they were sized)
            return Some(a);
        }
        let lg = |b: i64| (b.max(1) as f64).log2();
        let x = lg(bytes);
        let (d, a) = rows
            .iter()
            .map(|&(b, a)| ((lg(b) - x).abs(), a))
            .min_by(|u, v| u.0.partial_cmp(&v.0).unwrap_or(std::cmp::Ordering::Equal))?;
        (d <= 1.0 + 1e-9).then_some(a)
    }

    pub fn add_best(&mut self, coll: Coll, p: i32, bytes: i64, algo: Algo) {
        let v = self.best.entry((coll as u8, p)).or_default();
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
        for (c, p) in keys {
            let spec = &COLLS[c as usize - 1];
            for &(b, a) in &self.best[&(c, p)] {
                s.push_str(&format!("best {} {p} {b} {}\n", spec.mpi, a.name()));
            }
        }
        s
    }

    /// Parses a tuning file; `base` supplies what the file does not set.
    pub fn parse(text: &str, source: &str, base: &Tuning) -> Result<Tuning, String> {
        let mut t = base.clone();
        t.source = source.to_string();
        for (i, raw) in text.lines().enumerate() {
            let line = raw.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let err = |what: &str| format!("{source}:{}: {what}: {raw:?}", i + 1);
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
                    let p: i32 = p.parse().map_err(|_| err("bad process count"))?;
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
                    t.add_best(spec.coll, p, bytes, a);
                }
                _ => {
                    return Err(err(
                        "expected `param NAME VALUE` or `best COLL P BYTES ALGORITHM`",
                    ));
                }
            }
        }
        Ok(t)
    }
}

const BUILTIN: &str = include_str!("default.tune");

fn builtin() -> Tuning {
    Tuning::parse(BUILTIN, "built-in defaults", &Tuning::default())
        .expect("the built-in tuning parses")
}

static CURRENT: LazyLock<RwLock<Arc<Tuning>>> = LazyLock::new(|| RwLock::new(Arc::new(builtin())));

/// The tuning in force.
pub fn get() -> Arc<Tuning> {
    Arc::clone(&CURRENT.read().unwrap_or_else(|e| e.into_inner()))
}

/// Replaces the tuning (at init: a file, a calibration) and forgets cached decisions.
pub fn install(t: Tuning) {
    *CURRENT.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(t);
    super::reset();
}

/// Loads `SHIM_TUNING_FILE` on top of the built-in defaults.
pub fn load_file(path: &str) -> Result<Tuning, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read {path}: {e}"))?;
    Tuning::parse(&text, path, &builtin())
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
        assert_eq!(t.measured(Coll::Allreduce, 2, 1024), Some(Algo::Ring));
        assert_eq!(t.measured(Coll::Allreduce, 2, 1500), Some(Algo::Ring));
        assert_eq!(
            t.measured(Coll::Allreduce, 2, 60000),
            Some(Algo::Rabenseifner)
        );
        assert_eq!(t.measured(Coll::Allreduce, 2, 8192), None); // too far from both
        assert_eq!(t.measured(Coll::Allreduce, 3, 1024), None);
        // a single row at size 0 answers for every size
        let u = Tuning::parse(
            "best MPI_Alltoallv 4 0 pairwise
",
            "u",
            &t,
        )
        .unwrap();
        assert_eq!(
            u.measured(Coll::Alltoallv, 4, 1 << 20),
            Some(Algo::Pairwise)
        );
        let again = Tuning::parse(&t.to_text(), "t2", &Tuning::default()).unwrap();
        assert_eq!(again.params, t.params);
        assert_eq!(again.rows(), 2);
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
}

//! Layer: services. May use: core, platform.
//!
//! The collective layer's own variables: `SHIM_<COLL>_ALGORITHM`, `SHIM_<COLL>_K` and
//! `SHIM_<COLL>_SEGMENT`, which force an algorithm or its parameters per collective (as
//! UCC's TL owns `ALLREDUCE_KN_RADIX` and LibNBC `libnbc_iallreduce_algorithm`).
//! `platform::config` hands them over as read (it knows no collective); `hooks::init`
//! parses them here at init, adds the errors and warnings to the job-wide list, and hands
//! the result to [`super::configure`].

use super::{Algo, COLLS, CollSpec, Forced, Param};
use crate::platform::config::{self, ConfigError, parse_size};
use crate::services::coll::Coll;

/// The parsed variables.
#[derive(Debug, Default)]
pub struct Settings {
    /// Forced algorithms and parameters, by `Coll - 1`.
    pub forced: [Forced; Coll::COUNT],
    pub errors: Vec<ConfigError>,
    pub warnings: Vec<String>,
}

/// Parses the per-collective variables (name, value), as `platform::config` collected them.
pub fn parse(vars: &[(String, String)]) -> Settings {
    let mut out = Settings::default();
    for (k, v) in vars {
        match coll_var(k) {
            Some((spec, what)) => {
                if let Err(e) = parse_one(&mut out.forced, spec, what, k, v) {
                    out.errors.push(e);
                }
            }
            None => out.warnings.push(format!(
                "unknown variable {k} is ignored (did you mean {}?)",
                config::closest(k)
            )),
        }
    }
    out
}

/// A hash of everything that steers algorithm selection, which must be equal on every
/// rank (else ranks could pick different algorithms and deadlock).
pub fn fingerprint(forced: &[Forced; Coll::COUNT], c: &config::Config) -> u64 {
    config::fnv1a(
        format!(
            "{:?}|{:?}|{}|{:?}|{:?}",
            forced, c.tuning_file, c.calibrate, c.transport, c.shm
        )
        .as_bytes(),
    )
}

/// Which per-collective variable a name is: `SHIM_<COLL>_ALGORITHM`, `_K` or `_SEGMENT`
/// for a collective that has that parameter.
fn coll_var(name: &str) -> Option<(&'static CollSpec, &'static str)> {
    let rest = name.strip_prefix("SHIM_")?;
    for what in config::COLL_VAR_SUFFIXES {
        if let Some(coll) = rest.strip_suffix(what).and_then(|r| r.strip_suffix('_')) {
            let spec = COLLS.iter().find(|c| c.env == coll)?;
            let ok = match what {
                "K" => spec.k.is_some(),
                "SEGMENT" => spec.segment.is_some(),
                _ => true,
            };
            return ok.then_some((spec, what));
        }
    }
    None
}

fn parse_one(
    forced: &mut [Forced; Coll::COUNT],
    spec: &CollSpec,
    what: &str,
    name: &str,
    v: &str,
) -> Result<(), ConfigError> {
    let slot = &mut forced[spec.coll as usize - 1];
    let bad = |allowed: String| ConfigError {
        var: name.into(),
        value: v.into(),
        allowed,
    };
    match what {
        "ALGORITHM" => {
            let names: Vec<&str> = std::iter::once("auto")
                .chain(spec.algos.iter().map(|a| a.name()))
                .collect();
            match Algo::from_name(v) {
                Some(a) if a == Algo::Auto || spec.algos.contains(&a) => slot.algo = a,
                _ => return Err(bad(names.join(", "))),
            }
        }
        _ => {
            let p = if what == "K" { spec.k } else { spec.segment }.expect("checked by coll_var");
            let parsed = if what == "K" {
                v.trim().parse::<i64>().ok()
            } else {
                parse_size(v).and_then(|x| i64::try_from(x).ok())
            };
            match parsed {
                Some(x) if (p.min..=p.max).contains(&x) => {
                    if what == "K" {
                        slot.k = Some(x)
                    } else {
                        slot.seg = Some(x)
                    }
                }
                _ => return Err(bad(format!("{} to {} ({})", p.min, p.max, p.doc))),
            }
        }
    }
    Ok(())
}

/// The README table of algorithms per collective, generated from the registry.
pub fn algorithms_table() -> String {
    let mut s = String::from(
        "| Collective | `SHIM_<COLL>_ALGORITHM` values | `_K` | `_SEGMENT` |\n|---|---|---|---|\n",
    );
    for c in COLLS.iter() {
        let algos: Vec<String> = c.algos.iter().map(|a| format!("`{}`", a.name())).collect();
        let param = |p: Option<Param>| match p {
            Some(p) if p.default > 0 => {
                format!("{} (default {}, {}..{})", p.doc, p.default, p.min, p.max)
            }
            Some(p) => format!("{} ({}..{})", p.doc, p.min, p.max),
            None => "-".into(),
        };
        s.push_str(&format!(
            "| `{}` ({}) | `auto`, {} | {} | {} |\n",
            c.env,
            c.mpi,
            algos.join(", "),
            param(c.k),
            param(c.segment)
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(pairs: &[(&str, &str)]) -> Settings {
        let l = config::load_from(pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        assert!(
            l.errors.is_empty() && l.warnings.is_empty(),
            "{:?} {:?}",
            l.errors,
            l.warnings
        );
        parse(&l.config.coll_vars)
    }

    #[test]
    fn readme_documents_every_algorithm() {
        crate::platform::config::tests::readme_section(
            "<!-- BEGIN SHIM_ALGORITHMS (generated from src/services/coll/select/mod.rs by `UPDATE_README=1 cargo test readme`) -->\n",
            "<!-- END SHIM_ALGORITHMS -->",
            &algorithms_table(),
        );
    }

    #[test]
    fn per_collective_variables() {
        let l = load(&[
            ("SHIM_ALLREDUCE_ALGORITHM", "Ring"),
            ("SHIM_BCAST_K", "8"),
            ("SHIM_BCAST_SEGMENT", "16K"),
            ("SHIM_GATHERV_ALGORITHM", "native"),
        ]);
        assert!(
            l.errors.is_empty() && l.warnings.is_empty(),
            "{:?} {:?}",
            l.errors,
            l.warnings
        );
        use crate::services::coll::Coll;
        let a = &l.forced;
        assert_eq!(a[Coll::Allreduce as usize - 1].algo, Algo::Ring);
        assert_eq!(a[Coll::Bcast as usize - 1].k, Some(8));
        assert_eq!(a[Coll::Bcast as usize - 1].seg, Some(16384));
        assert_eq!(a[Coll::Gatherv as usize - 1].algo, Algo::Native);
        let bad = load(&[
            ("SHIM_ALLREDUCE_ALGORITHM", "bruck"),
            ("SHIM_BCAST_K", "1"),
            ("SHIM_ALLTOALLV_ALGORITHM", "bruck"),
        ]);
        assert_eq!(bad.errors.len(), 3, "{:?}", bad.errors);
        // sorted by name: ALLREDUCE, ALLTOALLV, BCAST
        let msg = bad.errors[0].to_string() + &bad.errors[1].to_string();
        assert!(msg.contains("auto, native, recursive-doubling"), "{msg}");
        assert!(msg.contains("SHIM_ALLTOALLV_ALGORITHM=\"bruck\""), "{msg}");
        // a parameter the collective does not have is an unknown name
        let w = load(&[("SHIM_ALLTOALL_K", "2")]);
        assert_eq!(w.warnings.len(), 1);
    }
}

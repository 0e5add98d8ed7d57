//! The layer rule, checked: every file under `src/` names its layer and the layers it may use
//! in its first doc line (`//! Layer: core. May use: platform.`), every `crate::`/`super::`
//! path it names goes to a file of its own layer or of one it may use (the layers are
//! edge > hooks > services > core > platform, imports only go down), and no files import each
//! other in a loop. `LAYERS_PRINT=1 cargo test --test layers -- --nocapture` prints the graph.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

const LAYERS: [&str; 5] = ["platform", "core", "services", "hooks", "edge"];

/// Imports that go up, each with its reason (the README's layout section names them too).
/// At most 3 are allowed by the design.
const UPWARD: &[(&str, &str, &str)] = &[(
    "hooks/coll.rs",
    "edge/entry.rs",
    "the collective hooks take their fast lane (platform::guard::lane) before the entry \
     path's bookkeeping and then call edge::entry::slow themselves, so that a memoized call \
     touches one thread-local and the generated entry point stays small",
)];

fn layer_rank(name: &str) -> Option<usize> {
    LAYERS.iter().position(|l| *l == name)
}

/// A file's module path: `src/a/mod.rs` -> `a`, `src/a/b.rs` -> `a::b`, `src/lib.rs` -> ``.
fn module_of(src: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).unwrap();
    let mut parts: Vec<String> = rel
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    let last = parts.pop().unwrap();
    let stem = last.trim_end_matches(".rs");
    if stem != "mod" && stem != "lib" {
        parts.push(stem.to_string());
    }
    parts
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Ident(String),
    Colons,
    Open,
    Close,
    Semi,
    Comma,
    Star,
    Other,
}

/// Tokens of Rust source with comments, strings and char literals removed.
fn tokens(src: &str) -> Vec<Tok> {
    let b: Vec<char> = src.chars().collect();
    let mut i = 0;
    let mut out = Vec::new();
    while i < b.len() {
        let c = b[i];
        if c == '/' && b.get(i + 1) == Some(&'/') {
            while i < b.len() && b[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && b.get(i + 1) == Some(&'*') {
            let mut depth = 0;
            while i < b.len() {
                if b[i] == '/' && b.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if b[i] == '*' && b.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
        } else if c == 'r' && (b.get(i + 1) == Some(&'"') || b.get(i + 1) == Some(&'#')) && {
            // raw string r"..." / r#"..."#
            let mut j = i + 1;
            while b.get(j) == Some(&'#') {
                j += 1;
            }
            b.get(j) == Some(&'"')
        } {
            let mut j = i + 1;
            let mut hashes = 0;
            while b[j] == '#' {
                hashes += 1;
                j += 1;
            }
            j += 1;
            loop {
                if b[j] == '"' && (0..hashes).all(|k| b.get(j + 1 + k) == Some(&'#')) {
                    i = j + 1 + hashes;
                    break;
                }
                j += 1;
            }
            out.push(Tok::Other);
        } else if c == '"' {
            i += 1;
            while b[i] != '"' {
                if b[i] == '\\' {
                    i += 1;
                }
                i += 1;
            }
            i += 1;
            out.push(Tok::Other);
        } else if c == '\'' {
            // char literal ('x', '\n', '\u{..}') or a lifetime ('a)
            if b.get(i + 1) == Some(&'\\') {
                i += 2;
                while b[i] != '\'' {
                    i += 1;
                }
                i += 1;
            } else if b.get(i + 2) == Some(&'\'') {
                i += 3;
            } else {
                i += 1;
                while i < b.len() && (b[i].is_alphanumeric() || b[i] == '_') {
                    i += 1;
                }
            }
            out.push(Tok::Other);
        } else if c.is_alphabetic() || c == '_' {
            let s = i;
            while i < b.len() && (b[i].is_alphanumeric() || b[i] == '_') {
                i += 1;
            }
            out.push(Tok::Ident(b[s..i].iter().collect()));
        } else if c.is_ascii_digit() {
            while i < b.len() && (b[i].is_alphanumeric() || b[i] == '_' || b[i] == '.') {
                i += 1;
            }
            out.push(Tok::Other);
        } else {
            i += 1;
            out.push(match c {
                ':' if b.get(i) == Some(&':') => {
                    i += 1;
                    Tok::Colons
                }
                '{' => Tok::Open,
                '}' => Tok::Close,
                ';' => Tok::Semi,
                ',' => Tok::Comma,
                '*' => Tok::Star,
                c if c.is_whitespace() => continue,
                _ => Tok::Other,
            });
        }
    }
    out
}

/// Expands one `use` tree starting at `t[i]` under `prefix`; returns the index after it.
fn use_tree(t: &[Tok], mut i: usize, prefix: Vec<String>, out: &mut Vec<Vec<String>>) -> usize {
    let mut path = prefix;
    loop {
        match t.get(i) {
            Some(Tok::Ident(s)) if s == "as" => {
                i += 2;
                out.push(path);
                return i;
            }
            Some(Tok::Ident(s)) => {
                path.push(s.clone());
                i += 1;
            }
            Some(Tok::Colons) => i += 1,
            Some(Tok::Star) => {
                out.push(path);
                return i + 1;
            }
            Some(Tok::Open) => {
                i += 1;
                loop {
                    match t.get(i) {
                        Some(Tok::Close) => return i + 1,
                        Some(Tok::Comma) => i += 1,
                        _ => i = use_tree(t, i, path.clone(), out),
                    }
                }
            }
            _ => {
                out.push(path);
                return i;
            }
        }
    }
}

/// Every module path a file names: `use` trees and inline `crate::`/`super::`/`self::` paths,
/// made absolute (inline `mod x { .. }` blocks shift `super`/`self`).
fn paths_of(module: &[String], src: &str) -> Vec<Vec<String>> {
    let t = tokens(src);
    let mut out = Vec::new();
    let mut inline: Vec<(String, usize)> = Vec::new();
    let mut depth = 0usize;
    let mut i = 0;
    while i < t.len() {
        let here: Vec<String> = module
            .iter()
            .cloned()
            .chain(inline.iter().map(|(m, _)| m.clone()))
            .collect();
        match &t[i] {
            Tok::Open => {
                depth += 1;
                i += 1;
            }
            Tok::Close => {
                if inline.last().is_some_and(|(_, d)| *d == depth) {
                    inline.pop();
                }
                depth -= 1;
                i += 1;
            }
            Tok::Ident(k) if k == "mod" => {
                if let (Some(Tok::Ident(name)), Some(Tok::Open)) = (t.get(i + 1), t.get(i + 2)) {
                    inline.push((name.clone(), depth + 1));
                }
                i += 1;
            }
            Tok::Ident(k) if k == "use" => {
                let mut raw = Vec::new();
                i = use_tree(&t, i + 1, Vec::new(), &mut raw);
                out.extend(raw.into_iter().filter_map(|p| absolute(&here, p)));
            }
            Tok::Ident(k)
                if (k == "crate" || k == "super") && t.get(i + 1) == Some(&Tok::Colons) =>
            {
                let mut p = vec![k.clone()];
                let mut j = i + 1;
                while t.get(j) == Some(&Tok::Colons) {
                    match t.get(j + 1) {
                        Some(Tok::Ident(s)) => {
                            p.push(s.clone());
                            j += 2;
                        }
                        _ => break,
                    }
                }
                out.extend(absolute(&here, p));
                i = j;
            }
            _ => i += 1,
        }
    }
    out
}

fn absolute(here: &[String], p: Vec<String>) -> Option<Vec<String>> {
    let mut it = p.into_iter().peekable();
    let mut base: Vec<String> = match it.peek().map(String::as_str) {
        Some("crate") => {
            it.next();
            Vec::new()
        }
        Some("super") | Some("self") => here.to_vec(),
        _ => return None, // std, core, libc, ... or a local name
    };
    while let Some(s) = it.peek() {
        match s.as_str() {
            "super" => {
                base.pop()?;
            }
            "self" => {}
            _ => break,
        }
        it.next();
    }
    base.extend(it);
    Some(base)
}

/// The file that defines the longest prefix of `path`.
fn resolve(files: &BTreeMap<Vec<String>, String>, path: &[String]) -> Option<String> {
    (0..=path.len())
        .rev()
        .find_map(|n| files.get(&path[..n]).cloned())
}

struct Decl {
    layer: usize,
    may_use: BTreeSet<usize>,
}

fn declaration(name: &str, text: &str) -> Result<Decl, String> {
    let first = text.lines().next().unwrap_or("");
    let rest = first
        .strip_prefix("//! Layer: ")
        .ok_or_else(|| format!("{name}: the first line must be `//! Layer: <layer>. May use: <layers>.`, found `{first}`"))?;
    let (layer, may) = rest
        .split_once(". May use: ")
        .ok_or_else(|| format!("{name}: `{first}` has no `. May use: `"))?;
    let layer =
        layer_rank(layer.trim()).ok_or_else(|| format!("{name}: unknown layer `{layer}`"))?;
    let mut may_use = BTreeSet::new();
    for l in may.trim_end_matches('.').split(',') {
        let l = l.trim();
        if l == "nothing" {
            continue;
        }
        let r = layer_rank(l).ok_or_else(|| format!("{name}: unknown layer `{l}` in May use"))?;
        if r > layer {
            return Err(format!("{name}: may not use `{l}`, a layer above its own"));
        }
        may_use.insert(r);
    }
    may_use.insert(layer);
    Ok(Decl { layer, may_use })
}

/// Strongly connected components with more than one file (Tarjan).
fn loops(edges: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct T<'a> {
        e: &'a BTreeMap<String, BTreeSet<String>>,
        idx: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on: BTreeSet<&'a str>,
        out: Vec<Vec<String>>,
    }
    fn visit<'a>(t: &mut T<'a>, v: &'a str) {
        let n = t.idx.len();
        t.idx.insert(v, n);
        t.low.insert(v, n);
        t.stack.push(v);
        t.on.insert(v);
        for w in t.e.get(v).into_iter().flatten() {
            let w = w.as_str();
            if !t.idx.contains_key(w) {
                visit(t, w);
                let l = t.low[w].min(t.low[v]);
                t.low.insert(v, l);
            } else if t.on.contains(w) {
                let l = t.idx[w].min(t.low[v]);
                t.low.insert(v, l);
            }
        }
        if t.low[v] == t.idx[v] {
            let mut c = Vec::new();
            loop {
                let w = t.stack.pop().unwrap();
                t.on.remove(w);
                c.push(w.to_string());
                if w == v {
                    break;
                }
            }
            if c.len() > 1 {
                c.sort();
                t.out.push(c);
            }
        }
    }
    let mut t = T {
        e: edges,
        idx: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in edges.keys() {
        if !t.idx.contains_key(v.as_str()) {
            visit(&mut t, v);
        }
    }
    t.out
}

#[test]
fn imports_only_go_down_and_never_loop() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut list = Vec::new();
    rust_files(&src, &mut list);
    list.sort();
    let name = |p: &Path| p.strip_prefix(&src).unwrap().to_string_lossy().into_owned();
    let files: BTreeMap<Vec<String>, String> =
        list.iter().map(|p| (module_of(&src, p), name(p))).collect();

    let mut problems = Vec::new();
    let mut decls = BTreeMap::new();
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for p in &list {
        let text = std::fs::read_to_string(p).unwrap();
        let me = name(p);
        match declaration(&me, &text) {
            Ok(d) => {
                decls.insert(me.clone(), d);
            }
            Err(e) => problems.push(e),
        }
        let targets = edges.entry(me.clone()).or_default();
        for path in paths_of(&module_of(&src, p), &text) {
            if let Some(f) = resolve(&files, &path) {
                if f != me && f != "lib.rs" {
                    targets.insert(f);
                }
            }
        }
    }

    let mut upward = Vec::new();
    for (from, tos) in &edges {
        let Some(d) = decls.get(from) else { continue };
        for to in tos {
            let Some(t) = decls.get(to) else { continue };
            if !d.may_use.contains(&t.layer) {
                let why = UPWARD.iter().find(|(f, t2, _)| f == from && t2 == to);
                match why {
                    Some(_) => upward.push(format!("{from} -> {to}")),
                    None => problems.push(format!(
                        "{from} ({}) imports {to} ({}), which its layer line does not allow",
                        LAYERS[d.layer], LAYERS[t.layer]
                    )),
                }
            }
        }
    }
    for c in loops(&edges) {
        problems.push(format!(
            "import loop between {} files: {}",
            c.len(),
            c.join(", ")
        ));
    }

    if std::env::var_os("LAYERS_PRINT").is_some() {
        let n: usize = edges.values().map(BTreeSet::len).sum();
        println!(
            "{} files, {n} file-to-file imports, {} allowed upward",
            edges.len(),
            upward.len()
        );
        for (from, tos) in &edges {
            let l = decls.get(from).map_or("?", |d| LAYERS[d.layer]);
            println!(
                "{l:9} {from} -> {}",
                tos.iter().cloned().collect::<Vec<_>>().join(" ")
            );
        }
    }
    assert!(UPWARD.len() <= 3, "at most 3 upward imports");
    assert!(
        problems.is_empty(),
        "{} layer problems:\n{}",
        problems.len(),
        problems.join("\n")
    );
}

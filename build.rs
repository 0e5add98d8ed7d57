//! Generates the interposition layer from the single API table `src/platform/abi/mpi_functions.txt`.
//!
//! For every function in the table this writes, into `$OUT_DIR/api_gen.rs`:
//! - a function id and its name/category (for counters and `SHIM_STATS`),
//! - a lazily resolved `PMPI_*` forwarder in `crate::platform::api::pmpi` (dlsym at run time, so that
//!   `libshim.so` has no `libmpi` in `DT_NEEDED`),
//! - the exported `#[no_mangle] extern "C" MPI_*` entry point, which takes the fast path
//!   (straight to `PMPI_*`) when the shim is inactive or re-entered, and otherwise runs the
//!   hook named by the table inside `crate::edge::entry::run` (counters, timing, panic guard);
//!   the collective hooks do both themselves, after their fast lane (`crate::platform::guard::lane`).
//!
//! and, into `$OUT_DIR/fortran_gen.rs`, the Fortran entry points (`build_fortran.rs`).
//!
//! The generator refuses a table it does not understand (unknown C type, inconsistent
//! collective variants), so the table and the Rust hooks cannot drift apart silently.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;

/// The Fortran entry points (`mpif.h` / `use mpi`), generated from the same table.
#[path = "build_fortran.rs"]
mod fortran_gen;

#[derive(Clone, Debug)]
struct Param {
    name: String,
    /// Rust type in the generated code.
    rtype: String,
}

#[derive(Clone, Debug)]
struct Func {
    category: String,
    hook: String,
    /// Marked `W` in the table: `MPI_COMM_WORLD` arguments are mapped (ghost processes).
    world: bool,
    ret: String,
    name: String,
    params: Vec<Param>,
}

/// Handle types that are `int` in the MPICH ABI (`MPI_<T>_f2c` is a cast macro in mpi.h);
/// the ABI module defines them under the same name.
const INT_HANDLES: &[&str] = &[
    "MPI_Comm",
    "MPI_Datatype",
    "MPI_Op",
    "MPI_Win",
    "MPI_Group",
    "MPI_Request",
    "MPI_Info",
    "MPI_Errhandler",
    "MPI_Message",
    "MPI_Session",
];

/// The other MPI typedefs that the ABI module defines under the same name.
const OTHER_TYPES: &[&str] = &[
    "MPI_File",
    "MPI_Aint",
    "MPI_Count",
    "MPI_Offset",
    "MPI_Fint",
    "MPI_Status",
];

fn base_rust_type(base: &str) -> Option<(&'static str, i32)> {
    // Returns the Rust type and a pointer-level adjustment (function typedefs are used
    // as `fn_t *p` and decay to one pointer, which we model as `*mut c_void`).
    Some(match base {
        "int" => ("c_int", 0),
        "char" => ("c_char", 0),
        "void" => ("c_void", 0),
        "double" => ("f64", 0),
        "MPIO_Request" => ("MPI_Request", 0),
        "MPI_T_cb_safety" | "MPI_T_source_order" => ("c_int", 0),
        "MPI_F08_status" => ("c_void", 0),
        // Opaque pointer handles of the tools interface.
        "MPI_T_enum"
        | "MPI_T_cvar_handle"
        | "MPI_T_pvar_handle"
        | "MPI_T_pvar_session"
        | "MPI_T_event_registration"
        | "MPI_T_event_instance" => ("*mut c_void", 0),
        b if b.ends_with("_function") || b.ends_with("_function_c") || b.ends_with("_fn") => {
            ("c_void", 1)
        }
        _ => return None,
    })
}

fn rust_type(ctype: &str, array_dims: usize) -> String {
    let is_const = ctype.split_whitespace().next() == Some("const");
    let stars = ctype.matches('*').count() + array_dims;
    let base: String = ctype
        .replace('*', " ")
        .split_whitespace()
        .filter(|w| *w != "const")
        .collect::<Vec<_>>()
        .join(" ");
    let (rbase, adjust) = if let Some((r, a)) = base_rust_type(&base) {
        (r.to_string(), a)
    } else if INT_HANDLES.contains(&base.as_str()) || OTHER_TYPES.contains(&base.as_str()) {
        (base.clone(), 0)
    } else {
        panic!("mpi_functions.txt: unknown C type `{ctype}`; teach build.rs about it");
    };
    let mut levels = stars as i32 - adjust;
    if levels < 0 {
        levels = 0;
    }
    if adjust > 0 && stars == 0 {
        // a function type used by value decays to a pointer
        levels = 0;
    }
    let mut t = rbase;
    if adjust > 0 {
        t = "*mut c_void".to_string();
    }
    for i in 0..levels {
        let innermost = i == 0;
        t = if innermost && is_const {
            format!("*const {t}")
        } else {
            format!("*mut {t}")
        };
    }
    t
}

fn parse_param(p: &str) -> Param {
    let p = p.trim();
    // name = last identifier before optional array brackets
    let (decl, dims) = match p.find('[') {
        Some(i) => (&p[..i], p[i..].matches('[').count().min(1)),
        None => (p, 0),
    };
    let decl = decl.trim_end();
    let split = decl
        .rfind(|c: char| !(c.is_alphanumeric() || c == '_'))
        .map(|i| i + 1)
        .unwrap_or(0);
    let name = decl[split..].to_string();
    let ctype = decl[..split].trim().to_string();
    assert!(
        !name.is_empty() && !ctype.is_empty(),
        "cannot parse parameter `{p}`"
    );
    let rtype = rust_type(&ctype, dims);
    // Rust keywords used as C parameter names
    let name = match name.as_str() {
        "type" => "type_".to_string(),
        "ref" => "ref_".to_string(),
        _ => name,
    };
    Param { name, rtype }
}

fn parse_line(line: &str) -> Option<Func> {
    let line = line.trim();
    if line.is_empty() || line.starts_with('#') {
        return None;
    }
    let words: Vec<&str> = line.split_whitespace().collect();
    let (category, hook, world, ret) = (
        words[0].to_string(),
        words[1].to_string(),
        words[2],
        words[3].to_string(),
    );
    assert!(
        world == "W" || world == "-",
        "mpi_functions.txt: world column must be W or -: {line}"
    );
    let proto = words[4..].join(" ");
    let open = proto.find('(').expect("prototype without (");
    let name = proto[..open].trim().to_string();
    let inner = proto[open + 1..proto.rfind(')').expect("prototype without )")].trim();
    let params = if inner == "void" || inner.is_empty() {
        Vec::new()
    } else {
        inner.split(',').map(parse_param).collect()
    };
    let takes_comm = params.iter().any(|p: &Param| p.rtype == "MPI_Comm");
    assert!(
        takes_comm == (world == "W"),
        "mpi_functions.txt: {name} is marked {world} but {} a communicator by value",
        if takes_comm { "takes" } else { "does not take" }
    );
    Some(Func {
        category,
        hook,
        world: world == "W",
        ret,
        name,
        params,
    })
}

fn rust_ret(ret: &str) -> &'static str {
    match ret {
        "int" => "c_int",
        "double" => "f64",
        "MPI_Aint" => "MPI_Aint",
        "MPI_Fint" => "MPI_Fint",
        "MPI_File" => "MPI_File",
        "MPI_Info" => "MPI_Info",
        other => panic!("unknown return type {other}"),
    }
}

/// Collective variant: what trails the base argument list.
#[derive(PartialEq)]
enum Variant {
    Blocking,
    Nonblocking,
    Persistent,
}

fn coll_variant(f: &Func) -> Variant {
    let n = f.params.len();
    let tail = |i: usize| f.params.get(n.wrapping_sub(i)).map(|p| p.name.as_str());
    if tail(1) == Some("request") && tail(2) == Some("info") && f.name.contains("_init") {
        Variant::Persistent
    } else if tail(1) == Some("request") {
        Variant::Nonblocking
    } else {
        Variant::Blocking
    }
}

fn coll_base(f: &Func, blocking: &[String]) -> String {
    let mut b = f.name.trim_start_matches("MPI_").to_string();
    if let Some(s) = b.strip_suffix("_c") {
        b = s.to_string();
    }
    if let Some(s) = b.strip_suffix("_init") {
        b = s.to_string();
    }
    if !blocking.contains(&b) {
        if let Some(s) = b.strip_prefix('I') {
            let cand = blocking
                .iter()
                .find(|x| x.to_lowercase() == s.to_lowercase());
            b = cand
                .unwrap_or_else(|| panic!("{}: no blocking collective for this variant", f.name))
                .clone();
        }
    }
    b.to_lowercase()
}

/// Count-like parameters of collectives are widened to i64 (scalars) or wrapped as
/// `Counts` (arrays of int or of MPI_Count/MPI_Aint) so one hook serves int and _c forms.
fn coll_arg(p: &Param) -> (String, String) {
    let widened = p.name.contains("count") || p.name.contains("displs");
    if !widened {
        return (p.name.clone(), p.rtype.clone());
    }
    match p.rtype.as_str() {
        "c_int" => (format!("{} as i64", p.name), "i64".into()),
        "MPI_Count" | "MPI_Aint" => (p.name.clone(), "i64".into()),
        "*const c_int" => (
            format!("crate::platform::abi::Counts::I32({})", p.name),
            "Counts".into(),
        ),
        "*const MPI_Count" | "*const MPI_Aint" => (
            format!("crate::platform::abi::Counts::I64({})", p.name),
            "Counts".into(),
        ),
        other => panic!("unexpected count type {other} for {}", p.name),
    }
}

/// Picks (count, datatype) parameters for the byte counter of generated pass-throughs.
/// Calls that hand datatype handles to the program (constructors, `MPI_Type_get_contents`,
/// `MPI_File_get_view`): after success the shim forgets them as freed values
/// (`crate::core::retain::types_handed_out`), since the system MPI reuses a freed handle
/// for its next type. Statements for the generated entry point, none for other calls.
fn handed_out_types(f: &Func) -> Vec<String> {
    if !(f.category == "dtype" || f.category == "file")
        || f.name == "MPI_Type_free"
        || f.name == "MPI_Type_commit"
    {
        return Vec::new();
    }
    f.params
        .iter()
        // MPI_Type_struct's array_of_types is an input, non-const in its old binding
        .filter(|p| p.rtype == "*mut MPI_Datatype" && p.name != "array_of_types")
        .map(|p| {
            let n = if p.name == "array_of_datatypes" {
                assert!(
                    f.params.iter().any(|q| q.name == "max_datatypes"),
                    "{}: an array of datatypes without max_datatypes",
                    f.name
                );
                "max_datatypes as i64"
            } else {
                "1"
            };
            // get_contents returns new references to existing types, the others new types
            let fresh = !f.name.starts_with("MPI_Type_get_contents");
            format!(
                "crate::core::retain::types_handed_out({}, {n}, {fresh});",
                p.name
            )
        })
        .collect()
}

/// A datatype argument the program freed is rejected with `MPI_ERR_TYPE` before the call
/// goes on (MPI-4.0 §2.5.1; MPICH 4.0.2 crashes on one, and the shim keeps no placeholder
/// type at a freed handle, see `crate::core::retain`): a statement for the entry points
/// that take datatypes by value and report errors on a communicator, a window or no object.
fn freed_type_check(f: &Func) -> String {
    let checked = f.ret == "int" && f.category != "init";
    let types: Vec<&str> = f
        .params
        .iter()
        .filter(|p| p.rtype == "MPI_Datatype")
        .map(|p| p.name.as_str())
        .collect();
    if !checked || types.is_empty() || f.category == "file" || f.category == "session" {
        return String::new();
    }
    if error_object(f).contains("Obj::Other") {
        return String::new();
    }
    format!(
        "        if crate::core::retain::any_freed_type(&[{}]) {{ return crate::platform::errors::raise_freed_type(obj__, \"{}\"); }}\n",
        types.join(", "),
        f.name
    )
}

fn bytes_expr(f: &Func) -> Option<String> {
    const PAIRS: &[(&str, &str)] = &[
        ("count", "datatype"),
        ("origin_count", "origin_datatype"),
        ("sendcount", "sendtype"),
        ("recvcount", "recvtype"),
        ("incount", "datatype"),
    ];
    for (c, d) in PAIRS {
        let cp = f.params.iter().find(|p| p.name == *c);
        let dp = f.params.iter().find(|p| p.name == *d);
        if let (Some(cp), Some(dp)) = (cp, dp) {
            if (cp.rtype == "c_int" || cp.rtype == "MPI_Count") && dp.rtype == "MPI_Datatype" {
                return Some(format!(
                    "crate::edge::entry::note_typed_bytes({} as i64, {})",
                    cp.name, dp.name
                ));
            }
        }
    }
    None
}

/// Large-count functions whose classic form has a different shape (arrays, extra outputs, a
/// user function of another prototype): `crate::platform::abi::large_count` implements them
/// on the classic calls for libraries without `_c` symbols.
const HAND_WRITTEN_LARGE_COUNT: &[&str] = &[
    "MPI_Type_get_envelope_c",
    "MPI_Type_create_struct_c",
    "MPI_Op_create_c",
    "MPI_Type_contiguous_c",
    "MPI_Type_indexed_c",
    "MPI_Type_create_indexed_block_c",
    "MPI_Type_create_hindexed_c",
    "MPI_Type_create_hindexed_block_c",
    "MPI_Type_create_subarray_c",
    "MPI_Type_create_darray_c",
    "MPI_Type_get_contents_c",
];

/// Functions Open MPI lacks that need no library support: `MPI_Aint_add`/`_diff` (macros in
/// its mpi.h, MPI-4.0 §5.1.5), and (with every `MPI_T_event_*`/`MPI_T_source_*` function) the
/// MPI-4.0 events interface (§15.3.8), which the shim answers as a library without events,
/// and MPI-4 calls Open MPI 4.1 lacks that MPI-3 calls can do (`MPI_Info_get_string`,
/// `MPI_Info_create_env`):
/// `crate::platform::abi::absent` implements them.
const ABSENT: &[&str] = &[
    "MPI_Aint_add",
    "MPI_Aint_diff",
    "MPI_T_category_get_events",
    "MPI_T_category_get_num_events",
    "MPI_Info_get_string",
    "MPI_Info_create_env",
];

/// Functions the Open MPI build does not export: the shim only forwards them (no hook, no
/// communicator to map), and Open MPI 4.1 (MPI-3.1) lacks them. A program that looks MPI
/// functions up at run time (mpi4py's binary wheel) then finds what the library has, as it
/// would without the shim, instead of the shim's forwarder reporting
/// `MPI_ERR_UNSUPPORTED_OPERATION`; under Open MPI 5 the program calls the library's own.
/// Sessions (MPI-4.0 §11.3) and the communicator constructors from groups.
const NOT_EXPORTED_OMPI: &[&str] = &[
    "MPI_Session_init",
    "MPI_Session_finalize",
    "MPI_Session_get_info",
    "MPI_Session_get_num_psets",
    "MPI_Session_get_nth_pset",
    "MPI_Session_get_pset_info",
    "MPI_Session_create_errhandler",
    "MPI_Session_set_errhandler",
    "MPI_Session_get_errhandler",
    "MPI_Session_call_errhandler",
    "MPI_Group_from_session_pset",
    "MPI_Comm_create_from_group",
    "MPI_Intercomm_create_from_groups",
];

/// The body that runs when Open MPI lacks function `f`: the shim's own (`absent`: macros
/// in Open MPI's mpi.h, MPI-4 calls Open MPI 4.1 does not have, the MPI_T events of a
/// library without events), or a `_c` function through its classic form (the hand-written
/// ones in `large_count` for count arrays; otherwise scalar counts are narrowed,
/// `MPI_ERR_COUNT` if one does not fit in an `int`, and count out-parameters go through an
/// `int` temporary). `None`: the call reports `MPI_ERR_UNSUPPORTED_OPERATION`.
fn missing_fallback(f: &Func, by_name: &BTreeMap<&str, &Func>) -> Option<String> {
    let args: Vec<&str> = f.params.iter().map(|p| p.name.as_str()).collect();
    if f.name.starts_with("MPI_T_event_")
        || f.name.starts_with("MPI_T_source_")
        || ABSENT.contains(&f.name.as_str())
    {
        return Some(format!(
            "            return unsafe {{ crate::platform::abi::absent::P{}({}) }};\n",
            f.name,
            args.join(", ")
        ));
    }
    let base_name = f.name.strip_suffix("_c")?;
    if HAND_WRITTEN_LARGE_COUNT.contains(&f.name.as_str()) {
        return Some(format!(
            "            return unsafe {{ crate::platform::abi::large_count::P{}({}) }};\n",
            f.name,
            args.join(", ")
        ));
    }
    // MPI-3's `_x` form, where there is one, already takes MPI_Count (MPI_Type_size_x:
    // a size beyond an int comes back whole, not as MPI_UNDEFINED)
    if let Some(x) = by_name.get(format!("{base_name}_x").as_str()) {
        if x.params
            .iter()
            .map(|p| &p.rtype)
            .eq(f.params.iter().map(|p| &p.rtype))
        {
            return Some(format!(
                "            // SAFETY: the caller's arguments; the same prototype.\n            return unsafe {{ P{base_name}_x({}) }};\n",
                args.join(", ")
            ));
        }
    }
    let base = by_name.get(base_name)?;
    if base.params.len() != f.params.len() || f.ret != "int" {
        return None;
    }
    let mut pre = String::new();
    let mut post = String::new();
    let mut call = Vec::new();
    for (p, b) in f.params.iter().zip(&base.params) {
        let n = &p.name;
        match (p.rtype.as_str(), b.rtype.as_str()) {
            (x, y) if x == y => call.push(n.clone()),
            // MPI_Aint and MPI_Count are both 64-bit in the ABIs the shim serves
            ("MPI_Count", "MPI_Aint") => call.push(format!("{n} as MPI_Aint")),
            ("*mut MPI_Count", "*mut MPI_Aint") => call.push(format!("{n} as *mut MPI_Aint")),
            // (the `_c` windows' displacement unit is an MPI_Aint, MPI-4.0 §12.2)
            ("MPI_Count" | "MPI_Aint", "c_int") => {
                writeln!(pre, "            let Ok({n}) = c_int::try_from({n}) else {{ return crate::platform::abi::MPI_ERR_COUNT }};").unwrap();
                call.push(n.clone());
            }
            (wide @ ("*mut MPI_Count" | "*mut MPI_Aint"), "*mut c_int") => {
                let wide = wide.trim_start_matches("*mut ");
                writeln!(pre, "            // SAFETY: a caller's out (or in-out) count, or NULL.\n            let mut {n}__: c_int = if {n}.is_null() {{ 0 }} else {{ unsafe {{ *{n} }}.clamp(c_int::MIN as {wide}, c_int::MAX as {wide}) as c_int }};").unwrap();
                writeln!(
                    post,
                    "            if !{n}.is_null() {{ unsafe {{ *{n} = {n}__ as {wide} }}; }}"
                )
                .unwrap();
                call.push(format!(
                    "if {n}.is_null() {{ core::ptr::null_mut() }} else {{ &mut {n}__ }}"
                ));
            }
            _ => return None,
        }
    }
    Some(format!(
        "{pre}            // SAFETY: the caller's arguments, counts narrowed to the classic prototype.\n            let rc__ = unsafe {{ P{base_name}({}) }};\n{post}            return rc__;\n",
        call.join(", ")
    ))
}

/// The object a failed call's error belongs to, as an expression of `crate::platform::errors::Obj`:
/// the first communicator or window taken by value (or through the pointer of a free);
/// files and sessions have handlers the system MPI invokes itself.
fn error_object(f: &Func) -> String {
    if f.category == "file" || f.category == "session" {
        return "crate::platform::errors::Obj::Other".into();
    }
    for p in &f.params {
        match p.rtype.as_str() {
            "MPI_File" | "MPI_Session" => return "crate::platform::errors::Obj::Other".into(),
            "MPI_Comm" => return format!("crate::platform::errors::Obj::Comm({})", p.name),
            "MPI_Win" => return format!("crate::platform::errors::Obj::Win({})", p.name),
            "*mut MPI_Comm" | "*mut MPI_Win" if p.name == "comm" || p.name == "win" => {
                let kind = if p.name == "comm" { "Comm" } else { "Win" };
                // SAFETY in the generated code: a non-NULL pointer to the caller's handle
                return format!(
                    "if {0}.is_null() {{ crate::platform::errors::Obj::None }} else {{ crate::platform::errors::Obj::{kind}(unsafe {{ *{0} }}) }}",
                    p.name
                );
            }
            _ => {}
        }
    }
    "crate::platform::errors::Obj::None".into()
}

/// A communicator constructor: (the parent communicator, the new communicator's pointer).
fn inherits(f: &Func) -> Option<(String, String)> {
    let parent = f.params.iter().find(|p| p.rtype == "MPI_Comm")?;
    let out = f
        .params
        .iter()
        .find(|p| p.rtype == "*mut MPI_Comm" && p.name != "comm")?;
    Some((parent.name.clone(), out.name.clone()))
}

fn main() {
    let table = "src/platform/abi/mpi_functions.txt";
    println!("cargo:rerun-if-changed={table}");
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=build_fortran.rs");
    // A real soname makes relinked programs record `libshim.so` in DT_NEEDED.
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libshim.so");

    let text = std::fs::read_to_string(table).expect("read API table");
    let funcs: Vec<Func> = text.lines().filter_map(parse_line).collect();
    let mut seen = BTreeMap::new();
    for f in &funcs {
        assert!(
            seen.insert(f.name.clone(), ()).is_none(),
            "duplicate {}",
            f.name
        );
    }
    let blocking: Vec<String> = funcs
        .iter()
        .filter(|f| {
            f.hook == "coll" && coll_variant(f) == Variant::Blocking && !f.name.ends_with("_c")
        })
        .map(|f| f.name.trim_start_matches("MPI_").to_string())
        .collect();
    // base collective -> parameter list of its blocking int form
    let mut coll_bases: BTreeMap<String, Vec<Param>> = BTreeMap::new();
    for f in funcs.iter().filter(|f| {
        f.hook == "coll" && coll_variant(f) == Variant::Blocking && !f.name.ends_with("_c")
    }) {
        coll_bases.insert(coll_base(f, &blocking), f.params.clone());
    }

    let mut o = String::new();
    o.push_str(
        "// @generated by build.rs from src/platform/abi/mpi_functions.txt. Do not edit.\n\n",
    );
    writeln!(
        o,
        "/// Number of functions in the API table.\npub const N_FUNCS: usize = {};",
        funcs.len()
    )
    .unwrap();
    o.push_str("/// Function ids, in table order.\n#[allow(non_camel_case_types, clippy::upper_case_acronyms)]\n#[derive(Clone, Copy, Debug, PartialEq, Eq)]\n#[repr(u16)]\npub enum Fid {\n");
    for f in &funcs {
        writeln!(o, "    {},", f.name).unwrap();
    }
    o.push_str(
        "}\n\n/// `MPI_*` names, indexed by `Fid`.\npub static NAMES: [&str; N_FUNCS] = [\n",
    );
    for f in &funcs {
        writeln!(o, "    \"{}\",", f.name).unwrap();
    }
    o.push_str("];\n\n/// The same names as C strings.\npub static CNAMES: [&core::ffi::CStr; N_FUNCS] = [\n");
    for f in &funcs {
        writeln!(o, "    c\"{}\",", f.name).unwrap();
    }
    o.push_str("];\n\n/// Categories from the table, indexed by `Fid`.\npub static CATEGORIES: [&str; N_FUNCS] = [\n");
    for f in &funcs {
        writeln!(o, "    \"{}\",", f.category).unwrap();
    }
    o.push_str("];\n\n/// Whether the function may leave the library work a later shared-memory collective must\n/// let it do: point-to-point, RMA and file calls (`core::transport::note_library_call`; the\n/// request calls note it in `hooks::request`, by the request).\npub static LIBRARY_TRAFFIC: [bool; N_FUNCS] = [\n");
    for f in &funcs {
        // (the request calls note it themselves: not for a collective on the segment)
        let traffic = matches!(f.category.as_str(), "p2p" | "rma" | "file");
        writeln!(o, "    {traffic},").unwrap();
    }
    o.push_str("];\n\n/// Whether the function has a hand-written hook (otherwise it is a pure forward).\npub static HOOKED: [bool; N_FUNCS] = [\n");
    for f in &funcs {
        writeln!(o, "    {},", f.hook != "-").unwrap();
    }
    o.push_str("];\n\n");

    // PMPI forwarders
    let ompi = std::env::var_os("CARGO_FEATURE_ABI_OMPI").is_some();
    let by_name: BTreeMap<&str, &Func> = funcs.iter().map(|f| (f.name.as_str(), f)).collect();
    o.push_str("/// `PMPI_*` entry points of the system MPI, resolved on first use.\n#[allow(non_snake_case, clippy::too_many_arguments, clippy::missing_safety_doc)]\npub mod pmpi {\n    use super::*;\n");
    for (i, f) in funcs.iter().enumerate() {
        let args: Vec<String> = f
            .params
            .iter()
            .map(|p| format!("{}: {}", p.name, p.rtype))
            .collect();
        let tys: Vec<String> = f.params.iter().map(|p| p.rtype.clone()).collect();
        let names: Vec<String> = f.params.iter().map(|p| p.name.clone()).collect();
        let ret = rust_ret(&f.ret);
        let pname = format!("P{}", f.name);
        writeln!(
            o,
            "    #[inline]\n    pub unsafe fn {pname}({}) -> {ret} {{",
            args.join(", ")
        )
        .unwrap();
        let fallback = if ompi {
            missing_fallback(f, &by_name)
        } else {
            None
        };
        if let Some(fallback) = fallback {
            // Open MPI 4.x has no large-count (`_c`) functions (MPI-4.0): use the
            // library's own if it has them, else the classic form when the counts fit.
            writeln!(
                o,
                "        let sym__ = crate::platform::symbols::resolve_optional({i}, \"{pname}\\0\");\n        if sym__.is_null() {{\n{fallback}        }}"
            )
            .unwrap();
        } else if f.ret == "int" && f.category != "init" {
            // a function this library lacks (an MPI-4 one in Open MPI 4.1 or an older
            // MPICH) that a program finds in the shim anyway (mpi4py's binary wheel looks
            // each one up at run time): the error class MPI-4.0 §9.4 has for an operation
            // the implementation does not support, not an abort. (Without any MPI library,
            // MPI_Init still stops the process with the reason.)
            writeln!(
                o,
                "        let sym__ = crate::platform::symbols::resolve_optional({i}, \"{pname}\\0\");\n        if sym__.is_null() {{\n            return crate::platform::errors::raise_unsupported({}, \"{}\");\n        }}",
                error_object(f),
                f.name
            )
            .unwrap();
        } else {
            writeln!(
                o,
                "        let sym__ = crate::platform::symbols::resolve({i}, \"{pname}\\0\");"
            )
            .unwrap();
        }
        // an `int` result is an error code: one the library passed to the shim's handler
        // on the world and then dropped comes back (src/platform/errors.rs, `unswallow`);
        // `MPI_*_call_errhandler` returns MPI_SUCCESS when the handler returns (MPI-4.0
        // §9.3.1), so there the code only must not linger
        let call = if ret != "c_int" {
            format!("unsafe {{ fn__({}) }}", names.join(", "))
        } else if f.name.ends_with("_call_errhandler") {
            format!(
                "let rc__ = unsafe {{ fn__({}) }};\n        crate::platform::errors::forget_swallowed();\n        rc__",
                names.join(", ")
            )
        } else {
            format!(
                "crate::platform::errors::unswallow(unsafe {{ fn__({}) }})",
                names.join(", ")
            )
        };
        writeln!(
            o,
            "        // SAFETY: the symbol was looked up by its exact name and the table gives its C prototype.\n        let fn__: unsafe extern \"C\" fn({}) -> {ret} = unsafe {{ core::mem::transmute::<*mut c_void, _>(sym__) }};\n        {call}\n    }}",
            tys.join(", "),
        )
        .unwrap();
    }
    o.push_str("}\n\n");

    // Exported entry points
    let exports_at = o.len();
    o.push_str("/// The exported `MPI_*` entry points.\n#[allow(non_snake_case, clippy::too_many_arguments, clippy::missing_safety_doc, unused_unsafe)]\npub mod exports {\n    use super::*;\n");
    for f in &funcs {
        let args: Vec<String> = f
            .params
            .iter()
            .map(|p| format!("{}: {}", p.name, p.rtype))
            .collect();
        let names: Vec<String> = f.params.iter().map(|p| p.name.clone()).collect();
        let ret = rust_ret(&f.ret);
        let fid = format!("Fid::{}", f.name);
        let export = !(ompi && NOT_EXPORTED_OMPI.contains(&f.name.as_str()));
        if export {
            o.push_str("    #[unsafe(no_mangle)]\n");
        }
        writeln!(
            o,
            "    pub unsafe extern \"C\" fn {}({}) -> {ret} {{",
            f.name,
            args.join(", ")
        )
        .unwrap();
        if f.world {
            // before anything else, the fast path included: callbacks the application
            // runs inside the shim (user operations, attribute callbacks) see its world too
            for p in f.params.iter().filter(|p| p.rtype == "MPI_Comm") {
                writeln!(
                    o,
                    "        let {0} = crate::platform::proc::map_world({0});",
                    p.name
                )
                .unwrap();
            }
        }
        // errors the system MPI raised on the world go to the application's world handler
        // (src/platform/errors.rs); the object a failed call's error belongs to is read first
        let checked = f.ret == "int" && f.category != "init";
        if checked {
            writeln!(o, "        let obj__ = {};", error_object(f)).unwrap();
        }
        let body_at = o.len();
        // a blocking collective the library carries out waits first for the rank's
        // schedules on its communicator (`hooks::blocking::collective`)
        let waits = f.hook == "coll"
            && coll_variant(f) == Variant::Blocking
            && f.params.iter().any(|p| p.name == "comm");
        if waits {
            writeln!(
                o,
                "        // SAFETY: the arguments are the caller's, passed on unchanged to the system MPI.\n        let native = move || crate::hooks::blocking::collective(comm, || unsafe {{ pmpi::P{}({}) }});",
                f.name,
                names.join(", ")
            )
            .unwrap();
        } else {
            writeln!(
                o,
                "        // SAFETY: the arguments are the caller's, passed on unchanged to the system MPI.\n        let native = move || unsafe {{ pmpi::P{}({}) }};",
                f.name,
                names.join(", ")
            )
            .unwrap();
        }
        match f.hook.as_str() {
            "-" => {
                writeln!(
                    o,
                    "        if crate::platform::guard::bypass() {{ return native(); }}"
                )
                .unwrap();
                o.push_str(&freed_type_check(f));
                let bytes = bytes_expr(f)
                    .map(|e| format!("if crate::platform::counters::enabled() {{ {e}; }} "))
                    .unwrap_or_default();
                let handed = handed_out_types(f);
                if handed.is_empty() {
                    writeln!(
                        o,
                        "        crate::edge::entry::run({fid}, move || {{ {bytes}native() }})"
                    )
                    .unwrap();
                } else {
                    writeln!(
                        o,
                        "        crate::edge::entry::run({fid}, move || {{ {bytes}let rc = native(); if rc == MPI_SUCCESS {{ // SAFETY: the system MPI wrote the handles it returns there.\n unsafe {{ {} }} }} rc }})",
                        handed.join(" ")
                    )
                    .unwrap();
                }
            }
            "coll" => {
                let base = coll_base(f, &blocking);
                let base_params = coll_bases
                    .get(&base)
                    .unwrap_or_else(|| panic!("{}: no blocking form of {base}", f.name));
                let variant = coll_variant(f);
                let nbase = match variant {
                    Variant::Blocking => f.params.len(),
                    Variant::Nonblocking => f.params.len() - 1,
                    Variant::Persistent => f.params.len() - 2,
                };
                let mine: Vec<&str> = f.params[..nbase].iter().map(|p| p.name.as_str()).collect();
                let want: Vec<&str> = base_params.iter().map(|p| p.name.as_str()).collect();
                assert_eq!(
                    mine, want,
                    "{}: parameters differ from the blocking form",
                    f.name
                );
                let var = match variant {
                    Variant::Blocking => "crate::services::coll::Variant::Blocking".to_string(),
                    Variant::Nonblocking => {
                        "crate::services::coll::Variant::Nonblocking(request)".to_string()
                    }
                    Variant::Persistent => {
                        "crate::services::coll::Variant::Persistent(info, request)".to_string()
                    }
                };
                let conv: Vec<String> = f.params[..nbase].iter().map(|p| coll_arg(p).0).collect();
                // the hook bypasses the shim or runs under `edge::entry::run` itself, after its
                // fast lane (`platform::guard::lane`, src/hooks/coll.rs); the lane is compiled
                // for the classic blocking form's own closure (its arguments stay in
                // registers), the other forms share one through `&dyn` (one copy of the hook each)
                let native = if variant == Variant::Blocking && !f.name.ends_with("_c") {
                    "&native"
                } else {
                    "&(&native as &dyn Fn() -> c_int)"
                };
                writeln!(
                    o,
                    "        unsafe {{ crate::hooks::coll::{base}(crate::services::coll::Call {{ fid: {fid}, variant: {var} }}, {}, {native}) }}",
                    conv.join(", ")
                )
                .unwrap();
            }
            "rma-op" => {
                // an RMA communication call: the ghost layer says where it goes
                let has = |n: &str| f.params.iter().any(|p| p.name == n);
                assert!(
                    has("target_rank") && has("target_disp") && has("win"),
                    "{}: an rma-op needs target_rank, target_disp and win",
                    f.name
                );
                let base = f.name.trim_end_matches("_c");
                let acc = base.contains("ccumulate")
                    || base == "MPI_Fetch_and_op"
                    || base == "MPI_Compare_and_swap";
                let (count, dt) = if has("origin_count") {
                    ("origin_count as i64", "origin_datatype")
                } else {
                    ("1", "datatype")
                };
                let routed: Vec<String> = f
                    .params
                    .iter()
                    .map(|p| match p.name.as_str() {
                        "target_rank" => "r__.rank".to_string(),
                        "target_disp" => "r__.disp".to_string(),
                        "win" => "r__.win".to_string(),
                        n => n.to_string(),
                    })
                    .collect();
                writeln!(
                    o,
                    "        if crate::platform::guard::bypass() {{ return native(); }}"
                )
                .unwrap();
                o.push_str(&freed_type_check(f));
                // the direct form (src/services/ghost/direct.rs): the same arguments without the
                // target's rank, displacement and window, counts as i64; the request-based
                // forms return a request that is already complete
                let plain = base.trim_start_matches("MPI_");
                let (direct_fn, request) = match plain.strip_prefix('R') {
                    Some(rest) if has("request") => (rest.to_ascii_lowercase(), true),
                    _ => (plain.to_ascii_lowercase(), false),
                };
                let direct_args: Vec<String> = f
                    .params
                    .iter()
                    .filter(|p| {
                        !matches!(
                            p.name.as_str(),
                            "target_rank" | "target_disp" | "win" | "request"
                        )
                    })
                    .map(|p| {
                        if p.name.ends_with("_count") {
                            format!("{} as i64", p.name)
                        } else {
                            p.name.clone()
                        }
                    })
                    .collect();
                let mut direct_call = format!(
                    "crate::services::ghost::direct::{direct_fn}(d__, {})",
                    direct_args.join(", ")
                );
                if request {
                    direct_call = format!(
                        "crate::services::ghost::direct::completed({direct_call}, request)"
                    );
                }
                // a window the ghost layer does not serve: the system MPI's call, but for
                // MPI_Fetch_and_op, whose hook mends a library bug (hooks::rma)
                let unserved = if f.name == "MPI_Fetch_and_op" {
                    "unsafe { crate::hooks::rma::fetch_and_op(origin_addr, result_addr, datatype, target_rank, target_disp, op, win, &native) }"
                } else {
                    "native()"
                };
                writeln!(
                    o,
                    "        crate::edge::entry::run({fid}, move || match crate::services::ghost::route(win, target_rank, target_disp, {acc}, {count}, {dt}, \"{}\") {{\n            Ok(None) => {unserved},\n            Err(rc) => rc,\n            // SAFETY: the caller's arguments, with the target translated to a ghost.\n            Ok(Some(crate::services::ghost::Routed::Ghost(r__))) => unsafe {{ pmpi::P{}({}) }},\n            // SAFETY: the caller's arguments; the target's memory is mapped here.\n            Ok(Some(crate::services::ghost::Routed::Direct(d__))) => unsafe {{ {direct_call} }},\n        }})",
                    f.name,
                    f.name,
                    routed.join(", ")
                )
                .unwrap();
            }
            hook => {
                let runner = if f.category == "init" {
                    "run_init"
                } else {
                    "run"
                };
                if f.category != "init" {
                    writeln!(
                        o,
                        "        if crate::platform::guard::bypass() {{ return native(); }}"
                    )
                    .unwrap();
                    o.push_str(&freed_type_check(f));
                }
                let sep = if names.is_empty() { "" } else { ", " };
                writeln!(
                    o,
                    "        crate::edge::entry::{runner}({fid}, move || unsafe {{ crate::hooks::{hook}::{}({}{sep}&native) }})",
                    f.name,
                    names.join(", ")
                )
                .unwrap();
            }
        }
        if checked {
            // the body's `return`s now leave a closure whose result is checked
            let body = o.split_off(body_at);
            let mut wrapped = String::from("        let rc__: c_int = (move || {\n");
            for line in body.lines() {
                writeln!(wrapped, "    {line}").unwrap();
            }
            wrapped.push_str("        })();\n");
            if let Some((parent, out)) = inherits(f) {
                writeln!(
                    wrapped,
                    "        crate::platform::errors::inherit({parent}, {out}, rc__);"
                )
                .unwrap();
            }
            wrapped.push_str("        crate::platform::errors::checked(obj__, rc__)\n");
            o.push_str(&wrapped);
        }
        o.push_str("    }\n");
    }
    o.push_str("}\n\n");

    let exports = o.split_off(exports_at);

    // Signatures the collective hooks must implement, as documentation and a compile check.
    o.push_str("/// Base collectives and the argument lists their hooks take (after `Call`).\npub static COLL_BASES: &[(&str, &str)] = &[\n");
    for (b, ps) in &coll_bases {
        let sig: Vec<String> = ps
            .iter()
            .map(|p| format!("{}: {}", p.name, coll_arg(p).1))
            .collect();
        writeln!(o, "    (\"{b}\", \"{}\"),", sig.join(", ")).unwrap();
    }
    o.push_str("];\n");

    let out_dir = PathBuf::from(std::env::var("OUT_DIR").unwrap());
    std::fs::write(out_dir.join("api_gen.rs"), o).unwrap();
    std::fs::write(out_dir.join("exports_gen.rs"), exports).unwrap();
    std::fs::write(
        out_dir.join("fortran_gen.rs"),
        fortran_gen::generate(&funcs, ompi),
    )
    .unwrap();
}

//! Generates the Fortran (`mpif.h` / `use mpi`) entry points from the same API table,
//! into `$OUT_DIR/fortran_gen.rs` (included by `src/edge/fortran/mod.rs`).
//!
//! Which functions get a Fortran entry point: every table function the shim does more
//! than forward (a hook, or `W`: `MPI_COMM_WORLD` is mapped to the user world when ghost
//! processes are on), in its classic form (the `_c` large-count forms have no `mpif.h`
//! binding, MPI-4.0 §19.2), whose Fortran arguments convert mechanically (see `kind`).
//! Each gets the four name forms gfortran, ifort/ifx, flang and f2c-style compilers use
//! (`MPI_ALLREDUCE`, `mpi_allreduce`, `mpi_allreduce_`, `mpi_allreduce__`), all calling
//! one function that converts the arguments and calls the shim's own C `MPI_*` entry
//! point, so counters, hooks and the world mapping apply exactly as for C callers.
//!
//! Why export them although MPICH's `mpif.h` bindings call the C `MPI_*` functions (so a
//! C interposer already sees them, see `src/edge/fortran/mod.rs`): a program relinked with
//! `-lshim` under `--as-needed` references no symbol of the shim unless the shim defines
//! Fortran names, and the linker would drop it; and an MPICH-ABI library whose Fortran
//! bindings call `PMPI_*` (MPICH's `F77_USE_PMPI` builds) would bypass a C-only shim.
//!
//! MPICH build: what is left to the MPI library's own binding (which calls the C entry
//! point, so these are still intercepted, checked by `scripts/fortran-tests`): string
//! arguments (hidden length arguments), callbacks, the 1-based indices of `Waitany`/
//! `Testany`/`Waitsome`/`Testsome`, `MPI_UNWEIGHTED`/`MPI_ERRCODES_IGNORE` sentinels, and
//! `MPI_File` handles (a pointer in MPICH, converted by a real `MPI_File_f2c`). The
//! attribute functions and `MPI_INIT*` are hand-written in `src/edge/fortran/mod.rs`.
//!
//! Open MPI build (`abi-ompi`): Open MPI's bindings call `PMPI_*`, so a function without an
//! entry point here bypasses the shim. Every table function that converts gets one (pure
//! forwards too, so they are counted), and more kinds convert: 1-based indices, the
//! `MPI_UNWEIGHTED`/`MPI_WEIGHTS_EMPTY` sentinels, communicator names and external32 `datarep` (CHARACTER with
//! gfortran's hidden length), and handle arrays element by element (Open MPI's Fortran
//! handles are table indices), whose length comes from [`array_len`]. Functions taking a
//! `TYPE(C_PTR)` base pointer also get Open MPI's `_cptr` names.

use std::fmt::Write as _;

use super::{Func, INT_HANDLES, Param};

/// Hand-written in `src/edge/fortran/mod.rs` (the generator emits nothing for them).
pub const HAND_WRITTEN: &[&str] = &[
    // Fortran init (mpirinitf_, the Fortran sentinels' addresses) must run.
    "MPI_Init",
    "MPI_Init_thread",
    // MPICH's Fortran attribute routines store and return attributes by value (they call
    // MPII_*_get_attr with MPIR_ATTR_AINT/INT, bypassing C MPI_*): only the system's
    // binding knows how an attribute was set, so the shim maps the communicator and calls it.
    "MPI_Attr_get",
    "MPI_Attr_put",
    "MPI_Comm_get_attr",
    "MPI_Comm_set_attr",
    "MPI_Win_get_attr",
];

/// `void *` parameters that are choice buffers (where `MPI_BOTTOM`/`MPI_IN_PLACE` may
/// appear). Any other `void *` (attribute values, callbacks, `extra_state`) is refused.
const CHOICE: &[&str] = &[
    "buf",
    "buffer",
    "sendbuf",
    "recvbuf",
    "inbuf",
    "outbuf",
    "origin_addr",
    "result_addr",
    "compare_addr",
    "base",
];

/// How one C parameter is passed from Fortran and converted.
pub enum Kind {
    /// `int` by value: Fortran passes `INTEGER` by reference.
    Int,
    /// `int` by value that is a Fortran LOGICAL (`reorder`).
    LogicalIn,
    /// `MPI_Aint`/`MPI_Count`/`MPI_Offset` by value (`INTEGER(KIND=MPI_*_KIND)` by reference).
    Wide(String),
    /// A handle by value: `MPI_<T>_f2c`.
    Handle(String),
    /// A handle by reference, in or out: f2c before the call, c2f after it.
    HandleRef(String),
    /// An array of handles (writable or not) and the Rust expression of its length:
    /// converted element by element (a cast where the representations agree).
    HandleArray(String, bool, String),
    /// A choice buffer: Fortran sentinels translated by address.
    Choice(bool),
    /// `void *baseptr` (`INTEGER(KIND=MPI_ADDRESS_KIND)` receiving an address): passed on.
    BasePtr,
    /// A pointer to ints (`INTEGER` array or out value) or to `MPI_Aint`/`MPI_Count`: passed on.
    Plain(String),
    /// `int *flag`: a LOGICAL result, converted to the compiler's .TRUE./.FALSE. after the call.
    FlagOut,
    /// A LOGICAL array (in or out) and its length expression.
    LogicalArray(bool, String),
    /// `int *index` of Waitany/Testany: 0-based in C, 1-based in Fortran.
    IndexOut,
    /// `int *array_of_indices` of Waitsome/Testsome, `*outcount` entries.
    IndicesOut,
    /// A weights array that may be the Fortran `MPI_UNWEIGHTED`/`MPI_WEIGHTS_EMPTY`.
    Weights(bool),
    /// A `CHARACTER` argument in (trailing blanks trimmed) or out (blank-padded), with
    /// the hidden length gfortran passes by value after all other arguments.
    StrIn,
    StrOut,
    Status,
    Statuses,
}

/// Rust expression for the length of an array parameter, from the Fortran arguments.
fn array_len(f: &Func, n: &str) -> Option<String> {
    let name = f.name.as_str();
    let has = |p: &str| f.params.iter().any(|q| q.name == p);
    Some(match n {
        "array_of_requests" if has("count") => "unsafe { *count }".into(),
        "array_of_requests" if has("incount") => "unsafe { *incount }".into(),
        "sendtypes" | "recvtypes" if name.contains("lltoallw") => format!(
            "crate::edge::fortran::types_len(unsafe {{ *comm }}, {}, {})",
            name.contains("eighbor"),
            n == "sendtypes"
        ),
        "array_of_types" if has("count") => "unsafe { *count }".into(),
        "periods" if has("ndims") => "unsafe { *ndims }".into(),
        "periods" if has("maxdims") => "unsafe { *maxdims }".into(),
        "remain_dims" => "crate::edge::fortran::cart_ndims(unsafe { *comm })".into(),
        _ => return None,
    })
}

/// Classifies a parameter, or says why the function is left to the MPI's own binding.
/// `ompi`: the Open MPI build, whose `mpif.h` bindings call `PMPI_*` and so bypass the
/// shim: more argument kinds are converted here (indices, strings, weights).
fn kind(f: &Func, p: &Param, ompi: bool) -> Result<Kind, String> {
    let t = p.rtype.as_str();
    let n = p.name.as_str();
    let stripped = |pre: &str| t.strip_prefix(pre).map(str::to_string);
    let len = |what: &str| {
        array_len(f, n).ok_or_else(|| format!("length of {what} `{n}` of {} unknown", f.name))
    };
    // MPICH's handle arrays are cast, not converted, so their length is not needed there.
    let hlen = || {
        if ompi {
            len("handle array")
        } else {
            Ok(array_len(f, n).unwrap_or("0".into()))
        }
    };
    Ok(match t {
        "c_int" if n == "reorder" => Kind::LogicalIn,
        "c_int" => Kind::Int,
        "MPI_Aint" | "MPI_Count" | "MPI_Offset" => Kind::Wide(t.into()),
        _ if INT_HANDLES.contains(&t) => Kind::Handle(t.into()),
        "*const c_void" | "*mut c_void" if CHOICE.contains(&n) => {
            Kind::Choice(t.starts_with("*mut"))
        }
        "*mut c_void" if n == "baseptr" => Kind::BasePtr,
        "*mut c_int" if n == "flag" => Kind::FlagOut,
        "*const c_char" if ompi && (n == "comm_name" || n == "datarep") => Kind::StrIn,
        "*mut c_char" if ompi && n == "comm_name" => Kind::StrOut,
        "*mut c_int" | "*const c_int" => match n {
            // The graph constructors' `index` is cumulative degrees, not an index.
            "index" | "indx" if f.name.contains("Graph") => Kind::Plain(t.into()),
            "index" | "indx" if ompi => Kind::IndexOut,
            "array_of_indices" if ompi => Kind::IndicesOut,
            "index" | "indx" | "array_of_indices" => return Err("1-based indices".into()),
            "periods" | "remain_dims" => {
                Kind::LogicalArray(t.starts_with("*mut"), len("LOGICAL array")?)
            }
            "sourceweights" | "destweights" | "weights" if ompi => {
                Kind::Weights(t.starts_with("*mut"))
            }
            "sourceweights" | "destweights" | "weights" => {
                return Err("MPI_UNWEIGHTED sentinel".into());
            }
            "array_of_errcodes" | "errcodes" => return Err("MPI_ERRCODES_IGNORE".into()),
            _ => Kind::Plain(t.into()),
        },
        "*mut MPI_Aint" | "*const MPI_Aint" | "*mut MPI_Count" | "*const MPI_Count"
        | "*mut MPI_Offset" => Kind::Plain(t.into()),
        "*mut MPI_Status" if n == "status" => Kind::Status,
        "*mut MPI_Status" if n == "array_of_statuses" => Kind::Statuses,
        _ => {
            if let Some(h) = stripped("*const ") {
                if INT_HANDLES.contains(&h.as_str()) {
                    return Ok(Kind::HandleArray(h, false, hlen()?));
                }
            }
            if let Some(h) = stripped("*mut ") {
                if INT_HANDLES.contains(&h.as_str()) {
                    return Ok(if n.starts_with("array_of_") || n.ends_with("types") {
                        Kind::HandleArray(h, true, hlen()?)
                    } else {
                        Kind::HandleRef(h)
                    });
                }
            }
            return Err(format!("parameter `{n}: {t}` of {}", f.name));
        }
    })
}

/// `MPI_Comm` -> `comm` (the suffix of the f2c/c2f helpers in `crate::edge::fortran`).
fn handle_fn(h: &str) -> String {
    h.trim_start_matches("MPI_").to_lowercase()
}

/// Whether the function gets a generated Fortran entry point, and if not, why.
pub fn selected(f: &Func, ompi: bool) -> Result<Vec<Kind>, String> {
    // Open MPI's own bindings call PMPI_*: without an entry point here a Fortran call
    // would not even be counted, so every function that converts mechanically gets one.
    if f.hook == "-" && !f.world && !ompi {
        return Err("forwarded unchanged by the C entry point".into());
    }
    if f.name.ends_with("_c") {
        return Err("large-count form: no mpif.h binding".into());
    }
    if HAND_WRITTEN.contains(&f.name.as_str()) {
        return Err("hand-written".into());
    }
    if f.ret != "int" {
        return Err("not a subroutine returning an error code".into());
    }
    f.params.iter().map(|p| kind(f, p, ompi)).collect()
}

/// The generated module text.
pub fn generate(funcs: &[Func], ompi: bool) -> String {
    let mut o = String::new();
    o.push_str(
        "// @generated by build_fortran.rs from src/platform/abi/mpi_functions.txt. Do not edit.\n\n",
    );
    let mut wrapped = Vec::new();
    let mut left = Vec::new();
    for f in funcs {
        match selected(f, ompi) {
            Ok(kinds) => {
                emit(&mut o, f, &kinds, ompi);
                wrapped.push(f.name.clone());
            }
            Err(why) => {
                if f.hook != "-" || f.world || ompi {
                    left.push((f.name.clone(), why));
                }
            }
        }
    }
    o.push_str("/// Table functions with generated Fortran entry points (four name forms each).\npub static WRAPPED: &[&str] = &[\n");
    for n in &wrapped {
        writeln!(o, "    \"{n}\",").unwrap();
    }
    o.push_str("];\n\n/// Hooked or `W` functions left to the MPI library's Fortran binding (which calls the\n/// C entry point), or hand-written, with the reason.\npub static LEFT_TO_MPI: &[(&str, &str)] = &[\n");
    for (n, why) in &left {
        writeln!(o, "    (\"{n}\", \"{why}\"),").unwrap();
    }
    o.push_str("];\n");
    o
}

fn emit(o: &mut String, f: &Func, kinds: &[Kind], ompi: bool) {
    let lower = f.name.to_lowercase();
    let upper = f.name.to_uppercase();
    let mut fparams = Vec::new();
    let mut pre = Vec::new();
    let mut args = Vec::new();
    let mut post = Vec::new();
    // gfortran's hidden CHARACTER lengths, passed by value after all other arguments
    let mut hidden = Vec::new();
    for (p, k) in f.params.iter().zip(kinds) {
        let n = &p.name;
        match k {
            Kind::Int => {
                fparams.push(format!("{n}: *const MPI_Fint"));
                args.push(format!("unsafe {{ *{n} }}"));
            }
            Kind::LogicalIn => {
                fparams.push(format!("{n}: *const MPI_Fint"));
                args.push(format!(
                    "crate::edge::fortran::logical_in(unsafe {{ *{n} }})"
                ));
            }
            Kind::Wide(t) => {
                fparams.push(format!("{n}: *const {t}"));
                args.push(format!("unsafe {{ *{n} }}"));
            }
            Kind::Handle(h) => {
                fparams.push(format!("{n}: *const MPI_Fint"));
                args.push(format!(
                    "crate::edge::fortran::f2c_{}(unsafe {{ *{n} }})",
                    handle_fn(h)
                ));
            }
            Kind::HandleRef(h) => {
                fparams.push(format!("{n}: *mut MPI_Fint"));
                pre.push(format!(
                    "let mut {n}__: {h} = crate::edge::fortran::f2c_{}(unsafe {{ *{n} }});",
                    handle_fn(h)
                ));
                args.push(format!("&mut {n}__"));
                post.push(format!(
                    "unsafe {{ *{n} = crate::edge::fortran::c2f_{}({n}__) }};",
                    handle_fn(h)
                ));
            }
            Kind::HandleArray(h, m, len) => {
                let (fp, ty, ptr, mt) = if *m {
                    ("*mut MPI_Fint", "HandlesMut", "ptr_mut", "mut ")
                } else {
                    ("*const MPI_Fint", "HandlesIn", "ptr", "")
                };
                fparams.push(format!("{n}: {fp}"));
                pre.push(format!(
                    "let {mt}{n}__ = crate::edge::fortran::{ty}::<{h}>::new({n}, || {len}, crate::edge::fortran::f2c_{});",
                    handle_fn(h)
                ));
                args.push(format!("{n}__.{ptr}()"));
                if *m {
                    post.push(format!(
                        "{n}__.write_back(crate::edge::fortran::c2f_{});",
                        handle_fn(h)
                    ));
                }
            }
            Kind::LogicalArray(out, len) => {
                if *out {
                    fparams.push(format!("{n}: *mut MPI_Fint"));
                    args.push(n.clone());
                    post.push(format!(
                        "crate::edge::fortran::logicals_out(rc, {n}, {len});"
                    ));
                } else {
                    fparams.push(format!("{n}: *const MPI_Fint"));
                    pre.push(format!(
                        "let {n}__ = crate::edge::fortran::logicals_in({n}, {len});"
                    ));
                    args.push(format!("{n}__.as_ptr()"));
                }
            }
            Kind::IndexOut => {
                fparams.push(format!("{n}: *mut MPI_Fint"));
                args.push(n.clone());
                post.push(format!("crate::edge::fortran::index_out(rc, {n});"));
            }
            Kind::IndicesOut => {
                fparams.push(format!("{n}: *mut MPI_Fint"));
                args.push(n.clone());
                post.push(format!(
                    "crate::edge::fortran::indices_out(rc, {n}, outcount);"
                ));
            }
            Kind::Weights(m) => {
                let t = if *m { "*mut c_int" } else { "*const c_int" };
                fparams.push(format!("{n}: {t}"));
                let cast = if *m { "" } else { ".cast_mut()" };
                args.push(format!(
                    "crate::edge::fortran::weights({n}{cast}){}",
                    if *m { "" } else { ".cast_const()" }
                ));
            }
            Kind::StrIn => {
                fparams.push(format!("{n}: *const c_char"));
                hidden.push(format!("{n}_len: usize"));
                pre.push(format!(
                    "let {n}__ = crate::edge::fortran::str_in({n}, {n}_len);"
                ));
                args.push(format!("{n}__.as_ptr()"));
            }
            Kind::StrOut => {
                fparams.push(format!("{n}: *mut c_char"));
                hidden.push(format!("{n}_len: usize"));
                pre.push(format!(
                    "let mut {n}__ = crate::edge::fortran::StrOut::new({n}_len);"
                ));
                args.push(format!("{n}__.ptr()"));
                post.push(format!("{n}__.write_back(rc, {n}, {n}_len);"));
            }
            Kind::Choice(m) => {
                let t = if *m { "*mut c_void" } else { "*const c_void" };
                fparams.push(format!("{n}: {t}"));
                let cast = if *m {
                    String::new()
                } else {
                    format!(" as {t}")
                };
                args.push(format!("crate::edge::fortran::choice({n}){cast}"));
            }
            Kind::BasePtr => {
                fparams.push(format!("{n}: *mut c_void"));
                args.push(n.clone());
            }
            Kind::Plain(t) => {
                fparams.push(format!("{n}: {t}"));
                args.push(n.clone());
            }
            Kind::FlagOut => {
                fparams.push(format!("{n}: *mut MPI_Fint"));
                args.push(n.clone());
                post.push(format!("crate::edge::fortran::logical_out(rc, {n});"));
            }
            Kind::Status => {
                fparams.push(format!("{n}: *mut MPI_Fint"));
                args.push(format!("crate::edge::fortran::status({n})"));
            }
            Kind::Statuses => {
                fparams.push(format!("{n}: *mut MPI_Fint"));
                args.push(format!("crate::edge::fortran::statuses({n})"));
            }
        }
    }
    fparams.push("ierr: *mut MPI_Fint".into());
    let mut callargs: Vec<String> = f.params.iter().map(|p| p.name.clone()).collect();
    callargs.push("ierr".into());
    for h in &hidden {
        callargs.push(h.split(':').next().unwrap().to_string());
    }
    fparams.extend(hidden);
    writeln!(
        o,
        "/// Fortran `{upper}`: arguments converted, then the shim's C `{}`.\n#[allow(clippy::too_many_arguments, clippy::let_and_return, unused_unsafe, non_snake_case)]\nunsafe fn f_{}({}) {{",
        f.name,
        f.name,
        fparams.join(", ")
    )
    .unwrap();
    writeln!(
        o,
        "    crate::edge::fortran::call(\"{}\", ierr, move || {{\n        // SAFETY: Fortran passes every argument by reference to a valid object (MPI-4.0 §19.1.1);\n        // the converted arguments are what the C binding expects for this call.",
        f.name
    )
    .unwrap();
    for l in &pre {
        writeln!(o, "        {l}").unwrap();
    }
    writeln!(
        o,
        "        let rc = unsafe {{ crate::edge::api::exports::{}({}) }};",
        f.name,
        args.join(", ")
    )
    .unwrap();
    for l in &post {
        writeln!(o, "        {l}").unwrap();
    }
    o.push_str("        rc\n    })\n}\n");
    let mut syms = vec![
        upper.clone(),
        lower.clone(),
        format!("{lower}_"),
        format!("{lower}__"),
    ];
    // Open MPI's `use mpi` also binds a TYPE(C_PTR) baseptr to `<name>_cptr`: the same
    // argument list (a pointer to an address-sized slot).
    if ompi && kinds.iter().any(|k| matches!(k, Kind::BasePtr)) {
        syms.extend([
            format!("{upper}_CPTR"),
            format!("{lower}_cptr"),
            format!("{lower}_cptr_"),
            format!("{lower}_cptr__"),
        ]);
    }
    for sym in syms {
        writeln!(
            o,
            "#[unsafe(no_mangle)]\n#[allow(non_snake_case, clippy::too_many_arguments, clippy::missing_safety_doc)]\npub unsafe extern \"C\" fn {sym}({}) {{\n    // SAFETY: the Fortran caller's arguments, passed on unchanged.\n    unsafe {{ f_{}({}) }}\n}}",
            fparams.join(", "),
            f.name,
            callargs.join(", ")
        )
        .unwrap();
    }
    o.push('\n');
}

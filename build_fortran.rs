//! Generates the Fortran (`mpif.h` / `use mpi`) entry points from the same API table,
//! into `$OUT_DIR/fortran_gen.rs` (included by `src/fortran/mod.rs`).
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
//! C interposer already sees them, see `src/fortran/mod.rs`): a program relinked with
//! `-lshim` under `--as-needed` references no symbol of the shim unless the shim defines
//! Fortran names, and the linker would drop it; and an MPICH-ABI library whose Fortran
//! bindings call `PMPI_*` (MPICH's `F77_USE_PMPI` builds) would bypass a C-only shim.
//!
//! What is left to the MPI library's own binding (which calls the C entry point, so these
//! are still intercepted, checked by `scripts/fortran-tests`): string arguments (hidden
//! length arguments), callbacks, LOGICAL arrays, the 1-based indices of `Waitany`/
//! `Testany`/`Waitsome`/`Testsome`, `MPI_UNWEIGHTED`/`MPI_ERRCODES_IGNORE` sentinels, and
//! `MPI_File` handles (a pointer in MPICH, converted by a real `MPI_File_f2c`). The
//! attribute functions and `MPI_INIT*` are hand-written in `src/fortran/mod.rs`.

use std::fmt::Write as _;

use super::{Func, INT_HANDLES, Param};

/// Hand-written in `src/fortran/mod.rs` (the generator emits nothing for them).
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
    /// An `int`-handle by value: `MPI_<T>_f2c`.
    Handle(String),
    /// An `int`-handle by reference, in or out: f2c before the call, c2f after it.
    HandleRef(String),
    /// An array of `int`-handles: same representation (checked at compile time).
    HandleArray(String, bool),
    /// A choice buffer: Fortran sentinels translated by address.
    Choice(bool),
    /// `void *baseptr` (`INTEGER(KIND=MPI_ADDRESS_KIND)` receiving an address): passed on.
    BasePtr,
    /// A pointer to ints (`INTEGER` array or out value) or to `MPI_Aint`/`MPI_Count`: passed on.
    Plain(String),
    /// `int *flag`: a LOGICAL result, converted to the compiler's .TRUE./.FALSE. after the call.
    FlagOut,
    Status,
    Statuses,
}

/// Classifies a parameter, or says why the function is left to the MPI's own binding.
fn kind(f: &Func, p: &Param) -> Result<Kind, String> {
    let t = p.rtype.as_str();
    let n = p.name.as_str();
    let stripped = |pre: &str| t.strip_prefix(pre).map(str::to_string);
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
        "*mut c_int" | "*const c_int" => match n {
            "index" | "indx" | "array_of_indices" => return Err("1-based indices".into()),
            "periods" | "remain_dims" => return Err("LOGICAL array".into()),
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
                    return Ok(Kind::HandleArray(h, false));
                }
            }
            if let Some(h) = stripped("*mut ") {
                if INT_HANDLES.contains(&h.as_str()) {
                    return Ok(if n.starts_with("array_of_") || n.ends_with("types") {
                        Kind::HandleArray(h, true)
                    } else {
                        Kind::HandleRef(h)
                    });
                }
            }
            return Err(format!("parameter `{n}: {t}` of {}", f.name));
        }
    })
}

/// `MPI_Comm` -> `comm` (the suffix of the f2c/c2f helpers in `crate::fortran`).
fn handle_fn(h: &str) -> String {
    h.trim_start_matches("MPI_").to_lowercase()
}

/// Whether the function gets a generated Fortran entry point, and if not, why.
pub fn selected(f: &Func) -> Result<Vec<Kind>, String> {
    if f.hook == "-" && !f.world {
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
    f.params.iter().map(|p| kind(f, p)).collect()
}

/// The generated module text.
pub fn generate(funcs: &[Func]) -> String {
    let mut o = String::new();
    o.push_str(
        "// @generated by build_fortran.rs from src/abi/mpi_functions.txt. Do not edit.\n\n",
    );
    let mut wrapped = Vec::new();
    let mut left = Vec::new();
    for f in funcs {
        match selected(f) {
            Ok(kinds) => {
                emit(&mut o, f, &kinds);
                wrapped.push(f.name.clone());
            }
            Err(why) => {
                if f.hook != "-" || f.world {
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

fn emit(o: &mut String, f: &Func, kinds: &[Kind]) {
    let lower = f.name.to_lowercase();
    let upper = f.name.to_uppercase();
    let mut fparams = Vec::new();
    let mut pre = Vec::new();
    let mut args = Vec::new();
    let mut post = Vec::new();
    for (p, k) in f.params.iter().zip(kinds) {
        let n = &p.name;
        match k {
            Kind::Int => {
                fparams.push(format!("{n}: *const MPI_Fint"));
                args.push(format!("unsafe {{ *{n} }}"));
            }
            Kind::LogicalIn => {
                fparams.push(format!("{n}: *const MPI_Fint"));
                args.push(format!("crate::fortran::logical_in(unsafe {{ *{n} }})"));
            }
            Kind::Wide(t) => {
                fparams.push(format!("{n}: *const {t}"));
                args.push(format!("unsafe {{ *{n} }}"));
            }
            Kind::Handle(h) => {
                fparams.push(format!("{n}: *const MPI_Fint"));
                args.push(format!(
                    "crate::fortran::f2c_{}(unsafe {{ *{n} }})",
                    handle_fn(h)
                ));
            }
            Kind::HandleRef(h) => {
                fparams.push(format!("{n}: *mut MPI_Fint"));
                pre.push(format!(
                    "let mut {n}__: {h} = crate::fortran::f2c_{}(unsafe {{ *{n} }});",
                    handle_fn(h)
                ));
                args.push(format!("&mut {n}__"));
                post.push(format!(
                    "unsafe {{ *{n} = crate::fortran::c2f_{}({n}__) }};",
                    handle_fn(h)
                ));
            }
            Kind::HandleArray(h, m) => {
                let (fp, cast) = if *m {
                    ("*mut MPI_Fint", "cast_mut")
                } else {
                    ("*const MPI_Fint", "cast_const")
                };
                fparams.push(format!("{n}: {fp}"));
                args.push(format!("crate::fortran::{cast}::<{h}>({n})"));
            }
            Kind::Choice(m) => {
                let t = if *m { "*mut c_void" } else { "*const c_void" };
                fparams.push(format!("{n}: {t}"));
                let cast = if *m {
                    String::new()
                } else {
                    format!(" as {t}")
                };
                args.push(format!("crate::fortran::choice({n}){cast}"));
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
                post.push(format!("crate::fortran::logical_out(rc, {n});"));
            }
            Kind::Status => {
                fparams.push(format!("{n}: *mut MPI_Fint"));
                args.push(format!("crate::fortran::status({n})"));
            }
            Kind::Statuses => {
                fparams.push(format!("{n}: *mut MPI_Fint"));
                args.push(format!("crate::fortran::statuses({n})"));
            }
        }
    }
    fparams.push("ierr: *mut MPI_Fint".into());
    let names: Vec<&str> = f.params.iter().map(|p| p.name.as_str()).collect();
    let mut callargs = names.clone();
    callargs.push("ierr");
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
        "    crate::fortran::call(\"{}\", ierr, move || {{\n        // SAFETY: Fortran passes every argument by reference to a valid object (MPI-4.0 §19.1.1);\n        // the converted arguments are what the C binding expects for this call.",
        f.name
    )
    .unwrap();
    for l in &pre {
        writeln!(o, "        {l}").unwrap();
    }
    writeln!(
        o,
        "        let rc = unsafe {{ crate::api::exports::{}({}) }};",
        f.name,
        args.join(", ")
    )
    .unwrap();
    for l in &post {
        writeln!(o, "        {l}").unwrap();
    }
    o.push_str("        rc\n    })\n}\n");
    for sym in [
        upper.clone(),
        lower.clone(),
        format!("{lower}_"),
        format!("{lower}__"),
    ] {
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

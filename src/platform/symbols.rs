//! Layer: platform. May use: nothing.
//!
//! Run-time resolution of the system MPI's `PMPI_*` symbols.
//!
//! `libshim.so` does not link against `libmpi` (no `DT_NEEDED` entry), so one build serves
//! every MPICH-ABI library and preloading it into `mpirun` is harmless. Each symbol is
//! looked up once, with `dlsym(RTLD_NEXT)` (the library after us in the search order, the
//! normal case for both `LD_PRELOAD` and `-lshim -lmpi`) and then `RTLD_DEFAULT` (for an
//! MPI that was itself preloaded or dlopen'ed), and cached in an atomic slot.
//!
//! A program relinked with `-lshim` before `-lmpi` by a linker that defaults to
//! `--as-needed` (Debian's gcc does) loses the MPI library altogether: every `MPI_*`
//! symbol resolves to the shim, so the linker drops `libmpi` from `DT_NEEDED`. The shim
//! then loads the MPI library itself: `SHIM_MPI_LIBRARY` if set, else the MPICH ABI's
//! sonames (`libmpi.so.12` for MPICH/Intel MPI/MVAPICH, Debian's `libmpich.so.12`).

use core::ffi::{CStr, c_char, c_void};
use std::ffi::CString;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicPtr, Ordering};

use crate::platform::api::N_FUNCS;

static SLOTS: [AtomicPtr<c_void>; N_FUNCS] =
    [const { AtomicPtr::new(core::ptr::null_mut()) }; N_FUNCS];

/// Looks a symbol up in the libraries after the shim, then globally.
pub fn lookup(name: &CStr) -> *mut c_void {
    // SAFETY: dlsym with a valid NUL-terminated name and the two pseudo-handles.
    unsafe {
        let p = libc::dlsym(libc::RTLD_NEXT, name.as_ptr());
        if !p.is_null() {
            return p;
        }
        let p = libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr());
        // RTLD_DEFAULT may find our own export when the MPI is missing: refuse that.
        if !p.is_null() && !is_own_symbol(p) {
            return p;
        }
        match mpi_library() {
            Some(h) => libc::dlsym(h as *mut c_void, name.as_ptr()),
            None => core::ptr::null_mut(),
        }
    }
}

/// Looks up a data object of the MPI library (Open MPI's predefined handles). The global
/// scope comes first: an executable built against `mpi.h` may hold a copy of the object
/// (a copy relocation), and then that copy, not the library's original, is the handle.
pub fn lookup_data(name: &CStr) -> *mut c_void {
    // SAFETY: dlsym with a valid NUL-terminated name and the pseudo-handle.
    let p = unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) };
    if !p.is_null() && !is_own_symbol(p) {
        return p;
    }
    lookup(name)
}

/// Library names tried when no loaded object provides the MPI (see the module docs).
pub use crate::platform::abi::MPI_LIBRARY_CANDIDATES;

/// Handle of the MPI library the shim loaded itself, if it had to.
fn mpi_library() -> Option<usize> {
    static HANDLE: OnceLock<Option<usize>> = OnceLock::new();
    *HANDLE.get_or_init(|| {
        let names = library_names(
            std::env::var("SHIM_MPI_LIBRARY").ok(),
            crate::platform::config::at_secure(),
        );
        for n in names {
            let Ok(c) = CString::new(n) else { continue };
            // SAFETY: dlopen with a NUL-terminated name; the handle is kept for the
            // lifetime of the process.
            let h = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL) };
            if !h.is_null() {
                return Some(h as usize);
            }
        }
        None
    })
}

/// The libraries to try: `SHIM_MPI_LIBRARY` if set, else the candidates. In
/// secure-execution mode (a setuid or setgid program) the variable is ignored, as the C
/// library ignores `LD_PRELOAD` paths there (the configuration warns about it at init).
fn library_names(explicit: Option<String>, secure: bool) -> Vec<String> {
    match explicit.filter(|s| !secure && !s.trim().is_empty()) {
        Some(n) => vec![n],
        None => MPI_LIBRARY_CANDIDATES
            .iter()
            .map(|s| s.to_string())
            .collect(),
    }
}

/// Whether `p` lies in libshim itself.
pub(crate) fn is_own_symbol(p: *mut c_void) -> bool {
    // SAFETY: dladdr only reads loader metadata for the two addresses.
    unsafe {
        let mut a: libc::Dl_info = core::mem::zeroed();
        let mut b: libc::Dl_info = core::mem::zeroed();
        let here = is_own_symbol as *const c_void;
        libc::dladdr(p, &mut a) != 0
            && libc::dladdr(here, &mut b) != 0
            && a.dli_fbase == b.dli_fbase
    }
}

/// Returns the cached address of table function `idx`, resolving it on first use.
/// `name` is the NUL-terminated `PMPI_*` name.
#[inline]
pub fn resolve(idx: usize, name: &'static str) -> *mut c_void {
    let p = SLOTS[idx].load(Ordering::Relaxed);
    if !p.is_null() {
        return p;
    }
    resolve_slow(idx, name)
}

#[cold]
#[inline(never)]
fn resolve_slow(idx: usize, name: &'static str) -> *mut c_void {
    let cname = CStr::from_bytes_with_nul(name.as_bytes()).expect("NUL-terminated symbol name");
    let p = lookup(cname);
    if p.is_null() {
        missing_symbol(cname);
    }
    SLOTS[idx].store(p, Ordering::Relaxed);
    p
}

/// Like [`resolve`] for a function the library may lack (Open MPI 4.x has no large-count
/// `_c` functions): NULL when absent, and the absence is cached too.
#[inline]
pub fn resolve_optional(idx: usize, name: &'static str) -> *mut c_void {
    /// Marks a slot whose symbol was looked up and not found.
    const ABSENT: *mut c_void = core::ptr::without_provenance_mut(1);
    let mut p = SLOTS[idx].load(Ordering::Relaxed);
    if p.is_null() {
        let cname = CStr::from_bytes_with_nul(name.as_bytes()).expect("NUL-terminated symbol name");
        p = lookup(cname);
        if p.is_null() {
            p = ABSENT;
        }
        SLOTS[idx].store(p, Ordering::Relaxed);
    }
    if p == ABSENT {
        core::ptr::null_mut()
    } else {
        p
    }
}

/// A `PMPI_*` symbol the application needs is not provided by any loaded library: the
/// program was not linked with an MPI library of the supported ABI. Nothing sensible can
/// be forwarded, so say so and stop this process.
#[cold]
fn missing_symbol(name: &CStr) -> ! {
    let msg = format!(
        "libshim: no MPI library provides {} (none is loaded, and none of SHIM_MPI_LIBRARY or {} could be opened); libshim supports {}\n",
        name.to_string_lossy(),
        MPI_LIBRARY_CANDIDATES.join(", "),
        crate::platform::abi::SUPPORTED_DESCRIPTION
    );
    crate::platform::log::raw_stderr(&msg);
    std::process::abort();
}

/// Looks up an optional symbol (an extension such as `MPIX_*`), NULL if absent.
pub fn optional(name: &CStr) -> *mut c_void {
    lookup(name)
}

/// Reads a C string pointer that may be NULL.
///
/// # Safety
/// `p` must be NULL or point to a NUL-terminated string that outlives `'a`.
pub unsafe fn cstr_opt<'a>(p: *const c_char) -> Option<&'a CStr> {
    // SAFETY: per the contract above.
    if p.is_null() {
        None
    } else {
        Some(unsafe { CStr::from_ptr(p) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shim_mpi_library_is_ignored_in_secure_mode() {
        let lib = Some("/tmp/evil/libmpi.so".to_string());
        assert_eq!(
            library_names(lib.clone(), false),
            vec!["/tmp/evil/libmpi.so"]
        );
        let secure = library_names(lib, true);
        assert_eq!(secure, MPI_LIBRARY_CANDIDATES);
        assert_eq!(library_names(None, false), MPI_LIBRARY_CANDIDATES);
    }
}

/// The MPI-5 standard ABI version the loaded library implements (`MPI_Abi_get_version`,
/// MPI-5.0 §20.2: `-1, -1` from a library of another ABI, which may still export the
/// function, as MPICH 5's and Intel MPI's `libmpi.so.12` do); `None` when it is not
/// provided or reports none. Callable before `MPI_Init`.
pub fn abi_version() -> Option<(core::ffi::c_int, core::ffi::c_int)> {
    let f = optional(c"PMPI_Abi_get_version");
    if f.is_null() {
        return None;
    }
    let (mut major, mut minor): (core::ffi::c_int, core::ffi::c_int) = (-1, -1);
    // SAFETY: `int MPI_Abi_get_version(int *abi_major, int *abi_minor)` (MPI-5.0 §20.2),
    // two valid out-pointers.
    let rc = unsafe {
        core::mem::transmute::<
            *mut c_void,
            unsafe extern "C" fn(*mut core::ffi::c_int, *mut core::ffi::c_int) -> core::ffi::c_int,
        >(f)(&mut major, &mut minor)
    };
    (rc == 0 && major >= 0).then_some((major, minor))
}

/// Whether the MPI library defines `PMPI_<name>` for table function `idx` (`name` is its
/// `MPI_` name), looked up once. Open MPI 4.1 and 5.0 have none of the large-count `_c`
/// functions (MPI-4.0): a `_c` collective must then run on a schedule, never natively.
pub fn provides(idx: usize, name: &str) -> bool {
    use std::sync::atomic::AtomicU8;
    static KNOWN: [AtomicU8; N_FUNCS] = [const { AtomicU8::new(0) }; N_FUNCS];
    match KNOWN[idx].load(Ordering::Relaxed) {
        1 => true,
        2 => false,
        _ => {
            let ok = CString::new(format!("P{name}")).is_ok_and(|c| !lookup(&c).is_null());
            KNOWN[idx].store(if ok { 1 } else { 2 }, Ordering::Relaxed);
            ok
        }
    }
}

//! `MPI_Init`, `MPI_Init_thread`, `MPI_Finalize`: where the shim comes to life and ends.
//!
//! Init order: read the configuration; with `SHIM_DISABLE=1` stop there (pure
//! pass-through); check that the MPI library has the ABI this build was made for (before
//! anything is passed to it); initialize the system MPI; then install logging, agree on
//! configuration errors across the job, and activate interception. Configuration errors
//! stop every rank cleanly (`PMPI_Finalize`, exit status 2) before the application makes
//! a single MPI call, so a typo never runs a job with a silently different setup.
//!
//! Finalize order: report statistics and release the shim's MPI objects while MPI is still
//! usable, then `PMPI_Finalize`, then deactivate.

use core::ffi::{c_char, c_int, c_void};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};

use crate::abi::*;
use crate::config;
use crate::pmpi;

/// State fixed at init.
#[derive(Clone, Copy, Debug)]
pub struct World {
    pub rank: i32,
    pub size: i32,
}

static WORLD_RANK: AtomicI32 = AtomicI32::new(-1);
static WORLD_SIZE: AtomicI32 = AtomicI32::new(0);
static STARTED: AtomicBool = AtomicBool::new(false);
static FINALIZERS: Mutex<Vec<fn()>> = Mutex::new(Vec::new());

pub fn world() -> World {
    World {
        rank: WORLD_RANK.load(Ordering::Relaxed),
        size: WORLD_SIZE.load(Ordering::Relaxed),
    }
}

/// Registers cleanup to run in `MPI_Finalize` before `PMPI_Finalize` (last in, first out).
pub fn at_finalize(f: fn()) {
    FINALIZERS.lock().unwrap_or_else(|e| e.into_inner()).push(f);
}

/// Reads the MPI library's version string (valid before init, MPI-4.0 §9.1.1).
pub fn library_version() -> String {
    let mut buf = vec![0u8; MPI_MAX_LIBRARY_VERSION_STRING];
    let mut len: c_int = 0;
    // SAFETY: the buffer has MPI_MAX_LIBRARY_VERSION_STRING bytes as the call requires.
    let rc = unsafe { pmpi::PMPI_Get_library_version(buf.as_mut_ptr().cast::<c_char>(), &mut len) };
    if rc != MPI_SUCCESS {
        return String::from("(unknown: MPI_Get_library_version failed)");
    }
    let end = buf
        .iter()
        .position(|&b| b == 0)
        .unwrap_or(len.max(0) as usize);
    String::from_utf8_lossy(&buf[..end]).trim().to_string()
}

/// Refuses to run on an MPI library of another ABI: handles, statuses and sentinels would
/// be misread. The library is initialized so that the job can be aborted through it.
fn check_abi(native_init: &dyn Fn() -> c_int) {
    let version = library_version();
    if crate::abi::library_is_compatible(&version) {
        return;
    }
    let first = version.lines().next().unwrap_or("").to_string();
    crate::log::raw_stderr(&format!(
        "{} this libshim.so was built for {}, but the MPI library is \"{}\"; \
         use a libshim build for that MPI (Open MPI needs the abi-ompi build). Aborting.\n",
        crate::log::prefix(),
        crate::abi::SUPPORTED_DESCRIPTION,
        first
    ));
    native_init();
    abort_foreign(&first);
}

/// Aborts through a library of another ABI (Open MPI), whose `MPI_COMM_WORLD` is the
/// address of its predefined object rather than an integer.
fn abort_foreign(version: &str) -> ! {
    let comm = crate::symbols::optional(c"ompi_mpi_comm_world");
    let abort = crate::symbols::optional(c"PMPI_Abort");
    if version.starts_with("Open MPI") && !comm.is_null() && !abort.is_null() {
        // SAFETY: Open MPI's PMPI_Abort(MPI_Comm = pointer, int).
        let f: unsafe extern "C" fn(*mut c_void, c_int) -> c_int =
            unsafe { core::mem::transmute(abort) };
        unsafe { f(comm, 1) };
    }
    std::process::exit(1);
}

/// Aborts the whole job (every rank), or this process when MPI is not running.
pub fn abort_job(code: c_int) -> ! {
    let mut init: c_int = 0;
    let mut fin: c_int = 0;
    // SAFETY: both queries are valid at any time (MPI-4.0 §11.2.1).
    unsafe {
        pmpi::PMPI_Initialized(&mut init);
        pmpi::PMPI_Finalized(&mut fin);
        if init != 0 && fin == 0 {
            pmpi::PMPI_Abort(MPI_COMM_WORLD, code);
        }
    }
    std::process::abort();
}

/// Everything after a successful `PMPI_Init*`.
fn post_init(loaded: config::Loaded) {
    let (mut rank, mut size) = (0, 1);
    // SAFETY: MPI is initialized; out-pointers are valid locals.
    unsafe {
        pmpi::PMPI_Comm_rank(MPI_COMM_WORLD, &mut rank);
        pmpi::PMPI_Comm_size(MPI_COMM_WORLD, &mut size);
    }
    WORLD_RANK.store(rank, Ordering::Relaxed);
    WORLD_SIZE.store(size, Ordering::Relaxed);
    crate::log::init(&loaded.config.log, loaded.config.log_file.as_deref(), rank);
    let verbose = loaded.config.log.contains("debug") || loaded.config.log.contains("trace");
    crate::entry::install_panic_hook(verbose);

    // Agree on configuration errors so that every rank stops, even if only one rank's
    // environment is wrong. The lowest such rank prints the messages.
    let mine: c_int = if loaded.errors.is_empty() { size } else { rank };
    let mut first_bad: c_int = size;
    // SAFETY: one int in, one int out, on MPI_COMM_WORLD.
    unsafe {
        pmpi::PMPI_Allreduce(
            (&mine as *const c_int).cast(),
            (&mut first_bad as *mut c_int).cast(),
            1,
            MPI_INT,
            MPI_MIN,
            MPI_COMM_WORLD,
        );
    }
    if first_bad < size {
        if rank == first_bad {
            for e in &loaded.errors {
                crate::log::raw_stderr(&format!(
                    "{} configuration error: {e}\n",
                    crate::log::prefix()
                ));
            }
            crate::log::raw_stderr(&format!(
                "{} stopping all {size} ranks before the application starts (see the SHIM_* table in libshim's README)\n",
                crate::log::prefix()
            ));
        }
        // SAFETY: MPI is initialized; a clean collective shutdown of every rank.
        unsafe { pmpi::PMPI_Finalize() };
        std::process::exit(2);
    }
    if rank == 0 {
        for w in &loaded.warnings {
            tracing::warn!(target: "shim::config", "{w}");
        }
    }
    crate::stats::set_enabled(loaded.config.stats != config::StatsMode::Off);
    if let Some(f) = &loaded.config.fault_panic {
        crate::entry::arm_fault(f);
    }
    tracing::info!(target: "shim::init", "libshim {} active on {size} ranks; MPI library: {}", crate::capi::VERSION, library_version().lines().next().unwrap_or(""));
    config::install(loaded.config);
    crate::comm::init();
    at_finalize(crate::comm::finalize);
    crate::entry::set_active(true);
}

/// Shared body of the init hooks: `native` performs the system MPI's initialization.
fn initialize(native: &dyn Fn() -> c_int) -> c_int {
    if STARTED.swap(true, Ordering::SeqCst) {
        // A second MPI_Init is erroneous; let the MPI library say so.
        return native();
    }
    let loaded = config::load();
    if loaded.config.disable {
        config::install(loaded.config);
        return native();
    }
    check_abi(native);
    let rc = native();
    if rc != MPI_SUCCESS {
        return rc;
    }
    post_init(loaded);
    MPI_SUCCESS
}

fn finalize(native: &dyn Fn() -> c_int) -> c_int {
    if crate::entry::is_active() {
        let w = world();
        crate::stats::report(config::get().stats, MPI_COMM_WORLD, w.rank, w.size);
        let fs: Vec<fn()> =
            std::mem::take(&mut *FINALIZERS.lock().unwrap_or_else(|e| e.into_inner()));
        for f in fs.into_iter().rev() {
            f();
        }
    }
    let rc = native();
    crate::entry::set_active(false);
    rc
}

/// Hooks called by the generated entry points (see `src/abi/mpi_functions.txt`).
///
/// Safety of every hook: the arguments are the application's, passed unchanged by the
/// generated `extern "C"` entry point; the MPI standard's rules for them are the contract.
#[allow(non_snake_case, clippy::missing_safety_doc)]
pub mod hooks {
    use super::*;

    pub unsafe fn MPI_Init(
        _argc: *mut c_int,
        _argv: *mut *mut *mut c_char,
        native: &dyn Fn() -> c_int,
    ) -> c_int {
        initialize(native)
    }

    pub unsafe fn MPI_Init_thread(
        _argc: *mut c_int,
        _argv: *mut *mut *mut c_char,
        _required: c_int,
        _provided: *mut c_int,
        native: &dyn Fn() -> c_int,
    ) -> c_int {
        initialize(native)
    }

    pub unsafe fn MPI_Finalize(native: &dyn Fn() -> c_int) -> c_int {
        finalize(native)
    }
}

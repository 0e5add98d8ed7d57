//! Layer: hooks. May use: services, core, platform.
//!
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
#![allow(non_snake_case, clippy::missing_safety_doc)]

use core::ffi::{c_char, c_int, c_void};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};

use crate::platform::abi::*;
use crate::platform::api::pmpi;
use crate::platform::config;
use crate::platform::proc::{self, Census, cpus, local, world};
use crate::services::coll::Coll;
use crate::services::coll::select::{self, Forced};

/// The thread level the application asked for and was told (MPI_Query_thread answers it).
static APP_LEVEL: AtomicI32 = AtomicI32::new(-1);
/// `SHIM_STATS`, for the report at finalize.
static STATS: std::sync::OnceLock<config::StatsMode> = std::sync::OnceLock::new();
static STARTED: AtomicBool = AtomicBool::new(false);
static FINALIZERS: Mutex<Vec<fn()>> = Mutex::new(Vec::new());

/// The first of these environment variables that holds an integer.
fn env_int(names: &[&str]) -> Option<i32> {
    names
        .iter()
        .find_map(|n| std::env::var(n).ok()?.trim().parse().ok())
}

/// Variables a launcher sets in every rank (hydra and PMI, PMIx, Open MPI, Slurm); none of
/// them set means a singleton `MPI_Init` (a program started without `mpirun`).
const LAUNCHER_VARS: &[&str] = &[
    "PMI_RANK",
    "PMI_SIZE",
    "PMI_FD",
    "PMIX_RANK",
    "MPI_LOCALNRANKS",
    "OMPI_COMM_WORLD_SIZE",
    "SLURM_NTASKS",
    "SLURM_PROCID",
];

/// Before init: does the configuration call for a progress thread? For `auto`: only for an
/// application that asked for `MPI_THREAD_MULTIPLE` itself (`required`), judged from the
/// launcher's environment (hydra, Open MPI, Slurm): more than one rank, and fewer ranks on
/// this node than processors. A singleton (no launcher variable at all) gets none. The
/// thread needs the library in `MPI_THREAD_MULTIPLE`, which slows every call of an
/// application that did not ask for it (MPICH 5: a program that only asks for that level
/// takes 2.9 µs per Barrier at 2 ranks instead of 0.36; the shim with its idle thread made
/// the Barrier at 8 ranks on 16 cores 9.8 µs instead of 1.7).
fn wants_thread(c: &config::Config, required: c_int) -> bool {
    match c.progress {
        config::ProgressMode::None | config::ProgressMode::Library => false,
        config::ProgressMode::Thread => true,
        config::ProgressMode::Auto => {
            if required < MPI_THREAD_MULTIPLE
                || LAUNCHER_VARS.iter().all(|v| std::env::var_os(v).is_none())
            {
                return false;
            }
            let world = env_int(&["PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "SLURM_NTASKS"]);
            let local = env_int(&[
                "MPI_LOCALNRANKS",
                "OMPI_COMM_WORLD_LOCAL_SIZE",
                "SLURM_NTASKS_PER_NODE",
            ])
            .unwrap_or(1);
            world.is_none_or(|w| w > 1) && local < cpus()
        }
    }
}

/// Registers cleanup to run in `MPI_Finalize` before `PMPI_Finalize` (last in, first out).
pub fn at_finalize(f: fn()) {
    FINALIZERS.lock().unwrap_or_else(|e| e.into_inner()).push(f);
}

/// Reads the MPI library's version string (valid before init, MPI-4.0 §9.1.1).
pub fn library_version() -> String {
    // room for the largest ABI's string: a library of the other ABI (refused below) writes
    // up to its own maximum (8192 in MPICH, 256 in Open MPI)
    let mut buf = vec![0u8; MPI_MAX_LIBRARY_VERSION_STRING.max(8192)];
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
    let std_abi = crate::platform::symbols::abi_version();
    if crate::platform::abi::library_is_compatible(&version, std_abi) {
        return;
    }
    let first = version.lines().next().unwrap_or("").to_string();
    let found = match std_abi {
        Some((major, minor)) => {
            format!("\"{first}\" through the MPI-5 standard ABI {major}.{minor}")
        }
        None => format!("\"{first}\" (not the MPI-5 standard ABI: MPI_Abi_get_version says none)"),
    };
    crate::platform::log::raw_stderr(&format!(
        "{} this libshim.so was built for {}, but the MPI library is {found}; \
         use a libshim build for that MPI (the default abi-mpich build, libshim.so, for MPICH, \
         Intel MPI and MVAPICH; abi-ompi, libshim_ompi.so, for Open MPI; abi-std, \
         libshim_abi.so, for programs linked with libmpi_abi.so; shimrun picks it). Aborting.\n",
        crate::platform::log::prefix(),
        crate::platform::abi::SUPPORTED_DESCRIPTION,
    ));
    native_init();
    abort_foreign(&first, std_abi.is_some());
}

/// Aborts through a library of another ABI, whose `MPI_COMM_WORLD` this build cannot
/// name: Open MPI's is the address of its predefined object, MPICH's the integer
/// 0x44000000 (both `mpi.h`), the standard ABI's `(MPI_Comm)0x101` (`mpi_abi.h`).
fn abort_foreign(version: &str, std_abi: bool) -> ! {
    let abort = crate::platform::symbols::optional(c"PMPI_Abort");
    if !abort.is_null() {
        if std_abi {
            // SAFETY: the standard ABI's PMPI_Abort(MPI_Comm = pointer, int).
            let f: unsafe extern "C" fn(usize, c_int) -> c_int =
                unsafe { core::mem::transmute(abort) };
            unsafe { f(0x101, 1) };
        } else if version.starts_with("Open MPI") {
            let comm = crate::platform::symbols::optional(c"ompi_mpi_comm_world");
            if !comm.is_null() {
                // SAFETY: Open MPI's PMPI_Abort(MPI_Comm = pointer, int).
                let f: unsafe extern "C" fn(*mut c_void, c_int) -> c_int =
                    unsafe { core::mem::transmute(abort) };
                unsafe { f(comm, 1) };
            }
        } else {
            // SAFETY: the MPICH ABI's PMPI_Abort(MPI_Comm = int, int).
            let f: unsafe extern "C" fn(c_int, c_int) -> c_int =
                unsafe { core::mem::transmute(abort) };
            unsafe { f(0x4400_0000, 1) };
        }
    }
    std::process::exit(1);
}

/// Names of this process's node and machine, from one read of the boot id. The node: its
/// host name and boot id (two machines never share a boot id; two containers of one
/// machine with different host names may not share `/dev/shm`, and count as two nodes).
/// The machine: its boot id, which the nodes that are containers or network namespaces of
/// one machine share with it (and with its processors); the node's name where the boot id
/// cannot be read.
fn node_and_machine_keys() -> (u64, u64) {
    let mut buf = [0u8; 256];
    // SAFETY: gethostname writes at most the buffer's length.
    unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len() - 1) };
    let host = buf.split(|&b| b == 0).next().unwrap_or(&[]);
    let boot = std::fs::read("/proc/sys/kernel/random/boot_id").unwrap_or_default();
    let node = config::fnv1a(&[host, b"|", &boot].concat());
    let machine = if boot.is_empty() {
        node
    } else {
        config::fnv1a(&[b"boot|".as_slice(), &boot].concat())
    };
    (node, machine)
}

/// The settings that must be the same on every rank are compared, configuration errors
/// are agreed on (so that every rank stops, even if only one rank's environment is wrong:
/// the lowest such rank prints the messages and every rank exits with status 2), and every
/// rank learns every rank's node. One allgather, the first collective of the job, made by
/// ranks with `SHIM_DISABLE=1` too (`disabled_init`): on an oversubscribed node each
/// collective costs time slices (`MPI_Comm_split_type` took 56 ms at 3 ranks on 2 cores).
fn agree(loaded: &mut config::Loaded, selection: u64, rank: c_int, size: c_int) -> Census {
    let (node, machine) = node_and_machine_keys();
    let mine = [
        selection,
        config::layout_fingerprint(&loaded.config),
        if loaded.errors.is_empty() { size } else { rank } as u64,
        node,
        proc::node_cpus() as u64,
        machine,
    ];
    const W: usize = 6;
    let mut all = vec![0u64; W * size.max(1) as usize];
    // SAFETY: W u64 from every rank into a buffer for `size` ranks, on MPI_COMM_WORLD.
    unsafe {
        pmpi::PMPI_Allgather(
            mine.as_ptr().cast(),
            W as c_int,
            MPI_UINT64_T(),
            all.as_mut_ptr().cast(),
            W as c_int,
            MPI_UINT64_T(),
            MPI_COMM_WORLD(),
        );
    }
    let col = |i: usize| all.chunks(W).map(move |r| r[i]);
    let lo = [col(0).min().unwrap_or(0), col(1).min().unwrap_or(0)];
    let hi = [col(0).max().unwrap_or(0), col(1).max().unwrap_or(0)];
    let census = Census {
        nodes: col(3).collect(),
        cpus: col(4).collect(),
        machines: col(5).collect(),
    };
    if lo[0] != hi[0] {
        loaded.errors.push(config::ConfigError {
            var: "SHIM_<COLL>_ALGORITHM/_K/_SEGMENT, SHIM_TUNING_FILE, SHIM_CALIBRATE".into(),
            value: "(differs between ranks)".into(),
            allowed: "the same settings on every rank (ranks choosing different algorithms would deadlock)".into(),
        });
    }
    if lo[1] != hi[1] {
        loaded.errors.push(config::ConfigError {
            var: "SHIM_DISABLE, SHIM_GHOSTS, SHIM_GHOST_*, SHIM_RANKS_PER_NODE".into(),
            value: "(differs between ranks)".into(),
            allowed: "the same settings on every rank (ranks laying the job out differently would deadlock at init)".into(),
        });
    }
    // a disagreement found here is an error of every rank: the lowest reports it
    let first_bad = if lo != hi {
        0
    } else {
        col(2).min().unwrap_or(size as u64) as c_int
    };
    if first_bad < size {
        if rank == first_bad {
            for e in &loaded.errors {
                crate::platform::log::raw_stderr(&format!(
                    "{} configuration error: {e}\n",
                    crate::platform::log::prefix()
                ));
            }
            crate::platform::log::raw_stderr(&format!(
                "{} stopping all {size} ranks before the application starts (see the SHIM_* table in libshim's README)\n",
                crate::platform::log::prefix()
            ));
        }
        // SAFETY: MPI is initialized; a clean collective shutdown of every rank.
        unsafe { pmpi::PMPI_Finalize() };
        std::process::exit(2);
    }
    census
}

/// `SHIM_DISABLE=1`: the system MPI's initialization, then only the agreement on the
/// settings (a rank whose neighbours run the shim would otherwise leave them waiting in
/// the shim's init collectives); nothing else of the shim runs.
fn disabled_init(mut loaded: config::Loaded, selection: u64, native: &dyn Fn() -> c_int) -> c_int {
    let rc = native();
    if rc != MPI_SUCCESS {
        return rc;
    }
    let (mut rank, mut size) = (0, 1);
    // SAFETY: MPI is initialized; out-pointers are valid locals.
    unsafe {
        pmpi::PMPI_Comm_rank(MPI_COMM_WORLD(), &mut rank);
        pmpi::PMPI_Comm_size(MPI_COMM_WORLD(), &mut size);
    }
    // the other variables of a disabled rank are not used: not its errors either
    loaded.errors.clear();
    agree(&mut loaded, selection, rank, size);
    rc
}

/// Everything after a successful `PMPI_Init*`.
fn post_init(mut loaded: config::Loaded, forced: [Forced; Coll::COUNT], selection: u64) {
    let (mut rank, mut size) = (0, 1);
    // SAFETY: MPI is initialized; out-pointers are valid locals.
    unsafe {
        pmpi::PMPI_Comm_rank(MPI_COMM_WORLD(), &mut rank);
        pmpi::PMPI_Comm_size(MPI_COMM_WORLD(), &mut size);
    }
    proc::set_world(proc::World { rank, size });
    crate::platform::log::init(&loaded.config.log, loaded.config.log_file.as_deref(), rank);
    let verbose = loaded.config.log.contains("debug") || loaded.config.log.contains("trace");
    crate::platform::guard::install_panic_hook(verbose);
    crate::platform::watchdog::start(loaded.config.timeout_s, |fid| {
        crate::platform::api::NAMES
            .get(fid as usize)
            .copied()
            .unwrap_or("an MPI call")
    });
    // Tuning data for `auto` (SHIM_TUNING_FILE); a file that cannot be used is a
    // configuration error like a bad value.
    let mut tuning = None;
    if let Some(path) = &loaded.config.tuning_file {
        match crate::services::coll::select::tuning::load_file(path) {
            Ok(t) => tuning = Some(t),
            Err(e) => loaded.errors.push(config::ConfigError {
                var: "SHIM_TUNING_FILE".into(),
                value: path.clone(),
                allowed: format!(
                    "a regular file of at most {} MiB in the tuning format ({e})",
                    crate::services::coll::select::tuning::MAX_FILE_BYTES >> 20
                ),
            }),
        }
    }
    // first of all collectives: a rank with another layout would wait in another one
    let census = agree(&mut loaded, selection, rank, size);
    // The node's processes (for the progress thread's placement and `auto` decision).
    let (lr, ls) = census.local(rank as usize);
    proc::set_local(proc::World {
        rank: lr as i32,
        size: ls as i32,
    });
    proc::set_one_node(ls == size as usize);
    proc::set_machine_size(census.machine_size(rank as usize) as i32);
    proc::set_node_keys(census.nodes.clone());
    proc::set_any_oversubscribed(census.any_oversubscribed());
    proc::set_nodes_are_machines(census.nodes_are_machines());
    if rank == 0 {
        for w in &loaded.warnings {
            tracing::warn!(target: "shim::config", "{w}");
        }
    }
    crate::platform::counters::set_enabled(loaded.config.stats != config::StatsMode::Off);
    // counted calls skip the memo, whose fast lane does not look at this flag
    crate::platform::memo::invalidate();
    if let Some(f) = &loaded.config.fault_panic {
        crate::platform::guard::arm_fault(f);
    }
    tracing::info!(target: "shim::init", "libshim {} active on {size} ranks; MPI library: {}", env!("CARGO_PKG_VERSION"), library_version().lines().next().unwrap_or(""));
    // Each service and core module gets its own settings; none reads a global configuration.
    let cfg = loaded.config;
    let _ = STATS.set(cfg.stats);
    crate::services::coll::select::configure(forced);
    crate::services::coll::configure_transport(cfg.transport, cfg.shm, cfg.verbs.clone());
    crate::core::comm::configure(cfg.sched_cache);
    crate::core::sched::configure(cfg.progress_min_bytes);
    crate::core::dtype::pool::configure(cfg.pack_threads, cfg.pack_min_bytes);
    let calibrate = cfg.calibrate;
    // Ghost processes leave here for good; users continue with their own world.
    crate::services::ghost::setup(&cfg, &census);
    if crate::platform::proc::ghosts_active() {
        let uw = crate::platform::proc::user_world();
        let (mut r, mut n) = (0, 0);
        // SAFETY: valid communicator and out-pointers.
        unsafe {
            pmpi::PMPI_Comm_rank(uw, &mut r);
            pmpi::PMPI_Comm_size(uw, &mut n);
        }
        proc::set_world(proc::World { rank: r, size: n });
    }
    // errors of the shim's own calls must not reach a fatal world handler (src/errors.rs)
    crate::platform::errors::init_world(
        crate::platform::proc::ghosts_active().then(crate::platform::proc::user_world),
    );
    at_finalize(crate::platform::errors::finalize_world);
    crate::core::comm::init();
    at_finalize(crate::core::comm::finalize);
    at_finalize(crate::core::retain::finalize);
    // a file wins; else the data shipped for this library (none: native, see tuning.rs)
    let t = match tuning {
        Some(t) => {
            tracing::info!(target: "shim::select", "tuning file {}: {} measured rows", t.source, t.rows());
            t
        }
        None => crate::services::coll::select::tuning::for_library(&library_version()),
    };
    crate::services::coll::select::tuning::install(t);
    if calibrate {
        let mut t = (*crate::services::coll::select::tuning::get()).clone();
        t.params = crate::services::coll::select::calibrate::run(&t.params);
        // measured on this library: the model decides where no row does
        t.native_only = false;
        t.source = format!("{} + SHIM_CALIBRATE", t.source);
        if rank == 0 {
            tracing::info!(target: "shim::select", "calibrated: {}", t.params.describe());
        }
        crate::services::coll::select::tuning::install(t);
    }
    crate::platform::guard::set_active(true);
}

/// Which init function the application called.
enum How {
    Init,
    Thread {
        required: c_int,
        provided: *mut c_int,
    },
}

/// The regions a ghost's dynamic window may hold under Open MPI (`osc_rdma_max_attach`).
const GHOST_MAX_ATTACH: &str = "4096";

/// Settings of the MPI library that must be made before its initialization reads them.
/// Open MPI's default one-sided component (`osc/rdma`) lets a dynamic window hold
/// `osc_rdma_max_attach` regions (64 in 4.1), and a ghost attaches the memory of every
/// window it serves to one dynamic window, so a program with more live windows (Global
/// Arrays keeps one per array) ended at the ghost's `MPI_Win_attach`. With ghosts the limit
/// is raised through Open MPI's environment, unless the user set it.
fn prepare_library(cfg: &config::Config) {
    const VAR: &str = "OMPI_MCA_osc_rdma_max_attach";
    if !cfg!(feature = "abi-ompi") || cfg.ghosts == 0 || std::env::var_os(VAR).is_some() {
        return;
    }
    // SAFETY: before the library's initialization the shim has started no thread, and a
    // program's own threads do not read Open MPI's variables before MPI_Init.
    unsafe { std::env::set_var(VAR, GHOST_MAX_ATTACH) };
}

/// Shared body of the init hooks: `native` performs the system MPI's initialization as the
/// application asked; with a progress thread the shim initializes with
/// `MPI_THREAD_MULTIPLE` instead and tells the application the level it asked for.
fn initialize(
    how: How,
    argc: *mut c_int,
    argv: *mut *mut *mut c_char,
    native: &dyn Fn() -> c_int,
) -> c_int {
    if STARTED.swap(true, Ordering::SeqCst) {
        // A second MPI_Init is erroneous; let the MPI library say so.
        return native();
    }
    let mut loaded = config::load();
    // the collective layer owns its variables (SHIM_<COLL>_*): parsed there, errors agreed here
    let coll = select::env::parse(&loaded.config.coll_vars);
    loaded.errors.extend(coll.errors);
    loaded.warnings.extend(coll.warnings);
    let selection = select::env::fingerprint(&coll.forced, &loaded.config);
    if loaded.config.disable {
        return disabled_init(loaded, selection, native);
    }
    check_abi(native);
    prepare_library(&loaded.config);
    let required = match how {
        How::Init => MPI_THREAD_SINGLE,
        How::Thread { required, .. } => required,
    };
    let thread = wants_thread(&loaded.config, required);
    let mut multiple = false;
    let rc = if thread {
        let mut actual: c_int = MPI_THREAD_SINGLE;
        // SAFETY: the application's argc/argv, a valid out-pointer.
        let rc = unsafe { pmpi::PMPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &mut actual) };
        multiple = actual >= MPI_THREAD_MULTIPLE;
        let level = match how {
            How::Init => MPI_THREAD_SINGLE,
            How::Thread { required, provided } => {
                let l = required.min(actual);
                if !provided.is_null() {
                    // SAFETY: the application's out-pointer.
                    unsafe { *provided = l };
                }
                l
            }
        };
        APP_LEVEL.store(level, Ordering::Relaxed);
        rc
    } else {
        let rc = native();
        let mut level: c_int = MPI_THREAD_SINGLE;
        // SAFETY: valid out-pointer; MPI is initialized when rc is success.
        if rc == MPI_SUCCESS {
            unsafe { pmpi::PMPI_Query_thread(&mut level) };
        }
        APP_LEVEL.store(level, Ordering::Relaxed);
        rc
    };
    if rc != MPI_SUCCESS {
        return rc;
    }
    let cfg = loaded.config.clone();
    post_init(loaded, coll.forced, selection);
    if thread {
        start_progress(&cfg, multiple);
    }
    if cfg.progress == config::ProgressMode::Library
        && !crate::core::progress::library::enable()
        && world().rank == 0
    {
        tracing::warn!(target: "shim::progress", "SHIM_PROGRESS=library: the MPI library takes no poll functions into its progress (MPIX_Async_start and MPIX_Request_is_complete, MPICH 4.3 and later, MPICH ABI build); schedules advance inside MPI calls only");
    }
    MPI_SUCCESS
}

/// Starts the progress thread if the setup allows it (after init, when the node's layout
/// is known).
fn start_progress(c: &config::Config, multiple: bool) {
    let l = local();
    if !multiple {
        if world().rank == 0 {
            tracing::warn!(target: "shim::progress", "SHIM_PROGRESS={:?}: the MPI library does not provide MPI_THREAD_MULTIPLE; schedules advance inside MPI calls only", c.progress);
        }
        return;
    }
    if c.progress == config::ProgressMode::Auto && (world().size <= 1 || l.size >= cpus()) {
        tracing::info!(target: "shim::progress", "SHIM_PROGRESS=auto: {} ranks on this node and {} processors: no progress thread", l.size, cpus());
        return;
    }
    let cpu = (!c.progress_cpus.is_empty())
        .then(|| c.progress_cpus[l.rank as usize % c.progress_cpus.len()]);
    crate::core::progress::thread::start(c.progress_interval_us, cpu);
    tracing::info!(target: "shim::progress", "progress thread started (interval {} us, cpu {:?})", c.progress_interval_us, cpu);
}

fn finalize(native: &dyn Fn() -> c_int) -> c_int {
    if crate::platform::guard::is_active() {
        crate::core::progress::drain_detached();
        if crate::core::progress::library::enabled() {
            crate::core::progress::library::disable();
            if crate::platform::counters::enabled() {
                crate::platform::log::raw_stderr(&format!(
                    "{} library progress: {} polls advanced the schedules\n",
                    crate::platform::log::prefix(),
                    crate::core::progress::library::POLLS
                        .load(std::sync::atomic::Ordering::Relaxed),
                ));
            }
        }
        if crate::core::progress::thread::running() {
            crate::core::progress::thread::stop();
            if crate::platform::counters::enabled() {
                use std::sync::atomic::Ordering::Relaxed;
                crate::platform::log::raw_stderr(&format!(
                    "{} progress thread: {} polls, {} sleeps, {:.3} ms CPU\n",
                    crate::platform::log::prefix(),
                    crate::core::progress::thread::POLLS.load(Relaxed),
                    crate::core::progress::thread::SLEEPS.load(Relaxed),
                    crate::core::progress::thread::CPU_NS.load(Relaxed) as f64 / 1e6
                ));
            }
        }
        let w = world();
        crate::hooks::report::report(
            STATS.get().copied().unwrap_or(config::StatsMode::Off),
            crate::platform::proc::user_world(),
            w.rank,
            w.size,
        );
        let fs: Vec<fn()> =
            std::mem::take(&mut *FINALIZERS.lock().unwrap_or_else(|e| e.into_inner()));
        for f in fs.into_iter().rev() {
            f();
        }
        crate::services::ghost::finalize_user();
    }
    let rc = native();
    crate::platform::watchdog::stop();
    crate::platform::guard::set_active(false);
    rc
}

// Hooks called by the generated entry points (see `src/platform/abi/mpi_functions.txt`).
//
// Safety of every hook: the arguments are the application's, passed unchanged by the
// generated `extern "C"` entry point; the MPI standard's rules for them are the contract.

pub unsafe fn MPI_Init(
    argc: *mut c_int,
    argv: *mut *mut *mut c_char,
    native: &dyn Fn() -> c_int,
) -> c_int {
    initialize(How::Init, argc, argv, native)
}

pub unsafe fn MPI_Init_thread(
    argc: *mut c_int,
    argv: *mut *mut *mut c_char,
    required: c_int,
    provided: *mut c_int,
    native: &dyn Fn() -> c_int,
) -> c_int {
    initialize(How::Thread { required, provided }, argc, argv, native)
}

/// The level the application was told at init, not the one the shim asked for.
pub unsafe fn MPI_Query_thread(provided: *mut c_int, native: &dyn Fn() -> c_int) -> c_int {
    let level = APP_LEVEL.load(Ordering::Relaxed);
    if level < 0 || provided.is_null() {
        return native();
    }
    // SAFETY: the application's out-pointer.
    unsafe { *provided = level };
    MPI_SUCCESS
}

pub unsafe fn MPI_Finalize(native: &dyn Fn() -> c_int) -> c_int {
    finalize(native)
}

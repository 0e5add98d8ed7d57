//! Layer: core. May use: platform.
//!
//! The packing worker pool (MT-MPI, design note seed-si-casper-mtmpi-thesis.md §3.4 and
//! §7): persistent threads that sleep on a condition variable when idle, woken for one
//! job at a time. A job on `t` threads wakes up to `t - 1` workers; the caller and the
//! workers that join in time claim parts until none is left, and the caller returns when
//! every part is done and every worker that joined has left.
//!
//! How many threads a job may use (`threads_for`): `SHIM_PACK_THREADS` (default: the
//! processors not needed by the other ranks of this node, at least 1), one thread below
//! `SHIM_PACK_MIN_BYTES`, and one thread inside an OpenMP parallel region of the
//! application (`omp_in_parallel`, looked up with `dlsym` when an OpenMP runtime is
//! loaded): the application's threads hold the cores then (thesis pitfall 1 and 2).

use core::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, OnceLock};

/// A job: `f(part)` for every part in 0..parts, parts claimed from `next` by whoever is
/// free (the caller and the woken workers), so every part runs whatever number of workers
/// exists. The pointers erase borrows' lifetimes; `run_parts` does not return before
/// every woken worker is done with them.
#[derive(Clone, Copy)]
struct Job {
    f: *const (dyn Fn(usize) + Sync),
    next: *const AtomicUsize,
    parts: usize,
    /// Workers 1..=helpers join this job.
    helpers: usize,
    epoch: u64,
}

// SAFETY: the closure is Sync, the counter atomic, and both outlive the job.
unsafe impl Send for Job {}

/// Runs parts of `job` until none is left.
fn claim(job: &Job) {
    // SAFETY: `run_parts` keeps the closure and the counter alive until its workers are done.
    let (f, next) = unsafe { (&*job.f, &*job.next) };
    loop {
        let k = next.fetch_add(1, Ordering::Relaxed);
        if k >= job.parts {
            break;
        }
        f(k);
    }
}

pub(crate) struct State {
    job: Option<Job>,
    epoch: u64,
}

struct Pool {
    state: Mutex<State>,
    /// The current job's epoch, readable without the lock (workers spin on it briefly).
    published: AtomicU64,
    /// Who is inside the current job: `epoch << 32 | workers inside << 1 | closed`. A worker
    /// enters only an open job of the epoch it was woken for; the caller closes the job when
    /// no part is left and waits only for the workers inside. A worker slow to wake (a
    /// sleeping vCPU can take hundreds of µs) then costs nothing: the caller does its parts.
    gate: AtomicU64,
    work: Condvar,
    /// Worker threads started so far.
    spawned: Mutex<usize>,
    /// One job at a time: concurrent callers (the progress thread and the application)
    /// take turns.
    busy: Mutex<()>,
}

static POOL: OnceLock<Pool> = OnceLock::new();

/// The pool, with at least `workers` threads (spawned on demand, never shrunk).
fn pool(workers: usize) -> &'static Pool {
    let p = POOL.get_or_init(|| Pool {
        published: AtomicU64::new(0),
        gate: AtomicU64::new(0),
        state: Mutex::new(State {
            job: None,
            epoch: 0,
        }),
        work: Condvar::new(),
        spawned: Mutex::new(0),
        busy: Mutex::new(()),
    });
    let mut n = p.spawned.lock().unwrap_or_else(|e| e.into_inner());
    while *n < workers {
        let id = *n + 1;
        if std::thread::Builder::new()
            .name(format!("shim-pack-{id}"))
            .spawn(move || worker(id))
            .is_err()
        {
            break;
        }
        *n += 1;
    }
    p
}

/// How long an idle worker polls for the next job before it sleeps: back-to-back
/// messages then skip the wake-up latency of the condition variable (tens of µs), and an
/// idle process stops using the core after this.
const SPIN: std::time::Duration = std::time::Duration::from_micros(50);

fn worker(id: usize) {
    let p = POOL.get().expect("pool initialised before its workers run");
    let mut seen = 0u64;
    loop {
        let t0 = std::time::Instant::now();
        while p.published.load(Ordering::Acquire) == seen && t0.elapsed() < SPIN {
            std::hint::spin_loop();
        }
        let job = {
            let mut s = p.state.lock().unwrap_or_else(|e| e.into_inner());
            loop {
                match s.job {
                    Some(j) if j.epoch != seen => break j,
                    _ => s = p.work.wait(s).unwrap_or_else(|e| e.into_inner()),
                }
            }
        };
        seen = job.epoch;
        // workers 1..=helpers join, if the job is still open; the others sleep again
        if id <= job.helpers && enter(&p.gate, job.epoch) {
            crate::platform::guard::guard("packing worker", || claim(&job));
            p.gate.fetch_sub(2, Ordering::AcqRel);
        }
    }
}

/// Enters the open job of `epoch`; false if it is closed or already replaced.
fn enter(gate: &AtomicU64, epoch: u64) -> bool {
    let mut g = gate.load(Ordering::Acquire);
    loop {
        if g >> 32 != epoch & 0xffff_ffff || g & 1 == 1 {
            return false;
        }
        match gate.compare_exchange_weak(g, g + 2, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => return true,
            Err(x) => g = x,
        }
    }
}

/// Runs `f(k)` for every k in 0..parts, on up to `threads` threads (the caller is one).
pub fn run_parts(threads: usize, parts: usize, f: &(dyn Fn(usize) + Sync)) {
    let workers = max_threads()
        .saturating_sub(1)
        .min(threads.saturating_sub(1))
        .min(parts.saturating_sub(1));
    if workers == 0 {
        for k in 0..parts {
            f(k);
        }
        return;
    }
    let p = pool(workers);
    let started = *p.spawned.lock().unwrap_or_else(|e| e.into_inner());
    let helpers = workers.min(started);
    if helpers == 0 {
        for k in 0..parts {
            f(k);
        }
        return;
    }
    let _turn = p.busy.lock().unwrap_or_else(|e| e.into_inner());
    let next = AtomicUsize::new(0);
    // SAFETY: erases the borrow's lifetime; we wait below until no worker uses it.
    let fp: *const (dyn Fn(usize) + Sync) = unsafe {
        core::mem::transmute::<&(dyn Fn(usize) + Sync), &'static (dyn Fn(usize) + Sync)>(f)
    };
    let job = {
        let mut s = p.state.lock().unwrap_or_else(|e| e.into_inner());
        s.epoch += 1;
        p.gate
            .store((s.epoch & 0xffff_ffff) << 32, Ordering::Release);
        let job = Job {
            f: fp,
            next: &next,
            parts,
            helpers,
            epoch: s.epoch,
        };
        s.job = Some(job);
        p.published.store(s.epoch, Ordering::Release);
        p.work.notify_all();
        job
    };
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| claim(&job)));
    // no part is left: close the job, then wait for the workers inside (they finish their
    // last part about when the caller does)
    p.gate.fetch_or(1, Ordering::AcqRel);
    let mut spins = 0u32;
    while (p.gate.load(Ordering::Acquire) >> 1) & 0x7fff_ffff > 0 {
        spins += 1;
        if spins < 10_000 {
            std::hint::spin_loop();
        } else {
            std::thread::yield_now();
        }
    }
    p.state.lock().unwrap_or_else(|e| e.into_inner()).job = None;
    if let Err(e) = r {
        std::panic::resume_unwind(e);
    }
}

/// Threads used by the largest job so far (for `SHIM_STATS`).
pub static MAX_USED: AtomicUsize = AtomicUsize::new(0);

/// Thread limit set at run time (`shim_set_pack_threads`); 0: not set.
static OVERRIDE: AtomicUsize = AtomicUsize::new(0);

/// Sets the thread limit for later jobs (0 restores `SHIM_PACK_THREADS`/the default).
pub fn set_max_threads(n: usize) {
    OVERRIDE.store(n, std::sync::atomic::Ordering::Relaxed);
}

/// `SHIM_PACK_THREADS` (None: the processors left per rank of this node) and
/// `SHIM_PACK_MIN_BYTES`, handed over at init.
static SETTINGS: OnceLock<(Option<u32>, u64)> = OnceLock::new();

/// Installs the packing settings read at init (first call wins).
pub fn configure(threads: Option<u32>, min_bytes: u64) {
    let _ = SETTINGS.set((threads, min_bytes));
}

/// `SHIM_PACK_MIN_BYTES`: the size from which packing is split over threads.
pub fn min_bytes() -> i64 {
    SETTINGS.get().map_or(256 * 1024, |s| s.1) as i64
}

/// `SHIM_PACK_THREADS`, or the processors left per rank of this node.
pub fn max_threads() -> usize {
    let o = OVERRIDE.load(std::sync::atomic::Ordering::Relaxed);
    if o > 0 {
        return o;
    }
    static T: OnceLock<usize> = OnceLock::new();
    *T.get_or_init(|| match SETTINGS.get().and_then(|s| s.0) {
        Some(n) => n as usize,
        None => {
            let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
            let local = crate::platform::proc::local().size.max(1) as usize;
            (cpus / local).max(1)
        }
    })
}

/// Threads for a job of `bytes` packed bytes.
pub fn threads_for(bytes: i64) -> usize {
    let t = max_threads();
    if t <= 1 || bytes < min_bytes() || in_omp_parallel() {
        return 1;
    }
    // at least half the threshold per thread, so tiny jobs do not wake every worker
    let per = (min_bytes() / 2).max(1);
    (bytes / per).clamp(1, t as i64) as usize
}

type OmpInParallel = unsafe extern "C" fn() -> c_int;

/// Whether the calling thread is inside an OpenMP parallel region of the application.
fn in_omp_parallel() -> bool {
    static F: OnceLock<Option<OmpInParallel>> = OnceLock::new();
    let f = F.get_or_init(|| {
        // SAFETY: dlsym with a NUL-terminated name; a null result means no OpenMP runtime.
        let p = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"omp_in_parallel".as_ptr()) };
        if p.is_null() {
            None
        } else {
            // SAFETY: `int omp_in_parallel(void)` (OpenMP 5.2 §18.2.5).
            Some(unsafe { core::mem::transmute::<*mut c_void, OmpInParallel>(p) })
        }
    });
    // SAFETY: the OpenMP runtime's own function, callable from any thread.
    f.is_some_and(|f| unsafe { f() } != 0)
}

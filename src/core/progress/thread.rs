//! Layer: core. May use: platform.
//!
//! The progress thread (`SHIM_PROGRESS=thread`): one per process, advancing every
//! outstanding schedule, and with it the system MPI's point-to-point requests under them,
//! while the application computes.
//!
//! It must not take the core the application computes on (Hoefler digest §4.1, §4.3: a
//! polling thread on a busy core eats about half of it). So it polls only while schedules
//! that need it are outstanding (`Schedule::needs_progress`, `SHIM_PROGRESS_MIN_BYTES`: a
//! single round of small messages completes inside the application's calls, and each timed
//! wake-up costs 14-25 µs of CPU in a virtual machine), and when a poll completes nothing it
//! sleeps for
//! `SHIM_PROGRESS_INTERVAL_US`, doubling twice while nothing happens (at most 4x), back to
//! immediate polling as soon as something completes. With no schedule outstanding it
//! sleeps on a condition variable that `submit` signals, and once woken sleeps one interval
//! before its first poll (`submit` has just advanced the new schedule; polling at once
//! only preempts the computing rank: Open MPI TCP, 2 ranks, emulated network, 64 KiB
//! OSU overlap 81-89% -> 89-91% for Ibcast/Ialltoall). While an application thread is
//! itself waiting in an MPI call (and therefore advancing schedules), the thread stands
//! back. Sleeps are made precise with a 1 µs timer slack (`PR_SET_TIMERSLACK`).
//!
//! Measured alternatives (2 ranks on the emulated 2 Gbit/s network, scripts/bench-overlap):
//! blocking in `ppoll` on the process's epoll descriptors (UCX keeps its TCP sockets in
//! one) or on its sockets, to wake on network events instead of timers, woke the thread
//! far more often (readiness persists while a message trickles in), cost more CPU and gave
//! less overlap than plain timed sleeps; a longer back-off (8x, 16x) lost overlap on
//! medium messages; shorter intervals (20-50 us) cost 10-35% of the compute in CPU.
//!
//! Hand-off: a run is advanced by whoever holds its mutex (`RunCell::poke` uses
//! `try_lock`), so never by two threads at once; completion is published through the
//! run's atomic `done` flag, which `MPI_Wait`/`MPI_Test` read. The thread marks itself as
//! inside the shim, so anything it calls back (a user reduction) goes straight to the MPI
//! library. `stop` (at `MPI_Finalize`) joins it before `PMPI_Finalize`.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

static STOP: AtomicBool = AtomicBool::new(false);
static RUNNING: AtomicBool = AtomicBool::new(false);
static HANDLE: Mutex<Option<JoinHandle<()>>> = Mutex::new(None);
static WAKE: (Mutex<()>, Condvar) = (Mutex::new(()), Condvar::new());
/// Polls and sleeps, for `SHIM_STATS`.
pub static POLLS: AtomicU64 = AtomicU64::new(0);
pub static SLEEPS: AtomicU64 = AtomicU64::new(0);
/// CPU time the thread has used, in nanoseconds (updated as it goes).
pub static CPU_NS: AtomicU64 = AtomicU64::new(0);

/// Whether the progress thread runs.
pub fn running() -> bool {
    RUNNING.load(Ordering::Acquire)
}

/// Wakes the thread when new work arrives.
pub fn notify() {
    if running() {
        let _g = WAKE.0.lock().unwrap_or_else(|e| e.into_inner());
        WAKE.1.notify_one();
    }
}

/// Starts the thread. `interval_us`: base sleep when idle; `cpu`: optional core to pin to.
pub fn start(interval_us: u64, cpu: Option<usize>) {
    STOP.store(false, Ordering::Release);
    let h = std::thread::Builder::new()
        .name("shim-progress".into())
        .spawn(move || {
            crate::platform::guard::guard("the progress thread", || {
                main_loop(interval_us.max(1), cpu)
            })
        });
    match h {
        Ok(h) => {
            *HANDLE.lock().unwrap_or_else(|e| e.into_inner()) = Some(h);
            RUNNING.store(true, Ordering::Release);
        }
        Err(e) => tracing::warn!(
            target: "shim::progress",
            "cannot start the progress thread ({e}); schedules advance inside MPI calls only"
        ),
    }
}

/// Stops and joins the thread (at finalize).
pub fn stop() {
    if !running() {
        return;
    }
    STOP.store(true, Ordering::Release);
    {
        let _g = WAKE.0.lock().unwrap_or_else(|e| e.into_inner());
        WAKE.1.notify_all();
    }
    if let Some(h) = HANDLE.lock().unwrap_or_else(|e| e.into_inner()).take() {
        let _ = h.join();
    }
    RUNNING.store(false, Ordering::Release);
}

fn pin(cpu: usize) {
    // SAFETY: a zeroed cpu_set_t with one bit set, for the calling thread (pid 0).
    unsafe {
        let mut set: libc::cpu_set_t = core::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        if libc::sched_setaffinity(0, core::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            tracing::warn!(
                target: "shim::progress",
                "cannot pin the progress thread to CPU {cpu}: {}",
                std::io::Error::last_os_error()
            );
        }
    }
}

/// CPU time of the calling thread.
fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid out-pointer; CLOCK_THREAD_CPUTIME_ID is always available on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn main_loop(interval_us: u64, cpu: Option<usize>) {
    crate::platform::guard::enter_forever();
    // SAFETY: prctl on the calling thread; 1000 ns timer slack for precise short sleeps.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1000u64, 0u64, 0u64, 0u64) };
    if let Some(c) = cpu {
        pin(c);
    }
    let mut idle: u32 = 0;
    let cpu0 = thread_cpu_ns();
    while !STOP.load(Ordering::Acquire) {
        CPU_NS.store(thread_cpu_ns() - cpu0, Ordering::Relaxed);
        if !super::thread_work() {
            let g = WAKE.0.lock().unwrap_or_else(|e| e.into_inner());
            if !super::thread_work() && !STOP.load(Ordering::Acquire) {
                let (g, t) = WAKE
                    .1
                    .wait_timeout(g, Duration::from_millis(50))
                    .unwrap_or_else(|e| e.into_inner());
                drop(g);
                if !t.timed_out() {
                    // New work: `submit` has just advanced it, so the next poll is of use
                    // only after the network has had time to move data.
                    std::thread::sleep(Duration::from_micros(interval_us));
                }
            }
            idle = 0;
            continue;
        }
        if super::waiters() > 0 {
            // an application thread is waiting in MPI and advancing the schedules itself
            std::thread::sleep(Duration::from_micros(interval_us));
            continue;
        }
        POLLS.fetch_add(1, Ordering::Relaxed);
        if super::progress_all_counting() {
            idle = 0;
            continue;
        }
        idle = idle.saturating_add(1);
        SLEEPS.fetch_add(1, Ordering::Relaxed);
        std::thread::sleep(Duration::from_micros(interval_us << (idle - 1).min(2)));
    }
}

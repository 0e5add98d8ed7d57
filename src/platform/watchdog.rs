//! Layer: platform. May use: nothing.
//!
//! `SHIM_TIMEOUT`: an MPI call that lasts longer ends the job with an error instead of
//! hanging. MPI has no timeouts, and a library whose peer's link went down waits forever
//! (MPICH 5.0.2 and Debian's 4.0.2 over TCP, a node's link taken down in the emulated
//! cluster: every rank still waited when the job was killed 100-150 s later). Off by
//! default: a rank may rightly wait for hours in a Barrier while the others compute.
//!
//! Every thread that enters the shim (`guard::enter`, outermost entry) notes the time in
//! its slot, and clears it when it leaves; a watchdog thread looks at the slots every
//! second, whatever the call is doing: the shim's own waits, or a call handed whole to the
//! library.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// The limit in milliseconds; 0: off.
static LIMIT_MS: AtomicU64 = AtomicU64::new(0);

/// One thread's call in progress.
#[derive(Default)]
struct Slot {
    /// When the call began, in ms since [`epoch`] plus 1; 0: not in a call.
    since: AtomicU64,
    /// The call's function id plus 1 (0: unknown).
    fid: AtomicU32,
}

static SLOTS: Mutex<Vec<Arc<Slot>>> = Mutex::new(Vec::new());

thread_local! {
    static SLOT: Arc<Slot> = {
        let s = Arc::new(Slot::default());
        SLOTS.lock().unwrap_or_else(|e| e.into_inner()).push(Arc::clone(&s));
        s
    };
}

fn epoch() -> Instant {
    static E: OnceLock<Instant> = OnceLock::new();
    *E.get_or_init(Instant::now)
}

fn now_ms() -> u64 {
    epoch().elapsed().as_millis() as u64 + 1
}

/// Whether calls are timed.
#[inline(always)]
pub fn on() -> bool {
    LIMIT_MS.load(Ordering::Relaxed) != 0
}

/// Starts the watchdog (at init) unless `secs` is 0; `name` turns a function id into its
/// name for the message.
pub fn start(secs: u64, name: fn(u32) -> &'static str) {
    if secs == 0 {
        return;
    }
    epoch();
    LIMIT_MS.store(secs.saturating_mul(1000), Ordering::Relaxed);
    let spawned = std::thread::Builder::new()
        .name("shim-watchdog".into())
        .spawn(move || watch(name));
    if spawned.is_err() {
        LIMIT_MS.store(0, Ordering::Relaxed);
        tracing::warn!(target: "shim::watchdog", "SHIM_TIMEOUT: no thread for the watchdog; calls are not timed");
    }
}

/// Stops timing calls (after `MPI_Finalize`).
pub fn stop() {
    LIMIT_MS.store(0, Ordering::Relaxed);
}

/// The calling thread enters the shim (its outermost entry).
#[inline]
pub fn entered() {
    if on() {
        SLOT.with(|s| {
            s.fid.store(0, Ordering::Relaxed);
            s.since.store(now_ms(), Ordering::Relaxed)
        });
    }
}

/// Names the call the calling thread is in.
#[inline]
pub fn call(fid: u32) {
    if on() {
        SLOT.with(|s| s.fid.store(fid + 1, Ordering::Relaxed));
    }
}

/// The calling thread leaves the shim.
#[inline]
pub fn left() {
    if on() {
        SLOT.with(|s| s.since.store(0, Ordering::Relaxed));
    }
}

/// The longest call in progress past `limit` ms at `now`: (its duration, its function id
/// plus 1).
fn overdue(slots: &[Arc<Slot>], now: u64, limit: u64) -> Option<(u64, u32)> {
    slots
        .iter()
        .filter_map(|s| {
            let since = s.since.load(Ordering::Relaxed);
            (since != 0 && now.saturating_sub(since) > limit)
                .then(|| (now - since, s.fid.load(Ordering::Relaxed)))
        })
        .max_by_key(|&(d, _)| d)
}

fn watch(name: fn(u32) -> &'static str) {
    // (it calls the library only through `PMPI_*`: `proc::abort_job`)
    loop {
        let limit = LIMIT_MS.load(Ordering::Relaxed);
        if limit == 0 {
            return;
        }
        std::thread::sleep(Duration::from_millis((limit / 4).clamp(10, 1000)));
        let found = {
            let slots = SLOTS.lock().unwrap_or_else(|e| e.into_inner());
            overdue(&slots, now_ms(), limit)
        };
        if let Some((waited, fid)) = found {
            if !on() {
                return;
            }
            let call = if fid == 0 {
                "an MPI call"
            } else {
                name(fid - 1)
            };
            let msg = format!(
                "{} SHIM_TIMEOUT: {call} has not returned after {:.1} s (the limit is {} s): a peer may be gone or unreachable; aborting the job\n",
                crate::platform::log::prefix(),
                waited as f64 / 1e3,
                limit / 1000
            );
            crate::platform::log::raw_stderr(&msg);
            if crate::platform::log::to_file() {
                tracing::error!(target: "shim::watchdog", "{}", msg.trim_end());
            }
            crate::platform::proc::abort_job(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_call_in_progress_past_the_limit_is_overdue() {
        let slot = |since: u64, fid: u32| {
            let s = Slot::default();
            s.since.store(since, Ordering::Relaxed);
            s.fid.store(fid, Ordering::Relaxed);
            Arc::new(s)
        };
        let slots = vec![slot(0, 0), slot(9_000, 3), slot(5_000, 7), slot(9_500, 2)];
        assert_eq!(overdue(&slots, 10_000, 6_000), None, "none older than 6 s");
        assert_eq!(overdue(&slots, 10_000, 4_000), Some((5_000, 7)));
        assert_eq!(
            overdue(&slots, 20_000, 4_000),
            Some((15_000, 7)),
            "the longest"
        );
        assert_eq!(overdue(&slots[..1], u64::MAX, 1), None, "not in a call");
    }
}

//! Layer: core. May use: platform.
//!
//! The signal of the shared-memory transport: a single-writer sequence counter on its own
//! cache line, or one it shares with the data it publishes. Its one writer publishes
//! ever-increasing values with a release store; readers wait until it reaches a target
//! with acquire loads, so that the data written before a publish is visible after the wait
//! (the release/gather flags of MPICH's `release_gather` and Open MPI's `xhc`). Values
//! wrap: "reached" is a signed comparison of the difference, valid while reader and writer
//! are less than 2^31 publishes apart.
//!
//! Waiting shares the cores: a bounded spin, then `sched_yield`, then sleeps on the word (a
//! shared futex, bounded so that the waiter still calls its poll function, which drives the
//! system MPI's progress). A writer wakes sleepers only when one announced itself, so the
//! common path of a publish is one store and one load.

use std::sync::atomic::{AtomicU32, Ordering, fence};
use std::time::Duration;

use crate::platform::shm::{futex_wait, futex_wake};

/// One flag. The segment gives it a cache line of its own, or one it shares only with data
/// its writer publishes through it (`node`), so that no other store invalidates the
/// readers' copy.
#[repr(C, align(8))]
#[derive(Debug, Default)]
pub struct SeqFlag {
    seq: AtomicU32,
    /// Readers asleep (or about to sleep) on `seq`.
    sleepers: AtomicU32,
}

/// Whether `current` is at or past `target`, modulo 2^32.
#[inline]
pub fn reached(current: u32, target: u32) -> bool {
    current.wrapping_sub(target) as i32 >= 0
}

impl SeqFlag {
    pub const fn new() -> SeqFlag {
        SeqFlag {
            seq: AtomicU32::new(0),
            sleepers: AtomicU32::new(0),
        }
    }

    /// The current value (acquire: what the writer wrote before publishing it is visible).
    #[inline]
    pub fn load(&self) -> u32 {
        self.seq.load(Ordering::Acquire)
    }

    /// Whether the flag has reached `target`.
    #[inline]
    pub fn is_reached(&self, target: u32) -> bool {
        reached(self.load(), target)
    }

    /// Publishes `value` (the writer only). Wakes sleepers if any announced itself.
    #[inline]
    pub fn publish(&self, value: u32) {
        self.seq.store(value, Ordering::Release);
        // Dekker with `sleep`: either this load sees the sleeper's announcement, or the
        // sleeper's load after announcing sees `value` (both sides fence SeqCst).
        fence(Ordering::SeqCst);
        if self.sleepers.load(Ordering::Relaxed) != 0 {
            futex_wake(&self.seq, i32::MAX);
        }
    }

    /// Sleeps until the flag changes from a value short of `target`, a wake-up, or `max`.
    fn sleep(&self, target: u32, max: Duration) {
        self.sleepers.fetch_add(1, Ordering::Relaxed);
        fence(Ordering::SeqCst);
        let cur = self.seq.load(Ordering::Relaxed);
        if !reached(cur, target) {
            // the kernel compares the word with `cur` again before sleeping
            futex_wait(&self.seq, cur, max);
        }
        self.sleepers.fetch_sub(1, Ordering::Relaxed);
    }
}

/// How a waiter spends its time: `spins` polls, then `yields` polls with `sched_yield`
/// between them, then sleeps of `sleep` each. While spinning, `poll` runs every
/// `poll_every` polls once `poll_after` polls went by; then before every yield and after
/// every sleep. (A short wait never calls `poll`: driving the system MPI costs more than a
/// cache line takes to arrive, so a flag that comes while the library runs would come
/// late.)
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WaitPolicy {
    pub spins: u32,
    pub yields: u32,
    pub sleep: Duration,
    pub poll_every: u32,
    pub poll_after: u32,
}

impl Default for WaitPolicy {
    fn default() -> Self {
        WaitPolicy {
            spins: 2000,
            yields: 200,
            sleep: Duration::from_micros(200),
            poll_every: 256,
            poll_after: 0,
        }
    }
}

/// Waits until `flag` reaches `target`. `poll` is called now and then (it drives the system
/// MPI's progress); when it returns an error, the wait ends with that error.
pub fn wait<E>(
    flag: &SeqFlag,
    target: u32,
    policy: &WaitPolicy,
    mut poll: impl FnMut() -> Result<(), E>,
) -> Result<(), E> {
    let every = policy.poll_every.max(1);
    let mut n: u32 = 0;
    loop {
        if flag.is_reached(target) {
            return Ok(());
        }
        n = n.saturating_add(1);
        if n <= policy.spins {
            if n > policy.poll_after && n % every == 0 {
                poll()?;
            }
            std::hint::spin_loop();
        } else if n <= policy.spins.saturating_add(policy.yields) {
            // a peer may be waiting for this rank's library (passive-target RMA) all the
            // while: poll at every yield, which costs more than the poll
            poll()?;
            std::thread::yield_now();
        } else {
            flag.sleep(target, policy.sleep);
            poll()?;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::platform::shm::{Segment, unlink};
    use std::sync::Arc;
    use std::time::Instant;

    #[test]
    fn reached_is_modulo_two_to_the_32() {
        assert!(reached(5, 5));
        assert!(reached(6, 5));
        assert!(!reached(4, 5));
        assert!(reached(1, u32::MAX - 1), "past the wrap");
        assert!(!reached(u32::MAX - 1, 1));
        assert!(reached(0x8000_0000 - 1, 0));
    }

    #[test]
    fn a_flag_takes_eight_bytes() {
        // node::DATA puts the slot 16 bytes after the flag
        assert_eq!(std::mem::size_of::<SeqFlag>(), 8);
        assert_eq!(std::mem::align_of::<SeqFlag>(), 8);
    }

    /// Two flags in a shared segment, each mapped twice (as two processes would): a
    /// ping-pong of `rounds` between two threads, each writing only its own flag and a
    /// payload word that the other checks after its wait (release/acquire).
    fn ping_pong(policy: WaitPolicy, rounds: u32, start: u32) {
        let (a, name) = Segment::create("shimtest", 4096).unwrap();
        let b = Segment::open(&name, 4096).unwrap();
        unlink(&name).unwrap();
        let a = Arc::new(a);
        let b = Arc::new(b);
        // SAFETY: the segment is 4096 bytes, zero-filled, 64-aligned (page); a zero SeqFlag is
        // valid; each layout: flags at 0 and 64, payloads at 128 and 192.
        let at = |s: &Segment, off: usize| unsafe { &*(s.as_ptr().add(off) as *const SeqFlag) };
        let word = |s: &Segment, off: usize| unsafe { &*(s.as_ptr().add(off) as *const AtomicU32) };
        at(&a, 0).publish(start);
        at(&a, 64).publish(start);
        let b2 = b.clone();
        let t = std::thread::spawn(move || {
            for r in 1..=rounds {
                let v = start.wrapping_add(r);
                wait(at(&b2, 0), v, &policy, || Ok::<(), ()>(())).unwrap();
                assert_eq!(
                    word(&b2, 128).load(Ordering::Relaxed),
                    v,
                    "payload before flag"
                );
                word(&b2, 192).store(v, Ordering::Relaxed);
                at(&b2, 64).publish(v);
            }
        });
        for r in 1..=rounds {
            let v = start.wrapping_add(r);
            word(&a, 128).store(v, Ordering::Relaxed);
            at(&a, 0).publish(v);
            wait(at(&a, 64), v, &policy, || Ok::<(), ()>(())).unwrap();
            assert_eq!(word(&a, 192).load(Ordering::Relaxed), v);
        }
        t.join().unwrap();
    }

    #[test]
    fn ping_pong_spinning_across_two_mappings_and_the_wrap() {
        ping_pong(WaitPolicy::default(), 20_000, u32::MAX - 10_000);
    }

    #[test]
    fn ping_pong_sleeping_loses_no_wake_up() {
        // every wait goes to sleep at once, with a sleep long enough that a lost wake-up
        // would show as seconds
        let p = WaitPolicy {
            spins: 0,
            yields: 0,
            sleep: Duration::from_secs(5),
            poll_every: 1,
            poll_after: 0,
        };
        let t0 = Instant::now();
        ping_pong(p, 2_000, 7);
        assert!(t0.elapsed() < Duration::from_secs(4), "{:?}", t0.elapsed());
    }

    #[test]
    fn a_failing_poll_ends_the_wait() {
        let f = SeqFlag::new();
        let p = WaitPolicy {
            spins: 10,
            yields: 0,
            sleep: Duration::from_millis(1),
            poll_every: 4,
            poll_after: 0,
        };
        let mut calls = 0;
        let r = wait(&f, 1, &p, || {
            calls += 1;
            if calls == 3 { Err(17) } else { Ok(()) }
        });
        assert_eq!(r, Err(17));
        assert_eq!(calls, 3);
        assert_eq!(
            wait(&f, 0, &p, || Err(1)),
            Ok(()),
            "already reached: no poll"
        );
    }

    #[test]
    fn a_spinning_waiter_polls_only_after_poll_after() {
        // every spin is within `poll_after`: the first poll comes after the first sleep
        let f = SeqFlag::new();
        let p = WaitPolicy {
            spins: 1000,
            yields: 0,
            sleep: Duration::from_millis(50),
            poll_every: 1,
            poll_after: 1000,
        };
        let t0 = Instant::now();
        assert_eq!(wait(&f, 1, &p, || Err(3)), Err(3));
        assert!(
            t0.elapsed() >= Duration::from_millis(50),
            "{:?}",
            t0.elapsed()
        );
    }

    #[test]
    fn a_yielding_waiter_polls_at_every_yield() {
        // five yields, five polls, long before the first sleep would end
        let f = SeqFlag::new();
        let p = WaitPolicy {
            spins: 0,
            yields: 5,
            sleep: Duration::from_secs(2),
            poll_every: 1000,
            poll_after: 0,
        };
        let mut calls = 0;
        let t0 = Instant::now();
        let r = wait(&f, 1, &p, || {
            calls += 1;
            if calls == 5 { Err(9) } else { Ok(()) }
        });
        assert_eq!(r, Err(9));
        assert!(t0.elapsed() < Duration::from_secs(1), "{:?}", t0.elapsed());
    }
}

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
//! Waiting shares the cores: a bounded spin, then `sched_yield` with a poll function (which
//! drives the system MPI's progress) before every yield. A waiter never sleeps: a peer may
//! need this rank's library to move before it can come (passive-target RMA on this rank),
//! as the libraries' own collectives never sleep. So a publish is one release store, with
//! no fence: the writer goes on while its store drains, where a wake-up protocol (a futex
//! and a count of sleepers) needs a full fence after the store, which on a 2-rank
//! shared-memory Bcast was two thirds of the schedule's own time (`perf`: the fence waits
//! for the store's cache line to come from the reader's core).

use std::sync::atomic::{AtomicU32, Ordering};

/// One flag. The segment gives it a cache line of its own, or one it shares only with data
/// its writer publishes through it (`node`), so that no other store invalidates the
/// readers' copy. Eight bytes (`node::DATA` puts the slot after them, aligned for any
/// predefined type).
#[repr(C, align(8))]
#[derive(Debug, Default)]
pub struct SeqFlag {
    seq: AtomicU32,
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

    /// Publishes `value` (the writer only): a release store, so that what the writer wrote
    /// before is visible to a reader that sees `value`.
    #[inline]
    pub fn publish(&self, value: u32) {
        self.seq.store(value, Ordering::Release);
    }
}

/// How a waiter spends its time: `spins` polls of the flag, then a `sched_yield` between
/// polls. While spinning, `poll` runs every `poll_every` polls once `poll_after` polls
/// went by; then before every yield. (A short wait never calls `poll`: driving the system
/// MPI costs more than a cache line takes to arrive, so a flag that comes while the
/// library runs would come late.)
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WaitPolicy {
    pub spins: u32,
    pub poll_every: u32,
    pub poll_after: u32,
}

impl Default for WaitPolicy {
    fn default() -> Self {
        WaitPolicy {
            spins: 2000,
            poll_every: 256,
            poll_after: 0,
        }
    }
}

/// What a waiter does after its `n`-th unsuccessful look at the flag (from 1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Step {
    Spin,
    PollSpin,
    PollYield,
}

fn step(policy: &WaitPolicy, n: u32) -> Step {
    if n > policy.spins {
        Step::PollYield
    } else if n > policy.poll_after && n % policy.poll_every.max(1) == 0 {
        Step::PollSpin
    } else {
        Step::Spin
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
    let mut n: u32 = 0;
    loop {
        if flag.is_reached(target) {
            return Ok(());
        }
        n = n.saturating_add(1);
        match step(policy, n) {
            Step::Spin => std::hint::spin_loop(),
            Step::PollSpin => {
                poll()?;
                std::hint::spin_loop();
            }
            Step::PollYield => {
                // a peer may be waiting for this rank's library (passive-target RMA) all
                // the while: poll at every yield, which costs more than the poll
                poll()?;
                std::thread::yield_now();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::platform::shm::{Segment, unlink};
    use std::sync::Arc;

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
    fn ping_pong_yielding_at_once() {
        // every wait yields from its first miss: the path of an oversubscribed node
        let p = WaitPolicy {
            spins: 0,
            poll_every: 1,
            poll_after: 0,
        };
        ping_pong(p, 2_000, 7);
    }

    #[test]
    fn a_failing_poll_ends_the_wait() {
        let f = SeqFlag::new();
        let p = WaitPolicy {
            spins: 10,
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
    fn polls_come_after_poll_after_then_at_every_yield() {
        let p = WaitPolicy {
            spins: 1000,
            poll_every: 8,
            poll_after: 256,
        };
        let steps: Vec<Step> = (1..=1003).map(|n| step(&p, n)).collect();
        let polls: Vec<u32> = (1..=1003)
            .filter(|&n| steps[n as usize - 1] == Step::PollSpin)
            .collect();
        assert_eq!(polls.first(), Some(&264), "none within poll_after");
        assert!(polls.windows(2).all(|w| w[1] - w[0] == 8));
        assert_eq!(polls.last(), Some(&1000));
        assert!(steps[1000..].iter().all(|&s| s == Step::PollYield));
        // a policy that polls from the start
        let q = WaitPolicy {
            spins: 16,
            poll_every: 8,
            poll_after: 0,
        };
        assert_eq!(step(&q, 8), Step::PollSpin);
        assert_eq!(step(&q, 9), Step::Spin);
        assert_eq!(step(&q, 17), Step::PollYield);
        assert_eq!(step(&q, u32::MAX), Step::PollYield);
    }

    #[test]
    fn a_yielding_waiter_polls_at_every_yield() {
        // five yields, five polls
        let f = SeqFlag::new();
        let p = WaitPolicy {
            spins: 0,
            poll_every: 1000,
            poll_after: 0,
        };
        let mut calls = 0;
        let r = wait(&f, 1, &p, || {
            calls += 1;
            if calls == 5 { Err(9) } else { Ok(()) }
        });
        assert_eq!(r, Err(9));
        assert_eq!(calls, 5);
    }
}

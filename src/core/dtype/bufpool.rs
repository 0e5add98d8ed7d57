//! Layer: core. May use: platform.
//!
//! Reused buffers for the packed bytes of messages.
//!
//! A packed message needs a buffer as large as its data. Allocated afresh per message, a
//! large one comes from `mmap` and goes back with `munmap`, so every message pays a page
//! fault and a page clearing per 4 KiB on each side: perf on a 1 MiB `MPI_Sendrecv` of a
//! vector type showed page faults, `clear_page` and unmapping as a third of the time, and
//! the message took 6x the system MPI's (1,308 against 212 µs). Buffers are kept in
//! power-of-two size classes and handed out again; a class keeps at most [`PER_CLASS`]
//! idle buffers and the pool at most [`MAX_IDLE`] bytes, so a burst of large messages
//! does not pin its memory for ever.

use std::ops::{Deref, DerefMut};
use std::sync::Mutex;

/// Idle buffers kept per size class (a send and a receive in flight, twice).
const PER_CLASS: usize = 4;
/// Idle bytes kept in all.
const MAX_IDLE: usize = 64 << 20;
/// Classes 2^0 .. 2^47 bytes.
const CLASSES: usize = 48;

struct Pool {
    idle: [Vec<Vec<u8>>; CLASSES],
    bytes: usize,
}

static POOL: Mutex<Pool> = Mutex::new(Pool {
    idle: [const { Vec::new() }; CLASSES],
    bytes: 0,
});

fn class(len: usize) -> usize {
    len.max(1).next_power_of_two().trailing_zeros() as usize
}

/// `len` bytes of a pooled buffer, given back when dropped. The contents are whatever
/// the buffer last held (always initialized memory): callers fill it before reading.
pub struct Bytes {
    v: Vec<u8>,
    len: usize,
}

impl Bytes {
    /// A buffer of `len` bytes.
    pub fn new(len: usize) -> Bytes {
        let c = class(len);
        let reused = if c < CLASSES {
            let mut p = POOL.lock().unwrap_or_else(|e| e.into_inner());
            let v = p.idle[c].pop();
            if let Some(v) = &v {
                p.bytes -= v.len();
            }
            v
        } else {
            None
        };
        // A new buffer is zeroed once (calloc, so large ones come zeroed from the kernel);
        // from then on it always holds initialized bytes.
        let v = reused.unwrap_or_else(|| vec![0u8; if c < CLASSES { 1usize << c } else { len }]);
        Bytes { v, len }
    }

    /// Shortens the buffer to its first `len` bytes.
    pub fn truncate(&mut self, len: usize) {
        self.len = self.len.min(len);
    }
}

impl Drop for Bytes {
    fn drop(&mut self) {
        let v = std::mem::take(&mut self.v);
        let c = class(v.len());
        if c >= CLASSES || v.len() != 1 << c {
            return;
        }
        let mut p = POOL.lock().unwrap_or_else(|e| e.into_inner());
        if p.idle[c].len() < PER_CLASS && p.bytes + v.len() <= MAX_IDLE {
            p.bytes += v.len();
            p.idle[c].push(v);
        }
    }
}

impl Deref for Bytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.v[..self.len]
    }
}

impl DerefMut for Bytes {
    fn deref_mut(&mut self) -> &mut [u8] {
        &mut self.v[..self.len]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_are_reused_by_size_class_and_bounded() {
        // sizes no other test uses (the pool is process-wide)
        let a = Bytes::new(3_000_000);
        assert_eq!(a.len(), 3_000_000);
        let pa = a.as_ptr();
        drop(a);
        // the same class (4 MiB) comes back
        let b = Bytes::new(4_000_000);
        assert_eq!(b.as_ptr(), pa);
        assert_eq!(b.len(), 4_000_000);
        // another is taken while it is in use
        let c = Bytes::new(4_000_000);
        assert_ne!(c.as_ptr(), pa);
        drop((b, c));
        let held = POOL.lock().unwrap().idle[class(4 << 20)].len();
        assert!((1..=PER_CLASS).contains(&held));
        // more than PER_CLASS returned at once: the rest is freed
        let many: Vec<Bytes> = (0..PER_CLASS + 3).map(|_| Bytes::new(600_000)).collect();
        drop(many);
        assert!(POOL.lock().unwrap().idle[class(600_000)].len() <= PER_CLASS);
        let mut t = Bytes::new(10);
        t.truncate(4);
        assert_eq!(t.len(), 4);
        assert_eq!(Bytes::new(0).len(), 0);
    }
}

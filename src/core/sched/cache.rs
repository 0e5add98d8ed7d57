//! Layer: core. May use: platform.
//!
//! A small per-communicator LRU cache of built schedules.
//!
//! The key is everything a schedule depends on besides the buffers: the collective, its
//! counts (all of them for the v/w forms), datatypes, operation, root, and in-place flags.
//! Only calls whose datatypes and operation are predefined are cached: derived datatypes
//! and user operations can be freed and their handles reused for something else, which a
//! key holding the handle could not tell apart.

use std::sync::Arc;

use super::Schedule;
use crate::platform::abi::{MPI_Datatype, MPI_Op};

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Key {
    pub coll: u8,
    /// The algorithm and its parameters (`Choice::pack`).
    pub algo: u64,
    pub root: i32,
    pub flags: u8,
    pub op: MPI_Op,
    pub types: Vec<MPI_Datatype>,
    pub counts: Vec<i64>,
}

pub struct Cache {
    cap: usize,
    /// Most recently used first, each with its key's fingerprint ([`fingerprint`]),
    /// compared before the key: a lookup runs on every cached collective call.
    entries: Vec<(u64, Key, Arc<Schedule>)>,
}

/// `a == b`, without a call to `memcmp` for the (short, often empty) vectors: the lookup
/// runs on every cached collective call, and the library call costs more than the loop.
fn same(a: &Key, b: &Key) -> bool {
    fn eq<T: PartialEq>(x: &[T], y: &[T]) -> bool {
        x.len() == y.len() && x.iter().zip(y).all(|(u, v)| u == v)
    }
    a.coll == b.coll
        && a.algo == b.algo
        && a.root == b.root
        && a.flags == b.flags
        && a.op == b.op
        && eq(&a.types, &b.types)
        && eq(&a.counts, &b.counts)
}

/// A cheap hash of a key (FxHash's rotate-xor-multiply step per word).
fn fingerprint(key: &Key) -> u64 {
    use std::hash::{Hash, Hasher};
    struct Fx(u64);
    impl Hasher for Fx {
        fn finish(&self) -> u64 {
            self.0
        }
        fn write(&mut self, bytes: &[u8]) {
            for &b in bytes {
                self.write_u64(b as u64);
            }
        }
        fn write_u64(&mut self, w: u64) {
            self.0 = (self.0.rotate_left(5) ^ w).wrapping_mul(0x517c_c1b7_2722_0a95);
        }
        fn write_u8(&mut self, w: u8) {
            self.write_u64(w as u64)
        }
        fn write_u32(&mut self, w: u32) {
            self.write_u64(w as u64)
        }
        fn write_i32(&mut self, w: i32) {
            self.write_u64(w as u64)
        }
        fn write_i64(&mut self, w: i64) {
            self.write_u64(w as u64)
        }
        fn write_usize(&mut self, w: usize) {
            self.write_u64(w as u64)
        }
    }
    let mut h = Fx(0);
    key.hash(&mut h);
    h.finish()
}

impl Cache {
    pub fn new(cap: usize) -> Cache {
        Cache {
            cap,
            entries: Vec::new(),
        }
    }

    /// Drops every cached schedule.
    pub fn clear(&mut self) {
        self.entries.clear();
    }

    pub fn get(&mut self, key: &Key) -> Option<Arc<Schedule>> {
        let f = fingerprint(key);
        let i = self
            .entries
            .iter()
            .position(|(g, k, _)| *g == f && same(k, key))?;
        if i > 0 {
            self.entries[..=i].rotate_right(1);
        }
        Some(Arc::clone(&self.entries[0].2))
    }

    pub fn put(&mut self, key: Key, s: Arc<Schedule>) {
        if self.cap == 0 {
            return;
        }
        self.entries.insert(0, (fingerprint(&key), key, s));
        self.entries.truncate(self.cap);
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::sched::Builder;

    fn key(n: i64) -> Key {
        Key {
            coll: 1,
            algo: 0,
            root: 0,
            flags: 0,
            op: 0,
            types: vec![1],
            counts: vec![n],
        }
    }

    #[test]
    fn lru_evicts_least_recent() {
        let mut c = Cache::new(2);
        let s = Arc::new(Builder::new("x").finish());
        c.put(key(1), Arc::clone(&s));
        c.put(key(2), Arc::clone(&s));
        assert!(c.get(&key(1)).is_some()); // 1 is now most recent
        c.put(key(3), Arc::clone(&s));
        assert!(c.get(&key(2)).is_none());
        assert!(c.get(&key(1)).is_some() && c.get(&key(3)).is_some());
        assert_eq!(c.len(), 2);
        let mut off = Cache::new(0);
        off.put(key(1), s);
        assert!(off.is_empty());
    }
}

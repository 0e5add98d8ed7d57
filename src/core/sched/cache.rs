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
    /// Most recently used first.
    entries: Vec<(Key, Arc<Schedule>)>,
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
        let i = self.entries.iter().position(|(k, _)| k == key)?;
        let e = self.entries.remove(i);
        let s = Arc::clone(&e.1);
        self.entries.insert(0, e);
        Some(s)
    }

    pub fn put(&mut self, key: Key, s: Arc<Schedule>) {
        if self.cap == 0 {
            return;
        }
        self.entries.insert(0, (key, s));
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

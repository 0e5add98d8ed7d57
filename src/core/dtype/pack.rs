//! Layer: core. May use: platform.
//!
//! Pack and unpack over flattened layouts, on one or several threads.
//!
//! The packed stream of `count` elements is the type map's bytes in order (MPICH's
//! "native" representation, what `MPI_Pack` writes), so a message packed here matches a
//! receive of any datatype with the same type signature (MPI-4.0 §3.3.1, §5.2).
//! Parallel jobs split the stream by bytes, not by blocks, so a few large blocks and many
//! tiny ones balance alike; each part walks the layout from its first byte. The lowest
//! level (a loop over one run) is a tight index loop with fixed-size copies for the common
//! block sizes (thesis §3.4: dependence-free `dst[i] = src[i * stride]`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use super::flat::{Flat, Node};

/// Direction of a copy between the user's layout and the packed stream.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Dir {
    Pack,
    Unpack,
}

/// Counters for `SHIM_STATS`.
pub static PACKED_BYTES: AtomicU64 = AtomicU64::new(0);
pub static UNPACKED_BYTES: AtomicU64 = AtomicU64::new(0);
pub static CALLS: AtomicU64 = AtomicU64::new(0);
pub static PARALLEL_CALLS: AtomicU64 = AtomicU64::new(0);
pub static TIME_NS: AtomicU64 = AtomicU64::new(0);

/// The packing line of the `SHIM_STATS` report (this rank's datatype engine).
pub fn stats_line() -> String {
    let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
    format!(
        "packing (this rank): {} calls, {} of them on several threads (up to {} of {}), {} bytes packed, {} unpacked, {:.3} ms\n",
        l(&CALLS),
        l(&PARALLEL_CALLS),
        super::pool::MAX_USED.load(Ordering::Relaxed).max(1),
        super::pool::max_threads(),
        l(&PACKED_BYTES),
        l(&UNPACKED_BYTES),
        l(&TIME_NS) as f64 / 1e6
    )
}

/// Raw addresses that may cross threads: the jobs write disjoint byte ranges.
#[derive(Clone, Copy)]
struct Bufs {
    user: *mut u8,
    packed: *mut u8,
}
// SAFETY: parts of one job touch disjoint packed ranges and, for unpack, disjoint user
// bytes (a type map used for receiving must not overlap itself, MPI-4.0 §3.2.2).
unsafe impl Send for Bufs {}
unsafe impl Sync for Bufs {}

/// Copies `count` elements of layout `f` between `user` and `packed` (`count * f.size`
/// bytes), with as many threads as the size warrants.
///
/// # Safety
/// `user` must be valid for the type map of `count` elements, `packed` for
/// `count * f.size` bytes, and they must not overlap.
pub unsafe fn run(f: &Flat, count: i64, user: *mut u8, packed: *mut u8, dir: Dir) {
    // SAFETY: the caller's contract.
    unsafe { run_bytes(f, count, user, packed, count * f.size, dir) }
}

/// Like `run` for the first `total` bytes of the packed stream only (a receive that
/// brought fewer bytes than the buffer holds).
///
/// # Safety
/// As for `run`; `total <= count * f.size`.
pub unsafe fn run_bytes(
    f: &Flat,
    count: i64,
    user: *mut u8,
    packed: *mut u8,
    total: i64,
    dir: Dir,
) {
    // SAFETY: the caller's contract.
    unsafe { run_job(f, count, user, packed, total, dir, 1) }
}

/// Like `run`, with every `swap`-byte unit of the packed stream in reversed byte order:
/// the big-endian "external32" representation (MPI-4.0 §5.2.3, §14.5.2) of types whose
/// basic elements are `swap`-byte integers or IEEE floats (or pairs of them, for complex
/// types). Every leaf copy of the layout walk swaps as it copies; an unpack reads
/// the application's packed bytes and writes swapped units to its buffer: one pass either way.
///
/// # Safety
/// As for `run`; `swap` divides the type size.
pub unsafe fn run_swapped(
    f: &Flat,
    count: i64,
    user: *mut u8,
    packed: *mut u8,
    dir: Dir,
    swap: usize,
) {
    // SAFETY: the caller's contract.
    unsafe { run_job(f, count, user, packed, count * f.size, dir, swap) }
}

unsafe fn run_job(
    f: &Flat,
    count: i64,
    user: *mut u8,
    packed: *mut u8,
    total: i64,
    dir: Dir,
    swap: usize,
) {
    if total <= 0 {
        return;
    }
    let t0 = crate::platform::counters::enabled().then(Instant::now);
    let b = Bufs { user, packed };
    if swap <= 1 && f.contiguous.is_some() {
        // one run from the lower bound, elements back to back: a single copy
        let lb = f.contiguous.unwrap_or(0);
        // SAFETY: the caller's contract; `total` bytes from `user + lb`.
        unsafe { copy_split(user.wrapping_offset(lb as isize), packed, total, dir) };
    } else {
        let node = f.of_count(count);
        let threads = super::pool::threads_for(total);
        if threads > 1 {
            PARALLEL_CALLS.fetch_add(1, Ordering::Relaxed);
            super::pool::MAX_USED.fetch_max(threads, Ordering::Relaxed);
        }
        let (node, contiguous) = (&node, f.contiguous);
        let parts = parts_for(total, threads);
        let unit = swap.max(1) as i64;
        super::pool::run_parts(threads, parts, &move |k| {
            let b = b;
            // part boundaries on whole swap units (`total` is a multiple of the unit)
            let lo = total * k as i64 / parts as i64 / unit * unit;
            let hi = if k + 1 == parts {
                total
            } else {
                total * (k as i64 + 1) / parts as i64 / unit * unit
            };
            // SAFETY: the caller's contract; parts cover disjoint packed ranges.
            unsafe {
                match contiguous {
                    Some(lb) if swap > 1 => {
                        // one run: swap while copying
                        let u = b.user.wrapping_offset((lb + lo) as isize);
                        let p = b.packed.add(lo as usize);
                        let n = (hi - lo) as usize;
                        match dir {
                            Dir::Pack => swap_units(u, p, n, swap),
                            Dir::Unpack => swap_units(p, u, n, swap),
                        }
                    }
                    _ => Walker {
                        b,
                        pos: lo,
                        dir,
                        swap,
                    }
                    .range(node, 0, lo, hi),
                }
            }
        });
    }
    CALLS.fetch_add(1, Ordering::Relaxed);
    match dir {
        Dir::Pack => PACKED_BYTES.fetch_add(total as u64, Ordering::Relaxed),
        Dir::Unpack => UNPACKED_BYTES.fetch_add(total as u64, Ordering::Relaxed),
    };
    if let Some(t0) = t0 {
        TIME_NS.fetch_add(t0.elapsed().as_nanos() as u64, Ordering::Relaxed);
    }
}

/// The integer types a swap unit is moved as.
trait SwapUnit: Copy {
    fn swapped(self) -> Self;
}
macro_rules! swap_unit {
    ($($t:ty),*) => {$(impl SwapUnit for $t {
        #[inline(always)]
        fn swapped(self) -> Self {
            self.swap_bytes()
        }
    })*};
}
swap_unit!(u16, u32, u64);

/// Copies `n` bytes from `src` to `dst` reversing the byte order of every `w`-byte unit;
/// `src == dst` swaps in place.
///
/// # Safety
/// `n` bytes readable at `src` and writable at `dst`, either the same or disjoint; `w`
/// divides `n`.
#[inline]
pub unsafe fn swap_units(src: *const u8, dst: *mut u8, n: usize, w: usize) {
    macro_rules! units {
        ($t:ty) => {{
            let k = core::mem::size_of::<$t>();
            for i in 0..n / k {
                // SAFETY: the caller's contract; unaligned accesses within the n bytes.
                unsafe {
                    let v = (src.add(i * k) as *const $t).read_unaligned();
                    (dst.add(i * k) as *mut $t).write_unaligned(v.swap_bytes());
                }
            }
        }};
    }
    match w {
        2 => units!(u16),
        4 => units!(u32),
        8 => units!(u64),
        16 => units!(u128),
        _ => {
            if !core::ptr::eq(src, dst) {
                // SAFETY: the caller's contract (disjoint).
                unsafe { core::ptr::copy_nonoverlapping(src, dst, n) };
            }
        }
    }
}

/// A contiguous copy, split across threads when large.
unsafe fn copy_split(user: *mut u8, packed: *mut u8, total: i64, dir: Dir) {
    let threads = super::pool::threads_for(total);
    let b = Bufs { user, packed };
    let parts = parts_for(total, threads);
    super::pool::run_parts(threads, parts, &move |k| {
        let b = b;
        let lo = (total * k as i64 / parts as i64) as usize;
        let hi = (total * (k as i64 + 1) / parts as i64) as usize;
        // SAFETY: the caller's contract; disjoint ranges per part.
        unsafe {
            let (s, d) = match dir {
                Dir::Pack => (b.user.add(lo) as *const u8, b.packed.add(lo)),
                Dir::Unpack => (b.packed.add(lo) as *const u8, b.user.add(lo)),
            };
            core::ptr::copy_nonoverlapping(s, d, hi - lo);
        }
    });
}

/// Parts of a job on `threads` threads: up to four per thread, of at least 64 KiB, so a
/// thread that starts late (or runs slower) takes fewer parts instead of delaying the job.
fn parts_for(total: i64, threads: usize) -> usize {
    if threads <= 1 {
        return 1;
    }
    let per_thread = (total / (threads as i64 * (64 << 10))).clamp(1, 4) as usize;
    threads * per_thread
}

struct Walker {
    b: Bufs,
    /// Next packed byte to produce.
    pos: i64,
    dir: Dir,
    /// Byte-swap unit of the packed stream (`run_swapped`); 1: plain copies. Runs hold
    /// whole elements of one basic type, so every run starts on a unit in both buffers.
    swap: usize,
}

impl Walker {
    /// Copies the packed bytes [lo, hi) of `n` (relative to n's own stream), with the
    /// node's offsets relative to `base`.
    unsafe fn range(&mut self, n: &Node, base: i64, lo: i64, hi: i64) {
        if lo >= hi {
            return;
        }
        match n {
            Node::Run { off, .. } => {
                // SAFETY: the caller's contract.
                unsafe { self.copy(base + off + lo, hi - lo) };
            }
            Node::Loop {
                off,
                count,
                stride,
                body,
                bsize,
            } => {
                let base = base + off;
                let last = ((hi - 1) / bsize).min(count - 1);
                let mut k = lo / bsize;
                while k <= last {
                    let s = (lo - k * bsize).max(0);
                    let e = (hi - k * bsize).min(*bsize);
                    if s == 0 && e == *bsize {
                        // whole iterations k..full, as one batch
                        let full = (hi / bsize).min(*count);
                        if let Node::Run { off: o, len } = **body {
                            // SAFETY: as above.
                            unsafe { self.strided(base + k * stride + o, *stride, len, full - k) };
                        } else {
                            for j in k..full {
                                // SAFETY: as above.
                                unsafe { self.range(body, base + j * stride, 0, *bsize) };
                            }
                        }
                        k = full;
                    } else {
                        // SAFETY: as above.
                        unsafe { self.range(body, base + k * stride, s, e) };
                        k += 1;
                    }
                }
            }
            Node::Runs { offs, ends } => {
                let mut i = ends.partition_point(|&e| e <= lo);
                let mut start = if i == 0 { 0 } else { ends[i - 1] };
                if start < lo {
                    // a part of the first run
                    let e = hi.min(ends[i]);
                    // SAFETY: as above.
                    unsafe { self.copy(base + offs[i] + lo - start, e - lo) };
                    start = ends[i];
                    i += 1;
                }
                let j = i + ends[i..].partition_point(|&e| e <= hi);
                // whole runs i..j
                // SAFETY: as above.
                unsafe { self.whole_runs(base, &offs[i..j], &ends[i..j], start) };
                if j < ends.len() {
                    let start = if j == 0 { 0 } else { ends[j - 1] };
                    if start < hi {
                        // SAFETY: as above.
                        unsafe { self.copy(base + offs[j], hi - start) };
                    }
                }
            }
            Node::Seq { parts, ends } => {
                // first part that ends after lo
                let mut i = ends.partition_point(|&e| e <= lo);
                let mut start = if i == 0 { 0 } else { ends[i - 1] };
                // whole runs in the middle: the common case, without the range arithmetic
                if start >= lo {
                    while i < parts.len() && ends[i] <= hi {
                        match &parts[i] {
                            // SAFETY: as above.
                            Node::Run { off, len } => unsafe { self.copy(base + off, *len) },
                            // SAFETY: as above.
                            p => unsafe { self.range(p, base, 0, ends[i] - start) },
                        }
                        start = ends[i];
                        i += 1;
                    }
                }
                while i < parts.len() {
                    let start = if i == 0 { 0 } else { ends[i - 1] };
                    if start >= hi {
                        break;
                    }
                    let s = (lo - start).max(0);
                    let e = (hi - start).min(ends[i] - start);
                    match &parts[i] {
                        // runs inline: indexed and struct types are long lists of them
                        // SAFETY: as above.
                        Node::Run { off, .. } => unsafe { self.copy(base + off + s, e - s) },
                        // SAFETY: as above.
                        p => unsafe { self.range(p, base, s, e) },
                    }
                    i += 1;
                }
            }
        }
    }

    #[inline(always)]
    unsafe fn copy(&mut self, user_off: i64, len: i64) {
        // SAFETY: the caller's contract: the type map covers these bytes.
        unsafe {
            let u = self.b.user.wrapping_offset(user_off as isize);
            let p = self.b.packed.add(self.pos as usize);
            match (self.dir, self.swap > 1) {
                (Dir::Pack, false) => small_copy(u, p, len as usize),
                (Dir::Unpack, false) => small_copy(p, u, len as usize),
                (Dir::Pack, true) => swap_units(u, p, len as usize, self.swap),
                (Dir::Unpack, true) => swap_units(p, u, len as usize, self.swap),
            }
        }
        self.pos += len;
    }

    /// Whole runs of a `Runs` node (`start`: the packed offset of the first): one loop per
    /// direction, so the per-run work is two loads and a short copy.
    #[inline]
    unsafe fn whole_runs(&mut self, base: i64, offs: &[i64], ends: &[i64], start: i64) {
        if self.swap > 1 {
            // SAFETY: the caller's contract.
            return unsafe { self.whole_runs_swapped(base, offs, ends, start) };
        }
        let u = self.b.user.wrapping_offset(base as isize);
        let p = self.b.packed.wrapping_offset((self.pos - start) as isize);
        let mut s = start;
        // SAFETY: the caller's contract: the runs are in the type map, their packed bytes
        // in the buffer.
        unsafe {
            match self.dir {
                Dir::Pack => {
                    for (&o, &e) in offs.iter().zip(ends) {
                        small_copy(
                            u.wrapping_offset(o as isize),
                            p.add(s as usize),
                            (e - s) as usize,
                        );
                        s = e;
                    }
                }
                Dir::Unpack => {
                    for (&o, &e) in offs.iter().zip(ends) {
                        small_copy(
                            p.add(s as usize),
                            u.wrapping_offset(o as isize),
                            (e - s) as usize,
                        );
                        s = e;
                    }
                }
            }
        }
        self.pos += s - start;
    }

    /// `whole_runs` with swapped units (external32), out of line so the plain loop stays
    /// as tight as before.
    #[inline(never)]
    unsafe fn whole_runs_swapped(&mut self, base: i64, offs: &[i64], ends: &[i64], start: i64) {
        let u = self.b.user.wrapping_offset(base as isize);
        let p = self.b.packed.wrapping_offset((self.pos - start) as isize);
        let mut s = start;
        for (&o, &e) in offs.iter().zip(ends) {
            let (uo, n) = (u.wrapping_offset(o as isize), (e - s) as usize);
            // SAFETY: the caller's contract: the runs are in the type map, their packed bytes in the buffer.
            unsafe {
                match self.dir {
                    Dir::Pack => swap_units(uo, p.add(s as usize), n, self.swap),
                    Dir::Unpack => swap_units(p.add(s as usize), uo, n, self.swap),
                }
            }
            s = e;
        }
        self.pos += s - start;
    }

    /// `strided` with swapped units (external32), out of line.
    #[inline(never)]
    unsafe fn strided_swapped(&mut self, u: *mut u8, p: *mut u8, stride: i64, len: i64, n: i64) {
        // SAFETY: the caller's contract; blocks of one unit each get a fixed-size kernel
        unsafe {
            match (len as usize == self.swap, len) {
                (true, 2) => return self.swapped_kernel::<u16>(u, p, stride, n),
                (true, 4) => return self.swapped_kernel::<u32>(u, p, stride, n),
                (true, 8) => return self.swapped_kernel::<u64>(u, p, stride, n),
                _ => {}
            }
        }
        for i in 0..n {
            let ui = u.wrapping_offset((i * stride) as isize);
            // SAFETY: the caller's contract, block by block.
            unsafe {
                let pi = p.add((i * len) as usize);
                match self.dir {
                    Dir::Pack => swap_units(ui, pi, len as usize, self.swap),
                    Dir::Unpack => swap_units(pi, ui, len as usize, self.swap),
                }
            }
        }
        self.pos += len * n;
    }

    /// `n` single units of type `T`, `stride` apart, byte-swapped as they are copied.
    #[inline(always)]
    unsafe fn swapped_kernel<T: SwapUnit>(&mut self, u: *mut u8, p: *mut u8, stride: i64, n: i64) {
        let k = core::mem::size_of::<T>();
        let (mut us, mut ps) = (u, p);
        let end = p.wrapping_add(n.max(0) as usize * k);
        // SAFETY: the caller's contract: n units, stride apart, and n * k packed bytes
        // (pointer bumps as in `kernel`).
        unsafe {
            match self.dir {
                Dir::Pack => {
                    while ps != end {
                        let v = (us as *const T).read_unaligned();
                        (ps as *mut T).write_unaligned(v.swapped());
                        us = us.wrapping_offset(stride as isize);
                        ps = ps.add(k);
                    }
                }
                Dir::Unpack => {
                    while ps != end {
                        let v = (ps as *const T).read_unaligned();
                        (us as *mut T).write_unaligned(v.swapped());
                        us = us.wrapping_offset(stride as isize);
                        ps = ps.add(k);
                    }
                }
            }
        }
        self.pos += k as i64 * n;
    }

    /// `n` runs of `len` bytes, `stride` apart, from user offset `off`.
    #[inline]
    unsafe fn strided(&mut self, off: i64, stride: i64, len: i64, n: i64) {
        let u = self.b.user.wrapping_offset(off as isize);
        // SAFETY: the caller's contract.
        let p = unsafe { self.b.packed.add(self.pos as usize) };
        if self.swap > 1 {
            // SAFETY: the caller's contract.
            return unsafe { self.strided_swapped(u, p, stride, len, n) };
        }
        // SAFETY: as above, for each of the fixed-size kernels.
        unsafe {
            match len {
                1 => kernel::<1>(u, p, stride, n, self.dir),
                2 => kernel::<2>(u, p, stride, n, self.dir),
                4 => kernel::<4>(u, p, stride, n, self.dir),
                8 => kernel::<8>(u, p, stride, n, self.dir),
                12 => kernel::<12>(u, p, stride, n, self.dir),
                16 => kernel::<16>(u, p, stride, n, self.dir),
                24 => kernel::<24>(u, p, stride, n, self.dir),
                32 => kernel::<32>(u, p, stride, n, self.dir),
                64 => kernel::<64>(u, p, stride, n, self.dir),
                _ => {
                    for i in 0..n {
                        let ui = u.wrapping_offset((i * stride) as isize);
                        let pi = p.add((i * len) as usize);
                        match self.dir {
                            Dir::Pack => core::ptr::copy_nonoverlapping(ui, pi, len as usize),
                            Dir::Unpack => core::ptr::copy_nonoverlapping(pi, ui, len as usize),
                        }
                    }
                }
            }
        }
        self.pos += len * n;
    }
}

/// A copy of a few bytes without a call to `memcpy`: two overlapping fixed-size moves
/// cover any length between one size and twice it.
#[inline(always)]
unsafe fn small_copy(s: *const u8, d: *mut u8, n: usize) {
    // SAFETY: the caller's contract: n bytes readable at s, writable at d, no overlap.
    unsafe {
        if n > 64 {
            core::ptr::copy_nonoverlapping(s, d, n);
        } else if n >= 32 {
            let a = (s as *const [u8; 32]).read_unaligned();
            let b = (s.add(n - 32) as *const [u8; 32]).read_unaligned();
            (d as *mut [u8; 32]).write_unaligned(a);
            (d.add(n - 32) as *mut [u8; 32]).write_unaligned(b);
        } else if n >= 16 {
            let a = (s as *const [u8; 16]).read_unaligned();
            let b = (s.add(n - 16) as *const [u8; 16]).read_unaligned();
            (d as *mut [u8; 16]).write_unaligned(a);
            (d.add(n - 16) as *mut [u8; 16]).write_unaligned(b);
        } else if n >= 8 {
            let a = (s as *const u64).read_unaligned();
            let b = (s.add(n - 8) as *const u64).read_unaligned();
            (d as *mut u64).write_unaligned(a);
            (d.add(n - 8) as *mut u64).write_unaligned(b);
        } else if n >= 4 {
            let a = (s as *const u32).read_unaligned();
            let b = (s.add(n - 4) as *const u32).read_unaligned();
            (d as *mut u32).write_unaligned(a);
            (d.add(n - 4) as *mut u32).write_unaligned(b);
        } else {
            for i in 0..n {
                *d.add(i) = *s.add(i);
            }
        }
    }
}

/// `n` blocks of `L` bytes: constant-size copies the compiler turns into plain moves.
#[inline(always)]
unsafe fn kernel<const L: usize>(u: *mut u8, p: *mut u8, stride: i64, n: i64, dir: Dir) {
    // Both sides advance by pointer bumps, so every access is a plain base address: an
    // indexed store (`mov %r, (base,i,8)`) costs the 8-byte vector pack about 20% here.
    let (mut us, mut ps) = (u, p);
    let end = p.wrapping_add(n.max(0) as usize * L);
    // SAFETY: the caller's contract: n blocks of L bytes, stride apart, and n * L packed.
    unsafe {
        match dir {
            Dir::Pack => {
                while ps != end {
                    (ps as *mut [u8; L]).write_unaligned((us as *const [u8; L]).read_unaligned());
                    us = us.wrapping_offset(stride as isize);
                    ps = ps.add(L);
                }
            }
            Dir::Unpack => {
                while ps != end {
                    (us as *mut [u8; L]).write_unaligned((ps as *const [u8; L]).read_unaligned());
                    us = us.wrapping_offset(stride as isize);
                    ps = ps.add(L);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::flat::{repeat, seq};
    use super::*;

    fn reference(n: &Node, user: &[u8], out: &mut Vec<u8>) {
        let mut runs = Vec::new();
        super::super::flat::tests::collect(n, 0, &mut runs);
        for (off, len) in runs {
            out.extend_from_slice(&user[off as usize..(off + len) as usize]);
        }
    }

    /// Every sub-range of the stream, packed on its own, equals the same bytes of the
    /// whole: what parallel parts rely on.
    #[test]
    fn ranges_match_reference() {
        let r = |off, len| Node::Run { off, len };
        let inner = repeat(3, 3, 7, r(0, 2));
        let runs = seq(vec![r(5, 3), r(10, 1), r(12, 9), r(30, 2)]);
        assert!(matches!(runs, Node::Runs { .. }));
        let mixed = seq(vec![
            r(0, 3),
            repeat(40, 4, 30, inner),
            r(200, 5),
            repeat(210, 5, 9, r(1, 8)),
            runs.shifted(300),
        ]);
        for t in [
            mixed,
            runs,
            repeat(0, 3, 40, seq(vec![r(0, 3), r(7, 9), r(20, 1)])),
        ] {
            check_ranges(&t);
        }
    }

    fn check_ranges(t: &Node) {
        let user: Vec<u8> = (0..400).map(|i| (i * 7 + 3) as u8).collect();
        let mut want = Vec::new();
        reference(t, &user, &mut want);
        let total = t.size();
        assert_eq!(want.len() as i64, total);
        for lo in 0..total {
            for hi in lo..=total {
                let mut got = vec![0u8; total as usize];
                let mut w = Walker {
                    b: Bufs {
                        user: user.as_ptr() as *mut u8,
                        packed: got.as_mut_ptr(),
                    },
                    pos: lo,
                    dir: Dir::Pack,
                    swap: 1,
                };
                unsafe { w.range(t, 0, lo, hi) };
                assert_eq!(w.pos, hi);
                assert_eq!(
                    &got[lo as usize..hi as usize],
                    &want[lo as usize..hi as usize],
                    "{lo}..{hi}"
                );
            }
        }
    }

    /// Swapped walks (external32): every unit-aligned sub-range, packed on its own with
    /// 4-byte units (all four leaf kinds: long runs, strided blocks, compact run lists,
    /// contiguous), equals the reference stream with every unit reversed; unpacking it
    /// gives the user bytes back.
    #[test]
    fn swapped_ranges_reverse_units() {
        let r = |off, len| Node::Run { off, len };
        let runs = seq(vec![r(4, 8), r(16, 4), r(24, 12), r(40, 4)]);
        assert!(matches!(runs, Node::Runs { .. }));
        let t = seq(vec![
            r(0, 4),
            repeat(100, 6, 12, r(0, 4)),
            repeat(200, 3, 20, r(0, 8)),
            runs.shifted(300),
            r(400, 96),
        ]);
        let user: Vec<u8> = (0..600).map(|i| (i * 7 + 3) as u8).collect();
        let mut want = Vec::new();
        reference(&t, &user, &mut want);
        for u in want.chunks_mut(4) {
            u.reverse();
        }
        let total = t.size();
        for lo in (0..total).step_by(4) {
            for hi in (lo..=total).step_by(4) {
                let mut got = vec![0u8; total as usize];
                let b = Bufs {
                    user: user.as_ptr() as *mut u8,
                    packed: got.as_mut_ptr(),
                };
                let mut w = Walker {
                    b,
                    pos: lo,
                    dir: Dir::Pack,
                    swap: 4,
                };
                unsafe { w.range(&t, 0, lo, hi) };
                assert_eq!(
                    &got[lo as usize..hi as usize],
                    &want[lo as usize..hi as usize],
                    "{lo}..{hi}"
                );
            }
        }
        let mut back = vec![0u8; 600];
        let b = Bufs {
            user: back.as_mut_ptr(),
            packed: want.as_mut_ptr(),
        };
        let mut w = Walker {
            b,
            pos: 0,
            dir: Dir::Unpack,
            swap: 4,
        };
        unsafe { w.range(&t, 0, 0, total) };
        let mut want_user = Vec::new();
        reference(&t, &back, &mut want_user);
        let mut orig = Vec::new();
        reference(&t, &user, &mut orig);
        assert_eq!(want_user, orig);
    }
}

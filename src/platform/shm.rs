//! Layer: platform. May use: nothing.
//!
//! The system calls under the node transport: POSIX shared-memory segments, cross-memory
//! attach (CMA, `process_vm_readv`/`process_vm_writev`). Nothing here
//! knows MPI.
//!
//! A segment is created exclusively (`O_CREAT | O_EXCL`, mode 0600) under a name that cannot
//! be guessed (128 random bits), its pages are reserved at once (`posix_fallocate`, so a full
//! `/dev/shm` is an error here, not a `SIGBUS` at the first store), and the creator unlinks
//! the name as soon as every peer has mapped it: from then on the memory lives only as long
//! as some process maps it, so a `kill -9` of any rank leaves nothing behind in `/dev/shm`.
//! Between creation and that unlink a crash of the creator would leave the file; the window
//! is one exchange of the name (the caller unlinks on every error path it sees).

use std::ffi::CString;
use std::io;
use std::ptr::NonNull;

/// A mapped shared-memory segment. Unmapped on drop; the name is not unlinked by drop (the
/// creator calls [`unlink`] once every peer has mapped it).
#[derive(Debug)]
pub struct Segment {
    base: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is plain memory shared between processes; every access to its
// contents goes through atomics or through the caller's own synchronization.
unsafe impl Send for Segment {}
// SAFETY: as above: `&Segment` hands out only the base address and the length.
unsafe impl Sync for Segment {}

impl Segment {
    /// Creates and maps a new segment of `len` bytes (zero-filled) under a fresh unguessable
    /// name, returned with it. `prefix` names the owner in `/dev/shm` listings.
    pub fn create(prefix: &str, len: usize) -> io::Result<(Segment, String)> {
        let mut last = io::Error::from(io::ErrorKind::AlreadyExists);
        // a collision of 128 random bits means the random source is broken: give up soon
        for _ in 0..4 {
            let name = format!("/{prefix}-{}-{:032x}", std::process::id(), random_u128()?);
            match create_named(&name, len) {
                Ok(seg) => return Ok((seg, name)),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => last = e,
                Err(e) => return Err(e),
            }
        }
        Err(last)
    }

    /// Maps the first `len` bytes of the segment another process created under `name`
    /// (it must have at least that many).
    pub fn open(name: &str, len: usize) -> io::Result<Segment> {
        let c = CString::new(name).map_err(io::Error::other)?;
        // SAFETY: a valid NUL-terminated name.
        let fd = unsafe { libc::shm_open(c.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC, 0) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        map_existing(fd, len, name)
    }

    /// Creates and maps a new anonymous segment of `len` bytes (zero-filled): a `memfd`,
    /// which has no name anywhere, so no crash at any moment can leave it behind. Peers map
    /// it through the returned descriptor ([`Segment::open_peer`]); the creator closes the
    /// descriptor once they have (the mappings keep the memory).
    pub fn create_anonymous(tag: &str, len: usize) -> io::Result<(Segment, std::os::fd::OwnedFd)> {
        use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
        if len == 0 {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "empty segment"));
        }
        let c = CString::new(tag).map_err(io::Error::other)?;
        // SAFETY: a valid NUL-terminated name (a label for /proc listings only).
        let fd = unsafe { libc::memfd_create(c.as_ptr(), libc::MFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a fresh descriptor we own.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        reserve(fd.as_raw_fd(), len)?;
        let base = map(fd.as_raw_fd(), len)?;
        Ok((Segment { base, len }, fd))
    }

    /// Maps the first `len` bytes of the anonymous segment that process `pid` holds open as
    /// descriptor `fd` (through `/proc/<pid>/fd/<fd>`, which the kernel allows under the
    /// same ptrace rule as CMA).
    pub fn open_peer(pid: libc::pid_t, fd: i32, len: usize) -> io::Result<Segment> {
        let path = format!("/proc/{pid}/fd/{fd}");
        let c = CString::new(path.as_str()).map_err(io::Error::other)?;
        // SAFETY: a valid NUL-terminated path.
        let f = unsafe { libc::open(c.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
        if f < 0 {
            return Err(io::Error::last_os_error());
        }
        map_existing(f, len, &path)
    }

    /// Maps the first `len` bytes of a segment by where another process of the node said
    /// it is: a [`peer_location`] (an anonymous segment) or a POSIX shared-memory name.
    pub fn open_location(location: &str, len: usize) -> io::Result<Segment> {
        match parse_peer_location(location) {
            Some((pid, fd)) => Segment::open_peer(pid, fd, len),
            None => Segment::open(location, len),
        }
    }

    /// Gives up ownership of the mapping: the caller unmaps it with [`unmap`].
    pub fn into_raw(self) -> *mut u8 {
        let p = self.base.as_ptr();
        std::mem::forget(self);
        p
    }

    pub fn as_ptr(&self) -> *mut u8 {
        self.base.as_ptr()
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Drop for Segment {
    fn drop(&mut self) {
        // SAFETY: our own mapping, no longer referenced (the owner drops it last).
        unsafe { libc::munmap(self.base.as_ptr().cast(), self.len) };
    }
}

/// Creates and maps a segment of `len` bytes (zero-filled) under `name`, exclusively: an
/// existing object of that name is an error (`AlreadyExists`), never reused. A segment that
/// cannot be sized or mapped is unlinked again.
pub fn create_named(name: &str, len: usize) -> io::Result<Segment> {
    if len == 0 {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "empty segment"));
    }
    let c = CString::new(name).map_err(io::Error::other)?;
    // SAFETY: a valid NUL-terminated name.
    let fd = unsafe {
        libc::shm_open(
            c.as_ptr(),
            libc::O_CREAT | libc::O_EXCL | libc::O_RDWR | libc::O_CLOEXEC,
            0o600,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    let r = reserve(fd, len).and_then(|()| map(fd, len));
    // SAFETY: our descriptor; the mapping (if any) keeps the memory.
    unsafe { libc::close(fd) };
    match r {
        Ok(base) => Ok(Segment { base, len }),
        Err(e) => {
            let _ = unlink(name);
            Err(e)
        }
    }
}

/// Where another process of the node finds the anonymous segment that process `pid` holds
/// open as descriptor `fd` ([`Segment::open_location`]).
pub fn peer_location(pid: libc::pid_t, fd: i32) -> String {
    format!("/proc/{pid}/fd/{fd}")
}

fn parse_peer_location(location: &str) -> Option<(libc::pid_t, i32)> {
    let rest = location.strip_prefix("/proc/")?;
    let (pid, fd) = rest.split_once("/fd/")?;
    Some((pid.parse().ok()?, fd.parse().ok()?))
}

/// Unmaps a mapping given up by [`Segment::into_raw`].
///
/// # Safety
/// `ptr` and `len` are those of one such mapping, which nothing uses any more.
pub unsafe fn unmap(ptr: *mut u8, len: usize) {
    // SAFETY: as the caller guarantees.
    unsafe { libc::munmap(ptr.cast(), len) };
}

/// Removes a segment's name (its memory stays while mapped).
pub fn unlink(name: &str) -> io::Result<()> {
    let c = CString::new(name).map_err(io::Error::other)?;
    // SAFETY: a valid NUL-terminated name.
    if unsafe { libc::shm_unlink(c.as_ptr()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Bytes free for unprivileged use on the file system that backs POSIX shared memory.
pub fn shm_free_bytes() -> io::Result<u64> {
    let c = CString::new("/dev/shm").map_err(io::Error::other)?;
    // SAFETY: a zeroed statvfs is a valid out-value.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: a valid path and out-pointer.
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(st.f_bavail as u64 * st.f_frsize as u64)
}

/// Maps the first `len` bytes of an existing object opened as `fd` (closed here), which must
/// have at least that many.
fn map_existing(fd: i32, len: usize, what: &str) -> io::Result<Segment> {
    // SAFETY: a zeroed stat is a valid out-value; our descriptor.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    let r = if unsafe { libc::fstat(fd, &mut st) } != 0 {
        Err(io::Error::last_os_error())
    } else if (st.st_size as u64) < len as u64 {
        Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("segment {what} has {} bytes, expected {len}", st.st_size),
        ))
    } else {
        map(fd, len)
    };
    // SAFETY: our descriptor; the mapping keeps the memory.
    unsafe { libc::close(fd) };
    r.map(|base| Segment { base, len })
}

fn reserve(fd: i32, len: usize) -> io::Result<()> {
    // SAFETY: our descriptor.
    if unsafe { libc::ftruncate(fd, len as libc::off_t) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // posix_fallocate returns the error number instead of setting errno
    // SAFETY: our descriptor.
    match unsafe { libc::posix_fallocate(fd, 0, len as libc::off_t) } {
        0 => Ok(()),
        // file systems without fallocate: the pages come at first touch
        libc::EOPNOTSUPP | libc::EINVAL => Ok(()),
        e => Err(io::Error::from_raw_os_error(e)),
    }
}

fn map(fd: i32, len: usize) -> io::Result<NonNull<u8>> {
    // SAFETY: a fresh shared mapping of our descriptor; nothing else at that address.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    NonNull::new(p.cast()).ok_or_else(|| io::Error::other("mmap returned NULL"))
}

fn random_u128() -> io::Result<u128> {
    let mut b = [0u8; 16];
    random_bytes(&mut b)?;
    Ok(u128::from_ne_bytes(b))
}

/// Fills `buf` from the kernel's random source (`getrandom`), retrying after signals.
pub fn random_bytes(buf: &mut [u8]) -> io::Result<()> {
    let mut got = 0;
    while got < buf.len() {
        // SAFETY: writes at most the rest of `buf`.
        let n = unsafe { libc::getrandom(buf[got..].as_mut_ptr().cast(), buf.len() - got, 0) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        got += n as usize;
    }
    Ok(())
}

/// The largest byte count one `process_vm_*` call moves per iovec element: the kernel caps a
/// single transfer at `MAX_RW_COUNT` (`INT_MAX` rounded down to a page).
const CMA_MAX: usize = 0x7fff_f000;

/// Which way a CMA transfer goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cma {
    /// `process_vm_readv`: from the peer's memory into ours.
    Read,
    /// `process_vm_writev`: from ours into the peer's.
    Write,
}

/// Moves `len` bytes between `local` (this process) and `remote` (an address in process
/// `pid`) with one copy, splitting at the kernel's per-call cap and resuming after partial
/// transfers.
///
/// # Safety
/// `local` must be valid for `len` bytes (writable for [`Cma::Read`]); `remote` is checked
/// by the kernel (`EFAULT`), not by us.
pub unsafe fn cma(
    dir: Cma,
    pid: libc::pid_t,
    local: *mut u8,
    remote: usize,
    len: usize,
) -> io::Result<()> {
    let mut done = 0usize;
    while done < len {
        let n = (len - done).min(CMA_MAX);
        let l = libc::iovec {
            // SAFETY: within the caller's `len` bytes.
            iov_base: unsafe { local.add(done) }.cast(),
            iov_len: n,
        };
        let r = libc::iovec {
            iov_base: (remote + done) as *mut libc::c_void,
            iov_len: n,
        };
        // SAFETY: one local and one remote iovec, as the caller guarantees.
        let got = unsafe {
            match dir {
                Cma::Read => libc::process_vm_readv(pid, &l, 1, &r, 1, 0),
                Cma::Write => libc::process_vm_writev(pid, &l, 1, &r, 1, 0),
            }
        };
        if got < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if got == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "process_vm transfer moved nothing",
            ));
        }
        done += got as usize;
    }
    Ok(())
}

/// Whether this process may read `pid`'s memory with CMA: one real one-byte read of
/// `remote`, a byte the peer says it owns (the ptrace policy, Yama's `ptrace_scope`, seccomp
/// and namespaces all decide, so only trying tells).
pub fn cma_probe(pid: libc::pid_t, remote: usize) -> io::Result<()> {
    let mut b = 0u8;
    // SAFETY: one writable local byte.
    unsafe { cma(Cma::Read, pid, &mut b, remote, 1) }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn in_dev_shm(name: &str) -> bool {
        std::path::Path::new("/dev/shm").join(&name[1..]).exists()
    }

    #[test]
    fn a_segment_is_shared_between_mappings_and_its_name_goes_with_unlink() {
        let (a, name) = Segment::create("shimtest", 8192).unwrap();
        assert!(name.starts_with("/shimtest-") && name.len() > 40, "{name}");
        assert!(in_dev_shm(&name));
        let b = Segment::open(&name, 8192).unwrap();
        // SAFETY: both map 8192 bytes of the same segment.
        unsafe {
            assert_eq!(*b.as_ptr().add(4000), 0, "zero-filled");
            *a.as_ptr().add(4000) = 42;
            assert_eq!(*b.as_ptr().add(4000), 42);
        }
        unlink(&name).unwrap();
        assert!(!in_dev_shm(&name));
        // the memory outlives the name while mapped
        // SAFETY: still mapped.
        unsafe { assert_eq!(*a.as_ptr().add(4000), 42) };
        assert!(Segment::open(&name, 8192).is_err());
    }

    #[test]
    fn opening_too_much_or_an_unknown_name_and_creating_an_existing_one_fail() {
        let (_a, name) = Segment::create("shimtest", 4096).unwrap();
        let e = Segment::open(&name, 8192).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
        // a prefix of it maps
        assert_eq!(Segment::open(&name, 100).unwrap().len(), 100);
        let e = create_named(&name, 4096).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::AlreadyExists, "never reused");
        unlink(&name).unwrap();
        assert!(Segment::open("/shimtest-none-0", 4096).is_err());
        assert!(Segment::create("shimtest", 0).is_err());
    }

    #[test]
    fn names_are_never_reused() {
        let (_a, n1) = Segment::create("shimtest", 4096).unwrap();
        let (_b, n2) = Segment::create("shimtest", 4096).unwrap();
        assert_ne!(n1, n2);
        unlink(&n1).unwrap();
        unlink(&n2).unwrap();
    }

    #[test]
    fn cma_reads_and_writes_this_process_own_memory() {
        // our own pid always passes the ptrace check
        let pid = std::process::id() as libc::pid_t;
        let src: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
        let mut dst = vec![0u8; src.len()];
        // SAFETY: both buffers hold 10,000 bytes.
        unsafe {
            cma(
                Cma::Read,
                pid,
                dst.as_mut_ptr(),
                src.as_ptr() as usize,
                src.len(),
            )
        }
        .unwrap();
        assert_eq!(dst, src);
        let mut back = vec![0u8; src.len()];
        let mut from = src.clone();
        // SAFETY: as above.
        unsafe {
            cma(
                Cma::Write,
                pid,
                from.as_mut_ptr(),
                back.as_mut_ptr() as usize,
                src.len(),
            )
        }
        .unwrap();
        assert_eq!(back, src);
        cma_probe(pid, src.as_ptr() as usize).unwrap();
        // an unmapped remote address is the kernel's EFAULT, not a crash
        assert!(cma_probe(pid, 8).is_err());
    }

    #[test]
    fn an_anonymous_segment_is_mapped_again_through_its_location() {
        let (seg, fd) = Segment::create_anonymous("shimtest-loc", 4096).unwrap();
        use std::os::fd::AsRawFd;
        let loc = peer_location(std::process::id() as libc::pid_t, fd.as_raw_fd());
        assert_eq!(
            parse_peer_location(&loc),
            Some((std::process::id() as libc::pid_t, fd.as_raw_fd()))
        );
        let other = Segment::open_location(&loc, 4096).unwrap();
        // SAFETY: both mappings are 4096 bytes of the same memory, used by this thread only.
        unsafe {
            seg.as_ptr().add(100).write(42);
            assert_eq!(other.as_ptr().add(100).read(), 42);
        }
        assert!(Segment::open_location(&loc, 8192).is_err());
        drop(fd);
        // the descriptor is gone: nothing names the memory any more, the mappings keep it
        assert!(Segment::open_location(&loc, 4096).is_err());
        // SAFETY: as above.
        unsafe { assert_eq!(other.as_ptr().add(100).read(), 42) };
        for bad in [
            "/shim-1-2-3",
            "/proc/x/fd/1",
            "/proc/1/fd/",
            "/proc/1/fdx/2",
        ] {
            assert_eq!(parse_peer_location(bad), None, "{bad}");
        }
    }

    #[test]
    fn free_space_of_dev_shm_is_known() {
        assert!(shm_free_bytes().unwrap() > 0);
    }
}

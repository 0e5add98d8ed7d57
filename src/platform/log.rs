//! Layer: platform. May use: nothing.
//!
//! Logging through `tracing`, filtered by `SHIM_LOG`, every line prefixed with the rank.
//!
//! The subscriber is installed at `MPI_Init*` (never in a library constructor: the shim
//! may be preloaded into `mpirun` itself, where it must do nothing).

use std::fmt::Write as _;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};

use tracing::{Event, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields, MakeWriter};
use tracing_subscriber::registry::LookupSpan;

static RANK: AtomicI32 = AtomicI32::new(-1);
static TO_FILE: AtomicBool = AtomicBool::new(false);

/// Whether log lines go to a file (`SHIM_LOG_FILE`) rather than stderr.
pub fn to_file() -> bool {
    TO_FILE.load(Ordering::Relaxed)
}

pub fn set_rank(rank: i32) {
    RANK.store(rank, Ordering::Relaxed);
}

pub fn rank() -> i32 {
    RANK.load(Ordering::Relaxed)
}

/// `[shim r3]`, or `[shim pid 1234]` before the rank is known.
pub fn prefix() -> String {
    match rank() {
        r if r >= 0 => format!("[shim r{r}]"),
        _ => format!("[shim pid {}]", std::process::id()),
    }
}

/// Writes straight to fd 2 (usable in any state, even from a panic path).
pub fn raw_stderr(msg: &str) {
    let mut b = msg.as_bytes();
    while !b.is_empty() {
        // SAFETY: writing an initialized byte slice to fd 2.
        let n = unsafe { libc::write(2, b.as_ptr().cast(), b.len()) };
        if n <= 0 {
            break;
        }
        b = &b[n as usize..];
    }
}

struct RankFormat;

impl<S, N> FormatEvent<S, N> for RankFormat
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut w: Writer<'_>,
        ev: &Event<'_>,
    ) -> std::fmt::Result {
        let m = ev.metadata();
        write!(w, "{} {:<5} {}: ", prefix(), m.level(), m.target())?;
        ctx.field_format().format_fields(w.by_ref(), ev)?;
        writeln!(w)
    }
}

/// Sink for log lines: stderr, or the file of `SHIM_LOG_FILE`.
enum Sink {
    Stderr,
    File(Mutex<std::fs::File>),
}

struct SinkWriter<'a>(&'a Sink);

impl std::io::Write for SinkWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self.0 {
            Sink::Stderr => {
                raw_stderr(&String::from_utf8_lossy(buf));
                Ok(buf.len())
            }
            Sink::File(f) => f.lock().unwrap_or_else(|e| e.into_inner()).write(buf),
        }
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

struct MakeSink(Sink);

impl<'a> MakeWriter<'a> for MakeSink {
    type Writer = SinkWriter<'a>;
    fn make_writer(&'a self) -> Self::Writer {
        SinkWriter(&self.0)
    }
}

/// Expands `%r` (rank) and `%p` (pid) in a log file template.
pub fn expand_path(template: &str, rank: i32) -> String {
    let mut s = String::new();
    let mut it = template.chars().peekable();
    while let Some(c) = it.next() {
        if c == '%' {
            match it.peek() {
                Some('r') => {
                    it.next();
                    let _ = write!(s, "{rank}");
                    continue;
                }
                Some('p') => {
                    it.next();
                    let _ = write!(s, "{}", std::process::id());
                    continue;
                }
                _ => {}
            }
        }
        s.push(c);
    }
    s
}

/// Installs the subscriber for this process (once).
pub fn init(filter: &str, file: Option<&str>, rank: i32) {
    set_rank(rank);
    let sink = match file {
        Some(t) => {
            let path = expand_path(t, rank);
            match std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&path)
            {
                Ok(f) => Sink::File(Mutex::new(f)),
                Err(e) => {
                    raw_stderr(&format!(
                        "{} cannot open SHIM_LOG_FILE {path}: {e}; logging to stderr\n",
                        prefix()
                    ));
                    Sink::Stderr
                }
            }
        }
        None => Sink::Stderr,
    };
    let filter = tracing_subscriber::EnvFilter::try_new(filter)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let sub = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(MakeSink(sink))
        .event_format(RankFormat)
        .finish();
    let _ = tracing::subscriber::set_global_default(sub);
}

#[cfg(test)]
mod tests {
    #[test]
    fn expand() {
        assert_eq!(super::expand_path("/tmp/log.%r.txt", 3), "/tmp/log.3.txt");
        assert_eq!(super::expand_path("a%%b%x", 0), "a%%b%x");
        assert!(super::expand_path("p%p", 0).starts_with('p'));
    }
}

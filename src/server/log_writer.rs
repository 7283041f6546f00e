//! Log lines written in batches.
//!
//! The guard logs one ledger line per decision. Written straight to stderr, each line is a
//! `write` system call on the request's path, which cost a busy guard a tenth of its time
//! (BENCHMARKS.md). Here lines are appended to a buffer that a background thread writes out
//! [`FLUSH_INTERVAL`] after the first line arrives, so a busy guard makes one call per batch;
//! a line waits at most that long, like zap's `BufferedWriteSyncer`. Memory is bounded: a line
//! that fills the buffer past [`BUFFER_LIMIT`] writes the batch out itself. Each batch is
//! collected in a buffer allocated at its full size, so that a busy guard neither copies the
//! batch as it grows (a buffer grown by doubling copies every line twice more) nor cycles more
//! memory through the processor's caches than one batch (BENCHMARKS.md). The buffer is written
//! out when the [`Flush`] guard drops (the end of `serve`, or unwinding from a panic); only a
//! process killed outright loses the lines of its last interval (its decisions are also in the
//! API server's audit log, as audit annotations).

use std::io::Write;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

/// How long a line may wait in the buffer.
pub const FLUSH_INTERVAL: Duration = Duration::from_millis(50);

/// The buffer's size at which a writer writes the batch out itself.
pub const BUFFER_LIMIT: usize = 64 * 1024;

/// The capacity a batch's buffer is allocated with: the limit and room for the line that
/// crosses it (a longer line grows the buffer once).
const BUFFER_CAPACITY: usize = BUFFER_LIMIT + 16 * 1024;

/// A `MakeWriter` for tracing-subscriber whose lines reach `out` in batches.
#[derive(Clone)]
pub struct BatchedWriter {
    shared: Arc<Shared>,
}

struct Shared {
    buffer: Mutex<Vec<u8>>,
    /// Signalled when the buffer stops being empty.
    filled: Condvar,
    out: Mutex<Box<dyn Write + Send>>,
}

impl Shared {
    fn buffer(&self) -> MutexGuard<'_, Vec<u8>> {
        // A panic while holding the lock leaves whole lines or a partial one; either is worth
        // writing out.
        self.buffer.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Writes out what is buffered. The output lock is taken before the buffer is emptied, so
    /// batches reach `out` in the order they were filled.
    fn flush(&self) {
        let mut out = self.out.lock().unwrap_or_else(PoisonError::into_inner);
        let batch = std::mem::replace(&mut *self.buffer(), Vec::with_capacity(BUFFER_CAPACITY));
        if !batch.is_empty() {
            // Nowhere to report a failed log write; the next batch tries again.
            let _ = out.write_all(&batch).and_then(|()| out.flush());
        }
    }
}

/// Writes out the buffer when dropped.
#[must_use = "the buffered lines are written out when this is dropped"]
pub struct Flush(Arc<Shared>);

impl Drop for Flush {
    fn drop(&mut self) {
        self.0.flush();
    }
}

impl BatchedWriter {
    /// A writer to `out`, its flushing thread, and the guard that writes out the rest.
    pub fn new(out: impl Write + Send + 'static) -> std::io::Result<(BatchedWriter, Flush)> {
        let shared = Arc::new(Shared {
            buffer: Mutex::new(Vec::with_capacity(BUFFER_CAPACITY)),
            filled: Condvar::new(),
            out: Mutex::new(Box::new(out)),
        });
        let flusher = shared.clone();
        std::thread::Builder::new().name("log-flush".into()).spawn(move || {
            loop {
                let buffer = flusher.buffer();
                let buffer = flusher
                    .filled
                    .wait_while(buffer, |b| b.is_empty())
                    .unwrap_or_else(PoisonError::into_inner);
                drop(buffer);
                std::thread::sleep(FLUSH_INTERVAL);
                flusher.flush();
            }
        })?;
        Ok((BatchedWriter { shared: shared.clone() }, Flush(shared)))
    }
}

impl Write for &BatchedWriter {
    fn write(&mut self, line: &[u8]) -> std::io::Result<usize> {
        let mut buffer = self.shared.buffer();
        let was_empty = buffer.is_empty();
        buffer.extend_from_slice(line);
        let full = buffer.len() >= BUFFER_LIMIT;
        drop(buffer);
        if full {
            self.shared.flush();
        } else if was_empty {
            self.shared.filled.notify_one();
        }
        Ok(line.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for BatchedWriter {
    type Writer = &'a BatchedWriter;

    fn make_writer(&'a self) -> &'a BatchedWriter {
        self
    }
}

/// Log output a test can read back: an `io::Write` and a tracing `MakeWriter` over one buffer.
#[cfg(test)]
#[derive(Clone, Default)]
pub(crate) struct Captured(Arc<Mutex<Vec<u8>>>);

#[cfg(test)]
impl Captured {
    /// What has been written so far.
    pub(crate) fn text(&self) -> String {
        String::from_utf8(self.0.lock().unwrap().clone()).unwrap()
    }
}

#[cfg(test)]
impl Write for Captured {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Captured {
    type Writer = Captured;

    fn make_writer(&'a self) -> Captured {
        self.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lines written and never flushed by hand still arrive, all and in order: the background
    /// flush writes them out (how soon is BENCHMARKS.md's business, not a unit test's).
    #[test]
    fn unflushed_lines_arrive_by_themselves_in_order() {
        let out = Captured::default();
        let (writer, _flush) = BatchedWriter::new(out.clone()).unwrap();
        for n in 0..100 {
            writeln!(&writer, "line {n}").unwrap();
        }
        let deadline = std::time::Instant::now() + FLUSH_INTERVAL * 40;
        while out.text().lines().count() < 100 && std::time::Instant::now() < deadline {
            std::thread::sleep(FLUSH_INTERVAL / 5);
        }
        let expected: Vec<String> = (0..100).map(|n| format!("line {n}")).collect();
        assert_eq!(out.text().lines().collect::<Vec<_>>(), expected);
    }

    #[test]
    fn the_guard_writes_out_the_rest_and_a_full_buffer_writes_itself_out() {
        let out = Captured::default();
        let (writer, flush) = BatchedWriter::new(out.clone()).unwrap();
        // tracing-subscriber writes each line with one call, as here.
        let long = "x".repeat(BUFFER_LIMIT) + "\n";
        (&writer).write_all(long.as_bytes()).unwrap();
        assert_eq!(
            out.text().len(),
            BUFFER_LIMIT + 1,
            "written by the writer itself, not after the interval"
        );
        (&writer).write_all(b"last\n").unwrap();
        drop(flush);
        assert!(out.text().ends_with("x\nlast\n"));
    }
}

//! Bounds per connection: how many connections are open at once, in all and from one source
//! address, and how long one may stay silent; before that, how many TLS handshakes are under way,
//! in all and from one source. A connection takes its slot only once its handshake is done, so
//! that connections that never start TLS (anyone on the pod network can open them) hold no slot
//! the API server needs: each holds a handshake place for [`FIRST_BYTE_TIMEOUT`] until its first
//! byte and [`HANDSHAKE_TIMEOUT`] at most, and one source only a few of those (BENCHMARKS.md,
//! "Hostile clients").
//!
//! Per request the bounds are in [`super::routes`]'s handler (a request timeout, a concurrency
//! permit taken before the body is read, the body-read deadline).

use std::collections::HashMap;
use std::io;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::{Instant, Sleep};

/// A TLS handshake must be done within this (a real client's takes milliseconds).
pub(crate) const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);
/// A connection's first byte (its TLS ClientHello) must come within this: until it does, the
/// connection holds a handshake place and nothing else (no TLS state), and a silent one gives
/// it back soon.
pub(crate) const FIRST_BYTE_TIMEOUT: Duration = Duration::from_secs(2);
/// TLS handshakes under way at once, in all: enough that the per-source share decides (200 pods
/// holding 16 silent connections each leave the API server its places), no more: a handshake
/// that has begun holds what its client sent of it until [`HANDSHAKE_TIMEOUT`].
const HANDSHAKES: usize = 4096;
/// TLS handshakes under way at once from one source address.
const HANDSHAKES_PER_SOURCE: usize = 16;

/// Connection bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// Open connections at once (TLS done); one more is closed as soon as its handshake is.
    pub max_connections: usize,
    /// Open connections at once from one source address: the API server needs a few (it
    /// multiplexes its calls over HTTP/2), so one pod cannot take every slot.
    pub max_per_source: usize,
    /// A connection on which the client sends nothing for this long is closed, whatever state
    /// it is in (between requests, or in a body that never ends). Above the API server's own
    /// idle timeout (Go's 90 s), so that normally the client closes first and no request races
    /// a closing connection.
    pub idle_timeout: Duration,
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        ConnectionLimits { max_connections: 256, max_per_source: 64, idle_timeout: Duration::from_secs(120) }
    }
}

/// Places held at once, at most `total` in all and `per_source` from one source address.
#[derive(Debug, Clone)]
pub(crate) struct SourceSlots {
    total: Arc<Semaphore>,
    per_source: usize,
    held: Arc<Mutex<HashMap<IpAddr, usize>>>,
}

/// A place taken from [`SourceSlots`], given back when dropped.
#[derive(Debug)]
pub(crate) struct SourceSlot {
    source: IpAddr,
    held: Arc<Mutex<HashMap<IpAddr, usize>>>,
    _place: OwnedSemaphorePermit,
}

impl SourceSlots {
    pub(crate) fn new(total: usize, per_source: usize) -> SourceSlots {
        SourceSlots {
            total: Arc::new(Semaphore::new(total.max(1))),
            per_source: per_source.max(1),
            held: Arc::default(),
        }
    }

    /// A place for a connection from `source`; `None` when that source, or everyone, holds all
    /// it may.
    pub(crate) fn take(&self, source: IpAddr) -> Option<SourceSlot> {
        let mut held = self.held.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let count = held.entry(source).or_default();
        if *count >= self.per_source {
            return None;
        }
        let place = self.total.clone().try_acquire_owned().ok()?;
        *count += 1;
        Some(SourceSlot { source, held: self.held.clone(), _place: place })
    }

    /// Places held now (for the tests of the caps).
    #[cfg(test)]
    fn held(&self) -> usize {
        self.held.lock().unwrap().values().sum()
    }
}

impl Drop for SourceSlot {
    fn drop(&mut self) {
        let mut held = self.held.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(count) = held.get_mut(&self.source) {
            *count -= 1;
            if *count == 0 {
                held.remove(&self.source);
            }
        }
    }
}

/// Takes a handshake place for each accepted stream, and a connection slot once its handshake is
/// done, wrapping it in [`Bounded`].
#[derive(Debug, Clone)]
pub(crate) struct LimitAcceptor {
    handshakes: SourceSlots,
    slots: SourceSlots,
    idle_timeout: Duration,
}

impl LimitAcceptor {
    /// An acceptor that holds at most `limits.max_connections` connections.
    pub(crate) fn new(limits: ConnectionLimits) -> LimitAcceptor {
        LimitAcceptor {
            handshakes: SourceSlots::new(HANDSHAKES, HANDSHAKES_PER_SOURCE),
            slots: SourceSlots::new(limits.max_connections, limits.max_per_source),
            idle_timeout: limits.idle_timeout,
        }
    }

    /// A place for a TLS handshake from `source`; `None` when it or everyone holds all they may
    /// (dropping the stream then closes it: the client retries elsewhere or later).
    pub(crate) fn handshake(&self, source: IpAddr) -> Option<SourceSlot> {
        self.handshakes.take(source)
    }

    /// Takes a connection slot from `source` for `stream`; `Err` when all are taken.
    pub(crate) fn admit<I>(&self, stream: I, source: IpAddr) -> io::Result<Bounded<I>> {
        match self.slots.take(source) {
            Some(slot) => Ok(Bounded::new(stream, self.idle_timeout, slot)),
            None => Err(io::Error::other("too many open connections")),
        }
    }
}

/// A stream that holds a connection slot and fails once the client has been silent too long.
#[derive(Debug)]
pub(crate) struct Bounded<I> {
    inner: I,
    idle_timeout: Duration,
    deadline: Pin<Box<Sleep>>,
    _slot: SourceSlot,
}

impl<I> Bounded<I> {
    fn new(inner: I, idle_timeout: Duration, slot: SourceSlot) -> Bounded<I> {
        Bounded { inner, idle_timeout, deadline: Box::pin(tokio::time::sleep(idle_timeout)), _slot: slot }
    }
}

impl<I: AsyncRead + Unpin> AsyncRead for Bounded<I> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        match Pin::new(&mut self.inner).poll_read(cx, buf) {
            Poll::Ready(result) => {
                if buf.filled().len() > before {
                    let next = Instant::now() + self.idle_timeout;
                    self.deadline.as_mut().reset(next);
                }
                Poll::Ready(result)
            }
            Poll::Pending => match self.deadline.as_mut().poll(cx) {
                Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "the client sent nothing for the idle timeout",
                ))),
                Poll::Pending => Poll::Pending,
            },
        }
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for Bounded<I> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

use std::future::Future as _;

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    const HERE: IpAddr = IpAddr::V4(std::net::Ipv4Addr::LOCALHOST);
    const THERE: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(10, 244, 0, 9));

    #[tokio::test(start_paused = true)]
    async fn a_silent_client_is_cut_off_and_a_talking_one_is_not() {
        let limits = ConnectionLimits {
            max_connections: 1,
            idle_timeout: Duration::from_secs(5),
            ..Default::default()
        };
        let acceptor = LimitAcceptor::new(limits);
        let (client, server) = tokio::io::duplex(64);
        let mut bounded = acceptor.admit(server, HERE).unwrap();
        let (_client_read, mut client_write) = tokio::io::split(client);
        let talker = tokio::spawn(async move {
            for _ in 0..3 {
                tokio::time::sleep(Duration::from_secs(4)).await;
                client_write.write_all(b"x").await.unwrap();
            }
            client_write
        });
        let mut byte = [0u8; 1];
        for _ in 0..3 {
            bounded.read_exact(&mut byte).await.unwrap();
        }
        let _keep_open = talker.await.unwrap();
        let silent = bounded.read(&mut byte).await.unwrap_err();
        assert_eq!(silent.kind(), io::ErrorKind::TimedOut);
    }

    #[tokio::test]
    async fn connections_past_the_cap_are_refused_until_one_closes() {
        let limits = ConnectionLimits { max_connections: 2, ..Default::default() };
        let acceptor = LimitAcceptor::new(limits);
        let first = acceptor.admit(tokio::io::duplex(8).0, HERE).unwrap();
        let _second = acceptor.admit(tokio::io::duplex(8).0, THERE).unwrap();
        assert_eq!(acceptor.slots.held(), 2);
        assert!(acceptor.admit(tokio::io::duplex(8).0, HERE).is_err());
        drop(first);
        assert!(acceptor.admit(tokio::io::duplex(8).0, HERE).is_ok());
    }

    /// One source takes no more than its share, of connections or of handshakes: the others'
    /// places stay free for them.
    #[tokio::test]
    async fn one_source_holds_its_share_and_no_more() {
        let acceptor = LimitAcceptor::new(ConnectionLimits {
            max_connections: 8,
            max_per_source: 3,
            ..Default::default()
        });
        let theirs: Vec<_> = (0..3).map(|_| acceptor.admit((), THERE).unwrap()).collect();
        assert!(acceptor.admit((), THERE).is_err(), "a fourth from one source");
        let ours = acceptor.admit((), HERE).unwrap();
        drop(theirs);
        assert_eq!(acceptor.slots.held(), 1);
        drop(ours);
        assert_eq!(acceptor.slots.held(), 0, "each place given back");
        let handshakes: Vec<_> = std::iter::from_fn(|| acceptor.handshake(THERE)).take(100).collect();
        assert_eq!(handshakes.len(), HANDSHAKES_PER_SOURCE);
        assert!(acceptor.handshake(HERE).is_some(), "another source still shakes hands");
    }
}

//! Bounds per connection, below TLS: how many connections are open at once, and how long one may
//! stay silent.
//!
//! Per request the bounds are in [`super::routes`]'s handler (a request timeout, a concurrency
//! permit taken before the body is read, the body-read deadline).

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::{Instant, Sleep};

/// Connection bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// Open connections at once; one more is closed as soon as it is accepted.
    pub max_connections: usize,
    /// A connection on which the client sends nothing for this long is closed, whatever state
    /// it is in (between requests, or in a body that never ends). Above the API server's own
    /// idle timeout (Go's 90 s), so that normally the client closes first and no request races
    /// a closing connection.
    pub idle_timeout: Duration,
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        ConnectionLimits { max_connections: 256, idle_timeout: Duration::from_secs(120) }
    }
}

/// Takes a connection slot for each accepted stream and wraps it in [`Bounded`].
#[derive(Debug, Clone)]
pub(crate) struct LimitAcceptor {
    slots: Arc<Semaphore>,
    idle_timeout: Duration,
}

impl LimitAcceptor {
    /// An acceptor that holds at most `limits.max_connections` connections.
    pub(crate) fn new(limits: ConnectionLimits) -> LimitAcceptor {
        LimitAcceptor {
            slots: Arc::new(Semaphore::new(limits.max_connections.max(1))),
            idle_timeout: limits.idle_timeout,
        }
    }

    /// Connections open now (for the tests of the cap).
    #[cfg(test)]
    fn open(&self, limits: ConnectionLimits) -> usize {
        limits.max_connections.max(1) - self.slots.available_permits()
    }
}

impl LimitAcceptor {
    /// Takes a connection slot for `stream`; `Err` when all are taken (dropping the stream then
    /// closes it: the client retries elsewhere or later).
    pub(crate) fn admit<I>(&self, stream: I) -> io::Result<Bounded<I>> {
        match self.slots.clone().try_acquire_owned() {
            Ok(slot) => Ok(Bounded::new(stream, self.idle_timeout, slot)),
            Err(_) => Err(io::Error::other("too many open connections")),
        }
    }
}

/// A stream that holds a connection slot and fails once the client has been silent too long.
#[derive(Debug)]
pub(crate) struct Bounded<I> {
    inner: I,
    idle_timeout: Duration,
    deadline: Pin<Box<Sleep>>,
    _slot: OwnedSemaphorePermit,
}

impl<I> Bounded<I> {
    fn new(inner: I, idle_timeout: Duration, slot: OwnedSemaphorePermit) -> Bounded<I> {
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

    #[tokio::test(start_paused = true)]
    async fn a_silent_client_is_cut_off_and_a_talking_one_is_not() {
        let acceptor =
            LimitAcceptor::new(ConnectionLimits { max_connections: 1, idle_timeout: Duration::from_secs(5) });
        let (client, server) = tokio::io::duplex(64);
        let mut bounded = acceptor.admit(server).unwrap();
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
        let limits = ConnectionLimits { max_connections: 2, idle_timeout: Duration::from_secs(60) };
        let acceptor = LimitAcceptor::new(limits);
        let first = acceptor.admit(tokio::io::duplex(8).0).unwrap();
        let _second = acceptor.admit(tokio::io::duplex(8).0).unwrap();
        assert_eq!(acceptor.open(limits), 2);
        assert!(acceptor.admit(tokio::io::duplex(8).0).is_err());
        drop(first);
        assert!(acceptor.admit(tokio::io::duplex(8).0).is_ok());
    }
}

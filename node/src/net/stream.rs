//! Framed unidirectional streams: what a [`StreamKind`] is, how it is tagged and prioritised,
//! and the length-prefixed frames carried on it.
//!
//! Wire format of one stream: one tag byte (the kind), then frames, each a `u32` big-endian
//! length followed by that many bytes, until the sender finishes the stream. The receiver
//! checks a frame's announced length against `peertree::relay::MAX_MESSAGE` before reserving
//! any memory for it, and grows the buffer only as bytes arrive, so a peer cannot make a node
//! allocate by announcing a huge frame.
//!
//! This module frames bytes; it does not interpret them.

use std::fmt;

use peertree::relay::MAX_MESSAGE;

use super::NetError;

/// Tag of the internal stream a server opens first on every connection, so the client learns
/// that the server accepted its certificate (see `Transport::connect`). Never seen by callers.
pub(crate) const HELLO_TAG: u8 = 0;

/// Buffer reserved up front for a frame; larger frames grow as their bytes arrive.
const FIRST_RESERVE: usize = 4 << 20;

/// What a stream carries, which also decides how quinn schedules it against other streams of
/// the same connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StreamKind {
    /// Relay control: plans, acknowledgements, completion reports. Small and latency-bound.
    Control,
    /// Demand requests and their answers for chunks a blocked read waits for. Sent first.
    Demand,
    /// Pushed chunks. Sent when nothing more urgent is waiting.
    Bulk,
    /// The cluster's revocation list (one frame, DER), which every node passes on to the
    /// peers it connects to. Outside any job. A node of a release before it skips such a
    /// stream as one of an unknown kind.
    Crl,
}

impl StreamKind {
    /// Every kind, for tests and loops.
    pub const ALL: [StreamKind; 4] = [
        StreamKind::Control,
        StreamKind::Demand,
        StreamKind::Bulk,
        StreamKind::Crl,
    ];

    /// The first byte of a stream of this kind.
    pub(crate) fn tag(self) -> u8 {
        match self {
            StreamKind::Control => 1,
            StreamKind::Demand => 2,
            StreamKind::Bulk => 3,
            StreamKind::Crl => 4,
        }
    }

    /// The kind a stream's first byte names, if any.
    pub(crate) fn from_tag(tag: u8) -> Option<StreamKind> {
        StreamKind::ALL.into_iter().find(|kind| kind.tag() == tag)
    }

    /// quinn send priority: higher is sent first. Demand overtakes everything, control
    /// overtakes bulk.
    pub(crate) fn priority(self) -> i32 {
        match self {
            StreamKind::Demand => 2,
            StreamKind::Control | StreamKind::Crl => 1,
            StreamKind::Bulk => 0,
        }
    }
}

impl fmt::Display for StreamKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            StreamKind::Control => "control",
            StreamKind::Demand => "demand",
            StreamKind::Bulk => "bulk",
            StreamKind::Crl => "crl",
        })
    }
}

/// The sending half of a stream opened with `Conn::open`.
///
/// Dropping it without [`finish`](Self::finish) still ends the stream cleanly once buffered
/// frames are sent (quinn's behaviour), but nobody learns whether they arrived.
pub struct FrameSender {
    stream: quinn::SendStream,
    kind: StreamKind,
}

impl fmt::Debug for FrameSender {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FrameSender")
            .field("kind", &self.kind)
            .field("id", &self.stream.id())
            .finish()
    }
}

impl FrameSender {
    /// Wraps a freshly opened stream: sets its priority and writes its tag.
    pub(crate) async fn start(
        stream: quinn::SendStream,
        kind: StreamKind,
    ) -> Result<FrameSender, NetError> {
        let mut sender = FrameSender { stream, kind };
        // Fails only on a stream that is already closed, which a fresh one is not; a write
        // below would report the same problem, so ignoring the error loses nothing.
        let _ = sender.stream.set_priority(kind.priority());
        sender.stream.write_all(&[kind.tag()]).await?;
        Ok(sender)
    }

    /// The kind this stream was opened as.
    pub fn kind(&self) -> StreamKind {
        self.kind
    }

    /// Queues one frame. Returns once quinn has buffered it (flow control may make this wait),
    /// not when the peer has it.
    pub async fn send(&mut self, frame: &[u8]) -> Result<(), NetError> {
        let len = u32::try_from(frame.len())
            .ok()
            .filter(|_| frame.len() <= MAX_MESSAGE)
            .ok_or(NetError::FrameTooLarge(frame.len()))?;
        self.stream.write_all(&len.to_be_bytes()).await?;
        self.stream.write_all(frame).await?;
        Ok(())
    }

    /// Queues one frame made of `head` followed by `body`, as [`send`](Self::send) would
    /// queue their concatenation, without copying `body`: quinn shares it (a chunk's stored
    /// bytes go to every child, and stay in the store's memory, as one buffer).
    pub(crate) async fn send_parts(
        &mut self,
        head: &[u8],
        body: impl Into<bytes::Bytes>,
    ) -> Result<(), NetError> {
        let body = body.into();
        let total = head.len() + body.len();
        let len = u32::try_from(total)
            .ok()
            .filter(|_| total <= MAX_MESSAGE)
            .ok_or(NetError::FrameTooLarge(total))?;
        let mut prefix = Vec::with_capacity(4 + head.len());
        prefix.extend_from_slice(&len.to_be_bytes());
        prefix.extend_from_slice(head);
        self.stream.write_all(&prefix).await?;
        if !body.is_empty() {
            self.stream.write_chunk(body).await?;
        }
        Ok(())
    }

    /// Ends the stream and waits until the peer has acknowledged every byte of it (received,
    /// not necessarily processed). Fails if the peer stopped the stream or the connection
    /// was lost first.
    pub async fn finish(mut self) -> Result<(), NetError> {
        // Fails only if already finished or reset, which `self` by value rules out.
        let _ = self.stream.finish();
        match self.stream.stopped().await {
            Ok(None) => Ok(()),
            Ok(Some(code)) => Err(NetError::Write(quinn::WriteError::Stopped(code))),
            Err(quinn::StoppedError::ConnectionLost(e)) => Err(NetError::Connection(e)),
            Err(quinn::StoppedError::ZeroRttRejected) => {
                Err(NetError::Write(quinn::WriteError::ZeroRttRejected))
            }
        }
    }

    /// Writes raw bytes with no framing, to let tests present a receiver with a malformed
    /// stream.
    #[cfg(test)]
    pub(crate) async fn send_unframed(&mut self, bytes: &[u8]) -> Result<(), NetError> {
        self.stream.write_all(bytes).await?;
        Ok(())
    }
}

/// The receiving half of a stream the peer opened, from `Conn::accept_stream`.
pub struct FrameReceiver {
    stream: quinn::RecvStream,
    kind: StreamKind,
}

impl fmt::Debug for FrameReceiver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FrameReceiver")
            .field("kind", &self.kind)
            .field("id", &self.stream.id())
            .finish()
    }
}

/// How reading a stream's first byte went.
pub(crate) enum Tagged {
    /// A stream of a known kind.
    Kind(StreamKind, FrameReceiver),
    /// The first byte was this unknown tag.
    Unknown(u8, quinn::RecvStream),
    /// The stream ended or was reset before its tag.
    Empty,
}

impl FrameReceiver {
    /// Reads a new stream's tag byte.
    pub(crate) async fn start(mut stream: quinn::RecvStream) -> Result<Tagged, NetError> {
        let mut tag = [0u8; 1];
        match stream.read_exact(&mut tag).await {
            Ok(()) => {}
            Err(quinn::ReadExactError::FinishedEarly(_)) => return Ok(Tagged::Empty),
            Err(quinn::ReadExactError::ReadError(quinn::ReadError::ConnectionLost(e))) => {
                return Err(NetError::Connection(e));
            }
            Err(quinn::ReadExactError::ReadError(_)) => return Ok(Tagged::Empty),
        }
        Ok(match StreamKind::from_tag(tag[0]) {
            Some(kind) => Tagged::Kind(kind, FrameReceiver { stream, kind }),
            None => Tagged::Unknown(tag[0], stream),
        })
    }

    /// The kind the peer opened this stream as.
    pub fn kind(&self) -> StreamKind {
        self.kind
    }

    /// Next frame (u32 big-endian length prefix + bytes); `None` at a clean end of stream.
    ///
    /// A frame announced longer than `peertree::relay::MAX_MESSAGE` is refused with
    /// [`NetError::FrameTooLarge`] before anything is allocated for it; the stream is then
    /// unusable (the receiver no longer knows where frames start) and is stopped.
    pub async fn recv(&mut self) -> Result<Option<Vec<u8>>, NetError> {
        self.recv_at_most(MAX_MESSAGE).await
    }

    /// [`recv`](Self::recv) of a frame this stream's kind keeps smaller: one announced
    /// longer than `max` is refused the same way, before anything is allocated for it.
    pub(crate) async fn recv_at_most(&mut self, max: usize) -> Result<Option<Vec<u8>>, NetError> {
        let mut prefix = [0u8; 4];
        match self.stream.read_exact(&mut prefix).await {
            Ok(()) => {}
            Err(quinn::ReadExactError::FinishedEarly(0)) => return Ok(None),
            Err(quinn::ReadExactError::FinishedEarly(got)) => {
                return Err(NetError::Truncated { expected: 4, got });
            }
            Err(quinn::ReadExactError::ReadError(e)) => return Err(e.into()),
        }
        let len = usize::try_from(u32::from_be_bytes(prefix)).unwrap_or(usize::MAX);
        if len > max.min(MAX_MESSAGE) {
            // Tell the peer to stop sending; the error code is informational only.
            let _ = self.stream.stop(quinn::VarInt::from_u32(1));
            return Err(NetError::FrameTooLarge(len));
        }
        let mut frame = Vec::with_capacity(len.min(FIRST_RESERVE));
        while frame.len() < len {
            match self.stream.read_chunk(len - frame.len(), true).await? {
                Some(chunk) => frame.extend_from_slice(&chunk.bytes),
                None => {
                    return Err(NetError::Truncated {
                        expected: len,
                        got: frame.len(),
                    });
                }
            }
        }
        Ok(Some(frame))
    }
}

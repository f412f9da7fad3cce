//! Wire messages of the relay protocol and their encoding (postcard over serde), with a
//! hard size limit checked before decoding so a peer cannot make a node allocate at will,
//! and the wire form of chunk bitsets. Nothing here acts on a message: that is the
//! [`super::Relay`]'s job.

use fixedbitset::FixedBitSet;
use serde::{Deserialize, Serialize};

use crate::error::Error;
use crate::plan::NodeId;

/// A chunk's position in its index's chunk table: the one name of a chunk between the
/// relay, the node and the filesystem, which look its content id ([`manifest::ChunkId`])
/// up in the index when they need it. On the wire it is the bare number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ChunkNo(pub u32);

impl ChunkNo {
    /// The position as an index into the chunk table and bitsets.
    pub fn index(self) -> usize {
        self.0 as usize
    }

    /// The chunk at table position `i`, if a chunk table can have it (at most `u32::MAX`
    /// chunks: an index's chunk count is a `u32`).
    pub fn at(i: usize) -> Option<ChunkNo> {
        u32::try_from(i).ok().map(ChunkNo)
    }
}

impl std::fmt::Display for ChunkNo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// Identity of a distribution job (chosen by the root; unique per push): a Slurm job's
/// own number, or a fresh id above `u32::MAX` for a push outside Slurm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct JobId(pub u64);

impl JobId {
    /// Whether this is a Slurm job's number (Slurm's ids are 32-bit; fresh ids are not).
    pub fn is_slurm(self) -> bool {
        self.0 <= u64::from(u32::MAX)
    }

    /// The 16 hex digits of the control socket's wire form (and of the mount directories
    /// of earlier releases).
    pub fn hex(self) -> String {
        format!("{:016x}", self.0)
    }
}

/// As people see it: a Slurm job's number in decimal (`1234`), else the 16 hex digits.
impl std::fmt::Display for JobId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.is_slurm() {
            write!(f, "{}", self.0)
        } else {
            write!(f, "{:016x}", self.0)
        }
    }
}

/// A job id as people type it: the Slurm job id in decimal (`1234`, `$SLURM_JOB_ID`, its
/// display form and the name of its directory under the mount root), 16 hex digits (a
/// push outside Slurm, or `00000000000004d2` as earlier releases showed job 1234), or hex
/// with `0x` (`0x4d2`). Sixteen characters are always the display
/// form: a decimal Slurm job id never has more than ten digits.
impl std::str::FromStr for JobId {
    type Err = Error;

    fn from_str(text: &str) -> Result<JobId, Error> {
        let t = text.trim();
        let bad = || Error::JobId(t.to_owned());
        if let Some(hex) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
            if hex.is_empty() || hex.len() > 16 || !hex.chars().all(|c| c.is_ascii_hexdigit()) {
                return Err(bad());
            }
            return u64::from_str_radix(hex, 16).map(JobId).map_err(|_| bad());
        }
        // Sixteen characters are hex: a Slurm id has at most ten digits.
        if t.len() == 16 && t.chars().all(|c| c.is_ascii_hexdigit()) {
            return u64::from_str_radix(t, 16).map(JobId).map_err(|_| bad());
        }
        if t.is_empty() || !t.chars().all(|c| c.is_ascii_digit()) {
            return Err(bad());
        }
        t.parse::<u64>().map(JobId).map_err(|_| bad())
    }
}

/// The two phases of a push: the urgent set, then everything.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Phase {
    /// The application and what it needs to start.
    Urgent,
    /// The whole layer (urgent and hysteretic sets).
    All,
}

impl Phase {
    /// Both phases, in order.
    pub const BOTH: [Phase; 2] = [Phase::Urgent, Phase::All];

    /// Position for per-phase arrays.
    pub fn index(self) -> usize {
        match self {
            Phase::Urgent => 0,
            Phase::All => 1,
        }
    }
}

/// A node of the tree as the relay and the transport need it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeInfo {
    /// Id in the job's plan.
    pub id: NodeId,
    /// Host name.
    pub host: String,
    /// Where its daemon listens (`host:port` or `ip:port`).
    pub addr: String,
    /// Parent in the plan (the root is its own parent).
    pub parent: NodeId,
    /// Its group in the topology (`None` for the login node and hosts outside any group):
    /// a parent names one deputy among its children of one group ([`Start::kin`]).
    pub group: Option<u32>,
    /// The rate its parent sends to it at, in bits per second ([`crate::Plan::rate`]);
    /// `None`: as fast as the transport goes.
    pub rate: Option<u64>,
}

/// Timing of liveness checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Timing {
    /// Send something at least this often to parent and children (milliseconds).
    pub heartbeat_ms: u32,
    /// A peer silent this long is declared failed (milliseconds).
    pub deadline_ms: u32,
}

impl Default for Timing {
    fn default() -> Self {
        Self {
            heartbeat_ms: 1000,
            deadline_ms: 5000,
        }
    }
}

/// The first message a node receives: its part of the plan and the signed index.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Start {
    /// The job.
    pub job: JobId,
    /// The signed index exactly as published (verified by the receiver before use).
    #[serde(with = "bytes")]
    pub index: Vec<u8>,
    /// Which chunk-table positions form the urgent set, in push order, then the rest.
    /// Carried so every node pushes in the root's order without recomputing it.
    pub order: Vec<ChunkNo>,
    /// How many of `order` are urgent.
    pub urgent: u32,
    /// The receiver's subtree, the receiver first, parents before children.
    pub subtree: Vec<NodeInfo>,
    /// The receiver's ancestors, nearest (its parent) first, the root last.
    pub ancestors: Vec<NodeInfo>,
    /// Liveness timing for this job.
    pub timing: Timing,
    /// Shared-storage mode: the receiver reads every chunk from this store directory (a
    /// parallel file system) instead of waiting for them down the tree.
    pub shared_store: Option<String>,
    /// A health probe: an empty broadcast. No index, no chunks (`index` and `order` are
    /// empty); every node answers at once, the parent measuring the round trip, and the
    /// receiver drops the job when the root finishes it.
    pub probe: bool,
    /// The uid of the user the job belongs to (who pushed it, or the Slurm job's user): on
    /// every node they, and root, may query and stop it, and only they may enter its mount.
    /// `None`: root only.
    pub owner: Option<u32>,
    /// The receiver's planned siblings in its group (its parent's children there), in plan
    /// order, the receiver included; empty when it has none. The first is their deputy: if
    /// the parent fails, the others ask the deputy to adopt them before anyone across the
    /// group's uplink, and only the deputy re-attaches upward, so the rest of the layer
    /// enters the group about once instead of once per orphan. A `Start` sent by an
    /// ancestor because the receiver's planned parent (its `parent` in `subtree`) failed
    /// before passing it on carries the kin that parent would have given, and the receiver
    /// asks its deputy first then too.
    pub kin: Vec<NodeInfo>,
    /// The root's wall clock when it started the job (milliseconds since the Unix epoch):
    /// a node compares it with its own to tell how far its clock is from the login node's
    /// (the `Start`'s transit time included), which `teesfs doctor` reports.
    pub root_clock_ms: Option<u64>,
}

/// Facts flowing up toward the root. Also serves as the child-to-parent heartbeat.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Report {
    /// Nodes that completed a phase.
    pub done: Vec<(NodeId, Phase)>,
    /// Edges `(parent, child)` whose child stopped answering.
    pub failed: Vec<(NodeId, NodeId)>,
    /// Edges `(parent, child)` where the child caught the parent sending a bad chunk.
    pub liars: Vec<(NodeId, NodeId)>,
    /// Nodes that re-attached: `(new parent, node)`.
    pub attached: Vec<(NodeId, NodeId)>,
    /// Bytes pushed over an edge `(parent, child)`, sent once the child holds everything.
    pub edge_bytes: Vec<(NodeId, NodeId, u64)>,
    /// Round trips `(parent, child, microseconds)` measured by the parent: from handing
    /// the child's `Start` to the transport to the child's first message back (connection
    /// setup included when there was no connection yet).
    pub edge_rtt: Vec<(NodeId, NodeId, u32)>,
    /// Signs of applications starting in this subtree since its last report: demands
    /// (reads of chunks not held, a child's `Want`) and files opened in the nodes' mounts.
    /// Rides on the next report or heartbeat; alone it is nothing to say.
    pub activity: u32,
    /// Nodes that refused the job, with their reason (an index that is not trusted, has
    /// expired or is revoked there): reported by their parent, which drops them.
    pub refused: Vec<(NodeId, String)>,
}

impl Report {
    /// Whether there is nothing to say (a pure heartbeat).
    pub fn is_empty(&self) -> bool {
        self.done.is_empty()
            && self.failed.is_empty()
            && self.liars.is_empty()
            && self.attached.is_empty()
            && self.edge_bytes.is_empty()
            && self.edge_rtt.is_empty()
            && self.refused.is_empty()
    }

    /// Appends another report's facts.
    pub fn merge(&mut self, other: Report) {
        self.done.extend(other.done);
        self.failed.extend(other.failed);
        self.liars.extend(other.liars);
        self.attached.extend(other.attached);
        self.edge_bytes.extend(other.edge_bytes);
        self.edge_rtt.extend(other.edge_rtt);
        self.activity = self.activity.saturating_add(other.activity);
        self.refused.extend(other.refused);
    }
}

/// Everything peers say to each other about a job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Msg {
    /// Parent to child: join the job.
    Start(Box<Start>),
    /// Parent to child: a chunk's stored bytes (by push, or answering a demand).
    Chunk {
        /// Position in the index's chunk table.
        chunk: ChunkNo,
        /// Whether this answers a demand (travels on the priority stream).
        demand: bool,
        /// The stored (encoded) chunk.
        #[serde(with = "bytes")]
        data: Vec<u8>,
    },
    /// Child to parent: a blocked read needs this chunk now.
    Want {
        /// Position in the chunk table.
        chunk: ChunkNo,
    },
    /// Child to parent: facts for the root, and a heartbeat.
    Report(Report),
    /// Parent to child: heartbeat when there is nothing else to send.
    Ping,
    /// Orphan to ancestor: adopt me; this is what I already hold (bitset words).
    Attach {
        /// Bitset of held chunk positions, 64 per word.
        have: Vec<u64>,
    },
    /// Ancestor to orphan: you are my child now.
    Adopted,
    /// Root to everyone, down the tree: the push is over; stop liveness checks.
    Finished,
    /// Parent (and grandparent) to child, ahead of the child's `Start`: who is below the
    /// child, so that it connects to its own children (and passes them theirs) while its
    /// own connection and `Start` are still on the way. Connection set-ups then overlap
    /// instead of adding up level by level. A hint only: a node that never gets one
    /// connects when its `Start` arrives, as before. See
    /// [`crate::relay::forward_prepare`].
    Prepare(Prepare),
    /// Child to parent: I held this chunk and lost it (evicted over the store budget, or
    /// unreadable), so send it again although you sent it once. A plain `Want` for a chunk
    /// the parent already sent is not answered: the parent takes it to be on its way.
    Lost {
        /// Position in the chunk table.
        chunk: ChunkNo,
    },
    /// Child to parent, right after joining: chunks this node's store kept from an earlier
    /// job (bitset words, as in `Attach`); the parent does not send them.
    Held {
        /// Bitset of held chunk positions, 64 per word.
        have: Vec<u64>,
    },
    /// Child to parent, instead of joining: this node will not take the job, and why (the
    /// index is not trusted, has expired or is revoked here), so the push can say so at
    /// once instead of waiting for a deadline and blaming the network. Also sent by a node
    /// that leaves the job because its store cannot keep the chunks
    /// ([`crate::relay::Relay::leave`]): to its parent, which drops it and reports it, and
    /// to its children, which re-attach elsewhere at once.
    Refused {
        /// Why, for the operator.
        reason: String,
    },
    /// Login node to a node, outside any push (`teesfs learn`): send back what you recorded
    /// of the frame's job while it started, whether it still runs or was released lately.
    /// `reply` is where the asker listens (`host:port`).
    AskRecord {
        /// The asker's address.
        reply: String,
    },
    /// Node to the asker of [`Msg::AskRecord`]: its answer, a JSON document of the node
    /// library (a job record, or why there is none). The relay never sees it.
    Record {
        /// The JSON document.
        #[serde(with = "bytes")]
        json: Vec<u8>,
    },
    /// Any node of a job to another that may hold a chunk its parent cannot give: send
    /// it if you hold it, else say [`Msg::Lacks`]. Answered from what the receiver holds,
    /// never asked of anyone else ([`crate::relay::Sources`]).
    Ask {
        /// Position in the chunk table.
        chunk: ChunkNo,
    },
    /// Answer to [`Msg::Ask`], or a parent to a child waiting for a chunk no source gave
    /// it: I do not have this chunk and cannot get it; look elsewhere.
    Lacks {
        /// Position in the chunk table.
        chunk: ChunkNo,
    },
    /// Root to everyone, down the tree: the push failed before the job could start (the
    /// Slurm prolog's push, which Slurm requeues elsewhere, or one stopped meanwhile), so
    /// drop the job now: each node passes it on to its children, then releases the job as
    /// `teesfs release` would. Only a node's parent is obeyed. Appended last: the wire's
    /// variant numbers of the others stay as they were.
    Release,
}

/// An arriving message, sorted once by the process that receives it: what starts or
/// prepares a job goes to the daemon, a chunk to the job (which verifies it before the relay
/// hears of it), and the rest to the job's relay ([`crate::relay::Relay::handle_message`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Routed {
    /// [`Msg::Start`].
    Start(Box<Start>),
    /// [`Msg::Prepare`].
    Prepare(Prepare),
    /// [`Msg::Chunk`].
    Chunk {
        /// Position in the index's chunk table.
        chunk: ChunkNo,
        /// Whether this answers a demand.
        demand: bool,
        /// The stored (encoded) chunk: shared, so the receiver can slice it out of the
        /// frame it arrived in ([`Msg::split_chunk`]) and keep and forward it without
        /// copying it.
        data: ::bytes::Bytes,
    },
    /// A message for the relay.
    Relay(RelayMsg),
    /// [`Msg::AskRecord`]: for the daemon, outside the job's relay.
    AskRecord {
        /// The asker's address.
        reply: String,
    },
    /// [`Msg::Record`]: for whoever asked.
    Record {
        /// The JSON document.
        json: Vec<u8>,
    },
}

/// The messages a relay handles, each as in [`Msg`]. It mirrors those variants of [`Msg`]
/// one for one (the wire format stays one enum; this one is what the relay matches
/// exhaustively), so their fields are written twice on purpose.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RelayMsg {
    /// [`Msg::Want`].
    Want {
        /// Position in the chunk table.
        chunk: ChunkNo,
    },
    /// [`Msg::Report`].
    Report(Report),
    /// [`Msg::Ping`].
    Ping,
    /// [`Msg::Attach`].
    Attach {
        /// Bitset of held chunk positions, 64 per word.
        have: Vec<u64>,
    },
    /// [`Msg::Adopted`].
    Adopted,
    /// [`Msg::Finished`].
    Finished,
    /// [`Msg::Lost`].
    Lost {
        /// Position in the chunk table.
        chunk: ChunkNo,
    },
    /// [`Msg::Held`].
    Held {
        /// Bitset of held chunk positions, 64 per word.
        have: Vec<u64>,
    },
    /// [`Msg::Refused`].
    Refused {
        /// Why, for the operator.
        reason: String,
    },
    /// [`Msg::Ask`].
    Ask {
        /// Position in the chunk table.
        chunk: ChunkNo,
    },
    /// [`Msg::Lacks`].
    Lacks {
        /// Position in the chunk table.
        chunk: ChunkNo,
    },
    /// [`Msg::Release`].
    Release,
}

impl Msg {
    /// Where this message goes.
    pub fn route(self) -> Routed {
        match self {
            Msg::Start(s) => Routed::Start(s),
            Msg::Prepare(p) => Routed::Prepare(p),
            Msg::Chunk {
                chunk,
                demand,
                data,
            } => Routed::Chunk {
                chunk,
                demand,
                data: data.into(),
            },
            Msg::Want { chunk } => Routed::Relay(RelayMsg::Want { chunk }),
            Msg::Report(r) => Routed::Relay(RelayMsg::Report(r)),
            Msg::Ping => Routed::Relay(RelayMsg::Ping),
            Msg::Attach { have } => Routed::Relay(RelayMsg::Attach { have }),
            Msg::Adopted => Routed::Relay(RelayMsg::Adopted),
            Msg::Finished => Routed::Relay(RelayMsg::Finished),
            Msg::Lost { chunk } => Routed::Relay(RelayMsg::Lost { chunk }),
            Msg::Held { have } => Routed::Relay(RelayMsg::Held { have }),
            Msg::Refused { reason } => Routed::Relay(RelayMsg::Refused { reason }),
            Msg::AskRecord { reply } => Routed::AskRecord { reply },
            Msg::Record { json } => Routed::Record { json },
            Msg::Ask { chunk } => Routed::Relay(RelayMsg::Ask { chunk }),
            Msg::Lacks { chunk } => Routed::Relay(RelayMsg::Lacks { chunk }),
            Msg::Release => Routed::Relay(RelayMsg::Release),
        }
    }
}

/// The content of [`Msg::Prepare`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Prepare {
    /// The receiver's planned subtree, the receiver first, parents before children (as in
    /// its `Start`).
    pub subtree: Vec<NodeInfo>,
}

/// `Vec<u8>` fields as one byte string instead of a sequence of `u8`s. In postcard both are
/// a varint length followed by the bytes, so the wire format is unchanged; but decoding a
/// sequence visits every byte on its own, which made decoding a 1 MiB chunk cost more than
/// receiving it over QUIC.
mod bytes {
    use std::fmt;

    use serde::de::{Deserializer, SeqAccess, Visitor};
    use serde::ser::Serializer;

    pub fn serialize<S: Serializer>(v: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(v)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        d.deserialize_byte_buf(BytesVisitor)
    }

    struct BytesVisitor;

    impl<'de> Visitor<'de> for BytesVisitor {
        type Value = Vec<u8>;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a byte string")
        }

        fn visit_bytes<E: serde::de::Error>(self, v: &[u8]) -> Result<Vec<u8>, E> {
            Ok(v.to_vec())
        }

        fn visit_byte_buf<E: serde::de::Error>(self, v: Vec<u8>) -> Result<Vec<u8>, E> {
            Ok(v)
        }

        // Self-describing formats may present bytes as a sequence.
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<u8>, A::Error> {
            let mut v = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(1 << 20));
            while let Some(b) = seq.next_element()? {
                v.push(b);
            }
            Ok(v)
        }
    }
}

/// Largest encoded message accepted (the index rides in `Start`).
pub const MAX_MESSAGE: usize = 512 << 20;

impl Msg {
    /// Encodes for the wire.
    pub fn encode(&self) -> Vec<u8> {
        postcard::to_allocvec(self).expect("encoding owned data into a Vec cannot fail")
    }

    /// Decodes bytes from a peer, refusing oversized ([`Error::WireTooLarge`]) or malformed
    /// ([`Error::WireMalformed`]) input.
    pub fn decode(bytes: &[u8]) -> Result<Msg, Error> {
        if bytes.len() > MAX_MESSAGE {
            return Err(Error::WireTooLarge(bytes.len()));
        }
        let (msg, rest) =
            postcard::take_from_bytes(bytes).map_err(|e| Error::WireMalformed(e.to_string()))?;
        if !rest.is_empty() {
            return Err(Error::WireMalformed(format!(
                "{} trailing bytes",
                rest.len()
            )));
        }
        Ok(msg)
    }
}

/// A [`Msg::Chunk`] taken apart by [`Msg::split_chunk`], its data left where it lies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChunkSplit {
    /// Position in the index's chunk table.
    pub chunk: ChunkNo,
    /// Whether this answers a demand.
    pub demand: bool,
    /// Where the stored chunk lies in the message's bytes.
    pub data: std::ops::Range<usize>,
}

/// Position of [`Msg::Chunk`] among [`Msg`]'s variants, which postcard writes first.
const CHUNK_VARIANT: u32 = 1;

impl Msg {
    /// The encoding of a [`Msg::Chunk`] up to its data: `chunk_head(..) + data` is byte for
    /// byte `Msg::Chunk { chunk, demand, data }.encode()`. A sender can then send stored
    /// bytes it shares (with the store, with other children) after the head, instead of
    /// copying them into a message and the message into a frame.
    pub fn chunk_head(chunk: ChunkNo, demand: bool, len: usize) -> Vec<u8> {
        // postcard writes a variant index, a u32 and a byte string's length as varints and
        // a bool as one byte: the same as this tuple (a test holds the two together).
        postcard::to_allocvec(&(CHUNK_VARIANT, chunk, demand, len))
            .expect("encoding integers into a Vec cannot fail")
    }

    /// If `bytes` encode a [`Msg::Chunk`]: its chunk number, demand flag and where its data
    /// lies in `bytes` (the rest of them), without copying the data. `None` for any other
    /// message (decode those with [`Msg::decode`]); an error for a malformed chunk message,
    /// as [`Msg::decode`] would give.
    pub fn split_chunk(bytes: &[u8]) -> Option<Result<ChunkSplit, Error>> {
        if bytes.len() > MAX_MESSAGE {
            return Some(Err(Error::WireTooLarge(bytes.len())));
        }
        let (variant, rest) = postcard::take_from_bytes::<u32>(bytes).ok()?;
        if variant != CHUNK_VARIANT {
            return None;
        }
        let malformed = |e: postcard::Error| Error::WireMalformed(e.to_string());
        let head = || -> Result<_, Error> {
            let (chunk, rest) = postcard::take_from_bytes::<u32>(rest).map_err(malformed)?;
            let (demand, rest) = postcard::take_from_bytes::<bool>(rest).map_err(malformed)?;
            let (len, rest) = postcard::take_from_bytes::<usize>(rest).map_err(malformed)?;
            if rest.len() != len {
                return Err(Error::WireMalformed(format!(
                    "a chunk of {len} bytes in {} bytes",
                    rest.len()
                )));
            }
            Ok(ChunkSplit {
                chunk: ChunkNo(chunk),
                demand,
                data: bytes.len() - len..bytes.len(),
            })
        };
        Some(head())
    }
}

/// Re-packs bitset words of `bits` bits each into the wire's 64-bit words (the `have` of
/// [`Msg::Attach`] and [`Msg::Held`]).
pub(super) fn pack_words(words: &[u64], bits: u32) -> Vec<u64> {
    if bits == 64 {
        return words.to_vec();
    }
    let mut out = vec![0u64; (words.len() * bits as usize).div_ceil(64)];
    for (i, &w) in words.iter().enumerate() {
        for b in 0..bits as usize {
            if w & (1 << b) != 0 {
                let bit = i * bits as usize + b;
                out[bit / 64] |= 1 << (bit % 64);
            }
        }
    }
    out
}

/// A bitset of `n` chunk positions from wire words (64 positions per word, low bit first).
/// Words past `n` are ignored: a peer cannot make a node allocate beyond its chunk table.
pub(super) fn bits_from_words(n: usize, words: &[u64]) -> FixedBitSet {
    let mut bits = FixedBitSet::with_capacity(n);
    for (w, &word) in words.iter().enumerate().take(n.div_ceil(64)) {
        for b in 0..64 {
            let i = w * 64 + b;
            if i < n && word & (1 << b) != 0 {
                bits.insert(i);
            }
        }
    }
    bits
}

#[cfg(test)]
#[path = "msg_tests.rs"]
mod tests;

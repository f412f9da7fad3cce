//! The push order of a job's chunks ([`Schedule`]): the urgent set first, then the rest,
//! with each chunk's stored size for byte accounting. The order may leave chunks out: those
//! are never streamed, only fetched through the tree by the nodes that read them (the
//! demand-only and urgent-only pushes). One is shared by every relay of a
//! job. It only checks and answers questions about the order; what was sent to whom lives
//! in the relay.

use fixedbitset::FixedBitSet;

use super::ChunkNo;
use crate::error::{Error, Result};

/// The push order of a job's chunks, shared by every relay of a job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schedule {
    /// Chunk-table positions in push order: the urgent set first. Chunks it leaves out
    /// are fetched on demand only.
    pub order: Vec<ChunkNo>,
    /// How many of `order` are urgent.
    pub urgent: usize,
    /// Stored size of each chunk, by chunk-table position (for byte accounting).
    pub sizes: Vec<u32>,
    is_urgent: FixedBitSet,
    is_pushed: FixedBitSet,
    /// Stored bytes of `order[..i]` at `i` ([`Schedule::bytes_between`]).
    before: Vec<u64>,
}

impl Schedule {
    /// Checks that `order` lists chunks of the table at most once each and `urgent <=
    /// order.len()`; the error says which of the two does not hold.
    pub fn new(order: Vec<ChunkNo>, urgent: usize, sizes: Vec<u32>) -> Result<Self> {
        if order.len() > sizes.len() {
            return Err(Error::OrderLength {
                positions: order.len(),
                chunks: sizes.len(),
            });
        }
        if urgent > order.len() {
            return Err(Error::OrderUrgent {
                urgent,
                chunks: order.len(),
            });
        }
        let mut seen = FixedBitSet::with_capacity(sizes.len());
        let mut is_urgent = FixedBitSet::with_capacity(sizes.len());
        for (i, &c) in order.iter().enumerate() {
            let c = c.index();
            if c >= sizes.len() || seen.put(c) {
                return Err(Error::OrderChunk { chunk: c });
            }
            if i < urgent {
                is_urgent.insert(c);
            }
        }
        let before = std::iter::once(0)
            .chain(order.iter().scan(0u64, |sum, c| {
                *sum += u64::from(sizes[c.index()]);
                Some(*sum)
            }))
            .collect();
        Ok(Self {
            order,
            urgent,
            sizes,
            is_urgent,
            is_pushed: seen,
            before,
        })
    }

    /// Number of chunks in the layer.
    pub fn len(&self) -> usize {
        self.sizes.len()
    }

    /// Whether the layer has no chunks at all.
    pub fn is_empty(&self) -> bool {
        self.sizes.is_empty()
    }

    /// Number of chunks the push streams (the rest are fetched on demand only).
    pub fn pushed(&self) -> usize {
        self.order.len()
    }

    /// Whether the push streams a chunk.
    pub fn pushed_chunk(&self, chunk: ChunkNo) -> bool {
        self.is_pushed.contains(chunk.index())
    }

    /// Stored bytes of the chunks at push-order positions `from..to` (0 when `to <= from`;
    /// positions past the order count as its end).
    pub fn bytes_between(&self, from: usize, to: usize) -> u64 {
        let at = |i: usize| self.before[i.min(self.order.len())];
        at(to).saturating_sub(at(from))
    }

    /// Whether a chunk is in the urgent set.
    pub fn urgent_chunk(&self, chunk: ChunkNo) -> bool {
        self.is_urgent.contains(chunk.index())
    }
}

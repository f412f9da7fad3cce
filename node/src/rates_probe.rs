//! A rates probe (`teesfs health --rates`): a health probe that carries filler of a known
//! size down the planned tree ([`peertree::relay::Filler`]), so that the root learns what
//! each edge carried and when each node held the first filler chunk and all of it, the
//! figures a push's report has ([`rates_report`]), and the login node folds them into its
//! learned link rates as it does a push's.
//!
//! On every node the filler is probe payload: its chunks are zeros served from memory by
//! [`FillerChunks`] (one shared buffer), taken by their length only (`JobKnobs::filler`),
//! never verified as content, written to the store, handed to readers or mounted.

use std::sync::Arc;

use bytes::Bytes;
use manifest::{ChunkId, ChunkInfo, Index, IndexId};
use peertree::relay::{Event, Filler, JobId, Phase, Schedule};
use peertree::{Plan, Topology};
use pushreport::PushReport;

use super::health::ProbeOutcome;
use super::job::JobKnobs;

/// The store of a rates probe's filler: every chunk is the same zeros, held in memory;
/// nothing is kept.
pub(crate) struct FillerChunks(Bytes);

impl FillerChunks {
    /// The filler chunks of `filler`.
    pub(crate) fn new(filler: &Filler) -> Self {
        Self(Bytes::from(vec![0u8; filler.chunk_len as usize]))
    }
}

impl seeder::ChunkStore for FillerChunks {
    fn get(&self, _id: &ChunkId) -> Option<seeder::StoredChunk> {
        Some(seeder::StoredChunk::Unchecked(self.0.clone()))
    }
    fn small_reads_are_cheap(&self) -> bool {
        true
    }
    fn get_cached(&self, id: &ChunkId) -> Option<seeder::StoredChunk> {
        self.get(id)
    }
    fn contains(&self, _id: &ChunkId) -> bool {
        false
    }
}

impl manifest::ChunkSink for FillerChunks {
    fn stored_form(&self, _id: &ChunkId, _plain_len: u32) -> Option<manifest::StoredForm> {
        None
    }
    fn put(&self, _id: &ChunkId, _stored: &[u8]) -> std::io::Result<()> {
        Ok(())
    }
}

/// The index a rates probe's job stands on: no entries, one chunk-table row per filler
/// chunk (its size; the id names nothing), so that the job sends and counts the filler as
/// it does a layer's chunks.
pub(crate) fn filler_index(filler: &Filler) -> (Arc<Index>, IndexId) {
    let info = ChunkInfo {
        id: ChunkId([0; 32]),
        plain_len: filler.chunk_len,
        stored_len: filler.chunk_len,
        stored_hash: None,
    };
    let index = Index {
        chunk_size: filler.chunk_len,
        chunks: vec![info; filler.chunks as usize],
        entries: Vec::new(),
        urgent: Vec::new(),
        image: None,
    };
    (Arc::new(index), IndexId([0; 32]))
}

/// What a node's part in a probe stands on: its schedule, index, chunk store and knobs, for
/// the probe's `Start::index` (empty for a plain probe, a filler descriptor for a rates
/// probe; anything else is refused).
pub(crate) struct ProbeJob {
    /// The push order (empty, or the filler's).
    pub schedule: Arc<Schedule>,
    /// The index.
    pub index: Arc<Index>,
    /// Its id.
    pub index_id: IndexId,
    /// Where chunks come from.
    pub bytes: Arc<dyn seeder::ChunkStore>,
    /// The job's knobs (`filler` set for a rates probe).
    pub knobs: JobKnobs,
}

impl ProbeJob {
    /// The probe job of a probe's `Start::index`, with the node's `knobs` (its rate limit
    /// paces a rates probe as it paces a push).
    pub(crate) fn of_start(index: &[u8], knobs: JobKnobs) -> Result<Self, peertree::Error> {
        Ok(match Filler::decode(index)? {
            Some(f) => Self::filler(&f, knobs),
            None => {
                let (index, index_id) = super::health::empty_index();
                ProbeJob {
                    schedule: Arc::new(Schedule::new(Vec::new(), 0, Vec::new()).expect("empty")),
                    index,
                    index_id,
                    bytes: Arc::new(super::health::NoChunks),
                    knobs: JobKnobs::default(),
                }
            }
        })
    }

    /// The job of a rates probe carrying `filler`.
    pub(crate) fn filler(filler: &Filler, knobs: JobKnobs) -> Self {
        let (index, index_id) = filler_index(filler);
        ProbeJob {
            schedule: Arc::new(filler.schedule()),
            index,
            index_id,
            bytes: Arc::new(FillerChunks::new(filler)),
            knobs: JobKnobs {
                filler: true,
                ..knobs
            },
        }
    }
}

/// A rates probe's outcome as a push's report: each edge's bytes, each node's times (the
/// urgent set is the first filler chunk), the failures. The learned rates take their
/// figures from it as from a push's ([`pushreport::rates::observe`]).
pub fn rates_report(
    plan: &Plan,
    topology: Option<&Topology>,
    job: JobId,
    filler: &Filler,
    out: &ProbeOutcome,
) -> PushReport {
    let (index, index_id) = filler_index(filler);
    let order = ((0..filler.chunks).collect::<Vec<u32>>(), 1);
    let done = |phase: Phase| {
        out.events.iter().find_map(|(t, e)| match e {
            Event::JobPhaseDone(p) if *p == phase => Some(*t),
            _ => None,
        })
    };
    let push = super::push::Outcome {
        events: out.events.clone(),
        urgent_s: done(Phase::Urgent),
        all_s: done(Phase::All),
        timed_out: out.timed_out,
        ..super::push::Outcome::default()
    };
    super::push::report(plan, topology, job, index_id, &index, &order, &push)
}

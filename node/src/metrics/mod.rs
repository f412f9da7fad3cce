//! The daemon's Prometheus metrics (`teesfs daemon --metrics ADDR`): what is encoded. The
//! HTTP endpoint that serves it, and who may ask, is [`endpoint`].
//!
//! Most values already live in the daemon's state (the store's totals, each job's
//! counters and phase times), so a scrape reads them into a [`Sample`] and encodes that
//! with `prometheus-client`; only what the state does not keep is counted as it happens,
//! through [`Metrics`] (chunks refused, how long reads of
//! any job waited) and each job's read-wait [`Histogram`].
//!
//! By default the text is about the node only: its store, its links, how many jobs it
//! runs, and traffic and read waits summed over every job since the daemon started
//! (counters that never fall, as released jobs' counts are kept in [`Metrics`]). Which jobs
//! run, and each one's sizes, times and read waits, are for the job's owner and root
//! (`teesfs status`), not for every local user who can reach the endpoint (issue 29 item
//! 6). A site that wants them per job says so (`--metrics-per-job`): then each job's series
//! carry a `job` label and exist while the job is in the daemon's table, which keeps the
//! label's cardinality at the number of running jobs. This module must not do anything but
//! read the daemon's state.

pub mod endpoint;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, MetricEncoder};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::{Registry, Unit};

use super::job::JobCounters;

/// What the daemon counts as it happens, on any path: an atomic add. (The counts of the
/// jobs released are the daemon task's, in its view.)
#[derive(Debug)]
pub struct Metrics {
    refused: Counter,
    /// How long FUSE reads of any job's mount waited for chunks.
    read_waits: Histogram,
}

impl Default for Metrics {
    fn default() -> Self {
        Self {
            refused: Counter::default(),
            read_waits: read_wait_histogram(),
        }
    }
}

impl Metrics {
    /// A chunk arrived that this node does not take: for a job it does not run, or from a
    /// host outside the job's tree.
    pub(crate) fn chunk_refused(&self) {
        self.refused.inc();
    }

    /// Chunks refused so far.
    pub fn refused(&self) -> u64 {
        self.refused.get()
    }

    /// The node-wide read-wait histogram, observed by every job's mount besides its own.
    pub(crate) fn read_waits(&self) -> Histogram {
        self.read_waits.clone()
    }
}

/// A fresh histogram of how long FUSE reads waited for chunks: 1 ms to about a minute,
/// doubling (the read timeout's default is 60 s).
pub(crate) fn read_wait_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 2.0, 17))
}

/// What a job, or all of them together, moved: the counters the metrics show.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Totals {
    /// Chunks received from peers, verified and stored.
    pub chunks_in: u64,
    /// Stored bytes of those.
    pub bytes_in: u64,
    /// Chunks sent to children.
    pub chunks_out: u64,
    /// Stored bytes of those.
    pub bytes_out: u64,
    /// Chunks that failed verification.
    pub bad_chunks: u64,
    /// Demand requests sent to the parent.
    pub wants_sent: u64,
    /// Chunks sent answering children's demands.
    pub demand_served: u64,
    /// Peers given up on (children failed, parents lost).
    pub failed_edges: u64,
}

impl Totals {
    /// A job's counters and its failed edges.
    pub fn of(c: &JobCounters, failed_edges: u64) -> Self {
        Self {
            chunks_in: c.chunks_in,
            bytes_in: c.bytes_in,
            chunks_out: c.chunks_out,
            bytes_out: c.bytes_out,
            bad_chunks: c.bad_chunks,
            wants_sent: c.wants_sent,
            demand_served: c.demand_served,
            failed_edges,
        }
    }

    /// Adds `other` in (saturating: a counter that wrapped would look like a restart).
    pub fn add(&mut self, other: &Totals) {
        let Totals {
            chunks_in,
            bytes_in,
            chunks_out,
            bytes_out,
            bad_chunks,
            wants_sent,
            demand_served,
            failed_edges,
        } = other;
        self.chunks_in = self.chunks_in.saturating_add(*chunks_in);
        self.bytes_in = self.bytes_in.saturating_add(*bytes_in);
        self.chunks_out = self.chunks_out.saturating_add(*chunks_out);
        self.bytes_out = self.bytes_out.saturating_add(*bytes_out);
        self.bad_chunks = self.bad_chunks.saturating_add(*bad_chunks);
        self.wants_sent = self.wants_sent.saturating_add(*wants_sent);
        self.demand_served = self.demand_served.saturating_add(*demand_served);
        self.failed_edges = self.failed_edges.saturating_add(*failed_edges);
    }
}

/// The daemon as one scrape sees it.
#[derive(Debug, Clone, Default)]
pub struct Sample {
    /// Bytes in the chunk store.
    pub store_bytes: u64,
    /// Chunks in the chunk store.
    pub store_chunks: u64,
    /// The store's budget.
    pub store_budget: u64,
    /// What running jobs pin in the store.
    pub store_pinned: u64,
    /// Bytes in the store that no running job pins.
    pub store_cached: u64,
    /// QUIC links open to other nodes.
    pub peer_links: u64,
    /// Chunks refused ([`Metrics::chunk_refused`]).
    pub refused: u64,
    /// Every job's counts since the daemon started: the released ones' (kept by the
    /// daemon task) and the running ones'.
    pub totals: Totals,
    /// How long reads of any job's mount waited ([`Metrics::read_waits`]); `None` leaves
    /// the node-wide histogram out.
    pub read_waits: Option<Histogram>,
    /// Times the endpoint rendered the text, this time included.
    pub renders: u64,
    /// The CPU quota the daemon runs under, in cores (`None`: none).
    pub cpu_quota: Option<f64>,
    /// Seconds bulk streams waited so that applications got the daemon's CPU
    /// ([`crate::bulk_gate`]).
    pub bulk_yielded_s: f64,
    /// The running jobs (health probes left out).
    pub jobs: Vec<JobSample>,
}

/// One job in a [`Sample`].
#[derive(Debug, Clone)]
pub struct JobSample {
    /// The job id as its `job` label shows it (decimal: a Slurm job's own id).
    pub job: String,
    /// Stored bytes of the job's chunks the store holds.
    pub store_bytes: u64,
    /// The job's chunks the store holds.
    pub store_chunks: u64,
    /// The job's traffic counts.
    pub totals: Totals,
    /// Seconds after the job arrived when this node held the urgent set.
    pub urgent_s: Option<f64>,
    /// Seconds after the job arrived when this node held the whole layer.
    pub all_s: Option<f64>,
    /// How long FUSE reads of the job's mount waited for chunks.
    pub read_waits: Histogram,
}

/// How much the text tells.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Detail {
    /// Node-wide values only: no job is named (the default).
    #[default]
    Node,
    /// Each running job's series too, labelled with its id (`--metrics-per-job`).
    PerJob,
}

type Labels = [(&'static str, String); 1];

/// How a `u64` the daemon keeps is exposed: a counter only grows, a gauge may fall.
#[derive(Debug, Clone, Copy)]
enum Count {
    Counter,
    Gauge,
}

impl Count {
    fn metric_type(self) -> MetricType {
        match self {
            Count::Counter => MetricType::Counter,
            Count::Gauge => MetricType::Gauge,
        }
    }

    fn encode(self, v: u64, m: MetricEncoder<'_>) -> std::fmt::Result {
        match self {
            Count::Counter => ConstCounter::new(v).encode(m),
            Count::Gauge => ConstGauge::new(i64::try_from(v).unwrap_or(i64::MAX)).encode(m),
        }
    }
}

/// One unlabelled series.
fn single(
    enc: &mut DescriptorEncoder<'_>,
    kind: Count,
    (name, help, unit): (&str, &str, Option<&Unit>),
    v: u64,
) -> std::fmt::Result {
    kind.encode(
        v,
        enc.encode_descriptor(name, help, unit, kind.metric_type())?,
    )
}

/// A traffic counter: its name, what it counts, whether in bytes, and where the count is.
type CountSpec = (&'static str, &'static str, bool, fn(&Totals) -> u64);

/// The traffic counters, shown summed over the node or per job.
const COUNTS: [CountSpec; 8] = [
    (
        "teesfs_chunks_received",
        "Chunks received from peers, verified and stored",
        false,
        |t| t.chunks_in,
    ),
    (
        "teesfs_received",
        "Stored bytes of chunks received from peers",
        true,
        |t| t.bytes_in,
    ),
    (
        "teesfs_chunks_forwarded",
        "Chunks sent to children (pushed and on demand)",
        false,
        |t| t.chunks_out,
    ),
    (
        "teesfs_forwarded",
        "Stored bytes of chunks sent to children",
        true,
        |t| t.bytes_out,
    ),
    (
        "teesfs_chunks_corrupt",
        "Chunks that failed verification against the index (the sender is dropped as parent)",
        false,
        |t| t.bad_chunks,
    ),
    (
        "teesfs_demand_requests",
        "Demand requests this node sent to its parent (reads that found a chunk missing)",
        false,
        |t| t.wants_sent,
    ),
    (
        "teesfs_demand_served",
        "Chunks this node sent answering its children's demand requests",
        false,
        |t| t.demand_served,
    ),
    (
        "teesfs_failed_edges",
        "Peers this node gave up on: children failed and parents lost",
        false,
        |t| t.failed_edges,
    ),
];

/// A [`Sample`] as the endpoint encodes it.
#[derive(Debug)]
struct Scrape {
    sample: Sample,
    detail: Detail,
}

impl Scrape {
    /// One series per job of a per-job value; nothing (not even the HELP line) without
    /// jobs, as a family with no series says nothing.
    fn per_job<T: Copy>(
        &self,
        enc: &mut DescriptorEncoder<'_>,
        (name, help, unit, kind): (&str, &str, Option<&Unit>, MetricType),
        value: impl Fn(&JobSample) -> Option<T>,
        encode: impl Fn(T, MetricEncoder<'_>) -> std::fmt::Result,
    ) -> std::fmt::Result {
        let values: Vec<(Labels, T)> = self
            .sample
            .jobs
            .iter()
            .filter_map(|j| value(j).map(|v| ([("job", j.job.clone())], v)))
            .collect();
        if values.is_empty() {
            return Ok(());
        }
        let mut m = enc.encode_descriptor(name, help, unit, kind)?;
        for (labels, v) in &values {
            encode(*v, m.encode_family(labels)?)?;
        }
        Ok(())
    }

    /// A per-job count as a counter or, for a value that can fall, a gauge.
    fn job_u64(
        &self,
        enc: &mut DescriptorEncoder<'_>,
        kind: Count,
        (name, help, unit): (&str, &str, Option<&Unit>),
        value: impl Fn(&JobSample) -> u64,
    ) -> std::fmt::Result {
        self.per_job(
            enc,
            (name, help, unit, kind.metric_type()),
            |j| Some(value(j)),
            |v, m| kind.encode(v, m),
        )
    }

    fn job_gauge(
        &self,
        enc: &mut DescriptorEncoder<'_>,
        name: &str,
        help: &str,
        unit: Option<&Unit>,
        value: impl Fn(&JobSample) -> Option<f64>,
    ) -> std::fmt::Result {
        self.per_job(enc, (name, help, unit, MetricType::Gauge), value, |v, m| {
            ConstGauge::new(v).encode(m)
        })
    }

    /// What every text has, whatever its detail.
    fn node(&self, e: &mut DescriptorEncoder<'_>) -> std::fmt::Result {
        let s = &self.sample;
        let bytes_unit = Unit::Bytes;
        let bytes = Some(&bytes_unit);
        let g = Count::Gauge;
        single(
            e,
            g,
            ("teesfs_store", "Bytes in the node's chunk store.", bytes),
            s.store_bytes,
        )?;
        let help = "Chunks in the node's chunk store.";
        single(e, g, ("teesfs_store_chunks", help, None), s.store_chunks)?;
        let help = "The chunk store's byte budget (--store-budget).";
        single(e, g, ("teesfs_store_budget", help, bytes), s.store_budget)?;
        let help = "What the running jobs pin in the chunk store (kept from eviction).";
        single(e, g, ("teesfs_store_pinned", help, bytes), s.store_pinned)?;
        let help = "Bytes in the chunk store that no running job pins (evicted first).";
        single(e, g, ("teesfs_store_cached", help, bytes), s.store_cached)?;
        single(
            e,
            g,
            ("teesfs_peers", "QUIC links open to other nodes.", None),
            s.peer_links,
        )?;
        let help = "Jobs the node runs (health probes left out).";
        single(e, g, ("teesfs_jobs", help, None), s.jobs.len() as u64)?;
        let help = "Chunks not taken: for a job this node does not run, or from a host outside the job's tree.";
        single(
            e,
            Count::Counter,
            ("teesfs_chunks_refused", help, None),
            s.refused,
        )?;
        let help = "Seconds pushed chunks waited so that applications on the mounts got the daemon's CPU quota.";
        let secs = Unit::Seconds;
        ConstCounter::new(s.bulk_yielded_s).encode(e.encode_descriptor(
            "teesfs_bulk_yielded",
            help,
            Some(&secs),
            MetricType::Counter,
        )?)?;
        if let Some(q) = s.cpu_quota {
            let help = "The CPU quota of the daemon's cgroup, in cores (absent: none).";
            let m = e.encode_descriptor("teesfs_cpu_quota_cores", help, None, MetricType::Gauge)?;
            ConstGauge::new(q).encode(m)?;
        }
        let help = "Times the endpoint rendered this text (scrapes within a second of a render get that text again).";
        single(
            e,
            Count::Counter,
            ("teesfs_metrics_renders", help, None),
            s.renders,
        )
    }

    /// The node-wide sums: counters of every job since the daemon started, and how long
    /// reads of any job waited.
    fn summed(&self, e: &mut DescriptorEncoder<'_>) -> std::fmt::Result {
        let bytes_unit = Unit::Bytes;
        for (name, what, in_bytes, field) in COUNTS {
            let help = format!("{what}, for every job since the daemon started.");
            let unit = in_bytes.then_some(&bytes_unit);
            single(
                e,
                Count::Counter,
                (name, &help, unit),
                field(&self.sample.totals),
            )?;
        }
        if let Some(h) = &self.sample.read_waits {
            let m = e.encode_descriptor(
                "teesfs_read_wait",
                "How long FUSE reads of any job's mount waited for chunks not yet on this node.",
                Some(&Unit::Seconds),
                MetricType::Histogram,
            )?;
            h.encode(m)?;
        }
        Ok(())
    }

    /// Each job's series, labelled with its id.
    fn jobs(&self, e: &mut DescriptorEncoder<'_>) -> std::fmt::Result {
        let (bytes_unit, seconds_unit) = (Unit::Bytes, Unit::Seconds);
        let (bytes, seconds) = (Some(&bytes_unit), Some(&seconds_unit));
        // Gauges, not counters: chunks leave the store when it evicts them.
        let help = "Stored bytes of the job's chunks held in the node's store (chunks shared with other jobs count in each).";
        self.job_u64(e, Count::Gauge, ("teesfs_job_store", help, bytes), |j| {
            j.store_bytes
        })?;
        let help = "The job's chunks held in the node's store.";
        let name = "teesfs_job_store_chunks";
        self.job_u64(e, Count::Gauge, (name, help, None), |j| j.store_chunks)?;
        for (name, what, in_bytes, field) in COUNTS {
            let help = format!("{what}, for the job.");
            let unit = if in_bytes { bytes } else { None };
            self.job_u64(e, Count::Counter, (name, &help, unit), |j| field(&j.totals))?;
        }
        self.job_gauge(
            e,
            "teesfs_job_urgent",
            "Seconds after the job arrived when this node held its urgent set (absent until then).",
            seconds,
            |j| j.urgent_s,
        )?;
        self.job_gauge(
            e,
            "teesfs_job_whole_layer",
            "Seconds after the job arrived when this node held the whole layer (absent until then).",
            seconds,
            |j| j.all_s,
        )?;
        if !self.sample.jobs.is_empty() {
            let mut m = e.encode_descriptor(
                "teesfs_read_wait",
                "How long FUSE reads of the job's mount waited for chunks not yet on this node.",
                seconds,
                MetricType::Histogram,
            )?;
            for j in &self.sample.jobs {
                let labels: Labels = [("job", j.job.clone())];
                j.read_waits.encode(m.encode_family(&labels)?)?;
            }
        }
        Ok(())
    }
}

impl Collector for Scrape {
    fn encode(&self, mut enc: DescriptorEncoder<'_>) -> std::fmt::Result {
        self.node(&mut enc)?;
        match self.detail {
            Detail::Node => self.summed(&mut enc),
            Detail::PerJob => self.jobs(&mut enc),
        }
    }
}

/// `sample` in the Prometheus (OpenMetrics) text format, telling as much as `detail`.
pub fn encode(sample: Sample, detail: Detail) -> Result<String, std::fmt::Error> {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(Scrape { sample, detail }));
    let mut out = String::new();
    prometheus_client::encoding::text::encode(&mut out, &registry)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(name: &str, waited: &[f64]) -> JobSample {
        let read_waits = read_wait_histogram();
        for w in waited {
            read_waits.observe(*w);
        }
        JobSample {
            job: name.to_string(),
            store_bytes: 3 << 20,
            store_chunks: 3,
            totals: Totals {
                chunks_in: 3,
                failed_edges: 1,
                ..Totals::default()
            },
            urgent_s: Some(0.5),
            all_s: None,
            read_waits,
        }
    }

    fn sample() -> Sample {
        let read_waits = read_wait_histogram();
        read_waits.observe(0.003);
        read_waits.observe(0.2);
        Sample {
            store_bytes: 3 << 20,
            store_chunks: 3,
            store_budget: 1 << 30,
            store_pinned: 2 << 20,
            store_cached: 1 << 20,
            peer_links: 2,
            refused: 4,
            totals: Totals {
                chunks_in: 7,
                bytes_in: 7 << 20,
                failed_edges: 1,
                ..Totals::default()
            },
            read_waits: Some(read_waits),
            renders: 1,
            cpu_quota: Some(0.25),
            bulk_yielded_s: 1.5,
            jobs: vec![job("4242", &[0.003, 0.2])],
        }
    }

    fn families(text: &str) -> Vec<&str> {
        let families: Vec<&str> = text
            .lines()
            .filter_map(|l| l.strip_prefix("# TYPE "))
            .filter_map(|l| l.split(' ').next())
            .collect();
        for f in &families {
            assert!(f.starts_with("teesfs_"), "{f}");
            assert!(text.contains(&format!("# HELP {f} ")), "no HELP for {f}");
        }
        families
    }

    #[test]
    fn every_series_is_named_with_its_unit_and_has_help() {
        let text = encode(sample(), Detail::PerJob).expect("encodes");
        for line in [
            "teesfs_store_bytes 3145728",
            "teesfs_store_pinned_bytes 2097152",
            "teesfs_store_cached_bytes 1048576",
            "teesfs_chunks_refused_total 4",
            "teesfs_peers 2",
            "teesfs_jobs 1",
            "teesfs_job_store_bytes{job=\"4242\"} 3145728",
            "teesfs_chunks_received_total{job=\"4242\"} 3",
            "teesfs_failed_edges_total{job=\"4242\"} 1",
            "teesfs_job_urgent_seconds{job=\"4242\"} 0.5",
            "teesfs_read_wait_seconds_count{job=\"4242\"} 2",
            "teesfs_bulk_yielded_seconds_total 1.5",
            "teesfs_cpu_quota_cores 0.25",
        ] {
            assert!(text.lines().any(|l| l == line), "no {line:?} in\n{text}");
        }
        // One of the two waits is within 4 ms.
        assert!(
            text.lines()
                .any(|l| l.starts_with("teesfs_read_wait_seconds_bucket{")
                    && l.contains("le=\"0.004\"")
                    && l.contains("job=\"4242\"")
                    && l.ends_with(" 1")),
            "{text}"
        );
        // A phase not reached yet has no series.
        assert!(!text.contains("teesfs_job_whole_layer_seconds{"), "{text}");
        assert!(families(&text).len() >= 15, "{text}");
    }

    /// Issue 29 item 6: the text named every job, with its sizes, times and read waits,
    /// to every local user who could reach the endpoint. By default it names none: the
    /// node's sums only.
    #[test]
    fn per_job_series_are_absent_by_default_and_the_node_sums_are_there() {
        let text = encode(sample(), Detail::default()).expect("encodes");
        assert!(!text.contains("job=\""), "{text}");
        assert!(!text.contains("4242"), "{text}");
        assert!(!text.contains("teesfs_job_"), "{text}");
        for line in [
            "teesfs_jobs 1",
            "teesfs_chunks_received_total 7",
            "teesfs_received_bytes_total 7340032",
            "teesfs_failed_edges_total 1",
            "teesfs_read_wait_seconds_count 2",
            "teesfs_metrics_renders_total 1",
        ] {
            assert!(text.lines().any(|l| l == line), "no {line:?} in\n{text}");
        }
        assert!(families(&text).len() >= 15, "{text}");
    }

    #[test]
    fn without_jobs_no_job_series_remain() {
        let text = encode(Sample::default(), Detail::PerJob).expect("encodes");
        assert!(!text.contains("job=\""), "{text}");
        assert!(text.contains("teesfs_store_bytes 0"), "{text}");
    }

    #[test]
    fn released_jobs_keep_counting_in_the_node_totals() {
        let mut retired = Totals::default();
        let job = Totals {
            chunks_in: 2,
            bytes_in: 10,
            ..Totals::default()
        };
        retired.add(&job);
        retired.add(&job);
        assert_eq!(retired.chunks_in, 4);
        assert_eq!(retired.bytes_in, 20);
        let mut t = Totals {
            bytes_in: u64::MAX,
            ..Totals::default()
        };
        t.add(&job);
        assert_eq!(t.bytes_in, u64::MAX, "saturates");
    }
}

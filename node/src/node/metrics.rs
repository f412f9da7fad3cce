//! The daemon's Prometheus metrics (`teesfs daemon --metrics ADDR`): what is encoded, and
//! the small HTTP endpoint that serves it at `GET /metrics`.
//!
//! Most values already live in the daemon's state (the store's totals, each job's
//! counters and phase times), so a scrape reads them into a [`Sample`] and encodes that
//! with `prometheus-client`; only what the state does not keep is counted as it happens,
//! through [`Metrics`] (chunks refused) and each job's read-wait [`Histogram`]. A job's
//! series exist while the job is in the daemon's table: releasing it drops them, which
//! keeps the `job` label's cardinality at the number of running jobs.
//!
//! The endpoint answers one request per connection (HTTP/1.0 style, `Connection: close`),
//! reads at most [`MAX_REQUEST`] bytes of request head, gives a client [`CLIENT_TIMEOUT`] to
//! send it and read the answer, and serves at most [`MAX_CLIENTS`] at once: a slow or
//! hostile client costs a bounded task, never the daemon's network or FUSE tasks. It must
//! not do anything but read the daemon's state.

use std::sync::Arc;
use std::time::Duration;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, MetricEncoder};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::{Registry, Unit};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::job::JobCounters;

/// The largest request head read; a longer one is answered 431 and closed.
pub const MAX_REQUEST: usize = 8 << 10;
/// How long a client has to send its request, and then to take the answer.
pub const CLIENT_TIMEOUT: Duration = Duration::from_secs(5);
/// Clients served at once; more are closed without an answer until one finishes.
pub const MAX_CLIENTS: usize = 8;

/// What the daemon counts as it happens. Cheap to call on any path: an atomic add.
#[derive(Debug, Default)]
pub struct Metrics {
    refused: Counter,
}

impl Metrics {
    /// A chunk arrived that this node does not take: for a job it does not run, or from a
    /// host outside the job's tree.
    pub fn chunk_refused(&self) {
        self.refused.inc();
    }

    /// Chunks refused so far.
    pub fn refused(&self) -> u64 {
        self.refused.get()
    }
}

/// A fresh histogram of how long FUSE reads waited for chunks: 1 ms to about a minute,
/// doubling (the read timeout's default is 60 s).
pub fn read_wait_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 2.0, 17))
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
    /// QUIC links open to other nodes.
    pub peer_links: u64,
    /// Chunks refused ([`Metrics::chunk_refused`]).
    pub refused: u64,
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
    /// The job's traffic counters.
    pub counters: JobCounters,
    /// Peers of the job this node gave up on (children failed, parents lost).
    pub failed_edges: u64,
    /// Seconds after the job arrived when this node held the urgent set.
    pub urgent_s: Option<f64>,
    /// Seconds after the job arrived when this node held the whole layer.
    pub all_s: Option<f64>,
    /// How long FUSE reads of the job's mount waited for chunks.
    pub read_waits: Histogram,
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

fn gauge(
    enc: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    unit: Option<&Unit>,
    v: u64,
) -> std::fmt::Result {
    Count::Gauge.encode(
        v,
        enc.encode_descriptor(name, help, unit, Count::Gauge.metric_type())?,
    )
}

fn counter(enc: &mut DescriptorEncoder<'_>, name: &str, help: &str, v: u64) -> std::fmt::Result {
    Count::Counter.encode(
        v,
        enc.encode_descriptor(name, help, None, Count::Counter.metric_type())?,
    )
}

impl Sample {
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
        name: &str,
        help: &str,
        unit: Option<&Unit>,
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
}

impl Collector for Sample {
    fn encode(&self, mut enc: DescriptorEncoder<'_>) -> std::fmt::Result {
        let (bytes_unit, seconds_unit) = (Unit::Bytes, Unit::Seconds);
        let (bytes, seconds) = (Some(&bytes_unit), Some(&seconds_unit));
        let e = &mut enc;
        gauge(
            e,
            "teesfs_store",
            "Bytes in the node's chunk store.",
            bytes,
            self.store_bytes,
        )?;
        gauge(
            e,
            "teesfs_store_chunks",
            "Chunks in the node's chunk store.",
            None,
            self.store_chunks,
        )?;
        gauge(
            e,
            "teesfs_store_budget",
            "The chunk store's byte budget (--store-budget).",
            bytes,
            self.store_budget,
        )?;
        gauge(
            e,
            "teesfs_peers",
            "QUIC links open to other nodes.",
            None,
            self.peer_links,
        )?;
        counter(
            e,
            "teesfs_chunks_refused",
            "Chunks not taken: for a job this node does not run, or from a host outside the job's tree.",
            self.refused,
        )?;
        // Gauges, not counters: chunks leave the store when it evicts them.
        self.job_u64(
            e,
            Count::Gauge,
            "teesfs_job_store",
            "Stored bytes of the job's chunks held in the node's store (chunks shared with other jobs count in each).",
            bytes,
            |j| j.store_bytes,
        )?;
        self.job_u64(
            e,
            Count::Gauge,
            "teesfs_job_store_chunks",
            "The job's chunks held in the node's store.",
            None,
            |j| j.store_chunks,
        )?;
        self.job_u64(
            e,
            Count::Counter,
            "teesfs_chunks_received",
            "Chunks of the job received from peers, verified and stored.",
            None,
            |j| j.counters.chunks_in,
        )?;
        self.job_u64(
            e,
            Count::Counter,
            "teesfs_received",
            "Stored bytes of the job's chunks received from peers.",
            bytes,
            |j| j.counters.bytes_in,
        )?;
        self.job_u64(
            e,
            Count::Counter,
            "teesfs_chunks_forwarded",
            "Chunks of the job sent to children (pushed and on demand).",
            None,
            |j| j.counters.chunks_out,
        )?;
        self.job_u64(
            e,
            Count::Counter,
            "teesfs_forwarded",
            "Stored bytes of the job's chunks sent to children.",
            bytes,
            |j| j.counters.bytes_out,
        )?;
        self.job_u64(
            e,
            Count::Counter,
            "teesfs_chunks_corrupt",
            "Chunks of the job that failed verification against the index (the sender is dropped as parent).",
            None,
            |j| j.counters.bad_chunks,
        )?;
        self.job_u64(
            e,
            Count::Counter,
            "teesfs_demand_requests",
            "Demand requests for the job's chunks this node sent to its parent (reads that found a chunk missing).",
            None,
            |j| j.counters.wants_sent,
        )?;
        self.job_u64(
            e,
            Count::Counter,
            "teesfs_demand_served",
            "Chunks of the job this node sent answering its children's demand requests.",
            None,
            |j| j.counters.demand_served,
        )?;
        self.job_u64(
            e,
            Count::Counter,
            "teesfs_failed_edges",
            "Peers of the job this node gave up on: children failed and parents lost.",
            None,
            |j| j.failed_edges,
        )?;
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
        if !self.jobs.is_empty() {
            let mut m = e.encode_descriptor(
                "teesfs_read_wait",
                "How long FUSE reads of the job's mount waited for chunks not yet on this node.",
                seconds,
                MetricType::Histogram,
            )?;
            for j in &self.jobs {
                let labels: Labels = [("job", j.job.clone())];
                j.read_waits.encode(m.encode_family(&labels)?)?;
            }
        }
        Ok(())
    }
}

/// `sample` in the Prometheus (OpenMetrics) text format.
pub fn encode(sample: Sample) -> Result<String, std::fmt::Error> {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(sample));
    let mut out = String::new();
    prometheus_client::encoding::text::encode(&mut out, &registry)?;
    Ok(out)
}

/// What a request head asks for.
#[derive(Debug, PartialEq, Eq)]
pub enum Request {
    /// `GET /metrics` (`HEAD` too: the answer without its body).
    Metrics {
        /// Whether to send the body.
        body: bool,
    },
    /// Another path.
    NotFound,
    /// Another method.
    BadMethod,
    /// Not an HTTP request line.
    Malformed,
}

/// Reads an HTTP request head's first line. Query strings are ignored.
pub fn parse_request(head: &[u8]) -> Request {
    let line = head.split(|&b| b == b'\n').next().unwrap_or_default();
    let Ok(line) = std::str::from_utf8(line) else {
        return Request::Malformed;
    };
    let mut parts = line.trim_end_matches('\r').split(' ');
    let (Some(method), Some(target), Some(version)) = (parts.next(), parts.next(), parts.next())
    else {
        return Request::Malformed;
    };
    if !version.starts_with("HTTP/1.") || parts.next().is_some() {
        return Request::Malformed;
    }
    let body = match method {
        "GET" => true,
        "HEAD" => false,
        _ => return Request::BadMethod,
    };
    match target.split('?').next() {
        Some("/metrics") => Request::Metrics { body },
        _ => Request::NotFound,
    }
}

/// Where a scrape's [`Sample`] comes from: `None` once the daemon is gone. Called on the
/// blocking pool (it walks every job's chunk list).
pub type SampleFn = Arc<dyn Fn() -> Option<Sample> + Send + Sync>;

/// Serves `GET /metrics` on `listener` until the task is dropped.
pub async fn serve(listener: TcpListener, sample: SampleFn) {
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CLIENTS));
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(s) => s,
            Err(e) => {
                // Out of file descriptors and the like: the next accept may work.
                tracing::warn!(error = %e, "metrics endpoint: accept failed");
                continue;
            }
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            tracing::debug!(%peer, "metrics endpoint busy; closing a connection");
            continue;
        };
        let sample = sample.clone();
        tokio::spawn(async move {
            if let Err(e) = answer(stream, sample).await {
                tracing::debug!(%peer, error = %e, "metrics request failed");
            }
            drop(slot);
        });
    }
}

/// Reads the request head: up to the blank line, at most [`MAX_REQUEST`] bytes. `None`
/// when it is longer.
async fn read_head(stream: &mut TcpStream) -> std::io::Result<Option<Vec<u8>>> {
    let mut head = Vec::with_capacity(512);
    let mut buf = [0u8; 1024];
    loop {
        let n = stream.read(&mut buf).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        head.extend_from_slice(&buf[..n]);
        if head.windows(4).any(|w| w == b"\r\n\r\n") || head.windows(2).any(|w| w == b"\n\n") {
            return Ok(Some(head));
        }
        if head.len() > MAX_REQUEST {
            return Ok(None);
        }
    }
}

async fn answer(mut stream: TcpStream, sample: SampleFn) -> std::io::Result<()> {
    let timed_out = || std::io::Error::from(std::io::ErrorKind::TimedOut);
    let head = tokio::time::timeout(CLIENT_TIMEOUT, read_head(&mut stream))
        .await
        .map_err(|_| timed_out())??;
    let (status, content_type, body, send_body) = match head.as_deref().map(parse_request) {
        None => (
            "431 Request Header Fields Too Large",
            "text/plain",
            "request too large\n".to_string(),
            true,
        ),
        Some(Request::Metrics { body }) => {
            let encoded = tokio::task::spawn_blocking(move || sample().map(encode))
                .await
                .ok()
                .flatten();
            match encoded {
                Some(Ok(text)) => (
                    "200 OK",
                    "application/openmetrics-text; version=1.0.0; charset=utf-8",
                    text,
                    body,
                ),
                _ => (
                    "503 Service Unavailable",
                    "text/plain",
                    "the daemon is stopping\n".to_string(),
                    body,
                ),
            }
        }
        Some(Request::NotFound) => (
            "404 Not Found",
            "text/plain",
            "teesfs serves only /metrics\n".to_string(),
            true,
        ),
        Some(Request::BadMethod) => (
            "405 Method Not Allowed",
            "text/plain",
            "use GET /metrics\n".to_string(),
            true,
        ),
        Some(Request::Malformed) => (
            "400 Bad Request",
            "text/plain",
            "not an HTTP request; use GET /metrics\n".to_string(),
            true,
        ),
    };
    let mut out = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    if send_body {
        out.extend_from_slice(body.as_bytes());
    }
    tokio::time::timeout(CLIENT_TIMEOUT, async {
        stream.write_all(&out).await?;
        stream.shutdown().await
    })
    .await
    .map_err(|_| timed_out())?
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
            counters: JobCounters {
                chunks_in: 3,
                ..JobCounters::default()
            },
            failed_edges: 1,
            urgent_s: Some(0.5),
            all_s: None,
            read_waits,
        }
    }

    #[test]
    fn every_series_is_named_with_its_unit_and_has_help() {
        let text = encode(Sample {
            store_bytes: 3 << 20,
            store_chunks: 3,
            store_budget: 1 << 30,
            peer_links: 2,
            refused: 4,
            jobs: vec![job("4242", &[0.003, 0.2])],
        })
        .expect("encodes");
        for line in [
            "teesfs_store_bytes 3145728",
            "teesfs_chunks_refused_total 4",
            "teesfs_peers 2",
            "teesfs_job_store_bytes{job=\"4242\"} 3145728",
            "teesfs_chunks_received_total{job=\"4242\"} 3",
            "teesfs_failed_edges_total{job=\"4242\"} 1",
            "teesfs_job_urgent_seconds{job=\"4242\"} 0.5",
            "teesfs_read_wait_seconds_count{job=\"4242\"} 2",
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
        let families: Vec<&str> = text
            .lines()
            .filter_map(|l| l.strip_prefix("# TYPE "))
            .filter_map(|l| l.split(' ').next())
            .collect();
        assert!(families.len() >= 15, "{families:?}");
        for f in &families {
            assert!(f.starts_with("teesfs_"), "{f}");
            assert!(text.contains(&format!("# HELP {f} ")), "no HELP for {f}");
        }
    }

    #[test]
    fn without_jobs_no_job_series_remain() {
        let text = encode(Sample::default()).expect("encodes");
        assert!(!text.contains("job=\""), "{text}");
        assert!(text.contains("teesfs_store_bytes 0"), "{text}");
    }

    #[test]
    fn requests_are_routed_by_method_and_path() {
        assert_eq!(
            parse_request(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"),
            Request::Metrics { body: true }
        );
        assert_eq!(
            parse_request(b"HEAD /metrics?x=1 HTTP/1.0\r\n\r\n"),
            Request::Metrics { body: false }
        );
        assert_eq!(parse_request(b"GET / HTTP/1.1\r\n\r\n"), Request::NotFound);
        assert_eq!(
            parse_request(b"POST /metrics HTTP/1.1\r\n\r\n"),
            Request::BadMethod
        );
        assert_eq!(parse_request(b"\x16\x03\x01garbage"), Request::Malformed);
        assert_eq!(parse_request(b"GET /metrics\r\n\r\n"), Request::Malformed);
    }
}

//! `teesfs learn`: the login node asks every node of a finished job for its record of the
//! job ([`Msg::AskRecord`] over QUIC with the cluster's mutual TLS, the daemons keep the
//! records of their last released jobs) and collects the answers until every node answered
//! or a deadline passed. A node that is dead, unreachable or has no record is named in
//! [`Gathered::skipped`], never an error: what the others recorded is still worth merging
//! (`seeder::learned::merge` does that; this module only moves the records). At most
//! [`IN_FLIGHT`] nodes are asked at once, and a node's connection is closed as soon as it
//! answered, so a job of thousands of nodes costs the login node a bounded number of
//! connections.

use std::collections::{BTreeMap, HashSet};
use std::net::SocketAddr;
use std::sync::{Arc, Weak};
use std::time::Duration;

use peertree::relay::{JobId, Msg, Routed};
use tokio::sync::mpsc;

use super::control::{JobRecord, RecordAnswer};
use super::peers::{Peers, Pending, Router, Ticket, frame};
use crate::Error;
use crate::net::{Identity, StreamKind, Transport};

/// Nodes asked at once; the next is asked as one answers.
pub(crate) const IN_FLIGHT: usize = 256;

/// Whom to ask, as whom.
pub struct AskSpec {
    /// The job.
    pub job: JobId,
    /// The job's nodes: host name and daemon address (`host:port`).
    pub nodes: Vec<(String, String)>,
    /// The login node's credentials.
    pub identity: Identity,
    /// Where to listen for the answers (port 0 for any).
    pub listen: SocketAddr,
    /// How the nodes reach this endpoint (`host:port`, port 0 for the bound one); default:
    /// the login node's host name and the bound port.
    pub advertise: Option<String>,
    /// Give up on nodes that have not answered by then.
    pub deadline: Duration,
}

/// What the nodes answered.
#[derive(Debug, Default)]
pub struct Gathered {
    /// The records, in the order of the nodes asked.
    pub records: Vec<JobRecord>,
    /// Nodes without a record, each with why (no answer, unreachable, no such job, a
    /// record of nothing), in the order of the nodes asked.
    pub skipped: Vec<(String, String)>,
}

/// One node's answer as it arrives.
type Answer = (String, NodeAnswer);

/// What a node answered.
#[derive(Debug)]
enum NodeAnswer {
    /// Its record's JSON (a record, or why it has none).
    Json(Vec<u8>),
    /// It could not be reached (why).
    Unreachable(String),
}

/// Hands the answers of one job to [`gather`].
struct Collector {
    job: JobId,
    tx: mpsc::UnboundedSender<Answer>,
}

impl Router for Collector {
    fn deliver(&self, from_host: &str, job: JobId, msg: Routed, _: Ticket) -> Option<Pending> {
        match msg {
            Routed::Record { json } if job == self.job => {
                let _ = self
                    .tx
                    .send((from_host.to_string(), NodeAnswer::Json(json)));
            }
            _ => tracing::debug!(peer = %from_host, %job, "not an answer to this learn; ignored"),
        }
        None
    }

    fn unreachable(&self, host: &str, why: &str) {
        let _ = self.tx.send((
            host.to_string(),
            NodeAnswer::Unreachable(format!("unreachable: {why}")),
        ));
    }
}

/// Asks every node of `spec` for its record of the job and waits for the answers, at most
/// until the deadline.
pub async fn gather(spec: AskSpec) -> Result<Gathered, Error> {
    use tracing::Instrument as _;
    let span = tracing::info_span!("learn", job = %spec.job);
    ask_all(spec).instrument(span).await
}

async fn ask_all(spec: AskSpec) -> Result<Gathered, Error> {
    let transport = Transport::bind(spec.listen, &spec.identity)?;
    let reply = super::advertised(
        spec.advertise.as_deref(),
        &spec.identity.host,
        transport.local_addr(),
    );
    let peers = Peers::new(transport);
    let (tx, mut rx) = mpsc::unbounded_channel();
    let router: Arc<dyn Router> = Arc::new(Collector { job: spec.job, tx });
    peers.set_router(Arc::downgrade(&router) as Weak<dyn Router>);
    tokio::spawn(peers.clone().accept_loop());
    let ask = frame(spec.job, &Msg::AskRecord { reply });
    let mut queue = spec.nodes.iter();
    let ask_next = |queue: &mut std::slice::Iter<'_, (String, String)>| {
        if let Some((host, addr)) = queue.next() {
            peers.send(host, addr, StreamKind::Control, ask.clone());
        }
    };
    for _ in 0..IN_FLIGHT {
        ask_next(&mut queue);
    }
    let until = tokio::time::Instant::now() + spec.deadline;
    let wanted: HashSet<&str> = spec.nodes.iter().map(|(h, _)| h.as_str()).collect();
    let mut answers: BTreeMap<String, NodeAnswer> = BTreeMap::new();
    while answers.len() < wanted.len() {
        let (host, answer) = tokio::select! {
            a = rx.recv() => match a {
                Some(a) => a,
                None => break,
            },
            _ = tokio::time::sleep_until(until) => break,
        };
        // The first word of a node counts (a record after "unreachable" cannot come).
        if wanted.contains(host.as_str()) && !answers.contains_key(&host) {
            tracing::debug!(peer = %host, ok = matches!(answer, NodeAnswer::Json(_)), "answer");
            peers.disconnect(&host);
            answers.insert(host, answer);
            ask_next(&mut queue);
        }
    }
    peers.close();
    drop(router);
    let order = spec.nodes.iter().map(|(h, _)| h.clone());
    Ok(sort_answers(order, answers, spec.deadline))
}

/// The answers of the nodes `asked` made into records and skipped nodes: a node that did
/// not answer, answered with no record, a record of nothing or something unreadable is
/// skipped with the reason.
fn sort_answers(
    asked: impl Iterator<Item = String>,
    mut answers: BTreeMap<String, NodeAnswer>,
    deadline: Duration,
) -> Gathered {
    let mut out = Gathered::default();
    for host in asked {
        let why = match answers.remove(&host) {
            None => format!("no answer within {:.0?}", deadline),
            Some(NodeAnswer::Unreachable(e)) => e,
            Some(NodeAnswer::Json(json)) => match serde_json::from_slice::<RecordAnswer>(&json) {
                Ok(RecordAnswer::Record(r)) if r.recording && !r.files.is_empty() => {
                    out.records.push(*r);
                    continue;
                }
                Ok(RecordAnswer::Record(r)) if !r.recording => {
                    "does not record the job (relay only, or read from shared storage)".into()
                }
                Ok(RecordAnswer::Record(_)) => "recorded nothing".into(),
                Ok(RecordAnswer::Missing { error, .. }) => error,
                Err(e) => format!("its answer is not a record (another teesfs version?): {e}"),
            },
        };
        out.skipped.push((host, why));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::LayerPath;

    fn record(host: &str, files: &[&str], recording: bool) -> Vec<u8> {
        let r = JobRecord {
            job: "00000000000004d2".into(),
            host: host.into(),
            index: "ab".into(),
            recording,
            mounted: false,
            whole_layer: true,
            files: files
                .iter()
                .map(|f| LayerPath(f.as_bytes().to_vec()))
                .collect(),
            file_bytes: 1,
            absent: Vec::new(),
            dropped: 0,
            released: true,
        };
        serde_json::to_vec(&RecordAnswer::Record(Box::new(r))).expect("json")
    }

    #[test]
    fn every_node_asked_is_a_record_or_skipped_with_its_reason() {
        let missing = RecordAnswer::Missing {
            host: "n04".into(),
            error: "no job 00000000000004d2 on this node".into(),
        };
        let answers = BTreeMap::from([
            (
                "n01".to_string(),
                NodeAnswer::Json(record("n01", &["bin/app"], true)),
            ),
            (
                "n02".to_string(),
                NodeAnswer::Unreachable("unreachable".to_string()),
            ),
            (
                "n04".to_string(),
                NodeAnswer::Json(serde_json::to_vec(&missing).expect("json")),
            ),
            (
                "n05".to_string(),
                NodeAnswer::Json(record("n05", &[], true)),
            ),
            (
                "n06".to_string(),
                NodeAnswer::Json(record("n06", &["x"], false)),
            ),
            ("n07".to_string(), NodeAnswer::Json(b"garbage".to_vec())),
            (
                "n99".to_string(),
                NodeAnswer::Json(record("n99", &["never asked"], true)),
            ),
        ]);
        let asked = ["n01", "n02", "n03", "n04", "n05", "n06", "n07"].map(String::from);
        let g = sort_answers(asked.into_iter(), answers, Duration::from_secs(20));
        assert_eq!(g.records.len(), 1);
        assert_eq!(g.records[0].host, "n01");
        let skipped: Vec<(&str, &str)> = g
            .skipped
            .iter()
            .map(|(h, w)| (h.as_str(), w.as_str()))
            .collect();
        assert_eq!(skipped[0], ("n02", "unreachable"));
        assert_eq!(skipped[1], ("n03", "no answer within 20s"));
        assert_eq!(skipped[2], ("n04", "no job 00000000000004d2 on this node"));
        assert_eq!(skipped[3], ("n05", "recorded nothing"));
        assert!(skipped[4].1.contains("does not record"), "{skipped:?}");
        assert!(skipped[5].1.contains("not a record"), "{skipped:?}");
        assert_eq!(skipped.len(), 6);
    }
}

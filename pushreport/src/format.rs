//! The push report: what `teesfs push` prints and, with `--report FILE`, writes as JSON.
//!
//! JSON format (version 1, stable; fields are only ever added):
//! ```text
//! { "version": 1, "job": "<hex>", "index": "<hex>", "strategy": "topo", "root": "login",
//!   "nodes": 32, "urgent_chunks": 12, "chunks": 40, "urgent_bytes": N, "total_bytes": N,
//!   "streamed_bytes": N,
//!   "urgent_complete_s": 1.23 | null, "all_complete_s": 2.34 | null,
//!   "per_node": [ { "host": "cn01", "parent": "login", "urgent_s": 0.9, "all_s": 1.8,
//!                   "group": 0, "app_start_s": 1.1 } ],
//!   "edges": [ { "parent": "login", "child": "cn01", "bytes": N } ],
//!   "uplinks": [ { "group": 0, "proxy": "cn01", "in_bytes": N, "out_bytes": N } ],
//!   "rates": { "source": "configured" | "learned" | "none", "node": BPS, "port": BPS,
//!              "uplink": BPS, "login": BPS, "pushes": N, "learned_at": UNIX_S },
//!   "failures": [ { "kind": "failed" | "unreachable" | "liar" | "refused" | "store", "parent": "cn01", "child": "cn02", "at_s": 1.0, "reason": "...",
//!                   "cause": "no_daemon" | "tls" | "timeout" | "no_answer" | "stopped" } ] }
//! ```
//! `cause` (why a node was not reached, as far as the root can tell) is absent where the
//! kind says it all (`refused`, `liar`, `store`) and in reports of older versions.
//! Times are seconds since the push started, as observed by the root. `group` (the node's
//! group in the topology) is absent without a topology and in reports of older versions;
//! `app_start_s` (when the application had started on the node) only when the writer knows
//! it, as `teesfs lab launch` does; a plain push does not.
//! `teesfs report` draws a report as HTML or SVG ([`crate`]).

use serde::{Deserialize, Serialize};

/// One node's arrival times.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NodeTimes {
    /// Host name.
    pub host: String,
    /// Planned parent's host name.
    pub parent: String,
    /// When the root learned the node held the urgent set.
    pub urgent_s: Option<f64>,
    /// When the root learned the node held everything.
    pub all_s: Option<f64>,
    /// The node's group in the topology (absent without one, and in older reports).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<usize>,
    /// When the application had started on the node, when the writer knows it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub app_start_s: Option<f64>,
}

/// Bytes over one tree edge.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct EdgeBytes {
    /// Sender.
    pub parent: String,
    /// Receiver.
    pub child: String,
    /// Stored bytes pushed (and served on demand).
    pub bytes: u64,
}

/// Bytes over one group's uplink.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Uplink {
    /// Group number in the topology.
    pub group: usize,
    /// The group's proxy.
    pub proxy: String,
    /// Bytes entering the group.
    pub in_bytes: u64,
    /// Bytes leaving the group.
    pub out_bytes: u64,
}

/// What kind of failure a [`Failure`] is. In JSON, its name in lower case; the names of
/// every release so far, so an older report reads, and any other name is refused by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FailureKind {
    /// A child stopped answering.
    Failed,
    /// A child never re-attached.
    Unreachable,
    /// The parent sent a chunk that did not match its id.
    Liar,
    /// The child would not take the job, or could no longer keep its chunks (its store
    /// failed).
    Refused,
    /// The root's own store could not deliver chunks of the index; parent and child are
    /// the root, and the push ended there.
    Store,
}

impl FailureKind {
    /// Its name, as in the JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            FailureKind::Failed => "failed",
            FailureKind::Unreachable => "unreachable",
            FailureKind::Liar => "liar",
            FailureKind::Refused => "refused",
            FailureKind::Store => "store",
        }
    }
}

impl std::fmt::Display for FailureKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a node was not reached or was lost ([`FailureKind::Unreachable`] and
/// [`FailureKind::Failed`]), as far as the root can tell. In JSON, its name in snake case.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Cause {
    /// The root dialled the node and was refused: nothing listens on the daemon's port.
    NoDaemon,
    /// The TLS handshake failed: a certificate one side does not accept (another cluster's
    /// CA, expired, revoked, the wrong host name).
    Tls,
    /// The root dialled the node and nothing answered in time: no daemon, a firewall, a
    /// host down or the wrong address.
    Timeout,
    /// The node never answered its parent (a proxy dialled it, not the root).
    NoAnswer,
    /// The node took part, then stopped answering (its daemon stopped, crashed, or its link
    /// was lost).
    Stopped,
}

impl Cause {
    /// The cause a connection error's text shows (the root's own dial), if any.
    pub fn of_connect_error(error: &str) -> Option<Cause> {
        let e = error.to_ascii_lowercase();
        if e.contains("connection refused") {
            Some(Cause::NoDaemon)
        } else if [
            "tls",
            "certificate",
            "handshake",
            "unknownissuer",
            "expired",
            "revoked",
        ]
        .iter()
        .any(|w| e.contains(w))
            || e.contains("notvalidforname")
        {
            Some(Cause::Tls)
        } else if e.contains("no answer") || e.contains("timed out") || e.contains("timeout") {
            Some(Cause::Timeout)
        } else {
            None
        }
    }

    /// What it means, in a few words.
    pub fn describe(self) -> &'static str {
        match self {
            Cause::NoDaemon => "no daemon (connection refused)",
            Cause::Tls => "TLS handshake failed",
            Cause::Timeout => "no answer (timeout: no daemon, a firewall or the host down)",
            Cause::NoAnswer => "never answered (no daemon, or it never got the job)",
            Cause::Stopped => "stopped answering during the push",
        }
    }
}

/// A failure the root learned of.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Failure {
    /// What kind of failure.
    pub kind: FailureKind,
    /// Parent end of the edge.
    pub parent: String,
    /// Child end of the edge.
    pub child: String,
    /// When the root learned of it.
    pub at_s: f64,
    /// Why, when the child said (`refused`), or what the root's store lacks and what to do
    /// (`store`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Why the node was not reached or was lost (`unreachable`, `failed`), when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cause: Option<Cause>,
}

impl Failure {
    /// The failure in one line: the edge and why, e.g. `login -> n05: no daemon (connection
    /// refused)`: what Slurm's drain reason and the job's own stderr carry.
    pub fn summary(&self) -> String {
        let edge = format!("{} -> {}", self.parent, self.child);
        let why = self.reason.as_deref().unwrap_or("");
        match (self.kind, self.cause) {
            (FailureKind::Store, _) => format!("the root's store ({}): {why}", self.parent),
            (FailureKind::Refused, _) => format!("{edge}: refused the job: {why}"),
            (FailureKind::Liar, _) => {
                format!(
                    "{edge}: {} sent a chunk that failed verification",
                    self.parent
                )
            }
            (_, Some(Cause::Tls)) => format!("{edge}: TLS handshake failed: {why}"),
            (_, Some(c)) => format!("{edge}: {}", c.describe()),
            (FailureKind::Unreachable, None) => format!("{edge}: {}", Cause::NoAnswer.describe()),
            (FailureKind::Failed, None) => format!("{edge}: {}", Cause::Stopped.describe()),
        }
    }
}

/// The whole report.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct PushReport {
    /// Format version.
    pub version: u32,
    /// Job id.
    pub job: String,
    /// Index id.
    pub index: String,
    /// Plan strategy.
    pub strategy: String,
    /// Root host.
    pub root: String,
    /// Nodes in the job (root excluded).
    pub nodes: usize,
    /// Chunks in the urgent set.
    pub urgent_chunks: usize,
    /// Chunks in the layer.
    pub chunks: usize,
    /// Stored bytes of the urgent set.
    pub urgent_bytes: u64,
    /// Stored bytes of the layer.
    pub total_bytes: u64,
    /// Stored bytes the push streams to every node (the layer, or with `--stream` only
    /// the urgent set or nothing; the rest travels on demand). Older reports lack it.
    #[serde(default)]
    pub streamed_bytes: u64,
    /// When every reachable node held the urgent set.
    pub urgent_complete_s: Option<f64>,
    /// When every reachable node held everything.
    pub all_complete_s: Option<f64>,
    /// Per node.
    pub per_node: Vec<NodeTimes>,
    /// Per edge.
    pub edges: Vec<EdgeBytes>,
    /// Per group uplink.
    pub uplinks: Vec<Uplink>,
    /// Failures.
    pub failures: Vec<Failure>,
    /// Files of the index's learned urgent list (`teesfs learn`) the push sent first; 0
    /// without one. Older reports lack it.
    #[serde(default)]
    pub learned_files: usize,
    /// The link rates the plan used and where they came from (configured, learned from
    /// earlier pushes, none; [`crate::rates`]). Older reports lack it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rates: Option<crate::rates::RatesUsed>,
}

impl PushReport {
    /// Payload bytes the plan sends into all groups over their uplinks (saturating: a
    /// report is read from a file).
    pub fn predicted_uplink_in(&self) -> u64 {
        self.uplinks
            .iter()
            .fold(0, |sum, u| sum.saturating_add(u.in_bytes))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_kind_is_its_name_in_json_and_an_unknown_one_is_refused_by_name() {
        let every = [
            FailureKind::Failed,
            FailureKind::Unreachable,
            FailureKind::Liar,
            FailureKind::Refused,
            FailureKind::Store,
        ];
        for kind in every {
            let json = serde_json::to_string(&kind).expect("serialises");
            assert_eq!(json, format!("\"{kind}\""), "the name every release wrote");
            let back: FailureKind = serde_json::from_str(&json).expect("reads back");
            assert_eq!(back, kind);
        }
        let old = r#"{"kind":"liar","parent":"x","child":"y","at_s":0.0}"#;
        let f: Failure = serde_json::from_str(old).expect("a report of an earlier release");
        assert_eq!(f.kind, FailureKind::Liar);
        let e = serde_json::from_str::<Failure>(&old.replace("liar", "eaten"))
            .expect_err("no such kind")
            .to_string();
        assert!(e.contains("eaten") && e.contains("unreachable"), "{e}");
    }
}

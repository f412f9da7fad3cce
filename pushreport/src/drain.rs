//! Which nodes a failed push takes out of service, and the words Slurm shows for each.
//!
//! One bad node must cost a job that node, not its start: the Slurm prolog drains the
//! nodes named here (`scontrol update State=DRAIN Reason=...`) and fails, and Slurm requeues
//! the job onto healthy nodes. Only failures a node is to blame for count (it was not
//! reached, it stopped answering, or it refused the job), and only while they are a
//! minority of the job's nodes: when most of them fail, or the root's own store did, the
//! fault is the root's or the job's (an untrusted key, a root without network), and nothing
//! is drained. Pure: the report in, the verdict out.

use std::collections::HashSet;

use crate::format::{Failure, FailureKind, PushReport};

/// The longest drain reason written (Slurm shows it in `sinfo -R` and `scontrol show node`).
pub const MAX_REASON: usize = 200;

/// A node to drain and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Drain {
    /// The node's host name.
    pub host: String,
    /// The reason Slurm records: `teesfs: login -> n05: no daemon (connection refused)`.
    pub reason: String,
}

/// The nodes of `report` to drain, each once, in the order the root learned of them; none
/// when the push did not fail because of its nodes (see the module's documentation).
pub fn nodes_to_drain(report: &PushReport) -> Vec<Drain> {
    if report.failures.iter().any(|f| f.kind == FailureKind::Store) {
        return Vec::new();
    }
    let mut seen = HashSet::new();
    let blamed: Vec<&Failure> = report
        .failures
        .iter()
        .filter(|f| {
            matches!(
                f.kind,
                FailureKind::Unreachable | FailureKind::Failed | FailureKind::Refused
            )
        })
        .filter(|f| seen.insert(f.child.as_str()))
        .collect();
    if blamed.len() > (report.nodes / 2).max(1) {
        return Vec::new();
    }
    blamed
        .into_iter()
        .map(|f| Drain {
            host: f.child.clone(),
            reason: reason(f),
        })
        .collect()
}

/// `teesfs: ` and the failure's summary, on one line, at most [`MAX_REASON`] bytes.
pub fn reason(f: &Failure) -> String {
    let mut r = format!("teesfs: {}", f.summary()).replace(['\n', '\r', '\t'], " ");
    if r.len() > MAX_REASON {
        let mut end = MAX_REASON - 3;
        while !r.is_char_boundary(end) {
            end -= 1;
        }
        r.truncate(end);
        r.push_str("...");
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::Cause;

    fn failure(kind: FailureKind, child: &str, cause: Option<Cause>) -> Failure {
        Failure {
            kind,
            parent: "login".into(),
            child: child.into(),
            at_s: 1.0,
            reason: Some("the node said why".into()),
            cause,
        }
    }

    fn report(nodes: usize, failures: Vec<Failure>) -> PushReport {
        PushReport {
            nodes,
            failures,
            ..PushReport::default()
        }
    }

    /// One dead node among several is drained, named with the edge and the cause; a node
    /// reported twice (the failed edge and the node never reached) is drained once.
    #[test]
    fn a_minority_of_bad_nodes_is_drained_with_the_edge_and_the_cause() {
        let r = report(
            24,
            vec![
                failure(FailureKind::Unreachable, "n05", Some(Cause::NoDaemon)),
                failure(FailureKind::Failed, "n05", None),
                failure(FailureKind::Refused, "n07", None),
                failure(FailureKind::Failed, "n09", Some(Cause::Stopped)),
            ],
        );
        let d = nodes_to_drain(&r);
        let hosts: Vec<&str> = d.iter().map(|d| d.host.as_str()).collect();
        assert_eq!(hosts, ["n05", "n07", "n09"]);
        assert_eq!(
            d[0].reason,
            "teesfs: login -> n05: no daemon (connection refused)"
        );
        assert_eq!(
            d[1].reason,
            "teesfs: login -> n07: refused the job: the node said why"
        );
        assert_eq!(
            d[2].reason,
            "teesfs: login -> n09: stopped answering during the push"
        );
    }

    /// When most nodes fail, or the root's store does, the root or the job is at fault: no
    /// node is drained. A one-node job's only node is its own fault.
    #[test]
    fn nothing_is_drained_when_the_root_or_the_job_is_at_fault() {
        let most: Vec<Failure> = (1..=3)
            .map(|i| failure(FailureKind::Refused, &format!("n0{i}"), None))
            .collect();
        assert!(nodes_to_drain(&report(4, most)).is_empty());
        let store = vec![
            failure(FailureKind::Unreachable, "n05", Some(Cause::Timeout)),
            Failure {
                kind: FailureKind::Store,
                child: "login".into(),
                ..failure(FailureKind::Store, "login", None)
            },
        ];
        assert!(nodes_to_drain(&report(24, store)).is_empty());
        let one = vec![failure(
            FailureKind::Unreachable,
            "n01",
            Some(Cause::Timeout),
        )];
        assert_eq!(nodes_to_drain(&report(1, one)).len(), 1);
        let liar = vec![failure(FailureKind::Liar, "n02", None)];
        assert!(nodes_to_drain(&report(8, liar)).is_empty());
    }

    /// A long reason is cut at a character boundary, on one line.
    #[test]
    fn a_reason_is_one_bounded_line() {
        let mut f = failure(FailureKind::Refused, "n05", None);
        f.reason = Some(format!("line one\nline two {}", "é".repeat(300)));
        let r = reason(&f);
        assert!(r.len() <= MAX_REASON && r.ends_with("..."), "{r}");
        assert!(!r.contains('\n'));
    }
}

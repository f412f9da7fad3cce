//! Pure decisions of the daemon task: what a `Start` does to a job in the state it is in
//! ([`on_start`]), and the plan of a job it launches ([`plan`]: the peers it knows, the
//! links made afresh, what its mount waits for, where it is mounted, whether it is
//! recorded). No sockets, no store, no clock: the task passes in what they said.

use std::path::{Path, PathBuf};

use peertree::relay::{JobId, NodeInfo, Start};

/// What the task knows of a job when its `Start` comes, for [`on_start`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Seen<'a> {
    /// Not here.
    Absent,
    /// Its `Prepare` came.
    Prepared,
    /// A `Start` of the push whose root is `root` is under admission; `next` is the root
    /// of the push queued after it, if one is.
    Starting {
        root: Option<&'a str>,
        next: Option<Option<&'a str>>,
    },
    /// Running, pushed by the push whose root is `root`.
    Running { root: Option<&'a str> },
    /// Being released; `next` is the root of the push queued to replace it.
    Releasing { next: Option<Option<&'a str>> },
}

/// What a `Start` does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OnStart {
    /// Admit it (`prepared`: its `Prepare` made the children's links).
    Admit { prepared: bool },
    /// The job runs already under this push (a restarted subtree's `Start`): routed now.
    Routed,
    /// The same push's `Start` is being admitted or queued: routed with it.
    Join,
    /// Another push's `Start` for a job that runs: the job is released first, then this
    /// `Start` runs (a Slurm requeue keeps the job id).
    Replace,
    /// Queued behind the job being admitted or released, in place of any `Start` queued
    /// before it (the newest push wins).
    Queue,
}

/// What a `Start` from the push whose root is `root` does to a job seen as `seen`.
pub(crate) fn on_start(seen: Seen<'_>, root: Option<&str>) -> OnStart {
    match seen {
        Seen::Absent => OnStart::Admit { prepared: false },
        Seen::Prepared => OnStart::Admit { prepared: true },
        Seen::Running { root: r } if r == root => OnStart::Routed,
        Seen::Running { .. } => OnStart::Replace,
        Seen::Starting { next: Some(n), .. } | Seen::Releasing { next: Some(n) } if n == root => {
            OnStart::Join
        }
        Seen::Starting {
            root: r,
            next: None,
        } if r == root => OnStart::Join,
        Seen::Starting { .. } | Seen::Releasing { .. } => OnStart::Queue,
    }
}

/// This node, as a job's plan needs it.
pub(crate) struct Site<'a> {
    /// This node's host name.
    pub host: &'a str,
    /// Whether jobs are mounted here.
    pub mount: bool,
    /// Where jobs are mounted.
    pub mount_root: &'a Path,
}

/// How a launched job is set up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct JobPlan {
    /// The peers the job talks to: its subtree, its ancestors and its siblings.
    pub known: Vec<NodeInfo>,
    /// Hosts whose links are made afresh (unless another job being pushed uses them).
    pub fresh: Vec<String>,
    /// The children (host, address) whose links the mount waits for.
    pub mount_after: Vec<(String, String)>,
    /// Where the job is mounted (`None`: not mounted here).
    pub mountpoint: Option<PathBuf>,
    /// Whether what the job opens is recorded (not for a job read from shared storage,
    /// which never waits for the tree).
    pub record: bool,
    /// The push's root (its address).
    pub root: Option<String>,
    /// This node's clock minus the root's, when the `Start` says the root's.
    pub clock_skew_ms: Option<i64>,
}

/// The plan of job `job` from `start`, sent by `from_host`. `prepared`: its `Prepare` made
/// the children's links already; `shared`: it reads a shared store; `now_ms`: this node's
/// wall clock; `takes_turns(n)`: whether `n` handshakes take turns on this node's CPU.
pub(crate) fn plan(
    job: JobId,
    start: &Start,
    (from_host, prepared, shared): (&str, bool, bool),
    site: &Site<'_>,
    now_ms: u64,
    takes_turns: &dyn Fn(usize) -> bool,
) -> JobPlan {
    let mut known = start.subtree.clone();
    known.extend(start.ancestors.iter().cloned());
    // Siblings: the deputy among them adopts the others if our parent fails.
    known.extend(start.kin.iter().cloned());
    // The children's links were made afresh by the job's `Prepare`, when one came. The
    // connection the `Start` came on is live and its peer is no stale process: the job's
    // messages to the sender go on it. Made afresh, it would carry only the sender's bulk
    // stream, which falls silent while the sender holds the rest of the layer back
    // (`push --bulk-after`) and was closed by QUIC's idle timeout under it: every edge of
    // the tree failed at the hold's end (issue 28).
    let children = start.subtree.iter().skip(1).filter(|_| !prepared);
    let fresh = children
        .chain(&start.ancestors)
        .map(|n| n.host.as_str())
        .filter(|h| *h != site.host && *h != from_host)
        .map(str::to_string)
        .collect();
    JobPlan {
        known,
        fresh,
        mount_after: mount_waits_for(start, takes_turns),
        mountpoint: site.mount.then(|| site.mount_root.join(job.to_string())),
        record: site.mount && !shared,
        root: start.ancestors.last().map(|n| n.addr.clone()),
        clock_skew_ms: start
            .root_clock_ms
            .and_then(|root| i64::try_from(i128::from(now_ms) - i128::from(root)).ok()),
    }
}

/// The children (host, address) whose links a job's mount waits for: on a node whose
/// handshakes take turns on its CPU, its direct children (their `Start`s wait for the
/// links; the application needs its urgent set too, which comes later); none elsewhere.
fn mount_waits_for(start: &Start, takes_turns: &dyn Fn(usize) -> bool) -> Vec<(String, String)> {
    let me = start.subtree.first().map(|n| n.id);
    let children: Vec<(String, String)> = (start.subtree.iter().skip(1))
        .filter(|n| Some(n.parent) == me)
        .map(|n| (n.host.clone(), n.addr.clone()))
        .collect();
    if takes_turns(children.len() + 1) {
        children
    } else {
        Vec::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use peertree::NodeId;

    fn node(id: u32, parent: u32, host: &str) -> NodeInfo {
        NodeInfo {
            id: NodeId(id),
            host: host.into(),
            addr: format!("{host}:7411"),
            parent: NodeId(parent),
            group: None,
            rate: None,
        }
    }

    /// n1 under its parent p (under the root), with children n2 and n3 and grandchild n4.
    fn start() -> Start {
        Start {
            job: JobId(7),
            index: Vec::new(),
            order: Vec::new(),
            urgent: 0,
            subtree: vec![
                node(1, 0, "n1"),
                node(2, 1, "n2"),
                node(3, 1, "n3"),
                node(4, 2, "n4"),
            ],
            ancestors: vec![node(0, 9, "p"), node(9, 9, "login")],
            timing: Default::default(),
            shared_store: None,
            probe: false,
            owner: Some(1000),
            kin: vec![node(5, 0, "s1")],
            root_clock_ms: Some(1_000),
        }
    }

    fn site(mount: bool) -> Site<'static> {
        Site {
            host: "n1",
            mount,
            mount_root: Path::new("/run/teesfs/jobs"),
        }
    }

    #[test]
    fn a_start_admits_replaces_joins_or_queues_by_the_jobs_state() {
        let (a, b) = (Some("a:1"), Some("b:1"));
        assert_eq!(
            on_start(Seen::Absent, a),
            OnStart::Admit { prepared: false }
        );
        assert_eq!(
            on_start(Seen::Prepared, a),
            OnStart::Admit { prepared: true }
        );
        assert_eq!(on_start(Seen::Running { root: a }, a), OnStart::Routed);
        assert_eq!(on_start(Seen::Running { root: a }, b), OnStart::Replace);
        // A probe has no root: any job's `Start` replaces it.
        assert_eq!(on_start(Seen::Running { root: None }, a), OnStart::Replace);
        let starting = |next| Seen::Starting { root: a, next };
        assert_eq!(on_start(starting(None), a), OnStart::Join);
        assert_eq!(on_start(starting(None), b), OnStart::Queue);
        assert_eq!(on_start(starting(Some(b)), b), OnStart::Join);
        assert_eq!(
            on_start(starting(Some(b)), a),
            OnStart::Queue,
            "the newest push wins"
        );
        assert_eq!(on_start(Seen::Releasing { next: None }, a), OnStart::Queue);
        assert_eq!(
            on_start(Seen::Releasing { next: Some(a) }, a),
            OnStart::Join
        );
        assert_eq!(
            on_start(Seen::Releasing { next: Some(a) }, b),
            OnStart::Queue
        );
    }

    #[test]
    fn a_plan_knows_the_tree_and_links_afresh_all_but_the_sender_and_prepared_children() {
        let s = start();
        let p = plan(
            JobId(7),
            &s,
            ("p", false, false),
            &site(true),
            1_250,
            &|_| false,
        );
        let hosts: Vec<&str> = p.known.iter().map(|n| n.host.as_str()).collect();
        assert_eq!(hosts, ["n1", "n2", "n3", "n4", "p", "login", "s1"]);
        assert_eq!(
            p.fresh,
            ["n2", "n3", "n4", "login"],
            "not itself, not the sender"
        );
        assert_eq!(p.root.as_deref(), Some("login:7411"));
        assert_eq!(p.clock_skew_ms, Some(250));
        assert_eq!(
            p.mountpoint,
            Some(Path::new("/run/teesfs/jobs").join(JobId(7).to_string()))
        );
        assert!(p.record && p.mount_after.is_empty());
        // Prepared: the children's links are made already.
        let p = plan(JobId(7), &s, ("p", true, false), &site(true), 0, &|_| false);
        assert_eq!(p.fresh, ["login"]);
        assert_eq!(p.clock_skew_ms, Some(-1_000));
    }

    #[test]
    fn a_plan_mounts_and_records_only_where_it_should_and_waits_for_links_when_cores_are_few() {
        let s = start();
        // Shared storage: mounted, not recorded.
        let p = plan(JobId(7), &s, ("p", false, true), &site(true), 0, &|_| false);
        assert!(p.mountpoint.is_some() && !p.record);
        // Relay only: neither.
        let p = plan(JobId(7), &s, ("p", false, false), &site(false), 0, &|_| {
            false
        });
        assert!(p.mountpoint.is_none() && !p.record);
        // Handshakes take turns: the mount waits for the direct children's links only.
        let p = plan(JobId(7), &s, ("p", false, false), &site(true), 0, &|n| {
            n > 2
        });
        assert_eq!(
            p.mount_after,
            [
                ("n2".to_string(), "n2:7411".to_string()),
                ("n3".to_string(), "n3:7411".to_string())
            ]
        );
    }
}

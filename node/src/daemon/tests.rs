//! The daemon task's transitions, driven through its inputs over loopback with health
//! probes (jobs that need no index and no mount): a `Start`'s stream goes on only once its
//! job is routed, a stop is answered once the job is gone, a job pushed again by another
//! push replaces the old one, and a stop ends every job, also one still being admitted.

use std::sync::Arc;

use peertree::NodeId;
use peertree::relay::{JobId, NodeInfo, Routed, Start};
use tokio::sync::oneshot;

use super::state::Input;
use super::{Daemon, DaemonConfig, Shared};
use crate::control::Request;
use crate::peers::Router;

/// A daemon for host `n1` on loopback, relay only, trusting one key, in `dir`.
fn daemon(dir: &std::path::Path) -> Daemon {
    crate::net::make_cluster(dir, &["n1".to_string()]).expect("cluster");
    let key = manifest::SecretKey::generate().expect("a key").public();
    std::fs::write(dir.join("k.pub"), key.to_file_text()).expect("key");
    std::fs::write(dir.join("revoked"), "").expect("revoked");
    let cfg = DaemonConfig {
        host: "n1".into(),
        listen: "127.0.0.1:0".parse().expect("addr"),
        identity_dir: dir.to_path_buf(),
        state_dir: dir.join("state"),
        mount_root: dir.join("jobs"),
        store_budget: 1 << 20,
        recent_bytes: 1 << 20,
        cache_bytes: 1 << 20,
        passthrough: false,
        copies_budget: 0,
        read_timeout: std::time::Duration::from_secs(1),
        trust: super::trust::Sources {
            keys: vec![dir.join("k.pub")],
            users: dir.join("users"),
            revoked: dir.join("revoked"),
        },
        control: dir.join("daemon.sock"),
        mount: false,
        knobs: crate::job::JobKnobs::default(),
        origin: None,
        keeper: None,
        metrics: None,
    };
    Daemon::start(cfg).expect("starts")
}

fn node(id: u32, parent: u32, host: &str) -> NodeInfo {
    NodeInfo {
        id: NodeId(id),
        host: host.into(),
        // Nobody listens there: the probe's messages up go nowhere, which it survives.
        addr: "127.0.0.1:9".into(),
        parent: NodeId(parent),
        group: None,
        rate: None,
    }
}

/// A health probe's `Start` for `n1` from its parent `p`, pushed by the root at `root`.
fn probe(job: JobId, root: &str) -> Box<Start> {
    let mut login = node(9, 9, "login");
    login.addr = root.into();
    Box::new(Start {
        job,
        index: Vec::new(),
        order: Vec::new(),
        urgent: 0,
        subtree: vec![node(1, 0, "n1")],
        ancestors: vec![node(0, 9, "p"), login],
        timing: Default::default(),
        shared_store: None,
        probe: true,
        owner: None,
        kin: Vec::new(),
        root_clock_ms: None,
    })
}

/// Delivers a `Start` as the network does, and waits for its stream to go on.
async fn deliver_start(shared: &Shared, job: JobId, root: &str) {
    let pending = shared.deliver(
        "p",
        job,
        Routed::Start(probe(job, root)),
        crate::peers::Ticket::alone(),
    );
    pending
        .expect("a start holds its stream")
        .await
        .expect("routed");
}

fn routed(shared: &Shared, job: JobId) -> Option<Arc<crate::job::JobCore>> {
    shared.view.borrow().jobs.get(&job).map(|j| j.core.clone())
}

/// Asks the task as the control socket does, as root.
async fn ask(shared: &Shared, request: Request) -> String {
    let (reply, answer) = oneshot::channel();
    let input = Input::Control {
        uid: 0,
        request,
        reply,
    };
    assert!(shared.inputs.send(input).is_ok(), "the task runs");
    answer.await.expect("answered")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_starts_stream_goes_on_once_its_job_is_routed_so_the_next_message_finds_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = daemon(dir.path());
    let job = JobId(41);
    // The admission runs on the blocking pool: the stream waits for it, and a relay
    // message read after the `Start` finds its job at once.
    deliver_start(&d.shared, job, "login:1").await;
    assert!(
        routed(&d.shared, job).is_some(),
        "routed before the stream went on"
    );
    // The same push's `Start` again (a restarted subtree's): the job stays as it was.
    let core = routed(&d.shared, job).expect("routed");
    deliver_start(&d.shared, job, "login:1").await;
    let again = routed(&d.shared, job).expect("still routed");
    assert!(
        Arc::ptr_eq(&core, &again),
        "the same push does not restart the job"
    );
    d.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_pushed_again_by_another_push_is_released_before_the_new_one_is_routed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = daemon(dir.path());
    let job = JobId(42);
    deliver_start(&d.shared, job, "login:1").await;
    let old = routed(&d.shared, job).expect("routed");
    deliver_start(&d.shared, job, "login:2").await;
    let new = routed(&d.shared, job).expect("the new push's job is routed");
    assert!(!Arc::ptr_eq(&old, &new), "the old job was replaced");
    d.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_is_answered_once_the_job_is_gone_also_while_it_is_admitted() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = daemon(dir.path());
    let job = JobId(43);
    deliver_start(&d.shared, job, "login:1").await;
    let reply = ask(&d.shared, Request::Stop(job)).await;
    assert!(reply.contains("stopped"), "{reply}");
    assert!(
        routed(&d.shared, job).is_none(),
        "gone when the stop is answered"
    );
    let reply = ask(&d.shared, Request::Stop(job)).await;
    assert!(reply.contains("error"), "{reply}");
    // A stop that comes while the `Start` is admitted: the job never runs.
    let (routed_tx, routed_rx) = oneshot::channel();
    let start = Input::Start {
        from: "p".into(),
        job,
        start: probe(job, "login:1"),
        routed: routed_tx,
    };
    assert!(d.shared.inputs.send(start).is_ok());
    let reply = ask(&d.shared, Request::Stop(job)).await;
    assert!(reply.contains("stopped"), "{reply}");
    let _ = routed_rx.await;
    assert!(
        routed(&d.shared, job).is_none(),
        "a job stopped while admitted never runs"
    );
    d.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopping_daemon_tears_down_every_job_also_one_being_admitted() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = daemon(dir.path());
    for j in 1..=3 {
        deliver_start(&d.shared, JobId(j), "login:1").await;
    }
    let (routed_tx, _routed_rx) = oneshot::channel();
    let start = Input::Start {
        from: "p".into(),
        job: JobId(4),
        start: probe(JobId(4), "login:1"),
        routed: routed_tx,
    };
    assert!(d.shared.inputs.send(start).is_ok());
    // The fourth may be admitted yet or not: the stop ends it either way.
    assert!(d.shared.view.borrow().jobs.len() >= 3);
    d.stop().await;
    assert!(
        d.shared.view.borrow().jobs.is_empty(),
        "every job torn down"
    );
    assert!(
        d.shared
            .inputs
            .send(Input::Unreachable { host: "x".into() })
            .is_err(),
        "the task ended"
    );
}

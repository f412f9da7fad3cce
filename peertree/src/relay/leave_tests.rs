//! A node leaving the tree, with a fake clock: one whose store failed leaves at once and
//! says why, and one whose root is gone stops asking it after a bounded back-off. No
//! sockets, no sleeps.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::plan::NodeId;
use crate::relay::*;

const HEARTBEAT: Duration = Duration::from_millis(100);
const DEADLINE: Duration = Duration::from_millis(500);
const STEP: Duration = Duration::from_millis(20);

const ROOT: NodeId = NodeId(0);
const CHILD: NodeId = NodeId(1);
const GRANDCHILD: NodeId = NodeId(2);

fn info(id: NodeId, parent: NodeId) -> NodeInfo {
    NodeInfo {
        id,
        host: format!("n{}", id.0),
        addr: format!("n{}:7000", id.0),
        parent,
        group: None,
        rate: None,
    }
}

fn schedule() -> Arc<Schedule> {
    Arc::new(Schedule::new((0..4).map(ChunkNo).collect(), 1, vec![1000; 4]).expect("valid"))
}

/// The `Start` `relay` queued for `to`.
fn start_for(relay: &mut Relay, now: Instant, to: NodeId) -> Start {
    let mut start = None;
    while let Some(t) = relay.poll_transmit(now) {
        if let Transmit::Control {
            to: dest,
            msg: Msg::Start(s),
        } = t
            && dest == to
        {
            start = Some(*s);
        }
    }
    start.expect("a Start")
}

/// The root, child and grandchild of a job on `ROOT -> CHILD -> GRANDCHILD`, at `t0`.
fn chain(t0: Instant) -> (Relay, Relay, Relay) {
    let nodes = vec![info(ROOT, ROOT), info(CHILD, ROOT), info(GRANDCHILD, CHILD)];
    let timing = Timing {
        heartbeat_ms: HEARTBEAT.as_millis() as u32,
        deadline_ms: DEADLINE.as_millis() as u32,
    };
    let mut root = Relay::new_root(
        JobId(1),
        nodes,
        Arc::from(&b"index"[..]),
        schedule(),
        timing,
        t0,
    )
    .expect("root");
    let start = start_for(&mut root, t0, CHILD);
    let mut child = Relay::new_node(start, schedule(), t0).expect("child");
    let start = start_for(&mut child, t0, GRANDCHILD);
    let grandchild = Relay::new_node(start, schedule(), t0).expect("grandchild");
    (root, child, grandchild)
}

/// A node whose root had gone (the push ended or was killed) asked it to adopt it every
/// deadline, and every time the transport found it unreachable, until the job was
/// released. It asks [`ROOT_ASKS`] times now, each wait twice the last, then stops once,
/// saying so, and keeps what it holds.
#[test]
fn a_node_whose_root_is_gone_asks_it_a_bounded_number_of_times_then_stops() {
    let t0 = Instant::now();
    let (_, mut child, _) = chain(t0);
    while child.poll_transmit(t0).is_some() {}
    let mut asks = Vec::new();
    let mut gone = Vec::new();
    let mut now = t0;
    while now < t0 + DEADLINE * 200 {
        // The transport finds the root unreachable at every turn.
        child.handle_unreachable(now, ROOT);
        if child.poll_timeout().is_some_and(|t| t <= now) {
            child.handle_timeout(now);
        }
        while let Some(t) = child.poll_transmit(now) {
            if let Transmit::Control {
                to: ROOT,
                msg: Msg::Attach { .. },
            } = t
            {
                asks.push(now);
            }
        }
        while let Some(e) = child.poll_event() {
            if let Event::RootGone(n) = e {
                gone.push((now, n));
            }
        }
        now += STEP;
    }
    assert_eq!(asks.len(), ROOT_ASKS as usize, "{asks:?}");
    for (i, w) in asks.windows(2).enumerate() {
        let gap = w[1] - w[0];
        let want = DEADLINE * (1 << i);
        assert!(
            gap >= want && gap <= want + 2 * STEP,
            "ask {} came {gap:?} after the one before, not {want:?}",
            i + 1
        );
    }
    assert_eq!(gone.len(), 1, "said once: {gone:?}");
    assert_eq!(gone[0].1, ROOT_ASKS);
    assert!(child.finished() && child.parent().is_none());
    assert_eq!(child.poll_timeout(), None, "nothing left to do on a timer");
}

/// A node whose state directory was full dropped every chunk it received and said
/// nothing: its parent kept sending, its children waited, and the push ran to its
/// timeout. Leaving, it tells its parent why (the root reports it, naming the node) and
/// its children, which ask elsewhere at once.
#[test]
fn a_node_whose_store_fails_leaves_the_tree_and_says_why() {
    let t0 = Instant::now();
    let (mut root, mut child, mut grandchild) = chain(t0);
    while root.poll_transmit(t0).is_some() {}
    while grandchild.poll_transmit(t0).is_some() {}
    // The child and grandchild join: the root adopts the child.
    root.handle_message(t0, CHILD, RelayMsg::Report(Report::default()));
    let why = "its store /var/lib/teesfs/store cannot keep the job's chunks: No space left";
    child.leave(why);
    let mut told = Vec::new();
    while let Some(t) = child.poll_transmit(t0) {
        if let Transmit::Control {
            to,
            msg: Msg::Refused { reason },
        } = t
        {
            told.push((to, reason));
        }
    }
    told.sort();
    assert_eq!(
        told,
        vec![(ROOT, why.to_string()), (GRANDCHILD, why.to_string())]
    );
    assert!(child.finished() && child.children().next().is_none());
    let t1 = t0 + STEP;
    root.handle_message(t1, CHILD, RelayMsg::Refused { reason: why.into() });
    let mut events = Vec::new();
    while let Some(e) = root.poll_event() {
        events.push(e);
    }
    assert!(
        events.contains(&Event::Refused(CHILD, why.into())),
        "{events:?}"
    );
    assert!(root.children().all(|c| c != CHILD), "dropped");
    grandchild.handle_message(t1, CHILD, RelayMsg::Refused { reason: why.into() });
    let lost =
        std::iter::from_fn(|| grandchild.poll_event()).any(|e| e == Event::ParentLost(CHILD));
    assert!(
        lost,
        "the grandchild re-attaches at once, not at its deadline"
    );
    let asked_root = std::iter::from_fn(|| grandchild.poll_transmit(t1)).any(|t| {
        matches!(
            t,
            Transmit::Control {
                to: ROOT,
                msg: Msg::Attach { .. }
            }
        )
    });
    assert!(asked_root, "it asks its next ancestor");
}

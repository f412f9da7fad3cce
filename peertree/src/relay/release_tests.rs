//! A failed push's release down the tree, with a fake clock: the root tells its children,
//! each node passes it on before it drops the job, and only a node's parent is obeyed.

use std::sync::Arc;
use std::time::Instant;

use crate::plan::NodeId;
use crate::relay::*;

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

/// The root, child and grandchild of a job on `ROOT -> CHILD -> GRANDCHILD`, all joined.
fn chain(t0: Instant) -> (Relay, Relay, Relay) {
    let nodes = vec![info(ROOT, ROOT), info(CHILD, ROOT), info(GRANDCHILD, CHILD)];
    let mut root = Relay::new_root(
        JobId(7),
        nodes,
        Arc::from(&b"index"[..]),
        schedule(),
        Timing::default(),
        t0,
    )
    .expect("root");
    let start = start_for(&mut root, t0, CHILD);
    let mut child = Relay::new_node(start, schedule(), t0).expect("child");
    let start = start_for(&mut child, t0, GRANDCHILD);
    let grandchild = Relay::new_node(start, schedule(), t0).expect("grandchild");
    root.handle_message(t0, CHILD, RelayMsg::Report(Report::default()));
    child.handle_message(t0, GRANDCHILD, RelayMsg::Report(Report::default()));
    (root, child, grandchild)
}

/// Who `relay` sends a [`Msg::Release`] to now.
fn releases(relay: &mut Relay, now: Instant) -> Vec<NodeId> {
    std::iter::from_fn(|| relay.poll_transmit(now))
        .filter_map(|t| match t {
            Transmit::Control {
                to,
                msg: Msg::Release,
            } => Some(to),
            _ => None,
        })
        .collect()
}

fn events(relay: &mut Relay) -> Vec<Event> {
    std::iter::from_fn(|| relay.poll_event()).collect()
}

/// A failed start left the job mounted on every healthy node until its next start: the
/// root now releases it down the tree, each node passing it on before it drops the job,
/// and a release said twice is said once.
#[test]
fn a_release_from_the_root_reaches_every_node_through_its_parent() {
    let t0 = Instant::now();
    let (mut root, mut child, mut grandchild) = chain(t0);
    for r in [&mut root, &mut child, &mut grandchild] {
        while r.poll_transmit(t0).is_some() {}
        events(r);
    }
    root.release();
    assert_eq!(releases(&mut root, t0), vec![CHILD]);
    assert!(root.released() && root.finished());
    root.release();
    assert!(releases(&mut root, t0).is_empty(), "said once");
    assert!(
        !events(&mut root).contains(&Event::Released),
        "the root has no daemon to tell"
    );

    child.handle_message(t0, ROOT, RelayMsg::Release);
    assert_eq!(releases(&mut child, t0), vec![GRANDCHILD]);
    assert_eq!(events(&mut child), vec![Event::Released]);
    assert!(child.released() && child.children().next().is_none());
    child.handle_message(t0, ROOT, RelayMsg::Release);
    assert!(releases(&mut child, t0).is_empty() && events(&mut child).is_empty());

    grandchild.handle_message(t0, CHILD, RelayMsg::Release);
    assert!(
        releases(&mut grandchild, t0).is_empty(),
        "a leaf has no one to tell"
    );
    assert_eq!(events(&mut grandchild), vec![Event::Released]);
    assert_eq!(grandchild.poll_timeout(), None, "no liveness checks left");
}

/// Only the parent ends a job: a release from a child, or from an ancestor that is not
/// the node's parent, is ignored, and a node never releases its root.
#[test]
fn a_release_from_anyone_but_the_parent_is_ignored() {
    let t0 = Instant::now();
    let (mut root, mut child, mut grandchild) = chain(t0);
    for r in [&mut root, &mut child, &mut grandchild] {
        while r.poll_transmit(t0).is_some() {}
        events(r);
    }
    child.handle_message(t0, GRANDCHILD, RelayMsg::Release);
    grandchild.handle_message(t0, ROOT, RelayMsg::Release);
    root.handle_message(t0, CHILD, RelayMsg::Release);
    for r in [&mut root, &mut child, &mut grandchild] {
        assert!(!r.released());
        assert!(releases(r, t0).is_empty());
        assert!(!events(r).contains(&Event::Released));
    }
}

/// On the wire the release is the last variant, so the others keep their numbers (an
/// older node fails to decode only this message) and it routes to the relay.
#[test]
fn the_release_is_appended_to_the_wire_and_routed_to_the_relay() {
    assert_eq!(Msg::Release.encode(), vec![16]);
    assert_eq!(Msg::Lacks { chunk: ChunkNo(1) }.encode()[0], 15);
    assert_eq!(Msg::decode(&[16]).expect("decodes"), Msg::Release);
    assert_eq!(Msg::Release.route(), Routed::Relay(RelayMsg::Release));
}

//! Issue 32 item 2, in the relay: a chunk lost after the push ended (its root gone) comes
//! from every source before a read fails: a sibling when the parent died, the origin store
//! when no node holds it; and when nothing is left, every reader fails at once, the next
//! ones too, without waiting for a deadline after another.

use std::time::Duration;

use super::*;

/// The liveness deadline of [`Net`]'s jobs.
const DEADLINE: Duration = Duration::from_millis(500);

/// A job pushed to every node of `p` and finished by its root, which then died (the push
/// exited).
fn pushed_and_over(p: &crate::Plan) -> Net {
    let mut net = Net::new(p, 12, 3);
    net.run_until(20_000, |n| n.job_done(Phase::All));
    let root = net.root_id;
    net.relays.get_mut(&root).expect("root").end_serving();
    net.run_until(10_000, |n| n.relays.values().all(Relay::finished));
    net.dead.insert(root);
    net
}

/// A leaf below a proxy, with siblings of its group, and its parent.
fn leaf_with_kin(net: &Net, p: &crate::Plan) -> (NodeId, NodeId) {
    p.ids()
        .skip(1)
        .find(|&id| {
            let r = &net.relays[&id];
            p.children[id.index()].is_empty()
                && p.parent[id.index()] != Some(net.root_id)
                && r.kin.len() >= 2
        })
        .map(|id| (id, p.parent[id.index()].expect("has a parent")))
        .expect("a leaf with siblings under a proxy")
}

fn lose(net: &mut Net, node: NodeId, chunk: ChunkNo) {
    let now = net.now;
    net.relays
        .get_mut(&node)
        .expect("started")
        .handle_lost(now, chunk);
}

#[test]
fn a_node_whose_parent_died_gets_a_lost_chunk_from_a_sibling_that_completed() {
    let p = plan(2, 8, Strategy::Topo);
    let mut net = pushed_and_over(&p);
    let (leaf, parent) = leaf_with_kin(&net, &p);
    net.dead.insert(parent);
    let chunk = ChunkNo(4);
    lose(&mut net, leaf, chunk);
    net.read(&leaf, chunk);
    let t0 = net.now;
    net.run_until(5_000, |n| n.relays[&leaf].has(chunk));
    let took = net.now - t0;
    // The dead parent costs one deadline (nothing watches it once the job is finished).
    assert!(
        took >= DEADLINE && took < DEADLINE + Duration::from_millis(100),
        "{took:?}"
    );
    assert_eq!(net.relays[&leaf].stats().demand_served, 0);
    // The next lost chunk does not wait for the dead parent again.
    let other = ChunkNo(5);
    lose(&mut net, leaf, other);
    net.read(&leaf, other);
    let t1 = net.now;
    net.run_until(5_000, |n| n.relays[&leaf].has(other));
    assert!(
        net.now - t1 < Duration::from_millis(50),
        "{:?}",
        net.now - t1
    );
    assert!(net.unobtainable.is_empty(), "{:?}", net.unobtainable);
}

#[test]
fn a_chunk_nobody_holds_fails_every_read_at_once_and_the_next_ones_too() {
    let p = plan(2, 8, Strategy::Topo);
    let mut net = pushed_and_over(&p);
    let (leaf, _) = leaf_with_kin(&net, &p);
    let chunk = ChunkNo(4);
    let nodes: Vec<NodeId> = p.ids().skip(1).collect();
    for &n in &nodes {
        lose(&mut net, n, chunk);
    }
    net.read(&leaf, chunk);
    let t0 = net.now;
    net.run_until(5_000, |n| n.unobtainable.contains_key(&leaf));
    assert!(
        net.now - t0 < Duration::from_millis(100),
        "every source answered at once, none was waited for: {:?}",
        net.now - t0
    );
    let Event::Unobtainable { tried, again, .. } = &net.unobtainable[&leaf][0] else {
        unreachable!("only these are kept");
    };
    assert!(!again);
    assert!(
        tried.len() >= 2 && matches!(tried[0], Source::Parent(_)),
        "the parent first, then others: {tried:?}"
    );
    // The next read fails at once: nothing changed.
    net.read(&leaf, chunk);
    net.step();
    let last = net.unobtainable[&leaf].last().expect("failed again");
    assert!(matches!(last, Event::Unobtainable { again: true, .. }));
    assert_eq!(net.relays[&leaf].stats().unobtainable, 1);
}

#[test]
fn a_chunk_nobody_holds_is_read_from_the_origin_store() {
    let p = plan(2, 8, Strategy::Topo);
    let mut net = pushed_and_over(&p);
    let (leaf, _) = leaf_with_kin(&net, &p);
    let chunk = ChunkNo(4);
    for n in p.ids().skip(1).collect::<Vec<_>>() {
        lose(&mut net, n, chunk);
    }
    net.relays.get_mut(&leaf).expect("leaf").set_origin(true);
    net.read(&leaf, chunk);
    let mut origin = None;
    for _ in 0..200 {
        net.step();
        origin = net.relays.get_mut(&leaf).expect("leaf").poll_origin();
        if origin.is_some() {
            break;
        }
    }
    assert_eq!(
        origin,
        Some(chunk),
        "read from the origin once no node had it"
    );
    // Its parent, with no origin store, gave up (and told it so); it did not.
    assert!(!net.unobtainable.contains_key(&leaf));
    // The origin is unreadable: the read fails now.
    let now = net.now;
    let r = net.relays.get_mut(&leaf).expect("leaf");
    r.handle_origin(now, chunk, false);
    assert!(matches!(
        r.poll_event(),
        Some(Event::Unobtainable { again: false, .. })
    ));
    // The next read looks at the origin again, and this time it is there.
    r.handle_local_want(now, chunk);
    assert_eq!(r.poll_origin(), Some(chunk));
    r.handle_origin(now, chunk, true);
    assert!(r.has(chunk));
    assert_eq!(r.stats().from_origin, 1);
}

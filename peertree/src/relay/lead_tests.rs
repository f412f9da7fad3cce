//! A relay's lead ([`Relay::forward_lead`]): how far what it holds in push order runs ahead
//! of what it handed to its least-behind child, which the daemon uses to stop reading its
//! parent's stream. Driven by hand on a [`Net`] that carries no bulk traffic.

use super::*;

/// A push of 12 chunks, no urgent set, with every node started and every child ready,
/// but no chunk sent: the hand-driven tests below move chunks themselves. The nodes in
/// `holding` kept the whole layer from an earlier job.
fn started(p: &crate::Plan, holding: &[NodeId]) -> Net {
    let mut net = Net::new(p, 12, 0);
    net.rate = 0;
    for &k in holding {
        net.held.insert(k, (0..12).map(ChunkNo).collect());
    }
    let nodes = p.ids().count();
    net.run_until(2_000, |n| n.relays.len() == nodes);
    for _ in 0..200 {
        net.step();
    }
    net
}

#[test]
fn a_relays_lead_is_what_it_holds_in_order_beyond_its_least_behind_child() {
    let p = plan(1, 4, Strategy::Topo);
    let mut net = started(&p, &[]);
    let root = net.root_id;
    let (proxy, kids) = p
        .ids()
        .skip(1)
        .find_map(|id| {
            let kids = &p.children[id.index()];
            (kids.len() >= 2).then(|| (id, kids.clone()))
        })
        .expect("a relay with two children");
    let parent = p.parent[proxy.index()].expect("a parent");
    let (now, order, s) = (net.now, net.schedule.order.clone(), net.schedule.clone());
    assert_eq!(
        net.relays.get_mut(&root).expect("root").forward_lead(),
        None
    );
    let leaf = *kids
        .iter()
        .find(|k| p.children[k.index()].is_empty())
        .expect("a leaf");
    assert_eq!(
        net.relays.get_mut(&leaf).expect("leaf").forward_lead(),
        None
    );

    let r = net.relays.get_mut(&proxy).expect("proxy");
    assert_eq!(r.forward_lead(), Some(0), "nothing held");
    for &c in &order[..5] {
        r.handle_chunk(now, parent, c, true);
    }
    assert_eq!(r.forward_lead(), Some(s.bytes_between(0, 5)));
    // One child is handed 3 chunks: it is the least behind, 2 chunks.
    for _ in 0..3 {
        assert!(r.poll_bulk(now, kids[0]).is_some());
    }
    assert_eq!(r.forward_lead(), Some(s.bytes_between(3, 5)));
    assert_eq!(
        s.bytes_between(3, 5),
        2_000,
        "2 chunks of 1,000 stored bytes"
    );
    // A gap does not count until it is filled: the gap's chunk may still come on the
    // parent's stream.
    r.handle_chunk(now, parent, order[6], true);
    assert_eq!(r.forward_lead(), Some(s.bytes_between(3, 5)));
    r.handle_chunk(now, parent, order[5], true);
    assert_eq!(r.forward_lead(), Some(s.bytes_between(3, 7)));
    // A chunk lost from the store opens a gap before the children's place: no lead.
    r.handle_lost(now, order[1]);
    assert_eq!(r.forward_lead(), Some(0));
    // Fetched again, the lead is back.
    r.handle_chunk(now, parent, order[1], true);
    assert_eq!(r.forward_lead(), Some(s.bytes_between(3, 7)));
}

/// Children that kept the layer from an earlier job are never behind: a node whose children
/// hold everything takes in at full speed (their pumps, with nothing to send, never ask, so
/// their places must be found here; counted from 0 they held the node's intake for ever).
#[test]
fn children_that_hold_the_layer_already_are_never_behind() {
    let p = plan(1, 4, Strategy::Topo);
    let proxy = p
        .ids()
        .skip(1)
        .find(|id| p.children[id.index()].len() >= 2)
        .expect("a relay with two children");
    let mut net = started(&p, &p.children[proxy.index()]);
    let (now, order) = (net.now, net.schedule.order.clone());
    let parent = p.parent[proxy.index()].expect("a parent");
    let r = net.relays.get_mut(&proxy).expect("proxy");
    for &c in &order {
        r.handle_chunk(now, parent, c, true);
    }
    assert_eq!(r.forward_lead(), Some(0));
}

#[test]
fn bytes_between_counts_stored_sizes_in_push_order() {
    let s = Schedule::new(
        vec![ChunkNo(2), ChunkNo(0), ChunkNo(1)],
        1,
        vec![10, 20, 30],
    )
    .expect("valid");
    assert_eq!(s.bytes_between(0, 1), 30);
    assert_eq!(s.bytes_between(0, 3), 60);
    assert_eq!(s.bytes_between(1, 3), 30);
    assert_eq!(s.bytes_between(2, 1), 0, "backwards is nothing");
    assert_eq!(s.bytes_between(1, 99), 30, "past the end is the end");
}

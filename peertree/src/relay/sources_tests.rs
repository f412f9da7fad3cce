//! The choice of a chunk's next source, on a fake clock: the parent, then other holders,
//! then the origin, each once; deadlines only where nothing else watches; silent nodes
//! skipped by every later search; a failed search remembered until something changes.

use std::time::{Duration, Instant};

use super::*;

const WAIT: Duration = Duration::from_secs(5);
const C: ChunkNo = ChunkNo(3);
const D: ChunkNo = ChunkNo(4);
const P: NodeId = NodeId(1);
const S1: NodeId = NodeId(2);
const S2: NodeId = NodeId(3);

fn known(parent: Option<NodeId>, holders: &[NodeId], origin: bool) -> Known {
    Known {
        parent,
        parent_unwatched: false,
        holders: holders.to_vec(),
        origin,
        parent_coming: false,
    }
}

#[test]
fn the_parent_then_each_holder_then_the_origin_then_nothing() {
    let t0 = Instant::now();
    let mut s = Sources::new(WAIT);
    let k = known(Some(P), &[S1, P, S2], true);
    assert_eq!(s.seek(t0, C, &k), Some(Step::Ask(Source::Parent(P))));
    // A second reader of the same chunk asks nobody: one search per chunk.
    assert_eq!(s.seek(t0, C, &k), None);
    // The parent's heartbeats watch it: no deadline of its own.
    assert_eq!(s.poll_timeout(), None);
    assert_eq!(
        s.lacks(t0, C, Source::Parent(P), &k),
        Some(Step::Ask(Source::Peer(S1)))
    );
    assert_eq!(s.poll_timeout(), Some(t0 + WAIT));
    // An answer from a source the search is not asking changes nothing.
    assert_eq!(s.lacks(t0, C, Source::Peer(S2), &k), None);
    // The parent is not asked twice, even listed among the holders.
    assert_eq!(
        s.lacks(t0, C, Source::Peer(S1), &k),
        Some(Step::Ask(Source::Peer(S2)))
    );
    assert_eq!(
        s.lacks(t0, C, Source::Peer(S2), &k),
        Some(Step::Ask(Source::Origin))
    );
    assert_eq!(
        s.asked(C),
        [
            Source::Parent(P),
            Source::Peer(S1),
            Source::Peer(S2),
            Source::Origin
        ]
    );
    assert_eq!(s.lacks(t0, C, Source::Origin, &k), Some(Step::GiveUp));
    assert!(s.gave_up(t0, C));
    assert!(s.searching().is_empty());
}

#[test]
fn with_no_source_at_all_a_search_gives_up_at_once() {
    let t0 = Instant::now();
    let mut s = Sources::new(WAIT);
    assert_eq!(s.seek(t0, C, &Known::default()), Some(Step::GiveUp));
    // And the next reader too, at once.
    assert_eq!(s.seek(t0, C, &Known::default()), Some(Step::GiveUp));
}

#[test]
fn an_unanswered_ask_moves_on_at_its_deadline_and_the_silent_node_is_skipped_after() {
    let t0 = Instant::now();
    let mut s = Sources::new(WAIT);
    let k = known(None, &[S1, S2], false);
    assert_eq!(s.seek(t0, C, &k), Some(Step::Ask(Source::Peer(S1))));
    assert_eq!(s.seek(t0, D, &k), Some(Step::Ask(Source::Peer(S1))));
    assert!(s.due(t0 + WAIT - Duration::from_millis(1)).is_empty());
    let due = s.due(t0 + WAIT);
    assert_eq!(due, vec![(C, Source::Peer(S1)), (D, Source::Peer(S1))]);
    // The first deadline names the node silent, which moves every search asking it.
    let moved = s.silent(S1);
    assert_eq!(moved, vec![C, D]);
    for c in moved {
        assert_eq!(
            s.moved_on(t0 + WAIT, c, &k),
            Some(Step::Ask(Source::Peer(S2)))
        );
    }
    // A later search never waits for S1 again.
    let e = ChunkNo(9);
    assert_eq!(s.seek(t0 + WAIT, e, &k), Some(Step::Ask(Source::Peer(S2))));
    // Until it is heard from.
    s.heard(S1);
    let f = ChunkNo(10);
    assert_eq!(s.seek(t0 + WAIT, f, &k), Some(Step::Ask(Source::Peer(S1))));
}

#[test]
fn the_parent_of_a_finished_job_has_a_deadline_of_its_own() {
    let t0 = Instant::now();
    let mut s = Sources::new(WAIT);
    let k = Known {
        parent_unwatched: true,
        ..known(Some(P), &[S1], false)
    };
    assert_eq!(s.seek(t0, C, &k), Some(Step::Ask(Source::Parent(P))));
    assert_eq!(s.poll_timeout(), Some(t0 + WAIT));
    assert_eq!(s.due(t0 + WAIT), vec![(C, Source::Parent(P))]);
    assert_eq!(s.silent(P), vec![C]);
    assert_eq!(
        s.moved_on(t0 + WAIT, C, &k),
        Some(Step::Ask(Source::Peer(S1)))
    );
}

#[test]
fn a_lost_parent_moves_its_searches_on_and_a_new_one_is_asked_next() {
    let t0 = Instant::now();
    let mut s = Sources::new(WAIT);
    let k = known(Some(P), &[S1], false);
    assert_eq!(s.seek(t0, C, &k), Some(Step::Ask(Source::Parent(P))));
    assert_eq!(s.parent_gone(), vec![C]);
    let orphan = known(None, &[S1], false);
    assert_eq!(
        s.moved_on(t0, C, &orphan),
        Some(Step::Ask(Source::Peer(S1)))
    );
    // S1 adopts this node: it is the parent now, asked as such (it is asked already).
    let adopted = known(Some(S1), &[], false);
    assert_eq!(
        s.new_parent(t0, C, &adopted),
        Some(Step::Ask(Source::Parent(S1)))
    );
    assert_eq!(s.new_parent(t0, C, &adopted), None, "asked once");
    s.arrived(C);
    assert!(s.searching().is_empty());
    assert_eq!(s.poll_timeout(), None);
}

#[test]
fn a_failed_search_is_remembered_and_only_the_origin_is_looked_at_again() {
    let t0 = Instant::now();
    let mut s = Sources::new(WAIT);
    let k = known(Some(P), &[S1], true);
    assert_eq!(s.seek(t0, C, &k), Some(Step::Ask(Source::Parent(P))));
    s.lacks(t0, C, Source::Parent(P), &k);
    s.lacks(t0, C, Source::Peer(S1), &k);
    assert_eq!(s.lacks(t0, C, Source::Origin, &k), Some(Step::GiveUp));
    // The next reader: the origin again (it may be readable now), nobody else.
    let t1 = t0 + Duration::from_millis(10);
    assert_eq!(s.seek(t1, C, &k), Some(Step::Ask(Source::Origin)));
    assert_eq!(s.lacks(t1, C, Source::Origin, &k), Some(Step::GiveUp));
    // Without an origin: at once.
    let no_origin = known(Some(P), &[S1], false);
    assert_eq!(s.seek(t1, C, &no_origin), Some(Step::GiveUp));
    // A node completing its phase may hold it: everyone is asked again.
    s.news();
    assert!(!s.gave_up(t1, C));
    assert_eq!(s.seek(t1, C, &k), Some(Step::Ask(Source::Parent(P))));
    s.lacks(t1, C, Source::Parent(P), &k);
    s.lacks(t1, C, Source::Peer(S1), &k);
    assert_eq!(s.lacks(t1, C, Source::Origin, &k), Some(Step::GiveUp));
    // And after a deadline's time, too (a parent may have found it since).
    let later = t1 + WAIT;
    assert!(!s.gave_up(later, C));
    assert_eq!(s.seek(later, C, &k), Some(Step::Ask(Source::Parent(P))));
}

#[test]
fn a_search_asks_a_bounded_number_of_peers() {
    let t0 = Instant::now();
    let mut s = Sources::new(WAIT);
    let many: Vec<NodeId> = (10..40).map(NodeId).collect();
    let k = known(None, &many, true);
    let mut step = s.seek(t0, C, &k);
    let mut peers = 0;
    while let Some(Step::Ask(Source::Peer(n))) = step {
        peers += 1;
        step = s.lacks(t0, C, Source::Peer(n), &k);
    }
    assert_eq!(peers, MAX_PEER_ASKS);
    assert_eq!(step, Some(Step::Ask(Source::Origin)));
}

#[test]
fn while_a_new_parent_is_coming_a_search_waits_for_it_and_fails_only_if_none_comes() {
    let t0 = Instant::now();
    let mut s = Sources::new(WAIT);
    let attaching = Known {
        parent_coming: true,
        ..known(None, &[S1], false)
    };
    assert_eq!(s.seek(t0, C, &attaching), Some(Step::Ask(Source::Peer(S1))));
    assert_eq!(
        s.lacks(t0, C, Source::Peer(S1), &attaching),
        Some(Step::Wait)
    );
    assert_eq!(s.waiting(), vec![C]);
    assert_eq!(s.poll_timeout(), None);
    // The root never answered: no parent is coming any more.
    let gone = known(None, &[S1], false);
    assert_eq!(s.moved_on(t0, C, &gone), Some(Step::GiveUp));
    assert_eq!(s.tried(C), [Source::Peer(S1)]);
}

//! A starved peer told from a dead one, with a fake clock: a root and its one child (and
//! the child's own child), driven the way the daemon drives them, on the relay's timer,
//! with the transport's signs of life ([`Relay::handle_transport_alive`]) given or withheld
//! by the test. No sockets, no sleeps.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::plan::NodeId;
use crate::relay::*;

const HEARTBEAT: Duration = Duration::from_millis(100);
const DEADLINE: Duration = Duration::from_millis(500);
/// How often the test's "adapter" looks at the transport (the daemon does on every pass of
/// the relay's timer, at least once a heartbeat).
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
    Arc::new(
        Schedule::new(
            vec![ChunkNo(0), ChunkNo(1), ChunkNo(2), ChunkNo(3)],
            1,
            vec![1000; 4],
        )
        .expect("valid"),
    )
}

/// The root of a job on `ROOT -> CHILD -> GRANDCHILD`, and the child's relay made from the
/// `Start` the root sends it, both at `t0`.
fn root_and_child(t0: Instant) -> (Relay, Relay) {
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
    let mut start = None;
    while let Some(t) = root.poll_transmit(t0) {
        if let Transmit::Control {
            to: CHILD,
            msg: Msg::Start(s),
        } = t
        {
            start = Some(*s);
        }
    }
    let child =
        Relay::new_node(start.expect("a Start for the child"), schedule(), t0).expect("child");
    (root, child)
}

/// Runs `relay` from `from` until `until` as the daemon's job task does: at every step
/// the transport is asked whether `peer` answered (`alive`), then the relay's timer runs
/// if due. Returns every event with its time.
fn drive(
    relay: &mut Relay,
    from: Instant,
    until: Instant,
    peer: NodeId,
    alive: impl Fn(Instant) -> bool,
) -> Vec<(Instant, Event)> {
    let mut events = Vec::new();
    let mut now = from;
    while now <= until {
        if alive(now) {
            relay.handle_transport_alive(now, peer);
        }
        if relay.poll_timeout().is_some_and(|t| t <= now) {
            relay.handle_timeout(now);
        }
        while relay.poll_transmit(now).is_some() {}
        while let Some(e) = relay.poll_event() {
            events.push((now, e));
        }
        now += STEP;
    }
    events
}

/// When `relay` gave up on `peer`, as a child or as its parent.
fn gave_up(events: &[(Instant, Event)], peer: NodeId) -> Option<Instant> {
    events.iter().find_map(|(t, e)| match e {
        Event::ChildFailed(c) | Event::ParentLost(c) if *c == peer => Some(*t),
        _ => None,
    })
}

/// A heartbeat from `from` to `relay` at `now`, as its relay sends it.
fn heard(relay: &mut Relay, now: Instant, from: NodeId) {
    relay.handle_message(now, from, RelayMsg::Report(Report::default()));
}

/// The issue-28 start-up case: a child on a saturated node takes longer than the deadline
/// to set up its connection and take its `Start`, but its transport answers meanwhile.
/// It is kept, counted as starved, and takes part once it speaks.
#[test]
fn a_child_slow_to_take_its_start_is_kept_while_its_transport_answers() {
    let t0 = Instant::now();
    let (mut root, _) = root_and_child(t0);
    // The handshake completes at 300 ms; from then on its QUIC stack acknowledges.
    let until = t0 + 3 * DEADLINE;
    let events = drive(&mut root, t0, until, CHILD, |t| t >= t0 + ms(300));
    assert_eq!(gave_up(&events, CHILD), None, "{events:?}");
    assert!(root.children().any(|c| c == CHILD));
    assert_eq!(root.stats().starved, 1);
    // Once it speaks its silence is over: it is not starved again within a deadline.
    heard(&mut root, until, CHILD);
    let events = drive(&mut root, until, until + DEADLINE, CHILD, |_| false);
    assert_eq!(gave_up(&events, CHILD), None, "{events:?}");
    assert_eq!(root.stats().starved, 1, "one silence, counted once");
}

/// Without its transport's word, the same child is declared failed at its deadline, as
/// before: a dead node is reported as fast as ever.
#[test]
fn a_child_silent_in_the_relay_and_the_transport_is_failed_at_its_deadline() {
    let t0 = Instant::now();
    let (mut root, _) = root_and_child(t0);
    let events = drive(&mut root, t0, t0 + 3 * DEADLINE, CHILD, |_| false);
    let at = gave_up(&events, CHILD).expect("declared failed");
    assert!(
        at > t0 + DEADLINE && at <= t0 + DEADLINE + STEP,
        "{:?}",
        at - t0
    );
    assert!(
        events.contains(&(at, Event::EdgeFailed(ROOT, CHILD))),
        "{events:?}"
    );
    assert_eq!(root.stats().starved, 0);
}

/// A child that took part, then was starved (its relay silent, its transport answering)
/// and then killed mid-silence: it is declared failed one deadline after its transport
/// went quiet, not one after its last report and not at the starved limit.
#[test]
fn a_starved_child_that_dies_is_failed_one_deadline_after_its_transport_went_quiet() {
    let t0 = Instant::now();
    let (mut root, _) = root_and_child(t0);
    heard(&mut root, t0 + ms(100), CHILD);
    let killed = t0 + ms(1300);
    let events = drive(&mut root, t0 + ms(100), t0 + ms(3000), CHILD, |t| {
        t < killed
    });
    let at = gave_up(&events, CHILD).expect("declared failed");
    let last_alive = killed - STEP;
    assert!(
        at > last_alive + DEADLINE && at <= last_alive + DEADLINE + STEP,
        "failed {:?} after the kill",
        at - killed
    );
    assert_eq!(root.stats().starved, 1);
}

/// A live daemon acknowledges packets for every job on the connection, also when it no
/// longer runs this one: a child whose relay never speaks again is declared failed after
/// [`STARVED_DEADLINES`] deadlines, however lively its transport.
#[test]
fn a_child_whose_transport_answers_but_whose_relay_never_does_fails_at_the_starved_limit() {
    let t0 = Instant::now();
    let (mut root, _) = root_and_child(t0);
    heard(&mut root, t0, CHILD);
    let limit = DEADLINE * STARVED_DEADLINES;
    let events = drive(&mut root, t0, t0 + limit + DEADLINE, CHILD, |_| true);
    let at = gave_up(&events, CHILD).expect("declared failed");
    assert!(at > t0 + limit && at <= t0 + limit + STEP, "{:?}", at - t0);
}

/// The child's side: a parent whose relay is starved but whose transport answers is kept;
/// once its transport is silent too, the child re-attaches within the deadline.
#[test]
fn a_starved_parent_is_kept_and_a_dead_one_is_left_within_the_deadline() {
    let t0 = Instant::now();
    let (_, mut child) = root_and_child(t0);
    let quiet = t0 + ms(1200);
    let events = drive(&mut child, t0, t0 + ms(3000), ROOT, |t| t < quiet);
    let at = gave_up(&events, ROOT).expect("parent lost");
    assert!(
        at > quiet - STEP + DEADLINE && at <= quiet + DEADLINE,
        "lost {:?} after the transport went quiet",
        at - quiet
    );
    assert_eq!(child.stats().starved, 1);
    assert_eq!(child.parent(), None, "asking an ancestor to adopt it");
}

/// Signs of life from a peer that is neither parent nor child change nothing, and a
/// transport heard before the relay's last word does not stretch the deadline.
#[test]
fn transport_signs_from_strangers_or_from_the_past_change_nothing() {
    let t0 = Instant::now();
    let (mut root, _) = root_and_child(t0);
    root.handle_transport_alive(t0 + ms(400), GRANDCHILD);
    root.handle_transport_alive(t0 + ms(50), CHILD);
    let events = drive(&mut root, t0, t0 + 3 * DEADLINE, CHILD, |_| false);
    let at = gave_up(&events, CHILD).expect("declared failed");
    assert!(at <= t0 + ms(50) + DEADLINE + STEP, "{:?}", at - t0);
}

/// The relay asks to be woken when a starved peer's time runs out, not only at
/// heartbeats: a caller driven by [`Relay::poll_timeout`] alone declares it in time.
#[test]
fn the_timer_wakes_for_a_starved_peer_when_its_transport_deadline_runs_out() {
    let t0 = Instant::now();
    let (mut root, _) = root_and_child(t0);
    root.handle_transport_alive(t0 + ms(400), CHILD);
    root.handle_timeout(t0 + ms(600));
    let mut wakes = Vec::new();
    let mut now = t0 + ms(600);
    for _ in 0..100 {
        let Some(t) = root.poll_timeout() else { break };
        now = t.max(now);
        wakes.push(now - t0);
        root.handle_timeout(now);
        while root.poll_transmit(now).is_some() {}
        if root.poll_event().is_some() {
            break;
        }
    }
    assert!(!root.children().any(|c| c == CHILD), "wakes {wakes:?}");
    assert_eq!(now, t0 + ms(400) + DEADLINE + ms(1), "wakes {wakes:?}");
}

/// A root that was itself starved (its timer fired 600 ms late) has not taken in what its
/// child sent meanwhile: it does not blame the child for its own deafness, and declares
/// the child failed only once it has listened for a full deadline without a word.
#[test]
fn a_node_that_was_starved_itself_gives_its_peers_the_time_it_did_not_listen() {
    let t0 = Instant::now();
    let stalled = ms(600);
    let woke = t0 + ms(300) + stalled;
    let mut deaf = Vec::new();
    for credit in [false, true] {
        let (mut root, _) = root_and_child(t0);
        heard(&mut root, t0, CHILD);
        drive(&mut root, t0, t0 + ms(300), CHILD, |_| false);
        if credit {
            root.handle_stall(woke, stalled);
        }
        root.handle_timeout(woke);
        let failed_at_wake = !root.children().any(|c| c == CHILD);
        let events = drive(&mut root, woke, woke + DEADLINE, CHILD, |_| false);
        deaf.push((failed_at_wake, gave_up(&events, CHILD).map(|t| t - t0)));
    }
    assert!(
        deaf[0].0,
        "without the stall the child is blamed at once: {deaf:?}"
    );
    let (failed_at_wake, at) = deaf[1];
    assert!(!failed_at_wake, "{deaf:?}");
    let at = at.expect("failed once the root listened long enough");
    assert!(
        at > DEADLINE + stalled && at <= DEADLINE + stalled + STEP,
        "failed at {at:?}"
    );
}

fn ms(v: u64) -> Duration {
    Duration::from_millis(v)
}

//! Simulations with known answers: closed-form times for a chain, a star and full trees;
//! conservation of chunks and bytes; failures; determinism.

use std::time::{Duration, Instant};

use super::*;
use crate::plan::{NodeId, Plan, Role};
use crate::relay::Phase;
use crate::topology::{ProxyPick, Topology};
use crate::{PlanOptions, Strategy, measure};

const MIB: u64 = 1 << 20;

/// A plan of `parents.len() + 1` hosts on the core; `parents[i - 1]` is host `i`'s parent.
fn custom(parents: &[usize]) -> Plan {
    let n = parents.len() + 1;
    let mut children = vec![Vec::new(); n];
    let mut parent = vec![None];
    for (i, &p) in parents.iter().enumerate() {
        children[p].push(NodeId(i as u32 + 1));
        parent.push(Some(NodeId(p as u32)));
    }
    let width = children.iter().map(Vec::len).max().unwrap_or(1).max(1);
    let plan = Plan {
        strategy: Strategy::Hostlist,
        width,
        root: NodeId(0),
        hosts: (0..n).map(|i| format!("h{i}")).collect(),
        roles: std::iter::once(Role::Login)
            .chain(std::iter::repeat_n(Role::Job, n - 1))
            .collect(),
        topo: vec![None; n],
        group: vec![None; n],
        parent,
        children,
        borrowed: Vec::new(),
        orphans: Vec::new(),
        rate: vec![None; n],
    };
    plan.check().expect("valid test plan");
    plan
}

/// Every link 1 byte per ns, an unlimited core, free processing but for `chunk_cost`.
fn simple_net(latency: u64, setup: u64, cost: u64, index: u64) -> Network {
    Network {
        node_bw: 1e9,
        port_bw: 1e9,
        uplink_bw: 1e9,
        level_bw: Vec::new(),
        core_bw: f64::INFINITY,
        login_bw: 1e9,
        storage_bw: 1e9,
        latency: Duration::from_nanos(latency),
        setup: Duration::from_nanos(setup),
        chunk_cost: Duration::from_nanos(cost),
        cpu_bw: f64::INFINITY,
        link_cpu_bw: f64::INFINITY,
        shared_cores: 0,
        index_bytes: index,
        node_info_bytes: 0,
        setup_cpu: Duration::ZERO,
        start_cpu: Duration::ZERO,
        node_cpu: 1.0,
        login_cpu: 1.0,
        process: Duration::ZERO,
        mount: Duration::ZERO,
    }
}

fn run(plan: &Plan, topo: Option<&Topology>, cfg: SimConfig) -> SimReport {
    let mut sim = Sim::new(plan, topo, cfg, Instant::now()).expect("set up");
    let report = sim.run().expect("completes");
    assert!(report.incomplete.is_empty(), "{:?}", report.incomplete);
    assert_eq!(report.duplicates, 0);
    report
}

#[test]
fn a_chain_pipelines_chunks_hop_by_hop() {
    // t0 = set-up + Start + 2 latencies (Start down, Report up), then each hop adds one
    // chunk time, one latency and one processing; the other chunks follow one chunk time
    // apart. Holds while the next hop is ready in time: setup + Start <= chunk + processing.
    let (lat, setup, cost, index, m, d) = (10_000, 100_000, 50_000, 4096, 8u64, 6);
    let chunk_t = MIB;
    let plan = custom(&(0..d).collect::<Vec<_>>());
    let cfg = SimConfig::new(simple_net(lat, setup, cost, index), m * MIB, MIB);
    let r = run(&plan, None, cfg);
    let t0 = setup + index + 2 * lat;
    let expected = t0 + d as u64 * (chunk_t + lat + cost) + (m - 1) * chunk_t;
    assert_eq!(r.deploy, Duration::from_nanos(expected));
    assert_eq!(r.pushed, m * d as u64);
}

#[test]
fn kernel_forwarding_costs_cpu_per_link_crossed() {
    // The lab's links are on the box: with `link_cpu_bw`, each chunk's processing grows by
    // its bytes times the link directions crossed (on the core: sender NIC, core, receiver
    // NIC, so 3) at that speed. Same chain as above, one chunk.
    let (lat, setup, cost, index, d) = (10_000, 100_000, 50_000, 4096, 3);
    let plan = custom(&(0..d).collect::<Vec<_>>());
    let mut net = simple_net(lat, setup, cost, index);
    net.link_cpu_bw = 1e9;
    let r = run(&plan, None, SimConfig::new(net, MIB, MIB));
    let t0 = setup + index + 2 * lat;
    let expected = t0 + d as u64 * (MIB + lat + cost + 3 * MIB);
    assert_eq!(r.deploy, Duration::from_nanos(expected));
    assert_eq!(r.link_bytes, 3 * d as u64 * MIB);
}

#[test]
fn a_chain_with_slow_setup_waits_for_the_prepare_wave() {
    // When set-up s dominates, the connections come from the `Prepare` wave, which goes
    // two levels per (s + latency): hosts 1 and 2 hear from the root at s + l, hosts 3 and
    // 4 at 2 (s + l) (host 5, a leaf, only from its parent). Host j's connection to its
    // child is up s after it heard. So host 4 is connected at 3s + 2l and holds its
    // `Start` at 3s + 3l + index, as its parent's `Start` came earlier. It then receives
    // the payload at link speed from its answer on (l + m chunk times + l + processing),
    // and the leaf, connected already, trails it by one store-and-forward of the last
    // chunk (chunk time + l + processing). Without the wave every hop waited for its own
    // set-up and `Start` in turn: 5 (s + index + l) + l, 8.9 ms more here.
    let (lat, setup, cost, index, m, d) = (10_000, 5_000_000, 50_000, 4096, 8u64, 5u64);
    let plan = custom(&(0..d as usize).collect::<Vec<_>>());
    let cfg = SimConfig::new(simple_net(lat, setup, cost, index), m * MIB, MIB);
    let r = run(&plan, None, cfg);
    let start4 = 3 * setup + 3 * lat + index;
    let expected = start4 + lat + m * MIB + lat + cost + MIB + lat + cost;
    assert_eq!(r.deploy, Duration::from_nanos(expected));
    let old = d * (setup + index + lat) + lat + m * MIB + lat + cost;
    assert!(r.deploy + Duration::from_millis(8) < Duration::from_nanos(old));
}

#[test]
fn a_star_is_bound_by_the_root_nic() {
    // The root's NIC sends every Start, then n x m chunks back to back.
    let (lat, setup, cost, index, m, n) = (10_000, 100_000, 50_000, 64 << 10, 4u64, 4u64);
    let plan = custom(&vec![0; n as usize]);
    let mut net = simple_net(lat, setup, cost, index);
    net.node_bw = 4e9;
    let cfg = SimConfig::new(net, m * MIB, MIB);
    let r = run(&plan, None, cfg);
    let expected = setup + n * index + n * m * MIB + lat + cost;
    assert_eq!(r.deploy, Duration::from_nanos(expected));
}

#[test]
fn shared_cores_serialise_the_processing_of_all_nodes() {
    // Processing (10 ms a chunk) dominates the links (1 ms a chunk). With one core for
    // everyone, it works from the first arrival without a pause: n m chunks back to back.
    // With a CPU per node, the nodes process side by side.
    let (lat, setup, cost, index, m, n) = (10_000, 100_000, 10_000_000, 64 << 10, 4u64, 4u64);
    let plan = custom(&vec![0; n as usize]);
    let mut net = simple_net(lat, setup, cost, index);
    net.shared_cores = 1;
    let r = run(&plan, None, SimConfig::new(net.clone(), m * MIB, MIB));
    let first = setup + n * index + MIB + lat;
    assert_eq!(r.deploy, Duration::from_nanos(first + n * m * cost));
    net.shared_cores = 2;
    let two = run(&plan, None, SimConfig::new(net.clone(), m * MIB, MIB));
    assert!(two.deploy < r.deploy);
    assert!(two.deploy >= Duration::from_nanos(first + n * m * cost / 2));
    net.shared_cores = 0;
    let own = run(&plan, None, SimConfig::new(net, m * MIB, MIB));
    assert!(own.deploy < two.deploy);
}

#[test]
fn full_trees_take_w_times_m_plus_depth_chunk_times() {
    // W-ary, depth 2, equal links, no overheads: every interior NIC sends each chunk W
    // times, so the last leaf finishes at (W m + (D - 1) W) chunk times.
    for w in [2usize, 3] {
        let mut parents = vec![0; w];
        for p in 1..=w {
            parents.extend(std::iter::repeat_n(p, w));
        }
        let plan = custom(&parents);
        let m = 5u64;
        let cfg = SimConfig::new(simple_net(0, 0, 0, 0), m * MIB, MIB);
        let r = run(&plan, None, cfg);
        let w = w as u64;
        assert_eq!(r.deploy, Duration::from_nanos((w * m + w) * MIB), "W = {w}");
    }
}

fn tianhe(groups: usize, strategy: Strategy) -> (Topology, Plan) {
    tianhe_with(groups, strategy, None)
}

/// [`tianhe`] with the login node feeding at most `login_copies` hosts.
fn tianhe_with(groups: usize, strategy: Strategy, login_copies: Option<usize>) -> (Topology, Plan) {
    let nodes: Vec<String> = (1..=groups * 8).map(|i| format!("cn{i:04}")).collect();
    let topo = Topology::generated(&nodes, 8, ProxyPick::First).expect("topology");
    let opts = PlanOptions {
        threshold: 0,
        login_copies,
        ..PlanOptions::default()
    };
    let plan = crate::plan(&topo, &nodes[3..], strategy, &opts).expect("plan");
    (topo, plan)
}

#[test]
fn every_chunk_arrives_once_by_push_and_link_bytes_add_up() {
    for strategy in [
        Strategy::Topo,
        Strategy::Random,
        Strategy::Hostlist,
        Strategy::Storage,
    ] {
        let (topo, plan) = tianhe(6, strategy);
        let payload = 5 * MIB + 1234;
        let mut sim = Sim::new(
            &plan,
            Some(&topo),
            SimConfig::new(Network::tianhe(), payload, MIB),
            Instant::now(),
        )
        .expect("set up");
        let r = sim.run().expect("completes");
        assert_eq!(r.chunks, 6);
        assert!(r.incomplete.is_empty());
        assert_eq!((r.duplicates, r.demand), (0, 0), "{strategy}");
        for id in plan.ids().skip(1) {
            assert_eq!(sim.received_by_push(id), 6, "{strategy} {id:?}");
            assert!(sim.relay(id).expect("started").local_done(Phase::All));
        }
        // The simulated links carry what the planner's metrics say the plan costs.
        let m = measure(&plan, &topo, payload);
        assert_eq!(r.uplink_in, m.uplink_bytes, "{strategy}");
        assert_eq!(r.uplink_out, m.uplink_out_bytes, "{strategy}");
        assert_eq!(r.pushed, (plan.len() as u64 - 1) * 6, "{strategy}");
        // Every byte a slave receives crosses its own NIC, and every byte it forwards.
        for id in plan.ids().skip(1) {
            let Some(t) = plan.topo[id.index()] else {
                continue;
            };
            if topo.is_proxy(t) {
                continue;
            }
            let sent = plan.children[id.index()].len() as u64 * payload;
            assert_eq!(sim.nic_bytes(id), (payload, sent), "{strategy} {id:?}");
        }
        assert!(r.deploy >= r.lower_bound, "{strategy}: {r:?}");
    }
}

/// Regression: nodes whose parent died before forwarding their `Start` never joined and
/// were declared unreachable; now the failed node's parent starts them itself. With one
/// copy from the login node, a relaying node and its planned parent both die early: the
/// relaying node's children never had their `Start`, were declared unreachable alive and
/// never got the layer, until the root started them itself after their time in limbo.
#[test]
fn survivors_complete_and_failed_edges_are_reported() {
    for copies in [None, Some(1)] {
        survivors_complete_with(copies);
    }
}

fn survivors_complete_with(login_copies: Option<usize>) {
    let (topo, plan) = tianhe_with(20, Strategy::Topo, login_copies);
    let mut cfg = SimConfig::new(Network::tianhe(), 16 * MIB, MIB);
    cfg.timing = crate::relay::Timing {
        heartbeat_ms: 20,
        deadline_ms: 100,
    };
    // A relaying proxy and two random nodes, killed while the push is under way.
    let relaying = plan
        .ids()
        .skip(1)
        .find(|&id| {
            plan.children[id.index()].len() > 2 && plan.parent[id.index()] != Some(plan.root)
        })
        .expect("an interior node below the first level");
    let mut victims = pick_victims(&plan, 2, 7);
    victims.retain(|v| *v != relaying);
    victims.push(relaying);
    let mut sim = Sim::new(&plan, Some(&topo), cfg, Instant::now()).expect("set up");
    sim.kill(Duration::from_millis(3), victims.clone());
    let r = sim.run().expect("completes");
    assert!(r.incomplete.is_empty(), "{:?}: {r:?}", r.incomplete);
    assert_eq!(r.killed, victims.len());
    for v in &victims {
        let parent = plan.parent[v.index()].expect("not the root");
        let reported =
            r.failed_edges.contains(&(parent, *v)) || r.unreachable.iter().any(|&(_, n)| n == *v);
        assert!(
            reported || sim.done_at(*v, Phase::All).is_some(),
            "{v:?} neither reported nor done: {r:?}"
        );
    }
    let above = plan.parent[relaying.index()].expect("parent");
    if victims.contains(&above) {
        // Nobody above it was left to find it dead: the root declares it lost.
        assert!(r.unreachable.contains(&(above, relaying)), "{r:?}");
    } else {
        assert!(r.failed_edges.contains(&(above, relaying)), "{r:?}");
    }
    for &k in &plan.children[relaying.index()] {
        if !victims.contains(&k) {
            assert!(r.attached.iter().any(|&(_, n)| n == k), "{k:?} re-attached");
        }
    }
    for id in plan.ids().skip(1).filter(|id| !sim.is_dead(*id)) {
        assert_eq!(sim.relay(id).expect("started").have_count(), r.chunks);
    }
}

#[test]
fn same_seed_same_result() {
    let (topo, plan) = tianhe(10, Strategy::Random);
    let go = || {
        let mut cfg = SimConfig::new(Network::two_level(), 3 * MIB, MIB);
        cfg.timing.heartbeat_ms = 1;
        let mut sim = Sim::new(&plan, Some(&topo), cfg, Instant::now()).expect("set up");
        sim.kill(Duration::from_millis(2), pick_victims(&plan, 3, 1));
        sim.run().expect("completes")
    };
    assert_eq!(go(), go());
}

#[test]
fn upper_level_uplinks_slow_traffic_between_units() {
    // Two super nodes of 2 groups each; a thin super-node uplink must show in the time.
    let toml = "[[pattern]]\nnodes = \"cn[001-032]\"\ngroup_size = 8\n\
                [[level]]\nname = \"supernode\"\nsize = 16\n";
    let topo = Topology::from_toml(toml).expect("topology");
    let nodes: Vec<String> = (1..=32).map(|i| format!("cn{i:03}")).collect();
    let opts = PlanOptions {
        threshold: 0,
        ..PlanOptions::default()
    };
    let plan = crate::plan(&topo, &nodes, Strategy::Random, &opts).expect("plan");
    let time = |level_bw: f64| {
        let mut net = Network::tianhe();
        net.level_bw = vec![level_bw];
        run(&plan, Some(&topo), SimConfig::new(net, 8 * MIB, MIB)).deploy
    };
    let open = time(f64::INFINITY);
    let thin = time(Network::tianhe().node_bw / 4.0);
    assert!(thin > open * 2, "thin {thin:?} vs open {open:?}");
}

#[test]
fn a_failure_reported_to_a_parent_that_then_dies_still_reaches_the_root() {
    // G dies; its parent C reports the failed edge to its own parent P, which dies before
    // passing it on. C re-attaches higher up and must say it again, or the root waits for
    // G for ever (this stalled 4,000-node simulations with 10 nodes killed at 20 ms).
    let (topo, plan) = tianhe(20, Strategy::Topo);
    let (p, c, g) = plan
        .ids()
        .skip(1)
        .find_map(|p| {
            plan.children[p.index()]
                .iter()
                .find_map(|&c| plan.children[c.index()].first().map(|&g| (p, c, g)))
        })
        .expect("three levels below the root");
    let mut cfg = SimConfig::new(Network::tianhe(), 16 * MIB, MIB);
    cfg.timing = crate::relay::Timing {
        heartbeat_ms: 20,
        deadline_ms: 100,
    };
    cfg.limit = Duration::from_secs(20);
    let mut sim = Sim::new(&plan, Some(&topo), cfg, Instant::now()).expect("set up");
    sim.kill(Duration::from_millis(3), vec![g]);
    sim.kill(Duration::from_millis(60), vec![p]);
    let r = sim.run().expect("the root completes the job");
    assert!(r.incomplete.is_empty(), "{:?}", r.incomplete);
    assert!(r.failed_edges.contains(&(c, g)), "{r:?}");
    assert!(r.attached.iter().any(|&(_, n)| n == c), "{r:?}");
}

/// The application starts, per node, after the later of its mount and its urgent set, plus
/// its own start, all after the push command's own start: in a 3-node chain with a slow
/// mount the mount decides; with a fast one the urgent set does.
#[test]
fn the_application_starts_after_the_mount_or_the_urgent_set_whichever_is_later() {
    let (lat, setup, cost, index) = (10_000, 100_000, 50_000, 4096);
    for (mount_ns, mount_decides) in [(500_000_000u64, true), (1_000, false)] {
        let mut net = simple_net(lat, setup, cost, index);
        net.process = Duration::from_millis(7);
        net.mount = Duration::from_nanos(mount_ns);
        let mut cfg = SimConfig::new(net, 8 * MIB, MIB);
        cfg.urgent = 2 * MIB;
        cfg.app_start = Duration::from_millis(3);
        let plan = custom(&[0, 1]);
        let r = run(&plan, None, cfg);
        let extra = Duration::from_millis(10);
        if mount_decides {
            // The last node's Start arrives within a few hops; its mount takes 0.5 s.
            assert!(
                r.app_started > Duration::from_nanos(mount_ns) + extra,
                "{r:?}"
            );
            assert!(
                r.app_started < Duration::from_nanos(mount_ns) + extra * 2,
                "{r:?}"
            );
        } else {
            assert_eq!(r.app_started, r.urgent + extra, "{r:?}");
        }
    }
}

/// Issue 16: on the lab's machine (a proxy's port carries 4 of its 7 members' streams),
/// planning with the link rates lets members relay to members, so every member receives
/// at its own link rate: much closer to the bound than the tree that assumes a port
/// carries its whole group (rates that say so: Tianhe's shape), with the same uplink
/// traffic. A CPU per node, as on a real machine (the lab's own 2 shared cores are another
/// limit). Both with the login node feeding every proxy, to compare the ports alone; one
/// copy from the login node (`login_copies = 1`) also stays within 1.3x of the bound. The
/// plan without rates, whose leaders feed 3 members and chain the rest so that the push
/// shows a node's rate (2.46 s when it fed all 7), comes within 1.15x of the rated one.
#[test]
fn link_rates_let_members_relay_where_the_port_is_narrow() {
    let nodes: Vec<String> = (1..=32).map(|i| format!("cn{i:04}")).collect();
    let bare = Topology::generated(&nodes, 8, ProxyPick::First).expect("topology");
    let mut net = Network::lab();
    net.shared_cores = 0;
    let rated = bare.clone().with_links(net.link_rates());
    let lab = net.link_rates().expect("the lab's rates");
    let whole_group = bare.clone().with_links(Some(crate::rates::LinkRates {
        port: lab.node * 8,
        ..lab
    }));
    let deploy = |topo: &Topology, login_copies| {
        let opts = PlanOptions {
            login_copies,
            // What `teesfs push` tells the planner: the payload's 1 MiB chunks.
            mean_chunk: Some(MIB),
            ..PlanOptions::default()
        };
        let plan = crate::plan(topo, &nodes, Strategy::Topo, &opts).expect("plan");
        run(
            &plan,
            Some(topo),
            SimConfig::new(net.clone(), 16 * MIB, MIB),
        )
    };
    let (with, without) = (deploy(&rated, Some(4)), deploy(&whole_group, Some(4)));
    assert_eq!(with.uplink_in, without.uplink_in);
    let unrated = deploy(&bare, Some(4));
    assert_eq!(unrated.uplink_in, with.uplink_in);
    assert!(
        unrated.deploy.as_secs_f64() < 1.15 * with.deploy.as_secs_f64(),
        "unrated {:?}, rated {:?}",
        unrated.deploy,
        with.deploy
    );
    let one = deploy(&rated, Some(1));
    let one_to_bound = one.deploy.as_secs_f64() / one.lower_bound.as_secs_f64();
    assert!(
        one_to_bound < 1.3,
        "one copy {:?} against {:?} (four: {:?})",
        one.deploy,
        one.lower_bound,
        with.deploy
    );
    assert_eq!(one.uplink_in, with.uplink_in);
    let gain = without.deploy.as_secs_f64() / with.deploy.as_secs_f64();
    let to_bound = with.deploy.as_secs_f64() / with.lower_bound.as_secs_f64();
    assert!(
        gain > 1.4,
        "rated {:?}, whole group from the port {:?}",
        with.deploy,
        without.deploy
    );
    assert!(
        to_bound < 1.3,
        "rated {:?} against {:?}",
        with.deploy,
        with.lower_bound
    );
}

/// Issue 17: a proxy that fails mid-push left its members to re-attach one by one across
/// the group's uplink (3.5 copies of the layer with rates, 5.7 without, in this test). Its
/// members now hang below each other in plan order ([`crate::relay::Start::kin`]) and only
/// the first goes upward, so after the failure the group's uplink carries what that member
/// lacks about once (within 1.3x).
#[test]
fn a_failed_proxy_costs_its_group_uplink_little_more_than_one_copy() {
    let nodes: Vec<String> = (1..=32).map(|i| format!("cn{i:04}")).collect();
    let bare = Topology::generated(&nodes, 8, ProxyPick::First).expect("topology");
    let mut net = Network::lab();
    net.shared_cores = 0;
    let rated = bare.clone().with_links(net.link_rates());
    let payload = 16 * MIB;
    for (name, topo) in [("rated", &rated), ("unrated", &bare)] {
        let plan =
            crate::plan(topo, &nodes, Strategy::Topo, &PlanOptions::default()).expect("plan");
        let mut cfg = SimConfig::new(net.clone(), payload, MIB);
        cfg.timing = crate::relay::Timing {
            heartbeat_ms: 20,
            deadline_ms: 100,
        };
        let clean = run(&plan, Some(topo), cfg.clone());
        let group = |id: NodeId| plan.group[id.index()];
        let (proxy, deputy) = plan
            .ids()
            .skip(1)
            .find_map(|id| {
                let kin: Vec<NodeId> = plan.children[id.index()]
                    .iter()
                    .copied()
                    .filter(|&k| group(k) == group(id))
                    .collect();
                (kin.len() >= 2).then_some((id, kin[0]))
            })
            .expect("a proxy feeding members of its group");
        let g = group(proxy).expect("in a group");
        let at = clean.deploy.mul_f64(0.3);
        // The same (deterministic) push, stopped where the proxy dies: what had entered the
        // group, and what the deputy lacked.
        let mut upto = cfg.clone();
        upto.limit = at;
        let mut before = Sim::new(&plan, Some(topo), upto, Instant::now()).expect("set up");
        assert!(matches!(before.run(), Err(crate::Error::SimTimeLimit(_))));
        let entered = before.group_uplink_in(g);
        let lacked = payload - before.relay(deputy).map_or(0, |r| r.have_count() as u64) * MIB;

        let mut sim = Sim::new(&plan, Some(topo), cfg, Instant::now()).expect("set up");
        sim.kill(at, vec![proxy]);
        let r = sim.run().expect("completes");
        assert!(r.incomplete.is_empty(), "{name}: {:?}", r.incomplete);
        assert_eq!(r.duplicates, 0, "{name}");
        let after = sim.group_uplink_in(g) - entered;
        let ratio = after as f64 / lacked as f64;
        eprintln!(
            "{name}: after the failure the group's uplink carried {ratio:.2}x what its deputy \
             lacked ({:.2} copies in all); deployed in {:?}, {:?} without the failure",
            sim.group_uplink_in(g) as f64 / payload as f64,
            r.deploy,
            clean.deploy,
        );
        assert!(ratio <= 1.3, "{name}: {ratio:.2}: {:?}", r.attached);
    }
}

#[test]
fn a_hosts_handshakes_take_turns_on_its_cpu_share() {
    // A root with 4 children and a handshake costing c of CPU at each end: the root (a
    // quarter of a core) does its 4 client sides one after the other, 4c each; each child
    // (half a core) its server side after its own client side is done, 2c. The last
    // child's connection is up at 4 x 4c + 2c + setup instead of setup; only its `Start`
    // no longer queues behind 3 others on the root's NIC.
    let (lat, setup, cost, index, c) = (10_000u64, 100_000u64, 0u64, 4096u64, 1_000_000u64);
    let plan = custom(&[0, 0, 0, 0]);
    let net = simple_net(lat, setup, cost, index);
    let free = run(&plan, None, SimConfig::new(net.clone(), 1024, 1024));
    let mut busy = net;
    busy.setup_cpu = Duration::from_nanos(c);
    busy.login_cpu = 0.25;
    busy.node_cpu = 0.5;
    let turns = run(&plan, None, SimConfig::new(busy, 1024, 1024));
    let later = (turns.deploy - free.deploy).as_nanos() as u64;
    let expected = 4 * 4 * c + 2 * c;
    assert!(
        later <= expected && later + 3 * (index + 64) >= expected,
        "{later} ns later, expected about {expected}"
    );
}

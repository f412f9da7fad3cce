//! The topology-aware tree: the paper's rules, its Fig. 3 situations, and that it never
//! costs more uplink traffic or hop-bytes than the random and hostlist trees.

use peertree::metrics::measure;
use peertree::topology::Topology;
use peertree::{Availability, LinkRates, NodeId, Plan, PlanOptions, Role, Strategy, plan};
use proptest::prelude::*;

use crate::common::{cluster, hosts};
use crate::strategies::case;

const MIB16: u64 = 16 << 20;

fn paper(topology: &Topology, nodes: &[String]) -> Plan {
    plan(
        topology,
        nodes,
        Strategy::TopoPaper,
        &PlanOptions::default(),
    )
    .expect("plannable")
}

/// Asserts the paper's rules: a slave hangs under its own proxy when that proxy is in the
/// tree; orphans only at the last level.
fn assert_paper_rules(p: &Plan, topology: &Topology) {
    let depths = p.depths();
    let orphan: Vec<bool> = (0..p.len())
        .map(|i| p.orphans.iter().any(|o| o.index() == i))
        .collect();
    let deepest_non_orphan = (0..p.len())
        .filter(|i| !orphan[*i])
        .map(|i| depths[i])
        .max()
        .unwrap_or(0);
    for id in p.ids() {
        let Some(t) = p.topo[id.index()] else {
            continue;
        };
        if orphan[id.index()] {
            assert!(
                depths[id.index()] >= deepest_non_orphan,
                "orphan {} above the last level",
                p.host(id)
            );
            continue;
        }
        if topology.is_proxy(t) {
            continue;
        }
        let proxy = topology.group(topology.group_of(t)).proxy;
        let parent = p.parent[id.index()].expect("non-root");
        assert_eq!(
            p.topo[parent.index()],
            Some(proxy),
            "{} not under its proxy",
            p.host(id)
        );
    }
}

/// Fig. 3 (a): the ideal job, whole groups. Every slave under its proxy, proxies breadth
/// first, each group's uplink entered exactly once.
#[test]
fn fig3_ideal_whole_groups() {
    let topology = cluster(17 * 8, 8);
    let nodes = hosts("cn[0001-0136]");
    let p = paper(&topology, &nodes);
    assert_paper_rules(&p, &topology);
    assert!(p.borrowed.is_empty() && p.orphans.is_empty());
    // 17 proxies: 15 under the login node, 2 under the first proxy (8 free slots).
    assert_eq!(p.children[0].len(), 15);
    let first = p.children[0][0];
    assert_eq!(p.host(first), "cn0001");
    assert_eq!(p.children[first.index()].len(), 7 + 2);
    assert_eq!(p.depth(), 3);
    let m = measure(&p, &topology, MIB16);
    assert_eq!(m.uplink_bytes, m.min_uplink_bytes);
    assert_eq!(m.min_uplink_bytes, 17 * MIB16);
    for g in &m.group_uplink {
        assert_eq!(
            g.in_bytes, MIB16,
            "group {:?} entered more than once",
            g.group
        );
    }
}

/// Fig. 3 (b): the first and last groups are partial. The first group lacks its proxy and
/// holds at most half the group, so its nodes are orphans at the last level; the last
/// group holds its proxy and a few slaves, which hang under it.
#[test]
fn fig3_first_and_last_groups_partial() {
    let topology = cluster(6 * 8, 8);
    let nodes = hosts("cn[0005-0036]"); // group 1: cn5-8 (no proxy), ..., group 5: cn33-36
    let p = paper(&topology, &nodes);
    assert_paper_rules(&p, &topology);
    assert!(p.borrowed.is_empty());
    let orphans: Vec<&str> = p.orphans.iter().map(|o| p.host(*o)).collect();
    assert_eq!(orphans, ["cn0005", "cn0006", "cn0007", "cn0008"]);
    let last = p.find("cn0033").expect("in job");
    let under: Vec<&str> = p.children[last.index()]
        .iter()
        .map(|c| p.host(*c))
        .collect();
    assert_eq!(under, ["cn0034", "cn0035", "cn0036"]);
    // Each orphan enters group 1 separately in the paper's tree ...
    let m = measure(&p, &topology, MIB16);
    assert_eq!(m.uplink_bytes, m.min_uplink_bytes + 3 * MIB16);
    // ... and once in the improved tree, through a deputy.
    let better = plan(&topology, &nodes, Strategy::Topo, &PlanOptions::default()).expect("ok");
    let mb = measure(&better, &topology, MIB16);
    assert_eq!(mb.uplink_bytes, mb.min_uplink_bytes);
    assert!(mb.hop_bytes < m.hop_bytes);
}

/// Fig. 3 (b) with more than half of the first group: its idle proxy is borrowed.
#[test]
fn fig3_partial_first_group_borrows_its_idle_proxy() {
    let topology = cluster(6 * 8, 8);
    let nodes = hosts("cn[0004-0036]"); // 5 of group 1's 8 nodes
    let p = paper(&topology, &nodes);
    assert_paper_rules(&p, &topology);
    let borrowed: Vec<&str> = p.borrowed.iter().map(|b| p.host(*b)).collect();
    assert_eq!(borrowed, ["cn0001"]);
    assert_eq!(p.roles[p.borrowed[0].index()], Role::Borrowed);
    assert!(p.orphans.is_empty());
    let m = measure(&p, &topology, MIB16);
    assert_eq!(m.uplink_bytes, m.min_uplink_bytes);

    // Busy proxy: no borrowing, orphans instead.
    let busy = PlanOptions {
        availability: Availability::Busy(["cn0001".to_owned()].into()),
        ..PlanOptions::default()
    };
    let p = plan(&topology, &nodes, Strategy::TopoPaper, &busy).expect("ok");
    assert!(p.borrowed.is_empty());
    assert_eq!(p.orphans.len(), 5);
    assert_paper_rules(&p, &topology);
}

#[test]
fn a_group_wider_than_the_tree_stays_inside_its_group() {
    let topology = cluster(64, 32);
    let nodes = hosts("cn[0001-0064]");
    for strategy in [Strategy::Topo, Strategy::TopoPaper] {
        let p = plan(
            &topology,
            &nodes,
            strategy,
            &PlanOptions {
                width: 4,
                ..PlanOptions::default()
            },
        )
        .expect("ok");
        let m = measure(&p, &topology, 1);
        assert_eq!(m.uplink_bytes, m.min_uplink_bytes, "{strategy}");
    }
}

/// The bandwidth-aware layout on a Tianhe-like job (groups of 8, width 15, starting inside
/// a group), planned without rates: every stream runs at a node's rate. The login node and
/// each leader feed at most 8 other groups (its uplink carries 8 node streams); a leader
/// feeds 3 of its members and the rest of its group hangs below them as chains inside the
/// group (so that the push shows the learned rates a node's own rate: a member's stream
/// that its proxy's port does not hold back); the partial first group (4 nodes) borrows
/// its idle proxy instead of making one slave feed three.
#[test]
fn topo_never_shares_a_link_beyond_its_rate() {
    let topology = cluster(1096, 8);
    let nodes = hosts("cn[0005-1084]");
    let p = plan(&topology, &nodes, Strategy::Topo, &PlanOptions::default()).expect("ok");
    let borrowed: Vec<&str> = p.borrowed.iter().map(|b| p.host(*b)).collect();
    assert_eq!(borrowed, ["cn0001"]);
    assert_eq!(p.children[p.root.index()].len(), 8);
    let group_of = |id: NodeId| p.topo[id.index()].map(|t| topology.group_of(t));
    for id in p.ids() {
        let Some(t) = p.topo[id.index()] else {
            continue;
        };
        let group = topology.group_of(t);
        let (own, foreign): (Vec<NodeId>, Vec<NodeId>) = p.children[id.index()]
            .iter()
            .partition(|&&c| group_of(c) == Some(group));
        if topology.is_proxy(t) {
            assert!(foreign.len() <= 8, "{} feeds {foreign:?}", p.host(id));
            assert!(own.len() <= 3, "{} feeds {own:?}", p.host(id));
            continue;
        }
        assert!(
            own.len() <= 1 && foreign.is_empty(),
            "{} feeds {own:?} {foreign:?}",
            p.host(id)
        );
        // Up the chain to its proxy, inside its group, within 3 hops.
        let proxy = Some(topology.group(group).proxy);
        let (mut up, mut hops) = (p.parent[id.index()].expect("non-root"), 1);
        while p.topo[up.index()] != proxy {
            assert_eq!(group_of(up), Some(group), "{} leaves its group", p.host(id));
            up = p.parent[up.index()].expect("below its proxy");
            hops += 1;
        }
        assert!(hops <= 3, "{} is {hops} hops below its proxy", p.host(id));
    }
    let fed_by_members = p
        .ids()
        .filter(|&id| {
            let parent = p.parent[id.index()];
            parent.is_some_and(|q| p.topo[q.index()].is_some_and(|t| !topology.is_proxy(t)))
        })
        .count();
    // 134 whole groups, 4 of 7 members each; the first group (the probe: its proxy feeds
    // 2) 2 of its 4; the last (a proxy and 3) none.
    assert_eq!(fed_by_members, 134 * 4 + 2);
    // 136 groups, 8 + 64 reachable at depths 1-2: leaders down to depth 3, members fed by
    // them 4, chains of up to 2 below those.
    assert_eq!(p.depth(), 6);
    let m = measure(&p, &topology, MIB16);
    assert_eq!(m.uplink_bytes, m.min_uplink_bytes);
}

/// A group whose proxy is busy keeps its traffic inside: a deputy receives once and the
/// rest of the group follows as a chain (one stream per node NIC).
#[test]
fn an_orphan_group_is_a_chain_below_its_deputy() {
    let topology = cluster(4 * 8, 8);
    let nodes = hosts("cn[0002-0032]");
    let busy = PlanOptions {
        availability: Availability::Busy(["cn0001".to_owned()].into()),
        ..PlanOptions::default()
    };
    let p = plan(&topology, &nodes, Strategy::Topo, &busy).expect("ok");
    assert!(p.borrowed.is_empty());
    let mut at = p.find("cn0002").expect("deputy");
    for next in ["cn0003", "cn0004", "cn0005", "cn0006", "cn0007", "cn0008"] {
        let kids: Vec<&str> = p.children[at.index()].iter().map(|c| p.host(*c)).collect();
        assert_eq!(kids, [next]);
        at = p.find(next).expect("in job");
    }
    assert!(p.children[at.index()].is_empty());
    let m = measure(&p, &topology, MIB16);
    assert_eq!(m.uplink_bytes, m.min_uplink_bytes);
}

/// The lab's links: slave NICs 100 Mbit/s, proxy ports, uplinks and the login link 4 x that.
fn lab_links() -> LinkRates {
    LinkRates::parse("node=100mbit,port=400mbit,uplink=400mbit,login=400mbit").expect("valid")
}

/// Asserts that no host feeds more streams than its links carry at a node's rate: a
/// leader at most `port` members of its group and `uplink` other groups, the login node
/// `login` hosts, a member one host.
fn assert_within_rates(p: &Plan, topology: &Topology, r: &LinkRates) {
    assert!(p.children[p.root.index()].len() <= r.login_streams());
    for id in p.ids() {
        let Some(t) = p.topo[id.index()] else {
            continue;
        };
        let group = topology.group_of(t);
        let (own, foreign): (Vec<NodeId>, Vec<NodeId>) = p.children[id.index()]
            .iter()
            .partition(|c| p.topo[c.index()].map(|ct| topology.group_of(ct)) == Some(group));
        if topology.is_proxy(t) {
            assert!(
                own.len() <= r.port_streams(),
                "{} feeds {} members",
                p.host(id),
                own.len()
            );
            assert!(
                foreign.len() <= r.uplink_streams(),
                "{} feeds {} groups",
                p.host(id),
                foreign.len()
            );
        } else {
            // A member's NIC carries one stream: a member of its group, or another group's
            // entry where its leader would otherwise feed that group itself.
            assert!(
                own.len() + foreign.len() <= r.member_streams(),
                "{} feeds {} members and {} other groups",
                p.host(id),
                own.len(),
                foreign.len()
            );
        }
    }
}

/// Issue 16: in the lab a proxy's port carries 4 members' streams, not 7. With the rates
/// the proxy feeds 4 members and 3 of them relay to the other 3, so every member receives
/// at its own link rate; the group is still entered once. Without rates the proxy feeds 3
/// and the rest hang below them as chains, and the first group's (the probe's) 2: so that
/// the push shows the learned rates a node's rate and whether a port held 3 streams back.
#[test]
fn a_port_narrower_than_its_group_feeds_what_it_carries_and_members_relay_the_rest() {
    let nodes = hosts("cn[0001-0032]");
    let tianhe = plan(
        &cluster(32, 8),
        &nodes,
        Strategy::Topo,
        &PlanOptions::default(),
    )
    .expect("ok");
    let children = |host: &str| -> Vec<&str> {
        let id = tianhe.find(host).expect("in job");
        tianhe.children[id.index()]
            .iter()
            .map(|c| tianhe.host(*c))
            .collect()
    };
    // The first group is the probe: 2 streams on its port, two chains below them.
    assert_eq!(children("cn0001"), ["cn0002", "cn0003"]);
    assert_eq!(children("cn0002"), ["cn0004"]);
    assert_eq!(children("cn0004"), ["cn0006"]);
    assert_eq!(children("cn0006"), ["cn0008"]);
    assert_eq!(children("cn0003"), ["cn0005"]);
    // The others: 3 streams on the port, chains below them.
    let members: Vec<&str> = children("cn0009")
        .into_iter()
        .filter(|&h| h > "cn0009" && h < "cn0017")
        .collect();
    assert_eq!(members, ["cn0010", "cn0011", "cn0012"]);
    assert_eq!(children("cn0010"), ["cn0013"]);
    assert_eq!(children("cn0013"), ["cn0016"]);

    let topology = cluster(32, 8).with_links(Some(lab_links()));
    // The login node feeding every proxy, so that the groups are alike.
    let every_proxy = PlanOptions {
        login_copies: Some(4),
        ..PlanOptions::default()
    };
    let p = plan(&topology, &nodes, Strategy::Topo, &every_proxy).expect("ok");
    let kids = |host: &str| -> Vec<&str> {
        let id = p.find(host).expect("in job");
        p.children[id.index()].iter().map(|c| p.host(*c)).collect()
    };
    assert_eq!(kids("cn0001"), ["cn0002", "cn0003", "cn0004", "cn0005"]);
    assert_eq!(kids("cn0002"), ["cn0006"]);
    assert_eq!(kids("cn0004"), ["cn0008"]);
    assert!(kids("cn0005").is_empty());
    assert_eq!(p.children[p.root.index()].len(), 4);
    assert_eq!(p.depth(), 3);
    assert_within_rates(&p, &topology, &lab_links());
    let m = measure(&p, &topology, MIB16);
    assert_eq!(m.uplink_bytes, m.min_uplink_bytes);

    // 3 groups of 14: 13 members in 4 chains of at most 4 below the proxy.
    let topology = cluster(42, 14).with_links(Some(lab_links()));
    let p = plan(
        &topology,
        &hosts("cn[0001-0042]"),
        Strategy::Topo,
        &every_proxy,
    )
    .expect("ok");
    assert_within_rates(&p, &topology, &lab_links());
    assert_eq!(p.depth(), 5);
    let m = measure(&p, &topology, MIB16);
    assert_eq!(m.uplink_bytes, m.min_uplink_bytes);
}

/// With link rates every edge carries its share of its sender's link, no more than its
/// receiver's link, and a relay no faster than it passes the payload on: in the lab's
/// 4 x 8 with large chunks every stream runs at a node's 100 Mbit/s (the proxy the login
/// node feeds alone too); the login node splits its 400 Mbit/s over as many children as it has; without
/// rates nothing is paced.
#[test]
fn every_edge_is_planned_at_its_share_of_the_senders_link() {
    let mbit = 1_000_000u64;
    let topology = cluster(32, 8).with_links(Some(lab_links()));
    let nodes = hosts("cn[0001-0032]");
    let large = PlanOptions {
        mean_chunk: Some(1 << 20),
        ..PlanOptions::default()
    };
    let p = plan(&topology, &nodes, Strategy::Topo, &large).expect("ok");
    assert_eq!(p.rate[p.root.index()], None);
    for (parent, child) in p.edges() {
        assert_eq!(
            p.rate[child.index()],
            Some(100 * mbit),
            "{} -> {}",
            p.host(parent),
            p.host(child)
        );
    }

    // Two groups, the login node feeding both: its link carries two streams at 200 Mbit/s
    // each, which the proxies' uplinks take; but a proxy that relays to members at 100 is
    // paced at 100, since its group cannot take the payload faster.
    let copies = |n| PlanOptions {
        login_copies: Some(n),
        ..PlanOptions::default()
    };
    let two = plan(
        &topology,
        &hosts("cn[0001-0016]"),
        Strategy::Topo,
        &copies(2),
    )
    .expect("ok");
    let proxy = two.find("cn0001").expect("in job");
    assert_eq!(two.rate[proxy.index()], Some(100 * mbit));
    let member = two.find("cn0002").expect("in job");
    assert_eq!(two.rate[member.index()], Some(100 * mbit));
    // Two proxies alone (leaves): each takes its 200.
    let leaves = plan(
        &topology,
        &hosts("cn[0001,0009]"),
        Strategy::Topo,
        &copies(2),
    )
    .expect("ok");
    for (_, child) in leaves.edges() {
        assert_eq!(leaves.rate[child.index()], Some(200 * mbit));
    }
    // Four copies, one to each proxy: every stream at a node's 100 Mbit/s.
    let four = plan(&topology, &nodes, Strategy::Topo, &copies(4)).expect("ok");
    for (_, child) in four.edges() {
        assert_eq!(
            four.rate[child.index()],
            Some(100 * mbit),
            "{}",
            four.host(child)
        );
    }

    // Flat: 32 streams share the login node's 400 Mbit/s.
    let flat = plan(&topology, &nodes, Strategy::Flat, &PlanOptions::default()).expect("ok");
    for (_, child) in flat.edges() {
        assert_eq!(flat.rate[child.index()], Some(400 * mbit / 32));
    }

    let unrated = plan(
        &cluster(32, 8),
        &nodes,
        Strategy::Topo,
        &PlanOptions::default(),
    )
    .expect("ok");
    assert!(unrated.rate.iter().all(Option::is_none));
}

/// With link rates a proxy feeds another group only when no member of its group below it
/// has a spare upload (is a leaf): the other groups ride on members' uploads, not on the
/// proxy's CPU.
fn assert_leaders_feed_their_own(p: &Plan, topology: &Topology, what: &str) {
    let group = |id: NodeId| p.topo[id.index()].map(|t| topology.group_of(t));
    for id in p.ids() {
        let Some(t) = p.topo[id.index()].filter(|&t| topology.is_proxy(t)) else {
            continue;
        };
        let g = Some(topology.group_of(t));
        let feeds_other = p.children[id.index()].iter().any(|&c| group(c) != g);
        if !feeds_other {
            continue;
        }
        let mut stack: Vec<NodeId> = p.children[id.index()].clone();
        while let Some(n) = stack.pop() {
            if group(n) != g {
                continue;
            }
            assert!(
                !p.children[n.index()].is_empty(),
                "{what}: {} feeds another group while {} of its group is idle",
                p.host(id),
                p.host(n)
            );
            stack.extend_from_slice(&p.children[n.index()]);
        }
    }
}

/// The login node's egress: with link rates it feeds one host by default, and at most
/// `login_copies` where a site sets it, never more than its link carries; the tree still
/// enters every group once with every stream within its links, and a proxy feeds other
/// groups only when no member below it has a spare upload, for large chunks and small.
/// Zero is refused, naming the setting.
#[test]
fn login_copies_cap_the_hosts_the_login_node_feeds() {
    let nodes = hosts("cn[0001-0032]");
    let rated = cluster(32, 8).with_links(Some(lab_links()));
    for topology in [cluster(32, 8), rated] {
        for (copies, fed) in [(None, 1), (Some(1), 1), (Some(2), 2), (Some(9), 4)] {
            let opts = PlanOptions {
                login_copies: copies,
                // Chunks large enough that links bound the push.
                mean_chunk: Some(1 << 20),
                ..PlanOptions::default()
            };
            let p = plan(&topology, &nodes, Strategy::Topo, &opts).expect("ok");
            let rated = topology.links().is_some();
            // Without rates the login node feeds the Tianhe shape's uplink fan-out.
            let fed = if rated {
                fed
            } else {
                copies.unwrap_or(9).min(8)
            };
            let what = format!("rated {rated}, copies {copies:?}");
            assert_eq!(p.children[p.root.index()].len(), fed.min(4), "{what}");
            assert_eq!(p.check(), Ok(()), "{what}");
            assert_eq!(p.job_nodes().count(), 32, "{what}");
            let m = measure(&p, &topology, MIB16);
            assert_eq!(m.uplink_bytes, m.min_uplink_bytes, "{what}");
            if let Some(r) = topology.links() {
                assert_within_rates(&p, &topology, r);
                assert_leaders_feed_their_own(&p, &topology, &what);
                // Small chunks too: the proxy the login node feeds sends to its members only.
                let small = PlanOptions {
                    mean_chunk: Some(16 << 10),
                    ..opts.clone()
                };
                let s = plan(&topology, &nodes, Strategy::Topo, &small).expect("ok");
                assert_eq!(s.children[s.root.index()].len(), fed.min(4), "{what}");
                assert_within_rates(&s, &topology, r);
                assert_leaders_feed_their_own(&s, &topology, &what);
            }
        }
    }
    let zero = PlanOptions {
        login_copies: Some(0),
        ..PlanOptions::default()
    };
    let err = plan(&cluster(32, 8), &nodes, Strategy::Topo, &zero).expect_err("refused");
    assert!(err.to_string().contains("login copies"), "{err}");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// With the group size within the width, the paper's rules hold on any job.
    #[test]
    fn paper_rules_hold(mut case in case()) {
        case.width = case.width.max(case.group_size);
        let topology = case.topology();
        let p = plan(&topology, &case.nodes(), Strategy::TopoPaper, &case.options()).expect("ok");
        assert_paper_rules(&p, &topology);
        if p.orphans.is_empty() {
            let m = measure(&p, &topology, 1);
            prop_assert_eq!(m.uplink_bytes, m.min_uplink_bytes);
        }
    }

    /// The improved tree enters every group exactly once and never costs more uplink bytes
    /// or hop-bytes than the random tree (any seed) or Slurm's hostlist tree.
    ///
    /// With upper levels the model charges a login edge 2 + levels hops but an edge between
    /// two proxies of one unit 2, so a tree that happens to hang neighbouring proxies under
    /// each other (random's shuffle can) undercuts the shallow fan-out `topo` keeps for
    /// speed by up to `levels` hops per login edge: the comparison allows that much. (The
    /// earlier, unconditional form of this property was false for `topo` before and after
    /// the bandwidth-aware layout: 3 leaders under the login node, random nesting one.)
    ///
    /// Not covered: width 1 (a chain: its order decides, not the tree), and widths below 8
    /// with upper levels, where a chain of neighbouring proxies can undercut the shallow
    /// tree `topo` builds by more. With link rates the hop-bytes half does not hold either
    /// and is not asked: the rates bound fan-outs (a login link of one node stream feeds one
    /// leader, the rest hang deeper), trading hops for every stream's rate, while the
    /// random tree ignores them. Uplink bytes stay at the minimum with or without rates.
    #[test]
    fn topo_never_costs_more_than_random_or_hostlist(mut case in case()) {
        case.width = case.width.max(if case.levels { 8 } else { 2 });
        let topology = case.topology();
        let nodes = case.nodes();
        let opts = case.options();
        let m = |s| measure(&plan(&topology, &nodes, s, &opts).expect("ok"), &topology, MIB16);
        let topo_plan = plan(&topology, &nodes, Strategy::Topo, &opts).expect("ok");
        let topo = measure(&topo_plan, &topology, MIB16);
        prop_assert_eq!(topo.uplink_bytes, topo.min_uplink_bytes);
        let login_edges = topo_plan.children[topo_plan.root.index()].len() as u64;
        let slack = MIB16 * topology.levels().len() as u64 * login_edges;
        for other in [Strategy::Random, Strategy::Hostlist] {
            let o = m(other);
            prop_assert!(topo.uplink_bytes <= o.uplink_bytes, "{} uplink {} < {}", other, o.uplink_bytes, topo.uplink_bytes);
            if case.rates.is_none() {
                prop_assert!(topo.hop_bytes <= o.hop_bytes + slack, "{} hop-bytes {} < {}", other, o.hop_bytes, topo.hop_bytes);
            }
        }
    }
}

//! The estimator of learned link rates and the override rule, on reports built by hand.

use super::*;
use crate::format::{EdgeBytes, Failure, FailureKind, NodeTimes, Uplink};

const MBIT: u64 = 1_000_000;
const SIZE: u64 = 16 << 20;

/// A report of a push of 16 MiB (no urgent set) to `groups` groups of `size`, the login node
/// feeding every proxy at `proxy_bps` and each proxy its members at `member_bps`, every node
/// started 0.3 s in.
fn push(groups: usize, size: usize, proxy_bps: u64, member_bps: u64) -> PushReport {
    let mut rep = PushReport {
        version: 1,
        root: "login".into(),
        total_bytes: SIZE,
        ..PushReport::default()
    };
    let secs = |bps: u64| 0.3 + SIZE as f64 * 8.0 / bps as f64;
    for g in 0..groups {
        let proxy = format!("g{g}n0");
        rep.uplinks.push(Uplink {
            group: g,
            proxy: proxy.clone(),
            in_bytes: SIZE,
            out_bytes: 0,
        });
        for m in 0..size {
            let host = format!("g{g}n{m}");
            let (parent, bps) = if m == 0 {
                ("login".to_string(), proxy_bps)
            } else {
                (proxy.clone(), member_bps)
            };
            rep.edges.push(EdgeBytes {
                parent: parent.clone(),
                child: host.clone(),
                bytes: SIZE,
            });
            rep.per_node.push(NodeTimes {
                host,
                parent,
                urgent_s: Some(0.3),
                all_s: Some(secs(bps)),
                group: Some(g),
                app_start_s: None,
            });
        }
    }
    rep.nodes = rep.per_node.len();
    rep
}

/// The unrated plan's shape (`peertree`'s topo strategy): a proxy feeds its first 3
/// members and each later member hangs below the member 3 before it, every member's
/// stream at `nic_bps`.
fn chains(rep: &mut PushReport, nic_bps: u64) {
    hang(rep, None, 3, nic_bps);
}

/// Members of group `only` (of every group with `None`): the first `direct` fed by their
/// proxy, each later one below the member `direct` before it, every stream at `bps`.
fn hang(rep: &mut PushReport, only: Option<usize>, direct: usize, bps: u64) {
    for i in 0..rep.per_node.len() {
        let (g, m) = rep.per_node[i].host[1..]
            .split_once('n')
            .map(|(g, m)| {
                let num = |s: &str| s.parse::<usize>().expect("gGnM");
                (num(g), num(m))
            })
            .expect("gGnM");
        if m == 0 || only.is_some_and(|o| o != g) {
            continue;
        }
        let parent = format!("g{g}n{}", m.saturating_sub(direct));
        rep.per_node[i].parent = parent.clone();
        rep.edges[i].parent = parent;
        let host = rep.per_node[i].host.clone();
        runs_at(rep, &host, bps);
    }
}

/// A file holding one push's figures, `o`, ended at `at`.
fn learned(o: &Observed, at: u64) -> LearnedRates {
    let mut file = LearnedRates::default();
    file.fold(
        PushFigures {
            at,
            job: "1".into(),
            figures: o.figures,
            at_least: o.at_least,
        },
        at,
    );
    file
}

/// `host`'s stream in `rep` ran at `bps` (from 0.3 s in).
fn runs_at(rep: &mut PushReport, host: &str, bps: u64) {
    let n = rep
        .per_node
        .iter_mut()
        .find(|n| n.host == host)
        .expect("host");
    n.all_s = Some(0.3 + SIZE as f64 * 8.0 / bps as f64);
}

fn near(got: Option<u64>, want: u64) -> bool {
    got.is_some_and(|g| (g as f64 / want as f64 - 1.0).abs() < 0.01)
}

/// The lab's first push without rates: the login node feeds the 4 proxies (400 Mbit/s
/// shared, 100 each), each proxy 3 of its members (their NICs, 100 each, the port of 400
/// not full) and the other 4 hang below those (100). The figures show a node's rate;
/// the login link and the ports carried streams as fast as the fastest, which bounds them
/// from below only, so the next plan gives each one more: enough for the next plan to feed
/// 4 members per port and chain the rest, and every proxy from the login node.
#[test]
fn an_unrated_push_of_the_lab_shows_its_ports_login_link_and_a_nodes_rate() {
    let mut rep = push(4, 8, 100 * MBIT, 100 * MBIT);
    chains(&mut rep, 100 * MBIT);
    let o = observe(&rep);
    let f = o.figures;
    assert!(near(o.at_least.port, 300 * MBIT), "{o:?}");
    assert!(near(f.node, 100 * MBIT), "{o:?}");
    assert_eq!((f.login, f.uplink, f.port), (None, None, None), "{o:?}");
    assert!(near(o.at_least.login, 400 * MBIT), "{o:?}");
    assert!(
        near(o.at_least.uplink, 100 * MBIT),
        "a lower bound only: {o:?}"
    );
    let l = learned(&o, 1000)
        .estimate(1000)
        .expect("a node's rate was measured");
    assert_eq!((l.pushes, l.last), (1, 1000));
    assert_eq!(
        (
            l.rates.port_streams(),
            l.rates.login_streams(),
            l.rates.uplink_streams()
        ),
        (4, 5, 2),
        "{l:?}"
    );
}

/// The lab's first push without rates on 3 x 14 (the figures of a release run, 59 Mbit/s
/// slave links, ports and login 238): the unrated plan feeds two proxies from the login
/// node (54 Mbit/s each, as fast as they took it), the third group behind the first proxy
/// (34), 3 members from their proxy and the rest below those (54 each). Taken as
/// measured, the login link was two streams wide and every later plan fed two proxies; as
/// a lower bound it is planned three wide, and the next plan feeds all three groups from
/// the login node as the lab's rates do, each port four members.
#[test]
fn a_link_whose_streams_ran_as_fast_as_any_is_bounded_not_measured() {
    let mut rep = push(3, 14, 54 * MBIT, 54 * MBIT);
    chains(&mut rep, 54 * MBIT);
    let third = rep
        .per_node
        .iter()
        .position(|n| n.host == "g2n0")
        .expect("g2n0");
    rep.per_node[third].parent = "g0n0".into();
    rep.per_node[third].all_s = Some(0.3 + SIZE as f64 * 8.0 / (34 * MBIT) as f64);
    rep.edges[third].parent = "g0n0".into();
    let o = observe(&rep);
    assert!(near(o.figures.node, 54 * MBIT), "{o:?}");
    assert!(near(o.at_least.port, 3 * 54 * MBIT), "{o:?}");
    assert_eq!(o.figures.login, None, "{o:?}");
    assert!(near(o.at_least.login, 108 * MBIT), "{o:?}");
    assert!(near(o.at_least.uplink, 54 * MBIT), "{o:?}");
    let mut file = learned(&o, 1);
    let first = file.estimate(1).expect("rates").rates;
    assert_eq!(
        (first.login_streams(), first.port_streams()),
        (3, 4),
        "{first:?}"
    );
    // The second push fed the three proxies at 54: bounded at three, planned four wide;
    // once a push shows it shared (four streams at 30 against a fastest 54), it is measured.
    let mut second = push(3, 14, 54 * MBIT, 30 * MBIT);
    for n in second.per_node.iter_mut().filter(|n| n.parent != "login") {
        n.all_s = Some(0.3 + SIZE as f64 * 8.0 / (20 * MBIT) as f64);
    }
    let o2 = observe(&second);
    assert!(near(o2.at_least.login, 162 * MBIT), "{o2:?}");
    file.fold(
        PushFigures {
            at: 2,
            job: "2".into(),
            figures: o2.figures,
            at_least: o2.at_least,
        },
        2,
    );
    assert_eq!(file.estimate(2).expect("rates").rates.login_streams(), 4);
    let mut shared = push(4, 2, 30 * MBIT, 54 * MBIT);
    shared
        .per_node
        .retain(|n| n.parent == "login" || n.host == "g0n1");
    let o3 = observe(&shared);
    assert!(near(o3.figures.login, 120 * MBIT), "{o3:?}");
    assert_eq!(o3.at_least.login, None, "{o3:?}");
}

/// Set-up time before a node was started is not counted; the urgent set's bytes are not
/// counted as carried in the window after it.
#[test]
fn an_edges_rate_counts_from_the_childs_start_and_leaves_the_urgent_set_out() {
    let mut rep = push(1, 2, 100 * MBIT, 100 * MBIT);
    for n in &mut rep.per_node {
        // Started late, at 5 s; the same transfer after it.
        n.urgent_s = n.urgent_s.map(|t| t + 4.7);
        n.all_s = n.all_s.map(|t| t + 4.7);
    }
    assert!(near(observe(&rep).figures.node, 100 * MBIT));
    rep.urgent_bytes = SIZE / 2;
    assert!(
        near(observe(&rep).figures.node, 50 * MBIT),
        "half the bytes, same time"
    );
}

#[test]
fn edges_too_small_too_short_or_into_failed_nodes_say_nothing() {
    let mut small = push(1, 2, 100 * MBIT, 100 * MBIT);
    for e in &mut small.edges {
        e.bytes = MIN_BYTES - 1;
    }
    assert!(observe(&small).is_empty());
    let mut short = push(1, 2, 100 * MBIT, 100 * MBIT);
    for n in &mut short.per_node {
        n.all_s = n.urgent_s.map(|t| t + MIN_SECS / 2.0);
    }
    assert!(observe(&short).is_empty());
    let mut failed = push(1, 2, 100 * MBIT, 100 * MBIT);
    failed.failures = ["g0n0", "g0n1"]
        .into_iter()
        .map(|c| Failure {
            kind: FailureKind::Failed,
            parent: "x".into(),
            child: c.into(),
            at_s: 1.0,
            reason: None,
            cause: None,
        })
        .collect();
    assert!(observe(&failed).is_empty());
    let mut unfinished = push(1, 2, 100 * MBIT, 100 * MBIT);
    for n in &mut unfinished.per_node {
        n.all_s = None;
    }
    assert!(observe(&unfinished).is_empty());
}

/// Each edge's rate, what `teesfs health --rates` prints: the link it crossed, and nothing
/// for an edge too small to measure.
#[test]
fn every_edge_is_named_with_its_link_and_its_rate() {
    let mut rep = push(2, 3, 100 * MBIT, 50 * MBIT);
    rep.edges[2].bytes = MIN_BYTES - 1;
    let edges = edge_rates(&rep);
    assert_eq!(edges.len(), 6);
    let links: Vec<(&str, LinkClass)> = edges.iter().map(|e| (e.child.as_str(), e.link)).collect();
    assert_eq!(
        links[..3],
        [
            ("g0n0", LinkClass::Login),
            ("g0n1", LinkClass::Port),
            ("g0n2", LinkClass::Port)
        ]
    );
    assert!(near(edges[0].bps, 100 * MBIT), "{:?}", edges[0]);
    assert!(near(edges[1].bps, 50 * MBIT), "{:?}", edges[1]);
    assert_eq!(edges[2].bps, None, "too little to measure");
    assert_eq!(edges[2].bytes, MIN_BYTES - 1);
    let json = serde_json::to_value(&edges[1]).expect("json");
    assert_eq!(json["link"], "port");
    assert_eq!(
        (json["parent"].as_str(), json["child"].as_str()),
        (Some("g0n0"), Some("g0n1"))
    );
}

/// A member relaying to a member shows a node's NIC as a sender too.
#[test]
fn a_member_feeding_members_shows_its_nic() {
    let mut rep = push(1, 4, 50 * MBIT, 45 * MBIT);
    // g0n2 and g0n3 hang under g0n1, at 45 Mbit/s each: its NIC sent 90.
    for i in [2, 3] {
        rep.per_node[i].parent = "g0n1".into();
        rep.edges[i].parent = "g0n1".into();
    }
    let o = observe(&rep);
    assert!(near(o.figures.node, 90 * MBIT), "{o:?}");
    assert!(
        near(o.at_least.port, 45 * MBIT),
        "one member on the port bounds it: {o:?}"
    );
    assert!(near(o.at_least.login, 50 * MBIT), "{o:?}");
}

fn figures(node: u64) -> Figures {
    Figures {
        node: Some(node * MBIT),
        port: Some(4 * node * MBIT),
        uplink: None,
        login: Some(4 * node * MBIT),
    }
}

fn at(at: u64, node: u64) -> PushFigures {
    PushFigures {
        at,
        job: format!("j{at}"),
        figures: figures(node),
        at_least: Figures::default(),
    }
}

/// Busy pushes (shared links measure low) and one odd high figure leave the estimate at
/// the links' rate; a class never measured is assumed eight nodes wide.
#[test]
fn the_estimate_is_a_high_percentile_robust_to_busy_pushes_and_one_outlier() {
    let mut file = LearnedRates::default();
    for (i, node) in [100, 40, 100, 55, 98, 1000, 100, 30]
        .into_iter()
        .enumerate()
    {
        file.fold(at(100 + i as u64, node), 200);
    }
    let l = file.estimate(200).expect("rates");
    assert_eq!(l.rates.node, 100 * MBIT, "{l:?}");
    assert_eq!(l.rates.port, 400 * MBIT);
    assert_eq!(l.rates.uplink, 800 * MBIT, "unmeasured: 8 nodes");
    let mut noisy = LearnedRates::default();
    let mut f = figures(100);
    f.port = Some(392 * MBIT);
    f.login = Some(250 * MBIT);
    noisy.fold(
        PushFigures {
            at: 1,
            job: "1".into(),
            figures: f,
            at_least: Figures::default(),
        },
        1,
    );
    let n = noisy.estimate(1).expect("rates");
    assert_eq!(n.rates.port, 400 * MBIT, "3.92 streams are 4");
    assert_eq!(n.rates.login, 250 * MBIT, "2.5 streams stay as measured");
    let mut low = LearnedRates::default();
    let mut f = figures(100);
    f.login = Some(366 * MBIT);
    low.fold(
        PushFigures {
            at: 1,
            job: "1".into(),
            figures: f,
            at_least: Figures::default(),
        },
        1,
    );
    let lo = low.estimate(1).expect("rates");
    assert_eq!(
        lo.rates.login_streams(),
        4,
        "the lab's login link measured 3.66 streams"
    );
    assert_eq!((l.pushes, l.last), (8, 107));
}

#[test]
fn old_figures_decay_and_only_the_newest_pushes_are_kept() {
    let mut file = LearnedRates::default();
    file.fold(at(0, 10), 0);
    let now = MAX_AGE_S + 10;
    file.fold(at(now, 100), now);
    assert_eq!(file.pushes.len(), 1, "the month-old figure is gone");
    for i in 0..(KEEP_PUSHES as u64 + 5) {
        file.fold(at(now + i, 100 + i), now + i);
    }
    assert_eq!(file.pushes.len(), KEEP_PUSHES);
    assert_eq!(file.pushes[0].at, now + 5, "the oldest went first");
    let empty = PushFigures {
        at: now + 100,
        job: "nothing".into(),
        figures: Figures::default(),
        at_least: Figures::default(),
    };
    file.fold(empty, now + 100);
    assert_eq!(
        file.pushes.len(),
        KEEP_PUSHES,
        "a push that measured nothing adds nothing"
    );
    assert!(
        file.estimate(now + MAX_AGE_S + 1000).is_none(),
        "every figure expired: nothing learned"
    );
    let no_node = LearnedRates {
        version: VERSION,
        pushes: vec![PushFigures {
            at: 1,
            job: "1".into(),
            figures: Figures {
                port: Some(1),
                ..Figures::default()
            },
            at_least: Figures::default(),
        }],
    };
    assert!(no_node.estimate(1).is_none(), "nothing to size streams by");
}

#[test]
fn configured_rates_override_learned_ones_and_learned_ones_none() {
    let configured =
        LinkRates::parse("node=10gbit,port=40gbit,uplink=40gbit,login=40gbit").expect("valid");
    let learned = Learned {
        rates: LinkRates::parse("node=1gbit,port=4gbit,uplink=2gbit,login=3gbit").expect("valid"),
        pushes: 3,
        last: 1_796_400_000,
    };
    let c = choose(Some(configured), Some(&learned));
    assert_eq!(
        (c.source, c.rates()),
        (Source::Configured, Some(configured))
    );
    assert_eq!(c.pushes, None);
    assert!(
        c.describe()
            .starts_with("configured: node=10gbit port=40gbit")
    );
    let l = choose(None, Some(&learned));
    let paced =
        LinkRates::parse("node=1.25gbit,port=5gbit,uplink=2.5gbit,login=3.75gbit").expect("valid");
    assert_eq!(
        (l.source, l.rates()),
        (Source::Learned, Some(paced)),
        "a quarter above the measured rates, the fan-outs alike"
    );
    assert_eq!(
        (paced.port_streams(), paced.login_streams()),
        (learned.rates.port_streams(), learned.rates.login_streams())
    );
    assert_eq!(
        l.describe(),
        "learned from 3 pushes (last 2026-12-04 16:00 UTC): node=1.3gbit port=5gbit \
         uplink=2.5gbit login=3.8gbit"
    );
    let n = choose(None, None);
    assert_eq!((n.source, n.rates()), (Source::None, None));
    assert!(n.describe().starts_with("none"));
    let json = serde_json::to_string(&l).expect("serialises");
    assert!(json.contains(r#""source":"learned""#), "{json}");
    assert_eq!(serde_json::from_str::<RatesUsed>(&json).expect("reads"), l);
}

#[test]
fn the_file_reads_back_and_a_bad_one_is_named() {
    let mut file = LearnedRates::default();
    file.fold(at(5, 100), 5);
    let back = LearnedRates::from_json(&file.to_json()).expect("reads back");
    assert_eq!(back, file);
    for (bytes, says) in [
        (&b"{\"version\": 1, \"pushes\": [{\"at\": "[..], "EOF"),
        (b"\0\0garbage", "expected value"),
        (br#"{"version": 7, "pushes": []}"#, "version 7"),
        (
            br#"{"version": 1, "pushes": [{"at": -3, "job": "x"}]}"#,
            "invalid value",
        ),
    ] {
        let e = LearnedRates::from_json(bytes).expect_err("bad").to_string();
        assert!(e.contains(says) && e.contains("ignored"), "{e}");
    }
    let huge = vec![b' '; MAX_FILE_BYTES as usize + 1];
    assert!(LearnedRates::from_json(&huge).is_err());
}

#[test]
fn rates_and_dates_read_like_people_write_them() {
    assert_eq!(bits(97_340_000), "97.3mbit");
    assert_eq!(bits(400_000_000), "400mbit");
    assert_eq!(bits(12_500_000_000), "12.5gbit");
    assert_eq!(
        LinkRates::parse(&format!(
            "node={},port=1,uplink=1,login=1",
            bits(97_340_000)
        ))
        .expect("--links reads it")
        .node,
        97_300_000
    );
    assert_eq!(date(0), "1970-01-01 00:00 UTC");
    assert_eq!(date(951_782_400), "2000-02-29 00:00 UTC");
}

#[test]
fn the_rates_used_read_and_write_the_json_of_before_the_shared_figures() {
    // The JSON `RatesUsed` wrote when it had its own four rate fields: the same bytes now.
    let learned = Learned {
        rates: LinkRates::parse("node=80mbit,port=320mbit,uplink=160mbit,login=240mbit")
            .expect("valid"),
        pushes: 2,
        last: 1_796_400_000,
    };
    let cases = [
        (
            choose(None, Some(&learned)),
            r#"{"source":"learned","node":100000000,"port":400000000,"uplink":200000000,"login":300000000,"pushes":2,"learned_at":1796400000}"#,
        ),
        (
            choose(Some(learned.rates), None),
            r#"{"source":"configured","node":80000000,"port":320000000,"uplink":160000000,"login":240000000}"#,
        ),
        (choose(None, None), r#"{"source":"none"}"#),
    ];
    for (used, json) in cases {
        assert_eq!(serde_json::to_string(&used).expect("serialises"), json);
        assert_eq!(
            serde_json::from_str::<RatesUsed>(json).expect("reads"),
            used
        );
    }
    assert_eq!(
        serde_json::from_str::<RatesUsed>(r#"{"source":"configured","node":1,"login":2}"#)
            .expect("a partial one reads")
            .rates(),
        None
    );
}

/// The lab's first push in the scale model, as measured on 2026-12-07 (NICs 76 Mbit/s,
/// ports and uplinks 304): the login node's streams into the proxies ran at 72-95 Mbit/s,
/// faster than any NIC, since a proxy's way in is its group's uplink; each port's 3
/// streams, and the chains below them, at the NICs' 76. A node's rate is a member's
/// stream, not a proxy's: the port, known to carry 3, is planned as 4 node streams (with a
/// node's rate taken from the 95 it came out 3, and the second push ran 1.32x the push with
/// the lab's rates).
#[test]
fn a_nodes_rate_comes_from_a_stream_into_a_member_not_into_a_proxy() {
    let mut rep = push(4, 8, 72 * MBIT, 76 * MBIT);
    chains(&mut rep, 76 * MBIT);
    runs_at(&mut rep, "g3n0", 95 * MBIT);
    let o = observe(&rep);
    assert!(near(o.figures.node, 76 * MBIT), "{o:?}");
    assert!(near(o.at_least.uplink, 95 * MBIT), "{o:?}");
    assert!(near(o.at_least.port, 3 * 76 * MBIT), "{o:?}");
    let l = learned(&o, 1).estimate(1).expect("rates");
    assert_eq!(l.rates.port_streams(), 4, "{l:?}");
    // Without a measured stream into a member, the proxies' streams still give a node's
    // rate (a push of proxies alone).
    let mut proxies = push(4, 1, 72 * MBIT, 0);
    runs_at(&mut proxies, "g3n0", 95 * MBIT);
    assert!(near(observe(&proxies).figures.node, 95 * MBIT));
}

/// Group `g` of `rep` fed as the unrated plan's probe: its proxy feeds 2 members and each
/// later member hangs below the member 2 before it, every stream at `bps`.
fn probe(rep: &mut PushReport, g: usize, bps: u64) {
    hang(rep, Some(g), 2, bps);
}

/// A port of 2 nodes' rate (the lab with `--proxy-group-rate 200mbit`, scaled: NICs 76,
/// ports 152): the 3 streams of each port ran at 51 and every chain below them too, so
/// without the probe nothing showed a node's rate and the port was planned 4 wide. The
/// probe group's 2 streams run at the NICs' 76: the other ports' streams are below it,
/// shared, and the port is measured at 2 streams.
#[test]
fn the_probe_group_shows_a_port_narrower_than_three_streams() {
    let mut rep = push(4, 8, 90 * MBIT, 152 * MBIT / 3);
    chains(&mut rep, 152 * MBIT / 3);
    let blind = observe(&rep);
    assert!(near(blind.figures.node, 152 * MBIT / 3), "{blind:?}");
    assert_eq!(
        blind.figures.port, None,
        "nothing to compare with: {blind:?}"
    );
    probe(&mut rep, 0, 76 * MBIT);
    let o = observe(&rep);
    assert!(near(o.figures.node, 76 * MBIT), "{o:?}");
    assert!(
        near(o.figures.port, 152 * MBIT),
        "measured, not bounded: {o:?}"
    );
    let l = learned(&o, 1).estimate(1).expect("rates");
    assert_eq!(l.rates.port_streams(), 2, "{l:?}");
    // The lab's port of 4 nodes' rate: the other ports' 3 streams at the NICs' rate too,
    // bounded from below and planned 4 wide.
    let mut lab = push(4, 8, 90 * MBIT, 74 * MBIT);
    chains(&mut lab, 74 * MBIT);
    probe(&mut lab, 0, 76 * MBIT);
    let o = observe(&lab);
    assert_eq!(o.figures.port, None, "{o:?}");
    let l = learned(&o, 1).estimate(1).expect("rates");
    assert_eq!(l.rates.port_streams(), 4, "{l:?}");
}

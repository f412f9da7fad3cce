//! Issue 33, out of the box: on the lab with no link rates configured, the first push
//! learns the rates of the lab's link classes (kept in the store, STORE/learned/rates.json)
//! and the second push plans with them, says so in its report, and the rates are those of
//! the lab's shaping within a sane factor.

use std::time::Duration;

use lab::{Lab, LabOptions, LabSpec, PushOptions};
use pushreport::rates::Source;

use crate::lab::{can_lab, lab_turn};
use crate::util::teesfs_bin;

/// `got` (bits per second) within `lo..=hi` times `want`.
fn within(what: &str, got: Option<u64>, want: u64, lo: f64, hi: f64) {
    let got = got.unwrap_or_else(|| panic!("no {what} rate"));
    let ratio = got as f64 / want as f64;
    eprintln!("{what}: learned {got} bit/s, shaped {want} bit/s ({ratio:.2}x)");
    assert!(
        (lo..=hi).contains(&ratio),
        "{what}: learned {got} bit/s is {ratio:.2}x the lab's {want} bit/s"
    );
}

#[test]
fn lab_unrated_pushes_learn_the_link_rates_and_the_next_plan_uses_them() {
    let _turn = lab_turn();
    if !can_lab() {
        return;
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    let spec = LabSpec::default();
    let lab = Lab::up(&spec, &LabOptions::new(teesfs_bin())).expect("lab up");
    let bound = |bytes: u64| bytes as f64 * 8.0 / spec.rates.slave as f64;
    let mut reports = Vec::new();
    // Two layers of different bytes: a second push of the same chunks would find them on
    // every node already.
    for (seed, name) in [(1, "first"), (2, "second")] {
        let layer = tmp.path().join(name);
        lab::bench::write_payload(&layer, 16 << 20, seed).expect("layer");
        let index = lab.publish(&layer).expect("publish");
        let mut o = PushOptions::new(&index);
        o.links = false;
        o.timeout = Duration::from_secs(120);
        let run = lab.push(&o).expect("push");
        let r = run.report;
        assert!(
            r.failures.is_empty(),
            "{name} push failed: {:?}",
            r.failures
        );
        let all = r.all_complete_s.expect("complete");
        eprintln!(
            "{name} push: all nodes {all:.2} s, {:.2}x the link bound; rates {:?}",
            all / bound(r.total_bytes),
            r.rates
        );
        reports.push(r);
    }
    let file = lab.work().join("store/learned/rates.json");
    let kept = std::fs::read(&file).expect("the store keeps what the pushes measured");
    let kept = pushreport::rates::LearnedRates::from_json(&kept).expect("a learned-rates file");
    assert_eq!(kept.pushes.len(), 2, "both pushes folded in: {kept:?}");

    let first = reports[0]
        .rates
        .as_ref()
        .expect("the first report names its rates");
    assert_eq!(first.source, Source::None, "nothing learned yet: {first:?}");
    let used = reports[1]
        .rates
        .as_ref()
        .expect("the second report names its rates");
    assert_eq!(used.source, Source::Learned, "{used:?}");
    assert_eq!(used.pushes, Some(1), "{used:?}");
    let r = spec.rates;
    // A node's rate comes from the login node's streams to the proxies (400 Mbit/s over 4
    // proxies): a lower bound that may run high. Every figure is what the push achieved:
    // on the project's 2 cores, shared with builds, a push is CPU-bound well below the
    // links (a first push measured half of them with a compiler running beside it).
    within("node", used.node, r.slave, 0.25, 2.5);
    within("port", used.port, r.proxy_group, 0.25, 1.5);
    within("login", used.login, r.login, 0.25, 1.5);
    let rates = used.rates().expect("rates");
    assert!(
        (2..=5).contains(&rates.port_streams()),
        "a port of 4 nodes' rate feeds about 4 members, not the whole group: {rates:?}"
    );
    lab.down().expect("lab down");
}

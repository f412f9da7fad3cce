//! The scale model: every lab node runs in its own CPU cgroup, so a node that spins gets
//! no more than its quota and another node's application starts as fast as with the
//! machine idle; a node's application takes its CPU time over the quota; the cgroups are
//! gone when the lab is.

use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use lab::scale::{AppQuota, CpuModel};
use lab::{Lab, LabOptions, LabSpec};

use crate::lab::can_lab;
use crate::util::teesfs_bin;

/// CPU of each node in this test: enough to measure quickly, little enough that two
/// nodes' quotas and the login node's fit in this machine's two cores.
const NODE_CPU: f64 = 0.1;

/// Busy loops started on a node, killed when dropped.
struct Spinners(Vec<Child>);

impl Drop for Spinners {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn spin(lab: &Lab, host: &str, n: usize) -> Spinners {
    Spinners(
        (0..n)
            .map(|_| {
                lab.command_on(host, "sh")
                    .expect("node command")
                    .args(["-c", "while :; do :; done"])
                    .stdin(Stdio::null())
                    .spawn()
                    .expect("busy loop")
            })
            .collect(),
    )
}

/// A fixed amount of CPU work on `host`: wall seconds and the CPU seconds it used.
fn work(lab: &Lab, host: &str) -> (f64, f64) {
    let t = Instant::now();
    // `times` prints the shell's own user and system time: the work's CPU.
    let out = lab
        .command_on(host, "sh")
        .expect("node command")
        .args([
            "-c",
            "i=0; while [ $i -lt 150000 ]; do i=$((i+1)); done; times",
        ])
        .output()
        .expect("work");
    let wall = t.elapsed().as_secs_f64();
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    let first = text.lines().next().expect("times output");
    let cpu: f64 = first.split_whitespace().map(minutes_seconds).sum();
    (wall, cpu)
}

/// `0m1.23s` as seconds.
fn minutes_seconds(s: &str) -> f64 {
    let (m, rest) = s.split_once('m').expect("NmN.NNs");
    let sec = rest.trim_end_matches('s');
    m.parse::<f64>().expect("minutes") * 60.0 + sec.parse::<f64>().expect("seconds")
}

fn cpu_of(spinners: &Spinners) -> f64 {
    spinners
        .0
        .iter()
        .map(|c| lab::proc::cpu_seconds(c.id()))
        .sum()
}

/// A lab of one group of `group_size` nodes under the scale model at `cores` a node, its
/// applications under `apps`.
pub(crate) fn model_lab(group_size: usize, cores: f64, apps: AppQuota) -> Lab {
    let spec = LabSpec {
        groups: 1,
        group_size,
        ..LabSpec::default()
    };
    let mut opts = LabOptions::new(teesfs_bin());
    opts.cpu = CpuModel::Cores(cores);
    opts.app_quota = apps;
    Lab::up(&spec, &opts).expect("lab up")
}

#[test]
fn lab_model_caps_a_spinning_node_at_its_quota_and_leaves_the_others_alone() {
    let _turn = crate::lab::lab_turn();
    if !can_lab() {
        return;
    }
    let lab = model_lab(3, NODE_CPU, AppQuota::Node);
    let model = lab.model().expect("a scale model").clone();
    assert_eq!(model.node_cpu, NODE_CPU);
    // 0.1 core at 1.5625 Gbit/s per core: links of 156 Mbit/s.
    assert_eq!(lab.layout().spec.rates.slave, 156_250_000);
    assert!(
        lab.model_text().contains("0.1000 cores per node"),
        "{}",
        lab.model_text()
    );
    let dirs: Vec<_> = lab
        .layout()
        .nodes
        .iter()
        .filter_map(|n| lab::cgroup::dir_of(&n.netns))
        .collect();
    assert!(dirs.iter().all(|d| d.is_dir()), "{dirs:?}");
    // A daemon held to a tenth of a core runs one runtime thread: a second adds no CPU,
    // only wake-ups from one thread to the other.
    let log = std::fs::read_to_string(lab.work().join("n01").join("daemon.log")).expect("log");
    assert!(
        log.lines()
            .any(|l| l.contains("runtime threads") && l.trim_end().ends_with("workers=1")),
        "n01's daemon, under a quota of {NODE_CPU} cores, did not start with 1 worker:\n{log}"
    );

    // Alone, the work takes its CPU time over the quota.
    let (alone, cpu) = work(&lab, "n03");
    let modelled = cpu / NODE_CPU;
    assert!(
        alone > 0.7 * modelled && alone < 1.5 * modelled + 0.3,
        "alone {alone:.2} s for {cpu:.3} CPU-s: the model says {modelled:.2} s"
    );

    // Two busy loops on n02: together no more than n02's quota.
    // What the quotas held n01 (its daemon, idle) and n02 back so far: the daemons' own
    // start may have been held a little.
    let held = |host: &str| lab.cgroups().expect("cgroups").throttled_s([host]);
    let (idle0, spun0) = (held("n01"), held("n02"));
    let spinners = spin(&lab, "n02", 2);
    // Each joins its node's cgroup as its first step (a spawned child has not yet run).
    let until = Instant::now() + Duration::from_secs(5);
    loop {
        let in_cgroup = lab.cgroups().expect("cgroups").pids("n02");
        if spinners.0.iter().all(|c| in_cgroup.contains(&c.id())) {
            break;
        }
        assert!(
            Instant::now() < until,
            "busy loops not in n02's cgroup {in_cgroup:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(300));
    let (c0, t0) = (cpu_of(&spinners), Instant::now());
    let (beside, beside_cpu) = work(&lab, "n03");
    std::thread::sleep(Duration::from_millis(1500));
    let (used, wall) = (cpu_of(&spinners) - c0, t0.elapsed().as_secs_f64());
    assert!(
        used <= NODE_CPU * wall * 1.15 + 0.02,
        "two busy loops used {used:.3} CPU-s in {wall:.2} s, over the quota {NODE_CPU}"
    );
    assert!(
        used >= NODE_CPU * wall * 0.5,
        "the busy loops barely ran: {used:.3} CPU-s"
    );
    let throttled = lab
        .cgroups()
        .expect("cgroups")
        .throttling("n02")
        .expect("cpu.stat");
    assert!(throttled.throttled > 0, "{throttled:?}");
    // What `lab launch` reports per method: the spinning node waited on its quota for most
    // of the time it spun; an idle node (n01: its daemon only) hardly at all.
    let (spun, idle) = (held("n02") - spun0, held("n01") - idle0);
    assert!(
        spun >= 0.5 * wall,
        "n02 spun {wall:.2} s on 2 loops and was held only {spun:.3} s"
    );
    assert!(idle < 0.1, "an idle node was held {idle:.3} s");
    let both = lab.cgroups().expect("cgroups").throttled_s(["n01", "n02"]);
    assert!(
        (both - held("n01") - held("n02")).abs() < 0.2,
        "the sum over nodes is the sum of each"
    );
    // n03's work is not slowed by n02 spinning: it keeps its own quota's pace, within the
    // band its work alone is held to (the model, not one noisy sample alone, is the
    // reference: a CI machine's other tests move both samples).
    let beside_modelled = beside_cpu / NODE_CPU;
    assert!(
        beside < 1.5 * beside_modelled + 0.3,
        "n03's work took {beside:.2} s for {beside_cpu:.3} CPU-s beside a spinning n02 (the \
         model says {beside_modelled:.2} s), {alone:.2} s alone"
    );
    eprintln!(
        "model: work alone {alone:.2} s for {cpu:.3} CPU-s (modelled {modelled:.2} s), beside a spinning node {beside:.2} s; \
         two busy loops {used:.3} CPU-s in {wall:.2} s ({:.3} cores of a {NODE_CPU} quota)",
        used / wall
    );
    drop(spinners);

    lab.down().expect("lab down");
    for d in &dirs {
        assert!(!d.exists(), "cgroup {} left behind", d.display());
    }
}

#[test]
fn lab_model_refuses_more_cpu_than_the_machine_has_and_says_what_to_change() {
    let _turn = crate::lab::lab_turn();
    if !can_lab() {
        return;
    }
    let mut opts = LabOptions::new(teesfs_bin());
    opts.cpu = CpuModel::Cores(4.0);
    let e = Lab::up(&LabSpec::default(), &opts)
        .expect_err("32 nodes of 4 cores")
        .to_string();
    assert!(e.contains("--node-cpu"), "{e}");
}

/// `--app-quota own`: a node's applications run under a quota of their own beside the
/// node's (the daemon's), the same size; without it they share the node's; either way
/// the cgroups go with the lab.
#[test]
fn lab_model_puts_applications_under_their_own_quota_when_asked() {
    let _turn = crate::lab::lab_turn();
    if !can_lab() {
        return;
    }
    let spec = LabSpec {
        groups: 1,
        group_size: 2,
        ..LabSpec::default()
    };
    let cgroup_of = |lab: &Lab, host: &str| {
        let out = lab
            .app_command(host, "cat")
            .expect("app command")
            .arg("/proc/self/cgroup")
            .output()
            .expect("cat");
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let mut opts = LabOptions::new(teesfs_bin());
    opts.cpu = CpuModel::Cores(NODE_CPU);
    let shared = Lab::up(&spec, &opts).expect("lab up");
    let netns = shared.layout().node("n02").expect("n02").netns.clone();
    let seen = cgroup_of(&shared, "n02");
    assert!(seen.contains(&format!("teesfs-lab/{netns}\n")), "{seen}");
    assert!(shared.cgroups().expect("cgroups").apps_dir("n02").is_none());
    assert!(
        shared
            .model_text()
            .contains("0.1000 cores per node shared with its applications"),
        "{}",
        shared.model_text()
    );
    shared.down().expect("lab down");

    opts.app_quota = AppQuota::Own;
    let own = Lab::up(&spec, &opts).expect("lab up");
    // Both quotas are in the model's report.
    assert!(
        own.model_text()
            .contains("0.1000 cores per node + 0.1000 for its applications"),
        "{}",
        own.model_text()
    );
    let netns = own.layout().node("n02").expect("n02").netns.clone();
    let apps = own
        .cgroups()
        .expect("cgroups")
        .apps_dir("n02")
        .expect("n02's applications' cgroup")
        .to_path_buf();
    let node = lab::cgroup::dir_of(&netns).expect("n02's cgroup");
    let quota = |d: &std::path::Path| {
        ["cpu.cfs_quota_us", "cpu.max"]
            .iter()
            .find_map(|f| std::fs::read_to_string(d.join(f)).ok())
            .expect("a quota")
    };
    assert_eq!(quota(&apps), quota(&node), "the same quota as the node's");
    let seen = cgroup_of(&own, "n02");
    assert!(
        seen.contains(&format!("teesfs-lab/{netns}-apps\n")),
        "{seen}"
    );
    // The daemon stays in the node's own cgroup.
    let daemon = own.daemon_pid("n02").expect("daemon");
    let procs = std::fs::read_to_string(node.join("cgroup.procs")).expect("procs");
    assert!(
        procs.lines().any(|l| l.trim() == daemon.to_string()),
        "{procs}"
    );
    own.down().expect("lab down");
    assert!(!apps.exists(), "{} left behind", apps.display());
}

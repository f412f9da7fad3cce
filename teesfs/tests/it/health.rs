//! `teesfs health` against real daemons on loopback (real QUIC, real mutual TLS): every
//! node answers with an RTT per edge, and with a proxy killed and a leaf stopped (SIGSTOP:
//! alive but silent) the report names exactly the failed edges and the unreachable nodes,
//! within the deadline, and the exit status says so.

use std::collections::HashSet;
use std::process::Command;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::cluster::Cluster;
use crate::util::teesfs_bin;

fn health_cmd(c: &Cluster, group: usize, deadline: &str) -> Command {
    let mut cmd = Command::new(teesfs_bin());
    cmd.args(["health", "--format", "json", "--nodes"])
        .arg(format!("n[01-{:02}]", c.nodes.len()))
        .args(["--group-size", &group.to_string(), "--identity"])
        .arg(&c.creds)
        .arg("--hosts")
        .arg(c.hosts_file())
        .args(["--listen", "127.0.0.1:0", "--deadline", deadline])
        .env("TEESFS_CONFIG", c.ws.path().join("config"));
    cmd
}

fn run(cmd: &mut Command) -> (bool, serde_json::Value, String) {
    let out = cmd.output().expect("run teesfs health");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let json = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "health printed no JSON ({e}): {}\n{stderr}",
            String::from_utf8_lossy(&out.stdout)
        )
    });
    (out.status.success(), json, stderr)
}

/// Resumes a SIGSTOPped daemon on drop, so the cluster can stop it.
struct Resume(u32);

impl Drop for Resume {
    fn drop(&mut self) {
        let _ = kill(Pid::from_raw(self.0 as i32), Signal::SIGCONT);
    }
}

#[test]
fn health_of_a_live_cluster_measures_every_planned_edge() {
    let c = Cluster::start(6, |_| Vec::new());
    let (ok, r, stderr) = run(&mut health_cmd(&c, 3, "10s"));
    assert!(ok, "exit status: {stderr}\n{r:#}");
    assert_eq!(r["version"], 1);
    assert_eq!(r["ok"], true);
    assert_eq!(
        (r["nodes"].as_u64(), r["answered"].as_u64()),
        (Some(6), Some(6))
    );
    assert_eq!(r["failures"].as_array().map(Vec::len), Some(0));
    assert_eq!(r["unreachable"], "");
    // Groups of 3: n01 and n04 are proxies under the root, the rest under their proxy.
    let want: HashSet<(String, String)> = [
        ("login", "n01"),
        ("n01", "n02"),
        ("n01", "n03"),
        ("login", "n04"),
        ("n04", "n05"),
        ("n04", "n06"),
    ]
    .iter()
    .map(|(p, c)| (p.to_string(), c.to_string()))
    .collect();
    let edges = r["edges"].as_array().expect("edges");
    let got: HashSet<(String, String)> = edges
        .iter()
        .map(|e| {
            assert!(e["rtt_ms"].as_f64().is_some_and(|x| x > 0.0), "{e}");
            (
                e["parent"].as_str().expect("parent").to_string(),
                e["child"].as_str().expect("child").to_string(),
            )
        })
        .collect();
    assert_eq!(got, want, "one RTT per planned edge");
    assert_eq!(edges.len(), 6);
    let groups = r["groups"].as_array().expect("groups");
    assert_eq!(groups.len(), 2);
    for g in groups {
        assert_eq!(
            (g["nodes"].as_u64(), g["answered"].as_u64()),
            (Some(3), Some(3))
        );
        assert!(g["rtt_ms"]["max"].as_f64() >= g["rtt_ms"]["min"].as_f64());
    }

    // The text report says the same for people.
    let out = Command::new(teesfs_bin())
        .args(
            health_cmd(&c, 3, "10s")
                .get_args()
                .filter(|a| *a != "json" && *a != "--format"),
        )
        .output()
        .expect("text health");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("6/6 nodes answered"), "{text}");
}

#[test]
fn health_names_the_failed_edges_of_a_dead_proxy_and_a_stopped_leaf() {
    let mut c = Cluster::start(6, |_| Vec::new());
    // n04 is a proxy (n05 and n06 below it): killed. n03 is a leaf under n01: stopped.
    c.kill(3);
    let stopped = c.pid(2).expect("n03 runs");
    kill(Pid::from_raw(stopped as i32), Signal::SIGSTOP).expect("SIGSTOP");
    let _resume = Resume(stopped);

    let (ok, r, stderr) = run(&mut health_cmd(&c, 3, "5s"));
    assert!(!ok, "health must fail when nodes are missing: {r:#}");
    assert!(stderr.contains("2 of 6 node(s) did not answer"), "{stderr}");
    assert_eq!(r["ok"], false);
    assert_eq!(r["answered"].as_u64(), Some(4));
    assert_eq!(r["unreachable"], "n[03-04]");
    let mut failures: Vec<(String, String, String)> = r["failures"]
        .as_array()
        .expect("failures")
        .iter()
        .map(|f| {
            (
                f["parent"].as_str().expect("parent").to_string(),
                f["child"].as_str().expect("child").to_string(),
                f["unreachable"].as_str().expect("hostlist").to_string(),
            )
        })
        .collect();
    failures.sort();
    assert_eq!(
        failures,
        vec![
            ("login".into(), "n04".into(), "n04".into()),
            ("n01".into(), "n03".into(), "n03".into()),
        ]
    );
    // n05 and n06 were asked by the root directly once their proxy was given up.
    for child in ["n05", "n06"] {
        assert!(
            r["edges"]
                .as_array()
                .expect("edges")
                .iter()
                .any(|e| e["parent"] == "login" && e["child"] == child),
            "{child} answered the root: {r:#}"
        );
    }
    let (elapsed, deadline) = (r["elapsed_s"].as_f64(), r["deadline_s"].as_f64());
    // Out by the deadline (the probe gives up there; a second covers the process exit).
    assert!(
        elapsed.zip(deadline).is_some_and(|(e, d)| e <= d + 1.0),
        "report after the deadline: {r:#}"
    );
}

/// `health --rates` against real daemons on loopback: the filler reaches every node, each
/// edge's bytes and rate are reported (the daemons pace their children at 8 MiB/s with
/// `--rate-limit`, so the edges below the proxies are long enough to measure on loopback),
/// the figures are kept in the store's learned rates and the next plan uses them.
#[test]
fn health_rates_measures_every_edge_keeps_the_figures_and_the_next_plan_uses_them() {
    let c = Cluster::start(6, |_| vec!["--rate-limit".into(), "8MiB".into()]);
    seeder::DirStore::create(&c.ws.store()).expect("store");
    let mut cmd = health_cmd(&c, 3, "10s");
    cmd.args(["--rates", "8MiB", "--store"]).arg(c.ws.store());
    let (ok, r, stderr) = run(&mut cmd);
    assert!(ok, "exit status: {stderr}\n{r:#}");
    assert_eq!(
        (r["version"].as_u64(), r["ok"].as_bool()),
        (Some(1), Some(true))
    );
    assert_eq!(r["bytes_per_node"].as_u64(), Some(8 << 20));
    assert_eq!(
        (r["nodes"].as_u64(), r["answered"].as_u64()),
        (Some(6), Some(6))
    );
    let edges = r["edges"].as_array().expect("edges");
    let got: HashSet<(&str, &str)> = edges
        .iter()
        .map(|e| {
            (
                e["parent"].as_str().expect("p"),
                e["child"].as_str().expect("c"),
            )
        })
        .collect();
    let want: HashSet<(&str, &str)> = [
        ("login", "n01"),
        ("n01", "n02"),
        ("n01", "n03"),
        ("login", "n04"),
        ("n04", "n05"),
        ("n04", "n06"),
    ]
    .into_iter()
    .collect();
    assert_eq!(got, want, "every planned edge: {r:#}");
    let paced = 8.0 * 8.0 * 1024.0 * 1024.0;
    for e in edges {
        // Everything after the first (urgent) chunk: 7 MiB.
        assert_eq!(e["bytes"].as_u64(), Some(7 << 20), "{e}\n{r:#}");
        if e["parent"] != "login" {
            assert_eq!(e["link"], "port", "{e}");
            let bps = e["bps"].as_f64().unwrap_or_else(|| panic!("measured: {e}"));
            assert!(
                (0.5..=1.3).contains(&(bps / paced)),
                "an edge paced at 8 MiB/s measured {bps} bit/s: {e}"
            );
        }
    }
    assert!(r["slowest"]["bps"].as_u64().is_some(), "{r:#}");
    // The filler is probe payload: no node stored a byte of it or mounted anything.
    for n in &c.nodes {
        let files = |dir: std::path::PathBuf| -> Vec<std::path::PathBuf> {
            walkdir::WalkDir::new(&dir)
                .into_iter()
                .filter_map(Result::ok)
                .filter(|e| e.file_type().is_file())
                .map(|e| e.path().to_path_buf())
                .collect()
        };
        let chunks = n.dir.join("state/store/chunks");
        assert!(chunks.is_dir(), "{} has a store", n.host);
        let stored = files(chunks);
        assert!(stored.is_empty(), "{} stored filler: {stored:?}", n.host);
        let mounted = files(n.dir.join("jobs"));
        assert!(
            mounted.is_empty(),
            "{} mounted something: {mounted:?}",
            n.host
        );
    }
    let kept = c.ws.store().join("learned/rates.json");
    assert_eq!(r["kept"].as_str(), kept.to_str(), "{r:#}");
    let file = std::fs::read(&kept).expect("the learned rates");
    let file = pushreport::rates::LearnedRates::from_json(&file).expect("a learned-rates file");
    assert_eq!(file.pushes.len(), 1, "{file:?}");
    // A node's rate is its fastest stream: the paced ones (the proxies' streams to the
    // login node are unpaced but too short on loopback to count).
    let node = file.pushes[0].figures.node.expect("a node's rate") as f64;
    assert!((0.5..=1.3).contains(&(node / paced)), "{file:?}");
    assert_eq!(r["next_plan"]["source"], "learned", "{r:#}");

    // The next plan of these nodes from this store plans with them; configured rates win.
    let plan = plan_rates(&c, &[]);
    assert_eq!(plan["source"], "learned", "{plan:#}");
    assert_eq!(plan["pushes"], 1, "{plan:#}");
    let links = "node=1gbit,port=2gbit,uplink=2gbit,login=2gbit";
    let plan = plan_rates(&c, &["--links", links]);
    assert_eq!(plan["source"], "configured", "{plan:#}");

    // The text report names the slowest edge and where the figures went.
    let out = Command::new(teesfs_bin())
        .args(cmd.get_args().filter(|a| *a != "json" && *a != "--format"))
        .output()
        .expect("text health --rates");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("6/6 nodes received 8.0 MiB of filler each"),
        "{text}"
    );
    assert!(text.contains("slowest edge: n0"), "{text}");
    assert!(text.contains("rates.json"), "{text}");
}

/// The rates `teesfs plan` of the cluster's nodes from its store uses, `extra` appended.
fn plan_rates(c: &Cluster, extra: &[&str]) -> serde_json::Value {
    let out = Command::new(teesfs_bin())
        .args([
            "plan",
            "--format",
            "json",
            "--nodes",
            "n[01-06]",
            "--group-size",
            "3",
        ])
        .arg("--store")
        .arg(c.ws.store())
        .args(extra)
        .env("TEESFS_CONFIG", c.ws.path().join("config"))
        .output()
        .expect("teesfs plan");
    let plan: serde_json::Value =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("plan JSON ({e}): {out:?}"));
    plan["rates"].clone()
}

/// Bad sizes and a missing store are refused before anything is sent, saying what to do.
#[test]
fn health_rates_refuses_nonsense_with_the_fix() {
    let ws = crate::util::Workspace::new();
    let base = [
        "health",
        "--nodes",
        "n[01-02]",
        "--group-size",
        "2",
        "--rates",
    ];
    for (size, said) in [
        ("0", "measures nothing"),
        ("1MiB", "too little to measure"),
        ("1TiB", "load test"),
        ("lots", "not a size"),
    ] {
        let mut args = base.to_vec();
        args.extend([size, "--store", "/nonexistent"]);
        let out = ws.teesfs(&args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && stderr.contains(said),
            "{size}: {stderr}"
        );
    }
    let out = ws.teesfs(&base);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("give --store DIR"),
        "{stderr}"
    );
    let out = ws.teesfs(&["health", "--group-size", "2", "--rates", "--store", "/x"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("no job nodes"),
        "{stderr}"
    );
}

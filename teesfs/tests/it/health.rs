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

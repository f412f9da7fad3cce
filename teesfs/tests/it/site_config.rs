//! Issue 14, item 1: the site configuration gives every planning command its defaults,
//! and a flag overrides it for one run; issue 30, item 3: a mistake in it is contained to
//! its key. The real `teesfs` binary with `$TEESFS_SITE_CONFIG`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::util::{Workspace, teesfs_bin};

fn teesfs_with_site(site: &Path, args: &[&str]) -> Output {
    Command::new(teesfs_bin())
        .args(args)
        .env("TEESFS_SITE_CONFIG", site)
        .output()
        .expect("run teesfs")
}

fn plan_json(site: &Path, extra: &[&str]) -> serde_json::Value {
    let mut args = vec!["plan", "--nodes", "cn[01-16]", "--format", "json"];
    args.extend_from_slice(extra);
    let out = teesfs_with_site(site, &args);
    assert!(out.status.success(), "{out:?}");
    serde_json::from_slice(&out.stdout).expect("plan JSON")
}

#[test]
fn plan_takes_its_defaults_from_the_site_configuration_and_flags_override_it() {
    let ws = Workspace::new();
    let site = ws.path().join("teesfs.toml");
    std::fs::write(
        &site,
        "[root]\nhost = \"login7\"\n[topology]\ncluster = \"cn[01-64]\"\ngroup_size = 8\n\
         [tree]\nwidth = 15\n",
    )
    .expect("write");
    std::fs::create_dir(ws.path().join("teesfs.d")).expect("mkdir");
    std::fs::write(
        ws.path().join("teesfs.d/10-width.toml"),
        "[tree]\nwidth = 2\n",
    )
    .expect("drop-in");
    let plan = plan_json(&site, &[]);
    assert_eq!(plan["root"], "login7", "{plan}");
    assert_eq!(plan["width"], 2, "the drop-in overrides the main file");
    let plan = plan_json(&site, &["--width", "3", "--login", "other"]);
    assert_eq!(plan["width"], 3, "a flag overrides the site");
    assert_eq!(plan["root"], "other");
    // A topology flag replaces the site's topology as a whole.
    let plan = plan_json(&site, &["--group-size", "4"]);
    assert_eq!(plan["nodes"], 16);
}

/// With link rates the plan says what each edge is paced at (issue 16): 16 nodes in two
/// groups of 8 under a 400 Mbit/s login link, so each proxy could take 200 Mbit/s, but a
/// relay is paced no faster than it passes the payload on: the proxies and every member
/// 100. Two proxies alone (leaves) fed by the login node (`--login-copies 2`; by default
/// it sends one copy, so one feeds the other at 100) take their 200. Without rates nothing
/// is paced.
#[test]
fn plan_shows_the_rate_each_edge_is_paced_at_when_it_knows_link_rates() {
    let ws = Workspace::new();
    let site = ws.path().join("teesfs.toml");
    std::fs::write(
        &site,
        "[topology]\ncluster = \"cn[01-64]\"\ngroup_size = 8\n",
    )
    .expect("write");
    let links = "node=100mbit,port=400mbit,uplink=400mbit,login=400mbit";
    let plan = plan_json(&site, &["--links", links]);
    let edges = plan["edges"].as_array().expect("edges");
    let rates = plan["edge_rates"].as_array().expect("edge_rates");
    assert_eq!(edges.len(), rates.len(), "{plan}");
    for (edge, rate) in edges.iter().zip(rates) {
        assert_eq!(rate.as_u64(), Some(100_000_000), "{edge}: {plan}");
    }
    let unrated = plan_json(&site, &[]);
    let rates = unrated["edge_rates"].as_array().expect("edge_rates");
    assert!(rates.iter().all(serde_json::Value::is_null), "{unrated}");

    let out = teesfs_with_site(&site, &["plan", "--nodes", "cn[01-16]", "--links", links]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("paced 100 Mbit/s") && !text.contains("paced 200 Mbit/s"),
        "{text}"
    );
    let two = ["plan", "--nodes", "cn[01,09]", "--links", links];
    let out = teesfs_with_site(&site, &two);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(!text.contains("paced 200 Mbit/s"), "one copy: {text}");
    let out = teesfs_with_site(&site, &[&two[..], &["--login-copies", "2"]].concat());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("paced 200 Mbit/s"), "{text}");
}

/// Issue 28 item 7: `plan --chunk` shapes a group without its proxy as `push` does for a
/// layer of that mean chunk: 12 orphans (groups of 14, the second without its proxy) as a
/// chain 12 levels below the login node's child with 256 KiB chunks, as a binary tree (4)
/// with 16 KiB ones or none given (shallower than the first group's chains).
#[test]
fn plan_shapes_orphan_groups_by_the_chunk_it_is_told() {
    let ws = Workspace::new();
    let site = ws.path().join("teesfs.toml");
    std::fs::write(
        &site,
        "[topology]\ncluster = \"cn[01-56]\"\ngroup_size = 14\n",
    )
    .expect("write");
    let depth = |extra: &[&str]| {
        let mut args = vec!["plan", "--nodes", "cn[01-14,16-27]", "--format", "json"];
        args.extend_from_slice(extra);
        let out = teesfs_with_site(&site, &args);
        assert!(out.status.success(), "{out:?}");
        let p: serde_json::Value = serde_json::from_slice(&out.stdout).expect("plan JSON");
        assert_eq!(p["orphans"].as_array().map(Vec::len), Some(12), "{p}");
        p["metrics"]["depth"].as_u64().expect("depth")
    };
    let chain = depth(&["--chunk", "256KiB"]);
    let tree = depth(&["--chunk", "16KiB"]);
    assert_eq!(depth(&[]), tree);
    // The tree's depth is the first group's now: planned without rates its proxy feeds 3
    // of its 13 members and chains the rest (5 levels below the login node's child).
    assert!(chain >= 12 && tree <= 6, "chain {chain}, tree {tree}");
    let out = teesfs_with_site(&site, &["plan", "--nodes", "cn[01-14]", "--chunk", "big"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--chunk"),
        "{out:?}"
    );
}

/// Issue 30 item 3: a mistake is contained to its key. An unknown key (a typo, a section
/// the daemon's old help suggested, a key of a newer release) is a warning naming the file
/// and line for every command; a bad value stops only the commands that use that key and
/// are not given its flag; `release`/`status` never stop; `config check` lists them all.
#[test]
fn a_site_configuration_mistake_stops_only_the_commands_that_use_the_key() {
    let ws = Workspace::new();
    let site = ws.path().join("teesfs.toml");
    std::fs::write(
        &site,
        "[daemon]\nstore_budget = \"8GiB\"\n[tree]\nwidth = 4\n",
    )
    .expect("write");
    std::fs::write(
        ws.path().join("teesfs.toml.local"),
        "\n[tree]\nwidht = 2\nthreshold = \"many\"\n",
    )
    .expect("local");
    let sock = ws.path().join("no-daemon.sock");
    let sock = sock.to_str().expect("utf-8");
    // Node-side commands: warned, never stopped by the site file (they fail here only
    // because no daemon listens, with exit 1).
    for args in [
        &["status", "--control", sock][..],
        &["release", "--job", "7", "--control", sock][..],
    ] {
        let out = teesfs_with_site(&site, args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_ne!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(
            err.contains("teesfs.toml, line 1: unknown key [daemon]")
                && err.contains("teesfs.toml.local, line 3: unknown key [tree] widht")
                && err.contains("[tree] threshold"),
            "{args:?}: {err}"
        );
    }
    // `plan` uses [tree] threshold: stopped, naming file, line and key; the flag unstops it.
    let out = teesfs_with_site(&site, &["plan", "--nodes", "cn[1-4]"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("teesfs.toml.local, line 4: [tree] threshold"),
        "{err}"
    );
    let plan = plan_json(
        &site,
        &[
            "--threshold",
            "8",
            "--cluster",
            "cn[01-16]",
            "--group-size",
            "4",
        ],
    );
    assert_eq!(
        plan["width"], 4,
        "the keys that are right still apply: {plan}"
    );
    // `config check` lists every mistake and fails.
    let out = teesfs_with_site(&site, &["config", "check"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert_eq!(text.matches("warning: ").count(), 2, "{text}");
    assert_eq!(text.matches("error: ").count(), 1, "{text}");
    assert!(
        out.stderr.is_empty(),
        "config check reports once, on stdout: {out:?}"
    );
    std::fs::write(&site, "[tree]\nwidth = 4\n").expect("fixed");
    std::fs::remove_file(ws.path().join("teesfs.toml.local")).expect("rm");
    let out = teesfs_with_site(&site, &["config", "check"]);
    assert!(out.status.success(), "{out:?}");
}

/// Writes `site.toml` in the cluster's workspace: its store, keys and network, and a
/// topology of its one node.
fn write_cluster_site(cluster: &crate::cluster::Cluster) -> PathBuf {
    let ws = &cluster.ws;
    let site = ws.path().join("site.toml");
    let s = |p: &Path| p.to_str().expect("utf-8").to_string();
    std::fs::write(
        &site,
        format!(
            "[store]\npath = \"{}\"\n[network]\nidentity = \"{}\"\nhosts = \"{}\"\n\
             trust = [\"{}\"]\n[topology]\ncluster = \"n01\"\ngroup_size = 1\n",
            s(&ws.store()),
            s(&cluster.creds),
            s(&cluster.hosts_file()),
            s(&ws.pubkey()),
        ),
    )
    .expect("site");
    site
}

/// `teesfs mount` of the layer tagged `app` with only the site's store (under `dir`), read
/// through.
fn assert_mounts_with_site(dir: &Path, site: &Path) {
    let s = |p: &Path| p.to_str().expect("utf-8").to_string();
    let mp = dir.join("mnt");
    std::fs::create_dir_all(&mp).expect("mountpoint");
    let files = dir.join("mnt-files");
    let args: Vec<String> = [
        "mount",
        &s(&mp),
        "--index",
        "app",
        "--materialize-dir",
        &s(&files),
    ]
    .iter()
    .map(|a| a.to_string())
    .collect();
    let guard =
        crate::util::MountGuard::spawn_env(&args, mp.clone(), &[("TEESFS_SITE_CONFIG", site)]);
    assert_eq!(
        std::fs::read(mp.join("opt/app/data")).expect("read through the mount"),
        b"from the site store\n"
    );
    drop(guard);
}

/// Issue 30 item 5: with only the site file naming the store (and the keys and the network),
/// every store command runs without `--store`: publish, inspect, verify, record, mount, a
/// real push to a daemon, and gc. Before, clap still demanded `--store` although `--help`
/// showed the site's path as its default.
#[test]
fn every_store_command_takes_the_site_store_without_store_flags() {
    if !crate::util::can_mount() {
        return;
    }
    let cluster = crate::cluster::Cluster::start(1, |_| Vec::new());
    let ws = &cluster.ws;
    let site = write_cluster_site(&cluster);
    let s = |p: &Path| p.to_str().expect("utf-8").to_string();
    let layer = ws.path().join("layer");
    std::fs::create_dir_all(layer.join("opt/app")).expect("layer");
    std::fs::write(layer.join("opt/app/data"), b"from the site store\n").expect("file");
    let run = |args: &[&str]| {
        let out = teesfs_with_site(&site, args);
        assert!(
            out.status.success(),
            "teesfs {args:?} with only the site's store: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let key = s(&ws.key());
    let out = run(&["publish", &s(&layer), "--key", &key, "--tag", "app"]);
    assert!(out.starts_with("index "), "{out}");
    assert!(run(&["inspect"]).contains("app"), "inspect lists the tag");
    assert!(
        run(&["verify"]).contains("OK"),
        "verify checks the site store"
    );
    let list = ws.path().join("urgent.list");
    run(&[
        "record",
        "--index",
        "app",
        "-o",
        &s(&list),
        "--",
        "cat",
        "/opt/app/data",
    ]);
    let listed = std::fs::read_to_string(&list).expect("list");
    assert!(listed.contains("opt/app/data"), "{listed}");
    assert_mounts_with_site(ws.path(), &site);
    let out = teesfs_with_site(
        &site,
        &[
            "push",
            "--quiet",
            "--index",
            "app",
            "--nodes",
            "n01",
            "--listen",
            "127.0.0.1:0",
            "--wait",
            "all",
            "--timeout",
            "20s",
        ],
    );
    assert!(out.status.success(), "push from the site store: {out:?}");
    let job = &cluster.status(0)["jobs"][0];
    assert_eq!(
        job["have"], job["chunks"],
        "the node holds the whole layer: {job}"
    );
    let mounted = cluster.mount_of(0);
    assert_eq!(
        std::fs::read(mounted.join("opt/app/data")).expect("read on the node"),
        b"from the site store\n"
    );
    let out = run(&["gc", "--keep", "1"]);
    assert!(out.contains("kept 1 index"), "{out}");
}

/// Issue 33: without configured rates the plan takes the rates the store's pushes learned
/// (the site's `[store] path`), says where they came from, and configured rates win; a
/// damaged file is a warning and the plan goes on without rates.
#[test]
fn plan_uses_the_stores_learned_rates_unless_rates_are_configured() {
    let ws = Workspace::new();
    let store = ws.path().join("store");
    for d in ["chunks", "indexes", "learned"] {
        std::fs::create_dir_all(store.join(d)).expect("store dirs");
    }
    let site = ws.path().join("teesfs.toml");
    std::fs::write(
        &site,
        format!(
            "[store]\npath = \"{}\"\n[topology]\ncluster = \"cn[01-64]\"\ngroup_size = 8\n",
            store.display()
        ),
    )
    .expect("write");
    let rates = store.join("learned/rates.json");
    std::fs::write(
        &rates,
        r#"{"version": 1, "pushes": [{"at": 1796400000, "job": "1", "node": 98000000,
            "port": 395000000, "uplink": 99000000, "login": 392000000}]}"#,
    )
    .expect("learned rates");
    let learned = plan_json(&site, &[]);
    assert_eq!(learned["rates"]["source"], "learned", "{learned}");
    assert_eq!(learned["rates"]["pushes"], 1);
    assert_eq!(
        learned["rates"]["port"], 490_000_000,
        "4 node streams of 98 Mbit/s, used a quarter faster"
    );
    let paced = learned["edge_rates"].as_array().expect("edge_rates");
    assert!(paced.iter().all(|r| r.as_u64().is_some()), "{learned}");
    let text = teesfs_with_site(&site, &["plan", "--nodes", "cn[01-16]"]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("link rates: learned from 1 push (last 2026-12-04 16:00 UTC)"),
        "{text}"
    );
    let links = "node=1gbit,port=4gbit,uplink=4gbit,login=4gbit";
    let configured = plan_json(&site, &["--links", links]);
    assert_eq!(configured["rates"]["source"], "configured");
    assert_eq!(configured["rates"]["node"], 1_000_000_000_u64);
    let off = plan_json(&site, &["--no-learned-rates"]);
    assert_eq!(off["rates"]["source"], "none", "{off}");
    assert!(
        off["edge_rates"]
            .as_array()
            .expect("edge_rates")
            .iter()
            .all(serde_json::Value::is_null)
    );
    std::fs::write(&rates, b"{\"version\": 1, \"pushes\": [{\"at\"").expect("damage");
    let out = teesfs_with_site(&site, &["plan", "--nodes", "cn[01-16]", "--format", "json"]);
    assert!(
        out.status.success(),
        "a damaged file never fails a plan: {out:?}"
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("rates.json") && err.contains("ignored"),
        "{err}"
    );
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("plan JSON");
    assert_eq!(doc["rates"]["source"], "none", "{doc}");
}

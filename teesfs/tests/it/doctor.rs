//! Issue 19 item 4: `teesfs doctor` against a real configured node (credentials from
//! `teesfs keygen --cluster`, a running daemon, a Slurm configuration as packaged), then
//! with its certificate removed and its CRL replaced by garbage.

use std::path::Path;
use std::process::{Command, Output};

use crate::cluster::Cluster;
use crate::util::{can_mount, teesfs_bin};

fn doctor(c: &Cluster, identity: &Path, slurm: &Path, extra: &[&str]) -> Output {
    let port = c.nodes[0]
        .addr
        .rsplit(':')
        .next()
        .expect("port")
        .to_string();
    Command::new(teesfs_bin())
        .args(["doctor", "--host", "n01", "--identity"])
        .arg(identity)
        .arg("--trust")
        .arg(c.ws.pubkey())
        .arg("--control")
        .arg(c.nodes[0].control())
        .arg("--state-dir")
        .arg(c.nodes[0].dir.join("state"))
        .args(["--store-budget", "1MiB", "--port", &port, "--slurm-dir"])
        .arg(slurm)
        .args(extra)
        // Only what the test gives counts, not this machine's /etc/teesfs.
        .env("TEESFS_SITE_CONFIG", c.ws.path().join("no-site.toml"))
        .env("TEESFS_CONFIG", c.ws.path().join("config"))
        .output()
        .expect("run teesfs doctor")
}

/// The line of check `name` (`LEVEL  name  detail`), and its `fix:` line if any.
fn line_of<'a>(out: &'a str, name: &str) -> (&'a str, Option<&'a str>) {
    let lines: Vec<&str> = out.lines().collect();
    let i = lines
        .iter()
        .position(|l| l.split_whitespace().nth(1) == Some(name))
        .unwrap_or_else(|| panic!("no {name} check in\n{out}"));
    let fix = lines
        .get(i + 1)
        .filter(|l| l.trim_start().starts_with("fix:"))
        .copied();
    (lines[i], fix)
}

#[test]
fn doctor_passes_a_configured_node_and_names_the_fix_for_a_missing_cert_and_a_garbage_crl() {
    if !can_mount() {
        return;
    }
    let c = Cluster::start(1, |_| vec![]);
    // The node's own credentials, as a node holds them (not the CA's key).
    let identity = c.ws.path().join("identity");
    std::fs::create_dir_all(&identity).expect("mkdir");
    for f in ["ca.crt", "n01.crt", "n01.key"] {
        std::fs::copy(c.creds.join(f), identity.join(f)).expect("copy credential");
    }
    // Slurm configured as docs/slurm.md says.
    let slurm = c.ws.path().join("slurm");
    std::fs::create_dir_all(slurm.join("plugstack.conf.d")).expect("mkdir");
    std::fs::write(
        slurm.join("slurm.conf"),
        "ClusterName=test\n# Epilog=/old\nEpilog=/usr/share/teesfs/slurm/epilog.sh\n\
         PrologSlurmctld=/usr/share/teesfs/slurm/prolog-slurmctld.sh\n\
         EpilogSlurmctld=/usr/share/teesfs/slurm/epilog-slurmctld.sh\n",
    )
    .expect("slurm.conf");
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../packaging/slurm/plugstack.conf"),
        slurm.join("plugstack.conf.d/teesfs.conf"),
    )
    .expect("plugstack");

    let out = doctor(&c, &identity, &slurm, &[]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for name in [
        "fuse",
        "certificate",
        "publisher-keys",
        "port",
        "store",
        "slurm",
        "daemon",
    ] {
        let (line, fix) = line_of(&text, name);
        assert!(line.starts_with("OK "), "{name}: {line}\n{text}");
        assert!(fix.is_none(), "{name}: {fix:?}");
    }
    assert!(
        line_of(&text, "certificate").0.contains("expires in"),
        "{text}"
    );
    assert!(
        line_of(&text, "crl").0.starts_with("INFO"),
        "no CRL: {text}"
    );
    // No job has come yet: the skew is not measured, and not assumed either.
    assert!(
        line_of(&text, "clock").0.starts_with("INFO") && text.contains("not measured yet"),
        "{text}"
    );

    // A CRL that is no CRL fails the node (the daemon would not start with it).
    std::fs::write(identity.join("crl.pem"), "garbage\n").expect("crl");
    let out = doctor(&c, &identity, &slurm, &[]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(!out.status.success(), "{text}");
    let (line, fix) = line_of(&text, "crl");
    assert!(line.starts_with("FAIL"), "{text}");
    assert!(line.contains("crl.pem"), "names the file: {line}");
    assert!(fix.is_some_and(|f| f.contains("crl.pem")), "{text}");
    std::fs::remove_file(identity.join("crl.pem")).expect("rm crl");

    // No certificate: FAIL with how to make one, exit status 1, and the JSON says so too.
    std::fs::remove_file(identity.join("n01.crt")).expect("rm cert");
    let out = doctor(&c, &identity, &slurm, &[]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(out.status.code(), Some(1), "{text}");
    let (line, fix) = line_of(&text, "certificate");
    assert!(line.starts_with("FAIL"), "{text}");
    assert!(line.contains("n01.crt"), "{line}");
    assert!(
        fix.is_some_and(|f| f.contains("teesfs keygen --cluster")),
        "{text}"
    );
    let out = doctor(&c, &identity, &slurm, &["--format", "json"]);
    assert_eq!(out.status.code(), Some(1));
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON report");
    assert_eq!(r["version"], 1, "{r}");
    assert_eq!(r["failed"], 1, "{r}");
    let cert = r["checks"]
        .as_array()
        .expect("checks")
        .iter()
        .find(|c| c["name"] == "certificate")
        .expect("certificate check");
    assert_eq!(cert["level"], "fail", "{cert}");
    assert!(
        cert["fix"].as_str().is_some_and(|f| f.contains("keygen")),
        "{cert}"
    );
}

/// Issue 30 item 9: `doctor --role login` checks the side that roots the pushes: the site
/// file, the store (shared or personal), this host's certificate as the root, the CA key
/// left where users log in, the topology and the keys.
#[test]
fn doctor_checks_the_login_side_and_names_the_ca_key_left_there() {
    let ws = crate::util::Workspace::new();
    let creds = ws.path().join("cluster");
    let out = ws.teesfs(&[
        "keygen",
        "--cluster",
        creds.to_str().expect("utf8"),
        "--nodes",
        "login1",
    ]);
    assert!(out.status.success(), "{out:?}");
    let layer = ws.path().join("layer");
    std::fs::create_dir_all(layer.join("opt/app")).expect("layer");
    std::fs::write(layer.join("opt/app/x"), "x").expect("file");
    ws.publish(&layer);
    let site = ws.path().join("teesfs.toml");
    std::fs::write(
        &site,
        format!(
            "[store]\npath = {:?}\n[topology]\ncluster = \"cn[1-8]\"\ngroup_size = 4\n",
            ws.store()
        ),
    )
    .expect("site");
    let doctor = |identity: &Path| {
        Command::new(teesfs_bin())
            .args([
                "doctor",
                "--role",
                "login",
                "--host",
                "login1",
                "--identity",
            ])
            .arg(identity)
            .arg("--trust")
            .arg(ws.pubkey())
            .env("TEESFS_SITE_CONFIG", &site)
            .output()
            .expect("doctor")
    };
    let out = doctor(&creds);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "only warnings: {text}");
    for ok in ["site", "store", "certificate", "topology", "trust"] {
        assert!(line_of(&text, ok).0.starts_with("OK"), "{ok}: {text}");
    }
    let (line, fix) = line_of(&text, "ca-key");
    assert!(line.starts_with("WARN"), "{text}");
    assert!(fix.is_some_and(|f| f.contains("admin host")), "{text}");
    assert!(line_of(&text, "store").0.contains("1 index(es)"), "{text}");
    // Without the CA key and with no certificate for this host: a FAIL naming the fix.
    let bare = ws.path().join("bare");
    std::fs::create_dir(&bare).expect("bare");
    std::fs::copy(creds.join("ca.crt"), bare.join("ca.crt")).expect("ca.crt");
    let out = doctor(&bare);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        line_of(&text, "certificate").0.starts_with("FAIL"),
        "{text}"
    );
    assert!(line_of(&text, "ca-key").0.starts_with("OK"), "{text}");
}

/// Issue 29: `doctor` as a user other than root could not read the node's key (0600 root)
/// and said the certificate FAILed, with "issue a new one" as the fix. It WARNs that this
/// uid cannot read the key, and says to run as root; root gets the real verdict.
#[test]
fn doctor_as_non_root_warns_it_cannot_read_the_key_instead_of_failing_the_certificate() {
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;
    if !can_mount() {
        return;
    }
    const NOBODY: u32 = 65534;
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let ca = dir.path().join("ca");
    let out = Command::new(teesfs_bin())
        .args(["keygen", "--cluster"])
        .arg(&ca)
        .args(["--nodes", "n01"])
        .output()
        .expect("keygen");
    assert!(out.status.success(), "keygen: {out:?}");
    let identity = dir.path().join("identity");
    std::fs::create_dir(&identity).expect("mkdir");
    std::fs::set_permissions(&identity, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    for (f, mode) in [("ca.crt", 0o644), ("n01.crt", 0o644), ("n01.key", 0o600)] {
        std::fs::copy(ca.join(f), identity.join(f)).expect("copy credential");
        std::fs::set_permissions(identity.join(f), std::fs::Permissions::from_mode(mode))
            .expect("chmod");
    }
    let run = |uid: u32| {
        let mut cmd = Command::new(teesfs_bin());
        cmd.args(["doctor", "--host", "n01", "--format", "json", "--identity"])
            .arg(&identity)
            .arg("--state-dir")
            .arg(dir.path())
            .arg("--control")
            .arg(dir.path().join("no.sock"))
            .env("TEESFS_SITE_CONFIG", dir.path().join("no-site.toml"))
            .env("TEESFS_CONFIG", dir.path().join("config"));
        if uid != 0 {
            cmd.uid(uid).gid(uid);
        }
        let out = cmd.output().expect("run doctor");
        let report: serde_json::Value =
            serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {out:?}"));
        report["checks"]
            .as_array()
            .expect("checks")
            .iter()
            .find(|c| c["name"] == "certificate")
            .expect("certificate check")
            .clone()
    };
    let cert = run(NOBODY);
    assert_eq!(cert["level"], "warn", "{cert}");
    let detail = cert["detail"].as_str().expect("detail");
    assert!(
        detail.contains("n01.key") && detail.contains("as uid 65534"),
        "{detail}"
    );
    let fix = cert["fix"].as_str().expect("fix");
    assert!(fix.contains("as root") && !fix.contains("keygen"), "{fix}");
    assert_eq!(run(0)["level"], "ok", "root reads and checks it");
}

/// `teesfs doctor --role seeder --format json` (issue 30 item 9): the check named `name`'s
/// level and detail.
fn seeder_check(report: &serde_json::Value, name: &str) -> (String, String) {
    let c = report["checks"]
        .as_array()
        .expect("checks")
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no {name} check: {report}"));
    (
        c["level"].as_str().unwrap_or_default().to_owned(),
        c["detail"].as_str().unwrap_or_default().to_owned(),
    )
}

/// Issue 30 item 9: doctor checked only the node side. On a seeder's host it checks what
/// the seeder needs: with its port taken by another process and no munged, both fail,
/// naming the process and the socket; with the port free, it says the seeder does not run;
/// the site file, the store, the certificate and the files the seeder reads pass.
#[test]
fn doctor_on_a_seeder_host_names_a_taken_port_and_a_missing_munge() {
    let ws = crate::util::Workspace::new();
    let creds = ws.path().join("cluster");
    let out = ws.teesfs(&[
        "keygen",
        "--cluster",
        creds.to_str().expect("utf8"),
        "--nodes",
        "login",
    ]);
    assert!(out.status.success(), "keygen: {out:?}");
    let layer = ws.path().join("layer");
    std::fs::create_dir_all(&layer).expect("mkdir");
    std::fs::write(layer.join("a.txt"), "a").expect("write");
    ws.publish(&layer);
    // Another process holds the seeder's port: this test.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = taken.local_addr().expect("addr").port();
    let site = ws.path().join("teesfs.toml");
    std::fs::write(
        &site,
        format!(
            "[store]\npath = {:?}\n[seeder]\nhost = \"login\"\nallow = [\"root\"]\nlisten = \"127.0.0.1:{port}\"\n\
             munge_socket = {:?}\nlogdir = {:?}\n",
            ws.store(),
            ws.path().join("no-munge.socket"),
            ws.path(),
        ),
    )
    .expect("site file");
    let run = |user: &str| {
        let out = Command::new(teesfs_bin())
            .args([
                "doctor", "--role", "seeder", "--format", "json", "--host", "login",
            ])
            .args(["--seeder-user", user])
            .arg("--identity")
            .arg(&creds)
            .arg("--trust")
            .arg(ws.pubkey())
            .env("TEESFS_SITE_CONFIG", &site)
            .env("TEESFS_CONFIG", ws.path().join("config"))
            .output()
            .expect("teesfs doctor");
        let report: serde_json::Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
        (out.status, report)
    };
    let (status, report) = run("root");
    assert!(!status.success(), "{report}");
    let (level, detail) = seeder_check(&report, "seeder-port");
    assert_eq!(level, "fail", "{detail}");
    assert!(
        detail.contains(&format!("127.0.0.1:{port}"))
            && detail.contains(&format!("pid {}", std::process::id())),
        "{detail}"
    );
    let (level, detail) = seeder_check(&report, "munge");
    assert_eq!(level, "fail", "{detail}");
    for ok in [
        "site",
        "store",
        "certificate",
        "seeder-host",
        "seeder-allow",
        "seeder-logdir",
        "seeder-reads",
    ] {
        let (level, detail) = seeder_check(&report, ok);
        assert_eq!(level, "ok", "{ok}: {detail}\n{report}");
    }
    // A seeder run as `nobody` cannot read the node key keygen made (0600, root's).
    let (_, report) = run("nobody");
    let (level, detail) = seeder_check(&report, "seeder-reads");
    assert_eq!(level, "fail", "{detail}");
    assert!(detail.contains("login.key"), "{detail}");
    drop(taken);
    let (_, report) = run("root");
    let (level, detail) = seeder_check(&report, "seeder-port");
    assert_eq!(level, "warn", "{detail}");
    assert!(detail.contains("nothing listens"), "{detail}");
}

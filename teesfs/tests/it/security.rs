//! Attacks by local users and untrusted publishers against real daemons and real mounts
//! (issue 8): another user cannot list, query or stop a job through the daemon's control
//! socket; a setuid-root program in a layer runs without privilege; a daemon refuses a job
//! whose index is signed by a key it does not trust, and one that is not addressed to it or does
//! not come from the parent it names. Each attack must fail with a clear error and leave the
//! daemon serving.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Output};

use crate::cluster::{Cluster, QUICK_GIVE_UP};
use crate::util::within;
use crate::util::{Workspace, can_mount, is_mounted, make_tree, teesfs_bin};

/// The unprivileged user the attacks run as (`nobody`).
const NOBODY: u32 = 65534;

fn chmod(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod");
}

/// Runs `teesfs args` as `nobody`.
fn teesfs_as_nobody(args: &[&str]) -> Output {
    Command::new(teesfs_bin())
        .args(args)
        .uid(NOBODY)
        .gid(NOBODY)
        .env_remove("TEESFS_CONFIG")
        .output()
        .expect("run teesfs as nobody")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A one-daemon cluster whose workspace other users can traverse (to reach the socket),
/// with one pushed job; returns the cluster and the job id.
fn cluster_with_a_job() -> (Cluster, String) {
    let c = Cluster::start(1, |_| vec![]);
    chmod(c.ws.path(), 0o755);
    let src = c.ws.path().join("layer");
    make_tree(&src, 10, 0);
    let id = c.ws.publish(&src);
    let out = c
        .push_cmd(&id, 1, &["--width", "1"])
        .output()
        .expect("push");
    assert!(out.status.success(), "push: {}", stderr(&out));
    let mp = c.mount_of(0);
    assert!(is_mounted(&mp));
    let job = c.status(0)["jobs"][0]["job"]
        .as_str()
        .expect("job id")
        .to_owned();
    (c, job)
}

#[test]
fn another_user_cannot_list_query_or_stop_a_job() {
    if !can_mount() {
        return;
    }
    let (c, job) = cluster_with_a_job();
    let sock = c.nodes[0].control();
    let sock = sock.to_str().expect("utf8");

    // Their `status` answers, and lists none of the jobs (the job has no owner: root's).
    let out = teesfs_as_nobody(&["status", "--json", "--control", sock]);
    assert!(out.status.success(), "{}", stderr(&out));
    let listed: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(
        listed["jobs"],
        serde_json::json!([]),
        "nobody saw root's job"
    );
    for extra in [&[][..], &["--stop"][..]] {
        let mut args = vec!["status", "--control", sock, "--job", &job];
        args.extend(extra);
        let out = teesfs_as_nobody(&args);
        assert!(!out.status.success(), "nobody ran {args:?}");
        let err = stderr(&out);
        assert!(err.contains("refused") && err.contains("no job"), "{err}");
        assert!(String::from_utf8_lossy(&out.stdout).is_empty());
    }
    // Nor learn what it read.
    let args = [
        "record",
        "--from-job",
        &job,
        "--control",
        sock,
        "-o",
        "/dev/null",
    ];
    let out = teesfs_as_nobody(&args);
    assert!(!out.status.success(), "nobody ran {args:?}");
    let err = stderr(&out);
    assert!(err.contains("refused") && err.contains("no job"), "{err}");
    // Nothing changed: the job is still there and mounted.
    let st = c.status(0);
    assert_eq!(st["jobs"].as_array().map(Vec::len), Some(1), "{st}");
    let mp = c.mount_of(0);

    // Root may query and stop it.
    let out =
        c.ws.teesfs(&["status", "--json", "--control", sock, "--job", &job]);
    assert!(out.status.success(), "{}", stderr(&out));
    let one: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(one["job"], job.as_str());
    let out =
        c.ws.teesfs(&["status", "--control", sock, "--job", &job, "--stop"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(c.status(0)["jobs"].as_array().map(Vec::len), Some(0));
    assert!(!is_mounted(&mp), "a stopped job is unmounted");

    // A request that is not one is answered with an error, not dropped silently.
    let out = c.ws.teesfs(&["status", "--control", sock, "--job", "zz"]);
    assert!(stderr(&out).contains("not a job id"), "{}", stderr(&out));
}

#[test]
fn a_setuid_root_program_in_a_layer_runs_without_privilege() {
    if !can_mount() {
        return;
    }
    let ws = Workspace::new();
    chmod(ws.path(), 0o755);
    let src = ws.path().join("layer");
    std::fs::create_dir(&src).expect("layer dir");
    chmod(&src, 0o755);
    let prog = src.join("id");
    std::fs::copy("/usr/bin/id", &prog).expect("copy /usr/bin/id");
    nix::unistd::chown(&prog, Some(0.into()), Some(0.into())).expect("chown root");
    chmod(&prog, 0o4755);
    let id = ws.publish(&src);
    let guard = ws.mount(&id, "mnt", &[]);
    let mounted = guard.mountpoint.join("id");

    // The layer really carries a setuid-root program...
    let meta = std::fs::metadata(&mounted).expect("stat");
    assert_eq!(meta.uid(), 0);
    assert_ne!(meta.mode() & 0o4000, 0, "mode {:o}", meta.mode());
    // ...and the mount is nosuid, so it runs with the caller's ids.
    let euid = |path: &Path| {
        let out = Command::new(path)
            .arg("-u")
            .uid(NOBODY)
            .gid(NOBODY)
            .output()
            .expect("run id as nobody");
        assert!(out.status.success(), "{}", stderr(&out));
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    };
    assert_eq!(
        euid(&mounted),
        NOBODY.to_string(),
        "setuid honoured in a layer"
    );
    // For the record: the same file outside the mount, where the file system may honour it.
    eprintln!("euid of the source copy run as nobody: {}", euid(&prog));
}

#[test]
fn a_daemon_refuses_an_index_signed_by_a_key_it_does_not_trust() {
    if !can_mount() {
        return;
    }
    let c = Cluster::start(2, |_| vec![]);
    let src = c.ws.path().join("layer");
    make_tree(&src, 5, 0);
    // Another publisher: the root trusts it, the daemons do not.
    let key = c.ws.path().join("intruder.key");
    let out =
        c.ws.teesfs(&["keygen", "--out", key.to_str().expect("utf8")]);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = c.ws.teesfs(&[
        "publish",
        src.to_str().expect("utf8"),
        "--store",
        c.ws.store().to_str().expect("utf8"),
        "--key",
        key.to_str().expect("utf8"),
        "--quiet",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let id = String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("index ").map(|s| s.trim().to_owned()))
        .expect("index id");
    let out = c
        .push_cmd(&id, 2, &QUICK_GIVE_UP)
        .arg("--trust")
        .arg(key.with_extension("pub"))
        .output()
        .expect("push");
    assert!(!out.status.success(), "a push nobody accepted succeeded");
    for i in 0..2 {
        let st = c.status(i);
        assert_eq!(st["jobs"].as_array().map(Vec::len), Some(0), "{st}");
    }
    let log = std::fs::read_to_string(c.nodes[0].dir.join("daemon.log")).expect("log");
    assert!(
        log.contains("index rejected") && log.contains("not among the trusted keys"),
        "{log}"
    );
}

/// Sends one `Start` for `job` to node 0 of `c`, over a real connection as `from` (a host with
/// a valid certificate of the cluster), naming `first` as the receiver and `parent` as its
/// parent.
async fn send_start(c: &Cluster, id: &str, from: &str, job: u64, first: &str, parent: &str) {
    use peertree::NodeId;
    use peertree::relay::{ChunkNo, JobId, Msg, NodeInfo, Start, Timing};
    use teesfs_node::net::{Identity, StreamKind, Transport};

    let bytes = std::fs::read(c.ws.index_file(id)).expect("signed index");
    let limits = manifest::Limits::default();
    let index = manifest::SignedIndex::from_bytes(bytes.clone(), &limits)
        .and_then(|s| s.decode(&limits))
        .expect("index");
    let (order, urgent) = manifest::push_order(&index, &|_| false);
    let identity = Identity::load(&c.creds, from).expect("identity");
    let transport = Transport::bind("127.0.0.1:0".parse().expect("addr"), &identity).expect("bind");
    let node = |id, host: &str, parent| NodeInfo {
        id: NodeId(id),
        host: host.to_owned(),
        addr: if host == from {
            transport.local_addr().to_string()
        } else {
            "127.0.0.1:9".to_owned()
        },
        parent: NodeId(parent),
        group: None,
        rate: None,
    };
    let start = Start {
        job: JobId(job),
        index: bytes,
        order: order.into_iter().map(ChunkNo).collect(),
        urgent: urgent as u32,
        subtree: vec![node(1, first, 0)],
        ancestors: vec![node(0, parent, 0)],
        timing: Timing::default(),
        shared_store: None,
        probe: false,
        owner: None,
        kin: Vec::new(),
        root_clock_ms: None,
    };
    let addr = c.nodes[0].addr.parse().expect("daemon addr");
    let conn = transport
        .connect(addr, &c.nodes[0].host)
        .await
        .expect("connect");
    let mut s = conn.open(StreamKind::Control).await.expect("stream");
    let frame = teesfs_node::peers::frame(JobId(job), &Msg::Start(Box::new(start)));
    s.send(&frame).await.expect("send");
    s.finish().await.expect("delivered");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_meant_for_another_node_or_not_from_its_parent_is_refused() {
    if !can_mount() {
        return;
    }
    let c = Cluster::start(2, |_| vec![]);
    let src = c.ws.path().join("layer");
    make_tree(&src, 3, 0);
    let id = c.ws.publish(&src);
    let log = || std::fs::read_to_string(c.nodes[0].dir.join("daemon.log")).expect("log");
    let wait_log = |what: &str| {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while !log().contains(what) {
            assert!(
                std::time::Instant::now() < deadline,
                "no {what:?} in {}",
                log()
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    };

    // A validly signed job addressed to n02, delivered to n01.
    send_start(&c, &id, "login", 1, "n02", "login").await;
    wait_log("it was meant for");
    // Addressed to n01, but the sender (n02, by its certificate) claims login is the parent.
    send_start(&c, &id, "n02", 2, "n01", "login").await;
    wait_log("it did not come from the parent it names");
    assert_eq!(c.status(0)["jobs"].as_array().map(Vec::len), Some(0));

    // The same message from the parent it names is accepted: the checks above made the difference.
    send_start(&c, &id, "login", 3, "n01", "login").await;
    wait_log("job accepted");
    assert_eq!(c.status(0)["jobs"].as_array().map(Vec::len), Some(1));
}

#[test]
fn keygen_revoke_writes_a_crl_that_nodes_enforce() {
    let ws = Workspace::new();
    let dir = ws.path().join("cluster");
    let d = dir.to_str().expect("utf8");
    let out = ws.teesfs(&["keygen", "--cluster", d, "--nodes", "n[1-3]"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = ws.teesfs(&["keygen", "--cluster", d, "--revoke", "n[2-3]"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.contains("revoked n2") && said.contains("revoked n3"),
        "{said}"
    );
    assert!(dir.join("crl.pem").exists());
    teesfs_node::net::Identity::load(&dir, "n1").expect("n1 still loads");
    for host in ["n2", "n3"] {
        let err = teesfs_node::net::Identity::load(&dir, host).expect_err("revoked host loaded");
        assert!(err.to_string().contains("Revoked"), "{err}");
    }
    // Revoking a host without a certificate names the missing file and changes nothing.
    let crl = std::fs::read(dir.join("crl.pem")).expect("crl");
    let out = ws.teesfs(&["keygen", "--cluster", d, "--revoke", "n9"]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("n9.crt"), "{}", stderr(&out));
    assert_eq!(std::fs::read(dir.join("crl.pem")).expect("crl"), crl);
    // Reissuing replaces only the revoked certificates.
    let out = ws.teesfs(&["keygen", "--cluster", d, "--nodes", "n[1-3]"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("(4 file(s) written)"));
    for host in ["n1", "n2", "n3"] {
        teesfs_node::net::Identity::load(&dir, host).expect("loads after reissue");
    }
}

/// The owner of the job in [`a_jobs_owner_may_use_it_and_another_user_may_not_even_read_it`].
const OWNER: u32 = 4242;

/// Runs `program args` as `uid` (with the same gid) in `/`, with `$SLURM_JOB_ID` only when
/// `slurm_job` gives it.
fn as_user_in(uid: u32, slurm_job: Option<&str>, program: &str, args: &[&str]) -> Output {
    let mut cmd = Command::new(program);
    cmd.args(args)
        .uid(uid)
        .gid(uid)
        .env_remove("TEESFS_CONFIG")
        .env_remove("TEESFS_JOB")
        .env_remove("SLURM_JOB_ID")
        .env("TMPDIR", "/tmp")
        .current_dir("/");
    if let Some(j) = slurm_job {
        cmd.env("SLURM_JOB_ID", j);
    }
    cmd.output().expect("run as user")
}

/// Runs `program args` as `uid`, without `$SLURM_JOB_ID`.
fn as_user(uid: u32, program: &str, args: &[&str]) -> Output {
    as_user_in(uid, None, program, args)
}

/// `teesfs status --json` of the daemon at `sock`, asked as `uid`.
fn status_json(sock: &str, uid: u32, slurm_job: Option<&str>, args: &[&str]) -> serde_json::Value {
    let mut all = vec!["status", "--json", "--control", sock];
    all.extend(args);
    let out = as_user_in(uid, slurm_job, teesfs_bin(), &all);
    assert!(out.status.success(), "{args:?}: {}", stderr(&out));
    serde_json::from_slice::<serde_json::Value>(&out.stdout).expect("status JSON")
}

/// The owner's `status` lists their job (by any name of it); another user's lists nothing.
fn assert_status_shows_the_job_to_its_owner_only(sock: &str, job: &str) {
    let mine = status_json(sock, OWNER, None, &[]);
    assert_eq!(mine["jobs"].as_array().map(Vec::len), Some(1), "{mine}");
    assert_eq!(mine["jobs"][0]["job"], job);
    assert_eq!(mine["jobs"][0]["owner"], OWNER);
    let theirs = status_json(sock, NOBODY, None, &[]);
    assert_eq!(theirs["jobs"], serde_json::json!([]), "{theirs}");
    // The job by its Slurm number, its 16 hex digits, 0x hex, or $SLURM_JOB_ID.
    for (args, env) in [
        (&["--job", "1234"][..], None),
        (&["--job", job][..], None),
        (&["--job", "0x4d2"][..], None),
        (&[][..], Some("1234")),
    ] {
        let one = status_json(sock, OWNER, env, args);
        assert_eq!(one["job"], job, "{args:?} {env:?}: {one}");
    }
    // `--all` ignores $SLURM_JOB_ID (here a job that does not exist).
    let all = status_json(sock, OWNER, Some("99"), &["--all"]);
    assert_eq!(all["jobs"].as_array().map(Vec::len), Some(1), "{all}");
}

/// Another user: the mount (`data`, a file in it) is closed, and the control socket says
/// there is no such job.
fn assert_closed_to_another_user(sock: &str, job: &str, data: &str) {
    let out = as_user(NOBODY, "cat", &[data]);
    assert!(!out.status.success(), "nobody read the owner's layer");
    assert!(
        stderr(&out).contains("Permission denied"),
        "{}",
        stderr(&out)
    );
    let out = as_user(
        NOBODY,
        teesfs_bin(),
        &["status", "--control", sock, "--job", job],
    );
    assert!(
        !out.status.success() && stderr(&out).contains("no job"),
        "{}",
        stderr(&out)
    );
}

/// The owner of a job (`push --owner UID`, the Slurm prolog's `$SLURM_JOB_UID`) may query
/// it, enter its mount and run in it; another user may do none of these.
#[test]
fn a_jobs_owner_may_use_it_and_another_user_may_not_even_read_it() {
    if !can_mount() {
        return;
    }
    let c = Cluster::start(1, |_| vec![]);
    chmod(c.ws.path(), 0o755);
    chmod(&c.nodes[0].dir, 0o755);
    let src = c.ws.path().join("layer");
    std::fs::create_dir_all(src.join("opt/owned")).expect("layer");
    std::fs::write(src.join("opt/owned/data.txt"), "the owner's data\n").expect("write");
    let id = c.ws.publish(&src);
    let out = c
        .push_cmd(
            &id,
            1,
            &[
                "--width",
                "1",
                "--owner",
                &OWNER.to_string(),
                "--job",
                "1234",
            ],
        )
        .output()
        .expect("push");
    assert!(out.status.success(), "push: {}", stderr(&out));
    let mp = c.mount_of(0);
    chmod(mp.parent().expect("jobs dir"), 0o755);
    let job = c.status(0)["jobs"][0]["job"]
        .as_str()
        .expect("job id")
        .to_owned();
    assert_eq!(
        job, "1234",
        "`--job 1234` is Slurm job 1234, shown in decimal"
    );
    let sock = c.nodes[0].control();
    let sock = sock.to_str().expect("utf8");
    assert_status_shows_the_job_to_its_owner_only(sock, &job);
    let data = mp.join("opt/owned/data.txt");
    let data = data.to_str().expect("utf8");

    let md = std::fs::metadata(&mp).expect("stat mount");
    assert_eq!(
        (md.uid(), md.mode() & 0o777),
        (OWNER, 0o700),
        "the mount's root"
    );
    assert_closed_to_another_user(sock, &job, data);

    // The owner: reads the mount, queries the job, runs in it.
    let out = as_user(OWNER, "cat", &[data]);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "the owner's data\n",
        "{}",
        stderr(&out)
    );
    let out = as_user(
        OWNER,
        teesfs_bin(),
        &["status", "--json", "--control", sock, "--job", &job],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let jobs = mp
        .parent()
        .expect("jobs dir")
        .to_str()
        .expect("utf8")
        .to_owned();
    let out = as_user(
        OWNER,
        teesfs_bin(),
        &[
            "run",
            "--mount-root",
            &jobs,
            "--",
            "sh",
            "-c",
            "cat /opt/owned/data.txt; id -u",
        ],
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!("the owner's data\n{OWNER}\n"),
        "{}",
        stderr(&out)
    );
    // ... and may stop it.
    let out = as_user_in(
        OWNER,
        Some("1234"),
        teesfs_bin(),
        &["release", "--control", sock],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(!is_mounted(&mp));
}

/// A `Prepare` makes a daemon connect to the children it names, and to the grandchildren
/// that have children of their own, and pass each its part at once, before any `Start`
/// (that is what overlaps connection set-ups); one naming another node as its receiver is
/// ignored, and neither starts a job.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prepare_is_passed_on_to_children_and_grandchildren_over_new_connections() {
    use peertree::NodeId;
    use peertree::relay::{JobId, Msg, NodeInfo, Prepare, Routed};
    use teesfs_node::net::{Identity, StreamKind, Transport};

    // Three daemons so that n02 and n03 have certificates; the test listens as both.
    let c = Cluster::start(3, |_| vec![]);
    let bind = |host: &str| {
        let id = Identity::load(&c.creds, host).expect("identity");
        Transport::bind("127.0.0.1:0".parse().expect("addr"), &id).expect("bind")
    };
    // The test plays the login node (the sender), n02 (a child) and n03 (its child).
    let login = bind("login");
    let child = bind("n02");
    let grandchild = bind("n03");
    let info = |id, host: &str, addr: String, parent| NodeInfo {
        id: NodeId(id),
        host: host.to_owned(),
        addr,
        parent: NodeId(parent),
        group: None,
        rate: None,
    };
    let n01 = info(1, &c.nodes[0].host, c.nodes[0].addr.clone(), 0);
    let n02 = info(2, "n02", child.local_addr().to_string(), 1);
    let n03 = info(3, "n03", grandchild.local_addr().to_string(), 2);
    let n04 = info(4, "n04", "127.0.0.1:9".into(), 3);
    let send = |job: u64, subtree: Vec<NodeInfo>| {
        let login = &login;
        let addr = c.nodes[0].addr.parse().expect("daemon addr");
        let host = c.nodes[0].host.clone();
        async move {
            let conn = login.connect(addr, &host).await.expect("connect");
            let mut s = conn.open(StreamKind::Control).await.expect("stream");
            let frame = teesfs_node::peers::frame(JobId(job), &Msg::Prepare(Prepare { subtree }));
            s.send(&frame).await.expect("send");
            s.finish().await.expect("delivered");
        }
    };
    let first_frame = |t: &Transport| {
        let t = t.clone();
        async move {
            let conn = within("n01 connects", t.accept())
                .await
                .expect("a connection");
            // The link opens its other streams too, in no set order.
            let mut rx = loop {
                let (kind, rx) = within("a stream", conn.accept_stream())
                    .await
                    .expect("stream");
                if kind == StreamKind::Control {
                    break rx;
                }
            };
            let frame = within("a frame", rx.recv())
                .await
                .expect("recv")
                .expect("a frame");
            (conn.peer_host().to_owned(), frame)
        }
    };

    // Misaddressed: names n02 as the receiver. Ignored, and said so.
    send(7, vec![n02.clone(), n03.clone(), n04.clone()]).await;
    let log = || std::fs::read_to_string(c.nodes[0].dir.join("daemon.log")).expect("log");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !log().contains("prepare meant for another node") {
        assert!(std::time::Instant::now() < deadline, "{}", log());
        std::thread::sleep(std::time::Duration::from_millis(20));
    }

    // Addressed to n01, whose child n02 has the child n03, which has the leaf n04.
    send(8, vec![n01, n02.clone(), n03.clone(), n04.clone()]).await;
    for (t, want) in [
        (&child, vec![n02, n03.clone(), n04.clone()]),
        (&grandchild, vec![n03, n04]),
    ] {
        let (from, frame) = first_frame(t).await;
        assert_eq!(from, c.nodes[0].host, "the connection is from n01");
        let (job, msg) = teesfs_node::peers::unframe(frame.into()).expect("valid frame");
        assert_eq!(job, JobId(8));
        assert_eq!(
            msg,
            Routed::Prepare(Prepare { subtree: want }),
            "the receiver's part of the plan, nothing else"
        );
    }
    // Nothing was started: a job needs a verified `Start`.
    assert_eq!(c.status(0)["jobs"].as_array().map(Vec::len), Some(0));
}

/// Issue 30 item 6: a node makes its own key and a request; the admin host signs it with
/// the CA, and the key never moves. Node certificates expire after a year unless told.
#[test]
fn a_nodes_own_key_is_certified_by_request_and_certificates_expire_by_default() {
    let ws = Workspace::new();
    let (ca, node) = (ws.path().join("ca"), ws.path().join("node"));
    let (c, n) = (ca.to_str().expect("utf8"), node.to_str().expect("utf8"));
    let days_left = |crt: &Path| {
        let s = teesfs_node::net::pki::cert_summary(crt).expect("summary");
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock")
            .as_secs() as i64;
        (s.not_after - now) / 86_400
    };
    let out = ws.teesfs(&["keygen", "--cluster", c, "--nodes", "login"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        (364..=365).contains(&days_left(&ca.join("login.crt"))),
        "a year by default"
    );
    let out = ws.teesfs(&["keygen", "--request", n, "--host", "n07"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let key = std::fs::metadata(node.join("n07.key")).expect("the node's key");
    assert_eq!(key.mode() & 0o777, 0o600);
    let key_text = std::fs::read(node.join("n07.key")).expect("key");
    let csr = node.join("n07.csr");
    let out = ws.teesfs(&[
        "keygen",
        "--cluster",
        c,
        "--sign",
        csr.to_str().expect("utf8"),
        "--valid-days",
        "10",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("signed n07"));
    assert!((9..=10).contains(&days_left(&node.join("n07.crt"))));
    assert!(
        !ca.join("n07.key").exists(),
        "the key never reached the CA's host"
    );
    assert_eq!(std::fs::read(node.join("n07.key")).expect("key"), key_text);
    std::fs::copy(ca.join("ca.crt"), node.join("ca.crt")).expect("ca.crt");
    teesfs_node::net::Identity::load(&node, "n07").expect("the node's identity loads");
    // --no-expiry, as before the default changed.
    let out = ws.teesfs(&["keygen", "--cluster", c, "--nodes", "n1", "--no-expiry"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(days_left(&ca.join("n1.crt")) > 100 * 365);
    // A request that is not one is named.
    std::fs::write(
        node.join("bad.csr"),
        "-----BEGIN CERTIFICATE REQUEST-----\nAAAA\n",
    )
    .expect("bad");
    let bad = node.join("bad.csr");
    let out = ws.teesfs(&[
        "keygen",
        "--cluster",
        c,
        "--sign",
        bad.to_str().expect("utf8"),
    ]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("bad.csr"), "{}", stderr(&out));
}

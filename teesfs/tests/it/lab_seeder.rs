//! Issue 30 item 1 and issue 32 item 5: Slurm in the lab as a site runs it. slurmctld runs
//! on `ctl`, a host of its own with no teesfs certificate, as `SlurmUser=slurm`, with the
//! packaged prolog and epilog and the SPANK plugin; the prolog hands each job to `teesfs
//! seeder` on the login node, which roots the tree. An unprivileged lab user submits with
//! the `sbatch --teesfs=` line `teesfs lab up --slurm` prints.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use lab::{Lab, LabOptions, LabSpec};

use crate::lab::can_lab;
use crate::util::{spank_plugin, teesfs_bin};

fn small_lab(groups: usize, group_size: usize) -> Lab {
    let spec = LabSpec {
        groups,
        group_size,
        ..LabSpec::default()
    };
    Lab::up(&spec, &LabOptions::new(teesfs_bin())).expect("lab up")
}

/// Whether `user` (a name) can read the first byte of `path`.
fn readable_as(user: &str, path: &Path) -> bool {
    Command::new("setpriv")
        .arg(format!("--reuid={user}"))
        .arg(format!("--regid={user}"))
        .args(["--clear-groups", "--", "head", "-c", "1"])
        .arg(path)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Everything that explains a failed job: the controller's and the seeder's logs.
fn logs(site: &lab::slurm::site::SiteSlurm<'_>) -> String {
    let mut text = format!("seeder:\n{}\n", site.seeder_output());
    for dir in [site.ctl_log(), site.seeder_log()] {
        for f in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let body = std::fs::read_to_string(f.path()).unwrap_or_default();
            text.push_str(&format!("{}:\n{body}\n", f.path().display()));
        }
    }
    let ctld =
        std::fs::read_to_string(site.slurm.dir().join("ctld/slurmctld.log")).unwrap_or_default();
    let tail: Vec<&str> = ctld.lines().rev().take(25).collect();
    format!("{text}slurmctld: {tail:#?}")
}

#[test]
fn a_users_sbatch_teesfs_job_starts_through_the_seeder_and_the_controller_reads_no_user_file() {
    let _turn = crate::lab::lab_turn();
    if !can_lab() {
        return;
    }
    let lab = small_lab(2, 2);
    let site = lab
        .start_site_slurm(&spank_plugin())
        .expect("Slurm as a site runs it (scripts/deps.sh installs munge and Slurm)");
    site.prepare_job("seed").expect("the user's spec and job");
    let user = &site.user;
    let spec = user.home.join("manifest.toml");

    // What the old prolog needed on the controller is out of the Slurm user's reach: the
    // user's spec and the login node's key. A job can start only through the seeder.
    assert!(readable_as(&user.name, &spec), "the user reads their spec");
    assert!(!readable_as("slurm", &spec), "slurm reads the user's spec");
    let key = lab.work().join("cluster/login.key");
    assert!(!readable_as("slurm", &key), "slurm reads the login key");

    // The line `teesfs lab up --slurm` prints, run as printed: as the lab user.
    let job = site
        .submit_line()
        .unwrap_or_else(|e| panic!("sbatch line: {e}"));
    let state = site
        .slurm
        .wait_ended(job, Duration::from_secs(180))
        .unwrap_or_else(|e| panic!("job {job}: {e}\n{}", logs(&site)));
    let out = std::fs::read_to_string(user.home.join(format!("job-{job}.out"))).unwrap_or_default();
    assert_eq!(state, "COMPLETED", "{out}\n{}", logs(&site));
    let mut lines: Vec<&str> = out.lines().map(str::trim).collect();
    lines.sort();
    let want: Vec<String> = site
        .slurm
        .hosts()
        .iter()
        .map(|h| format!("{h} {} hello from lab-seed", user.uid))
        .collect();
    assert_eq!(lines, want, "every node ran the layer's script as the user");

    // The request came from ctl; the push ran on login (the seeder's job log and report).
    let ctl = lab.layout().node("ctl").expect("ctl").addr().to_string();
    let seeder_log = std::fs::read_to_string(site.seeder_log().join(format!("job-{job}.log")))
        .unwrap_or_default();
    assert!(
        seeder_log.contains(&format!("job {job} from {ctl} (uid {}", user.uid)),
        "the seeder's job log does not name the controller's request: {seeder_log}\n{}",
        logs(&site)
    );
    let report: serde_json::Value = serde_json::from_slice(
        &std::fs::read(site.seeder_log().join(format!("job-{job}.json"))).expect("report"),
    )
    .expect("report JSON");
    assert_eq!(report["root"].as_str(), Some("login"), "{report}");
    assert_eq!(report["job"].as_str(), Some(job.to_string().as_str()));
    // The controller relayed the seeder's output and pushed nothing itself.
    let relayed =
        std::fs::read_to_string(site.ctl_log().join(format!("job-{job}.log"))).unwrap_or_default();
    assert!(relayed.contains(&format!("from {ctl}")), "{relayed}");
    assert!(
        !site.ctl_log().join(format!("job-{job}.json")).exists(),
        "the controller wrote a push report: it pushed"
    );
    // The job's owner reads the seeder's files of their job.
    for ext in ["log", "json"] {
        let f = site.seeder_log().join(format!("job-{job}.{ext}"));
        assert!(
            readable_as(&user.name, &f),
            "{} not readable by the owner",
            f.display()
        );
    }
    let name = user.name.clone();
    drop(site);
    assert!(
        nix::unistd::User::from_name(&name).ok().flatten().is_none(),
        "the lab user {name} was left behind"
    );
    lab.down().expect("lab down");
}

/// Sends `credential` to the seeder from the controller's host, as `slurm`; the reply.
fn send(site: &lab::slurm::site::SiteSlurm<'_>, seeder: &str, credential: &str) -> String {
    let (host, port) = seeder.rsplit_once(':').expect("host:port");
    let out = site
        .on_ctl("slurm", "bash")
        .args([
            "-c",
            &format!("exec 3<>/dev/tcp/{host}/{port}; printf '%s\\n' \"$0\" >&3; cat <&3"),
            credential,
        ])
        .output()
        .expect("bash");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A munge credential made on the controller's host as `slurm`, carrying `payload`.
fn credential(site: &lab::slurm::site::SiteSlurm<'_>, payload: &str, ttl: &str) -> String {
    let out = site
        .on_ctl("slurm", "munge")
        .arg(format!("--socket={}", site.slurm.munge_socket().display()))
        .args(["--ttl", ttl, "--string", payload])
        .output()
        .expect("munge");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[test]
fn the_seeder_refuses_other_uids_and_forged_expired_or_replayed_credentials_naming_why() {
    let _turn = crate::lab::lab_turn();
    if !can_lab() {
        return;
    }
    let lab = small_lab(1, 2);
    let site = lab.start_site_slurm(&spank_plugin()).expect("site Slurm");
    let login = lab.layout().node("login").expect("login").addr();
    let seeder = format!("{login}:{}", lab::slurm::site::SEEDER_PORT);

    // Another uid than the Slurm user's: the lab user hands over a job as the prolog does.
    let out = site
        .on_ctl(&site.user.name, teesfs_bin())
        .args(["handoff", "--job", "7", "--nodes", "n01", "--uid", "0"])
        .args(["--spec", "/etc/hostname"])
        .output()
        .expect("teesfs handoff");
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{said}");
    assert!(
        said.contains("refused job 7")
            && said.contains(&format!("uid {}", site.user.uid))
            && said.contains("[seeder] allow"),
        "{said}"
    );

    // Forged: a good credential of slurm's with one character changed.
    let good = credential(&site, "{}", "300");
    let mid = good.len() / 2;
    let flipped = if &good[mid..=mid] == "A" { "B" } else { "A" };
    let forged = format!("{}{flipped}{}", &good[..mid], &good[mid + 1..]);
    let reply = send(&site, &seeder, &forged);
    assert!(
        reply.starts_with("refused munge refused the credential: Invalid credential"),
        "{reply}"
    );

    // Replayed: the good credential is taken once (its payload is then read and refused,
    // naming the part), and refused the second time.
    let reply = send(&site, &seeder, &good);
    assert!(reply.starts_with("refused the request:"), "{reply}");
    let reply = send(&site, &seeder, &good);
    assert!(
        reply.starts_with("refused munge refused the credential: Replayed credential"),
        "{reply}"
    );

    // Expired: a credential that lived 1 s, sent after 2.
    let short = credential(&site, "{}", "1");
    std::thread::sleep(Duration::from_secs(2));
    let reply = send(&site, &seeder, &short);
    assert!(
        reply.starts_with("refused munge refused the credential: Expired credential"),
        "{reply}"
    );
    let log = site.seeder_output();
    assert_eq!(
        log.matches("refused a job").count(),
        5,
        "the seeder logs each refusal with its reason: {log}"
    );
    drop(site);
    lab.down().expect("lab down");
}

/// Issue 32 item 5: `teesfs lab up --slurm` prints a `sbatch --teesfs=` line that works as
/// printed, as the lab user.
#[test]
fn lab_up_slurm_prints_an_sbatch_line_the_lab_user_can_run() {
    let _turn = crate::lab::lab_turn();
    if !can_lab() {
        return;
    }
    let mut up = Command::new(teesfs_bin())
        .args(["lab", "up", "--slurm", "--groups", "1", "--group-size", "2"])
        .arg("--spank-plugin")
        .arg(spank_plugin())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("teesfs lab up --slurm");
    let _guard = Interrupt(up.id());
    let mut lines = BufReader::new(up.stdout.take().expect("stdout")).lines();
    let mut printed = String::new();
    let line = loop {
        let l = lines
            .next()
            .unwrap_or_else(|| panic!("lab up ended before printing a line: {printed}"))
            .expect("read");
        printed.push_str(&l);
        printed.push('\n');
        if l.trim_start().starts_with("cd ") && l.contains("--teesfs=") {
            break l.trim().to_string();
        }
    };
    let home = line
        .strip_prefix("cd ")
        .and_then(|l| l.split(" && ").next())
        .expect("the line starts in the user's home")
        .to_string();
    let out = Command::new("sh").args(["-c", &line]).output().expect("sh");
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{line}: {said}\n{printed}");
    let job = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let file = Path::new(&home).join(format!("job-{job}.out"));
    let deadline = Instant::now() + Duration::from_secs(180);
    let text = loop {
        let text = std::fs::read_to_string(&file).unwrap_or_default();
        if text.lines().count() >= 2 {
            break text;
        }
        assert!(
            Instant::now() < deadline,
            "job {job} wrote no output: {text}\n{printed}"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    let owner = std::fs::metadata(&home).map(|m| std::os::unix::fs::MetadataExt::uid(&m));
    for l in text.lines() {
        assert!(
            l.ends_with("hello from lab-hello")
                && owner.as_ref().is_ok_and(|u| l.contains(&format!(" {u} "))),
            "a task ran outside the layer or not as the lab user: {text}"
        );
    }
    drop(lines);
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(up.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .expect("SIGINT");
    let status = up.wait().expect("lab up ends");
    assert!(
        status.success(),
        "lab up did not tear down cleanly: {status}"
    );
}

/// Interrupts `teesfs lab up` (it tears its lab down) if the test ends early.
struct Interrupt(u32);

impl Drop for Interrupt {
    fn drop(&mut self) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.0 as i32),
            nix::sys::signal::Signal::SIGINT,
        );
    }
}

/// The pids of the pushes of job `job` that run (a prefetch and its background copy).
fn pushes_of(job: &str) -> Vec<u32> {
    let mut pids = Vec::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let cmd = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
        let args: Vec<&[u8]> = cmd.split(|&b| b == 0).collect();
        let has = |s: &str| args.contains(&s.as_bytes());
        let job_arg = args
            .windows(2)
            .any(|w| w[0] == b"--job" && w[1] == job.as_bytes());
        if has("prefetch") && job_arg {
            pids.push(pid);
        }
    }
    pids
}

/// Issue 30: the seeder runs the push as a child for a `teesfs handoff`, and slurmctld
/// kills a prolog that runs past its time. Killed so, the handoff's connection closes: the
/// seeder's push (the prefetch and the background copy it started) ends soon after, and
/// the nodes it reached drop the job, which never starts.
#[test]
fn a_killed_handoff_ends_the_seeders_push_and_the_nodes_drop_the_job() {
    let _turn = crate::lab::lab_turn();
    if !can_lab() {
        return;
    }
    let lab = small_lab(1, 3);
    let site = lab.start_site_slurm(&spank_plugin()).expect("site Slurm");
    site.prepare_job("killed").expect("the user's spec");
    // n02 has no daemon: the push waits its 5 s deadline for it, so it is still running
    // when the prolog is killed.
    lab.kill_daemon("n02").expect("kill n02's daemon");
    let spec = site.user.home.join("manifest.toml");
    let text = std::fs::read(&spec).expect("spec");
    let job = "4242";
    let mut handoff = site
        .on_ctl("slurm", teesfs_bin())
        .args(["handoff", "--job", job, "--nodes", "n[01-03]"])
        .args(["--uid", &site.user.uid.to_string(), "--spec"])
        .arg(&spec)
        .env("SPANK_TEESFS_SPEC_TEXT", hex::encode(&text))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("teesfs handoff");
    // Both the seeder's prefetch and its background copy run.
    let t0 = Instant::now();
    while pushes_of(job).len() < 2 {
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "the seeder never started the push: {:?}\n{}",
            pushes_of(job),
            logs(&site)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let running = pushes_of(job);
    // n01 has joined the job (n02's deadline is still ahead).
    let holds = |host: &str| -> bool {
        lab.status(host)
            .is_ok_and(|s| s.jobs.iter().any(|j| j.job == job))
    };
    while !holds("n01") {
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "n01 never got job {job}\n{}",
            logs(&site)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // slurmctld kills the prolog.
    handoff.kill().expect("kill the handoff");
    let _ = handoff.wait();
    let killed = Instant::now();
    while !pushes_of(job).is_empty() {
        assert!(
            // Its deadline for n02 (5 s) is still ahead: only the kill ends it this soon.
            killed.elapsed() < Duration::from_secs(3),
            "the push of job {job} still runs {:?} after its handoff was killed: {:?} (was {running:?})\n{}",
            killed.elapsed(),
            pushes_of(job),
            logs(&site)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let gone = killed.elapsed();
    for host in ["n01", "n03"] {
        while holds(host) {
            assert!(
                killed.elapsed() < Duration::from_secs(20),
                "{host} still holds job {job} after its push was stopped\n{}",
                logs(&site)
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    eprintln!("the seeder's push of job {job} ended {gone:?} after its handoff was killed");
    drop(site);
    lab.down().expect("lab down");
}

/// Runs `teesfs args...` as the lab user, in their home.
fn teesfs_as(user: &lab::slurm::site::LabUser, args: &[&str]) -> std::process::Output {
    Command::new("setpriv")
        .arg(format!("--reuid={}", user.name))
        .arg(format!("--regid={}", user.name))
        .args(["--clear-groups", "--"])
        .arg(teesfs_bin())
        .args(args)
        .current_dir(&user.home)
        .env("HOME", &user.home)
        .env_remove("TEESFS_CONFIG")
        .output()
        .expect("setpriv teesfs")
}

/// Issue 30's tests in the site-shaped lab (slurmctld on `ctl`, the seeder on `login`, an
/// unprivileged user): a second user publishes into the store the lab made, and a
/// login-side mistake in the site's `teesfs.toml` (which the nodes read too) does not stop
/// the nodes' epilog from releasing a job.
#[test]
fn in_the_site_lab_a_second_user_publishes_into_the_store_and_a_bad_login_key_does_not_stop_release()
 {
    let _turn = crate::lab::lab_turn();
    if !can_lab() {
        return;
    }
    let lab = small_lab(2, 2);
    let site = lab
        .start_site_slurm(&spank_plugin())
        .expect("Slurm as a site runs it (scripts/deps.sh installs munge and Slurm)");
    // The lab (root) publishes first, then the user into the same store.
    site.prepare_job("share").expect("the user's spec and job");
    let user = &site.user;
    the_user_publishes_into_the_labs_store(user, &lab.work().join("store"));

    // A job that runs until the test lets it end.
    let go = user.home.join("go");
    let wait = user
        .write(
            "wait.sh",
            &format!(
                "#!/bin/sh\nsrun sh /opt/lab-share/hello.sh\nwhile [ ! -e {go:?} ]; do sleep 0.2; done\n"
            ),
        )
        .expect("wait.sh");
    std::fs::set_permissions(&wait, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("chmod");
    let line = site.sbatch_line().replace(" job.sh", " wait.sh");
    let out = Command::new("sh").args(["-c", &line]).output().expect("sh");
    assert!(out.status.success(), "{line}: {out:?}\n{}", logs(&site));
    let job = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let file = user.home.join(format!("job-{job}.out"));
    let hosts = site.slurm.hosts().to_vec();
    let deadline = Instant::now() + Duration::from_secs(180);
    while std::fs::read_to_string(&file)
        .unwrap_or_default()
        .lines()
        .count()
        < hosts.len()
    {
        assert!(
            Instant::now() < deadline,
            "job {job} never ran: {}",
            logs(&site)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // A login-side mistake lands in the site's configuration (its local drop-in) while the
    // job runs: a bad value of a key the push uses, and a section no release knows.
    let conf = site.dir().join("teesfs.toml");
    std::fs::write(
        site.dir().join("teesfs.toml.local"),
        "[tree]\nthreshold = \"many\"\n[daemon]\nstore_budget = \"8GiB\"\n",
    )
    .expect("write");
    let node = &hosts[0];
    let status = Command::new(teesfs_bin())
        .args(["status", "--control"])
        .arg(lab.work().join(node).join("sock"))
        .env("TEESFS_SITE_CONFIG", &conf)
        .output()
        .expect("status");
    let said = String::from_utf8_lossy(&status.stderr);
    assert!(
        status.status.success() && said.contains("unknown key [daemon]"),
        "a node's status with the site file: {status:?}"
    );
    user.write("go", "").expect("go");
    let id: u32 = job.parse().expect("job id");
    let state = site
        .slurm
        .wait_ended(lab::slurm::JobId(id), Duration::from_secs(120))
        .unwrap_or_else(|e| panic!("job {job}: {e}\n{}", logs(&site)));
    assert_eq!(state, "COMPLETED", "{}", logs(&site));
    // Every node's epilog released the job (its wrapper reads the same site file) and no
    // node was drained for a failing epilog.
    let deadline = Instant::now() + Duration::from_secs(30);
    let mounted = loop {
        let mounted = crate::lab::mounted_on(&lab, &hosts, &job);
        if mounted.is_empty() || Instant::now() > deadline {
            break mounted;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(
        mounted.is_empty(),
        "still mounted on {mounted:?}: {}",
        logs(&site)
    );
    let nodes = site
        .slurm
        .run(
            "sinfo",
            &["-h", "-N", "-o", "%N %t"],
            Duration::from_secs(10),
        )
        .expect("sinfo");
    assert!(
        !nodes.contains("drain"),
        "a node was drained: {nodes}\n{}",
        logs(&site)
    );
    drop(site);
    lab.down().expect("lab down");
}

/// The lab user publishes a layer of their own into `store`, which root made and published
/// into first; every directory of the store stays the group's (setgid, group-writable).
fn the_user_publishes_into_the_labs_store(user: &lab::slurm::site::LabUser, store: &Path) {
    let layer = user.home.join("mine");
    std::fs::create_dir_all(layer.join("opt/mine")).expect("layer");
    std::fs::write(layer.join("opt/mine/tool"), "my own tool\n").expect("file");
    for p in [&layer, &layer.join("opt"), &layer.join("opt/mine")] {
        nix::unistd::chown(p.as_path(), Some(user.uid.into()), Some(user.gid.into())).expect("own");
    }
    let key = user.home.join("mine.key");
    let out = teesfs_as(user, &["keygen", "--out", key.to_str().expect("utf-8")]);
    assert!(out.status.success(), "keygen as the user: {out:?}");
    let out = teesfs_as(
        user,
        &[
            "publish",
            layer.to_str().expect("utf-8"),
            "--store",
            store.to_str().expect("utf-8"),
            "--key",
            key.to_str().expect("utf-8"),
            "--tag",
            "mine",
            "--quiet",
        ],
    );
    assert!(
        out.status.success(),
        "the user publishes into the store root made: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    for e in walkdir::WalkDir::new(store) {
        let e = e.expect("walk");
        let md = e.metadata().expect("metadata");
        if md.is_dir() {
            use std::os::unix::fs::MetadataExt;
            assert_eq!(md.mode() & 0o7777, 0o2775, "{}", e.path().display());
            assert_eq!(md.gid(), user.gid, "{}", e.path().display());
        }
    }
}

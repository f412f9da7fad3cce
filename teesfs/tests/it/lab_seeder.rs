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

//! Issue 32 item 4 and issue 30 item 2: one bad node never fails a launch, and the user sees
//! why. Real Slurm as a site runs it (slurmctld on `ctl` as `slurm`, the packaged prolog and
//! epilog, the SPANK plugin, the seeder on login): a job whose first allocation holds a node
//! without a daemon is pushed, the push fails because of that node, the prolog drains it
//! with a reason naming teesfs and the failed edge and fails, and Slurm requeues the job
//! onto healthy nodes, where it runs. Nothing stays mounted from the failed start, and the
//! job's own stderr says what happened. Slurm runs no Epilog for a start that failed in
//! PrologSlurmctld: the failed push releases the job down the tree itself, so a node of the
//! failed start that the requeued job does not use (drained meanwhile here) holds no mount.

use std::time::{Duration, Instant};

use lab::{Lab, LabOptions, LabSpec};

use crate::lab::can_lab;
use crate::util::{spank_plugin, teesfs_bin};

/// `scontrol show FOR ID -o`, on the login node.
fn show(site: &lab::slurm::site::SiteSlurm<'_>, what: &str, id: &str) -> String {
    site.slurm
        .run(
            "scontrol",
            &["show", what, id, "-o"],
            Duration::from_secs(30),
        )
        .unwrap_or_default()
}

/// The value of `key=` in `scontrol -o` output (up to the next space).
fn field<'a>(line: &'a str, key: &str) -> &'a str {
    line.split_whitespace()
        .find_map(|f| f.strip_prefix(key))
        .unwrap_or("")
}

/// Waits until Slurm requeued job `id` (its restart count rises), checking that it never
/// ran before (on the node without a daemon).
fn wait_requeued(site: &lab::slurm::site::SiteSlurm<'_>, id: &str, logs: &dyn Fn() -> String) {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let j = show(site, "job", id);
        if field(&j, "Restarts=") != "0" {
            return;
        }
        assert!(
            field(&j, "JobState=") != "RUNNING",
            "job {id} started on a node without a daemon: {j}\n{}",
            logs()
        );
        assert!(
            Instant::now() < deadline,
            "job {id} was not requeued: {j}\n{}",
            logs()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Drains `node` (a healthy node of job `id`'s first allocation) once Slurm allocated the
/// job, while its first start runs: the requeued job cannot use it.
fn drain_once_allocated(site: &lab::slurm::site::SiteSlurm<'_>, id: &str, node: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let j = show(site, "job", id);
        let nodes = field(&j, "NodeList=");
        if !nodes.is_empty() && nodes != "(null)" {
            assert_eq!(nodes, "n[01-05]", "the first allocation: {j}");
            break;
        }
        assert!(Instant::now() < deadline, "job {id} never allocated: {j}");
        std::thread::sleep(Duration::from_millis(50));
    }
    let update = [
        "update",
        &format!("NodeName={node}"),
        "State=DRAIN",
        "Reason=test: keep the requeued job off",
    ];
    site.slurm
        .run("scontrol", &update, Duration::from_secs(30))
        .expect("drain the spare node");
}

/// Issue 30 item 2: an interactive job is cancelled, not requeued, when its start fails, so
/// the batch stderr never reaches its user. `srun --teesfs=` over a node whose daemon is
/// dead (`node`, given back to Slurm and asked for by name) prints the prolog's summary, naming the node
/// and why, on srun's own stderr, and exits non-zero.
fn an_interactive_job_is_told_why_it_failed(
    lab: &Lab,
    site: &lab::slurm::site::SiteSlurm<'_>,
    node: &str,
) {
    lab.kill_daemon(node).expect("kill the daemon");
    let resume = ["update", &format!("NodeName={node}"), "State=RESUME"];
    site.slurm
        .run("scontrol", &resume, Duration::from_secs(30))
        .expect("resume the node");
    let user = &site.user;
    let mut srun = site.slurm.client("setpriv");
    srun.arg(format!("--reuid={}", user.uid))
        .arg(format!("--regid={}", user.gid))
        .args(["--clear-groups", "--", "srun", "-N", "5", "-w", node])
        .args(["--teesfs=manifest.toml", "hostname"])
        .current_dir(&user.home)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = srun.spawn().expect("srun");
    let t0 = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break s;
        }
        if t0.elapsed() > Duration::from_secs(120) {
            let _ = child.kill();
            panic!("srun still waiting after {:?}", t0.elapsed());
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let out = child.wait_with_output().expect("srun output");
    let err = String::from_utf8_lossy(&out.stderr);
    let said = || {
        let jobs = site
            .slurm
            .run("scontrol", &["show", "job", "-o"], Duration::from_secs(30))
            .unwrap_or_default();
        let logs: Vec<String> = std::fs::read_dir(site.seeder_log())
            .into_iter()
            .flatten()
            .flatten()
            .map(|f| {
                let text = std::fs::read_to_string(f.path()).unwrap_or_default();
                format!("{}:\n{text}", f.path().display())
            })
            .collect();
        format!(
            "srun's stdout: {}\nstderr: {err}\njobs: {jobs}\n{}",
            String::from_utf8_lossy(&out.stdout),
            logs.join("\n")
        )
    };
    assert!(!status.success(), "{}", said());
    assert!(
        err.contains("teesfs: the start of this job failed on")
            && err.contains(&format!("-> {node}: "))
            && err.contains("cancels this interactive job"),
        "{}",
        said()
    );
    eprintln!(
        "srun with a dead node failed after {:?} saying: {err}",
        t0.elapsed()
    );
}

#[test]
fn a_node_without_a_daemon_is_drained_and_the_job_runs_on_healthy_nodes_saying_why() {
    let _turn = crate::lab::lab_turn();
    if !can_lab() {
        return;
    }
    let spec = LabSpec {
        groups: 2,
        group_size: 4,
        ..LabSpec::default()
    };
    let lab = Lab::up(&spec, &LabOptions::new(teesfs_bin())).expect("lab up");
    let site = lab.start_site_slurm(&spank_plugin()).expect("site Slurm");
    site.prepare_job("requeue")
        .expect("the user's spec and job");
    let hosts = site.slurm.hosts().to_vec();
    // n04 has no daemon. Slurm allocates the lowest nodes first: the job's first
    // allocation, n[01-05], holds it. n05 is drained while that start runs, so the
    // requeued job runs on n[01-03,06-07] and only the failed start used n05.
    let (bad, spare) = ("n04", "n05");
    lab.kill_daemon(bad).expect("kill n04's daemon");
    let user = &site.user;
    let n = "5";
    let job = site
        .slurm
        .submit(
            &user.home,
            &[
                "-N",
                n,
                "--teesfs=manifest.toml",
                "-o",
                "job-%j.out",
                "-e",
                "job-%j.err",
                "job.sh",
            ],
            Some((user.uid, user.gid)),
        )
        .expect("sbatch");
    let id = job.to_string();
    drain_once_allocated(&site, &id, spare);
    let logs = || {
        let seeder = std::fs::read_to_string(site.seeder_log().join(format!("job-{id}.log")))
            .unwrap_or_default();
        let ctl = std::fs::read_to_string(site.ctl_log().join(format!("job-{id}.log")))
            .unwrap_or_default();
        let ctld = std::fs::read_to_string(site.slurm.dir().join("ctld/slurmctld.log"))
            .unwrap_or_default();
        let tail: Vec<&str> = ctld.lines().rev().take(30).collect();
        format!("seeder job log:\n{seeder}\ncontroller job log:\n{ctl}\nslurmctld: {tail:#?}")
    };

    // The failed start: the prolog fails and Slurm requeues the job.
    wait_requeued(&site, &id, &logs);
    // No Epilog ran for it: the failed push released the job on the nodes it reached.
    let t0 = Instant::now();
    while !crate::lab::mounted_on(&lab, &[spare.to_string()], &id).is_empty() {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "job {id} still mounted on {spare}, used by its failed start only\n{}",
            logs()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // The bad node is drained, the reason naming teesfs and the failed edge.
    let node = show(&site, "node", bad);
    assert!(field(&node, "State=").contains("DRAIN"), "{node}");
    let reason = node.split("Reason=").nth(1).unwrap_or("");
    assert!(
        reason.starts_with("teesfs: ") && reason.contains(&format!("-> {bad}: ")),
        "{node}"
    );

    // The job runs on the healthy nodes and completes.
    let state = site
        .slurm
        .wait_ended(job, Duration::from_secs(180))
        .unwrap_or_else(|e| panic!("job {id}: {e}\n{}", logs()));
    let out = std::fs::read_to_string(user.home.join(format!("job-{id}.out"))).unwrap_or_default();
    let err = std::fs::read_to_string(user.home.join(format!("job-{id}.err"))).unwrap_or_default();
    assert_eq!(state, "COMPLETED", "{out}\n{err}\n{}", logs());
    let mut ran: Vec<&str> = out.lines().filter_map(|l| l.split(' ').next()).collect();
    ran.sort();
    let want = ["n01", "n02", "n03", "n06", "n07"];
    assert_eq!(ran, want, "the job ran on the healthy nodes: {out}");
    // The job's own stderr says what happened to its first start, naming the node and why.
    assert!(
        err.contains("teesfs: a start of this job failed on")
            && err.contains(&format!("-> {bad}: "))
            && err.contains(&format!("Slurm drained {bad} and requeued the job")),
        "the job's stderr: {err:?}\n{}",
        logs()
    );
    // The seeder's job log, the owner's to read, keeps both starts.
    let seeder = std::fs::read_to_string(site.seeder_log().join(format!("job-{id}.log")))
        .unwrap_or_default();
    assert!(
        seeder.contains(&format!("the controller drains {bad}: teesfs: "))
            && seeder.matches("teesfs seeder on ").count() >= 2,
        "{seeder}"
    );
    let left = crate::lab::mounted_on(&lab, &hosts, &id);
    assert!(
        left.is_empty(),
        "job {id} still mounted on {left:?} after it ended"
    );
    an_interactive_job_is_told_why_it_failed(&lab, &site, spare);
    drop(site);
    lab.down().expect("lab down");
}

//! teesfs under real Slurm in the lab, set up as a site does: `slurm.conf` names the
//! project's PrologSlurmctld and Epilog, and slurmctld and slurmd run them. The prolog
//! pushes a job's layer (named by the job's comment) to the allocated nodes with
//! `--job-id $SLURM_JOB_ID` before the job starts; `srun -N <all> teesfs run -- <the
//! application>` then runs it from every node's mount; when the job ends, slurmd runs the
//! epilog on every node, which releases the job.
//!
//! In the lab each node is a set of namespaces on one machine: `slurmd` runs in its node's
//! network and mount namespaces (so tasks see the node's FUSE mounts), and each node's
//! daemon mounts under its own directory, which the task's `--mount-root` names.

use std::path::Path;
use std::time::Duration;

use lab::slurm::SlurmScripts;
use lab::{Lab, LabOptions, LabSpec, Rates};

use crate::lab::can_lab;
use crate::util::teesfs_bin;

fn sorted_lines(s: &str) -> Vec<String> {
    let mut v: Vec<String> = s.lines().map(|l| l.trim().to_string()).collect();
    v.sort();
    v
}

#[test]
fn slurm_prolog_pushes_srun_teesfs_run_starts_the_app_everywhere_and_epilog_releases() {
    if !can_lab() {
        return;
    }
    let spec = LabSpec {
        groups: 2,
        group_size: 2,
        rates: Rates::default(),
    };
    let lab = Lab::up(&spec, &LabOptions::new(teesfs_bin())).expect("lab up");
    let work = lab.work().to_path_buf();
    let tmp = tempfile::tempdir().expect("tempdir");
    // World-readable: slurmctld and slurmd run the scripts and read the spec.
    std::fs::set_permissions(
        tmp.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .expect("chmod");
    let repo =
        std::fs::canonicalize(Path::new(env!("CARGO_MANIFEST_DIR")).join("..")).expect("repo");
    let logdir = tmp.path().join("log");
    let config = tmp.path().join("config");
    // The lab's stand-ins for /etc/teesfs/slurm.env: where the binary, the logs and the
    // trusted keys are, and each node's control socket.
    let prolog = tmp.path().join("prolog.sh");
    std::fs::write(
        &prolog,
        format!(
            "#!/bin/sh
export TEESFS={bin} TEESFS_SLURM_LOGDIR={log} TEESFS_CONFIG={config}
             exec sh {script}
",
            bin = teesfs_bin(),
            log = logdir.display(),
            config = config.display(),
            script = repo.join("packaging/slurm/prolog-slurmctld.sh").display(),
        ),
    )
    .expect("prolog wrapper");
    let epilog = tmp.path().join("epilog.sh");
    std::fs::write(
        &epilog,
        format!(
            "#!/bin/sh
export TEESFS={bin} TEESFS_CONTROL={work}/$(hostname)/sock
             exec sh {script}
",
            bin = teesfs_bin(),
            work = work.display(),
            script = repo.join("packaging/slurm/epilog.sh").display(),
        ),
    )
    .expect("epilog wrapper");
    for f in [&prolog, &epilog] {
        std::fs::set_permissions(f, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .expect("chmod");
    }
    // The prolog runs as the Slurm user, as on a site: it needs the login node's key (a
    // site makes it readable by SlurmUser, see docs/slurm.md) and a log directory it may
    // write; the rest (spec, store, certificates, trusted keys) is readable by everyone.
    let slurm_user = nix::unistd::User::from_name("slurm")
        .expect("users")
        .expect("the Debian slurm packages create the slurm user");
    let cluster = work.join("cluster");
    nix::unistd::chown(&cluster, None, Some(slurm_user.gid)).expect("chgrp credentials");
    std::fs::set_permissions(
        &cluster,
        std::os::unix::fs::PermissionsExt::from_mode(0o750),
    )
    .expect("chmod credentials");
    nix::unistd::chown(&cluster.join("login.key"), Some(slurm_user.uid), None)
        .expect("chown login key");
    std::fs::create_dir_all(&logdir).expect("log dir");
    nix::unistd::chown(&logdir, Some(slurm_user.uid), Some(slurm_user.gid)).expect("chown log");
    let slurm = lab
        .start_slurm_with(SlurmScripts {
            prolog_slurmctld: Some(prolog),
            epilog: Some(epilog),
            slurm_user: Some("slurm".into()),
        })
        .expect("Slurm in the lab (scripts/deps.sh installs munge, slurmctld, slurmd)");
    let hosts = slurm.hosts().to_vec();
    let all = hosts.len().to_string();
    let tag = format!("slurm{}", std::process::id());
    let layer = tmp.path().join("layer");
    crate::run::python_app(&layer, &tag);
    let index = lab.publish(&layer).expect("publish");

    // The job spec a user would name with `sbatch --comment=teesfs:<spec>`.
    let spec_path = tmp.path().join("manifest.toml");
    std::fs::write(
        &spec_path,
        format!(
            "[layer]\nstore = {store:?}\nindex = {index:?}\n\
             [launch]\nurgent = [\"opt/app-{tag}/*.py\", \"opt/app-{tag}/*/*.py\"]\n\
             [nodes]\ngroup_size = 2\nstrategy = \"topo\"\nlogin = \"login\"\n\
             [network]\nidentity = {id:?}\nhosts = {hosts:?}\nwait = \"all\"\n",
            store = work.join("store"),
            id = work.join("cluster"),
            hosts = work.join("hosts"),
        ),
    )
    .expect("spec");
    std::fs::create_dir_all(config.join("trusted")).expect("config");
    std::fs::copy(
        work.join("publisher.pub"),
        config.join("trusted/publisher.pub"),
    )
    .expect("trust");

    // The job asks for its layer; slurmctld runs the prolog, and the job runs only once
    // the prolog has pushed the layer.
    let comment = format!("--comment=teesfs:{}", spec_path.display());
    let job = slurm.allocate_with(&[&comment]).unwrap_or_else(|e| {
        let logs: Vec<String> = std::fs::read_dir(&logdir)
            .into_iter()
            .flatten()
            .flatten()
            .map(|f| std::fs::read_to_string(f.path()).unwrap_or_default())
            .collect();
        let ctld = std::fs::read_to_string(slurm.dir().join("ctld/slurmctld.log"))
            .unwrap_or_default();
        let tail: Vec<&str> = ctld.lines().rev().take(30).collect();
        panic!("allocation over all nodes, after the prolog: {e}\nprolog logs: {logs:?}\nslurmctld: {tail:#?}")
    });
    let report: serde_json::Value = serde_json::from_slice(
        &std::fs::read(logdir.join(format!("job-{job}.json"))).expect("prolog's push report"),
    )
    .expect("report JSON");
    assert_eq!(
        report["job"].as_str(),
        Some(format!("{:016x}", job.0).as_str()),
        "the push used the Slurm job id: {report}"
    );

    // srun -N <all> teesfs run -- the application, inside the allocation.
    let t = Duration::from_secs(120);
    let jobid = format!("--jobid={job}");
    let task = format!(
        "printf '%s ' \"$(hostname)\"; TMPDIR={tmp} exec {bin} run --mount-root {work}/$(hostname)/jobs \
         -- python3 /opt/app-{tag}/main.py",
        tmp = tmp.path().display(),
        bin = teesfs_bin(),
        work = work.display(),
    );
    let out = slurm
        .run(
            "srun",
            &[&jobid, "--overlap", "-N", &all, "sh", "-c", &task],
            t,
        )
        .expect("srun teesfs run");
    let want: Vec<String> = hosts.iter().map(|h| format!("{h} answer 42")).collect();
    assert_eq!(sorted_lines(&out), want, "srun output: {out}");

    // The job ends; slurmd runs the epilog on every node, which releases the job: no job
    // left, nothing mounted.
    slurm.cancel(job).expect("scancel");
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let jobs_on = |h: &str| -> usize {
        std::process::Command::new(teesfs_bin())
            .args(["status", "--json", "--control"])
            .arg(work.join(h).join("sock"))
            .output()
            .ok()
            .and_then(|o| serde_json::from_slice::<serde_json::Value>(&o.stdout).ok())
            .and_then(|v| v["jobs"].as_array().map(Vec::len))
            .unwrap_or(usize::MAX)
    };
    while hosts.iter().any(|h| jobs_on(h) != 0) {
        assert!(
            std::time::Instant::now() < deadline,
            "the epilog did not release the job everywhere"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    for h in &hosts {
        let st = std::process::Command::new(teesfs_bin())
            .args(["status", "--json", "--control"])
            .arg(work.join(h).join("sock"))
            .output()
            .expect("status");
        let v: serde_json::Value = serde_json::from_slice(&st.stdout).expect("status JSON");
        assert_eq!(v["jobs"].as_array().map(Vec::len), Some(0), "{h}: {v}");
        let pid = lab.daemon_pid(h).expect("daemon");
        let mounts = std::fs::read_to_string(format!("/proc/{pid}/mountinfo")).expect("mountinfo");
        assert!(
            !mounts.contains(&format!("{h}/jobs/")),
            "{h} still has a job mounted"
        );
    }
    assert!(
        std::fs::read_dir(tmp.path()).expect("tmp").all(|e| !e
            .expect("entry")
            .file_name()
            .to_string_lossy()
            .starts_with("teesfs-run")),
        "teesfs run left its staging directory"
    );
    drop(slurm);
    lab.down().expect("lab down");
}

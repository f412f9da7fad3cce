//! teesfs under real Slurm in the lab: the project's PrologSlurmctld pushes a job's layer
//! (named by the job's comment) to the allocated nodes with `--job-id $SLURM_JOB_ID`;
//! `srun -N <all> teesfs run -- <the application>` then runs it from every node's mount;
//! the project's epilog releases the job on every node.
//!
//! In the lab each node is a set of namespaces on one machine: `slurmd` runs in its node's
//! network and mount namespaces (so tasks see the node's FUSE mounts), and each node's
//! daemon mounts under its own directory, which the task's `--mount-root` names.

use std::path::Path;
use std::time::Duration;

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
    let slurm = lab
        .start_slurm()
        .expect("Slurm in the lab (scripts/deps.sh installs munge, slurmctld, slurmd)");
    let hosts = slurm.hosts().to_vec();
    let all = hosts.len().to_string();
    let work = lab.work().to_path_buf();
    let tmp = tempfile::tempdir().expect("tempdir");
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
    let config = tmp.path().join("config");
    std::fs::create_dir_all(config.join("trusted")).expect("config");
    std::fs::copy(
        work.join("publisher.pub"),
        config.join("trusted/publisher.pub"),
    )
    .expect("trust");

    let job = slurm.allocate().expect("allocation over all nodes");
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let logdir = tmp.path().join("log");
    let prolog = slurm
        .client("sh")
        .arg(repo.join("packaging/slurm/prolog-slurmctld.sh"))
        .env("SLURM_JOB_ID", job.to_string())
        .env("SLURM_JOB_NODELIST", lab.layout().hostlist())
        .env(
            "SLURM_JOB_COMMENT",
            format!("teesfs:{}", spec_path.display()),
        )
        .env("TEESFS", teesfs_bin())
        .env("TEESFS_SLURM_LOGDIR", &logdir)
        .env("TEESFS_CONFIG", &config)
        .output()
        .expect("prolog");
    assert!(prolog.status.success(), "prolog: {prolog:?}");
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

    // The epilog on every node releases the job: no job left, nothing mounted.
    let epilog = format!(
        "SLURM_JOB_ID={job} TEESFS={bin} TEESFS_CONTROL={work}/$(hostname)/sock sh {script} && hostname",
        bin = teesfs_bin(),
        work = work.display(),
        script = repo.join("packaging/slurm/epilog.sh").display(),
    );
    let out = slurm
        .run(
            "srun",
            &[&jobid, "--overlap", "-N", &all, "sh", "-c", &epilog],
            t,
        )
        .expect("srun epilog");
    assert_eq!(sorted_lines(&out), hosts, "epilog ran everywhere: {out}");
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

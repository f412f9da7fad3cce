//! teesfs under real Slurm in the lab, set up as a site does: `slurm.conf` names the
//! project's PrologSlurmctld and Epilog (and `plugstack.conf` its SPANK plugin), and
//! slurmctld, slurmd and slurmstepd run them; SlurmUser is the non-root `slurm`.
//!
//! - With the plugin, `sbatch -N 32 --teesfs=spec.toml job.sh` is all a user types: the
//!   prolog pushes the layer before the job starts, and every task (the batch script and
//!   `srun python3 app.py`) starts inside it, as the user, without a wrapper.
//! - Without it, the job's comment names the spec and tasks run `srun teesfs run -- CMD`.
//!
//! In the lab each node is a set of namespaces on one machine: `slurmd` runs in its node's
//! network and mount namespaces (so tasks see the node's FUSE mounts), and each node's
//! daemon mounts under its own directory (`<lab>/<node>/jobs`), which the plugin's
//! `mount_root=<lab>/%h/jobs` and `teesfs run --mount-root` name.

use std::path::{Path, PathBuf};
use std::time::Duration;

use lab::slurm::SlurmScripts;
use lab::{Lab, LabOptions, LabSpec};

use crate::lab::can_lab;
use crate::util::{spank_plugin, teesfs_bin};

fn sorted_lines(s: &str) -> Vec<String> {
    let mut v: Vec<String> = s.lines().map(|l| l.trim().to_string()).collect();
    v.sort();
    v
}

/// What a site sets up around Slurm, in a lab: the prolog and epilog wrappers (the lab's
/// stand-ins for /etc/teesfs/slurm.env), the login key readable by SlurmUser, a log
/// directory SlurmUser may write, the publisher key trusted, and, with `plugin`, the SPANK
/// plugin in plugstack.conf.
pub(crate) struct Site {
    pub(crate) tmp: tempfile::TempDir,
    pub(crate) logdir: PathBuf,
    scripts: SlurmScripts,
}

impl Site {
    pub(crate) fn new(lab: &Lab, plugin: bool) -> Site {
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
        let bin = teesfs_bin();
        let (log, conf) = (logdir.display(), config.display());
        let prolog = tmp.path().join("prolog.sh");
        wrapper(
            &prolog,
            &format!("TEESFS={bin} TEESFS_SLURM_LOGDIR={log} TEESFS_CONFIG={conf}"),
            &repo.join("packaging/slurm/prolog-slurmctld.sh"),
        );
        let epilog = tmp.path().join("epilog.sh");
        wrapper(
            &epilog,
            &format!(
                "TEESFS={bin} TEESFS_CONTROL={work}/$(hostname)/sock",
                work = work.display()
            ),
            &repo.join("packaging/slurm/epilog.sh"),
        );
        let epilog_ctld = tmp.path().join("epilog-slurmctld.sh");
        wrapper(
            &epilog_ctld,
            &format!("TEESFS={bin} TEESFS_SLURM_LOGDIR={log} TEESFS_CONFIG={conf}"),
            &repo.join("packaging/slurm/epilog-slurmctld.sh"),
        );
        let_slurm_user_in(&work, &logdir);
        std::fs::create_dir_all(config.join("trusted")).expect("config");
        std::fs::copy(
            work.join("publisher.pub"),
            config.join("trusted/publisher.pub"),
        )
        .expect("trust");
        let plugstack = if plugin {
            vec![format!(
                "required {so} teesfs={bin} mount_root={work}/%h/jobs control={work}/%h/sock",
                so = spank_plugin().display(),
                bin = teesfs_bin(),
                work = work.display(),
            )]
        } else {
            Vec::new()
        };
        Site {
            tmp,
            logdir,
            scripts: SlurmScripts {
                prolog_slurmctld: Some(prolog),
                epilog: Some(epilog),
                epilog_slurmctld: Some(epilog_ctld),
                slurm_user: Some("slurm".into()),
                own_controller: false,
                plugstack,
                cred_expire: None,
            },
        }
    }

    pub(crate) fn start<'a>(&self, lab: &'a Lab) -> lab::slurm::Slurm<'a> {
        lab.start_slurm_with(self.scripts.clone())
            .expect("Slurm in the lab (scripts/deps.sh installs munge, slurmctld, slurmd)")
    }

    /// Waits for job `id` to end; its final state. Panics with the logs if it does not.
    pub(crate) fn ended(
        &self,
        slurm: &lab::slurm::Slurm<'_>,
        id: lab::slurm::JobId,
        t: Duration,
    ) -> String {
        slurm
            .wait_ended(id, t)
            .unwrap_or_else(|e| panic!("job {id}: {e}\n{}", self.logs(slurm)))
    }

    /// The prolog's logs and the end of slurmctld's, for a failure message.
    pub(crate) fn logs(&self, slurm: &lab::slurm::Slurm<'_>) -> String {
        let logs: Vec<String> = std::fs::read_dir(&self.logdir)
            .into_iter()
            .flatten()
            .flatten()
            .map(|f| std::fs::read_to_string(f.path()).unwrap_or_default())
            .collect();
        let ctld =
            std::fs::read_to_string(slurm.dir().join("ctld/slurmctld.log")).unwrap_or_default();
        let tail: Vec<&str> = ctld.lines().rev().take(30).collect();
        let mut nodes = String::new();
        for h in slurm.hosts().iter().take(2) {
            let log = std::fs::read_to_string(slurm.dir().join("nodes").join(h).join("slurmd.log"))
                .unwrap_or_default();
            let errors: Vec<&str> = log
                .lines()
                .filter(|l| l.contains("error") || l.contains("teesfs"))
                .rev()
                .take(20)
                .collect();
            nodes.push_str(&format!("\nslurmd {h}: {errors:#?}"));
        }
        let jobs = slurm
            .run("scontrol", &["show", "job", "-o"], Duration::from_secs(10))
            .unwrap_or_default();
        format!("prolog logs: {logs:#?}\nslurmctld: {tail:#?}{nodes}\njobs:\n{jobs}")
    }
}

impl Site {
    /// Has the prolog only note its environment and return, so the job's tasks start before
    /// any node holds, or has mounted, its layer; [`Site::late_push`] pushes it.
    pub(crate) fn push_after_start(&self) {
        let prolog = self.scripts.prolog_slurmctld.clone().expect("a prolog");
        std::fs::rename(&prolog, self.tmp.path().join("prolog-now.sh")).expect("move");
        let log = self.logdir.display();
        let note = format!("#!/bin/sh\nexport -p >{log}/late-$SLURM_JOB_ID.env\n");
        std::fs::write(&prolog, note).expect("the late prolog");
        std::fs::set_permissions(&prolog, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .expect("chmod");
    }

    /// Once job `job` has started (its prolog returned), waits `after` and runs its real
    /// prolog (the push) where slurmctld runs (the login node's network) with the
    /// environment Slurm gave the prolog; what it printed.
    pub(crate) fn late_push(&self, lab: &Lab, job: lab::slurm::JobId, after: Duration) -> String {
        let env = self.logdir.join(format!("late-{job}.env"));
        let t0 = std::time::Instant::now();
        while !env.exists() {
            assert!(
                t0.elapsed() < Duration::from_secs(60),
                "job {job}'s prolog never ran"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        std::thread::sleep(after);
        let now = self.tmp.path().join("prolog-now.sh");
        let netns = &lab.layout().node("login").expect("a login node").netns;
        let out = std::process::Command::new("nsenter")
            .arg(format!("--net=/run/netns/{netns}"))
            .args(["sh", "-c"])
            .arg(format!(". {}; exec {}", env.display(), now.display()))
            .output()
            .expect("the prolog");
        let said = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "job {job}'s late push failed: {said}");
        said
    }
}

/// Writes an executable wrapper at `path` that exports `env` (the lab's stand-in for
/// /etc/teesfs/slurm.env) and runs the packaged `script`.
fn wrapper(path: &Path, env: &str, script: &Path) {
    std::fs::write(
        path,
        format!(
            "#!/bin/sh
export {env}
                 exec sh {script}
",
            script = script.display(),
        ),
    )
    .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    std::fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("chmod");
}

/// The prolog runs as the Slurm user, as on a site: it needs the login node's key (a site
/// makes it readable by SlurmUser, see docs/slurm.md) and a log directory it may write;
/// the rest (spec, store, certificates, trusted keys) is readable by everyone. The
/// EpilogSlurmctld keeps learned urgent lists in the store (docs/slurm.md).
fn let_slurm_user_in(work: &Path, logdir: &Path) {
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
    std::fs::create_dir_all(logdir).expect("log dir");
    nix::unistd::chown(logdir, Some(slurm_user.uid), Some(slurm_user.gid)).expect("chown log");
    let learned = work.join("store/learned");
    std::fs::create_dir_all(&learned).expect("learned dir");
    nix::unistd::chown(&learned, Some(slurm_user.uid), None).expect("chown learned");
}

/// The push report the prolog wrote for `job`.
fn prolog_report(logdir: &Path, job: lab::slurm::JobId) -> serde_json::Value {
    serde_json::from_slice(
        &std::fs::read(logdir.join(format!("job-{job}.json"))).expect("prolog's push report"),
    )
    .expect("report JSON")
}

/// Writes `dir/manifest.toml`: the layer `index` in the lab's store, the app's Python files
/// (`python_app(.., tag)`) urgent, the lab's network.
pub(crate) fn write_spec(lab: &Lab, dir: &Path, index: &str, tag: &str) -> PathBuf {
    let work = lab.work();
    let spec_path = dir.join("manifest.toml");
    std::fs::write(
        &spec_path,
        format!(
            "[layer]\nstore = {store:?}\nindex = {index:?}\n\
             [launch]\nurgent = [\"opt/app-{tag}/*.py\", \"opt/app-{tag}/*/*.py\"]\n\
             [nodes]\ngroup_size = {group}\nstrategy = \"topo\"\nlogin = \"login\"\n\
             [network]\nidentity = {id:?}\nhosts = {hosts:?}\nwait = \"all\"\n",
            store = work.join("store"),
            group = lab.layout().spec.group_size,
            id = work.join("cluster"),
            hosts = work.join("hosts"),
        ),
    )
    .expect("spec");
    spec_path
}

/// A lab of two groups of `group_size` nodes.
pub(crate) fn small_lab(group_size: usize) -> Lab {
    let spec = LabSpec {
        groups: 2,
        group_size,
        ..LabSpec::default()
    };
    Lab::up(&spec, &LabOptions::new(teesfs_bin())).expect("lab up")
}

#[test]
fn slurm_prolog_pushes_srun_teesfs_run_starts_the_app_everywhere_and_epilog_releases() {
    let _turn = crate::lab::lab_turn();
    if !can_lab() {
        return;
    }
    let lab = small_lab(2);
    let site = Site::new(&lab, false);
    let slurm = site.start(&lab);
    let (work, tmp, logdir) = (lab.work().to_path_buf(), &site.tmp, &site.logdir);
    let hosts = slurm.hosts().to_vec();
    let all = hosts.len().to_string();
    let tag = format!("slurm{}", std::process::id());
    let layer = tmp.path().join("layer");
    crate::run::python_app(&layer, &tag);
    let index = lab.publish(&layer).expect("publish");

    // The job spec a user would name with `sbatch --comment=teesfs:<spec>`.
    let spec_path = write_spec(&lab, tmp.path(), &index, &tag);

    // The job asks for its layer; slurmctld runs the prolog, and the job runs only once
    // the prolog has pushed the layer.
    let comment = format!("--comment=teesfs:{}", spec_path.display());
    let job = slurm.allocate_with(&[&comment]).unwrap_or_else(|e| {
        panic!(
            "allocation over all nodes, after the prolog: {e}\n{}",
            site.logs(&slurm)
        )
    });
    let report: serde_json::Value = serde_json::from_slice(
        &std::fs::read(logdir.join(format!("job-{job}.json"))).expect("prolog's push report"),
    )
    .expect("report JSON");
    assert_eq!(
        report["job"].as_str(),
        Some(job.0.to_string().as_str()),
        "the push used the Slurm job id, shown in decimal (issue 30 item 9): {report}"
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
    while hosts.iter().any(|h| jobs_on(&work, h) != 0) {
        assert!(
            std::time::Instant::now() < deadline,
            "the epilog did not release the job everywhere"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_released(&lab, &hosts);
    // slurmctld ran the EpilogSlurmctld: `teesfs learn` asked every node over the network.
    // The prolog waited for the whole layer, so the job read nothing while it arrived and
    // every node answers that it recorded nothing (the lab's launch and `it::learned` check
    // what a job that starts early teaches).
    let learn_log = logdir.join(format!("job-{job}.learn.log"));
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let said = loop {
        let said = std::fs::read_to_string(&learn_log).unwrap_or_default();
        if said.contains("learned ") {
            break said;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no EpilogSlurmctld log {}\n{}",
            learn_log.display(),
            site.logs(&slurm)
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    let merged = said.lines().any(|l| l.starts_with("learned "));
    for h in &hosts {
        assert!(
            merged || said.contains(&format!("skipped {h}: recorded nothing")),
            "{h} did not answer the EpilogSlurmctld's learn: {said}"
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

/// The sum of the bytes every edge carried in a push report.
fn edge_bytes(report: &serde_json::Value) -> u64 {
    report["edges"]
        .as_array()
        .expect("edges")
        .iter()
        .map(|e| e["bytes"].as_u64().unwrap_or(0))
        .sum()
}

/// How many jobs `host`'s daemon has (`usize::MAX` if it does not answer).
fn jobs_on(work: &Path, host: &str) -> usize {
    std::process::Command::new(teesfs_bin())
        .args(["status", "--json", "--control"])
        .arg(work.join(host).join("sock"))
        .output()
        .ok()
        .and_then(|o| serde_json::from_slice::<serde_json::Value>(&o.stdout).ok())
        .and_then(|v| v["jobs"].as_array().map(Vec::len))
        .unwrap_or(usize::MAX)
}

/// Every node's daemon has no job left and no job mounted (what the epilog leaves).
pub(crate) fn assert_released(lab: &Lab, hosts: &[String]) {
    for h in hosts {
        assert_eq!(
            jobs_on(lab.work(), h),
            0,
            "{h} still has a job after the epilog"
        );
        let pid = lab.daemon_pid(h).expect("daemon");
        let mounts = std::fs::read_to_string(format!("/proc/{pid}/mountinfo")).expect("mountinfo");
        assert!(
            !mounts.contains(&format!("{h}/jobs/")),
            "{h} still has a job mounted"
        );
    }
}

/// A user of this machine other than root, by name: (uid, gid).
fn user(name: &str) -> (u32, u32) {
    let u = nix::unistd::User::from_name(name)
        .expect("users")
        .unwrap_or_else(|| panic!("no user {name} on this machine"));
    (u.uid.as_raw(), u.gid.as_raw())
}

/// A directory `owner` owns, for one user's spec, job script and output.
fn user_dir(parent: &Path, name: &str, owner: (u32, u32)) -> PathBuf {
    let d = parent.join(name);
    std::fs::create_dir_all(&d).expect("mkdir");
    nix::unistd::chown(
        &d,
        Some(nix::unistd::Uid::from_raw(owner.0)),
        Some(nix::unistd::Gid::from_raw(owner.1)),
    )
    .expect("chown");
    d
}

fn chown_file(p: &Path, owner: (u32, u32)) {
    nix::unistd::chown(
        p,
        Some(nix::unistd::Uid::from_raw(owner.0)),
        Some(nix::unistd::Gid::from_raw(owner.1)),
    )
    .expect("chown");
}

#[test]
fn sbatch_teesfs_starts_every_task_inside_the_layer_on_all_32_nodes() {
    let _turn = crate::lab::lab_turn();
    if !can_lab() {
        return;
    }
    let lab = Lab::up(&LabSpec::default(), &LabOptions::new(teesfs_bin())).expect("lab up");
    let site = Site::new(&lab, true);
    let slurm = site.start(&lab);
    let tmp = site.tmp.path();
    let hosts = slurm.hosts().to_vec();
    assert_eq!(hosts.len(), 32, "the reference lab has 32 compute nodes");
    let n = hosts.len().to_string();
    let t = Duration::from_secs(180);

    let tag = format!("spank{}", std::process::id());
    let layer = tmp.join("layer");
    crate::run::python_app(&layer, &tag);
    let index = lab.publish(&layer).expect("publish");
    let spec = write_spec(&lab, tmp, &index, &tag);
    assert_eq!(spec, tmp.join("manifest.toml"));
    let job_sh = tmp.join("job.sh");
    std::fs::write(
        &job_sh,
        format!("#!/bin/sh\nsrun --label python3 /opt/app-{tag}/main.py\n"),
    )
    .expect("job.sh");

    // What a user types: one sbatch line, nothing wrapped.
    let out = tmp.join("job1.out");
    let args = [
        "-N",
        &n,
        "--teesfs=manifest.toml",
        "-o",
        "job1.out",
        "job.sh",
    ];
    let job1 = slurm.submit(tmp, &args, None).expect("sbatch --teesfs");
    let state = site.ended(&slurm, job1, t);
    let text = std::fs::read_to_string(&out).unwrap_or_default();
    assert_eq!(state, "COMPLETED", "{text}\n{}", site.logs(&slurm));
    let mut lines: Vec<&str> = text.lines().map(str::trim).collect();
    lines.sort();
    let mut want: Vec<String> = (0..hosts.len())
        .map(|i| format!("{i}: answer 42"))
        .collect();
    want.sort();
    assert_eq!(lines, want, "every task ran the app from the layer");
    let report1 = prolog_report(&site.logdir, job1);
    assert_eq!(report1["nodes"].as_u64(), Some(32), "{report1}");

    // The epilog released the job everywhere: no job, no mount.
    assert_released(&lab, &hosts);

    // A second job right after reuses the chunks the nodes hold.
    let job2 = slurm
        .submit(
            tmp,
            &[
                "-N",
                &n,
                "--teesfs=manifest.toml",
                "-o",
                "job2.out",
                "job.sh",
            ],
            None,
        )
        .expect("second sbatch");
    assert_eq!(site.ended(&slurm, job2, t), "COMPLETED");
    let text2 = std::fs::read_to_string(tmp.join("job2.out")).unwrap_or_default();
    assert_eq!(text2.lines().count(), 32, "{text2}");
    let report2 = prolog_report(&site.logdir, job2);
    let (b1, b2) = (edge_bytes(&report1), edge_bytes(&report2));
    assert!(
        b2 * 10 < b1,
        "the second push sent {b2} bytes over the tree against {b1} for the first: the nodes' \
         chunks were not reused"
    );

    // A plain job on the same nodes sees no layer.
    let plain = slurm
        .submit(
            tmp,
            &[
                "-N",
                &n,
                "-o",
                "plain.out",
                "--wrap",
                &format!("srun sh -c 'test -e /opt/app-{tag}/main.py && echo layer || echo plain'"),
            ],
            None,
        )
        .expect("plain sbatch");
    assert_eq!(site.ended(&slurm, plain, t), "COMPLETED");
    let text = std::fs::read_to_string(tmp.join("plain.out")).unwrap_or_default();
    assert_eq!(
        text.lines().filter(|l| l.trim() == "plain").count(),
        32,
        "a job without --teesfs saw a layer: {text}"
    );

    bench_sbatch_to_app(&lab, &site, &slurm, tmp);
    drop(slurm);
    lab.down().expect("lab down");
}

#[test]
fn two_users_jobs_on_the_same_nodes_each_see_only_their_own_layer() {
    let _turn = crate::lab::lab_turn();
    if !can_lab() {
        return;
    }
    let lab = small_lab(2);
    let site = Site::new(&lab, true);
    let slurm = site.start(&lab);
    let tmp = site.tmp.path();
    let n = slurm.hosts().len();
    let t = Duration::from_secs(180);
    // Where the two jobs tell each other they run: writable by both users.
    let meet = tmp.join("meet");
    std::fs::create_dir_all(&meet).expect("meet dir");
    std::fs::set_permissions(&meet, std::os::unix::fs::PermissionsExt::from_mode(0o1777))
        .expect("chmod");
    let tag = format!("users{}", std::process::id());
    let users = [("nobody", user("nobody")), ("daemon", user("daemon"))];
    let mut jobs = Vec::new();
    for (i, (name, id)) in users.iter().enumerate() {
        let dir = user_dir(tmp, name, *id);
        let utag = format!("{tag}{name}");
        let ulayer = tmp.join(format!("layer-{name}"));
        crate::run::python_app(&ulayer, &utag);
        let uindex = lab.publish(&ulayer).expect("publish");
        let uspec = write_spec(&lab, &dir, &uindex, &utag);
        chown_file(&uspec, *id);
        let other = users[1 - i].0;
        // Each job waits (bounded) until the other runs, so they overlap on every node.
        let script = dir.join("job.sh");
        std::fs::write(
            &script,
            format!(
                "#!/bin/sh\ntouch {m}/started-{name}\ni=0\n\
                 while [ ! -e {m}/started-{other} ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done\n\
                 test -e {m}/started-{other} && echo overlapped\n\
                 srun -n {n} --ntasks-per-node=1 sh -c 'echo $(id -u) $(ls -d /opt/app-* | tr \"\\n\" \" \")'\n",
                m = meet.display(),
            ),
        )
        .expect("job script");
        chown_file(&script, *id);
        let j = slurm
            .submit(
                &dir,
                &[
                    "-N",
                    &n.to_string(),
                    "-n",
                    &n.to_string(),
                    "--teesfs=manifest.toml",
                    "-o",
                    "out",
                    "job.sh",
                ],
                Some(*id),
            )
            .unwrap_or_else(|e| panic!("sbatch as {name}: {e}"));
        jobs.push((j, dir, utag, id.0));
    }
    for (j, dir, utag, uid) in &jobs {
        let state = site.ended(&slurm, *j, t);
        let text = std::fs::read_to_string(dir.join("out")).unwrap_or_default();
        assert_eq!(state, "COMPLETED", "{text}\n{}", site.logs(&slurm));
        let mut lines = text.lines();
        assert_eq!(
            lines.next(),
            Some("overlapped"),
            "the two jobs did not run at the same time: {text}\n{}",
            site.logs(&slurm)
        );
        let lines: Vec<&str> = lines.collect();
        assert_eq!(lines.len(), n, "{text}");
        for l in lines {
            assert_eq!(
                l.trim(),
                format!("{uid} /opt/app-{utag}"),
                "a task of uid {uid} saw another layer, or ran as someone else"
            );
        }
    }
    let owners: Vec<(lab::slurm::JobId, u32)> = jobs.iter().map(|j| (j.0, j.3)).collect();
    assert_each_reads_only_their_own(&site.logdir, &owners);
    drop(slurm);
    lab.down().expect("lab down");
}

/// Issue 30 item 2: each job's owner may read its own prolog log and push report (an ACL
/// entry), and not the other user's (`jobs`: two jobs and their owners' uids).
fn assert_each_reads_only_their_own(logdir: &Path, jobs: &[(lab::slurm::JobId, u32)]) {
    let reads = |uid: u32, path: &Path| {
        use std::os::unix::process::CommandExt;
        std::process::Command::new("head")
            .args(["-c", "1"])
            .arg(path)
            .uid(uid)
            .gid(uid)
            .output()
            .is_ok_and(|o| o.status.success())
    };
    for (i, (j, uid)) in jobs.iter().enumerate() {
        let other = jobs[1 - i].0;
        for ext in ["log", "json"] {
            let own = logdir.join(format!("job-{j}.{ext}"));
            assert!(reads(*uid, &own), "uid {uid} cannot read {}", own.display());
            let theirs = logdir.join(format!("job-{other}.{ext}"));
            assert!(!reads(*uid, &theirs), "uid {uid} read {}", theirs.display());
        }
    }
}

/// The launch benchmark (BENCHMARKS.md, `bash scripts/bench-slurm.sh`): from `sbatch` to
/// the application having run on every node, with --teesfs against the same job whose
/// script copies the layer the way sites do today (a tarball by `sbcast`, untarred on
/// every node). Printed, not asserted: timing claims are benchmarks.
fn bench_sbatch_to_app(lab: &Lab, site: &Site, slurm: &lab::slurm::Slurm<'_>, tmp: &Path) {
    let n = slurm.hosts().len().to_string();
    let t = Duration::from_secs(180);
    let (bdir, tarball) = write_bench_jobs(lab, slurm, tmp);
    let mut seconds = Vec::new();
    for (method, extra) in [("teesfs", "--teesfs=manifest.toml"), ("sbcast", "")] {
        let script = format!("{method}.sh");
        let out = format!("{method}.out");
        let mut args = vec!["-N", &n, "-o", &out];
        if !extra.is_empty() {
            args.push(extra);
        }
        args.push(&script);
        let submitted = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock")
            .as_secs_f64();
        let job = slurm.submit(&bdir, &args, None).expect("sbatch");
        assert_eq!(site.ended(slurm, job, t), "COMPLETED", "{method}");
        let text = std::fs::read_to_string(bdir.join(&out)).unwrap_or_default();
        let started: Vec<f64> = text.lines().filter_map(|l| l.trim().parse().ok()).collect();
        assert_eq!(started.len(), 32, "{method}: {text}");
        let last = started.iter().cloned().fold(f64::MIN, f64::max);
        seconds.push(last - submitted);
    }
    println!(
        "BENCH sbatch-to-app 32 nodes, layer {} MiB: teesfs {:.2} s, sbcast+untar {:.2} s, \
         ratio {:.2}x",
        (std::fs::metadata(&tarball).expect("tarball").len() >> 20),
        seconds[0],
        seconds[1],
        seconds[1] / seconds[0]
    );
}

/// The benchmark's two jobs in `tmp/bench`, answered with the directory and the layer's
/// tarball: `teesfs.sh` (with a spec that starts the job once every node holds the urgent
/// set) and `sbcast.sh` (copying the tarball). A fresh layer with 32 MiB that the
/// application never reads, so nothing is held from earlier jobs.
fn write_bench_jobs(lab: &Lab, slurm: &lab::slurm::Slurm<'_>, tmp: &Path) -> (PathBuf, PathBuf) {
    let btag = format!("bench{}", std::process::id());
    let blayer = tmp.join("layer-bench");
    crate::run::python_app(&blayer, &btag);
    std::fs::write(
        blayer.join(format!("opt/app-{btag}/unused/big.bin")),
        crate::util::noise(32 << 20, u64::from(std::process::id())),
    )
    .expect("big file");
    let bindex = lab.publish(&blayer).expect("publish");
    let bdir = tmp.join("bench");
    std::fs::create_dir_all(&bdir).expect("bench dir");
    let bspec = write_spec(lab, &bdir, &bindex, &btag);
    // The job starts once every node holds the urgent set (the prolog's default).
    let text = std::fs::read_to_string(&bspec).expect("spec");
    std::fs::write(&bspec, text.replace("wait = \"all\"", "wait = \"urgent\"")).expect("spec");
    std::fs::write(
        bdir.join("teesfs.sh"),
        format!(
            "#!/bin/sh\nsrun sh -c 'python3 /opt/app-{btag}/main.py >/dev/null && date +%s.%N'\n"
        ),
    )
    .expect("job script");
    let tarball = bdir.join("layer.tar");
    let tar = std::process::Command::new("tar")
        .arg("-cf")
        .arg(&tarball)
        .arg("-C")
        .arg(&blayer)
        .arg(".")
        .status()
        .expect("tar");
    assert!(tar.success());
    let local = slurm.local_dir();
    std::fs::write(
        bdir.join("sbcast.sh"),
        format!(
            "#!/bin/sh\nset -e\nsbcast -f {tarball} {local}/layer-$SLURM_JOB_ID.tar\n\
             srun sh -c 'd={local}/layer-$SLURM_JOB_ID && mkdir -p $d && tar -xf $d.tar -C $d \
             && cd $d/opt/app-{btag} && PYTHONPATH=lib0:lib1:lib2:. python3 main.py >/dev/null \
             && date +%s.%N'\n",
            tarball = tarball.display(),
            local = local.display(),
        ),
    )
    .expect("sbcast script");
    (bdir, tarball)
}

/// The newest push log of the lab (what `teesfs push` printed).
fn last_push_log(lab: &Lab) -> String {
    let dir = lab.work().join("reports");
    let newest = std::fs::read_dir(&dir)
        .expect("reports")
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "log"))
        .max_by_key(|e| e.metadata().and_then(|m| m.modified()).ok());
    newest
        .map(|e| std::fs::read_to_string(e.path()).unwrap_or_default())
        .unwrap_or_default()
}

/// Issue 14: a proxy outside the job is borrowed only if Slurm reports it idle at push
/// time, it is held (drained, the reason naming the push) while the push relays through it,
/// and it is resumed when the push ends. A proxy running another job is not borrowed.
#[test]
fn a_proxy_is_borrowed_only_when_slurm_reports_it_idle_and_is_held_until_the_push_ends() {
    let _turn = crate::lab::lab_turn();
    if !can_lab() {
        return;
    }
    let lab = small_lab(4);
    let slurm = lab.start_slurm().expect("Slurm in the lab");
    let hosts = slurm.hosts().to_vec();
    assert_eq!(hosts.len(), 8);
    let (proxy, members) = (hosts[4].clone(), hosts[5..].join(","));
    let tmp = tempfile::tempdir().expect("tempdir");
    let layer = tmp.path().join("layer");
    crate::run::python_app(&layer, &format!("borrow{}", std::process::id()));
    let index = lab.publish(&layer).expect("publish");
    let push = || {
        let mut o = lab::PushOptions::new(&index);
        o.nodes = Some(members.clone());
        o.extra = vec!["--cluster".into(), hosts.join(","), "--borrow-idle".into()];
        o.env = vec![("SLURM_CONF".into(), slurm.conf().display().to_string())];
        lab.push(&o).expect("push with --borrow-idle")
    };
    let node_state = |h: &str| -> String {
        let out = slurm
            .run("scontrol", &["show", "node", h], Duration::from_secs(10))
            .expect("scontrol show node");
        out.split_whitespace()
            .find_map(|f| f.strip_prefix("State="))
            .unwrap_or_default()
            .to_string()
    };

    // The group's proxy is idle: borrowed, drained for the push, resumed after it.
    let run = push();
    assert_eq!(
        run.report.nodes, 4,
        "the tree is the group's three members and their borrowed proxy"
    );
    let log = last_push_log(&lab);
    assert!(
        log.contains(&format!("borrowing idle proxies {proxy}")),
        "the idle proxy {proxy} was not borrowed: {log}"
    );
    let ctld = std::fs::read_to_string(slurm.dir().join("ctld/slurmctld.log")).unwrap_or_default();
    assert!(
        ctld.contains("teesfs push") && ctld.contains(&proxy),
        "slurmctld never saw the proxy drained for the push"
    );
    let state = node_state(&proxy);
    assert!(
        state.starts_with("IDLE") && !state.contains("DRAIN"),
        "{proxy} was left {state} after the push"
    );

    // Another job runs on the proxy: not borrowed, and left as it is.
    let busy = slurm
        .submit(
            tmp.path(),
            &[
                "-w",
                &proxy,
                "-N",
                "1",
                "--exclusive",
                "--wrap",
                "sleep 300",
            ],
            None,
        )
        .expect("a job on the proxy");
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while slurm.job_state(busy).expect("state") != "RUNNING" {
        assert!(std::time::Instant::now() < deadline, "the job never ran");
        std::thread::sleep(Duration::from_millis(100));
    }
    let run = push();
    assert_eq!(run.report.nodes, 3, "the tree is the three members alone");
    let log = last_push_log(&lab);
    assert!(
        !log.contains("borrowing idle proxies"),
        "a proxy running another job was borrowed: {log}"
    );
    let state = node_state(&proxy);
    assert!(
        state.starts_with("ALLOCATED") && !state.contains("DRAIN"),
        "{proxy} is {state}: the push touched a node running another job"
    );
    slurm.cancel(busy).expect("scancel");
    drop(slurm);
    lab.down().expect("lab down");
}

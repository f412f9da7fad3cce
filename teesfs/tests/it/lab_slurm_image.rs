//! A real Slurm image job (issue 34 item 2): in the site lab (slurmctld, slurmd and the
//! SPANK plugin as a site runs them), the lab's unprivileged user types
//! `sbatch -N 4 --teesfs-image=manifest.toml job.sh`, and every `srun` task of the job, on
//! every node, runs with the image as its whole root: the image's files, none of the
//! node's, the user's home from the node, the image's `Env`, the working directory by
//! pyxis's rules, as the user. A spec saying `image = true` under `[layer]`, with plain
//! `--teesfs`, does the same. The batch script itself stays on the node (it runs `srun`,
//! which the image need not have).
//!
//! The other ways users start the same job, in the same lab: a bare `srun` (its own
//! allocation, no batch script), `sbatch --export=NONE` (the submitting environment stays
//! behind), and `salloc` running `srun` or a script that does; each with the option and
//! with the spec's `image = true`.
//!
//! The image is an OCI image built here with `umoci` and published with
//! `teesfs publish --image`, so its config travels in the signed index and the plugin gets
//! it from each node's daemon (plugstack's `control=`).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use lab::slurm::JobId;
use lab::slurm::site::SiteSlurm;
use lab::{Lab, LabOptions, LabSpec};

use crate::lab::can_lab;
use crate::util::{spank_plugin, teesfs_bin};

/// What only the image has.
const MARKER: &str = "only-in-the-image";
/// A file every lab node has on its "/" and the image does not.
const HOST_ONLY: &str = "/etc/debian_version";
/// What the image's `Env` sets.
const IMAGE_VAR: &str = "from-the-image";
/// What the user keeps in their home on the node.
const HOME_NOTE: &str = "in-the-users-home";

/// What each task says it sees, one line (`{host_only}`: [`HOST_ONLY`]).
const TASK: &str = r#"echo "task $(cat /proc/sys/kernel/hostname)" \
 "marker=$(cat /etc/image-marker 2>/dev/null)" \
 "host=$(if test -e {host_only}; then echo seen; else echo absent; fi)" \
 "home=$(cat "$HOME/note" 2>/dev/null)" "img=$IMG_VAR" "uid=$(id -u)" "cwd=$(pwd)""#;

/// The job: says where the batch script runs, changes to the directory given (if any),
/// and has one task per node say what it sees ([`TASK`] as `{task}`).
const JOB: &str = r#"#!/bin/sh
if test -e /etc/image-marker; then echo "batch in-image"; else echo "batch on-node"; fi
cd "${1:-.}" || exit 3
srun --ntasks-per-node=1 /bin/sh -c '{task}'
"#;

/// [`TASK`] for this machine.
fn task() -> String {
    TASK.replace("{host_only}", HOST_ONLY)
}

/// A small OCI image (`sh`, `cat`, `id` with their libraries, `/etc/image-marker`, `/wd`)
/// with `Env` and `WorkingDir`, published into the lab's store with `publish --image`;
/// its index id.
fn publish_image(lab: &Lab, dir: &Path) -> String {
    let root = dir.join("root");
    for d in ["bin", "etc", "wd"] {
        std::fs::create_dir_all(root.join(d)).expect("image dir");
    }
    for b in ["sh", "cat", "id"] {
        crate::run_image::copy_program(&root, b);
    }
    std::fs::write(root.join("etc/image-marker"), format!("{MARKER}\n")).expect("marker");
    std::fs::write(root.join("etc/passwd"), "root:x:0:0:root:/root:/bin/sh\n").expect("passwd");
    crate::run_image::build_oci(
        dir,
        &root,
        &format!(
            "--config.env IMG_VAR={IMAGE_VAR} --config.env PATH=/bin --config.env HOME=/root \
             --config.workingdir /wd"
        ),
    );
    let work = lab.work();
    let out = Command::new(teesfs_bin())
        .arg("publish")
        .arg("--image")
        .arg(dir.join("oci"))
        .arg("--store")
        .arg(work.join("store"))
        .arg("--key")
        .arg(work.join("publisher.key"))
        .args(["--quiet", "--format", "json"])
        .output()
        .expect("teesfs publish");
    assert!(out.status.success(), "publish --image: {out:?}");
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("publish JSON");
    doc["index"].as_str().expect("the index id").to_string()
}

/// Submits `job.sh ARGS` as the lab user from their home over every node, with `extra`
/// sbatch options; the job id.
fn submit(site: &SiteSlurm<'_>, extra: &[&str], args: &[&str]) -> JobId {
    let user = &site.user;
    let n = site.slurm.hosts().len().to_string();
    let mut all = vec!["-N", &n];
    all.extend_from_slice(extra);
    all.extend_from_slice(&["-o", "job-%j.out", "-e", "job-%j.err", "job.sh"]);
    all.extend_from_slice(args);
    site.slurm
        .submit(&user.home, &all, Some((user.uid, user.gid)))
        .unwrap_or_else(|e| panic!("sbatch {extra:?}: {e}"))
}

/// Runs `ARGS` (`srun ...`, `salloc ...`) on the login node as the lab user from their
/// home, as they would type it (their `HOME`, `USER` and `LOGNAME`), killed after two
/// minutes; its output.
fn interactive(site: &SiteSlurm<'_>, args: &[&str]) -> std::process::Output {
    let user = &site.user;
    let mut c = site.slurm.client("timeout");
    c.args(["120", "setpriv"])
        .arg(format!("--reuid={}", user.uid))
        .arg(format!("--regid={}", user.gid))
        .args(["--clear-groups", "--"])
        .args(args)
        .current_dir(&user.home)
        .env("HOME", &user.home)
        .env("USER", &user.name)
        .env("LOGNAME", &user.name)
        .stdin(std::process::Stdio::null());
    c.output().unwrap_or_else(|e| panic!("{args:?}: {e}"))
}

/// What went on, for a failure message: the job's stderr, the controller's and the
/// seeder's job logs, and what the first nodes' slurmd said about teesfs.
fn logs(site: &SiteSlurm<'_>, job: JobId) -> String {
    let read = |p: PathBuf| std::fs::read_to_string(p).unwrap_or_default();
    let err = read(site.user.home.join(format!("job-{job}.err")));
    let ctl = read(site.ctl_log().join(format!("job-{job}.log")));
    let seeder = read(site.seeder_log().join(format!("job-{job}.log")));
    let mut nodes = String::new();
    for h in site.slurm.hosts().iter().take(2) {
        let log = read(site.slurm.dir().join("nodes").join(h).join("slurmd.log"));
        let said: Vec<&str> = log
            .lines()
            .filter(|l| l.contains("error") || l.contains("teesfs"))
            .rev()
            .take(20)
            .collect();
        nodes.push_str(&format!("\nslurmd {h}: {said:#?}"));
    }
    format!("job stderr:\n{err}\ncontroller job log:\n{ctl}\nseeder job log:\n{seeder}{nodes}")
}

/// Waits for `job` and checks its output ([`assert_tasks_in_the_image`]).
fn assert_ran_in_the_image(site: &SiteSlurm<'_>, job: JobId, cwd: &Path, what: &str) {
    let state = site
        .slurm
        .wait_ended(job, Duration::from_secs(90))
        .unwrap_or_else(|e| panic!("{what}: job {job}: {e}\n{}", logs(site, job)));
    let user = &site.user;
    let out = std::fs::read_to_string(user.home.join(format!("job-{job}.out"))).unwrap_or_default();
    assert_eq!(state, "COMPLETED", "{what}: {out}\n{}", logs(site, job));
    assert_tasks_in_the_image(
        site,
        &out,
        Some("batch on-node"),
        cwd,
        &|| logs(site, job),
        what,
    );
}

/// Checks what a job printed: `first` (where its script ran) if given, then one line per
/// node from a task inside the image, started in `cwd`; `logs` says what went on.
fn assert_tasks_in_the_image(
    site: &SiteSlurm<'_>,
    out: &str,
    first: Option<&str>,
    cwd: &Path,
    logs: &dyn Fn() -> String,
    what: &str,
) {
    let mut lines: Vec<&str> = out.lines().map(str::trim).collect();
    if let Some(first) = first {
        assert_eq!(
            lines.first().copied(),
            Some(first),
            "{what}: the script runs on the node (it runs srun): {out}"
        );
        lines.remove(0);
    }
    lines.sort();
    let user = &site.user;
    let want: Vec<String> = (site.slurm.hosts().iter())
        .map(|h| {
            format!(
                "task {h} marker={MARKER} host=absent home={HOME_NOTE} img={IMAGE_VAR} uid={} \
                 cwd={}",
                user.uid,
                cwd.display()
            )
        })
        .collect();
    assert_eq!(
        lines,
        want,
        "{what}: on every node, a task sees the image's files and not the node's, the \
         user's home from the node, the image's Env, starts where pyxis's rules say, and \
         runs as the user\n{}",
        logs()
    );
}

/// `ARGS` started by the user on the login node ran every task in the image, from their
/// home; `first` is what a script run by `salloc` prints before its tasks.
fn assert_interactive_in_the_image(site: &SiteSlurm<'_>, args: &[&str], first: Option<&str>) {
    let t0 = std::time::Instant::now();
    let out = interactive(site, args);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    let task = task();
    let shown: Vec<&str> = (args.iter())
        .map(|a| if *a == task { "TASK" } else { a })
        .collect();
    let what = shown.join(" ");
    let logs = || {
        let show = ["show", "job", "-o"];
        let jobs = (site.slurm.run("scontrol", &show, Duration::from_secs(30))).unwrap_or_default();
        let last = (jobs.split_whitespace())
            .filter_map(|w| w.strip_prefix("JobId=")?.parse().ok())
            .max();
        let more = last.map(|j| logs(site, JobId(j))).unwrap_or_default();
        format!("stderr:\n{stderr}\njobs:\n{jobs}\n{more}")
    };
    assert!(out.status.success(), "{what}: {stdout}\n{}", logs());
    assert_tasks_in_the_image(site, &stdout, first, &site.user.home, &logs, &what);
    eprintln!("{what}: every task in the image after {:?}", t0.elapsed());
}

/// The ways a user starts an image job without a plain `sbatch`: a bare `srun`, `sbatch
/// --export=NONE`, and `salloc` running `srun` or a script that runs it; each with
/// `--teesfs-image` and with the spec's `image = true` (`--teesfs=image.toml`).
fn other_starts(site: &SiteSlurm<'_>) {
    let n = site.slurm.hosts().len().to_string();
    let task = task();
    for spec in ["--teesfs-image=manifest.toml", "--teesfs=image.toml"] {
        // srun allocates the job itself: no batch script, no salloc.
        let srun = [
            "srun",
            "-N",
            &n,
            "--ntasks-per-node=1",
            spec,
            "/bin/sh",
            "-c",
            &task,
        ];
        assert_interactive_in_the_image(site, &srun, None);
        // Only SLURM_* variables reach the job.
        let job = submit(site, &["--export=NONE", spec], &[]);
        assert_ran_in_the_image(site, job, &site.user.home, &format!("--export=NONE {spec}"));
        // salloc runs the command on the login node, in the allocation.
        let salloc = ["salloc", "-N", &n, spec, "srun", "--ntasks-per-node=1"];
        let salloc: Vec<&str> = salloc.into_iter().chain(["/bin/sh", "-c", &task]).collect();
        assert_interactive_in_the_image(site, &salloc, None);
        let script = ["salloc", "-N", &n, spec, "./job.sh"];
        assert_interactive_in_the_image(site, &script, Some("batch on-node"));
    }
}

#[test]
fn image_jobs_run_every_task_in_the_image_on_every_node_from_sbatch_srun_and_salloc() {
    let _turn = crate::lab::lab_turn();
    if !can_lab() {
        return;
    }
    assert!(
        Path::new(HOST_ONLY).is_file(),
        "the test tells the node's \"/\" by {HOST_ONLY}"
    );
    let spec = LabSpec {
        groups: 2,
        group_size: 2,
        ..LabSpec::default()
    };
    let lab = Lab::up(&spec, &LabOptions::new(teesfs_bin())).expect("lab up");
    let site = lab
        .start_site_slurm(&spank_plugin())
        .expect("site Slurm (scripts/deps.sh installs munge, slurmctld, slurmd)");
    let build = tempfile::tempdir().expect("tempdir");
    let index = publish_image(&lab, build.path());
    let user = &site.user;
    let layer = format!("[layer]\nindex = {index:?}\n");
    let launch = "[launch]\nurgent = [\"bin/*\", \"etc/*\"]\n";
    (user.write("manifest.toml", &format!("{layer}{launch}"))).expect("spec");
    (user.write("image.toml", &format!("{layer}image = true\n{launch}"))).expect("spec");
    user.write("note", &format!("{HOME_NOTE}\n")).expect("note");
    let job = user
        .write("job.sh", &JOB.replace("{task}", &task()))
        .expect("job.sh");
    std::fs::set_permissions(&job, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("chmod");

    // What a user types: from their home, which the image view has, so the tasks start
    // there.
    let by_option = submit(&site, &["--teesfs-image=manifest.toml"], &[]);
    assert_ran_in_the_image(&site, by_option, &user.home, "--teesfs-image");
    // The spec says it is an image; the tasks start in a directory of the node the image
    // lacks: they start in the image's WorkingDir.
    let by_spec = submit(&site, &["--teesfs=image.toml"], &["/usr/share"]);
    assert_ran_in_the_image(&site, by_spec, Path::new("/wd"), "[layer] image = true");
    other_starts(&site);
    drop(build);
    drop(site);
    lab.down().expect("lab down");
}

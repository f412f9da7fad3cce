//! The urgent set of an image (issue 34 item 3): `teesfs record --image` runs the image's
//! Entrypoint and Cmd (or a given command) as `teesfs run --image` does, the image as the
//! whole root with its Env and WorkingDir, and lists what it opened by its paths in the
//! image; a job run in an image teaches the learned urgent set as a layer's job does, and
//! the next push of the index sends those files first. An index with nothing to run is
//! refused with what to do.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use crate::cluster::Cluster;
use crate::learned::{JOB, entries, learn, learned_file, push_to, release, report};
use crate::run_image::{copy_program, publish_oci};
use crate::util::{Workspace, can_mount, noise, teesfs_bin};

/// The data files the image's entrypoint reads (its Cmd), of the ten it has, in order.
const READ: [&str; 3] = ["f3", "f7", "f1"];

/// The image's config: `/app/start.sh` reads the files its arguments name from `$DATA`
/// (the image's Env), starting in its WorkingDir.
const CONFIG: &str = "--config.entrypoint /bin/sh --config.entrypoint /app/start.sh \
    --config.cmd f3 --config.cmd f7 --config.cmd f1 --config.env DATA=/data \
    --config.env PATH=/bin --config.workingdir /app";

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The image's root: a shell with its libraries, `/etc/passwd`, the entrypoint's script,
/// ten small data files `/data/f0`..`f9` and 6 MiB in `/data/big.bin` that nothing reads
/// (so a rate-limited push is still on its way when a job starts).
fn image_root(ws: &Workspace) -> PathBuf {
    let root = ws.path().join("image");
    for d in ["bin", "etc", "app", "data"] {
        std::fs::create_dir_all(root.join(d)).expect("image dir");
    }
    copy_program(&root, "sh");
    std::fs::write(root.join("etc/passwd"), "root:x:0:0:root:/root:/bin/sh\n").expect("passwd");
    std::fs::write(
        root.join("app/start.sh"),
        "for f in \"$@\"; do read -r line < \"$DATA/$f\"; echo \"$line\"; done; pwd\n",
    )
    .expect("script");
    for i in 0..10 {
        std::fs::write(root.join(format!("data/f{i}")), format!("data {i}\n")).expect("data");
    }
    std::fs::write(root.join("data/big.bin"), noise(6 << 20, 11)).expect("big");
    root
}

/// `teesfs record --image ID ARGS`, as root, from a directory the image does not have.
fn record(ws: &Workspace, id: &str, list: &Path, args: &[&str]) -> Output {
    // Its own TMPDIR, so that this test's mounts are told from other tests' ones.
    let tmp = ws.path().join("tmp");
    std::fs::create_dir_all(&tmp).expect("tmp");
    Command::new(teesfs_bin())
        .args(["record", "--image", id, "--store"])
        .arg(ws.store())
        .arg("--trust")
        .arg(ws.pubkey())
        .arg("-o")
        .arg(list)
        .args(args)
        .env_clear()
        .env("HOME", "/root")
        .env("TMPDIR", &tmp)
        .current_dir("/var")
        .output()
        .expect("teesfs record")
}

/// Checks that the list's files are exactly the image's program files (each a path in the
/// image, so in `root`) and, of the data files, exactly `read` in that order.
fn assert_recorded(list: &Path, root: &Path, read: &[&str]) {
    let (files, _) = entries(list);
    let data: Vec<&str> = files
        .iter()
        .filter_map(|f| f.strip_prefix("data/"))
        .collect();
    assert_eq!(data, read, "the data files read, in order: {files:?}");
    for f in ["bin/sh", "app/start.sh"] {
        assert!(files.iter().any(|l| l == f), "{f} not in {files:?}");
    }
    for f in &files {
        assert!(
            !f.starts_with('/') && root.join(f).is_file(),
            "{f} is not a file's path in the image: {files:?}"
        );
    }
}

#[test]
fn record_image_lists_what_the_entrypoint_opens_by_its_paths_in_the_image() {
    if !can_mount() {
        return;
    }
    let ws = Workspace::new();
    let root = image_root(&ws);
    let id = publish_oci(&ws, &root, CONFIG, &[]);
    let list = ws.path().join("urgent.list");

    // No command: the image's Entrypoint and Cmd, with its Env, in its WorkingDir.
    let out = record(&ws, &id, &list, &[]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    assert!(
        stdout.starts_with("data 3\ndata 7\ndata 1\n/app\n"),
        "the entrypoint ran in the image with its Env and WorkingDir: {stdout}"
    );
    assert_recorded(&list, &root, &READ);
    let listed = std::fs::read_to_string(&list).expect("list");
    assert!(
        listed.contains("of `/bin/sh /app/start.sh f3 f7 f1` in image index"),
        "{listed}"
    );

    // A given command instead.
    let out = record(
        &ws,
        &id,
        &list,
        &["--", "/bin/sh", "/app/start.sh", "f9", "f2"],
    );
    assert!(out.status.success(), "{out:?}");
    assert_recorded(&list, &root, &["f9", "f2"]);

    // Published with the list, the index's urgent set is those files.
    let out = ws.teesfs(&[
        "publish",
        "--image",
        ws.path().join("oci").to_str().expect("utf8"),
        "--store",
        ws.store().to_str().expect("utf8"),
        "--key",
        ws.key().to_str().expect("utf8"),
        "--quiet",
        "--format",
        "json",
        "--urgent-list",
        list.to_str().expect("utf8"),
    ]);
    assert!(out.status.success(), "{out:?}");
    let published: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let (files, _) = entries(&list);
    assert_eq!(published["urgent_entries"], files.len(), "{published}");
}

#[test]
fn record_image_of_an_index_with_nothing_to_run_says_to_give_the_command() {
    if !can_mount() {
        return;
    }
    let ws = Workspace::new();
    let layer = ws.path().join("layer");
    std::fs::create_dir_all(&layer).expect("layer");
    std::fs::write(layer.join("file"), "x").expect("file");
    let id = ws.publish(&layer);
    let list = ws.path().join("urgent.list");
    let out = record(&ws, &id, &list, &[]);
    assert!(!out.status.success(), "{out:?}");
    let err = text(&out.stderr);
    assert!(
        err.contains(&format!("index {id} is not an image"))
            && err.contains("no Entrypoint or Cmd")
            && err.contains(&format!("teesfs record --image {id} --store DIR -- CMD")),
        "{err}"
    );
    assert!(!list.exists(), "a list was written");
    // An image whose config has neither.
    let image = publish_oci(&ws, &layer, "--config.env A=b", &[]);
    let out = record(&ws, &image, &list, &[]);
    assert!(!out.status.success(), "{out:?}");
    let err = text(&out.stderr);
    assert!(
        err.contains("is an image without an Entrypoint or Cmd: give the command to record"),
        "{err}"
    );
    assert!(!list.exists(), "a list was written");
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").expect("mountinfo");
    let tmp = ws.path().join("tmp");
    assert!(
        !mounts.contains(tmp.to_str().expect("utf8")),
        "a mount was left behind under {}",
        tmp.display()
    );
}

/// A job run in an image (`run --image` of the job's mount, as a Slurm task of an image
/// job runs) while its layer arrives: its node records what the entrypoint opens, `learn`
/// merges it by the image's paths, and the next push of the index sends those files first.
#[test]
fn a_job_run_in_an_image_teaches_the_learned_urgent_set() {
    if !can_mount() {
        return;
    }
    let c = Cluster::start(1, |_| Vec::new());
    let root = image_root(&c.ws);
    let id = publish_oci(&c.ws, &root, CONFIG, &["--chunk-size", "1MiB"]);
    let push = c
        .push_cmd(
            &id,
            1,
            &["--job", JOB, "--rate-limit", "1MiB", "--format", "json"],
        )
        .stdout(Stdio::piped())
        .spawn()
        .expect("push");
    let mounted = c.mount_of(0);
    let status = c.status(0);
    assert_eq!(
        status["jobs"][0]["image"]["entrypoint"],
        serde_json::json!(["/bin/sh", "/app/start.sh"]),
        "the job is an image's: {status}"
    );
    let out = Command::new(teesfs_bin())
        .args(["run", "--image", "--job", JOB, "--mount-root"])
        .arg(mounted.parent().expect("the jobs' directory"))
        .arg("--control")
        .arg(c.nodes[0].control())
        .env_clear()
        .env("HOME", "/root")
        .current_dir("/var")
        .output()
        .expect("teesfs run");
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    assert_eq!(stdout, "data 3\ndata 7\ndata 1\n/app\n");
    // A Slurm task of the job (`--teesfs-image`) reads one more.
    assert_eq!(read_as_a_slurm_task(&c, &mounted, "f5"), "data 5\n");
    assert!(
        c.status(0)["jobs"][0]["all_s"].is_null(),
        "the layer had arrived before the job ran, so this tests nothing"
    );
    let first = report(&push.wait_with_output().expect("push"));
    assert_eq!(first["learned_files"], 0, "{first}");

    release(&c, 0);
    let out = learn(&c, "n01", &[]);
    assert!(out.status.success(), "{out:?}");
    let list = learned_file(&c);
    assert!(list.ends_with(format!("learned/{id}.list")), "{list:?}");
    assert_recorded(&list, &root, &["f3", "f7", "f1", "f5"]);

    let (files, _) = entries(&list);
    let next = report(&push_to(&c, &id, "n01", &["--job", "4243"]));
    assert_eq!(next["learned_files"], files.len(), "{next}");
    assert!(
        next["urgent_chunks"].as_u64().is_some_and(|n| n > 0),
        "{next}"
    );
}

/// Reads `/data/NAME` in the image of the job mounted at `layer` as a Slurm task of an image
/// job does: `teesfs __task-env --image` (the SPANK plugin's helper) builds the task's root
/// from the job's mount, and the task's command runs in that mount namespace.
fn read_as_a_slurm_task(c: &Cluster, layer: &Path, name: &str) -> String {
    use std::io::BufRead;
    let mut helper = Command::new(teesfs_bin())
        .args(["__task-env", "--image"])
        .arg(c.nodes[0].control())
        .arg(layer)
        .arg("0")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("teesfs __task-env");
    let said = std::io::BufReader::new(helper.stdout.take().expect("stdout"));
    let lines: Vec<String> = said
        .lines()
        .map_while(Result::ok)
        .take_while(|l| l != "ready")
        .collect();
    assert!(
        lines.iter().any(|l| l.starts_with("env-set ")),
        "the image's Env: {lines:?}"
    );
    let out = Command::new("nsenter")
        .arg(format!("--mount=/proc/{}/ns/mnt", helper.id()))
        .args([
            "/bin/sh",
            "-c",
            &format!("read -r l < /data/{name}; echo \"$l\""),
        ])
        .env_clear()
        .output()
        .expect("nsenter");
    // Closing its input lets the helper exit (as the plugin does once it joined).
    drop(helper.stdin.take());
    assert!(helper.wait().expect("helper").success());
    assert!(out.status.success(), "{out:?}");
    text(&out.stdout)
}

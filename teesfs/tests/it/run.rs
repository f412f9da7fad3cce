//! `teesfs run`: the execution environment. A command sees the layer (a real FUSE mount)
//! over the host's "/", its writes stay in a tmpfs, a setuid file gives no privilege, the
//! exit status and signals pass through, and nothing stays mounted. On the login node,
//! `--upper DIR` captures installs and deletions, which publish and push carry to every node.

use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::cluster::Cluster;
use crate::util::{Workspace, can_mount, teesfs_bin};

/// An unprivileged uid without a passwd entry (nothing on the machine owns it).
const USER: u32 = 4242;

/// A directory on the host's root file system (not under /tmp or /home, which the
/// environment binds as they are), removed on drop.
struct HostDir(PathBuf);

impl HostDir {
    fn new(tag: &str) -> Self {
        let p = PathBuf::from(format!("/opt/teesfs-it-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).expect("host dir");
        Self(p)
    }
}

impl Drop for HostDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The mount points of this process's namespace, without those of the other tests running
/// beside this one (their workspaces come and go meanwhile); `mine` is this test's
/// workspace, whose mounts count.
fn mount_lines(mine: &Path) -> Vec<String> {
    let others = std::env::temp_dir().join("teesfs-it-");
    let others = others.to_string_lossy();
    std::fs::read_to_string("/proc/self/mountinfo")
        .expect("mountinfo")
        .lines()
        .map(|l| l.split(' ').nth(4).unwrap_or_default().to_string())
        .filter(|m| !m.starts_with(others.as_ref()) || Path::new(m).starts_with(mine))
        .collect()
}

/// `teesfs run ARGS -- sh -c SCRIPT` with its own temp dir (checked empty afterwards).
fn run_sh(args: &[&str], script: &str, tmp: &Path, uid: Option<u32>) -> Output {
    let mut c = Command::new(teesfs_bin());
    c.arg("run")
        .args(args)
        .args(["--", "sh", "-c", script])
        .env("TMPDIR", tmp)
        .current_dir("/");
    if let Some(u) = uid {
        c.uid(u).gid(u);
    }
    c.output().expect("run teesfs run")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn private_tmp(ws: &Workspace) -> PathBuf {
    let t = ws.path().join("tmp");
    std::fs::create_dir_all(&t).expect("tmp");
    std::fs::set_permissions(&t, std::fs::Permissions::from_mode(0o1777)).expect("chmod");
    t
}

fn assert_empty(dir: &Path) {
    let left: Vec<_> = std::fs::read_dir(dir)
        .expect("read tmp")
        .map(|e| e.expect("entry").file_name())
        .collect();
    assert!(
        left.is_empty(),
        "teesfs run left {left:?} in {}",
        dir.display()
    );
}

/// A layer with a file under /opt, one under /usr/share and a setuid-root program.
fn layer(ws: &Workspace, tag: &str) -> PathBuf {
    let l = ws.path().join("layer");
    let app = l.join(format!("opt/app-{tag}"));
    std::fs::create_dir_all(&app).expect("layer");
    std::fs::write(app.join("hello.txt"), "hello from the layer\n").expect("write");
    let share = l.join(format!("usr/share/teesfs-it-{tag}"));
    std::fs::create_dir_all(&share).expect("layer");
    std::fs::write(share.join("data"), "shared\n").expect("write");
    let suid = app.join("suid-id");
    std::fs::copy("/usr/bin/id", &suid).expect("copy id");
    std::fs::set_permissions(&suid, std::fs::Permissions::from_mode(0o4755)).expect("chmod");
    l
}

#[test]
fn run_sees_the_layer_over_the_host_root_and_leaves_nothing_behind() {
    if !can_mount() {
        return;
    }
    let ws = Workspace::new();
    let tag = format!("run{}", std::process::id());
    let id = ws.publish(&layer(&ws, &tag));
    let mnt = ws.mount(&id, "mnt", &[]);
    let tmp = private_tmp(&ws);
    let before = mount_lines(ws.path());
    let script = format!(
        "cat /opt/app-{tag}/hello.txt && cat /usr/share/teesfs-it-{tag}/data \
         && test -f /etc/os-release && test -x /bin/sh \
         && echo written > /usr/share/teesfs-it-{tag}/new && cat /usr/share/teesfs-it-{tag}/new \
         && echo $$ && test -d /proc/1 && grep -c . /proc/self/mountinfo >/dev/null"
    );
    let out = run_sh(
        &["--layer", mnt.mountpoint.to_str().expect("utf8")],
        &script,
        &tmp,
        None,
    );
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(
        lines,
        ["hello from the layer", "shared", "written", "2"],
        "layer files, host files and the write seen inside; the shell is pid 2 of a new \
         PID namespace (init is 1)"
    );
    // The write stayed in the environment's tmpfs: neither the host nor the layer has it.
    assert!(!Path::new(&format!("/usr/share/teesfs-it-{tag}")).exists());
    assert!(
        !mnt.mountpoint
            .join(format!("usr/share/teesfs-it-{tag}/new"))
            .exists()
    );
    assert_eq!(
        mount_lines(ws.path()),
        before,
        "the environment's mounts are gone"
    );
    assert_empty(&tmp);
}

#[test]
fn run_passes_exit_status_and_signals_through() {
    let ws = Workspace::new();
    let tmp = private_tmp(&ws);
    let layer = ws.path().join("empty-layer");
    std::fs::create_dir_all(&layer).expect("layer");
    let l = ["--layer", layer.to_str().expect("utf8")];
    let out = run_sh(&l, "exit 7", &tmp, None);
    assert_eq!(out.status.code(), Some(7), "{}", text(&out.stderr));
    let out = run_sh(&l, "kill -TERM $$", &tmp, None);
    assert_eq!(out.status.signal(), Some(libc::SIGTERM), "{out:?}");
    let out = run_sh(&l, "true", &tmp, None);
    assert!(out.status.success(), "{out:?}");
    // Concurrent runs sharing a temp dir keep their own status (srun starts many at once).
    let codes: Vec<Option<i32>> = std::thread::scope(|s| {
        let runs: Vec<_> = (0..6)
            .map(|i| {
                let l = &l;
                let tmp = &tmp;
                s.spawn(move || run_sh(l, &format!("sleep 0.2; exit {i}"), tmp, None))
            })
            .collect();
        runs.into_iter()
            .map(|r| r.join().expect("thread").status.code())
            .collect()
    });
    assert_eq!(codes, (0..6).map(Some).collect::<Vec<_>>());

    // A signal sent to `teesfs run` reaches the command.
    let mut child = Command::new(teesfs_bin())
        .args(["run", "--layer", layer.to_str().expect("utf8"), "--"])
        .args([
            "sh",
            "-c",
            "trap 'echo got-usr1; exit 3' USR1; echo ready; while :; do sleep 0.05; done",
        ])
        .env("TMPDIR", &tmp)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut stdout = std::io::BufReader::new(child.stdout.take().expect("stdout"));
    let mut line = String::new();
    std::io::BufRead::read_line(&mut stdout, &mut line).expect("ready");
    assert_eq!(line.trim(), "ready");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGUSR1,
    )
    .expect("kill");
    let status = child.wait().expect("wait");
    line.clear();
    std::io::BufRead::read_line(&mut stdout, &mut line).expect("read");
    assert_eq!(line.trim(), "got-usr1");
    assert_eq!(status.code(), Some(3));

    let out = Command::new(teesfs_bin())
        .args(["run", "--layer", layer.to_str().expect("utf8"), "--"])
        .arg("/nonexistent/teesfs-it-command")
        .env("TMPDIR", &tmp)
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(127), "{out:?}");
    assert!(text(&out.stderr).contains("/nonexistent/teesfs-it-command"));

    // A layer with its own top-level bin/ (pip --target makes one) hides a merged-/usr
    // node's /bin link: the error says so instead of only "not found".
    if std::fs::symlink_metadata("/bin").is_ok_and(|m| m.file_type().is_symlink()) {
        let with_bin = ws.path().join("layer-with-bin");
        std::fs::create_dir_all(with_bin.join("bin")).expect("bin");
        std::fs::write(with_bin.join("bin/f2py"), "#!/bin/sh\n").expect("script");
        let out = Command::new(teesfs_bin())
            .args(["run", "--layer", with_bin.to_str().expect("utf8"), "--"])
            .args(["/bin/sh", "-c", "true"])
            .env("TMPDIR", &tmp)
            .output()
            .expect("run");
        assert_eq!(out.status.code(), Some(127), "{out:?}");
        assert!(
            text(&out.stderr).contains("hides the node's /bin"),
            "{}",
            text(&out.stderr)
        );
    }
    assert_empty(&tmp);
}

#[test]
fn run_gives_no_privilege_through_a_setuid_file_in_the_layer() {
    if !can_mount() {
        return;
    }
    let ws = Workspace::new();
    std::fs::set_permissions(ws.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let tag = format!("suid{}", std::process::id());
    let id = ws.publish(&layer(&ws, &tag));
    let mnt = ws.mount(&id, "mnt", &[]);
    let tmp = private_tmp(&ws);
    let suid = format!("/opt/app-{tag}/suid-id");
    let md = std::fs::metadata(mnt.mountpoint.join(suid.trim_start_matches('/'))).expect("stat");
    assert_eq!(
        (md.mode() & 0o7777, md.uid()),
        (0o4755, 0),
        "setuid root in the mount"
    );
    let script = format!("stat -c '%a' {suid} && {suid} -u && {suid} -ru && id -u");
    let out = run_sh(
        &["--layer", mnt.mountpoint.to_str().expect("utf8")],
        &script,
        &tmp,
        Some(USER),
    );
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    let lines: Vec<&str> = stdout.lines().collect();
    // The bit is there (so the test is not vacuous) and still gives nothing.
    assert_eq!(lines[0], "4755", "the environment shows the setuid bit");
    assert_eq!(
        &lines[1..],
        ["4242", "4242", "4242"],
        "effective uid stays the user's"
    );
    assert_empty(&tmp);
}

#[test]
fn login_environment_changes_reach_every_node() {
    if !can_mount() {
        return;
    }
    let cluster = Cluster::start(3, |_| Vec::new());
    let ws = &cluster.ws;
    let tmp = private_tmp(ws);
    let tag = format!("up{}", std::process::id());
    // A host file the user deletes in their environment, and a Debian package they install.
    let host = HostDir::new(&tag);
    std::fs::write(host.0.join("gone.txt"), "on the host\n").expect("host file");
    let deb = build_deb(ws.path(), &tag);
    let upper = ws.path().join("user-layer");
    let pkg = format!("teesfs-it-{tag}");
    let script = format!(
        "dpkg -i {} >/dev/null && rm {}/gone.txt && /opt/{pkg}/hello",
        deb.display(),
        host.0.display()
    );
    let out = run_sh(
        &["--upper", upper.to_str().expect("utf8")],
        &script,
        &tmp,
        None,
    );
    assert!(out.status.success(), "{out:?}");
    assert_eq!(text(&out.stdout).trim(), format!("hello from {pkg}"));
    // The host is untouched; the layer holds the package and a whiteout for the deletion.
    assert!(host.0.join("gone.txt").exists());
    assert!(!Path::new(&format!("/opt/{pkg}")).exists());
    let wh = std::fs::symlink_metadata(
        upper
            .join(host.0.strip_prefix("/").expect("abs"))
            .join("gone.txt"),
    )
    .expect("whiteout in the user's layer");
    assert!(wh.file_type().is_char_device() && wh.rdev() == 0, "{wh:?}");

    let id = ws.publish(&upper);
    let push = cluster
        .push_cmd(&id, 3, &["--wait", "all"])
        .output()
        .expect("push");
    assert!(push.status.success(), "{push:?}");
    for i in 0..cluster.nodes.len() {
        cluster.mount_of(i);
        let jobs = cluster.nodes[i].dir.join("jobs");
        let check = format!(
            "/opt/{pkg}/hello && dpkg -s {pkg} | grep -c 'install ok installed' \
             && if test -e {}/gone.txt; then echo present; else echo absent; fi",
            host.0.display()
        );
        let out = run_sh(
            &["--mount-root", jobs.to_str().expect("utf8")],
            &check,
            &tmp,
            None,
        );
        assert!(out.status.success(), "node {i}: {out:?}");
        assert_eq!(
            text(&out.stdout).lines().collect::<Vec<_>>(),
            [format!("hello from {pkg}").as_str(), "1", "absent"],
            "node {i}"
        );
    }
    assert_empty(&tmp);
}

/// A tiny Debian package installing `/opt/teesfs-it-<tag>/hello`.
fn build_deb(dir: &Path, tag: &str) -> PathBuf {
    let name = format!("teesfs-it-{tag}");
    let root = dir.join("deb");
    let bin = root.join(format!("opt/{name}"));
    std::fs::create_dir_all(root.join("DEBIAN")).expect("deb dir");
    std::fs::create_dir_all(&bin).expect("deb dir");
    std::fs::write(
        root.join("DEBIAN/control"),
        format!(
            "Package: {name}\nVersion: 1.0\nArchitecture: all\n\
             Maintainer: teesfs tests <tests@example.invalid>\nDescription: teesfs test package\n"
        ),
    )
    .expect("control");
    std::fs::write(
        bin.join("hello"),
        format!("#!/bin/sh\necho hello from {name}\n"),
    )
    .expect("hello");
    std::fs::set_permissions(bin.join("hello"), std::fs::Permissions::from_mode(0o755))
        .expect("chmod");
    let deb = dir.join(format!("{name}.deb"));
    let out = Command::new("dpkg-deb")
        .args(["--root-owner-group", "-b"])
        .arg(&root)
        .arg(&deb)
        .output()
        .expect("dpkg-deb");
    assert!(out.status.success(), "{out:?}");
    deb
}

/// A small Python application: a main script importing a package (with a submodule) and a
/// module that sits in the last of several search directories, plus files it never uses.
pub(crate) fn python_app(root: &Path, tag: &str) -> PathBuf {
    let app = root.join(format!("opt/app-{tag}"));
    for d in ["lib0", "lib1", "lib2", "pkg_a", "unused"] {
        std::fs::create_dir_all(app.join(d)).expect("mkdir");
    }
    std::fs::write(
        app.join("main.py"),
        format!(
            "import sys\nsys.path[:0] = ['/opt/app-{tag}/lib0', '/opt/app-{tag}/lib1', \
             '/opt/app-{tag}/lib2', '/opt/app-{tag}']\nimport pkg_a\nimport mymod\n\
             print('answer', pkg_a.VALUE + mymod.VALUE)\n"
        ),
    )
    .expect("main");
    std::fs::write(app.join("pkg_a/__init__.py"), "from .sub import VALUE\n").expect("pkg");
    std::fs::write(app.join("pkg_a/sub.py"), "VALUE = 40\n").expect("sub");
    std::fs::write(app.join("lib2/mymod.py"), "VALUE = 2\n").expect("mymod");
    std::fs::write(app.join("unused/never.py"), "raise SystemExit(1)\n").expect("unused");
    std::fs::write(app.join("unused/data.bin"), crate::util::noise(6 << 20, 3)).expect("data");
    app
}

#[test]
fn record_lists_the_modules_a_python_application_imports_in_order() {
    if !can_mount() {
        return;
    }
    let ws = Workspace::new();
    let tmp = private_tmp(&ws);
    let tag = format!("rec{}", std::process::id());
    let layer = ws.path().join("layer");
    python_app(&layer, &tag);
    let id = ws.publish(&layer);
    let list = ws.path().join("urgent.list");
    let out = Command::new(teesfs_bin())
        .args(["record", "--store"])
        .arg(ws.store())
        .args(["--index", &id, "--trust"])
        .arg(ws.pubkey())
        .arg("-o")
        .arg(&list)
        .args(["--", "python3", &format!("/opt/app-{tag}/main.py")])
        .env("TMPDIR", &tmp)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .output()
        .expect("record");
    assert!(out.status.success(), "{out:?}");
    assert!(text(&out.stdout).contains("answer 42"), "{out:?}");
    let listed = std::fs::read_to_string(&list).expect("list");
    let files: Vec<&str> = listed
        .lines()
        .filter(|l| !l.starts_with('#') && !l.starts_with('!'))
        .collect();
    let p = |f: &str| format!("opt/app-{tag}/{f}");
    assert_eq!(
        files,
        [
            p("main.py"),
            p("pkg_a/__init__.py"),
            p("pkg_a/sub.py"),
            p("lib2/mymod.py")
        ],
        "{listed}"
    );
    assert!(!listed.contains("unused"), "{listed}");

    // Published with the list, the signed index carries that order as the urgent set.
    let out = ws.teesfs(&[
        "publish",
        layer.to_str().expect("utf8"),
        "--store",
        ws.store().to_str().expect("utf8"),
        "--key",
        ws.key().to_str().expect("utf8"),
        "--quiet",
        "--urgent-list",
        list.to_str().expect("utf8"),
    ]);
    assert!(out.status.success(), "{out:?}");
    let id2 = text(&out.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("index ").map(str::to_string))
        .expect("index id");
    let out = ws.teesfs(&[
        "inspect",
        "--store",
        ws.store().to_str().expect("utf8"),
        "--index",
        &id2,
        "--trust",
        ws.pubkey().to_str().expect("utf8"),
    ]);
    assert!(out.status.success(), "{out:?}");
    let listing = text(&out.stdout);
    for (n, f) in files.iter().enumerate() {
        let line = listing
            .lines()
            .find(|l| l.contains(&format!("/{f} ")))
            .unwrap_or_else(|| panic!("{f} not listed: {listing}"));
        assert!(line.ends_with(&format!("[urgent #{}]", n + 1)), "{line}");
    }
    assert_empty(&tmp);
}

#[test]
fn absent_names_never_cause_demand_requests_and_early_opens_wait_for_their_data() {
    if !can_mount() {
        return;
    }
    let c = Cluster::start(2, |_| Vec::new());
    let tmp = private_tmp(&c.ws);
    let tag = format!("neg{}", std::process::id());
    let layer = c.ws.path().join("layer");
    let app = python_app(&layer, &tag);
    let id = c.ws.publish(&layer);
    // Urgent: the application's code; the 6 MiB of data streams afterwards at 1 MiB/s.
    let mut push = c
        .push_cmd(
            &id,
            2,
            &[
                "--urgent",
                &format!("opt/app-{tag}/*.py"),
                "--urgent",
                &format!("opt/app-{tag}/*/*.py"),
                "--rate-limit",
                "1MiB",
            ],
        )
        .spawn()
        .expect("push");
    let leaf = 1;
    let jobs = c.nodes[leaf].dir.join("jobs");
    let jobs = jobs.to_str().expect("utf8");
    // Launch in advance: `teesfs run` waits for the job's mount, then starts at once.
    let probe = format!(
        "python3 /opt/app-{tag}/main.py && for i in $(seq 200); do \
         test -e /opt/app-{tag}/lib0/libnothere$i.so && exit 9; \
         test -e /opt/app-{tag}/nothere$i/x && exit 9; done; echo probed"
    );
    let out = run_sh(&["--mount-root", jobs], &probe, &tmp, None);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        text(&out.stdout).lines().collect::<Vec<_>>(),
        ["answer 42", "probed"]
    );
    let st = c.status(leaf);
    let job = &st["jobs"][0];
    assert!(
        job["have"].as_u64() < job["chunks"].as_u64(),
        "the data must still be streaming for this to test anything: {st}"
    );
    assert_eq!(
        job["counters"]["wants_sent"].as_u64(),
        Some(0),
        "a lookup of an absent name (or of code that had arrived) asked the parent: {st}"
    );
    // A file of the hysteretic set opened early just waits for its data.
    let out = run_sh(
        &["--mount-root", jobs],
        &format!("sha256sum < /opt/app-{tag}/unused/data.bin"),
        &tmp,
        None,
    );
    assert!(out.status.success(), "{out:?}");
    let want = Command::new("sha256sum")
        .stdin(std::fs::File::open(app.join("unused/data.bin")).expect("data"))
        .output()
        .expect("sha256sum");
    assert_eq!(text(&out.stdout), text(&want.stdout));
    assert!(push.wait().expect("push").success());
    assert_empty(&tmp);
}

#[test]
fn run_names_what_is_wrong_with_its_arguments() {
    let ws = Workspace::new();
    let check = |args: &[&str], want: &str| {
        let out = Command::new(teesfs_bin())
            .arg("run")
            .args(args)
            .env_remove("SLURM_JOB_ID")
            .env_remove("TEESFS_JOB")
            .output()
            .expect("run");
        assert!(!out.status.success(), "{args:?} succeeded");
        let err = text(&out.stderr);
        assert!(err.contains(want), "{args:?}: {err}");
    };
    let jobs = ws.path().join("jobs");
    std::fs::create_dir_all(&jobs).expect("jobs");
    let jobs = jobs.to_str().expect("utf8");
    check(&["--job", "zz", "--", "true"], "\"zz\" is not a job id");
    check(
        &[
            "--mount-root",
            jobs,
            "--job",
            "171",
            "--wait",
            "0s",
            "--",
            "true",
        ],
        // Slurm job 171, not hex 0x171.
        "no job 171 is mounted",
    );
    check(
        &["--mount-root", jobs, "--wait", "0s", "--", "true"],
        "no job is mounted",
    );
    check(
        &["--layer", "/nonexistent/teesfs-layer", "--", "true"],
        "/nonexistent/teesfs-layer is not a directory",
    );
}

/// A tmpfs standing in for a job's mount, detached on drop.
struct JobMount(PathBuf);

impl Drop for JobMount {
    fn drop(&mut self) {
        let _ = nix::mount::umount2(&self.0, nix::mount::MntFlags::MNT_DETACH);
    }
}

/// Issue 29 item 7: `teesfs run` by a user who cannot read the job's layer (another user's
/// job, mode 0700) ran the command on the bare host with exit 0. It refuses, naming the
/// job and its owner, and runs nothing; the owner still runs in it.
#[test]
fn run_on_a_job_the_caller_cannot_read_refuses_naming_the_job_and_its_owner() {
    if !can_mount() {
        return;
    }
    let ws = Workspace::new();
    std::fs::set_permissions(ws.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let tmp = private_tmp(&ws);
    let jobs = ws.path().join("jobs");
    let job = jobs.join("00000000000004d2");
    std::fs::create_dir_all(&job).expect("mkdir");
    nix::mount::mount(
        Some("teesfs-it"),
        &job,
        Some("tmpfs"),
        nix::mount::MsFlags::empty(),
        Some(format!("mode=0700,uid={USER},gid={USER}").as_str()),
    )
    .expect("mount tmpfs");
    let _mounted = JobMount(job.clone());
    let jobs = jobs.to_str().expect("utf8");
    let layer = job.to_str().expect("utf8");
    for args in [
        &["--mount-root", jobs, "--job", "1234", "--wait", "1s"][..],
        &["--mount-root", jobs, "--wait", "1s"][..],
        &["--layer", layer][..],
    ] {
        let out = run_sh(args, "echo ran", &tmp, Some(65534));
        let err = text(&out.stderr);
        assert!(!out.status.success(), "{args:?}: refused: {err}");
        assert!(!text(&out.stdout).contains("ran"), "{args:?}: nothing ran");
        // The directory has the 16 hex digits of a daemon of an earlier release: a job is
        // found by its number either way, and named by it (issue 30 item 9).
        let named = if args[0] == "--layer" {
            "00000000000004d2"
        } else {
            "job 1234's layer"
        };
        assert!(
            err.contains(named) && err.contains(&format!("uid {USER}")),
            "{args:?}: names the job and its owner: {err}"
        );
    }
    let out = run_sh(
        &["--mount-root", jobs, "--job", "1234"],
        "echo ran",
        &tmp,
        Some(USER),
    );
    assert_eq!(text(&out.stdout), "ran\n", "{}", text(&out.stderr));
    assert_empty(&tmp);
}

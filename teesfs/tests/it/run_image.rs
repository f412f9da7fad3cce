//! `teesfs run --image`: the layer (a real FUSE mount of a published index) is the whole
//! root, as enroot and Apptainer run an image. The host's own files are not there; its
//! `/proc`, `/dev`, `/tmp` and the user's home are; writes reach neither the image nor the
//! host; a setuid-root program in the image gives nothing; the environment, working
//! directory and command follow the image's config (pyxis's rules).

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::util::{Workspace, can_mount, teesfs_bin};

/// An unprivileged uid without a passwd entry.
const USER: u32 = 4242;

/// A directory on the host's root file system (not under /tmp, which the image gets as
/// the host's), owned by `owner`, removed on drop.
struct HostDir(PathBuf);

impl HostDir {
    fn new(tag: &str, owner: u32) -> Self {
        let p = PathBuf::from(format!("/opt/teesfs-it-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).expect("host dir");
        let id = Some(nix::unistd::Uid::from_raw(owner));
        nix::unistd::chown(&p, id, Some(nix::unistd::Gid::from_raw(owner))).expect("chown");
        Self(p)
    }
}

impl Drop for HostDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Copies the host program `bin` into the image's `bin/` with the libraries it loads, at
/// the paths the host has them.
pub(crate) fn copy_program(root: &Path, bin: &str) {
    let host = which(bin);
    std::fs::copy(&host, root.join("bin").join(bin)).expect("copy program");
    let ldd = Command::new("ldd").arg(&host).output().expect("ldd");
    for lib in String::from_utf8_lossy(&ldd.stdout)
        .split_whitespace()
        .filter(|w| w.starts_with('/'))
    {
        let to = root.join(lib.trim_start_matches('/'));
        std::fs::create_dir_all(to.parent().expect("parent")).expect("lib dir");
        std::fs::copy(lib, &to).expect("copy library");
    }
}

fn which(bin: &str) -> PathBuf {
    ["/usr/bin", "/bin"]
        .iter()
        .map(|d| Path::new(d).join(bin))
        .find(|p| p.exists())
        .unwrap_or_else(|| panic!("no {bin} on this machine"))
}

/// A small image root: a shell and a few programs with their libraries, `/marker`, a
/// `/wd` directory, and `/bin/euid` (prints its effective uid) setuid root.
fn image_root(ws: &Workspace) -> PathBuf {
    let root = ws.path().join("image");
    for d in ["bin", "etc", "wd", "home"] {
        std::fs::create_dir_all(root.join(d)).expect("image dir");
    }
    for b in ["sh", "cat", "ls", "id", "stat", "env"] {
        copy_program(&root, b);
    }
    std::fs::write(root.join("marker"), "only in the image\n").expect("marker");
    std::fs::write(root.join("etc/passwd"), "root:x:0:0:root:/root:/bin/sh\n").expect("passwd");
    let src = ws.path().join("euid.c");
    std::fs::write(
        &src,
        "#include <stdio.h>\n#include <unistd.h>\n\
         int main(void) { printf(\"%d\\n\", (int)geteuid()); return 0; }\n",
    )
    .expect("euid.c");
    let euid = root.join("bin/euid");
    let cc = Command::new("cc")
        .arg("-o")
        .arg(&euid)
        .arg(&src)
        .status()
        .expect("cc");
    assert!(cc.success(), "compiling the setuid helper");
    std::fs::set_permissions(&euid, std::fs::Permissions::from_mode(0o4755)).expect("chmod");
    root
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// `teesfs run ARGS -- CMD` as `uid` in `cwd`, with the environment `env` only.
fn run(args: &[&str], cmd: &[&str], uid: u32, cwd: &Path, env: &[(&str, &str)]) -> Output {
    let mut c = Command::new(teesfs_bin());
    c.arg("run").args(args);
    if !cmd.is_empty() {
        c.arg("--").args(cmd);
    }
    c.env_clear().envs(env.iter().copied()).current_dir(cwd);
    c.uid(uid).gid(uid);
    c.output().expect("run teesfs run")
}

#[test]
fn run_image_is_the_root_with_the_hosts_home_and_proc_and_setuid_gives_nothing() {
    if !can_mount() {
        return;
    }
    let ws = Workspace::new();
    std::fs::set_permissions(ws.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let id = ws.publish(&image_root(&ws));
    let mnt = ws.mount(&id, "mnt", &[]);
    let md = std::fs::metadata(mnt.mountpoint.join("bin/euid")).expect("stat");
    assert_eq!(
        (md.mode() & 0o7777, md.uid()),
        (0o4755, 0),
        "setuid root in the mount"
    );
    let home = HostDir::new("home", USER);
    std::fs::write(home.0.join("notes.txt"), "in the user's home\n").expect("home file");
    let host_only = HostDir::new("hostonly", 0);
    // TMPDIR outside /tmp (a site's node-local scratch): the image binds /tmp only, and
    // `teesfs run` must still find its status file there once the task has entered its root.
    let tmp_dir = tempfile::Builder::new()
        .prefix("teesfs-it-tmpdir.")
        .tempdir_in("/var/tmp")
        .expect("tmp");
    let tmp = tmp_dir.path().to_path_buf();
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o1777)).expect("chmod");
    assert!(Path::new("/etc/debian_version").exists() || Path::new("/etc/os-release").exists());
    let script = format!(
        "cat /marker; test -e /etc/debian_version && echo host-etc; \
         test -e /etc/os-release && echo host-os-release; test -e {host} && echo host-dir; \
         cat $HOME/notes.txt; echo $$; test -r /proc/self/status && echo proc; \
         test -c /dev/null && echo dev; stat -c '%a %u' /bin/euid; /bin/euid; id -u; \
         (echo changed > /marker) 2>/dev/null || echo image-files-stay-roots; cat /marker; \
         echo new > /new-file && cat /new-file; \
         echo in-home > $HOME/from-image",
        host = host_only.0.display()
    );
    let mp = mnt.mountpoint.to_str().expect("utf8");
    let home_s = home.0.to_str().expect("utf8");
    let env = [("HOME", home_s), ("TMPDIR", tmp.to_str().expect("utf8"))];
    let out = run(
        &["--image", "--layer", mp],
        &["/bin/sh", "-c", &script],
        USER,
        Path::new("/"),
        &env,
    );
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    assert_eq!(
        stdout.lines().collect::<Vec<_>>(),
        [
            "only in the image",
            "in the user's home",
            "2",
            "proc",
            "dev",
            "4755 65534",
            "4242",
            "4242",
            "image-files-stay-roots",
            "only in the image",
            "new"
        ],
        "the image is \"/\" (no host /etc, no host directory), the home and a new /proc of \
         a new PID namespace are there, the setuid program belongs to root (outside the user \
         namespace) and runs as the user, who cannot change root's files"
    );
    // Writes stayed in the environment's tmpfs; the home is the host's own.
    let marker = std::fs::read_to_string(mnt.mountpoint.join("marker")).expect("marker");
    assert_eq!(marker, "only in the image\n");
    assert!(!Path::new("/new-file").exists() && !mnt.mountpoint.join("new-file").exists());
    let back = std::fs::read_to_string(home.0.join("from-image")).expect("written in the home");
    assert_eq!(back, "in-home\n");
    let left: Vec<_> = std::fs::read_dir(&tmp)
        .expect("tmp")
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert!(left.is_empty(), "teesfs run left {left:?}");
}

#[test]
fn run_image_env_workdir_and_entrypoint_follow_the_images_config() {
    if !can_mount() {
        return;
    }
    let ws = Workspace::new();
    std::fs::set_permissions(ws.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let id = ws.publish(&image_root(&ws));
    let mnt = ws.mount(&id, "mnt", &[]);
    let mp = mnt.mountpoint.to_str().expect("utf8");
    // The user starts in a directory the image does not have: the image's WorkingDir.
    let cwd = HostDir::new("cwd", USER);
    let config = serde_json::json!({
        "env": ["PATH=/bin:/opt/img/bin", "IMG=yes", "FOO=image", "HOME=/root"],
        "entrypoint": ["/bin/sh", "-c", "echo entrypoint $IMG $0; pwd", "from-cmd"],
        "cmd": [],
        "working_dir": "/wd",
    })
    .to_string();
    let env = [
        ("PATH", "/host/only/bin"),
        ("FOO", "user"),
        ("KEEP", "kept"),
        ("LANG", "xx_XX.UTF-8"),
        ("HOME", "/nonexistent-home"),
    ];
    let args = ["--image", "--layer", mp, "--image-config", &config];
    let script = "echo $PATH; echo $IMG $FOO $KEEP ${LANG-nolang} $HOME; pwd";
    let out = run(&args, &["sh", "-c", script], USER, &cwd.0, &env);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    assert_eq!(
        stdout.lines().collect::<Vec<_>>(),
        [
            "/bin:/opt/img/bin",
            "yes image kept nolang /nonexistent-home",
            "/wd"
        ],
        "`sh` found on the image's PATH; its Env over the user's, HOME and other variables \
         kept, the host's locale dropped; the WorkingDir as the user's directory is not there"
    );
    // No command: the image's Entrypoint and Cmd.
    let out = run(&args, &[], USER, &cwd.0, &env);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    assert_eq!(
        stdout.lines().collect::<Vec<_>>(),
        ["entrypoint yes from-cmd", "/wd"]
    );
}

#[test]
fn run_image_by_tag_mounts_the_index_from_the_store() {
    if !can_mount() {
        return;
    }
    let ws = Workspace::new();
    let id = ws.publish(&image_root(&ws));
    let (store, pubkey) = (ws.store(), ws.pubkey());
    let args = [
        "--image",
        &id,
        "--store",
        store.to_str().expect("utf8"),
        "--trust",
        pubkey.to_str().expect("utf8"),
    ];
    // Its own TMPDIR, so that this test's mount is told from other tests' ones.
    let tmp = ws.path().join("tmp");
    std::fs::create_dir_all(&tmp).expect("tmp");
    let tmp = tmp.to_str().expect("utf8");
    let out = run(
        &args,
        &["/bin/sh", "-c", "cat /marker; ls /"],
        0,
        Path::new("/"),
        &[("HOME", "/root"), ("TMPDIR", tmp)],
    );
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    assert_eq!(stdout.lines().next(), Some("only in the image"), "{stdout}");
    assert!(
        !stdout.lines().any(|l| l == "usr"),
        "the host's /usr is not in the image: {stdout}"
    );
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").expect("mountinfo");
    assert!(
        !mounts.contains(tmp),
        "the image's mount was left behind under {tmp}"
    );
}

/// The config travels in the signed index: an OCI image built with `umoci` (Entrypoint,
/// Env, WorkingDir), published with `publish --image`, runs its entrypoint with its Env in
/// its WorkingDir under `run --image ID` with no command.
#[test]
fn an_image_published_from_an_oci_layout_runs_its_entrypoint_with_its_env_in_its_workdir() {
    if !can_mount() {
        return;
    }
    let ws = Workspace::new();
    let root = image_root(&ws);
    let id = publish_oci(
        &ws,
        &root,
        "--config.entrypoint /bin/sh --config.cmd=-c --config.cmd='echo $IMG; pwd' \
         --config.env IMG=from-the-index --config.env PATH=/bin --config.workingdir /wd",
        &[],
    );
    let (store, pubkey) = (ws.store(), ws.pubkey());
    let s = |p: &Path| p.to_str().expect("utf8").to_string();
    let args = [
        "--image",
        &id,
        "--store",
        &s(&store),
        "--trust",
        &s(&pubkey),
    ];
    // The user's directory is not in the image: the image's WorkingDir.
    let cwd = HostDir::new("oci-cwd", 0);
    let out = run(&args, &[], 0, &cwd.0, &[("HOME", "/root")]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    assert_eq!(
        stdout.lines().collect::<Vec<_>>(),
        ["from-the-index", "/wd"]
    );
}

/// Makes `root` the OCI image `DIR/oci:t` with `umoci` in `dir` (one layer; `config`,
/// umoci's `--config.*` flags, as its config).
pub(crate) fn build_oci(dir: &Path, root: &Path, config: &str) {
    let script = format!(
        "umoci init --layout oci && umoci new --image oci:t && \
         umoci unpack --image oci:t b >/dev/null && cp -a {}/. b/rootfs/ && \
         umoci repack --image oci:t b && rm -rf b && umoci config --image oci:t {config}",
        root.display()
    );
    let out = Command::new("bash")
        .args(["-euo", "pipefail", "-c", &script])
        .current_dir(dir)
        .output()
        .expect("bash");
    assert!(
        out.status.success(),
        "{script}: {out:?} (umoci: scripts/deps.sh)"
    );
}

/// Makes `root` an OCI image with [`build_oci`], publishes it with `publish --image` and `extra`; returns the index id.
pub(crate) fn publish_oci(ws: &Workspace, root: &Path, config: &str, extra: &[&str]) -> String {
    let dir = ws.path();
    build_oci(dir, root, config);
    let (store, key) = (ws.store(), ws.key());
    let s = |p: &Path| p.to_str().expect("utf8").to_string();
    let mut args = vec![
        "publish".to_string(),
        "--image".into(),
        s(&dir.join("oci")),
        "--store".into(),
        s(&store),
        "--key".into(),
        s(&key),
        "--quiet".into(),
    ];
    args.extend(extra.iter().map(|a| a.to_string()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = ws.teesfs(&args);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    stdout
        .lines()
        .find_map(|l| l.strip_prefix("index "))
        .expect("the index id")
        .trim()
        .to_string()
}

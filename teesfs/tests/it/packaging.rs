//! The Debian package: `scripts/package.sh` builds it from the test binary, and it installs
//! into a throwaway node root (`teesfs run`'s overlay over "/" with a tmpfs for writes),
//! with the binary, the systemd unit, the default config, the Slurm scripts, man pages and
//! completions where Debian expects them. The host is untouched.

use std::path::Path;
use std::process::Command;

use crate::util::{Workspace, spank_plugin, teesfs_bin};

const INSTALLED: &[&str] = &[
    "/usr/bin/teesfs",
    "/lib/systemd/system/teesfs-daemon.service",
    "/etc/teesfs/daemon.env",
    "/etc/teesfs/cluster",
    "/etc/teesfs/trusted",
    "/usr/share/teesfs/slurm/prolog-slurmctld.sh",
    "/usr/share/teesfs/slurm/epilog.sh",
    "/usr/share/teesfs/slurm/epilog-slurmctld.sh",
    "/usr/share/teesfs/slurm/plugstack.conf",
    "/usr/lib/teesfs/teesfs_spank.so",
    "/usr/share/man/man1/teesfs.1.gz",
    "/usr/share/man/man1/teesfs-run.1.gz",
    "/usr/share/man/man5/teesfs.toml.5.gz",
    "/usr/share/man/man5/manifest.toml.5.gz",
    "/etc/teesfs/teesfs.toml",
    "/etc/teesfs/teesfs.d",
    "/var/log/teesfs",
    "/usr/share/bash-completion/completions/teesfs",
    "/usr/share/zsh/vendor-completions/_teesfs",
];

/// Builds the package from the test binary into `ws`; returns the `.deb`'s path.
fn build_deb(ws: &Workspace) -> String {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let out = Command::new("bash")
        .arg(repo.join("scripts/package.sh"))
        .args([
            "--binary",
            teesfs_bin(),
            "--compression",
            "none",
            "--plugin",
        ])
        .arg(spank_plugin())
        .arg("--out")
        .arg(ws.path())
        .output()
        .expect("package.sh");
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[test]
fn the_debian_package_installs_into_a_clean_node_root() {
    if !nix::unistd::geteuid().is_root() {
        assert!(
            std::env::var_os("CI").is_none(),
            "installing a package needs root, and CI runs as root"
        );
        eprintln!("SKIP: installing a package needs root (CI runs as root)");
        return;
    }
    let ws = Workspace::new();
    let deb = build_deb(&ws);
    assert!(deb.ends_with(".deb") && Path::new(&deb).exists(), "{deb}");

    let host_before: Vec<bool> = INSTALLED.iter().map(|p| Path::new(p).exists()).collect();
    let checks: Vec<String> = INSTALLED.iter().map(|p| format!("test -e {p}")).collect();
    let script = format!(
        "dpkg -i {deb} >/dev/null && {} && /usr/bin/teesfs --version \
         && dpkg -s teesfs | grep -c 'install ok installed' \
         && zcat /usr/share/man/man1/teesfs-run.1.gz | grep -c 'teesfs\\\\-run' >/dev/null \
         && grep -q 'teesfs daemon' /lib/systemd/system/teesfs-daemon.service \
         && dpkg -r teesfs >/dev/null && test ! -e /usr/bin/teesfs && echo removed",
        checks.join(" && ")
    );
    let tmp = ws.path().join("tmp");
    std::fs::create_dir_all(&tmp).expect("tmp");
    std::fs::create_dir_all(ws.path().join("empty")).expect("empty layer");
    let out = Command::new(teesfs_bin())
        .args(["run", "--layer"])
        .arg(ws.path().join("empty"))
        .args(["--", "sh", "-c", &script])
        .env("TMPDIR", &tmp)
        .current_dir("/")
        .output()
        .expect("teesfs run");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<&str> = stdout.lines().collect();
    assert!(lines[0].starts_with("teesfs "), "{stdout}");
    assert_eq!(&lines[1..], ["1", "removed"], "{stdout}");
    let host_after: Vec<bool> = INSTALLED.iter().map(|p| Path::new(p).exists()).collect();
    assert_eq!(host_before, host_after, "the host's files did not change");
}

/// An upgrade must never leave a node without its daemon: the old maintainer script
/// stopped it on every `prerm`, upgrades included, and nothing started it again. The
/// package's scripts are run with a stand-in `systemctl` that records what it is asked.
#[test]
fn an_upgrade_leaves_the_daemon_running_and_removal_stops_it() {
    let ws = Workspace::new();
    let deb = build_deb(&ws);
    let ctrl = ws.path().join("control");
    let out = Command::new("dpkg-deb")
        .arg("-e")
        .arg(&deb)
        .arg(&ctrl)
        .output()
        .expect("dpkg-deb");
    assert!(out.status.success(), "{out:?}");
    let bin = ws.path().join("bin");
    std::fs::create_dir_all(&bin).expect("bin");
    let calls = ws.path().join("calls");
    let systemctl = bin.join("systemctl");
    std::fs::write(
        &systemctl,
        format!(
            "#!/bin/sh\necho \"$*\" >> {}\n[ \"$1\" != is-active ]\n",
            calls.display()
        ),
    )
    .expect("fake systemctl");
    std::fs::set_permissions(
        &systemctl,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .expect("chmod");
    let systemd = ws.path().join("systemd");
    std::fs::create_dir_all(&systemd).expect("systemd dir");
    let run = |script: &str, args: &[&str]| {
        let _ = std::fs::remove_file(&calls);
        let out = Command::new("sh")
            .arg(ctrl.join(script))
            .args(args)
            .env(
                "PATH",
                format!(
                    "{}:{}",
                    bin.display(),
                    std::env::var("PATH").unwrap_or_default()
                ),
            )
            .env("TEESFS_TEST_SYSTEMD", &systemd)
            .output()
            .expect("maintainer script");
        assert!(out.status.success(), "{script} {args:?}: {out:?}");
        std::fs::read_to_string(&calls).unwrap_or_default()
    };
    let upgrade = run("prerm", &["upgrade", "0.2.0"]);
    assert!(
        !upgrade.contains("stop"),
        "an upgrade stopped the daemon: {upgrade}"
    );
    let remove = run("prerm", &["remove"]);
    assert!(remove.contains("stop teesfs-daemon.service"), "{remove}");
}

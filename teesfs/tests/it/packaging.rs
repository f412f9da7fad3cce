//! The packages `scripts/package.sh` builds (cargo-deb, cargo-generate-rpm, and dpkg-deb for
//! the plugin's .deb) from the test binaries: what they hold and with which modes, conffiles,
//! the SPANK plugin apart and named after its Slurm release, rpmlint's verdict, and the
//! Debian package installed into a throwaway node root (`teesfs run`'s overlay over "/"
//! with a tmpfs for writes). The host is untouched. The shipped plugstack.conf line is
//! tried with real Slurm (`sbatch --help` loads the plugin stack).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::util::{Workspace, spank_plugin, teesfs_bin};

const INSTALLED: &[&str] = &[
    "/usr/bin/teesfs",
    "/lib/systemd/system/teesfs-daemon.service",
    "/lib/systemd/system/teesfs-seeder.service",
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

/// The repository's root.
fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The four packages `scripts/package.sh` makes.
struct Packages {
    deb: String,
    rpm: String,
    spank_deb: String,
    spank_rpm: String,
}

/// Builds the packages from the test binaries into `ws` (quick compression).
fn build_packages(ws: &Workspace) -> Packages {
    spank_plugin(); // says how to build it when it is missing
    let target = Path::new(teesfs_bin())
        .parent()
        .and_then(Path::parent)
        .expect("target dir");
    let out = Command::new("bash")
        .arg(repo().join("scripts/package.sh"))
        .args(["--profile", "dev", "--no-build", "--fast", "--out"])
        .arg(ws.path())
        .env("CARGO_TARGET_DIR", target)
        .output()
        .expect("package.sh");
    assert!(out.status.success(), "{out:?}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let find = |pred: &dyn Fn(&str) -> bool| -> String {
        let found: Vec<&str> = stdout
            .lines()
            .filter(|l| {
                pred(
                    Path::new(l)
                        .file_name()
                        .and_then(|f| f.to_str())
                        .unwrap_or(""),
                )
            })
            .collect();
        assert_eq!(found.len(), 1, "{stdout}");
        assert!(Path::new(found[0]).is_file(), "{stdout}");
        found[0].to_string()
    };
    Packages {
        deb: find(&|f| f.starts_with("teesfs_") && f.ends_with(".deb")),
        rpm: find(&|f| f.starts_with("teesfs-0") && f.ends_with(".rpm")),
        spank_deb: find(&|f| f.starts_with("teesfs-spank-slurm") && f.ends_with(".deb")),
        spank_rpm: find(&|f| f.starts_with("teesfs-spank-slurm") && f.ends_with(".rpm")),
    }
}

/// Runs `cmd` with `args`, which must succeed; its standard output.
fn stdout_of(cmd: &str, args: &[&str]) -> String {
    let out = Command::new(cmd).args(args).output().expect(cmd);
    assert!(out.status.success(), "{cmd} {args:?}: {out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `path -> mode` of a .deb's files (`dpkg-deb -c`), paths absolute.
fn deb_files(deb: &str) -> Vec<(String, String)> {
    stdout_of("dpkg-deb", &["-c", deb])
        .lines()
        .filter(|l| !l.starts_with('d'))
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f[5].trim_start_matches('.').to_string(), f[0].to_string())
        })
        .collect()
}

/// `(path, mode, flags)` of an .rpm's files (`rpm -qp`), flags as rpm's `fflags` (`c`
/// config, `n` noreplace, `d` doc).
fn rpm_files(rpm: &str) -> Vec<(String, String, String)> {
    let qf = "[%{FILENAMES} %{FILEMODES:perms} %{FILEFLAGS:fflags}\\n]";
    stdout_of("rpm", &["-qp", "--qf", qf, rpm])
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            (
                f[0].to_string(),
                f[1].to_string(),
                f.get(2).unwrap_or(&"").to_string(),
            )
        })
        .collect()
}

/// The Slurm release in the headers the plugin is built against ("22.05"), and the next
/// ("22.06"); and `SLURM_VERSION_NUMBER`.
fn slurm_release() -> (String, String, u32) {
    let include =
        std::env::var_os("SLURM_INCLUDE_DIR").map_or_else(|| "/usr/include".into(), PathBuf::from);
    let header = std::fs::read_to_string(include.join("slurm/slurm_version.h"))
        .expect("slurm_version.h (libslurm-dev)");
    let hex = header
        .lines()
        .find_map(|l| l.trim().strip_prefix("#define SLURM_VERSION_NUMBER"))
        .and_then(|v| v.trim().strip_prefix("0x"))
        .expect("SLURM_VERSION_NUMBER");
    let n = u32::from_str_radix(hex, 16).expect("hex version");
    let (major, minor) = (n >> 16 & 0xff, n >> 8 & 0xff);
    (
        format!("{major}.{minor:02}"),
        format!("{major}.{:02}", minor + 1),
        n,
    )
}

/// Every file a site needs, as (path in the .deb, path in the .rpm, mode).
const SITE_FILES: [(&str, &str, &str); 17] = [
    ("/usr/bin/teesfs", "/usr/bin/teesfs", "-rwxr-xr-x"),
    (
        "/lib/systemd/system/teesfs-daemon.service",
        "/usr/lib/systemd/system/teesfs-daemon.service",
        "-rw-r--r--",
    ),
    (
        "/lib/systemd/system/teesfs-seeder.service",
        "/usr/lib/systemd/system/teesfs-seeder.service",
        "-rw-r--r--",
    ),
    (
        "/etc/teesfs/daemon.env",
        "/etc/teesfs/daemon.env",
        "-rw-r--r--",
    ),
    (
        "/etc/teesfs/teesfs.toml",
        "/etc/teesfs/teesfs.toml",
        "-rw-r--r--",
    ),
    (
        "/usr/share/teesfs/slurm/prolog-slurmctld.sh",
        "/usr/share/teesfs/slurm/prolog-slurmctld.sh",
        "-rwxr-xr-x",
    ),
    (
        "/usr/share/teesfs/slurm/epilog.sh",
        "/usr/share/teesfs/slurm/epilog.sh",
        "-rwxr-xr-x",
    ),
    (
        "/usr/share/teesfs/slurm/epilog-slurmctld.sh",
        "/usr/share/teesfs/slurm/epilog-slurmctld.sh",
        "-rwxr-xr-x",
    ),
    (
        "/usr/share/teesfs/slurm/plugstack.conf",
        "/usr/share/teesfs/slurm/plugstack.conf",
        "-rw-r--r--",
    ),
    (
        "/usr/share/man/man1/teesfs.1.gz",
        "/usr/share/man/man1/teesfs.1.gz",
        "-rw-r--r--",
    ),
    (
        "/usr/share/man/man1/teesfs-run.1.gz",
        "/usr/share/man/man1/teesfs-run.1.gz",
        "-rw-r--r--",
    ),
    (
        "/usr/share/man/man5/teesfs.toml.5.gz",
        "/usr/share/man/man5/teesfs.toml.5.gz",
        "-rw-r--r--",
    ),
    (
        "/usr/share/man/man5/manifest.toml.5.gz",
        "/usr/share/man/man5/manifest.toml.5.gz",
        "-rw-r--r--",
    ),
    (
        "/usr/share/bash-completion/completions/teesfs",
        "/usr/share/bash-completion/completions/teesfs",
        "-rw-r--r--",
    ),
    (
        "/usr/share/zsh/vendor-completions/_teesfs",
        "/usr/share/zsh/site-functions/_teesfs",
        "-rw-r--r--",
    ),
    (
        "/usr/share/fish/vendor_completions.d/teesfs.fish",
        "/usr/share/fish/vendor_completions.d/teesfs.fish",
        "-rw-r--r--",
    ),
    (
        "/usr/share/doc/teesfs/slurm.md",
        "/usr/share/doc/teesfs/slurm.md",
        "-rw-r--r--",
    ),
];

/// Every file a site needs, in both formats, with its mode; the /etc files are conffiles
/// that an upgrade does not overwrite; the plugin is not in the main package.
#[test]
fn the_deb_and_the_rpm_hold_the_files_with_their_modes_and_conffiles() {
    let ws = Workspace::new();
    let p = build_packages(&ws);
    let deb = deb_files(&p.deb);
    let rpm = rpm_files(&p.rpm);
    for (in_deb, in_rpm, mode) in SITE_FILES {
        let d = deb.iter().find(|(p, _)| p == in_deb);
        assert_eq!(
            d.map(|(_, m)| m.as_str()),
            Some(mode),
            "{in_deb} in the .deb: {deb:?}"
        );
        let r = rpm.iter().find(|(p, _, _)| p == in_rpm);
        assert_eq!(
            r.map(|(_, m, _)| m.as_str()),
            Some(mode),
            "{in_rpm} in the .rpm: {rpm:?}"
        );
    }
    assert!(
        !deb.iter().any(|(p, _)| p.contains("spank"))
            && !rpm.iter().any(|(p, _, _)| p.contains("spank")),
        "the plugin is packaged apart: {deb:?} {rpm:?}"
    );
    // conffiles: dpkg keeps a site's edits; RPM's %config(noreplace) likewise.
    let conffiles = stdout_of("dpkg-deb", &["-I", &p.deb, "conffiles"]);
    let mut conffiles: Vec<&str> = conffiles.lines().collect();
    conffiles.sort_unstable();
    assert_eq!(
        conffiles,
        ["/etc/teesfs/daemon.env", "/etc/teesfs/teesfs.toml"]
    );
    for (path, _, flags) in rpm.iter().filter(|(p, _, _)| p.starts_with("/etc/")) {
        assert!(
            flags.contains('c') && flags.contains('n'),
            "{path} is not %config(noreplace): {flags}"
        );
    }
    let fields = stdout_of("dpkg-deb", &["-f", &p.deb, "Package", "Depends"]);
    assert!(
        fields.contains("Package: teesfs\n") && fields.contains("iproute2"),
        "{fields}"
    );
}

/// The plugin comes in a package of its own per Slurm release, named after it and
/// depending on it, so that a package manager does not leave a plugin Slurm refuses.
#[test]
fn the_spank_plugin_is_a_package_of_its_own_named_after_its_slurm_release() {
    let ws = Workspace::new();
    let p = build_packages(&ws);
    let (release, next, _) = slurm_release();
    let name = format!("teesfs-spank-slurm{release}");

    let fields = stdout_of(
        "dpkg-deb",
        &[
            "-f",
            &p.spank_deb,
            "Package",
            "Depends",
            "Provides",
            "Conflicts",
        ],
    );
    assert!(fields.contains(&format!("Package: {name}\n")), "{fields}");
    for dep in [
        format!("slurm-wlm-basic-plugins (>= {release})"),
        format!("slurm-wlm-basic-plugins (<< {next}~)"),
        "teesfs (= ".to_string(),
        "Provides: teesfs-spank".to_string(),
        "Conflicts: teesfs-spank".to_string(),
    ] {
        assert!(fields.contains(&dep), "{dep} missing: {fields}");
    }
    let files = deb_files(&p.spank_deb);
    assert!(
        files.contains(&(
            "/usr/lib/teesfs/teesfs_spank.so".to_string(),
            "-rw-r--r--".to_string()
        )),
        "{files:?}"
    );

    assert_eq!(
        stdout_of("rpm", &["-qp", "--qf", "%{NAME}", &p.spank_rpm]),
        name
    );
    let requires = stdout_of("rpm", &["-qp", "--requires", &p.spank_rpm]);
    for dep in [format!("slurm >= {release}"), format!("slurm < {next}")] {
        assert!(
            requires.lines().any(|l| l == dep),
            "{dep} missing: {requires}"
        );
    }
    assert!(
        requires.lines().any(|l| l.starts_with("teesfs = ")),
        "the teesfs it was built with: {requires}"
    );
    let provides = stdout_of("rpm", &["-qp", "--provides", &p.spank_rpm]);
    assert!(provides.lines().any(|l| l == "teesfs-spank"), "{provides}");
    let files = rpm_files(&p.spank_rpm);
    assert!(
        files
            .iter()
            .any(|(p, m, _)| p == "/usr/lib/teesfs/teesfs_spank.so" && m == "-rwxr-xr-x"),
        "{files:?}"
    );
}

/// rpmlint finds no error, and no warning that packaging/rpmlintrc does not explain.
#[test]
fn rpmlint_finds_nothing_unexplained_in_the_rpms() {
    let ws = Workspace::new();
    let p = build_packages(&ws);
    let out = Command::new("rpmlint")
        .arg("-c")
        .arg(repo().join("packaging/rpmlint.toml"))
        .arg("-r")
        .arg(repo().join("packaging/rpmlintrc"))
        .args([&p.rpm, &p.spank_rpm])
        .output()
        .expect("rpmlint (Debian's rpmlint; scripts/deps.sh installs it)");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    assert!(stdout.contains(" 0 errors, 0 warnings"), "{stdout}");
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
    let p = build_packages(&ws);
    let (deb, spank) = (p.deb, p.spank_deb);

    let host_before: Vec<bool> = INSTALLED.iter().map(|p| Path::new(p).exists()).collect();
    let checks: Vec<String> = INSTALLED.iter().map(|p| format!("test -e {p}")).collect();
    let script = format!(
        "dpkg -i {deb} {spank} >/dev/null && {} && /usr/bin/teesfs --version \
         && dpkg -s teesfs | grep -c 'install ok installed' \
         && zcat /usr/share/man/man1/teesfs-run.1.gz | grep -c 'teesfs\\\\-run' >/dev/null \
         && grep -q 'teesfs daemon' /lib/systemd/system/teesfs-daemon.service \
         && grep -q '^ExecStart=/usr/bin/teesfs seeder$' /lib/systemd/system/teesfs-seeder.service \
         && dpkg -r teesfs teesfs-spank-slurm{release} >/dev/null && test ! -e /usr/bin/teesfs \
         && test ! -e /usr/lib/teesfs/teesfs_spank.so && echo removed",
        checks.join(" && "),
        release = slurm_release().0,
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
/// packages' scripts (.deb's prerm, .rpm's %preun) are run with a stand-in `systemctl` that
/// records what it is asked.
#[test]
fn an_upgrade_leaves_the_daemon_running_and_removal_stops_it() {
    let ws = Workspace::new();
    let p = build_packages(&ws);
    let ctrl = ws.path().join("control");
    let out = Command::new("dpkg-deb")
        .arg("-e")
        .arg(&p.deb)
        .arg(&ctrl)
        .output()
        .expect("dpkg-deb");
    assert!(out.status.success(), "{out:?}");
    // The .rpm's %preun, as rpm runs it: $1 is the number of versions left (0: removal).
    let preun = stdout_of("rpm", &["-qp", "--qf", "%{PREUN}", &p.rpm]);
    std::fs::write(ctrl.join("rpm-preun"), preun).expect("preun");
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
    let upgrade = run("rpm-preun", &["1"]);
    assert!(
        !upgrade.contains("stop"),
        "an rpm upgrade stopped the daemon: {upgrade}"
    );
    let remove = run("rpm-preun", &["0"]);
    assert!(remove.contains("stop teesfs-daemon.service"), "{remove}");
}

/// `sbatch --help` with a plugin stack of one line, `line`, in a throwaway slurm.conf:
/// Slurm loads the stack as for any submission, without a controller.
fn sbatch_help_with(ws: &Workspace, name: &str, line: &str) -> Output {
    let dir = ws.path().join(name);
    std::fs::create_dir_all(&dir).expect("conf dir");
    std::fs::write(dir.join("plugstack.conf"), format!("{line}\n")).expect("plugstack.conf");
    std::fs::write(
        dir.join("slurm.conf"),
        format!(
            "ClusterName=teesfs-test\nSlurmctldHost=localhost\nPlugStackConfig={}\n",
            dir.join("plugstack.conf").display()
        ),
    )
    .expect("slurm.conf");
    Command::new("sbatch")
        .arg("--help")
        .env("SLURM_CONF", dir.join("slurm.conf"))
        .output()
        .expect("sbatch (Debian's slurm-client; scripts/deps.sh installs it)")
}

/// Where the `plugin_version` the plugin declares lies in the file `so` (`nm` gives its
/// address, `readelf` the section's address and offset).
fn plugin_version_offset(so: &Path) -> usize {
    let so = so.to_str().expect("utf-8 path");
    let sym = stdout_of("nm", &["-D", "--defined-only", so]);
    let addr = sym
        .lines()
        .find_map(|l| l.strip_suffix(" R plugin_version"))
        .map(|a| usize::from_str_radix(a, 16).expect("address"))
        .unwrap_or_else(|| panic!("no plugin_version in {so}: {sym}"));
    let sections = stdout_of("readelf", &["-S", "-W", so]);
    sections
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split(']').nth(1)?.split_whitespace().collect();
            let start = usize::from_str_radix(f.get(2)?, 16).ok()?;
            let off = usize::from_str_radix(f.get(3)?, 16).ok()?;
            let size = usize::from_str_radix(f.get(4)?, 16).ok()?;
            (start <= addr && addr < start + size && start > 0).then(|| addr - start + off)
        })
        .next()
        .unwrap_or_else(|| panic!("no section holds {addr:#x}: {sections}"))
}

/// The package shipped `required` in plugstack.conf: after a Slurm upgrade, a plugin built
/// for the previous release stopped every sbatch, salloc and srun, teesfs's jobs or not.
/// Real Slurm loads the shipped line with the plugin's `plugin_version` changed to the
/// previous release: submissions go on. The same line as `required` shows the old failure,
/// and the real plugin on the shipped line (arguments given: with none, the debug build
/// aborted in slurm-spank) adds `--teesfs`.
#[test]
fn a_plugin_built_for_another_slurm_release_does_not_stop_every_job() {
    let ws = Workspace::new();
    let (_, _, version) = slurm_release();
    let shipped = std::fs::read_to_string(repo().join("packaging/slurm/plugstack.conf"))
        .expect("plugstack.conf");
    let line = shipped
        .lines()
        .find(|l| !l.starts_with('#') && l.contains("teesfs_spank.so"))
        .expect("the plugin's line");
    assert!(line.starts_with("optional "), "{line}");

    let real = ws.path().join("teesfs_spank.so");
    std::fs::copy(spank_plugin(), &real).expect("copy plugin");
    let mut bytes = std::fs::read(&real).expect("plugin");
    let at = plugin_version_offset(&real);
    assert_eq!(
        bytes[at..at + 4],
        version.to_le_bytes(),
        "plugin_version at {at:#x}"
    );
    let previous = version - (1 << 8); // one minor release back, as Slurm numbers them
    bytes[at..at + 4].copy_from_slice(&previous.to_le_bytes());
    let old = ws.path().join("old_teesfs_spank.so");
    std::fs::write(&old, bytes).expect("old plugin");

    let with =
        |so: &Path| line.replace("/usr/lib/teesfs/teesfs_spank.so", &so.display().to_string());
    let out = sbatch_help_with(&ws, "shipped-old", &with(&old));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{out:?}");
    assert!(stderr.contains("Incompatible plugin version"), "{stderr}");

    let required = with(&old).replacen("optional", "required", 1);
    let out = sbatch_help_with(&ws, "required-old", &required);
    assert!(
        !out.status.success(),
        "a required plugin Slurm refuses: {out:?}"
    );

    let out = sbatch_help_with(&ws, "shipped-real", &with(&real));
    assert!(out.status.success(), "{out:?}");
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(help.contains("--teesfs"), "{help}");
}

/// The package made the Slurm prolog's log directory 0750 for the Slurm user, so a job's
/// owner could not enter it to read the files the prolog shares with them (an ACL entry
/// each): the maintainer scripts (.deb's postinst, .rpm's %post), run in a throwaway node
/// root over a 0750 directory as an upgrade finds it, leave it 0711.
#[test]
fn the_package_leaves_the_prolog_log_directory_enterable_by_job_owners() {
    if !nix::unistd::geteuid().is_root() {
        assert!(
            std::env::var_os("CI").is_none(),
            "maintainer scripts run as root, and CI runs as root"
        );
        eprintln!("SKIP: maintainer scripts run as root (CI runs as root)");
        return;
    }
    let ws = Workspace::new();
    std::fs::create_dir_all(ws.path().join("empty")).expect("empty layer");
    for (script, args) in [
        ("packaging/debian/postinst", "configure 0.1.0"),
        ("packaging/rpm/post.sh", "2"),
    ] {
        let script = format!(
            "mkdir -p /var/log/teesfs && chmod 0750 /var/log/teesfs \
             && sh {} {args} >/dev/null && stat -c %a /var/log/teesfs",
            repo().join(script).display()
        );
        let out = Command::new(teesfs_bin())
            .args(["run", "--layer"])
            .arg(ws.path().join("empty"))
            .args(["--", "sh", "-c", &script])
            .env("TEESFS_TEST_SYSTEMD", ws.path().join("no-systemd"))
            .current_dir("/")
            .output()
            .expect("teesfs run");
        assert!(out.status.success(), "{out:?}");
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim(),
            "711",
            "{script}"
        );
    }
}

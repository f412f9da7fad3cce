//! Slurm in the lab as a site runs it (docs/slurm.md): slurmctld on a host of its own
//! (`ctl`: its own network namespace, no teesfs certificate) as `SlurmUser=slurm`; the
//! packaged prolog and epilog scripts named in `slurm.conf`; the SPANK plugin in
//! `plugstack.conf`; a site `teesfs.toml`; `teesfs seeder` on the login node, to which the
//! controller's prolog hands every job; and an unprivileged lab user, created here and
//! removed with the site, who submits with `sbatch --teesfs=manifest.toml`.
//!
//! The controller reads no user file: the user's home is theirs alone, the login node's key
//! is root's, and the prolog runs as `slurm` with only the binary, munge and the site file.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use super::{JobId, Slurm, SlurmScripts, log_file};
use crate::check_interrupt;
use crate::cluster::Lab;
use crate::error::{LabError, Result};
use crate::proc::NodeProc;

/// The packaged scripts, as the package installs them in /usr/share/teesfs/slurm/.
const SCRIPTS: [(&str, &str); 3] = [
    (
        "prolog-slurmctld.sh",
        include_str!("../../../packaging/slurm/prolog-slurmctld.sh"),
    ),
    (
        "epilog-slurmctld.sh",
        include_str!("../../../packaging/slurm/epilog-slurmctld.sh"),
    ),
    (
        "epilog.sh",
        include_str!("../../../packaging/slurm/epilog.sh"),
    ),
];

/// The seeder's port in the lab (the default, on the login node's address).
pub const SEEDER_PORT: u16 = 7412;

/// How long a job Slurm requeued waits before it may start again, in the site lab
/// (`AuthInfo=cred_expire=`; Slurm's default is 120 s).
pub const REQUEUE_WAIT_S: u32 = 10;

/// A user of the machine made for the lab (`<prefix>u`), with a home only they may enter;
/// removed (with the home) on drop.
#[derive(Debug)]
pub struct LabUser {
    /// The user's name.
    pub name: String,
    /// Its uid.
    pub uid: u32,
    /// Its group's gid.
    pub gid: u32,
    /// Its home directory (mode 0700).
    pub home: PathBuf,
}

impl LabUser {
    fn create(name: &str, home: &Path) -> Result<LabUser> {
        let status = Command::new("useradd")
            .args([
                "--user-group",
                "--create-home",
                "--shell",
                "/bin/sh",
                "--home-dir",
            ])
            .arg(home)
            .arg(name)
            .stdout(Stdio::null())
            .status()
            .map_err(|source| LabError::Spawn {
                program: "useradd".into(),
                source,
            })?;
        if !status.success() {
            return Err(LabError::Command {
                command: format!("useradd {name}"),
                stderr: format!("{status}; `userdel -r {name}` removes a leftover"),
            });
        }
        let u = nix::unistd::User::from_name(name)
            .ok()
            .flatten()
            .ok_or_else(|| LabError::Shape(format!("useradd made no user {name}")))?;
        let user = LabUser {
            name: name.into(),
            uid: u.uid.as_raw(),
            gid: u.gid.as_raw(),
            home: home.to_path_buf(),
        };
        // Theirs alone, whatever the system's HOME_MODE: the controller must not read it.
        set_mode(home, 0o700)?;
        Ok(user)
    }

    /// Writes `text` to `name` in the user's home, owned by the user.
    pub fn write(&self, name: &str, text: &str) -> Result<PathBuf> {
        let p = self.home.join(name);
        std::fs::write(&p, text).map_err(LabError::io(&p))?;
        nix::unistd::chown(
            &p,
            Some(nix::unistd::Uid::from_raw(self.uid)),
            Some(nix::unistd::Gid::from_raw(self.gid)),
        )
        .map_err(|e| LabError::io(&p)(std::io::Error::from(e)))?;
        Ok(p)
    }
}

/// Whether `name` is a lab user's: `tlab` and four hex digits (a lab prefix), then `u`.
pub fn is_lab_user(name: &str) -> bool {
    name.strip_prefix(crate::layout::PREFIX_ROOT)
        .and_then(|r| r.strip_suffix('u'))
        .is_some_and(|hex| hex.len() == 4 && hex.chars().all(|c| c.is_ascii_hexdigit()))
}

/// Removes every lab user left on this machine (`teesfs lab clean`); their names.
pub fn remove_lab_users() -> Vec<String> {
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
    passwd
        .lines()
        .filter_map(|l| l.split(':').next())
        .filter(|n| is_lab_user(n))
        .filter(|n| {
            Command::new("userdel")
                .args(["--remove", n])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        })
        .map(str::to_string)
        .collect()
}

impl Drop for LabUser {
    fn drop(&mut self) {
        let removed = Command::new("userdel")
            .args(["--remove", &self.name])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        if !removed.is_ok_and(|s| s.success()) {
            tracing::warn!("could not remove the lab user {}: userdel -r it", self.name);
        }
    }
}

/// Slurm run as a site runs it, with the seeder on the login node. Dropping it stops
/// Slurm, then the seeder, then removes the lab user.
#[derive(Debug)]
pub struct SiteSlurm<'a> {
    /// Slurm itself (clients, jobs).
    pub slurm: Slurm<'a>,
    seeder: NodeProc,
    /// The unprivileged user who submits.
    pub user: LabUser,
    dir: PathBuf,
    lab: &'a Lab,
}

impl Lab {
    /// Starts Slurm as a site runs it ([`SiteSlurm`]); `plugin` is the SPANK plugin
    /// (`libteesfs_spank.so`).
    pub fn start_site_slurm(&self, plugin: &Path) -> Result<SiteSlurm<'_>> {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let dir = self
            .work()
            .join(format!("site{}", NEXT.fetch_add(1, Ordering::Relaxed)));
        mkdir(&dir, 0o755)?;
        let user = LabUser::create(&format!("{}u", self.layout().prefix), &dir.join("home"))?;
        self.share_store(&user)?;
        let scripts = self.site_scripts(&dir, plugin)?;
        let slurm = self.start_slurm_with(scripts)?;
        // The controller's scripts call scontrol when a start fails: the lab's slurm.conf
        // stands in for the site's /etc/slurm/slurm.conf, and exists only now.
        let ctl_env = format!(
            "{} SLURM_CONF={}",
            self.ctl_env(&dir),
            slurm.conf().display()
        );
        for script in ["prolog-slurmctld.sh", "epilog-slurmctld.sh"] {
            wrapper(&dir, script, &ctl_env)?;
        }
        let conf = dir.join("teesfs.toml");
        std::fs::write(&conf, self.site_toml(&dir, &slurm.munge_socket()))
            .map_err(LabError::io(&conf))?;
        let seeder = self.start_seeder(&dir)?;
        Ok(SiteSlurm {
            slurm,
            seeder,
            user,
            dir,
            lab: self,
        })
    }

    /// Makes the lab's store the publishing group's, as docs/slurm.md has a site do with
    /// one store for many users: every directory setgid and group-writable, owned by the
    /// lab user's group, and the lock group-writable; the lab (root) published first.
    fn share_store(&self, user: &LabUser) -> Result<()> {
        let store = self.work().join("store");
        if !store.exists() {
            mkdir(&store, 0o2775)?;
        }
        let gid = nix::unistd::Gid::from_raw(user.gid);
        for e in walkdir::WalkDir::new(&store) {
            let e = e.map_err(|e| LabError::io(&store)(std::io::Error::other(e)))?;
            let p = e.path();
            nix::unistd::chown(p, None, Some(gid))
                .map_err(|e| LabError::io(p)(std::io::Error::from(e)))?;
            if e.file_type().is_dir() {
                set_mode(p, 0o2775)?;
            } else if p.file_name().is_some_and(|n| n == ".lock") {
                set_mode(p, 0o664)?;
            }
        }
        Ok(())
    }

    /// The packaged scripts and their wrappers (the lab's /etc/teesfs/slurm.env), the log
    /// directories, the trusted key, and the plugin line.
    fn site_scripts(&self, dir: &Path, plugin: &Path) -> Result<SlurmScripts> {
        let slurm = nix::unistd::User::from_name("slurm")
            .ok()
            .flatten()
            .ok_or_else(|| {
                LabError::Shape("no user slurm (the Debian slurmctld package makes it)".into())
            })?;
        let ctl_log = dir.join("ctl-log");
        mkdir(&ctl_log, 0o711)?;
        nix::unistd::chown(&ctl_log, Some(slurm.uid), Some(slurm.gid))
            .map_err(|e| LabError::io(&ctl_log)(std::io::Error::from(e)))?;
        mkdir(&dir.join("seeder-log"), 0o711)?;
        mkdir(&dir.join("config/trusted"), 0o755)?;
        let trusted = dir.join("config/trusted/publisher.pub");
        std::fs::copy(self.work().join("publisher.pub"), &trusted)
            .map_err(LabError::io(&trusted))?;
        for (name, text) in SCRIPTS {
            let p = dir.join(name);
            std::fs::write(&p, text).map_err(LabError::io(&p))?;
        }
        let bin = self.teesfs_bin().display().to_string();
        let ctl_env = self.ctl_env(dir);
        // The nodes read the site's file too, as every host of a site reads its
        // /etc/teesfs/teesfs.toml: a login-side mistake there must not stop a release.
        let node_env = format!(
            "TEESFS={bin} TEESFS_CONTROL={}/$(hostname)/sock TEESFS_SITE_CONFIG={}",
            self.work().display(),
            dir.join("teesfs.toml").display()
        );
        Ok(SlurmScripts {
            prolog_slurmctld: Some(wrapper(dir, "prolog-slurmctld.sh", &ctl_env)?),
            epilog: Some(wrapper(dir, "epilog.sh", &node_env)?),
            epilog_slurmctld: Some(wrapper(dir, "epilog-slurmctld.sh", &ctl_env)?),
            slurm_user: Some("slurm".into()),
            own_controller: true,
            // Each node's daemon listens on its own control socket, as it mounts under its
            // own directory: an image job's tasks ask it for the image's config.
            plugstack: vec![format!(
                "optional {} teesfs={bin} mount_root={work}/%h/jobs control={work}/%h/sock",
                plugin.display(),
                work = self.work().display()
            )],
            // A job requeued after a failed start waits this long, not Slurm's 120 s.
            cred_expire: Some(REQUEUE_WAIT_S),
        })
    }

    /// The controller's /etc/teesfs/slurm.env, as the wrappers export it.
    fn ctl_env(&self, dir: &Path) -> String {
        format!(
            "TEESFS={} TEESFS_SLURM_LOGDIR={} TEESFS_SITE_CONFIG={}",
            self.teesfs_bin().display(),
            dir.join("ctl-log").display(),
            dir.join("teesfs.toml").display()
        )
    }

    /// The lab's site configuration: the store, the tree and credentials of the login node,
    /// and the seeder there.
    fn site_toml(&self, dir: &Path, munge_socket: &Path) -> String {
        let login = self
            .layout()
            .node("login")
            .map(|n| n.addr().to_string())
            .unwrap_or_default();
        let work = self.work();
        format!(
            "# The lab's /etc/teesfs/teesfs.toml (lab/src/slurm/site.rs).\n\
             [store]\npath = {store:?}\n\
             [root]\nhost = \"login\"\n\
             [topology]\ncluster = {cluster:?}\ngroup_size = {group}\n\
             [tree]\nstrategy = \"topo\"\n\
             [network]\nidentity = {id:?}\nhosts = {hosts:?}\n\
             [seeder]\nhost = \"{login}:{SEEDER_PORT}\"\nlisten = \"{login}:{SEEDER_PORT}\"\n\
             allow = [\"slurm\"]\nlogdir = {log:?}\nmunge_socket = {munge:?}\n",
            store = work.join("store"),
            cluster = self.layout().hostlist(),
            group = self.layout().spec.group_size,
            id = work.join("cluster"),
            hosts = work.join("hosts"),
            log = dir.join("seeder-log"),
            munge = munge_socket,
        )
    }

    /// `teesfs seeder` on the login node, as root; returns once it listens.
    fn start_seeder(&self, dir: &Path) -> Result<NodeProc> {
        let login = self
            .layout()
            .node("login")
            .ok_or_else(|| LabError::Shape("no login node".into()))?
            .netns
            .clone();
        let log = dir.join("seeder.log");
        let mut cmd = crate::proc::in_net(&login, self.teesfs_bin());
        cmd.arg("seeder")
            .env("TEESFS_SITE_CONFIG", dir.join("teesfs.toml"))
            .env("TEESFS_CONFIG", dir.join("config"))
            .env("TEESFS_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log_file(&log)?);
        let child = cmd.spawn().map_err(|source| LabError::Spawn {
            program: "nsenter".into(),
            source,
        })?;
        let mut p = NodeProc::new("login", log.clone(), child);
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            check_interrupt()?;
            let said = std::fs::read_to_string(&log).unwrap_or_default();
            if said.contains("listening on") {
                return Ok(p);
            }
            if !p.alive() || Instant::now() > deadline {
                return Err(LabError::Daemon {
                    host: "login".into(),
                    reason: format!("teesfs seeder did not listen: {}", said.trim()),
                    log,
                });
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// An executable wrapper `dir/<script>.wrapper` that exports `env` (the lab's
/// /etc/teesfs/slurm.env) and runs the packaged `dir/<script>`.
fn wrapper(dir: &Path, script: &str, env: &str) -> Result<PathBuf> {
    let p = dir.join(format!("{script}.wrapper"));
    let text = format!(
        "#!/bin/sh\nexport {env}\nexec sh {}\n",
        dir.join(script).display()
    );
    std::fs::write(&p, text).map_err(LabError::io(&p))?;
    set_mode(&p, 0o755)?;
    Ok(p)
}

fn set_mode(p: &Path, mode: u32) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).map_err(LabError::io(p))
}

fn mkdir(p: &Path, mode: u32) -> Result<()> {
    std::fs::create_dir_all(p).map_err(LabError::io(p))?;
    set_mode(p, mode)
}

impl SiteSlurm<'_> {
    /// The site's directory: `teesfs.toml`, the scripts, `ctl-log/` (the controller's
    /// per-job logs), `seeder-log/` (the seeder's), `seeder.log`.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The controller's log directory (what the prolog writes on `ctl`).
    pub fn ctl_log(&self) -> PathBuf {
        self.dir.join("ctl-log")
    }

    /// The seeder's log directory (each job's log and reports, on `login`).
    pub fn seeder_log(&self) -> PathBuf {
        self.dir.join("seeder-log")
    }

    /// The seeder's own log (its stderr).
    pub fn seeder_output(&self) -> String {
        std::fs::read_to_string(self.dir.join("seeder.log")).unwrap_or_default()
    }

    /// A command run on the controller's host (`ctl`) as `user` (a name), with the
    /// controller's site file: what the prolog runs there.
    pub fn on_ctl(&self, user: &str, program: &str) -> Command {
        let ctl = self
            .lab
            .layout()
            .node("ctl")
            .map(|n| n.netns.clone())
            .unwrap_or_default();
        let mut c = crate::cgroup::nsenter(&ctl);
        c.arg(format!("--net=/run/netns/{ctl}"))
            .args(["setpriv", "--pdeathsig", "KILL"])
            .arg(format!("--reuid={user}"))
            .arg(format!("--regid={user}"))
            .args(["--clear-groups", "--"])
            .arg(program)
            .env("TEESFS_SITE_CONFIG", self.dir.join("teesfs.toml"));
        c
    }

    /// Publishes a small layer (`/opt/lab-<tag>/hello.sh`) and writes the user's
    /// `manifest.toml` (the layer and its urgent files: the site file gives the rest) and
    /// `job.sh` (every node runs the layer's script) into the user's home.
    pub fn prepare_job(&self, tag: &str) -> Result<()> {
        let layer = self.dir.join(format!("layer-{tag}"));
        let app = layer.join(format!("opt/lab-{tag}"));
        mkdir(&app, 0o755)?;
        let hello = app.join("hello.sh");
        std::fs::write(
            &hello,
            format!("#!/bin/sh\necho \"$(hostname) $(id -u) hello from lab-{tag}\"\n"),
        )
        .map_err(LabError::io(&hello))?;
        let index = self.lab.publish(&layer)?;
        self.user.write(
            "manifest.toml",
            &format!("[layer]\nindex = {index:?}\n[launch]\nurgent = [\"opt/lab-{tag}/*\"]\n"),
        )?;
        let job = self.user.write(
            "job.sh",
            &format!("#!/bin/sh\nsrun sh /opt/lab-{tag}/hello.sh\n"),
        )?;
        set_mode(&job, 0o755)
    }

    /// The line a user types, ready to paste into a root shell on the host: on the login
    /// node, as the lab user, in their home, `sbatch --teesfs=manifest.toml job.sh` over
    /// every node. `--parsable` prints the job id; the output goes to `job-<id>.out`.
    pub fn sbatch_line(&self) -> String {
        let login = self
            .lab
            .layout()
            .node("login")
            .map(|n| n.netns.clone())
            .unwrap_or_default();
        format!(
            "cd {home} && nsenter --net=/run/netns/{login} setpriv --reuid={u} --regid={u} \
             --clear-groups env SLURM_CONF={conf} sbatch --parsable -N {n} \
             --teesfs=manifest.toml -o 'job-%j.out' job.sh",
            home = self.user.home.display(),
            u = self.user.name,
            conf = self.slurm.conf().display(),
            n = self.slurm.hosts().len(),
        )
    }

    /// Runs [`SiteSlurm::sbatch_line`] in a shell; the job id.
    pub fn submit_line(&self) -> Result<JobId> {
        let out = crate::sh::output(Command::new("sh").args(["-c", &self.sbatch_line()]), "sh")?;
        if !out.status.success() {
            return Err(LabError::Command {
                command: self.sbatch_line(),
                stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
            });
        }
        let text = String::from_utf8_lossy(&out.stdout);
        text.trim()
            .split(';')
            .next()
            .and_then(|s| s.parse().ok())
            .map(JobId)
            .ok_or_else(|| LabError::Parse {
                what: "sbatch --parsable output".into(),
                detail: text.into_owned(),
            })
    }
}

impl Drop for SiteSlurm<'_> {
    fn drop(&mut self) {
        // Jobs of the lab user first, so that userdel finds none of its processes.
        let id = self.user.name.clone();
        let _ = self.slurm.run(
            "scancel",
            &[&format!("--user={id}")],
            Duration::from_secs(10),
        );
        self.seeder.stop(Duration::from_secs(5));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_lab_users_are_taken_for_lab_users() {
        assert!(is_lab_user("tlab3f2au"));
        for other in [
            "tlab3f2a",
            "tlab3f2axu",
            "tlabzzzzu",
            "slurm",
            "tlab3f2a0u",
            "root",
        ] {
            assert!(!is_lab_user(other), "{other}");
        }
    }
}

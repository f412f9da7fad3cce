//! A cluster of real `teesfs daemon` processes on loopback, with real QUIC, real mutual TLS
//! and real FUSE mounts, torn down by Drop (daemons stopped, leftover mounts detached).

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::util::{Workspace, is_mounted, teesfs_bin};

/// One daemon.
pub struct Node {
    pub host: String,
    pub addr: String,
    pub dir: PathBuf,
    /// Its identity directory: the cluster's `creds`, or one of its own.
    pub identity: PathBuf,
    child: Option<Child>,
}

impl Node {
    pub fn control(&self) -> PathBuf {
        self.dir.join("sock")
    }
}

/// The cluster.
pub struct Cluster {
    pub ws: Workspace,
    pub nodes: Vec<Node>,
    pub creds: PathBuf,
    /// The daemons' `TEESFS_LOG`.
    log: &'static str,
}

/// `teesfs daemon` as `host` with its state, mounts and control socket under `dir`, on a
/// loopback port of its choice.
pub fn daemon_command(ws: &Workspace, creds: &Path, host: &str, dir: &Path) -> Command {
    daemon_command_at(ws, creds, host, dir, "127.0.0.1:0")
}

/// [`daemon_command`] listening at `listen`.
fn daemon_command_at(
    ws: &Workspace,
    creds: &Path,
    host: &str,
    dir: &Path,
    listen: &str,
) -> Command {
    let mut c = Command::new(teesfs_bin());
    c.args(["daemon", "--host", host, "--listen", listen, "--identity"])
        .arg(creds)
        .arg("--state-dir")
        .arg(dir.join("state"))
        .arg("--mount-root")
        .arg(dir.join("jobs"))
        .arg("--control")
        .arg(dir.join("sock"))
        .arg("--trust")
        .arg(ws.pubkey());
    c
}

fn spawn_daemon(
    ws: &Workspace,
    creds: &Path,
    host: &str,
    dir: &Path,
    extra: &[&str],
    log: &str,
) -> (Child, String) {
    spawn_daemon_at(ws, creds, host, dir, extra, "127.0.0.1:0", log)
}

fn spawn_daemon_at(
    ws: &Workspace,
    creds: &Path,
    host: &str,
    dir: &Path,
    extra: &[&str],
    listen: &str,
    log: &str,
) -> (Child, String) {
    std::fs::create_dir_all(dir).expect("node dir");
    let mut child = daemon_command_at(ws, creds, host, dir, listen)
        .args(extra)
        .env("TEESFS_LOG", log)
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(dir.join("daemon.log")).expect("log"))
        .spawn()
        .expect("spawn daemon");
    let out = child.stdout.take().expect("piped");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut lines = BufReader::new(out).lines();
        if let Some(Ok(l)) = lines.next() {
            let _ = tx.send(l);
        }
        for _ in lines {}
    });
    let line = rx
        .recv_timeout(Duration::from_secs(30))
        .unwrap_or_else(|_| {
            panic!(
                "daemon {host} did not start: {}",
                std::fs::read_to_string(dir.join("daemon.log")).unwrap_or_default()
            )
        });
    let addr = line
        .strip_prefix("listening on ")
        .and_then(|r| r.split_whitespace().next())
        .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
        .to_string();
    (child, addr)
}

/// An identity directory of `host`'s own at `dir`, copied from the cluster directory
/// `creds`: the CA certificate and the host's certificate and key, nothing else.
fn own_identity(creds: &Path, host: &str, dir: &Path) -> PathBuf {
    std::fs::create_dir_all(dir).expect("identity dir");
    for name in [
        "ca.crt".to_string(),
        format!("{host}.crt"),
        format!("{host}.key"),
    ] {
        std::fs::copy(creds.join(&name), dir.join(&name)).expect("copy a credential");
    }
    dir.to_path_buf()
}

/// `push_cmd` extras for a push nobody will accept: two children per node, and it gives up
/// after a 1 s deadline instead of waiting for the default liveness timing.
pub const QUICK_GIVE_UP: [&str; 8] = [
    "--width",
    "2",
    "--deadline",
    "1s",
    "--heartbeat",
    "200ms",
    "--timeout",
    "20s",
];

impl Cluster {
    /// `n` daemons named n01..; `extra(i)` adds arguments to daemon `i`.
    pub fn start(n: usize, extra: impl Fn(usize) -> Vec<String>) -> Self {
        Self::start_as(n, extra, None, "teesfs=info")
    }

    /// [`Cluster::start`] with the daemons logging at `log` (`TEESFS_LOG`).
    pub fn start_logging(
        n: usize,
        log: &'static str,
        extra: impl Fn(usize) -> Vec<String>,
    ) -> Self {
        Self::start_as(n, extra, None, log)
    }

    /// [`Cluster::start`], every daemon with an identity directory of its own
    /// (`<its dir>/identity`: `ca.crt` and its certificate and key) while `creds` stays the
    /// login node's, so a CRL written there reaches a node only if something carries it.
    /// Certificates are also made in `creds` for `more` (hosts without a daemon); the
    /// daemons log at `log`.
    pub fn start_own_identities(
        n: usize,
        more: &str,
        log: &'static str,
        extra: impl Fn(usize) -> Vec<String>,
    ) -> Self {
        Self::start_as(n, extra, Some(more), log)
    }

    fn start_as(
        n: usize,
        extra: impl Fn(usize) -> Vec<String>,
        own_identities: Option<&str>,
        log: &'static str,
    ) -> Self {
        let ws = Workspace::new();
        let creds = ws.path().join("cluster");
        let mut names = format!("login,n[01-{n:02}]");
        if let Some(more) = own_identities {
            names = format!("{names},{more}");
        }
        let out = ws.teesfs(&[
            "keygen",
            "--cluster",
            creds.to_str().expect("utf8"),
            "--nodes",
            &names,
        ]);
        assert!(out.status.success(), "keygen --cluster: {out:?}");
        let mut nodes = Vec::new();
        for i in 0..n {
            let host = format!("n{:02}", i + 1);
            let dir = ws.path().join(&host);
            let args = extra(i);
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let identity = match own_identities {
                Some(_) => own_identity(&creds, &host, &dir.join("identity")),
                None => creds.clone(),
            };
            let (child, addr) = spawn_daemon(&ws, &identity, &host, &dir, &args, log);
            nodes.push(Node {
                host,
                addr,
                dir,
                identity,
                child: Some(child),
            });
        }
        let hosts: String = nodes
            .iter()
            .map(|n| format!("{} {}\n", n.host, n.addr))
            .collect();
        std::fs::write(ws.path().join("hosts"), hosts).expect("hosts file");
        Self {
            ws,
            nodes,
            creds,
            log,
        }
    }

    pub fn hosts_file(&self) -> PathBuf {
        self.ws.path().join("hosts")
    }

    /// `teesfs push` of `index` to every node with groups of `group`; extra args appended.
    pub fn push_cmd(&self, index: &str, group: usize, extra: &[&str]) -> Command {
        let mut c = Command::new(teesfs_bin());
        c.args(["push", "--quiet", "--store"])
            .arg(self.ws.store())
            .args(["--index", index, "--nodes"])
            .arg(format!("n[01-{:02}]", self.nodes.len()))
            .args(["--group-size", &group.to_string(), "--identity"])
            .arg(&self.creds)
            .arg("--hosts")
            .arg(self.hosts_file())
            .args(["--listen", "127.0.0.1:0", "--trust"])
            .arg(self.ws.pubkey())
            .args(extra)
            .env("TEESFS_CONFIG", self.ws.path().join("config"));
        c
    }

    /// The status JSON of node `i`.
    pub fn status(&self, i: usize) -> serde_json::Value {
        let out = self.ws.teesfs(&[
            "status",
            "--json",
            "--control",
            self.nodes[i].control().to_str().expect("utf8"),
        ]);
        assert!(
            out.status.success(),
            "status of {}: {out:?}",
            self.nodes[i].host
        );
        serde_json::from_slice(&out.stdout).expect("status JSON")
    }

    /// The mountpoint of node `i`'s only job, once it is mounted.
    pub fn mount_of(&self, i: usize) -> PathBuf {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let st = self.status(i);
            if let Some(mp) = st["jobs"][0]["mountpoint"].as_str() {
                let mp = PathBuf::from(mp);
                if is_mounted(&mp) {
                    return mp;
                }
            }
            assert!(
                Instant::now() < deadline,
                "{} never mounted its job",
                self.nodes[i].host
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Kills node `i` with SIGKILL (no chance to clean up, like a crash).
    pub fn kill(&mut self, i: usize) {
        if let Some(mut c) = self.nodes[i].child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts node `i` again with the same directories (a new port).
    pub fn restart(&mut self, i: usize) {
        self.restart_with(i, &[]);
    }

    /// [`Cluster::restart`] with `extra` arguments.
    pub fn restart_with(&mut self, i: usize, extra: &[&str]) {
        self.kill(i);
        let n = &self.nodes[i];
        let (child, addr) = spawn_daemon(&self.ws, &n.identity, &n.host, &n.dir, extra, self.log);
        self.nodes[i].child = Some(child);
        self.nodes[i].addr = addr;
    }

    /// Kills node `i` with SIGKILL and starts it again at the same address with the same
    /// directories: a crashed daemon brought back by systemd, or a rebooted node.
    pub fn restart_in_place(&mut self, i: usize) {
        self.restart_in_place_with(i, &[]);
    }

    /// [`Cluster::restart_in_place`] with `extra` arguments.
    pub fn restart_in_place_with(&mut self, i: usize, extra: &[&str]) {
        self.kill(i);
        let n = &self.nodes[i];
        let (child, addr) = spawn_daemon_at(
            &self.ws,
            &n.identity,
            &n.host,
            &n.dir,
            extra,
            &n.addr,
            self.log,
        );
        assert_eq!(addr, n.addr, "restarted at the same address");
        self.nodes[i].child = Some(child);
    }

    /// Stops node `i` with SIGTERM and waits for it to exit (an upgrade's or
    /// `systemctl restart`'s stop).
    pub fn stop(&mut self, i: usize) {
        if let Some(mut c) = self.nodes[i].child.take() {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(c.id() as i32),
                nix::sys::signal::Signal::SIGTERM,
            );
            let _ = c.wait();
        }
    }

    /// Pid of node `i`'s daemon while it runs.
    pub fn pid(&self, i: usize) -> Option<u32> {
        self.nodes[i].child.as_ref().map(Child::id)
    }

    pub fn alive(&self, i: usize) -> bool {
        self.nodes[i].child.is_some()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for n in &mut self.nodes {
            if let Some(c) = &n.child {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(c.id() as i32),
                    nix::sys::signal::Signal::SIGTERM,
                );
            }
        }
        for n in &mut self.nodes {
            if let Some(mut c) = n.child.take() {
                let deadline = Instant::now() + Duration::from_secs(10);
                while Instant::now() < deadline {
                    if let Ok(Some(_)) = c.try_wait() {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
                let _ = c.kill();
                let _ = c.wait();
            }
        }
        // Crashed daemons leave their FUSE mounts behind: detach whatever is under us.
        let root =
            std::fs::canonicalize(self.ws.path()).unwrap_or_else(|_| self.ws.path().to_path_buf());
        let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        for l in mounts.lines() {
            if let Some(mp) = l.split(' ').nth(4)
                && mp.starts_with(root.to_str().unwrap_or("/nonexistent"))
            {
                let _ = nix::mount::umount2(mp, nix::mount::MntFlags::MNT_DETACH);
            }
        }
    }
}

//! `teesfs seeder`: the service on a login or data-mover node that roots every Slurm job's
//! tree, so that the controller needs no store, no home directories and no key.
//!
//! The controller's prolog (`teesfs handoff`) sends one munge credential per job; its
//! payload is the job ([`teesfs_node::handoff::Request`]): nodes, owner, and the spec's text as
//! the SPANK plugin read it at submit. Only credentials of the site's `[seeder] allow` users
//! are taken; munge refuses forged, expired and replayed ones. The seeder then runs the same
//! `teesfs prefetch` (or `learn`) as a child, streams its output lines back and then its exit
//! status, and kills it if the prolog goes away. Each job's log and report stay in the
//! seeder's log directory, readable by the job's owner.

use std::collections::HashSet;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use teesfs_node::handoff::{Kind, MAX_LINE, Reply, Request, parse_unmunge};

/// Arguments of `teesfs seeder`.
#[derive(Debug, clap::Args)]
#[command(after_long_help = "\
Examples:
  systemctl enable --now teesfs-seeder     # as packaged, on the login or data-mover node
  teesfs seeder --listen 0.0.0.0:7412 --allow slurm

The controller's prolog hands each job here when the site's teesfs.toml names this host in
[seeder] host (see teesfs.toml(5) and /usr/share/doc/teesfs/slurm.md). This host then needs
the store, the login node's credentials ([network] identity) and munge with the cluster's key;
the controller needs none of them.")]
pub struct SeederArgs {
    /// Where to listen (default: the site's [seeder] listen, else 0.0.0.0:7412).
    #[arg(long, value_name = "ADDR")]
    listen: Option<SocketAddr>,
    /// A user (name or uid) whose munge credentials are taken, repeatable (default: the
    /// site's [seeder] allow, else `slurm`): the controller's SlurmUser.
    #[arg(long = "allow", value_name = "USER")]
    allow: Vec<String>,
    /// Where each job's log and reports go (default: the site's [seeder] logdir, else
    /// /var/log/teesfs).
    #[arg(long, value_name = "DIR")]
    logdir: Option<PathBuf>,
    /// munged's socket (default: the site's [seeder] munge_socket, else munge's own).
    #[arg(long, value_name = "PATH")]
    munge_socket: Option<PathBuf>,
    /// Most jobs handled at once; more are refused, naming this limit.
    #[arg(long, default_value_t = 256, value_name = "N")]
    max_jobs: usize,
}

/// What every connection needs.
struct Service {
    allowed: HashSet<u32>,
    logdir: PathBuf,
    munge_socket: Option<PathBuf>,
    spool: tempfile::TempDir,
    teesfs: PathBuf,
    host: String,
}

/// Runs `teesfs seeder` until killed.
pub fn run(args: SeederArgs) -> anyhow::Result<()> {
    let site = teesfs_node::site::load_lenient(&teesfs_node::site::main_path())?;
    if let Some(p) = site
        .problems
        .iter()
        .find(|p| p.is_invalid() && p.section == "seeder")
    {
        anyhow::bail!("{p}: fix the site configuration (`teesfs config check`)");
    }
    let conf = site.config.seeder;
    let names = if args.allow.is_empty() {
        conf.allow()
    } else {
        args.allow.clone()
    };
    let allowed = names
        .iter()
        .map(|u| uid_of(u))
        .collect::<anyhow::Result<_>>()?;
    let logdir = args.logdir.clone().unwrap_or_else(|| conf.logdir());
    make_logdir(&logdir)?;
    let listen = args.listen.unwrap_or_else(|| conf.listen());
    let listener = TcpListener::bind(listen).with_context(|| {
        format!("cannot listen on {listen}: pick a free address ([seeder] listen or --listen)")
    })?;
    let service = Arc::new(Service {
        allowed,
        logdir,
        munge_socket: args.munge_socket.clone().or(conf.munge_socket),
        spool: tempfile::Builder::new()
            .prefix("teesfs-seeder")
            .tempdir()
            .context("a private directory for the jobs' specs")?,
        teesfs: std::env::current_exe().context("finding the teesfs binary")?,
        host: nix::unistd::gethostname()
            .ok()
            .and_then(|h| h.into_string().ok())
            .unwrap_or_default(),
    });
    tracing::info!(
        addr = %listener.local_addr().unwrap_or(listen),
        users = ?names,
        "seeder listening"
    );
    errln!(
        "teesfs seeder: listening on {}, taking jobs from {}",
        listener.local_addr().unwrap_or(listen),
        names.join(", ")
    );
    let _ = sd_notify::notify(&[sd_notify::NotifyState::Ready]);
    let active = Arc::new(AtomicUsize::new(0));
    for conn in listener.incoming() {
        let Ok(mut conn) = conn else { continue };
        if active.fetch_add(1, Ordering::SeqCst) >= args.max_jobs {
            active.fetch_sub(1, Ordering::SeqCst);
            let why = format!(
                "the seeder handles {} jobs already (--max-jobs); the prolog may retry",
                args.max_jobs
            );
            let _ = conn.write_all(Reply::Refused(why).encode().as_bytes());
            continue;
        }
        let (service, active) = (service.clone(), active.clone());
        std::thread::spawn(move || {
            service.serve(conn);
            active.fetch_sub(1, Ordering::SeqCst);
        });
    }
    Ok(())
}

/// A uid from a user name or a number of `[seeder] allow`.
fn uid_of(user: &str) -> anyhow::Result<u32> {
    super::util::uid_of(user).with_context(|| {
        format!(
            "[seeder] allow names {user:?}, not a user on this host: name the controller's \
                 SlurmUser by name or uid"
        )
    })
}

/// The log directory: others may enter it, not list it (each job's files are shared with
/// the job's owner by an ACL entry).
fn make_logdir(dir: &Path) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    if !dir.is_dir() {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("creating the log directory {}", dir.display()))?;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o711))
            .with_context(|| format!("chmod 0711 {}", dir.display()))?;
    }
    Ok(())
}

impl Service {
    /// One prolog's connection: the request, then the push's output and status.
    fn serve(&self, mut conn: TcpStream) {
        let peer = conn
            .peer_addr()
            .map_or_else(|_| "?".into(), |a| a.ip().to_string());
        let req = match self.request(&conn) {
            Ok(r) => r,
            Err(why) => {
                tracing::warn!(from = %peer, "refused a job: {why:#}");
                let _ = conn.write_all(Reply::Refused(format!("{why:#}")).encode().as_bytes());
                return;
            }
        };
        let span = tracing::info_span!("job", job = %req.job, from = %peer);
        let _g = span.enter();
        tracing::info!(uid = req.uid, kind = ?req.kind, nodes = %req.nodes, "job handed over");
        let code = match self.push(&req, &peer, &conn) {
            Ok(code) => code,
            Err(e) => {
                tracing::error!("job {}: {e:#}", req.job);
                let line = format!("teesfs seeder on {}: {e:#}", self.host);
                let _ = conn.write_all(Reply::Line(line).encode().as_bytes());
                1
            }
        };
        let _ = conn.write_all(Reply::Exit(code).encode().as_bytes());
        let _ = conn.shutdown(std::net::Shutdown::Both);
    }

    /// Reads, authenticates and decodes the request on `conn`.
    fn request(&self, conn: &TcpStream) -> anyhow::Result<Request> {
        conn.set_read_timeout(Some(Duration::from_secs(30)))
            .context("setting a read timeout")?;
        let mut line = String::new();
        BufReader::new(conn.take(MAX_LINE as u64))
            .read_line(&mut line)
            .context("reading the request")?;
        conn.set_read_timeout(None)
            .context("clearing the timeout")?;
        let (uid, payload) = self.unmunge(line.trim())?;
        if !self.allowed.contains(&uid) {
            anyhow::bail!(
                "the credential is uid {uid}'s, not one this seeder takes jobs from ([seeder] \
                 allow: the controller's SlurmUser)"
            );
        }
        Ok(Request::decode(&payload)?)
    }

    /// The uid that made `credential` and its payload, or why munge refuses it.
    fn unmunge(&self, credential: &str) -> anyhow::Result<(u32, Vec<u8>)> {
        let mut cmd = Command::new("unmunge");
        if let Some(s) = &self.munge_socket {
            cmd.arg(format!("--socket={}", s.display()));
        }
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .context("running unmunge (install munge on the seeder's host)")?;
        if let Some(mut stdin) = child.stdin.take() {
            let _ = stdin.write_all(credential.as_bytes());
        }
        let out = child.wait_with_output().context("running unmunge")?;
        if !out.status.success() {
            // A bad credential is named on stderr; a replayed or expired one in its STATUS.
            let stderr = String::from_utf8_lossy(&out.stderr);
            let stderr = stderr.trim().trim_start_matches("unmunge: Error: ");
            let said = match parse_unmunge(&out.stdout) {
                Err(teesfs_node::Error::Handoff { problem, .. }) if stderr.is_empty() => problem,
                _ => stderr.to_string(),
            };
            anyhow::bail!(
                "munge refused the credential: {said} (a forged, expired or replayed \
                 credential, or munge keys that differ between the controller and the seeder)"
            );
        }
        let u = parse_unmunge(&out.stdout)?;
        Ok((u.uid, u.payload))
    }

    /// Runs the child for `req`, streaming its lines to `conn` and its log; its status.
    fn push(&self, req: &Request, peer: &str, conn: &TcpStream) -> anyhow::Result<i32> {
        let (log_path, mut cmd, spool) = self.child(req)?;
        // The spec's copy goes when the push ends, whatever its outcome.
        let _spool = spool.and_then(|p| tempfile::TempPath::try_from_path(p).ok());
        let mut log = open_log(&log_path)?;
        let mut out = conn.try_clone().context("the connection")?;
        let head = format!(
            "teesfs seeder on {}: job {} from {peer} (uid {}, nodes {})",
            self.host, req.job, req.uid, req.nodes
        );
        let _ = writeln!(log, "{head}");
        let mut sent = out.write_all(Reply::Line(head).encode().as_bytes()).is_ok();
        let (reader, writer) = std::io::pipe().context("a pipe for the child's output")?;
        cmd.stdin(Stdio::null())
            .stdout(writer.try_clone().context("the pipe")?)
            .stderr(writer);
        let child = cmd.spawn().context("starting the push")?;
        drop(cmd);
        let child = Arc::new(Mutex::new(Some(child)));
        let watcher = watch_disconnect(conn, child.clone())?;
        for line in BufReader::new(reader).lines() {
            let Ok(line) = line else { break };
            let _ = writeln!(log, "{line}");
            if sent
                && out
                    .write_all(Reply::Line(line).encode().as_bytes())
                    .is_err()
            {
                sent = false;
                kill(&child, "its prolog's connection closed");
            }
        }
        let status = {
            let mut held = child.lock().unwrap_or_else(|e| e.into_inner());
            match held.take() {
                Some(mut c) => c.wait().context("waiting for the push")?,
                None => anyhow::bail!("the push was killed"),
            }
        };
        let _ = conn.shutdown(std::net::Shutdown::Read);
        let _ = watcher.join();
        use std::os::unix::process::ExitStatusExt;
        let code = status
            .code()
            .unwrap_or_else(|| 128 + status.signal().unwrap_or(0));
        if req.kind == Kind::Prefetch {
            self.send_drains(req, &mut log, &mut out);
        }
        let _ = writeln!(log, "exit {code}");
        Ok(code)
    }

    /// Where the push of `req` writes the nodes it failed because of (`--drain-list`).
    fn drain_list(&self, req: &Request) -> PathBuf {
        self.spool.path().join(format!("job-{}.drain", req.job))
    }

    /// Sends the prolog the nodes to drain, as [`Reply::Drain`], and logs them.
    fn send_drains(&self, req: &Request, log: &mut std::fs::File, out: &mut TcpStream) {
        let path = self.drain_list(req);
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        let _ = std::fs::remove_file(&path);
        for (host, reason) in text.lines().filter_map(|l| l.split_once('\t')) {
            tracing::warn!(node = host, "the push failed because of {host}: {reason}");
            let _ = writeln!(log, "the controller drains {host}: {reason}");
            let reply = Reply::Drain {
                host: host.into(),
                reason: reason.into(),
            };
            let _ = out.write_all(reply.encode().as_bytes());
        }
    }

    /// The per-job log and the child command for `req`.
    fn child(&self, req: &Request) -> anyhow::Result<(PathBuf, Command, Option<PathBuf>)> {
        let (spec, base) = match &req.spec_text {
            Some(text) => {
                let p = self
                    .spool
                    .path()
                    .join(format!("{:?}-{}.toml", req.kind, req.job).to_lowercase());
                std::fs::write(&p, text).with_context(|| format!("writing {}", p.display()))?;
                let base = req
                    .spec_path
                    .parent()
                    .map(Path::to_path_buf)
                    .unwrap_or_else(|| PathBuf::from("/"));
                (p, Some(base))
            }
            None => (req.spec_path.clone(), None),
        };
        let job = req.job.to_string();
        let mut cmd = Command::new(&self.teesfs);
        let log = match req.kind {
            Kind::Prefetch => {
                let report = |ext: &str| self.logdir.join(format!("job-{job}.{ext}"));
                cmd.arg("prefetch")
                    .arg(&spec)
                    .args(["--nodes", &req.nodes, "--job", &job, "--quiet"])
                    .args(["--owner", &req.uid.to_string()])
                    .arg("--report")
                    .arg(report("json"))
                    .arg("--report-html")
                    .arg(report("html"))
                    .arg("--drain-list")
                    .arg(self.drain_list(req));
                report("log")
            }
            Kind::Learn => {
                cmd.arg("learn")
                    .arg("--spec")
                    .arg(&spec)
                    .args(["--nodes", &req.nodes, "--job", &job]);
                self.logdir.join(format!("job-{job}.learn.log"))
            }
        };
        let spool = base.is_some().then(|| spec.clone());
        if let Some(b) = base {
            cmd.arg("--base").arg(b);
        }
        Ok((log, cmd, spool))
    }
}

/// The job's log, readable by the seeder's user alone until the push shares it with the
/// job's owner. Appended to: a job Slurm requeued after a failed start keeps the story of
/// each start.
fn open_log(path: &Path) -> anyhow::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o640)
        .open(path)
        .with_context(|| format!("creating the job's log {}", path.display()))
}

/// Kills the push if it still runs.
fn kill(child: &Mutex<Option<std::process::Child>>, why: &str) {
    let mut held = child.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(c) = held.as_mut()
        && let Ok(None) = c.try_wait()
    {
        tracing::warn!("killing the push: {why}");
        let _ = c.kill();
    }
}

/// A thread that kills the push when the prolog closes its connection (the prolog sends
/// nothing after its request, so a read returns only then).
fn watch_disconnect(
    conn: &TcpStream,
    child: Arc<Mutex<Option<std::process::Child>>>,
) -> anyhow::Result<std::thread::JoinHandle<()>> {
    let mut conn = conn.try_clone().context("the connection")?;
    Ok(std::thread::spawn(move || {
        let mut buf = [0u8; 256];
        loop {
            match conn.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
        }
        kill(&child, "its prolog's connection closed");
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `[seeder] allow` takes names and uids; an unknown name is refused naming the key.
    #[test]
    fn allowed_users_are_names_or_uids_and_an_unknown_name_names_the_key() {
        assert_eq!(uid_of("0").expect("a uid"), 0);
        assert_eq!(uid_of("root").expect("root"), 0);
        let e = uid_of("no-such-user-teesfs")
            .expect_err("unknown")
            .to_string();
        assert!(
            e.contains("[seeder] allow") && e.contains("no-such-user-teesfs"),
            "{e}"
        );
    }

    /// The child of a request: the same `prefetch` the prolog ran, over a copy of the spec's
    /// text whose relative paths start at the spec's own directory, or `learn`.
    #[test]
    fn a_request_runs_prefetch_on_the_specs_text_from_the_specs_directory() {
        let dir = tempfile::tempdir().expect("tempdir");
        let service = Service {
            allowed: HashSet::from([0]),
            logdir: dir.path().join("log"),
            munge_socket: None,
            spool: tempfile::tempdir().expect("spool"),
            teesfs: PathBuf::from("/usr/bin/teesfs"),
            host: "login1".into(),
        };
        let req = Request {
            version: teesfs_node::handoff::VERSION,
            kind: Kind::Prefetch,
            job: teesfs_node::handoff::SlurmJobId(42),
            nodes: "cn[1-4]".into(),
            uid: 1001,
            spec_path: "/home/alice/app/manifest.toml".into(),
            spec_text: Some("[layer]\nindex = \"ab12\"\n".into()),
        };
        let (log, cmd, spool) = service.child(&req).expect("child");
        assert_eq!(log, dir.path().join("log/job-42.log"));
        let spool = spool.expect("a copy of the text");
        assert_eq!(
            std::fs::read_to_string(&spool).expect("copy"),
            "[layer]\nindex = \"ab12\"\n"
        );
        let args: Vec<String> = cmd
            .get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        let line = args.join(" ");
        assert!(line.starts_with("prefetch "), "{line}");
        for want in [
            "--nodes cn[1-4]",
            "--job 42",
            "--owner 1001",
            "--base /home/alice/app",
            "job-42.json",
        ] {
            assert!(line.contains(want), "{want} missing: {line}");
        }
        let learn = Request {
            kind: Kind::Learn,
            spec_text: None,
            ..req
        };
        let (log, cmd, spool) = service.child(&learn).expect("child");
        assert_eq!(log, dir.path().join("log/job-42.learn.log"));
        assert!(spool.is_none(), "without text the spec's own file is read");
        let args: Vec<String> = cmd
            .get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            args.join(" "),
            "learn --spec /home/alice/app/manifest.toml --nodes cn[1-4] --job 42"
        );
    }
}

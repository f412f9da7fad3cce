//! `teesfs doctor --role seeder`: the login or data-mover host where `teesfs seeder` takes
//! the Slurm prolog's jobs and roots their trees. Besides what the login side checks
//! ([`super::login`]: the site file, the store, this host's certificate, the CA key's
//! place, topology, keys), a seeder needs its `[seeder]` settings, munge to check the
//! prolog's credentials, its port, and its credentials and store readable by the user it
//! runs as (root with the packaged unit; `--seeder-user` for a site's own). The facts are
//! gathered by [`gather`]; the verdicts ([`evaluate`]) are pure.

use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

use super::checks::{Check, Found, Level, Unreadable};
use super::login::LoginFacts;

/// Who holds the seeder's port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PortFacts {
    /// Nobody: the seeder does not run.
    Free,
    /// `teesfs seeder` (its pid).
    Seeder(u32),
    /// Another process (what is known of it), or an address that cannot be bound.
    Other(String),
}

/// A file the seeder reads, and its owner and mode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileFacts {
    /// The file (or directory).
    pub path: PathBuf,
    /// Its owner uid, group and mode, or why they cannot be read.
    pub stat: Result<(u32, u32, u32), Unreadable>,
}

/// What the seeder's host holds, gathered before any verdict.
#[derive(Debug, Clone)]
pub struct SeederFacts {
    /// The login side's facts (site, store, certificate, CA key, topology, keys).
    pub login: LoginFacts,
    /// This host's name.
    pub host: String,
    /// `[seeder] host` (where the prolog hands jobs), if set.
    pub seeder_host: Option<String>,
    /// `[seeder] listen` as the seeder takes it.
    pub listen: String,
    /// `[seeder] allow`: each user and its uid, if it resolves.
    pub allow: Vec<(String, Option<u32>)>,
    /// `[seeder] logdir`, and whether the seeder's user may write there (`None`: missing).
    pub logdir: (PathBuf, Option<bool>),
    /// munged's socket: its path, and whether a socket is there.
    pub munge_socket: (PathBuf, bool),
    /// Whether `unmunge` is on the PATH.
    pub unmunge: bool,
    /// Who holds the port.
    pub port: PortFacts,
    /// The user the seeder runs as: name, uid and groups.
    pub user: (String, u32, Vec<u32>),
    /// The files it must read: its certificate and key, the CA's certificate, the store.
    pub reads: Vec<FileFacts>,
}

fn check(name: &'static str, level: Level, detail: String, fix: Option<&str>) -> Check {
    Check {
        name,
        level,
        detail,
        fix: fix.map(str::to_owned),
    }
}

/// The verdicts, in the order they print: the login side's, then the seeder's own.
pub fn evaluate(f: &SeederFacts) -> Vec<Check> {
    let mut all = super::login::evaluate(&f.login);
    all.extend([
        handed_here(f),
        allow(f),
        logdir(f),
        munge(f),
        port(f),
        readable(f),
    ]);
    all
}

fn handed_here(f: &SeederFacts) -> Check {
    let Some(named) = &f.seeder_host else {
        return check(
            "seeder-host",
            Level::Warn,
            "no [seeder] host: the prolog pushes from the controller itself, not from here".into(),
            Some("set [seeder] host = \"THIS_HOST\" in the site's teesfs.toml on every host"),
        );
    };
    let name = named.rsplit_once(':').map_or(named.as_str(), |(h, _)| h);
    let short = |h: &str| h.split('.').next().unwrap_or_default().to_owned();
    if short(name) == short(&f.host) {
        check(
            "seeder-host",
            Level::Ok,
            format!("[seeder] host names this host ({named})"),
            None,
        )
    } else {
        check(
            "seeder-host",
            Level::Warn,
            format!(
                "[seeder] host is {named}, not this host ({}): the prolog hands jobs there",
                f.host
            ),
            Some("run the seeder on the host [seeder] host names, or change it"),
        )
    }
}

fn allow(f: &SeederFacts) -> Check {
    let unknown: Vec<&str> = (f.allow.iter())
        .filter(|(_, uid)| uid.is_none())
        .map(|(u, _)| u.as_str())
        .collect();
    if !unknown.is_empty() {
        return check(
            "seeder-allow",
            Level::Fail,
            format!(
                "[seeder] allow names unknown user(s) {}: the seeder does not start",
                unknown.join(", ")
            ),
            Some("name the controller's SlurmUser (a name this host knows, or its uid)"),
        );
    }
    let who: Vec<String> = (f.allow.iter())
        .map(|(u, uid)| format!("{u} (uid {})", uid.unwrap_or_default()))
        .collect();
    check(
        "seeder-allow",
        Level::Ok,
        format!("takes jobs from {}", who.join(", ")),
        None,
    )
}

fn logdir(f: &SeederFacts) -> Check {
    let (dir, writable) = &f.logdir;
    match writable {
        None => check(
            "seeder-logdir",
            Level::Info,
            format!("{} does not exist yet: the seeder makes it", dir.display()),
            None,
        ),
        Some(false) => check(
            "seeder-logdir",
            Level::Fail,
            format!(
                "{} is not writable by {}: jobs' logs and reports are lost",
                dir.display(),
                f.user.0
            ),
            Some("chown the directory to the seeder's user, or set [seeder] logdir"),
        ),
        Some(true) => check(
            "seeder-logdir",
            Level::Ok,
            format!("{}", dir.display()),
            None,
        ),
    }
}

fn munge(f: &SeederFacts) -> Check {
    let (socket, there) = &f.munge_socket;
    if !f.unmunge {
        return check(
            "munge",
            Level::Fail,
            "unmunge is not on the PATH: the seeder cannot check the prolog's credentials".into(),
            Some("install munge (the same key as the controller's)"),
        );
    }
    if !there {
        return check(
            "munge",
            Level::Fail,
            format!(
                "no munged socket at {}: every job the prolog hands over is refused",
                socket.display()
            ),
            Some("systemctl enable --now munge (the cluster's key), or set [seeder] munge_socket"),
        );
    }
    check(
        "munge",
        Level::Ok,
        format!("munged at {}", socket.display()),
        None,
    )
}

fn port(f: &SeederFacts) -> Check {
    match &f.port {
        PortFacts::Seeder(pid) => check(
            "seeder-port",
            Level::Ok,
            format!("teesfs seeder (pid {pid}) listens on {}", f.listen),
            None,
        ),
        PortFacts::Free => check(
            "seeder-port",
            Level::Warn,
            format!(
                "nothing listens on {}: the seeder does not run, and the prolog's jobs fail",
                f.listen
            ),
            Some("systemctl enable --now teesfs-seeder"),
        ),
        PortFacts::Other(who) => check(
            "seeder-port",
            Level::Fail,
            format!(
                "{} is taken by {who}: the seeder cannot listen there",
                f.listen
            ),
            Some(
                "stop that process, or move the seeder ([seeder] listen, and the port in [seeder] host)",
            ),
        ),
    }
}

fn readable(f: &SeederFacts) -> Check {
    let (name, uid, gids) = &f.user;
    let cannot: Vec<String> = (f.reads.iter())
        .filter_map(|r| match &r.stat {
            Err(e) => Some(format!("{}: {e}", r.path.display())),
            Ok((owner, group, mode)) => (!may_read(*mode, *owner, *group, *uid, gids))
                .then(|| format!("{} (mode {:o})", r.path.display(), mode & 0o7777)),
        })
        .collect();
    if cannot.is_empty() {
        return check(
            "seeder-reads",
            Level::Ok,
            format!("{name} reads the credentials and the store"),
            None,
        );
    }
    check(
        "seeder-reads",
        Level::Fail,
        format!("{name} cannot read {}", cannot.join(", ")),
        Some("give the seeder's user read access (the key: owner or group, never others)"),
    )
}

/// Whether `uid` (in `gids`) may read a file or enter and list a directory of this owner,
/// group and mode. Root may always.
pub fn may_read(mode: u32, owner: u32, group: u32, uid: u32, gids: &[u32]) -> bool {
    let need = if mode & 0o170000 == 0o040000 {
        0o5
    } else {
        0o4
    };
    let bits = if uid == 0 {
        return true;
    } else if uid == owner {
        (mode >> 6) & 0o7
    } else if gids.contains(&group) {
        (mode >> 3) & 0o7
    } else {
        mode & 0o7
    };
    bits & need == need
}

/// The facts of a seeder on `host` as `user`, with the site's `[seeder]` section.
pub fn gather(
    login: LoginFacts,
    host: String,
    conf: &manifest::site::SeederSection,
    identity: &Path,
    user: &str,
) -> SeederFacts {
    let resolve = |u: &str| -> Option<u32> {
        u.parse().ok().or_else(|| {
            nix::unistd::User::from_name(u)
                .ok()
                .flatten()
                .map(|u| u.uid.as_raw())
        })
    };
    let (uid, gids) = user_ids(user);
    let listen = conf.listen();
    let logdir = conf.logdir();
    let writable = logdir.exists().then(|| {
        std::fs::metadata(&logdir)
            .is_ok_and(|m| uid == 0 || (m.uid() == uid && m.mode() & 0o300 == 0o300))
    });
    let munge =
        (conf.munge_socket.clone()).unwrap_or_else(|| PathBuf::from("/run/munge/munge.socket.2"));
    let is_socket = std::fs::metadata(&munge).is_ok_and(|m| m.file_type().is_socket());
    let mut reads: Vec<PathBuf> = [
        format!("{host}.crt"),
        format!("{host}.key"),
        "ca.crt".into(),
    ]
    .into_iter()
    .map(|f| identity.join(f))
    .collect();
    if let Found::Ok((store, ..)) = &login.store {
        reads.push(store.clone());
    }
    SeederFacts {
        reads: reads.into_iter().map(file_facts).collect(),
        login,
        seeder_host: conf.address(),
        listen: listen.to_string(),
        allow: conf
            .allow()
            .into_iter()
            .map(|u| {
                let id = resolve(&u);
                (u, id)
            })
            .collect(),
        logdir: (logdir, writable),
        munge_socket: (munge, is_socket),
        unmunge: on_path("unmunge"),
        port: port_facts(listen),
        user: (user.to_owned(), uid, gids),
        host,
    }
}

fn file_facts(path: PathBuf) -> FileFacts {
    let stat = std::fs::metadata(&path)
        .map(|m| (m.uid(), m.gid(), m.mode()))
        .map_err(|e| Unreadable(e.to_string()));
    FileFacts { path, stat }
}

/// `user`'s uid and groups (root's when it is unknown: the check of the user says so).
fn user_ids(user: &str) -> (u32, Vec<u32>) {
    let found = match user.parse::<u32>() {
        Ok(uid) => nix::unistd::User::from_uid(uid.into()).ok().flatten(),
        Err(_) => nix::unistd::User::from_name(user).ok().flatten(),
    };
    let Some(u) = found else {
        return (user.parse().unwrap_or(0), Vec::new());
    };
    let name = std::ffi::CString::new(u.name.clone()).unwrap_or_default();
    let gids = nix::unistd::getgrouplist(&name, u.gid)
        .map(|g| g.into_iter().map(|g| g.as_raw()).collect())
        .unwrap_or_else(|_| vec![u.gid.as_raw()]);
    (u.uid.as_raw(), gids)
}

fn on_path(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(program).is_file()))
}

/// Who holds TCP `listen`: bound for a moment if free, else its listener found in
/// /proc (its pid and command line, when this user may see them).
fn port_facts(listen: std::net::SocketAddr) -> PortFacts {
    match std::net::TcpListener::bind(listen) {
        Ok(_) => return PortFacts::Free,
        Err(e) if e.kind() != std::io::ErrorKind::AddrInUse => {
            return PortFacts::Other(format!("an address this host cannot bind ({e})"));
        }
        Err(_) => {}
    }
    let Some(inode) = listening_inode(listen.port()) else {
        return PortFacts::Other("another process".into());
    };
    match holder(inode) {
        Some((pid, cmd)) if cmd.contains("teesfs") && cmd.contains("seeder") => {
            PortFacts::Seeder(pid)
        }
        Some((pid, cmd)) => PortFacts::Other(format!("pid {pid} ({cmd})")),
        None => PortFacts::Other("another process (run doctor as root to name it)".into()),
    }
}

/// The socket inode listening on TCP `port` (/proc/net/tcp and tcp6).
fn listening_inode(port: u16) -> Option<u64> {
    let local = format!(":{port:04X}");
    ["/proc/net/tcp", "/proc/net/tcp6"].iter().find_map(|f| {
        let text = std::fs::read_to_string(f).ok()?;
        text.lines().skip(1).find_map(|l| {
            let cols: Vec<&str> = l.split_whitespace().collect();
            let listening = cols.get(3) == Some(&"0A");
            let ours = cols.get(1).is_some_and(|a| a.ends_with(&local));
            (listening && ours).then(|| cols.get(9)?.parse().ok())?
        })
    })
}

/// The process holding socket `inode`: its pid and command line.
fn holder(inode: u64) -> Option<(u32, String)> {
    let target = format!("socket:[{inode}]");
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid: u32 = e.file_name().to_str()?.parse().ok()?;
        let fds = std::fs::read_dir(e.path().join("fd")).ok()?;
        fds.flatten()
            .any(|fd| std::fs::read_link(fd.path()).is_ok_and(|l| l.as_os_str() == target.as_str()))
            .then(|| {
                let cmd = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
                let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
                (pid, cmd.trim().to_owned())
            })
    })
}

#[cfg(test)]
#[path = "seeder_tests.rs"]
mod tests;

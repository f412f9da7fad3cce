//! The BitTorrent baseline: `mktorrent` makes a torrent whose announce URL is a small HTTP
//! tracker the lab runs in the login node's namespace ([`Tracker`], BEP 3 announces with
//! BEP 23 compact peer lists, bencoded by hand), the login node seeds with `aria2c`, and
//! every compute node runs `aria2c` in its namespace, seeding on after it completes so the
//! nodes form a swarm (DHT and local peer discovery off, peer exchange on as by default).
//! The time until every node holds the payload is taken from each node's
//! `--on-bt-download-complete` hook, which fires when its download is complete and verified.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::check_interrupt;
use crate::cluster::Lab;
use crate::error::{LabError, Result};
use crate::net::Counters;
use crate::proc::{self, NodeProc};
use crate::sh;

/// Port the tracker listens on (login node).
pub const TRACKER_PORT: u16 = 6969;
/// Port every `aria2c` listens on for peers (each in its own namespace).
pub const PEER_PORT: u16 = 6881;
/// Re-announce interval the tracker asks for, in seconds: short, so late joiners are
/// found quickly (peer exchange spreads them too).
pub const INTERVAL_S: u32 = 2;

/// One peer in a swarm.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Peer {
    addr: SocketAddrV4,
    left: u64,
}

/// What a client said in one announce.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Announce {
    /// The torrent's info hash.
    pub info_hash: [u8; 20],
    /// The client's id.
    pub peer_id: Vec<u8>,
    /// Where it accepts peers.
    pub addr: SocketAddrV4,
    /// Bytes it still needs.
    pub left: u64,
    /// `started`, `completed`, `stopped` or empty.
    pub event: String,
    /// How many peers it wants.
    pub numwant: usize,
}

/// Decodes `%xx` escapes (and `+`) of a query component into bytes.
fn percent_decode(s: &str) -> Option<Vec<u8>> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' => {
                let hex = std::str::from_utf8(b.get(i + 1..i + 3)?).ok()?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    Some(out)
}

impl Announce {
    /// Parses the query string of `GET /announce?...` from a client at `from`.
    pub fn parse(query: &str, from: Ipv4Addr) -> Result<Self> {
        let bad = |detail: &str| LabError::Parse {
            what: "a BitTorrent announce".into(),
            detail: detail.into(),
        };
        let mut kv: HashMap<&str, Vec<u8>> = HashMap::new();
        for part in query.split('&').filter(|p| !p.is_empty()) {
            let (k, v) = part.split_once('=').unwrap_or((part, ""));
            let v = percent_decode(v).ok_or_else(|| bad(&format!("bad escape in {k}")))?;
            kv.insert(k, v);
        }
        let text = |k: &str| kv.get(k).map(|v| String::from_utf8_lossy(v).into_owned());
        let info_hash: [u8; 20] = kv
            .get("info_hash")
            .ok_or_else(|| bad("no info_hash"))?
            .as_slice()
            .try_into()
            .map_err(|_| bad("info_hash is not 20 bytes"))?;
        let port: u16 = text("port")
            .ok_or_else(|| bad("no port"))?
            .parse()
            .map_err(|_| bad("bad port"))?;
        Ok(Self {
            info_hash,
            peer_id: kv
                .get("peer_id")
                .cloned()
                .ok_or_else(|| bad("no peer_id"))?,
            addr: SocketAddrV4::new(from, port),
            left: text("left").and_then(|s| s.parse().ok()).unwrap_or(0),
            event: text("event").unwrap_or_default(),
            numwant: text("numwant")
                .and_then(|s| s.parse().ok())
                .unwrap_or(50)
                .min(200),
        })
    }
}

/// Bencoded failure answer.
pub fn failure(reason: &str) -> Vec<u8> {
    format!("d14:failure reason{}:{reason}e", reason.len()).into_bytes()
}

/// The tracker's memory: swarms by info hash, peers by id. Pure, so it is unit-tested.
#[derive(Debug, Default)]
pub struct Swarms {
    swarms: HashMap<[u8; 20], HashMap<Vec<u8>, Peer>>,
}

impl Swarms {
    /// Records `a` and answers it: a bencoded dictionary with the swarm's counts, the
    /// re-announce interval and every other peer as a compact (BEP 23) list.
    pub fn announce(&mut self, a: &Announce) -> Vec<u8> {
        let swarm = self.swarms.entry(a.info_hash).or_default();
        if a.event == "stopped" {
            swarm.remove(&a.peer_id);
        } else {
            swarm.insert(
                a.peer_id.clone(),
                Peer {
                    addr: a.addr,
                    left: a.left,
                },
            );
        }
        let complete = swarm.values().filter(|p| p.left == 0).count();
        let incomplete = swarm.len() - complete;
        let mut peers = Vec::new();
        for (id, p) in swarm.iter() {
            if *id == a.peer_id || peers.len() / 6 >= a.numwant {
                continue;
            }
            peers.extend_from_slice(&p.addr.ip().octets());
            peers.extend_from_slice(&p.addr.port().to_be_bytes());
        }
        // Keys in sorted order, as bencoding requires.
        let mut out = format!(
            "d8:completei{complete}e10:incompletei{incomplete}e8:intervali{INTERVAL_S}e\
             12:min intervali1e5:peers{}:",
            peers.len()
        )
        .into_bytes();
        out.extend_from_slice(&peers);
        out.push(b'e');
        out
    }
}

/// A BEP 3 HTTP tracker listening in a lab node's network namespace, served by a thread of
/// this process. Dropping it stops it.
#[derive(Debug)]
pub struct Tracker {
    addr: SocketAddrV4,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
    swarms: Arc<Mutex<Swarms>>,
}

/// Binds a TCP listener inside network namespace `netns`: a short-lived thread enters the
/// namespace (only that thread moves) and binds; the socket stays in that namespace.
fn bind_in(netns: &str, addr: SocketAddrV4) -> Result<TcpListener> {
    let path = PathBuf::from(format!("/run/netns/{netns}"));
    std::thread::spawn(move || -> Result<TcpListener> {
        let f = std::fs::File::open(&path).map_err(LabError::io(&path))?;
        nix::sched::setns(f, nix::sched::CloneFlags::CLONE_NEWNET).map_err(|e| LabError::Io {
            path: path.clone(),
            source: std::io::Error::from(e),
        })?;
        TcpListener::bind(addr).map_err(LabError::io(format!("tracker socket {addr}")))
    })
    .join()
    .map_err(|_| LabError::Shape("tracker bind thread panicked".into()))?
}

impl Tracker {
    /// Starts a tracker on `addr` inside `netns`.
    pub fn start(netns: &str, addr: SocketAddrV4) -> Result<Self> {
        let listener = bind_in(netns, addr)?;
        listener
            .set_nonblocking(true)
            .map_err(LabError::io("tracker socket"))?;
        let stop = Arc::new(AtomicBool::new(false));
        let swarms = Arc::new(Mutex::new(Swarms::default()));
        let (s, w) = (stop.clone(), swarms.clone());
        let thread = std::thread::Builder::new()
            .name("lab-tracker".into())
            .spawn(move || serve(&listener, &s, &w))
            .map_err(LabError::io("tracker thread"))?;
        Ok(Self {
            addr,
            stop,
            thread: Some(thread),
            swarms,
        })
    }

    /// The announce URL to put in torrents.
    pub fn announce_url(&self) -> String {
        format!("http://{}/announce", self.addr)
    }

    /// How many peers of the swarm of `info_hash` have announced, and how many of them
    /// hold everything.
    pub fn counts(&self, info_hash: &[u8; 20]) -> (usize, usize) {
        let s = self.swarms.lock().unwrap_or_else(|e| e.into_inner());
        s.swarms.get(info_hash).map_or((0, 0), |sw| {
            (sw.len(), sw.values().filter(|p| p.left == 0).count())
        })
    }

    /// Every seeder (left = 0) of any swarm.
    pub fn seeders(&self) -> usize {
        let s = self.swarms.lock().unwrap_or_else(|e| e.into_inner());
        s.swarms
            .values()
            .map(|sw| sw.values().filter(|p| p.left == 0).count())
            .sum()
    }
}

impl Drop for Tracker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn serve(listener: &TcpListener, stop: &AtomicBool, swarms: &Mutex<Swarms>) {
    while !stop.load(Ordering::Relaxed) {
        match listener.accept() {
            Ok((stream, from)) => {
                if let Err(e) = handle(stream, from, swarms) {
                    tracing::debug!("tracker: {from}: {e}");
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(2));
            }
            Err(e) => {
                tracing::warn!("tracker accept: {e}");
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }
}

fn handle(mut s: TcpStream, from: SocketAddr, swarms: &Mutex<Swarms>) -> std::io::Result<()> {
    s.set_nonblocking(false)?;
    s.set_read_timeout(Some(Duration::from_secs(2)))?;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 2048];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") && buf.len() < 16 * 1024 {
        let n = s.read(&mut chunk)?;
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let head = String::from_utf8_lossy(&buf);
    let target = head
        .lines()
        .next()
        .and_then(|l| l.strip_prefix("GET "))
        .and_then(|l| l.split(' ').next())
        .unwrap_or("");
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let ip = match from {
        SocketAddr::V4(a) => *a.ip(),
        SocketAddr::V6(a) => a.ip().to_ipv4_mapped().unwrap_or(Ipv4Addr::UNSPECIFIED),
    };
    let body = if path != "/announce" {
        failure("only /announce is served")
    } else {
        match Announce::parse(query, ip) {
            Ok(a) => swarms
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .announce(&a),
            Err(LabError::Parse { detail, .. }) => failure(&detail),
            Err(e) => failure(&e.to_string()),
        }
    };
    let mut resp = format!(
        "HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    resp.extend_from_slice(&body);
    s.write_all(&resp)
}

/// The programs the baseline needs, with their Debian packages.
pub const PROGRAMS: [(&str, &str); 2] = [("aria2c", "aria2"), ("mktorrent", "mktorrent")];

/// Whether `aria2c` and `mktorrent` are installed.
pub fn available() -> Result<()> {
    for (prog, package) in PROGRAMS {
        if crate::slurm::which(prog).is_none() {
            return Err(LabError::Missing {
                program: prog.into(),
                package: package.into(),
            });
        }
    }
    Ok(())
}

/// What one BitTorrent distribution did.
#[derive(Debug, Clone)]
pub struct TorrentRun {
    /// Seconds from starting the nodes' clients until the last one held the payload.
    pub all_s: f64,
    /// Per compute node (hostlist order): seconds until it held the payload.
    pub per_node_s: Vec<f64>,
    /// Kernel counters of each group's uplink during the run.
    pub uplinks: Vec<Counters>,
    /// Kernel counters of the seed's (login node's) link.
    pub root_link: Counters,
    /// CPU seconds of every `aria2c` (seed included).
    pub cpu_s: f64,
    /// Where each node's copy is (host side), hostlist order; removed by [`TorrentRun`]'s
    /// owner when done (see [`distribute`]'s `keep`).
    pub copies: Vec<PathBuf>,
}

impl TorrentRun {
    /// Bytes into all groups over their uplinks.
    pub fn uplink_in(&self) -> u64 {
        self.uplinks.iter().map(|c| c.rx).sum()
    }
}

/// The `aria2c` options every client in the lab uses: seed forever after completing, no DHT,
/// no local peer discovery, no configuration file, no preallocation.
fn aria2_common(cmd: &mut Command, dir: &Path, log: &Path) {
    cmd.arg("--no-conf=true")
        .arg(format!("--dir={}", dir.display()))
        .arg(format!("--log={}", log.display()))
        .args([
            "--log-level=notice",
            "--console-log-level=error",
            "--summary-interval=0",
            "--enable-dht=false",
            "--enable-dht6=false",
            "--bt-enable-lpd=false",
            "--seed-ratio=0.0",
            "--file-allocation=none",
            "--allow-overwrite=true",
            "--auto-file-renaming=false",
            "--bt-save-metadata=false",
            "--disable-ipv6=true",
        ])
        .arg(format!("--listen-port={PEER_PORT}"));
}

/// Distributes `file` by BitTorrent: a torrent with the lab's tracker, the login node
/// seeding, `aria2c` on every compute node. Returns when every node holds the payload
/// (checked by size; the client has verified every piece) or fails after `timeout`. Every
/// client and the tracker are stopped before returning; the node copies are removed unless
/// `keep`.
pub fn distribute(lab: &Lab, file: &Path, timeout: Duration, keep: bool) -> Result<TorrentRun> {
    available()?;
    let layout = lab.layout();
    let login = layout
        .node("login")
        .ok_or_else(|| LabError::Shape("no login node".into()))?
        .clone();
    static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let dir = lab.work().join(format!(
        "torrent{}",
        N.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).map_err(LabError::io(&dir))?;
    let name = file
        .file_name()
        .ok_or_else(|| LabError::Shape(format!("{} has no file name", file.display())))?
        .to_os_string();
    let size = std::fs::metadata(file).map_err(LabError::io(file))?.len();

    let tracker = Tracker::start(&login.netns, SocketAddrV4::new(login.addr(), TRACKER_PORT))?;
    let torrent = dir.join("payload.torrent");
    sh::run(
        "mktorrent",
        &[
            "-a",
            &tracker.announce_url(),
            "-l",
            "18",
            "-o",
            &torrent.display().to_string(),
            &file.display().to_string(),
        ],
    )?;
    let aria2c = crate::slurm::which("aria2c").unwrap_or_else(|| "aria2c".into());
    let mut procs = vec![start_seed(
        &login.netns,
        &aria2c,
        file,
        &torrent,
        &dir,
        &tracker,
    )?];

    let nodes: Vec<_> = layout.compute().cloned().collect();
    let mut markers = Vec::new();
    let mut copies = Vec::new();
    let up_before = lab.net().uplinks()?;
    let root_before = lab.net().counters("login", "eth0")?;
    let t0 = Instant::now();
    for n in &nodes {
        let (proc, marker) = start_leech(n, &aria2c, &dir, &torrent)?;
        procs.push(proc);
        markers.push(marker);
        copies.push(dir.join(&n.host).join(&name));
    }
    let done = wait_complete(&nodes, &markers, &mut procs, t0, t0 + timeout, &dir)?;
    let up_after = lab.net().uplinks()?;
    let root_after = lab.net().counters("login", "eth0")?;
    let cpu_s: f64 = procs
        .iter()
        .filter_map(NodeProc::pid)
        .map(proc::cpu_seconds)
        .sum();
    for p in &procs {
        p.signal_stop();
    }
    for p in &mut procs {
        p.stop(Duration::from_secs(3));
    }
    drop(tracker);
    for (n, c) in nodes.iter().zip(&copies) {
        let got = std::fs::metadata(c).map(|m| m.len()).unwrap_or(0);
        if got != size {
            return Err(LabError::Command {
                command: format!("aria2c on {}", n.host),
                stderr: format!("reported complete with {got} of {size} bytes"),
            });
        }
    }
    let per_node_s: Vec<f64> = done.into_iter().map(|d| d.unwrap_or(f64::NAN)).collect();
    let run = TorrentRun {
        all_s: per_node_s.iter().copied().fold(0.0, f64::max),
        per_node_s,
        uplinks: crate::net::Counters::each_since(&up_after, &up_before),
        root_link: root_after.since(root_before),
        cpu_s,
        copies,
    };
    if !keep {
        let _ = std::fs::remove_dir_all(&dir);
    }
    Ok(run)
}

/// Starts the login node's seeding client; returns once the tracker lists it as a seeder.
fn start_seed(
    netns: &str,
    aria2c: &Path,
    file: &Path,
    torrent: &Path,
    dir: &Path,
    tracker: &Tracker,
) -> Result<NodeProc> {
    let seed_dir = file.parent().unwrap_or(Path::new("/"));
    let seed_log = dir.join("seed.log");
    let mut cmd = sh::command_in(netns, "setpriv");
    cmd.args(["--pdeathsig", "KILL", "--"]).arg(aria2c);
    aria2_common(&mut cmd, seed_dir, &seed_log);
    cmd.args(["--bt-seed-unverified=true", "--check-integrity=false"])
        .arg(torrent)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let mut seed = NodeProc::new(
        "login",
        seed_log.clone(),
        cmd.spawn().map_err(|source| LabError::Spawn {
            program: "aria2c".into(),
            source,
        })?,
    );
    // The seed is ready once it has announced itself complete.
    let deadline = Instant::now() + Duration::from_secs(30);
    while tracker.seeders() == 0 {
        check_interrupt()?;
        if Instant::now() > deadline || !seed.alive() {
            return Err(LabError::Daemon {
                host: "login".into(),
                reason: "the aria2c seed never announced itself".into(),
                log: seed_log,
            });
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Ok(seed)
}

/// Starts a downloading client on compute node `n`; returns it and the file its completion
/// hook creates.
fn start_leech(
    n: &crate::layout::NodeSpec,
    aria2c: &Path,
    dir: &Path,
    torrent: &Path,
) -> Result<(NodeProc, PathBuf)> {
    let ndir = dir.join(&n.host);
    std::fs::create_dir_all(&ndir).map_err(LabError::io(&ndir))?;
    let marker = ndir.join("complete");
    let hook = ndir.join("hook.sh");
    std::fs::write(&hook, format!("#!/bin/sh\n: > '{}'\n", marker.display()))
        .map_err(LabError::io(&hook))?;
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755))
            .map_err(LabError::io(&hook))?;
    }
    let log = ndir.join("aria2.log");
    let mut cmd = sh::command_in(&n.netns, "setpriv");
    cmd.args(["--pdeathsig", "KILL", "--"]).arg(aria2c);
    aria2_common(&mut cmd, &ndir, &log);
    cmd.arg(format!("--on-bt-download-complete={}", hook.display()))
        .arg(torrent)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let child = cmd.spawn().map_err(|source| LabError::Spawn {
        program: "aria2c".into(),
        source,
    })?;
    Ok((NodeProc::new(&n.host, log, child), marker))
}

/// Waits until every node's completion marker exists (seconds since `t0` each), failing at
/// `deadline` or when a client exits.
fn wait_complete(
    nodes: &[crate::layout::NodeSpec],
    markers: &[PathBuf],
    procs: &mut [NodeProc],
    t0: Instant,
    deadline: Instant,
    dir: &Path,
) -> Result<Vec<Option<f64>>> {
    let mut done: Vec<Option<f64>> = vec![None; nodes.len()];
    while done.iter().any(Option::is_none) {
        check_interrupt()?;
        for (d, m) in done.iter_mut().zip(markers) {
            if d.is_none() && m.exists() {
                *d = Some(t0.elapsed().as_secs_f64());
            }
        }
        if Instant::now() > deadline {
            let missing: Vec<&str> = nodes
                .iter()
                .zip(&done)
                .filter(|(_, d)| d.is_none())
                .map(|(n, _)| n.host.as_str())
                .collect();
            return Err(LabError::Timeout(format!(
                "BitTorrent distribution (nodes without the payload: {}; logs in {})",
                missing.join(","),
                dir.display()
            )));
        }
        if let Some(p) = procs.iter_mut().find_map(|p| (!p.alive()).then_some(p)) {
            return Err(LabError::Daemon {
                host: p.host.clone(),
                reason: "aria2c exited".into(),
                log: p.log.clone(),
            });
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn announce(id: &str, port: u16, left: u64, event: &str) -> Announce {
        let q = format!(
            "info_hash=%01%02%03%04%05%06%07%08%09%0a%0b%0c%0d%0e%0f%10%11%12%13%14\
             &peer_id={id}&port={port}&uploaded=0&downloaded=0&left={left}&compact=1\
             &event={event}"
        );
        Announce::parse(&q, Ipv4Addr::new(10, 77, 1, port as u8)).expect("valid")
    }

    #[test]
    fn announces_return_the_other_peers_compactly() {
        let mut s = Swarms::default();
        let a = announce("seed", 1, 0, "started");
        assert_eq!(a.info_hash[0], 1);
        assert_eq!(a.info_hash[19], 0x14);
        let r = s.announce(&a);
        assert_eq!(
            r,
            b"d8:completei1e10:incompletei0e8:intervali2e12:min intervali1e5:peers0:e"
        );
        let r = s.announce(&announce("leech", 2, 100, "started"));
        let mut want =
            b"d8:completei1e10:incompletei1e8:intervali2e12:min intervali1e5:peers6:".to_vec();
        want.extend_from_slice(&[10, 77, 1, 1, 0, 1, b'e']);
        assert_eq!(r, want);
        // Stopped peers leave the swarm.
        s.announce(&announce("seed", 1, 0, "stopped"));
        let r = s.announce(&announce("leech", 2, 0, "completed"));
        assert!(r.starts_with(b"d8:completei1e10:incompletei0e"), "{r:?}");
        assert!(r.ends_with(b"5:peers0:e"));
    }

    #[test]
    fn bad_announces_are_refused_with_a_reason() {
        let e = Announce::parse("info_hash=abc&peer_id=x&port=1", Ipv4Addr::LOCALHOST)
            .expect_err("short hash")
            .to_string();
        assert!(e.contains("20 bytes"), "{e}");
        assert!(Announce::parse("peer_id=x", Ipv4Addr::LOCALHOST).is_err());
        assert_eq!(failure("no"), b"d14:failure reason2:noe");
    }
}

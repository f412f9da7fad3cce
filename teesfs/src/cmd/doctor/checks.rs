//! `teesfs doctor`'s verdicts: pure functions from the [`Facts`] gathered about a node to
//! one [`Check`] per concern, each with a fix when it is not OK. Nothing here touches the
//! system, so every verdict is tested without a node to break.

use std::path::PathBuf;

use serde::Serialize;
use teesfs_node::net::pki;

/// Version of the JSON report (`teesfs doctor --format json`); raised when a field changes
/// meaning or goes away.
pub const REPORT_VERSION: u32 = 1;

/// Days before a certificate or CRL expires from which doctor warns.
pub const EXPIRY_WARN_DAYS: i64 = 30;

/// How bad a check's finding is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Level {
    /// Works.
    Ok,
    /// Said for information; nothing to do.
    Info,
    /// Works now, degraded or soon broken.
    Warn,
    /// Would break a job on this node.
    Fail,
}

impl Level {
    /// As printed.
    pub fn word(self) -> &'static str {
        match self {
            Level::Ok => "OK",
            Level::Info => "INFO",
            Level::Warn => "WARN",
            Level::Fail => "FAIL",
        }
    }
}

/// One check's verdict.
#[derive(Debug, Clone, Serialize)]
pub struct Check {
    /// Short name (stable: scripts match on it).
    pub name: &'static str,
    /// The verdict.
    pub level: Level,
    /// What was found.
    pub detail: String,
    /// What to do, when not OK.
    pub fix: Option<String>,
}

/// `teesfs doctor --format json`.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// [`REPORT_VERSION`].
    pub version: u32,
    /// The host checked for.
    pub host: String,
    /// Every check, in order.
    pub checks: Vec<Check>,
    /// Checks that FAILed.
    pub failed: usize,
    /// Checks that WARNed.
    pub warned: usize,
}

impl Report {
    /// The report of `checks`.
    pub fn of(host: String, checks: Vec<Check>) -> Self {
        let count = |l| checks.iter().filter(|c| c.level == l).count();
        Report {
            version: REPORT_VERSION,
            host,
            failed: count(Level::Fail),
            warned: count(Level::Warn),
            checks,
        }
    }
}

/// Why a fact could not be gathered (an I/O or parse error's message, for the report).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unreadable(pub String);

impl std::fmt::Display for Unreadable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<&str> for Unreadable {
    fn from(why: &str) -> Self {
        Self(why.to_owned())
    }
}

/// What was found about a file-like thing: absent, present but unusable (why), or usable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Found<T> {
    /// Not there.
    Missing,
    /// There but unusable.
    Bad(String),
    /// There and usable.
    Ok(T),
}

/// The node's certificate.
#[derive(Debug, Clone)]
pub struct CertFacts {
    /// `<identity>/<host>.crt`.
    pub path: PathBuf,
    /// Its names and expiry.
    pub summary: Found<(Vec<String>, i64)>,
    /// Why the daemon's own check (CA signature, host name, validity, key fit, CRL)
    /// fails, if it does.
    pub unverified: Option<String>,
}

/// The Slurm configuration.
#[derive(Debug, Clone, Default)]
pub struct SlurmFacts {
    /// Whether slurm.conf exists at all (no Slurm here otherwise).
    pub slurm_conf: bool,
    /// Whether plugstack.conf or a file it includes loads teesfs_spank.so.
    pub plugin: bool,
    /// Whether slurm.conf names teesfs's Epilog.
    pub epilog: bool,
    /// Whether slurm.conf names teesfs's PrologSlurmctld.
    pub prolog: bool,
    /// Whether slurm.conf names teesfs's EpilogSlurmctld (`teesfs learn`).
    pub learn: bool,
    /// Where it was looked for.
    pub dir: PathBuf,
}

/// The running daemon, as its control socket answers.
#[derive(Debug, Clone)]
pub struct DaemonFacts {
    /// Where it listens.
    pub listen: String,
    /// Bytes in its store.
    pub store_bytes: u64,
    /// What its running jobs pin in the store.
    pub store_pinned: u64,
    /// Bytes in its store that no running job pins.
    pub store_cached: u64,
    /// Its wall clock minus the login node's at the last job's arrival (ms), if a job came.
    pub clock_skew_ms: Option<i64>,
}

/// Everything doctor looks at, gathered before any verdict.
#[derive(Debug, Clone)]
pub struct Facts {
    /// Now, in seconds since the Unix epoch.
    pub now: i64,
    /// The host checked for.
    pub host: String,
    /// `/dev/fuse`: opened read-write, or why not.
    pub dev_fuse: Found<()>,
    /// The kernel's release (`uname -r`), for passthrough (Linux 6.9).
    pub kernel: Option<String>,
    /// `/proc/sys/kernel/unprivileged_userns_clone` (Debian's switch), if it exists.
    pub userns_clone: Option<u64>,
    /// `/proc/sys/user/max_user_namespaces`, if readable.
    pub max_user_namespaces: Option<u64>,
    /// The node's certificate.
    pub cert: CertFacts,
    /// The effective uid doctor runs as.
    pub uid: u32,
    /// Credential files (certificate, key, CA, CRL) that exist but this uid may not read
    /// (never set for root): not a fault of the node, and not checked.
    pub denied: Vec<PathBuf>,
    /// `<identity>/crl.pem`: absent (not configured), unusable, or what it says.
    pub crl: Found<teesfs_node::net::crl::CrlFacts>,
    /// Trusted publisher keys: each file and why it does not parse, if it does not.
    /// Empty: none found.
    pub trust: Vec<(PathBuf, Option<String>)>,
    /// The running daemon, or why none answers (`Missing`: no socket).
    pub daemon: Found<DaemonFacts>,
    /// The peer port when no daemon answers, and why this node cannot bind it, if so.
    pub port: (String, Option<String>),
    /// The login node configured (`[root] host`), for the clock check.
    pub login: Option<String>,
    /// The store's directory, bytes free under it (`None`: unknown) and budget.
    pub store: (PathBuf, Option<u64>, u64),
    /// Slurm.
    pub slurm: SlurmFacts,
}

fn check(name: &'static str, level: Level, detail: String, fix: Option<String>) -> Check {
    Check {
        name,
        level,
        detail,
        fix,
    }
}

fn ok(name: &'static str, detail: String) -> Check {
    check(name, Level::Ok, detail, None)
}

/// The verdicts, in the order they print.
pub fn evaluate(f: &Facts) -> Vec<Check> {
    vec![
        fuse(f),
        passthrough(f),
        userns(f),
        certificate(f),
        crl(f),
        trust(f),
        port(f),
        clock(f),
        store(f),
        slurm(f),
        daemon(f),
    ]
}

fn fuse(f: &Facts) -> Check {
    let name = "fuse";
    match &f.dev_fuse {
        Found::Ok(()) => ok(name, "/dev/fuse opens read-write".into()),
        Found::Missing => check(
            name,
            Level::Fail,
            "/dev/fuse does not exist: jobs cannot be mounted".into(),
            Some("load the module (`modprobe fuse`) and add `fuse` to /etc/modules-load.d/".into()),
        ),
        Found::Bad(why) => check(
            name,
            Level::Fail,
            format!("/dev/fuse cannot be opened: {why}"),
            Some("run the daemon as root (systemd unit teesfs-daemon.service); in a container, pass --device /dev/fuse".into()),
        ),
    }
}

/// `(major, minor)` of a kernel release such as `6.12.48+deb13-amd64`.
pub fn kernel_version(release: &str) -> Option<(u32, u32)> {
    let mut parts = release.split(['.', '-', '+']);
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}

fn passthrough(f: &Facts) -> Check {
    let name = "passthrough";
    match f.kernel.as_deref().map(|r| (r, kernel_version(r))) {
        Some((r, Some(v))) if v >= (6, 9) => ok(
            name,
            format!("Linux {r} has FUSE passthrough: whole local files are read at kernel speed"),
        ),
        Some((r, Some(_))) => check(
            name,
            Level::Warn,
            format!(
                "Linux {r} predates FUSE passthrough (6.9): every read goes through the daemon"
            ),
            Some("boot a 6.9 or later kernel for passthrough reads; jobs work without it".into()),
        ),
        Some((r, None)) => check(
            name,
            Level::Info,
            format!("kernel release {r:?} not understood: passthrough support unknown"),
            None,
        ),
        None => check(
            name,
            Level::Info,
            "kernel release unknown: passthrough support unknown".into(),
            None,
        ),
    }
}

fn userns(f: &Facts) -> Check {
    let name = "user-namespaces";
    let fix_clone = "sysctl -w kernel.unprivileged_userns_clone=1 (and set it in /etc/sysctl.d/)";
    let fix_max = "sysctl -w user.max_user_namespaces=15000 (and set it in /etc/sysctl.d/)";
    if f.userns_clone == Some(0) {
        return check(
            name,
            Level::Fail,
            "kernel.unprivileged_userns_clone = 0: `teesfs run` cannot build a job's environment as its user".into(),
            Some(fix_clone.into()),
        );
    }
    match f.max_user_namespaces {
        Some(0) => check(
            name,
            Level::Fail,
            "user.max_user_namespaces = 0: `teesfs run` cannot build a job's environment".into(),
            Some(fix_max.into()),
        ),
        Some(n) => ok(
            name,
            format!("unprivileged user namespaces allowed (up to {n})"),
        ),
        None => check(
            name,
            Level::Warn,
            "/proc/sys/user/max_user_namespaces unreadable: whether `teesfs run` works is unknown"
                .into(),
            Some("check that /proc is mounted and the kernel has CONFIG_USER_NS".into()),
        ),
    }
}

fn days(secs: i64) -> i64 {
    secs.div_euclid(86_400)
}

fn certificate(f: &Facts) -> Check {
    let name = "certificate";
    let c = &f.cert;
    let path = c.path.display();
    let reissue = format!(
        "on the login node: `teesfs keygen --cluster DIR --nodes {}`, then copy DIR/ca.crt, DIR/{h}.crt and DIR/{h}.key to {}",
        f.host,
        c.path
            .parent()
            .map_or_else(String::new, |p| p.display().to_string()),
        h = f.host,
    );
    let (names, not_after) = match &c.summary {
        Found::Missing => {
            return check(
                name,
                Level::Fail,
                format!("{path} does not exist: the daemon cannot start"),
                Some(reissue),
            );
        }
        _ if f.denied.iter().any(|p| !p.ends_with(pki::CRL)) => {
            return not_readable(name, f, false);
        }
        Found::Bad(why) => {
            return check(name, Level::Fail, format!("{path}: {why}"), Some(reissue));
        }
        Found::Ok(s) => s,
    };
    if !names.iter().any(|n| n == &f.host) {
        return check(
            name,
            Level::Fail,
            format!(
                "{path} is for {}, not for this host {}",
                names.join(", "),
                f.host
            ),
            Some(format!(
                "pass --host with the name the cluster knows this node by, or {reissue}"
            )),
        );
    }
    let left = days(not_after - f.now);
    if let Some(why) = &c.unverified {
        return check(name, Level::Fail, format!("{path}: {why}"), Some(reissue));
    }
    if left < EXPIRY_WARN_DAYS {
        return check(
            name,
            Level::Warn,
            format!("{path} for {} expires in {left} days", f.host),
            Some(reissue),
        );
    }
    ok(
        name,
        format!(
            "{path} for {}, signed by the cluster CA, expires in {left} days",
            f.host
        ),
    )
}

/// A check of credentials this uid may not read: the daemon reads them as root, so this
/// is no fault of the node, only of who asks.
fn not_readable(name: &'static str, f: &Facts, crl: bool) -> Check {
    let files: Vec<String> = f
        .denied
        .iter()
        .filter(|p| p.ends_with(pki::CRL) == crl)
        .map(|p| p.display().to_string())
        .collect();
    check(
        name,
        Level::Warn,
        format!(
            "cannot read {} as uid {}: not checked (the daemon reads it as root)",
            files.join(", "),
            f.uid
        ),
        Some("run `teesfs doctor` as root (e.g. `sudo teesfs doctor`) to check it".into()),
    )
}

fn crl(f: &Facts) -> Check {
    let name = "crl";
    if matches!(f.crl, Found::Bad(_)) && f.denied.iter().any(|p| p.ends_with(pki::CRL)) {
        return not_readable(name, f, true);
    }
    let fix = "the tree passes the login node's crl.pem on with every push: copy the cluster's current crl.pem (`teesfs keygen --cluster DIR --revoke HOST` writes it) to the login node's identity directory, or next to this node's certificate and `systemctl reload teesfs-daemon`";
    let crl = match &f.crl {
        Found::Missing => {
            return check(
                name,
                Level::Info,
                "no crl.pem: no certificate is revoked on this node (the next push brings the login node's, if it has one)".into(),
                None,
            );
        }
        Found::Bad(why) => {
            return check(
                name,
                Level::Fail,
                format!("{why}: the daemon will not start with it"),
                Some(fix.into()),
            );
        }
        Found::Ok(crl) => crl,
    };
    let number = crl
        .number
        .map_or_else(|| "without a number".to_owned(), |n| format!("number {n}"));
    let said = format!(
        "crl.pem {number}, {} revoked, issued {} days ago",
        crl.revoked.len(),
        days(f.now - crl.this_update)
    );
    match crl.next_update {
        Some(next) if next < f.now => check(
            name,
            Level::Warn,
            format!(
                "{said}, past its next update ({} days ago): nodes refuse to pass it on",
                days(f.now - next)
            ),
            Some(fix.into()),
        ),
        Some(next) => ok(
            name,
            format!("{said}, next update in {} days", days(next - f.now)),
        ),
        None => ok(name, said),
    }
}

fn trust(f: &Facts) -> Check {
    let name = "publisher-keys";
    let fix = "put the publisher's key (publisher.pub from `teesfs keygen`) in /etc/teesfs/trusted/ or name it with [network] trust in teesfs.toml";
    if f.trust.is_empty() {
        return check(
            name,
            Level::Fail,
            "no trusted publisher keys: the daemon refuses every job".into(),
            Some(fix.into()),
        );
    }
    let bad: Vec<String> = f
        .trust
        .iter()
        .filter_map(|(p, e)| e.as_ref().map(|e| format!("{}: {e}", p.display())))
        .collect();
    if bad.is_empty() {
        ok(
            name,
            format!("{} trusted publisher key(s) parse", f.trust.len()),
        )
    } else {
        check(name, Level::Fail, bad.join("; "), Some(fix.into()))
    }
}

fn port(f: &Facts) -> Check {
    let name = "port";
    match (&f.daemon, &f.port) {
        (Found::Ok(d), _) => ok(name, format!("the daemon listens at {}", d.listen)),
        (_, (addr, None)) => ok(name, format!("{addr} (UDP) is free for the daemon")),
        (_, (addr, Some(why))) => check(
            name,
            Level::Fail,
            format!("cannot bind {addr} (UDP): {why}"),
            Some(format!(
                "stop what holds it (`ss -ulpn 'sport = :{}'`) or give the daemon another port with [network] port in teesfs.toml",
                addr.rsplit(':').next().unwrap_or(addr)
            )),
        ),
    }
}

/// A skew the `Start`'s transit time explains.
const CLOCK_OK_MS: u64 = 2_000;
/// A skew that breaks jobs: certificates just issued are not yet valid, index expiry is
/// misjudged.
const CLOCK_FAIL_MS: u64 = 300_000;

fn clock(f: &Facts) -> Check {
    let name = "clock";
    let fix = || {
        Some("synchronise both clocks (chrony or ntpd); `chronyc tracking` or `timedatectl` shows the offset".to_string())
    };
    let skew = match &f.daemon {
        Found::Ok(d) => d.clock_skew_ms,
        _ => None,
    };
    let Some(ms) = skew else {
        let why = match &f.daemon {
            Found::Ok(_) => "not measured yet: the daemon measures it when a job arrives (the login node sends its clock in every job)".to_string(),
            _ => "not measured: no daemon answers (the daemon measures it when a job arrives)".to_string(),
        };
        return check(name, Level::Info, why, fix());
    };
    let off = ms.unsigned_abs();
    let from = f.login.as_deref().unwrap_or("the login node");
    let detail = format!(
        "{} {} {from}'s at the last job (transit time included)",
        crate::cmd::util::duration(std::time::Duration::from_millis(off)),
        if ms >= 0 { "ahead of" } else { "behind" }
    );
    if off < CLOCK_OK_MS {
        ok(name, detail)
    } else if off < CLOCK_FAIL_MS {
        check(name, Level::Warn, detail, fix())
    } else {
        check(
            name,
            Level::Fail,
            format!("{detail}: certificates and index expiry are judged wrong"),
            fix(),
        )
    }
}

fn store(f: &Facts) -> Check {
    let name = "store";
    let (dir, free, budget) = (&f.store.0, f.store.1, f.store.2);
    let (held, pinned, cached) = match &f.daemon {
        Found::Ok(d) => (d.store_bytes, d.store_pinned, d.store_cached),
        _ => (0, 0, 0),
    };
    let gib = |b: u64| format!("{:.1} GiB", b as f64 / f64::from(1u32 << 30));
    match free {
        None => check(
            name,
            Level::Warn,
            format!("free space under {} unknown", dir.display()),
            Some(format!(
                "create {} (the daemon's --state-dir) or check its mount",
                dir.display()
            )),
        ),
        Some(free) if free.saturating_add(held) < budget => check(
            name,
            Level::Warn,
            format!(
                "{} free under {} (+{} held) is less than the store budget {}: chunk writes will fail before the budget evicts",
                gib(free),
                dir.display(),
                gib(held),
                gib(budget)
            ),
            Some(
                "lower --store-budget or give the state directory more room (a larger tmpfs)"
                    .into(),
            ),
        ),
        Some(free) => ok(
            name,
            format!(
                "{} free under {} for a budget of {}; running jobs pin {}, {} kept from earlier jobs",
                gib(free),
                dir.display(),
                gib(budget),
                gib(pinned),
                gib(cached)
            ),
        ),
    }
}

fn slurm(f: &Facts) -> Check {
    let name = "slurm";
    let s = &f.slurm;
    if !s.slurm_conf {
        return check(
            name,
            Level::Info,
            format!(
                "no {}/slurm.conf: Slurm not configured on this node",
                s.dir.display()
            ),
            None,
        );
    }
    let mut missing = Vec::new();
    let mut fixes = Vec::new();
    if !s.plugin {
        missing.push("plugstack.conf does not load teesfs_spank.so");
        fixes.push(format!(
            "copy /usr/share/teesfs/slurm/plugstack.conf to {}/plugstack.conf.d/teesfs.conf",
            s.dir.display()
        ));
    }
    if !s.epilog {
        missing.push("slurm.conf has no teesfs Epilog");
        fixes.push("add Epilog=/usr/share/teesfs/slurm/epilog.sh to slurm.conf".into());
    }
    if !s.prolog {
        missing.push("slurm.conf has no teesfs PrologSlurmctld");
        fixes.push(
            "add PrologSlurmctld=/usr/share/teesfs/slurm/prolog-slurmctld.sh to slurm.conf".into(),
        );
    }
    if missing.is_empty() && !s.learn {
        // Everything works without it; the urgent set just does not learn by itself.
        check(
            name,
            Level::Info,
            "the SPANK plugin, the prolog and the epilog are configured; no teesfs \
             EpilogSlurmctld, so jobs do not teach their layers' urgent sets"
                .into(),
            Some(
                "add EpilogSlurmctld=/usr/share/teesfs/slurm/epilog-slurmctld.sh to slurm.conf \
                 (see docs/slurm.md)"
                    .into(),
            ),
        )
    } else if missing.is_empty() {
        ok(
            name,
            "the SPANK plugin, the prolog, the epilog and the EpilogSlurmctld are configured"
                .into(),
        )
    } else {
        check(
            name,
            Level::Warn,
            format!(
                "{}: jobs cannot ask for layers with --teesfs",
                missing.join("; ")
            ),
            Some(fixes.join("; ")),
        )
    }
}

fn daemon(f: &Facts) -> Check {
    let name = "daemon";
    match &f.daemon {
        Found::Ok(d) => ok(name, format!("running, listening at {}", d.listen)),
        Found::Missing | Found::Bad(_) => check(
            name,
            Level::Fail,
            match &f.daemon {
                Found::Bad(why) => format!("no daemon answers: {why}"),
                _ => "no daemon answers: its control socket does not exist".into(),
            },
            Some(
                "systemctl enable --now teesfs-daemon (see `journalctl -u teesfs-daemon` if it does not stay up)"
                    .into(),
            ),
        ),
    }
}

#[cfg(test)]
#[path = "checks_tests.rs"]
mod tests;

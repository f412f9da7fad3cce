//! Pushed chunks yield the daemon's CPU to the applications on its mounts.
//!
//! A daemon under a CPU quota (systemd's `CPUQuota=`, a batch system's cgroup, the lab's
//! scale model) that spends all of it on pushed chunks leaves none for the FUSE requests
//! of the applications running on its mounts: the kernel stops every thread of a cgroup
//! that used its quota until the next period, so a lookup waits behind the stream
//! (BENCHMARKS.md, 2026-12-06: 8.4 ms per lookup against 1.1 ms with nothing pushed).
//!
//! So, while applications use the mounts (an open, a lookup or a waiting read within
//! [`ACTIVE_FOR`]), a bulk stream's next frame is read only while the daemon's own CPU use
//! stays under [`SHARE`] of its quota ([`CpuBucket`]); QUIC flow control then holds the
//! sender back. Demands and control messages travel on streams of their own and are never
//! held. A daemon with no quota, or with no application active, takes the push at full
//! speed: the urgent set arrives as fast as before the job starts. So does one whose
//! applications wait for a chunk ([`BulkGate::reader_waits`]): the push is then behind
//! them, and what they wait for is most likely next on its stream.
//!
//! The quota is read once from the daemon's own cgroup (v1 `cpu.cfs_quota_us` and
//! `cpu.cfs_period_us`, v2 `cpu.max`), the lowest of it and its ancestors'
//! ([`CpuLimit::of_this_process`]). The arithmetic is pure and takes every instant and CPU
//! time from its caller.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::sync::lock;

/// Share of the quota the daemon's CPU use may reach while pushed chunks are taken with
/// applications active; the rest is headroom for their requests.
pub const SHARE: f64 = 0.75;
/// How long after an application's last request on a mount it counts as active.
pub const ACTIVE_FOR: Duration = Duration::from_secs(2);
/// Longest single wait before the gate looks again (applications may have gone quiet).
const RECHECK: Duration = Duration::from_millis(100);
/// Most CPU time the bucket may owe, in seconds of its rate: a burst of the applications'
/// own requests holds the stream back for at most this long once they are served.
const MAX_DEBT_S: f64 = 1.0;

/// A CPU quota: `cores` on average, granted per `period`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CpuLimit {
    /// CPU seconds per second.
    pub cores: f64,
    /// The scheduler's accounting period.
    pub period: Duration,
}

impl CpuLimit {
    /// The quota of this process's cgroup (the lowest along its ancestors), if any.
    pub fn of_this_process() -> Option<Self> {
        let cgroups = std::fs::read_to_string("/proc/self/cgroup").ok()?;
        let mounts = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
        let dirs = cgroup_dirs(&cgroups, &mounts)?;
        dirs.iter()
            .filter_map(|(dir, v2)| read_limit(dir, *v2))
            .min_by(|a, b| a.cores.total_cmp(&b.cores))
    }

    /// Parses v1's `cpu.cfs_quota_us` and `cpu.cfs_period_us` (`-1`: no quota).
    pub fn parse_v1(quota: &str, period: &str) -> Option<Self> {
        let quota: i64 = quota.trim().parse().ok()?;
        let period: u64 = period.trim().parse().ok()?;
        Self::of(u64::try_from(quota).ok()?, period)
    }

    /// Parses v2's `cpu.max` (`max 100000`: no quota).
    pub fn parse_v2(max: &str) -> Option<Self> {
        let mut it = max.split_whitespace();
        let quota = it.next()?.parse().ok()?;
        let period = it.next().map_or(Some(100_000), |p| p.parse().ok())?;
        Self::of(quota, period)
    }

    fn of(quota_us: u64, period_us: u64) -> Option<Self> {
        (quota_us > 0 && period_us > 0).then(|| Self {
            cores: quota_us as f64 / period_us as f64,
            period: Duration::from_micros(period_us),
        })
    }
}

fn read_limit(dir: &Path, v2: bool) -> Option<CpuLimit> {
    let read = |name: &str| std::fs::read_to_string(dir.join(name)).ok();
    if v2 {
        CpuLimit::parse_v2(&read("cpu.max")?)
    } else {
        CpuLimit::parse_v1(&read("cpu.cfs_quota_us")?, &read("cpu.cfs_period_us")?)
    }
}

/// The directories of this process's CPU cgroup and of its ancestors up to the
/// hierarchy's mount, each with whether it is v2, from `/proc/self/cgroup` and
/// `/proc/self/mountinfo`: v1's `cpu` controller where it is mounted, else v2's.
pub fn cgroup_dirs(cgroups: &str, mountinfo: &str) -> Option<Vec<(PathBuf, bool)>> {
    let mut v1 = None;
    let mut v2 = None;
    for line in cgroups.lines() {
        let mut it = line.splitn(3, ':');
        let (Some(_), Some(ctl), Some(path)) = (it.next(), it.next(), it.next()) else {
            continue;
        };
        if ctl.is_empty() {
            v2 = Some(path);
        } else if ctl.split(',').any(|c| c == "cpu") {
            v1 = Some(path);
        }
    }
    let (path, is_v2) = match (v1, v2) {
        (Some(p), _) => (p, false),
        (None, Some(p)) => (p, true),
        (None, None) => return None,
    };
    let (root, mount) = cgroup_mount(mountinfo, is_v2)?;
    let rel = Path::new(path).strip_prefix(&root).ok()?;
    let mut dirs = Vec::new();
    let mut at = Some(rel);
    while let Some(r) = at {
        dirs.push((mount.join(r), is_v2));
        at = r.parent();
    }
    Some(dirs)
}

/// The root within the hierarchy and the mount point of the cgroup hierarchy with the
/// `cpu` controller (v1) or of the unified one (v2), from a mountinfo table.
fn cgroup_mount(mountinfo: &str, v2: bool) -> Option<(PathBuf, PathBuf)> {
    mountinfo.lines().find_map(|line| {
        let (head, tail) = line.split_once(" - ")?;
        let fields: Vec<&str> = head.split_whitespace().collect();
        let mut tail = tail.split_whitespace();
        let (fstype, _source, opts) = (tail.next()?, tail.next()?, tail.next().unwrap_or(""));
        let ours = if v2 {
            fstype == "cgroup2"
        } else {
            fstype == "cgroup" && opts.split(',').any(|o| o == "cpu")
        };
        (ours && fields.len() >= 5).then(|| (PathBuf::from(fields[3]), PathBuf::from(fields[4])))
    })
}

/// A bucket of CPU time: it fills at `rate` CPU seconds per second up to `burst` and is
/// drained by the CPU the process used, whatever for. Pure.
#[derive(Debug, Clone)]
pub struct CpuBucket {
    rate: f64,
    burst: f64,
    /// CPU seconds left; negative when more was used than was earned.
    tokens: f64,
    last: Option<(Instant, Duration)>,
}

impl CpuBucket {
    /// A bucket for `share` of `limit`, holding at most half of one period's quota.
    pub fn new(limit: CpuLimit, share: f64) -> Self {
        let rate = limit.cores * share;
        let burst = limit.cores * limit.period.as_secs_f64() * share / 2.0;
        Self {
            rate,
            burst,
            tokens: burst,
            last: None,
        }
    }

    /// The process had used `cpu` in all by `now`: `None` if more work may start now,
    /// else when the bucket is full enough again.
    pub fn admit(&mut self, now: Instant, cpu: Duration) -> Option<Instant> {
        if let Some((t, c)) = self.last {
            let earned = now.saturating_duration_since(t).as_secs_f64() * self.rate;
            let used = cpu.saturating_sub(c).as_secs_f64();
            let floor = -self.rate * MAX_DEBT_S;
            self.tokens = (self.tokens + earned - used).clamp(floor, self.burst);
        }
        self.last = Some((now, cpu));
        (self.tokens < 0.0).then(|| now + Duration::from_secs_f64(-self.tokens / self.rate))
    }

    /// Nobody needed the CPU meanwhile: what the stream used beyond the share is not owed.
    pub fn forgive(&mut self) {
        self.tokens = self.tokens.max(0.0);
    }
}

/// The CPU this process has used, user and system, all threads.
fn process_cpu() -> Duration {
    use nix::sys::resource::{UsageWho, getrusage};
    getrusage(UsageWho::RUSAGE_SELF).map_or(Duration::ZERO, |u| {
        let us = |t: nix::sys::time::TimeVal| {
            Duration::from_secs(t.tv_sec().max(0) as u64)
                + Duration::from_micros(t.tv_usec().max(0) as u64)
        };
        us(u.user_time()) + us(u.system_time())
    })
}

/// The daemon's gate for bulk streams (see the module's documentation).
#[derive(Debug)]
pub struct BulkGate {
    limit: Option<CpuLimit>,
    uses: Arc<AtomicU64>,
    /// Reads on the mounts waiting for a chunk now.
    waiting: AtomicU64,
    /// Wakes held streams when a read starts waiting.
    wake: tokio::sync::Notify,
    state: std::sync::Mutex<GateState>,
    waited_us: AtomicU64,
}

/// A read waiting for a chunk ([`BulkGate::reader_waits`]).
#[derive(Debug)]
pub struct ReaderWaits(Arc<BulkGate>);

impl Drop for ReaderWaits {
    fn drop(&mut self) {
        self.0.waiting.fetch_sub(1, Ordering::Relaxed);
    }
}

#[derive(Debug)]
struct GateState {
    bucket: Option<CpuBucket>,
    seen: u64,
    last_use: Option<Instant>,
}

impl BulkGate {
    /// A gate for a process under `limit` (`None`: it never holds anything back).
    pub fn new(limit: Option<CpuLimit>) -> Arc<Self> {
        Arc::new(Self {
            limit,
            uses: Arc::default(),
            waiting: AtomicU64::new(0),
            wake: tokio::sync::Notify::new(),
            state: std::sync::Mutex::new(GateState {
                bucket: limit.map(|l| CpuBucket::new(l, SHARE)),
                seen: 0,
                last_use: None,
            }),
            waited_us: AtomicU64::new(0),
        })
    }

    /// The quota the gate keeps to, if any.
    pub fn limit(&self) -> Option<CpuLimit> {
        self.limit
    }

    /// The counter the mounts' recorders add every open and lookup to.
    pub fn uses(&self) -> Arc<AtomicU64> {
        self.uses.clone()
    }

    /// A read on a mount waits for a chunk until the guard is dropped: bulk streams are
    /// not held meanwhile.
    pub fn reader_waits(self: &Arc<Self>) -> ReaderWaits {
        if self.waiting.fetch_add(1, Ordering::Relaxed) == 0 {
            self.wake.notify_waiters();
        }
        ReaderWaits(self.clone())
    }

    /// What `status` and the metrics tell of `gate`: the quota in cores, if any, and the
    /// seconds bulk streams waited so far.
    pub fn figures(gate: Option<&Self>) -> (Option<f64>, f64) {
        gate.map_or((None, 0.0), |g| {
            (g.limit.map(|l| l.cores), g.waited().as_secs_f64())
        })
    }

    /// Time bulk streams waited at the gate so far.
    pub fn waited(&self) -> Duration {
        Duration::from_micros(self.waited_us.load(Ordering::Relaxed))
    }

    /// When the next bulk frame may be read, as things stand at `now` with the process's
    /// CPU at `cpu`: `None` for at once.
    fn due(&self, now: Instant, cpu: Duration) -> Option<Instant> {
        let mut s = lock(&self.state);
        let uses = self.uses.load(Ordering::Relaxed);
        if uses != s.seen {
            (s.seen, s.last_use) = (uses, Some(now));
        }
        let active = s.last_use.is_some_and(|t| now < t + ACTIVE_FOR)
            && self.waiting.load(Ordering::Relaxed) == 0;
        let bucket = s.bucket.as_mut()?;
        let due = bucket.admit(now, cpu);
        if !active {
            bucket.forgive();
        }
        due.filter(|_| active)
    }

    /// Waits until a bulk stream may read its next frame.
    pub async fn admit(&self) {
        if self.limit.is_none() {
            return;
        }
        let mut slept = None;
        loop {
            // Made before the check, so a read that starts waiting after it still wakes us.
            let woken = self.wake.notified();
            let now = Instant::now();
            let Some(due) = self.due(now, process_cpu()) else {
                break;
            };
            slept.get_or_insert(now);
            tokio::select! {
                () = tokio::time::sleep_until(due.min(now + RECHECK).into()) => {}
                () = woken => {}
            }
        }
        // Only time spent held counts, not the check itself (which a throttled process
        // may take milliseconds to finish).
        if let Some(t) = slept {
            let waited = t.elapsed().as_micros() as u64;
            self.waited_us.fetch_add(waited, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    fn limit(cores: f64) -> CpuLimit {
        CpuLimit {
            cores,
            period: 100 * MS,
        }
    }

    #[test]
    fn quotas_parse_from_v1_and_v2_files_and_none_means_none() {
        let l = CpuLimit::parse_v1("2570\n", "100000\n").expect("a quota");
        assert!((l.cores - 0.0257).abs() < 1e-9 && l.period == 100 * MS);
        assert_eq!(CpuLimit::parse_v1("-1", "100000"), None);
        let l = CpuLimit::parse_v2("50000 100000\n").expect("a quota");
        assert!((l.cores - 0.5).abs() < 1e-9);
        assert_eq!(CpuLimit::parse_v2("max 100000"), None);
        assert_eq!(CpuLimit::parse_v2(""), None);
        assert_eq!(CpuLimit::parse_v1("junk", "100000"), None);
    }

    const MOUNTINFO: &str = "\
25 30 0:22 / /sys/fs/cgroup rw - tmpfs tmpfs rw,mode=755
26 25 0:23 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
27 25 0:24 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
28 25 0:25 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";

    #[test]
    fn the_cpu_cgroup_and_its_ancestors_are_found_in_v1_before_v2() {
        let cgroups = "2:cpuacct:/x\n1:cpu:/teesfs-lab/tlab1-n01\n0::/other\n";
        let dirs = cgroup_dirs(cgroups, MOUNTINFO).expect("found");
        let want = [
            "/sys/fs/cgroup/cpu/teesfs-lab/tlab1-n01",
            "/sys/fs/cgroup/cpu/teesfs-lab",
            "/sys/fs/cgroup/cpu",
        ];
        assert_eq!(
            dirs,
            want.map(|d| (PathBuf::from(d), false)).to_vec(),
            "v1's cpu controller first, with every ancestor"
        );
        let v2 = cgroup_dirs("0::/system.slice/teesfs.service\n", MOUNTINFO).expect("v2");
        assert_eq!(
            v2[0],
            (
                PathBuf::from("/sys/fs/cgroup/unified/system.slice/teesfs.service"),
                true
            )
        );
        assert_eq!(v2.len(), 3);
        assert_eq!(cgroup_dirs("3:memory:/m\n", MOUNTINFO), None);
    }

    #[test]
    fn a_process_kept_to_its_share_is_never_held_and_one_above_it_is() {
        let t0 = Instant::now();
        let mut b = CpuBucket::new(limit(0.1), 0.75);
        assert_eq!(b.admit(t0, Duration::ZERO), None);
        // 7 ms of CPU per 100 ms: under 75% of 0.1 cores.
        for i in 1..=50u32 {
            assert_eq!(b.admit(t0 + 100 * MS * i, 7 * MS * i), None, "step {i}");
        }
        // Then 10 ms per 100 ms, all of the quota: held for what it used beyond.
        let (t1, c1) = (t0 + 5_000 * MS, 350 * MS);
        let mut held = 0;
        for i in 1..=20u32 {
            if b.admit(t1 + 100 * MS * i, c1 + 10 * MS * i).is_some() {
                held += 1;
            }
        }
        assert!(held >= 15, "held {held} of 20 steps");
    }

    #[test]
    fn the_wait_is_what_the_bucket_owes_at_its_rate_and_debt_is_bounded() {
        let t0 = Instant::now();
        let mut b = CpuBucket::new(limit(0.1), 0.5);
        b.admit(t0, Duration::ZERO);
        // 2.5 ms of burst, 10 ms used at once: owes 7.5 ms, at 0.05 cores 150 ms.
        let due = b.admit(t0, 10 * MS).expect("held");
        assert_eq!(due, t0 + 150 * MS);
        // Seconds of CPU used at once owe at most MAX_DEBT_S at the rate.
        let due = b.admit(t0, 10_000 * MS).expect("held");
        assert_eq!(due, t0 + Duration::from_secs_f64(MAX_DEBT_S));
        b.forgive();
        assert_eq!(b.admit(t0, 10_000 * MS), None);
    }

    #[test]
    fn the_gate_holds_a_stream_only_while_applications_are_active() {
        let gate = BulkGate::new(Some(limit(0.1)));
        let t0 = Instant::now();
        assert_eq!(gate.due(t0, Duration::ZERO), None);
        // The daemon used a whole core for a second: no application, nothing held, and
        // nothing owed afterwards.
        assert_eq!(gate.due(t0 + 1_000 * MS, 1_000 * MS), None);
        gate.uses().fetch_add(1, Ordering::Relaxed);
        assert_eq!(gate.due(t0 + 1_001 * MS, 1_000 * MS), None);
        // With an application active, the next 50 ms of CPU are beyond the share.
        assert!(gate.due(t0 + 1_002 * MS, 1_050 * MS).is_some());
        // A read waits for a chunk: the push is behind the application and goes on.
        let waits = gate.reader_waits();
        assert_eq!(gate.due(t0 + 1_003 * MS, 1_050 * MS), None);
        drop(waits);
        // What the stream used meanwhile is not owed; what it uses next beyond the share is.
        assert_eq!(gate.due(t0 + 1_004 * MS, 1_050 * MS), None);
        assert!(gate.due(t0 + 1_005 * MS, 1_100 * MS).is_some());
        // Quiet for longer than ACTIVE_FOR: the stream goes on.
        let later = t0 + 1_002 * MS + ACTIVE_FOR;
        assert_eq!(gate.due(later, 1_050 * MS), None);
        // A process with no quota is never held.
        let free = BulkGate::new(None);
        free.uses().fetch_add(1, Ordering::Relaxed);
        assert_eq!(free.due(t0, Duration::ZERO), None);
        assert_eq!(free.due(t0 + MS, 1_000 * MS), None);
    }
}

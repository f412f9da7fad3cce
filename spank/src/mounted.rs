//! Finding a job's mount from a task: a node mounts a job in the background once its
//! daemon has taken it, and reports the job's data as held independently of the mount, so
//! the prolog's push can end, and Slurm start the job's tasks, a moment before the mount is
//! there (most likely when the node's store already holds the layer and the push ends in
//! milliseconds). A task of a teesfs job therefore waits for it, bounded by `mount_wait=`
//! in plugstack.conf, woken by the kernel on every change of the mount table (no polling);
//! a task of any other job only looks.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use runenv::mountinfo::Watch;

use crate::Conf;

/// How long a task of a teesfs job waits for the job's mount by default.
pub const MOUNT_WAIT: Duration = Duration::from_secs(30);

impl Conf {
    /// Where job `job` is mounted on host `host`, and how long it was waited for: at once
    /// if it is ([`Duration::ZERO`]), else as soon as it is within `wait`; `None` if it is
    /// not by then.
    pub fn wait_mounted(
        &self,
        host: &str,
        job: u32,
        wait: Duration,
    ) -> Option<(PathBuf, Duration)> {
        let start = Instant::now();
        let deadline = start + wait;
        // Opened before the first look: a mount made between that look and the wait still
        // wakes it.
        let mut watch = Watch::new().ok();
        if let Some(dir) = self.mounted_dir(host, job) {
            return Some((dir, Duration::ZERO));
        }
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            let watched = match watch.as_mut().map(|w| w.changed(left)) {
                Some(Ok(_)) => true,
                // Interrupted by a signal: look again and wait for what is left.
                Some(Err(e)) => e.kind() == std::io::ErrorKind::Interrupted,
                None => false,
            };
            let found = self.mounted_dir(host, job).map(|d| (d, start.elapsed()));
            // The table cannot be watched: what is there now is the answer.
            if found.is_some() || !watched {
                return found;
            }
        }
    }
}

/// Parses `mount_wait=SECONDS` (whole seconds, 0 to not wait).
pub fn parse_wait(value: &str) -> Option<Duration> {
    value
        .parse::<u64>()
        .ok()
        .filter(|s| *s <= 3600)
        .map(Duration::from_secs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    struct Unmount(PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = nix::mount::umount2(&self.0, nix::mount::MntFlags::MNT_DETACH);
        }
    }

    fn tmpfs(at: &Path) {
        nix::mount::mount(
            Some("tmpfs"),
            at,
            Some("tmpfs"),
            nix::mount::MsFlags::empty(),
            None::<&str>,
        )
        .expect("mount tmpfs");
    }

    fn can_mount() -> bool {
        if nix::unistd::geteuid().is_root() {
            return true;
        }
        assert!(std::env::var_os("CI").is_none(), "CI must run this as root");
        false
    }

    /// A job mounted a moment after its task looks is found once it is, not refused; a job
    /// never mounted is refused when the wait is over, not before.
    #[test]
    fn a_task_waits_for_a_mount_made_after_it_looked() {
        if !can_mount() {
            return;
        }
        let root = tempfile::tempdir().expect("tempdir");
        let conf = Conf {
            mount_root: format!("{}/%h/jobs", root.path().display()),
            ..Conf::default()
        };
        let dir = conf.job_dir("n01", 7001);
        std::fs::create_dir_all(&dir).expect("job dir");
        let _guard = Unmount(dir.clone());
        let at = dir.clone();
        let mounter = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            tmpfs(&at);
        });
        let t = Instant::now();
        let found = conf.wait_mounted("n01", 7001, Duration::from_secs(20));
        let elapsed = t.elapsed();
        mounter.join().expect("mounter");
        let (at, waited) = found.expect("the mount made while it waited");
        assert_eq!(at, dir);
        assert!(
            elapsed >= Duration::from_millis(250) && elapsed < Duration::from_secs(10),
            "found after {elapsed:?}: woken by the mount, not by the bound"
        );
        assert!(
            waited >= Duration::from_millis(250) && waited <= elapsed,
            "{waited:?}"
        );
        // Mounted already: no wait at all.
        assert_eq!(
            conf.wait_mounted("n01", 7001, Duration::ZERO),
            Some((dir, Duration::ZERO))
        );

        let t = Instant::now();
        assert_eq!(
            conf.wait_mounted("n01", 7002, Duration::from_millis(400)),
            None
        );
        assert!(
            t.elapsed() >= Duration::from_millis(400),
            "{:?}",
            t.elapsed()
        );
    }

    #[test]
    fn the_wait_is_whole_seconds_up_to_an_hour() {
        assert_eq!(parse_wait("0"), Some(Duration::ZERO));
        assert_eq!(parse_wait("45"), Some(Duration::from_secs(45)));
        for bad in ["", "-1", "1.5", "30s", "3601"] {
            assert_eq!(parse_wait(bad), None, "{bad}");
        }
    }
}

//! Who holds a store's lock, as far as this user can see in `/proc`: the processes with a
//! descriptor of the lock file that carries a record lock. For the messages of a publish
//! that waits and a gc that is refused; decides nothing.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// At most this many holders are named.
const MAX_NAMED: usize = 8;

/// `pid 4242 (teesfs, uid 1000, shared)`, comma-separated; or what can be said when no
/// holder is visible (another user's processes are, to anyone but root).
pub fn describe(lock: &Path) -> String {
    let unseen = "a process this user cannot see (another user's; root can name it)";
    let Ok(md) = std::fs::metadata(lock) else {
        return unseen.into();
    };
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return unseen.into();
    };
    let mut found = Vec::new();
    for p in procs.flatten() {
        let Some(pid) = p.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        if let Some(kind) = holds(&p.path(), md.dev(), md.ino()) {
            found.push(format!("pid {pid} ({}, {kind})", who(&p.path())));
            if found.len() == MAX_NAMED {
                break;
            }
        }
    }
    if found.is_empty() {
        unseen.into()
    } else {
        found.join(", ")
    }
}

/// `shared` or `exclusive` if the process at `proc` holds a record lock through a
/// descriptor of the file (`dev`, `ino`).
fn holds(proc: &Path, dev: u64, ino: u64) -> Option<&'static str> {
    for fd in std::fs::read_dir(proc.join("fd")).ok()?.flatten() {
        let Ok(m) = std::fs::metadata(fd.path()) else {
            continue;
        };
        if m.dev() != dev || m.ino() != ino {
            continue;
        }
        let info =
            std::fs::read_to_string(proc.join("fdinfo").join(fd.file_name())).unwrap_or_default();
        if let Some(l) = info
            .lines()
            .find(|l| l.starts_with("lock:") && l.contains("OFDLCK"))
        {
            return Some(if l.contains("WRITE") {
                "exclusive"
            } else {
                "shared"
            });
        }
    }
    None
}

/// `teesfs, uid 1000` for the process at `proc`.
fn who(proc: &Path) -> String {
    let comm = std::fs::read_to_string(proc.join("comm")).unwrap_or_default();
    let uid = std::fs::read_to_string(proc.join("status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .and_then(|u| u.split_whitespace().next().map(str::to_owned))
        })
        .unwrap_or_else(|| "?".into());
    format!("{}, uid {uid}", comm.trim())
}

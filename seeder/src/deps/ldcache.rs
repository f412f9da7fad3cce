//! `/etc/ld.so.cache`, the loader's name-to-path cache written by `ldconfig`.
//!
//! The new format (glibc 2.32+ writes only this; older caches put it after a
//! `ld.so-1.7.0` header, which is skipped): a 48-byte header
//! (`glibc-ld.so.cache1.1`, number of entries, string table length, flags, extension
//! offset), then 24-byte entries (flags, key offset, value offset, OS version, hwcap),
//! then strings; offsets count from the start of the new header. The loader takes the
//! first entry for a name whose flags match its ABI (`0x303` = libc6, x86-64).

/// Why a cache file could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadCache(pub String);

const OLD_MAGIC: &[u8] = b"ld.so-1.7.0";
const NEW_MAGIC: &[u8] = b"glibc-ld.so.cache1.1";
const HEADER: usize = 48;
const ENTRY: usize = 24;
/// hwcap bit marking a `glibc-hwcaps/<name>` entry.
const HWCAP_EXTENSION: u64 = 1 << 62;

/// One cache entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CacheEntry {
    /// ABI flags (`0x303` for x86-64 libc6).
    pub flags: i32,
    /// The library name (the key).
    pub name: Vec<u8>,
    /// Its path.
    pub path: Vec<u8>,
    /// hwcap word (0 for the baseline entry).
    pub hwcap: u64,
}

/// A parsed cache.
#[derive(Clone, Debug, Default)]
pub struct LdCache {
    /// Entries in file order.
    pub entries: Vec<CacheEntry>,
}

fn u32_at(b: &[u8], off: usize) -> Result<u32, BadCache> {
    b.get(off..off + 4)
        .map(|s| u32::from_le_bytes(s.try_into().expect("4 bytes")))
        .ok_or_else(|| BadCache(format!("truncated at byte {off}")))
}

fn cstr_at(b: &[u8], off: usize) -> Result<&[u8], BadCache> {
    let rest = b
        .get(off..)
        .ok_or_else(|| BadCache(format!("string offset {off} is past the end")))?;
    let end = rest
        .iter()
        .position(|&c| c == 0)
        .ok_or_else(|| BadCache(format!("unterminated string at {off}")))?;
    Ok(&rest[..end])
}

impl LdCache {
    /// Parses a cache file's bytes (little-endian hosts).
    pub fn parse(bytes: &[u8]) -> Result<Self, BadCache> {
        let mut b = bytes;
        if b.starts_with(OLD_MAGIC) {
            // struct cache_file { magic[11]; pad; u32 nlibs; entries of 12 bytes }, then the
            // new format aligned to 8.
            let n = u32_at(b, 12)? as usize;
            let skip = (16usize.saturating_add(n.saturating_mul(12)) + 7) & !7;
            b = b
                .get(skip..)
                .filter(|r| r.starts_with(NEW_MAGIC))
                .ok_or_else(|| BadCache("old-format cache without a new-format part".into()))?;
        }
        if !b.starts_with(NEW_MAGIC) {
            return Err(BadCache("no glibc-ld.so.cache1.1 magic".into()));
        }
        let n = u32_at(b, 20)? as usize;
        if HEADER.saturating_add(n.saturating_mul(ENTRY)) > b.len() {
            return Err(BadCache(format!("{n} entries do not fit in the file")));
        }
        let mut entries = Vec::with_capacity(n);
        for i in 0..n {
            let at = HEADER + i * ENTRY;
            let flags = u32_at(b, at)? as i32;
            let key = u32_at(b, at + 4)? as usize;
            let value = u32_at(b, at + 8)? as usize;
            let hwcap = u64::from(u32_at(b, at + 16)?) | (u64::from(u32_at(b, at + 20)?) << 32);
            entries.push(CacheEntry {
                flags,
                name: cstr_at(b, key)?.to_vec(),
                path: cstr_at(b, value)?.to_vec(),
                hwcap,
            });
        }
        Ok(Self { entries })
    }

    /// The path the loader would take for `name`: among entries with `flags` (and
    /// baseline or a supported `glibc-hwcaps` subdirectory), the one of the
    /// highest-priority subdirectory, else the first baseline one. `hwcaps` lists the
    /// supported subdirectory names, best first.
    pub fn lookup(&self, name: &[u8], flags: i32, hwcaps: &[String]) -> Option<&[u8]> {
        let mut best: Option<(usize, &[u8])> = None;
        for e in self
            .entries
            .iter()
            .filter(|e| e.name == name && e.flags == flags)
        {
            let rank = if e.hwcap & HWCAP_EXTENSION == 0 {
                if e.hwcap != 0 {
                    continue; // legacy hwcap bits: not modelled, never chosen
                }
                hwcaps.len()
            } else {
                let path = String::from_utf8_lossy(&e.path);
                match hwcaps
                    .iter()
                    .position(|h| path.contains(&format!("/glibc-hwcaps/{h}/")))
                {
                    Some(r) => r,
                    None => continue,
                }
            };
            if best.is_none_or(|(r, _)| rank < r) {
                best = Some((rank, &e.path));
            }
        }
        best.map(|(_, p)| p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    /// Every `name (abi) => path` line of `ldconfig -p` is an entry of our parse of the
    /// same file, and the counts agree.
    #[test]
    fn parses_the_real_cache_like_ldconfig() {
        let bytes = std::fs::read("/etc/ld.so.cache").expect("this machine has a cache");
        let cache = LdCache::parse(&bytes).expect("parses");
        let out = std::process::Command::new("ldconfig")
            .args(["-p", "-C", "/etc/ld.so.cache"])
            .output()
            .or_else(|_| {
                std::process::Command::new("/sbin/ldconfig")
                    .arg("-p")
                    .output()
            })
            .expect("ldconfig runs");
        let text = String::from_utf8_lossy(&out.stdout);
        let mut theirs = BTreeSet::new();
        let mut header_count = None;
        for line in text.lines() {
            if let Some(n) = line.split_whitespace().next()
                && line.contains("libs found in cache")
            {
                header_count = n.parse::<usize>().ok();
            }
            if let Some((left, path)) = line.trim().split_once(" => ") {
                let name = left.split(" (").next().expect("name");
                theirs.insert((name.to_string(), path.to_string()));
            }
        }
        let ours: BTreeSet<(String, String)> = cache
            .entries
            .iter()
            .map(|e| {
                (
                    String::from_utf8_lossy(&e.name).into_owned(),
                    String::from_utf8_lossy(&e.path).into_owned(),
                )
            })
            .collect();
        assert!(!theirs.is_empty(), "ldconfig -p listed nothing: {text}");
        assert_eq!(Some(cache.entries.len()), header_count);
        assert_eq!(ours, theirs);
        let libc = cache
            .lookup(b"libc.so.6", 0x303, &[])
            .expect("libc.so.6 is cached");
        assert!(libc.ends_with(b"/libc.so.6"));
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        assert!(LdCache::parse(b"").is_err());
        assert!(LdCache::parse(b"glibc-ld.so.cache1.1\xff\xff\xff\xff").is_err());
        let bytes = std::fs::read("/etc/ld.so.cache").expect("cache");
        for n in (0..bytes.len()).step_by(97) {
            let _ = LdCache::parse(&bytes[..n]);
        }
    }
}

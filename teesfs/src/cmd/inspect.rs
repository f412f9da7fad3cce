//! `teesfs inspect`: list the indexes of a store, or what one index holds.

use std::path::PathBuf;

use manifest::{EntryIdx, EntryKind, FileData, Limits, SignedIndex};
use seeder::DirStore;

use super::util;

/// Arguments of `teesfs inspect`.
#[derive(Debug, clap::Args)]
pub struct InspectArgs {
    /// The store.
    #[arg(long, value_name = "DIR")]
    store: PathBuf,
    /// Index id or unique prefix; without it, list the store's indexes.
    #[arg(long, value_name = "ID")]
    index: Option<String>,
    /// Trusted publisher public key (repeatable); see `teesfs verify --help`.
    #[arg(long, value_name = "FILE.pub")]
    trust: Vec<PathBuf>,
}

fn mode_string(kind: &EntryKind, mode: u32) -> String {
    let t = match kind {
        EntryKind::Dir => 'd',
        EntryKind::Symlink { .. } => 'l',
        _ => '-',
    };
    let mut s = String::with_capacity(10);
    s.push(t);
    for (i, c) in ['r', 'w', 'x', 'r', 'w', 'x', 'r', 'w', 'x']
        .iter()
        .enumerate()
    {
        let bit = 1 << (8 - i);
        let mut ch = if mode & bit != 0 { *c } else { '-' };
        if i == 2 && mode & 0o4000 != 0 {
            ch = if ch == 'x' { 's' } else { 'S' };
        }
        if i == 5 && mode & 0o2000 != 0 {
            ch = if ch == 'x' { 's' } else { 'S' };
        }
        if i == 8 && mode & 0o1000 != 0 {
            ch = if ch == 'x' { 't' } else { 'T' };
        }
        s.push(ch);
    }
    s
}

/// Runs `teesfs inspect`.
pub fn run(args: InspectArgs) -> anyhow::Result<()> {
    let store = DirStore::open(&args.store)?;
    let Some(prefix) = &args.index else {
        let ids = store.list_indexes()?;
        println!("{} index(es) in {}", ids.len(), args.store.display());
        for id in ids {
            let bytes = store.get_index(&id)?;
            let len = bytes.len() as u64;
            let signed = SignedIndex::from_bytes(bytes, &Limits::default())?;
            let publisher = signed.publisher()?.to_hex();
            println!(
                "  {id}  {:>10}  publisher {}{}",
                util::bytes(len),
                publisher.get(..16).unwrap_or_default(),
                validity(&signed)
            );
        }
        return Ok(());
    };
    let (id, bytes, index) =
        util::open_trusted_index(&store, prefix, &args.trust, util::Expired::Allow)?;
    let signed = SignedIndex::from_bytes(bytes, &Limits::default())?;
    println!(
        "index {id}: {} entries, {} of files, {} unique chunks ({} stored), chunk size {}{}",
        index.entries.len(),
        util::bytes(index.total_file_bytes()),
        index.chunks.len(),
        util::bytes(index.total_stored_bytes()),
        util::bytes(u64::from(index.chunk_size)),
        validity(&signed)
    );
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    use std::io::Write;
    let urgent_pos: std::collections::HashMap<EntryIdx, usize> = index
        .urgent
        .iter()
        .enumerate()
        .map(|(n, &e)| (e, n + 1))
        .collect();
    for (i, e) in index.entries.iter().enumerate() {
        let idx = EntryIdx(i as u32);
        let path = String::from_utf8_lossy(&index.path_of(idx)).into_owned();
        let target = index.entry(index.resolve(idx));
        let (size, extra) = match &e.kind {
            EntryKind::File { size, data } => (
                *size,
                match data {
                    FileData::Inline(_) => " [inline]".to_string(),
                    FileData::Chunks(s) => format!(" [{} chunks]", s.len()),
                },
            ),
            EntryKind::Symlink { target } => (
                target.len() as u64,
                format!(" -> {}", String::from_utf8_lossy(target)),
            ),
            EntryKind::Hardlink { target } => (
                match &index.entry(*target).kind {
                    EntryKind::File { size, .. } => *size,
                    _ => 0,
                },
                format!(" => {}", String::from_utf8_lossy(&index.path_of(*target))),
            ),
            EntryKind::Dir => (0, String::new()),
        };
        let urgent = match urgent_pos.get(&idx) {
            Some(n) => format!(" [urgent #{n}]"),
            None => String::new(),
        };
        let r = writeln!(
            out,
            "{} {:>5}:{:<5} {:>12} /{}{}{}",
            mode_string(&target.kind, target.meta.mode),
            target.meta.uid,
            target.meta.gid,
            size,
            path,
            extra,
            urgent
        );
        if r.is_err() {
            break; // stdout closed (e.g. piped into head)
        }
    }
    Ok(())
}

/// `, valid until <time>` (or `, EXPIRED at <time>`) for an index signed with an expiry.
fn validity(signed: &SignedIndex) -> String {
    let Some(at) = signed.expires() else {
        return String::new();
    };
    let when = humantime::format_rfc3339_seconds(
        std::time::UNIX_EPOCH + std::time::Duration::from_secs(at),
    );
    if at <= util::unix_now() {
        format!(", EXPIRED at {when}")
    } else {
        format!(", valid until {when}")
    }
}

//! `teesfs inspect`: list the indexes of a store, or what one index holds.

use std::path::PathBuf;

use anyhow::Context;

use manifest::{EntryIdx, EntryKind, FileData, Limits, SignedIndex};
use pushreport::output::{self, EntryDoc, ImageDoc, IndexDoc, IndexList, IndexSummary};
use seeder::DirStore;

use super::util;

/// Arguments of `teesfs inspect`.
#[derive(Debug, clap::Args)]
pub struct InspectArgs {
    /// The store.
    #[arg(long, value_name = "DIR")]
    store: PathBuf,
    /// A tag, or at least 4 hex characters of the index id; without it, list the store's
    /// indexes and their tags.
    #[arg(long, value_name = "TAG|ID")]
    index: Option<String>,
    /// Trusted publisher public key (repeatable); see `teesfs verify --help`.
    #[arg(long, value_name = "FILE.pub")]
    trust: Vec<PathBuf>,
    /// What to print: `text`, or `json`. Without --index: `{"version": 1, "store": DIR,
    /// "indexes": [{"id", "bytes", "publisher", "expires", "tags": [NAME], "published",
    /// "files", "file_bytes", "stored_bytes", "urgent_bytes"}]}` (by id; the text table is
    /// newest first); with it: `{"version": 1,
    /// "id", "publisher", "expires", "file_bytes", "chunks", "stored_bytes", "chunk_size",
    /// "entries": [{"path", "kind", "mode", "uid", "gid", "size", "target", "urgent"}],
    /// "image": {"env", "entrypoint", "cmd", "working_dir", "user", "labels"} or null}`
    /// (sizes in bytes, expires in seconds since the epoch or null; `image` is the config
    /// of an index published with `teesfs publish --image`;
    /// pushreport::output::IndexList and IndexDoc).
    #[arg(long, value_enum, default_value_t = util::Format::Text)]
    format: util::Format,
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
        let list = index_list(&store, &args.store)?;
        if args.format == util::Format::Json {
            return util::print_json(&list);
        }
        print_table(&list);
        return Ok(());
    };
    let (id, bytes, index) =
        util::open_trusted_index(&store, prefix, &args.trust, util::Expired::Allow)?;
    let signed = SignedIndex::from_bytes(bytes, &Limits::default())?;
    if args.format == util::Format::Json {
        return util::print_json(&index_doc(&id.to_string(), &signed, &index)?);
    }
    outln!(
        "index {id}: {} entries, {} of files, {} unique chunks ({} stored), chunk size {}{}",
        index.entries.len(),
        util::bytes(index.total_file_bytes()),
        index.chunks.len(),
        util::bytes(index.total_stored_bytes()),
        util::bytes(u64::from(index.chunk_size)),
        validity(signed.expires())
    );
    if let Some(image) = &index.image {
        for line in image_lines(image, prefix) {
            outln!("{line}");
        }
    }
    print_learned(&store, &id, &index);
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

/// One line on the index's learned urgent list (`teesfs learn`), if it has one.
fn print_learned(store: &DirStore, id: &manifest::IndexId, index: &manifest::Index) {
    match seeder::learned::read_learned(store, id) {
        Ok(None) => {}
        Ok(Some(list)) => {
            let (found, unknown) = manifest::entries_named(index, &list.files);
            outln!(
                "learned urgent list: {} files the next push sends first{} ({})",
                found.len(),
                if unknown > 0 {
                    format!(", {unknown} not in the index")
                } else {
                    String::new()
                },
                seeder::learned::learned_path(store, id).display()
            );
            if let Some(from) = list.header.get(1) {
                outln!("  {from}");
            }
        }
        Err(e) => outln!("learned urgent list: {e}"),
    }
}

/// The store's indexes, by id, with their tags and sizes. Read, not verified: the
/// listing is for choosing one, which the command that uses it then verifies.
fn index_list(store: &DirStore, dir: &std::path::Path) -> anyhow::Result<IndexList> {
    let mut tags: std::collections::HashMap<manifest::IndexId, Vec<String>> = Default::default();
    let all = store.tags()?;
    for (name, id) in all.tags {
        tags.entry(id).or_default().push(name.to_string());
    }
    // One bad tag file must not hide the store: it is named, and the listing goes on.
    for e in all.unreadable {
        errln!("warning: {e}; the listing shows no tag from it");
    }
    let mut list = IndexList {
        version: output::VERSION,
        store: dir.display().to_string(),
        indexes: Vec::new(),
    };
    for id in store.list_indexes()? {
        let bytes = store.get_index(&id)?;
        let len = bytes.len() as u64;
        let signed = SignedIndex::from_bytes(bytes, &Limits::default())
            .and_then(|s| s.decode(&Limits::default()).map(|i| (s, i)));
        let (signed, index) = signed.with_context(|| {
            format!(
                "index {id} in {} cannot be read; `teesfs verify --store {0} --index {}` says more",
                dir.display(),
                &id.to_hex()[..12]
            )
        })?;
        list.indexes.push(IndexSummary {
            id: id.to_string(),
            bytes: len,
            publisher: signed.publisher()?.to_hex(),
            expires: signed.expires(),
            tags: tags.remove(&id).unwrap_or_default(),
            published: util::unix_secs(store.index_published(&id)?),
            files: index
                .entries
                .iter()
                .filter(|e| matches!(e.kind, EntryKind::File { .. }))
                .count() as u64,
            file_bytes: index.total_file_bytes(),
            stored_bytes: index.total_stored_bytes(),
            urgent_bytes: util::urgent_size(&index).2,
        });
    }
    Ok(list)
}

/// The listing as an aligned table, newest first.
fn print_table(list: &IndexList) {
    let mut rows: Vec<&IndexSummary> = list.indexes.iter().collect();
    rows.sort_by(|a, b| b.published.cmp(&a.published).then(a.id.cmp(&b.id)));
    let tags: Vec<String> = rows
        .iter()
        .map(|i| {
            if i.tags.is_empty() {
                "-".into()
            } else {
                i.tags.join(",")
            }
        })
        .collect();
    let tw = tags.iter().map(String::len).chain([4]).max().unwrap_or(4);
    outln!(
        "{:<16}  {:<tw$}  {:<16}  {:>8}  {:>10}  {:>10}  {:>10}  PUBLISHER",
        "ID",
        "TAGS",
        "PUBLISHED (UTC)",
        "FILES",
        "SIZE",
        "STORED",
        "URGENT"
    );
    for (i, tags) in rows.iter().zip(&tags) {
        outln!(
            "{:<16}  {:<tw$}  {:<16}  {:>8}  {:>10}  {:>10}  {:>10}  {}{}",
            i.id.get(..16).unwrap_or(&i.id),
            tags,
            util::date(i.published),
            i.files,
            util::bytes(i.file_bytes),
            util::bytes(i.stored_bytes),
            util::bytes(i.urgent_bytes),
            i.publisher.get(..16).unwrap_or_default(),
            validity(i.expires)
        );
    }
    outln!(
        "{} index(es) in {}; --index takes a tag or 4+ hex characters of an id",
        list.indexes.len(),
        list.store
    );
}

/// One index and its entries, for a script.
fn index_doc(id: &str, signed: &SignedIndex, index: &manifest::Index) -> anyhow::Result<IndexDoc> {
    let urgent_pos: std::collections::HashMap<EntryIdx, u64> = index
        .urgent
        .iter()
        .enumerate()
        .map(|(n, &e)| (e, n as u64 + 1))
        .collect();
    let lossy = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    let entries = index
        .entries
        .iter()
        .enumerate()
        .map(|(i, e)| {
            let idx = EntryIdx(i as u32);
            let target = index.entry(index.resolve(idx));
            let (kind, size, pointee) = match &e.kind {
                EntryKind::File { size, .. } => ("file", *size, None),
                EntryKind::Dir => ("dir", 0, None),
                EntryKind::Symlink { target } => {
                    ("symlink", target.len() as u64, Some(lossy(target)))
                }
                EntryKind::Hardlink { target: t } => (
                    "hardlink",
                    match &index.entry(*t).kind {
                        EntryKind::File { size, .. } => *size,
                        _ => 0,
                    },
                    Some(lossy(&index.path_of(*t))),
                ),
            };
            EntryDoc {
                path: lossy(&index.path_of(idx)),
                kind: kind.to_owned(),
                mode: target.meta.mode,
                uid: target.meta.uid,
                gid: target.meta.gid,
                size,
                target: pointee,
                urgent: urgent_pos.get(&idx).copied(),
            }
        })
        .collect();
    Ok(IndexDoc {
        version: output::VERSION,
        id: id.to_owned(),
        publisher: signed.publisher()?.to_hex(),
        expires: signed.expires(),
        file_bytes: index.total_file_bytes(),
        chunks: index.chunks.len() as u64,
        stored_bytes: index.total_stored_bytes(),
        chunk_size: u64::from(index.chunk_size),
        entries,
        image: index.image.as_ref().map(|c| ImageDoc {
            env: c.env.clone(),
            entrypoint: c.entrypoint.clone(),
            cmd: c.cmd.clone(),
            working_dir: c.working_dir.clone(),
            user: c.user.clone(),
            labels: c.labels.clone(),
        }),
    })
}

/// The image config of an index published with `teesfs publish --image` (`name` is how the
/// user named it), as `teesfs run --image` and `--teesfs-image` use it: the command a task
/// runs without one, where it starts, and the environment it gets. Fields the image leaves
/// empty are left out.
fn image_lines(image: &manifest::ImageConfig, name: &str) -> Vec<String> {
    let words = |w: &[String]| {
        w.iter()
            .map(|a| util::shell_word(a))
            .collect::<Vec<_>>()
            .join(" ")
    };
    let default: Vec<String> = image.entrypoint.iter().chain(&image.cmd).cloned().collect();
    let mut lines = vec!["image config (`teesfs run --image`, `--teesfs-image`):".to_string()];
    lines.push(if default.is_empty() {
        format!("  command:     none; give one: teesfs run --image {name} -- CMD")
    } else {
        format!(
            "  command:     {}  (Entrypoint + Cmd: what runs without `-- CMD`)",
            words(&default)
        )
    });
    if !image.entrypoint.is_empty() {
        lines.push(format!("  entrypoint:  {}", words(&image.entrypoint)));
    }
    if !image.cmd.is_empty() {
        lines.push(format!("  cmd:         {}", words(&image.cmd)));
    }
    if let Some(wd) = &image.working_dir {
        lines.push(format!(
            "  workdir:     {wd}  (when the task's directory is not in the image)"
        ));
    }
    if let Some(user) = &image.user {
        lines.push(format!(
            "  user:        {user}  (not used: tasks run as the user who starts them)"
        ));
    }
    let mut label = "env:";
    for e in &image.env {
        lines.push(format!("  {label:<12} {e}"));
        label = "";
    }
    let mut label = "labels:";
    for (k, v) in &image.labels {
        lines.push(format!("  {label:<12} {k}={v}"));
        label = "";
    }
    lines
}

/// `, valid until <time>` (or `, EXPIRED at <time>`) for an index signed with an expiry.
fn validity(expires: Option<u64>) -> String {
    let Some(at) = expires else {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_image_block_shows_the_default_command_as_sh_would_take_it_and_leaves_out_empty_fields() {
        let image = manifest::ImageConfig {
            env: vec!["PATH=/bin".into(), "A=b c".into()],
            entrypoint: vec!["/bin/sh".into(), "-c".into()],
            cmd: vec!["echo 'hi'; pwd".into()],
            working_dir: Some("/wd".into()),
            ..Default::default()
        };
        let lines = image_lines(&image, "app");
        assert_eq!(
            lines[1],
            r#"  command:     /bin/sh -c 'echo '\''hi'\''; pwd'  (Entrypoint + Cmd: what runs without `-- CMD`)"#
        );
        assert!(lines.iter().any(|l| l == "  env:         PATH=/bin"));
        assert!(lines.iter().any(|l| l == "               A=b c"));
        assert!(
            !lines
                .iter()
                .any(|l| l.contains("user:") || l.contains("labels:"))
        );
        let none = image_lines(&manifest::ImageConfig::default(), "app");
        assert_eq!(
            none,
            [
                "image config (`teesfs run --image`, `--teesfs-image`):",
                "  command:     none; give one: teesfs run --image app -- CMD"
            ]
        );
        assert_eq!(util::shell_word(""), "''");
    }
}

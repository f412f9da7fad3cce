//! `teesfs gc`: remove a store's old indexes and the chunks only they needed
//! (`seeder::gc` decides and deletes; this parses and prints).

use std::path::PathBuf;
use std::time::Duration;

use pushreport::output::{self, GcDoc, GcRemovedIndex, GcUnreadableTag};
use seeder::DirStore;
use seeder::gc::{Policy, Report};

use super::util;

/// Arguments of `teesfs gc`.
#[derive(Debug, clap::Args)]
#[command(
    group(clap::ArgGroup::new("what").required(true).multiple(true).args(["keep", "older_than"])),
    after_help = "\
Examples:
  teesfs gc --store /shared/teesfs --keep 3 --dry-run     # what would go
  teesfs gc --store /shared/teesfs --keep 3               # the 3 newest and every tagged index
  teesfs gc --store /shared/teesfs --older-than 30d --format json

An index stays if any rule keeps it: it is among the --keep newest (by when it was last
published), younger than --older-than, or tagged (unless --no-keep-tag; its tags then go
with it). Then every chunk no kept index references is removed, the temporary files (.tmp*)
a crashed publish or learn left beside chunks, indexes, tags and learned lists, and learned
lists of indexes the store no longer holds. Only indexes/<id>.idx, the tags and learned
urgent lists (learned/<id>.list, see `teesfs learn --help`) of removed indexes,
chunks/<xx>/<id>, learned/<id>.list of no index and those .tmp* files are ever deleted;
symlinks are not followed: gc works through the store's own directories, opened without
following links, and refuses a store whose top-level entries are links or belong to someone
other than the store directory's owner (or root).

A tag file that cannot be read (damaged, or a directory or link in its place) is named in a
warning and does not stop gc; as it may name any index, every index counts as tagged while
it is there, so no index a tag keeps is removed until the file is fixed or removed.

Safe beside a publish and beside readers: a publish writes its chunks before its index, so
while it runs they belong to no index. Publish holds STORE/.lock shared (a record lock,
fcntl) until its index and tag are written, and so do the readers of the store while they
read (push, prefetch, mount, record, storage-mode nodes); gc takes it exclusive, failing at
once (nothing deleted, the holders named) while any of them runs. Only a descriptor open
for writing can take the lock exclusive, so a reader can keep gc out but never stalls a
publish. For publishers the lock cannot reach (a filesystem without locks), no chunk
modified within --grace is deleted, nor any temporary file.")]
pub struct GcArgs {
    /// The store.
    #[arg(long, value_name = "DIR")]
    store: PathBuf,
    /// Keep the N most recently published indexes.
    #[arg(long, value_name = "N")]
    keep: Option<usize>,
    /// Keep indexes published less than DURATION ago (e.g. 30d, 12h).
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
    older_than: Option<Duration>,
    /// Keep every tagged index (the default).
    #[arg(long, overrides_with = "no_keep_tag")]
    keep_tag: bool,
    /// Tagged indexes are removed like the others, with their tags.
    #[arg(long, overrides_with = "keep_tag")]
    no_keep_tag: bool,
    /// Never delete a chunk or temporary file modified less than DURATION ago.
    #[arg(long, value_name = "DURATION", default_value = "1h", value_parser = humantime::parse_duration)]
    grace: Duration,
    /// Say what would be removed; delete nothing.
    #[arg(long)]
    dry_run: bool,
    /// What to print: `text`, or `json`: `{"version": 1, "store", "dry_run", "locked",
    /// "kept_indexes": [ID], "removed_indexes": [{"id", "tags": [NAME], "published",
    /// "bytes", "learned_bytes"}], "kept_chunks", "kept_chunk_bytes", "young_chunks",
    /// "young_chunk_bytes", "removed_chunks", "removed_chunk_bytes", "removed_temp_files",
    /// "removed_temp_bytes", "freed_bytes", "unreadable_tags": [{"path", "reason"}]}` (sizes
    /// in bytes, times in seconds since the
    /// epoch; pushreport::output::GcDoc).
    #[arg(long, value_enum, default_value_t = util::Format::Text)]
    format: util::Format,
}

/// Runs `teesfs gc`.
pub fn run(args: GcArgs) -> anyhow::Result<()> {
    let store = DirStore::open(&args.store)?;
    let policy = Policy {
        keep_newest: args.keep,
        older_than: args.older_than,
        keep_tagged: !args.no_keep_tag,
        grace: args.grace,
    };
    let report = seeder::gc::collect(&store, &policy, args.dry_run, std::time::SystemTime::now())?;
    let doc = doc(&args.store, &report);
    match args.format {
        util::Format::Json => util::print_json(&doc),
        util::Format::Text => {
            print_text(&doc);
            Ok(())
        }
    }
}

fn doc(store: &std::path::Path, r: &Report) -> GcDoc {
    GcDoc {
        version: output::VERSION,
        store: store.display().to_string(),
        dry_run: r.dry_run,
        locked: r.locked,
        kept_indexes: r.kept_indexes.iter().map(ToString::to_string).collect(),
        removed_indexes: r
            .removed_indexes
            .iter()
            .map(|i| GcRemovedIndex {
                id: i.id.to_string(),
                tags: i.tags.iter().map(ToString::to_string).collect(),
                published: util::unix_secs(i.published),
                bytes: i.bytes,
                learned_bytes: i.learned_bytes,
            })
            .collect(),
        kept_chunks: r.kept_chunks,
        kept_chunk_bytes: r.kept_chunk_bytes,
        young_chunks: r.young_chunks,
        young_chunk_bytes: r.young_chunk_bytes,
        removed_chunks: r.removed_chunks,
        removed_chunk_bytes: r.removed_chunk_bytes,
        removed_temp_files: r.removed_temp_files,
        removed_temp_bytes: r.removed_temp_bytes,
        freed_bytes: r.freed_bytes(),
        unreadable_tags: r
            .unreadable_tags
            .iter()
            .map(|t| GcUnreadableTag {
                path: t.path.display().to_string(),
                reason: t.reason.clone(),
            })
            .collect(),
    }
}

fn print_text(d: &GcDoc) {
    let (verb, freed) = if d.dry_run {
        ("would remove", "would free")
    } else {
        ("removed", "freed")
    };
    for t in &d.unreadable_tags {
        errln!(
            "warning: tag file {} is damaged ({}); every index counts as tagged while it is \
             there, so gc removed no index a tag keeps: tag the index again with `teesfs \
             publish --tag` or remove the file",
            t.path,
            t.reason
        );
    }
    if !d.locked {
        errln!(
            "warning: the store's filesystem has no locks; only --grace protected a concurrent publish"
        );
    }
    for i in &d.removed_indexes {
        let mut tags = if i.tags.is_empty() {
            String::new()
        } else {
            format!(" (tags {})", i.tags.join(", "))
        };
        if i.learned_bytes > 0 {
            tags.push_str(" and its learned urgent list");
        }
        outln!(
            "{verb} index {} published {}{tags}",
            i.id.get(..16).unwrap_or(&i.id),
            util::date(i.published)
        );
    }
    outln!(
        "{verb} {} index(es) and {} chunk(s); {freed} {}",
        d.removed_indexes.len(),
        d.removed_chunks,
        util::bytes(d.freed_bytes)
    );
    outln!(
        "kept {} index(es) and {} chunk(s) ({})",
        d.kept_indexes.len(),
        d.kept_chunks,
        util::bytes(d.kept_chunk_bytes)
    );
    if d.removed_temp_files > 0 {
        outln!(
            "{verb} {} temporary file(s) ({}) a crashed publish or learn left, or learned \
             lists of indexes no longer here",
            d.removed_temp_files,
            util::bytes(d.removed_temp_bytes)
        );
    }
    if d.young_chunks > 0 {
        outln!(
            "kept {} unreferenced chunk(s) ({}) younger than --grace",
            d.young_chunks,
            util::bytes(d.young_chunk_bytes)
        );
    }
}

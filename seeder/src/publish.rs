//! Publishing: build the index of a layer directory, store its new chunks, sign the index
//! and store it.
//!
//! Nothing is signed that was not checked: a file that changed while it was read is read
//! again (a few times, then the publish fails naming it), and every chunk the index lists
//! was checked in the store before the index is signed: one already there counts only if
//! it decodes to its id ([`manifest::ChunkSink::stored_form`]), a new one is written from
//! the bytes just hashed. (Reading the new ones back as well doubled the publish time of a
//! 50,000-file layer, for nothing an attacker who can write the store could not undo
//! after the signature anyway: nodes verify every chunk.) The new ones are marked as written
//! whole ([`crate::mark`]), so the push root does not hash them again at every push.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use manifest::build::BuildProgress;
use manifest::{BuildOptions, BuildReport, Index, IndexId, SecretKey, SignedIndex};

use crate::{DirStore, Error, TagName};

/// The publisher's sink: the store, marking each chunk file it writes.
struct Marking<'a>(&'a DirStore);

impl manifest::ChunkSink for Marking<'_> {
    fn stored_form(&self, id: &manifest::ChunkId, plain_len: u32) -> Option<manifest::StoredForm> {
        manifest::ChunkSink::stored_form(self.0, id, plain_len)
    }
    fn put(&self, id: &manifest::ChunkId, stored: &[u8]) -> std::io::Result<()> {
        self.0.put_marked(id, stored)
    }
}

/// How often a layer is read before a file that keeps changing fails the publish.
const PUBLISH_ATTEMPTS: u32 = 3;

/// The result of a publish.
#[derive(Debug)]
pub struct Published {
    /// Id of the signed index.
    pub id: IndexId,
    /// The index itself.
    pub index: Index,
    /// Size of the signed index file.
    pub index_bytes: u64,
    /// What the build did.
    pub report: BuildReport,
    /// Wall time.
    pub elapsed: Duration,
}

/// Publishes `layer` into `store`, signed with `key`.
pub fn publish(
    layer: &Path,
    store: &DirStore,
    key: &SecretKey,
    opts: &BuildOptions,
    progress: &dyn BuildProgress,
) -> Result<Published, Error> {
    publish_with_urgent(layer, store, key, opts, &[], progress)
}

/// Publishes `layer` with `urgent` (paths relative to the layer root, in the order they
/// are needed) as the index's urgent list. A path that is not in the layer is an error,
/// found before any content is hashed.
pub fn publish_with_urgent(
    layer: &Path,
    store: &DirStore,
    key: &SecretKey,
    opts: &BuildOptions,
    urgent: &[PathBuf],
    progress: &dyn BuildProgress,
) -> Result<Published, Error> {
    publish_tagged(layer, store, key, opts, urgent, None, progress)
}

/// [`publish_with_urgent`], then points `tag` (if any) at the new index. The store's lock
/// is held shared from the first chunk to the tag ([`crate::lock`]), so a gc cannot take
/// the chunks of an index not yet written, nor the index before it is tagged.
pub fn publish_tagged(
    layer: &Path,
    store: &DirStore,
    key: &SecretKey,
    opts: &BuildOptions,
    urgent: &[PathBuf],
    tag: Option<&TagName>,
    progress: &dyn BuildProgress,
) -> Result<Published, Error> {
    publish_adjusted(layer, store, key, opts, urgent, tag, progress, &|_| {})
}

/// [`publish_tagged`], with `adjust` run on the built index before it is signed (a
/// container image's owners, modes and config, which its staging tree cannot carry).
#[allow(clippy::too_many_arguments)]
pub fn publish_adjusted(
    layer: &Path,
    store: &DirStore,
    key: &SecretKey,
    opts: &BuildOptions,
    urgent: &[PathBuf],
    tag: Option<&TagName>,
    progress: &dyn BuildProgress,
    adjust: &dyn Fn(&mut Index),
) -> Result<Published, Error> {
    let start = Instant::now();
    if !layer.is_dir() {
        return Err(Error::NotADirectory(layer.to_path_buf()));
    }
    for p in urgent {
        let rel = p.strip_prefix("/").unwrap_or(p);
        if std::fs::symlink_metadata(layer.join(rel)).is_err() {
            return Err(manifest::Error::UnknownUrgentPath {
                path: p.display().to_string(),
                reason: format!("no such file in {}", layer.display()),
            }
            .into());
        }
    }
    let _lock = store.lock_shared()?;
    let mut attempt = 1;
    let (mut index, report) = loop {
        match manifest::build(layer, opts, &Marking(store), progress) {
            Err(manifest::Error::FileChanged { path }) if attempt < PUBLISH_ATTEMPTS => {
                tracing::warn!(path = %path.display(), attempt, "a file changed while it was published; reading the layer again");
                attempt += 1;
            }
            Err(manifest::Error::FileChanged { path }) => {
                return Err(Error::ChangedWhilePublished {
                    path,
                    attempts: attempt,
                });
            }
            other => break other?,
        }
    };
    adjust(&mut index);
    manifest::set_urgent_paths(&mut index, urgent)?;
    let signed = SignedIndex::sign_until(&index, key, 3, opts.expires);
    let id = store.put_index(&signed)?;
    if let Some(tag) = tag {
        store.set_tag(tag, &id)?;
    }
    tracing::info!(%id, files = report.files, "published");
    Ok(Published {
        id,
        index,
        index_bytes: signed.as_bytes().len() as u64,
        report,
        elapsed: start.elapsed(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use manifest::ChunkId;
    use manifest::build::NoProgress;

    fn write(p: &Path, bytes: &[u8]) {
        std::fs::create_dir_all(p.parent().expect("has parent")).expect("mkdir");
        std::fs::write(p, bytes).expect("write");
    }

    fn count_chunks(store: &Path) -> usize {
        walk_files(&crate::layout::chunks_dir(store))
    }

    fn walk_files(p: &Path) -> usize {
        std::fs::read_dir(p)
            .map(|rd| {
                rd.map(|e| {
                    let e = e.expect("entry");
                    if e.file_type().expect("type").is_dir() {
                        walk_files(&e.path())
                    } else {
                        1
                    }
                })
                .sum()
            })
            .unwrap_or(0)
    }

    #[test]
    fn republishing_adds_nothing_and_a_change_adds_only_its_chunks() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let layer = tmp.path().join("layer");
        let store_dir = tmp.path().join("store");
        let opts = BuildOptions {
            chunk_size: 64 << 10,
            ..BuildOptions::default()
        };
        let mut big: Vec<u8> = (0..(1u32 << 20)).map(|i| (i * 7 % 251) as u8).collect();
        write(&layer.join("a/big.bin"), &big);
        write(&layer.join("a/copy.bin"), &big);
        write(&layer.join("small.txt"), b"hello");
        let key = SecretKey::generate().expect("key");
        let store = DirStore::create(&store_dir).expect("store");

        let first = publish(&layer, &store, &key, &opts, &NoProgress).expect("publish");
        assert_eq!(first.report.new_chunks, first.report.unique_chunks);
        assert!(first.report.dedup_saved() >= 1 << 20, "copy.bin dedups");
        let after_first = count_chunks(&store_dir);
        assert_eq!(after_first as u64, first.report.unique_chunks);

        let again = publish(&layer, &store, &key, &opts, &NoProgress).expect("publish");
        assert_eq!(again.report.new_chunks, 0);
        assert_eq!(again.id, first.id, "unchanged layer, same index id");
        assert_eq!(count_chunks(&store_dir), after_first);

        // Change 1 byte in one chunk of big.bin (copy.bin keeps the old content).
        big[200_000] ^= 0xff;
        std::fs::write(layer.join("a/big.bin"), &big).expect("rewrite");
        let changed = publish(&layer, &store, &key, &opts, &NoProgress).expect("publish");
        assert_eq!(changed.report.new_chunks, 1);
        assert_eq!(count_chunks(&store_dir), after_first + 1);
        assert_ne!(changed.id, first.id);
    }

    fn layer_and_store(tmp: &Path) -> (PathBuf, DirStore) {
        let layer = tmp.join("layer");
        write(&layer.join("a.bin"), &noise(300_000, 1));
        write(&layer.join("b.bin"), &noise(200_000, 2));
        (layer, DirStore::create(&tmp.join("store")).expect("store"))
    }

    fn noise(len: usize, seed: u32) -> Vec<u8> {
        (0..len as u32)
            .map(|i| ChunkId::of(&(i ^ (seed << 24)).to_le_bytes()).0[0])
            .collect()
    }

    fn small_chunks() -> BuildOptions {
        BuildOptions {
            chunk_size: 64 << 10,
            ..BuildOptions::default()
        }
    }

    /// Opens what `publish` stored and checks every chunk it lists from the store.
    fn open_and_check(store: &DirStore, id: IndexId, key: &SecretKey) -> Index {
        let bytes = store.get_index(&id).expect("index");
        let (_, index) = SignedIndex::open(bytes, Some(id), &[key.public()], &Default::default())
            .expect("the index opens");
        for c in &index.chunks {
            let stored = store.get_chunk(&c.id).expect("chunk");
            manifest::decode_chunk(&stored, &c.id, c.plain_len).expect("chunk decodes");
        }
        index
    }

    /// A 0-byte or truncated chunk in the store (or a planted symlink or FIFO) was taken as
    /// present: publish signed an index no node could open, and re-publishing never
    /// repaired it.
    #[test]
    fn publish_replaces_a_truncated_chunk_in_the_store() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let (layer, store) = layer_and_store(tmp.path());
        let key = SecretKey::generate().expect("key");
        let first = publish(&layer, &store, &key, &small_chunks(), &NoProgress).expect("publish");
        let chunks = &first.index.chunks;
        assert!(chunks.len() >= 5);
        let path = |i: usize| store.chunk_path(&chunks[i].id);
        std::fs::write(path(0), b"").expect("empty");
        let whole = std::fs::read(path(1)).expect("read");
        std::fs::write(path(1), &whole[..whole.len() / 2]).expect("truncate");
        let other = std::fs::read(path(3)).expect("read");
        std::fs::write(path(2), other).expect("another chunk's bytes");
        std::fs::remove_file(path(3)).expect("rm");
        std::os::unix::fs::symlink("/dev/zero", path(3)).expect("symlink");
        std::fs::remove_file(path(4)).expect("rm");
        nix::unistd::mkfifo(&path(4), nix::sys::stat::Mode::S_IRWXU).expect("mkfifo");

        let again = publish(&layer, &store, &key, &small_chunks(), &NoProgress).expect("publish");
        assert_eq!(again.id, first.id);
        assert_eq!(
            again.report.new_chunks, 5,
            "the five bad objects were written again"
        );
        open_and_check(&store, again.id, &key);
        for i in 0..5 {
            let md = std::fs::symlink_metadata(path(i)).expect("stat");
            assert!(
                md.file_type().is_file(),
                "chunk {i} is a regular file again"
            );
        }
    }

    /// A file overwritten in place while it was published went out as half old, half new
    /// chunks. One change: the layer is read again and what is signed is the new content.
    #[test]
    fn a_file_changed_once_while_published_is_read_again() {
        struct ChangeOnce(PathBuf, std::sync::atomic::AtomicBool);
        impl BuildProgress for ChangeOnce {
            fn advance(&self, _bytes: u64) {
                if !self.1.swap(true, std::sync::atomic::Ordering::SeqCst) {
                    std::fs::write(&self.0, noise(250_000, 9)).expect("rewrite");
                }
            }
        }
        let tmp = tempfile::tempdir().expect("tempdir");
        let (layer, store) = layer_and_store(tmp.path());
        let key = SecretKey::generate().expect("key");
        let progress = ChangeOnce(layer.join("a.bin"), Default::default());
        let p = publish(&layer, &store, &key, &small_chunks(), &progress).expect("publish");
        let index = open_and_check(&store, p.id, &key);
        let a = index
            .entries
            .iter()
            .find(|e| &*e.name == b"a.bin")
            .expect("a.bin");
        assert!(matches!(
            a.kind,
            manifest::EntryKind::File { size: 250_000, .. }
        ));
        let expected: Vec<ChunkId> = noise(250_000, 9)
            .chunks(64 << 10)
            .map(ChunkId::of)
            .collect();
        let manifest::EntryKind::File {
            data: manifest::FileData::Chunks(slots),
            ..
        } = &a.kind
        else {
            panic!("a.bin has chunks");
        };
        let got: Vec<ChunkId> = slots
            .iter()
            .map(|s| index.chunks[s.chunk_index().expect("no holes")].id)
            .collect();
        assert_eq!(got, expected, "every chunk is the new content's");
    }

    #[test]
    fn publish_of_a_file_that_keeps_changing_fails_naming_it_and_signs_nothing() {
        struct AlwaysChange(PathBuf);
        impl BuildProgress for AlwaysChange {
            fn advance(&self, _bytes: u64) {
                use std::io::Write;
                let mut f = std::fs::OpenOptions::new()
                    .append(true)
                    .open(&self.0)
                    .expect("open");
                f.write_all(b"more").expect("append");
            }
        }
        let tmp = tempfile::tempdir().expect("tempdir");
        let (layer, store) = layer_and_store(tmp.path());
        let key = SecretKey::generate().expect("key");
        let busy = layer.join("b.bin");
        let err = publish(
            &layer,
            &store,
            &key,
            &small_chunks(),
            &AlwaysChange(busy.clone()),
        )
        .expect_err("a torn publish");
        match &err {
            Error::ChangedWhilePublished { path, attempts } => {
                assert_eq!(path, &busy);
                assert_eq!(*attempts, PUBLISH_ATTEMPTS);
            }
            other => panic!("{other}"),
        }
        assert!(err.to_string().contains("b.bin"), "{err}");
        assert!(
            store.list_indexes().expect("list").is_empty(),
            "nothing signed"
        );
    }

    /// A chunk path taken by something that cannot be replaced (a directory): the publish
    /// fails and signs nothing.
    #[test]
    fn publish_signs_nothing_when_a_chunk_cannot_be_stored() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let (layer, store) = layer_and_store(tmp.path());
        let id = ChunkId::of(&noise(300_000, 1)[..64 << 10]);
        std::fs::create_dir_all(store.chunk_path(&id).join("x")).expect("plant a directory");
        let key = SecretKey::generate().expect("key");
        let err =
            publish(&layer, &store, &key, &small_chunks(), &NoProgress).expect_err("cannot store");
        assert!(err.to_string().contains(&id.to_hex()), "{err}");
        assert!(
            store.list_indexes().expect("list").is_empty(),
            "nothing signed"
        );
    }

    /// The same layer published with a second key kept the first key's index, so nodes
    /// that trust only the second key refused it.
    #[test]
    fn same_layer_with_a_second_key_is_trusted_by_its_nodes() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let (layer, store) = layer_and_store(tmp.path());
        let (k1, k2) = (
            SecretKey::generate().expect("key"),
            SecretKey::generate().expect("key"),
        );
        let p1 = publish(&layer, &store, &k1, &small_chunks(), &NoProgress).expect("publish");
        let p2 = publish(&layer, &store, &k2, &small_chunks(), &NoProgress).expect("publish");
        assert_ne!(p1.id, p2.id, "two signers, two indexes");
        assert_eq!(store.list_indexes().expect("list").len(), 2);
        assert_eq!(
            open_and_check(&store, p2.id, &k2),
            open_and_check(&store, p1.id, &k1)
        );
        // A resolver trusting both keys still hands out the envelope that was asked for.
        let hex = p2.id.to_hex();
        let resolved = store.resolve_index(&hex[..8]).expect("prefix");
        let bytes = store.get_index(&resolved).expect("index");
        SignedIndex::open(bytes, Some(resolved), &[k2.public()], &Default::default())
            .expect("nodes trusting only the second key accept it");
    }

    #[test]
    fn missing_layer_is_a_clear_error() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let store = DirStore::create(&tmp.path().join("s")).expect("store");
        let key = SecretKey::generate().expect("key");
        let err = publish(
            &tmp.path().join("nope"),
            &store,
            &key,
            &BuildOptions::default(),
            &NoProgress,
        )
        .expect_err("no layer");
        assert!(err.to_string().contains("not a directory"), "{err}");
    }
}

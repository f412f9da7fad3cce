//! Publishing: build the index of a layer directory, store its new chunks, sign the index
//! and store it.
//!
//! Nothing is signed that was not checked: a file that changed while it was read is read
//! again (a few times, then the publish fails naming it), and every chunk the index lists
//! must decode to its id from the store before the index is signed.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use manifest::build::BuildProgress;
use manifest::{BuildOptions, BuildReport, Index, IndexId, SecretKey, SignedIndex};

use crate::{DirStore, Error};

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
    let mut attempt = 1;
    let (mut index, report) = loop {
        match manifest::build(layer, opts, store, progress) {
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
    store.verify_chunks(&index)?;
    manifest::set_urgent_paths(&mut index, urgent)?;
    let signed = SignedIndex::sign(&index, key, 3);
    let id = store.put_index(&signed)?;
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
    use manifest::build::NoProgress;

    fn write(p: &Path, bytes: &[u8]) {
        std::fs::create_dir_all(p.parent().expect("has parent")).expect("mkdir");
        std::fs::write(p, bytes).expect("write");
    }

    fn count_chunks(store: &Path) -> usize {
        walk_files(&store.join("chunks"))
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

//! A content-addressed store in a directory:
//! `chunks/<first two hex>/<id>` hold encoded chunks, `indexes/<id>.<signer>.idx` signed
//! indexes (keyed by content **and** signer, so the same layer signed with two keys keeps
//! both envelopes; `<id>.idx` from older versions is still read).
//!
//! Writes go to a temporary file and are renamed into place, so a reader never sees a
//! half-written object and two publishers writing the same chunk do not conflict.
//!
//! A file's existence proves nothing (a truncated write, a planted object): a chunk already
//! present counts as present only if it decodes to its id ([`ChunkSink::stored_len`]), and
//! a bad one is replaced. Objects are read without following symlinks, only if regular
//! files, and only up to the longest a valid object can be.

use std::io::Write;
use std::path::{Path, PathBuf};

use manifest::{ChunkId, ChunkSink, IndexId, SignedIndex};

use crate::Error;
use crate::files::{Symlinks, read_limited};

/// The longest a stored chunk can be: the largest chunk size, raw, plus its header.
pub const MAX_STORED_CHUNK: u64 = (64 << 20) + 4096;

/// A chunk and index store rooted at a directory.
#[derive(Clone, Debug)]
pub struct DirStore {
    root: PathBuf,
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> Error + '_ {
    move |source| Error::Io {
        path: path.to_path_buf(),
        source,
    }
}

impl DirStore {
    /// Opens a store, creating its directories if needed.
    pub fn create(root: &Path) -> Result<Self, Error> {
        for sub in ["chunks", "indexes"] {
            let p = root.join(sub);
            std::fs::create_dir_all(&p).map_err(io(&p))?;
        }
        Ok(Self {
            root: root.to_path_buf(),
        })
    }

    /// Opens an existing store.
    pub fn open(root: &Path) -> Result<Self, Error> {
        let p = root.join("indexes");
        if !p.is_dir() {
            return Err(Error::Io {
                path: root.to_path_buf(),
                source: std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    "not a teesfs store (no indexes/ directory); publish into it first",
                ),
            });
        }
        Ok(Self {
            root: root.to_path_buf(),
        })
    }

    /// The store's directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Where a chunk lives.
    pub fn chunk_path(&self, id: &ChunkId) -> PathBuf {
        let hex = id.to_hex();
        self.root.join("chunks").join(&hex[..2]).join(hex)
    }

    fn index_path(&self, id: &IndexId, signer: &str) -> PathBuf {
        self.root.join("indexes").join(format!("{id}.{signer}.idx"))
    }

    /// The index files of `id`: one per signer (and a legacy unsigned-name one), sorted.
    fn index_files(&self, id: &IndexId) -> Result<Vec<PathBuf>, Error> {
        let dir = self.root.join("indexes");
        let hex = id.to_hex();
        let mut out = Vec::new();
        for item in std::fs::read_dir(&dir).map_err(io(&dir))? {
            let item = item.map_err(io(&dir))?;
            let name = item.file_name();
            if let Some(n) = name.to_str()
                && n.ends_with(".idx")
                && n.split('.').next() == Some(hex.as_str())
            {
                out.push(item.path());
            }
        }
        out.sort();
        Ok(out)
    }

    /// Reads a chunk's encoded bytes (a regular file, not a symlink, of at most
    /// [`MAX_STORED_CHUNK`] bytes).
    pub fn get_chunk(&self, id: &ChunkId) -> Result<Vec<u8>, Error> {
        let p = self.chunk_path(id);
        read_limited(&p, MAX_STORED_CHUNK, Symlinks::Refuse).map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                Error::MissingChunk(*id)
            } else {
                Error::Io { path: p, source: e }
            }
        })
    }

    fn write_atomic(&self, dest: &Path, bytes: &[u8]) -> std::io::Result<()> {
        let dir = dest.parent().expect("store paths always have a parent");
        let mut tmp = match tempfile::NamedTempFile::new_in(dir) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                std::fs::create_dir_all(dir)?;
                tempfile::NamedTempFile::new_in(dir)?
            }
            Err(e) => return Err(e),
        };
        tmp.write_all(bytes)?;
        tmp.persist(dest).map_err(|e| e.error)?;
        Ok(())
    }

    /// Stores a signed index under its id and signer (an existing file that is not this
    /// envelope, truncated or planted, is replaced); returns its id.
    pub fn put_index(&self, signed: &SignedIndex) -> Result<IndexId, Error> {
        let id = signed.id();
        let signer = signed.publisher()?.to_hex();
        let p = self.index_path(&id, &signer[..16]);
        let same = read_limited(&p, signed.as_bytes().len() as u64, Symlinks::Refuse)
            .is_ok_and(|b| b == signed.as_bytes());
        if !same {
            self.write_atomic(&p, signed.as_bytes()).map_err(io(&p))?;
        }
        Ok(id)
    }

    /// Reads a signed index's bytes (not yet verified): the envelope of a trusted signer
    /// if there is one among `trusted` (the same layer may be signed by several keys),
    /// else the first.
    pub fn get_index_for(
        &self,
        id: &IndexId,
        trusted: &[manifest::PublicKey],
    ) -> Result<Vec<u8>, Error> {
        let limit = manifest::Limits::default().max_signed_bytes;
        let mut first = None;
        for p in self.index_files(id)? {
            let bytes = read_limited(&p, limit, Symlinks::Refuse).map_err(io(&p))?;
            let signer = SignedIndex::from_bytes(bytes.clone(), &manifest::Limits::default())
                .and_then(|s| s.publisher())
                .ok();
            if signer.is_some_and(|k| trusted.contains(&k)) {
                return Ok(bytes);
            }
            first.get_or_insert(bytes);
        }
        first.ok_or_else(|| Error::IndexNotFound {
            id: id.to_hex(),
            store: self.root.clone(),
        })
    }

    /// Reads a signed index's bytes (not yet verified), any signer's.
    pub fn get_index(&self, id: &IndexId) -> Result<Vec<u8>, Error> {
        self.get_index_for(id, &[])
    }

    /// Checks that every chunk of `index` is in the store and decodes to its id; the
    /// first that does not is the error. Publishing signs nothing before this passes.
    pub fn verify_chunks(&self, index: &manifest::Index) -> Result<(), Error> {
        use rayon::prelude::*;
        index.chunks.par_iter().try_for_each(|c| {
            let stored = self.get_chunk(&c.id)?;
            manifest::decode_chunk(&stored, &c.id, c.plain_len)
                .map(drop)
                .map_err(|e| Error::BadChunk {
                    id: c.id,
                    path: self.chunk_path(&c.id),
                    reason: e.to_string(),
                })
        })
    }

    /// Ids of all indexes in the store, sorted.
    pub fn list_indexes(&self) -> Result<Vec<IndexId>, Error> {
        let dir = self.root.join("indexes");
        let mut out = Vec::new();
        for item in std::fs::read_dir(&dir).map_err(io(&dir))? {
            let item = item.map_err(io(&dir))?;
            let name = item.file_name();
            if let Some(stem) = name.to_str().and_then(|n| n.strip_suffix(".idx"))
                && let Some(hex) = stem.split('.').next()
                && let Ok(id) = hex.parse()
            {
                out.push(id);
            }
        }
        out.sort();
        out.dedup();
        Ok(out)
    }

    /// Resolves a full id or a unique prefix of at least 4 hex characters.
    pub fn resolve_index(&self, prefix: &str) -> Result<IndexId, Error> {
        let prefix = prefix.trim().to_ascii_lowercase();
        if prefix.len() == 64 {
            return Ok(prefix.parse()?);
        }
        let matches: Vec<IndexId> = self
            .list_indexes()?
            .into_iter()
            .filter(|id| prefix.len() >= 4 && id.to_hex().starts_with(&prefix))
            .collect();
        match matches.len() {
            1 => Ok(matches[0]),
            0 => Err(Error::IndexNotFound {
                id: prefix,
                store: self.root.clone(),
            }),
            count => Err(Error::AmbiguousPrefix { prefix, count }),
        }
    }
}

impl ChunkSink for DirStore {
    fn stored_len(&self, id: &ChunkId, plain_len: u32) -> Option<u32> {
        let stored = match self.get_chunk(id) {
            Ok(s) => s,
            Err(Error::MissingChunk(_)) => return None,
            Err(e) => {
                tracing::warn!(chunk = %id.short(), error = %e, "an object in the store cannot be used; replacing it");
                return None;
            }
        };
        match manifest::decode_chunk(&stored, id, plain_len) {
            Ok(_) => Some(stored.len() as u32),
            Err(e) => {
                tracing::warn!(chunk = %id.short(), error = %e, "a chunk in the store is damaged or planted; replacing it");
                None
            }
        }
    }

    fn put(&self, id: &ChunkId, stored: &[u8]) -> std::io::Result<()> {
        self.write_atomic(&self.chunk_path(id), stored)
    }
}

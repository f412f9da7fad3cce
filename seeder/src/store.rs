//! A content-addressed store in a directory:
//! `chunks/<first two hex>/<id>` hold encoded chunks, `indexes/<id>.idx` signed indexes.
//!
//! Writes go to a temporary file and are renamed into place, so a reader never sees a
//! half-written object and two publishers writing the same chunk do not conflict.

use std::io::Write;
use std::path::{Path, PathBuf};

use manifest::{ChunkId, ChunkSink, IndexId, SignedIndex};

use crate::Error;

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

    fn index_path(&self, id: &IndexId) -> PathBuf {
        self.root.join("indexes").join(format!("{id}.idx"))
    }

    /// Reads a chunk's encoded bytes.
    pub fn get_chunk(&self, id: &ChunkId) -> Result<Vec<u8>, Error> {
        let p = self.chunk_path(id);
        std::fs::read(&p).map_err(|e| {
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

    /// Stores a signed index; returns its id.
    pub fn put_index(&self, signed: &SignedIndex) -> Result<IndexId, Error> {
        let id = signed.id();
        let p = self.index_path(&id);
        if !p.exists() {
            self.write_atomic(&p, signed.as_bytes()).map_err(io(&p))?;
        }
        Ok(id)
    }

    /// Reads a signed index's bytes (not yet verified).
    pub fn get_index(&self, id: &IndexId) -> Result<Vec<u8>, Error> {
        let p = self.index_path(id);
        std::fs::read(&p).map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                Error::IndexNotFound {
                    id: id.to_hex(),
                    store: self.root.clone(),
                }
            } else {
                Error::Io { path: p, source: e }
            }
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
                && let Ok(id) = stem.parse()
            {
                out.push(id);
            }
        }
        out.sort();
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
    fn stored_len(&self, id: &ChunkId) -> Option<u32> {
        std::fs::metadata(self.chunk_path(id))
            .ok()
            .map(|m| m.len() as u32)
    }

    fn put(&self, id: &ChunkId, stored: &[u8]) -> std::io::Result<()> {
        self.write_atomic(&self.chunk_path(id), stored)
    }
}

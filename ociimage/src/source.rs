//! Where an image's pieces are: an OCI image layout directory, or a tarball holding one
//! (`oci-archive`) or a docker image (`docker-archive`, `docker save`'s `manifest.json`
//! format). Each is read into a list of layer blobs and the config, parsed with
//! `oci-spec`; tar members are read in place (by offset), never extracted.

use std::collections::HashMap;
use std::fs::File;
use std::io::Read;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use oci_spec::image::{Descriptor, ImageConfiguration, ImageIndex, ImageManifest, MediaType};

use crate::Error;

/// The most bytes of JSON (index, manifest, config) read from an image.
const MAX_JSON: u64 = 16 << 20;

/// Where blobs are read from.
pub(crate) enum Blobs {
    /// An OCI layout directory.
    Dir(PathBuf),
    /// Regular-file members of an uncompressed tar: offset and size by normalised name.
    Tar {
        file: File,
        path: PathBuf,
        members: HashMap<String, (u64, u64)>,
    },
}

/// A member of a tar read in place.
struct At<'f> {
    file: &'f File,
    pos: u64,
    end: u64,
}

impl Read for At<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let want = (self.end - self.pos).min(buf.len() as u64) as usize;
        if want == 0 {
            return Ok(0);
        }
        let n = self.file.read_at(&mut buf[..want], self.pos)?;
        self.pos += n as u64;
        Ok(n)
    }
}

/// A member name without `./` and repeated or trailing slashes.
fn normal(name: &str) -> Option<String> {
    let parts: Vec<&str> = name
        .split('/')
        .filter(|c| !c.is_empty() && *c != ".")
        .collect();
    if parts.is_empty() || parts.contains(&"..") {
        return None;
    }
    Some(parts.join("/"))
}

impl Blobs {
    /// Indexes the regular files of the tar at `path`.
    pub(crate) fn tar(path: &Path) -> Result<Self, Error> {
        let io = |source| Error::Io {
            path: path.to_path_buf(),
            source,
        };
        let file = File::open(path).map_err(io)?;
        let mut members = HashMap::new();
        let mut archive = tar::Archive::new(&file);
        for entry in archive.entries_with_seek().map_err(io)? {
            let entry = entry.map_err(io)?;
            if entry.header().entry_type() != tar::EntryType::Regular {
                continue;
            }
            let name = String::from_utf8_lossy(&entry.path_bytes()).into_owned();
            if let Some(name) = normal(&name) {
                members.insert(name, (entry.raw_file_position(), entry.size()));
            }
        }
        Ok(Blobs::Tar {
            file,
            path: path.to_path_buf(),
            members,
        })
    }

    /// Whether the blob store has `name`.
    pub(crate) fn has(&self, name: &str) -> bool {
        match self {
            Blobs::Dir(root) => root.join(name).is_file(),
            Blobs::Tar { members, .. } => normal(name).is_some_and(|n| members.contains_key(&n)),
        }
    }

    /// The bytes of `name` (relative to the layout root).
    pub(crate) fn open(&self, name: &str) -> Result<Box<dyn Read + '_>, Error> {
        let norm = normal(name).ok_or_else(|| Error::Format(format!("bad blob path {name:?}")))?;
        match self {
            Blobs::Dir(root) => {
                let path = root.join(&norm);
                let f = File::open(&path).map_err(|source| Error::Io { path, source })?;
                Ok(Box::new(f))
            }
            Blobs::Tar {
                file,
                path,
                members,
            } => {
                let &(pos, size) = members.get(&norm).ok_or_else(|| {
                    Error::Format(format!("{} has no member {norm}", path.display()))
                })?;
                Ok(Box::new(At {
                    file,
                    pos,
                    end: pos + size,
                }))
            }
        }
    }

    /// A JSON document of at most [`MAX_JSON`] bytes.
    fn json<T: serde::de::DeserializeOwned>(&self, name: &str) -> Result<T, Error> {
        let mut buf = Vec::new();
        self.open(name)?
            .take(MAX_JSON + 1)
            .read_to_end(&mut buf)
            .map_err(|source| Error::Io {
                path: PathBuf::from(name),
                source,
            })?;
        if buf.len() as u64 > MAX_JSON {
            return Err(Error::Format(format!("{name} is over {MAX_JSON} bytes")));
        }
        serde_json::from_slice(&buf).map_err(|e| Error::Format(format!("{name}: {e}")))
    }
}

/// An image as its layer blobs (bottom first) and config.
pub(crate) struct Image {
    pub blobs: Blobs,
    pub layers: Vec<String>,
    pub config: Option<ImageConfiguration>,
}

fn blob_path(d: &Descriptor) -> Result<String, Error> {
    let digest = d.digest();
    let hex = digest.digest();
    if hex.is_empty() || !hex.bytes().all(|b| b.is_ascii_alphanumeric()) {
        return Err(Error::Format(format!("bad digest {digest}")));
    }
    Ok(format!("blobs/{}/{hex}", digest.algorithm()))
}

/// The host's architecture as OCI names it.
fn host_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "powerpc64" => "ppc64le",
        other => other,
    }
}

/// The tag an OCI layout gives a manifest (`skopeo copy ... oci:DIR:TAG`, `umoci`).
const REF_NAME: &str = "org.opencontainers.image.ref.name";

fn tag_of(d: &Descriptor) -> Option<&str> {
    d.annotations()
        .as_ref()
        .and_then(|a| a.get(REF_NAME))
        .map(String::as_str)
}

/// The tags of an index's manifests, for errors.
fn tags(all: &[Descriptor]) -> String {
    let t: Vec<&str> = all.iter().filter_map(tag_of).collect();
    if t.is_empty() {
        "none".into()
    } else {
        t.join(", ")
    }
}

/// Picks the image manifest from an index: the one tagged `tag`, else the only one, or the
/// one for this host's platform.
fn pick(index: &ImageIndex, tag: Option<&str>) -> Result<Descriptor, Error> {
    let all = index.manifests();
    if let Some(tag) = tag {
        return match all.iter().find(|d| tag_of(d) == Some(tag)) {
            Some(d) => Ok(d.clone()),
            None => Err(Error::Format(format!(
                "the layout has no tag {tag:?}; its tags: {}",
                tags(all)
            ))),
        };
    }
    if all.len() == 1 {
        return Ok(all[0].clone());
    }
    let fits = |d: &&Descriptor| {
        d.platform().as_ref().is_some_and(|p| {
            p.os().to_string() == "linux" && p.architecture().to_string() == host_arch()
        })
    };
    let matching: Vec<&Descriptor> = all.iter().filter(fits).collect();
    match matching.as_slice() {
        [one] => Ok((*one).clone()),
        [] if all.is_empty() => Err(Error::Format("the image index lists no manifest".into())),
        _ => Err(Error::Format(format!(
            "the image index lists {} manifests and not exactly one for linux/{}: name one \
             as DIR:TAG (tags: {})",
            all.len(),
            host_arch(),
            tags(all)
        ))),
    }
}

/// Reads an OCI layout (a directory or the root of an oci-archive): its manifest tagged
/// `tag`, or its only one.
pub(crate) fn oci(blobs: Blobs, tag: Option<&str>) -> Result<Image, Error> {
    let index: ImageIndex = blobs.json("index.json")?;
    let mut desc = pick(&index, tag)?;
    // One level of nesting: an index that points at an index (multi-platform images).
    if *desc.media_type() == MediaType::ImageIndex {
        let inner: ImageIndex = blobs.json(&blob_path(&desc)?)?;
        desc = pick(&inner, None)?;
    }
    let manifest: ImageManifest = blobs.json(&blob_path(&desc)?)?;
    let config: ImageConfiguration = blobs.json(&blob_path(manifest.config())?)?;
    let layers = manifest
        .layers()
        .iter()
        .map(blob_path)
        .collect::<Result<_, _>>()?;
    Ok(Image {
        blobs,
        layers,
        config: Some(config),
    })
}

/// One image of a docker-archive's `manifest.json`.
#[derive(serde::Deserialize)]
#[serde(rename_all = "PascalCase")]
struct DockerManifest {
    config: String,
    layers: Vec<String>,
}

/// Reads a docker-archive.
pub(crate) fn docker(blobs: Blobs) -> Result<Image, Error> {
    let list: Vec<DockerManifest> = blobs.json("manifest.json")?;
    let [one] = <[DockerManifest; 1]>::try_from(list).map_err(|l| {
        Error::Format(format!(
            "manifest.json lists {} images; publish an archive of one",
            l.len()
        ))
    })?;
    let config: ImageConfiguration = blobs.json(&one.config)?;
    Ok(Image {
        blobs,
        layers: one.layers,
        config: Some(config),
    })
}

/// The parts of the config a task follows, checked against the index's limits.
pub(crate) fn image_config(
    config: &ImageConfiguration,
    limits: &manifest::Limits,
) -> Result<manifest::ImageConfig, Error> {
    let Some(c) = config.config() else {
        return Ok(manifest::ImageConfig::default());
    };
    let nonempty = |s: &Option<String>| s.clone().filter(|s| !s.is_empty());
    let out = manifest::ImageConfig {
        env: c.env().clone().unwrap_or_default(),
        entrypoint: c.entrypoint().clone().unwrap_or_default(),
        cmd: c.cmd().clone().unwrap_or_default(),
        working_dir: nonempty(c.working_dir()),
        user: nonempty(c.user()),
        labels: c.labels().clone().unwrap_or_default().into_iter().collect(),
    };
    out.check(limits).map_err(Error::Config)?;
    Ok(out)
}

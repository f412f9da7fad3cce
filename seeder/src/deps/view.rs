//! The overlay view a job sees: the layer directory over the host's "/".
//!
//! A path is resolved one component at a time the way overlayfs would answer it: the
//! layer's entry wins; a directory present in both is merged; a non-directory in the
//! layer hides everything of the host below it; an overlay whiteout (a character device
//! 0:0) in the layer hides the host's entry. Symlinks are followed wherever they live,
//! and the ones inside the layer are reported, since the loader reads them too.

use std::ffi::OsString;
use std::fs::Metadata;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Component, Path, PathBuf};

/// Most symlinks followed while resolving one path (the kernel's limit).
const MAX_LINKS: usize = 40;

/// The layer over a host root.
#[derive(Clone, Debug)]
pub struct View {
    layer: PathBuf,
    host: PathBuf,
}

/// A path that exists in the view.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Found {
    /// The view path with every symlink resolved (absolute).
    pub path: PathBuf,
    /// Where its bytes are on this machine (inside the layer or the host root).
    pub real: PathBuf,
    /// Whether it is the layer's.
    pub in_layer: bool,
    /// Whether it is a directory (else a regular file or a special file).
    pub is_dir: bool,
    /// Symlinks of the layer that were followed on the way, as layer-relative paths,
    /// in the order they were read.
    pub layer_links: Vec<PathBuf>,
}

impl Found {
    /// The path relative to the layer root.
    pub fn layer_path(&self) -> PathBuf {
        self.path
            .strip_prefix("/")
            .unwrap_or(&self.path)
            .to_path_buf()
    }
}

fn lstat(p: &Path) -> Option<Metadata> {
    std::fs::symlink_metadata(p).ok()
}

fn is_whiteout(md: &Metadata) -> bool {
    md.file_type().is_char_device() && md.rdev() == 0
}

impl View {
    /// The layer directory over the host root `host` (normally "/").
    pub fn new(layer: impl Into<PathBuf>, host: impl Into<PathBuf>) -> Self {
        Self {
            layer: layer.into(),
            host: host.into(),
        }
    }

    /// The layer directory.
    pub fn layer(&self) -> &Path {
        &self.layer
    }

    /// Resolves an absolute view path (a relative one is taken from the view's root),
    /// following symlinks. `None` when it does not exist (or loops, or a middle part is
    /// not a directory), as `open` would fail.
    pub fn resolve(&self, path: &Path) -> Option<Found> {
        // The directories walked so far: (name, whether the host's same directory is
        // visible through it).
        let mut stack: Vec<(OsString, bool)> = Vec::new();
        let mut todo: Vec<OsString> = Vec::new();
        push_components(&mut todo, path);
        let mut links = 0usize;
        let mut layer_links = Vec::new();
        let rel_of = |stack: &[(OsString, bool)]| -> PathBuf {
            stack.iter().map(|(n, _)| n.as_os_str()).collect()
        };
        while let Some(name) = todo.pop() {
            if name == "." {
                continue;
            }
            if name == ".." {
                stack.pop();
                continue;
            }
            let host_visible = stack.last().is_none_or(|(_, h)| *h);
            let mut rel = rel_of(&stack);
            rel.push(&name);
            let (md, in_layer) = match lstat(&self.layer.join(&rel)) {
                Some(md) if is_whiteout(&md) => return None,
                Some(md) => (md, true),
                None if host_visible => (lstat(&self.host.join(&rel))?, false),
                None => return None,
            };
            let real = if in_layer {
                self.layer.join(&rel)
            } else {
                self.host.join(&rel)
            };
            let ft = md.file_type();
            if ft.is_symlink() {
                links += 1;
                if links > MAX_LINKS {
                    return None;
                }
                let target = std::fs::read_link(&real).ok()?;
                if in_layer {
                    layer_links.push(rel);
                }
                if target.is_absolute() {
                    stack.clear();
                }
                push_components(&mut todo, &target);
                continue;
            }
            if ft.is_dir() {
                // The host's directory shows through a layer directory only if it is a
                // directory too (overlayfs merges directories only).
                let host_below = if in_layer {
                    host_visible && lstat(&self.host.join(&rel)).is_some_and(|m| m.is_dir())
                } else {
                    true
                };
                stack.push((name, host_below));
                continue;
            }
            if !todo.is_empty() {
                return None; // a file in the middle of the path: ENOTDIR
            }
            return Some(Found {
                path: Path::new("/").join(rel),
                real,
                in_layer,
                is_dir: false,
                layer_links,
            });
        }
        let rel = rel_of(&stack);
        let in_layer = self.layer.join(&rel).is_dir();
        Some(Found {
            real: if in_layer {
                self.layer.join(&rel)
            } else {
                self.host.join(&rel)
            },
            path: Path::new("/").join(rel),
            in_layer,
            is_dir: true,
            layer_links,
        })
    }
}

/// Pushes the components of `p` onto a stack used in reverse (the next one on top).
fn push_components(todo: &mut Vec<OsString>, p: &Path) {
    let parts: Vec<OsString> = p
        .components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n.to_os_string()),
            Component::ParentDir => Some("..".into()),
            Component::CurDir => Some(".".into()),
            Component::RootDir | Component::Prefix(_) => None,
        })
        .collect();
    todo.extend(parts.into_iter().rev());
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn touch(p: &Path) {
        std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        std::fs::write(p, b"x").expect("write");
    }

    #[test]
    fn layer_wins_directories_merge_and_links_are_reported() {
        let tmp = tempfile::tempdir().expect("tmp");
        let (layer, host) = (tmp.path().join("layer"), tmp.path().join("host"));
        touch(&host.join("usr/lib/a.so"));
        touch(&host.join("usr/lib/b.so"));
        touch(&layer.join("usr/lib/b.so"));
        touch(&layer.join("opt/x/real.so"));
        symlink("usr/lib", host.join("lib")).expect("symlink");
        symlink("../../opt/x/real.so", layer.join("usr/lib/c.so")).expect("symlink");
        // A layer file hides the host's directory of the same name.
        touch(&host.join("srv/deep/f"));
        touch(&layer.join("srv"));
        let v = View::new(&layer, &host);

        let a = v
            .resolve(Path::new("/lib/a.so"))
            .expect("host file via host link");
        assert_eq!(
            (a.path.as_path(), a.in_layer),
            (Path::new("/usr/lib/a.so"), false)
        );
        let b = v.resolve(Path::new("/lib/b.so")).expect("layer wins");
        assert!(b.in_layer && b.real == layer.join("usr/lib/b.so"));
        let c = v.resolve(Path::new("/usr/lib/c.so")).expect("layer link");
        assert_eq!(c.path, Path::new("/opt/x/real.so"));
        assert_eq!(c.layer_links, [PathBuf::from("usr/lib/c.so")]);
        assert!(v.resolve(Path::new("/srv/deep/f")).is_none());
        assert!(v.resolve(Path::new("/usr/lib/nope.so")).is_none());
        assert!(v.resolve(Path::new("/usr/lib/a.so/x")).is_none());
    }
}

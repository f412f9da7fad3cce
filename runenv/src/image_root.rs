//! The sequence of an image run: gathers what [`image::plan`](super::image::plan) depends
//! on (the image's `etc`, the host's `hosts` and `resolv.conf`, the user, what the host has
//! at each path to bind) and carries the plan out through `apply`. It decides nothing.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use super::image::{self, ImageFacts, User};
use super::layout::{Kind, Privilege};
use super::{ImageView, Result, apply};

/// Builds the root of `image` under `staging` (an empty directory) for the user `uid`
/// (primary group `gid` when the host has no entry for them) and returns its path.
pub fn build(
    image: &Path,
    view: &ImageView,
    staging: &Path,
    privilege: Privilege,
    (uid, gid): (u32, u32),
) -> Result<PathBuf> {
    let facts = gather(image, view, uid, gid);
    let plan = image::plan(staging, &facts, privilege);
    for (path, why) in &plan.skipped {
        tracing::info!(path = %path.display(), "not bound into the image: it {why}");
    }
    apply::apply(&plan.prepare)?;
    apply::skeleton(&plan.skeleton)?;
    apply::apply(&plan.ops)?;
    Ok(image::root_of(staging))
}

/// What a path is, following symlinks (a bind shows what a link points to).
fn kind(path: &Path) -> Option<Kind> {
    let md = std::fs::metadata(path).ok()?;
    Some(if md.is_dir() {
        Kind::Dir {
            mode: md.mode() & 0o7777,
        }
    } else if md.is_file() {
        Kind::File
    } else {
        Kind::Other
    })
}

/// A regular file of the image, read if it is one (not through a link, which would lead
/// out of the image).
fn image_text(path: &Path) -> Option<String> {
    let md = std::fs::symlink_metadata(path).ok()?;
    md.is_file()
        .then(|| std::fs::read_to_string(path).ok())
        .flatten()
}

fn gather(image: &Path, view: &ImageView, uid: u32, gid: u32) -> ImageFacts {
    let etc = image.join("etc");
    let etc_kind = std::fs::symlink_metadata(&etc).ok().map(|md| {
        if md.is_dir() {
            Kind::Dir {
                mode: md.mode() & 0o7777,
            }
        } else if md.file_type().is_symlink() {
            Kind::Symlink {
                to: std::fs::read_link(&etc).unwrap_or_default(),
            }
        } else {
            Kind::Other
        }
    });
    ImageFacts {
        image: image.to_path_buf(),
        etc: etc_kind,
        passwd: image_text(&etc.join("passwd")),
        group: image_text(&etc.join("group")),
        hosts: std::fs::read("/etc/hosts").ok(),
        resolv: std::fs::read("/etc/resolv.conf").ok(),
        user: user(uid, gid, view.home.as_deref()),
        home: view.home.clone().filter(|h| {
            let there = h.is_dir();
            if !there {
                tracing::info!(home = %h.display(), "the home directory is not on this node");
            }
            there
        }),
        binds: view.binds.iter().map(|b| (b.clone(), kind(b))).collect(),
    }
}

/// The user as the host knows them; a uid without an entry is named by its number.
fn user(uid: u32, gid: u32, home: Option<&Path>) -> User {
    use nix::unistd::{Gid, Group, Uid};
    let entry = nix::unistd::User::from_uid(Uid::from_raw(uid))
        .ok()
        .flatten();
    let gid = entry.as_ref().map_or(gid, |u| u.gid.as_raw());
    let group = Group::from_gid(Gid::from_raw(gid))
        .ok()
        .flatten()
        .map_or_else(|| gid.to_string(), |g| g.name);
    User {
        name: entry
            .as_ref()
            .map_or_else(|| uid.to_string(), |u| u.name.clone()),
        uid,
        gid,
        group,
        home: entry.as_ref().map_or_else(
            || home.map_or_else(|| PathBuf::from("/"), Path::to_path_buf),
            |u| u.dir.clone(),
        ),
        shell: entry
            .as_ref()
            .map_or_else(|| PathBuf::from("/bin/sh"), |u| u.shell.clone()),
    }
}

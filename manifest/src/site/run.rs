//! `[run]` of `teesfs.toml`: what `teesfs run --image` and the Slurm tasks of an image job
//! take from the host besides `/proc`, `/dev`, `/sys`, `/tmp` and the user's home.
//!
//! ```toml
//! [run]
//! image_binds = ["/scratch", "/lustre"]   # host paths bound into every image as they are;
//!                                         # those missing on a node are skipped
//! ```

use std::path::{Path, PathBuf};

use serde::Deserialize;

/// The host paths bound into an image when the site names none.
pub const DEFAULT_IMAGE_BINDS: &[&str] = &["/scratch", "/lustre", "/gpfs"];

/// `[run]`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunSection {
    /// Host paths bound into an image's root at the same place (absolute, no `.` or `..`,
    /// not "/"); default [`DEFAULT_IMAGE_BINDS`].
    pub image_binds: Option<Vec<PathBuf>>,
}

impl RunSection {
    /// The paths bound into images.
    pub fn image_binds(&self) -> Vec<PathBuf> {
        match &self.image_binds {
            Some(b) => b.clone(),
            None => DEFAULT_IMAGE_BINDS.iter().map(PathBuf::from).collect(),
        }
    }

    /// Why the `image_binds` entries cannot be used, if one cannot (the first bad entry).
    pub fn check(&self) -> Option<String> {
        let binds = self.image_binds.as_ref()?;
        binds.iter().find_map(|p| {
            bind_problem(p).map(|why| format!("has {:?}, which {why}", p.display().to_string()))
        })
    }
}

/// Why `p` cannot be bound into an image, if it cannot: it must be absolute, not "/", and
/// name its place plainly (no `.`, `..` or empty components).
pub fn bind_problem(p: &Path) -> Option<&'static str> {
    let text = p.as_os_str().as_encoded_bytes();
    if !p.is_absolute() {
        return Some("is not an absolute path");
    }
    if p.parent().is_none() {
        return Some("is \"/\" itself (the image is \"/\")");
    }
    if text.windows(2).any(|w| w == b"//") || text.ends_with(b"/") {
        return Some("has an empty component: write it plainly, e.g. \"/scratch\"");
    }
    // `components()` drops a `.` in the middle of a path, so look at the text itself.
    let plain = text.split(|b| *b == b'/').all(|c| c != b"." && c != b"..");
    if !plain {
        return Some("has a `.` or `..` component: write it plainly, e.g. \"/scratch\"");
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn image_binds_default_to_the_usual_places_and_bad_ones_are_named() {
        assert_eq!(
            RunSection::default().image_binds(),
            DEFAULT_IMAGE_BINDS
                .iter()
                .map(PathBuf::from)
                .collect::<Vec<_>>()
        );
        let ok = RunSection {
            image_binds: Some(vec!["/scratch".into(), "/lustre/proj".into()]),
        };
        assert_eq!(ok.check(), None);
        for (bad, why) in [
            ("scratch", "absolute"),
            ("/", "\"/\" itself"),
            ("/a/../etc", "`..`"),
            ("/a/./b", "`.`"),
            ("/a//b", "empty component"),
            ("/a/", "empty component"),
        ] {
            let s = RunSection {
                image_binds: Some(vec!["/ok".into(), bad.into()]),
            };
            let e = s.check().unwrap_or_else(|| panic!("{bad} accepted"));
            assert!(e.contains(bad) && e.contains(why), "{bad}: {e}");
        }
    }
}

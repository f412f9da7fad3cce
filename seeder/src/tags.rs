//! Tags: names an operator gives published indexes (`teesfs publish --tag stable`), kept in
//! the store as `indexes/tags/NAME`, a small file holding the index id.
//!
//! A tag name can never be read as an id prefix (it may not be all hex digits), so
//! `--index NAME` means one thing. A tag is written atomically and re-tagging moves it.
//! Nothing here decides which indexes to keep: that is [`crate::gc`].

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

use manifest::IndexId;

use crate::files::{Symlinks, read_limited};
use crate::{DirStore, Error};

/// The longest tag name.
pub const MAX_TAG_LEN: usize = 64;

/// A valid tag name: 1 to [`MAX_TAG_LEN`] characters of `[A-Za-z0-9._-]`, not starting
/// with `.` or `-` (hidden and temporary files, flags), and not all hex digits (which
/// would read as an index id prefix).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TagName(String);

impl TagName {
    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for TagName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl FromStr for TagName {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self, Error> {
        let bad = |reason: &str| {
            Err(Error::BadTagName {
                name: s.to_owned(),
                reason: reason.to_owned(),
            })
        };
        if s.is_empty() {
            return bad("it is empty");
        }
        if s.len() > MAX_TAG_LEN {
            return bad(&format!("it is longer than {MAX_TAG_LEN} characters"));
        }
        if let Some(c) = s
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
        {
            return bad(&format!("{c:?} is not one of A-Z a-z 0-9 . _ -"));
        }
        if s.starts_with(['.', '-']) {
            return bad("it starts with '.' or '-'");
        }
        if s.chars().all(|c| c.is_ascii_hexdigit()) {
            return bad("it is all hex digits, which reads as an index id prefix");
        }
        Ok(Self(s.to_owned()))
    }
}

/// The tags of a store ([`DirStore::tags`]).
#[derive(Debug, Default)]
pub struct Tags {
    /// Every readable tag and the index it points at, by name.
    pub tags: Vec<(TagName, IndexId)>,
    /// Each tag file that cannot be read as a tag, as the error that names it and says
    /// what to do.
    pub unreadable: Vec<Error>,
}

/// The longest tag file: a hex id and a newline, with room to spare.
pub(crate) const MAX_TAG_FILE: u64 = 256;

impl DirStore {
    fn tags_dir(&self) -> PathBuf {
        crate::layout::tags_dir(self.root())
    }

    /// Where a tag lives.
    pub fn tag_path(&self, name: &TagName) -> PathBuf {
        self.tags_dir().join(name.as_str())
    }

    /// Points `name` at `id`, replacing what it named before (atomically: a reader sees the
    /// old id or the new one).
    pub fn set_tag(&self, name: &TagName, id: &IndexId) -> Result<(), Error> {
        let p = self.tag_path(name);
        self.write_atomic(&p, format!("{id}\n").as_bytes())
            .map_err(|source| Error::Io { path: p, source })
    }

    /// Removes a tag (a missing one is not an error).
    pub fn remove_tag(&self, name: &TagName) -> Result<(), Error> {
        let p = self.tag_path(name);
        match std::fs::remove_file(&p) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                Err(Error::Io { path: p, source: e })
            }
            _ => Ok(()),
        }
    }

    /// The index `name` points at, if the tag exists.
    pub fn tag(&self, name: &TagName) -> Result<Option<IndexId>, Error> {
        let p = self.tag_path(name);
        let bytes = match read_limited(&p, MAX_TAG_FILE, Symlinks::Refuse) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(source) => return Err(Error::Io { path: p, source }),
        };
        let text = String::from_utf8_lossy(&bytes);
        text.trim()
            .parse()
            .map(Some)
            .map_err(|e: manifest::Error| Error::BadTag {
                path: p,
                reason: e.to_string(),
            })
    }

    /// Every tag and the index it points at, by name, and apart the tag files that cannot
    /// be read (damaged, or not a regular file), each as the error naming it: one bad tag
    /// must not hide the others. Files in the tags directory that are not valid tag names
    /// (a publish's temporary file) are skipped.
    pub fn tags(&self) -> Result<Tags, Error> {
        let dir = self.tags_dir();
        let mut out = Tags::default();
        let rd = match std::fs::read_dir(&dir) {
            Ok(rd) => rd,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
            Err(source) => return Err(Error::Io { path: dir, source }),
        };
        for item in rd {
            let item = item.map_err(|source| Error::Io {
                path: dir.clone(),
                source,
            })?;
            let Some(name) = item.file_name().to_str().and_then(|n| n.parse().ok()) else {
                continue;
            };
            match self.tag(&name) {
                Ok(Some(id)) => out.tags.push((name, id)),
                Ok(None) => {}
                Err(e) => out.unreadable.push(e),
            }
        }
        out.tags.sort();
        Ok(out)
    }

    /// Resolves what `--index` was given: a tag by that exact name first, else a full id or
    /// a unique prefix of at least [`MIN_PREFIX`] hex characters. A tag name is never all
    /// hex ([`TagName`]), so the two cannot both match.
    pub fn resolve_index(&self, given: &str) -> Result<IndexId, Error> {
        let given = given.trim();
        if let Ok(name) = given.parse::<TagName>() {
            return match self.tag(&name)? {
                Some(id) if self.has_index(&id) => Ok(id),
                Some(id) => Err(Error::TagTargetMissing {
                    tag: name.to_string(),
                    id: id.to_hex(),
                    store: self.root().to_path_buf(),
                }),
                None => Err(Error::IndexNotFound {
                    id: given.to_owned(),
                    store: self.root().to_path_buf(),
                }),
            };
        }
        let prefix = given.to_ascii_lowercase();
        if prefix.len() < MIN_PREFIX || !prefix.chars().all(|c| c.is_ascii_hexdigit()) {
            return Err(Error::NotAnIndexName {
                given: given.to_owned(),
                store: self.root().to_path_buf(),
            });
        }
        if prefix.len() == 64 {
            return Ok(prefix.parse()?);
        }
        let matches: Vec<IndexId> = self
            .list_indexes()?
            .into_iter()
            .filter(|id| id.to_hex().starts_with(&prefix))
            .collect();
        match matches[..] {
            [one] => Ok(one),
            [] => Err(Error::IndexNotFound {
                id: prefix,
                store: self.root().to_path_buf(),
            }),
            _ => Err(Error::AmbiguousPrefix {
                prefix,
                count: matches.len(),
                store: self.root().to_path_buf(),
            }),
        }
    }
}

/// The fewest hex characters of an id `--index` takes.
pub const MIN_PREFIX: usize = 4;

#[cfg(test)]
mod tests {
    use super::*;

    fn name(s: &str) -> TagName {
        s.parse().expect("a valid tag")
    }

    fn id(byte: u8) -> IndexId {
        IndexId([byte; 32])
    }

    /// A store with empty files standing for indexes `0x11..`, `0x12..` and `0x22..`.
    fn store() -> (tempfile::TempDir, DirStore) {
        let t = tempfile::tempdir().expect("tempdir");
        let s = DirStore::create(t.path()).expect("store");
        for b in [0x11, 0x12, 0x22] {
            std::fs::write(s.index_path(&id(b)), b"").expect("index file");
        }
        (t, s)
    }

    #[test]
    fn tag_names_are_bounded_plain_and_never_hex() {
        for ok in ["stable", "v1.2", "torch-2.3_cuda", "Z", "face-off", "x"] {
            assert_eq!(name(ok).as_str(), ok);
        }
        for bad in [
            "",
            "abcd",
            "DEADBEEF",
            "0123",
            ".hidden",
            "-flag",
            "a/b",
            "..",
            "with space",
            "é",
        ] {
            let e = bad.parse::<TagName>().expect_err(bad).to_string();
            assert!(e.contains(&format!("{bad:?}")), "{e}");
            assert!(e.contains("A-Z a-z 0-9 . _ -"), "the rule is stated: {e}");
        }
        assert!("z".repeat(MAX_TAG_LEN).parse::<TagName>().is_ok());
        assert!("z".repeat(MAX_TAG_LEN + 1).parse::<TagName>().is_err());
    }

    #[test]
    fn a_tag_resolves_and_retagging_moves_it() {
        let (_t, s) = store();
        s.set_tag(&name("stable"), &id(0x11)).expect("tag");
        assert_eq!(s.resolve_index("stable").expect("tag"), id(0x11));
        s.set_tag(&name("stable"), &id(0x22)).expect("retag");
        assert_eq!(s.resolve_index(" stable ").expect("tag"), id(0x22));
        s.set_tag(&name("old"), &id(0x11)).expect("tag");
        assert_eq!(
            s.tags().expect("tags").tags,
            vec![(name("old"), id(0x11)), (name("stable"), id(0x22))]
        );
        // A publish's temporary file in the tags directory is not a tag.
        std::fs::write(s.tags_dir().join(".tmpXYZ"), b"junk").expect("tmp");
        assert_eq!(s.tags().expect("tags").tags.len(), 2);
        s.remove_tag(&name("old")).expect("rm");
        assert_eq!(s.tags().expect("tags").tags.len(), 1);
    }

    #[test]
    fn prefixes_resolve_as_before_and_their_errors_state_the_rule() {
        let (_t, s) = store();
        assert_eq!(s.resolve_index("2222").expect("prefix"), id(0x22));
        assert_eq!(s.resolve_index("1111").expect("prefix"), id(0x11));
        let full = id(0x12).to_hex();
        assert_eq!(s.resolve_index(&full.to_uppercase()).expect("id"), id(0x12));
        let rule = "give at least 4 hex characters of the id, or a tag";
        for (given, says) in [
            ("111", "111"),
            ("1", "\"1\""),
            ("3333", "no index 3333"),
            ("nosuchtag", "no index nosuchtag"),
            ("1", "teesfs inspect --store"),
        ] {
            let e = s.resolve_index(given).expect_err(given).to_string();
            assert!(e.contains(says), "{given}: {e}");
            assert!(e.contains(rule), "{given}: {e}");
        }
        s.set_tag(&name("x"), &id(0x12)).expect("tag");
        s.set_tag(&name("y"), &id(0x13)).expect("tag to nothing");
        let e = s.resolve_index("y").expect_err("dangling").to_string();
        assert!(e.contains("tag y") && e.contains(&id(0x13).to_hex()), "{e}");
        std::fs::write(s.index_path(&id(0x1a)), b"").expect("index");
        std::fs::write(s.index_path(&id(0x1b)), b"").expect("index");
        let e = s.resolve_index("1").expect_err("short").to_string();
        assert!(e.contains(rule), "{e}");
    }

    #[test]
    fn an_ambiguous_prefix_names_how_many_and_what_to_give() {
        let (_t, s) = store();
        let mut a = [0x11; 32];
        a[31] = 0;
        std::fs::write(s.index_path(&IndexId(a)), b"").expect("index");
        let e = s.resolve_index("1111").expect_err("two").to_string();
        assert!(e.contains("matches 2 indexes"), "{e}");
        assert!(
            e.contains("more hex characters") && e.contains("or a tag"),
            "{e}"
        );
    }

    #[test]
    fn a_damaged_or_symlinked_tag_is_an_error_naming_its_file() {
        let (_t, s) = store();
        std::fs::create_dir_all(s.tags_dir()).expect("mkdir");
        std::fs::write(s.tag_path(&name("broken")), b"not an id").expect("write");
        let e = s.resolve_index("broken").expect_err("broken").to_string();
        assert!(e.contains("indexes/tags/broken"), "{e}");
        std::os::unix::fs::symlink("/dev/zero", s.tag_path(&name("link"))).expect("ln");
        let e = s.resolve_index("link").expect_err("link").to_string();
        assert!(e.contains("symlink"), "{e}");
    }

    /// Issue 29: one bad tag file made listing the tags (and so `inspect`) fail for the
    /// whole store. The good tags are listed; the bad file comes back as its error.
    #[test]
    fn one_bad_tag_file_does_not_hide_the_other_tags() {
        let (_t, s) = store();
        let id = IndexId([7; 32]);
        s.set_tag(&name("good"), &id).expect("tag");
        std::fs::write(s.tag_path(&name("broken")), b"not an id").expect("write");
        let all = s.tags().expect("tags");
        assert_eq!(all.tags, vec![(name("good"), id)]);
        assert_eq!(all.unreadable.len(), 1);
        let e = all.unreadable[0].to_string();
        assert!(
            e.contains("indexes/tags/broken") && e.contains("remove the file"),
            "{e}"
        );
    }
}

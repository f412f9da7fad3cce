//! The image config kept in a signed index (issue 34): the parts of an OCI image's config
//! (`Env`, `Entrypoint`, `Cmd`, `WorkingDir`, `User`, `Labels`) that a task started in the
//! image follows, and their encoding as the optional trailing section of an index body
//! (version 3, see the index codec, `codec.rs`).
//!
//! Section layout: a presence byte (0 = no image, 1 = an image), then the env, entrypoint
//! and cmd lists (count, then length-prefixed strings), the working directory and user
//! (presence byte, then a string), and the labels (count, then key and value strings in
//! strictly increasing key order, so each config has exactly one encoding). Every string is
//! UTF-8 without NUL (what `execve` and the config JSON can carry); the decoder checks each
//! count and length against [`Limits`] before anything is allocated.

use std::collections::BTreeMap;

use crate::Error;
use crate::index::Limits;
use crate::wire::{Reader, Writer};

/// The parts of an OCI image's config a task's environment follows.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct ImageConfig {
    /// `Env`: `NAME=value` strings, in the config's order.
    pub env: Vec<String>,
    /// `Entrypoint`: the program and its first arguments.
    pub entrypoint: Vec<String>,
    /// `Cmd`: the default arguments (or command, without an entrypoint).
    pub cmd: Vec<String>,
    /// `WorkingDir`: where the task starts, if the image names a directory.
    pub working_dir: Option<String>,
    /// `User`: `user`, `uid`, `user:group` or `uid:gid`, as the config has it.
    pub user: Option<String>,
    /// `Labels`.
    pub labels: BTreeMap<String, String>,
}

impl ImageConfig {
    /// Checks the config against the limits the decoder applies, so a publisher learns of a
    /// config no node would accept before it signs the index: every list and string within
    /// [`Limits`], no NUL in any string.
    pub fn check(&self, limits: &Limits) -> Result<(), Error> {
        let lists = [
            ("image env count", &self.env),
            ("image entrypoint count", &self.entrypoint),
            ("image cmd count", &self.cmd),
        ];
        for (what, list) in lists {
            limit(what, list.len() as u64, limits.max_image_strings)?;
        }
        limit(
            "image label count",
            self.labels.len() as u64,
            limits.max_image_strings,
        )?;
        let mut total = 0u64;
        let strings = self.env.iter().chain(&self.entrypoint).chain(&self.cmd);
        let strings = strings
            .chain(&self.working_dir)
            .chain(&self.user)
            .chain(self.labels.iter().flat_map(|(k, v)| [k, v]));
        for s in strings {
            limit("image string", s.len() as u64, limits.max_image_string_len)?;
            check_text(s.as_bytes())?;
            total += s.len() as u64;
        }
        limit("image config size", total, limits.max_image_bytes)
    }
}

fn limit(what: &'static str, value: u64, limit: u64) -> Result<(), Error> {
    if value > limit {
        return Err(Error::LimitExceeded { what, value, limit });
    }
    Ok(())
}

fn check_text(bytes: &[u8]) -> Result<&str, Error> {
    let s = std::str::from_utf8(bytes)
        .map_err(|_| Error::BadImageConfig("a string is not UTF-8".into()))?;
    if s.contains('\0') {
        return Err(Error::BadImageConfig(format!(
            "the string {s:?} contains NUL"
        )));
    }
    Ok(s)
}

/// Writes the image section (presence byte and, for an image, its fields).
pub(crate) fn encode(w: &mut Writer, image: Option<&ImageConfig>) {
    let Some(image) = image else {
        w.u8(0);
        return;
    };
    w.u8(1);
    for list in [&image.env, &image.entrypoint, &image.cmd] {
        w.varint(list.len() as u64);
        for s in list {
            w.bytes(s.as_bytes());
        }
    }
    for opt in [&image.working_dir, &image.user] {
        match opt {
            None => w.u8(0),
            Some(s) => {
                w.u8(1);
                w.bytes(s.as_bytes());
            }
        }
    }
    w.varint(image.labels.len() as u64);
    for (k, v) in &image.labels {
        w.bytes(k.as_bytes());
        w.bytes(v.as_bytes());
    }
}

/// Counts the string bytes of the section against [`Limits::max_image_bytes`].
struct Budget<'l> {
    used: u64,
    limits: &'l Limits,
}

impl Budget<'_> {
    fn string(&mut self, r: &mut Reader<'_>, what: &'static str) -> Result<String, Error> {
        let bytes = r.bytes(what, self.limits.max_image_string_len)?;
        self.used += bytes.len() as u64;
        limit("image config size", self.used, self.limits.max_image_bytes)?;
        Ok(check_text(bytes)?.to_owned())
    }

    fn count(&self, r: &mut Reader<'_>, what: &'static str) -> Result<usize, Error> {
        let n = r.bounded(what, self.limits.max_image_strings)?;
        // Each string takes at least its one-byte length.
        if n > r.remaining() as u64 {
            return Err(Error::Truncated(what));
        }
        Ok(n as usize)
    }

    fn list(&mut self, r: &mut Reader<'_>, what: &'static str) -> Result<Vec<String>, Error> {
        let n = self.count(r, what)?;
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            out.push(self.string(r, what)?);
        }
        Ok(out)
    }

    fn optional(
        &mut self,
        r: &mut Reader<'_>,
        what: &'static str,
    ) -> Result<Option<String>, Error> {
        match r.u8(what)? {
            0 => Ok(None),
            1 => Ok(Some(self.string(r, what)?)),
            t => Err(Error::BadImageConfig(format!("{what}: presence byte {t}"))),
        }
    }
}

/// Reads the image section written by [`encode`].
pub(crate) fn decode(r: &mut Reader<'_>, limits: &Limits) -> Result<Option<ImageConfig>, Error> {
    match r.u8("image section")? {
        0 => return Ok(None),
        1 => {}
        t => {
            return Err(Error::BadImageConfig(format!(
                "image section presence byte {t}"
            )));
        }
    }
    let mut b = Budget { used: 0, limits };
    let env = b.list(r, "image env")?;
    let entrypoint = b.list(r, "image entrypoint")?;
    let cmd = b.list(r, "image cmd")?;
    let working_dir = b.optional(r, "image working dir")?;
    let user = b.optional(r, "image user")?;
    let n = b.count(r, "image labels")?;
    let mut labels = BTreeMap::new();
    for _ in 0..n {
        let k = b.string(r, "image label key")?;
        let v = b.string(r, "image label value")?;
        if labels.last_key_value().is_some_and(|(last, _)| *last >= k) {
            return Err(Error::BadImageConfig(format!(
                "label {k:?} is out of order or repeated"
            )));
        }
        labels.insert(k, v);
    }
    Ok(Some(ImageConfig {
        env,
        entrypoint,
        cmd,
        working_dir,
        user,
        labels,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::{Entry, EntryFlags, EntryIdx, EntryKind, Index, Meta};

    fn root_only(image: Option<ImageConfig>) -> Index {
        Index {
            chunk_size: 4096,
            chunks: vec![],
            entries: vec![Entry {
                parent: EntryIdx(0),
                name: Box::default(),
                meta: Meta::default(),
                flags: EntryFlags::default(),
                kind: EntryKind::Dir,
            }],
            urgent: vec![],
            image,
        }
    }

    fn sample() -> ImageConfig {
        ImageConfig {
            env: vec!["PATH=/usr/bin:/bin".into(), "LANG=C.UTF-8".into()],
            entrypoint: vec!["/usr/bin/python3".into(), "-u".into()],
            cmd: vec!["app.py".into()],
            working_dir: Some("/srv/app".into()),
            user: Some("1000:1000".into()),
            labels: [("org.opencontainers.image.version", "1.2"), ("a", "")]
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect(),
        }
    }

    #[test]
    fn image_config_round_trips() {
        for image in [None, Some(ImageConfig::default()), Some(sample())] {
            let index = root_only(image);
            let body = index.encode_body();
            let decoded = Index::decode_body(&body, &Limits::default()).expect("valid");
            assert_eq!(decoded, index);
        }
    }

    #[test]
    fn without_an_image_the_body_stays_version_2() {
        let body = root_only(None).encode_body();
        assert_eq!(
            body[7], 2,
            "an index without an image must stay readable by old nodes"
        );
        assert_eq!(root_only(Some(sample())).encode_body()[7], 3);
    }

    #[test]
    fn version_2_and_1_bodies_still_decode() {
        // A root-only version 2 body as the encoder before version 3 wrote it: magic,
        // version, chunk size 4096, no chunks, one entry (the root), empty urgent list.
        let mut v2 = b"TEESIDX\x02\x80\x20\x00\x01\x00\x00\x00\x00".to_vec();
        v2.extend([0, 0, 0, 0, 0]); // mode, uid, gid, mtime, nsec
        v2.push(0); // urgent list length
        let decoded = Index::decode_body(&v2, &Limits::default()).expect("version 2 decodes");
        assert_eq!(decoded, root_only(None));
        let mut v1 = v2.clone();
        v1[7] = 1;
        v1.pop();
        let decoded = Index::decode_body(&v1, &Limits::default()).expect("version 1 decodes");
        assert_eq!(decoded, root_only(None));
        // A version 2 body with an image section appended has trailing bytes.
        let mut extra = v2;
        extra.push(0);
        assert!(matches!(
            Index::decode_body(&extra, &Limits::default()),
            Err(Error::TrailingBytes(1))
        ));
    }

    #[test]
    fn every_truncation_of_the_image_section_is_refused() {
        let body = root_only(Some(sample())).encode_body();
        let v2_len = root_only(None).encode_body().len();
        for cut in v2_len..body.len() {
            let err = Index::decode_body(&body[..cut], &Limits::default())
                .expect_err("a truncated image section decoded");
            assert!(matches!(err, Error::Truncated(_)), "cut at {cut}: {err}");
        }
    }

    #[test]
    fn oversized_image_sections_are_refused() {
        let body = root_only(Some(sample())).encode_body();
        let tight = [
            Limits {
                max_image_strings: 1,
                ..Limits::default()
            },
            Limits {
                max_image_string_len: 8,
                ..Limits::default()
            },
            Limits {
                max_image_bytes: 40,
                ..Limits::default()
            },
        ];
        for limits in tight {
            let err = Index::decode_body(&body, &limits).expect_err("over the limit");
            assert!(matches!(err, Error::LimitExceeded { .. }), "{err}");
            assert!(sample().check(&limits).is_err());
        }
        assert!(sample().check(&Limits::default()).is_ok());
        // A huge count with few bytes behind it is refused before allocating.
        let mut w = Writer::with_capacity(16);
        w.u8(1);
        w.varint(4000);
        let err = decode(&mut Reader::new(&w.buf), &Limits::default()).expect_err("short");
        assert!(matches!(err, Error::Truncated("image env")), "{err}");
    }

    #[test]
    fn garbage_in_the_image_section_is_refused() {
        let good = root_only(Some(sample())).encode_body();
        let v2_len = root_only(None).encode_body().len();
        // A presence byte that is neither 0 nor 1.
        let mut bad = good.clone();
        bad[v2_len] = 7;
        assert!(matches!(
            Index::decode_body(&bad, &Limits::default()),
            Err(Error::BadImageConfig(_))
        ));
        // Labels out of order, a NUL and invalid UTF-8.
        let mut swapped = ImageConfig::default();
        swapped.labels.insert("a".into(), "1".into());
        let mut w = Writer::with_capacity(64);
        encode(&mut w, Some(&swapped));
        let mut twice = w.buf.clone();
        // The label count sits before the key "a" and value "1" (three bytes each way).
        let count_at = twice.len() - 5;
        assert_eq!(twice[count_at], 1);
        twice[count_at] = 2;
        twice.extend([1, b'a', 1, b'2']);
        let err = decode(&mut Reader::new(&twice), &Limits::default()).expect_err("repeat");
        assert!(matches!(err, Error::BadImageConfig(_)), "{err}");
        for s in ["a\0b", "\u{fffd}"] {
            let mut w = Writer::with_capacity(16);
            w.u8(1);
            w.varint(1);
            let bytes: &[u8] = if s.starts_with('\u{fffd}') {
                &[0xff, 0xfe]
            } else {
                s.as_bytes()
            };
            w.bytes(bytes);
            let err = decode(&mut Reader::new(&w.buf), &Limits::default()).expect_err(s);
            assert!(matches!(err, Error::BadImageConfig(_)), "{s:?}: {err}");
        }
    }
}

//! The framing of a record a daemon keeps of a mount: a first line naming its kind, a JSON
//! header, then a body whose length and blake3 the header carries, so a record cut short or
//! changed is refused as a whole. Written to a temporary file renamed over the old one.

use std::path::Path;

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::Error;

/// The header as written: the caller's fields, and the body's length and hash.
#[derive(serde::Serialize, serde::Deserialize)]
struct Framed<H> {
    #[serde(flatten)]
    header: H,
    body_len: usize,
    body_hash: String,
}

/// The bytes of a record of kind `magic` (one line) with `header` and `body`.
pub fn encode<H: Serialize>(magic: &str, header: H, body: &[u8]) -> Vec<u8> {
    let framed = Framed {
        header,
        body_len: body.len(),
        body_hash: blake3::hash(body).to_hex().to_string(),
    };
    let mut out = format!("{magic}\n").into_bytes();
    out.extend(serde_json::to_vec(&framed).expect("a plain header encodes"));
    out.push(b'\n');
    out.extend(body);
    out
}

/// The header and body of a record of kind `magic`, checked against each other.
pub fn decode<'a, H: DeserializeOwned>(
    magic: &str,
    bytes: &'a [u8],
) -> Result<(H, &'a [u8]), Error> {
    let bad = |why: String| Error::Record(why);
    let rest = (bytes.strip_prefix(magic.as_bytes()))
        .and_then(|r| r.strip_prefix(b"\n"))
        .ok_or_else(|| bad(format!("not a {magic}")))?;
    let nl = (rest.iter().position(|&b| b == b'\n'))
        .ok_or_else(|| bad("its header has no end".into()))?;
    let f: Framed<H> = serde_json::from_slice(&rest[..nl])
        .map_err(|e| bad(format!("its header is unreadable: {e}")))?;
    let body = &rest[nl + 1..];
    if body.len() != f.body_len || blake3::hash(body).to_hex().as_str() != f.body_hash {
        return Err(bad(
            "its body does not match its header (cut short or changed)".into(),
        ));
    }
    Ok((f.header, body))
}

/// Writes `bytes` to `to` atomically (a temporary file beside it, renamed over it), in a
/// directory made private (0700) if it is new.
pub fn write(to: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    let dir = to.parent().unwrap_or(Path::new("."));
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    let name = to
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(".{name}.tmp"));
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, to)
}

//! Writing the files users name on the command line (`report -o`, `--report`,
//! `--report-html`, `record -o`, `sim --csv`, keys, lab reports): one helper, so none of
//! them writes through a link planted at its path.
//!
//! Root runs `teesfs report` on users' files, and a user who links `push.html` to a
//! root-owned file must not get root to overwrite it. So an output is written to a fresh
//! temporary file in the same directory (created `O_EXCL`, never through a link) and
//! renamed over the path; an existing symlink there is refused, and a rename replaces a
//! directory entry, never the file a link or hard link points at. Readers never see a
//! half-written file. Nothing here decides what to write or where.

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use anyhow::{Context, bail};

/// Writes `bytes` to `path` (readable by all, less the umask) as described above.
pub fn write(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    write_mode(path, bytes, 0o644)
}

/// [`write`] with the new file's mode (less the umask), e.g. 0600 for a secret key.
pub fn write_mode(path: &Path, bytes: &[u8], mode: u32) -> anyhow::Result<()> {
    match std::fs::symlink_metadata(path) {
        Ok(md) if md.file_type().is_symlink() => bail!(
            "{} is a symbolic link: teesfs does not write through links; remove it or name \
             another output file",
            path.display()
        ),
        Ok(md) if md.is_dir() => bail!("{} is a directory: name an output file", path.display()),
        _ => {}
    }
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let name = path
        .file_name()
        .with_context(|| format!("{} names no file: name an output file", path.display()))?;
    let mut tmp = tempfile::Builder::new()
        .prefix(&format!(".{}.", name.to_string_lossy()))
        .permissions(std::fs::Permissions::from_mode(mode))
        .tempfile_in(dir)
        .with_context(|| {
            format!(
                "writing {}: cannot create a file in {}",
                path.display(),
                dir.display()
            )
        })?;
    tmp.write_all(bytes)
        .and_then(|()| tmp.as_file().sync_data())
        .with_context(|| format!("writing {}", path.display()))?;
    tmp.persist(path)
        .map_err(|e| e.error)
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outputs_replace_files_and_refuse_links_without_writing_through_them() {
        let t = tempfile::tempdir().expect("tempdir");
        let victim = t.path().join("victim");
        std::fs::write(&victim, b"keep me").expect("victim");
        let link = t.path().join("out.html");
        std::os::unix::fs::symlink(&victim, &link).expect("ln");
        let e = write(&link, b"evil").expect_err("a link is refused");
        assert!(e.to_string().contains("symbolic link"), "{e}");
        assert_eq!(std::fs::read(&victim).expect("read"), b"keep me");

        // A hard link at the path: replaced, its other name keeps its bytes.
        let hard = t.path().join("hard.html");
        std::fs::hard_link(&victim, &hard).expect("hard link");
        write(&hard, b"new").expect("written");
        assert_eq!(std::fs::read(&hard).expect("read"), b"new");
        assert_eq!(std::fs::read(&victim).expect("read"), b"keep me");

        let secret = t.path().join("k");
        write_mode(&secret, b"s", 0o600).expect("written");
        let mode = std::fs::metadata(&secret).expect("md").permissions().mode();
        assert_eq!(mode & 0o077, 0, "{mode:o}");
        let left: Vec<_> = std::fs::read_dir(t.path())
            .expect("ls")
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with('.'))
            .collect();
        assert!(left.is_empty(), "no temporary file left: {left:?}");
    }
}

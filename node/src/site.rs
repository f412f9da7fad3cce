//! Reading the site configuration: `/etc/teesfs/teesfs.toml` (or `$TEESFS_SITE_CONFIG`),
//! then `teesfs.d/*.toml` beside it in name order, then `teesfs.toml.local`; later files
//! override earlier ones key by key (the format is [`manifest::site`]). A missing file is
//! an empty configuration; an unreadable or malformed one is an error naming it. Files are
//! read with a bound and only if they are regular files.

use std::path::{Path, PathBuf};

use manifest::SiteConfig;
use seeder::files::{Symlinks, read_limited_to_string};

use crate::Error;

/// The site configuration file unless `$TEESFS_SITE_CONFIG` names another.
pub(crate) const DEFAULT_PATH: &str = "/etc/teesfs/teesfs.toml";

/// The largest configuration file read.
const MAX_BYTES: u64 = 1 << 20;

/// The site configuration's main file: `$TEESFS_SITE_CONFIG` or [`DEFAULT_PATH`].
pub fn main_path() -> PathBuf {
    std::env::var_os("TEESFS_SITE_CONFIG")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(DEFAULT_PATH))
}

/// The files that make up the configuration at `main`, in the order they apply.
pub fn files(main: &Path) -> Vec<PathBuf> {
    let mut out = vec![main.to_path_buf()];
    if let Some(dir) = main.parent() {
        let mut drop_ins: Vec<PathBuf> = std::fs::read_dir(dir.join("teesfs.d"))
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "toml"))
            .collect();
        drop_ins.sort();
        out.extend(drop_ins);
    }
    let mut local = main.as_os_str().to_owned();
    local.push(".local");
    out.push(PathBuf::from(local));
    out
}

/// Loads the configuration at `main` with its drop-ins; returns it and the files read. Any
/// mistake in a file is an error (see [`load_lenient`] for what keeps going).
pub fn load(main: &Path) -> Result<(SiteConfig, Vec<PathBuf>), Error> {
    let loaded = load_lenient(main)?;
    match loaded.problems.into_iter().next() {
        Some(p) => Err(manifest::Error::SiteConfig(p.to_string()).into()),
        None => Ok((loaded.config, loaded.read)),
    }
}

/// The site configuration as read, with what was left out of it.
#[derive(Debug, Default)]
pub struct Loaded {
    /// The keys that are right, overlaid in file order.
    pub config: SiteConfig,
    /// The files read, in order.
    pub read: Vec<PathBuf>,
    /// Keys left out (unknown, or with a bad value), each naming its file and line.
    pub problems: Vec<manifest::SiteProblem>,
}

/// Loads the configuration at `main` with its drop-ins, leaving out each key that is
/// unknown or wrong and reporting it, so that a mistake stops only the commands that use
/// that key. A file that cannot be read or is not TOML at all is an error.
pub fn load_lenient(main: &Path) -> Result<Loaded, Error> {
    let mut out = Loaded::default();
    for path in files(main) {
        let text = match read_limited_to_string(&path, MAX_BYTES, Symlinks::Follow) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(source) => return Err(Error::SiteConfig { path, source }),
        };
        let (cfg, problems) = SiteConfig::from_toml_lenient(&text, &path.display().to_string())?;
        out.config = std::mem::take(&mut out.config).overlay(cfg);
        out.problems.extend(problems);
        out.read.push(path);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drop_ins_and_local_override_in_order_and_a_missing_file_is_empty() {
        let t = tempfile::tempdir().expect("tempdir");
        let main = t.path().join("teesfs.toml");
        assert_eq!(load(&main).expect("nothing there").0, SiteConfig::default());
        std::fs::write(&main, "[tree]\nwidth = 15\nthreshold = 512\n").expect("write");
        std::fs::create_dir(t.path().join("teesfs.d")).expect("mkdir");
        std::fs::write(t.path().join("teesfs.d/20-b.toml"), "[tree]\nwidth = 8\n").expect("b");
        std::fs::write(
            t.path().join("teesfs.d/10-a.toml"),
            "[tree]\nwidth = 4\nthreshold = 0\n",
        )
        .expect("a");
        std::fs::write(t.path().join("teesfs.d/notes.txt"), "not toml").expect("txt");
        std::fs::write(
            t.path().join("teesfs.toml.local"),
            "[network]\nport = 9000\n",
        )
        .expect("local");
        let (cfg, read) = load(&main).expect("load");
        assert_eq!(read.len(), 4, "{read:?}");
        assert_eq!(cfg.tree.width, Some(8), "20-b comes after 10-a");
        assert_eq!(cfg.tree.threshold, Some(0));
        assert_eq!(cfg.network.port, Some(9000));
    }

    #[test]
    fn a_fifo_or_device_as_configuration_is_an_error_naming_it() {
        let t = tempfile::tempdir().expect("tempdir");
        let main = t.path().join("teesfs.toml");
        std::os::unix::fs::symlink("/dev/zero", &main).expect("symlink");
        let e = load(&main).expect_err("device");
        assert!(e.to_string().contains("teesfs.toml"), "{e}");
    }

    #[test]
    fn the_shipped_configuration_parses() {
        let text = include_str!("../../packaging/etc/teesfs.toml");
        SiteConfig::from_toml(text, "packaging/etc/teesfs.toml").expect("parses");
    }
}

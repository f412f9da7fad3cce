//! Small presentation helpers shared by commands: sizes, durations, key locations, logging.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use bytesize::ByteSize;
use manifest::{PublicKey, SecretKey};
use teesfs_node::daemon::trust;

/// `s` as one word for `sh`: as it is when it has nothing the shell would change, else in
/// single quotes.
pub fn shell_word(s: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c);
    if !s.is_empty() && s.chars().all(plain) {
        s.to_string()
    } else {
        sh_quote(s)
    }
}

/// `s` in single quotes for `sh`, whatever it holds.
pub fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// `1.5 MiB`-style sizes.
pub fn bytes(n: u64) -> String {
    ByteSize(n).display().iec().to_string()
}

/// `100 Mbit/s`, `10 Gbit/s`, `12.5 Mbit/s` from bits per second.
pub fn bit_rate(bps: u64) -> String {
    if bps >= 1_000_000_000 && bps.is_multiple_of(1_000_000_000) {
        format!("{} Gbit/s", bps / 1_000_000_000)
    } else if bps.is_multiple_of(1_000_000) {
        format!("{} Mbit/s", bps / 1_000_000)
    } else {
        format!("{:.1} Mbit/s", bps as f64 / 1e6)
    }
}

/// `1.23 s`, `45 ms`, `2m 05s`.
pub fn duration(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s < 1.0 {
        format!("{:.0} ms", s * 1000.0)
    } else if s < 60.0 {
        format!("{s:.2} s")
    } else {
        format!("{}m {:02}s", d.as_secs() / 60, d.as_secs() % 60)
    }
}

/// Parses a size for a command-line flag: `64KiB`, `1MiB`, `16MB`, `1048576`. The one size
/// parser of the CLI (flags that show sizes back take it through [`parse_byte_size`]).
pub fn parse_size(s: &str) -> anyhow::Result<u64> {
    s.parse::<ByteSize>().map(|b| b.as_u64()).map_err(|e| {
        anyhow::anyhow!("{s:?} is not a size ({e}); write e.g. 1MiB, 512KiB, 16MB or 1048576")
    })
}

/// [`parse_size`] as a [`ByteSize`], for flags whose value is printed back.
pub fn parse_byte_size(s: &str) -> anyhow::Result<ByteSize> {
    parse_size(s).map(ByteSize)
}

/// `--chunk-size`: a fixed size, or `auto` (`teesfs publish` chooses from the layer's size).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChunkSize {
    /// [`manifest::chunk_size_for`], at most [`manifest::MAX_AUTO_CHUNK`].
    Auto,
    /// This many bytes.
    Fixed(u32),
}

impl ChunkSize {
    /// The fixed size, if one was given.
    pub fn fixed(self) -> Option<u32> {
        match self {
            ChunkSize::Auto => None,
            ChunkSize::Fixed(n) => Some(n),
        }
    }
}

/// Parses `--chunk-size`: `auto`, or a power of two between 64KiB and 64MiB.
pub fn parse_chunk_size(s: &str) -> anyhow::Result<ChunkSize> {
    if s.eq_ignore_ascii_case("auto") {
        return Ok(ChunkSize::Auto);
    }
    let what = || format!("{s:?} is not \"auto\" or a power of two between 64KiB and 64MiB");
    let cs = parse_size(s)
        .map_err(|_| anyhow::anyhow!("{}; write e.g. auto, 256KiB or 1MiB", what()))?;
    if !cs.is_power_of_two() || !(64 << 10..=64 << 20).contains(&cs) {
        anyhow::bail!(
            "{} ({}); write e.g. auto, 256KiB or 1MiB",
            what(),
            bytes(cs)
        );
    }
    Ok(ChunkSize::Fixed(cs as u32))
}

/// Parses a planning strategy for a command-line flag (`topo`, `topo-paper`, `random`, ...).
pub fn parse_strategy(s: &str) -> anyhow::Result<peertree::Strategy> {
    Ok(s.parse()?)
}

/// The per-user configuration directory: `$TEESFS_CONFIG`, else `$XDG_CONFIG_HOME/teesfs`,
/// else `~/.config/teesfs` ([`teesfs_node::daemon::trust::config_dir`]).
pub fn config_dir() -> PathBuf {
    trust::config_dir()
}

/// Default location of the publisher's secret key.
pub fn default_key_path() -> PathBuf {
    config_dir().join("publisher.key")
}

/// The largest configuration, spec, topology, hosts or key file read.
pub const MAX_TEXT_FILE: u64 = 16 << 20;

/// The text of a file a user or the site named: a regular file (a symlink is followed),
/// at most [`MAX_TEXT_FILE`] bytes, read without blocking on a FIFO. The error names the
/// file and `what` it is for, never its content.
pub fn read_text(path: &Path, what: &str) -> anyhow::Result<String> {
    seeder::files::read_limited_to_string(path, MAX_TEXT_FILE, seeder::files::Symlinks::Follow)
        .with_context(|| format!("reading {what} {}", path.display()))
}

/// Loads a secret key, with a hint when it does not exist yet.
pub fn load_secret(path: &Path) -> anyhow::Result<SecretKey> {
    let text =
        seeder::files::read_limited_to_string(path, MAX_TEXT_FILE, seeder::files::Symlinks::Follow)
            .with_context(|| {
                format!(
                    "cannot read publisher key {}; create one with `teesfs keygen`",
                    path.display()
                )
            })?;
    SecretKey::from_file_text(&text).with_context(|| format!("in {}", path.display()))
}

/// Trusted publisher keys: the `--trust` files if given, else the user's own
/// `publisher.pub`, `*.pub` in `<config>/trusted/` and in `/etc/teesfs/trusted/`
/// ([`trust::load_trust`]).
pub fn load_trust(explicit: &[PathBuf]) -> anyhow::Result<Vec<PublicKey>> {
    Ok(trust::load_trust(explicit)?)
}

/// A uid from a user name or a number; `None` for a name this host does not know.
pub fn uid_of(user: &str) -> Option<u32> {
    trust::uid_of(user)
}

/// The files [`load_trust`] reads: the `--trust` files if given, else the defaults.
pub fn trust_files(explicit: &[PathBuf]) -> Vec<PathBuf> {
    trust::trust_files(explicit)
}

/// Resolves `prefix` in `store` and opens that index, checking its signature against the
/// trusted keys (`--trust` files, or the defaults of [`load_trust`]) and, unless `expired`
/// is [`Expired::Allow`], its expiry. Returns the id, the signed bytes and the decoded
/// index.
pub fn open_trusted_index(
    store: &seeder::DirStore,
    prefix: &str,
    trust: &[PathBuf],
    expired: Expired,
) -> anyhow::Result<(manifest::IndexId, Vec<u8>, manifest::Index)> {
    let trusted = load_trust(trust)?;
    let id = store.resolve_index(prefix)?;
    let bytes = store.get_index(&id)?;
    let (signed, index) = manifest::SignedIndex::open(
        bytes.clone(),
        Some(id),
        &trusted,
        &manifest::Limits::default(),
    )
    .with_context(|| format!("index {id} does not verify"))?;
    if expired == Expired::Refuse {
        signed.check_expiry(unix_now())?;
    }
    Ok((id, bytes, index))
}

/// Whether an index past its expiry may be opened (to look at it) or not (to use it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expired {
    /// Refuse it: pushing or mounting it.
    Refuse,
    /// Open it all the same: inspecting it.
    Allow,
}

/// The store, one index in it and the keys it must be signed by: the arguments of every
/// command that opens one published index on this machine.
#[derive(Debug, clap::Args)]
pub struct IndexArgs {
    /// The store holding the index and chunks.
    #[arg(long, value_name = "DIR")]
    pub store: PathBuf,
    /// A tag, or at least 4 hex characters of the index id (`teesfs inspect --store DIR`
    /// lists both).
    #[arg(long, value_name = "TAG|ID")]
    pub index: String,
    /// Trusted publisher public key (repeatable); see `teesfs verify --help`.
    #[arg(long, value_name = "FILE.pub")]
    pub trust: Vec<PathBuf>,
}

impl IndexArgs {
    /// Opens the store and the index, checking its signature ([`open_trusted_index`]).
    pub fn open(&self) -> anyhow::Result<(seeder::DirStore, manifest::IndexId, manifest::Index)> {
        // Held shared while this command reads, so that gc does not remove what it needs.
        let store = seeder::DirStore::open(&self.store)?.locked_for_reading()?;
        let (id, _, index) = open_trusted_index(&store, &self.index, &self.trust, Expired::Refuse)?;
        Ok((store, id, index))
    }
}

/// The urgent set's entries, chunks and their stored bytes.
pub fn urgent_size(index: &manifest::Index) -> (u64, u64, u64) {
    if index.urgent.is_empty() {
        return (0, 0, 0);
    }
    let (order, n) = manifest::push_order(index, &|_| false);
    let bytes: u64 = order[..n]
        .iter()
        .map(|&c| u64::from(index.chunks[c as usize].stored_len))
        .sum();
    (index.urgent.len() as u64, n as u64, bytes)
}

/// Seconds since the Unix epoch of `t` (0 before it).
pub fn unix_secs(t: std::time::SystemTime) -> u64 {
    t.duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// `2025-01-02 10:11` (UTC, to the minute) for a table.
pub fn date(unix: u64) -> String {
    let t = humantime::format_rfc3339_seconds(
        std::time::UNIX_EPOCH + std::time::Duration::from_secs(unix),
    )
    .to_string();
    t.get(..16).unwrap_or(&t).replacen('T', " ", 1)
}

/// Seconds since the Unix epoch now (0 if the clock is before it).
pub fn unix_now() -> u64 {
    unix_secs(std::time::SystemTime::now())
}

/// Where nodes list revoked index ids by default.
pub const REVOKED_DEFAULT: &str = trust::REVOKED_DEFAULT;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_size_parser_for_every_flag() {
        assert_eq!(parse_size("1MiB").expect("size"), 1 << 20);
        assert_eq!(parse_size("16MB").expect("size"), 16_000_000);
        assert_eq!(parse_size("1048576").expect("size"), 1 << 20);
        assert_eq!(parse_byte_size("64KiB").expect("size"), ByteSize(64 << 10));
        let e = parse_size("lots").expect_err("not a size").to_string();
        assert!(e.contains("\"lots\"") && e.contains("1MiB"), "{e}");
    }

    #[test]
    fn strategies_parse_by_name_and_refuse_others() {
        assert_eq!(
            parse_strategy("topo").expect("topo"),
            peertree::Strategy::Topo
        );
        assert!(parse_strategy("fastest").is_err());
    }
}

/// The job the environment names: `$TEESFS_JOB`, else `$SLURM_JOB_ID` (set in a Slurm job's
/// steps, prolog and epilog, and pushed as that number by the prolog). Either is read as
/// `--job` is (`peertree::relay::JobId`'s `FromStr`); one that is set but is not a job id is an error, not
/// ignored, so a typo does not silently pick another job.
pub fn job_from_env() -> anyhow::Result<Option<peertree::relay::JobId>> {
    for var in ["TEESFS_JOB", "SLURM_JOB_ID"] {
        match std::env::var(var) {
            Ok(v) if !v.trim().is_empty() => {
                return v
                    .parse()
                    .map(Some)
                    .with_context(|| format!("${var} (unset it or pass --job)"));
            }
            _ => {}
        }
    }
    Ok(None)
}

/// `--format`: what a command prints on stdout. The JSON documents are versioned (a
/// `"version": 1` field; fields are only ever added within a version) and typed in the
/// libraries (`pushreport::output`, `teesfs_node::control::Status`, `teesfs_node::report`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// For people; may change between releases: do not parse it.
    Text,
    /// One JSON document, for scripts.
    Json,
}

/// An error with its causes, as `anyhow` prints one with `{:#}`: `error: cause: cause`.
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        text.push_str(&format!(": {c}"));
        cause = c.source();
    }
    text
}

/// Prints `doc` as pretty JSON on stdout, best-effort ([`teesfs_node::say`]): a full disk or a
/// closed pipe costs the output, not the command.
pub fn print_json<T: serde::Serialize>(doc: &T) -> anyhow::Result<()> {
    let text = serde_json::to_string_pretty(doc).context("writing JSON")?;
    outln!("{text}");
    Ok(())
}

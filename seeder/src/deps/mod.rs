//! Dependency analysis: the files a command needs to start, in the order it needs them,
//! computed against the overlay view a job will see (the layer over the node's "/").
//!
//! For each command: the executable (found in `PATH` of the view unless it names a path);
//! for a `#!` script its interpreter, recursively, and for `#!/usr/bin/env NAME` the
//! program `env` would run; for an ELF file the dynamic loader's work, following
//! `ld.so`'s rules (glibc):
//!
//! - `PT_INTERP` first, then `DT_NEEDED` breadth first (the loader's load order); a
//!   name already loaded (by its `DT_SONAME`, a name it was requested by, or the same
//!   file) is not searched again;
//! - a name with a `/` is a path; otherwise the directories are, in order: `DT_RPATH` of
//!   the requesting object and of each object up the chain that loaded it (only when the
//!   requester has no `DT_RUNPATH`; an object with both ignores its `DT_RPATH`), then
//!   `LD_LIBRARY_PATH`, then the requester's own `DT_RUNPATH`, then `/etc/ld.so.cache` of
//!   the view, then the system directories (the last two skipped for `DF_1_NODEFLIB`);
//!   `$ORIGIN`, `$LIB` and `$PLATFORM` are expanded, and each directory is probed in
//!   its `glibc-hwcaps` and legacy hwcap subdirectories before itself;
//! - a candidate of the wrong ELF class or machine is skipped, a candidate that is not
//!   ELF at all is an error (as for the loader).
//!
//! Symlinks are followed in the view; the layer's symlinks on the way and every file
//! that lives in the layer are emitted, in order. Files of the host are traversed but not
//! emitted: they are on every node already.

mod elf;
mod ldcache;
mod view;

use std::collections::HashSet;
use std::ffi::{OsStr, OsString};
use std::io::Read;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

pub use elf::{ElfError, ElfInfo};
pub use ldcache::{BadCache, CacheEntry, LdCache};
pub use view::{Found, View};

use crate::Error;

/// `PATH` when none is given (what a login shell on Debian uses for root and users alike,
/// `/usr/local` first).
pub const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// How many `#!` interpreters may be nested (the kernel's limit is in this range).
const MAX_SCRIPT_DEPTH: usize = 5;

/// The environment the command will be started with.
#[derive(Clone, Debug)]
pub struct Env {
    /// `PATH`, for the command and for `#!/usr/bin/env NAME`.
    pub path: OsString,
    /// `LD_LIBRARY_PATH`, if set.
    pub ld_library_path: Option<OsString>,
    /// The working directory (a view path), for relative paths.
    pub cwd: PathBuf,
}

impl Default for Env {
    fn default() -> Self {
        Self {
            path: DEFAULT_PATH.into(),
            ld_library_path: None,
            cwd: PathBuf::from("/"),
        }
    }
}

impl Env {
    /// `PATH` and `LD_LIBRARY_PATH` of this process, the working directory "/".
    pub fn from_process() -> Self {
        Self {
            path: std::env::var_os("PATH").unwrap_or_else(|| DEFAULT_PATH.into()),
            ld_library_path: std::env::var_os("LD_LIBRARY_PATH"),
            cwd: PathBuf::from("/"),
        }
    }
}

/// What the loader of the target system expands and searches.
#[derive(Clone, Debug)]
pub struct Platform {
    /// What `$LIB` expands to (`lib/x86_64-linux-gnu` on Debian).
    pub lib: String,
    /// What `$PLATFORM` expands to (`x86_64`).
    pub platform: String,
    /// Supported `glibc-hwcaps` subdirectories, best first.
    pub hwcaps: Vec<String>,
    /// Legacy hwcap subdirectories (glibc up to 2.36 probes them), in probe order.
    pub legacy_subdirs: Vec<String>,
    /// The system directories, searched last.
    pub system_dirs: Vec<PathBuf>,
    /// ABI flags of usable `ld.so.cache` entries.
    pub cache_flags: i32,
}

impl Platform {
    /// The platform of this machine (the nodes share the login node's "/").
    pub fn host() -> Self {
        let arch = std::env::consts::ARCH;
        let triple = format!("{arch}-linux-gnu");
        let multiarch = Path::new("/lib").join(&triple).is_dir()
            || Path::new("/usr/lib").join(&triple).is_dir();
        let (lib, system_dirs) = if multiarch {
            (
                format!("lib/{triple}"),
                vec![
                    Path::new("/lib").join(&triple),
                    Path::new("/usr/lib").join(&triple),
                    "/lib".into(),
                    "/usr/lib".into(),
                ],
            )
        } else {
            ("lib64".into(), vec!["/lib64".into(), "/usr/lib64".into()])
        };
        let p = arch.to_string();
        Self {
            lib,
            legacy_subdirs: vec![
                format!("tls/{p}/{p}"),
                format!("tls/{p}"),
                "tls".into(),
                format!("{p}/{p}"),
                p.clone(),
            ],
            platform: p,
            hwcaps: host_hwcaps(),
            system_dirs,
            cache_flags: match arch {
                "x86_64" => 0x0303,
                "aarch64" => 0x0a03,
                _ => 0x0003,
            },
        }
    }

    fn subdirs(&self) -> impl Iterator<Item = String> + '_ {
        self.hwcaps
            .iter()
            .map(|h| format!("glibc-hwcaps/{h}"))
            .chain(self.legacy_subdirs.iter().cloned())
            .chain(std::iter::once(String::new()))
    }
}

/// The x86-64 micro-architecture levels this CPU supports, best first.
#[cfg(target_arch = "x86_64")]
fn host_hwcaps() -> Vec<String> {
    use std::arch::is_x86_feature_detected as has;
    let v2 = has!("cmpxchg16b")
        && has!("popcnt")
        && has!("sse3")
        && has!("sse4.1")
        && has!("sse4.2")
        && has!("ssse3");
    let v3 = v2
        && has!("avx")
        && has!("avx2")
        && has!("bmi1")
        && has!("bmi2")
        && has!("f16c")
        && has!("fma")
        && has!("lzcnt")
        && has!("movbe")
        && has!("xsave");
    let v4 = v3
        && has!("avx512f")
        && has!("avx512bw")
        && has!("avx512cd")
        && has!("avx512dq")
        && has!("avx512vl");
    [(v4, "x86-64-v4"), (v3, "x86-64-v3"), (v2, "x86-64-v2")]
        .into_iter()
        .filter(|(ok, _)| *ok)
        .map(|(_, n)| n.to_string())
        .collect()
}

#[cfg(not(target_arch = "x86_64"))]
fn host_hwcaps() -> Vec<String> {
    Vec::new()
}

/// One object the loader maps, in load order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Loaded {
    /// The name it was requested by (the interpreter's path for the interpreter).
    pub name: Vec<u8>,
    /// The path as the loader opened it (search directory + name, symlinks unresolved).
    pub opened: PathBuf,
    /// The view path with symlinks resolved.
    pub path: PathBuf,
    /// Whether the file lives in the layer.
    pub in_layer: bool,
}

/// A needed library that is nowhere in the view (the command would not start).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Missing {
    /// The object that needs it.
    pub needed_by: PathBuf,
    /// The `DT_NEEDED` name.
    pub name: String,
}

struct Obj {
    found: Found,
    info: ElfInfo,
    opened: Vec<u8>,
    names: Vec<Vec<u8>>,
    loader: Option<usize>,
    file_id: (u64, u64),
}

impl Obj {
    fn origin(&self) -> &Path {
        self.found.path.parent().unwrap_or(Path::new("/"))
    }
}

/// The dependency analysis of one or more commands against one view; the urgent list
/// accumulates over the commands, each file once, at its first position.
pub struct Analysis {
    view: View,
    env: Env,
    platform: Platform,
    cache: Option<Option<LdCache>>,
    urgent: Vec<PathBuf>,
    seen: HashSet<PathBuf>,
    missing: Vec<Missing>,
}

fn bytes_path(b: &[u8]) -> PathBuf {
    PathBuf::from(OsStr::from_bytes(b))
}

fn lossy(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

impl Analysis {
    /// An analysis against `view`.
    pub fn new(view: View, env: Env, platform: Platform) -> Self {
        Self {
            view,
            env,
            platform,
            cache: None,
            urgent: Vec::new(),
            seen: HashSet::new(),
            missing: Vec::new(),
        }
    }

    /// The urgent paths so far (relative to the layer root), in the order needed.
    pub fn urgent(&self) -> &[PathBuf] {
        &self.urgent
    }

    /// Needed libraries found nowhere in the view.
    pub fn missing(&self) -> &[Missing] {
        &self.missing
    }

    /// Adds the files `command` (a path, or a name looked up in `PATH` of the view)
    /// needs to start. Returns the ELF objects loaded for it, in load order (for a
    /// script, those of its final interpreter).
    pub fn add_command(&mut self, command: &OsStr) -> Result<Vec<Loaded>, Error> {
        let found = self.locate(command)?;
        self.exec(found, 0)
    }

    fn emit(&mut self, f: &Found) {
        let links = f.layer_links.clone();
        for l in links {
            self.push(l);
        }
        if f.in_layer && !f.is_dir {
            self.push(f.layer_path());
        }
    }

    fn push(&mut self, p: PathBuf) {
        if self.seen.insert(p.clone()) {
            self.urgent.push(p);
        }
    }

    fn view_path(&self, p: &Path) -> PathBuf {
        if p.is_absolute() {
            p.to_path_buf()
        } else {
            self.env.cwd.join(p)
        }
    }

    /// Finds a command the way `execvp` does, in the view.
    fn locate(&self, command: &OsStr) -> Result<Found, Error> {
        let not_found = |why: String| Error::CommandNotFound {
            command: command.to_string_lossy().into_owned(),
            reason: why,
        };
        if command.is_empty() {
            return Err(not_found("the command is empty".into()));
        }
        if command.as_bytes().contains(&b'/') {
            let p = self.view_path(Path::new(command));
            return match self.view.resolve(&p) {
                Some(f) if !f.is_dir => Ok(f),
                Some(_) => Err(not_found(format!("{} is a directory", p.display()))),
                None => Err(not_found(format!("no {} in the view", p.display()))),
            };
        }
        for dir in self.env.path.as_bytes().split(|&b| b == b':') {
            let dir = if dir.is_empty() {
                self.env.cwd.clone()
            } else {
                self.view_path(&bytes_path(dir))
            };
            if let Some(f) = self.view.resolve(&dir.join(command))
                && !f.is_dir
                && std::fs::metadata(&f.real).is_ok_and(|m| m.permissions().mode() & 0o111 != 0)
            {
                return Ok(f);
            }
        }
        Err(not_found(format!(
            "not in PATH of the view ({})",
            self.env.path.to_string_lossy()
        )))
    }

    fn exec(&mut self, found: Found, depth: usize) -> Result<Vec<Loaded>, Error> {
        self.emit(&found);
        let mut head = Vec::with_capacity(256);
        std::fs::File::open(&found.real)
            .and_then(|f| f.take(256).read_to_end(&mut head))
            .map_err(|source| Error::Io {
                path: found.real.clone(),
                source,
            })?;
        if let Some(rest) = head.strip_prefix(b"#!") {
            return self.script(&found, rest, depth);
        }
        if head.starts_with(b"\x7fELF") {
            return self.elf(found);
        }
        Err(Error::NotExecutable {
            path: found.path,
            reason: "neither an ELF file nor a #! script".into(),
        })
    }

    fn script(&mut self, script: &Found, line: &[u8], depth: usize) -> Result<Vec<Loaded>, Error> {
        let bad = |reason: String| Error::NotExecutable {
            path: script.path.clone(),
            reason,
        };
        if depth >= MAX_SCRIPT_DEPTH {
            return Err(bad("too many levels of #! interpreters".into()));
        }
        let line = line.split(|&b| b == b'\n').next().unwrap_or_default();
        let line = line.trim_ascii();
        let (interp, arg) = match line.iter().position(|b| b.is_ascii_whitespace()) {
            Some(i) => (&line[..i], line[i..].trim_ascii()),
            None => (line, &b""[..]),
        };
        if interp.is_empty() {
            return Err(bad("the #! line names no interpreter".into()));
        }
        let ip = self.view_path(&bytes_path(interp));
        let found = match self.view.resolve(&ip) {
            Some(f) if !f.is_dir => f,
            _ => {
                return Err(bad(format!(
                    "its interpreter {} is not in the view",
                    ip.display()
                )));
            }
        };
        let is_env = found.path.file_name() == Some(OsStr::new("env"));
        let loaded = self.exec(found, depth + 1)?;
        if !is_env {
            return Ok(loaded);
        }
        // `env [-S] [-opts] [VAR=value...] PROGRAM`: what env runs is needed too.
        let words: Vec<&[u8]> = arg
            .split(|b| b.is_ascii_whitespace())
            .flat_map(|w| match w.strip_prefix(b"-S") {
                Some(rest) => vec![rest],
                None => vec![w],
            })
            .filter(|w| !w.is_empty())
            .collect();
        let Some(program) = words
            .into_iter()
            .find(|w| !w.starts_with(b"-") && !w.contains(&b'='))
        else {
            return Ok(loaded);
        };
        let program = OsStr::from_bytes(program);
        let found = self.locate(program).map_err(|e| {
            bad(format!(
                "its #! line runs {} through env: {e}",
                program.to_string_lossy()
            ))
        })?;
        self.exec(found, depth + 1)
    }

    fn read_elf(&self, f: &Found) -> Result<ElfInfo, Error> {
        elf::read(&f.real).map_err(|e| Error::BadElf {
            path: f.path.clone(),
            reason: e.to_string(),
        })
    }

    fn file_id(f: &Found) -> (u64, u64) {
        std::fs::metadata(&f.real)
            .map(|m| (m.dev(), m.ino()))
            .unwrap_or_default()
    }

    fn elf(&mut self, main: Found) -> Result<Vec<Loaded>, Error> {
        let info = self.read_elf(&main)?;
        let mut objs = vec![Obj {
            file_id: Self::file_id(&main),
            opened: main.path.as_os_str().as_bytes().to_vec(),
            names: info.soname.iter().cloned().collect(),
            found: main,
            info,
            loader: None,
        }];
        if let Some(interp) = objs[0].info.interp.clone() {
            let ip = self.view_path(&bytes_path(&interp));
            let found = match self.view.resolve(&ip) {
                Some(f) if !f.is_dir => f,
                _ => {
                    return Err(Error::BadElf {
                        path: objs[0].found.path.clone(),
                        reason: format!(
                            "its program interpreter {} is not in the view",
                            lossy(&interp)
                        ),
                    });
                }
            };
            self.emit(&found);
            let info = self.read_elf(&found)?;
            let mut names = vec![interp.clone()];
            names.extend(info.soname.iter().cloned());
            objs.push(Obj {
                file_id: Self::file_id(&found),
                opened: interp,
                names,
                found,
                info,
                loader: None,
            });
        }
        let (class64, machine) = (objs[0].info.class64, objs[0].info.machine);
        let mut queue = vec![0usize];
        let mut qi = 0;
        while qi < queue.len() {
            let req = queue[qi];
            qi += 1;
            for name in objs[req].info.needed.clone() {
                if objs
                    .iter()
                    .any(|o| o.opened == name || o.names.contains(&name))
                {
                    continue;
                }
                let Some((found, info, opened)) =
                    self.search(&name, req, &objs, class64, machine)?
                else {
                    self.missing.push(Missing {
                        needed_by: objs[req].found.path.clone(),
                        name: lossy(&name),
                    });
                    continue;
                };
                let id = Self::file_id(&found);
                if let Some(o) = objs.iter_mut().find(|o| o.file_id == id) {
                    o.names.push(name);
                    continue;
                }
                self.emit(&found);
                let mut names = vec![name];
                names.extend(info.soname.iter().cloned());
                objs.push(Obj {
                    found,
                    info,
                    opened,
                    names,
                    loader: Some(req),
                    file_id: id,
                });
                queue.push(objs.len() - 1);
            }
        }
        Ok(objs
            .into_iter()
            .map(|o| Loaded {
                name: o.names.first().cloned().unwrap_or_else(|| o.opened.clone()),
                opened: bytes_path(&o.opened),
                in_layer: o.found.in_layer,
                path: o.found.path,
            })
            .collect())
    }

    /// Expands `$ORIGIN`, `$LIB` and `$PLATFORM` (also in `${...}` form).
    fn expand(&self, s: &[u8], origin: &Path) -> Vec<u8> {
        let mut out = Vec::with_capacity(s.len());
        let mut i = 0;
        while i < s.len() {
            if s[i] == b'$' {
                let rest = &s[i + 1..];
                let mut hit = None;
                for (var, val) in [
                    (&b"ORIGIN"[..], origin.as_os_str().as_bytes()),
                    (b"LIB", self.platform.lib.as_bytes()),
                    (b"PLATFORM", self.platform.platform.as_bytes()),
                ] {
                    let braced = [&b"{"[..], var, b"}"].concat();
                    if rest.starts_with(&braced) {
                        hit = Some((braced.len(), val));
                    } else if rest.starts_with(var)
                        && !rest
                            .get(var.len())
                            .is_some_and(|c| c.is_ascii_alphanumeric() || *c == b'_')
                    {
                        hit = Some((var.len(), val));
                    }
                    if hit.is_some() {
                        break;
                    }
                }
                if let Some((len, val)) = hit {
                    out.extend_from_slice(val);
                    i += 1 + len;
                    continue;
                }
            }
            out.push(s[i]);
            i += 1;
        }
        out
    }

    fn split_dirs(&self, list: &[u8], origin: &Path) -> Vec<PathBuf> {
        list.split(|&b| b == b':')
            .filter(|d| !d.is_empty())
            .map(|d| self.view_path(&bytes_path(&self.expand(d, origin))))
            .collect()
    }

    /// Opens a candidate as the loader would: `Ok(None)` to go on searching.
    fn candidate(
        &self,
        p: &Path,
        needed_by: &Found,
        class64: bool,
        machine: u16,
    ) -> Result<Option<(Found, ElfInfo)>, Error> {
        let Some(f) = self.view.resolve(p) else {
            return Ok(None);
        };
        if f.is_dir {
            return Ok(None);
        }
        match elf::read(&f.real) {
            Ok(info) if info.class64 == class64 && info.machine == machine => Ok(Some((f, info))),
            Ok(_) | Err(ElfError::Io(_)) => Ok(None),
            Err(e) => Err(Error::BadElf {
                path: f.path,
                reason: format!(
                    "{e} (found at {} for {})",
                    p.display(),
                    needed_by.path.display()
                ),
            }),
        }
    }

    fn search(
        &mut self,
        name: &[u8],
        req: usize,
        objs: &[Obj],
        class64: bool,
        machine: u16,
    ) -> Result<Option<(Found, ElfInfo, Vec<u8>)>, Error> {
        let needed_by = &objs[req].found;
        let with_opened = |r: Option<(Found, ElfInfo)>, p: &Path| {
            r.map(|(f, i)| (f, i, p.as_os_str().as_bytes().to_vec()))
        };
        if name.contains(&b'/') {
            let p = self.view_path(&bytes_path(&self.expand(name, objs[req].origin())));
            let r = self.candidate(&p, needed_by, class64, machine)?;
            return Ok(with_opened(r, &p));
        }
        let mut dirs = Vec::new();
        if objs[req].info.runpath.is_none() {
            let mut at = Some(req);
            while let Some(i) = at {
                if let Some(rp) = &objs[i].info.rpath {
                    dirs.extend(self.split_dirs(rp, objs[i].origin()));
                }
                at = objs[i].loader;
            }
        }
        if let Some(llp) = &self.env.ld_library_path {
            dirs.extend(self.split_dirs(llp.as_bytes(), objs[0].origin()));
        }
        if let Some(rp) = &objs[req].info.runpath {
            dirs.extend(self.split_dirs(rp, objs[req].origin()));
        }
        let subdirs: Vec<String> = self.platform.subdirs().collect();
        let nm = OsStr::from_bytes(name);
        let try_dirs = |this: &Self, dirs: &[PathBuf]| -> Result<_, Error> {
            for d in dirs {
                for s in &subdirs {
                    let p = d.join(s).join(nm);
                    if let Some(r) = this.candidate(&p, needed_by, class64, machine)? {
                        return Ok(with_opened(Some(r), &p));
                    }
                }
            }
            Ok(None)
        };
        if let Some(r) = try_dirs(self, &dirs)? {
            return Ok(Some(r));
        }
        if objs[req].info.nodeflib {
            return Ok(None);
        }
        if let Some(p) = self.cache_lookup(name) {
            let p = bytes_path(&p);
            if let Some(r) = self.candidate(&p, needed_by, class64, machine)? {
                return Ok(with_opened(Some(r), &p));
            }
        }
        let system = self.platform.system_dirs.clone();
        try_dirs(self, &system)
    }

    /// Looks `name` up in the view's `/etc/ld.so.cache`, reading it on first use (the
    /// loader reads it then too: a layer's cache is urgent).
    fn cache_lookup(&mut self, name: &[u8]) -> Option<Vec<u8>> {
        if self.cache.is_none() {
            let loaded = self.view.resolve(Path::new("/etc/ld.so.cache")).and_then(|f| {
                self.emit(&f);
                match std::fs::read(&f.real)
                    .map_err(|e| e.to_string())
                    .and_then(|b| LdCache::parse(&b).map_err(|e| e.0))
                {
                    Ok(c) => Some(c),
                    Err(e) => {
                        tracing::warn!(cache = %f.path.display(), "ignoring the loader cache: {e}");
                        None
                    }
                }
            });
            self.cache = Some(loaded);
        }
        let cache = self.cache.as_ref()?.as_ref()?;
        cache
            .lookup(name, self.platform.cache_flags, &self.platform.hwcaps)
            .map(<[u8]>::to_vec)
    }
}

/// Parses an urgent list file as `teesfs record` writes it: one layer path per line, in
/// the order needed; blank lines and lines starting with `#` are skipped, and so are lines
/// starting with `!` (names that were looked up and do not exist).
pub fn parse_urgent_list(text: &[u8]) -> Vec<PathBuf> {
    text.split(|&b| b == b'\n')
        .map(|l| l.strip_suffix(b"\r").unwrap_or(l))
        .filter(|l| !l.trim_ascii().is_empty() && !l.starts_with(b"#") && !l.starts_with(b"!"))
        .map(|l| PathBuf::from(OsString::from_vec(l.to_vec())))
        .collect()
}

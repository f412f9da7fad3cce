//! The layout of the environment's root, decided as pure data: from what the host and the
//! layer hold (gathered beforehand by `runenv`), which directories to create and what to
//! mount where, in order ([`Op`]).
//!
//! This is where every rule of the layout lives: a directory of "/" becomes an overlay of
//! the layer's directory (if any) and the host's; a mount point or a bound directory stays
//! the host's; a directory with mount points below it is split into its entries; the
//! layer's directories that "/" lacks are overlays of the layer alone; a non-directory in
//! the layer hides the host's entry; top-level symlinks are copied and files bound.
//!
//! It must not look at the system: no file system access, no mounts, no environment. It
//! only sees what it is given, so the tests can describe any host.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};

use super::ALWAYS_BIND;

/// Who builds the environment, which decides two details of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Privilege {
    /// An unprivileged user in a new user namespace (`teesfs run`): overlays keep their
    /// metadata in `user.` extended attributes, and the namespace's init mounts a new /proc.
    User,
    /// Root on the node (a Slurm task, through the SPANK plugin): overlays use the usual
    /// `trusted.` attributes, and /proc is the host's, as for any task.
    Root,
}

/// What a name in a directory is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    /// A directory with these permission bits (`mode & 0o7777`).
    Dir {
        /// The permission bits the environment's copy gets.
        mode: u32,
    },
    /// A symbolic link (copied as it is).
    Symlink {
        /// What it points to.
        to: PathBuf,
    },
    /// A regular file (bound).
    File,
    /// Anything else (socket, fifo, device node): left out.
    Other,
}

/// The entries of the directories of one tree that the planner looks into, by directory
/// path relative to the tree's top ("" is the top itself).
pub type Listing = BTreeMap<PathBuf, BTreeMap<OsString, Kind>>;

/// What the host and the layer hold, as far as the layout depends on it.
#[derive(Debug, Clone, Default)]
pub struct Facts {
    /// "/" and every directory of it that [`dirs_to_list`] names (that exists).
    pub host: Listing,
    /// The layer: where it is, and its directories at the same relative paths.
    pub layer: Option<(PathBuf, Listing)>,
    /// Every mount point of the host's mount namespace, relative to "/" ("/" left out).
    pub mount_points: Vec<PathBuf>,
}

/// Where the environment is built: a staging directory (which gets a tmpfs) holding the
/// new root, and the bases of the overlays' upper and work directories.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Places {
    /// The staging directory.
    pub staging: PathBuf,
    /// Each overlay's upper directory is this joined with its path.
    pub upper: PathBuf,
    /// Each overlay's work directory is this joined with its path.
    pub work: PathBuf,
}

impl Places {
    /// Upper and work directories on the staging tmpfs: writes vanish with the environment.
    pub fn on_tmpfs(staging: &Path) -> Self {
        Places {
            staging: staging.to_path_buf(),
            upper: staging.join("upper"),
            work: staging.join("work"),
        }
    }

    /// Writes go to the persistent directory `upper` (already made absolute and without
    /// symlinks), with the work directory beside it ([`work_dir_for`]).
    pub fn persistent(staging: &Path, upper: &Path) -> Result<Self, crate::Error> {
        Ok(Places {
            staging: staging.to_path_buf(),
            upper: upper.to_path_buf(),
            work: work_dir_for(upper)?,
        })
    }

    /// Where the new root is laid out.
    pub fn root(&self) -> PathBuf {
        self.staging.join("root")
    }
}

/// One step of building the environment, carried out in order by `runenv::apply`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// Mount a tmpfs (`nosuid,nodev`, mode 0755) on `target`.
    Tmpfs {
        /// Where.
        target: PathBuf,
    },
    /// Create `path` and its missing parents, then (best effort) give it `mode`.
    Mkdir {
        /// The directory.
        path: PathBuf,
        /// The host directory's permission bits, when it mirrors one.
        mode: Option<u32>,
    },
    /// Create the upper directory `path` and its missing parents, noting it if it did not
    /// exist: a persistent upper left empty is removed again after the run.
    MkUpper {
        /// The directory.
        path: PathBuf,
    },
    /// Create an empty file at `path` (for a file to be bound onto).
    File {
        /// The file.
        path: PathBuf,
    },
    /// Create a symbolic link at `path` pointing to `to`.
    Symlink {
        /// The link.
        path: PathBuf,
        /// Its content.
        to: PathBuf,
    },
    /// Bind `source` onto `target` (with the mounts below it when `recursive`).
    Bind {
        /// What is shown.
        source: PathBuf,
        /// Where.
        target: PathBuf,
        /// Whether mounts below `source` come along (`MS_REC`).
        recursive: bool,
    },
    /// Mount an overlay (`nosuid,nodev`) on `target`; its options are [`overlay_options`].
    Overlay {
        /// Where.
        target: PathBuf,
        /// The lower directories, topmost first.
        lowers: Vec<PathBuf>,
        /// Where writes go.
        upper: PathBuf,
        /// The overlay's work directory (same file system as `upper`).
        work: PathBuf,
        /// Whether the overlay keeps its metadata in `user.` extended attributes (the only
        /// ones an unprivileged user namespace may write).
        userxattr: bool,
    },
}

/// The layout of the new root.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    /// What to do, in order.
    pub ops: Vec<Op>,
    /// Layer directories hidden by a directory bound from the host: anything in them is
    /// invisible in the environment, worth a warning when they are not empty.
    pub shadowed: Vec<PathBuf>,
}

/// The paths (relative to "/") bound from the host as they are: [`ALWAYS_BIND`] and the
/// absolute paths of `extra` (the user's `--bind`; relative ones mean nothing here).
pub fn bound_paths(extra: &[PathBuf]) -> Vec<PathBuf> {
    let mut bound: Vec<PathBuf> = ALWAYS_BIND.iter().map(PathBuf::from).collect();
    bound.extend(
        extra
            .iter()
            .filter_map(|p| p.strip_prefix("/").ok().map(Path::to_path_buf)),
    );
    bound
}

/// The directories (relative, "" for "/") whose entries [`plan`] may need, parents first:
/// "/" and every directory above a mount point that is not itself bound or below a bound
/// one. The host's and the layer's are listed at these paths.
pub fn dirs_to_list(mount_points: &[PathBuf], bound: &[PathBuf]) -> Vec<PathBuf> {
    let is_bound = |p: &Path| bound.iter().any(|b| b == p) || mount_points.iter().any(|m| m == p);
    let mut dirs = BTreeSet::from([PathBuf::new()]);
    for m in mount_points {
        // Ancestors from the top down; the walk stops at the first bound one, as the
        // planner never looks inside a bound directory.
        let ancestors: Vec<&Path> = m.ancestors().skip(1).collect();
        for a in ancestors.into_iter().rev() {
            if a.as_os_str().is_empty() {
                continue;
            }
            if is_bound(a) {
                break;
            }
            dirs.insert(a.to_path_buf());
        }
    }
    // Path ordering compares components, so a parent sorts before its children.
    dirs.into_iter().collect()
}

/// The steps that prepare `places` before the host's mount points are read (those steps
/// add mount points of their own, which the layout must see): a tmpfs on the staging
/// directory, the root, upper and work bases, and the root bound onto itself (pivot_root
/// wants the new root to be a mount point).
pub fn prepare(places: &Places) -> Vec<Op> {
    let root = places.root();
    vec![
        Op::Tmpfs {
            target: places.staging.clone(),
        },
        Op::Mkdir {
            path: root.clone(),
            mode: None,
        },
        Op::Mkdir {
            path: places.upper.clone(),
            mode: None,
        },
        Op::Mkdir {
            path: places.work.clone(),
            mode: None,
        },
        Op::Bind {
            source: root.clone(),
            target: root,
            recursive: false,
        },
    ]
}

/// Lays out the new root under `places.root()`: every entry of "/" and of the layer,
/// placed in name order. `bound` comes from [`bound_paths`].
pub fn plan(places: &Places, facts: &Facts, bound: &[PathBuf], privilege: Privilege) -> Plan {
    let mut planner = Planner {
        places,
        facts,
        bound,
        privilege,
        plan: Plan::default(),
    };
    planner.place_children(Path::new(""));
    planner.plan
}

/// The mount options of an overlay. Paths are escaped the way overlayfs reads them: `:`
/// separates lower directories and `,` options, so both (and `\` itself) get a `\`.
pub fn overlay_options(lowers: &[PathBuf], upper: &Path, work: &Path, userxattr: bool) -> String {
    let esc = |p: &Path| {
        p.to_string_lossy()
            .replace('\\', "\\\\")
            .replace(':', "\\:")
            .replace(',', "\\,")
    };
    let lower = lowers.iter().map(|p| esc(p)).collect::<Vec<_>>().join(":");
    let mut data = format!(
        "lowerdir={lower},upperdir={},workdir={}",
        esc(upper),
        esc(work)
    );
    if userxattr {
        data.push_str(",userxattr");
    }
    data
}

/// The overlay work directory for a persistent upper `dir`: a hidden sibling on the same
/// file system (overlayfs requires that), never inside the layer itself.
pub fn work_dir_for(dir: &Path) -> Result<PathBuf, crate::Error> {
    let parent = dir.parent().ok_or_else(|| {
        crate::Error::InvalidRun(format!("{} cannot be an upper directory", dir.display()))
    })?;
    let name = dir
        .file_name()
        .ok_or_else(|| crate::Error::InvalidRun(format!("{} has no name", dir.display())))?;
    let mut w = OsString::from(".");
    w.push(name);
    w.push(".teesfs-work");
    Ok(parent.join(w))
}

struct Planner<'a> {
    places: &'a Places,
    facts: &'a Facts,
    bound: &'a [PathBuf],
    privilege: Privilege,
    plan: Plan,
}

/// What `listing` says `rel` is, if its directory was listed and has it.
fn kind_in<'l>(listing: &'l Listing, rel: &Path) -> Option<&'l Kind> {
    let name = rel.file_name()?;
    listing.get(rel.parent()?)?.get(name)
}

impl Planner<'_> {
    /// Places every entry of the host's and the layer's directory `rel`.
    fn place_children(&mut self, rel: &Path) {
        let mut names: BTreeSet<&OsStr> = BTreeSet::new();
        if let Some(entries) = self.facts.host.get(rel) {
            names.extend(entries.keys().map(OsString::as_os_str));
        }
        if let Some((_, listing)) = &self.facts.layer
            && let Some(entries) = listing.get(rel)
        {
            names.extend(entries.keys().map(OsString::as_os_str));
        }
        for n in names {
            self.place(&rel.join(n));
        }
    }

    /// Places `rel`: a bind of the host's, an overlay, a copied symlink, a bound file, or
    /// (when mounts lie below it) a directory whose entries are placed one by one.
    fn place(&mut self, rel: &Path) {
        let host = Path::new("/").join(rel);
        let target = self.places.root().join(rel);
        let layer = self
            .facts
            .layer
            .as_ref()
            .and_then(|(top, listing)| Some((top.join(rel), kind_in(listing, rel)?)));
        let layer_dir = match &layer {
            // A non-directory in the layer hides whatever "/" has under that name.
            Some((path, kind)) if !matches!(kind, Kind::Dir { .. }) => {
                return self.entry(path, kind, &target);
            }
            Some((path, _)) => Some(path.clone()),
            None => None,
        };
        let host_mode = match kind_in(&self.facts.host, rel) {
            Some(Kind::Dir { mode }) => *mode,
            Some(kind) => {
                return match layer_dir {
                    Some(l) => self.overlay(vec![l], rel, target, false),
                    None => self.entry(&host, kind, &target),
                };
            }
            None => {
                if let Some(l) = layer_dir {
                    self.overlay(vec![l], rel, target, false);
                }
                return;
            }
        };
        self.push(Op::Mkdir {
            path: target.clone(),
            mode: Some(host_mode),
        });
        if rel == Path::new("proc") && self.privilege == Privilege::User {
            return; // the init mounts a proc of the new PID namespace here
        }
        let mount_points = &self.facts.mount_points;
        if self.bound.iter().any(|b| b == rel) || mount_points.iter().any(|m| m == rel) {
            if let Some(l) = layer_dir {
                self.plan.shadowed.push(l);
            }
            return self.push(Op::Bind {
                source: host,
                target,
                recursive: true,
            });
        }
        if mount_points.iter().any(|m| m.starts_with(rel)) {
            // The kernel will not take a directory with mounts below it as a lower layer
            // (that would uncover what they hide): split it.
            return self.place_children(rel);
        }
        let mut lowers = Vec::from_iter(layer_dir);
        lowers.push(host);
        self.overlay(lowers, rel, target, true);
    }

    /// An overlay of `lowers` (topmost first) on `target`, with its own upper and work
    /// directories; `target` is created first unless `target_made`.
    fn overlay(&mut self, lowers: Vec<PathBuf>, rel: &Path, target: PathBuf, target_made: bool) {
        let upper = self.places.upper.join(rel);
        let work = self.places.work.join(rel);
        self.push(Op::MkUpper {
            path: upper.clone(),
        });
        self.push(Op::Mkdir {
            path: work.clone(),
            mode: None,
        });
        if !target_made {
            self.push(Op::Mkdir {
                path: target.clone(),
                mode: None,
            });
        }
        self.push(Op::Overlay {
            target,
            lowers,
            upper,
            work,
            userxattr: self.privilege == Privilege::User,
        });
    }

    /// A symlink (copied) or a file (bound) from `src` at `target`; other kinds are left out.
    fn entry(&mut self, src: &Path, kind: &Kind, target: &Path) {
        match kind {
            Kind::Symlink { to } => self.push(Op::Symlink {
                path: target.to_path_buf(),
                to: to.clone(),
            }),
            Kind::File => {
                self.push(Op::File {
                    path: target.to_path_buf(),
                });
                self.push(Op::Bind {
                    source: src.to_path_buf(),
                    target: target.to_path_buf(),
                    recursive: false,
                });
            }
            Kind::Dir { .. } | Kind::Other => {}
        }
    }

    fn push(&mut self, op: Op) {
        self.plan.ops.push(op);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> PathBuf {
        PathBuf::from(s)
    }

    fn dir(mode: u32) -> Kind {
        Kind::Dir { mode }
    }

    fn symlink(to: &str) -> Kind {
        Kind::Symlink { to: p(to) }
    }

    fn entries(list: &[(&str, Kind)]) -> BTreeMap<OsString, Kind> {
        list.iter()
            .map(|(n, k)| (OsString::from(n), k.clone()))
            .collect()
    }

    const LAYER: &str = "/jobs/7/root";

    /// A host with /usr, /etc, /home (a mount point), /mnt holding the mount /mnt/data,
    /// /lib -> usr/lib, a top-level file, /proc and /tmp; a layer adding /opt and (under
    /// its usr) /usr/local.
    fn facts() -> Facts {
        let host = Listing::from([
            (
                p(""),
                entries(&[
                    ("usr", dir(0o755)),
                    ("etc", dir(0o755)),
                    ("home", dir(0o755)),
                    ("mnt", dir(0o755)),
                    ("lib", symlink("usr/lib")),
                    ("initrd.img", Kind::File),
                    ("proc", dir(0o555)),
                    ("tmp", dir(0o1777)),
                ]),
            ),
            (
                p("mnt"),
                entries(&[("data", dir(0o750)), ("cdrom", dir(0o755))]),
            ),
        ]);
        let layer = Listing::from([
            (p(""), entries(&[("opt", dir(0o755)), ("usr", dir(0o755))])),
            (p("mnt"), entries(&[])),
        ]);
        Facts {
            host,
            layer: Some((p(LAYER), layer)),
            mount_points: ["home", "mnt/data", "proc", "tmp"].map(p).to_vec(),
        }
    }

    fn places() -> Places {
        Places::on_tmpfs(Path::new("/st"))
    }

    fn mkdir(path: &str, mode: Option<u32>) -> Op {
        Op::Mkdir {
            path: p(path),
            mode,
        }
    }

    fn bind(source: &str, target: &str, recursive: bool) -> Op {
        Op::Bind {
            source: p(source),
            target: p(target),
            recursive,
        }
    }

    /// The ops of an overlay of `lowers` on /<rel>, upper and work on the staging tmpfs.
    fn overlay(rel: &str, lowers: &[&str], userxattr: bool) -> Op {
        Op::Overlay {
            target: p("/st/root").join(rel),
            lowers: lowers.iter().map(|l| p(l)).collect(),
            upper: p("/st/upper").join(rel),
            work: p("/st/work").join(rel),
            userxattr,
        }
    }

    /// A host directory overlaid: mirrored with its mode, then upper, work, overlay.
    fn host_overlay(rel: &str, mode: u32, lowers: &[&str], userxattr: bool) -> Vec<Op> {
        vec![
            mkdir(&format!("/st/root/{rel}"), Some(mode)),
            Op::MkUpper {
                path: p("/st/upper").join(rel),
            },
            mkdir(&format!("/st/work/{rel}"), None),
            overlay(rel, lowers, userxattr),
        ]
    }

    fn expected(privilege: Privilege) -> Vec<Op> {
        let ux = privilege == Privilege::User;
        let mut ops = Vec::new();
        ops.extend(host_overlay("etc", 0o755, &["/etc"], ux));
        ops.extend([
            mkdir("/st/root/home", Some(0o755)),
            bind("/home", "/st/root/home", true),
            Op::File {
                path: p("/st/root/initrd.img"),
            },
            bind("/initrd.img", "/st/root/initrd.img", false),
            Op::Symlink {
                path: p("/st/root/lib"),
                to: p("usr/lib"),
            },
            // /mnt is split: its mount point bound, its other directories overlaid.
            mkdir("/st/root/mnt", Some(0o755)),
        ]);
        ops.extend(host_overlay("mnt/cdrom", 0o755, &["/mnt/cdrom"], ux));
        ops.extend([
            mkdir("/st/root/mnt/data", Some(0o750)),
            bind("/mnt/data", "/st/root/mnt/data", true),
            // /opt only in the layer.
            Op::MkUpper {
                path: p("/st/upper/opt"),
            },
            mkdir("/st/work/opt", None),
            mkdir("/st/root/opt", None),
            overlay("opt", &["/jobs/7/root/opt"], ux),
            mkdir("/st/root/proc", Some(0o555)),
        ]);
        if privilege == Privilege::Root {
            ops.push(bind("/proc", "/st/root/proc", true));
        }
        ops.extend([
            mkdir("/st/root/tmp", Some(0o1777)),
            bind("/tmp", "/st/root/tmp", true),
        ]);
        ops.extend(host_overlay(
            "usr",
            0o755,
            &["/jobs/7/root/usr", "/usr"],
            ux,
        ));
        ops
    }

    #[test]
    fn unprivileged_plan_overlays_binds_splits_and_leaves_proc_to_the_init() {
        let plan = plan(&places(), &facts(), &bound_paths(&[]), Privilege::User);
        assert_eq!(plan.ops, expected(Privilege::User));
        assert!(plan.shadowed.is_empty());
    }

    #[test]
    fn root_plan_binds_the_hosts_proc_and_uses_trusted_xattrs() {
        let plan = plan(&places(), &facts(), &bound_paths(&[]), Privilege::Root);
        assert_eq!(plan.ops, expected(Privilege::Root));
        assert!(plan.ops.iter().all(|op| !matches!(
            op,
            Op::Overlay {
                userxattr: true,
                ..
            }
        )));
    }

    #[test]
    fn a_bound_directory_stays_the_hosts_and_the_layers_is_reported_hidden() {
        let bound = bound_paths(&[p("/usr"), p("relative/ignored")]);
        let plan = plan(&places(), &facts(), &bound, Privilege::User);
        let usr: Vec<&Op> = plan
            .ops
            .iter()
            .filter(|op| match op {
                Op::Mkdir { path, .. } | Op::MkUpper { path } => path.ends_with("usr"),
                Op::Bind { target, .. } | Op::Overlay { target, .. } => target.ends_with("usr"),
                _ => false,
            })
            .collect();
        assert_eq!(
            usr,
            [
                &mkdir("/st/root/usr", Some(0o755)),
                &bind("/usr", "/st/root/usr", true)
            ]
        );
        assert_eq!(plan.shadowed, [p("/jobs/7/root/usr")]);
    }

    #[test]
    fn a_non_directory_in_the_layer_hides_the_hosts_entry() {
        let mut facts = facts();
        let (_, layer) = facts.layer.as_mut().expect("the fixture has a layer");
        let top = layer.get_mut(Path::new("")).expect("listed");
        top.insert("etc".into(), symlink("/opt/etc"));
        top.insert("home".into(), Kind::File);
        top.insert("lib".into(), dir(0o755));
        let ops = plan(&places(), &facts, &bound_paths(&[]), Privilege::User).ops;
        let touching = |name: &str| -> Vec<Op> {
            ops.iter()
                .filter(|op| match op {
                    Op::Mkdir { path, .. }
                    | Op::MkUpper { path }
                    | Op::File { path }
                    | Op::Symlink { path, .. } => path.ends_with(name),
                    Op::Bind { target, .. } | Op::Overlay { target, .. } => target.ends_with(name),
                    Op::Tmpfs { .. } => false,
                })
                .cloned()
                .collect()
        };
        assert_eq!(
            touching("etc"),
            [Op::Symlink {
                path: p("/st/root/etc"),
                to: p("/opt/etc"),
            }]
        );
        assert_eq!(
            touching("home"),
            [
                Op::File {
                    path: p("/st/root/home")
                },
                bind("/jobs/7/root/home", "/st/root/home", false)
            ]
        );
        // The host's /lib is a symlink; the layer's directory replaces it.
        assert_eq!(
            touching("lib"),
            [
                Op::MkUpper {
                    path: p("/st/upper/lib")
                },
                mkdir("/st/work/lib", None),
                mkdir("/st/root/lib", None),
                overlay("lib", &["/jobs/7/root/lib"], true),
            ]
        );
    }

    #[test]
    fn a_split_directory_gets_the_layers_entries_too() {
        let mut facts = facts();
        let (_, layer) = facts.layer.as_mut().expect("the fixture has a layer");
        layer.insert(p("mnt"), entries(&[("extra", dir(0o700))]));
        layer
            .get_mut(Path::new(""))
            .expect("listed")
            .insert("mnt".into(), dir(0o755));
        let ops = plan(&places(), &facts, &bound_paths(&[]), Privilege::User).ops;
        assert!(ops.contains(&overlay("mnt/extra", &["/jobs/7/root/mnt/extra"], true)));
        // Still split, not overlaid as a whole (that would uncover what /mnt/data hides).
        assert!(!ops.contains(&overlay("mnt", &["/jobs/7/root/mnt", "/mnt"], true)));
        assert!(ops.contains(&bind("/mnt/data", "/st/root/mnt/data", true)));
    }

    #[test]
    fn without_a_layer_every_host_directory_is_its_own_lower() {
        let mut facts = facts();
        facts.layer = None;
        let ops = plan(&places(), &facts, &bound_paths(&[]), Privilege::User).ops;
        assert!(ops.contains(&overlay("usr", &["/usr"], true)));
        assert!(
            !ops.iter()
                .any(|op| matches!(op, Op::Overlay { target, .. } if target.ends_with("opt")))
        );
    }

    #[test]
    fn persistent_upper_puts_uppers_and_work_beside_the_users_directory() {
        let places =
            Places::persistent(Path::new("/st"), Path::new("/home/u/layer")).expect("has a parent");
        let ops = plan(&places, &facts(), &bound_paths(&[]), Privilege::User).ops;
        assert!(ops.contains(&Op::Overlay {
            target: p("/st/root/etc"),
            lowers: vec![p("/etc")],
            upper: p("/home/u/layer/etc"),
            work: p("/home/u/.layer.teesfs-work/etc"),
            userxattr: true,
        }));
        assert!(ops.contains(&Op::MkUpper {
            path: p("/home/u/layer/etc")
        }));
    }

    #[test]
    fn preparation_mounts_the_staging_tmpfs_and_makes_the_root_a_mount_point() {
        assert_eq!(
            prepare(&places()),
            [
                Op::Tmpfs { target: p("/st") },
                mkdir("/st/root", None),
                mkdir("/st/upper", None),
                mkdir("/st/work", None),
                bind("/st/root", "/st/root", false),
            ]
        );
    }

    #[test]
    fn only_directories_above_unbound_mount_points_are_listed() {
        let mount_points = [
            "home",
            "mnt/data",
            "proc",
            "sys/fs/cgroup",
            "tmp/teesfs-run.x",
            "var/lib/teesfs/mnt/j1",
            "var/lib/teesfs/mnt/j2",
        ]
        .map(p);
        assert_eq!(
            dirs_to_list(&mount_points, &bound_paths(&[])),
            [
                "",
                "mnt",
                "var",
                "var/lib",
                "var/lib/teesfs",
                "var/lib/teesfs/mnt"
            ]
            .map(p)
        );
        assert_eq!(
            dirs_to_list(&mount_points, &bound_paths(&[p("/var/lib")])),
            ["", "mnt", "var"].map(p)
        );
    }

    #[test]
    fn overlay_options_escape_separators() {
        assert_eq!(
            overlay_options(
                &[p("/l:a"), p("/h,b")],
                Path::new("/u\\c"),
                Path::new("/w"),
                true
            ),
            "lowerdir=/l\\:a:/h\\,b,upperdir=/u\\\\c,workdir=/w,userxattr"
        );
        assert_eq!(
            overlay_options(&[p("/usr")], Path::new("/u"), Path::new("/w"), false),
            "lowerdir=/usr,upperdir=/u,workdir=/w"
        );
    }

    #[test]
    fn work_dir_is_a_hidden_sibling() {
        assert_eq!(
            work_dir_for(Path::new("/home/u/layer")).expect("has a parent"),
            Path::new("/home/u/.layer.teesfs-work")
        );
        assert!(work_dir_for(Path::new("/")).is_err());
    }
}

//! `teesfs.toml`: the site configuration an admin writes once, read by `plan`, `push`,
//! `health`, `prefetch` and `daemon` (a flag overrides it for one run).
//!
//! ```toml
//! [store]
//! path = "/shared/teesfs"          # the login node's store: the default --store of publish,
//!                                  # push, prefetch, verify, inspect, gc, mount, record
//!                                  # and health --rates
//! shared = "/shared/teesfs"        # the store as nodes see it, if they can read it:
//!                                  # enables shared-storage mode (`auto` at or below
//!                                  # `threshold` nodes). Without it `auto` plans the tree.
//! origin = "/lustre/teesfs/store"  # the store as nodes see it, read by their daemons for a
//!                                  # chunk no node of the tree can give (a lost chunk once
//!                                  # the push ended), as CVMFS falls back to its server;
//!                                  # default: `shared`. The daemon's --origin.
//!
//! [root]
//! host = "login1"                  # the login node's name: the root of every tree
//!
//! [topology]
//! file = "/etc/teesfs/topology.toml"   # or:
//! cluster = "cn[00001-17560]"      # every node of the cluster, cut into groups of
//! group_size = 8                   # this many; the first of each is its proxy
//! links = "node=100gbit,port=800gbit,uplink=800gbit,login=800gbit"
//!                                  # optional link rates: fan-outs that keep every
//!                                  # stream at a node's rate (members relay to members
//!                                  # where a port carries less than its group)
//!
//! [tree]
//! strategy = "auto"                # topo, topo-paper, random, hostlist, flat, storage, auto
//! width = 15
//! threshold = 512
//! login_copies = 1                 # at most this many hosts fed by the login node: copies
//!                                  # of the payload that leave it (default with link
//!                                  # rates: 1)
//!
//! [push]
//! timeout = "30m"                  # how long push and prefetch wait for the nodes before
//!                                  # giving up (the Slurm prolog waits that long at most)
//!
//! [network]
//! identity = "/etc/teesfs/cluster" # ca.crt, <host>.crt, <host>.key
//! hosts = "/etc/teesfs/hosts"      # optional `host address[:port]` map
//! port = 7411
//! trust = ["/etc/teesfs/trusted/site.pub"]
//!
//! [seeder]                         # the service that roots every job's tree (`teesfs seeder`)
//! host = "login1"                  # where the Slurm prolog hands jobs ("host" or
//!                                  # "host:port"); unset, the controller pushes itself
//! listen = "0.0.0.0:7412"          # where `teesfs seeder` listens
//! allow = ["slurm"]                # users (names or uids) whose munge credentials it takes
//! logdir = "/var/log/teesfs"       # its job-<id>.log/.json/.html
//! munge_socket = "/run/munge/munge.socket.2"
//!
//! [reports]                        # the Slurm prolog's job-<id>.log/.json/.html files
//! keep = 1000                      # of the newest 1000 jobs at most
//! max_age = "30d"                  # and none older than 30 days
//!
//! [run]                            # images (`teesfs run --image`, `--teesfs-image`)
//! image_binds = ["/scratch", "/lustre"]   # host paths bound into every image (see [`run`])
//! ```
//!
//! The configuration is `/etc/teesfs/teesfs.toml`, then every `teesfs.d/*.toml` beside it
//! in name order, then `teesfs.toml.local`; a key set in a later file replaces the earlier
//! value ([`SiteConfig::overlay`]). A mistake is contained to the key it is in
//! ([`SiteConfig::from_toml_lenient`]): an unknown key is a warning naming the file, line
//! and key, and a bad value is left out and reported, so that only the commands that use
//! that key refuse to run (a login-side typo must not stop `release` on every node, nor a
//! key added by a newer release an older node). [`SiteConfig::from_toml`] refuses any
//! mistake (`teesfs config check`); `read` has the parse and its checks. Parsing only: the
//! caller reads the files and resolves what is missing.

use std::path::PathBuf;

use serde::Deserialize;

mod read;
pub mod run;
pub use read::{Problem, SiteProblem};
pub use run::RunSection;

/// The site configuration (every key optional).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SiteConfig {
    /// `[store]`.
    #[serde(default)]
    pub store: StoreSection,
    /// `[root]`.
    #[serde(default)]
    pub root: RootSection,
    /// `[topology]`.
    #[serde(default)]
    pub topology: TopologySection,
    /// `[tree]`.
    #[serde(default)]
    pub tree: TreeSection,
    /// `[network]`.
    #[serde(default)]
    pub network: NetworkSection,
    /// `[reports]`.
    #[serde(default)]
    pub reports: ReportsSection,
    /// `[push]`.
    #[serde(default)]
    pub push: PushSection,
    /// `[seeder]`.
    #[serde(default)]
    pub seeder: SeederSection,
    /// `[run]`.
    #[serde(default)]
    pub run: RunSection,
}

/// `[seeder]`: the service on a login or data-mover node that roots every job's tree, and
/// where the Slurm controller's prolog finds it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SeederSection {
    /// Where the prolog hands jobs: `host` or `host:port` (port 7412 by default). Unset, the
    /// prolog pushes from the controller itself.
    pub host: Option<String>,
    /// Where `teesfs seeder` listens (default `0.0.0.0:7412`).
    pub listen: Option<String>,
    /// The users, by name or uid, whose munge credentials the seeder accepts (default: the
    /// `slurm` user).
    pub allow: Option<Vec<String>>,
    /// Where the seeder keeps each job's log and reports (default `/var/log/teesfs`).
    pub logdir: Option<PathBuf>,
    /// munged's socket, for `munge` and `unmunge` (default: theirs).
    pub munge_socket: Option<PathBuf>,
}

impl SeederSection {
    /// The port the seeder listens on, and the prolog's default port.
    pub const PORT: u16 = 7412;

    /// `host` as `host:port`, with the default port when it names none.
    pub fn address(&self) -> Option<String> {
        self.host.as_deref().map(|h| with_port(h, Self::PORT))
    }

    /// `listen` as an address (a bad one was left out when the file was read).
    pub fn listen(&self) -> std::net::SocketAddr {
        self.listen
            .as_deref()
            .and_then(|l| l.parse().ok())
            .unwrap_or_else(|| std::net::SocketAddr::from(([0, 0, 0, 0], Self::PORT)))
    }

    /// The users allowed to hand jobs over.
    pub fn allow(&self) -> Vec<String> {
        self.allow.clone().unwrap_or_else(|| vec!["slurm".into()])
    }

    /// The directory of the per-job files.
    pub fn logdir(&self) -> PathBuf {
        self.logdir
            .clone()
            .unwrap_or_else(|| PathBuf::from("/var/log/teesfs"))
    }
}

/// `host` with `:port` added unless it ends in a port already (`[v6]:p` included).
fn with_port(host: &str, port: u16) -> String {
    let has_port = match host.rsplit_once(':') {
        Some((h, p)) => p.parse::<u16>().is_ok() && (!h.contains(':') || h.ends_with(']')),
        None => false,
    };
    if has_port {
        host.to_string()
    } else if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// `[push]`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PushSection {
    /// How long `push` and `prefetch` wait for the nodes before giving up, as a duration
    /// (`"30m"`, `"90s"`; checked when read).
    pub timeout: Option<String>,
}

impl PushSection {
    /// `timeout` as a duration (a bad one was left out when the file was read).
    pub fn timeout(&self) -> Option<std::time::Duration> {
        self.timeout
            .as_deref()
            .and_then(|t| humantime::parse_duration(t).ok())
    }
}

/// `[store]`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StoreSection {
    /// The login node's store.
    pub path: Option<PathBuf>,
    /// The store as the nodes see it, when they can read it (shared-storage mode).
    pub shared: Option<PathBuf>,
    /// The store as the nodes' daemons see it, read for a chunk no node gives
    /// ([`StoreSection::origin`]).
    pub origin: Option<PathBuf>,
}

impl StoreSection {
    /// Where a node's daemon reads a chunk no node of the tree can give: `origin`, else
    /// `shared` (a store the nodes can read is one they can fall back to).
    pub fn origin(&self) -> Option<&std::path::Path> {
        self.origin.as_deref().or(self.shared.as_deref())
    }
}

/// `[root]`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RootSection {
    /// The login node's host name (its certificate's).
    pub host: Option<String>,
}

/// `[topology]`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TopologySection {
    /// A topology.toml.
    pub file: Option<PathBuf>,
    /// Every node of the cluster, as a hostlist.
    pub cluster: Option<String>,
    /// Nodes per group of `cluster`.
    pub group_size: Option<usize>,
    /// Link rates, `node=RATE,port=RATE,uplink=RATE,login=RATE` (`--links`).
    pub links: Option<String>,
}

/// `[tree]`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TreeSection {
    /// Planning strategy.
    pub strategy: Option<String>,
    /// Most children per node.
    pub width: Option<usize>,
    /// `auto` uses shared storage at or below this many nodes.
    pub threshold: Option<usize>,
    /// Hosts the login node feeds in a tree: copies of the payload that leave it.
    pub login_copies: Option<usize>,
}

/// `[network]`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NetworkSection {
    /// Cluster credentials directory.
    pub identity: Option<PathBuf>,
    /// Host to address map file.
    pub hosts: Option<PathBuf>,
    /// The node daemons' port.
    pub port: Option<u16>,
    /// Trusted publisher keys.
    pub trust: Option<Vec<PathBuf>>,
}

/// `[reports]`: how long the Slurm prolog's per-job files (`job-<id>.log`, `.json`, `.html`
/// beside `prefetch --report`) are kept.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReportsSection {
    /// Keep the files of at most this many jobs, the newest (default 1000).
    pub keep: Option<usize>,
    /// Remove the files of jobs older than this (`30d`, `12h`; default 30 days).
    pub max_age: Option<String>,
}

impl ReportsSection {
    /// The number of jobs whose files are kept.
    pub fn keep(&self) -> usize {
        self.keep.unwrap_or(1000)
    }

    /// The age after which a job's files go (the value was checked when read).
    pub fn max_age(&self) -> std::time::Duration {
        self.max_age
            .as_deref()
            .and_then(|t| humantime::parse_duration(t).ok())
            .unwrap_or(std::time::Duration::from_secs(30 * 24 * 3600))
    }
}

/// `later.or(earlier)` for every field of a section.
macro_rules! overlay_fields {
    ($earlier:expr, $later:expr, $($f:ident),+) => {
        $( $earlier.$f = $later.$f.or($earlier.$f.take()); )+
    };
}

impl SiteConfig {
    /// This configuration with every key `later` sets replaced by `later`'s value.
    pub fn overlay(mut self, later: SiteConfig) -> SiteConfig {
        let SiteConfig {
            store,
            root,
            topology,
            tree,
            network,
            reports,
            push,
            seeder,
            run,
        } = later;
        overlay_fields!(self.store, store, path, shared, origin);
        overlay_fields!(self.root, root, host);
        if topology.file.is_some() {
            // A later file's topology replaces a generated one, and the other way round.
            self.topology.cluster = None;
        }
        if topology.cluster.is_some() {
            self.topology.file = None;
        }
        overlay_fields!(self.topology, topology, file, cluster, group_size, links);
        overlay_fields!(self.tree, tree, strategy, width, threshold, login_copies);
        overlay_fields!(self.network, network, identity, hosts, port, trust);
        overlay_fields!(self.reports, reports, keep, max_age);
        overlay_fields!(self.push, push, timeout);
        overlay_fields!(self.run, run, image_binds);
        overlay_fields!(
            self.seeder,
            seeder,
            host,
            listen,
            allow,
            logdir,
            munge_socket
        );
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_documented_example_parses() {
        let doc = include_str!("site.rs");
        let example: String = doc
            .lines()
            .skip_while(|l| !l.starts_with("//! ```toml"))
            .skip(1)
            .take_while(|l| !l.starts_with("//! ```"))
            .map(|l| l.strip_prefix("//! ").unwrap_or("").to_string() + "\n")
            .collect();
        // The example shows both topology forms; a real file keeps one.
        let example = example.replace("file = \"/etc/teesfs/topology.toml\"   # or:", "");
        let cfg = SiteConfig::from_toml(&example, "example").expect("example parses");
        assert_eq!(cfg.topology.group_size, Some(8));
        assert_eq!(cfg.network.port, Some(7411));
        assert_eq!(cfg.store.shared, Some(PathBuf::from("/shared/teesfs")));
        assert_eq!(
            cfg.store.origin(),
            Some(std::path::Path::new("/lustre/teesfs/store"))
        );
    }

    /// Issue 32 item 2: the origin store nodes fall back to is `origin`, else `shared`.
    #[test]
    fn the_origin_store_is_origin_else_shared() {
        assert_eq!(SiteConfig::default().store.origin(), None);
        let shared = SiteConfig::from_toml("[store]\nshared = \"/gpfs/s\"\n", "a").expect("a");
        assert_eq!(shared.store.origin(), Some(std::path::Path::new("/gpfs/s")));
        let both = shared
            .overlay(SiteConfig::from_toml("[store]\norigin = \"/lustre/o\"\n", "b").expect("b"));
        assert_eq!(both.store.origin(), Some(std::path::Path::new("/lustre/o")));
        assert_eq!(both.store.shared, Some(PathBuf::from("/gpfs/s")));
    }

    /// Issue 30 item 1: the `[seeder]` section, its defaults, and bad values contained.
    #[test]
    fn the_seeder_section_has_defaults_and_refuses_bad_values_by_key() {
        let none = SiteConfig::default();
        assert_eq!(none.seeder.address(), None, "no seeder: the prolog pushes");
        assert_eq!(none.seeder.listen().to_string(), "0.0.0.0:7412");
        assert_eq!(none.seeder.allow(), vec!["slurm".to_string()]);
        assert_eq!(none.seeder.logdir(), PathBuf::from("/var/log/teesfs"));
        let cfg = SiteConfig::from_toml(
            "[seeder]\nhost = \"login1\"\nlisten = \"10.0.0.1:9000\"\nallow = [\"slurm\", \"64030\"]\n\
             munge_socket = \"/run/m.sock\"\n",
            "site",
        )
        .expect("parses");
        assert_eq!(cfg.seeder.address().as_deref(), Some("login1:7412"));
        assert_eq!(cfg.seeder.listen().port(), 9000);
        assert_eq!(cfg.seeder.allow(), vec!["slurm", "64030"]);
        assert_eq!(cfg.seeder.munge_socket, Some(PathBuf::from("/run/m.sock")));
        for (host, want) in [
            ("login1:7500", "login1:7500"),
            ("10.0.0.1", "10.0.0.1:7412"),
            ("fe80::1", "[fe80::1]:7412"),
            ("[fe80::1]:9", "[fe80::1]:9"),
        ] {
            assert_eq!(with_port(host, 7412), want);
        }
        for (text, key) in [
            ("[seeder]\nlisten = \"login1\"\n", "[seeder] listen"),
            ("[seeder]\nallow = []\n", "[seeder] allow"),
            ("[seeder]\nhost = \"a b\"\n", "[seeder] host"),
            ("[seeder]\nport = 1\n", "[seeder] port"),
        ] {
            let e = SiteConfig::from_toml(text, "x").expect_err(text);
            assert!(e.to_string().contains(key), "{e}");
        }
        // A bad seeder key is left out; the rest of the file applies.
        let (cfg, problems) =
            SiteConfig::from_toml_lenient("[seeder]\nlisten = \"nope\"\nhost = \"login2\"\n", "x")
                .expect("TOML");
        assert_eq!(problems.len(), 1);
        assert_eq!(cfg.seeder.listen().port(), 7412);
        assert_eq!(cfg.seeder.address().as_deref(), Some("login2:7412"));
        let later = SiteConfig::from_toml("[seeder]\nhost = \"login3:1\"\n", "b").expect("b");
        assert_eq!(
            cfg.overlay(later).seeder.address().as_deref(),
            Some("login3:1")
        );
    }

    #[test]
    fn a_typo_is_an_error_naming_the_file_line_and_key() {
        let e = SiteConfig::from_toml("[tree]\nwidht = 4\n", "/etc/teesfs/teesfs.toml")
            .expect_err("typo");
        let msg = e.to_string();
        assert!(
            msg.contains("/etc/teesfs/teesfs.toml")
                && msg.contains("line 2")
                && msg.contains("widht"),
            "{msg}"
        );
    }

    #[test]
    fn later_files_override_key_by_key() {
        let base = SiteConfig::from_toml(
            "[tree]\nwidth = 15\nthreshold = 512\n[topology]\ncluster = \"cn[1-64]\"\ngroup_size = 8\n",
            "a",
        )
        .expect("a");
        let drop_in =
            SiteConfig::from_toml("[tree]\nwidth = 4\n[topology]\nfile = \"/t.toml\"\n", "b")
                .expect("b");
        let cfg = base.overlay(drop_in);
        assert_eq!(cfg.tree.width, Some(4));
        assert_eq!(cfg.tree.threshold, Some(512));
        assert_eq!(cfg.topology.file, Some(PathBuf::from("/t.toml")));
        assert_eq!(
            cfg.topology.cluster, None,
            "a topology file replaces a generated one"
        );
    }

    #[test]
    fn inconsistent_values_are_refused() {
        for (text, key) in [
            ("[tree]\nwidth = 0\n", "width"),
            ("[tree]\nlogin_copies = 0\n", "login_copies"),
            ("[topology]\ncluster = \"cn[1-4]\"\n", "group_size"),
            (
                "[topology]\nfile = \"t\"\ncluster = \"c\"\ngroup_size = 2\n",
                "alternatives",
            ),
            ("[push]\ntimeout = \"soon\"\n", "[push] timeout"),
            ("[push]\ntimeout = \"0s\"\n", "above zero"),
        ] {
            let e = SiteConfig::from_toml(text, "x").expect_err(text);
            assert!(e.to_string().contains(key), "{e}");
        }
    }

    /// A mistake is contained to its key: the rest of the file still applies, an unknown
    /// key or section is reported with its line, and a bad value is left out.
    #[test]
    fn a_mistake_is_left_out_and_reported_and_the_rest_applies() {
        let text = "[daemon]\nstore_budget = \"8GiB\"\n[tree]\nwidht = 4\nthreshold = 64\n\
                    [network]\nport = \"seventy\"\nidentity = \"/etc/teesfs/cluster\"\n";
        let (cfg, problems) =
            SiteConfig::from_toml_lenient(text, "/etc/teesfs/teesfs.toml").expect("TOML");
        assert_eq!(cfg.tree.threshold, Some(64));
        assert_eq!(cfg.network.port, None);
        assert_eq!(
            cfg.network.identity,
            Some(PathBuf::from("/etc/teesfs/cluster"))
        );
        let shown: Vec<String> = problems.iter().map(ToString::to_string).collect();
        assert_eq!(problems.len(), 3, "{shown:?}");
        assert!(
            shown[0].contains("line 1") && shown[0].contains("unknown key [daemon]"),
            "{shown:?}"
        );
        assert!(
            shown
                .iter()
                .any(|p| p.contains("line 4") && p.contains("[tree] widht")),
            "{shown:?}"
        );
        let port = problems
            .iter()
            .find(|p| p.key.as_deref() == Some("port"))
            .expect("port");
        assert!(port.is_invalid() && port.line == Some(7), "{port}");
        assert!(!problems[0].is_invalid());
        let e = SiteConfig::from_toml_lenient("[tree\nwidth = 3\n", "f").expect_err("not TOML");
        assert!(e.to_string().contains("line 1"), "{e}");
    }
}

//! `teesfs.toml`: the site configuration an admin writes once, read by `plan`, `push`,
//! `health`, `prefetch` and `daemon` (a flag overrides it for one run).
//!
//! ```toml
//! [store]
//! path = "/shared/teesfs"          # the login node's store (publish, push, prefetch)
//! shared = "/shared/teesfs"        # the store as nodes see it, if they can read it:
//!                                  # enables shared-storage mode (`auto` at or below
//!                                  # `threshold` nodes). Without it `auto` plans the tree.
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
//!
//! [network]
//! identity = "/etc/teesfs/cluster" # ca.crt, <host>.crt, <host>.key
//! hosts = "/etc/teesfs/hosts"      # optional `host address[:port]` map
//! port = 7411
//! trust = ["/etc/teesfs/trusted/site.pub"]
//! ```
//!
//! The configuration is `/etc/teesfs/teesfs.toml`, then every `teesfs.d/*.toml` beside it
//! in name order, then `teesfs.toml.local`; a key set in a later file replaces the earlier
//! value ([`SiteConfig::overlay`]). Unknown keys are errors naming the file, line and key,
//! so a typo never silently changes every job of a site. Parsing only: the caller reads the
//! files and resolves what is missing.

use std::path::PathBuf;

use serde::Deserialize;

use crate::Error;

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
}

/// `[store]`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StoreSection {
    /// The login node's store.
    pub path: Option<PathBuf>,
    /// The store as the nodes see it, when they can read it (shared-storage mode).
    pub shared: Option<PathBuf>,
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

/// `later.or(earlier)` for every field of a section.
macro_rules! overlay_fields {
    ($earlier:expr, $later:expr, $($f:ident),+) => {
        $( $earlier.$f = $later.$f.or($earlier.$f.take()); )+
    };
}

impl SiteConfig {
    /// Parses one file's text; `origin` (its path) names it in errors, with the line and
    /// the offending key, never quoting other content of the file.
    pub fn from_toml(text: &str, origin: &str) -> Result<Self, Error> {
        let cfg: SiteConfig = toml::from_str(text).map_err(|e| {
            Error::SiteConfig(format!(
                "{origin}, {}",
                crate::jobspec::toml_error(text, &e)
            ))
        })?;
        cfg.check(origin)?;
        Ok(cfg)
    }

    fn check(&self, origin: &str) -> Result<(), Error> {
        let bad = |key: &str, why: &str| Err(Error::SiteConfig(format!("{origin}: {key} {why}")));
        if self.tree.width == Some(0) {
            return bad("[tree] width", "must be at least 1");
        }
        if self.topology.group_size == Some(0) {
            return bad("[topology] group_size", "must be at least 1");
        }
        if self.topology.file.is_some() && self.topology.cluster.is_some() {
            return bad(
                "[topology] file",
                "and [topology] cluster are alternatives: keep one",
            );
        }
        if self.topology.cluster.is_some() && self.topology.group_size.is_none() {
            return bad("[topology] cluster", "needs [topology] group_size");
        }
        Ok(())
    }

    /// This configuration with every key `later` sets replaced by `later`'s value.
    pub fn overlay(mut self, later: SiteConfig) -> SiteConfig {
        let SiteConfig {
            store,
            root,
            topology,
            tree,
            network,
        } = later;
        overlay_fields!(self.store, store, path, shared);
        overlay_fields!(self.root, root, host);
        if topology.file.is_some() {
            // A later file's topology replaces a generated one, and the other way round.
            self.topology.cluster = None;
        }
        if topology.cluster.is_some() {
            self.topology.file = None;
        }
        overlay_fields!(self.topology, topology, file, cluster, group_size, links);
        overlay_fields!(self.tree, tree, strategy, width, threshold);
        overlay_fields!(self.network, network, identity, hosts, port, trust);
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
            ("[topology]\ncluster = \"cn[1-4]\"\n", "group_size"),
            (
                "[topology]\nfile = \"t\"\ncluster = \"c\"\ngroup_size = 2\n",
                "alternatives",
            ),
        ] {
            let e = SiteConfig::from_toml(text, "x").expect_err(text);
            assert!(e.to_string().contains(key), "{e}");
        }
    }
}

//! `manifest.toml`: the human-written job spec read by `teesfs prefetch`.
//!
//! ```toml
//! [layer]
//! store = "/shared/teesfs"        # where the layer was published (default: the site's)
//! index = "3a6a3941"              # a tag, or 4+ hex characters of its id
//! image = false                   # true: the layer is the tasks' whole root (an image),
//!                                 # not a layer over the node's "/" (`--teesfs-image`)
//!
//! [launch]
//! urgent = ["opt/app/bin/*"]     # extra urgent paths, globs over layer paths
//!                                 # (the files the command needs to start are recorded in
//!                                 # the signed index when publishing: `teesfs publish
//!                                 # --urgent-exec CMD` or `teesfs record`)
//!
//! [nodes]
//! list = "cn[0001-0128]"          # default: $SLURM_JOB_NODELIST
//! topology = "/etc/teesfs/topology.toml"   # or: group_size = 8 (and cluster = "cn[...]")
//! strategy = "auto"               # topo, topo-paper, random, hostlist, flat, storage, auto
//! width = 15
//! threshold = 512                 # auto: shared storage at or below this many nodes
//! login = "login1"                # the root of the tree
//!
//! [network]
//! identity = "/etc/teesfs/cluster"
//! hosts = "/etc/teesfs/hosts"     # optional host -> address map
//! port = 7411
//! wait = "urgent"                 # or "all"
//! shared_store = "/shared/teesfs" # what nodes mount in shared-storage mode
//! ```
//!
//! Unknown keys are errors (a typo must not silently change a job), reported with their
//! line and column. Parsing only; the caller resolves paths and environment variables.

use std::path::PathBuf;

use serde::Deserialize;

use crate::Error;

/// The whole job spec.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobSpec {
    /// Which layer.
    pub layer: LayerSpec,
    /// What the job runs.
    #[serde(default)]
    pub launch: LaunchSpec,
    /// Where it runs.
    #[serde(default)]
    pub nodes: NodesSpec,
    /// How to reach the nodes.
    #[serde(default)]
    pub network: NetworkSpec,
}

/// `[layer]`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LayerSpec {
    /// The store the layer was published into (default: the site's `[store] path`).
    pub store: Option<PathBuf>,
    /// A tag (`teesfs publish --tag`), or at least 4 hex characters of the index id.
    pub index: String,
    /// The layer is an image: every task's whole root, not a layer over the node's "/"
    /// (what the SPANK plugin's `--teesfs-image` asks for).
    #[serde(default)]
    pub image: bool,
}

/// `[launch]`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LaunchSpec {
    /// Refused when set (see [`JobSpec::from_toml`]): kept so that old specs get an
    /// error saying what to do instead of `unknown field`.
    #[serde(default)]
    pub command: Vec<String>,
    /// Extra urgent globs over layer paths.
    #[serde(default)]
    pub urgent: Vec<String>,
}

/// `[nodes]`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodesSpec {
    /// Slurm hostlist of the job's nodes (default `$SLURM_JOB_NODELIST`).
    pub list: Option<String>,
    /// topology.toml path.
    pub topology: Option<PathBuf>,
    /// All cluster nodes, cut into groups of `group_size`.
    pub cluster: Option<String>,
    /// Group size for generated topologies.
    pub group_size: Option<usize>,
    /// Planning strategy name.
    pub strategy: Option<String>,
    /// Tree width.
    pub width: Option<usize>,
    /// Shared-storage threshold for `auto`.
    pub threshold: Option<usize>,
    /// The login node's name.
    pub login: Option<String>,
}

/// `[network]`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NetworkSpec {
    /// Cluster credentials directory.
    pub identity: Option<PathBuf>,
    /// Host to address map file.
    pub hosts: Option<PathBuf>,
    /// Daemon port.
    pub port: Option<u16>,
    /// `urgent` or `all`.
    pub wait: Option<String>,
    /// The store path as nodes see it (shared-storage mode).
    pub shared_store: Option<PathBuf>,
    /// Hold the rest of the layer back at most this long after the urgent set is on every
    /// node, while the job's applications start (`teesfs push --bulk-after`), e.g. "30s".
    pub bulk_after: Option<String>,
    /// With `bulk_after`: let it flow once no application activity reached the root for
    /// this long (`teesfs push --bulk-quiet`), e.g. "2s".
    pub bulk_quiet: Option<String>,
}

/// A TOML error as `line N: message`: the line and what is wrong, never the text there
/// (shared by the job spec and the site configuration).
pub(crate) fn toml_error(text: &str, e: &toml::de::Error) -> String {
    let line = e.span().map_or(1, |s| {
        text[..s.start.min(text.len())].matches('\n').count() + 1
    });
    format!("line {line}: {}", e.message())
}

impl JobSpec {
    /// Parses and checks a job spec.
    pub fn from_toml(text: &str) -> Result<Self, Error> {
        // The message and line only: the file may be one its reader could not read itself
        // (the Slurm prolog reads users' specs), so its text is never quoted.
        let spec: JobSpec =
            toml::from_str(text).map_err(|e| Error::JobSpec(toml_error(text, &e)))?;
        if spec.layer.index.trim().is_empty() {
            return Err(Error::JobSpec("[layer] index is empty".into()));
        }
        if let Some(w) = &spec.network.wait
            && w != "urgent"
            && w != "all"
        {
            return Err(Error::JobSpec(format!(
                "[network] wait = {w:?}: expected \"urgent\" or \"all\""
            )));
        }
        for (key, value) in [
            ("bulk_after", &spec.network.bulk_after),
            ("bulk_quiet", &spec.network.bulk_quiet),
        ] {
            if let Some(v) = value
                && humantime::parse_duration(v).is_err()
            {
                return Err(Error::JobSpec(format!(
                    "[network] {key} = {v:?}: expected a duration such as \"30s\" or \"2s\""
                )));
            }
        }
        if spec.network.bulk_quiet.is_some() && spec.network.bulk_after.is_none() {
            return Err(Error::JobSpec(
                "[network] bulk_quiet needs bulk_after (the longest hold)".into(),
            ));
        }
        if !spec.launch.command.is_empty() {
            // It used to be accepted and ignored: a spec must not look like it does
            // something it does not.
            return Err(Error::JobSpec(
                "[launch] command is not used by prefetch: the files a command needs to start \
                 are found when publishing (`teesfs publish --urgent-exec CMD`, or `teesfs \
                 record`) and recorded in the signed index; remove the key"
                    .into(),
            ));
        }
        if spec.nodes.width == Some(0) {
            return Err(Error::JobSpec("[nodes] width must be at least 1".into()));
        }
        Ok(spec)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn full_spec_parses() {
        let spec = JobSpec::from_toml(
            r#"
            [layer]
            store = "/s"
            index = "abcd"
            [launch]
            urgent = ["bin/*"]
            [nodes]
            list = "cn[1-4]"
            group_size = 2
            width = 4
            [network]
            wait = "all"
            port = 7000
            "#,
        )
        .expect("valid");
        assert_eq!(spec.launch.urgent, ["bin/*"]);
        assert_eq!(spec.nodes.group_size, Some(2));
        assert_eq!(spec.network.port, Some(7000));
    }

    #[test]
    fn the_polite_hold_is_a_pair_of_durations() {
        let spec = |net: &str| {
            JobSpec::from_toml(&format!(
                "[layer]\nstore = \"/s\"\nindex = \"ab\"\n[network]\n{net}\n"
            ))
        };
        let ok = spec("bulk_after = \"30s\"\nbulk_quiet = \"2s\"").expect("valid");
        assert_eq!(ok.network.bulk_after.as_deref(), Some("30s"));
        let err = spec("bulk_after = \"soon\"").expect_err("not a duration");
        assert!(err.to_string().contains("bulk_after = \"soon\""), "{err}");
        let err = spec("bulk_quiet = \"2s\"").expect_err("quiet alone");
        assert!(err.to_string().contains("needs bulk_after"), "{err}");
    }

    #[test]
    fn a_launch_command_is_refused_not_silently_ignored() {
        let err = JobSpec::from_toml(
            "[layer]\nstore = \"/s\"\nindex = \"ab\"\n[launch]\ncommand = [\"python3\"]\n",
        )
        .expect_err("command");
        assert!(err.to_string().contains("--urgent-exec"), "{err}");
    }

    #[test]
    fn an_image_job_says_so_in_its_layer() {
        let spec = |extra: &str| {
            JobSpec::from_toml(&format!("[layer]\nindex = \"ab\"\n{extra}"))
                .expect("valid")
                .layer
                .image
        };
        assert!(!spec(""));
        assert!(spec("image = true\n"));
    }

    #[test]
    fn typos_are_errors_with_a_line() {
        let err =
            JobSpec::from_toml("[layer]\nstore = \"/s\"\nindex = \"ab\"\n[nodes]\nwidht = 4\n")
                .expect_err("typo");
        let msg = err.to_string();
        assert!(msg.contains("widht") && msg.contains("line 5"), "{msg}");
    }

    #[test]
    fn bad_values_are_named() {
        let err = JobSpec::from_toml(
            "[layer]\nstore = \"/s\"\nindex = \"ab\"\n[network]\nwait = \"soon\"\n",
        )
        .expect_err("bad wait");
        assert!(err.to_string().contains("soon"), "{err}");
        assert!(
            JobSpec::from_toml("[layer]\nstore = \"/s\"\n").is_err(),
            "index is required"
        );
    }
}

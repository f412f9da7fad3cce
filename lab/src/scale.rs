//! The scale model as pure arithmetic: how much CPU each lab node gets and how the lab's
//! link rates are scaled, so that a node's CPU-to-link ratio is the one of a stated
//! reference node (DieCast, Gupta et al., NSDI 2008: scale every resource by one factor
//! and the ratios that decide a distributed system's behaviour hold).
//!
//! All lab nodes share this machine's cores. Pooled, every node's application competes
//! with every other node's daemon and application, which no cluster does. In the model
//! each node runs in its own CPU cgroup whose quota is its CPU; [`ScaleModel::plan`]
//! chooses that quota from the reference node's bandwidth per core and the node's link,
//! and, where the machine cannot give every node that much at once, lowers every quota
//! and every link rate by the same factor.
//!
//! Nothing here touches the system; `cgroup` applies the result.

use std::fmt;
use std::str::FromStr;

use serde::Serialize;

use crate::error::{LabError, Result};
use crate::layout::{LabSpec, Rates};

/// A reference node: its cores and its fabric link (`64x100gbit`: 64 cores on a
/// 100 Gbit/s fabric, 1.56 Gbit/s per core).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Reference {
    /// Cores of the reference node.
    pub cores: u32,
    /// Its link, in bits per second.
    pub link: u64,
}

impl Default for Reference {
    /// A 64-core node on a 100 Gbit/s fabric.
    fn default() -> Self {
        Self {
            cores: 64,
            link: 100_000_000_000,
        }
    }
}

impl Reference {
    /// Link bandwidth per core, bits per second.
    pub fn per_core(&self) -> f64 {
        self.link as f64 / f64::from(self.cores)
    }
}

impl fmt::Display for Reference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} cores on {} Gbit/s",
            self.cores,
            self.link as f64 / 1e9
        )
    }
}

impl FromStr for Reference {
    type Err = LabError;

    /// `CORESxRATE`, e.g. `64x100gbit` or `128x400gbit`.
    fn from_str(s: &str) -> Result<Self> {
        let bad = |why: &str| {
            LabError::Shape(format!(
                "reference node {s:?}: {why}; write CORESxRATE, e.g. 64x100gbit"
            ))
        };
        let (cores, rate) = s.split_once(['x', 'X']).ok_or_else(|| bad("no 'x'"))?;
        let cores: u32 = cores
            .trim()
            .parse()
            .map_err(|_| bad("cores must be a whole number"))?;
        let link = peertree::rates::parse_rate(rate.trim()).map_err(|e| bad(&e.to_string()))?;
        if cores == 0 || link == 0 {
            return Err(bad("cores and rate must be above zero"));
        }
        Ok(Self { cores, link })
    }
}

/// How the lab shares this machine's CPU among its nodes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum CpuModel {
    /// Every node shares every core (no cgroups): measures the machine, not a cluster.
    Pooled,
    /// Each node gets what its slave link needs at the reference node's ratio, lowered
    /// with the link rates when the machine cannot give every node that much.
    Auto,
    /// Each node gets this many cores; link rates are scaled to keep the reference ratio.
    Cores(f64),
}

/// Under the scale model, whose quota a node's applications run under.
///
/// On a cluster node the job runs in its Slurm cgroup on its own cores and the daemon as
/// a service beside it; a single-threaded application takes one core of the reference
/// node's 64, and never the CPU the daemon relays with. One quota for both does not model
/// that: CFS bandwidth control gives a node of 1/20 of a core 1 ms per 20 ms period, an
/// always-runnable application spends it while the daemon waits on the network, and each
/// chunk the daemon then relays waits for the next period (the demo's urgent set took
/// 3.1-3.4 s that way against 1.33-1.37 s with a quota each, BENCHMARKS.md). So `lab
/// launch` and the demo run applications under [`AppQuota::Own`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum AppQuota {
    /// The node's one quota, shared with its daemon: the application can spend the
    /// period's CPU while the daemon waits on the network.
    Node,
    /// A quota of the same size of their own beside the daemon's, as a job's cgroup
    /// beside the daemon's service on a cluster node. Both count in what the machine must
    /// give at once, so a lab of many nodes gets smaller quotas and slower links than
    /// with [`AppQuota::Node`] (the same factor for both: the model's ratios hold).
    Own,
}

impl AppQuota {
    /// Quotas of a node's size each compute node takes from the machine.
    fn quotas_per_node(self) -> f64 {
        match self {
            Self::Node => 1.0,
            Self::Own => 2.0,
        }
    }
}

impl FromStr for AppQuota {
    type Err = LabError;

    fn from_str(s: &str) -> Result<Self> {
        match s {
            "node" => Ok(Self::Node),
            "own" => Ok(Self::Own),
            _ => Err(LabError::Shape(format!(
                "application quota {s:?}: write node (shared with the daemon) or own"
            ))),
        }
    }
}

impl FromStr for CpuModel {
    type Err = LabError;

    fn from_str(s: &str) -> Result<Self> {
        match s {
            "pooled" => Ok(Self::Pooled),
            "auto" => Ok(Self::Auto),
            _ => {
                let v = match s.split_once('/') {
                    Some((a, b)) => a
                        .trim()
                        .parse::<f64>()
                        .ok()
                        .zip(b.trim().parse::<f64>().ok())
                        .map(|(a, b)| a / b),
                    None => s.trim().parse::<f64>().ok(),
                };
                match v {
                    Some(c) if c.is_finite() && c > 0.0 && c <= 1024.0 => Ok(Self::Cores(c)),
                    _ => Err(LabError::Shape(format!(
                        "node CPU {s:?}: write auto, pooled, or cores per node (0.0625 or 1/16)"
                    ))),
                }
            }
        }
    }
}

/// What reports say of a pooled lab.
pub const POOLED_TEXT: &str = "pooled: every node shares every core of this machine (times measure the machine, not a cluster)";

/// Share of the machine's cores left outside every node's quota, for the kernel's
/// network path (bridges, tbf, veth), the lab itself and the storage node.
pub const RESERVE_CORES: f64 = 0.25;

/// The smallest quota a cgroup v1 `cpu.cfs_quota_us` takes, in microseconds.
pub const MIN_QUOTA_US: u64 = 1_000;

/// The model a lab runs under: printed in every report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ScaleModel {
    /// The reference node whose ratio the model keeps.
    pub reference: Reference,
    /// A compute node's CPU, in cores (its cgroup's quota: its daemon's, and its
    /// applications' too under [`AppQuota::Node`]).
    pub node_cpu: f64,
    /// The CPU of a compute node's applications, in cores, under [`AppQuota::Own`] (their
    /// cgroup's quota, beside the daemon's); 0 when they share the node's.
    pub app_cpu: f64,
    /// The login node's CPU, in cores (in proportion to its link).
    pub login_cpu: f64,
    /// The storage node's CPU, in cores (in proportion to its link).
    pub storage_cpu: f64,
    /// Factor applied to every link rate of the requested shape (1 when unchanged).
    pub link_factor: f64,
    /// How much slower than the reference node a lab node is: reference cores over
    /// the node's CPU. One second in the model is `1/dilation` s on the reference cluster.
    pub dilation: f64,
    /// Cores the machine has.
    pub machine_cores: f64,
    /// CFS period of every node's cgroup, microseconds.
    pub period_us: u64,
}

impl ScaleModel {
    /// The model for `spec` on a machine of `machine_cores`: `None` when pooled. Also
    /// returns the spec with its link rates scaled.
    pub fn plan(
        spec: &LabSpec,
        (cpu, apps): (CpuModel, AppQuota),
        reference: Reference,
        machine_cores: f64,
    ) -> Result<Option<(Self, LabSpec)>> {
        let per_core = reference.per_core();
        let nodes = spec.groups * spec.group_size;
        // What the node would get at the reference ratio with its link as asked.
        let natural = spec.rates.slave as f64 / per_core;
        let node_cpu = match cpu {
            CpuModel::Pooled => return Ok(None),
            CpuModel::Cores(c) => c,
            CpuModel::Auto => {
                let budget = machine_cores - RESERVE_CORES;
                let wanted = natural
                    * (nodes as f64 * apps.quotas_per_node()
                        + spec.rates.login as f64 / spec.rates.slave as f64);
                if wanted > budget {
                    natural * budget / wanted
                } else {
                    natural
                }
            }
        };
        let link_factor = node_cpu / natural;
        let scale = |r: u64| ((r as f64 * link_factor).round() as u64).max(1_000);
        let rates = Rates {
            slave: scale(spec.rates.slave),
            proxy_uplink: scale(spec.rates.proxy_uplink),
            proxy_group: scale(spec.rates.proxy_group),
            login: scale(spec.rates.login),
            storage: scale(spec.rates.storage),
        };
        let cpu_of = |r: u64| r as f64 / per_core;
        let model = Self {
            reference,
            node_cpu,
            app_cpu: if apps == AppQuota::Own { node_cpu } else { 0.0 },
            login_cpu: cpu_of(rates.login).min(machine_cores),
            storage_cpu: cpu_of(rates.storage).min(machine_cores),
            link_factor,
            dilation: f64::from(reference.cores) / node_cpu,
            machine_cores,
            period_us: period_for(node_cpu),
        };
        let per_node = model.node_cpu + model.app_cpu;
        let total = per_node * nodes as f64 + model.login_cpu;
        if total > machine_cores {
            return Err(LabError::Shape(format!(
                "{nodes} nodes of {per_node:.4} cores each (daemon and applications) and the login node ({:.3}) would need {total:.2} cores at once, and this machine has {machine_cores}: the nodes would not get their quota. Give less CPU per node (--node-cpu, or auto) or build fewer nodes",
                model.login_cpu
            )));
        }
        Ok(Some((
            model,
            LabSpec {
                rates,
                ..spec.clone()
            },
        )))
    }

    /// A node's quota per period, microseconds, for `cores`.
    pub fn quota_us(&self, cores: f64) -> u64 {
        ((cores * self.period_us as f64).round() as u64).max(MIN_QUOTA_US)
    }

    /// One line for reports.
    pub fn describe(&self) -> String {
        let apps = if self.app_cpu > 0.0 {
            format!(" + {:.4} for its applications", self.app_cpu)
        } else {
            " shared with its applications".to_string()
        };
        format!(
            "scale model: {:.4} cores per node{apps} (login {:.3}), links x{:.2}, reference {} ({:.2} Gbit/s per core), dilation {:.0}x",
            self.node_cpu,
            self.login_cpu,
            self.link_factor,
            self.reference,
            self.reference.per_core() / 1e9,
            self.dilation
        )
    }
}

/// The CFS period for a quota of `cores`: 20 ms, or longer where the quota would fall
/// under the kernel's 1 ms minimum. A short period keeps a throttled node's pauses short:
/// a node with 1/20 of a core runs 1 ms of every 20 ms rather than 5 ms of every 100 ms,
/// so a heartbeat or an ack waits at most 19 ms behind the node's own work.
pub fn period_for(cores: f64) -> u64 {
    const DEFAULT: u64 = 20_000;
    let need = (MIN_QUOTA_US as f64 / cores).ceil() as u64;
    need.clamp(DEFAULT, 1_000_000)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reference_lab() -> LabSpec {
        LabSpec::default()
    }

    /// The model `spec` gets on a 2-core machine, and the spec with its links scaled.
    fn planned(spec: &LabSpec, cpu: CpuModel, apps: AppQuota) -> (ScaleModel, LabSpec) {
        ScaleModel::plan(spec, (cpu, apps), Reference::default(), 2.0)
            .expect("valid")
            .expect("not pooled")
    }

    #[test]
    fn one_sixteenth_of_a_core_matches_a_100_mbit_link_on_a_64_core_100_gbit_node() {
        let spec = LabSpec {
            groups: 2,
            group_size: 4,
            ..reference_lab()
        };
        let (m, scaled) = planned(&spec, CpuModel::Auto, AppQuota::Node);
        assert!((m.node_cpu - 0.064).abs() < 1e-9, "{}", m.node_cpu);
        assert_eq!(m.link_factor, 1.0);
        assert_eq!(scaled.rates, spec.rates);
        assert!((m.dilation - 1000.0).abs() < 1e-6);
    }

    #[test]
    fn a_lab_too_big_for_the_machine_lowers_cpu_and_links_by_one_factor() {
        let spec = reference_lab();
        let (m, scaled) = planned(&spec, CpuModel::Auto, AppQuota::Node);
        // 32 nodes plus a login node worth 4 of them fit in 1.75 cores.
        let total = m.node_cpu * 32.0 + m.login_cpu;
        assert!((total - (2.0 - RESERVE_CORES)).abs() < 1e-6, "{total}");
        assert!(m.link_factor < 1.0);
        let ratio = |cpu: f64, link: u64| link as f64 / cpu;
        assert!(
            (ratio(m.node_cpu, scaled.rates.slave) - Reference::default().per_core()).abs()
                < 1e-3 * Reference::default().per_core()
        );
        assert_eq!(
            scaled.rates.proxy_uplink,
            (spec.rates.proxy_uplink as f64 * m.link_factor).round() as u64
        );
    }

    #[test]
    fn applications_under_their_own_quota_count_in_what_the_machine_must_give() {
        let spec = reference_lab();
        let plan = |apps| planned(&spec, CpuModel::Auto, apps);
        let (shared, _) = plan(AppQuota::Node);
        let (own, scaled) = plan(AppQuota::Own);
        assert_eq!(shared.app_cpu, 0.0);
        assert_eq!(own.app_cpu, own.node_cpu);
        // 32 daemons, 32 applications and the login node still fit in 1.75 cores at once.
        let total = (own.node_cpu + own.app_cpu) * 32.0 + own.login_cpu;
        assert!((total - (2.0 - RESERVE_CORES)).abs() < 1e-6, "{total}");
        assert!(own.node_cpu < shared.node_cpu);
        // The links follow the daemon's CPU: the reference ratio holds.
        let per_core = Reference::default().per_core();
        assert!((scaled.rates.slave as f64 / own.node_cpu - per_core).abs() < 1e-3 * per_core);
        assert!(
            own.describe().contains("for its applications"),
            "{}",
            own.describe()
        );
        assert!(shared.describe().contains("shared with its applications"));
        // Given cores count twice too: the machine must host both quotas.
        let e = ScaleModel::plan(
            &spec,
            (CpuModel::Cores(0.04), AppQuota::Own),
            Reference::default(),
            2.0,
        )
        .expect_err("2.56 cores of 2")
        .to_string();
        assert!(e.contains("daemon and applications"), "{e}");
    }

    #[test]
    fn cores_given_scale_the_links_to_the_reference_ratio() {
        let spec = reference_lab();
        let (m, scaled) = planned(&spec, CpuModel::Cores(0.032), AppQuota::Node);
        assert_eq!(m.node_cpu, 0.032);
        assert_eq!(scaled.rates.slave, 50_000_000);
    }

    #[test]
    fn pooled_has_no_model() {
        assert!(
            ScaleModel::plan(
                &reference_lab(),
                (CpuModel::Pooled, AppQuota::Node),
                Reference::default(),
                2.0
            )
            .expect("valid")
            .is_none()
        );
    }

    #[test]
    fn small_quotas_get_a_longer_period_so_they_stay_above_the_kernels_minimum() {
        assert_eq!(period_for(0.5), 20_000);
        assert_eq!(period_for(0.005), 200_000);
        let spec = reference_lab();
        let (m, _) = planned(&spec, CpuModel::Cores(0.004), AppQuota::Node);
        assert!(m.quota_us(m.node_cpu) >= MIN_QUOTA_US);
    }

    #[test]
    fn bad_model_and_reference_text_say_what_to_write() {
        assert_eq!(
            "1/16".parse::<CpuModel>().expect("ok"),
            CpuModel::Cores(0.0625)
        );
        assert_eq!("auto".parse::<CpuModel>().expect("ok"), CpuModel::Auto);
        for bad in ["", "-1", "0", "lots", "1/0"] {
            let e = bad.parse::<CpuModel>().expect_err(bad).to_string();
            assert!(e.contains("1/16"), "{e}");
        }
        assert_eq!(
            "128x400gbit".parse::<Reference>().expect("ok").per_core(),
            400e9 / 128.0
        );
        for bad in ["64", "x100gbit", "0x1gbit", "64xfast"] {
            let e = bad.parse::<Reference>().expect_err(bad).to_string();
            assert!(e.contains("CORESxRATE"), "{e}");
        }
    }

    #[test]
    fn more_cpu_than_the_machine_can_host_is_refused_with_what_to_change() {
        let e = ScaleModel::plan(
            &reference_lab(),
            (CpuModel::Cores(1.0), AppQuota::Node),
            Reference::default(),
            2.0,
        )
        .expect_err("32 cores on 2")
        .to_string();
        assert!(e.contains("--node-cpu"), "{e}");
    }
}

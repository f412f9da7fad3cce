//! `peertree`: the topology-aware distribution tree of teesfs, as pure code.
//!
//! Layers, bottom up:
//! - [`hostlist`]: Slurm hostlist expressions (`cn[0001-0128],login1`) to host names and back.
//! - [`topology`]: groups behind proxies and optional upper levels, from `topology.toml`.
//! - [`rates`]: link rates, and how many full-rate streams each kind of link carries.
//! - [`plan`]: the tree type ([`Plan`]) shared by the planner, the relay and the simulator.
//! - [`strategy`]: the paper's Algorithm 1 (`topo-paper`), the improved `topo`, and the
//!   baselines (`random`, `hostlist`, `flat`, `storage`, `auto`).
//! - [`metrics`]: depth, fan-out, group-uplink bytes and hop-bytes of a plan.
//! - [`relay`]: the distribution protocol as a sans-IO state machine, and its wire messages.
//! - [`sim`]: a deterministic discrete-event simulator running every node's relay under a
//!   modelled network (link FIFOs, latency, set-up, processing, failures).
//!
//! This crate does no I/O: no files, no environment, no clock, no sockets. Callers read
//! `topology.toml` and `$SLURM_JOB_NODELIST` and hand the text in.

pub mod error;
pub mod hostlist;
pub mod metrics;
pub mod plan;
pub mod rates;
pub mod relay;
pub mod sim;
pub mod strategy;
pub mod topology;

pub use error::{Error, Result};
pub use metrics::{Metrics, measure};
pub use plan::{NodeId, Plan, Role};
pub use rates::LinkRates;
pub use strategy::{Availability, PlanOptions, Strategy, plan};
pub use topology::{GroupId, Topology};

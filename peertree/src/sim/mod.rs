//! A deterministic discrete-event simulator that runs the shipping relay state machine
//! ([`crate::relay::Relay`]) of every node under a modelled network.
//!
//! Scale results must come from the code that ships, so nothing here re-implements the
//! protocol: the simulator only moves what the relays ask it to move, with a model of how
//! long that takes, and feeds time and arrivals back in. What it models:
//! - links as FIFO servers ([`net`]): node NICs, proxy ports and group uplinks, upper-level
//!   unit uplinks, the core, the login and storage nodes' NICs;
//! - per-message latency and a connection set-up cost paid the first time two hosts talk
//!   (the paper observes that set-up dominates small transfers);
//! - per-chunk processing on the receiver (verify and store) before it can forward;
//! - the index transfer: `Start` messages are sized as the modelled index plus the subtree
//!   they carry, while the relays themselves get a tiny dummy index so 68,160 of them fit;
//!   the `Prepare` ahead of each `Start` as its subtree alone, and a host passes its
//!   `Prepare`s on as soon as one arrives, as the daemon does;
//! - failures: nodes killed at a time stop acting and everything to or from them is lost.
//!
//! Bulk flows one chunk at a time per edge: a parent is asked for the next chunk for a
//! child ([`crate::relay::Relay::poll_bulk`]) when the previous one has left its links, or
//! when it receives a chunk the idle child is waiting for.
//!
//! Deterministic: one event queue ordered by (time, sequence), integer nanoseconds, no
//! clock, no threads, no hashing in any order that matters. It must not do I/O.

mod engine;
mod net;
#[cfg(test)]
mod tests;

use std::time::Duration;

pub use engine::{Sim, SimReport, pick_victims};
pub use net::transfer_ns;

use crate::relay::Timing;

/// The modelled machine: bandwidths in bytes per second (`f64::INFINITY`: unlimited).
#[derive(Debug, Clone, PartialEq)]
pub struct Network {
    /// A compute node's NIC, each direction.
    pub node_bw: f64,
    /// A proxy's port toward its own group, each direction.
    pub port_bw: f64,
    /// A group's uplink (the proxy's link to the rest of the machine), each direction.
    pub uplink_bw: f64,
    /// Uplink of one unit of each topology level (innermost first), each direction;
    /// missing levels are unlimited.
    pub level_bw: Vec<f64>,
    /// The core, all traffic between top-level units together.
    pub core_bw: f64,
    /// The login node's NIC.
    pub login_bw: f64,
    /// The storage node's NIC (its "fat link").
    pub storage_bw: f64,
    /// Added to every message and chunk.
    pub latency: Duration,
    /// Paid before the first message between two hosts, besides [`Network::setup_cpu`]:
    /// the handshake's round trips.
    pub setup: Duration,
    /// CPU time of one core each end of a new connection spends on it (QUIC with the
    /// mutual-TLS handshake and the hello), queued on each host's CPU and stretched by its
    /// share ([`Network::node_cpu`]): a node dialling its children does their handshakes
    /// one after another on its own CPU.
    pub setup_cpu: Duration,
    /// CPU time of one core a node spends on a `Start` (the index checked and decoded, the
    /// job set up) before it passes the `Start`s on, queued on its CPU.
    pub start_cpu: Duration,
    /// Cores a compute node has for the push's work (chunks, handshakes, `Start`s, the
    /// mount): 1 on a real machine, where each has a core to spare; a fraction in the lab's
    /// scale model, which stretches every CPU cost by its inverse.
    pub node_cpu: f64,
    /// Cores of the login node, likewise (it runs the push).
    pub login_cpu: f64,
    /// Fixed processing per received chunk (bookkeeping, store insert).
    pub chunk_cost: Duration,
    /// Verify-and-store speed of a receiving node (blake3 and a write to the store).
    pub cpu_bw: f64,
    /// Kernel forwarding: bytes per second a core moves across one link direction
    /// (`f64::INFINITY`: free). A received chunk's processing grows by its bytes times the
    /// link directions it crossed at this speed. The lab's links are veth pairs, bridges
    /// and tbf qdiscs on the same box, so every hop costs its CPU; a real network's
    /// switches do not cost the hosts anything.
    pub link_cpu_bw: f64,
    /// Cores shared by every host for chunk processing (0: each host has its own CPU).
    /// The lab runs all its nodes on one machine, so their processing queues for the
    /// same cores.
    pub shared_cores: u32,
    /// Modelled size of the signed index carried by every `Start`.
    pub index_bytes: u64,
    /// Bytes per subtree entry carried by a `Start`.
    pub node_info_bytes: u64,
    /// The push command's own start before its first message leaves (process start, keys,
    /// the index, the plan) and its end, wall time.
    pub process: Duration,
    /// From a node's `Start` to its FUSE mount answering (the index decoded, the mount
    /// made), as CPU time of one core, stretched by [`Network::node_cpu`]: the application
    /// cannot start before.
    pub mount: Duration,
}

const GBIT: f64 = 1e9 / 8.0;

/// Bytes per second of chunk processing per core in the lab (5.3 ms per MiB).
const LAB_CPU_BW: f64 = (1u64 << 20) as f64 / 5.3e-3;

/// The push command's own start and end (wall time of `teesfs push` minus the root's
/// time), measured in the pooled lab, where the login node has a core to spare (median
/// 41 ms; 51 ms in the scale model, where it has 0.194 cores: mostly not CPU). The
/// Tianhe-like machine is given the same (BENCHMARKS.md, "Fixed costs").
const PROCESS: Duration = Duration::from_millis(41);

/// A node's `Start` to its mount answering, CPU of one core: fitted to the scale-model
/// lab, where it takes a median 39 ms at 0.0486 cores.
const MOUNT_CPU: Duration = Duration::from_micros(2_000);

/// One end of a connection's set-up, CPU of one core: measured on this project's machine
/// (`handshake_cpu` in node's transport tests: 0.36-0.50 ms a side).
const SETUP_CPU: Duration = Duration::from_micros(450);

/// A `Start`'s handling at a lab node before its `Start`s to its children leave, CPU of
/// one core (the daemon's own handling takes at most 0.2 ms: `start received` to `job
/// accepted`), fitted to a one-file push to the 32-node scale model (root's time, median
/// 119 ms): what else a lab node's 0.0486 cores run meanwhile (its job's tasks, the
/// reports, the mount of a node without children) lands here.
const LAB_START_CPU: Duration = Duration::from_micros(700);

/// The reference lab in the scale model (32 nodes and the login node on 2 cores, 0.25 kept
/// for the kernel): a node's cores and the factor on its link rates (`teesfs lab up`
/// prints both).
const MODEL_NODE_CPU: f64 = 0.0486;
const MODEL_LINK_FACTOR: f64 = 0.7595;

/// Bytes per second a core forwards across one of the lab's link directions (2.5 ms per
/// MiB per hop).
const LAB_LINK_CPU_BW: f64 = (1u64 << 20) as f64 / 2.5e-3;

impl Network {
    /// A Tianhe-like machine: 10 Gbit/s node NICs; groups of 8 whose proxy has a port and
    /// an uplink of 8 x that (it carries its whole group); login node like a proxy; a
    /// 100 Gbit/s storage node; a core that does not limit; 20 us per message, 2 ms
    /// connection set-up with the handshakes on cores to spare (no [`Network::setup_cpu`];
    /// measured, a connection costs 0.45 ms of CPU at each end, so 2 ms is an upper
    /// estimate), 50 us + blake3 at 4.5 GB/s per chunk, a 1 MiB index.
    pub fn tianhe() -> Self {
        Self {
            node_bw: 10.0 * GBIT,
            port_bw: 80.0 * GBIT,
            uplink_bw: 80.0 * GBIT,
            level_bw: Vec::new(),
            core_bw: f64::INFINITY,
            login_bw: 80.0 * GBIT,
            storage_bw: 100.0 * GBIT,
            latency: Duration::from_micros(20),
            setup: Duration::from_millis(2),
            chunk_cost: Duration::from_micros(50),
            cpu_bw: 4.5e9,
            link_cpu_bw: f64::INFINITY,
            shared_cores: 0,
            index_bytes: 1 << 20,
            node_info_bytes: 32,
            setup_cpu: Duration::ZERO,
            start_cpu: Duration::ZERO,
            node_cpu: 1.0,
            login_cpu: 1.0,
            process: PROCESS,
            mount: MOUNT_CPU,
        }
    }

    /// The Tianhe-like machine with two upper levels: super nodes of 14 groups whose
    /// uplink is half their groups' uplinks together (2:1 oversubscribed), and cabinets of
    /// 168 groups (12 super nodes), again 2:1.
    pub fn two_level() -> Self {
        let t = Self::tianhe();
        let supernode = 14.0 * t.uplink_bw / 2.0;
        let cabinet = 12.0 * supernode / 2.0;
        Self {
            level_bw: vec![supernode, cabinet],
            ..t
        }
    }

    /// The lab's reference shape (DESIGN.md, `lab::Rates::default`): slave links
    /// 100 Mbit/s, proxy port, uplink and login link 400 Mbit/s; storage 1 Gbit/s. All
    /// nodes share the box's 2 cores. A received chunk costs 50 us + 5.3 ms per MiB of CPU
    /// (QUIC receive and send, blake3, the store write), plus 2.5 ms per MiB for each link
    /// direction it crossed (the kernel moving it through veth pairs, bridges and tbf
    /// qdiscs). Both fitted to the daemons' CPU seconds in `teesfs lab bench` on a quiet
    /// box, 16 MiB: `topo`, `random` and `hostlist` move the same 496 MiB over 2.2, 4.8
    /// and 3.3 link directions on average and took 5.4, 8.7 and 7.0 s (BENCHMARKS.md).
    pub fn lab() -> Self {
        let m = 1e6 / 8.0;
        Self {
            cpu_bw: LAB_CPU_BW,
            link_cpu_bw: LAB_LINK_CPU_BW,
            shared_cores: 2,
            node_bw: 100.0 * m,
            port_bw: 400.0 * m,
            uplink_bw: 400.0 * m,
            login_bw: 400.0 * m,
            storage_bw: 1000.0 * m,
            latency: Duration::from_micros(100),
            // The handshake's round trips; its CPU ([`SETUP_CPU`]) queues on the shared
            // cores.
            setup: Duration::from_micros(400),
            setup_cpu: SETUP_CPU,
            start_cpu: LAB_START_CPU,
            index_bytes: 64 << 10,
            ..Self::tianhe()
        }
    }

    /// The lab's reference shape in its scale model (`teesfs lab up` by default): every
    /// node on its own CPU share, 0.0486 cores (the login node 4x that), and every link
    /// rate lowered by the same factor (x0.76: slaves 76 Mbit/s), so a node's CPU per byte
    /// of its link is a 64-core node's on 100 Gbit/s. Every CPU cost, fixed or per chunk,
    /// is stretched by 1 / 0.0486.
    pub fn lab_model() -> Self {
        let lab = Self::lab();
        let f = MODEL_LINK_FACTOR;
        Self {
            node_bw: lab.node_bw * f,
            port_bw: lab.port_bw * f,
            uplink_bw: lab.uplink_bw * f,
            login_bw: lab.login_bw * f,
            storage_bw: lab.storage_bw * f,
            shared_cores: 0,
            // The kernel's network path runs outside the nodes' quotas.
            link_cpu_bw: f64::INFINITY,
            node_cpu: MODEL_NODE_CPU,
            login_cpu: 4.0 * MODEL_NODE_CPU,
            process: Duration::from_millis(51),
            ..lab
        }
    }

    /// `cpu` (CPU time of one core) on a host with `cores`.
    pub fn stretched(cpu: Duration, cores: f64) -> Duration {
        if cores > 0.0 && cores.is_finite() {
            cpu.div_f64(cores)
        } else {
            cpu
        }
    }

    /// The machine's link rates as the planner takes them (bits per second), or `None`
    /// when a node's NIC is unlimited.
    pub fn link_rates(&self) -> Option<crate::rates::LinkRates> {
        let bits = |bw: f64| {
            if bw.is_finite() {
                (bw * 8.0).round() as u64
            } else {
                u64::MAX
            }
        };
        self.node_bw.is_finite().then(|| crate::rates::LinkRates {
            node: bits(self.node_bw),
            port: bits(self.port_bw),
            uplink: bits(self.uplink_bw),
            login: bits(self.login_bw),
        })
    }

    /// Processing time of one received chunk of `bytes`.
    pub fn chunk_ns(&self, bytes: u64) -> u64 {
        self.chunk_cost.as_nanos() as u64 + transfer_ns(bytes, self.cpu_bw)
    }

    /// Modelled size of a `Start` carrying `subtree` entries (the push order is part of
    /// the index).
    pub fn start_bytes(&self, subtree: usize) -> u64 {
        self.index_bytes + self.prepare_bytes(subtree)
    }

    /// Modelled size of a `Prepare` carrying `subtree` entries.
    pub fn prepare_bytes(&self, subtree: usize) -> u64 {
        self.node_info_bytes * subtree as u64
    }
}

/// What to simulate besides the plan and the network.
#[derive(Debug, Clone, PartialEq)]
pub struct SimConfig {
    /// The machine.
    pub network: Network,
    /// Bytes to distribute.
    pub payload: u64,
    /// Chunk size (the last chunk may be smaller).
    pub chunk: u64,
    /// Bytes of the payload in the urgent set (pushed first), rounded up to chunks.
    pub urgent: u64,
    /// Liveness timing handed to the relays.
    pub timing: Timing,
    /// Give up when simulated time passes this.
    pub limit: Duration,
    /// The application's own start on one node from local data (0: no application): a
    /// node's application has started at [`Network::process`] + the later of its mount
    /// and its urgent set + this.
    pub app_start: Duration,
}

impl SimConfig {
    /// `payload` bytes in chunks of `chunk`, all urgent, production timing, a one-hour limit.
    pub fn new(network: Network, payload: u64, chunk: u64) -> Self {
        Self {
            network,
            payload,
            chunk,
            urgent: payload,
            timing: Timing::default(),
            limit: Duration::from_secs(3600),
            app_start: Duration::ZERO,
        }
    }

    /// Chunk sizes, in chunk-table order.
    pub fn chunk_sizes(&self) -> Vec<u32> {
        let chunk = self.chunk.max(1);
        let n = self.payload.div_ceil(chunk);
        (0..n)
            .map(|i| {
                let size = chunk.min(self.payload - i * chunk);
                u32::try_from(size).unwrap_or(u32::MAX)
            })
            .collect()
    }

    /// The model's lower bound on deployment time for any plan: one connection set-up (its
    /// CPU at both ends), one latency, the index and the payload through the narrowest of a job node's NIC, the
    /// login node's NIC and a group uplink (each must carry it once), and the processing of
    /// the last chunk.
    pub fn lower_bound(&self) -> Duration {
        let n = &self.network;
        let narrow = n.node_bw.min(n.login_bw).min(n.uplink_bw);
        let last = self.chunk_sizes().last().copied().unwrap_or(0);
        let ns = n.setup.as_nanos() as u64
            + Network::stretched(n.setup_cpu, n.login_cpu).as_nanos() as u64
            + Network::stretched(n.setup_cpu, n.node_cpu).as_nanos() as u64
            + n.latency.as_nanos() as u64
            + transfer_ns(n.index_bytes + self.payload, narrow)
            + Network::stretched(
                Duration::from_nanos(n.chunk_ns(u64::from(last))),
                n.node_cpu,
            )
            .as_nanos() as u64;
        Duration::from_nanos(ns)
    }
}

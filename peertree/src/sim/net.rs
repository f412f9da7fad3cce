//! The network model: which links a transfer crosses, and FIFO servers for each link.
//!
//! Every link direction is a FIFO server with a bandwidth and a "busy until" time. A
//! transfer of `b` bytes handed over at `t` occupies each link of its path for
//! `b / bandwidth`, starting when that link frees (`max(t, busy)`); it has fully arrived
//! when the slowest of them is done, plus the per-message latency. This is a fluid,
//! cut-through approximation: links of one path work in parallel, each in its own arrival
//! order, so a fast uplink shared by slow flows serves them side by side instead of one
//! after the other.
//!
//! Paths follow the machine's shape (see [`crate::metrics`] for the same picture as hops):
//! - two members of one group talk over the group's switch: sender NIC, receiver NIC
//!   (a proxy's NIC toward its group is its *port*);
//! - a slave's traffic out of its group crosses its NIC, its proxy's port (inbound) and the
//!   group's uplink (outbound); traffic into a group the reverse;
//! - a proxy's own traffic out of its group crosses only the uplink;
//! - between groups, each upper level (super node, cabinet) whose units differ adds the two
//!   units' uplinks, and traffic that leaves the outermost unit (or any inter-group traffic
//!   when there are no levels) crosses the core;
//! - the login and storage nodes sit on the core with their own NIC.
//!
//! Pure arithmetic on integer nanoseconds: deterministic, no clock.

use crate::plan::{NodeId, Plan};
use crate::topology::{GroupId, Topology};

use super::Network;

/// Index of one link direction (a FIFO server).
pub(crate) type Res = u32;

/// Nanoseconds to move `bytes` at `bw` bytes per second (0 for an unlimited link).
pub fn transfer_ns(bytes: u64, bw: f64) -> u64 {
    if !bw.is_finite() || bytes == 0 {
        return 0;
    }
    (bytes as f64 * 1e9 / bw).round() as u64
}

/// Where a host sits: its group and whether it is the group's proxy (`None`: on the core).
#[derive(Debug, Clone, Copy)]
struct Place {
    group: Option<u32>,
    proxy: bool,
}

/// The links of one simulated machine and their state.
#[derive(Debug)]
pub(crate) struct Links {
    places: Vec<Place>,
    /// `units[level][group]`.
    units: Vec<Vec<u32>>,
    /// First resource of each level's units (2 per unit: out, in).
    level_base: Vec<u32>,
    group_base: u32,
    core: Res,
    bw: Vec<f64>,
    busy: Vec<u64>,
    bytes: Vec<u64>,
    ngroups: u32,
}

/// Resources per group: port tx, port rx, uplink out, uplink in.
const PER_GROUP: u32 = 4;

impl Links {
    pub(crate) fn new(plan: &Plan, topology: Option<&Topology>, net: &Network) -> Self {
        let mut bw = Vec::new();
        let mut places = Vec::with_capacity(plan.len());
        for (i, t) in plan.topo.iter().enumerate() {
            let place = match (t, topology) {
                (Some(t), Some(topo)) => Place {
                    group: Some(topo.group_of(*t).0),
                    proxy: topo.is_proxy(*t),
                },
                _ => Place {
                    group: None,
                    proxy: false,
                },
            };
            let nic = match (place.group, plan.roles[i]) {
                (Some(_), _) => net.node_bw,
                (None, crate::plan::Role::Storage) => net.storage_bw,
                (None, _) => net.login_bw,
            };
            bw.extend([nic, nic]);
            places.push(place);
        }
        let ngroups = topology.map_or(0, |t| t.groups().len() as u32);
        let group_base = bw.len() as u32;
        for _ in 0..ngroups {
            bw.extend([net.port_bw, net.port_bw, net.uplink_bw, net.uplink_bw]);
        }
        let mut units = Vec::new();
        let mut level_base = Vec::new();
        if let Some(topo) = topology {
            for level in 0..topo.levels().len() {
                let per_group: Vec<u32> =
                    (0..ngroups).map(|g| topo.unit(level, GroupId(g))).collect();
                let count = per_group.iter().max().map_or(0, |m| m + 1);
                level_base.push(bw.len() as u32);
                let lbw = net.level_bw.get(level).copied().unwrap_or(f64::INFINITY);
                bw.extend(std::iter::repeat_n(lbw, 2 * count as usize));
                units.push(per_group);
            }
        }
        let core = bw.len() as u32;
        bw.push(net.core_bw);
        let n = bw.len();
        Self {
            places,
            units,
            level_base,
            group_base,
            core,
            bw,
            busy: vec![0; n],
            bytes: vec![0; n],
            ngroups,
        }
    }

    fn nic_tx(h: NodeId) -> Res {
        2 * h.0
    }

    fn nic_rx(h: NodeId) -> Res {
        2 * h.0 + 1
    }

    fn group_res(&self, g: u32, k: u32) -> Res {
        self.group_base + PER_GROUP * g + k
    }

    /// The links a transfer from `a` to `b` crosses, in order.
    pub(crate) fn path(&self, a: NodeId, b: NodeId, out: &mut Vec<Res>) {
        out.clear();
        let (pa, pb) = (self.places[a.index()], self.places[b.index()]);
        if pa.group.is_some() && pa.group == pb.group {
            let g = pa.group.unwrap_or_default();
            out.push(if pa.proxy {
                self.group_res(g, 0)
            } else {
                Self::nic_tx(a)
            });
            out.push(if pb.proxy {
                self.group_res(g, 1)
            } else {
                Self::nic_rx(b)
            });
            return;
        }
        match pa.group {
            None => out.push(Self::nic_tx(a)),
            Some(g) => {
                if !pa.proxy {
                    out.extend([Self::nic_tx(a), self.group_res(g, 1)]);
                }
                out.push(self.group_res(g, 2));
            }
        }
        let levels = self.units.len();
        let mut core = levels == 0;
        for (level, units) in self.units.iter().enumerate() {
            let ua = pa.group.map(|g| units[g as usize]);
            let ub = pb.group.map(|g| units[g as usize]);
            if ua != ub {
                let base = self.level_base[level];
                if let Some(u) = ua {
                    out.push(base + 2 * u);
                }
                if let Some(u) = ub {
                    out.push(base + 2 * u + 1);
                }
                if level == levels - 1 {
                    core = true;
                }
            }
        }
        if core {
            out.push(self.core);
        }
        match pb.group {
            None => out.push(Self::nic_rx(b)),
            Some(g) => {
                out.push(self.group_res(g, 3));
                if !pb.proxy {
                    out.extend([self.group_res(g, 0), Self::nic_rx(b)]);
                }
            }
        }
    }

    /// Queues `bytes` on every link of `path` from `t` (never in the future of a later
    /// call: callers pass the present); returns when the last link is done
    /// and counts the bytes on each link when `count` is set.
    pub(crate) fn transfer(&mut self, path: &[Res], t: u64, bytes: u64, count: bool) -> u64 {
        let mut done = t;
        for &r in path {
            let r = r as usize;
            if count {
                self.bytes[r] += bytes;
            }
            if self.bw[r].is_infinite() {
                continue;
            }
            let start = self.busy[r].max(t);
            let end = start + transfer_ns(bytes, self.bw[r]);
            self.busy[r] = end;
            done = done.max(end);
        }
        done
    }

    /// Counted bytes that entered groups over their uplinks.
    pub(crate) fn uplink_in(&self) -> u64 {
        self.group_sum(3)
    }

    /// Counted bytes that left groups over their uplinks.
    pub(crate) fn uplink_out(&self) -> u64 {
        self.group_sum(2)
    }

    /// Counted bytes that entered one group over its uplink.
    pub(crate) fn group_uplink_in(&self, g: u32) -> u64 {
        self.group_bytes(g, 3)
    }

    /// Counted bytes that left one group over its uplink.
    pub(crate) fn group_uplink_out(&self, g: u32) -> u64 {
        self.group_bytes(g, 2)
    }

    fn group_bytes(&self, g: u32, k: u32) -> u64 {
        if g < self.ngroups {
            self.bytes[self.group_res(g, k) as usize]
        } else {
            0
        }
    }

    fn group_sum(&self, k: u32) -> u64 {
        (0..self.ngroups)
            .map(|g| self.bytes[self.group_res(g, k) as usize])
            .sum()
    }

    /// Counted bytes over the core.
    pub(crate) fn core_bytes(&self) -> u64 {
        self.bytes[self.core as usize]
    }

    /// Counted bytes received on a host's own NIC (a proxy's group traffic uses its port).
    pub(crate) fn nic_rx_bytes(&self, h: NodeId) -> u64 {
        self.bytes[Self::nic_rx(h) as usize]
    }

    /// Counted bytes sent on each host's own NIC.
    pub(crate) fn nic_tx_bytes(&self, h: NodeId) -> u64 {
        self.bytes[Self::nic_tx(h) as usize]
    }
}

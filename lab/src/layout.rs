//! The lab's shape as pure data: which namespaces, bridges, links, addresses, routes and
//! rate caps a lab of `groups x group_size` nodes has. Nothing here touches the system, so
//! the address plan and naming rules are tested without root.
//!
//! Shape: a switch namespace holds one `core` bridge and one bridge per group. Each group's
//! proxy has two links: `eth0` on the core (the group's only uplink) and `eth1` on its
//! group bridge. Slaves have `eth0` on the group bridge and route everything through their
//! proxy, which forwards. Login and storage nodes sit on the core, and so does `ctl`, the
//! Slurm controller's host, which has no teesfs certificate (a site's slurmctld host holds
//! no store and no key).

use std::net::Ipv4Addr;

use crate::error::{LabError, Result};

/// Link rates in bits per second, per link class.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rates {
    /// A slave's link to its group bridge.
    pub slave: u64,
    /// A proxy's uplink to the core (the group's only way out).
    pub proxy_uplink: u64,
    /// A proxy's port on its group bridge.
    pub proxy_group: u64,
    /// The login node's link to the core.
    pub login: u64,
    /// The storage node's (fat) link to the core.
    pub storage: u64,
}

impl Default for Rates {
    /// The reference shape of DESIGN.md.
    fn default() -> Self {
        const MBIT: u64 = 1_000_000;
        Self {
            slave: 100 * MBIT,
            proxy_uplink: 400 * MBIT,
            proxy_group: 400 * MBIT,
            login: 400 * MBIT,
            storage: 1_000 * MBIT,
        }
    }
}

/// What to build.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LabSpec {
    /// Number of groups.
    pub groups: usize,
    /// Nodes per group, the first being the proxy.
    pub group_size: usize,
    /// Link caps.
    pub rates: Rates,
    /// MTU of every link and bridge: [`JUMBO_MTU`] by default, as on the RoCE and IPoIB
    /// fabrics of HPC machines (1500 stands for plain Ethernet).
    pub mtu: u32,
}

/// Jumbo frames: the MTU of RoCE and datagram-mode IPoIB fabrics.
pub const JUMBO_MTU: u32 = 9000;

impl Default for LabSpec {
    /// 4 groups of 8: the reference shape.
    fn default() -> Self {
        Self {
            groups: 4,
            group_size: 8,
            rates: Rates::default(),
            mtu: JUMBO_MTU,
        }
    }
}

/// A node's place in the lab.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The login node: root of every push.
    Login,
    /// The shared-storage node (fat link).
    Storage,
    /// The Slurm controller's host (`ctl`): no certificate, no daemon.
    Controller,
    /// First node of a group: holds the uplink, forwards for its group.
    Proxy,
    /// Any other compute node.
    Slave,
}

/// One interface of a node: a veth pair whose other end is a port on a bridge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Iface {
    /// Name inside the node's namespace (`eth0`, `eth1`).
    pub name: String,
    /// Name of the peer end in the switch namespace (at most 15 characters).
    pub port: String,
    /// The bridge the port is attached to.
    pub bridge: String,
    /// The node's address on this link.
    pub addr: Ipv4Addr,
    /// Prefix length.
    pub prefix: u8,
    /// Cap in bits per second, applied to both directions.
    pub rate: u64,
}

/// A route: `dest` (`default` or `a.b.c.d/n`) via a gateway.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    /// Destination.
    pub dest: String,
    /// Gateway.
    pub via: Ipv4Addr,
}

/// One node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeSpec {
    /// Host name (also its certificate name).
    pub host: String,
    /// Network namespace name.
    pub netns: String,
    /// Role.
    pub role: Role,
    /// Group, for proxies and slaves.
    pub group: Option<usize>,
    /// Its links; `ifaces[0]` carries the daemon's address.
    pub ifaces: Vec<Iface>,
    /// Routes beyond the connected subnets.
    pub routes: Vec<Route>,
    /// Whether it forwards packets (proxies).
    pub forward: bool,
}

impl NodeSpec {
    /// The address peers reach it on.
    pub fn addr(&self) -> Ipv4Addr {
        self.ifaces[0].addr
    }
}

/// The whole lab.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    /// Unique prefix carried by every namespace of this lab.
    pub prefix: String,
    /// The namespace holding all bridges.
    pub switch_netns: String,
    /// Bridges in the switch namespace (`core`, `g0`, ...).
    pub bridges: Vec<String>,
    /// Login, storage, ctl, then the groups in order (proxy first).
    pub nodes: Vec<NodeSpec>,
    /// The spec it was built from.
    pub spec: LabSpec,
}

/// Every lab namespace starts with this, so `teesfs lab clean` can find leftovers.
pub const PREFIX_ROOT: &str = "tlab";

/// The core subnet's first three octets; group `g` uses `10.77.(g+1).0/24`.
const NET: [u8; 2] = [10, 77];

fn core_addr(last: u8) -> Ipv4Addr {
    Ipv4Addr::new(NET[0], NET[1], 0, last)
}

fn group_addr(g: usize, last: u8) -> Ipv4Addr {
    Ipv4Addr::new(NET[0], NET[1], (g + 1) as u8, last)
}

/// The proxy of group `g`'s address on the core.
fn proxy_core_addr(g: usize) -> Ipv4Addr {
    core_addr(10 + g as u8)
}

/// A group's proxy: a port on the core switch (its uplink) and the group's first port.
fn proxy_node(host: String, netns: String, g: usize, r: Rates, routes: Vec<Route>) -> NodeSpec {
    NodeSpec {
        netns,
        role: Role::Proxy,
        group: Some(g),
        ifaces: vec![
            Iface {
                name: "eth0".into(),
                port: format!("c-p{g}"),
                bridge: "core".into(),
                addr: proxy_core_addr(g),
                prefix: 24,
                rate: r.proxy_uplink,
            },
            Iface {
                name: "eth1".into(),
                port: format!("g{g}-0"),
                bridge: format!("g{g}"),
                addr: group_addr(g, 1),
                prefix: 24,
                rate: r.proxy_group,
            },
        ],
        routes,
        forward: true,
        host,
    }
}

/// The `i`th member of group `g` (not its proxy), routed through the proxy.
fn slave_node(host: String, netns: String, g: usize, i: usize, r: Rates) -> NodeSpec {
    NodeSpec {
        netns,
        role: Role::Slave,
        group: Some(g),
        ifaces: vec![Iface {
            name: "eth0".into(),
            port: format!("g{g}-{i}"),
            bridge: format!("g{g}"),
            addr: group_addr(g, 1 + i as u8),
            prefix: 24,
            rate: r.slave,
        }],
        routes: vec![Route {
            dest: "default".into(),
            via: group_addr(g, 1),
        }],
        forward: false,
        host,
    }
}

impl Layout {
    /// Lays out `spec` under `prefix` (e.g. `tlab3f2a`).
    pub fn new(prefix: &str, spec: &LabSpec) -> Result<Self> {
        if spec.groups == 0 || spec.groups > 200 {
            return Err(LabError::Shape(format!(
                "{} groups: need 1 to 200",
                spec.groups
            )));
        }
        if spec.group_size == 0 || spec.group_size > 250 {
            return Err(LabError::Shape(format!(
                "groups of {}: need 1 to 250 nodes",
                spec.group_size
            )));
        }
        if !(576..=65_535).contains(&spec.mtu) {
            return Err(LabError::Shape(format!(
                "MTU {}: need 576 to 65535 (1500 for Ethernet, 9000 for jumbo frames)",
                spec.mtu
            )));
        }
        if !prefix.starts_with(PREFIX_ROOT) || prefix.len() > 12 {
            return Err(LabError::Shape(format!(
                "prefix {prefix:?} must start with {PREFIX_ROOT:?} and be at most 12 characters"
            )));
        }
        let r = spec.rates;
        let ns = |host: &str| format!("{prefix}-{host}");
        let mut nodes = Vec::new();
        let group_routes = |except: Option<usize>| -> Vec<Route> {
            (0..spec.groups)
                .filter(|&g| Some(g) != except)
                .map(|g| Route {
                    dest: format!("{}/24", group_addr(g, 0)),
                    via: proxy_core_addr(g),
                })
                .collect()
        };
        for (host, last, port, rate, role) in [
            ("login", 1, "c-login", r.login, Role::Login),
            ("storage", 2, "c-stor", r.storage, Role::Storage),
            ("ctl", 3, "c-ctl", r.login, Role::Controller),
        ] {
            nodes.push(NodeSpec {
                host: host.into(),
                netns: ns(host),
                role,
                group: None,
                ifaces: vec![Iface {
                    name: "eth0".into(),
                    port: port.into(),
                    bridge: "core".into(),
                    addr: core_addr(last),
                    prefix: 24,
                    rate,
                }],
                routes: group_routes(None),
                forward: false,
            });
        }
        let total = spec.groups * spec.group_size;
        let width = total.to_string().len().max(2);
        for g in 0..spec.groups {
            for i in 0..spec.group_size {
                let host = format!("n{:0width$}", g * spec.group_size + i + 1);
                let netns = ns(&host);
                let node = if i == 0 {
                    proxy_node(host, netns, g, r, group_routes(Some(g)))
                } else {
                    slave_node(host, netns, g, i, r)
                };
                nodes.push(node);
            }
        }
        let mut bridges = vec!["core".to_string()];
        bridges.extend((0..spec.groups).map(|g| format!("g{g}")));
        Ok(Self {
            prefix: prefix.to_string(),
            switch_netns: format!("{prefix}-sw"),
            bridges,
            nodes,
            spec: spec.clone(),
        })
    }

    /// The lab's link rates as `teesfs push --links` takes them.
    pub fn links(&self) -> String {
        let r = self.spec.rates;
        format!(
            "node={}bit,port={}bit,uplink={}bit,login={}bit",
            r.slave, r.proxy_group, r.proxy_uplink, r.login
        )
    }

    /// A fresh random prefix such as `tlab3f2a`.
    pub fn random_prefix() -> String {
        let mut b = [0u8; 2];
        // A clock-derived fallback keeps the lab usable where getrandom fails.
        if getrandom::fill(&mut b).is_err() {
            let t = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.subsec_nanos())
                .unwrap_or(0);
            b = [(t >> 8) as u8, t as u8 ^ std::process::id() as u8];
        }
        format!("{PREFIX_ROOT}{:02x}{:02x}", b[0], b[1])
    }

    /// The node called `host`.
    pub fn node(&self, host: &str) -> Option<&NodeSpec> {
        self.nodes.iter().find(|n| n.host == host)
    }

    /// The compute nodes (proxies and slaves), in hostlist order.
    pub fn compute(&self) -> impl Iterator<Item = &NodeSpec> {
        self.nodes
            .iter()
            .filter(|n| matches!(n.role, Role::Proxy | Role::Slave))
    }

    /// The proxies, group order.
    pub fn proxies(&self) -> impl Iterator<Item = &NodeSpec> {
        self.nodes.iter().filter(|n| n.role == Role::Proxy)
    }

    /// The compute nodes as one Slurm hostlist, e.g. `n[01-32]`.
    pub fn hostlist(&self) -> String {
        let hosts: Vec<&str> = self.compute().map(|n| n.host.as_str()).collect();
        match (hosts.first(), hosts.last()) {
            (Some(a), Some(b)) if a == b => a.to_string(),
            (Some(a), Some(b)) => format!("n[{}-{}]", &a[1..], &b[1..]),
            _ => String::new(),
        }
    }

    /// Every host name with a certificate: login, storage and the compute nodes (not the
    /// controller's host).
    pub fn all_hosts(&self) -> Vec<String> {
        self.nodes
            .iter()
            .filter(|n| n.role != Role::Controller)
            .map(|n| n.host.clone())
            .collect()
    }

    /// The link lower bound for every node to receive `bytes`: the slowest link into a
    /// compute node must carry them once.
    pub fn lower_bound_s(&self, bytes: u64) -> f64 {
        let slowest = self
            .compute()
            .flat_map(|n| n.ifaces.iter().map(|i| i.rate))
            .min()
            .unwrap_or(1);
        bytes as f64 * 8.0 / slowest as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reference_shape() {
        let l = Layout::new("tlab0001", &LabSpec::default()).expect("valid");
        assert_eq!(l.nodes.len(), 3 + 32);
        let ctl = l.node("ctl").expect("ctl");
        assert_eq!(ctl.role, Role::Controller);
        assert_eq!(ctl.addr(), Ipv4Addr::new(10, 77, 0, 3));
        assert_eq!(
            ctl.routes.len(),
            4,
            "ctl reaches every group through its proxy"
        );
        assert!(
            !l.all_hosts().contains(&"ctl".to_string()),
            "no certificate"
        );
        assert_eq!(l.all_hosts().len(), 2 + 32);
        assert_eq!(l.hostlist(), "n[01-32]");
        assert_eq!(l.proxies().count(), 4);
        let n09 = l.node("n09").expect("n09");
        assert_eq!(n09.role, Role::Proxy);
        assert_eq!(n09.group, Some(1));
        assert_eq!(n09.ifaces[0].addr, Ipv4Addr::new(10, 77, 0, 11));
        assert_eq!(n09.ifaces[1].addr, Ipv4Addr::new(10, 77, 2, 1));
        let n10 = l.node("n10").expect("n10");
        assert_eq!(n10.routes[0].via, Ipv4Addr::new(10, 77, 2, 1));
        assert_eq!(n10.addr(), Ipv4Addr::new(10, 77, 2, 2));
        // 16 MiB at 100 Mbit/s: DESIGN.md's 1.34 s.
        assert!((l.lower_bound_s(16 << 20) - 1.342).abs() < 0.01);
    }

    #[test]
    fn names_fit_the_kernel() {
        let spec = LabSpec {
            groups: 200,
            group_size: 250,
            ..LabSpec::default()
        };
        let l = Layout::new("tlabffff", &spec).expect("valid");
        for n in &l.nodes {
            for i in &n.ifaces {
                assert!(i.port.len() <= 15, "{}", i.port);
                assert!(i.bridge.len() <= 15, "{}", i.bridge);
            }
            assert!(n.netns.starts_with(PREFIX_ROOT));
        }
        assert_eq!(l.hostlist(), "n[00001-50000]");
        let ports: std::collections::HashSet<_> = l
            .nodes
            .iter()
            .flat_map(|n| n.ifaces.iter().map(|i| i.port.clone()))
            .collect();
        assert_eq!(
            ports.len(),
            l.nodes.iter().map(|n| n.ifaces.len()).sum::<usize>()
        );
    }

    #[test]
    fn bad_shapes_are_refused() {
        let spec = LabSpec {
            groups: 0,
            ..LabSpec::default()
        };
        assert!(Layout::new("tlab0001", &spec).is_err());
        assert!(Layout::new("other", &LabSpec::default()).is_err());
        assert!(Layout::random_prefix().starts_with(PREFIX_ROOT));
    }
}

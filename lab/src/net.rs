//! Building and tearing down the lab's network: namespaces, bridges, veth links, addresses,
//! routes and tbf caps, all from a [`Layout`]. Every bridge lives in the lab's switch
//! namespace and every link has an end in a node namespace, so deleting the lab's
//! namespaces removes everything; nothing is created in the host's namespace.

use serde::Deserialize;

use crate::error::{LabError, Result};
use crate::layout::{Iface, Layout, PREFIX_ROOT};
use crate::sh;

/// The smallest tbf burst that does not split GSO packets at these rates (DESIGN.md).
const MIN_BURST: u64 = 128 * 1024;

/// A built network; dropping it deletes every namespace it made.
#[derive(Debug)]
pub struct Network {
    layout: Layout,
    made: Vec<String>,
}

/// Kernel byte counters of one interface.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Counters {
    /// Bytes received.
    pub rx: u64,
    /// Bytes sent.
    pub tx: u64,
}

impl Counters {
    /// The difference `self - before`.
    pub fn since(self, before: Counters) -> Counters {
        Counters {
            rx: self.rx.saturating_sub(before.rx),
            tx: self.tx.saturating_sub(before.tx),
        }
    }

    /// [`Counters::since`] for each of a list of links (the group uplinks).
    pub fn each_since(after: &[Counters], before: &[Counters]) -> Vec<Counters> {
        after.iter().zip(before).map(|(a, b)| a.since(*b)).collect()
    }
}

impl Network {
    /// Builds the network of `layout`. On failure, whatever was made is removed.
    pub fn build(layout: Layout) -> Result<Self> {
        let mut net = Self {
            layout,
            made: Vec::new(),
        };
        net.build_inner()?;
        Ok(net)
    }

    /// The layout this network was built from.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    fn add_netns(&mut self, name: &str) -> Result<()> {
        sh::run("ip", &["netns", "add", name])?;
        self.made.push(name.to_string());
        sh::ip_in(name, &["link", "set", "lo", "up"])?;
        // IPv6 chatter (router solicitations, MLD) would pollute the byte counters.
        sh::sh_in(
            name,
            "echo 1 > /proc/sys/net/ipv6/conf/default/disable_ipv6; \
             echo 1 > /proc/sys/net/ipv6/conf/all/disable_ipv6",
        )?;
        Ok(())
    }

    fn build_inner(&mut self) -> Result<()> {
        let sw = self.layout.switch_netns.clone();
        let mtu = self.layout.spec.mtu.to_string();
        self.add_netns(&sw)?;
        // Bridged frames would otherwise pass through iptables (br_netfilter, loaded by
        // Docker and the like): per-packet work a real switch does not do.
        sh::sh_in(
            &sw,
            "for f in /proc/sys/net/bridge/bridge-nf-call-*; do [ -e \"$f\" ] && echo 0 > \"$f\"; done; true",
        )?;
        for b in self.layout.bridges.clone() {
            sh::ip_in(&sw, &["link", "add", &b, "mtu", &mtu, "type", "bridge"])?;
            sh::ip_in(&sw, &["link", "set", &b, "up"])?;
        }
        for node in self.layout.nodes.clone() {
            self.add_netns(&node.netns)?;
            if node.forward {
                sh::sh_in(&node.netns, "echo 1 > /proc/sys/net/ipv4/ip_forward")?;
            }
            for i in &node.ifaces {
                link(&sw, &node.netns, i, &mtu)?;
            }
            for r in &node.routes {
                sh::ip_in(
                    &node.netns,
                    &["route", "add", &r.dest, "via", &r.via.to_string()],
                )?;
            }
        }
        Ok(())
    }

    /// Kernel counters of `iface` in `host`'s namespace.
    pub fn counters(&self, host: &str, iface: &str) -> Result<Counters> {
        let node = self
            .layout
            .node(host)
            .ok_or_else(|| LabError::Shape(format!("no node {host}")))?;
        counters(&node.netns, iface)
    }

    /// Counters of every group's uplink (each proxy's `eth0`), group order.
    pub fn uplinks(&self) -> Result<Vec<Counters>> {
        self.layout
            .proxies()
            .map(|p| counters(&p.netns, "eth0"))
            .collect()
    }

    /// Deletes every namespace (and so every link and bridge) of this lab.
    pub fn teardown(&mut self) -> Result<()> {
        let mut first_err = None;
        for ns in self.made.drain(..).rev() {
            if let Err(e) = sh::run("ip", &["netns", "del", &ns])
                && first_err.is_none()
            {
                first_err = Some(e);
            }
        }
        first_err.map_or(Ok(()), Err)
    }
}

impl Drop for Network {
    fn drop(&mut self) {
        if let Err(e) = self.teardown() {
            tracing::warn!("lab teardown: {e}; run `teesfs lab clean`");
        }
    }
}

/// One veth link from a node to a bridge, capped both ways.
fn link(sw: &str, netns: &str, i: &Iface, mtu: &str) -> Result<()> {
    sh::ip_in(
        sw,
        &[
            "link", "add", &i.port, "mtu", mtu, "type", "veth", "peer", "name", &i.name, "mtu",
            mtu, "netns", netns,
        ],
    )?;
    sh::ip_in(sw, &["link", "set", &i.port, "master", &i.bridge, "up"])?;
    let cidr = format!("{}/{}", i.addr, i.prefix);
    sh::ip_in(netns, &["addr", "add", &cidr, "dev", &i.name])?;
    sh::ip_in(netns, &["link", "set", &i.name, "up"])?;
    shape(sw, &i.port, i.rate)?;
    shape(netns, &i.name, i.rate)
}

/// tbf on the egress of `dev`: its rate, a burst that keeps GSO packets whole.
fn shape(netns: &str, dev: &str, rate: u64) -> Result<()> {
    let burst = (rate / 8 / 250).max(MIN_BURST);
    sh::tc_in(
        netns,
        &[
            "qdisc",
            "replace",
            "dev",
            dev,
            "root",
            "tbf",
            "rate",
            &format!("{rate}bit"),
            "burst",
            &burst.to_string(),
            "latency",
            "50ms",
        ],
    )?;
    Ok(())
}

#[derive(Deserialize)]
struct LinkJson {
    stats64: Stats64,
}

#[derive(Deserialize)]
struct Stats64 {
    rx: Dir,
    tx: Dir,
}

#[derive(Deserialize)]
struct Dir {
    bytes: u64,
}

/// Kernel counters of `iface` in namespace `netns`, read over netlink (`ip -n`), which sees
/// the namespace's own interfaces (unlike /sys under `nsenter --net`).
pub fn counters(netns: &str, iface: &str) -> Result<Counters> {
    let out = sh::ip_in(netns, &["-s", "-j", "link", "show", "dev", iface])?;
    let parsed: Vec<LinkJson> = serde_json::from_str(&out).map_err(|e| LabError::Parse {
        what: format!("`ip -s -j link` of {iface} in {netns}"),
        detail: e.to_string(),
    })?;
    let l = parsed.first().ok_or_else(|| LabError::Parse {
        what: format!("`ip -s -j link` of {iface} in {netns}"),
        detail: "no interface".into(),
    })?;
    Ok(Counters {
        rx: l.stats64.rx.bytes,
        tx: l.stats64.tx.bytes,
    })
}

/// Lab namespaces present on this machine (any lab, any run).
pub fn lab_namespaces() -> Result<Vec<String>> {
    let out = sh::run("ip", &["netns", "list"])?;
    Ok(out
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| n.starts_with(PREFIX_ROOT))
        .map(str::to_string)
        .collect())
}

/// Processes still running in namespace `netns`.
pub fn namespace_pids(netns: &str) -> Result<Vec<i32>> {
    let out = sh::run("ip", &["netns", "pids", netns])?;
    Ok(out.lines().filter_map(|l| l.trim().parse().ok()).collect())
}

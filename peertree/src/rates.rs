//! The machine's link rates, as far as the planner needs them: how many full-rate streams
//! each kind of link carries.
//!
//! A tree runs at the rate of its slowest edge, so a host should feed no more children at
//! once than its link carries at a node's own rate. On Tianhe a proxy's port carries its
//! whole group (8 x a node), so the proxy feeds every member itself; where the port is
//! narrower (the lab: 4 x a node), members must relay to members to keep every receiver at
//! its link rate. Rates come from `topology.toml`'s `[links]` table or the command line;
//! without them the planner assumes the Tianhe shape. Pure parsing and arithmetic.

use serde::Deserialize;

use crate::error::{Error, Result};
use crate::plan::NodeId;
use crate::topology::GroupId;

/// How close (1 / this of a node's rate) a link must come to carrying one more stream at a
/// node's rate to count as carrying it ([`LinkRates::streams`]).
const STREAM_SLACK: u64 = 100;

/// Link rates in bits per second.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinkRates {
    /// A compute node's NIC, each direction.
    pub node: u64,
    /// A proxy's port toward its own group.
    pub port: u64,
    /// A group's uplink (the proxy's link to the rest of the machine).
    pub uplink: u64,
    /// The login node's link.
    pub login: u64,
}

impl LinkRates {
    /// Streams at a node's full rate that a link of `rate` carries at once (at least one).
    ///
    /// A link within 1% of a whole number of streams carries that many: rates are
    /// configured or scaled figures, and a login link of 182,333,334 bit/s over nodes of
    /// 45,583,334 (four times 45,583,333.5 each rounded) carries four streams, not three.
    pub fn streams(&self, rate: u64) -> usize {
        let node = self.node.max(1);
        usize::try_from(rate.saturating_add(node / STREAM_SLACK) / node)
            .unwrap_or(usize::MAX)
            .max(1)
    }

    /// Members a proxy feeds directly through its port.
    pub fn port_streams(&self) -> usize {
        self.streams(self.port)
    }

    /// Other groups a proxy feeds through its uplink.
    pub fn uplink_streams(&self) -> usize {
        self.streams(self.uplink)
    }

    /// Hosts the login node feeds directly.
    pub fn login_streams(&self) -> usize {
        self.streams(self.login)
    }

    /// Children a non-proxy member feeds: what its own NIC carries at a node's rate.
    pub fn member_streams(&self) -> usize {
        1
    }

    /// The rate each host of a tree receives at, in bits per second (`None` for the root):
    /// its share of the link its parent sends it through, split evenly among the parent's
    /// children on that link, and no more than its own link carries. The login node sends
    /// through its link; a proxy through its port to its own group and through its uplink to
    /// other groups; any other host through its NIC. A proxy entered from outside its group
    /// receives through its uplink, any other host through its NIC.
    ///
    /// Without pacing, the streams of one sender share its link as their congestion
    /// controllers happen to (measured in the lab: the login node filled one proxy at
    /// 400 Mbit/s while the others waited, and their groups started late); at these
    /// rates every subtree fills at once.
    pub fn edge_rates(
        &self,
        parent: &[Option<NodeId>],
        children: &[Vec<NodeId>],
        proxy: &[bool],
        group: &[Option<GroupId>],
    ) -> Vec<Option<u64>> {
        #[derive(PartialEq, Clone, Copy)]
        enum Via {
            Login,
            Port,
            Uplink,
            Nic,
        }
        let via = |p: NodeId, c: NodeId| {
            if parent[p.index()].is_none() {
                Via::Login
            } else if proxy[p.index()] {
                if group[c.index()].is_some() && group[c.index()] == group[p.index()] {
                    Via::Port
                } else {
                    Via::Uplink
                }
            } else {
                Via::Nic
            }
        };
        let mut rate = vec![None; parent.len()];
        for (p, kids) in children.iter().enumerate() {
            let p = NodeId(p as u32);
            let links: Vec<Via> = kids.iter().map(|&c| via(p, c)).collect();
            // Children of `p` on each of its links.
            let mut sharing = [0u64; 4];
            for &l in &links {
                sharing[l as usize] += 1;
            }
            for (&c, &link) in kids.iter().zip(&links) {
                let sharing = sharing[link as usize];
                let capacity = match link {
                    Via::Login => self.login,
                    Via::Port => self.port,
                    Via::Uplink => self.uplink,
                    Via::Nic => self.node,
                };
                let entered_from_outside = group[c.index()] != group[p.index()];
                let own = if proxy[c.index()] && entered_from_outside {
                    self.uplink
                } else {
                    self.node
                };
                rate[c.index()] = Some((capacity / sharing).min(own));
            }
        }
        relay_paced(parent, children, &mut rate);
        rate
    }

    /// Parses `node=100mbit,port=400mbit,uplink=400mbit,login=400mbit` (every key
    /// required, any order). Errors name the bad part.
    pub fn parse(spec: &str) -> Result<Self> {
        let mut node = None;
        let mut port = None;
        let mut uplink = None;
        let mut login = None;
        for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (key, value) = part.split_once('=').ok_or_else(|| {
                Error::Rates(format!("`{part}` is not key=rate (e.g. node=100mbit)"))
            })?;
            let slot = match key.trim() {
                "node" => &mut node,
                "port" => &mut port,
                "uplink" => &mut uplink,
                "login" => &mut login,
                other => {
                    return Err(Error::Rates(format!(
                        "unknown link `{other}`: the links are node, port, uplink and login"
                    )));
                }
            };
            *slot = Some(parse_rate(value)?);
        }
        let need = |v: Option<u64>, key: &str| {
            v.ok_or_else(|| Error::Rates(format!("`{key}=RATE` is missing in `{spec}`")))
        };
        Ok(Self {
            node: need(node, "node")?,
            port: need(port, "port")?,
            uplink: need(uplink, "uplink")?,
            login: need(login, "login")?,
        })
    }
}

/// Paces a host that relays no faster than it passes the payload on: at most the fastest
/// of its children's edges (children first, so a chain of relays is capped from below). A
/// leaf keeps its share of its parent's link.
///
/// A relay's subtree cannot take the payload faster than its children's edges, so a
/// faster inbound only makes the relay finish alone and early, and the burst costs it: in
/// the scale-model lab a proxy fed alone by the login node at its uplink's 400 Mbit/s (4
/// node streams) while it fed its members at 100 was throttled by its CPU quota for 2.08 s
/// of a 2.88 s push, and its members completed at 2.5 s where those of proxies fed at 100
/// did at 2.0 s (BENCHMARKS.md, "The login node's copies").
fn relay_paced(parent: &[Option<NodeId>], children: &[Vec<NodeId>], rate: &mut [Option<u64>]) {
    let root = parent.iter().position(Option::is_none);
    let mut order: Vec<usize> = root.into_iter().collect();
    let mut i = 0;
    while i < order.len() {
        order.extend(children[order[i]].iter().map(|c| c.index()));
        i += 1;
    }
    for &n in order.iter().rev() {
        let fastest = children[n].iter().filter_map(|c| rate[c.index()]).max();
        if let (Some(own), Some(fastest)) = (rate[n], fastest) {
            rate[n] = Some(own.min(fastest));
        }
    }
}

/// `[links]` of `topology.toml`, rates as text.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct LinksSpec {
    node: String,
    port: String,
    uplink: String,
    login: String,
}

impl LinksSpec {
    pub(crate) fn rates(&self) -> Result<LinkRates> {
        Ok(LinkRates {
            node: parse_rate(&self.node)?,
            port: parse_rate(&self.port)?,
            uplink: parse_rate(&self.uplink)?,
            login: parse_rate(&self.login)?,
        })
    }
}

/// Parses a rate in bits per second: `100mbit`, `10Gbit`, `1.5gbit`, `400000kbit` or a
/// plain number of bits per second.
pub fn parse_rate(s: &str) -> Result<u64> {
    let l = s.trim().to_ascii_lowercase();
    let l = l.strip_suffix("/s").unwrap_or(&l);
    let (num, mul) = [("gbit", 1e9), ("mbit", 1e6), ("kbit", 1e3), ("bit", 1.0)]
        .iter()
        .find_map(|(unit, mul)| l.strip_suffix(unit).map(|n| (n, *mul)))
        .unwrap_or((l, 1.0));
    num.trim()
        .parse::<f64>()
        .ok()
        .filter(|v| v.is_finite() && *v > 0.0)
        .map(|v| (v * mul).round() as u64)
        .filter(|v| *v > 0)
        .ok_or_else(|| Error::Rates(format!("bad rate `{s}`: use e.g. 100mbit, 10gbit")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_parse_with_units_and_name_the_bad_part() {
        assert_eq!(parse_rate("100mbit"), Ok(100_000_000));
        assert_eq!(parse_rate("10Gbit/s"), Ok(10_000_000_000));
        assert_eq!(parse_rate("1.5gbit"), Ok(1_500_000_000));
        assert_eq!(parse_rate("800"), Ok(800));
        for bad in ["", "fast", "-3mbit", "0gbit", "nanmbit"] {
            let e = parse_rate(bad).expect_err(bad).to_string();
            assert!(e.contains("use e.g. 100mbit"), "{e}");
        }
        let r = LinkRates::parse("port=400mbit, node=100mbit,uplink=400mbit,login=1gbit")
            .expect("valid");
        assert_eq!(
            (r.port_streams(), r.uplink_streams(), r.login_streams()),
            (4, 4, 10)
        );
        let e = LinkRates::parse("node=100mbit,port=400mbit,uplink=1gbit")
            .expect_err("no login")
            .to_string();
        assert!(e.contains("`login=RATE` is missing"), "{e}");
        let e = LinkRates::parse("node=100mbit,nic=1gbit")
            .expect_err("unknown")
            .to_string();
        assert!(e.contains("unknown link `nic`"), "{e}");
    }

    #[test]
    fn a_link_a_rounding_short_of_n_streams_carries_n() {
        // The lab's scaled rates: 4 x 45,583,333.5 and 45,583,333.5 each rounded.
        let r = LinkRates {
            node: 45_583_334,
            port: 182_333_334,
            uplink: 182_333_334,
            login: 182_333_334,
        };
        assert_eq!((r.port_streams(), r.login_streams()), (4, 4));
        // A link 5% short of four streams carries three.
        assert_eq!(r.streams(4 * 45_583_334 * 95 / 100), 3);
    }

    #[test]
    fn a_link_slower_than_a_node_still_carries_one_stream() {
        let r = LinkRates {
            node: 10_000,
            port: 1_000,
            uplink: 80_000,
            login: 0,
        };
        assert_eq!((r.port_streams(), r.uplink_streams()), (1, 8));
        assert_eq!(r.login_streams(), 1);
    }
}

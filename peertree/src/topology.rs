//! The machine's shape: groups of nodes behind one proxy, and optional upper levels.
//!
//! A **group** is a set of nodes whose only way to the rest of the network is the uplink of
//! one of them, the **proxy** (on Tianhe: 8 nodes, the first is the proxy). Upper **levels**
//! (super nodes, cabinets, ...) only feed the hop model in [`crate::metrics`]: a group sits
//! in the unit of each level that holds its proxy, counting nodes in topology order.
//!
//! A topology comes from `topology.toml` ([`Topology::from_toml`], errors name the line) or
//! from a hostlist cut into equal groups ([`Topology::generated`]). This module only parses
//! text it is given; it never opens files.

use std::collections::HashMap;
use std::ops::Range;

use serde::Deserialize;
use toml::Spanned;

use crate::error::{Error, Result};
use crate::hostlist;
use crate::rates::{LinkRates, LinksSpec};

/// Index of a node in a [`Topology`]'s host table (topology order).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TopoId(pub u32);

/// Index of a group in a [`Topology`] (topology order).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GroupId(pub u32);

/// Which member of each generated group is its proxy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ProxyPick {
    /// The first node of each group (Tianhe).
    #[default]
    First,
    /// The last node of each group.
    Last,
}

/// A group: its proxy and all its members (the proxy included), in topology order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Group {
    /// The member that owns the group's uplink.
    pub proxy: TopoId,
    /// Every member, the proxy included.
    pub members: Vec<TopoId>,
}

/// An upper level of the hop model, e.g. `supernode` of 14 nodes or `cabinet` of 168.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Level {
    /// Name for reports.
    pub name: String,
    /// Nodes per unit, counted in topology order.
    pub size: usize,
}

/// The cluster's groups and levels, with a host-name index.
#[derive(Debug, Clone)]
pub struct Topology {
    hosts: Vec<String>,
    index: HashMap<String, TopoId>,
    node_group: Vec<GroupId>,
    groups: Vec<Group>,
    levels: Vec<Level>,
    /// `units[level][group]`: the unit of `level` that holds the group's proxy.
    units: Vec<Vec<u32>>,
    /// Link rates, when known (`[links]`): the planner sizes fan-outs from them.
    links: Option<LinkRates>,
}

impl Topology {
    /// Cuts `nodes` into consecutive groups of `group_size`; the last may be smaller.
    pub fn generated(nodes: &[String], group_size: usize, proxy: ProxyPick) -> Result<Self> {
        if group_size == 0 {
            return Err(Error::TopologyArgs("group size must be at least 1".into()));
        }
        let mut b = Builder::default();
        for chunk in nodes.chunks(group_size) {
            b.add_generated(chunk, proxy)?;
        }
        b.finish(Vec::new())
    }

    /// Builds a topology from explicit groups `(proxy, members)`; members include the proxy.
    pub fn from_groups(groups: &[(String, Vec<String>)], levels: Vec<Level>) -> Result<Self> {
        let mut b = Builder::default();
        for (proxy, members) in groups {
            b.add_group(Some(proxy), members)?;
        }
        b.finish(levels)
    }

    /// Parses `topology.toml` (see `docs/planner.md` for the format).
    ///
    /// ```toml
    /// [[pattern]]            # groups generated from a hostlist
    /// nodes = "cn[00001-17560]"
    /// group_size = 8
    /// proxy = "first"        # or "last"; default "first"
    ///
    /// [[group]]              # or listed one by one
    /// proxy = "io1"          # default: the first member
    /// members = "io[1-4]"
    ///
    /// [[level]]              # optional, innermost first
    /// name = "supernode"
    /// size = 14
    ///
    /// [links]                # optional: link rates, for fan-outs that keep every
    /// node = "10gbit"        # stream at a node's full rate
    /// port = "80gbit"        # a proxy's port toward its group
    /// uplink = "80gbit"      # a group's uplink
    /// login = "80gbit"       # the login node's link
    /// ```
    pub fn from_toml(src: &str) -> Result<Self> {
        let line = |offset: usize| line_of(src, offset);
        let file: File = toml::from_str(src).map_err(|e| Error::TopologySyntax {
            line: e.span().map_or(1, |s| line(s.start)),
            message: e.message().to_owned(),
        })?;
        let at = |span: Range<usize>, message: String| Error::Topology {
            line: line(span.start),
            message,
        };
        let parse = |s: &Spanned<String>| {
            hostlist::expand(s.get_ref()).map_err(|e| at(s.span(), e.to_string()))
        };

        // Keep file order across [[group]] and [[pattern]] tables: it is the topology order.
        let mut entries: Vec<(usize, Entry<'_>)> = file
            .group
            .iter()
            .map(|g| (g.span().start, Entry::Group(g)))
            .chain(
                file.pattern
                    .iter()
                    .map(|p| (p.span().start, Entry::Pattern(p))),
            )
            .collect();
        entries.sort_by_key(|(start, _)| *start);

        let mut b = Builder::default();
        for (_, entry) in entries {
            match entry {
                Entry::Group(g) => {
                    let members = parse(&g.get_ref().members)?;
                    let proxy = g.get_ref().proxy.as_ref().map(|p| p.get_ref().as_str());
                    b.add_group(proxy, &members)
                        .map_err(|e| at(g.span(), e.to_string()))?;
                }
                Entry::Pattern(p) => {
                    let spec = p.get_ref();
                    let nodes = parse(&spec.nodes)?;
                    let size = *spec.group_size.get_ref();
                    if size == 0 {
                        return Err(at(
                            spec.group_size.span(),
                            "group_size must be at least 1".into(),
                        ));
                    }
                    let pick = match spec.proxy.as_ref().map(|s| s.get_ref().as_str()) {
                        None | Some("first") => ProxyPick::First,
                        Some("last") => ProxyPick::Last,
                        Some(other) => {
                            let span = spec.proxy.as_ref().map_or(p.span(), Spanned::span);
                            return Err(at(
                                span,
                                format!("proxy must be \"first\" or \"last\", not {other:?}"),
                            ));
                        }
                    };
                    for chunk in nodes.chunks(size) {
                        b.add_generated(chunk, pick)
                            .map_err(|e| at(spec.nodes.span(), e.to_string()))?;
                    }
                }
            }
        }
        let mut levels = Vec::new();
        for l in &file.level {
            let spec = l.get_ref();
            let size = *spec.size.get_ref();
            if size == 0 || levels.last().is_some_and(|prev: &Level| prev.size >= size) {
                return Err(at(
                    spec.size.span(),
                    "level sizes must be at least 1 and grow from inner to outer level".into(),
                ));
            }
            levels.push(Level {
                name: spec.name.clone(),
                size,
            });
        }
        if b.groups.is_empty() {
            return Err(Error::Topology {
                line: 1,
                message: "no groups: add a [[pattern]] or [[group]] table".into(),
            });
        }
        let links = match &file.links {
            Some(l) => Some(
                l.get_ref()
                    .rates()
                    .map_err(|e| at(l.span(), e.to_string()))?,
            ),
            None => None,
        };
        b.finish(levels)
            .map(|t| t.with_links(links))
            .map_err(|e| Error::Topology {
                line: 1,
                message: e.to_string(),
            })
    }

    /// This topology with the given link rates (`None`: unknown, the Tianhe shape).
    pub fn with_links(mut self, links: Option<LinkRates>) -> Self {
        self.links = links;
        self
    }

    /// The link rates, when known.
    pub fn links(&self) -> Option<&LinkRates> {
        self.links.as_ref()
    }

    /// Number of nodes.
    pub fn len(&self) -> usize {
        self.hosts.len()
    }

    /// True if the topology has no nodes (never, for a built topology).
    pub fn is_empty(&self) -> bool {
        self.hosts.is_empty()
    }

    /// Looks a host name up.
    pub fn lookup(&self, host: &str) -> Option<TopoId> {
        self.index.get(host).copied()
    }

    /// The name of a node.
    pub fn host(&self, id: TopoId) -> &str {
        &self.hosts[id.0 as usize]
    }

    /// The group a node belongs to.
    pub fn group_of(&self, id: TopoId) -> GroupId {
        self.node_group[id.0 as usize]
    }

    /// A group by id.
    pub fn group(&self, id: GroupId) -> &Group {
        &self.groups[id.0 as usize]
    }

    /// All groups in topology order.
    pub fn groups(&self) -> &[Group] {
        &self.groups
    }

    /// True if the node is its group's proxy.
    pub fn is_proxy(&self, id: TopoId) -> bool {
        self.group(self.group_of(id)).proxy == id
    }

    /// Upper levels, innermost first.
    pub fn levels(&self) -> &[Level] {
        &self.levels
    }

    /// The unit of `level` (index into [`Self::levels`]) that holds `group`.
    pub fn unit(&self, level: usize, group: GroupId) -> u32 {
        self.units[level][group.0 as usize]
    }

    /// Number of upper levels whose unit differs between two groups.
    pub fn levels_apart(&self, a: GroupId, b: GroupId) -> u32 {
        self.units
            .iter()
            .filter(|u| u[a.0 as usize] != u[b.0 as usize])
            .count() as u32
    }
}

fn line_of(src: &str, offset: usize) -> usize {
    src.as_bytes()[..offset.min(src.len())]
        .iter()
        .filter(|b| **b == b'\n')
        .count()
        + 1
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    group: Vec<Spanned<GroupSpec>>,
    #[serde(default)]
    pattern: Vec<Spanned<PatternSpec>>,
    #[serde(default)]
    level: Vec<Spanned<LevelSpec>>,
    links: Option<Spanned<LinksSpec>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct GroupSpec {
    proxy: Option<Spanned<String>>,
    members: Spanned<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PatternSpec {
    nodes: Spanned<String>,
    group_size: Spanned<usize>,
    proxy: Option<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LevelSpec {
    name: String,
    size: Spanned<usize>,
}

enum Entry<'a> {
    Group(&'a Spanned<GroupSpec>),
    Pattern(&'a Spanned<PatternSpec>),
}

#[derive(Default)]
struct Builder {
    hosts: Vec<String>,
    index: HashMap<String, TopoId>,
    node_group: Vec<GroupId>,
    groups: Vec<Group>,
}

impl Builder {
    /// Adds one host to the current (last) group; a duplicate is an error naming it.
    fn push_host(&mut self, host: &str) -> Result<TopoId> {
        let id = TopoId(self.hosts.len() as u32);
        if self.index.insert(host.to_owned(), id).is_some() {
            return Err(Error::DuplicateNode {
                host: host.to_owned(),
            });
        }
        self.hosts.push(host.to_owned());
        self.node_group.push(GroupId(self.groups.len() as u32 - 1));
        Ok(id)
    }

    fn add_generated(&mut self, chunk: &[String], pick: ProxyPick) -> Result<()> {
        self.groups.push(Group {
            proxy: TopoId(0),
            members: Vec::with_capacity(chunk.len()),
        });
        let mut members = Vec::with_capacity(chunk.len());
        for host in chunk {
            members.push(self.push_host(host)?);
        }
        let proxy = match pick {
            ProxyPick::First => members[0],
            ProxyPick::Last => members[members.len() - 1],
        };
        let g = self.groups.last_mut().expect("pushed above");
        g.proxy = proxy;
        g.members = members;
        Ok(())
    }

    fn add_group(&mut self, proxy: Option<&str>, members: &[String]) -> Result<()> {
        let first = members.first().ok_or(Error::EmptyGroup)?;
        let proxy = proxy.unwrap_or(first);
        if !members.iter().any(|m| m == proxy) {
            return Err(Error::ProxyNotMember {
                proxy: proxy.to_owned(),
            });
        }
        self.groups.push(Group {
            proxy: TopoId(0),
            members: Vec::with_capacity(members.len()),
        });
        let mut ids = Vec::with_capacity(members.len());
        for m in members {
            ids.push(self.push_host(m)?);
        }
        let proxy = self.index[proxy];
        let g = self.groups.last_mut().expect("pushed above");
        g.proxy = proxy;
        g.members = ids;
        Ok(())
    }

    fn finish(self, levels: Vec<Level>) -> Result<Topology> {
        if self.groups.is_empty() {
            return Err(Error::NoGroups);
        }
        if let Some(l) = levels.iter().find(|l| l.size == 0) {
            return Err(Error::EmptyLevel {
                name: l.name.clone(),
            });
        }
        let units = levels
            .iter()
            .map(|l| {
                self.groups
                    .iter()
                    .map(|g| (g.proxy.0 as usize / l.size) as u32)
                    .collect()
            })
            .collect();
        Ok(Topology {
            hosts: self.hosts,
            index: self.index,
            node_group: self.node_group,
            groups: self.groups,
            levels,
            units,
            links: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_numbers_count_from_one() {
        assert_eq!(line_of("a\nb\nc", 0), 1);
        assert_eq!(line_of("a\nb\nc", 2), 2);
        assert_eq!(line_of("a\nb\nc", 4), 3);
    }
}

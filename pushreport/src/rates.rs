//! Link rates the tree learns from its own pushes, for sites that do not know their
//! effective per-port rates (`[topology] links` unset).
//!
//! A push report says what each edge carried and when each node held the urgent set and the
//! whole layer. From it, [`observe`] takes one figure per link class (the classes of
//! [`peertree::LinkRates`]: a node's NIC, a proxy's port, a group's uplink, the login node's
//! link), every one a *lower bound* of that link's rate: a link carried at least what was
//! seen to cross it.
//!
//! - An edge's rate is the bytes it carried after the child held the urgent set, over the
//!   time from then until the child held everything (the set-up of the push, before the
//!   child was started, is left out). Edges that carried less than [`MIN_BYTES`] or took
//!   less than [`MIN_SECS`] say nothing and are skipped, as are the edges into failed
//!   nodes.
//! - A sender's link carried the sum of its children's rates on that link (they stream at
//!   once): the login node's link, a proxy's port to its group, a proxy's uplink to other
//!   groups, a member's NIC. The sum *measures* the link only when the link held its
//!   streams back: two or more streams that averaged less than [`SHARED`] of the push's
//!   fastest stream. Streams near the fastest were held back by their receivers (or by their
//!   sender's own input) and their sum only bounds the link from below: on the lab's 3 x 14
//!   shape the first push fed two proxies from the login node, each as fast as a proxy took
//!   it, and a login link taken as those two streams planned every later push with two
//!   (the third group behind a proxy: 1.2-1.38x the plan with the lab's rates).
//! - The receiving end's link carried the edge's rate (a lower bound): a proxy entered from
//!   another group receives through its uplink. A node's rate is the fastest stream into a
//!   node through its NIC (compute nodes are alike); streams into proxies through their
//!   uplinks count only when no stream into a member was measured. A proxy's way in may be
//!   wider than a NIC: in the lab the login node's stream into a proxy ran at 95 Mbit/s
//!   over NICs of 76, and a node's rate taken from it made the port 3 streams instead of 4
//!   (BENCHMARKS.md, "Link rates the tree learns"). A push planned without rates feeds 3
//!   members from each port (2 in its probe group) and chains the rest (`peertree`'s topo
//!   strategy), so that some member's stream is held back by nothing but NICs.
//!
//! One push's figure per class is the largest of its lower bounds; [`Observed`] keeps the
//! measured figures apart from the bounds. [`LearnedRates`] keeps
//! the figures of the newest [`KEEP_PUSHES`] pushes of the last [`MAX_AGE_S`] seconds (older
//! ones decay out of it), and its estimate per class is a high percentile
//! ([`PERCENTILE`]) of them: pushes that shared their links with other traffic measure low
//! and do not pull the estimate down, a single odd push does not pull it up once there are
//! four. [`choose`] applies the override rule: configured rates win, learned ones come next
//! (used a quarter faster than measured, so that paced streams can show a faster link),
//! else none.
//!
//! Pure: the caller reads and writes the file (`seeder::rates`) and supplies the clock.

use std::collections::{HashMap, HashSet};

use peertree::LinkRates;
use serde::{Deserialize, Serialize};

use crate::Error;
use crate::format::PushReport;

/// Edges that carried fewer bytes than this (after the urgent set) are not measured.
pub const MIN_BYTES: u64 = 2 << 20;
/// Edges that took less time than this (seconds) are not measured.
pub const MIN_SECS: f64 = 0.2;
/// Pushes whose figures are kept.
pub const KEEP_PUSHES: usize = 16;
/// Figures older than this (seconds; 30 days) are dropped.
pub const MAX_AGE_S: u64 = 30 * 24 * 3600;
/// The percentile of the kept pushes' figures that is the estimate.
pub const PERCENTILE: f64 = 0.75;
/// A link's rate within this many node streams of a whole number of them is taken as that
/// number ([`LearnedRates::estimate`]). A node's figure is its fastest single stream and a
/// link's the sum of several, each a little below its share: in the lab the login link and
/// the ports of 4 node streams measured 3.7-3.8.
pub const SNAP: f64 = 0.35;
/// A sender's link whose streams averaged less than this share of the push's fastest
/// stream was what held them back: their sum measures it. Streams near the fastest were
/// held back by their receivers (or their own input), and their sum only bounds the link
/// from below ([`observe`]).
pub const SHARED: f64 = 0.8;
/// Learned rates are planned and paced this many times as fast as measured ([`choose`]).
pub const HEADROOM: f64 = 1.25;
/// The file format's version.
pub const VERSION: u32 = 1;
/// The largest learned-rates file read back.
pub const MAX_FILE_BYTES: u64 = 1 << 20;

/// The link classes of [`LinkRates`]; in JSON their names in lower case.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LinkClass {
    /// A compute node's NIC.
    Node,
    /// A proxy's port toward its own group.
    Port,
    /// A group's uplink.
    Uplink,
    /// The login node's link.
    Login,
}

/// One push's figures, bits per second; `None` where the push measured nothing.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Figures {
    /// A node's NIC.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<u64>,
    /// A proxy's port.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<u64>,
    /// A group's uplink.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uplink: Option<u64>,
    /// The login node's link.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub login: Option<u64>,
}

impl Figures {
    fn slot(&mut self, class: LinkClass) -> &mut Option<u64> {
        match class {
            LinkClass::Node => &mut self.node,
            LinkClass::Port => &mut self.port,
            LinkClass::Uplink => &mut self.uplink,
            LinkClass::Login => &mut self.login,
        }
    }

    /// Raises the class's figure to at least `bps`.
    fn at_least(&mut self, class: LinkClass, bps: u64) {
        let s = self.slot(class);
        *s = Some(s.map_or(bps, |v| v.max(bps)));
    }

    /// The figure of `class`, if any.
    pub fn get(&self, class: LinkClass) -> Option<u64> {
        match class {
            LinkClass::Node => self.node,
            LinkClass::Port => self.port,
            LinkClass::Uplink => self.uplink,
            LinkClass::Login => self.login,
        }
    }

    /// Whether the push measured anything.
    pub fn is_empty(&self) -> bool {
        *self == Figures::default()
    }
}

impl From<LinkRates> for Figures {
    fn from(r: LinkRates) -> Self {
        Figures {
            node: Some(r.node),
            port: Some(r.port),
            uplink: Some(r.uplink),
            login: Some(r.login),
        }
    }
}

/// What one push showed of each link class (see the module docs): figures it measured and
/// figures it only bounded from below.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Observed {
    /// Measured: a node's fastest stream (or NIC), a sender's link that its streams shared.
    pub figures: Figures,
    /// Lower bounds only: a sender's link whose streams each ran near the fastest stream of
    /// the push (they, not the link, set the pace), a proxy's uplink seen from its receiving
    /// end.
    pub at_least: Figures,
}

impl Observed {
    /// Whether the push showed anything.
    pub fn is_empty(&self) -> bool {
        self.figures.is_empty() && self.at_least.is_empty()
    }
}

/// One edge of a push as [`observe`] measures it: the sender's link it crossed, and the
/// rate it carried after the child held the urgent set.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EdgeRate {
    /// Sender.
    pub parent: String,
    /// Receiver.
    pub child: String,
    /// The sender's link the stream crossed.
    pub link: LinkClass,
    /// Bytes it carried after the child held the urgent set.
    pub bytes: u64,
    /// Seconds from the child holding the urgent set to holding everything.
    pub secs: f64,
    /// Bits per second; `None` when the edge carried less than [`MIN_BYTES`] or took less
    /// than [`MIN_SECS`] (too little to measure).
    pub bps: Option<u64>,
    /// The child is a proxy entered from another group (its uplink carried the stream).
    #[serde(skip)]
    into_uplink: bool,
}

/// Every edge into a node that held the urgent set and everything, and did not fail, in
/// the report's node order, with the rate [`observe`] takes from it.
pub fn edge_rates(rep: &PushReport) -> Vec<EdgeRate> {
    let bytes: HashMap<(&str, &str), u64> = rep
        .edges
        .iter()
        .map(|e| ((e.parent.as_str(), e.child.as_str()), e.bytes))
        .collect();
    let failed: HashSet<&str> = rep.failures.iter().map(|f| f.child.as_str()).collect();
    let proxies: HashSet<&str> = rep.uplinks.iter().map(|u| u.proxy.as_str()).collect();
    let group: HashMap<&str, Option<usize>> = rep
        .per_node
        .iter()
        .map(|n| (n.host.as_str(), n.group))
        .collect();
    let mut out = Vec::new();
    for n in &rep.per_node {
        let (p, c) = (n.parent.as_str(), n.host.as_str());
        let (Some(start), Some(end)) = (n.urgent_s, n.all_s) else {
            continue;
        };
        if failed.contains(c) {
            continue;
        }
        let carried = bytes
            .get(&(p, c))
            .copied()
            .unwrap_or(0)
            .saturating_sub(rep.urgent_bytes);
        let secs = end - start;
        let measured = carried >= MIN_BYTES && !secs.is_nan() && secs >= MIN_SECS;
        let same_group = group.get(p).copied().flatten().is_some() && group.get(p) == group.get(c);
        let link = if p == rep.root {
            LinkClass::Login
        } else if proxies.contains(p) {
            if same_group {
                LinkClass::Port
            } else {
                LinkClass::Uplink
            }
        } else {
            LinkClass::Node
        };
        out.push(EdgeRate {
            parent: p.to_owned(),
            child: c.to_owned(),
            link,
            bytes: carried,
            secs,
            bps: measured.then(|| (carried as f64 * 8.0 / secs) as u64),
            into_uplink: proxies.contains(c) && !same_group,
        });
    }
    out
}

/// What one push showed of each link class (see the module docs).
pub fn observe(rep: &PushReport) -> Observed {
    let edges = edge_rates(rep);
    let mut out = Observed::default();
    // Per sender and link: its children's streams.
    let mut sent: HashMap<(&str, LinkClass), Vec<u64>> = HashMap::new();
    // The fastest stream into a node through its NIC, and into a proxy through its uplink.
    let (mut nic, mut uplink) = (None::<u64>, None::<u64>);
    for e in &edges {
        let Some(bps) = e.bps else { continue };
        sent.entry((e.parent.as_str(), e.link))
            .or_default()
            .push(bps);
        let way_in = if e.into_uplink { &mut uplink } else { &mut nic };
        *way_in = Some(way_in.map_or(bps, |v| v.max(bps)));
    }
    if let Some(bps) = uplink {
        out.at_least.at_least(LinkClass::Uplink, bps);
    }
    // A node's rate: streams into proxies show it only when no stream into a member did.
    if let Some(bps) = nic.or(uplink) {
        out.figures.at_least(LinkClass::Node, bps);
    }
    // The fastest single stream: what a stream reached where nothing else held it back.
    let fastest = out.figures.node.unwrap_or(0) as f64;
    for ((_, class), streams) in sent {
        let sum: u64 = streams.iter().sum();
        let mean = sum as f64 / streams.len() as f64;
        let shared = streams.len() >= 2 && mean < SHARED * fastest;
        if class == LinkClass::Node || shared {
            out.figures.at_least(class, sum);
        } else {
            out.at_least.at_least(class, sum);
        }
    }
    out
}

/// One push's figures in the file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PushFigures {
    /// When the push ended, in seconds since the Unix epoch.
    pub at: u64,
    /// The push's job.
    pub job: String,
    /// What it measured.
    #[serde(flatten)]
    pub figures: Figures,
    /// What it bounded from below only (absent in files of teesfs before it).
    #[serde(default, skip_serializing_if = "Figures::is_empty")]
    pub at_least: Figures,
}

/// The learned-rates file: the figures of the recent pushes.
///
/// JSON: `{"version": 1, "pushes": [{"at": UNIX_S, "job": "..", "node": BPS, "port": BPS,
/// "uplink": BPS, "login": BPS, "at_least": {"login": BPS, ..}}]}` (a class a push did not
/// measure is absent, and so is `at_least` without lower bounds), oldest first.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LearnedRates {
    /// Format version ([`VERSION`]).
    pub version: u32,
    /// The kept pushes, oldest first.
    pub pushes: Vec<PushFigures>,
}

/// The estimate of a [`LearnedRates`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Learned {
    /// The rates, every class filled in.
    pub rates: LinkRates,
    /// Pushes the estimate comes from.
    pub pushes: usize,
    /// When the newest of them ended (Unix seconds).
    pub last: u64,
}

impl LearnedRates {
    /// Reads the file's bytes. Anything but a file of this format and version is
    /// [`Error::LearnedRates`], naming what is wrong.
    pub fn from_json(bytes: &[u8]) -> Result<Self, Error> {
        if u64::try_from(bytes.len()).unwrap_or(u64::MAX) > MAX_FILE_BYTES {
            return Err(Error::LearnedRates {
                detail: format!("larger than {MAX_FILE_BYTES} bytes"),
            });
        }
        let file: LearnedRates =
            serde_json::from_slice(bytes).map_err(|e| Error::LearnedRates {
                detail: e.to_string(),
            })?;
        if file.version != VERSION {
            return Err(Error::LearnedRates {
                detail: format!("version {} (this teesfs reads {VERSION})", file.version),
            });
        }
        Ok(file)
    }

    /// The file's bytes.
    pub fn to_json(&self) -> Vec<u8> {
        let mut v = serde_json::to_vec_pretty(self).expect("plain data serialises");
        v.push(b'\n');
        v
    }

    /// Adds one push's figures (when it measured anything), drops figures older than
    /// [`MAX_AGE_S`] at `now` and keeps the newest [`KEEP_PUSHES`].
    pub fn fold(&mut self, push: PushFigures, now: u64) {
        self.version = VERSION;
        if !push.figures.is_empty() || !push.at_least.is_empty() {
            self.pushes.push(push);
        }
        self.pushes.sort_by_key(|p| p.at);
        self.pushes
            .retain(|p| now.saturating_sub(p.at) <= MAX_AGE_S && p.at <= now.saturating_add(3600));
        let extra = self.pushes.len().saturating_sub(KEEP_PUSHES);
        self.pushes.drain(..extra);
    }

    /// The learned rates at `now`: per class the [`PERCENTILE`] of the figures of the kept,
    /// unexpired pushes, a link within [`SNAP`] of a whole number of nodes' streams taken as
    /// that number. `None` without a figure for a node's rate (nothing to size streams
    /// by). Lower bounds count as figures do (a link carried at least that), and a link
    /// known only from below is taken one node's stream wider than its bound, so that the
    /// next plan gives it one stream more and the push after shows whether it carries it
    /// (a bound of two streams planned as two would stay two). A class no push measured
    /// or bounded is taken as the planner takes an unrated machine: a port, uplink and login
    /// link that carry eight nodes' streams (Tianhe's group).
    pub fn estimate(&self, now: u64) -> Option<Learned> {
        let live: Vec<&PushFigures> = self
            .pushes
            .iter()
            .filter(|p| now.saturating_sub(p.at) <= MAX_AGE_S)
            .collect();
        let pick = |class: LinkClass, bound: bool| {
            let mut v: Vec<u64> = live
                .iter()
                .filter_map(|p| if bound { p.at_least } else { p.figures }.get(class))
                .collect();
            percentile(&mut v, PERCENTILE)
        };
        let node = pick(LinkClass::Node, false)
            .max(pick(LinkClass::Node, true))
            .filter(|&n| n > 0)?;
        let wide = node.saturating_mul(8);
        let link = |class| match (pick(class, false), pick(class, true)) {
            (Some(m), low) => snap(m.max(low.unwrap_or(0)), node),
            (None, Some(low)) => snap(low, node).saturating_add(node),
            (None, None) => wide,
        };
        Some(Learned {
            rates: LinkRates {
                node,
                port: link(LinkClass::Port),
                uplink: link(LinkClass::Uplink),
                login: link(LinkClass::Login),
            },
            pushes: live
                .iter()
                .filter(|p| !p.figures.is_empty() || !p.at_least.is_empty())
                .count(),
            last: live.iter().map(|p| p.at).max().unwrap_or(0),
        })
    }
}

/// `bps` as a whole number of `node` streams when it is within [`SNAP`] of one: the planner
/// counts whole streams (a port measured at 3.98 nodes carries 4, not 3).
fn snap(bps: u64, node: u64) -> u64 {
    let streams = bps as f64 / node as f64;
    let whole = streams.round();
    if whole >= 1.0 && (streams - whole).abs() <= SNAP {
        (whole * node as f64) as u64
    } else {
        bps
    }
}

/// The nearest-rank `q` quantile of `v` (sorted here), `None` when empty.
fn percentile(v: &mut [u64], q: f64) -> Option<u64> {
    v.sort_unstable();
    let n = v.len();
    let rank = ((q * n as f64).ceil() as usize).clamp(1, n.max(1));
    v.get(rank - 1).copied()
}

/// Where the rates a plan used came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    /// `--links`, the site's `[topology] links` or the topology file's `[links]`.
    Configured,
    /// Learned from earlier pushes.
    Learned,
    /// None: the planner's plan without rates (a proxy feeds 3 members, chains the rest).
    None,
}

/// The rates a plan used and where they came from: what `plan`, `push` and `prefetch` print
/// and the push report's `rates`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RatesUsed {
    /// Where they came from.
    pub source: Source,
    /// The rates (bits per second), every class absent with [`Source::None`]; in the JSON
    /// the fields `node`, `port`, `uplink` and `login` beside `source`.
    #[serde(flatten)]
    pub links: Figures,
    /// Learned: from this many pushes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pushes: Option<usize>,
    /// Learned: when the newest of them ended (Unix seconds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub learned_at: Option<u64>,
}

impl RatesUsed {
    /// The rates as [`LinkRates`], when there are any.
    pub fn rates(&self) -> Option<LinkRates> {
        let f = &self.links;
        Some(LinkRates {
            node: f.node?,
            port: f.port?,
            uplink: f.uplink?,
            login: f.login?,
        })
    }

    /// One line for people, e.g. `learned from 3 pushes (last 2026-12-05 12:00 UTC):
    /// node=100mbit port=400mbit uplink=400mbit login=400mbit`.
    pub fn describe(&self) -> String {
        let Some(r) = self.rates() else {
            return "none (a proxy feeds 3 members and the rest follow as chains, so that \
                    this push teaches the next its rates; see teesfs.toml(5) [topology] links)"
                .into();
        };
        let rates = format!(
            "node={} port={} uplink={} login={}",
            bits(r.node),
            bits(r.port),
            bits(r.uplink),
            bits(r.login)
        );
        match self.source {
            Source::Learned => format!(
                "learned from {} push{} (last {}): {rates}",
                self.pushes.unwrap_or(0),
                if self.pushes == Some(1) { "" } else { "es" },
                date(self.learned_at.unwrap_or(0))
            ),
            _ => format!("configured: {rates}"),
        }
    }
}

/// A rate for people and for `--links`: `97.3mbit`.
pub fn bits(bps: u64) -> String {
    let (v, unit) = match bps {
        b if b >= 1_000_000_000 => (b as f64 / 1e9, "gbit"),
        b if b >= 1_000_000 => (b as f64 / 1e6, "mbit"),
        b if b >= 1_000 => (b as f64 / 1e3, "kbit"),
        b => (b as f64, "bit"),
    };
    format!("{}{unit}", (v * 10.0).round() / 10.0)
}

/// `YYYY-MM-DD HH:MM UTC` of Unix seconds.
fn date(unix: u64) -> String {
    let (days, secs) = (unix / 86_400, unix % 86_400);
    // Civil from days (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02} UTC",
        secs / 3600,
        secs % 3600 / 60
    )
}

/// The override rule: configured rates win over learned ones, learned ones over none.
/// Learned rates are used [`HEADROOM`] times as fast as measured (every class alike, so the
/// fan-outs are those of the measured rates): the plan paces every stream at its rate, and
/// a paced stream never shows more than its pace, so rates used as measured could never
/// rise again after one slow push (a busy machine, a busy fabric).
pub fn choose(configured: Option<LinkRates>, learned: Option<&Learned>) -> RatesUsed {
    let up = |bps: u64| (bps as f64 * HEADROOM) as u64;
    let (source, rates, learned) = match (configured, learned) {
        (Some(r), _) => (Source::Configured, Some(r), None),
        (None, Some(l)) => {
            let r = l.rates;
            let paced = LinkRates {
                node: up(r.node),
                port: up(r.port),
                uplink: up(r.uplink),
                login: up(r.login),
            };
            (Source::Learned, Some(paced), Some(l))
        }
        (None, None) => (Source::None, None, None),
    };
    RatesUsed {
        source,
        links: rates.map(Figures::from).unwrap_or_default(),
        pushes: learned.map(|l| l.pushes),
        learned_at: learned.map(|l| l.last),
    }
}

#[cfg(test)]
#[path = "rates_tests.rs"]
mod tests;

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
//!   groups, a member's NIC.
//! - The receiving end's link carried the edge's rate: a proxy entered from another group
//!   receives through its uplink. Every stream into any compute node is also taken as a
//!   lower bound of a node's rate: compute nodes are alike, and a first push planned without
//!   rates often has no unshared stream into a member (its proxy feeds the whole group), so
//!   the login node's streams to the proxies are what shows a node's rate. Where proxies'
//!   uplinks are much faster than the nodes' NICs and the login node feeds few of them, that
//!   overstates a node's rate; configured rates override learned ones.
//!
//! One push's figure per class is the largest of its lower bounds. [`LearnedRates`] keeps
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
/// Learned rates are planned and paced this many times as fast as measured ([`choose`]).
pub const HEADROOM: f64 = 1.25;
/// The file format's version.
pub const VERSION: u32 = 1;
/// The largest learned-rates file read back.
pub const MAX_FILE_BYTES: u64 = 1 << 20;

/// The link classes of [`LinkRates`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
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

    fn get(&self, class: LinkClass) -> Option<u64> {
        match class {
            LinkClass::Node => self.node,
            LinkClass::Port => self.port,
            LinkClass::Uplink => self.uplink,
            LinkClass::Login => self.login,
        }
    }

    /// Raises the class's figure to at least `bps`.
    fn at_least(&mut self, class: LinkClass, bps: u64) {
        let s = self.slot(class);
        *s = Some(s.map_or(bps, |v| v.max(bps)));
    }

    /// Whether the push measured anything.
    pub fn is_empty(&self) -> bool {
        *self == Figures::default()
    }
}

/// What one push measured of each link class (see the module docs).
pub fn observe(rep: &PushReport) -> Figures {
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
    let mut out = Figures::default();
    let mut sent: HashMap<(&str, LinkClass), u64> = HashMap::new();
    for n in &rep.per_node {
        let (p, c) = (n.parent.as_str(), n.host.as_str());
        if failed.contains(c) {
            continue;
        }
        let (Some(start), Some(end)) = (n.urgent_s, n.all_s) else {
            continue;
        };
        let carried = bytes
            .get(&(p, c))
            .copied()
            .unwrap_or(0)
            .saturating_sub(rep.urgent_bytes);
        let secs = end - start;
        if carried < MIN_BYTES || secs.is_nan() || secs < MIN_SECS {
            continue;
        }
        let bps = (carried as f64 * 8.0 / secs) as u64;
        let same_group = group.get(p).copied().flatten().is_some() && group.get(p) == group.get(c);
        let via = if p == rep.root {
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
        *sent.entry((p, via)).or_default() += bps;
        if proxies.contains(c) && !same_group {
            out.at_least(LinkClass::Uplink, bps);
        }
        out.at_least(LinkClass::Node, bps);
    }
    for ((_, class), bps) in sent {
        out.at_least(class, bps);
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
}

/// The learned-rates file: the figures of the recent pushes.
///
/// JSON: `{"version": 1, "pushes": [{"at": UNIX_S, "job": "..", "node": BPS, "port": BPS,
/// "uplink": BPS, "login": BPS}]}` (a class a push did not measure is absent), oldest first.
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
        if !push.figures.is_empty() {
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
    /// by). A class no push measured is taken as the planner takes an unrated machine: a
    /// port, uplink and login link that carry eight nodes' streams (Tianhe's group).
    pub fn estimate(&self, now: u64) -> Option<Learned> {
        let live: Vec<&PushFigures> = self
            .pushes
            .iter()
            .filter(|p| now.saturating_sub(p.at) <= MAX_AGE_S)
            .collect();
        let pick = |class: LinkClass| {
            let mut v: Vec<u64> = live.iter().filter_map(|p| p.figures.get(class)).collect();
            percentile(&mut v, PERCENTILE)
        };
        let node = pick(LinkClass::Node).filter(|&n| n > 0)?;
        let wide = node.saturating_mul(8);
        let link = |class| pick(class).map_or(wide, |bps| snap(bps, node));
        Some(Learned {
            rates: LinkRates {
                node,
                port: link(LinkClass::Port),
                uplink: link(LinkClass::Uplink),
                login: link(LinkClass::Login),
            },
            pushes: live.iter().filter(|p| !p.figures.is_empty()).count(),
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
    /// None: the planner assumed a port that carries a whole group.
    None,
}

/// The rates a plan used and where they came from: what `plan`, `push` and `prefetch` print
/// and the push report's `rates`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RatesUsed {
    /// Where they came from.
    pub source: Source,
    /// The rates (bits per second), absent with [`Source::None`].
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
        Some(LinkRates {
            node: self.node?,
            port: self.port?,
            uplink: self.uplink?,
            login: self.login?,
        })
    }

    /// One line for people, e.g. `learned from 3 pushes (last 2026-12-05 12:00 UTC):
    /// node=100mbit port=400mbit uplink=400mbit login=400mbit`.
    pub fn describe(&self) -> String {
        let Some(r) = self.rates() else {
            return "none (the planner assumes a proxy's port carries its whole group; \
                    pushes teach rates, see teesfs.toml(5) [topology] links)"
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
        node: rates.map(|r| r.node),
        port: rates.map(|r| r.port),
        uplink: rates.map(|r| r.uplink),
        login: rates.map(|r| r.login),
        pushes: learned.map(|l| l.pushes),
        learned_at: learned.map(|l| l.last),
    }
}

#[cfg(test)]
#[path = "rates_tests.rs"]
mod tests;

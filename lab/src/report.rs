//! The push report as `teesfs push --report` writes it (the documented JSON of
//! `node/src/node/report.rs`, read here field by field so the lab does not link the node
//! code), and the SVG drawing of one run: the tree with its groups and a per-node timeline.

use std::fmt::Write as _;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::{LabError, Result};
use crate::layout::{Layout, Role};

/// One node's arrival times.
#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct NodeTimes {
    /// Host.
    pub host: String,
    /// Parent in the plan.
    pub parent: String,
    /// Seconds until it held the urgent set.
    pub urgent_s: Option<f64>,
    /// Seconds until it held everything.
    pub all_s: Option<f64>,
}

/// Bytes over one group's uplink as the root predicts them from edge traffic.
#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct Uplink {
    /// Group number.
    pub group: usize,
    /// Its proxy.
    pub proxy: String,
    /// Payload bytes into the group.
    pub in_bytes: u64,
    /// Payload bytes out of the group.
    pub out_bytes: u64,
}

/// The fields of the push report the lab uses.
#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct PushReport {
    /// Job id (hex), also the mount directory's name.
    pub job: String,
    /// Plan strategy.
    pub strategy: String,
    /// Nodes in the job.
    pub nodes: usize,
    /// Stored bytes of the urgent set.
    pub urgent_bytes: u64,
    /// Stored bytes of the layer.
    pub total_bytes: u64,
    /// When every node held the urgent set.
    pub urgent_complete_s: Option<f64>,
    /// When every node held everything.
    pub all_complete_s: Option<f64>,
    /// Per node.
    pub per_node: Vec<NodeTimes>,
    /// Per group uplink.
    #[serde(default)]
    pub uplinks: Vec<Uplink>,
    /// Failures, as reported.
    #[serde(default)]
    pub failures: Vec<serde_json::Value>,
}

impl PushReport {
    /// Reads a report file.
    pub fn load(path: &Path) -> Result<Self> {
        let bytes = std::fs::read(path).map_err(LabError::io(path))?;
        serde_json::from_slice(&bytes).map_err(|e| LabError::Parse {
            what: path.display().to_string(),
            detail: e.to_string(),
        })
    }

    /// Payload bytes the root predicts into all groups.
    pub fn predicted_uplink_in(&self) -> u64 {
        self.uplinks.iter().map(|u| u.in_bytes).sum()
    }
}

/// Extra per-node marks for the timeline (e.g. when the application started).
#[derive(Debug, Clone, Default)]
pub struct Marks {
    /// Label of the mark.
    pub label: String,
    /// Seconds per host.
    pub at: Vec<(String, f64)>,
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// Draws the run as SVG: the tree (groups as boxes, proxies filled, edges parent to
/// child, rows by depth) above a per-node timeline (urgent set, whole layer, marks).
pub fn svg(layout: &Layout, rep: &PushReport, marks: &Marks, title: &str) -> String {
    let groups = layout.spec.groups;
    let gs = layout.spec.group_size;
    let cell = 22.0;
    let gw = (gs as f64 * cell + 20.0).max(90.0);
    let width = (groups as f64 * (gw + 12.0) + 40.0).max(760.0);
    let parent_of = |h: &str| {
        rep.per_node
            .iter()
            .find(|n| n.host == h)
            .map(|n| n.parent.clone())
    };
    let depth = |h: &str| {
        let mut d = 0;
        let mut cur = h.to_string();
        while let Some(p) = parent_of(&cur) {
            d += 1;
            cur = p;
            if d > 64 {
                break;
            }
        }
        d
    };
    let max_depth = layout
        .compute()
        .map(|n| depth(&n.host))
        .max()
        .unwrap_or(1)
        .max(1);
    let tree_top = 70.0;
    let row_h = 34.0;
    let tree_h = tree_top + max_depth as f64 * row_h + 30.0;
    let pos = |h: &str| -> (f64, f64) {
        match layout.node(h) {
            Some(n) if n.group.is_some() => {
                let g = n.group.unwrap_or(0);
                let i = layout
                    .compute()
                    .filter(|m| m.group == n.group)
                    .position(|m| m.host == h)
                    .unwrap_or(0);
                (
                    20.0 + g as f64 * (gw + 12.0) + 10.0 + cell * (i as f64 + 0.5),
                    tree_top + depth(h) as f64 * row_h,
                )
            }
            _ => (width / 2.0, tree_top - 30.0),
        }
    };
    let tmax = rep
        .per_node
        .iter()
        .filter_map(|n| n.all_s.or(n.urgent_s))
        .chain(marks.at.iter().map(|m| m.1))
        .fold(0.1f64, f64::max);
    let bar_h = 12.0;
    let tl_top = tree_h + 40.0;
    let tl_left = 70.0;
    let tl_w = width - tl_left - 30.0;
    let n = rep.per_node.len();
    let height = tl_top + n as f64 * (bar_h + 3.0) + 50.0;
    let x_of = |t: f64| tl_left + t / tmax * tl_w;

    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0}" height="{height:.0}" font-family="sans-serif" font-size="11">"#
    );
    let _ = writeln!(
        s,
        r#"<text x="20" y="20" font-size="15">{}</text>"#,
        esc(title)
    );
    for g in 0..groups {
        let x = 20.0 + g as f64 * (gw + 12.0);
        let _ = writeln!(
            s,
            r##"<rect x="{x:.1}" y="{:.1}" width="{gw:.1}" height="{:.1}" rx="8" fill="#eef3fb" stroke="#9ab"/><text x="{:.1}" y="{:.1}" fill="#567">group {g}</text>"##,
            tree_top - 18.0,
            tree_h - tree_top + 8.0,
            x + 6.0,
            tree_h - 14.0
        );
    }
    for node in &rep.per_node {
        let (x1, y1) = pos(&node.parent);
        let (x2, y2) = pos(&node.host);
        let _ = writeln!(
            s,
            r##"<line x1="{x1:.1}" y1="{y1:.1}" x2="{x2:.1}" y2="{y2:.1}" stroke="#c55" stroke-opacity="0.55"/>"##
        );
    }
    let (lx, ly) = pos("login");
    let root = "root";
    let _ = writeln!(
        s,
        r##"<circle cx="{lx:.1}" cy="{ly:.1}" r="9" fill="#333"/><text x="{:.1}" y="{:.1}">{root} (login)</text>"##,
        lx + 12.0,
        ly + 4.0
    );
    for node in layout.compute() {
        let (x, y) = pos(&node.host);
        let fill = if node.role == Role::Proxy {
            "#2a6"
        } else {
            "#fff"
        };
        let _ = writeln!(
            s,
            r##"<circle cx="{x:.1}" cy="{y:.1}" r="7" fill="{fill}" stroke="#264"><title>{}</title></circle>"##,
            esc(&node.host)
        );
    }
    // Timeline.
    let _ = writeln!(
        s,
        r##"<text x="20" y="{:.1}" font-size="13">per-node timeline: dark = urgent set held, light = whole layer held{}</text>"##,
        tl_top - 14.0,
        if marks.at.is_empty() {
            String::new()
        } else {
            format!(", ◆ = {}", esc(&marks.label))
        }
    );
    for (i, node) in rep.per_node.iter().enumerate() {
        let y = tl_top + i as f64 * (bar_h + 3.0);
        let _ = writeln!(
            s,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"#,
            tl_left - 6.0,
            y + bar_h - 2.0,
            esc(&node.host)
        );
        if let Some(a) = node.all_s {
            let _ = writeln!(
                s,
                r##"<rect x="{tl_left:.1}" y="{y:.1}" width="{:.1}" height="{bar_h}" fill="#9cd"/>"##,
                x_of(a) - tl_left
            );
        }
        if let Some(u) = node.urgent_s {
            let _ = writeln!(
                s,
                r##"<rect x="{tl_left:.1}" y="{y:.1}" width="{:.1}" height="{bar_h}" fill="#27a"/>"##,
                (x_of(u) - tl_left).max(1.0)
            );
        }
        if let Some((_, t)) = marks.at.iter().find(|m| m.0 == node.host) {
            let x = x_of(*t);
            let _ = writeln!(
                s,
                r##"<path d="M{x:.1} {:.1} l5 6 l-5 6 l-5 -6 z" fill="#d60"/>"##,
                y
            );
        }
    }
    let axis_y = tl_top + n as f64 * (bar_h + 3.0) + 6.0;
    for k in 0..=5 {
        let t = tmax * k as f64 / 5.0;
        let x = x_of(t);
        let _ = writeln!(
            s,
            r##"<line x1="{x:.1}" y1="{:.1}" x2="{x:.1}" y2="{axis_y:.1}" stroke="#ccc"/><text x="{x:.1}" y="{:.1}" text-anchor="middle">{t:.2} s</text>"##,
            tl_top - 4.0,
            axis_y + 14.0
        );
    }
    s.push_str("</svg>\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::LabSpec;

    #[test]
    fn svg_draws_every_node() {
        let layout = Layout::new("tlab0001", &LabSpec::default()).expect("layout");
        let per_node = layout
            .compute()
            .enumerate()
            .map(|(i, n)| NodeTimes {
                host: n.host.clone(),
                parent: if n.role == Role::Proxy {
                    "login".into()
                } else {
                    format!("n{:02}", (i / 8) * 8 + 1)
                },
                urgent_s: Some(0.5 + i as f64 * 0.01),
                all_s: Some(1.0 + i as f64 * 0.02),
            })
            .collect();
        let rep = PushReport {
            job: "00".into(),
            strategy: "topo".into(),
            nodes: 32,
            urgent_bytes: 1,
            total_bytes: 2,
            urgent_complete_s: Some(0.9),
            all_complete_s: Some(1.7),
            per_node,
            uplinks: vec![],
            failures: vec![],
        };
        let marks = Marks {
            label: "app started".into(),
            at: vec![("n02".into(), 1.2)],
        };
        let s = svg(&layout, &rep, &marks, "demo <test>");
        assert_eq!(s.matches("<circle").count(), 33);
        assert!(s.contains("demo &lt;test&gt;"));
        assert!(s.ends_with("</svg>\n"));
    }
}

//! The tree by group of a small job: every node where the plan put it, a box per group,
//! edges parent to child as wide as the bytes they carried, failures red. Used by
//! [`super::svg`] when the report is small enough to show each node. Positions come from
//! the [`Model`] alone; it must not read anything else.

use std::collections::{HashMap, HashSet};

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::model::Model;
use super::style::{EDGE, FAILED, GROUP_FILL, MUTED, PROXY, px};
use super::{draw_err, human_bytes};
use crate::Error;

/// Tree: the root's row, then one row per depth.
const TREE_TOP: i32 = 56;
const TREE_ROW_H: i32 = 36;

/// Where every node of a small job goes: a box per group side by side, the nodes of a group
/// left to right in report (breadth-first) order, one row per depth.
pub(super) struct Tree {
    boxes: Vec<(i32, i32)>,
    pos: Vec<(i32, i32)>,
    pub(super) width: i32,
    pub(super) height: i32,
}

impl Tree {
    pub(super) fn new(m: &Model<'_>) -> Self {
        let cell = if m.rep.per_node.len() <= 48 { 26 } else { 18 };
        let mut pos = vec![(0, 0); m.rep.per_node.len()];
        let mut boxes = Vec::new();
        let mut x = 20;
        for g in &m.groups {
            // Each depth is its own row, filled left to right, so children sit under
            // their parents' row rather than beside it.
            let mut filled: HashMap<usize, i32> = HashMap::new();
            for &i in &g.nodes {
                let k = filled.entry(m.depth[i]).or_insert(0);
                pos[i] = (
                    x + 10 + cell * *k + cell / 2,
                    TREE_TOP + px(m.depth[i] - 1) * TREE_ROW_H + 12,
                );
                *k += 1;
            }
            let widest = filled.values().copied().max().unwrap_or(1);
            let w = (widest * cell + 20).max(150);
            boxes.push((x, w));
            x += w + 12;
        }
        Tree {
            boxes,
            pos,
            width: x + 8,
            height: TREE_TOP + px(m.max_depth()) * TREE_ROW_H + 52,
        }
    }

    /// Draws the tree: the legend, the groups, the edges and the nodes.
    pub(super) fn draw(
        &self,
        area: &DrawingArea<SVGBackend<'_>, Shift>,
        m: &Model<'_>,
        width: i32,
    ) -> Result<(), Error> {
        let root = (width / 2, 24);
        area.draw(&Text::new(
            "the tree by group: edges parent to child, wider = more bytes; proxies green; failed edges and nodes red",
            (20, 2),
            ("sans-serif", 13),
        ))
        .map_err(draw_err)?;
        self.draw_groups(area, m)?;
        self.draw_edges(area, m, root)?;
        self.draw_nodes(area, m, root)
    }

    /// A box per group, with its name, size and uplink bytes.
    fn draw_groups(
        &self,
        area: &DrawingArea<SVGBackend<'_>, Shift>,
        m: &Model<'_>,
    ) -> Result<(), Error> {
        let label = ("sans-serif", 12).into_font().color(&MUTED);
        let bottom = self.height - 6;
        for (g, &(x, w)) in m.groups.iter().zip(&self.boxes) {
            let corners = [(x, TREE_TOP - 4), (x + w, bottom)];
            area.draw(&Rectangle::new(corners, GROUP_FILL.filled()))
                .map_err(draw_err)?;
            area.draw(&Rectangle::new(corners, MUTED.stroke_width(1)))
                .map_err(draw_err)?;
            area.draw(&Text::new(
                format!("{} ({} nodes)", g.label, g.nodes.len()),
                (x + 6, bottom - 30),
                label.clone(),
            ))
            .map_err(draw_err)?;
            if let (Some(i), Some(o)) = (g.in_bytes, g.out_bytes) {
                area.draw(&Text::new(
                    format!("uplink in {} / out {}", human_bytes(i), human_bytes(o)),
                    (x + 6, bottom - 15),
                    label.clone(),
                ))
                .map_err(draw_err)?;
            }
        }
        Ok(())
    }

    /// Every edge parent to child, as wide as the bytes it carried, and one red line per
    /// pair of places that failed.
    fn draw_edges(
        &self,
        area: &DrawingArea<SVGBackend<'_>, Shift>,
        m: &Model<'_>,
        root: (i32, i32),
    ) -> Result<(), Error> {
        let index: HashMap<&str, usize> = m
            .rep
            .per_node
            .iter()
            .enumerate()
            .map(|(i, n)| (n.host.as_str(), i))
            .collect();
        let at = |h: &str| index.get(h).map_or(root, |&i| self.pos[i]);
        let bytes: HashMap<(&str, &str), u64> = m
            .rep
            .edges
            .iter()
            .map(|e| ((e.parent.as_str(), e.child.as_str()), e.bytes))
            .collect();
        let most = bytes.values().copied().max().unwrap_or(1).max(1);
        for n in &m.rep.per_node {
            let b = bytes
                .get(&(n.parent.as_str(), n.host.as_str()))
                .copied()
                .unwrap_or(0);
            let w = 1 + u32::try_from(3 * u128::from(b) / u128::from(most)).unwrap_or(3);
            area.draw(&PathElement::new(
                vec![at(&n.parent), at(&n.host)],
                EDGE.stroke_width(w),
            ))
            .map_err(draw_err)?;
        }
        // One red line per pair of places: a report may repeat a failure any number of
        // times, and the picture would only grow, not change.
        let mut drawn = HashSet::new();
        for f in &m.rep.failures {
            let line = (at(&f.parent), at(&f.child));
            if !drawn.insert(line) {
                continue;
            }
            area.draw(&PathElement::new(
                vec![line.0, line.1],
                FAILED.stroke_width(3),
            ))
            .map_err(draw_err)?;
        }
        Ok(())
    }

    /// The root, and every node as a dot (proxies green, failed ones red) with the number
    /// of its name.
    fn draw_nodes(
        &self,
        area: &DrawingArea<SVGBackend<'_>, Shift>,
        m: &Model<'_>,
        root: (i32, i32),
    ) -> Result<(), Error> {
        area.draw(&Circle::new(root, 9, BLACK.filled()))
            .map_err(draw_err)?;
        area.draw(&Text::new(
            format!("root ({})", m.rep.root),
            (root.0 + 13, root.1 - 6),
            ("sans-serif", 12),
        ))
        .map_err(draw_err)?;
        let name = ("sans-serif", 9).into_font().color(&MUTED);
        for (n, &(x, y)) in m.rep.per_node.iter().zip(&self.pos) {
            let failed = m.failed.contains(n.host.as_str());
            let fill = if failed {
                FAILED.filled()
            } else if m.proxies.contains(n.host.as_str()) {
                PROXY.filled()
            } else {
                WHITE.filled()
            };
            area.draw(&Circle::new((x, y), 7, fill)).map_err(draw_err)?;
            let ring = if failed {
                FAILED
            } else {
                RGBColor(0x22, 0x66, 0x44)
            };
            area.draw(&Circle::new((x, y), 7, ring.stroke_width(1)))
                .map_err(draw_err)?;
            // The trailing number only ("cn0017" does not fit a cell, "17" does); the
            // timeline has the full names.
            let digits = n.host.trim_start_matches(|c: char| !c.is_ascii_digit());
            let short = if digits.is_empty() {
                n.host.as_str()
            } else {
                digits.trim_start_matches('0')
            };
            area.draw(&Text::new(
                short.to_string(),
                (x, y + 9),
                name.clone().pos(Pos::new(HPos::Center, VPos::Top)),
            ))
            .map_err(draw_err)?;
        }
        Ok(())
    }
}

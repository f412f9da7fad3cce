//! The group map of a large job: one cell per group, coloured by when its last node held
//! the whole layer, outlined red where an edge into it failed. Used by [`super::svg`] in
//! place of the tree when there are too many nodes to draw one by one. It draws from the
//! [`Model`] alone, and shrinks its cells to keep the map short.

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::draw_err;
use super::human_secs;
use super::model::Model;
use super::style::{EARLY, FAILED, LATE, MUTED, NEVER, px};
use crate::Error;

/// Group map: room for its caption and colour scale.
const MAP_TOP: i32 = 64;
const MAP_MAX_H: i32 = 420;

/// A large job's groups as a grid of cells coloured by when the group's last node held the
/// whole layer; red outline where an edge into the group failed.
pub(super) struct GroupMap {
    cell: i32,
    cols: usize,
    pub(super) height: i32,
}

impl GroupMap {
    pub(super) fn new(groups: usize, width: i32) -> Self {
        let mut pick = (5, 1);
        for cell in [40, 30, 22, 16, 12, 9, 7, 5] {
            let cols = usize::try_from((width - 120) / (cell + 2))
                .unwrap_or(1)
                .max(1);
            pick = (cell, cols);
            if px(groups.div_ceil(cols)) * (cell + 2) <= MAP_MAX_H {
                break;
            }
        }
        let (cell, cols) = pick;
        GroupMap {
            cell,
            cols,
            height: MAP_TOP + px(groups.div_ceil(cols)) * (cell + 2) + 24,
        }
    }

    pub(super) fn draw(
        &self,
        area: &DrawingArea<SVGBackend<'_>, Shift>,
        m: &Model<'_>,
    ) -> Result<(), Error> {
        let tmax = m.tmax;
        area.draw(&Text::new(
            format!(
                "the tree by group: {} groups, each coloured by when its last node held the whole layer; red outline: a failed edge into the group",
                m.groups.len()
            ),
            (20, 2),
            ("sans-serif", 13),
        ))
        .map_err(draw_err)?;
        // The colour scale.
        let (sx, sy, sw) = (20, 26, 300);
        for k in 0..sw {
            let c = ramp(f64::from(k) / f64::from(sw));
            area.draw(&Rectangle::new(
                [(sx + k, sy), (sx + k + 1, sy + 12)],
                c.filled(),
            ))
            .map_err(draw_err)?;
        }
        let small = ("sans-serif", 11).into_font().color(&MUTED);
        for (f, anchor) in [(0.0, HPos::Left), (0.5, HPos::Center), (1.0, HPos::Right)] {
            area.draw(&Text::new(
                human_secs(tmax * f),
                (sx + (f64::from(sw) * f) as i32, sy + 15),
                small.clone().pos(Pos::new(anchor, VPos::Top)),
            ))
            .map_err(draw_err)?;
        }
        let lx = sx + sw + 30;
        area.draw(&Rectangle::new(
            [(lx, sy), (lx + 12, sy + 12)],
            NEVER.filled(),
        ))
        .map_err(draw_err)?;
        area.draw(&Text::new(
            "a node never held it",
            (lx + 18, sy),
            small.clone(),
        ))
        .map_err(draw_err)?;
        let fx = lx + 170;
        area.draw(&Rectangle::new(
            [(fx, sy), (fx + 12, sy + 12)],
            FAILED.stroke_width(2),
        ))
        .map_err(draw_err)?;
        area.draw(&Text::new(
            "a failed edge into the group",
            (fx + 18, sy),
            small.clone(),
        ))
        .map_err(draw_err)?;

        let step = self.cell + 2;
        for (k, g) in m.groups.iter().enumerate() {
            let (r, c) = (px(k / self.cols), px(k % self.cols));
            let (x, y) = (80 + c * step, MAP_TOP + r * step);
            let a = &g.arrivals;
            let fill = match a.all {
                Some(s) if a.never_all == 0 => ramp(s.max / tmax),
                _ => NEVER,
            };
            let corners = [(x, y), (x + self.cell, y + self.cell)];
            area.draw(&Rectangle::new(corners, fill.filled()))
                .map_err(draw_err)?;
            if a.failed > 0 {
                area.draw(&Rectangle::new(corners, FAILED.stroke_width(2)))
                    .map_err(draw_err)?;
            }
            if k % self.cols == 0 {
                area.draw(&Text::new(
                    g.number.map_or_else(|| g.label.clone(), |n| n.to_string()),
                    (74, y + self.cell / 2),
                    small.clone().pos(Pos::new(HPos::Right, VPos::Center)),
                ))
                .map_err(draw_err)?;
            }
            if self.cell >= 30 {
                let text_color = if a.all.is_some_and(|s| s.max / tmax > 0.5) {
                    WHITE
                } else {
                    BLACK
                };
                area.draw(&Text::new(
                    g.number.map_or_else(String::new, |n| n.to_string()),
                    (x + self.cell / 2, y + self.cell / 2),
                    ("sans-serif", 10)
                        .into_font()
                        .color(&text_color)
                        .pos(Pos::new(HPos::Center, VPos::Center)),
                ))
                .map_err(draw_err)?;
            }
        }
        Ok(())
    }
}

/// Early (light) to late (dark) along the map's ramp; `f` is clamped to 0..=1.
fn ramp(f: f64) -> RGBColor {
    let f = if f.is_finite() {
        f.clamp(0.0, 1.0)
    } else {
        1.0
    };
    let mix = |a: u8, b: u8| (f64::from(a) + (f64::from(b) - f64::from(a)) * f).round() as u8;
    RGBColor(
        mix(EARLY.0, LATE.0),
        mix(EARLY.1, LATE.1),
        mix(EARLY.2, LATE.2),
    )
}

//! What the drawing of a push report shares: its palette (red is failure and nothing
//! else), pixel conversions and the legend's style. Nothing here draws a part of the picture.

use plotters::chart::{ChartContext, SeriesLabelPosition};
use plotters::coord::CoordTranslate;
use plotters::prelude::*;

use super::draw_err;
use crate::Error;

/// Held the urgent set: dark, because it is what the application waits for.
pub(super) const URGENT: RGBColor = RGBColor(0x22, 0x66, 0xAA);
/// Held the whole layer: light, drawn under the urgent bar so the dark part reads as "first".
pub(super) const WHOLE: RGBColor = RGBColor(0x8C, 0xBF, 0xE0);
/// Failed nodes and edges: the one red in the picture, so it cannot be mistaken for data.
pub(super) const FAILED: RGBColor = RGBColor(0xD0, 0x10, 0x10);
/// The application started.
pub(super) const APP: RGBColor = RGBColor(0xDD, 0x66, 0x00);
/// A proxy: the node that owns its group's uplink.
pub(super) const PROXY: RGBColor = RGBColor(0x22, 0xAA, 0x66);
/// Group boxes in the tree and every other group band in the timeline.
pub(super) const GROUP_FILL: RGBColor = RGBColor(0xEE, 0xF3, 0xFB);
/// Plain tree edges: grey, so that red stays reserved for failures.
pub(super) const EDGE: RGBColor = RGBColor(0x99, 0x99, 0x99);
/// Group names and other secondary text.
pub(super) const MUTED: RGBColor = RGBColor(0x55, 0x66, 0x77);
/// A group whose nodes never all held the layer.
pub(super) const NEVER: RGBColor = RGBColor(0xBB, 0xBB, 0xBB);
/// The arrival ramp of the group map, early to late.
pub(super) const EARLY: RGBColor = RGBColor(0xDE, 0xEB, 0xF7);
pub(super) const LATE: RGBColor = RGBColor(0x08, 0x30, 0x6B);

/// A count or length as pixels; reports large enough to overflow are drawn clipped.
pub(super) fn px(v: usize) -> i32 {
    i32::try_from(v).unwrap_or(i32::MAX / 4)
}

pub(super) fn unsigned(v: i32) -> u32 {
    u32::try_from(v.max(1)).unwrap_or(1)
}

/// The series legend of a chart, in the picture's one legend style, at `position`.
pub(super) fn draw_legend<'a, 'b: 'a, CT: CoordTranslate>(
    chart: &mut ChartContext<'a, SVGBackend<'b>, CT>,
    position: SeriesLabelPosition,
    margin: u32,
) -> Result<(), Error> {
    chart
        .configure_series_labels()
        .position(position)
        .margin(margin)
        .label_font(("sans-serif", 12))
        .background_style(WHITE.mix(0.9))
        .border_style(MUTED)
        .draw()
        .map_err(draw_err)?;
    Ok(())
}

/// A colour as SVG writes it, for tests that look for it.
#[cfg(test)]
pub(super) fn hex(c: RGBColor) -> String {
    format!("#{:02X}{:02X}{:02X}", c.0, c.1, c.2)
}

//! Pieces the workloads' SVG charts share: the labelled log-scale bar chart
//! of the priority applications, the group labels of a bar chart, and the
//! legend box every chart ends with.
//!
//! Design: thin helpers over `plotters` rather than a chart abstraction; each
//! chart still draws its own series, and only the frame that would otherwise
//! be written again per chart lives here.

use anyhow::Result;
use plotters::coord::types::RangedCoordf64;
use plotters::coord::Shift;
use plotters::prelude::*;

/// A bar chart with groups on `0..groups` and a log-scale y axis.
pub type LogBarChart<'a, 'b> =
    ChartContext<'a, SVGBackend<'b>, Cartesian2d<RangedCoordf64, LogCoord<f64>>>;

/// The label of group `i` when `x` is its centre `i + 0.5` (within `within`),
/// else an empty string: a bar chart puts group `i` on `i..i + 1` and asks
/// for twice as many x labels as groups, so only the centres get a name.
///
/// ```
/// use tailctl_workloads::plot::group_label;
/// let names = ["a".to_string(), "b".to_string()];
/// assert_eq!(group_label(1.5, &names, 0.01), "b");
/// assert_eq!(group_label(1.0, &names, 0.01), "");
/// ```
pub fn group_label(x: f64, labels: &[String], within: f64) -> String {
    let i = x.floor() as usize;
    if (x - x.floor() - 0.5).abs() < within {
        labels.get(i).cloned().unwrap_or_default()
    } else {
        String::new()
    }
}

/// Builds the chart `tailctl-kv` and `tailctl-jobserver` draw their bars on:
/// `caption` above, `groups` groups named by `labels` on x, `y` (a range of
/// milliseconds, log scale) described by `y_desc`.
pub fn log_bar_chart<'a, 'b>(
    root: &'a DrawingArea<SVGBackend<'b>, Shift>,
    caption: &str,
    groups: usize,
    labels: &[String],
    y: std::ops::Range<f64>,
    y_desc: &str,
) -> Result<LogBarChart<'a, 'b>> {
    let mut chart = ChartBuilder::on(root)
        .caption(caption, ("sans-serif", 16))
        .margin(15)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(0f64..groups as f64, y.log_scale())?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(groups * 2 + 1)
        .x_label_formatter(&|x| group_label(*x, labels, 0.26))
        .y_desc(y_desc)
        .draw()?;
    Ok(chart)
}

/// Draws the series' legend (white, 80% opaque, black border) and writes the
/// file.
pub fn finish<'a, 'b: 'a, CT: CoordTranslate>(
    chart: &mut ChartContext<'a, SVGBackend<'b>, CT>,
    root: &DrawingArea<SVGBackend<'b>, Shift>,
) -> Result<()> {
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()?;
    root.present()?;
    Ok(())
}

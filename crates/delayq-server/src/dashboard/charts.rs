//! The dashboard's charts, drawn on the server as SVG by `plotters` (its SVG backend, no
//! fonts loaded: the text is SVG `<text>` that the browser sets). Two shapes are enough:
//! lines over the last hour (throughput, lateness) and bars over buckets (the due-time
//! timeline). They take plain numbers, so they do not depend on where the numbers come from.

use plotters::coord::Shift;
use plotters::prelude::*;

/// Width and height of a line chart, in SVG units (the page scales it to its column).
const LINES_SIZE: (u32, u32) = (560, 230);
/// Width and height of a bar chart: narrower, as three stand side by side.
const BARS_SIZE: (u32, u32) = (380, 220);

/// One line of a line chart: a name, a colour and one value per step, oldest first.
pub(super) struct Line<'a> {
    /// Shown in the legend.
    pub name: &'a str,
    /// The line's colour.
    pub color: RGBColor,
    /// The values, one per step.
    pub values: Vec<f64>,
}

/// The colours of the charts, named so that pages use the same colour for the same thing.
pub(super) mod colors {
    use plotters::style::RGBColor;
    /// Tasks added.
    pub const ADDED: RGBColor = RGBColor(36, 84, 197);
    /// Tasks that fell due.
    pub const FIRED: RGBColor = RGBColor(31, 122, 63);
    /// Tasks finished.
    pub const FINISHED: RGBColor = RGBColor(120, 128, 140);
    /// Attempts that failed.
    pub const FAILED: RGBColor = RGBColor(179, 38, 30);
    /// Median lateness.
    pub const P50: RGBColor = RGBColor(36, 84, 197);
    /// 99th percentile lateness.
    pub const P99: RGBColor = RGBColor(204, 120, 0);
}

/// A line chart of `lines` over the `span_s` seconds up to now (x in minutes ago), with
/// `unit` on the y axis. Returns the SVG, or why it could not be drawn.
pub(super) fn lines(title: &str, unit: &str, span_s: f64, lines: &[Line<'_>]) -> String {
    svg(title, LINES_SIZE, |root| {
        draw_lines(root, title, unit, span_s, lines)
    })
}

/// Draws with `draw` into an SVG of `size`; the SVG, or what is shown instead when it failed.
fn svg(
    title: &str,
    size: (u32, u32),
    draw: impl FnOnce(&DrawingArea<SVGBackend<'_>, Shift>) -> Result<(), String>,
) -> String {
    let mut out = String::new();
    let drawn = draw(&SVGBackend::with_string(&mut out, size).into_drawing_area());
    drawn.map_or_else(|e| failed(title, &e), |()| out)
}

/// The frame every chart shares: a white ground, the title, room for the axis labels.
fn frame<'a, 'b>(
    root: &'a DrawingArea<SVGBackend<'b>, Shift>,
    title: &str,
) -> Result<ChartBuilder<'a, 'b, SVGBackend<'b>>, String> {
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let mut builder = ChartBuilder::on(root);
    builder
        .caption(title, ("sans-serif", 15))
        .margin(8)
        .x_label_area_size(40)
        .y_label_area_size(48);
    Ok(builder)
}

fn draw_lines(
    root: &DrawingArea<SVGBackend<'_>, Shift>,
    title: &str,
    unit: &str,
    span_s: f64,
    lines: &[Line<'_>],
) -> Result<(), String> {
    let top = lines
        .iter()
        .flat_map(|l| l.values.iter().copied())
        .fold(0.0, f64::max);
    let y_max = if top > 0.0 { top * 1.15 } else { 1.0 };
    let minutes = span_s / 60.0;
    let mut chart = frame(root, title)?
        .build_cartesian_2d(-minutes..0.0, 0.0..y_max)
        .map_err(|e| e.to_string())?;
    chart
        .configure_mesh()
        .x_desc("minutes ago")
        .y_desc(unit)
        .x_labels(7)
        .y_labels(6)
        .x_label_formatter(&|x| {
            let ago = -x;
            if ago < 0.5 {
                "now".to_owned()
            } else {
                format!("{ago:.0}")
            }
        })
        .y_label_formatter(&|y| short_number(*y))
        .light_line_style(RGBColor(250, 251, 252))
        .draw()
        .map_err(|e| e.to_string())?;
    for line in lines {
        let n = line.values.len();
        if n == 0 {
            continue;
        }
        let step = minutes / n as f64;
        let points = line
            .values
            .iter()
            .enumerate()
            .map(|(i, v)| (-minutes + (i as f64 + 1.0) * step, *v));
        let color = line.color;
        chart
            .draw_series(LineSeries::new(points, color.stroke_width(2)))
            .map_err(|e| e.to_string())?
            .label(line.name)
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 16, y)], color.stroke_width(2))
            });
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(RGBColor(217, 222, 231))
        .draw()
        .map_err(|e| e.to_string())?;
    root.present().map_err(|e| e.to_string())
}

/// A bar chart: one bar per bucket, labelled below.
pub(super) fn bars(title: &str, labels: &[String], counts: &[u64]) -> String {
    svg(title, BARS_SIZE, |root| {
        draw_bars(root, title, labels, counts)
    })
}

fn draw_bars(
    root: &DrawingArea<SVGBackend<'_>, Shift>,
    title: &str,
    labels: &[String],
    counts: &[u64],
) -> Result<(), String> {
    let n = counts.len().max(1) as i32;
    // Counts are whole: at least 0..5, so the axis never shows fractions of a task.
    let top = counts.iter().copied().max().unwrap_or(0) as f64;
    let y_max = (top * 1.15).max(5.0).ceil();
    let mut chart = frame(root, title)?
        .build_cartesian_2d((0..n).into_segmented(), 0.0..y_max)
        .map_err(|e| e.to_string())?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(labels.len())
        .x_label_formatter(&|v| match v {
            // At most about eight labels, so that 24 hours do not overlap.
            SegmentValue::CenterOf(i) | SegmentValue::Exact(i) => usize::try_from(*i)
                .ok()
                .filter(|i| i % labels.len().div_ceil(8).max(1) == 0)
                .and_then(|i| labels.get(i))
                .cloned()
                .unwrap_or_default(),
            SegmentValue::Last => String::new(),
        })
        .y_labels(6)
        .y_desc("tasks due")
        .y_label_formatter(&|y| {
            if y.fract() == 0.0 && *y < 1e3 {
                format!("{y:.0}")
            } else if y.fract() == 0.0 {
                short_number(*y)
            } else {
                String::new()
            }
        })
        .light_line_style(RGBColor(250, 251, 252))
        .draw()
        .map_err(|e| e.to_string())?;
    chart
        .draw_series(counts.iter().enumerate().map(|(i, c)| {
            let i = i as i32;
            Rectangle::new(
                [
                    (SegmentValue::Exact(i), 0.0),
                    (SegmentValue::Exact(i + 1), *c as f64),
                ],
                colors::ADDED.mix(0.75).filled(),
            )
        }))
        .map_err(|e| e.to_string())?;
    root.present().map_err(|e| e.to_string())
}

/// What is shown instead of a chart that could not be drawn (it should not happen; the
/// reason is in the page rather than a blank space).
fn failed(title: &str, why: &str) -> String {
    maud::html! { p.muted { (title) ": the chart could not be drawn (" (why) ")" } }.into_string()
}

/// `1.5k`, `12M`: axis labels that fit.
fn short_number(y: f64) -> String {
    let a = y.abs();
    if a >= 1e6 {
        format!("{:.1}M", y / 1e6)
    } else if a >= 1e3 {
        format!("{:.1}k", y / 1e3)
    } else if a >= 10.0 || y == 0.0 {
        format!("{y:.0}")
    } else if a >= 1.0 {
        format!("{y:.1}")
    } else {
        // 0.25, 0.1: small rates keep their digits, without trailing zeros.
        format!("{y:.2}")
            .trim_end_matches('0')
            .trim_end_matches('.')
            .to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charts_are_svg_with_their_labels() {
        let svg = lines(
            "Throughput",
            "tasks/s",
            3600.0,
            &[Line {
                name: "added",
                color: colors::ADDED,
                values: vec![1.0, 2.0, 3.0],
            }],
        );
        assert!(svg.starts_with("<svg") && svg.contains("Throughput") && svg.contains("added"));
        let svg = bars("Next hour", &["0m".into(), "5m".into()], &[3, 0]);
        assert!(svg.starts_with("<svg") && svg.contains("5m"), "{svg}");
        assert_eq!(short_number(1500.0), "1.5k");
        assert_eq!(short_number(0.5), "0.5");
        assert_eq!(short_number(0.25), "0.25");
        assert_eq!(short_number(2.5), "2.5");
    }
}

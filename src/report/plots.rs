//! Plots drawn with plotters, as SVG or PNG from the same drawing code ([`draw_on`] is generic
//! over the backend). Text is measured, and for PNG rasterised, with DejaVu Sans bundled in
//! the binary (`assets/fonts/`, through plotters' pure-Rust `ab_glyph` feature), so no system
//! font or font library is needed at build or run time; an SVG names `sans-serif` and leaves
//! the glyphs to its viewer.
//!
//! A plot is data first ([`Plot`], [`Series`], [`Point`]), drawn second, so tests can compare
//! what is drawn with the database. Log axes are drawn as linear axes over log values with
//! labels written back in the original unit (batch 1, 2, 4, ... on a log2 axis).

use std::io::Cursor;
use std::path::Path;
use std::sync::OnceLock;

use anyhow::{ensure, Context};
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::{register_font, FontStyle};

use crate::report::csv::write_atomic;
use crate::store::ResultRow;

/// Image format of the plots.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Svg,
    /// RGB bitmap, text drawn with the bundled DejaVu Sans.
    Png,
}

impl Format {
    /// The file extension of a plot in this format.
    pub fn extension(self) -> &'static str {
        match self {
            Format::Svg => "svg",
            Format::Png => "png",
        }
    }
}

/// Size of every plot: pixels (PNG) or user units (SVG).
pub const SIZE: (u32, u32) = (960, 620);

/// DejaVu Sans 2.37 (Bitstream Vera license, `assets/fonts/LICENSE`).
static FONT: &[u8] = include_bytes!("../../assets/fonts/DejaVuSans.ttf");

/// Registers the bundled font as plotters' `sans-serif` (the only family drawn here), once.
/// Needed by both backends: with `ab_glyph`, plotters lays out all text with registered fonts.
fn register_fonts() -> anyhow::Result<()> {
    static OK: OnceLock<bool> = OnceLock::new();
    let ok = *OK.get_or_init(|| register_font("sans-serif", FontStyle::Normal, FONT).is_ok());
    ensure!(ok, "the bundled font (DejaVu Sans) cannot be parsed");
    Ok(())
}

/// How a trial's point is drawn. Points without a value (OOM, skipped, failed) sit on the
/// bottom edge at their batch, so a missing result is seen, not silently absent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Mark {
    Ok,
    /// Finished, but its memory was swapped: the time measures the swap device.
    Swap,
    /// Finished, but a clock changed or dropped for temperature while it ran.
    Throttled,
    Oom,
    Skipped,
    /// failed, crashed, interrupted, still running.
    Failed,
}

impl Mark {
    pub fn of(r: &ResultRow) -> Mark {
        match r.status.as_str() {
            "ok" if r.swap_pressure == Some(true) => Mark::Swap,
            "ok" if r.throttled == Some(true) => Mark::Throttled,
            "ok" => Mark::Ok,
            "oom" => Mark::Oom,
            s if s.starts_with("skipped") => Mark::Skipped,
            _ => Mark::Failed,
        }
    }

    pub fn legend(self) -> &'static str {
        match self {
            Mark::Ok => "ok",
            Mark::Swap => "swap-spoiled (time measures swap)",
            Mark::Throttled => "throttled (clocks changed or dropped for heat)",
            Mark::Oom => "out of memory (no value)",
            Mark::Skipped => "skipped: predicted not to fit (no value)",
            Mark::Failed => "failed / crashed / interrupted (no value)",
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Point {
    pub x: f64,
    pub y: Option<f64>,
    pub mark: Mark,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    pub label: String,
    pub points: Vec<Point>,
    /// Draw a marker per point (off for loss curves: thousands of points).
    pub markers: bool,
}

impl Series {
    /// The points the line goes through: those with a value, in x order.
    pub fn line(&self) -> Vec<(f64, f64)> {
        let mut v: Vec<(f64, f64)> = self
            .points
            .iter()
            .filter_map(|p| p.y.filter(|y| y.is_finite()).map(|y| (p.x, y)))
            .collect();
        v.sort_by(|a, b| a.0.total_cmp(&b.0));
        v
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Axis {
    Linear,
    /// Logarithmic with this base (labels in the original unit).
    Log(f64),
}

impl Axis {
    fn fwd(self, v: f64) -> f64 {
        match self {
            Axis::Linear => v,
            Axis::Log(b) => v.log(b),
        }
    }
    fn back(self, v: f64) -> f64 {
        match self {
            Axis::Linear => v,
            Axis::Log(b) => b.powf(v),
        }
    }
    fn usable(self, v: f64) -> bool {
        v.is_finite() && (self == Axis::Linear || v > 0.0)
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Plot {
    pub title: String,
    pub x_desc: String,
    pub y_desc: String,
    pub x_axis: Axis,
    pub y_axis: Axis,
    pub series: Vec<Series>,
    /// Points to ring and label (e.g. the lowest EDP of each line).
    pub highlights: Vec<(f64, f64, String)>,
    /// x positions of thin vertical rules (a power trace's iteration boundaries).
    pub vlines: Vec<f64>,
}

fn label(v: f64) -> String {
    let a = v.abs();
    if a == 0.0 {
        "0".into()
    } else if (0.01..10000.0).contains(&a) {
        let s = format!("{v:.3}");
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        format!("{v:.1e}")
    }
}

/// Range of `vals` on `axis` (transformed), made non-empty.
fn range(vals: impl Iterator<Item = f64>, axis: Axis) -> Option<(f64, f64)> {
    let t: Vec<f64> = vals
        .filter(|v| axis.usable(*v))
        .map(|v| axis.fwd(v))
        .collect();
    let lo = t.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = t.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if !lo.is_finite() {
        return None;
    }
    Some(if hi > lo {
        (lo, hi)
    } else {
        (lo - 0.5, hi + 0.5)
    })
}

/// Draws `plot` in `format` at `path` (written whole, then renamed into place).
pub fn draw(plot: &Plot, path: &Path, format: Format) -> anyhow::Result<()> {
    render(plot, format)
        .and_then(|bytes| write_atomic(path, bytes))
        .with_context(|| format!("cannot draw {}", path.display()))
}

/// `plot` as the bytes of an SVG or PNG file of [`SIZE`].
pub fn render(plot: &Plot, format: Format) -> anyhow::Result<Vec<u8>> {
    match format {
        Format::Svg => {
            let mut svg = String::new();
            draw_on(
                plot,
                &SVGBackend::with_string(&mut svg, SIZE).into_drawing_area(),
            )?;
            Ok(svg.into_bytes())
        }
        Format::Png => {
            let (w, h) = SIZE;
            let mut rgb = vec![0u8; w as usize * h as usize * 3];
            draw_on(
                plot,
                &BitMapBackend::with_buffer(&mut rgb, SIZE).into_drawing_area(),
            )?;
            let img = image::RgbImage::from_raw(w, h, rgb).context("bitmap of the wrong size")?;
            let mut png = Vec::new();
            img.write_to(&mut Cursor::new(&mut png), image::ImageFormat::Png)?;
            Ok(png)
        }
    }
}

/// Draws `plot` on `root`, whatever the backend: the one drawing of both formats.
pub fn draw_on<DB>(plot: &Plot, root: &DrawingArea<DB, Shift>) -> anyhow::Result<()>
where
    DB: DrawingBackend,
    DB::ErrorType: 'static,
{
    register_fonts()?;
    let (xa, ya) = (plot.x_axis, plot.y_axis);
    let all = || plot.series.iter().flat_map(|s| s.points.iter());
    let (x0, x1) = range(all().map(|p| p.x), xa).unwrap_or((0.0, 1.0));
    let (y0, y1) = range(all().filter_map(|p| p.y), ya).unwrap_or((0.0, 1.0));
    // Linear values that are all non-negative (speedup, energy, loss) start at 0, so ratios
    // read true.
    let non_negative = all().filter_map(|p| p.y).all(|v| v.is_nan() || v >= 0.0);
    let (y0, y1) = if ya == Axis::Linear && non_negative {
        (0.0, y1.max(y0 + 1e-9))
    } else {
        (y0, y1)
    };
    let (xpad, ypad) = ((x1 - x0) * 0.05, (y1 - y0) * 0.05);
    // Points without a value get a row of their own below the lowest value.
    let no_value_y = y0 - 1.5 * ypad;
    let (x0, x1, y0, y1) = (x0 - xpad, x1 + xpad, y0 - 2.5 * ypad, y1 + ypad);

    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(root)
        .caption(&plot.title, ("sans-serif", 22))
        .margin(12)
        .x_label_area_size(44)
        .y_label_area_size(70)
        .build_cartesian_2d(x0..x1, y0..y1)?;
    // On a log2 axis only whole powers are labelled (batch 1, 2, 4, not 2.83).
    let fx = |v: &f64| match xa {
        Axis::Log(b) if b == 2.0 && (v - v.round()).abs() > 1e-6 => String::new(),
        _ => label(xa.back(*v)),
    };
    let fy = |v: &f64| label(ya.back(*v));
    chart
        .configure_mesh()
        .x_desc(plot.x_desc.as_str())
        .y_desc(plot.y_desc.as_str())
        .x_label_formatter(&fx)
        .y_label_formatter(&fy)
        .draw()?;

    for x in plot.vlines.iter().filter(|x| xa.usable(**x)) {
        let x = xa.fwd(*x);
        chart.draw_series(std::iter::once(PathElement::new(
            vec![(x, y0), (x, y1)],
            BLACK.mix(0.25).stroke_width(1),
        )))?;
    }
    for (i, s) in plot.series.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        let line: Vec<(f64, f64)> = s
            .line()
            .into_iter()
            .filter(|(x, y)| xa.usable(*x) && ya.usable(*y))
            .map(|(x, y)| (xa.fwd(x), ya.fwd(y)))
            .collect();
        chart
            .draw_series(LineSeries::new(line, color.stroke_width(2)))?
            .label(s.label.as_str())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2))
            });
        for p in s.points.iter().filter(|p| s.markers && xa.usable(p.x)) {
            let y = match p.y {
                Some(y) if ya.usable(y) => ya.fwd(y),
                _ => no_value_y,
            };
            chart
                .plotting_area()
                .draw(&marker(p.mark, (xa.fwd(p.x), y), color))?;
        }
    }

    // One legend entry per kind of point present, in black.
    let mut marks: Vec<Mark> = plot
        .series
        .iter()
        .filter(|s| s.markers)
        .flat_map(|s| s.points.iter().map(|p| p.mark))
        .collect();
    marks.sort();
    marks.dedup();
    for m in marks {
        let anno = chart
            .draw_series(std::iter::empty::<Circle<(f64, f64), i32>>())?
            .label(m.legend());
        // The same shapes as `marker`, in legend pixels; one closure type per shape.
        match m {
            Mark::Ok => anno.legend(|(x, y)| Circle::new((x + 9, y), 4, BLACK.filled())),
            Mark::Swap => anno.legend(|(x, y)| TriangleMarker::new((x + 9, y), 7, BLACK.filled())),
            Mark::Throttled => anno
                .legend(|(x, y)| Rectangle::new([(x + 4, y - 5), (x + 14, y + 5)], BLACK.filled())),
            Mark::Oom => anno.legend(|(x, y)| Cross::new((x + 9, y), 6, BLACK.stroke_width(2))),
            Mark::Skipped => {
                anno.legend(|(x, y)| Circle::new((x + 9, y), 6, BLACK.stroke_width(2)))
            }
            Mark::Failed => anno.legend(|(x, y)| {
                Rectangle::new([(x + 4, y - 5), (x + 14, y + 5)], BLACK.stroke_width(2))
            }),
        };
    }
    for (x, y, text) in &plot.highlights {
        if xa.usable(*x) && ya.usable(*y) {
            let at = (xa.fwd(*x), ya.fwd(*y));
            chart.plotting_area().draw(
                &(EmptyElement::at(at)
                    + Circle::new((0, 0), 11, BLACK.stroke_width(2))
                    + Text::new(text.clone(), (14, -18), ("sans-serif", 14).into_font())),
            )?;
        }
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .position(SeriesLabelPosition::UpperRight)
        .draw()?;
    root.present()?;
    Ok(())
}

fn marker<'a, DB: DrawingBackend + 'a>(
    m: Mark,
    at: (f64, f64),
    color: RGBAColor,
) -> DynElement<'a, DB, (f64, f64)> {
    match m {
        Mark::Ok => Circle::new(at, 4, color.filled()).into_dyn(),
        Mark::Swap => TriangleMarker::new(at, 7, color.filled()).into_dyn(),
        Mark::Throttled => {
            (EmptyElement::at(at) + Rectangle::new([(-5, -5), (5, 5)], color.filled())).into_dyn()
        }
        Mark::Oom => Cross::new(at, 6, color.stroke_width(2)).into_dyn(),
        Mark::Skipped => Circle::new(at, 6, color.stroke_width(2)).into_dyn(),
        Mark::Failed => (EmptyElement::at(at)
            + Rectangle::new([(-5, -5), (5, 5)], color.stroke_width(2)))
        .into_dyn(),
    }
}

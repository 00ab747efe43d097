//! Plots drawn with plotters, as SVG or PNG from the same drawing code ([`draw_on`] is generic
//! over the backend), and as PDF converted from the SVG (svg2pdf). Text is measured, and for PNG
//! and PDF embedded, with DejaVu Sans bundled in the binary (`assets/fonts/`, through plotters'
//! pure-Rust `ab_glyph` feature), so no system font or font library is needed at build or run
//! time; an SVG names `sans-serif` and leaves the glyphs to its viewer.
//!
//! A plot is data first ([`Plot`], [`Series`], [`Point`]), drawn second, so tests can compare
//! what is drawn with the database. Log axes are drawn as linear axes over log values with
//! labels written back in the original unit (batch 1, 2, 4, ... on a log2 axis).
//!
//! Layout, for a reviewer: the title on top, the data, the legend in a panel right of the data
//! (never over it), the caption (what, where, when) under everything. Ticks fall on 1-2-5
//! values in the unit with the SI prefix that suits the data (ms, mJ). Series differ by colour
//! (Okabe–Ito, without its yellow) and by marker shape, so they read in grey and to colour-blind
//! readers. A point without a value sits in a "no value" row under the axis' values, drawn
//! with a mark of its own, never as a measurement.

use std::io::Cursor;
use std::path::Path;
use std::sync::{Arc, OnceLock};

use anyhow::{ensure, Context};
use plotters::coord::ranged1d::{KeyPointHint, NoDefaultFormatting, Ranged, ValueFormatter};
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use plotters::style::{register_font, FontStyle};

use super::files::write_atomic;
use crate::store::ResultRow;

/// Image format of the plots.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// SVG, with a PDF of the same drawing beside it (for a paper).
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

/// Size of every plot: pixels (PNG) or user units (SVG; points in the PDF).
pub const SIZE: (u32, u32) = (960, 620);

/// Series colours: Okabe & Ito's colour-blind-safe palette in its usual order, less yellow
/// (too pale on white).
pub const PALETTE: [RGBColor; 7] = [
    RGBColor(0x00, 0x72, 0xB2),
    RGBColor(0xD5, 0x5E, 0x00),
    RGBColor(0x00, 0x9E, 0x73),
    RGBColor(0xCC, 0x79, 0xA7),
    RGBColor(0xE6, 0x9F, 0x00),
    RGBColor(0x56, 0xB4, 0xE9),
    RGBColor(0x00, 0x00, 0x00),
];

/// Markers along a line drawn without one per point.
const SPARSE_MARKERS: usize = 8;

/// Width of the legend panel right of the data.
const LEGEND_W: u32 = 280;

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

/// How a trial's point is drawn. Points without a value (OOM, skipped, failed, finished but
/// unmeasured) sit in the "no value" row at their x, so a missing result is seen, not silently
/// absent, and never read as a value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Mark {
    Ok,
    /// Finished, but its memory was swapped: the time measures the swap device.
    Swap,
    /// Finished, but a clock changed or dropped for temperature while it ran.
    Throttled,
    /// Finished `ok` without this value (an external command whose output gave no time).
    Unmeasured,
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
            Mark::Ok => "filled: ok",
            Mark::Swap => "hollow: swap-spoiled (time measures swap)",
            Mark::Throttled => "ringed: throttled (clock changed or dropped for heat)",
            Mark::Unmeasured => "no value: finished ok, value not recorded",
            Mark::Oom => "no value: out of memory",
            Mark::Skipped => "no value: skipped, predicted not to fit",
            Mark::Failed => "no value: failed / crashed / interrupted",
        }
    }

    /// Whether a point of this kind can carry a value.
    fn valued(self) -> bool {
        matches!(self, Mark::Ok | Mark::Swap | Mark::Throttled)
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Point {
    pub x: f64,
    pub y: Option<f64>,
    pub mark: Mark,
    /// Spread of the repetitions behind `y` (lowest, highest), drawn as a whisker.
    pub err: Option<(f64, f64)>,
}

/// Where a point is drawn on an axis: at its value, or in the "no value" row with this mark.
pub(crate) fn shown(p: &Point, axis: Axis) -> Result<f64, Mark> {
    match p.y {
        Some(y) if p.mark.valued() && axis.usable(y) => Ok(y),
        _ if p.mark.valued() => Err(Mark::Unmeasured),
        _ => Err(p.mark),
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    pub label: String,
    pub points: Vec<Point>,
    /// Draw a marker per point (off for loss curves: thousands of points; a few markers along
    /// the line then tell it apart).
    pub markers: bool,
}

impl Series {
    /// The points the line goes through: those with a value, in x order.
    pub fn line(&self) -> Vec<(f64, f64)> {
        let mut v: Vec<(f64, f64)> = self
            .points
            .iter()
            .filter(|p| p.mark.valued())
            .filter_map(|p| p.y.filter(|y| y.is_finite()).map(|y| (p.x, y)))
            .collect();
        v.sort_by(|a, b| a.0.total_cmp(&b.0));
        v
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub enum Axis {
    #[default]
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

/// The SI unit of a plot's y values (stored in base units), written on the axis with the
/// prefix that suits the data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Unit {
    /// A count or ratio, or a unit already in `y_desc`.
    #[default]
    None,
    Seconds,
    Joules,
    JouleSeconds,
    Watts,
}

impl Unit {
    fn symbol(self) -> &'static str {
        match self {
            Unit::None => "",
            Unit::Seconds => "s",
            Unit::Joules => "J",
            Unit::JouleSeconds => "J·s",
            Unit::Watts => "W",
        }
    }

    /// (factor, prefix) such that the largest value over the factor lies in [1, 1000), within
    /// micro to kilo.
    pub(crate) fn scale(self, max_abs: f64) -> (f64, &'static str) {
        if self == Unit::None || !(max_abs.is_finite() && max_abs > 0.0) {
            return (1.0, "");
        }
        const PREFIXES: [(f64, &str); 4] = [(1e3, "k"), (1.0, ""), (1e-3, "m"), (1e-6, "µ")];
        PREFIXES
            .iter()
            .copied()
            .find(|(f, _)| max_abs >= *f * 0.9999)
            .unwrap_or(PREFIXES[3])
    }
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct Plot {
    pub title: String,
    pub x_desc: String,
    /// What y is, without its unit (see `y_unit`) or with it when `y_unit` is `None`.
    pub y_desc: String,
    pub y_unit: Unit,
    pub x_axis: Axis,
    pub y_axis: Axis,
    /// Names of x = 0, 1, 2, ... when x is categorical (the MLP study's sizes).
    pub x_categories: Vec<String>,
    pub series: Vec<Series>,
    /// Points to ring and number; the legend gives each number's text (e.g. the lowest EDP of
    /// each line).
    pub highlights: Vec<(f64, f64, String)>,
    /// x positions of thin vertical rules (a power trace's iteration boundaries).
    pub vlines: Vec<f64>,
    /// Short texts beside points (an operator's size on a roofline); a label that would
    /// overlap one already drawn tries the point's other sides, else is left out.
    pub point_labels: Vec<(f64, f64, String)>,
    /// What, where and when: written under the figure and beside it in the HTML summary.
    pub caption: String,
}

/// A tick label: no trailing zeros, no exponent within the SI-prefixed ranges the plots use.
fn label(v: f64) -> String {
    if v == 0.0 || !v.is_finite() {
        return "0".into();
    }
    // Four significant digits take away the binary noise of 10^k powers (0.30000000000000004).
    let digits = (3 - v.abs().log10().floor() as i32).max(0) as usize;
    let s = format!("{v:.digits$}");
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

/// 1-2-5 steps: the smallest of 1, 2, 5 x 10^k at least `raw`.
fn nice_step(raw: f64) -> f64 {
    let k = raw.log10().floor();
    let base = 10f64.powf(k);
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * base)
        .find(|s| *s >= raw * 0.9999)
        .unwrap_or(10.0 * base)
}

/// Tick values (original units) for the range [lo, hi] (original units) on `axis`: 1-2-5
/// steps on a linear axis, 1-2-5 x 10^k (fewer when crowded) on a log10 axis, whole powers on
/// a log2 axis.
pub(crate) fn ticks(lo: f64, hi: f64, axis: Axis) -> Vec<f64> {
    let linear = |lo: f64, hi: f64| -> Vec<f64> {
        let step = nice_step(((hi - lo) / 6.0).max(f64::MIN_POSITIVE));
        let first = (lo / step).ceil() as i64;
        let last = (hi / step).floor() as i64;
        (first..=last)
            .map(|i| {
                let v = i as f64 * step;
                // 0.1 x 3 is not 0.3: round to the step's own digits.
                let d = 10f64.powf(-(step.log10().floor()) + 1.0);
                (v * d).round() / d
            })
            .collect()
    };
    if !(lo.is_finite() && hi.is_finite()) || hi < lo {
        return Vec::new();
    }
    match axis {
        Axis::Linear => linear(lo, hi),
        Axis::Log(2.0) => {
            let (a, z) = (lo.log2().ceil() as i32, hi.log2().floor() as i32);
            let stride = ((z - a + 1) as f64 / 12.0).ceil().max(1.0) as usize;
            (a..=z).step_by(stride).map(|k| 2f64.powi(k)).collect()
        }
        Axis::Log(_) => {
            let (a, z) = (lo.log10().floor() as i32, hi.log10().ceil() as i32);
            let within = |ms: &[f64], stride: usize| -> Vec<f64> {
                (a..=z)
                    .step_by(stride)
                    .flat_map(|k| ms.iter().map(move |m| m * 10f64.powi(k)))
                    .filter(|v| *v >= lo * 0.9999 && *v <= hi * 1.0001)
                    .collect()
            };
            let dense = within(&[1.0, 2.0, 5.0], 1);
            if dense.len() < 3 {
                // Less than a decade: linear 1-2-5 steps read better than one tick.
                return linear(lo, hi).into_iter().filter(|v| *v > 0.0).collect();
            }
            if dense.len() <= 9 {
                return dense;
            }
            (1..)
                .map(|stride| within(&[1.0], stride))
                .find(|t| t.len() <= 9)
                .unwrap_or_default()
        }
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

/// Whether the plot has anything to show: a point in some series.
pub fn has_points(plot: &Plot) -> bool {
    plot.series.iter().any(|s| !s.points.is_empty())
}

/// Draws `plot` in `format` at `path` (written whole, then renamed into place); an SVG gets
/// its PDF beside it. Returns the files written.
/// `plot` with every text cut to what a figure can show (with `…`): names from another
/// board's database may be any length.
fn with_short_texts(plot: &Plot) -> Plot {
    let cut = |t: &str, max: usize| crate::text::ellipsis(t, max).into_owned();
    let mut p = plot.clone();
    p.title = cut(&p.title, 120);
    p.x_desc = cut(&p.x_desc, 80);
    p.y_desc = cut(&p.y_desc, 80);
    p.caption = cut(&p.caption, 2000);
    for c in &mut p.x_categories {
        *c = cut(c, 40);
    }
    for s in &mut p.series {
        s.label = cut(&s.label, 60);
    }
    for (_, _, t) in p.highlights.iter_mut().chain(p.point_labels.iter_mut()) {
        *t = cut(t, 60);
    }
    p
}

pub fn draw(plot: &Plot, path: &Path, format: Format) -> anyhow::Result<Vec<std::path::PathBuf>> {
    let plot = &with_short_texts(plot);
    let write = || -> anyhow::Result<Vec<std::path::PathBuf>> {
        let bytes = render(plot, format)?;
        let mut out = vec![path.to_path_buf()];
        if format == Format::Svg {
            let pdf = pdf(std::str::from_utf8(&bytes)?)?;
            let pdf_path = path.with_extension("pdf");
            write_atomic(&pdf_path, pdf)?;
            out.push(pdf_path);
        }
        write_atomic(path, bytes)?;
        Ok(out)
    };
    write().with_context(|| format!("cannot draw {}", path.display()))
}

/// An SVG drawn here as a one-page PDF of the same size, text embedded in the bundled font.
pub fn pdf(svg: &str) -> anyhow::Result<Vec<u8>> {
    static FONTS: OnceLock<Arc<svg2pdf::usvg::fontdb::Database>> = OnceLock::new();
    let fonts = FONTS.get_or_init(|| {
        let mut db = svg2pdf::usvg::fontdb::Database::new();
        db.load_font_data(FONT.to_vec());
        // The SVG asks for `sans-serif`: the bundled font is the one the text was measured in.
        db.set_sans_serif_family("DejaVu Sans");
        Arc::new(db)
    });
    let options = svg2pdf::usvg::Options {
        fontdb: fonts.clone(),
        font_family: "DejaVu Sans".into(),
        ..Default::default()
    };
    let tree = svg2pdf::usvg::Tree::from_str(svg, &options).context("cannot read the SVG")?;
    svg2pdf::to_pdf(&tree, Default::default(), Default::default())
        .map_err(|e| anyhow::anyhow!("cannot convert the SVG to PDF: {e}"))
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

/// Width in pixels of `text` at `size` in the bundled font.
fn text_width(text: &str, size: u32) -> u32 {
    ("sans-serif", size as f64)
        .into_font()
        .box_size(text)
        .map(|(w, _)| w)
        // An estimate when the font cannot measure: wide enough to wrap early, not clip.
        .unwrap_or(text.chars().count() as u32 * size * 7 / 10)
}

/// `text` broken at spaces into lines no wider than `width` at `size`; a word wider than a
/// line is cut where it must be.
pub(crate) fn wrap(text: &str, size: u32, width: u32) -> Vec<String> {
    let mut lines: Vec<String> = Vec::new();
    let mut cur = String::new();
    for word in text.split_whitespace() {
        let candidate = if cur.is_empty() {
            word.to_string()
        } else {
            format!("{cur} {word}")
        };
        if text_width(&candidate, size) <= width {
            cur = candidate;
            continue;
        }
        if !cur.is_empty() {
            lines.push(std::mem::take(&mut cur));
        }
        let mut piece = String::new();
        for c in word.chars() {
            piece.push(c);
            if text_width(&piece, size) > width && piece.chars().count() > 1 {
                let last = piece.pop().expect("two characters at least");
                lines.push(std::mem::take(&mut piece));
                piece.push(last);
            }
        }
        cur = piece;
    }
    if !cur.is_empty() {
        lines.push(cur);
    }
    lines
}

/// The marker shape of series `i`; with the colour, unique over the first 42 series.
fn shape_of(i: usize) -> usize {
    (i % PALETTE.len() + i / PALETTE.len()) % 6
}

fn colour_of(i: usize) -> RGBAColor {
    PALETTE[i % PALETTE.len()].to_rgba()
}

/// Outline of marker shape `shape` (not 0, the circle) around the origin, in pixels.
fn outline(shape: usize) -> Vec<(i32, i32)> {
    match shape {
        1 => vec![(-5, -5), (5, -5), (5, 5), (-5, 5)],
        2 => vec![(0, -6), (6, 5), (-6, 5)],
        3 => vec![(0, -7), (7, 0), (0, 7), (-7, 0)],
        4 => vec![(-6, -5), (6, -5), (0, 6)],
        _ => vec![
            (-2, -6),
            (2, -6),
            (2, -2),
            (6, -2),
            (6, 2),
            (2, 2),
            (2, 6),
            (-2, 6),
            (-2, 2),
            (-6, 2),
            (-6, -2),
            (-2, -2),
        ],
    }
}

/// A series' marker at `at`: filled, or hollow (swap-spoiled), in `colour`.
fn series_marker<'a, DB: DrawingBackend + 'a, C: Clone + 'a>(
    shape: usize,
    at: C,
    colour: RGBAColor,
    filled: bool,
) -> DynElement<'a, DB, C> {
    let anchor = EmptyElement::at(at);
    match (shape, filled) {
        (0, true) => (anchor + Circle::new((0, 0), 5, colour.filled())).into_dyn(),
        (0, false) => (anchor + Circle::new((0, 0), 5, colour.stroke_width(2))).into_dyn(),
        (s, true) => (anchor + Polygon::new(outline(s), colour.filled())).into_dyn(),
        (s, false) => {
            let mut pts = outline(s);
            pts.push(pts[0]);
            (anchor + PathElement::new(pts, colour.stroke_width(2))).into_dyn()
        }
    }
}

/// The mark of a point without a value, at `at`, in the series' colour.
fn missing_marker<'a, DB: DrawingBackend + 'a, C: Clone + 'a>(
    m: Mark,
    at: C,
    colour: RGBAColor,
) -> DynElement<'a, DB, C> {
    let anchor = EmptyElement::at(at);
    let line = colour.stroke_width(2);
    match m {
        Mark::Oom => (anchor + Cross::new((0, 0), 5, line)).into_dyn(),
        Mark::Skipped => (anchor + Circle::new((0, 0), 5, line)).into_dyn(),
        Mark::Failed => (anchor + Rectangle::new([(-5, -5), (5, 5)], line)).into_dyn(),
        _ => (anchor + PathElement::new(vec![(0, -6), (6, 0), (0, 6), (-6, 0), (0, -6)], line))
            .into_dyn(),
    }
}

/// A linear coordinate over [lo, hi] whose ticks (and grid lines) are exactly `ticks`; their
/// labels come from the chart's formatters.
struct Ticked {
    lo: f64,
    hi: f64,
    ticks: Vec<f64>,
}

impl Ranged for Ticked {
    type FormatOption = NoDefaultFormatting;
    type ValueType = f64;

    fn map(&self, v: &f64, limit: (i32, i32)) -> i32 {
        let share = (v - self.lo) / (self.hi - self.lo);
        let span = (limit.1 - limit.0) as f64;
        if !share.is_finite() {
            return limit.0;
        }
        limit.0 + (span * share + 1e-3).floor() as i32
    }

    fn key_points<H: KeyPointHint>(&self, hint: H) -> Vec<f64> {
        // Light (minor) grid lines would crowd the 1-2-5 grid.
        if hint.weight().allow_light_points() {
            Vec::new()
        } else {
            self.ticks.clone()
        }
    }

    fn range(&self) -> std::ops::Range<f64> {
        self.lo..self.hi
    }
}

impl ValueFormatter<f64> for Ticked {
    fn format(v: &f64) -> String {
        label(*v)
    }
}

/// One legend row: what is drawn before its text, and the text.
enum Key {
    Series(usize),
    Mark(Mark),
    Number(usize),
    Text,
}

/// Draws `plot` on `root`, whatever the backend: the one drawing of both formats.
pub fn draw_on<DB>(plot: &Plot, root: &DrawingArea<DB, Shift>) -> anyhow::Result<()>
where
    DB: DrawingBackend,
    DB::ErrorType: 'static,
{
    register_fonts()?;
    let (w, h) = root.dim_in_pixel();
    let (xa, ya) = (plot.x_axis, plot.y_axis);
    let all = || plot.series.iter().flat_map(|s| s.points.iter());

    // Values in the display unit (ms rather than s).
    let max_abs = all()
        .filter_map(|p| shown(p, ya).ok())
        .map(f64::abs)
        .fold(0.0, f64::max);
    let (factor, prefix) = plot.y_unit.scale(max_abs);
    let sc = |v: f64| v / factor;

    let values: Vec<f64> = all()
        .filter(|p| xa.usable(p.x))
        .filter_map(|p| {
            let y = shown(p, ya).ok()?;
            Some([Some(y), p.err.map(|e| e.0), p.err.map(|e| e.1)])
        })
        .flatten()
        .flatten()
        .filter(|v| ya.usable(*v))
        .map(sc)
        .collect();
    let missing = all().any(|p| xa.usable(p.x) && shown(p, ya).is_err())
        && plot.series.iter().any(|s| s.markers);
    let (x0, x1) = range(all().map(|p| p.x), xa).unwrap_or((0.0, 1.0));
    let (y0, y1) = range(values.iter().copied(), ya).unwrap_or((0.0, 1.0));
    // Linear values that are all non-negative (speedup, energy, loss) start at 0, so ratios
    // read true.
    let non_negative = values.iter().all(|v| v.is_nan() || *v >= 0.0);
    let (y0, y1) = if ya == Axis::Linear && non_negative {
        (0.0, y1.max(y0 + 1e-9))
    } else {
        (y0, y1)
    };
    let (xpad, ypad) = ((x1 - x0) * 0.05, (y1 - y0) * 0.05);
    let (x0, x1) = if plot.x_categories.is_empty() {
        (x0 - xpad, x1 + xpad)
    } else {
        (x0 - 0.5, x1 + 0.5)
    };
    // Points without a value get a row of their own below the lowest value, under a rule.
    let (no_value_y, rule_y) = (y0 - 2.5 * ypad, y0 - 1.25 * ypad);
    let (y0, y1) = if missing {
        (y0 - 3.5 * ypad, y1 + ypad)
    } else {
        (if y0 == 0.0 { 0.0 } else { y0 - ypad }, y1 + ypad)
    };
    // Where a whisker whose lower end a log axis cannot show (<= 0) stops, open.
    let open_floor = if missing { rule_y } else { y0 };

    let xt: Vec<f64> = if plot.x_categories.is_empty() {
        let mut t = ticks(xa.back(x0), xa.back(x1), xa);
        // Counts (iterations) have no iteration 1.5.
        let whole: Vec<f64> = t.iter().copied().filter(|v| v.fract() == 0.0).collect();
        if xa == Axis::Linear && all().all(|p| p.x.fract() == 0.0) && whole.len() >= 2 {
            t = whole;
        }
        t.into_iter().map(|v| xa.fwd(v)).collect()
    } else {
        (0..plot.x_categories.len()).map(|i| i as f64).collect()
    };
    let mut yt: Vec<f64> = ticks(ya.back(y0), ya.back(y1), ya)
        .into_iter()
        .map(|v| ya.fwd(v))
        .filter(|v| !missing || *v > rule_y)
        .collect();
    if missing {
        yt.insert(0, no_value_y);
    }

    // Title (wrapped, on top), caption (wrapped, at the bottom), legend (right of the data).
    const TITLE: u32 = 18;
    const CAPTION: u32 = 12;
    let title = wrap(&plot.title, TITLE, w - 24);
    let caption = wrap(&plot.caption, CAPTION, w - 24);
    let title_h = title.len() as u32 * (TITLE + 6) + 10;
    let caption_h = if caption.is_empty() {
        0
    } else {
        caption.len() as u32 * (CAPTION + 4) + 12
    };

    root.fill(&WHITE)?;
    let (top, bottom) = root.split_vertically(h.saturating_sub(caption_h));
    let (title_area, body) = top.split_vertically(title_h);
    let (chart_area, legend_area) = body.split_horizontally(w - LEGEND_W);
    let style = |size: u32| ("sans-serif", size).into_font().color(&BLACK);
    let centred = style(TITLE).pos(Pos::new(HPos::Center, VPos::Top));
    for (i, line) in title.iter().enumerate() {
        title_area.draw(&Text::new(
            line.clone(),
            (w as i32 / 2, 8 + i as i32 * (TITLE as i32 + 6)),
            centred.clone(),
        ))?;
    }
    for (i, line) in caption.iter().enumerate() {
        bottom.draw(&Text::new(
            line.clone(),
            (12, 6 + i as i32 * (CAPTION as i32 + 4)),
            style(CAPTION),
        ))?;
    }

    let mut chart = ChartBuilder::on(&chart_area)
        .margin(10)
        .x_label_area_size(50)
        .y_label_area_size(84)
        .build_cartesian_2d(
            Ticked {
                lo: x0,
                hi: x1,
                ticks: xt,
            },
            Ticked {
                lo: y0,
                hi: y1,
                ticks: yt,
            },
        )?;
    let fx = |v: &f64| match plot.x_categories.get(v.round().max(0.0) as usize) {
        Some(c) if (v - v.round()).abs() < 1e-6 => c.clone(),
        _ => label(xa.back(*v)),
    };
    let fy = |v: &f64| {
        if missing && (v - no_value_y).abs() < 1e-12 {
            "no value".to_string()
        } else {
            label(ya.back(*v))
        }
    };
    let unit = plot.y_unit.symbol();
    let mut y_desc = plot.y_desc.clone();
    if !unit.is_empty() || ya != Axis::Linear {
        let log = if ya == Axis::Linear { "" } else { ", log" };
        let u = if unit.is_empty() {
            String::new()
        } else {
            format!("{prefix}{unit}")
        };
        y_desc = format!("{y_desc} ({u}{log})").replace("(, ", "(");
    }
    chart
        .configure_mesh()
        .x_desc(plot.x_desc.as_str())
        .y_desc(y_desc.as_str())
        .x_label_formatter(&fx)
        .y_label_formatter(&fy)
        .label_style(("sans-serif", 13))
        .axis_desc_style(("sans-serif", 15))
        .bold_line_style(BLACK.mix(0.12))
        .draw()?;

    if missing {
        chart.draw_series(std::iter::once(PathElement::new(
            vec![(x0, rule_y), (x1, rule_y)],
            BLACK.mix(0.5).stroke_width(1),
        )))?;
    }
    for x in plot.vlines.iter().filter(|x| xa.usable(**x)) {
        let x = xa.fwd(*x);
        chart.draw_series(std::iter::once(PathElement::new(
            vec![(x, y0), (x, y1)],
            BLACK.mix(0.25).stroke_width(1),
        )))?;
    }
    let fy_val = |v: f64| ya.fwd(sc(v));
    let mut kinds: Vec<Mark> = Vec::new();
    for (i, s) in plot.series.iter().enumerate() {
        let colour = colour_of(i);
        let line: Vec<(f64, f64)> = s
            .line()
            .into_iter()
            .filter(|(x, y)| xa.usable(*x) && ya.usable(*y))
            .map(|(x, y)| (xa.fwd(x), fy_val(y)))
            .collect();
        // A line without a marker per point (a loss curve) still carries its shape, at a few
        // points spread along it, offset per series so that equal curves stay apart.
        if !s.markers && !line.is_empty() {
            let n = line.len();
            let mut at: Vec<usize> = (0..SPARSE_MARKERS)
                .map(|k| (k * n / SPARSE_MARKERS + i * n / (SPARSE_MARKERS * 7)) % n)
                .collect();
            at.dedup();
            for k in at {
                chart
                    .plotting_area()
                    .draw(&series_marker(shape_of(i), line[k], colour, true))?;
            }
        }
        // The line breaks where the series has a point without a value (a batch that ran
        // out of memory): it never runs straight across what was not measured.
        let gaps: Vec<f64> = s
            .points
            .iter()
            .filter(|p| xa.usable(p.x) && shown(p, ya).is_err())
            .map(|p| xa.fwd(p.x))
            .collect();
        for segment in broken_at(&line, &gaps).into_iter().filter(|r| r.len() > 1) {
            chart.draw_series(LineSeries::new(segment, colour.stroke_width(2)))?;
        }
        for p in s.points.iter().filter(|p| xa.usable(p.x)) {
            let x = xa.fwd(p.x);
            match shown(p, ya) {
                Ok(y) => {
                    // A lower end a log axis cannot show (<= 0) runs to the axis' floor and
                    // ends open (a chevron, no cap): clipped, never dropped.
                    if let Some((lo, hi)) = p.err.filter(|(_, h)| ya.usable(*h)) {
                        let open = !ya.usable(lo);
                        let (lo, hi) = (if open { open_floor } else { fy_val(lo) }, fy_val(hi));
                        let whisker = colour.stroke_width(1);
                        chart
                            .plotting_area()
                            .draw(&PathElement::new(vec![(x, lo), (x, hi)], whisker))?;
                        let cap = |end: f64| {
                            EmptyElement::at((x, end))
                                + PathElement::new(vec![(-4, 0), (4, 0)], whisker)
                        };
                        chart.plotting_area().draw(&cap(hi))?;
                        match open {
                            true => chart.plotting_area().draw(
                                &(EmptyElement::at((x, lo))
                                    + PathElement::new(vec![(-4, -5), (0, 0), (4, -5)], whisker)),
                            )?,
                            false => chart.plotting_area().draw(&cap(lo))?,
                        }
                    }
                    if !s.markers {
                        continue;
                    }
                    let at = (x, fy_val(y));
                    kinds.push(p.mark);
                    chart.plotting_area().draw(&series_marker(
                        shape_of(i),
                        at,
                        colour,
                        p.mark != Mark::Swap,
                    ))?;
                    if p.mark == Mark::Throttled {
                        chart
                            .plotting_area()
                            .draw(&Circle::new(at, 9, BLACK.stroke_width(1)))?;
                    }
                }
                Err(m) if s.markers => {
                    kinds.push(m);
                    chart
                        .plotting_area()
                        .draw(&missing_marker(m, (x, no_value_y), colour))?;
                }
                Err(_) => {}
            }
        }
    }
    let mut placed: Vec<(i32, i32, i32, i32)> = Vec::new();
    for (n, (x, y, _)) in plot.highlights.iter().enumerate() {
        if xa.usable(*x) && ya.usable(*y) {
            let at = (xa.fwd(*x), fy_val(*y));
            let (px, py) = chart.backend_coord(&at);
            // The ring and its number, for the point labels to keep clear of.
            placed.push((px - 12, py - 30, px + 24, py + 12));
            chart.plotting_area().draw(
                &(EmptyElement::at(at)
                    + Circle::new((0, 0), 11, BLACK.stroke_width(2))
                    + Text::new((n + 1).to_string(), (10, -22), style(13))),
            )?;
        }
    }
    for (x, y, text) in &plot.point_labels {
        if !(xa.usable(*x) && ya.usable(*y)) {
            continue;
        }
        let at = (xa.fwd(*x), fy_val(*y));
        let (px, py) = chart.backend_coord(&at);
        // The embedded font's advance is about 0.6 em.
        let (w, h) = ((text.chars().count() as f64 * 6.6).ceil() as i32, 12);
        let free = |r: &(i32, i32, i32, i32)| {
            placed
                .iter()
                .all(|q| r.2 <= q.0 || q.2 <= r.0 || r.3 <= q.1 || q.3 <= r.1)
        };
        let spot = [(8, -h - 2), (8, 4), (-w - 8, -h - 2), (-w - 8, 4)]
            .into_iter()
            .map(|(dx, dy)| (dx, dy, (px + dx, py + dy, px + dx + w, py + dy + h)))
            .find(|(_, _, r)| free(r));
        if let Some((dx, dy, r)) = spot {
            placed.push(r);
            chart
                .plotting_area()
                .draw(&(EmptyElement::at(at) + Text::new(text.clone(), (dx, dy), style(11))))?;
        }
    }

    // The legend panel: series, then the kinds of points present, then the numbered notes.
    kinds.sort();
    kinds.dedup();
    let mut keys: Vec<(Key, String)> = plot
        .series
        .iter()
        .enumerate()
        .map(|(i, s)| (Key::Series(i), s.label.clone()))
        .collect();
    if kinds.iter().any(|k| *k != Mark::Ok) {
        keys.extend(
            kinds
                .iter()
                .map(|k| (Key::Mark(*k), k.legend().to_string())),
        );
    }
    keys.extend(
        plot.highlights
            .iter()
            .enumerate()
            .map(|(n, (.., t))| (Key::Number(n + 1), t.clone())),
    );
    if all().any(|p| p.err.is_some()) {
        keys.push((
            Key::Text,
            "whiskers: 95 % confidence interval of the mean over repetitions".into(),
        ));
    }
    if all().any(|p| p.err.is_some_and(|(lo, _)| !ya.usable(lo))) {
        keys.push((
            Key::Text,
            "open whisker end (v): the interval reaches 0 or below, off the log axis".into(),
        ));
    }
    draw_legend(&legend_area, &keys)?;
    root.present()?;
    Ok(())
}

/// `line` (in x order) cut into the runs between `gaps`: two neighbours with a gap's x
/// between them are not joined.
fn broken_at(line: &[(f64, f64)], gaps: &[f64]) -> Vec<Vec<(f64, f64)>> {
    let mut runs: Vec<Vec<(f64, f64)>> = Vec::new();
    for &p in line {
        match runs.last_mut() {
            Some(run)
                if !run
                    .last()
                    .is_some_and(|q| gaps.iter().any(|&g| q.0 < g && g < p.0)) =>
            {
                run.push(p)
            }
            _ => runs.push(vec![p]),
        }
    }
    runs
}

/// The legend rows in `area`, in the largest font (13 down to 9) at which they all fit; rows
/// that do not fit even then are counted in a last row.
fn draw_legend<DB>(area: &DrawingArea<DB, Shift>, keys: &[(Key, String)]) -> anyhow::Result<()>
where
    DB: DrawingBackend,
    DB::ErrorType: 'static,
{
    let (w, h) = area.dim_in_pixel();
    let (text_x, top) = (40i32, 14i32);
    let text_w = w.saturating_sub(text_x as u32 + 8);
    let avail = h.saturating_sub(top as u32 + 8);
    let layout = |size: u32| -> Vec<Vec<String>> {
        keys.iter().map(|(_, t)| wrap(t, size, text_w)).collect()
    };
    let height = |size: u32, rows: &[Vec<String>]| -> u32 {
        rows.iter()
            .map(|l| l.len().max(1) as u32 * (size + 3) + 6)
            .sum()
    };
    let (size, rows) = (9..=13)
        .rev()
        .map(|s| (s, layout(s)))
        .find(|(s, rows)| height(*s, rows) <= avail)
        .unwrap_or_else(|| (9, layout(9)));
    let style = ("sans-serif", size).into_font().color(&BLACK);
    let mut y = top;
    for (n, ((key, _), lines)) in keys.iter().zip(&rows).enumerate() {
        let need = lines.len().max(1) as i32 * (size as i32 + 3) + 6;
        let left = keys.len() - n;
        // Room for this row and, if more follow, the row counting them.
        let tail = if left > 1 { size as i32 + 9 } else { 0 };
        if y + need + tail > h as i32 - 4 && left > 1 {
            area.draw(&Text::new(
                format!("… and {left} more"),
                (text_x, y),
                style.clone(),
            ))?;
            break;
        }
        let mid = y + size as i32 / 2 + 1;
        match key {
            Key::Series(i) => {
                let colour = colour_of(*i);
                area.draw(&PathElement::new(
                    vec![(6, mid), (32, mid)],
                    colour.stroke_width(2),
                ))?;
                area.draw(&series_marker(shape_of(*i), (19, mid), colour, true))?;
            }
            Key::Mark(m) if m.valued() => {
                let grey = RGBColor(0x55, 0x55, 0x55).to_rgba();
                area.draw(&series_marker(0, (19, mid), grey, *m != Mark::Swap))?;
                if *m == Mark::Throttled {
                    area.draw(&Circle::new((19, mid), 9, BLACK.stroke_width(1)))?;
                }
            }
            Key::Mark(m) => {
                area.draw(&missing_marker(*m, (19, mid), BLACK.to_rgba()))?;
            }
            Key::Number(k) => {
                area.draw(&Circle::new((19, mid), 9, BLACK.stroke_width(2)))?;
                area.draw(&Text::new(
                    k.to_string(),
                    (19, mid),
                    style.clone().pos(Pos::new(HPos::Center, VPos::Center)),
                ))?;
            }
            Key::Text => {}
        }
        for (j, line) in lines.iter().enumerate() {
            area.draw(&Text::new(
                line.clone(),
                (text_x, y + j as i32 * (size as i32 + 3)),
                style.clone(),
            ))?;
        }
        y += need;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pt(x: f64, y: Option<f64>, mark: Mark) -> Point {
        Point {
            x,
            y,
            mark,
            err: None,
        }
    }

    #[test]
    fn ticks_are_1_2_5_in_the_data_range() {
        // A log axis over 6e-3 .. 40 (the values that got 6.3e-3 and 31.623).
        let t = ticks(6e-3, 40.0, Axis::Log(10.0));
        assert!(!t.is_empty() && t.len() <= 9, "{t:?}");
        for v in &t {
            assert!((6e-3..=40.0).contains(v), "{v} outside the range");
            let m = v / 10f64.powf(v.log10().floor());
            assert!(
                [1.0, 2.0, 5.0].iter().any(|k| (m - k).abs() < 1e-9),
                "{v} is not 1, 2 or 5 x 10^k"
            );
        }
        let lin = ticks(0.0, 0.37, Axis::Linear);
        assert!(lin.len() >= 3, "{lin:?}");
        let step = lin[1] - lin[0];
        let m = step / 10f64.powf(step.log10().floor());
        assert!(
            [1.0, 2.0, 5.0].iter().any(|k| (m - k).abs() < 1e-6),
            "{lin:?}"
        );
        assert!(lin.windows(2).all(|p| (p[1] - p[0] - step).abs() < 1e-12));
        // Labels read as written: no binary noise, no exponent.
        for v in lin.iter().chain(&t) {
            let l = label(*v);
            assert!(!l.contains('e') && l.len() <= 6, "{v} labelled {l}");
        }
        assert_eq!(ticks(1.0, 64.0, Axis::Log(2.0)).len(), 7);
        // Less than a decade on a log axis still gets several ticks.
        assert!(ticks(3.0, 7.0, Axis::Log(10.0)).len() >= 3);
    }

    #[test]
    fn units_take_the_prefix_of_the_data() {
        assert_eq!(Unit::Seconds.scale(0.035), (1e-3, "m"));
        assert_eq!(Unit::Seconds.scale(2.5), (1.0, ""));
        assert_eq!(Unit::Joules.scale(4e-5).1, "µ");
        assert_eq!(Unit::None.scale(0.001), (1.0, ""));
    }

    #[test]
    fn a_point_without_a_value_is_never_drawn_as_one() {
        // An ok trial without a time (an exec without a parser) has no value to draw.
        assert_eq!(
            shown(&pt(8.0, None, Mark::Ok), Axis::Log(10.0)),
            Err(Mark::Unmeasured)
        );
        assert_eq!(
            shown(&pt(8.0, Some(0.0), Mark::Ok), Axis::Log(10.0)),
            Err(Mark::Unmeasured)
        );
        assert_eq!(
            shown(&pt(8.0, Some(0.2), Mark::Oom), Axis::Linear),
            Err(Mark::Oom)
        );
        assert_eq!(
            shown(&pt(8.0, Some(0.2), Mark::Swap), Axis::Linear),
            Ok(0.2)
        );
        let series = Series {
            label: "caffe alexnet cpu".into(),
            points: vec![
                pt(1.0, Some(0.004), Mark::Ok),
                pt(2.0, None, Mark::Ok),
                pt(4.0, Some(0.003), Mark::Ok),
            ],
            markers: true,
        };
        assert_eq!(series.line().len(), 2);
        let plot = Plot {
            title: "t".into(),
            y_desc: "time per image".into(),
            y_unit: Unit::Seconds,
            x_axis: Axis::Log(2.0),
            y_axis: Axis::Log(10.0),
            series: vec![series],
            ..Default::default()
        };
        let svg = String::from_utf8(render(&plot, Format::Svg).unwrap()).unwrap();
        assert!(
            svg.contains(">\nno value\n<"),
            "no row for the missing value"
        );
        assert!(
            svg.contains("no value: finished ok"),
            "legend lacks the mark"
        );
        // Filled: the two measured points and the legend's key; the missing one is a hollow
        // diamond in the row below.
        let blue = format!("fill=\"#{:02X}{:02X}{:02X}\"", 0x00, 0x72, 0xB2);
        assert_eq!(svg.matches(&blue).count(), 2 + 1, "{svg}");
        assert!(svg.contains("(ms, log)"), "time not in ms");
    }

    #[test]
    fn error_bars_are_drawn_and_widen_the_range() {
        let mut p = pt(4.0, Some(10.0), Mark::Ok);
        let plain = Plot {
            series: vec![Series {
                label: "a".into(),
                points: vec![pt(1.0, Some(5.0), Mark::Ok), p.clone()],
                markers: true,
            }],
            ..Default::default()
        };
        p.err = Some((8.0, 30.0));
        let mut with = plain.clone();
        with.series[0].points[1] = p;
        let a = String::from_utf8(render(&plain, Format::Svg).unwrap()).unwrap();
        let b = String::from_utf8(render(&with, Format::Svg).unwrap()).unwrap();
        // The whisker and its two caps in the series' colour, and a y axis reaching 30.
        let blue = "stroke=\"#0072B2\"";
        assert_eq!(b.matches(blue).count(), a.matches(blue).count() + 3);
        assert!(b.contains(">\n30\n<") && !a.contains(">\n30\n<"), "{b}");
        assert!(b.contains("whiskers"));
    }

    #[test]
    fn a_line_breaks_where_a_point_has_no_value() {
        let line = [(1.0, 5.0), (2.0, 6.0), (8.0, 7.0), (16.0, 8.0)];
        // Batch 4 ran out of memory: 2 and 8 are not joined.
        assert_eq!(
            broken_at(&line, &[4.0]),
            [vec![(1.0, 5.0), (2.0, 6.0)], vec![(8.0, 7.0), (16.0, 8.0)]]
        );
        assert_eq!(broken_at(&line, &[]), [line.to_vec()]);
        // A missing point beyond the ends breaks nothing.
        assert_eq!(broken_at(&line, &[32.0]), [line.to_vec()]);
        let plot = |middle: Mark| Plot {
            series: vec![Series {
                label: "a".into(),
                points: vec![
                    pt(1.0, Some(5.0), Mark::Ok),
                    pt(2.0, Some(6.0), middle),
                    pt(4.0, Some(7.0), Mark::Ok),
                ],
                markers: true,
            }],
            ..Default::default()
        };
        let lines = |m: Mark| {
            let svg = String::from_utf8(render(&plot(m), Format::Svg).unwrap()).unwrap();
            svg.lines()
                .filter(|l| l.contains("<polyline") && l.contains("stroke=\"#0072B2\""))
                .count()
        };
        // Measured throughout: one line; batch 2 out of memory: no line joins 1 and 4.
        assert_eq!(
            lines(Mark::Oom),
            lines(Mark::Ok) - 1,
            "a line runs across batch 2"
        );
    }

    #[test]
    fn a_log_axis_whisker_reaching_zero_is_clipped_open_never_dropped() {
        let mut p = pt(4.0, Some(10.0), Mark::Ok);
        p.err = Some((-2.0, 22.0));
        let plot = Plot {
            y_axis: Axis::Log(10.0),
            series: vec![Series {
                label: "a".into(),
                points: vec![pt(1.0, Some(5.0), Mark::Ok), p],
                markers: true,
            }],
            ..Default::default()
        };
        let svg = String::from_utf8(render(&plot, Format::Svg).unwrap()).unwrap();
        // The whisker, its upper cap and the open end's chevron in the series' colour.
        let blue = "stroke=\"#0072B2\"";
        let mut without = plot.clone();
        without.series[0].points[1].err = None;
        let plain = String::from_utf8(render(&without, Format::Svg).unwrap()).unwrap();
        assert_eq!(svg.matches(blue).count(), plain.matches(blue).count() + 3);
        assert!(
            svg.contains("open whisker end"),
            "legend lacks the open end"
        );
    }

    #[test]
    fn point_labels_never_overlap() {
        let plot = |labels: usize| Plot {
            series: vec![Series {
                label: "a".into(),
                points: vec![pt(1.0, Some(5.0), Mark::Ok), pt(4.0, Some(10.0), Mark::Ok)],
                markers: true,
            }],
            // Every label on the same point: four sides to place them on.
            point_labels: (0..labels)
                .map(|i| (4.0, 10.0, format!("size{i}")))
                .collect(),
            ..Default::default()
        };
        let drawn = |labels: usize| {
            let svg = String::from_utf8(render(&plot(labels), Format::Svg).unwrap()).unwrap();
            (0..labels)
                .filter(|i| svg.contains(&format!(">\nsize{i}\n<")))
                .count()
        };
        assert_eq!(drawn(2), 2);
        assert_eq!(drawn(6), 4);
    }

    #[test]
    fn long_text_wraps_inside_its_width() {
        let text = "Energy-delay product vs batch, MIXED scopes (module, board): not comparable \
                    (ringed: lowest per line) — a-very-long-host-name.example.org";
        let lines = wrap(text, 18, 300);
        assert!(lines.len() > 1);
        assert!(lines.iter().all(|l| text_width(l, 18) <= 300), "{lines:?}");
        assert_eq!(
            lines.join(" "),
            text.split_whitespace().collect::<Vec<_>>().join(" ")
        );
    }

    #[test]
    fn lines_without_point_markers_still_carry_their_shape() {
        let curve = |label: &str| Series {
            label: label.into(),
            points: (1..=100)
                .map(|i| pt(i as f64, Some(7.0 / i as f64), Mark::Ok))
                .collect(),
            markers: false,
        };
        let plot = Plot {
            series: vec![curve("batch 4"), curve("batch 8")],
            ..Default::default()
        };
        let svg = String::from_utf8(render(&plot, Format::Svg).unwrap()).unwrap();
        // The first series' filled circles: along its line, and its legend key.
        let c = PALETTE[0];
        let fill = format!("fill=\"#{:02X}{:02X}{:02X}\"", c.0, c.1, c.2);
        assert_eq!(svg.matches(&fill).count(), SPARSE_MARKERS + 1);
        // The second series, equal to the first, has its own shape (a square).
        let c = PALETTE[1];
        let fill = format!("fill=\"#{:02X}{:02X}{:02X}\"", c.0, c.1, c.2);
        assert_eq!(svg.matches(&fill).count(), SPARSE_MARKERS + 1);
    }

    #[test]
    fn a_count_axis_has_whole_ticks() {
        let plot = |xs: &[f64]| Plot {
            series: vec![Series {
                label: "batch 4".into(),
                points: xs.iter().map(|x| pt(*x, Some(3.0), Mark::Ok)).collect(),
                markers: false,
            }],
            ..Default::default()
        };
        // Iterations 1 and 2 get 1-2-5 steps of 0.2, of which only the whole ones are drawn.
        let counts = String::from_utf8(render(&plot(&[1.0, 2.0]), Format::Svg).unwrap()).unwrap();
        assert!(counts.contains(">\n2\n<") && !counts.contains(">\n1.2\n<"));
        let reals = String::from_utf8(render(&plot(&[1.0, 2.5]), Format::Svg).unwrap()).unwrap();
        assert!(reals.contains(">\n1.5\n<"), "{reals}");
    }

    #[test]
    fn series_differ_in_colour_or_shape() {
        let combos: std::collections::BTreeSet<(usize, usize)> =
            (0..42).map(|i| (i % PALETTE.len(), shape_of(i))).collect();
        assert_eq!(combos.len(), 42);
    }

    #[test]
    fn the_pdf_is_a_pdf_with_the_font_embedded() {
        let plot = Plot {
            title: "Time per image".into(),
            series: vec![Series {
                label: "alexnet cpu".into(),
                points: vec![pt(1.0, Some(1.0), Mark::Ok), pt(2.0, Some(3.0), Mark::Ok)],
                markers: true,
            }],
            caption: "board tx2".into(),
            ..Default::default()
        };
        let svg = String::from_utf8(render(&plot, Format::Svg).unwrap()).unwrap();
        let pdf = pdf(&svg).unwrap();
        assert!(pdf.starts_with(b"%PDF-"));
        let text = String::from_utf8_lossy(&pdf);
        assert!(text.contains("/FontFile2"), "no embedded font");
        assert!(text.contains("DejaVu"), "not the bundled font");
    }
}

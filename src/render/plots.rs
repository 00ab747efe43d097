//! Plots drawn with plotters, as SVG or PNG from the same drawing code ([`paint`] is generic
//! over the backend), and as PDF converted from the SVG (svg2pdf). Text is measured, and for PNG
//! and PDF embedded, with DejaVu Sans bundled in the binary (`assets/fonts/`, through plotters'
//! pure-Rust `ab_glyph` feature), so no system font or font library is needed at build or run
//! time; an SVG names `sans-serif` and leaves the glyphs to its viewer.
//!
//! A plot is data first ([`Plot`], [`Series`], [`Point`]), laid out second ([`layout`], in
//! points), drawn third, so tests can compare what is drawn with the database and check the
//! layout. Log axes are drawn as linear axes over log values with labels written back in the
//! original unit (batch 1, 2, 4, ... on a log2 axis).
//!
//! Print size: a figure is as wide as [`FigureOptions::width_in`] (3.5 in, a paper's column, by
//! default); the SVG's and PDF's units are points at that size and a PNG has 300 pixels per
//! inch, so text prints at 8 to 9 pt, lines at 0.4 to 1 pt, whatever the width.
//!
//! Layout, for a reviewer: the title on top, the data, the legend under the data (never over
//! it), in columns where its names fit. The caption (what, where, when) is not drawn: it goes
//! beside the figure (`<figure>.caption.txt`) and under it in the HTML summary, unless
//! [`FigureOptions::caption_inside`] asks for it under the legend. Ticks fall on 1-2-5 values in
//! the unit with the SI prefix that suits the data (ms, mJ), thinned until their labels do not
//! touch. Series differ by colour (Okabe–Ito, without its yellow) and by marker shape, so they
//! read in grey and to colour-blind readers. Reference lines (a roofline's roofs) are plain
//! grey lines without markers, labelled beside themselves. Labels (ring numbers, line and point
//! labels) are placed clear of each other and of every marker, with a leader line when they sit
//! away from their point, or listed in the legend when no spot is free. A point without a value
//! sits in a "no value" row under the axis' values, drawn with a mark of its own, never as a
//! measurement.

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

/// How a report's figures are drawn.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FigureOptions {
    /// Printed width in inches: 3.5 a column of a two-column paper, 7 the page's width.
    pub width_in: f64,
    /// Also draw the caption into the figure, under its legend.
    pub caption_inside: bool,
}

/// A paper's column.
pub const DEFAULT_WIDTH_IN: f64 = 3.5;

/// The printed widths a figure may have, in inches.
pub(crate) const WIDTH_IN: std::ops::RangeInclusive<f64> = 2.0..=12.0;

/// A PNG's resolution at its printed size.
pub const PNG_DPI: f64 = 300.0;

impl Default for FigureOptions {
    fn default() -> Self {
        FigureOptions {
            width_in: DEFAULT_WIDTH_IN,
            caption_inside: false,
        }
    }
}

/// `--figure-width`: a printed width in inches within [`WIDTH_IN`].
pub fn parse_width(s: &str) -> Result<f64, String> {
    let w: f64 = s.trim().parse().map_err(|_| {
        format!("`{s}` is not a number of inches (3.5: a paper's column, 7: a page)")
    })?;
    if !WIDTH_IN.contains(&w) {
        return Err(format!(
            "{w} in is no printed width for a figure: give {} to {} inches (3.5: a paper's \
             column, 7: a page)",
            WIDTH_IN.start(),
            WIDTH_IN.end()
        ));
    }
    Ok(w)
}

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
    /// Lines that are no measurement (a roofline's roofs): plain, labelled beside themselves.
    pub reference_lines: Vec<RefLine>,
    /// x positions of thin vertical rules (a power trace's iteration boundaries).
    pub vlines: Vec<f64>,
    /// Short texts beside points (an operator's size on a roofline), placed clear of each
    /// other and of the markers; one without a free spot is listed in the legend.
    pub point_labels: Vec<(f64, f64, String)>,
    /// What, where and when: written beside the figure and under it in the HTML summary.
    pub caption: String,
}

/// A line that is no measurement, through `points` (original units).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RefLine {
    pub label: String,
    pub points: Vec<(f64, f64)>,
    /// Dashed (a theoretical bound beside a measured one, drawn solid).
    pub dashed: bool,
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
pub(crate) fn has_points(plot: &Plot) -> bool {
    plot.series.iter().any(|s| !s.points.is_empty())
}

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
    for r in &mut p.reference_lines {
        r.label = cut(&r.label, 60);
    }
    p
}

/// Draws `plot` in `format` at `path` (written whole, then renamed into place), at `opts`'
/// size; an SVG gets its PDF beside it, and a plot with a caption its caption in
/// `<stem>.caption.txt`. Returns the files written.
pub(crate) fn draw(
    plot: &Plot,
    path: &Path,
    format: Format,
    opts: &FigureOptions,
) -> anyhow::Result<Vec<std::path::PathBuf>> {
    let plot = &with_short_texts(plot);
    let write = || -> anyhow::Result<Vec<std::path::PathBuf>> {
        let bytes = render_with(plot, format, opts)?;
        let mut out = vec![path.to_path_buf()];
        if format == Format::Svg {
            let pdf = pdf(std::str::from_utf8(&bytes)?)?;
            let pdf_path = path.with_extension("pdf");
            write_atomic(&pdf_path, pdf)?;
            out.push(pdf_path);
        }
        if !plot.caption.is_empty() {
            let caption_path = caption_path(path);
            write_atomic(&caption_path, format!("{}\n", plot.caption))?;
            out.push(caption_path);
        }
        write_atomic(path, bytes)?;
        Ok(out)
    };
    write().with_context(|| format!("cannot draw {}", path.display()))
}

/// The caption file beside the figure at `path`: `<stem>.caption.txt`.
pub fn caption_path(path: &Path) -> std::path::PathBuf {
    path.with_extension("caption.txt")
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
    // The SVG's size is in points; usvg reads it as CSS pixels (96 per inch): a page of
    // 96 dpi is the SVG's size in points again.
    svg2pdf::to_pdf(
        &tree,
        Default::default(),
        svg2pdf::PageOptions { dpi: 96.0 },
    )
    .map_err(|e| anyhow::anyhow!("cannot convert the SVG to PDF: {e}"))
}

/// `plot` as the bytes of an SVG or PNG file at the default size.
pub fn render(plot: &Plot, format: Format) -> anyhow::Result<Vec<u8>> {
    render_with(plot, format, &FigureOptions::default())
}

/// `plot` as the bytes of an SVG (its size in points) or PNG ([`PNG_DPI`]) file at `opts`'
/// printed width.
pub(crate) fn render_with(
    plot: &Plot,
    format: Format,
    opts: &FigureOptions,
) -> anyhow::Result<Vec<u8>> {
    let lay = layout(plot, opts)?;
    let s = Scale::of(format);
    let (w, h) = (s.px(lay.w) as u32, s.px(lay.h) as u32);
    match format {
        Format::Svg => {
            let mut svg = String::new();
            paint(
                plot,
                &lay,
                &SVGBackend::with_string(&mut svg, (w, h)).into_drawing_area(),
                s,
            )?;
            // The drawing is in quarter points; its size, in points.
            let drawn = format!("<svg width=\"{w}\" height=\"{h}\"");
            let printed = format!("<svg width=\"{}pt\" height=\"{}pt\"", lay.w, lay.h);
            ensure!(svg.contains(&drawn), "plotters wrote no SVG of {w}x{h}");
            Ok(svg.replacen(&drawn, &printed, 1).into_bytes())
        }
        Format::Png => {
            let mut rgb = vec![0u8; w as usize * h as usize * 3];
            paint(
                plot,
                &lay,
                &BitMapBackend::with_buffer(&mut rgb, (w, h)).into_drawing_area(),
                s,
            )?;
            let img = image::RgbImage::from_raw(w, h, rgb).context("bitmap of the wrong size")?;
            let mut png = Vec::new();
            img.write_to(&mut Cursor::new(&mut png), image::ImageFormat::Png)?;
            Ok(png)
        }
    }
}

/// Width in points of `text` set at `em` points in the bundled font.
fn text_w(text: &str, em: f64) -> f64 {
    // Measured at 100 pt (ab_glyph's size is the font's height, ascent to descent) for
    // precision, then scaled.
    ("sans-serif", 100.0 * DEJAVU_HEIGHT_EM)
        .into_font()
        .box_size(text)
        .map(|(w, _)| w as f64 * em / 100.0)
        // An estimate when the font cannot measure: wide enough to wrap early, not clip.
        .unwrap_or(text.chars().count() as f64 * em * 0.7)
}

/// `text` broken at spaces into lines no wider than `width` points at `em` points; a word
/// wider than a line is cut where it must be.
pub(crate) fn wrap(text: &str, em: f64, width: f64) -> Vec<String> {
    let mut lines: Vec<String> = Vec::new();
    let mut cur = String::new();
    for word in text.split_whitespace() {
        let candidate = if cur.is_empty() {
            word.to_string()
        } else {
            format!("{cur} {word}")
        };
        if text_w(&candidate, em) <= width {
            cur = candidate;
            continue;
        }
        if !cur.is_empty() {
            lines.push(std::mem::take(&mut cur));
        }
        let mut piece = String::new();
        for c in word.chars() {
            piece.push(c);
            if text_w(&piece, em) > width && piece.chars().count() > 1 {
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

/// Outline of marker shape `shape` (not 0, the circle) around the origin, in backend units:
/// the shapes are drawn on a grid where 5 is the circle's radius.
fn outline(shape: usize, s: Scale) -> Vec<(i32, i32)> {
    let grid: Vec<(i32, i32)> = match shape {
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
    };
    let k = MARKER_PT / 5.0;
    grid.into_iter()
        .map(|(x, y)| (s.px(x as f64 * k), s.px(y as f64 * k)))
        .collect()
}

/// A series' marker at `at`: filled, or hollow (swap-spoiled), in `colour`.
fn series_marker<'a, DB: DrawingBackend + 'a, C: Clone + 'a>(
    shape: usize,
    at: C,
    colour: RGBAColor,
    filled: bool,
    s: Scale,
) -> DynElement<'a, DB, C> {
    let anchor = EmptyElement::at(at);
    let r = s.px(MARKER_PT);
    let hollow = colour.stroke_width(s.stroke(HOLLOW_PT));
    match (shape, filled) {
        (0, true) => (anchor + Circle::new((0, 0), r, colour.filled())).into_dyn(),
        (0, false) => (anchor + Circle::new((0, 0), r, hollow)).into_dyn(),
        (shape, true) => (anchor + Polygon::new(outline(shape, s), colour.filled())).into_dyn(),
        (shape, false) => {
            let mut pts = outline(shape, s);
            pts.push(pts[0]);
            (anchor + PathElement::new(pts, hollow)).into_dyn()
        }
    }
}

/// The mark of a point without a value, at `at`, in the series' colour.
fn missing_marker<'a, DB: DrawingBackend + 'a, C: Clone + 'a>(
    m: Mark,
    at: C,
    colour: RGBAColor,
    s: Scale,
) -> DynElement<'a, DB, C> {
    let anchor = EmptyElement::at(at);
    let line = colour.stroke_width(s.stroke(HOLLOW_PT));
    let r = s.px(MARKER_PT);
    let d = s.px(MARKER_PT * 1.2);
    match m {
        Mark::Oom => (anchor + Cross::new((0, 0), r, line)).into_dyn(),
        Mark::Skipped => (anchor + Circle::new((0, 0), r, line)).into_dyn(),
        Mark::Failed => (anchor + Rectangle::new([(-r, -r), (r, r)], line)).into_dyn(),
        _ => (anchor + PathElement::new(vec![(0, -d), (d, 0), (0, d), (-d, 0), (0, -d)], line))
            .into_dyn(),
    }
}

/// ab_glyph sizes a font by its height, ascent to descent: DejaVu Sans' is 1.164 em.
const DEJAVU_HEIGHT_EM: f64 = (1901.0 + 483.0) / 2048.0;
/// plotters' SVG backend writes a text's `font-size` as its size / 1.24.
const SVG_SIZE_PER_EM: f64 = 1.24;
/// SVG user units per point: plotters draws at whole units, so a quarter of a point.
const SVG_UNITS_PER_PT: f64 = 4.0;

// Sizes at print, in points: text 8 to 9 pt, lines and marks to match.
const TITLE_PT: f64 = 9.0;
const DESC_PT: f64 = 9.0;
const TICK_PT: f64 = 8.0;
const LEGEND_PT: f64 = 8.0;
const LABEL_PT: f64 = 8.0;
const CAPTION_PT: f64 = 8.0;
/// Line height over text size.
const LEADING: f64 = 1.2;
const LINE_PT: f64 = 1.0;
const REF_PT: f64 = 0.8;
const HOLLOW_PT: f64 = 0.7;
const WHISKER_PT: f64 = 0.6;
const CAP_PT: f64 = 1.6;
const MARKER_PT: f64 = 2.2;
const RING_PT: f64 = 4.5;
const GRID_PT: f64 = 0.4;
const AXIS_PT: f64 = 0.6;
const TICK_MARK_PT: f64 = 2.0;
const LEADER_PT: f64 = 0.4;
const MARGIN_PT: f64 = 4.0;
/// Legend: the width of a row's key (line and marker) before its text.
const KEY_PT: f64 = 16.0;

/// Points to backend units: an SVG's user units (a quarter point) or a PNG's pixels.
#[derive(Debug, Clone, Copy)]
struct Scale {
    unit: f64,
    /// plotters' font size of a 1-unit em on this backend.
    size_per_em: f64,
}

impl Scale {
    fn of(format: Format) -> Scale {
        match format {
            Format::Svg => Scale {
                unit: SVG_UNITS_PER_PT,
                size_per_em: SVG_SIZE_PER_EM,
            },
            Format::Png => Scale {
                unit: PNG_DPI / 72.0,
                size_per_em: DEJAVU_HEIGHT_EM,
            },
        }
    }
    fn px(self, pt: f64) -> i32 {
        (pt * self.unit).round() as i32
    }
    fn at(self, (x, y): (f64, f64)) -> (i32, i32) {
        (self.px(x), self.px(y))
    }
    fn stroke(self, pt: f64) -> u32 {
        ((pt * self.unit).round() as u32).max(1)
    }
    fn font(self, em: f64) -> TextStyle<'static> {
        ("sans-serif", em * self.unit * self.size_per_em)
            .into_font()
            .color(&BLACK)
    }
}

/// A line segment's ends, in points.
type Segment = ((f64, f64), (f64, f64));

/// A box in points, y down.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Rect {
    pub x0: f64,
    pub y0: f64,
    pub x1: f64,
    pub y1: f64,
}

impl Rect {
    fn around((x, y): (f64, f64), r: f64) -> Rect {
        Rect {
            x0: x - r,
            y0: y - r,
            x1: x + r,
            y1: y + r,
        }
    }
    pub(crate) fn overlaps(&self, o: &Rect) -> bool {
        self.x0 < o.x1 && o.x0 < self.x1 && self.y0 < o.y1 && o.y0 < self.y1
    }
    pub(crate) fn within(&self, o: &Rect) -> bool {
        self.x0 >= o.x0 && self.x1 <= o.x1 && self.y0 >= o.y0 && self.y1 <= o.y1
    }
    fn w(&self) -> f64 {
        self.x1 - self.x0
    }
    fn h(&self) -> f64 {
        self.y1 - self.y0
    }
    /// Whether the segment a-b crosses the box (Liang-Barsky clipping).
    fn cut_by(&self, a: (f64, f64), b: (f64, f64)) -> bool {
        let (dx, dy) = (b.0 - a.0, b.1 - a.1);
        let (mut t0, mut t1) = (0.0f64, 1.0f64);
        for (p, q) in [
            (-dx, a.0 - self.x0),
            (dx, self.x1 - a.0),
            (-dy, a.1 - self.y0),
            (dy, self.y1 - a.1),
        ] {
            if p == 0.0 {
                if q < 0.0 {
                    return false;
                }
            } else {
                let t = q / p;
                if p < 0.0 {
                    t0 = t0.max(t);
                } else {
                    t1 = t1.min(t);
                }
            }
        }
        t0 < t1
    }
}

/// A label to place beside a point: the point, how far around it to keep clear (its marker or
/// ring), the label's size, and whether above-left is its first choice (a line's label)
/// rather than right.
struct Wanted {
    at: (f64, f64),
    clear: f64,
    size: (f64, f64),
    above_left: bool,
    /// Only next to the point, never away from it with a leader line (a line's label: a
    /// leader from a line's end reads as one more line).
    near_only: bool,
}

/// A label placed: its box, and the leader line drawn to it when it sits away from its point.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Placed {
    pub rect: Rect,
    pub leader: Option<((f64, f64), (f64, f64))>,
}

/// Places each label in turn beside its point, in the first free spot of a search outwards
/// (eight directions at growing distances): inside `bounds`, over no obstacle (markers,
/// rings, labels placed before), crossing no line if a spot at that distance allows. Past the
/// second distance a leader line joins label and point. `None`: no free spot (the caller
/// lists the label in the legend instead).
fn place(
    wanted: &[Wanted],
    obstacles: &mut Vec<Rect>,
    lines: &[Segment],
    bounds: Rect,
) -> Vec<Option<Placed>> {
    const RIGHT: [(i32, i32); 8] = [
        (1, 0),
        (1, -1),
        (1, 1),
        (0, -1),
        (0, 1),
        (-1, 0),
        (-1, -1),
        (-1, 1),
    ];
    const ABOVE_LEFT: [(i32, i32); 8] = [
        (-1, -1),
        (0, -1),
        (-1, 1),
        (1, -1),
        (-1, 0),
        (0, 1),
        (1, 0),
        (1, 1),
    ];
    const STEPS: [f64; 8] = [0.0, 2.5, 6.0, 11.0, 17.0, 25.0, 36.0, 50.0];
    let mut out = Vec::new();
    for wnt in wanted {
        let (ax, ay) = wnt.at;
        let (w, h) = wnt.size;
        let dirs = if wnt.above_left { ABOVE_LEFT } else { RIGHT };
        let candidate = |d: f64, (dx, dy): (i32, i32)| {
            // Diagonals at the same distance from the point as the sides.
            let d = if dx != 0 && dy != 0 { d * 0.75 } else { d };
            let x0 = match dx {
                1 => ax + d,
                -1 => ax - d - w,
                _ => ax - w / 2.0,
            };
            let y0 = match dy {
                1 => ay + d,
                -1 => ay - d - h,
                _ => ay - h / 2.0,
            };
            Rect {
                x0,
                y0,
                x1: x0 + w,
                y1: y0 + h,
            }
        };
        let mut found = None;
        let steps = if wnt.near_only {
            &STEPS[..2]
        } else {
            &STEPS[..]
        };
        'search: for (k, step) in steps.iter().enumerate() {
            for clear_of_lines in [true, false] {
                for dir in dirs {
                    let r = candidate(wnt.clear + step, dir);
                    if !r.within(&bounds) || obstacles.iter().any(|o| o.overlaps(&r)) {
                        continue;
                    }
                    if clear_of_lines && lines.iter().any(|(a, b)| r.cut_by(*a, *b)) {
                        continue;
                    }
                    found = Some((k, r));
                    break 'search;
                }
            }
        }
        out.push(found.map(|(k, rect)| {
            obstacles.push(rect);
            let leader = (k >= 2).then(|| {
                let near = (ax.clamp(rect.x0, rect.x1), ay.clamp(rect.y0, rect.y1));
                let (dx, dy) = (near.0 - ax, near.1 - ay);
                let len = dx.hypot(dy).max(1e-9);
                let from = (ax + dx / len * wnt.clear, ay + dy / len * wnt.clear);
                (from, near)
            });
            Placed { rect, leader }
        }));
    }
    out
}

/// Tick values kept so that neighbouring labels do not touch: every `stride`-th, the
/// smallest stride that works. `pos` is a tick's place along the axis, `extent` its label's
/// length along it.
fn thin(ticks: Vec<f64>, pos: impl Fn(f64) -> f64, extent: impl Fn(f64) -> f64) -> Vec<f64> {
    for stride in 1..=ticks.len().max(1) {
        let kept: Vec<f64> = ticks.iter().copied().step_by(stride).collect();
        let fits = kept
            .windows(2)
            .all(|p| (pos(p[1]) - pos(p[0])).abs() >= (extent(p[0]) + extent(p[1])) / 2.0 + 3.0);
        if fits {
            return kept;
        }
    }
    ticks.into_iter().take(1).collect()
}

/// One legend row's key: what is drawn before its text.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Key {
    Series(usize),
    Reference(usize),
    Mark(Mark),
    Number(usize),
    Text,
}

/// A legend entry placed: its key, its text's lines, its top-left corner (pt).
#[derive(Debug, Clone)]
struct LegendItem {
    key: Key,
    lines: Vec<String>,
    at: (f64, f64),
}

/// A figure laid out in points before any drawing: what [`paint`] draws on either backend,
/// and what tests check.
pub(crate) struct Layout {
    pub w: f64,
    pub h: f64,
    title: Vec<String>,
    /// The chart: axes with their ticks, labels and descriptions, around `data`.
    chart: Rect,
    /// Top, right, bottom and left margins of the chart area, then its x label area's
    /// height and its y label area's width.
    margins: (f64, f64, f64, f64),
    x_label_h: f64,
    y_label_w: f64,
    /// Where the data is drawn.
    pub data: Rect,
    x: (f64, f64, Vec<f64>),
    y: (f64, f64, Vec<f64>),
    y_desc: String,
    /// The y unit's factor (values over it are in the axis' unit).
    factor: f64,
    missing: bool,
    no_value_y: f64,
    rule_y: f64,
    open_floor: f64,
    /// Labels placed in the data area: ring numbers, line labels, point labels.
    pub labels: Vec<(String, Placed)>,
    /// Every marker's box, for the labels to keep clear of.
    pub markers: Vec<Rect>,
    /// Point labels without a free spot, as the legend lists them.
    pub unlabelled: Vec<String>,
    /// Which reference lines were labelled beside themselves.
    ref_labelled: Vec<bool>,
    /// Ring numbers placed, by highlight.
    numbered: Vec<bool>,
    legend: Vec<LegendItem>,
    caption: Vec<(String, f64)>,
}

impl Layout {
    /// A position in the axes' (transformed) values as points on the page.
    fn to_pt(&self, (x, y): (f64, f64)) -> (f64, f64) {
        let (x0, x1, _) = self.x;
        let (y0, y1, _) = self.y;
        (
            self.data.x0 + (x - x0) / (x1 - x0) * self.data.w(),
            self.data.y1 - (y - y0) / (y1 - y0) * self.data.h(),
        )
    }
}

/// Where the markers along a line without one per point go (`n` points, series `i`): spread
/// along it, offset per series so that equal curves stay apart.
fn sparse_markers(n: usize, i: usize) -> Vec<usize> {
    let mut at: Vec<usize> = (0..SPARSE_MARKERS)
        .map(|k| (k * n / SPARSE_MARKERS + i * n / (SPARSE_MARKERS * 7)) % n)
        .collect();
    at.dedup();
    at
}

/// `plot` laid out at `opts`' width: axes, ticks that do not collide, labels placed clear of
/// each other and of the markers, the legend under the data and the caption when asked for.
pub(crate) fn layout(plot: &Plot, opts: &FigureOptions) -> anyhow::Result<Layout> {
    register_fonts()?;
    let w = (opts.width_in * 72.0).round();
    let (xa, ya) = (plot.x_axis, plot.y_axis);
    let all = || plot.series.iter().flat_map(|s| s.points.iter());
    let refs = || plot.reference_lines.iter().flat_map(|r| r.points.iter());

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
        .chain(refs().filter(|(x, _)| xa.usable(*x)).map(|(_, y)| *y))
        .filter(|v| ya.usable(*v))
        .map(sc)
        .collect();
    let missing = all().any(|p| xa.usable(p.x) && shown(p, ya).is_err())
        && plot.series.iter().any(|s| s.markers);
    let (x0, x1) =
        range(all().map(|p| p.x).chain(refs().map(|(x, _)| *x)), xa).unwrap_or((0.0, 1.0));
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
    let yt: Vec<f64> = ticks(ya.back(y0), ya.back(y1), ya)
        .into_iter()
        .map(|v| ya.fwd(v))
        .filter(|v| !missing || *v > rule_y)
        .collect();
    let x_label = |v: f64| x_tick_label(plot, v);
    let y_label = |v: f64| {
        if missing && (v - no_value_y).abs() < 1e-12 {
            NO_VALUE.to_string()
        } else {
            label(ya.back(v))
        }
    };

    let m = MARGIN_PT;
    let title = wrap(&plot.title, TITLE_PT, w - 2.0 * m);
    let title_h = match title.len() {
        0 => m,
        n => m + n as f64 * TITLE_PT * LEADING + 3.0,
    };
    let chart_h = (0.75 * w).min(190.0 + 0.2 * w).round();
    let chart = Rect {
        x0: 0.0,
        y0: title_h,
        x1: w,
        y1: title_h + chart_h,
    };
    let x_label_h = 2.0 * TICK_MARK_PT + TICK_PT * LEADING + 2.0 + DESC_PT * LEADING;
    let mut y_ticks_shown: Vec<f64> = yt.clone();
    if missing {
        y_ticks_shown.push(no_value_y);
    }
    let y_label_w = DESC_PT * LEADING
        + 3.0
        + y_ticks_shown
            .iter()
            .map(|v| text_w(&y_label(*v), TICK_PT))
            .fold(0.0, f64::max)
        + 2.0 * TICK_MARK_PT;
    let widest_x = xt
        .iter()
        .map(|v| text_w(&x_label(*v), TICK_PT))
        .fold(0.0, f64::max);
    let margins = (TICK_PT * 0.6 + 2.0, (widest_x / 2.0 + 1.0).max(m), 0.0, m);
    let data = Rect {
        x0: chart.x0 + margins.3 + y_label_w,
        y0: chart.y0 + margins.0,
        x1: chart.x1 - margins.1,
        y1: chart.y1 - margins.2 - x_label_h,
    };
    let along_x = |v: f64| data.x0 + (v - x0) / (x1 - x0) * data.w();
    let along_y = |v: f64| data.y1 - (v - y0) / (y1 - y0) * data.h();
    let xt = thin(xt, along_x, |v| text_w(&x_label(v), TICK_PT));
    let mut yt = thin(yt, along_y, |_| TICK_PT * LEADING);
    if missing {
        yt.insert(0, no_value_y);
    }
    let mut lay = Layout {
        w,
        h: 0.0,
        title,
        chart,
        margins,
        x_label_h,
        y_label_w,
        data,
        x: (x0, x1, xt),
        y: (y0, y1, yt),
        y_desc: y_desc(plot, prefix),
        factor,
        missing,
        no_value_y,
        rule_y,
        open_floor,
        labels: Vec::new(),
        markers: Vec::new(),
        unlabelled: Vec::new(),
        ref_labelled: Vec::new(),
        numbered: Vec::new(),
        legend: Vec::new(),
        caption: Vec::new(),
    };

    // What the labels keep clear of: every marker and ring; and, where they can, the lines.
    let fy_val = |v: f64| ya.fwd(sc(v));
    let mut kinds: Vec<Mark> = Vec::new();
    let mut lines: Vec<Segment> = Vec::new();
    for (i, s) in plot.series.iter().enumerate() {
        let line: Vec<(f64, f64)> = s
            .line()
            .into_iter()
            .filter(|(x, y)| xa.usable(*x) && ya.usable(*y))
            .map(|(x, y)| (xa.fwd(x), fy_val(y)))
            .collect();
        let gaps = gaps(s, xa, ya);
        for run in broken_at(&line, &gaps) {
            let run: Vec<(f64, f64)> = run.into_iter().map(|p| lay.to_pt(p)).collect();
            lines.extend(run.windows(2).map(|p| (p[0], p[1])));
        }
        if !s.markers {
            if !line.is_empty() {
                for k in sparse_markers(line.len(), i) {
                    lay.markers
                        .push(Rect::around(lay.to_pt(line[k]), MARKER_PT + 0.5));
                }
            }
            continue;
        }
        for p in s.points.iter().filter(|p| xa.usable(p.x)) {
            let (y, mark) = match shown(p, ya) {
                Ok(y) => (fy_val(y), p.mark),
                Err(m) => (no_value_y, m),
            };
            kinds.push(mark);
            lay.markers
                .push(Rect::around(lay.to_pt((xa.fwd(p.x), y)), MARKER_PT + 0.5));
        }
    }
    let ref_pts: Vec<Vec<(f64, f64)>> = plot
        .reference_lines
        .iter()
        .map(|r| {
            r.points
                .iter()
                .filter(|(x, y)| xa.usable(*x) && ya.usable(*y))
                .map(|&(x, y)| lay.to_pt((xa.fwd(x), fy_val(y))))
                .collect()
        })
        .collect();
    for pts in &ref_pts {
        lines.extend(pts.windows(2).map(|p| (p[0], p[1])));
    }
    let rings: Vec<Option<(f64, f64)>> = plot
        .highlights
        .iter()
        .map(|(x, y, _)| {
            (xa.usable(*x) && ya.usable(*y)).then(|| lay.to_pt((xa.fwd(*x), fy_val(*y))))
        })
        .collect();
    let mut obstacles = lay.markers.clone();
    obstacles.extend(
        rings
            .iter()
            .flatten()
            .map(|c| Rect::around(*c, RING_PT + 0.5)),
    );

    // Ring numbers first (they name what the legend explains), then the lines' labels, then
    // the points'.
    let text_box = |t: &str| (text_w(t, LABEL_PT) + 2.0, LABEL_PT + 1.0);
    let mut wanted: Vec<(String, Wanted)> = Vec::new();
    let mut whose: Vec<(Key, usize)> = Vec::new();
    for (n, c) in rings.iter().enumerate() {
        if let Some(c) = c {
            let t = (n + 1).to_string();
            wanted.push((
                t.clone(),
                Wanted {
                    at: *c,
                    clear: RING_PT + 0.5,
                    size: text_box(&t),
                    above_left: false,
                    near_only: false,
                },
            ));
            whose.push((Key::Number(n), n));
        }
    }
    for (i, r) in plot.reference_lines.iter().enumerate() {
        // The label sits at the line's right end, above it.
        if let Some(end) = ref_pts[i]
            .iter()
            .copied()
            .max_by(|a, b| a.0.total_cmp(&b.0))
        {
            wanted.push((
                r.label.clone(),
                Wanted {
                    at: end,
                    clear: 1.5,
                    size: text_box(&r.label),
                    above_left: true,
                    near_only: true,
                },
            ));
            whose.push((Key::Reference(i), i));
        }
    }
    for (n, (x, y, t)) in plot.point_labels.iter().enumerate() {
        if xa.usable(*x) && ya.usable(*y) {
            wanted.push((
                t.clone(),
                Wanted {
                    at: lay.to_pt((xa.fwd(*x), fy_val(*y))),
                    clear: MARKER_PT + 1.0,
                    size: text_box(t),
                    above_left: false,
                    near_only: false,
                },
            ));
            whose.push((Key::Text, n));
        }
    }
    let (texts, wanted): (Vec<String>, Vec<Wanted>) = wanted.into_iter().unzip();
    let spots = place(&wanted, &mut obstacles, &lines, data);
    lay.ref_labelled = vec![false; plot.reference_lines.len()];
    lay.numbered = vec![false; plot.highlights.len()];
    for ((text, (key, n)), spot) in texts.into_iter().zip(whose).zip(spots) {
        match (spot, key) {
            (Some(p), key) => {
                match key {
                    Key::Number(_) => lay.numbered[n] = true,
                    Key::Reference(_) => lay.ref_labelled[n] = true,
                    _ => {}
                }
                lay.labels.push((text, p));
            }
            (None, Key::Text) => {
                let (x, _, _) = &plot.point_labels[n];
                lay.unlabelled.push(format!("{text} (x {})", label(*x)));
            }
            (None, _) => {}
        }
    }

    // The legend, under the data: series and unlabelled reference lines in columns where
    // their names fit, then the kinds of points present, the numbered notes, the notes.
    kinds.sort();
    kinds.dedup();
    let mut keys: Vec<(Key, String)> = plot
        .series
        .iter()
        .enumerate()
        .map(|(i, s)| (Key::Series(i), s.label.clone()))
        .collect();
    keys.extend(
        plot.reference_lines
            .iter()
            .enumerate()
            .filter(|(i, _)| !lay.ref_labelled[*i])
            .map(|(i, r)| (Key::Reference(i), r.label.clone())),
    );
    if kinds.iter().any(|k| *k != Mark::Ok) {
        keys.extend(
            kinds
                .iter()
                .map(|k| (Key::Mark(*k), k.legend().to_string())),
        );
    }
    keys.extend(plot.highlights.iter().enumerate().map(|(n, (x, _, t))| {
        let where_ = match lay.numbered[n] {
            true => String::new(),
            false => format!(" (the ring at x {})", label(*x)),
        };
        (Key::Number(n + 1), format!("{t}{where_}"))
    }));
    if !lay.unlabelled.is_empty() {
        keys.push((
            Key::Text,
            format!(
                "not labelled for want of room: {}",
                lay.unlabelled.join("; ")
            ),
        ));
    }
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
    let avail = w - 2.0 * m;
    let columnar = |k: &Key| matches!(k, Key::Series(_) | Key::Reference(_));
    let item_w = |t: &str| KEY_PT + text_w(t, LEGEND_PT) + 6.0;
    let cols = (1..=4usize)
        .rev()
        .find(|c| {
            keys.iter()
                .filter(|(k, _)| columnar(k))
                .all(|(_, t)| item_w(t) <= avail / *c as f64)
        })
        .unwrap_or(1);
    let col_w = avail / cols as f64;
    let row_h = LEGEND_PT * LEADING + 1.5;
    let legend_top = chart.y1 + 3.0;
    let (mut y, mut col) = (legend_top, 0usize);
    for (key, text) in keys {
        if columnar(&key) && item_w(&text) <= col_w {
            lay.legend.push(LegendItem {
                key,
                lines: vec![text],
                at: (m + col as f64 * col_w, y),
            });
            col += 1;
            if col == cols {
                (col, y) = (0, y + row_h);
            }
            continue;
        }
        if col > 0 {
            (col, y) = (0, y + row_h);
        }
        let lines = wrap(&text, LEGEND_PT, avail - KEY_PT);
        let n = lines.len().max(1) as f64;
        lay.legend.push(LegendItem {
            key,
            lines,
            at: (m, y),
        });
        y += n * LEGEND_PT * LEADING + 1.5;
    }
    if col > 0 {
        y += row_h;
    }
    if opts.caption_inside && !plot.caption.is_empty() {
        y += 4.0;
        for line in wrap(&plot.caption, CAPTION_PT, avail) {
            lay.caption.push((line, y));
            y += CAPTION_PT * LEADING;
        }
    }
    lay.h = (y + m).ceil();
    Ok(lay)
}

/// The tick label of `v` (transformed) on `plot`'s x axis: a category's name, else the value.
fn x_tick_label(plot: &Plot, v: f64) -> String {
    match plot.x_categories.get(v.round().max(0.0) as usize) {
        Some(c) if (v - v.round()).abs() < 1e-6 => c.clone(),
        _ => label(plot.x_axis.back(v)),
    }
}

/// The tick label of the row of points without a value.
const NO_VALUE: &str = "no value";

/// The y axis' description with its unit (SI-prefixed) and scale.
fn y_desc(plot: &Plot, prefix: &str) -> String {
    let unit = plot.y_unit.symbol();
    let ya = plot.y_axis;
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
    y_desc
}

/// Where series `s` has a point without a value (transformed x): its line breaks there, never
/// running straight across what was not measured.
fn gaps(s: &Series, xa: Axis, ya: Axis) -> Vec<f64> {
    s.points
        .iter()
        .filter(|p| xa.usable(p.x) && shown(p, ya).is_err())
        .map(|p| xa.fwd(p.x))
        .collect()
}

/// Draws `plot`, laid out as `lay`, on `root`, whatever the backend: the one drawing of both
/// formats.
fn paint<DB>(
    plot: &Plot,
    lay: &Layout,
    root: &DrawingArea<DB, Shift>,
    s: Scale,
) -> anyhow::Result<()>
where
    DB: DrawingBackend,
    DB::ErrorType: 'static,
{
    let (xa, ya) = (plot.x_axis, plot.y_axis);
    root.fill(&WHITE)?;
    let centred = s.font(TITLE_PT).pos(Pos::new(HPos::Center, VPos::Top));
    for (i, line) in lay.title.iter().enumerate() {
        let y = MARGIN_PT + i as f64 * TITLE_PT * LEADING;
        root.draw(&Text::new(
            line.clone(),
            s.at((lay.w / 2.0, y)),
            centred.clone(),
        ))?;
    }

    let c = lay.chart;
    let chart_area = root
        .clone()
        .shrink(s.at((c.x0, c.y0)), (s.px(c.w()) as u32, s.px(c.h()) as u32));
    let (top, right, bottom, left) = lay.margins;
    let (x0, x1, xt) = lay.x.clone();
    let (y0, y1, yt) = lay.y.clone();
    let mut chart = ChartBuilder::on(&chart_area)
        .margin_top(s.px(top))
        .margin_right(s.px(right))
        .margin_bottom(s.px(bottom))
        .margin_left(s.px(left))
        .x_label_area_size(s.px(lay.x_label_h))
        .y_label_area_size(s.px(lay.y_label_w))
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
    let fx = |v: &f64| x_tick_label(plot, *v);
    let fy = |v: &f64| {
        if lay.missing && (v - lay.no_value_y).abs() < 1e-12 {
            NO_VALUE.to_string()
        } else {
            label(ya.back(*v))
        }
    };
    chart
        .configure_mesh()
        .x_desc(plot.x_desc.as_str())
        .y_desc(lay.y_desc.as_str())
        .x_label_formatter(&fx)
        .y_label_formatter(&fy)
        .label_style(s.font(TICK_PT))
        .axis_desc_style(s.font(DESC_PT))
        .axis_style(BLACK.stroke_width(s.stroke(AXIS_PT)))
        .bold_line_style(BLACK.mix(0.12).stroke_width(s.stroke(GRID_PT)))
        .set_all_tick_mark_size(s.px(TICK_MARK_PT))
        .draw()?;

    if lay.missing {
        chart.draw_series(std::iter::once(PathElement::new(
            vec![(x0, lay.rule_y), (x1, lay.rule_y)],
            BLACK.mix(0.5).stroke_width(s.stroke(GRID_PT)),
        )))?;
    }
    for x in plot.vlines.iter().filter(|x| xa.usable(**x)) {
        let x = xa.fwd(*x);
        chart.draw_series(std::iter::once(PathElement::new(
            vec![(x, y0), (x, y1)],
            BLACK.mix(0.25).stroke_width(s.stroke(GRID_PT)),
        )))?;
    }
    let fy_val = |v: f64| ya.fwd(v / lay.factor);
    // Reference lines (a roofline's roofs) first, under the data: plain lines without a
    // marker, solid or dashed.
    for r in &plot.reference_lines {
        let pts: Vec<(f64, f64)> = r
            .points
            .iter()
            .filter(|(x, y)| xa.usable(*x) && ya.usable(*y))
            .map(|&(x, y)| (xa.fwd(x), fy_val(y)))
            .collect();
        let style = REFERENCE.stroke_width(s.stroke(REF_PT));
        if r.dashed {
            chart.draw_series(DashedLineSeries::new(pts, s.px(3.0), s.px(2.0), style))?;
        } else {
            chart.draw_series(LineSeries::new(pts, style))?;
        }
    }
    for (i, ser) in plot.series.iter().enumerate() {
        let colour = colour_of(i);
        let line: Vec<(f64, f64)> = ser
            .line()
            .into_iter()
            .filter(|(x, y)| xa.usable(*x) && ya.usable(*y))
            .map(|(x, y)| (xa.fwd(x), fy_val(y)))
            .collect();
        // A line without a marker per point (a loss curve) still carries its shape, at a few
        // points spread along it.
        if !ser.markers && !line.is_empty() {
            for k in sparse_markers(line.len(), i) {
                chart.plotting_area().draw(&series_marker(
                    shape_of(i),
                    line[k],
                    colour,
                    true,
                    s,
                ))?;
            }
        }
        // The line breaks where the series has a point without a value (a batch that ran
        // out of memory): it never runs straight across what was not measured.
        let gaps = gaps(ser, xa, ya);
        for segment in broken_at(&line, &gaps).into_iter().filter(|r| r.len() > 1) {
            chart.draw_series(LineSeries::new(
                segment,
                colour.stroke_width(s.stroke(LINE_PT)),
            ))?;
        }
        for p in ser.points.iter().filter(|p| xa.usable(p.x)) {
            let x = xa.fwd(p.x);
            match shown(p, ya) {
                Ok(y) => {
                    // A lower end a log axis cannot show (<= 0) runs to the axis' floor and
                    // ends open (a chevron, no cap): clipped, never dropped.
                    if let Some((lo, hi)) = p.err.filter(|(_, h)| ya.usable(*h)) {
                        let open = !ya.usable(lo);
                        let (lo, hi) = (if open { lay.open_floor } else { fy_val(lo) }, fy_val(hi));
                        let whisker = colour.stroke_width(s.stroke(WHISKER_PT));
                        let cap_w = s.px(CAP_PT);
                        chart
                            .plotting_area()
                            .draw(&PathElement::new(vec![(x, lo), (x, hi)], whisker))?;
                        let cap = |end: f64| {
                            EmptyElement::at((x, end))
                                + PathElement::new(vec![(-cap_w, 0), (cap_w, 0)], whisker)
                        };
                        chart.plotting_area().draw(&cap(hi))?;
                        match open {
                            true => chart.plotting_area().draw(
                                &(EmptyElement::at((x, lo))
                                    + PathElement::new(
                                        vec![(-cap_w, -s.px(2.0)), (0, 0), (cap_w, -s.px(2.0))],
                                        whisker,
                                    )),
                            )?,
                            false => chart.plotting_area().draw(&cap(lo))?,
                        }
                    }
                    if !ser.markers {
                        continue;
                    }
                    let at = (x, fy_val(y));
                    chart.plotting_area().draw(&series_marker(
                        shape_of(i),
                        at,
                        colour,
                        p.mark != Mark::Swap,
                        s,
                    ))?;
                    if p.mark == Mark::Throttled {
                        chart.plotting_area().draw(&Circle::new(
                            at,
                            s.px(MARKER_PT + 1.6),
                            BLACK.stroke_width(s.stroke(WHISKER_PT)),
                        ))?;
                    }
                }
                Err(m) if ser.markers => {
                    chart.plotting_area().draw(&missing_marker(
                        m,
                        (x, lay.no_value_y),
                        colour,
                        s,
                    ))?;
                }
                Err(_) => {}
            }
        }
    }
    for (x, y, _) in &plot.highlights {
        if xa.usable(*x) && ya.usable(*y) {
            chart.plotting_area().draw(&Circle::new(
                (xa.fwd(*x), fy_val(*y)),
                s.px(RING_PT),
                BLACK.stroke_width(s.stroke(AXIS_PT)),
            ))?;
        }
    }
    // Labels on a white ground, so a line that crosses one does not cross its text.
    for (text, p) in &lay.labels {
        if let Some((a, b)) = p.leader {
            root.draw(&PathElement::new(
                vec![s.at(a), s.at(b)],
                REFERENCE.stroke_width(s.stroke(LEADER_PT)),
            ))?;
        }
        let r = p.rect;
        root.draw(&Rectangle::new(
            [s.at((r.x0, r.y0)), s.at((r.x1, r.y1))],
            WHITE.mix(0.85).filled(),
        ))?;
        root.draw(&Text::new(
            text.clone(),
            s.at((r.x0 + 1.0, r.y0 + 0.5)),
            s.font(LABEL_PT).pos(Pos::new(HPos::Left, VPos::Top)),
        ))?;
    }

    for item in &lay.legend {
        let (x, y) = item.at;
        let mid = (x + KEY_PT / 2.0, y + LEGEND_PT * 0.5);
        let key_line = vec![s.at((x + 1.0, mid.1)), s.at((x + KEY_PT - 1.0, mid.1))];
        match item.key {
            Key::Series(i) => {
                let colour = colour_of(i);
                root.draw(&PathElement::new(
                    key_line,
                    colour.stroke_width(s.stroke(LINE_PT)),
                ))?;
                root.draw(&series_marker(shape_of(i), s.at(mid), colour, true, s))?;
            }
            Key::Reference(i) => {
                let style = REFERENCE.stroke_width(s.stroke(REF_PT));
                match plot.reference_lines[i].dashed {
                    true => root.draw(&plotters::element::DashedPathElement::new(
                        key_line,
                        s.px(3.0),
                        s.px(2.0),
                        style,
                    ))?,
                    false => root.draw(&PathElement::new(key_line, style))?,
                }
            }
            Key::Mark(m) if m.valued() => {
                let grey = RGBColor(0x55, 0x55, 0x55).to_rgba();
                root.draw(&series_marker(0, s.at(mid), grey, m != Mark::Swap, s))?;
                if m == Mark::Throttled {
                    root.draw(&Circle::new(
                        s.at(mid),
                        s.px(MARKER_PT + 1.6),
                        BLACK.stroke_width(s.stroke(WHISKER_PT)),
                    ))?;
                }
            }
            Key::Mark(m) => {
                root.draw(&missing_marker(m, s.at(mid), BLACK.to_rgba(), s))?;
            }
            Key::Number(k) => {
                root.draw(&Circle::new(
                    s.at(mid),
                    s.px(RING_PT),
                    BLACK.stroke_width(s.stroke(AXIS_PT)),
                ))?;
                root.draw(&Text::new(
                    k.to_string(),
                    s.at(mid),
                    s.font(LEGEND_PT).pos(Pos::new(HPos::Center, VPos::Center)),
                ))?;
            }
            Key::Text => {}
        }
        for (j, line) in item.lines.iter().enumerate() {
            root.draw(&Text::new(
                line.clone(),
                s.at((x + KEY_PT + 2.0, y + j as f64 * LEGEND_PT * LEADING)),
                s.font(LEGEND_PT).pos(Pos::new(HPos::Left, VPos::Top)),
            ))?;
        }
    }
    for (line, y) in &lay.caption {
        root.draw(&Text::new(
            line.clone(),
            s.at((MARGIN_PT, *y)),
            s.font(CAPTION_PT).pos(Pos::new(HPos::Left, VPos::Top)),
        ))?;
    }
    root.present()?;
    Ok(())
}

/// The colour of reference lines (a roofline's roofs) and leader lines.
const REFERENCE: RGBColor = RGBColor(0x44, 0x44, 0x44);

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

    /// A plot of `n` points packed into a small corner of the data, each labelled, three of
    /// them ringed, and a reference line through them.
    fn crowded(n: usize) -> Plot {
        let points: Vec<Point> = (0..n)
            .map(|i| {
                let x = 1.0 + (i % 6) as f64 * 0.02;
                let y = 10.0 + (i / 6) as f64 * 0.03 + (i % 2) as f64 * 0.01;
                pt(x, Some(y), Mark::Ok)
            })
            .collect();
        Plot {
            series: vec![
                Series {
                    label: "packed".into(),
                    points: points.clone(),
                    markers: true,
                },
                // Far away, so that the packed points sit in a corner of the axes.
                Series {
                    label: "far".into(),
                    points: vec![pt(40.0, Some(500.0), Mark::Ok)],
                    markers: true,
                },
            ],
            x_axis: Axis::Log(10.0),
            y_axis: Axis::Log(10.0),
            point_labels: points
                .iter()
                .enumerate()
                .map(|(i, p)| (p.x, p.y.unwrap(), format!("{} MiB", 8 << (i % 5))))
                .collect(),
            highlights: points
                .iter()
                .take(3)
                .map(|p| (p.x, p.y.unwrap(), "cache".to_string()))
                .collect(),
            reference_lines: vec![RefLine {
                label: "SGEMM roof 52.1 GFLOP/s".into(),
                points: vec![(0.5, 11.0), (60.0, 11.0)],
                dashed: false,
            }],
            ..Default::default()
        }
    }

    #[test]
    fn crowded_labels_never_overlap_each_other_or_a_marker() {
        for width_in in [3.5, 7.0] {
            let plot = crowded(30);
            let opts = FigureOptions {
                width_in,
                ..Default::default()
            };
            let lay = layout(&plot, &opts).unwrap();
            let boxes: Vec<Rect> = lay.labels.iter().map(|(_, p)| p.rect).collect();
            assert!(
                boxes.len() >= 10,
                "{width_in} in: {} labels placed",
                boxes.len()
            );
            for (i, a) in boxes.iter().enumerate() {
                assert!(
                    a.within(&lay.data),
                    "{width_in} in: label {i} outside the data"
                );
                for (j, b) in boxes.iter().enumerate().skip(i + 1) {
                    assert!(!a.overlaps(b), "{width_in} in: labels {i} and {j} overlap");
                }
                for m in &lay.markers {
                    assert!(!a.overlaps(m), "{width_in} in: label {i} covers a marker");
                }
            }
            // Every label is somewhere: in the data, or listed in the legend.
            let svg = String::from_utf8(render_with(&plot, Format::Svg, &opts).unwrap()).unwrap();
            let placed = lay.labels.len();
            let listed = lay.unlabelled.len()
                + lay.numbered.iter().filter(|n| !**n).count()
                + lay.ref_labelled.iter().filter(|l| !**l).count();
            let wanted = plot.point_labels.len() + plot.highlights.len() + 1;
            assert_eq!(placed + listed, wanted, "{width_in} in");
            assert_eq!(
                svg.contains("not labelled for want of room"),
                !lay.unlabelled.is_empty()
            );
            // The three rings' numbers are next to them, and the roof's name beside it.
            for t in ["1", "2", "3", "SGEMM roof 52.1 GFLOP/s"] {
                assert!(
                    lay.labels.iter().any(|(l, _)| l == t),
                    "{width_in} in: {t} not placed"
                );
            }
        }
    }

    #[test]
    fn labels_search_outwards_and_lead_back_to_their_point() {
        let bounds = Rect {
            x0: 0.0,
            y0: 0.0,
            x1: 200.0,
            y1: 200.0,
        };
        // Ten labels on one point: the first beside it, the later ones further out with a
        // leader line, none over another.
        let wanted: Vec<Wanted> = (0..10)
            .map(|_| Wanted {
                at: (100.0, 100.0),
                clear: 3.0,
                size: (30.0, 9.0),
                above_left: false,
                near_only: false,
            })
            .collect();
        let mut obstacles = vec![Rect::around((100.0, 100.0), 2.7)];
        let spots = place(&wanted, &mut obstacles, &[], bounds);
        assert!(spots.iter().all(Option::is_some));
        let spots: Vec<Placed> = spots.into_iter().flatten().collect();
        assert!(spots[0].leader.is_none());
        assert!(spots[0].rect.x0 >= 103.0, "{:?}", spots[0].rect);
        assert!(spots.iter().any(|p| p.leader.is_some()));
        for (i, a) in spots.iter().enumerate() {
            for b in &spots[i + 1..] {
                assert!(!a.rect.overlaps(&b.rect));
            }
        }
        // No room at all: nothing placed, the caller lists it.
        let tiny = Rect {
            x0: 95.0,
            y0: 95.0,
            x1: 105.0,
            y1: 105.0,
        };
        let spots = place(&wanted[..1], &mut Vec::new(), &[], tiny);
        assert_eq!(spots, [None]);
    }

    /// Every `font-size="…"` of an SVG drawn here, in points.
    fn font_sizes_pt(svg: &str) -> Vec<f64> {
        svg.split("font-size=\"")
            .skip(1)
            .map(|p| p[..p.find('"').unwrap()].parse::<f64>().unwrap() / SVG_UNITS_PER_PT)
            .collect()
    }

    #[test]
    fn figures_print_at_their_width_with_text_of_8_to_9_pt() {
        let plot = crowded(12);
        for (width_in, pt) in [(3.5, "252pt"), (7.0, "504pt")] {
            let opts = FigureOptions {
                width_in,
                caption_inside: true,
            };
            let svg = String::from_utf8(render_with(&plot, Format::Svg, &opts).unwrap()).unwrap();
            assert!(
                svg.contains(&format!("<svg width=\"{pt}\"")),
                "{width_in} in"
            );
            let sizes = font_sizes_pt(&svg);
            assert!(sizes.len() > 10);
            for size in sizes {
                assert!(
                    (7.99..=9.01).contains(&size),
                    "{width_in} in: text at {size} pt"
                );
            }
            // The PDF's page is the printed size.
            let pdf = String::from_utf8_lossy(&pdf(&svg).unwrap()).into_owned();
            let media = pdf.split("/MediaBox [").nth(1).unwrap();
            let w: f64 = media.split_whitespace().nth(2).unwrap().parse().unwrap();
            assert!(
                (w - width_in * 72.0).abs() < 0.5,
                "{width_in} in: page {w} pt wide"
            );
            // A PNG at 300 dpi.
            let png = render_with(&plot, Format::Png, &opts).unwrap();
            let img = image::load_from_memory(&png).unwrap();
            assert_eq!(img.width(), (width_in * PNG_DPI).round() as u32);
        }
        assert!(parse_width("0.5").unwrap_err().contains("2 to 12 inches"));
        assert!(parse_width("wide").unwrap_err().contains("not a number"));
        assert_eq!(parse_width("7"), Ok(7.0));
    }

    #[test]
    fn the_caption_is_drawn_only_when_asked() {
        let mut plot = crowded(3);
        plot.caption = "Host tx2; board jetson-tx2; trials on 2025-02-01.".into();
        let svg = |caption_inside| {
            let opts = FigureOptions {
                caption_inside,
                ..Default::default()
            };
            String::from_utf8(render_with(&plot, Format::Svg, &opts).unwrap()).unwrap()
        };
        assert!(!svg(false).contains("jetson-tx2"));
        assert!(svg(true).contains("jetson-tx2"));
    }

    #[test]
    fn reference_lines_are_plain_labelled_lines() {
        let plot = crowded(3);
        let svg = String::from_utf8(render(&plot, Format::Svg).unwrap()).unwrap();
        let grey = "#444444";
        // Drawn as a line, labelled, and no marker of its colour anywhere.
        assert!(svg.contains(&format!("stroke=\"{grey}\"")));
        assert!(
            !svg.contains(&format!("fill=\"{grey}\"")),
            "a roof has markers"
        );
        assert!(svg.contains(">\nSGEMM roof 52.1 GFLOP/s\n<"));
        // It is no series: the series' markers are the packed points' and the far one's,
        // each with its legend key.
        let series_marks: usize = PALETTE[..2]
            .iter()
            .map(|c| {
                svg.matches(&format!("fill=\"#{:02X}{:02X}{:02X}\"", c.0, c.1, c.2))
                    .count()
            })
            .sum();
        assert_eq!(series_marks, 3 + 1 + 2);
    }

    #[test]
    fn long_text_wraps_inside_its_width() {
        let text = "Energy-delay product vs batch, MIXED scopes (module, board): not comparable \
                    (ringed: lowest per line) — a-very-long-host-name.example.org";
        let lines = wrap(text, 9.0, 220.0);
        assert!(lines.len() > 1);
        assert!(lines.iter().all(|l| text_w(l, 9.0) <= 220.0), "{lines:?}");
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

//! `--plot FILE.svg`: the error of each backend along the sequence, readable without the table.
//!
//! One picture per case:
//! - a line per backend: the relative error of `o` per token (log scale) against the float64
//!   reference, each point the largest among the tokens it covers; crosses on the top edge where
//!   a token's outputs are not finite, circles at each sequence's last token for the relative
//!   error of its final state;
//! - sequence boundaries (dark), chunk boundaries every 64 tokens within each sequence (light,
//!   where they are at least 4 pixels apart) and the tokens whose gates `--gate-at` set (orange);
//! - under it, one heat strip per backend: a row per value head, colored by the same log scale
//!   (magenta: not finite, grey: exact).
//!
//! SVG only: text is laid out without system fonts, so the file renders wherever it is opened.

use plotters::coord::Shift;
use plotters::prelude::*;
use std::path::{Path, PathBuf};

/// One backend's error along the sequence.
pub struct Series {
    pub name: String,
    /// `[T]` relative error per packed token (NaN: not finite).
    pub per_token: Vec<f64>,
    /// `[T * HV]` relative error per (token, value head).
    pub per_head: Vec<f64>,
    /// Relative error of each sequence's final state (`None`: no final state compared).
    pub states: Vec<Option<f64>>,
}

/// What one picture shows.
pub struct PlotCase {
    pub title: String,
    pub subtitle: String,
    /// The first packed token shown (the series start there).
    pub first: usize,
    /// The tokens shown.
    pub tokens: usize,
    pub hv: usize,
    /// `cu_seqlens`.
    pub cu: Vec<usize>,
    /// The chunk length whose boundaries are marked.
    pub chunk: usize,
    /// Tokens to mark, with a label (`g=-inf`).
    pub marks: Vec<(usize, String)>,
    pub series: Vec<Series>,
    /// Backends whose outputs equal the reference exactly (named, not drawn).
    pub exact: Vec<String>,
}

const WIDTH: u32 = 1200;
const CURVES: u32 = 460;
const LEFT: u32 = 90;
/// The column right of the curves that holds the legend.
const RIGHT: u32 = 260;
/// The largest number of points drawn per line (a point covers several tokens beyond it).
const MAX_BINS: usize = 1100;

const PALETTE: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(23, 190, 207),
    RGBColor(188, 189, 34),
];
const GATE: RGBColor = RGBColor(255, 127, 14);
const SEQ: RGBColor = RGBColor(90, 90, 90);
const CHUNK: RGBColor = RGBColor(215, 215, 215);
const NONFINITE: RGBColor = RGBColor(255, 0, 255);
const EXACT: RGBColor = RGBColor(238, 238, 238);

/// The color of series `i`.
pub fn color(i: usize) -> RGBColor {
    PALETTE[i % PALETTE.len()]
}

/// The file of each case: `path` itself for one case, `<stem>-<case>.<ext>` beside it for more.
pub fn paths(path: &Path, cases: &[String]) -> Vec<PathBuf> {
    if cases.len() <= 1 {
        return vec![path.to_path_buf()];
    }
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "plot".into());
    let ext = path
        .extension()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "svg".into());
    cases
        .iter()
        .map(|c| {
            path.with_file_name(format!(
                "{stem}-{}.{ext}",
                deltarule_tests::diff::file_safe(c)
            ))
        })
        .collect()
}

/// Bins `[0, n)` into at most `bins` ranges; each bin's value is the largest finite value, NaN
/// when any value in it is not finite.
fn binned(values: &[f64], bins: usize) -> Vec<(usize, usize, f64)> {
    let n = values.len();
    let bins = bins.clamp(1, n.max(1));
    (0..bins)
        .map(|b| {
            let (s, e) = (
                b * n / bins,
                ((b + 1) * n / bins).max(b * n / bins + 1).min(n),
            );
            let mut m = 0.0f64;
            for &x in &values[s.min(n)..e] {
                if !x.is_finite() {
                    return (s, e, f64::NAN);
                }
                m = m.max(x);
            }
            (s, e, m)
        })
        .collect()
}

/// The decades the log axis spans: from below the smallest positive error to above the largest.
fn y_range(case: &PlotCase) -> (f64, f64) {
    let all = case.series.iter().flat_map(|s| {
        s.per_token
            .iter()
            .chain(s.per_head.iter())
            .copied()
            .chain(s.states.iter().flatten().copied())
    });
    let (mut lo, mut hi) = (f64::INFINITY, 0.0f64);
    for x in all {
        if x.is_finite() && x > 0.0 {
            lo = lo.min(x);
            hi = hi.max(x);
        }
    }
    if !lo.is_finite() {
        return (1e-12, 1.0);
    }
    let lo = 10f64.powf(lo.log10().floor()).max(1e-300);
    let mut hi = 10f64.powf(hi.log10().ceil());
    if hi <= lo * 10.0 {
        hi = lo * 100.0;
    }
    (lo, hi)
}

/// A color for `x` on the log scale `[lo, hi]` (viridis stops); magenta when not finite, grey
/// when zero.
fn heat(x: f64, lo: f64, hi: f64) -> RGBColor {
    if !x.is_finite() {
        return NONFINITE;
    }
    if x <= 0.0 {
        return EXACT;
    }
    const STOPS: [(u8, u8, u8); 5] = [
        (68, 1, 84),
        (59, 82, 139),
        (33, 145, 140),
        (94, 201, 98),
        (253, 231, 37),
    ];
    let f = ((x.log10() - lo.log10()) / (hi.log10() - lo.log10())).clamp(0.0, 1.0);
    let pos = f * (STOPS.len() - 1) as f64;
    let i = (pos.floor() as usize).min(STOPS.len() - 2);
    let t = pos - i as f64;
    let mix = |a: u8, b: u8| (a as f64 + (b as f64 - a as f64) * t).round() as u8;
    let (a, b) = (STOPS[i], STOPS[i + 1]);
    RGBColor(mix(a.0, b.0), mix(a.1, b.1), mix(a.2, b.2))
}

/// The height of one head row in the strips.
fn row_height(hv: usize) -> u32 {
    (96 / hv.max(1) as u32).clamp(3, 16)
}

fn strips_height(case: &PlotCase) -> u32 {
    let rows = case.hv as u32 * row_height(case.hv);
    case.series.len() as u32 * (rows + 22) + 10
}

/// Draws the picture of one case as SVG into `path`.
pub fn draw(path: &Path, case: &PlotCase) -> Result<(), String> {
    let mut svg = String::new();
    let height = CURVES + strips_height(case) + 128;
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, height)).into_drawing_area();
        draw_on(&root, case).map_err(|e| format!("drawing failed: {e}"))?;
        root.present().map_err(|e| format!("drawing failed: {e}"))?;
    }
    deltarule_tests::casefile::write_atomic(path, svg.as_bytes()).map_err(|e| e.to_string())
}

type Area<'a> = DrawingArea<SVGBackend<'a>, Shift>;
type DrawResult<T> = Result<T, DrawingAreaErrorKind<std::io::Error>>;

fn draw_on(root: &Area<'_>, case: &PlotCase) -> DrawResult<()> {
    root.fill(&WHITE)?;
    let t = case.tokens.max(1) as f64;
    let x0 = case.first as f64;
    let shown = |x: usize| x >= case.first && x < case.first + case.tokens;
    let (lo, hi) = y_range(case);
    let (top, rest) = root.split_vertically(CURVES + 40);
    top.draw_text(
        &case.title,
        &("sans-serif", 18).into_font().color(&BLACK),
        (10, 6),
    )?;
    top.draw_text(
        &case.subtitle,
        &("sans-serif", 12).into_font().color(&SEQ),
        (10, 28),
    )?;
    let (_, top_chart) = top.split_vertically(44);
    let mut chart = ChartBuilder::on(&top_chart)
        .margin_right(RIGHT)
        .x_label_area_size(36)
        .y_label_area_size(LEFT)
        .build_cartesian_2d(x0..x0 + t, (lo..hi).log_scale())?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .y_desc("relative error per token")
        .x_desc("token (packed index across sequences)")
        .x_label_formatter(&|x| format!("{x:.0}"))
        .y_label_formatter(&|y| format!("{y:.0e}"))
        .light_line_style(WHITE)
        .draw()?;
    // one pixel of width in tokens
    let px = t / (WIDTH - LEFT - RIGHT) as f64;
    // chunk boundaries within each sequence, where they are at least 4 pixels apart
    let chunk = case.chunk.max(1);
    if (chunk as f64) / px >= 4.0 {
        let mut xs = Vec::new();
        for w in case.cu.windows(2) {
            let mut x = w[0] + chunk;
            while x < w[1] {
                if shown(x) {
                    xs.push(x as f64);
                }
                x += chunk;
            }
        }
        chart.draw_series(
            xs.into_iter()
                .map(|x| Rectangle::new([(x, lo), (x + px * 0.6, hi)], CHUNK.filled())),
        )?;
    }
    let inner: Vec<f64> = case
        .cu
        .iter()
        .skip(1)
        .take(case.cu.len().saturating_sub(2))
        .filter(|&&c| shown(c) && c > case.first)
        .map(|&c| c as f64)
        .collect();
    chart.draw_series(
        inner
            .iter()
            .map(|&x| Rectangle::new([(x, lo), (x + px * 1.2, hi)], SEQ.filled())),
    )?;
    for (tok, label) in case.marks.iter().filter(|(tok, _)| shown(*tok)) {
        let x = *tok as f64;
        chart.draw_series(std::iter::once(Rectangle::new(
            [(x, lo), (x + px * 2.0, hi)],
            GATE.mix(0.8).filled(),
        )))?;
        chart.draw_series(std::iter::once(Text::new(
            label.clone(),
            (x + px * 4.0, hi / 2.5),
            ("sans-serif", 12).into_font().color(&GATE),
        )))?;
    }
    let bins = MAX_BINS.min(case.tokens.max(1));
    let mut legend: Vec<(Key, RGBColor, String)> = Vec::new();
    for (i, s) in case.series.iter().enumerate() {
        let c = color(i);
        let points = binned(&s.per_token, bins);
        // runs of drawable points: finite and positive (zero cannot sit on a log axis)
        let mut runs: Vec<Vec<(f64, f64)>> = vec![Vec::new()];
        let mut bad = Vec::new();
        for &(a, b, y) in &points {
            let x = x0 + (a + b) as f64 / 2.0;
            if y.is_finite() && y > 0.0 {
                if let Some(r) = runs.last_mut() {
                    r.push((x, y.max(lo)));
                }
            } else {
                if !y.is_finite() {
                    bad.push(x);
                }
                if runs.last().is_some_and(|r| !r.is_empty()) {
                    runs.push(Vec::new());
                }
            }
        }
        let style = c.stroke_width(2);
        let mut drawn = false;
        for run in runs.into_iter().filter(|r| !r.is_empty()) {
            chart.draw_series(LineSeries::new(run, style))?;
            drawn = true;
        }
        legend.push((
            Key::Line,
            c,
            if drawn {
                s.name.clone()
            } else {
                format!("{} (nothing finite)", s.name)
            },
        ));
        chart.draw_series(
            bad.iter()
                .map(|&x| Cross::new((x, hi / 1.3), 5, c.stroke_width(2))),
        )?;
        let ends = case.cu.iter().skip(1).map(|&e| e.saturating_sub(1));
        chart.draw_series(s.states.iter().zip(ends).filter_map(|(v, x)| {
            // an exact final state (error 0) has no place on a log axis
            let v = (*v).filter(|v| shown(x) && *v != 0.0)?;
            let x = x as f64;
            let y = if v.is_finite() {
                v.clamp(lo, hi)
            } else {
                hi / 1.3
            };
            Some(Circle::new((x, y), 5, c.stroke_width(2)))
        }))?;
    }
    legend.push((Key::Circle, BLACK, "final state of each sequence".into()));
    legend.push((Key::Cross, BLACK, "outputs not finite (NaN/Inf)".into()));
    if !inner.is_empty() {
        legend.push((Key::Bar, SEQ, "sequence boundary".into()));
    }
    if (chunk as f64) / px >= 4.0 {
        legend.push((Key::Bar, CHUNK, format!("chunk boundary ({chunk} tokens)")));
    }
    if !case.marks.is_empty() {
        legend.push((Key::Bar, GATE, "gate set by --gate-at".into()));
    }
    draw_legend(root, &legend)?;
    draw_strips(root, &rest, case, lo, hi)
}

/// How a legend entry is drawn (no polylines: those are the series).
enum Key {
    Line,
    Circle,
    Cross,
    Bar,
}

/// Draws the legend in the column right of the curves.
fn draw_legend(root: &Area<'_>, entries: &[(Key, RGBColor, String)]) -> DrawResult<()> {
    let x = (WIDTH - RIGHT + 30) as i32;
    let font = ("sans-serif", 12).into_font();
    for (i, (key, c, label)) in entries.iter().enumerate() {
        let y = 70 + 20 * i as i32;
        match key {
            Key::Line => root.draw(&Rectangle::new([(x, y - 1), (x + 20, y + 2)], c.filled()))?,
            Key::Circle => root.draw(&Circle::new((x + 10, y), 4, c.stroke_width(2)))?,
            Key::Cross => root.draw(&Cross::new((x + 10, y), 4, c.stroke_width(2)))?,
            Key::Bar => root.draw(&Rectangle::new(
                [(x + 9, y - 7), (x + 12, y + 7)],
                c.filled(),
            ))?,
        }
        let text: String = if label.chars().count() > 30 {
            label.chars().take(29).chain(std::iter::once('…')).collect()
        } else {
            label.clone()
        };
        root.draw_text(&text, &font.color(&BLACK), (x + 28, y - 6))?;
    }
    Ok(())
}

fn draw_strips(
    root: &Area<'_>,
    area: &Area<'_>,
    case: &PlotCase,
    lo: f64,
    hi: f64,
) -> DrawResult<()> {
    let t = case.tokens.max(1) as f64;
    let x0 = case.first as f64;
    let rh = row_height(case.hv);
    let block = case.hv as u32 * rh + 22;
    let (strips, foot) = area.split_vertically(strips_height(case));
    let rows_px = strips_height(case).max(1);
    let mut chart = ChartBuilder::on(&strips)
        .margin_right(RIGHT)
        .y_label_area_size(LEFT)
        .build_cartesian_2d(x0..x0 + t, 0f64..rows_px as f64)?;
    let cells = 60_000 / (case.series.len() * case.hv).max(1);
    let bins = cells.clamp(50, 600).min(case.tokens.max(1));
    let font = ("sans-serif", 12).into_font();
    for (i, s) in case.series.iter().enumerate() {
        // y grows upward in the chart: block i starts at the top
        let top = rows_px as f64 - (i as u32 * block) as f64 - 18.0;
        let (lx, ly) = chart.backend_coord(&(x0, top + 16.0));
        root.draw_text(
            &format!("{}: relative error per value head (row h = head h)", s.name),
            &font.color(&color(i)),
            (lx, ly),
        )?;
        for h in 0..case.hv {
            let y1 = top - (h as u32 * rh) as f64;
            let y0 = y1 - rh as f64;
            let col: Vec<f64> = (0..case.tokens)
                .map(|tok| {
                    s.per_head
                        .get(tok * case.hv + h)
                        .copied()
                        .unwrap_or(f64::NAN)
                })
                .collect();
            chart.draw_series(binned(&col, bins).into_iter().map(|(a, b, v)| {
                Rectangle::new(
                    [(x0 + a as f64, y0), (x0 + b as f64, y1)],
                    heat(v, lo, hi).filled(),
                )
            }))?;
            if rh >= 9 || h == 0 || h + 1 == case.hv {
                let (px, py) = chart.backend_coord(&(x0, y1));
                root.draw_text(
                    &format!("h{h}"),
                    &("sans-serif", 10).into_font().color(&SEQ),
                    (px - 28, py),
                )?;
            }
        }
    }
    // color bar
    let (x0, y0) = (LEFT as i32, 12);
    let w = (WIDTH - LEFT - 300) as i32;
    let steps = 100;
    for k in 0..steps {
        let f = k as f64 / (steps - 1) as f64;
        let x = lo * (hi / lo).powf(f);
        foot.draw(&Rectangle::new(
            [
                (x0 + k * w / steps, y0),
                (x0 + (k + 1) * w / steps, y0 + 14),
            ],
            heat(x, lo, hi).filled(),
        ))?;
    }
    let decades = (hi / lo).log10().round() as i32;
    let every = (decades / 8).max(1);
    for d in (0..=decades).step_by(every as usize) {
        let x = x0 + d * w / decades.max(1);
        foot.draw_text(
            &format!("{:.0e}", lo * 10f64.powi(d)),
            &("sans-serif", 10).into_font().color(&BLACK),
            (x - 10, y0 + 18),
        )?;
    }
    foot.draw(&Rectangle::new(
        [(x0 + w + 20, y0), (x0 + w + 34, y0 + 14)],
        NONFINITE.filled(),
    ))?;
    foot.draw_text("not finite", &font.color(&BLACK), (x0 + w + 38, y0 + 1))?;
    foot.draw(&Rectangle::new(
        [(x0 + w + 120, y0), (x0 + w + 134, y0 + 14)],
        EXACT.filled(),
    ))?;
    foot.draw_text("exact", &font.color(&BLACK), (x0 + w + 138, y0 + 1))?;
    let mut note = String::from(
        "each point and cell: the largest relative error among the tokens it covers, against the float64 reference",
    );
    if !case.exact.is_empty() {
        note.push_str(&format!(
            "; exact everywhere (not drawn): {}",
            case.exact.join(", ")
        ));
    }
    foot.draw_text(&note, &font.color(&SEQ), (10, y0 + 40))?;
    let px = t / (WIDTH - LEFT - RIGHT) as f64;
    if (case.chunk.max(1) as f64) / px < 4.0 {
        let dense = format!(
            "chunk boundaries (every {} tokens) are too dense to draw at this width: \
             --plot-tokens START..END shows them",
            case.chunk
        );
        foot.draw_text(&dense, &font.color(&SEQ), (10, y0 + 58))?;
    }
    Ok(())
}

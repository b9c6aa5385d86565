//! Rendering rows for a terminal: the default table, the wide table, aligned columns, numbers
//! and the worst element in words.

use super::DiffRow;

/// The widest line of the default table.
pub const NARROW: usize = 100;

/// The legend printed under the default table (at most [`NARROW`] columns).
pub const LEGEND: &str =
    "rel_l2 = |got-want|/|want|, want = the file's expected (else f64 run here); vs_f64: same vs f64";

/// The legend printed under a table of `compare` rows.
pub const COMPARE_LEGEND: &str =
    "rel_l2 = |got-want|/|want|, got = A, want = B; bound: --tol, else the sum of A's and B's bounds";

/// A number in at most 9 characters: `exact` for 0 where `exact_word`, else 3 significant digits.
fn num(x: f64) -> String {
    if x.is_nan() {
        "NaN".into()
    } else if x.is_infinite() {
        if x > 0.0 { "inf" } else { "-inf" }.into()
    } else if x == 0.0 {
        "0".into()
    } else {
        format!("{x:.2e}")
    }
}

/// `x` with `sig` significant digits, plain where that is short.
fn with_digits(x: f64, sig: usize) -> String {
    if !x.is_finite() {
        return num(x);
    }
    let a = x.abs();
    if a == 0.0 {
        return "0".into();
    }
    let exp = a.log10().floor() as i32;
    if !(-3..5).contains(&exp) {
        return format!("{x:.*e}", sig.saturating_sub(1));
    }
    let decimals = (sig as i32 - 1 - exp).max(0) as usize;
    let s = format!("{x:.decimals$}");
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

/// A got/want pair with enough significant digits (4 to 10) that they differ where they do.
pub fn value_pair(got: f64, want: f64) -> (String, String) {
    let d = (got - want).abs();
    let m = got.abs().max(want.abs());
    let sig = if d > 0.0 && m > 0.0 && d.is_finite() {
        ((m / d).log10().ceil() as usize + 2).clamp(4, 10)
    } else {
        4
    };
    (with_digits(got, sig), with_digits(want, sig))
}

/// The worst element of a row in words, with its values, or why there is none.
pub fn worst_words(r: &DiffRow) -> String {
    match (r.exact(), &r.worst) {
        (true, _) => "exact (error 0 everywhere)".into(),
        (false, w) => {
            let (got, want) = value_pair(r.metrics.worst_got, r.metrics.worst_want);
            let mut s = format!("{}: got {got}, want {want}", w.describe());
            if r.metrics.nonfinite > 0 {
                s = format!("{} non-finite value(s); first at {s}", r.metrics.nonfinite);
            }
            s
        }
    }
}

/// Wraps `line` to at most `width` columns at `, ` or spaces, continuation lines indented by
/// `indent` spaces; a word longer than the width is cut.
pub fn wrap(line: &str, width: usize, indent: usize) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = line.to_string();
    let pad = " ".repeat(indent);
    loop {
        let limit = if out.is_empty() {
            width
        } else {
            width - indent
        };
        if rest.chars().count() <= limit {
            out.push(if out.is_empty() {
                rest
            } else {
                format!("{pad}{rest}")
            });
            return out;
        }
        let cut: String = rest.chars().take(limit).collect();
        let at = cut
            .rfind(", ")
            .map(|i| i + 1)
            .or_else(|| cut.rfind(' '))
            .filter(|&i| i > 0)
            .unwrap_or(cut.len());
        let head = rest[..at].trim_end().to_string();
        rest = rest[at..].trim_start().to_string();
        out.push(if out.is_empty() {
            head
        } else {
            format!("{pad}{head}")
        });
        if rest.is_empty() {
            return out;
        }
    }
}

/// Renders rows for a terminal of [`NARROW`] columns: per case a heading, one line per
/// (backend, tensor) and the worst element in words under each row that is not exact; a legend.
pub fn render_table(rows: &[DiffRow]) -> String {
    let mut out = String::new();
    let mut cases: Vec<&str> = Vec::new();
    for r in rows {
        if !cases.contains(&r.case.as_str()) {
            cases.push(&r.case);
        }
    }
    let bw = rows
        .iter()
        .map(|r| r.backend.chars().count())
        .max()
        .unwrap_or(7)
        .clamp(7, 24);
    for case in cases {
        let mine: Vec<&DiffRow> = rows.iter().filter(|r| r.case == case).collect();
        let want = if mine.iter().any(|r| r.reference == "expected") {
            "the file's expected tensors"
        } else if mine.iter().all(|r| r.reference == "f64") {
            "the float64 reference run here"
        } else {
            "the other output set"
        };
        out.push_str(&wrap(&format!("case {case}: want = {want}"), NARROW, 4).join("\n"));
        out.push('\n');
        let head = format!(
            "  {:<bw$}  {:<11}  {:<9}  {:<9}  {:<9}  {:<5}  result",
            "backend", "tensor", "rel_l2", "vs_f64", "max_abs", "bound"
        );
        out.push_str(head.trim_end());
        out.push('\n');
        for r in mine {
            // a name wider than its column gets a line of its own
            let backend = if r.backend.chars().count() > bw {
                out.push_str(&format!("  {}\n", r.backend));
                String::new()
            } else {
                r.backend.clone()
            };
            let rel = if r.exact() {
                "exact".to_string()
            } else {
                num(r.metrics.rel_l2)
            };
            let line = format!(
                "  {:<bw$}  {:<11}  {:<9}  {:<9}  {:<9}  {:<5}  {}",
                backend,
                r.tensor,
                rel,
                r.rel_l2_f64.map_or("-".into(), num),
                num(r.metrics.max_abs),
                format!("{:.0e}", r.tolerance),
                if r.pass { "pass" } else { "FAIL" },
            );
            out.push_str(line.trim_end());
            out.push('\n');
            if !r.exact() {
                for l in wrap(&format!("      worst: {}", worst_words(r)), NARROW, 13) {
                    out.push_str(&l);
                    out.push('\n');
                }
            }
        }
    }
    let compared = rows
        .iter()
        .all(|r| r.reference != "expected" && r.reference != "f64");
    out.push_str(if compared && !rows.is_empty() {
        COMPARE_LEGEND
    } else {
        LEGEND
    });
    out.push('\n');
    out
}

/// Renders rows as one wide table with every field (`--wide`).
pub fn render_wide(rows: &[DiffRow]) -> String {
    let header = [
        "case",
        "backend",
        "kernel",
        "rule",
        "device",
        "tensor",
        "vs",
        "rel_l2",
        "rel_l2_f64",
        "max_abs",
        "nonfinite",
        "tol",
        "result",
        "worst element",
    ];
    let mut cells: Vec<Vec<String>> = vec![header.iter().map(|s| s.to_string()).collect()];
    for r in rows {
        cells.push(vec![
            r.case.clone(),
            r.backend.clone(),
            r.kernel.clone(),
            r.rule.clone(),
            r.device.clone(),
            r.tensor.clone(),
            r.reference.clone(),
            format!("{:.3e}", r.metrics.rel_l2),
            r.rel_l2_f64
                .map(|x| format!("{x:.3e}"))
                .unwrap_or_else(|| "-".into()),
            format!("{:.3e}", r.metrics.max_abs),
            r.metrics.nonfinite.to_string(),
            format!("{:.0e}", r.tolerance),
            if r.pass { "pass".into() } else { "FAIL".into() },
            worst_words(r),
        ]);
    }
    let mut out = render_aligned(&cells);
    out.push_str(
        "rel_l2 = ||got - want|| / ||want||; vs: what want is (expected: the file's tensor; f64: \
         the float64 reference run here); rel_l2_f64: the same against the float64 reference \
         run here; tol: the bound on both\n",
    );
    out
}

/// Renders rows of cells as left-aligned columns two spaces apart, one line per row.
pub fn render_aligned(cells: &[Vec<String>]) -> String {
    let columns = cells.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..columns)
        .map(|c| {
            cells
                .iter()
                .map(|row| row.get(c).map_or(0, |s| s.chars().count()))
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for row in cells {
        let line: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(s, &w)| format!("{s:<w$}"))
            .collect();
        out.push_str(line.join("  ").trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrapped_lines_fit_and_values_show_their_difference() {
        let long = "worst: seq 1, token 37 of 120 (packed 157), value head 3, channel 12: got 0.51234567, want 0.49";
        for l in wrap(long, 40, 4) {
            assert!(l.chars().count() <= 40, "{l}");
        }
        assert_eq!(value_pair(0.51, 0.49), ("0.51".into(), "0.49".into()));
        let (a, b) = value_pair(0.036_812_3, 0.036_812_4);
        assert_ne!(a, b);
        assert!(LEGEND.chars().count() <= NARROW);
        assert!(COMPARE_LEGEND.chars().count() <= NARROW);
    }
}

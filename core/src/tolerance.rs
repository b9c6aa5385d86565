//! Tolerances of docs/spec.md section 9 as a type, and the comparison metrics every face prints.

use std::fmt;

/// The numerical class of a path; each has the bound of docs/spec.md section 9.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Precision {
    /// The float64 reference (bound 1e-6: the case files store f32).
    Reference,
    /// float32 paths (CPU chunked, WGSL): 1e-4.
    F32,
    /// bf16 tensor-core paths: 5e-3.
    Bf16,
}

impl Precision {
    /// The relative L2 bound.
    pub fn bound(self) -> f64 {
        match self {
            Precision::Reference => 1e-6,
            Precision::F32 => 1e-4,
            Precision::Bf16 => 5e-3,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            Precision::Reference => "f64",
            Precision::F32 => "f32",
            Precision::Bf16 => "bf16",
        }
    }
}

impl fmt::Display for Precision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Comparison of one produced tensor with a reference.
#[derive(Clone, Debug, PartialEq)]
pub struct Metrics {
    /// `||x - ref|| / ||ref||` over the finite pairs (`||x - ref||` when `||ref|| = 0`); inf when
    /// any pair holds a non-finite value.
    pub rel_l2: f64,
    /// The largest absolute error; inf when any pair holds a non-finite value.
    pub max_abs: f64,
    /// Flat index of the element with the largest absolute error; the first pair with a
    /// non-finite value (in either tensor) when there is one.
    pub worst: usize,
    pub worst_got: f64,
    pub worst_want: f64,
    /// Pairs holding a NaN or Inf, in the produced tensor or in the reference.
    pub nonfinite: usize,
    pub count: usize,
    /// Up to five flat indices whose error exceeds `bound * rms(ref)` or whose pair holds a
    /// non-finite value, for messages.
    pub first_mismatches: Vec<usize>,
}

impl Metrics {
    /// Pass when finite everywhere and `rel_l2 <= bound`.
    pub fn passes(&self, bound: f64) -> bool {
        self.nonfinite == 0 && self.rel_l2.is_finite() && self.rel_l2 <= bound
    }
}

/// Compares `got` with `want` (same length). A length mismatch is reported as a failure with
/// `rel_l2 = inf`. A pair with a NaN or Inf on either side never agrees: it is counted in
/// `nonfinite`, makes `max_abs` and `rel_l2` inf, and the first such pair is the worst.
pub fn compare(got: &[f64], want: &[f64]) -> Metrics {
    if got.len() != want.len() {
        return Metrics {
            rel_l2: f64::INFINITY,
            max_abs: f64::INFINITY,
            worst: 0,
            worst_got: f64::NAN,
            worst_want: f64::NAN,
            nonfinite: got.len().max(want.len()),
            count: got.len(),
            first_mismatches: Vec::new(),
        };
    }
    let finite_pair = |g: f64, w: f64| g.is_finite() && w.is_finite();
    let mut num = 0.0f64;
    let mut den = 0.0f64;
    let mut max_abs = 0.0f64;
    let mut worst = 0usize;
    let mut nonfinite = 0usize;
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        if !finite_pair(g, w) {
            if nonfinite == 0 {
                worst = i;
            }
            nonfinite += 1;
            continue;
        }
        den += w * w;
        let d = (g - w).abs();
        num += d * d;
        if d > max_abs {
            max_abs = d;
            if nonfinite == 0 {
                worst = i;
            }
        }
    }
    if nonfinite > 0 {
        max_abs = f64::INFINITY;
    }
    let rel_l2 = if nonfinite > 0 {
        f64::INFINITY
    } else if den > 0.0 {
        (num / den).sqrt()
    } else {
        num.sqrt()
    };
    let finite_count = got.len() - nonfinite;
    let rms = (den / finite_count.max(1) as f64).sqrt();
    let first_mismatches = got
        .iter()
        .zip(want)
        .enumerate()
        .filter(|(_, (&g, &w))| !finite_pair(g, w) || (g - w).abs() > 1e-3 * rms.max(1e-30))
        .map(|(i, _)| i)
        .take(5)
        .collect();
    Metrics {
        rel_l2,
        max_abs,
        worst,
        worst_got: got.get(worst).copied().unwrap_or(f64::NAN),
        worst_want: want.get(worst).copied().unwrap_or(f64::NAN),
        nonfinite,
        count: got.len(),
        first_mismatches,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_find_the_worst_element() {
        let want = vec![1.0, 2.0, 3.0, 4.0];
        let mut got = want.clone();
        got[2] = 3.5;
        let m = compare(&got, &want);
        assert_eq!(m.worst, 2);
        assert!((m.max_abs - 0.5).abs() < 1e-15);
        assert!((m.rel_l2 - 0.5 / 30f64.sqrt()).abs() < 1e-12);
        assert!(!m.passes(1e-3));
        assert!(compare(&want, &want).passes(0.0));
    }

    #[test]
    fn nan_always_fails() {
        let want = vec![1.0, 2.0];
        let got = vec![1.0, f64::NAN];
        let m = compare(&got, &want);
        assert_eq!(m.nonfinite, 1);
        assert_eq!(m.worst, 1);
        assert!(!m.passes(f64::INFINITY));
    }

    #[test]
    fn a_nan_in_the_reference_is_the_worst_element_and_never_agrees() {
        let want = vec![1.0, f64::NAN, 3.0];
        let got = vec![1.0, 2.0, 3.5];
        let m = compare(&got, &want);
        assert_eq!(m.nonfinite, 1);
        assert_eq!(m.worst, 1, "the worst element is the non-finite pair");
        assert!(m.worst_want.is_nan());
        assert_eq!(m.worst_got, 2.0);
        assert_eq!(m.max_abs, f64::INFINITY);
        assert_eq!(m.rel_l2, f64::INFINITY);
        assert_eq!(m.first_mismatches, vec![1, 2]);
        assert!(!m.passes(f64::INFINITY));

        // the only disagreement is the NaN: max_abs is not 0
        let m = compare(&[1.0, 2.0], &[1.0, f64::NAN]);
        assert_eq!((m.worst, m.nonfinite), (1, 1));
        assert_eq!(m.max_abs, f64::INFINITY);
        assert!(!m.passes(f64::INFINITY));
    }

    #[test]
    fn infinities_on_either_side_are_non_finite_pairs() {
        let m = compare(&[0.5, 1.0, f64::INFINITY], &[0.0, f64::NEG_INFINITY, 1.0]);
        assert_eq!(m.nonfinite, 2);
        assert_eq!(
            m.worst, 1,
            "the first non-finite pair, not the largest finite error"
        );
        assert_eq!(m.max_abs, f64::INFINITY);
        assert_eq!(m.first_mismatches, vec![0, 1, 2]);
        // the same infinity on both sides still fails: a reference is finite
        let m = compare(&[f64::INFINITY], &[f64::INFINITY]);
        assert_eq!((m.nonfinite, m.worst), (1, 0));
        assert!(!m.passes(f64::INFINITY));
    }
}

//! The metrics of a comparison: relative L2 over index ranges, per token, per value head and per
//! sequence, and the rows comparing one source's outputs with the references.

use super::{locate, DiffRow, Geometry, OutputRefs, Profile, Source, OUTPUT_TENSORS};
use deltarule_core::{compare, HostTensor};
use rayon::prelude::*;

/// Relative L2 of `got` against `want` over index ranges: `sqrt(sum d^2 / sum w^2)`, the
/// absolute norm when the reference is zero, NaN when a pair is not finite.
fn rel_over(got: &[f64], want: &[f64], idx: impl Iterator<Item = usize>) -> f64 {
    let (mut num, mut den) = (0.0f64, 0.0f64);
    for i in idx {
        let (g, w) = (got[i], want[i]);
        if !(g.is_finite() && w.is_finite()) {
            return f64::NAN;
        }
        num += (g - w) * (g - w);
        den += w * w;
    }
    if den > 0.0 {
        (num / den).sqrt()
    } else {
        num.sqrt()
    }
}

/// The per-token profile of `o` (`[T, HV, V]`).
pub fn o_profile(g: &Geometry, got: &[f64], want: &[f64]) -> Profile {
    let p = &g.problem;
    let (t, hv, v) = (p.tokens, p.hv.max(1), p.v.max(1));
    let n = got.len().min(want.len()).min(t * hv * v);
    let tokens = n / (hv * v);
    let per_token = (0..tokens)
        .into_par_iter()
        .map(|ti| rel_over(got, want, ti * hv * v..(ti + 1) * hv * v))
        .collect();
    let per_head = (0..tokens * hv)
        .into_par_iter()
        .map(|r| rel_over(got, want, r * v..(r + 1) * v))
        .collect();
    Profile {
        per_token,
        per_head,
        hv,
    }
}

/// Relative L2 per sequence of tensor `tensor`.
pub fn per_sequence(g: &Geometry, tensor: &str, got: &[f64], want: &[f64]) -> Vec<Option<f64>> {
    let p = &g.problem;
    let n = g.cu.len().saturating_sub(1);
    let len = got.len().min(want.len());
    let range = |a: usize, b: usize| -> Option<f64> {
        (a < b && b <= len).then(|| rel_over(got, want, a..b))
    };
    match tensor {
        "o" => {
            let row = p.hv * p.v;
            (0..n)
                .map(|s| range(g.cu[s] * row, g.cu[s + 1] * row))
                .collect()
        }
        "checkpoints" => {
            let row = p.hv * p.state_elems();
            let offs =
                deltarule_core::varlen::checkpoint_offsets(&g.cu, p.checkpoint_every.unwrap_or(1));
            (0..n)
                .map(|s| range(offs[s] * row, offs[s + 1] * row))
                .collect()
        }
        _ => {
            let row = p.hv * p.state_elems();
            (0..n)
                .map(|s| {
                    let r = match &g.state_indices {
                        Some(idx) if g.pooled() => usize::try_from(*idx.get(s)?).ok()?,
                        _ => s,
                    };
                    range(r * row, (r + 1) * row)
                })
                .collect()
        }
    }
}

/// Compares the outputs of one source with `primary` (the file's expected tensors, or another
/// output set) and, where given, with the float64 reference `f64_ref`. `primary_name` names what
/// `primary` is (`expected`, or a label); where a tensor is missing from `primary`, `f64_ref`
/// stands in (named `f64`). Profiles and per-sequence errors are measured against `f64_ref` where
/// there is one, else against `primary`.
pub fn compare_outputs(
    case_name: &str,
    geom: &Geometry,
    src: &Source,
    got: OutputRefs<'_>,
    primary: OutputRefs<'_>,
    primary_name: &str,
    f64_ref: OutputRefs<'_>,
) -> Vec<DiffRow> {
    let mut rows = Vec::new();
    for name in OUTPUT_TENSORS {
        let Some(got) = got.get(name) else { continue };
        let got_v = got.to_f64_vec();
        let (want, ref_name) = match (primary.get(name), f64_ref.get(name)) {
            (Some(e), _) => (e, primary_name),
            (None, Some(r)) => (r, "f64"),
            (None, None) => continue,
        };
        let want_v = want.to_f64_vec();
        let m = compare(&got_v, &want_v);
        let f64_v = if ref_name == "f64" {
            None
        } else {
            f64_ref.get(name).map(HostTensor::to_f64_vec)
        };
        let rel_f64 = match (&f64_v, src.is_reference) {
            (Some(r), false) => Some(compare(&got_v, r)),
            _ => None,
        };
        let pass =
            m.passes(src.tolerance) && rel_f64.as_ref().is_none_or(|r| r.passes(src.tolerance));
        let truth = f64_v.as_deref().unwrap_or(&want_v);
        let profile = (name == "o").then(|| o_profile(geom, &got_v, truth));
        let per_seq = per_sequence(geom, name, &got_v, truth);
        rows.push(DiffRow {
            case: case_name.to_string(),
            backend: src.backend.clone(),
            kernel: src.kernel.clone(),
            rule: src.rule.clone(),
            device: src.device.clone(),
            tensor: name.to_string(),
            reference: ref_name.to_string(),
            rel_l2_f64: rel_f64.map(|r| r.rel_l2),
            worst: locate(geom, name, m.worst),
            metrics: m,
            tolerance: src.tolerance,
            pass,
            per_sequence: per_seq,
            profile,
        });
    }
    rows
}

#[cfg(test)]
mod tests {
    use super::*;
    use deltarule_core::problem::{Mode, Op};
    use deltarule_core::Problem;

    #[test]
    fn per_token_errors_locate_a_disturbed_token_and_mark_non_finite_ones() {
        let p = Problem::new(Op::Gdn, Mode::Prefill, 2, 10, 1, 2, 16, 4);
        let g = Geometry {
            problem: p,
            cu: vec![0, 6, 10],
            state_indices: None,
        };
        let want: Vec<f64> = (0..10 * 2 * 4).map(|i| 1.0 + i as f64).collect();
        let mut got = want.clone();
        got[(7 * 2 + 1) * 4 + 2] += 1.0;
        got[(3 * 2) * 4] = f64::NAN;
        let prof = o_profile(&g, &got, &want);
        assert_eq!(prof.per_token.len(), 10);
        assert!(prof.per_token[3].is_nan());
        let finite_max = (0..10)
            .filter(|&t| t != 3)
            .max_by(|&a, &b| prof.per_token[a].total_cmp(&prof.per_token[b]));
        assert_eq!(finite_max, Some(7));
        assert!(prof.per_head[7 * 2 + 1] > 0.0 && prof.per_head[7 * 2] == 0.0);
        let seq = per_sequence(&g, "o", &got, &want);
        assert!(seq[0].is_some_and(f64::is_nan) && seq[1].is_some_and(|x| x > 0.0));
        let w = locate(&g, "o", (7 * 2 + 1) * 4 + 2);
        assert_eq!(
            w.describe(),
            "seq 1, token 1 of 4 (packed 7), value head 1, channel 2"
        );
    }
}

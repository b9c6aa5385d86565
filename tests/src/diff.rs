//! Cross-backend numerical diff: run a case on a backend, compare every produced tensor with the
//! case's expected tensors and with the float64 reference, and locate the worst element.

use crate::casefile::Case;
use deltarule_core::problem::FinalState;
use deltarule_core::select::Preference;
use deltarule_core::{
    compare, Backend, BackendKind, DType, Error, HostTensor, Kernel, Metrics, Outputs, Problem,
    Result, Rule,
};
use deltarule_cpu::CpuBackend;
use deltarule_engine::Engine;
use serde_json::json;

/// Where the worst element sits, in the problem's terms.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Worst {
    pub sequence: Option<usize>,
    /// Token within the sequence (`o`), or the tokens covered by a checkpoint.
    pub token: Option<usize>,
    pub head: usize,
    /// The value channel.
    pub channel: usize,
    /// The key channel (states and checkpoints).
    pub k: Option<usize>,
    /// The pool row (pooled final states).
    pub pool_row: Option<usize>,
}

impl Worst {
    pub fn describe(&self) -> String {
        let mut s = Vec::new();
        if let Some(r) = self.pool_row {
            s.push(format!("pool row {r}"));
        }
        match self.sequence {
            Some(n) => s.push(format!("seq {n}")),
            None if self.pool_row.is_some() => s.push("no seq".into()),
            None => {}
        }
        if let Some(t) = self.token {
            s.push(format!("tok {t}"));
        }
        s.push(format!("head {}", self.head));
        if let Some(k) = self.k {
            s.push(format!("k {k}"));
        }
        s.push(format!("ch {}", self.channel));
        s.join(" ")
    }

    pub fn to_json(&self) -> serde_json::Value {
        json!({
            "sequence": self.sequence,
            "token": self.token,
            "head": self.head,
            "channel": self.channel,
            "k": self.k,
            "pool_row": self.pool_row,
        })
    }
}

/// One row of the diff table: one (case, backend, tensor).
#[derive(Clone, Debug)]
pub struct DiffRow {
    pub case: String,
    /// The name the user asked for (`cpu`, `cpu:chunked`, `wgpu`, ...).
    pub backend: String,
    pub kernel: String,
    pub rule: String,
    pub device: String,
    pub tensor: String,
    /// `expected` (the case file's tensor) or `f64` (the float64 reference run here).
    pub reference: String,
    pub metrics: Metrics,
    pub worst: Worst,
    /// Relative L2 error against the float64 reference run here (when the primary reference is
    /// the file's expected tensor and the backend is not the reference itself).
    pub rel_l2_f64: Option<f64>,
    pub tolerance: f64,
    pub pass: bool,
}

impl DiffRow {
    pub fn to_json(&self) -> serde_json::Value {
        json!({
            "case": self.case,
            "backend": self.backend,
            "kernel": self.kernel,
            "rule": self.rule,
            "device": self.device,
            "tensor": self.tensor,
            "reference": self.reference,
            "rel_l2": json_f64(self.metrics.rel_l2),
            "max_abs": json_f64(self.metrics.max_abs),
            "worst": self.worst.to_json(),
            "worst_got": json_f64(self.metrics.worst_got),
            "worst_want": json_f64(self.metrics.worst_want),
            "nonfinite": self.metrics.nonfinite,
            "rel_l2_f64": self.rel_l2_f64.map(json_f64),
            "tolerance": self.tolerance,
            "pass": self.pass,
        })
    }
}

fn json_f64(x: f64) -> serde_json::Value {
    if x.is_finite() {
        json!(x)
    } else {
        json!(x.to_string())
    }
}

/// Maps a diff backend name to a preference: `cpu` is the float64 recurrence; other names parse as
/// in the selection (`cpu:chunked`, `wgpu`, `cuda:small-bh`, ...).
pub fn diff_preference(name: &str) -> Result<Preference> {
    if name == "cpu" {
        return Ok(Preference::Kernel(BackendKind::Cpu, Kernel::Reference));
    }
    Preference::parse(name)
}

/// The backend a diff backend name runs on (`cuda:small-bh` -> CUDA); `None` for `auto` and for
/// names that do not parse.
pub fn backend_kind(name: &str) -> Option<BackendKind> {
    diff_preference(name).ok()?.backend()
}

/// What a diff backend name runs for a case: the problem (see [`problem_for`]), the chosen rule
/// and the constructed backend behind it.
pub fn chosen_backend<'e>(
    engine: &'e Engine,
    case: &Case,
    name: &str,
) -> Result<(Problem, &'static Rule, &'e dyn Backend)> {
    let pref = diff_preference(name)?;
    let (p, rule) = problem_for(engine, case, pref)?;
    let backend = engine
        .backend(rule.backend)
        .ok_or_else(|| Error::Unavailable {
            backend: rule.backend,
            reason: "not constructed".into(),
        })?;
    Ok((p, rule, backend))
}

/// The backend names `diff` runs by default on a problem of `mode`: every backend available on
/// this machine (the CPU's f32 chunked path only for prefill, the mode it has a row for).
pub fn default_backends(engine: &Engine, mode: deltarule_core::Mode) -> Vec<String> {
    let mut v = vec!["cpu".to_string()];
    if mode == deltarule_core::Mode::Prefill {
        v.push("cpu:chunked".to_string());
    }
    for kind in [BackendKind::Wgpu, BackendKind::Cuda] {
        if engine.backend(kind).is_some() {
            v.push(kind.name().to_string());
        }
    }
    v
}

/// Locates flat index `i` of tensor `tensor` of the problem.
pub fn locate(p: &Problem, case: &Case, tensor: &str, i: usize, cu: &[usize]) -> Worst {
    let (s0, s1) = p.state_dims();
    match tensor {
        "o" => {
            let t = i / (p.hv * p.v);
            let head = (i / p.v) % p.hv;
            let channel = i % p.v;
            let seq = cu.partition_point(|&c| c <= t).saturating_sub(1);
            Worst {
                sequence: Some(seq),
                token: Some(t - cu[seq]),
                head,
                channel,
                k: None,
                pool_row: None,
            }
        }
        _ => {
            let per_row = p.hv * s0 * s1;
            let row = i / per_row;
            let head = (i / (s0 * s1)) % p.hv;
            let a = (i / s1) % s0;
            let b = i % s1;
            let (kk, vv) = match p.layout {
                deltarule_core::StateLayout::Kv => (a, b),
                deltarule_core::StateLayout::Vk => (b, a),
            };
            if tensor == "checkpoints" {
                let every = p.checkpoint_every.unwrap_or(1);
                let offs = deltarule_core::varlen::checkpoint_offsets(cu, every);
                let seq = offs.partition_point(|&c| c <= row).saturating_sub(1);
                return Worst {
                    sequence: Some(seq),
                    token: Some((row - offs[seq] + 1) * every),
                    head,
                    channel: vv,
                    k: Some(kk),
                    pool_row: None,
                };
            }
            if p.final_state == FinalState::InPlace {
                let seq = case.inputs.state_indices.as_ref().and_then(|t| {
                    t.to_i64_vec("state_indices")
                        .ok()
                        .and_then(|v| v.iter().position(|&x| x == row as i64))
                });
                Worst {
                    sequence: seq,
                    token: None,
                    head,
                    channel: vv,
                    k: Some(kk),
                    pool_row: Some(row),
                }
            } else {
                Worst {
                    sequence: Some(row),
                    token: None,
                    head,
                    channel: vv,
                    k: Some(kk),
                    pool_row: None,
                }
            }
        }
    }
}

/// The float64 reference outputs of a case (run here, not read from the file).
pub fn reference_outputs(case: &Case) -> Result<Outputs> {
    CpuBackend::new().run(Kernel::Reference, &case.problem, &case.inputs)
}

/// The problem a backend is asked to solve for a case: f32 outputs when the chosen row writes
/// them (the reference paths), else the row's first output dtype (bf16 for the tensor-core paths).
pub fn problem_for(
    engine: &Engine,
    case: &Case,
    pref: Preference,
) -> Result<(Problem, &'static Rule)> {
    let cu = case.inputs.cu_seqlens.to_i64_vec("cu_seqlens")?;
    let max_seq = cu.windows(2).map(|w| (w[1] - w[0]).max(0) as usize).max();
    let mut p = case.problem.clone();
    p.out_dtype = DType::F32;
    let sel = engine.select(&p, pref, max_seq);
    if let Some(rule) = sel.chosen {
        return Ok((p, rule));
    }
    for &alt in &[p.qkv_dtype, DType::BF16, DType::F16] {
        let mut q = p.clone();
        q.out_dtype = alt;
        if let Some(rule) = engine.select(&q, pref, max_seq).chosen {
            return Ok((q, rule));
        }
    }
    Err(sel
        .rule()
        .err()
        .unwrap_or_else(|| Error::invalid("backend", "an eligible rule", "none")))
}

/// (tensor name, produced, expected from the file, float64 reference).
type Triple<'a> = (
    &'static str,
    Option<&'a HostTensor>,
    Option<&'a HostTensor>,
    Option<&'a HostTensor>,
);

/// Diffs one case on one backend name. `reference` is the case's float64 reference outputs.
pub fn diff_case(
    engine: &Engine,
    case: &Case,
    backend_name: &str,
    reference: &Outputs,
) -> Result<Vec<DiffRow>> {
    let (p, rule, backend) = chosen_backend(engine, case, backend_name)?;
    let out = backend.run(rule.kernel, &p, &case.inputs)?;
    let cu: Vec<usize> = case
        .inputs
        .cu_seqlens
        .to_i64_vec("cu_seqlens")?
        .iter()
        .map(|&x| x as usize)
        .collect();
    let is_reference = rule.backend == BackendKind::Cpu && rule.kernel == Kernel::Reference;
    let tolerance = rule.precision.bound();
    let device = backend.caps().device.clone();
    let mut rows = Vec::new();
    let tensors: [Triple<'_>; 3] = [
        (
            "o",
            Some(&out.o),
            case.expected.o.as_ref(),
            Some(&reference.o),
        ),
        (
            "final_state",
            out.final_state.as_ref(),
            case.expected.final_state.as_ref(),
            reference.final_state.as_ref(),
        ),
        (
            "checkpoints",
            out.checkpoints.as_ref(),
            case.expected.checkpoints.as_ref(),
            reference.checkpoints.as_ref(),
        ),
    ];
    for (name, got, expected, refr) in tensors {
        let Some(got) = got else { continue };
        let got_v = got.to_f64_vec();
        let (primary, ref_name) = match (expected, refr) {
            (Some(e), _) => (e, "expected"),
            (None, Some(r)) => (r, "f64"),
            (None, None) => continue,
        };
        let m = compare(&got_v, &primary.to_f64_vec());
        let rel_f64 = match (ref_name, refr, is_reference) {
            ("expected", Some(r), false) => Some(compare(&got_v, &r.to_f64_vec())),
            _ => None,
        };
        let pass = m.passes(tolerance) && rel_f64.as_ref().is_none_or(|r| r.passes(tolerance));
        let worst = locate(&p, case, name, m.worst, &cu);
        rows.push(DiffRow {
            case: case.name.clone(),
            backend: backend_name.to_string(),
            kernel: rule.kernel.name().to_string(),
            rule: rule.id.to_string(),
            device: device.clone(),
            tensor: name.to_string(),
            reference: ref_name.to_string(),
            rel_l2_f64: rel_f64.map(|r| r.rel_l2),
            metrics: m,
            worst,
            tolerance,
            pass,
        });
    }
    Ok(rows)
}

/// Renders rows as an aligned table.
pub fn render_table(rows: &[DiffRow]) -> String {
    let header = [
        "case",
        "backend",
        "rule",
        "tensor",
        "vs",
        "rel_l2",
        "max_abs",
        "worst (location: got/want)",
        "nonfinite",
        "rel_l2_f64",
        "tol",
        "result",
    ];
    let mut cells: Vec<Vec<String>> = vec![header.iter().map(|s| s.to_string()).collect()];
    for r in rows {
        cells.push(vec![
            r.case.clone(),
            r.backend.clone(),
            r.rule.clone(),
            r.tensor.clone(),
            r.reference.clone(),
            format!("{:.3e}", r.metrics.rel_l2),
            format!("{:.3e}", r.metrics.max_abs),
            format!(
                "{}: {:.6} / {:.6}",
                r.worst.describe(),
                r.metrics.worst_got,
                r.metrics.worst_want
            ),
            r.metrics.nonfinite.to_string(),
            r.rel_l2_f64
                .map(|x| format!("{x:.3e}"))
                .unwrap_or_else(|| "-".into()),
            format!("{:.0e}", r.tolerance),
            if r.pass { "pass".into() } else { "FAIL".into() },
        ]);
    }
    render_aligned(&cells)
}

/// Renders rows of cells as left-aligned columns two spaces apart, one line per row.
pub fn render_aligned(cells: &[Vec<String>]) -> String {
    let columns = cells.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..columns)
        .map(|c| {
            cells
                .iter()
                .map(|row| row.get(c).map_or(0, String::len))
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

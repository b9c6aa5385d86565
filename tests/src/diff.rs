//! Cross-backend numerical diff: run a case on a backend, compare every produced tensor with the
//! case's expected tensors and with the float64 reference, locate the worst element, and measure
//! the error per token, per value head and per sequence (docs/diff.md).
//!
//! The same comparison serves three sources of outputs: a backend run here ([`diff_case`]), the
//! observed outputs a case file carries ([`observed_rows`]) and saved output sets
//! ([`OutputSet`], [`compare_sets`]).

use crate::casefile::{
    metadata_from_problem, options_from_metadata, write_atomic, Case, Observed,
    DEFAULT_OBSERVED_LABEL,
};
use crate::limits::ByteCap;
use deltarule_core::problem::{FinalState, InitialState};
use deltarule_core::select::Preference;
use deltarule_core::{
    compare, Backend, BackendKind, DType, Error, HostTensor, Inputs, Kernel, Metrics, Outputs,
    Precision, Problem, Result, Rule,
};
use deltarule_cpu::CpuBackend;
use deltarule_engine::Engine;
use rayon::prelude::*;
use serde_json::json;
use std::collections::{BTreeMap, HashMap};
use std::path::Path;

// ---------------------------------------------------------------------------------- geometry

/// What is needed to name an element of an output: the problem, the sequence offsets and, for a
/// pool updated in place, the pool row of each sequence.
#[derive(Clone, Debug, PartialEq)]
pub struct Geometry {
    pub problem: Problem,
    /// `cu_seqlens`, `[N + 1]`.
    pub cu: Vec<usize>,
    /// Pool row of each sequence (-1: none), when the final state is a pool updated in place.
    pub state_indices: Option<Vec<i64>>,
}

impl Geometry {
    /// The geometry of a case (its offsets as read; the reader has validated them).
    pub fn of_case(case: &Case) -> Result<Geometry> {
        let cu = case
            .inputs
            .cu_seqlens
            .to_i64_vec("cu_seqlens")?
            .iter()
            .map(|&x| x.max(0) as usize)
            .collect();
        let state_indices = match &case.inputs.state_indices {
            Some(t) => Some(t.to_i64_vec("state_indices")?),
            None => None,
        };
        Ok(Geometry {
            problem: case.problem.clone(),
            cu,
            state_indices,
        })
    }

    fn seq_of_token(&self, t: usize) -> usize {
        self.cu.partition_point(|&c| c <= t).saturating_sub(1)
    }

    fn seq_len(&self, n: usize) -> usize {
        match (self.cu.get(n), self.cu.get(n + 1)) {
            (Some(a), Some(b)) => b.saturating_sub(*a),
            _ => 0,
        }
    }

    /// Whether the final state is a pool updated in place (rows named by `state_indices`).
    pub fn pooled(&self) -> bool {
        self.state_indices.is_some() && self.problem.final_state == FinalState::InPlace
    }
}

// ---------------------------------------------------------------------------------- worst

/// Where an element sits, in the problem's terms.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Worst {
    pub sequence: Option<usize>,
    /// Token within the sequence (`o`), or the tokens covered by a checkpoint.
    pub token: Option<usize>,
    /// Length of the sequence.
    pub seq_len: Option<usize>,
    /// Packed token index (`o`).
    pub packed: Option<usize>,
    /// Index of the checkpoint within its sequence (checkpoints).
    pub checkpoint: Option<usize>,
    /// The value head.
    pub head: usize,
    /// The value channel.
    pub channel: usize,
    /// The key channel (states and checkpoints).
    pub k: Option<usize>,
    /// The pool row (pooled final states).
    pub pool_row: Option<usize>,
}

impl Worst {
    /// The element in words: `seq 1, token 37 of 120 (packed 157), value head 3, channel 12`.
    pub fn describe(&self) -> String {
        let mut s = Vec::new();
        match (self.pool_row, self.sequence) {
            (Some(r), Some(n)) => s.push(format!("pool row {r} (seq {n})")),
            (Some(r), None) => s.push(format!("pool row {r} (named by no sequence)")),
            (None, Some(n)) => match (self.checkpoint, self.token, self.packed) {
                (Some(c), Some(t), _) => {
                    s.push(format!("seq {n}, checkpoint {c} (after token {t}"));
                    if let Some(l) = self.seq_len {
                        let last = s.len() - 1;
                        s[last].push_str(&format!(" of {l}"));
                    }
                    let last = s.len() - 1;
                    s[last].push(')');
                }
                (None, Some(t), Some(p)) => {
                    let of = self.seq_len.map_or(String::new(), |l| format!(" of {l}"));
                    s.push(format!("seq {n}, token {t}{of} (packed {p})"));
                }
                _ => s.push(format!("seq {n}, final state")),
            },
            (None, None) => {}
        }
        s.push(format!("value head {}", self.head));
        match self.k {
            Some(k) => s.push(format!("key {k}, value channel {}", self.channel)),
            None => s.push(format!("channel {}", self.channel)),
        }
        s.join(", ")
    }

    pub fn to_json(&self) -> serde_json::Value {
        json!({
            "sequence": self.sequence,
            "token": self.token,
            "seq_len": self.seq_len,
            "packed": self.packed,
            "checkpoint": self.checkpoint,
            "head": self.head,
            "channel": self.channel,
            "k": self.k,
            "pool_row": self.pool_row,
        })
    }
}

/// Locates flat index `i` of tensor `tensor` (`o`, `final_state` or `checkpoints`).
pub fn locate(g: &Geometry, tensor: &str, i: usize) -> Worst {
    let p = &g.problem;
    let (s0, s1) = p.state_dims();
    if tensor == "o" {
        let t = i / (p.hv * p.v).max(1);
        let head = (i / p.v.max(1)) % p.hv.max(1);
        let channel = i % p.v.max(1);
        let seq = g.seq_of_token(t);
        return Worst {
            sequence: Some(seq),
            token: Some(t - g.cu.get(seq).copied().unwrap_or(0).min(t)),
            seq_len: Some(g.seq_len(seq)),
            packed: Some(t),
            checkpoint: None,
            head,
            channel,
            k: None,
            pool_row: None,
        };
    }
    let per_row = (p.hv * s0 * s1).max(1);
    let row = i / per_row;
    let head = (i / (s0 * s1).max(1)) % p.hv.max(1);
    let a = (i / s1.max(1)) % s0.max(1);
    let b = i % s1.max(1);
    let (kk, vv) = match p.layout {
        deltarule_core::StateLayout::Kv => (a, b),
        deltarule_core::StateLayout::Vk => (b, a),
    };
    let state = |sequence, pool_row| Worst {
        sequence,
        token: None,
        seq_len: None,
        packed: None,
        checkpoint: None,
        head,
        channel: vv,
        k: Some(kk),
        pool_row,
    };
    if tensor == "checkpoints" {
        let every = p.checkpoint_every.unwrap_or(1).max(1);
        let offs = deltarule_core::varlen::checkpoint_offsets(&g.cu, every);
        let seq = offs.partition_point(|&c| c <= row).saturating_sub(1);
        let c = row - offs.get(seq).copied().unwrap_or(0).min(row);
        return Worst {
            token: Some((c + 1) * every),
            seq_len: Some(g.seq_len(seq)),
            checkpoint: Some(c),
            ..state(Some(seq), None)
        };
    }
    if g.pooled() {
        let seq = g
            .state_indices
            .as_ref()
            .and_then(|v| v.iter().position(|&x| x == row as i64));
        state(seq, Some(row))
    } else {
        state(Some(row), None)
    }
}

// ---------------------------------------------------------------------------------- rows

/// The error of `o` along the sequence: relative L2 per packed token and per (token, value head)
/// against the float64 reference. NaN marks a token whose outputs (or reference) hold a NaN or
/// Inf.
#[derive(Clone, Debug, PartialEq)]
pub struct Profile {
    /// `[T]`: `||got[t] - ref[t]|| / ||ref[t]||` over the value heads and channels of token t.
    pub per_token: Vec<f64>,
    /// `[T * HV]`: the same per (token, value head).
    pub per_head: Vec<f64>,
    pub hv: usize,
}

/// One row of the diff table: one (case, backend, tensor).
#[derive(Clone, Debug)]
pub struct DiffRow {
    pub case: String,
    /// The name the user asked for (`cpu`, `cpu:chunked`, `wgpu`, `observed:<label>`, ...).
    pub backend: String,
    pub kernel: String,
    pub rule: String,
    pub device: String,
    pub tensor: String,
    /// What `want` is: `expected` (the case file's tensor), `f64` (the float64 reference run
    /// here) or, for `compare`, the label of the other output set.
    pub reference: String,
    pub metrics: Metrics,
    /// The element with the largest error (the first non-finite pair where there is one);
    /// meaningless when the row is exact (see [`DiffRow::exact`]), which tables and JSON say.
    pub worst: Worst,
    /// Relative L2 error against the float64 reference run here (when the primary reference is
    /// the file's expected tensor and the backend is not the reference itself).
    pub rel_l2_f64: Option<f64>,
    pub tolerance: f64,
    pub pass: bool,
    /// Relative L2 per sequence (`None`: the sequence has no element in this tensor, such as a
    /// pool sequence with index -1); against the float64 reference where there is one.
    pub per_sequence: Vec<Option<f64>>,
    /// Per-token error (`o` only).
    pub profile: Option<Profile>,
}

impl DiffRow {
    /// Error 0 everywhere, nothing non-finite.
    pub fn exact(&self) -> bool {
        self.metrics.nonfinite == 0 && self.metrics.max_abs == 0.0
    }

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
            "exact": self.exact(),
            "worst": (!self.exact()).then(|| self.worst.to_json()),
            "worst_words": (!self.exact()).then(|| worst_words(self)),
            "worst_got": (!self.exact()).then(|| json_f64(self.metrics.worst_got)),
            "worst_want": (!self.exact()).then(|| json_f64(self.metrics.worst_want)),
            "nonfinite": self.metrics.nonfinite,
            "rel_l2_f64": self.rel_l2_f64.map(json_f64),
            "per_sequence": self.per_sequence.iter().map(|x| x.map(json_f64)).collect::<Vec<_>>(),
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

/// The outputs one source produced (any may be missing).
#[derive(Clone, Copy, Debug, Default)]
pub struct OutputRefs<'a> {
    pub o: Option<&'a HostTensor>,
    pub final_state: Option<&'a HostTensor>,
    pub checkpoints: Option<&'a HostTensor>,
}

impl<'a> OutputRefs<'a> {
    pub fn of(out: &'a Outputs) -> Self {
        OutputRefs {
            o: Some(&out.o),
            final_state: out.final_state.as_ref(),
            checkpoints: out.checkpoints.as_ref(),
        }
    }
    pub fn expected(case: &'a Case) -> Self {
        OutputRefs {
            o: case.expected.o.as_ref(),
            final_state: case.expected.final_state.as_ref(),
            checkpoints: case.expected.checkpoints.as_ref(),
        }
    }
    pub fn observed(o: &'a Observed) -> Self {
        OutputRefs {
            o: o.o.as_ref(),
            final_state: o.final_state.as_ref(),
            checkpoints: o.checkpoints.as_ref(),
        }
    }
    fn get(&self, tensor: &str) -> Option<&'a HostTensor> {
        match tensor {
            "o" => self.o,
            "final_state" => self.final_state,
            _ => self.checkpoints,
        }
    }
}

/// Who produced a set of outputs, for the rows.
#[derive(Clone, Debug)]
pub struct Source {
    pub backend: String,
    pub kernel: String,
    pub rule: String,
    pub device: String,
    /// The relative L2 bound of this source.
    pub tolerance: f64,
    /// The float64 reference itself (no separate float64 column).
    pub is_reference: bool,
}

/// The output tensor names, in table order.
pub const OUTPUT_TENSORS: [&str; 3] = ["o", "final_state", "checkpoints"];

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

// ---------------------------------------------------------------------------------- backends

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

/// The float64 reference outputs of a case (run here, not read from the file).
pub fn reference_outputs(case: &Case) -> Result<Outputs> {
    CpuBackend::new().run(Kernel::Reference, &case.problem, &case.inputs)
}

/// [`reference_outputs`], reporting progress: the problem is run as independent (sequence, value
/// head) pieces, and `progress(done, total)` is called as each finishes (from worker threads).
/// The outputs are bit-identical to [`reference_outputs`]: each piece is the same float64
/// recurrence on the same inputs. A problem that cannot be split (decode of a pool, for one) runs
/// whole, with one call at the end.
pub fn reference_outputs_with_progress(
    case: &Case,
    progress: &(dyn Fn(usize, usize) + Sync),
) -> Result<Outputs> {
    // the pieces are cut from the inputs: check them first, as the whole run does
    deltarule_core::validate_inputs(&case.problem, &case.inputs)?;
    let g = Geometry::of_case(case)?;
    let p = &case.problem;
    let pieces: Vec<(usize, usize)> = (0..p.seqs)
        .flat_map(|n| (0..p.hv).map(move |h| (n, h)))
        .collect();
    let total = pieces.len();
    let done = std::sync::atomic::AtomicUsize::new(0);
    let splittable = p.mode == deltarule_core::Mode::Prefill && total > 1;
    if !splittable {
        let out = reference_outputs(case)?;
        progress(total.max(1), total.max(1));
        return Ok(out);
    }
    let cpu = CpuBackend::new();
    let results: Vec<Result<Outputs>> = pieces
        .par_iter()
        .map(|&(n, h)| {
            let r = piece(case, &g, n, h)
                .and_then(|(sub, inputs)| cpu.run(Kernel::Reference, &sub, &inputs));
            let d = done.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
            progress(d, total);
            r
        })
        .collect();
    let mut o = HostTensor::poison(p.out_dtype, p.o_shape());
    let mut final_state = match p.final_state {
        FinalState::InPlace => case.inputs.initial_state.clone(),
        FinalState::Dense => Some(HostTensor::poison(p.state_out_dtype, p.state_shape(p.seqs))),
        FinalState::None => None,
    };
    let offs = p
        .checkpoint_every
        .map(|e| deltarule_core::varlen::checkpoint_offsets(&g.cu, e));
    let mut checkpoints = offs.as_ref().map(|o| {
        HostTensor::poison(
            p.state_out_dtype,
            p.state_shape(o.last().copied().unwrap_or(0)),
        )
    });
    let se = p.state_elems();
    for (&(n, h), r) in pieces.iter().zip(results) {
        let out = r?;
        let ov = out.o.to_f64_vec();
        for i in 0..g.seq_len(n) {
            o.write_f64(
                ((g.cu[n] + i) * p.hv + h) * p.v,
                &ov[i * p.v..(i + 1) * p.v],
            );
        }
        if let (Some(dst), Some(src)) = (final_state.as_mut(), out.final_state.as_ref()) {
            let row = match (&g.state_indices, p.final_state) {
                (Some(idx), FinalState::InPlace) => usize::try_from(idx[n]).ok(),
                _ => Some(n),
            };
            if let Some(row) = row {
                dst.write_f64((row * p.hv + h) * se, &src.to_f64_vec());
            }
        }
        if let (Some(dst), Some(src), Some(offs)) = (
            checkpoints.as_mut(),
            out.checkpoints.as_ref(),
            offs.as_ref(),
        ) {
            let v = src.to_f64_vec();
            for c in 0..offs[n + 1] - offs[n] {
                dst.write_f64(((offs[n] + c) * p.hv + h) * se, &v[c * se..(c + 1) * se]);
            }
        }
    }
    Ok(Outputs {
        o,
        final_state,
        checkpoints,
    })
}

/// Rows `[a, b)` of axis 0 of `t`, with axis 1 reduced to index `h`; only the elements taken
/// are read, and they keep their dtype exactly.
fn slice_rows(t: &HostTensor, a: usize, b: usize, h: usize) -> HostTensor {
    let heads = t.shape.get(1).copied().unwrap_or(1);
    let inner: usize = t.shape.iter().skip(2).product();
    let mut out = Vec::with_capacity((b - a) * inner);
    for r in a..b {
        let s = (r * heads + h) * inner;
        out.extend((s..s + inner).map(|i| t.get_f64(i)));
    }
    let mut shape = t.shape.clone();
    shape[0] = b - a;
    if shape.len() > 1 {
        shape[1] = 1;
    }
    HostTensor::from_f64(t.dtype(), shape, &out)
}

/// One (sequence, value head) piece of a case as a problem of one sequence and one head.
fn piece(case: &Case, g: &Geometry, n: usize, h: usize) -> Result<(Problem, Inputs)> {
    let p = &case.problem;
    let i = &case.inputs;
    let (a, b) = (g.cu[n], g.cu[n + 1]);
    let qh = h / p.group().max(1);
    let gk = i.g.shape.get(2).copied().unwrap_or(1);
    let flat = |t: &Option<HostTensor>, per: usize| {
        t.as_ref().map(|t| {
            let v: Vec<f64> = (h * per..(h + 1) * per).map(|i| t.get_f64(i)).collect();
            HostTensor::from_f64(t.dtype(), vec![per], &v)
        })
    };
    let row = match (&g.state_indices, p.initial) {
        (Some(idx), InitialState::Pool { .. }) => usize::try_from(idx[n]).ok(),
        (_, InitialState::Dense) => Some(n),
        _ => None,
    };
    let initial_state = match (&i.initial_state, row) {
        (Some(s), Some(r)) => Some(slice_rows(s, r, r + 1, h)),
        _ => None,
    };
    let inputs = Inputs {
        q: slice_rows(&i.q, a, b, qh),
        k: slice_rows(&i.k, a, b, qh),
        v: slice_rows(&i.v, a, b, h),
        g: slice_rows(&i.g, a, b, h),
        beta: slice_rows(&i.beta, a, b, h),
        cu_seqlens: HostTensor::from_i64(i.cu_seqlens.dtype(), vec![2], &[0, (b - a) as i64]),
        a_log: flat(&i.a_log, 1),
        dt_bias: flat(&i.dt_bias, gk),
        initial_state,
        state_indices: None,
    };
    let mut template = p.clone();
    template.final_state = FinalState::Dense;
    let sub = Problem::from_inputs(&template, &inputs)?;
    Ok((sub, inputs))
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

/// One backend's run of a case: its rows, its outputs and who produced them.
pub struct BackendRun {
    pub rows: Vec<DiffRow>,
    pub outputs: Outputs,
    pub source: Source,
    /// The problem the backend solved (its output dtype may differ from the case's).
    pub problem: Problem,
}

/// Diffs one case on one backend name: its rows (see [`run_backend`]).
pub fn diff_case(
    engine: &Engine,
    case: &Case,
    backend_name: &str,
    reference: &Outputs,
) -> Result<Vec<DiffRow>> {
    run_backend(engine, case, backend_name, reference).map(|r| r.rows)
}

/// Runs one case on one backend name and compares its outputs. `reference` is the case's
/// float64 reference outputs.
pub fn run_backend(
    engine: &Engine,
    case: &Case,
    backend_name: &str,
    reference: &Outputs,
) -> Result<BackendRun> {
    let (p, rule, backend) = chosen_backend(engine, case, backend_name)?;
    let out = backend.run(rule.kernel, &p, &case.inputs)?;
    let geom = Geometry::of_case(case)?;
    let source = Source {
        backend: backend_name.to_string(),
        kernel: rule.kernel.name().to_string(),
        rule: rule.id.to_string(),
        device: backend.caps().device.clone(),
        tolerance: rule.precision.bound(),
        is_reference: rule.backend == BackendKind::Cpu && rule.kernel == Kernel::Reference,
    };
    let rows = compare_outputs(
        &case.name,
        &geom,
        &source,
        OutputRefs::of(&out),
        OutputRefs::expected(case),
        "expected",
        OutputRefs::of(reference),
    );
    Ok(BackendRun {
        rows,
        outputs: out,
        source,
        problem: p,
    })
}

/// The relative L2 bound of observed outputs: the bf16 bound (5e-3) when the inputs or the
/// observed tensors are 16-bit floats (the caller's kernel may use 16-bit tensor cores), else
/// the f32 bound (1e-4).
pub fn observed_tolerance(p: &Problem, o: &Observed) -> f64 {
    let half = |d: DType| matches!(d, DType::BF16 | DType::F16);
    let tensors = [&o.o, &o.final_state, &o.checkpoints];
    if half(p.qkv_dtype)
        || tensors
            .iter()
            .any(|t| t.as_ref().is_some_and(|t| half(t.dtype())))
    {
        Precision::Bf16.bound()
    } else {
        Precision::F32.bound()
    }
}

/// The source of a case's observed outputs (backend name `observed:<label>`).
pub fn observed_source(case: &Case, o: &Observed) -> Source {
    Source {
        backend: format!("observed:{}", o.label),
        kernel: "observed".into(),
        rule: "-".into(),
        device: case
            .metadata
            .get("observed_device")
            .cloned()
            .unwrap_or_else(|| "the caller's".into()),
        tolerance: observed_tolerance(&case.problem, o),
        is_reference: false,
    }
}

/// The rows of a case's observed outputs (none when it has none), against the same references
/// as every backend.
pub fn observed_rows(case: &Case, reference: &Outputs) -> Result<Vec<DiffRow>> {
    let Some(o) = &case.expected.observed else {
        return Ok(Vec::new());
    };
    let geom = Geometry::of_case(case)?;
    Ok(compare_outputs(
        &case.name,
        &geom,
        &observed_source(case, o),
        OutputRefs::observed(o),
        OutputRefs::expected(case),
        "expected",
        OutputRefs::of(reference),
    ))
}

// ---------------------------------------------------------------------------------- tables

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

// ---------------------------------------------------------------------------------- output sets

/// The metadata key that marks a saved output set (its value is the format version, `1`).
pub const OUTPUTS_MARK: &str = "deltarule_outputs";

/// A file name made of `[A-Za-z0-9._-]` (others become `_`; `:` becomes `-`).
pub fn file_safe(s: &str) -> String {
    s.chars()
        .map(|c| match c {
            'a'..='z' | 'A'..='Z' | '0'..='9' | '.' | '_' | '-' => c,
            ':' => '-',
            _ => '_',
        })
        .collect()
}

/// A set of outputs with what is needed to compare it: from a saved output file
/// (`diff --save-outputs`) or a case file's expected or observed tensors.
#[derive(Clone, Debug)]
pub struct OutputSet {
    /// Where it came from, for messages (`path`, `path (observed)`).
    pub label: String,
    pub geometry: Geometry,
    pub o: Option<HostTensor>,
    pub final_state: Option<HostTensor>,
    pub checkpoints: Option<HostTensor>,
    /// The relative L2 bound of its producer.
    pub tolerance: Option<f64>,
    /// Provenance (case, backend, kernel, rule, device, version).
    pub metadata: BTreeMap<String, String>,
}

impl OutputSet {
    pub fn refs(&self) -> OutputRefs<'_> {
        OutputRefs {
            o: self.o.as_ref(),
            final_state: self.final_state.as_ref(),
            checkpoints: self.checkpoints.as_ref(),
        }
    }

    /// One line of provenance: `backend wgpu (rule ..., device ..., deltarule 0.1.0)`.
    pub fn provenance(&self) -> String {
        let m = &self.metadata;
        let mut parts = Vec::new();
        for (k, name) in [
            ("backend", "backend"),
            ("rule", "rule"),
            ("device", "device"),
            ("deltarule_version", "deltarule"),
        ] {
            if let Some(v) = m.get(k) {
                parts.push(format!("{name} {v}"));
            }
        }
        if parts.is_empty() {
            self.label.clone()
        } else {
            format!("{}: {}", self.label, parts.join(", "))
        }
    }
}

/// Which outputs of a case file an output set takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CasePart {
    /// The observed outputs where the file has them, else the expected ones.
    Auto,
    Expected,
    Observed,
}

/// The safetensors bytes of one source's outputs for a case, with the metadata that names the
/// case, the backend, its kernel and rule, the device and this version, and what is needed to
/// place each element (the problem's options and dimensions, `cu_seqlens`, `state_indices`).
pub fn output_bytes(
    case: &Case,
    problem: &Problem,
    src: &Source,
    out: OutputRefs<'_>,
) -> Result<Vec<u8>> {
    let mut meta = metadata_from_problem(problem);
    let p = problem;
    for (k, v) in [
        (OUTPUTS_MARK, "1".to_string()),
        ("case", case.name.clone()),
        ("problem", p.to_string()),
        ("backend", src.backend.clone()),
        ("kernel", src.kernel.clone()),
        ("rule", src.rule.clone()),
        ("device", src.device.clone()),
        ("tolerance", format!("{:e}", src.tolerance)),
        ("deltarule_version", env!("CARGO_PKG_VERSION").to_string()),
        ("seqs", p.seqs.to_string()),
        ("tokens", p.tokens.to_string()),
        ("heads", p.h.to_string()),
        ("v_heads", p.hv.to_string()),
        ("head_dim", p.k.to_string()),
        ("value_dim", p.v.to_string()),
        (
            "final_state",
            match p.final_state {
                FinalState::None => "none",
                FinalState::Dense => "dense",
                FinalState::InPlace => "in_place",
            }
            .to_string(),
        ),
    ] {
        meta.insert(k.to_string(), v);
    }
    if let Some(g) = case.metadata.get("gate_at") {
        meta.insert("gate_at".into(), g.clone());
    }
    let cu = case.inputs.cu_seqlens.cast(DType::I64);
    let idx = case
        .inputs
        .state_indices
        .as_ref()
        .map(|t| t.cast(DType::I64));
    let mut list: Vec<(&str, &HostTensor)> = Vec::new();
    for (n, t) in [
        ("o", out.o),
        ("final_state", out.final_state),
        ("checkpoints", out.checkpoints),
        ("cu_seqlens", Some(&cu)),
        ("state_indices", idx.as_ref()),
    ] {
        if let Some(t) = t {
            list.push((n, t));
        }
    }
    let bytes: Vec<(String, DType, Vec<usize>, Vec<u8>)> = list
        .iter()
        .map(|(n, t)| (n.to_string(), t.dtype(), t.shape.clone(), t.to_le_bytes()))
        .collect();
    let mut views = Vec::new();
    for (n, d, s, b) in &bytes {
        let dt = st_dtype(*d);
        let view = safetensors::tensor::TensorView::new(dt, s.clone(), b).map_err(|e| {
            Error::invalid(
                format!("tensor `{n}`"),
                "a consistent tensor",
                e.to_string(),
            )
        })?;
        views.push((n.clone(), view));
    }
    let info: HashMap<String, String> = meta.into_iter().collect();
    safetensors::tensor::serialize(views, Some(info))
        .map_err(|e| Error::invalid("outputs", "a serialisable output set", e.to_string()))
}

fn st_dtype(d: DType) -> safetensors::Dtype {
    use safetensors::Dtype as S;
    match d {
        DType::F64 => S::F64,
        DType::F32 => S::F32,
        DType::F16 => S::F16,
        DType::BF16 => S::BF16,
        DType::I32 => S::I32,
        DType::I64 => S::I64,
    }
}

/// Writes one source's outputs for a case into `dir` as `<case>.<backend>.safetensors` (names
/// made file-safe); returns the path.
pub fn save_outputs(
    dir: &Path,
    case: &Case,
    problem: &Problem,
    src: &Source,
    out: OutputRefs<'_>,
) -> Result<std::path::PathBuf> {
    std::fs::create_dir_all(dir).map_err(|e| Error::Output {
        path: dir.display().to_string(),
        reason: e.to_string(),
    })?;
    let path = dir.join(format!(
        "{}.{}.safetensors",
        file_safe(&case.name),
        file_safe(&src.backend)
    ));
    write_atomic(&path, &output_bytes(case, problem, src, out)?)?;
    Ok(path)
}

fn from_st_dtype(d: safetensors::Dtype) -> Option<DType> {
    use safetensors::Dtype as S;
    Some(match d {
        S::F64 => DType::F64,
        S::F32 => DType::F32,
        S::F16 => DType::F16,
        S::BF16 => DType::BF16,
        S::I32 => DType::I32,
        S::I64 => DType::I64,
        _ => return None,
    })
}

/// Reads an output set: a saved output file, or a case file's `part` outputs.
pub fn read_output_set(path: &Path, part: CasePart, cap: &ByteCap) -> Result<OutputSet> {
    let shown = path.display().to_string();
    let input_err = |reason: String| Error::Input {
        path: shown.clone(),
        reason,
    };
    let meta = std::fs::metadata(path).map_err(|e| input_err(e.to_string()))?;
    if !meta.is_file() {
        return Err(input_err(
            "not a regular file; an output set is a .safetensors file".into(),
        ));
    }
    cap.check(&format!("output set `{shown}`"), meta.len().checked_mul(6))?;
    let bytes = std::fs::read(path).map_err(|e| input_err(e.to_string()))?;
    let (_, header) = safetensors::SafeTensors::read_metadata(&bytes)
        .map_err(|e| input_err(format!("not a valid safetensors file: {e}")))?;
    let file_meta: BTreeMap<String, String> = header
        .metadata()
        .clone()
        .unwrap_or_default()
        .into_iter()
        .collect();
    if !file_meta.contains_key(OUTPUTS_MARK) {
        return case_output_set(path, &shown, part, cap);
    }
    if part != CasePart::Auto {
        return Err(input_err(
            "a saved output set has no expected or observed part: name the file alone".into(),
        ));
    }
    let st = safetensors::SafeTensors::deserialize(&bytes)
        .map_err(|e| input_err(format!("not a valid safetensors file: {e}")))?;
    let mut tensors: HashMap<String, HostTensor> = HashMap::new();
    for (name, view) in st.tensors() {
        if ![
            "o",
            "final_state",
            "checkpoints",
            "cu_seqlens",
            "state_indices",
        ]
        .contains(&name.as_str())
        {
            return Err(input_err(format!(
                "unknown tensor `{name}` in a saved output set (o, final_state, checkpoints, cu_seqlens, state_indices)"
            )));
        }
        let dt = from_st_dtype(view.dtype())
            .ok_or_else(|| input_err(format!("tensor `{name}` has dtype {:?}", view.dtype())))?;
        let t = HostTensor::from_le_bytes(dt, view.shape().to_vec(), view.data())
            .map_err(|e| input_err(format!("tensor `{name}`: {e}")))?;
        tensors.insert(name, t);
    }
    let geometry = saved_geometry(&file_meta, &mut tensors).map_err(|e| match e {
        Error::InvalidArgument {
            field,
            expected,
            got,
            ..
        } => input_err(format!("{field}: expected {expected}, got {got}")),
        other => other,
    })?;
    let tolerance = file_meta
        .get("tolerance")
        .and_then(|s| s.parse::<f64>().ok())
        .filter(|x| x.is_finite() && *x >= 0.0);
    let set = OutputSet {
        label: shown.clone(),
        geometry,
        o: tensors.remove("o"),
        final_state: tensors.remove("final_state"),
        checkpoints: tensors.remove("checkpoints"),
        tolerance,
        metadata: file_meta,
    };
    check_set_shapes(&set)?;
    Ok(set)
}

/// The geometry recorded in a saved output set.
fn saved_geometry(
    meta: &BTreeMap<String, String>,
    tensors: &mut HashMap<String, HostTensor>,
) -> Result<Geometry> {
    let dim = |k: &str| -> Result<usize> {
        let s = meta
            .get(k)
            .ok_or_else(|| Error::invalid(format!("metadata `{k}`"), "present", "missing"))?;
        s.parse::<usize>()
            .map_err(|_| Error::invalid(format!("metadata `{k}`"), "a count", format!("`{s}`")))
    };
    let mut p = options_from_metadata(meta)?;
    p.seqs = dim("seqs")?;
    p.tokens = dim("tokens")?;
    p.h = dim("heads")?;
    p.hv = dim("v_heads")?;
    p.k = dim("head_dim")?;
    p.v = dim("value_dim")?;
    p.final_state = match meta.get("final_state").map(String::as_str) {
        Some("in_place") => FinalState::InPlace,
        Some("none") => FinalState::None,
        _ => FinalState::Dense,
    };
    let cu = tensors
        .remove("cu_seqlens")
        .ok_or_else(|| Error::invalid("tensor `cu_seqlens`", "present", "missing"))?
        .to_i64_vec("cu_seqlens")?;
    let cu = deltarule_core::varlen::validate_cu_seqlens(&cu, p.tokens)?;
    if cu.len() != p.seqs + 1 {
        return Err(Error::invalid(
            "tensor `cu_seqlens`",
            format!("{} offsets (metadata `seqs` + 1)", p.seqs + 1),
            cu.len().to_string(),
        ));
    }
    let state_indices = match tensors.remove("state_indices") {
        Some(t) => Some(t.to_i64_vec("state_indices")?),
        None => None,
    };
    if let Some(idx) = &state_indices {
        if idx.len() != p.seqs {
            return Err(Error::invalid(
                "tensor `state_indices`",
                format!("{} entries", p.seqs),
                idx.len().to_string(),
            ));
        }
    }
    Ok(Geometry {
        problem: p,
        cu,
        state_indices,
    })
}

/// Checks the shapes of an output set against its geometry.
fn check_set_shapes(set: &OutputSet) -> Result<()> {
    let g = &set.geometry;
    let p = &g.problem;
    let state_row = p.hv * p.state_elems();
    let bad = |name: &str, want: String, got: &HostTensor| Error::Input {
        path: set.label.clone(),
        reason: format!("tensor `{name}` has shape {:?}, expected {want}", got.shape),
    };
    if let Some(o) = &set.o {
        if o.shape != p.o_shape() {
            return Err(bad("o", format!("{:?}", p.o_shape()), o));
        }
    }
    for (name, t) in [
        ("final_state", &set.final_state),
        ("checkpoints", &set.checkpoints),
    ] {
        if let Some(t) = t {
            let ok = t.shape.len() == 4
                && t.shape[1..].iter().product::<usize>() == state_row
                && t.shape[1] == p.hv;
            if !ok {
                return Err(bad(name, format!("[rows, {}, ...] of the state", p.hv), t));
            }
        }
    }
    if let Some(idx) = &g.state_indices {
        let rows = set.final_state.as_ref().map_or(0, |t| t.shape[0]) as i64;
        if g.pooled() && idx.iter().any(|&i| i < -1 || i >= rows) {
            return Err(Error::Input {
                path: set.label.clone(),
                reason: format!("tensor `state_indices` names a row outside the pool of {rows}"),
            });
        }
    }
    if let (Some(t), Some(every)) = (&set.checkpoints, p.checkpoint_every) {
        let want = deltarule_core::varlen::checkpoint_offsets(&g.cu, every)
            .last()
            .copied()
            .unwrap_or(0);
        if t.shape[0] != want {
            return Err(bad("checkpoints", format!("{want} rows"), t));
        }
    } else if set.checkpoints.is_some() {
        return Err(Error::Input {
            path: set.label.clone(),
            reason: "checkpoints without metadata `checkpoint_every`".into(),
        });
    }
    Ok(())
}

/// A case file's expected or observed outputs as an output set.
fn case_output_set(path: &Path, shown: &str, part: CasePart, cap: &ByteCap) -> Result<OutputSet> {
    let case = crate::casefile::read_case_with_limit(path, cap)?;
    let geometry = Geometry::of_case(&case)?;
    let observed = case.expected.observed.clone();
    let (o, final_state, checkpoints, label, tolerance) = match (part, observed) {
        (CasePart::Observed | CasePart::Auto, Some(ob)) => {
            let tol = observed_tolerance(&case.problem, &ob);
            (
                ob.o,
                ob.final_state,
                ob.checkpoints,
                format!("{shown} (observed:{})", ob.label),
                tol,
            )
        }
        (CasePart::Observed, None) => {
            return Err(Error::Input {
                path: shown.to_string(),
                reason: format!(
                    "no observed outputs (tensors observed.o, observed.final_state, observed.checkpoints; label `{DEFAULT_OBSERVED_LABEL}` by default)"
                ),
            })
        }
        (CasePart::Expected | CasePart::Auto, _) => {
            if case.expected.is_empty() {
                return Err(Error::Input {
                    path: shown.to_string(),
                    reason: "no expected outputs (expected_o, expected_final_state, expected_checkpoints) to compare".into(),
                });
            }
            (
                case.expected.o.clone(),
                case.expected.final_state.clone(),
                case.expected.checkpoints.clone(),
                format!("{shown} (expected)"),
                Precision::Reference.bound(),
            )
        }
    };
    let mut metadata = case.metadata.clone();
    metadata.insert("case".into(), case.name.clone());
    Ok(OutputSet {
        label,
        geometry,
        o,
        final_state,
        checkpoints,
        tolerance: Some(tolerance),
        metadata,
    })
}

/// The default bound of `compare`: the sum of the two sets' bounds (each within its bound of the
/// truth puts them within the sum of each other), 1e-4 for a set that records none.
pub fn default_compare_tolerance(a: &OutputSet, b: &OutputSet) -> f64 {
    a.tolerance.unwrap_or(Precision::F32.bound()) + b.tolerance.unwrap_or(Precision::F32.bound())
}

/// Compares output set `a` (got) with `b` (want): the same metrics as `diff`, one row per tensor
/// both hold. Sets of different problems are an input error.
pub fn compare_sets(a: &OutputSet, b: &OutputSet, tolerance: f64) -> Result<Vec<DiffRow>> {
    let (ga, gb) = (&a.geometry, &b.geometry);
    let dims = |g: &Geometry| {
        let p = &g.problem;
        (
            p.op,
            p.seqs,
            p.tokens,
            p.hv,
            p.k,
            p.v,
            p.layout,
            p.checkpoint_every,
        )
    };
    if dims(ga) != dims(gb) || ga.cu != gb.cu {
        return Err(Error::invalid(
            "output sets",
            format!("the same problem as {} ({})", b.label, gb.problem),
            format!("{} ({})", a.label, ga.problem),
        ));
    }
    let name = a
        .metadata
        .get("case")
        .or_else(|| b.metadata.get("case"))
        .cloned()
        .unwrap_or_else(|| ga.problem.to_string());
    let src = Source {
        backend: a
            .metadata
            .get("backend")
            .cloned()
            .unwrap_or_else(|| "A".into()),
        kernel: a.metadata.get("kernel").cloned().unwrap_or_default(),
        rule: a.metadata.get("rule").cloned().unwrap_or_default(),
        device: a.metadata.get("device").cloned().unwrap_or_default(),
        tolerance,
        is_reference: false,
    };
    let want_name = b
        .metadata
        .get("backend")
        .cloned()
        .unwrap_or_else(|| "B".into());
    let rows = compare_outputs(
        &name,
        ga,
        &src,
        a.refs(),
        b.refs(),
        &want_name,
        OutputRefs::default(),
    );
    if rows.is_empty() {
        return Err(Error::invalid(
            "output sets",
            "at least one tensor (o, final_state, checkpoints) in both",
            "none in common",
        ));
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::generate::{generate, DataStyle};
    use deltarule_core::problem::{Gate, Mode, Op};
    use deltarule_core::StateLayout;

    /// The reference run in (sequence, value head) pieces equals the whole run bit for bit, for
    /// pools with unnamed sequences, checkpoints, grouped heads, both layouts and in-kernel gates.
    #[test]
    fn the_reference_in_pieces_is_bit_identical_to_the_whole_run() {
        let mut problems = Vec::new();
        let mut p = Problem::new(Op::Kda, Mode::Prefill, 1, 1, 2, 4, 16, 24);
        p.gate = Gate::Softplus;
        p.a_log = true;
        p.layout = StateLayout::Vk;
        p.initial = InitialState::Pool { rows: 6 };
        p.final_state = FinalState::InPlace;
        p.state_in_dtype = DType::BF16;
        p.state_out_dtype = DType::BF16;
        p.checkpoint_every = Some(8);
        p.l2norm = true;
        problems.push((p, vec![20, 0, 33, 9, 17]));
        let mut p = Problem::new(Op::Gdn, Mode::Prefill, 1, 1, 1, 3, 32, 16);
        p.initial = InitialState::Dense;
        problems.push((p.clone(), vec![70, 5]));
        p.initial = InitialState::None;
        p.final_state = FinalState::None;
        problems.push((p, vec![3, 1, 64]));
        for (i, (p, lens)) in problems.iter().enumerate() {
            let case = generate(p, lens, i as u64 + 11, DataStyle::default()).expect("generate");
            let whole = reference_outputs(&case).expect("whole");
            let calls = std::sync::atomic::AtomicUsize::new(0);
            let pieces = reference_outputs_with_progress(&case, &|d, t| {
                assert!(d <= t);
                calls.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            })
            .expect("pieces");
            assert_eq!(calls.into_inner(), lens.len() * p.hv, "problem {i}");
            assert!(pieces.o.bit_identical(&whole.o), "o of problem {i}");
            match (&pieces.final_state, &whole.final_state) {
                (Some(a), Some(b)) => assert!(a.bit_identical(b), "final state of problem {i}"),
                (a, b) => assert_eq!(a.is_some(), b.is_some(), "problem {i}"),
            }
            match (&pieces.checkpoints, &whole.checkpoints) {
                (Some(a), Some(b)) => assert!(a.bit_identical(b), "checkpoints of problem {i}"),
                (a, b) => assert_eq!(a.is_some(), b.is_some(), "problem {i}"),
            }
        }
    }

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

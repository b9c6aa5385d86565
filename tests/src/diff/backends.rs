//! Running a case on a backend by its diff name, and the rows of the observed outputs a case file
//! carries.

use super::{compare_outputs, DiffRow, Geometry, OutputRefs, Source};
use crate::casefile::{Case, Observed};
use deltarule_core::select::Preference;
use deltarule_core::{
    Backend, BackendKind, DType, Error, Kernel, Outputs, Precision, Problem, Result, Rule,
};
use deltarule_engine::Engine;

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

//! Output sets: reading a saved output set or a case file's expected or observed outputs, and
//! comparing two sets (`compare`).

use super::{compare_outputs, observed_tolerance, DiffRow, Geometry, OutputRefs, Source};
use crate::casefile::{options_from_metadata, DEFAULT_OBSERVED_LABEL};
use crate::limits::ByteCap;
use deltarule_core::problem::FinalState;
use deltarule_core::{DType, Error, HostTensor, Precision, Result};
use std::collections::{BTreeMap, HashMap};
use std::path::Path;

/// The metadata key that marks a saved output set (its value is the format version, `1`).
pub const OUTPUTS_MARK: &str = "deltarule_outputs";

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

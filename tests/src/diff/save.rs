//! Writing one source's outputs as a saved output set (`diff --save-outputs`).

use super::{OutputRefs, Source, OUTPUTS_MARK};
use crate::casefile::{metadata_from_problem, serialize_tensors, write_atomic, Case};
use deltarule_core::problem::FinalState;
use deltarule_core::{DType, Error, HostTensor, Problem, Result};
use std::path::Path;

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
    serialize_tensors(&list, meta, "output set")
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

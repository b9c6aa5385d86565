//! The rows of the diff table and what they are made from: the outputs of one source and who
//! produced them.

use super::Worst;
use crate::casefile::{Case, Observed};
use deltarule_core::{HostTensor, Metrics, Outputs};

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
    pub(super) fn get(&self, tensor: &str) -> Option<&'a HostTensor> {
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

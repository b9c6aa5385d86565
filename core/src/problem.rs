//! Data-only descriptions of the four operations (gdn/kda x prefill/decode), validated once and
//! reused by selection, launch, tests and the CLI.
//!
//! One struct describes all four: the ops share every field except the gate's shape, and the modes
//! share every field; `op` and `mode` are fields rather than four near-identical structs, so
//! validation, selection and case ids live in one place (docs/selection.md, design choices).

use crate::dtype::{dtype_set, DType};
use crate::error::{Error, Result};
use crate::tensor::HostTensor;
use crate::varlen::{checkpoint_offsets, validate_cu_seqlens};
use std::fmt;

/// The operator (docs/spec.md section 1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    /// Gated DeltaNet: one scalar log-decay per token per value head.
    Gdn,
    /// Kimi Delta Attention: one log-decay per token per value head per key channel.
    Kda,
}

impl Op {
    pub const ALL: [Op; 2] = [Op::Gdn, Op::Kda];
    pub fn name(self) -> &'static str {
        match self {
            Op::Gdn => "gdn",
            Op::Kda => "kda",
        }
    }
    pub fn parse(s: &str) -> Option<Op> {
        Op::ALL.into_iter().find(|o| o.name() == s)
    }
}

/// Prefill (chunked) or decode (token recurrence, T >= 1 tokens per sequence).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mode {
    Prefill,
    Decode,
}

impl Mode {
    pub const ALL: [Mode; 2] = [Mode::Prefill, Mode::Decode];
    pub fn name(self) -> &'static str {
        match self {
            Mode::Prefill => "prefill",
            Mode::Decode => "decode",
        }
    }
    pub fn parse(s: &str) -> Option<Mode> {
        Mode::ALL.into_iter().find(|m| m.name() == s)
    }
}

/// How `g` becomes the log-decay (docs/spec.md section 4).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Gate {
    /// `g` is the log-decay itself (case files: `precomputed`).
    Log,
    /// `g_log = -exp(A_log[hv]) * softplus(g + dt_bias)`.
    Softplus,
    /// kda: `g_log = lb * sigmoid(exp(A_log[hv]) * (g + dt_bias[hv, :]))`, or without `A_log`
    /// `lb * sigmoid(g + dt_bias)`.
    LowerBound(f64),
}

impl Gate {
    pub fn name(self) -> String {
        match self {
            Gate::Log => "log".into(),
            Gate::Softplus => "softplus".into(),
            Gate::LowerBound(lb) => format!("lower_bound({lb})"),
        }
    }
    /// True when the gate is computed in-kernel from `A_log`/`dt_bias`.
    pub fn in_kernel(self) -> bool {
        !matches!(self, Gate::Log)
    }
}

/// How `beta` is interpreted (docs/spec.md section 4).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BetaMode {
    /// A probability, used as is (case files: `precomputed`).
    Prob,
    /// Logits: `sigmoid(b)` (case files: `sigmoid`).
    Logit,
    /// `2 * sigmoid(b)`: negative eigenvalues allowed (case files: `sigmoid2`).
    Logit2,
}

impl BetaMode {
    pub const ALL: [BetaMode; 3] = [BetaMode::Prob, BetaMode::Logit, BetaMode::Logit2];
    pub fn name(self) -> &'static str {
        match self {
            BetaMode::Prob => "prob",
            BetaMode::Logit => "logit",
            BetaMode::Logit2 => "logit2",
        }
    }
}

/// Storage layout of one state (docs/spec.md section 6).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StateLayout {
    /// `[.., K, V]`, V contiguous (fla's default).
    Kv,
    /// `[.., V, K]`, K contiguous (fla's `state_v_first`, FlashInfer, vLLM, SGLang).
    Vk,
}

impl StateLayout {
    pub const ALL: [StateLayout; 2] = [StateLayout::Kv, StateLayout::Vk];
    pub fn name(self) -> &'static str {
        match self {
            StateLayout::Kv => "kv",
            StateLayout::Vk => "vk",
        }
    }
    pub fn parse(s: &str) -> Option<Self> {
        StateLayout::ALL.into_iter().find(|l| l.name() == s)
    }
    /// Flat offset of element `(kk, vv)` inside one K x V state stored in this layout.
    #[inline]
    pub fn offset(self, kk: usize, vv: usize, k: usize, v: usize) -> usize {
        match self {
            StateLayout::Kv => kk * v + vv,
            StateLayout::Vk => vv * k + kk,
        }
    }
}

/// Where the initial state comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum InitialState {
    /// Zeros.
    None,
    /// Dense `[N, HV, ...]`.
    Dense,
    /// A pool `[rows, HV, ...]`; sequence n reads row `state_indices[n]` (-1: zeros).
    Pool { rows: usize },
}

/// Where the final state goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FinalState {
    None,
    /// A new dense `[N, HV, ...]` tensor.
    Dense,
    /// Written in place into the pool rows named by `state_indices` (-1: not written).
    InPlace,
}

/// One problem: the dimensions, dtypes and every option of docs/spec.md.
///
/// Tensors (packed, no batch axis; `T` = total tokens, `N` = sequences):
///
/// | tensor | shape | dtype |
/// | --- | --- | --- |
/// | `q`, `k` | `[T, H, K]` | `qkv_dtype` |
/// | `v` | `[T, HV, V]` | `qkv_dtype` |
/// | `g` | gdn `[T, HV]`, kda `[T, HV, K]` | `g_dtype` |
/// | `beta` | `[T, HV]` | `beta_dtype` |
/// | `cu_seqlens` | `[N + 1]` | `offsets_dtype` |
/// | `A_log` | `[HV]` f32 | softplus, lower_bound (optional) |
/// | `dt_bias` | gdn `[HV]`, kda `[HV * K]` f32 | softplus, lower_bound |
/// | `initial_state` | `[N, HV, S0, S1]` dense or `[P, HV, S0, S1]` pool | `state_in_dtype` |
/// | `state_indices` | `[N]` | `index_dtype` |
/// | `o` | `[T, HV, V]` | `out_dtype` |
/// | `final_state` | `[N, HV, S0, S1]` dense, or the whole pool | `state_out_dtype` |
/// | `checkpoints` | `[total, HV, S0, S1]` | `state_out_dtype` |
///
/// `(S0, S1)` is `(K, V)` for layout `kv` and `(V, K)` for `vk`.
#[derive(Clone, Debug, PartialEq)]
pub struct Problem {
    pub op: Op,
    pub mode: Mode,
    /// N, number of sequences.
    pub seqs: usize,
    /// T, total tokens of all sequences.
    pub tokens: usize,
    /// q/k heads.
    pub h: usize,
    /// Value heads (`HV % H == 0`); value head `hv` reads q/k head `hv / (HV / H)`.
    pub hv: usize,
    /// Key head dim.
    pub k: usize,
    /// Value head dim.
    pub v: usize,
    pub scale: f64,
    pub l2norm: bool,
    pub gate: Gate,
    /// Whether `A_log` is given (required for softplus, optional for lower_bound).
    pub a_log: bool,
    pub beta: BetaMode,
    pub qkv_dtype: DType,
    pub g_dtype: DType,
    pub beta_dtype: DType,
    pub out_dtype: DType,
    pub offsets_dtype: DType,
    pub index_dtype: DType,
    pub layout: StateLayout,
    pub initial: InitialState,
    pub state_in_dtype: DType,
    pub final_state: FinalState,
    pub state_out_dtype: DType,
    /// Write the state after every `every` tokens of each sequence.
    pub checkpoint_every: Option<usize>,
    /// Chunk length of the chunked algorithm (64).
    pub chunk: usize,
    /// Reject NaN/Inf in the inputs before running (costs one pass over them); infinite gates that
    /// are legal limits (a log decay of -inf, a saturated softplus or lower-bound input) pass.
    pub check_finite: bool,
}

/// Float dtypes accepted for q, k, v.
pub const QKV_DTYPES: &[DType] = &[DType::BF16, DType::F16, DType::F32];
/// Float dtypes accepted for g and beta.
pub const GATE_DTYPES: &[DType] = &[DType::F32, DType::BF16];
/// State storage dtypes.
pub const STATE_DTYPES: &[DType] = &[DType::F32, DType::BF16, DType::F16];
/// Output dtypes.
pub const OUT_DTYPES: &[DType] = &[DType::BF16, DType::F16, DType::F32];
/// Offset and index dtypes.
pub const INDEX_DTYPES: &[DType] = &[DType::I32, DType::I64];
/// The chunk length of docs/spec.md section 5.
pub const CHUNK: usize = 64;
/// Head dims the reference backends accept.
pub const REFERENCE_HEAD_DIMS: std::ops::RangeInclusive<usize> = 16..=256;

impl Problem {
    /// A problem with the defaults of docs/spec.md: scale `1/sqrt(K)`, log gate, probability
    /// beta, no L2 norm, bf16 q/k/v, f32 g/beta/output, i64 offsets and indices, `kv` f32 state,
    /// no initial state, a dense final state, chunk 64.
    pub fn new(
        op: Op,
        mode: Mode,
        seqs: usize,
        tokens: usize,
        h: usize,
        hv: usize,
        k: usize,
        v: usize,
    ) -> Self {
        Problem {
            op,
            mode,
            seqs,
            tokens,
            h,
            hv,
            k,
            v,
            scale: 1.0 / (k.max(1) as f64).sqrt(),
            l2norm: false,
            gate: Gate::Log,
            a_log: false,
            beta: BetaMode::Prob,
            qkv_dtype: DType::BF16,
            g_dtype: DType::F32,
            beta_dtype: DType::F32,
            out_dtype: DType::F32,
            offsets_dtype: DType::I64,
            index_dtype: DType::I64,
            layout: StateLayout::Kv,
            initial: InitialState::None,
            state_in_dtype: DType::F32,
            final_state: FinalState::Dense,
            state_out_dtype: DType::F32,
            checkpoint_every: None,
            chunk: CHUNK,
            check_finite: false,
        }
    }

    /// `(S0, S1)`: the two inner dims of one stored state.
    pub fn state_dims(&self) -> (usize, usize) {
        match self.layout {
            StateLayout::Kv => (self.k, self.v),
            StateLayout::Vk => (self.v, self.k),
        }
    }

    /// Elements of one (sequence, value head) state.
    pub fn state_elems(&self) -> usize {
        self.k * self.v
    }

    /// HV / H.
    pub fn group(&self) -> usize {
        self.hv / self.h.max(1)
    }

    pub fn g_shape(&self) -> Vec<usize> {
        match self.op {
            Op::Gdn => vec![self.tokens, self.hv],
            Op::Kda => vec![self.tokens, self.hv, self.k],
        }
    }

    pub fn dt_bias_len(&self) -> usize {
        match self.op {
            Op::Gdn => self.hv,
            Op::Kda => self.hv * self.k,
        }
    }

    /// Shape of a state tensor with `rows` leading rows.
    pub fn state_shape(&self, rows: usize) -> Vec<usize> {
        let (s0, s1) = self.state_dims();
        vec![rows, self.hv, s0, s1]
    }

    pub fn o_shape(&self) -> Vec<usize> {
        vec![self.tokens, self.hv, self.v]
    }

    /// Rows of the initial-state tensor (N for dense, P for a pool, 0 for none).
    pub fn initial_rows(&self) -> usize {
        match self.initial {
            InitialState::None => 0,
            InitialState::Dense => self.seqs,
            InitialState::Pool { rows } => rows,
        }
    }

    /// Shape of the final-state output (None when no final state is asked for).
    pub fn final_shape(&self) -> Option<Vec<usize>> {
        match self.final_state {
            FinalState::None => None,
            FinalState::Dense => Some(self.state_shape(self.seqs)),
            FinalState::InPlace => Some(self.state_shape(self.initial_rows())),
        }
    }

    /// Checks the problem on its own (shapes, dtypes, options), before any tensor is read.
    pub fn validate(&self) -> Result<()> {
        let p = self;
        if p.h == 0 {
            return Err(Error::invalid("heads (H)", "at least 1", "0"));
        }
        if p.hv == 0 || !p.hv.is_multiple_of(p.h) {
            return Err(Error::invalid(
                "v_heads (HV)",
                format!("a positive multiple of H = {}", p.h),
                p.hv.to_string(),
            ));
        }
        for (name, d) in [("head_dim (K)", p.k), ("value_dim (V)", p.v)] {
            if !REFERENCE_HEAD_DIMS.contains(&d) {
                return Err(Error::invalid(
                    name,
                    "a head dim in 16..=256",
                    d.to_string(),
                ));
            }
        }
        if p.chunk != CHUNK {
            return Err(Error::invalid(
                "chunk",
                CHUNK.to_string(),
                p.chunk.to_string(),
            ));
        }
        if !(p.scale.is_finite() && p.scale > 0.0) {
            return Err(Error::invalid(
                "scale",
                "a finite positive number",
                p.scale.to_string(),
            ));
        }
        check_dtype("q/k/v dtype", p.qkv_dtype, QKV_DTYPES)?;
        check_dtype("g dtype", p.g_dtype, GATE_DTYPES)?;
        check_dtype("beta dtype", p.beta_dtype, GATE_DTYPES)?;
        check_dtype("output dtype", p.out_dtype, OUT_DTYPES)?;
        check_dtype("cu_seqlens dtype", p.offsets_dtype, INDEX_DTYPES)?;
        check_dtype("state_indices dtype", p.index_dtype, INDEX_DTYPES)?;
        check_dtype("initial_state dtype", p.state_in_dtype, STATE_DTYPES)?;
        check_dtype("final_state dtype", p.state_out_dtype, STATE_DTYPES)?;
        match p.gate {
            Gate::Log => {
                if p.a_log {
                    return Err(Error::invalid(
                        "A_log",
                        "no A_log with gate = log (precomputed)",
                        "an A_log tensor",
                    ));
                }
            }
            Gate::Softplus => {
                if !p.a_log {
                    return Err(Error::invalid(
                        "A_log",
                        "an A_log [HV] tensor for gate = softplus",
                        "none",
                    ));
                }
            }
            Gate::LowerBound(lb) => {
                if p.op != Op::Kda {
                    return Err(Error::invalid(
                        "gate",
                        "log or softplus for gdn",
                        "lower_bound",
                    ));
                }
                if !(lb.is_finite() && lb < 0.0) {
                    return Err(Error::invalid(
                        "lower_bound",
                        "a finite negative number (< 0)",
                        lb.to_string(),
                    ));
                }
            }
        }
        if let InitialState::Pool { rows } = p.initial {
            if rows == 0 {
                return Err(Error::invalid(
                    "initial_state",
                    "a pool of at least 1 row",
                    "0 rows",
                ));
            }
            if p.final_state == FinalState::InPlace && p.state_in_dtype != p.state_out_dtype {
                return Err(Error::invalid(
                    "final_state dtype",
                    format!("the pool's dtype {} (in-place update)", p.state_in_dtype),
                    p.state_out_dtype.to_string(),
                ));
            }
        }
        if p.final_state == FinalState::InPlace && !matches!(p.initial, InitialState::Pool { .. }) {
            return Err(Error::invalid(
                "final_state",
                "an initial-state pool with state_indices for an in-place final state",
                "no pool",
            ));
        }
        if let Some(e) = p.checkpoint_every {
            if e == 0 {
                return Err(Error::invalid(
                    "checkpoint_every",
                    "a positive integer",
                    "0",
                ));
            }
        }
        let max_index = i32::MAX as usize;
        if p.tokens > max_index {
            return Err(Error::invalid(
                "tokens (T)",
                format!("at most {max_index}"),
                p.tokens.to_string(),
            ));
        }
        Ok(())
    }

    /// Checks a caller's hint of the longest sequence (`max_seq`, in tokens), which selection
    /// reads: at most T. `None` (not known) is always valid.
    pub fn validate_longest_sequence(&self, max_seq: Option<usize>) -> Result<()> {
        match max_seq {
            Some(m) if m > self.tokens => Err(Error::invalid(
                "max_seq",
                format!(
                    "at most T = {} (the longest sequence's tokens)",
                    self.tokens
                ),
                m.to_string(),
            )),
            _ => Ok(()),
        }
    }

    /// A short, shape-encoding id, e.g. `kda_prefill/N2-T1000-H4-HV8-K60-V64-bf16-kv-f32`.
    pub fn id(&self) -> String {
        self.to_string()
    }

    /// A copy of `template` whose dimensions and dtypes are read from `inputs` (the options,
    /// `scale` included, are kept). The result is validated on its own, not yet against the
    /// tensors' contents (see [`validate_inputs`]).
    pub fn from_inputs(template: &Problem, inputs: &Inputs) -> Result<Problem> {
        let mut p = template.clone();
        let q = &inputs.q;
        let v = &inputs.v;
        if q.shape.len() != 3 {
            return Err(Error::invalid(
                "q",
                "shape [T, H, K]",
                format!("{:?}", q.shape),
            ));
        }
        if v.shape.len() != 3 {
            return Err(Error::invalid(
                "v",
                "shape [T, HV, V]",
                format!("{:?}", v.shape),
            ));
        }
        if inputs.cu_seqlens.shape.len() != 1 || inputs.cu_seqlens.shape[0] < 2 {
            return Err(Error::invalid(
                "cu_seqlens",
                "shape [N + 1] with N >= 1",
                format!("{:?}", inputs.cu_seqlens.shape),
            ));
        }
        p.tokens = q.shape[0];
        p.h = q.shape[1];
        p.k = q.shape[2];
        p.hv = v.shape[1];
        p.v = v.shape[2];
        p.seqs = inputs.cu_seqlens.shape[0] - 1;
        p.qkv_dtype = q.dtype();
        p.g_dtype = inputs.g.dtype();
        p.beta_dtype = inputs.beta.dtype();
        p.offsets_dtype = inputs.cu_seqlens.dtype();
        p.a_log = inputs.a_log.is_some();
        if let Some(s) = &inputs.initial_state {
            p.state_in_dtype = s.dtype();
            if let Some(idx) = &inputs.state_indices {
                p.index_dtype = idx.dtype();
                p.initial = InitialState::Pool {
                    rows: s.shape.first().copied().unwrap_or(0),
                };
                if p.final_state != FinalState::None {
                    p.final_state = FinalState::InPlace;
                    p.state_out_dtype = s.dtype();
                }
            } else {
                p.initial = InitialState::Dense;
            }
        } else {
            p.initial = InitialState::None;
            if inputs.state_indices.is_some() {
                return Err(Error::invalid(
                    "state_indices",
                    "an initial_state pool to index into",
                    "state_indices without initial_state",
                ));
            }
            if p.final_state == FinalState::InPlace {
                p.final_state = FinalState::Dense;
            }
        }
        p.validate()?;
        Ok(p)
    }
}

fn check_dtype(field: &str, got: DType, allowed: &[DType]) -> Result<()> {
    if allowed.contains(&got) {
        Ok(())
    } else {
        Err(Error::invalid(
            field,
            format!("one of {}", dtype_set(allowed)),
            got.name(),
        ))
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}_{}/N{}-T{}-H{}-HV{}-K{}-V{}-{}-{}-{}",
            self.op.name(),
            self.mode.name(),
            self.seqs,
            self.tokens,
            self.h,
            self.hv,
            self.k,
            self.v,
            self.qkv_dtype,
            self.layout.name(),
            self.state_out_dtype
        )?;
        if self.l2norm {
            f.write_str("-l2")?;
        }
        match self.gate {
            Gate::Log => {}
            Gate::Softplus => f.write_str("-softplus")?,
            Gate::LowerBound(lb) => write!(f, "-lb{lb}")?,
        }
        match self.beta {
            BetaMode::Prob => {}
            b => write!(f, "-{}", b.name())?,
        }
        match self.initial {
            InitialState::None => {}
            InitialState::Dense => write!(f, "-h0{}", self.state_in_dtype)?,
            InitialState::Pool { rows } => write!(f, "-pool{rows}{}", self.state_in_dtype)?,
        }
        if let Some(e) = self.checkpoint_every {
            write!(f, "-ckpt{e}")?;
        }
        Ok(())
    }
}

/// The input tensors of one call (host side).
#[derive(Clone, Debug, PartialEq)]
pub struct Inputs {
    pub q: HostTensor,
    pub k: HostTensor,
    pub v: HostTensor,
    pub g: HostTensor,
    pub beta: HostTensor,
    pub cu_seqlens: HostTensor,
    pub a_log: Option<HostTensor>,
    pub dt_bias: Option<HostTensor>,
    /// Dense initial state or, with `state_indices`, the pool (updated in place by backends).
    pub initial_state: Option<HostTensor>,
    pub state_indices: Option<HostTensor>,
}

/// The outputs of one call (host side).
#[derive(Clone, Debug, PartialEq)]
pub struct Outputs {
    pub o: HostTensor,
    /// Dense final states, or the whole pool after the in-place update.
    pub final_state: Option<HostTensor>,
    pub checkpoints: Option<HostTensor>,
}

/// What validation learned from the tensors' contents, for the backends to reuse.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Validated {
    /// `cu_seqlens` as usize, `[N + 1]`.
    pub cu: Vec<usize>,
    /// `state_indices` (-1 = none), when a pool is given.
    pub indices: Option<Vec<i64>>,
    /// Per-sequence start offsets into the checkpoint buffer, `[N + 1]`.
    pub checkpoint_offsets: Option<Vec<usize>>,
}

impl Validated {
    pub fn seq_len(&self, n: usize) -> usize {
        self.cu[n + 1] - self.cu[n]
    }
    pub fn total_checkpoints(&self) -> usize {
        self.checkpoint_offsets
            .as_ref()
            .and_then(|o| o.last().copied())
            .unwrap_or(0)
    }
}

fn expect_tensor(field: &str, t: &HostTensor, shape: &[usize], dtypes: &[DType]) -> Result<()> {
    if t.shape != shape {
        return Err(Error::invalid(
            field,
            format!("shape {shape:?}"),
            format!("shape {:?}", t.shape),
        ));
    }
    if !dtypes.contains(&t.dtype()) {
        return Err(Error::invalid(
            field,
            format!("dtype {}", dtype_set(dtypes)),
            t.dtype().name(),
        ));
    }
    if t.len() != t.numel() {
        return Err(Error::invalid(
            field,
            format!("{} elements", t.numel()),
            format!("{} elements", t.len()),
        ));
    }
    Ok(())
}

fn check_finite(field: &str, t: &HostTensor) -> Result<()> {
    if let Some(i) = (0..t.len()).find(|&i| !t.get_f64(i).is_finite()) {
        return Err(Error::invalid(
            field,
            "finite values",
            format!("{} at flat index {i} (shape {:?})", t.get_f64(i), t.shape),
        ));
    }
    Ok(())
}

/// The gates' share of `check_finite`: an infinite gate is a legal limit (docs/spec.md, "Gates of
/// any size"): a log decay of -inf is a reset, and the softplus and lower-bound forms saturate at
/// either infinity; NaN never is, nor a log decay of +inf (a state that grows without bound).
fn check_gate(gate: Gate, g: &HostTensor) -> Result<()> {
    let bad = |x: f64| x.is_nan() || (matches!(gate, Gate::Log) && x == f64::INFINITY);
    if let Some(i) = (0..g.len()).find(|&i| bad(g.get_f64(i))) {
        return Err(Error::invalid(
            "g",
            match gate {
                Gate::Log => "log decays in [-inf, 0]",
                _ => "gate inputs that are not NaN",
            },
            format!("{} at flat index {i} (shape {:?})", g.get_f64(i), g.shape),
        ));
    }
    Ok(())
}

/// Checks `state_indices` against a pool of `rows` rows: every index is -1 (no state read, none
/// written) or a row, and no row is named twice (two sequences would race on it).
pub fn validate_state_indices(idx: &[i64], rows: usize) -> Result<()> {
    let mut seen = vec![usize::MAX; rows];
    for (seq, &i) in idx.iter().enumerate() {
        if i < -1 || i >= rows as i64 {
            return Err(Error::invalid(
                format!("state_indices[{seq}]"),
                format!("-1 or a pool row in 0..{rows}"),
                i.to_string(),
            ));
        }
        if i >= 0 {
            let r = i as usize;
            if seen[r] != usize::MAX {
                return Err(Error::invalid(
                    format!("state_indices[{seq}]"),
                    "unique pool rows (duplicates would race)",
                    format!("row {i}, also named by state_indices[{}]", seen[r]),
                ));
            }
            seen[r] = seq;
        }
    }
    Ok(())
}

/// Validates `inputs` against `p` (shapes, dtypes, offsets, indices and, with `p.check_finite`,
/// values) before anything is launched. Returns what the backends need from the contents.
pub fn validate_inputs(p: &Problem, inputs: &Inputs) -> Result<Validated> {
    p.validate()?;
    let (t, n) = (p.tokens, p.seqs);
    expect_tensor("q", &inputs.q, &[t, p.h, p.k], &[p.qkv_dtype])?;
    expect_tensor("k", &inputs.k, &[t, p.h, p.k], &[p.qkv_dtype])?;
    expect_tensor("v", &inputs.v, &[t, p.hv, p.v], &[p.qkv_dtype])?;
    expect_tensor("g", &inputs.g, &p.g_shape(), &[p.g_dtype])?;
    expect_tensor("beta", &inputs.beta, &[t, p.hv], &[p.beta_dtype])?;
    expect_tensor(
        "cu_seqlens",
        &inputs.cu_seqlens,
        &[n + 1],
        &[p.offsets_dtype],
    )?;
    let cu_raw = inputs.cu_seqlens.to_i64_vec("cu_seqlens")?;
    let cu = validate_cu_seqlens(&cu_raw, t)?;

    match (&inputs.a_log, p.gate) {
        (Some(a), Gate::Softplus | Gate::LowerBound(_)) => {
            expect_tensor("A_log", a, &[p.hv], &[DType::F32])?
        }
        (None, Gate::Softplus) => {
            return Err(Error::invalid("A_log", "an A_log [HV] f32 tensor", "none"))
        }
        (Some(_), Gate::Log) => {
            return Err(Error::invalid(
                "A_log",
                "no A_log with gate = log (precomputed)",
                "an A_log tensor",
            ))
        }
        _ => {}
    }
    if p.a_log != inputs.a_log.is_some() {
        return Err(Error::invalid(
            "A_log",
            if p.a_log {
                "an A_log tensor"
            } else {
                "no A_log tensor"
            },
            if inputs.a_log.is_some() {
                "one"
            } else {
                "none"
            },
        ));
    }
    match (&inputs.dt_bias, p.gate) {
        (Some(d), Gate::Softplus | Gate::LowerBound(_)) => {
            let len = p.dt_bias_len();
            let ok_2d = p.op == Op::Kda && d.shape == [p.hv, p.k];
            if !ok_2d {
                expect_tensor("dt_bias", d, &[len], &[DType::F32])?;
            } else {
                expect_tensor("dt_bias", d, &[p.hv, p.k], &[DType::F32])?;
            }
        }
        (None, Gate::Softplus | Gate::LowerBound(_)) => {
            return Err(Error::invalid(
                "dt_bias",
                format!(
                    "a dt_bias [{}] f32 tensor for gate = {}",
                    p.dt_bias_len(),
                    p.gate.name()
                ),
                "none",
            ))
        }
        (Some(_), Gate::Log) => {
            return Err(Error::invalid(
                "dt_bias",
                "no dt_bias with gate = log (precomputed)",
                "a dt_bias tensor",
            ))
        }
        (None, Gate::Log) => {}
    }

    let mut indices = None;
    match p.initial {
        InitialState::None => {
            if inputs.initial_state.is_some() {
                return Err(Error::invalid("initial_state", "none", "a tensor"));
            }
            if inputs.state_indices.is_some() {
                return Err(Error::invalid(
                    "state_indices",
                    "none (no pool)",
                    "a tensor",
                ));
            }
        }
        InitialState::Dense => {
            let s = inputs
                .initial_state
                .as_ref()
                .ok_or_else(|| Error::invalid("initial_state", "a dense state tensor", "none"))?;
            expect_tensor("initial_state", s, &p.state_shape(n), &[p.state_in_dtype])?;
            if inputs.state_indices.is_some() {
                return Err(Error::invalid(
                    "state_indices",
                    "none (dense initial state)",
                    "a tensor",
                ));
            }
        }
        InitialState::Pool { rows } => {
            let s = inputs
                .initial_state
                .as_ref()
                .ok_or_else(|| Error::invalid("initial_state", "a state pool tensor", "none"))?;
            expect_tensor(
                "initial_state",
                s,
                &p.state_shape(rows),
                &[p.state_in_dtype],
            )?;
            let idx_t = inputs.state_indices.as_ref().ok_or_else(|| {
                Error::invalid("state_indices", format!("an [{n}] index tensor"), "none")
            })?;
            expect_tensor("state_indices", idx_t, &[n], &[p.index_dtype])?;
            let idx = idx_t.to_i64_vec("state_indices")?;
            validate_state_indices(&idx, rows)?;
            indices = Some(idx);
        }
    }

    let checkpoint_offsets = p.checkpoint_every.map(|e| checkpoint_offsets(&cu, e));

    if p.check_finite {
        check_finite("q", &inputs.q)?;
        check_finite("k", &inputs.k)?;
        check_finite("v", &inputs.v)?;
        check_gate(p.gate, &inputs.g)?;
        check_finite("beta", &inputs.beta)?;
        if let Some(a) = &inputs.a_log {
            check_finite("A_log", a)?;
        }
        if let Some(d) = &inputs.dt_bias {
            check_finite("dt_bias", d)?;
        }
        if let Some(s) = &inputs.initial_state {
            match &indices {
                // a pool: only the rows the call reads (other rows may hold anything)
                Some(idx) => {
                    let row = s.len() / s.shape.first().copied().unwrap_or(1).max(1);
                    for &r in idx.iter().filter(|&&r| r >= 0) {
                        let start = r as usize * row;
                        if let Some(i) = (start..start + row).find(|&i| !s.get_f64(i).is_finite()) {
                            return Err(Error::invalid(
                                "initial_state",
                                "finite values in the pool rows named by state_indices",
                                format!("{} at flat index {i} (pool row {r})", s.get_f64(i)),
                            ));
                        }
                    }
                }
                None => check_finite("initial_state", s)?,
            }
        }
    }
    Ok(Validated {
        cu,
        indices,
        checkpoint_offsets,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_indices_name_pool_rows_once() {
        assert!(validate_state_indices(&[2, -1, 0, -1], 3).is_ok());
        let e = validate_state_indices(&[0, 3], 3).expect_err("row 3 of 3");
        assert!(e.to_string().contains("state_indices[1]"), "{e}");
        let e = validate_state_indices(&[-2], 3).expect_err("below -1");
        assert!(e.to_string().contains("state_indices[0]"), "{e}");
        let e = validate_state_indices(&[1, 0, 1], 3).expect_err("a repeated row");
        assert!(
            e.to_string().contains("also named by state_indices[0]"),
            "{e}"
        );
    }

    #[test]
    fn infinite_gates_are_legal_limits_and_nan_never() {
        let g = |x: f64| HostTensor::from_f64(DType::F32, vec![3], &[-0.5, x, 0.0]);
        for form in [Gate::Log, Gate::Softplus, Gate::LowerBound(-5.0)] {
            assert!(check_gate(form, &g(f64::NEG_INFINITY)).is_ok(), "{form:?}");
            let e = check_gate(form, &g(f64::NAN)).expect_err("NaN");
            assert!(e.to_string().contains("flat index 1"), "{e}");
        }
        assert!(check_gate(Gate::Log, &g(f64::INFINITY)).is_err());
        assert!(check_gate(Gate::Softplus, &g(f64::INFINITY)).is_ok());
        assert!(check_gate(Gate::LowerBound(-5.0), &g(f64::INFINITY)).is_ok());
    }

    #[test]
    fn the_longest_sequence_hint_is_at_most_t() {
        let p = Problem::new(Op::Gdn, Mode::Prefill, 2, 100, 1, 1, 64, 64);
        assert!(p.validate_longest_sequence(None).is_ok());
        assert!(p.validate_longest_sequence(Some(100)).is_ok());
        match p.validate_longest_sequence(Some(101)) {
            Err(Error::InvalidArgument { field, .. }) => assert_eq!(field, "max_seq"),
            other => panic!("{other:?}"),
        }
    }
}

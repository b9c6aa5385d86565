//! Problem options shared by `diff`, `gen`, `select` and `bench`.

use clap::{Args, ValueEnum};
use deltarule_core::problem::{BetaMode, FinalState, Gate, InitialState, Mode, Op, StateLayout};
use deltarule_core::{DType, Error, Problem, Result};
use deltarule_tests::generate::split_tokens;
use deltarule_tests::limits::{parse_bytes, ByteCap};

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum OpArg {
    Gdn,
    Kda,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum ModeArg {
    Prefill,
    Decode,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum GateArg {
    Log,
    Softplus,
    LowerBound,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum BetaArg {
    Prob,
    Logit,
    Logit2,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum LayoutArg {
    Kv,
    Vk,
}

/// The data of a generated problem.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum DataArg {
    /// Normal q, k, v (k L2-normalised), realistic gates and betas.
    Random,
    /// Keys near one shared direction and β = 1: `I + A` near singular, so every rounding of a
    /// chunk's products is amplified (with `--gate-at` edits and the other options as given).
    Collinear,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum InitArg {
    None,
    Dense,
    Pool,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum FinalArg {
    None,
    Dense,
    InPlace,
}

/// The shape and options of a generated problem.
#[derive(Args, Clone, Debug)]
pub struct ProblemArgs {
    /// Operator.
    #[arg(long, value_enum)]
    pub op: Option<OpArg>,
    /// prefill (chunked) or decode (token recurrence, pool in place).
    #[arg(long, value_enum, default_value = "prefill")]
    pub mode: ModeArg,
    /// Total tokens T of all sequences.
    #[arg(long, allow_hyphen_values = true, value_parser = count)]
    pub tokens: Option<usize>,
    /// Number of sequences N (lengths drawn at random from the seed unless --seqlens is given).
    #[arg(long, default_value_t = 1, allow_hyphen_values = true, value_parser = count)]
    pub seqs: usize,
    /// Explicit sequence lengths, comma separated (overrides --tokens/--seqs).
    #[arg(long, value_delimiter = ',', allow_hyphen_values = true, value_parser = count)]
    pub seqlens: Option<Vec<usize>>,
    /// q/k heads H.
    #[arg(long, allow_hyphen_values = true, value_parser = count)]
    pub heads: Option<usize>,
    /// Value heads HV (default H).
    #[arg(long, allow_hyphen_values = true, value_parser = count)]
    pub v_heads: Option<usize>,
    /// Key head dim K.
    #[arg(long, default_value_t = 128, allow_hyphen_values = true, value_parser = count)]
    pub head_dim: usize,
    /// Value head dim V (default K).
    #[arg(long, allow_hyphen_values = true, value_parser = count)]
    pub value_dim: Option<usize>,
    /// Seed of the generated data.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// The generated data: random, or collinear (keys near one direction and β = 1, the
    /// ill-conditioned chunks where low-precision products lose the most).
    #[arg(long, value_enum, default_value = "random")]
    pub data: DataArg,
    /// dtype of q, k, v.
    #[arg(long, default_value = "bf16")]
    pub dtype: String,
    /// dtype of g.
    #[arg(long, default_value = "f32")]
    pub g_dtype: String,
    /// dtype of beta.
    #[arg(long, default_value = "f32")]
    pub beta_dtype: String,
    /// dtype of the output o (default: f32 for the reference paths; the diff picks what the row
    /// writes).
    #[arg(long)]
    pub out_dtype: Option<String>,
    /// State storage dtype (initial, final, checkpoints).
    #[arg(long, default_value = "f32")]
    pub state_dtype: String,
    #[arg(long, value_enum, default_value = "kv")]
    pub layout: LayoutArg,
    #[arg(long, value_enum, default_value = "log")]
    pub gate: GateArg,
    /// lower_bound of the kda lower-bound gate.
    #[arg(long, default_value_t = -5.0, allow_hyphen_values = true)]
    pub lower_bound: f64,
    /// Lower-bound gate without A_log.
    #[arg(long)]
    pub no_a_log: bool,
    #[arg(long, value_enum, default_value = "prob")]
    pub beta: BetaArg,
    /// In-kernel q/k L2 normalisation.
    #[arg(long)]
    pub l2norm: bool,
    /// Read-out scale (default 1/sqrt(K)).
    #[arg(long)]
    pub scale: Option<f64>,
    #[arg(long, value_enum, default_value = "none")]
    pub initial_state: InitArg,
    /// Rows of the state pool (with --initial-state pool; default 2N).
    #[arg(long, allow_hyphen_values = true, value_parser = count)]
    pub pool_size: Option<usize>,
    /// Final state: dense, in place in the pool (default with a pool), or none.
    #[arg(long, value_enum)]
    pub final_state: Option<FinalArg>,
    /// Write the state after every E tokens of each sequence.
    #[arg(long, allow_hyphen_values = true, value_parser = count)]
    pub checkpoint_every: Option<usize>,
    /// dtype of cu_seqlens.
    #[arg(long, default_value = "i64")]
    pub offsets_dtype: String,
    /// dtype of state_indices.
    #[arg(long, default_value = "i64")]
    pub index_dtype: String,
    /// Reject NaN/Inf inputs before running (a log gate of -inf, a reset, is legal).
    #[arg(long)]
    pub check_finite: bool,
}

/// A count argument: a non-negative integer (`-1` is named as such, not taken for a flag).
pub fn count(s: &str) -> std::result::Result<usize, String> {
    s.trim()
        .parse::<usize>()
        .map_err(|_| format!("`{s}` must be a non-negative integer"))
}

/// A byte count argument: digits with an optional K, M, G or T suffix.
pub fn byte_count(s: &str) -> std::result::Result<u64, String> {
    parse_bytes(s).ok_or_else(|| {
        format!("`{s}` must be a byte count such as 4000000000 or 4G (suffixes K, M, G, T)")
    })
}

fn dtype(field: &str, s: &str) -> Result<DType> {
    DType::parse(s).ok_or_else(|| Error::invalid(field, "one of bf16, f16, f32, i32, i64", s))
}

impl ProblemArgs {
    /// True when the user gave a generated-problem shape.
    pub fn given(&self) -> bool {
        self.op.is_some() || self.tokens.is_some() || self.heads.is_some() || self.seqlens.is_some()
    }

    /// The problem and its sequence lengths. With `allocates`, the problem's estimated
    /// allocation is checked against `cap` before its inputs exist; without (selection only), the
    /// sequence lengths alone are.
    pub fn problem(&self, cap: &ByteCap, allocates: bool) -> Result<(Problem, Vec<usize>)> {
        let op = match self.op {
            Some(OpArg::Gdn) => Op::Gdn,
            Some(OpArg::Kda) => Op::Kda,
            None => return Err(Error::invalid("--op", "gdn or kda", "nothing")),
        };
        let mode = match self.mode {
            ModeArg::Prefill => Mode::Prefill,
            ModeArg::Decode => Mode::Decode,
        };
        // (N, T) first: the lengths are drawn only once the problem passes the cap
        let (seqs, tokens) = match (&self.seqlens, self.tokens) {
            (Some(l), _) => {
                if l.is_empty() {
                    return Err(Error::invalid("--seqlens", "at least one length", "none"));
                }
                let sum = l
                    .iter()
                    .try_fold(0usize, |a, &x| a.checked_add(x))
                    .ok_or_else(|| Error::invalid("--seqlens", "a sum that fits", "an overflow"))?;
                if let Some(t) = self.tokens {
                    if sum != t {
                        return Err(Error::invalid(
                            "--tokens",
                            format!("the sum of --seqlens ({sum})"),
                            t.to_string(),
                        ));
                    }
                }
                (l.len(), sum)
            }
            (None, Some(t)) => {
                if self.seqs == 0 {
                    return Err(Error::invalid("--seqs", "at least 1", "0"));
                }
                (self.seqs, t)
            }
            (None, None) => {
                return Err(Error::invalid(
                    "--tokens",
                    "a token count (or --seqlens)",
                    "nothing",
                ))
            }
        };
        let h = self
            .heads
            .ok_or_else(|| Error::invalid("--heads", "a head count", "nothing"))?;
        let hv = self.v_heads.unwrap_or(h);
        let k = self.head_dim;
        let v = self.value_dim.unwrap_or(k);
        let mut p = Problem::new(op, mode, seqs, tokens, h, hv, k, v);
        p.qkv_dtype = dtype("--dtype", &self.dtype)?;
        p.g_dtype = dtype("--g-dtype", &self.g_dtype)?;
        p.beta_dtype = dtype("--beta-dtype", &self.beta_dtype)?;
        p.out_dtype = match &self.out_dtype {
            Some(s) => dtype("--out-dtype", s)?,
            None => DType::F32,
        };
        let sd = dtype("--state-dtype", &self.state_dtype)?;
        p.state_in_dtype = sd;
        p.state_out_dtype = sd;
        p.layout = match self.layout {
            LayoutArg::Kv => StateLayout::Kv,
            LayoutArg::Vk => StateLayout::Vk,
        };
        p.gate = match self.gate {
            GateArg::Log => Gate::Log,
            GateArg::Softplus => Gate::Softplus,
            GateArg::LowerBound => Gate::LowerBound(self.lower_bound),
        };
        p.a_log = match self.gate {
            GateArg::Log => false,
            GateArg::Softplus => true,
            GateArg::LowerBound => !self.no_a_log,
        };
        p.beta = match self.beta {
            BetaArg::Prob => BetaMode::Prob,
            BetaArg::Logit => BetaMode::Logit,
            BetaArg::Logit2 => BetaMode::Logit2,
        };
        p.l2norm = self.l2norm;
        if let Some(s) = self.scale {
            p.scale = s;
        }
        p.initial = match self.initial_state {
            InitArg::None => InitialState::None,
            InitArg::Dense => InitialState::Dense,
            InitArg::Pool => InitialState::Pool {
                rows: self.pool_size.unwrap_or(seqs.saturating_mul(2)),
            },
        };
        p.final_state = match (self.final_state, self.initial_state) {
            (Some(FinalArg::None), _) => FinalState::None,
            (Some(FinalArg::Dense), _) => FinalState::Dense,
            (Some(FinalArg::InPlace), _) => FinalState::InPlace,
            (None, InitArg::Pool) => FinalState::InPlace,
            (None, _) => FinalState::Dense,
        };
        p.checkpoint_every = self.checkpoint_every;
        p.offsets_dtype = dtype("--offsets-dtype", &self.offsets_dtype)?;
        p.index_dtype = dtype("--index-dtype", &self.index_dtype)?;
        p.check_finite = self.check_finite;
        p.validate()?;
        if allocates {
            cap.check_problem(&p)?;
        } else {
            cap.check(
                "the sequence lengths",
                (seqs as u64).checked_mul(2 * std::mem::size_of::<usize>() as u64),
            )?;
        }
        let seqlens = match &self.seqlens {
            Some(l) => l.clone(),
            None => split_tokens(tokens, seqs, self.seed),
        };
        Ok((p, seqlens))
    }
}

/// One `--gate-at` edit: the gate of packed token `token` (every value head, or `head` only) set
/// to `value`.
#[derive(Clone, Debug, PartialEq)]
pub struct GateAt {
    pub token: usize,
    pub head: Option<usize>,
    pub value: f64,
}

impl std::fmt::Display for GateAt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.head {
            Some(h) => write!(f, "{}:{h}={}", self.token, self.value),
            None => write!(f, "{}={}", self.token, self.value),
        }
    }
}

/// Parses `TOKEN=VALUE` or `TOKEN:HEAD=VALUE` (VALUE a float, `-inf` included).
pub fn gate_at(s: &str) -> std::result::Result<GateAt, String> {
    let bad = || {
        format!("`{s}` must be TOKEN=VALUE or TOKEN:HEAD=VALUE, such as 30000=-inf or 70000:2=-1e4")
    };
    let (at, value) = s.split_once('=').ok_or_else(bad)?;
    let (token, head) = match at.split_once(':') {
        Some((t, h)) => (t, Some(h.trim().parse::<usize>().map_err(|_| bad())?)),
        None => (at, None),
    };
    let token = token.trim().parse::<usize>().map_err(|_| bad())?;
    let value = value.trim().parse::<f64>().map_err(|_| bad())?;
    if value.is_nan() {
        return Err(format!(
            "`{s}`: a gate of NaN is not a decay; use -inf to reset the state"
        ));
    }
    Ok(GateAt { token, head, value })
}

/// Gate edits of a generated problem.
#[derive(Args, Clone, Debug, Default)]
pub struct GateArgs {
    /// Set the gate g of a packed token after generation: TOKEN=VALUE (every value head) or
    /// TOKEN:HEAD=VALUE; repeatable. VALUE is the raw g input (the log decay with --gate log:
    /// -inf resets the state, -1e4 is an extreme decay; the gate input before softplus with the
    /// in-kernel gates, where a large positive value resets).
    #[arg(long = "gate-at", value_parser = gate_at, allow_hyphen_values = true)]
    pub gate_at: Vec<GateAt>,
}

/// Applies gate edits to a generated case (every K channel of a kda gate), and records them in
/// the metadata key `gate_at`.
pub fn apply_gates(case: &mut deltarule_tests::casefile::Case, gates: &[GateAt]) -> Result<()> {
    if gates.is_empty() {
        return Ok(());
    }
    let p = &case.problem;
    let g = &mut case.inputs.g;
    let per_head: usize = g.shape.iter().skip(2).product();
    for e in gates {
        if e.token >= p.tokens {
            return Err(Error::invalid(
                "--gate-at",
                format!("a packed token below T = {}", p.tokens),
                e.to_string(),
            ));
        }
        if e.head.is_some_and(|h| h >= p.hv) {
            return Err(Error::invalid(
                "--gate-at",
                format!("a value head below HV = {}", p.hv),
                e.to_string(),
            ));
        }
        let heads = match e.head {
            Some(h) => h..h + 1,
            None => 0..p.hv,
        };
        for h in heads {
            g.write_f64((e.token * p.hv + h) * per_head, &vec![e.value; per_head]);
        }
    }
    let list: Vec<String> = gates.iter().map(|e| e.to_string()).collect();
    case.metadata.insert("gate_at".into(), list.join(","));
    Ok(())
}

/// The tokens marked by a case's `gate_at` metadata, with a label (`g=-inf`), for plots.
pub fn gate_marks(meta: &std::collections::BTreeMap<String, String>) -> Vec<(usize, String)> {
    meta.get("gate_at")
        .map(|s| {
            s.split(',')
                .filter_map(|e| gate_at(e).ok())
                .map(|e| {
                    let head = e.head.map_or(String::new(), |h| format!(" (head {h})"));
                    (e.token, format!("g={} at {}{head}", e.value, e.token))
                })
                .collect()
        })
        .unwrap_or_default()
}

//! Selection rules as data (issue 5): one static table, one row per (op, mode, backend, kernel),
//! and one pure function that picks a row and explains every rejection.

use crate::backend::Kernel;
use crate::caps::{BackendKind, Capabilities};
use crate::dtype::{dtype_set, DType};
use crate::error::{Error, Result};
use crate::problem::{BetaMode, FinalState, Gate, InitialState, Mode, Op, Problem, StateLayout};
use crate::tolerance::Precision;
use std::fmt;

/// Which head dims a row accepts.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum DimRule {
    /// Any dim in `lo..=hi`.
    Range(usize, usize),
    /// Exactly one of these.
    OneOf(&'static [usize]),
}

impl DimRule {
    pub fn accepts(self, d: usize) -> bool {
        match self {
            DimRule::Range(lo, hi) => (lo..=hi).contains(&d),
            DimRule::OneOf(list) => list.contains(&d),
        }
    }
}

impl fmt::Display for DimRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DimRule::Range(lo, hi) => write!(f, "{lo}..={hi}"),
            DimRule::OneOf(list) => {
                let s: Vec<String> = list.iter().map(|d| d.to_string()).collect();
                write!(f, "{{{}}}", s.join(", "))
            }
        }
    }
}

/// Gates a row computes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GateRule {
    pub log: bool,
    pub softplus: bool,
    /// Accepted `lower_bound` range `[lo, hi)`, when the lower-bound gate is supported.
    pub lower_bound: Option<(f64, f64)>,
}

impl GateRule {
    pub const ALL: GateRule = GateRule {
        log: true,
        softplus: true,
        lower_bound: Some((f64::NEG_INFINITY, 0.0)),
    };
    /// The fast kernels' promise: every gate, with `lower_bound` in [-5, 0).
    pub const FAST: GateRule = GateRule {
        log: true,
        softplus: true,
        lower_bound: Some((-5.0, 0.0)),
    };
    fn describe(self) -> String {
        let mut v = Vec::new();
        if self.log {
            v.push("log".to_string());
        }
        if self.softplus {
            v.push("softplus".to_string());
        }
        if let Some((lo, hi)) = self.lower_bound {
            if lo.is_finite() {
                v.push(format!("lower_bound in [{lo}, {hi})"));
            } else {
                v.push(format!("lower_bound < {hi}"));
            }
        }
        v.join(", ")
    }
}

/// Which checkpoint intervals a row writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CheckpointRule {
    None,
    Any,
    MultipleOf(usize),
}

impl fmt::Display for CheckpointRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CheckpointRule::None => f.write_str("none"),
            CheckpointRule::Any => f.write_str("any"),
            CheckpointRule::MultipleOf(m) => write!(f, "x{m}"),
        }
    }
}

/// A device requirement of a row.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Need {
    /// CUDA compute capability at least `(major, minor)`.
    ComputeCapability(u32, u32),
    /// Workgroup (shared) memory per workgroup, bytes.
    WorkgroupStorage(u32),
    /// Storage buffers per shader stage.
    StorageBuffers(u32),
    /// Invocations per workgroup.
    Invocations(u32),
    Subgroups,
    ShaderF16,
    /// Cooperative matrices usable by the `coop` shaders (16x16x16 f16 -> f32, subgroups of 32).
    CooperativeMatrix,
}

impl fmt::Display for Need {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Need::ComputeCapability(a, b) => write!(f, "sm_{a}{b}+"),
            Need::WorkgroupStorage(b) if b % 1024 == 0 => {
                write!(f, "{} KiB workgroup memory", b / 1024)
            }
            Need::WorkgroupStorage(b) => write!(f, "{b} bytes of workgroup memory"),
            Need::StorageBuffers(n) => write!(f, "{n} storage buffers"),
            Need::Invocations(n) => write!(f, "{n} invocations"),
            Need::Subgroups => f.write_str("subgroups"),
            Need::ShaderF16 => f.write_str("shader f16"),
            Need::CooperativeMatrix => {
                f.write_str("16x16x16 f16->f32 cooperative matrices with 32-wide subgroups")
            }
        }
    }
}

/// A condition `auto` applies on top of the contract (an explicit choice ignores it): where the
/// row is the faster choice.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AutoWhen {
    Always,
    /// Never chosen by `auto` or a bare backend name: explicit `backend:kernel` only (cross-check
    /// paths such as the CPU chunked kernels).
    Never,
    /// The split (workspace) form of a prefill: (sequences x value heads) at most the device's
    /// multiprocessors times `num / den`, or else a workspace of at most `max_blocks` (chunk,
    /// value head) blocks, bounded by (tokens / 64 + sequences) x value heads. (H200, session 6:
    /// with many pairs the split form was as fast as or faster than the fused kernel from 1 to
    /// 16 chunks a sequence, gdn and kda; the bound keeps its workspace, ~94 KB a block at
    /// K = V = 128, to ~1.5 GB.)
    ///
    /// `short`: where not 0, the fused form also wins (with more pairs than that limit) when every
    /// sequence is at most `short` tokens long (the longest known) and the final state is dense
    /// f32: the CUDA gdn fused T-form, which reads the inputs and the state once. (H200, session
    /// 15, same calls: gdn 16/32 256x64 0.890 ms against 1.159 for the split form, 8x64 0.042 /
    /// 0.057, 32x64 0.130 / 0.171, 1024x32 3.22 / 4.54, 512x64 1.74 / 2.35, gdn 4/8 256x64 0.241
    /// / 0.308; but 128x128 0.898 / 0.816: one chunk a sequence only.)
    SplitWins {
        num: u32,
        den: u32,
        max_blocks: u64,
        short: usize,
    },
    /// The complement of `SplitWins` with the same numbers: the fused form.
    FusedWins {
        num: u32,
        den: u32,
        max_blocks: u64,
        short: usize,
    },
}

/// One row: a promise of one kernel of one backend.
#[derive(Clone, Debug, PartialEq)]
pub struct Rule {
    pub id: &'static str,
    pub op: Op,
    pub mode: Mode,
    pub backend: BackendKind,
    pub kernel: Kernel,
    /// Lower wins in `auto`.
    pub priority: u8,
    pub precision: Precision,
    pub qkv_dtypes: &'static [DType],
    pub g_dtypes: &'static [DType],
    pub beta_dtypes: &'static [DType],
    pub out_dtypes: &'static [DType],
    pub state_dtypes: &'static [DType],
    pub layouts: &'static [StateLayout],
    pub head_k: DimRule,
    pub head_v: DimRule,
    /// Grouped value heads (HV > H).
    pub gva: bool,
    pub gates: GateRule,
    pub betas: &'static [BetaMode],
    pub l2norm: bool,
    pub pools: bool,
    pub checkpoints: CheckpointRule,
    /// Largest tokens per sequence (decode kernels), or `None`.
    pub max_seq_len: Option<usize>,
    pub needs: &'static [Need],
    /// Safe to launch inside CUDA graph capture (no host sync, no allocation).
    pub graph_safe: bool,
    pub auto_when: AutoWhen,
    pub note: &'static str,
}

/// Why a row was rejected, with the numbers that failed.
#[derive(Clone, Debug, PartialEq)]
pub enum Reject {
    /// The backend is not present on this machine.
    NoDevice {
        backend: BackendKind,
        reason: String,
    },
    /// The preference names another backend or kernel.
    NotRequested {
        wanted: String,
    },
    DType {
        role: &'static str,
        got: DType,
        allowed: &'static [DType],
    },
    Layout {
        got: StateLayout,
    },
    HeadDim {
        which: &'static str,
        got: usize,
        allowed: DimRule,
    },
    Gva {
        h: usize,
        hv: usize,
    },
    Gate {
        got: String,
        allowed: String,
    },
    Beta {
        got: BetaMode,
    },
    L2Norm,
    Pool,
    Checkpoints {
        every: usize,
        rule: CheckpointRule,
    },
    SeqLen {
        got: usize,
        max: usize,
    },
    Capability {
        need: Need,
        found: String,
    },
    /// `auto` only: another row is the faster choice for this shape.
    Heuristic(String),
}

impl fmt::Display for Reject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reject::NoDevice { backend, reason } => {
                let name = match backend {
                    BackendKind::Cuda => "CUDA",
                    BackendKind::Wgpu => "wgpu",
                    BackendKind::Cpu => "CPU",
                };
                write!(f, "no {name} device: {reason}")
            }
            Reject::NotRequested { wanted } => write!(f, "not requested (asked for {wanted})"),
            Reject::DType { role, got, allowed } => write!(
                f,
                "{role} dtype {got} not accepted: needs {}",
                if allowed.len() == 1 {
                    allowed[0].to_string()
                } else {
                    dtype_set(allowed)
                }
            ),
            Reject::Layout { got } => write!(f, "state layout {} not accepted", got.name()),
            Reject::HeadDim {
                which,
                got,
                allowed,
            } => write!(f, "head dim {which} = {got} not in {allowed}"),
            Reject::Gva { h, hv } => {
                write!(
                    f,
                    "grouped value heads (H = {h}, HV = {hv}) not supported: needs HV = H"
                )
            }
            Reject::Gate { got, allowed } => write!(f, "gate {got} not accepted: needs {allowed}"),
            Reject::Beta { got } => write!(f, "beta mode {} not computed in-kernel", got.name()),
            Reject::L2Norm => f.write_str("in-kernel q/k L2 norm not supported"),
            Reject::Pool => f.write_str("state pool with state_indices not supported"),
            Reject::Checkpoints { every, rule } => {
                write!(
                    f,
                    "checkpoints every {every} tokens not supported (accepts {rule})"
                )
            }
            Reject::SeqLen { got, max } => {
                write!(f, "a sequence of {got} tokens exceeds this kernel's {max}")
            }
            Reject::Capability { need, found } => {
                write!(f, "requires {need}, found {found}")
            }
            Reject::Heuristic(s) => write!(f, "auto: {s}"),
        }
    }
}

const QKV_ALL: &[DType] = &[DType::BF16, DType::F16, DType::F32];
const G_ALL: &[DType] = &[DType::F32, DType::BF16];
const OUT_ALL: &[DType] = &[DType::F32, DType::BF16, DType::F16];
const STATE_ALL: &[DType] = &[DType::F32, DType::BF16, DType::F16];
const LAYOUT_ALL: &[StateLayout] = &[StateLayout::Kv, StateLayout::Vk];
const BETA_ALL: &[BetaMode] = &[BetaMode::Prob, BetaMode::Logit, BetaMode::Logit2];
const DIM_REF: DimRule = DimRule::Range(16, 256);

/// The full contract of SPEC.md: every dtype, layout, head dim 16..=256, gate, beta and option.
/// Rows start from it and narrow what their kernels do not implement.
const SPEC_CONTRACT: Rule = Rule {
    id: "",
    op: Op::Gdn,
    mode: Mode::Prefill,
    backend: BackendKind::Cpu,
    kernel: Kernel::Reference,
    priority: 90,
    precision: Precision::Reference,
    qkv_dtypes: QKV_ALL,
    g_dtypes: G_ALL,
    beta_dtypes: G_ALL,
    out_dtypes: OUT_ALL,
    state_dtypes: STATE_ALL,
    layouts: LAYOUT_ALL,
    head_k: DIM_REF,
    head_v: DIM_REF,
    gva: true,
    gates: GateRule::ALL,
    betas: BETA_ALL,
    l2norm: true,
    pools: true,
    checkpoints: CheckpointRule::Any,
    max_seq_len: None,
    needs: &[],
    graph_safe: false,
    auto_when: AutoWhen::Always,
    note: "",
};

const fn cpu_rule(
    id: &'static str,
    op: Op,
    mode: Mode,
    kernel: Kernel,
    priority: u8,
    precision: Precision,
    auto_when: AutoWhen,
    note: &'static str,
) -> Rule {
    Rule {
        id,
        op,
        mode,
        kernel,
        priority,
        precision,
        auto_when,
        note,
        ..SPEC_CONTRACT
    }
}

/// The wgpu rows accept every option of SPEC.md (f32 arithmetic, any checkpoint interval, head
/// dims 16..=256); the kernels need 8 storage buffers per stage, 32 KiB of workgroup memory and
/// 256 invocations per workgroup (lavapipe and NVIDIA's Vulkan driver have them).
const fn wgpu_rule(
    id: &'static str,
    op: Op,
    mode: Mode,
    kernel: Kernel,
    note: &'static str,
) -> Rule {
    Rule {
        id,
        op,
        mode,
        backend: BackendKind::Wgpu,
        kernel,
        priority: 45,
        precision: Precision::F32,
        needs: WGPU_NEEDS,
        note,
        ..SPEC_CONTRACT
    }
}

const WGPU_NEEDS: &[Need] = &[
    Need::StorageBuffers(8),
    Need::WorkgroupStorage(32 << 10),
    Need::Invocations(256),
];

/// A wgpu row whose matrix products run on cooperative matrices (tensor cores): f16 operands, so
/// the tensor-core bound of SPEC.md section 9; K in {64, 128} and V a multiple of 32 (the
/// shaders' tiling); preferred by `auto` over the f32 rows where the adapter has them. `needs`:
/// the adapter limits of the op's stages.
const fn wgpu_coop_rule(
    id: &'static str,
    op: Op,
    needs: &'static [Need],
    note: &'static str,
) -> Rule {
    Rule {
        id,
        op,
        mode: Mode::Prefill,
        backend: BackendKind::Wgpu,
        kernel: Kernel::Coop,
        priority: 40,
        precision: Precision::Bf16,
        head_k: DimRule::OneOf(&[64, 128]),
        head_v: DimRule::OneOf(&[32, 64, 96, 128, 160, 192, 224, 256]),
        needs,
        note,
        ..SPEC_CONTRACT
    }
}

const WGPU_COOP_NEEDS: &[Need] = &[
    // the intra variant writes the f16 workspace as a ninth storage buffer
    Need::StorageBuffers(9),
    Need::WorkgroupStorage(32 << 10),
    Need::Invocations(256),
    Need::ShaderF16,
    Need::Subgroups,
    Need::CooperativeMatrix,
];

/// gdn's coop intra stage holds T, a source tile and an output tile in f16/f32 workgroup arrays
/// beside the f32 stage's: 48,144 bytes (shaders/gdn_intra_coop.wgsl, v6 of session 14; 48,656
/// before), within NVIDIA's 48 KiB.
const WGPU_COOP_GDN_NEEDS: &[Need] = &[
    Need::StorageBuffers(9),
    Need::WorkgroupStorage(48_144),
    Need::Invocations(256),
    Need::ShaderF16,
    Need::Subgroups,
    Need::CooperativeMatrix,
];

/// Head dims of the CUDA kernels (compile-time specialisations).
const DIM_CUDA: DimRule = DimRule::OneOf(&[32, 64, 128]);

/// A CUDA row: every option the kernels implement, bf16 tolerance, Hopper.
const fn cuda_rule(
    id: &'static str,
    op: Op,
    mode: Mode,
    kernel: Kernel,
    auto_when: AutoWhen,
    note: &'static str,
) -> Rule {
    Rule {
        id,
        op,
        mode,
        backend: BackendKind::Cuda,
        kernel,
        priority: 10,
        precision: Precision::Bf16,
        head_k: DIM_CUDA,
        head_v: DIM_CUDA,
        gates: GateRule::FAST,
        checkpoints: match mode {
            Mode::Prefill => CheckpointRule::MultipleOf(64),
            Mode::Decode => CheckpointRule::Any,
        },
        needs: &[Need::ComputeCapability(9, 0)],
        graph_safe: true,
        auto_when,
        note,
        ..SPEC_CONTRACT
    }
}

/// The table. Order is presentation only; `priority` decides `auto`.
pub static RULES: &[Rule] = &[
    cpu_rule(
        "cpu.gdn.prefill.chunked",
        Op::Gdn,
        Mode::Prefill,
        Kernel::Chunked,
        80,
        Precision::F32,
        AutoWhen::Never,
        "f32 chunked algorithm of SPEC.md section 5 with the GPU stage split; a cross-check, chosen only by name",
    ),
    cpu_rule(
        "cpu.gdn.prefill.chunked-f64",
        Op::Gdn,
        Mode::Prefill,
        Kernel::ChunkedF64,
        85,
        Precision::Reference,
        AutoWhen::Never,
        "f64 chunked algorithm: cross-checks the stage split against the recurrence, chosen only by name",
    ),
    cpu_rule(
        "cpu.gdn.prefill.reference",
        Op::Gdn,
        Mode::Prefill,
        Kernel::Reference,
        90,
        Precision::Reference,
        AutoWhen::Always,
        "float64 token recurrence: the executable spec, accepts every valid problem",
    ),
    cpu_rule(
        "cpu.gdn.decode.reference",
        Op::Gdn,
        Mode::Decode,
        Kernel::Reference,
        90,
        Precision::Reference,
        AutoWhen::Always,
        "float64 token recurrence, pool updated in place: accepts every valid problem",
    ),
    cpu_rule(
        "cpu.kda.prefill.chunked",
        Op::Kda,
        Mode::Prefill,
        Kernel::Chunked,
        80,
        Precision::F32,
        AutoWhen::Never,
        "f32 chunked algorithm of SPEC.md section 5 with the GPU stage split; a cross-check, chosen only by name",
    ),
    cpu_rule(
        "cpu.kda.prefill.chunked-f64",
        Op::Kda,
        Mode::Prefill,
        Kernel::ChunkedF64,
        85,
        Precision::Reference,
        AutoWhen::Never,
        "f64 chunked algorithm: cross-checks the stage split against the recurrence, chosen only by name",
    ),
    cpu_rule(
        "cpu.kda.prefill.reference",
        Op::Kda,
        Mode::Prefill,
        Kernel::Reference,
        90,
        Precision::Reference,
        AutoWhen::Always,
        "float64 token recurrence: the executable spec, accepts every valid problem",
    ),
    cpu_rule(
        "cpu.kda.decode.reference",
        Op::Kda,
        Mode::Decode,
        Kernel::Reference,
        90,
        Precision::Reference,
        AutoWhen::Always,
        "float64 token recurrence, pool updated in place: accepts every valid problem",
    ),
    // ---------------------------------------------------------------- wgpu rows (issue 3)
    wgpu_rule(
        "wgpu.gdn.prefill.chunked",
        Op::Gdn,
        Mode::Prefill,
        Kernel::Chunked,
        "WGSL chunked prefill in f32: chunk-parallel intra stage, state pass split over value \
         tiles, chunk-parallel output pass; bf16/f16 unpacked from u32 words in the shaders",
    ),
    wgpu_rule(
        "wgpu.gdn.decode.recurrent",
        Op::Gdn,
        Mode::Decode,
        Kernel::Recurrent,
        "WGSL token recurrence in f32, one workgroup per (sequence, value head, 32 columns), \
         pool updated in place",
    ),
    wgpu_rule(
        "wgpu.kda.prefill.chunked",
        Op::Kda,
        Mode::Prefill,
        Kernel::Chunked,
        "WGSL chunked prefill in f32, per-channel decay through 16-token reference points (the \
         exponential per element in the diagonal blocks; no exponent above 0, any gate); same \
         state and output passes as gdn",
    ),
    wgpu_coop_rule(
        "wgpu.gdn.prefill.coop",
        Op::Gdn,
        WGPU_COOP_GDN_NEEDS,
        "WGSL chunked prefill with its products on cooperative matrices (16x16x16, f16 operands, \
         f32 accumulation): the intra stage's K Kᵀ, Q Kᵀ, W and U, the state pass's W·S and \
         kdecᵀ·V_new and, folded into it, o = qdec·h + P·V_new; the running state, U and sums \
         in f32",
    ),
    wgpu_coop_rule(
        "wgpu.kda.prefill.coop",
        Op::Kda,
        WGPU_COOP_NEEDS,
        "WGSL chunked prefill of kda: the intra stage with W and U on cooperative matrices where \
         the adapter has 47,888 bytes of workgroup memory (in f32 with 32 KiB), then the \
         cooperative-matrix state pass (o folded in) of wgpu.gdn.prefill.coop",
    ),
    wgpu_rule(
        "wgpu.kda.decode.recurrent",
        Op::Kda,
        Mode::Decode,
        Kernel::Recurrent,
        "WGSL token recurrence in f32, per-channel decay, pool updated in place",
    ),
    // ---------------------------------------------------------------- cuda rows (issue 4)
    cuda_rule(
        "cuda.gdn.prefill.chunked",
        Op::Gdn,
        Mode::Prefill,
        Kernel::Chunked,
        AutoWhen::FusedWins { num: 1, den: 1, max_blocks: SPLIT_MAX_BLOCKS, short: FUSED_T_SHORT },
        "fused chunked prefill: one CTA per (sequence, value head), mma.sync bf16/f16 with f32 \
         accumulation, inverse and state in f32; bf16 operands of the state products; with a \
         dense f32 final state and K, V >= 64 the fused T-form (two CTAs an SM, the T-form intra \
         stage in shared memory, the state between chunks in the final-state row)",
    ),
    cuda_rule(
        "cuda.gdn.prefill.small-bh",
        Op::Gdn,
        Mode::Prefill,
        Kernel::SmallBh,
        AutoWhen::SplitWins { num: 1, den: 1, max_blocks: SPLIT_MAX_BLOCKS, short: FUSED_T_SHORT },
        "chunk-parallel intra kernel into a workspace, then a state pass over V tiles (wgmma, \
         64 columns, on sm_90a, for 16-bit inputs the T-form that builds W·S and U from the \
         inputs' k and v rows; else mma.sync, 16, 32 or 64 columns): for few (sequence x value \
         head) pairs, or any number while the workspace stays bounded",
    ),
    cuda_rule(
        "cuda.gdn.decode.recurrent",
        Op::Gdn,
        Mode::Decode,
        Kernel::Recurrent,
        AutoWhen::Always,
        "token recurrence in f32, V-split over (sequence, value head, 32 columns), in place on a \
         pool (index -1: zero state, nothing written)",
    ),
    cuda_rule(
        "cuda.kda.prefill.chunked",
        Op::Kda,
        Mode::Prefill,
        Kernel::Chunked,
        AutoWhen::FusedWins { num: 1, den: 1, max_blocks: SPLIT_MAX_BLOCKS, short: 0 },
        "fused chunked prefill; A and P in f32 on CUDA cores with 16-token reference points \
         (exact for unbounded softplus gates), the rest on mma.sync as gdn",
    ),
    cuda_rule(
        "cuda.kda.prefill.small-bh",
        Op::Kda,
        Mode::Prefill,
        Kernel::SmallBh,
        AutoWhen::SplitWins { num: 1, den: 1, max_blocks: SPLIT_MAX_BLOCKS, short: 0 },
        "chunk-parallel intra kernel into a workspace, then a state pass over V tiles (wgmma, \
         64 columns, on sm_90a; else mma.sync, 16, 32 or 64 columns): for few (sequence x value \
         head) pairs, or any number while the workspace stays bounded",
    ),
    cuda_rule(
        "cuda.kda.decode.recurrent",
        Op::Kda,
        Mode::Decode,
        Kernel::Recurrent,
        AutoWhen::Always,
        "token recurrence in f32, V-split over (sequence, value head, 32 columns), in place on a \
         pool (index -1: zero state, nothing written)",
    ),
];

/// What the caller asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Preference {
    /// The eligible row with the lowest priority number; the CPU reference is the last resort.
    Auto,
    /// Any row of this backend.
    Backend(BackendKind),
    /// Exactly this backend and kernel.
    Kernel(BackendKind, Kernel),
}

impl Preference {
    /// Parses `auto`, `cpu`, `wgpu`, `cuda`, or `backend:kernel` (`cuda:small-bh`,
    /// `cpu:chunked`, ...).
    pub fn parse(s: &str) -> Result<Preference> {
        let s = s.trim();
        if s == "auto" {
            return Ok(Preference::Auto);
        }
        let (b, k) = match s.split_once(':') {
            Some((b, k)) => (b, Some(k)),
            None => (s, None),
        };
        let backend = BackendKind::parse(b).ok_or_else(|| {
            Error::invalid(
                "backend",
                "auto, cpu, wgpu, cuda or backend:kernel (kernels: reference, chunked, \
                 chunked-f64, recurrent, small-bh)",
                s,
            )
        })?;
        match k {
            None => Ok(Preference::Backend(backend)),
            Some(k) => {
                let kernel = Kernel::parse(k).ok_or_else(|| {
                    Error::invalid(
                        "backend",
                        "a kernel name after ':' (reference, chunked, chunked-f64, recurrent, \
                         small-bh)",
                        s,
                    )
                })?;
                Ok(Preference::Kernel(backend, kernel))
            }
        }
    }
}

impl fmt::Display for Preference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Preference::Auto => f.write_str("auto"),
            Preference::Backend(b) => write!(f, "{b}"),
            Preference::Kernel(b, k) => write!(f, "{b}:{k}"),
        }
    }
}

/// A backend as the selection sees it: present with its capabilities, or absent with the reason.
#[derive(Clone, Debug)]
pub enum DeviceState {
    Available(Capabilities),
    Unavailable {
        backend: BackendKind,
        reason: String,
    },
}

impl DeviceState {
    pub fn backend(&self) -> BackendKind {
        match self {
            DeviceState::Available(c) => c.backend,
            DeviceState::Unavailable { backend, .. } => *backend,
        }
    }
}

/// The result of a selection: the chosen row (if any) and every row considered with its verdict.
#[derive(Clone, Debug)]
pub struct Selection {
    pub preference: Preference,
    pub chosen: Option<&'static Rule>,
    pub trace: Vec<(&'static Rule, std::result::Result<(), Vec<Reject>>)>,
}

impl Selection {
    /// The chosen row, or the documented error carrying every rejection.
    pub fn rule(&self) -> Result<&'static Rule> {
        self.chosen.ok_or_else(|| {
            let mut reasons: Vec<String> = self
                .trace
                .iter()
                .filter(|(r, _)| self.wanted(r))
                .flat_map(|(r, v)| match v {
                    Ok(()) => Vec::new(),
                    Err(rs) => rs.iter().map(|x| format!("  {}: {x}", r.id)).collect(),
                })
                .collect();
            if reasons.is_empty() {
                let ids: Vec<&str> = self.trace.iter().map(|(r, _)| r.id).collect();
                reasons.push(format!(
                    "  the table has no `{}` row for this op and mode (its rows: {})",
                    self.preference,
                    ids.join(", ")
                ));
            }
            Error::NoEligibleRule {
                choice: self.preference.to_string(),
                reasons,
            }
        })
    }

    fn wanted(&self, r: &Rule) -> bool {
        match self.preference {
            Preference::Auto => true,
            Preference::Backend(b) => r.backend == b,
            Preference::Kernel(b, k) => r.backend == b && r.kernel == k,
        }
    }

    /// The trace as text lines (`--explain`).
    pub fn explain(&self) -> Vec<String> {
        let mut out = Vec::new();
        for (r, v) in &self.trace {
            let mark = match (self.chosen.map(|c| c.id == r.id), v) {
                (Some(true), _) => "chosen  ".to_string(),
                (_, Ok(())) => "eligible".to_string(),
                (_, Err(_)) => "rejected".to_string(),
            };
            out.push(format!("{mark} {:<34} priority {:>3}", r.id, r.priority));
            if let Err(rs) = v {
                for x in rs {
                    out.push(format!("           - {x}"));
                }
            }
        }
        out
    }
}

/// Checks the problem against a row's contract (everything but the device and the preference).
pub fn contract_rejections(rule: &Rule, p: &Problem) -> Vec<Reject> {
    let mut out = Vec::new();
    let mut dt = |role: &'static str, got: DType, allowed: &'static [DType]| {
        if !allowed.contains(&got) {
            out.push(Reject::DType { role, got, allowed });
        }
    };
    dt("q/k/v", p.qkv_dtype, rule.qkv_dtypes);
    dt("g", p.g_dtype, rule.g_dtypes);
    dt("beta", p.beta_dtype, rule.beta_dtypes);
    dt("output", p.out_dtype, rule.out_dtypes);
    if p.initial != InitialState::None {
        dt("state", p.state_in_dtype, rule.state_dtypes);
    }
    if (p.final_state != FinalState::None || p.checkpoint_every.is_some())
        && !(p.initial != InitialState::None && p.state_in_dtype == p.state_out_dtype)
    {
        dt("state", p.state_out_dtype, rule.state_dtypes);
    }
    if !rule.layouts.contains(&p.layout) {
        out.push(Reject::Layout { got: p.layout });
    }
    if !rule.head_k.accepts(p.k) {
        out.push(Reject::HeadDim {
            which: "K",
            got: p.k,
            allowed: rule.head_k,
        });
    }
    if !rule.head_v.accepts(p.v) {
        out.push(Reject::HeadDim {
            which: "V",
            got: p.v,
            allowed: rule.head_v,
        });
    }
    if p.hv != p.h && !rule.gva {
        out.push(Reject::Gva { h: p.h, hv: p.hv });
    }
    let gate_ok = match p.gate {
        Gate::Log => rule.gates.log,
        Gate::Softplus => rule.gates.softplus,
        Gate::LowerBound(lb) => rule
            .gates
            .lower_bound
            .is_some_and(|(lo, hi)| lb >= lo && lb < hi),
    };
    if !gate_ok {
        out.push(Reject::Gate {
            got: p.gate.name(),
            allowed: rule.gates.describe(),
        });
    }
    if !rule.betas.contains(&p.beta) {
        out.push(Reject::Beta { got: p.beta });
    }
    if p.l2norm && !rule.l2norm {
        out.push(Reject::L2Norm);
    }
    if matches!(p.initial, InitialState::Pool { .. }) && !rule.pools {
        out.push(Reject::Pool);
    }
    if let Some(every) = p.checkpoint_every {
        let ok = match rule.checkpoints {
            CheckpointRule::None => false,
            CheckpointRule::Any => true,
            CheckpointRule::MultipleOf(m) => every % m == 0,
        };
        if !ok {
            out.push(Reject::Checkpoints {
                every,
                rule: rule.checkpoints,
            });
        }
    }
    out
}

/// Checks a row's device needs against the capabilities found.
pub fn device_rejections(rule: &Rule, caps: &Capabilities) -> Vec<Reject> {
    let mut out = Vec::new();
    for &need in rule.needs {
        let (ok, found) = match need {
            Need::ComputeCapability(a, b) => match caps.compute_capability {
                Some((x, y)) => ((x, y) >= (a, b), format!("{x}.{y}")),
                None => (false, "no compute capability".into()),
            },
            Need::WorkgroupStorage(bytes) => (
                caps.max_workgroup_storage >= bytes,
                format!("{} KiB", caps.max_workgroup_storage / 1024),
            ),
            Need::StorageBuffers(n) => (
                caps.max_storage_buffers_per_stage >= n,
                caps.max_storage_buffers_per_stage.to_string(),
            ),
            Need::Invocations(n) => (
                caps.max_invocations_per_workgroup >= n,
                caps.max_invocations_per_workgroup.to_string(),
            ),
            Need::Subgroups => (caps.subgroups, "no subgroups".into()),
            Need::ShaderF16 => (caps.shader_f16, "no shader f16".into()),
            Need::CooperativeMatrix => (
                caps.cooperative_matrix,
                "none usable (not offered, no 16x16x16 f16->f32 configuration, subgroups not 32 \
                 wide, or DELTARULE_WGPU_COOP=0)"
                    .into(),
            ),
        };
        if !ok {
            out.push(Reject::Capability { need, found });
        }
    }
    out
}

/// Workspace blocks of the split prefill form, at most: one per (64-token chunk, value head),
/// (tokens / 64 + sequences) x value heads (each sequence ends in at most one partial chunk).
fn split_blocks(p: &Problem) -> u64 {
    ((p.tokens / 64 + p.seqs) * p.hv) as u64
}

/// `max_blocks` of the CUDA split/fused rows (16 Ki blocks: gdn 16/32 at 32 K tokens).
const SPLIT_MAX_BLOCKS: u64 = 16384;

/// `short` of the CUDA gdn split/fused rows: one chunk a sequence.
const FUSED_T_SHORT: usize = 64;

/// Whether the fused form wins by `short` (see [`AutoWhen::SplitWins`]): more pairs than
/// `limit`, every sequence at most `short` tokens (`max_seq` known), K and V of at least 64 and
/// a dense f32 final state (the fused T-form's domain).
fn short_fused(p: &Problem, short: usize, pairs: u64, limit: u64, max_seq: Option<usize>) -> bool {
    short > 0
        && pairs > limit
        && max_seq.is_some_and(|m| m <= short)
        && p.k >= 64
        && p.v >= 64
        && p.final_state == crate::FinalState::Dense
        && p.state_out_dtype == crate::DType::F32
}

/// Longest sequence of a problem, needed by rows with `max_seq_len`.
fn auto_rejection(
    rule: &Rule,
    p: &Problem,
    caps: &Capabilities,
    max_seq: Option<usize>,
) -> Option<Reject> {
    let pairs = (p.seqs * p.hv) as u64;
    let sms = caps.multiprocessors.unwrap_or(1) as u64;
    match rule.auto_when {
        AutoWhen::Always => None,
        AutoWhen::Never => Some(Reject::Heuristic(
            "explicit choice only (a cross-check path, never picked by auto)".into(),
        )),
        AutoWhen::SplitWins {
            num,
            den,
            max_blocks,
            short,
        } => {
            let limit = sms * num as u64 / den as u64;
            let blocks = split_blocks(p);
            if short_fused(p, short, pairs, limit, max_seq) {
                return Some(Reject::Heuristic(format!(
                    "{pairs} (sequence x value head) pairs > {limit} and every sequence at most \
                     {short} tokens with a dense f32 final state: the fused T-form reads the \
                     inputs and the state once"
                )));
            }
            (pairs > limit && blocks > max_blocks).then(|| {
                Reject::Heuristic(format!(
                    "{pairs} (sequence x value head) pairs > {limit} ({num}/{den} of {sms} \
                     multiprocessors) and up to {blocks} workspace blocks > {max_blocks}: the \
                     fused kernel needs no workspace"
                ))
            })
        }
        AutoWhen::FusedWins {
            num,
            den,
            max_blocks,
            short,
        } => {
            let limit = sms * num as u64 / den as u64;
            let blocks = split_blocks(p);
            if short_fused(p, short, pairs, limit, max_seq) {
                return None;
            }
            (pairs <= limit || blocks <= max_blocks).then(|| {
                Reject::Heuristic(if pairs <= limit {
                    format!(
                        "{pairs} (sequence x value head) pairs <= {limit} ({num}/{den} of {sms} \
                         multiprocessors): too few to fill the device"
                    )
                } else {
                    format!(
                        "up to {blocks} workspace blocks <= {max_blocks}: the split form is faster"
                    )
                })
            })
        }
    }
}

/// Picks a row for `p` given the devices present and the preference. Pure and deterministic:
/// rows are tried in (priority, id) order. `max_seq` is the longest sequence of the problem when
/// known (decode kernels bound it).
pub fn select(
    p: &Problem,
    devices: &[DeviceState],
    pref: Preference,
    max_seq: Option<usize>,
) -> Selection {
    let mut rows: Vec<&'static Rule> = RULES
        .iter()
        .filter(|r| r.op == p.op && r.mode == p.mode)
        .collect();
    rows.sort_by(|a, b| (a.priority, a.id).cmp(&(b.priority, b.id)));
    let mut trace = Vec::new();
    let mut chosen = None;
    for r in rows {
        let mut rejects = Vec::new();
        let requested = match pref {
            Preference::Auto => true,
            Preference::Backend(b) => r.backend == b,
            Preference::Kernel(b, k) => r.backend == b && r.kernel == k,
        };
        if !requested {
            rejects.push(Reject::NotRequested {
                wanted: pref.to_string(),
            });
        }
        let device = devices.iter().find(|d| d.backend() == r.backend);
        let caps = match device {
            Some(DeviceState::Available(c)) => Some(c),
            Some(DeviceState::Unavailable { backend, reason }) => {
                rejects.push(Reject::NoDevice {
                    backend: *backend,
                    reason: reason.clone(),
                });
                None
            }
            None => {
                rejects.push(Reject::NoDevice {
                    backend: r.backend,
                    reason: "not probed (this choice does not need it, or it is not compiled in)"
                        .into(),
                });
                None
            }
        };
        rejects.extend(contract_rejections(r, p));
        if let (Some(max), Some(seq)) = (r.max_seq_len, max_seq) {
            if seq > max {
                rejects.push(Reject::SeqLen { got: seq, max });
            }
        }
        if let Some(c) = caps {
            rejects.extend(device_rejections(r, c));
            if pref == Preference::Auto || matches!(pref, Preference::Backend(_)) {
                if let Some(h) = auto_rejection(r, p, c, max_seq) {
                    rejects.push(h);
                }
            }
        }
        let verdict = if rejects.is_empty() {
            if chosen.is_none() {
                chosen = Some(r);
            }
            Ok(())
        } else {
            Err(rejects)
        };
        trace.push((r, verdict));
    }
    Selection {
        preference: pref,
        chosen,
        trace,
    }
}

/// Renders the table (the snapshot `tests/golden/rules.txt` and `deltarule rules`).
pub fn render_rules() -> String {
    let mut out = String::new();
    out.push_str(
        "id | op | mode | backend:kernel | prio | precision | q/k/v | g | beta | out | state | \
         layouts | K | V | gva | gates | betas | l2norm | pool | ckpt | max len | needs | graph | \
         auto | note\n",
    );
    for r in RULES {
        let layouts: Vec<&str> = r.layouts.iter().map(|l| l.name()).collect();
        let betas: Vec<&str> = r.betas.iter().map(|b| b.name()).collect();
        let needs: Vec<String> = r.needs.iter().map(|n| n.to_string()).collect();
        let auto = match r.auto_when {
            AutoWhen::Always => "always".to_string(),
            AutoWhen::Never => "explicit only".to_string(),
            AutoWhen::SplitWins {
                num,
                den,
                max_blocks,
                short,
            } => {
                let s = if short > 0 {
                    format!(", unless every sequence <= {short} (dense f32 final)")
                } else {
                    String::new()
                };
                format!("pairs <= {num}/{den} SMs or blocks <= {max_blocks}{s}")
            }
            AutoWhen::FusedWins {
                num,
                den,
                max_blocks,
                short,
            } => {
                let s = if short > 0 {
                    format!(", or pairs > {num}/{den} SMs and every sequence <= {short} (dense f32 final)")
                } else {
                    String::new()
                };
                format!("pairs > {num}/{den} SMs and blocks > {max_blocks}{s}")
            }
        };
        out.push_str(&format!(
            "{} | {} | {} | {}:{} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | \
             {} | {} | {} | {} | {} | {} | {} | {}\n",
            r.id,
            r.op.name(),
            r.mode.name(),
            r.backend,
            r.kernel,
            r.priority,
            r.precision,
            dtype_set(r.qkv_dtypes),
            dtype_set(r.g_dtypes),
            dtype_set(r.beta_dtypes),
            dtype_set(r.out_dtypes),
            dtype_set(r.state_dtypes),
            layouts.join("/"),
            r.head_k,
            r.head_v,
            yn(r.gva),
            r.gates.describe(),
            betas.join("/"),
            yn(r.l2norm),
            yn(r.pools),
            r.checkpoints,
            r.max_seq_len.map(|m| m.to_string()).unwrap_or_else(|| "-".into()),
            if needs.is_empty() { "-".into() } else { needs.join(", ") },
            yn(r.graph_safe),
            auto,
            r.note
        ));
    }
    out
}

fn yn(b: bool) -> &'static str {
    if b {
        "yes"
    } else {
        "no"
    }
}

/// The README table: which kernel accepts which dtypes, state dtypes, layouts, head dims and
/// devices, one row per rule, generated from [`RULES`] (a test keeps the README in sync).
pub fn render_markdown() -> String {
    let mut out = String::from(
        "| backend:kernel | op | mode | q/k/v | state dtypes | layouts | K | V | GVA | gates | pool | checkpoints | device | graph-safe | priority | auto picks it |\n\
         | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n",
    );
    for r in RULES {
        let layouts: Vec<&str> = r.layouts.iter().map(|l| l.name()).collect();
        let needs: Vec<String> = r.needs.iter().map(|n| n.to_string()).collect();
        let device = if needs.is_empty() {
            r.backend.name().to_string()
        } else {
            format!("{} ({})", r.backend.name(), needs.join(", "))
        };
        let dts = |d: &[DType]| d.iter().map(|x| x.name()).collect::<Vec<_>>().join(", ");
        out.push_str(&format!(
            "| `{}:{}` | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
            r.backend,
            r.kernel,
            r.op.name(),
            r.mode.name(),
            dts(r.qkv_dtypes),
            dts(r.state_dtypes),
            layouts.join(", "),
            r.head_k,
            r.head_v,
            yn(r.gva),
            r.gates.describe(),
            yn(r.pools),
            r.checkpoints,
            device,
            yn(r.graph_safe),
            r.priority,
            auto_text(r.auto_when)
        ));
    }
    out
}

fn auto_text(a: AutoWhen) -> String {
    match a {
        AutoWhen::Always => "when eligible".into(),
        AutoWhen::Never => "never (by name only)".into(),
        AutoWhen::SplitWins {
            num,
            den,
            max_blocks,
            short,
        } => format!(
            "sequences x value heads <= {num}/{den} x SMs, or (tokens / 64 + sequences) x value \
             heads <= {max_blocks}{}",
            if short > 0 {
                format!(
                    ", unless every sequence is at most {short} tokens (K, V >= 64, dense f32 \
                     final state)"
                )
            } else {
                String::new()
            }
        ),
        AutoWhen::FusedWins {
            num,
            den,
            max_blocks,
            short,
        } => format!(
            "sequences x value heads > {num}/{den} x SMs and (tokens / 64 + sequences) x value \
             heads > {max_blocks}{}",
            if short > 0 {
                format!(
                    "; or more pairs than that and every sequence at most {short} tokens (K, V \
                     >= 64, dense f32 final state)"
                )
            } else {
                String::new()
            }
        ),
    }
}

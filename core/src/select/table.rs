//! The rule table: one row per promise of one kernel of one backend. Each backend's `chunked` is
//! its own algorithm, and its rows say which: the CPU runs the chunked algorithm of docs/spec.md
//! section 5 in the GPU kernels' two stages (a cross-check, by name only); wgpu runs it split into
//! three passes over a workspace; CUDA runs it fused, one CTA per (sequence, value head) walking
//! its chunks, and offers the split form as `small-bh`. The CPU's `segmented` rows run the exact
//! segment-parallel prefill of docs/segments.md (a cross-check, by name only).

use super::vocabulary::{AutoWhen, CheckpointRule, DimRule, GateRule, Need, Rule, SplitBound};
use crate::backend::Kernel;
use crate::caps::BackendKind;
use crate::dtype::DType;
use crate::problem::{BetaMode, Mode, Op, StateLayout};
use crate::tolerance::Precision;

const QKV_ALL: &[DType] = &[DType::BF16, DType::F16, DType::F32];
const G_ALL: &[DType] = &[DType::F32, DType::BF16];
const OUT_ALL: &[DType] = &[DType::F32, DType::BF16, DType::F16];
const STATE_ALL: &[DType] = &[DType::F32, DType::BF16, DType::F16];
const LAYOUT_ALL: &[StateLayout] = &[StateLayout::Kv, StateLayout::Vk];
const BETA_ALL: &[BetaMode] = &[BetaMode::Prob, BetaMode::Logit, BetaMode::Logit2];
const DIM_REF: DimRule = DimRule::Range(16, 256);

/// The full contract of docs/spec.md: every dtype, layout, head dim 16..=256, gate, beta and
/// option. Rows start from it and narrow what their kernels do not implement.
const FULL_CONTRACT: Rule = Rule {
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

/// A row with the full contract; the constructors below narrow it.
const fn row(
    id: &'static str,
    op: Op,
    mode: Mode,
    backend: BackendKind,
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
        backend,
        kernel,
        priority,
        precision,
        auto_when,
        note,
        ..FULL_CONTRACT
    }
}

/// The wgpu rows accept every option of docs/spec.md (f32 arithmetic, any checkpoint interval, head
/// dims 16..=256); the kernels need 8 storage buffers per stage, 32 KiB of workgroup memory and
/// 256 invocations per workgroup (lavapipe and NVIDIA's Vulkan driver have them).
const fn wgpu_rule(
    id: &'static str,
    op: Op,
    mode: Mode,
    kernel: Kernel,
    note: &'static str,
) -> Rule {
    let base = row(
        id,
        op,
        mode,
        BackendKind::Wgpu,
        kernel,
        45,
        Precision::F32,
        AutoWhen::Always,
        note,
    );
    Rule {
        needs: WGPU_NEEDS,
        ..base
    }
}

const WGPU_NEEDS: &[Need] = &[
    Need::StorageBuffers(8),
    Need::WorkgroupStorage(32 << 10),
    Need::Invocations(256),
];

/// A wgpu row whose matrix products run on cooperative matrices (tensor cores): f16 operands, so
/// the tensor-core bound of docs/spec.md section 9; K in {64, 128} and V a multiple of 32 (the
/// shaders' tiling); preferred by `auto` over the f32 rows where the adapter has them. `needs`:
/// the adapter limits of the op's stages.
const fn wgpu_coop_rule(
    id: &'static str,
    op: Op,
    needs: &'static [Need],
    note: &'static str,
) -> Rule {
    let base = row(
        id,
        op,
        Mode::Prefill,
        BackendKind::Wgpu,
        Kernel::Coop,
        40,
        Precision::Bf16,
        AutoWhen::Always,
        note,
    );
    Rule {
        head_k: DimRule::OneOf(&[64, 128]),
        head_v: DimRule::OneOf(&[32, 64, 96, 128, 160, 192, 224, 256]),
        needs,
        ..base
    }
}

/// The adapter limits of a coop row whose intra stage holds `workgroup_bytes` of workgroup
/// memory; the intra stage writes the f16 workspace as a ninth storage buffer.
const fn wgpu_coop_needs(workgroup_bytes: u32) -> [Need; 6] {
    [
        Need::StorageBuffers(9),
        Need::WorkgroupStorage(workgroup_bytes),
        Need::Invocations(256),
        Need::ShaderF16,
        Need::Subgroups,
        Need::CooperativeMatrix,
    ]
}

/// kda's coop stages fit the 32 KiB every wgpu row needs.
const WGPU_COOP_KDA_NEEDS: &[Need] = &wgpu_coop_needs(32 << 10);

/// gdn's coop intra stage holds T, a source tile and an output tile in f16/f32 workgroup arrays
/// beside the f32 stage's: 48,144 bytes, within NVIDIA's 48 KiB.
const WGPU_COOP_GDN_NEEDS: &[Need] = &wgpu_coop_needs(48_144);

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
    let base = row(
        id,
        op,
        mode,
        BackendKind::Cuda,
        kernel,
        10,
        Precision::Bf16,
        auto_when,
        note,
    );
    Rule {
        head_k: DIM_CUDA,
        head_v: DIM_CUDA,
        gates: GateRule::FAST,
        checkpoints: match mode {
            Mode::Prefill => CheckpointRule::MultipleOf(64),
            Mode::Decode => CheckpointRule::Any,
        },
        needs: &[Need::ComputeCapability(9, 0)],
        graph_safe: true,
        ..base
    }
}

/// The CUDA decode rows: the token recurrence.
const fn cuda_recurrent(id: &'static str, op: Op) -> Rule {
    cuda_rule(
        id,
        op,
        Mode::Decode,
        Kernel::Recurrent,
        AutoWhen::Always,
        "token recurrence in f32, V-split over (sequence, value head, 32 columns), in place on a \
         pool (index -1: zero state, nothing written)",
    )
}

/// The CPU `chunked` rows: the chunked algorithm in the two stages the GPU kernels use, in f32.
const fn cpu_chunked(id: &'static str, op: Op) -> Rule {
    row(
        id,
        op,
        Mode::Prefill,
        BackendKind::Cpu,
        Kernel::Chunked,
        80,
        Precision::F32,
        AutoWhen::Never,
        "the chunked algorithm of docs/spec.md section 5 in f32, in the two stages of the GPU \
         kernels (a chunk-parallel intra stage, then a state pass over the chunks); a \
         cross-check, chosen only by name",
    )
}

/// The CPU `chunked-f64` rows: the same stages in f64.
const fn cpu_chunked_f64(id: &'static str, op: Op) -> Rule {
    row(
        id,
        op,
        Mode::Prefill,
        BackendKind::Cpu,
        Kernel::ChunkedF64,
        85,
        Precision::Reference,
        AutoWhen::Never,
        "the stages of cpu:chunked in f64: cross-checks the stage split against the recurrence, \
         chosen only by name",
    )
}

/// The CPU `segmented` rows: the exact segment-parallel prefill of docs/segments.md in f64. The
/// segment length is the CPU backend's (64 tokens, or `DELTARULE_CPU_SEGMENT_LEN`); the table
/// reads no variable.
const fn cpu_segmented(id: &'static str, op: Op) -> Rule {
    row(
        id,
        op,
        Mode::Prefill,
        BackendKind::Cpu,
        Kernel::Segmented,
        86,
        Precision::Reference,
        AutoWhen::Never,
        "exact segmented prefill in f64: each sequence cut into segments of \
         DELTARULE_CPU_SEGMENT_LEN tokens (default 64), per-segment summaries (transition K x K, \
         zero-start state K x V) combined along the sequence, outputs from each segment's true \
         incoming state (docs/segments.md); a cross-check, chosen only by name",
    )
}

/// The float64 reference rows: the universal last resort of `auto`.
const fn cpu_reference(id: &'static str, op: Op, mode: Mode) -> Rule {
    row(
        id,
        op,
        mode,
        BackendKind::Cpu,
        Kernel::Reference,
        90,
        Precision::Reference,
        AutoWhen::Always,
        match mode {
            Mode::Prefill => {
                "float64 token recurrence: the executable spec, accepts every valid problem"
            }
            Mode::Decode => {
                "float64 token recurrence, pool updated in place: accepts every valid problem"
            }
        },
    )
}

/// The bound between the CUDA split (`small-bh`) and fused (`chunked`) gdn prefills: as many
/// pairs as SMs, 16 Ki workspace blocks (gdn 16/32 at 32 K tokens), and one-chunk sequences to
/// the fused T-form.
const CUDA_GDN_SPLIT: SplitBound = SplitBound {
    num: 1,
    den: 1,
    max_blocks: 16384,
    short: 64,
    chain_blocks: 65536,
};

/// kda's bound: gdn's, with no fused T-form.
const CUDA_KDA_SPLIT: SplitBound = SplitBound {
    short: 0,
    ..CUDA_GDN_SPLIT
};

/// The table. Order is presentation only; `priority` decides `auto`.
pub static RULES: &[Rule] = &[
    cpu_chunked("cpu.gdn.prefill.chunked", Op::Gdn),
    cpu_chunked_f64("cpu.gdn.prefill.chunked-f64", Op::Gdn),
    cpu_segmented("cpu.gdn.prefill.segmented", Op::Gdn),
    cpu_reference("cpu.gdn.prefill.reference", Op::Gdn, Mode::Prefill),
    cpu_reference("cpu.gdn.decode.reference", Op::Gdn, Mode::Decode),
    cpu_chunked("cpu.kda.prefill.chunked", Op::Kda),
    cpu_chunked_f64("cpu.kda.prefill.chunked-f64", Op::Kda),
    cpu_segmented("cpu.kda.prefill.segmented", Op::Kda),
    cpu_reference("cpu.kda.prefill.reference", Op::Kda, Mode::Prefill),
    cpu_reference("cpu.kda.decode.reference", Op::Kda, Mode::Decode),
    // ---------------------------------------------------------------- wgpu rows
    wgpu_rule(
        "wgpu.gdn.prefill.chunked",
        Op::Gdn,
        Mode::Prefill,
        Kernel::Chunked,
        "split chunked prefill in f32 (WGSL), three passes: a chunk-parallel intra stage into a \
         workspace, a state pass split over value tiles, a chunk-parallel output pass; bf16/f16 \
         unpacked from u32 words in the shaders",
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
        "split chunked prefill in f32 (WGSL), the three passes of wgpu.gdn.prefill.chunked; \
         per-channel decay through 16-token reference points (the exponential per element in the \
         diagonal blocks; no exponent above 0, any gate)",
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
        WGPU_COOP_KDA_NEEDS,
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
    // ---------------------------------------------------------------- cuda rows
    cuda_rule(
        "cuda.gdn.prefill.chunked",
        Op::Gdn,
        Mode::Prefill,
        Kernel::Chunked,
        AutoWhen::FusedWins(CUDA_GDN_SPLIT),
        "fused chunked prefill: one CTA per (sequence, value head) walks its 64-token chunks, no \
         workspace; mma.sync bf16/f16 with f32 accumulation, inverse and state in f32; bf16 \
         operands of the state products; with a dense f32 final state and K, V >= 64 the fused \
         T-form (two CTAs an SM, the T-form intra stage in shared memory, the state between \
         chunks in the final-state row)",
    ),
    cuda_rule(
        "cuda.gdn.prefill.small-bh",
        Op::Gdn,
        Mode::Prefill,
        Kernel::SmallBh,
        AutoWhen::SplitWins(CUDA_GDN_SPLIT),
        "split chunked prefill: a chunk-parallel intra kernel writes every chunk's products into \
         a workspace, then a state pass walks the chunks over V tiles (wgmma, 64 columns, on \
         sm_90a, for 16-bit inputs the T-form pair, whose intra kernel keeps T_w and T_u and whose \
         state pass builds W·S and U from the inputs' k and v rows; else mma.sync, 16, 32 or 64 \
         columns): for few (sequence x value head) pairs, or any number while the workspace \
         stays bounded",
    ),
    cuda_recurrent("cuda.gdn.decode.recurrent", Op::Gdn),
    cuda_rule(
        "cuda.kda.prefill.chunked",
        Op::Kda,
        Mode::Prefill,
        Kernel::Chunked,
        AutoWhen::FusedWins(CUDA_KDA_SPLIT),
        "fused chunked prefill as gdn's classic kernel (one CTA per (sequence, value head), no \
         workspace); A and P in f32 on CUDA cores with 16-token reference points (exact for \
         unbounded softplus gates), the rest on mma.sync as gdn",
    ),
    cuda_rule(
        "cuda.kda.prefill.small-bh",
        Op::Kda,
        Mode::Prefill,
        Kernel::SmallBh,
        AutoWhen::SplitWins(CUDA_KDA_SPLIT),
        "split chunked prefill: a chunk-parallel intra kernel writes every chunk's products into \
         a workspace, then a state pass walks the chunks over V tiles (wgmma, 64 columns, on \
         sm_90a; else mma.sync, 16, 32 or 64 columns): for few (sequence x value head) pairs, or \
         any number while the workspace stays bounded",
    ),
    cuda_recurrent("cuda.kda.decode.recurrent", Op::Kda),
];

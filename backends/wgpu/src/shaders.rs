//! The WGSL registry (STYLE.md section 5): one enum entry per stage file in `shaders/`, each
//! embedded with `include_str!` and prefixed by the shared preludes (`common.wgsl` for every stage,
//! `inputs.wgsl` for the stages reading the call's inputs) in [`Shader::source`], the one function
//! both the runtime and the validation test use.

/// The prelude concatenated in front of every stage (no bindings, only `Params` and helpers).
pub const PRELUDE_FILE: &str = "common.wgsl";
const PRELUDE: &str = include_str!("../../../shaders/common.wgsl");
/// The prelude of the stages that read q/k/v, g and beta (their bindings 0-6 and loaders).
pub const INPUTS_FILE: &str = "inputs.wgsl";
const INPUTS: &str = include_str!("../../../shaders/inputs.wgsl");
/// The prelude of the two intra stages (workspace bindings, the T solve, the W/U writer).
pub const INTRA_FILE: &str = "intra.wgsl";
const INTRA: &str = include_str!("../../../shaders/intra.wgsl");
/// The last prelude of the f32 intra stages (no f16 workspace) and of their coop variants (Wᵀ and
/// kdec as f16 into a ninth storage buffer).
pub const WS16_OFF_FILE: &str = "ws16_off.wgsl";
const WS16_OFF: &str = include_str!("../../../shaders/ws16_off.wgsl");
pub const WS16_ON_FILE: &str = "ws16_on.wgsl";
const WS16_ON: &str = include_str!("../../../shaders/ws16_on.wgsl");
/// The f16 workspace prelude of the `coop` kernel's gdn intra stage (a cooperative-matrix module:
/// f16 elements; ws16_on.wgsl packs words for the kda variant, which is not one).
pub const WS16_GDN_FILE: &str = "ws16_gdn.wgsl";
const WS16_GDN: &str = include_str!("../../../shaders/ws16_gdn.wgsl");
/// The last prelude of the gdn intra stage: its steps 2 (K Kᵀ, Q Kᵀ) and 4 (W, U, qdec) with f32
/// register tiles, or on cooperative matrices in the `coop` kernel's variant.
pub const GDN_INTRA_F32_FILE: &str = "gdn_intra_f32.wgsl";
const GDN_INTRA_F32: &str = include_str!("../../../shaders/gdn_intra_f32.wgsl");
pub const GDN_INTRA_COOP_FILE: &str = "gdn_intra_coop.wgsl";
const GDN_INTRA_COOP: &str = include_str!("../../../shaders/gdn_intra_coop.wgsl");
/// The last prelude of the `coop` kernel's kda intra stage on adapters with 48 KiB of workgroup
/// memory: its f16 workspace and step 4 on cooperative matrices (instead of ws16_on.wgsl).
pub const KDA_INTRA_COOP_FILE: &str = "kda_intra_coop.wgsl";
const KDA_INTRA_COOP: &str = include_str!("../../../shaders/kda_intra_coop.wgsl");
/// The prelude of the two state-pass stages (bindings, state loaders and writers, staging spans).
pub const STATE_FILE: &str = "state.wgsl";
const STATE: &str = include_str!("../../../shaders/state.wgsl");
/// The prelude of the output-pass stage (bindings and the writer of o).
pub const OUTPUT_FILE: &str = "output.wgsl";
const OUTPUT: &str = include_str!("../../../shaders/output.wgsl");
/// The directives in front of the cooperative-matrix stages (before any prelude: WGSL wants
/// `enable` first). Those stages need `Features::SHADER_F16` and
/// `Features::EXPERIMENTAL_COOPERATIVE_MATRIX` (see `device::Gpu::coop`).
pub const COOP_DIRECTIVES: &str = "enable f16;\nenable wgpu_cooperative_matrix;\n";
/// The directive in front of the kda coop intra variant (f16 workspace, no matrices).
pub const F16_DIRECTIVE: &str = "enable f16;\n";

/// One WGSL stage file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Shader {
    /// gdn prefill, chunk-parallel intra stage (Γ, A, T, W, U, P, decayed q/k).
    GdnPrefillIntra,
    /// kda prefill, chunk-parallel intra stage (per-channel Γ).
    KdaPrefillIntra,
    /// The gdn intra stage of the `coop` kernel: Wᵀ, kdec, qdecᵀ and Pᵀ as f16 (ws16_gdn.wgsl),
    /// steps 2 and 4 on cooperative matrices (gdn_intra_coop.wgsl).
    GdnPrefillIntraCoop,
    /// The kda intra stage of the `coop` kernel: W, kdecᵀ, qdec and P as f16 (ws16_on.wgsl), its
    /// products in f32 (32 KiB of workgroup memory: lavapipe, where CI emulates the kernel).
    KdaPrefillIntraCoop,
    /// The same stage with step 4 (W, U) on cooperative matrices (kda_intra_coop.wgsl; 47,888
    /// bytes of workgroup memory), where the adapter has the memory (session 14).
    KdaPrefillIntraMma,
    /// Sequential state pass over chunks, split over value tiles (gdn and kda).
    PrefillState,
    /// The same pass with its two products on cooperative matrices (f16 operands, f32
    /// accumulation; the `coop` kernel), by default with o's products folded in (`FUSE_O`).
    PrefillStateCoop,
    /// Chunk-parallel output pass (gdn and kda).
    PrefillOutput,
    /// The output pass on cooperative matrices over f16 operands in ws16 (the `coop` kernel with
    /// `DELTARULE_WGPU_FUSE_O=0`).
    PrefillOutputCoop,

    /// Token recurrence for decode (gdn and kda by the `IS_KDA` override).
    Decode,
    /// f32 to bf16/f16 packing of outputs and pool rows.
    Pack16,
}

impl Shader {
    pub const ALL: [Shader; 11] = [
        Shader::GdnPrefillIntra,
        Shader::KdaPrefillIntra,
        Shader::GdnPrefillIntraCoop,
        Shader::KdaPrefillIntraCoop,
        Shader::KdaPrefillIntraMma,
        Shader::PrefillState,
        Shader::PrefillStateCoop,
        Shader::PrefillOutput,
        Shader::PrefillOutputCoop,
        Shader::Decode,
        Shader::Pack16,
    ];

    pub fn file_name(self) -> &'static str {
        match self {
            Shader::GdnPrefillIntra | Shader::GdnPrefillIntraCoop => "gdn_prefill_intra.wgsl",
            Shader::KdaPrefillIntra | Shader::KdaPrefillIntraCoop | Shader::KdaPrefillIntraMma => {
                "kda_prefill_intra.wgsl"
            }
            Shader::PrefillState => "prefill_state.wgsl",
            Shader::PrefillStateCoop => "prefill_state_coop.wgsl",
            Shader::PrefillOutput => "prefill_output.wgsl",
            Shader::PrefillOutputCoop => "prefill_output_coop.wgsl",
            Shader::Decode => "decode.wgsl",
            Shader::Pack16 => "pack16.wgsl",
        }
    }

    fn stage_source(self) -> &'static str {
        match self {
            Shader::GdnPrefillIntra | Shader::GdnPrefillIntraCoop => {
                include_str!("../../../shaders/gdn_prefill_intra.wgsl")
            }
            Shader::KdaPrefillIntra | Shader::KdaPrefillIntraCoop | Shader::KdaPrefillIntraMma => {
                include_str!("../../../shaders/kda_prefill_intra.wgsl")
            }
            Shader::PrefillState => include_str!("../../../shaders/prefill_state.wgsl"),
            Shader::PrefillStateCoop => {
                include_str!("../../../shaders/prefill_state_coop.wgsl")
            }
            Shader::PrefillOutput => include_str!("../../../shaders/prefill_output.wgsl"),
            Shader::PrefillOutputCoop => {
                include_str!("../../../shaders/prefill_output_coop.wgsl")
            }
            Shader::Decode => include_str!("../../../shaders/decode.wgsl"),
            Shader::Pack16 => include_str!("../../../shaders/pack16.wgsl"),
        }
    }

    /// The preludes concatenated in front of this stage, in order.
    fn preludes(self) -> &'static [&'static str] {
        match self {
            Shader::GdnPrefillIntra => &[PRELUDE, INPUTS, INTRA, WS16_OFF, GDN_INTRA_F32],
            Shader::KdaPrefillIntra => &[PRELUDE, INPUTS, INTRA, WS16_OFF],
            Shader::GdnPrefillIntraCoop => &[
                COOP_DIRECTIVES,
                PRELUDE,
                INPUTS,
                INTRA,
                WS16_GDN,
                GDN_INTRA_COOP,
            ],
            Shader::KdaPrefillIntraCoop => &[F16_DIRECTIVE, PRELUDE, INPUTS, INTRA, WS16_ON],
            Shader::KdaPrefillIntraMma => {
                &[COOP_DIRECTIVES, PRELUDE, INPUTS, INTRA, KDA_INTRA_COOP]
            }
            Shader::Decode => &[PRELUDE, INPUTS],
            Shader::PrefillState => &[PRELUDE, STATE],
            Shader::PrefillStateCoop => &[COOP_DIRECTIVES, PRELUDE, STATE],
            Shader::PrefillOutput => &[PRELUDE, OUTPUT],
            Shader::PrefillOutputCoop => &[COOP_DIRECTIVES, PRELUDE, OUTPUT],
            _ => &[PRELUDE],
        }
    }

    /// The full module text: the preludes, then the stage file. Line numbers in naga's messages
    /// are offset by [`Shader::prelude_lines`].
    pub fn source(self) -> String {
        let mut s = String::new();
        for p in self.preludes() {
            s.push_str(p);
            s.push('\n');
        }
        s.push_str(self.stage_source());
        s
    }

    /// The stage file plus the variant, for labels and messages (unique per shader).
    pub fn name(self) -> &'static str {
        match self {
            Shader::GdnPrefillIntraCoop => "gdn_prefill_intra.wgsl (coop variant)",
            Shader::KdaPrefillIntraCoop => "kda_prefill_intra.wgsl (coop variant)",
            Shader::KdaPrefillIntraMma => "kda_prefill_intra.wgsl (coop variant, matrix step 4)",
            s => s.file_name(),
        }
    }

    /// Whether the stage uses cooperative matrices (and f16).
    pub fn coop(self) -> bool {
        matches!(
            self,
            Shader::PrefillStateCoop
                | Shader::GdnPrefillIntraCoop
                | Shader::KdaPrefillIntraMma
                | Shader::PrefillOutputCoop
        )
    }

    /// Lines the preludes add in front of the stage file.
    pub fn prelude_lines(self) -> usize {
        self.preludes().iter().map(|p| p.lines().count() + 1).sum()
    }

    /// The override constants this stage declares (every key the host passes must be here).
    pub fn overrides(self) -> &'static [&'static str] {
        match self {
            Shader::GdnPrefillIntra => &["HEAD_K", "HEAD_V", "QKV_DT", "G_DT", "BETA_DT", "PROBE"],
            Shader::GdnPrefillIntraCoop => &[
                "HEAD_K", "HEAD_V", "QKV_DT", "G_DT", "BETA_DT", "PROBE", "UW", "TILED",
            ],
            Shader::KdaPrefillIntra | Shader::KdaPrefillIntraCoop => &[
                "HEAD_K",
                "HEAD_V",
                "QKV_DT",
                "G_DT",
                "BETA_DT",
                "PROBE",
                "STEP2_REF",
                "TILED",
            ],
            Shader::KdaPrefillIntraMma => &[
                "HEAD_K",
                "HEAD_V",
                "QKV_DT",
                "G_DT",
                "BETA_DT",
                "PROBE",
                "STEP2_REF",
                "UW",
                "TILED",
            ],
            Shader::PrefillState => &["HEAD_K", "HEAD_V", "BV", "WS_SPLIT"],
            Shader::PrefillStateCoop => &[
                "HEAD_K", "HEAD_V", "OUT16", "FUSE_O", "LATE_B", "PROBE", "TILED",
            ],
            Shader::PrefillOutput => &["HEAD_K", "HEAD_V"],
            Shader::PrefillOutputCoop => &["HEAD_K", "HEAD_V", "TILED"],
            Shader::Decode => &["HEAD_K", "HEAD_V", "QKV_DT", "G_DT", "BETA_DT", "IS_KDA"],
            Shader::Pack16 => &[],
        }
    }
}

//! The WGSL registry: one enum entry per stage variant, each a stage file in `shaders/` embedded
//! with `include_str!` and prefixed by its preludes (shared declarations and helpers, also files
//! in `shaders/`) in [`Shader::source`], the one function both the runtime and the validation
//! test use, so what is validated is byte-identical to what runs.

/// A prelude: a file of `shaders/` concatenated in front of stage files.
#[derive(Clone, Copy, Debug)]
pub struct Prelude {
    /// The file name in `shaders/`.
    pub file: &'static str,
    text: &'static str,
}

macro_rules! prelude {
    ($file:literal) => {
        Prelude {
            file: $file,
            text: include_str!(concat!("../../../shaders/", $file)),
        }
    };
}

/// In front of every stage: `Params` and pure helpers, no bindings.
const COMMON: Prelude = prelude!("common.wgsl");
/// The stages that read q/k/v, g and beta: their bindings 0-6 and loaders.
const INPUTS: Prelude = prelude!("inputs.wgsl");
/// The intra stages: workspace bindings, the T solve, the W/U writer.
const INTRA: Prelude = prelude!("intra.wgsl");
/// The `chunked` kernel's intra stages: W, kdec, qdec and P into the f32 workspace.
const INTRA_WORKSPACE_F32: Prelude = prelude!("intra_workspace_f32.wgsl");
/// The `coop` kernel's intra stages: the f16 workspace (a ninth storage buffer) and P's writer.
const INTRA_WORKSPACE_F16: Prelude = prelude!("intra_workspace_f16.wgsl");
/// The `coop` kernel's kda intra stage with step 4 in f32: its writers of W, kdecᵀ and qdec.
const KDA_INTRA_WORKSPACE_F16: Prelude = prelude!("kda_intra_workspace_f16.wgsl");
/// What the two intra stages with step 4 on cooperative matrices share.
const INTRA_COOP: Prelude = prelude!("intra_coop.wgsl");
/// The gdn intra stage's steps 2 and 4 with f32 register tiles.
const GDN_INTRA_F32: Prelude = prelude!("gdn_intra_f32.wgsl");
/// The gdn intra stage's steps 2 and 4 on cooperative matrices.
const GDN_INTRA_COOP: Prelude = prelude!("gdn_intra_coop.wgsl");
/// The kda intra stage's step 4 on cooperative matrices.
const KDA_INTRA_COOP: Prelude = prelude!("kda_intra_coop.wgsl");
/// The two state-pass stages: bindings, state loaders and writers, staging spans.
const STATE: Prelude = prelude!("state.wgsl");

/// Every prelude file.
pub const PRELUDES: [Prelude; 11] = [
    COMMON,
    INPUTS,
    INTRA,
    INTRA_WORKSPACE_F32,
    INTRA_WORKSPACE_F16,
    KDA_INTRA_WORKSPACE_F16,
    INTRA_COOP,
    GDN_INTRA_F32,
    GDN_INTRA_COOP,
    KDA_INTRA_COOP,
    STATE,
];

/// The directives in front of the cooperative-matrix stages (before any prelude: WGSL wants
/// `enable` first). Those stages need `Features::SHADER_F16` and
/// `Features::EXPERIMENTAL_COOPERATIVE_MATRIX` (see `device::Gpu::coop`).
pub const COOP_DIRECTIVES: &str = "enable f16;\nenable wgpu_cooperative_matrix;\n";
/// The directive in front of the kda intra stage with step 4 in f32 (f16 workspace, no matrices).
pub const F16_DIRECTIVE: &str = "enable f16;\n";

/// One WGSL stage variant.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Shader {
    /// gdn prefill, chunk-parallel intra stage (Γ, A, T, W, U, P, decayed q/k) in f32.
    GdnPrefillIntra,
    /// kda prefill, chunk-parallel intra stage (per-channel Γ) in f32.
    KdaPrefillIntra,
    /// The gdn intra stage of the `coop` kernel: steps 2 and 4 on cooperative matrices, W, kdecᵀ,
    /// qdec and P as f16 tiles into the f16 workspace (48,144 bytes of workgroup memory).
    GdnPrefillIntraCoop,
    /// The kda intra stage of the `coop` kernel: step 4 on cooperative matrices, W, kdecᵀ, qdec
    /// and P as f16 tiles (47,888 bytes of workgroup memory).
    KdaPrefillIntraCoop,
    /// The kda intra stage of the `coop` kernel on adapters with less workgroup memory: step 4
    /// with f32 register tiles, the same f16 workspace (32 KiB: lavapipe, where CI emulates the
    /// kernel).
    KdaPrefillIntraCoopF32Step4,
    /// Sequential state pass over chunks, split over value tiles (gdn and kda).
    PrefillState,
    /// The `coop` kernel's state pass: its products and o's on cooperative matrices (f16
    /// operands, f32 accumulation); it writes o, no output pass follows.
    PrefillStateCoop,
    /// The `chunked` kernel's chunk-parallel output pass (gdn and kda).
    PrefillOutput,
    /// Token recurrence for decode (gdn and kda by the `IS_KDA` override).
    Decode,
    /// f32 to bf16/f16 packing of outputs and pool rows.
    Pack16,
}

impl Shader {
    pub const ALL: [Shader; 10] = [
        Shader::GdnPrefillIntra,
        Shader::KdaPrefillIntra,
        Shader::GdnPrefillIntraCoop,
        Shader::KdaPrefillIntraCoop,
        Shader::KdaPrefillIntraCoopF32Step4,
        Shader::PrefillState,
        Shader::PrefillStateCoop,
        Shader::PrefillOutput,
        Shader::Decode,
        Shader::Pack16,
    ];

    pub fn file_name(self) -> &'static str {
        match self {
            Shader::GdnPrefillIntra | Shader::GdnPrefillIntraCoop => "gdn_prefill_intra.wgsl",
            Shader::KdaPrefillIntra
            | Shader::KdaPrefillIntraCoop
            | Shader::KdaPrefillIntraCoopF32Step4 => "kda_prefill_intra.wgsl",
            Shader::PrefillState => "prefill_state.wgsl",
            Shader::PrefillStateCoop => "prefill_state_coop.wgsl",
            Shader::PrefillOutput => "prefill_output.wgsl",
            Shader::Decode => "decode.wgsl",
            Shader::Pack16 => "pack16.wgsl",
        }
    }

    fn stage_source(self) -> &'static str {
        match self {
            Shader::GdnPrefillIntra | Shader::GdnPrefillIntraCoop => {
                include_str!("../../../shaders/gdn_prefill_intra.wgsl")
            }
            Shader::KdaPrefillIntra
            | Shader::KdaPrefillIntraCoop
            | Shader::KdaPrefillIntraCoopF32Step4 => {
                include_str!("../../../shaders/kda_prefill_intra.wgsl")
            }
            Shader::PrefillState => include_str!("../../../shaders/prefill_state.wgsl"),
            Shader::PrefillStateCoop => {
                include_str!("../../../shaders/prefill_state_coop.wgsl")
            }
            Shader::PrefillOutput => include_str!("../../../shaders/prefill_output.wgsl"),
            Shader::Decode => include_str!("../../../shaders/decode.wgsl"),
            Shader::Pack16 => include_str!("../../../shaders/pack16.wgsl"),
        }
    }

    /// The directives in front of everything (empty for plain stages).
    fn directives(self) -> &'static str {
        if self.coop() {
            COOP_DIRECTIVES
        } else if self == Shader::KdaPrefillIntraCoopF32Step4 {
            F16_DIRECTIVE
        } else {
            ""
        }
    }

    /// The preludes concatenated in front of this stage, in order.
    pub fn preludes(self) -> &'static [Prelude] {
        match self {
            Shader::GdnPrefillIntra => &[COMMON, INPUTS, INTRA, INTRA_WORKSPACE_F32, GDN_INTRA_F32],
            Shader::KdaPrefillIntra => &[COMMON, INPUTS, INTRA, INTRA_WORKSPACE_F32],
            Shader::GdnPrefillIntraCoop => &[
                COMMON,
                INPUTS,
                INTRA,
                INTRA_WORKSPACE_F16,
                INTRA_COOP,
                GDN_INTRA_COOP,
            ],
            Shader::KdaPrefillIntraCoop => &[
                COMMON,
                INPUTS,
                INTRA,
                INTRA_WORKSPACE_F16,
                INTRA_COOP,
                KDA_INTRA_COOP,
            ],
            Shader::KdaPrefillIntraCoopF32Step4 => &[
                COMMON,
                INPUTS,
                INTRA,
                INTRA_WORKSPACE_F16,
                KDA_INTRA_WORKSPACE_F16,
            ],
            Shader::Decode => &[COMMON, INPUTS],
            Shader::PrefillState | Shader::PrefillStateCoop => &[COMMON, STATE],
            Shader::PrefillOutput | Shader::Pack16 => &[COMMON],
        }
    }

    /// The full module text: the directives, the preludes, then the stage file. Line numbers in
    /// naga's messages are offset by [`Shader::prelude_lines`].
    pub fn source(self) -> String {
        let mut s = String::from(self.directives());
        for p in self.preludes() {
            s.push_str(p.text);
            s.push('\n');
        }
        s.push_str(self.stage_source());
        s
    }

    /// The stage file plus the variant, for labels and messages (unique per shader).
    pub fn name(self) -> &'static str {
        match self {
            Shader::GdnPrefillIntraCoop => "gdn_prefill_intra.wgsl (coop)",
            Shader::KdaPrefillIntraCoop => "kda_prefill_intra.wgsl (coop)",
            Shader::KdaPrefillIntraCoopF32Step4 => "kda_prefill_intra.wgsl (coop, f32 step 4)",
            s => s.file_name(),
        }
    }

    /// Whether the stage uses cooperative matrices (and f16).
    pub fn coop(self) -> bool {
        matches!(
            self,
            Shader::PrefillStateCoop | Shader::GdnPrefillIntraCoop | Shader::KdaPrefillIntraCoop
        )
    }

    /// Lines the directives and preludes add in front of the stage file.
    pub fn prelude_lines(self) -> usize {
        self.directives().lines().count()
            + self
                .preludes()
                .iter()
                .map(|p| p.text.lines().count() + 1)
                .sum::<usize>()
    }

    /// The override constants this stage declares (every key the host passes must be here).
    pub fn overrides(self) -> &'static [&'static str] {
        const INTRA_KEYS: &[&str] = &["HEAD_K", "HEAD_V", "QKV_DT", "G_DT", "BETA_DT"];
        const INTRA_COOP_KEYS: &[&str] = &["HEAD_K", "HEAD_V", "QKV_DT", "G_DT", "BETA_DT", "UW"];
        match self {
            Shader::GdnPrefillIntra
            | Shader::KdaPrefillIntra
            | Shader::KdaPrefillIntraCoopF32Step4 => INTRA_KEYS,
            Shader::GdnPrefillIntraCoop | Shader::KdaPrefillIntraCoop => INTRA_COOP_KEYS,
            Shader::PrefillState => &["HEAD_K", "HEAD_V", "BV"],
            Shader::PrefillStateCoop | Shader::PrefillOutput => &["HEAD_K", "HEAD_V"],
            Shader::Decode => &["HEAD_K", "HEAD_V", "QKV_DT", "G_DT", "BETA_DT", "IS_KDA"],
            Shader::Pack16 => &[],
        }
    }
}

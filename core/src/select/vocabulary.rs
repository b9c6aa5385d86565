//! The vocabulary of the rule table: what a row promises, what a caller asks for, and why a row
//! is rejected.

use crate::backend::Kernel;
use crate::caps::{BackendKind, Capabilities};
use crate::dtype::{dtype_set, DType};
use crate::error::{Error, Result};
use crate::problem::{BetaMode, Mode, Op, StateLayout};
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
    /// The gates as the table prints them (`log, softplus, lower_bound in [-5, 0)`).
    pub fn describe(self) -> String {
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
    /// The split (workspace) form of a prefill, inside the bound.
    SplitWins(SplitBound),
    /// The complement of `SplitWins` with the same bound: the fused form.
    FusedWins(SplitBound),
}

/// Where the split (workspace) form of a prefill beats the fused form: (sequences x value heads)
/// at most the device's multiprocessors times `num / den`, or else a workspace of at most
/// `max_blocks` (chunk, value head) blocks, bounded by (tokens / 64 + sequences) x value heads.
/// Measured on an H200: with many pairs the split form is as fast as or faster than the fused
/// kernel from 1 to 16 chunks a sequence, gdn and kda (gdn 16/32 64x256 0.928 ms against 0.981,
/// kda 32/32 16x1024 1.185 against 1.437); the bound keeps its workspace, ~94 KB a block at
/// K = V = 128, to ~1.5 GB.
///
/// `short`: where not 0, the fused form also wins (with more pairs than that limit) when every
/// sequence is at most `short` tokens long (the longest known) and the fused T-form applies
/// ([`crate::variants::fused_tform_applies`]): it reads the inputs and the state once. Measured on
/// an H200 in the same calls: gdn 16/32 256x64 0.890 ms against 1.159 for the split form, 8x64
/// 0.042 / 0.057, 32x64 0.130 / 0.171, 1024x32 3.22 / 4.54, 512x64 1.74 / 2.35, gdn 4/8 256x64
/// 0.241 / 0.308; but 128x128 0.898 / 0.816: one chunk a sequence only.
///
/// `chain_blocks`: where not 0, the split form also wins beyond `max_blocks`, up to
/// `chain_blocks` blocks, when the longest sequence (known) is the fused form's critical path: its
/// chunks are more than 1.5 x the fused form's waves, ceil(blocks / (CTAs an SM x SMs)) chunk
/// steps, so one CTA a value head walks that sequence while the rest of the device has finished
/// (a mixed batch: one long sequence among short ones). A lone fused CTA takes ~16 us a chunk
/// (gdn's fused T-form) to ~20 us (kda's classic kernel), the split form's state pass ~2.5 us.
/// Measured on an H100 in one run, fused against split: gdn 16/32 1x32768+4x500 (512 chunks
/// against 67 waves) 8.206 against 1.290 ms; kda 32/32 1x16384+32x500 (256 chunks against 131
/// waves) 5.147 against 2.491 ms. Equal sequences have no more chunks than waves and keep the
/// fused form. At 65,536 blocks the split workspace is ~2.4 GB (gdn's T-form, ~37 KB a block)
/// to ~6 GB (the W/U form, ~92 KB).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SplitBound {
    pub num: u32,
    pub den: u32,
    pub max_blocks: u64,
    pub short: usize,
    pub chain_blocks: u64,
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
    /// Parses a selection name: `auto`, `cpu`, `wgpu`, `cuda`, or `backend:kernel`
    /// (`cuda:small-bh`, `cpu:chunked`, ...). The one parser of these names: every face calls it.
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
                format!(
                    "auto, cpu, wgpu, cuda or backend:kernel (kernels: {})",
                    kernel_names()
                ),
                s,
            )
        })?;
        match k {
            None => Ok(Preference::Backend(backend)),
            Some(k) => {
                let kernel = Kernel::parse(k).ok_or_else(|| {
                    Error::invalid(
                        "backend",
                        format!("a kernel name after ':' ({})", kernel_names()),
                        s,
                    )
                })?;
                Ok(Preference::Kernel(backend, kernel))
            }
        }
    }

    /// The backend this preference names (`None` for `auto`): the one the caller needs present.
    pub fn backend(self) -> Option<BackendKind> {
        match self {
            Preference::Auto => None,
            Preference::Backend(b) | Preference::Kernel(b, _) => Some(b),
        }
    }

    /// Whether `rule` is one this preference asks for.
    pub fn wants(self, rule: &Rule) -> bool {
        match self {
            Preference::Auto => true,
            Preference::Backend(b) => rule.backend == b,
            Preference::Kernel(b, k) => rule.backend == b && rule.kernel == k,
        }
    }

    /// Whether `auto` conditions apply: `auto` and a bare backend name; an explicit
    /// `backend:kernel` ignores them.
    pub fn applies_auto_conditions(self) -> bool {
        !matches!(self, Preference::Kernel(..))
    }
}

fn kernel_names() -> String {
    let names: Vec<&str> = Kernel::ALL.iter().map(|k| k.name()).collect();
    names.join(", ")
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selection_names_parse_and_print_back() {
        for name in [
            "auto",
            "cpu",
            "cpu:reference",
            "cpu:chunked",
            "cpu:chunked-f64",
            "cpu:segmented",
            "wgpu",
            "wgpu:chunked",
            "wgpu:coop",
            "wgpu:recurrent",
            "cuda",
            "cuda:chunked",
            "cuda:small-bh",
            "cuda:recurrent",
        ] {
            let pref = Preference::parse(name).expect(name);
            assert_eq!(pref.to_string(), name);
        }
        assert_eq!(
            Preference::parse(" cuda:small-bh ").expect("trimmed"),
            Preference::Kernel(BackendKind::Cuda, Kernel::SmallBh)
        );
    }

    #[test]
    fn bad_names_say_what_is_accepted() {
        for bad in ["gpu", "cuda:fast", "cpu:", "", ":chunked"] {
            match Preference::parse(bad) {
                Err(Error::InvalidArgument { expected, .. }) => {
                    assert!(expected.contains("small-bh, coop"), "{bad}: {expected}")
                }
                other => panic!("{bad}: {other:?}"),
            }
        }
    }

    #[test]
    fn a_preference_names_its_backend() {
        let backend = |s: &str| Preference::parse(s).expect(s).backend();
        assert_eq!(backend("auto"), None);
        assert_eq!(backend("wgpu"), Some(BackendKind::Wgpu));
        assert_eq!(backend("cuda:small-bh"), Some(BackendKind::Cuda));
        assert!(Preference::Auto.applies_auto_conditions());
        assert!(Preference::Backend(BackendKind::Cuda).applies_auto_conditions());
        assert!(!Preference::Kernel(BackendKind::Cuda, Kernel::Chunked).applies_auto_conditions());
    }
}

//! # deltarule-wgpu
//!
//! The WGSL reference backend on wgpu (Vulkan, Metal, DX12; lavapipe in CI). f32 arithmetic;
//! device buffers hold the caller's dtypes (bf16 and f16 unpacked from `u32` words in the
//! shaders). Prefill runs the chunked algorithm of SPEC.md section 5 in three stages (a
//! chunk-parallel intra stage, a state pass split over value tiles, a chunk-parallel output
//! pass); decode runs the token recurrence. Every option of SPEC.md works: GVA, varlen with
//! zero-length sequences, both state layouts, f32/bf16/f16 states, pools in place, checkpoints
//! at any interval, L2 norm and the in-kernel gates and betas.
//!
//! Modules: [`device`] (the only one touching adapter and device APIs), [`shaders`] (the WGSL
//! registry), [`pipelines`] (cache keyed by shader and override constants), [`launch`] (tables,
//! buffers, dispatch lists).
//!
//! Production modules are created without wgpu's injected bounds checks (about 8.5x faster on
//! NVIDIA's Vulkan driver); `DELTARULE_WGPU_CHECKED=1` (or [`AdapterChoice::checked`]) selects
//! modules with the checks, which the tests also run.

pub mod coop;
pub mod device;
pub mod emulate;
pub mod error;
pub mod launch;
pub mod pipelines;
pub mod shaders;

use deltarule_core::{
    validate_inputs, Backend, BackendKind, BenchOptions, BenchReport, Capabilities, Error, Inputs,
    Kernel, Mode, Outputs, Problem, Result,
};
use device::Gpu;
use launch::{Call, InputSet};
use pipelines::PipelineCache;

/// Which adapter to use, and how.
#[derive(Clone, Debug, Default)]
pub struct AdapterChoice {
    /// Substring of the adapter name to prefer (`DELTARULE_WGPU_ADAPTER`).
    pub name: Option<String>,
    /// Shader modules with wgpu's runtime bounds checks (`DELTARULE_WGPU_CHECKED=1`).
    pub checked: bool,
    /// Caps the largest storage binding the launch layer plans with (tests of the head-batched
    /// prefill path on small problems); `None` uses the device's limit.
    pub max_binding: Option<u64>,
    /// Value columns of a prefill state-pass workgroup: 16 or 32 (`DELTARULE_WGPU_STATE_BV`, a
    /// tuning knob: 16 doubles the workgroups of the sequential pass when sequences x heads are
    /// few). 32 is used only for K <= 128; `None` picks 32 there, else 16.
    pub state_bv: Option<usize>,
    /// W·S tiling of the prefill state pass (`DELTARULE_WGPU_STATE_WS`, a tuning knob): 0 = a
    /// 4 x BV/16 block per invocation over all of K, 1 = a 4 x 4 block over a split of K with
    /// the partial sums added in workgroup memory (half the workgroup loads per FMA at BV = 32).
    /// `None` picks 1.
    pub state_ws: Option<u32>,
    /// kda intra step 2 (`DELTARULE_WGPU_KDA_STEP2`, a tuning knob): 1 = through 16-token
    /// reference points (kda_prefill_intra.wgsl v4), 0 = v3's exponential per element. `None`
    /// picks 1.
    pub kda_step2: Option<u32>,
    /// The coop kernel's output pass folded into its state pass (`DELTARULE_WGPU_FUSE_O`, a
    /// tuning knob): 1 = prefill_state_coop.wgsl v4 (FUSE_O), 0 = v3 and a separate output pass.
    /// `None` picks 1.
    pub fuse_o: Option<u32>,
    /// When the coop state pass loads a chunk's kdecᵀ and P tiles (`DELTARULE_WGPU_STATE_LATE`, a
    /// tuning knob): 0 = one chunk ahead with W, 1 = after the chunk's W·S products (fewer A tiles live; H200,
    /// session 14: state pass 0.967 -> 0.955 ms at gdn 16/32 1 x 8192). `None` picks 1.
    pub state_late: Option<u32>,
    /// The coop kernel's kda intra step 4 (`DELTARULE_WGPU_KDA_MMA4`, a tuning knob): 1 = on
    /// cooperative matrices where the adapter has 47,888 bytes of workgroup memory
    /// (kda_intra_coop.wgsl), 0 = f32 register tiles (ws16_on.wgsl). `None` picks 1.
    pub kda_mma4: Option<u32>,
    /// The coop kernel's f16 A operands (W, kdecᵀ, qdec, P) as 16 x 16 tiles one after another
    /// (`DELTARULE_WGPU_TILED`, a tuning knob): 1 = tiled, 0 = plain row-major. `None` picks 1.
    pub tiled: Option<u32>,
    /// Tests only (`DELTARULE_WGPU_COOP_EMULATE=1`): on an adapter without cooperative matrices,
    /// run the `coop` stages rewritten into plain WGSL (src/emulate.rs) and offer the `coop`
    /// kernel, so that CI's lavapipe runs them. Slow; never a production path.
    pub coop_emulate: bool,
    /// Diagnosis only (`DELTARULE_WGPU_PROBE`, a bit mask, 0 = off): skips parts of the intra
    /// pass to locate its time (1: the W/U stores, 2: the P stores, 4: the T solve, 8: the W/U/qdec
    /// stream, 16: the K Kᵀ / Q Kᵀ products; 1 is unused since v3; kda's stage takes 4, 8 and 16
    /// since session 13; 128 was a state-pass probe in session 13, whose finding is now the
    /// layout). Results are wrong with any of
    /// those set; `deltarule bench` is the only intended user.
    pub probe: u32,
}

impl AdapterChoice {
    /// Reads `DELTARULE_WGPU_ADAPTER` and `DELTARULE_WGPU_CHECKED`. The backend API set comes from
    /// wgpu's own `WGPU_BACKEND` (`vulkan`, `metal`, `dx12`, `gl`).
    pub fn from_env() -> Self {
        AdapterChoice {
            name: std::env::var("DELTARULE_WGPU_ADAPTER")
                .ok()
                .filter(|s| !s.is_empty()),
            checked: std::env::var("DELTARULE_WGPU_CHECKED").ok().as_deref() == Some("1"),
            max_binding: None,
            state_bv: std::env::var("DELTARULE_WGPU_STATE_BV")
                .ok()
                .and_then(|s| s.parse().ok()),
            state_ws: std::env::var("DELTARULE_WGPU_STATE_WS")
                .ok()
                .and_then(|s| s.parse().ok()),
            kda_step2: std::env::var("DELTARULE_WGPU_KDA_STEP2")
                .ok()
                .and_then(|s| s.parse().ok()),
            fuse_o: std::env::var("DELTARULE_WGPU_FUSE_O")
                .ok()
                .and_then(|s| s.parse().ok()),
            state_late: std::env::var("DELTARULE_WGPU_STATE_LATE")
                .ok()
                .and_then(|s| s.parse().ok()),
            kda_mma4: std::env::var("DELTARULE_WGPU_KDA_MMA4")
                .ok()
                .and_then(|s| s.parse().ok()),
            tiled: std::env::var("DELTARULE_WGPU_TILED")
                .ok()
                .and_then(|s| s.parse().ok()),
            coop_emulate: std::env::var("DELTARULE_WGPU_COOP_EMULATE").ok().as_deref() == Some("1"),
            probe: std::env::var("DELTARULE_WGPU_PROBE")
                .ok()
                .and_then(|s| s.parse().ok())
                .unwrap_or(0),
        }
    }
}

/// The wgpu backend.
pub struct WgpuBackend {
    gpu: Gpu,
    caps: Capabilities,
    cache: PipelineCache,
}

impl WgpuBackend {
    /// Opens the adapter; `Error::Unavailable` with what was searched when there is none.
    pub fn new(choice: AdapterChoice) -> Result<Self> {
        let gpu = Gpu::open(&choice)?;
        let caps = gpu.caps();
        Ok(WgpuBackend {
            gpu,
            caps,
            cache: PipelineCache::default(),
        })
    }

    /// The device behind the backend (for tests of the launch layer).
    pub fn gpu(&self) -> &Gpu {
        &self.gpu
    }

    /// Compiled pipelines so far.
    pub fn pipelines(&self) -> usize {
        self.cache.len()
    }

    fn check_kernel(&self, kernel: Kernel, p: &Problem) -> Result<()> {
        if kernel == Kernel::Coop && p.mode == Mode::Prefill {
            let why = if !self.gpu.coop {
                Some(format!(
                    "{} has no usable cooperative matrices (needs the 16x16x16 f16 -> f32 \
                     configuration, f16, 32-wide subgroups; DELTARULE_WGPU_COOP=0 turns them off)",
                    self.gpu.info.name
                ))
            } else if !(p.k == 64 || p.k == 128) || !p.v.is_multiple_of(32) {
                Some(format!(
                    "head dims K = {}, V = {}: the coop state pass needs K in {{64, 128}} and V a \
                     multiple of 32",
                    p.k, p.v
                ))
            } else {
                None
            };
            return match why {
                Some(w) => Err(Error::unsupported(BackendKind::Wgpu, kernel.name(), w)),
                None => Ok(()),
            };
        }
        let want = match p.mode {
            Mode::Prefill => Kernel::Chunked,
            Mode::Decode => Kernel::Recurrent,
        };
        if kernel != want {
            return Err(Error::unsupported(
                BackendKind::Wgpu,
                kernel.name(),
                format!(
                    "the wgpu backend runs {} with the `{}` kernel",
                    p.mode.name(),
                    want.name()
                ),
            ));
        }
        Ok(())
    }
}

impl Backend for WgpuBackend {
    fn kind(&self) -> BackendKind {
        BackendKind::Wgpu
    }

    fn caps(&self) -> &Capabilities {
        &self.caps
    }

    fn kernels(&self) -> &'static [Kernel] {
        &[Kernel::Chunked, Kernel::Coop, Kernel::Recurrent]
    }

    fn run(&self, kernel: Kernel, p: &Problem, inputs: &Inputs) -> Result<Outputs> {
        let val = validate_inputs(p, inputs)?;
        self.check_kernel(kernel, p)?;
        let call = Call::new(&self.gpu, &self.cache, kernel, p, inputs, &val)?;
        let set = InputSet::upload(&self.gpu, inputs);
        self.gpu.run(&call.dispatches(p, &set))?;
        call.shared.download(&self.gpu, p, &set)
    }

    fn bench(
        &self,
        kernel: Kernel,
        p: &Problem,
        inputs: &Inputs,
        opts: &BenchOptions,
    ) -> Result<BenchReport> {
        let val = validate_inputs(p, inputs)?;
        self.check_kernel(kernel, p)?;
        let call = Call::new(&self.gpu, &self.cache, kernel, p, inputs, &val)?;
        let first = InputSet::upload(&self.gpu, inputs);
        let per_set = first.bytes.max(1);
        let count = (opts.rotate_bytes / per_set + 1).clamp(1, 64);
        let mut sets = vec![first];
        while sets.len() < count {
            sets.push(InputSet::upload(&self.gpu, inputs));
        }
        let calls: Vec<_> = sets.iter().map(|s| call.dispatches(p, s)).collect();
        // every input set at least once before timing: NVIDIA's Vulkan driver backs a new buffer
        // lazily, and the first call on each set measured 4-5x its steady time (session 2)
        let warmup = opts.warmup.max(calls.len());
        let (device_ms, host_us) = self.gpu.time(&calls, warmup, opts.iters)?;
        // where the time goes: each pass timed on its own (a few calls)
        let stages = self.gpu.profile(&calls[0], opts.iters.clamp(1, 10))?;
        let timer = if self.caps.timestamps {
            "wgpu timestamp queries (compute pass begin/end)"
        } else {
            "host wall clock per batch (no timestamp queries)"
        };
        Ok(BenchReport {
            device_ms,
            host_us,
            timer: timer.into(),
            input_sets: sets.len(),
            device: self.caps.device.clone(),
            stages,
        })
    }
}

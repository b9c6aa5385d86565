//! # deltarule-wgpu
//!
//! The WGSL backend on wgpu (Vulkan, Metal, DX12; lavapipe in CI). Device buffers hold the
//! caller's dtypes (bf16 and f16 unpacked from `u32` words in the shaders). Kernels:
//! * `chunked` (prefill): the chunked algorithm of docs/spec.md in three f32 stages, a
//!   chunk-parallel intra stage, a state pass split over value tiles and a chunk-parallel output
//!   pass;
//! * `coop` (prefill): the same algorithm with its matrix products on wgpu's experimental
//!   cooperative matrices (16 x 16 x 16, f16 operands, f32 accumulation) and the output pass
//!   folded into the state pass;
//! * `recurrent` (decode): the token recurrence.
//!
//! Every option of docs/spec.md works: GVA, varlen with zero-length sequences, both state
//! layouts, f32/bf16/f16 states, pools in place, checkpoints at any interval, L2 norm and the
//! in-kernel gates and betas.
//!
//! Modules: [`options`] (the options and the environment), [`device`] (the only one touching
//! adapter and device APIs), [`shaders`] (the WGSL registry), [`pipelines`] (cache keyed by
//! shader and override constants), [`launch`] (tables, buffers, dispatch lists), [`coop`] (the
//! SPIR-V of the cooperative-matrix stages), [`emulate`] (those stages in plain WGSL, for tests).
//!
//! Production modules are created without wgpu's injected bounds checks (about 8.5x faster on
//! NVIDIA's Vulkan driver); `DELTARULE_WGPU_CHECKED=1` (or [`AdapterChoice::checked`]) selects
//! modules with the checks, which the tests also run.

pub mod coop;
pub mod device;
pub mod emulate;
pub mod error;
pub mod launch;
pub mod options;
pub mod pipelines;
pub mod shaders;

use deltarule_core::{
    validate_inputs, Backend, BackendKind, BenchOptions, BenchReport, Capabilities, Error, Inputs,
    Kernel, Mode, Outputs, Problem, Result,
};
use device::Gpu;
use launch::{Call, InputSet};
pub use options::AdapterChoice;
use pipelines::PipelineCache;

/// The wgpu backend.
pub struct WgpuBackend {
    gpu: Gpu,
    caps: Capabilities,
    cache: PipelineCache,
}

impl WgpuBackend {
    /// Opens the adapter; `Error::Unavailable` with what was searched when there is none,
    /// `Error::InvalidArgument` for an option out of range.
    pub fn new(choice: AdapterChoice) -> Result<Self> {
        choice.check()?;
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
        // lazily, and the first call on each set measures 4-5x its steady time
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

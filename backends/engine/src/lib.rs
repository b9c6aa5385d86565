//! # deltarule-engine
//!
//! The facade every face (CLI, tests, benches, Python) uses: it owns the backends found on this
//! machine (the CPU always; wgpu and CUDA when compiled in and present, otherwise the reason they
//! are not), runs the selection rules of `deltarule_core::select`, and runs the chosen row.

use deltarule_core::select::{select, DeviceState, Preference, Rule, Selection};
use deltarule_core::{
    validate_inputs, Backend, BackendKind, BenchOptions, BenchReport, Inputs, Kernel, Outputs,
    Problem, Result,
};
use deltarule_cpu::CpuBackend;
use std::sync::Arc;

#[cfg(feature = "cuda")]
pub use deltarule_cuda::{CudaBackend, DevicePtrs, Workspace};

/// Which backends to probe when the engine starts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EngineOptions {
    pub backends: Vec<BackendKind>,
    /// The CUDA device ordinal.
    pub cuda_ordinal: usize,
}

impl Default for EngineOptions {
    fn default() -> Self {
        EngineOptions {
            backends: BackendKind::ALL.to_vec(),
            cuda_ordinal: 0,
        }
    }
}

/// The engine: the backends present and the reasons for those absent.
pub struct Engine {
    backends: Vec<Arc<dyn Backend>>,
    devices: Vec<DeviceState>,
    #[cfg(feature = "cuda")]
    cuda: Option<Arc<CudaBackend>>,
}

impl Engine {
    /// Probes the backends named in `opts` (the CPU is always present).
    pub fn new(opts: &EngineOptions) -> Engine {
        let cpu: Arc<dyn Backend> = Arc::new(CpuBackend::new());
        let mut devices = vec![DeviceState::Available(cpu.caps().clone())];
        let mut backends = vec![cpu];
        #[cfg(feature = "cuda")]
        let mut cuda = None;
        for &kind in &opts.backends {
            let probed: std::result::Result<Arc<dyn Backend>, String> = match kind {
                BackendKind::Cpu => continue,
                BackendKind::Wgpu => probe_wgpu(),
                #[cfg(feature = "cuda")]
                BackendKind::Cuda => deltarule_cuda::CudaBackend::new(opts.cuda_ordinal)
                    .map(|b| {
                        let b = Arc::new(b);
                        cuda = Some(b.clone());
                        b as Arc<dyn Backend>
                    })
                    .map_err(reason),
                #[cfg(not(feature = "cuda"))]
                BackendKind::Cuda => {
                    Err("this build has no CUDA backend (feature `cuda` off)".into())
                }
            };
            match probed {
                Ok(b) => {
                    devices.push(DeviceState::Available(b.caps().clone()));
                    backends.push(b);
                }
                Err(reason) => devices.push(DeviceState::Unavailable {
                    backend: kind,
                    reason,
                }),
            }
        }
        Engine {
            backends,
            devices,
            #[cfg(feature = "cuda")]
            cuda,
        }
    }

    /// An engine with the CPU backend only (other backends are reported as not probed).
    pub fn cpu_only() -> Engine {
        Engine::new(&EngineOptions {
            backends: vec![BackendKind::Cpu],
            ..EngineOptions::default()
        })
    }

    /// Every backend, present (with capabilities) or absent (with the reason).
    pub fn devices(&self) -> &[DeviceState] {
        &self.devices
    }

    pub fn backend(&self, kind: BackendKind) -> Option<&dyn Backend> {
        self.backends
            .iter()
            .find(|b| b.kind() == kind)
            .map(|b| b.as_ref() as &dyn Backend)
    }

    /// The CUDA launches `kernel` makes for `p` on an sm_90a device with `sms` multiprocessors
    /// and the default options, one line each (`deltarule select --explain`); `None` without the
    /// CUDA backend compiled in. Pure: no device is needed. `max_seq`: the longest sequence's
    /// tokens, where known.
    pub fn cuda_plan(
        kernel: Kernel,
        p: &Problem,
        sms: usize,
        max_seq: Option<usize>,
    ) -> Option<Result<Vec<String>>> {
        #[cfg(feature = "cuda")]
        {
            Some(deltarule_cuda::plan::describe(kernel, p, sms, max_seq))
        }
        #[cfg(not(feature = "cuda"))]
        {
            let _ = (kernel, p, sms, max_seq);
            None
        }
    }

    /// The selection for `p` (pure; nothing runs).
    pub fn select(&self, p: &Problem, pref: Preference, max_seq: Option<usize>) -> Selection {
        select(p, &self.devices, pref, max_seq)
    }

    /// Validates, selects a rule and runs it. Returns the outputs and the row that ran.
    pub fn run(
        &self,
        p: &Problem,
        inputs: &Inputs,
        pref: Preference,
    ) -> Result<(Outputs, &'static Rule)> {
        let (rule, backend) = self.resolve(p, inputs, pref)?;
        Ok((backend.run(rule.kernel, p, inputs)?, rule))
    }

    /// Validates, selects and times the chosen row.
    pub fn bench(
        &self,
        p: &Problem,
        inputs: &Inputs,
        pref: Preference,
        opts: &BenchOptions,
    ) -> Result<(BenchReport, &'static Rule)> {
        let (rule, backend) = self.resolve(p, inputs, pref)?;
        Ok((backend.bench(rule.kernel, p, inputs, opts)?, rule))
    }

    /// Enqueues a call on device-resident tensors (raw CUDA device pointers and a caller's
    /// stream, e.g. PyTorch's): selects among the CUDA rows (`auto` means the best CUDA row,
    /// since the pointers are CUDA memory), reserves the workspace (compiles and loads the kernels
    /// and grows `ws` only when needed: warm up eagerly before CUDA-graph capture), and launches
    /// without reading device memory or synchronising. `cu_seqlens` and `state_indices` are not
    /// validated here: the caller validates them (the Python package does, with the versioned
    /// cache of docs/spec.md section 7).
    ///
    /// `max_seq`: the longest sequence's token count, where the caller knows it on the host (the
    /// Python package does after reading the offsets; not under CUDA-graph capture). The
    /// selection uses it (`auto` fuses gdn when every sequence is one chunk, `SplitBound::short`):
    /// every row computes the same result for any lengths, so a stale hint (a graph replayed
    /// with longer sequences) costs speed, never correctness; the CUDA launch plan (the segment
    /// rule, `deltarule_cuda::plan::segment_plan`) takes it too. Pass the same value to
    /// [`Engine::device_workspace`], which sizes the workspace for the row it selects.
    #[cfg(feature = "cuda")]
    pub fn launch_device(
        &self,
        p: &Problem,
        pref: Preference,
        ptrs: &DevicePtrs,
        stream: u64,
        ws: &mut Workspace,
        max_seq: Option<usize>,
    ) -> Result<&'static Rule> {
        let (rule, cuda) = self.device_rule(p, pref, max_seq)?;
        cuda.reserve(ws, rule.kernel, p, max_seq)?;
        cuda.launch(rule.kernel, p, ptrs, stream, ws, max_seq)?;
        Ok(rule)
    }

    /// The row `launch_device` would run for `p` and the workspace bytes it needs (compiles and
    /// loads the kernels): for callers that provide the workspace themselves
    /// ([`Workspace::external`], e.g. from PyTorch's caching allocator).
    #[cfg(feature = "cuda")]
    pub fn device_workspace(
        &self,
        p: &Problem,
        pref: Preference,
        max_seq: Option<usize>,
    ) -> Result<(&'static Rule, usize)> {
        let (rule, cuda) = self.device_rule(p, pref, max_seq)?;
        Ok((rule, cuda.workspace_layout(rule.kernel, p, max_seq)?.total))
    }

    /// The CUDA row for device-resident tensors (`auto` means the best CUDA row).
    #[cfg(feature = "cuda")]
    fn device_rule(
        &self,
        p: &Problem,
        pref: Preference,
        max_seq: Option<usize>,
    ) -> Result<(&'static Rule, &CudaBackend)> {
        p.validate()?;
        p.validate_longest_sequence(max_seq)?;
        let pref = match pref {
            Preference::Auto => Preference::Backend(BackendKind::Cuda),
            other => other,
        };
        let rule = self.select(p, pref, max_seq).rule()?;
        match (&self.cuda, rule.backend) {
            (Some(c), BackendKind::Cuda) => Ok((rule, c.as_ref())),
            (_, b) => Err(deltarule_core::Error::invalid(
                "backend",
                "a CUDA row (the tensors are CUDA device memory)",
                format!("{} ({b})", rule.id),
            )),
        }
    }

    /// The CUDA backend, when present.
    #[cfg(feature = "cuda")]
    pub fn cuda(&self) -> Option<&CudaBackend> {
        self.cuda.as_deref()
    }

    fn resolve(
        &self,
        p: &Problem,
        inputs: &Inputs,
        pref: Preference,
    ) -> Result<(&'static Rule, &dyn Backend)> {
        let val = validate_inputs(p, inputs)?;
        let max_seq = (0..p.seqs).map(|n| val.seq_len(n)).max();
        let rule = self.select(p, pref, max_seq).rule()?;
        let backend =
            self.backend(rule.backend)
                .ok_or_else(|| deltarule_core::Error::Unavailable {
                    backend: rule.backend,
                    reason: "selected backend not constructed".into(),
                })?;
        Ok((rule, backend))
    }
}

#[cfg(feature = "wgpu")]
fn probe_wgpu() -> std::result::Result<Arc<dyn Backend>, String> {
    let choice = deltarule_wgpu::AdapterChoice::from_env();
    deltarule_wgpu::WgpuBackend::new(choice)
        .map(|b| Arc::new(b) as Arc<dyn Backend>)
        .map_err(reason)
}

#[cfg(not(feature = "wgpu"))]
fn probe_wgpu() -> std::result::Result<Arc<dyn Backend>, String> {
    Err("this build has no wgpu backend (feature `wgpu` off)".into())
}

/// The reason a backend that failed to start gives.
#[cfg(any(feature = "wgpu", feature = "cuda"))]
fn reason(e: deltarule_core::Error) -> String {
    match e {
        deltarule_core::Error::Unavailable { reason, .. } => reason,
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use deltarule_core::{DType, Error, HostTensor, Kernel, Mode, Op};

    fn problem() -> Problem {
        Problem::new(Op::Gdn, Mode::Prefill, 2, 40, 1, 2, 16, 16)
    }

    fn inputs(p: &Problem) -> Inputs {
        let t = |dtype: DType, shape: Vec<usize>| {
            let n: usize = shape.iter().product();
            let values: Vec<f64> = (0..n).map(|i| ((i % 7) as f64 - 3.0) * 0.05).collect();
            HostTensor::from_f64(dtype, shape, &values)
        };
        Inputs {
            q: t(p.qkv_dtype, vec![p.tokens, p.h, p.k]),
            k: t(p.qkv_dtype, vec![p.tokens, p.h, p.k]),
            v: t(p.qkv_dtype, vec![p.tokens, p.hv, p.v]),
            g: HostTensor::from_f64(DType::F32, p.g_shape(), &vec![-0.1; p.tokens * p.hv]),
            beta: HostTensor::from_f64(DType::F32, vec![p.tokens, p.hv], &vec![0.5; 80]),
            cu_seqlens: HostTensor::from_i64(DType::I64, vec![3], &[0, 15, 40]),
            a_log: None,
            dt_bias: None,
            initial_state: None,
            state_indices: None,
        }
    }

    #[test]
    fn a_cpu_only_engine_runs_the_reference_under_auto() {
        let engine = Engine::cpu_only();
        let p = problem();
        let (out, rule) = engine
            .run(&p, &inputs(&p), Preference::Auto)
            .expect("the reference accepts every valid problem");
        assert_eq!(
            (rule.backend, rule.kernel),
            (BackendKind::Cpu, Kernel::Reference)
        );
        assert_eq!(out.o.shape, vec![p.tokens, p.hv, p.v]);
    }

    #[test]
    fn an_absent_backend_is_an_error_with_its_reason() {
        let engine = Engine::cpu_only();
        let p = problem();
        let pref = Preference::parse("cuda:small-bh").expect("a selection name");
        match engine.run(&p, &inputs(&p), pref) {
            Err(Error::NoEligibleRule { reasons, .. }) => {
                assert!(reasons.join("\n").contains("not probed"), "{reasons:?}")
            }
            other => panic!("expected NoEligibleRule, got {other:?}"),
        }
    }

    #[test]
    fn invalid_inputs_are_rejected_before_selection() {
        let engine = Engine::cpu_only();
        let p = problem();
        let mut bad = inputs(&p);
        bad.cu_seqlens = HostTensor::from_i64(DType::I64, vec![3], &[0, 30, 20]);
        match engine.run(&p, &bad, Preference::Auto) {
            Err(Error::InvalidArgument { field, .. }) => assert_eq!(field, "cu_seqlens[2]"),
            other => panic!("expected InvalidArgument, got {other:?}"),
        }
    }
}

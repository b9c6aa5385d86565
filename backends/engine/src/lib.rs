//! # deltarule-engine
//!
//! The facade every face (CLI, tests, benches, Python) uses: it owns the backends found on this
//! machine (the CPU always; wgpu and CUDA when compiled in and present, otherwise the reason they
//! are not), runs the selection rules of `deltarule_core::select`, and runs the chosen row.

use deltarule_core::select::{select, DeviceState, Preference, Rule, Selection};
use deltarule_core::{
    validate_inputs, Backend, BackendKind, BenchOptions, BenchReport, Inputs, Outputs, Problem,
    Result,
};
use deltarule_cpu::CpuBackend;

/// Which backends to probe when the engine starts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EngineOptions {
    pub backends: Vec<BackendKind>,
}

impl Default for EngineOptions {
    fn default() -> Self {
        EngineOptions {
            backends: BackendKind::ALL.to_vec(),
        }
    }
}

/// The engine: the backends present and the reasons for those absent.
pub struct Engine {
    backends: Vec<Box<dyn Backend>>,
    devices: Vec<DeviceState>,
}

impl Engine {
    /// Probes the backends named in `opts` (the CPU is always present).
    pub fn new(opts: &EngineOptions) -> Engine {
        let mut backends: Vec<Box<dyn Backend>> = vec![Box::new(CpuBackend::new())];
        let mut devices = vec![DeviceState::Available(backends[0].caps().clone())];
        for &kind in &opts.backends {
            match kind {
                BackendKind::Cpu => {}
                BackendKind::Wgpu | BackendKind::Cuda => match probe(kind) {
                    Ok(b) => {
                        devices.push(DeviceState::Available(b.caps().clone()));
                        backends.push(b);
                    }
                    Err(reason) => devices.push(DeviceState::Unavailable {
                        backend: kind,
                        reason,
                    }),
                },
            }
        }
        Engine { backends, devices }
    }

    /// An engine with the CPU backend only (other backends are reported as not probed).
    pub fn cpu_only() -> Engine {
        Engine::new(&EngineOptions {
            backends: vec![BackendKind::Cpu],
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
            .map(|b| b.as_ref())
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

/// Constructs a backend, or returns why it is unavailable (the constructors never panic).
fn probe(kind: BackendKind) -> std::result::Result<Box<dyn Backend>, String> {
    match kind {
        BackendKind::Cpu => Ok(Box::new(CpuBackend::new())),
        BackendKind::Wgpu => probe_wgpu(),
        BackendKind::Cuda => probe_cuda(),
    }
}

#[cfg(feature = "wgpu")]
fn probe_wgpu() -> std::result::Result<Box<dyn Backend>, String> {
    let choice = deltarule_wgpu::AdapterChoice::from_env();
    deltarule_wgpu::WgpuBackend::new(choice)
        .map(|b| Box::new(b) as Box<dyn Backend>)
        .map_err(reason)
}

#[cfg(not(feature = "wgpu"))]
fn probe_wgpu() -> std::result::Result<Box<dyn Backend>, String> {
    Err("this build has no wgpu backend (feature `wgpu` off)".into())
}

#[cfg(feature = "cuda")]
fn probe_cuda() -> std::result::Result<Box<dyn Backend>, String> {
    deltarule_cuda::CudaBackend::new(0)
        .map(|b| Box::new(b) as Box<dyn Backend>)
        .map_err(reason)
}

#[cfg(not(feature = "cuda"))]
fn probe_cuda() -> std::result::Result<Box<dyn Backend>, String> {
    Err("this build has no CUDA backend (feature `cuda` off)".into())
}

#[allow(dead_code)]
fn reason(e: deltarule_core::Error) -> String {
    match e {
        deltarule_core::Error::Unavailable { reason, .. } => reason,
        other => other.to_string(),
    }
}

//! # deltarule-wgpu (placeholder until issue 3 lands)

use deltarule_core::{
    Backend, BackendKind, Capabilities, Error, Inputs, Kernel, Outputs, Problem, Result,
};

/// Which adapter to use.
#[derive(Clone, Debug, Default)]
pub struct AdapterChoice {
    /// Substring of the adapter name to prefer (`DELTARULE_WGPU_ADAPTER`).
    pub name: Option<String>,
}

impl AdapterChoice {
    /// Reads `DELTARULE_WGPU_ADAPTER`.
    pub fn from_env() -> Self {
        AdapterChoice {
            name: std::env::var("DELTARULE_WGPU_ADAPTER").ok(),
        }
    }
}

/// The wgpu backend (not implemented yet).
pub struct WgpuBackend {
    caps: Capabilities,
}

impl WgpuBackend {
    pub fn new(_choice: AdapterChoice) -> Result<Self> {
        Err(Error::Unavailable {
            backend: BackendKind::Wgpu,
            reason: "the wgpu backend is not implemented in this build".into(),
        })
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
        &[]
    }
    fn run(&self, kernel: Kernel, _p: &Problem, _inputs: &Inputs) -> Result<Outputs> {
        Err(Error::unsupported(
            BackendKind::Wgpu,
            kernel.name(),
            "not implemented",
        ))
    }
}

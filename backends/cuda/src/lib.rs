//! # deltarule-cuda (placeholder until issue 4 lands)

use deltarule_core::{
    Backend, BackendKind, Capabilities, Error, Inputs, Kernel, Outputs, Problem, Result,
};

/// The CUDA backend (not implemented yet).
pub struct CudaBackend {
    caps: Capabilities,
}

impl CudaBackend {
    pub fn new(_ordinal: usize) -> Result<Self> {
        Err(Error::Unavailable {
            backend: BackendKind::Cuda,
            reason: "the CUDA backend is not implemented in this build".into(),
        })
    }
}

impl Backend for CudaBackend {
    fn kind(&self) -> BackendKind {
        BackendKind::Cuda
    }
    fn caps(&self) -> &Capabilities {
        &self.caps
    }
    fn kernels(&self) -> &'static [Kernel] {
        &[]
    }
    fn run(&self, kernel: Kernel, _p: &Problem, _inputs: &Inputs) -> Result<Outputs> {
        Err(Error::unsupported(
            BackendKind::Cuda,
            kernel.name(),
            "not implemented",
        ))
    }
}

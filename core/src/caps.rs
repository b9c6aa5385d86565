//! What a backend's device can do, as reported by the backend (selection reads it; backends never
//! select).

use std::fmt;

/// The backends the engine knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum BackendKind {
    Cpu,
    Wgpu,
    Cuda,
}

impl BackendKind {
    pub const ALL: [BackendKind; 3] = [BackendKind::Cpu, BackendKind::Wgpu, BackendKind::Cuda];

    pub fn name(self) -> &'static str {
        match self {
            BackendKind::Cpu => "cpu",
            BackendKind::Wgpu => "wgpu",
            BackendKind::Cuda => "cuda",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        BackendKind::ALL.into_iter().find(|b| b.name() == s)
    }
}

impl fmt::Display for BackendKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Capabilities of one device of one backend.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Capabilities {
    pub backend: BackendKind,
    /// Human-readable device name (adapter name, GPU name, CPU thread count).
    pub device: String,
    /// CUDA compute capability `(major, minor)`.
    pub compute_capability: Option<(u32, u32)>,
    /// Number of multiprocessors (CUDA) or compute units when known.
    pub multiprocessors: Option<u32>,
    /// Largest workgroup/shared memory per block, bytes.
    pub max_workgroup_storage: u32,
    /// Storage buffers per shader stage (wgpu).
    pub max_storage_buffers_per_stage: u32,
    pub max_invocations_per_workgroup: u32,
    pub subgroups: bool,
    /// Smallest and largest subgroup (warp) size.
    pub subgroup_size: (u32, u32),
    pub shader_f16: bool,
    pub timestamps: bool,
    pub cooperative_matrix: bool,
    /// Extra facts worth printing (driver version, backend API, ...).
    pub notes: Vec<String>,
}

impl Capabilities {
    /// A CUDA device's capabilities as the CUDA backend reports them: compute capability `cc`,
    /// `sms` multiprocessors (those the launch rules assume), `smem` bytes of opt-in shared
    /// memory a block, and `notes` to print.
    pub fn cuda(device: String, cc: (u32, u32), sms: u32, smem: u32, notes: Vec<String>) -> Self {
        Capabilities {
            backend: BackendKind::Cuda,
            device,
            compute_capability: Some(cc),
            multiprocessors: Some(sms),
            max_workgroup_storage: smem,
            max_storage_buffers_per_stage: u32::MAX,
            max_invocations_per_workgroup: 1024,
            subgroups: true,
            subgroup_size: (32, 32),
            shader_f16: true,
            timestamps: true,
            cooperative_matrix: true,
            notes,
        }
    }

    /// An assumed CUDA device for planning where none is present (`deltarule select
    /// --cuda-sms`): a Hopper (sm_90, 227 KiB of shared memory a block) with `sms`
    /// multiprocessors. Nothing can run on it.
    pub fn assumed_cuda(sms: u32) -> Self {
        Self::cuda(
            format!("assumed sm_90 with {sms} multiprocessors (planning only)"),
            (9, 0),
            sms,
            227 * 1024,
            Vec::new(),
        )
    }

    /// Capabilities of the host CPU backend.
    pub fn cpu(threads: usize) -> Self {
        Capabilities {
            backend: BackendKind::Cpu,
            device: format!("host CPU, {threads} threads"),
            compute_capability: None,
            multiprocessors: Some(threads as u32),
            max_workgroup_storage: u32::MAX,
            max_storage_buffers_per_stage: u32::MAX,
            max_invocations_per_workgroup: u32::MAX,
            subgroups: false,
            subgroup_size: (1, 1),
            shader_f16: false,
            timestamps: false,
            cooperative_matrix: false,
            notes: Vec::new(),
        }
    }

    /// A compact one-line summary for `deltarule backends`.
    pub fn summary(&self) -> String {
        let mut parts = vec![self.device.clone()];
        if let Some((a, b)) = self.compute_capability {
            parts.push(format!("sm_{a}{b}"));
        }
        if let Some(m) = self.multiprocessors {
            if self.backend != BackendKind::Cpu {
                parts.push(format!("{m} multiprocessors"));
            }
        }
        if self.backend != BackendKind::Cpu {
            parts.push(format!(
                "workgroup storage {} KiB",
                self.max_workgroup_storage / 1024
            ));
        }
        if self.backend == BackendKind::Wgpu {
            parts.push(format!(
                "{} storage buffers/stage",
                self.max_storage_buffers_per_stage
            ));
            parts.push(format!(
                "subgroups {}",
                if self.subgroups {
                    format!("{}..{}", self.subgroup_size.0, self.subgroup_size.1)
                } else {
                    "no".into()
                }
            ));
            parts.push(format!("f16 {}", yes(self.shader_f16)));
            parts.push(format!("timestamps {}", yes(self.timestamps)));
            parts.push(format!(
                "cooperative matrix {}",
                yes(self.cooperative_matrix)
            ));
        }
        parts.extend(self.notes.iter().cloned());
        parts.join(", ")
    }
}

fn yes(b: bool) -> &'static str {
    if b {
        "yes"
    } else {
        "no"
    }
}

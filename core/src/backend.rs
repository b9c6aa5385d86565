//! The backend trait: small, typed, fallible. Backends report capabilities and run kernels;
//! they never select (selection is [`crate::select`](mod@crate::select)).

use crate::caps::{BackendKind, Capabilities};
use crate::error::{Error, Result};
use crate::problem::{Inputs, Outputs, Problem};
use std::fmt;

/// A kernel family of a backend. Rules name one; backends implement the ones their rows claim.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kernel {
    /// The float64 token recurrence: the executable spec (CPU only).
    Reference,
    /// Chunked prefill (docs/spec.md section 5) in the backend's working precision.
    Chunked,
    /// Chunked prefill in float64 (CPU only; cross-checks the chunked stage split).
    ChunkedF64,
    /// Segment-parallel prefill in float64 (CPU only; docs/segments.md): every sequence cut into
    /// segments, each segment summarised as an affine map of its incoming state, the summaries
    /// chained along the sequence, every segment run from its true incoming state.
    Segmented,
    /// Token-sequential recurrence for decode (T >= 1 tokens per sequence), in place on a pool.
    Recurrent,
    /// Chunked prefill split for few (sequence x value head) pairs.
    SmallBh,
    /// Chunked prefill with cooperative-matrix (tensor-core) products, f16 operands and f32
    /// accumulation (wgpu, where the adapter offers 16x16x16 f16 -> f32 matrices).
    Coop,
}

impl Kernel {
    pub const ALL: [Kernel; 7] = [
        Kernel::Reference,
        Kernel::Chunked,
        Kernel::ChunkedF64,
        Kernel::Segmented,
        Kernel::Recurrent,
        Kernel::SmallBh,
        Kernel::Coop,
    ];
    pub fn name(self) -> &'static str {
        match self {
            Kernel::Reference => "reference",
            Kernel::Chunked => "chunked",
            Kernel::ChunkedF64 => "chunked-f64",
            Kernel::Segmented => "segmented",
            Kernel::Recurrent => "recurrent",
            Kernel::SmallBh => "small-bh",
            Kernel::Coop => "coop",
        }
    }
    pub fn parse(s: &str) -> Option<Kernel> {
        Kernel::ALL.into_iter().find(|k| k.name() == s)
    }
}

impl fmt::Display for Kernel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// How a benchmark is run.
#[derive(Clone, Debug, PartialEq)]
pub struct BenchOptions {
    /// Calls before timing; backends run at least one per input set (a buffer's first use can be
    /// slow, e.g. lazily backed memory on NVIDIA's Vulkan driver).
    pub warmup: usize,
    pub iters: usize,
    /// Rotate among enough input copies that together they exceed this many bytes (larger than
    /// the device's last-level cache), so repeated calls do not measure the cache.
    pub rotate_bytes: usize,
}

impl Default for BenchOptions {
    fn default() -> Self {
        BenchOptions {
            warmup: 5,
            iters: 50,
            rotate_bytes: 256 << 20,
        }
    }
}

/// Raw timings of a benchmark: one entry per timed call.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct BenchReport {
    /// Device time per call, milliseconds (device timers: CUDA events, timestamp queries).
    pub device_ms: Vec<f64>,
    /// Host time spent in the call (argument checks, encoding, launch), microseconds.
    pub host_us: Vec<f64>,
    /// What measured `device_ms`.
    pub timer: String,
    /// Number of rotating input sets.
    pub input_sets: usize,
    /// The device the numbers come from.
    pub device: String,
    /// Median device time per stage of one call (kernel or pass label, ms) where the backend can
    /// time its stages separately; empty otherwise.
    pub stages: Vec<(String, f64)>,
}

/// Median of a list (0 for an empty list).
pub fn median(xs: &[f64]) -> f64 {
    if xs.is_empty() {
        return 0.0;
    }
    let mut v = xs.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    let m = v.len() / 2;
    if v.len() % 2 == 1 {
        v[m]
    } else {
        0.5 * (v[m - 1] + v[m])
    }
}

/// A compute backend. Host in, host out: `run` validates, uploads, poisons every output with NaN,
/// launches and downloads. Device-resident entry points (raw pointers and streams) live on the
/// backend types themselves, below this trait.
pub trait Backend: Send + Sync {
    fn kind(&self) -> BackendKind;

    fn caps(&self) -> &Capabilities;

    /// The kernel families this backend implements.
    fn kernels(&self) -> &'static [Kernel];

    /// Runs `kernel` on `p`. Validation errors are returned before any device work.
    fn run(&self, kernel: Kernel, p: &Problem, inputs: &Inputs) -> Result<Outputs>;

    /// Times `kernel` on `p` with the device's own timers.
    fn bench(
        &self,
        kernel: Kernel,
        p: &Problem,
        inputs: &Inputs,
        opts: &BenchOptions,
    ) -> Result<BenchReport> {
        let _ = (p, inputs, opts);
        Err(Error::unsupported(
            self.kind(),
            kernel.name(),
            "this backend has no benchmark timer",
        ))
    }
}

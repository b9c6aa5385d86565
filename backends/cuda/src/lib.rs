//! # deltarule-cuda
//!
//! The CUDA backend: cudarc (driver + NVRTC, loaded dynamically) and the CUDA C++ kernels of
//! `kernels/`, compiled at run time for the device's architecture.
//!
//! Kernel families (selection rows in `deltarule_core::select`, `cuda.*`):
//! * `chunked` (`{op}_prefill_fused`): one CTA per (sequence, value head) walks its 64-token
//!   chunks; intra-chunk products on tensor cores (`mma.sync.m16n8k16`, bf16/f16 operands, f32
//!   accumulation), the inverse in f32, the running state in f32 registers. For gdn with K, V >=
//!   64 and a dense f32 final state the fused T-form instead (`gdn_prefill_fused_tform`, two CTAs
//!   an SM: the T-form intra stage kept in shared memory, the state work per 64 V columns with
//!   the first V tile loaded during the intra stage and the state products in 32 x 32 warp
//!   quadrants, the state between chunks in the final-state row;
//!   `deltarule_core::variants::fused_tform_applies`).
//! * `small-bh` (`{op}_prefill_intra` + a state pass): a chunk-parallel intra kernel writes W, U,
//!   P, q̃, k̃ per chunk into a workspace, then a state pass walks the chunks with the transposed
//!   state in mma accumulators ([`plan::StatePass`]): on sm_90a (K in {64, 128}, V >= 64) one
//!   warpgroup per 64 V columns on `wgmma`, operands brought by TMA tensor maps
//!   (`{op}_prefill_state_wgmma`); for gdn with 16-bit inputs there the T-form pair instead
//!   (`gdn_prefill_intra_tform` writes only T_w, T_u, P and per-token factors, ~37 KB a block
//!   instead of ~92; `gdn_prefill_state_tform_wgmma` builds W·S and U from the inputs' k and v
//!   rows by TMA and stores o by TMA), overlapped where its state pass has at most half the SMs'
//!   worth of CTAs ([`plan::overlap_plan`]: a persistent `gdn_prefill_intra_tform_overlap` frees
//!   SMs part-way, the state pass starts there by programmatic dependent launch and waits per
//!   chunk for ready flags), or, where its chain would idle the GPU, run over segments of each
//!   sequence, exactly ([`plan::segment_plan`], docs/segments.md: the state pass for each segment's
//!   final state and transition, an f32 combine, the pass again from the true incoming states);
//!   else, and for few pairs, `mma.sync` over 16-, 32- or 64-column V
//!   tiles (`{op}_prefill_state16|32|64`: a state and an output warp per 16 V columns, bulk
//!   copies two chunks ahead). `auto` takes it for few (sequence x value head) pairs, and for
//!   many while the workspace stays under 16 Ki blocks (measured faster than `chunked` there on
//!   the H200); `chunked` beyond that.
//! * `recurrent` (`{op}_decode_block4|5|6|persistent`, [`plan::DecodeForm`]): the token
//!   recurrence for decode (T >= 1 tokens per sequence), V-split, in place on a state pool.
//!
//! Entry points: the host-in/host-out [`Backend`](deltarule_core::Backend) implementation
//! (host.rs: validates, uploads, poisons the outputs with NaN, launches, downloads; and `bench`,
//! timed with CUDA events), and the raw device-pointer API [`CudaBackend::launch`] (see
//! [`launch`] for its contract) after [`CudaBackend::reserve`].
//!
//! Modules: [`plan`] decides every launch (pure, unit-tested), [`options`] reads the tuning
//! variables once, `dispatch.rs` carries a plan out on a stream, `tmap.rs` encodes the TMA
//! tensor maps, [`launch`] mirrors the kernels' parameter block and lays out the workspace,
//! [`device`] loads modules and owns device memory, [`kernels`] compiles the sources.
//!
//! Construction never panics: it checks that libcuda and libnvrtc can be loaded before any other
//! cudarc call and returns `Error::Unavailable` with what was searched otherwise. Compiled CUBINs
//! are cached in memory and, when `DELTARULE_CUDA_CACHE` names a folder (or
//! [`CudaBackend::with_cache_dir`] is used), on disk across processes.

pub mod device;
mod dispatch;
mod host;
pub mod kernels;
pub mod launch;
pub mod options;
pub mod plan;
mod segments;
mod tmap;

pub use launch::{DevicePtrs, Params, Workspace, WorkspaceLayout};
pub use options::{Flags, Options};
pub use plan::{needs_tables, recurrent_launch, DecodeForm};

use cudarc::driver::{sys, CudaContext, CudaStream};
use deltarule_core::{BackendKind, Capabilities, DType, Error, Kernel, Problem, Result};
use device::{drv, DeviceBuffer, Loaded, ModuleCache};
use kernels::{Defines, Module};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

/// The CUDA backend on one device.
pub struct CudaBackend {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    caps: Capabilities,
    arch: String,
    max_smem: i32,
    cache_dir: Option<PathBuf>,
    modules: ModuleCache,
    workspace: Mutex<Workspace>,
    options: Options,
}

fn unavailable(reason: impl Into<String>) -> Error {
    Error::Unavailable {
        backend: BackendKind::Cuda,
        reason: reason.into(),
    }
}

impl CudaBackend {
    /// Opens device `ordinal` (its primary context, shared with PyTorch), or says why not; the
    /// CUBIN cache folder is `DELTARULE_CUDA_CACHE`, the options those of [`Options::from_env`].
    pub fn new(ordinal: usize) -> Result<Self> {
        let cache = std::env::var_os("DELTARULE_CUDA_CACHE").map(PathBuf::from);
        Self::with_cache_dir(ordinal, cache)
    }

    /// As [`CudaBackend::new`], with an explicit on-disk CUBIN cache folder.
    pub fn with_cache_dir(ordinal: usize, cache_dir: Option<PathBuf>) -> Result<Self> {
        if !device::driver_present() {
            return Err(unavailable(
                "libcuda not found (searched libcuda.so, libcuda.so.1 and the other cudarc \
                 candidates on the loader path): no NVIDIA driver on this machine",
            ));
        }
        if !kernels::nvrtc_present() {
            return Err(unavailable(
                "libnvrtc not found (searched libnvrtc.so, libnvrtc.so.13 and the other cudarc \
                 candidates on the loader path): install the CUDA toolkit or the \
                 nvidia-cuda-nvrtc wheel and put its lib folder on LD_LIBRARY_PATH",
            ));
        }
        let options = Options::from_env()?;
        let ctx = CudaContext::new(ordinal)
            .map_err(|e| unavailable(format!("no CUDA device {ordinal}: {e:?}")))?;
        let (ma, mi) = ctx
            .compute_capability()
            .map_err(|e| drv("compute capability", e))?;
        let attr = |a| ctx.attribute(a).map_err(|e| drv("device attribute", e));
        let all_sms = attr(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?;
        let sms = options::sms_from_env(all_sms)?;
        let smem =
            attr(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)?;
        let name = ctx.name().unwrap_or_else(|_| "CUDA device".into());
        let stream = ctx.new_stream().map_err(|e| drv("create stream", e))?;
        let arch = kernels::arch_for((ma as u32, mi as u32));
        let caps = Capabilities::cuda(
            name,
            (ma as u32, mi as u32),
            sms as u32,
            smem as u32,
            std::iter::once(format!("NVRTC target {arch}"))
                .chain((sms != all_sms).then(|| {
                    format!("DELTARULE_CUDA_SMS: launch rules assume {sms} of {all_sms} SMs")
                }))
                .collect(),
        );
        Ok(CudaBackend {
            ctx,
            stream,
            caps,
            arch,
            max_smem: smem,
            cache_dir,
            modules: ModuleCache::default(),
            workspace: Mutex::new(Workspace::new()),
            options,
        })
    }

    /// The launch options in effect ([`Options::from_env`] at construction).
    pub fn options(&self) -> &Options {
        &self.options
    }

    /// Replaces the launch options (benchmarks and tests: a forced decode form or state pass
    /// without environment variables). Loaded modules are kept.
    pub fn set_options(&mut self, options: Options) {
        self.options = options;
    }

    /// The NVRTC architecture of this device (`sm_90a` on the H200).
    pub fn arch(&self) -> &str {
        &self.arch
    }

    /// The backend's own stream (`CUstream`), used by `Backend::run` and `Backend::bench`.
    pub fn stream_handle(&self) -> u64 {
        self.stream.cu_stream() as u64
    }

    fn bind(&self) -> Result<()> {
        self.ctx
            .bind_to_thread()
            .map_err(|e| drv("bind context", e))
    }

    /// Whether `kernel` implements `p`, a problem `Problem::validate` accepts (what the selection
    /// rows promise), with the reason if not ([`plan::check_supported`]).
    pub fn supports(&self, kernel: Kernel, p: &Problem) -> Result<()> {
        plan::check_supported(kernel, p)
    }

    fn defines(p: &Problem) -> Defines {
        Defines {
            head_k: p.k,
            head_v: p.v,
            mma_f16: p.qkv_dtype == DType::F16,
        }
    }

    /// The loaded module build (compiled on first use: the warm-up).
    fn module(&self, module: Module, defines: &Defines) -> Result<Arc<Loaded>> {
        let key = (module, defines.for_module(module));
        if let Some(m) = self
            .modules
            .read()
            .map_err(|_| drv("module cache", "poisoned lock"))?
            .get(&key)
        {
            return Ok(m.clone());
        }
        let mut w = self
            .modules
            .write()
            .map_err(|_| drv("module cache", "poisoned lock"))?;
        if let Some(m) = w.get(&key) {
            return Ok(m.clone());
        }
        let loaded = Arc::new(device::load(
            &self.ctx,
            module,
            &self.arch,
            &key.1,
            self.cache_dir.as_deref(),
            self.max_smem,
        )?);
        w.insert(key, loaded.clone());
        Ok(loaded)
    }

    /// Warm-up for (kernel, problem): compiles and loads the kernels and grows `ws` to the size
    /// the launches need. Call before [`CudaBackend::launch`] (and before graph capture), with
    /// the same `max_seq`: the longest sequence's tokens where the caller knows them (the launch
    /// plan's segment rule uses it), else None.
    pub fn reserve(
        &self,
        ws: &mut Workspace,
        kernel: Kernel,
        p: &Problem,
        max_seq: Option<usize>,
    ) -> Result<()> {
        p.validate()?;
        p.validate_longest_sequence(max_seq)?;
        self.supports(kernel, p)?;
        self.grow(ws, kernel, p, max_seq)
    }

    /// [`CudaBackend::reserve`] for a problem already validated and supported.
    fn grow(
        &self,
        ws: &mut Workspace,
        kernel: Kernel,
        p: &Problem,
        max_seq: Option<usize>,
    ) -> Result<()> {
        let layout = self.layout(kernel, p, max_seq)?;
        self.module(Module::Varlen, &Self::defines(p))?;
        if ws.bytes() < layout.total {
            if ws.is_external() {
                return Err(Error::invalid(
                    "workspace",
                    format!(
                        "at least {} bytes for {kernel} on this problem",
                        layout.total
                    ),
                    format!("{} bytes", ws.bytes()),
                ));
            }
            ws.buf = None;
            ws.buf = Some(DeviceBuffer::alloc(&self.ctx, layout.total)?);
        }
        Ok(())
    }

    /// The workspace layout of (kernel, problem) (loads the kernel's module); `max_seq` as for
    /// [`CudaBackend::reserve`].
    pub fn workspace_layout(
        &self,
        kernel: Kernel,
        p: &Problem,
        max_seq: Option<usize>,
    ) -> Result<WorkspaceLayout> {
        p.validate()?;
        p.validate_longest_sequence(max_seq)?;
        self.supports(kernel, p)?;
        self.layout(kernel, p, max_seq)
    }

    /// (The plan with an aligned o: a call whose o the TMA store cannot address needs no more.)
    fn layout(
        &self,
        kernel: Kernel,
        p: &Problem,
        max_seq: Option<usize>,
    ) -> Result<WorkspaceLayout> {
        let m = self.module(launch::module_for(p.op, kernel), &Self::defines(p))?;
        let sms = self.caps.multiprocessors.unwrap_or(132) as usize;
        let plan = plan::plan(kernel, p, &m.sizes, &self.options, sms, 0, max_seq)?;
        Ok(WorkspaceLayout::new(
            kernel,
            p,
            m.sizes.block_bytes,
            plan.segments.as_ref(),
        ))
    }
}

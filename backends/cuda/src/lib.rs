//! # deltarule-cuda
//!
//! The CUDA backend: cudarc (driver + NVRTC, loaded dynamically) and the CUDA C++ kernels of
//! `kernels/`, compiled at run time for the device's architecture.
//!
//! Kernel families (selection rows in `deltarule_core::select`, `cuda.*`):
//! * `chunked` (`{op}_prefill_fused`): one CTA per (sequence, value head) walks its 64-token
//!   chunks; intra-chunk products on tensor cores (`mma.sync.m16n8k16`, bf16/f16 operands, f32
//!   accumulation), the inverse in f32, the running state in f32 registers; for gdn with K, V >=
//!   64 and a dense f32 final state the fused T-form instead (`gdn_prefill_fusedt`, two CTAs an
//!   SM: the T-form intra stage kept in shared memory, the state work per 64 V columns, the state
//!   between chunks in the final-state row; `fused_t_applies`; the default entry `_fusedtr` loads
//!   the first V tile early and runs the state products in 32 x 32 warp quadrants, see `Modes`);
//! * `small-bh` (`{op}_prefill_intra` + `{op}_prefill_state`): a chunk-parallel intra kernel
//!   writes W, U, P, q̃, k̃ per chunk into a workspace, then a state pass walks the chunks with
//!   the transposed state in mma accumulators: on sm_90a (K in {64, 128}, V >= 64) one warpgroup
//!   per 64 V columns on `wgmma`, operands brought by TMA tensor maps (`{op}_prefill_statewg`);
//!   for gdn with 16-bit inputs there the T-form pair instead (`gdn_prefill_intrat` writes only
//!   T_w, T_u, P and per-token factors, ~37 KB a block instead of ~92; `gdn_prefill_statewgt`
//!   builds W·S and U from the inputs' k and v rows by TMA and stores o by TMA), overlapped
//!   where its state pass has at most half the SMs' worth of CTAs ([`overlap_plan`]: a
//!   persistent `gdn_prefill_intratov` frees SMs part-way, the state pass starts there by
//!   programmatic dependent launch and waits per chunk for ready flags); else, and for
//!   few pairs, `mma.sync` over 16-, 32- or 64-column V tiles (a state and an output
//!   warp per 16 V columns, bulk copies two chunks ahead). `auto` takes it for few
//!   (sequence x value head) pairs, and for many while the workspace stays under 16 Ki blocks
//!   (measured faster than `chunked` there on the H200, session 6); `chunked` beyond that;
//! * `recurrent` (`{op}_decode_recurrent`): the token recurrence for decode (T >= 1 tokens per
//!   sequence), V-split, in place on a state pool.
//!
//! Entry points: the host-in/host-out [`Backend`] implementation (validates, uploads, poisons the
//! outputs with NaN, launches, downloads), [`CudaBackend::bench`] (CUDA events), and the raw
//! device-pointer API [`CudaBackend::launch`] (see [`launch`] for its contract).
//!
//! Construction never panics: it checks that libcuda and libnvrtc can be loaded before any other
//! cudarc call and returns `Error::Unavailable` with what was searched otherwise. Compiled CUBINs
//! are cached in memory and, when `DELTARULE_CUDA_CACHE` names a folder (or
//! [`CudaBackend::with_cache_dir`] is used), on disk across processes.

pub mod device;
pub mod kernels;
pub mod launch;

use cudarc::driver::{result, sys, CudaContext, CudaStream};
use deltarule_core::{
    validate_inputs, Backend, BackendKind, BenchOptions, BenchReport, Capabilities, DType, Error,
    FinalState, HostTensor, InitialState, Inputs, Kernel, Mode, Op, Outputs, Problem, Result,
};
use device::{drv, DeviceBuffer, Loaded, ModuleCache};
use kernels::{Defines, Module, HEAD_DIMS};
pub use launch::{DevicePtrs, Params, Workspace, WorkspaceLayout};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Instant;

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
    /// Forced small-bh state pass (`DELTARULE_CUDA_STATE_BV=16|32|64|wg|wgt`, read once; benchmarks:
    /// an mma.sync tile width, or the wgmma pass; 64 falls back to 32 where V < 64, wg to the
    /// automatic choice where the module has no wgmma pass).
    state_bv: Option<StatePass>,
    /// The overlapped T-form pair (`DELTARULE_CUDA_OVERLAP=off|<percent>`, read once; benchmarks).
    overlap: OverlapSetting,
    /// `DELTARULE_CUDA_OVERLAP_TRACE=1`: the overlapped pair's kernels print a timeline (device
    /// printf; diagnosis only).
    overlap_trace: bool,
    /// `DELTARULE_CUDA_FUSED=classic`: `chunked` keeps the classic fused kernel where the fused
    /// T-form would apply (benchmarks; read once).
    fused_classic: bool,
    /// Kernel variant bits (`DELTARULE_CUDA_MODE`, read once; benchmarks).
    modes: Modes,
}

/// Kernel variants selected by bits of `Params::mode` (kernels/common.cuh, `MODE_*`). Production
/// takes [`Modes::DEFAULT`]; `DELTARULE_CUDA_MODE=<bits>` replaces it (benchmarks).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Modes(pub i32);

impl Modes {
    /// The small-bh T-form intra kernel runs every value head of a GVA group in one CTA.
    pub const INTRA_PAIR: i32 = 1;
    /// The fused T-form runs persistent CTAs (two an SM) over its items.
    pub const FT_PERSIST: i32 = 4;
    /// Persistent fused T-form: the next item's first q, k, v rows to L2.
    pub const FT_PF_QKV: i32 = 8;
    /// Persistent fused T-form: the next item's initial state to L2.
    pub const FT_PF_H0: i32 = 16;
    /// The fused T-form without its L2 prefetches of the chunk's V rows and the next chunk's rows.
    pub const FT_NO_PF: i32 = 32;
    /// The fused T-form without the L2 prefetch of an item's initial state.
    pub const FT_NO_H0PF: i32 = 64;
    /// The small-bh T-form pair without the overlap: the state pass as a programmatic
    /// dependent launch of the intra kernel.
    pub const PDL: i32 = 128;
    /// With INTRA_PAIR: a head's wait for its bulk copies moves into the next head's stage.
    pub const INTRA_DEFER: i32 = 256;
    /// The T-form state pass without the overlap prefetches a later CTA's first inputs to L2.
    pub const STATE_PF: i32 = 512;
    /// The T-form state pass without the overlap takes the sequences last first.
    pub const STATE_REV: i32 = 1024;
    /// The T-form intra kernel without the overlap stores T_w, T_u and the factors from the
    /// threads instead of bulk copies.
    pub const INTRA_ST: i32 = 2048;
    /// The fused T-form loads its first state tile during the intra stage (`_fusedtq`).
    pub const FT_PIPE: i32 = 4096;
    /// The T-form state pass without the overlap prefetches a later CTA's initial state to L2.
    pub const STATE_H0PF: i32 = 8192;
    // (16384: the T-form state pass as persistent CTAs, session 18: slower, removed)
    /// The fused T-form's early first-tile loads with its state products in 32 x 32 warp
    /// quadrants (`_fusedtr`).
    pub const FT_QUAD: i32 = 32768;
    /// The token recurrence's entry point with 64 registers and 6 blocks an SM (production until
    /// session 25), instead of 96 and 4.
    pub const DEC_LB6: i32 = 65536;
    /// The token recurrence's entry point with 80 registers and 5 blocks an SM.
    pub const DEC_LB5: i32 = 131072;
    /// The token recurrence on a persistent grid (`{op}_decode_persistent`, 4 blocks an SM), the
    /// next item's state tile in flight into shared memory by cp.async.
    pub const DEC_PERSIST: i32 = 262144;
    /// The token recurrence's block-per-item entry point with 96 registers and 4 blocks an SM,
    /// whatever the tokens per sequence (without a `DEC_*` bit, [`DecodeForm::pick`] chooses).
    pub const DEC_LB4: i32 = 524288;
    const ALL: i32 = 1
        | 4
        | 8
        | 16
        | 32
        | 64
        | 128
        | 256
        | 512
        | 1024
        | 2048
        | 4096
        | 8192
        | 32768
        | 65536
        | 131072
        | 262144
        | 524288;
    /// What production runs: the intra pairing, the dependent launch and the deferred copy wait
    /// (session 16, gdn 16/32 16x1024 on the H200: 0.569 -> 0.522 ms), the fused T-form's early
    /// first-tile loads (session 17, 256x64: 0.878 -> 0.866 ms) and its quadrant products
    /// (session 18, 256x64: 0.862 -> 0.847 ms; bench/NOTES.md).
    pub const DEFAULT: Modes =
        Modes(Self::INTRA_PAIR | Self::PDL | Self::INTRA_DEFER | Self::FT_PIPE | Self::FT_QUAD);

    /// `DELTARULE_CUDA_MODE` (a number of the bits above), or the default.
    pub fn from_env() -> Result<Modes> {
        match std::env::var("DELTARULE_CUDA_MODE") {
            Err(_) => Ok(Self::DEFAULT),
            Ok(s) => Self::parse(&s),
        }
    }

    /// A value of `DELTARULE_CUDA_MODE`: a decimal number made of the bits above.
    pub fn parse(s: &str) -> Result<Modes> {
        match s.trim().parse::<i32>() {
            Ok(b) if b >= 0 && b & !Self::ALL == 0 => Ok(Modes(b)),
            _ => Err(Error::invalid(
                "DELTARULE_CUDA_MODE",
                format!(
                    "a decimal number made of the bits {} (1, 4, .., 524288)",
                    Self::ALL
                ),
                s,
            )),
        }
    }

    fn has(self, bit: i32) -> bool {
        self.0 & bit != 0
    }

    /// The token recurrence's form on `p`: the one a `DEC_*` bit forces (persistent, 6, 5, then
    /// 4 blocks an SM), else [`DecodeForm::pick`]'s choice by tokens per sequence and, on
    /// `sms` multiprocessors, by work items.
    pub fn decode_form(self, p: &Problem, sms: usize) -> DecodeForm {
        if self.has(Self::DEC_PERSIST) {
            DecodeForm::Persistent
        } else if self.has(Self::DEC_LB6) {
            DecodeForm::Block6
        } else if self.has(Self::DEC_LB5) {
            DecodeForm::Block5
        } else if self.has(Self::DEC_LB4) {
            DecodeForm::Block4
        } else {
            DecodeForm::pick(p.op, p.tokens, p.seqs, decode_items(p), sms)
        }
    }

    /// Value heads a CTA of the small-bh T-form intra kernel takes (1, or the GVA group).
    pub fn intra_heads(self, p: &Problem) -> usize {
        if self.has(Self::INTRA_PAIR) {
            p.group()
        } else {
            1
        }
    }

    /// The fused T-form's entry point (after `{op}_prefill_`): persistent CTAs win over the
    /// pipelined tile loads, which the persistent form does not have.
    pub fn fused_t_entry(self) -> &'static str {
        if self.has(Self::FT_PERSIST) {
            "fusedtp"
        } else if self.has(Self::FT_QUAD) {
            "fusedtr"
        } else if self.has(Self::FT_PIPE) {
            "fusedtq"
        } else {
            "fusedt"
        }
    }

    /// Grid of the fused T-form: one CTA per (value head, sequence), or persistent CTAs, two an
    /// SM, over the (sequence, value head) items.
    pub fn fused_t_grid(self, p: &Problem, sms: usize) -> (u32, u32, u32) {
        if self.has(Self::FT_PERSIST) {
            ((p.hv * p.seqs).min(2 * sms).max(1) as u32, 1, 1)
        } else {
            (p.hv as u32, p.seqs as u32, 1)
        }
    }
}

/// The token recurrence's forms: a block per (V tile, value head, sequence) item under three
/// register budgets (`__launch_bounds__(160, 4 | 5 | 6)`: 96, 80 or 64 registers), or a
/// persistent grid of 4 blocks an SM walking the items with the next item's state tile in flight
/// by cp.async (kernels/decode.cuh). All four give the same bits (device test
/// `recurrent_entry_points_agree`, the CPU emulator).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DecodeForm {
    Block4,
    Block5,
    Block6,
    Persistent,
}

impl DecodeForm {
    /// The production choice by mean tokens per sequence `a = tokens / seqs`, from sessions 29
    /// and 30's sweeps (H100, 256 sequences, K = V = 128, f32 pool states; bench/NOTES.md): one
    /// token moves the state and little else, and the most registers win (4 blocks; 5 and 6 lose
    /// 2 to 3 %); with several tokens each token's input loads sit between two state updates, and
    /// more resident blocks hide them: at 2 tokens 5 blocks (gdn -3 %, kda -7 % against 4), at 3
    /// to 8 gdn takes 6 blocks (-12 to -21 %) while kda, which spills at 64 registers, takes the
    /// persistent form at 3 to 6 (-12 to -14 %; at 6 it ties 5 blocks within 0.7 %) and 5 blocks
    /// at 8 (0.827 against the persistent form's 0.870 ms). Bands: a < 1.5 four blocks; gdn
    /// a < 2.5 five, else six; kda a < 3 five, a < 7 persistent (the crossover lies between 6 and
    /// 8), else five. Whatever the tokens, when the 4-block form's blocks are all resident at
    /// once (`items <= 4 x sms`: few sequences, as in a small batch's speculative verify) more
    /// resident blocks have nothing to hide and only cost registers: 4 blocks (session 32, H100,
    /// 128 to 512 items at 2 to 8 tokens: gdn -2 to -7 %, kda -3 to -9 % against the bands'
    /// choice; at 1024 items the bands' choice stays ahead).
    pub fn pick(op: Op, tokens: usize, seqs: usize, items: usize, sms: usize) -> DecodeForm {
        let (t, n) = (tokens as u128, seqs.max(1) as u128);
        if 2 * t < 3 * n || items <= Self::one_wave(sms) {
            return DecodeForm::Block4;
        }
        match op {
            Op::Gdn if 2 * t < 5 * n => DecodeForm::Block5,
            Op::Gdn => DecodeForm::Block6,
            Op::Kda if t < 3 * n => DecodeForm::Block5,
            Op::Kda if t < 7 * n => DecodeForm::Persistent,
            Op::Kda => DecodeForm::Block5,
        }
    }

    /// Blocks resident at once on `sms` SMs at 4 an SM (the 4-block form's and the persistent
    /// form's `__launch_bounds__`): the persistent grid, and the item count up to which every
    /// form's blocks would fit in one wave.
    fn one_wave(sms: usize) -> usize {
        4 * sms.max(1)
    }

    /// The entry point after `{op}_decode_`.
    pub fn entry(self) -> &'static str {
        match self {
            DecodeForm::Block4 => "recurrent",
            DecodeForm::Block5 => "recurrent5",
            DecodeForm::Block6 => "recurrent6",
            DecodeForm::Persistent => "persistent",
        }
    }

    /// Blocks for `items` work items (V / 32 x HV x N): one per item, or for the persistent form
    /// as many as are resident at once (4 an SM, its `__launch_bounds__`), never more than the
    /// items.
    pub fn blocks(self, items: usize, sms: usize) -> usize {
        match self {
            DecodeForm::Persistent => items.min(Self::one_wave(sms)),
            _ => items,
        }
    }
}

/// `DELTARULE_CUDA_SMS`: the SM count the launch rules assume (the persistent decode grid, the
/// state-tile and overlap rules), 1 to the device's `sms`; unset, the device's. A probe knob: with
/// the other SMs held by a spinning kernel (bench/sm_probe.py), the grids fit the SMs left.
fn sms_override(sms: i32) -> Result<i32> {
    parse_sms(std::env::var("DELTARULE_CUDA_SMS").ok().as_deref(), sms)
}

fn parse_sms(value: Option<&str>, sms: i32) -> Result<i32> {
    match value {
        None => Ok(sms),
        Some(s) => match s.trim().parse::<i32>() {
            Ok(n) if (1..=sms).contains(&n) => Ok(n),
            _ => Err(Error::invalid(
                "DELTARULE_CUDA_SMS",
                format!("a number of SMs from 1 to {sms} (this device's count)"),
                s,
            )),
        },
    }
}

fn unavailable(reason: impl Into<String>) -> Error {
    Error::Unavailable {
        backend: BackendKind::Cuda,
        reason: reason.into(),
    }
}

impl CudaBackend {
    /// Opens device `ordinal` (its primary context, shared with PyTorch), or says why not.
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
        let ctx = CudaContext::new(ordinal)
            .map_err(|e| unavailable(format!("no CUDA device {ordinal}: {e:?}")))?;
        let (ma, mi) = ctx
            .compute_capability()
            .map_err(|e| drv("compute capability", e))?;
        let attr = |a| ctx.attribute(a).map_err(|e| drv("device attribute", e));
        let sms = attr(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?;
        let all_sms = sms;
        let sms = sms_override(sms)?;
        let smem =
            attr(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)?;
        let name = ctx.name().unwrap_or_else(|_| "CUDA device".into());
        let stream = ctx.new_stream().map_err(|e| drv("create stream", e))?;
        let arch = kernels::arch_for((ma as u32, mi as u32));
        let caps = Capabilities {
            backend: BackendKind::Cuda,
            device: name,
            compute_capability: Some((ma as u32, mi as u32)),
            multiprocessors: Some(sms as u32),
            max_workgroup_storage: smem as u32,
            max_storage_buffers_per_stage: u32::MAX,
            max_invocations_per_workgroup: 1024,
            subgroups: true,
            subgroup_size: (32, 32),
            shader_f16: true,
            timestamps: true,
            cooperative_matrix: true,
            notes: std::iter::once(format!("NVRTC target {arch}"))
                .chain((sms != all_sms).then(|| {
                    format!("DELTARULE_CUDA_SMS: launch rules assume {sms} of {all_sms} SMs")
                }))
                .collect(),
        };
        Ok(CudaBackend {
            ctx,
            stream,
            caps,
            arch,
            max_smem: smem,
            cache_dir,
            modules: ModuleCache::default(),
            workspace: Mutex::new(Workspace::new()),
            state_bv: std::env::var("DELTARULE_CUDA_STATE_BV")
                .ok()
                .and_then(|s| StatePass::parse(&s)),
            overlap: std::env::var("DELTARULE_CUDA_OVERLAP")
                .map_or(OverlapSetting::Auto, |s| OverlapSetting::parse(&s)),
            overlap_trace: std::env::var("DELTARULE_CUDA_OVERLAP_TRACE").is_ok_and(|s| s == "1"),
            fused_classic: std::env::var("DELTARULE_CUDA_FUSED").is_ok_and(|s| s == "classic"),
            modes: Modes::from_env()?,
        })
    }

    /// The NVRTC architecture of this device (`sm_90a` on the H200).
    pub fn arch(&self) -> &str {
        &self.arch
    }

    /// The backend's own stream (`CUstream`), used by [`Backend::run`] and [`CudaBackend::bench`].
    pub fn stream_handle(&self) -> u64 {
        self.stream.cu_stream() as u64
    }

    fn bind(&self) -> Result<()> {
        self.ctx
            .bind_to_thread()
            .map_err(|e| drv("bind context", e))
    }

    /// Whether `kernel` implements `p` (what the selection rows promise), with the reason if not.
    pub fn supports(&self, kernel: Kernel, p: &Problem) -> Result<()> {
        let no = |why: String| Err(Error::unsupported(BackendKind::Cuda, kernel.name(), why));
        match (kernel, p.mode) {
            (Kernel::Chunked | Kernel::SmallBh, Mode::Prefill)
            | (Kernel::Recurrent, Mode::Decode) => {}
            (Kernel::Chunked | Kernel::SmallBh | Kernel::Recurrent, m) => {
                return no(format!(
                    "{} does not run {} problems",
                    kernel.name(),
                    m.name()
                ))
            }
            _ => return no("the CUDA backend has chunked, small-bh and recurrent".into()),
        }
        if !HEAD_DIMS.contains(&p.k) || !HEAD_DIMS.contains(&p.v) {
            return no(format!(
                "head dims K = {}, V = {} (kernels: {HEAD_DIMS:?})",
                p.k, p.v
            ));
        }
        if let Some(why) = grid_limit(kernel, p) {
            return no(why);
        }
        if let (Some(e), Mode::Prefill) = (p.checkpoint_every, p.mode) {
            if e % 64 != 0 {
                return no(format!(
                    "checkpoints every {e} tokens: prefill writes multiples of 64"
                ));
            }
        }
        if matches!(p.gate, deltarule_core::Gate::LowerBound(lb) if !(-5.0..0.0).contains(&lb)) {
            return no("lower_bound outside [-5, 0)".into());
        }
        Ok(())
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
    /// the launches need. Call before [`CudaBackend::launch`] (and before graph capture).
    pub fn reserve(&self, ws: &mut Workspace, kernel: Kernel, p: &Problem) -> Result<()> {
        self.supports(kernel, p)?;
        let layout = self.workspace_layout(kernel, p)?;
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

    /// The workspace layout of (kernel, problem) (loads the kernel's module).
    pub fn workspace_layout(&self, kernel: Kernel, p: &Problem) -> Result<WorkspaceLayout> {
        let m = self.module(launch::module_for(p.op, kernel), &Self::defines(p))?;
        Ok(WorkspaceLayout::new(kernel, p, m.sizes[2].max(0) as usize))
    }

    /// Enqueues `kernel` on `stream` for problem `p` with the tensors at `t` (see [`launch`] for
    /// the contract). No allocation, no compilation, no host synchronisation, no device reads.
    pub fn launch(
        &self,
        kernel: Kernel,
        p: &Problem,
        t: &DevicePtrs,
        stream: u64,
        ws: &mut Workspace,
    ) -> Result<()> {
        p.validate()?;
        self.supports(kernel, p)?;
        check_ptrs(p, t)?;
        let defs = Self::defines(p);
        let key = |m: Module| (m, defs.for_module(m));
        let cache = self
            .modules
            .read()
            .map_err(|_| drv("module cache", "poisoned lock"))?;
        let not_warm = || {
            Error::invalid(
                "workspace",
                "a workspace reserved with CudaBackend::reserve for this kernel and problem",
                "kernels not loaded yet",
            )
        };
        let main = cache
            .get(&key(launch::module_for(p.op, kernel)))
            .cloned()
            .ok_or_else(not_warm)?;
        let varlen = cache
            .get(&key(Module::Varlen))
            .cloned()
            .ok_or_else(not_warm)?;
        drop(cache);
        let layout = WorkspaceLayout::new(kernel, p, main.sizes[2].max(0) as usize);
        if ws.bytes() < layout.total {
            return Err(Error::invalid(
                "workspace",
                format!("at least {} bytes (CudaBackend::reserve)", layout.total),
                format!("{} bytes", ws.bytes()),
            ));
        }
        self.bind()?;
        let base = ws.base();
        let mut prm = launch::params(p, t);
        prm.mode = self.modes.0;
        prm.chunk_table = base + layout.chunk_table as u64;
        prm.chunk_offsets = base + layout.chunk_offsets as u64;
        prm.ck_offsets = base + layout.ck_offsets as u64;
        prm.work = base + layout.work as u64;
        let stream = stream as sys::CUstream;
        let (n, hv) = (p.seqs as u32, p.hv as u32);
        let prefix = match p.op {
            Op::Gdn => "gdn",
            Op::Kda => "kda",
        };
        // small-bh: the state pass, and whether the pair overlaps (decided before the metadata
        // kernel, which zeroes the overlap's words)
        let sms = self.caps.multiprocessors.unwrap_or(132) as usize;
        let small = (kernel == Kernel::SmallBh).then(|| {
            let have = Variants {
                wg: main.sizes[9] > 0,
                wgt: main.sizes[11] > 0 && o_fits_tma(p, t.o),
            };
            let pass = state_pass(
                p,
                sms,
                self.state_bv,
                have,
                self.overlap != OverlapSetting::Off,
            );
            let ov = overlap_plan(p, sms, pass, self.overlap);
            if let Some(o) = ov {
                prm.sync = base + layout.sync as u64;
                prm.ov_tau = o.tau;
                prm.ov_free = o.free;
                prm.ov_trace = i32::from(self.overlap_trace);
            }
            (pass, ov)
        });
        if needs_tables(kernel, p) {
            launch_one(
                &varlen,
                "varlen_build_tables",
                (1, 1, 1),
                1024,
                0,
                stream,
                &prm,
                None,
                false,
            )?;
        }
        match kernel {
            Kernel::Chunked => {
                let ft = main.sizes[13] > 0 && fused_t_applies(p) && !self.fused_classic;
                let (name, smem, grid) = if ft {
                    let grid = self.modes.fused_t_grid(p, sms);
                    let name = format!("{prefix}_prefill_{}", self.modes.fused_t_entry());
                    (name, main.sizes[13] as u32, grid)
                } else {
                    (
                        format!("{prefix}_prefill_fused"),
                        main.sizes[0] as u32,
                        (hv, n, 1),
                    )
                };
                launch_one(&main, &name, grid, 256, smem, stream, &prm, None, false)?;
            }
            Kernel::SmallBh => {
                let (pass, ov) = small.ok_or_else(|| drv("small-bh launch", "no plan"))?;
                let state = format!("{prefix}_prefill_state");
                let rows = launch::table_rows(p) as u32;
                // (the persistent kernel keeps its work item after the arena: 16 bytes more)
                let smem = main.sizes[3] as u32;
                let (intra, grid, smem) = match (pass, ov) {
                    (_, Some(o)) => (
                        format!("{prefix}_prefill_intratov"),
                        (o.grid, 1, 1),
                        smem + 16,
                    ),
                    (StatePass::WgT, None) => {
                        let units = hv / self.modes.intra_heads(p) as u32;
                        (format!("{prefix}_prefill_intrat"), (rows, units, 1), smem)
                    }
                    _ => (format!("{prefix}_prefill_intra"), (rows, hv, 1), smem),
                };
                launch_one(&main, &intra, grid, 256, smem, stream, &prm, None, false)?;
                let blocks = rows as u64 * hv as u64;
                let bv = match pass {
                    StatePass::Mma(bv) => bv,
                    StatePass::Wg | StatePass::WgT => {
                        // (name suffix, size-table index of the shared bytes, then threads, maps)
                        let work = main.sizes[2] as u64;
                        let (suffix, at, maps) = if pass == StatePass::Wg {
                            (
                                "wg",
                                9,
                                MapArg::Pair(tensor_maps(prm.work, blocks, work, p.k)?),
                            )
                        } else {
                            (
                                "wgt",
                                11,
                                MapArg::T(tensor_maps_t(p, t, prm.work, blocks, work)?),
                            )
                        };
                        let name = format!("{state}{suffix}");
                        let grid = ((p.v / 64) as u32, hv, n);
                        let (threads, smem) = (main.sizes[at + 1] as u32, main.sizes[at] as u32);
                        // (the dependent launch without the overlap: the state CTAs with
                        // chunks wait for the whole intra grid, so this grid completes after it
                        // and the next work in the stream cannot overtake it; with no token at
                        // all no CTA would wait, hence tokens > 0)
                        let pdl = ov.is_some()
                            || (pass == StatePass::WgT
                                && self.modes.has(Modes::PDL)
                                && p.tokens > 0);
                        launch_one(
                            &main,
                            &name,
                            grid,
                            threads,
                            smem,
                            stream,
                            &prm,
                            Some(&maps),
                            pdl,
                        )?;
                        if ov.is_some() && self.overlap_trace {
                            let at = prm.sync + launch::trace_offset(rows as usize * p.hv) as u64;
                            print_overlap_trace(stream, at)?;
                        }
                        return Ok(());
                    }
                };
                // (V tile, threads, shared bytes) of the register-state pass: one warp per 16
                // V columns; the 64-column variant exists for V >= 64 (sizes[8] > 0)
                let (bv, threads, smem) = match bv {
                    16 => (16, main.sizes[6], main.sizes[5]),
                    64 if main.sizes[8] > 0 => (64, main.sizes[8], main.sizes[7]),
                    _ => (32, main.sizes[4], main.sizes[1]),
                };
                let name = match bv {
                    16 => format!("{state}16"),
                    64 => format!("{state}64"),
                    _ => state,
                };
                launch_one(
                    &main,
                    &name,
                    ((p.v / bv) as u32, hv, n),
                    threads as u32,
                    smem as u32,
                    stream,
                    &prm,
                    None,
                    false,
                )?;
            }
            Kernel::Recurrent => {
                let (name, blocks, threads) = recurrent_launch(p, self.modes, sms);
                launch_one(
                    &main,
                    &name,
                    (blocks, 1, 1),
                    threads,
                    0,
                    stream,
                    &prm,
                    None,
                    false,
                )?;
            }
            other => {
                return Err(Error::unsupported(
                    BackendKind::Cuda,
                    other.name(),
                    "not a CUDA kernel",
                ))
            }
        }
        Ok(())
    }

    fn upload(&self, t: &HostTensor) -> Result<DeviceBuffer> {
        let bytes = t.to_le_bytes();
        let buf = DeviceBuffer::alloc(&self.ctx, bytes.len())?;
        if !bytes.is_empty() {
            // SAFETY: `buf` holds at least `bytes.len()` bytes; a pageable source is staged
            // before the call returns, so `bytes` may be dropped afterwards.
            unsafe { result::memcpy_htod_async(buf.ptr(), &bytes, self.stream.cu_stream()) }
                .map_err(|e| drv("upload", e))?;
        }
        Ok(buf)
    }

    fn poisoned(&self, bytes: usize) -> Result<DeviceBuffer> {
        let buf = DeviceBuffer::alloc(&self.ctx, bytes)?;
        // SAFETY: fills the allocation with 0xFF bytes (NaN in f32, bf16 and f16).
        unsafe { result::memset_d8_async(buf.ptr(), 0xff, buf.bytes(), self.stream.cu_stream()) }
            .map_err(|e| drv("poison", e))?;
        Ok(buf)
    }

    fn download(&self, buf: &DeviceBuffer, dtype: DType, shape: Vec<usize>) -> Result<HostTensor> {
        let n: usize = shape.iter().product::<usize>() * dtype.size();
        let mut bytes = vec![0u8; n];
        if n > 0 {
            // SAFETY: `buf` holds at least `n` bytes; a pageable destination returns after the
            // copy completed.
            unsafe {
                result::memcpy_dtoh_async(&mut bytes[..], buf.ptr(), self.stream.cu_stream())
            }
            .map_err(|e| drv("download", e))?;
            self.stream
                .synchronize()
                .map_err(|e| drv("synchronize", e))?;
        }
        HostTensor::from_le_bytes(dtype, shape, &bytes)
    }

    fn sync(&self) -> Result<()> {
        self.stream.synchronize().map_err(|e| drv("synchronize", e))
    }
}

/// Checks that every pointer the problem needs is non-null, and that q, k and v are 16-byte
/// aligned (the kernels load their rows with vector loads).
fn check_ptrs(p: &Problem, t: &DevicePtrs) -> Result<()> {
    let need = |name: &str, ptr: u64| {
        if ptr == 0 {
            Err(Error::invalid(name, "a device pointer", "0"))
        } else if matches!(name, "q" | "k" | "v") && !ptr.is_multiple_of(16) {
            Err(Error::invalid(
                name,
                "a 16-byte aligned device pointer",
                format!("{ptr:#x}"),
            ))
        } else {
            Ok(())
        }
    };
    need("q", t.q)?;
    need("k", t.k)?;
    need("v", t.v)?;
    need("g", t.g)?;
    need("beta", t.beta)?;
    need("cu_seqlens", t.cu_seqlens)?;
    need("o", t.o)?;
    if p.a_log {
        need("A_log", t.a_log)?;
    }
    if p.gate.in_kernel() {
        need("dt_bias", t.dt_bias)?;
    }
    if p.initial != InitialState::None {
        need("initial_state", t.state_in)?;
    }
    if matches!(p.initial, InitialState::Pool { .. }) {
        need("state_indices", t.state_indices)?;
    }
    if p.final_state != FinalState::None {
        need("final_state", t.state_out)?;
    }
    if p.final_state == FinalState::InPlace && t.state_out != t.state_in {
        return Err(Error::invalid(
            "final_state",
            "the pool pointer itself (in-place update)",
            "another pointer",
        ));
    }
    if p.checkpoint_every.is_some() {
        need("checkpoints", t.checkpoints)?;
    }
    Ok(())
}

/// Whether a launch of `kernel` on `p` starts with the metadata kernel `varlen_build_tables`
/// (chunk table, chunk and checkpoint offsets): every kernel but the token recurrence needs the
/// tables, the recurrence only the checkpoint offsets.
pub fn needs_tables(kernel: Kernel, p: &Problem) -> bool {
    kernel != Kernel::Recurrent || p.checkpoint_every.is_some()
}

/// The token recurrence's launch: entry point, 1-D grid and threads. The items (V tile, value
/// head, sequence) get a block each, or (the persistent form) 4 blocks an SM walk them; 4 state
/// warps + 1 token-input warp (NTH in kernels/decode.cuh); within i32::MAX (grid_limit,
/// supports()). The CPU emulator test (tests/emulated.rs) launches the same.
pub fn recurrent_launch(p: &Problem, modes: Modes, sms: usize) -> (String, u32, u32) {
    let prefix = match p.op {
        Op::Gdn => "gdn",
        Op::Kda => "kda",
    };
    let form = modes.decode_form(p, sms);
    let blocks = form.blocks(decode_items(p), sms) as u32;
    (format!("{prefix}_decode_{}", form.entry()), blocks, 160)
}

/// Work items of the token recurrence, a block each: V / 32 columns x HV x N.
fn decode_items(p: &Problem) -> usize {
    (p.v / 32).saturating_mul(p.hv).saturating_mul(p.seqs)
}

/// Why `kernel`'s grid cannot hold `p`, if it cannot: the prefill kernels put the sequences and
/// the value heads on grid dimensions capped at 65535; the token recurrence's 1-D grid holds up
/// to i32::MAX items.
fn grid_limit(kernel: Kernel, p: &Problem) -> Option<String> {
    if kernel == Kernel::Recurrent {
        let items = decode_items(p);
        (items > i32::MAX as usize).then(|| {
            format!(
                "{items} work items (V / 32 x HV x N) above the 1-D grid limit {}",
                i32::MAX
            )
        })
    } else {
        (p.seqs > 65535 || p.hv > 65535)
            .then(|| format!("N = {}, HV = {} above the grid limit 65535", p.seqs, p.hv))
    }
}

/// The V tile of the small-bh state pass (one CTA per SM: 230 KB of shared memory): 16 columns
/// when the 32-column tiles of all (sequence, value head) pairs fill at most half the SMs; 64
/// when the 32-column tiles would need a second wave (V >= 64); else 32 (a forced width
/// overrides it, see [`state_pass`]). (H200, session 6, bench/h200_s6f.sh and s6g.sh: with more than one wave the
/// 64-column tiles were faster on every shape measured, gdn 16/32 16x1024 0.943 -> 0.847 ms,
/// 256x64 1.930 -> 1.428, kda 32/32 64x256 1.468 -> 1.293; session 4 had limited them to one
/// wave.)
fn state_tile(p: &Problem, sms: usize) -> usize {
    let pairs = p.seqs * p.hv;
    if pairs * (p.v / 32) * 2 <= sms {
        16
    } else if p.v >= 64 && pairs * (p.v / 32) > sms {
        64
    } else {
        32
    }
}

/// The small-bh state pass: the mma.sync register-state pass with a V tile of 16, 32 or 64
/// columns, the wgmma pass (64-column tiles, one warpgroup; sm_90a, K in {64, 128}) over the
/// intra kernel's W, q̃, k̃, U block, or the T-form wgmma pass (gdn with 16-bit inputs: W·S and U
/// built in the pass from the inputs' k, v rows and the block's T_w, T_u; `{op}_prefill_intrat`
/// writes that smaller block).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum StatePass {
    Mma(usize),
    Wg,
    WgT,
}

/// Which wgmma state passes a loaded module has (`wg`: sizes[9] > 0; `wgt`: sizes[11] > 0).
#[derive(Clone, Copy, Debug)]
struct Variants {
    wg: bool,
    wgt: bool,
}

impl StatePass {
    fn parse(s: &str) -> Option<StatePass> {
        match s.trim() {
            "wg" => Some(StatePass::Wg),
            "wgt" => Some(StatePass::WgT),
            t => t
                .parse()
                .ok()
                .filter(|bv| matches!(*bv, 16 | 32 | 64))
                .map(StatePass::Mma),
        }
    }
}

/// Which state pass runs: a forced one where it exists; else the wgmma pass where the module has
/// it (`wg`) unless [`state_tile`] picks 16-column tiles (few pairs: the wgmma pass's 64-column
/// tiles would leave most SMs idle; H200, session 7: gdn 4/8 1x8192 0.237 ms against 0.213 with
/// the 16-column mma.sync pass); else the mma.sync tile of [`state_tile`]. (Session 7, same
/// call: wgmma against the mma.sync pass at gdn 16/32 1x8192 0.427 / 0.430 ms, 16x1024 0.798 /
/// 0.907 (32 col.), kda 64/64 1x8192 1.117 / 1.210.)
///
/// Where the wgmma pass is picked, the T-form replaces it when it applies ([`t_form_applies`]).
/// Where the 16-column tiles are picked, the T-form pair replaces them too when it may overlap
/// (`overlap`: the setting is not off; [`overlap_plan`] then always applies, its state pass
/// having at most a quarter of the SMs' worth of CTAs): its few state CTAs run on SMs freed at
/// once while the intra work runs on the rest. (H200, session 11, bench/h200_s11b.sh, same call:
/// gdn 4/8 1x8192 0.200 ms against 0.213 with the 16-column pass, 4x2048 0.111 against 0.155,
/// 1x512 0.035 against 0.034.)
fn state_pass(
    p: &Problem,
    sms: usize,
    forced: Option<StatePass>,
    have: Variants,
    overlap: bool,
) -> StatePass {
    let wgt = have.wgt && t_form_applies(p);
    match forced {
        Some(StatePass::Mma(bv)) => StatePass::Mma(bv),
        Some(StatePass::Wg) if have.wg => StatePass::Wg,
        Some(StatePass::WgT) if wgt => StatePass::WgT,
        _ => match state_tile(p, sms) {
            16 if wgt && overlap => StatePass::WgT,
            16 => StatePass::Mma(16),
            _ if wgt => StatePass::WgT,
            _ if have.wg => StatePass::Wg,
            bv => StatePass::Mma(bv),
        },
    }
}

/// The T-form pass stores a 16-bit o by TMA, whose global address must be 16-byte aligned (q, k
/// and v always are, [`check_ptrs`]); an o that is not (a caller's view at an odd offset) keeps
/// the other passes. f32 o is stored per thread.
fn o_fits_tma(p: &Problem, o: u64) -> bool {
    p.out_dtype.size() != 2 || o.is_multiple_of(16)
}

/// The T-form pass reads q, k and v by TMA as the pass's own operands: they must be 16-bit (bf16
/// or f16, the module's operand type); gdn only (kda's per-channel decay cannot be folded into
/// T's columns). The modules compile it only where the wgmma pass exists.
fn t_form_applies(p: &Problem) -> bool {
    p.op == Op::Gdn && matches!(p.qkv_dtype, DType::BF16 | DType::F16)
}

/// The fused T-form (`gdn_prefill_fusedt`, the `chunked` kernel where it applies; the module has
/// it for K, V >= 64): it keeps no state in registers across a chunk's intra stage (two CTAs per
/// SM), so the state between a sequence's chunks lives in its f32 final-state row. It applies
/// where every sequence has one: a dense final state stored in f32 (a pool row may be -1, "do
/// not write"; a bf16 row would round the running state). Otherwise the classic fused kernel.
fn fused_t_applies(p: &Problem) -> bool {
    p.op == Op::Gdn && p.final_state == FinalState::Dense && p.state_out_dtype == DType::F32
}

/// How the small-bh pair may overlap ([`overlap_plan`]).
#[derive(Clone, Copy, Debug, PartialEq)]
enum OverlapSetting {
    Auto,
    Off,
    /// the share of the intra work (percent) taken before SMs are freed for the state pass
    Tau(u32),
}

impl OverlapSetting {
    /// `off` (or `0`, `no`), a percentage 1-100, anything else: automatic.
    fn parse(s: &str) -> OverlapSetting {
        match s.trim() {
            "off" | "no" | "0" => OverlapSetting::Off,
            t => t
                .parse::<u32>()
                .ok()
                .filter(|v| (1..=100).contains(v))
                .map_or(OverlapSetting::Auto, OverlapSetting::Tau),
        }
    }
}

/// The overlapped pair's launch: `free` state CTAs (and SMs freed for them), `tau` intra items
/// taken before the freeing, `grid` persistent intra CTAs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Overlap {
    free: i32,
    tau: i32,
    grid: u32,
}

/// Whether and how the T-form pair overlaps (kernels/prefill.cuh, "the overlapped T-form pair"):
/// only where its state pass has at most half the SMs' worth of CTAs (one per 64 V columns, value
/// head and sequence: gdn 16/32 1x8192 has 64 on 132 SMs), which otherwise idle the rest of the
/// GPU through the serial chain. The state CTAs should start when the intra work left for the
/// other SMs lasts as long as the chain: with per-chunk times `cs` (state pass, one CTA) and `ci`
/// (intra, per item and SM), chain S = chunks x cs and intra I = items x ci / SMs, the freeing
/// point is the share `1 - (S / I) (SMs - free) / SMs` of the items. H200, session 10 timelines
/// (`DELTARULE_CUDA_OVERLAP_TRACE=1`, gdn 16/32): S / I = 183 / 184 us at 1x8192 and 683 / 688
/// at 1x32768, i.e. cs / ci = 0.24; best measured shares 50-55 %, this rule gives 49 %.
fn overlap_plan(p: &Problem, sms: usize, pass: StatePass, set: OverlapSetting) -> Option<Overlap> {
    if pass != StatePass::WgT || set == OverlapSetting::Off || sms < 4 {
        return None;
    }
    let free = p.v / 64 * p.hv * p.seqs;
    let items = launch::table_rows(p) * p.hv;
    if free == 0 || free > sms / 2 || items == 0 || items > i32::MAX as usize {
        return None;
    }
    let share = match set {
        OverlapSetting::Tau(t) => f64::from(t) / 100.0,
        _ => {
            let r = 0.24 * sms as f64 / (p.hv * p.seqs) as f64; // S / I
            (1.0 - r * (sms - free) as f64 / sms as f64).clamp(0.0, 1.0)
        }
    };
    Some(Overlap {
        free: free as i32,
        tau: (share * items as f64).round() as i32,
        grid: (2 * sms).min(items) as u32,
    })
}

/// The two kernel-parameter tensor maps of the wgmma state pass (`struct TmapPair` in
/// `kernels/prefill.cuh`, 64-byte aligned).
#[repr(C, align(64))]
#[derive(Clone, Copy)]
struct TmapPair {
    wqk: sys::CUtensorMap,
    p: sys::CUtensorMap,
}

/// The five kernel-parameter tensor maps of the T-form pass (`struct TmapT`).
#[repr(C, align(64))]
#[derive(Clone, Copy)]
struct TmapT {
    q: sys::CUtensorMap,
    k: sys::CUtensorMap,
    v: sys::CUtensorMap,
    t: sys::CUtensorMap,
    o: sys::CUtensorMap,
}

/// The tensor-map parameter of a wgmma state pass. (Lives on the stack for one launch; boxing the
/// larger variant would allocate per launch.)
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Copy)]
enum MapArg {
    Pair(TmapPair),
    T(TmapT),
}

/// Encodes one tiled tensor map of 16-bit elements (`dims[0]` innermost, `strides` in bytes for
/// dims 1..) with boxes `boxes`, landing in the 128-byte swizzle. Host-only work.
fn encode_map(base: u64, dims: &[u64], strides: &[u64], boxes: &[u32]) -> Result<sys::CUtensorMap> {
    let rank = dims.len();
    if !(1..=5).contains(&rank) || strides.len() + 1 != rank || boxes.len() != rank {
        return Err(drv(
            "cuTensorMapEncodeTiled",
            format!(
                "rank {rank} with {} strides and {} box sizes",
                strides.len(),
                boxes.len()
            ),
        ));
    }
    let mut map = std::mem::MaybeUninit::<sys::CUtensorMap>::zeroed();
    let unit = [1u32; 5];
    // SAFETY: pure host-side encoding into `map` (128 bytes we own); the slices outlive the call
    // and hold `rank` (dims, boxes, unit) and `rank - 1` (strides) entries; the driver checks the
    // address, strides and boxes (16-byte aligned address and strides, box rows <= 256, a
    // 128-byte inner box for the 128-byte swizzle) and returns an error, never UB.
    unsafe {
        sys::cuTensorMapEncodeTiled(
            map.as_mut_ptr(),
            sys::CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_UINT16,
            rank as u32,
            base as *mut std::ffi::c_void,
            dims.as_ptr(),
            strides.as_ptr(),
            boxes.as_ptr(),
            unit.as_ptr(),
            sys::CUtensorMapInterleave::CU_TENSOR_MAP_INTERLEAVE_NONE,
            sys::CUtensorMapSwizzle::CU_TENSOR_MAP_SWIZZLE_128B,
            sys::CUtensorMapL2promotion::CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
            sys::CUtensorMapFloatOOBfill::CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
        )
        .result()
        .map_err(|e| drv("cuTensorMapEncodeTiled", e))?;
        Ok(map.assume_init())
    }
}

/// The T-form pass's maps: q and k as [T][H K], v and o as [T][HV V] (16-bit, boxes of 64
/// channels x 64 tokens; rows past T read as zeros; o's is used for 16-bit outputs only), and the workspace blocks' T_w, T_u hi, T_u lo, P
/// (`TLay`: four consecutive [64][72] arrays) as [blocks][256][64] with boxes of 64 x 256.
fn tensor_maps_t(p: &Problem, t: &DevicePtrs, work: u64, blocks: u64, block: u64) -> Result<TmapT> {
    let tokens = p.tokens.max(1) as u64;
    let (hk, hvv) = ((p.h * p.k) as u64, (p.hv * p.v) as u64);
    Ok(TmapT {
        q: encode_map(t.q, &[hk, tokens], &[hk * 2], &[64, 64])?,
        k: encode_map(t.k, &[hk, tokens], &[hk * 2], &[64, 64])?,
        v: encode_map(t.v, &[hvv, tokens], &[hvv * 2], &[64, 64])?,
        // (f32 o leaves by per-thread stores; the map is then a valid but unused copy of v's)
        o: if p.out_dtype.size() == 2 {
            encode_map(t.o, &[hvv, tokens], &[hvv * 2], &[64, 64])?
        } else {
            encode_map(t.v, &[hvv, tokens], &[hvv * 2], &[64, 64])?
        },
        t: encode_map(
            work,
            &[64, 256, blocks.max(1)],
            &[72 * 2, block],
            &[64, 256, 1],
        )?,
    })
}

/// Encodes the tensor maps over the workspace blocks at `work` (`blocks` blocks of `block` bytes,
/// the layout `WLay` of `kernels/prefill.cuh`, head dim `k`): `wqk` views W, q̃, k̃ (consecutive
/// [64][k + 8] arrays of 16-bit elements) as [blocks][192][k] with boxes of 64 x 192, `p` views P
/// ([64][72], after them) as [blocks][64][64] with boxes of 64 x 64; both land in shared memory
/// in the 128-byte swizzle the kernel's matrix descriptors name. Host-only work.
fn tensor_maps(work: u64, blocks: u64, block: u64, k: usize) -> Result<TmapPair> {
    let kp = (k + 8) as u64;
    let b = blocks.max(1);
    Ok(TmapPair {
        wqk: encode_map(work, &[k as u64, 192, b], &[kp * 2, block], &[64, 192, 1])?,
        p: encode_map(
            work + 3 * 64 * kp * 2,
            &[64, 64, b],
            &[72 * 2, block],
            &[64, 64, 1],
        )?,
    })
}

/// Launches kernel `name` with `const Params` as its parameter, followed by the tensor maps (a
/// `__grid_constant__` parameter) where `maps` is given (the wgmma state pass). `pdl`: with
/// programmatic dependent launch (the overlapped pair's state pass, [`overlap_plan`]): the kernel
/// may start while the intra kernel before it in the stream runs (once every intra CTA has
/// triggered it), and waits for that kernel's completion itself.
#[allow(clippy::too_many_arguments)]
fn launch_one(
    m: &Loaded,
    name: &str,
    grid: (u32, u32, u32),
    block: u32,
    smem: u32,
    stream: sys::CUstream,
    prm: &Params,
    maps: Option<&MapArg>,
    pdl: bool,
) -> Result<()> {
    if grid.0 == 0 || grid.1 == 0 || grid.2 == 0 {
        return Ok(());
    }
    let f = m.func(name)?;
    let mut local = *prm;
    let mut tm = maps.copied();
    let mut args = [
        &mut local as *mut Params as *mut std::ffi::c_void,
        tm.as_mut().map_or(std::ptr::null_mut(), |t| match t {
            MapArg::Pair(m) => m as *mut TmapPair as *mut std::ffi::c_void,
            MapArg::T(m) => m as *mut TmapT as *mut std::ffi::c_void,
        }),
    ];
    let n = if tm.is_some() { 2 } else { 1 };
    // SAFETY: `f` is a kernel of a loaded module whose parameters are `const Params` (the
    // #[repr(C)] mirror of `struct Params`) and, for the wgmma state passes (maps given), `const
    // TmapPair` / `const TmapT` (two / five 128-byte tensor maps, mirrored by the #[repr(C)]
    // structs above, the variant matching the kernel launched, describing the workspace blocks
    // the intra kernel wrote earlier in the same stream and the q, k, v inputs); the pointers in
    // `Params` were checked non-null where the problem needs them and point to buffers of the
    // documented sizes (launch contract); `smem` is within the limit set on the function at load
    // time; cuLaunchKernel copies the parameter block before returning, so `local` and `tm` may
    // go out of scope.
    if !pdl {
        return unsafe {
            result::launch_kernel(f, grid, (block, 1, 1), smem, stream, &mut args[..n])
        }
        .map_err(|e| drv(&format!("launch {name}"), e));
    }
    // SAFETY: an all-zero CUlaunchAttribute is a valid value (a C struct of an enum whose 0 is
    // CU_LAUNCH_ATTRIBUTE_IGNORE and a union of plain data); its fields are set next.
    let mut attr: sys::CUlaunchAttribute = unsafe { std::mem::zeroed() };
    attr.id = sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    attr.value.programmaticStreamSerializationAllowed = 1;
    let cfg = sys::CUlaunchConfig {
        gridDimX: grid.0,
        gridDimY: grid.1,
        gridDimZ: grid.2,
        blockDimX: block,
        blockDimY: 1,
        blockDimZ: 1,
        sharedMemBytes: smem,
        hStream: stream,
        attrs: &mut attr,
        numAttrs: 1,
    };
    // SAFETY: as above (the same kernels and parameter blocks); `cfg` and `attr` live across the
    // call, which copies them and the parameters before returning.
    unsafe { sys::cuLaunchKernelEx(&cfg, f, args.as_mut_ptr(), std::ptr::null_mut()) }
        .result()
        .map_err(|e| drv(&format!("launch {name}"), e))
}

/// `DELTARULE_CUDA_OVERLAP_TRACE=1` (diagnosis only; it synchronises the stream): reads the
/// overlapped pair's timeline at `at` back and prints a summary to stderr, times in us from the
/// first intra CTA's start.
fn print_overlap_trace(stream: sys::CUstream, at: u64) -> Result<()> {
    let mut rec = vec![0u64; (launch::TRACE_INTRA + launch::TRACE_STATE) * 4];
    // SAFETY: the stream's work is complete after the synchronisation; `at` is the timeline area
    // of the workspace (laid out by WorkspaceLayout with room for `rec`).
    unsafe {
        result::stream::synchronize(stream).map_err(|e| drv("trace: synchronize", e))?;
        result::memcpy_dtoh_sync(&mut rec[..], at).map_err(|e| drv("trace: read", e))?;
    }
    let (intra, state) = rec.split_at(launch::TRACE_INTRA * 4);
    let intra: Vec<&[u64]> = intra.chunks(4).filter(|r| r[1] > 0).collect();
    let state: Vec<&[u64]> = state.chunks(4).filter(|r| r[1] > 0).collect();
    let Some(t0) = intra.iter().map(|r| r[1]).min() else {
        eprintln!("overlap trace: no intra records");
        return Ok(());
    };
    let us = |t: u64| t.saturating_sub(t0) as f64 / 1e3;
    let stats = |mut v: Vec<f64>| -> String {
        if v.is_empty() {
            return "-".into();
        }
        v.sort_by(f64::total_cmp);
        format!(
            "{:.1} / {:.1} / {:.1}",
            v[0],
            v[v.len() / 2],
            v[v.len() - 1]
        )
    };
    let left: Vec<&&[u64]> = intra.iter().filter(|r| r[3] >> 32 != 0).collect();
    eprintln!(
        "overlap trace: intra {} CTAs (start {}, end {} us; items per CTA {}), {} left early (end {} us, {} SMs); state {} CTAs on {} SMs (start {}, end {} us, waiting for flags {} us)",
        intra.len(),
        stats(intra.iter().map(|r| us(r[1])).collect()),
        stats(intra.iter().map(|r| us(r[2])).collect()),
        stats(intra.iter().map(|r| (r[3] & 0xffff_ffff) as f64).collect()),
        left.len(),
        stats(left.iter().map(|r| us(r[2])).collect()),
        left.iter().map(|r| r[0]).collect::<std::collections::BTreeSet<_>>().len(),
        state.len(),
        state.iter().map(|r| r[0]).collect::<std::collections::BTreeSet<_>>().len(),
        stats(state.iter().map(|r| us(r[1])).collect()),
        stats(state.iter().map(|r| us(r[2])).collect()),
        stats(state.iter().map(|r| r[3] as f64 / 1e3).collect()),
    );
    Ok(())
}

/// Device buffers of one host-side call.
struct CallBuffers {
    _inputs: Vec<DeviceBuffer>,
    o: DeviceBuffer,
    final_state: Option<DeviceBuffer>,
    checkpoints: Option<DeviceBuffer>,
    ptrs: DevicePtrs,
}

impl CudaBackend {
    fn buffers(&self, p: &Problem, inputs: &Inputs, total_ck: usize) -> Result<CallBuffers> {
        let mut keep = Vec::new();
        let mut ptrs = DevicePtrs::default();
        let mut up = |t: &HostTensor| -> Result<u64> {
            let b = self.upload(t)?;
            let ptr = b.ptr();
            keep.push(b);
            Ok(ptr)
        };
        ptrs.q = up(&inputs.q)?;
        ptrs.k = up(&inputs.k)?;
        ptrs.v = up(&inputs.v)?;
        ptrs.g = up(&inputs.g)?;
        ptrs.beta = up(&inputs.beta)?;
        ptrs.cu_seqlens = up(&inputs.cu_seqlens)?;
        if let Some(a) = &inputs.a_log {
            ptrs.a_log = up(a)?;
        }
        if let Some(d) = &inputs.dt_bias {
            ptrs.dt_bias = up(d)?;
        }
        if let Some(i) = &inputs.state_indices {
            ptrs.state_indices = up(i)?;
        }
        let mut pool = None;
        if let Some(s) = &inputs.initial_state {
            if p.final_state == FinalState::InPlace {
                let b = self.upload(s)?;
                ptrs.state_in = b.ptr();
                pool = Some(b);
            } else {
                ptrs.state_in = up(s)?;
            }
        }
        let state_bytes = p.hv * p.k * p.v * p.state_out_dtype.size();
        let o = self.poisoned(p.tokens * p.hv * p.v * p.out_dtype.size())?;
        ptrs.o = o.ptr();
        let final_state = match p.final_state {
            FinalState::None => None,
            FinalState::Dense => Some(self.poisoned(p.seqs * state_bytes)?),
            FinalState::InPlace => pool,
        };
        ptrs.state_out = final_state.as_ref().map_or(0, |b| b.ptr());
        let checkpoints = match p.checkpoint_every {
            Some(_) => Some(self.poisoned(total_ck * state_bytes)?),
            None => None,
        };
        ptrs.checkpoints = checkpoints.as_ref().map_or(0, |b| b.ptr());
        Ok(CallBuffers {
            _inputs: keep,
            o,
            final_state,
            checkpoints,
            ptrs,
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
        &[Kernel::Chunked, Kernel::SmallBh, Kernel::Recurrent]
    }

    fn run(&self, kernel: Kernel, p: &Problem, inputs: &Inputs) -> Result<Outputs> {
        let val = validate_inputs(p, inputs)?;
        self.supports(kernel, p)?;
        self.bind()?;
        let bufs = self.buffers(p, inputs, val.total_checkpoints())?;
        {
            let mut ws = self
                .workspace
                .lock()
                .map_err(|_| drv("workspace", "poisoned lock"))?;
            self.reserve(&mut ws, kernel, p)?;
            self.launch(kernel, p, &bufs.ptrs, self.stream_handle(), &mut ws)?;
            self.sync()?;
        }
        let o = self.download(&bufs.o, p.out_dtype, p.o_shape())?;
        let final_state = match (&bufs.final_state, p.final_shape()) {
            (Some(b), Some(shape)) => {
                let dt = if p.final_state == FinalState::InPlace {
                    p.state_in_dtype
                } else {
                    p.state_out_dtype
                };
                Some(self.download(b, dt, shape)?)
            }
            _ => None,
        };
        let checkpoints = match &bufs.checkpoints {
            Some(b) => {
                Some(self.download(b, p.state_out_dtype, p.state_shape(val.total_checkpoints()))?)
            }
            None => None,
        };
        Ok(Outputs {
            o,
            final_state,
            checkpoints,
        })
    }

    fn bench(
        &self,
        kernel: Kernel,
        p: &Problem,
        inputs: &Inputs,
        opts: &BenchOptions,
    ) -> Result<BenchReport> {
        let val = validate_inputs(p, inputs)?;
        self.supports(kernel, p)?;
        self.bind()?;
        let in_bytes: usize = [&inputs.q, &inputs.k, &inputs.v, &inputs.g, &inputs.beta]
            .iter()
            .map(|t| t.size_bytes())
            .sum::<usize>()
            + inputs.initial_state.as_ref().map_or(0, |t| t.size_bytes())
            + p.tokens * p.hv * p.v * p.out_dtype.size();
        let sets = opts.rotate_bytes.div_ceil(in_bytes.max(1)).clamp(1, 64);
        let mut all = Vec::with_capacity(sets);
        for _ in 0..sets {
            all.push(self.buffers(p, inputs, val.total_checkpoints())?);
        }
        let mut ws = self
            .workspace
            .lock()
            .map_err(|_| drv("workspace", "poisoned lock"))?;
        self.reserve(&mut ws, kernel, p)?;
        let stream = self.stream_handle();
        // every input set at least once before timing (first touches are not measured)
        for i in 0..opts.warmup.max(sets) {
            self.launch(kernel, p, &all[i % sets].ptrs, stream, &mut ws)?;
        }
        self.sync()?;
        let iters = opts.iters.max(1);
        let mut events = Vec::with_capacity(2 * iters);
        for _ in 0..2 * iters {
            events.push(
                result::event::create(sys::CUevent_flags::CU_EVENT_DEFAULT)
                    .map_err(|e| drv("cuEventCreate", e))?,
            );
        }
        let mut host_us = Vec::with_capacity(iters);
        let cs = self.stream.cu_stream();
        for i in 0..iters {
            // SAFETY: the events were created above in this context; the stream is ours.
            unsafe { result::event::record(events[2 * i], cs) }.map_err(|e| drv("record", e))?;
            let t0 = Instant::now();
            self.launch(kernel, p, &all[i % sets].ptrs, stream, &mut ws)?;
            host_us.push(t0.elapsed().as_secs_f64() * 1e6);
            // SAFETY: as above.
            unsafe { result::event::record(events[2 * i + 1], cs) }
                .map_err(|e| drv("record", e))?;
        }
        self.sync()?;
        let mut device_ms = Vec::with_capacity(iters);
        for i in 0..iters {
            // SAFETY: both events were recorded on the synchronised stream.
            let ms = unsafe { result::event::elapsed(events[2 * i], events[2 * i + 1]) }
                .map_err(|e| drv("cuEventElapsedTime", e))?;
            device_ms.push(ms as f64);
        }
        for e in events {
            // SAFETY: each event is destroyed once, after its last use.
            let _ = unsafe { result::event::destroy(e) };
        }
        Ok(BenchReport {
            device_ms,
            host_us,
            timer: "CUDA events around each launch".into(),
            input_sets: sets,
            device: self.caps.device.clone(),
            stages: Vec::new(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::{
        check_ptrs, decode_items, fused_t_applies, grid_limit, overlap_plan, parse_sms, state_pass,
        state_tile, DecodeForm, Modes, Overlap, OverlapSetting, StatePass, Variants,
    };
    use crate::launch::DevicePtrs;
    use deltarule_core::{Error, Kernel, Mode, Op, Problem};

    fn prefill(seqs: usize, h: usize, hv: usize) -> Problem {
        Problem::new(Op::Gdn, Mode::Prefill, seqs, 8192, h, hv, 128, 128)
    }

    #[test]
    fn the_sm_override_stays_within_the_device() {
        assert_eq!(parse_sms(None, 132).ok(), Some(132));
        assert_eq!(parse_sms(Some(" 91 "), 132).ok(), Some(91));
        assert_eq!(parse_sms(Some("132"), 132).ok(), Some(132));
        for bad in ["0", "133", "-4", "all", ""] {
            let why = parse_sms(Some(bad), 132).err().map(|e| e.to_string());
            assert!(
                why.as_deref().is_some_and(|w| w.contains("1 to 132")),
                "{bad}: {why:?}"
            );
        }
    }

    #[test]
    fn the_grid_limits_follow_each_kernels_grid() {
        let decode = |seqs, hv| Problem::new(Op::Gdn, Mode::Decode, seqs, seqs, 1, hv, 128, 128);
        // a 3-D prefill grid caps N and HV at 65535; the recurrence's 1-D grid does not
        let wide = prefill(70_000, 1, 1);
        let why = grid_limit(Kernel::Chunked, &wide).unwrap_or_default();
        assert!(why.contains("N = 70000"), "{why}");
        assert!(grid_limit(Kernel::SmallBh, &prefill(1, 1, 65535)).is_none());
        assert!(grid_limit(Kernel::Recurrent, &decode(70_000, 32)).is_none());
        assert_eq!(
            decode_items(&decode(256, 32)),
            32768,
            "the decode anchor: 4 x 32 x 256"
        );
        // 4 x 32768 x 16384 = 2^31 items: one past i32::MAX
        let why = grid_limit(Kernel::Recurrent, &decode(16384, 32768)).unwrap_or_default();
        assert!(why.contains("2147483648 work items"), "{why}");
        assert!(grid_limit(Kernel::Recurrent, &decode(16383, 32768)).is_none());
    }

    #[test]
    fn narrow_state_tiles_only_when_the_wide_ones_leave_most_sms_idle() {
        // gdn 4/8, 1 x 8192 on 132 SMs: 8 pairs x 4 tiles = 32 CTAs -> 16-column tiles (64 CTAs)
        assert_eq!(state_tile(&prefill(1, 4, 8), 132), 16);
        // 16/32: 128 CTAs of 32 columns already fill the SMs
        assert_eq!(state_tile(&prefill(1, 16, 32), 132), 32);
        // 66 CTAs fill exactly half of 132: still narrow; 67 would not be
        let kda = |seqs, v| Problem::new(Op::Kda, Mode::Prefill, seqs, 8192, 1, 1, 128, v);
        assert_eq!(state_tile(&kda(33, 64), 132), 16);
        assert_eq!(state_tile(&kda(67, 32), 132), 32);
        // kda 64/64: 256 CTAs of 32 columns (two waves) -> 128 of 64 columns (one wave)
        let kda64 = Problem::new(Op::Kda, Mode::Prefill, 1, 8192, 64, 64, 128, 128);
        assert_eq!(state_tile(&kda64, 132), 64);
        // ... and also when the 64-column tiles need two waves too (measured faster, session 6)
        assert_eq!(state_tile(&kda(200, 128), 132), 64);
        // V = 32 has no 64-column variant
        assert_eq!(state_tile(&kda(200, 32), 132), 32);
        // a forced width wins either way
        let mma = |bv| Some(StatePass::Mma(bv));
        let pass = |p: &Problem, f| state_pass(p, 132, f, NONE, true);
        assert_eq!(pass(&prefill(1, 16, 32), mma(16)), StatePass::Mma(16));
        assert_eq!(pass(&prefill(1, 4, 8), mma(32)), StatePass::Mma(32));
        assert_eq!(pass(&prefill(1, 16, 32), mma(64)), StatePass::Mma(64));
    }

    #[test]
    fn the_pair_overlaps_only_with_the_t_form_and_few_state_ctas() {
        let auto = OverlapSetting::Auto;
        // gdn 16/32 1x8192: 64 state CTAs on 132 SMs, 128 rows x 32 heads; S / I = 0.24 x 132 /
        // 32 = 0.99, freeing point 1 - 0.99 x 68 / 132 = 0.49 of the 4096 items
        let p = prefill(1, 16, 32);
        let o = overlap_plan(&p, 132, StatePass::WgT, auto).expect("overlaps");
        assert_eq!((o.free, o.grid), (64, 264));
        assert!((1950..2050).contains(&o.tau), "{o:?}");
        // only the T-form pass
        assert_eq!(overlap_plan(&p, 132, StatePass::Wg, auto), None);
        assert_eq!(overlap_plan(&p, 132, StatePass::Mma(32), auto), None);
        // off, or a forced share
        assert_eq!(
            overlap_plan(&p, 132, StatePass::WgT, OverlapSetting::Off),
            None
        );
        let forced = overlap_plan(&p, 132, StatePass::WgT, OverlapSetting::Tau(50));
        assert_eq!(
            forced,
            Some(Overlap {
                free: 64,
                tau: 2048,
                grid: 264
            })
        );
        // more state CTAs than half the SMs: the plain pair (16x1024: 1024 CTAs)
        assert_eq!(
            overlap_plan(&prefill(16, 16, 32), 132, StatePass::WgT, auto),
            None
        );
        assert_eq!(overlap_plan(&p, 100, StatePass::WgT, auto), None);
        // few heads: the state chain is long against the intra work, the SMs are freed at once
        let few = overlap_plan(&prefill(1, 4, 8), 132, StatePass::WgT, auto).expect("overlaps");
        assert_eq!((few.free, few.tau), (16, 0));
        // the setting's text
        assert_eq!(OverlapSetting::parse("off"), OverlapSetting::Off);
        assert_eq!(OverlapSetting::parse("0"), OverlapSetting::Off);
        assert_eq!(OverlapSetting::parse("35"), OverlapSetting::Tau(35));
        assert_eq!(OverlapSetting::parse("135"), OverlapSetting::Auto);
        assert_eq!(OverlapSetting::parse("on"), OverlapSetting::Auto);
    }

    const NONE: Variants = Variants {
        wg: false,
        wgt: false,
    };
    const WG: Variants = Variants {
        wg: true,
        wgt: false,
    };
    const BOTH: Variants = Variants {
        wg: true,
        wgt: true,
    };

    #[test]
    fn the_wgmma_state_pass_wherever_the_module_has_it_unless_a_tile_is_forced() {
        let p = prefill(1, 16, 32);
        assert_eq!(state_pass(&p, 132, None, WG, true), StatePass::Wg);
        assert_eq!(state_pass(&p, 132, None, NONE, true), StatePass::Mma(32));
        // few pairs (gdn 4/8): the 16-column mma.sync tiles, even where the wgmma pass exists,
        // unless the T-form pair may overlap
        let few = prefill(1, 4, 8);
        assert_eq!(state_pass(&few, 132, None, WG, true), StatePass::Mma(16));
        assert_eq!(state_pass(&few, 132, None, BOTH, false), StatePass::Mma(16));
        assert_eq!(state_pass(&few, 132, None, BOTH, true), StatePass::WgT);
        assert_eq!(
            state_pass(&few, 132, Some(StatePass::Wg), WG, true),
            StatePass::Wg
        );
        let forced = Some(StatePass::Mma(16));
        assert_eq!(state_pass(&p, 132, forced, BOTH, true), StatePass::Mma(16));
        // a forced wgmma pass where the module has none: the automatic mma.sync tile
        let wg = Some(StatePass::Wg);
        assert_eq!(state_pass(&p, 132, wg, NONE, true), StatePass::Mma(32));
        assert_eq!(StatePass::parse("wg"), wg);
        assert_eq!(StatePass::parse("wgt"), Some(StatePass::WgT));
        assert_eq!(StatePass::parse("64"), Some(StatePass::Mma(64)));
        assert_eq!(StatePass::parse("48"), None);
    }

    /// The fused T-form keeps the running state in the final-state row between chunks: only a
    /// dense f32 final state has one for every sequence (a pool row may be -1).
    #[test]
    fn the_fused_t_form_needs_a_dense_f32_final_state() {
        use deltarule_core::{DType, FinalState, InitialState};
        let mut p = prefill(4, 16, 32);
        p.final_state = FinalState::Dense;
        assert!(fused_t_applies(&p));
        p.initial = InitialState::Dense;
        p.qkv_dtype = DType::F32;
        assert!(fused_t_applies(&p), "any input dtype, any initial state");
        let mut q = p.clone();
        q.state_out_dtype = DType::BF16;
        assert!(!fused_t_applies(&q));
        for f in [FinalState::None, FinalState::InPlace] {
            let mut q = p.clone();
            q.final_state = f;
            assert!(!fused_t_applies(&q), "{f:?}");
        }
        let mut q = p.clone();
        q.op = Op::Kda;
        assert!(!fused_t_applies(&q));
    }

    /// The variant bits: the default, the grids they imply, and what the variable accepts.
    #[test]
    fn modes_pick_grids_and_reject_unknown_bits() {
        let p = prefill(256, 16, 32);
        let d = Modes::DEFAULT;
        assert_eq!(
            d.intra_heads(&p),
            2,
            "the default pairs the heads of a GVA group"
        );
        assert_eq!(
            d.intra_heads(&prefill(1, 32, 32)),
            1,
            "no group, no pairing"
        );
        assert_eq!(Modes(0).intra_heads(&p), 1);
        assert_eq!(d.fused_t_grid(&p, 132), (32, 256, 1));
        let persist = Modes(Modes::FT_PERSIST);
        assert_eq!(persist.fused_t_grid(&p, 132), (264, 1, 1), "two CTAs an SM");
        assert_eq!(
            persist.fused_t_grid(&prefill(2, 16, 32), 132),
            (64, 1, 1),
            "no more than the items"
        );
        assert_eq!(Modes::parse(" 129 ").ok(), Some(Modes(129)));
        assert_eq!(Modes::parse("0").ok(), Some(Modes(0)));
        assert_eq!(
            d.fused_t_entry(),
            "fusedtr",
            "the default loads the first tile early, its products in quadrants"
        );
        assert_eq!(d.0, 37249);
        assert_eq!(Modes(0).fused_t_entry(), "fusedt");
        assert_eq!(Modes(Modes::FT_PIPE).fused_t_entry(), "fusedtq");
        assert_eq!(
            Modes(Modes::FT_PIPE | Modes::FT_PERSIST).fused_t_entry(),
            "fusedtp"
        );
        assert_eq!(
            Modes(Modes::FT_QUAD | Modes::FT_PIPE).fused_t_entry(),
            "fusedtr"
        );
        let dec = |op, n, t| Problem::new(op, Mode::Decode, n, t, 16, 32, 128, 128);
        let one = dec(Op::Gdn, 256, 256);
        assert_eq!(
            d.decode_form(&one, 132),
            DecodeForm::Block4,
            "one token: 4 blocks"
        );
        for (bit, form) in [
            (Modes::DEC_LB6, DecodeForm::Block6),
            (Modes::DEC_LB5, DecodeForm::Block5),
            (Modes::DEC_PERSIST, DecodeForm::Persistent),
            (Modes::DEC_LB4, DecodeForm::Block4),
        ] {
            for p in [&one, &dec(Op::Kda, 256, 1024), &dec(Op::Gdn, 256, 2048)] {
                assert_eq!(
                    Modes(d.0 | bit).decode_form(p, 132),
                    form,
                    "bit {bit} forces {form:?}"
                );
            }
        }
        // (tokens, sequences) per 256 sequences -> the (gdn, kda) entry points
        let entries: Vec<_> = [
            (1, 1),
            (3, 2),
            (2, 1),
            (5, 2),
            (3, 1),
            (6, 1),
            (7, 1),
            (8, 1),
        ]
        .iter()
        .map(|&(t, n)| {
            let e = |op| d.decode_form(&dec(op, 256 * n, 256 * t), 132).entry();
            (e(Op::Gdn), e(Op::Kda))
        })
        .collect();
        assert_eq!(
            entries,
            [
                ("recurrent", "recurrent"),   // 1 token a sequence
                ("recurrent5", "recurrent5"), // 1.5
                ("recurrent5", "recurrent5"), // 2
                ("recurrent6", "recurrent5"), // 2.5
                ("recurrent6", "persistent"), // 3
                ("recurrent6", "persistent"), // 6
                ("recurrent6", "recurrent5"), // 7
                ("recurrent6", "recurrent5"), // 8
            ]
        );
        assert_eq!(
            DecodeForm::pick(Op::Gdn, 0, 0, 0, 132),
            DecodeForm::Block4,
            "no tokens"
        );
        let many = 1 << 20;
        assert_eq!(
            DecodeForm::pick(Op::Kda, 5, 0, many, 132),
            DecodeForm::Persistent
        );
        assert_eq!(
            DecodeForm::pick(Op::Kda, 20, 3, many, 132),
            DecodeForm::Persistent
        );
        assert_eq!(
            DecodeForm::pick(Op::Kda, 21, 3, many, 132),
            DecodeForm::Block5
        );
        // items all resident in one wave of 4 blocks an SM: 4 blocks whatever the tokens
        for (op, items, sms, form) in [
            (Op::Gdn, 528, 132, DecodeForm::Block4),
            (Op::Gdn, 529, 132, DecodeForm::Block6),
            (Op::Kda, 528, 132, DecodeForm::Block4),
            (Op::Kda, 529, 132, DecodeForm::Persistent),
            (Op::Kda, 128, 32, DecodeForm::Block4),
            (Op::Kda, 129, 32, DecodeForm::Persistent),
        ] {
            assert_eq!(
                DecodeForm::pick(op, 16, 4, items, sms),
                form,
                "{items} items"
            );
        }
        let few = |n| dec(Op::Gdn, n, 4 * n);
        assert_eq!(d.decode_form(&few(4), 132), DecodeForm::Block4, "512 items");
        assert_eq!(
            d.decode_form(&few(8), 132),
            DecodeForm::Block6,
            "1024 items"
        );
        assert_eq!(
            DecodeForm::Block6.blocks(32768, 132),
            32768,
            "a block per item"
        );
        let dp = DecodeForm::Persistent;
        assert_eq!(dp.blocks(32768, 132), 528, "4 blocks an SM");
        assert_eq!(dp.blocks(100, 132), 100, "no more than the items");
        for bad in ["2", "16384", "1048576", "-1", "pair", ""] {
            let e = Modes::parse(bad)
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            assert!(e.contains("DELTARULE_CUDA_MODE"), "{bad:?}: {e}");
        }
    }

    #[test]
    fn the_t_form_replaces_the_wgmma_pass_for_gdn_with_16_bit_inputs() {
        let p = prefill(1, 16, 32);
        assert_eq!(state_pass(&p, 132, None, BOTH, true), StatePass::WgT);
        // forcing the other wgmma pass keeps it (benchmarks compare the two)
        assert_eq!(
            state_pass(&p, 132, Some(StatePass::Wg), BOTH, true),
            StatePass::Wg
        );
        // f32 inputs cannot be the pass's 16-bit operands: the W/U block pass
        let mut f32in = prefill(1, 16, 32);
        f32in.qkv_dtype = deltarule_core::DType::F32;
        assert_eq!(state_pass(&f32in, 132, None, BOTH, true), StatePass::Wg);
        assert_eq!(
            state_pass(&f32in, 132, Some(StatePass::WgT), BOTH, true),
            StatePass::Wg
        );
        // kda: per-channel decays, no T-form
        let kda = Problem::new(Op::Kda, Mode::Prefill, 1, 8192, 32, 32, 128, 128);
        assert_eq!(state_pass(&kda, 132, None, BOTH, true), StatePass::Wg);
        // a module without it
        assert_eq!(
            state_pass(&p, 132, Some(StatePass::WgT), WG, true),
            StatePass::Wg
        );
        // a 16-bit o the TMA store cannot address (launch folds this into Variants::wgt); f32 o
        // is stored per thread
        let mut o16 = prefill(1, 16, 32);
        o16.out_dtype = deltarule_core::DType::BF16;
        assert!(super::o_fits_tma(&o16, 0x1000) && !super::o_fits_tma(&o16, 0x1002));
        assert!(super::o_fits_tma(&p, 0x1002));
    }

    #[test]
    fn external_workspaces_are_checked_and_never_owned() {
        use crate::launch::Workspace;
        // SAFETY (all three): the workspaces are only inspected, never launched with.
        let w = unsafe { Workspace::external(0x1_0000, 4096) }.expect("aligned");
        assert!(w.is_external());
        assert_eq!((w.bytes(), w.base()), (4096, 0x1_0000));
        assert!(
            unsafe { Workspace::external(0x1_0010, 4096) }.is_err(),
            "not 256-byte aligned"
        );
        assert!(
            unsafe { Workspace::external(0, 4096) }.is_err(),
            "null with bytes"
        );
        let empty = unsafe { Workspace::external(0, 0) }.expect("an empty external workspace");
        assert_eq!(empty.bytes(), 0);
        assert!(!Workspace::new().is_external());
    }

    #[test]
    fn q_k_v_pointers_must_be_16_byte_aligned() {
        let p = prefill(1, 4, 8);
        let ptrs = DevicePtrs {
            q: 0x1000,
            k: 0x2000,
            v: 0x3000,
            g: 0x4004, // (only q, k and v are read with vector loads)
            beta: 0x5000,
            cu_seqlens: 0x6000,
            o: 0x7000,
            state_out: 0x8000,
            ..Default::default()
        };
        if let Err(e) = check_ptrs(&p, &ptrs) {
            panic!("aligned pointers rejected: {e}");
        }
        let bad = DevicePtrs { k: 0x2008, ..ptrs };
        match check_ptrs(&p, &bad) {
            Err(Error::InvalidArgument { field, got, .. }) => {
                assert_eq!(field, "k");
                assert_eq!(got, "0x2008");
            }
            other => panic!("expected an alignment error, got {other:?}"),
        }
    }
}

//! The raw launch API: device pointers and a caller's stream in, kernels enqueued, nothing read
//! back, nothing allocated, no host synchronisation (CUDA-graph capture safe).
//!
//! # Contract of [`CudaBackend::launch`](crate::CudaBackend::launch)
//!
//! * Every tensor is contiguous, row-major, in the shapes and dtypes of `deltarule_core::Problem`
//!   (docs/spec.md), allocated in the device's primary context (PyTorch's allocations are) and
//!   at least 16-byte aligned (every allocator's default). Tensors of 16-bit states must hold a
//!   multiple of 4 elements per row (always true for the head dims accepted).
//! * Pointers that may be 0: `a_log` (no A_log, or gate = log), `dt_bias` (gate = log),
//!   `state_in` (initial state none), `state_indices` (no pool), `state_out` (final state none),
//!   `checkpoints` (no checkpoints). For an in-place pool `state_out` must equal `state_in`.
//! * `stream` is a `CUstream` of that context (0 = the legacy default stream); every kernel is
//!   enqueued on it in order (the overlapped small-bh pair's state pass with programmatic
//!   dependent launch: it may start while the intra kernel before it runs, synchronises with it
//!   through flags in the workspace, and completes after it, so the call as a whole is still
//!   ordered with the caller's work on the stream). The metadata the kernels need (chunk table with sentinel rows, chunk
//!   and checkpoint offsets) is built on the device from `cu_seqlens` by a first small kernel.
//! * The [`Workspace`] must have been reserved for (kernel, problem) with
//!   [`CudaBackend::reserve`](crate::CudaBackend::reserve) (which also compiles and loads the
//!   kernels): `launch` never allocates and never compiles.
//! * `cu_seqlens` and `state_indices` are not validated here (reading them would need a host
//!   synchronisation): out-of-range values are undefined behaviour, as in the peer kernels. The
//!   host-in/host-out `Backend::run` validates them first.

use crate::device::DeviceBuffer;
use deltarule_core::{
    BetaMode, DType, Error, FinalState, Gate, InitialState, Kernel, Op, Problem, Result,
    StateLayout,
};

/// Kernel parameters, mirrored by `struct Params` in `kernels/common.cuh` (same order, C layout).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct Params {
    pub q: u64,
    pub k: u64,
    pub v: u64,
    pub g: u64,
    pub beta: u64,
    pub cu_seqlens: u64,
    pub a_log: u64,
    pub dt_bias: u64,
    pub state_in: u64,
    pub state_indices: u64,
    pub o: u64,
    pub state_out: u64,
    pub checkpoints: u64,
    pub chunk_table: u64,
    pub chunk_offsets: u64,
    pub ck_offsets: u64,
    pub work: u64,
    pub sync: u64,
    pub t: i32,
    pub n: i32,
    pub h: i32,
    pub hv: i32,
    pub group: i32,
    pub table_rows: i32,
    pub scale: f32,
    pub lower_bound: f32,
    pub qkv_dt: i32,
    pub g_dt: i32,
    pub beta_dt: i32,
    pub out_dt: i32,
    pub s_in_dt: i32,
    pub s_out_dt: i32,
    pub off_dt: i32,
    pub idx_dt: i32,
    pub gate: i32,
    pub beta_mode: i32,
    pub l2norm: i32,
    pub layout: i32,
    pub initial: i32,
    pub final_mode: i32,
    pub ck_every: i32,
    pub has_a_log: i32,
    pub ov_tau: i32,
    pub ov_free: i32,
    pub ov_trace: i32,
    /// Runtime flags ([`FLAG_GROUP_HEADS`], [`FLAG_DEPENDENT_LAUNCH`], [`FLAG_DEFERRED_WAIT`];
    /// [`crate::Flags`]).
    pub mode: i32,
    /// A segmented call's pass 1: per segment, 1 = no chunks (kernels/prefill_segments.cuh); 0
    /// (null) otherwise.
    pub seg_skip: u64,
}

/// `Params::mode` bit (`FLAG_GROUP_HEADS` in kernels/common.cuh): the small-bh T-form intra CTA
/// runs every value head of a GVA group.
pub const FLAG_GROUP_HEADS: i32 = 1;
/// `Params::mode` bit (`FLAG_DEPENDENT_LAUNCH`): the T-form state pass without the overlap is a
/// programmatic dependent launch of the intra kernel, and waits for it.
pub const FLAG_DEPENDENT_LAUNCH: i32 = 128;
/// `Params::mode` bit (`FLAG_DEFERRED_WAIT`): with grouped heads, a head's bulk-copy wait moves
/// into the next head's stage.
pub const FLAG_DEFERRED_WAIT: i32 = 256;

const _: () = assert!(std::mem::size_of::<Params>() == 264);

/// Device pointers of one call (0 where the contract allows).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DevicePtrs {
    pub q: u64,
    pub k: u64,
    pub v: u64,
    pub g: u64,
    pub beta: u64,
    pub cu_seqlens: u64,
    pub a_log: u64,
    pub dt_bias: u64,
    pub state_in: u64,
    pub state_indices: u64,
    pub o: u64,
    pub state_out: u64,
    pub checkpoints: u64,
}

/// The dtype codes of `common.cuh`.
pub fn dtype_code(d: DType) -> i32 {
    match d {
        DType::F32 | DType::F64 => 0,
        DType::F16 => 1,
        DType::BF16 => 2,
        DType::I32 => 3,
        DType::I64 => 4,
    }
}

/// Fills every field but the metadata and workspace pointers.
pub fn params(p: &Problem, t: &DevicePtrs) -> Params {
    Params {
        q: t.q,
        k: t.k,
        v: t.v,
        g: t.g,
        beta: t.beta,
        cu_seqlens: t.cu_seqlens,
        a_log: t.a_log,
        dt_bias: t.dt_bias,
        state_in: t.state_in,
        state_indices: t.state_indices,
        o: t.o,
        state_out: t.state_out,
        checkpoints: t.checkpoints,
        t: p.tokens as i32,
        n: p.seqs as i32,
        h: p.h as i32,
        hv: p.hv as i32,
        group: p.group() as i32,
        table_rows: table_rows(p) as i32,
        scale: p.scale as f32,
        lower_bound: match p.gate {
            Gate::LowerBound(lb) => lb as f32,
            _ => 0.0,
        },
        qkv_dt: dtype_code(p.qkv_dtype),
        g_dt: dtype_code(p.g_dtype),
        beta_dt: dtype_code(p.beta_dtype),
        out_dt: dtype_code(p.out_dtype),
        s_in_dt: dtype_code(p.state_in_dtype),
        s_out_dt: dtype_code(p.state_out_dtype),
        off_dt: dtype_code(p.offsets_dtype),
        idx_dt: dtype_code(p.index_dtype),
        gate: match p.gate {
            Gate::Log => 0,
            Gate::Softplus => 1,
            Gate::LowerBound(_) => 2,
        },
        beta_mode: match p.beta {
            BetaMode::Prob => 0,
            BetaMode::Logit => 1,
            BetaMode::Logit2 => 2,
        },
        l2norm: i32::from(p.l2norm),
        layout: match p.layout {
            StateLayout::Kv => 0,
            StateLayout::Vk => 1,
        },
        initial: match p.initial {
            InitialState::None => 0,
            InitialState::Dense => 1,
            InitialState::Pool { .. } => 2,
        },
        final_mode: match p.final_state {
            FinalState::None => 0,
            FinalState::Dense => 1,
            FinalState::InPlace => 2,
        },
        ck_every: p.checkpoint_every.unwrap_or(0) as i32,
        has_a_log: i32::from(p.a_log),
        ..Params::default()
    }
}

/// Static chunk-table rows `ceil(T/64) + N - 1` (docs/spec.md).
pub fn table_rows(p: &Problem) -> usize {
    deltarule_core::varlen::ChunkTable::static_rows(p.tokens, p.seqs, p.chunk)
}

/// Words before the ready flags in the overlapped pair's area (`SYNC_FLAGS` of `common.cuh`:
/// counters and a mark per SM id).
pub const SYNC_FLAGS: usize = 4 + 512;

/// The overlapped pair's timeline records (`TRACE_INTRA`, `TRACE_STATE` of the kernels: 4 words
/// each), after the flags.
pub const TRACE_INTRA: usize = 1024;
pub const TRACE_STATE: usize = 512;
const TRACE_BYTES: usize = (TRACE_INTRA + TRACE_STATE) * 32;

/// Byte offset of the timeline in the overlapped pair's area for `blocks` workspace blocks.
pub fn trace_offset(blocks: usize) -> usize {
    ((SYNC_FLAGS + blocks) * 4).div_ceil(8) * 8
}

/// Byte layout of a workspace for (kernel, problem): metadata tables, then the small-bh blocks and
/// the overlapped pair's words ([`SYNC_FLAGS`], then a ready flag per block; zeroed on the device
/// by each call that uses them), then a segmented call's arrays.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WorkspaceLayout {
    pub chunk_table: usize,
    pub chunk_offsets: usize,
    pub ck_offsets: usize,
    pub work: usize,
    pub sync: usize,
    /// A segmented call's arrays (`SegArgs` of kernels/prefill_segments.cuh).
    pub segments: Option<SegLayout>,
    pub total: usize,
}

/// Byte offsets in the workspace of a segmented call's arrays (kernels/prefill_segments.cuh,
/// `SegArgs`): i32 segment offsets, first segments, skip marks and zero pool rows; the identity
/// [HV][K][K] f32, 64 zero rows of v, then [n_seg][HV][K][V] f32 final states, transitions (V =
/// K) and incoming states.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SegLayout {
    pub seg_cu: usize,
    pub seg_of: usize,
    pub skip: usize,
    pub zidx: usize,
    pub ident: usize,
    pub zero_v: usize,
    pub fin: usize,
    pub trans: usize,
    pub sin: usize,
    pub end: usize,
}

impl SegLayout {
    /// The arrays of `seg` for the caller's problem `p`, from byte `start`.
    pub fn new(p: &Problem, seg: &crate::plan::SegmentPlan, start: usize) -> SegLayout {
        let al = |x: usize| x.div_ceil(256) * 256;
        let ns = seg.n_seg;
        let state = ns * p.hv * p.k * p.v * 4;
        let seg_cu = al(start);
        let seg_of = al(seg_cu + (ns + 1) * 4);
        let skip = al(seg_of + (p.seqs + 1) * 4);
        let zidx = al(skip + ns * 4);
        let ident = al(zidx + ns * 4);
        let zero_v = al(ident + p.hv * p.k * p.k * 4);
        let fin = al(zero_v + 64 * p.hv * p.v * 2);
        let trans = al(fin + state);
        let sin = al(trans + ns * p.hv * p.k * p.k * 4);
        SegLayout {
            seg_cu,
            seg_of,
            skip,
            zidx,
            ident,
            zero_v,
            fin,
            trans,
            sin,
            end: al(sin + state),
        }
    }
}

impl WorkspaceLayout {
    /// `block`: workspace bytes per (chunk row, value head) of the small-bh intra kernel; `seg`:
    /// a segmented call's plan (the tables and blocks are then the segments').
    pub fn new(
        kernel: Kernel,
        p: &Problem,
        block: usize,
        seg: Option<&crate::plan::SegmentPlan>,
    ) -> Self {
        if let Some(sp) = seg {
            let mut l = WorkspaceLayout::new(kernel, &crate::plan::segmented(p, sp), block, None);
            let s = SegLayout::new(p, sp, l.total);
            l.total = s.end;
            l.segments = Some(s);
            return l;
        }
        let rows = table_rows(p);
        let chunk_table = 0;
        let chunk_offsets = chunk_table + rows * 2 * 4;
        let ck_offsets = chunk_offsets + (p.seqs + 1) * 4;
        let work = (ck_offsets + (p.seqs + 1) * 4).div_ceil(256) * 256;
        let (sync, total) = match kernel {
            Kernel::SmallBh => {
                let sync = (work + rows * p.hv * block).div_ceil(256) * 256;
                (sync, sync + trace_offset(rows * p.hv) + TRACE_BYTES)
            }
            _ => (work, work),
        };
        WorkspaceLayout {
            chunk_table,
            chunk_offsets,
            ck_offsets,
            work,
            sync,
            segments: None,
            total,
        }
    }
}

/// Device scratch of the launches, sized at warm-up ([`CudaBackend::reserve`](crate::CudaBackend::reserve))
/// and reused: a launch never allocates. Either owned (grown by `reserve`) or external: memory
/// the caller owns (e.g. a PyTorch tensor from its caching allocator, which keeps it valid inside
/// a captured CUDA graph and reuses it between calls), never grown or freed here.
#[derive(Default)]
pub struct Workspace {
    pub(crate) buf: Option<DeviceBuffer>,
    ext: Option<(u64, usize)>,
}

impl Workspace {
    pub fn new() -> Self {
        Workspace::default()
    }
    /// A workspace over `bytes` bytes of caller-owned device memory at `ptr` (256-byte aligned;
    /// a null pointer only with 0 bytes).
    ///
    /// # Safety
    ///
    /// `ptr .. ptr + bytes` must be device memory of the backend's context that stays allocated,
    /// and is used by nothing else, until the launches given this workspace have completed on
    /// their stream.
    pub unsafe fn external(ptr: u64, bytes: usize) -> Result<Self> {
        if (ptr == 0 && bytes > 0) || !ptr.is_multiple_of(256) {
            return Err(Error::invalid(
                "workspace",
                "a 256-byte aligned device pointer",
                format!("{ptr:#x} ({bytes} bytes)"),
            ));
        }
        Ok(Workspace {
            buf: None,
            ext: Some((ptr, bytes)),
        })
    }
    /// Whether the memory is the caller's (never grown here).
    pub fn is_external(&self) -> bool {
        self.ext.is_some()
    }
    /// Bytes held on the device.
    pub fn bytes(&self) -> usize {
        match self.ext {
            Some((_, n)) => n,
            None => self.buf.as_ref().map_or(0, |b| b.bytes()),
        }
    }
    pub(crate) fn base(&self) -> u64 {
        match self.ext {
            Some((p, _)) => p,
            None => self.buf.as_ref().map_or(0, |b| b.ptr()),
        }
    }
}

/// The module of (op, kernel).
pub fn module_for(op: Op, kernel: Kernel) -> crate::kernels::Module {
    use crate::kernels::Module;
    match (op, kernel) {
        (Op::Gdn, Kernel::Recurrent) => Module::GdnDecode,
        (Op::Kda, Kernel::Recurrent) => Module::KdaDecode,
        (Op::Gdn, _) => Module::GdnPrefill,
        (Op::Kda, _) => Module::KdaPrefill,
    }
}

#[cfg(test)]
mod tests {
    use super::{table_rows, trace_offset, WorkspaceLayout, SYNC_FLAGS, TRACE_INTRA, TRACE_STATE};
    use deltarule_core::{Kernel, Mode, Op, Problem};

    #[test]
    fn the_overlap_area_follows_the_blocks_with_its_flags_and_an_aligned_timeline() {
        // gdn 16/32 1x8192: 128 chunk rows x 32 heads of 37 KB blocks
        let p = Problem::new(Op::Gdn, Mode::Prefill, 1, 8192, 16, 32, 128, 128);
        let block = 37 * 1024;
        let l = WorkspaceLayout::new(Kernel::SmallBh, &p, block, None);
        let blocks = table_rows(&p) * p.hv;
        assert_eq!(blocks, 128 * 32);
        assert!(l.sync >= l.work + blocks * block && l.sync.is_multiple_of(256));
        // counters, SM marks and a flag per block, then the 8-byte aligned timeline records
        let t = trace_offset(blocks);
        assert!(
            t >= (SYNC_FLAGS + blocks) * 4
                && t.is_multiple_of(8)
                && t < (SYNC_FLAGS + blocks) * 4 + 8
        );
        assert_eq!(l.total, l.sync + t + (TRACE_INTRA + TRACE_STATE) * 32);
        // odd block counts still give an aligned timeline
        assert!(trace_offset(1).is_multiple_of(8));
        assert!(trace_offset(1) >= (SYNC_FLAGS + 1) * 4);
        // the other kernels have no small-bh area
        let c = WorkspaceLayout::new(Kernel::Chunked, &p, block, None);
        assert_eq!((c.sync, c.total), (c.work, c.work));
    }
}

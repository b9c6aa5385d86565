//! The launch layer below the `Backend` trait: host tables (chunk table, sequence table, gate
//! parameters, pool row map), the parameter block, device buffers for one call, the dispatch list
//! of each mode and the read-back of the outputs.
//!
//! gdn and kda share every stage but the intra one, so the launchers are split by mode
//! ([`prefill`], [`decode`]) rather than by op.

pub mod decode;
pub mod prefill;

use crate::device::{Dispatch, Gpu};
use crate::pipelines::PipelineCache;
use crate::shaders::Shader;
use deltarule_core::{
    BetaMode, DType, Error, FinalState, Gate, HostTensor, InitialState, Inputs, Kernel, Mode, Op,
    Outputs, Problem, Result, Validated,
};
use std::sync::Arc;

/// Chunk length of the chunked algorithm (docs/spec.md).
pub const CHUNK: usize = 64;
/// "None" in the u32 tables.
pub const NONE: u32 = u32::MAX;

/// The shaders' dtype codes.
pub fn dt_code(d: DType) -> u32 {
    match d {
        DType::BF16 => 1,
        DType::F16 => 2,
        _ => 0,
    }
}

/// The parameter block of `shaders/common.wgsl` (field order is the WGSL struct's).
#[derive(Clone, Copy, Debug, Default)]
pub struct Params {
    pub tokens: u32,
    pub heads: u32,
    pub vheads: u32,
    pub seqs: u32,
    pub chunks: u32,
    pub hv0: u32,
    pub hvb: u32,
    pub gate: u32,
    pub beta_mode: u32,
    pub l2norm: u32,
    pub has_a_log: u32,
    pub scale: f32,
    pub lb: f32,
    pub layout: u32,
    pub state_in: u32,
    pub state_dt: u32,
    pub final_mode: u32,
    pub ckpt: u32,
    pub aux_chunks: u32,
    pub aux_seqs: u32,
    pub aux_params: u32,
    pub aux_rowmap: u32,
    pub group: u32,
    pub total: u32,
    pub row_len: u32,
    pub pack_mode: u32,
    pub pack_dt: u32,
    pub rows: u32,
    pub grid_c: u32,
    pub off_o: u32,
    pub off_ckpt: u32,
    pub off_final: u32,
    pub every: u32,
    pub grid_n: u32,
    pub nvt: u32,
    pub is_kda: u32,
}

impl Params {
    pub fn words(&self) -> [u32; 36] {
        [
            self.tokens,
            self.heads,
            self.vheads,
            self.seqs,
            self.chunks,
            self.hv0,
            self.hvb,
            self.gate,
            self.beta_mode,
            self.l2norm,
            self.has_a_log,
            self.scale.to_bits(),
            self.lb.to_bits(),
            self.layout,
            self.state_in,
            self.state_dt,
            self.final_mode,
            self.ckpt,
            self.aux_chunks,
            self.aux_seqs,
            self.aux_params,
            self.aux_rowmap,
            self.group,
            self.total,
            self.row_len,
            self.pack_mode,
            self.pack_dt,
            self.rows,
            self.grid_c,
            self.off_o,
            self.off_ckpt,
            self.off_final,
            self.every,
            self.grid_n,
            self.nvt,
            self.is_kda,
        ]
    }
}

/// How the final state is produced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FinalPlan {
    None,
    /// f32 dense states in `outs`.
    DenseF32,
    /// f32 staged in `outs`, packed into a 16-bit dense tensor.
    Dense16,
    /// f32 written in place into the pool (`st`).
    PoolF32,
    /// f32 staged in `outs` (row = sequence), packed into the named rows of the 16-bit pool.
    Pool16,
}

impl FinalPlan {
    pub fn of(p: &Problem) -> FinalPlan {
        let wide = p.state_out_dtype == DType::F32;
        match (p.final_state, wide) {
            (FinalState::None, _) => FinalPlan::None,
            (FinalState::Dense, true) => FinalPlan::DenseF32,
            (FinalState::Dense, false) => FinalPlan::Dense16,
            (FinalState::InPlace, true) => FinalPlan::PoolF32,
            (FinalState::InPlace, false) => FinalPlan::Pool16,
        }
    }
    fn mode(self) -> u32 {
        match self {
            FinalPlan::None => 0,
            FinalPlan::PoolF32 => 2,
            _ => 1,
        }
    }
    /// Whether `outs` holds an f32 region of N final states.
    fn staged(self) -> bool {
        matches!(
            self,
            FinalPlan::DenseF32 | FinalPlan::Dense16 | FinalPlan::Pool16
        )
    }
}

/// The host-built tables of one call (u32 words, uploaded as `aux`).
pub struct Tables {
    pub aux: Vec<u32>,
    pub chunks: u32,
    pub aux_chunks: u32,
    pub aux_seqs: u32,
    pub aux_params: u32,
    pub aux_rowmap: u32,
    pub total_ckpt: usize,
}

fn u32_of(x: usize, what: &str) -> Result<u32> {
    u32::try_from(x).map_err(|_| {
        Error::unsupported(
            deltarule_core::BackendKind::Wgpu,
            "chunked",
            format!("{what} = {x} exceeds the 32-bit indexing of the WGSL kernels"),
        )
    })
}

/// Builds the chunk table (prefill: chunks of at most 64 tokens, cut at checkpoint positions so
/// any interval works), the sequence table, the gate parameters and the pool row map.
pub fn tables(p: &Problem, inputs: &Inputs, val: &Validated) -> Result<Tables> {
    let n = p.seqs;
    let plan = FinalPlan::of(p);
    let mut chunk_rows: Vec<[u32; 4]> = Vec::new();
    let mut seq_rows: Vec<[u32; 8]> = Vec::with_capacity(n);
    let ckpt_offs = val
        .checkpoint_offsets
        .clone()
        .unwrap_or_else(|| vec![0; n + 1]);
    for s in 0..n {
        let (start, end) = (val.cu[s], val.cu[s + 1]);
        let len = end - start;
        let c_begin = chunk_rows.len();
        if p.mode == Mode::Prefill {
            let mut pos = 0;
            while pos < len {
                let mut l = CHUNK.min(len - pos);
                if let Some(e) = p.checkpoint_every {
                    let next = (pos / e + 1) * e;
                    l = l.min(next - pos);
                }
                let mut slot = NONE;
                if let Some(e) = p.checkpoint_every {
                    if (pos + l) % e == 0 {
                        slot = u32_of(ckpt_offs[s] + (pos + l) / e - 1, "checkpoint index")?;
                    }
                }
                chunk_rows.push([u32_of(start + pos, "token")?, l as u32, s as u32, slot]);
                pos += l;
            }
        }
        let idx = val
            .indices
            .as_ref()
            .map(|v| v[s])
            .filter(|&i| i >= 0)
            .map(|i| i as u32);
        let init_row = match p.initial {
            InitialState::None => NONE,
            InitialState::Dense => s as u32,
            InitialState::Pool { .. } => idx.unwrap_or(NONE),
        };
        let (final_row, pool_row) = match plan {
            FinalPlan::None => (NONE, NONE),
            FinalPlan::DenseF32 | FinalPlan::Dense16 => (s as u32, NONE),
            FinalPlan::PoolF32 => (idx.unwrap_or(NONE), NONE),
            FinalPlan::Pool16 => match idx {
                Some(r) => (s as u32, r),
                None => (NONE, NONE),
            },
        };
        seq_rows.push([
            u32_of(start, "token")?,
            u32_of(end, "token")?,
            c_begin as u32,
            u32_of(chunk_rows.len(), "chunk")?,
            init_row,
            final_row,
            u32_of(ckpt_offs[s], "checkpoint index")?,
            pool_row,
        ]);
    }
    let mut aux: Vec<u32> = Vec::new();
    let aux_chunks = 0u32;
    aux.extend(chunk_rows.iter().flatten());
    let aux_seqs = u32_of(aux.len(), "table")?;
    aux.extend(seq_rows.iter().flatten());
    let aux_params = u32_of(aux.len(), "table")?;
    let a_log = inputs
        .a_log
        .as_ref()
        .map(|t| t.to_f32_vec())
        .unwrap_or_else(|| vec![0.0; p.hv]);
    aux.extend(a_log.iter().map(|x| x.to_bits()));
    if let Some(d) = &inputs.dt_bias {
        aux.extend(d.to_f32_vec().iter().map(|x| x.to_bits()));
    }
    let aux_rowmap = u32_of(aux.len(), "table")?;
    if plan == FinalPlan::Pool16 {
        let rows = p.initial_rows();
        let mut map = vec![NONE; rows];
        for (s, row) in seq_rows.iter().enumerate() {
            if row[7] != NONE {
                map[row[7] as usize] = s as u32;
            }
        }
        aux.extend(map);
    }
    aux.push(0);
    Ok(Tables {
        aux,
        chunks: u32_of(chunk_rows.len(), "chunks")?,
        aux_chunks,
        aux_seqs,
        aux_params,
        aux_rowmap,
        total_ckpt: val.total_checkpoints(),
    })
}

/// The parameters every stage shares.
pub fn base_params(p: &Problem, t: &Tables) -> Params {
    Params {
        tokens: p.tokens as u32,
        heads: p.h as u32,
        vheads: p.hv as u32,
        seqs: p.seqs as u32,
        chunks: t.chunks,
        hv0: 0,
        hvb: p.hv as u32,
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
        l2norm: p.l2norm as u32,
        has_a_log: p.a_log as u32,
        scale: p.scale as f32,
        lb: match p.gate {
            Gate::LowerBound(lb) => lb as f32,
            _ => 0.0,
        },
        layout: match p.layout {
            deltarule_core::StateLayout::Kv => 0,
            deltarule_core::StateLayout::Vk => 1,
        },
        state_in: (p.initial != InitialState::None) as u32,
        state_dt: dt_code(p.state_in_dtype),
        final_mode: FinalPlan::of(p).mode(),
        ckpt: p.checkpoint_every.is_some() as u32,
        aux_chunks: t.aux_chunks,
        aux_seqs: t.aux_seqs,
        aux_params: t.aux_params,
        aux_rowmap: t.aux_rowmap,
        group: p.group() as u32,
        every: p.checkpoint_every.unwrap_or(0) as u32,
        is_kda: (p.op == Op::Kda) as u32,
        ..Params::default()
    }
}

/// Workgroups `(x, y)` covering `count` along a linearised axis, and the x extent (grid stride).
pub fn grid(count: u32) -> (u32, u32, u32) {
    let gx = count.clamp(1, 32768);
    (gx, count.div_ceil(gx), gx)
}

/// The device buffers of one set of inputs (rotated by the benchmark).
pub struct InputSet {
    pub q: wgpu::Buffer,
    pub k: wgpu::Buffer,
    pub v: wgpu::Buffer,
    pub g: wgpu::Buffer,
    pub beta: wgpu::Buffer,
    /// Initial state (dense or pool) in its dtype, or a dummy word.
    pub st: wgpu::Buffer,
    pub bytes: usize,
}

impl InputSet {
    pub fn upload(gpu: &Gpu, inputs: &Inputs) -> InputSet {
        let st = match &inputs.initial_state {
            Some(s) => gpu.storage("state", &s.to_le_bytes()),
            None => gpu.storage("state (none)", &[0u8; 4]),
        };
        let sizes = [&inputs.q, &inputs.k, &inputs.v, &inputs.g, &inputs.beta]
            .iter()
            .map(|t| t.size_bytes())
            .sum::<usize>()
            + inputs
                .initial_state
                .as_ref()
                .map(|s| s.size_bytes())
                .unwrap_or(0);
        InputSet {
            q: gpu.storage("q", &inputs.q.to_le_bytes()),
            k: gpu.storage("k", &inputs.k.to_le_bytes()),
            v: gpu.storage("v", &inputs.v.to_le_bytes()),
            g: gpu.storage("g", &inputs.g.to_le_bytes()),
            beta: gpu.storage("beta", &inputs.beta.to_le_bytes()),
            st,
            bytes: sizes,
        }
    }
}

/// Element counts and offsets of the f32 results region (`outs`).
#[derive(Clone, Copy, Debug)]
pub struct OutLayout {
    pub o: usize,
    pub ckpt: usize,
    pub fin: usize,
    pub off_ckpt: usize,
    pub off_final: usize,
    pub total: usize,
}

impl OutLayout {
    pub fn of(p: &Problem, t: &Tables) -> OutLayout {
        let o = p.tokens * p.hv * p.v;
        let ckpt = t.total_ckpt * p.hv * p.k * p.v;
        let fin = if FinalPlan::of(p).staged() {
            p.seqs * p.hv * p.k * p.v
        } else {
            0
        };
        OutLayout {
            o,
            ckpt,
            fin,
            off_ckpt: o,
            off_final: o + ckpt,
            total: o + ckpt + fin,
        }
    }
}

/// The buffers of one call that do not depend on the input set: tables, results, 16-bit
/// destinations and (prefill) the workspace.
pub struct Shared {
    pub tables: Tables,
    pub aux: wgpu::Buffer,
    pub outs: wgpu::Buffer,
    pub out: OutLayout,
    pub o16: Option<wgpu::Buffer>,
    pub ckpt16: Option<wgpu::Buffer>,
    pub final16: Option<wgpu::Buffer>,
    pub plan: FinalPlan,
    /// The prefill output pass writes 16-bit o itself (even V): no pack pass for o.
    pub o_direct: bool,
    /// Bound where a stage's optional buffer is absent.
    pub dummy: wgpu::Buffer,
}

fn nan16(dt: DType) -> [u8; 2] {
    match dt {
        DType::BF16 => 0x7fc0u16.to_le_bytes(),
        _ => 0x7e00u16.to_le_bytes(),
    }
}

/// A 16-bit buffer of `elems` elements filled with NaN (the poison of every output).
fn poison16(gpu: &Gpu, label: &str, dt: DType, elems: usize) -> wgpu::Buffer {
    let words = elems.div_ceil(2).max(1);
    let pat = nan16(dt);
    let bytes: Vec<u8> = (0..2 * words).flat_map(|_| pat).collect();
    gpu.storage(label, &bytes)
}

impl Shared {
    /// Allocates the results poisoned with NaN, so unwritten elements show up.
    pub fn new(gpu: &Gpu, p: &Problem, tables: Tables) -> Result<Shared> {
        let out = OutLayout::of(p, &tables);
        let max = gpu.max_binding() as usize;
        if out.total * 4 > max || out.total >= u32::MAX as usize {
            return Err(Error::unsupported(
                deltarule_core::BackendKind::Wgpu,
                "chunked",
                format!(
                    "the f32 results ({} MiB) exceed the device's largest storage binding \
                     ({} MiB)",
                    (out.total * 4) >> 20,
                    max >> 20
                ),
            ));
        }
        let nan: Vec<u8> = std::iter::repeat_n(f32::NAN.to_le_bytes(), out.total.max(1))
            .flatten()
            .collect();
        let outs = gpu.storage("outs", &nan);
        let aux_bytes: Vec<u8> = tables.aux.iter().flat_map(|w| w.to_le_bytes()).collect();
        let aux = gpu.storage("aux", &aux_bytes);
        let plan = FinalPlan::of(p);
        let o16 = (p.out_dtype != DType::F32).then(|| poison16(gpu, "o16", p.out_dtype, out.o));
        let ckpt16 = (out.ckpt > 0 && p.state_out_dtype != DType::F32)
            .then(|| poison16(gpu, "ckpt16", p.state_out_dtype, out.ckpt));
        let final16 = (plan == FinalPlan::Dense16)
            .then(|| poison16(gpu, "final16", p.state_out_dtype, out.fin));
        let o_direct = o16.is_some() && p.mode == Mode::Prefill && p.v.is_multiple_of(2);
        Ok(Shared {
            tables,
            aux,
            outs,
            out,
            o16,
            ckpt16,
            final16,
            plan,
            o_direct,
            dummy: gpu.storage("dummy", &[0u8; 16]),
        })
    }

    /// The packing dispatches that turn f32 results into the caller's 16-bit dtypes.
    pub fn pack_dispatches<'a>(
        &'a self,
        p: &Problem,
        set: &'a InputSet,
        pack: &'a wgpu::ComputePipeline,
        uniforms: &'a [wgpu::Buffer],
    ) -> Vec<Dispatch<'a>> {
        let mut v = Vec::new();
        let mut u = uniforms.iter();
        let o_packed = if self.o_direct {
            None
        } else {
            self.o16.as_ref()
        };
        for (buf, total) in [
            (o_packed, self.out.o),
            (self.ckpt16.as_ref(), self.out.ckpt),
            (self.final16.as_ref(), self.out.fin),
        ] {
            if let Some(b) = buf {
                let words = total.div_ceil(2) as u32;
                let (gx, gy, _) = grid(words.div_ceil(256));
                if let Some(ub) = u.next() {
                    if total > 0 {
                        v.push(Dispatch {
                            pipeline: pack,
                            uniform: ub,
                            storage: vec![&self.aux, &self.outs, b],
                            groups: [gx, gy, 1],
                            label: "pack16",
                        });
                    }
                }
            }
        }
        if self.plan == FinalPlan::Pool16 {
            if let Some(ub) = u.next() {
                let row_len = p.hv * p.k * p.v;
                let gx = (row_len / 2 + 2).div_ceil(256) as u32;
                v.push(Dispatch {
                    pipeline: pack,
                    uniform: ub,
                    storage: vec![&self.aux, &self.outs, &set.st],
                    groups: [gx, p.seqs as u32, 1],
                    label: "pack16 pool",
                });
            }
        }
        v
    }

    /// Uniform blocks of the packing dispatches, in the order of [`Shared::pack_dispatches`].
    pub fn pack_uniforms(&self, gpu: &Gpu, p: &Problem) -> Vec<wgpu::Buffer> {
        let base = base_params(p, &self.tables);
        let mut v = Vec::new();
        for (present, off, total, dt) in [
            (
                self.o16.is_some() && !self.o_direct,
                0,
                self.out.o,
                p.out_dtype,
            ),
            (
                self.ckpt16.is_some(),
                self.out.off_ckpt,
                self.out.ckpt,
                p.state_out_dtype,
            ),
            (
                self.final16.is_some(),
                self.out.off_final,
                self.out.fin,
                p.state_out_dtype,
            ),
        ] {
            if present {
                let words = total.div_ceil(2) as u32;
                let (_, _, gx) = grid(words.div_ceil(256));
                let prm = Params {
                    pack_mode: 0,
                    pack_dt: dt_code(dt),
                    total: total as u32,
                    off_o: off as u32,
                    grid_c: gx,
                    ..base
                };
                v.push(gpu.uniform(&prm.words()));
            }
        }
        if self.plan == FinalPlan::Pool16 {
            let prm = Params {
                pack_mode: 1,
                pack_dt: dt_code(p.state_out_dtype),
                row_len: (p.hv * p.k * p.v) as u32,
                rows: p.initial_rows() as u32,
                off_o: self.out.off_final as u32,
                ..base
            };
            v.push(gpu.uniform(&prm.words()));
        }
        v
    }

    /// Reads the outputs back as host tensors in the caller's dtypes.
    pub fn download(&self, gpu: &Gpu, p: &Problem, set: &InputSet) -> Result<Outputs> {
        let f32_region = |off: usize, len: usize, shape: Vec<usize>| -> Result<HostTensor> {
            let raw = gpu.read(&self.outs, 4 * off as u64, 4 * len as u64)?;
            HostTensor::from_le_bytes(DType::F32, shape, &raw)
        };
        let b16 = |buf: &wgpu::Buffer, len: usize, dt: DType, shape: Vec<usize>| {
            let raw = gpu.read(buf, 0, 2 * len as u64)?;
            HostTensor::from_le_bytes(dt, shape, &raw)
        };
        let o = match &self.o16 {
            Some(b) => b16(b, self.out.o, p.out_dtype, p.o_shape())?,
            None => f32_region(0, self.out.o, p.o_shape())?,
        };
        let final_state = match self.plan {
            FinalPlan::None => None,
            FinalPlan::DenseF32 => Some(f32_region(
                self.out.off_final,
                self.out.fin,
                p.state_shape(p.seqs),
            )?),
            FinalPlan::Dense16 => match &self.final16 {
                Some(b) => Some(b16(
                    b,
                    self.out.fin,
                    p.state_out_dtype,
                    p.state_shape(p.seqs),
                )?),
                None => None,
            },
            FinalPlan::PoolF32 | FinalPlan::Pool16 => {
                let rows = p.initial_rows();
                let len = rows * p.hv * p.k * p.v;
                let raw = gpu.read(&set.st, 0, (len * p.state_out_dtype.size()) as u64)?;
                Some(HostTensor::from_le_bytes(
                    p.state_out_dtype,
                    p.state_shape(rows),
                    &raw,
                )?)
            }
        };
        let checkpoints = if p.checkpoint_every.is_some() {
            let shape = p.state_shape(self.tables.total_ckpt);
            Some(match &self.ckpt16 {
                Some(b) => b16(b, self.out.ckpt, p.state_out_dtype, shape)?,
                None if self.out.ckpt == 0 => HostTensor::from_f64(p.state_out_dtype, shape, &[]),
                None => f32_region(self.out.off_ckpt, self.out.ckpt, shape)?,
            })
        } else {
            None
        };
        Ok(Outputs {
            o,
            final_state,
            checkpoints,
        })
    }
}

/// The pipelines and dispatch list of one call, independent of the input set.
pub struct Call {
    pub shared: Shared,
    pub stages: Stages,
    pub pack: Arc<wgpu::ComputePipeline>,
    pub pack_uniforms: Vec<wgpu::Buffer>,
}

/// The mode-specific part of a call.
pub enum Stages {
    Prefill(prefill::Prefill),
    Decode(decode::Decode),
}

impl Call {
    /// `kernel`: `Chunked`/`Recurrent`, or `Coop` (prefill with the cooperative-matrix state
    /// pass; the caller checked that the device and head dims allow it).
    pub fn new(
        gpu: &Gpu,
        cache: &PipelineCache,
        kernel: Kernel,
        p: &Problem,
        inputs: &Inputs,
        val: &Validated,
    ) -> Result<Call> {
        check_sizes(gpu, kernel, inputs)?;
        let tables = tables(p, inputs, val)?;
        let shared = Shared::new(gpu, p, tables)?;
        let stages = match p.mode {
            Mode::Prefill => Stages::Prefill(prefill::Prefill::new(
                gpu,
                cache,
                p,
                &shared,
                kernel == Kernel::Coop,
            )?),
            Mode::Decode => Stages::Decode(decode::Decode::new(gpu, cache, p, &shared)?),
        };
        let pack = cache.get(gpu, Shader::Pack16, &[])?;
        let pack_uniforms = shared.pack_uniforms(gpu, p);
        Ok(Call {
            shared,
            stages,
            pack,
            pack_uniforms,
        })
    }

    /// Every dispatch of one call on `set`, in order.
    pub fn dispatches<'a>(&'a self, p: &Problem, set: &'a InputSet) -> Vec<Dispatch<'a>> {
        let mut v = match &self.stages {
            Stages::Prefill(x) => x.dispatches(&self.shared, set),
            Stages::Decode(x) => x.dispatches(&self.shared, set),
        };
        v.extend(
            self.shared
                .pack_dispatches(p, set, &self.pack, &self.pack_uniforms),
        );
        v.retain(|d| d.groups.iter().all(|&g| g > 0));
        v
    }
}

/// Every input must fit one storage binding and be indexable with the kernels' 32-bit element
/// indices; otherwise the problem is unsupported here (with the numbers), never truncated.
pub fn check_sizes(gpu: &Gpu, kernel: Kernel, inputs: &Inputs) -> Result<()> {
    let named = [
        ("q", Some(&inputs.q)),
        ("k", Some(&inputs.k)),
        ("v", Some(&inputs.v)),
        ("g", Some(&inputs.g)),
        ("beta", Some(&inputs.beta)),
        ("initial_state", inputs.initial_state.as_ref()),
    ];
    for (name, t) in named {
        let Some(t) = t else { continue };
        if t.numel() >= u32::MAX as usize || t.size_bytes() as u64 > gpu.max_binding() {
            return Err(Error::unsupported(
                deltarule_core::BackendKind::Wgpu,
                kernel.name(),
                format!(
                    "{name} has {} elements ({} MiB): the WGSL kernels index at most 2^32 - 1 \
                     elements and the device binds at most {} MiB",
                    t.numel(),
                    t.size_bytes() >> 20,
                    gpu.max_binding() >> 20
                ),
            ));
        }
    }
    Ok(())
}

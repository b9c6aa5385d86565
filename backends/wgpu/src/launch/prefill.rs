//! Prefill (the chunked algorithm of docs/spec.md) in three stages: the intra stage
//! (`{gdn,kda}_prefill_intra.wgsl`), the state pass split over value tiles
//! (`prefill_state.wgsl`) and the output pass (`prefill_output.wgsl`); the `coop` kernel runs its
//! intra variant and `prefill_state_coop.wgsl`, which writes o itself. Value heads are processed
//! in batches small enough that each workspace buffer fits one storage binding.

use super::{base_params, dt_code, grid, InputSet, Params, Shared};
use crate::device::{Dispatch, Gpu};
use crate::error;
use crate::pipelines::PipelineCache;
use crate::shaders::Shader;
use deltarule_core::{Op, Problem, Result};
use std::sync::Arc;

/// Columns of a state-pass workgroup: the K x BV state slice must fit 4096 floats, so 32 only
/// for K <= 128; `wanted` = Some(16) asks for the narrower tile (twice the workgroups).
pub fn state_tile(k: usize, wanted: Option<usize>) -> usize {
    if k <= 128 && wanted != Some(16) {
        32
    } else {
        16
    }
}

/// Workgroup memory of the kda coop intra stage with step 4 on cooperative matrices
/// (shaders/kda_intra_coop.wgsl).
pub const KDA_STEP4_COOP_WORKGROUP_BYTES: u32 = 47_888;

/// The `coop` kernel's kda intra stage: step 4 on cooperative matrices where the adapter has the
/// workgroup memory for it, else in f32 (lavapipe's 32 KiB, where CI emulates the kernel).
pub fn kda_intra_coop(gpu: &Gpu) -> Shader {
    if gpu.limits.max_compute_workgroup_storage_size >= KDA_STEP4_COOP_WORKGROUP_BYTES {
        Shader::KdaPrefillIntraCoop
    } else {
        Shader::KdaPrefillIntraCoopF32Step4
    }
}

/// f32 words of one (chunk, head) slot of the `wsa` workspace (layout in `common.wgsl`):
/// Wᵀ [K][64], kdec [64][K4], qdec [64][K], P [64][64], e^Γ_last [K4], and for kda Γ [64][K]
/// and Γ_last − Γ [64][K].
pub fn wsa_slot(op: Op, k: usize) -> usize {
    let k4 = k.div_ceil(4) * 4;
    let gam = 128 * k + 64 * k4 + 4096 + k4;
    match op {
        Op::Gdn => gam,
        Op::Kda => gam + 128 * k,
    }
}

/// f16 halves of one (chunk, head) slot of the `coop` kernel's `ws16` workspace (layout in
/// `common.wgsl`'s ws16_slot, the same for both ops): W [64][K], kdecᵀ [K][64], qdec [64][K],
/// P [64][64] as 16 x 16 tiles (the A operands of the cooperative-matrix state pass).
pub fn ws16_slot(k: usize) -> usize {
    192 * k + 4096
}

struct Batch {
    hvb: u32,
    intra: wgpu::Buffer,
    state: wgpu::Buffer,
    output: wgpu::Buffer,
}

pub struct Prefill {
    intra: Arc<wgpu::ComputePipeline>,
    state: Arc<wgpu::ComputePipeline>,
    /// `None` in the `coop` kernel, whose state pass writes o itself (it binds o16 as binding 8,
    /// the dummy when o goes to `outs` as f32)
    output: Option<Arc<wgpu::ComputePipeline>>,
    wsa: wgpu::Buffer,
    wsu: wgpu::Buffer,
    wsh: wgpu::Buffer,
    /// The coop kernel's f16 workspace (`ws16_slot`): binding 9 of its intra variant, 7 of its
    /// state pass; else `None`.
    ws16: Option<wgpu::Buffer>,
    batches: Vec<Batch>,
    chunks: u32,
    seqs: u32,
    nvt_state: u32,
    nvt_out: u32,
}

impl Prefill {
    /// `coop`: the `coop` kernel (intra variant, `prefill_state_coop.wgsl` with BV = 32, no
    /// output pass).
    pub fn new(
        gpu: &Gpu,
        cache: &PipelineCache,
        p: &Problem,
        sh: &Shared,
        coop: bool,
    ) -> Result<Prefill> {
        let (k, v) = (p.k as f64, p.v as f64);
        let intra_shader = match (p.op, coop) {
            (Op::Gdn, false) => Shader::GdnPrefillIntra,
            (Op::Kda, false) => Shader::KdaPrefillIntra,
            (Op::Gdn, true) => Shader::GdnPrefillIntraCoop,
            (Op::Kda, true) => kda_intra_coop(gpu),
        };
        let mut consts = vec![
            ("HEAD_K", k),
            ("HEAD_V", v),
            ("QKV_DT", dt_code(p.qkv_dtype) as f64),
            ("G_DT", dt_code(p.g_dtype) as f64),
            ("BETA_DT", dt_code(p.beta_dtype) as f64),
        ];
        if intra_shader.overrides().contains(&"UW") {
            // step 4's U tile width (intra_coop.wgsl): 64 columns where 64 divides V
            consts.push(("UW", if p.v.is_multiple_of(64) { 64.0 } else { 32.0 }));
        }
        let intra = cache.get(gpu, intra_shader, &consts)?;
        let (bv, state, output) = if coop {
            let state = cache.get(
                gpu,
                Shader::PrefillStateCoop,
                &[("HEAD_K", k), ("HEAD_V", v)],
            )?;
            (32, state, None)
        } else {
            let bv = state_tile(p.k, gpu.state_bv);
            let state = cache.get(
                gpu,
                Shader::PrefillState,
                &[("HEAD_K", k), ("HEAD_V", v), ("BV", bv as f64)],
            )?;
            let output = cache.get(gpu, Shader::PrefillOutput, &[("HEAD_K", k), ("HEAD_V", v)])?;
            (bv, state, Some(output))
        };

        let nc = sh.tables.chunks as usize;
        let v4 = p.v.div_ceil(4) * 4;
        // f32 words per head of each workspace (ws16 in halves, coop only; the coop state pass
        // keeps h to itself, so wsh is not used then)
        let ws16_words = if coop { nc * ws16_slot(p.k) / 2 } else { 0 };
        let wsh_words = if coop { 0 } else { nc * p.k * v4 };
        let per_head = [
            nc * wsa_slot(p.op, p.k),
            nc * 64 * v4,
            wsh_words,
            ws16_words,
        ]
        .into_iter()
        .max()
        .unwrap_or(0)
            * 4;
        let limit = gpu.max_binding() as usize;
        let hvb = limit.checked_div(per_head).unwrap_or(p.hv).min(p.hv);
        if hvb == 0 {
            return Err(error::device(format!(
                "one value head of this problem needs a {} MiB workspace, more than the \
                 device's largest storage binding ({} MiB)",
                per_head >> 20,
                limit >> 20
            )));
        }
        let wsa = gpu.scratch("wsa", (hvb * nc * wsa_slot(p.op, p.k) * 4) as u64);
        let wsu = gpu.scratch("wsu", (hvb * nc * 64 * v4 * 4) as u64);
        // (4 words when unused: the state pass still binds it)
        let wsh = gpu.scratch("wsh", (hvb * wsh_words * 4).max(16) as u64);
        let ws16 = coop.then(|| gpu.scratch("ws16", (hvb * ws16_words * 4) as u64));

        let base = base_params(p, &sh.tables);
        let (_, _, grid_c) = grid(sh.tables.chunks);
        let (_, _, grid_n) = grid(p.seqs as u32);
        let nvt_state = p.v.div_ceil(bv) as u32;
        let nvt_out = p.v.div_ceil(64) as u32;
        let pack_dt = if sh.o_direct { dt_code(p.out_dtype) } else { 0 };
        let mut batches = Vec::new();
        let mut hv0 = 0;
        while hv0 < p.hv {
            let n = hvb.min(p.hv - hv0) as u32;
            let common = Params {
                hv0: hv0 as u32,
                hvb: n,
                grid_c,
                grid_n,
                off_o: 0,
                off_ckpt: sh.out.off_ckpt as u32,
                off_final: sh.out.off_final as u32,
                ..base
            };
            batches.push(Batch {
                hvb: n,
                intra: gpu.uniform(&common.words()),
                state: gpu.uniform(
                    &Params {
                        nvt: nvt_state,
                        // (the coop pass writes o; the f32 one never reads pack_dt)
                        pack_dt: if coop { pack_dt } else { 0 },
                        ..common
                    }
                    .words(),
                ),
                output: gpu.uniform(
                    &Params {
                        nvt: nvt_out,
                        pack_dt,
                        ..common
                    }
                    .words(),
                ),
            });
            hv0 += hvb;
        }
        Ok(Prefill {
            intra,
            state,
            output,
            wsa,
            wsu,
            wsh,
            ws16,
            batches,
            chunks: sh.tables.chunks,
            seqs: p.seqs as u32,
            nvt_state,
            nvt_out,
        })
    }

    pub fn dispatches<'a>(&'a self, sh: &'a Shared, set: &'a InputSet) -> Vec<Dispatch<'a>> {
        let (cx, cy, _) = grid(self.chunks);
        let (nx, ny, _) = grid(self.seqs);
        let mut v = Vec::new();
        let o16 = match (&sh.o16, sh.o_direct) {
            (Some(b), true) => b,
            _ => &sh.dummy,
        };
        for b in &self.batches {
            if self.chunks > 0 {
                v.push(Dispatch {
                    pipeline: &self.intra,
                    uniform: &b.intra,
                    storage: match &self.ws16 {
                        Some(w16) => vec![
                            &sh.aux, &set.q, &set.k, &set.v, &set.g, &set.beta, &self.wsa,
                            &self.wsu, w16,
                        ],
                        None => vec![
                            &sh.aux, &set.q, &set.k, &set.v, &set.g, &set.beta, &self.wsa,
                            &self.wsu,
                        ],
                    },
                    groups: [cx, cy, b.hvb],
                    label: "prefill intra",
                });
            }
            v.push(Dispatch {
                pipeline: &self.state,
                uniform: &b.state,
                storage: match &self.ws16 {
                    Some(w16) => vec![
                        &sh.aux, &self.wsa, &self.wsu, &self.wsh, &set.st, &sh.outs, w16, o16,
                    ],
                    None => vec![&sh.aux, &self.wsa, &self.wsu, &self.wsh, &set.st, &sh.outs],
                },
                groups: [nx, ny, b.hvb * self.nvt_state],
                label: "prefill state",
            });
            if let (true, Some(output)) = (self.chunks > 0, &self.output) {
                v.push(Dispatch {
                    pipeline: output,
                    uniform: &b.output,
                    storage: vec![&sh.aux, &self.wsa, &self.wsu, &self.wsh, &sh.outs, o16],
                    groups: [cx, cy, b.hvb * self.nvt_out],
                    label: "prefill output",
                });
            }
        }
        v
    }
}

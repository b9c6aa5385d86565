//! Chunked prefill (SPEC.md section 5): the intra stage (`{gdn,kda}_prefill_intra.wgsl`), the
//! state pass split over value tiles (`prefill_state.wgsl`) and the output pass
//! (`prefill_output.wgsl`). Value heads are processed in batches small enough that each
//! workspace buffer fits one storage binding.

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

/// W·S tiling of the state pass (`WS_SPLIT`): 1 (split K, 4 x 4 blocks) unless 0 is asked for.
pub fn state_ws(wanted: Option<u32>) -> u32 {
    match wanted {
        Some(0) => 0,
        _ => 1,
    }
}

/// Workgroup memory of the kda coop intra stage with step 4 on cooperative matrices
/// (shaders/kda_intra_coop.wgsl).
pub const KDA_MMA4_WORKGROUP_BYTES: u32 = 47_888;

/// Whether the coop kernel's kda intra stage runs step 4 on cooperative matrices
/// (`Shader::KdaPrefillIntraMma`): where the adapter has the workgroup memory for it, unless
/// `DELTARULE_WGPU_KDA_MMA4=0` asks for the f32 step 4 (benchmarks). Lavapipe (32 KiB, CI's
/// emulation) runs the f32 one.
pub fn kda_mma4(gpu: &Gpu) -> bool {
    gpu.kda_mma4 != Some(0)
        && gpu.limits.max_compute_workgroup_storage_size >= KDA_MMA4_WORKGROUP_BYTES
}

/// The coop kernel's f16 A operands as 16 x 16 tiles (`TILED`, common.wgsl): 1 unless 0 is asked
/// for (`DELTARULE_WGPU_TILED=0`: row-major, benchmarks).
pub fn tiled(wanted: Option<u32>) -> u32 {
    match wanted {
        Some(0) => 0,
        _ => 1,
    }
}

/// kda intra step 2 (`STEP2_REF`): 1 (reference points) unless 0 is asked for.
pub fn kda_step2(wanted: Option<u32>) -> u32 {
    match wanted {
        Some(0) => 0,
        _ => 1,
    }
}

/// The coop kernel's state pass with the output pass folded in (`FUSE_O`,
/// prefill_state_coop.wgsl v4): 1 unless 0 is asked for.
pub fn fuse_o(wanted: Option<u32>) -> u32 {
    match wanted {
        Some(0) => 0,
        _ => 1,
    }
}

/// f32 words of one (chunk, head) slot of the `wsa` workspace (layout in `common.wgsl`):
/// Wᵀ [K][64], kdec [64][K4], qdec [64][K], P [64][64], e^Γ_last [K4], and for kda Γ [64][K].
pub fn wsa_slot(op: Op, k: usize) -> usize {
    let k4 = k.div_ceil(4) * 4;
    let gam = 128 * k + 64 * k4 + 4096 + k4;
    match op {
        Op::Gdn => gam,
        Op::Kda => gam + 64 * k,
    }
}

/// f16 halves of one (chunk, head) slot of the coop kernel's `ws16` workspace (layout in
/// `common.wgsl`'s ws16_slot, the same for both ops since session 12): Wᵀ [K][64], kdec [64][K],
/// qdecᵀ [K][64], Pᵀ [64][64], h [K][V], V_new [64][V] (the operands of the cooperative-matrix
/// state and output passes).
pub fn ws16_slot(k: usize, v: usize) -> usize {
    192 * k + 4096 + k * v + 64 * v
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
    /// `None` when the coop state pass writes o itself (`fused`: FUSE_O, and it binds o16 as
    /// binding 8, the dummy when o goes to `outs` as f32)
    output: Option<Arc<wgpu::ComputePipeline>>,
    wsa: wgpu::Buffer,
    wsu: wgpu::Buffer,
    wsh: wgpu::Buffer,
    /// The coop kernel's f16 workspace (`ws16_slot`): binding 9 of its intra variant, 7 of its
    /// state pass and of gdn's output pass; else `None`.
    ws16: Option<wgpu::Buffer>,
    batches: Vec<Batch>,
    /// gdn's coop kernel: the output pass on cooperative matrices (binds ws16 as binding 7)
    out16: bool,
    chunks: u32,
    seqs: u32,
    nvt_state: u32,
    nvt_out: u32,
}

impl Prefill {
    /// `coop`: the state pass on cooperative matrices (`prefill_state_coop.wgsl`, BV = 32).
    pub fn new(
        gpu: &Gpu,
        cache: &PipelineCache,
        p: &Problem,
        sh: &Shared,
        coop: bool,
    ) -> Result<Prefill> {
        let (k, v) = (p.k as f64, p.v as f64);
        // the coop kernel's intra variants write Wᵀ and kdec as f16 into ws16 (ws16_on.wgsl)
        let intra_shader = match (p.op, coop) {
            (Op::Gdn, false) => Shader::GdnPrefillIntra,
            (Op::Kda, false) => Shader::KdaPrefillIntra,
            (Op::Gdn, true) => Shader::GdnPrefillIntraCoop,
            (Op::Kda, true) if kda_mma4(gpu) => Shader::KdaPrefillIntraMma,
            (Op::Kda, true) => Shader::KdaPrefillIntraCoop,
        };
        let mut consts = vec![
            ("HEAD_K", k),
            ("HEAD_V", v),
            ("QKV_DT", dt_code(p.qkv_dtype) as f64),
            ("G_DT", dt_code(p.g_dtype) as f64),
            ("BETA_DT", dt_code(p.beta_dtype) as f64),
        ];
        if gpu.probe != 0 {
            consts.push(("PROBE", gpu.probe as f64));
        }
        if p.op == Op::Kda {
            consts.push(("STEP2_REF", f64::from(kda_step2(gpu.kda_step2))));
        }
        if coop {
            // the f16 A operands stored as 16 x 16 tiles (common.wgsl's TILED)
            consts.push(("TILED", f64::from(tiled(gpu.tiled))));
        }
        if matches!(
            intra_shader,
            Shader::GdnPrefillIntraCoop | Shader::KdaPrefillIntraMma
        ) {
            // step 4's U tile width (gdn_intra_coop.wgsl): 64 columns where 64 divides V
            consts.push(("UW", if p.v.is_multiple_of(64) { 64.0 } else { 32.0 }));
        }
        let intra = cache.get(gpu, intra_shader, &consts)?;
        // the coop kernel also runs the output pass on cooperative matrices: its intra stage
        // writes qdecᵀ and Pᵀ, its state pass h and V_new as f16 into ws16 (OUT16) instead of
        // f32 into wsa / wsh / wsu (kda too since session 12)
        let out16 = coop;
        // (and, by default, the coop state pass computes o itself over the h and V_new tiles it
        // already holds: prefill_state_coop.wgsl v4, session 13)
        let fused = coop && fuse_o(gpu.fuse_o) == 1;
        let (bv, state) = if coop {
            let state = cache.get(
                gpu,
                Shader::PrefillStateCoop,
                &[
                    ("HEAD_K", k),
                    ("HEAD_V", v),
                    ("OUT16", f64::from(u8::from(out16))),
                    ("FUSE_O", f64::from(u8::from(fused))),
                    ("LATE_B", f64::from(u8::from(gpu.state_late != Some(0)))),
                    ("PROBE", gpu.probe as f64),
                    ("TILED", f64::from(tiled(gpu.tiled))),
                ],
            )?;
            (32, state)
        } else {
            let bv = state_tile(p.k, gpu.state_bv);
            let state = cache.get(
                gpu,
                Shader::PrefillState,
                &[
                    ("HEAD_K", k),
                    ("HEAD_V", v),
                    ("BV", bv as f64),
                    ("WS_SPLIT", state_ws(gpu.state_ws) as f64),
                ],
            )?;
            (bv, state)
        };
        // (the coop output pass reads its f16 operands straight from ws16: gdn 0.47 -> 0.38 ms on
        // the H200, session 8; a version staging them through workgroup memory had measured
        // 0.744 ms against the f32 pass's 0.469 for kda, session 3. kda's kernel takes it since
        // session 12, checked through the emulation on lavapipe, not timed on the H200)
        let output_shader = if out16 {
            Shader::PrefillOutputCoop
        } else {
            Shader::PrefillOutput
        };
        let output = if fused {
            None
        } else if out16 {
            let tl = f64::from(tiled(gpu.tiled));
            Some(cache.get(
                gpu,
                output_shader,
                &[("HEAD_K", k), ("HEAD_V", v), ("TILED", tl)],
            )?)
        } else {
            Some(cache.get(gpu, output_shader, &[("HEAD_K", k), ("HEAD_V", v)])?)
        };

        let nc = sh.tables.chunks as usize;
        let v4 = p.v.div_ceil(4) * 4;
        // f32 words per head of each workspace (ws16 in halves, coop only; h is in ws16 when
        // out16, so wsh is not used then)
        let ws16_words = if coop {
            nc * ws16_slot(p.k, p.v) / 2
        } else {
            0
        };
        let wsh_words = if out16 { 0 } else { nc * p.k * v4 };
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
                        // (the fused coop pass writes o; the others never read pack_dt)
                        pack_dt: if fused { pack_dt } else { 0 },
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
            out16,
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
                let mut storage = vec![&sh.aux, &self.wsa, &self.wsu, &self.wsh, &sh.outs, o16];
                if let (true, Some(w16)) = (self.out16, &self.ws16) {
                    storage.push(w16);
                }
                v.push(Dispatch {
                    pipeline: output,
                    uniform: &b.output,
                    storage,
                    groups: [cx, cy, b.hvb * self.nvt_out],
                    label: "prefill output",
                });
            }
        }
        v
    }
}

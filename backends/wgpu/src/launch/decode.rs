//! Decode (T >= 1 tokens per sequence): the token recurrence of `decode.wgsl`, one workgroup per
//! (sequence, value head, 32-column value tile), pool updated in place.

use super::{base_params, dt_code, grid, InputSet, Params, Shared};
use crate::device::{Dispatch, Gpu};
use crate::pipelines::PipelineCache;
use crate::shaders::Shader;
use deltarule_core::{Op, Problem, Result};
use std::sync::Arc;

/// Value columns of a decode workgroup.
pub const TILE_V: usize = 32;

pub struct Decode {
    pipeline: Arc<wgpu::ComputePipeline>,
    uniform: wgpu::Buffer,
    groups: [u32; 3],
}

impl Decode {
    pub fn new(gpu: &Gpu, cache: &PipelineCache, p: &Problem, sh: &Shared) -> Result<Decode> {
        let pipeline = cache.get(
            gpu,
            Shader::Decode,
            &[
                ("HEAD_K", p.k as f64),
                ("HEAD_V", p.v as f64),
                ("QKV_DT", dt_code(p.qkv_dtype) as f64),
                ("G_DT", dt_code(p.g_dtype) as f64),
                ("BETA_DT", dt_code(p.beta_dtype) as f64),
                ("IS_KDA", if p.op == Op::Kda { 1.0 } else { 0.0 }),
            ],
        )?;
        let (nx, ny, grid_n) = grid(p.seqs as u32);
        let nvt = p.v.div_ceil(TILE_V) as u32;
        let prm = Params {
            grid_n,
            nvt,
            off_o: 0,
            off_ckpt: sh.out.off_ckpt as u32,
            off_final: sh.out.off_final as u32,
            ..base_params(p, &sh.tables)
        };
        Ok(Decode {
            pipeline,
            uniform: gpu.uniform(&prm.words()),
            groups: [nx, ny, p.hv as u32 * nvt],
        })
    }

    pub fn dispatches<'a>(&'a self, sh: &'a Shared, set: &'a InputSet) -> Vec<Dispatch<'a>> {
        vec![Dispatch {
            pipeline: &self.pipeline,
            uniform: &self.uniform,
            storage: vec![
                &sh.aux, &set.q, &set.k, &set.v, &set.g, &set.beta, &set.st, &sh.outs,
            ],
            groups: self.groups,
            label: "decode",
        }]
    }
}

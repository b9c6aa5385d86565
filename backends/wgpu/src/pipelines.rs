//! The pipeline cache: one compute pipeline per (shader, override constants),
//! created lazily with a read-then-write double check.

use crate::device::Gpu;
use crate::shaders::Shader;
use deltarule_core::Result;
use std::collections::HashMap;
use std::sync::{Arc, RwLock};

/// Key: the shader and its override constants (name, value bits), sorted by name.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PipelineKey {
    pub shader: Shader,
    pub constants: Vec<(&'static str, u64)>,
}

impl PipelineKey {
    pub fn new(shader: Shader, constants: &[(&'static str, f64)]) -> Self {
        let mut c: Vec<(&'static str, u64)> =
            constants.iter().map(|(k, v)| (*k, v.to_bits())).collect();
        c.sort();
        PipelineKey {
            shader,
            constants: c,
        }
    }
}

#[derive(Default)]
pub struct PipelineCache {
    map: RwLock<HashMap<PipelineKey, Arc<wgpu::ComputePipeline>>>,
}

impl PipelineCache {
    pub fn get(
        &self,
        gpu: &Gpu,
        shader: Shader,
        constants: &[(&'static str, f64)],
    ) -> Result<Arc<wgpu::ComputePipeline>> {
        let key = PipelineKey::new(shader, constants);
        if let Ok(m) = self.map.read() {
            if let Some(p) = m.get(&key) {
                return Ok(p.clone());
            }
        }
        let p = Arc::new(gpu.pipeline(shader, constants)?);
        if let Ok(mut m) = self.map.write() {
            return Ok(m.entry(key).or_insert(p).clone());
        }
        Ok(p)
    }

    pub fn len(&self) -> usize {
        self.map.read().map(|m| m.len()).unwrap_or(0)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

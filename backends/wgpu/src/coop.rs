//! SPIR-V for the cooperative-matrix stages (`Shader::coop`), built here and handed to the driver
//! through wgpu's SPIR-V passthrough instead of wgpu's own WGSL path.
//!
//! Why: naga 30 declares the Vulkan memory model in every module that uses cooperative matrices
//! but keeps emitting GLSL450-model code: workgroup loads and stores without `NonPrivatePointer`
//! and barriers without availability/visibility semantics (gfx-rs/wgpu#8805, fix pending in
//! gfx-rs/wgpu#10016). Under the Vulkan memory model those accesses are private, so a
//! `workgroupBarrier` does not order them and the driver may move them across it. On the H200
//! the state pass built that way gives wrong sums once both products run on cooperative matrices
//! while a scalar-product form (same staging, same barriers) is exact.
//! `SPV_KHR_cooperative_matrix` does not need the Vulkan memory model, so the module
//! is rewritten to the GLSL450 model, under which workgroup memory is coherent and naga's
//! barriers (`AcquireRelease | WorkgroupMemory`) synchronise it as in every other stage.
//!
//! Override constants are resolved by naga before the SPIR-V is written (a passthrough module
//! has no override reflection), and the bind group layout is built from the module's bindings.

use crate::error;
use crate::shaders::Shader;
use deltarule_core::Result;

/// A compiled cooperative-matrix stage: SPIR-V words, its bindings (group 0) and workgroup size.
pub struct CoopModule {
    pub words: Vec<u32>,
    pub bindings: Vec<wgpu::BindGroupLayoutEntry>,
    pub workgroup_size: [u32; 3],
}

const OP_EXTENSION: u32 = 10;
const OP_MEMORY_MODEL: u32 = 14;
const OP_CAPABILITY: u32 = 17;
const CAP_VULKAN_MEMORY_MODEL: u32 = 5345;
const MEMORY_MODEL_GLSL450: u32 = 1;
const MEMORY_MODEL_VULKAN: u32 = 3;

/// The literal string of an `OpExtension` (operand words from index 1 of the instruction).
fn literal(words: &[u32]) -> String {
    let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    String::from_utf8_lossy(&bytes[..end]).into_owned()
}

/// Rewrites a module from the Vulkan memory model to GLSL450: drops `OpCapability
/// VulkanMemoryModel` and `OpExtension "SPV_KHR_vulkan_memory_model"` and sets the memory model
/// operand. Errors (never guesses) when the words are not a module declaring the Vulkan memory
/// model, or use something that needs it (memory-operand or semantics bits of that model are
/// not emitted by naga 30; a module that had them would keep its meaning only under it).
pub fn to_glsl450_memory_model(words: &[u32]) -> std::result::Result<Vec<u32>, String> {
    if words.len() < 5 || words[0] != 0x0723_0203 {
        return Err("not a SPIR-V module".into());
    }
    let mut out = words[..5].to_vec();
    let mut i = 5;
    let mut model_seen = false;
    while i < words.len() {
        let wc = (words[i] >> 16) as usize;
        let op = words[i] & 0xffff;
        if wc == 0 || i + wc > words.len() {
            return Err(format!("malformed instruction at word {i}"));
        }
        let inst = &words[i..i + wc];
        let keep = match op {
            OP_CAPABILITY if wc == 2 && inst[1] == CAP_VULKAN_MEMORY_MODEL => false,
            OP_EXTENSION if literal(&inst[1..]) == "SPV_KHR_vulkan_memory_model" => false,
            _ => true,
        };
        if keep {
            let start = out.len();
            out.extend_from_slice(inst);
            if op == OP_MEMORY_MODEL {
                if wc != 3 || inst[2] != MEMORY_MODEL_VULKAN {
                    return Err(format!("unexpected OpMemoryModel {:?}", &inst[1..]));
                }
                out[start + 2] = MEMORY_MODEL_GLSL450;
                model_seen = true;
            }
        }
        i += wc;
    }
    if !model_seen {
        return Err("no OpMemoryModel Vulkan in the module".into());
    }
    Ok(out)
}

/// Builds `shader` with `constants` resolved, for the given bounds policy (`checked`: naga's
/// `Restrict` index clamping, the test variant; otherwise unchecked, as the production modules of
/// the other stages). Cooperative-matrix stages get the memory-model rewrite; the others (built
/// this way only for diagnosis, `DELTARULE_WGPU_PASSTHROUGH=1`) are naga's words unchanged.
pub fn build(shader: Shader, constants: &[(&str, f64)], checked: bool) -> Result<CoopModule> {
    let fail = |what: String| error::compile(shader.name(), what, Vec::new());
    let source = shader.source();
    let module = naga::front::wgsl::parse_str(&source)
        .map_err(|e| fail(e.emit_to_string_with_path(&source, shader.name())))?;
    let mut caps = naga::valid::Capabilities::SHADER_FLOAT16 | naga::valid::Capabilities::SUBGROUP;
    if shader.coop() {
        caps |= naga::valid::Capabilities::COOPERATIVE_MATRIX;
    }
    let info = naga::valid::Validator::new(naga::valid::ValidationFlags::all(), caps)
        .subgroup_stages(naga::valid::ShaderStages::COMPUTE)
        .subgroup_operations(naga::valid::SubgroupOperationSet::all())
        .validate(&module)
        .map_err(|e| fail(e.emit_to_string_with_path(&source, shader.name())))?;
    // every binding the stage declares, taken before override processing compacts the module
    // (which drops the globals the entry point does not use): the layout stays a superset of
    // the SPIR-V's bindings and matches the host's bind group (e.g. the coop state pass binds
    // the f32 h workspace it does not use)
    let bindings = declared_bindings(&module).map_err(fail)?;
    let mut pc = naga::back::PipelineConstants::default();
    for (k, v) in constants {
        pc.insert((*k).to_string(), *v);
    }
    let (module, info) = naga::back::pipeline_constants::process_overrides(
        &module,
        &info,
        Some((naga::ShaderStage::Compute, "main")),
        &pc,
    )
    .map_err(|e| fail(format!("override constants {constants:?}: {e}")))?;
    let ep = module
        .entry_points
        .iter()
        .find(|e| e.name == "main")
        .ok_or_else(|| fail("no entry point `main`".into()))?;
    let workgroup_size = ep.workgroup_size;

    let policy = if checked {
        naga::proc::BoundsCheckPolicy::Restrict
    } else {
        naga::proc::BoundsCheckPolicy::Unchecked
    };
    let opts = naga::back::spv::Options {
        // SPIR-V 1.6: what wgpu emits for Vulkan 1.3+ drivers (cooperative matrices need 1.3+)
        lang_version: (1, 6),
        bounds_check_policies: naga::proc::BoundsCheckPolicies {
            index: policy,
            buffer: policy,
            image_load: policy,
            binding_array: naga::proc::BoundsCheckPolicy::Unchecked,
        },
        // every workgroup array is written before it is read (see the shader)
        zero_initialize_workgroup_memory: naga::back::spv::ZeroInitializeWorkgroupMemoryMode::None,
        force_loop_bounding: false,
        ..Default::default()
    };
    let pipeline = naga::back::spv::PipelineOptions {
        shader_stage: naga::ShaderStage::Compute,
        entry_point: "main".into(),
    };
    let words = naga::back::spv::write_vec(&module, &info, &opts, Some(&pipeline))
        .map_err(|e| fail(format!("SPIR-V: {e}")))?;
    let words = if shader.coop() {
        to_glsl450_memory_model(&words).map_err(|e| fail(format!("SPIR-V patch: {e}")))?
    } else {
        words
    };

    Ok(CoopModule {
        words,
        bindings,
        workgroup_size,
    })
}

/// The group-0 bindings `module` declares (buffers), sorted: the bind group layout of a stage
/// whose host binds every buffer it declares, used or not (this file's SPIR-V stages and the
/// emulated coop stages of src/emulate.rs).
pub fn declared_bindings(
    module: &naga::Module,
) -> std::result::Result<Vec<wgpu::BindGroupLayoutEntry>, String> {
    let mut bindings = Vec::new();
    for (_, g) in module.global_variables.iter() {
        let Some(rb) = &g.binding else { continue };
        if rb.group != 0 {
            return Err(format!(
                "binding group {} (only group 0 is laid out)",
                rb.group
            ));
        }
        let ty = match g.space {
            naga::AddressSpace::Uniform => wgpu::BufferBindingType::Uniform,
            naga::AddressSpace::Storage { access } => wgpu::BufferBindingType::Storage {
                read_only: !access.contains(naga::StorageAccess::STORE),
            },
            other => return Err(format!("binding {} in {other:?}", rb.binding)),
        };
        bindings.push(wgpu::BindGroupLayoutEntry {
            binding: rb.binding,
            visibility: wgpu::ShaderStages::COMPUTE,
            ty: wgpu::BindingType::Buffer {
                ty,
                has_dynamic_offset: false,
                min_binding_size: None,
            },
            count: None,
        });
    }
    bindings.sort_by_key(|b| b.binding);
    Ok(bindings)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_coop_stages_build_and_lose_the_vulkan_memory_model() {
        for s in Shader::ALL.into_iter().filter(|s| s.coop()) {
            for checked in [false, true] {
                let m = build(s, &[("HEAD_K", 128.0), ("HEAD_V", 128.0)], checked)
                    .unwrap_or_else(|e| panic!("{}: {e}", s.file_name()));
                assert_eq!(m.words[0], 0x0723_0203);
                assert_eq!(m.workgroup_size, [256, 1, 1]);
                assert!(m.bindings.len() >= 2);
                // every declared binding is laid out (0..=n, the host binds them in order),
                // also those the entry point does not use
                let b: Vec<u32> = m.bindings.iter().map(|b| b.binding).collect();
                let n = b.len() as u32;
                assert_eq!(b, (0..n).collect::<Vec<u32>>(), "{}", s.name());
                // no VulkanMemoryModel capability, memory model GLSL450
                let mut i = 5;
                let mut model = None;
                while i < m.words.len() {
                    let (wc, op) = ((m.words[i] >> 16) as usize, m.words[i] & 0xffff);
                    assert!(!(op == OP_CAPABILITY && m.words[i + 1] == CAP_VULKAN_MEMORY_MODEL));
                    if op == OP_MEMORY_MODEL {
                        model = Some(m.words[i + 2]);
                    }
                    i += wc;
                }
                assert_eq!(model, Some(MEMORY_MODEL_GLSL450));
            }
        }
    }

    #[test]
    fn the_patch_refuses_what_it_does_not_understand() {
        assert!(to_glsl450_memory_model(&[1, 2, 3]).is_err());
        // a header and an OpMemoryModel Logical GLSL450: nothing to rewrite is an error
        let glsl = [
            0x0723_0203,
            0x0001_0600,
            0,
            10,
            0,
            (3 << 16) | OP_MEMORY_MODEL,
            0,
            1,
        ];
        assert!(to_glsl450_memory_model(&glsl).is_err());
        let vk = [
            0x0723_0203,
            0x0001_0600,
            0,
            10,
            0,
            (3 << 16) | OP_MEMORY_MODEL,
            0,
            3,
        ];
        assert_eq!(
            to_glsl450_memory_model(&vk).map(|w| w[7]),
            Ok(MEMORY_MODEL_GLSL450)
        );
    }
}

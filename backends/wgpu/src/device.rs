//! Adapter, device, buffers, pipelines and submissions: the only module that touches wgpu's
//! adapter and device APIs (they change between releases; keeping them here keeps an upgrade in
//! one file).

use crate::error;
use crate::shaders::Shader;
use crate::AdapterChoice;
use deltarule_core::{BackendKind, Capabilities, Result};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;
use wgpu::util::DeviceExt;

/// The features the backend asks for when the adapter has them (recorded in the capabilities).
/// Cooperative matrices are asked for too unless [`AdapterChoice::coop_off`].
pub fn wanted_features() -> wgpu::Features {
    wgpu::Features::SUBGROUP | wgpu::Features::SHADER_F16 | wgpu::Features::TIMESTAMP_QUERY
}

/// Whether `props` include the configuration the `coop` shaders use: 16 x 16 x 16 tiles, f16 A
/// and B, f32 C and result (NVIDIA's Vulkan driver reports it; lavapipe reports none).
pub fn has_coop_16x16_f16(props: &[wgpu::wgt::CooperativeMatrixProperties]) -> bool {
    props.iter().any(|p| {
        p.m_size == 16
            && p.n_size == 16
            && p.k_size == 16
            && p.ab_type == wgpu::wgt::CooperativeScalarType::F16
            && p.cr_type == wgpu::wgt::CooperativeScalarType::F32
    })
}

/// An open device with its queue, what it offers, and the compiled modules.
pub struct Gpu {
    pub device: wgpu::Device,
    pub queue: wgpu::Queue,
    pub info: wgpu::AdapterInfo,
    pub limits: wgpu::Limits,
    pub features: wgpu::Features,
    /// Shader modules with wgpu's injected bounds checks (test and debug mode).
    pub checked: bool,
    binding_cap: Option<u64>,
    /// Requested state-pass tile width (see `AdapterChoice::state_bv`).
    pub state_bv: Option<usize>,
    /// `bench` waits for each timed call before the next (`AdapterChoice::sync_timing`).
    pub sync_timing: bool,
    /// The adapter's cooperative-matrix configurations (empty when it has none or when
    /// `AdapterChoice::coop_off`).
    pub coop_props: Vec<wgpu::wgt::CooperativeMatrixProperties>,
    /// Cooperative matrices usable by the `coop` shaders: the feature was granted, the
    /// 16 x 16 x 16 f16 -> f32 configuration is offered, f16 and subgroups are on and subgroups
    /// have 32 invocations (8 per 256-invocation workgroup); or emulated (`coop_emulated`).
    pub coop: bool,
    /// The `coop` stages run as plain WGSL (src/emulate.rs; tests, `AdapterChoice::coop_emulate`)
    /// because the adapter has no cooperative matrices.
    pub coop_emulated: bool,
    /// Every stage built by the backend (src/coop.rs) and passed through as SPIR-V
    /// (`AdapterChoice::passthrough`, where the adapter allows passthrough).
    pub passthrough_all: bool,
    modules: Mutex<HashMap<Shader, Arc<wgpu::ShaderModule>>>,
    uncaptured: Arc<Mutex<Vec<String>>>,
}

/// One dispatch: a pipeline, its buffers in binding order (binding 0 is the uniform block) and
/// the workgroup counts.
pub struct Dispatch<'a> {
    pub pipeline: &'a wgpu::ComputePipeline,
    pub uniform: &'a wgpu::Buffer,
    pub storage: Vec<&'a wgpu::Buffer>,
    pub groups: [u32; 3],
    pub label: &'static str,
}

fn rank(t: wgpu::DeviceType) -> u8 {
    match t {
        wgpu::DeviceType::DiscreteGpu => 0,
        wgpu::DeviceType::IntegratedGpu => 1,
        wgpu::DeviceType::VirtualGpu => 2,
        wgpu::DeviceType::Other => 3,
        wgpu::DeviceType::Cpu => 4,
    }
}

impl Gpu {
    /// Opens the adapter chosen by `choice` (a name substring), honouring `WGPU_BACKEND`;
    /// otherwise the most capable one (discrete, integrated, virtual, other, CPU). Returns
    /// `Unavailable` with what was searched when there is none. Validation layers stay off
    /// (Debian's report false errors for naga's SPIR-V) unless `WGPU_VALIDATION` asks for them.
    pub fn open(choice: &AdapterChoice) -> Result<Gpu> {
        let mut desc = wgpu::InstanceDescriptor::new_without_display_handle();
        desc.backends = wgpu::Backends::all().with_env();
        desc.flags = wgpu::InstanceFlags::empty().with_env();
        let instance = wgpu::Instance::new(desc);
        let backends = wgpu::Backends::all().with_env();
        let adapters = pollster::block_on(instance.enumerate_adapters(backends));
        let seen: Vec<String> = adapters
            .iter()
            .map(|a| {
                let i = a.get_info();
                format!("{} ({:?}, {:?})", i.name, i.backend, i.device_type)
            })
            .collect();
        let mut candidates: Vec<wgpu::Adapter> = match &choice.name {
            Some(name) => {
                let needle = name.to_lowercase();
                adapters
                    .into_iter()
                    .filter(|a| a.get_info().name.to_lowercase().contains(&needle))
                    .collect()
            }
            None => adapters,
        };
        candidates.sort_by_key(|a| rank(a.get_info().device_type));
        let Some(adapter) = candidates.into_iter().next() else {
            let wanted = match &choice.name {
                Some(n) => format!(" named like `{n}` (DELTARULE_WGPU_ADAPTER)"),
                None => String::new(),
            };
            return Err(error::unavailable(format!(
                "no wgpu adapter{wanted} (backends searched: {backends:?}{}; adapters seen: [{}]); \
                 on Linux install a Vulkan driver, e.g. lavapipe (mesa-vulkan-drivers, libvulkan1)",
                std::env::var("WGPU_BACKEND")
                    .map(|b| format!(" from WGPU_BACKEND={b}"))
                    .unwrap_or_default(),
                seen.join(", ")
            )));
        };
        let info = adapter.get_info();
        let mut features = adapter.features() & wanted_features();
        // the coop stages go through SPIR-V passthrough (src/coop.rs says why)
        let coop_offered = adapter.features().contains(
            wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX | wgpu::Features::PASSTHROUGH_SHADERS,
        ) && !choice.coop_off;
        let coop_props = if coop_offered {
            adapter.cooperative_matrix_properties()
        } else {
            Vec::new()
        };
        if coop_offered {
            features |= wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX;
        }
        // SPIR-V passthrough (the coop stages; every stage with `choice.passthrough`)
        features |= adapter.features() & wgpu::Features::PASSTHROUGH_SHADERS;
        let passthrough_all =
            features.contains(wgpu::Features::PASSTHROUGH_SHADERS) && choice.passthrough;
        let coop_real = coop_offered
            && has_coop_16x16_f16(&coop_props)
            && features.contains(wgpu::Features::SHADER_F16 | wgpu::Features::SUBGROUP)
            && info.subgroup_min_size == 32
            && info.subgroup_max_size == 32;
        let coop_emulated =
            !coop_real && choice.coop_emulate && features.contains(wgpu::Features::SHADER_F16);
        let coop = coop_real || coop_emulated;
        let limits = adapter.limits();
        let dd = wgpu::DeviceDescriptor {
            label: Some("deltarule"),
            required_features: features,
            required_limits: limits.clone(),
            experimental_features: if coop_offered {
                // SAFETY: the experimental feature requested is cooperative matrices only; the
                // `coop` shaders use them in workgroup-uniform control flow with operands in
                // workgroup memory at in-range offsets (see shaders/prefill_state_coop.wgsl),
                // through SPIR-V built and checked in src/coop.rs.
                unsafe { wgpu::ExperimentalFeatures::enabled() }
            } else {
                wgpu::ExperimentalFeatures::disabled()
            },
            memory_hints: wgpu::MemoryHints::Performance,
            trace: wgpu::Trace::Off,
        };
        let (device, queue) = pollster::block_on(adapter.request_device(&dd)).map_err(|e| {
            error::unavailable(format!("{}: request_device failed: {e}", info.name))
        })?;
        let uncaptured = Arc::new(Mutex::new(Vec::new()));
        let sink = uncaptured.clone();
        device.on_uncaptured_error(Arc::new(move |e: wgpu::Error| {
            if let Ok(mut v) = sink.lock() {
                v.push(e.to_string());
            }
        }));
        Ok(Gpu {
            device,
            queue,
            info,
            limits,
            features,
            checked: choice.checked,
            binding_cap: choice.max_binding,
            state_bv: choice.state_bv,
            sync_timing: choice.sync_timing,
            coop_props,
            coop,
            coop_emulated,
            passthrough_all,
            modules: Mutex::new(HashMap::new()),
            uncaptured,
        })
    }

    /// The capabilities recorded for selection: the adapter's name and API, its limits and the
    /// features requested.
    pub fn caps(&self) -> Capabilities {
        let l = &self.limits;
        let mut notes = vec![
            format!("driver {} {}", self.info.driver, self.info.driver_info)
                .trim()
                .to_string(),
            format!("{:?}", self.info.device_type),
            format!(
                "max storage binding {} MiB",
                l.max_storage_buffer_binding_size >> 20
            ),
        ];
        if self.checked {
            notes.push("checked shader modules".into());
        }
        if self.coop_emulated {
            notes.push("cooperative matrices emulated in plain WGSL (tests)".into());
        }
        if !self.coop_props.is_empty() {
            let list: Vec<String> = self
                .coop_props
                .iter()
                .map(|p| {
                    format!(
                        "{}x{}x{} {:?}->{:?}",
                        p.m_size, p.n_size, p.k_size, p.ab_type, p.cr_type
                    )
                })
                .collect();
            notes.push(format!("cooperative matrices: {}", list.join(", ")));
        }
        Capabilities {
            backend: BackendKind::Wgpu,
            device: format!("{} ({:?})", self.info.name, self.info.backend),
            compute_capability: None,
            multiprocessors: None,
            max_workgroup_storage: l.max_compute_workgroup_storage_size,
            max_storage_buffers_per_stage: l.max_storage_buffers_per_shader_stage,
            max_invocations_per_workgroup: l.max_compute_invocations_per_workgroup,
            subgroups: self.features.contains(wgpu::Features::SUBGROUP),
            subgroup_size: (self.info.subgroup_min_size, self.info.subgroup_max_size),
            shader_f16: self.features.contains(wgpu::Features::SHADER_F16),
            timestamps: self.features.contains(wgpu::Features::TIMESTAMP_QUERY),
            cooperative_matrix: self.coop,
            notes,
        }
    }

    /// Largest size of one storage binding, bytes.
    pub fn max_binding(&self) -> u64 {
        let dev = self
            .limits
            .max_storage_buffer_binding_size
            .min(self.limits.max_buffer_size);
        self.binding_cap.map_or(dev, |c| c.min(dev))
    }

    fn module(&self, shader: Shader) -> Result<Arc<wgpu::ShaderModule>> {
        let mut m = self
            .modules
            .lock()
            .map_err(|_| error::device("shader module cache lock poisoned"))?;
        if let Some(x) = m.get(&shader) {
            return Ok(x.clone());
        }
        let source = if shader.coop() && self.coop_emulated {
            crate::emulate::emulated_source(shader).map_err(|e| {
                error::compile(shader.name(), format!("coop emulation: {e}"), Vec::new())
            })?
        } else {
            shader.source()
        };
        let scope = self.device.push_error_scope(wgpu::ErrorFilter::Validation);
        let desc = wgpu::ShaderModuleDescriptor {
            label: Some(shader.name()),
            source: wgpu::ShaderSource::Wgsl(source.into()),
        };
        let module = if self.checked {
            self.device.create_shader_module(desc)
        } else {
            // SAFETY: the stage shaders index storage and workgroup arrays only within bounds
            // for validated problems: each file's header states why (host-built tables, guards
            // on every channel index, workgroup indices below the declared sizes). The checked
            // variant (`DELTARULE_WGPU_CHECKED=1`) runs the same suite with wgpu's checks on.
            unsafe {
                self.device
                    .create_shader_module_trusted(desc, wgpu::ShaderRuntimeChecks::unchecked())
            }
        };
        if let Some(e) = pollster::block_on(scope.pop()) {
            return Err(error::compile(
                shader.name(),
                format!(
                    "{e}\n(line numbers count the {} prelude lines in front of the stage)",
                    shader.prelude_lines()
                ),
                Vec::new(),
            ));
        }
        let module = Arc::new(module);
        m.insert(shader, module.clone());
        Ok(module)
    }

    /// Creates the compute pipeline of `shader` specialised with `constants`.
    pub fn pipeline(
        &self,
        shader: Shader,
        constants: &[(&str, f64)],
    ) -> Result<wgpu::ComputePipeline> {
        if (shader.coop() && !self.coop_emulated) || self.passthrough_all {
            return self.coop_pipeline(shader, constants);
        }
        let module = self.module(shader)?;
        // an emulated coop stage keeps the layout of every binding it declares, as the SPIR-V
        // path does (the host binds them all; wgpu's derived layout would drop the unused ones)
        let layout = if shader.coop() && self.coop_emulated {
            let fail = |e: String| error::compile(shader.name(), e, Vec::new());
            let src = crate::emulate::emulated_source(shader).map_err(fail)?;
            let m = naga::front::wgsl::parse_str(&src).map_err(|e| fail(e.emit_to_string(&src)))?;
            let entries = crate::coop::declared_bindings(&m).map_err(fail)?;
            let bgl = self
                .device
                .create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
                    label: Some(shader.name()),
                    entries: &entries,
                });
            Some(
                self.device
                    .create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
                        label: Some(shader.name()),
                        bind_group_layouts: &[Some(&bgl)],
                        immediate_size: 0,
                    }),
            )
        } else {
            None
        };
        let scope = self.device.push_error_scope(wgpu::ErrorFilter::Validation);
        let p = self
            .device
            .create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                label: Some(shader.name()),
                layout: layout.as_ref(),
                module: &module,
                entry_point: Some("main"),
                compilation_options: wgpu::PipelineCompilationOptions {
                    constants,
                    // every workgroup array is written before it is read (see the shaders)
                    zero_initialize_workgroup_memory: false,
                },
                cache: None,
            });
        Self::pipeline_result(scope, p, shader, constants)
    }

    /// The pipeline, or the validation error its creation raised (as a compile error naming the
    /// shader and its constants).
    fn pipeline_result(
        scope: wgpu::ErrorScopeGuard,
        p: wgpu::ComputePipeline,
        shader: Shader,
        constants: &[(&str, f64)],
    ) -> Result<wgpu::ComputePipeline> {
        if let Some(e) = pollster::block_on(scope.pop()) {
            return Err(error::compile(
                shader.name(),
                e.to_string(),
                constants.iter().map(|(k, v)| format!("{k}={v}")).collect(),
            ));
        }
        Ok(p)
    }

    /// The pipeline of a cooperative-matrix stage: SPIR-V from [`crate::coop::build`] through
    /// wgpu's passthrough, with the bind group layout built from the module's bindings.
    fn coop_pipeline(
        &self,
        shader: Shader,
        constants: &[(&str, f64)],
    ) -> Result<wgpu::ComputePipeline> {
        if shader.coop() && !self.coop {
            return Err(error::device(format!(
                "{} needs cooperative matrices, which this device does not offer",
                shader.name()
            )));
        }
        let m = crate::coop::build(shader, constants, self.checked)?;
        let scope = self.device.push_error_scope(wgpu::ErrorFilter::Validation);
        let [x, y, z] = m.workgroup_size;
        // SAFETY: the words are naga's SPIR-V of a module it validated, with the override
        // constants resolved and only the memory model declaration rewritten (coop.rs); the
        // entry point and workgroup size are the module's own.
        let module = unsafe {
            self.device
                .create_shader_module_passthrough(wgpu::ShaderModuleDescriptorPassthrough {
                    label: Some(shader.name()),
                    entry_points: std::borrow::Cow::Owned(vec![
                        wgpu::PassthroughShaderEntryPoint {
                            name: "main".into(),
                            workgroup_size: (x, y, z),
                        },
                    ]),
                    spirv: Some(std::borrow::Cow::Owned(m.words)),
                    ..Default::default()
                })
        };
        let bgl = self
            .device
            .create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
                label: Some(shader.name()),
                entries: &m.bindings,
            });
        let layout = self
            .device
            .create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
                label: Some(shader.name()),
                bind_group_layouts: &[Some(&bgl)],
                immediate_size: 0,
            });
        let p = self
            .device
            .create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                label: Some(shader.name()),
                layout: Some(&layout),
                module: &module,
                entry_point: Some("main"),
                compilation_options: Default::default(),
                cache: None,
            });
        Self::pipeline_result(scope, p, shader, constants)
    }

    /// A storage buffer holding `bytes` (padded to 4 bytes).
    pub fn storage(&self, label: &str, bytes: &[u8]) -> wgpu::Buffer {
        self.device
            .create_buffer_init(&wgpu::util::BufferInitDescriptor {
                label: Some(label),
                contents: bytes,
                usage: wgpu::BufferUsages::STORAGE
                    | wgpu::BufferUsages::COPY_SRC
                    | wgpu::BufferUsages::COPY_DST,
            })
    }

    /// An uninitialised storage buffer of at least `bytes` bytes, rounded up to 16 (vec4 views).
    pub fn scratch(&self, label: &str, bytes: u64) -> wgpu::Buffer {
        self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some(label),
            size: bytes.max(16).div_ceil(16) * 16,
            usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC,
            mapped_at_creation: false,
        })
    }

    /// A uniform buffer holding `words`.
    pub fn uniform(&self, words: &[u32]) -> wgpu::Buffer {
        let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        self.device
            .create_buffer_init(&wgpu::util::BufferInitDescriptor {
                label: Some("params"),
                contents: &bytes,
                usage: wgpu::BufferUsages::UNIFORM,
            })
    }

    fn encode(
        &self,
        dispatches: &[Dispatch<'_>],
        timestamps: Option<(&wgpu::QuerySet, u32)>,
    ) -> wgpu::CommandBuffer {
        let mut enc = self
            .device
            .create_command_encoder(&wgpu::CommandEncoderDescriptor {
                label: Some("deltarule"),
            });
        {
            let tw = timestamps.map(|(q, i)| wgpu::ComputePassTimestampWrites {
                query_set: q,
                beginning_of_pass_write_index: Some(i),
                end_of_pass_write_index: Some(i + 1),
            });
            let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor {
                label: Some("deltarule"),
                timestamp_writes: tw,
            });
            for d in dispatches {
                self.record(&mut pass, d);
            }
        }
        enc.finish()
    }

    /// Records one dispatch (bind group, pipeline, workgroups) into a compute pass.
    fn record(&self, pass: &mut wgpu::ComputePass<'_>, d: &Dispatch<'_>) {
        let layout = d.pipeline.get_bind_group_layout(0);
        let mut entries = vec![wgpu::BindGroupEntry {
            binding: 0,
            resource: d.uniform.as_entire_binding(),
        }];
        for (i, b) in d.storage.iter().enumerate() {
            entries.push(wgpu::BindGroupEntry {
                binding: i as u32 + 1,
                resource: b.as_entire_binding(),
            });
        }
        let bg = self.device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some(d.label),
            layout: &layout,
            entries: &entries,
        });
        pass.set_pipeline(d.pipeline);
        pass.set_bind_group(0, &bg, &[]);
        pass.dispatch_workgroups(d.groups[0], d.groups[1], d.groups[2]);
    }

    /// Times each dispatch of `call` in a compute pass of its own (a timestamp pair each),
    /// `iters` times, and returns the median ms per label (dispatches sharing a label, such as
    /// head batches, are summed), in call order. Empty without timestamp queries.
    pub fn profile(&self, call: &[Dispatch<'_>], iters: usize) -> Result<Vec<(String, f64)>> {
        if !self.features.contains(wgpu::Features::TIMESTAMP_QUERY) || call.is_empty() {
            return Ok(Vec::new());
        }
        let n = call.len() as u32;
        let mut labels: Vec<&'static str> = Vec::new();
        for d in call {
            if !labels.contains(&d.label) {
                labels.push(d.label);
            }
        }
        let mut samples: Vec<Vec<f64>> = vec![Vec::new(); labels.len()];
        let period = self.queue.get_timestamp_period() as f64;
        for _ in 0..iters.max(1) {
            let qs = self.device.create_query_set(&wgpu::QuerySetDescriptor {
                label: Some("profile"),
                ty: wgpu::QueryType::Timestamp,
                count: 2 * n,
            });
            let mut enc = self
                .device
                .create_command_encoder(&wgpu::CommandEncoderDescriptor {
                    label: Some("profile"),
                });
            for (i, d) in call.iter().enumerate() {
                let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor {
                    label: Some(d.label),
                    timestamp_writes: Some(wgpu::ComputePassTimestampWrites {
                        query_set: &qs,
                        beginning_of_pass_write_index: Some(2 * i as u32),
                        end_of_pass_write_index: Some(2 * i as u32 + 1),
                    }),
                });
                self.record(&mut pass, d);
            }
            let bytes = 16 * n as u64;
            let resolve = self.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("profile"),
                size: bytes,
                usage: wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC,
                mapped_at_creation: false,
            });
            enc.resolve_query_set(&qs, 0..2 * n, &resolve, 0);
            self.queue.submit([enc.finish()]);
            let raw = self.read(&resolve, 0, bytes)?;
            let at = |k: usize| {
                let mut b = [0u8; 8];
                b.copy_from_slice(&raw[8 * k..8 * k + 8]);
                u64::from_le_bytes(b)
            };
            let mut per = vec![0.0f64; labels.len()];
            for (i, d) in call.iter().enumerate() {
                let ticks = at(2 * i + 1).saturating_sub(at(2 * i));
                if let Some(l) = labels.iter().position(|&x| x == d.label) {
                    per[l] += ticks as f64 * period * 1e-6;
                }
            }
            for (l, v) in per.into_iter().enumerate() {
                samples[l].push(v);
            }
        }
        self.check_errors()?;
        Ok(labels
            .iter()
            .zip(samples)
            .map(|(l, v)| (l.to_string(), deltarule_core::median(&v)))
            .collect())
    }

    fn check_errors(&self) -> Result<()> {
        let mut v = self
            .uncaptured
            .lock()
            .map_err(|_| error::device("error sink lock poisoned"))?;
        if v.is_empty() {
            return Ok(());
        }
        let msg = v.join("\n");
        v.clear();
        Err(error::device(msg))
    }

    /// Encodes and submits the dispatches (one compute pass) and waits for them.
    pub fn run(&self, dispatches: &[Dispatch<'_>]) -> Result<()> {
        let scope = self.device.push_error_scope(wgpu::ErrorFilter::Validation);
        let cb = self.encode(dispatches, None);
        self.queue.submit([cb]);
        if let Some(e) = pollster::block_on(scope.pop()) {
            return Err(error::device(e));
        }
        self.wait()?;
        self.check_errors()
    }

    fn wait(&self) -> Result<()> {
        self.device
            .poll(wgpu::PollType::wait_indefinitely())
            .map_err(error::device)?;
        Ok(())
    }

    /// Reads `bytes` bytes at `offset` of `buf` back to the host.
    pub fn read(&self, buf: &wgpu::Buffer, offset: u64, bytes: u64) -> Result<Vec<u8>> {
        if bytes == 0 {
            return Ok(Vec::new());
        }
        let size = bytes.div_ceil(4) * 4;
        let staging = self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("readback"),
            size,
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let mut enc = self
            .device
            .create_command_encoder(&wgpu::CommandEncoderDescriptor {
                label: Some("readback"),
            });
        enc.copy_buffer_to_buffer(buf, offset, &staging, 0, size);
        self.queue.submit([enc.finish()]);
        let (tx, rx) = std::sync::mpsc::channel();
        staging.map_async(wgpu::MapMode::Read, .., move |r| {
            let _ = tx.send(r);
        });
        self.wait()?;
        rx.recv()
            .map_err(error::device)?
            .map_err(|e| error::device(format!("map_async: {e}")))?;
        let out = {
            let view = staging.get_mapped_range(..).map_err(error::device)?;
            view[..bytes as usize].to_vec()
        };
        staging.unmap();
        self.check_errors()?;
        Ok(out)
    }

    /// Times `iters` calls, each the dispatch list `calls[i % calls.len()]`, with timestamp
    /// queries around each call's compute pass. Returns (device ms, host us) per call.
    pub fn time(
        &self,
        calls: &[Vec<Dispatch<'_>>],
        warmup: usize,
        iters: usize,
    ) -> Result<(Vec<f64>, Vec<f64>)> {
        if calls.is_empty() || iters == 0 {
            return Ok((Vec::new(), Vec::new()));
        }
        for i in 0..warmup {
            let cb = self.encode(&calls[i % calls.len()], None);
            self.queue.submit([cb]);
        }
        self.wait()?;
        let has_ts = self.features.contains(wgpu::Features::TIMESTAMP_QUERY);
        // sync_timing: wait for each call before submitting the next (diagnosis: whether
        // back-to-back submissions explain slow outliers)
        let sync_each = self.sync_timing;
        let mut host_us = Vec::with_capacity(iters);
        let mut device_ms = Vec::with_capacity(iters);
        // one query set per batch of calls, resolved after the batch
        let batch = 64usize;
        let mut done = 0usize;
        while done < iters {
            let n = batch.min(iters - done);
            let qs = has_ts.then(|| {
                self.device.create_query_set(&wgpu::QuerySetDescriptor {
                    label: Some("timestamps"),
                    ty: wgpu::QueryType::Timestamp,
                    count: 2 * n as u32,
                })
            });
            let t_batch = Instant::now();
            for j in 0..n {
                let t0 = Instant::now();
                let cb = self.encode(
                    &calls[(done + j) % calls.len()],
                    qs.as_ref().map(|q| (q, 2 * j as u32)),
                );
                self.queue.submit([cb]);
                host_us.push(t0.elapsed().as_secs_f64() * 1e6);
                if sync_each {
                    self.wait()?;
                }
            }
            match &qs {
                Some(q) => {
                    let bytes = 16 * n as u64;
                    let resolve = self.device.create_buffer(&wgpu::BufferDescriptor {
                        label: Some("timestamps"),
                        size: bytes,
                        usage: wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC,
                        mapped_at_creation: false,
                    });
                    let mut enc =
                        self.device
                            .create_command_encoder(&wgpu::CommandEncoderDescriptor {
                                label: Some("resolve"),
                            });
                    enc.resolve_query_set(q, 0..2 * n as u32, &resolve, 0);
                    self.queue.submit([enc.finish()]);
                    let raw = self.read(&resolve, 0, bytes)?;
                    let period = self.queue.get_timestamp_period() as f64;
                    for j in 0..n {
                        let at = |k: usize| {
                            let mut b = [0u8; 8];
                            b.copy_from_slice(&raw[8 * k..8 * k + 8]);
                            u64::from_le_bytes(b)
                        };
                        let ticks = at(2 * j + 1).saturating_sub(at(2 * j));
                        device_ms.push(ticks as f64 * period * 1e-6);
                    }
                }
                None => {
                    self.wait()?;
                    let per = t_batch.elapsed().as_secs_f64() * 1e3 / n as f64;
                    device_ms.extend(std::iter::repeat_n(per, n));
                }
            }
            done += n;
        }
        self.check_errors()?;
        Ok((device_ms, host_us))
    }
}

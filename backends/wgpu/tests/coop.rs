//! Cooperative matrices through wgpu (`Features::EXPERIMENTAL_COOPERATIVE_MATRIX`): the load
//! layouts, zero-initialised and loaded accumulators and the f16 x f16 -> f32 product the `coop`
//! shaders rely on, checked on a 64 x 64 x 64 product against f64 on the f16-rounded operands.
//! The module validates with naga everywhere; it runs on the hardware where the adapter has the
//! 16 x 16 x 16 f16 -> f32 configuration (NVIDIA's Vulkan driver), and elsewhere (lavapipe)
//! through the plain-WGSL emulation of src/emulate.rs, which the same expectations check
//! (`DELTARULE_REQUIRE_COOP=1` makes the hardware run required).

use deltarule_wgpu::{AdapterChoice, WgpuBackend};
use half::f16;

/// `src` as this adapter runs it: as written where it has cooperative matrices, else through
/// the emulation (None, printed, when the adapter has no f16 either).
fn as_run(gpu: &deltarule_wgpu::device::Gpu, src: &str) -> Option<(String, &'static str)> {
    if gpu.coop && !gpu.coop_emulated {
        return Some((src.to_string(), "hardware"));
    }
    if !gpu.features.contains(wgpu::Features::SHADER_F16) {
        println!("skipped: neither cooperative matrices nor f16 on this adapter");
        return None;
    }
    let e = deltarule_wgpu::emulate::emulate_wgsl(src).expect("the probe rewrites");
    Some((e, "emulated"))
}

/// c[0] = A·B (zero accumulator), c[1] = A·B + B/2 (accumulator loaded row-major),
/// c[2] = A·B with A read column-major from its transpose, c[3] = A·B stored column-major.
/// Tile addresses come from the subgroup id; control flow around the matrix operations is
/// uniform.
const PROBE: &str = r#"
enable f16;
enable wgpu_cooperative_matrix;

@group(0) @binding(0) var<storage, read> a: array<f32>;
@group(0) @binding(1) var<storage, read> b: array<f32>;
@group(0) @binding(2) var<storage, read_write> c: array<f32>;

var<workgroup> sa: array<f16, 4096>;
var<workgroup> sat: array<f16, 4096>;
var<workgroup> sb: array<f16, 4096>;
var<workgroup> sc: array<f32, 4096>;

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) tid: u32, @builtin(subgroup_id) sg: u32) {
    for (var i = tid; i < 4096u; i += 256u) {
        sa[i] = f16(a[i]);
        sat[(i % 64u) * 64u + i / 64u] = f16(a[i]);
        sb[i] = f16(b[i]);
        sc[i] = 0.5 * b[i];
    }
    workgroupBarrier();
    for (var h = 0u; h < 2u; h++) {
        let t = sg + 8u * h;
        let tr = t / 4u;
        let tc = t % 4u;
        var acc0: coop_mat16x16<f32, C>;
        var acc1 = coopLoadT<coop_mat16x16<f32, C>>(&sc[tr * 1024u + tc * 16u], 64u);
        var acc2: coop_mat16x16<f32, C>;
        for (var k = 0u; k < 4u; k++) {
            let ma = coopLoadT<coop_mat16x16<f16, A>>(&sa[tr * 1024u + k * 16u], 64u);
            let mt = coopLoad<coop_mat16x16<f16, A>>(&sat[k * 1024u + tr * 16u], 64u);
            let mb = coopLoadT<coop_mat16x16<f16, B>>(&sb[k * 1024u + tc * 16u], 64u);
            acc0 = coopMultiplyAdd(ma, mb, acc0);
            acc1 = coopMultiplyAdd(ma, mb, acc1);
            acc2 = coopMultiplyAdd(mt, mb, acc2);
        }
        coopStoreT(acc0, &c[tr * 1024u + tc * 16u], 64u);
        coopStoreT(acc1, &c[4096u + tr * 1024u + tc * 16u], 64u);
        coopStoreT(acc2, &c[8192u + tr * 1024u + tc * 16u], 64u);
        coopStore(acc0, &c[12288u + tc * 1024u + tr * 16u], 64u);
    }
}
"#;

fn module() -> naga::Module {
    naga::front::wgsl::parse_str(PROBE).expect("the probe parses")
}

#[test]
fn coop_probe_validates_with_naga() {
    let caps = naga::valid::Capabilities::SHADER_FLOAT16
        | naga::valid::Capabilities::SUBGROUP
        | naga::valid::Capabilities::COOPERATIVE_MATRIX;
    let mut v = naga::valid::Validator::new(naga::valid::ValidationFlags::all(), caps);
    let m = module();
    let info = match v.validate(&m) {
        Ok(i) => i,
        Err(e) => panic!("{}", e.emit_to_string(PROBE)),
    };
    // the SPIR-V wgpu would hand to a Vulkan driver (wgpu's Vulkan backend enables naga's
    // SPIR-V writer)
    let words = naga::back::spv::write_vec(&m, &info, &naga::back::spv::Options::default(), None)
        .expect("SPIR-V");
    assert!(words.len() > 100);
}

/// Deterministic values in [-1, 1), rounded to f16 (what the shader multiplies).
fn operand(seed: u64, n: usize) -> Vec<f32> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let u = (x >> 11) as f64 / (1u64 << 53) as f64;
            f16::from_f64(2.0 * u - 1.0).to_f32()
        })
        .collect()
}

/// Runs `src` (bindings: a, b read-only, c read-write f32) as one 256-invocation workgroup with
/// the override `constants`, c poisoned with NaN first; returns c (`c_len` floats).
fn run_once(
    gpu: &deltarule_wgpu::device::Gpu,
    src: &str,
    constants: &[(&str, f64)],
    a: &[f32],
    b: &[f32],
    c_len: usize,
) -> Vec<f32> {
    let bytes = |v: &[f32]| -> Vec<u8> { v.iter().flat_map(|x| x.to_le_bytes()).collect() };
    let ba = gpu.storage("a", &bytes(a));
    let bb = gpu.storage("b", &bytes(b));
    let bc = gpu.storage("c", &bytes(&vec![f32::NAN; c_len]));
    let sm = gpu
        .device
        .create_shader_module(wgpu::ShaderModuleDescriptor {
            label: Some("coop probe"),
            source: wgpu::ShaderSource::Wgsl(src.into()),
        });
    let pipe = gpu
        .device
        .create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: Some("coop probe"),
            layout: None,
            module: &sm,
            entry_point: Some("main"),
            compilation_options: wgpu::PipelineCompilationOptions {
                constants,
                zero_initialize_workgroup_memory: false,
            },
            cache: None,
        });
    let entries: Vec<wgpu::BindGroupEntry> = [&ba, &bb, &bc]
        .iter()
        .enumerate()
        .map(|(i, buf)| wgpu::BindGroupEntry {
            binding: i as u32,
            resource: buf.as_entire_binding(),
        })
        .collect();
    let bg = gpu.device.create_bind_group(&wgpu::BindGroupDescriptor {
        label: None,
        layout: &pipe.get_bind_group_layout(0),
        entries: &entries,
    });
    let mut enc = gpu.device.create_command_encoder(&Default::default());
    {
        let mut pass = enc.begin_compute_pass(&Default::default());
        pass.set_pipeline(&pipe);
        pass.set_bind_group(0, &bg, &[]);
        pass.dispatch_workgroups(1, 1, 1);
    }
    gpu.queue.submit([enc.finish()]);
    let raw = gpu.read(&bc, 0, (c_len * 4) as u64).expect("read back");
    raw.chunks_exact(4)
        .map(|w| f32::from_le_bytes([w[0], w[1], w[2], w[3]]))
        .collect()
}

#[test]
fn coop_product_matches_f64() {
    let require = std::env::var("DELTARULE_REQUIRE_COOP").ok().as_deref() == Some("1");
    let be = match WgpuBackend::new(AdapterChoice::from_env()) {
        Ok(b) => b,
        Err(e) => {
            assert!(!require, "no wgpu adapter: {e}");
            println!("skipped: no wgpu adapter ({e})");
            return;
        }
    };
    let gpu = be.gpu();
    println!(
        "adapter {} subgroups {}..{}; cooperative matrices: {:?}",
        gpu.info.name, gpu.info.subgroup_min_size, gpu.info.subgroup_max_size, gpu.coop_props
    );
    assert!(
        !require || (gpu.coop && !gpu.coop_emulated),
        "the adapter offers no 16x16x16 f16->f32 cooperative matrices"
    );
    let Some((src, how)) = as_run(gpu, PROBE) else {
        return;
    };
    let a = operand(1, 4096);
    let b = operand(2, 4096);
    let got = run_once(gpu, &src, &[], &a, &b, 4 * 4096);
    let mut want = vec![0f64; 4096];
    for i in 0..64 {
        for j in 0..64 {
            want[i * 64 + j] = (0..64)
                .map(|k| a[i * 64 + k] as f64 * b[k * 64 + j] as f64)
                .sum();
        }
    }
    let names = [
        "zero accumulator, row-major A",
        "accumulator loaded (+ B/2)",
        "A column-major from its transpose",
        "stored column-major",
    ];
    for (v, name) in names.iter().enumerate() {
        let mut err = 0f64;
        let mut norm = 0f64;
        for i in 0..64 {
            for j in 0..64 {
                let w = match v {
                    1 => want[i * 64 + j] + 0.5 * b[i * 64 + j] as f64,
                    _ => want[i * 64 + j],
                };
                let g = match v {
                    3 => got[3 * 4096 + j * 64 + i],
                    _ => got[v * 4096 + i * 64 + j],
                } as f64;
                err += (g - w) * (g - w);
                norm += w * w;
            }
        }
        let rel = (err / norm).sqrt();
        println!("coop probe ({how}) {name}: relative L2 {rel:.2e}");
        assert!(rel < 1e-6, "{name}: relative L2 error {rel:.2e}");
    }
}

/// C [64][32] = A [64][64] · B [64][32] in the state pass's tiling (8 subgroups, one 16 x 16 C
/// tile each, 4 k-steps), over workgroup f16 operands with row strides SA (A row-major, or its
/// transpose column-major when A_COL = 1) and SB, C stored to workgroup f32 with stride SC and
/// copied out (C_WG = 1) or stored straight to the storage buffer.
const LAYOUT: &str = r#"
enable f16;
enable wgpu_cooperative_matrix;

override SA: u32 = 64u;
override SB: u32 = 32u;
override SC: u32 = 32u;
override A_COL: u32 = 0u;
override C_WG: u32 = 1u;

@group(0) @binding(0) var<storage, read> a: array<f32>;
@group(0) @binding(1) var<storage, read> b: array<f32>;
@group(0) @binding(2) var<storage, read_write> c: array<f32>;

var<workgroup> sa: array<f16, 8192>;
var<workgroup> sb: array<f16, 4096>;
var<workgroup> sc: array<f32, 4096>;
var<workgroup> sz: array<f32, 256>;

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) tid: u32, @builtin(subgroup_id) sg: u32) {
    for (var x = tid; x < 4096u; x += 256u) {
        let i = x / 64u;
        let d = x % 64u;
        if (A_COL == 1u) {
            sa[d * SA + i] = f16(a[x]);
        } else {
            sa[i * SA + d] = f16(a[x]);
        }
    }
    for (var x = tid; x < 2048u; x += 256u) {
        sb[(x / 32u) * SB + x % 32u] = f16(b[x]);
    }
    sz[tid] = 0.0;
    workgroupBarrier();
    let wi = sg / 2u;
    let wc = sg % 2u;
    var acc = coopLoadT<coop_mat16x16<f32, C>>(&sz[0], 16u);
    for (var k = 0u; k < 4u; k++) {
        var ma: coop_mat16x16<f16, A>;
        if (A_COL == 1u) {
            ma = coopLoad<coop_mat16x16<f16, A>>(&sa[16u * k * SA + 16u * wi], SA);
        } else {
            ma = coopLoadT<coop_mat16x16<f16, A>>(&sa[16u * wi * SA + 16u * k], SA);
        }
        let mb = coopLoadT<coop_mat16x16<f16, B>>(&sb[16u * k * SB + 16u * wc], SB);
        acc = coopMultiplyAdd(ma, mb, acc);
    }
    if (C_WG == 1u) {
        coopStoreT(acc, &sc[16u * wi * SC + 16u * wc], SC);
        workgroupBarrier();
        for (var x = tid; x < 2048u; x += 256u) {
            c[x] = sc[(x / 32u) * SC + x % 32u];
        }
    } else {
        coopStoreT(acc, &c[16u * wi * 32u + 16u * wc], 32u);
    }
}
"#;

#[test]
fn coop_layouts() {
    let be = match WgpuBackend::new(AdapterChoice::from_env()) {
        Ok(b) => b,
        Err(e) => {
            println!("skipped: no wgpu adapter ({e})");
            return;
        }
    };
    let gpu = be.gpu();
    let a = operand(3, 4096);
    let b = operand(4, 2048);
    // the same with an 8-byte workgroup variable declared first (alignment of the others)
    let small = LAYOUT
        .replace(
            "var<workgroup> sa:",
            "var<workgroup> s_small: vec2<u32>;\nvar<workgroup> sa:",
        )
        .replace(
            "    sz[tid] = 0.0;",
            "    sz[tid] = 0.0;\n    if (tid == 0u) { s_small = vec2<u32>(1u, 2u); }",
        )
        .replace(
            "    if (C_WG == 1u) {\n        coopStoreT",
            "    if (tid == 0u && s_small.x == 7u) { c[0] = 0.0; }\n    if (C_WG == 1u) {\n        coopStoreT",
        );
    assert!(small.contains("s_small.x == 7u"));
    let mut want = vec![0f64; 2048];
    for i in 0..64 {
        for j in 0..32 {
            want[i * 32 + j] = (0..64)
                .map(|k| a[i * 64 + k] as f64 * b[k * 32 + j] as f64)
                .sum();
        }
    }
    let mut bad = Vec::new();
    for (src, variant) in [
        (LAYOUT.to_string(), ""),
        (small, " (8-byte variable first)"),
    ] {
        let Some((src, how)) = as_run(gpu, &src) else {
            return;
        };
        for (sa, sb, sc, acol, cwg) in [
            (64, 64, 64, 0, 0),
            (64, 32, 32, 0, 0),
            (64, 64, 32, 0, 1),
            (64, 32, 32, 0, 1),
            (64, 32, 32, 1, 1),
            (64, 64, 64, 1, 1),
            (128, 32, 32, 1, 1),
            (72, 40, 40, 0, 1),
            (64, 48, 48, 0, 1),
            (64, 32, 64, 0, 1),
            (64, 64, 32, 1, 0),
        ] {
            let consts = [
                ("SA", sa as f64),
                ("SB", sb as f64),
                ("SC", sc as f64),
                ("A_COL", acol as f64),
                ("C_WG", cwg as f64),
            ];
            let got: Vec<f64> = run_once(gpu, &src, &consts, &a, &b, 2048)
                .into_iter()
                .map(f64::from)
                .collect();
            let err: f64 = got.iter().zip(&want).map(|(g, w)| (g - w) * (g - w)).sum();
            let norm: f64 = want.iter().map(|w| w * w).sum();
            let rel = (err / norm).sqrt();
            let ok = rel < 1e-6;
            let verdict = if ok { "ok" } else { "WRONG" };
            println!(
                "coop layout{variant} ({how}) SA {sa} SB {sb} SC {sc} A_COL {acol} C_WG {cwg}: \
                 relative L2 {rel:.2e} {verdict}"
            );
            if !ok {
                bad.push((variant, sa, sb, sc, acol, cwg));
            }
        }
    }
    assert!(bad.is_empty(), "layouts giving wrong products: {bad:?}");
}

/// The coop kernel's intra variants compile to pipelines and take one storage buffer more than
/// their f32 counterparts (the f16 workspace). The kda variant with step 4 in f32 has no
/// cooperative matrices and builds on any adapter, lavapipe included; the variants with step 4 on
/// cooperative matrices build as pipelines where the adapter has them, and elsewhere their SPIR-V
/// modules are built and their bindings counted.
#[test]
fn the_coop_intra_variants_build_pipelines() {
    use deltarule_wgpu::shaders::Shader;
    let be = match WgpuBackend::new(AdapterChoice::from_env()) {
        Ok(b) => b,
        Err(e) => {
            assert!(
                std::env::var("DELTARULE_REQUIRE_WGPU").ok().as_deref() != Some("1"),
                "no wgpu adapter: {e}"
            );
            println!("skipped: no wgpu adapter ({e})");
            return;
        }
    };
    let consts = [
        ("HEAD_K", 128.0),
        ("HEAD_V", 128.0),
        ("QKV_DT", 1.0),
        ("G_DT", 0.0),
        ("BETA_DT", 0.0),
    ];
    for s in [
        Shader::GdnPrefillIntra,
        Shader::KdaPrefillIntra,
        Shader::GdnPrefillIntraCoop,
        Shader::KdaPrefillIntraCoop,
        Shader::KdaPrefillIntraCoopF32Step4,
    ] {
        if s.coop() && !be.gpu().coop {
            let m = deltarule_wgpu::coop::build(s, &consts, false)
                .unwrap_or_else(|e| panic!("{}: {e}", s.name()));
            let b: Vec<u32> = m.bindings.iter().map(|b| b.binding).collect();
            assert_eq!(b, (0..=9).collect::<Vec<u32>>(), "{}", s.name());
            println!(
                "{}: SPIR-V with bindings 0..=9 (no cooperative matrices here)",
                s.name()
            );
            continue;
        }
        let p = be
            .gpu()
            .pipeline(s, &consts)
            .unwrap_or_else(|e| panic!("{}: {e}", s.name()));
        // bindings 0 (uniform) and 1..=8, plus 9 (the f16 workspace) in the coop variants only:
        // a bind group with one binding too many or too few is rejected
        let coop = matches!(
            s,
            Shader::GdnPrefillIntraCoop
                | Shader::KdaPrefillIntraCoop
                | Shader::KdaPrefillIntraCoopF32Step4
        );
        let gpu = be.gpu();
        let uni = gpu.uniform(&[0u32; 64]);
        let buf = gpu.scratch("probe", 64);
        let fits = |n: u32| -> bool {
            let mut entries = vec![wgpu::BindGroupEntry {
                binding: 0,
                resource: uni.as_entire_binding(),
            }];
            for b in 1..=n {
                entries.push(wgpu::BindGroupEntry {
                    binding: b,
                    resource: buf.as_entire_binding(),
                });
            }
            let scope = gpu.device.push_error_scope(wgpu::ErrorFilter::Validation);
            let _bg = gpu.device.create_bind_group(&wgpu::BindGroupDescriptor {
                label: None,
                layout: &p.get_bind_group_layout(0),
                entries: &entries,
            });
            pollster::block_on(scope.pop()).is_none()
        };
        let storage = if coop { 9 } else { 8 };
        assert!(
            fits(storage),
            "{}: {storage} storage buffers rejected",
            s.name()
        );
        assert!(
            !fits(storage + 1),
            "{}: a binding {} accepted",
            s.name(),
            storage + 1
        );
        assert!(
            !fits(storage - 1),
            "{}: binding {storage} not required",
            s.name()
        );
        println!("{}: pipeline with {storage} storage buffers", s.name());
    }
}

/// The SPIR-V of every cooperative-matrix stage, as the hardware path builds it (src/coop.rs:
/// naga's override processing, its SPIR-V writer, the memory-model rewrite), for the head dims and
/// variants the host uses. Needs no adapter: naga's writer has panicked on some expressions inside
/// cooperative-matrix calls, which this shows here rather than on the hardware.
#[test]
fn every_coop_stage_builds_spirv_for_its_variants() {
    use deltarule_wgpu::shaders::Shader;
    for (k, v) in [(64.0, 64.0), (128.0, 128.0), (64.0, 128.0), (128.0, 64.0)] {
        let mut cases: Vec<(Shader, Vec<(&str, f64)>)> =
            vec![(Shader::PrefillStateCoop, vec![("HEAD_K", k), ("HEAD_V", v)])];
        // the matrix intra stages, with 64- and 32-column U tiles (UW)
        for s in [Shader::GdnPrefillIntraCoop, Shader::KdaPrefillIntraCoop] {
            for uw in [64.0, 32.0] {
                cases.push((
                    s,
                    vec![
                        ("HEAD_K", k),
                        ("HEAD_V", v),
                        ("QKV_DT", 1.0),
                        ("G_DT", 0.0),
                        ("BETA_DT", 0.0),
                        ("UW", uw),
                    ],
                ));
            }
        }
        for (s, consts) in cases {
            for checked in [false, true] {
                let m = deltarule_wgpu::coop::build(s, &consts, checked)
                    .unwrap_or_else(|e| panic!("{} {consts:?}: {e}", s.name()));
                assert!(m.words.len() > 100, "{}", s.name());
            }
        }
    }
}

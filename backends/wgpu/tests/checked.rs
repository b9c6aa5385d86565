//! The launch layer on the device, with and without wgpu's injected bounds checks (the checked
//! backend also uses the 16-column state pass, the unchecked one the 32-column one): both module
//! kinds must agree to rounding (an out-of-range access in the unchecked modules would show up
//! as a difference), write every element, and match the CPU float64 reference within the f32
//! tolerance. Skipped when no adapter is present, unless `DELTARULE_REQUIRE_WGPU=1`.

use deltarule_core::{
    compare, Backend, BetaMode, DType, FinalState, Gate, HostTensor, InitialState, Inputs, Kernel,
    Mode, Op, Outputs, Problem, StateLayout,
};
use deltarule_cpu::CpuBackend;
use deltarule_wgpu::{AdapterChoice, WgpuBackend};

struct Lcg(u64);
impl Lcg {
    fn next(&mut self) -> f64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((self.0 >> 11) as f64 / (1u64 << 53) as f64) * 2.0 - 1.0
    }
    fn vec(&mut self, n: usize, scale: f64, shift: f64) -> Vec<f64> {
        (0..n).map(|_| self.next() * scale + shift).collect()
    }
}

fn inputs(p: &Problem, lens: &[usize], seed: u64) -> Inputs {
    let mut r = Lcg(seed);
    let t = p.tokens;
    let mut cu = vec![0i64];
    for l in lens {
        cu.push(cu[cu.len() - 1] + *l as i64);
    }
    let gk = if p.op == Op::Kda { p.k } else { 1 };
    let g = match p.gate {
        Gate::Log => r.vec(t * p.hv * gk, 0.05, -0.08),
        _ => r.vec(t * p.hv * gk, 2.0, 0.0),
    };
    let rows = p.initial_rows();
    let initial_state = (rows > 0).then(|| {
        HostTensor::from_f64(
            p.state_in_dtype,
            p.state_shape(rows),
            &r.vec(rows * p.hv * p.k * p.v, 0.5, 0.0),
        )
    });
    let state_indices = match p.initial {
        InitialState::Pool { rows } => {
            let idx: Vec<i64> = (0..p.seqs as i64)
                .map(|n| {
                    if n == 1 {
                        -1
                    } else {
                        (rows as i64 - 1 - n) % rows as i64
                    }
                })
                .collect();
            Some(HostTensor::from_i64(p.index_dtype, vec![p.seqs], &idx))
        }
        _ => None,
    };
    Inputs {
        q: HostTensor::from_f64(
            p.qkv_dtype,
            vec![t, p.h, p.k],
            &r.vec(t * p.h * p.k, 1.0, 0.0),
        ),
        k: HostTensor::from_f64(
            p.qkv_dtype,
            vec![t, p.h, p.k],
            &r.vec(t * p.h * p.k, 1.0, 0.0),
        ),
        v: HostTensor::from_f64(
            p.qkv_dtype,
            vec![t, p.hv, p.v],
            &r.vec(t * p.hv * p.v, 1.0, 0.0),
        ),
        g: HostTensor::from_f64(p.g_dtype, p.g_shape(), &g),
        beta: HostTensor::from_f64(p.beta_dtype, vec![t, p.hv], &r.vec(t * p.hv, 0.4, 0.5)),
        cu_seqlens: HostTensor::from_i64(p.offsets_dtype, vec![p.seqs + 1], &cu),
        a_log: p
            .a_log
            .then(|| HostTensor::from_f64(DType::F32, vec![p.hv], &r.vec(p.hv, 0.5, 0.0))),
        dt_bias: p.gate.in_kernel().then(|| {
            HostTensor::from_f64(
                DType::F32,
                vec![p.dt_bias_len()],
                &r.vec(p.dt_bias_len(), 0.5, 0.0),
            )
        }),
        initial_state,
        state_indices,
    }
}

fn problems() -> Vec<(Problem, Vec<usize>)> {
    let mut out = Vec::new();
    for op in Op::ALL {
        // odd dims, GVA, varlen with an empty sequence, dense f32 state, checkpoints every 50
        let lens = vec![70, 0, 45];
        let mut p = Problem::new(op, Mode::Prefill, 3, 115, 1, 2, 60, 100);
        p.initial = InitialState::Dense;
        p.checkpoint_every = Some(50);
        p.qkv_dtype = DType::F16;
        out.push((p, lens));
        // bf16 pool in place, vk, in-kernel gates, l2norm, bf16 output
        let lens = vec![30, 66, 5];
        let mut p = Problem::new(op, Mode::Prefill, 3, 101, 2, 4, 32, 48);
        p.initial = InitialState::Pool { rows: 5 };
        p.final_state = FinalState::InPlace;
        p.state_in_dtype = DType::BF16;
        p.state_out_dtype = DType::BF16;
        p.layout = StateLayout::Vk;
        p.gate = if op == Op::Kda {
            Gate::LowerBound(-4.0)
        } else {
            Gate::Softplus
        };
        p.a_log = true;
        p.beta = BetaMode::Logit;
        p.l2norm = true;
        p.out_dtype = DType::BF16;
        out.push((p.clone(), lens));
        // decode T = 2 on the same pool
        let mut d = p;
        d.mode = Mode::Decode;
        d.tokens = 6;
        d.out_dtype = DType::F32;
        out.push((d, vec![2, 2, 2]));
    }
    out
}

fn open(checked: bool) -> Option<WgpuBackend> {
    open_with(checked, None)
}

fn open_with(checked: bool, max_binding: Option<u64>) -> Option<WgpuBackend> {
    open_choice(AdapterChoice {
        checked,
        max_binding,
        state_bv: if checked { Some(16) } else { None },
        ..adapter()
    })
}

/// The adapter of `DELTARULE_WGPU_ADAPTER` with every option at its default.
fn adapter() -> AdapterChoice {
    AdapterChoice {
        name: std::env::var("DELTARULE_WGPU_ADAPTER").ok(),
        ..AdapterChoice::default()
    }
}

fn open_choice(choice: AdapterChoice) -> Option<WgpuBackend> {
    match WgpuBackend::new(choice) {
        Ok(b) => Some(b),
        Err(e) => {
            if std::env::var("DELTARULE_REQUIRE_WGPU").ok().as_deref() == Some("1") {
                panic!("DELTARULE_REQUIRE_WGPU=1 but: {e}");
            }
            println!("SKIP: {e}");
            None
        }
    }
}

/// The f32 kernels' tolerance against float64 (docs/spec.md: 1e-4), or a bf16 tensor's own rounding
/// (one ulp of bf16 is 4e-3).
fn f32_tolerance(t: &HostTensor) -> f64 {
    if t.dtype() == DType::BF16 {
        5e-3
    } else {
        1e-4
    }
}

/// `got` within relative L2 `tol` of `want` (asserted, and printed).
fn assert_close(p: &Problem, what: &str, got: &HostTensor, want: &HostTensor, tol: f64) {
    let m = compare(&got.to_f64_vec(), &want.to_f64_vec());
    assert!(
        m.passes(tol),
        "{p}: {what}: rel_l2 {:.3e} > {tol:.0e}, {} non-finite",
        m.rel_l2,
        m.nonfinite
    );
    println!("{p}: {what}: rel_l2 {:.2e}", m.rel_l2);
}

fn tensors(o: &Outputs) -> Vec<(&'static str, &HostTensor)> {
    let mut v = vec![("o", &o.o)];
    if let Some(s) = &o.final_state {
        v.push(("final_state", s));
    }
    if let Some(c) = &o.checkpoints {
        v.push(("checkpoints", c));
    }
    v
}

#[test]
fn checked_and_unchecked_modules_agree_with_the_reference() {
    let (Some(fast), Some(checked)) = (open(false), open(true)) else {
        return;
    };
    let cpu = CpuBackend::new();
    for (seed, (p, lens)) in problems().into_iter().enumerate() {
        let x = inputs(&p, &lens, 100 + seed as u64);
        let kernel = if p.mode == Mode::Prefill {
            Kernel::Chunked
        } else {
            Kernel::Recurrent
        };
        let a = fast.run(kernel, &p, &x).expect("unchecked run");
        let b = checked.run(kernel, &p, &x).expect("checked run");
        let r = cpu.run(Kernel::Reference, &p, &x).expect("reference");
        for ((name, ta), ((_, tb), (_, tr))) in tensors(&a)
            .into_iter()
            .zip(tensors(&b).into_iter().zip(tensors(&r)))
        {
            // The two module kinds compile to different instruction streams (the driver may
            // contract a*b+c differently), so they agree to rounding, not bit for bit; an
            // out-of-range access in the unchecked modules would show up far above this.
            let d = compare(&ta.to_f64_vec(), &tb.to_f64_vec());
            let agree = if ta.dtype() == DType::F32 { 1e-5 } else { 1e-3 };
            assert!(
                d.passes(agree),
                "{p}: {name} differs between checked and unchecked modules: rel_l2 {:.3e}, \
                 {} non-finite, worst {} ({} vs {})",
                d.rel_l2,
                d.nonfinite,
                d.worst,
                d.worst_got,
                d.worst_want
            );
            assert_eq!(
                ta.count_nonfinite(),
                0,
                "{p}: {name} has unwritten (NaN) elements"
            );
            let m = compare(&ta.to_f64_vec(), &tr.to_f64_vec());
            // 16-bit tensors carry their own rounding (one ulp of bf16 is 4e-3)
            let tol = f32_tolerance(ta);
            assert!(
                m.passes(tol),
                "{p}: {name} rel_l2 {:.3e} > {tol:.0e}",
                m.rel_l2
            );
            println!("{p}: {name} rel_l2 {:.2e}", m.rel_l2);
        }
    }
}

/// With the storage binding capped below one head's workspace times the heads, the prefill runs
/// in head batches (several dispatch triples with hv0 > 0); the results must not change.
#[test]
fn head_batches_give_the_same_numbers() {
    let Some(whole) = open(false) else { return };
    let cpu = CpuBackend::new();
    for op in Op::ALL {
        let lens = vec![100, 40];
        let mut p = Problem::new(op, Mode::Prefill, 2, 140, 2, 6, 32, 40);
        p.initial = InitialState::Dense;
        p.checkpoint_every = Some(64);
        let x = inputs(&p, &lens, 7);
        // 3 chunks; the largest per-head workspace (wsa) is 3 * slot words
        let slot = 128 * 32 + 64 * 32 + 4096 + 32 + if op == Op::Kda { 64 * 32 } else { 0 };
        let cap = (3 * slot * 4 * 2 + 16) as u64; // two heads a batch -> 3 batches
        let Some(batched) = open_with(false, Some(cap)) else {
            return;
        };
        let a = whole.run(Kernel::Chunked, &p, &x).expect("whole");
        let b = batched.run(Kernel::Chunked, &p, &x).expect("batched");
        let r = cpu.run(Kernel::Reference, &p, &x).expect("reference");
        for ((name, ta), ((_, tb), (_, tr))) in tensors(&a)
            .into_iter()
            .zip(tensors(&b).into_iter().zip(tensors(&r)))
        {
            assert!(
                ta.bit_identical(tb),
                "{p}: {name} differs when heads are batched"
            );
            let m = compare(&tb.to_f64_vec(), &tr.to_f64_vec());
            assert!(m.passes(1e-4), "{p}: {name} rel_l2 {:.3e}", m.rel_l2);
        }
    }
}

/// kda's intra step 2 goes through 16-token reference points, whose factors must keep every
/// exponent non-positive: within the f32 tolerance of the float64 reference on the kda problems
/// above and on one with large softplus gates (Γ falls by hundreds within a chunk).
#[test]
fn kda_reference_points_hold_large_gates() {
    let Some(wgpu) = open_choice(adapter()) else {
        return;
    };
    let cpu = CpuBackend::new();
    let mut cases: Vec<(Problem, Vec<usize>)> = problems()
        .into_iter()
        .filter(|(p, _)| p.op == Op::Kda && p.mode == Mode::Prefill)
        .collect();
    let mut big = Problem::new(Op::Kda, Mode::Prefill, 2, 190, 2, 2, 64, 64);
    big.gate = Gate::Softplus;
    big.a_log = true;
    big.initial = InitialState::Dense;
    cases.push((big, vec![128, 62]));
    for (seed, (p, lens)) in cases.into_iter().enumerate() {
        let mut x = inputs(&p, &lens, 300 + seed as u64);
        if p.gate == Gate::Softplus && p.initial == InitialState::Dense {
            // softplus(g + dt_bias) up to ~12 a token
            x.g = HostTensor::from_f64(
                p.g_dtype,
                p.g_shape(),
                &Lcg(77).vec(p.tokens * p.hv * p.k, 6.0, 6.0),
            );
        }
        let a = wgpu.run(Kernel::Chunked, &p, &x).expect("reference points");
        let r = cpu.run(Kernel::Reference, &p, &x).expect("reference");
        for ((name, ta), (_, tr)) in tensors(&a).into_iter().zip(tensors(&r)) {
            assert_eq!(ta.count_nonfinite(), 0, "{p}: {name} non-finite");
            assert_close(&p, name, ta, tr, f32_tolerance(ta));
        }
    }
}

/// The `coop` kernel with its cooperative matrices emulated in plain WGSL (src/emulate.rs,
/// `coop_emulate`), which is how it runs on lavapipe in CI: kda's coop kernel (its state pass on
/// the emulated matrices, o computed there) within the tensor-core tolerance of docs/spec.md
/// (5e-3) of the float64 reference, every element written, o as f32 and as bf16. The emulation
/// must engage on any adapter with f16 (lavapipe has it) when `DELTARULE_REQUIRE_WGPU=1`. (Keys
/// are L2-normalised in the kernel: the coop kernel's operands are f16, and raw keys of K = 64
/// unit-range channels make W and S overflow it, as on the hardware; the f32 kernels take such
/// inputs.)
#[test]
fn coop_kernel_with_emulated_matrices_matches_the_reference() {
    let Some(emu) = open_choice(AdapterChoice {
        coop_emulate: true,
        ..adapter()
    }) else {
        return;
    };
    let gpu = emu.gpu();
    if !gpu.coop {
        assert!(
            std::env::var("DELTARULE_REQUIRE_WGPU").ok().as_deref() != Some("1")
                || !gpu.features.contains(wgpu::Features::SHADER_F16),
            "the coop emulation did not engage on an adapter with f16"
        );
        println!("SKIP: no cooperative matrices and no f16 on this adapter");
        return;
    }
    let how = if gpu.coop_emulated {
        "emulated"
    } else {
        "hardware"
    };
    let cpu = CpuBackend::new();
    // GVA, varlen, dense f32 state, checkpoints; then a bf16 pool in place, vk, in-kernel gates
    let mut a = Problem::new(Op::Kda, Mode::Prefill, 2, 150, 2, 4, 64, 64);
    a.initial = InitialState::Dense;
    a.checkpoint_every = Some(64);
    a.l2norm = true;
    a.out_dtype = DType::F32;
    let mut b = Problem::new(Op::Kda, Mode::Prefill, 3, 160, 2, 2, 128, 128);
    b.initial = InitialState::Pool { rows: 5 };
    b.final_state = FinalState::InPlace;
    b.state_in_dtype = DType::BF16;
    b.state_out_dtype = DType::BF16;
    b.layout = StateLayout::Vk;
    b.gate = Gate::LowerBound(-4.0);
    b.a_log = true;
    b.beta = BetaMode::Logit;
    b.l2norm = true;
    b.out_dtype = DType::BF16;
    for (seed, (p, lens)) in [(a, vec![100, 50]), (b, vec![70, 0, 90])]
        .into_iter()
        .enumerate()
    {
        let x = inputs(&p, &lens, 500 + seed as u64);
        let got = emu.run(Kernel::Coop, &p, &x).expect("coop run");
        let r = cpu.run(Kernel::Reference, &p, &x).expect("reference");
        for ((name, t), (_, tr)) in tensors(&got).into_iter().zip(tensors(&r)) {
            assert_eq!(t.count_nonfinite(), 0, "{p}: {name} has unwritten elements");
            assert_close(&p, &format!("{name} ({how})"), t, tr, 5e-3);
        }
    }
}

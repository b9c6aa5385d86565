//! The segmented T-form pair's passes (backends/cuda/src/segments.rs) with the CPU backend's
//! chunked kernel in place of the CUDA state pass, on any machine: the segments cut as
//! `gdn_prefill_segments_setup` cuts them, the three pass problems of `plan::segment_passes` (F
//! from zero, M from a one-row identity pool over v = 0 with V = K, the pass from the incoming
//! states), the combine of `gdn_prefill_segments_combine` and the final states of
//! `gdn_prefill_segments_finish`, against the unsegmented problem. This checks the derivation
//! of the passes (dtypes, layouts, pools, what a transition pass computes), not the CUDA kernels.

use deltarule_core::{
    compare, DType, FinalState, HostTensor, InitialState, Inputs, Mode, Op, Outputs, Preference,
    Problem, StateLayout,
};
use deltarule_cuda::plan::{segment_passes, SegmentPlan};
use deltarule_tests::{generate, suite};

fn run(p: &Problem, inputs: &Inputs) -> Outputs {
    let pref = Preference::parse("cpu:chunked").expect("a preference");
    suite::engine()
        .run(p, inputs, pref)
        .unwrap_or_else(|e| panic!("cpu:chunked on {p:?}: {e}"))
        .0
}

/// The segmented pipeline for `p` with segments of `chunks` chunks: o and the final states
/// (dense, in `p`'s layout, f64).
fn segmented(p: &Problem, inputs: &Inputs, lens: &[usize], chunks: usize) -> (Vec<f64>, Vec<f64>) {
    // (K = V = 32 here: the plan's rule takes the T-form pair's V >= 64, the passes do not care)
    let seg = SegmentPlan::new(p, chunks);
    let (hv, k, v) = (p.hv, p.k, p.v);
    let l = seg.tokens(p);
    // the cuts (gdn_prefill_segments_setup)
    let (mut seg_cu, mut seg_of) = (Vec::new(), Vec::new());
    let mut bos = 0usize;
    for &len in lens {
        seg_of.push(seg_cu.len());
        let ns = if len > l { len.div_ceil(l) } else { 1 };
        for j in 0..ns {
            seg_cu.push((bos + j * l) as i64);
        }
        bos += len;
    }
    seg_of.push(seg_cu.len());
    assert!(seg_cu.len() <= seg.n_seg, "the static bound");
    seg_cu.resize(seg.n_seg + 1, bos as i64);
    let [pf, pm, p3] = segment_passes(p, &seg);
    let cu = HostTensor::from_i64(DType::I32, vec![seg.n_seg + 1], &seg_cu);
    let base = Inputs {
        cu_seqlens: cu,
        initial_state: None,
        state_indices: None,
        ..inputs.clone()
    };
    // pass 1: F and M
    let fin = run(&pf, &base).final_state.expect("F").to_f64_vec();
    let mut ident = vec![0.0; hv * k * k];
    for h in 0..hv {
        for d in 0..k {
            ident[(h * k + d) * k + d] = 1.0;
        }
    }
    // (the CUDA pass reads one identity row through every segment's pool index 0; the CPU
    // backend refuses repeated pool rows, which its in-place updates would race on, so the model
    // gives every segment its own copy as a dense initial state: the same values)
    assert_eq!(pm.initial, InitialState::Pool { rows: 1 });
    let pm = Problem {
        initial: InitialState::Dense,
        ..pm
    };
    let idents: Vec<f64> = (0..seg.n_seg).flat_map(|_| ident.iter().copied()).collect();
    let zeros = vec![0.0; p.tokens * hv * v];
    let mi = Inputs {
        v: HostTensor::from_f64(p.qkv_dtype, vec![p.tokens, hv, v], &zeros),
        initial_state: Some(HostTensor::from_f64(
            DType::F32,
            vec![seg.n_seg, hv, k, k],
            &idents,
        )),
        ..base.clone()
    };
    let trans = run(&pm, &mi).final_state.expect("M").to_f64_vec();
    // the combine, in f64 over f32 values
    let at = |layout: StateLayout, d: usize, e: usize| match layout {
        StateLayout::Kv => d * v + e,
        StateLayout::Vk => e * k + d,
    };
    let h0 = inputs.initial_state.as_ref().map(HostTensor::to_f64_vec);
    let idx = inputs
        .state_indices
        .as_ref()
        .map(|t| t.to_i64_vec("state_indices").expect("indices"));
    let kv = k * v;
    let mut sin = vec![0.0; seg.n_seg * hv * kv];
    for n in 0..lens.len() {
        let row = match p.initial {
            InitialState::None => -1,
            InitialState::Dense => n as i64,
            InitialState::Pool { .. } => idx.as_ref().expect("indices")[n],
        };
        for h in 0..hv {
            let mut s = vec![0.0; kv];
            if row >= 0 {
                let src = h0.as_ref().expect("h0");
                for d in 0..k {
                    for e in 0..v {
                        s[d * v + e] = src[(row as usize * hv + h) * kv + at(p.layout, d, e)];
                    }
                }
            }
            for j in seg_of[n]..seg_of[n + 1] {
                let b = (j * hv + h) * kv;
                for (i, x) in s.iter().enumerate() {
                    sin[b + i] = f64::from(*x as f32);
                }
                if j + 1 == seg_of[n + 1] {
                    break;
                }
                let m = &trans[(j * hv + h) * k * k..];
                let mut y = fin[b..b + kv].to_vec();
                for d in 0..k {
                    for e in 0..v {
                        y[d * v + e] += (0..k).map(|c| m[d * k + c] * s[c * v + e]).sum::<f64>();
                    }
                }
                s = y;
            }
        }
    }
    // pass 3 from the incoming states
    let si = Inputs {
        initial_state: Some(HostTensor::from_f64(
            DType::F32,
            vec![seg.n_seg, hv, k, v],
            &sin,
        )),
        ..base
    };
    let out = run(&p3, &si);
    let finals = out.final_state.expect("finals").to_f64_vec();
    // finish: each sequence's last segment, in p's layout
    let mut fs = vec![0.0; lens.len() * hv * kv];
    for n in 0..lens.len() {
        let j = seg_of[n + 1] - 1;
        for h in 0..hv {
            for d in 0..k {
                for e in 0..v {
                    fs[(n * hv + h) * kv + at(p.layout, d, e)] =
                        finals[(j * hv + h) * kv + d * v + e];
                }
            }
        }
    }
    (out.o.to_f64_vec(), fs)
}

#[test]
fn the_segmented_passes_reproduce_the_unsegmented_problem() {
    let lens = [300, 0, 128, 129, 64, 700, 1];
    for (layout, initial, style) in [
        (
            StateLayout::Kv,
            InitialState::Dense,
            generate::GateStyle::Extreme,
        ),
        (
            StateLayout::Vk,
            InitialState::Dense,
            generate::GateStyle::Realistic,
        ),
        (
            StateLayout::Kv,
            InitialState::None,
            generate::GateStyle::NoDecay,
        ),
    ] {
        let mut p = Problem::new(Op::Gdn, Mode::Prefill, 1, 1, 2, 4, 32, 32);
        p.l2norm = true;
        p.layout = layout;
        p.initial = initial;
        p.final_state = FinalState::Dense;
        p.state_in_dtype = DType::BF16;
        let style = generate::DataStyle {
            gate: style,
            ..Default::default()
        };
        let case = generate::generate(&p, &lens, 5, style).expect("generate");
        let p = case.problem.clone();
        let want = run(&p, &case.inputs);
        let want_f = want.final_state.expect("final").to_f64_vec();
        for chunks in [1, 2, 4] {
            let (o, f) = segmented(&p, &case.inputs, &lens, chunks);
            let eo = compare(&o, &want.o.to_f64_vec());
            let ef = compare(&f, &want_f);
            println!(
                "{layout:?} {initial:?} {:?}, segments of {chunks} chunks: o {:.2e}, final {:.2e}",
                style.gate, eo.rel_l2, ef.rel_l2
            );
            assert!(eo.passes(1e-5) && ef.passes(1e-5), "{eo:?} {ef:?}");
        }
    }
}

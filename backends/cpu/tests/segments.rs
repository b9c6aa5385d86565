//! The segment summaries and the segment-parallel path against the token recurrence: long
//! variable-length batches with extreme but finite log decays and -inf resets, every state option
//! (dense and pooled initial states, in-place pool updates, both layouts, checkpoints), GVA; and
//! the backend's `segmented` kernel, which runs that path in f64.

use deltarule_core::select::AutoWhen;
use deltarule_core::{
    Backend, BackendKind, BetaMode, DType, Error, FinalState, HostTensor, InitialState, Inputs,
    Kernel, Mode, Op, Outputs, Precision, Problem, StateLayout, RULES,
};
use deltarule_cpu::options::{Options, DEFAULT_SEGMENT_LEN, SEGMENT_LEN_VAR};
use deltarule_cpu::prep::{initial_state, Prepared};
use deltarule_cpu::reference::{recurrence, Pair};
use deltarule_cpu::segments::{apply, compose, segmented, segmented_pair, summarize, Summary};
use deltarule_cpu::CpuBackend;

/// splitmix64 with uniform and normal draws.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn uniform(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
    fn range(&mut self, a: f64, b: f64) -> f64 {
        a + (b - a) * self.uniform()
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn normal(&mut self) -> f64 {
        let u = self.uniform().max(1e-300);
        (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * self.uniform()).cos()
    }
}

/// Log decays at fixed positions from a sequence's start: at and beside the segment edges of the
/// segment lengths under test (1, 7, 64, 1000). Position 7 resets the state (a segment of 7 that
/// starts with a reset), position 999 resets it at the end of a segment of 1000.
const AT_EDGES: [(usize, f64); 10] = [
    (6, -1e4),
    (7, f64::NEG_INFINITY),
    (63, -30.0),
    (64, -745.0),
    (65, -1e-4),
    (127, -1e3),
    (128, -1e-4),
    (999, f64::NEG_INFINITY),
    (1000, -20.0),
    (1001, -100.0),
];
/// Single-token log decays from almost none to a total loss of the state in f64.
const EXTREME: [f64; 8] = [-1e-4, -1.0, -5.0, -20.0, -100.0, -745.0, -1e3, -1e4];

/// A per-token log decay: mostly small (-1e-4 to -0.3, a long memory), with extreme single
/// tokens, runs of -30 and -inf resets at random and at [`AT_EDGES`].
struct Gates {
    run: usize,
}

impl Gates {
    fn draw(&mut self, rng: &mut Rng, pos: Option<usize>) -> f64 {
        if let Some(&(_, g)) = AT_EDGES.iter().find(|(at, _)| Some(*at) == pos) {
            return g;
        }
        if self.run > 0 {
            self.run -= 1;
            return -30.0;
        }
        let r = rng.uniform();
        if r < 0.0005 {
            f64::NEG_INFINITY
        } else if r < 0.0015 {
            self.run = 1 + rng.below(10);
            -30.0
        } else if r < 0.005 {
            EXTREME[rng.below(EXTREME.len())]
        } else {
            -(rng.range(1e-4f64.ln(), 0.3f64.ln())).exp()
        }
    }
}

#[derive(Clone, Copy)]
struct Config {
    op: Op,
    h: usize,
    hv: usize,
    k: usize,
    v: usize,
    layout: StateLayout,
    /// A pool with indices and an in-place final state; else a dense initial and final state.
    pool: bool,
    checkpoint_every: Option<usize>,
    l2norm: bool,
    beta: BetaMode,
}

/// A long one, one shorter than every segment length but 1, a multiple of 7 and of 64, an empty
/// one, a multiple of 1000, exactly one segment of 64.
const LENGTHS: [usize; 6] = [1800, 5, 448, 0, 2000, 64];

fn build(c: Config, lens: &[usize], seed: u64) -> (Problem, Inputs) {
    let mut rng = Rng(seed);
    let t: usize = lens.iter().sum();
    let n = lens.len();
    let mut p = Problem::new(c.op, Mode::Prefill, n, t, c.h, c.hv, c.k, c.v);
    p.qkv_dtype = DType::F32;
    p.layout = c.layout;
    p.checkpoint_every = c.checkpoint_every;
    p.l2norm = c.l2norm;
    p.beta = c.beta;
    let q: Vec<f64> = (0..t * c.h * c.k).map(|_| rng.normal()).collect();
    let mut k: Vec<f64> = (0..t * c.h * c.k).map(|_| rng.normal()).collect();
    if !c.l2norm {
        for row in k.chunks_mut(c.k) {
            let norm = row.iter().map(|x| x * x).sum::<f64>().sqrt();
            row.iter_mut().for_each(|x| *x /= norm);
        }
    }
    let v: Vec<f64> = (0..t * c.hv * c.v).map(|_| rng.normal()).collect();
    let gk = match c.op {
        Op::Gdn => 1,
        Op::Kda => c.k,
    };
    let mut g = vec![0.0; t * c.hv * gk];
    let mut start = 0;
    for &len in lens {
        for hv in 0..c.hv {
            let mut gates: Vec<Gates> = (0..gk).map(|_| Gates { run: 0 }).collect();
            for pos in 0..len {
                // kda: a reset or an extreme decay hits some channels; the others keep theirs
                let shared = gates[0].draw(&mut rng, Some(pos));
                for (d, gate) in gates.iter_mut().enumerate() {
                    let own = gate.draw(&mut rng, None);
                    g[((start + pos) * c.hv + hv) * gk + d] =
                        if d == 0 || (d + pos) % 3 != 0 || shared == f64::NEG_INFINITY {
                            shared
                        } else {
                            own
                        };
                }
            }
        }
        start += len;
    }
    let beta: Vec<f64> = (0..t * c.hv)
        .map(|_| match c.beta {
            BetaMode::Prob => rng.range(0.05, 1.0),
            _ => 2.0 * rng.normal(),
        })
        .collect();
    let mut cu = vec![0i64];
    for &len in lens {
        cu.push(cu[cu.len() - 1] + len as i64);
    }
    let (rows, indices) = if c.pool {
        // a permutation of rows with one sequence that has no row (-1)
        let rows = n + 2;
        let mut idx: Vec<i64> = (0..rows as i64).collect();
        for i in (1..rows).rev() {
            idx.swap(i, rng.below(i + 1));
        }
        idx.truncate(n);
        idx[1] = -1;
        p.initial = InitialState::Pool { rows };
        p.final_state = FinalState::InPlace;
        (rows, Some(HostTensor::from_i64(DType::I64, vec![n], &idx)))
    } else {
        p.initial = InitialState::Dense;
        p.final_state = FinalState::Dense;
        (n, None)
    };
    let s0: Vec<f64> = (0..rows * c.hv * c.k * c.v)
        .map(|_| 0.5 * rng.normal())
        .collect();
    let inputs = Inputs {
        q: HostTensor::from_f64(DType::F32, vec![t, c.h, c.k], &q),
        k: HostTensor::from_f64(DType::F32, vec![t, c.h, c.k], &k),
        v: HostTensor::from_f64(DType::F32, vec![t, c.hv, c.v], &v),
        g: HostTensor::from_f64(DType::F32, p.g_shape(), &g),
        beta: HostTensor::from_f64(DType::F32, vec![t, c.hv], &beta),
        cu_seqlens: HostTensor::from_i64(DType::I64, vec![n + 1], &cu),
        a_log: None,
        dt_bias: None,
        initial_state: Some(HostTensor::from_f64(DType::F32, p.state_shape(rows), &s0)),
        state_indices: indices,
    };
    (p, inputs)
}

fn rel_l2(x: &[f64], reference: &[f64]) -> f64 {
    assert_eq!(x.len(), reference.len(), "lengths differ");
    assert!(x.iter().all(|a| a.is_finite()), "non-finite values");
    let err = x
        .iter()
        .zip(reference)
        .map(|(a, b)| (a - b) * (a - b))
        .sum::<f64>()
        .sqrt();
    let norm = reference.iter().map(|b| b * b).sum::<f64>().sqrt();
    if norm > 0.0 {
        err / norm
    } else {
        err
    }
}

/// The worst relative L2 error over `o`, the final state and the checkpoints; shapes must match.
fn worst(got: &Outputs, want: &Outputs) -> f64 {
    assert_eq!(got.o.shape, want.o.shape);
    let mut e = rel_l2(&got.o.to_f64_vec(), &want.o.to_f64_vec());
    for (a, b) in [
        (&got.final_state, &want.final_state),
        (&got.checkpoints, &want.checkpoints),
    ] {
        match (a, b) {
            (Some(a), Some(b)) => {
                assert_eq!(a.shape, b.shape);
                e = e.max(rel_l2(&a.to_f64_vec(), &b.to_f64_vec()));
            }
            (None, None) => {}
            _ => panic!("one path wrote a tensor the other did not"),
        }
    }
    e
}

const SEGMENT_LENS: [usize; 4] = [1, 7, 64, 1000];

/// The f64 segmented path against the f64 reference kernel for every segment length.
fn check_problem(c: Config, seed: u64) {
    let (p, inputs) = build(c, &LENGTHS, seed);
    let want = CpuBackend::new()
        .run(Kernel::Reference, &p, &inputs)
        .expect("reference");
    if let Some(ck) = &want.checkpoints {
        assert!(ck.shape[0] > 0, "the case has checkpoints");
    }
    // the initial states reach the outputs: a wrong incoming state cannot go unnoticed
    let mut zero = inputs.clone();
    if let Some(s0) = zero.initial_state.as_mut() {
        *s0 = HostTensor::from_f64(s0.dtype(), s0.shape.clone(), &vec![0.0; s0.numel()]);
    }
    let from_zero = CpuBackend::new()
        .run(Kernel::Reference, &p, &zero)
        .expect("reference from zeros");
    assert!(rel_l2(&from_zero.o.to_f64_vec(), &want.o.to_f64_vec()) > 1e-3);
    for seg in SEGMENT_LENS {
        let got = segmented::<f64>(&p, &inputs, seg).expect("segmented");
        let e = worst(&got, &want);
        println!("{} segment_len {seg}: max rel L2 {e:.3e}", p.id());
        assert!(e <= 1e-6, "{} segment_len {seg}: rel L2 {e:.3e}", p.id());
    }
}

#[test]
fn gdn_dense_kv_matches_reference() {
    check_problem(
        Config {
            op: Op::Gdn,
            h: 2,
            hv: 4,
            k: 16,
            v: 20,
            layout: StateLayout::Kv,
            pool: false,
            checkpoint_every: Some(100),
            l2norm: false,
            beta: BetaMode::Prob,
        },
        1,
    );
}

#[test]
fn gdn_pool_vk_matches_reference() {
    check_problem(
        Config {
            op: Op::Gdn,
            h: 1,
            hv: 3,
            k: 20,
            v: 16,
            layout: StateLayout::Vk,
            pool: true,
            checkpoint_every: Some(64),
            l2norm: true,
            beta: BetaMode::Logit2,
        },
        2,
    );
}

#[test]
fn kda_dense_kv_matches_reference() {
    check_problem(
        Config {
            op: Op::Kda,
            h: 2,
            hv: 4,
            k: 20,
            v: 16,
            layout: StateLayout::Kv,
            pool: false,
            checkpoint_every: Some(333),
            l2norm: false,
            beta: BetaMode::Prob,
        },
        3,
    );
}

#[test]
fn kda_pool_vk_matches_reference() {
    check_problem(
        Config {
            op: Op::Kda,
            h: 1,
            hv: 2,
            k: 16,
            v: 24,
            layout: StateLayout::Vk,
            pool: true,
            checkpoint_every: Some(7),
            l2norm: true,
            beta: BetaMode::Logit,
        },
        4,
    );
}

#[test]
fn f32_segmented_matches_f64_reference() {
    for op in Op::ALL {
        let c = Config {
            op,
            h: 1,
            hv: 2,
            k: 16,
            v: 16,
            layout: StateLayout::Kv,
            pool: true,
            checkpoint_every: Some(64),
            l2norm: true,
            beta: BetaMode::Prob,
        };
        let (p, inputs) = build(c, &[1500, 3, 0, 640], 5);
        let want = CpuBackend::new()
            .run(Kernel::Reference, &p, &inputs)
            .expect("reference");
        for seg in [7, 64] {
            let got = segmented::<f32>(&p, &inputs, seg).expect("segmented");
            let e = worst(&got, &want);
            println!("{} f32 segment_len {seg}: max rel L2 {e:.3e}", p.id());
            assert!(
                e <= 1e-4,
                "{} f32 segment_len {seg}: rel L2 {e:.3e}",
                p.id()
            );
        }
    }
}

/// A small problem (one q/k head, two value heads, dense initial states) for the per-pair tests.
fn pair_case(op: Op, lens: &[usize], seed: u64) -> (Problem, Inputs) {
    let c = Config {
        op,
        h: 1,
        hv: 2,
        k: 16,
        v: 16,
        layout: StateLayout::Kv,
        pool: false,
        checkpoint_every: Some(10),
        l2norm: false,
        beta: BetaMode::Logit2,
    };
    build(c, lens, seed)
}

fn states(p: &Problem, inputs: &Inputs, n: usize, hv: usize) -> Vec<f64> {
    let val = deltarule_core::validate_inputs(p, inputs).expect("valid");
    initial_state::<f64>(p, inputs, &val, n, hv)
}

/// Per pair in f64, before any rounding to the output dtype: the segmented pair equals the token
/// recurrence, including the checkpoints whose phase counts from the sequence start.
#[test]
fn segmented_pair_matches_recurrence() {
    for op in Op::ALL {
        let (p, inputs) = pair_case(op, &[1237], 6);
        let prep = Prepared::<f64>::new(&p, &inputs);
        let s0 = states(&p, &inputs, 0, 1);
        let pair = Pair {
            p: &p,
            prep: &prep,
            start: 0,
            end: 1237,
            hv: 1,
        };
        let want = recurrence(&pair, s0.clone());
        let mut worst_e = 0.0f64;
        for seg in [1, 3, 7, 10, 64, 1000, 1237, 5000] {
            let got = segmented_pair(&pair, s0.clone(), seg).expect("segmented pair");
            assert_eq!(got.checkpoints.len(), want.checkpoints.len());
            let mut e = rel_l2(&got.o, &want.o).max(rel_l2(&got.state, &want.state));
            for (a, b) in got.checkpoints.iter().zip(&want.checkpoints) {
                e = e.max(rel_l2(a, b));
            }
            worst_e = worst_e.max(e);
            assert!(e <= 1e-10, "{op:?} segment_len {seg}: rel L2 {e:.3e}");
        }
        println!("{op:?} segmented pair: max rel L2 {worst_e:.3e}");
        let none = Pair {
            p: &p,
            prep: &prep,
            start: 5,
            end: 5,
            hv: 0,
        };
        let out = segmented_pair(&none, s0.clone(), 4).expect("empty pair");
        assert!(out.o.is_empty() && out.checkpoints.is_empty());
        assert_eq!(out.state, s0, "no tokens: the initial state");
    }
}

/// `apply(summarize(r), s)` is the recurrence's final state from `s`, and `L` is exactly the
/// recurrence's final state from zeros (the same operations in the same order).
#[test]
fn summary_is_the_recurrence() {
    let mut rng = Rng(7);
    for op in Op::ALL {
        let (p, inputs) = pair_case(op, &[900], 8);
        let prep = Prepared::<f64>::new(&p, &inputs);
        let mut worst_e = 0.0f64;
        for _ in 0..12 {
            let a = rng.below(900);
            let b = a + rng.below(900 - a + 1);
            let pair = Pair {
                p: &p,
                prep: &prep,
                start: a,
                end: b,
                hv: rng.below(2),
            };
            let summary = summarize(&pair);
            let zero = recurrence(&pair, vec![0.0; p.k * p.v]);
            assert_eq!(summary.l(), &zero.state[..], "L is the state from zeros");
            let s: Vec<f64> = (0..p.k * p.v).map(|_| rng.normal()).collect();
            let want = recurrence(&pair, s.clone()).state;
            let got = apply(&summary, &s).expect("apply");
            let e = rel_l2(&got, &want);
            worst_e = worst_e.max(e);
            assert!(e <= 1e-12, "{op:?} [{a}, {b}): rel L2 {e:.3e}");
        }
        println!("{op:?} summary vs recurrence: max rel L2 {worst_e:.3e}");
    }
}

/// A -inf log decay on every channel forgets the incoming state exactly: `M = 0` for any range
/// containing it.
#[test]
fn reset_makes_the_transition_zero() {
    for op in Op::ALL {
        let (p, inputs) = pair_case(op, &[300], 9);
        let prep = Prepared::<f64>::new(&p, &inputs);
        let gk = match op {
            Op::Gdn => 1,
            Op::Kda => p.k,
        };
        // position 7 of the sequence carries a reset on every channel (AT_EDGES); the tokens
        // before position 6 (a decay of -1e4, also 0 in f64) leave a nonzero transition
        assert!(prep.gamma[7 * p.hv * gk..8 * p.hv * gk]
            .iter()
            .all(|&g| g == f64::NEG_INFINITY));
        for (start, end) in [(7, 8), (0, 8), (7, 50), (2, 300)] {
            let pair = Pair {
                p: &p,
                prep: &prep,
                start,
                end,
                hv: 0,
            };
            let summary = summarize(&pair);
            assert!(
                summary.m().iter().all(|&x| x == 0.0),
                "{op:?} [{start}, {end})"
            );
        }
        let before = summarize(&Pair {
            p: &p,
            prep: &prep,
            start: 0,
            end: 6,
            hv: 0,
        });
        assert!(before.m().iter().any(|&x| x != 0.0));
    }
}

/// Composition is associative, has the empty summary as identity, and composing the summaries of
/// adjacent ranges gives the summary of their union.
#[test]
fn compose_is_the_summary_of_the_union() {
    let mut rng = Rng(10);
    for op in Op::ALL {
        let (p, inputs) = pair_case(op, &[700], 11);
        let prep = Prepared::<f64>::new(&p, &inputs);
        let sum = |a: usize, b: usize| {
            summarize(&Pair {
                p: &p,
                prep: &prep,
                start: a,
                end: b,
                hv: 1,
            })
        };
        let flat = |s: &Summary<f64>| [s.m(), s.l()].concat();
        let mut worst_e = 0.0f64;
        for _ in 0..8 {
            let mut cuts = [rng.below(701), rng.below(701), rng.below(701), 700, 0];
            cuts.sort();
            let [_, x, y, z, _] = cuts;
            let (a, b, c) = (sum(0, x), sum(x, y), sum(y, z));
            let left = compose(&compose(&a, &b).expect("ab"), &c).expect("(ab)c");
            let right = compose(&a, &compose(&b, &c).expect("bc")).expect("a(bc)");
            let whole = sum(0, z);
            let e = rel_l2(&flat(&left), &flat(&whole))
                .max(rel_l2(&flat(&right), &flat(&whole)))
                .max(rel_l2(&flat(&left), &flat(&right)));
            worst_e = worst_e.max(e);
            assert!(e <= 1e-12, "{op:?} cuts {x} {y} {z}: rel L2 {e:.3e}");
            let id = Summary::<f64>::identity(p.k, p.v);
            assert_eq!(compose(&id, &b).expect("ib"), b);
            assert_eq!(compose(&b, &id).expect("bi"), b);
        }
        println!("{op:?} compose vs union: max rel L2 {worst_e:.3e}");
    }
    // associativity of general affine maps (not contractions)
    let (k, v) = (5, 3);
    let mut random = || {
        Summary::<f64>::new(
            k,
            v,
            (0..k * k).map(|_| rng.normal()).collect(),
            (0..k * v).map(|_| rng.normal()).collect(),
        )
        .expect("summary")
    };
    let (a, b, c) = (random(), random(), random());
    let left = compose(&compose(&a, &b).expect("ab"), &c).expect("(ab)c");
    let right = compose(&a, &compose(&b, &c).expect("bc")).expect("a(bc)");
    let s: Vec<f64> = (0..k * v).map(|i| i as f64 - 4.0).collect();
    let via = apply(&c, &apply(&b, &apply(&a, &s).expect("a")).expect("b")).expect("c");
    assert!(rel_l2(left.m(), right.m()) <= 1e-14 && rel_l2(left.l(), right.l()) <= 1e-14);
    assert!(rel_l2(&apply(&left, &s).expect("abc"), &via) <= 1e-14);
}

#[test]
fn invalid_and_extreme_arguments() {
    let (p, inputs) = pair_case(Op::Gdn, &[20, 3], 12);
    let is_invalid = |r: Result<(), Error>| matches!(r, Err(Error::InvalidArgument { .. }));
    assert!(is_invalid(segmented::<f64>(&p, &inputs, 0).map(|_| ())));
    // one segment per sequence, however large the segment length
    let want = CpuBackend::new()
        .run(Kernel::Reference, &p, &inputs)
        .expect("reference");
    let mut huge = p.clone();
    huge.checkpoint_every = Some(usize::MAX);
    let got = segmented::<f64>(&p, &inputs, usize::MAX).expect("one segment");
    assert!(worst(&got, &want) <= 1e-6);
    let got = segmented::<f64>(&huge, &inputs, 3).expect("no checkpoint reached");
    assert_eq!(got.checkpoints.map(|c| c.shape[0]), Some(0));
    let mut wrong = p.clone();
    wrong.tokens += 1;
    assert!(is_invalid(segmented::<f64>(&wrong, &inputs, 8).map(|_| ())));
    let a = Summary::<f64>::identity(16, 16);
    let b = Summary::<f64>::identity(16, 8);
    assert!(is_invalid(compose(&a, &b).map(|_| ())));
    assert!(is_invalid(apply(&a, &[0.0; 10]).map(|_| ())));
    assert!(is_invalid(
        Summary::<f64>::new(2, 2, vec![0.0; 3], vec![0.0; 4]).map(|_| ())
    ));
    let prep = Prepared::<f64>::new(&p, &inputs);
    let pair = Pair {
        p: &p,
        prep: &prep,
        start: 0,
        end: 20,
        hv: 0,
    };
    assert!(is_invalid(
        segmented_pair(&pair, vec![0.0; 3], 4).map(|_| ())
    ));
    assert!(is_invalid(
        segmented_pair(&pair, vec![0.0; p.k * p.v], 0).map(|_| ())
    ));
}

/// The backend's `segmented` kernel is the f64 segmented path at the options' segment length (one
/// chunk by default), bit for bit, and each op has its explicit-only prefill row.
#[test]
fn the_segmented_kernel_is_the_f64_path() {
    let c = Config {
        op: Op::Kda,
        h: 1,
        hv: 2,
        k: 16,
        v: 24,
        layout: StateLayout::Vk,
        pool: true,
        checkpoint_every: Some(50),
        l2norm: true,
        beta: BetaMode::Logit,
    };
    let (p, inputs) = build(c, &[300, 5, 0, 130], 13);
    let backend = CpuBackend::with_options(Options::default());
    assert!(backend.kernels().contains(&Kernel::Segmented));
    let got = backend
        .run(Kernel::Segmented, &p, &inputs)
        .expect("segmented kernel");
    let direct = segmented::<f64>(&p, &inputs, DEFAULT_SEGMENT_LEN).expect("segmented");
    assert_eq!(got, direct);
    let want = backend
        .run(Kernel::Reference, &p, &inputs)
        .expect("reference");
    assert!(worst(&got, &want) <= 1e-6);
    let longer = CpuBackend::with_options(Options { segment_len: 256 })
        .run(Kernel::Segmented, &p, &inputs)
        .expect("segments of 256");
    assert_eq!(
        longer,
        segmented::<f64>(&p, &inputs, 256).expect("segmented")
    );
    let zero =
        CpuBackend::with_options(Options { segment_len: 0 }).run(Kernel::Segmented, &p, &inputs);
    assert!(
        matches!(zero, Err(Error::InvalidArgument { .. })),
        "{zero:?}"
    );
    for op in Op::ALL {
        let rows: Vec<_> = RULES
            .iter()
            .filter(|r| r.op == op && r.kernel == Kernel::Segmented)
            .collect();
        assert_eq!(rows.len(), 1, "{op:?}");
        let r = rows[0];
        assert_eq!(
            (r.backend, r.mode, r.auto_when, r.precision),
            (
                BackendKind::Cpu,
                Mode::Prefill,
                AutoWhen::Never,
                Precision::Reference
            )
        );
        let default = format!("default {DEFAULT_SEGMENT_LEN})");
        assert!(
            r.note.contains(SEGMENT_LEN_VAR) && r.note.contains(&default),
            "{}: {}",
            r.id,
            r.note
        );
    }
}

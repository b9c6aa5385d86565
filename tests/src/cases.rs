//! The case table of the conformance suite: named, shape-encoding problems covering every option
//! of docs/spec.md, the chunk edges, odd head dims, zero-length sequences and adversarial gates, plus
//! the checks every backend must pass (written once, instantiated per backend).

use crate::casefile::Case;
use crate::generate::{generate, DataStyle, GateStyle};
use deltarule_core::problem::{BetaMode, FinalState, Gate, InitialState, Mode, Op, StateLayout};
use deltarule_core::{DType, Error, HostTensor, Outputs, Problem, Result};
use deltarule_engine::Engine;

/// One named case of the table.
#[derive(Clone, Debug)]
pub struct CaseSpec {
    pub name: String,
    pub problem: Problem,
    pub seqlens: Vec<usize>,
    pub seed: u64,
    pub style: DataStyle,
}

impl CaseSpec {
    pub fn build(&self) -> Result<Case> {
        let mut c = generate(&self.problem, &self.seqlens, self.seed, self.style)?;
        c.name = self.name.clone();
        Ok(c)
    }
}

fn base(op: Op, h: usize, hv: usize, k: usize, v: usize) -> Problem {
    Problem::new(op, Mode::Prefill, 1, 1, h, hv, k, v)
}

/// The conformance cases.
pub fn conformance_cases() -> Vec<CaseSpec> {
    let mut out = Vec::new();
    let mut add = |name: String, p: Problem, seqlens: Vec<usize>, style: DataStyle| {
        let seed = 1000 + out.len() as u64;
        out.push(CaseSpec {
            name,
            problem: p,
            seqlens,
            seed,
            style,
        });
    };
    let real = DataStyle::default();
    for op in Op::ALL {
        let o = op.name();
        // a ones-only case first: its errors are easy to read
        add(
            format!("{o}/ones-N1-T8-H1-HV1-K16-V16"),
            base(op, 1, 1, 16, 16),
            vec![8],
            DataStyle { ones: true, ..real },
        );
        // chunk edges
        for t in [1usize, 63, 64, 65, 128] {
            add(
                format!("{o}/len{t}-H2-HV2-K64-V64"),
                base(op, 2, 2, 64, 64),
                vec![t],
                real,
            );
        }
        // zero-length sequences, varlen, GVA
        add(
            format!("{o}/varlen-zero-len-H1-HV2-K32-V32"),
            base(op, 1, 2, 32, 32),
            vec![0, 70, 0, 5, 129],
            real,
        );
        // odd and large head dims
        for (k, v) in [
            (16, 16),
            (60, 100),
            (100, 60),
            (128, 128),
            (256, 16),
            (16, 256),
        ] {
            add(
                format!("{o}/dims-K{k}-V{v}"),
                base(op, 1, 2, k, v),
                vec![40, 90],
                real,
            );
        }
        // grouped value heads, 4 per q/k head
        add(
            format!("{o}/gva-H2-HV8-K64-V64"),
            base(op, 2, 8, 64, 64),
            vec![77, 3],
            real,
        );
        // degenerate gates and beta
        for (name, style) in [
            (
                "no-decay",
                DataStyle {
                    gate: GateStyle::NoDecay,
                    ..real
                },
            ),
            (
                "very-negative-gates",
                DataStyle {
                    gate: GateStyle::VeryNegative,
                    ..real
                },
            ),
            (
                "beta-zero",
                DataStyle {
                    beta_zero: true,
                    ..real
                },
            ),
            (
                "adversarial-gates",
                DataStyle {
                    gate: GateStyle::Adversarial,
                    ..real
                },
            ),
        ] {
            let mut p = base(op, 2, 2, 64, 64);
            p.initial = InitialState::Dense;
            add(format!("{o}/{name}-h0"), p, vec![100, 30], style);
        }
        // near-collinear keys with β = 1 and no decay: I + A near singular at the production head
        // dims, on chunks that are full, partial and single
        let mut p = base(op, 1, 2, 128, 128);
        p.initial = InitialState::Dense;
        add(
            format!("{o}/collinear-keys-h0-K128-V128"),
            p,
            vec![300, 65, 1],
            DataStyle {
                gate: GateStyle::NoDecay,
                collinear: true,
                ..real
            },
        );
        // in-kernel gates, betas and l2norm
        let mut p = base(op, 2, 4, 64, 64);
        p.gate = Gate::Softplus;
        p.a_log = true;
        p.beta = BetaMode::Logit;
        p.l2norm = true;
        add(
            format!("{o}/softplus-logit-l2norm"),
            p.clone(),
            vec![66, 61],
            real,
        );
        p.beta = BetaMode::Logit2;
        add(format!("{o}/softplus-logit2"), p.clone(), vec![130], real);
        let mut adv = p.clone();
        adv.beta = BetaMode::Logit;
        add(
            format!("{o}/softplus-adversarial"),
            adv,
            vec![96],
            DataStyle {
                gate: GateStyle::Adversarial,
                ..real
            },
        );
        if op == Op::Kda {
            for a_log in [true, false] {
                let mut p = base(op, 2, 2, 64, 64);
                p.gate = Gate::LowerBound(-5.0);
                p.a_log = a_log;
                p.beta = BetaMode::Logit;
                p.l2norm = true;
                add(
                    format!("{o}/lower-bound-a_log-{a_log}"),
                    p,
                    vec![70, 58],
                    DataStyle {
                        gate: if a_log {
                            GateStyle::Realistic
                        } else {
                            GateStyle::Adversarial
                        },
                        ..real
                    },
                );
            }
        }
        // state contract: dense initial states in each dtype and layout
        for (layout, sdt) in [
            (StateLayout::Kv, DType::F32),
            (StateLayout::Vk, DType::F32),
            (StateLayout::Kv, DType::BF16),
            (StateLayout::Vk, DType::F16),
        ] {
            let mut p = base(op, 1, 2, 64, 32);
            p.layout = layout;
            p.initial = InitialState::Dense;
            p.state_in_dtype = sdt;
            p.state_out_dtype = sdt;
            add(
                format!("{o}/state-{}-{}", layout.name(), sdt),
                p,
                vec![90, 1, 40],
                real,
            );
        }
        // pools in place, i32 offsets and indices
        for (sdt, layout) in [
            (DType::F32, StateLayout::Vk),
            (DType::BF16, StateLayout::Kv),
        ] {
            let mut p = base(op, 2, 4, 64, 64);
            p.initial = InitialState::Pool { rows: 7 };
            p.final_state = FinalState::InPlace;
            p.state_in_dtype = sdt;
            p.state_out_dtype = sdt;
            p.layout = layout;
            p.offsets_dtype = DType::I32;
            p.index_dtype = DType::I32;
            add(
                format!("{o}/pool-{sdt}-{}-i32", layout.name()),
                p,
                vec![50, 0, 70, 9, 64],
                real,
            );
        }
        // checkpoints
        for every in [64usize, 128, 50] {
            let mut p = base(op, 1, 2, 64, 64);
            p.initial = InitialState::Dense;
            p.checkpoint_every = Some(every);
            add(
                format!("{o}/checkpoints-every{every}"),
                p,
                vec![200, 63, 130],
                real,
            );
        }
        // f16 and f32 inputs, bf16 gates
        for dt in [DType::F16, DType::F32] {
            let mut p = base(op, 2, 2, 64, 64);
            p.qkv_dtype = dt;
            p.g_dtype = DType::BF16;
            p.beta_dtype = DType::BF16;
            add(format!("{o}/inputs-{dt}-gates-bf16"), p, vec![100], real);
        }
        // decode: plain (T = 1) and speculative verify (T = 3) on a pool
        for t in [1usize, 3] {
            let mut p = base(op, 2, 4, 64, 64);
            p.mode = Mode::Decode;
            p.initial = InitialState::Pool { rows: 9 };
            p.final_state = FinalState::InPlace;
            p.gate = Gate::Softplus;
            p.a_log = true;
            p.beta = BetaMode::Logit;
            p.l2norm = true;
            add(format!("{o}/decode-T{t}-pool"), p, vec![t; 6], real);
        }
    }
    out
}

/// The extreme-gate family ([`GateStyle::Extreme`]): every legal gate form at its extremes, on
/// varlen batches with initial states, so that resets fall on chunk starts, ends and middles.
pub fn gate_cases() -> Vec<CaseSpec> {
    let mut out = Vec::new();
    let mut add = |name: String, p: Problem, seqlens: Vec<usize>| {
        let seed = 5000 + out.len() as u64;
        out.push(CaseSpec {
            name,
            problem: p,
            seqlens,
            seed,
            style: DataStyle {
                gate: GateStyle::Extreme,
                ..DataStyle::default()
            },
        });
    };
    for op in Op::ALL {
        let o = op.name();
        let mut p = base(op, 1, 2, 64, 64);
        p.initial = InitialState::Dense;
        add(
            format!("{o}/gates-extreme-log"),
            p.clone(),
            vec![193, 64, 1, 70],
        );
        p.checkpoint_every = Some(64);
        add(
            format!("{o}/gates-extreme-log-checkpoints"),
            p,
            vec![130, 65],
        );
        let mut p = base(op, 1, 2, 64, 64);
        p.initial = InitialState::Dense;
        p.gate = Gate::Softplus;
        p.a_log = true;
        p.beta = BetaMode::Logit;
        p.l2norm = true;
        add(format!("{o}/gates-extreme-softplus"), p, vec![130, 66]);
        if op == Op::Kda {
            for (lb, a_log, len) in [(-5.0, true, 130), (-1e4, false, 66)] {
                let mut p = base(op, 1, 2, 64, 64);
                p.initial = InitialState::Dense;
                p.gate = Gate::LowerBound(lb);
                p.a_log = a_log;
                p.beta = BetaMode::Logit;
                p.l2norm = true;
                add(format!("{o}/gates-extreme-lower-bound{lb}"), p, vec![len]);
            }
        }
    }
    out
}

/// What a backend must satisfy on one case.
#[derive(Clone, Debug)]
pub struct CaseCheck {
    pub name: String,
    /// (tensor, relative L2 error against the float64 reference).
    pub errors: Vec<(String, f64)>,
}

/// Runs `case` on `backend` (a diff-style name) and checks it against `reference`:
/// every tensor within the row's tolerance, no unwritten (NaN) element, a rerun bit-identical,
/// and pool rows not named by the indices bit-identical to the input pool.
pub fn check_case(
    engine: &Engine,
    backend: &str,
    case: &Case,
    reference: &Outputs,
) -> Result<CaseCheck> {
    let (p, rule, be) = crate::diff::chosen_backend(engine, case, backend)?;
    let out = be.run(rule.kernel, &p, &case.inputs)?;
    let tol = rule.precision.bound();
    let mut errors = Vec::new();
    let mut fail = Vec::new();
    let pairs: [(&str, Option<&HostTensor>, Option<&HostTensor>); 3] = [
        ("o", Some(&out.o), Some(&reference.o)),
        (
            "final_state",
            out.final_state.as_ref(),
            reference.final_state.as_ref(),
        ),
        (
            "checkpoints",
            out.checkpoints.as_ref(),
            reference.checkpoints.as_ref(),
        ),
    ];
    for (name, got, want) in pairs {
        match (got, want) {
            (Some(g), Some(w)) => {
                let m = deltarule_core::compare(&g.to_f64_vec(), &w.to_f64_vec());
                if !m.passes(tol) {
                    fail.push(format!(
                        "{name}: rel_l2 {:.3e} > {tol:.0e}, {} non-finite, worst flat index {} \
                         (got {}, want {})",
                        m.rel_l2, m.nonfinite, m.worst, m.worst_got, m.worst_want
                    ));
                }
                errors.push((name.to_string(), m.rel_l2));
            }
            (None, None) => {}
            (g, w) => fail.push(format!(
                "{name}: produced {} but the reference has {}",
                g.is_some(),
                w.is_some()
            )),
        }
    }
    // pool rows not named stay bit-identical
    if let (Some(pool_in), Some(pool_out), Some(idx)) = (
        case.inputs.initial_state.as_ref(),
        out.final_state.as_ref(),
        case.inputs.state_indices.as_ref(),
    ) {
        if p.final_state == FinalState::InPlace {
            let named: Vec<i64> = idx.to_i64_vec("state_indices")?;
            let rows = pool_in.shape[0];
            let row_len = pool_in.len() / rows.max(1);
            let a = pool_in.to_le_bytes();
            let b = pool_out.to_le_bytes();
            let bytes = row_len * pool_in.dtype().size();
            for r in 0..rows {
                if !named.contains(&(r as i64))
                    && a[r * bytes..(r + 1) * bytes] != b[r * bytes..(r + 1) * bytes]
                {
                    fail.push(format!(
                        "pool row {r} is not named by state_indices but changed"
                    ));
                }
            }
        }
    }
    // determinism
    let again = be.run(rule.kernel, &p, &case.inputs)?;
    if !again.o.bit_identical(&out.o)
        || again.final_state.as_ref().map(|t| t.to_le_bytes())
            != out.final_state.as_ref().map(|t| t.to_le_bytes())
        || again.checkpoints.as_ref().map(|t| t.to_le_bytes())
            != out.checkpoints.as_ref().map(|t| t.to_le_bytes())
    {
        fail.push("a rerun is not bit-identical".to_string());
    }
    if fail.is_empty() {
        Ok(CaseCheck {
            name: case.name.clone(),
            errors,
        })
    } else {
        Err(Error::invalid(
            format!("{} on {backend} ({})", case.name, rule.id),
            "every check to hold",
            fail.join("; "),
        ))
    }
}

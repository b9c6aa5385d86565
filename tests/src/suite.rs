//! The conformance suite, written once and instantiated per backend by
//! `tests/tests/conformance.rs`: golden files, the generated case table, state-contract
//! properties and bad inputs. Each function returns the counts it ran and skipped.

use crate::casefile::{read_case, Case};
use crate::cases::{check_case, conformance_cases, gate_cases, CaseSpec};
use crate::diff::{backend_kind, chosen_backend, diff_case, reference_outputs};
use crate::generate::{generate, DataStyle};
use deltarule_core::problem::{FinalState, InitialState, Mode, Op, StateLayout};
use deltarule_core::{
    compare, BackendKind, DType, Error, HostTensor, Inputs, Outputs, Problem, Result,
};
use deltarule_engine::{Engine, EngineOptions};
use std::sync::OnceLock;

/// One engine per test binary, with every backend probed.
pub fn engine() -> &'static Engine {
    static E: OnceLock<Engine> = OnceLock::new();
    E.get_or_init(|| Engine::new(&EngineOptions::default()))
}

/// Counts of a suite part.
#[derive(Debug, Default, Clone)]
pub struct Tally {
    pub ran: usize,
    pub skipped: Vec<String>,
    pub failures: Vec<String>,
}

impl Tally {
    /// Prints the counts and panics with every failure.
    pub fn finish(self, what: &str, backend: &str) {
        println!(
            "{what} on {backend}: {} ran, {} skipped, {} failed",
            self.ran,
            self.skipped.len(),
            self.failures.len()
        );
        for s in &self.skipped {
            println!("  skip: {s}");
        }
        if !self.failures.is_empty() {
            panic!(
                "{what} on {backend}: {} failures:\n{}",
                self.failures.len(),
                self.failures.join("\n")
            );
        }
    }
}

/// Whether the backend behind `name` is present. When it is not, returns the reason; callers skip
/// (or fail when `require_env` is set to 1).
pub fn availability(name: &str, require_env: Option<&str>) -> std::result::Result<(), String> {
    let kind = backend_kind(name).unwrap_or(BackendKind::Cpu);
    if engine().backend(kind).is_some() {
        return Ok(());
    }
    let reason = engine()
        .devices()
        .iter()
        .find_map(|d| match d {
            deltarule_core::DeviceState::Unavailable { backend, reason } if *backend == kind => {
                Some(reason.clone())
            }
            _ => None,
        })
        .unwrap_or_else(|| "not probed".into());
    if let Some(env) = require_env {
        if std::env::var(env).ok().as_deref() == Some("1") {
            panic!("{env}=1 but the {kind} backend is unavailable: {reason}");
        }
    }
    Err(reason)
}

fn is_no_rule(e: &Error) -> bool {
    matches!(e, Error::NoEligibleRule { .. })
}

/// Every golden file passes against its expected tensors and the float64 reference.
pub fn golden(name: &str) -> Tally {
    let mut t = Tally::default();
    let files = crate::golden_files();
    if files.is_empty() {
        t.failures.push(format!(
            "no golden files found in {}",
            crate::golden_dir().display()
        ));
    }
    for f in files {
        let case = match read_case(&f) {
            Ok(c) => c,
            Err(e) => {
                t.failures.push(format!("{}: {e}", f.display()));
                continue;
            }
        };
        let reference = match reference_outputs(&case) {
            Ok(r) => r,
            Err(e) => {
                t.failures.push(format!("{}: reference: {e}", case.name));
                continue;
            }
        };
        match diff_case(engine(), &case, name, &reference) {
            Ok(rows) => {
                t.ran += 1;
                for r in rows {
                    println!(
                        "  {} {} vs {}: rel_l2 {:.3e} (f64 {:?})",
                        r.case, r.tensor, r.reference, r.metrics.rel_l2, r.rel_l2_f64
                    );
                    if !r.pass {
                        t.failures.push(format!(
                            "{} {}: rel_l2 {:.3e} > {:.0e} at {}",
                            r.case,
                            r.tensor,
                            r.metrics.rel_l2,
                            r.tolerance,
                            r.worst.describe()
                        ));
                    }
                }
            }
            Err(e) if is_no_rule(&e) => t.skipped.push(format!("{}: {e}", case.name)),
            Err(e) => t.failures.push(format!("{}: {e}", case.name)),
        }
    }
    t
}

/// Every case of the generated table.
pub fn generated(name: &str, filter: impl Fn(&str) -> bool) -> Tally {
    run_cases(name, conformance_cases(), filter)
}

/// The extreme-gate family: -inf resets and decays down to -1e30 at chunk starts, ends and
/// middles, softplus and lower-bound gates saturated, kda channels resetting while others do not.
pub fn gates(name: &str) -> Tally {
    run_cases(name, gate_cases(), |_| true)
}

fn run_cases(name: &str, specs: Vec<CaseSpec>, filter: impl Fn(&str) -> bool) -> Tally {
    let mut t = Tally::default();
    for spec in specs {
        if !filter(&spec.name) {
            continue;
        }
        let run = || -> Result<()> {
            let case = spec.build()?;
            let reference = reference_outputs(&case)?;
            let check = check_case(engine(), name, &case, &reference)?;
            let errs: Vec<String> = check
                .errors
                .iter()
                .map(|(n, e)| format!("{n} {e:.2e}"))
                .collect();
            println!("  {}: {}", spec.name, errs.join(", "));
            Ok(())
        };
        match run() {
            Ok(()) => t.ran += 1,
            Err(e) if is_no_rule(&e) => t.skipped.push(format!(
                "{}: {}",
                spec.name,
                e.to_string().replace('\n', " ")
            )),
            Err(e) => t.failures.push(format!("{}: {e}", spec.name)),
        }
    }
    t
}

/// Runs a problem on a backend name (f32 output where the row allows it).
pub fn run_on(name: &str, case: &Case) -> Result<(Outputs, f64)> {
    let (p, rule, be) = chosen_backend(engine(), case, name)?;
    Ok((
        be.run(rule.kernel, &p, &case.inputs)?,
        rule.precision.bound(),
    ))
}

fn close(
    what: &str,
    got: &HostTensor,
    want: &HostTensor,
    tol: f64,
) -> std::result::Result<f64, String> {
    let m = compare(&got.to_f64_vec(), &want.to_f64_vec());
    if m.passes(tol) {
        Ok(m.rel_l2)
    } else {
        Err(format!(
            "{what}: rel_l2 {:.3e} > {tol:.0e} ({} non-finite, worst index {})",
            m.rel_l2, m.nonfinite, m.worst
        ))
    }
}

fn rows(t: &HostTensor, from: usize, to: usize) -> HostTensor {
    let per = t.numel() / t.shape[0].max(1);
    let v = t.to_f64_vec();
    let mut shape = t.shape.clone();
    shape[0] = to - from;
    HostTensor::from_f64(t.dtype(), shape, &v[from * per..to * per])
}

fn concat_rows(a: &HostTensor, b: &HostTensor) -> HostTensor {
    let mut v = a.to_f64_vec();
    v.extend(b.to_f64_vec());
    let mut shape = a.shape.clone();
    shape[0] += b.shape[0];
    HostTensor::from_f64(a.dtype(), shape, &v)
}

/// Splits a single-sequence case at token `at` into two cases (the second without its initial
/// state, to be filled by the caller).
fn split_case(case: &Case, at: usize) -> (Case, Case) {
    let t = case.problem.tokens;
    let mk = |from: usize, to: usize| -> Case {
        let mut c = case.clone();
        let i = &case.inputs;
        c.inputs = Inputs {
            q: rows(&i.q, from, to),
            k: rows(&i.k, from, to),
            v: rows(&i.v, from, to),
            g: rows(&i.g, from, to),
            beta: rows(&i.beta, from, to),
            cu_seqlens: HostTensor::from_i64(
                i.cu_seqlens.dtype(),
                vec![2],
                &[0, (to - from) as i64],
            ),
            ..i.clone()
        };
        c.problem.tokens = to - from;
        c
    };
    (mk(0, at), mk(at, t))
}

/// State-contract properties on one backend, each over several seeds:
/// prefill(T1) then prefill(T2) carrying the state == prefill(T1 + T2); decode of T tokens ==
/// prefill of the same tokens; `kv` and `vk` give the same numbers; checkpoints equal the final
/// states of prefix runs; GVA equals the problem with repeated q/k heads.
pub fn properties(name: &str, seeds: u64) -> Tally {
    let mut t = Tally::default();
    for op in Op::ALL {
        for seed in 0..seeds {
            for (what, res) in [
                ("state carry", state_carry(name, op, seed)),
                ("decode == prefill", decode_equals_prefill(name, op, seed)),
                ("kv == vk", layouts_agree(name, op, seed)),
                (
                    "checkpoints == prefix runs",
                    checkpoints_are_prefixes(name, op, seed),
                ),
                ("gva == repeated heads", gva_equals_repeat(name, op, seed)),
            ] {
                let label = format!("{} {what} seed {seed}", op.name());
                match res {
                    Ok(()) => t.ran += 1,
                    Err(PropErr::Skip(s)) => t.skipped.push(format!("{label}: {s}")),
                    Err(PropErr::Fail(s)) => t.failures.push(format!("{label}: {s}")),
                }
            }
        }
    }
    t
}

enum PropErr {
    Skip(String),
    Fail(String),
}

impl From<Error> for PropErr {
    fn from(e: Error) -> Self {
        if is_no_rule(&e) {
            PropErr::Skip(e.to_string().replace('\n', " "))
        } else {
            PropErr::Fail(e.to_string())
        }
    }
}

impl From<String> for PropErr {
    fn from(s: String) -> Self {
        PropErr::Fail(s)
    }
}

fn prop_problem(op: Op, seed: u64) -> Problem {
    let dims = [(64, 64), (32, 48), (128, 64)];
    let (k, v) = dims[(seed as usize) % dims.len()];
    let mut p = Problem::new(op, Mode::Prefill, 1, 1, 1, 2, k, v);
    p.initial = InitialState::Dense;
    p
}

fn state_carry(name: &str, op: Op, seed: u64) -> std::result::Result<(), PropErr> {
    let p = prop_problem(op, seed);
    let total = 150 + (seed as usize * 37) % 100;
    let at = 1 + (seed as usize * 53) % (total - 1);
    let full = generate(&p, &[total], 7000 + seed, DataStyle::default())?;
    let (a, mut b) = split_case(&full, at);
    let (out_full, tol) = run_on(name, &full)?;
    let (out_a, _) = run_on(name, &a)?;
    let fa = out_a
        .final_state
        .ok_or_else(|| "first part produced no final state".to_string())?;
    b.inputs.initial_state = Some(fa.cast(p.state_in_dtype));
    let (out_b, _) = run_on(name, &b)?;
    let o = concat_rows(&out_a.o, &out_b.o);
    let reference = reference_outputs(&full)?;
    close(
        "o of the two halves vs the float64 whole",
        &o,
        &reference.o,
        tol,
    )?;
    close(
        "o of the two halves vs the backend's whole",
        &o,
        &out_full.o,
        tol,
    )?;
    if let (Some(fb), Some(ff)) = (out_b.final_state.as_ref(), reference.final_state.as_ref()) {
        close("final state of the halves", fb, ff, tol)?;
    }
    Ok(())
}

fn decode_equals_prefill(name: &str, op: Op, seed: u64) -> std::result::Result<(), PropErr> {
    let mut p = prop_problem(op, seed);
    p.initial = InitialState::Pool { rows: 5 };
    p.final_state = FinalState::InPlace;
    let lens = vec![1 + (seed as usize % 3); 4];
    let prefill = generate(&p, &lens, 8000 + seed, DataStyle::default())?;
    let mut decode = prefill.clone();
    decode.problem.mode = Mode::Decode;
    let (op_, tol) = run_on(name, &prefill)?;
    let (od, tol_d) = run_on(name, &decode)?;
    let tol = tol.max(tol_d);
    let reference = reference_outputs(&prefill)?;
    close("decode o vs prefill o", &od.o, &op_.o, tol)?;
    close("decode o vs float64", &od.o, &reference.o, tol)?;
    if let (Some(a), Some(b)) = (od.final_state.as_ref(), reference.final_state.as_ref()) {
        close("decode pool vs float64 pool", a, b, tol)?;
    }
    Ok(())
}

fn transpose_states(t: &HostTensor, k: usize, v: usize) -> HostTensor {
    // [.., K, V] <-> [.., V, K] given the source inner dims (k, v)
    let src = t.to_f64_vec();
    let mut dst = vec![0.0; src.len()];
    for base in (0..src.len()).step_by(k * v) {
        for a in 0..k {
            for b in 0..v {
                dst[base + b * k + a] = src[base + a * v + b];
            }
        }
    }
    let mut shape = t.shape.clone();
    let n = shape.len();
    shape.swap(n - 1, n - 2);
    HostTensor::from_f64(t.dtype(), shape, &dst)
}

fn layouts_agree(name: &str, op: Op, seed: u64) -> std::result::Result<(), PropErr> {
    let p = prop_problem(op, seed);
    let kv = generate(&p, &[70, 30], 9000 + seed, DataStyle::default())?;
    let mut vk = kv.clone();
    vk.problem.layout = StateLayout::Vk;
    if let Some(s) = &kv.inputs.initial_state {
        vk.inputs.initial_state = Some(transpose_states(s, p.k, p.v));
    }
    let (a, tol) = run_on(name, &kv)?;
    let (b, _) = run_on(name, &vk)?;
    // the layouts differ only in how states are stored: f32 and f64 paths agree to rounding
    let tol_layout = if tol > 1e-4 { tol } else { 1e-6 };
    close("o kv vs vk", &b.o, &a.o, tol_layout)?;
    if let (Some(fa), Some(fb)) = (a.final_state.as_ref(), b.final_state.as_ref()) {
        close(
            "final state kv vs vk (transposed)",
            &transpose_states(fb, p.v, p.k),
            fa,
            tol,
        )?;
    }
    Ok(())
}

fn checkpoints_are_prefixes(name: &str, op: Op, seed: u64) -> std::result::Result<(), PropErr> {
    let mut p = prop_problem(op, seed);
    let every = [64usize, 32, 100][(seed as usize) % 3];
    p.checkpoint_every = Some(every);
    let len = 2 * every + 17;
    let case = generate(&p, &[len], 9500 + seed, DataStyle::default())?;
    let (out, tol) = run_on(name, &case)?;
    let ck = out
        .checkpoints
        .ok_or_else(|| "no checkpoints produced".to_string())?;
    for j in 0..2 {
        let (prefix, _) = split_case(&case, (j + 1) * every);
        let mut prefix = prefix;
        prefix.problem.checkpoint_every = None;
        let r = reference_outputs(&prefix)?;
        let fs = r
            .final_state
            .ok_or_else(|| "prefix reference has no final state".to_string())?;
        close(
            &format!("checkpoint {j} vs prefix run"),
            &rows(&ck, j, j + 1),
            &fs,
            tol,
        )?;
    }
    Ok(())
}

fn gva_equals_repeat(name: &str, op: Op, seed: u64) -> std::result::Result<(), PropErr> {
    let mut p = prop_problem(op, seed);
    p.h = 2;
    p.hv = 4;
    let gva = generate(&p, &[90], 9900 + seed, DataStyle::default())?;
    let mut rep = gva.clone();
    rep.problem.h = 4;
    let g = p.hv / p.h;
    let repeat = |t: &HostTensor| {
        let (tt, h, k) = (t.shape[0], t.shape[1], t.shape[2]);
        let src = t.to_f64_vec();
        let mut dst = Vec::with_capacity(tt * h * g * k);
        for ti in 0..tt {
            for hi in 0..h * g {
                let base = (ti * h + hi / g) * k;
                dst.extend_from_slice(&src[base..base + k]);
            }
        }
        HostTensor::from_f64(t.dtype(), vec![tt, h * g, k], &dst)
    };
    rep.inputs.q = repeat(&gva.inputs.q);
    rep.inputs.k = repeat(&gva.inputs.k);
    let (a, tol) = run_on(name, &gva)?;
    let (b, _) = run_on(name, &rep)?;
    close("o gva vs repeated heads", &a.o, &b.o, tol)?;
    Ok(())
}

/// Bad inputs: each must be an `InvalidArgument` naming the argument, before any output.
pub fn bad_inputs(name: &str) -> Tally {
    let mut t = Tally::default();
    let mut p = Problem::new(Op::Gdn, Mode::Prefill, 1, 1, 2, 4, 32, 32);
    p.initial = InitialState::Pool { rows: 4 };
    p.final_state = FinalState::InPlace;
    let good = match generate(&p, &[40, 24], 5, DataStyle::default()) {
        Ok(c) => c,
        Err(e) => {
            t.failures.push(format!("generate: {e}"));
            return t;
        }
    };
    type Mutator = Box<dyn Fn(&mut Case)>;
    let cases: Vec<(&str, &str, Mutator)> = vec![
        (
            "mismatched shapes",
            "k",
            Box::new(|c: &mut Case| c.inputs.k = rows(&c.inputs.k, 0, 10)),
        ),
        (
            "HV not a multiple of H",
            "v_heads",
            Box::new(|c: &mut Case| c.problem.hv = 3),
        ),
        (
            "decreasing cu_seqlens",
            "cu_seqlens[2]",
            Box::new(|c: &mut Case| {
                c.inputs.cu_seqlens = HostTensor::from_i64(DType::I64, vec![3], &[0, 50, 40])
            }),
        ),
        (
            "cu_seqlens out of range",
            "cu_seqlens[1]",
            Box::new(|c: &mut Case| {
                c.inputs.cu_seqlens = HostTensor::from_i64(DType::I64, vec![3], &[0, 99, 64])
            }),
        ),
        (
            "cu_seqlens not starting at 0",
            "cu_seqlens[0]",
            Box::new(|c: &mut Case| {
                c.inputs.cu_seqlens = HostTensor::from_i64(DType::I64, vec![3], &[4, 40, 64])
            }),
        ),
        (
            "cu_seqlens not ending at T",
            "cu_seqlens[2]",
            Box::new(|c: &mut Case| {
                c.inputs.cu_seqlens = HostTensor::from_i64(DType::I64, vec![3], &[0, 40, 60])
            }),
        ),
        (
            "state index out of range",
            "state_indices[1]",
            Box::new(|c: &mut Case| {
                c.inputs.state_indices = Some(HostTensor::from_i64(DType::I64, vec![2], &[0, 4]))
            }),
        ),
        (
            "duplicated state index",
            "state_indices[1]",
            Box::new(|c: &mut Case| {
                c.inputs.state_indices = Some(HostTensor::from_i64(DType::I64, vec![2], &[2, 2]))
            }),
        ),
        (
            "NaN input with validation on",
            "v",
            Box::new(|c: &mut Case| {
                c.problem.check_finite = true;
                let mut v = c.inputs.v.to_f64_vec();
                v[17] = f64::NAN;
                c.inputs.v = HostTensor::from_f64(c.inputs.v.dtype(), c.inputs.v.shape.clone(), &v);
            }),
        ),
        (
            "wrong dtype",
            "q",
            Box::new(|c: &mut Case| c.inputs.q = c.inputs.q.cast(DType::F16)),
        ),
    ];
    let mut kda = Problem::new(Op::Kda, Mode::Prefill, 1, 1, 1, 1, 32, 32);
    kda.gate = deltarule_core::Gate::LowerBound(0.5);
    let lb_err = kda.validate().err();
    match lb_err {
        Some(Error::InvalidArgument { field, .. }) if field == "lower_bound" => t.ran += 1,
        other => t.failures.push(format!(
            "lower_bound >= 0: expected an invalid `lower_bound`, got {other:?}"
        )),
    }
    for (what, field, mutate) in cases {
        let mut c = good.clone();
        mutate(&mut c);
        match run_on(name, &c) {
            Err(Error::InvalidArgument { field: f, .. }) if f.contains(field) => t.ran += 1,
            Err(e) if is_no_rule(&e) => t.skipped.push(format!("{what}: {e}")),
            Err(e) => t
                .failures
                .push(format!("{what}: expected invalid `{field}`, got {e}")),
            Ok(_) => t.failures.push(format!("{what}: accepted")),
        }
    }
    t
}

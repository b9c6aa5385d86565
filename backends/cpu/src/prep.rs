//! Inputs converted once to the working precision, with the in-kernel transforms of docs/spec.md
//! (q/k L2 norm, gate, beta) applied in that precision.

use crate::real::{l2norm_in_place, sigmoid, softplus, Real};
use deltarule_core::{BetaMode, Gate, InitialState, Inputs, Op, Problem, Validated};

/// Per-token tensors in precision `R`.
pub struct Prepared<R> {
    /// `[T, H, K]`, L2-normalised when asked.
    pub q: Vec<R>,
    /// `[T, H, K]`, L2-normalised when asked.
    pub k: Vec<R>,
    /// `[T, HV, V]`.
    pub v: Vec<R>,
    /// Log decay: gdn `[T, HV]`, kda `[T, HV, K]`.
    pub gamma: Vec<R>,
    /// `[T, HV]`, after the beta transform.
    pub beta: Vec<R>,
}

fn convert<R: Real>(x: &[f64]) -> Vec<R> {
    x.iter().map(|&a| R::from_f64(a)).collect()
}

impl<R: Real> Prepared<R> {
    pub fn new(p: &Problem, inputs: &Inputs) -> Self {
        let mut q: Vec<R> = convert(&inputs.q.to_f64_vec());
        let mut k: Vec<R> = convert(&inputs.k.to_f64_vec());
        if p.l2norm {
            q.chunks_mut(p.k).for_each(l2norm_in_place);
            k.chunks_mut(p.k).for_each(l2norm_in_place);
        }
        let v = convert(&inputs.v.to_f64_vec());
        let g: Vec<R> = convert(&inputs.g.to_f64_vec());
        let gk = match p.op {
            Op::Gdn => 1,
            Op::Kda => p.k,
        };
        let a_log: Option<Vec<R>> = inputs.a_log.as_ref().map(|a| convert(&a.to_f64_vec()));
        let dt_bias: Option<Vec<R>> = inputs.dt_bias.as_ref().map(|d| convert(&d.to_f64_vec()));
        let gamma = match p.gate {
            Gate::Log => g,
            Gate::Softplus | Gate::LowerBound(_) => {
                let dt = dt_bias.unwrap_or_default();
                let mut out = g;
                for (i, x) in out.iter_mut().enumerate() {
                    let hv = (i / gk) % p.hv;
                    let d = i % gk;
                    let bias = dt.get(hv * gk + d).copied().unwrap_or(R::ZERO);
                    let a = a_log.as_ref().map(|a| a[hv].exp());
                    *x = match p.gate {
                        Gate::Softplus => -a.unwrap_or(R::ONE) * softplus(*x + bias),
                        Gate::LowerBound(lb) => {
                            let z = match a {
                                Some(a) => a * (*x + bias),
                                None => *x + bias,
                            };
                            R::from_f64(lb) * sigmoid(z)
                        }
                        Gate::Log => *x,
                    };
                }
                out
            }
        };
        let mut beta: Vec<R> = convert(&inputs.beta.to_f64_vec());
        match p.beta {
            BetaMode::Prob => {}
            BetaMode::Logit => beta.iter_mut().for_each(|b| *b = sigmoid(*b)),
            BetaMode::Logit2 => beta
                .iter_mut()
                .for_each(|b| *b = R::from_f64(2.0) * sigmoid(*b)),
        }
        Prepared {
            q,
            k,
            v,
            gamma,
            beta,
        }
    }
}

/// The initial state of `(n, hv)` as a row-major K x V matrix (`kv`), zeros when none.
pub fn initial_state<R: Real>(
    p: &Problem,
    inputs: &Inputs,
    val: &Validated,
    n: usize,
    hv: usize,
) -> Vec<R> {
    let mut s = vec![R::ZERO; p.k * p.v];
    let row = match p.initial {
        InitialState::None => None,
        InitialState::Dense => Some(n),
        InitialState::Pool { .. } => val
            .indices
            .as_ref()
            .and_then(|idx| usize::try_from(idx[n]).ok()),
    };
    if let (Some(row), Some(t)) = (row, inputs.initial_state.as_ref()) {
        let base = (row * p.hv + hv) * p.k * p.v;
        for kk in 0..p.k {
            for vv in 0..p.v {
                s[kk * p.v + vv] = R::from_f64(t.get_f64(base + p.layout.offset(kk, vv, p.k, p.v)));
            }
        }
    }
    s
}

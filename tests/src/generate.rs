//! Seeded problem generator with realistic data: L2-normalised keys, log decays from logsigmoid
//! or from the softplus and lower-bound formulas, beta in (0, 1), never all-zero inputs.

use crate::casefile::{metadata_from_problem, Case, Expected};
use crate::rng::Rng;
use deltarule_core::problem::{BetaMode, Gate, InitialState, Op};
use deltarule_core::{Backend, DType, HostTensor, Inputs, Kernel, Problem, Result};
use deltarule_cpu::CpuBackend;
use rayon::prelude::*;

/// How the gates are drawn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GateStyle {
    /// logsigmoid of N(3, 1.5) for log gates (typical decay 0.95 per token); realistic raw inputs
    /// for the in-kernel gates.
    Realistic,
    /// Every log decay is 0 (no decay; log gates only).
    NoDecay,
    /// Very negative log decays (about -20 to -5 per token).
    VeryNegative,
    /// Raw gate inputs drawn from {-8, 0, 8} (FlashKDA's sweep); log gates get -8·u.
    Adversarial,
    /// Realistic gates with extreme single-token decays at chunk starts, ends and middles of
    /// every sequence ([`EXTREME_AT`]): log decays of -inf (a reset), -30, -300, -1e4, -1e8 and
    /// -1e30, softplus inputs with time steps up to 1e30 and +inf, saturated lower-bound inputs.
    /// For kda two channels in three take the extreme value and the third keeps its own.
    Extreme,
}

/// The positions within a sequence that [`GateStyle::Extreme`] overwrites: chunk starts and ends
/// (0, 63, 64, 127, 128, 191, 192), runs of neighbours and isolated middles.
pub const EXTREME_AT: [usize; 18] = [
    0, 1, 2, 5, 30, 31, 45, 63, 64, 65, 100, 126, 127, 128, 129, 150, 191, 192,
];

/// The extreme values of [`GateStyle::Extreme`], per gate form (raw inputs for the in-kernel gates).
fn extreme_values(gate: Gate) -> [f64; 6] {
    match gate {
        Gate::Log => [f64::NEG_INFINITY, -30.0, -300.0, -1e4, -1e8, -1e30],
        // -exp(A_log) softplus(x + dt_bias) ~ -A x: decays from about -30 to -1.6e31, and -inf
        Gate::Softplus => [f64::INFINITY, 30.0, 300.0, 1e4, 1e8, 1e30],
        // the sigmoid saturated at both ends: the largest decay (lb) and none
        Gate::LowerBound(_) => [f64::INFINITY, -1e30, 1e30, f64::NEG_INFINITY, 1e4, -30.0],
    }
}

/// Overwrites the gates at [`EXTREME_AT`] of every sequence with [`extreme_values`], cycling
/// through them so that neighbouring positions and sequences get different values.
fn put_extreme_gates(g: &mut [f64], p: &Problem, seqlens: &[usize], gk: usize) {
    let vals = extreme_values(p.gate);
    let mut start = 0;
    for (n, &len) in seqlens.iter().enumerate() {
        for (j, &at) in EXTREME_AT.iter().enumerate().filter(|(_, &at)| at < len) {
            for hv in 0..p.hv {
                let x = vals[(n + j + hv) % vals.len()];
                let row = ((start + at) * p.hv + hv) * gk;
                for d in 0..gk {
                    if gk == 1 || (d + j) % 3 != 0 {
                        g[row + d] = x;
                    }
                }
            }
        }
        start += len;
    }
}

/// How the data is drawn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DataStyle {
    pub gate: GateStyle,
    /// beta = 0 (probability) or -30 logits: the state only decays.
    pub beta_zero: bool,
    /// q, k, v all ones (k normalised): errors are easy to read.
    pub ones: bool,
    /// Keys near one shared direction (`1 + 0.1 z` per channel before normalising: neighbouring
    /// keys' cosine about 0.99) and β = 1 (the logit forms: 30): `I + A` near singular, the
    /// conditioning docs/spec.md warns of, where every rounding of a chunk's products is amplified.
    pub collinear: bool,
}

impl Default for DataStyle {
    fn default() -> Self {
        DataStyle {
            gate: GateStyle::Realistic,
            beta_zero: false,
            ones: false,
            collinear: false,
        }
    }
}

/// Splits `tokens` into `seqs` lengths at random (each at least 1 when `tokens >= seqs`).
pub fn split_tokens(tokens: usize, seqs: usize, seed: u64) -> Vec<usize> {
    let seqs = seqs.max(1);
    let mut rng = Rng::new(seed ^ 0x5eed_1e75);
    if tokens < seqs {
        let mut v = vec![0; seqs];
        for x in v.iter_mut().take(tokens) {
            *x = 1;
        }
        return v;
    }
    let mut cuts: Vec<usize> = (0..seqs - 1).map(|_| 1 + rng.below(tokens - 1)).collect();
    cuts.sort();
    // enforce at least one token per sequence
    let mut lens = Vec::with_capacity(seqs);
    let mut prev = 0;
    for c in cuts {
        lens.push(c - prev);
        prev = c;
    }
    lens.push(tokens - prev);
    // move tokens from the longest to empty sequences
    while let Some(z) = lens.iter().position(|&l| l == 0) {
        let (imax, _) = lens
            .iter()
            .enumerate()
            .max_by_key(|(_, &l)| l)
            .unwrap_or((0, &0));
        lens[imax] -= 1;
        lens[z] += 1;
    }
    lens
}

fn logsigmoid(x: f64) -> f64 {
    if x < 0.0 {
        x - (-x).exp().ln_1p()
    } else {
        -(-x).exp().ln_1p()
    }
}

/// Builds the inputs of `p` (with `p.tokens`/`p.seqs` replaced by `seqlens`) from `seed`.
/// The returned case has no expected outputs; see [`with_expected`].
pub fn generate(
    template: &Problem,
    seqlens: &[usize],
    seed: u64,
    style: DataStyle,
) -> Result<Case> {
    let mut p = template.clone();
    p.seqs = seqlens.len();
    p.tokens = seqlens.iter().sum();
    p.validate()?;
    let mut rng = Rng::new(seed);
    let (t, h, hv, kd, vd) = (p.tokens, p.h, p.hv, p.k, p.v);

    // q, k: normal; k L2-normalised unless the kernel normalises (then raw, scaled).
    let q = normal_tensor(&mut rng, p.qkv_dtype, vec![t, h, kd], style.ones);
    let key: fn(f64) -> f64 = if style.collinear {
        |z| 1.0 + 0.1 * z
    } else {
        |z| z
    };
    let mut k = normals(&mut rng, t * h * kd, style.ones, key);
    if !p.l2norm {
        k.par_chunks_mut(kd).for_each(|row| {
            let n = row.iter().map(|x| x * x).sum::<f64>().sqrt().max(1e-12);
            row.iter_mut().for_each(|x| *x /= n);
        });
    } else {
        // raw projections have some scale; the kernel normalises them
        k.par_iter_mut().for_each(|x| *x *= 0.7);
    }
    let v = normal_tensor(&mut rng, p.qkv_dtype, vec![t, hv, vd], style.ones);

    let gk = match p.op {
        Op::Gdn => 1,
        Op::Kda => kd,
    };
    let mut a_log = None;
    let mut dt_bias = None;
    let mut g: Vec<f64> = match p.gate {
        Gate::Log => match style.gate {
            GateStyle::Realistic | GateStyle::Extreme => {
                normals(&mut rng, t * hv * gk, false, |z| logsigmoid(3.0 + 1.5 * z))
            }
            GateStyle::NoDecay => vec![0.0; t * hv * gk],
            GateStyle::VeryNegative => (0..t * hv * gk).map(|_| rng.range(-20.0, -5.0)).collect(),
            GateStyle::Adversarial => (0..t * hv * gk).map(|_| -8.0 * rng.uniform()).collect(),
        },
        Gate::Softplus => {
            // Mamba2-style initialisation: A in [1, 16], softplus(dt_bias) in [0.001, 0.1].
            a_log = Some(
                (0..hv)
                    .map(|_| rng.range(1.0, 16.0).ln())
                    .collect::<Vec<f64>>(),
            );
            dt_bias = Some(
                (0..hv * gk)
                    .map(|_| {
                        let dt = (rng.range(0.001f64.ln(), 0.1f64.ln())).exp();
                        dt + (-(-dt).exp_m1()).ln()
                    })
                    .collect::<Vec<f64>>(),
            );
            match style.gate {
                GateStyle::Adversarial => (0..t * hv * gk)
                    .map(|_| [-8.0, 0.0, 8.0][rng.below(3)])
                    .collect(),
                GateStyle::VeryNegative => (0..t * hv * gk).map(|_| rng.range(5.0, 10.0)).collect(),
                _ => normals(&mut rng, t * hv * gk, false, |z| 0.5 * z),
            }
        }
        Gate::LowerBound(_) => {
            if p.a_log {
                a_log = Some((0..hv).map(|_| 0.3 * rng.normal()).collect::<Vec<f64>>());
            }
            dt_bias = Some((0..hv * gk).map(|_| rng.normal()).collect::<Vec<f64>>());
            match style.gate {
                GateStyle::Adversarial => (0..t * hv * gk)
                    .map(|_| [-8.0, 0.0, 8.0][rng.below(3)])
                    .collect(),
                GateStyle::VeryNegative => (0..t * hv * gk).map(|_| rng.range(5.0, 10.0)).collect(),
                _ => normals(&mut rng, t * hv * gk, false, |z| z),
            }
        }
    };
    if style.gate == GateStyle::Extreme {
        put_extreme_gates(&mut g, &p, seqlens, gk);
    }
    let beta = normals(
        &mut rng,
        t * hv,
        false,
        match (p.beta, style.beta_zero, style.collinear) {
            (BetaMode::Prob, true, _) => |_| 0.0,
            (_, true, _) => |_| -30.0,
            (BetaMode::Prob, false, true) => |_| 1.0,
            (_, false, true) => |_| 30.0,
            (BetaMode::Prob, false, false) => |z: f64| 1.0 / (1.0 + (-z).exp()),
            (_, false, false) => |z| z,
        },
    );

    let mut cu = vec![0i64];
    for &l in seqlens {
        let last = cu[cu.len() - 1];
        cu.push(last + l as i64);
    }

    let state_len = hv * kd * vd;
    let (initial_state, state_indices) = match p.initial {
        InitialState::None => (None, None),
        InitialState::Dense => {
            let s = normals(&mut rng, p.seqs * state_len, false, |z| 0.5 * z);
            (
                Some(tensor(p.state_in_dtype, p.state_shape(p.seqs), &s)),
                None,
            )
        }
        InitialState::Pool { rows } => {
            let s = normals(&mut rng, rows * state_len, false, |z| 0.5 * z);
            // a random injective map of sequences to rows, with some sequences at -1
            let mut free: Vec<usize> = (0..rows).collect();
            let mut idx = Vec::with_capacity(p.seqs);
            for n in 0..p.seqs {
                let skip = free.is_empty() || (n % 4 == 3);
                if skip {
                    idx.push(-1i64);
                } else {
                    let j = rng.below(free.len());
                    idx.push(free.swap_remove(j) as i64);
                }
            }
            (
                Some(tensor(p.state_in_dtype, p.state_shape(rows), &s)),
                Some(HostTensor::from_i64(p.index_dtype, vec![p.seqs], &idx)),
            )
        }
    };

    let inputs = Inputs {
        q,
        k: tensor(p.qkv_dtype, vec![t, h, kd], &k),
        v,
        g: tensor(p.g_dtype, p.g_shape(), &g),
        beta: tensor(p.beta_dtype, vec![t, hv], &beta),
        cu_seqlens: HostTensor::from_i64(p.offsets_dtype, vec![p.seqs + 1], &cu),
        a_log: a_log.map(|a| HostTensor::from_f64(DType::F32, vec![hv], &a)),
        dt_bias: dt_bias.map(|d| HostTensor::from_f64(DType::F32, vec![hv * gk], &d)),
        initial_state,
        state_indices,
    };
    let mut metadata = metadata_from_problem(&p);
    metadata.insert(
        "source".into(),
        format!("deltarule generator, seed {seed}, lengths {seqlens:?}"),
    );
    Ok(Case {
        name: p.id(),
        problem: p,
        inputs,
        expected: Expected::default(),
        metadata,
    })
}

/// `n` draws of the generator's normal, each mapped by `f` (or `n` ones when `ones`), in parallel
/// for long tensors and equal to `n` calls of `f(rng.normal())` in order.
fn normals(rng: &mut Rng, n: usize, ones: bool, f: fn(f64) -> f64) -> Vec<f64> {
    if ones {
        return vec![1.0; n];
    }
    let mut out = vec![0.0; n];
    rng.fill_normal(&mut out);
    out.par_iter_mut().for_each(|x| *x = f(*x));
    out
}

/// A tensor of standard normals (or ones) of `dtype`, drawn as [`normals`] draws them and
/// rounded as `HostTensor::from_f64` rounds, with no float64 copy of the whole tensor.
fn normal_tensor(rng: &mut Rng, dtype: DType, shape: Vec<usize>, ones: bool) -> HostTensor {
    use deltarule_core::tensor::{bf16_from_f64, f16_from_f64, TensorData};
    let n = shape.iter().product();
    if ones {
        return HostTensor::from_f64(dtype, shape, &vec![1.0; n]);
    }
    let data = match dtype {
        DType::F32 => {
            let mut out = vec![0f32; n];
            rng.fill_normal_map(&mut out, |z| z as f32);
            TensorData::F32(out)
        }
        DType::F16 => {
            let mut out = vec![half::f16::ZERO; n];
            rng.fill_normal_map(&mut out, f16_from_f64);
            TensorData::F16(out)
        }
        DType::BF16 => {
            let mut out = vec![half::bf16::ZERO; n];
            rng.fill_normal_map(&mut out, bf16_from_f64);
            TensorData::BF16(out)
        }
        _ => return tensor(dtype, shape, &normals(rng, n, false, |z| z)),
    };
    HostTensor { shape, data }
}

/// `HostTensor::from_f64`, converting in parallel (the same rounding per element).
fn tensor(dtype: DType, shape: Vec<usize>, values: &[f64]) -> HostTensor {
    use deltarule_core::tensor::{bf16_from_f64, f16_from_f64, TensorData};
    let data = match dtype {
        DType::F32 => TensorData::F32(values.par_iter().map(|&x| x as f32).collect()),
        DType::F16 => TensorData::F16(values.par_iter().map(|&x| f16_from_f64(x)).collect()),
        DType::BF16 => TensorData::BF16(values.par_iter().map(|&x| bf16_from_f64(x)).collect()),
        _ => return HostTensor::from_f64(dtype, shape, values),
    };
    HostTensor { shape, data }
}

/// Fills the case's expected outputs with the float64 reference.
pub fn with_expected(mut case: Case) -> Result<Case> {
    let out = CpuBackend::new().run(Kernel::Reference, &case.problem, &case.inputs)?;
    case.expected = Expected::from_outputs(&out);
    Ok(case)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_covers_every_token() {
        for (t, n) in [(10, 3), (333, 4), (2, 5), (64, 64), (1, 1)] {
            let l = split_tokens(t, n, 7);
            assert_eq!(l.len(), n);
            assert_eq!(l.iter().sum::<usize>(), t);
            if t >= n {
                assert!(l.iter().all(|&x| x >= 1));
            }
        }
    }
}

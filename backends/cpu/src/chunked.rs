//! The chunked algorithm of docs/spec.md, split into the two stages the GPU kernels use:
//!
//! * [`intra`]: state-independent, chunk-parallel: the cumulative log decays `Γ`, the strictly
//!   lower matrix `A`, its inverse `T = (I + A)⁻¹` by forward substitution, `W`, `U`, the
//!   intra-chunk read-out matrix `P`, and the decayed `Q` and `K` the state pass needs;
//! * [`state_pass`]: sequential over chunks: `V_new = U − W·S`, `O = (Q ⊙ e^Γ)·S + P·V_new`,
//!   `S ← e^{Γ_last} ⊙ S + (K ⊙ e^{Γ_last − Γ})ᵀ·V_new`.
//!
//! Every exponent evaluated here is `Γ_i − Γ_j` with `j ≤ i`, `Γ_i`, or `Γ_last − Γ_j`: never
//! positive for log decays `≤ 0`, so nothing overflows and nothing is masked by multiplying.
//!
//! Gates of any size (docs/spec.md, the chunked algorithm): each log decay is first clamped to
//! [`Real::LOG_DECAY_FLOOR`] (whose exponential is exactly 0, so -inf stays an exact reset and no
//! `−inf − (−inf)` arises), and `Γ` is kept as two cumulative sums, `B` over the large decays
//! (below [`LARGE_DECAY`]) and `s` over the others, with `Γ_i − Γ_j = (B_i − B_j) + (s_i − s_j)`.
//! Where no large decay lies between `j` and `i`, `B_i − B_j` is exactly 0 and the difference
//! keeps the precision of the small sums; where one does, the factor is at most `e^-4` and the
//! rounding of `B` is scaled by it.
//! Chunks are at most [`CHUNK`](deltarule_core::problem::CHUNK) tokens, never cross a sequence,
//! and are cut short at checkpoint positions so that any checkpoint interval works.

use crate::real::Real;
use crate::reference::{Pair, PairOut};
use deltarule_core::Op;

/// Log decays below this go to the large-decay sum `B` of a chunk's `Γ` (module docs).
pub const LARGE_DECAY: f64 = -4.0;

/// The state-independent products of one chunk of `l` tokens.
pub struct Intra<R> {
    pub l: usize,
    /// `W = T·(β ⊙ K ⊙ e^Γ)`, `[l, K]`.
    pub w: Vec<R>,
    /// `U = T·(β ⊙ V)`, `[l, V]`.
    pub u: Vec<R>,
    /// `P_ij = scale Σ_d q_i k_j e^{Γ_i − Γ_j}` for `j ≤ i`, `[l, l]`.
    pub pm: Vec<R>,
    /// `scale · Q ⊙ e^Γ`, `[l, K]`.
    pub qdec: Vec<R>,
    /// `K ⊙ e^{Γ_last − Γ}`, `[l, K]`.
    pub kdec: Vec<R>,
    /// `e^{Γ_last}`, `[K]` (gdn: all equal).
    pub glast: Vec<R>,
}

/// Stage 1 for the chunk `[t0, t0 + l)` of `pair`.
pub fn intra<R: Real>(pair: &Pair<'_, R>, t0: usize, l: usize) -> Intra<R> {
    let p = pair.p;
    let prep = pair.prep;
    let (kd, vd) = (p.k, p.v);
    let gk = match p.op {
        Op::Gdn => 1,
        Op::Kda => kd,
    };
    let scale = R::from_f64(p.scale);
    // 1. Γ = B + s: inclusive cumulative sums within the chunk, [l, gk], of the clamped log
    //    decays, the large ones into B and the others into s.
    let large = R::from_f64(LARGE_DECAY);
    let mut gb = vec![R::ZERO; l * gk];
    let mut gs = vec![R::ZERO; l * gk];
    for i in 0..l {
        let g = &prep.gamma[pair.g_at(t0 + i)..pair.g_at(t0 + i) + gk];
        for d in 0..gk {
            let x = if g[d] < R::LOG_DECAY_FLOOR {
                R::LOG_DECAY_FLOOR
            } else {
                g[d]
            };
            let (b0, s0) = if i == 0 {
                (R::ZERO, R::ZERO)
            } else {
                (gb[(i - 1) * gk + d], gs[(i - 1) * gk + d])
            };
            let (b, s) = if x < large {
                (b0 + x, s0)
            } else {
                (b0, s0 + x)
            };
            gb[i * gk + d] = b;
            gs[i * gk + d] = s;
        }
    }
    let at = |i: usize, d: usize| i * gk + if gk == 1 { 0 } else { d };
    // Γ_i
    let gam_at = |i: usize, d: usize| gb[at(i, d)] + gs[at(i, d)];
    // Γ_i − Γ_j
    let gam_diff = |i: usize, j: usize, d: usize| {
        (gb[at(i, d)] - gb[at(j, d)]) + (gs[at(i, d)] - gs[at(j, d)])
    };
    let q = |i: usize| &prep.q[pair.q_at(t0 + i)..pair.q_at(t0 + i) + kd];
    let k = |i: usize| &prep.k[pair.q_at(t0 + i)..pair.q_at(t0 + i) + kd];
    let beta = |i: usize| prep.beta[pair.beta_at(t0 + i)];

    // 2. A (strictly lower, scaled by β_i) and P (lower including the diagonal, scaled).
    let mut a = vec![R::ZERO; l * l];
    let mut pm = vec![R::ZERO; l * l];
    for i in 0..l {
        let (qi, ki) = (q(i), k(i));
        for j in 0..=i {
            let kj = k(j);
            let (mut dkk, mut dqk) = (R::ZERO, R::ZERO);
            match p.op {
                Op::Gdn => {
                    for d in 0..kd {
                        dkk += ki[d] * kj[d];
                        dqk += qi[d] * kj[d];
                    }
                    let e = gam_diff(i, j, 0).exp();
                    dkk *= e;
                    dqk *= e;
                }
                Op::Kda => {
                    for d in 0..kd {
                        let e = gam_diff(i, j, d).exp();
                        dkk += ki[d] * kj[d] * e;
                        dqk += qi[d] * kj[d] * e;
                    }
                }
            }
            if j < i {
                a[i * l + j] = beta(i) * dkk;
            }
            pm[i * l + j] = scale * dqk;
        }
    }
    // 3. T = (I + A)^-1 by forward substitution: T[i, :] = e_i − Σ_{m < i} A[i, m] T[m, :].
    let mut tinv = vec![R::ZERO; l * l];
    for i in 0..l {
        tinv[i * l + i] = R::ONE;
        for m in 0..i {
            let aim = a[i * l + m];
            for j in 0..=m {
                let x = aim * tinv[m * l + j];
                tinv[i * l + j] -= x;
            }
        }
    }
    // 4. W = T·(β ⊙ K ⊙ e^Γ), U = T·(β ⊙ V).
    let mut wsrc = vec![R::ZERO; l * kd];
    let mut usrc = vec![R::ZERO; l * vd];
    let mut qdec = vec![R::ZERO; l * kd];
    let mut kdec = vec![R::ZERO; l * kd];
    let mut glast = vec![R::ZERO; kd];
    for d in 0..kd {
        glast[d] = gam_at(l - 1, d).exp();
    }
    for j in 0..l {
        let (qj, kj) = (q(j), k(j));
        let vj = &prep.v[pair.v_at(t0 + j)..pair.v_at(t0 + j) + vd];
        let b = beta(j);
        for d in 0..kd {
            let eg = gam_at(j, d).exp();
            wsrc[j * kd + d] = b * kj[d] * eg;
            qdec[j * kd + d] = scale * qj[d] * eg;
            kdec[j * kd + d] = kj[d] * gam_diff(l - 1, j, d).exp();
        }
        for e in 0..vd {
            usrc[j * vd + e] = b * vj[e];
        }
    }
    let mut w = vec![R::ZERO; l * kd];
    let mut u = vec![R::ZERO; l * vd];
    for i in 0..l {
        for j in 0..=i {
            let t = tinv[i * l + j];
            for d in 0..kd {
                w[i * kd + d] += t * wsrc[j * kd + d];
            }
            for e in 0..vd {
                u[i * vd + e] += t * usrc[j * vd + e];
            }
        }
    }
    Intra {
        l,
        w,
        u,
        pm,
        qdec,
        kdec,
        glast,
    }
}

/// Stage 2 for one chunk: reads and updates the running state `s` (row-major K x V) and writes the
/// chunk's output rows into `o` (`[l, V]`).
pub fn state_pass<R: Real>(c: &Intra<R>, kd: usize, vd: usize, s: &mut [R], o: &mut [R]) {
    let l = c.l;
    // V_new = U − W·S
    let mut vnew = c.u.clone();
    for i in 0..l {
        let row = &mut vnew[i * vd..(i + 1) * vd];
        for d in 0..kd {
            let wd = c.w[i * kd + d];
            let srow = &s[d * vd..(d + 1) * vd];
            for e in 0..vd {
                row[e] -= wd * srow[e];
            }
        }
    }
    // O = (scale Q ⊙ e^Γ)·S + P·V_new
    for i in 0..l {
        let out = &mut o[i * vd..(i + 1) * vd];
        out.iter_mut().for_each(|x| *x = R::ZERO);
        for d in 0..kd {
            let qd = c.qdec[i * kd + d];
            let srow = &s[d * vd..(d + 1) * vd];
            for e in 0..vd {
                out[e] += qd * srow[e];
            }
        }
        for j in 0..=i {
            let pij = c.pm[i * l + j];
            let vrow = &vnew[j * vd..(j + 1) * vd];
            for e in 0..vd {
                out[e] += pij * vrow[e];
            }
        }
    }
    // S ← e^{Γ_last} ⊙ S + (K ⊙ e^{Γ_last − Γ})ᵀ·V_new
    for d in 0..kd {
        let srow = &mut s[d * vd..(d + 1) * vd];
        let gl = c.glast[d];
        srow.iter_mut().for_each(|x| *x *= gl);
        for j in 0..l {
            let kj = c.kdec[j * kd + d];
            let vrow = &vnew[j * vd..(j + 1) * vd];
            for e in 0..vd {
                srow[e] += kj * vrow[e];
            }
        }
    }
}

/// Runs one (sequence, value head) through the chunked algorithm from state `s`.
pub fn chunked<R: Real>(pair: &Pair<'_, R>, mut s: Vec<R>) -> PairOut<R> {
    let p = pair.p;
    let (kd, vd) = (p.k, p.v);
    let len = pair.end - pair.start;
    let mut o = vec![R::ZERO; len * vd];
    let mut checkpoints = Vec::new();
    let mut pos = 0;
    while pos < len {
        let mut l = p.chunk.min(len - pos);
        if let Some(e) = p.checkpoint_every {
            let next = (pos / e + 1) * e;
            l = l.min(next - pos);
        }
        let c = intra(pair, pair.start + pos, l);
        state_pass(&c, kd, vd, &mut s, &mut o[pos * vd..(pos + l) * vd]);
        pos += l;
        if let Some(e) = p.checkpoint_every {
            if pos % e == 0 {
                checkpoints.push(s.clone());
            }
        }
    }
    PairOut {
        o,
        state: s,
        checkpoints,
    }
}

#[cfg(test)]
mod tests {
    use crate::CpuBackend;
    use deltarule_core::{
        compare, Backend, DType, HostTensor, InitialState, Inputs, Kernel, Mode, Op, Outputs,
        Problem,
    };

    /// A deterministic value in [-1, 1).
    fn noise(i: usize, salt: u64) -> f64 {
        let mut x = (i as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ salt;
        x ^= x >> 31;
        x = x.wrapping_mul(0xbf58_476d_1ce4_e5b9);
        x ^= x >> 29;
        (x >> 11) as f64 / (1u64 << 52) as f64 - 1.0
    }

    /// One 130-token sequence with realistic gates, an initial state, and `extreme` at tokens 0,
    /// 30, 63, 64 and 100 (kda: on two channels in three).
    fn problem(op: Op, extreme: f64) -> (Problem, Inputs) {
        let (t, hv, kd, vd) = (130, 2, 32, 32);
        let mut p = Problem::new(op, Mode::Prefill, 1, t, 1, hv, kd, vd);
        p.qkv_dtype = DType::F32;
        p.initial = InitialState::Dense;
        let gk = if op == Op::Kda { kd } else { 1 };
        let mut k: Vec<f64> = (0..t * kd).map(|i| noise(i, 1)).collect();
        for row in k.chunks_mut(kd) {
            let n = row.iter().map(|x| x * x).sum::<f64>().sqrt();
            row.iter_mut().for_each(|x| *x /= n);
        }
        let mut g: Vec<f64> = (0..t * hv * gk)
            .map(|i| -0.05 - 0.05 * noise(i, 3))
            .collect();
        for at in [0, 30, 63, 64, 100] {
            for (j, x) in g[at * hv * gk..(at + 1) * hv * gk].iter_mut().enumerate() {
                if gk == 1 || j % 3 != 0 {
                    *x = extreme;
                }
            }
        }
        let inputs = Inputs {
            q: HostTensor::from_f64(
                DType::F32,
                vec![t, 1, kd],
                &k.iter().map(|x| 0.7 * x).collect::<Vec<_>>(),
            ),
            k: HostTensor::from_f64(DType::F32, vec![t, 1, kd], &k),
            v: HostTensor::from_f64(
                DType::F32,
                vec![t, hv, vd],
                &(0..t * hv * vd).map(|i| noise(i, 2)).collect::<Vec<_>>(),
            ),
            g: HostTensor::from_f64(DType::F32, p.g_shape(), &g),
            beta: HostTensor::from_f64(
                DType::F32,
                vec![t, hv],
                &(0..t * hv)
                    .map(|i| 0.5 + 0.4 * noise(i, 4))
                    .collect::<Vec<_>>(),
            ),
            cu_seqlens: HostTensor::from_i64(DType::I64, vec![2], &[0, t as i64]),
            a_log: None,
            dt_bias: None,
            initial_state: Some(HostTensor::from_f64(
                DType::F32,
                p.state_shape(1),
                &(0..hv * kd * vd).map(|i| noise(i, 5)).collect::<Vec<_>>(),
            )),
            state_indices: None,
        };
        (p, inputs)
    }

    fn run(kernel: Kernel, p: &Problem, inputs: &Inputs) -> Outputs {
        match CpuBackend::new().run(kernel, p, inputs) {
            Ok(o) => o,
            Err(e) => panic!("{kernel:?}: {e}"),
        }
    }

    /// -inf (a reset) and -1e30 on single tokens: finite, and within the f32 bound of float64.
    #[test]
    fn extreme_log_decays_match_the_reference() {
        for op in Op::ALL {
            for extreme in [f64::NEG_INFINITY, -1e30, -300.0, -30.0] {
                let (p, inputs) = problem(op, extreme);
                let want = run(Kernel::Reference, &p, &inputs);
                for kernel in [Kernel::Chunked, Kernel::ChunkedF64] {
                    let got = run(kernel, &p, &inputs);
                    let pairs = [
                        ("o", &got.o, &want.o),
                        (
                            "final state",
                            got.final_state.as_ref().expect("a final state"),
                            want.final_state.as_ref().expect("a final state"),
                        ),
                    ];
                    for (what, g, w) in pairs {
                        let m = compare(&g.to_f64_vec(), &w.to_f64_vec());
                        assert!(
                            m.passes(1e-5),
                            "{} {kernel:?} gate {extreme}: {what} rel_l2 {:e}, {} non-finite",
                            op.name(),
                            m.rel_l2,
                            m.nonfinite
                        );
                    }
                }
            }
        }
    }

    /// A reset on the first token makes the initial state irrelevant, bit for bit.
    #[test]
    fn a_reset_forgets_the_initial_state_exactly() {
        for op in Op::ALL {
            let (mut p, mut inputs) = problem(op, f64::NEG_INFINITY);
            // (kda: every channel resets on the first token)
            let mut g = inputs.g.to_f64_vec();
            let row = p.hv * if op == Op::Kda { p.k } else { 1 };
            g[..row].iter_mut().for_each(|x| *x = f64::NEG_INFINITY);
            inputs.g = HostTensor::from_f64(DType::F32, p.g_shape(), &g);
            let with = run(Kernel::Chunked, &p, &inputs);
            p.initial = InitialState::None;
            inputs.initial_state = None;
            let without = run(Kernel::Chunked, &p, &inputs);
            assert_eq!(with.o.count_nonfinite(), 0, "{}", op.name());
            assert!(with.o.bit_identical(&without.o), "{}", op.name());
        }
    }
}

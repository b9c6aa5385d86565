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
//! Chunks are at most [`CHUNK`](deltarule_core::problem::CHUNK) tokens, never cross a sequence,
//! and are cut short at checkpoint positions so that any checkpoint interval works.

use crate::real::Real;
use crate::reference::{Pair, PairOut};
use deltarule_core::Op;

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
    // 1. Γ: inclusive cumulative sum within the chunk, [l, gk].
    let mut gam = vec![R::ZERO; l * gk];
    for i in 0..l {
        let g = &prep.gamma[pair.g_at(t0 + i)..pair.g_at(t0 + i) + gk];
        for d in 0..gk {
            gam[i * gk + d] = if i == 0 {
                g[d]
            } else {
                gam[(i - 1) * gk + d] + g[d]
            };
        }
    }
    let gam_at = |i: usize, d: usize| gam[i * gk + if gk == 1 { 0 } else { d }];
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
                    let e = (gam_at(i, 0) - gam_at(j, 0)).exp();
                    dkk *= e;
                    dqk *= e;
                }
                Op::Kda => {
                    for d in 0..kd {
                        let e = (gam_at(i, d) - gam_at(j, d)).exp();
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
            kdec[j * kd + d] = kj[d] * (gam_at(l - 1, d) - gam_at(j, d)).exp();
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

//! The token recurrence of docs/spec.md, step by step: the executable spec. The `reference`
//! kernel runs it in f64; the chunked paths share its work item ([`Pair`]) and output ([`PairOut`]).

use crate::prep::Prepared;
use crate::real::Real;
use deltarule_core::{Op, Problem};

/// One (sequence, value head) work item.
pub struct Pair<'a, R> {
    pub p: &'a Problem,
    pub prep: &'a Prepared<R>,
    /// Token range of the sequence.
    pub start: usize,
    pub end: usize,
    pub hv: usize,
}

impl<R> Pair<'_, R> {
    /// The q/k head this value head reads (consecutive grouping).
    pub fn h(&self) -> usize {
        self.hv / self.p.group()
    }
    pub fn q_at(&self, t: usize) -> usize {
        (t * self.p.h + self.h()) * self.p.k
    }
    pub fn v_at(&self, t: usize) -> usize {
        (t * self.p.hv + self.hv) * self.p.v
    }
    /// Offset of the gate of token `t` (gdn: one scalar; kda: K channels).
    pub fn g_at(&self, t: usize) -> usize {
        match self.p.op {
            Op::Gdn => t * self.p.hv + self.hv,
            Op::Kda => (t * self.p.hv + self.hv) * self.p.k,
        }
    }
    pub fn beta_at(&self, t: usize) -> usize {
        t * self.p.hv + self.hv
    }
}

/// Output of one (sequence, value head): `o` rows `[len, V]`, the final state (row-major K x V)
/// and the checkpoint states.
pub struct PairOut<R> {
    pub o: Vec<R>,
    pub state: Vec<R>,
    pub checkpoints: Vec<Vec<R>>,
}

/// Runs the recurrence token by token from state `s` (row-major K x V).
pub fn recurrence<R: Real>(pair: &Pair<'_, R>, mut s: Vec<R>) -> PairOut<R> {
    let p = pair.p;
    let (kd, vd) = (p.k, p.v);
    let len = pair.end - pair.start;
    let scale = R::from_f64(p.scale);
    let prep = pair.prep;
    let mut o = vec![R::ZERO; len * vd];
    let mut checkpoints = Vec::new();
    let mut u = vec![R::ZERO; vd];
    for i in 0..len {
        let t = pair.start + i;
        let q = &prep.q[pair.q_at(t)..pair.q_at(t) + kd];
        let k = &prep.k[pair.q_at(t)..pair.q_at(t) + kd];
        let v = &prep.v[pair.v_at(t)..pair.v_at(t) + vd];
        let beta = prep.beta[pair.beta_at(t)];
        // S = D_t S
        match p.op {
            Op::Gdn => {
                let d = prep.gamma[pair.g_at(t)].exp();
                s.iter_mut().for_each(|x| *x *= d);
            }
            Op::Kda => {
                let g = &prep.gamma[pair.g_at(t)..pair.g_at(t) + kd];
                for kk in 0..kd {
                    let d = g[kk].exp();
                    s[kk * vd..(kk + 1) * vd].iter_mut().for_each(|x| *x *= d);
                }
            }
        }
        // u = beta (v - S^T k)
        u.copy_from_slice(v);
        for kk in 0..kd {
            let kv = k[kk];
            let row = &s[kk * vd..(kk + 1) * vd];
            for vv in 0..vd {
                u[vv] -= row[vv] * kv;
            }
        }
        u.iter_mut().for_each(|x| *x *= beta);
        // S = S + k u^T
        for kk in 0..kd {
            let kv = k[kk];
            let row = &mut s[kk * vd..(kk + 1) * vd];
            for vv in 0..vd {
                row[vv] += kv * u[vv];
            }
        }
        // o = scale S^T q
        let out = &mut o[i * vd..(i + 1) * vd];
        for kk in 0..kd {
            let qv = q[kk] * scale;
            let row = &s[kk * vd..(kk + 1) * vd];
            for vv in 0..vd {
                out[vv] += row[vv] * qv;
            }
        }
        if let Some(e) = p.checkpoint_every {
            if (i + 1) % e == 0 {
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

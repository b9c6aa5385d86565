//! Exact sequence parallelism (docs/segments.md): the summary of a run of tokens as an affine map
//! of the state entering it, the composition of two such maps, and a whole-problem path that
//! splits every sequence into segments, summarises the segments in parallel, chains the
//! summaries along each sequence and then runs every segment from its true incoming state. In
//! f64 that path is the backend's `segmented` kernel (`cpu:segmented`).
//!
//! Per token (docs/spec.md section 3, state `S` of K x V row-major, `k` after the L2 norm, gate
//! and beta after their transforms):
//!
//! ```text
//! gdn:  S_t = (I - b_t k_t k_t^T) exp(g_t) S_{t-1} + b_t k_t v_t^T
//! kda:  S_t = (I - b_t k_t k_t^T) diag(exp(g_t)) S_{t-1} + b_t k_t v_t^T
//! ```
//!
//! so a run of tokens maps `S_in` to `M S_in + L`, with `M` (K x K) the product of the per-token
//! factors and `L` (K x V) the state the run reaches from zeros. Nothing is truncated and nothing
//! depends on the gate values: a log decay of -inf makes its factor's decay exactly 0, and a
//! decay that underflows gives 0 the way the token recurrence gives it.

use crate::prep::{initial_state, Prepared};
use crate::real::Real;
use crate::reference::{recurrence, Pair, PairOut};
use deltarule_core::{validate_inputs, Error, Inputs, Op, Outputs, Problem, Result, Validated};
use rayon::prelude::*;

/// The affine map `S_out = M S_in + L` of a run of tokens of one (sequence, value head).
#[derive(Clone, Debug, PartialEq)]
pub struct Summary<R> {
    k: usize,
    v: usize,
    m: Vec<R>,
    l: Vec<R>,
}

impl<R: Real> Summary<R> {
    /// A summary from its parts: `m` row-major K x K, `l` row-major K x V.
    pub fn new(k: usize, v: usize, m: Vec<R>, l: Vec<R>) -> Result<Self> {
        if m.len() != k * k {
            return Err(Error::invalid(
                "summary M",
                format!("{k} x {k} = {} values", k * k),
                m.len().to_string(),
            ));
        }
        if l.len() != k * v {
            return Err(Error::invalid(
                "summary L",
                format!("{k} x {v} = {} values", k * v),
                l.len().to_string(),
            ));
        }
        Ok(Summary { k, v, m, l })
    }

    /// The summary of no tokens: `M = I`, `L = 0`.
    pub fn identity(k: usize, v: usize) -> Self {
        let mut m = vec![R::ZERO; k * k];
        for i in 0..k {
            m[i * k + i] = R::ONE;
        }
        Summary {
            k,
            v,
            m,
            l: vec![R::ZERO; k * v],
        }
    }

    /// K, the key dim.
    pub fn k(&self) -> usize {
        self.k
    }

    /// V, the value dim.
    pub fn v(&self) -> usize {
        self.v
    }

    /// `M`, the transition of the incoming state, row-major K x K.
    pub fn m(&self) -> &[R] {
        &self.m
    }

    /// `L`, the state reached from zeros, row-major K x V.
    pub fn l(&self) -> &[R] {
        &self.l
    }

    /// `(M, L)`.
    pub fn into_parts(self) -> (Vec<R>, Vec<R>) {
        (self.m, self.l)
    }
}

/// The summary of the tokens `[pair.start, pair.end)` of `pair`'s value head.
///
/// It runs the token recurrence on the K x (K + V) state `[M | L]` from `[I | 0]` with the values
/// `[0 | v_t]`: the `L` columns are computed with exactly the operations of
/// [`recurrence`] from a zero state. Cost: `O(len K (K + V))`. Checkpoints of the problem are
/// ignored.
pub fn summarize<R: Real>(pair: &Pair<'_, R>) -> Summary<R> {
    let p = pair.p;
    let prep = pair.prep;
    let (kd, vd) = (p.k, p.v);
    let w = kd + vd;
    let mut x = vec![R::ZERO; kd * w];
    for i in 0..kd {
        x[i * w + i] = R::ONE;
    }
    let mut u = vec![R::ZERO; w];
    for t in pair.start..pair.end {
        let k = &prep.k[pair.q_at(t)..pair.q_at(t) + kd];
        let v = &prep.v[pair.v_at(t)..pair.v_at(t) + vd];
        let beta = prep.beta[pair.beta_at(t)];
        // X = D_t X
        match p.op {
            Op::Gdn => {
                let d = prep.gamma[pair.g_at(t)].exp();
                x.iter_mut().for_each(|a| *a *= d);
            }
            Op::Kda => {
                let g = &prep.gamma[pair.g_at(t)..pair.g_at(t) + kd];
                for kk in 0..kd {
                    let d = g[kk].exp();
                    x[kk * w..(kk + 1) * w].iter_mut().for_each(|a| *a *= d);
                }
            }
        }
        // u = beta ([0 | v] - X^T k)
        u[..kd].fill(R::ZERO);
        u[kd..].copy_from_slice(v);
        for kk in 0..kd {
            let kv = k[kk];
            let row = &x[kk * w..(kk + 1) * w];
            for j in 0..w {
                u[j] -= row[j] * kv;
            }
        }
        u.iter_mut().for_each(|a| *a *= beta);
        // X = X + k u^T
        for kk in 0..kd {
            let kv = k[kk];
            let row = &mut x[kk * w..(kk + 1) * w];
            for j in 0..w {
                row[j] += kv * u[j];
            }
        }
    }
    let mut m = Vec::with_capacity(kd * kd);
    let mut l = Vec::with_capacity(kd * vd);
    for row in x.chunks(w) {
        m.extend_from_slice(&row[..kd]);
        l.extend_from_slice(&row[kd..]);
    }
    Summary { k: kd, v: vd, m, l }
}

fn check_dims<R>(what: &str, k: usize, v: usize, s: &Summary<R>) -> Result<()> {
    if s.k == k && s.v == v {
        Ok(())
    } else {
        Err(Error::invalid(
            what,
            format!("a summary of K = {k}, V = {v}"),
            format!("K = {}, V = {}", s.k, s.v),
        ))
    }
}

/// The summary of `first` followed by `second`: `M = M2 M1`, `L = M2 L1 + L2`. Associative;
/// cost `O(K^2 (K + V))`.
pub fn compose<R: Real>(first: &Summary<R>, second: &Summary<R>) -> Result<Summary<R>> {
    check_dims("second summary", first.k, first.v, second)?;
    Ok(compose_unchecked(first, second))
}

fn compose_unchecked<R: Real>(first: &Summary<R>, second: &Summary<R>) -> Summary<R> {
    let (kd, vd) = (first.k, first.v);
    let mut m = vec![R::ZERO; kd * kd];
    let mut l = second.l.clone();
    for i in 0..kd {
        let m2 = &second.m[i * kd..(i + 1) * kd];
        let mrow = &mut m[i * kd..(i + 1) * kd];
        let lrow = &mut l[i * vd..(i + 1) * vd];
        for j in 0..kd {
            let a = m2[j];
            let m1 = &first.m[j * kd..(j + 1) * kd];
            let l1 = &first.l[j * vd..(j + 1) * vd];
            for c in 0..kd {
                mrow[c] += a * m1[c];
            }
            for c in 0..vd {
                lrow[c] += a * l1[c];
            }
        }
    }
    Summary { k: kd, v: vd, m, l }
}

/// The state after the summarised tokens: `M s_in + L`, with `s_in` row-major K x V. Cost
/// `O(K^2 V)`.
pub fn apply<R: Real>(summary: &Summary<R>, s_in: &[R]) -> Result<Vec<R>> {
    let n = summary.k * summary.v;
    if s_in.len() != n {
        return Err(Error::invalid(
            "incoming state",
            format!("{} x {} = {n} values", summary.k, summary.v),
            s_in.len().to_string(),
        ));
    }
    Ok(apply_unchecked(summary, s_in))
}

fn apply_unchecked<R: Real>(summary: &Summary<R>, s_in: &[R]) -> Vec<R> {
    let (kd, vd) = (summary.k, summary.v);
    let mut out = summary.l.clone();
    for i in 0..kd {
        let orow = &mut out[i * vd..(i + 1) * vd];
        for j in 0..kd {
            let a = summary.m[i * kd + j];
            let srow = &s_in[j * vd..(j + 1) * vd];
            for c in 0..vd {
                orow[c] += a * srow[c];
            }
        }
    }
    out
}

/// The outputs of the tokens `[start, end)` of one sequence (which starts at `seq_start`) from
/// the incoming state `s`, by the token recurrence. `plain` is the problem without checkpoints;
/// the checkpoints (`every` tokens, counted from `seq_start`) are taken by cutting the range at
/// their positions.
fn segment_outputs<R: Real>(
    plain: &Problem,
    prep: &Prepared<R>,
    hv: usize,
    (seq_start, start, end): (usize, usize, usize),
    every: Option<usize>,
    mut s: Vec<R>,
) -> PairOut<R> {
    let mut o = Vec::with_capacity((end - start) * plain.v);
    let mut checkpoints = Vec::new();
    let mut at = start;
    while at < end {
        let (stop, checkpoint) = match every {
            Some(e) => {
                let next = seq_start.saturating_add(((at - seq_start) / e + 1).saturating_mul(e));
                (next.min(end), next <= end)
            }
            None => (end, false),
        };
        let pair = Pair {
            p: plain,
            prep,
            start: at,
            end: stop,
            hv,
        };
        let out = recurrence(&pair, s);
        o.extend_from_slice(&out.o);
        s = out.state;
        if checkpoint {
            checkpoints.push(s.clone());
        }
        at = stop;
    }
    PairOut {
        o,
        state: s,
        checkpoints,
    }
}

/// The segments `[a, b)` of `segment_len` tokens (the last one may be shorter) of `[start, end)`.
fn split(start: usize, end: usize, segment_len: usize) -> Vec<(usize, usize)> {
    (start..end)
        .step_by(segment_len)
        .map(|a| (a, a.saturating_add(segment_len).min(end)))
        .collect()
}

fn check_segment_len(segment_len: usize) -> Result<()> {
    if segment_len == 0 {
        Err(Error::invalid(
            "segment_len",
            "a positive number of tokens",
            "0",
        ))
    } else {
        Ok(())
    }
}

/// One (sequence, value head) segment-parallel from the state `s0`: the same [`PairOut`] as
/// [`recurrence`]`(pair, s0)` up to rounding. `pair.start` is the sequence's start (checkpoints
/// count from it). The segments are summarised in parallel, the incoming states chained through
/// [`apply`], and the segments' outputs computed in parallel.
pub fn segmented_pair<R: Real>(
    pair: &Pair<'_, R>,
    s0: Vec<R>,
    segment_len: usize,
) -> Result<PairOut<R>> {
    check_segment_len(segment_len)?;
    let p = pair.p;
    if s0.len() != p.k * p.v {
        return Err(Error::invalid(
            "initial state",
            format!("{} x {} = {} values", p.k, p.v, p.k * p.v),
            s0.len().to_string(),
        ));
    }
    let plain = Problem {
        checkpoint_every: None,
        ..p.clone()
    };
    let segs = split(pair.start, pair.end, segment_len);
    let last = segs.len().saturating_sub(1);
    let summaries: Vec<Summary<R>> = segs[..last]
        .par_iter()
        .map(|&(a, b)| {
            summarize(&Pair {
                p: &plain,
                prep: pair.prep,
                start: a,
                end: b,
                hv: pair.hv,
            })
        })
        .collect();
    let mut incoming = Vec::with_capacity(segs.len());
    let mut s = s0;
    for summary in &summaries {
        let next = apply_unchecked(summary, &s);
        incoming.push(s);
        s = next;
    }
    incoming.push(s);
    // a sequence without tokens keeps its initial state
    let empty = if segs.is_empty() {
        incoming.pop()
    } else {
        None
    };
    let outs: Vec<PairOut<R>> = segs
        .par_iter()
        .zip(incoming)
        .map(|(&(a, b), s_in)| {
            segment_outputs(
                &plain,
                pair.prep,
                pair.hv,
                (pair.start, a, b),
                p.checkpoint_every,
                s_in,
            )
        })
        .collect();
    Ok(concat(p, outs, empty))
}

/// Joins the outputs of a sequence's segments in order; `empty` is the state of a sequence
/// without tokens.
fn concat<R: Real>(p: &Problem, outs: Vec<PairOut<R>>, empty: Option<Vec<R>>) -> PairOut<R> {
    let mut o = Vec::new();
    let mut checkpoints = Vec::new();
    let mut state = empty.unwrap_or_else(|| vec![R::ZERO; p.k * p.v]);
    for out in outs {
        o.extend(out.o);
        checkpoints.extend(out.checkpoints);
        state = out.state;
    }
    PairOut {
        o,
        state,
        checkpoints,
    }
}

/// Runs a whole problem segment-parallel in precision `R`: the same [`Outputs`] (shapes,
/// layouts, dtypes, initial states dense or from a pool, in-place pool updates, checkpoints) as
/// the CPU `reference` kernel, equal to it up to rounding.
///
/// Every sequence is split into segments of `segment_len` tokens (its last one may be shorter).
/// The summaries of all (segment, value head) pairs but each sequence's last segment are
/// computed in parallel; each (sequence, value head) then carries its initial state through its
/// summaries serially ([`apply`]); finally every (segment, value head) runs the token recurrence
/// from its true incoming state in parallel, with checkpoints counted from the sequence's start.
/// Memory: one summary of K (K + V) values per (segment, value head).
pub fn segmented<R: Real>(p: &Problem, inputs: &Inputs, segment_len: usize) -> Result<Outputs> {
    check_segment_len(segment_len)?;
    let val = validate_inputs(p, inputs)?;
    segmented_validated::<R>(p, inputs, &val, segment_len)
}

/// [`segmented`] on inputs already validated against `p` (the backend's `segmented` kernel).
pub(crate) fn segmented_validated<R: Real>(
    p: &Problem,
    inputs: &Inputs,
    val: &Validated,
    segment_len: usize,
) -> Result<Outputs> {
    check_segment_len(segment_len)?;
    let prep = Prepared::<R>::new(p, inputs);
    let plain = Problem {
        checkpoint_every: None,
        ..p.clone()
    };
    let hvs = p.hv;
    // segments in sequence order: (sequence, start, end); first[n]..first[n + 1] are sequence n's
    let mut segs = Vec::new();
    let mut first = Vec::with_capacity(p.seqs + 1);
    for n in 0..p.seqs {
        first.push(segs.len());
        segs.extend(
            split(val.cu[n], val.cu[n + 1], segment_len)
                .into_iter()
                .map(|(a, b)| (n, a, b)),
        );
    }
    first.push(segs.len());
    let is_last = |j: usize| j + 1 == first[segs[j].0 + 1];

    // 1. summaries of every (segment, value head) whose successor needs them
    let summaries: Vec<Option<Summary<R>>> = (0..segs.len() * hvs)
        .into_par_iter()
        .map(|i| {
            let (j, hv) = (i / hvs, i % hvs);
            let (_, a, b) = segs[j];
            (!is_last(j)).then(|| {
                summarize(&Pair {
                    p: &plain,
                    prep: &prep,
                    start: a,
                    end: b,
                    hv,
                })
            })
        })
        .collect();

    // 2. the incoming state of every segment, serially along each (sequence, value head)
    let pairs: Vec<(usize, usize)> = (0..p.seqs)
        .flat_map(|n| (0..hvs).map(move |hv| (n, hv)))
        .collect();
    let chains: Vec<(Vec<Vec<R>>, Vec<R>)> = pairs
        .par_iter()
        .map(|&(n, hv)| {
            let s0 = initial_state::<R>(p, inputs, val, n, hv);
            let mut incoming = Vec::with_capacity(first[n + 1] - first[n]);
            let mut s = s0.clone();
            for j in first[n]..first[n + 1] {
                let next = summaries[j * hvs + hv]
                    .as_ref()
                    .map(|summary| apply_unchecked(summary, &s));
                incoming.push(s);
                match next {
                    Some(next) => s = next,
                    None => break,
                }
            }
            (incoming, s0)
        })
        .collect();
    drop(summaries);
    let mut s_in: Vec<Option<Vec<R>>> = vec![None; segs.len() * hvs];
    let mut empty: Vec<Option<Vec<R>>> = Vec::with_capacity(pairs.len());
    for (&(n, hv), (incoming, s0)) in pairs.iter().zip(chains) {
        for (j, s) in (first[n]..first[n + 1]).zip(incoming) {
            s_in[j * hvs + hv] = Some(s);
        }
        empty.push((first[n] == first[n + 1]).then_some(s0));
    }

    // 3. every (segment, value head) from its true incoming state
    let outs: Vec<PairOut<R>> = s_in
        .into_par_iter()
        .enumerate()
        .map(|(i, s)| {
            let (j, hv) = (i / hvs, i % hvs);
            let (n, a, b) = segs[j];
            let s = s.unwrap_or_else(|| vec![R::ZERO; p.k * p.v]);
            segment_outputs(&plain, &prep, hv, (val.cu[n], a, b), p.checkpoint_every, s)
        })
        .collect();

    // 4. per (sequence, value head), its segments in order, then the reference's assembly
    let mut per_seg: Vec<Option<PairOut<R>>> = outs.into_iter().map(Some).collect();
    let results: Vec<PairOut<R>> = pairs
        .iter()
        .zip(empty)
        .map(|(&(n, hv), empty)| {
            let mine = (first[n]..first[n + 1])
                .filter_map(|j| per_seg[j * hvs + hv].take())
                .collect();
            concat(p, mine, empty)
        })
        .collect();
    Ok(super::assemble(p, inputs, val, &pairs, &results))
}

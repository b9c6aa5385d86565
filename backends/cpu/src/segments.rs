//! Exact sequence parallelism (docs/segments.md) on the CPU: the summary of a run of tokens as an
//! affine map of the state entering it, computed by the token recurrence ([`summarize`]), and a
//! whole-problem path that splits every sequence into segments, summarises the segments in
//! parallel, chains the summaries along each sequence and then runs every segment from its true
//! incoming state. In f64 that path is the backend's `segmented` kernel (`cpu:segmented`). The
//! algebra of summaries ([`Summary`], [`compose`], [`apply`], re-exported here) and the cuts of a
//! sequence come from `deltarule_core::segments`, which every backend shares.
//!
//! The summaries are exact: nothing is truncated and nothing depends on the gate values (a log
//! decay of -inf makes its factor's decay exactly 0, and a decay that underflows gives 0 the way
//! the token recurrence gives it).

use crate::prep::{initial_state, Prepared};
use crate::real::Real;
use crate::reference::{recurrence, Pair, PairOut};
use deltarule_core::segments::{check_segment_len, checkpoint_pieces, segment_cuts};
use deltarule_core::{validate_inputs, Error, Inputs, Op, Outputs, Problem, Result, Validated};
use rayon::prelude::*;

pub use deltarule_core::segments::{apply, compose, Summary};

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
    let mut summary = Summary::identity(kd, vd);
    let (m, l) = summary.parts_mut();
    for (i, row) in x.chunks(w).enumerate() {
        m[i * kd..(i + 1) * kd].copy_from_slice(&row[..kd]);
        l[i * vd..(i + 1) * vd].copy_from_slice(&row[kd..]);
    }
    summary
}

/// The outputs of the tokens `[start, end)` of one sequence (which starts at `seq_start`) from
/// the incoming state `s`, by the token recurrence. `plain` is the problem without checkpoints;
/// the checkpoints (`every` tokens, counted from `seq_start`) are taken by cutting the range at
/// their positions ([`checkpoint_pieces`]).
fn segment_outputs<R: Real>(
    plain: &Problem,
    prep: &Prepared<R>,
    hv: usize,
    (seq_start, start, end): (usize, usize, usize),
    every: Option<usize>,
    mut s: Vec<R>,
) -> Result<PairOut<R>> {
    let mut o = Vec::with_capacity((end - start) * plain.v);
    let mut checkpoints = Vec::new();
    for piece in checkpoint_pieces(start - seq_start..end - seq_start, every)? {
        let pair = Pair {
            p: plain,
            prep,
            start: seq_start + piece.tokens.start,
            end: seq_start + piece.tokens.end,
            hv,
        };
        let out = recurrence(&pair, s);
        o.extend_from_slice(&out.o);
        s = out.state;
        if piece.checkpoint {
            checkpoints.push(s.clone());
        }
    }
    Ok(PairOut {
        o,
        state: s,
        checkpoints,
    })
}

/// The segments `(a, b)` of `segment_len` tokens (the last one may be shorter) of the sequence
/// `[start, end)`, in absolute token positions ([`segment_cuts`]).
fn split(start: usize, end: usize, segment_len: usize) -> Result<Vec<(usize, usize)>> {
    Ok(segment_cuts(end.saturating_sub(start), segment_len)?
        .into_iter()
        .map(|r| (start + r.start, start + r.end))
        .collect())
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
    let segs = split(pair.start, pair.end, segment_len)?;
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
        let next = apply(summary, &s)?;
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
        .collect::<Result<_>>()?;
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
            split(val.cu[n], val.cu[n + 1], segment_len)?
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
                    .map(|summary| apply(summary, &s))
                    .transpose()?;
                incoming.push(s);
                match next {
                    Some(next) => s = next,
                    None => break,
                }
            }
            Ok((incoming, s0))
        })
        .collect::<Result<_>>()?;
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
        .collect::<Result<_>>()?;

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

//! The exact segment algebra of docs/segments.md, shared by every backend and by context
//! parallelism across devices: the summary of a run of tokens as an affine map of the state
//! entering it ([`Summary`]), the composition of two such maps ([`compose`]), the application of
//! one to a state ([`apply`]), and where a sequence is cut ([`segment_cuts`], and
//! [`checkpoint_pieces`] inside a segment).
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
//! depends on the gate values. How a summary is computed from the tokens belongs to each backend
//! (the CPU backend runs its token recurrence on `[M | L]`); this module holds what every backend
//! does with summaries once they exist.

use crate::error::{Error, Result};
use crate::real::Real;
use std::ops::Range;

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

    /// `(M, L)` to write in place (a backend filling a summary it computes); the dims stay fixed.
    pub fn parts_mut(&mut self) -> (&mut [R], &mut [R]) {
        (&mut self.m, &mut self.l)
    }

    /// `(M, L)`.
    pub fn into_parts(self) -> (Vec<R>, Vec<R>) {
        (self.m, self.l)
    }
}

/// The summary of `first` followed by `second`: `M = M2 M1`, `L = M2 L1 + L2`. Associative;
/// cost `O(K^2 (K + V))`. Summaries of different dims are an invalid argument.
pub fn compose<R: Real>(first: &Summary<R>, second: &Summary<R>) -> Result<Summary<R>> {
    if second.k != first.k || second.v != first.v {
        return Err(Error::invalid(
            "second summary",
            format!("a summary of K = {}, V = {}", first.k, first.v),
            format!("K = {}, V = {}", second.k, second.v),
        ));
    }
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
    Ok(Summary { k: kd, v: vd, m, l })
}

/// The state after the summarised tokens: `M s_in + L`, with `s_in` row-major K x V. Cost
/// `O(K^2 V)`. An `s_in` of another length is an invalid argument.
pub fn apply<R: Real>(summary: &Summary<R>, s_in: &[R]) -> Result<Vec<R>> {
    let (kd, vd) = (summary.k, summary.v);
    if s_in.len() != kd * vd {
        return Err(Error::invalid(
            "incoming state",
            format!("{kd} x {vd} = {} values", kd * vd),
            s_in.len().to_string(),
        ));
    }
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
    Ok(out)
}

/// A segment length of 0 is an invalid argument; any positive length is taken.
pub fn check_segment_len(segment_len: usize) -> Result<()> {
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

/// The segments of a sequence of `len` tokens, in order, as token ranges counted from the
/// sequence's start: `[0, s)`, `[s, 2s)`, ... with `s = segment_len`, the last one ending at `len`
/// (it may be shorter). They cover `[0, len)` exactly, none is empty, and a sequence without
/// tokens has none. Every cut lies at a multiple of `segment_len`, so a length that is a multiple
/// of the chunk ([`crate::problem::CHUNK`]) cuts only on chunk edges, where a chunked segment pass
/// cuts. A `segment_len` of 0 is an invalid argument.
pub fn segment_cuts(len: usize, segment_len: usize) -> Result<Vec<Range<usize>>> {
    check_segment_len(segment_len)?;
    Ok((0..len)
        .step_by(segment_len)
        .map(|a| a..a.saturating_add(segment_len).min(len))
        .collect())
}

/// A run of tokens inside one segment between checkpoint positions (see [`checkpoint_pieces`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Piece {
    /// The tokens, counted from the sequence's start.
    pub tokens: Range<usize>,
    /// Whether the state after `tokens.end` is a checkpoint (`tokens.end` is a multiple of the
    /// checkpoint interval).
    pub checkpoint: bool,
}

/// The tokens `segment` (counted from the sequence's start) cut at the checkpoint positions inside
/// it: with `every = Some(e)`, a piece ends at every multiple of `e` in `(segment.start,
/// segment.end]` and is marked as a checkpoint there, and a last unmarked piece ends at
/// `segment.end` if that is not such a multiple; with `None`, the one piece `segment`, unmarked.
/// The pieces cover `segment` in order; an empty segment has none. Each checkpoint of the sequence
/// then falls in exactly one segment, whatever the segment length. An interval of 0 is an invalid
/// argument.
pub fn checkpoint_pieces(segment: Range<usize>, every: Option<usize>) -> Result<Vec<Piece>> {
    if every == Some(0) {
        return Err(Error::invalid(
            "checkpoint_every",
            "a positive integer",
            "0",
        ));
    }
    let mut pieces = Vec::new();
    let mut at = segment.start;
    while at < segment.end {
        let (stop, checkpoint) = match every {
            Some(e) => {
                let next = (at / e + 1).saturating_mul(e);
                (next.min(segment.end), next <= segment.end)
            }
            None => (segment.end, false),
        };
        pieces.push(Piece {
            tokens: at..stop,
            checkpoint,
        });
        at = stop;
    }
    Ok(pieces)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::problem::CHUNK;

    /// A small deterministic generator (xorshift64*) of values in [-1, 1).
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> f64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            let x = self.0.wrapping_mul(0x2545_f491_4f6c_dd1d);
            (x >> 11) as f64 / (1u64 << 52) as f64 - 1.0
        }

        fn vec(&mut self, n: usize) -> Vec<f64> {
            (0..n).map(|_| self.next()).collect()
        }

        fn summary(&mut self, k: usize, v: usize) -> Summary<f64> {
            Summary::new(k, v, self.vec(k * k), self.vec(k * v)).expect("lengths match")
        }
    }

    /// Dims of the random maps: square and not, K or V of 1.
    const DIMS: [(usize, usize); 5] = [(1, 1), (1, 4), (3, 1), (4, 4), (5, 3)];

    fn max_abs_diff(a: &[f64], b: &[f64]) -> f64 {
        assert_eq!(a.len(), b.len());
        a.iter()
            .zip(b)
            .map(|(x, y)| (x - y).abs())
            .fold(0.0, f64::max)
    }

    fn is_invalid<T: std::fmt::Debug>(r: Result<T>) -> bool {
        matches!(r, Err(Error::InvalidArgument { .. }))
    }

    #[test]
    fn compose_is_associative() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        for (k, v) in DIMS {
            for _ in 0..20 {
                let (a, b, c) = (rng.summary(k, v), rng.summary(k, v), rng.summary(k, v));
                let left = compose(&compose(&a, &b).expect("ab"), &c).expect("(ab)c");
                let right = compose(&a, &compose(&b, &c).expect("bc")).expect("a(bc)");
                assert_eq!((left.k(), left.v()), (k, v));
                assert!(max_abs_diff(left.m(), right.m()) <= 1e-12, "M, K {k} V {v}");
                assert!(max_abs_diff(left.l(), right.l()) <= 1e-12, "L, K {k} V {v}");
            }
        }
    }

    #[test]
    fn identity_is_neutral() {
        let mut rng = Rng(7);
        for (k, v) in DIMS {
            let a = rng.summary(k, v);
            let id = Summary::<f64>::identity(k, v);
            assert_eq!(compose(&id, &a).expect("ia"), a);
            assert_eq!(compose(&a, &id).expect("ai"), a);
            let s = rng.vec(k * v);
            assert_eq!(apply(&id, &s).expect("apply identity"), s);
        }
    }

    #[test]
    fn applying_a_composition_is_applying_in_turn() {
        let mut rng = Rng(12345);
        for (k, v) in DIMS {
            for _ in 0..20 {
                let (a, b) = (rng.summary(k, v), rng.summary(k, v));
                let s = rng.vec(k * v);
                let at_once = apply(&compose(&a, &b).expect("ab"), &s).expect("apply ab");
                let in_turn = apply(&b, &apply(&a, &s).expect("apply a")).expect("apply b after a");
                assert!(max_abs_diff(&at_once, &in_turn) <= 1e-12, "K {k} V {v}");
            }
        }
    }

    #[test]
    fn parts_are_the_maps_written() {
        let mut s = Summary::<f32>::identity(2, 3);
        let (m, l) = s.parts_mut();
        m.copy_from_slice(&[0.5, 0.0, 0.0, 2.0]);
        l.copy_from_slice(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        assert_eq!(
            apply(&s, &[2.0; 6]).expect("apply"),
            vec![2.0, 3.0, 4.0, 8.0, 9.0, 10.0]
        );
        let (m, l) = s.into_parts();
        assert_eq!((m.len(), l.len()), (4, 6));
    }

    #[test]
    fn shape_mismatches_are_invalid_arguments() {
        assert!(is_invalid(Summary::<f64>::new(
            2,
            2,
            vec![0.0; 3],
            vec![0.0; 4]
        )));
        assert!(is_invalid(Summary::<f64>::new(
            2,
            2,
            vec![0.0; 4],
            vec![0.0; 5]
        )));
        let a = Summary::<f64>::identity(4, 4);
        assert!(is_invalid(compose(&a, &Summary::identity(4, 2))));
        assert!(is_invalid(compose(&a, &Summary::identity(2, 4))));
        assert!(is_invalid(apply(&a, &[0.0; 10])));
        assert!(is_invalid(apply(&a, &[])));
    }

    #[test]
    fn segment_cuts_cover_the_sequence_on_chunk_edges() {
        for segment_len in [CHUNK, 2 * CHUNK, 3 * CHUNK, 1, 7, 1000] {
            for len in (0..=4 * CHUNK + 3).chain([5000, 8192]) {
                let cuts = segment_cuts(len, segment_len).expect("positive length");
                let mut at = 0;
                for (i, r) in cuts.iter().enumerate() {
                    assert_eq!(r.start, at, "len {len} segment_len {segment_len}");
                    assert!(r.end > r.start && r.end - r.start <= segment_len);
                    if i + 1 < cuts.len() {
                        assert_eq!(r.end - r.start, segment_len);
                        if segment_len % CHUNK == 0 {
                            assert_eq!(r.end % CHUNK, 0, "a cut off a chunk edge");
                        }
                    }
                    at = r.end;
                }
                assert_eq!(at, len, "len {len} segment_len {segment_len}");
                assert_eq!(cuts.len(), len.div_ceil(segment_len));
            }
        }
        assert!(is_invalid(segment_cuts(100, 0)));
        assert!(is_invalid(segment_cuts(0, 0)));
    }

    #[test]
    fn checkpoint_pieces_cut_at_every_multiple() {
        for every in [1, 3, 64, 100] {
            for segment_len in [1, 7, 64, 150] {
                let len = 301;
                let mut ends = Vec::new();
                for seg in segment_cuts(len, segment_len).expect("positive length") {
                    let pieces = checkpoint_pieces(seg.clone(), Some(every)).expect("every > 0");
                    let mut at = seg.start;
                    for piece in &pieces {
                        assert_eq!(piece.tokens.start, at);
                        assert!(piece.tokens.end > at && piece.tokens.end <= seg.end);
                        assert_eq!(piece.checkpoint, piece.tokens.end % every == 0);
                        if piece.tokens.end < seg.end {
                            assert!(piece.checkpoint, "a cut that is not a checkpoint");
                        }
                        if piece.checkpoint {
                            ends.push(piece.tokens.end);
                        }
                        at = piece.tokens.end;
                    }
                    assert_eq!(at, seg.end);
                }
                // every checkpoint of the sequence once, whatever the segments
                let want: Vec<usize> = (1..=len).filter(|t| t % every == 0).collect();
                assert_eq!(ends, want, "every {every} segment_len {segment_len}");
            }
        }
        assert_eq!(
            checkpoint_pieces(5..9, None).expect("no checkpoints"),
            vec![Piece {
                tokens: 5..9,
                checkpoint: false
            }]
        );
        assert!(checkpoint_pieces(4..4, Some(2)).expect("empty").is_empty());
        assert!(is_invalid(checkpoint_pieces(0..8, Some(0))));
    }
}

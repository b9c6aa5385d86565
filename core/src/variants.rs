//! The kernel-variant domain: which problems the CUDA backend's T-form kernels accept.
//!
//! The rule table ([`crate::select`](mod@crate::select)) and the CUDA backend both ask these functions, so the
//! domain of each variant is written once.
//!
//! **The T-form** (gdn only). The chunked algorithm's intra-chunk stage normally materialises
//! `W = T (beta k)` and `U = T (beta v)` for every chunk (T the inverse of the chunk's
//! lower-triangular system). The T-form keeps the two triangular factors instead, `T_w` and
//! `T_u` (plus P and the per-token decay factors), and lets the state pass rebuild `W·S` and `U`
//! from the inputs' own k and v rows, which it loads by TMA as its 16-bit MMA operands. Its
//! split (small-bh) pair writes about 37 KB of workspace per (chunk, value head) block instead of
//! about 92 KB. It needs q/k/v stored in bf16 or f16 (the operands are read as they are stored)
//! and gdn's scalar decay, which folds into T's columns; kda's per-key-channel decay does not.
//!
//! **The fused T-form** (the CUDA gdn `chunked` kernel where it applies). One CTA per (sequence,
//! value head) as the classic fused kernel, but the T-form intra stage stays in shared memory and
//! no running state is kept in registers across it, so two CTAs fit on a multiprocessor. The
//! state between a sequence's chunks lives in its f32 final-state row instead, so every sequence
//! must have one: a dense final state stored in f32 (a pool row may be -1, "not written", and a
//! 16-bit row would round the running state). Its state work runs per 64 value columns, so K and
//! V are at least 64 (the CUDA modules compile it only there). Everywhere else the classic fused
//! kernel runs.

use crate::dtype::DType;
use crate::problem::{FinalState, Op, Problem};

/// gdn with 16-bit q/k/v: the T-form (`T_w`, `T_u`) small-bh pair and fused kernel apply.
pub fn tform_applies(p: &Problem) -> bool {
    p.op == Op::Gdn && matches!(p.qkv_dtype, DType::BF16 | DType::F16)
}

/// The fused T-form kernel: gdn, K >= 64, V >= 64, dense final state stored in f32 (any q/k/v
/// dtype, any initial state).
pub fn fused_tform_applies(p: &Problem) -> bool {
    p.op == Op::Gdn
        && p.k >= 64
        && p.v >= 64
        && p.final_state == FinalState::Dense
        && p.state_out_dtype == DType::F32
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::problem::{InitialState, Mode};

    fn gdn(k: usize, v: usize) -> Problem {
        Problem::new(Op::Gdn, Mode::Prefill, 2, 256, 4, 8, k, v)
    }

    #[test]
    fn tform_needs_gdn_and_16_bit_inputs() {
        let mut p = gdn(128, 128);
        for (dtype, applies) in [(DType::BF16, true), (DType::F16, true), (DType::F32, false)] {
            p.qkv_dtype = dtype;
            assert_eq!(tform_applies(&p), applies, "{dtype}");
        }
        let mut p = gdn(32, 32);
        p.qkv_dtype = DType::F16;
        assert!(tform_applies(&p), "no head-dim bound of its own");
        p.op = Op::Kda;
        assert!(!tform_applies(&p));
    }

    #[test]
    fn fused_tform_needs_gdn_wide_heads_and_dense_f32_final_state() {
        let mut p = gdn(64, 64);
        assert!(fused_tform_applies(&p));
        p.qkv_dtype = DType::F32;
        p.initial = InitialState::Dense;
        assert!(
            fused_tform_applies(&p),
            "any input dtype, any initial state"
        );
        for (k, v) in [(32, 64), (64, 32), (32, 32)] {
            assert!(!fused_tform_applies(&gdn(k, v)), "K {k} V {v}");
        }
        for dtype in [DType::BF16, DType::F16] {
            let mut q = gdn(128, 128);
            q.state_out_dtype = dtype;
            assert!(!fused_tform_applies(&q), "{dtype}");
        }
        for fin in [FinalState::None, FinalState::InPlace] {
            let mut q = gdn(128, 128);
            q.final_state = fin;
            assert!(!fused_tform_applies(&q), "{fin:?}");
        }
        let mut q = gdn(128, 128);
        q.op = Op::Kda;
        assert!(!fused_tform_applies(&q));
    }
}

//! The float64 reference outputs of a case, run here: whole, or as independent (sequence, value
//! head) pieces in parallel with progress.

use super::Geometry;
use crate::casefile::Case;
use deltarule_core::problem::{FinalState, InitialState};
use deltarule_core::{Backend, HostTensor, Inputs, Kernel, Outputs, Problem, Result};
use deltarule_cpu::CpuBackend;
use rayon::prelude::*;

/// The float64 reference outputs of a case (run here, not read from the file).
pub fn reference_outputs(case: &Case) -> Result<Outputs> {
    CpuBackend::new().run(Kernel::Reference, &case.problem, &case.inputs)
}

/// [`reference_outputs`], reporting progress: the problem is run as independent (sequence, value
/// head) pieces, and `progress(done, total)` is called as each finishes (from worker threads).
/// The outputs are bit-identical to [`reference_outputs`]: each piece is the same float64
/// recurrence on the same inputs. A problem that cannot be split (decode of a pool, for one) runs
/// whole, with one call at the end.
pub fn reference_outputs_with_progress(
    case: &Case,
    progress: &(dyn Fn(usize, usize) + Sync),
) -> Result<Outputs> {
    // the pieces are cut from the inputs: check them first, as the whole run does
    deltarule_core::validate_inputs(&case.problem, &case.inputs)?;
    let g = Geometry::of_case(case)?;
    let p = &case.problem;
    let pieces: Vec<(usize, usize)> = (0..p.seqs)
        .flat_map(|n| (0..p.hv).map(move |h| (n, h)))
        .collect();
    let total = pieces.len();
    let done = std::sync::atomic::AtomicUsize::new(0);
    let splittable = p.mode == deltarule_core::Mode::Prefill && total > 1;
    if !splittable {
        let out = reference_outputs(case)?;
        progress(total.max(1), total.max(1));
        return Ok(out);
    }
    let cpu = CpuBackend::new();
    let results: Vec<Result<Outputs>> = pieces
        .par_iter()
        .map(|&(n, h)| {
            let r = piece(case, &g, n, h)
                .and_then(|(sub, inputs)| cpu.run(Kernel::Reference, &sub, &inputs));
            let d = done.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
            progress(d, total);
            r
        })
        .collect();
    let mut o = HostTensor::poison(p.out_dtype, p.o_shape());
    let mut final_state = match p.final_state {
        FinalState::InPlace => case.inputs.initial_state.clone(),
        FinalState::Dense => Some(HostTensor::poison(p.state_out_dtype, p.state_shape(p.seqs))),
        FinalState::None => None,
    };
    let offs = p
        .checkpoint_every
        .map(|e| deltarule_core::varlen::checkpoint_offsets(&g.cu, e));
    let mut checkpoints = offs.as_ref().map(|o| {
        HostTensor::poison(
            p.state_out_dtype,
            p.state_shape(o.last().copied().unwrap_or(0)),
        )
    });
    let se = p.state_elems();
    for (&(n, h), r) in pieces.iter().zip(results) {
        let out = r?;
        let ov = out.o.to_f64_vec();
        for i in 0..g.seq_len(n) {
            o.write_f64(
                ((g.cu[n] + i) * p.hv + h) * p.v,
                &ov[i * p.v..(i + 1) * p.v],
            );
        }
        if let (Some(dst), Some(src)) = (final_state.as_mut(), out.final_state.as_ref()) {
            let row = match (&g.state_indices, p.final_state) {
                (Some(idx), FinalState::InPlace) => usize::try_from(idx[n]).ok(),
                _ => Some(n),
            };
            if let Some(row) = row {
                dst.write_f64((row * p.hv + h) * se, &src.to_f64_vec());
            }
        }
        if let (Some(dst), Some(src), Some(offs)) = (
            checkpoints.as_mut(),
            out.checkpoints.as_ref(),
            offs.as_ref(),
        ) {
            let v = src.to_f64_vec();
            for c in 0..offs[n + 1] - offs[n] {
                dst.write_f64(((offs[n] + c) * p.hv + h) * se, &v[c * se..(c + 1) * se]);
            }
        }
    }
    Ok(Outputs {
        o,
        final_state,
        checkpoints,
    })
}

/// Rows `[a, b)` of axis 0 of `t`, with axis 1 reduced to index `h`; only the elements taken
/// are read, and they keep their dtype exactly.
fn slice_rows(t: &HostTensor, a: usize, b: usize, h: usize) -> HostTensor {
    let heads = t.shape.get(1).copied().unwrap_or(1);
    let inner: usize = t.shape.iter().skip(2).product();
    let mut out = Vec::with_capacity((b - a) * inner);
    for r in a..b {
        let s = (r * heads + h) * inner;
        out.extend((s..s + inner).map(|i| t.get_f64(i)));
    }
    let mut shape = t.shape.clone();
    shape[0] = b - a;
    if shape.len() > 1 {
        shape[1] = 1;
    }
    HostTensor::from_f64(t.dtype(), shape, &out)
}

/// One (sequence, value head) piece of a case as a problem of one sequence and one head.
fn piece(case: &Case, g: &Geometry, n: usize, h: usize) -> Result<(Problem, Inputs)> {
    let p = &case.problem;
    let i = &case.inputs;
    let (a, b) = (g.cu[n], g.cu[n + 1]);
    let qh = h / p.group().max(1);
    let gk = i.g.shape.get(2).copied().unwrap_or(1);
    let flat = |t: &Option<HostTensor>, per: usize| {
        t.as_ref().map(|t| {
            let v: Vec<f64> = (h * per..(h + 1) * per).map(|i| t.get_f64(i)).collect();
            HostTensor::from_f64(t.dtype(), vec![per], &v)
        })
    };
    let row = match (&g.state_indices, p.initial) {
        (Some(idx), InitialState::Pool { .. }) => usize::try_from(idx[n]).ok(),
        (_, InitialState::Dense) => Some(n),
        _ => None,
    };
    let initial_state = match (&i.initial_state, row) {
        (Some(s), Some(r)) => Some(slice_rows(s, r, r + 1, h)),
        _ => None,
    };
    let inputs = Inputs {
        q: slice_rows(&i.q, a, b, qh),
        k: slice_rows(&i.k, a, b, qh),
        v: slice_rows(&i.v, a, b, h),
        g: slice_rows(&i.g, a, b, h),
        beta: slice_rows(&i.beta, a, b, h),
        cu_seqlens: HostTensor::from_i64(i.cu_seqlens.dtype(), vec![2], &[0, (b - a) as i64]),
        a_log: flat(&i.a_log, 1),
        dt_bias: flat(&i.dt_bias, gk),
        initial_state,
        state_indices: None,
    };
    let mut template = p.clone();
    template.final_state = FinalState::Dense;
    let sub = Problem::from_inputs(&template, &inputs)?;
    Ok((sub, inputs))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::generate::{generate, DataStyle};
    use deltarule_core::problem::{Gate, Mode, Op};
    use deltarule_core::{DType, StateLayout};

    /// The reference run in (sequence, value head) pieces equals the whole run bit for bit, for
    /// pools with unnamed sequences, checkpoints, grouped heads, both layouts and in-kernel gates.
    #[test]
    fn the_reference_in_pieces_is_bit_identical_to_the_whole_run() {
        let mut problems = Vec::new();
        let mut p = Problem::new(Op::Kda, Mode::Prefill, 1, 1, 2, 4, 16, 24);
        p.gate = Gate::Softplus;
        p.a_log = true;
        p.layout = StateLayout::Vk;
        p.initial = InitialState::Pool { rows: 6 };
        p.final_state = FinalState::InPlace;
        p.state_in_dtype = DType::BF16;
        p.state_out_dtype = DType::BF16;
        p.checkpoint_every = Some(8);
        p.l2norm = true;
        problems.push((p, vec![20, 0, 33, 9, 17]));
        let mut p = Problem::new(Op::Gdn, Mode::Prefill, 1, 1, 1, 3, 32, 16);
        p.initial = InitialState::Dense;
        problems.push((p.clone(), vec![70, 5]));
        p.initial = InitialState::None;
        p.final_state = FinalState::None;
        problems.push((p, vec![3, 1, 64]));
        for (i, (p, lens)) in problems.iter().enumerate() {
            let case = generate(p, lens, i as u64 + 11, DataStyle::default()).expect("generate");
            let whole = reference_outputs(&case).expect("whole");
            let calls = std::sync::atomic::AtomicUsize::new(0);
            let pieces = reference_outputs_with_progress(&case, &|d, t| {
                assert!(d <= t);
                calls.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            })
            .expect("pieces");
            assert_eq!(calls.into_inner(), lens.len() * p.hv, "problem {i}");
            assert!(pieces.o.bit_identical(&whole.o), "o of problem {i}");
            match (&pieces.final_state, &whole.final_state) {
                (Some(a), Some(b)) => assert!(a.bit_identical(b), "final state of problem {i}"),
                (a, b) => assert_eq!(a.is_some(), b.is_some(), "problem {i}"),
            }
            match (&pieces.checkpoints, &whole.checkpoints) {
                (Some(a), Some(b)) => assert!(a.bit_identical(b), "checkpoints of problem {i}"),
                (a, b) => assert_eq!(a.is_some(), b.is_some(), "problem {i}"),
            }
        }
    }
}

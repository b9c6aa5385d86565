//! # deltarule-cpu
//!
//! The CPU backend: the float64 token recurrence (the executable spec, [`reference`]), the chunked
//! algorithm of docs/spec.md in f32 and f64 with the GPU kernels' stage split ([`chunked`]), the
//! exact segment-parallel prefill of docs/segments.md in f64 ([`segments`]), and decode (T >= 1
//! tokens per sequence, pool updated in place). Work is parallel over (sequence, value head) pairs
//! with rayon (the segmented prefill also over segments). Every option of docs/spec.md works on
//! every path. [`options`] lists the one variable the backend reads.

pub mod chunked;
pub mod options;
pub mod prep;
pub mod real;
pub mod reference;
pub mod segments;

use deltarule_core::{
    validate_inputs, Backend, BackendKind, Capabilities, Error, FinalState, HostTensor, Inputs,
    Kernel, Outputs, Problem, Result, Validated,
};
use options::{EnvError, Options, SEGMENT_LEN_VAR};
use prep::{initial_state, Prepared};
use rayon::prelude::*;
use real::Real;
use reference::{Pair, PairOut};

/// The CPU backend. Always available.
pub struct CpuBackend {
    caps: Capabilities,
    /// The options, or the variable's value that the backend does not take (the `segmented`
    /// kernel fails with it).
    options: std::result::Result<Options, EnvError>,
}

impl Default for CpuBackend {
    fn default() -> Self {
        Self::new()
    }
}

impl CpuBackend {
    /// The backend with the options of the environment ([`Options::from_env`]).
    pub fn new() -> Self {
        let options = Options::from_env();
        let mut caps = Capabilities::cpu(rayon::current_num_threads());
        match &options {
            Ok(o) if o.segment_len != options::DEFAULT_SEGMENT_LEN => caps.notes.push(format!(
                "segmented: {} tokens per segment ({SEGMENT_LEN_VAR})",
                o.segment_len
            )),
            Ok(_) => {}
            Err(e) => caps.notes.push(format!(
                "{}={:?} is not {}: the segmented kernel fails",
                e.var, e.got, e.expected
            )),
        }
        CpuBackend { caps, options }
    }

    /// The backend with explicit options (no variable is read); a `segment_len` of 0 makes the
    /// `segmented` kernel fail with an invalid argument.
    pub fn with_options(options: Options) -> Self {
        CpuBackend {
            caps: Capabilities::cpu(rayon::current_num_threads()),
            options: Ok(options),
        }
    }

    /// The options in effect, or the error of the variable that set a value they do not take.
    pub fn options(&self) -> Result<&Options> {
        self.options.as_ref().map_err(|e| e.clone().into())
    }
}

/// How a (sequence, value head) pair is computed.
#[derive(Clone, Copy)]
enum Algo {
    /// Token by token ([`reference::recurrence`]).
    TokenRecurrence,
    /// Chunk by chunk ([`chunked::chunked`]).
    Chunked,
}

impl Backend for CpuBackend {
    fn kind(&self) -> BackendKind {
        BackendKind::Cpu
    }

    fn caps(&self) -> &Capabilities {
        &self.caps
    }

    fn kernels(&self) -> &'static [Kernel] {
        &[
            Kernel::Reference,
            Kernel::Chunked,
            Kernel::ChunkedF64,
            Kernel::Segmented,
        ]
    }

    fn run(&self, kernel: Kernel, p: &Problem, inputs: &Inputs) -> Result<Outputs> {
        let val = validate_inputs(p, inputs)?;
        match kernel {
            Kernel::Reference => Ok(run_with::<f64>(p, inputs, &val, Algo::TokenRecurrence)),
            Kernel::ChunkedF64 => Ok(run_with::<f64>(p, inputs, &val, Algo::Chunked)),
            Kernel::Chunked => Ok(run_with::<f32>(p, inputs, &val, Algo::Chunked)),
            Kernel::Segmented => {
                let segment_len = self.options()?.segment_len;
                segments::segmented_validated::<f64>(p, inputs, &val, segment_len)
            }
            other => Err(Error::unsupported(
                BackendKind::Cpu,
                other.name(),
                "the CPU backend has the kernels reference, chunked, chunked-f64 and segmented",
            )),
        }
    }
}

/// Runs every (sequence, value head) pair in precision `R` and assembles the outputs.
fn run_with<R: Real>(p: &Problem, inputs: &Inputs, val: &Validated, algo: Algo) -> Outputs {
    let prep = Prepared::<R>::new(p, inputs);
    let pairs: Vec<(usize, usize)> = (0..p.seqs)
        .flat_map(|n| (0..p.hv).map(move |hv| (n, hv)))
        .collect();
    let one = |&(n, hv): &(usize, usize)| {
        let pair = Pair {
            p,
            prep: &prep,
            start: val.cu[n],
            end: val.cu[n + 1],
            hv,
        };
        let s0 = initial_state::<R>(p, inputs, val, n, hv);
        match algo {
            Algo::TokenRecurrence => reference::recurrence(&pair, s0),
            Algo::Chunked => chunked::chunked(&pair, s0),
        }
    };
    let results: Vec<PairOut<R>> = if runs_inline(p) {
        pairs.iter().map(one).collect()
    } else {
        pairs.par_iter().map(one).collect()
    };
    assemble(p, inputs, val, &pairs, &results)
}

/// State updates (tokens x value heads x K x V multiply-adds) below which a call runs on the
/// calling thread. A decode step of a small model is a few hundred thousand; handing it to the
/// thread pool wakes workers that then spin beside the caller's own threads: inside a PyTorch
/// decode loop on 2 cores, torch's matrix products took 4 times as long (49.6 against 12.1 us
/// a product) while the pool was awake.
pub const INLINE_WORK: usize = 1 << 19;

/// Whether `p` is small enough to run on the calling thread (see [`INLINE_WORK`]).
pub fn runs_inline(p: &Problem) -> bool {
    p.tokens
        .saturating_mul(p.hv)
        .saturating_mul(p.k)
        .saturating_mul(p.v)
        < INLINE_WORK
}

fn to_f64<R: Real>(x: &[R]) -> Vec<f64> {
    x.iter().map(|a| a.to_f64()).collect()
}

/// Writes a row-major K x V state into `dst` at state slot `slot` in the problem's layout.
fn write_state<R: Real>(p: &Problem, dst: &mut HostTensor, slot: usize, s: &[R]) {
    let mut laid = vec![0.0f64; p.k * p.v];
    for kk in 0..p.k {
        for vv in 0..p.v {
            laid[p.layout.offset(kk, vv, p.k, p.v)] = s[kk * p.v + vv].to_f64();
        }
    }
    dst.write_f64(slot * p.k * p.v, &laid);
}

fn assemble<R: Real>(
    p: &Problem,
    inputs: &Inputs,
    val: &Validated,
    pairs: &[(usize, usize)],
    results: &[PairOut<R>],
) -> Outputs {
    let mut o = HostTensor::poison(p.out_dtype, p.o_shape());
    let mut final_state = match p.final_state {
        FinalState::None => None,
        FinalState::Dense => Some(HostTensor::poison(p.state_out_dtype, p.state_shape(p.seqs))),
        FinalState::InPlace => inputs.initial_state.clone(),
    };
    let mut checkpoints = val
        .checkpoint_offsets
        .as_ref()
        .map(|_| HostTensor::poison(p.state_out_dtype, p.state_shape(val.total_checkpoints())));
    for (&(n, hv), r) in pairs.iter().zip(results) {
        let start = val.cu[n];
        for i in 0..val.seq_len(n) {
            o.write_f64(
                ((start + i) * p.hv + hv) * p.v,
                &to_f64(&r.o[i * p.v..(i + 1) * p.v]),
            );
        }
        if let Some(fs) = final_state.as_mut() {
            let row = match p.final_state {
                FinalState::InPlace => val
                    .indices
                    .as_ref()
                    .and_then(|idx| usize::try_from(idx[n]).ok()),
                _ => Some(n),
            };
            if let Some(row) = row {
                write_state(p, fs, row * p.hv + hv, &r.state);
            }
        }
        if let (Some(ck), Some(offs)) = (checkpoints.as_mut(), val.checkpoint_offsets.as_ref()) {
            for (j, s) in r.checkpoints.iter().enumerate() {
                write_state(p, ck, (offs[n] + j) * p.hv + hv, s);
            }
        }
    }
    Outputs {
        o,
        final_state,
        checkpoints,
    }
}

#[cfg(test)]
mod tests {
    use super::{runs_inline, CpuBackend, EnvError, Options, SEGMENT_LEN_VAR};
    use deltarule_core::{
        Backend, Capabilities, DType, Error, HostTensor, Inputs, Kernel, Mode, Op, Problem,
    };

    /// A variable's bad value fails the `segmented` kernel with an error naming the variable,
    /// before anything runs; the other kernels do not read it.
    #[test]
    fn a_bad_segment_length_fails_the_segmented_kernel() {
        let backend = CpuBackend {
            caps: Capabilities::cpu(1),
            options: Err(EnvError {
                var: SEGMENT_LEN_VAR,
                expected: "a positive multiple of 64 (tokens per segment)",
                got: "100".into(),
            }),
        };
        let p = Problem::new(Op::Gdn, Mode::Prefill, 1, 4, 1, 1, 16, 16);
        let t = |shape: Vec<usize>, x: f64| {
            let n = shape.iter().product();
            HostTensor::from_f64(p.qkv_dtype, shape, &vec![x; n])
        };
        let inputs = Inputs {
            q: t(vec![4, 1, 16], 0.25),
            k: t(vec![4, 1, 16], 0.25),
            v: t(vec![4, 1, 16], 1.0),
            g: HostTensor::from_f64(DType::F32, p.g_shape(), &[-0.1; 4]),
            beta: HostTensor::from_f64(DType::F32, vec![4, 1], &[0.5; 4]),
            cu_seqlens: HostTensor::from_i64(DType::I64, vec![2], &[0, 4]),
            a_log: None,
            dt_bias: None,
            initial_state: None,
            state_indices: None,
        };
        match backend.run(Kernel::Segmented, &p, &inputs) {
            Err(e @ Error::InvalidArgument { .. }) => {
                let message = e.to_string();
                assert!(
                    message.contains(SEGMENT_LEN_VAR) && message.contains("got 100"),
                    "{message}"
                );
            }
            other => panic!("expected an invalid argument, got {other:?}"),
        }
        assert!(backend.run(Kernel::Reference, &p, &inputs).is_ok());
        assert_eq!(
            CpuBackend::with_options(Options::default()).options().ok(),
            Some(&Options::default())
        );
    }

    #[test]
    fn decode_steps_run_inline_and_prefills_on_the_pool() {
        // one token of 8 value heads with 128 x 128 states: a small model's decode step
        let step = Problem::new(Op::Gdn, Mode::Decode, 1, 1, 4, 8, 128, 128);
        assert!(runs_inline(&step));
        // a 64-token prefill of the same layer, and a batch of 32 decode steps
        let prefill = Problem::new(Op::Gdn, Mode::Prefill, 1, 64, 4, 8, 128, 128);
        assert!(!runs_inline(&prefill));
        let batch = Problem::new(Op::Kda, Mode::Decode, 32, 32, 4, 8, 128, 128);
        assert!(!runs_inline(&batch));
        // sizes that overflow a usize product stay on the pool
        let huge = Problem::new(Op::Gdn, Mode::Prefill, 1, usize::MAX, 1, 1, 128, 128);
        assert!(!runs_inline(&huge));
    }
}

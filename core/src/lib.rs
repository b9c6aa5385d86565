//! # deltarule-core
//!
//! The contract of the deltarule engine (docs/spec.md), with no device dependency:
//!
//! * the two operators, Gated DeltaNet (`gdn`, one scalar log-decay per token and value head) and
//!   Kimi Delta Attention (`kda`, one log-decay per key channel), in prefill (chunked) and decode
//!   (token recurrence) modes, described as data by [`problem::Problem`];
//! * the recurrence that defines them, per sequence and value head with state `S` (K x V):
//!   `S = D_t S; u = beta_t (v_t - S^T k_t); S = S + k_t u^T; o_t = scale S^T q_t`,
//!   where `D_t = exp(g_t)` (gdn, scalar) or `diag(exp(g_t))` (kda);
//! * the state contract (layouts `kv`/`vk`, f32/bf16/f16 storage, dense or pooled, in place,
//!   checkpoints), the variable-length metadata ([`varlen`]), the structured errors
//!   ([`error::Error`]), the tolerances ([`tolerance`]) and the selection rules ([`select`](mod@select));
//! * the kernel-variant domain ([`variants`]): which problems a kernel variant applies to, asked
//!   by the rule table and the CUDA backend alike;
//! * the exact segment algebra of docs/segments.md ([`segments`]): a run of tokens as the affine
//!   map `S_out = M S_in + L` of its incoming state, composition, application and where a
//!   sequence is cut, generic over the working precision ([`real::Real`], f32 or f64).
//!
//! Backends implement [`backend::Backend`]; the engine facade selects a rule and runs it.

pub mod backend;
pub mod caps;
pub mod dtype;
pub mod error;
pub mod problem;
pub mod real;
pub mod segments;
pub mod select;
pub mod tensor;
pub mod tolerance;
pub mod variants;
pub mod varlen;

pub use backend::{median, Backend, BenchOptions, BenchReport, Kernel};
pub use caps::{BackendKind, Capabilities};
pub use dtype::DType;
pub use error::{Error, Result};
pub use problem::{
    validate_inputs, validate_state_indices, BetaMode, FinalState, Gate, InitialState, Inputs,
    Mode, Op, Outputs, Problem, StateLayout, Validated,
};
pub use select::{select, DeviceState, Preference, Rule, Selection, RULES};
pub use tensor::{HostTensor, TensorData};
pub use tolerance::{compare, Metrics, Precision};

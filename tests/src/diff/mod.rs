//! Cross-backend numerical diff: run a case on a backend, compare every produced tensor with the
//! case's expected tensors and with the float64 reference, locate the worst element, and measure
//! the error per token, per value head and per sequence (docs/diff.md).
//!
//! The same comparison serves three sources of outputs: a backend run here ([`diff_case`]), the
//! observed outputs a case file carries ([`observed_rows`]) and saved output sets
//! ([`OutputSet`], [`compare_sets`]).
//!
//! The module is split by role: `geometry` and `worst` name an element of an output, `rows`
//! holds the rows of the table, `metrics` measures the errors, `reference` runs the float64
//! reference, `backends` runs a case on a backend (and reads observed outputs), `table` renders
//! rows for a terminal, `json` as JSON lines, `save` writes output sets and `output_set` reads
//! and compares them. Everything public is re-exported here.

mod backends;
mod geometry;
mod json;
mod metrics;
mod output_set;
mod reference;
mod rows;
mod save;
mod table;
mod worst;

pub use self::backends::{
    backend_kind, chosen_backend, default_backends, diff_case, diff_preference, observed_rows,
    observed_source, observed_tolerance, problem_for, run_backend, BackendRun,
};
pub use self::geometry::Geometry;
pub use self::metrics::{compare_outputs, o_profile, per_sequence};
pub use self::output_set::{
    compare_sets, default_compare_tolerance, read_output_set, CasePart, OutputSet, OUTPUTS_MARK,
};
pub use self::reference::{reference_outputs, reference_outputs_with_progress};
pub use self::rows::{DiffRow, OutputRefs, Profile, Source, OUTPUT_TENSORS};
pub use self::save::{file_safe, output_bytes, save_outputs};
pub use self::table::{
    render_aligned, render_table, render_wide, value_pair, worst_words, wrap, COMPARE_LEGEND,
    LEGEND, NARROW,
};
pub use self::worst::{locate, Worst};

//! The one error type of the engine, split by what the caller does next (docs/spec.md section 8).

use crate::caps::BackendKind;

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    // ---------------------------------------------------------------- caller bugs
    /// A caller bug: an argument does not satisfy the contract. Never retried.
    #[error("invalid argument `{field}`: expected {expected}, got {got}")]
    InvalidArgument {
        field: String,
        expected: String,
        got: String,
    },

    /// A case file or other input file cannot be read or parsed.
    #[error("cannot read `{path}`: {reason}")]
    Input { path: String, reason: String },

    /// An output file cannot be written (the previous file, if any, is left as it was).
    #[error("cannot write `{path}`: {reason}")]
    Output { path: String, reason: String },

    // ---------------------------------------------------------------- capability
    /// This backend or kernel cannot do this problem (with the reason); selection moves on.
    #[error("{backend}:{kernel} does not support this problem: {reason}")]
    Unsupported {
        backend: BackendKind,
        kernel: String,
        reason: String,
    },

    /// The device or library is missing, with what was searched.
    #[error("{backend} backend unavailable: {reason}")]
    Unavailable {
        backend: BackendKind,
        reason: String,
    },

    /// An explicit backend or kernel choice that no rule of the table allows; every rejection is
    /// listed.
    #[error("no rule for `{choice}` accepts this problem:\n{}", .reasons.join("\n"))]
    NoEligibleRule {
        choice: String,
        reasons: Vec<String>,
    },

    // ---------------------------------------------------------------- toolchain and device
    /// The kernel compiler (NVRTC, naga) rejected a source: its log, options and the source name.
    #[error("{backend} compile error in {source_name} (options {options:?}):\n{log}")]
    Compile {
        backend: BackendKind,
        source_name: String,
        log: String,
        options: Vec<String>,
    },

    /// A driver or runtime failure.
    #[error("{backend} device error: {message}")]
    Device {
        backend: BackendKind,
        message: String,
    },
}

impl Error {
    /// Shorthand for [`Error::InvalidArgument`].
    pub fn invalid(
        field: impl Into<String>,
        expected: impl Into<String>,
        got: impl Into<String>,
    ) -> Self {
        Error::InvalidArgument {
            field: field.into(),
            expected: expected.into(),
            got: got.into(),
        }
    }

    pub fn unsupported(
        backend: BackendKind,
        kernel: impl Into<String>,
        reason: impl Into<String>,
    ) -> Self {
        Error::Unsupported {
            backend,
            kernel: kernel.into(),
            reason: reason.into(),
        }
    }

    pub fn device(backend: BackendKind, message: impl Into<String>) -> Self {
        Error::Device {
            backend,
            message: message.into(),
        }
    }

    /// True for errors that are the caller's fault or an input problem (CLI exit code 2).
    pub fn is_usage(&self) -> bool {
        matches!(
            self,
            Error::InvalidArgument { .. }
                | Error::Input { .. }
                | Error::Output { .. }
                | Error::NoEligibleRule { .. }
        )
    }
}

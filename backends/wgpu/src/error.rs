//! Conversions from wgpu's errors into the engine's (docs/spec.md, errors).

use deltarule_core::{BackendKind, Error};

/// A driver or runtime failure.
pub fn device(what: impl std::fmt::Display) -> Error {
    Error::device(BackendKind::Wgpu, what.to_string())
}

/// The device or library is missing.
pub fn unavailable(reason: impl Into<String>) -> Error {
    Error::Unavailable {
        backend: BackendKind::Wgpu,
        reason: reason.into(),
    }
}

/// The shader compiler (naga or the driver) rejected a module.
pub fn compile(source_name: &str, log: impl Into<String>, options: Vec<String>) -> Error {
    Error::Compile {
        backend: BackendKind::Wgpu,
        source_name: source_name.to_string(),
        log: log.into(),
        options,
    }
}

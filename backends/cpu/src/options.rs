//! The CPU backend's options and the one place that reads them from the environment
//! ([`Options::from_env`], when a [`crate::CpuBackend`] is created).
//!
//! | variable | values | default | effect |
//! | --- | --- | --- | --- |
//! | `DELTARULE_CPU_SEGMENT_LEN` | a positive multiple of 64 (tokens) | 64 | the segment length of the `segmented` kernel |
//!
//! An unset or empty variable keeps the default. A value the variable does not take is kept as
//! an [`EnvError`]: the kernel it affects (`segmented`) fails with it, naming the variable, and
//! the backend's capabilities carry it as a note; the other kernels run.

use deltarule_core::problem::CHUNK;
use deltarule_core::Error;

/// The variable that sets [`Options::segment_len`].
pub const SEGMENT_LEN_VAR: &str = "DELTARULE_CPU_SEGMENT_LEN";

/// The default segment length of the `segmented` kernel: one chunk. It is the shortest length the
/// variable takes, so that the sequences of the test cases (tens to a few hundred tokens) are cut
/// into several segments and every cut is checked; long sequences may take a longer one (fewer
/// summaries to chain, docs/segments.md "Costs").
pub const DEFAULT_SEGMENT_LEN: usize = CHUNK;

/// What the variable takes.
const SEGMENT_LEN_EXPECTED: &str = "a positive multiple of 64 (tokens per segment)";

/// How the CPU backend runs its kernels.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Options {
    /// Tokens per segment of the `segmented` kernel (a sequence's last segment may be shorter).
    /// The variable takes positive multiples of the chunk (64), so that segment edges fall on
    /// chunk edges as a chunked segment pass would cut; set here, any positive length runs.
    pub segment_len: usize,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            segment_len: DEFAULT_SEGMENT_LEN,
        }
    }
}

/// A variable's value that is not one of those it takes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EnvError {
    pub var: &'static str,
    pub expected: &'static str,
    pub got: String,
}

impl From<EnvError> for Error {
    fn from(e: EnvError) -> Error {
        Error::invalid(e.var, e.expected, e.got)
    }
}

impl Options {
    /// The options the process environment sets (see the module's table).
    pub fn from_env() -> Result<Options, EnvError> {
        Self::from_vars(|name| std::env::var(name).ok())
    }

    /// The options the variables `var` returns set.
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> Result<Options, EnvError> {
        let segment_len = match var(SEGMENT_LEN_VAR) {
            None => DEFAULT_SEGMENT_LEN,
            Some(s) if s.trim().is_empty() => DEFAULT_SEGMENT_LEN,
            Some(s) => match s.trim().parse::<usize>() {
                Ok(n) if n > 0 && n % CHUNK == 0 => n,
                _ => {
                    return Err(EnvError {
                        var: SEGMENT_LEN_VAR,
                        expected: SEGMENT_LEN_EXPECTED,
                        got: s,
                    })
                }
            },
        };
        Ok(Options { segment_len })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(value: Option<&str>) -> Result<Options, EnvError> {
        Options::from_vars(|name| {
            assert_eq!(name, SEGMENT_LEN_VAR);
            value.map(str::to_string)
        })
    }

    #[test]
    fn the_segment_length_defaults_to_one_chunk() {
        assert_eq!(with(None), Ok(Options::default()));
        assert_eq!(with(Some("")), Ok(Options::default()));
        assert_eq!(Options::default().segment_len, 64);
    }

    #[test]
    fn the_segment_length_takes_positive_multiples_of_the_chunk() {
        for (value, len) in [("64", 64), ("256", 256), (" 4096 ", 4096)] {
            assert_eq!(with(Some(value)).map(|o| o.segment_len), Ok(len), "{value}");
        }
    }

    #[test]
    fn other_segment_lengths_are_errors_naming_the_variable() {
        for bad in ["0", "100", "63", "-64", "abc", "64 tokens", "1e3"] {
            let e = with(Some(bad)).expect_err(bad);
            assert_eq!(e.got, bad);
            let message = Error::from(e).to_string();
            assert!(
                message.contains(SEGMENT_LEN_VAR) && message.contains("multiple of 64"),
                "{bad}: {message}"
            );
        }
    }
}

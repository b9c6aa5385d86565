//! The backend's options and the one place that reads them from the environment
//! ([`AdapterChoice::from_env`]). docs/tuning.md lists the variables.

use deltarule_core::{Error, Result};

/// Which adapter to use, and how.
#[derive(Clone, Debug, Default)]
pub struct AdapterChoice {
    /// Substring of the adapter name to prefer (`DELTARULE_WGPU_ADAPTER`).
    pub name: Option<String>,
    /// Shader modules with wgpu's runtime bounds checks (`DELTARULE_WGPU_CHECKED=1`; tests and
    /// diagnosis, several times slower).
    pub checked: bool,
    /// Caps the largest storage binding the launch layer plans with (tests of the head-batched
    /// prefill path on small problems); `None` uses the device's limit.
    pub max_binding: Option<u64>,
    /// Value columns of a prefill state-pass workgroup of the `chunked` kernel, 16 or 32
    /// (`DELTARULE_WGPU_STATE_BV`): 32 applies only for K <= 128 (the K x 32 slice must fit
    /// workgroup memory); `None` picks 32 there, else 16. 16 doubles the workgroups of the
    /// sequential pass, which can pay when sequences x heads are few.
    pub state_bv: Option<usize>,
    /// Leave wgpu's experimental cooperative matrices off (`DELTARULE_WGPU_COOP=0`): the `coop`
    /// kernel is then unavailable and its rows say why.
    pub coop_off: bool,
    /// Tests only (`DELTARULE_WGPU_COOP_EMULATE=1`): on an adapter without cooperative matrices,
    /// run the `coop` stages rewritten into plain WGSL (src/emulate.rs) and offer the `coop`
    /// kernel, so that CI's lavapipe runs them. Slow; never a production path.
    pub coop_emulate: bool,
    /// Diagnosis (`DELTARULE_WGPU_PASSTHROUGH=1`): every stage built by the backend (src/coop.rs)
    /// and passed through as SPIR-V, wgpu's own WGSL path against naga's plain output (the `coop`
    /// stages always are).
    pub passthrough: bool,
    /// Diagnosis (`DELTARULE_WGPU_SYNC_TIMING=1`): `bench` waits for each timed call before
    /// submitting the next.
    pub sync_timing: bool,
    /// A variable of the environment with a value the backend does not take:
    /// [`crate::WgpuBackend::new`] fails with it.
    pub env_error: Option<EnvError>,
}

/// An environment variable's value that is not one of those it takes.
#[derive(Clone, Debug)]
pub struct EnvError {
    pub var: &'static str,
    pub expected: &'static str,
    pub got: String,
}

impl AdapterChoice {
    /// Reads the `DELTARULE_WGPU_*` variables (unset or empty: the default). The backend API set
    /// comes from wgpu's own `WGPU_BACKEND` (`vulkan`, `metal`, `dx12`, `gl`).
    pub fn from_env() -> Self {
        let mut env = EnvReader::default();
        let state_bv = env
            .one_of("DELTARULE_WGPU_STATE_BV", &["16", "32"], "16 or 32")
            .and_then(|v| v.parse().ok());
        AdapterChoice {
            name: env.get("DELTARULE_WGPU_ADAPTER"),
            checked: env.flag("DELTARULE_WGPU_CHECKED") == Some(true),
            max_binding: None,
            state_bv,
            coop_off: env.flag("DELTARULE_WGPU_COOP") == Some(false),
            coop_emulate: env.flag("DELTARULE_WGPU_COOP_EMULATE") == Some(true),
            passthrough: env.flag("DELTARULE_WGPU_PASSTHROUGH") == Some(true),
            sync_timing: env.flag("DELTARULE_WGPU_SYNC_TIMING") == Some(true),
            env_error: env.error,
        }
    }

    /// The options' own consistency: the first invalid environment value, or a tile width other
    /// than 16 or 32.
    pub fn check(&self) -> Result<()> {
        if let Some(e) = &self.env_error {
            return Err(Error::invalid(e.var, e.expected, e.got.clone()));
        }
        match self.state_bv {
            None | Some(16) | Some(32) => Ok(()),
            Some(x) => Err(Error::invalid("state_bv", "16 or 32", x.to_string())),
        }
    }
}

/// Reads variables, keeping the first value that is not allowed.
#[derive(Default)]
struct EnvReader {
    error: Option<EnvError>,
}

impl EnvReader {
    fn get(&mut self, var: &'static str) -> Option<String> {
        std::env::var(var).ok().filter(|s| !s.is_empty())
    }

    fn one_of(
        &mut self,
        var: &'static str,
        allowed: &[&str],
        expected: &'static str,
    ) -> Option<String> {
        let v = self.get(var)?;
        if allowed.contains(&v.as_str()) {
            return Some(v);
        }
        self.error.get_or_insert(EnvError {
            var,
            expected,
            got: v,
        });
        None
    }

    fn flag(&mut self, var: &'static str) -> Option<bool> {
        self.one_of(var, &["0", "1"], "0 or 1").map(|v| v == "1")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_check_their_values() {
        assert!(AdapterChoice::default().check().is_ok());
        let bad_tile = AdapterChoice {
            state_bv: Some(24),
            ..AdapterChoice::default()
        };
        assert!(bad_tile.check().is_err());
        let bad_env = AdapterChoice {
            env_error: Some(EnvError {
                var: "DELTARULE_WGPU_CHECKED",
                expected: "0 or 1",
                got: "yes".into(),
            }),
            ..AdapterChoice::default()
        };
        let e = bad_env
            .check()
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(e.contains("DELTARULE_WGPU_CHECKED"), "{e}");
    }
}

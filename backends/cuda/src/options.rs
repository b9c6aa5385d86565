//! The CUDA backend's tuning and diagnosis variables, read once when a backend is opened
//! ([`Options::from_env`]) into a typed struct. [`Options::default`] is what production runs;
//! benchmarks and tests may also set the fields directly ([`crate::CudaBackend::set_options`]).
//!
//! | variable | values | default | effect |
//! | --- | --- | --- | --- |
//! | `DELTARULE_CUDA_DECODE_FORM` | `block4`, `block5`, `block6`, `persistent` | the rule [`DecodeForm::pick`] | forces the token recurrence's form |
//! | `DELTARULE_CUDA_GROUP_HEADS` | `0`, `1` | `1` | the T-form intra CTA runs every value head of a GVA group |
//! | `DELTARULE_CUDA_DEPENDENT_LAUNCH` | `0`, `1` | `1` | the T-form state pass (without the overlap) is a programmatic dependent launch |
//! | `DELTARULE_CUDA_DEFERRED_WAIT` | `0`, `1` | `1` | with grouped heads, a head's bulk-copy wait moves into the next head's stage |
//! | `DELTARULE_CUDA_STATE_BV` | `16`, `32`, `64`, `wg`, `wgt` | the rule [`crate::plan::state_pass`] | forces the small-bh state pass |
//! | `DELTARULE_CUDA_OVERLAP` | `off` (`0`, `no`), a percentage `1`-`100` | automatic | the overlapped T-form pair off, or its freeing point forced |
//! | `DELTARULE_CUDA_SEGMENTS` | `off` (`0`, `no`), a segment length in chunks `1`-`65536` | the rule [`crate::plan::segment_plan`] | the segmented T-form pair off, or forced with that segment length |
//! | `DELTARULE_CUDA_OVERLAP_TRACE` | `1` | off | the overlapped pair prints a timeline (synchronises; diagnosis only) |
//! | `DELTARULE_CUDA_FUSED` | `classic` | off | `chunked` keeps the classic fused kernel where the fused T-form applies |
//! | `DELTARULE_CUDA_SMS` | `1` to the device's count | the device's count | the SM count the launch rules assume |
//!
//! (`DELTARULE_CUDA_CACHE`, the on-disk CUBIN cache folder, is read by [`crate::CudaBackend::new`].)

use crate::launch::{FLAG_DEFERRED_WAIT, FLAG_DEPENDENT_LAUNCH, FLAG_GROUP_HEADS};
use crate::plan::{DecodeForm, OverlapSetting, SegmentSetting, StatePass};
use deltarule_core::{Error, Result};

/// The runtime flags of `Params::mode` (`FLAG_*` in kernels/common.cuh). All three are on in
/// production: grouped heads, the dependent launch and the deferred copy wait together take gdn
/// 16/32 16x1024 from 0.569 to 0.522 ms on the H200.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Flags {
    /// The small-bh T-form intra CTA runs every value head of a GVA group (q and k loaded once);
    /// its grid has HV / group columns instead of HV.
    pub group_heads: bool,
    /// The small-bh T-form state pass without the overlap starts as a programmatic dependent
    /// launch of the intra kernel.
    pub dependent_launch: bool,
    /// With `group_heads`: a head's wait for its bulk copies' shared-memory reads moves into the
    /// next head's stage.
    pub deferred_wait: bool,
}

impl Flags {
    /// Every flag on: what production runs (`Params::mode` = 385).
    pub const PRODUCTION: Flags = Flags {
        group_heads: true,
        dependent_launch: true,
        deferred_wait: true,
    };

    /// The value of `Params::mode`.
    pub fn bits(self) -> i32 {
        let bit = |on: bool, b: i32| if on { b } else { 0 };
        bit(self.group_heads, FLAG_GROUP_HEADS)
            | bit(self.dependent_launch, FLAG_DEPENDENT_LAUNCH)
            | bit(self.deferred_wait, FLAG_DEFERRED_WAIT)
    }
}

impl Default for Flags {
    fn default() -> Self {
        Flags::PRODUCTION
    }
}

/// Every launch choice a variable may force, parsed once (see the module's table).
#[derive(Clone, Copy, Debug, PartialEq, Default)]
pub struct Options {
    /// `Params::mode`'s flags.
    pub flags: Flags,
    /// A forced form of the token recurrence (`DELTARULE_CUDA_DECODE_FORM`); None: the rule.
    pub decode_form: Option<DecodeForm>,
    /// A forced small-bh state pass (`DELTARULE_CUDA_STATE_BV`); None: the rule. A 64-column
    /// tile falls back to 32 where V < 64, a wgmma pass to the rule where the module lacks it.
    pub state_pass: Option<StatePass>,
    /// The overlapped T-form pair (`DELTARULE_CUDA_OVERLAP`).
    pub overlap: OverlapSetting,
    /// The segmented T-form pair (`DELTARULE_CUDA_SEGMENTS`).
    pub segments: SegmentSetting,
    /// The overlapped pair's kernels record a timeline, printed to stderr after the launch
    /// (`DELTARULE_CUDA_OVERLAP_TRACE=1`; it synchronises the stream: diagnosis only).
    pub overlap_trace: bool,
    /// `chunked` keeps the classic fused kernel where the fused T-form applies
    /// (`DELTARULE_CUDA_FUSED=classic`).
    pub fused_classic: bool,
}

impl Options {
    /// The options the process environment sets (see the module's table).
    pub fn from_env() -> Result<Options> {
        Self::from_vars(|name| std::env::var(name).ok())
    }

    /// The options the variables `var` returns set; a value a variable does not take is an error
    /// naming the variable and the values it takes.
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> Result<Options> {
        let flag = |name: &str| -> Result<bool> {
            match var(name).as_deref().map(str::trim) {
                None | Some("1") => Ok(true),
                Some("0") => Ok(false),
                Some(other) => Err(Error::invalid(name, "0 or 1", other)),
            }
        };
        let flag_off = |name: &str| -> Result<bool> {
            match var(name).as_deref().map(str::trim) {
                None | Some("0") => Ok(false),
                Some("1") => Ok(true),
                Some(other) => Err(Error::invalid(name, "0 or 1", other)),
            }
        };
        let decode_form = match var("DELTARULE_CUDA_DECODE_FORM") {
            None => None,
            Some(s) => Some(DecodeForm::parse(&s).ok_or_else(|| {
                Error::invalid(
                    "DELTARULE_CUDA_DECODE_FORM",
                    "block4, block5, block6 or persistent",
                    s.as_str(),
                )
            })?),
        };
        Ok(Options {
            flags: Flags {
                group_heads: flag("DELTARULE_CUDA_GROUP_HEADS")?,
                dependent_launch: flag("DELTARULE_CUDA_DEPENDENT_LAUNCH")?,
                deferred_wait: flag("DELTARULE_CUDA_DEFERRED_WAIT")?,
            },
            decode_form,
            state_pass: match var("DELTARULE_CUDA_STATE_BV") {
                None => None,
                Some(s) => Some(StatePass::parse(&s).ok_or_else(|| {
                    Error::invalid(
                        "DELTARULE_CUDA_STATE_BV",
                        "16, 32, 64, wg or wgt",
                        s.as_str(),
                    )
                })?),
            },
            overlap: match var("DELTARULE_CUDA_OVERLAP") {
                None => OverlapSetting::Auto,
                Some(s) => OverlapSetting::parse(&s).ok_or_else(|| {
                    Error::invalid(
                        "DELTARULE_CUDA_OVERLAP",
                        "off (or 0, no) or a percentage from 1 to 100",
                        s.as_str(),
                    )
                })?,
            },
            segments: match var("DELTARULE_CUDA_SEGMENTS") {
                None => SegmentSetting::Auto,
                Some(s) => SegmentSetting::parse(&s).ok_or_else(|| {
                    Error::invalid(
                        "DELTARULE_CUDA_SEGMENTS",
                        "off (or 0, no) or a segment length in chunks from 1 to 65536",
                        s.as_str(),
                    )
                })?,
            },
            overlap_trace: flag_off("DELTARULE_CUDA_OVERLAP_TRACE")?,
            fused_classic: match var("DELTARULE_CUDA_FUSED").as_deref().map(str::trim) {
                None => false,
                Some("classic") => true,
                Some(other) => {
                    return Err(Error::invalid("DELTARULE_CUDA_FUSED", "classic", other))
                }
            },
        })
    }
}

/// `DELTARULE_CUDA_SMS`: the SM count the launch rules assume (the persistent decode grid, the
/// state-tile and overlap rules), 1 to the device's `sms`; unset, the device's. With the other
/// SMs held by a spinning kernel, the grids then fit the SMs left.
pub fn sms_from_env(sms: i32) -> Result<i32> {
    parse_sms(std::env::var("DELTARULE_CUDA_SMS").ok().as_deref(), sms)
}

fn parse_sms(value: Option<&str>, sms: i32) -> Result<i32> {
    match value {
        None => Ok(sms),
        Some(s) => match s.trim().parse::<i32>() {
            Ok(n) if (1..=sms).contains(&n) => Ok(n),
            _ => Err(Error::invalid(
                "DELTARULE_CUDA_SMS",
                format!("a number of SMs from 1 to {sms} (this device's count)"),
                s,
            )),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::{parse_sms, Flags, Options};
    use crate::plan::{DecodeForm, OverlapSetting, SegmentSetting, StatePass};
    use std::collections::HashMap;

    fn with(vars: &[(&str, &str)]) -> deltarule_core::Result<Options> {
        let map: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Options::from_vars(|name| map.get(name).cloned())
    }

    #[test]
    fn no_variable_gives_production() {
        let o = with(&[]).expect("the defaults");
        assert_eq!(o, Options::default());
        assert_eq!(o.flags, Flags::PRODUCTION);
        assert_eq!(o.flags.bits(), 385, "1 | 128 | 256");
        assert_eq!(o.decode_form, None);
        assert_eq!(o.state_pass, None);
        assert_eq!(o.overlap, OverlapSetting::Auto);
        assert!(!o.overlap_trace && !o.fused_classic);
    }

    #[test]
    fn each_flag_turns_off_alone() {
        for (var, bits) in [
            ("DELTARULE_CUDA_GROUP_HEADS", 384),
            ("DELTARULE_CUDA_DEPENDENT_LAUNCH", 257),
            ("DELTARULE_CUDA_DEFERRED_WAIT", 129),
        ] {
            let o = with(&[(var, "0")]).expect("0 is accepted");
            assert_eq!(o.flags.bits(), bits, "{var}=0");
            let o = with(&[(var, " 1 ")]).expect("1 is accepted");
            assert_eq!(o.flags.bits(), 385, "{var}=1");
            for bad in ["2", "on", "", "true"] {
                let why = with(&[(var, bad)]).err().map(|e| e.to_string());
                assert!(
                    why.as_deref()
                        .is_some_and(|w| w.contains(var) && w.contains("0 or 1")),
                    "{var}={bad:?}: {why:?}"
                );
            }
        }
        let none = Flags {
            group_heads: false,
            dependent_launch: false,
            deferred_wait: false,
        };
        assert_eq!(none.bits(), 0);
    }

    #[test]
    fn the_decode_form_is_named() {
        for (s, form) in [
            ("block4", DecodeForm::Block4),
            ("block5", DecodeForm::Block5),
            ("block6", DecodeForm::Block6),
            (" persistent ", DecodeForm::Persistent),
        ] {
            let o = with(&[("DELTARULE_CUDA_DECODE_FORM", s)]).expect("a form");
            assert_eq!(o.decode_form, Some(form), "{s:?}");
        }
        for bad in ["recurrent", "4", "", "Block4"] {
            let why = with(&[("DELTARULE_CUDA_DECODE_FORM", bad)])
                .err()
                .map(|e| e.to_string());
            assert!(
                why.as_deref()
                    .is_some_and(|w| w.contains("DELTARULE_CUDA_DECODE_FORM")
                        && w.contains("block4, block5, block6 or persistent")),
                "{bad:?}: {why:?}"
            );
        }
    }

    #[test]
    fn the_tuning_knobs_take_their_values_and_refuse_others() {
        let o = with(&[
            ("DELTARULE_CUDA_STATE_BV", "wgt"),
            ("DELTARULE_CUDA_OVERLAP", "off"),
            ("DELTARULE_CUDA_OVERLAP_TRACE", "1"),
            ("DELTARULE_CUDA_FUSED", "classic"),
        ])
        .expect("valid values");
        assert_eq!(o.state_pass, Some(StatePass::TformWgmma));
        assert_eq!(o.overlap, OverlapSetting::Off);
        assert!(o.overlap_trace && o.fused_classic);
        let o = with(&[("DELTARULE_CUDA_OVERLAP", "40")]).expect("a percentage");
        assert_eq!(o.overlap, OverlapSetting::Tau(40));
        let o = with(&[("DELTARULE_CUDA_SEGMENTS", "16")]).expect("a length");
        assert_eq!(o.segments, SegmentSetting::Chunks(16));
        let o = with(&[("DELTARULE_CUDA_SEGMENTS", "off")]).expect("off");
        assert_eq!(o.segments, SegmentSetting::Off);
        for (name, bad) in [
            ("DELTARULE_CUDA_STATE_BV", "48"),
            ("DELTARULE_CUDA_OVERLAP", "always"),
            ("DELTARULE_CUDA_OVERLAP", "101"),
            ("DELTARULE_CUDA_OVERLAP_TRACE", "yes"),
            ("DELTARULE_CUDA_FUSED", "tform"),
            ("DELTARULE_CUDA_SEGMENTS", "all"),
            ("DELTARULE_CUDA_SEGMENTS", "70000"),
        ] {
            let why = with(&[(name, bad)]).err().map(|e| e.to_string());
            assert!(
                why.as_deref()
                    .is_some_and(|w| w.contains(name) && w.contains(bad)),
                "{name}={bad}: {why:?}"
            );
        }
    }

    #[test]
    fn the_sm_override_stays_within_the_device() {
        assert_eq!(parse_sms(None, 132).ok(), Some(132));
        assert_eq!(parse_sms(Some(" 91 "), 132).ok(), Some(91));
        assert_eq!(parse_sms(Some("132"), 132).ok(), Some(132));
        for bad in ["0", "133", "-4", "all", ""] {
            let why = parse_sms(Some(bad), 132).err().map(|e| e.to_string());
            assert!(
                why.as_deref().is_some_and(|w| w.contains("1 to 132")),
                "{bad}: {why:?}"
            );
        }
    }
}

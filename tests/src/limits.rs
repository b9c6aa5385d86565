//! The memory a problem may ask for. Before anything is allocated, the bytes a run would allocate
//! (inputs, outputs, the float64 reference and the comparison copies) are estimated with checked
//! arithmetic from the problem's shape and compared with a cap: `--max-bytes`, else the
//! `DELTARULE_MAX_BYTES` environment variable, else 75 % of the machine's available memory
//! (`MemAvailable` of `/proc/meminfo`), else 8 GiB.

use deltarule_core::problem::{InitialState, Op};
use deltarule_core::{Error, Problem, Result};
use std::fmt;

/// The environment variable that sets the cap (bytes, or a number with a K/M/G/T suffix).
pub const MAX_BYTES_ENV: &str = "DELTARULE_MAX_BYTES";
/// The cap where the available memory is not known.
pub const FALLBACK_CAP: u64 = 8 << 30;

/// Where a cap comes from (named in the refusal).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CapSource {
    Flag,
    Env,
    /// 75 % of this many available bytes.
    Available(u64),
    Fallback,
}

/// The most bytes a case or a generated problem may allocate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ByteCap {
    pub bytes: u64,
    pub source: CapSource,
}

impl fmt::Display for CapSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CapSource::Flag => f.write_str("set by --max-bytes"),
            CapSource::Env => write!(f, "set by {MAX_BYTES_ENV}"),
            CapSource::Available(a) => {
                write!(f, "75 % of the {} of available memory", human(*a))
            }
            CapSource::Fallback => f.write_str("the default where available memory is unknown"),
        }
    }
}

impl ByteCap {
    /// No limit (tests and callers that check elsewhere).
    pub const UNLIMITED: ByteCap = ByteCap {
        bytes: u64::MAX,
        source: CapSource::Flag,
    };

    /// The cap of `--max-bytes` when given, else of the environment, else of the machine.
    pub fn resolve(flag: Option<u64>) -> Result<ByteCap> {
        Self::resolve_with(flag, std::env::var(MAX_BYTES_ENV).ok())
    }

    /// [`ByteCap::resolve`] with the environment variable's value given.
    pub fn resolve_with(flag: Option<u64>, env: Option<String>) -> Result<ByteCap> {
        if let Some(bytes) = flag {
            return Ok(ByteCap {
                bytes,
                source: CapSource::Flag,
            });
        }
        if let Some(s) = env {
            let bytes = parse_bytes(&s).ok_or_else(|| {
                Error::invalid(
                    MAX_BYTES_ENV,
                    "a byte count such as 4000000000 or 4G",
                    format!("`{s}`"),
                )
            })?;
            return Ok(ByteCap {
                bytes,
                source: CapSource::Env,
            });
        }
        Ok(match mem_available() {
            Some(a) => ByteCap {
                bytes: a / 4 * 3,
                source: CapSource::Available(a),
            },
            None => ByteCap {
                bytes: FALLBACK_CAP,
                source: CapSource::Fallback,
            },
        })
    }

    /// Refuses `asked` bytes (None: more than a u64 holds) for `what` when over the cap.
    pub fn check(&self, what: &str, asked: Option<u64>) -> Result<()> {
        match asked {
            Some(a) if a <= self.bytes => Ok(()),
            _ => Err(Error::invalid(
                "memory",
                format!(
                    "at most {} ({}); raise the cap with --max-bytes BYTES or {MAX_BYTES_ENV}=BYTES",
                    human(self.bytes),
                    self.source
                ),
                match asked {
                    Some(a) => format!("{} asked for {what}", human(a)),
                    None => format!("more than 16 EiB asked for {what}"),
                },
            )),
        }
    }

    /// Refuses a problem whose estimated allocation ([`problem_bytes`]) is over the cap.
    pub fn check_problem(&self, p: &Problem) -> Result<()> {
        self.check(
            &format!("the inputs, outputs and float64 reference of {p}"),
            problem_bytes(p),
        )
    }
}

/// Parses a byte count: digits with an optional binary suffix K, M, G or T (`KiB`, `MB` and the
/// like are read the same way, as powers of 1024).
pub fn parse_bytes(s: &str) -> Option<u64> {
    let s = s.trim();
    let digits_end = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    if digits_end == 0 {
        return None;
    }
    let n: u64 = s[..digits_end].parse().ok()?;
    let suffix = s[digits_end..].trim().to_ascii_lowercase();
    let shift = match suffix.trim_end_matches("ib").trim_end_matches('b') {
        "" => 0,
        "k" => 10,
        "m" => 20,
        "g" => 30,
        "t" => 40,
        _ => return None,
    };
    n.checked_mul(1u64 << shift)
}

/// `MemAvailable` of `/proc/meminfo`, in bytes (None where it cannot be read).
pub fn mem_available() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line
        .trim_start_matches("MemAvailable:")
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    kib.checked_mul(1024)
}

/// A byte count for people: `1.50 GiB`.
pub fn human(b: u64) -> String {
    const UNITS: [&str; 5] = ["bytes", "KiB", "MiB", "GiB", "TiB"];
    let mut x = b as f64;
    let mut u = 0;
    while x >= 1024.0 && u + 1 < UNITS.len() {
        x /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{b} bytes")
    } else {
        format!("{x:.2} {} ({b} bytes)", UNITS[u])
    }
}

/// Bytes per input element: the stored value plus a float64 copy (the generator and the float64
/// reference work in f64).
const INPUT_BYTES: u64 = 8;
/// Bytes per output element: the backend's output, the float64 reference's, the expected
/// tensor and the two float64 vectors of the comparison.
const OUTPUT_BYTES: u64 = 4 + 4 + 4 + 16;

/// An estimate of the bytes a diff or gen run of `p` allocates, with checked arithmetic (None when
/// it overflows a u64). Per-head memory counts even at T = 0: a final state of `N x HV` heads is
/// allocated whatever the token count.
pub fn problem_bytes(p: &Problem) -> Option<u64> {
    let u = |x: usize| x as u64;
    let mul = |xs: &[u64]| xs.iter().try_fold(1u64, |acc, &x| acc.checked_mul(x));
    let (t, n, h, hv, k, v) = (u(p.tokens), u(p.seqs), u(p.h), u(p.hv), u(p.k), u(p.v));
    let state = mul(&[hv, k, v])?;
    let g_per_token = match p.op {
        Op::Gdn => hv,
        Op::Kda => hv.checked_mul(k)?,
    };
    let rows = match p.initial {
        InitialState::None => 0,
        InitialState::Dense => n,
        InitialState::Pool { rows } => u(rows),
    };
    let inputs = [
        mul(&[2, t, h, k])?,            // q, k
        mul(&[t, hv, v])?,              // v
        mul(&[t, g_per_token])?,        // g
        mul(&[t, hv])?,                 // beta
        n.checked_add(1)?,              // cu_seqlens
        n,                              // state_indices
        mul(&[hv, k.checked_add(1)?])?, // A_log, dt_bias
        mul(&[rows, state])?,           // initial state
    ];
    let final_rows = match p.final_state {
        deltarule_core::problem::FinalState::None => 0,
        deltarule_core::problem::FinalState::Dense => n,
        deltarule_core::problem::FinalState::InPlace => rows,
    };
    let checkpoints = p.checkpoint_every.map_or(0, |e| t / u(e.max(1)));
    let outputs = [
        mul(&[t, hv, v])?,
        mul(&[final_rows, state])?,
        mul(&[checkpoints, state])?,
    ];
    let sum = |xs: &[u64]| xs.iter().try_fold(0u64, |acc, &x| acc.checked_add(x));
    let in_bytes = sum(&inputs)?.checked_mul(INPUT_BYTES)?;
    let out_bytes = sum(&outputs)?.checked_mul(OUTPUT_BYTES)?;
    // the float64 reference's working state: one per value head in flight
    let work = state.checked_mul(8)?;
    sum(&[in_bytes, out_bytes, work])
}

#[cfg(test)]
mod tests {
    use super::*;
    use deltarule_core::Mode;

    #[test]
    fn byte_counts_parse_with_binary_suffixes() {
        assert_eq!(parse_bytes("123"), Some(123));
        assert_eq!(parse_bytes("4K"), Some(4096));
        assert_eq!(parse_bytes("2 MiB"), Some(2 << 20));
        assert_eq!(parse_bytes("1g"), Some(1 << 30));
        assert_eq!(parse_bytes("3TB"), Some(3 << 40));
        for bad in ["", "G", "-1", "1.5G", "12Q", "99999999999999999999"] {
            assert_eq!(parse_bytes(bad), None, "{bad}");
        }
        assert_eq!(parse_bytes("20000000000T"), None, "overflow");
    }

    #[test]
    fn zero_tokens_with_many_heads_still_counts_the_final_state() {
        let p = Problem::new(Op::Gdn, Mode::Prefill, 1, 0, 1 << 20, 1 << 20, 64, 64);
        let b = problem_bytes(&p).expect("fits a u64");
        assert!(b >= (1u64 << 20) * 64 * 64 * 4, "{b}");
        let cap = ByteCap {
            bytes: 1 << 30,
            source: CapSource::Fallback,
        };
        let e = cap.check_problem(&p).expect_err("refused");
        let msg = e.to_string();
        assert!(
            msg.contains("--max-bytes") && msg.contains(MAX_BYTES_ENV),
            "{msg}"
        );
        assert!(msg.contains("GiB"), "{msg}");
    }

    #[test]
    fn overflowing_shapes_are_refused_not_wrapped() {
        let p = Problem::new(
            Op::Kda,
            Mode::Prefill,
            usize::MAX / 2,
            usize::MAX / 2,
            usize::MAX / 4,
            usize::MAX / 4,
            256,
            256,
        );
        assert_eq!(problem_bytes(&p), None);
        assert!(ByteCap::UNLIMITED.check_problem(&p).is_err());
        let small = Problem::new(Op::Gdn, Mode::Prefill, 1, 64, 1, 1, 16, 16);
        let b = problem_bytes(&small).expect("small");
        assert!(b < 1 << 20, "{b}");
        assert!(ByteCap::UNLIMITED.check_problem(&small).is_ok());
    }

    #[test]
    fn the_environment_sets_the_cap_and_a_flag_overrides_it() {
        let env = ByteCap::resolve_with(None, Some("3M".into()));
        let bad = ByteCap::resolve_with(None, Some("lots".into()));
        assert_eq!(
            env.expect("env"),
            ByteCap {
                bytes: 3 << 20,
                source: CapSource::Env
            }
        );
        assert!(bad.is_err());
        let flag = ByteCap::resolve_with(Some(5), Some("3M".into())).expect("flag");
        assert_eq!(flag.bytes, 5);
        let machine = ByteCap::resolve_with(None, None).expect("machine");
        assert!(machine.bytes > 0);
    }
}

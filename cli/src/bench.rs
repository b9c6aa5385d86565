//! `deltarule bench`: times backends on named shapes (`op[-decode]-H/HV-NxL`, or the anchor
//! shapes of [`ANCHORS`]) or a generated problem, with the device's own timers, and reports GPU
//! time, host time per call, tokens/s, TFLOP/s, GB/s and the ratio to the roofline floor.

use crate::args::ProblemArgs;
use crate::{engine_for, Outcome};
use clap::Args;
use deltarule_core::problem::{FinalState, InitialState, Mode, Op};
use deltarule_core::select::Preference;
use deltarule_core::{median, BenchOptions, DType, Error, Problem, Result};
use deltarule_tests::diff::render_aligned;
use deltarule_tests::generate::{generate, DataStyle};
use deltarule_tests::limits::ByteCap;
use serde_json::json;

/// The roofline's ceilings, measured on an H200: dense bf16 matrix rate and copy bandwidth
/// (read + write).
pub const PEAK_FLOPS: f64 = 790e12;
pub const PEAK_BYTES: f64 = 4.3e12;

#[derive(Args, Debug)]
pub struct BenchArgs {
    /// Backends (auto, cpu:chunked, wgpu, cuda, cuda:chunked, cuda:small-bh, ...).
    #[arg(long = "backend", num_args = 1.., default_value = "auto")]
    pub backends: Vec<String>,
    /// Named shapes such as `gdn-16/32-1x8192`, `kda-32/32-1x8192`, `gdn-decode-16/32-256x1`
    /// (op[-decode]-H/HV-NxL, K = V = 128; a mixed batch as `gdn-16/32-1x30000+4x500`), `anchors`
    /// for the eight anchor shapes, or `prefill` for the twelve prefill shapes of the performance table.
    #[arg(long = "shape", num_args = 1..)]
    pub shapes: Vec<String>,
    #[arg(long, default_value_t = 5)]
    pub warmup: usize,
    #[arg(long, default_value_t = 50)]
    pub iters: usize,
    /// Rotate among input copies totalling at least this many MiB (above the L2 size).
    #[arg(long, default_value_t = 256)]
    pub rotate_mib: usize,
    /// One JSON object per line.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub problem: ProblemArgs,
}

/// The anchor shapes: the prefill of Qwen3-Next (gdn 16/32) and Kimi Linear (kda 32/32) layers
/// at long, batched and short sequences, gdn with 4/8 heads, kda with 64 heads, and a decode of
/// 256 sequences.
pub const ANCHORS: &[&str] = &[
    "gdn-16/32-1x8192",
    "gdn-16/32-1x32768",
    "gdn-16/32-16x1024",
    "gdn-16/32-256x64",
    "gdn-4/8-1x8192",
    "kda-32/32-1x8192",
    "kda-64/64-1x8192",
    "gdn-decode-16/32-256x1",
];

/// The prefill shapes of the performance table: the anchors' prefill shapes, the batched gdn
/// shape at 4 x 8192, gdn with Qwen3.5's 64 value heads, kda in the batched and short regimes,
/// and a mixed batch (one long sequence among four short ones).
pub const PREFILL: &[&str] = &[
    "gdn-16/32-1x8192",
    "gdn-16/32-1x32768",
    "gdn-16/32-16x1024",
    "gdn-16/32-256x64",
    "gdn-4/8-1x8192",
    "gdn-16/32-4x8192",
    "gdn-16/64-1x8192",
    "gdn-16/32-1x30000+4x500",
    "kda-32/32-1x8192",
    "kda-64/64-1x8192",
    "kda-32/32-16x1024",
    "kda-32/32-256x64",
];

/// The most sequences a named shape may have (each holds at least one state of 64 KiB at
/// K = V = 128: far past any memory cap long before this).
pub const MAX_NAMED_SEQS: usize = 1 << 24;

/// Parses `op[-decode]-H/HV-NxL`, where the sequences may be a mixed batch `NxL+MxJ+...`.
pub fn named_shape(name: &str) -> Result<(Problem, Vec<usize>)> {
    let bad = || {
        Error::invalid(
            "--shape",
            "op[-decode]-H/HV-NxL such as gdn-16/32-1x8192, gdn-16/32-1x30000+4x500 or gdn-decode-16/32-256x1",
            name,
        )
    };
    let parts: Vec<&str> = name.split('-').collect();
    let (op, mode, rest) = match parts.as_slice() {
        [op, "decode", heads, seqs] => (*op, Mode::Decode, [*heads, *seqs]),
        [op, heads, seqs] => (*op, Mode::Prefill, [*heads, *seqs]),
        _ => return Err(bad()),
    };
    let op = Op::parse(op).ok_or_else(bad)?;
    let (h, hv) = rest[0].split_once('/').ok_or_else(bad)?;
    let parse = |s: &str| s.parse::<usize>().map_err(|_| bad());
    let (h, hv) = (parse(h)?, parse(hv)?);
    // NxL, or a mixed batch NxL+MxJ+... (one long sequence among short ones: 1x30000+4x500)
    let mut groups = Vec::new();
    let (mut n, mut tokens) = (0usize, 0usize);
    for group in rest[1].split('+') {
        let (count, l) = group.split_once('x').ok_or_else(bad)?;
        let (count, l) = (parse(count)?, parse(l)?);
        if count == 0 || l == 0 {
            return Err(bad());
        }
        n = n.checked_add(count).ok_or_else(bad)?;
        tokens = count
            .checked_mul(l)
            .and_then(|t| t.checked_add(tokens))
            .ok_or_else(bad)?;
        groups.push((count, l));
    }
    // the lengths list is allocated here, before the memory cap sees the problem: bound it
    if n > MAX_NAMED_SEQS {
        return Err(Error::invalid(
            "--shape",
            format!("at most {MAX_NAMED_SEQS} sequences"),
            format!("{n} in {name}"),
        ));
    }
    let seqlens: Vec<usize> = groups
        .iter()
        .flat_map(|&(count, l)| std::iter::repeat_n(l, count))
        .collect();
    let mut p = Problem::new(op, mode, n, tokens, h, hv, 128, 128);
    p.qkv_dtype = DType::BF16;
    p.g_dtype = DType::F32;
    p.beta_dtype = DType::BF16;
    p.out_dtype = DType::BF16;
    p.state_in_dtype = DType::F32;
    p.state_out_dtype = DType::F32;
    match mode {
        Mode::Prefill => {
            p.initial = InitialState::Dense;
            p.final_state = FinalState::Dense;
        }
        Mode::Decode => {
            p.initial = InitialState::Pool { rows: n };
            p.final_state = FinalState::InPlace;
        }
    }
    p.validate()?;
    Ok((p, seqlens))
}

/// Named shapes time the whole workload: the generator leaves every fourth pool sequence at index
/// -1 (a conformance case: start from zeros, write nothing), which would move a quarter fewer
/// states than the peers' runs of the same shape (192 of 256 states for the decode anchor).
/// Points sequence n at pool row n (named shapes' pools have one row per sequence) and returns
/// the number of states moved.
pub fn every_sequence_active(p: &Problem, inputs: &mut deltarule_core::Inputs) -> Result<usize> {
    if let InitialState::Pool { rows } = p.initial {
        if rows >= p.seqs {
            let idx: Vec<i64> = (0..p.seqs as i64).collect();
            inputs.state_indices = Some(deltarule_core::HostTensor::from_i64(
                p.index_dtype,
                vec![p.seqs],
                &idx,
            ));
        }
    }
    active_states(p, inputs)
}

/// The sequences whose state a call reads and writes: those with a pool index other than -1, or
/// all of them for dense states.
pub fn active_states(p: &Problem, inputs: &deltarule_core::Inputs) -> Result<usize> {
    match (&p.initial, &inputs.state_indices) {
        (InitialState::Pool { .. }, Some(idx)) => Ok(idx
            .to_i64_vec("state_indices")?
            .iter()
            .filter(|&&i| i >= 0)
            .count()),
        _ => Ok(p.seqs),
    }
}

/// FLOPs of the chunked algorithm (`6KV + 10CK` per token and value head, C the chunk length);
/// decode counts the recurrence's `4KV` plus the decay.
pub fn flops(p: &Problem) -> f64 {
    let (k, v, c) = (p.k as f64, p.v as f64, p.chunk as f64);
    let per = match p.mode {
        Mode::Prefill => 6.0 * k * v + 10.0 * c * k,
        Mode::Decode => 5.0 * k * v,
    };
    per * (p.tokens * p.hv) as f64
}

/// The fewest bytes a call must move: every input read once, every output written once.
/// `states`: the sequences whose state is read and written (all of them, except pool sequences
/// at index -1, which start from zeros and write nothing).
pub fn min_bytes(p: &Problem, states: usize) -> f64 {
    let t = p.tokens as f64;
    let qkv = p.qkv_dtype.size() as f64;
    let gk = match p.op {
        Op::Gdn => 1.0,
        Op::Kda => p.k as f64,
    };
    let mut b = t * (2.0 * (p.h * p.k) as f64 * qkv + (p.hv * p.v) as f64 * qkv);
    b += t * (p.hv * p.v) as f64 * p.out_dtype.size() as f64;
    b += t * p.hv as f64 * (gk * p.g_dtype.size() as f64 + p.beta_dtype.size() as f64);
    let state = (p.hv * p.k * p.v) as f64;
    let states_read = match p.initial {
        InitialState::None => 0.0,
        InitialState::Dense => p.seqs as f64,
        InitialState::Pool { .. } => states as f64,
    };
    let states_written = match p.final_state {
        FinalState::None => 0.0,
        FinalState::InPlace => states as f64,
        _ => p.seqs as f64,
    };
    b += state * (states_read * p.state_in_dtype.size() as f64);
    b += state * (states_written * p.state_out_dtype.size() as f64);
    b
}

pub fn run(args: BenchArgs, cap: &ByteCap) -> Result<Outcome> {
    // (name, problem and lengths, named shape: times the whole workload, see every_sequence_active)
    let mut problems = Vec::new();
    for s in &args.shapes {
        if s == "anchors" || s == "prefill" {
            for a in if s == "anchors" { ANCHORS } else { PREFILL } {
                problems.push((a.to_string(), named_shape(a)?, true));
            }
        } else {
            problems.push((s.clone(), named_shape(s)?, true));
        }
    }
    for (_, (p, _), _) in &problems {
        cap.check_problem(p)?;
    }
    if args.problem.given() {
        let pp = args.problem.problem(cap, true)?;
        problems.push((pp.0.id(), pp, false));
    }
    if problems.is_empty() {
        return Err(Error::invalid(
            "--shape",
            "a named shape, `anchors`, or a generated problem (--op ... --tokens ...)",
            "nothing",
        ));
    }
    let engine = engine_for(&args.backends);
    let opts = BenchOptions {
        warmup: args.warmup,
        iters: args.iters,
        rotate_bytes: args.rotate_mib << 20,
    };
    let mut table = vec![[
        "shape", "backend", "rule", "gpu ms", "host us", "Mtok/s", "TFLOP/s", "GB/s", "floor ms",
        "x floor",
    ]
    .map(String::from)
    .to_vec()];
    let mut stage_lines: Vec<String> = Vec::new();
    for (name, (p, seqlens), named) in &problems {
        eprintln!("{name}: generating inputs ({})", p);
        let t_gen = std::time::Instant::now();
        let mut case = generate(p, seqlens, 1, DataStyle::default())?;
        eprintln!(
            "{name}: inputs ready in {:.1} s",
            t_gen.elapsed().as_secs_f64()
        );
        let states = if *named {
            every_sequence_active(&case.problem, &mut case.inputs)?
        } else {
            active_states(&case.problem, &case.inputs)?
        };
        for b in &args.backends {
            let pref = Preference::parse(b)?;
            let mut prob = case.problem.clone();
            // bf16 output where the row writes it (the tensor-core paths), else f32
            let max_seq = seqlens.iter().copied().max();
            if engine.select(&prob, pref, max_seq).chosen.is_none() {
                prob.out_dtype = DType::F32;
            }
            let res = engine.bench(&prob, &case.inputs, pref, &opts);
            let (rep, rule) = match res {
                Ok(x) => x,
                Err(e) => {
                    eprintln!("{name} on {b}: {e}");
                    continue;
                }
            };
            let gpu = median(&rep.device_ms);
            let mut sorted = rep.device_ms.clone();
            sorted.sort_by(|a, b| a.total_cmp(b));
            let pct = |q: f64| -> f64 {
                sorted
                    .get(((sorted.len() as f64 - 1.0) * q).round() as usize)
                    .copied()
                    .unwrap_or(0.0)
            };
            let host = median(&rep.host_us);
            let f = flops(&prob);
            let by = min_bytes(&prob, states);
            let floor_ms = (f / PEAK_FLOPS).max(by / PEAK_BYTES) * 1e3;
            let row = json!({
                "shape": name, "backend": b, "rule": rule.id, "device": rep.device,
                "timer": rep.timer, "gpu_ms_median": gpu, "host_us_median": host,
                "gpu_ms_min": pct(0.0), "gpu_ms_p10": pct(0.1), "gpu_ms_p90": pct(0.9),
                "gpu_ms_max": pct(1.0),
                "iters": rep.device_ms.len(), "input_sets": rep.input_sets,
                "tokens_per_s": prob.tokens as f64 / (gpu * 1e-3),
                "tflops": f / (gpu * 1e-3) / 1e12, "gbps": by / (gpu * 1e-3) / 1e9,
                "floor_ms": floor_ms, "x_floor": gpu / floor_ms,
                "stages_ms": rep.stages.iter().cloned().collect::<std::collections::BTreeMap<String, f64>>(),
            });
            if !rep.stages.is_empty() {
                let parts: Vec<String> = rep
                    .stages
                    .iter()
                    .map(|(l, ms)| format!("{l} {ms:.4}"))
                    .collect();
                stage_lines.push(format!(
                    "{name} on {b}: stages (median ms, each pass alone): {}",
                    parts.join(", ")
                ));
            }
            if args.json {
                println!("{row}");
            } else {
                // each result as it comes, so a run cut short keeps what it measured
                eprintln!(
                    "{name} on {b}: {gpu:.4} ms GPU (median of {}), {host:.1} us host ({})",
                    rep.device_ms.len(),
                    rule.id
                );
            }
            table.push(vec![
                name.clone(),
                b.clone(),
                rule.id.to_string(),
                format!("{gpu:.4}"),
                format!("{host:.1}"),
                format!("{:.1}", prob.tokens as f64 / (gpu * 1e-3) / 1e6),
                format!("{:.1}", f / (gpu * 1e-3) / 1e12),
                format!("{:.0}", by / (gpu * 1e-3) / 1e9),
                format!("{floor_ms:.4}"),
                format!("{:.1}", gpu / floor_ms),
            ]);
        }
    }
    if !args.json {
        print!("{}", render_aligned(&table));
        for l in &stage_lines {
            println!("{l}");
        }
    }
    Ok(Outcome::Pass)
}

#[cfg(test)]
mod tests {
    use super::{active_states, every_sequence_active, min_bytes, named_shape, ANCHORS, PREFILL};
    use deltarule_tests::generate::{generate, DataStyle};

    #[test]
    fn the_decode_anchor_moves_every_state() {
        let (p, seqlens) = named_shape("gdn-decode-16/32-256x1").expect("shape");
        let mut case = generate(&p, &seqlens, 1, DataStyle::default()).expect("generate");
        // the generator's conformance map skips every fourth sequence ...
        let before = active_states(&case.problem, &case.inputs).expect("indices");
        assert_eq!(before, 192);
        // ... the benchmark's named shapes do not
        let n = every_sequence_active(&case.problem, &mut case.inputs).expect("indices");
        assert_eq!(n, 256);
        let idx = case
            .inputs
            .state_indices
            .as_ref()
            .expect("pool indices")
            .to_i64_vec("state_indices")
            .expect("i64");
        assert_eq!(idx, (0..256).collect::<Vec<i64>>());
        // f32 state 32 x 128 x 128 read and written for 256 sequences: 1.07 GB plus the tokens
        let state_bytes = 2.0 * 256.0 * 32.0 * 128.0 * 128.0 * 4.0;
        let b = min_bytes(&case.problem, n);
        assert!(
            b > state_bytes && b < state_bytes * 1.01,
            "{b} vs {state_bytes}"
        );
        assert!(min_bytes(&case.problem, 192) < 0.76 * b);
    }

    #[test]
    fn mixed_batches_and_the_named_sets_parse() {
        let (p, seqlens) = named_shape("gdn-16/32-1x30000+4x500").expect("mixed");
        assert_eq!(seqlens, vec![30000, 500, 500, 500, 500]);
        assert_eq!((p.seqs, p.tokens, p.h, p.hv), (5, 32000, 16, 32));
        for bad in [
            "gdn-16/32-1x30000+",
            "gdn-16/32-0x8",
            "gdn-16/32-2x0",
            "gdn-16/32-1x8+x4",
            "gdn-16/32-99999999999999x1",
            "gdn-16/32-1x18446744073709551615+1x1",
        ] {
            assert!(named_shape(bad).is_err(), "{bad}");
        }
        for s in ANCHORS.iter().chain(PREFILL) {
            named_shape(s).expect(s);
        }
    }

    /// bench/peers.py times the peers on the same named sets: its lists must not drift.
    #[test]
    fn the_peer_script_names_the_same_shape_sets() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../bench/peers.py");
        let text = std::fs::read_to_string(path).expect("bench/peers.py");
        for (name, set) in [("ANCHORS", ANCHORS), ("PREFILL", PREFILL)] {
            let start = text.find(&format!("{name} = (")).expect(name);
            let body = &text[start..];
            let body = &body[..body.find("\n)").expect("closing parenthesis")];
            let listed: Vec<&str> = body
                .lines()
                .skip(1)
                .filter_map(|l| l.trim().strip_prefix('"'))
                .filter_map(|l| l.split('"').next())
                .collect();
            assert_eq!(listed, set, "{name} in bench/peers.py and cli/src/bench.rs");
        }
    }
}

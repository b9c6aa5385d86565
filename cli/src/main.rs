//! `deltarule`: the command-line face of the engine.
//!
//! Exit codes: 0 success (every comparison within tolerance), 1 a tolerance exceeded, 2 a usage or
//! input error (unreadable file, invalid problem, a problem over the memory cap, a backend choice
//! that does not fit, nothing compared), 3 a device or compile error (an unavailable backend asked
//! for by name included). `diff` runs every case and exits with the worst code of all.

mod args;
mod bench;

use args::ProblemArgs;
use clap::{Args, Parser, Subcommand};
use deltarule_core::problem::{Mode, Op};
use deltarule_core::select::{render_rules, DeviceState, Preference};
use deltarule_core::{BackendKind, Error};
use deltarule_engine::{Engine, EngineOptions};
use deltarule_tests::casefile::{read_case_with_limit, write_case, Case};
use deltarule_tests::diff::{
    backend_kind, default_backends, diff_case, diff_preference, reference_outputs, render_table,
    DiffRow,
};
use deltarule_tests::generate::{generate, with_expected, DataStyle};
use deltarule_tests::limits::ByteCap;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser, Debug)]
#[command(
    name = "deltarule",
    version,
    about = "Gated delta-rule attention (GDN, KDA): diff, generate, select and benchmark every backend"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
    /// The most bytes a case or generated problem may allocate (K, M, G, T suffixes). Default:
    /// DELTARULE_MAX_BYTES, else 75 % of the available memory, else 8G.
    #[arg(long, global = true, value_parser = args::byte_count)]
    max_bytes: Option<u64>,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Run cases on backends and compare every output with the expected tensors and the float64
    /// reference.
    Diff(DiffArgs),
    /// Write a generated problem with float64 expected outputs as a case file.
    Gen {
        #[command(flatten)]
        problem: ProblemArgs,
        #[arg(long)]
        out: PathBuf,
    },
    /// List the backends found, their capabilities, and why any is unavailable.
    Backends,
    /// Print the selection-rule table.
    Rules {
        /// Markdown (the README table) instead of the full table.
        #[arg(long)]
        markdown: bool,
    },
    /// Choose a rule for a problem and explain the choice.
    Select {
        #[command(flatten)]
        problem: ProblemArgs,
        /// auto, cpu, wgpu, cuda or backend:kernel.
        #[arg(long, default_value = "auto")]
        backend: String,
        #[arg(long)]
        gdn_prefill_backend: Option<String>,
        #[arg(long)]
        kda_prefill_backend: Option<String>,
        /// Print every row considered and why it was rejected.
        #[arg(long)]
        explain: bool,
    },
    /// Time a backend on named or generated shapes.
    Bench(bench::BenchArgs),
}

#[derive(Args, Debug)]
struct DiffArgs {
    /// Case files (safetensors, docs/case-format.md).
    #[arg(long = "case", num_args = 1..)]
    cases: Vec<PathBuf>,
    /// Backends: cpu (float64 recurrence), cpu:chunked (f32), cpu:chunked-f64, wgpu, cuda,
    /// backend:kernel, auto. Default: every available backend.
    #[arg(long = "backend", num_args = 1..)]
    backends: Vec<String>,
    /// Alias of --backend for gdn prefill (as in the serving engines).
    #[arg(long)]
    gdn_prefill_backend: Option<String>,
    /// Alias of --backend for kda prefill (as in the serving engines).
    #[arg(long)]
    kda_prefill_backend: Option<String>,
    /// One JSON object per line instead of a table.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    problem: ProblemArgs,
}

/// An engine with the CPU backend and every backend the names ask for (all of them for none or
/// `auto`).
fn engine_for(names: &[String]) -> Engine {
    let mut kinds = vec![BackendKind::Cpu];
    let all = names.is_empty() || names.iter().any(|n| n == "auto");
    for k in [BackendKind::Wgpu, BackendKind::Cuda] {
        if all || names.iter().any(|n| backend_kind(n) == Some(k)) {
            kinds.push(k);
        }
    }
    Engine::new(&EngineOptions {
        backends: kinds,
        ..EngineOptions::default()
    })
}

/// `--gdn-prefill-backend` / `--kda-prefill-backend` apply to the prefill of their op.
fn alias_backend(
    op: Op,
    mode: Mode,
    backend: Option<&str>,
    gdn: &Option<String>,
    kda: &Option<String>,
) -> Option<String> {
    if mode == Mode::Prefill {
        match op {
            Op::Gdn if gdn.is_some() => return gdn.clone(),
            Op::Kda if kda.is_some() => return kda.clone(),
            _ => {}
        }
    }
    backend.map(|s| s.to_string())
}

enum Outcome {
    Pass,
    /// Errors already reported; exit with this code.
    Code(u8),
}

/// The exit code of an error: 2 for usage and input errors and for a backend that cannot do the
/// problem, 3 for device and compile errors, an unavailable backend included.
fn exit_code(e: &Error) -> u8 {
    if e.is_usage() {
        2
    } else {
        match e {
            Error::Unsupported { .. } => 2,
            _ => 3,
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(Outcome::Pass) => ExitCode::SUCCESS,
        Ok(Outcome::Code(c)) => ExitCode::from(c),
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(exit_code(&e))
        }
    }
}

fn run(cli: Cli) -> Result<Outcome, Error> {
    let cap = ByteCap::resolve(cli.max_bytes)?;
    match cli.cmd {
        Cmd::Diff(args) => cmd_diff(args, &cap),
        Cmd::Gen { problem, out } => {
            let (p, seqlens) = problem.problem(&cap, true)?;
            let case = generate(&p, &seqlens, problem.seed, DataStyle::default())?;
            eprintln!(
                "computing the float64 reference for {} ({} sequences x {} value heads)...",
                p, p.seqs, p.hv
            );
            let case = with_expected(case)?;
            write_case(&out, &case)?;
            println!("wrote {} ({})", out.display(), case.problem);
            Ok(Outcome::Pass)
        }
        Cmd::Backends => {
            let engine = Engine::new(&EngineOptions::default());
            for d in engine.devices() {
                match d {
                    DeviceState::Available(c) => {
                        println!("{:<5} available    {}", c.backend, c.summary())
                    }
                    DeviceState::Unavailable { backend, reason } => {
                        println!("{backend:<5} unavailable  {reason}")
                    }
                }
            }
            Ok(Outcome::Pass)
        }
        Cmd::Rules { markdown } => {
            if markdown {
                print!("{}", deltarule_core::select::render_markdown());
            } else {
                print!("{}", render_rules());
            }
            Ok(Outcome::Pass)
        }
        Cmd::Select {
            problem,
            backend,
            gdn_prefill_backend,
            kda_prefill_backend,
            explain,
        } => {
            let (p, seqlens) = problem.problem(&cap, false)?;
            let name = alias_backend(
                p.op,
                p.mode,
                Some(&backend),
                &gdn_prefill_backend,
                &kda_prefill_backend,
            )
            .unwrap_or_else(|| "auto".into());
            let pref = Preference::parse(&name)?;
            let engine = engine_for(std::slice::from_ref(&name));
            let sel = engine.select(&p, pref, seqlens.iter().copied().max());
            println!("problem: {p}");
            println!("choice:  {pref}");
            for d in engine.devices() {
                if let DeviceState::Unavailable { backend, reason } = d {
                    println!("device:  {backend} unavailable ({reason})");
                }
            }
            if explain {
                for line in sel.explain() {
                    println!("{line}");
                }
            }
            match sel.rule() {
                Ok(r) => {
                    println!(
                        "chosen:  {} ({}:{}, {} precision, priority {}): {}",
                        r.id, r.backend, r.kernel, r.precision, r.priority, r.note
                    );
                    Ok(Outcome::Pass)
                }
                Err(e) => Err(e),
            }
        }
        Cmd::Bench(args) => bench::run(args, &cap),
    }
}

/// Whether the table has any row of this backend (and kernel) for the case's op and mode; a
/// backend without one is skipped with a note rather than failed.
fn has_row(case: &Case, name: &str) -> bool {
    let Ok(pref) = diff_preference(name) else {
        return true; // let diff_case report the parse error
    };
    deltarule_core::RULES
        .iter()
        .any(|r| r.op == case.problem.op && r.mode == case.problem.mode && pref.wants(r))
}

fn cmd_diff(args: DiffArgs, cap: &ByteCap) -> Result<Outcome, Error> {
    let DiffArgs {
        cases: case_paths,
        backends,
        gdn_prefill_backend: gdn_alias,
        kda_prefill_backend: kda_alias,
        json,
        problem,
    } = args;
    // every error is printed once, here, and the worst exit code wins
    let mut worst: u8 = 0;
    let mut report = |context: &str, e: &Error| {
        eprintln!("error: {context}{e}");
        worst = worst.max(exit_code(e));
    };
    let mut cases: Vec<Case> = Vec::new();
    for path in &case_paths {
        match read_case_with_limit(path, cap) {
            Ok(c) => cases.push(c),
            Err(e) => report("", &e),
        }
    }
    if problem.check_finite {
        for c in cases.iter_mut() {
            c.problem.check_finite = true;
        }
    }
    if problem.given() {
        match problem
            .problem(cap, true)
            .and_then(|(p, seqlens)| generate(&p, &seqlens, problem.seed, DataStyle::default()))
        {
            Ok(c) => cases.push(c),
            Err(e) => report("", &e),
        }
    }
    if cases.is_empty() && case_paths.is_empty() && !problem.given() {
        return Err(Error::invalid(
            "--case",
            "at least one case file, or a generated problem (--op ... --tokens ...)",
            "nothing",
        ));
    }
    if cases.is_empty() {
        return Ok(Outcome::Code(worst.max(2)));
    }
    let mut requested = backends.clone();
    if let Some(g) = &gdn_alias {
        requested.push(g.clone());
    }
    if let Some(k) = &kda_alias {
        requested.push(k.clone());
    }
    let engine = engine_for(&requested);
    // a backend asked for by name whose device is missing is a device error (reported once, its
    // names dropped); one found missing while probing every backend is a note
    let mut missing: Vec<BackendKind> = Vec::new();
    for d in engine.devices() {
        if let DeviceState::Unavailable { backend, reason } = d {
            if requested.iter().any(|n| backend_kind(n) == Some(*backend)) {
                report(
                    "",
                    &Error::Unavailable {
                        backend: *backend,
                        reason: reason.clone(),
                    },
                );
                missing.push(*backend);
            } else if !json {
                eprintln!("note: {backend} unavailable: {reason}");
            }
        }
    }
    let available = |n: &String| backend_kind(n).is_none_or(|k| !missing.contains(&k));
    let backends: Vec<String> = backends.into_iter().filter(available).collect();
    let gdn_alias = gdn_alias.filter(available);
    let kda_alias = kda_alias.filter(available);
    let explicit = !requested.is_empty();
    let mut all_rows: Vec<DiffRow> = Vec::new();
    let mut failed = false;
    for case in &cases {
        let names: Vec<String> =
            if explicit && backends.is_empty() && gdn_alias.is_none() && kda_alias.is_none() {
                Vec::new() // every backend asked for is missing (reported above)
            } else if backends.is_empty() && gdn_alias.is_none() && kda_alias.is_none() {
                default_backends(&engine, case.problem.mode)
            } else {
                let mut v = backends.clone();
                if let Some(a) = alias_backend(
                    case.problem.op,
                    case.problem.mode,
                    None,
                    &gdn_alias,
                    &kda_alias,
                ) {
                    v.push(a);
                }
                if v.is_empty() && !explicit {
                    v = default_backends(&engine, case.problem.mode);
                }
                v
            };
        if names.is_empty() {
            continue;
        }
        if !json {
            eprintln!("{}: {} on {}", case.name, case.problem, names.join(", "));
        }
        if case.expected.is_empty() {
            eprintln!(
                "note: {} has no expected tensors: comparing against the float64 reference only",
                case.name
            );
        }
        let reference = match reference_outputs(case) {
            Ok(r) => r,
            Err(e) => {
                report(&format!("{}: ", case.name), &e);
                continue;
            }
        };
        for name in &names {
            if !has_row(case, name) {
                eprintln!(
                    "skip: {name} has no {} {} row (deltarule rules lists them)",
                    case.problem.op.name(),
                    case.problem.mode.name()
                );
                continue;
            }
            match diff_case(&engine, case, name, &reference) {
                Ok(rows) => {
                    for r in rows {
                        failed |= !r.pass;
                        if json {
                            println!("{}", r.to_json());
                        }
                        all_rows.push(r);
                    }
                }
                Err(e) => report(&format!("{} on {name}: ", case.name), &e),
            }
        }
    }
    if !json && !all_rows.is_empty() {
        print!("{}", render_table(&all_rows));
        let fails = all_rows.iter().filter(|r| !r.pass).count();
        println!(
            "{} comparisons, {} passed, {} failed",
            all_rows.len(),
            all_rows.len() - fails,
            fails
        );
    }
    if all_rows.is_empty() && worst == 0 {
        eprintln!(
            "error: nothing was compared: every backend asked for was skipped (deltarule rules lists the rows, deltarule backends the devices)"
        );
        worst = 2;
    }
    if failed {
        worst = worst.max(1);
    }
    Ok(match worst {
        0 => Outcome::Pass,
        c => Outcome::Code(c),
    })
}

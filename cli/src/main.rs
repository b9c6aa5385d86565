//! `deltarule`: the command-line face of the engine.
//!
//! Exit codes: 0 success (every comparison within tolerance), 1 a tolerance exceeded, 2 a usage or
//! input error (unreadable file, invalid problem, a problem over the memory cap, a backend choice
//! that does not fit, nothing compared), 3 a device or compile error (an unavailable backend asked
//! for by name included). `diff` runs every case and exits with the worst code of all; `compare`
//! uses 0, 1 and 2 the same way.

mod args;
mod bench;
mod plot;
mod progress;

use args::{apply_gates, gate_marks, DataArg, GateArgs, ProblemArgs};
use clap::{Args, Parser, Subcommand};
use deltarule_core::problem::{Mode, Op};
use deltarule_core::select::{render_rules, DeviceState, Preference};
use deltarule_core::{BackendKind, Capabilities, Error};
use deltarule_core::{Outputs, Problem};
use deltarule_engine::{Engine, EngineOptions};
use deltarule_tests::casefile::{read_case_with_limit, write_case, Case, Expected};
use deltarule_tests::diff::{
    backend_kind, compare_sets, default_backends, default_compare_tolerance, diff_preference,
    observed_rows, observed_source, read_output_set, reference_outputs_with_progress, render_table,
    render_wide, run_backend, save_outputs, CasePart, DiffRow, OutputRefs,
};
use deltarule_tests::generate::{generate, DataStyle};
use deltarule_tests::limits::ByteCap;
use std::path::{Path, PathBuf};
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
        #[command(flatten)]
        gates: GateArgs,
        #[arg(long)]
        out: PathBuf,
    },
    /// Compare two output sets (files from `diff --save-outputs`, or case files' observed or
    /// expected outputs) with the metrics of `diff`. Exit code 0 within --tol, 1 over it, 2 for an
    /// input error.
    Compare(CompareArgs),
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
        /// Plan for an assumed CUDA device (sm_90) with this many multiprocessors instead of
        /// the one present, if any (132: an H100 SXM or H200): what `auto` would pick there.
        #[arg(long, value_name = "SMS", value_parser = clap::value_parser!(u32).range(1..=4096))]
        cuda_sms: Option<u32>,
    },
    /// Time a backend on named or generated shapes.
    Bench(bench::BenchArgs),
}

#[derive(Args, Debug)]
struct DiffArgs {
    /// Case files (safetensors, docs/case-format.md).
    #[arg(long = "case", num_args = 1..)]
    cases: Vec<PathBuf>,
    /// Backends: cpu (float64 recurrence), cpu:chunked (f32), cpu:chunked-f64, cpu:segmented
    /// (exact segmented prefill, f64; DELTARULE_CPU_SEGMENT_LEN tokens per segment, default 64),
    /// wgpu, cuda, backend:kernel, auto. Default: every available backend.
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
    /// Every column on one line per row (wider than 100 columns).
    #[arg(long)]
    wide: bool,
    /// Draw the error along the sequence as SVG: FILE for one case, FILE-<case>.svg beside it
    /// for each of several.
    #[arg(long, value_name = "FILE.svg")]
    plot: Option<PathBuf>,
    /// Plot only packed tokens START..END (to see chunk boundaries and single gates in a long
    /// sequence).
    #[arg(long, value_name = "START..END", value_parser = token_range)]
    plot_tokens: Option<(usize, usize)>,
    /// Write each backend's outputs for each case to DIR/<case>.<backend>.safetensors (for
    /// `deltarule compare`).
    #[arg(long, value_name = "DIR")]
    save_outputs: Option<PathBuf>,
    #[command(flatten)]
    problem: ProblemArgs,
    #[command(flatten)]
    gates: GateArgs,
}

#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum PartArg {
    /// A case file's observed outputs where it has them, else its expected ones.
    Auto,
    Expected,
    Observed,
}

impl PartArg {
    fn part(self) -> CasePart {
        match self {
            PartArg::Auto => CasePart::Auto,
            PartArg::Expected => CasePart::Expected,
            PartArg::Observed => CasePart::Observed,
        }
    }
}

#[derive(Args, Debug)]
struct CompareArgs {
    /// Output set A, the outputs measured ("got").
    a: PathBuf,
    /// Output set B, what A is measured against ("want"). Without it, A must be a case file with
    /// observed outputs: they are compared with its expected ones.
    b: Option<PathBuf>,
    /// Which outputs of A, when A is a case file.
    #[arg(long, value_enum, default_value = "auto")]
    a_part: PartArg,
    /// Which outputs of B, when B is a case file.
    #[arg(long, value_enum, default_value = "auto")]
    b_part: PartArg,
    /// The relative L2 bound. Default: the sum of the two sets' bounds as recorded (each within
    /// its bound of the truth puts them within the sum of each other; 1e-4 for a set recording
    /// none).
    #[arg(long, value_parser = tolerance)]
    tol: Option<f64>,
    /// One JSON object per line instead of a table.
    #[arg(long)]
    json: bool,
    /// Every column on one line per row.
    #[arg(long)]
    wide: bool,
    /// Draw A's error against B along the sequence as SVG.
    #[arg(long, value_name = "FILE.svg")]
    plot: Option<PathBuf>,
    /// Plot only packed tokens START..END.
    #[arg(long, value_name = "START..END", value_parser = token_range)]
    plot_tokens: Option<(usize, usize)>,
}

fn token_range(s: &str) -> Result<(usize, usize), String> {
    let bad = || format!("`{s}` must be START..END with START < END, such as 29900..30200");
    let (a, b) = s.split_once("..").ok_or_else(bad)?;
    let (a, b) = (
        a.trim().parse::<usize>().map_err(|_| bad())?,
        b.trim().parse::<usize>().map_err(|_| bad())?,
    );
    if a < b {
        Ok((a, b))
    } else {
        Err(bad())
    }
}

fn tolerance(s: &str) -> Result<f64, String> {
    s.trim()
        .parse::<f64>()
        .ok()
        .filter(|x| x.is_finite() && *x >= 0.0)
        .ok_or_else(|| format!("`{s}` must be a non-negative number such as 1e-4"))
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
        Cmd::Gen {
            problem,
            gates,
            out,
        } => {
            let (p, seqlens) = problem.problem(&cap, true)?;
            let show = progress::wanted(false);
            let mut case = generated(&p, &seqlens, problem.seed, problem.data, show)?;
            apply_gates(&mut case, &gates.gate_at)?;
            eprintln!(
                "computing the float64 reference for {} ({} sequences x {} value heads)...",
                p, p.seqs, p.hv
            );
            let reference = reference_with_progress(&case, show)?;
            case.expected = Expected::from_outputs(&reference);
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
            cuda_sms,
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
            let mut devices = engine.devices().to_vec();
            if let Some(sms) = cuda_sms {
                devices.retain(|d| d.backend() != BackendKind::Cuda);
                devices.push(DeviceState::Available(Capabilities::assumed_cuda(sms)));
            }
            let sel =
                deltarule_core::select::select(&p, &devices, pref, seqlens.iter().copied().max());
            println!("problem: {p}");
            println!("choice:  {pref}");
            if let Some(sms) = cuda_sms {
                println!("device:  cuda assumed: sm_90 with {sms} multiprocessors (planning only)");
            }
            for d in &devices {
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
                    // (the plan models sm_90a builds: other architectures lack the wgmma passes)
                    let sms = devices.iter().find_map(|d| match d {
                        DeviceState::Available(c)
                            if c.backend == BackendKind::Cuda
                                && c.compute_capability == Some((9, 0)) =>
                        {
                            c.multiprocessors
                        }
                        _ => None,
                    });
                    if let (true, BackendKind::Cuda, Some(sms)) = (explain, r.backend, sms) {
                        let longest = seqlens.iter().copied().max();
                        if let Some(lines) = Engine::cuda_plan(r.kernel, &p, sms as usize, longest)
                        {
                            println!(
                                "plan:    on sm_90a with {sms} multiprocessors, default options:"
                            );
                            for l in lines? {
                                println!("           {l}");
                            }
                        }
                    }
                    Ok(Outcome::Pass)
                }
                Err(e) => Err(e),
            }
        }
        Cmd::Bench(args) => bench::run(args, &cap),
        Cmd::Compare(args) => cmd_compare(args, &cap),
    }
}

/// A generated case of `data`, with a spinner while generation takes long.
fn generated(
    p: &Problem,
    seqlens: &[usize],
    seed: u64,
    data: DataArg,
    show: bool,
) -> Result<Case, Error> {
    let bar = progress::Progress::start(show, "generating the inputs", None);
    let style = DataStyle {
        collinear: data == DataArg::Collinear,
        ..DataStyle::default()
    };
    let case = generate(p, seqlens, seed, style);
    bar.finish();
    case
}

/// The float64 reference of a case, with a progress bar while it takes long.
fn reference_with_progress(case: &Case, show: bool) -> Result<Outputs, Error> {
    let pieces = (case.problem.seqs * case.problem.hv) as u64;
    let bar = progress::Progress::start(show, "float64 reference", Some(pieces.max(1)));
    let out = reference_outputs_with_progress(case, &|done, _| bar.set(done as u64));
    bar.finish();
    out
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

/// The line that opens a case on stderr: its name, and the problem where that says more.
fn case_line(case: &Case, names: &[String]) -> String {
    let id = case.problem.to_string();
    if id == case.name {
        format!("{} on {}", case.name, names.join(", "))
    } else {
        format!("{} ({id}) on {}", case.name, names.join(", "))
    }
}

/// The plot of one case's rows (the `o` rows' profiles, the final-state rows' per-sequence
/// errors).
fn plot_case(
    case_name: &str,
    p: &Problem,
    cu: &[usize],
    marks: Vec<(usize, String)>,
    rows: &[&DiffRow],
    window: Option<(usize, usize)>,
) -> plot::PlotCase {
    let (first, end) = match window {
        Some((a, b)) => (a.min(p.tokens), b.min(p.tokens).max(a.min(p.tokens))),
        None => (0, p.tokens),
    };
    let mut series = Vec::new();
    let mut exact = Vec::new();
    for r in rows.iter().filter(|r| r.tensor == "o") {
        let Some(prof) = &r.profile else { continue };
        let states = rows
            .iter()
            .find(|s| s.tensor == "final_state" && s.backend == r.backend)
            .map(|s| s.per_sequence.clone())
            .unwrap_or_default();
        let all_zero =
            prof.per_token.iter().all(|&x| x == 0.0) && states.iter().flatten().all(|&x| x == 0.0);
        if all_zero {
            exact.push(r.backend.clone());
            continue;
        }
        let crop = |v: &[f64], per: usize| -> Vec<f64> {
            v.get(first * per..end * per).unwrap_or_default().to_vec()
        };
        series.push(plot::Series {
            name: r.backend.clone(),
            per_token: crop(&prof.per_token, 1),
            per_head: crop(&prof.per_head, prof.hv),
            states,
        });
    }
    let want = rows.first().map_or("f64", |r| r.reference.as_str());
    let id = p.to_string();
    let shape = if id == case_name {
        String::new()
    } else {
        format!("{id}; ")
    };
    let range = if window.is_some() {
        format!(" (tokens {first}..{end} shown)")
    } else {
        String::new()
    };
    let subtitle = format!(
        "{shape}{} sequence(s), {} tokens{range}, {} value heads; error of o per token against {}",
        cu.len().saturating_sub(1),
        p.tokens,
        p.hv,
        if want == "expected" || want == "f64" {
            "the float64 reference"
        } else {
            want
        }
    );
    plot::PlotCase {
        title: case_name.to_string(),
        subtitle,
        first,
        tokens: end - first,
        hv: p.hv,
        cu: cu.to_vec(),
        chunk: deltarule_core::problem::CHUNK,
        marks,
        series,
        exact,
    }
}

/// Draws each case's picture; returns the files written.
fn draw_plots(path: &Path, cases: &[plot::PlotCase]) -> Result<Vec<PathBuf>, Error> {
    let names: Vec<String> = cases.iter().map(|c| c.title.clone()).collect();
    let files = plot::paths(path, &names);
    for (c, f) in cases.iter().zip(&files) {
        plot::draw(f, c).map_err(|reason| Error::Output {
            path: f.display().to_string(),
            reason,
        })?;
    }
    Ok(files)
}

fn cmd_diff(args: DiffArgs, cap: &ByteCap) -> Result<Outcome, Error> {
    let DiffArgs {
        cases: case_paths,
        backends,
        gdn_prefill_backend: gdn_alias,
        kda_prefill_backend: kda_alias,
        json,
        wide,
        plot,
        plot_tokens,
        save_outputs: save_dir,
        problem,
        gates,
    } = args;
    let show = progress::wanted(json);
    if !gates.gate_at.is_empty() && !problem.given() {
        return Err(Error::invalid(
            "--gate-at",
            "a generated problem to edit (--op ... --tokens ...); a case file's gates are its own",
            "no generated problem",
        ));
    }
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
        match problem.problem(cap, true).and_then(|(p, seqlens)| {
            let mut c = generated(&p, &seqlens, problem.seed, problem.data, show)?;
            apply_gates(&mut c, &gates.gate_at)?;
            Ok(c)
        }) {
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
    let mut plots: Vec<plot::PlotCase> = Vec::new();
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
        if names.is_empty() && case.expected.observed.is_none() {
            continue;
        }
        if !json {
            let mut shown = names.clone();
            if let Some(o) = &case.expected.observed {
                shown.push(format!("observed:{}", o.label));
            }
            eprintln!("{}", case_line(case, &shown));
        }
        if case.expected.is_empty() && !json {
            eprintln!(
                "note: {} has no expected tensors: comparing against the float64 reference only",
                case.name
            );
        }
        let reference = match reference_with_progress(case, show) {
            Ok(r) => r,
            Err(e) => {
                report(&format!("{}: ", case.name), &e);
                continue;
            }
        };
        let mut case_rows: Vec<DiffRow> = Vec::new();
        for name in &names {
            if !has_row(case, name) {
                eprintln!(
                    "skip: {name} has no {} {} row (deltarule rules lists them)",
                    case.problem.op.name(),
                    case.problem.mode.name()
                );
                continue;
            }
            match run_backend(&engine, case, name, &reference) {
                Ok(run) => {
                    if let Some(dir) = &save_dir {
                        if let Err(e) = save_outputs(
                            dir,
                            case,
                            &run.problem,
                            &run.source,
                            OutputRefs::of(&run.outputs),
                        ) {
                            report(&format!("{} on {name}: ", case.name), &e);
                        }
                    }
                    case_rows.extend(run.rows);
                }
                Err(e) => report(&format!("{} on {name}: ", case.name), &e),
            }
        }
        if let Some(o) = &case.expected.observed {
            match observed_rows(case, &reference) {
                Ok(rows) => {
                    if let Some(dir) = &save_dir {
                        let src = observed_source(case, o);
                        if let Err(e) =
                            save_outputs(dir, case, &case.problem, &src, OutputRefs::observed(o))
                        {
                            report(&format!("{}: ", case.name), &e);
                        }
                    }
                    case_rows.extend(rows);
                }
                Err(e) => report(&format!("{}: ", case.name), &e),
            }
        }
        if plot.is_some() && !case_rows.is_empty() {
            let cu: Vec<usize> = case
                .inputs
                .cu_seqlens
                .to_i64_vec("cu_seqlens")
                .map(|v| v.iter().map(|&x| x.max(0) as usize).collect())
                .unwrap_or_default();
            let refs: Vec<&DiffRow> = case_rows.iter().collect();
            plots.push(plot_case(
                &case.name,
                &case.problem,
                &cu,
                gate_marks(&case.metadata),
                &refs,
                plot_tokens,
            ));
        }
        for r in &case_rows {
            failed |= !r.pass;
            if json {
                println!("{}", r.to_json());
            }
        }
        all_rows.extend(case_rows);
    }
    if !json && !all_rows.is_empty() {
        if wide {
            print!("{}", render_wide(&all_rows));
        } else {
            print!("{}", render_table(&all_rows));
        }
        let fails = all_rows.iter().filter(|r| !r.pass).count();
        println!(
            "{} comparisons, {} passed, {} failed",
            all_rows.len(),
            all_rows.len() - fails,
            fails
        );
    }
    if let Some(path) = &plot {
        match draw_plots(path, &plots) {
            Ok(files) => {
                for f in files {
                    eprintln!("plot: {}", f.display());
                }
            }
            Err(e) => report("", &e),
        }
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

fn cmd_compare(args: CompareArgs, cap: &ByteCap) -> Result<Outcome, Error> {
    let (a_part, b_part) = match (&args.b, args.a_part, args.b_part) {
        (None, PartArg::Auto, PartArg::Auto) => (CasePart::Observed, CasePart::Expected),
        (_, a, b) => (a.part(), b.part()),
    };
    let a = read_output_set(&args.a, a_part, cap)?;
    let b = read_output_set(args.b.as_ref().unwrap_or(&args.a), b_part, cap)?;
    let tol = args
        .tol
        .unwrap_or_else(|| default_compare_tolerance(&a, &b));
    let rows = compare_sets(&a, &b, tol)?;
    if args.json {
        for r in &rows {
            println!("{}", r.to_json());
        }
    } else {
        for (name, set) in [("A (got)", &a), ("B (want)", &b)] {
            for l in deltarule_tests::diff::wrap(
                &format!("{name}: {}", set.provenance()),
                deltarule_tests::diff::NARROW,
                4,
            ) {
                println!("{l}");
            }
        }
        if args.wide {
            print!("{}", render_wide(&rows));
        } else {
            print!("{}", render_table(&rows));
        }
        let fails = rows.iter().filter(|r| !r.pass).count();
        println!(
            "{} comparisons, {} passed, {} failed (bound {tol:.0e})",
            rows.len(),
            rows.len() - fails,
            fails
        );
    }
    if let Some(path) = &args.plot {
        let refs: Vec<&DiffRow> = rows.iter().collect();
        let g = &a.geometry;
        let name = rows
            .first()
            .map_or_else(|| "compare".to_string(), |r| r.case.clone());
        let pc = plot_case(
            &name,
            &g.problem,
            &g.cu,
            gate_marks(&a.metadata),
            &refs,
            args.plot_tokens,
        );
        for f in draw_plots(path, &[pc])? {
            eprintln!("plot: {}", f.display());
        }
    }
    Ok(if rows.iter().all(|r| r.pass) {
        Outcome::Pass
    } else {
        Outcome::Code(1)
    })
}

//! Device tests (skipped, printed, without a GPU; failing with `DELTARULE_REQUIRE_CUDA=1`): the
//! conformance suite of `deltarule-tests` for each CUDA kernel named explicitly (the `cuda`
//! instantiation in tests/tests/conformance.rs lets `auto` pick, which sends the small generated
//! cases to small-bh), and a representative subset for compute-sanitizer.

use deltarule_tests::casefile::Case;
use deltarule_tests::suite;

fn present() -> bool {
    match suite::availability("cuda", Some("DELTARULE_REQUIRE_CUDA")) {
        Ok(()) => true,
        Err(reason) => {
            println!("SKIP cuda: backend unavailable: {reason}");
            false
        }
    }
}

/// gdn with `heads` = (H, HV), K = V = 128, 16-bit inputs, the sequence lengths `lens`, a dense
/// initial and final state, checkpoints every `ck` tokens, the state `layout` and `l2norm`: a
/// generated problem checked on `backend` against float64 (`check_case`: the run is repeated
/// bit-identical and every poisoned output must be written).
fn check_gdn_long(
    backend: &str,
    lens: &[usize],
    heads: (usize, usize),
    layout: deltarule_core::StateLayout,
    ck: Option<usize>,
    l2norm: bool,
    seed: u64,
) -> deltarule_core::Result<deltarule_tests::cases::CaseCheck> {
    use deltarule_core::{FinalState, InitialState, Mode, Op, Problem};
    use deltarule_tests::{cases, diff, generate};
    let tokens = lens.iter().sum();
    let mut p = Problem::new(
        Op::Gdn,
        Mode::Prefill,
        lens.len(),
        tokens,
        heads.0,
        heads.1,
        128,
        128,
    );
    p.initial = InitialState::Dense;
    p.final_state = FinalState::Dense;
    p.checkpoint_every = ck;
    p.layout = layout;
    p.l2norm = l2norm;
    let case = generate::generate(&p, lens, seed, generate::DataStyle::default())?;
    let reference = diff::reference_outputs(&case)?;
    cases::check_case(suite::engine(), backend, &case, &reference)
}

/// This test binary again as a child process with `var` = `value` (the backend reads its
/// variables once, at construction), running the tests `filter` selects one at a time: prints
/// the child's suite summaries (" ran, " lines) under the setting, panics with both outputs unless
/// it succeeded, and returns its standard output.
fn rerun_with(var: &str, value: &str, filter: &[&str]) -> String {
    let exe = std::env::current_exe().expect("the test binary's path");
    let out = std::process::Command::new(&exe)
        .args(filter)
        .args(["--nocapture", "--test-threads=1"])
        .env(var, value)
        .output()
        .expect("run the test binary");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    for line in text.lines().filter(|l| l.contains(" ran, ")) {
        println!("{var}={value}: {line}");
    }
    assert!(
        out.status.success(),
        "the tests {filter:?} with {var}={value} failed:\n{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    text
}

/// The rest of the line of `text` that starts with `marker` (the harness prints "test <name> ..."
/// before a test's own output on the same line).
fn reported<'a>(text: &'a str, marker: &str) -> Option<&'a str> {
    text.lines().find_map(|l| l.find(marker).map(|at| &l[at..]))
}

#[test]
fn chunked_conformance() {
    if present() {
        suite::golden("cuda:chunked").finish("golden files", "cuda:chunked");
        suite::generated("cuda:chunked", |_| true).finish("generated cases", "cuda:chunked");
        suite::properties("cuda:chunked", 2).finish("properties", "cuda:chunked");
    }
}

/// The chunked tests again with the classic fused kernel forced (`DELTARULE_CUDA_FUSED=classic`):
/// `chunked` runs the fused T-form wherever the final state is dense f32 (most generated cases),
/// so the classic kernel would otherwise only see the pool and bf16-state cases. A child process
/// of this binary with the variable set, as the small-bh passes below.
#[test]
fn chunked_conformance_with_the_classic_fused_kernel() {
    if !present() || std::env::var_os("DELTARULE_CUDA_FUSED").is_some() {
        return;
    }
    let text = rerun_with("DELTARULE_CUDA_FUSED", "classic", &["chunked_"]);
    for line in text.lines().filter(|l| l.contains("sequences on")) {
        println!("DELTARULE_CUDA_FUSED=classic: {line}");
    }
    assert!(text.contains(" ran, "), "no suite ran:\n{text}");
}

/// The fused T-form on what the suite's small problems do not reach: gdn 16/32, K = V = 128,
/// sequences of 0 to 3000 tokens (one-chunk, multi-chunk, partial last chunks, zero-length),
/// a dense initial state, checkpoints every 128 tokens, in both state layouts, against float64
/// (`check_case` reruns bit-identical and checks the poisoned outputs were all written).
#[test]
fn chunked_long_and_short_sequences() {
    use deltarule_core::StateLayout;
    if !present() {
        return;
    }
    let lens = [64, 0, 700, 1, 64, 129, 3000, 37];
    for layout in [StateLayout::Kv, StateLayout::Vk] {
        let check = check_gdn_long("cuda:chunked", &lens, (16, 32), layout, Some(128), true, 12)
            .unwrap_or_else(|e| panic!("gdn long and short sequences ({layout:?}): {e}"));
        println!(
            "long and short sequences on cuda:chunked ({layout:?}): {:?}",
            check.errors
        );
    }
}

#[test]
fn small_bh_conformance() {
    if present() {
        suite::golden("cuda:small-bh").finish("golden files", "cuda:small-bh");
        suite::generated("cuda:small-bh", |_| true).finish("generated cases", "cuda:small-bh");
        suite::properties("cuda:small-bh", 2).finish("properties", "cuda:small-bh");
    }
}

#[test]
fn recurrent_conformance() {
    if present() {
        suite::generated("cuda:recurrent", |_| true).finish("generated cases", "cuda:recurrent");
    }
}

/// Decode problems with many more (V tile, value head, sequence) items than resident blocks, so
/// that the persistent form of the recurrence (`DecodeForm::Persistent`: 4 blocks an SM, each
/// walking every 4 x SMs-th item) runs several items a block: 400 sequences of 0 to 3 tokens, a
/// pool in place with rows at -1, checkpoints every 2 tokens; gdn 1/2 with K = V = 128 and an
/// f32 state in kv (4 V tiles: 3,200 items), kda 2/4 with K = V = 64 and a bf16 state in vk
/// (3,200 items).
fn recurrent_many_items_cases() -> Vec<Case> {
    use deltarule_core::{DType, FinalState, InitialState, Mode, Op, Problem, StateLayout};
    use deltarule_tests::generate;
    let lens: Vec<usize> = (0..400).map(|i| [1, 0, 2, 1, 3, 1, 1][i % 7]).collect();
    let mut cases = Vec::new();
    for (op, layout, dt, (h, hv), d) in [
        (Op::Gdn, StateLayout::Kv, DType::F32, (1, 2), 128),
        (Op::Kda, StateLayout::Vk, DType::BF16, (2, 4), 64),
    ] {
        let tokens = lens.iter().sum();
        let mut p = Problem::new(op, Mode::Decode, lens.len(), tokens, h, hv, d, d);
        p.initial = InitialState::Pool { rows: 440 };
        p.final_state = FinalState::InPlace;
        p.state_in_dtype = dt;
        p.state_out_dtype = dt;
        p.layout = layout;
        p.checkpoint_every = Some(2);
        p.l2norm = true;
        let mut case = generate::generate(&p, &lens, 21, generate::DataStyle::default())
            .expect("generate the problem");
        case.name = format!("{op:?} decode, many items ({layout:?})");
        cases.push(case);
    }
    cases
}

/// The many-items problems on `cuda:recurrent` (the form the rule picks) against float64, rerun
/// bit-identical (`check_case`).
#[test]
fn recurrent_many_items() {
    use deltarule_tests::{cases, diff};
    if !present() {
        return;
    }
    for case in recurrent_many_items_cases() {
        let reference = diff::reference_outputs(&case).expect("the float64 reference");
        let check = cases::check_case(suite::engine(), "cuda:recurrent", &case, &reference)
            .unwrap_or_else(|e| panic!("{}: {e}", case.name));
        println!("{}: {:?}", case.name, check.errors);
    }
}

/// The bytes of every output tensor (bit-identity, NaN and signed zeros included).
fn output_bits(o: &deltarule_core::Outputs) -> Vec<Vec<u8>> {
    [Some(&o.o), o.final_state.as_ref(), o.checkpoints.as_ref()]
        .into_iter()
        .flatten()
        .map(|t| t.to_le_bytes())
        .collect()
}

/// The token recurrence's forms (`DecodeForm`: a block per item with 4, 5 or 6 blocks an SM, or
/// the persistent grid) run the same per-item arithmetic: each, forced on one backend through
/// `CudaBackend::set_options`, gives outputs bit-identical to the 4-block form's on every decode
/// case of the generated suite and on the many-items problems (where the persistent form walks
/// several items a block). The rule's own pick is checked against float64 by
/// `recurrent_conformance` and `recurrent_many_items`.
#[test]
fn recurrent_forms_agree() {
    use deltarule_core::{Backend, Error, Kernel, Mode};
    use deltarule_cuda::{CudaBackend, DecodeForm, Options};
    if !present() {
        return;
    }
    let mut be = CudaBackend::new(0).expect("the CUDA backend");
    let base = *be.options();
    let mut all = recurrent_many_items_cases();
    all.extend(
        deltarule_tests::cases::conformance_cases()
            .iter()
            .filter(|s| s.problem.mode == Mode::Decode)
            .map(|s| s.build().expect("build the case")),
    );
    let mut ran = 0;
    for case in &all {
        let mut run = |form: DecodeForm| {
            be.set_options(Options {
                decode_form: Some(form),
                ..base
            });
            be.run(Kernel::Recurrent, &case.problem, &case.inputs)
        };
        let want = match run(DecodeForm::Block4) {
            Ok(o) => output_bits(&o),
            Err(Error::Unsupported { .. }) => continue,
            Err(e) => panic!("{}: {e}", case.name),
        };
        for form in [
            DecodeForm::Block5,
            DecodeForm::Block6,
            DecodeForm::Persistent,
        ] {
            let got = run(form).unwrap_or_else(|e| panic!("{} ({form:?}): {e}", case.name));
            assert!(
                output_bits(&got) == want,
                "{}: the {form:?} form differs from the 4-block form",
                case.name
            );
        }
        ran += 1;
    }
    println!("the decode forms agree bit for bit on {ran} problems");
    assert!(ran >= 2, "no decode problem ran");
}

/// A small set for `compute-sanitizer --tool memcheck`: varlen with zero-length sequences, pools
/// in place, checkpoints, vk, f16, both ops, every kernel.
#[test]
fn sanitizer_subset() {
    if !present() {
        return;
    }
    let pick = |n: &str| {
        [
            "varlen-zero-len",
            "pool-bf16",
            "pool-f32",
            "checkpoints-every64",
            "decode-T3",
            "softplus-logit-l2norm",
            "inputs-f16",
            "dims-K128-V128",
            "state-vk-f16",
        ]
        .iter()
        .any(|s| n.contains(s))
    };
    for name in ["cuda:chunked", "cuda:small-bh", "cuda:recurrent"] {
        suite::generated(name, pick).finish("sanitizer subset", name);
    }
}

/// The small-bh tests again with each state pass forced: the suite's problems are small (few
/// sequence x value-head pairs), so `auto` sends gdn with 16-bit inputs to the overlapped T-form
/// pair and the rest to the 16-column mma.sync pass, and would never run the others (`16`: the
/// mma.sync pass; `wg`: the wgmma pass over the W/U workspace; `wgt`: the T-form, gdn with 16-bit
/// inputs; each falls back to the automatic pass where it does not apply). The backend reads
/// `DELTARULE_CUDA_STATE_BV` once at construction, so each run is this binary again as a child
/// process with the variable set (no environment changes inside this process); the child runs
/// every `small_bh_` test (this one returns at once there).
#[test]
fn small_bh_conformance_with_each_wgmma_state_pass() {
    if !present() || std::env::var_os("DELTARULE_CUDA_STATE_BV").is_some() {
        return; // (a forced pass already applies to small_bh_conformance itself)
    }
    for pass in ["16", "wg", "wgt"] {
        let text = rerun_with("DELTARULE_CUDA_STATE_BV", pass, &["small_bh_"]);
        assert!(
            text.contains(" ran, "),
            "no suite ran with the pass forced:\n{text}"
        );
    }
}

/// Grouped-value heads (gdn 4/8, K = V = 128) with sequences of up to 3000 tokens, zero-length
/// ones and a dense initial state, against float64 on small-bh (whichever pass is forced, see
/// above) and on chunked: the suite's problems are too small to show a shared-memory race in the
/// W/U intra kernels (racecheck finds such races; o would be wrong by up to 4e-2 through every
/// pass but the T-form).
#[test]
fn small_bh_gva_long_sequences() {
    use deltarule_core::StateLayout;
    if !present() {
        return;
    }
    let lens = [0, 64, 700, 1, 0, 129, 3000];
    for backend in ["cuda:small-bh", "cuda:chunked"] {
        let check = check_gdn_long(backend, &lens, (4, 8), StateLayout::Kv, None, false, 8)
            .unwrap_or_else(|e| panic!("gdn 4/8 long sequences on {backend}: {e}"));
        println!("gva long sequences on {backend}: {:?}", check.errors);
    }
}

/// The T-form state pass with more (V tile, value head, sequence) items than SMs (the suite's
/// problems have fewer, and run the overlapped pair): gdn 16/32, 16-bit inputs, 24 sequences of
/// 0 to 700 tokens (zero-length items pass the state through, partial last chunks, one-token
/// sequences), a dense initial state, checkpoints every 64 tokens, both state layouts, through
/// cuda:small-bh against float64 (1,536 state CTAs).
#[test]
fn small_bh_many_items() {
    use deltarule_core::StateLayout;
    // (a forced state pass: the children of the test above, where this problem takes the T-form
    // pass anyway)
    if !present() || std::env::var_os("DELTARULE_CUDA_STATE_BV").is_some() {
        return;
    }
    let lens: Vec<usize> = [64, 0, 700, 1, 64, 129, 300, 37].repeat(3);
    for layout in [StateLayout::Kv, StateLayout::Vk] {
        let check = check_gdn_long(
            "cuda:small-bh",
            &lens,
            (16, 32),
            layout,
            Some(64),
            false,
            14,
        )
        .unwrap_or_else(|e| panic!("gdn 16/32 many items ({layout:?}): {e}"));
        println!(
            "many items on cuda:small-bh ({layout:?}): {:?}",
            check.errors
        );
    }
}

/// `auto` runs the overlapped T-form pair at few (sequence x value head) pairs with long sequences
/// (gdn 16/32, one sequence of 8192 tokens: 64 state CTAs on 132 SMs); the suite's problems are
/// too small to reach it through `auto`. One such problem (dense initial state, checkpoints)
/// against float64, rerun bit-identical (`check_case`), then the same in a child process with the
/// overlap off (`DELTARULE_CUDA_OVERLAP=off`): the errors must match to the last digit.
#[test]
fn overlapped_pair_through_auto() {
    use deltarule_core::{FinalState, InitialState, Mode, Op, Problem};
    use deltarule_tests::{cases, diff, generate};
    if !present() {
        return;
    }
    let mut p = Problem::new(Op::Gdn, Mode::Prefill, 1, 8192, 16, 32, 128, 128);
    p.initial = InitialState::Dense;
    p.final_state = FinalState::Dense;
    p.checkpoint_every = Some(1024);
    let case = generate::generate(&p, &[8192], 10, generate::DataStyle::default())
        .expect("generate the problem");
    let reference = diff::reference_outputs(&case).expect("the float64 reference");
    let check = cases::check_case(suite::engine(), "cuda", &case, &reference)
        .unwrap_or_else(|e| panic!("gdn 16/32 1x8192 through auto: {e}"));
    let line: Vec<String> = check
        .errors
        .iter()
        .map(|(t, e)| format!("{t} {e:e}"))
        .collect();
    let line = format!("overlap errors: {}", line.join(", "));
    println!("{line}");
    if std::env::var_os("DELTARULE_CUDA_OVERLAP").is_some() {
        return; // (the child)
    }
    let text = rerun_with(
        "DELTARULE_CUDA_OVERLAP",
        "off",
        &["--exact", "overlapped_pair_through_auto"],
    );
    assert_eq!(
        reported(&text, "overlap errors: "),
        Some(line.as_str()),
        "overlap on and off disagree:\n{text}"
    );
}

/// The segmented T-form pair (kernels/prefill_segments.cuh): the small-bh suite in child
/// processes with the segments forced (`DELTARULE_CUDA_SEGMENTS`: every chunk a segment, and
/// segments of four chunks), where every case the pair takes (gdn, 16-bit inputs, K = V, no
/// checkpoints) runs segmented; then long GVA sequences with extreme gates forced into segments,
/// and gdn 4/8 1x8192, which `auto` segments by itself, each against float64.
#[test]
fn segmented_pair() {
    use deltarule_core::{FinalState, InitialState, Mode, Op, Problem, StateLayout};
    use deltarule_tests::{cases, diff, generate};
    if !present() {
        return;
    }
    let run = |p: &Problem, lens: &[usize], style: generate::DataStyle, what: &str| {
        let case = generate::generate(p, lens, 23, style).expect("generate the problem");
        let reference = diff::reference_outputs(&case).expect("the float64 reference");
        let check = cases::check_case(suite::engine(), "cuda:small-bh", &case, &reference)
            .unwrap_or_else(|e| panic!("segmented {what}: {e}"));
        println!("segmented {what}: {:?}", check.errors);
    };
    if std::env::var_os("DELTARULE_CUDA_SEGMENTS").is_some() {
        // (the child) long sequences, resets and tiny decays, both layouts, a pool in place
        for layout in [StateLayout::Kv, StateLayout::Vk] {
            let mut p = Problem::new(Op::Gdn, Mode::Prefill, 1, 1, 4, 8, 128, 128);
            p.initial = InitialState::Dense;
            p.final_state = FinalState::Dense;
            p.layout = layout;
            p.l2norm = true;
            let style = generate::DataStyle {
                gate: generate::GateStyle::Extreme,
                ..Default::default()
            };
            run(
                &p,
                &[4000, 700, 65, 64, 1],
                style,
                &format!("extreme gates {layout:?}"),
            );
            let mut pool = p.clone();
            pool.initial = InitialState::Pool { rows: 9 };
            pool.final_state = FinalState::InPlace;
            pool.state_in_dtype = deltarule_core::DType::F16;
            pool.state_out_dtype = deltarule_core::DType::F16;
            run(
                &pool,
                &[2500, 130, 900],
                Default::default(),
                &format!("pool {layout:?}"),
            );
        }
        return;
    }
    for chunks in ["1", "4"] {
        rerun_with(
            "DELTARULE_CUDA_SEGMENTS",
            chunks,
            &["--exact", "small_bh_conformance", "segmented_pair"],
        );
    }
    let mut p = Problem::new(Op::Gdn, Mode::Prefill, 1, 8192, 4, 8, 128, 128);
    p.initial = InitialState::Dense;
    p.final_state = FinalState::Dense;
    run(
        &p,
        &[8192],
        Default::default(),
        "gdn 4/8 1x8192 through its rule",
    );
}

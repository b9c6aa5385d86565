//! The command as a user runs it: exit codes, tables, messages. General input errors, the
//! memory cap, `gen` and `select` (the `diff`, `compare` and plot output is in `diff.rs`).

mod common;

use common::{bin, diff_cpu_case, golden, run_args, text, tmp, write};
use deltarule_core::problem::{FinalState, InitialState, Mode, Op};
use deltarule_core::{DType, HostTensor, Problem};
use deltarule_tests::casefile::{case_bytes, read_case, Case};
use deltarule_tests::generate::{generate, with_expected, DataStyle};
use std::path::Path;

fn bad_case() -> Case {
    let mut p = Problem::new(Op::Gdn, Mode::Prefill, 1, 1, 2, 4, 32, 32);
    p.initial = InitialState::Pool { rows: 4 };
    p.final_state = FinalState::InPlace;
    let c = generate(&p, &[30, 20], 3, DataStyle::default()).expect("generate");
    with_expected(c).expect("reference")
}

fn expect_usage_error(c: &Case, name: &str, needle: &str, extra: &[&str]) {
    let path = write(c, name);
    let out = bin()
        .args(["diff", "--backend", "cpu"])
        .args(extra)
        .arg("--case")
        .arg(&path)
        .output()
        .expect("run");
    let (so, se) = text(&out);
    assert_eq!(
        out.status.code(),
        Some(2),
        "{name}: stdout {so}\nstderr {se}"
    );
    let errors: Vec<&str> = se.lines().filter(|l| l.starts_with("error:")).collect();
    assert!(!errors.is_empty(), "{name}: no error line in {se}");
    assert!(
        errors.iter().any(|l| l.contains(needle)),
        "{name}: `{needle}` not named in {errors:?}"
    );
    assert!(!se.contains("panicked"), "{name}: panic\n{se}");
}

#[test]
fn bad_inputs_exit_2_with_a_message_naming_the_argument() {
    let base = bad_case();
    let mut c = base.clone();
    c.inputs.k = HostTensor::from_f64(DType::BF16, vec![49, 2, 32], &vec![0.1; 49 * 64]);
    expect_usage_error(&c, "shape.safetensors", "`k`", &[]);

    let mut c = base.clone();
    c.inputs.v = HostTensor::from_f64(DType::BF16, vec![50, 3, 32], &vec![0.1; 50 * 96]);
    c.inputs.g = HostTensor::from_f64(DType::F32, vec![50, 3], &vec![-0.1; 150]);
    c.inputs.beta = HostTensor::from_f64(DType::F32, vec![50, 3], &vec![0.5; 150]);
    c.inputs.initial_state = None;
    c.inputs.state_indices = None;
    c.expected = Default::default();
    expect_usage_error(&c, "hv.safetensors", "HV", &[]);

    for (name, cu, needle) in [
        ("decreasing", vec![0, 40, 30, 50], "cu_seqlens[2]"),
        ("range", vec![0, 80, 50], "cu_seqlens[1]"),
        ("start", vec![5, 30, 50], "cu_seqlens[0]"),
        ("end", vec![0, 30, 45], "cu_seqlens[2]"),
    ] {
        let mut c = base.clone();
        let n = cu.len();
        c.inputs.cu_seqlens = HostTensor::from_i64(DType::I64, vec![n], &cu);
        if n != 3 {
            c.inputs.state_indices = Some(HostTensor::from_i64(
                DType::I64,
                vec![n - 1],
                &vec![-1; n - 1],
            ));
        }
        expect_usage_error(&c, &format!("cu-{name}.safetensors"), needle, &[]);
    }
    for (name, idx, needle) in [
        ("range", vec![0, 4], "state_indices[1]"),
        ("dup", vec![1, 1], "state_indices[1]"),
    ] {
        let mut c = base.clone();
        c.inputs.state_indices = Some(HostTensor::from_i64(DType::I64, vec![2], &idx));
        expect_usage_error(&c, &format!("idx-{name}.safetensors"), needle, &[]);
    }
    let mut c = base.clone();
    let mut v = c.inputs.q.to_f64_vec();
    v[5] = f64::NAN;
    c.inputs.q = HostTensor::from_f64(DType::BF16, c.inputs.q.shape.clone(), &v);
    expect_usage_error(&c, "nan.safetensors", "`q`", &["--check-finite"]);

    let mut c = base.clone();
    c.metadata.insert("gate".into(), "lower_bound".into());
    c.metadata.insert("lower_bound".into(), "0.5".into());
    // case_bytes writes the problem's own options; write the raw bytes with patched metadata
    let path = tmp("lb.safetensors");
    std::fs::write(
        &path,
        patch_metadata(&c, &[("gate", "lower_bound"), ("lower_bound", "0.5")]),
    )
    .expect("write");
    let (code, _, se) = diff_cpu_case(&path);
    assert_eq!(code, Some(2), "{se}");
    assert!(se.contains("lower_bound") || se.contains("gate"), "{se}");

    let path = tmp("meta.safetensors");
    std::fs::write(&path, patch_metadata(&base, &[("beta", "softmax")])).expect("write");
    let (code, _, se) = diff_cpu_case(&path);
    assert_eq!(code, Some(2), "{se}");
    assert!(se.contains("metadata `beta`"), "{se}");

    let bytes = case_bytes(&base).expect("serialise");
    let path = tmp("truncated.safetensors");
    std::fs::write(&path, &bytes[..bytes.len() / 3]).expect("write");
    let (code, _, se) = diff_cpu_case(&path);
    assert_eq!(code, Some(2), "{se}");
    assert!(se.contains("truncated.safetensors"), "{se}");

    let out = bin()
        .args([
            "diff",
            "--backend",
            "cpu",
            "--case",
            "/no/such/file.safetensors",
        ])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2));
}

fn patch_metadata(c: &Case, kv: &[(&str, &str)]) -> Vec<u8> {
    let mut good = case_bytes(c).expect("serialise");
    let n = u64::from_le_bytes(good[..8].try_into().expect("8 bytes")) as usize;
    let mut json: serde_json::Value = serde_json::from_slice(&good[8..8 + n]).expect("header json");
    for (k, v) in kv {
        json["__metadata__"][*k] = serde_json::Value::String(v.to_string());
    }
    let mut h = serde_json::to_string(&json).expect("json");
    while !h.len().is_multiple_of(8) {
        h.push(' ');
    }
    let mut out = (h.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(h.as_bytes());
    out.extend_from_slice(&good.split_off(8 + n));
    out
}

#[test]
fn generated_problems_diff_and_gen_round_trip() {
    let out = bin()
        .args([
            "diff",
            "--backend",
            "cpu:chunked",
            "--op",
            "kda",
            "--tokens",
            "150",
            "--seqs",
            "3",
            "--heads",
            "2",
            "--v-heads",
            "4",
            "--head-dim",
            "32",
            "--value-dim",
            "48",
            "--gate",
            "lower-bound",
            "--beta",
            "logit",
            "--l2norm",
            "--initial-state",
            "pool",
            "--layout",
            "vk",
            "--state-dtype",
            "bf16",
            "--seed",
            "9",
        ])
        .output()
        .expect("run");
    let (so, se) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{so}\n{se}");
    let path = tmp("gen.safetensors");
    let out = bin()
        .args([
            "gen",
            "--op",
            "gdn",
            "--tokens",
            "100",
            "--seqs",
            "2",
            "--heads",
            "1",
            "--v-heads",
            "2",
            "--head-dim",
            "64",
            "--checkpoint-every",
            "32",
            "--initial-state",
            "dense",
            "--out",
        ])
        .arg(&path)
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out).1);
    let c = read_case(Path::new(&path)).expect("read back");
    assert!(c.expected.checkpoints.is_some());
    let out = bin()
        .args(["diff", "--backend", "cpu", "cpu:chunked", "--case"])
        .arg(&path)
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out).0);
}

#[test]
fn select_explains_and_refuses_what_does_not_fit() {
    let args = [
        "select",
        "--op",
        "kda",
        "--mode",
        "prefill",
        "--tokens",
        "8192",
        "--heads",
        "32",
        "--head-dim",
        "128",
        "--state-dtype",
        "bf16",
        "--explain",
    ];
    let out = bin()
        .args(args)
        .args(["--backend", "cuda:small-bh"])
        .output()
        .expect("run");
    let (so, se) = text(&out);
    if out.status.code() == Some(0) {
        // a machine with CUDA: the explicit choice fits
        assert!(so.contains("chosen:"), "{so}");
    } else {
        assert_eq!(out.status.code(), Some(2), "{so}\n{se}");
        assert!(se.contains("no CUDA device") || se.contains("cuda"), "{se}");
    }
    let out = bin()
        .args(args)
        .args(["--backend", "auto"])
        .output()
        .expect("run");
    let (so, se) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{so}\n{se}");
    assert!(so.contains("chosen:"), "{so}");
    let out = bin().args(["rules"]).output().expect("run");
    assert_eq!(out.status.code(), Some(0));
    let out = bin().args(["backends"]).output().expect("run");
    assert_eq!(out.status.code(), Some(0));
    assert!(text(&out).0.contains("cpu"));
}

/// `--cuda-sms` plans for an assumed Hopper wherever the command runs: a mixed batch past the
/// workspace bound keeps the split form, and the fused row says why it was passed over.
#[test]
fn select_plans_for_an_assumed_cuda_device() {
    let plan = |lens: &str| {
        let out = bin()
            .args(["select", "--op", "gdn", "--seqlens", lens, "--heads", "16"])
            .args(["--v-heads", "32", "--cuda-sms", "132", "--explain"])
            .output()
            .expect("run");
        let (so, se) = text(&out);
        assert_eq!(out.status.code(), Some(0), "{so}\n{se}");
        assert!(
            so.contains("cuda assumed: sm_90 with 132 multiprocessors"),
            "{so}"
        );
        so
    };
    let so = plan("32768,500,500,500,500");
    assert!(so.contains("chosen:  cuda.gdn.prefill.small-bh"), "{so}");
    assert!(
        so.contains("512 chunks > 1.5 x the fused form's 67 waves"),
        "{so}"
    );
    // the launch plan below the table: the T-form pair, 2 x 32 x 5 state CTAs of 64 columns
    assert!(
        so.contains("plan:    on sm_90a with 132 multiprocessors"),
        "{so}"
    );
    assert!(so.contains("gdn_prefill_intra_tform  grid"), "{so}");
    let pass = "gdn_prefill_state_tform_wgmma  grid (2, 32, 5): T-form wgmma state pass, \
                64-column V tiles";
    assert!(so.contains(pass), "{so}");
    let so = plan("8192");
    let overlap = "overlap: 64 state CTAs start on SMs freed after";
    assert!(so.contains(overlap), "{so}");
    // few heads on one long sequence: the segmented pair
    let out = bin()
        .args([
            "select",
            "--op",
            "gdn",
            "--seqlens",
            "32768",
            "--heads",
            "4",
        ])
        .args(["--v-heads", "8", "--cuda-sms", "132", "--explain"])
        .output()
        .expect("run");
    let so4 = text(&out).0;
    assert!(
        so4.contains("segments: every sequence cut into segments of 4096 tokens (9 at most)"),
        "{so4}"
    );
    let so = plan("8192,8192,8192,8192,8192,8192,8192,8192");
    assert!(so.contains("chosen:  cuda.gdn.prefill.chunked"), "{so}");
    assert!(
        so.contains("gdn_prefill_fused_tform  grid (32, 8, 1)"),
        "{so}"
    );
    let out = bin()
        .args(["select", "--op", "gdn", "--tokens", "64", "--cuda-sms", "0"])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2), "{}", text(&out).1);
}

#[test]
fn problems_over_the_memory_cap_exit_2_saying_how_to_raise_it() {
    for args in [
        &["diff", "--op", "gdn", "--tokens", "4096", "--heads", "4096"][..],
        &["diff", "--op", "gdn", "--tokens", "0", "--heads", "1048576"][..],
        &[
            "diff", "--op", "gdn", "--heads", "1", "--tokens", "1000000", "--seqs", "1000000",
        ][..],
        &[
            "gen",
            "--op",
            "gdn",
            "--heads",
            "1",
            "--tokens",
            "2147483647",
            "--out",
            "/nonexistent/x",
        ][..],
        &[
            "diff",
            "--max-bytes",
            "1K",
            "--op",
            "gdn",
            "--tokens",
            "16",
            "--heads",
            "1",
        ][..],
        &["bench", "--shape", "gdn-16/32-64x1000000"][..],
    ] {
        let (code, so, se) = run_args(args);
        assert_eq!(code, Some(2), "{args:?}\n{so}\n{se}");
        assert!(
            se.contains("--max-bytes") && se.contains("DELTARULE_MAX_BYTES"),
            "{se}"
        );
        assert_eq!(se.matches("error:").count(), 1, "{se}");
    }
    let out = bin()
        .env("DELTARULE_MAX_BYTES", "1K")
        .args(["diff", "--backend", "cpu", "--case"])
        .arg(golden("gdn_single_k64"))
        .output()
        .expect("run");
    let (_, se) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{se}");
    assert!(se.contains("set by DELTARULE_MAX_BYTES"), "{se}");
    let (code, _, se) = run_args(&["diff", "--op", "gdn", "--heads", "1", "--tokens", "-1"]);
    assert_eq!(code, Some(2));
    assert!(se.contains("must be a non-negative integer"), "{se}");
    // a named shape's sequence list is bounded before it is allocated
    for shape in [
        "gdn-16/32-99999999999999x1",
        "gdn-16/32-1x18446744073709551615+1x1",
    ] {
        let (code, so, se) = run_args(&["bench", "--shape", shape]);
        assert_eq!(code, Some(2), "{shape}\n{so}\n{se}");
        assert_eq!(se.matches("error:").count(), 1, "{se}");
    }
}

#[test]
fn non_regular_case_files_exit_2_at_once() {
    let (code, _, se) = run_args(&["diff", "--backend", "cpu", "--case", "/dev/zero"]);
    assert_eq!(code, Some(2), "{se}");
    assert!(se.contains("not a regular file"), "{se}");
    assert_eq!(se.matches("error:").count(), 1, "{se}");
}

#[test]
fn gen_replaces_its_output_whole_and_failures_say_cannot_write() {
    let path = tmp("gen-atomic.safetensors");
    std::fs::write(&path, b"an old file").expect("write");
    let gen = |out: &Path| {
        bin()
            .args([
                "gen",
                "--op",
                "gdn",
                "--tokens",
                "20",
                "--heads",
                "1",
                "--head-dim",
                "16",
            ])
            .arg("--out")
            .arg(out)
            .output()
            .expect("run")
    };
    let out = gen(&path);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out).1);
    read_case(&path).expect("a whole case");
    let dir = path.parent().expect("dir");
    assert!(
        std::fs::read_dir(dir)
            .expect("list")
            .filter_map(|e| e.ok())
            .all(|e| !e.file_name().to_string_lossy().ends_with(".tmp")),
        "a temporary file was left"
    );
    let out = gen(Path::new("/no/such/folder/case.safetensors"));
    let (_, se) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{se}");
    assert!(
        se.contains("cannot write `/no/such/folder/case.safetensors`"),
        "{se}"
    );
}

#[test]
fn gate_at_sets_the_generated_gates_and_refuses_what_it_cannot_set() {
    let path = tmp("gates.safetensors");
    let (code, _, se) = run_args(&[
        "gen",
        "--op",
        "kda",
        "--tokens",
        "40",
        "--heads",
        "1",
        "--v-heads",
        "2",
        "--head-dim",
        "16",
        "--gate-at",
        "5=-inf",
        "--gate-at",
        "7:1=-1e4",
        "--out",
        &path.display().to_string(),
    ]);
    assert_eq!(code, Some(0), "{se}");
    let c = read_case(&path).expect("read");
    let g = c.inputs.g.to_f64_vec();
    let at = |t: usize, h: usize, k: usize| g[(t * 2 + h) * 16 + k];
    assert!((0..16).all(|k| at(5, 0, k) == f64::NEG_INFINITY && at(5, 1, k) == f64::NEG_INFINITY));
    assert!((0..16).all(|k| at(7, 1, k) == -1e4 && at(7, 0, k) > -100.0));
    assert_eq!(
        c.metadata.get("gate_at").map(String::as_str),
        Some("5=-inf,7:1=-10000")
    );
    assert!(c
        .expected
        .o
        .as_ref()
        .is_some_and(|o| o.count_nonfinite() == 0));
    for (args, needle) in [
        (&["--gate-at", "40=-inf"][..], "--gate-at"),
        (&["--gate-at", "3:2=-1"][..], "--gate-at"),
        (&["--gate-at", "3=nan"][..], "NaN"),
        (&["--gate-at", "x=1"][..], "TOKEN=VALUE"),
    ] {
        let mut a = vec![
            "diff",
            "--op",
            "gdn",
            "--tokens",
            "40",
            "--heads",
            "1",
            "--v-heads",
            "2",
        ];
        a.extend_from_slice(args);
        let (code, _, se) = run_args(&a);
        assert_eq!(code, Some(2), "{args:?}: {se}");
        assert!(se.contains(needle), "{args:?}: {se}");
    }
    let g = golden("gdn_single_k64").display().to_string();
    let (code, _, se) = run_args(&["diff", "--case", &g, "--gate-at", "3=-inf"]);
    assert_eq!(code, Some(2), "{se}");
    assert!(se.contains("generated problem"), "{se}");
}

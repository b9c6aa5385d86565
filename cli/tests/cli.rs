//! The command as a user runs it: exit codes, tables, messages.

use deltarule_core::problem::{FinalState, InitialState, Mode, Op};
use deltarule_core::{DType, HostTensor, Problem};
use deltarule_tests::casefile::{case_bytes, read_case, Case};
use deltarule_tests::generate::{generate, with_expected, DataStyle};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn bin() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_deltarule"));
    // keep the probes to the CPU unless a test asks otherwise
    c.env("WGPU_BACKEND", "none");
    c
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("deltarule-cli-{}", std::process::id()));
    std::fs::create_dir_all(&d).expect("temp dir");
    d.join(name)
}

fn golden(name: &str) -> PathBuf {
    deltarule_tests::golden_dir().join(format!("{name}.safetensors"))
}

fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn diff_of_the_golden_files_on_cpu_passes() {
    let files = deltarule_tests::golden_files();
    let out = bin()
        .arg("diff")
        .arg("--case")
        .args(&files)
        .args(["--backend", "cpu", "cpu:chunked"])
        .output()
        .expect("run");
    let (so, se) = text(&out);
    assert_eq!(out.status.code(), Some(0), "stdout:\n{so}\nstderr:\n{se}");
    assert!(so.contains("pass") && !so.contains("FAIL"), "{so}");
    assert!(
        so.contains("gdn_gva_varlen_state") && so.contains("final_state"),
        "{so}"
    );
}

#[test]
fn json_rows_have_the_documented_fields() {
    let out = bin()
        .args(["diff", "--json", "--backend", "cpu", "--case"])
        .arg(golden("kda_checkpoints_example"))
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(0));
    let (so, _) = text(&out);
    let rows: Vec<serde_json::Value> = so
        .lines()
        .map(|l| serde_json::from_str(l).expect("one JSON object per line"))
        .collect();
    assert_eq!(rows.len(), 3, "o, final_state, checkpoints");
    for r in rows {
        for f in [
            "case",
            "backend",
            "kernel",
            "tensor",
            "rel_l2",
            "max_abs",
            "worst",
            "nonfinite",
            "tolerance",
            "pass",
        ] {
            assert!(r.get(f).is_some(), "field {f} missing in {r}");
        }
        if r["exact"] == true {
            assert!(
                r["worst"].is_null(),
                "an exact row names no worst element: {r}"
            );
            continue;
        }
        for f in ["sequence", "token", "head", "channel"] {
            assert!(r["worst"].get(f).is_some(), "worst.{f} missing in {r}");
        }
    }
}

fn write(case: &Case, name: &str) -> PathBuf {
    let p = tmp(name);
    std::fs::write(&p, case_bytes(case).expect("serialise")).expect("write");
    p
}

#[test]
fn an_altered_expected_value_exits_1_and_names_the_worst_element() {
    let mut c = read_case(&golden("gdn_gva_varlen_state")).expect("read");
    let o = c.expected.o.as_ref().expect("expected_o");
    let mut v = o.to_f64_vec();
    // token 200 (sequence 2 or 3), value head 3, channel 17
    let (t, hv, ch) = (200usize, 3usize, 17usize);
    let idx = (t * 4 + hv) * 128 + ch;
    v[idx] += 1.0;
    c.expected.o = Some(HostTensor::from_f64(DType::F32, o.shape.clone(), &v));
    let path = write(&c, "altered.safetensors");
    let out = bin()
        .args(["diff", "--backend", "cpu", "--case"])
        .arg(&path)
        .output()
        .expect("run");
    let (so, se) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{so}\n{se}");
    let cu = c.inputs.cu_seqlens.to_i64_vec("cu").expect("cu");
    let seq = cu.iter().rposition(|&x| x <= t as i64).expect("seq");
    let tok = t as i64 - cu[seq];
    let len = cu[seq + 1] - cu[seq];
    let want = format!(
        "worst: seq {seq}, token {tok} of {len} (packed {t}), value head {hv}, channel {ch}: got"
    );
    let lines: Vec<&str> = so.lines().collect();
    let at = lines
        .iter()
        .position(|l| l.contains("FAIL"))
        .unwrap_or_else(|| panic!("no FAIL row in\n{so}"));
    assert!(lines[at].contains(" o "), "{}", lines[at]);
    assert!(
        lines[at + 1].contains(&want),
        "`{}` should name {want}",
        lines[at + 1]
    );
}

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
    let out = bin()
        .args(["diff", "--backend", "cpu", "--case"])
        .arg(&path)
        .output()
        .expect("run");
    let (_, se) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{se}");
    assert!(se.contains("lower_bound") || se.contains("gate"), "{se}");

    let path = tmp("meta.safetensors");
    std::fs::write(&path, patch_metadata(&base, &[("beta", "softmax")])).expect("write");
    let out = bin()
        .args(["diff", "--backend", "cpu", "--case"])
        .arg(&path)
        .output()
        .expect("run");
    let (_, se) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{se}");
    assert!(se.contains("metadata `beta`"), "{se}");

    let bytes = case_bytes(&base).expect("serialise");
    let path = tmp("truncated.safetensors");
    std::fs::write(&path, &bytes[..bytes.len() / 3]).expect("write");
    let out = bin()
        .args(["diff", "--backend", "cpu", "--case"])
        .arg(&path)
        .output()
        .expect("run");
    let (_, se) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{se}");
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

fn run_args(args: &[&str]) -> (Option<i32>, String, String) {
    let out = bin().args(args).output().expect("run");
    let (so, se) = text(&out);
    (out.status.code(), so, se)
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
fn every_case_runs_and_the_worst_exit_code_wins() {
    let good = golden("gdn_single_k64");
    let mut c = read_case(&good).expect("read");
    let o = c.expected.o.clone().expect("expected_o");
    let mut shape = o.shape.clone();
    shape[0] -= 1;
    let n: usize = shape.iter().product();
    c.expected.o = Some(HostTensor::from_f64(DType::F32, shape, &vec![0.0; n]));
    let bad = write(&c, "wrong-expected-shape.safetensors");
    let out = bin()
        .args(["diff", "--backend", "cpu", "--case"])
        .arg(&good)
        .arg(&bad)
        .arg(golden("kda_checkpoints_example"))
        .output()
        .expect("run");
    let (so, se) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{so}\n{se}");
    assert!(
        so.contains("gdn_single_k64") && so.contains("kda_checkpoints_example"),
        "{so}"
    );
    let errors: Vec<&str> = se.lines().filter(|l| l.starts_with("error:")).collect();
    assert_eq!(errors.len(), 1, "{se}");
    assert!(errors[0].contains("expected_o"), "{se}");
    assert!(
        !so.contains("FAIL"),
        "a wrong shape is not a tolerance failure: {so}"
    );
}

#[test]
fn a_run_that_compares_nothing_exits_2_and_says_so() {
    let out = bin()
        .args(["diff", "--backend", "cpu:chunked", "--case"])
        .arg(golden("gdn_decode_pool_example"))
        .output()
        .expect("run");
    let (so, se) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{so}\n{se}");
    assert!(se.contains("nothing was compared"), "{se}");
    assert!(!so.contains("0 comparisons"), "{so}");
}

#[test]
fn an_explicit_backend_without_its_device_exits_3_once() {
    let (_, so, _) = run_args(&["backends"]);
    if !so
        .lines()
        .any(|l| l.starts_with("cuda") && l.contains("unavailable"))
    {
        return; // a machine with CUDA
    }
    let out = bin()
        .args(["diff", "--backend", "cuda", "--case"])
        .arg(golden("gdn_single_k64"))
        .output()
        .expect("run");
    let (so, se) = text(&out);
    assert_eq!(out.status.code(), Some(3), "{so}\n{se}");
    assert_eq!(se.matches("error:").count(), 1, "{se}");
    assert!(so.trim().is_empty(), "no empty table: {so}");
}

#[test]
fn a_case_without_expected_tensors_says_what_it_compares_against() {
    let mut c = read_case(&golden("gdn_single_k64")).expect("read");
    c.expected = Default::default();
    let path = write(&c, "no-expected.safetensors");
    let out = bin()
        .args(["diff", "--backend", "cpu", "--case"])
        .arg(&path)
        .output()
        .expect("run");
    let (so, se) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{so}\n{se}");
    assert!(se.contains("float64 reference only"), "{se}");
}

/// A case whose observed outputs are the float64 reference with `o[token, head, channel]` moved
/// by `delta`.
fn observed_case(label: Option<&str>, at: (usize, usize, usize), delta: f64) -> Case {
    use deltarule_tests::casefile::Observed;
    let mut c = read_case(&golden("gdn_gva_varlen_state")).expect("read");
    let o = c.expected.o.clone().expect("expected_o");
    let mut v = o.to_f64_vec();
    let (t, hv, ch) = at;
    v[(t * 4 + hv) * 128 + ch] += delta;
    c.expected.observed = Some(Observed {
        label: label.unwrap_or("observed").to_string(),
        o: Some(HostTensor::from_f64(DType::BF16, o.shape.clone(), &v)),
        final_state: c.expected.final_state.clone(),
        checkpoints: None,
    });
    c
}

fn json_rows(so: &str) -> Vec<serde_json::Value> {
    so.lines()
        .map(|l| serde_json::from_str(l).expect("one JSON object per line"))
        .collect()
}

#[test]
fn observed_outputs_are_one_more_row_against_the_same_references() {
    let path = write(
        &observed_case(Some("fla-h100"), (200, 3, 17), 1.0),
        "observed.safetensors",
    );
    let out = bin()
        .args(["diff", "--json", "--backend", "cpu", "--case"])
        .arg(&path)
        .output()
        .expect("run");
    let (so, se) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{so}\n{se}");
    let rows = json_rows(&so);
    let observed: Vec<&serde_json::Value> = rows
        .iter()
        .filter(|r| r["backend"] == "observed:fla-h100")
        .collect();
    assert_eq!(observed.len(), 2, "o and final_state rows: {so}");
    let o = observed
        .iter()
        .find(|r| r["tensor"] == "o")
        .expect("an o row");
    assert_eq!(o["pass"], false);
    assert_eq!(o["reference"], "expected");
    assert_eq!(o["worst"]["packed"], 200);
    assert_eq!(o["worst"]["head"], 3);
    assert_eq!(o["worst"]["channel"], 17);
    assert!(o["rel_l2_f64"].is_number(), "{o}");
    let fs = observed
        .iter()
        .find(|r| r["tensor"] == "final_state")
        .expect("a final_state row");
    assert_eq!(fs["pass"], true, "{fs}");
    assert_eq!(fs["exact"], true, "{fs}");
    assert!(
        fs["worst"].is_null(),
        "an exact row names no worst element: {fs}"
    );
    // the cpu rows are unchanged by the observed outputs
    assert!(rows
        .iter()
        .filter(|r| r["backend"] == "cpu")
        .all(|r| r["pass"] == true));

    // within the bf16 bound: passes, and the table names the row
    let path = write(
        &observed_case(None, (10, 0, 0), 1e-3),
        "observed-small.safetensors",
    );
    let out = bin()
        .args(["diff", "--backend", "cpu", "--case"])
        .arg(&path)
        .output()
        .expect("run");
    let (so, se) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{so}\n{se}");
    assert!(so.contains("observed:observed"), "{so}");
}

/// Every line of a multi-backend, multi-case default run fits in 100 columns, with a legend, the
/// worst element in words and no worst element for exact rows.
#[test]
fn the_default_table_fits_in_100_columns() {
    let mut c = read_case(&golden("gdn_gva_varlen_state")).expect("read");
    let o = c.expected.o.as_ref().expect("expected_o");
    let mut v = o.to_f64_vec();
    v[(300 * 4 + 2) * 128 + 100] += 0.5;
    c.expected.o = Some(HostTensor::from_f64(DType::F32, o.shape.clone(), &v));
    let altered = write(
        &c,
        "a-rather-long-case-file-name-for-the-line-length-check.safetensors",
    );
    let observed = write(
        &observed_case(
            Some("a-label-of-forty-characters-at-most-xxxx"),
            (5, 1, 2),
            0.1,
        ),
        "observed-wide.safetensors",
    );
    let out = bin()
        .args([
            "diff",
            "--backend",
            "cpu",
            "cpu:chunked",
            "cpu:chunked-f64",
            "--case",
        ])
        .arg(&altered)
        .arg(&observed)
        .arg(golden("kda_checkpoints_example"))
        .arg(golden("gdn_decode_pool_example"))
        .args([
            "--op", "kda", "--tokens", "150", "--seqs", "3", "--heads", "2",
        ])
        .args([
            "--v-heads",
            "4",
            "--head-dim",
            "32",
            "--initial-state",
            "pool",
        ])
        .args(["--checkpoint-every", "16", "--layout", "vk"])
        .output()
        .expect("run");
    let (so, se) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{so}\n{se}");
    for l in so.lines() {
        assert!(
            l.chars().count() <= 100,
            "{} columns: `{l}`",
            l.chars().count()
        );
    }
    assert!(
        so.lines().any(|l| l.starts_with("rel_l2 = ")),
        "a legend: {so}"
    );
    assert!(
        so.contains("observed:a-label-of-forty-characters-at-most-xxxx"),
        "{so}"
    );
    assert!(so.contains("worst: seq "), "{so}");
    assert!(so.contains("checkpoint"), "{so}");
    assert!(so.contains("pool row"), "{so}");
    let lines: Vec<&str> = so.lines().collect();
    for (i, l) in lines.iter().enumerate() {
        if l.contains(" exact ") {
            assert!(
                !lines.get(i + 1).is_some_and(|n| n.contains("worst:")),
                "an exact row names no worst element:\n{l}\n{}",
                lines[i + 1]
            );
        }
    }
    // the case heading names a generated case once
    let id_line = se
        .lines()
        .find(|l| l.starts_with("kda_prefill/"))
        .unwrap_or_else(|| panic!("no heading for the generated case in {se}"));
    assert_eq!(id_line.matches("kda_prefill/").count(), 1, "{id_line}");
    // stderr is not a terminal: no progress bar
    assert!(!se.contains("pairs,") && !se.contains('\r'), "{se}");
    // --wide keeps everything on one line per row
    let out = bin()
        .args(["diff", "--wide", "--backend", "cpu:chunked", "--case"])
        .arg(&altered)
        .output()
        .expect("run");
    let (so, _) = text(&out);
    let row = so
        .lines()
        .find(|l| l.contains("cpu:chunked") && l.contains(" o "))
        .unwrap_or_else(|| panic!("{so}"));
    assert!(
        row.contains("value head") && row.contains("chunked"),
        "{row}"
    );
}

fn svg_series(path: &Path) -> (usize, String) {
    let svg = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let doc = roxmltree::Document::parse(&svg)
        .unwrap_or_else(|e| panic!("{} is not well-formed XML: {e}", path.display()));
    assert_eq!(doc.root_element().tag_name().name(), "svg");
    let strokes: std::collections::BTreeSet<String> = doc
        .descendants()
        .filter(|n| n.tag_name().name() == "polyline")
        .filter_map(|n| n.attribute("stroke").map(str::to_string))
        .filter(|s| s != "#000000") // the axes
        .collect();
    (strokes.len(), svg)
}

#[test]
fn plot_draws_one_line_per_backend_in_well_formed_svg() {
    let dir = tmp("plots");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("dir");
    let file = dir.join("err.svg");
    // a case whose observed outputs hold a NaN: marked, not a crash
    let mut c = observed_case(Some("nan"), (7, 0, 0), 0.0);
    if let Some(ob) = c.expected.observed.as_mut() {
        let o = ob.o.as_ref().expect("o");
        let mut v = o.to_f64_vec();
        v[(100 * 4 + 1) * 128 + 3] = f64::NAN;
        ob.o = Some(HostTensor::from_f64(DType::F32, o.shape.clone(), &v));
    }
    let nan_case = write(&c, "nan-observed.safetensors");
    let out = bin()
        .args(["diff", "--backend", "cpu", "cpu:chunked", "--plot"])
        .arg(&file)
        .arg("--case")
        .arg(&nan_case)
        .args([
            "--op", "gdn", "--tokens", "300", "--seqs", "2", "--heads", "1",
        ])
        .args([
            "--head-dim",
            "16",
            "--gate-at",
            "100=-inf",
            "--gate-at",
            "200:0=-1e4",
        ])
        .output()
        .expect("run");
    let (so, se) = text(&out);
    assert_eq!(out.status.code(), Some(1), "the NaN fails: {so}\n{se}");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("list")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    files.sort();
    assert_eq!(files.len(), 2, "one file per case: {files:?}");
    for f in &files {
        let name = f.file_name().expect("name").to_string_lossy().into_owned();
        assert!(name.starts_with("err-") && name.ends_with(".svg"), "{name}");
        let (series, svg) = svg_series(f);
        // cpu is the reference itself (exact, named but not drawn); the chunked path and, for
        // the case file, the observed outputs are drawn
        if name.contains("nan-observed") {
            assert_eq!(series, 2, "{name}");
            assert!(svg.contains("observed:nan"), "{name}");
            assert!(svg.contains("<line"), "crosses mark the NaN: {name}");
        } else {
            assert_eq!(series, 1, "{name}");
            assert!(svg.contains("g=-inf at 100"), "gate marks: {name}");
            assert!(svg.contains("chunk boundary"), "{name}");
        }
        assert!(svg.contains("exact everywhere (not drawn): cpu"), "{name}");
    }
    // a window of tokens
    let zoom = dir.join("zoom.svg");
    let (code, _, se) = run_args(&[
        "diff",
        "--backend",
        "cpu",
        "cpu:chunked",
        "--op",
        "gdn",
        "--tokens",
        "300",
        "--heads",
        "1",
        "--head-dim",
        "16",
        "--gate-at",
        "100=-inf",
        "--plot",
        &zoom.display().to_string(),
        "--plot-tokens",
        "90..150",
    ]);
    assert_eq!(code, Some(0), "{se}");
    let (series, svg) = svg_series(&zoom);
    assert_eq!(series, 1);
    assert!(svg.contains("tokens 90..150 shown") && svg.contains("g=-inf at 100"));
    let (code, _, se) = run_args(&[
        "diff",
        "--op",
        "gdn",
        "--tokens",
        "30",
        "--heads",
        "1",
        "--plot",
        "x.svg",
        "--plot-tokens",
        "9..3",
    ]);
    assert_eq!(code, Some(2), "{se}");
    assert!(se.contains("START..END"), "{se}");
}

#[test]
fn saved_outputs_compare_with_each_other_and_with_a_case() {
    let dir = tmp("saved");
    let _ = std::fs::remove_dir_all(&dir);
    let out = bin()
        .args(["diff", "--backend", "cpu", "cpu:chunked", "--save-outputs"])
        .arg(&dir)
        .arg("--case")
        .arg(golden("kda_checkpoints_example"))
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(0), "{:?}", text(&out));
    let cpu = dir.join("kda_checkpoints_example.cpu.safetensors");
    let chunked = dir.join("kda_checkpoints_example.cpu-chunked.safetensors");
    let bytes = std::fs::read(&chunked).expect("saved");
    let (_, meta) = safetensors::SafeTensors::read_metadata(&bytes).expect("safetensors");
    let meta = meta.metadata().clone().expect("metadata");
    for k in [
        "case",
        "backend",
        "kernel",
        "rule",
        "device",
        "deltarule_version",
    ] {
        assert!(meta.contains_key(k), "{k} missing from {meta:?}");
    }
    assert_eq!(meta["backend"], "cpu:chunked");
    // within the default bound (1e-6 + 1e-4), over a bound of 0
    let (code, so, se) = run_args(&[
        "compare",
        &chunked.display().to_string(),
        &cpu.display().to_string(),
    ]);
    assert_eq!(code, Some(0), "{so}\n{se}");
    assert!(so.contains("checkpoints") && so.contains("A (got)"), "{so}");
    for l in so.lines() {
        assert!(l.chars().count() <= 100, "`{l}`");
    }
    let (code, so, _) = run_args(&[
        "compare",
        &chunked.display().to_string(),
        &cpu.display().to_string(),
        "--tol",
        "0",
        "--json",
    ]);
    assert_eq!(code, Some(1), "{so}");
    assert_eq!(json_rows(&so).len(), 3);
    // a saved set against the case's expected outputs
    let (code, so, se) = run_args(&[
        "compare",
        &cpu.display().to_string(),
        &golden("kda_checkpoints_example").display().to_string(),
    ]);
    assert_eq!(code, Some(0), "{so}\n{se}");
    // one case file: its observed outputs against its expected ones
    let obs = write(
        &observed_case(None, (3, 0, 0), 0.5),
        "compare-observed.safetensors",
    );
    let (code, so, se) = run_args(&["compare", &obs.display().to_string()]);
    assert_eq!(code, Some(1), "{so}\n{se}");
    assert!(so.contains("packed 3"), "{so}");
    // different problems, a case without observed outputs, a missing file: input errors
    let (code, _, se) = run_args(&[
        "compare",
        &cpu.display().to_string(),
        &golden("gdn_single_k64").display().to_string(),
    ]);
    assert_eq!(code, Some(2), "{se}");
    assert!(se.contains("the same problem"), "{se}");
    let (code, _, se) = run_args(&["compare", &golden("gdn_single_k64").display().to_string()]);
    assert_eq!(code, Some(2), "{se}");
    assert!(se.contains("no observed outputs"), "{se}");
    let (code, _, _) = run_args(&["compare", "/no/such.safetensors", "/no/other.safetensors"]);
    assert_eq!(code, Some(2));
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

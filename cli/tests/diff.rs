//! `diff`, `compare` and `--plot` as a user runs them: exit codes, tables, JSON rows, observed
//! outputs, saved output sets and plots.

mod common;

use common::{bin, diff_cpu_case, golden, json_rows, observed_case, run_args, text, tmp, write};
use deltarule_core::{DType, HostTensor};
use deltarule_tests::casefile::read_case;
use std::path::{Path, PathBuf};

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
    let (code, so, se) = diff_cpu_case(&path);
    assert_eq!(code, Some(1), "{so}\n{se}");
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
    let (code, so, se) = diff_cpu_case(&path);
    assert_eq!(code, Some(0), "{so}\n{se}");
    assert!(se.contains("float64 reference only"), "{se}");
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
    let (code, so, se) = diff_cpu_case(&path);
    assert_eq!(code, Some(0), "{so}\n{se}");
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

/// The exact segmented prefill by name, on generated problems whose sequences span many segments
/// (pools, checkpoints across segment edges, GVA, both layouts, in-kernel gates and l2norm), at
/// the default segment length and at one set by the variable.
#[test]
fn diff_on_cpu_segmented_passes_with_several_segments_a_sequence() {
    let problem = |op: &str, extra: &[&str]| {
        let mut args: Vec<String> = [
            "diff",
            "--json",
            "--backend",
            "cpu:segmented",
            "--op",
            op,
            "--tokens",
            "1000",
            "--seqs",
            "3",
            "--heads",
            "1",
            "--v-heads",
            "2",
            "--head-dim",
            "16",
            "--seed",
            "4",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        args.extend(extra.iter().map(|s| s.to_string()));
        args
    };
    let gdn = problem(
        "gdn",
        &[
            "--initial-state",
            "pool",
            "--checkpoint-every",
            "50",
            "--layout",
            "vk",
        ],
    );
    let kda = problem(
        "kda",
        &[
            "--initial-state",
            "dense",
            "--gate",
            "lower-bound",
            "--beta",
            "logit",
            "--l2norm",
        ],
    );
    for args in [&gdn, &kda] {
        for len in [None, Some("192")] {
            let mut cmd = bin();
            if let Some(len) = len {
                cmd.env("DELTARULE_CPU_SEGMENT_LEN", len);
            }
            let out = cmd.args(args).output().expect("run");
            let (so, se) = text(&out);
            assert_eq!(out.status.code(), Some(0), "{args:?} {len:?}\n{so}\n{se}");
            let rows = json_rows(&so);
            assert!(rows.len() >= 2, "o and the final state: {so}");
            for r in rows {
                assert_eq!(r["kernel"], "segmented", "{r}");
                assert_eq!(r["pass"], true, "{r}");
            }
        }
    }
}

/// A segment length the variable does not take is an error naming it (exit 2, no panic) for the
/// kernel it sets; the other CPU kernels run, and `backends` shows the value.
#[test]
fn a_bad_segment_length_is_an_error_naming_the_variable() {
    let args = [
        "diff",
        "--op",
        "gdn",
        "--tokens",
        "300",
        "--seqs",
        "2",
        "--heads",
        "1",
        "--head-dim",
        "16",
        "--backend",
    ];
    for bad in ["100", "0", "abc", "-64"] {
        let out = bin()
            .env("DELTARULE_CPU_SEGMENT_LEN", bad)
            .args(args)
            .arg("cpu:segmented")
            .output()
            .expect("run");
        let (so, se) = text(&out);
        assert_eq!(out.status.code(), Some(2), "{bad}: {so}\n{se}");
        assert!(!se.contains("panicked"), "{bad}: panic\n{se}");
        let errors: Vec<&str> = se.lines().filter(|l| l.starts_with("error:")).collect();
        assert!(
            errors
                .iter()
                .any(|l| l.contains("DELTARULE_CPU_SEGMENT_LEN")
                    && l.contains("multiple of 64")
                    && l.contains(&format!("got {bad}"))),
            "{bad}: {errors:?}"
        );
        let out = bin()
            .env("DELTARULE_CPU_SEGMENT_LEN", bad)
            .args(args)
            .args(["cpu", "cpu:chunked-f64"])
            .output()
            .expect("run");
        assert_eq!(out.status.code(), Some(0), "{bad}: {}", text(&out).1);
    }
    let out = bin()
        .env("DELTARULE_CPU_SEGMENT_LEN", "100")
        .arg("backends")
        .output()
        .expect("run");
    let (so, se) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{so}\n{se}");
    assert!(so.contains("DELTARULE_CPU_SEGMENT_LEN"), "{so}");
}

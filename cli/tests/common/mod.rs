//! Helpers shared by the CLI's integration tests: running the command, temporary files, the
//! golden cases and cases with observed outputs.

use deltarule_core::{DType, HostTensor};
use deltarule_tests::casefile::{case_bytes, read_case, Case};
use std::path::PathBuf;
use std::process::{Command, Output};

pub fn bin() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_deltarule"));
    // keep the probes to the CPU unless a test asks otherwise
    c.env("WGPU_BACKEND", "none");
    c
}

pub fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("deltarule-cli-{}", std::process::id()));
    std::fs::create_dir_all(&d).expect("temp dir");
    d.join(name)
}

pub fn golden(name: &str) -> PathBuf {
    deltarule_tests::golden_dir().join(format!("{name}.safetensors"))
}

pub fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

pub fn write(case: &Case, name: &str) -> PathBuf {
    let p = tmp(name);
    std::fs::write(&p, case_bytes(case).expect("serialise")).expect("write");
    p
}

pub fn run_args(args: &[&str]) -> (Option<i32>, String, String) {
    let out = bin().args(args).output().expect("run");
    let (so, se) = text(&out);
    (out.status.code(), so, se)
}

/// `deltarule diff --backend cpu --case PATH`: exit code, stdout, stderr.
pub fn diff_cpu_case(path: &std::path::Path) -> (Option<i32>, String, String) {
    let out = bin()
        .args(["diff", "--backend", "cpu", "--case"])
        .arg(path)
        .output()
        .expect("run");
    let (so, se) = text(&out);
    (out.status.code(), so, se)
}

/// A case whose observed outputs are the float64 reference with `o[token, head, channel]` moved
/// by `delta`.
#[allow(dead_code)] // not every test binary uses it
pub fn observed_case(label: Option<&str>, at: (usize, usize, usize), delta: f64) -> Case {
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

#[allow(dead_code)] // not every test binary uses it
pub fn json_rows(so: &str) -> Vec<serde_json::Value> {
    so.lines()
        .map(|l| serde_json::from_str(l).expect("one JSON object per line"))
        .collect()
}

//! Device tests (skipped, printed, without a GPU; failing with `DELTARULE_REQUIRE_CUDA=1`): the
//! conformance suite of `deltarule-tests` for each CUDA kernel named explicitly (the `cuda`
//! instantiation in tests/tests/conformance.rs lets `auto` pick, which sends the small generated
//! cases to small-bh), and a representative subset for compute-sanitizer.

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

#[test]
fn chunked_conformance() {
    if present() {
        suite::golden("cuda:chunked").finish("golden files", "cuda:chunked");
        suite::generated("cuda:chunked", |_| true).finish("generated cases", "cuda:chunked");
        suite::properties("cuda:chunked", 2).finish("properties", "cuda:chunked");
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

/// The small-bh conformance again with each wgmma state pass forced: the suite's problems are
/// small (few sequence x value-head pairs), so `auto` sends them to the 16-column mma.sync pass and
/// would never run the wgmma passes (`wg`: W/U workspace; `wgt`: the T-form, gdn with 16-bit
/// inputs; each falls back to the automatic pass where it does not apply). The backend reads
/// `DELTARULE_CUDA_STATE_BV` once at construction, so each run is this binary again as a child
/// process with the variable set (no environment changes inside this process).
#[test]
fn small_bh_conformance_with_each_wgmma_state_pass() {
    if !present() || std::env::var_os("DELTARULE_CUDA_STATE_BV").is_some() {
        return; // (a forced pass already applies to small_bh_conformance itself)
    }
    let exe = std::env::current_exe().expect("the test binary's path");
    for pass in ["wg", "wgt"] {
        let out = std::process::Command::new(&exe)
            .args([
                "--exact",
                "small_bh_conformance",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("DELTARULE_CUDA_STATE_BV", pass)
            .output()
            .expect("run the test binary");
        let text = String::from_utf8_lossy(&out.stdout);
        for line in text.lines().filter(|l| l.contains(" ran, ")) {
            println!("DELTARULE_CUDA_STATE_BV={pass}: {line}");
        }
        assert!(
            out.status.success(),
            "small-bh conformance with DELTARULE_CUDA_STATE_BV={pass} failed:\n{text}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            text.contains(" ran, "),
            "no suite ran with the pass forced:\n{text}"
        );
    }
}

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

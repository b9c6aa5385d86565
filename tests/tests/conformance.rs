//! The conformance suite, instantiated once per backend. A backend that is not present on this
//! machine is skipped with its reason printed; with its `DELTARULE_REQUIRE_*` variable set to 1
//! the skip becomes a failure (CI sets it for wgpu on lavapipe; GPU runs set it for CUDA).

use deltarule_tests::suite;

macro_rules! conformance_suite {
    ($module:ident, $backend:expr, $require:expr, $seeds:expr) => {
        mod $module {
            use super::suite;

            fn present() -> bool {
                match suite::availability($backend, $require) {
                    Ok(()) => true,
                    Err(reason) => {
                        println!("SKIP {}: backend unavailable: {reason}", $backend);
                        false
                    }
                }
            }

            #[test]
            fn golden_files() {
                if present() {
                    suite::golden($backend).finish("golden files", $backend);
                }
            }

            #[test]
            fn generated_cases() {
                if present() {
                    suite::generated($backend, |_| true).finish("generated cases", $backend);
                }
            }

            #[test]
            fn extreme_gates() {
                if present() {
                    suite::gates($backend).finish("extreme gates", $backend);
                }
            }

            #[test]
            fn state_contract_properties() {
                if present() {
                    suite::properties($backend, $seeds).finish("properties", $backend);
                }
            }

            #[test]
            fn bad_inputs() {
                if present() {
                    suite::bad_inputs($backend).finish("bad inputs", $backend);
                }
            }
        }
    };
}

conformance_suite!(cpu_reference, "cpu", None, 3);
conformance_suite!(cpu_chunked, "cpu:chunked", None, 3);
conformance_suite!(cpu_chunked_f64, "cpu:chunked-f64", None, 2);
// the exact segmented prefill (docs/segments.md) at its default segment length, one chunk: the
// cases' sequences of 65 to 200 tokens are cut into two to four segments
conformance_suite!(cpu_segmented, "cpu:segmented", None, 2);
conformance_suite!(wgpu, "wgpu", Some("DELTARULE_REQUIRE_WGPU"), 2);
// the cooperative-matrix prefill (`coop`): every case skipped, counted, where the adapter has none
// (lavapipe), unless DELTARULE_WGPU_COOP_EMULATE=1 runs its matrices in plain WGSL (.ci/run does:
// kda's coop kernel then runs there); on NVIDIA's Vulkan driver `wgpu` (auto) also picks it where
// its rows accept the case
conformance_suite!(wgpu_coop, "wgpu:coop", Some("DELTARULE_REQUIRE_WGPU"), 2);
conformance_suite!(cuda, "cuda", Some("DELTARULE_REQUIRE_CUDA"), 2);

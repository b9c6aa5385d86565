//! Tests that need no GPU: the kernel registry against `kernels/`, construction without a
//! driver, and NVRTC compilation of every module to CUBIN (which runs ptxas, so inline PTX is
//! checked too). NVRTC comes from the `nvidia-cuda-nvrtc` wheel on `LD_LIBRARY_PATH`; without it
//! the compile test is skipped (printed), or fails when `DELTARULE_REQUIRE_NVRTC=1`.

use deltarule_core::{BackendKind, Error};
use deltarule_cuda::kernels::{self, Defines, Module, KERNEL_FILES};
use std::collections::BTreeSet;
use std::path::PathBuf;

fn kernels_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../kernels")
}

#[test]
fn registry_matches_the_kernels_folder() {
    let on_disk: BTreeSet<String> = std::fs::read_dir(kernels_dir())
        .expect("kernels/ exists")
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".cu") || n.ends_with(".cuh"))
        .collect();
    let listed: BTreeSet<String> = KERNEL_FILES.iter().map(|s| s.to_string()).collect();
    assert!(!listed.is_empty());
    assert_eq!(on_disk, listed, "kernels/ and KERNEL_FILES differ");
    let mut used = BTreeSet::new();
    for m in Module::ALL {
        assert_eq!(m.files().last(), Some(&m.file_name()));
        for f in m.files() {
            assert!(listed.contains(*f), "{m:?} uses unlisted {f}");
            used.insert(f.to_string());
            let text = std::fs::read_to_string(kernels_dir().join(f)).expect("readable");
            assert!(m.source().contains(&text), "{m:?} source lacks {f}");
            assert!(m.source().contains(&format!("#line 1 \"{f}\"")));
        }
        for e in m.entry_points() {
            assert!(
                m.source().contains(&format!("{e}(const Params p")),
                "{m:?}: entry point {e} not defined"
            );
        }
    }
    assert_eq!(used, listed, "a kernel file is not part of any module");
}

/// Every kernel source stays readable in one sitting: under 1,000 lines.
#[test]
fn kernel_files_stay_under_1000_lines() {
    for f in KERNEL_FILES {
        let text = std::fs::read_to_string(kernels_dir().join(f)).expect("readable");
        let lines = text.lines().count();
        assert!(lines < 1000, "kernels/{f} has {lines} lines");
    }
}

#[test]
fn construction_without_a_driver_is_unavailable() {
    if deltarule_cuda::device::driver_present() {
        println!("SKIP: libcuda is present on this machine");
        return;
    }
    match deltarule_cuda::CudaBackend::new(0) {
        Err(Error::Unavailable { backend, reason }) => {
            assert_eq!(backend, BackendKind::Cuda);
            assert!(reason.contains("libcuda"), "{reason}");
        }
        Err(other) => panic!("expected Unavailable, got {other}"),
        Ok(_) => panic!("constructed a CUDA backend without libcuda"),
    }
}

/// The module builds checked: every module at K = V = 128 (bf16 operands) for Hopper and
/// Blackwell, plus the other head dims and f16 operands for Hopper.
fn builds() -> Vec<(Module, &'static str, Defines)> {
    let d = |k, v, f| Defines {
        head_k: k,
        head_v: v,
        mma_f16: f,
    };
    let mut out = Vec::new();
    for m in Module::ALL {
        for arch in ["sm_90a", "sm_100a"] {
            out.push((m, arch, d(128, 128, false)));
        }
        if m.needs_dims() {
            out.push((m, "sm_90a", d(64, 64, true)));
            out.push((m, "sm_90a", d(32, 64, false)));
            if !matches!(m, Module::GdnPrefill | Module::KdaPrefill) {
                out.push((m, "sm_90a", d(64, 32, false)));
            }
        }
    }
    out
}

#[test]
fn nvrtc_compiles_every_module_to_cubin() {
    if !kernels::nvrtc_present() {
        let msg = "libnvrtc not found: set LD_LIBRARY_PATH to the nvidia-cuda-nvrtc wheel's \
                   nvidia/cu13/lib";
        if std::env::var("DELTARULE_REQUIRE_NVRTC").as_deref() == Ok("1") {
            panic!("DELTARULE_REQUIRE_NVRTC=1: {msg}");
        }
        println!("SKIP: {msg}");
        return;
    }
    let list = builds();
    let threads = std::thread::available_parallelism()
        .map_or(2, |n| n.get())
        .min(8);
    let chunks: Vec<Vec<(Module, &'static str, Defines)>> = (0..threads)
        .map(|t| list.iter().skip(t).step_by(threads).cloned().collect())
        .collect();
    let results: Vec<(String, Result<usize, String>)> = std::thread::scope(|s| {
        let handles: Vec<_> = chunks
            .into_iter()
            .map(|c| {
                s.spawn(move || {
                    c.into_iter()
                        .map(|(m, arch, d)| {
                            let label = format!(
                                "{} {arch} K{} V{} f16={}",
                                m.name(),
                                d.head_k,
                                d.head_v,
                                d.mma_f16
                            );
                            (
                                label,
                                kernels::compile_cubin(m, arch, &d)
                                    .map(|b| b.len())
                                    .map_err(|e| e.to_string()),
                            )
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("compile thread"))
            .collect()
    });
    let mut failures = Vec::new();
    for (label, r) in &results {
        match r {
            Ok(bytes) => println!("  {label}: {bytes} bytes of CUBIN"),
            Err(e) => failures.push(format!("{label}: {e}")),
        }
    }
    let arches: BTreeSet<&str> = list.iter().map(|(_, a, _)| *a).collect();
    println!(
        "NVRTC: {} module builds compiled to CUBIN ({} modules x {} arches, plus head-dim and \
         f16 variants on sm_90a)",
        results.len() - failures.len(),
        Module::ALL.len(),
        arches.len()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Fills a CUBIN cache folder for the builds the conformance suite and the anchors use on Hopper
/// (`DELTARULE_PRECOMPILE=<dir>`; a no-op otherwise). The GPU run carries the folder and points
/// `DELTARULE_CUDA_CACHE` at it, so device time is not spent in NVRTC.
#[test]
fn precompile_cache_for_hopper() {
    let Some(dir) = std::env::var_os("DELTARULE_PRECOMPILE") else {
        return;
    };
    let dir = PathBuf::from(dir);
    let dims = [
        (64, 64),
        (32, 32),
        (128, 128),
        (64, 32),
        (128, 64),
        (32, 64),
    ];
    let mut jobs = vec![(
        Module::Varlen,
        Defines {
            head_k: 0,
            head_v: 0,
            mma_f16: false,
        },
    )];
    for (k, v) in dims {
        for m in [
            Module::GdnPrefill,
            Module::KdaPrefill,
            Module::GdnDecode,
            Module::KdaDecode,
        ] {
            jobs.push((
                m,
                Defines {
                    head_k: k,
                    head_v: v,
                    mma_f16: false,
                },
            ));
        }
    }
    for m in [
        Module::GdnPrefill,
        Module::KdaPrefill,
        Module::GdnDecode,
        Module::KdaDecode,
    ] {
        jobs.push((
            m,
            Defines {
                head_k: 64,
                head_v: 64,
                mma_f16: true,
            },
        ));
    }
    // `DELTARULE_PRECOMPILE_ONLY=gdn_prefill:128:128` (module:K:V): that build only
    if let Ok(only) = std::env::var("DELTARULE_PRECOMPILE_ONLY") {
        jobs.retain(|(m, d)| {
            format!("{}:{}:{}", m.name(), d.head_k, d.head_v) == only && !d.mma_f16
        });
    }
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
    std::thread::scope(|s| {
        for t in 0..threads {
            let jobs = &jobs;
            let dir = &dir;
            s.spawn(move || {
                for (m, d) in jobs.iter().skip(t).step_by(threads) {
                    kernels::cubin_cached(*m, "sm_90a", d, Some(dir)).expect("compiles");
                }
            });
        }
    });
    println!("precompiled {} builds into {}", jobs.len(), dir.display());
}

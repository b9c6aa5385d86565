//! The CUDA C++ kernel registry (`kernels/`), NVRTC compilation to CUBIN and the module cache.
//!
//! Every module is one source string: `common.cuh`, the stage headers and the op's entry file,
//! joined with `#line` markers so that NVRTC reports errors against the right file and line.
//! Modules are specialised by `-D` defines (head dims, tensor-core operand type) and compiled
//! lazily for the device's architecture (`sm_90a` on Hopper); compiled CUBINs are cached in memory
//! per (module, arch, defines) and, when a cache folder is configured, on disk.

use deltarule_core::{BackendKind, Error, Result};
use std::ffi::CString;

/// One compilation unit of `kernels/`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Module {
    GdnPrefill,
    KdaPrefill,
    GdnDecode,
    KdaDecode,
    Varlen,
}

/// The files of a prefill module in include order (kernels/prefill_layout.cuh describes each),
/// with the op's own headers after `prefill_fused.cuh` (gdn: the fused T-form) and its entry file
/// last, handed to `joined!` (the source) or `list!` (the names).
macro_rules! prefill_files {
    ($m:ident!($($own:literal),*; $entry:literal)) => {
        $m!(
            "common.cuh",
            "prefill_layout.cuh",
            "mma.cuh",
            "prefill_intra.cuh",
            "prefill_fused.cuh",
            $($own,)*
            "prefill_smallbh.cuh",
            "prefill_state.cuh",
            "prefill_state_wgmma.cuh",
            "prefill_sizes.cuh",
            $entry
        )
    };
}

macro_rules! list {
    ($($f:literal),+) => {
        &[$($f),+]
    };
}

macro_rules! joined {
    ($($f:literal),+) => {
        concat!($("#line 1 \"", $f, "\"\n", include_str!(concat!("../../../kernels/", $f)), "\n"),+)
    };
}

/// Every file of `kernels/` (a test checks this list against the folder).
pub const KERNEL_FILES: &[&str] = &[
    "common.cuh",
    "prefill_layout.cuh",
    "mma.cuh",
    "prefill_intra.cuh",
    "prefill_fused.cuh",
    "prefill_fused_tform.cuh",
    "prefill_segments.cuh",
    "prefill_smallbh.cuh",
    "prefill_state.cuh",
    "prefill_state_wgmma.cuh",
    "prefill_sizes.cuh",
    "decode.cuh",
    "gdn_prefill.cu",
    "kda_prefill.cu",
    "gdn_decode.cu",
    "kda_decode.cu",
    "varlen.cu",
];

impl Module {
    pub const ALL: [Module; 5] = [
        Module::GdnPrefill,
        Module::KdaPrefill,
        Module::GdnDecode,
        Module::KdaDecode,
        Module::Varlen,
    ];

    /// The entry file (the one that holds the `extern "C"` kernels).
    pub fn file_name(self) -> &'static str {
        match self {
            Module::GdnPrefill => "gdn_prefill.cu",
            Module::KdaPrefill => "kda_prefill.cu",
            Module::GdnDecode => "gdn_decode.cu",
            Module::KdaDecode => "kda_decode.cu",
            Module::Varlen => "varlen.cu",
        }
    }

    /// The files joined into this module's source, in order.
    pub fn files(self) -> &'static [&'static str] {
        match self {
            Module::GdnPrefill => {
                prefill_files!(
                    list!("prefill_fused_tform.cuh", "prefill_segments.cuh"; "gdn_prefill.cu")
                )
            }
            Module::KdaPrefill => prefill_files!(list!(; "kda_prefill.cu")),
            Module::GdnDecode => &["common.cuh", "decode.cuh", "gdn_decode.cu"],
            Module::KdaDecode => &["common.cuh", "decode.cuh", "kda_decode.cu"],
            Module::Varlen => &["common.cuh", "varlen.cu"],
        }
    }

    /// The source string compiled by NVRTC.
    pub fn source(self) -> &'static str {
        match self {
            Module::GdnPrefill => {
                prefill_files!(
                    joined!("prefill_fused_tform.cuh", "prefill_segments.cuh"; "gdn_prefill.cu")
                )
            }
            Module::KdaPrefill => prefill_files!(joined!(; "kda_prefill.cu")),
            Module::GdnDecode => joined!("common.cuh", "decode.cuh", "gdn_decode.cu"),
            Module::KdaDecode => joined!("common.cuh", "decode.cuh", "kda_decode.cu"),
            Module::Varlen => joined!("common.cuh", "varlen.cu"),
        }
    }

    /// The kernels this module defines.
    pub fn entry_points(self) -> &'static [&'static str] {
        match self {
            Module::GdnPrefill => &[
                "gdn_prefill_fused",
                "gdn_prefill_fused_tform",
                "gdn_prefill_intra",
                "gdn_prefill_state32",
                "gdn_prefill_state16",
                "gdn_prefill_state64",
                "gdn_prefill_state_wgmma",
                "gdn_prefill_intra_tform",
                "gdn_prefill_intra_tform_overlap",
                "gdn_prefill_state_tform_wgmma",
                "gdn_prefill_segments_setup",
                "gdn_prefill_segments_combine",
                "gdn_prefill_segments_finish",
            ],
            Module::KdaPrefill => &[
                "kda_prefill_fused",
                "kda_prefill_intra",
                "kda_prefill_state32",
                "kda_prefill_state16",
                "kda_prefill_state64",
                "kda_prefill_state_wgmma",
            ],
            Module::GdnDecode => &[
                "gdn_decode_block4",
                "gdn_decode_block5",
                "gdn_decode_block6",
                "gdn_decode_persistent",
            ],
            Module::KdaDecode => &[
                "kda_decode_block4",
                "kda_decode_block5",
                "kda_decode_block6",
                "kda_decode_persistent",
            ],
            Module::Varlen => &["varlen_build_tables"],
        }
    }

    /// The `__device__` size table of a prefill module (see `gdn_prefill.cu`).
    pub fn sizes_symbol(self) -> Option<&'static str> {
        match self {
            Module::GdnPrefill => Some("gdn_prefill_sizes"),
            Module::KdaPrefill => Some("kda_prefill_sizes"),
            _ => None,
        }
    }

    /// Whether the module needs the head-dim defines.
    pub fn needs_dims(self) -> bool {
        !matches!(self, Module::Varlen)
    }

    pub fn name(self) -> &'static str {
        self.file_name().trim_end_matches(".cu")
    }
}

/// Compile-time constants of one module build.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Defines {
    pub head_k: usize,
    pub head_v: usize,
    /// f16 tensor-core operands (f16 inputs) instead of bf16.
    pub mma_f16: bool,
}

/// Head dims the kernels are written for.
pub const HEAD_DIMS: &[usize] = &[32, 64, 128];

impl Defines {
    pub fn options(&self, module: Module) -> Vec<String> {
        if !module.needs_dims() {
            return Vec::new();
        }
        vec![
            format!("-DHEAD_K={}", self.head_k),
            format!("-DHEAD_V={}", self.head_v),
            format!("-DMMA_F16={}", u8::from(self.mma_f16)),
        ]
    }

    /// The defines a module actually depends on (Varlen: none).
    pub fn for_module(&self, module: Module) -> Defines {
        if module.needs_dims() {
            *self
        } else {
            Defines {
                head_k: 0,
                head_v: 0,
                mma_f16: false,
            }
        }
    }
}

/// NVRTC architecture name for a compute capability: `sm_90a` on Hopper, `sm_100a` on
/// Blackwell (architecture-specific features), `sm_XY` otherwise.
pub fn arch_for(cc: (u32, u32)) -> String {
    match cc {
        (9, 0) => "sm_90a".into(),
        (10, 0) => "sm_100a".into(),
        (a, b) => format!("sm_{a}{b}"),
    }
}

/// Every option passed to NVRTC for `module` on `arch`.
pub fn compile_options(module: Module, arch: &str, defines: &Defines) -> Vec<String> {
    let mut o = vec![
        format!("--gpu-architecture={arch}"),
        "-std=c++17".to_string(),
        // lambdas without annotations (the dtype dispatch of common.cuh) are device code
        "-default-device".to_string(),
        "-lineinfo".to_string(),
    ];
    o.extend(defines.options(module));
    o
}

/// Whether libnvrtc can be loaded (checked before any other NVRTC call: cudarc panics otherwise).
pub fn nvrtc_present() -> bool {
    // SAFETY: only tries to open the library by its candidate names.
    unsafe { cudarc::nvrtc::sys::is_culib_present() }
}

fn nvrtc_err(what: &str, e: impl std::fmt::Debug) -> Error {
    Error::device(BackendKind::Cuda, format!("NVRTC {what}: {e:?}"))
}

/// Compiles `module` for `arch` to CUBIN (NVRTC runs ptxas for a real `sm_XY` target, so inline
/// PTX is checked too). Compile errors carry the log, the options and the source name.
pub fn compile_cubin(module: Module, arch: &str, defines: &Defines) -> Result<Vec<u8>> {
    use cudarc::nvrtc::{result, sys};
    if !nvrtc_present() {
        return Err(Error::Unavailable {
            backend: BackendKind::Cuda,
            reason: "libnvrtc not found (searched libnvrtc.so, libnvrtc.so.13 and the other \
                     cudarc candidates on the loader path; set LD_LIBRARY_PATH to the folder of \
                     the nvidia-cuda-nvrtc wheel's nvidia/cu13/lib)"
                .into(),
        });
    }
    let options = compile_options(module, arch, defines);
    let src = CString::new(module.source()).map_err(|e| nvrtc_err("source", e))?;
    let name = CString::new(module.file_name()).map_err(|e| nvrtc_err("name", e))?;
    let prog = result::create_program(&src, Some(&name)).map_err(|e| nvrtc_err("create", e))?;
    // SAFETY: `prog` was created above and is destroyed exactly once below.
    let compiled = unsafe { result::compile_program(prog, &options) };
    let out = match compiled {
        Ok(()) => {
            let mut size = 0usize;
            // SAFETY: `prog` is a compiled program; the buffer has the size NVRTC reports.
            unsafe {
                sys::nvrtcGetCUBINSize(prog, &mut size)
                    .result()
                    .map_err(|e| nvrtc_err("cubin size", e))
                    .and_then(|()| {
                        let mut buf = vec![0u8; size];
                        sys::nvrtcGetCUBIN(prog, buf.as_mut_ptr() as *mut std::ffi::c_char)
                            .result()
                            .map_err(|e| nvrtc_err("cubin", e))
                            .map(|()| buf)
                    })
            }
        }
        Err(_) => {
            // SAFETY: `prog` is valid; the log is read before it is destroyed.
            let log = unsafe { result::get_program_log(prog) }
                .map(|l| {
                    let bytes: Vec<u8> =
                        l.iter().map(|&c| c as u8).take_while(|&c| c != 0).collect();
                    String::from_utf8_lossy(&bytes).into_owned()
                })
                .unwrap_or_else(|e| format!("(no log: {e:?})"));
            Err(Error::Compile {
                backend: BackendKind::Cuda,
                source_name: module.file_name().to_string(),
                log,
                options: options.clone(),
            })
        }
    };
    // SAFETY: `prog` is valid and not used afterwards.
    let _ = unsafe { result::destroy_program(prog) };
    out
}

/// A stable 64-bit FNV-1a hash (cache file names: source and options).
pub fn fnv1a(parts: &[&str]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for p in parts {
        for b in p.bytes().chain(std::iter::once(0u8)) {
            h ^= b as u64;
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    h
}

/// The file name of a cached CUBIN: readable parts plus a hash of the source and options, so a
/// changed kernel never loads a stale binary.
pub fn cache_file_name(module: Module, arch: &str, defines: &Defines) -> String {
    let opts = compile_options(module, arch, defines);
    let mut parts: Vec<&str> = vec![module.source()];
    parts.extend(opts.iter().map(|s| s.as_str()));
    format!(
        "{}-{arch}-k{}-v{}-{}-{:016x}.cubin",
        module.name(),
        defines.head_k,
        defines.head_v,
        if defines.mma_f16 { "f16" } else { "bf16" },
        fnv1a(&parts)
    )
}

/// CUBIN for (module, arch, defines): from `cache_dir` when present there, else compiled (and
/// written there when a folder is given).
pub fn cubin_cached(
    module: Module,
    arch: &str,
    defines: &Defines,
    cache_dir: Option<&std::path::Path>,
) -> Result<Vec<u8>> {
    if let Some(dir) = cache_dir {
        let path = dir.join(cache_file_name(module, arch, defines));
        if let Ok(bytes) = std::fs::read(&path) {
            return Ok(bytes);
        }
        let bytes = compile_cubin(module, arch, defines)?;
        let _ = std::fs::create_dir_all(dir);
        let tmp = path.with_extension(format!("tmp{}", std::process::id()));
        if std::fs::write(&tmp, &bytes).is_ok() {
            let _ = std::fs::rename(&tmp, &path);
        }
        return Ok(bytes);
    }
    compile_cubin(module, arch, defines)
}

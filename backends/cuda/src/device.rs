//! Context, stream, device buffers and module loading: the only code that calls the driver
//! besides the launches in `launch.rs`.

use crate::kernels::{cubin_cached, Defines, Module};
use cudarc::driver::{result, sys, CudaContext};
use deltarule_core::{BackendKind, Error, Result};
use std::collections::HashMap;
use std::ffi::CString;
use std::sync::Arc;

/// Converts a driver error into the engine's device error.
pub fn drv(what: &str, e: impl std::fmt::Debug) -> Error {
    Error::device(BackendKind::Cuda, format!("{what}: {e:?}"))
}

/// Whether libcuda can be loaded (checked before any other driver call: cudarc panics otherwise).
pub fn driver_present() -> bool {
    // SAFETY: only tries to open the library by its candidate names.
    unsafe { sys::is_culib_present() }
}

/// A device allocation owned by this crate (freed on drop).
pub struct DeviceBuffer {
    ptr: sys::CUdeviceptr,
    bytes: usize,
    ctx: Arc<CudaContext>,
}

impl DeviceBuffer {
    /// Allocates at least `bytes` (and at least 256) bytes.
    pub fn alloc(ctx: &Arc<CudaContext>, bytes: usize) -> Result<Self> {
        ctx.bind_to_thread().map_err(|e| drv("bind context", e))?;
        let n = bytes.max(256);
        // SAFETY: a plain device allocation in the bound context.
        let ptr = unsafe { result::malloc_sync(n) }.map_err(|e| drv("cuMemAlloc", e))?;
        Ok(DeviceBuffer {
            ptr,
            bytes: n,
            ctx: ctx.clone(),
        })
    }
    pub fn ptr(&self) -> u64 {
        self.ptr
    }
    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

impl Drop for DeviceBuffer {
    fn drop(&mut self) {
        if self.ctx.bind_to_thread().is_ok() {
            // SAFETY: `ptr` was allocated by `alloc` in this context and is freed once.
            let _ = unsafe { result::free_sync(self.ptr) };
        }
    }
}

/// A loaded module: its kernels and, for prefill modules, the size table the device code exports.
pub struct Loaded {
    module: sys::CUmodule,
    funcs: Vec<(&'static str, sys::CUfunction)>,
    /// Prefill modules: [fused shared bytes, small-bh state shared bytes, workspace block bytes
    /// per (chunk, value head), small-bh intra shared bytes, small-bh state threads, the shared
    /// bytes and threads of the 16-column state variant, of the 64-column one (0 when the
    /// module has none: V < 64), and of the wgmma one (0 when not compiled: not sm_90a, K not 64
    /// or 128, or V < 64), then of the T-form wgmma one (gdn only; 0 otherwise), then the shared
    /// bytes of the fused T-form kernel (gdn with K, V >= 64; 0 otherwise)].
    pub sizes: [i32; 14],
}

// SAFETY: module and function handles are plain driver handles, valid in any thread that binds
// the context; they are never mutated after loading.
unsafe impl Send for Loaded {}
// SAFETY: as above.
unsafe impl Sync for Loaded {}

impl Loaded {
    pub fn func(&self, name: &str) -> Result<sys::CUfunction> {
        self.funcs
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, f)| *f)
            .ok_or_else(|| drv("kernel lookup", format!("no kernel `{name}` in the module")))
    }
}

impl Drop for Loaded {
    fn drop(&mut self) {
        // SAFETY: the module was loaded by `load` and is unloaded once.
        let _ = unsafe { result::module::unload(self.module) };
    }
}

/// Compiles (or reads from the cache folder) and loads one module build, raising the dynamic
/// shared-memory limit of its kernels to `max_smem`.
pub fn load(
    ctx: &Arc<CudaContext>,
    module: Module,
    arch: &str,
    defines: &Defines,
    cache_dir: Option<&std::path::Path>,
    max_smem: i32,
) -> Result<Loaded> {
    let cubin = cubin_cached(module, arch, defines, cache_dir)?;
    ctx.bind_to_thread().map_err(|e| drv("bind context", e))?;
    // SAFETY: `cubin` is a complete CUBIN image produced by NVRTC for this device's arch.
    let m = unsafe { result::module::load_data(cubin.as_ptr() as *const std::ffi::c_void) }
        .map_err(|e| drv("cuModuleLoadData", e))?;
    let mut loaded = Loaded {
        module: m,
        funcs: Vec::new(),
        sizes: [0; 14],
    };
    if let Some(sym) = module.sizes_symbol() {
        let c = CString::new(sym).map_err(|e| drv("symbol name", e))?;
        // SAFETY: the symbol is a 56-byte `int[14]` defined by the module.
        let (ptr, bytes) = unsafe { result::module::get_global(m, c) }
            .map_err(|e| drv(&format!("cuModuleGetGlobal({sym})"), e))?;
        if bytes != 56 {
            return Err(drv("size table", format!("{bytes} bytes, expected 56")));
        }
        let mut sizes = [0i32; 14];
        // SAFETY: copies the 56 bytes of the symbol into `sizes` (load time only, not per call).
        unsafe { result::memcpy_dtoh_sync(&mut sizes[..], ptr) }
            .map_err(|e| drv("read size table", e))?;
        loaded.sizes = sizes;
    }
    let dynamic = loaded.sizes[0]
        .max(loaded.sizes[1])
        .max(loaded.sizes[3])
        .max(loaded.sizes[5])
        .max(loaded.sizes[7])
        .max(loaded.sizes[9])
        .max(loaded.sizes[11])
        .max(loaded.sizes[13]);
    if dynamic > max_smem {
        return Err(Error::unsupported(
            BackendKind::Cuda,
            module.name(),
            format!("needs {dynamic} bytes of shared memory per block, the device has {max_smem}"),
        ));
    }
    for &name in module.entry_points() {
        if name.ends_with("_state64") && loaded.sizes[8] == 0 {
            continue; // (V < 64: the module has no 64-column state pass)
        }
        if name.ends_with("_statewg") && loaded.sizes[9] == 0 {
            continue; // (not compiled for this arch or these head dims)
        }
        let fused_t = ["_fusedt", "_fusedtp", "_fusedtq", "_fusedtr"]
            .iter()
            .any(|s| name.ends_with(s));
        if fused_t && loaded.sizes[13] == 0 {
            continue; // (the fused T-form: gdn with K, V >= 64)
        }
        let t_form = ["_statewgt", "_intrat", "_intratov"];
        if t_form.iter().any(|s| name.ends_with(s)) && loaded.sizes[11] == 0 {
            continue; // (the T-form: gdn, where the wgmma pass is compiled)
        }
        let c = CString::new(name).map_err(|e| drv("kernel name", e))?;
        // SAFETY: `m` is the module loaded above.
        let f = unsafe { result::module::get_function(m, c) }
            .map_err(|e| drv(&format!("cuModuleGetFunction({name})"), e))?;
        if dynamic > 0 {
            // SAFETY: `f` is a valid function of the loaded module; prefill kernels use only
            // dynamic shared memory.
            unsafe {
                result::function::set_function_attribute(
                    f,
                    sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                    dynamic,
                )
            }
            .map_err(|e| drv("cuFuncSetAttribute", e))?;
        }
        loaded.funcs.push((name, f));
    }
    Ok(loaded)
}

/// Module cache per (module, defines) for one device (one arch).
pub type ModuleCache = std::sync::RwLock<HashMap<(Module, Defines), Arc<Loaded>>>;

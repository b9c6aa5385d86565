//! Device buffers and module loading: with the launches of `dispatch.rs`, the copies of
//! `host.rs` and the tensor maps of `tmap.rs`, the only code that calls the driver.

use crate::kernels::{cubin_cached, Defines, Module};
use crate::plan::PrefillSizes;
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
    /// Prefill modules: the shared bytes and threads of each entry point and the workspace
    /// block bytes (all 0 for the other modules).
    pub sizes: PrefillSizes,
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

/// Compiles (or reads from the cache folder) and loads one module build, raising its kernels'
/// dynamic shared-memory limit to the most any of them takes (an error above `max_smem`).
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
        sizes: PrefillSizes::default(),
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
        loaded.sizes = PrefillSizes::from_table(sizes);
    }
    let dynamic = i32::try_from(loaded.sizes.largest_smem()).unwrap_or(i32::MAX);
    if dynamic > max_smem {
        return Err(Error::unsupported(
            BackendKind::Cuda,
            module.name(),
            format!("needs {dynamic} bytes of shared memory per block, the device has {max_smem}"),
        ));
    }
    for &name in module.entry_points() {
        if !loaded.sizes.has_entry(name) {
            continue; // (not compiled for this arch, these head dims or this op)
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

//! Enqueuing a problem's kernels: [`CudaBackend::launch`] checks the call, takes the launches
//! [`plan::plan`] decides, encodes their tensor maps and launches them on the caller's stream.

use crate::device::{drv, Loaded};
use crate::kernels::Module;
use crate::launch::{self, DevicePtrs, Params, Workspace, WorkspaceLayout};
use crate::plan::{self, Launch};
use crate::tmap::MapArg;
use crate::CudaBackend;
use cudarc::driver::{result, sys};
use deltarule_core::{Error, FinalState, InitialState, Kernel, Problem, Result};
use std::sync::Arc;

impl CudaBackend {
    /// Enqueues `kernel` on `stream` for problem `p` with the tensors at `t` (see [`launch`] for
    /// the contract). No allocation, no compilation, no host synchronisation, no device reads.
    /// `max_seq`: the longest sequence's tokens where the caller knows them, else None (the
    /// launch plan's segment rule uses it; the workspace must have been reserved with the same
    /// value). A stale hint changes the plan, never the result.
    pub fn launch(
        &self,
        kernel: Kernel,
        p: &Problem,
        t: &DevicePtrs,
        stream: u64,
        ws: &mut Workspace,
        max_seq: Option<usize>,
    ) -> Result<()> {
        p.validate()?;
        p.validate_longest_sequence(max_seq)?;
        self.supports(kernel, p)?;
        self.enqueue(kernel, p, t, stream, ws, max_seq)
    }

    /// [`CudaBackend::launch`] for a problem already validated and supported.
    pub(crate) fn enqueue(
        &self,
        kernel: Kernel,
        p: &Problem,
        t: &DevicePtrs,
        stream: u64,
        ws: &mut Workspace,
        max_seq: Option<usize>,
    ) -> Result<()> {
        check_ptrs(p, t)?;
        let (main, varlen) = self.warm_modules(kernel, p)?;
        let sms = self.caps.multiprocessors.unwrap_or(132) as usize;
        let options = &self.options;
        let plan = plan::plan(kernel, p, &main.sizes, options, sms, t.o, max_seq)?;
        let layout =
            WorkspaceLayout::new(kernel, p, main.sizes.block_bytes, plan.segments.as_ref());
        if ws.bytes() < layout.total {
            return Err(Error::invalid(
                "workspace",
                format!("at least {} bytes (CudaBackend::reserve)", layout.total),
                format!("{} bytes", ws.bytes()),
            ));
        }
        self.bind()?;
        let base = ws.base();
        if let Some(seg) = &plan.segments {
            let stream = stream as sys::CUstream;
            let flags = options.flags.bits();
            return crate::segments::enqueue(
                &main, &varlen, &plan, seg, &layout, p, t, stream, base, flags,
            );
        }
        let mut prm = launch::params(p, t);
        prm.mode = options.flags.bits();
        prm.chunk_table = base + layout.chunk_table as u64;
        prm.chunk_offsets = base + layout.chunk_offsets as u64;
        prm.ck_offsets = base + layout.ck_offsets as u64;
        prm.work = base + layout.work as u64;
        // (the overlap's words are zeroed by the metadata kernel)
        if let Some(o) = plan.overlap {
            prm.sync = base + layout.sync as u64;
            prm.ov_tau = o.tau;
            prm.ov_free = o.free;
            prm.ov_trace = i32::from(options.overlap_trace);
        }
        let stream = stream as sys::CUstream;
        if plan.tables {
            launch_one(&varlen, &plan::TABLES, stream, &prm, None)?;
        }
        launch_one(&main, &plan.main, stream, &prm, None)?;
        let Some(state) = plan.state else {
            return Ok(());
        };
        let rows = launch::table_rows(p);
        let maps = match state.maps {
            Some(kind) => {
                let blocks = (rows * p.hv) as u64;
                let block = main.sizes.block_bytes as u64;
                Some(MapArg::encode(kind, p, t, prm.work, blocks, block)?)
            }
            None => None,
        };
        launch_one(&main, &state, stream, &prm, maps)?;
        if plan.overlap.is_some() && options.overlap_trace {
            let at = prm.sync + launch::trace_offset(rows * p.hv) as u64;
            print_overlap_trace(stream, at)?;
        }
        Ok(())
    }

    /// The loaded main module of (kernel, problem) and the metadata module, which
    /// [`CudaBackend::reserve`] loaded.
    fn warm_modules(&self, kernel: Kernel, p: &Problem) -> Result<(Arc<Loaded>, Arc<Loaded>)> {
        let defs = Self::defines(p);
        let cache = self
            .modules
            .read()
            .map_err(|_| drv("module cache", "poisoned lock"))?;
        let get = |m: Module| {
            cache.get(&(m, defs.for_module(m))).cloned().ok_or_else(|| {
                Error::invalid(
                    "workspace",
                    "a workspace reserved with CudaBackend::reserve for this kernel and problem",
                    "kernels not loaded yet",
                )
            })
        };
        Ok((get(launch::module_for(p.op, kernel))?, get(Module::Varlen)?))
    }
}

/// Checks that every pointer the problem needs is non-null, that q, k and v are 16-byte aligned
/// (the kernels load their rows with vector loads), and that an in-place final state is the
/// pool itself.
fn check_ptrs(p: &Problem, t: &DevicePtrs) -> Result<()> {
    let need = |name: &str, ptr: u64| {
        if ptr == 0 {
            Err(Error::invalid(name, "a device pointer", "0"))
        } else if matches!(name, "q" | "k" | "v") && !ptr.is_multiple_of(16) {
            Err(Error::invalid(
                name,
                "a 16-byte aligned device pointer",
                format!("{ptr:#x}"),
            ))
        } else {
            Ok(())
        }
    };
    need("q", t.q)?;
    need("k", t.k)?;
    need("v", t.v)?;
    need("g", t.g)?;
    need("beta", t.beta)?;
    need("cu_seqlens", t.cu_seqlens)?;
    need("o", t.o)?;
    if p.a_log {
        need("A_log", t.a_log)?;
    }
    if p.gate.in_kernel() {
        need("dt_bias", t.dt_bias)?;
    }
    if p.initial != InitialState::None {
        need("initial_state", t.state_in)?;
    }
    if matches!(p.initial, InitialState::Pool { .. }) {
        need("state_indices", t.state_indices)?;
    }
    if p.final_state != FinalState::None {
        need("final_state", t.state_out)?;
    }
    if p.final_state == FinalState::InPlace && t.state_out != t.state_in {
        return Err(Error::invalid(
            "final_state",
            "the pool pointer itself (in-place update)",
            "another pointer",
        ));
    }
    if p.checkpoint_every.is_some() {
        need("checkpoints", t.checkpoints)?;
    }
    Ok(())
}

/// Launches `l` from module `m` with `const Params` as its parameter, followed by `maps` where
/// given: the tensor maps of the wgmma state passes (a `__grid_constant__` parameter) or the
/// segmented pair's `SegArgs`. A
/// dependent launch (`l.dependent`: the T-form state pass, [`plan::overlap_plan`]) may start
/// while the intra kernel before it in the stream runs (once every intra CTA has triggered it),
/// and waits for that kernel's completion itself. An empty grid launches nothing.
pub(crate) fn launch_one(
    m: &Loaded,
    l: &Launch,
    stream: sys::CUstream,
    prm: &Params,
    maps: Option<MapArg>,
) -> Result<()> {
    let (grid, name) = (l.grid, l.entry);
    if grid.0 == 0 || grid.1 == 0 || grid.2 == 0 {
        return Ok(());
    }
    let f = m.func(name)?;
    let mut local = *prm;
    let mut tm = maps;
    let mut args = [
        &mut local as *mut Params as *mut std::ffi::c_void,
        tm.as_mut().map_or(std::ptr::null_mut(), MapArg::as_arg),
    ];
    let n = if tm.is_some() { 2 } else { 1 };
    // SAFETY: `f` is a kernel of a loaded module whose parameters are `const Params` (the
    // #[repr(C)] mirror of `struct Params`) and, for the wgmma state passes (maps given), `const
    // StateWgmmaMaps` / `const TformStateMaps` (two / five 128-byte tensor maps, mirrored by the
    // #[repr(C)] structs of tmap.rs, the variant matching the kernel launched, describing the
    // workspace blocks the intra kernel wrote earlier in the same stream and the q, k, v
    // inputs), for the segmented pair's kernels `const SegArgs` (segments.rs, addresses of the
    // workspace arrays of its layout); the pointers in `Params` were checked non-null where the problem needs them and
    // point to buffers of the documented sizes (launch contract); `smem` is within the limit
    // set on the function at load time; cuLaunchKernel copies the parameter block before
    // returning, so `local` and `tm` may go out of scope.
    if !l.dependent {
        return unsafe {
            result::launch_kernel(f, grid, (l.threads, 1, 1), l.smem, stream, &mut args[..n])
        }
        .map_err(|e| drv(&format!("launch {name}"), e));
    }
    // SAFETY: an all-zero CUlaunchAttribute is a valid value (a C struct of an enum whose 0 is
    // CU_LAUNCH_ATTRIBUTE_IGNORE and a union of plain data); its fields are set next.
    let mut attr: sys::CUlaunchAttribute = unsafe { std::mem::zeroed() };
    attr.id = sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    attr.value.programmaticStreamSerializationAllowed = 1;
    let cfg = sys::CUlaunchConfig {
        gridDimX: grid.0,
        gridDimY: grid.1,
        gridDimZ: grid.2,
        blockDimX: l.threads,
        blockDimY: 1,
        blockDimZ: 1,
        sharedMemBytes: l.smem,
        hStream: stream,
        attrs: &mut attr,
        numAttrs: 1,
    };
    // SAFETY: as above (the same kernels and parameter blocks); `cfg` and `attr` live across the
    // call, which copies them and the parameters before returning.
    unsafe { sys::cuLaunchKernelEx(&cfg, f, args.as_mut_ptr(), std::ptr::null_mut()) }
        .result()
        .map_err(|e| drv(&format!("launch {name}"), e))
}

/// `DELTARULE_CUDA_OVERLAP_TRACE=1` (diagnosis only; it synchronises the stream): reads the
/// overlapped pair's timeline at `at` back and prints a summary to stderr, times in us from the
/// first intra CTA's start.
fn print_overlap_trace(stream: sys::CUstream, at: u64) -> Result<()> {
    let mut rec = vec![0u64; (launch::TRACE_INTRA + launch::TRACE_STATE) * 4];
    // SAFETY: the stream's work is complete after the synchronisation; `at` is the timeline area
    // of the workspace (laid out by WorkspaceLayout with room for `rec`).
    unsafe {
        result::stream::synchronize(stream).map_err(|e| drv("trace: synchronize", e))?;
        result::memcpy_dtoh_sync(&mut rec[..], at).map_err(|e| drv("trace: read", e))?;
    }
    let (intra, state) = rec.split_at(launch::TRACE_INTRA * 4);
    let intra: Vec<&[u64]> = intra.chunks(4).filter(|r| r[1] > 0).collect();
    let state: Vec<&[u64]> = state.chunks(4).filter(|r| r[1] > 0).collect();
    let Some(t0) = intra.iter().map(|r| r[1]).min() else {
        eprintln!("overlap trace: no intra records");
        return Ok(());
    };
    let us = |t: u64| t.saturating_sub(t0) as f64 / 1e3;
    let stats = |mut v: Vec<f64>| -> String {
        if v.is_empty() {
            return "-".into();
        }
        v.sort_by(f64::total_cmp);
        format!(
            "{:.1} / {:.1} / {:.1}",
            v[0],
            v[v.len() / 2],
            v[v.len() - 1]
        )
    };
    let left: Vec<&&[u64]> = intra.iter().filter(|r| r[3] >> 32 != 0).collect();
    eprintln!(
        "overlap trace: intra {} CTAs (start {}, end {} us; items per CTA {}), {} left early (end {} us, {} SMs); state {} CTAs on {} SMs (start {}, end {} us, waiting for flags {} us)",
        intra.len(),
        stats(intra.iter().map(|r| us(r[1])).collect()),
        stats(intra.iter().map(|r| us(r[2])).collect()),
        stats(intra.iter().map(|r| (r[3] & 0xffff_ffff) as f64).collect()),
        left.len(),
        stats(left.iter().map(|r| us(r[2])).collect()),
        left.iter().map(|r| r[0]).collect::<std::collections::BTreeSet<_>>().len(),
        state.len(),
        state.iter().map(|r| r[0]).collect::<std::collections::BTreeSet<_>>().len(),
        stats(state.iter().map(|r| us(r[1])).collect()),
        stats(state.iter().map(|r| us(r[2])).collect()),
        stats(state.iter().map(|r| r[3] as f64 / 1e3).collect()),
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::check_ptrs;
    use crate::launch::{DevicePtrs, Workspace};
    use deltarule_core::{Error, Mode, Op, Problem};

    #[test]
    fn external_workspaces_are_checked_and_never_owned() {
        // SAFETY (all three): the workspaces are only inspected, never launched with.
        let w = unsafe { Workspace::external(0x1_0000, 4096) }.expect("aligned");
        assert!(w.is_external());
        assert_eq!((w.bytes(), w.base()), (4096, 0x1_0000));
        assert!(
            unsafe { Workspace::external(0x1_0010, 4096) }.is_err(),
            "not 256-byte aligned"
        );
        assert!(
            unsafe { Workspace::external(0, 4096) }.is_err(),
            "null with bytes"
        );
        let empty = unsafe { Workspace::external(0, 0) }.expect("an empty external workspace");
        assert_eq!(empty.bytes(), 0);
        assert!(!Workspace::new().is_external());
    }

    #[test]
    fn q_k_v_pointers_must_be_16_byte_aligned() {
        let p = Problem::new(Op::Gdn, Mode::Prefill, 1, 8192, 4, 8, 128, 128);
        let ptrs = DevicePtrs {
            q: 0x1000,
            k: 0x2000,
            v: 0x3000,
            g: 0x4004, // (only q, k and v are read with vector loads)
            beta: 0x5000,
            cu_seqlens: 0x6000,
            o: 0x7000,
            state_out: 0x8000,
            ..Default::default()
        };
        if let Err(e) = check_ptrs(&p, &ptrs) {
            panic!("aligned pointers rejected: {e}");
        }
        let bad = DevicePtrs { k: 0x2008, ..ptrs };
        match check_ptrs(&p, &bad) {
            Err(Error::InvalidArgument { field, got, .. }) => {
                assert_eq!(field, "k");
                assert_eq!(got, "0x2008");
            }
            other => panic!("expected an alignment error, got {other:?}"),
        }
    }
}

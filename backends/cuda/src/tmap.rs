//! TMA tensor maps of the wgmma state passes: encoded on the host per launch
//! (`cuTensorMapEncodeTiled`) and passed as a `__grid_constant__` kernel parameter after
//! `Params`.

use crate::device::drv;
use crate::launch::DevicePtrs;
use crate::plan::TensorMaps;
use crate::segments::SegArgs;
use cudarc::driver::sys;
use deltarule_core::{Problem, Result};

/// The two tensor maps of the wgmma state pass (`struct StateWgmmaMaps` in the kernels,
/// 64-byte aligned): the workspace blocks' W, q̃, k̃ and their P.
#[repr(C, align(64))]
#[derive(Clone, Copy)]
pub struct StateWgmmaMaps {
    pub wqk: sys::CUtensorMap,
    pub p: sys::CUtensorMap,
}

/// The five tensor maps of the T-form state pass (`struct TformStateMaps` in the kernels): the
/// inputs q, k, v, the output o and the workspace blocks' T_w, T_u, P.
#[repr(C, align(64))]
#[derive(Clone, Copy)]
pub struct TformStateMaps {
    pub q: sys::CUtensorMap,
    pub k: sys::CUtensorMap,
    pub v: sys::CUtensorMap,
    pub t: sys::CUtensorMap,
    pub o: sys::CUtensorMap,
}

/// The second kernel parameter of a launch: the tensor maps of a wgmma state pass, or the
/// segment arrays of the segmented pair's own kernels. (Lives on the stack for one launch;
/// boxing the larger variant would allocate per launch.)
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Copy)]
pub enum MapArg {
    StateWgmma(StateWgmmaMaps),
    Tform(TformStateMaps),
    Segments(SegArgs),
}

impl MapArg {
    /// The maps `kind` for problem `p` with tensors `t`, over `blocks` workspace blocks of
    /// `block` bytes at `work`.
    pub fn encode(
        kind: TensorMaps,
        p: &Problem,
        t: &DevicePtrs,
        work: u64,
        blocks: u64,
        block: u64,
    ) -> Result<MapArg> {
        Ok(match kind {
            TensorMaps::StateWgmma => {
                MapArg::StateWgmma(state_wgmma_maps(work, blocks, block, p.k)?)
            }
            TensorMaps::Tform => MapArg::Tform(tform_state_maps(p, t, work, blocks, block)?),
        })
    }

    /// The parameter's address for `cuLaunchKernel`'s argument array.
    pub fn as_arg(&mut self) -> *mut std::ffi::c_void {
        match self {
            MapArg::StateWgmma(m) => m as *mut StateWgmmaMaps as *mut std::ffi::c_void,
            MapArg::Tform(m) => m as *mut TformStateMaps as *mut std::ffi::c_void,
            MapArg::Segments(a) => a as *mut SegArgs as *mut std::ffi::c_void,
        }
    }

    /// The T-form maps with v over `zero` (64 zero rows of `p`'s [HV V], 16-bit): boxes at token
    /// 64 or later lie wholly past its end and read as zeros, so the pass sees v = 0 (the
    /// segments' transition pass). Other maps are returned unchanged.
    pub fn with_zero_v(self, p: &Problem, zero: u64) -> Result<MapArg> {
        Ok(match self {
            MapArg::Tform(mut m) => {
                let hvv = (p.hv * p.v) as u64;
                m.v = encode_map(zero, &[hvv, 64], &[hvv * 2], &[64, 64])?;
                MapArg::Tform(m)
            }
            other => other,
        })
    }
}

/// Encodes one tiled tensor map of 16-bit elements (`dims[0]` innermost, `strides` in bytes for
/// dims 1..) with boxes `boxes`, landing in the 128-byte swizzle. Host-only work.
fn encode_map(base: u64, dims: &[u64], strides: &[u64], boxes: &[u32]) -> Result<sys::CUtensorMap> {
    let rank = dims.len();
    if !(1..=5).contains(&rank) || strides.len() + 1 != rank || boxes.len() != rank {
        return Err(drv(
            "cuTensorMapEncodeTiled",
            format!(
                "rank {rank} with {} strides and {} box sizes",
                strides.len(),
                boxes.len()
            ),
        ));
    }
    let mut map = std::mem::MaybeUninit::<sys::CUtensorMap>::zeroed();
    let unit = [1u32; 5];
    // SAFETY: pure host-side encoding into `map` (128 bytes we own); the slices outlive the call
    // and hold `rank` (dims, boxes, unit) and `rank - 1` (strides) entries; the driver checks the
    // address, strides and boxes (16-byte aligned address and strides, box rows <= 256, a
    // 128-byte inner box for the 128-byte swizzle) and returns an error, never UB.
    unsafe {
        sys::cuTensorMapEncodeTiled(
            map.as_mut_ptr(),
            sys::CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_UINT16,
            rank as u32,
            base as *mut std::ffi::c_void,
            dims.as_ptr(),
            strides.as_ptr(),
            boxes.as_ptr(),
            unit.as_ptr(),
            sys::CUtensorMapInterleave::CU_TENSOR_MAP_INTERLEAVE_NONE,
            sys::CUtensorMapSwizzle::CU_TENSOR_MAP_SWIZZLE_128B,
            sys::CUtensorMapL2promotion::CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
            sys::CUtensorMapFloatOOBfill::CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
        )
        .result()
        .map_err(|e| drv("cuTensorMapEncodeTiled", e))?;
        Ok(map.assume_init())
    }
}

/// The T-form pass's maps: q and k as [T][H K], v and o as [T][HV V] (16-bit, boxes of 64
/// channels x 64 tokens; rows past T read as zeros; o's is used for 16-bit outputs only), and
/// the workspace blocks' T_w, T_u hi, T_u lo, P (`TformBlock`: four consecutive [64][72] arrays)
/// as [blocks][256][64] with boxes of 64 x 256.
fn tform_state_maps(
    p: &Problem,
    t: &DevicePtrs,
    work: u64,
    blocks: u64,
    block: u64,
) -> Result<TformStateMaps> {
    let tokens = p.tokens.max(1) as u64;
    let (hk, hvv) = ((p.h * p.k) as u64, (p.hv * p.v) as u64);
    Ok(TformStateMaps {
        q: encode_map(t.q, &[hk, tokens], &[hk * 2], &[64, 64])?,
        k: encode_map(t.k, &[hk, tokens], &[hk * 2], &[64, 64])?,
        v: encode_map(t.v, &[hvv, tokens], &[hvv * 2], &[64, 64])?,
        // (f32 o leaves by per-thread stores; the map is then a valid but unused copy of v's)
        o: if p.out_dtype.size() == 2 {
            encode_map(t.o, &[hvv, tokens], &[hvv * 2], &[64, 64])?
        } else {
            encode_map(t.v, &[hvv, tokens], &[hvv * 2], &[64, 64])?
        },
        t: encode_map(
            work,
            &[64, 256, blocks.max(1)],
            &[72 * 2, block],
            &[64, 256, 1],
        )?,
    })
}

/// The maps over the workspace blocks at `work` (`blocks` blocks of `block` bytes, the layout
/// `WorkspaceBlock` of the kernels, head dim `k`): `wqk` views W, q̃, k̃ (consecutive [64][k + 8]
/// arrays of 16-bit elements) as [blocks][192][k] with boxes of 64 x 192, `p` views P ([64][72],
/// after them) as [blocks][64][64] with boxes of 64 x 64; both land in shared memory in the
/// 128-byte swizzle the kernel's matrix descriptors name. Host-only work.
fn state_wgmma_maps(work: u64, blocks: u64, block: u64, k: usize) -> Result<StateWgmmaMaps> {
    let kp = (k + 8) as u64;
    let b = blocks.max(1);
    Ok(StateWgmmaMaps {
        wqk: encode_map(work, &[k as u64, 192, b], &[kp * 2, block], &[64, 192, 1])?,
        p: encode_map(
            work + 3 * 64 * kp * 2,
            &[64, 64, b],
            &[72 * 2, block],
            &[64, 64, 1],
        )?,
    })
}

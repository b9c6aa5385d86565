// kda_prefill.cu: Kimi Delta Attention chunked prefill entry points (per-channel decay, with the
// reference-point scheme of prefill_layout.cuh: off-diagonal sub-blocks on tensor cores). Layouts
// are in prefill_layout.cuh, the kernels in the other prefill_*.cuh files; every pointer and
// option is in Params.

// Classic fused chunked prefill. grid (HV, N), 256 threads, dynamic shared memory
// ChunkSmem<true>::TOTAL. One CTA per (sequence, value head) walks its chunks; nothing per chunk
// goes to device memory except checkpoints.
extern "C" __global__ void __launch_bounds__(NTH, 1) kda_prefill_fused(const Params p) {
    chunked_fused<true>(p);
}

// small-bh stage 1. grid (table_rows, HV), 256 threads, shared ChunkSmem<true, true>::TOTAL
// (~104 KB at K = V = 128: two CTAs per SM with the 128-register cap, no spills). Chunk-parallel
// intra products of chunk-table row blockIdx.x into the workspace (WorkspaceBlock); sentinel rows
// exit.
extern "C" __global__ void __launch_bounds__(NTH, 2) kda_prefill_intra(const Params p) {
    smallbh_intra<true>(p);
}

// small-bh stage 2 and its 16- and 64-column variants: grids, threads and shared memory as in
// gdn_prefill.cu.
extern "C" __global__ void __launch_bounds__(128, 1) kda_prefill_state32(const Params p) {
    smallbh_state<true, 32>(p);
}

extern "C" __global__ void __launch_bounds__(64, 1) kda_prefill_state16(const Params p) {
    smallbh_state<true, 16>(p);
}

#if HEAD_V >= 64
extern "C" __global__ void __launch_bounds__(256, 1) kda_prefill_state64(const Params p) {
    smallbh_state<true, 64>(p);
}
#endif

#if HAS_STATE_WG
// The wgmma state pass (sm_90a, K in {64, 128}, V >= 64): grid (V / 64, HV, N), 160 threads (one
// warpgroup and a fetch warp), shared WgmmaStateSmem::TOTAL; W, q̃, k̃ and P through the tensor
// maps in `tm`.
extern "C" __global__ void __launch_bounds__(160, 1)
    kda_prefill_state_wgmma(const Params p, const __grid_constant__ StateWgmmaMaps tm) {
    smallbh_state_wgmma<true>(p, tm);
}
#endif

// The size table the host reads (prefill_sizes.cuh, PREFILL_SIZES).
extern "C" __device__ int kda_prefill_sizes[14] = PREFILL_SIZES(true);

// gdn_prefill.cu: Gated DeltaNet chunked prefill entry points (scalar decay per token and value
// head). Layouts are in prefill_layout.cuh, the kernels in the other prefill_*.cuh files; every
// pointer and option is in Params.

// Classic fused chunked prefill. grid (HV, N), 256 threads, dynamic shared memory
// ChunkSmem<false>::TOTAL. One CTA per (sequence, value head) walks its chunks; nothing per chunk
// goes to device memory except checkpoints.
extern "C" __global__ void __launch_bounds__(NTH, 1) gdn_prefill_fused(const Params p) {
    chunked_fused<false>(p);
}

// small-bh stage 1. grid (table_rows, HV), 256 threads, shared ChunkSmem<false, true>::TOTAL.
// Chunk-parallel intra products of chunk-table row blockIdx.x into the workspace
// (WorkspaceBlock); sentinel rows exit.
extern "C" __global__ void __launch_bounds__(NTH, 2) gdn_prefill_intra(const Params p) {
    smallbh_intra<false>(p);
}

// small-bh stage 2 (the register-state pass, prefill_state.cuh). grid (V / 32, HV, N), 128
// threads (a state and an output warp per 16 V columns), shared StateSmem<32>::TOTAL. State pass
// of one V tile: o, final state, checkpoints.
extern "C" __global__ void __launch_bounds__(128, 1) gdn_prefill_state32(const Params p) {
    smallbh_state<false, 32>(p);
}

// The same with 16-column tiles (one warp pair, twice the CTAs) for few (sequence, value head)
// pairs, grid (V / 16, HV, N), 64 threads, shared StateSmem<16>::TOTAL.
extern "C" __global__ void __launch_bounds__(64, 1) gdn_prefill_state16(const Params p) {
    smallbh_state<false, 16>(p);
}

#if HEAD_V >= 64
// The same with 64-column tiles (four warp pairs, half the workspace reads per V column;
// benchmarks: DELTARULE_CUDA_STATE_BV=64), grid (V / 64, HV, N), 256 threads, shared
// StateSmem<64>::TOTAL.
extern "C" __global__ void __launch_bounds__(256, 1) gdn_prefill_state64(const Params p) {
    smallbh_state<false, 64>(p);
}
#endif

#if HAS_STATE_WG
// The wgmma state pass (sm_90a, K in {64, 128}, V >= 64): grid (V / 64, HV, N), 160 threads (one
// warpgroup and a fetch warp), shared WgmmaStateSmem::TOTAL; W, q̃, k̃ and P through the tensor
// maps in `tm`.
extern "C" __global__ void __launch_bounds__(160, 1)
    gdn_prefill_state_wgmma(const Params p, const __grid_constant__ StateWgmmaMaps tm) {
    smallbh_state_wgmma<false>(p, tm);
}
#endif

#if HAS_STATE_WG
// small-bh stage 1 of the T-form (16-bit inputs, with gdn_prefill_state_tform_wgmma): grid
// (table_rows, HV), or (table_rows, HV / group) with FLAG_GROUP_HEADS (a CTA writes the blocks of
// a GVA group's value heads in turn, q and k loaded once), 256 threads, shared
// ChunkSmem<false, true>::TOTAL; writes the TformBlock (T_w, T_u, P, factors); triggers the state
// pass's dependent launch (FLAG_DEPENDENT_LAUNCH).
extern "C" __global__ void __launch_bounds__(NTH, 2) gdn_prefill_intra_tform(const Params p) {
    smallbh_intra<false, true>(p);
}

// The same, persistent, for the overlapped pair (prefill_smallbh.cuh, smallbh_intra_overlap):
// grid (2 x SMs), 256 threads, shared ChunkSmem<false, true>::TOTAL + 16; triggers the state
// pass's programmatic launch.
extern "C" __global__ void __launch_bounds__(NTH, 2) gdn_prefill_intra_tform_overlap(const Params p) {
    smallbh_intra_overlap<false>(p);
}

// The T-form wgmma state pass (sm_90a, K in {64, 128}, V >= 64): grid (V / 64, HV, N), 160
// threads, shared TformWgmmaSmem::TOTAL; k, q, v rows and the TformBlocks through the tensor
// maps in `tm`.
extern "C" __global__ void __launch_bounds__(160, 1)
    gdn_prefill_state_tform_wgmma(const Params p, const __grid_constant__ TformStateMaps tm) {
    smallbh_state_tform_wgmma(p, tm);
}
#endif

#if HEAD_K >= 64 && HEAD_V >= 64
// The fused T-form (prefill_fused_tform.cuh; `chunked` where the final state is stored in f32):
// grid (HV, N), 256 threads, two CTAs per SM, shared FusedTformSmem::TOTAL. One CTA per
// (sequence, value head): the T-form intra stage into shared memory, then the state work per 64
// V columns in 32 x 32 warp quadrants.
extern "C" __global__ void __launch_bounds__(NTH, 2) gdn_prefill_fused_tform(const Params p) {
    fused_tform(p);
}
#endif

// The size table the host reads (prefill_sizes.cuh, PREFILL_SIZES).
extern "C" __device__ int gdn_prefill_sizes[14] = PREFILL_SIZES(false);

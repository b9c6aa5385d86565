// gdn_prefill.cu: Gated DeltaNet chunked prefill entry points (scalar decay per token and value
// head). Layouts and grids are documented in prefill.cuh; every pointer and option is in Params.

// Fused chunked prefill. grid (HV, N), 256 threads, dynamic shared memory Lay<false>::TOTAL.
// One CTA per (sequence, value head) walks its chunks; nothing per chunk goes to device memory
// except checkpoints.
extern "C" __global__ void __launch_bounds__(NTH, 1) gdn_prefill_fused(const Params p) {
    chunked_fused<false>(p);
}

// small-bh stage 1. grid (table_rows, HV), 256 threads, shared Lay<false, true>::TOTAL. Chunk-parallel
// intra products of chunk-table row blockIdx.x into the workspace (WLay); sentinel rows exit.
extern "C" __global__ void __launch_bounds__(NTH, 2) gdn_prefill_intra(const Params p) {
    smallbh_intra<false>(p);
}

// small-bh stage 2 (register-state pass, prefill.cuh). grid (V / 32, HV, N), 128 threads (a state
// and an output warp per 16 V columns), shared RLay<32>::TOTAL. State pass of one V tile: o, final state, checkpoints.
extern "C" __global__ void __launch_bounds__(128, 1) gdn_prefill_state(const Params p) {
    smallbh_state<false, 32>(p);
}

// The same with 16-column tiles (one warp pair, twice the CTAs) for few (sequence, value head)
// pairs, grid (V / 16, HV, N), 64 threads, shared RLay<16>::TOTAL.
extern "C" __global__ void __launch_bounds__(64, 1) gdn_prefill_state16(const Params p) {
    smallbh_state<false, 16>(p);
}

#if HEAD_V >= 64
// The same with 64-column tiles (four warp pairs, half the workspace reads per V column;
// benchmarks: DELTARULE_CUDA_STATE_BV=64), grid (V / 64, HV, N), 256 threads, shared RLay<64>::TOTAL.
extern "C" __global__ void __launch_bounds__(256, 1) gdn_prefill_state64(const Params p) {
    smallbh_state<false, 64>(p);
}
#endif

#if HAS_STATE_WG
// The wgmma variant (sm_90a, K in {64, 128}, V >= 64): grid (V / 64, HV, N), 160 threads (one
// warpgroup and a fetch warp), shared GLay::TOTAL; W, q̃, k̃ and P through the tensor maps in `tm`.
extern "C" __global__ void __launch_bounds__(160, 1) gdn_prefill_statewg(const Params p,
                                                                         const __grid_constant__ TmapPair tm) {
    smallbh_state_wg<false>(p, tm);
}
#endif

#if HAS_STATE_WG
// small-bh stage 1 of the T-form (16-bit inputs, with gdn_prefill_statewgt): grid (table_rows, HV),
// or (table_rows, HV / group) with MODE_INTRA_PAIR (a CTA writes the blocks of a GVA group's
// value heads in turn, q and k loaded once), 256 threads, shared Lay<false, true>::TOTAL; writes
// the TLay block (T_w, T_u, P, factors); triggers the state pass's dependent launch (MODE_PDL).
extern "C" __global__ void __launch_bounds__(NTH, 2) gdn_prefill_intrat(const Params p) {
    smallbh_intra<false, true>(p);
}

// The same, persistent, for the overlapped pair (prefill.cuh, smallbh_intra_ov): grid (2 x SMs),
// 256 threads, shared Lay<false, true>::TOTAL + 16; triggers the state pass's programmatic launch.
extern "C" __global__ void __launch_bounds__(NTH, 2) gdn_prefill_intratov(const Params p) {
    smallbh_intra_ov<false>(p);
}

// The T-form wgmma state pass (sm_90a, K in {64, 128}, V >= 64): grid (V / 64, HV, N), 160
// threads, shared GTLay::TOTAL; k, q, v rows and the TLay blocks through the tensor maps in `tm`.
extern "C" __global__ void __launch_bounds__(160, 1) gdn_prefill_statewgt(const Params p,
                                                                          const __grid_constant__ TmapT tm) {
    smallbh_state_wgt(p, tm);
}
#endif

#if HEAD_K >= 64 && HEAD_V >= 64
// The fused T-form (prefill.cuh, fused_t; `chunked` where the final state is stored in f32):
// grid (HV, N), 256 threads, two CTAs per SM, shared FTLay::TOTAL. One CTA per (sequence, value
// head): the T-form intra stage into shared memory, then the state work per 64 V columns.
extern "C" __global__ void __launch_bounds__(NTH, 2) gdn_prefill_fusedt(const Params p) {
    fused_t<false>(p);
}

// The same with persistent CTAs (grid (P, 1): two an SM), each walking items it = blockIdx.x + i P
// and prefetching the next one's inputs to L2 (MODE_FT_PF_*).
extern "C" __global__ void __launch_bounds__(NTH, 2) gdn_prefill_fusedtp(const Params p) {
    fused_t<true>(p);
}

// The same with the first state tile loaded during the intra stage (MODE_FT_PIPE; fused_t_item's PIPE).
extern "C" __global__ void __launch_bounds__(NTH, 2) gdn_prefill_fusedtq(const Params p) {
    fused_t<false, true>(p);
}

// The same with the state products in 32 x 32 quadrants (MODE_FT_QUAD; fused_t_item's QUAD).
extern "C" __global__ void __launch_bounds__(NTH, 2) gdn_prefill_fusedtr(const Params p) {
    fused_t<false, true, true>(p);
}
#endif

// The size table the host reads (prefill.cuh, PREFILL_SIZES).
extern "C" __device__ int gdn_prefill_sizes[14] = PREFILL_SIZES(false);

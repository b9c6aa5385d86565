// kda_prefill.cu: Kimi Delta Attention chunked prefill entry points (per-channel decay, with
// the reference-point scheme of prefill.cuh: off-diagonal sub-blocks on tensor cores). Layouts and grids are documented in prefill.cuh; every pointer and option is in Params.

// Fused chunked prefill. grid (HV, N), 256 threads, dynamic shared memory Lay<true>::TOTAL.
// One CTA per (sequence, value head) walks its chunks; nothing per chunk goes to device memory
// except checkpoints.
extern "C" __global__ void __launch_bounds__(NTH, 1) kda_prefill_fused(const Params p) {
    chunked_fused<true>(p);
}

// small-bh stage 1. grid (table_rows, HV), 256 threads, shared Lay<true, true>::TOTAL (~104 KB at
// K = V = 128: two CTAs per SM with the 128-register cap, no spills). Chunk-parallel
// intra products of chunk-table row blockIdx.x into the workspace (WLay); sentinel rows exit.
extern "C" __global__ void __launch_bounds__(NTH, 2) kda_prefill_intra(const Params p) {
    smallbh_intra<true>(p);
}

// small-bh stage 2 (register-state pass, prefill.cuh). grid (V / 32, HV, N), 128 threads (a state
// and an output warp per 16 V columns), shared RLay<32>::TOTAL. State pass of one V tile: o, final state, checkpoints.
extern "C" __global__ void __launch_bounds__(128, 1) kda_prefill_state(const Params p) {
    smallbh_state<true, 32>(p);
}

// The same with 16-column tiles (one warp pair, twice the CTAs) for few (sequence, value head)
// pairs, grid (V / 16, HV, N), 64 threads, shared RLay<16>::TOTAL.
extern "C" __global__ void __launch_bounds__(64, 1) kda_prefill_state16(const Params p) {
    smallbh_state<true, 16>(p);
}

#if HEAD_V >= 64
// The same with 64-column tiles (four warp pairs, half the workspace reads per V column;
// benchmarks: DELTARULE_CUDA_STATE_BV=64), grid (V / 64, HV, N), 256 threads, shared RLay<64>::TOTAL.
extern "C" __global__ void __launch_bounds__(256, 1) kda_prefill_state64(const Params p) {
    smallbh_state<true, 64>(p);
}
#endif

// Sizes the host reads once per loaded module (cuModuleGetGlobal): dynamic shared memory of the
// fused kernel, of the small-bh state kernel, the workspace block per (chunk, head), the dynamic
// shared memory of the small-bh intra kernel, the threads of the small-bh state kernel, the
// dynamic shared memory and threads of its 16-column variant, and of its 64-column variant (0
// where V < 64: no such kernel).
extern "C" __device__ int kda_prefill_sizes[9] = {Lay<true>::TOTAL, RLay<32>::TOTAL, WLay::BLOCK, Lay<true, true>::TOTAL, 128,
                                              RLay<16>::TOTAL, 64,
#if HEAD_V >= 64
                                              RLay<64>::TOTAL, 256};
#else
                                              0, 0};
#endif

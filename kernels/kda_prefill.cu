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

// small-bh stage 2. grid (V / 32, HV, N), SNW * 32 threads, shared SLay::TOTAL. State pass of one V
// tile: o, final state, checkpoints.
extern "C" __global__ void __launch_bounds__(SNW * 32, 1) kda_prefill_state(const Params p) {
    smallbh_state<true>(p);
}

// small-bh stage 2, 16-column variant for few (sequence, value head) pairs. grid (V / 16, HV, N),
// SNW16 * 32 threads, shared SLayT<16>::TOTAL.
extern "C" __global__ void __launch_bounds__(SNW16 * 32, 1) kda_prefill_state16(const Params p) {
    smallbh_state<true, SVT16, SNW16>(p);
}

// Sizes the host reads once per loaded module (cuModuleGetGlobal): dynamic shared memory of the
// fused kernel, of the small-bh state kernel, the workspace block per (chunk, head), and the
// dynamic shared memory of the small-bh intra kernel, the threads of the small-bh state kernel,
// and the dynamic shared memory and threads of its 16-column variant.
extern "C" __device__ int kda_prefill_sizes[7] = {Lay<true>::TOTAL, SLay::TOTAL, WLay::BLOCK, Lay<true, true>::TOTAL, SNW * 32,
                                              SLayT<SVT16>::TOTAL, SNW16 * 32};

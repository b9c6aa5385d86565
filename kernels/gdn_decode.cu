// gdn_decode.cu: Gated DeltaNet token recurrence (decode and speculative verify).

// Four forms of the same recurrence (decode.cuh), the same bits from each; the host picks one by
// mean tokens per sequence and work items (backends/cuda, DecodeForm::pick;
// DELTARULE_CUDA_DECODE_FORM forces one). The block-per-item forms: a 1-D grid over the (V tile,
// value head, sequence) items, 160 threads (4 state warps + 1 token warp), static shared memory
// (at most 4.3 KB), under three register budgets. One token moves the state and little else, and
// 96 registers, 4 blocks an SM, win (H100: 1.5 % faster than 5 blocks, 1.6 to 6 % faster than 6);
// with several tokens a sequence more resident blocks hide each token's input loads.
extern "C" __global__ void __launch_bounds__(NTH, 4) gdn_decode_block4(const Params p) {
    decode_block<false>(p);
}
// At most 80 registers, 5 blocks an SM.
extern "C" __global__ void __launch_bounds__(NTH, 5) gdn_decode_block5(const Params p) {
    decode_block<false>(p);
}
// At most 64 registers, 6 blocks an SM.
extern "C" __global__ void __launch_bounds__(NTH, 6) gdn_decode_block6(const Params p) {
    decode_block<false>(p);
}
// The persistent form (decode.cuh): a grid of 4 blocks an SM walking the items, the next item's
// state tile in flight into shared memory (32 KB a block at K = 128) during the current one (a
// 5-block form spills 600 bytes at K = 128).
extern "C" __global__ void __launch_bounds__(NTH, 4) gdn_decode_persistent(const Params p) {
    decode_persistent<false>(p);
}

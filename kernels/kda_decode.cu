// kda_decode.cu: Kimi Delta Attention token recurrence (decode and speculative verify).

// grid (V / 32, HV, N), 160 threads (4 state warps + 1 token warp), static shared memory (at most
// 4.3 KB); at most 64 registers so that 6 blocks share a multiprocessor. See decode.cuh.
extern "C" __global__ void __launch_bounds__(NTH, 6) kda_decode_recurrent(const Params p) {
    recurrent<true>(p);
}

// kda_decode.cu: Kimi Delta Attention token recurrence (decode and speculative verify).

// grid (V / 32, HV, N), 128 threads, static shared memory; at most 128 registers so that 4 blocks
// share a multiprocessor. See decode.cuh.
extern "C" __global__ void __launch_bounds__(DTH, 4) kda_decode_recurrent(const Params p) {
    recurrent<true>(p);
}

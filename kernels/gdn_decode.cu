// gdn_decode.cu: Gated DeltaNet token recurrence (decode and speculative verify).

// grid (V / 32, HV, N), 128 threads, static shared memory; at most 128 registers so that 4 blocks
// share a multiprocessor. See decode.cuh.
extern "C" __global__ void __launch_bounds__(DTH, 4) gdn_decode_recurrent(const Params p) {
    recurrent<false>(p);
}

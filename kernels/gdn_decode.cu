// gdn_decode.cu: Gated DeltaNet token recurrence (decode and speculative verify).

// grid (V / 32, HV, N), 128 threads, static shared memory. See decode.cuh.
extern "C" __global__ void __launch_bounds__(DTH) gdn_decode_recurrent(const Params p) {
    recurrent<false>(p);
}

// gdn_decode.cu: Gated DeltaNet token recurrence (decode and speculative verify).

// 1-D grid over the (V tile, value head, sequence) items, 160 threads (4 state warps + 1 token
// warp), static shared memory (at most 4.3 KB); at most 96 registers, 4 blocks an SM (session 26,
// H100: 1.5 % faster than 5 blocks, 1.6 to 6 % faster than 6). See decode.cuh.
extern "C" __global__ void __launch_bounds__(NTH, 4) gdn_decode_recurrent(const Params p) {
    recurrent<false>(p);
}
// The same with at most 64 registers, 6 blocks an SM (production until session 25; MODE_DEC_LB6),
// and with at most 80 registers, 5 blocks an SM (MODE_DEC_LB5): kept to compare on new devices.
extern "C" __global__ void __launch_bounds__(NTH, 6) gdn_decode_recurrent6(const Params p) {
    recurrent<false>(p);
}
extern "C" __global__ void __launch_bounds__(NTH, 5) gdn_decode_recurrent5(const Params p) {
    recurrent<false>(p);
}
// The persistent form (decode.cuh, MODE_DEC_PERSIST): a grid of 4 blocks an SM walking the items,
// the next item's state tile in flight into shared memory (32 KB a block at K = 128) during the
// current one (a 5-block form spilled 600 bytes at K = 128 and was not kept).
extern "C" __global__ void __launch_bounds__(NTH, 4) gdn_decode_persistent(const Params p) {
    persistent<false>(p);
}

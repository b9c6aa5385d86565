// mma.cuh: the prefill modules' tensor-core and copy primitives: mma.sync.m16n8k16 in the module's
// operand type (MMA_F16: f16, else bf16) and as bf16 hi + lo splits of f32 values, ldmatrix and
// movmatrix, warp-tiled products of operands in shared memory (mma_tiles, mma_tiles2, the 32 x 32
// quadrants of mma_quad), bulk copies and mbarriers (sm_90), L2 prefetches, named barriers, and the
// flag, timer and dependent-launch instructions of the small-bh pair.

#if MMA_F16
__device__ __forceinline__ u16 to_mma(float x) { return f32_to_f16(x); }
__device__ __forceinline__ float from_mma(u16 h) { return f16_to_f32(h); }
#define MMA_INSTR "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
#else
__device__ __forceinline__ u16 to_mma(float x) { return f32_to_bf16(x); }
__device__ __forceinline__ float from_mma(u16 h) { return bf16_to_f32(h); }
#define MMA_INSTR "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
#endif
// (x, y) as two mma-type halves of one 32-bit word, x in the low half (the lower address).
__device__ __forceinline__ u32 pack_mma(float x, float y) { return MMA_F16 ? pack_f16x2(x, y) : pack_bf16x2(x, y); }

__device__ __forceinline__ void mma16816(float (&c)[4], u32 a0, u32 a1, u32 a2, u32 a3, u32 b0,
                                         u32 b1) {
    asm volatile(MMA_INSTR "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// The same product on bf16 operands whatever MMA_F16 says (the f32 hi + lo splits below).
__device__ __forceinline__ void mma16816_bf16(float (&c)[4], const u32 (&a)[4], u32 b0, u32 b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
// (x, y) as bf16 hi + lo pairs: x = hi + lo to ~2^-16 relative.
__device__ __forceinline__ void split_bf16x2(float x, float y, u32& hi, u32& lo) {
    hi = pack_bf16x2(x, y);
    lo = pack_bf16x2(x - bf16_to_f32((u16)(hi & 0xffffu)), y - bf16_to_f32((u16)(hi >> 16)));
}
// c += A · B for a 16 x 16 A (row-major f32, row stride lda) and a 16 x 8 B (row-major [k][n]
// f32, row stride ldb), both in shared memory, as hi·hi + hi·lo + lo·hi bf16 products with f32
// accumulation (~2^-16 relative: f32-class for the T merges). Fragments are loaded per lane
// (m16n8k16 layout: A rows g, g + 8 and columns 2q, 2q + 1, 2q + 8, 2q + 9; B rows 2q, 2q + 1,
// 2q + 8, 2q + 9 and column g).
__device__ __forceinline__ void mma_f32x3(float (&c)[4], const float* A, int lda, const float* B, int ldb,
                                          int lane) {
    const int g = lane >> 2, q2 = 2 * (lane & 3);
    const float* a0 = A + g * lda + q2;
    const float* a1 = a0 + 8 * lda;
    const float* b = B + q2 * ldb + g;
    u32 ah[4], al[4], bh0, bl0, bh1, bl1;
    split_bf16x2(a0[0], a0[1], ah[0], al[0]);
    split_bf16x2(a1[0], a1[1], ah[1], al[1]);
    split_bf16x2(a0[8], a0[9], ah[2], al[2]);
    split_bf16x2(a1[8], a1[9], ah[3], al[3]);
    split_bf16x2(b[0], b[ldb], bh0, bl0);
    split_bf16x2(b[8 * ldb], b[9 * ldb], bh1, bl1);
    mma16816_bf16(c, al, bh0, bh1);
    mma16816_bf16(c, ah, bl0, bl1);
    mma16816_bf16(c, ah, bh0, bh1);
}

__device__ __forceinline__ u32 smem_addr(const void* p) {
    u32 r;
    asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(r) : "l"(p));
    return r;
}
// Bulk copies (sm_90 TMA, no tensor map) completing on an mbarrier: the small-bh state pass fetches
// a chunk's workspace block with two of them (~320 row-sized bulk copies a chunk measure 4x
// slower than per-thread cp.async: few large copies only).
__device__ __forceinline__ void mbar_init(u64* bar, u32 count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(count) : "memory");
}
// Makes the initialised barriers visible to the async proxy (call, then __syncthreads()).
__device__ __forceinline__ void mbar_init_fence() {
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
// Generic-proxy accesses of shared memory before this point are ordered before later bulk copies.
__device__ __forceinline__ void fence_proxy_async() {
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
__device__ __forceinline__ void mbar_arrive(u64* bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_addr(bar)) : "memory");
}
__device__ __forceinline__ void mbar_arrive_expect(u64* bar, u32 bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(bytes)
                 : "memory");
}
__device__ __forceinline__ void bulk_g2s(void* smem, const void* gmem, u32 bytes, u64* bar) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
                     smem_addr(smem)),
                 "l"(gmem), "r"(bytes), "r"(smem_addr(bar))
                 : "memory");
}
// Bulk copy shared -> global (async proxy; order the shared writes before it with
// fence_proxy_async and a barrier); commit the issued copies as one group; wait (issuing thread)
// until every committed group has read its shared source.
__device__ __forceinline__ void bulk_s2g(void* gmem, const void* smem, u32 bytes) {
    asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;\n" ::"l"(gmem), "r"(smem_addr(smem)),
                 "r"(bytes)
                 : "memory");
}
__device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
__device__ __forceinline__ void bulk_wait_read() { asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory"); }
// Prefetches [gmem, gmem + bytes) into L2 (bulk, asynchronous; 16-byte aligned, bytes % 16 == 0).
__device__ __forceinline__ void prefetch_l2(const void* gmem, u32 bytes) {
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"(gmem), "r"(bytes) : "memory");
}
// Waits until the phase of parity `parity` of `bar` has completed.
__device__ __forceinline__ void mbar_wait(u64* bar, u32 parity) {
    u32 done;
    do {
        asm volatile(
            "{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }\n"
            : "=r"(done)
            : "r"(smem_addr(bar)), "r"(parity)
            : "memory");
    } while (!done);
}
// (frsqrt: common.cuh)

// Output tiles of an M x N product shared by NW warps: warp w owns tiles [w*PER, (w+1)*PER), tile
// index = mt * NT + nt.
template <int M, int N, int NW>
struct Tiles {
    static constexpr int MT = M / 16, NT = N / 8, COUNT = MT * NT, PER = COUNT / NW;
    static_assert(M % 16 == 0 && N % 8 == 0, "tile shape");
    static_assert(COUNT % NW == 0, "tiles must divide among the warps");
};

// Row and column of accumulator element 0 of tile i of this warp; the four elements are
// (r, c), (r, c + 1), (r + 8, c), (r + 8, c + 1).
template <int M, int N, int NW>
__device__ __forceinline__ void tile_rc(int warp, int lane, int i, int& r, int& c) {
    typedef Tiles<M, N, NW> TL;
    const int idx = warp * TL::PER + i;
    r = (idx / TL::NT) * 16 + (lane >> 2);
    c = (idx % TL::NT) * 8 + (lane & 3) * 2;
}

// ldmatrix (PTX ISA, warp-level matrix load): lane 8j + r gives the shared address of row r of
// 8x8 matrix j (16 bytes, 16-byte aligned); register j of lane l receives matrix j's row l / 4,
// elements 2 (l % 4), +1 (.trans: column l / 4, rows 2 (l % 4), +1). .x2 reads lanes 0..15 only.
__device__ __forceinline__ void ldsm_x4(u32 addr, u32& r0, u32& r1, u32& r2, u32& r3) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                 : "r"(addr)
                 : "memory");
}
__device__ __forceinline__ void ldsm_x4_t(u32 addr, u32& r0, u32& r1, u32& r2, u32& r3) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                 : "r"(addr)
                 : "memory");
}
// movmatrix (PTX ISA): the transpose of the 8x8 b16 matrix of which lane l holds row l / 4,
// elements 2 (l % 4), +1 (the layout of one mma accumulator half, packed), in the same layout.
__device__ __forceinline__ u32 movm_t(u32 x) {
    u32 r;
    asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;\n" : "=r"(r) : "r"(x));
    return r;
}
__device__ __forceinline__ void ldsm_x2(u32 addr, u32& r0, u32& r1) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n"
                 : "=r"(r0), "=r"(r1)
                 : "r"(addr)
                 : "memory");
}
__device__ __forceinline__ void ldsm_x2_t(u32 addr, u32& r0, u32& r1) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];\n"
                 : "=r"(r0), "=r"(r1)
                 : "r"(addr)
                 : "memory");
}

// acc += A x B on tensor cores, operands in shared memory (bf16/f16, 16-byte aligned base; row
// strides lda, ldb in elements with ld % 16 == 8, i.e. an odd number of 16-byte units, so the 8
// rows of every 8x8 matrix hit distinct 16-byte bank groups), every fragment loaded by ldmatrix:
//   AT = false: A stored row-major [M][KK] (ldmatrix.x4); AT = true: A stored [KK][M] (.x4.trans);
//   BT = false: B stored [N][KK] (its transpose; ldmatrix); BT = true: B stored [KK][N] (.trans).
// mma.m16n8k16 fragments (PTX ISA, groupID g = lane / 4, t = lane % 4): A reg 0 (row g, k 2t..),
// reg 1 (row g + 8), reg 2 (row g, k + 8), reg 3 (row g + 8, k + 8); B reg 0 (k 2t.., col g),
// reg 1 (k + 8). So the A matrices are (rows 0-7, k 0-7), (rows 8-15, k 0-7), (rows 0-7, k 8-15),
// (rows 8-15, k 8-15), and one .x4 B load covers the warp's tile pair (nt, nt + 1): (n 0-7, k 0-7),
// (n 0-7, k 8-15), (n 8-15, k 0-7), (n 8-15, k 8-15) -> b0, b1 of nt, b0, b1 of nt + 1 (an odd
// tile count per warp, PER == 1, uses .x2 for its one tile).
template <int M, int N, int KK, int NW, bool AT = false, bool BT = false>
__device__ __forceinline__ void mma_tiles(float (&acc)[Tiles<M, N, NW>::PER][4], const u16* A,
                                          int lda, const u16* B, int ldb, int warp, int lane) {
    typedef Tiles<M, N, NW> TL;
    static_assert(TL::PER % TL::NT == 0 || TL::NT % TL::PER == 0, "tile rows of a warp");
    static_assert(TL::NT % 2 == 0, "tile pairs share a tile row");
    static_assert(KK % 16 == 0, "k steps");
    const int l7 = lane & 7, l8 = (lane >> 3) & 1, l16 = lane >> 4;
    // this lane's row address inside one 16 x 16 A block / one 16-deep B block (bytes)
    const u32 a_lane = AT ? (u32)(((l7 + 8 * l16) * lda + 8 * l8) * 2)
                          : (u32)(((l7 + 8 * l8) * lda + 8 * l16) * 2);
    const u32 b_lane = BT ? (u32)(((l7 + 8 * l8) * ldb + 8 * l16) * 2)
                          : (u32)(((l7 + 8 * l16) * ldb + 8 * l8) * 2);
    // (.x2: lanes 16..31 are not read; their address is kept inside the tile all the same)
    const u32 b_lane2 = BT ? (u32)((l7 + 8 * l8) * ldb * 2) : (u32)((l7 * ldb + 8 * l8) * 2);
    const u32 a0s = smem_addr(A) + a_lane, b0s = smem_addr(B);
#pragma unroll
    for (int ks = 0; ks < KK / 16; ++ks) {
        u32 a0 = 0, a1 = 0, a2 = 0, a3 = 0;
#pragma unroll
        for (int i = 0; i < TL::PER; i += (TL::PER % 2 == 0 ? 2 : 1)) {
            const int idx = warp * TL::PER + i;
            const int mt = idx / TL::NT, nt = idx % TL::NT;
            // the A fragment changes only when the tile row does (known at compile time: the
            // warp's first tile starts a row whenever PER is a multiple of NT)
            if ((TL::PER % TL::NT == 0) ? (i % TL::NT == 0) : (i == 0)) {
                const u32 off = AT ? (u32)((ks * 16 * lda + mt * 16) * 2)
                                   : (u32)((mt * 16 * lda + ks * 16) * 2);
                if constexpr (AT) ldsm_x4_t(a0s + off, a0, a1, a2, a3);
                else ldsm_x4(a0s + off, a0, a1, a2, a3);
            }
            const u32 boff = BT ? (u32)((ks * 16 * ldb + nt * 8) * 2)
                                : (u32)((nt * 8 * ldb + ks * 16) * 2);
            if constexpr (TL::PER % 2 == 0) {
                u32 b0, b1, b2, b3;
                if constexpr (BT) ldsm_x4_t(b0s + b_lane + boff, b0, b1, b2, b3);
                else ldsm_x4(b0s + b_lane + boff, b0, b1, b2, b3);
                mma16816(acc[i], a0, a1, a2, a3, b0, b1);
                mma16816(acc[i + 1], a0, a1, a2, a3, b2, b3);
            } else {
                u32 b0, b1;
                if constexpr (BT) ldsm_x2_t(b0s + b_lane2 + boff, b0, b1);
                else ldsm_x2(b0s + b_lane2 + boff, b0, b1);
                mma16816(acc[i], a0, a1, a2, a3, b0, b1);
            }
        }
    }
}

// acc1 += A1 x B and acc2 += A2 x B (A1, A2 with the same layout and stride; acc1 may be acc2:
// acc += (A1 + A2) x B, summed in that order per k step): mma_tiles twice with each B fragment
// loaded once (the warps' tiles are thin, so B's ldmatrix loads are most of a product's
// shared-memory traffic, and shared-load waits are most of the fused T-form's stall samples).
// LOW (the results are read on and below the diagonal only, row-major A, M == N): tile pairs
// whose columns all lie above the diagonal are left out (their accumulators keep their values),
// and the A loads of a warp with no pair left (of the 32 tiles of a 64 x 64 product, 12 lie above
// the diagonal).
template <int M, int N, int KK, int NW, bool AT = false, bool BT = false, bool LOW = false>
__device__ __forceinline__ void mma_tiles2(float (&acc1)[Tiles<M, N, NW>::PER][4],
                                           float (&acc2)[Tiles<M, N, NW>::PER][4], const u16* A1,
                                           const u16* A2, int lda, const u16* B, int ldb, int warp, int lane) {
    static_assert(!LOW || (!AT && M == N), "LOW: a square product, row-major A");
    if constexpr (LOW && Tiles<M, N, NW>::NT % Tiles<M, N, NW>::PER == 0) {
        // (a warp's tiles share one tile row; its first pair has the lowest columns)
        const int idx = warp * Tiles<M, N, NW>::PER;
        if (8 * (idx % Tiles<M, N, NW>::NT) > 16 * (idx / Tiles<M, N, NW>::NT) + 15) return;
    }
    typedef Tiles<M, N, NW> TL;
    static_assert(TL::PER % TL::NT == 0 || TL::NT % TL::PER == 0, "tile rows of a warp");
    static_assert(TL::NT % 2 == 0 && TL::PER % 2 == 0, "tile pairs share a tile row");
    static_assert(KK % 16 == 0, "k steps");
    const int l7 = lane & 7, l8 = (lane >> 3) & 1, l16 = lane >> 4;
    const u32 a_lane = AT ? (u32)(((l7 + 8 * l16) * lda + 8 * l8) * 2)
                          : (u32)(((l7 + 8 * l8) * lda + 8 * l16) * 2);
    const u32 b_lane = BT ? (u32)(((l7 + 8 * l8) * ldb + 8 * l16) * 2)
                          : (u32)(((l7 + 8 * l16) * ldb + 8 * l8) * 2);
    const u32 a1s = smem_addr(A1) + a_lane, a2s = smem_addr(A2) + a_lane, b0s = smem_addr(B) + b_lane;
#pragma unroll
    for (int ks = 0; ks < KK / 16; ++ks) {
        u32 x0 = 0, x1 = 0, x2 = 0, x3 = 0, y0 = 0, y1 = 0, y2 = 0, y3 = 0;
#pragma unroll
        for (int i = 0; i < TL::PER; i += 2) {
            const int idx = warp * TL::PER + i;
            const int mt = idx / TL::NT, nt = idx % TL::NT;
            if (LOW && 8 * nt > 16 * mt + 15) continue;  // (warp-uniform)
            if ((TL::PER % TL::NT == 0) ? (i % TL::NT == 0) : (i == 0)) {
                const u32 off = AT ? (u32)((ks * 16 * lda + mt * 16) * 2)
                                   : (u32)((mt * 16 * lda + ks * 16) * 2);
                if constexpr (AT) {
                    ldsm_x4_t(a1s + off, x0, x1, x2, x3);
                    ldsm_x4_t(a2s + off, y0, y1, y2, y3);
                } else {
                    ldsm_x4(a1s + off, x0, x1, x2, x3);
                    ldsm_x4(a2s + off, y0, y1, y2, y3);
                }
            }
            const u32 boff = BT ? (u32)((ks * 16 * ldb + nt * 8) * 2)
                                : (u32)((nt * 8 * ldb + ks * 16) * 2);
            u32 b0, b1, b2, b3;
            if constexpr (BT) ldsm_x4_t(b0s + boff, b0, b1, b2, b3);
            else ldsm_x4(b0s + boff, b0, b1, b2, b3);
            mma16816(acc1[i], x0, x1, x2, x3, b0, b1);
            mma16816(acc1[i + 1], x0, x1, x2, x3, b2, b3);
            mma16816(acc2[i], y0, y1, y2, y3, b0, b1);
            mma16816(acc2[i + 1], y0, y1, y2, y3, b2, b3);
        }
    }
}

template <int P>
__device__ __forceinline__ void zero_acc(float (&acc)[P][4]) {
#pragma unroll
    for (int i = 0; i < P; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.0f;
}

// Quadrant products (the fused T-form's state products): a group of four warps computes a 64 x 64
// product, warp w of the group (quad = w % 4) the 32 x 32 quadrant (rows 32 (quad / 2), columns
// 32 (quad % 2)) as 8 tiles of 16 x 8 (tile i: row tile i / 4, column tile i % 4). Per k step a
// warp loads 2 A and 2 B fragments (ldmatrix.x4) for 8 mma, against 3 for 4 in the 16 x 32 warp
// tiles of Tiles<64, 64, 8> (the fused T-form waits on shared-memory loads).
// Row and column of accumulator element 0 of quadrant tile i (elements as in tile_rc).
__device__ __forceinline__ void quad_rc(int quad, int lane, int i, int& r, int& c) {
    r = 32 * (quad >> 1) + 16 * (i >> 2) + (lane >> 2);
    c = 32 * (quad & 1) + 8 * (i & 3) + 2 * (lane & 3);
}
// acc += A1 x B (+ A2 x B where A2 is given, each B fragment loaded once): A row-major [64][KK]
// (stride lda), B stored [KK][64] (stride ldb, ldmatrix.trans); strides as in mma_tiles. LOW:
// A is lower triangular (zero above the diagonal: T_u, T_w, P), so the upper quadrants' k steps
// past their last row are left out (a quarter of the k steps of the four quadrants). AT: A
// stored transposed, [KK][M] (ldmatrix.trans), and `quad` up to M / 16 - 1 (rows 32 (quad / 2):
// the S update's 128 x 64 product over eight warps, mma_squad).
template <int KK, bool TWO = false, bool LOW = false, bool AT = false>
__device__ __forceinline__ void mma_quad(float (&acc)[8][4], const u16* A1, const u16* A2, int lda, const u16* B,
                                         int ldb, int quad, int lane) {
    static_assert(KK % 16 == 0, "k steps");
    static_assert(!LOW || (KK == 64 && !AT), "LOW: A is [64][64], row-major");
    const int l7 = lane & 7, l8 = (lane >> 3) & 1, l16 = lane >> 4;
    const int r0 = 32 * (quad >> 1), c0 = 32 * (quad & 1);
    const u32 a_lane = AT ? (u32)(((l7 + 8 * l16) * lda + r0 + 8 * l8) * 2)
                          : (u32)(((r0 + l7 + 8 * l8) * lda + 8 * l16) * 2);
    const u32 b_lane = (u32)(((l7 + 8 * l8) * ldb + c0 + 8 * l16) * 2);
    const u32 a1s = smem_addr(A1) + a_lane, b0s = smem_addr(B) + b_lane;
    const u32 a2s = TWO ? smem_addr(A2) + a_lane : 0u;
#pragma unroll
    for (int ks = 0; ks < KK / 16; ++ks) {
        if (LOW && 16 * ks > r0 + 31) break;  // (warp-uniform)
        u32 a[2][4], b[2][4];
        // (the two row tiles of A at as; their products with both B fragment pairs)
        auto ld_a = [&](u32 as) {
#pragma unroll
            for (int rt = 0; rt < 2; ++rt) {
                if constexpr (AT)
                    ldsm_x4_t(as + (u32)((16 * ks * lda + 16 * rt) * 2), a[rt][0], a[rt][1], a[rt][2], a[rt][3]);
                else
                    ldsm_x4(as + (u32)((16 * rt * lda + 16 * ks) * 2), a[rt][0], a[rt][1], a[rt][2], a[rt][3]);
            }
        };
        auto mmas = [&]() {
#pragma unroll
            for (int rt = 0; rt < 2; ++rt)
#pragma unroll
                for (int np = 0; np < 2; ++np) {
                    mma16816(acc[4 * rt + 2 * np], a[rt][0], a[rt][1], a[rt][2], a[rt][3], b[np][0], b[np][1]);
                    mma16816(acc[4 * rt + 2 * np + 1], a[rt][0], a[rt][1], a[rt][2], a[rt][3], b[np][2], b[np][3]);
                }
        };
        ld_a(a1s);
#pragma unroll
        for (int np = 0; np < 2; ++np)
            ldsm_x4_t(b0s + (u32)((16 * ks * ldb + 16 * np) * 2), b[np][0], b[np][1], b[np][2], b[np][3]);
        mmas();
        if constexpr (TWO) {
            ld_a(a2s);
            mmas();
        }
    }
}

// The fused T-form's S tile (KD = 128, 64 V columns) in quadrants (FT_SQ): warp w (of 8) holds
// the 32 x 32 quadrant at rows 32 (w / 2), columns 32 (w % 2) as 8 tiles of 16 x 8 (tile i: row
// tile i / 4, column tile i % 4), so the S update loads 2 A and 2 B fragments a k step for 8 mma
// (the 16 x 64 strips of Tiles<128, 64, 8>: 1 A and 4 B). At KD = 64 the S tile keeps the strips.
constexpr bool FT_SQ = KD == 128 && NTH == 256;
// Row and column of accumulator element 0 of tile i of this warp (elements as in tile_rc), in
// the quadrant layout (SQ) or in that of Tiles<KD, VT, NW>.
template <int VT, int NW, bool SQ>
__device__ __forceinline__ void s_rc(int warp, int lane, int i, int& r, int& c) {
    if constexpr (SQ) {
        r = 32 * (warp >> 1) + 16 * (i >> 2) + (lane >> 2);
        c = 32 * (warp & 1) + 8 * (i & 3) + 2 * (lane & 3);
    } else {
        tile_rc<KD, VT, NW>(warp, lane, i, r, c);
    }
}
// With the quadrant S tile (FT_SQ), the S tile, the V tile and the o tile of the fused T-form hold
// their V columns in an internal order: internal column 32 h + 8 ct + 2 q + e (h the half, ct the
// accumulator's column tile, q = lane % 4, e the pair element) is physical column 32 h + 8 q +
// 2 ct + e (cperm, an involution). Every product reads and writes internal columns, so only the
// accesses to device memory (S0, the state and checkpoint stores, V rows, o) map them; a lane's
// four column tiles of a row are then 8 consecutive physical columns: one 16-byte access (or
// two, f32) instead of four of 4 or 8 bytes, half the L1 wavefronts of the state loads and
// stores of the identity order.
__device__ __forceinline__ int cperm(int c) { return (c & ~31) | ((c & 6) << 2) | ((c >> 2) & 6) | (c & 1); }
// 8 consecutive elements from element i (a multiple of 8; the address 16-byte aligned): two
// 16-byte loads (f32) or one (16-bit types); and the store.
template <int DT>
__device__ __forceinline__ void ld8(const void* p, i64 i, float (&f)[8]) {
    if constexpr (DT == DT_F32) {
        const float4 a = *(const float4*)((const float*)p + i), b = *(const float4*)((const float*)p + i + 4);
        f[0] = a.x, f[1] = a.y, f[2] = a.z, f[3] = a.w, f[4] = b.x, f[5] = b.y, f[6] = b.z, f[7] = b.w;
    } else {
        const uint4 w = *(const uint4*)((const u16*)p + i);
        const u32 x[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const u16 lo = (u16)(x[j] & 0xffffu), hi = (u16)(x[j] >> 16);
            f[2 * j] = DT == DT_BF16 ? bf16_to_f32(lo) : f16_to_f32(lo);
            f[2 * j + 1] = DT == DT_BF16 ? bf16_to_f32(hi) : f16_to_f32(hi);
        }
    }
}
template <int DT>
__device__ __forceinline__ void st8(void* p, i64 i, const float (&f)[8]) {
    if constexpr (DT == DT_F32) {
        *(float4*)((float*)p + i) = make_float4(f[0], f[1], f[2], f[3]);
        *(float4*)((float*)p + i + 4) = make_float4(f[4], f[5], f[6], f[7]);
    } else {
        u32 x[4];
#pragma unroll
        for (int j = 0; j < 4; ++j)
            x[j] = DT == DT_BF16 ? pack_bf16x2(f[2 * j], f[2 * j + 1]) : pack_f16x2(f[2 * j], f[2 * j + 1]);
        *(uint4*)((u16*)p + i) = make_uint4(x[0], x[1], x[2], x[3]);
    }
}
__device__ __forceinline__ bool al16(const void* p) { return ((unsigned long long)p & 15) == 0; }
// acc += Aᵀ x B for this warp's quadrant (s_rc's SQ layout) of the 128 x 64 product: A stored
// [KK][128] (stride lda), B stored [KK][64] (stride ldb), both read with ldmatrix.trans; the same
// k steps in the same order per element as mma_tiles<128, 64, KK, 8, true, true>. (P is a
// parameter so that the call type-checks in the discarded branch of KD = 64 builds, whose S tile
// has 4 tiles a thread; only P = 8 has a body.)
template <int KK, int P>
__device__ __forceinline__ void mma_squad(float (&acc)[P][4], const u16* A, int lda, const u16* B, int ldb,
                                          int warp, int lane) {
    if constexpr (P == 8) mma_quad<KK, false, false, true>(acc, A, nullptr, lda, B, ldb, warp, lane);
}

// ---------------------------------------- flags, timers and dependent launch (the small-bh pair)
__device__ __forceinline__ int ld_acquire(const int* f) {
    int v;
    asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\n" : "=r"(v) : "l"(f) : "memory");
    return v;
}
__device__ __forceinline__ void st_release(int* f, int v) {
    asm volatile("st.release.gpu.global.b32 [%0], %1;\n" ::"l"(f), "r"(v) : "memory");
}
__device__ __forceinline__ void pdl_trigger() { asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory"); }
__device__ __forceinline__ void pdl_wait() { asm volatile("griddepcontrol.wait;\n" ::: "memory"); }
__device__ __forceinline__ u64 gtimer() {
    u64 t;
    asm volatile("mov.u64 %0, %%globaltimer;\n" : "=l"(t));
    return t;
}
__device__ __forceinline__ u32 sm_id() {
    u32 s;
    asm("mov.u32 %0, %%smid;\n" : "=r"(s));
    return s;
}
// Named barrier `id` over `n` threads: arrive (no wait) / arrive and wait. Shared-memory writes
// before the arrive are visible to the waiting threads after their wait.
__device__ __forceinline__ void nbar_arrive(int id, int n) {
    asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(n) : "memory");
}
__device__ __forceinline__ void nbar_sync(int id, int n) {
    asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(n) : "memory");
}

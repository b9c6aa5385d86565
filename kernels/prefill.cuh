// prefill.cuh: chunked prefill (SPEC.md section 5), shared by gdn_prefill.cu and kda_prefill.cu.
//
// Compile-time constants (NVRTC -D): HEAD_K, HEAD_V in {32, 64, 128}; MMA_F16 (0: bf16 tensor-core
// operands, used for bf16 and f32 inputs; 1: f16 operands for f16 inputs). Everything else (dtypes,
// gates, betas, layouts, pools, checkpoints) is a run-time field of `Params`.
//
// Stages (one chunk = 64 tokens of one sequence, one value head; rows past the chunk's length are
// zero-padded, with zero log decay, so they contribute nothing):
//   intra_chunk: Γ (cumsum, f32), A (strictly lower, β folded) and P (lower incl. diagonal, scale
//     folded), T = (I + A)^-1 in f32 (16x16 diagonal blocks by forward substitution, one warp each,
//     merged by doubling on tensor cores, 16 -> 32 -> 64 rows, T_21 = -T_22 A_21 T_11 with bf16
//     hi + lo operands), T' = T diag(β) split into bf16 hi + lo,
//     W = T' (K ⊙ e^Γ), U = T' V (f32), q̃ = scale Q ⊙ e^Γ, k̃ = K ⊙ e^{Γ_last - Γ}, e^{Γ_last}.
//     gdn: K Kᵀ and Q Kᵀ on tensor cores, then the scalar decay e^{Γ_i - Γ_j} selected for j <= i.
//     kda: off-diagonal 16x16 sub-blocks (row sub-chunk r > column sub-chunk c) on tensor cores
//     through the reference point Γ_n at the first token of the row sub-chunk (n = 16 r):
//     A_rc = (K_r ⊙ e^{Γ_r - Γ_n}) · (K_c ⊙ e^{Γ_n - Γ_c})ᵀ, both exponents <= 0; A with hi + lo
//     operands (hi·hi + hi·lo + lo·hi, ~f32), P = (Q_r ⊙ e^{Γ_r - Γ_n}) · (hi + lo of the K side)
//     (P is stored in the mma type anyway). Diagonal sub-blocks elementwise in f32 on CUDA cores
//     (exponent Γ_i - Γ_j, j <= i, never positive). X, q̃, k̃ and e^Γlast are made at the end of
//     step 2, so the f32 Γ [64][K] is dead before T is built (the small-bh intra fits two CTAs
//     per SM: see Lay<true, DIRECT>).
//   (the T-form, gdn with 16-bit inputs on sm_90a: intra_chunk<.., TONLY> stops after T and
//   writes T_w, T_u, P and per-token factors; smallbh_state_wgt builds W·S and U itself.)
//   state_chunk (fused kernel): V_new = U - W·S, O = q̃·S + P·V_new, S <- e^{Γ_last} ⊙ S + k̃ᵀ·V_new,
//     with the running state S in f32 registers (mma accumulator layout) and its bf16 copy in
//     shared memory. The small-bh state pass (smallbh_state) computes the same on transposes with
//     Sᵀ in registers as the A operand (see its comment).
//
// mma.sync.m16n8k16 operands are read from shared memory with ldmatrix (see mma_tiles): A stored
// row-major [M][K], B stored as [N][K] (its transpose); rows are padded by 8 elements (16 bytes)
// so the 8 rows of every 8x8 ldmatrix matrix hit distinct bank groups.

#ifndef HEAD_K
#error "HEAD_K must be defined (-DHEAD_K=...)"
#endif
#ifndef HEAD_V
#error "HEAD_V must be defined (-DHEAD_V=...)"
#endif
#ifndef MMA_F16
#define MMA_F16 0
#endif

// Diagnosis only (DELTARULE_CUDA_PROBE, 0 in production): bits leave parts out to place the time.
// Small-bh state pass: 1 its fetch after the prologue. Fused state pass: 2 the W·S and q̃·S
// products, 4 the S update product.
// Intra: 8 the T solve, 32 step 2 (A and P; gdn), 64 step 5's products,
// 128 the small-bh bulk copies of the block to the workspace; 256 a clock64 timeline of sampled
// chunks (printf); 512 the former f32 CUDA-core T merge instead of the tensor-core doubling.
// T-form state pass: 2048 U from T_u's hi part only; 4096 o by per-thread stores for every chunk.
// mma_tiles2 (two products sharing B) as two mma_tiles: 131072. The zero upper parts of
// triangular operands computed as well (the products before session 20): 262144 step 2's A, P
// (mma_tiles2's LOW), 524288 the fused T-form's T_u, T_w and P products (mma_quad's LOW);
// 1048576 the fused T-form's S tile in Tiles<128, 64, 8> strips, not quadrants (FT_SQ).
// T solve (diagnosis, session 20): 4194304 mma_f32x3 with a second accumulator, 8388608 no
// doubling (diagonal blocks only; results wrong).
// Fused T-form (fused_t): 256 a clock64 timeline too (TLT lines), 8192 no intra stage (the state
// part on stale shared memory), 16384 no state part; its PIPE form (`fusedtq`): 32768 without the
// early loads of the first tile, 65536 with V loaded and converted as without PIPE.
#ifndef PROBE
#define PROBE 0
#endif
constexpr int KD = HEAD_K;
constexpr int VD = HEAD_V;
constexpr int CH = 64;        // chunk
constexpr int KP = KD + 8;    // padded row of [64][KD] operands (elements)
constexpr int CP = CH + 8;    // padded row of [*][64] operands
constexpr int VP = VD + 8;    // padded row of [*][VD] operands
constexpr int NTH = 256;      // threads of the intra stage and of the fused kernel
constexpr int MSB = 32 * 33 * 4;  // bytes of the T merge scratch (a [32][33] f32 block)
static_assert(KD == 32 || KD == 64 || KD == 128, "HEAD_K must be 32, 64 or 128");
static_assert(VD == 32 || VD == 64 || VD == 128, "HEAD_V must be 32, 64 or 128");

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
// 2q + 8, 2q + 9 and column g). (Diagnosis, PROBE 4194304: the two small products into a second
// accumulator, added at the end: two dependent mma a call, not three.)
constexpr bool F32X3_SPLIT = (PROBE & 4194304) != 0;
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
    if constexpr (F32X3_SPLIT) {
        float t[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        mma16816_bf16(t, al, bh0, bh1);
        mma16816_bf16(c, ah, bh0, bh1);
        mma16816_bf16(t, ah, bl0, bl1);
#pragma unroll
        for (int e = 0; e < 4; ++e) c[e] += t[e];
    } else {
        mma16816_bf16(c, al, bh0, bh1);
        mma16816_bf16(c, ah, bl0, bl1);
        mma16816_bf16(c, ah, bh0, bh1);
    }
}

__device__ __forceinline__ u32 smem_addr(const void* p) {
    u32 r;
    asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(r) : "l"(p));
    return r;
}
// Bulk copies (sm_90 TMA, no tensor map) completing on an mbarrier: the small-bh state pass fetches
// a chunk's workspace block with two of them (session 2 measured ~320 row-sized bulk copies per
// chunk 4x slower than per-thread cp.async: few large copies only).
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
// acc += (A1 + A2) x B, summed in that order per k step): mma_tiles twice with each B fragment loaded once (the warps' tiles are thin, so B's ldmatrix loads are most of
// a product's shared-memory traffic; session 17: the fused T-form's stall samples were mostly
// shared-load waits). MMA_SPLIT (diagnosis, PROBE bit 131072): two mma_tiles instead.
constexpr bool MMA_SPLIT = (PROBE & 131072) != 0;
// LOW (the results are read on and below the diagonal only, row-major A, M == N): tile pairs
// whose columns all lie above the diagonal are left out (their accumulators keep their values),
// and the A loads of a warp with no pair left (session 20: of the 32 tiles of a 64 x 64 product,
// 12 lie above the diagonal).
constexpr bool NO_TRI_AP = (PROBE & 262144) != 0;
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
    if constexpr (MMA_SPLIT) {
        mma_tiles<M, N, KK, NW, AT, BT>(acc1, A1, lda, B, ldb, warp, lane);
        mma_tiles<M, N, KK, NW, AT, BT>(acc2, A2, lda, B, ldb, warp, lane);
        return;
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

// Quadrant products (the fused T-form's QUAD form): a group of four warps computes a 64 x 64
// product, warp w of the group (quad = w % 4) the 32 x 32 quadrant (rows 32 (quad / 2), columns
// 32 (quad % 2)) as 8 tiles of 16 x 8 (tile i: row tile i / 4, column tile i % 4). Per k step a
// warp loads 2 A and 2 B fragments (ldmatrix.x4) for 8 mma, against 3 for 4 in the 16 x 32 warp
// tiles of Tiles<64, 64, 8> (session 17: the fused T-form waits on shared-memory loads).
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
constexpr bool NO_TRI_QUAD = (PROBE & 524288) != 0;
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

// The fused T-form's S tile (KD = 128, 64 V columns) in quadrants (`FT_SQ`, session 20): warp w
// (of 8) holds the 32 x 32 quadrant at rows 32 (w / 2), columns 32 (w % 2) as 8 tiles of 16 x 8
// (tile i: row tile i / 4, column tile i % 4), so the S update loads 2 A and 2 B fragments a k
// step for 8 mma (the 16 x 64 strips of Tiles<128, 64, 8>: 1 A and 4 B). PROBE 1048576: the
// strips again (session 19's layout).
constexpr bool FT_SQ = KD == 128 && NTH == 256 && (PROBE & 1048576) == 0;
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
// CPERM (session 21): the quadrant S tile, the V tile and the o tile of the fused T-form hold
// their V columns in an internal order: internal column 32 h + 8 ct + 2 q + e (h the half, ct the
// accumulator's column tile, q = lane % 4, e the pair element) is physical column 32 h + 8 q +
// 2 ct + e (cperm, an involution). Every product reads and writes internal columns, so only the
// accesses to device memory (S0, the state and checkpoint stores, V rows, o) map them; a lane's
// four column tiles of a row are then 8 consecutive physical columns: one 16-byte access (or
// two, f32) where there were four of 4 or 8 bytes, half the L1 wavefronts of the state loads
// and stores. PROBE 1024: the identity order (session 20's accesses).
constexpr bool FT_CPERM = FT_SQ && (PROBE & 1024) == 0;
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

__host__ __device__ constexpr int align16(int x) { return (x + 15) / 16 * 16; }
__host__ __device__ constexpr int imax(int a, int b) { return a > b ? a : b; }
__device__ __forceinline__ int imin(int a, int b) { return a < b ? a : b; }

// Shared-memory arena of the intra stage (byte offsets). The first part (W, q̃, k̃, P, U, e^Γlast)
// is what the state pass reads; the scratch after it is reused: Ks becomes W, Qs becomes q̃ (in
// place), X/Vb overwrite A/T once T' is built, and in the fused kernel the state pass puts its
// bf16 state copy Sb [KD][VP] and V_new [64][VP] over the scratch. Every mma operand is stored
// token- or channel-major exactly as produced (no transposed stores): the products that need the
// other orientation read it with ldmatrix.trans (mma_tiles AT/BT).
template <bool KDA, bool DIRECT = false>
struct Lay {
    static constexpr int UST = VD + 8;                      // row of U (f32; float2 reads of a
                                                            // half-warp hit distinct banks)
    static constexpr int WM = 0;                            // Ks -> W   [64][KP] u16
    static constexpr int QD = WM + 64 * KP * 2;             // Qs -> q̃   [64][KP] u16
    static constexpr int KDT = QD + 64 * KP * 2;            // k̃         [64][KP] u16
    static constexpr int PM = KDT + 64 * KP * 2;            // P         [64][CP] u16
    static constexpr int UF = PM + (DIRECT ? 0 : 64 * CP * 2);  // U      [64][UST] f32
    static constexpr int GL = UF + (DIRECT ? 0 : 64 * UST * 4); // e^Γlast [KD] f32
    // (DIRECT: P goes from registers straight to the small-bh workspace; U is staged over X and
    // V at the end, see USG.)
    static constexpr int SCR = align16(GL + KD * 4);        // scratch
    static constexpr int GK = KDA ? KD : 1;
    static constexpr int G = SCR;                           // Γ         [64][GK] f32
    static constexpr int BETA = align16(G + 64 * GK * 4);   // β         [64] f32
    static constexpr int AF = BETA + 64 * 4;                // A         [64][65] f32
    static constexpr int TF = AF + 64 * 65 * 4;             // T         [64][65] f32
    static constexpr int TMP = TF + 64 * 65 * 4;            // merge     [32][33] f32 (MSB)
    static constexpr int DS = 16;                           // kda channel slice
    static constexpr int DSP = DS + 1;                      // padded slice row (bank-conflict free)
    // (kda uses the specialisation Lay<true, DIRECT> below: the KDA-dependent members here are
    // unused; kept so gdn's offsets do not move)
    static constexpr int SL = TMP + 3 * 16 * 17 * 4;        // kda: KT, QT [64][DSP], KH [96][DSP],
                                                            //      raw k, q, Γ slices [64][DSP]
    static constexpr int SL_END = SL + (KDA ? 416 * DSP * 4 : 0);
    static constexpr int XT = AF;                           // X = K ⊙ e^Γ [64][KP] u16 (after T')
    static constexpr int VBT = XT + 64 * KP * 2;            // V         [64][VP] u16
    static constexpr int TB = align16(imax(SL_END, VBT + 64 * VP * 2)); // T' hi, lo [64][CP] u16
    static constexpr int SB = SCR;                          // fused state pass: S bf16 [KD][VP]
    static constexpr int VNT = SB + KD * VP * 2;            //                   V_new  [64][VP]
    // T-form intra (gdn, TONLY): the per-token factors of the state pass and e^Γlast (TLay::FACB
    // bytes), built in step 3
    static constexpr int FAC = TB + 2 * 64 * CP * 2;
    // T-form intra: the stash, [rq, rk] [2][64] f32 (the rows' L2-norm reciprocals from step 1a,
    // read by step 3 and by the next head of a GVA group that reuses the chunk's q, k rows: see
    // PAIR_REUSE), then two slots of that next head's raw β and gate [2][2][64] f32
    static constexpr int STASH = align16(imax(FAC + 528, VNT + 64 * VP * 2));
    static constexpr int STASH_BYTES = 6 * 64 * 4 + 48;  // (+ the fused T-form's item, FtItem)
    static constexpr int TOTAL = STASH + STASH_BYTES;
    static_assert(TOTAL <= 232448, "shared memory of the intra stage");
    // (the merge scratch may run into T', which is built after the merges)
    static_assert(TMP + MSB <= TB + 2 * 64 * CP * 2 && TB >= TMP, "merge scratch");
    // DIRECT: U is staged over X and V (dead after step 5's products) when they are adjacent and
    // large enough, then leaves with one bulk copy (otherwise with per-thread stores)
    static constexpr int USG = XT;
    static constexpr bool USTAGE = DIRECT && VBT == XT + 64 * KP * 2 && KP + VP >= 2 * VD;
};

// kda arena. The head (W, q̃, k̃, P, U, e^Γlast) is laid out as in the primary template; the scratch
// is reused by lifetime (steps of intra_chunk):
//   BETA (1-5) | G: Γ log2(e) [64][KD] f32 (1-2), then T [64][65] f32 and the merge scratch (3) |
//   SLF: f32 k, q, Γ·log2(e) slices [3][64][DSP] (2), then A [64][65] f32 (2-3), then T' hi, lo
//   [2][64][CP] (3-5).
// SLT: the tensor-core operands of one 16-channel slice (step 2), [336][TSP] mma type:
//   KTh, KTl (hi + lo of K_i e^{Γ_i - Γ_n}, rows i = 16..63), QT (Q_i e^{Γ_i - Γ_n}), KHh, KHl
//   (hi + lo of K_j e^{Γ_n - Γ_j} for each reference n = 16, 32, 48 and j < n: 16 + 32 + 48 rows).
// DIRECT (small-bh intra, ~104 KB at K = V = 128, two CTAs per SM): q̃ and k̃ go straight to the
// workspace, so X = K e^Γ takes the Qs slot (written in place), and the k̃ slot holds SLT in step 2
// and V in steps 4-5 (when they fit; otherwise they get their own slot after the scratch).
// Fused (!DIRECT): q̃ in place over Qs, k̃ in its slot, X, V and SLT in their own slots.
template <bool DIRECT>
struct Lay<true, DIRECT> {
    static constexpr int UST = VD + 8;
    static constexpr int WM = 0;                                // Ks -> W   [64][KP] u16
    static constexpr int QD = WM + 64 * KP * 2;                 // Qs -> q̃ (fused) / X (DIRECT)
    static constexpr int KDT = QD + 64 * KP * 2;                // k̃ (fused) / SLT, V (DIRECT)
    static constexpr int PM = KDT + 64 * KP * 2;                // P         [64][CP] u16
    static constexpr int UF = PM + (DIRECT ? 0 : 64 * CP * 2);  // U         [64][UST] f32
    static constexpr int GL = UF + (DIRECT ? 0 : 64 * UST * 4); // e^Γlast   [KD] f32
    static constexpr int SCR = align16(GL + KD * 4);
    static constexpr int DS = 16;                               // channel slice (one mma k step)
    static constexpr int DSP = DS + 1;                          // f32 slice row (conflict-free)
    static constexpr int TSP = DS + 8;                          // SLT row (ldmatrix conflict-free)
    static constexpr int SLT_ROWS = 48 * 3 + 96 * 2;
    static constexpr int SLT_BYTES = SLT_ROWS * TSP * 2;
    static constexpr int BETA = SCR;                            // β [64] f32
    static constexpr int G = BETA + 256;                        // Γ log2(e) [64][KD] f32 (log2 units)
    static constexpr int TF = G;                                // T [64][65] f32
    static constexpr int TMP = TF + 64 * 65 * 4;                // merge [32][33] f32 (MSB)
    static constexpr int SLF = G + imax(64 * KD * 4, 64 * 65 * 4 + MSB);
    static constexpr int AF = SLF;                              // A [64][65] f32
    static constexpr int TB = SLF;                              // T' hi, lo [64][CP] u16
    static constexpr int AFTER = SLF + imax(imax(3 * 64 * DSP * 4, 64 * 65 * 4), 2 * 64 * CP * 2);
    static constexpr bool SLT_IN_KDT = DIRECT && SLT_BYTES <= 64 * KP * 2;
    static constexpr bool V_IN_KDT = DIRECT && VD <= KD;
    static constexpr int XT = DIRECT ? QD : AFTER;              // X = K ⊙ e^Γ [64][KP] u16
    static constexpr int VBT = V_IN_KDT ? KDT : AFTER + (DIRECT ? 0 : 64 * KP * 2); // V [64][VP]
    static constexpr int SLT = SLT_IN_KDT ? KDT : AFTER;        // (step 2 only)
    static constexpr int END = imax(imax(AFTER + (DIRECT ? 0 : 64 * KP * 2),
                                         V_IN_KDT ? 0 : VBT + 64 * VP * 2),
                                    SLT_IN_KDT ? 0 : SLT + SLT_BYTES);
    static constexpr int SB = SCR;                              // fused state pass: S bf16 [KD][VP]
    static constexpr int VNT = SB + KD * VP * 2;                //                   V_new  [64][VP]
    static constexpr int TOTAL = DIRECT ? END : imax(END, VNT + 64 * VP * 2);
    static_assert(TOTAL <= 232448, "shared memory of the kda intra stage");
    static_assert(TMP + MSB <= SLF, "T and the merge scratch fit over Γ");
    static constexpr int USG = XT;  // (as in the primary template)
    static constexpr bool USTAGE = DIRECT && VBT == XT + 64 * KP * 2 && KP + VP >= 2 * VD;
};

// Workspace block of one (chunk row, value head), written by the intra kernel. The first part
// (W, q̃, k̃, P, e^Γlast) is stored exactly as the state pass holds it in shared memory (rows padded
// to KP / CP elements for conflict-free ldmatrix), so the state pass fetches it with one bulk copy.
// U follows as Uᵀ in mma-fragment order, VD / 16 panels of 16 V columns: panel p, token tile nt
// (8 tokens), lane l = 4 g + q, element e = 2 h + j holds U[t = 8 nt + 2 q + j][v = 16 p + g + 8 h]
// (the accumulator element e of lane l in a 16 x 8 tile of V_newᵀ), so a V tile's U is contiguous
// and each lane reads its four values with one 16-byte load.
struct WLay {
    static constexpr int W = 0;                  // [64][KP] mma type
    static constexpr int Q = W + 64 * KP * 2;    // [64][KP]
    static constexpr int KT = Q + 64 * KP * 2;   // k̃ [64][KP]
    static constexpr int P = KT + 64 * KP * 2;   // [64][CP]
    static constexpr int GL = P + 64 * CP * 2;   // [KD] f32
    static constexpr int MAIN = align16(GL + KD * 4);
    static constexpr int U = MAIN;               // Uᵀ fragments [VD / 16][8][32][4] f32
    static constexpr int BLOCK = U + 64 * VD * 4;
};
// The workspace block of the T-form (gdn with 16-bit inputs and the wgmma state pass: the
// intra kernel `{op}_prefill_intrat` writes it, `{op}_prefill_statewgt` reads it). The state pass
// computes W·S and U itself from the inputs' k and v rows (see smallbh_state_wgt), so the block
// holds only the chunk's matrices and per-token factors, ~37 KB instead of WLay's ~92 KB at
// K = V = 128: T_w = T diag(β e^Γ / |k|) (hi), T_u = T diag(β) (hi, lo), P, each [64][CP] in the
// mma type (one tensor map views the four as [256][64]), then FQ = scale e^Γ / |q| [64], FK =
// e^{Γlast - Γ} / |k| [64] and e^Γlast (f32; zero past the chunk's length).
struct TLay {
    static constexpr int TWH = 0;
    static constexpr int TUH = TWH + 64 * CP * 2;
    static constexpr int TUL = TUH + 64 * CP * 2;
    static constexpr int P = TUL + 64 * CP * 2;
    static constexpr int FAC = P + 64 * CP * 2;
    static constexpr int FACB = 528;  // FQ [64], FK [64], e^Γlast, pad to 16 bytes
    static constexpr int END = FAC + FACB;
    // (the T-form exists for K, V >= 64 only: see gdn_prefill.cu)
    static_assert(END <= WLay::BLOCK || KD < 64 || VD < 64, "the T-form block fits the workspace block");
};
// The fused T-form (gdn, `{op}_prefill_fusedt`, K and V >= 64): one CTA per (sequence, value
// head) runs the T-form intra stage (intra_chunk<false, true, true, true>: the block stays in
// shared memory, q and k rows kept L2-normalised, so T_w = T diag(β e^Γ), FQ = scale e^Γ, FK =
// e^{Γlast - Γ}), then the chunk's state work over 64-column V tiles on mma.sync (fused_t).
// The intra arena (Lay<false, true>) keeps Ks (normalised k), Qs (normalised q), P (k̃ slot),
// T_u hi, lo (TB) and the factors (FAC); T_w goes over the dead f32 A (AF). The state part uses
// the dead T scratch for Sb (bf16 S tile [KD][VTP], then -K·S and the FK-scaled V_new over it)
// and one more [64][VTP] tile XV (the V tile, then V_new) where it fits.
struct FTLay {
    typedef Lay<false, true> LY;
    static constexpr int VT = 64, VTP = VT + 8, TILE = 64 * VTP * 2;
    static constexpr int TW = LY::AF;                            // T_w [64][CP]
    static constexpr int SR = align16(TW + 64 * CP * 2);         // Sb [KD][VTP] | V, Vs [64][VTP]
    static constexpr int SRB = imax(KD * VTP * 2, 2 * TILE);
    static constexpr int XV = LY::KDT + 64 * CP * 2 + TILE <= LY::AF ? LY::KDT + 64 * CP * 2
                                                                      : LY::TOTAL;  // (after the stash)
    static constexpr int TOTAL = imax(LY::TOTAL, XV + TILE);
    static constexpr bool ON = KD >= 64 && VD >= 64;  // (P in the k̃ slot needs CP <= KP)
    static_assert(!ON || TW + 64 * CP * 2 <= LY::TF, "T_w over A, before T (read while T_w is built)");
    static_assert(!ON || SR + SRB <= LY::TB, "the S tile over the dead T scratch, before T_u");
    static_assert(!ON || (XV >= LY::KDT + 64 * CP * 2 && (XV + TILE <= LY::AF || XV >= LY::FAC + TLay::FACB)),
                  "XV clear of P, T_w and the factors");
    static_assert(!ON || TOTAL <= 232448, "shared memory of the fused T-form");
    static_assert(!ON || 2 * (TOTAL + 1024) <= 233472, "two CTAs per SM (228 KB, 1 KB reserved a CTA)");
};

// Offset (floats) of U[t][v] in the Uᵀ fragment order above.
__host__ __device__ constexpr int ut_off(int t, int v) {
    const int g = v & 7, h = (v >> 3) & 1, q = (t >> 1) & 3, j = t & 1;
    return (((v >> 4) * 8 + (t >> 3)) * 32 + g * 4 + q) * 4 + 2 * h + j;
}
// The intra stage stores U from mma accumulators of 16x8 tiles (rows r0 + lane / 4, + 8;
// columns c0 + 2 (lane % 4), + 1) as pairs of tokens (t, t + 1) after a lane swap: lane l keeps
// (t, v) = (r0 + (l / 4 & ~1), c0 + 2 (l % 4) + (l / 4 & 1)) and the row 8 below. Its offset splits
// into a tile part and a lane part (no per-store arithmetic on both), checked against ut_off below.
__host__ __device__ constexpr int ut_tile(int r0, int c0) {
    return ((c0 >> 4) * 8 + (r0 >> 3)) * 128 + 2 * ((c0 >> 3) & 1);
}
__host__ __device__ constexpr int ut_lane(int lane) {
    return (2 * (lane & 3) + ((lane >> 2) & 1)) * 16 + (lane >> 3) * 4;
}
constexpr bool ut_split_matches() {
    for (int r0 = 0; r0 < 64; r0 += 16)
        for (int c0 = 0; c0 < VD; c0 += 8)
            for (int l = 0; l < 32; ++l) {
                const int t = r0 + ((l >> 2) & ~1), v = c0 + 2 * (l & 3) + ((l >> 2) & 1);
                if (ut_off(t, v) != ut_tile(r0, c0) + ut_lane(l) || ut_off(t + 8, v) != ut_off(t, v) + 128)
                    return false;
            }
    return true;
}
static_assert(ut_split_matches(), "U's store offsets (ut_tile + ut_lane) must be ut_off's");

// ------------------------------------------------ the overlapped pair's synchronisation
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
__device__ __forceinline__ u32 n_smid() {  // (an upper bound of the SM ids: the SM count or more)
    u32 s;
    asm("mov.u32 %0, %%nsmid;\n" : "=r"(s));
    return s;
}
// The state pass's fetch thread: waits until item `blk`'s block is in global memory. A flag that
// never comes (a bug) traps after ~2 s instead of hanging the stream.
__device__ __forceinline__ void wait_ready(const Params& p, int blk) {
    if (!p.sync) return;
    const int* f = p.sync + SYNC_FLAGS + blk;
    for (u32 spins = 0; ld_acquire(f) == 0; ++spins) {
        __nanosleep(128);
        if (spins > (1u << 24)) __trap();  // (no printf: any call in the kernel serialises its wgmma)
    }
    asm volatile("fence.proxy.async.global;\n" ::: "memory");  // (the TMA reads that follow)
}
// The intra kernel's thread 0: item `it`'s block is in global memory (its bulk stores complete,
// async-proxy writes ordered before the generic release of the flag).
__device__ __forceinline__ void publish_ready(const Params& p, int it) {
    asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory");
    asm volatile("fence.proxy.async.global;\n" ::: "memory");
    __threadfence();
    st_release(p.sync + SYNC_FLAGS + it, 1);
}

// --------------------------------------------------------------------------------- intra stage
// Computes the state-independent products of the chunk [t0, t0 + L) of value head hv into the
// arena `sm` (layout Lay<KDA>). All NTH threads; ends without a final barrier.
// TONLY (gdn DIRECT only): the T-form block (TLay): steps 1-3, then T_w, T_u, the factors; no
// X, V, q̃, k̃, W or U (the wgmma state pass smallbh_state_wgt builds W·S and U from the inputs).
// FT (with TONLY): the fused T-form: the block stays in shared memory (FTLay), no copies.
// `pair` (TONLY; the heads of a GVA group share q and k, so a CTA may run the same chunk for
// several value heads in turn): PAIR_REUSE, Ks, Qs and the stash's rq, rk hold this chunk's rows
// already (the previous head's stage left them) and the raw β, gate come from stash slot
// PAIR_SLOT; PAIR_NEXT, threads 64-127 load head hv + 1's raw β, gate into the other slot;
// PAIR_DEFER, the end does not wait for the bulk copies' reads, PAIR_WAITPREV, step 2 does
// (before A and P are stored over the previous head's copy sources).
// (FT: `early` runs once the diagonal blocks of T are solved, before the merges: the fused T-form
// issues its first state tile's loads there, so their latency overlaps the rest of the stage)
// (QZ, the fused T-form's quadrant form: T_u and T_w are not built in their upper right
// quadrant, which its LOW products never read)
struct NoEarly {
    __device__ __forceinline__ void operator()() const {}
};
template <bool KDA, bool DIRECT = false, bool TONLY = false, bool FT = false, typename EarlyF = NoEarly,
          bool QZ = false>
__device__ void intra_chunk(const Params& p, char* sm, int t0, int L, int hv, char* wdst = nullptr,
                            int publish = -1, int pair = 0, const EarlyF& early = EarlyF()) {
    typedef Lay<KDA, DIRECT> LY;
    static_assert(!TONLY || (DIRECT && !KDA), "the T-form is gdn's small-bh intra");
    static_assert(!FT || TONLY, "the fused T-form runs the T-form intra stage");
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int h = hv / p.group;
#if PROBE & 256
    long long tlc[9];
    tlc[0] = clock64();
#define TLM(k) (tlc[k] = clock64())
#else
#define TLM(k) ((void)0)
#endif
    u16* Ks = (u16*)(sm + LY::WM);
    u16* Qs = (u16*)(sm + LY::QD);
    u16* Kd = (u16*)(sm + LY::KDT);
    // P: shared [64][CP]; DIRECT: the workspace block [64][CP], for gdn through the k̃ slot (free
    // until step 4) and one bulk copy (PSTAGE; session 6), for kda (whose k̃ slot holds the slice
    // operands then) with per-thread stores.
    constexpr bool PSTAGE = DIRECT && !KDA && CP <= KP;
    u16* Pm = PSTAGE ? (u16*)(sm + LY::KDT) : DIRECT ? (u16*)(wdst + WLay::P) : (u16*)(sm + LY::PM);
    const int pst = CP;
    float* Uf = (float*)(sm + LY::UF);
    float* GLs = (float*)(sm + LY::GL);
    float* G = (float*)(sm + LY::G);
    float* Bs = (float*)(sm + LY::BETA);
    float* Af = (float*)(sm + LY::AF);
    float* Tf = (float*)(sm + LY::TF);
    float* Tmp = (float*)(sm + LY::TMP);
    u16* Xs = (u16*)(sm + LY::XT);
    u16* Vb = (u16*)(sm + LY::VBT);
    u16* Tbh = (u16*)(sm + LY::TB);
    u16* Tbl = Tbh + 64 * CP;

    // 1a. β and gdn's gate loads are issued first (their latency overlaps the q, k loads); q and
    //     k rows (L2 norm in f32, then rounded to the mma type); warp w owns rows w + 8r. Every
    //     load of the warp is issued before the first use, all rows in one pass (LDP = 1; two
    //     passes, each exposing the load latency, measured slower in session 5) (rows past L
    //     re-read row L - 1 and are zeroed by selection).
    float* stash = nullptr;  // (TONLY: rq [64], rk [64], slots [2][β 64, g 64])
    if constexpr (TONLY) stash = (float*)(sm + LY::STASH);
    const bool reuse = TONLY && (pair & PAIR_REUSE), next = TONLY && (pair & PAIR_NEXT);
    const int slot = (pair & PAIR_SLOT) ? 1 : 0;
    float braw = 0.0f, graw = 0.0f;
    if (tid < CH) {
        const int ii = imin(tid, L - 1);
        if (reuse) {
            braw = stash[2 * CH + slot * 2 * CH + tid];
            graw = stash[3 * CH + slot * 2 * CH + tid];
        } else {
            braw = ld_f(p.beta, (i64)(t0 + ii) * p.HV + hv, p.beta_dt);
            if (!KDA) graw = ld_f(p.g, (i64)(t0 + ii) * p.HV + hv, p.g_dt);
        }
    } else if (next && tid < 2 * CH) {
        const int ii = imin(tid - CH, L - 1);
        braw = ld_f(p.beta, (i64)(t0 + ii) * p.HV + hv + 1, p.beta_dt);
        graw = ld_f(p.g, (i64)(t0 + ii) * p.HV + hv + 1, p.g_dt);
    }
    constexpr int LDP = 1;  // load passes
    if (!reuse) with_dt(p.qkv_dt, [&](auto D) {
        constexpr int DT = decltype(D)::value;
        // (lane l holds elements E l .. E l + E - 1 of its row: one vector load per row)
        constexpr int RPW = CH / (NTH / 32) / LDP, E = KD / 32;
#pragma unroll
        for (int half = 0; half < LDP; ++half) {
            float qv[RPW][E], kv[RPW][E];
#pragma unroll
            for (int r = 0; r < RPW; ++r) {
                const int i = warp + (half * RPW + r) * (NTH / 32);
                const i64 base = ((i64)(t0 + imin(i, L - 1)) * p.H + h) * KD + E * lane;
                ldv<DT, E>(p.q, base, qv[r]);
                ldv<DT, E>(p.k, base, kv[r]);
            }
#pragma unroll
            for (int r = 0; r < RPW; ++r) {
                const int i = warp + (half * RPW + r) * (NTH / 32);
                float sq = 0.0f, sk = 0.0f;
#pragma unroll
                for (int j = 0; j < E; ++j) {
                    sq += qv[r][j] * qv[r][j];
                    sk += kv[r][j] * kv[r][j];
                }
                float rq = 1.0f, rk = 1.0f;
                if (p.l2norm) {
                    rq = frsqrt(warp_sum(sq) + 1e-6f);
                    rk = frsqrt(warp_sum(sk) + 1e-6f);
                }
                if (i >= L) rq = rk = 0.0f;
                if constexpr (TONLY) {
                    if (lane == 0) {
                        stash[i] = rq;
                        stash[CH + i] = rk;
                    }
                }
                u16* qd = Qs + i * KP + E * lane;
                u16* kd = Ks + i * KP + E * lane;
                if constexpr (E == 1) {
                    *qd = to_mma(qv[r][0] * rq);
                    *kd = to_mma(kv[r][0] * rk);
                } else {
#pragma unroll
                    for (int j = 0; j < E; j += 2) {
                        *(u32*)(qd + j) = pack_mma(qv[r][j] * rq, qv[r][j + 1] * rq);
                        *(u32*)(kd + j) = pack_mma(kv[r][j] * rk, kv[r][j + 1] * rk);
                    }
                }
            }
        }
    });
    // 1b. log decays and beta (zero past the chunk's length).
    if (tid < CH) {
        const int i = tid;
        const float bias = KDA ? 0.0f : gate_bias(p, hv);
        const float a = gate_a(p, hv);
        Bs[i] = i < L ? beta_value(p, braw) : 0.0f;
        if (!KDA) G[i] = i < L ? gate_apply(p, graw, bias, a) : 0.0f;
    } else if (next && tid < 2 * CH) {
        // (slot `slot` may still be read above by threads 0-63: the next head's goes to the other)
        stash[2 * CH + (slot ^ 1) * 2 * CH + tid - CH] = braw;
        stash[3 * CH + (slot ^ 1) * 2 * CH + tid - CH] = graw;
    }
    if (KDA) {
        // (the raw log-decay form is specialised: no bias loads, no per-element mode tests)
        const bool glog = p.gate == GATE_LOG;
        with_dt(p.g_dt, [&](auto D) {
            constexpr int DT = decltype(D)::value;
            constexpr int M = CH * KD / NTH / 4 / LDP;  // groups of 4 consecutive channels per thread and pass
            auto gates = [&](auto LOGC) {
                constexpr bool LOG = decltype(LOGC)::value != 0;
                const float a = LOG ? 1.0f : gate_a(p, hv);
#pragma unroll
                for (int half = 0; half < LDP; ++half) {
                    float x[M][4], b[M][4];
#pragma unroll
                    for (int m = 0; m < M; ++m) {
                        const int idx = tid + NTH * (half * M + m), i = idx / (KD / 4), d = 4 * (idx % (KD / 4));
                        ldv<DT, 4>(p.g, ((i64)(t0 + imin(i, L - 1)) * p.HV + hv) * KD + d, x[m]);
#pragma unroll
                        for (int e = 0; e < 4; ++e) b[m][e] = LOG ? 0.0f : gate_bias(p, hv * KD + d + e);
                    }
#pragma unroll
                    for (int m = 0; m < M; ++m) {
                        const int idx = tid + NTH * (half * M + m), i = idx / (KD / 4);
                        const bool in = i < L;
                        // (kda keeps Γ in log2 units, Γ log2(e): every decay is one ex2, no multiply)
                        constexpr float L2E = 1.4426950408889634f;
                        float y[4];
#pragma unroll
                        for (int e = 0; e < 4; ++e)
                            y[e] = in ? L2E * (LOG ? x[m][e] : gate_apply(p, x[m][e], b[m][e], a)) : 0.0f;
                        *(float4*)(G + 4 * idx) = make_float4(y[0], y[1], y[2], y[3]);
                    }
                }
            };
            if (glog) gates(IC<1>());
            else gates(IC<0>());
        });
    }
    // (the overlapped pair: the previous item's flag, now that its stores have long completed;
    // its bulk groups are this thread's only ones so far)
    if constexpr (TONLY) {
        if (publish >= 0 && tid == 0) publish_ready(p, publish);
    }
    __syncthreads();
    TLM(1);
    // 1c. Γ = inclusive cumsum over the chunk (f32).
    if (!KDA) {
        if (warp == 0) {
            const float a = G[2 * lane], b = G[2 * lane + 1];
            float s = a + b;
#pragma unroll
            for (int o = 1; o < 32; o <<= 1) {
                const float y = __shfl_up_sync(0xffffffffu, s, o);
                if (lane >= o) s += y;
            }
            G[2 * lane + 1] = s;
            G[2 * lane] = s - b;
        }
        __syncthreads();
    } else {
        constexpr int SEG = NTH / KD, SLEN = CH / SEG;
        const int d = tid % KD, sg = tid / KD;
        float run = 0.0f;
        for (int i = sg * SLEN; i < (sg + 1) * SLEN; ++i) {
            run += G[i * KD + d];
            G[i * KD + d] = run;
        }
        __syncthreads();
        float off = 0.0f;
        for (int s2 = 0; s2 < sg; ++s2) off += G[((s2 + 1) * SLEN - 1) * KD + d];
        __syncthreads();
        if (sg > 0)
            for (int i = sg * SLEN; i < (sg + 1) * SLEN; ++i) G[i * KD + d] += off;
        __syncthreads();
    }
    TLM(2);
    if constexpr (FT && ((PROBE & 2097152) != 0)) early();  // (EARLY_AT 2)

    // 2. A (f32, strictly lower, β_i folded) and P (lower incl. diagonal, scale folded).
    if constexpr (!KDA) {
        typedef Tiles<CH, CH, NTH / 32> TT;
        float akk[TT::PER][4], aqk[TT::PER][4];
        zero_acc(akk);
        zero_acc(aqk);
        if constexpr (!(PROBE & 32)) {
            // (A and P are read on and below the diagonal: LOW leaves out the 12 tiles above it)
            mma_tiles2<CH, CH, KD, NTH / 32, false, false, !NO_TRI_AP>(akk, aqk, Ks, Qs, KP, Ks, KP, warp, lane);
        }
        // (PAIR_WAITPREV: the previous head's bulk copies read A's and P's slots; their wait,
        // left out at its end, is here, after this head's products)
        if (TONLY && (pair & PAIR_WAITPREV)) {
            if (tid == 0) bulk_wait_read();
            __syncthreads();
        }
#pragma unroll
        for (int i = 0; i < TT::PER; ++i) {
            int r0, c0;
            tile_rc<CH, CH, NTH / 32>(warp, lane, i, r0, c0);
            float pv[4];
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int r = r0 + (e >> 1) * 8, c = c0 + (e & 1);
                const float dec = c <= r ? fexp(G[r] - G[c]) : 0.0f;
                Af[r * 65 + c] = c < r ? Bs[r] * akk[i][e] * dec : 0.0f;
                pv[e] = c <= r ? p.scale * aqk[i][e] * dec : 0.0f;
            }
            // (c0 even, pst even: 4-byte aligned pairs, in shared or in the workspace)
            *(u32*)(Pm + r0 * pst + c0) = pack_mma(pv[0], pv[1]);
            *(u32*)(Pm + (r0 + 8) * pst + c0) = pack_mma(pv[2], pv[3]);
        }
    } else {
        // kda. Off-diagonal 16x16 blocks (row sub-chunk r > column sub-chunk c) on tensor cores
        // through the reference point n = 16 r (first row of the row sub-chunk):
        //   A_rc = (K_r ⊙ e^{Γ_r - Γ_n}) · (K_c ⊙ e^{Γ_n - Γ_c})ᵀ, P_rc likewise with Q_r,
        // both exponents <= 0 (log decays <= 0, c < r). A uses hi + lo operands (hi·hi + hi·lo +
        // lo·hi: ~2^-16 relative, like f32); P uses Q in one rounding and K in hi + lo (P itself is
        // stored in the mma type). Diagonal 16x16 blocks stay elementwise in f32 (exponent
        // Γ_i - Γ_j, j <= i). The channels are walked in 16-channel slices (one mma k step): all
        // threads build the slice's operands, then warps 0 and 4 take the 16 diagonal 4x4 tiles
        // (6 exponentials per channel: none on the diagonal), warps 1-3 the 24 other 4x4 tiles
        // inside the diagonal blocks (7 each, through the tile's first row as the reference
        // point, like the tensor-core blocks), four lanes per tile (channels p, p + 4, ...; lanes
        // 4t..4t+3, reduced by shuffles), and warps 5-7 two off-diagonal blocks each (both n
        // halves, A and P). (Warp w issues on SM sub-partition w % 4: the exponentials per slice
        // and lane are 48 on sub-partition 0 and 28 on 1-3; before session 5: 80 and 64.)
        constexpr int DS = LY::DS, SP = LY::DSP, TS = LY::TSP;
        float* KRs = (float*)(sm + LY::SLF);
        float* QRs = KRs + 64 * SP;
        float* GSs = QRs + 64 * SP;
        u16* KTh = (u16*)(sm + LY::SLT);
        u16* KTl = KTh + 48 * TS;
        u16* QTs = KTl + 48 * TS;
        u16* KHh = QTs + 48 * TS;
        u16* KHl = KHh + 96 * TS;
        // (r, c) of block q of the lower triangle of a 4x4 block grid, q = 0..5:
        // (1,0) (2,0) (2,1) (3,0) (3,1) (3,2)
        const bool dtile = warp == 0 || warp == 4, otile = warp >= 1 && warp < 4, tc = warp >= 5;
        const int part = lane & 3;
        int ib, jb;
        if (dtile) {
            ib = jb = (warp == 0 ? 0 : 8) + (lane >> 2);
        } else {
            const int o = (tid - 32) >> 2, b = o / 6, q = o % 6;
            const int ra = q < 1 ? 1 : (q < 3 ? 2 : 3);
            ib = 4 * b + ra;
            jb = 4 * b + q - ra * (ra - 1) / 2;
        }
        // accumulators: a 4x4 tile (rows x, columns y) of A and P for the CUDA-core warps; for
        // the tensor-core warps a[2 blk + nt] and pq[2 blk + nt] are mma accumulators of n tile nt
        // of the warp's block blk
        float a[4][4], pq[4][4];
#pragma unroll
        for (int x = 0; x < 4; ++x)
#pragma unroll
            for (int y = 0; y < 4; ++y) a[x][y] = pq[x][y] = 0.0f;
        const int l7 = lane & 7, l8 = (lane >> 3) & 1, l16 = lane >> 4;
#pragma unroll 1
        for (int s = 0; s < KD / DS; ++s) {
            // slice build: item = (row i, channel pair); a warp's 32 items share one sub-chunk.
            // (Session 6's source counters put a fifth of the kernel's stall samples in the
            // one-item-at-a-time loop this was, mostly short-scoreboard waits.)
            // Thread t builds rows i0 = t / 8 and i0 + 32, channel pair t % 8, specialised on the
            // rows' sub-chunks (warp-uniform: 0 and 2 for warps 0-3, 1 and 3 for warps 4-7), so
            // which operands a row feeds is known at compile time; both items' shared loads issue
            // before either's stores (which the compiler may not move loads across).
            static_assert(NTH == 256 && 64 * (DS / 2) == 2 * NTH, "slice build: two rows a thread");
            struct SlIn {
                u32 kk, qq;
                float2 g, gn[4];
            };
            auto ld_item = [&](auto SUBC, int i, int pr) {
                constexpr int SUB = decltype(SUBC)::value;
                const int d = s * DS + 2 * pr;
                SlIn x;
                x.kk = *(const u32*)(Ks + i * KP + d);
                x.qq = *(const u32*)(Qs + i * KP + d);
                x.g = *(const float2*)(G + i * KD + d);
#pragma unroll
                for (int r = 0; r < 4; ++r)
                    x.gn[r] = (r >= SUB && r > 0) ? *(const float2*)(G + (16 * r) * KD + d) : make_float2(0.0f, 0.0f);
                return x;
            };
            auto st_item = [&](auto SUBC, int i, int pr, const SlIn& x) {
                constexpr int SUB = decltype(SUBC)::value;
                const float k0 = from_mma((u16)(x.kk & 0xffffu)), k1 = from_mma((u16)(x.kk >> 16));
                const float q0 = from_mma((u16)(x.qq & 0xffffu)), q1 = from_mma((u16)(x.qq >> 16));
                KRs[i * SP + 2 * pr] = k0;
                KRs[i * SP + 2 * pr + 1] = k1;
                QRs[i * SP + 2 * pr] = q0;
                QRs[i * SP + 2 * pr + 1] = q1;
                GSs[i * SP + 2 * pr] = x.g.x;
                GSs[i * SP + 2 * pr + 1] = x.g.y;
                if constexpr (SUB > 0) {
                    const float e0 = fexp2(x.g.x - x.gn[SUB].x), e1 = fexp2(x.g.y - x.gn[SUB].y);
                    const float x0 = k0 * e0, x1 = k1 * e1;
                    const u32 hi = pack_mma(x0, x1);
                    const int o = (i - 16) * TS + 2 * pr;
                    *(u32*)(KTh + o) = hi;
                    *(u32*)(KTl + o) = pack_mma(x0 - from_mma((u16)(hi & 0xffffu)), x1 - from_mma((u16)(hi >> 16)));
                    *(u32*)(QTs + o) = pack_mma(q0 * e0, q1 * e1);
                }
#pragma unroll
                for (int r = SUB + 1; r < 4; ++r) {
                    const float x0 = k0 * fexp2(x.gn[r].x - x.g.x), x1 = k1 * fexp2(x.gn[r].y - x.g.y);
                    const u32 hi = pack_mma(x0, x1);
                    const int o = (8 * r * (r - 1) + i) * TS + 2 * pr;
                    *(u32*)(KHh + o) = hi;
                    *(u32*)(KHl + o) = pack_mma(x0 - from_mma((u16)(hi & 0xffffu)), x1 - from_mma((u16)(hi >> 16)));
                }
            };
            {
                const int i0 = tid / (DS / 2), pr = tid % (DS / 2);
                if (warp < 4) {
                    const SlIn a = ld_item(IC<0>(), i0, pr), b = ld_item(IC<2>(), i0 + 32, pr);
                    st_item(IC<0>(), i0, pr, a);
                    st_item(IC<2>(), i0 + 32, pr, b);
                } else {
                    const SlIn a = ld_item(IC<1>(), i0, pr), b = ld_item(IC<3>(), i0 + 32, pr);
                    st_item(IC<1>(), i0, pr, a);
                    st_item(IC<3>(), i0 + 32, pr, b);
                }
            }
            __syncthreads();
            if (dtile) {
#pragma unroll
                for (int k = 0; k < DS / 4; ++k) {
                    const int dd = part + 4 * k;
                    float kv[4], qv[4], gv[4];
#pragma unroll
                    for (int x = 0; x < 4; ++x) {
                        kv[x] = KRs[(4 * ib + x) * SP + dd];
                        qv[x] = QRs[(4 * ib + x) * SP + dd];
                        gv[x] = GSs[(4 * ib + x) * SP + dd];
                    }
#pragma unroll
                    for (int x = 0; x < 4; ++x)
#pragma unroll
                        for (int y = 0; y <= x; ++y) {
                            // (the diagonal needs no exponential: 6 a channel, not 10)
                            const float kje = y == x ? kv[y] : kv[y] * fexp2(gv[x] - gv[y]);
                            a[x][y] += kv[x] * kje;
                            pq[x][y] += qv[x] * kje;
                        }
                }
            } else if (otile) {
#pragma unroll
                for (int k = 0; k < DS / 4; ++k) {
                    const int dd = part + 4 * k;
                    float ki[4], qi[4], gi[4], kj[4], gj[4];
#pragma unroll
                    for (int x = 0; x < 4; ++x) {
                        ki[x] = KRs[(4 * ib + x) * SP + dd];
                        qi[x] = QRs[(4 * ib + x) * SP + dd];
                        gi[x] = GSs[(4 * ib + x) * SP + dd];
                        kj[x] = KRs[(4 * jb + x) * SP + dd];
                        gj[x] = GSs[(4 * jb + x) * SP + dd];
                    }
                    // through the reference row m = 4 ib (the first row of the tile):
                    // e^{Γ_i - Γ_j} = e^{Γ_i - Γ_m} e^{Γ_m - Γ_j}, both exponents <= 0 (rows j
                    // precede m): 7 exponentials a channel instead of 16 (session 5: these
                    // warps' exponentials were step 2's critical path)
                    float kx[4], qx[4], ky[4];
                    kx[0] = ki[0];
                    qx[0] = qi[0];
#pragma unroll
                    for (int x = 1; x < 4; ++x) {
                        const float e = fexp2(gi[x] - gi[0]);
                        kx[x] = ki[x] * e;
                        qx[x] = qi[x] * e;
                    }
#pragma unroll
                    for (int y = 0; y < 4; ++y) ky[y] = kj[y] * fexp2(gi[0] - gj[y]);
#pragma unroll
                    for (int x = 0; x < 4; ++x)
#pragma unroll
                        for (int y = 0; y < 4; ++y) {
                            a[x][y] += kx[x] * ky[y];
                            pq[x][y] += qx[x] * ky[y];
                        }
                }
            } else {
                const u32 th = smem_addr(KTh), tl = smem_addr(KTl), tq = smem_addr(QTs);
                const u32 hh = smem_addr(KHh), hl = smem_addr(KHl);
#pragma unroll
                for (int blk = 0; blk < 2; ++blk) {
                    const int q = 2 * (warp - 5) + blk;
                    const int r = q < 1 ? 1 : (q < 3 ? 2 : 3), c = q - r * (r - 1) / 2;
                    const u32 ao = (u32)(((16 * (r - 1) + l7 + 8 * l8) * TS + 8 * l16) * 2);
                    const u32 bo = (u32)(((8 * r * (r - 1) + 16 * c + l7 + 8 * l16) * TS + 8 * l8) * 2);
                    u32 x0, x1, x2, x3, y0, y1, y2, y3, z0, z1, z2, z3;
                    ldsm_x4(th + ao, x0, x1, x2, x3);
                    ldsm_x4(tl + ao, y0, y1, y2, y3);
                    ldsm_x4(tq + ao, z0, z1, z2, z3);
                    u32 h0, h1, h2, h3, w0, w1, w2, w3;
                    ldsm_x4(hh + bo, h0, h1, h2, h3);
                    ldsm_x4(hl + bo, w0, w1, w2, w3);
                    mma16816(a[2 * blk], x0, x1, x2, x3, h0, h1);
                    mma16816(a[2 * blk + 1], x0, x1, x2, x3, h2, h3);
                    mma16816(pq[2 * blk], z0, z1, z2, z3, h0, h1);
                    mma16816(pq[2 * blk + 1], z0, z1, z2, z3, h2, h3);
                    mma16816(a[2 * blk], x0, x1, x2, x3, w0, w1);
                    mma16816(a[2 * blk + 1], x0, x1, x2, x3, w2, w3);
                    mma16816(pq[2 * blk], z0, z1, z2, z3, w0, w1);
                    mma16816(pq[2 * blk + 1], z0, z1, z2, z3, w2, w3);
                    mma16816(a[2 * blk], y0, y1, y2, y3, h0, h1);
                    mma16816(a[2 * blk + 1], y0, y1, y2, y3, h2, h3);
                }
            }
            __syncthreads();
        }
        // (SLF is dead now: A goes over it.)
        if (!tc) {
            // sum the four channel parts (lanes 4t..4t+3); lane `part` then writes row x = part
#pragma unroll
            for (int x = 0; x < 4; ++x)
#pragma unroll
                for (int y = 0; y < 4; ++y) {
                    a[x][y] += __shfl_xor_sync(0xffffffffu, a[x][y], 1);
                    pq[x][y] += __shfl_xor_sync(0xffffffffu, pq[x][y], 1);
                    a[x][y] += __shfl_xor_sync(0xffffffffu, a[x][y], 2);
                    pq[x][y] += __shfl_xor_sync(0xffffffffu, pq[x][y], 2);
                }
#pragma unroll
            for (int x = 0; x < 4; ++x) {
                if (x == part) {
                    const int r = 4 * ib + x, c = 4 * jb;
                    const float br = Bs[r];
                    float pv[4];
#pragma unroll
                    for (int y = 0; y < 4; ++y) {
                        Af[r * 65 + c + y] = c + y < r ? br * a[x][y] : 0.0f;
                        pv[y] = c + y <= r ? p.scale * pq[x][y] : 0.0f;
                    }
                    *(u32*)(Pm + r * pst + c) = pack_mma(pv[0], pv[1]);
                    *(u32*)(Pm + r * pst + c + 2) = pack_mma(pv[2], pv[3]);
                }
            }
        } else {
            const int g = lane >> 2, t2 = (lane & 3) * 2;
#pragma unroll
            for (int blk = 0; blk < 2; ++blk) {
                const int q = 2 * (warp - 5) + blk;
                const int r = q < 1 ? 1 : (q < 3 ? 2 : 3), c = q - r * (r - 1) / 2;
#pragma unroll
                for (int nt = 0; nt < 2; ++nt) {
                    const int i0 = 16 * r + g, j = 16 * c + 8 * nt + t2;
                    const float b0 = Bs[i0], b1 = Bs[i0 + 8];
                    const float(&av)[4] = a[2 * blk + nt];
                    const float(&pvv)[4] = pq[2 * blk + nt];
                    Af[i0 * 65 + j] = b0 * av[0];
                    Af[i0 * 65 + j + 1] = b0 * av[1];
                    Af[(i0 + 8) * 65 + j] = b1 * av[2];
                    Af[(i0 + 8) * 65 + j + 1] = b1 * av[3];
                    *(u32*)(Pm + i0 * pst + j) = pack_mma(p.scale * pvv[0], p.scale * pvv[1]);
                    *(u32*)(Pm + (i0 + 8) * pst + j) = pack_mma(p.scale * pvv[2], p.scale * pvv[3]);
                }
            }
            // zeros: the 4x4 tiles above the diagonal (pairs never straddle a tile)
            for (int u = tid - 160; u < 64 * 32; u += NTH - 160) {
                const int i = u >> 5, j = 2 * (u & 31);
                if ((j >> 2) > (i >> 2)) {
                    *(u32*)(Pm + i * pst + j) = 0u;
                    Af[i * 65 + j] = 0.0f;
                    Af[i * 65 + j + 1] = 0.0f;
                }
            }
        }
        // X = K ⊙ e^Γ, q̃ = scale Q ⊙ e^Γ, k̃ = K ⊙ e^{Γlast - Γ} and e^Γlast while Γ is still
        // here (T goes over it in step 3). Every element is read and written by one thread, so X
        // (DIRECT: over Qs) and q̃ (fused: in place) need no barrier; DIRECT writes q̃ and k̃
        // straight to the workspace.
        u16* Xo = (u16*)(sm + LY::XT);
        u16* Qo = DIRECT ? (u16*)(wdst + WLay::Q) : Qs;
        u16* Ko = DIRECT ? (u16*)(wdst + WLay::KT) : Kd;
        constexpr int QST = KP;  // (the workspace rows are padded like shared ones)
        // (8 channels a thread: 16-byte loads and stores, a quarter of the store instructions of
        // the pairwise form; the same products in the same order)
        for (int u = tid; u < CH * KD / 8; u += NTH) {
            const int i = u / (KD / 8), d = 8 * (u % (KD / 8));
            const uint4 kw = *(const uint4*)(Ks + i * KP + d);
            const uint4 qw = *(const uint4*)(Qs + i * KP + d);
            const u32 kk[4] = {kw.x, kw.y, kw.z, kw.w}, qq[4] = {qw.x, qw.y, qw.z, qw.w};
            const float4 ga = *(const float4*)(G + i * KD + d), gb = *(const float4*)(G + i * KD + d + 4);
            const float4 la = *(const float4*)(G + 63 * KD + d), lb = *(const float4*)(G + 63 * KD + d + 4);
            const float g[8] = {ga.x, ga.y, ga.z, ga.w, gb.x, gb.y, gb.z, gb.w};
            const float gl[8] = {la.x, la.y, la.z, la.w, lb.x, lb.y, lb.z, lb.w};
            u32 xo[4], qo[4], ko[4];
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                const float k0 = from_mma((u16)(kk[j] & 0xffffu)), k1 = from_mma((u16)(kk[j] >> 16));
                const float q0 = from_mma((u16)(qq[j] & 0xffffu)), q1 = from_mma((u16)(qq[j] >> 16));
                const float e0 = fexp2(g[2 * j]), e1 = fexp2(g[2 * j + 1]);
                xo[j] = pack_mma(k0 * e0, k1 * e1);
                qo[j] = pack_mma(p.scale * q0 * e0, p.scale * q1 * e1);
                ko[j] = pack_mma(k0 * fexp2(gl[2 * j] - g[2 * j]), k1 * fexp2(gl[2 * j + 1] - g[2 * j + 1]));
            }
            *(uint4*)(Xo + i * KP + d) = make_uint4(xo[0], xo[1], xo[2], xo[3]);
            *(uint4*)(Qo + i * QST + d) = make_uint4(qo[0], qo[1], qo[2], qo[3]);
            *(uint4*)(Ko + i * QST + d) = make_uint4(ko[0], ko[1], ko[2], ko[3]);
        }
        if (tid < KD) GLs[tid] = fexp2(G[63 * KD + tid]);
    }
    if constexpr (PSTAGE && !FT) fence_proxy_async();
    __syncthreads();
    if constexpr (PSTAGE && !FT) {
        if (tid == 0 && !(PROBE & 128)) {
            bulk_s2g(wdst + (TONLY ? TLay::P : WLay::P), sm + LY::KDT, 64 * CP * 2);
            bulk_commit();
        }
    }
    TLM(3);

    // 3. T = (I + A)^-1 in f32: diagonal 16x16 blocks by forward substitution (warp r, lane =
    //    column), then the off-diagonal blocks by doubling (below). (Session 20: 32 x 32 diagonal
    //    blocks by the same substitution on warps 0-1, without the doubling level for the 16-row
    //    pairs, measured slower: 256x64 0.822 against 0.807 ms, diagonal stage 2,341 against ~1,000
    //    cycles a CTA; bench/patches/s20d-s32.patch. The whole solve, PROBE 8, is 7.8 % of gdn
    //    256x64 and 12.6 % of 16x1024: a chain of short dependent phases.)
    // (FT's early loads: EARLY_AT 0 after the diagonal blocks (session 17), 1 before them
    // (session 21: the loads' issue overlaps the substitution, on four half-warps, instead of the
    // merges' shared loads), 2 before step 2)
    constexpr int EARLY_AT = (PROBE & 2097152) ? 2 : (PROBE & 16777216) ? 0 : 1;
    if constexpr (FT && EARLY_AT == 1) early();
    if (warp < 4 && lane < 16 && !(PROBE & 8)) {
        const int r = warp, l = lane;
        float col[16];
#pragma unroll
        for (int i = 0; i < 16; ++i) {
            float v = (i == l) ? 1.0f : 0.0f;
#pragma unroll
            for (int m = 0; m < i; ++m) v -= Af[(16 * r + i) * 65 + 16 * r + m] * col[m];
            col[i] = v;
        }
#pragma unroll
        for (int i = 0; i < 16; ++i) Tf[(16 * r + i) * 65 + 16 * r + l] = col[i];
    }
    __syncthreads();
    TLM(4);
    if constexpr (FT && EARLY_AT == 0) early();
#if !(PROBE & 512)
    // Off-diagonal blocks by doubling, on tensor cores: inv([[A, 0], [C, D]]) = [[A⁻¹, 0],
    // [-D⁻¹ C A⁻¹, D⁻¹]], first for the 16-row pairs (blocks (1,0), (3,2)), then for the 32-row
    // halves (blocks (2,0), (2,1), (3,0), (3,1)): four products, four barriers. Operands are the
    // f32 A and T in shared memory, split into bf16 hi + lo (mma_f32x3: ~2^-16 relative, the
    // precision of the hi + lo T' that W and U are built from). (The f32 CUDA-core merge by block
    // distance, six barriers, is PROBE bit 512: session 5 measured it at ~3,800 cycles a chunk.
    // Diagnosis, PROBE 8388608: the doubling left out, the diagonal blocks kept.)
    if (!(PROBE & (8 | 8388608))) {
        float* Ms = (float*)(sm + LY::TMP);
        const int g = lane >> 2, q2 = 2 * (lane & 3);
        if (warp < 4) {  // X_b = A_{2b+1, 2b} T_{2b, 2b} (16 x 16), warp: b = warp / 2, 8 columns
            const int b = warp >> 1, n0 = 8 * (warp & 1), r0 = 32 * b + 16, c0 = 32 * b;
            float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
            mma_f32x3(acc, Af + r0 * 65 + c0, 65, Tf + c0 * 65 + c0 + n0, 65, lane);
            float* x = Ms + b * 16 * 17 + n0;
            x[g * 17 + q2] = acc[0];
            x[g * 17 + q2 + 1] = acc[1];
            x[(g + 8) * 17 + q2] = acc[2];
            x[(g + 8) * 17 + q2 + 1] = acc[3];
        }
        __syncthreads();
        if (warp < 4) {  // T_{2b+1, 2b} = -T_{2b+1, 2b+1} X_b
            const int b = warp >> 1, n0 = 8 * (warp & 1), r0 = 32 * b + 16, c0 = 32 * b;
            float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
            mma_f32x3(acc, Tf + r0 * 65 + r0, 65, Ms + b * 16 * 17 + n0, 17, lane);
            float* t = Tf + r0 * 65 + c0 + n0;
            t[g * 65 + q2] = -acc[0];
            t[g * 65 + q2 + 1] = -acc[1];
            t[(g + 8) * 65 + q2] = -acc[2];
            t[(g + 8) * 65 + q2 + 1] = -acc[3];
        }
        __syncthreads();
        // 32-row halves: warp = (16-row tile mt, 8-column tile nt) of the 32 x 32 result; T's
        // upper block (0, 1) / (2, 3) is zero and not stored: its k step is skipped
        const int mt = warp >> 2, nt = warp & 3;
        {  // X = A[32:64, 0:32] T[0:32, 0:32]
            float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
            for (int ks = 0; ks < 2; ++ks)
                if (ks >= (nt >> 1)) mma_f32x3(acc, Af + (32 + 16 * mt) * 65 + 16 * ks, 65, Tf + 16 * ks * 65 + 8 * nt, 65, lane);
            float* x = Ms + 16 * mt * 33 + 8 * nt;
            x[g * 33 + q2] = acc[0];
            x[g * 33 + q2 + 1] = acc[1];
            x[(g + 8) * 33 + q2] = acc[2];
            x[(g + 8) * 33 + q2 + 1] = acc[3];
        }
        __syncthreads();
        {  // T[32:64, 0:32] = -T[32:64, 32:64] X
            float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
            for (int ks = 0; ks < 2; ++ks)
                if (ks <= mt) mma_f32x3(acc, Tf + (32 + 16 * mt) * 65 + 32 + 16 * ks, 65, Ms + 16 * ks * 33 + 8 * nt, 33, lane);
            float* t = Tf + (32 + 16 * mt) * 65 + 8 * nt;
            t[g * 65 + q2] = -acc[0];
            t[g * 65 + q2 + 1] = -acc[1];
            t[(g + 8) * 65 + q2] = -acc[2];
            t[(g + 8) * 65 + q2 + 1] = -acc[3];
        }
        __syncthreads();
    }
#else
    // (each thread 2x2 outputs, rows i, i + 8 and columns j, j + 8 of a 16x16 block: half the
    // shared loads per FMA, the same summation order per output as one output a thread)
    for (int dist = 1; dist < ((PROBE & 8) ? 1 : 4); ++dist) {
        const int nb = 4 - dist;
        for (int idx = tid; idx < nb * 64; idx += NTH) {
            const int b = idx >> 6, i = (idx >> 3) & 7, j = idx & 7;
            const int r = b + dist, c = b;
            float s00 = 0.0f, s01 = 0.0f, s10 = 0.0f, s11 = 0.0f;
            for (int m = c; m < r; ++m) {
#pragma unroll
                for (int x = 0; x < 16; ++x) {
                    const float a0 = Af[(16 * r + i) * 65 + 16 * m + x];
                    const float a1 = Af[(16 * r + i + 8) * 65 + 16 * m + x];
                    const float u0 = Tf[(16 * m + x) * 65 + 16 * c + j];
                    const float u1 = Tf[(16 * m + x) * 65 + 16 * c + j + 8];
                    s00 += a0 * u0;
                    s01 += a0 * u1;
                    s10 += a1 * u0;
                    s11 += a1 * u1;
                }
            }
            float* tm = Tmp + b * 272;
            tm[i * 17 + j] = s00;
            tm[i * 17 + j + 8] = s01;
            tm[(i + 8) * 17 + j] = s10;
            tm[(i + 8) * 17 + j + 8] = s11;
        }
        __syncthreads();
        for (int idx = tid; idx < nb * 64; idx += NTH) {
            const int b = idx >> 6, i = (idx >> 3) & 7, j = idx & 7;
            const int r = b + dist, c = b;
            const float* tm = Tmp + b * 272;
            float s00 = 0.0f, s01 = 0.0f, s10 = 0.0f, s11 = 0.0f;
#pragma unroll
            for (int x = 0; x < 16; ++x) {
                const float a0 = Tf[(16 * r + i) * 65 + 16 * r + x];
                const float a1 = Tf[(16 * r + i + 8) * 65 + 16 * r + x];
                const float u0 = tm[x * 17 + j], u1 = tm[x * 17 + j + 8];
                s00 += a0 * u0;
                s01 += a0 * u1;
                s10 += a1 * u0;
                s11 += a1 * u1;
            }
            Tf[(16 * r + i) * 65 + 16 * c + j] = -s00;
            Tf[(16 * r + i) * 65 + 16 * c + j + 8] = -s01;
            Tf[(16 * r + i + 8) * 65 + 16 * c + j] = -s10;
            Tf[(16 * r + i + 8) * 65 + 16 * c + j + 8] = -s11;
        }
        __syncthreads();
    }
#endif
    TLM(5);
    if constexpr (TONLY) {
        // The state pass's factors (in place over rq, rk) and T_w's column factors β e^Γ / |k|
        // (Tmp is free after the merges); rows past L have rq = rk = β = 0.
        // (MODE_INTRA_ST, the small-bh intra kernel without the overlap: the factors, T_w and T_u
        // go to the workspace block by coalesced per-thread stores, not through shared memory
        // and bulk copies, so the CTA does not wait for the copies' reads)
        const bool gst = !FT && !p.sync && (p.mode & MODE_INTRA_ST);
        float* fac = (float*)(gst ? wdst + TLay::FAC : sm + LY::FAC);
        if (tid < CH) {
            // (FT: q and k stay normalised in Qs and Ks, so no 1/|q|, 1/|k| here)
            const float e = fexp(G[tid]), rq = FT ? 1.0f : stash[tid], rk = FT ? 1.0f : stash[CH + tid];
            fac[tid] = p.scale * e * rq;
            fac[CH + tid] = fexp(G[63] - G[tid]) * rk;
            Tmp[tid] = Bs[tid] * e * rk;
            if (tid == 0) fac[2 * CH] = fexp(G[63]);
        }
        __syncthreads();
        // T_u = T diag(β) hi + lo (Tbh, Tbl), T_w = T diag(β e^Γ / |k|) hi over the dead f32 A
        // (Ks and Qs stay: for the fused T-form's state part, and for the next head of a pair)
        static_assert(FTLay::TW == LY::AF && FTLay::TW + 64 * CP * 2 <= LY::TF, "T_w over A, before T");
        u16* Twh = (u16*)(gst ? wdst + TLay::TWH : sm + FTLay::TW);
        u16* Tuh = gst ? (u16*)(wdst + TLay::TUH) : Tbh;
        u16* Tul = gst ? (u16*)(wdst + TLay::TUL) : Tbl;
        // (QZ, the fused T-form's quadrant form, whose mma_quad LOW never reads the upper right
        // 32 x 32 quadrant: only the other three are built, 6 pairs a thread, not 8)
        constexpr bool SKIPQ = FT && QZ && !NO_TRI_QUAD;
        for (int idx = tid; idx < (SKIPQ ? 3 * CH * CH / 8 : CH * CH / 2); idx += NTH) {
            int i, j;
            if (SKIPQ && idx < CH * CH / 8) {  // (rows 0-31, columns 0-31; warp-uniform)
                i = idx >> 4;
                j = 2 * (idx & 15);
            } else {
                const int u = SKIPQ ? idx + CH * CH / 8 : idx;  // (rows 32-63 from pair 1024)
                i = u >> 5;
                j = 2 * (u & 31);
            }
            const bool in = (j >> 4) <= (i >> 4);
            const float a0 = in ? Tf[i * 65 + j] : 0.0f, a1 = in ? Tf[i * 65 + j + 1] : 0.0f;
            const float t0 = a0 * Bs[j], t1 = a1 * Bs[j + 1];
            const u32 hi = pack_mma(t0, t1);
            *(u32*)(Tuh + i * CP + j) = hi;
            *(u32*)(Tul + i * CP + j) = pack_mma(t0 - from_mma((u16)(hi & 0xffffu)), t1 - from_mma((u16)(hi >> 16)));
            *(u32*)(Twh + i * CP + j) = pack_mma(a0 * Tmp[j], a1 * Tmp[j + 1]);
        }
        if constexpr (!FT) fence_proxy_async();
        __syncthreads();
        TLM(6);
        if constexpr (FT) {  // (the block stays in shared memory for fused_t)
#if PROBE & 256
            if (tid == 0 && (hv + 7 * (t0 / CH)) % 61 == 5)
                printf("TLF hv=%d t0=%d: load %lld cumsum %lld AP %lld diag %lld merge %lld tbuild %lld total %lld\n", hv,
                       t0, tlc[1] - tlc[0], tlc[2] - tlc[1], tlc[3] - tlc[2], tlc[4] - tlc[3], tlc[5] - tlc[4],
                       tlc[6] - tlc[5], tlc[6] - tlc[0]);
#endif
            return;
        }
        static_assert(TLay::TUL == TLay::TUH + 64 * CP * 2, "T_u hi, lo adjacent (Tbl = Tbh + 64 CP)");
        if (tid == 0 && !(PROBE & 128) && !gst) {
            bulk_s2g(wdst + TLay::TWH, sm + FTLay::TW, 64 * CP * 2);
            bulk_s2g(wdst + TLay::TUH, sm + LY::TB, 2 * 64 * CP * 2);
            bulk_s2g(wdst + TLay::FAC, sm + LY::FAC, TLay::FACB);
        }
        if (tid == 0) {
            bulk_commit();
            // (P's copy too; the CTA's shared memory must outlive the reads. PAIR_DEFER: the next
            // head of the pair waits, in its step 2, with PAIR_WAITPREV)
            if (!(pair & PAIR_DEFER)) bulk_wait_read();
        }
#if PROBE & 256
        TLM(7);
        if (tid == 0 && (blockIdx.x + 7 * blockIdx.y) % 61 == 5 && (t0 / CH) % 16 == 1)
            printf("TL kda=0 direct=1 tform=1 blk=%d,%d t0=%d: load %lld cumsum %lld AP %lld diag %lld merge %lld "
                   "tprime %lld step4 0 step5 %lld total %lld\n",
                   (int)blockIdx.x, (int)blockIdx.y, t0, tlc[1] - tlc[0], tlc[2] - tlc[1], tlc[3] - tlc[2],
                   tlc[4] - tlc[3], tlc[5] - tlc[4], tlc[6] - tlc[5], tlc[7] - tlc[6], tlc[7] - tlc[0]);
#endif
        return;
    }
    // gdn: the per-row factors of step 4, e^Γ_i and e^{Γlast - Γ_i} (Tmp is free after the merges).
    if (!KDA && tid < CH) {
        Tmp[tid] = fexp(G[tid]);
        Tmp[CH + tid] = fexp(G[63] - G[tid]);
    }
    // T' = T diag(β), split into hi + lo in the mma type (upper blocks are zero).
    // (column pairs: 4-byte stores, half the store instructions)
    for (int idx = tid; idx < CH * CH / 2; idx += NTH) {
        const int i = idx >> 5, j = 2 * (idx & 31);
        const bool in = (j >> 4) <= (i >> 4);  // (j, j + 1 in the same 16-column block)
        const float t0 = in ? Tf[i * 65 + j] * Bs[j] : 0.0f, t1 = in ? Tf[i * 65 + j + 1] * Bs[j + 1] : 0.0f;
        const u32 hi = pack_mma(t0, t1);
        *(u32*)(Tbh + i * CP + j) = hi;
        *(u32*)(Tbl + i * CP + j) = pack_mma(t0 - from_mma((u16)(hi & 0xffffu)), t1 - from_mma((u16)(hi >> 16)));
    }
    // (PSTAGE: P's copy must have read the k̃ slot before step 4 writes k̃ there)
    if constexpr (PSTAGE) {
        if (tid == 0) bulk_wait_read();
    }
    __syncthreads();
    TLM(6);

    // 4. X = K ⊙ e^Γ, V, q̃ = scale Q ⊙ e^Γ (in place), k̃ = K ⊙ e^{Γlast - Γ}, e^Γlast; all
    //    token-major [64][*] like Ks (consecutive threads walk a row: no bank conflicts; the
    //    products read X, V and k̃ with ldmatrix.trans). (kda: all but V at the end of step 2.)
    // (gdn: called between the V loads and their stores below, so V's load latency is spent
    // building X, q̃ and k̃; session 6)
    auto gdn_xqk = [&]() {
        // gdn: the decays are per row, so 8 channels a thread from one 16-byte load each, with the
        // row factors computed once (same products, in the same order, as the per-element form).
        constexpr int U8 = KD / 8;
        for (int u = tid; u < CH * U8; u += NTH) {
            const int i = u / U8, d = (u % U8) * 8;
            const float e1 = Tmp[i], e2 = Tmp[CH + i];
            const uint4 kw = *(const uint4*)(Ks + i * KP + d);
            const uint4 qw = *(const uint4*)(Qs + i * KP + d);
            auto sc2 = [](u32 w, float a, float b) {
                return pack_mma(from_mma((u16)(w & 0xffffu)) * a * b, from_mma((u16)(w >> 16)) * a * b);
            };
            auto kx2 = [](u32 w, float e) {
                return pack_mma(from_mma((u16)(w & 0xffffu)) * e, from_mma((u16)(w >> 16)) * e);
            };
            *(uint4*)(Xs + i * KP + d) = make_uint4(kx2(kw.x, e1), kx2(kw.y, e1), kx2(kw.z, e1), kx2(kw.w, e1));
            // (DIRECT too: W, q̃ and k̃ leave together with one bulk copy at the end)
            *(uint4*)(Kd + i * KP + d) = make_uint4(kx2(kw.x, e2), kx2(kw.y, e2), kx2(kw.z, e2), kx2(kw.w, e2));
            *(uint4*)(Qs + i * KP + d) =
                make_uint4(sc2(qw.x, p.scale, e1), sc2(qw.y, p.scale, e1), sc2(qw.z, p.scale, e1), sc2(qw.w, p.scale, e1));
        }
        if (tid < KD) GLs[tid] = fexp(G[63]);
    };
    with_dt(p.qkv_dt, [&](auto D) {
        constexpr int DT = decltype(D)::value;
        constexpr int M = CH * VD / NTH / 4 / LDP;  // groups of 4 consecutive elements per thread and pass
#pragma unroll
        for (int half = 0; half < LDP; ++half) {
            float x[M][4];
#pragma unroll
            for (int m = 0; m < M; ++m) {
                const int idx = tid + NTH * (half * M + m), e = 4 * (idx % (VD / 4)), i = idx / (VD / 4);
                ldv<DT, 4>(p.v, ((i64)(t0 + imin(i, L - 1)) * p.HV + hv) * VD + e, x[m]);
            }
            if constexpr (!KDA) {
                if (half == 0) {
                    gdn_xqk();
                    // The V tile's last rows overlap Tmp (VBT + 64 VP 2 > TMP), whose factors
                    // gdn_xqk reads: every thread must be past them before any V row is stored.
                    // (Session 11: without this barrier, racecheck reported WAR hazards and gdn
                    // 4/8 o was wrong by up to 4e-2 through the W/U passes, a moving error.)
                    __syncthreads();
                }
            }
#pragma unroll
            for (int m = 0; m < M; ++m) {
                const int idx = tid + NTH * (half * M + m), e = 4 * (idx % (VD / 4)), i = idx / (VD / 4);
                const bool in = i < L;
                *(uint2*)(Vb + i * VP + e) =
                    make_uint2(pack_mma(in ? x[m][0] : 0.0f, in ? x[m][1] : 0.0f),
                               pack_mma(in ? x[m][2] : 0.0f, in ? x[m][3] : 0.0f));
            }
        }
    });
    if constexpr (DIRECT && !KDA) fence_proxy_async();
    __syncthreads();
    // gdn DIRECT: q̃ and k̃ are final; they leave now and drain during step 5
    if constexpr (DIRECT && !KDA) {
        static_assert(LY::KDT == LY::QD + 64 * KP * 2 && WLay::KT == WLay::Q + 64 * KP * 2, "q̃, k̃ adjacent");
        if (tid == 0 && !(PROBE & 128)) {
            bulk_s2g(wdst + WLay::Q, sm + LY::QD, 2 * 64 * KP * 2);
            bulk_commit();
        }
    }
    TLM(7);

    // 5. W = T' (K ⊙ e^Γ) into the Ks slot, U = T' V (f32).
    {
        typedef Tiles<CH, KD, NTH / 32> TW;
        float acc[TW::PER][4];
        zero_acc(acc);
        if constexpr (!(PROBE & 64)) {
            mma_tiles2<CH, KD, CH, NTH / 32, false, true>(acc, acc, Tbh, Tbl, CP, Xs, KP, warp, lane);
        }
#pragma unroll
        for (int i = 0; i < TW::PER; ++i) {
            int r, c;
            tile_rc<CH, KD, NTH / 32>(warp, lane, i, r, c);
            *(u32*)(Ks + r * KP + c) = pack_mma(acc[i][0], acc[i][1]);
            *(u32*)(Ks + (r + 8) * KP + c) = pack_mma(acc[i][2], acc[i][3]);
        }
    }
    {
        typedef Tiles<CH, VD, NTH / 32> TU;
        float acc[TU::PER][4];
        zero_acc(acc);
        if constexpr (!(PROBE & 64)) {
            mma_tiles2<CH, VD, CH, NTH / 32, false, true>(acc, acc, Tbh, Tbl, CP, Vb, VP, warp, lane);
        }
        if constexpr (DIRECT) {
            // W and e^Γlast are final: they leave now (and the staging area, X and V, is free)
            fence_proxy_async();
            __syncthreads();
            if (tid == 0 && !(PROBE & 128)) {
                bulk_s2g(wdst + WLay::W, sm + LY::WM, 64 * KP * 2);
                bulk_s2g(wdst + WLay::GL, sm + LY::GL, KD * 4);
                bulk_commit();
            }
        }
        // DIRECT: tokens (t, t + 1) are adjacent in the Uᵀ fragment order (ut_off): lanes of rows
        // g and g + 1 (lane ^ 4) swap one value each, then each stores two 8-byte pairs (to the
        // staging area, or straight to the workspace). Lane l of an even row g holds (t, v) =
        // (r, c) and (r, c + 1) and keeps (r, c), (r + 1, c); the odd row's lane keeps (r - 1,
        // c + 1), (r, c + 1). Offsets without branches: ut_tile + ut_lane (checked against ut_off
        // at compile time), and row + 8 is +128 floats. (Session 6: the branchy form, divergent
        // on g's parity, ran ~40 integer instructions per store and took a tenth of gdn's intra
        // stall samples.)
        [[maybe_unused]] const int odd = (lane >> 2) & 1, lpart = ut_lane(lane);
#pragma unroll
        for (int i = 0; i < TU::PER; ++i) {
            if (DIRECT) {
                float* U = LY::USTAGE ? (float*)(sm + LY::USG) : (float*)(wdst + WLay::U);
                const int idx = warp * TU::PER + i, r0 = (idx / TU::NT) * 16, c0 = (idx % TU::NT) * 8;
                const int o = ut_tile(r0, c0) + lpart;
                const float x0 = __shfl_xor_sync(0xffffffffu, odd ? acc[i][0] : acc[i][1], 4);
                const float x1 = __shfl_xor_sync(0xffffffffu, odd ? acc[i][2] : acc[i][3], 4);
                *(float2*)(U + o) = odd ? make_float2(x0, acc[i][1]) : make_float2(acc[i][0], x0);
                *(float2*)(U + o + 128) = odd ? make_float2(x1, acc[i][3]) : make_float2(acc[i][2], x1);
            } else {
                int r, c;
                tile_rc<CH, VD, NTH / 32>(warp, lane, i, r, c);
                *(float2*)(Uf + r * LY::UST + c) = make_float2(acc[i][0], acc[i][1]);
                *(float2*)(Uf + (r + 8) * LY::UST + c) = make_float2(acc[i][2], acc[i][3]);
            }
        }
    }
    // DIRECT: the block leaves by bulk copies as its parts become final (asynchronous: the
    // threads do not wait on global stores; the issuing thread waits at the end until every copy
    // has read shared memory): gdn's q̃ and k̃ after step 4, W and e^Γlast after W's product, the
    // staged Uᵀ here. (kda's q̃, k̃ and both ops' P went to the workspace where they were made.)
    // (A persistent CTA whose next chunk's loads overlapped the final wait was measured in
    // session 5: gdn 2 % faster, kda 8 % slower: the loop made the kda intra spill.)
    if constexpr (DIRECT) {
        fence_proxy_async();
        __syncthreads();
        if (tid == 0) {
            if (LY::USTAGE && !(PROBE & 128)) bulk_s2g(wdst + WLay::U, sm + LY::USG, 64 * VD * 4);
            bulk_commit();
            bulk_wait_read();  // (the CTA's shared memory must outlive the reads)
        }
    }
#if PROBE & 256
    // timeline probe: phase lengths (cycles, barrier to barrier) of a few sampled chunks
    __syncthreads();
    TLM(8);
    if (tid == 0 && (blockIdx.x + 7 * blockIdx.y) % 61 == 5 && (t0 / CH) % 16 == 1)
        printf("TL kda=%d direct=%d blk=%d,%d t0=%d: load %lld cumsum %lld AP %lld diag %lld merge %lld "
               "tprime %lld step4 %lld step5 %lld total %lld\n",
               (int)KDA, (int)DIRECT, (int)blockIdx.x, (int)blockIdx.y, t0, tlc[1] - tlc[0], tlc[2] - tlc[1],
               tlc[3] - tlc[2], tlc[4] - tlc[3], tlc[5] - tlc[4], tlc[6] - tlc[5], tlc[7] - tlc[6],
               tlc[8] - tlc[7], tlc[8] - tlc[0]);
#endif
#undef TLM
}

// --------------------------------------------------------------------------------- state pass
// State tile S[0..KD) x [v0, v0 + VT) in f32 registers, accumulator layout of Tiles<KD, VT, NW>.
template <int VT, int NW>
__device__ __forceinline__ void load_state(const Params& p, float (&acc)[Tiles<KD, VT, NW>::PER][4],
                                           const void* base, int dt, i64 slot, int v0) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    if (base == nullptr || slot < 0) {
#pragma unroll
        for (int i = 0; i < Tiles<KD, VT, NW>::PER; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.0f;
        return;
    }
    with_dt(dt, [&](auto D) {
        constexpr int DT = decltype(D)::value;
#pragma unroll
        for (int i = 0; i < Tiles<KD, VT, NW>::PER; ++i) {
            int r, c;
            tile_rc<KD, VT, NW>(warp, lane, i, r, c);
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int d = r + (e >> 1) * 8, v = v0 + c + (e & 1);
                acc[i][e] = ldt<DT>(base, slot * KD * VD + state_off(p.layout, d, v, KD, VD));
            }
        }
    });
}
template <int VT, int NW, bool SQ = false>
__device__ __forceinline__ void store_state(const Params& p,
                                            const float (&acc)[Tiles<KD, VT, NW>::PER][4],
                                            void* base, int dt, i64 slot, int v0) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    with_dt(dt, [&](auto D) {
        constexpr int DT = decltype(D)::value;
#pragma unroll
        for (int i = 0; i < Tiles<KD, VT, NW>::PER; ++i) {
            int r, c;
            s_rc<VT, NW, SQ>(warp, lane, i, r, c);
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int cc = c + (e & 1);
                const int d = r + (e >> 1) * 8, v = v0 + (SQ && FT_CPERM ? cperm(cc) : cc);
                st1<DT>(base, slot * KD * VD + state_off(p.layout, d, v, KD, VD), acc[i][e]);
            }
        }
    });
}
// Sb [KD][VT + 8] = bf16(S) (row-major, as the accumulators hold it: one 32-bit store per pair,
// rows 4 words apart mod 32 banks) for the next products, which read it with ldmatrix.trans.
template <int VT, int NW, bool SQ = false>
__device__ __forceinline__ void write_sb(const float (&acc)[Tiles<KD, VT, NW>::PER][4], u16* Sb) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    constexpr int VTP = VT + 8;
#pragma unroll
    for (int i = 0; i < Tiles<KD, VT, NW>::PER; ++i) {
        int r, c;
        s_rc<VT, NW, SQ>(warp, lane, i, r, c);
        *(u32*)(Sb + r * VTP + c) = pack_mma(acc[i][0], acc[i][1]);
        *(u32*)(Sb + (r + 8) * VTP + c) = pack_mma(acc[i][2], acc[i][3]);
    }
}

// acc (tiles of Tiles<M, N, NW>) with each row r scaled by f[r] (shared memory).
template <int M, int N, int NW>
__device__ __forceinline__ void scale_rows(float (&acc)[Tiles<M, N, NW>::PER][4], const float* f, int warp, int lane) {
#pragma unroll
    for (int i = 0; i < Tiles<M, N, NW>::PER; ++i) {
        int r, c;
        tile_rc<M, N, NW>(warp, lane, i, r, c);
        const float f0 = f[r], f1 = f[r + 8];
        acc[i][0] *= f0;
        acc[i][1] *= f0;
        acc[i][2] *= f1;
        acc[i][3] *= f1;
    }
}
// o rows < L of the chunk at token t0 (value head hv, columns v0 + the tile's) from the
// accumulators of Tiles<CH, VT, NW>, in the output dtype.
template <int VT, int NW>
__device__ __forceinline__ void store_o_rows(const Params& p, const float (&acc)[Tiles<CH, VT, NW>::PER][4], int t0,
                                             int L, int hv, int v0, int warp, int lane) {
    with_dt(p.out_dt, [&](auto D) {
        constexpr int DT = decltype(D)::value;
#pragma unroll
        for (int i = 0; i < Tiles<CH, VT, NW>::PER; ++i) {
            int r, c;
            tile_rc<CH, VT, NW>(warp, lane, i, r, c);
            const i64 o0 = ((i64)(t0 + r) * p.HV + hv) * VD + v0 + c;
            if (r < L) st2<DT>(p.o, o0, acc[i][0], acc[i][1]);
            if (r + 8 < L) st2<DT>(p.o, o0 + (i64)8 * p.HV * VD, acc[i][2], acc[i][3]);
        }
    });
}

// One chunk of the state pass for V columns [v0, v0 + VT) with NW warps (the whole block).
// Sb must hold bf16(S) [KD][VT + 8] (synchronised); Wm, Qd, Kd (k̃) are [64][KP], Pm [64][CP],
// Uf [64][ust] f32 (ust even); V_new goes to Vn [64][VT + 8] (row-major, paired stores).
// Writes o rows < L. Ends without a final barrier.
template <int VT, int NW>
__device__ __forceinline__ void state_chunk(const Params& p, float (&accS)[Tiles<KD, VT, NW>::PER][4],
                                            const u16* Wm, const u16* Qd, const u16* Kd,
                                            const u16* Pm, const float* Uf, int ust,
                                            const float* GLs, const u16* Sb, u16* Vn, int t0,
                                            int L, int hv, int v0) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    constexpr int VTP = VT + 8;
    typedef Tiles<CH, VT, NW> TO;
    // O = q̃·S + P·V_new. With few tiles per warp (the small-bh pass) q̃·S is issued before the
    // barrier together with W·S: twice the independent mma chains per warp while the state pass
    // is latency-bound, and the same Sb fragments serve both. (The fused kernel at VD = 128 has
    // no registers to spare for that: 8 tiles per warp and the 64-register state.)
    constexpr bool EARLY_O = TO::PER <= 2;
    float accO[TO::PER][4];
    zero_acc(accO);
    {
        float acc[TO::PER][4];
        zero_acc(acc);
        if constexpr (!(PROBE & 2)) mma_tiles<CH, VT, KD, NW, false, true>(acc, Wm, KP, Sb, VTP, warp, lane);
        if constexpr (EARLY_O && !(PROBE & 2)) mma_tiles<CH, VT, KD, NW, false, true>(accO, Qd, KP, Sb, VTP, warp, lane);
#pragma unroll
        for (int i = 0; i < TO::PER; ++i) {
            int r, c;
            tile_rc<CH, VT, NW>(warp, lane, i, r, c);
            const float2 u0 = *(const float2*)(Uf + r * ust + c);
            const float2 u1 = *(const float2*)(Uf + (r + 8) * ust + c);
            *(u32*)(Vn + r * VTP + c) = pack_mma(u0.x - acc[i][0], u0.y - acc[i][1]);
            *(u32*)(Vn + (r + 8) * VTP + c) = pack_mma(u1.x - acc[i][2], u1.y - acc[i][3]);
        }
    }
    __syncthreads();
    {
        float (&acc)[TO::PER][4] = accO;
        if constexpr (!EARLY_O) mma_tiles<CH, VT, KD, NW, false, true>(acc, Qd, KP, Sb, VTP, warp, lane);
        mma_tiles<CH, VT, CH, NW, false, true>(acc, Pm, CP, Vn, VTP, warp, lane);
        store_o_rows<VT, NW>(p, acc, t0, L, hv, v0, warp, lane);
    }
    scale_rows<KD, VT, NW>(accS, GLs, warp, lane);
    // S += k̃ᵀ V_new: A = k̃ᵀ read from k̃ [64][KP] with ldmatrix.trans, B = V_new likewise.
    if constexpr (!(PROBE & 4)) mma_tiles<KD, VT, CH, NW, true, true>(accS, Kd, KP, Vn, VTP, warp, lane);
}

__device__ __forceinline__ i64 seq_start(const Params& p, int n) { return ld_i(p.cu_seqlens, n, p.off_dt); }

// Writes checkpoint j (1-based count of `every` intervals) of sequence n if position pos ends one.
template <int VT, int NW, bool SQ = false>
__device__ __forceinline__ void maybe_checkpoint(const Params& p,
                                                 const float (&accS)[Tiles<KD, VT, NW>::PER][4],
                                                 int n, int hv, i64 pos, int v0) {
    if (p.ck_every > 0 && pos > 0 && pos % p.ck_every == 0) {
        const i64 slot = ((i64)p.ck_offsets[n] + pos / p.ck_every - 1) * p.HV + hv;
        store_state<VT, NW, SQ>(p, accS, p.checkpoints, p.s_out_dt, slot, v0);
    }
}

// ------------------------------------------------------------------------------ fused kernel
// grid (HV, N), NTH threads, dynamic shared memory Lay<KDA>::TOTAL. One CTA walks every chunk of
// one (sequence, value head): intra stage into shared memory, then the state pass over all V.
template <bool KDA>
__device__ void chunked_fused(const Params& p) {
    extern __shared__ __align__(16) char sm[];
    typedef Lay<KDA> LY;
    typedef Tiles<KD, VD, NTH / 32> TS;
    const int hv = blockIdx.x, n = blockIdx.y;
    float accS[TS::PER][4];
    // The initial state is prefetched into L2 here and loaded into registers after the first
    // chunk's intra stage. (Loaded here, its registers, live across the intra stage and partly
    // spilled, made the CTA wait for all of it: session 5 measured ~8,000 cycles, a fifth of a
    // one-chunk CTA.)
    const i64 slot0 = initial_row(p, n) < 0 ? -1 : initial_row(p, n) * p.HV + hv;
    if (threadIdx.x == 0 && p.state_in != nullptr && slot0 >= 0) {
        const int es = p.s_in_dt == DT_F32 ? 4 : 2;
        const char* a = (const char*)p.state_in + slot0 * KD * VD * es;
        if (((unsigned long long)a & 15) == 0) prefetch_l2(a, (u32)(KD * VD * es));  // (bulk: 16-B aligned)
    }
    const i64 bos = seq_start(p, n), eos = seq_start(p, n + 1);
    const int len = (int)(eos - bos);
#if PROBE & 256
    long long c_intra = 0, c_state = 0, c0 = clock64();
#endif
    for (int c = 0; c * CH < len; ++c) {
        const int t0 = (int)bos + c * CH;
        const int L = imin(CH, len - c * CH);
        intra_chunk<KDA>(p, sm, t0, L, hv);
        __syncthreads();
#if PROBE & 256
        const long long c1 = clock64();
        c_intra += c1 - c0;
#endif
        if (c == 0) load_state<VD, NTH / 32>(p, accS, p.state_in, p.s_in_dt, slot0, 0);
        write_sb<VD, NTH / 32>(accS, (u16*)(sm + LY::SB));
        __syncthreads();
        state_chunk<VD, NTH / 32>(p, accS, (const u16*)(sm + LY::WM), (const u16*)(sm + LY::QD),
                                  (const u16*)(sm + LY::KDT), (const u16*)(sm + LY::PM),
                                  (const float*)(sm + LY::UF), LY::UST,
                                  (const float*)(sm + LY::GL), (const u16*)(sm + LY::SB),
                                  (u16*)(sm + LY::VNT), t0, L, hv, 0);
        __syncthreads();
#if PROBE & 256
        c0 = clock64();
        c_state += c0 - c1;
#endif
        if (L == CH) maybe_checkpoint<VD, NTH / 32>(p, accS, n, hv, (i64)(c + 1) * CH, 0);
    }
    if (len == 0) load_state<VD, NTH / 32>(p, accS, p.state_in, p.s_in_dt, slot0, 0);  // (passes through)
#if PROBE & 256
    if (threadIdx.x == 0 && (blockIdx.x + 7 * blockIdx.y) % 61 == 5)
        printf("TLF blk=%d,%d len=%d: intra %lld state %lld cycles\n", (int)blockIdx.x, (int)blockIdx.y, len,
               c_intra, c_state);
#endif
    const i64 row = final_row(p, n);
    if (row >= 0) store_state<VD, NTH / 32>(p, accS, p.state_out, p.s_out_dt, row * p.HV + hv, 0);
}

// ------------------------------------------------------------------- the fused T-form (gdn)
// grid (HV, N), NTH threads (two CTAs per SM), dynamic shared memory FTLay::TOTAL. One CTA per
// (sequence, value head) walks its chunks: the T-form intra stage into shared memory, then for
// each 64-column V tile of the state (S0 = the state before the chunk):
//   1. S0 tile loaded once (f32 registers, accumulator layout), Sb = bf16(S0), the V tile;
//      X = K·S0 (stored negated, bf16, over Sb) and O = FQ ⊙ (Q·S0) (registers)
//   2. V_new = T_u,hi V + T_u,lo V + T_w (-X)                  (f32 accumulators)
//   3. O += P·V_new, o stored; 4. S = e^Γlast S0 + Kᵀ (FK ⊙ V_new) onto the S0 registers
// No state lives in registers across the intra stage (two CTAs per SM: 128 registers), so the
// state between chunks is the f32 final-state row itself (the host takes this kernel only where
// the final state is stored in f32; an in-place pool is safe: every element is read before the
// same thread writes it, and the S0 tile of a V tile is read before any write to it).
// Rows past L: q, k rows and β are zero, so they add nothing; o rows < L are stored.
// Offsets of the fused T-form's state tile accesses without per-element index arithmetic: in
// both layouts an element's offset is linear in the loop counters (strides from state_off).
struct FtStride {
    i64 base;   // element (d0, e0)
    int sd, se;  // +1 channel, +1 V column
};
__device__ __forceinline__ FtStride ft_stride(const Params& p, i64 slot, int d0, int e0) {
    const bool kv = p.layout == LAYOUT_KV;
    return FtStride{slot * KD * VD + state_off(p.layout, d0, e0, KD, VD), kv ? VD : 1, kv ? 1 : KD};
}
// The S tile in the accumulator layout of Tiles<KD, VT, NW> (a warp's tiles share one tile row,
// so tile i of a warp is 8 i columns right of its first): load (zeros without a state) / store.
// In the kv layout an accumulator pair (c, c + 1) is adjacent in memory: one 8-byte (f32) or
// 4-byte access for both, four lanes a full 32-byte sector; vk: one access an element.
// Offset (elements) of tile i from tile 0 of a warp (channel stride sd, V-column stride se): 8 i
// columns in the strips of Tiles<KD, VT, NW>, row tile i / 4 and column tile i % 4 in SQ's quadrants.
template <bool SQ>
__device__ __forceinline__ i64 ft_tile_off(int i, int sd, int se) {
    return SQ ? (i64)(16 * (i >> 2)) * sd + (i64)(8 * (i & 3)) * se : (i64)(8 * i) * se;
}
template <int VT, int NW, bool SQ = false>
__device__ __forceinline__ void ft_ld_s(const Params& p, float (&acc)[Tiles<KD, VT, NW>::PER][4],
                                        const void* base, int dt, i64 slot, int v0) {
    typedef Tiles<KD, VT, NW> TS;
    static_assert(SQ || TS::NT % TS::PER == 0, "a warp's tiles in one tile row");
    if (base == nullptr || slot < 0) {
        zero_acc(acc);
        return;
    }
    int r, c;
    s_rc<VT, NW, SQ>(threadIdx.x >> 5, threadIdx.x & 31, 0, r, c);
    constexpr bool CPM = SQ && FT_CPERM;
    const FtStride st = ft_stride(p, slot, r, v0 + (CPM ? cperm(c) : c));
    with_dt(dt, [&](auto D) {
        constexpr int DT = decltype(D)::value;
        if constexpr (CPM) {
            // (row tile rt, row half hf: the lane's 8 consecutive physical columns are its
            // column tiles ct = 0..3, pairs 2 ct, 2 ct + 1)
            const bool vec = st.se == 1 && al16(base);
#pragma unroll
            for (int rt = 0; rt < 2; ++rt)
#pragma unroll
                for (int hf = 0; hf < 2; ++hf) {
                    const i64 o = st.base + (i64)(16 * rt + 8 * hf) * st.sd;
                    float f[8];
                    if (vec) {
                        ld8<DT>(base, o, f);
                    } else {
#pragma unroll
                        for (int j = 0; j < 8; ++j) f[j] = ldt<DT>(base, o + (i64)j * st.se);
                    }
#pragma unroll
                    for (int ct = 0; ct < 4; ++ct) {
                        acc[4 * rt + ct][2 * hf] = f[2 * ct];
                        acc[4 * rt + ct][2 * hf + 1] = f[2 * ct + 1];
                    }
                }
        } else if (st.se == 1) {
#pragma unroll
            for (int i = 0; i < TS::PER; ++i) {
                const i64 o = SQ ? st.base + ft_tile_off<true>(i, st.sd, 1) : st.base + 8 * i;
                float x[2], y[2];
                ldv<DT, 2>(base, o, x);
                ldv<DT, 2>(base, o + 8 * st.sd, y);
                acc[i][0] = x[0], acc[i][1] = x[1], acc[i][2] = y[0], acc[i][3] = y[1];
            }
        } else {
#pragma unroll
            for (int i = 0; i < TS::PER; ++i) {
                const i64 o = SQ ? st.base + ft_tile_off<true>(i, st.sd, st.se) : st.base + (i64)(8 * i) * st.se;
                acc[i][0] = ldt<DT>(base, o);
                acc[i][1] = ldt<DT>(base, o + st.se);
                acc[i][2] = ldt<DT>(base, o + 8 * st.sd);
                acc[i][3] = ldt<DT>(base, o + 8 * st.sd + st.se);
            }
        }
    });
}
template <int VT, int NW, bool SQ = false>
__device__ __forceinline__ void ft_st_s(const Params& p, const float (&acc)[Tiles<KD, VT, NW>::PER][4], void* base,
                                        int dt, i64 slot, int v0) {
    typedef Tiles<KD, VT, NW> TS;
    int r, c;
    s_rc<VT, NW, SQ>(threadIdx.x >> 5, threadIdx.x & 31, 0, r, c);
    constexpr bool CPM = SQ && FT_CPERM;
    const FtStride st = ft_stride(p, slot, r, v0 + (CPM ? cperm(c) : c));
    with_dt(dt, [&](auto D) {
        constexpr int DT = decltype(D)::value;
        if constexpr (CPM) {  // (as in ft_ld_s)
            const bool vec = st.se == 1 && al16(base);
#pragma unroll
            for (int rt = 0; rt < 2; ++rt)
#pragma unroll
                for (int hf = 0; hf < 2; ++hf) {
                    const i64 o = st.base + (i64)(16 * rt + 8 * hf) * st.sd;
                    float f[8];
#pragma unroll
                    for (int ct = 0; ct < 4; ++ct) {
                        f[2 * ct] = acc[4 * rt + ct][2 * hf];
                        f[2 * ct + 1] = acc[4 * rt + ct][2 * hf + 1];
                    }
                    if (vec) {
                        st8<DT>(base, o, f);
                    } else {
#pragma unroll
                        for (int j = 0; j < 8; ++j) st1<DT>(base, o + (i64)j * st.se, f[j]);
                    }
                }
        } else if (st.se == 1) {
#pragma unroll
            for (int i = 0; i < TS::PER; ++i) {
                const i64 o = SQ ? st.base + ft_tile_off<true>(i, st.sd, 1) : st.base + 8 * i;
                st2<DT>(base, o, acc[i][0], acc[i][1]);
                st2<DT>(base, o + 8 * st.sd, acc[i][2], acc[i][3]);
            }
        } else {
#pragma unroll
            for (int i = 0; i < TS::PER; ++i) {
                const i64 o = SQ ? st.base + ft_tile_off<true>(i, st.sd, st.se) : st.base + (i64)(8 * i) * st.se;
                st1<DT>(base, o, acc[i][0]);
                st1<DT>(base, o + st.se, acc[i][1]);
                st1<DT>(base, o + 8 * st.sd, acc[i][2]);
                st1<DT>(base, o + 8 * st.sd + st.se, acc[i][3]);
            }
        }
    });
}
// L2 prefetches for the fused T-form (one bulk prefetch a row, threads 0-255): the V rows of
// chunk [t0, t0 + L), read after its intra stage, and the q, k (if qk) and v rows of the next
// chunk [t1, t1 + L1) (L1 = 0: none). (q, k and v are 16-byte aligned, rows a multiple of 16
// bytes.)
__device__ __forceinline__ void ft_prefetch(const Params& p, int hv, int t0, int L, int t1, int L1, bool qk) {
    const int tid = threadIdx.x, r = tid & 63, part = tid >> 6;
    const int es = p.qkv_dt == DT_F32 ? 4 : 2;
    const int h = hv / p.group;
    static_assert(NTH == 256, "four row parts of 64");
    if (part == 0) {
        if (r < L) prefetch_l2((const char*)p.v + ((i64)(t0 + r) * p.HV + hv) * VD * es, (u32)(VD * es));
    } else if (r < L1) {
        const i64 t = t1 + r;
        if (part == 1) {
            if (qk) prefetch_l2((const char*)p.q + (t * p.H + h) * KD * es, (u32)(KD * es));
        } else if (part == 2) {
            if (qk) prefetch_l2((const char*)p.k + (t * p.H + h) * KD * es, (u32)(KD * es));
        } else {
            prefetch_l2((const char*)p.v + (t * p.HV + hv) * VD * es, (u32)(VD * es));
        }
    }
}
// The initial state of (n, hv) to L2 (one bulk prefetch; thread-uniform arguments, any thread).
__device__ __forceinline__ void ft_prefetch_h0(const Params& p, int n, int hv) {
    const i64 row = initial_row(p, n);
    if (p.state_in == nullptr || row < 0) return;
    const int es = p.s_in_dt == DT_F32 ? 4 : 2;
    const char* a = (const char*)p.state_in + (row * p.HV + hv) * KD * VD * es;
    if (((unsigned long long)a & 15) == 0) prefetch_l2(a, (u32)(KD * VD * es));  // (bulk: 16-B aligned)
}
// A persistent CTA's next item (n, hv): its first chunk's q, k and v rows (MODE_FT_PF_QKV) and
// its initial state (MODE_FT_PF_H0) to L2.
__device__ __forceinline__ void ft_prefetch_item(const Params& p, int n, int hv) {
    if ((p.mode & MODE_FT_PF_H0) && threadIdx.x == 0) ft_prefetch_h0(p, n, hv);
    if (!(p.mode & MODE_FT_PF_QKV)) return;
    const i64 bos = seq_start(p, n);
    ft_prefetch(p, hv, 0, 0, (int)bos, imin(CH, (int)(seq_start(p, n + 1) - bos)), true);
}
// The item's values in shared memory (FtItem at the stash's end), read where used: registers
// are the fused T-form's limit (two CTAs an SM), and values kept across its barriers spill.
struct FtItem {
    i64 row0, frow;  // initial and final state rows (-1: none)
    int bos, len, n, hv;
    int it;          // the item's index (the persistent loop's counter)
};
// One item of the fused T-form: sequence n, value head hv. (Running the value heads of a GVA
// group in one CTA, q and k loaded once a chunk as the small-bh intra kernel does, measured
// slower here: s16a, 256x64 0.936 against 0.899 ms; not kept.)
// PIPE (`{op}_prefill_fusedtq`, the host's MODE_FT_PIPE): the first V tile's S0 and V rows are
// loaded during the intra stage (after T's diagonal blocks, intra_chunk's `early`), so their
// latency overlaps the merges and T'. The V rows are held as raw 16-bit words where the input type
// is the mma type (no conversion, so nothing waits on them early); f32 inputs load them as before.
// (Loading the next tile's S0 under this tile's o product as well spilled 48-164 bytes: the
// spill stores of loaded registers wait for the loads; s17a, 256x64 0.895 against 0.880 ms.)
// (diagnosis, PROBE: 32768 PIPE without the early loads; 65536 PIPE with V loaded and converted
// as without PIPE)
// (the first reference if B, else the second; both of the caller's type)
template <bool B, typename X, typename Y>
__device__ __forceinline__ auto& pick(X& x, Y& y) {
    if constexpr (B) return x;
    else return y;
}
#define FT_VRAW ((PROBE & 65536) == 0)
#define FT_NOEARLY ((PROBE & 32768) != 0)
// o rows < L of the chunk at token t0 (value head hv, columns v0 + the quadrant's) from a
// quadrant accumulator (mma_quad), in the output dtype.
__device__ __forceinline__ void ft_store_o_quad(const Params& p, const float (&acc)[8][4], int t0, int L, int hv,
                                                int v0, int quad, int lane) {
    with_dt(p.out_dt, [&](auto D) {
        constexpr int DT = decltype(D)::value;
        if constexpr (FT_CPERM) {  // (internal columns: a lane's 8 physical columns of a row)
            const bool vec = al16(p.o);
            int r, cc;
            quad_rc(quad, lane, 0, r, cc);
            const i64 ob = ((i64)(t0 + r) * p.HV + hv) * VD + v0 + cperm(cc);
#pragma unroll
            for (int rt = 0; rt < 2; ++rt)
#pragma unroll
                for (int hf = 0; hf < 2; ++hf) {
                    const int rr = r + 16 * rt + 8 * hf;
                    if (rr >= L) continue;
                    const i64 o = ob + (i64)(16 * rt + 8 * hf) * p.HV * VD;
                    float f[8];
#pragma unroll
                    for (int ct = 0; ct < 4; ++ct) {
                        f[2 * ct] = acc[4 * rt + ct][2 * hf];
                        f[2 * ct + 1] = acc[4 * rt + ct][2 * hf + 1];
                    }
                    if (vec) {
                        st8<DT>(p.o, o, f);
                    } else {
#pragma unroll
                        for (int ct = 0; ct < 4; ++ct) st2<DT>(p.o, o + 2 * ct, f[2 * ct], f[2 * ct + 1]);
                    }
                }
            return;
        }
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            int r, cc;
            quad_rc(quad, lane, i, r, cc);
            const i64 o0 = ((i64)(t0 + r) * p.HV + hv) * VD + v0 + cc;
            if (r < L) st2<DT>(p.o, o0, acc[i][0], acc[i][1]);
            if (r + 8 < L) st2<DT>(p.o, o0 + (i64)8 * p.HV * VD, acc[i][2], acc[i][3]);
        }
    });
}
// QUAD (`{op}_prefill_fusedtr`, MODE_FT_QUAD, with PIPE): the state products in quadrants
// (mma_quad), two groups of four warps side by side: warps 0-3 X = K·S0 while warps 4-7 build
// U = T_u V; then warps 0-3 Q·S0 (kept as o's accumulator) while warps 4-7 finish V_new = U -
// T_w X; then warps 0-3 o = FQ ⊙ Q·S0 + P V_new; the S update as before over all eight. Each
// product's operands are read from shared memory in 32 x 32 warp tiles: ~30 % fewer
// shared-memory bytes a V tile than the 16 x 32 tiles of eight warps.
template <bool PIPE, bool QUAD = false>
__device__ void fused_t_item(const Params& p, char* sm, int it, int n, int hv) {
    typedef Lay<false, true> LY;
    typedef FTLay F;
    constexpr int NW = NTH / 32, VT = F::VT, VTP = F::VTP;
    typedef Tiles<CH, VT, NW> TO;
    typedef Tiles<KD, VT, NW> TS;
    constexpr bool SQ = QUAD && FT_SQ;  // (the S tile in quadrants: s_rc)
    constexpr bool CPM = SQ && FT_CPERM;  // (internal V columns: cperm)
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    static_assert(sizeof(FtItem) <= 48 && LY::STASH + 6 * 64 * 4 + 48 <= LY::TOTAL, "FtItem in the stash");
    FtItem* itm = (FtItem*)(sm + LY::STASH + 6 * 64 * 4);
    __syncthreads();  // (the previous item's threads are done with itm)
    if (tid == 0) {
        const i64 bos = seq_start(p, n);
        *itm = FtItem{initial_row(p, n), final_row(p, n), (int)bos, (int)(seq_start(p, n + 1) - bos), n, hv, it};
        if (!(p.mode & MODE_FT_NO_H0PF)) ft_prefetch_h0(p, n, hv);
    }
    __syncthreads();
    const int len = itm->len;
    if (len == 0) {  // (the state passes through)
        const i64 row0 = itm->row0, frow = itm->frow;
        if (frow >= 0)
            for (int v0 = 0; v0 < VD; v0 += VT) {
                float s[TS::PER][4];
                load_state<VT, NW>(p, s, p.state_in, p.s_in_dt, row0 < 0 ? -1 : row0 * p.HV + hv, v0);
                store_state<VT, NW>(p, s, p.state_out, p.s_out_dt, frow * p.HV + hv, v0);
            }
        return;
    }
    const u16* Ks = (const u16*)(sm + LY::WM);
    const u16* Qs = (const u16*)(sm + LY::QD);
    const u16* Pm = (const u16*)(sm + LY::KDT);
    const u16* Tw = (const u16*)(sm + F::TW);
    const u16* Tuh = (const u16*)(sm + LY::TB);
    const u16* Tul = Tuh + 64 * CP;
    const float* fac = (const float*)(sm + LY::FAC);
    // (the S region: Sb, then -X after step 1 and the FK-scaled V_new after step 2; XV: the V
    // tile, then V_new after step 2)
    u16* Sb = (u16*)(sm + F::SR);
    u16* Xn = Sb;
    u16* Vs = Sb + 64 * VTP;
    u16* XV = (u16*)(sm + F::XV);
    u16* Vh = XV;
    const int nch = (len + CH - 1) / CH;
    constexpr int VE = 64 * VT / NTH / 4;  // groups of 4 V elements a thread
    constexpr int NVT = VD / VT;           // V tiles
    const bool vraw = PIPE && FT_VRAW && p.qkv_dt == (MMA_F16 ? DT_F16 : DT_BF16);
#if PROBE & 256
    long long ftl[5] = {0, 0, 0, 0, 0};
#endif
    // (the item's values are read from itm where used; c and nch stay in registers)
    auto t0_of = [&](int c) { return itm->bos + c * CH; };
    auto l_of = [&](int c) { return imin(CH, itm->len - c * CH); };
    auto fslot_of = [&]() { return itm->frow < 0 ? (i64)-1 : itm->frow * p.HV + itm->hv; };
#pragma unroll 1
    for (int c = 0; c < nch; ++c) {
        {
            // S0 of V tile v0 in the accumulator layout: the initial state, then the final-state
            // row (f32, written by this thread for the previous chunk); PIPE's raw V rows (rows
            // past L re-read row L - 1: T_u's columns there are zero)
            auto ld_s0 = [&](float (&s)[TS::PER][4], int v0) {
                if (c == 0)
                    ft_ld_s<VT, NW, SQ>(p, s, p.state_in, p.s_in_dt, itm->row0 < 0 ? (i64)-1 : itm->row0 * p.HV + itm->hv, v0);
                else
                    ft_ld_s<VT, NW, SQ>(p, s, p.state_out, DT_F32, fslot_of(), v0);
            };
            auto ld_vw = [&](uint2 (&w)[VE], int v0) {
                if (!vraw) return;
                const int t0 = t0_of(c), L = l_of(c), hv = itm->hv;
#pragma unroll
                for (int e = 0; e < VE; ++e) {
                    const int u = tid + NTH * e, t = u / (VT / 4), cc = 4 * (u % (VT / 4));
                    w[e] = *(const uint2*)((const u16*)p.v + ((i64)(t0 + imin(t, L - 1)) * p.HV + hv) * VD + v0 + cc);
                }
            };
            float s0p[PIPE ? TS::PER : 1][4];  // (PIPE: S0 of the tile to come, carried across tiles)
            uint2 vw[VE];
            {
                const int t0 = t0_of(c), L = l_of(c);
                if (!(p.mode & MODE_FT_NO_PF))
                    ft_prefetch(p, itm->hv, t0, L, t0 + CH, imin(CH, itm->len - (c + 1) * CH), true);
            }
#if PROBE & 256
            long long q0 = clock64();
#endif
#if !(PROBE & 8192)
            if constexpr (PIPE) {
                auto early = [&]() {
                    if (!FT_NOEARLY) {
                        ld_s0(s0p, 0);
                        ld_vw(vw, 0);
                    }
                };
                intra_chunk<false, true, true, true, decltype(early), QUAD>(p, sm, t0_of(c), l_of(c), itm->hv, nullptr, -1, 0,
                                                                            early);
            } else {
                intra_chunk<false, true, true, true>(p, sm, t0_of(c), l_of(c), itm->hv);  // (ends with a barrier)
            }
#else
            if constexpr (PIPE) {
                ld_s0(s0p, 0);
                ld_vw(vw, 0);
            }
            __syncthreads();
#endif
#if PROBE & 256
            {
                const long long q1 = clock64();
                ftl[0] += q1 - q0;
                q0 = q1;
            }
#define FTL(k)                           \
    {                                    \
        const long long q1 = clock64();  \
        ftl[k] += q1 - q0;               \
        q0 = q1;                         \
    }
#else
#define FTL(k) ((void)0)
#endif
#if PROBE & 16384
            continue;
#endif
#pragma unroll 1
            for (int vt = 0; vt < NVT; ++vt) {
                const int v0 = vt * VT;
                // Sb from S0 (kept for step 4); the V tile's rows to XV.
                float s0l[PIPE ? 1 : TS::PER][4];
                float (&s0)[TS::PER][4] = pick<PIPE>(s0p, s0l);
                if (!PIPE || vt > 0 || FT_NOEARLY) {
                    ld_s0(s0, v0);
                    ld_vw(vw, v0);
                }
                // (CPM: physical columns cc .. cc + 3 are two pairs of internal columns)
                auto st_v = [&](int t, int cc, uint2 w) {
                    if constexpr (CPM) {
                        *(u32*)(Vh + t * VTP + cperm(cc)) = w.x;
                        *(u32*)(Vh + t * VTP + cperm(cc + 2)) = w.y;
                    } else {
                        *(uint2*)(Vh + t * VTP + cc) = w;
                    }
                };
                if (vraw) {
                    write_sb<VT, NW, SQ>(s0, Sb);
#pragma unroll
                    for (int e = 0; e < VE; ++e) {
                        const int u = tid + NTH * e, t = u / (VT / 4), cc = 4 * (u % (VT / 4));
                        st_v(t, cc, vw[e]);
                    }
                } else {
                    with_dt(p.qkv_dt, [&](auto D) {
                        const int t0 = t0_of(c), L = l_of(c), hv = itm->hv;
                        constexpr int DT = decltype(D)::value;
                        float vr[VE][4];
#pragma unroll
                        for (int e = 0; e < VE; ++e) {
                            const int u = tid + NTH * e, t = u / (VT / 4), cc = 4 * (u % (VT / 4));
                            ldv<DT, 4>(p.v, ((i64)(t0 + imin(t, L - 1)) * p.HV + hv) * VD + v0 + cc, vr[e]);
                        }
                        write_sb<VT, NW, SQ>(s0, Sb);
#pragma unroll
                        for (int e = 0; e < VE; ++e) {
                            const int u = tid + NTH * e, t = u / (VT / 4), cc = 4 * (u % (VT / 4));
                            st_v(t, cc, make_uint2(pack_mma(vr[e][0], vr[e][1]), pack_mma(vr[e][2], vr[e][3])));
                        }
                    });
                }
                __syncthreads();
                FTL(1);
                if constexpr (QUAD) {
                    // (phase 1: warps 0-3 X, warps 4-7 U = T_u V; phase 2: warps 0-3 Q·S0, warps
                    // 4-7 V_new = U - T_w X, with -X in XV (the V tile is dead after phase 1);
                    // phase 3: warps 0-3 o. Session 18: this order against X beside Q·S0, then
                    // V_new and o each on one group: 256x64 0.841 against 0.851 ms)
                    const bool kg = warp < 4;  // (warp-uniform)
                    const int quad = warp & 3;
                    float acc[8][4];
                    zero_acc(acc);
                    if (kg) mma_quad<KD>(acc, Ks, nullptr, KP, Sb, VTP, quad, lane);
                    else mma_quad<CH, true, !NO_TRI_QUAD>(acc, Tuh, Tul, CP, Vh, VTP, quad, lane);
                    __syncthreads();  // (the V tile is dead: -X goes over it)
                    if (kg) {
#pragma unroll
                        for (int i = 0; i < 8; ++i) {
                            int r, cc;
                            quad_rc(quad, lane, i, r, cc);
                            *(u32*)(XV + r * VTP + cc) = pack_mma(-acc[i][0], -acc[i][1]);
                            *(u32*)(XV + (r + 8) * VTP + cc) = pack_mma(-acc[i][2], -acc[i][3]);
                        }
                    }
                    __syncthreads();
                    FTL(2);
                    if (kg) {
                        zero_acc(acc);
                        mma_quad<KD>(acc, Qs, nullptr, KP, Sb, VTP, quad, lane);
#pragma unroll
                        for (int i = 0; i < 8; ++i) {
                            int r, cc;
                            quad_rc(quad, lane, i, r, cc);
                            const float f0 = fac[r], f1 = fac[r + 8];
                            acc[i][0] *= f0;
                            acc[i][1] *= f0;
                            acc[i][2] *= f1;
                            acc[i][3] *= f1;
                        }
                    } else {
                        mma_quad<CH, false, !NO_TRI_QUAD>(acc, Tw, nullptr, CP, XV, VTP, quad, lane);
                    }
                    __syncthreads();  // (Sb and -X are dead)
                    if (!kg) {
#pragma unroll
                        for (int i = 0; i < 8; ++i) {
                            int r, cc;
                            quad_rc(quad, lane, i, r, cc);
                            const float k0 = fac[CH + r], k1 = fac[CH + r + 8];
                            *(u32*)(XV + r * VTP + cc) = pack_mma(acc[i][0], acc[i][1]);
                            *(u32*)(XV + (r + 8) * VTP + cc) = pack_mma(acc[i][2], acc[i][3]);
                            *(u32*)(Vs + r * VTP + cc) = pack_mma(k0 * acc[i][0], k0 * acc[i][1]);
                            *(u32*)(Vs + (r + 8) * VTP + cc) = pack_mma(k1 * acc[i][2], k1 * acc[i][3]);
                        }
                    }
                    __syncthreads();
                    FTL(3);
                    if (kg) {
                        mma_quad<CH, false, !NO_TRI_QUAD>(acc, Pm, nullptr, CP, XV, VTP, quad, lane);
                        ft_store_o_quad(p, acc, t0_of(c), l_of(c), itm->hv, v0, quad, lane);
                    }
                } else {
                float acc[TO::PER][4], accO[TO::PER][4];
                zero_acc(acc);
                zero_acc(accO);
                // (two products: with B shared (mma_tiles2) the fused T-form spilled 28 bytes, and
                // measured 0.888 against 0.873 ms at 256x64, s17b)
                mma_tiles<CH, VT, KD, NW, false, true>(acc, Ks, KP, Sb, VTP, warp, lane);
                mma_tiles<CH, VT, KD, NW, false, true>(accO, Qs, KP, Sb, VTP, warp, lane);
                __syncthreads();  // (Sb is dead: -X goes over it)
#pragma unroll
                for (int i = 0; i < TO::PER; ++i) {
                    int r, cc;
                    tile_rc<CH, VT, NW>(warp, lane, i, r, cc);
                    *(u32*)(Xn + r * VTP + cc) = pack_mma(-acc[i][0], -acc[i][1]);
                    *(u32*)(Xn + (r + 8) * VTP + cc) = pack_mma(-acc[i][2], -acc[i][3]);
                }
                scale_rows<CH, VT, NW>(accO, fac, warp, lane);
                __syncthreads();
                FTL(2);
                zero_acc(acc);
                mma_tiles2<CH, VT, CH, NW, false, true>(acc, acc, Tuh, Tul, CP, Vh, VTP, warp, lane);
                mma_tiles<CH, VT, CH, NW, false, true>(acc, Tw, CP, Xn, VTP, warp, lane);
                __syncthreads();  // (X and the V tile are dead)
#pragma unroll
                for (int i = 0; i < TO::PER; ++i) {
                    int r, cc;
                    tile_rc<CH, VT, NW>(warp, lane, i, r, cc);
                    const float k0 = fac[CH + r], k1 = fac[CH + r + 8];
                    *(u32*)(XV + r * VTP + cc) = pack_mma(acc[i][0], acc[i][1]);
                    *(u32*)(XV + (r + 8) * VTP + cc) = pack_mma(acc[i][2], acc[i][3]);
                    *(u32*)(Vs + r * VTP + cc) = pack_mma(k0 * acc[i][0], k0 * acc[i][1]);
                    *(u32*)(Vs + (r + 8) * VTP + cc) = pack_mma(k1 * acc[i][2], k1 * acc[i][3]);
                }
                __syncthreads();
                FTL(3);
                mma_tiles<CH, VT, CH, NW, false, true>(accO, Pm, CP, XV, VTP, warp, lane);
                store_o_rows<VT, NW>(p, accO, t0_of(c), l_of(c), itm->hv, v0, warp, lane);
                }
                // (S = e^Γlast S0 + Kᵀ Vs, accumulated onto the scaled S0 in place)
                {
                    float (&accS)[TS::PER][4] = s0;
                    const float gl = fac[2 * CH];
#pragma unroll
                    for (int i = 0; i < TS::PER; ++i)
#pragma unroll
                        for (int e = 0; e < 4; ++e) accS[i][e] *= gl;
                    if constexpr (SQ) mma_squad<CH>(accS, Ks, KP, Vs, VTP, warp, lane);
                    else mma_tiles<KD, VT, CH, NW, true, true>(accS, Ks, KP, Vs, VTP, warp, lane);
                    if (l_of(c) == CH) maybe_checkpoint<VT, NW, SQ>(p, accS, itm->n, itm->hv, (i64)(c + 1) * CH, v0);
                    const i64 fslot = fslot_of();
                    if (fslot >= 0) ft_st_s<VT, NW, SQ>(p, accS, p.state_out, c + 1 == nch ? p.s_out_dt : DT_F32, fslot, v0);
                }
                __syncthreads();  // (Sb, Vs and XV are rewritten by the next tile or chunk)
                FTL(4);
            }
        }
    }
#undef FTL
#if PROBE & 256
    if (tid == 0 && (hv + 7 * n) % 61 == 5)
        printf("TLT blk=%d,%d len=%d: intra %lld loads %lld step1 %lld step2 %lld step34 %lld cycles\n", hv, n, len,
               ftl[0], ftl[1], ftl[2], ftl[3], ftl[4]);
#endif
}
// The kernels: one item a CTA (grid (HV, N)) or, PERSIST (`{op}_prefill_fusedtp`, the host's
// MODE_FT_PERSIST), persistent CTAs (grid (P, 1), P from the host) taking items it = blockIdx.x +
// i P in order (item it: sequence it / HV, head it % HV), prefetching the next one's inputs (its
// counter goes through shared memory, FtItem::it: registers are short). Two entry points, so
// that each inlines the item once. PROBE 256: the entry and exit times of the CTAs on SM 0 (TLS
// lines: global timer ns and clock64 cycles, so the host sees the gaps and the clock rate).
template <bool PERSIST, bool PIPE = false, bool QUAD = false>
__device__ void fused_t(const Params& p) {
    extern __shared__ __align__(16) char sm[];
#if PROBE & 256
    const long long c0 = clock64();
    const u64 g0 = gtimer();
#endif
    if constexpr (!PERSIST) {
        fused_t_item<PIPE, QUAD>(p, sm, blockIdx.y * p.HV + blockIdx.x, blockIdx.y, blockIdx.x);
    } else {
        const FtItem* itm = (const FtItem*)(sm + Lay<false, true>::STASH + 6 * 64 * 4);
        const int items = p.HV * p.N;
#pragma unroll 1
        for (int it = blockIdx.x; it < items; it = itm->it + gridDim.x) {
            const int nx = it + gridDim.x;
            if (nx < items) ft_prefetch_item(p, nx / p.HV, nx % p.HV);
            fused_t_item<false>(p, sm, it, it / p.HV, it % p.HV);
        }
    }
#if PROBE & 256
    if (threadIdx.x == 0 && sm_id() == 0)
        printf("TLS blk=%d,%d start=%llu end=%llu cycles=%lld\n", (int)blockIdx.x, (int)blockIdx.y, g0, gtimer(),
               clock64() - c0);
#endif
}

// ------------------------------------------------------------------------------ small-bh
// Intra kernel: grid (table_rows, HV), NTH threads, dynamic shared memory Lay<KDA, true>::TOTAL.
// Row r of the chunk table (sentinel rows skipped) -> workspace block (r, hv) in WLay layout.
// The T-form with MODE_INTRA_PAIR: grid (table_rows, HV / group), the CTA writes the blocks of
// every value head of its GVA group in turn; q and k are loaded once (intra_chunk's `pair`).
template <bool KDA, bool TONLY = false>
__device__ void smallbh_intra(const Params& p) {
    extern __shared__ __align__(16) char sm[];
    if constexpr (TONLY) pdl_trigger();  // (MODE_PDL: the state pass may launch; a no-op otherwise)
    const int row = blockIdx.x;
    const int n = p.chunk_table[2 * row], c = p.chunk_table[2 * row + 1];
    if (n < 0) return;
    const i64 bos = seq_start(p, n), eos = seq_start(p, n + 1);
    const int t0 = (int)bos + c * CH;
    const int L = imin(CH, (int)(eos - t0));
    if (!(TONLY && (p.mode & MODE_INTRA_PAIR)) || p.group == 1) {
        const int hv = blockIdx.y;
        intra_chunk<KDA, true, TONLY>(p, sm, t0, L, hv, (char*)p.work + ((i64)row * p.HV + hv) * WLay::BLOCK);
        return;
    }
    if constexpr (TONLY) {
        // (t0 and L through shared memory, read at each head's top: values kept in registers
        // across the heads' stages spill, ptxas)
        int* tl = (int*)(sm + Lay<KDA, true>::STASH + 6 * 64 * 4);
        if (threadIdx.x == 0) tl[0] = t0, tl[1] = L;
        __syncthreads();
#pragma unroll 1
        for (int j = 0; j < p.group; ++j) {
            const int hv = (int)blockIdx.y * p.group + j;
            char* dst = (char*)p.work + ((i64)blockIdx.x * p.HV + hv) * WLay::BLOCK;
            // (no barrier between heads: intra_chunk's last shared reads precede its last
            // barrier, and thread 0 waits for the bulk copies' reads before the next head's first)
            const bool defer = p.mode & MODE_INTRA_DEFER;
            const int pair = (j > 0 ? PAIR_REUSE : 0) | (j + 1 < p.group ? PAIR_NEXT : 0) | ((j & 1) ? PAIR_SLOT : 0) |
                             (defer && j + 1 < p.group ? PAIR_DEFER : 0) | (defer && j > 0 ? PAIR_WAITPREV : 0);
            intra_chunk<KDA, true, TONLY>(p, sm, tl[0], tl[1], hv, dst, -1, pair);  // (writes the whole block)
        }
    }
}

// ---------------------------------------------------- the overlapped T-form pair (few pairs)
// Where the state pass has few CTAs (one per 64 V columns, value head and sequence: gdn 16/32
// 1x8192 has 64 on 132 SMs) its serial chain leaves most SMs idle while the intra kernel, before
// it, has them all. The overlapped pair runs both at once:
//  * the intra kernel is persistent (two CTAs per SM) and takes (row, value head) items in row
//    order from a counter (sync[0]); after an item's block has reached global memory it sets the
//    item's ready flag (sync[SYNC_FLAGS + item], release; thread 0, after the next item's loads);
//  * it triggers the state pass at once (programmatic dependent launch: that kernel is launched
//    with the PDL attribute on the same stream and may start when every intra CTA has started);
//  * once ov_tau items are taken, the intra CTAs of the first ov_free SMs to notice stop taking
//    work and exit, so the state CTAs (ov_free of them, too large to share an SM with intra
//    CTAs) land there while the other SMs go on with the intra work;
//  * the state pass's fetch thread waits for a chunk's ready flag (acquire) before its workspace
//    loads, and the state CTAs wait for the intra grid's completion before they exit.
// No deadlock: the state pass starts only after all intra CTAs have started, and one intra CTA
// at least never leaves early (a leave ticket below gridDim.x - 1), so every item is done. The
// varlen kernel zeroes sync each call.
template <bool KDA>
__device__ void smallbh_intra_ov(const Params& p) {
    static_assert(!KDA, "the T-form is gdn's");
    extern __shared__ __align__(16) char sm[];
    // (the item, after the arena: the host adds 16 bytes to the intra kernel's shared memory;
    // prefill kernels have no static shared memory, see the host's function attributes)
    int& item = *(int*)(sm + align16(Lay<false, true>::TOTAL));
    pdl_trigger();
    const u32 smid = sm_id();
    const int total = p.table_rows * p.HV;
    int pending = -1;  // thread 0: the item whose flag is not set yet
    const u64 tstart = p.ov_trace ? gtimer() : 0;
    int done = 0;
    for (;;) {
        if (threadIdx.x == 0) {
            // Past ov_tau items, the first ov_free SMs to get here are freed for the state pass:
            // the first CTA of an SM decides for both (a rule on the id itself, id < ov_free,
            // would assume dense SM ids, which PTX does not promise).
            bool leave = false;
            // A CTA leaves only with a ticket below gridDim.x - 1: one at least stays, whatever
            // the CTAs' placement (a small grid may sit entirely on freed SMs).
            if (smid < SYNC_SMS && *(volatile int*)p.sync >= p.ov_tau) {
                int* mark = p.sync + SYNC_MARKS + smid;
                int m = *(volatile int*)mark;
                if (m == 0 && atomicCAS(mark, 0, 3) == 0) {
                    m = atomicAdd(p.sync + 1, 1) < p.ov_free ? 1 : 2;
                    st_release(mark, m);
                }
                while (m == 0 || m == 3) m = ld_acquire(mark);
                if (m == 1) {
                    leave = atomicAdd(p.sync + 2, 1) < (int)gridDim.x - 1;
                    if (!leave) {
                        atomicSub(p.sync + 2, 1);
                        atomicExch(mark, 2);  // (the SM stays: no more tickets asked here)
                    }
                }
            }
            int it = -1;
            if (!leave) {
                it = atomicAdd(p.sync, 1);
                if (it >= total) it = -1;
            }
            if (it < 0 && pending >= 0) publish_ready(p, pending);
            if (it < 0 && p.ov_trace && blockIdx.x < TRACE_INTRA) {
                u64* r = trace_base(p) + 4 * blockIdx.x;
                r[0] = smid;
                r[1] = tstart;
                r[2] = gtimer();
                r[3] = (u64)done | ((u64)leave << 32);
            }
            item = it;
        }
        __syncthreads();
        const int it = item;
        if (it < 0) return;
        const int row = it / p.HV, hv = it - row * p.HV;
        const int n = p.chunk_table[2 * row], c = p.chunk_table[2 * row + 1];
        if (n >= 0) {
            const i64 bos = seq_start(p, n), eos = seq_start(p, n + 1);
            const int t0 = (int)bos + c * CH;
            const int L = imin(CH, (int)(eos - t0));
            // (publishes the previous item's flag after its loads; this item's at the next)
            intra_chunk<false, true, true>(p, sm, t0, L, hv, (char*)p.work + (i64)it * WLay::BLOCK, pending);
            pending = it;
            ++done;
        }
        __syncthreads();  // (`item` and the shared memory are reused)
    }
}

// ------------------------------------------------------------------- small-bh state pass (v7)
// Register-state design (the layout FlashInfer/FlashQLA use with wgmma, here on mma.sync): the
// pass works on transposes, Sᵀ (V x K) in f32 mma accumulators, held in registers for the whole
// sequence, and splits each 16 V columns between a state warp and an output warp:
//   state warp:  (W·S)ᵀ = Sᵀ Wᵀ, A = bf16(Sᵀ) from the accumulators; V_newᵀ = Uᵀ - (W·S)ᵀ;
//                Sᵀ <- Sᵀ diag(e^Γlast) + V_newᵀ k̃ (V_newᵀ as the A operand, from registers)
//   output warp: oᵀ = Sᵀ q̃ᵀ + V_newᵀ Pᵀ, with bf16(Sᵀ) and V_newᵀ handed over through shared
//                memory as ready A fragments (one 16-byte load per lane and k step)
// so the serial chain (two products a chunk) runs on one warp without a barrier and the other
// half of the tensor-core work on another SM sub-partition. The B operands (W, q̃, k̃, P) come from
// the stage with ldmatrix. v6 kept S in shared memory as the B operand of 16 warps with one 16x8
// tile each: every fragment was re-read by 4 warps and the pass waited on the shared-memory pipe
// (2.7 us per chunk); v7 with one warp doing all four products: 1.5 us (its HMMA issue alone is
// ~1,350 cycles a chunk at one per 6 cycles).
// A chunk's workspace block (WLay: W, q̃, k̃, P, e^Γlast already padded, then the tile's Uᵀ) comes
// in with two bulk copies on an mbarrier, NST - 1 chunks ahead.
template <int VT>
struct RLay {
    static constexpr int NW = VT / 16;          // warp pairs (state warp w, output warp NW + w)
    static constexpr int UB = 64 * VT * 4;      // the tile's Uᵀ fragments
    static constexpr int STAGE = WLay::MAIN + UB;
    static constexpr int SFR = (KD / 16) * 512; // bf16(Sᵀ) A fragments of one warp pair [KD/16][32][4] u32
    static constexpr int VFR = 4 * 512;         // V_newᵀ A fragments [4][32][4] u32
    static constexpr int XTRA = NW * (2 * SFR + VFR) + 3 * 8;
    static constexpr int NST = 3 * STAGE + XTRA <= 232448 ? 3 : 2;
    static constexpr int SB = NST * STAGE;      // [NW][2 (chunk parity)] S fragments
    static constexpr int VB = SB + NW * 2 * SFR; // [NW] V_new fragments
    static constexpr int MB = VB + NW * VFR;    // NST u64 mbarriers
    static constexpr int TOTAL = MB + NST * 8;
    static_assert(VT % 16 == 0 && VD % VT == 0, "V tile");
    static_assert(TOTAL <= 232448, "shared memory of the small-bh state pass");
};

// Calls f(nt, e, d, v) for accumulator element e of tile nt of this lane: Sᵀ row v = vw + g +
// 8 (e >> 1), column d = 8 nt + 2 q + (e & 1) (g = lane / 4, q = lane % 4).
template <typename F>
__device__ __forceinline__ void st_elems(int vw, F&& f) {
    const int lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
#pragma unroll
    for (int nt = 0; nt < KD / 8; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) f(nt, e, 8 * nt + 2 * q + (e & 1), vw + g + 8 * (e >> 1));
}
__device__ __forceinline__ void load_state_r(const Params& p, float (&acc)[KD / 8][4], i64 slot, int vw) {
    if (p.state_in == nullptr || slot < 0) {
        zero_acc(acc);
        return;
    }
    with_dt(p.s_in_dt, [&](auto D) {
        constexpr int DT = decltype(D)::value;
        st_elems(vw, [&](int nt, int e, int d, int v) {
            acc[nt][e] = ldt<DT>(p.state_in, slot * KD * VD + state_off(p.layout, d, v, KD, VD));
        });
    });
}
__device__ __forceinline__ void store_state_r(const Params& p, const float (&acc)[KD / 8][4], void* base,
                                              int dt, i64 slot, int vw) {
    with_dt(dt, [&](auto D) {
        constexpr int DT = decltype(D)::value;
        st_elems(vw, [&](int nt, int e, int d, int v) {
            st1<DT>(base, slot * KD * VD + state_off(p.layout, d, v, KD, VD), acc[nt][e]);
        });
    });
}
// The A fragment (mma type) of k step ks of Sᵀ: accumulator tiles 2 ks, 2 ks + 1 of this lane.
__device__ __forceinline__ uint4 s_frag(const float (&acc)[KD / 8][4], int ks) {
    return make_uint4(pack_mma(acc[2 * ks][0], acc[2 * ks][1]), pack_mma(acc[2 * ks][2], acc[2 * ks][3]),
                      pack_mma(acc[2 * ks + 1][0], acc[2 * ks + 1][1]),
                      pack_mma(acc[2 * ks + 1][2], acc[2 * ks + 1][3]));
}
// Named barrier `id` over `n` threads: arrive (no wait) / arrive and wait. Shared-memory writes
// before the arrive are visible to the waiting threads after their wait.
__device__ __forceinline__ void nbar_arrive(int id, int n) {
    asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(n) : "memory");
}
__device__ __forceinline__ void nbar_sync(int id, int n) {
    asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(n) : "memory");
}

// State kernel: grid (VD / VT, HV, N), VT / 8 warps, dynamic shared memory RLay<VT>::TOTAL.
// Walks the chunks of one (sequence, value head) for V columns [v0, v0 + VT). One block-wide
// barrier per chunk, after which lane 0 of the first output warp refills the stage every warp
// finished with in the previous chunk; inside a chunk, output warp NW + w waits (named barrier 1 + w) for state warp
// w's V_newᵀ. bf16(Sᵀ) alternates between two buffers by chunk parity: the state warp writes
// S_{c+1} during chunk c while its output warp may still read S_c.
// acc (16 x 64, 8 tiles) += A x B for one k step: A this lane's fragment, B stored [N][K] (row LD
// elements; non-transposed ldmatrix) from `sb` = the lane's ldmatrix address of column 0 of the step.
template <int LD>
__device__ __forceinline__ void mma_step_n64(float (&acc)[8][4], const uint4& a, u32 sb) {
#pragma unroll
    for (int np = 0; np < 4; ++np) {
        u32 b0, b1, b2, b3;
        ldsm_x4(sb + (u32)(16 * np * LD * 2), b0, b1, b2, b3);
        mma16816(acc[2 * np], a.x, a.y, a.z, a.w, b0, b1);
        mma16816(acc[2 * np + 1], a.x, a.y, a.z, a.w, b2, b3);
    }
}
// Stores o rows t0 + [0, L) of V columns [vw, vw + 16) from oᵀ accumulators (8 tiles of 16 V rows
// x 8 tokens, this lane's mma layout): oᵀ's 8x8 blocks (v, t) are transposed in registers
// (movmatrix) so that each lane stores two adjacent V columns of one token (16-bit outputs; f32
// one by one).
__device__ __forceinline__ void store_o_t(const Params& p, const float (&accO)[8][4], int t0, int L, int hv,
                                          int vw) {
    const int lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
    const int rs = p.HV * VD;  // elements from one token to the next
    const i64 obase = ((i64)t0 * p.HV + hv) * VD + vw;
    if (p.out_dt == DT_F32) {
        float* ob = (float*)p.o + obase;
#pragma unroll
        for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int t = 8 * nt + 2 * q + (e & 1);
                if (t < L) ob[t * rs + g + 8 * (e >> 1)] = accO[nt][e];
            }
        }
    } else {
        u16* ob = (u16*)p.o + obase + g * rs + 2 * q;
        const bool bf = p.out_dt == DT_BF16;
#pragma unroll
        for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const float x = accO[nt][2 * h], y = accO[nt][2 * h + 1];
                const u32 wd = movm_t(bf ? pack_bf16x2(x, y) : pack_f16x2(x, y));
                if (8 * nt + g < L) *(u32*)(ob + 8 * nt * rs + 8 * h) = wd;
            }
        }
    }
}
// Diagnosis (DELTARULE_CUDA_PROBE bit 1): only the first NST - 1 chunks are fetched (results
// wrong: the pass's time without its copies). Measured alternatives to the two bulk copies (session
// 4, bench/NOTES.md): 8 bulk copies and per-thread cp.async, both slower.
constexpr bool FETCH_NONE = (PROBE & 1) != 0;
template <bool KDA, int VT>
__device__ void smallbh_state(const Params& p) {
    typedef RLay<VT> RL;
    constexpr int NW = RL::NW;
    extern __shared__ __align__(16) char sm[];
    constexpr int NTS = KD / 8;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int q = lane & 3;
    const bool is_state = warp < NW;
    const int w = is_state ? warp : warp - NW;  // warp pair
    const int v0 = blockIdx.x * VT, hv = blockIdx.y, n = blockIdx.z;
    const int vw = v0 + 16 * w;
    uint4* Sfr = (uint4*)(sm + RL::SB + w * 2 * RL::SFR);  // [2][KD/16][32]
    uint4* Vfr = (uint4*)(sm + RL::VB + w * RL::VFR);      // [4][32]
    float accS[NTS][4];
    if (is_state) {
        load_state_r(p, accS, initial_row(p, n) < 0 ? -1 : initial_row(p, n) * p.HV + hv, vw);
#pragma unroll
        for (int ks = 0; ks < KD / 16; ++ks) Sfr[ks * 32 + lane] = s_frag(accS, ks);
    }
    const i64 bos = seq_start(p, n), eos = seq_start(p, n + 1);
    const int len = (int)(eos - bos);
    const int r0 = p.chunk_offsets[n];
    const int nch = p.chunk_offsets[n + 1] - r0;
    u64* bars = (u64*)(sm + RL::MB);
    if (threadIdx.x == 0) {
        for (int s = 0; s < RL::NST; ++s) mbar_init(bars + s, 1);
        mbar_init_fence();
    }
    // chunk c's block into stage c % NST: two bulk copies, issued by lane 0 of the first output
    // warp (it has slack; the state warps carry the chain)
    const bool fetcher = threadIdx.x == NW * 32;
    auto fetch = [&](int c) {
        const char* src = (const char*)p.work + ((i64)(r0 + c) * p.HV + hv) * WLay::BLOCK;
        char* st = sm + (c % RL::NST) * RL::STAGE;
        u64* bar = bars + c % RL::NST;
        mbar_arrive_expect(bar, RL::STAGE);
        bulk_g2s(st, src, WLay::MAIN, bar);
        bulk_g2s(st + WLay::MAIN, src + WLay::U + v0 * 64 * 4, RL::UB, bar);
    };
    __syncthreads();  // barriers initialised, S_0's fragments written
    if (fetcher)
        for (int c = 0; c < RL::NST - 1 && c < nch; ++c) fetch(c);
    // this lane's ldmatrix row addresses (see mma_tiles): B stored [N][K] (W, q̃ with row KP, P
    // with row CP; non-transposed) or [K][N] (k̃; .trans)
    const int l7 = lane & 7, l8 = (lane >> 3) & 1, l16 = lane >> 4;
    const u32 bn_kp = (u32)(((l7 + 8 * l16) * KP + 8 * l8) * 2);
    const u32 bn_cp = (u32)(((l7 + 8 * l16) * CP + 8 * l8) * 2);
    const u32 bk_kp = (u32)(((l7 + 8 * l8) * KP + 8 * l16) * 2);
    for (int c = 0; c < nch; ++c) {
        if (c > 0) __syncthreads();  // every warp is past chunk c - 1, whose stage is refilled now
        if (fetcher && c + RL::NST - 1 < nch && !(FETCH_NONE && c > 0)) {
            fence_proxy_async();
            fetch(c + RL::NST - 1);
        }
        if (!(FETCH_NONE && c >= RL::NST - 1)) mbar_wait(bars + c % RL::NST, (c / RL::NST) & 1);
        const char* st = sm + (c % RL::NST) * RL::STAGE;
        if (is_state) {
            const u32 sW = smem_addr(st + WLay::W), sK = smem_addr(st + WLay::KT);
            const float* GLs = (const float*)(st + WLay::GL);
            const float4* Ut = (const float4*)(st + WLay::MAIN) + w * 256;  // panel: 8 tiles x 32 lanes
            // (W·S)ᵀ, A = bf16(Sᵀ) one k step (16 of K) at a time
            float accV[8][4];
            zero_acc(accV);
#pragma unroll
            for (int ks = 0; ks < KD / 16; ++ks) mma_step_n64<KP>(accV, s_frag(accS, ks), sW + bn_kp + 32 * ks);
            // V_newᵀ = Uᵀ - (W·S)ᵀ as bf16 A fragments, one per 16-token step, handed over
            uint4 av[4];
#pragma unroll
            for (int kt = 0; kt < 4; ++kt) {
                const float4 u0 = Ut[(2 * kt) * 32 + lane], u1 = Ut[(2 * kt + 1) * 32 + lane];
                av[kt] = make_uint4(pack_mma(u0.x - accV[2 * kt][0], u0.y - accV[2 * kt][1]),
                                    pack_mma(u0.z - accV[2 * kt][2], u0.w - accV[2 * kt][3]),
                                    pack_mma(u1.x - accV[2 * kt + 1][0], u1.y - accV[2 * kt + 1][1]),
                                    pack_mma(u1.z - accV[2 * kt + 1][2], u1.w - accV[2 * kt + 1][3]));
                Vfr[kt * 32 + lane] = av[kt];
            }
            nbar_arrive(1 + w, 64);
            // Sᵀ <- Sᵀ diag(e^Γlast) + V_newᵀ k̃
#pragma unroll
            for (int nt = 0; nt < NTS; ++nt) {
                const float2 gl = *(const float2*)(GLs + 8 * nt + 2 * q);
                accS[nt][0] *= gl.x;
                accS[nt][1] *= gl.y;
                accS[nt][2] *= gl.x;
                accS[nt][3] *= gl.y;
            }
#pragma unroll
            for (int kt = 0; kt < 4; ++kt) {
#pragma unroll
                for (int np = 0; np < NTS / 2; ++np) {
                    u32 b0, b1, b2, b3;
                    ldsm_x4_t(sK + bk_kp + (u32)((16 * kt * KP + 16 * np) * 2), b0, b1, b2, b3);
                    mma16816(accS[2 * np], av[kt].x, av[kt].y, av[kt].z, av[kt].w, b0, b1);
                    mma16816(accS[2 * np + 1], av[kt].x, av[kt].y, av[kt].z, av[kt].w, b2, b3);
                }
            }
            // S_{c+1} for the output warp (read in chunk c + 1, after the block barrier)
            uint4* Sn = Sfr + ((c + 1) & 1) * (KD / 16) * 32;
#pragma unroll
            for (int ks = 0; ks < KD / 16; ++ks) Sn[ks * 32 + lane] = s_frag(accS, ks);
            const int L = imin(CH, len - c * CH);
            const i64 pos = (i64)(c + 1) * CH;
            if (L == CH && p.ck_every > 0 && pos % p.ck_every == 0) {
                const i64 slot = ((i64)p.ck_offsets[n] + pos / p.ck_every - 1) * p.HV + hv;
                store_state_r(p, accS, p.checkpoints, p.s_out_dt, slot, vw);
            }
        } else {
            const u32 sQ = smem_addr(st + WLay::Q), sP = smem_addr(st + WLay::P);
            const uint4* Sc = Sfr + (c & 1) * (KD / 16) * 32;
            float accO[8][4];
            zero_acc(accO);
            // (q̃·S)ᵀ = Sᵀ q̃ᵀ
#pragma unroll
            for (int ks = 0; ks < KD / 16; ++ks) mma_step_n64<KP>(accO, Sc[ks * 32 + lane], sQ + bn_kp + 32 * ks);
            nbar_sync(1 + w, 64);  // V_newᵀ of this chunk is in Vfr
            // oᵀ += V_newᵀ Pᵀ
#pragma unroll
            for (int kt = 0; kt < 4; ++kt) mma_step_n64<CP>(accO, Vfr[kt * 32 + lane], sP + bn_cp + 32 * kt);
            const int t0 = (int)bos + c * CH;
            store_o_t(p, accO, t0, imin(CH, len - c * CH), hv, vw);
        }
    }
    const i64 row = final_row(p, n);
    if (is_state && row >= 0) store_state_r(p, accS, p.state_out, p.s_out_dt, row * p.HV + hv, vw);
}

// ------------------------------------------------------------ small-bh state pass, wgmma (v8)
// The v7 pass (above) on Hopper's warpgroup MMA: one warpgroup (4 warps, 128 threads) per 64 V
// columns, each warp keeping its 16 rows of Sᵀ in f32 accumulators exactly as in v7 (the wgmma
// m64nNk16 accumulator and register-A layouts are four mma.m16n8k16 layouts stacked by warp), so
// load_state_r, s_frag, the V_new packing and store_o_t are shared. The B operands are read by
// the tensor cores from shared memory through matrix descriptors, once per warpgroup (v7: every
// warp read every fragment with ldmatrix and issued 16x8 products one by one):
//   (W·S)ᵀ = Sᵀ Wᵀ and (q̃·S)ᵀ = Sᵀ q̃ᵀ    m64n64k16 x KD/16 each, B K-major (W, q̃ rows = tokens)
//   V_newᵀ = Uᵀ - (W·S)ᵀ                   registers (bf16 A fragments, as v7)
//   Sᵀ <- Sᵀ diag(e^Γlast) + V_newᵀ k̃     m64n{KD}k16 x 4, B = k̃ [token][channel]: N-major
//   oᵀ = (q̃·S)ᵀ + V_newᵀ Pᵀ               m64n64k16 x 4, B = P [i][j]: K-major
// The workspace block is the intra kernel's (padded rows); the tensor memory accelerator copies
// W, q̃, k̃ (one box of 64 channels x 192 rows per 64 channels) and P (64 x 64) into the 128-byte
// swizzled layout the descriptors name (rows of 128 B, 16-byte units XORed with row % 8, atoms of
// 8 rows = 1024 B, hence 1024-byte aligned stages), e^Γlast and the tile's Uᵀ come by plain bulk
// copies, NST - 1 chunks ahead, all completing on one mbarrier per stage.
// sm_90a only (wgmma); K in {64, 128} (128-byte rows of 64 channels), V >= 64.
#if defined(__CUDA_ARCH_FEAT_SM90_ALL) && HEAD_V >= 64 && (HEAD_K == 64 || HEAD_K == 128)
#define HAS_STATE_WG 1
#else
#define HAS_STATE_WG 0
#endif
// The two tensor maps of the wgmma state pass (host: cuTensorMapEncodeTiled per launch, the
// workspace address is the caller's): `wqk` views the blocks' W, q̃, k̃ rows as a 3-d tensor
// [blocks][192 rows, KP * 2 bytes apart][KD channels], `p` their P as [blocks][64][64 (CP)].
struct __align__(64) TmapPair {
    unsigned long long wqk[16];
    unsigned long long p[16];
};
struct GLay {
    static constexpr int NB = KD / 64;           // 64-channel boxes of W, q̃, k̃
    static constexpr int BOX = 192 * 128;        // rows W 0-63, q̃ 64-127, k̃ 128-191, 128 B each
    static constexpr int PB = NB * BOX;          // P [64][64], 128 B rows
    static constexpr int GL = PB + 64 * 128;     // e^Γlast [KD] f32
    static constexpr int U = GL + KD * 4;        // the tile's Uᵀ fragments (4 panels of 16 V columns)
    static constexpr int TX = U + 64 * 64 * 4;   // bytes one stage receives
    static constexpr int STAGE = (TX + 1023) / 1024 * 1024;
    static constexpr int NST = 3;
    static constexpr int MB = NST * STAGE;       // mbarriers: NST "full" (the copies landed), NST
                                                 // "empty" (the warpgroup is done with the stage)
    static constexpr int TOTAL = MB + 2 * NST * 8 + 1024;  // (+ slack to align the base to 1024 B)
    static_assert(TOTAL <= 232448, "shared memory of the wgmma state pass");
};
#if HAS_STATE_WG
#if MMA_F16
#define WG_TY "f16"
#else
#define WG_TY "bf16"
#endif
__device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wg_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// Keeps the compiler from moving reads of asynchronously written accumulators above the wait
// (an empty asm that "redefines" each register after it).
template <int T>
__device__ __forceinline__ void wg_fence_acc(float (&d)[T][4]) {
#pragma unroll
    for (int i = 0; i < T; ++i)
#pragma unroll
        for (int e = 0; e < 4; ++e) asm volatile("" : "+f"(d[i][e])::"memory");
}
// Shared-memory matrix descriptor, 128-byte swizzle: start address, leading and stride byte
// offsets (PTX ISA, wgmma matrix descriptor: bits 0-13, 16-29, 32-45 in 16-byte units; 62-63 = 1).
// K-major B: rows of 64 elements (128 B), SBO = 1024 (the next 8 rows); the k step's 32 bytes are
// added to the start address. N-major B: SBO = 1024 (the next 8 k rows), LBO = the distance to
// the next 64 N elements.
__device__ __forceinline__ u64 desc_sw128(u32 saddr, u32 lbo, u32 sbo) {
    return (u64)((saddr & 0x3FFFF) >> 4) | ((u64)((lbo >> 4) & 0x3FFF) << 16) |
           ((u64)((sbo >> 4) & 0x3FFF) << 32) | (1ull << 62);
}
__device__ __forceinline__ void tma_load_3d(void* smem, const void* tmap, int x, int y, int z, u64* bar) {
    asm volatile(
        "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, "
        "%4}], [%5];\n" ::"r"(smem_addr(smem)),
        "l"(tmap), "r"(x), "r"(y), "r"(z), "r"(smem_addr(bar))
        : "memory");
}
// The inline-asm output list of eight n8 accumulator tiles d[o .. o + 7] (32 f32 registers).
#define WG_ACC8(d, o)                                                                              \
    "+f"(d[o + 0][0]), "+f"(d[o + 0][1]), "+f"(d[o + 0][2]), "+f"(d[o + 0][3]), "+f"(d[o + 1][0]),   \
        "+f"(d[o + 1][1]), "+f"(d[o + 1][2]), "+f"(d[o + 1][3]), "+f"(d[o + 2][0]), "+f"(d[o + 2][1]), \
        "+f"(d[o + 2][2]), "+f"(d[o + 2][3]), "+f"(d[o + 3][0]), "+f"(d[o + 3][1]), "+f"(d[o + 3][2]), \
        "+f"(d[o + 3][3]), "+f"(d[o + 4][0]), "+f"(d[o + 4][1]), "+f"(d[o + 4][2]), "+f"(d[o + 4][3]), \
        "+f"(d[o + 5][0]), "+f"(d[o + 5][1]), "+f"(d[o + 5][2]), "+f"(d[o + 5][3]), "+f"(d[o + 6][0]), \
        "+f"(d[o + 6][1]), "+f"(d[o + 6][2]), "+f"(d[o + 6][3]), "+f"(d[o + 7][0]), "+f"(d[o + 7][1]), \
        "+f"(d[o + 7][2]), "+f"(d[o + 7][3])
// d (64 x 64: 8 n8 tiles of 4 f32 a thread, the mma.sync accumulator layout per warp) +=
// A (this lane's fragment of its warp's 16 rows) x B (descriptor db; TB = 1: B stored N-major).
// scale_d = 0 overwrites d.
template <int TB>
__device__ __forceinline__ void wgmma_n64(float (&d)[8][4], const uint4& a, u64 db, int scale_d) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32." WG_TY "." WG_TY " {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,"
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
        "}, {%32, %33, %34, %35}, %36, p, 1, 1, %38;\n}\n"
        : WG_ACC8(d, 0)
        : "r"(a.x), "r"(a.y), "r"(a.z), "r"(a.w), "l"(db), "r"(scale_d), "n"(TB));
}
// d (64 x 128: 16 n8 tiles of 4 f32 a thread, the mma.sync accumulator layout per warp) +=
// A (this lane's fragment of its warp's 16 rows) x B (descriptor db; TB = 1: B stored N-major).
// scale_d = 0 overwrites d.
template <int TB>
__device__ __forceinline__ void wgmma_n128(float (&d)[16][4], const uint4& a, u64 db, int scale_d) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32." WG_TY "." WG_TY " {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,"
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31,"
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47,"
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
        "}, {%64, %65, %66, %67}, %68, p, 1, 1, %70;\n}\n"
        : WG_ACC8(d, 0), WG_ACC8(d, 8)
        : "r"(a.x), "r"(a.y), "r"(a.z), "r"(a.w), "l"(db), "r"(scale_d), "n"(TB));
}

// The update's product: N = KD.
template <int TB>
__device__ __forceinline__ void wgmma_nk(float (&d)[KD / 8][4], const uint4& a, u64 db, int scale_d) {
#if HEAD_K == 128
    wgmma_n128<TB>(d, a, db, scale_d);
#else
    wgmma_n64<TB>(d, a, db, scale_d);
#endif
}

// State kernel: grid (VD / 64, HV, N), 160 threads, dynamic shared memory GLay::TOTAL. Warps 0-3
// (the warpgroup) carry the state; warp 4 only fetches (lane 0 issues the copies of chunk c into
// stage c % NST once the warpgroup has released the stage: an "empty" mbarrier per stage, one
// arrival per warp; a named barrier there raced and hung, as the warpgroup may release several
// stages before the fetch warp waits), so the warpgroup never waits on a block barrier. (s7a/s7b: with the fetch issued by thread 0
// after a block barrier, one chunk took ~2,250 cycles, of which the loop head and the first
// product's wait for the warpgroup ~650; its tensor work is ~900 cycles.) q̃·S runs while V_new
// is packed. Issuing chunk c + 1's products before chunk c's o stores (so that they overlap)
// made ptxas serialise every wgmma (C7514: groups in flight across the loop's back edge while
// accumulators are read); not done.
// The prologue of both wgmma state passes: this thread's warp, lane and q (lane % 4), the CTA's
// V tile v0, value head hv and sequence n, the sequence's start bos, length len, first chunk-table
// row r0 and chunk count nch. (warp, len and nch are broadcast from lane 0: ptxas then knows them
// warp-uniform; branches on values it cannot prove uniform made it serialise every wgmma, C7518.)
#define WG_CTA_PROLOGUE(p) WG_CTA_PROLOGUE_N(p, blockIdx.z)
// (the sequence of the CTA given: the T-form pass may walk them in reverse, wgt_seq)
#define WG_CTA_PROLOGUE_N(p, NZ)                                                                      \
    const int warp = __shfl_sync(0xffffffffu, (int)threadIdx.x >> 5, 0), lane = threadIdx.x & 31,   \
              q = lane & 3;                                                                          \
    const int v0 = blockIdx.x * 64, hv = blockIdx.y, n = (NZ);                                       \
    const i64 bos = seq_start(p, n), eos = seq_start(p, n + 1);                                      \
    const int len = __shfl_sync(0xffffffffu, (int)(eos - bos), 0);                                   \
    const int r0 = p.chunk_offsets[n];                                                               \
    const int nch = __shfl_sync(0xffffffffu, p.chunk_offsets[n + 1] - r0, 0)
// Initialises the stages' "full" barriers (one arrival: the fetch thread's expect-tx) and "empty"
// barriers (`empty_count` arrivals), then the block-wide barrier (the passes' only one).
__device__ __forceinline__ void wg_bars_init(u64* bars, u64* empty, int nst, u32 empty_count) {
    if (threadIdx.x == 0) {
        for (int s = 0; s < nst; ++s) {
            mbar_init(bars + s, 1);
            mbar_init(empty + s, empty_count);
        }
        mbar_init_fence();
    }
    __syncthreads();
}
template <bool KDA>
__device__ void smallbh_state_wg(const Params& p, const TmapPair& tm) {
    extern __shared__ __align__(16) char smraw[];
    char* sm = smraw + ((1024u - (smem_addr(smraw) & 1023u)) & 1023u);
    constexpr int NST = GLay::NST;
    WG_CTA_PROLOGUE(p);
    u64* bars = (u64*)(sm + GLay::MB);
    u64* empty = bars + NST;
    wg_bars_init(bars, empty, NST, 4);  // (empty: lane 0 of each warpgroup warp)
    if (warp == 4) {  // the fetch warp
        if (lane == 0) {
            for (int c = 0; c < nch; ++c) {
                if (c >= NST) {
                    // the warpgroup is done with chunk c - NST's stage
                    mbar_wait(empty + c % NST, (c / NST - 1) & 1);
                    if (FETCH_NONE) continue;
                    fence_proxy_async();
                }
                const int blk = (r0 + c) * p.HV + hv;
                char* st = sm + (c % NST) * GLay::STAGE;
                u64* bar = bars + c % NST;
                mbar_arrive_expect(bar, GLay::TX);
#pragma unroll
                for (int b = 0; b < GLay::NB; ++b) tma_load_3d(st + b * GLay::BOX, tm.wqk, 64 * b, 0, blk, bar);
                tma_load_3d(st + GLay::PB, tm.p, 0, 0, blk, bar);
                const char* src = (const char*)p.work + (i64)blk * WLay::BLOCK;
                bulk_g2s(st + GLay::GL, src + WLay::GL, KD * 4, bar);
                bulk_g2s(st + GLay::U, src + WLay::U + v0 * 64 * 4, 64 * 64 * 4, bar);
            }
        }
        return;
    }
    const int vw = v0 + 16 * warp;  // this warp's 16 rows of Sᵀ
    float accS[KD / 8][4];
    load_state_r(p, accS, initial_row(p, n) < 0 ? -1 : initial_row(p, n) * p.HV + hv, vw);
    uint4 sf[KD / 16];  // bf16(Sᵀ) A fragments of the state entering the chunk being issued
#pragma unroll
    for (int ks = 0; ks < KD / 16; ++ks) sf[ks] = s_frag(accS, ks);
    // (uninitialised: the first k step overwrites them, scale_d = 0; zeroing them by
    // instructions that the compiler may sink between the products made ptxas wait for the
    // first group before issuing the second)
    float accW[8][4], accO[8][4];
    // Issues (W·S)ᵀ -> accW of chunk c (one group), after waiting for its stage.
    auto issue_w = [&](int c) {
        if (!(FETCH_NONE && c >= NST)) mbar_wait(bars + c % NST, (c / NST) & 1);
        const u32 sb = smem_addr(sm + (c % NST) * GLay::STAGE);
        wg_fence();
#pragma unroll
        for (int ks = 0; ks < KD / 16; ++ks)
            wgmma_n64<0>(accW, sf[ks], desc_sw128(sb + (ks >> 2) * GLay::BOX + 32 * (ks & 3), 16, 1024), ks > 0);
        wg_commit();
    };
    // Issues (q̃·S)ᵀ -> accO of chunk c (one group).
    auto issue_q = [&](int c) {
        const u32 sb = smem_addr(sm + (c % NST) * GLay::STAGE);
        wg_fence();
#pragma unroll
        for (int ks = 0; ks < KD / 16; ++ks)
            wgmma_n64<0>(accO, sf[ks], desc_sw128(sb + (ks >> 2) * GLay::BOX + 64 * 128 + 32 * (ks & 3), 16, 1024),
                         ks > 0);
        wg_commit();
    };
    // Completes chunk c (both groups of it issued): V_new, the state update and oᵀ = (q̃·S)ᵀ +
    // V_newᵀ Pᵀ in accO; releases the stage; S_{c+1}'s fragments into sf.
    // This lane's Uᵀ fragments of chunk c (loaded while the products are issued: the packing
    // below then waits only for W·S).
    auto load_u = [&](int c, float4 (&u)[8]) {
        const float4* Ut = (const float4*)(sm + (c % NST) * GLay::STAGE + GLay::U) + warp * 256;
#pragma unroll
        for (int i = 0; i < 8; ++i) u[i] = Ut[i * 32 + lane];
    };
    auto finish = [&](int c, const float4 (&u)[8]) {
        const char* st = sm + (c % NST) * GLay::STAGE;
        const u32 sb = smem_addr(st);
        wg_wait<1>();  // (W·S)ᵀ done; (q̃·S)ᵀ may still run
        wg_fence_acc(accW);
        // V_newᵀ = Uᵀ - (W·S)ᵀ as bf16 A fragments, one per 16-token step
        uint4 av[4];
#pragma unroll
        for (int kt = 0; kt < 4; ++kt) {
            const float4 u0 = u[2 * kt], u1 = u[2 * kt + 1];
            av[kt] = make_uint4(pack_mma(u0.x - accW[2 * kt][0], u0.y - accW[2 * kt][1]),
                                pack_mma(u0.z - accW[2 * kt][2], u0.w - accW[2 * kt][3]),
                                pack_mma(u1.x - accW[2 * kt + 1][0], u1.y - accW[2 * kt + 1][1]),
                                pack_mma(u1.z - accW[2 * kt + 1][2], u1.w - accW[2 * kt + 1][3]));
        }
        // Sᵀ <- Sᵀ diag(e^Γlast) + V_newᵀ k̃; oᵀ += V_newᵀ Pᵀ (gdn: one decay for every channel)
        const float* GLs = (const float*)(st + GLay::GL);
#pragma unroll
        for (int nt = 0; nt < KD / 8; ++nt) {
            const float2 gl = KDA ? *(const float2*)(GLs + 8 * nt + 2 * q) : make_float2(GLs[0], GLs[0]);
            accS[nt][0] *= gl.x;
            accS[nt][1] *= gl.y;
            accS[nt][2] *= gl.x;
            accS[nt][3] *= gl.y;
        }
        wg_fence();
#pragma unroll
        for (int kt = 0; kt < 4; ++kt)
            wgmma_nk<1>(accS, av[kt], desc_sw128(sb + 128 * 128 + 2048 * kt, GLay::BOX, 1024), 1);
#pragma unroll
        for (int kt = 0; kt < 4; ++kt) wgmma_n64<0>(accO, av[kt], desc_sw128(sb + GLay::PB + 32 * kt, 16, 1024), 1);
        wg_commit();
        wg_wait<0>();
        wg_fence_acc(accS);
        wg_fence_acc(accO);
        __syncwarp();
        if (lane == 0) mbar_arrive(empty + c % NST);  // the stage may be refilled
#pragma unroll
        for (int ks = 0; ks < KD / 16; ++ks) sf[ks] = s_frag(accS, ks);
    };
    // o of chunk c from accO, then the checkpoint after it (accS = S_{c+1}).
    auto emit = [&](int c) {
        const int L = imin(CH, len - c * CH);
        store_o_t(p, accO, (int)bos + c * CH, L, hv, vw);
        const i64 pos = (i64)(c + 1) * CH;
        if (L == CH && p.ck_every > 0 && pos % p.ck_every == 0) {
            const i64 slot = ((i64)p.ck_offsets[n] + pos / p.ck_every - 1) * p.HV + hv;
            store_state_r(p, accS, p.checkpoints, p.s_out_dt, slot, vw);
        }
    };
    for (int c = 0; c < nch; ++c) {
        float4 u[8];
        issue_w(c);
        load_u(c, u);
        issue_q(c);
        finish(c, u);
        emit(c);
    }
    const i64 row = final_row(p, n);
    if (row >= 0) store_state_r(p, accS, p.state_out, p.s_out_dt, row * p.HV + hv, vw);
}

// ------------------------------------------- small-bh state pass, wgmma, T-form (v9, gdn only)
// The wgmma pass of the T-form block (TLay): instead of reading W, q̃, k̃ and U (~92 KB a block at
// K = V = 128, all written by the intra kernel) it reads the inputs' k, q and v rows of the chunk
// by TMA and the chunk's T_w, T_u, P and per-token factors (~37 KB) and computes, per chunk:
//   Y = Sᵀ Kᵀ                              m64n64k16 x KD/16 (B = raw k rows, K-major)
//   Uᵀ = Vᵀ T_uᵀ (hi + lo)                 m64n64k16 x 8, A = the v rows from shared memory
//                                          (MN-major, transposed by the descriptor), independent of S
//   V_newᵀ = Uᵀ - Y T_wᵀ                   m64n64k16 x 4, A = bf16(-Y) from registers
//   (q̃·S)ᵀ = (Sᵀ Qᵀ) diag(FQ)              m64n64k16 x KD/16, then the accumulator columns scaled
//   Sᵀ <- e^Γlast Sᵀ + (V_newᵀ diag(FK)) K m64n{KD}k16 x 4 (FK folded into the A fragments)
//   oᵀ += V_newᵀ Pᵀ                        m64n64k16 x 4
// (o of chunk c leaves by TMA while chunk c + 1's first group runs: see `stage_o`)
// since W·S = T diag(β e^Γ / |k|) K_raw S, q̃ = diag(FQ) Q_raw and k̃ = diag(FK) K_raw. The rows of
// k and v past the chunk's length belong to the next sequence (TMA fills zeros only past the
// tensor's end): they meet zero columns of T_u, T_w and FK, and are zeroed in shared memory before
// the products so that a non-finite value there cannot leak in (0 x inf). q's rows past L only
// reach o's columns past L, which are not stored.
// Stage (1024-byte aligned): K boxes [NB][64 tokens][64 ch], Q boxes, the V tile [64][64], then
// T_w, T_u hi, T_u lo, P (one box of 256 rows), the factors. The fetch warp and the barriers are
// those of smallbh_state_wg.
struct GTLay {
    static constexpr int NB = KD / 64;
    static constexpr int K = 0;
    static constexpr int Q = K + NB * 8192;
    static constexpr int V = Q + NB * 8192;
    static constexpr int TW = V + 8192;
    static constexpr int TU = TW + 8192;
    static constexpr int TUL = TU + 8192;
    static constexpr int P = TUL + 8192;
    static constexpr int FAC = P + 8192;
    static constexpr int TX = FAC + TLay::FACB;  // bytes one stage receives
    static constexpr int STAGE = (TX + 1023) / 1024 * 1024;
    static constexpr int NST = 3;
    static constexpr int MB = NST * STAGE;
    static constexpr int TOTAL = MB + 2 * NST * 8 + 1024;
    static_assert(TOTAL <= 232448, "shared memory of the T-form wgmma state pass");
};
// The tensor maps of the T-form pass (host: cuTensorMapEncodeTiled per launch): q and k as
// [T][H K], v and o as [T][HV V] (boxes of 64 channels x 64 tokens; o's only used for 16-bit
// outputs), and the blocks' T_w, T_u hi, lo, P as [blocks][256 rows, CP * 2 bytes apart][64]
// (one box of 64 x 256).
struct __align__(64) TmapT {
    unsigned long long q[16];
    unsigned long long k[16];
    unsigned long long v[16];
    unsigned long long t[16];
    unsigned long long o[16];
};
// Shared -> global tile stores (tma_store_2d_if below) are bulk groups: bulk_commit, then
// bulk_wait_read before the source is reused or the CTA exits.
// The same store, issued only where `on` (a predicate inside the asm, not a branch: ptxas waits for
// every wgmma in flight before control flow that is not warp-uniform).
__device__ __forceinline__ void tma_store_2d_if(bool on, const void* tmap, const void* smem, int x, int y) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %0, 0;\n"
        "@p cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%1, {%2, %3}], [%4];\n}\n" ::"r"((int)on),
        "l"(tmap), "r"(x), "r"(y), "r"(smem_addr(smem))
        : "memory");
}
__device__ __forceinline__ void tma_load_2d(void* smem, const void* tmap, int x, int y, u64* bar) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], "
        "[%4];\n" ::"r"(smem_addr(smem)),
        "l"(tmap), "r"(x), "r"(y), "r"(smem_addr(bar))
        : "memory");
}
// d (64 x 64) += A (descriptor da; TA = 1: A stored M-major) x B (descriptor db; TB = 1: N-major).
template <int TA, int TB>
__device__ __forceinline__ void wgmma_n64_ss(float (&d)[8][4], u64 da, u64 db, int scale_d) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32." WG_TY "." WG_TY " {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,"
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
        "}, %32, %33, p, 1, 1, %35, %36;\n}\n"
        : WG_ACC8(d, 0)
        : "l"(da), "l"(db), "r"(scale_d), "n"(TA), "n"(TB));
}
// Diagnosis (DELTARULE_CUDA_PROBE bit 2048): U from T_u's hi part only (its lo product left out).
constexpr bool TU_HI_ONLY = (PROBE & 2048) != 0;
// Diagnosis (bit 4096): o by per-thread global stores (the path of f32 outputs and of a
// sequence's last, partial chunk) for every chunk.
constexpr bool EMIT_DIRECT = (PROBE & 4096) != 0;
// The sequence of T-form state CTAs with blockIdx.z = z: MODE_STATE_REV (without the overlap)
// walks them last first, so the first wave reads the blocks the intra kernel wrote last, while
// they may still be in L2.
__device__ __forceinline__ int wgt_seq(const Params& p, int z) {
    return (!p.sync && (p.mode & MODE_STATE_REV)) ? (int)gridDim.z - 1 - z : z;
}
// MODE_STATE_PF: once this CTA's fetch thread has issued its last chunk's loads (about NST
// chunks before the CTA ends), the fetch warp prefetches to L2 what the CTA about one SM count
// later in launch order reads first: its initial state, its first chunk's block, k, q and v rows
// (the CTA that will likely take this SM, or one like it, next: CTAs start in linear order).
__device__ __forceinline__ void wgt_prefetch_next(const Params& p, int lane) {
    const int gx = gridDim.x, gy = gridDim.y;
    const int nx = (int)(blockIdx.x + gx * (blockIdx.y + gy * blockIdx.z) + n_smid());
    const int x = nx % gx, y = (nx / gx) % gy, zi = nx / (gx * gy);
    if (zi >= (int)gridDim.z) return;
    const int z = wgt_seq(p, zi);
    const i64 bos = seq_start(p, z);
    const int L = imin(CH, (int)(seq_start(p, z + 1) - bos));
    if (L <= 0) return;
    const int es = p.qkv_dt == DT_F32 ? 4 : 2, h = y / p.group;
    if (x == 0) {  // (what both V tiles read: once, by tile 0's CTA)
        if (lane == 0) {
            const i64 row = initial_row(p, z);
            if (p.state_in != nullptr && row >= 0) {
                const int ss = p.s_in_dt == DT_F32 ? 4 : 2;
                const char* a = (const char*)p.state_in + (row * p.HV + y) * KD * VD * ss;
                if (((unsigned long long)a & 15) == 0) prefetch_l2(a, (u32)(KD * VD * ss));
            }
        } else if (lane == 1) {
            prefetch_l2((const char*)p.work + ((i64)p.chunk_offsets[z] * p.HV + y) * WLay::BLOCK, (u32)TLay::END);
        }
        for (int r = lane; r < 2 * L; r += 32) {
            const i64 t = bos + (r >> 1);
            prefetch_l2((const char*)((r & 1) ? p.q : p.k) + (t * p.H + h) * KD * es, (u32)(KD * es));
        }
    }
    for (int r = lane; r < L; r += 32)
        prefetch_l2((const char*)p.v + ((bos + r) * p.HV + y) * VD * es + x * 64 * es, (u32)(64 * es));
}
// MODE_STATE_H0PF: the initial state of the CTA about one SM count later in launch order (see
// wgt_prefetch_next) to L2, by the fetch thread a few chunks before this CTA's end (session 17:
// the state CTAs' first chunk waited on their h0 loads from DRAM, ~6 % of the pass's samples).
__device__ __forceinline__ void wgt_prefetch_h0_next(const Params& p) {
    const int gx = gridDim.x, gy = gridDim.y;
    const int nx = (int)(blockIdx.x + gx * (blockIdx.y + gy * blockIdx.z) + n_smid());
    const int x = nx % gx, y = (nx / gx) % gy, zi = nx / (gx * gy);
    if (zi >= (int)gridDim.z || p.state_in == nullptr) return;
    const int z = wgt_seq(p, zi);
    const i64 row = initial_row(p, z);
    if (row < 0) return;
    const int ss = p.s_in_dt == DT_F32 ? 4 : 2;
    // (this V tile's columns: a contiguous half of the state in the vk layout, the whole state
    // otherwise, its rows interleaved with the other tile's)
    const char* a = (const char*)p.state_in + (row * p.HV + y) * KD * VD * ss;
    if (p.layout == LAYOUT_KV) {
        if (((unsigned long long)a & 15) == 0 && x == 0) prefetch_l2(a, (u32)(KD * VD * ss));
    } else {
        a += (i64)x * 64 * KD * ss;
        if (((unsigned long long)a & 15) == 0) prefetch_l2(a, (u32)(64 * KD * ss));
    }
}
__device__ void smallbh_state_wgt(const Params& p, const TmapT& tm) {
    extern __shared__ __align__(16) char smraw[];
    char* sm = smraw + ((1024u - (smem_addr(smraw) & 1023u)) & 1023u);
    constexpr int NST = GTLay::NST, NB = GTLay::NB;
    WG_CTA_PROLOGUE_N(p, wgt_seq(p, blockIdx.z));
    const int h = hv / p.group;
    u64* bars = (u64*)(sm + GTLay::MB);
    u64* empty = bars + NST;
    wg_bars_init(bars, empty, NST, 128);  // (empty: every warpgroup thread, see finish)
    if (warp == 4) {  // the fetch warp
        const u64 tstart = p.ov_trace ? gtimer() : 0;
        u64 waited = 0;
        if (lane == 0) {
            for (int c = 0; c < nch; ++c) {
                if (c >= NST) {
                    mbar_wait(empty + c % NST, (c / NST - 1) & 1);
                    fence_proxy_async();
                }
                const int blk = (r0 + c) * p.HV + hv, tok = (int)bos + c * CH;
                char* st = sm + (c % NST) * GTLay::STAGE;
                u64* bar = bars + c % NST;
                mbar_arrive_expect(bar, GTLay::TX);
#pragma unroll
                for (int b = 0; b < NB; ++b) {
                    tma_load_2d(st + GTLay::K + b * 8192, tm.k, h * KD + 64 * b, tok, bar);
                    tma_load_2d(st + GTLay::Q + b * 8192, tm.q, h * KD + 64 * b, tok, bar);
                }
                tma_load_2d(st + GTLay::V, tm.v, hv * VD + v0, tok, bar);
                // (MODE_PDL without the overlap: the intra grid's blocks, once, before the first)
                if (c == 0 && p.sync == nullptr && (p.mode & MODE_PDL)) pdl_wait();
                if (p.ov_trace) {
                    const u64 w0 = gtimer();
                    wait_ready(p, blk);
                    waited += gtimer() - w0;
                } else {
                    wait_ready(p, blk);  // (overlapped pair: the intra kernel's block is there)
                }
                tma_load_3d(st + GTLay::TW, tm.t, 0, 0, blk, bar);
                bulk_g2s(st + GTLay::FAC, (const char*)p.work + (i64)blk * WLay::BLOCK + TLay::FAC, TLay::FACB, bar);
                if (c == imax(0, nch - 6) && (p.mode & MODE_STATE_H0PF) && !p.sync) wgt_prefetch_h0_next(p);
            }
        }
        // (overlapped pair: this grid completes after the intra grid. After the whole warp is
        // here: lanes 1-31 would otherwise run ahead into griddepcontrol.wait, which then holds
        // the warp, lane 0's fetch loop included, until the intra grid ends; measured, session 10)
        __syncwarp();
        if ((p.mode & MODE_STATE_PF) && !p.sync) wgt_prefetch_next(p, lane);
        if (p.sync) pdl_wait();
        const int cta = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
        if (p.ov_trace && lane == 0 && cta < TRACE_STATE) {
            u64* r = trace_base(p) + 4 * (TRACE_INTRA + cta);
            r[0] = sm_id();
            r[1] = tstart;
            r[2] = gtimer();
            r[3] = waited;
        }
        return;
    }
    const int vw = v0 + 16 * warp;
    float accS[KD / 8][4];
    load_state_r(p, accS, initial_row(p, n) < 0 ? -1 : initial_row(p, n) * p.HV + hv, vw);
    uint4 sf[KD / 16];
#pragma unroll
    for (int ks = 0; ks < KD / 16; ++ks) sf[ks] = s_frag(accS, ks);
    float accW[8][4], accV[8][4], accO[8][4];
    // o of chunk c. A 16-bit o of a whole chunk leaves by one TMA store, staged at the end of the
    // chunk (`stage_o`: the tile goes to the stage's first q box, dead since the chunk's q product
    // completed, as o[t][v] in the 128-byte swizzle; 4-byte stores, conflict-free: unit
    // (2 warp + h) ^ (t % 8)); `finish` then runs while chunk c + 1's first group does: it waits
    // until the store has read the tile, writes the checkpoint after chunk c (accS = S_{c+1}) and
    // releases the stage. f32 o and a sequence's last, partial chunk leave by per-thread stores at
    // the end of the chunk. (s9c: those stores, 16 a thread with their address math, were ~16 % of
    // the pass's stall samples; issued during the next chunk's first group they made ptxas wait
    // for that group first, and kept accO live across it (spills). ptxas also waits for every
    // wgmma in flight before shared-memory stores, hence the staging at the chunk's end.)
    // (only for sequences of more than 4 chunks: with one chunk, gdn 16/32 256x64, the staged
    // store measured 1.198 ms against 1.151 with per-thread stores, s9d; nothing overlaps it)
    const bool o16 = p.out_dt != DT_F32 && nch > 4 && !EMIT_DIRECT;
    auto stage_o = [&](int c) {
        const int L = imin(CH, len - c * CH);
        if (!(o16 && L == CH)) {
            store_o_t(p, accO, (int)bos + c * CH, L, hv, vw);
            return;
        }
        const int g = lane >> 2;
        const bool bf = p.out_dt == DT_BF16;
        char* ot = sm + (c % NST) * GTLay::STAGE + GTLay::Q;
#pragma unroll
        for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
            for (int hh = 0; hh < 2; ++hh) {
                const float x = accO[nt][2 * hh], y = accO[nt][2 * hh + 1];
                const u32 wd = movm_t(bf ? pack_bf16x2(x, y) : pack_f16x2(x, y));
                *(u32*)(ot + (8 * nt + g) * 128 + (((2 * warp + hh) ^ g) << 4) + 4 * q) = wd;
            }
        }
        fence_proxy_async();
        nbar_sync(1, 128);
        // (thread 0 stores; every thread commits and, in `finish`, waits: empty groups where it
        // issued nothing)
        tma_store_2d_if(threadIdx.x == 0, tm.o, ot, hv * VD + v0, (int)bos + c * CH);
        bulk_commit();
    };
    auto finish = [&](int c) {
        const int L = imin(CH, len - c * CH);
        if (o16 && L == CH) bulk_wait_read();
        const i64 pos = (i64)(c + 1) * CH;
        if (L == CH && p.ck_every > 0 && pos % p.ck_every == 0) {
            const i64 slot = ((i64)p.ck_offsets[n] + pos / p.ck_every - 1) * p.HV + hv;
            store_state_r(p, accS, p.checkpoints, p.s_out_dt, slot, vw);
        }
        mbar_arrive(empty + c % NST);  // the stage may be refilled (thread 0 after its store read it)
    };
    for (int c = 0; c < nch; ++c) {
        mbar_wait(bars + c % NST, (c / NST) & 1);
        char* st = sm + (c % NST) * GTLay::STAGE;
        const u32 sb = smem_addr(st);
        const int L = imin(CH, len - c * CH);
        if (L < CH) {
            // the last chunk of the sequence: rows [L, 64) of the k boxes and the v tile
            const int units = (CH - L) * 8;  // 16-byte units a box (rows of 128 bytes)
#pragma unroll
            for (int b = 0; b <= NB; ++b) {
                uint4* box = (uint4*)(st + (b < NB ? GTLay::K + b * 8192 : GTLay::V) + L * 128);
                for (int u = threadIdx.x; u < units; u += 128) box[u] = make_uint4(0u, 0u, 0u, 0u);
            }
            fence_proxy_async();
            nbar_sync(1, 128);
        }
        // group 1: Y = Sᵀ Kᵀ -> accW; Uᵀ = Vᵀ T_uᵀ -> accV
        wg_fence();
#pragma unroll
        for (int ks = 0; ks < KD / 16; ++ks)
            wgmma_n64<0>(accW, sf[ks], desc_sw128(sb + GTLay::K + (ks >> 2) * 8192 + 32 * (ks & 3), 16, 1024), ks > 0);
#pragma unroll
        for (int kt = 0; kt < 4; ++kt)
            wgmma_n64_ss<1, 0>(accV, desc_sw128(sb + GTLay::V + 2048 * kt, 8192, 1024),
                               desc_sw128(sb + GTLay::TU + 32 * kt, 16, 1024), kt > 0);
        if (!TU_HI_ONLY) {
#pragma unroll
            for (int kt = 0; kt < 4; ++kt)
                wgmma_n64_ss<1, 0>(accV, desc_sw128(sb + GTLay::V + 2048 * kt, 8192, 1024),
                                   desc_sw128(sb + GTLay::TUL + 32 * kt, 16, 1024), 1);
        }
        wg_commit();
        if (c > 0) finish(c - 1);
        wg_wait<0>();
        wg_fence_acc(accW);
        wg_fence_acc(accV);
        // group 2: V_newᵀ = Uᵀ - Y T_wᵀ (A = bf16(-Y), one fragment per 16-token step); group 3:
        // Sᵀ Qᵀ -> accO, issued after it (accW is dead by then: one accumulator fewer in flight,
        // no spills), running while V_new is packed
        uint4 ay[4];
#pragma unroll
        for (int kt = 0; kt < 4; ++kt)
            ay[kt] = make_uint4(pack_mma(-accW[2 * kt][0], -accW[2 * kt][1]), pack_mma(-accW[2 * kt][2], -accW[2 * kt][3]),
                                pack_mma(-accW[2 * kt + 1][0], -accW[2 * kt + 1][1]),
                                pack_mma(-accW[2 * kt + 1][2], -accW[2 * kt + 1][3]));
        wg_fence();
#pragma unroll
        for (int kt = 0; kt < 4; ++kt) wgmma_n64<0>(accV, ay[kt], desc_sw128(sb + GTLay::TW + 32 * kt, 16, 1024), 1);
        wg_commit();
#pragma unroll
        for (int ks = 0; ks < KD / 16; ++ks)
            wgmma_n64<0>(accO, sf[ks], desc_sw128(sb + GTLay::Q + (ks >> 2) * 8192 + 32 * (ks & 3), 16, 1024), ks > 0);
        wg_commit();
        wg_wait<1>();  // group 2 done
        wg_fence_acc(accV);
        const float* F = (const float*)(st + GTLay::FAC);
        // V_newᵀ as bf16 A fragments: av for oᵀ, ak = V_newᵀ diag(FK) for the update
        uint4 av[4], ak[4];
#pragma unroll
        for (int kt = 0; kt < 4; ++kt) {
            const float2 f0 = *(const float2*)(F + CH + 16 * kt + 2 * q);
            const float2 f1 = *(const float2*)(F + CH + 16 * kt + 8 + 2 * q);
            const float(&a)[4] = accV[2 * kt];
            const float(&b)[4] = accV[2 * kt + 1];
            av[kt] = make_uint4(pack_mma(a[0], a[1]), pack_mma(a[2], a[3]), pack_mma(b[0], b[1]), pack_mma(b[2], b[3]));
            ak[kt] = make_uint4(pack_mma(a[0] * f0.x, a[1] * f0.y), pack_mma(a[2] * f0.x, a[3] * f0.y),
                                pack_mma(b[0] * f1.x, b[1] * f1.y), pack_mma(b[2] * f1.x, b[3] * f1.y));
        }
        const float gl = F[2 * CH];
#pragma unroll
        for (int nt = 0; nt < KD / 8; ++nt) {
            accS[nt][0] *= gl;
            accS[nt][1] *= gl;
            accS[nt][2] *= gl;
            accS[nt][3] *= gl;
        }
        wg_wait<0>();  // group 3 done
        wg_fence_acc(accO);
        // (q̃·S)ᵀ: column t of accO times FQ[t]
#pragma unroll
        for (int nt = 0; nt < 8; ++nt) {
            const float2 f = *(const float2*)(F + 8 * nt + 2 * q);
            accO[nt][0] *= f.x;
            accO[nt][1] *= f.y;
            accO[nt][2] *= f.x;
            accO[nt][3] *= f.y;
        }
        // group 4: the update (B = raw k rows, N-major across the NB boxes) and oᵀ += V_newᵀ Pᵀ
        wg_fence();
#pragma unroll
        for (int kt = 0; kt < 4; ++kt) wgmma_nk<1>(accS, ak[kt], desc_sw128(sb + GTLay::K + 2048 * kt, 8192, 1024), 1);
#pragma unroll
        for (int kt = 0; kt < 4; ++kt) wgmma_n64<0>(accO, av[kt], desc_sw128(sb + GTLay::P + 32 * kt, 16, 1024), 1);
        wg_commit();
        wg_wait<0>();
        wg_fence_acc(accS);
        wg_fence_acc(accO);
        stage_o(c);
#pragma unroll
        for (int ks = 0; ks < KD / 16; ++ks) sf[ks] = s_frag(accS, ks);
    }
    if (nch > 0) finish(nch - 1);  // (waits until the last o store has read shared memory; its
                                   // global writes complete with the grid, as CUTLASS's TMA epilogues rely on)
    const i64 row = final_row(p, n);
    if (row >= 0) store_state_r(p, accS, p.state_out, p.s_out_dt, row * p.HV + hv, vw);
}
#endif  // HAS_STATE_WG

// The size table of a prefill module, read by the host once per loaded module (cuModuleGetGlobal):
// dynamic shared memory of the fused kernel, of the small-bh state kernel, the workspace block per
// (chunk, head), the dynamic shared memory of the small-bh intra kernel, the threads of the
// small-bh state kernel, the dynamic shared memory and threads of its 16-column variant, and of
// its 64-column variant (0 where V < 64: no such kernel), and of the wgmma variant (0 where it is
// not compiled: not sm_90a, K not 64 or 128, or V < 64), then of the T-form wgmma pass (gdn only,
// else 0), then of the fused T-form (gdn with K, V >= 64, else 0). Each .cu file defines
// `{op}_prefill_sizes[14] = PREFILL_SIZES(KDA)`.
#if HEAD_V >= 64
#define PREFILL_SIZES64(KDA) RLay<64>::TOTAL, 256
#else
#define PREFILL_SIZES64(KDA) 0, 0
#endif
#if HAS_STATE_WG
#define PREFILL_SIZES_WG GLay::TOTAL, 160
#else
#define PREFILL_SIZES_WG 0, 0
#endif
// (the T-form pass: gdn only)
#if HAS_STATE_WG
#define PREFILL_SIZES_WGT(KDA) (KDA ? 0 : GTLay::TOTAL), (KDA ? 0 : 160)
#else
#define PREFILL_SIZES_WGT(KDA) 0, 0
#endif
// (the fused T-form: gdn, K and V >= 64)
#define PREFILL_SIZES_FT(KDA) ((KDA || !FTLay::ON) ? 0 : FTLay::TOTAL)
#define PREFILL_SIZES(KDA)                                                                          \
    {Lay<KDA>::TOTAL, RLay<32>::TOTAL, WLay::BLOCK, Lay<KDA, true>::TOTAL, 128, RLay<16>::TOTAL, 64, \
     PREFILL_SIZES64(KDA), PREFILL_SIZES_WG, PREFILL_SIZES_WGT(KDA), PREFILL_SIZES_FT(KDA)}


// prefill_state_wgmma.cuh: the small-bh state passes on Hopper's warpgroup MMA (sm_90a, K in
// {64, 128}, V >= 64): the pass over the workspace block (smallbh_state_wgmma, gdn and kda) and
// the T-form pass (smallbh_state_tform_wgmma, gdn with 16-bit inputs).

// ------------------------------------------------------------ small-bh state pass, wgmma
// The mma.sync pass of prefill_state.cuh on Hopper's warpgroup MMA: one warpgroup (4 warps, 128
// threads) per 64 V columns, each warp keeping its 16 rows of Sᵀ in f32 accumulators exactly as
// there (the wgmma m64nNk16 accumulator and register-A layouts are four mma.m16n8k16 layouts
// stacked by warp), so load_state_r, s_frag, the V_new packing and store_o_t are shared. The B
// operands are read by the tensor cores from shared memory through matrix descriptors, once per
// warpgroup (the mma.sync pass: every warp reads every fragment with ldmatrix and issues 16x8
// products one by one):
//   (W·S)ᵀ = Sᵀ Wᵀ and (q̃·S)ᵀ = Sᵀ q̃ᵀ    m64n64k16 x KD/16 each, B K-major (W, q̃ rows = tokens)
//   V_newᵀ = Uᵀ - (W·S)ᵀ                   registers (bf16 A fragments, as the mma.sync pass)
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
struct __align__(64) StateWgmmaMaps {
    unsigned long long wqk[16];
    unsigned long long p[16];
};
struct WgmmaStateSmem {
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

// State kernel: grid (VD / 64, HV, N), 160 threads, dynamic shared memory WgmmaStateSmem::TOTAL.
// Warps 0-3 (the warpgroup) carry the state; warp 4 only fetches (lane 0 issues the copies of chunk c into
// stage c % NST once the warpgroup has released the stage: an "empty" mbarrier per stage, one
// arrival per warp; a named barrier there raced and hung, as the warpgroup may release several
// stages before the fetch warp waits), so the warpgroup never waits on a block barrier. (With
// the fetch issued by thread 0 after a block barrier, one chunk takes ~2,250 cycles, of which the
// loop head and the first product's wait for the warpgroup ~650; its tensor work is ~900
// cycles.) q̃·S runs while V_new is packed. Issuing chunk c + 1's products before chunk c's o
// stores (so that they overlap) makes ptxas serialise every wgmma (C7514: groups in flight across
// the loop's back edge while accumulators are read).
// The prologue of both wgmma state passes: this thread's warp, lane and q (lane % 4), the CTA's
// V tile v0, value head hv and sequence n, the sequence's start bos, length len, first chunk-table
// row r0 and chunk count nch (0 for a segment pass 1 skips: `seg_skip`). (warp, len and nch are broadcast from lane 0: ptxas then knows them
// warp-uniform; branches on values it cannot prove uniform make it serialise every wgmma, C7518.)
#define WG_CTA_PROLOGUE(p)                                                                           \
    const int warp = __shfl_sync(0xffffffffu, (int)threadIdx.x >> 5, 0), lane = threadIdx.x & 31,   \
              q = lane & 3;                                                                          \
    const int v0 = blockIdx.x * 64, hv = blockIdx.y, n = (blockIdx.z);                               \
    const i64 bos = seq_start(p, n), eos = seq_start(p, n + 1);                                      \
    const int len = __shfl_sync(0xffffffffu, (int)(eos - bos), 0);                                   \
    const int r0 = p.chunk_offsets[n];                                                               \
    const int nch = __shfl_sync(0xffffffffu, (p.seg_skip && p.seg_skip[n]) ? 0 : p.chunk_offsets[n + 1] - r0, 0)
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
__device__ void smallbh_state_wgmma(const Params& p, const StateWgmmaMaps& tm) {
    extern __shared__ __align__(16) char smraw[];
    char* sm = smraw + ((1024u - (smem_addr(smraw) & 1023u)) & 1023u);
    constexpr int NST = WgmmaStateSmem::NST;
    WG_CTA_PROLOGUE(p);
    u64* bars = (u64*)(sm + WgmmaStateSmem::MB);
    u64* empty = bars + NST;
    wg_bars_init(bars, empty, NST, 4);  // (empty: lane 0 of each warpgroup warp)
    if (warp == 4) {  // the fetch warp
        if (lane == 0) {
            for (int c = 0; c < nch; ++c) {
                if (c >= NST) {
                    // the warpgroup is done with chunk c - NST's stage
                    mbar_wait(empty + c % NST, (c / NST - 1) & 1);
                    fence_proxy_async();
                }
                const int blk = (r0 + c) * p.HV + hv;
                char* st = sm + (c % NST) * WgmmaStateSmem::STAGE;
                u64* bar = bars + c % NST;
                mbar_arrive_expect(bar, WgmmaStateSmem::TX);
#pragma unroll
                for (int b = 0; b < WgmmaStateSmem::NB; ++b)
                    tma_load_3d(st + b * WgmmaStateSmem::BOX, tm.wqk, 64 * b, 0, blk, bar);
                tma_load_3d(st + WgmmaStateSmem::PB, tm.p, 0, 0, blk, bar);
                const char* src = (const char*)p.work + (i64)blk * WorkspaceBlock::BLOCK;
                bulk_g2s(st + WgmmaStateSmem::GL, src + WorkspaceBlock::GL, KD * 4, bar);
                bulk_g2s(st + WgmmaStateSmem::U, src + WorkspaceBlock::U + v0 * 64 * 4, 64 * 64 * 4, bar);
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
    // instructions that the compiler may sink between the products makes ptxas wait for the
    // first group before issuing the second)
    float accW[8][4], accO[8][4];
    // Issues (W·S)ᵀ -> accW of chunk c (one group), after waiting for its stage.
    auto issue_w = [&](int c) {
        mbar_wait(bars + c % NST, (c / NST) & 1);
        const u32 sb = smem_addr(sm + (c % NST) * WgmmaStateSmem::STAGE);
        wg_fence();
#pragma unroll
        for (int ks = 0; ks < KD / 16; ++ks)
            wgmma_n64<0>(accW, sf[ks], desc_sw128(sb + (ks >> 2) * WgmmaStateSmem::BOX + 32 * (ks & 3), 16, 1024),
                         ks > 0);
        wg_commit();
    };
    // Issues (q̃·S)ᵀ -> accO of chunk c (one group).
    auto issue_q = [&](int c) {
        const u32 sb = smem_addr(sm + (c % NST) * WgmmaStateSmem::STAGE);
        wg_fence();
#pragma unroll
        for (int ks = 0; ks < KD / 16; ++ks)
            wgmma_n64<0>(accO, sf[ks],
                         desc_sw128(sb + (ks >> 2) * WgmmaStateSmem::BOX + 64 * 128 + 32 * (ks & 3), 16, 1024), ks > 0);
        wg_commit();
    };
    // Completes chunk c (both groups of it issued): V_new, the state update and oᵀ = (q̃·S)ᵀ +
    // V_newᵀ Pᵀ in accO; releases the stage; S_{c+1}'s fragments into sf.
    // This lane's Uᵀ fragments of chunk c (loaded while the products are issued: the packing
    // below then waits only for W·S).
    auto load_u = [&](int c, float4 (&u)[8]) {
        const float4* Ut = (const float4*)(sm + (c % NST) * WgmmaStateSmem::STAGE + WgmmaStateSmem::U) + warp * 256;
#pragma unroll
        for (int i = 0; i < 8; ++i) u[i] = Ut[i * 32 + lane];
    };
    auto finish = [&](int c, const float4 (&u)[8]) {
        const char* st = sm + (c % NST) * WgmmaStateSmem::STAGE;
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
        const float* GLs = (const float*)(st + WgmmaStateSmem::GL);
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
            wgmma_nk<1>(accS, av[kt], desc_sw128(sb + 128 * 128 + 2048 * kt, WgmmaStateSmem::BOX, 1024), 1);
#pragma unroll
        for (int kt = 0; kt < 4; ++kt)
            wgmma_n64<0>(accO, av[kt], desc_sw128(sb + WgmmaStateSmem::PB + 32 * kt, 16, 1024), 1);
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

// --------------------------------------------------- small-bh state pass, wgmma, T-form (gdn)
// The wgmma pass of the T-form block (TformBlock): instead of reading W, q̃, k̃ and U (~92 KB a block at
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
// those of smallbh_state_wgmma.
struct TformWgmmaSmem {
    static constexpr int NB = KD / 64;
    static constexpr int K = 0;
    static constexpr int Q = K + NB * 8192;
    static constexpr int V = Q + NB * 8192;
    static constexpr int TW = V + 8192;
    static constexpr int TU = TW + 8192;
    static constexpr int TUL = TU + 8192;
    static constexpr int P = TUL + 8192;
    static constexpr int FAC = P + 8192;
    static constexpr int TX = FAC + TformBlock::FACB;  // bytes one stage receives
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
struct __align__(64) TformStateMaps {
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
__device__ void smallbh_state_tform_wgmma(const Params& p, const TformStateMaps& tm) {
    extern __shared__ __align__(16) char smraw[];
    char* sm = smraw + ((1024u - (smem_addr(smraw) & 1023u)) & 1023u);
    constexpr int NST = TformWgmmaSmem::NST, NB = TformWgmmaSmem::NB;
    WG_CTA_PROLOGUE(p);
    const int h = hv / p.group;
    u64* bars = (u64*)(sm + TformWgmmaSmem::MB);
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
                char* st = sm + (c % NST) * TformWgmmaSmem::STAGE;
                u64* bar = bars + c % NST;
                mbar_arrive_expect(bar, TformWgmmaSmem::TX);
#pragma unroll
                for (int b = 0; b < NB; ++b) {
                    tma_load_2d(st + TformWgmmaSmem::K + b * 8192, tm.k, h * KD + 64 * b, tok, bar);
                    tma_load_2d(st + TformWgmmaSmem::Q + b * 8192, tm.q, h * KD + 64 * b, tok, bar);
                }
                tma_load_2d(st + TformWgmmaSmem::V, tm.v, hv * VD + v0, tok, bar);
                // (FLAG_DEPENDENT_LAUNCH without the overlap: the intra grid's blocks, once, before
                // the first)
                if (c == 0 && p.sync == nullptr && (p.mode & FLAG_DEPENDENT_LAUNCH)) pdl_wait();
                if (p.ov_trace) {
                    const u64 w0 = gtimer();
                    wait_ready(p, blk);
                    waited += gtimer() - w0;
                } else {
                    wait_ready(p, blk);  // (overlapped pair: the intra kernel's block is there)
                }
                tma_load_3d(st + TformWgmmaSmem::TW, tm.t, 0, 0, blk, bar);
                const char* src = (const char*)p.work + (i64)blk * WorkspaceBlock::BLOCK;
                bulk_g2s(st + TformWgmmaSmem::FAC, src + TformBlock::FAC, TformBlock::FACB, bar);
            }
        }
        // (overlapped pair: this grid completes after the intra grid. After the whole warp is
        // here: lanes 1-31 would otherwise run ahead into griddepcontrol.wait, which then holds
        // the warp, lane 0's fetch loop included, until the intra grid ends)
        __syncwarp();
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
    // the end of the chunk. (Those stores, 16 a thread with their address math, are ~16 % of the
    // pass's stall samples for every chunk; issued during the next chunk's first group they make
    // ptxas wait for that group first, and keep accO live across it (spills). ptxas also waits for
    // every wgmma in flight before shared-memory stores, hence the staging at the chunk's end.)
    // (only for sequences of more than 4 chunks: with one chunk, gdn 16/32 256x64, the staged
    // store measures 1.198 ms against 1.151 with per-thread stores; nothing overlaps it)
    const bool o16 = p.out_dt != DT_F32 && nch > 4;
    auto stage_o = [&](int c) {
        const int L = imin(CH, len - c * CH);
        if (!(o16 && L == CH)) {
            store_o_t(p, accO, (int)bos + c * CH, L, hv, vw);
            return;
        }
        const int g = lane >> 2;
        const bool bf = p.out_dt == DT_BF16;
        char* ot = sm + (c % NST) * TformWgmmaSmem::STAGE + TformWgmmaSmem::Q;
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
        char* st = sm + (c % NST) * TformWgmmaSmem::STAGE;
        const u32 sb = smem_addr(st);
        const int L = imin(CH, len - c * CH);
        if (L < CH) {
            // the last chunk of the sequence: rows [L, 64) of the k boxes and the v tile
            const int units = (CH - L) * 8;  // 16-byte units a box (rows of 128 bytes)
#pragma unroll
            for (int b = 0; b <= NB; ++b) {
                uint4* box = (uint4*)(st + (b < NB ? TformWgmmaSmem::K + b * 8192 : TformWgmmaSmem::V) + L * 128);
                for (int u = threadIdx.x; u < units; u += 128) box[u] = make_uint4(0u, 0u, 0u, 0u);
            }
            fence_proxy_async();
            nbar_sync(1, 128);
        }
        // group 1: Y = Sᵀ Kᵀ -> accW; Uᵀ = Vᵀ T_uᵀ -> accV
        wg_fence();
#pragma unroll
        for (int ks = 0; ks < KD / 16; ++ks)
            wgmma_n64<0>(accW, sf[ks], desc_sw128(sb + TformWgmmaSmem::K + (ks >> 2) * 8192 + 32 * (ks & 3), 16, 1024),
                         ks > 0);
#pragma unroll
        for (int kt = 0; kt < 4; ++kt)
            wgmma_n64_ss<1, 0>(accV, desc_sw128(sb + TformWgmmaSmem::V + 2048 * kt, 8192, 1024),
                               desc_sw128(sb + TformWgmmaSmem::TU + 32 * kt, 16, 1024), kt > 0);
#pragma unroll
        for (int kt = 0; kt < 4; ++kt)
            wgmma_n64_ss<1, 0>(accV, desc_sw128(sb + TformWgmmaSmem::V + 2048 * kt, 8192, 1024),
                               desc_sw128(sb + TformWgmmaSmem::TUL + 32 * kt, 16, 1024), 1);
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
            ay[kt] = make_uint4(pack_mma(-accW[2 * kt][0], -accW[2 * kt][1]),
                                pack_mma(-accW[2 * kt][2], -accW[2 * kt][3]),
                                pack_mma(-accW[2 * kt + 1][0], -accW[2 * kt + 1][1]),
                                pack_mma(-accW[2 * kt + 1][2], -accW[2 * kt + 1][3]));
        wg_fence();
#pragma unroll
        for (int kt = 0; kt < 4; ++kt)
            wgmma_n64<0>(accV, ay[kt], desc_sw128(sb + TformWgmmaSmem::TW + 32 * kt, 16, 1024), 1);
        wg_commit();
#pragma unroll
        for (int ks = 0; ks < KD / 16; ++ks)
            wgmma_n64<0>(accO, sf[ks], desc_sw128(sb + TformWgmmaSmem::Q + (ks >> 2) * 8192 + 32 * (ks & 3), 16, 1024),
                         ks > 0);
        wg_commit();
        wg_wait<1>();  // group 2 done
        wg_fence_acc(accV);
        const float* F = (const float*)(st + TformWgmmaSmem::FAC);
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
        for (int kt = 0; kt < 4; ++kt)
            wgmma_nk<1>(accS, ak[kt], desc_sw128(sb + TformWgmmaSmem::K + 2048 * kt, 8192, 1024), 1);
#pragma unroll
        for (int kt = 0; kt < 4; ++kt)
            wgmma_n64<0>(accO, av[kt], desc_sw128(sb + TformWgmmaSmem::P + 32 * kt, 16, 1024), 1);
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

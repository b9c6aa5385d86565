// prefill_state.cuh: the small-bh state pass on mma.sync (any architecture the modules build
// for), the second kernel of the workspace small-bh form; its register layout and helpers are
// shared by the wgmma passes of prefill_state_wgmma.cuh.

// ---------------------------------------------------------------- small-bh state pass (mma.sync)
// Register-state design (the layout FlashInfer/FlashQLA use with wgmma, here on mma.sync): the
// pass works on transposes, Sᵀ (V x K) in f32 mma accumulators, held in registers for the whole
// sequence, and splits each 16 V columns between a state warp and an output warp:
//   state warp:  (W·S)ᵀ = Sᵀ Wᵀ, A = bf16(Sᵀ) from the accumulators; V_newᵀ = Uᵀ - (W·S)ᵀ;
//                Sᵀ <- Sᵀ diag(e^Γlast) + V_newᵀ k̃ (V_newᵀ as the A operand, from registers)
//   output warp: oᵀ = Sᵀ q̃ᵀ + V_newᵀ Pᵀ, with bf16(Sᵀ) and V_newᵀ handed over through shared
//                memory as ready A fragments (one 16-byte load per lane and k step)
// so the serial chain (two products a chunk) runs on one warp without a barrier and the other
// half of the tensor-core work on another SM sub-partition. The B operands (W, q̃, k̃, P) come from
// the stage with ldmatrix. (S in shared memory as the B operand of 16 warps with one 16x8 tile
// each re-reads every fragment in 4 warps and waits on the shared-memory pipe: 2.7 us a chunk,
// against 1.5 us here; the HMMA issue alone is ~1,350 cycles a chunk at one per 6 cycles.)
// A chunk's workspace block (WorkspaceBlock: W, q̃, k̃, P, e^Γlast already padded, then the tile's
// Uᵀ) comes in with two bulk copies on an mbarrier, NST - 1 chunks ahead (8 bulk copies, or
// per-thread cp.async, measure slower).
template <int VT>
struct StateSmem {
    static constexpr int NW = VT / 16;          // warp pairs (state warp w, output warp NW + w)
    static constexpr int UB = 64 * VT * 4;      // the tile's Uᵀ fragments
    static constexpr int STAGE = WorkspaceBlock::MAIN + UB;
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

// State kernel: grid (VD / VT, HV, N), VT / 8 warps, dynamic shared memory StateSmem<VT>::TOTAL.
// Walks the chunks of one (sequence, value head) for V columns [v0, v0 + VT). One block-wide
// barrier per chunk, after which lane 0 of the first output warp refills the stage every warp
// finished with in the previous chunk; inside a chunk, output warp NW + w waits (named barrier
// 1 + w) for state warp w's V_newᵀ. bf16(Sᵀ) alternates between two buffers by chunk parity: the
// state warp writes S_{c+1} during chunk c while its output warp may still read S_c.
template <bool KDA, int VT>
__device__ void smallbh_state(const Params& p) {
    typedef StateSmem<VT> RL;
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
        const char* src = (const char*)p.work + ((i64)(r0 + c) * p.HV + hv) * WorkspaceBlock::BLOCK;
        char* st = sm + (c % RL::NST) * RL::STAGE;
        u64* bar = bars + c % RL::NST;
        mbar_arrive_expect(bar, RL::STAGE);
        bulk_g2s(st, src, WorkspaceBlock::MAIN, bar);
        bulk_g2s(st + WorkspaceBlock::MAIN, src + WorkspaceBlock::U + v0 * 64 * 4, RL::UB, bar);
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
        if (fetcher && c + RL::NST - 1 < nch) {
            fence_proxy_async();
            fetch(c + RL::NST - 1);
        }
        mbar_wait(bars + c % RL::NST, (c / RL::NST) & 1);
        const char* st = sm + (c % RL::NST) * RL::STAGE;
        if (is_state) {
            const u32 sW = smem_addr(st + WorkspaceBlock::W), sK = smem_addr(st + WorkspaceBlock::KT);
            const float* GLs = (const float*)(st + WorkspaceBlock::GL);
            const float4* Ut = (const float4*)(st + WorkspaceBlock::MAIN) + w * 256;  // panel: 8 tiles x 32 lanes
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
            const u32 sQ = smem_addr(st + WorkspaceBlock::Q), sP = smem_addr(st + WorkspaceBlock::P);
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

// prefill_fused.cuh: the classic fused chunked kernel (chunked_fused) and the state-chunk helpers
// it shares with the fused T-form: state tile loads and stores in the mma accumulator layout, the
// bf16 copy of S for the products, the o stores, checkpoints.

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
                const int d = r + (e >> 1) * 8, v = v0 + (SQ ? cperm(cc) : cc);
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
        mma_tiles<CH, VT, KD, NW, false, true>(acc, Wm, KP, Sb, VTP, warp, lane);
        if constexpr (EARLY_O) mma_tiles<CH, VT, KD, NW, false, true>(accO, Qd, KP, Sb, VTP, warp, lane);
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
    mma_tiles<KD, VT, CH, NW, true, true>(accS, Kd, KP, Vn, VTP, warp, lane);
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
// grid (HV, N), NTH threads, dynamic shared memory ChunkSmem<KDA>::TOTAL. One CTA walks every chunk of
// one (sequence, value head): intra stage into shared memory, then the state pass over all V.
template <bool KDA>
__device__ void chunked_fused(const Params& p) {
    extern __shared__ __align__(16) char sm[];
    typedef ChunkSmem<KDA> LY;
    typedef Tiles<KD, VD, NTH / 32> TS;
    const int hv = blockIdx.x, n = blockIdx.y;
    float accS[TS::PER][4];
    // The initial state is prefetched into L2 here and loaded into registers after the first
    // chunk's intra stage. (Loaded here, its registers, live across the intra stage and partly
    // spilled, make the CTA wait for all of it: ~8,000 cycles, a fifth of a one-chunk CTA.)
    const i64 slot0 = initial_row(p, n) < 0 ? -1 : initial_row(p, n) * p.HV + hv;
    if (threadIdx.x == 0 && p.state_in != nullptr && slot0 >= 0) {
        const int es = p.s_in_dt == DT_F32 ? 4 : 2;
        const char* a = (const char*)p.state_in + slot0 * KD * VD * es;
        if (((unsigned long long)a & 15) == 0) prefetch_l2(a, (u32)(KD * VD * es));  // (bulk: 16-B aligned)
    }
    const i64 bos = seq_start(p, n), eos = seq_start(p, n + 1);
    const int len = (int)(eos - bos);
    for (int c = 0; c * CH < len; ++c) {
        const int t0 = (int)bos + c * CH;
        const int L = imin(CH, len - c * CH);
        intra_chunk<KDA>(p, sm, t0, L, hv);
        __syncthreads();
        if (c == 0) load_state<VD, NTH / 32>(p, accS, p.state_in, p.s_in_dt, slot0, 0);
        write_sb<VD, NTH / 32>(accS, (u16*)(sm + LY::SB));
        __syncthreads();
        state_chunk<VD, NTH / 32>(p, accS, (const u16*)(sm + LY::WM), (const u16*)(sm + LY::QD),
                                  (const u16*)(sm + LY::KDT), (const u16*)(sm + LY::PM),
                                  (const float*)(sm + LY::UF), LY::UST,
                                  (const float*)(sm + LY::GL), (const u16*)(sm + LY::SB),
                                  (u16*)(sm + LY::VNT), t0, L, hv, 0);
        __syncthreads();
        if (L == CH) maybe_checkpoint<VD, NTH / 32>(p, accS, n, hv, (i64)(c + 1) * CH, 0);
    }
    if (len == 0) load_state<VD, NTH / 32>(p, accS, p.state_in, p.s_in_dt, slot0, 0);  // (passes through)
    const i64 row = final_row(p, n);
    if (row >= 0) store_state<VD, NTH / 32>(p, accS, p.state_out, p.s_out_dt, row * p.HV + hv, 0);
}

// prefill_fused_tform.cuh: the fused T-form (gdn with 16-bit q, k, v, K and V >= 64, the final
// state stored in f32; `chunked` where it applies).
//
// grid (HV, N), NTH threads (two CTAs per SM), dynamic shared memory FusedTformSmem::TOTAL. One
// CTA per (sequence, value head) walks its chunks: the T-form intra stage into shared memory
// (intra_chunk<false, true, true, true>, which also loads the first V tile's S0 and V rows), then
// for each 64-column V tile of the state (S0 = the state before the chunk):
//   1. S0 tile in f32 registers (accumulator layout), Sb = bf16(S0), the V tile; warps 0-3
//      X = K·S0 while warps 4-7 U = T_u,hi V + T_u,lo V            (32 x 32 quadrant products)
//   2. warps 0-3 O = FQ ⊙ (Q·S0) while warps 4-7 V_new = U + T_w (-X)
//   3. warps 0-3 O += P·V_new, o stored; 4. S = e^Γlast S0 + Kᵀ (FK ⊙ V_new) onto the S0 registers
// No state lives in registers across the intra stage (two CTAs per SM: 128 registers), so the
// state between chunks is the f32 final-state row itself (the host takes this kernel only where
// the final state is stored in f32; an in-place pool is safe: every element is read before the
// same thread writes it, and the S0 tile of a V tile is read before any write to it).
// Rows past L: q, k rows and β are zero, so they add nothing; o rows < L are stored.
// (FusedTformSmem::ON: K and V >= 64; gdn_prefill.cu defines the entry point for those only)
#if HEAD_K >= 64 && HEAD_V >= 64
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
// SQ (FT_SQ, K = 128): the S tile in quadrants (s_rc) with internal V columns (cperm): a lane's
// 8 consecutive physical columns of a row in one or two 16-byte accesses.
template <int VT, int NW, bool SQ>
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
    const FtStride st = ft_stride(p, slot, r, v0 + (SQ ? cperm(c) : c));
    with_dt(dt, [&](auto D) {
        constexpr int DT = decltype(D)::value;
        if constexpr (SQ) {
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
                const i64 o = st.base + 8 * i;
                float x[2], y[2];
                ldv<DT, 2>(base, o, x);
                ldv<DT, 2>(base, o + 8 * st.sd, y);
                acc[i][0] = x[0], acc[i][1] = x[1], acc[i][2] = y[0], acc[i][3] = y[1];
            }
        } else {
#pragma unroll
            for (int i = 0; i < TS::PER; ++i) {
                const i64 o = st.base + (i64)(8 * i) * st.se;
                acc[i][0] = ldt<DT>(base, o);
                acc[i][1] = ldt<DT>(base, o + st.se);
                acc[i][2] = ldt<DT>(base, o + 8 * st.sd);
                acc[i][3] = ldt<DT>(base, o + 8 * st.sd + st.se);
            }
        }
    });
}
template <int VT, int NW, bool SQ>
__device__ __forceinline__ void ft_st_s(const Params& p, const float (&acc)[Tiles<KD, VT, NW>::PER][4], void* base,
                                        int dt, i64 slot, int v0) {
    typedef Tiles<KD, VT, NW> TS;
    int r, c;
    s_rc<VT, NW, SQ>(threadIdx.x >> 5, threadIdx.x & 31, 0, r, c);
    const FtStride st = ft_stride(p, slot, r, v0 + (SQ ? cperm(c) : c));
    with_dt(dt, [&](auto D) {
        constexpr int DT = decltype(D)::value;
        if constexpr (SQ) {  // (as in ft_ld_s)
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
                const i64 o = st.base + 8 * i;
                st2<DT>(base, o, acc[i][0], acc[i][1]);
                st2<DT>(base, o + 8 * st.sd, acc[i][2], acc[i][3]);
            }
        } else {
#pragma unroll
            for (int i = 0; i < TS::PER; ++i) {
                const i64 o = st.base + (i64)(8 * i) * st.se;
                st1<DT>(base, o, acc[i][0]);
                st1<DT>(base, o + st.se, acc[i][1]);
                st1<DT>(base, o + 8 * st.sd, acc[i][2]);
                st1<DT>(base, o + 8 * st.sd + st.se, acc[i][3]);
            }
        }
    });
}
// L2 prefetches for the fused T-form (one bulk prefetch a row, threads 0-255): the V rows of
// chunk [t0, t0 + L), read after its intra stage, and the q, k and v rows of the next chunk
// [t1, t1 + L1) (L1 = 0: none). (q, k and v are 16-byte aligned, rows a multiple of 16 bytes.)
// (Without them the fused T-form measures 0.872 against 0.873 ms at gdn 16/32 256x64 on an H200:
// neutral.)
__device__ __forceinline__ void ft_prefetch(const Params& p, int hv, int t0, int L, int t1, int L1) {
    const int tid = threadIdx.x, r = tid & 63, part = tid >> 6;
    const int es = p.qkv_dt == DT_F32 ? 4 : 2;
    const int h = hv / p.group;
    static_assert(NTH == 256, "four row parts of 64");
    if (part == 0) {
        if (r < L) prefetch_l2((const char*)p.v + ((i64)(t0 + r) * p.HV + hv) * VD * es, (u32)(VD * es));
    } else if (r < L1) {
        const i64 t = t1 + r;
        if (part == 1) {
            prefetch_l2((const char*)p.q + (t * p.H + h) * KD * es, (u32)(KD * es));
        } else if (part == 2) {
            prefetch_l2((const char*)p.k + (t * p.H + h) * KD * es, (u32)(KD * es));
        } else {
            prefetch_l2((const char*)p.v + (t * p.HV + hv) * VD * es, (u32)(VD * es));
        }
    }
}
// The initial state of (n, hv) to L2 (one bulk prefetch; thread-uniform arguments, any thread):
// 2.6 % faster at gdn 16/32 256x64 on an H200 than without.
__device__ __forceinline__ void ft_prefetch_h0(const Params& p, int n, int hv) {
    const i64 row = initial_row(p, n);
    if (p.state_in == nullptr || row < 0) return;
    const int es = p.s_in_dt == DT_F32 ? 4 : 2;
    const char* a = (const char*)p.state_in + (row * p.HV + hv) * KD * VD * es;
    if (((unsigned long long)a & 15) == 0) prefetch_l2(a, (u32)(KD * VD * es));  // (bulk: 16-B aligned)
}
// The item's values in shared memory (FtItem at the stash's end), read where used: registers
// are the fused T-form's limit (two CTAs an SM), and values kept across its barriers spill.
struct FtItem {
    i64 row0, frow;  // initial and final state rows (-1: none)
    int bos, len, n, hv;
};
// o rows < L of the chunk at token t0 (value head hv, columns v0 + the quadrant's) from a
// quadrant accumulator (mma_quad), in the output dtype.
__device__ __forceinline__ void ft_store_o_quad(const Params& p, const float (&acc)[8][4], int t0, int L, int hv,
                                                int v0, int quad, int lane) {
    with_dt(p.out_dt, [&](auto D) {
        constexpr int DT = decltype(D)::value;
        if constexpr (FT_SQ) {  // (internal columns: a lane's 8 physical columns of a row)
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
        } else {
#pragma unroll
            for (int i = 0; i < 8; ++i) {
                int r, cc;
                quad_rc(quad, lane, i, r, cc);
                const i64 o0 = ((i64)(t0 + r) * p.HV + hv) * VD + v0 + cc;
                if (r < L) st2<DT>(p.o, o0, acc[i][0], acc[i][1]);
                if (r + 8 < L) st2<DT>(p.o, o0 + (i64)8 * p.HV * VD, acc[i][2], acc[i][3]);
            }
        }
    });
}
// One item of the fused T-form: sequence n, value head hv.
// Early loads: the first V tile's S0 and V rows are loaded during the intra stage (before T's
// diagonal blocks, intra_chunk's `early`), so their latency overlaps the rest of the stage (gdn
// 16/32 256x64 on an H200: 0.866 against 0.873 ms without). The V rows are held as raw 16-bit
// words where the input type is the mma type (no conversion, so nothing waits on them early); f32
// inputs load them at the tile's top. (Loading the next tile's S0 under this tile's o product as
// well spills 48-164 bytes: the spill stores of loaded registers wait for the loads; 0.895
// against 0.880 ms.)
// Quadrant products (mma_quad): two groups of four warps side by side: warps 0-3 X = K·S0 while
// warps 4-7 build U = T_u V; then warps 0-3 Q·S0 (kept as o's accumulator) while warps 4-7 finish
// V_new = U - T_w X; then warps 0-3 o = FQ ⊙ Q·S0 + P V_new; the S update over all eight. Each
// product's operands are read from shared memory in 32 x 32 warp tiles: ~30 % fewer shared-memory
// bytes a V tile than 16 x 32 tiles of eight warps (256x64 on an H200: 0.847 against 0.862 ms).
__device__ void fused_tform_item(const Params& p, char* sm, int n, int hv) {
    typedef ChunkSmem<false, true> LY;
    typedef FusedTformSmem F;
    constexpr int NW = NTH / 32, VT = F::VT, VTP = F::VTP;
    typedef Tiles<KD, VT, NW> TS;
    constexpr bool SQ = FT_SQ;  // (the S tile in quadrants, s_rc, with internal V columns, cperm)
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    static_assert(sizeof(FtItem) <= 48 && LY::STASH + 6 * 64 * 4 + 48 <= LY::TOTAL, "FtItem in the stash");
    FtItem* itm = (FtItem*)(sm + LY::STASH + 6 * 64 * 4);
    if (tid == 0) {
        const i64 bos = seq_start(p, n);
        *itm = FtItem{initial_row(p, n), final_row(p, n), (int)bos, (int)(seq_start(p, n + 1) - bos), n, hv};
        ft_prefetch_h0(p, n, hv);
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
    // (the S region: Sb, then the FK-scaled V_new after step 2; XV: the V tile, then -X after
    // step 1, then V_new after step 2)
    u16* Sb = (u16*)(sm + F::SR);
    u16* Vs = Sb + 64 * VTP;
    u16* XV = (u16*)(sm + F::XV);
    u16* Vh = XV;
    const int nch = (len + CH - 1) / CH;
    constexpr int VE = 64 * VT / NTH / 4;  // groups of 4 V elements a thread
    constexpr int NVT = VD / VT;           // V tiles
    const bool vraw = p.qkv_dt == (MMA_F16 ? DT_F16 : DT_BF16);
    // (the item's values are read from itm where used; c and nch stay in registers)
    auto t0_of = [&](int c) { return itm->bos + c * CH; };
    auto l_of = [&](int c) { return imin(CH, itm->len - c * CH); };
    auto fslot_of = [&]() { return itm->frow < 0 ? (i64)-1 : itm->frow * p.HV + itm->hv; };
#pragma unroll 1
    for (int c = 0; c < nch; ++c) {
        {
            // S0 of V tile v0 in the accumulator layout: the initial state, then the final-state
            // row (f32, written by this thread for the previous chunk); the raw V rows (rows past
            // L re-read row L - 1: T_u's columns there are zero)
            auto ld_s0 = [&](float (&s)[TS::PER][4], int v0) {
                if (c == 0)
                    ft_ld_s<VT, NW, SQ>(p, s, p.state_in, p.s_in_dt,
                                        itm->row0 < 0 ? (i64)-1 : itm->row0 * p.HV + itm->hv, v0);
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
            float s0[TS::PER][4];  // (S0 of the tile to come: the first loaded in the intra stage)
            uint2 vw[VE];
            {
                const int t0 = t0_of(c), L = l_of(c);
                ft_prefetch(p, itm->hv, t0, L, t0 + CH, imin(CH, itm->len - (c + 1) * CH));
            }
            auto early = [&]() {
                ld_s0(s0, 0);
                ld_vw(vw, 0);
            };
            intra_chunk<false, true, true, true, decltype(early)>(p, sm, t0_of(c), l_of(c), itm->hv, nullptr, -1, 0,
                                                                  early);
#pragma unroll 1
            for (int vt = 0; vt < NVT; ++vt) {
                const int v0 = vt * VT;
                // Sb from S0 (kept for step 4); the V tile's rows to XV.
                if (vt > 0) {
                    ld_s0(s0, v0);
                    ld_vw(vw, v0);
                }
                // (SQ: physical columns cc .. cc + 3 are two pairs of internal columns)
                auto st_v = [&](int t, int cc, uint2 w) {
                    if constexpr (SQ) {
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
                {
                    // (phase 1: warps 0-3 X, warps 4-7 U = T_u V; phase 2: warps 0-3 Q·S0, warps
                    // 4-7 V_new = U - T_w X, with -X in XV (the V tile is dead after phase 1);
                    // phase 3: warps 0-3 o. This order measures 0.841 against 0.851 ms at 256x64
                    // for X beside Q·S0, then V_new and o each on one group)
                    const bool kg = warp < 4;  // (warp-uniform)
                    const int quad = warp & 3;
                    float acc[8][4];
                    zero_acc(acc);
                    if (kg) mma_quad<KD>(acc, Ks, nullptr, KP, Sb, VTP, quad, lane);
                    else mma_quad<CH, true, true>(acc, Tuh, Tul, CP, Vh, VTP, quad, lane);
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
                        mma_quad<CH, false, true>(acc, Tw, nullptr, CP, XV, VTP, quad, lane);
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
                    if (kg) {
                        mma_quad<CH, false, true>(acc, Pm, nullptr, CP, XV, VTP, quad, lane);
                        ft_store_o_quad(p, acc, t0_of(c), l_of(c), itm->hv, v0, quad, lane);
                    }
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
                    if (fslot >= 0)
                        ft_st_s<VT, NW, SQ>(p, accS, p.state_out, c + 1 == nch ? p.s_out_dt : DT_F32, fslot, v0);
                }
                __syncthreads();  // (Sb, Vs and XV are rewritten by the next tile or chunk)
            }
        }
    }
}
// The kernel: one item a CTA, grid (HV, N).
__device__ void fused_tform(const Params& p) {
    extern __shared__ __align__(16) char sm[];
    fused_tform_item(p, sm, blockIdx.y, blockIdx.x);
}
#endif  // HEAD_K >= 64 && HEAD_V >= 64

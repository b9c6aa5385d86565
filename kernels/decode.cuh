// decode.cuh: token-sequential recurrence (SPEC.md section 3) for decode, T >= 1 tokens per
// sequence (plain decode and speculative verify), shared by gdn_decode.cu and kda_decode.cu.
//
// Compile-time constants: HEAD_K, HEAD_V in {32, 64, 128}. Everything else is in `Params`.
// grid (HEAD_V / DVT, HV, N), DTH threads. Each block owns the K x DVT columns [v0, v0 + DVT) of
// the state of one (sequence, value head): columns are independent in the recurrence, so the
// V split is exact. The tile is read once with 16-byte (f32) or 8-byte (16-bit) coalesced loads
// in either layout, transposed through shared memory into registers (thread = (column, lane p of
// DP); it holds channels d = j * DP + p), updated token by token in f32, and written back the same
// way. Pool rows come from state_indices; index -1 reads zeros and writes nothing.

#ifndef HEAD_K
#error "HEAD_K must be defined (-DHEAD_K=...)"
#endif
#ifndef HEAD_V
#error "HEAD_V must be defined (-DHEAD_V=...)"
#endif
constexpr int KD = HEAD_K;
constexpr int VD = HEAD_V;
constexpr int DVT = 32;
constexpr int DTH = 128;
constexpr int DP = DTH / DVT;
constexpr int DJ = KD / DP;
static_assert(KD == 32 || KD == 64 || KD == 128, "HEAD_K must be 32, 64 or 128");
static_assert(VD == 32 || VD == 64 || VD == 128, "HEAD_V must be 32, 64 or 128");

// Tile [KD][DVT + 1] f32 <-> state slot `slot` (columns v0..v0+DVT) in global memory. Each thread
// moves U units of 4 elements (one 16-byte f32 or 8-byte 16-bit access); all loads are issued
// before the first shared store.
constexpr int TU = KD * DVT / 4 / DTH;
__device__ __forceinline__ void unit_pos(int layout, int u, int v0, int& d, int& e, i64& o) {
    if (layout == LAYOUT_KV) {
        d = u / (DVT / 4);
        e = (u % (DVT / 4)) * 4;
        o = (i64)d * VD + v0 + e;
    } else {
        e = u / (KD / 4);
        d = (u % (KD / 4)) * 4;
        o = (i64)(v0 + e) * KD + d;
    }
}
// `mid()` runs between issuing the loads and storing them (other loads overlap with these).
template <class Mid>
__device__ __forceinline__ void tile_load(const Params& p, float (*S)[DVT + 1], const void* base,
                                          int dt, i64 slot, int v0, Mid&& mid) {
    const int tid = threadIdx.x;
    if (base == nullptr || slot < 0) {
        mid();
        for (int idx = tid; idx < KD * DVT; idx += DTH) S[idx / DVT][idx % DVT] = 0.0f;
        return;
    }
    const i64 off = slot * KD * VD;
    with_dt(dt, [&](auto D) {
        constexpr int DT = decltype(D)::value;
        float x[TU][4];
#pragma unroll
        for (int m = 0; m < TU; ++m) {
            int d, e;
            i64 o;
            unit_pos(p.layout, tid + DTH * m, v0, d, e, o);
            if (DT == DT_F32) {
                const float4 w = *(const float4*)((const float*)base + off + o);
                x[m][0] = w.x; x[m][1] = w.y; x[m][2] = w.z; x[m][3] = w.w;
            } else {
                const uint2 w = *(const uint2*)((const u16*)base + off + o);
                const u16 hs[4] = {(u16)(w.x & 0xffffu), (u16)(w.x >> 16), (u16)(w.y & 0xffffu), (u16)(w.y >> 16)};
#pragma unroll
                for (int z = 0; z < 4; ++z) x[m][z] = DT == DT_BF16 ? bf16_to_f32(hs[z]) : f16_to_f32(hs[z]);
            }
        }
        mid();
#pragma unroll
        for (int m = 0; m < TU; ++m) {
            int d, e;
            i64 o;
            unit_pos(p.layout, tid + DTH * m, v0, d, e, o);
#pragma unroll
            for (int z = 0; z < 4; ++z) {
                if (p.layout == LAYOUT_KV) S[d][e + z] = x[m][z];
                else S[d + z][e] = x[m][z];
            }
        }
    });
}
__device__ __forceinline__ u16 to_half_bits(float x, int dt) {
    return dt == DT_BF16 ? f32_to_bf16(x) : f32_to_f16(x);
}
__device__ __forceinline__ void tile_store(const Params& p, float (*S)[DVT + 1], void* base, int dt,
                                           i64 slot, int v0) {
    const int tid = threadIdx.x;
    const i64 off = slot * KD * VD;
    with_dt(dt, [&](auto D) {
        constexpr int DT = decltype(D)::value;
#pragma unroll
        for (int m = 0; m < TU; ++m) {
            int d, e;
            i64 o;
            unit_pos(p.layout, tid + DTH * m, v0, d, e, o);
            float x[4];
#pragma unroll
            for (int z = 0; z < 4; ++z) x[z] = p.layout == LAYOUT_KV ? S[d][e + z] : S[d + z][e];
            if (DT == DT_F32) {
                *(float4*)((float*)base + off + o) = make_float4(x[0], x[1], x[2], x[3]);
            } else {
                uint2 w;
                w.x = (u32)to_half_bits(x[0], DT) | ((u32)to_half_bits(x[1], DT) << 16);
                w.y = (u32)to_half_bits(x[2], DT) | ((u32)to_half_bits(x[3], DT) << 16);
                *(uint2*)((u16*)base + off + o) = w;
            }
        }
    });
}

template <bool KDA>
__device__ void recurrent(const Params& p) {
    __shared__ float S[KD][DVT + 1];
    __shared__ float ks[KD], qs[KD], dec[KD], vs[DVT];
    __shared__ float bsh;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int v0 = blockIdx.x * DVT, hv = blockIdx.y, n = blockIdx.z;
    const int h = hv / p.group;
    const int col = tid / DP, pp = tid % DP;
    const i64 bos = ld_i(p.cu_seqlens, n, p.off_dt), eos = ld_i(p.cu_seqlens, n + 1, p.off_dt);
    // One token's inputs into shared memory: k and q (L2-normalised), the decay factors, the v
    // tile and beta (one role per warp).
    auto load_token = [&](i64 t) {
            if (warp < 2) {
                const void* src = warp == 0 ? p.k : p.q;
                float* dst = warp == 0 ? ks : qs;
                with_dt(p.qkv_dt, [&](auto D) {
                    constexpr int DT = decltype(D)::value;
                    float x[KD / 32];
                    float ss = 0.0f;
#pragma unroll
                    for (int j = 0; j < KD / 32; ++j) x[j] = ldt<DT>(src, ((i64)t * p.H + h) * KD + lane + 32 * j);
#pragma unroll
                    for (int j = 0; j < KD / 32; ++j) ss += x[j] * x[j];
                    float r = 1.0f;
                    if (p.l2norm) {
                        float y;
                        asm("rsqrt.approx.f32 %0, %1;" : "=f"(y) : "f"(warp_sum(ss) + 1e-6f));
                        r = y;
                    }
#pragma unroll
                    for (int j = 0; j < KD / 32; ++j) dst[lane + 32 * j] = x[j] * r;
                });
            } else if (warp == 2) {
                with_dt(p.g_dt, [&](auto D) {
                    constexpr int DT = decltype(D)::value;
                    float x[KD / 32], b[KD / 32];
#pragma unroll
                    for (int j = 0; j < KD / 32; ++j) {
                        const int d = lane + 32 * j;
                        x[j] = KDA ? ldt<DT>(p.g, ((i64)t * p.HV + hv) * KD + d) : ldt<DT>(p.g, (i64)t * p.HV + hv);
                        b[j] = gate_bias(p, KDA ? hv * KD + d : hv);
                    }
                    const float a = gate_a(p, hv);
#pragma unroll
                    for (int j = 0; j < KD / 32; ++j) dec[lane + 32 * j] = fexp(gate_apply(p, x[j], b[j], a));
                });
            } else {
                float vv = 0.0f, bb = 0.0f;
                with_dt(p.qkv_dt, [&](auto D) {
                    vv = ldt<decltype(D)::value>(p.v, ((i64)t * p.HV + hv) * VD + v0 + lane);
                });
                if (lane == 0) bb = ld_f(p.beta, (i64)t * p.HV + hv, p.beta_dt);
                vs[lane] = vv;
                if (lane == 0) bsh = beta_value(p, bb);
            }
    };
    const i64 rin = initial_row(p, n);
    tile_load(p, S, p.state_in, p.s_in_dt, rin < 0 ? -1 : rin * p.HV + hv, v0, [&]() {
        if (bos < eos) load_token(bos);
    });
    __syncthreads();
    float s[DJ];
#pragma unroll
    for (int j = 0; j < DJ; ++j) s[j] = S[j * DP + pp][col];
    for (i64 t = bos; t < eos; ++t) {
        if (t > bos) {
            load_token(t);
            __syncthreads();
        }
        float kv = 0.0f;
#pragma unroll
        for (int j = 0; j < DJ; ++j) {
            const int d = j * DP + pp;
            s[j] *= dec[d];
            kv += s[j] * ks[d];
        }
#pragma unroll
        for (int o = 1; o < DP; o <<= 1) kv += __shfl_xor_sync(0xffffffffu, kv, o);
        const float u = bsh * (vs[col] - kv);
        float os = 0.0f;
#pragma unroll
        for (int j = 0; j < DJ; ++j) {
            const int d = j * DP + pp;
            s[j] += ks[d] * u;
            os += s[j] * qs[d];
        }
#pragma unroll
        for (int o = 1; o < DP; o <<= 1) os += __shfl_xor_sync(0xffffffffu, os, o);
        if (pp == 0) st_f(p.o, ((i64)t * p.HV + hv) * VD + v0 + col, p.out_dt, p.scale * os);
        const i64 pos = t - bos + 1;
        if (p.ck_every > 0 && pos % p.ck_every == 0) {
#pragma unroll
            for (int j = 0; j < DJ; ++j) S[j * DP + pp][col] = s[j];
            __syncthreads();
            const i64 slot = ((i64)p.ck_offsets[n] + pos / p.ck_every - 1) * p.HV + hv;
            tile_store(p, S, p.checkpoints, p.s_out_dt, slot, v0);
        }
        __syncthreads();
    }
    const i64 rout = final_row(p, n);
    if (rout >= 0) {
#pragma unroll
        for (int j = 0; j < DJ; ++j) S[j * DP + pp][col] = s[j];
        __syncthreads();
        tile_store(p, S, p.state_out, p.s_out_dt, rout * p.HV + hv, v0);
    }
}

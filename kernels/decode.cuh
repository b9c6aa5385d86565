// decode.cuh: token-sequential recurrence (docs/spec.md section 3) for decode, T >= 1 tokens per
// sequence (plain decode and speculative verify), shared by gdn_decode.cu and kda_decode.cu.
//
// Compile-time constants: HEAD_K, HEAD_V in {32, 64, 128}. Everything else is in `Params`.
// 1-D grid of HEAD_V / DVT x HV x N blocks, NTH = 160 threads: 4 state warps (DTH = 128 threads) and 1 token
// warp. Each block owns the K x DVT columns [v0, v0 + DVT) of the state of one (sequence, value
// head): columns are independent in the recurrence, so the V split is exact. The kernel is bound
// by moving the state (read once, written once), so everything is arranged around that:
//
// * No shared-memory tile: each state thread keeps, in registers, exactly the NU = K / 16 units of
//   4 contiguous state elements that it loads (one 16-byte f32 or 8-byte 16-bit access per unit),
//   computes on them in that arrangement and stores them back from there. Unit u = tid + DTH * i
//   (i < NU) of the tile is
//     kv ([.., K, V], V contiguous): row d = u / 8, columns 4 * (u % 8) .. + 3;
//         a warp access covers 4 rows x 32 columns (whole 128-byte lines in f32);
//     vk ([.., V, K], K contiguous): column u / (K / 4), rows 4 * (u % (K / 4)) .. + 3;
//         the tile is one contiguous block and a warp access covers 512 contiguous bytes.
//   A state thread issues all NU loads first and holds nothing else meanwhile; at most 96
//   registers, 4 blocks (16 state warps, 64 KB of f32 state in flight) an SM, the fastest for one
//   token a sequence (the entry points in gdn_decode.cu: 4, 5 and 6 blocks an SM; the 64 registers
//   of 6 spill, kv: the checkpoint branch, kda most).
// * The token warp computes each token's inputs (k and q L2-normalised, k . q, the decay factors,
//   the v tile, beta) into a double-buffered shared block, with all its loads in flight before the
//   first conversion: the first token while the state loads are in flight, token t + 1 while the
//   state warps run token t. One block barrier per token (none after the last) publishes a buffer
//   and frees the other (kv adds one mid-token, below).
// * Per token the two reductions over K (S^T k and S^T q of the decayed state) run together:
//   with S' = S + k u^T the read-out is S'^T q = S^T q + u (k . q), so the output needs no second
//   pass over the updated state. kv: a thread holds rows r + 16 i of 4 columns; it sums over its
//   rows, a two-step shuffle reduce-scatter sums over the 4 row lanes of a warp, and the 4 warps'
//   partial sums meet in shared memory (a block barrier, which the token warp meets between
//   issuing the next token's loads and storing them). vk: a thread holds 4
//   rows of NU columns; a shuffle reduce-scatter over the K / 4 lanes of a column leaves each
//   column's sums on 4 lanes, which compute u and the output; u is gathered back with NU shuffles.
//
// Pool rows come from state_indices; index -1 (or no initial state) starts from zeros and, for
// the final state, writes nothing. Checkpoints and the final state are stored from registers with
// evict-first (streaming) stores.

#ifndef HEAD_K
#error "HEAD_K must be defined (-DHEAD_K=...)"
#endif
#ifndef HEAD_V
#error "HEAD_V must be defined (-DHEAD_V=...)"
#endif
constexpr int KD = HEAD_K;
constexpr int VD = HEAD_V;
constexpr int DVT = 32;
constexpr int DTH = 128;       // state threads (warps 0 .. DW - 1)
constexpr int DW = DTH / 32;
constexpr int NTH = DTH + 32;  // plus one token-input warp
constexpr int NU = KD * DVT / 4 / DTH; // units of 4 state elements per thread (= KD / 16)
constexpr int KL = KD / 4;             // vk: lanes that share one state column
static_assert(KD == 32 || KD == 64 || KD == 128, "HEAD_K must be 32, 64 or 128");
static_assert(VD == 32 || VD == 64 || VD == 128, "HEAD_V must be 32, 64 or 128");
static_assert(NU * 4 == KL, "vk: each column's reduction leaves its sum on 4 lanes");

struct DecodeSmem {
    float k[2][KD];
    float q[2][KD];
    float dec[2][KD]; // gdn: [0] only
    float v[2][DVT];
    float beta[2], kq[2];
    float pad[4];
    float red[2][DW][DVT]; // kv: per-warp partial sums of S^T k ([0]) and S^T q ([1])
};

// Offset (elements) of this thread's unit 0 inside one state, and the distance between its units.
template <int L>
__device__ __forceinline__ int unit_base(int tid, int v0) {
    return L == LAYOUT_KV ? (tid >> 3) * VD + v0 + 4 * (tid & 7) : v0 * KD + 4 * tid;
}
template <int L>
__device__ __forceinline__ constexpr int unit_stride() {
    return L == LAYOUT_KV ? (DTH / 8) * VD : 4 * DTH;
}

// Issues the NU loads of this thread's units of state slot `slot` (raw bits; f32: 4 words per
// unit, 16-bit: 2 words).
template <int L>
__device__ __forceinline__ void state_issue(const void* base, int dt, i64 slot, int tid, int v0,
                                            u32 (&raw)[NU][4]) {
    const i64 off = slot * (KD * VD) + unit_base<L>(tid, v0);
    if (dt == DT_F32) {
        const float* src = (const float*)base + off;
#pragma unroll
        for (int i = 0; i < NU; ++i) {
            const uint4 w = *(const uint4*)(src + i * unit_stride<L>());
            raw[i][0] = w.x;
            raw[i][1] = w.y;
            raw[i][2] = w.z;
            raw[i][3] = w.w;
        }
    } else {
        const u16* src = (const u16*)base + off;
#pragma unroll
        for (int i = 0; i < NU; ++i) {
            const uint2 w = *(const uint2*)(src + i * unit_stride<L>());
            raw[i][0] = w.x;
            raw[i][1] = w.y;
        }
    }
}
__device__ __forceinline__ void state_convert(int dt, const u32 (&raw)[NU][4], float (&s)[NU][4]) {
    if (dt == DT_F32) {
#pragma unroll
        for (int i = 0; i < NU; ++i)
#pragma unroll
            for (int z = 0; z < 4; ++z) s[i][z] = __uint_as_float(raw[i][z]);
    } else if (dt == DT_BF16) {
#pragma unroll
        for (int i = 0; i < NU; ++i)
#pragma unroll
            for (int z = 0; z < 4; ++z) s[i][z] = bf16_to_f32((u16)(raw[i][z >> 1] >> (16 * (z & 1))));
    } else {
#pragma unroll
        for (int i = 0; i < NU; ++i)
#pragma unroll
            for (int z = 0; z < 4; ++z) s[i][z] = f16_to_f32((u16)(raw[i][z >> 1] >> (16 * (z & 1))));
    }
}

#ifndef DELTARULE_EMU
__device__ __forceinline__ void st_cs_f4(float* p, float a, float b, float c, float d) {
    asm volatile("st.global.cs.v4.f32 [%0], {%1, %2, %3, %4};" ::"l"(p), "f"(a), "f"(b), "f"(c), "f"(d));
}
__device__ __forceinline__ void st_cs_u2(u16* p, u32 a, u32 b) {
    asm volatile("st.global.cs.v2.b32 [%0], {%1, %2};" ::"l"(p), "r"(a), "r"(b));
}
#endif
// Stores this thread's units into state slot `slot` (same arrangement as `state_issue`).
template <int L>
__device__ __forceinline__ void state_store(void* base, int dt, i64 slot, int tid, int v0,
                                            const float (&s)[NU][4]) {
    const i64 off = slot * (KD * VD) + unit_base<L>(tid, v0);
    if (dt == DT_F32) {
        float* dst = (float*)base + off;
#pragma unroll
        for (int i = 0; i < NU; ++i) st_cs_f4(dst + i * unit_stride<L>(), s[i][0], s[i][1], s[i][2], s[i][3]);
    } else {
        u16* dst = (u16*)base + off;
        const bool bf = dt == DT_BF16;
#pragma unroll
        for (int i = 0; i < NU; ++i) {
            u32 h[4];
#pragma unroll
            for (int z = 0; z < 4; ++z) h[z] = bf ? (u32)f32_to_bf16(s[i][z]) : (u32)f32_to_f16(s[i][z]);
            st_cs_u2(dst + i * unit_stride<L>(), h[0] | (h[1] << 16), h[2] | (h[3] << 16));
        }
    }
}

constexpr int ilog2c(int x) { return x <= 1 ? 0 : 1 + ilog2c(x / 2); }
// Sums a[] and b[] (N values each) over the lanes that differ only in lane bits MHI, MHI / 2, ...,
// MLO (powers of two). Halving steps first (at mask m the lane with the bit set keeps the upper
// half and receives its partner's upper half), then butterfly steps on the one value left. The
// result, in a[0] and b[0], is the sum of entry (lane / (2 * MHI / N)) % N, bit-identical on every
// lane that holds the same entry.
template <int N, int MHI, int MLO>
__device__ __forceinline__ void reduce_scatter2(float (&a)[N], float (&b)[N], int lane) {
    constexpr int HALV = ilog2c(N);
    constexpr int STEPS = ilog2c(MHI / MLO) + 1;
    static_assert(HALV <= STEPS, "more entries than lanes");
#pragma unroll
    for (int st = 0; st < HALV; ++st) {
        const int m = MHI >> st;
        const int n = N >> (st + 1);
        const bool hi = (lane & m) != 0;
#pragma unroll
        for (int j = 0; j < n; ++j) {
            const float sa = hi ? a[j] : a[j + n], sb = hi ? b[j] : b[j + n];
            const float ka = hi ? a[j + n] : a[j], kb = hi ? b[j + n] : b[j];
            a[j] = ka + __shfl_xor_sync(0xffffffffu, sa, m);
            b[j] = kb + __shfl_xor_sync(0xffffffffu, sb, m);
        }
    }
#pragma unroll
    for (int st = HALV; st < STEPS; ++st) {
        const int m = MHI >> st;
        a[0] += __shfl_xor_sync(0xffffffffu, a[0], m);
        b[0] += __shfl_xor_sync(0xffffffffu, b[0], m);
    }
}

// Raw bits of element i of a float tensor of dtype dt (f32: the word, 16-bit: the half in the low
// bits), so that loads of any dtype can all be in flight before the first conversion.
__device__ __forceinline__ u32 ld_bits(const void* p, i64 i, int dt) {
    return dt == DT_F32 ? ((const u32*)p)[i] : (u32)((const u16*)p)[i];
}
__device__ __forceinline__ float bits_f32(u32 x, int dt) {
    return dt == DT_F32 ? __uint_as_float(x) : dt == DT_BF16 ? __uint_as_float(x << 16) : f16_to_f32((u16)x);
}

// One token's inputs into buffer `b` of the shared block, by the token warp alone: k and q
// (L2-normalised), k . q, the decay factors (gdn: [0]), the v tile and beta. In two halves so that
// a barrier can sit between them (kv): token_issue puts every load in flight (raw bits in
// registers, no conversion), token_store converts and stores.
constexpr int TJ = KD / 32; // k, q elements per lane
template <bool KDA>
struct TokenLoads {
    u32 rk[TJ], rq[TJ], rg[KDA ? TJ : 1];
    u32 rv, rb;
    float bias[KDA ? TJ : 1];
    float alog;
};
template <bool KDA>
__device__ __forceinline__ TokenLoads<KDA> token_issue(const Params& p, int t, int h, int hv, int v0) {
    constexpr int GJ = KDA ? TJ : 1;
    const int lane = threadIdx.x & 31;
    const i64 qk0 = ((i64)t * p.H + h) * KD + lane;
    const i64 th = (i64)t * p.HV + hv;
    TokenLoads<KDA> x;
#pragma unroll
    for (int j = 0; j < TJ; ++j) {
        x.rk[j] = ld_bits(p.k, qk0 + 32 * j, p.qkv_dt);
        x.rq[j] = ld_bits(p.q, qk0 + 32 * j, p.qkv_dt);
    }
    x.rv = ld_bits(p.v, th * VD + v0 + lane, p.qkv_dt);
    x.rb = ld_bits(p.beta, th, p.beta_dt);
#pragma unroll
    for (int j = 0; j < GJ; ++j) {
        x.rg[j] = ld_bits(p.g, KDA ? th * KD + lane + 32 * j : th, p.g_dt);
        x.bias[j] = gate_bias(p, KDA ? hv * KD + lane + 32 * j : hv);
    }
    // A_log raw: its exp waits for the load, so it is taken in token_store
    x.alog = (p.gate != GATE_LOG && p.has_a_log) ? p.a_log[hv] : 0.0f;
    return x;
}
template <bool KDA>
__device__ __forceinline__ void token_store(const Params& p, DecodeSmem& sm, const TokenLoads<KDA>& x, int b) {
    constexpr int GJ = KDA ? TJ : 1;
    const int lane = threadIdx.x & 31;
    float xk[TJ], xq[TJ];
#pragma unroll
    for (int j = 0; j < TJ; ++j) {
        xk[j] = bits_f32(x.rk[j], p.qkv_dt);
        xq[j] = bits_f32(x.rq[j], p.qkv_dt);
    }
    float rnk = 1.0f, rnq = 1.0f;
    if (p.l2norm) {
        float sk = 0.0f, sq = 0.0f;
#pragma unroll
        for (int j = 0; j < TJ; ++j) {
            sk += xk[j] * xk[j];
            sq += xq[j] * xq[j];
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            sk += __shfl_xor_sync(0xffffffffu, sk, o);
            sq += __shfl_xor_sync(0xffffffffu, sq, o);
        }
        rnk = frsqrt(sk + 1e-6f);
        rnq = frsqrt(sq + 1e-6f);
    }
    const float a = (p.gate != GATE_LOG && p.has_a_log) ? fexp(x.alog) : 1.0f; // gate_a
    float kq = 0.0f;
#pragma unroll
    for (int j = 0; j < TJ; ++j) {
        const float kn = xk[j] * rnk, qn = xq[j] * rnq;
        sm.k[b][lane + 32 * j] = kn;
        sm.q[b][lane + 32 * j] = qn;
        kq += kn * qn;
    }
    kq = warp_sum(kq);
    sm.v[b][lane] = bits_f32(x.rv, p.qkv_dt);
    if (KDA) {
#pragma unroll
        for (int j = 0; j < GJ; ++j)
            sm.dec[b][lane + 32 * j] = fexp(gate_apply(p, bits_f32(x.rg[j], p.g_dt), x.bias[j], a));
    }
    if (lane == 0) {
        if (!KDA) sm.dec[b][0] = fexp(gate_apply(p, bits_f32(x.rg[0], p.g_dt), x.bias[0], a));
        sm.beta[b] = beta_value(p, bits_f32(x.rb, p.beta_dt));
        sm.kq[b] = kq;
    }
}
template <bool KDA>
__device__ __forceinline__ void load_token(const Params& p, DecodeSmem& sm, int t, int b, int h,
                                           int hv, int v0) {
    const TokenLoads<KDA> x = token_issue<KDA>(p, t, h, hv, v0);
    token_store<KDA>(p, sm, x, b);
}

// One token on this thread's units (buffer `b` published by a barrier): decay, u, output (stored
// for the columns this thread is the designated writer of), rank-1 update.
template <bool KDA, int L>
__device__ __forceinline__ void token_step(const Params& p, DecodeSmem& sm, int b, int t, int hv,
                                           int v0, float (&s)[NU][4]) {
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    if (L == LAYOUT_KV) {
        // rows r + 16 i, columns 4 cg + z
        const int r = tid >> 3, cg = tid & 7;
        const float gd = sm.dec[b][0];
        float a[4], c[4];
#pragma unroll
        for (int z = 0; z < 4; ++z) a[z] = c[z] = 0.0f;
#pragma unroll
        for (int i = 0; i < NU; ++i) {
            const int d = r + (DTH / 8) * i;
            const float kd = sm.k[b][d], qd = sm.q[b][d];
            const float g = KDA ? sm.dec[b][d] : gd;
#pragma unroll
            for (int z = 0; z < 4; ++z) {
                s[i][z] *= g;
                a[z] += s[i][z] * kd;
                c[z] += s[i][z] * qd;
            }
        }
        // sums over the warp's 4 row lanes (lane bits 4, 3): column 4 cg + (lane >> 3)
        reduce_scatter2<4, 16, 8>(a, c, lane);
        sm.red[0][warp][4 * cg + (lane >> 3)] = a[0];
        sm.red[1][warp][4 * cg + (lane >> 3)] = c[0];
        // A block barrier (the token warp meets it between issuing token t + 1's loads and
        // storing them, decode_block_layout); buffer b stays valid until the end of the token.
        // (A named barrier of the state warps alone here makes compute-sanitizer's racecheck flag
        // the token warp's stores and these reads, although the block barrier at the end of each
        // token separates them.)
        __syncthreads();
        float4 kv = *(const float4*)&sm.red[0][0][4 * cg];
#pragma unroll
        for (int w = 1; w < DW; ++w) {
            const float4 x = *(const float4*)&sm.red[0][w][4 * cg];
            kv.x += x.x; kv.y += x.y; kv.z += x.z; kv.w += x.w;
        }
        const float4 v4 = *(const float4*)&sm.v[b][4 * cg];
        const float beta = sm.beta[b];
        const float u[4] = {beta * (v4.x - kv.x), beta * (v4.y - kv.y), beta * (v4.z - kv.z), beta * (v4.w - kv.w)};
        if (tid < 8) {
            float4 sq = *(const float4*)&sm.red[1][0][4 * cg];
#pragma unroll
            for (int w = 1; w < DW; ++w) {
                const float4 y = *(const float4*)&sm.red[1][w][4 * cg];
                sq.x += y.x; sq.y += y.y; sq.z += y.z; sq.w += y.w;
            }
            const float os[4] = {sq.x, sq.y, sq.z, sq.w}, kq = sm.kq[b];
            const i64 orow = ((i64)t * p.HV + hv) * VD + v0 + 4 * cg;
#pragma unroll
            for (int z = 0; z < 4; ++z) st_f(p.o, orow + z, p.out_dt, p.scale * (os[z] + u[z] * kq));
        }
#pragma unroll
        for (int i = 0; i < NU; ++i) {
            const float kd = sm.k[b][r + (DTH / 8) * i];
#pragma unroll
            for (int z = 0; z < 4; ++z) s[i][z] += kd * u[z];
        }
    } else {
        // rows 4 dg + z, columns (tid + DTH i) / KL
        const int dg = lane & (KL - 1);
        const float4 k4 = *(const float4*)&sm.k[b][4 * dg], q4 = *(const float4*)&sm.q[b][4 * dg];
        float4 g4;
        if (KDA) g4 = *(const float4*)&sm.dec[b][4 * dg];
        else g4.x = g4.y = g4.z = g4.w = sm.dec[b][0];
        const float kk[4] = {k4.x, k4.y, k4.z, k4.w}, qq[4] = {q4.x, q4.y, q4.z, q4.w};
        const float gg[4] = {g4.x, g4.y, g4.z, g4.w};
        float a[NU], c[NU];
#pragma unroll
        for (int i = 0; i < NU; ++i) {
            a[i] = c[i] = 0.0f;
#pragma unroll
            for (int z = 0; z < 4; ++z) {
                s[i][z] *= gg[z];
                a[i] += s[i][z] * kk[z];
                c[i] += s[i][z] * qq[z];
            }
        }
        // sums over the KL lanes of a column: unit dg / 4, on lanes 4 (dg / 4) .. + 3
        reduce_scatter2<NU, KL / 2, 1>(a, c, lane);
        const int col = (tid + DTH * (dg >> 2)) / KL;
        const float um = sm.beta[b] * (sm.v[b][col] - a[0]);
        if ((dg & 3) == 0) st_f(p.o, ((i64)t * p.HV + hv) * VD + v0 + col, p.out_dt, p.scale * (c[0] + um * sm.kq[b]));
        const int src = lane & ~(KL - 1);
#pragma unroll
        for (int i = 0; i < NU; ++i) {
            const float u = __shfl_sync(0xffffffffu, um, src + 4 * i);
#pragma unroll
            for (int z = 0; z < 4; ++z) s[i][z] += kk[z] * u;
        }
    }
}

template <bool KDA, int L>
__device__ __forceinline__ void decode_block_layout(const Params& p, DecodeSmem& sm) {
    const int tid = threadIdx.x;
    const bool state_warp = tid < DTH; // warp-uniform: warp DW is the token warp
    // 1-D grid over the items, V tile fastest, then value head, then sequence (a 3-D grid would
    // cap the sequences at gridDim.z's 65535)
    constexpr int VT = VD / DVT;
    const int v0 = (int)(blockIdx.x % VT) * DVT, hv = (int)((blockIdx.x / VT) % p.HV);
    const int n = (int)(blockIdx.x / VT / p.HV);
    const int h = hv / p.group;
    // token indices fit in int (Params::T is an int)
    const int bos = (int)ld_i(p.cu_seqlens, n, p.off_dt), eos = (int)ld_i(p.cu_seqlens, n + 1, p.off_dt);
    float s[NU][4];
    if (state_warp) {
        const i64 rin = initial_row(p, n);
        if (p.state_in != nullptr && rin >= 0) {
            u32 raw[NU][4];
            state_issue<L>(p.state_in, p.s_in_dt, rin * p.HV + hv, tid, v0, raw);
            state_convert(p.s_in_dt, raw, s);
        } else {
#pragma unroll
            for (int i = 0; i < NU; ++i)
#pragma unroll
                for (int z = 0; z < 4; ++z) s[i][z] = 0.0f;
        }
    } else if (bos < eos) {
        // the first token's inputs load while the state is in flight
        load_token<KDA>(p, sm, bos, 0, h, hv, v0);
    }
    __syncthreads();
    for (int t = bos; t < eos; ++t) {
        // Token inputs alternate between two buffers: while the state warps run token t from
        // buffer b, the token warp fills the other one with token t + 1; the barrier at the end
        // of the token publishes it and frees buffer b (every state thread has finished with it).
        const int b = (t - bos) & 1;
        if (state_warp) {
            token_step<KDA, L>(p, sm, b, t, hv, v0, s);
            const int pos = t - bos + 1;
            if (p.ck_every > 0 && pos % p.ck_every == 0) {
                const i64 slot = ((i64)p.ck_offsets[n] + pos / p.ck_every - 1) * p.HV + hv;
                state_store<L>(p.checkpoints, p.s_out_dt, slot, tid, v0, s);
            }
        } else if (L == LAYOUT_KV) {
            // the state warps' barrier mid-token (token_step): token t + 1's loads are in flight
            // before it, its stores follow it
            const bool next = t + 1 < eos;
            TokenLoads<KDA> x;
            if (next) x = token_issue<KDA>(p, t + 1, h, hv, v0);
            __syncthreads();
            if (next) token_store<KDA>(p, sm, x, b ^ 1);
        } else if (t + 1 < eos) {
            load_token<KDA>(p, sm, t + 1, b ^ 1, h, hv, v0);
        }
        if (t + 1 < eos) __syncthreads();
    }
    if (state_warp) {
        const i64 rout = final_row(p, n);
        if (rout >= 0) state_store<L>(p.state_out, p.s_out_dt, rout * p.HV + hv, tid, v0, s);
    }
}

template <bool KDA>
__device__ __forceinline__ void decode_block(const Params& p) {
    __shared__ __align__(16) DecodeSmem sm;
    if (p.layout == LAYOUT_KV) decode_block_layout<KDA, LAYOUT_KV>(p, sm);
    else decode_block_layout<KDA, LAYOUT_VK>(p, sm);
}

// ------------------------------------------------------------------- the persistent form
// `{op}_decode_persistent`: as many blocks as are resident at once (the host: 4 an SM), block b
// taking the items b, b + G, b + 2G, .. (G = gridDim.x) in the order above.
// While an item's tokens run, the next item's state tile is already on its way into shared memory
// by cp.async, which holds no register while it flies: the SM keeps a tile a block in flight
// whatever phase its items are in, where the block-per-item kernel has one in flight only between
// a block's start and its first token (bytes in flight are what a faster memory asks for: the
// H200 moves ~1.45x the H100's bytes in the same latency). Each state thread copies exactly the
// units it later reads, so cp.async.wait_group alone orders its copy and its read, no barrier.
// Item k + 1's offsets and pool row reach the state warps through a shared slot that the token
// warp fills during item k from loads it issued during item k - 1; the state warps load item
// k + 2's initial pool row themselves during item k, for the copy they issue at item k + 1.
// Barriers: one at the start of each item, one after each token but an item's last, and kv's
// mid-token one, which the token warp meets per token as in the block-per-item kernel.
struct PItem {
    i64 rout;
    int bos, eos, hv, v0, ck, valid;
};
struct PersistSmem {
    DecodeSmem d;
    PItem item[2];
    u64 row[2][DTH]; // each state thread's copy of a later item's pool index (raw)
};
constexpr int PSTAGE = NU * DTH * 16; // one state tile (f32; 16-bit tiles use half)

#ifndef DELTARULE_EMU
__device__ __forceinline__ u32 dsmem_addr(const void* p) { return (u32)__cvta_generic_to_shared(p); }
__device__ __forceinline__ void cp_async_16(void* s, const void* g) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dsmem_addr(s)), "l"(g) : "memory");
}
__device__ __forceinline__ void cp_async_8(void* s, const void* g) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8;\n" ::"r"(dsmem_addr(s)), "l"(g) : "memory");
}
__device__ __forceinline__ void cp_async_4(void* s, const void* g) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(dsmem_addr(s)), "l"(g) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
// every group of this thread but the last N committed ones has landed
template <int N>
__device__ __forceinline__ void cp_async_wait_group() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory"); }
#endif

// Item `it`'s coordinates (V tile fastest, then value head, then sequence); it < items <=
// i32::MAX (the host's grid_limit), so 32-bit divisions (a 64-bit one is a ~70-instruction
// routine, and this runs several times an item).
__device__ __forceinline__ void item_coords(const Params& p, i64 it, int& v0, int& hv, int& n) {
    constexpr u32 VT = VD / DVT;
    const u32 u = (u32)it, r = u / VT, nh = (u32)p.HV;
    v0 = (int)(u % VT) * DVT;
    hv = (int)(r % nh);
    n = (int)(r / nh);
}
// Item `it`'s initial pool row, -1 for none (or past the last item).
__device__ __forceinline__ i64 item_rin(const Params& p, i64 it, i64 items) {
    if (it >= items || p.state_in == nullptr) return -1;
    int v0, hv, n;
    item_coords(p, it, v0, hv, n);
    return initial_row(p, n);
}
// Item `it`'s pool index into `slot` by cp.async (pools only; nothing past the last item): a
// row loaded into a register would stall the state warps at its first use (the compiler moves
// such a row into a uniform register at once, ptxas's R2UR right behind the load).
__device__ __forceinline__ void row_copy(const Params& p, i64 it, i64 items, u64* slot) {
    if (it >= items || p.state_in == nullptr || p.initial != INIT_POOL) return;
    int v0, hv, n;
    item_coords(p, it, v0, hv, n);
    if (p.idx_dt == DT_I64) cp_async_8(slot, (const i64*)p.state_indices + n);
    else cp_async_4(slot, (const int*)p.state_indices + n);
}
// Item `it`'s initial row as `item_rin`, the pool index from `slot` (row_copy's, landed).
__device__ __forceinline__ i64 row_read(const Params& p, i64 it, i64 items, const u64* slot) {
    if (it >= items || p.state_in == nullptr || p.initial == INIT_NONE) return -1;
    int v0, hv, n;
    item_coords(p, it, v0, hv, n);
    if (p.initial == INIT_DENSE) return n;
    return p.idx_dt == DT_I64 ? (i64)*slot : (i64)(int)(u32)*slot;
}
// Item `it`'s offsets, final pool row and first checkpoint row (valid = 0 past the last item).
__device__ __forceinline__ PItem item_meta(const Params& p, i64 it, i64 items) {
    PItem m;
    m.valid = it < items;
    if (!m.valid) {
        m.rout = -1;
        m.bos = m.eos = m.hv = m.v0 = m.ck = 0;
        return m;
    }
    int n;
    item_coords(p, it, m.v0, m.hv, n);
    // token indices fit in int (Params::T is an int)
    m.bos = (int)ld_i(p.cu_seqlens, n, p.off_dt);
    m.eos = (int)ld_i(p.cu_seqlens, n + 1, p.off_dt);
    m.rout = final_row(p, n);
    m.ck = p.ck_every > 0 ? p.ck_offsets[n] : 0;
    return m;
}
// This thread's units of state slot `slot` into `stage` by cp.async (unit i at (i DTH + tid) x 16
// bytes, f32, or x 8, 16-bit: conflict-free reads back).
template <int L>
__device__ __forceinline__ void state_copy(const void* base, int dt, i64 slot, int tid, int v0, char* stage) {
    const i64 off = slot * (KD * VD) + unit_base<L>(tid, v0);
    if (dt == DT_F32) {
        const float* src = (const float*)base + off;
#pragma unroll
        for (int i = 0; i < NU; ++i) cp_async_16(stage + (i * DTH + tid) * 16, src + i * unit_stride<L>());
    } else {
        const u16* src = (const u16*)base + off;
#pragma unroll
        for (int i = 0; i < NU; ++i) cp_async_8(stage + (i * DTH + tid) * 8, src + i * unit_stride<L>());
    }
}
__device__ __forceinline__ void state_read(int dt, const char* stage, int tid, float (&s)[NU][4]) {
    u32 raw[NU][4];
    if (dt == DT_F32) {
#pragma unroll
        for (int i = 0; i < NU; ++i) {
            const uint4 w = *(const uint4*)(stage + (i * DTH + tid) * 16);
            raw[i][0] = w.x;
            raw[i][1] = w.y;
            raw[i][2] = w.z;
            raw[i][3] = w.w;
        }
    } else {
#pragma unroll
        for (int i = 0; i < NU; ++i) {
            const uint2 w = *(const uint2*)(stage + (i * DTH + tid) * 8);
            raw[i][0] = w.x;
            raw[i][1] = w.y;
        }
    }
    state_convert(dt, raw, s);
}

template <bool KDA, int L>
__device__ __forceinline__ void decode_persistent_layout(const Params& p, PersistSmem& sm, char (&ring)[2][PSTAGE]) {
    const int tid = threadIdx.x, lane = tid & 31;
    const i64 items = (i64)(VD / DVT) * p.HV * p.N, G = gridDim.x, it0 = blockIdx.x;
    if (it0 >= items) return; // (the host sizes the grid to at most the items)
    int cur = 0;              // the token buffer of the next token
    if (tid < DTH) {
        // rk: item k's initial row. The cp.async groups of item k, in order: item k + 2's pool
        // index (into row slot k & 1), then item k + 1's tile (stage (k + 1) & 1); so at item
        // k + 1 "all but the newest group" has item k + 2's index, and "all but the newest two"
        // item k + 1's tile.
        i64 rk = item_rin(p, it0, items);
        row_copy(p, it0 + G, items, &sm.row[1][tid]);
        cp_async_commit();
        if (rk >= 0) {
            int v0, hv, n;
            item_coords(p, it0, v0, hv, n);
            state_copy<L>(p.state_in, p.s_in_dt, rk * p.HV + hv, tid, v0, ring[0]);
        }
        cp_async_commit();
        // it1: item k + 1's index
        for (i64 k = 0, it1 = it0 + G;; ++k, it1 += G) {
            __syncthreads(); // start of item k: its slot and its first token are published
            const volatile PItem* m = &sm.item[k & 1];
            if (!m->valid) break;
            // item k + 1's row (its index copied during item k - 1), item k + 2's index into
            // the slot read at item k - 1, item k + 1's tile into the other stage (whose last
            // reader was this thread, at item k - 1)
            cp_async_wait_group<1>();
            const i64 ra = row_read(p, it1, items, &sm.row[(k + 1) & 1][tid]);
            row_copy(p, it1 + G, items, &sm.row[k & 1][tid]);
            cp_async_commit();
            if (ra >= 0) {
                int v0, hv, n;
                item_coords(p, it1, v0, hv, n);
                state_copy<L>(p.state_in, p.s_in_dt, ra * p.HV + hv, tid, v0, ring[(k + 1) & 1]);
            }
            cp_async_commit();
            float s[NU][4];
            if (rk >= 0) {
                cp_async_wait_group<2>();
                state_read(p.s_in_dt, ring[k & 1], tid, s);
            } else {
#pragma unroll
                for (int i = 0; i < NU; ++i)
#pragma unroll
                    for (int z = 0; z < 4; ++z) s[i][z] = 0.0f;
            }
            rk = ra;
            const int bos = m->bos, eos = m->eos, hv = m->hv, v0 = m->v0;
            for (int t = bos; t < eos; ++t) {
                token_step<KDA, L>(p, sm.d, cur, t, hv, v0, s);
                const int pos = t - bos + 1;
                if (p.ck_every > 0 && pos % p.ck_every == 0) {
                    const i64 slot = ((i64)m->ck + pos / p.ck_every - 1) * p.HV + hv;
                    state_store<L>(p.checkpoints, p.s_out_dt, slot, tid, v0, s);
                }
                cur ^= 1;
                if (t + 1 < eos) __syncthreads();
            }
            const i64 rout = m->rout;
            if (rout >= 0) state_store<L>(p.state_out, p.s_out_dt, rout * p.HV + hv, tid, v0, s);
        }
    } else {
        // c: item k; n1: item k + 1 (loads issued during item k - 1)
        PItem c = item_meta(p, it0, items);
        if (lane == 0) sm.item[0] = c;
        PItem n1 = item_meta(p, it0 + G, items);
        if (c.bos < c.eos) load_token<KDA>(p, sm.d, c.bos, 0, c.hv / p.group, c.hv, c.v0);
        for (i64 k = 0, it2 = it0 + 2 * G;; ++k, it2 += G) {
            __syncthreads(); // start of item k
            if (!c.valid) break;
            // slot (k + 1) & 1 was last read during item k - 1; published at item k + 1's start
            if (lane == 0) sm.item[(k + 1) & 1] = n1;
            const PItem n2 = item_meta(p, it2, items);
            const bool n1_tokens = n1.valid && n1.bos < n1.eos;
            for (int t = c.bos; t < c.eos; ++t) {
                // the next token: this item's, else the next item's first
                const bool more = t + 1 < c.eos, next = more || n1_tokens;
                const int tn = more ? t + 1 : n1.bos, hvn = more ? c.hv : n1.hv, v0n = more ? c.v0 : n1.v0;
                if (L == LAYOUT_KV) {
                    TokenLoads<KDA> x;
                    if (next) x = token_issue<KDA>(p, tn, hvn / p.group, hvn, v0n);
                    __syncthreads(); // token_step's mid-token barrier
                    if (next) token_store<KDA>(p, sm.d, x, cur ^ 1);
                } else if (next) {
                    load_token<KDA>(p, sm.d, tn, cur ^ 1, hvn / p.group, hvn, v0n);
                }
                cur ^= 1;
                if (more) __syncthreads();
            }
            // an item without tokens: the next item's first token (buffer cur: its last reader
            // finished before the previous item's last barrier)
            if (c.bos >= c.eos && n1_tokens) load_token<KDA>(p, sm.d, n1.bos, cur, n1.hv / p.group, n1.hv, n1.v0);
            c = n1;
            n1 = n2;
        }
    }
}

template <bool KDA>
__device__ __forceinline__ void decode_persistent(const Params& p) {
    __shared__ __align__(16) PersistSmem sm;
    __shared__ __align__(16) char ring[2][PSTAGE];
    if (p.layout == LAYOUT_KV) decode_persistent_layout<KDA, LAYOUT_KV>(p, sm, ring);
    else decode_persistent_layout<KDA, LAYOUT_VK>(p, sm, ring);
}

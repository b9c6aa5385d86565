// prefill_segments.cuh: exact sequence parallelism of the T-form small-bh pair (docs/segments.md;
// the host's order is in backends/cuda/src/dispatch.rs). Each sequence is cut into segments of
// `seg_tokens` tokens (a multiple of the chunk, so the chunks are the sequence's own); the
// segments run as sequences of their own through the intra kernel and the state pass:
//   pass 1: every segment but the last of its sequence, from a zero state: its final state F
//           (the same pass over the real v), and its transition M (the pass over v = 0 from the
//           identity, K x K: V = K), the segment's map S_in -> M S_in + F;
//   combine: along each sequence, S_in(0) = h0 and S_in(j + 1) = M_j S_in(j) + F_j in f32;
//   pass 3: every segment from its true S_in, writing o and its final state;
//   finish: each sequence's last segment's final state to the caller's final state.
// Equal to the unsegmented recurrence up to rounding: no decay is truncated, no gate value is
// assumed.

// The segment arrays in the workspace (the second kernel parameter of the three kernels below;
// the host's mirror is `SegArgs` in backends/cuda/src/segments.rs).
struct SegArgs {
    int* seg_cu;     // [n_seg + 1] the segments' token offsets (i32; padding segments are empty, at T)
    int* seg_of;     // [N + 1] the first segment of each sequence
    int* skip;       // [n_seg] 1: the last segment of its sequence, or padding (pass 1 skips it)
    int* zidx;       // [n_seg] zeros: every segment's pool row of the identity
    float* ident;    // [HV][K][K] the identity, the transition pass's initial state
    u16* zero_v;     // [64][HV][V] zeros: the transition pass's v (rows past 64 read as zeros)
    float* fin;      // [n_seg][HV][K][V] f32 kv: pass 1's F, then pass 3's final states
    float* trans;    // [n_seg][HV][K][K] f32 kv: pass 1's M
    float* sin;      // [n_seg][HV][K][V] f32 kv: the incoming states of pass 3
    int seg_tokens;  // tokens a segment (a multiple of 64)
    int n_seg;       // segments, a static bound: N + T / seg_tokens
};

// grid (blocks), 1024 threads, 4 KB of dynamic shared memory. `p` is the caller's call. Every
// block fills the identity, the zero v rows and the zero pool indices; block 0 builds seg_cu,
// seg_of and skip (a block-wide scan of the per-thread segment counts, as varlen_build_tables).
extern "C" __global__ void __launch_bounds__(1024) gdn_prefill_segments_setup(const Params p, const SegArgs s) {
    extern __shared__ int sc[];
    const int tid = threadIdx.x;
    const i64 gt = (i64)blockIdx.x * blockDim.x + tid, gs = (i64)gridDim.x * blockDim.x;
    for (i64 i = gt; i < (i64)p.HV * KD * KD; i += gs) {
        const int r = (int)((i / KD) % KD), c = (int)(i % KD);
        s.ident[i] = r == c ? 1.0f : 0.0f;
    }
    for (i64 i = gt; i < (i64)64 * p.HV * VD / 8; i += gs) ((uint4*)s.zero_v)[i] = make_uint4(0u, 0u, 0u, 0u);
    for (i64 i = gt; i < s.n_seg; i += gs) s.zidx[i] = 0;
    if (blockIdx.x != 0) return;
    const int L = s.seg_tokens;
    const int per = (p.N + 1023) / 1024;
    const int n0 = tid * per < p.N ? tid * per : p.N;
    const int n1 = n0 + per < p.N ? n0 + per : p.N;
    auto segs = [&](int n) {
        const int len = (int)(ld_i(p.cu_seqlens, n + 1, p.off_dt) - ld_i(p.cu_seqlens, n, p.off_dt));
        return len > L ? (len + L - 1) / L : 1;
    };
    int cnt = 0;
    for (int n = n0; n < n1; ++n) cnt += segs(n);
    sc[tid] = cnt;
    __syncthreads();
    for (int off = 1; off < 1024; off <<= 1) {
        const int a = tid >= off ? sc[tid - off] : 0;
        __syncthreads();
        sc[tid] += a;
        __syncthreads();
    }
    int base = sc[tid] - cnt;
    for (int n = n0; n < n1; ++n) {
        const int ns = segs(n);
        const int bos = (int)ld_i(p.cu_seqlens, n, p.off_dt);
        s.seg_of[n] = base;
        for (int j = 0; j < ns; ++j) {
            s.seg_cu[base + j] = bos + j * L;
            s.skip[base + j] = j == ns - 1;
        }
        base += ns;
    }
    const int total = sc[1023];
    const int tend = (int)ld_i(p.cu_seqlens, p.N, p.off_dt);
    if (tid == 0) s.seg_of[p.N] = total;
    for (int i = total + tid; i <= s.n_seg; i += 1024) s.seg_cu[i] = tend;
    for (int i = total + tid; i < s.n_seg; i += 1024) s.skip[i] = 1;
}

// grid (V / 16, HV, N), 256 threads, (K x 16 + K x (K + 4)) x 4 bytes of dynamic shared memory.
// For sequence n, value head hv and 16 V columns: S = h0 (the caller's initial state), then per
// segment j: S_in(j) = S, and for all but the last S <- M_j S + F_j (f32; thread: row r, 8
// columns). M_j comes into shared memory whole, every load of a thread issued before the first
// store (one L2 latency a step, not one per row segment: the step is serial along the sequence).
extern "C" __global__ void __launch_bounds__(256) gdn_prefill_segments_combine(const Params p, const SegArgs s) {
    extern __shared__ float Ssh[];  // [KD][16], then M: [KD][MST]
    constexpr int MST = KD + 4;     // (rows 16 bytes apart in bank groups)
    float* Msh = Ssh + KD * 16;
    const int c0 = blockIdx.x * 16, hv = blockIdx.y, n = blockIdx.z, tid = threadIdx.x;
    const int s0 = s.seg_of[n], s1 = s.seg_of[n + 1];
    constexpr int PAIRS = KD * 2;  // (row, half of the 16 columns)
    float acc[(PAIRS + 255) / 256][8];
    const i64 row = initial_row(p, n);
#pragma unroll
    for (int u = 0; u < (PAIRS + 255) / 256; ++u) {
        const int pr = tid + 256 * u, r = pr >> 1, c = c0 + 8 * (pr & 1);
#pragma unroll
        for (int e = 0; e < 8; ++e) acc[u][e] = 0.0f;
        if (pr < PAIRS && p.state_in != nullptr && row >= 0) {
            with_dt(p.s_in_dt, [&](auto D) {
                constexpr int DT = decltype(D)::value;
#pragma unroll
                for (int e = 0; e < 8; ++e)
                    acc[u][e] = ldt<DT>(p.state_in, (row * p.HV + hv) * KD * VD + state_off(p.layout, r, c + e, KD, VD));
            });
        }
    }
    for (int j = s0; j < s1; ++j) {
        __syncthreads();  // (the previous segment's reads of Ssh are done)
#pragma unroll
        for (int u = 0; u < (PAIRS + 255) / 256; ++u) {
            const int pr = tid + 256 * u, r = pr >> 1, h = 8 * (pr & 1);
            if (pr >= PAIRS) continue;
            float* dst = s.sin + (((i64)j * p.HV + hv) * KD + r) * VD + c0 + h;
            *(float4*)dst = make_float4(acc[u][0], acc[u][1], acc[u][2], acc[u][3]);
            *(float4*)(dst + 4) = make_float4(acc[u][4], acc[u][5], acc[u][6], acc[u][7]);
#pragma unroll
            for (int e = 0; e < 8; ++e) Ssh[r * 16 + h + e] = acc[u][e];
        }
        if (j == s1 - 1) break;
        {  // M_j into shared memory (coalesced float4, all loads first)
            constexpr int NV = KD * KD / 4 / 256;  // float4 a thread
            const float4* src = (const float4*)(s.trans + ((i64)j * p.HV + hv) * KD * KD);
            float4 mv[NV];
#pragma unroll
            for (int i = 0; i < NV; ++i) mv[i] = src[tid + 256 * i];
#pragma unroll
            for (int i = 0; i < NV; ++i) {
                const int e = 4 * (tid + 256 * i), r = e / KD, c = e % KD;
                *(float4*)(Msh + r * MST + c) = mv[i];
            }
        }
        __syncthreads();
#pragma unroll
        for (int u = 0; u < (PAIRS + 255) / 256; ++u) {
            const int pr = tid + 256 * u, r = pr >> 1, h = 8 * (pr & 1);
            if (pr >= PAIRS) continue;
            const float* f = s.fin + (((i64)j * p.HV + hv) * KD + r) * VD + c0 + h;
            const float4 fa = *(const float4*)f, fb = *(const float4*)(f + 4);
            float y[8] = {fa.x, fa.y, fa.z, fa.w, fb.x, fb.y, fb.z, fb.w};
            const float* m = Msh + r * MST;
#pragma unroll 4
            for (int k4 = 0; k4 < KD; k4 += 4) {
                const float4 mv = *(const float4*)(m + k4);
                const float mm[4] = {mv.x, mv.y, mv.z, mv.w};
#pragma unroll
                for (int t = 0; t < 4; ++t) {
                    const float4 sa = *(const float4*)(Ssh + (k4 + t) * 16 + h);
                    const float4 sb = *(const float4*)(Ssh + (k4 + t) * 16 + h + 4);
                    y[0] += mm[t] * sa.x;
                    y[1] += mm[t] * sa.y;
                    y[2] += mm[t] * sa.z;
                    y[3] += mm[t] * sa.w;
                    y[4] += mm[t] * sb.x;
                    y[5] += mm[t] * sb.y;
                    y[6] += mm[t] * sb.z;
                    y[7] += mm[t] * sb.w;
                }
            }
#pragma unroll
            for (int e = 0; e < 8; ++e) acc[u][e] = y[e];
        }
    }
}

// grid (ceil(K V / 256), HV, N), 256 threads: sequence n's final state (its last segment's, f32
// kv in `fin`) to the caller's final state (dense or pool row, dtype, layout).
extern "C" __global__ void __launch_bounds__(256) gdn_prefill_segments_finish(const Params p, const SegArgs s) {
    const int hv = blockIdx.y, n = blockIdx.z;
    const int idx = blockIdx.x * 256 + threadIdx.x;
    const i64 row = final_row(p, n);
    if (idx >= KD * VD || row < 0 || p.state_out == nullptr) return;
    const int j = s.seg_of[n + 1] - 1, d = idx / VD, e = idx % VD;
    const float x = s.fin[((i64)j * p.HV + hv) * KD * VD + idx];
    with_dt(p.s_out_dt, [&](auto D) {
        constexpr int DT = decltype(D)::value;
        st1<DT>(p.state_out, (row * p.HV + hv) * KD * VD + state_off(p.layout, d, e, KD, VD), x);
    });
}

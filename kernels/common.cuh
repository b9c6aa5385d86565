// common.cuh: shared definitions of every deltarule CUDA module (header-free: no CUDA headers).
//
// * scalar types, dtype codes (must match backends/cuda/src/launch.rs `dtype_code`);
// * bf16/f16 conversions with bit operations and inline PTX;
// * loads/stores of any float dtype selected at run time (g, beta, states, outputs);
// * the kernel parameter block `Params` (mirrors `launch::Params`, #[repr(C)]);
// * gate, beta and exp helpers of docs/spec.md section 4 (f32).

typedef unsigned int u32;
typedef unsigned short u16;
typedef long long i64;
typedef unsigned long long u64;

#define DT_F32 0
#define DT_F16 1
#define DT_BF16 2
#define DT_I32 3
#define DT_I64 4

#define GATE_LOG 0
#define GATE_SOFTPLUS 1
#define GATE_LOWER_BOUND 2

#define BETA_PROB 0
#define BETA_LOGIT 1
#define BETA_LOGIT2 2

#define LAYOUT_KV 0
#define LAYOUT_VK 1

#define INIT_NONE 0
#define INIT_DENSE 1
#define INIT_POOL 2

#define FINAL_NONE 0
#define FINAL_DENSE 1
#define FINAL_INPLACE 2

// Kernel parameters, passed by value. Pointers first (8 bytes), then 4-byte fields; 256 bytes.
struct Params {
    const void* q;             // [T, H, K]
    const void* k;             // [T, H, K]
    const void* v;             // [T, HV, V]
    const void* g;             // gdn [T, HV], kda [T, HV, K]
    const void* beta;          // [T, HV]
    const void* cu_seqlens;    // [N + 1] i32/i64
    const float* a_log;        // [HV] or null
    const float* dt_bias;      // gdn [HV], kda [HV, K], or null
    const void* state_in;      // dense [N, HV, ..] or pool [P, HV, ..], or null
    const void* state_indices; // [N] i32/i64 or null
    void* o;                   // [T, HV, V]
    void* state_out;           // dense [N, HV, ..], the pool (== state_in) or null
    void* checkpoints;         // [total, HV, ..] or null
    int* chunk_table;          // [table_rows, 2] (sequence, chunk) or (-1, -1)
    int* chunk_offsets;        // [N + 1]
    int* ck_offsets;           // [N + 1]
    void* work;                // small-bh workspace
    int* sync;                 // overlapped small-bh pair (SYNC_FLAGS below), else null
    int T, N, H, HV, group, table_rows;
    float scale, lower_bound;
    int qkv_dt, g_dt, beta_dt, out_dt, s_in_dt, s_out_dt, off_dt, idx_dt;
    int gate, beta_mode, l2norm, layout, initial, final_mode, ck_every, has_a_log;
    int ov_tau, ov_free;       // overlapped pair: items taken before ov_free SMs are freed
    int ov_trace;              // overlapped pair: print a timeline (diagnosis)
    int mode;                  // runtime flags (FLAG_* below)
    const int* seg_skip;       // the segments' pass 1 (prefill_segments.cuh): 1 = no chunks; or null
};
// Params::mode: the small-bh T-form pair's runtime flags (the host sets all three by default).
// FLAG_GROUP_HEADS: the T-form intra kernel runs a chunk for every value head of a GVA group in
// turn (grid (rows, HV / group)), loading q and k once.
#define FLAG_GROUP_HEADS 1
// FLAG_DEPENDENT_LAUNCH: the T-form pair without the overlap launches its state pass as a
// programmatic dependent of the intra kernel (which triggers at its start), so the state CTAs'
// prologue runs in the intra kernel's tail; their fetch thread waits for the intra grid
// (griddepcontrol.wait) before the first workspace read.
#define FLAG_DEPENDENT_LAUNCH 128
// FLAG_DEFERRED_WAIT (with FLAG_GROUP_HEADS): a head's wait for its bulk copies' shared-memory
// reads moves into the next head's step 2 (after its products), off the critical path.
#define FLAG_DEFERRED_WAIT 256
// intra_chunk's `pair` bits (see there)
#define PAIR_REUSE 1
#define PAIR_NEXT 2
#define PAIR_SLOT 4
#define PAIR_DEFER 8
#define PAIR_WAITPREV 16
// The overlapped pair's words (p.sync): [0] the work counter, [1] SMs freed so far, [2] intra
// CTAs that left early, [3] spare, [4, 4 + SYNC_SMS) a mark per SM id (0 undecided, 1 freed, 2
// kept, 3 being decided), then a ready flag per (table row, value head). Zeroed by
// varlen_build_tables each call.
#define SYNC_SMS 512
#define SYNC_MARKS 4
#define SYNC_FLAGS (SYNC_MARKS + SYNC_SMS)
// The timeline (p.ov_trace; diagnosis): 4 words per intra CTA (SM id, start and end in ns of
// the global timer, items done | left early << 32), then per state CTA (SM id, start, end, ns
// spent waiting for ready flags), after the flags (8-byte aligned); the host reads it back.
#define TRACE_INTRA 1024
#define TRACE_STATE 512
__device__ __forceinline__ u64* trace_base(const Params& p) {
    return (u64*)(((u64)(p.sync + SYNC_FLAGS + p.table_rows * p.HV) + 7) & ~(u64)7);
}

// ------------------------------------------------------------------ conversions
__device__ __forceinline__ float bf16_to_f32(u16 h) { return __uint_as_float(((u32)h) << 16); }
// The helpers written in inline PTX (conversions, fast math, streaming stores, cp.async) sit in
// `#ifndef DELTARULE_EMU` blocks: the CPU emulator of the decode kernels
// (backends/cuda/tests/emulated.rs, emu/emu.h) defines them in C++ instead.
#ifndef DELTARULE_EMU
// Round to nearest even (the hardware conversion of sm_80+: one instruction where the bit
// arithmetic took six; NaN stays NaN).
__device__ __forceinline__ u16 f32_to_bf16(float f) {
    u16 h;
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
}
__device__ __forceinline__ float f16_to_f32(u16 h) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
}
__device__ __forceinline__ u16 f32_to_f16(float f) {
    u16 h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
}
#endif

__device__ __forceinline__ float ld_f(const void* p, i64 i, int dt) {
    if (dt == DT_F32) return ((const float*)p)[i];
    u16 h = ((const u16*)p)[i];
    return dt == DT_BF16 ? bf16_to_f32(h) : f16_to_f32(h);
}
__device__ __forceinline__ void st_f(void* p, i64 i, int dt, float x) {
    if (dt == DT_F32) {
        ((float*)p)[i] = x;
    } else {
        ((u16*)p)[i] = dt == DT_BF16 ? f32_to_bf16(x) : f32_to_f16(x);
    }
}
__device__ __forceinline__ i64 ld_i(const void* p, i64 i, int dt) {
    return dt == DT_I64 ? ((const i64*)p)[i] : (i64)((const int*)p)[i];
}


// Compile-time dtype loads: `with_dt(dt, f)` calls `f(IC<DT>())` once for the run-time dtype, so
// loops inside `f` are branch-free and their loads can all be in flight before the first use
// (a run-time dtype switch per element puts every load behind its own branch and serialises them).
template <int V>
struct IC {
    static constexpr int value = V;
};
template <class F>
__device__ __forceinline__ void with_dt(int dt, F&& f) {
    if (dt == DT_F32) f(IC<DT_F32>());
    else if (dt == DT_F16) f(IC<DT_F16>());
    else f(IC<DT_BF16>());
}
template <int DT>
__device__ __forceinline__ float ldt(const void* p, i64 i) {
    if (DT == DT_F32) return ((const float*)p)[i];
    const u16 h = ((const u16*)p)[i];
    return DT == DT_BF16 ? bf16_to_f32(h) : f16_to_f32(h);
}
// E (1, 2 or 4) consecutive elements from element i (a multiple of E; the tensor 16-byte aligned)
// with one 2- to 16-byte load.
template <int DT, int E>
__device__ __forceinline__ void ldv(const void* p, i64 i, float (&f)[E]) {
    static_assert(E == 1 || E == 2 || E == 4, "vector width");
    if constexpr (DT == DT_F32) {
        const float* q = (const float*)p + i;
        if constexpr (E == 4) {
            const float4 v = *(const float4*)q;
            f[0] = v.x, f[1] = v.y, f[2] = v.z, f[3] = v.w;
        } else if constexpr (E == 2) {
            const float2 v = *(const float2*)q;
            f[0] = v.x, f[1] = v.y;
        } else {
            f[0] = *q;
        }
    } else {
        const u16* q = (const u16*)p + i;
        u16 h[E];
        if constexpr (E == 4) {
            const uint2 w = *(const uint2*)q;
            h[0] = (u16)(w.x & 0xffffu), h[1] = (u16)(w.x >> 16), h[2] = (u16)(w.y & 0xffffu), h[3] = (u16)(w.y >> 16);
        } else if constexpr (E == 2) {
            const u32 w = *(const u32*)q;
            h[0] = (u16)(w & 0xffffu), h[1] = (u16)(w >> 16);
        } else {
            h[0] = *q;
        }
#pragma unroll
        for (int e = 0; e < E; ++e) f[e] = DT == DT_BF16 ? bf16_to_f32(h[e]) : f16_to_f32(h[e]);
    }
}
// Stores (x, y) at elements i, i + 1 (i even) as one 8- or 4-byte store.
template <int DT>
__device__ __forceinline__ void st2(void* p, i64 i, float x, float y) {
    if (DT == DT_F32) {
        *(float2*)((float*)p + i) = make_float2(x, y);
    } else {
        const u32 a = DT == DT_BF16 ? f32_to_bf16(x) : f32_to_f16(x);
        const u32 b = DT == DT_BF16 ? f32_to_bf16(y) : f32_to_f16(y);
        *(u32*)((u16*)p + i) = a | (b << 16);
    }
}
#ifndef DELTARULE_EMU
// (x, y) as one 32-bit word of two bf16 / f16 halves, x in the low half (the lower address).
__device__ __forceinline__ u32 pack_bf16x2(float x, float y) {
    u32 r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(y), "f"(x));
    return r;
}
__device__ __forceinline__ u32 pack_f16x2(float x, float y) {
    u32 r;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(y), "f"(x));
    return r;
}
#endif
template <int DT>
__device__ __forceinline__ void st1(void* p, i64 i, float x) {
    if (DT == DT_F32) ((float*)p)[i] = x;
    else ((u16*)p)[i] = DT == DT_BF16 ? f32_to_bf16(x) : f32_to_f16(x);
}

// ------------------------------------------------------------------ math (f32)
#ifndef DELTARULE_EMU
__device__ __forceinline__ float fexp2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}
__device__ __forceinline__ float flog2(float x) {
    float y;
    asm("lg2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}
__device__ __forceinline__ float frsqrt(float x) {
    float y;
    asm("rsqrt.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}
#endif
__device__ __forceinline__ float fexp(float x) { return fexp2(x * 1.4426950408889634f); }
__device__ __forceinline__ float sigmoidf_(float x) { return 1.0f / (1.0f + fexp(-x)); }
__device__ __forceinline__ float softplusf_(float x) {
    if (x > 20.0f) return x;
    if (x < -15.0f) return fexp(x);
    return flog2(1.0f + fexp(x)) * 0.6931471805599453f;
}

// The log decay of one gate element (docs/spec.md section 4): x is the raw gate, `bias` its dt_bias
// (0 when absent), `a` = exp(A_log[hv]) (1 when absent). No memory access.
__device__ __forceinline__ float gate_apply(const Params& p, float x, float bias, float a) {
    if (p.gate == GATE_LOG) return x;
    if (p.gate == GATE_SOFTPLUS) return -a * softplusf_(x + bias);
    return p.lower_bound * sigmoidf_(p.has_a_log ? a * (x + bias) : (x + bias));
}
__device__ __forceinline__ float gate_a(const Params& p, int hv) {
    return (p.gate != GATE_LOG && p.has_a_log) ? fexp(p.a_log[hv]) : 1.0f;
}
__device__ __forceinline__ float gate_bias(const Params& p, int idx) {
    return (p.gate != GATE_LOG && p.dt_bias != nullptr) ? p.dt_bias[idx] : 0.0f;
}
__device__ __forceinline__ float gate_value(const Params& p, float x, int hv, int bias_idx) {
    return gate_apply(p, x, gate_bias(p, bias_idx), gate_a(p, hv));
}
// The floor of a per-token log decay in the prefill kernels (docs/spec.md, the chunked
// algorithm): e^-128 is exactly 0 in f32 (-128 log2(e) is far below ex2's smallest subnormal, and
// ex2.approx.ftz flushes), so a gate clamped to it is still an exact reset, -inf included, and
// every cumulative sum of a chunk stays finite (no -inf - (-inf)) and within 64 x 128 in size, so
// its rounding stays far inside the tensor-core bound.
#define LOG_DECAY_FLOOR (-128.0f)
__device__ __forceinline__ float clamp_decay(float g) { return fmaxf(g, LOG_DECAY_FLOOR); }
__device__ __forceinline__ float beta_value(const Params& p, float b) {
    if (p.beta_mode == BETA_PROB) return b;
    float s = sigmoidf_(b);
    return p.beta_mode == BETA_LOGIT2 ? 2.0f * s : s;
}

// Offset of state element (d, e) of one K x V state in the problem's layout.
__device__ __forceinline__ i64 state_off(int layout, int d, int e, int kd, int vd) {
    return layout == LAYOUT_KV ? (i64)d * vd + e : (i64)e * kd + d;
}

// Row of the initial state of sequence n (-1: zeros), and of its final state (-1: not written).
__device__ __forceinline__ i64 initial_row(const Params& p, int n) {
    if (p.initial == INIT_NONE) return -1;
    if (p.initial == INIT_DENSE) return n;
    return ld_i(p.state_indices, n, p.idx_dt);
}
__device__ __forceinline__ i64 final_row(const Params& p, int n) {
    if (p.final_mode == FINAL_NONE) return -1;
    if (p.final_mode == FINAL_DENSE) return n;
    return ld_i(p.state_indices, n, p.idx_dt);
}

__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
    return x;
}

// prefill_intra.cuh: the intra-chunk stage (intra_chunk), the first part of the fused kernels and
// the whole of the small-bh intra kernels, and the ready flags of the overlapped small-bh pair
// (prefill_smallbh.cuh) that it publishes.

// ------------------------------------------------------- the overlapped pair's ready flags
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
// arena `sm` (layout ChunkSmem<KDA>). All NTH threads; ends without a final barrier.
// TONLY (gdn DIRECT only): the T-form block (TformBlock): steps 1-3, then T_w, T_u, the factors; no
// X, V, q̃, k̃, W or U (the wgmma state pass smallbh_state_tform_wgmma builds W·S and U from the inputs).
// FT (with TONLY): the fused T-form: the block stays in shared memory (FusedTformSmem), no copies.
// `pair` (TONLY; the heads of a GVA group share q and k, so a CTA may run the same chunk for
// several value heads in turn): PAIR_REUSE, Ks, Qs and the stash's rq, rk hold this chunk's rows
// already (the previous head's stage left them) and the raw β, gate come from stash slot
// PAIR_SLOT; PAIR_NEXT, threads 64-127 load head hv + 1's raw β, gate into the other slot;
// PAIR_DEFER, the end does not wait for the bulk copies' reads, PAIR_WAITPREV, step 2 does
// (before A and P are stored over the previous head's copy sources).
// (FT: `early` runs after A and P, before T's diagonal blocks are solved: the fused T-form issues
// its first state tile's loads there, so their issue overlaps the substitution, on four
// half-warps, and their latency the rest of the stage; FT also leaves out the upper right 32 x 32
// quadrant of T_u and T_w, which the fused T-form's LOW quadrant products never read)
struct NoEarly {
    __device__ __forceinline__ void operator()() const {}
};
template <bool KDA, bool DIRECT = false, bool TONLY = false, bool FT = false, typename EarlyF = NoEarly>
__device__ void intra_chunk(const Params& p, char* sm, int t0, int L, int hv, char* wdst = nullptr,
                            int publish = -1, int pair = 0, const EarlyF& early = EarlyF()) {
    typedef ChunkSmem<KDA, DIRECT> LY;
    static_assert(!TONLY || (DIRECT && !KDA), "the T-form is gdn's small-bh intra");
    static_assert(!FT || TONLY, "the fused T-form runs the T-form intra stage");
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int h = hv / p.group;
    u16* Ks = (u16*)(sm + LY::WM);
    u16* Qs = (u16*)(sm + LY::QD);
    u16* Kd = (u16*)(sm + LY::KDT);
    // P: shared [64][CP]; DIRECT: the workspace block [64][CP], for gdn through the k̃ slot (free
    // until step 4) and one bulk copy (PSTAGE), for kda (whose k̃ slot holds the slice
    // operands then) with per-thread stores.
    constexpr bool PSTAGE = DIRECT && !KDA && CP <= KP;
    u16* Pm = PSTAGE ? (u16*)(sm + LY::KDT) : DIRECT ? (u16*)(wdst + WorkspaceBlock::P) : (u16*)(sm + LY::PM);
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
    //     passes, each exposing the load latency, measure slower) (rows past L
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
    // 1b. log decays (clamped: common.cuh, clamp_decay) and beta (zero past the chunk's length).
    if (tid < CH) {
        const int i = tid;
        const float bias = KDA ? 0.0f : gate_bias(p, hv);
        const float a = gate_a(p, hv);
        Bs[i] = i < L ? beta_value(p, braw) : 0.0f;
        if (!KDA) G[i] = i < L ? clamp_decay(gate_apply(p, graw, bias, a)) : 0.0f;
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
                            y[e] = in ? L2E * clamp_decay(LOG ? x[m][e] : gate_apply(p, x[m][e], b[m][e], a)) : 0.0f;
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

    // 2. A (f32, strictly lower, β_i folded) and P (lower incl. diagonal, scale folded).
    if constexpr (!KDA) {
        typedef Tiles<CH, CH, NTH / 32> TT;
        float akk[TT::PER][4], aqk[TT::PER][4];
        zero_acc(akk);
        zero_acc(aqk);
        // (A and P are read on and below the diagonal: LOW leaves out the 12 tiles above it)
        mma_tiles2<CH, CH, KD, NTH / 32, false, false, true>(akk, aqk, Ks, Qs, KP, Ks, KP, warp, lane);
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
        // and lane are 48 on sub-partition 0 and 28 on 1-3, where a plain split gives 80 and 64.)
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
            // (A one-item-at-a-time loop takes a fifth of the kernel's stall samples, mostly
            // short-scoreboard waits.)
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
                    // precede m): 7 exponentials a channel instead of 16 (these warps'
                    // exponentials are step 2's critical path)
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
        u16* Qo = DIRECT ? (u16*)(wdst + WorkspaceBlock::Q) : Qs;
        u16* Ko = DIRECT ? (u16*)(wdst + WorkspaceBlock::KT) : Kd;
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
        if (tid == 0) {
            bulk_s2g(wdst + (TONLY ? TformBlock::P : WorkspaceBlock::P), sm + LY::KDT, 64 * CP * 2);
            bulk_commit();
        }
    }

    // 3. T = (I + A)^-1 in f32: diagonal 16x16 blocks by forward substitution (warp r, lane =
    //    column), then the off-diagonal blocks by doubling (below). (32 x 32 diagonal blocks by
    //    the same substitution on warps 0-1, without the doubling level for the 16-row pairs,
    //    measure slower: gdn 256x64 0.822 against 0.807 ms, diagonal stage 2,341 against ~1,000
    //    cycles a CTA. The whole solve is 7.8 % of gdn 256x64 and 12.6 % of 16x1024: a chain of
    //    short dependent phases.)
    // (FT's early loads go here, before the diagonal blocks: their issue overlaps the
    // substitution, on four half-warps, instead of the merges' shared loads)
    if constexpr (FT) early();
    if (warp < 4 && lane < 16) {
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
    // Off-diagonal blocks by doubling, on tensor cores: inv([[A, 0], [C, D]]) = [[A⁻¹, 0],
    // [-D⁻¹ C A⁻¹, D⁻¹]], first for the 16-row pairs (blocks (1,0), (3,2)), then for the 32-row
    // halves (blocks (2,0), (2,1), (3,0), (3,1)): four products, four barriers. Operands are the
    // f32 A and T in shared memory, split into bf16 hi + lo (mma_f32x3: ~2^-16 relative, the
    // precision of the hi + lo T' that W and U are built from). (An f32 CUDA-core merge by block
    // distance, six barriers, measures ~3,800 cycles a chunk.)
    {
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
                if (ks >= (nt >> 1))
                    mma_f32x3(acc, Af + (32 + 16 * mt) * 65 + 16 * ks, 65, Tf + 16 * ks * 65 + 8 * nt, 65, lane);
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
                if (ks <= mt)
                    mma_f32x3(acc, Tf + (32 + 16 * mt) * 65 + 32 + 16 * ks, 65, Ms + 16 * ks * 33 + 8 * nt, 33, lane);
            float* t = Tf + (32 + 16 * mt) * 65 + 8 * nt;
            t[g * 65 + q2] = -acc[0];
            t[g * 65 + q2 + 1] = -acc[1];
            t[(g + 8) * 65 + q2] = -acc[2];
            t[(g + 8) * 65 + q2 + 1] = -acc[3];
        }
        __syncthreads();
    }
    if constexpr (TONLY) {
        // The state pass's factors (in place over rq, rk) and T_w's column factors β e^Γ / |k|
        // (Tmp is free after the merges); rows past L have rq = rk = β = 0.
        // (They leave through shared memory and bulk copies: coalesced per-thread stores of the
        // factors, T_w and T_u to the workspace block measure 4 % slower at gdn 16/32 16x1024 on an
        // H200.)
        float* fac = (float*)(sm + LY::FAC);
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
        static_assert(FusedTformSmem::TW == LY::AF && FusedTformSmem::TW + 64 * CP * 2 <= LY::TF,
                      "T_w over A, before T");
        u16* Twh = (u16*)(sm + FusedTformSmem::TW);
        // (FT: the fused T-form's LOW quadrant products (mma_quad) never read the upper right
        // 32 x 32 quadrant: only the other three are built, 6 pairs a thread, not 8)
        constexpr bool SKIPQ = FT;
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
            *(u32*)(Tbh + i * CP + j) = hi;
            *(u32*)(Tbl + i * CP + j) = pack_mma(t0 - from_mma((u16)(hi & 0xffffu)), t1 - from_mma((u16)(hi >> 16)));
            *(u32*)(Twh + i * CP + j) = pack_mma(a0 * Tmp[j], a1 * Tmp[j + 1]);
        }
        if constexpr (!FT) fence_proxy_async();
        __syncthreads();
        if constexpr (FT) return;  // (the block stays in shared memory for fused_tform)
        static_assert(TformBlock::TUL == TformBlock::TUH + 64 * CP * 2, "T_u hi, lo adjacent (Tbl = Tbh + 64 CP)");
        if (tid == 0) {
            bulk_s2g(wdst + TformBlock::TWH, sm + FusedTformSmem::TW, 64 * CP * 2);
            bulk_s2g(wdst + TformBlock::TUH, sm + LY::TB, 2 * 64 * CP * 2);
            bulk_s2g(wdst + TformBlock::FAC, sm + LY::FAC, TformBlock::FACB);
        }
        if (tid == 0) {
            bulk_commit();
            // (P's copy too; the CTA's shared memory must outlive the reads. PAIR_DEFER: the next
            // head of the pair waits, in its step 2, with PAIR_WAITPREV)
            if (!(pair & PAIR_DEFER)) bulk_wait_read();
        }
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

    // 4. X = K ⊙ e^Γ, V, q̃ = scale Q ⊙ e^Γ (in place), k̃ = K ⊙ e^{Γlast - Γ}, e^Γlast; all
    //    token-major [64][*] like Ks (consecutive threads walk a row: no bank conflicts; the
    //    products read X, V and k̃ with ldmatrix.trans). (kda: all but V at the end of step 2.)
    // (gdn: called between the V loads and their stores below, so V's load latency is spent
    // building X, q̃ and k̃)
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
            *(uint4*)(Qs + i * KP + d) = make_uint4(sc2(qw.x, p.scale, e1), sc2(qw.y, p.scale, e1),
                                                    sc2(qw.z, p.scale, e1), sc2(qw.w, p.scale, e1));
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
                    // (Without this barrier racecheck reports WAR hazards, and gdn 4/8 o is
                    // wrong by up to 4e-2 through the W/U passes, a moving error.)
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
        static_assert(LY::KDT == LY::QD + 64 * KP * 2 && WorkspaceBlock::KT == WorkspaceBlock::Q + 64 * KP * 2,
                      "q̃, k̃ adjacent");
        if (tid == 0) {
            bulk_s2g(wdst + WorkspaceBlock::Q, sm + LY::QD, 2 * 64 * KP * 2);
            bulk_commit();
        }
    }

    // 5. W = T' (K ⊙ e^Γ) into the Ks slot, U = T' V (f32).
    {
        typedef Tiles<CH, KD, NTH / 32> TW;
        float acc[TW::PER][4];
        zero_acc(acc);
        mma_tiles2<CH, KD, CH, NTH / 32, false, true>(acc, acc, Tbh, Tbl, CP, Xs, KP, warp, lane);
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
        mma_tiles2<CH, VD, CH, NTH / 32, false, true>(acc, acc, Tbh, Tbl, CP, Vb, VP, warp, lane);
        if constexpr (DIRECT) {
            // W and e^Γlast are final: they leave now (and the staging area, X and V, is free)
            fence_proxy_async();
            __syncthreads();
            if (tid == 0) {
                bulk_s2g(wdst + WorkspaceBlock::W, sm + LY::WM, 64 * KP * 2);
                bulk_s2g(wdst + WorkspaceBlock::GL, sm + LY::GL, KD * 4);
                bulk_commit();
            }
        }
        // DIRECT: tokens (t, t + 1) are adjacent in the Uᵀ fragment order (ut_off): lanes of rows
        // g and g + 1 (lane ^ 4) swap one value each, then each stores two 8-byte pairs (to the
        // staging area, or straight to the workspace). Lane l of an even row g holds (t, v) =
        // (r, c) and (r, c + 1) and keeps (r, c), (r + 1, c); the odd row's lane keeps (r - 1,
        // c + 1), (r, c + 1). Offsets without branches: ut_tile + ut_lane (checked against ut_off
        // at compile time), and row + 8 is +128 floats. (A branchy form, divergent on g's parity,
        // runs ~40 integer instructions per store and takes a tenth of gdn's intra stall samples.)
        [[maybe_unused]] const int odd = (lane >> 2) & 1, lpart = ut_lane(lane);
#pragma unroll
        for (int i = 0; i < TU::PER; ++i) {
            if (DIRECT) {
                float* U = LY::USTAGE ? (float*)(sm + LY::USG) : (float*)(wdst + WorkspaceBlock::U);
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
    // staged Uᵀ here. (kda's q̃, k̃ and both ops' P go to the workspace where they are made.)
    // (A persistent CTA whose next chunk's loads overlap the final wait measures gdn 2 % faster,
    // kda 8 % slower: the loop makes the kda intra spill.)
    if constexpr (DIRECT) {
        fence_proxy_async();
        __syncthreads();
        if (tid == 0) {
            if (LY::USTAGE) bulk_s2g(wdst + WorkspaceBlock::U, sm + LY::USG, 64 * VD * 4);
            bulk_commit();
            bulk_wait_read();  // (the CTA's shared memory must outlive the reads)
        }
    }
}

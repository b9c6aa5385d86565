// gdn_prefill_intra.wgsl: the state-independent, chunk-parallel stage of the gdn prefill
// (SPEC.md section 5, steps 1-4), one workgroup per (chunk, value head).
//
// Grid: x + y * grid_c = row c of the chunk table (c < chunks), z = value head within the head
// batch (hv = hv0 + z). 256 invocations.
// Reads: q, k [T, H, K] and v [T, HV, V] (QKV_DT), g [T, HV] (G_DT), beta [T, HV] (BETA_DT), all
// as u32 words holding the caller's dtype; aux (chunk table, A_log, dt_bias).
// Writes, per (c, z), into the workspace (rows >= L are written as zeros):
//   wsa (layout in common.wgsl): Wᵀ [K, 64], kdec = k e^(Γ_last − Γ) [64, K4],
//        qdecᵀ = (scale q e^Γ)ᵀ [K, 64], Pᵀ [64, 64] (P_ij = scale q_i·k_j e^(Γ_i − Γ_j),
//        j <= i), e^Γ_last [K4] (zero padded);
//   wsu: U [64, V4] (zero padded).
// Every exponent is Γ_i − Γ_j with j <= i, Γ_i or Γ_last − Γ_j: never positive for log decays.
//
// v2 (bench/NOTES.md "WGSL v2"): every global load of q/k/v is issued one tile ahead of its use
// (named registers, unconditional loads at clamped indices, zeroed by selection), so no loop
// waits on a load per iteration; the q/k norms come from the K Kᵀ tiles (no serial K-long loop
// per row); kdec is written from the W tiles' k values (no second pass over k); the dot-product
// tiles are stored channel-major so each step is three vec4 loads for 32 multiply-adds; no
// private arrays (every register tile is a named vec4).
//
// SAFETY (unchecked module): every storage index below is < the buffer length the host sized:
// token t = t0 + i with i < L and t0 + L <= T (chunk table built from validated cu_seqlens); loads
// outside the chunk or the head dims read row t0 (L >= 1), channel 0 instead and are zeroed;
// head h = hv / group < H, hv < HV; channels d < K, e < V; workspace slots (c * hvb + z) with
// c < chunks, z < hvb. Workgroup arrays: s_x scalars < 2176 (dot tiles 2 x 16 x 68, solve
// blocks < 768, source tiles 64 x 33), its vec4s < 544; s_at < 4160 scalars; rows i, j < 64.

override HEAD_K: u32 = 64u;
override HEAD_V: u32 = 64u;
// Diagnosis only (DELTARULE_WGPU_PROBE, 0 in production): skips parts to locate the time.
// 1: W/U stores (the products still run), 2: P stores, 4: the T solve, 8: step 4, 16: step 2 sums.
override PROBE: u32 = 0u;

// bindings 0-6 (prm, aux, q, k, v, g, beta), the dtype overrides and the input loaders come from
// inputs.wgsl; bindings 7-8 (wsa, wsu), s_at, the T solve and the W/U writer from intra.wgsl.

const XT: u32 = 68u;       // row stride of the channel-major dot-product tiles [16][64 + 4]
const XS: u32 = 33u;       // row stride of the 32-wide W/U/Q source tiles

var<workgroup> s_gam: array<f32, 64>;
var<workgroup> s_beta: array<f32, 64>;
var<workgroup> s_rq: array<f32, 64>;
var<workgroup> s_rk: array<f32, 64>;
// Tiles: Kᵀ and Qᵀ channel rows (2 x 16 x 68) for the dot products, the solve's block products,
// or a 64 x 33 source tile for W/U/qdec.
var<workgroup> s_x: array<vec4<f32>, 544>;
var<workgroup> s_meta: vec2<u32>;

fn x_get(x: u32) -> f32 {
    return s_x[x >> 2u][x & 3u];
}

fn x_set(x: u32, v: f32) {
    s_x[x >> 2u][x & 3u] = v;
}

// q (which 0) or k (1) of chunk row i, channel d: an unconditional load (row t0, channel 0 when
// outside the chunk or K) zeroed by selection, so a batch of these issues back to back.
fn qk_at(which: u32, i: u32, d: u32, t0: u32, l: u32, h: u32) -> f32 {
    let ok = i < l && d < HEAD_K;
    let x = ld(which, ((t0 + select(0u, i, ok)) * prm.heads + h) * HEAD_K + select(0u, d, ok));
    return select(0.0, x, ok);
}

// v of chunk row i, column e (same scheme).
fn v_at(i: u32, e: u32, t0: u32, l: u32, hv: u32) -> f32 {
    let ok = i < l && e < HEAD_V;
    let x = ld(2u, ((t0 + select(0u, i, ok)) * prm.vheads + hv) * HEAD_V + select(0u, e, ok));
    return select(0.0, x, ok);
}

// Raw source element (row m, column cc) of tile `tile` of the W/U/qdec stream: k for the first
// ntk tiles, v for the next ntv, q for the last ntk (32 columns a tile).
fn src_at(tile: u32, m: u32, cc: u32, t0: u32, l: u32, h: u32, hv: u32) -> f32 {
    let ntk = (HEAD_K + 31u) / 32u;
    let ntv = (k4(HEAD_V) + 31u) / 32u;
    if (tile < ntk) {
        return qk_at(1u, m, tile * 32u + cc, t0, l, h);
    }
    if (tile < ntk + ntv) {
        return v_at(m, (tile - ntk) * 32u + cc, t0, l, hv);
    }
    return qk_at(0u, m, (tile - ntk - ntv) * 32u + cc, t0, l, h);
}

// A and P of row i, columns 4 tx .. 4 tx + 3 from the raw K Kᵀ / Q Kᵀ sums.
fn put_ap(i: u32, tx: u32, kk: vec4<f32>, qk: vec4<f32>, l: u32, base_p: u32) {
    for (var b = 0u; b < 4u; b++) {
        let j = tx * 4u + b;
        var av = 0.0;
        var pv = 0.0;
        if (j <= i && i < l) {
            let e = exp(s_gam[i] - s_gam[j]);
            let rk = s_rk[i] * s_rk[j];
            if (j < i) {
                av = s_beta[i] * e * kk[b] * rk;
            }
            pv = prm.scale * e * qk[b] * s_rq[i] * s_rk[j];
        }
        if (j < i) {
            at_set(i * AS + j, av);
        }
        if ((PROBE & 2u) == 0u || pv == 12345.678) {
            wsa[base_p + j * 64u + i] = pv;
        }
    }
}

// Scale one raw source element into the s_x tile (and, for W tiles, write kdec).
// Rows m >= L are written as zeros (whatever Γ holds there).
fn put_src(kind: u32, c0: u32, m: u32, cc: u32, raw: f32, l: u32, glast: f32, base_kd: u32) {
    var x = 0.0;
    let live = m < l;
    if (kind == 0u) {
        x = s_beta[m] * raw * s_rk[m] * exp(s_gam[m]);
        if (c0 + cc < HEAD_K) {
            let kd = s_rk[m] * raw * exp(glast - s_gam[m]);
            wsa[base_kd + m * k4(HEAD_K) + c0 + cc] = select(0.0, kd, live);
        }
    } else if (kind == 1u) {
        x = s_beta[m] * raw;
    } else {
        x = prm.scale * s_rq[m] * raw * exp(s_gam[m]);
    }
    x_set(m * XS + cc, select(0.0, x, live));
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) tid: u32) {
    let c = wid.x + wid.y * prm.grid_c;
    if (c >= prm.chunks) {
        return;
    }
    let z = wid.z;
    let hv = prm.hv0 + z;
    let h = hv / prm.group;
    let HV = prm.vheads;
    let K = HEAD_K;
    let V = HEAD_V;
    let K4 = k4(K);
    let V4 = k4(V);
    if (tid == 0u) {
        s_meta = vec2<u32>(aux[prm.aux_chunks + 4u * c], aux[prm.aux_chunks + 4u * c + 1u]);
    }
    let mt = workgroupUniformLoad(&s_meta);
    let t0 = mt.x;
    let L = mt.y;
    let slot = c * prm.hvb + z;
    let sa = ws_slot(K, 0u);
    let base_w = slot * sa;
    let base_kd = base_w + ws_kd(K);
    let base_qd = base_w + ws_qd(K);
    let base_p = base_w + ws_p(K);
    let base_gl = base_w + ws_gl(K);
    let base_u = slot * 64u * V4;

    // Dot-product tile loads: rows li + 16 r (r < 4), channel d0 + ld_c; issued now for d0 = 0.
    let li = tid / 16u;
    let ld_c = tid % 16u;
    var pk0 = qk_at(1u, li, ld_c, t0, L, h);
    var pk1 = qk_at(1u, li + 16u, ld_c, t0, L, h);
    var pk2 = qk_at(1u, li + 32u, ld_c, t0, L, h);
    var pk3 = qk_at(1u, li + 48u, ld_c, t0, L, h);
    var pq0 = qk_at(0u, li, ld_c, t0, L, h);
    var pq1 = qk_at(0u, li + 16u, ld_c, t0, L, h);
    var pq2 = qk_at(0u, li + 32u, ld_c, t0, L, h);
    var pq3 = qk_at(0u, li + 48u, ld_c, t0, L, h);

    // 1. gates and betas
    if (tid < 64u) {
        let i = tid;
        var gam = 0.0;
        var bet = 0.0;
        if (i < L) {
            let t = t0 + i;
            var a = 1.0;
            if (prm.has_a_log == 1u) {
                a = exp(bitcast<f32>(aux[prm.aux_params + hv]));
            }
            var bias = 0.0;
            if (prm.gate != 0u) {
                bias = bitcast<f32>(aux[prm.aux_params + HV + hv]);
            }
            gam = gate_value(ld_g(t * HV + hv), prm.gate, a, bias, prm.has_a_log, prm.lb);
            bet = beta_value(ld_beta(t * HV + hv), prm.beta_mode);
        }
        s_rq[i] = gam;   // raw log decays; s_rq is scratch until the norms are written
        s_beta[i] = bet;
    }
    workgroupBarrier();
    // Γ_i: one running sum in row order per invocation (the additions of a sequential scan;
    // masked rows add +0), four loads at a time
    if (tid < 64u) {
        var acc = 0.0;
        for (var m = 0u; m < 64u; m += 4u) {
            acc += select(0.0, s_rq[m], m <= tid);
            acc += select(0.0, s_rq[m + 1u], m + 1u <= tid);
            acc += select(0.0, s_rq[m + 2u], m + 2u <= tid);
            acc += select(0.0, s_rq[m + 3u], m + 3u <= tid);
        }
        s_gam[tid] = acc;
    }

    // 2. K Kᵀ and Q Kᵀ, rows 4 ty + a (kk_a, qk_a), columns 4 tx ..; tiles of 16 channels stored
    //    channel-major (Kᵀ at 0, Qᵀ at 16 XT), the next tile loaded while this one is used.
    //    Invocations 0..127 also sum the squares of row tid % 64 of k (< 64) or q.
    let ty = tid / 16u;
    let tx = tid % 16u;
    var kk0 = vec4<f32>(0.0);
    var kk1 = vec4<f32>(0.0);
    var kk2 = vec4<f32>(0.0);
    var kk3 = vec4<f32>(0.0);
    var qk0 = vec4<f32>(0.0);
    var qk1 = vec4<f32>(0.0);
    var qk2 = vec4<f32>(0.0);
    var qk3 = vec4<f32>(0.0);
    var ss = 0.0;
    let nrow = tid % 64u;
    let nbase = select(16u * XT, 0u, tid < 64u);
    for (var d0 = 0u; d0 < K; d0 += 16u) {
        x_set(ld_c * XT + li, pk0);
        x_set(ld_c * XT + li + 16u, pk1);
        x_set(ld_c * XT + li + 32u, pk2);
        x_set(ld_c * XT + li + 48u, pk3);
        x_set(16u * XT + ld_c * XT + li, pq0);
        x_set(16u * XT + ld_c * XT + li + 16u, pq1);
        x_set(16u * XT + ld_c * XT + li + 32u, pq2);
        x_set(16u * XT + ld_c * XT + li + 48u, pq3);
        workgroupBarrier();
        let dn = d0 + 16u + ld_c;
        pk0 = qk_at(1u, li, dn, t0, L, h);
        pk1 = qk_at(1u, li + 16u, dn, t0, L, h);
        pk2 = qk_at(1u, li + 32u, dn, t0, L, h);
        pk3 = qk_at(1u, li + 48u, dn, t0, L, h);
        pq0 = qk_at(0u, li, dn, t0, L, h);
        pq1 = qk_at(0u, li + 16u, dn, t0, L, h);
        pq2 = qk_at(0u, li + 32u, dn, t0, L, h);
        pq3 = qk_at(0u, li + 48u, dn, t0, L, h);
        if (prm.l2norm == 1u && tid < 128u) {
            for (var dd = 0u; dd < 16u; dd++) {
                let x = x_get(nbase + dd * XT + nrow);
                ss += x * x;
            }
        }
        if (tx <= ty && (PROBE & 16u) == 0u) {
            for (var dd = 0u; dd < 16u; dd++) {
                let ka = s_x[dd * (XT / 4u) + ty];
                let qa = s_x[4u * XT + dd * (XT / 4u) + ty];
                let kj = s_x[dd * (XT / 4u) + tx];
                kk0 += ka.x * kj;
                kk1 += ka.y * kj;
                kk2 += ka.z * kj;
                kk3 += ka.w * kj;
                qk0 += qa.x * kj;
                qk1 += qa.y * kj;
                qk2 += qa.z * kj;
                qk3 += qa.w * kj;
            }
        }
        workgroupBarrier();
    }
    if (tid < 128u) {
        var r = 1.0;
        if (prm.l2norm == 1u && nrow < L) {
            r = 1.0 / sqrt(ss + 1e-6);
        }
        if (tid < 64u) { s_rk[nrow] = r; } else { s_rq[nrow] = r; }
    }
    workgroupBarrier();
    put_ap(ty * 4u, tx, kk0, qk0, L, base_p);
    put_ap(ty * 4u + 1u, tx, kk1, qk1, L, base_p);
    put_ap(ty * 4u + 2u, tx, kk2, qk2, L, base_p);
    put_ap(ty * 4u + 3u, tx, kk3, qk3, L, base_p);
    workgroupBarrier();

    // The first source tile of step 4 (k of channels 0..31), loaded during the solve.
    let glast = s_gam[max(L, 1u) - 1u];
    let ntk = (K + 31u) / 32u;
    let ntv = (V4 + 31u) / 32u;
    let ntot = 2u * ntk + ntv;
    let sm = tid / 32u;
    let scc = tid % 32u;
    var r0 = src_at(0u, sm, scc, t0, L, h, hv);
    var r1 = src_at(0u, sm + 8u, scc, t0, L, h, hv);
    var r2 = src_at(0u, sm + 16u, scc, t0, L, h, hv);
    var r3 = src_at(0u, sm + 24u, scc, t0, L, h, hv);
    var r4 = src_at(0u, sm + 32u, scc, t0, L, h, hv);
    var r5 = src_at(0u, sm + 40u, scc, t0, L, h, hv);
    var r6 = src_at(0u, sm + 48u, scc, t0, L, h, hv);
    var r7 = src_at(0u, sm + 56u, scc, t0, L, h, hv);

    // 3. T = (I + A)^-1 (intra.wgsl)
    if ((PROBE & 4u) == 0u) {
        solve_t(tid, L);
    }

    // 4. One stream of 64 x 32 source tiles: W = T (beta K e^Γ) (kind 0, which also writes
    //    kdec = k e^(Γ_last − Γ)), U = T (beta V) (kind 1), qdecᵀ = (scale q e^Γ)ᵀ (kind 2, a
    //    coalesced transpose). Each invocation holds rows sm + 8 r (r < 8), column scc of the next
    //    tile in registers while the current one is used.
    let nrun = select(ntot, 0u, (PROBE & 8u) != 0u);
    for (var tile = 0u; tile < nrun; tile++) {
        var kind = 0u;
        var c0 = tile * 32u;
        if (tile >= ntk + ntv) {
            kind = 2u;
            c0 = (tile - ntk - ntv) * 32u;
        } else if (tile >= ntk) {
            kind = 1u;
            c0 = (tile - ntk) * 32u;
        }
        put_src(kind, c0, sm, scc, r0, L, glast, base_kd);
        put_src(kind, c0, sm + 8u, scc, r1, L, glast, base_kd);
        put_src(kind, c0, sm + 16u, scc, r2, L, glast, base_kd);
        put_src(kind, c0, sm + 24u, scc, r3, L, glast, base_kd);
        put_src(kind, c0, sm + 32u, scc, r4, L, glast, base_kd);
        put_src(kind, c0, sm + 40u, scc, r5, L, glast, base_kd);
        put_src(kind, c0, sm + 48u, scc, r6, L, glast, base_kd);
        put_src(kind, c0, sm + 56u, scc, r7, L, glast, base_kd);
        workgroupBarrier();
        let tn = min(tile + 1u, ntot - 1u);
        r0 = src_at(tn, sm, scc, t0, L, h, hv);
        r1 = src_at(tn, sm + 8u, scc, t0, L, h, hv);
        r2 = src_at(tn, sm + 16u, scc, t0, L, h, hv);
        r3 = src_at(tn, sm + 24u, scc, t0, L, h, hv);
        r4 = src_at(tn, sm + 32u, scc, t0, L, h, hv);
        r5 = src_at(tn, sm + 40u, scc, t0, L, h, hv);
        r6 = src_at(tn, sm + 48u, scc, t0, L, h, hv);
        r7 = src_at(tn, sm + 56u, scc, t0, L, h, hv);
        if (kind == 2u) {
            // qdecᵀ rows c0 + cc: 64 contiguous tokens each
            for (var r = 0u; r < 8u; r++) {
                let idx = tid + 256u * r;
                let cc = idx / 64u;
                let i = idx % 64u;
                if (c0 + cc < K) {
                    wsa[base_qd + (c0 + cc) * 64u + i] = x_get(i * XS + cc);
                }
            }
        } else {
            // out[i] = sum_{m <= i} T[i][m] X[m] for rows i = 4 ty + a, columns 2 tx + b
            var a0 = vec2<f32>(0.0);
            var a1 = vec2<f32>(0.0);
            var a2 = vec2<f32>(0.0);
            var a3 = vec2<f32>(0.0);
            let mend = min(L, ty * 4u + 4u);
            for (var m = 0u; m < mend; m++) {
                let xv = vec2<f32>(x_get(m * XS + tx * 2u), x_get(m * XS + tx * 2u + 1u));
                let t = s_at[m * 16u + ty];
                a0 += t.x * xv;
                a1 += t.y * xv;
                a2 += t.z * xv;
                a3 += t.w * xv;
            }
            let is_w = kind == 0u;
            if ((PROBE & 1u) == 0u || a0.x == 12345.678) {
                put_wu(is_w, ty * 4u, c0 + tx * 2u, a0, L, base_w, base_u);
                put_wu(is_w, ty * 4u + 1u, c0 + tx * 2u, a1, L, base_w, base_u);
                put_wu(is_w, ty * 4u + 2u, c0 + tx * 2u, a2, L, base_w, base_u);
                put_wu(is_w, ty * 4u + 3u, c0 + tx * 2u, a3, L, base_w, base_u);
            }
        }
        workgroupBarrier();
    }

    // 5. kdec padding columns and e^Γ_last
    for (var idx = tid; idx < 64u * (K4 - K); idx += 256u) {
        let i = idx / (K4 - K);
        wsa[base_kd + i * K4 + K + idx % (K4 - K)] = 0.0;
    }
    for (var d = tid; d < K4; d += 256u) {
        wsa[base_gl + d] = select(0.0, exp(glast), d < K);
    }
}

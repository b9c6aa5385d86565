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
// SAFETY (unchecked module): every storage index below is < the buffer length the host sized:
// token t = t0 + i with i < L and t0 + L <= T (chunk table built from validated cu_seqlens);
// head h = hv / group < H, hv < HV; channels d < K, e < V; workspace slots (c * hvb + z) with
// c < chunks, z < hvb. Workgroup arrays are indexed by i, j < 64, dd < 16 (tile) and
// m < 64 within their declared sizes.

override HEAD_K: u32 = 64u;
override HEAD_V: u32 = 64u;
override QKV_DT: u32 = 0u;
override G_DT: u32 = 0u;
override BETA_DT: u32 = 0u;

@group(0) @binding(0) var<uniform> prm: Params;
@group(0) @binding(1) var<storage, read> aux: array<u32>;
@group(0) @binding(2) var<storage, read> qb: array<u32>;
@group(0) @binding(3) var<storage, read> kb: array<u32>;
@group(0) @binding(4) var<storage, read> vb: array<u32>;
@group(0) @binding(5) var<storage, read> gb: array<u32>;
@group(0) @binding(6) var<storage, read> bb: array<u32>;
@group(0) @binding(7) var<storage, read_write> wsa: array<f32>;
@group(0) @binding(8) var<storage, read_write> wsu: array<f32>;

const TS: u32 = 17u;       // row stride of the 16-wide dot-product tiles
const XS: u32 = 33u;       // row stride of the 32-wide W/U source tiles
const AS: u32 = 65u;       // row stride of the A / T matrix

var<workgroup> s_gam: array<f32, 64>;
var<workgroup> s_beta: array<f32, 64>;
var<workgroup> s_rq: array<f32, 64>;
var<workgroup> s_rk: array<f32, 64>;
// A strictly below the diagonal (row stride 65), T = (I + A)^-1 stored transposed above it
// (T[i][j] at [j][i]); after the solve the same memory holds Tᵀ with row stride 64 (unit
// diagonal and zeros included) so W/U read four rows of T with one vec4.
var<workgroup> s_at: array<vec4<f32>, 1040>;
// Tiles: K and Q rows (2 x 64 x 17) for the dot products, or a 64 x 33 source tile for W/U.
var<workgroup> s_x: array<f32, 2176>;
var<workgroup> s_meta: vec2<u32>;

fn ld(buf_id: u32, e: u32) -> f32 {
    // buf_id: 0 q, 1 k, 2 v (all QKV_DT)
    var w: u32;
    if (QKV_DT == DT_F32) {
        if (buf_id == 0u) { w = qb[e]; } else if (buf_id == 1u) { w = kb[e]; } else { w = vb[e]; }
        return bitcast<f32>(w);
    }
    if (buf_id == 0u) { w = qb[e >> 1u]; } else if (buf_id == 1u) { w = kb[e >> 1u]; } else { w = vb[e >> 1u]; }
    return decode16(w, e, QKV_DT);
}

fn ld_g(e: u32) -> f32 {
    if (G_DT == DT_F32) { return bitcast<f32>(gb[e]); }
    return decode16(gb[e >> 1u], e, G_DT);
}

fn ld_beta(e: u32) -> f32 {
    if (BETA_DT == DT_F32) { return bitcast<f32>(bb[e]); }
    return decode16(bb[e >> 1u], e, BETA_DT);
}

fn at_get(x: u32) -> f32 {
    return s_at[x >> 2u][x & 3u];
}

fn at_set(x: u32, v: f32) {
    s_at[x >> 2u][x & 3u] = v;
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

    // 1. gates, betas, inverse norms
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
        s_gam[i] = gam;
        s_beta[i] = bet;
    } else if (tid < 192u) {
        let which = (tid - 64u) / 64u; // 0 q, 1 k
        let i = tid % 64u;
        var r = 1.0;
        if (prm.l2norm == 1u && i < L) {
            let base = ((t0 + i) * prm.heads + h) * K;
            var ss = 0.0;
            for (var d = 0u; d < K; d++) {
                let x = ld(which, base + d);
                ss += x * x;
            }
            r = 1.0 / sqrt(ss + 1e-6);
        }
        if (which == 0u) { s_rq[i] = r; } else { s_rk[i] = r; }
    }
    workgroupBarrier();
    if (tid == 0u) {
        var acc = 0.0;
        for (var i = 0u; i < 64u; i++) {
            acc += s_gam[i];
            s_gam[i] = acc;
        }
    }
    workgroupBarrier();

    // 2. K K^T and Q K^T, 4 x 4 per invocation
    let ty = tid / 16u;
    let tx = tid % 16u;
    var akk: array<f32, 16>;
    var aqk: array<f32, 16>;
    for (var x = 0u; x < 16u; x++) { akk[x] = 0.0; aqk[x] = 0.0; }
    for (var d0 = 0u; d0 < K; d0 += 16u) {
        for (var r = 0u; r < 4u; r++) {
            let idx = tid + 256u * r;
            let i = idx / 16u;
            let dd = idx % 16u;
            var kv = 0.0;
            var qv = 0.0;
            if (i < L && d0 + dd < K) {
                let e = ((t0 + i) * prm.heads + h) * K + d0 + dd;
                kv = ld(1u, e);
                qv = ld(0u, e);
            }
            s_x[i * TS + dd] = kv;
            s_x[1088u + i * TS + dd] = qv;
        }
        workgroupBarrier();
        if (tx <= ty) {
            for (var dd = 0u; dd < 16u; dd++) {
                var ka: array<f32, 4>;
                var qa: array<f32, 4>;
                var kj: array<f32, 4>;
                for (var a = 0u; a < 4u; a++) {
                    ka[a] = s_x[(ty * 4u + a) * TS + dd];
                    qa[a] = s_x[1088u + (ty * 4u + a) * TS + dd];
                    kj[a] = s_x[(tx * 4u + a) * TS + dd];
                }
                for (var a = 0u; a < 4u; a++) {
                    for (var b = 0u; b < 4u; b++) {
                        akk[a * 4u + b] += ka[a] * kj[b];
                        aqk[a * 4u + b] += qa[a] * kj[b];
                    }
                }
            }
        }
        workgroupBarrier();
    }
    for (var a = 0u; a < 4u; a++) {
        let i = ty * 4u + a;
        for (var b = 0u; b < 4u; b++) {
            let j = tx * 4u + b;
            var av = 0.0;
            var pv = 0.0;
            if (j <= i && i < L) {
                let e = exp(s_gam[i] - s_gam[j]);
                let rk = s_rk[i] * s_rk[j];
                if (j < i) {
                    av = s_beta[i] * e * akk[a * 4u + b] * rk;
                }
                pv = prm.scale * e * aqk[a * 4u + b] * s_rq[i] * s_rk[j];
            }
            if (j < i) {
                at_set(i * AS + j, av);
            }
            wsa[base_p + j * 64u + i] = pv;
        }
    }
    workgroupBarrier();

    // 3. T = (I + A)^-1, unit lower triangular, by blocks of 16 (T[i][j] stored at s_at[j][i]):
    //    the four diagonal blocks by forward substitution, one column per invocation,
    //    T[i][j] = -A[i][j] - sum_{j < m < i} A[i][m] T[m][j]; then the blocks below them by
    //    distance, T_IJ = -T_II sum_{J <= K < I} A_IK T_KJ (rows >= L have A = 0: identity).
    if (tid < 64u) {
        let j = tid;
        let bend = (j / 16u) * 16u + 16u;
        for (var i = j + 1u; i < bend; i++) {
            var acc = -at_get(i * AS + j);
            for (var m = j + 1u; m < i; m++) {
                acc -= at_get(i * AS + m) * at_get(j * AS + m);
            }
            at_set(j * AS + i, acc);
        }
    }
    workgroupBarrier();
    for (var dist = 1u; dist < 4u; dist++) {
        let nb = 4u - dist;
        // X_IJ = sum_K A_IK T_KJ into s_x (free during the solve), block (I, J) = (J + dist, J)
        for (var idx = tid; idx < nb * 256u; idx += 256u) {
            let bj = idx / 256u;
            let bi = bj + dist;
            let i = bi * 16u + (idx % 256u) / 16u;
            let j = bj * 16u + idx % 16u;
            var x = 0.0;
            for (var k = bj * 16u; k < bi * 16u; k++) {
                var t = 0.0;
                if (k == j) {
                    t = 1.0;
                } else if (k > j) {
                    t = at_get(j * AS + k);
                }
                x += at_get(i * AS + k) * t;
            }
            s_x[idx] = x;
        }
        workgroupBarrier();
        for (var idx = tid; idx < nb * 256u; idx += 256u) {
            let bj = idx / 256u;
            let bi = bj + dist;
            let r = (idx % 256u) / 16u;
            let i = bi * 16u + r;
            let j = bj * 16u + idx % 16u;
            var acc = s_x[idx];
            for (var rr = 0u; rr < r; rr++) {
                acc += at_get((bi * 16u + rr) * AS + i) * s_x[bj * 256u + rr * 16u + idx % 16u];
            }
            at_set(j * AS + i, -acc);
        }
        workgroupBarrier();
    }
    // Tᵀ[m][i] (row stride 64): T[i][m] for m < i < L, 1 on the diagonal, 0 elsewhere
    var tv: array<f32, 16>;
    for (var r = 0u; r < 16u; r++) {
        let idx = tid + 256u * r;
        let m = idx / 64u;
        let i = idx % 64u;
        var t = 0.0;
        if (m < i && i < L) {
            t = at_get(m * AS + i);
        } else if (m == i) {
            t = 1.0;
        }
        tv[r] = t;
    }
    workgroupBarrier();
    for (var r = 0u; r < 16u; r++) {
        at_set(tid + 256u * r, tv[r]);
    }
    workgroupBarrier();

    // 4. W = T (beta K e^Γ) and U = T (beta V), 32 columns a tile, 4 x 2 per invocation.
    let ntk = (K + 31u) / 32u;
    let ntv = (V4 + 31u) / 32u;
    for (var tile = 0u; tile < ntk + ntv; tile++) {
        let is_w = tile < ntk;
        var c0 = tile * 32u;
        var width = K;
        if (!is_w) {
            c0 = (tile - ntk) * 32u;
            width = V;
        }
        for (var r = 0u; r < 8u; r++) {
            let idx = tid + 256u * r;
            let m = idx / 32u;
            let cc = idx % 32u;
            var x = 0.0;
            if (m < L && c0 + cc < width) {
                if (is_w) {
                    let e = ((t0 + m) * prm.heads + h) * K + c0 + cc;
                    x = s_beta[m] * ld(1u, e) * s_rk[m] * exp(s_gam[m]);
                } else {
                    let e = ((t0 + m) * HV + hv) * V + c0 + cc;
                    x = s_beta[m] * ld(2u, e);
                }
            }
            s_x[m * XS + cc] = x;
        }
        workgroupBarrier();
        // out[i] = sum_{m <= i} T[i][m] X[m] for rows i = 4 ty + a, columns 2 tx + b
        var acc: array<vec2<f32>, 4>;
        for (var a = 0u; a < 4u; a++) { acc[a] = vec2<f32>(0.0); }
        let mend = min(L, ty * 4u + 4u);
        for (var m = 0u; m < mend; m++) {
            let xv = vec2<f32>(s_x[m * XS + tx * 2u], s_x[m * XS + tx * 2u + 1u]);
            let t = s_at[m * 16u + ty];
            acc[0] += t.x * xv;
            acc[1] += t.y * xv;
            acc[2] += t.z * xv;
            acc[3] += t.w * xv;
        }
        for (var a = 0u; a < 4u; a++) {
            let i = ty * 4u + a;
            for (var b = 0u; b < 2u; b++) {
                let cc = tx * 2u + b;
                let out = select(acc[a][b], 0.0, i >= L);
                if (is_w) {
                    if (c0 + cc < K) {
                        wsa[base_w + (c0 + cc) * 64u + i] = out;
                    }
                } else if (c0 + cc < V4) {
                    wsu[base_u + i * V4 + c0 + cc] = out;
                }
            }
        }
        workgroupBarrier();
    }

    // 5. qdecᵀ = (scale q e^Γ)ᵀ [K][64], through a 64 x 32 tile so reads and writes coalesce
    for (var c0 = 0u; c0 < K; c0 += 32u) {
        for (var r = 0u; r < 8u; r++) {
            let idx = tid + 256u * r;
            let i = idx / 32u;
            let cc = idx % 32u;
            var x = 0.0;
            if (i < L && c0 + cc < K) {
                let e = ((t0 + i) * prm.heads + h) * K + c0 + cc;
                x = prm.scale * s_rq[i] * ld(0u, e) * exp(s_gam[i]);
            }
            s_x[i * XS + cc] = x;
        }
        workgroupBarrier();
        for (var r = 0u; r < 8u; r++) {
            let idx = tid + 256u * r;
            let cc = idx / 64u;
            let i = idx % 64u;
            if (c0 + cc < K) {
                wsa[base_qd + (c0 + cc) * 64u + i] = s_x[i * XS + cc];
            }
        }
        workgroupBarrier();
    }

    // 6. decayed k, and e^Γ_last
    let glast = s_gam[max(L, 1u) - 1u];
    for (var idx = tid; idx < 64u * K; idx += 256u) {
        let i = idx / K;
        let d = idx % K;
        var kd = 0.0;
        if (i < L) {
            let e = ((t0 + i) * prm.heads + h) * K + d;
            kd = s_rk[i] * ld(1u, e) * exp(glast - s_gam[i]);
        }
        wsa[base_kd + i * K4 + d] = kd;
    }
    for (var idx = tid; idx < 64u * (K4 - K); idx += 256u) {
        let i = idx / (K4 - K);
        wsa[base_kd + i * K4 + K + idx % (K4 - K)] = 0.0;
    }
    for (var d = tid; d < K4; d += 256u) {
        wsa[base_gl + d] = select(0.0, exp(glast), d < K);
    }
}

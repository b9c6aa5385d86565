// gdn_prefill_intra.wgsl: the state-independent, chunk-parallel stage of the gdn prefill
// (docs/spec.md, the chunked algorithm, steps 1-4), one workgroup per (chunk, value head).
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
// In the `coop` kernel's variant W, kdecᵀ, qdec and P go to ws16 as f16 tiles instead
// (gdn_intra_coop.wgsl).
// Every exponent is Γ_i − Γ_j with j <= i, Γ_i or Γ_last − Γ_j: never positive for log decays.
// Γ = B + s (common.wgsl, clamp_decay): s in s_gam, B in s_fk until the row factors replace it.
//
// Every global load of q/k/v is issued one tile ahead of its use (named registers,
// unconditional loads at clamped indices, zeroed by selection), so no loop waits on a load per
// iteration; the q/k norms come from the K Kᵀ tiles (no serial K-long loop per row); kdec is
// written from the W tiles' k values (no second pass over k); the dot-product tiles are stored
// channel-major so each step is three vec4 loads for 32 multiply-adds; no private arrays (every
// register tile is a named vec4). Step 4 streams 64 x 64 source tiles (2 k, 2 v, 2 q at
// K = V = 128) staged as vec4s in s_at, scaled by per-row factors (s_fk, s_fd, s_fq: one exp per
// row instead of per element), and multiplied by the packed triangular T in s_x with a 4 x 4
// block per invocation (intra.wgsl).
//
// SAFETY (unchecked module): every storage index below is < the buffer length the host sized:
// token t = t0 + i with i < L and t0 + L <= T (chunk table built from validated cu_seqlens); loads
// outside the chunk or the head dims read row t0 (L >= 1), channel 0 instead and are zeroed;
// head h = hv / group < H, hv < HV; channels d < K, e < V; workspace slots (c * hvb + z) with
// c < chunks, z < hvb. Workgroup arrays: s_x scalars < 2176 (dot tiles 2 x 16 x 68, solve
// blocks < 1024), its vec4s < 544 (packed Tᵀ); s_at < 4160 scalars (source tiles < 1024 vec4s,
// intra.wgsl); rows i, j, m < 64 index the 64-entry row arrays.

override HEAD_K: u32 = 64u;
override HEAD_V: u32 = 64u;

// bindings 0-6 (prm, aux, q, k, v, g, beta), the dtype overrides and the input loaders come from
// inputs.wgsl; bindings 7-8 (wsa, wsu), s_at, the T solve and the W/U writer from intra.wgsl.

const XT: u32 = 68u;       // row stride of the channel-major dot-product tiles [16][64 + 4]

// s of Γ = B + s (the sum of the decays above LARGE_DECAY; B lives in s_fk until step 4's factors)
var<workgroup> s_gam: array<f32, 64>;
var<workgroup> s_beta: array<f32, 64>;
var<workgroup> s_rq: array<f32, 64>;
var<workgroup> s_rk: array<f32, 64>;
// Row factors of the W/U/qdec stream (zero for rows >= L): β r_k e^Γ (W), r_k e^(Γ_last − Γ)
// (kdec), scale r_q e^Γ (qdec).
var<workgroup> s_fk: array<f32, 64>;
var<workgroup> s_fd: array<f32, 64>;
var<workgroup> s_fq: array<f32, 64>;
// Tiles: Kᵀ and Qᵀ channel rows (2 x 16 x 68) for the dot products, the solve's block products,
// or a 64 x 33 source tile for W/U/qdec.
var<workgroup> s_x: array<vec4<f32>, SX_VEC4>;   // 544 (f32 variant) or 256 (coop: the solve only)
// 16 bytes, not 8: every workgroup variable of the coop variant is a multiple of 16 bytes (with
// an 8-byte one the cooperative-matrix products come out wrong there, as in
// prefill_state_coop.wgsl)
var<workgroup> s_meta: vec4<u32>;

fn x_get(x: u32) -> f32 {
    return s_x[x >> 2u][x & 3u];
}

fn x_set(x: u32, v: f32) {
    s_x[x >> 2u][x & 3u] = v;
}

// A and P of row i, columns 4 tx .. 4 tx + 3 from the raw K Kᵀ / Q Kᵀ sums.
fn put_ap(i: u32, tx: u32, kk: vec4<f32>, qk: vec4<f32>, l: u32, base_p: u32) {
    for (var b = 0u; b < 4u; b++) {
        let j = tx * 4u + b;
        var av = 0.0;
        var pv = 0.0;
        if (j <= i && i < l) {
            let e = exp((s_fk[i] - s_fk[j]) + (s_gam[i] - s_gam[j]));
            let rk = s_rk[i] * s_rk[j];
            if (j < i) {
                av = s_beta[i] * e * kk[b] * rk;
            }
            pv = prm.scale * e * qk[b] * s_rq[i] * s_rk[j];
        }
        if (j < i) {
            at_set(i * AS + j, av);
        }
        put_p(base_p, i, j, pv);
    }
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
        s_meta = vec4<u32>(aux[prm.aux_chunks + 4u * c], aux[prm.aux_chunks + 4u * c + 1u], 0u, 0u);
    }
    let mt = workgroupUniformLoad(&s_meta);
    let t0 = mt.x;
    let L = mt.y;
    let slot = c * prm.hvb + z;
    let sa = ws_slot(K, 0u);
    let base_w = slot * sa;
    let base_kd = base_w + ws_kd(K);
    set_base16(slot);
    let base_qd = base_w + ws_qd(K);
    let base_p = base_w + ws_p(K);
    let base_gl = base_w + ws_gl(K);
    let base_u = slot * 64u * V4;

    // The first operand tile of step 2, loaded during the gates (gdn_intra_*.wgsl).
    let pre2 = gdn_dots_first(tid, t0, L, h);

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
            gam = clamp_decay(gate_value(ld_g(t * HV + hv), prm.gate, a, bias, prm.has_a_log,
                prm.lb));
            bet = beta_value(ld_beta(t * HV + hv), prm.beta_mode);
        }
        s_rq[i] = gam;   // raw log decays; s_rq is scratch until the norms are written
        s_beta[i] = bet;
    }
    workgroupBarrier();
    // Γ_i = B_i + s_i: two running sums in row order per invocation (the additions of a
    // sequential scan; masked rows add +0), four loads at a time
    if (tid < 64u) {
        var acc = 0.0;
        var big = 0.0;
        for (var m = 0u; m < 64u; m += 4u) {
            let x = vec4<f32>(s_rq[m], s_rq[m + 1u], s_rq[m + 2u], s_rq[m + 3u]);
            let on = vec4<u32>(m, m + 1u, m + 2u, m + 3u) <= vec4<u32>(tid);
            let lg = x < vec4<f32>(LARGE_DECAY);
            let xs = select(vec4<f32>(0.0), x, on & !lg);
            let xb = select(vec4<f32>(0.0), x, on & lg);
            acc += xs.x;
            acc += xs.y;
            acc += xs.z;
            acc += xs.w;
            big += xb.x;
            big += xb.y;
            big += xb.z;
            big += xb.w;
        }
        s_gam[tid] = acc;
        s_fk[tid] = big;
    }

    // 2. K Kᵀ and Q Kᵀ, rows 4 ty + a (kk_a, qk_a), columns 4 tx ..; invocations 0..127 also
    //    get the summed squares of row tid % 64 of k (< 64) or q (gdn_intra_*.wgsl).
    let ty = tid / 16u;
    let tx = tid % 16u;
    let dots = gdn_dots(tid, t0, L, h, pre2);
    store_norm(tid, tid % 64u, dots.ss, L);
    workgroupBarrier();
    put_ap(ty * 4u, tx, dots.kk0, dots.qk0, L, base_p);
    put_ap(ty * 4u + 1u, tx, dots.kk1, dots.qk1, L, base_p);
    put_ap(ty * 4u + 2u, tx, dots.kk2, dots.qk2, L, base_p);
    put_ap(ty * 4u + 3u, tx, dots.kk3, dots.qk3, L, base_p);
    // (Γ_last's B is read before the barrier: the row factors below overwrite s_fk)
    let blast = s_fk[max(L, 1u) - 1u];
    let slast = s_gam[max(L, 1u) - 1u];
    workgroupBarrier();

    // Row factors of step 4 (after the norms; read after the solve's barriers).
    let glast = blast + slast;
    if (tid < 64u) {
        let live = tid < L;
        let bi = s_fk[tid];
        let eg = exp(bi + s_gam[tid]);
        s_fk[tid] = select(0.0, s_beta[tid] * s_rk[tid] * eg, live);
        s_fd[tid] = select(0.0, s_rk[tid] * exp((blast - bi) + (slast - s_gam[tid])), live);
        s_fq[tid] = select(0.0, prm.scale * s_rq[tid] * eg, live);
    }

    // The first source tile of step 4, loaded during the solve (gdn_intra_*.wgsl).
    let pre = gdn_step4_first(tid, t0, L, h, hv);

    // 3. T = (I + A)^-1 (intra.wgsl), left as packed triangular Tᵀ in s_x
    solve_t(tid, L);

    // 4. W = T (β K e^Γ) (which also writes kdec), U = T (β V), qdecᵀ = (scale q e^Γ)ᵀ:
    //    gdn_intra_f32.wgsl (f32 register tiles) or gdn_intra_coop.wgsl (cooperative matrices).
    gdn_step4(tid, t0, L, h, hv, base_w, base_kd, base_qd, base_u, pre);

    // 5. kdec padding columns and e^Γ_last
    for (var idx = tid; idx < 64u * (K4 - K); idx += 256u) {
        let i = idx / (K4 - K);
        wsa[base_kd + i * K4 + K + idx % (K4 - K)] = 0.0;
    }
    for (var d = tid; d < K4; d += 256u) {
        wsa[base_gl + d] = select(0.0, exp(glast), d < K);
    }
}

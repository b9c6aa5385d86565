// kda_prefill_intra.wgsl: the state-independent, chunk-parallel stage of the kda prefill
// (docs/spec.md, the chunked algorithm, steps 1-4), one workgroup per (chunk, value head). Same
// contract as gdn_prefill_intra.wgsl except that the gate is per key channel: g [T, HV, K],
// dt_bias [HV, K], and Γ [64, K] and Γ_last − Γ [64, K] are also written to the workspace
// (after e^Γ_last; the second only where step 4 runs in f32).
//
// Grid: x + y * grid_c = row c of the chunk table (c < chunks), z = value head within the head
// batch (hv = hv0 + z). 256 invocations.
// Reads: q, k [T, H, K] and v [T, HV, V] (QKV_DT), g [T, HV, K] (G_DT), beta [T, HV] (BETA_DT), all
// as u32 words holding the caller's dtype; aux (chunk table, A_log, dt_bias).
// Writes, per (c, z), into the workspace (rows >= L are written as zeros):
//   wsa (layout in common.wgsl): Wᵀ [K, 64], kdec = k e^(Γ_last − Γ) [64, K4],
//        qdecᵀ = (scale q e^Γ)ᵀ [K, 64], Pᵀ [64, 64] (P_ij = scale q_i·k_j e^(Γ_i − Γ_j),
//        j <= i), e^Γ_last [K4] (zero padded);
//   wsu: U [64, V4] (zero padded).
// In the `coop` kernel's variants W, kdecᵀ, qdec and P go to ws16 as f16 tiles instead
// (kda_intra_workspace_f16.wgsl, kda_intra_coop.wgsl).
// Every exponent is Γ_i[d] − Γ_j[d] with j <= i (clamped at 0 where j > i, whose products are
// discarded), Γ_i or Γ_last − Γ_j: never positive for log decays. The per-channel decay is
// evaluated element by element inside the dot products (no factoring through e^-Γ), so softplus
// gates of any size are safe. Each log decay is clamped (common.wgsl, clamp_decay) and the scan
// keeps Γ = B + s as two sums, s (the decays above LARGE_DECAY) in s_at and B in s_x, so every
// difference above is (B_i − B_j) + (s_i − s_j); the workspace gets Γ = B + s and, for the f32
// step 4's kdec, Γ_last − Γ formed the same way.
//
// q/k/g/v and Γ loads are issued one tile ahead of their use (named registers, unconditional
// loads at clamped indices, zeroed by selection); the q/k norms come from the K Kᵀ tiles; W, U
// and qdec are one stream of 64 x 64 source tiles staged as vec4s in s_at (Γ loaded a vec4 at a
// time with them) and kdec is written from the W tiles; the stream is multiplied by the packed
// triangular T with a 4 x 4 block per invocation (intra.wgsl); s_x is a vec4 array (816 vec4s)
// read through x_get / x_set; no private arrays (register tiles are named vec4s).
//
// Step 2 goes through 16-token reference points (the factoring of docs/spec.md's chunked
// algorithm, as the CUDA kda intra kernel does it): per 16-channel slice the rows are staged
// once as KT_i = k_i e^(Γ_i − Γ_n(i)), QT_i = q_i e^(Γ_i − Γ_n(i)) (n(i) = the first row of i's
// 16-row block) and KH_j^n = k_j e^(Γ_n − Γ_j) for n = 16, 32, 48 and j < n, so the six 16 x 16
// blocks below the diagonal are plain products (no exponential inside); only the four diagonal
// blocks keep the exponential per element. Every exponent is still Γ_later − Γ_earlier. Warps
// 0-2 take the 96 4 x 4 blocks below the diagonal, warps 3-7 the 160 1 x 4 row pieces of the
// diagonal blocks (about the same instructions a step each). Measured on the H200 (kda 32/32
// 1 x 8192): intra pass 2.599 -> 2.158 ms against the exponential per element on the 136 4 x 4
// blocks on or below the diagonal.
//
// SAFETY (unchecked module): every storage index below is < the buffer length the host sized:
// token t = t0 + i with i < L and t0 + L <= T (chunk table built from validated cu_seqlens); loads
// outside the chunk or the head dims read row t0 (L >= 1), channel 0 instead and are zeroed;
// head h = hv / group < H, hv < HV; channels d < K, e < V (dt_bias read only for gates that have
// it, at channel min(d, K - 1)); workspace slots (c * hvb + z) with c < chunks, z < hvb, Γ rows
// m < 64 and channels < K. Workgroup arrays are indexed by i, j < 64, dd < 16 (tile) and m < 64
// within their declared sizes (the Γ scan's copy in s_at: rows < 64 of stride 17, < 1088 of its
// 4160 floats, written after the tile's first barrier and read before its third; its B part in
// s_x at 2176 + rows < 64 of stride 17, < 3264 of s_x's 3264 floats, over the raw gate tile's old
// place, likewise; the raw gate tile in s_at at 1088 + rows < 64 of stride 17, < 2176, written
// before the first barrier and read before the second; the staged rows, channel-major with the
// rows as vec4s: KH vec4 272 + 24 dd + h / 4 < 656 of s_at (h < 96), KT vec4 656 + 12 dd +
// (i − 16) / 4 < 848 and QT vec4 848 + 12 dd + (i − 16) / 4 < 1040 of s_at's 1040 (16 <= i < 64,
// dd < 16), written after the second barrier (over the raw gate tile, dead then) and read before
// the third; Γ_last − Γ at workspace rows m < 64 and channels < K, as Γ).

override HEAD_K: u32 = 64u;
override HEAD_V: u32 = 64u;

// bindings 0-6 (prm, aux, q, k, v, g, beta), the dtype overrides and the input loaders come from
// inputs.wgsl; bindings 7-8 (wsa, wsu), s_at, the T solve and the W/U writer from intra.wgsl.

const TS: u32 = 17u;       // row stride of the 16-wide dot-product tiles

var<workgroup> s_beta: array<f32, 64>;
var<workgroup> s_rq: array<f32, 64>;
var<workgroup> s_rk: array<f32, 64>;
// Tiles: K and Q rows and the B part of the Γ scan (3 x 64 x 17 scalars) for the dot products,
// the solve's scratch, then the packed triangular Tᵀ (544 vec4s).
var<workgroup> s_x: array<vec4<f32>, 816>;
// 16 bytes, not 8: the variant with cooperative matrices (kda_intra_coop.wgsl) needs every
// workgroup variable a multiple of 16 bytes (gdn_prefill_intra.wgsl, prefill_state_coop.wgsl)
var<workgroup> s_meta: vec4<u32>;

// Scalar access to s_x (the dot-product tiles and the solve's scratch in intra.wgsl).
fn x_get(x: u32) -> f32 {
    return s_x[x >> 2u][x & 3u];
}

fn x_set(x: u32, v: f32) {
    s_x[x >> 2u][x & 3u] = v;
}

// Raw gate input g of chunk row i, channel d: an unconditional load (row t0, channel 0 when
// outside the chunk or K) zeroed by selection, as intra.wgsl's qk_at.
fn g_at(i: u32, d: u32, t0: u32, l: u32, hv: u32) -> f32 {
    let ok = i < l && d < HEAD_K;
    let x = ld_g(((t0 + select(0u, i, ok)) * prm.vheads + hv) * HEAD_K + select(0u, d, ok));
    return select(0.0, x, ok);
}

// The clamped log decay of raw gate input x at row i, channel d (zero outside the chunk or K).
fn gate_at(x: f32, i: u32, d: u32, l: u32, a_exp: f32, bias: f32) -> f32 {
    let gv = clamp_decay(gate_value(x, prm.gate, a_exp, bias, prm.has_a_log, prm.lb));
    return select(0.0, gv, i < l && d < HEAD_K);
}

// Γ_last − Γ[m][channels of vec4 column q] for the W tiles of the stream (0 for the others; loads
// at channel min(d, K − 1), as gam4_at).
fn dec4_at(tile: u32, m: u32, q: u32, base_dec: u32) -> vec4<f32> {
    if (tile >= (HEAD_K + 63u) / 64u) {
        return vec4<f32>(0.0);
    }
    let d = tile * 64u + 4u * q;
    let r = base_dec + m * HEAD_K;
    let k1 = HEAD_K - 1u;
    return vec4<f32>(wsa[r + min(d, k1)], wsa[r + min(d + 1u, k1)], wsa[r + min(d + 2u, k1)],
        wsa[r + min(d + 3u, k1)]);
}

// Γ[m][channels of vec4 column q] for the W and qdec tiles of the stream (0 for U tiles; loads at
// channel min(d, K − 1), whose values for d >= K multiply zero raw elements).
fn gam4_at(tile: u32, m: u32, q: u32, base_gam: u32) -> vec4<f32> {
    let ntk = (HEAD_K + 63u) / 64u;
    let ntv = (k4(HEAD_V) + 63u) / 64u;
    var d = tile * 64u + 4u * q;
    if (tile >= ntk + ntv) {
        d = (tile - ntk - ntv) * 64u + 4u * q;
    } else if (tile >= ntk) {
        return vec4<f32>(0.0);
    }
    let r = base_gam + m * HEAD_K;
    let k1 = HEAD_K - 1u;
    return vec4<f32>(wsa[r + min(d, k1)], wsa[r + min(d + 1u, k1)], wsa[r + min(d + 2u, k1)],
        wsa[r + min(d + 3u, k1)]);
}

// A and P of row i, columns 4 tx .. 4 tx + 3 from the decayed K Kᵀ / Q Kᵀ sums.
fn put_ap(i: u32, tx: u32, kk: vec4<f32>, qk: vec4<f32>, l: u32, base_p: u32) {
    for (var b = 0u; b < 4u; b++) {
        let j = tx * 4u + b;
        var av = 0.0;
        var pv = 0.0;
        if (j <= i && i < l) {
            let rk = s_rk[i] * s_rk[j];
            if (j < i) {
                av = s_beta[i] * kk[b] * rk;
            }
            pv = prm.scale * qk[b] * s_rq[i] * s_rk[j];
        }
        if (j < i) {
            at_set(i * AS + j, av);
        }
        if (!put_p16(i, j, pv)) {
            wsa[base_p + j * 64u + i] = pv;
        }
    }
}

// Scale raw source row m, vec4 column q into the source tile (kind 0 W, 1 U, 2 qdec) and, for W
// tiles, write kdec (row-major, contiguous across the warp); g = Γ[m][d ..], gd = (Γ_last −
// Γ)[m][d ..]. Rows m >= L are written as zeros.
fn stage_src(kind: u32, c0: u32, m: u32, q: u32, raw: vec4<f32>, g: vec4<f32>, gd: vec4<f32>,
    l: u32, base_kd: u32) {
    let live = m < l;
    var x = s_beta[m] * raw;
    if (kind == 0u) {
        x = s_beta[m] * raw * s_rk[m] * exp(g);
        put_kdec(base_kd, m, c0 + 4u * q, select(vec4<f32>(0.0), s_rk[m] * raw * exp(gd), live));
    } else if (kind == 2u) {
        x = prm.scale * s_rq[m] * raw * exp(g);
    }
    s_at[src_slot(m, q)] = select(vec4<f32>(0.0), x, live);
}

// The raw gate tile (scalar offset in s_at) and the B part of the Γ scan (scalar offset in s_x),
// both [64][TS].
const GRAW: u32 = 1088u;
const GBX: u32 = 2176u;

// s of rows r0 .. r0 + 3, channel dd of the tile (the scan's copy in s_at, row stride TS).
fn gam4(r0: u32, dd: u32) -> vec4<f32> {
    return vec4<f32>(at_get(r0 * TS + dd), at_get((r0 + 1u) * TS + dd),
        at_get((r0 + 2u) * TS + dd), at_get((r0 + 3u) * TS + dd));
}

// Γ_i − Γ_j of channel ch of the tile: (B_i − B_j) + (s_i − s_j).
fn gdiff(i: u32, j: u32, ch: u32) -> f32 {
    return (x_get(GBX + i * TS + ch) - x_get(GBX + j * TS + ch))
        + (at_get(i * TS + ch) - at_get(j * TS + ch));
}

// acc (s, B) plus the log decay x where `on`: into B below LARGE_DECAY, else into s.
fn gsplit(acc: vec2<f32>, x: f32, on: bool) -> vec2<f32> {
    let y = select(vec2<f32>(x, 0.0), vec2<f32>(0.0, x), x < LARGE_DECAY);
    return acc + select(vec2<f32>(0.0), y, on);
}

// acc plus the raw gates of rows start .. start + 15 of channel ch, added in row order.
fn gsum16(acc: vec2<f32>, start: u32, ch: u32) -> vec2<f32> {
    var a = acc;
    for (var m = start; m < start + 16u; m += 4u) {
        a = gsplit(a, at_get(GRAW + m * TS + ch), true);
        a = gsplit(a, at_get(GRAW + (m + 1u) * TS + ch), true);
        a = gsplit(a, at_get(GRAW + (m + 2u) * TS + ch), true);
        a = gsplit(a, at_get(GRAW + (m + 3u) * TS + ch), true);
    }
    return a;
}

fn row4(base: u32, r0: u32, dd: u32) -> vec4<f32> {
    return vec4<f32>(x_get(base + r0 * TS + dd), x_get(base + (r0 + 1u) * TS + dd),
        x_get(base + (r0 + 2u) * TS + dd), x_get(base + (r0 + 3u) * TS + dd));
}

// The reference points' staged rows, channel-major [16][rows] so that four rows are one vec4 (vec4
// offsets in s_at, see SAFETY above): KH [16][96], KT and QT [16][48] (rows 16..63).
const KHB: u32 = 272u;
const KTB: u32 = 656u;
const QTB: u32 = 848u;

// First KH row of reference n = 16 nb (nb = 1, 2, 3): rows j < n of each reference, in order.
fn kh_base(nb: u32) -> u32 {
    return 8u * nb * (nb - 1u);
}

// Stages KT, QT (rows 16..63) and KH (references 16, 32, 48) of the current 16-channel slice
// from the raw k / q tiles (s_x) and the Γ scan (s_at); 9 exponentials per invocation. Lanes run
// along the rows (the staged rows are contiguous, the tiles' rows 17 floats apart).
fn stage_ref(tid: u32) {
    for (var m = 0u; m < 3u; m++) {
        let c = tid + 256u * m;
        let ch = c / 48u;
        let i = 16u + c % 48u;
        let e = exp(gdiff(i, i & ~15u, ch));
        at_set(4u * KTB + ch * 48u + i - 16u, x_get(i * TS + ch) * e);
        at_set(4u * QTB + ch * 48u + i - 16u, x_get(1088u + i * TS + ch) * e);
    }
    for (var m = 0u; m < 6u; m++) {
        let c = tid + 256u * m;
        let ch = c / 96u;
        let hh = c % 96u;
        let nb = select(select(3u, 2u, hh < 48u), 1u, hh < 16u);
        let j = hh - kh_base(nb);
        let e = exp(gdiff(16u * nb, j, ch));
        at_set(4u * KHB + ch * 96u + hh, x_get(j * TS + ch) * e);
    }
}

// The diagonal-block piece of invocation u = tid − 96 (< 160): row 16 bi + r and columns
// 16 bi + 4 cb .. + 3 with cb <= r / 4 (40 pieces per block), as vec2(row, first column).
fn diag_piece(u: u32) -> vec2<u32> {
    let bi = u / 40u;
    let w = u % 40u;
    var r = w;
    var cb = 0u;
    if (w >= 24u) {
        r = 12u + (w - 24u) / 4u;
        cb = (w - 24u) % 4u;
    } else if (w >= 12u) {
        r = 8u + (w - 12u) / 3u;
        cb = (w - 12u) % 3u;
    } else if (w >= 4u) {
        r = 4u + (w - 4u) / 2u;
        cb = (w - 4u) % 2u;
    }
    return vec2<u32>(16u * bi + r, 16u * bi + 4u * cb);
}

// The block below the diagonal of invocation tid (< 96): block pair (bi, bj), bj < bi, in the
// order (1,0) (2,0) (2,1) (3,0) (3,1) (3,2); rows 16 bi + 4 (sub / 4) .., columns 16 bj +
// 4 (sub % 4) ..; as vec3(bi, first row, first column).
fn off_block(tid: u32) -> vec3<u32> {
    let pr = tid / 16u;
    let sub = tid % 16u;
    let bi = 1u + select(0u, 1u, pr >= 1u) + select(0u, 1u, pr >= 3u);
    let bj = pr - bi * (bi - 1u) / 2u;
    return vec3<u32>(bi, 16u * bi + 4u * (sub / 4u), 16u * bj + 4u * (sub % 4u));
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
    let sa = ws_slot(K, 1u);
    let base_w = slot * sa;
    let base_kd = base_w + ws_kd(K);
    set_base16(slot);
    let base_qd = base_w + ws_qd(K);
    let base_p = base_w + ws_p(K);
    let base_gl = base_w + ws_gl(K);
    let base_gam = base_w + ws_gam(K);
    let base_dec = base_w + ws_dec(K);
    let last = max(L, 1u) - 1u;
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
    var pg0 = g_at(li, ld_c, t0, L, hv);
    var pg1 = g_at(li + 16u, ld_c, t0, L, hv);
    var pg2 = g_at(li + 32u, ld_c, t0, L, hv);
    var pg3 = g_at(li + 48u, ld_c, t0, L, hv);
    var pb = 0.0;
    if (prm.gate != 0u) {
        pb = bitcast<f32>(aux[prm.aux_params + HV + hv * K + min(ld_c, K - 1u)]);
    }

    // 1. betas
    if (tid < 64u) {
        let i = tid;
        var bet = 0.0;
        if (i < L) {
            bet = beta_value(ld_beta((t0 + i) * HV + hv), prm.beta_mode);
        }
        s_beta[i] = bet;
    }
    var a_exp = 1.0;
    if (prm.has_a_log == 1u) {
        a_exp = exp(bitcast<f32>(aux[prm.aux_params + hv]));
    }

    // 2. K Kᵀ and Q Kᵀ with the per-channel decay inside, rows 4 ty + a (kk_a, qk_a), columns
    //    4 tx ..; the next tile loaded while this one is used. Invocations 0..127 also sum the
    //    squares of row tid % 64 of k (< 64) or q.
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
    let nbase = select(1088u, 0u, tid < 64u);
    for (var d0 = 0u; d0 < K; d0 += 16u) {
        let d = d0 + ld_c;
        x_set(li * TS + ld_c, pk0);
        x_set((li + 16u) * TS + ld_c, pk1);
        x_set((li + 32u) * TS + ld_c, pk2);
        x_set((li + 48u) * TS + ld_c, pk3);
        x_set(1088u + li * TS + ld_c, pq0);
        x_set(1088u + (li + 16u) * TS + ld_c, pq1);
        x_set(1088u + (li + 32u) * TS + ld_c, pq2);
        x_set(1088u + (li + 48u) * TS + ld_c, pq3);
        at_set(GRAW + li * TS + ld_c, gate_at(pg0, li, d, L, a_exp, pb));
        at_set(GRAW + (li + 16u) * TS + ld_c, gate_at(pg1, li + 16u, d, L, a_exp, pb));
        at_set(GRAW + (li + 32u) * TS + ld_c, gate_at(pg2, li + 32u, d, L, a_exp, pb));
        at_set(GRAW + (li + 48u) * TS + ld_c, gate_at(pg3, li + 48u, d, L, a_exp, pb));
        workgroupBarrier();
        let dn = d + 16u;
        pk0 = qk_at(1u, li, dn, t0, L, h);
        pk1 = qk_at(1u, li + 16u, dn, t0, L, h);
        pk2 = qk_at(1u, li + 32u, dn, t0, L, h);
        pk3 = qk_at(1u, li + 48u, dn, t0, L, h);
        pq0 = qk_at(0u, li, dn, t0, L, h);
        pq1 = qk_at(0u, li + 16u, dn, t0, L, h);
        pq2 = qk_at(0u, li + 32u, dn, t0, L, h);
        pq3 = qk_at(0u, li + 48u, dn, t0, L, h);
        pg0 = g_at(li, dn, t0, L, hv);
        pg1 = g_at(li + 16u, dn, t0, L, hv);
        pg2 = g_at(li + 32u, dn, t0, L, hv);
        pg3 = g_at(li + 48u, dn, t0, L, hv);
        if (prm.gate != 0u) {
            pb = bitcast<f32>(aux[prm.aux_params + HV + hv * K + min(dn, K - 1u)]);
        }
        if (prm.l2norm == 1u && tid < 128u) {
            for (var dd = 0u; dd < 16u; dd++) {
                let x = x_get(nbase + nrow * TS + dd);
                ss += x * x;
            }
        }
        // Γ = B + s: inclusive cumulative sums down channel ld_c, rows li + 16 r, as running sums
        // in row order (the same additions as a sequential scan), four rows of loads at a time:
        // s into s_at (free until A is written), B into s_x (over the old raw gate tile), Γ into
        // the workspace
        var gacc = vec2<f32>(0.0);
        for (var m = 0u; m < 16u; m += 4u) {
            gacc = gsplit(gacc, at_get(GRAW + m * TS + ld_c), m <= li);
            gacc = gsplit(gacc, at_get(GRAW + (m + 1u) * TS + ld_c), m + 1u <= li);
            gacc = gsplit(gacc, at_get(GRAW + (m + 2u) * TS + ld_c), m + 2u <= li);
            gacc = gsplit(gacc, at_get(GRAW + (m + 3u) * TS + ld_c), m + 3u <= li);
        }
        let gp0 = gacc;
        let gp1 = gsum16(gp0, li + 1u, ld_c);
        let gp2 = gsum16(gp1, li + 17u, ld_c);
        let gp3 = gsum16(gp2, li + 33u, ld_c);
        at_set(li * TS + ld_c, gp0.x);
        at_set((li + 16u) * TS + ld_c, gp1.x);
        at_set((li + 32u) * TS + ld_c, gp2.x);
        at_set((li + 48u) * TS + ld_c, gp3.x);
        x_set(GBX + li * TS + ld_c, gp0.y);
        x_set(GBX + (li + 16u) * TS + ld_c, gp1.y);
        x_set(GBX + (li + 32u) * TS + ld_c, gp2.y);
        x_set(GBX + (li + 48u) * TS + ld_c, gp3.y);
        if (d < K) {
            wsa[base_gam + li * K + d] = gp0.x + gp0.y;
            wsa[base_gam + (li + 16u) * K + d] = gp1.x + gp1.y;
            wsa[base_gam + (li + 32u) * K + d] = gp2.x + gp2.y;
            wsa[base_gam + (li + 48u) * K + d] = gp3.x + gp3.y;
        }
        workgroupBarrier();
        // Γ_last − Γ for the f32 step 4's kdec, from the row `last` of the scan
        if (!KDA_STEP4_COOP && d < K) {
            let gl = vec2<f32>(at_get(last * TS + ld_c), x_get(GBX + last * TS + ld_c));
            wsa[base_dec + li * K + d] = (gl.y - gp0.y) + (gl.x - gp0.x);
            wsa[base_dec + (li + 16u) * K + d] = (gl.y - gp1.y) + (gl.x - gp1.x);
            wsa[base_dec + (li + 32u) * K + d] = (gl.y - gp2.y) + (gl.x - gp2.x);
            wsa[base_dec + (li + 48u) * K + d] = (gl.y - gp3.y) + (gl.x - gp3.x);
        }
        stage_ref(tid);
        workgroupBarrier();
        if (tid < 96u) {
            // below the diagonal: KT KHᵀ and QT KHᵀ, no exponential
            let ob = off_block(tid);
            let ra = KTB + (ob.y - 16u) / 4u;
            let rh = KHB + (kh_base(ob.x) + ob.z) / 4u;
            for (var dd = 0u; dd < 16u; dd++) {
                let ka = s_at[ra + 12u * dd];
                let qa = s_at[QTB + (ob.y - 16u) / 4u + 12u * dd];
                let kh = s_at[rh + 24u * dd];
                kk0 += ka.x * kh;
                kk1 += ka.y * kh;
                kk2 += ka.z * kh;
                kk3 += ka.w * kh;
                qk0 += qa.x * kh;
                qk1 += qa.y * kh;
                qk2 += qa.z * kh;
                qk3 += qa.w * kh;
            }
        } else {
            // a diagonal block's row piece: the exponential per element
            let pc = diag_piece(tid - 96u);
            for (var dd = 0u; dd < 16u; dd++) {
                let ki = x_get(pc.x * TS + dd);
                let qi = x_get(1088u + pc.x * TS + dd);
                let gi = at_get(pc.x * TS + dd);
                let bi = x_get(GBX + pc.x * TS + dd);
                let kj = row4(0u, pc.y, dd);
                let gj = gam4(pc.y, dd);
                let bj = row4(GBX, pc.y, dd);
                let b = kj * exp(min((vec4<f32>(bi) - bj) + (vec4<f32>(gi) - gj), vec4<f32>(0.0)));
                kk0 += ki * b;
                qk0 += qi * b;
            }
        }
        workgroupBarrier();
    }
    store_norm(tid, nrow, ss, L);
    workgroupBarrier();
    if (tid < 96u) {
        let ob = off_block(tid);
        put_ap(ob.y, ob.z / 4u, kk0, qk0, L, base_p);
        put_ap(ob.y + 1u, ob.z / 4u, kk1, qk1, L, base_p);
        put_ap(ob.y + 2u, ob.z / 4u, kk2, qk2, L, base_p);
        put_ap(ob.y + 3u, ob.z / 4u, kk3, qk3, L, base_p);
    } else {
        let pc = diag_piece(tid - 96u);
        put_ap(pc.x, pc.y / 4u, kk0, qk0, L, base_p);
    }
    // P's zeros above the pieces: blocks right of the diagonal, and in a diagonal block the
    // column groups of four right of the row's own
    for (var idx = tid; idx < 4096u; idx += 256u) {
        let i = idx % 64u;
        let j = idx / 64u;
        if ((j / 16u > i / 16u || (j / 16u == i / 16u && (j % 16u) / 4u > (i % 16u) / 4u))
            && !put_p16(i, j, 0.0)) {
            wsa[base_p + j * 64u + i] = 0.0;
        }
    }
    storageBarrier();
    workgroupBarrier();

    // The first source tile of step 4 (k and Γ of channels 0..63), loaded during the solve.
    // Staging mapping: rows sm + 16 r (r < 4), vec4 column sq (16 lanes cover a 64-column row).
    let ntk = (K + 63u) / 64u;
    let ntv = (V4 + 63u) / 64u;
    let ntot = 2u * ntk + ntv;
    let sm = tid / 16u;
    let sq = tid % 16u;
    var r0 = src4(0u, sm, sq, t0, L, h, hv);
    var r1 = src4(0u, sm + 16u, sq, t0, L, h, hv);
    var r2 = src4(0u, sm + 32u, sq, t0, L, h, hv);
    var r3 = src4(0u, sm + 48u, sq, t0, L, h, hv);
    var g0 = gam4_at(0u, sm, sq, base_gam);
    var g1 = gam4_at(0u, sm + 16u, sq, base_gam);
    var g2 = gam4_at(0u, sm + 32u, sq, base_gam);
    var g3 = gam4_at(0u, sm + 48u, sq, base_gam);
    var e0 = vec4<f32>(0.0);
    var e1 = vec4<f32>(0.0);
    var e2 = vec4<f32>(0.0);
    var e3 = vec4<f32>(0.0);
    if (!KDA_STEP4_COOP) {
        e0 = dec4_at(0u, sm, sq, base_dec);
        e1 = dec4_at(0u, sm + 16u, sq, base_dec);
        e2 = dec4_at(0u, sm + 32u, sq, base_dec);
        e3 = dec4_at(0u, sm + 48u, sq, base_dec);
    }

    // 3. T = (I + A)^-1 (intra.wgsl), left as packed triangular Tᵀ in s_x
    solve_t(tid, L);

    // 4. One stream of 64 x 64 source tiles staged in s_at: W = T (β K e^Γ) (kind 0, which also
    //    writes kdec = k e^(Γ_last − Γ)), U = T (β V) (kind 1), qdecᵀ = (scale q e^Γ)ᵀ (kind 2, a
    //    transpose). The product gives each invocation a 4 x 4 block (rows 4 ty .., vec4 column
    //    tx); the next tile's raw values and Γ are loaded while the current one is used.
    //    Where the last prelude is kda_intra_coop.wgsl (KDA_STEP4_COOP), the same on cooperative
    //    matrices instead (kda_step4_coop).
    var ntiles = ntot;
    if (KDA_STEP4_COOP) {
        ntiles = 0u;
        kda_step4_coop(tid, t0, L, h, hv, base_gam, base_u, Src4(r0, r1, r2, r3),
            Src4(g0, g1, g2, g3), gam4_at(0u, last, sq, base_gam));
    }
    for (var tile = 0u; tile < ntiles; tile++) {
        var kind = 0u;
        var c0 = tile * 64u;
        if (tile >= ntk + ntv) {
            kind = 2u;
            c0 = (tile - ntk - ntv) * 64u;
        } else if (tile >= ntk) {
            kind = 1u;
            c0 = (tile - ntk) * 64u;
        }
        stage_src(kind, c0, sm, sq, r0, g0, e0, L, base_kd);
        stage_src(kind, c0, sm + 16u, sq, r1, g1, e1, L, base_kd);
        stage_src(kind, c0, sm + 32u, sq, r2, g2, e2, L, base_kd);
        stage_src(kind, c0, sm + 48u, sq, r3, g3, e3, L, base_kd);
        workgroupBarrier();
        let tn = min(tile + 1u, ntot - 1u);
        r0 = src4(tn, sm, sq, t0, L, h, hv);
        r1 = src4(tn, sm + 16u, sq, t0, L, h, hv);
        r2 = src4(tn, sm + 32u, sq, t0, L, h, hv);
        r3 = src4(tn, sm + 48u, sq, t0, L, h, hv);
        g0 = gam4_at(tn, sm, sq, base_gam);
        g1 = gam4_at(tn, sm + 16u, sq, base_gam);
        g2 = gam4_at(tn, sm + 32u, sq, base_gam);
        g3 = gam4_at(tn, sm + 48u, sq, base_gam);
        e0 = dec4_at(tn, sm, sq, base_dec);
        e1 = dec4_at(tn, sm + 16u, sq, base_dec);
        e2 = dec4_at(tn, sm + 32u, sq, base_dec);
        e3 = dec4_at(tn, sm + 48u, sq, base_dec);
        if (kind == 2u) {
            store_qd(base_qd, tid, c0);
        } else {
            let blk = t_product(ty, tx, L);
            if (kind == 0u) {
                store_w(base_w, ty, tx, c0, blk, L);
            } else {
                store_u(base_u, ty, tx, c0, blk, L);
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
        wsa[base_gl + d] = select(0.0, exp(wsa[base_gam + last * K + min(d, K - 1u)]), d < K);
    }
}

// kda_intra_coop.wgsl: the last prelude of the `coop` kernel's kda intra stage where the adapter
// has the workgroup memory for it (47,888 bytes: NVIDIA's 48 KiB; session 14). It replaces
// ws16_on.wgsl there (the same f16 workspace and P writer; this module has cooperative matrices,
// so ws16 is an f16 array written by the hardware conversion) and runs step 4 (W, U, qdec and
// kdec) on cooperative matrices, as gdn_intra_coop.wgsl's v6 does for gdn: on an adapter with
// less (lavapipe's 32 KiB, where CI emulates the coop kernel) the stage keeps ws16_on.wgsl and
// its f32 register-tile step 4.
//
// Step 4 (kda_step4_mma):
//   T (the solve's, intra.wgsl's t_at; PACK_T is false here) as f16 [64][64] in s_t16, then a
//   barrier; source tiles rows tid / 16 + 16 r, vec4 column tid % 16, the next tile's raw values
//   and Γ loaded during the current tile's products (the stage loads the first tile, k channels
//   0..63, during the solve):
//   W = T (β r_k e^Γ ⊙ K) over 64-channel tiles: the scaled rows as f16 into s_x16 [64][64],
//   kdec = r_k e^(Γ_last − Γ) ⊙ K staged f32 in s_at (free after the T copy) and stored as kdecᵀ
//   [K][64] f16 in whole rows; subgroup g takes rows 16 (g / 2) .., columns 32 (g % 2) + 16 j
//   (j < 2) with f16 accumulators stored straight into ws16 as W [64][K] (tiled: TILED);
//   U = T (β ⊙ V) over UW-column tiles (UW = 64 when 64 divides V, else 32), f32 accumulators
//   stored straight into wsu (f32, [64][V4]);
//   qdec = scale r_q e^Γ ⊙ q as f16 [64][K] (tiled) into ws16 from registers (no staging).
// Every exponent is Γ of a later row minus an earlier one, or Γ_i itself: never positive for log
// decays (as the f32 step 4). Rows >= L come out zero (T's unit rows, zeroed source rows).
// The products' inputs are rounded to f16 (T, the scaled rows), W's sums too (four k-steps):
// the tensor-core class of SPEC.md section 9, like gdn's coop stage.
//
// Needs K in {64, 128}, V a multiple of 32 (the host's coop rule), 256 invocations in subgroups
// of 32 consecutive local invocation indices (g = tid / 32, as gdn_intra_coop.wgsl). Every
// cooperative-matrix operation runs in workgroup-uniform control flow (loops over override
// constants; the stage calls kda_step4_mma under a constant test).
// Workgroup memory: the stage's 30,480 bytes (s_at 16,640, s_x 13,056, row arrays 768, s_meta
// 16) plus s_t16 8 KiB, s_x16 8 KiB and s_cz 1 KiB: 47,888 bytes.
//
// (A-operand offsets go through common.wgsl's a16_off / a16_tile: with TILED, the default, a
// permutation of the same [rows][columns] region, 16 x 16 tiles stored one after another, so the
// bounds below, stated for the row-major form, hold for both.)
// SAFETY (unchecked module): s_t16 indices 16 wi 64 + 16 k + r 64 + c < 4096, the zero block
// 16 + r 64 + c < 4096, idx < 4096; s_x16 m 64 + 4 q + 3 < 4096 (m < 64, q < 16) and
// (16 k + r) 64 + 32 wc + 16 j + c < 4096; s_at (kdec staging) (4 q + e) 65 + m <= 4158 < 4160
// and d 65 + mm + 1 <= 4158; s_cz r 16 + c < 256; ws16 halves in slot (c hvb + z) of
// ws16_slot(K, V): W (16 wi + r) K + c0 + 32 wc + 16 j + c < 64 K (c0 + 64 <= K), kdecᵀ 64 K +
// (c0 + d) 64 + mm + 1 < 128 K, qdec ws16_qd + m K + c0 + 4 q + 3 < ws16_p, P ws16_p + i 64 + j
// < ws16_p + 4096; wsu rows 16 wi + r < 64, columns c0 + 16 (nj wc + j) + c < c0 + UW <= V = V4;
// Γ reads wsa[base_gam + m K + d + 3] with d + 3 < K (m < 64; tiles < nw + nu + 2, K = 128 for
// the last); q/k/v through qk4_at / v4_at (zero past
// K, V and L).

@group(0) @binding(9) var<storage, read_write> ws16: array<f16>;
var<private> p_base16: u32;   // first half of this (chunk, head) slot in ws16 (set_base16)

var<workgroup> s_t16: array<f16, 4096>;   // T [64][64], row-major
var<workgroup> s_x16: array<f16, 4096>;   // scaled source tile [64][64], row-major
var<workgroup> s_cz: array<f32, 256>;     // a zero 16 x 16 tile: U's accumulators start from it

// Step 4's U tile width: 64 when 64 divides V, else 32 (the host sets it).
override UW: u32 = 64u;
// (The source tile is staged row-major and its B operands loaded row-major: a transposed tile
// loaded column-major measured slower on the H200, session 14's s14c: gdn intra 1.058 -> 1.171
// ms, kda 2.122 -> 2.248.)

fn set_base16(slot: u32) {
    p_base16 = slot * ws16_slot(HEAD_K, HEAD_V);
}

// (intra.wgsl's hooks of the f32 step 4, which this module's stage does not run: its kdec, W and
// qdec are kda_step4_mma's)
fn put_kdec16(m: u32, d0: u32, kd: vec4<f32>) -> bool {
    return true;
}

fn store_w16(g: u32, cq: u32, c0: u32, b: Blk, l: u32) -> bool {
    return true;
}

fn store_qd16_tile(tid: u32, c0: u32) -> bool {
    return true;
}

// P[i][j] as f16 (kda's put_ap and P's zeros).
fn put_p16(i: u32, j: u32, pv: f32) -> bool {
    ws16[p_base16 + ws16_p(HEAD_K) + a16_off(i, j, 64u)] = f16(pv);
    return true;
}

// solve_t (intra.wgsl) skips the packed triangular Tᵀ: step 4 takes its f16 T from s_at.
const PACK_T: bool = false;
// The stage runs kda_step4_mma instead of its f32 stream.
const KDA_MMA4: bool = true;

// Raw row m, columns 4 q .. 4 q + 3 of tile `tile`: k channels 64 tile .. (tile < K / 64), then
// v columns UW (tile − K / 64) .., then q channels 64 (tile − K / 64 − V / UW) ...
fn km_raw(tile: u32, m: u32, q: u32, t0: u32, l: u32, h: u32, hv: u32) -> vec4<f32> {
    let nw = HEAD_K / 64u;
    let nu = HEAD_V / UW;
    if (tile < nw) {
        return qk4_at(1u, m, 64u * tile + 4u * q, t0, l, h);
    }
    if (tile < nw + nu) {
        return v4_at(m, UW * (tile - nw) + 4u * q, t0, l, hv);
    }
    return qk4_at(0u, m, 64u * (tile - nw - nu) + 4u * q, t0, l, h);
}

// Γ[m][channels of tile `tile` at vec4 column q] for k and q tiles (zeros for v tiles): channels
// d .. d + 3 < K, as K is a multiple of 64 here, so four consecutive loads (no clamps).
fn km_gam(tile: u32, m: u32, q: u32, base_gam: u32) -> vec4<f32> {
    let nw = HEAD_K / 64u;
    let nu = HEAD_V / UW;
    var d = 64u * tile + 4u * q;
    if (tile >= nw + nu) {
        d = 64u * (tile - nw - nu) + 4u * q;
    } else if (tile >= nw) {
        return vec4<f32>(0.0);
    }
    let r = base_gam + m * HEAD_K + d;
    return vec4<f32>(wsa[r], wsa[r + 1u], wsa[r + 2u], wsa[r + 3u]);
}

// The raw values (rows tid / 16 + 16 r) of tile `tile`.
fn km_tile(tile: u32, tid: u32, t0: u32, l: u32, h: u32, hv: u32) -> Src4 {
    let sm = tid / 16u;
    let sq = tid % 16u;
    return Src4(km_raw(tile, sm, sq, t0, l, h, hv), km_raw(tile, sm + 16u, sq, t0, l, h, hv),
        km_raw(tile, sm + 32u, sq, t0, l, h, hv), km_raw(tile, sm + 48u, sq, t0, l, h, hv));
}

// Their Γ rows.
fn km_gtile(tile: u32, tid: u32, base_gam: u32) -> Src4 {
    let sm = tid / 16u;
    let sq = tid % 16u;
    return Src4(km_gam(tile, sm, sq, base_gam), km_gam(tile, sm + 16u, sq, base_gam),
        km_gam(tile, sm + 32u, sq, base_gam), km_gam(tile, sm + 48u, sq, base_gam));
}

// Scaled source row m, columns 4 q .. + 3 as f16 into s_x16 [64][64].
fn km_put_x16(m: u32, q: u32, x: vec4<f32>) {
    let o = m * 64u + 4u * q;
    s_x16[o] = f16(x.x);
    s_x16[o + 1u] = f16(x.y);
    s_x16[o + 2u] = f16(x.z);
    s_x16[o + 3u] = f16(x.w);
}

// One W-tile row: β r_k e^Γ k into s_x16 and kdec = r_k e^(Γ_last − Γ) k staged in s_at
// ([64 columns][65], zero for rows >= L).
fn km_stage_w(m: u32, q: u32, raw: vec4<f32>, g: vec4<f32>, gl: vec4<f32>, l: u32) {
    let live = m < l;
    km_put_x16(m, q, select(vec4<f32>(0.0), s_beta[m] * s_rk[m] * raw * exp(g), live));
    let kd = select(vec4<f32>(0.0), s_rk[m] * raw * exp(gl - g), live);
    let o = 4u * q * 65u + m;
    at_set(o, kd.x);
    at_set(o + 65u, kd.y);
    at_set(o + 130u, kd.z);
    at_set(o + 195u, kd.w);
}

// kdecᵀ rows c0 .. c0 + 63 from the staged tile: pair w = tid + 256 j, channel row w / 32,
// tokens 2 (w % 32) and + 1 (a warp stores a row's 64 consecutive halves).
fn km_store_kd16(tid: u32, c0: u32) {
    for (var j = 0u; j < 8u; j++) {
        let w = tid + 256u * j;
        let d = w / 32u;
        let mm = 2u * (w % 32u);
        let o = p_base16 + 64u * HEAD_K + a16_off(c0 + d, mm, 64u);
        ws16[o] = f16(at_get(d * 65u + mm));
        ws16[o + 1u] = f16(at_get(d * 65u + mm + 1u));
    }
}

// qdec row m, channels c0 + 4 q .. + 3 (row-major [64][K] f16): scale r_q e^Γ q, zero for rows
// >= L.
fn km_put_qd16(m: u32, q: u32, c0: u32, raw: vec4<f32>, g: vec4<f32>, l: u32) {
    let y = select(vec4<f32>(0.0), prm.scale * s_rq[m] * raw * exp(g), m < l);
    let o = p_base16 + ws16_qd(HEAD_K) + a16_off(m, c0 + 4u * q, HEAD_K);
    ws16[o] = f16(y.x);
    ws16[o + 1u] = f16(y.y);
    ws16[o + 2u] = f16(y.z);
    ws16[o + 3u] = f16(y.w);
}

// Step 4 on cooperative matrices; x, g: the first tile's raw values and Γ rows, gl: Γ_last of
// the invocation's vec4 column in that tile (the stage's r*, g*, gll).
fn kda_step4_mma(tid: u32, t0: u32, l: u32, h: u32, hv: u32, base_gam: u32, base_u: u32,
    x0: Src4, g0: Src4, gl0: vec4<f32>) {
    let sg = tid / 32u;
    let wi = sg / 2u;
    let wc = sg % 2u;
    let sm = tid / 16u;
    let sq = tid % 16u;
    let nw = HEAD_K / 64u;
    let nu = HEAD_V / UW;
    let nj = UW / 32u;
    let V4 = k4(HEAD_V);
    let last = max(l, 1u) - 1u;
    // T as f16 (T[i][m'] at s_at[m'][i]; the solve ended with a barrier) and the zero tile; then
    // a barrier: the first tile's kdec staging overwrites s_at
    for (var idx = tid; idx < 4096u; idx += 256u) {
        s_t16[idx] = f16(t_at(idx / 64u, idx % 64u, l));
    }
    s_cz[tid] = 0.0;
    workgroupBarrier();
    var x = x0;
    var g = g0;
    var gl = gl0;
    // (W and U in two loops: a test on the tile counter would be non-uniform to naga)
    for (var tile = 0u; tile < nw; tile++) {
        let c0 = 64u * tile;
        km_stage_w(sm, sq, x.r0, g.r0, gl, l);
        km_stage_w(sm + 16u, sq, x.r1, g.r1, gl, l);
        km_stage_w(sm + 32u, sq, x.r2, g.r2, gl, l);
        km_stage_w(sm + 48u, sq, x.r3, g.r3, gl, l);
        workgroupBarrier();
        // the next tile's raw values and Γ (after the last k tile: the first v tile, no Γ)
        x = km_tile(tile + 1u, tid, t0, l, h, hv);
        g = km_gtile(tile + 1u, tid, base_gam);
        gl = km_gam(tile + 1u, last, sq, base_gam);
        // f16 accumulators from T's zero block (rows 0..15, columns 16..31), stored straight
        // into ws16 as W [64][K]
        var a0 = coopLoadT<coop_mat16x16<f16, C>>(&s_t16[16u], 64u);
        var a1 = a0;
        for (var k = 0u; k < 4u; k++) {
            let a = coopLoadT<coop_mat16x16<f16, A>>(&s_t16[16u * wi * 64u + 16u * k], 64u);
            let b0 = coopLoadT<coop_mat16x16<f16, B>>(&s_x16[16u * k * 64u + 32u * wc], 64u);
            let b1 = coopLoadT<coop_mat16x16<f16, B>>(
                &s_x16[16u * k * 64u + 32u * wc + 16u], 64u);
            a0 = coopMultiplyAdd(a, b0, a0);
            a1 = coopMultiplyAdd(a, b1, a1);
        }
        // (offsets named first: naga 30's SPIR-V writer panicked on an index expression inside
        // a coopStore call)
        let wo = p_base16 + a16_tile(wi, c0 / 16u + 2u * wc, HEAD_K);
        let wo1 = p_base16 + a16_tile(wi, c0 / 16u + 2u * wc + 1u, HEAD_K);
        if ((PROBE & 2048u) != 0u) {
            // (probe: into workgroup memory instead, racing the products' reads)
            coopStoreT(a0, &s_x16[0], 64u);
            coopStoreT(a1, &s_x16[16], 64u);
        } else if ((PROBE & (1024u | 4096u)) == 0u) {
            let wst = a16_ld(HEAD_K);
            coopStoreT(a0, &ws16[wo], wst);
            coopStoreT(a1, &ws16[wo1], wst);
        }
        if ((PROBE & 256u) == 0u) {
            km_store_kd16(tid, c0);
        }
        workgroupBarrier();
    }
    for (var tile = 0u; tile < nu; tile++) {
        let c0 = UW * tile;
        km_put_x16(sm, sq, s_beta[sm] * x.r0);
        km_put_x16(sm + 16u, sq, s_beta[sm + 16u] * x.r1);
        km_put_x16(sm + 32u, sq, s_beta[sm + 32u] * x.r2);
        km_put_x16(sm + 48u, sq, s_beta[sm + 48u] * x.r3);
        workgroupBarrier();
        // the next tile (after the last v tile: the first q tile and its Γ)
        x = km_tile(nw + tile + 1u, tid, t0, l, h, hv);
        g = km_gtile(nw + tile + 1u, tid, base_gam);
        var u0 = coopLoadT<coop_mat16x16<f32, C>>(&s_cz[0], 16u);
        var u1 = u0;
        for (var k = 0u; k < 4u; k++) {
            let a = coopLoadT<coop_mat16x16<f16, A>>(&s_t16[16u * wi * 64u + 16u * k], 64u);
            let b0 = coopLoadT<coop_mat16x16<f16, B>>(
                &s_x16[16u * k * 64u + 16u * nj * wc], 64u);
            u0 = coopMultiplyAdd(a, b0, u0);
            if (UW == 64u) {
                let b1 = coopLoadT<coop_mat16x16<f16, B>>(
                    &s_x16[16u * k * 64u + 32u * wc + 16u], 64u);
                u1 = coopMultiplyAdd(a, b1, u1);
            }
        }
        let uo = base_u + 16u * wi * V4 + c0 + 16u * nj * wc;
        if ((PROBE & 2048u) != 0u) {
            coopStoreT(u0, &s_cz[0], 16u);
            coopStoreT(u1, &s_cz[0], 16u);
        } else if ((PROBE & (1024u | 8192u)) == 0u) {
            coopStoreT(u0, &wsu[uo], V4);
            if (UW == 64u) {
                let uo1 = uo + 16u;
                coopStoreT(u1, &wsu[uo1], V4);
            }
        }
        workgroupBarrier();
    }
    // qdec: the first q tile from the prefetch, the second (K = 128) loaded here
    // (the second tile's loads issued before the first tile's stores)
    if ((PROBE & 512u) == 0u) {
        let y = km_tile(min(nw + nu + 1u, nw + nu + nw - 1u), tid, t0, l, h, hv);
        let gy = km_gtile(min(nw + nu + 1u, nw + nu + nw - 1u), tid, base_gam);
        km_put_qd16(sm, sq, 0u, x.r0, g.r0, l);
        km_put_qd16(sm + 16u, sq, 0u, x.r1, g.r1, l);
        km_put_qd16(sm + 32u, sq, 0u, x.r2, g.r2, l);
        km_put_qd16(sm + 48u, sq, 0u, x.r3, g.r3, l);
        if (HEAD_K == 128u) {
            km_put_qd16(sm, sq, 64u, y.r0, gy.r0, l);
            km_put_qd16(sm + 16u, sq, 64u, y.r1, gy.r1, l);
            km_put_qd16(sm + 32u, sq, 64u, y.r2, gy.r2, l);
            km_put_qd16(sm + 48u, sq, 64u, y.r3, gy.r3, l);
        }
    }
}

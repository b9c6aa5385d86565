// kda_intra_coop.wgsl: the last prelude of the `coop` kernel's kda intra stage where the adapter
// has the workgroup memory for it (47,888 bytes: NVIDIA's 48 KiB): after intra_workspace_f16.wgsl
// and intra_coop.wgsl, step 4 (W, U, qdec and kdec) runs on cooperative matrices, as
// gdn_intra_coop.wgsl's does for gdn. On an adapter with less (lavapipe's 32 KiB, where CI
// emulates the coop kernel) the stage takes kda_intra_workspace_f16.wgsl and its f32 step 4
// instead. Measured on the H200 (kda 32/32 1 x 8192): intra pass 2.197 -> 2.132 ms, call
// 3.147 -> 3.080 ms against the f32 step 4.
//
// Step 4 (kda_step4_coop):
//   T (the solve's, intra.wgsl's t_at; PACK_T is false here) as f16 [64][64] in s_t16, then a
//   barrier; source tiles rows tid / 16 + 16 r, vec4 column tid % 16, the next tile's raw values
//   and Γ loaded during the current tile's products (the stage loads the first tile, k channels
//   0..63, during the solve):
//   W = T (β r_k e^Γ ⊙ K) over 64-channel tiles: the scaled rows as f16 into s_x16, kdec =
//   r_k e^(Γ_last − Γ) ⊙ K staged f32 in s_at (free after the T copy), then intra_coop.wgsl's
//   w_tile_product (W and kdecᵀ into ws16);
//   U = T (β ⊙ V) over UW-column tiles (UW = 64 when 64 divides V, else 32), f32 accumulators
//   stored straight into wsu (f32, [64][V4]);
//   qdec = scale r_q e^Γ ⊙ q as f16 tiles into ws16 from registers (no staging).
// Every exponent is Γ of a later row minus an earlier one, or Γ_i itself: never positive for log
// decays (as the f32 step 4). Rows >= L come out zero (T's unit rows, zeroed source rows).
// The products' inputs are rounded to f16 (T, the scaled rows), W's sums too (four k-steps):
// the tensor-core class of the numerical contract (docs/spec.md), like gdn's coop stage.
//
// Needs K in {64, 128}, V a multiple of 32 (the host's coop rule), 256 invocations in subgroups
// of 32 consecutive local invocation indices (g = tid / 32, as gdn_intra_coop.wgsl). Every
// cooperative-matrix operation runs in workgroup-uniform control flow (loops over override
// constants; the stage calls kda_step4_coop under a constant test).
// Workgroup memory: the stage's 30,480 bytes (s_at 16,640, s_x 13,056, row arrays 768, s_meta
// 16) plus s_t16 8 KiB, s_x16 8 KiB and s_cz 1 KiB: 47,888 bytes.
//
// SAFETY (unchecked module): s_cz r 16 + c < 256; the rest of step 4's workgroup and ws16 indices
// as intra_coop.wgsl; qdec ws16_qd + m K + c0 + 4 q + 3 < ws16_p (row-major bounds; the tiles
// permute the region); wsu rows 16 wi + r < 64, columns c0 + 16 (nj wc + j) + c < c0 + UW <=
// V = V4; Γ reads wsa[base_gam + m K + d + 3] with d + 3 < K (m < 64; tiles < nw + nu + 2,
// K = 128 for the last); q/k/v through qk4_at / v4_at (zero past K, V and L).

var<workgroup> s_cz: array<f32, 256>;     // a zero 16 x 16 tile: U's accumulators start from it

// The stage runs kda_step4_coop instead of its f32 stream.
const KDA_STEP4_COOP: bool = true;

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

// One W-tile row: β r_k e^Γ k into s_x16 and kdec = r_k e^(Γ_last − Γ) k staged in s_at
// (zero for rows >= L).
fn km_stage_w(m: u32, q: u32, raw: vec4<f32>, g: vec4<f32>, gl: vec4<f32>, l: u32) {
    let live = m < l;
    put_x16(m, q, select(vec4<f32>(0.0), s_beta[m] * s_rk[m] * raw * exp(g), live));
    put_kd(m, q, select(vec4<f32>(0.0), s_rk[m] * raw * exp(gl - g), live));
}

// qdec row m, channels c0 + 4 q .. + 3 (f16 tiles): scale r_q e^Γ q, zero for rows >= L.
fn km_put_qd16(m: u32, q: u32, c0: u32, raw: vec4<f32>, g: vec4<f32>, l: u32) {
    let y = select(vec4<f32>(0.0), prm.scale * s_rq[m] * raw * exp(g), m < l);
    let o = p_base16 + ws16_qd(HEAD_K) + tiled_off(m, c0 + 4u * q, HEAD_K);
    ws16[o] = f16(y.x);
    ws16[o + 1u] = f16(y.y);
    ws16[o + 2u] = f16(y.z);
    ws16[o + 3u] = f16(y.w);
}

// Step 4 on cooperative matrices; x, g: the first tile's raw values and Γ rows, gl: Γ_last of
// the invocation's vec4 column in that tile (the stage's r*, g*, gll).
fn kda_step4_coop(tid: u32, t0: u32, l: u32, h: u32, hv: u32, base_gam: u32, base_u: u32,
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
    // T as f16 (the solve ended with a barrier) and the zero tile; then a barrier: the first
    // tile's kdec staging overwrites s_at
    t_to_f16(tid, l);
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
        w_tile_product(tid, wi, wc, c0);
        workgroupBarrier();
    }
    for (var tile = 0u; tile < nu; tile++) {
        let c0 = UW * tile;
        put_x16(sm, sq, s_beta[sm] * x.r0);
        put_x16(sm + 16u, sq, s_beta[sm + 16u] * x.r1);
        put_x16(sm + 32u, sq, s_beta[sm + 32u] * x.r2);
        put_x16(sm + 48u, sq, s_beta[sm + 48u] * x.r3);
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
        coopStoreT(u0, &wsu[uo], V4);
        if (UW == 64u) {
            let uo1 = uo + 16u;
            coopStoreT(u1, &wsu[uo1], V4);
        }
        workgroupBarrier();
    }
    // qdec: the first q tile from the prefetch, the second (K = 128) loaded here
    // (the second tile's loads issued before the first tile's stores)
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

// gdn_intra_coop.wgsl: steps 2 and 4 of the gdn intra stage on cooperative matrices, the last
// prelude of the `coop` kernel's gdn intra stage (after intra_workspace_f16.wgsl and
// intra_coop.wgsl; gdn_intra_f32.wgsl is the f32 version and says what the steps compute).
// 16 x 16 x 16 tiles, f16 operands, f32 accumulation (W: f16).
//
// Step 2: K Kᵀ and Q Kᵀ over 32-channel blocks of raw k and q rows staged as f16 in s_t16 (k
// [64][32] at 0, q at 2048; invocation tid stages row tid / 4, channels 8 (tid % 4) .. + 7 and
// sums their squares in f32 from the raw values); subgroup g keeps four accumulators: rows
// 16 (g / 2) .., columns 32 (g % 2) + 16 h (h < 2) of both products (Kᵀ read column-major from
// the staged k rows). They leave through s_cw in four passes of one tile per subgroup ([64][32],
// local columns 16 (g % 2) ..), each invocation taking its 4 x 4 blocks in the pass that holds
// their columns. The whole 64 x 64 products are formed (the f32 version skips the upper
// triangle); put_ap masks them.
//
// Step 4 (9 barriers at K = V = 128):
//   T (from the solve, intra.wgsl's t_at) as f16 [64][64] in s_t16, once, then a barrier;
//   one stream of source tiles, rows tid / 16 + 16 r, vec4 column tid % 16 (raw_tile), the next
//   tile's raw values loaded during the current tile's products:
//   W = T (β r_k e^Γ ⊙ K) over 64-channel tiles: the scaled rows as f16 into s_x16, kdec =
//   r_k e^(Γ_last − Γ) ⊙ K staged f32 in s_at (free after the T copy), then intra_coop.wgsl's
//   w_tile_product (W and kdecᵀ into ws16);
//   U = T (β ⊙ V) over UW-column tiles (UW = 64 when 64 divides V, else 32: the host's override)
//   with f32 accumulators stored straight into wsu (f32, row-major [64][V4]);
//   qdec = scale r_q e^Γ ⊙ q written as f16 tiles into ws16 from the raw q values (no staging,
//   no barrier: the first q tile is the stream's last prefetch). P is put_p's.
// Rows >= L come out zero: T's rows there are unit rows and the scaled source rows are zero.
// The products' inputs are rounded to f16 (T, and the scaled k / v rows), like the coop state
// pass; |raw k|, |raw v| above 65504 would overflow. qdec and P are not written in f32 (wsa's
// regions for them stay unused).
//
// Needs K in {64, 128} and V a multiple of 32 (the host's coop rule), 256 invocations whose
// subgroups of 32 are consecutive local invocation indices (Gpu::coop requires subgroup size 32;
// the stage's entry point has no subgroup_id builtin, which the f32 variant could not take
// without the subgroup feature, so g = tid / 32: NVIDIA's warps, the only adapter with
// cooperative matrices here). Every cooperative-matrix operation runs in workgroup-uniform
// control flow (loops and tests over override constants and the tile counter).
// Workgroup memory: the stage's s_at 16,640 bytes, its s_x 4,096 (SX_VEC4 = 256 here: only the
// solve's scratch, < 1024 scalars), row arrays 1,792 and s_meta 16, plus s_t16 8 KiB, s_x16
// 8 KiB, s_cw 9 KiB: 48,144 bytes in all, under NVIDIA's 48 KiB. The stage's chunk-range
// variable is 16 bytes: at 8 bytes both products came out wrong on the H200 (and right as
// scalar sums over the same operands), as in the state pass.
//
// SAFETY (unchecked module): s_t16 indices in step 2: staging m 32 + cq + 7 < 2048 (+ 2048 for
// q), tiles 2048 + 16 wi 32 + 16 kk + r 32 + c and (32 wc + 16 + c) 32 + 16 kk + r < 4096; its
// s_cw partial sums < 512, passes 16 wi 32 + 16 wc + r 32 + c < 2048 and reads
// 4 ty 32 + lc + 99 < 2048 (ty < 16, lc <= 28); zero tile s_cw 2048 + r 16 + c < 2304; the rest
// of step 4's workgroup and ws16 indices as intra_coop.wgsl; qdec ws16_qd + m K + c0 + 4 q + 3 <
// ws16_p (c0 + 64 <= K, row-major bounds; the tiles permute the region); wsu rows 16 wi + r < 64,
// columns c0 + 16 (nj wc + j) + c < c0 + UW <= V = V4; q/k/v loads through qk4_at / v4_at
// (intra.wgsl: zero past K, V and L).

// The stage's s_x (gdn_prefill_intra.wgsl) holds only the solve's scratch here.
const SX_VEC4: u32 = 256u;

var<workgroup> s_cw: array<f32, 2304>;    // step 2's passes [64][32], then a zero 16 x 16 tile

// P[i][j] (the stage's put_ap; no f32 copy: the state pass's o products read this one).
fn put_p(base_p: u32, i: u32, j: u32, pv: f32) {
    _ = put_p16(i, j, pv);
}

// Step 2's first block (channels 0..31): k row tid / 4, channels 8 (tid % 4) .. in a, b; q in
// c, d.
fn gdn_dots_first(tid: u32, t0: u32, l: u32, h: u32) -> Pre2 {
    let m = tid / 4u;
    let cq = 8u * (tid % 4u);
    return Pre2(qk4_at(1u, m, cq, t0, l, h), qk4_at(1u, m, cq + 4u, t0, l, h),
        qk4_at(0u, m, cq, t0, l, h), qk4_at(0u, m, cq + 4u, t0, l, h));
}

// Eight f16 of row m, columns cq .. cq + 7 of the [64][32] block at s_t16[base].
fn put_t16(base: u32, m: u32, cq: u32, a: vec4<f32>, b: vec4<f32>) {
    let o = base + m * 32u + cq;
    s_t16[o] = f16(a.x);
    s_t16[o + 1u] = f16(a.y);
    s_t16[o + 2u] = f16(a.z);
    s_t16[o + 3u] = f16(a.w);
    s_t16[o + 4u] = f16(b.x);
    s_t16[o + 5u] = f16(b.y);
    s_t16[o + 6u] = f16(b.z);
    s_t16[o + 7u] = f16(b.w);
}

fn cw4(o: u32) -> vec4<f32> {
    return vec4<f32>(s_cw[o], s_cw[o + 1u], s_cw[o + 2u], s_cw[o + 3u]);
}

fn gdn_dots(tid: u32, t0: u32, l: u32, h: u32, pre: Pre2) -> Dots {
    let sg = tid / 32u;
    let wi = sg / 2u;
    let wc = sg % 2u;
    let m = tid / 4u;
    let cq = 8u * (tid % 4u);
    s_cw[2048u + tid] = 0.0;
    // (the zero tile is read right below: a barrier first; without it K = 64 gives wrong,
    // run-to-run different sums on the H200)
    workgroupBarrier();
    var p = pre;
    var ssk = 0.0;
    var ssq = 0.0;
    var kk_a = coopLoadT<coop_mat16x16<f32, C>>(&s_cw[2048u], 16u);
    var kk_b = kk_a;
    var qk_a = kk_a;
    var qk_b = kk_a;
    for (var d0 = 0u; d0 < HEAD_K; d0 += 32u) {
        ssk += dot(p.a, p.a) + dot(p.b, p.b);
        ssq += dot(p.c, p.c) + dot(p.d, p.d);
        put_t16(0u, m, cq, p.a, p.b);
        put_t16(2048u, m, cq, p.c, p.d);
        workgroupBarrier();
        let dn = d0 + 32u + cq;
        p = Pre2(qk4_at(1u, m, dn, t0, l, h), qk4_at(1u, m, dn + 4u, t0, l, h),
            qk4_at(0u, m, dn, t0, l, h), qk4_at(0u, m, dn + 4u, t0, l, h));
        for (var kk = 0u; kk < 2u; kk++) {
            let ak = coopLoadT<coop_mat16x16<f16, A>>(&s_t16[16u * wi * 32u + 16u * kk], 32u);
            let aq = coopLoadT<coop_mat16x16<f16, A>>(
                &s_t16[2048u + 16u * wi * 32u + 16u * kk], 32u);
            let b0 = coopLoad<coop_mat16x16<f16, B>>(&s_t16[32u * wc * 32u + 16u * kk], 32u);
            let b1 = coopLoad<coop_mat16x16<f16, B>>(
                &s_t16[(32u * wc + 16u) * 32u + 16u * kk], 32u);
            kk_a = coopMultiplyAdd(ak, b0, kk_a);
            kk_b = coopMultiplyAdd(ak, b1, kk_b);
            qk_a = coopMultiplyAdd(aq, b0, qk_a);
            qk_b = coopMultiplyAdd(aq, b1, qk_b);
        }
        workgroupBarrier();
    }
    // summed squares: four partial sums per row (k at 0, q at 256), added by invocations < 128
    s_cw[tid] = ssk;
    s_cw[256u + tid] = ssq;
    workgroupBarrier();
    var r = Dots(vec4<f32>(0.0), vec4<f32>(0.0), vec4<f32>(0.0), vec4<f32>(0.0),
        vec4<f32>(0.0), vec4<f32>(0.0), vec4<f32>(0.0), vec4<f32>(0.0), 0.0);
    if (tid < 128u) {
        let o = select(0u, 256u, tid >= 64u) + 4u * (tid % 64u);
        r.ss = s_cw[o] + s_cw[o + 1u] + s_cw[o + 2u] + s_cw[o + 3u];
    }
    workgroupBarrier();
    // the four passes: (K Kᵀ, Q Kᵀ) x (column half 0, 1) of each subgroup's columns
    let ty = tid / 16u;
    let tx = tid % 16u;
    let gb = tx / 4u;                          // 16-column block of this invocation's columns
    let lc = 16u * (gb / 2u) + 4u * (tx % 4u); // their local column in a pass
    let rb = 4u * ty * 32u + lc;
    let so = 16u * wi * 32u + 16u * wc;        // (named: see the W store in gdn_step4)
    coopStoreT(kk_a, &s_cw[so], 32u);
    workgroupBarrier();
    if (gb % 2u == 0u) {
        r.kk0 = cw4(rb);
        r.kk1 = cw4(rb + 32u);
        r.kk2 = cw4(rb + 64u);
        r.kk3 = cw4(rb + 96u);
    }
    workgroupBarrier();
    coopStoreT(kk_b, &s_cw[so], 32u);
    workgroupBarrier();
    if (gb % 2u == 1u) {
        r.kk0 = cw4(rb);
        r.kk1 = cw4(rb + 32u);
        r.kk2 = cw4(rb + 64u);
        r.kk3 = cw4(rb + 96u);
    }
    workgroupBarrier();
    coopStoreT(qk_a, &s_cw[so], 32u);
    workgroupBarrier();
    if (gb % 2u == 0u) {
        r.qk0 = cw4(rb);
        r.qk1 = cw4(rb + 32u);
        r.qk2 = cw4(rb + 64u);
        r.qk3 = cw4(rb + 96u);
    }
    workgroupBarrier();
    coopStoreT(qk_b, &s_cw[so], 32u);
    workgroupBarrier();
    if (gb % 2u == 1u) {
        r.qk0 = cw4(rb);
        r.qk1 = cw4(rb + 32u);
        r.qk2 = cw4(rb + 64u);
        r.qk3 = cw4(rb + 96u);
    }
    return r;
}

// Raw row m, columns 4 q .. 4 q + 3 of step 4's source tile `tile`: k channels 64 tile ..
// for tile < K / 64, then v columns UW (tile − K / 64) .. (UW-wide U tiles; a 32-wide tile's
// staged columns 32..63 are the next tile's or zeros past V, staged and never used), then q
// channels 64 (tile − K / 64 − V / UW) .. (the qdec tiles, from registers).
fn raw64(tile: u32, m: u32, q: u32, t0: u32, l: u32, h: u32, hv: u32) -> vec4<f32> {
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

// Tile `tile` of the stream for rows tid / 16 + 16 r (r < 4, the fields), vec4 column tid % 16
// (16 lanes load a 64-column row's 128 or 256 contiguous bytes).
fn raw_tile(tile: u32, tid: u32, t0: u32, l: u32, h: u32, hv: u32) -> Src4 {
    let sm = tid / 16u;
    let sq = tid % 16u;
    return Src4(raw64(tile, sm, sq, t0, l, h, hv), raw64(tile, sm + 16u, sq, t0, l, h, hv),
        raw64(tile, sm + 32u, sq, t0, l, h, hv), raw64(tile, sm + 48u, sq, t0, l, h, hv));
}

// The first source tile (k channels 0..63), loaded by the stage during the solve.
fn gdn_step4_first(tid: u32, t0: u32, l: u32, h: u32, hv: u32) -> Src4 {
    return raw_tile(0u, tid, t0, l, h, hv);
}

// qdec row m, channels c0 + 4 q .. + 3 (f16 tiles, the A operand of o's q·h) straight from the
// raw q values: no staging (16 lanes store 64 channels of a row).
fn put_qd16(m: u32, q: u32, c0: u32, x: vec4<f32>) {
    let y = s_fq[m] * x;
    let o = p_base16 + ws16_qd(HEAD_K) + tiled_off(m, c0 + 4u * q, HEAD_K);
    ws16[o] = f16(y.x);
    ws16[o + 1u] = f16(y.y);
    ws16[o + 2u] = f16(y.z);
    ws16[o + 3u] = f16(y.w);
}

fn gdn_step4(tid: u32, t0: u32, l: u32, h: u32, hv: u32, base_w: u32, base_kd: u32,
    base_qd: u32, base_u: u32, pre: Src4) {
    let sg = tid / 32u;
    let wi = sg / 2u;
    let wc = sg % 2u;
    let sm = tid / 16u;
    let sq = tid % 16u;
    let nw = HEAD_K / 64u;
    let nu = HEAD_V / UW;
    let nj = UW / 32u;   // U output tiles per subgroup (W: 2)
    let V4 = k4(HEAD_V);
    // T as f16 (the solve ended with a barrier) and the f32 zero tile; then a barrier: the first
    // tile's kdec staging overwrites s_at
    t_to_f16(tid, l);
    s_cw[2048u + tid] = 0.0;
    workgroupBarrier();
    // (two loops, not one with a test on the tile counter: naga's uniformity analysis counts a
    // local variable's value as non-uniform, and matrix operations need uniform control flow)
    var x = pre;
    for (var tile = 0u; tile < nw; tile++) {
        // stage: β r_k e^Γ k rows as f16; kdec = r_k e^(Γ_last − Γ) k into s_at
        let c0 = 64u * tile;
        put_kd(sm, sq, s_fd[sm] * x.r0);
        put_kd(sm + 16u, sq, s_fd[sm + 16u] * x.r1);
        put_kd(sm + 32u, sq, s_fd[sm + 32u] * x.r2);
        put_kd(sm + 48u, sq, s_fd[sm + 48u] * x.r3);
        put_x16(sm, sq, s_fk[sm] * x.r0);
        put_x16(sm + 16u, sq, s_fk[sm + 16u] * x.r1);
        put_x16(sm + 32u, sq, s_fk[sm + 32u] * x.r2);
        put_x16(sm + 48u, sq, s_fk[sm + 48u] * x.r3);
        workgroupBarrier();
        // the next tile's raw values load during the products
        x = raw_tile(tile + 1u, tid, t0, l, h, hv);
        w_tile_product(tid, wi, wc, c0);
        workgroupBarrier();
    }
    for (var tile = 0u; tile < nu; tile++) {
        // stage: β v rows as f16
        let c0 = UW * tile;
        put_x16(sm, sq, s_beta[sm] * x.r0);
        put_x16(sm + 16u, sq, s_beta[sm + 16u] * x.r1);
        put_x16(sm + 32u, sq, s_beta[sm + 32u] * x.r2);
        put_x16(sm + 48u, sq, s_beta[sm + 48u] * x.r3);
        workgroupBarrier();
        // the next tile's raw values (after the last U tile: the first qdec tile)
        x = raw_tile(nw + tile + 1u, tid, t0, l, h, hv);
        // f32 accumulators stored straight into wsu (f32, row-major [64][V4])
        var u0 = coopLoadT<coop_mat16x16<f32, C>>(&s_cw[2048u], 16u);
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
    // qdec = scale r_q e^Γ q: the first tile from the prefetch, the second (K = 128) loaded here
    // (the second tile's loads issued before the first tile's stores)
    let y = raw_tile(min(nw + nu + 1u, nw + nu + nw - 1u), tid, t0, l, h, hv);
    put_qd16(sm, sq, 0u, x.r0);
    put_qd16(sm + 16u, sq, 0u, x.r1);
    put_qd16(sm + 32u, sq, 0u, x.r2);
    put_qd16(sm + 48u, sq, 0u, x.r3);
    if (HEAD_K == 128u) {
        put_qd16(sm, sq, 64u, y.r0);
        put_qd16(sm + 16u, sq, 64u, y.r1);
        put_qd16(sm + 32u, sq, 64u, y.r2);
        put_qd16(sm + 48u, sq, 64u, y.r3);
    }
}

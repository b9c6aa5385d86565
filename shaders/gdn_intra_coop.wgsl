// gdn_intra_coop.wgsl: steps 2 and 4 of the gdn intra stage on cooperative matrices, the last
// prelude of the `coop` kernel's gdn intra stage (after ws16_gdn.wgsl; gdn_intra_f32.wgsl is the
// f32 version and says what the steps compute). 16 x 16 x 16 tiles, f16 operands, f32
// accumulation.
//
// Step 2: K Kᵀ and Q Kᵀ over 32-channel blocks of raw k and q rows staged as f16 in s_t16 (k
// [64][32] at 0, q at 2048; invocation tid stages row tid / 4, channels 8 (tid % 4) .. + 7 and
// sums their squares in f32 from the raw values); subgroup g keeps four accumulators: rows
// 16 (g / 2) .., columns 32 (g % 2) + 16 h (h < 2) of both products (Kᵀ read column-major from
// the staged k rows). They leave through s_cw in four passes of one tile per subgroup ([64][32],
// local columns 16 (g % 2) ..), each invocation taking its 4 x 4 blocks in the pass that holds
// their columns. The whole 64 x 64 products are formed (the f32 version skips the upper
// triangle); put_ap masks them as before.
//
// Step 4:
//   T (from the solve, intra.wgsl's t_at) as f16 [64][64] in s_t16, once;
//   W = T (β r_k e^Γ ⊙ K) over source tiles of 32 channels: the scaled rows as f16 into s_x16
//   (kdec = r_k e^(Γ_last − Γ) ⊙ K goes to ws16 from the same raw values), subgroup g's
//   16 x 16 tile of the [64][32] product (rows 16 (g / 2) .., columns 16 (g % 2) ..), four
//   k-steps, stored row-major into s_cw, then W as f16 into ws16 (row-major [64][K], the state
//   pass's A operand layout; Wᵀ before session 13);
//   U = T (β ⊙ V) the same way, stored straight into wsu (f32, row-major [64][V4]);
//   qdec staged f32 in s_at as in the f32 version (the coop variant does not need s_at for T),
//   written row-major as f16 into ws16 (P too, ws16_gdn.wgsl): the A operands of o's products.
// Rows >= L come out zero: T's rows there are unit rows and the scaled source rows are zero.
// The products' inputs are rounded to f16 (T, and the scaled k / v rows): the tensor-core class
// of SPEC.md section 9, like the coop state pass; |raw k|, |raw v| above 65504 would overflow.
//
// qdec and P are not written in f32 (wsa's regions for them stay unused).
// Needs K in {64, 128} and V a multiple of 32 (the host's coop rule), 256 invocations whose
// subgroups of 32 are consecutive local invocation indices (Gpu::coop requires subgroup size 32;
// the stage's entry point has no subgroup_id builtin, which the f32 variant could not take
// without the subgroup feature, so g = tid / 32: NVIDIA's warps, the only adapter with
// cooperative matrices here). Every cooperative-matrix operation runs in workgroup-uniform
// control flow (loops over override constants; the stage calls gdn_step4 under an override test).
// Workgroup memory added to the stage's 27 KiB: s_t16 8 KiB, s_x16 4 KiB, s_cw 9 KiB (48,656
// bytes in all, under NVIDIA's 48 KiB). The stage's 8-byte chunk-range variable became 16 bytes
// with this file: with it at 8 bytes both products were wrong on the H200 (and right as scalar
// sums over the same operands, PROBE 32 | 64), as in the state pass in session 3.
//
// SAFETY (unchecked module): s_t16 indices 16 wi 64 + 16 k + r 64 + c < 4096 (wi, k < 4;
// r, c < 16) and idx < 4096; step 2's staging m 32 + cq + 7 < 2048 (+ 2048 for q) and its tiles
// 2048 + 16 wi 32 + 16 kk + r 32 + c, (32 wc + 16 + c) 32 + 16 kk + r < 4096; its s_cw partial
// sums < 512, passes 16 wi 32 + 16 wc + r 32 + c < 2048 and reads 4 ty 32 + lc + 99 < 2048
// (ty < 16, lc <= 28); s_x16 (16 k + r) 32 + 16 wc + c < 2048 and m 32 + cq + 7 < 2048
// (m < 64, cq <= 24); s_cw (16 wi + r) 32 + 16 wc + c < 2048, zero tile 2048 + r 16 + c < 2304,
// W reads i 32 + d + 1 < 2048 (i < 64, d <= 30); ws16 halves in slot (c hvb + z): W
// i K + c0 + d + 1 < 64 K (c0 + 31 < K), qdec ws16_qd + i K + c0 + 4 q + 3 < ws16_p, the rest as
// ws16_gdn.wgsl; wsu rows 16 wi + r < 64,
// columns c0 + 16 wc + c < V = V4 (V a multiple of 32); kdec through put_kdec (d0 + 7 < K);
// q/k/v loads through qk_at / v_at / src4 (intra.wgsl).

var<workgroup> s_t16: array<f16, 4096>;   // T [64][64], row-major
var<workgroup> s_x16: array<f16, 2048>;   // scaled source tile [64][32], row-major
var<workgroup> s_cw: array<f32, 2304>;    // W tile row-major [64][32], then a zero 16 x 16 tile

// Raw row m, columns c .. c + 3 of source tile `tile`: k channels 32 tile .. for tile < K / 32,
// then v columns 32 (tile − K / 32) ...
fn coop_raw(tile: u32, m: u32, c: u32, t0: u32, l: u32, h: u32, hv: u32) -> vec4<f32> {
    let nw = HEAD_K / 32u;
    if (tile < nw) {
        return qk4_at(1u, m, 32u * tile + c, t0, l, h);
    }
    return v4_at(m, 32u * (tile - nw) + c, t0, l, hv);
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
    // (the zero tile is read right below: a barrier first; without it K = 64 gave wrong,
    // run-to-run different sums on the H200, session 8)
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

// The first source tile (k channels 0..31): row tid / 4, columns 8 (tid % 4) .. + 7 in r0, r1.
fn gdn_step4_first(tid: u32, t0: u32, l: u32, h: u32, hv: u32) -> Src4 {
    let m = tid / 4u;
    let cq = 8u * (tid % 4u);
    return Src4(coop_raw(0u, m, cq, t0, l, h, hv), coop_raw(0u, m, cq + 4u, t0, l, h, hv),
        vec4<f32>(0.0), vec4<f32>(0.0));
}

// Scaled source row m, columns cq .. cq + 7 as f16.
fn put_x16(m: u32, cq: u32, a: vec4<f32>, b: vec4<f32>) {
    let o = m * 32u + cq;
    s_x16[o] = f16(a.x);
    s_x16[o + 1u] = f16(a.y);
    s_x16[o + 2u] = f16(a.z);
    s_x16[o + 3u] = f16(a.w);
    s_x16[o + 4u] = f16(b.x);
    s_x16[o + 5u] = f16(b.y);
    s_x16[o + 6u] = f16(b.z);
    s_x16[o + 7u] = f16(b.w);
}

// W columns c0 .. c0 + 31 (row-major [64][K]) from the row-major [64][32] tile in s_cw as f16:
// pair w = tid + 256 j of the tile, row w / 16, columns 2 (w % 16) and + 1 (16 invocations store
// a row's 32 consecutive halves).
fn store_w16_rows(tid: u32, c0: u32) {
    for (var j = 0u; j < 4u; j++) {
        let w = tid + 256u * j;
        let i = w / 16u;
        let d = 2u * (w % 16u);
        let o = p_base16 + i * HEAD_K + c0 + d;
        ws16[o] = f16(s_cw[i * 32u + d]);
        ws16[o + 1u] = f16(s_cw[i * 32u + d + 1u]);
    }
}

// qdec columns c0 .. c0 + 63 (row-major [64][K]) as f16 from the staged q tile: token
// i = tid / 16 + 16 r, vec4 column q = tid % 16 (16 invocations store 64 contiguous halves of a
// row; columns c0 + 4 q + 3 < K as c0 + 64 <= K: K is 64 or 128 here).
fn store_qd16(tid: u32, c0: u32) {
    let q = tid % 16u;
    for (var r = 0u; r < 4u; r++) {
        let i = tid / 16u + 16u * r;
        let x = s_at[src_slot(i, q)];
        let o = p_base16 + ws16_qd(HEAD_K) + i * HEAD_K + c0 + 4u * q;
        ws16[o] = f16(x.x);
        ws16[o + 1u] = f16(x.y);
        ws16[o + 2u] = f16(x.z);
        ws16[o + 3u] = f16(x.w);
    }
}

// Diagnosis only (DELTARULE_WGPU_PROBE bits 32 for W, 64 for U): the tile product as scalar f32
// sums over the same f16 operands, C[i][cq + e] for row i = tid / 4, e < 8.
fn scalar_tile(tid: u32, e: u32) -> f32 {
    let i = tid / 4u;
    let c = 8u * (tid % 4u) + e;
    var s = 0.0;
    for (var mm = 0u; mm < 64u; mm++) {
        s += f32(s_t16[i * 64u + mm]) * f32(s_x16[mm * 32u + c]);
    }
    return s;
}

fn gdn_step4(tid: u32, t0: u32, l: u32, h: u32, hv: u32, base_w: u32, base_kd: u32,
    base_qd: u32, base_u: u32, pre: Src4) {
    let sg = tid / 32u;
    let wi = sg / 2u;
    let wc = sg % 2u;
    let m = tid / 4u;
    let cq = 8u * (tid % 4u);
    let nw = HEAD_K / 32u;
    let nu = HEAD_V / 32u;
    let V4 = k4(HEAD_V);
    // T as f16 (T[i][m'] at s_at[m'][i]; the solve ended with a barrier) and the zero tile
    for (var idx = tid; idx < 4096u; idx += 256u) {
        s_t16[idx] = f16(t_at(idx / 64u, idx % 64u, l));
    }
    s_cw[2048u + tid] = 0.0;
    var ra = pre.r0;
    var rb = pre.r1;
    // W (and kdec) tiles; the next tile's raw values load during the product
    for (var tile = 0u; tile < nw; tile++) {
        let c0 = 32u * tile;
        let fd = s_fd[m];
        let fk = s_fk[m];
        put_kdec(base_kd, m, c0 + cq, fd * ra);
        put_kdec(base_kd, m, c0 + cq + 4u, fd * rb);
        put_x16(m, cq, fk * ra, fk * rb);
        workgroupBarrier();
        ra = coop_raw(tile + 1u, m, cq, t0, l, h, hv);
        rb = coop_raw(tile + 1u, m, cq + 4u, t0, l, h, hv);
        if ((PROBE & 32u) != 0u) {
            for (var e = 0u; e < 8u; e++) {
                s_cw[(cq + e) * 64u + m] = scalar_tile(tid, e);
            }
        } else {
            var acc = coopLoadT<coop_mat16x16<f32, C>>(&s_cw[2048u], 16u);
            for (var k = 0u; k < 4u; k++) {
                let a = coopLoadT<coop_mat16x16<f16, A>>(&s_t16[16u * wi * 64u + 16u * k], 64u);
                let b = coopLoadT<coop_mat16x16<f16, B>>(&s_x16[16u * k * 32u + 16u * wc], 32u);
                acc = coopMultiplyAdd(a, b, acc);
            }
            // row-major [64][32]: W[i][d] at s_cw[i][d] (the offsets of both stores are named
            // first: naga 30's SPIR-V writer panicked on an index expression inside a coopStore
            // call)
            let wo = 16u * wi * 32u + 16u * wc;
            coopStoreT(acc, &s_cw[wo], 32u);
        }
        workgroupBarrier();
        store_w16_rows(tid, c0);
    }
    // U tiles, straight into wsu
    for (var tile = 0u; tile < nu; tile++) {
        let c0 = 32u * tile;
        let fb = s_beta[m];
        put_x16(m, cq, fb * ra, fb * rb);
        workgroupBarrier();
        let nt = min(nw + tile + 1u, nw + nu - 1u);
        ra = coop_raw(nt, m, cq, t0, l, h, hv);
        rb = coop_raw(nt, m, cq + 4u, t0, l, h, hv);
        if ((PROBE & 64u) != 0u) {
            for (var e = 0u; e < 8u; e++) {
                wsu[base_u + m * V4 + c0 + cq + e] = scalar_tile(tid, e);
            }
        } else {
            var acc = coopLoadT<coop_mat16x16<f32, C>>(&s_cw[2048u], 16u);
            for (var k = 0u; k < 4u; k++) {
                let a = coopLoadT<coop_mat16x16<f16, A>>(&s_t16[16u * wi * 64u + 16u * k], 64u);
                let b = coopLoadT<coop_mat16x16<f16, B>>(&s_x16[16u * k * 32u + 16u * wc], 32u);
                acc = coopMultiplyAdd(a, b, acc);
            }
            let uo = base_u + 16u * wi * V4 + c0 + 16u * wc;
            coopStoreT(acc, &wsu[uo], V4);
        }
        workgroupBarrier();
    }
    // qdec: 64-channel tiles of q staged in f32 (s_at is free: T lives in s_t16 now)
    let ntk = (HEAD_K + 63u) / 64u;
    let ntv = (V4 + 63u) / 64u;
    let sm = tid / 16u;
    let sq = tid % 16u;
    for (var tile = 0u; tile < ntk; tile++) {
        let tq = ntk + ntv + tile;
        for (var r = 0u; r < 4u; r++) {
            let mm = sm + 16u * r;
            s_at[src_slot(mm, sq)] = s_fq[mm] * src4(tq, mm, sq, t0, l, h, hv);
        }
        workgroupBarrier();
        store_qd16(tid, 64u * tile);
        workgroupBarrier();
    }
}

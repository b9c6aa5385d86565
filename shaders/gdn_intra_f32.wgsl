// gdn_intra_f32.wgsl: steps 2 and 4 of the gdn intra stage (gdn_prefill_intra.wgsl) with f32
// register tiles: the last prelude of the f32 stage (after intra_workspace_f32.wgsl).
// gdn_intra_coop.wgsl has the same steps on cooperative matrices for the `coop` kernel; both
// define `gdn_dots_first`, `gdn_dots`, `gdn_step4_first`, `gdn_step4` and `put_p` (the register
// blocks `Pre2`, `Dots` and `Src4` are intra.wgsl's).
//
// Step 2 (K Kᵀ, Q Kᵀ): tiles of 16 channels stored channel-major in s_x (Kᵀ at 0, Qᵀ at 16 XT),
// the next tile loaded while this one is used; invocation (ty, tx) sums rows 4 ty + a, columns
// 4 tx .. (only tx <= ty: the rest is masked); invocations 0..127 also sum the squares of row
// tid % 64 of k (< 64) or q.
//
// Step 4:
// One stream of 64 x 64 source tiles staged in s_at (intra.wgsl): W = T (β K e^Γ) (kind 0, which
// also writes kdec), U = T (β V) (kind 1), qdecᵀ = (scale q e^Γ)ᵀ (kind 2, a transpose). The
// product gives each invocation a 4 x 4 block (rows 4 ty .., vec4 column tx); the next tile's raw
// values are loaded into registers while the current one is used. Staging mapping: rows
// sm + 16 r (r < 4), vec4 column sq (16 lanes cover a 64-column row), sm = tid / 16, sq = tid % 16.
//
// SAFETY (unchecked module): as intra.wgsl (src4, src_slot, t_product, store_w/u/qd) with tiles
// tn < ntot and rows < 64; step 2's s_x indices as the stage says (2 x 16 x XT scalars).

// The stage's s_x (gdn_prefill_intra.wgsl): dot tiles (2 x 16 x XT scalars), the solve's
// scratch, then the packed triangular Tᵀ (544 vec4s).
const SX_VEC4: u32 = 544u;

// Pᵀ[j][i] for the f32 output pass (the stage's put_ap).
fn put_p(base_p: u32, i: u32, j: u32, pv: f32) {
    wsa[base_p + j * 64u + i] = pv;
}

fn dots_tile(tid: u32, d: u32, t0: u32, l: u32, h: u32) -> Pre2 {
    let li = tid / 16u;
    return Pre2(
        vec4<f32>(qk_at(1u, li, d, t0, l, h), qk_at(1u, li + 16u, d, t0, l, h),
            qk_at(1u, li + 32u, d, t0, l, h), qk_at(1u, li + 48u, d, t0, l, h)),
        vec4<f32>(qk_at(0u, li, d, t0, l, h), qk_at(0u, li + 16u, d, t0, l, h),
            qk_at(0u, li + 32u, d, t0, l, h), qk_at(0u, li + 48u, d, t0, l, h)),
        vec4<f32>(0.0), vec4<f32>(0.0));
}

// The first tile (channel ld_c), loaded by the stage before the gates.
fn gdn_dots_first(tid: u32, t0: u32, l: u32, h: u32) -> Pre2 {
    return dots_tile(tid, tid % 16u, t0, l, h);
}

fn gdn_dots(tid: u32, t0: u32, l: u32, h: u32, pre: Pre2) -> Dots {
    let li = tid / 16u;
    let ld_c = tid % 16u;
    let ty = tid / 16u;
    let tx = tid % 16u;
    var r = Dots(vec4<f32>(0.0), vec4<f32>(0.0), vec4<f32>(0.0), vec4<f32>(0.0),
        vec4<f32>(0.0), vec4<f32>(0.0), vec4<f32>(0.0), vec4<f32>(0.0), 0.0);
    var p = pre;
    let nrow = tid % 64u;
    let nbase = select(16u * XT, 0u, tid < 64u);
    for (var d0 = 0u; d0 < HEAD_K; d0 += 16u) {
        x_set(ld_c * XT + li, p.a.x);
        x_set(ld_c * XT + li + 16u, p.a.y);
        x_set(ld_c * XT + li + 32u, p.a.z);
        x_set(ld_c * XT + li + 48u, p.a.w);
        x_set(16u * XT + ld_c * XT + li, p.b.x);
        x_set(16u * XT + ld_c * XT + li + 16u, p.b.y);
        x_set(16u * XT + ld_c * XT + li + 32u, p.b.z);
        x_set(16u * XT + ld_c * XT + li + 48u, p.b.w);
        workgroupBarrier();
        p = dots_tile(tid, d0 + 16u + ld_c, t0, l, h);
        if (prm.l2norm == 1u && tid < 128u) {
            for (var dd = 0u; dd < 16u; dd++) {
                let x = x_get(nbase + dd * XT + nrow);
                r.ss += x * x;
            }
        }
        if (tx <= ty) {
            for (var dd = 0u; dd < 16u; dd++) {
                let ka = s_x[dd * (XT / 4u) + ty];
                let qa = s_x[4u * XT + dd * (XT / 4u) + ty];
                let kj = s_x[dd * (XT / 4u) + tx];
                r.kk0 += ka.x * kj;
                r.kk1 += ka.y * kj;
                r.kk2 += ka.z * kj;
                r.kk3 += ka.w * kj;
                r.qk0 += qa.x * kj;
                r.qk1 += qa.y * kj;
                r.qk2 += qa.z * kj;
                r.qk3 += qa.w * kj;
            }
        }
        workgroupBarrier();
    }
    return r;
}

fn gdn_tile4(tile: u32, tid: u32, t0: u32, l: u32, h: u32, hv: u32) -> Src4 {
    let sm = tid / 16u;
    let sq = tid % 16u;
    return Src4(src4(tile, sm, sq, t0, l, h, hv), src4(tile, sm + 16u, sq, t0, l, h, hv),
        src4(tile, sm + 32u, sq, t0, l, h, hv), src4(tile, sm + 48u, sq, t0, l, h, hv));
}

// The first source tile (k of channels 0..63), loaded by the stage before the T solve.
fn gdn_step4_first(tid: u32, t0: u32, l: u32, h: u32, hv: u32) -> Src4 {
    return gdn_tile4(0u, tid, t0, l, h, hv);
}

// Scale raw source row m, vec4 column q into the source tile (row factors s_fk / 1 · β / s_fq by
// kind: 0 W, 1 U, 2 qdec) and, for W tiles, write kdec = s_fd[m] k[m][d] (row-major, contiguous
// across the warp). The factors are zero for rows >= L, whose raw values are zero too.
fn stage_src(kind: u32, c0: u32, m: u32, q: u32, raw: vec4<f32>, base_kd: u32) {
    var x = s_beta[m] * raw;
    if (kind == 0u) {
        x = s_fk[m] * raw;
        put_kdec(base_kd, m, c0 + 4u * q, s_fd[m] * raw);
    } else if (kind == 2u) {
        x = s_fq[m] * raw;
    }
    s_at[src_slot(m, q)] = x;
}

fn gdn_step4(tid: u32, t0: u32, l: u32, h: u32, hv: u32, base_w: u32, base_kd: u32,
    base_qd: u32, base_u: u32, pre: Src4) {
    let ntk = (HEAD_K + 63u) / 64u;
    let ntv = (k4(HEAD_V) + 63u) / 64u;
    let ntot = 2u * ntk + ntv;
    let sm = tid / 16u;
    let sq = tid % 16u;
    let ty = tid / 16u;
    let tx = tid % 16u;
    var r = pre;
    for (var tile = 0u; tile < ntot; tile++) {
        var kind = 0u;
        var c0 = tile * 64u;
        if (tile >= ntk + ntv) {
            kind = 2u;
            c0 = (tile - ntk - ntv) * 64u;
        } else if (tile >= ntk) {
            kind = 1u;
            c0 = (tile - ntk) * 64u;
        }
        stage_src(kind, c0, sm, sq, r.r0, base_kd);
        stage_src(kind, c0, sm + 16u, sq, r.r1, base_kd);
        stage_src(kind, c0, sm + 32u, sq, r.r2, base_kd);
        stage_src(kind, c0, sm + 48u, sq, r.r3, base_kd);
        workgroupBarrier();
        r = gdn_tile4(min(tile + 1u, ntot - 1u), tid, t0, l, h, hv);
        if (kind == 2u) {
            store_qd(base_qd, tid, c0);
        } else {
            let blk = t_product(ty, tx, l);
            if (kind == 0u) {
                store_w(base_w, ty, tx, c0, blk, l);
            } else {
                store_u(base_u, ty, tx, c0, blk, l);
            }
        }
        workgroupBarrier();
    }
}

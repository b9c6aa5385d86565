// prefill_state_coop.wgsl: the sequential state pass of prefill_state.wgsl (same bindings,
// workspace, outputs and state mapping, prelude state.wgsl) with its two products on
// cooperative matrices: 16 x 16 x 16 tiles, f16 operands, f32 accumulation (tensor cores on
// NVIDIA's Vulkan driver). This is the `coop` kernel's state pass; its tolerance is the
// tensor-core class of SPEC.md section 9 (the operands W, S, kdec and V_new are rounded to f16;
// the running state, U, V_new in the workspace, h and every sum stay f32).
//
// Per chunk, NS = NW + NU stages staged exactly as in prefill_state.wgsl (Wᵀ parts of 64 rows
// d, kdec parts of IP rows i, one stage of look-ahead in registers), stored as f16 into s_a16:
//   stage 0 also writes S as f16 (s_s16); stages < NW: W·S on the subgroup's 16 x 16 tile of
//   the [64][32] product (W read column-major from Wᵀ); after the last, the tile goes to s_c;
//   stage NW: V_new = U − W·S (zero beyond the chunk) into wsu (f32) and s_v16 (f16), S scaled
//   by e^Γ_last; stages >= NW: ΔS = kdecᵀ·V_new on the subgroup's K / 64 tiles of the [K][32]
//   product (kdecᵀ read column-major from kdec), stored to s_c after the last; then S += ΔS.
//
// Needs: K in {64, 128}, V a multiple of 32 (the host's coop rule), BV = 32 (the prelude's
// default; the host passes no BV), 256 invocations in 8 subgroups of 32 (Gpu::coop checks the
// adapter's subgroup size). Every cooperative-matrix operation runs in workgroup-uniform control
// flow (loops and branches on override constants, the stage index and the workgroup-uniform
// chunk range); only the tile offsets depend on the subgroup id.
//
// Grid and S mapping: as prefill_state.wgsl (BV = 32: rows 4 sr .., sr = tid / 8, columns
// 4 sc .., sc = tid % 8). V_new mapping: row vi = tid / 4, local columns vc .. vc + 7,
// vc = 8 (tid % 4). W·S tile of subgroup g: rows 16 (g / 2) .., columns 16 (g % 2) ..; ΔS tiles
// t = g + 8 h (h < K / 64): rows 16 (t / 2) .., columns 16 (t % 2) ...
// Workgroup memory: s_a16 8 KiB, s_s16 8 KiB, s_v16 4 KiB, s_c 16 KiB, s_zero 1 KiB (37 KiB).
//
// SAFETY (unchecked module): as prefill_state.wgsl for every global index (slots, spans, state
// rows, checkpoints, pools; U and V_new columns e_v + 7 < V because V is a multiple of 32 and
// vt < V / 32). Workgroup indices: s_a16[4 x + 3] with x < 1024; W·S reads s_a16 at
// (16 k + r) 64 + 16 wi + c < 4096 (k, wi < 4; r, c < 16) and s_s16 at (64 s + 16 k + r) 32 +
// 16 wc + c < K 32 <= 4096; ΔS reads s_a16 at (16 k + c) K + 16 td + r with 16 k < IP,
// IP K = 4096, td < K / 16, and s_v16 at (IP (s − NW) + 16 k + r) 32 + 16 (g % 2) + c < 2048;
// s_c stores and reads stay inside [64][32] (W·S) and [K][32] (ΔS, K <= 128); S copy rows
// d_s + 3 < K; V_new rows vi < 64, columns vc + 7 < 32.

// Diagnosis only (DELTARULE_WGPU_PROBE bits, 0 in production; correct results either way):
// 32 computes W·S, 64 computes ΔS with scalar f32 sums over the same f16 workgroup operands
// instead of cooperative matrices (places a fault in the staging or in the matrix operations).
override PROBE: u32 = 0u;

var<workgroup> s_a16: array<f16, 4096>;   // the staged part: Wᵀ [64][64] or kdec [IP][K]
var<workgroup> s_s16: array<f16, 4096>;   // S [K][32] (f16, operand of W·S)
var<workgroup> s_v16: array<f16, 2048>;   // V_new [64][32] (f16, operand of ΔS)
var<workgroup> s_c: array<f32, 4096>;     // W·S [64][32], then ΔS [K][32]
// 16 bytes, like every other workgroup variable here. On the H200 (session 3) the pass gave wrong
// sums with an 8-byte s_mt (vec2<u32>) and exact ones with this, all else equal; the likely cause
// is the alignment of the arrays the matrix operations address (the driver orders workgroup
// variables itself), though a probe with an 8-byte variable first did not reproduce it
// (backends/wgpu/tests/coop.rs). Keep every workgroup variable a multiple of 16 bytes.
var<workgroup> s_mt: vec4<u32>;
var<workgroup> s_zero: array<f32, 256>;   // a zero 16 x 16 tile: the accumulators start from it

// vec4 x of the staged part, as f16.
fn stage16(x: u32, r: vec4<f32>) {
    let o = 4u * x;
    s_a16[o] = f16(r.x);
    s_a16[o + 1u] = f16(r.y);
    s_a16[o + 2u] = f16(r.z);
    s_a16[o + 3u] = f16(r.w);
}

// S row d, local columns c .. c + 3, as f16.
fn s_copy16(d: u32, c: u32, x: vec4<f32>) {
    let o = d * 32u + c;
    s_s16[o] = f16(x.x);
    s_s16[o + 1u] = f16(x.y);
    s_s16[o + 2u] = f16(x.z);
    s_s16[o + 3u] = f16(x.w);
}

// Row d, local columns c .. c + 3 of s_c ([*][32]).
fn s_c4(d: u32, c: u32) -> vec4<f32> {
    let o = d * 32u + c;
    return vec4<f32>(s_c[o], s_c[o + 1u], s_c[o + 2u], s_c[o + 3u]);
}

// U row i, columns e .. e + 3 (global, e + 3 < V), zero outside the chunk.
fn u4(base_u: u32, i: u32, e: u32, l: u32) -> vec4<f32> {
    if (i >= l) {
        return vec4<f32>(0.0);
    }
    let o = base_u + i * k4(HEAD_V) + e;
    return vec4<f32>(wsu[o], wsu[o + 1u], wsu[o + 2u], wsu[o + 3u]);
}

// V_new row i, columns e .. e + 3 (local c .. c + 3): into wsu inside the chunk, into s_v16
// (zeros outside the chunk).
fn put_vnew16(base_u: u32, i: u32, e: u32, c: u32, l: u32, v: vec4<f32>) {
    var x = vec4<f32>(0.0);
    if (i < l) {
        x = v;
        let o = base_u + i * k4(HEAD_V) + e;
        wsu[o] = x.x;
        wsu[o + 1u] = x.y;
        wsu[o + 2u] = x.z;
        wsu[o + 3u] = x.w;
    }
    let q = i * 32u + c;
    s_v16[q] = f16(x.x);
    s_v16[q + 1u] = f16(x.y);
    s_v16[q + 2u] = f16(x.z);
    s_v16[q + 3u] = f16(x.w);
}

@compute @workgroup_size(256)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(local_invocation_index) tid: u32,
    @builtin(subgroup_id) sg: u32,
) {
    let n = wid.x + wid.y * prm.grid_n;
    if (n >= prm.seqs) {
        return;
    }
    let K = HEAD_K;
    let V4 = k4(HEAD_V);
    let KQ = k4(K) / 4u;
    let z = wid.z / prm.nvt;
    let vt = wid.z % prm.nvt;
    let hv = prm.hv0 + z;
    let NW = n_wparts();
    let NS = NW + n_uparts();
    let IP = kd_rows();
    // S mapping
    let sr = tid / 8u;
    let sc = tid % 8u;
    let d_s = 4u * sr;
    let e_s = vt * 32u + 4u * sc;
    // V_new mapping
    let vi = tid / 4u;
    let vc = 8u * (tid % 4u);
    let e_v = vt * 32u + vc;
    // tiles of this subgroup
    let wi = sg / 2u;
    let wc = sg % 2u;
    let q_slot = ws_slot(K, prm.is_kda) / 4u;
    let sb = prm.aux_seqs + 8u * n;
    if (tid == 0u) {
        s_mt = vec4<u32>(aux[sb + 2u], aux[sb + 3u], 0u, 0u);
    }
    s_zero[tid] = 0.0;
    // (also orders the s_zero stores before the first accumulator load)
    let mt = workgroupUniformLoad(&s_mt);
    let c_begin = mt.x;
    let c_end = mt.y;
    let init_row = aux[sb + 4u];
    let final_row = aux[sb + 5u];

    var s0 = init4(init_row, hv, d_s, e_s);
    var s1 = init4(init_row, hv, d_s + 1u, e_s);
    var s2 = init4(init_row, hv, d_s + 2u, e_s);
    var s3 = init4(init_row, hv, d_s + 3u, e_s);

    // stage 0 of the first chunk
    var r0 = vec4<f32>(0.0);
    var r1 = vec4<f32>(0.0);
    var r2 = vec4<f32>(0.0);
    var r3 = vec4<f32>(0.0);
    if (c_begin < c_end) {
        let q = (c_begin * prm.hvb + z) * q_slot;
        let sp = stage_span(0u);
        r0 = stage_ld(q, sp, tid);
        r1 = stage_ld(q, sp, tid + 256u);
        r2 = stage_ld(q, sp, tid + 512u);
        r3 = stage_ld(q, sp, tid + 768u);
    }

    for (var c = c_begin; c < c_end; c++) {
        let ca = prm.aux_chunks + 4u * c;
        let l = aux[ca + 1u];
        let ck = aux[ca + 3u];
        let slot = c * prm.hvb + z;
        let qb = slot * q_slot;
        let base_u = slot * 64u * V4;
        let q_h = slot * K * V4 / 4u;
        let has_next = c + 1u < c_end;
        let qn = select(qb, qb + prm.hvb * q_slot, has_next);

        // the next chunk's Wᵀ/kdec sectors into L2 (see prefill_state.wgsl)
        let t0 = touch(qn, tid);
        let t1 = touch(qn, tid + 256u);
        let t2 = touch(qn, tid + 512u);
        let t3 = touch(qn, tid + 768u);
        let t4 = touch(qn, tid + 1024u);
        let t5 = touch(qn, tid + 1280u);
        let t6 = touch(qn, tid + 1536u);
        let t7 = touch(qn, tid + 1792u);

        let ua = u4(base_u, vi, e_v, l);
        let ub = u4(base_u, vi, e_v + 4u, l);
        let gl = wsa[qb + ws_gl(K) / 4u + min(sr, KQ - 1u)];

        put_h(q_h, d_s, e_s, s0, s1, s2, s3);

        // W·S stages (no branch on the stage index around the matrix operations: naga treats
        // loop counters as non-uniform, so the products sit in loops of their own)
        // accumulators loaded from a zero tile: a zero-valued declaration (OpConstantNull) gave
        // garbage on NVIDIA's Vulkan driver (session 3, first device run)
        var acc_w = coopLoadT<coop_mat16x16<f32, C>>(&s_zero[0], 16u);
        var ws0 = vec4<f32>(0.0);
        var ws1 = vec4<f32>(0.0);
        var ds0 = vec4<f32>(0.0);
        var ds1 = vec4<f32>(0.0);
        var ds2 = vec4<f32>(0.0);
        var ds3 = vec4<f32>(0.0);
        for (var s = 0u; s < NW; s++) {
            // orders the previous stage's reads of s_a16 (and of s_c, s_s16) before these stores
            workgroupBarrier();
            stage16(tid, r0);
            stage16(tid + 256u, r1);
            stage16(tid + 512u, r2);
            stage16(tid + 768u, r3);
            if (s == 0u && d_s < K) {
                s_copy16(d_s, 4u * sc, s0);
                s_copy16(d_s + 1u, 4u * sc, s1);
                s_copy16(d_s + 2u, 4u * sc, s2);
                s_copy16(d_s + 3u, 4u * sc, s3);
            }
            // the next stage's operands (a later Wᵀ part or the first kdec part: NU >= 1)
            let sp = stage_span(s + 1u);
            r0 = stage_ld(qb, sp, tid);
            r1 = stage_ld(qb, sp, tid + 256u);
            r2 = stage_ld(qb, sp, tid + 512u);
            r3 = stage_ld(qb, sp, tid + 768u);
            workgroupBarrier();
            if ((PROBE & 32u) != 0u) {
                for (var d = 0u; d < 64u; d++) {
                    let w = f32(s_a16[d * 64u + vi]);
                    let o = (64u * s + d) * 32u + vc;
                    ws0 += w * vec4<f32>(f32(s_s16[o]), f32(s_s16[o + 1u]), f32(s_s16[o + 2u]), f32(s_s16[o + 3u]));
                    ws1 += w * vec4<f32>(f32(s_s16[o + 4u]), f32(s_s16[o + 5u]), f32(s_s16[o + 6u]), f32(s_s16[o + 7u]));
                }
            }
            // over Wᵀ rows 64 s .. 64 s + 63
            for (var k = 0u; k < 4u; k++) {
                let a = coopLoad<coop_mat16x16<f16, A>>(&s_a16[16u * k * 64u + 16u * wi], 64u);
                let b = coopLoadT<coop_mat16x16<f16, B>>(
                    &s_s16[(64u * s + 16u * k) * 32u + 16u * wc], 32u);
                acc_w = coopMultiplyAdd(a, b, acc_w);
            }
        }
        coopStoreT(acc_w, &s_c[16u * wi * 32u + 16u * wc], 32u);
        if ((PROBE & 32u) != 0u) {
            workgroupBarrier();
            let o = vi * 32u + vc;
            s_c[o] = ws0.x;
            s_c[o + 1u] = ws0.y;
            s_c[o + 2u] = ws0.z;
            s_c[o + 3u] = ws0.w;
            s_c[o + 4u] = ws1.x;
            s_c[o + 5u] = ws1.y;
            s_c[o + 6u] = ws1.z;
            s_c[o + 7u] = ws1.w;
        }

        // ΔS = kdecᵀ·V_new stages
        var acc_d0 = coopLoadT<coop_mat16x16<f32, C>>(&s_zero[0], 16u);
        var acc_d1 = coopLoadT<coop_mat16x16<f32, C>>(&s_zero[0], 16u);
        for (var j = 0u; j < NS - NW; j++) {
            workgroupBarrier();
            stage16(tid, r0);
            stage16(tid + 256u, r1);
            stage16(tid + 512u, r2);
            stage16(tid + 768u, r3);
            if (j == 0u) {
                // V_new = U − W·S
                put_vnew16(base_u, vi, e_v, vc, l, ua - s_c4(vi, vc));
                put_vnew16(base_u, vi, e_v + 4u, vc + 4u, l, ub - s_c4(vi, vc + 4u));
                s0 *= gl.x;
                s1 *= gl.y;
                s2 *= gl.z;
                s3 *= gl.w;
            }
            // the next stage's operands (this chunk's, or stage 0 of the next chunk)
            let last = NW + j + 1u == NS;
            if (!last || has_next) {
                let sp = stage_span(select(NW + j + 1u, 0u, last));
                let q = select(qb, qn, last);
                r0 = stage_ld(q, sp, tid);
                r1 = stage_ld(q, sp, tid + 256u);
                r2 = stage_ld(q, sp, tid + 512u);
                r3 = stage_ld(q, sp, tid + 768u);
            }
            workgroupBarrier();
            // over kdec rows i0g .. i0g + IP − 1 (V_new is zero beyond the chunk, and so are
            // the kdec rows there)
            let i0g = j * IP;
            if ((PROBE & 64u) != 0u && d_s < K) {
                for (var i = 0u; i < IP; i++) {
                    let o = (i0g + i) * 32u + 4u * sc;
                    let y = vec4<f32>(f32(s_v16[o]), f32(s_v16[o + 1u]), f32(s_v16[o + 2u]), f32(s_v16[o + 3u]));
                    ds0 += f32(s_a16[i * K + d_s]) * y;
                    ds1 += f32(s_a16[i * K + d_s + 1u]) * y;
                    ds2 += f32(s_a16[i * K + d_s + 2u]) * y;
                    ds3 += f32(s_a16[i * K + d_s + 3u]) * y;
                }
            }
            for (var k = 0u; k < IP / 16u; k++) {
                let b = coopLoadT<coop_mat16x16<f16, B>>(
                    &s_v16[(i0g + 16u * k) * 32u + 16u * wc], 32u);
                let a0 = coopLoad<coop_mat16x16<f16, A>>(&s_a16[16u * k * K + 16u * wi], K);
                acc_d0 = coopMultiplyAdd(a0, b, acc_d0);
                if (K == 128u) {
                    let a1 = coopLoad<coop_mat16x16<f16, A>>(&s_a16[16u * k * K + 16u * (wi + 4u)], K);
                    acc_d1 = coopMultiplyAdd(a1, b, acc_d1);
                }
            }
        }
        // every invocation read s_c (W·S) at j = 0, before that stage's second barrier
        coopStoreT(acc_d0, &s_c[16u * wi * 32u + 16u * wc], 32u);
        if (K == 128u) {
            coopStoreT(acc_d1, &s_c[16u * (wi + 4u) * 32u + 16u * wc], 32u);
        }
        workgroupBarrier();
        // S ← e^Γ_last ⊙ S + ΔS
        if ((PROBE & 64u) != 0u) {
            s0 += ds0;
            s1 += ds1;
            s2 += ds2;
            s3 += ds3;
        } else if (d_s < K) {
            s0 += s_c4(d_s, 4u * sc);
            s1 += s_c4(d_s + 1u, 4u * sc);
            s2 += s_c4(d_s + 2u, 4u * sc);
            s3 += s_c4(d_s + 3u, 4u * sc);
        }

        put_ckpt(ck, hv, d_s, e_s, s0, s1, s2, s3);

        // consume the touch loads (never stores: a chunk exists only when tokens > 0)
        let tsum = ((t0 + t1) + (t2 + t3)) + ((t4 + t5) + (t6 + t7));
        if (prm.tokens == 0u) {
            wsu[base_u] = tsum;
        }
    }

    put_final(final_row, hv, d_s, e_s, s0, s1, s2, s3);
}

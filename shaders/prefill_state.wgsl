// prefill_state.wgsl: the sequential state pass of the chunked prefill (SPEC.md section 5,
// steps 5-6), shared by gdn and kda (after the intra stage both carry a per-channel e^Γ_last).
// One workgroup per (sequence, value head, value tile of BV columns); it walks the sequence's
// chunks in order with its K x BV slice of the state in registers (and a copy in workgroup
// memory for the W·S product):
//   h[c] = S                                  (the state entering chunk c, for the output pass)
//   V_new = U − W·S                           (written over U)
//   S ← e^Γ_last ⊙ S + kdecᵀ·V_new
// then checkpoints after chunks that end on one, and the final state.
//
// v2 (bench/NOTES.md "WGSL v2"): the chunk operands Wᵀ and kdec are read straight from the
// workspace into registers (4 rows ahead of use) instead of being staged through workgroup
// memory tile by tile, so a chunk costs two barriers instead of ~35 and no load sits between a
// pair of barriers; the next chunk's Wᵀ/kdec lines are touched at the start of each chunk (one
// load per 32-byte sector, consumed only at the chunk's end) so the in-chunk loads hit L1/L2;
// every register tile is a named vec4 (no private arrays, so nothing can fall into local memory).
//
// Grid: x + y * grid_n = sequence n, z = (hv − hv0) * nvt + value tile. 256 invocations.
//   W·S: rows 4 rg .. 4 rg + 3 (rg = tid / 16), columns c0 = CW cg .. (cg = tid % 16, CW = BV / 16);
//   S:   rows 4 sr .. 4 sr + 3 (sr = tid / (BV / 4)), columns 4 sc .. 4 sc + 3 (sc = tid % (BV / 4)).
// Reads: aux (chunk and sequence tables), wsa (Wᵀ, kdec, e^Γ_last), st (initial state, dtype
// state_dt, layout), wsu (U, [64, V4]). Writes: wsu (V_new), wsh (h, [K, V4] per chunk), outs
// (checkpoints and dense or staged final states, f32, in the caller's layout), st (in-place f32
// pools).
//
// SAFETY (unchecked module): chunk rows c lie in [c_begin, c_end) of the sequence (< chunks), so
// slots c * hvb + z (and the next chunk's, touched only when c + 1 < c_end) were sized by the
// host (ws_slot words, a multiple of 4, per slot); Wᵀ rows are read at min(d, K − 1) < K and
// kdec rows at i < 64 (the loop clamps the look-ahead to row 60 + 3), e^Γ_last at
// min(sr, K4 / 4 − 1); touch loads are clamped to the slot's first 16 (K + K4) vec4s (Wᵀ and
// kdec); state rows, checkpoint slots and pool rows come from the host-built tables and were
// validated against the tensors' shapes (indices in 0..P, unique); every tensor access to (d, e)
// is guarded by d < K, e < V; h stores need e_s < V4 (e_s and V4 multiples of 4); workgroup
// indices: s_s rows < 4 * (256 / BQ) so < 1024 vec4s (also d < K4 <= 1024 / BQ in W·S), s_v rows
// < 64 so < 64 * BQ <= 512.

override HEAD_K: u32 = 64u;
override HEAD_V: u32 = 64u;
override BV: u32 = 32u;   // 16 (K <= 256) or 32 (K <= 128)

@group(0) @binding(0) var<uniform> prm: Params;
@group(0) @binding(1) var<storage, read> aux: array<u32>;
@group(0) @binding(2) var<storage, read> wsa: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read_write> wsu: array<f32>;
@group(0) @binding(4) var<storage, read_write> wsh: array<vec4<f32>>;
@group(0) @binding(5) var<storage, read_write> st: array<u32>;
@group(0) @binding(6) var<storage, read_write> outs: array<f32>;

var<workgroup> s_s: array<vec4<f32>, 1024>;   // S slice [rows][BV / 4]
var<workgroup> s_v: array<vec4<f32>, 512>;    // V_new [64][BV / 4]
var<workgroup> s_mt: vec4<u32>;

fn load_state(row: u32, hv: u32, d: u32, e: u32) -> f32 {
    let K = HEAD_K;
    let V = HEAD_V;
    let idx = (row * prm.vheads + hv) * K * V + state_offset(d, e, K, V, prm.state_layout);
    if (prm.state_dt == DT_F32) {
        return bitcast<f32>(st[idx]);
    }
    return decode16(st[idx >> 1u], idx, prm.state_dt);
}

fn init1(ok: bool, row: u32, hv: u32, d: u32, e: u32) -> f32 {
    if (ok && e < HEAD_V) {
        return load_state(row, hv, d, e);
    }
    return 0.0;
}

// Initial state row d, columns e .. e + 3 (zeros beyond K, V or without an initial state).
fn init4(row: u32, hv: u32, d: u32, e: u32) -> vec4<f32> {
    let ok = d < HEAD_K && prm.state_in == 1u && row != NONE;
    return vec4<f32>(
        init1(ok, row, hv, d, e),
        init1(ok, row, hv, d, e + 1u),
        init1(ok, row, hv, d, e + 2u),
        init1(ok, row, hv, d, e + 3u)
    );
}

// State row d, columns e .. e + 3 into outs[base + layout offset] (f32), inside K x V.
fn put_out(base: u32, d: u32, e: u32, x: vec4<f32>) {
    if (d < HEAD_K) {
        for (var b = 0u; b < 4u; b++) {
            if (e + b < HEAD_V) {
                outs[base + state_offset(d, e + b, HEAD_K, HEAD_V, prm.state_layout)] = x[b];
            }
        }
    }
}

// The same into the in-place f32 pool `st`.
fn put_st(base: u32, d: u32, e: u32, x: vec4<f32>) {
    if (d < HEAD_K) {
        for (var b = 0u; b < 4u; b++) {
            if (e + b < HEAD_V) {
                st[base + state_offset(d, e + b, HEAD_K, HEAD_V, prm.state_layout)] =
                    bitcast<u32>(x[b]);
            }
        }
    }
}

// U of row i, columns eg, eg + 1 (the second only when BV = 32), zero outside the chunk.
fn load_u(base_u: u32, i: u32, eg: u32, l: u32) -> vec2<f32> {
    let V4 = k4(HEAD_V);
    var u = vec2<f32>(0.0);
    if (i < l) {
        if (eg < HEAD_V) {
            u.x = wsu[base_u + i * V4 + eg];
        }
        if (BV == 32u && eg + 1u < HEAD_V) {
            u.y = wsu[base_u + i * V4 + eg + 1u];
        }
    }
    return u;
}

// V_new of row i, columns el, el + 1 of the tile (global eg): into wsu and the s_v tile
// (zeros outside the chunk, so the S update may run over whole 4-row groups).
fn put_vnew(base_u: u32, i: u32, eg: u32, el: u32, l: u32, v: vec2<f32>) {
    let V4 = k4(HEAD_V);
    let BQ = BV / 4u;
    var x = 0.0;
    if (eg < HEAD_V && i < l) {
        x = v.x;
        wsu[base_u + i * V4 + eg] = x;
    }
    s_v[i * BQ + el / 4u][el & 3u] = x;
    if (BV == 32u) {
        var y = 0.0;
        if (eg + 1u < HEAD_V && i < l) {
            y = v.y;
            wsu[base_u + i * V4 + eg + 1u] = y;
        }
        s_v[i * BQ + (el + 1u) / 4u][(el + 1u) & 3u] = y;
    }
}

// Wᵀ row d (vec4 of rows 4 rg ..), zero for d >= K; qw = vec4 index of Wᵀ[0][4 rg].
fn w_row(qw: u32, d: u32) -> vec4<f32> {
    let x = wsa[qw + min(d, HEAD_K - 1u) * 16u];
    return select(vec4<f32>(0.0), x, d < HEAD_K);
}

// Columns c0 (and c0 + 1 when BV = 32) of the S copy, row d.
fn s_pair(d: u32, c0: u32) -> vec2<f32> {
    let BQ = BV / 4u;
    let v = s_s[d * BQ + c0 / 4u];
    if (BV == 32u) {
        return select(v.xy, v.zw, (c0 & 2u) != 0u);
    }
    return vec2<f32>(v[c0 & 3u], 0.0);
}

// One 32-byte sector of the Wᵀ/kdec span of a slot (q0: its first vec4), clamped to the span.
fn touch(q0: u32, sector: u32) -> f32 {
    let span = 16u * (HEAD_K + k4(HEAD_K));   // vec4s of Wᵀ [K][64] then kdec [64][K4]
    return wsa[q0 + min(2u * sector, span - 1u)].x;
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) tid: u32) {
    let n = wid.x + wid.y * prm.grid_n;
    if (n >= prm.seqs) {
        return;
    }
    let K = HEAD_K;
    let V = HEAD_V;
    let K4 = k4(K);
    let V4 = k4(V);
    let KQ = K4 / 4u;
    let z = wid.z / prm.nvt;
    let vt = wid.z % prm.nvt;
    let hv = prm.hv0 + z;
    let HV = prm.vheads;
    let BQ = BV / 4u;                      // vec4 columns of the slice
    let CW = BV / 16u;                     // W·S columns an invocation
    // W·S mapping
    let rg = tid / 16u;
    let cg = tid % 16u;
    let c0 = CW * cg;
    let eg0 = vt * BV + c0;
    let i0 = 4u * rg;
    // S mapping
    let sr = tid / BQ;
    let sc = tid % BQ;
    let d_s = 4u * sr;
    let e_s = vt * BV + 4u * sc;           // first global column of this invocation's S block
    let q_slot = ws_slot(K, prm.is_kda) / 4u;   // vec4s a slot
    if (tid == 0u) {
        let sb = prm.aux_seqs + 8u * n;
        s_mt = vec4<u32>(aux[sb + 2u], aux[sb + 3u], aux[sb + 4u], aux[sb + 5u]);
    }
    let mt = workgroupUniformLoad(&s_mt);
    let c_begin = mt.x;
    let c_end = mt.y;
    let init_row = mt.z;
    let final_row = mt.w;

    var s0 = init4(init_row, hv, d_s, e_s);
    var s1 = init4(init_row, hv, d_s + 1u, e_s);
    var s2 = init4(init_row, hv, d_s + 2u, e_s);
    var s3 = init4(init_row, hv, d_s + 3u, e_s);
    s_s[d_s * BQ + sc] = s0;
    s_s[(d_s + 1u) * BQ + sc] = s1;
    s_s[(d_s + 2u) * BQ + sc] = s2;
    s_s[(d_s + 3u) * BQ + sc] = s3;

    for (var c = c_begin; c < c_end; c++) {
        // orders the s_s writes above (or of the previous chunk) before the W·S reads, and the
        // previous chunk's s_v reads before this chunk's V_new writes
        workgroupBarrier();
        let ca = prm.aux_chunks + 4u * c;
        let l = aux[ca + 1u];
        let ck = aux[ca + 3u];
        let slot = c * prm.hvb + z;
        let qb = slot * q_slot;                // vec4 index of the slot
        let base_u = slot * 64u * V4;
        let q_h = slot * K * V4 / 4u;

        // Touch the next chunk's Wᵀ/kdec sectors (8 a thread: the whole span for K <= 128); the
        // values are consumed only at the end of this chunk, so nothing waits on them here.
        let qn = select(qb, qb + prm.hvb * q_slot, c + 1u < c_end);
        let t0 = touch(qn, tid);
        let t1 = touch(qn, tid + 256u);
        let t2 = touch(qn, tid + 512u);
        let t3 = touch(qn, tid + 768u);
        let t4 = touch(qn, tid + 1024u);
        let t5 = touch(qn, tid + 1280u);
        let t6 = touch(qn, tid + 1536u);
        let t7 = touch(qn, tid + 1792u);

        // This chunk's U entries and e^Γ_last, used after W·S.
        let u0 = load_u(base_u, i0, eg0, l);
        let u1 = load_u(base_u, i0 + 1u, eg0, l);
        let u2 = load_u(base_u, i0 + 2u, eg0, l);
        let u3 = load_u(base_u, i0 + 3u, eg0, l);
        let gl = wsa[qb + ws_gl(K) / 4u + min(sr, KQ - 1u)];

        // h[c] = S ([K][V4]; the padding columns hold the zeros of S beyond V)
        if (e_s < V4) {
            let qe = q_h + e_s / 4u;
            if (d_s < K) { wsh[qe + d_s * V4 / 4u] = s0; }
            if (d_s + 1u < K) { wsh[qe + (d_s + 1u) * V4 / 4u] = s1; }
            if (d_s + 2u < K) { wsh[qe + (d_s + 2u) * V4 / 4u] = s2; }
            if (d_s + 3u < K) { wsh[qe + (d_s + 3u) * V4 / 4u] = s3; }
        }

        // W·S for rows i0 .. i0 + 3, columns c0 (a0) and c0 + 1 (a1), Wᵀ rows 4 ahead
        let qw = qb + rg;
        var a0 = vec4<f32>(0.0);
        var a1 = vec4<f32>(0.0);
        var w0 = w_row(qw, 0u);
        var w1 = w_row(qw, 1u);
        var w2 = w_row(qw, 2u);
        var w3 = w_row(qw, 3u);
        for (var d = 0u; d < K4; d += 4u) {
            let n0 = w_row(qw, d + 4u);
            let n1 = w_row(qw, d + 5u);
            let n2 = w_row(qw, d + 6u);
            let n3 = w_row(qw, d + 7u);
            let x0 = s_pair(d, c0);
            let x1 = s_pair(d + 1u, c0);
            let x2 = s_pair(d + 2u, c0);
            let x3 = s_pair(d + 3u, c0);
            a0 += w0 * x0.x + w1 * x1.x + w2 * x2.x + w3 * x3.x;
            if (BV == 32u) {
                a1 += w0 * x0.y + w1 * x1.y + w2 * x2.y + w3 * x3.y;
            }
            w0 = n0;
            w1 = n1;
            w2 = n2;
            w3 = n3;
        }

        // V_new = U − W·S
        put_vnew(base_u, i0, eg0, c0, l, u0 - vec2<f32>(a0.x, a1.x));
        put_vnew(base_u, i0 + 1u, eg0, c0, l, u1 - vec2<f32>(a0.y, a1.y));
        put_vnew(base_u, i0 + 2u, eg0, c0, l, u2 - vec2<f32>(a0.z, a1.z));
        put_vnew(base_u, i0 + 3u, eg0, c0, l, u3 - vec2<f32>(a0.w, a1.w));
        workgroupBarrier();

        // S ← e^Γ_last ⊙ S + kdecᵀ·V_new over the chunk's rows (V_new is zero from l to the next
        // multiple of 4), kdec rows 4 ahead
        s0 *= gl.x;
        s1 *= gl.y;
        s2 *= gl.z;
        s3 *= gl.w;
        if (sr < KQ) {
            let qk = qb + ws_kd(K) / 4u + sr;   // kdec[i][4 sr ..] = wsa[qk + i * KQ]
            var k0 = wsa[qk];
            var k1 = wsa[qk + KQ];
            var k2 = wsa[qk + 2u * KQ];
            var k3 = wsa[qk + 3u * KQ];
            for (var i = 0u; i < l; i += 4u) {
                let ni = min(i + 4u, 60u);
                let m0 = wsa[qk + ni * KQ];
                let m1 = wsa[qk + (ni + 1u) * KQ];
                let m2 = wsa[qk + (ni + 2u) * KQ];
                let m3 = wsa[qk + (ni + 3u) * KQ];
                let y0 = s_v[i * BQ + sc];
                let y1 = s_v[(i + 1u) * BQ + sc];
                let y2 = s_v[(i + 2u) * BQ + sc];
                let y3 = s_v[(i + 3u) * BQ + sc];
                s0 += k0.x * y0 + k1.x * y1 + k2.x * y2 + k3.x * y3;
                s1 += k0.y * y0 + k1.y * y1 + k2.y * y2 + k3.y * y3;
                s2 += k0.z * y0 + k1.z * y1 + k2.z * y2 + k3.z * y3;
                s3 += k0.w * y0 + k1.w * y1 + k2.w * y2 + k3.w * y3;
                k0 = m0;
                k1 = m1;
                k2 = m2;
                k3 = m3;
            }
        }
        s_s[d_s * BQ + sc] = s0;
        s_s[(d_s + 1u) * BQ + sc] = s1;
        s_s[(d_s + 2u) * BQ + sc] = s2;
        s_s[(d_s + 3u) * BQ + sc] = s3;

        // checkpoint after this chunk
        if (prm.ckpt == 1u && ck != NONE) {
            let cbase = prm.off_ckpt + (ck * HV + hv) * K * V;
            put_out(cbase, d_s, e_s, s0);
            put_out(cbase, d_s + 1u, e_s, s1);
            put_out(cbase, d_s + 2u, e_s, s2);
            put_out(cbase, d_s + 3u, e_s, s3);
        }

        // Consume the touch loads (a chunk exists only when tokens > 0, so this never stores;
        // the driver cannot know that and keeps the loads).
        let tsum = ((t0 + t1) + (t2 + t3)) + ((t4 + t5) + (t6 + t7));
        if (prm.tokens == 0u) {
            wsu[base_u] = tsum;
        }
    }

    if (final_row != NONE) {
        let fbase = (final_row * HV + hv) * K * V;
        if (prm.final_mode == 1u) {
            put_out(prm.off_final + fbase, d_s, e_s, s0);
            put_out(prm.off_final + fbase, d_s + 1u, e_s, s1);
            put_out(prm.off_final + fbase, d_s + 2u, e_s, s2);
            put_out(prm.off_final + fbase, d_s + 3u, e_s, s3);
        } else if (prm.final_mode == 2u) {
            put_st(fbase, d_s, e_s, s0);
            put_st(fbase, d_s + 1u, e_s, s1);
            put_st(fbase, d_s + 2u, e_s, s2);
            put_st(fbase, d_s + 3u, e_s, s3);
        }
    }
}

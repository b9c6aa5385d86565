// prefill_state.wgsl: the sequential state pass of the chunked prefill (docs/spec.md, the
// chunked algorithm, steps 5-6), shared by gdn and kda (after the intra stage both carry a
// per-channel e^Γ_last). One workgroup per (sequence, value head, value tile of BV columns); it
// walks the sequence's chunks in order with its K x BV slice of the state in registers (and a
// copy in workgroup memory for the W·S product):
//   h[c] = S                                  (the state entering chunk c, for the output pass)
//   V_new = U − W·S                           (written over U)
//   S ← e^Γ_last ⊙ S + kdecᵀ·V_new
// then checkpoints after chunks that end on one, and the final state.
//
// A chunk is a fixed sequence of NS = NW + NU stages; each stage's operand part is one contiguous
// span of the slot (a Wᵀ part: 64 rows d x 64 tokens; a kdec part: IP rows i x K4 channels), at
// most 1024 vec4s, which all 256 invocations load with coalesced vec4 loads (4 each) one stage
// ahead into registers, then store into s_a between two barriers:
//   stage s:  barrier; s_a ← registers (+ S copy at s = 0, + the W·S partials at s = NW);
//             load stage s + 1 (or stage 0 of the next chunk) into the registers; barrier;
//             (s = NW: V_new from the partials; barrier;)
//             s < NW: W·S over Wᵀ rows 64 s .., else S update over kdec rows (s − NW) IP ..
// so a stage's global latency hides behind the previous stage's product, and the products read
// only workgroup memory (vec4 loads, unrolled by 4, no branch inside). The next chunk's whole
// Wᵀ/kdec span is touched (one load per sector) at the start of each chunk, so the stage loads
// hit L2 rather than HBM. Measured on the H200 (gdn 16/32 1 x 8192): 1.72 -> 1.33 ms against
// reading Wᵀ and kdec rows straight from the workspace, 4 rows ahead.
//
// Grid: x + y * grid_n = sequence n, z = (hv − hv0) * nvt + value tile. 256 invocations.
//   W·S: SK = 16 / BQ splits (2 at BV = 32, 4 at BV = 16; BQ = BV / 4); split kh = tid / (16 BQ)
//   does the 4-row groups d = 4 kh + 4 SK m with a 4 x 4 block: rows 4 rg2 ..
//   (rg2 = (tid % 16 BQ) / BQ), columns 4 cq .. (cq = tid % BQ), one Wᵀ vec4 and one S vec4 per
//   16 FMAs; the splits kh > 0 leave their sums in s_x at stage NW and kh = 0 adds them in split
//   order (one more barrier).
//   S:   rows 4 sr .. 4 sr + 3 (sr = tid / BQ), columns 4 sc .. 4 sc + 3 (sc = tid % BQ).
//   Parts: NW = ceil(K / 64) Wᵀ parts, NU = ceil(64 / IP) kdec parts, IP = min(64, 1024 / K4
//   rounded down to 4) (K = 128: 2 + 2 stages, 9 barriers a chunk).
// Workgroup memory: s_a (16 KiB, the staged part), s_x (16 KiB: the S copy [K4][BQ] during W·S,
// the V_new tile [64][BQ] and the W·S partials during the update, the sequence's chunk range
// before the loop): 32 KiB.
// Reads: aux (chunk and sequence tables), wsa (Wᵀ, kdec, e^Γ_last), st (initial state, dtype
// state_dt, layout), wsu (U, [64, V4]). Writes: wsu (V_new), wsh (h, [K, V4] per chunk), outs
// (checkpoints and dense or staged final states, f32, in the caller's layout), st (in-place f32
// pools).
//
// SAFETY (unchecked module): chunk rows c lie in [c_begin, c_end) of the sequence (< chunks; the
// chunk range passes through s_x as exact f32s: chunks < 2^24 because every chunk has a wsa slot
// of >= 7 K words inside one binding), so slots c * hvb + z (and the next chunk's, loaded or
// touched only when c + 1 < c_end) were sized by the host (ws_slot words, a multiple of 4, per
// slot); stage loads read the slot at span start + min(x, len − 1) with the span inside Wᵀ
// (rows < K) or kdec (rows < 64) (stage_span), e^Γ_last at min(sr, K4 / 4 − 1); touch loads are
// clamped to the slot's first 16 (K + K4) vec4s (Wᵀ and kdec); state rows, checkpoint slots and
// pool rows come from the host-built tables and were validated against the tensors' shapes
// (indices in 0..P, unique); every tensor access to (d, e) is guarded by d < K, e < V; h stores
// need e_s < V4 (e_s and V4 multiples of 4); workgroup indices: s_a[tid + 256 m] (m < 4) < 1024,
// W·S reads s_a[d 16 + rg2] (d < 64, rg2 < 16) and s_x[d BQ + cq] (d < K4 <= 1024 / BQ: K <= 128
// when BV = 32), partials at 64 BQ kh + (i2 + r) BQ + cq < 64 BQ SK = 1024, after the V_new tile
// (rows < 64), which kh = 0 writes only after the partials' barrier; the update reads
// s_a[i KQ + sr] with i < IP, sr < KQ (IP KQ <= 1024) and s_x[i BQ + sc] with i < 64; S copy
// stores need d_s < K4; V_new rows < 64 (64 BQ <= 512).

override BV: u32 = 32u;   // 16 (K <= 256) or 32 (K <= 128)

var<workgroup> s_a: array<vec4<f32>, 1024>;   // the staged part: Wᵀ [64][16] or kdec [IP][K4 / 4]
var<workgroup> s_x: array<vec4<f32>, 1024>;   // S copy [K4][BV / 4], or V_new [64][BV / 4]

// U of row i, columns e .. e + 3 (e a multiple of 4), zero outside the chunk and beyond V4.
fn load_u4(base_u: u32, i: u32, e: u32, l: u32) -> vec4<f32> {
    let V4 = k4(HEAD_V);
    var u = vec4<f32>(0.0);
    if (i < l && e < V4) {
        let o = base_u + i * V4 + e;
        u = vec4<f32>(wsu[o], wsu[o + 1u], wsu[o + 2u], wsu[o + 3u]);
    }
    return u;
}

// V_new of row i, columns e .. e + 3 (vec4 column cq of the tile): into wsu (columns < V) and
// s_x (zeros outside the chunk and beyond V).
fn put_vnew4(base_u: u32, i: u32, e: u32, cq: u32, l: u32, v: vec4<f32>) {
    let V4 = k4(HEAD_V);
    let BQ = BV / 4u;
    let live = vec4<bool>(e < HEAD_V, e + 1u < HEAD_V, e + 2u < HEAD_V, e + 3u < HEAD_V);
    let x = select(vec4<f32>(0.0), v, live & vec4<bool>(i < l));
    if (i < l) {
        for (var b = 0u; b < 4u; b++) {
            if (e + b < HEAD_V) {
                wsu[base_u + i * V4 + e + b] = x[b];
            }
        }
    }
    s_x[i * BQ + cq] = x;
}

// h[c] = S ([K][V4] at vec4 q_h; the padding columns hold the zeros of S beyond V).
fn put_h(q_h: u32, d_s: u32, e_s: u32, s0: vec4<f32>, s1: vec4<f32>, s2: vec4<f32>, s3: vec4<f32>) {
    let K = HEAD_K;
    let V4 = k4(HEAD_V);
    if (e_s < V4) {
        let qe = q_h + e_s / 4u;
        if (d_s < K) { wsh[qe + d_s * V4 / 4u] = s0; }
        if (d_s + 1u < K) { wsh[qe + (d_s + 1u) * V4 / 4u] = s1; }
        if (d_s + 2u < K) { wsh[qe + (d_s + 2u) * V4 / 4u] = s2; }
        if (d_s + 3u < K) { wsh[qe + (d_s + 3u) * V4 / 4u] = s3; }
    }
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
    let NW = n_wparts();
    let NS = NW + n_uparts();
    let IP = kd_rows();
    // W·S mapping: split kh of SK, rows 4 rg2 .., columns 4 cq ..
    let SK = 16u / BQ;
    let kh = tid / (16u * BQ);
    let rg2 = (tid % (16u * BQ)) / BQ;
    let cq = tid % BQ;
    let i2 = 4u * rg2;
    let e2 = vt * BV + 4u * cq;
    // S mapping
    let sr = tid / BQ;
    let sc = tid % BQ;
    let d_s = 4u * sr;
    let e_s = vt * BV + 4u * sc;           // first global column of this invocation's S block
    let q_slot = ws_slot(K, prm.is_kda) / 4u;   // vec4s a slot
    let sb = prm.aux_seqs + 8u * n;
    // the chunk range, made workgroup-uniform through s_x (exact: both < 2^24)
    if (tid == 0u) {
        s_x[0] = vec4<f32>(f32(aux[sb + 2u]), f32(aux[sb + 3u]), 0.0, 0.0);
    }
    let mt = workgroupUniformLoad(&s_x[0]);
    let c_begin = u32(mt.x);
    let c_end = u32(mt.y);
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
        let l4 = (l + 3u) & ~3u;
        let ck = aux[ca + 3u];
        let slot = c * prm.hvb + z;
        let qb = slot * q_slot;                // vec4 index of the slot
        let base_u = slot * 64u * V4;
        let q_h = slot * K * V4 / 4u;
        let has_next = c + 1u < c_end;
        let qn = select(qb, qb + prm.hvb * q_slot, has_next);

        // Touch the next chunk's Wᵀ/kdec sectors (8 a thread: the whole span for K <= 128); the
        // values are consumed only at the end of this chunk, so nothing waits on them here.
        let t0 = touch(qn, tid);
        let t1 = touch(qn, tid + 256u);
        let t2 = touch(qn, tid + 512u);
        let t3 = touch(qn, tid + 768u);
        let t4 = touch(qn, tid + 1024u);
        let t5 = touch(qn, tid + 1280u);
        let t6 = touch(qn, tid + 1536u);
        let t7 = touch(qn, tid + 1792u);

        // This chunk's U entries and e^Γ_last, used after W·S.
        var v0 = vec4<f32>(0.0);
        var v1 = vec4<f32>(0.0);
        var v2 = vec4<f32>(0.0);
        var v3 = vec4<f32>(0.0);
        if (kh == 0u) {
            v0 = load_u4(base_u, i2, e2, l);
            v1 = load_u4(base_u, i2 + 1u, e2, l);
            v2 = load_u4(base_u, i2 + 2u, e2, l);
            v3 = load_u4(base_u, i2 + 3u, e2, l);
        }
        let gl = wsa[qb + ws_gl(K) / 4u + min(sr, KQ - 1u)];

        // h[c] = S
        put_h(q_h, d_s, e_s, s0, s1, s2, s3);

        var b0 = vec4<f32>(0.0);   // W·S: row i2 + r, columns e2 ..
        var b1 = vec4<f32>(0.0);
        var b2 = vec4<f32>(0.0);
        var b3 = vec4<f32>(0.0);
        for (var s = 0u; s < NS; s++) {
            // orders the previous stage's reads of s_a / s_x before these stores
            workgroupBarrier();
            s_a[tid] = r0;
            s_a[tid + 256u] = r1;
            s_a[tid + 512u] = r2;
            s_a[tid + 768u] = r3;
            if (s == 0u && d_s < K4) {
                // the S copy for W·S (rows K .. K4 hold zeros)
                s_x[d_s * BQ + sc] = s0;
                s_x[(d_s + 1u) * BQ + sc] = s1;
                s_x[(d_s + 2u) * BQ + sc] = s2;
                s_x[(d_s + 3u) * BQ + sc] = s3;
            }
            if (s == NW && kh > 0u) {
                // partial sums of split kh after the V_new tile (64 BQ SK <= 1024 vec4s)
                let pb = 64u * BQ * kh + i2 * BQ + cq;
                s_x[pb] = b0;
                s_x[pb + BQ] = b1;
                s_x[pb + 2u * BQ] = b2;
                s_x[pb + 3u * BQ] = b3;
            }
            // the next stage's operands (this chunk's, or stage 0 of the next chunk)
            let last = s + 1u == NS;
            if (!last || has_next) {
                let sp = stage_span(select(s + 1u, 0u, last));
                let q = select(qb, qn, last);
                r0 = stage_ld(q, sp, tid);
                r1 = stage_ld(q, sp, tid + 256u);
                r2 = stage_ld(q, sp, tid + 512u);
                r3 = stage_ld(q, sp, tid + 768u);
            }
            workgroupBarrier();
            if (s == NW) {
                // V_new = U − (sum of the SK partials, in split order)
                if (kh == 0u) {
                    for (var k = 1u; k < SK; k++) {
                        let pb = 64u * BQ * k + i2 * BQ + cq;
                        b0 += s_x[pb];
                        b1 += s_x[pb + BQ];
                        b2 += s_x[pb + 2u * BQ];
                        b3 += s_x[pb + 3u * BQ];
                    }
                    put_vnew4(base_u, i2, e2, cq, l, v0 - b0);
                    put_vnew4(base_u, i2 + 1u, e2, cq, l, v1 - b1);
                    put_vnew4(base_u, i2 + 2u, e2, cq, l, v2 - b2);
                    put_vnew4(base_u, i2 + 3u, e2, cq, l, v3 - b3);
                }
                workgroupBarrier();
            }

            if (s < NW) {
                // W·S for rows i2 .. i2 + 3, columns e2 .. e2 + 3 over the 4-row groups
                // d = 4 kh + 4 SK m of Wᵀ rows d0 .. d0 + 63
                let d0 = 64u * s;
                let nd = min(64u, K - d0);
                for (var d = 4u * kh; d < nd; d += 4u * SK) {
                    let w0 = s_a[d * 16u + rg2];
                    let w1 = s_a[(d + 1u) * 16u + rg2];
                    let w2 = s_a[(d + 2u) * 16u + rg2];
                    let w3 = s_a[(d + 3u) * 16u + rg2];
                    let x0 = s_x[(d0 + d) * BQ + cq];
                    let x1 = s_x[(d0 + d + 1u) * BQ + cq];
                    let x2 = s_x[(d0 + d + 2u) * BQ + cq];
                    let x3 = s_x[(d0 + d + 3u) * BQ + cq];
                    b0 += w0.x * x0 + w1.x * x1 + w2.x * x2 + w3.x * x3;
                    b1 += w0.y * x0 + w1.y * x1 + w2.y * x2 + w3.y * x3;
                    b2 += w0.z * x0 + w1.z * x1 + w2.z * x2 + w3.z * x3;
                    b3 += w0.w * x0 + w1.w * x1 + w2.w * x2 + w3.w * x3;
                }
            } else {
                // S ← e^Γ_last ⊙ S + kdecᵀ·V_new over kdec rows i0g .. of the chunk (V_new is
                // zero from l to l4)
                if (s == NW) {
                    s0 *= gl.x;
                    s1 *= gl.y;
                    s2 *= gl.z;
                    s3 *= gl.w;
                }
                let i0g = (s - NW) * IP;
                let ni = min(IP, l4 - min(l4, i0g));
                if (sr < KQ) {
                    for (var i = 0u; i < ni; i += 4u) {
                        let k0 = s_a[i * KQ + sr];
                        let k1 = s_a[(i + 1u) * KQ + sr];
                        let k2 = s_a[(i + 2u) * KQ + sr];
                        let k3 = s_a[(i + 3u) * KQ + sr];
                        let y0 = s_x[(i0g + i) * BQ + sc];
                        let y1 = s_x[(i0g + i + 1u) * BQ + sc];
                        let y2 = s_x[(i0g + i + 2u) * BQ + sc];
                        let y3 = s_x[(i0g + i + 3u) * BQ + sc];
                        s0 += k0.x * y0 + k1.x * y1 + k2.x * y2 + k3.x * y3;
                        s1 += k0.y * y0 + k1.y * y1 + k2.y * y2 + k3.y * y3;
                        s2 += k0.z * y0 + k1.z * y1 + k2.z * y2 + k3.z * y3;
                        s3 += k0.w * y0 + k1.w * y1 + k2.w * y2 + k3.w * y3;
                    }
                }
            }
        }

        // checkpoint after this chunk
        put_ckpt(ck, hv, d_s, e_s, s0, s1, s2, s3);

        // Consume the touch loads (a chunk exists only when tokens > 0, so this never stores;
        // the driver cannot know that and keeps the loads).
        let tsum = ((t0 + t1) + (t2 + t3)) + ((t4 + t5) + (t6 + t7));
        if (prm.tokens == 0u) {
            wsu[base_u] = tsum;
        }
    }

    put_final(final_row, hv, d_s, e_s, s0, s1, s2, s3);
}

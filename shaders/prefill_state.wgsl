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
// Grid: x + y * grid_n = sequence n, z = (hv − hv0) * nvt + value tile. 256 invocations.
//   W·S: rows 4 rg .. 4 rg + 3 (rg = tid / 16), columns CW cg .. (cg = tid % 16, CW = BV / 16);
//   S:   rows 4 sr .. 4 sr + 3 (sr = tid / (BV / 4)), columns 4 sc .. 4 sc + 3 (sc = tid % (BV / 4)).
// Workgroup tiles are vec4s (Wᵀ rows of 64, kdec rows padded to K4, V_new and S rows of BV), so
// every inner step is two vector loads for 8 or 16 multiply-adds.
// Reads: aux (chunk and sequence tables), wsa (Wᵀ, kdec, e^Γ_last), st (initial state, dtype
// state_dt, layout), wsu (U, [64, V4]). Writes: wsu (V_new), wsh (h, [K, V4] per chunk), outs (checkpoints
// and dense or staged final states, f32, in the caller's layout), st (in-place f32 pools).
//
// SAFETY (unchecked module): chunk rows c lie in [c_begin, c_end) of the sequence (< chunks);
// state rows, checkpoint slots and pool rows come from the host-built tables and were validated
// against the tensors' shapes (indices in 0..P, unique); every tensor access to (d, e) is guarded
// by d < K, e < V; workgroup indices: s_w < 16 * 16, s_kd < IT * K4 / 4 <= 256 (IT * K4 <= 1024),
// s_v < 64 * BV / 4 <= 512, s_s < 4 * (256 / (BV / 4)) * BV / 4 = 1024.

override HEAD_K: u32 = 64u;
override HEAD_V: u32 = 64u;
override BV: u32 = 32u;   // 16 (K <= 256) or 32 (K <= 128)

@group(0) @binding(0) var<uniform> prm: Params;
@group(0) @binding(1) var<storage, read> aux: array<u32>;
@group(0) @binding(2) var<storage, read> wsa: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read_write> wsu: array<f32>;
@group(0) @binding(4) var<storage, read_write> wsh: array<f32>;
@group(0) @binding(5) var<storage, read_write> st: array<u32>;
@group(0) @binding(6) var<storage, read_write> outs: array<f32>;

var<workgroup> s_s: array<vec4<f32>, 1024>;   // S slice [rows][BV / 4]
var<workgroup> s_v: array<vec4<f32>, 512>;    // V_new [64][BV / 4]
var<workgroup> s_t: array<vec4<f32>, 256>;    // Wᵀ tile [16][64 / 4] or kdec tile [IT][K4 / 4]
var<workgroup> s_mt: vec4<u32>;
var<workgroup> s_cm: vec2<u32>;

fn load_state(row: u32, hv: u32, d: u32, e: u32) -> f32 {
    let K = HEAD_K;
    let V = HEAD_V;
    let idx = (row * prm.vheads + hv) * K * V + state_offset(d, e, K, V, prm.state_layout);
    if (prm.state_dt == DT_F32) {
        return bitcast<f32>(st[idx]);
    }
    return decode16(st[idx >> 1u], idx, prm.state_dt);
}

// One vec4 of the Wᵀ tile of rows d0 .. d0 + 15 (1024 contiguous words; rows >= K read as 0).
fn w_tile(base_w: u32, d0: u32, tid: u32) -> vec4<f32> {
    if (d0 + tid / 16u < HEAD_K) {
        return wsa[(base_w + d0 * 64u) / 4u + tid];
    }
    return vec4<f32>(0.0);
}

// One vec4 of the kdec tile of token rows i0 .. i0 + it - 1 (rows of K4 words).
fn kd_tile(base_w: u32, i0: u32, tid: u32, it: u32) -> vec4<f32> {
    let k4w = k4(HEAD_K);
    if (tid < it * k4w / 4u) {
        return wsa[(base_w + ws_kd(HEAD_K) + i0 * k4w) / 4u + tid];
    }
    return vec4<f32>(0.0);
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
    let z = wid.z / prm.nvt;
    let vt = wid.z % prm.nvt;
    let hv = prm.hv0 + z;
    let HV = prm.vheads;
    let BQ = BV / 4u;                      // vec4 columns of the slice
    let IT = select(8u, 4u, K4 > 128u);    // kdec rows a tile
    let CW = BV / 16u;                     // W·S columns an invocation
    // W·S mapping
    let rg = tid / 16u;
    let cg = tid % 16u;
    // S mapping
    let sr = tid / BQ;
    let sc = tid % BQ;
    let e_s = vt * BV + 4u * sc;           // first global column of this invocation's S block
    let slot_words = ws_slot(K, prm.is_kda);
    if (tid == 0u) {
        let sb = prm.aux_seqs + 8u * n;
        s_mt = vec4<u32>(aux[sb + 2u], aux[sb + 3u], aux[sb + 4u], aux[sb + 5u]);
    }
    let mt = workgroupUniformLoad(&s_mt);
    let c_begin = mt.x;
    let c_end = mt.y;
    let init_row = mt.z;
    let final_row = mt.w;

    var sreg: array<vec4<f32>, 4>;
    for (var a = 0u; a < 4u; a++) {
        let d = 4u * sr + a;
        var x = vec4<f32>(0.0);
        if (d < K && prm.state_in == 1u && init_row != NONE) {
            for (var b = 0u; b < 4u; b++) {
                if (e_s + b < V) {
                    x[b] = load_state(init_row, hv, d, e_s + b);
                }
            }
        }
        sreg[a] = x;
        s_s[d * BQ + sc] = x;
    }

    for (var c = c_begin; c < c_end; c++) {
        if (tid == 0u) {
            s_cm = vec2<u32>(aux[prm.aux_chunks + 4u * c + 1u], aux[prm.aux_chunks + 4u * c + 3u]);
        }
        let cm = workgroupUniformLoad(&s_cm);   // also orders the s_s writes above
        let slot = c * prm.hvb + z;
        let base_w = slot * slot_words;        // multiple of 4
        let base_u = slot * 64u * V4;
        let base_h = slot * K * V4;

        // Issue this chunk's global reads early (the pass is latency bound: one workgroup per
        // SM walks the chunks in order): U for this invocation's V_new entries, e^Γ_last, and
        // the first Wᵀ tile; every later tile is fetched into a register while the current one
        // is multiplied.
        let c0 = CW * cg;
        var u_pre: array<vec2<f32>, 4>;
        for (var a = 0u; a < 4u; a++) {
            let i = 4u * rg + a;
            var u = vec2<f32>(0.0);
            for (var j = 0u; j < CW; j++) {
                let eg = vt * BV + c0 + j;
                if (eg < V && i < cm.x) {
                    u[j] = wsu[base_u + i * V4 + eg];
                }
            }
            u_pre[a] = u;
        }
        let gl = wsa[(base_w + ws_gl(K)) / 4u + min(sr, K4 / 4u - 1u)];
        var pre = w_tile(base_w, 0u, tid);

        // h[c] = S ([K][V4]; the padding columns hold the zeros of S beyond V)
        for (var a = 0u; a < 4u; a++) {
            let d = 4u * sr + a;
            if (d < K) {
                for (var b = 0u; b < 4u; b++) {
                    if (e_s + b < V4) {
                        wsh[base_h + d * V4 + e_s + b] = sreg[a][b];
                    }
                }
            }
        }

        // V_new = U − W·S: rows 4 rg + a, columns CW cg + j
        var acc: array<vec2<f32>, 4>;
        for (var a = 0u; a < 4u; a++) { acc[a] = vec2<f32>(0.0); }
        for (var d0 = 0u; d0 < K; d0 += 16u) {
            workgroupBarrier();
            s_t[tid] = pre;
            workgroupBarrier();
            if (d0 + 16u < K) {
                pre = w_tile(base_w, d0 + 16u, tid);
            } else {
                pre = kd_tile(base_w, 0u, tid, IT);
            }
            let dmax = min(16u, K - d0);
            for (var dd = 0u; dd < dmax; dd++) {
                let w = s_t[dd * 16u + rg];
                let sv4 = s_s[(d0 + dd) * BQ + c0 / 4u];
                var sv: vec2<f32>;
                if (CW == 2u) {
                    sv = select(sv4.xy, sv4.zw, (c0 & 2u) != 0u);
                } else {
                    sv = vec2<f32>(sv4[c0 & 3u], 0.0);
                }
                acc[0] += w.x * sv;
                acc[1] += w.y * sv;
                acc[2] += w.z * sv;
                acc[3] += w.w * sv;
            }
        }
        for (var a = 0u; a < 4u; a++) {
            let i = 4u * rg + a;
            for (var j = 0u; j < CW; j++) {
                let el = c0 + j;
                let eg = vt * BV + el;
                var vn = 0.0;
                if (eg < V && i < cm.x) {
                    vn = u_pre[a][j] - acc[a][j];
                    wsu[base_u + i * V4 + eg] = vn;
                }
                s_v[i * BQ + el / 4u][el & 3u] = vn;
            }
        }

        // S ← e^Γ_last ⊙ S + kdecᵀ·V_new, kdec in tiles of IT rows
        for (var a = 0u; a < 4u; a++) {
            sreg[a] = sreg[a] * gl[a];
        }
        let KQ = K4 / 4u;
        for (var i0 = 0u; i0 < 64u; i0 += IT) {
            workgroupBarrier();
            s_t[tid] = pre;
            workgroupBarrier();
            if (i0 + IT < 64u) {
                pre = kd_tile(base_w, i0 + IT, tid, IT);
            }
            if (sr < KQ) {
                for (var ii = 0u; ii < IT; ii++) {
                    let kd = s_t[ii * KQ + sr];
                    let vv = s_v[(i0 + ii) * BQ + sc];
                    sreg[0] += kd.x * vv;
                    sreg[1] += kd.y * vv;
                    sreg[2] += kd.z * vv;
                    sreg[3] += kd.w * vv;
                }
            }
        }
        for (var a = 0u; a < 4u; a++) {
            s_s[(4u * sr + a) * BQ + sc] = sreg[a];
        }

        // checkpoint after this chunk
        if (prm.ckpt == 1u && cm.y != NONE) {
            let cbase = prm.off_ckpt + (cm.y * HV + hv) * K * V;
            for (var a = 0u; a < 4u; a++) {
                let d = 4u * sr + a;
                for (var b = 0u; b < 4u; b++) {
                    if (d < K && e_s + b < V) {
                        outs[cbase + state_offset(d, e_s + b, K, V, prm.state_layout)] = sreg[a][b];
                    }
                }
            }
        }
        workgroupBarrier();
    }

    if (final_row != NONE) {
        let fbase = (final_row * HV + hv) * K * V;
        for (var a = 0u; a < 4u; a++) {
            let d = 4u * sr + a;
            for (var b = 0u; b < 4u; b++) {
                if (d < K && e_s + b < V) {
                    let o = fbase + state_offset(d, e_s + b, K, V, prm.state_layout);
                    if (prm.final_mode == 1u) {
                        outs[prm.off_final + o] = sreg[a][b];
                    } else if (prm.final_mode == 2u) {
                        st[o] = bitcast<u32>(sreg[a][b]);
                    }
                }
            }
        }
    }
}

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
// Grid: x + y * grid_n = sequence n, z = (hv − hv0) * nvt + value tile. 256 invocations:
// column e = tid % BV, state rows d = tid / BV + r * (256 / BV), r < NR.
// Reads: aux (chunk and sequence tables), wsa (W, kdec, e^Γ_last), st (initial state, dtype
// state_dt, layout), wsu (U). Writes: wsu (V_new), wsh (h, [K, V] per chunk), outs (checkpoints
// and dense or staged final states, f32, in the caller's layout), st (in-place f32 pools).
//
// SAFETY (unchecked module): chunk rows c lie in [c_begin, c_end) of the sequence (< chunks);
// state rows, checkpoint slots and pool rows come from the host-built tables and were validated
// against the tensors' shapes (indices in 0..P, unique); every access to d, e is guarded by
// d < K, e < V; workgroup indices: i < 64, dd < 16, d < NR * (256 / BV) <= 4096 / BV, kdec tiles
// IT * K <= 1024.

override HEAD_K: u32 = 64u;
override HEAD_V: u32 = 64u;
override BV: u32 = 32u;   // 16 or 32, with K <= 4096 / BV

@group(0) @binding(0) var<uniform> prm: Params;
@group(0) @binding(1) var<storage, read> aux: array<u32>;
@group(0) @binding(2) var<storage, read> wsa: array<f32>;
@group(0) @binding(3) var<storage, read_write> wsu: array<f32>;
@group(0) @binding(4) var<storage, read_write> wsh: array<f32>;
@group(0) @binding(5) var<storage, read_write> st: array<u32>;
@group(0) @binding(6) var<storage, read_write> outs: array<f32>;

var<workgroup> s_s: array<f32, 4096>;   // S slice [rows][BV]
var<workgroup> s_v: array<f32, 2048>;   // V_new [64][BV]
var<workgroup> s_t: array<f32, 1088>;   // W tile [64][17] or kdec tile [IT][K] (IT * K <= 1024)
var<workgroup> s_meta: vec4<u32>;
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

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) tid: u32) {
    let n = wid.x + wid.y * prm.grid_n;
    if (n >= prm.seqs) {
        return;
    }
    let K = HEAD_K;
    let V = HEAD_V;
    let z = wid.z / prm.nvt;
    let vt = wid.z % prm.nvt;
    let hv = prm.hv0 + z;
    let HV = prm.vheads;
    let RS = 256u / BV;
    let IT = select(8u, 4u, K > 128u);
    let NR = (K + RS - 1u) / RS;
    let e = tid % BV;
    let r0 = tid / BV;
    let eg = vt * BV + e;
    let ev = eg < V;
    let sa_stride = wsa_stride();
    if (tid == 0u) {
        let sb = prm.aux_seqs + 8u * n;
        s_meta = vec4<u32>(aux[sb + 2u], aux[sb + 3u], aux[sb + 4u], aux[sb + 5u]);
    }
    let mt = workgroupUniformLoad(&s_meta);
    let c_begin = mt.x;
    let c_end = mt.y;
    let init_row = mt.z;
    let final_row = mt.w;

    var sreg: array<f32, 16>;
    for (var r = 0u; r < 16u; r++) {
        let d = r0 + r * RS;
        var x = 0.0;
        if (r < NR && d < K && ev && prm.state_in == 1u && init_row != NONE) {
            x = load_state(init_row, hv, d, eg);
        }
        sreg[r] = x;
        if (r < NR) {
            s_s[d * BV + e] = x;
        }
    }

    for (var c = c_begin; c < c_end; c++) {
        if (tid == 0u) {
            s_cm = vec2<u32>(aux[prm.aux_chunks + 4u * c + 1u], aux[prm.aux_chunks + 4u * c + 3u]);
        }
        let cm = workgroupUniformLoad(&s_cm);   // also orders the s_s writes above
        let slot = c * prm.hvb + z;
        let base_w = slot * sa_stride;
        let base_kd = base_w + 64u * K;
        let base_gl = base_w + 192u * K + 4096u;
        let base_u = slot * 64u * V;
        let base_h = slot * K * V;

        // h[c] = S
        if (ev) {
            for (var r = 0u; r < NR; r++) {
                let d = r0 + r * RS;
                if (d < K) {
                    wsh[base_h + d * V + eg] = sreg[r];
                }
            }
        }

        // V_new = U − W·S, rows i = r0 + a * RS
        var acc: array<f32, 8>;
        for (var a = 0u; a < 8u; a++) { acc[a] = 0.0; }
        let NA = 64u / RS;
        for (var d0 = 0u; d0 < K; d0 += 16u) {
            for (var q = 0u; q < 4u; q++) {
                let idx = tid + 256u * q;
                let i = idx / 16u;
                let dd = idx % 16u;
                var w = 0.0;
                if (d0 + dd < K) {
                    w = wsa[base_w + i * K + d0 + dd];
                }
                s_t[i * 17u + dd] = w;
            }
            workgroupBarrier();
            let dmax = min(16u, K - d0);
            for (var dd = 0u; dd < dmax; dd++) {
                let sv = s_s[(d0 + dd) * BV + e];
                for (var a = 0u; a < NA; a++) {
                    acc[a] += s_t[(r0 + a * RS) * 17u + dd] * sv;
                }
            }
            workgroupBarrier();
        }
        for (var a = 0u; a < NA; a++) {
            let i = r0 + a * RS;
            var vn = 0.0;
            if (ev && i < cm.x) {
                vn = wsu[base_u + i * V + eg] - acc[a];
                wsu[base_u + i * V + eg] = vn;
            }
            s_v[i * BV + e] = vn;
        }

        // S ← e^Γ_last ⊙ S + kdecᵀ·V_new, kdec in tiles of IT rows
        for (var r = 0u; r < NR; r++) {
            let d = r0 + r * RS;
            if (d < K) {
                sreg[r] = sreg[r] * wsa[base_gl + d];
            }
        }
        for (var i0 = 0u; i0 < 64u; i0 += IT) {
            workgroupBarrier();
            for (var idx = tid; idx < IT * K; idx += 256u) {
                s_t[idx] = wsa[base_kd + i0 * K + idx];
            }
            workgroupBarrier();
            for (var ii = 0u; ii < IT; ii++) {
                let vv = s_v[(i0 + ii) * BV + e];
                for (var r = 0u; r < NR; r++) {
                    let d = r0 + r * RS;
                    if (d < K) {
                        sreg[r] += s_t[ii * K + d] * vv;
                    }
                }
            }
        }
        for (var r = 0u; r < NR; r++) {
            let d = r0 + r * RS;
            s_s[d * BV + e] = sreg[r];
        }

        // checkpoint after this chunk
        if (prm.ckpt == 1u && cm.y != NONE && ev) {
            let cbase = prm.off_ckpt + (cm.y * HV + hv) * K * V;
            for (var r = 0u; r < NR; r++) {
                let d = r0 + r * RS;
                if (d < K) {
                    outs[cbase + state_offset(d, eg, K, V, prm.state_layout)] = sreg[r];
                }
            }
        }
        workgroupBarrier();
    }

    if (final_row != NONE && ev) {
        let fbase = (final_row * HV + hv) * K * V;
        for (var r = 0u; r < NR; r++) {
            let d = r0 + r * RS;
            if (d < K) {
                let o = fbase + state_offset(d, eg, K, V, prm.state_layout);
                if (prm.final_mode == 1u) {
                    outs[prm.off_final + o] = sreg[r];
                } else if (prm.final_mode == 2u) {
                    st[o] = bitcast<u32>(sreg[r]);
                }
            }
        }
    }
}

fn wsa_stride() -> u32 {
    // gdn: W, kdec, qdec [64, K], P [64, 64], e^Γ_last [K]; kda adds Γ [64, K]
    return prm.wsa_blocks * 64u * HEAD_K + 4096u + HEAD_K;
}

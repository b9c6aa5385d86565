// decode.wgsl: the token recurrence (docs/spec.md) for decode (T >= 1 tokens per sequence,
// speculative verify included), gdn or kda by the IS_KDA override. One workgroup per (sequence,
// value head, 32-column value tile); 256 invocations: column e = tid % 32, rows d = tid / 32 + 8 r
// of the state slice in registers. Per token: S = D S; u = beta (v − Sᵀk); S += k uᵀ;
// o = scale Sᵀq, with the column sums reduced through workgroup memory.
//
// Grid: x + y * grid_n = sequence n, z = (hv − hv0) * nvt + value tile (nvt = ceil(V / 32)).
// Reads: q, k [T, H, K], v [T, HV, V] (QKV_DT), g (gdn [T, HV], kda [T, HV, K]; G_DT),
// beta [T, HV] (BETA_DT), aux (sequence table, A_log, dt_bias), st (initial state).
// Writes: outs (o at off_o, checkpoints at off_ckpt, dense or staged final states at off_final,
// f32), st (in-place f32 pools).
//
// SAFETY (unchecked module): tokens t lie in [t_begin, t_end) of a validated cu_seqlens; heads
// h < H, hv < HV; d < K <= 256 and e < V guard every tensor access; pool rows, checkpoint slots
// and staging rows come from validated indices; workgroup indices are < 256.

override HEAD_K: u32 = 64u;
override HEAD_V: u32 = 64u;
override IS_KDA: bool = false;

// bindings 0-6 (prm, aux, q, k, v, g, beta), the QKV_DT/G_DT/BETA_DT overrides and the
// loaders ld/ld_g/ld_beta come from the inputs prelude (inputs.wgsl).
@group(0) @binding(7) var<storage, read_write> st: array<u32>;
@group(0) @binding(8) var<storage, read_write> outs: array<f32>;

var<workgroup> s_q: array<f32, 256>;
var<workgroup> s_k: array<f32, 256>;
var<workgroup> s_g: array<f32, 256>;
var<workgroup> s_red: array<f32, 256>;
var<workgroup> s_u: array<f32, 32>;
var<workgroup> s_sc: array<f32, 4>;   // beta, 1/|q|, 1/|k|, gdn log decay
var<workgroup> s_meta: vec4<u32>;
var<workgroup> s_meta2: u32;

fn load_state(row: u32, hv: u32, d: u32, e: u32) -> f32 {
    let idx = (row * prm.vheads + hv) * HEAD_K * HEAD_V + state_offset(d, e, HEAD_K, HEAD_V, prm.state_layout);
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
    let HV = prm.vheads;
    let z = wid.z / prm.nvt;
    let vt = wid.z % prm.nvt;
    let hv = prm.hv0 + z;
    let h = hv / prm.group;
    let col = tid % 32u;
    let slice = tid / 32u;
    let eg = vt * 32u + col;
    let ev = eg < V;
    let NR = (K + 7u) / 8u;
    if (tid == 0u) {
        let sb = prm.aux_seqs + 8u * n;
        s_meta = vec4<u32>(aux[sb], aux[sb + 1u], aux[sb + 4u], aux[sb + 5u]);
        s_meta2 = aux[sb + 6u];
    }
    let mt = workgroupUniformLoad(&s_meta);
    let ckpt_base = workgroupUniformLoad(&s_meta2);
    let t_begin = mt.x;
    let t_end = mt.y;
    let init_row = mt.z;
    let final_row = mt.w;
    var a_exp = 1.0;
    if (prm.has_a_log == 1u) {
        a_exp = exp(bitcast<f32>(aux[prm.aux_params + hv]));
    }

    var sreg: array<f32, 32>;
    for (var r = 0u; r < 32u; r++) {
        let d = slice + 8u * r;
        var x = 0.0;
        if (r < NR && d < K && ev && prm.state_in == 1u && init_row != NONE) {
            x = load_state(init_row, hv, d, eg);
        }
        sreg[r] = x;
    }

    for (var t = t_begin; t < t_end; t++) {
        if (tid < K) {
            let e = (t * prm.heads + h) * K + tid;
            s_q[tid] = ld(0u, e);
            s_k[tid] = ld(1u, e);
            if (IS_KDA) {
                var bias = 0.0;
                if (prm.gate != 0u) {
                    bias = bitcast<f32>(aux[prm.aux_params + HV + hv * K + tid]);
                }
                s_g[tid] = gate_value(ld_g((t * HV + hv) * K + tid), prm.gate, a_exp, bias,
                    prm.has_a_log, prm.lb);
            }
        }
        if (tid == 0u) {
            s_sc[0] = beta_value(ld_beta(t * HV + hv), prm.beta_mode);
            if (!IS_KDA) {
                var bias = 0.0;
                if (prm.gate != 0u) {
                    bias = bitcast<f32>(aux[prm.aux_params + HV + hv]);
                }
                s_sc[3] = gate_value(ld_g(t * HV + hv), prm.gate, a_exp, bias, prm.has_a_log,
                    prm.lb);
            }
        }
        workgroupBarrier();
        if (tid == 0u || tid == 32u) {
            var r = 1.0;
            if (prm.l2norm == 1u) {
                var ss = 0.0;
                for (var d = 0u; d < K; d++) {
                    var x: f32;
                    if (tid == 0u) { x = s_q[d]; } else { x = s_k[d]; }
                    ss += x * x;
                }
                r = 1.0 / sqrt(ss + 1e-6);
            }
            if (tid == 0u) { s_sc[1] = r; } else { s_sc[2] = r; }
        }
        workgroupBarrier();
        let rq = s_sc[1];
        let rk = s_sc[2];
        // S = D S, then the column sums of Sᵀk
        var dg = 0.0;
        if (!IS_KDA) {
            dg = exp(s_sc[3]);
        }
        var p = 0.0;
        for (var r = 0u; r < NR; r++) {
            let d = slice + 8u * r;
            if (d < K) {
                var dec = dg;
                if (IS_KDA) {
                    dec = exp(s_g[d]);
                }
                sreg[r] = sreg[r] * dec;
                p += sreg[r] * s_k[d];
            }
        }
        s_red[tid] = p * rk;
        workgroupBarrier();
        if (tid < 32u) {
            var sum = 0.0;
            for (var s = 0u; s < 8u; s++) {
                sum += s_red[col + 32u * s];
            }
            var vv = 0.0;
            if (ev) {
                vv = ld(2u, (t * HV + hv) * V + eg);
            }
            s_u[col] = s_sc[0] * (vv - sum);
        }
        workgroupBarrier();
        let u = s_u[col];
        p = 0.0;
        for (var r = 0u; r < NR; r++) {
            let d = slice + 8u * r;
            if (d < K) {
                sreg[r] += s_k[d] * rk * u;
                p += sreg[r] * s_q[d];
            }
        }
        s_red[tid] = p * rq;
        workgroupBarrier();
        if (tid < 32u && ev) {
            var sum = 0.0;
            for (var s = 0u; s < 8u; s++) {
                sum += s_red[col + 32u * s];
            }
            outs[prm.off_o + (t * HV + hv) * V + eg] = prm.scale * sum;
        }
        let done = t + 1u - t_begin;
        if (prm.ckpt == 1u && prm.every != 0u && done % prm.every == 0u && ev) {
            let cbase = prm.off_ckpt + ((ckpt_base + done / prm.every - 1u) * HV + hv) * K * V;
            for (var r = 0u; r < NR; r++) {
                let d = slice + 8u * r;
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
            let d = slice + 8u * r;
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

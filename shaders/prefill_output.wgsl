// prefill_output.wgsl: the chunk-parallel output pass of the chunked prefill (SPEC.md section 5,
// step 5), shared by gdn and kda: O = qdec·h[c] + P·V_new for the L rows of chunk c, where
// qdec = scale q e^Γ, P the masked intra-chunk read-out matrix and V_new, h[c] come from the state
// pass. One workgroup per (chunk, value head, 64-column value tile); 256 invocations with a
// 4 x 4 block each (rows 4 ty.., columns 4 tx..). The reduction operands are staged as vec4 tiles
// (qdecᵀ and Pᵀ rows of 64 tokens, h and V_new rows padded to V4 columns), so each step is two
// vector loads for 16 multiply-adds.
//
// Grid: x + y * grid_c = chunk c, z = (hv − hv0) * nvt + value tile (nvt = ceil(V / 64)).
// Writes: outs[off_o + ((t0 + i) * HV + hv) * V + e] (f32) for i < L, e < V; or, when pack_dt
// names bf16/f16 (the host sets it only for even V, so a word never straddles two rows), the
// rounded pairs (e, e + 1) straight into the caller's 16-bit o (o16), skipping the pack pass.
//
// SAFETY (unchecked module): c < chunks and t0 + L <= T from the chunk table; workspace slots
// (c * hvb + z) were sized by the host (wsa: ws_slot words, wsu: 64 x V4, wsh: K x V4 a slot, all
// vec4 aligned); tile loads are guarded by d < K and e < V4; workgroup tiles have 256 vec4s.

override HEAD_K: u32 = 64u;
override HEAD_V: u32 = 64u;

@group(0) @binding(0) var<uniform> prm: Params;
@group(0) @binding(1) var<storage, read> aux: array<u32>;
@group(0) @binding(2) var<storage, read> wsa: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read> wsu: array<vec4<f32>>;
@group(0) @binding(4) var<storage, read> wsh: array<vec4<f32>>;
@group(0) @binding(5) var<storage, read_write> outs: array<f32>;
@group(0) @binding(6) var<storage, read_write> o16: array<u32>;

var<workgroup> s_a: array<vec4<f32>, 256>;   // [16][64 / 4]: qdecᵀ or Pᵀ rows
var<workgroup> s_b: array<vec4<f32>, 256>;   // [16][64 / 4]: h or V_new rows
var<workgroup> s_mt: vec2<u32>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) tid: u32) {
    let c = wid.x + wid.y * prm.grid_c;
    if (c >= prm.chunks) {
        return;
    }
    let K = HEAD_K;
    let V = HEAD_V;
    let V4 = k4(V);
    let z = wid.z / prm.nvt;
    let vt = wid.z % prm.nvt;
    let hv = prm.hv0 + z;
    let e0 = vt * 64u;
    if (tid == 0u) {
        s_mt = vec2<u32>(aux[prm.aux_chunks + 4u * c], aux[prm.aux_chunks + 4u * c + 1u]);
    }
    let mt = workgroupUniformLoad(&s_mt);
    let t0 = mt.x;
    let L = mt.y;
    let slot = c * prm.hvb + z;
    let base_w = slot * ws_slot(K, prm.is_kda);
    let q_qd = (base_w + ws_qd(K)) / 4u;   // vec4 index of qdecᵀ
    let q_p = (base_w + ws_p(K)) / 4u;     // vec4 index of Pᵀ
    let q_u = slot * 16u * V4;             // vec4 index of V_new [64][V4]
    let q_h = slot * K * V4 / 4u;          // vec4 index of h [K][V4]
    let ty = tid / 16u;
    let tx = tid % 16u;
    let lr = tid / 16u;                    // tile row this invocation loads
    let lc = tid % 16u;                    // tile vec4 column this invocation loads
    let le = e0 + 4u * lc;                 // first value column of that vec4
    var acc: array<vec4<f32>, 4>;
    for (var a = 0u; a < 4u; a++) { acc[a] = vec4<f32>(0.0); }

    // qdec·h
    for (var d0 = 0u; d0 < K; d0 += 16u) {
        let d = d0 + lr;
        var av = vec4<f32>(0.0);
        var bv = vec4<f32>(0.0);
        if (d < K) {
            av = wsa[q_qd + d * 16u + lc];
            if (le < V4) {
                bv = wsh[q_h + (d * V4 + le) / 4u];
            }
        }
        s_a[tid] = av;
        s_b[tid] = bv;
        workgroupBarrier();
        let dmax = min(16u, K - d0);
        for (var dd = 0u; dd < dmax; dd++) {
            let x = s_a[dd * 16u + ty];
            let y = s_b[dd * 16u + tx];
            acc[0] += x.x * y;
            acc[1] += x.y * y;
            acc[2] += x.z * y;
            acc[3] += x.w * y;
        }
        workgroupBarrier();
    }

    // P·V_new over the L rows (Pᵀ is zero where j > i and beyond L; V_new rows >= L are zero)
    for (var j0 = 0u; j0 < L; j0 += 16u) {
        let j = j0 + lr;
        s_a[tid] = wsa[q_p + j * 16u + lc];
        var bv = vec4<f32>(0.0);
        if (le < V4) {
            bv = wsu[q_u + (j * V4 + le) / 4u];
        }
        s_b[tid] = bv;
        workgroupBarrier();
        if (ty * 4u + 3u >= j0) {
            for (var jj = 0u; jj < 16u; jj++) {
                let x = s_a[jj * 16u + ty];
                let y = s_b[jj * 16u + tx];
                acc[0] += x.x * y;
                acc[1] += x.y * y;
                acc[2] += x.z * y;
                acc[3] += x.w * y;
            }
        }
        workgroupBarrier();
    }

    for (var a = 0u; a < 4u; a++) {
        let i = ty * 4u + a;
        if (i < L) {
            let row = ((t0 + i) * prm.vheads + hv) * V;
            if (prm.pack_dt != 0u) {
                for (var b = 0u; b < 4u; b += 2u) {
                    let e = e0 + tx * 4u + b;
                    if (e < V) {
                        o16[(row + e) / 2u] = encode16(acc[a][b], prm.pack_dt)
                            | (encode16(acc[a][b + 1u], prm.pack_dt) << 16u);
                    }
                }
            } else {
                for (var b = 0u; b < 4u; b++) {
                    let e = e0 + tx * 4u + b;
                    if (e < V) {
                        outs[prm.off_o + row + e] = acc[a][b];
                    }
                }
            }
        }
    }
}

// prefill_output.wgsl: the chunk-parallel output pass of the `chunked` kernel's prefill
// (docs/spec.md, the chunked algorithm, step 5), shared by gdn and kda: O = qdec·h[c] + P·V_new
// for the L rows of chunk c, where qdec = scale q e^Γ, P the masked intra-chunk read-out matrix
// and V_new, h[c] come from the state pass (the `coop` kernel's state pass computes o itself). One workgroup per (chunk, value head, 64-column value tile); 256 invocations with a
// 4 x 4 block each (rows 4 ty.., columns 4 tx..). The reduction operands are staged as vec4 tiles
// (qdecᵀ and Pᵀ rows of 64 tokens, h and V_new rows padded to V4 columns), so each step is two
// vector loads for 16 multiply-adds.
//
// Grid: x + y * grid_c = chunk c, z = (hv − hv0) * nvt + value tile (nvt = ceil(V / 64)).
// Writes: outs[off_o + ((t0 + i) * HV + hv) * V + e] (f32) for i < L, e < V; or, when pack_dt
// names bf16/f16 (the host sets it only for even V, so a word never straddles two rows), the
// rounded pairs (e, e + 1) straight into the caller's 16-bit o (o16), skipping the pack pass.
//
// The qdecᵀ/h and Pᵀ/V_new tiles are one stream whose next tile is loaded into registers
// (unconditionally, at clamped indices, zeroed by selection) while the current one is
// multiplied, so no tile waits on its global loads; the accumulators are named vec4s.
//
// SAFETY (unchecked module): c < chunks and t0 + L <= T from the chunk table; workspace slots
// (c * hvb + z) were sized by the host (wsa: ws_slot words, wsu: 64 x V4, wsh: K x V4 a slot, all
// vec4 aligned); tile loads read row min(d, K − 1) and column e < V4 (else column 0) and are
// zeroed outside, P/V_new rows j < 64; workgroup tiles have 256 vec4s; put_o4 writes rows i < L
// of the chunk and columns e < V: outs[off_o + ((t0 + i) HV + hv) V + e] (f32), or the 16-bit
// pairs (e, e + 1) of o16 when pack_dt is set (the host sets it only for even V).

override HEAD_K: u32 = 64u;
override HEAD_V: u32 = 64u;

@group(0) @binding(0) var<uniform> prm: Params;
@group(0) @binding(1) var<storage, read> aux: array<u32>;
@group(0) @binding(2) var<storage, read> wsa: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read> wsu: array<vec4<f32>>;
@group(0) @binding(4) var<storage, read> wsh: array<vec4<f32>>;
@group(0) @binding(5) var<storage, read_write> outs: array<f32>;
@group(0) @binding(6) var<storage, read_write> o16: array<u32>;

// Rows 4 ty .. 4 ty + 3 (a0 .. a3), columns e0 + 4 tx .. + 3 of the chunk's o tile: f32 into
// outs, or rounded to the caller's 16-bit dtype straight into o16 (pack_dt).
fn put_o4(t0: u32, L: u32, hv: u32, e0: u32, ty: u32, tx: u32, a0: vec4<f32>, a1: vec4<f32>, a2: vec4<f32>, a3: vec4<f32>) {
    let V = HEAD_V;
    for (var a = 0u; a < 4u; a++) {
        let i = ty * 4u + a;
        var ov = a0;
        if (a == 1u) { ov = a1; } else if (a == 2u) { ov = a2; } else if (a == 3u) { ov = a3; }
        if (i < L) {
            let row = ((t0 + i) * prm.vheads + hv) * V;
            if (prm.pack_dt != 0u) {
                for (var b = 0u; b < 4u; b += 2u) {
                    let e = e0 + tx * 4u + b;
                    if (e < V) {
                        o16[(row + e) / 2u] = encode16(ov[b], prm.pack_dt)
                            | (encode16(ov[b + 1u], prm.pack_dt) << 16u);
                    }
                }
            } else {
                for (var b = 0u; b < 4u; b++) {
                    let e = e0 + tx * 4u + b;
                    if (e < V) {
                        outs[prm.off_o + row + e] = ov[b];
                    }
                }
            }
        }
    }
}

var<workgroup> s_a: array<vec4<f32>, 256>;   // [16][64 / 4]: qdecᵀ or Pᵀ rows
var<workgroup> s_b: array<vec4<f32>, 256>;   // [16][64 / 4]: h or V_new rows
var<workgroup> s_mt: vec2<u32>;

// The two vec4s this invocation stages for tile tt of the stream: tiles 0 .. nk − 1 are
// (qdecᵀ, h) rows d = 16 tt + lr, the rest (Pᵀ, V_new) rows j = 16 (tt − nk) + lr.
fn tile_a(tt: u32, nk: u32, lr: u32, lc: u32, q_qd: u32, q_p: u32) -> vec4<f32> {
    if (tt < nk) {
        let d = 16u * tt + lr;
        let x = wsa[q_qd + min(d, HEAD_K - 1u) * 16u + lc];
        return select(vec4<f32>(0.0), x, d < HEAD_K);
    }
    return wsa[q_p + (16u * (tt - nk) + lr) * 16u + lc];
}

fn tile_b(tt: u32, nk: u32, lr: u32, le: u32, q_h: u32, q_u: u32) -> vec4<f32> {
    let V4 = k4(HEAD_V);
    let ok = le < V4;
    let e = select(0u, le, ok);
    if (tt < nk) {
        let d = 16u * tt + lr;
        let x = wsh[q_h + (min(d, HEAD_K - 1u) * V4 + e) / 4u];
        return select(vec4<f32>(0.0), x, ok && d < HEAD_K);
    }
    let x = wsu[q_u + ((16u * (tt - nk) + lr) * V4 + e) / 4u];
    return select(vec4<f32>(0.0), x, ok);
}

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
    var a0 = vec4<f32>(0.0);
    var a1 = vec4<f32>(0.0);
    var a2 = vec4<f32>(0.0);
    var a3 = vec4<f32>(0.0);

    // qdec·h over nk tiles of 16 channels, then P·V_new over the L rows (Pᵀ is zero where j > i
    // and beyond L; V_new rows >= L are zero)
    let nk = (K + 15u) / 16u;
    let ntot = nk + (L + 15u) / 16u;
    var av = tile_a(0u, nk, lr, lc, q_qd, q_p);
    var bv = tile_b(0u, nk, lr, le, q_h, q_u);
    for (var tt = 0u; tt < ntot; tt++) {
        s_a[tid] = av;
        s_b[tid] = bv;
        workgroupBarrier();
        let tn = min(tt + 1u, ntot - 1u);
        av = tile_a(tn, nk, lr, lc, q_qd, q_p);
        bv = tile_b(tn, nk, lr, le, q_h, q_u);
        var dmax = 16u;
        if (tt < nk) {
            dmax = min(16u, K - 16u * tt);
        } else if (ty * 4u + 3u < 16u * (tt - nk)) {
            dmax = 0u;   // this block's rows lie above the tile's first column: Pᵀ is zero
        }
        for (var dd = 0u; dd < dmax; dd++) {
            let x = s_a[dd * 16u + ty];
            let y = s_b[dd * 16u + tx];
            a0 += x.x * y;
            a1 += x.y * y;
            a2 += x.z * y;
            a3 += x.w * y;
        }
        workgroupBarrier();
    }

    put_o4(t0, L, hv, e0, ty, tx, a0, a1, a2, a3);
}

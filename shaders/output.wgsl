// output.wgsl: the prelude of the output-pass stage prefill_output.wgsl: bindings and the writer
// of o (kept apart so that a second output stage, e.g. on cooperative matrices, shares them).
//
// SAFETY (unchecked modules): put_o4 writes rows i < L of the chunk (t0 + i < T from the chunk
// table) and columns e < V: outs[off_o + ((t0 + i) HV + hv) V + e] (f32), or the 16-bit pairs
// (e, e + 1) of o16 when pack_dt is set (the host sets it only for even V).

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

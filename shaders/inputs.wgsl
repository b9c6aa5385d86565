// inputs.wgsl: the prelude of the stages that read the call's inputs (gdn/kda intra, decode),
// concatenated after common.wgsl by `Shader::source`. It holds their shared bindings 0-6, the dtype
// overrides and the loaders of q/k/v, g and beta from u32 words in the caller's dtype.
//
// SAFETY (unchecked modules): the loaders index with the element offsets their callers compute;
// each stage's header states why those are in range.

override QKV_DT: u32 = 0u;
override G_DT: u32 = 0u;
override BETA_DT: u32 = 0u;

@group(0) @binding(0) var<uniform> prm: Params;
@group(0) @binding(1) var<storage, read> aux: array<u32>;
@group(0) @binding(2) var<storage, read> qb: array<u32>;
@group(0) @binding(3) var<storage, read> kb: array<u32>;
@group(0) @binding(4) var<storage, read> vb: array<u32>;
@group(0) @binding(5) var<storage, read> gb: array<u32>;
@group(0) @binding(6) var<storage, read> bb: array<u32>;

fn ld(buf_id: u32, e: u32) -> f32 {
    // buf_id: 0 q, 1 k, 2 v (all QKV_DT)
    var w: u32;
    if (QKV_DT == DT_F32) {
        if (buf_id == 0u) { w = qb[e]; } else if (buf_id == 1u) { w = kb[e]; } else { w = vb[e]; }
        return bitcast<f32>(w);
    }
    if (buf_id == 0u) { w = qb[e >> 1u]; } else if (buf_id == 1u) { w = kb[e >> 1u]; } else { w = vb[e >> 1u]; }
    return decode16(w, e, QKV_DT);
}

fn ld_g(e: u32) -> f32 {
    if (G_DT == DT_F32) { return bitcast<f32>(gb[e]); }
    return decode16(gb[e >> 1u], e, G_DT);
}

fn ld_beta(e: u32) -> f32 {
    if (BETA_DT == DT_F32) { return bitcast<f32>(bb[e]); }
    return decode16(bb[e >> 1u], e, BETA_DT);
}

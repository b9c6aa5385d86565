// ws16_gdn.wgsl: the f16 workspace prelude of the `coop` kernel's gdn intra stage (after
// intra.wgsl; ws16_on.wgsl is the kda variant's, which is not a cooperative-matrix module and so
// writes f16 as packed u32 words). This module has `enable f16`, so ws16 is an array of f16 and
// every value is rounded by the hardware conversion. Slot layout: common.wgsl's ws16_slot (gdn:
// Wᵀ, kdec, qdecᵀ, Pᵀ here; h and V_new from the state pass).
//
// SAFETY (unchecked module): indices stay in slot (c hvb + z) of ws16_slot(K, V) halves, which
// the host sized for hvb x chunks slots: kdec 64 K + m K + d0 + 3 < 128 K (m < 64, d0 + 3 < K),
// Wᵀ d 64 + i + 3 < 64 K (d < K, i <= 60), Pᵀ ws16_p + j 64 + i < ws16_p + 4096 (i, j < 64),
// qdecᵀ ws16_qd + d 64 + i < ws16_p (d < K, i < 64).

@group(0) @binding(9) var<storage, read_write> ws16: array<f16>;
var<private> p_base16: u32;   // first half of this (chunk, head) slot in ws16 (set_base16)

fn set_base16(slot: u32) {
    p_base16 = slot * ws16_slot(HEAD_K, HEAD_V);
}

// kdec row m, channels d0 .. d0 + 3 as f16 (always written here).
fn put_kdec16(m: u32, d0: u32, kd: vec4<f32>) -> bool {
    let o = p_base16 + 64u * HEAD_K + m * HEAD_K + d0;
    ws16[o] = f16(kd.x);
    ws16[o + 1u] = f16(kd.y);
    ws16[o + 2u] = f16(kd.z);
    ws16[o + 3u] = f16(kd.w);
    return true;
}

// Wᵀ[d][4 g .. 4 g + 3] as f16 (intra.wgsl's store_w; the coop step 4 writes Wᵀ itself).
fn store_w16(g: u32, cq: u32, c0: u32, b: Blk, l: u32) -> bool {
    let i = 4u * g;
    for (var e = 0u; e < 4u; e++) {
        let d = c0 + 4u * cq + e;
        if (d < HEAD_K) {
            let o = p_base16 + d * 64u + i;
            ws16[o] = f16(select(0.0, b.a0[e], i < l));
            ws16[o + 1u] = f16(select(0.0, b.a1[e], i + 1u < l));
            ws16[o + 2u] = f16(select(0.0, b.a2[e], i + 2u < l));
            ws16[o + 3u] = f16(select(0.0, b.a3[e], i + 3u < l));
        }
    }
    return true;
}

// (intra.wgsl's store_qd and kda's hooks, unused by the gdn coop stage: it writes qdecᵀ itself)
fn put_qd16(d: u32, i: u32, x: f32) -> bool {
    return false;
}

// Pᵀ[j][i] (the stage's put_ap; no f32 copy: the coop output pass reads this one).
fn put_p(base_p: u32, i: u32, j: u32, pv: f32) {
    ws16[p_base16 + ws16_p(HEAD_K) + j * 64u + i] = f16(pv);
}

// solve_t (intra.wgsl) skips the packed triangular Tᵀ: the coop step 4 builds its f16 T from s_at
// (gdn_intra_coop.wgsl), so the 544 vec4 stores were never read (session 8's review).
const PACK_T: bool = false;

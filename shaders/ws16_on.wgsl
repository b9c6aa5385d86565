// ws16_on.wgsl: the last prelude of the `coop` kernel's kda intra stage (after intra.wgsl; the
// stage is not a cooperative-matrix module, but the kernel needs f16 anyway, so it opens with
// `enable f16` and ws16 is an array of f16, every value rounded by the hardware conversion).
// Writes Wᵀ and kdec (the operands of the cooperative-matrix state pass) and, since session 12,
// qdecᵀ and Pᵀ (those of the cooperative-matrix output pass, as gdn's ws16_gdn.wgsl does)
// instead of f32 into wsa. Slot layout: common.wgsl's ws16_slot (the same for kda and gdn).
// The f32 variants include ws16_off.wgsl instead and keep 8 storage buffers.
//
// SAFETY (unchecked modules): indices stay in slot (c hvb + z) of ws16_slot(K, V) halves,
// which the host sized for hvb x chunks slots: Wᵀ d 64 + i + 3 < 64 K (d < K, i <= 60), kdec
// 64 K + m K + d0 + 3 < 128 K (m < 64, d0 + 3 < K), qdecᵀ ws16_qd + d 64 + i < ws16_p (d < K,
// i < 64), Pᵀ ws16_p + j 64 + i < ws16_p + 4096 (i, j < 64).

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

// Wᵀ[d][4 g .. 4 g + 3] as f16 for the block's columns d = c0 + 4 cq + e < K (rows >= L as
// zeros), as store_w does in f32.
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

// qdecᵀ[d][i] as f16 (intra.wgsl's store_qd).
fn put_qd16(d: u32, i: u32, x: f32) -> bool {
    ws16[p_base16 + ws16_qd(HEAD_K) + d * 64u + i] = f16(x);
    return true;
}

// Pᵀ[j][i] as f16 (kda's put_ap and P's zeros).
fn put_p16(i: u32, j: u32, pv: f32) -> bool {
    ws16[p_base16 + ws16_p(HEAD_K) + j * 64u + i] = f16(pv);
    return true;
}

// solve_t (intra.wgsl) leaves the packed triangular Tᵀ in s_x: kda's step 4 reads it.
const PACK_T: bool = true;

// ws16_on.wgsl: the last prelude of the coop variants of the intra stages (after intra.wgsl):
// Wᵀ and kdec go to ws16 as pairs of f16 (slot of 128 K halves: Wᵀ [K][64], then kdec [64][K])
// for the cooperative-matrix state pass (prefill_state_coop.wgsl) to read straight from storage,
// instead of f32 into wsa. K is 64 or 128 there (the coop rule), so every channel group of four
// is inside K. The f32 variants include ws16_off.wgsl instead and keep 8 storage buffers.
//
// SAFETY (unchecked modules): ws16 indices stay in slot (c hvb + z) of 64 K words, which the host
// sized for hvb x chunks slots: Wᵀ words (d 64 + i) / 2 with d < K, i < 64; kdec words
// (64 K + m K + d0) / 2 + 1 with m < 64, d0 + 3 < K.

@group(0) @binding(9) var<storage, read_write> ws16: array<u32>;
var<private> p_base16: u32;   // first half of this (chunk, head) slot in ws16 (set_base16)

fn set_base16(slot: u32) {
    p_base16 = slot * 128u * HEAD_K;
}

// Two f16 (round to nearest even, common.wgsl's f32_to_f16) in one word, x in the low half
// (pack2x16float would need the f16-in-f32 capability, which not every adapter has).
fn pack_f16(x: f32, y: f32) -> u32 {
    return f32_to_f16(x) | (f32_to_f16(y) << 16u);
}

// kdec row m, channels d0 .. d0 + 3 as f16 (always written here).
fn put_kdec16(m: u32, d0: u32, kd: vec4<f32>) -> bool {
    let o = (p_base16 + 64u * HEAD_K + m * HEAD_K + d0) / 2u;
    ws16[o] = pack_f16(kd.x, kd.y);
    ws16[o + 1u] = pack_f16(kd.z, kd.w);
    return true;
}

// Wᵀ[d][4 g .. 4 g + 3] as f16 for the block's columns d = c0 + 4 cq + e < K (rows >= L as
// zeros), as store_w does in f32.
fn store_w16(g: u32, cq: u32, c0: u32, b: Blk, l: u32) -> bool {
    let i = 4u * g;
    for (var e = 0u; e < 4u; e++) {
        let d = c0 + 4u * cq + e;
        if (d < HEAD_K) {
            let o = (p_base16 + d * 64u + i) / 2u;
            ws16[o] = pack_f16(select(0.0, b.a0[e], i < l), select(0.0, b.a1[e], i + 1u < l));
            ws16[o + 1u] = pack_f16(select(0.0, b.a2[e], i + 2u < l),
                select(0.0, b.a3[e], i + 3u < l));
        }
    }
    return true;
}

// solve_t (intra.wgsl) leaves the packed triangular Tᵀ in s_x: kda's step 4 reads it.
const PACK_T: bool = true;

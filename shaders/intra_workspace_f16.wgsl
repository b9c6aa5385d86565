// intra_workspace_f16.wgsl: the f16 workspace of the `coop` kernel's intra stages (after
// intra.wgsl, before the op's last prelude: kda_intra_workspace_f16.wgsl, gdn_intra_coop.wgsl's
// gdn_intra_workspace_f16.wgsl, kda_intra_coop.wgsl). The stages have `enable f16`, so ws16 is an
// array of f16 and every value is rounded by the hardware conversion. Slot layout: common.wgsl's
// ws16_slot (W, kdecᵀ, qdec and P as 16 x 16 tiles, the same for gdn and kda); the stage binds
// 9 storage buffers.
//
// SAFETY (unchecked modules): indices stay in slot (c hvb + z) of ws16_slot(K) halves, which the
// host sized for hvb x chunks slots: P ws16_p + tiled_off(i, j, 64) < ws16_p + 4096 (i, j < 64);
// the writers of W, kdecᵀ and qdec state their bounds in the op's prelude.

@group(0) @binding(9) var<storage, read_write> ws16: array<f16>;
var<private> p_base16: u32;   // first half of this (chunk, head) slot in ws16 (set_base16)

fn set_base16(slot: u32) {
    p_base16 = slot * ws16_slot(HEAD_K);
}

// P[i][j] as f16 (the stage's put_ap and P's zeros).
fn put_p16(i: u32, j: u32, pv: f32) -> bool {
    ws16[p_base16 + ws16_p(HEAD_K) + tiled_off(i, j, 64u)] = f16(pv);
    return true;
}

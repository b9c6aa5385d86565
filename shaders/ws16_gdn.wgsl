// ws16_gdn.wgsl: the f16 workspace prelude of the `coop` kernel's gdn intra stage (after
// intra.wgsl; ws16_on.wgsl is the kda variant's, which is not a cooperative-matrix module and so
// writes f16 as packed u32 words). This module has `enable f16`, so ws16 is an array of f16 and
// every value is rounded by the hardware conversion. Slot layout: common.wgsl's ws16_slot (gdn:
// W, kdecᵀ, qdec, P here, as 16 x 16 tiles (TILED, session 14) or row-major; h and V_new from the
// unfused state pass).
//
// (A-operand offsets go through common.wgsl's a16_off / a16_tile: with TILED, the default, a
// permutation of the same [rows][columns] region, 16 x 16 tiles stored one after another, so the
// bounds below, stated for the row-major form, hold for both.)
// SAFETY (unchecked module): indices stay in slot (c hvb + z) of ws16_slot(K, V) halves, which
// the host sized for hvb x chunks slots: kdecᵀ 64 K + (d0 + 3) 64 + m < 128 K (m < 64,
// d0 + 3 < K), P ws16_p + i 64 + j < ws16_p + 4096 (i, j < 64); W and qdec:
// gdn_intra_coop.wgsl's store_w16_rows and store_qd16.

@group(0) @binding(9) var<storage, read_write> ws16: array<f16>;
var<private> p_base16: u32;   // first half of this (chunk, head) slot in ws16 (set_base16)

fn set_base16(slot: u32) {
    p_base16 = slot * ws16_slot(HEAD_K, HEAD_V);
}

// kdec row m, channels d0 .. d0 + 3 as f16 into kdecᵀ (intra.wgsl's put_kdec hook; the gdn coop
// step 4 writes kdecᵀ itself since session 14, so nothing calls this here; kept in the layout).
fn put_kdec16(m: u32, d0: u32, kd: vec4<f32>) -> bool {
    let o = p_base16 + 64u * HEAD_K;
    ws16[o + a16_off(d0, m, 64u)] = f16(kd.x);
    ws16[o + a16_off(d0 + 1u, m, 64u)] = f16(kd.y);
    ws16[o + a16_off(d0 + 2u, m, 64u)] = f16(kd.z);
    ws16[o + a16_off(d0 + 3u, m, 64u)] = f16(kd.w);
    return true;
}

// (intra.wgsl's store_w and store_qd hooks, unused by the gdn coop stage: its step 4 writes W
// and qdec itself)
fn store_w16(g: u32, cq: u32, c0: u32, b: Blk, l: u32) -> bool {
    return false;
}

fn store_qd16_tile(tid: u32, c0: u32) -> bool {
    return false;
}

// P[i][j] (the stage's put_ap; no f32 copy: the coop output products read this one).
fn put_p(base_p: u32, i: u32, j: u32, pv: f32) {
    ws16[p_base16 + ws16_p(HEAD_K) + a16_off(i, j, 64u)] = f16(pv);
}

// solve_t (intra.wgsl) skips the packed triangular Tᵀ: the coop step 4 builds its f16 T from s_at
// (gdn_intra_coop.wgsl), so the 544 vec4 stores were never read (session 8's review).
const PACK_T: bool = false;

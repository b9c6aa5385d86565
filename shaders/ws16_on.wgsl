// ws16_on.wgsl: the last prelude of the `coop` kernel's kda intra stage (after intra.wgsl; the
// stage is not a cooperative-matrix module, but the kernel needs f16 anyway, so it opens with
// `enable f16` and ws16 is an array of f16, every value rounded by the hardware conversion).
// Writes W and kdecᵀ (the operands of the cooperative-matrix state pass) and, since session 12,
// qdec and P (those of the cooperative-matrix output products, as gdn's ws16_gdn.wgsl does)
// instead of f32 into wsa; row-major A operands since session 13, as 16 x 16 tiles
// since session 14 (common.wgsl's TILED). Slot layout: common.wgsl's ws16_slot (the same for kda and gdn).
// The f32 variants include ws16_off.wgsl instead and keep 8 storage buffers.
//
// (A-operand offsets go through common.wgsl's a16_off / a16_tile: with TILED, the default, a
// permutation of the same [rows][columns] region, 16 x 16 tiles stored one after another, so the
// bounds below, stated for the row-major form, hold for both.)
// SAFETY (unchecked modules): indices stay in slot (c hvb + z) of ws16_slot(K, V) halves,
// which the host sized for hvb x chunks slots: W (i + 3) K + d + 3 < 64 K (i <= 60, d + 3 < K),
// kdecᵀ 64 K + (d0 + 3) 64 + m < 128 K (m < 64, d0 + 3 < K), qdec ws16_qd + i K + d + 3 <
// ws16_p (i < 64, d + 3 < K, checked), P ws16_p + i 64 + j < ws16_p + 4096 (i, j < 64).

@group(0) @binding(9) var<storage, read_write> ws16: array<f16>;
var<private> p_base16: u32;   // first half of this (chunk, head) slot in ws16 (set_base16)

fn set_base16(slot: u32) {
    p_base16 = slot * ws16_slot(HEAD_K, HEAD_V);
}

// kdec row m, channels d0 .. d0 + 3 as f16 into kdecᵀ (always written here).
fn put_kdec16(m: u32, d0: u32, kd: vec4<f32>) -> bool {
    let o = p_base16 + 64u * HEAD_K;
    ws16[o + a16_off(d0, m, 64u)] = f16(kd.x);
    ws16[o + a16_off(d0 + 1u, m, 64u)] = f16(kd.y);
    ws16[o + a16_off(d0 + 2u, m, 64u)] = f16(kd.z);
    ws16[o + a16_off(d0 + 3u, m, 64u)] = f16(kd.w);
    return true;
}

// W[4 g + a][c0 + 4 cq ..] as f16, row-major (rows >= L as zeros; the block's four columns are
// whole or absent: K is a multiple of 4), as store_w does (transposed) in f32.
fn store_w16(g: u32, cq: u32, c0: u32, b: Blk, l: u32) -> bool {
    let i = 4u * g;
    let d = c0 + 4u * cq;
    if (d < HEAD_K) {
        put_row16(p_base16 + a16_off(i, d, HEAD_K), select(vec4<f32>(0.0), b.a0, i < l));
        put_row16(p_base16 + a16_off(i + 1u, d, HEAD_K), select(vec4<f32>(0.0), b.a1, i + 1u < l));
        put_row16(p_base16 + a16_off(i + 2u, d, HEAD_K), select(vec4<f32>(0.0), b.a2, i + 2u < l));
        put_row16(p_base16 + a16_off(i + 3u, d, HEAD_K), select(vec4<f32>(0.0), b.a3, i + 3u < l));
    }
    return true;
}

// Four consecutive halves from x.
fn put_row16(o: u32, x: vec4<f32>) {
    ws16[o] = f16(x.x);
    ws16[o + 1u] = f16(x.y);
    ws16[o + 2u] = f16(x.z);
    ws16[o + 3u] = f16(x.w);
}

// qdec as f16, row-major (intra.wgsl's store_qd): token i = tid / 16 + 16 r, vec4 column
// q = tid % 16 of the staged tile, so 16 invocations store 64 contiguous channels of a row.
fn store_qd16_tile(tid: u32, c0: u32) -> bool {
    let q = tid % 16u;
    let d = c0 + 4u * q;
    if (d < HEAD_K) {
        for (var r = 0u; r < 4u; r++) {
            let i = tid / 16u + 16u * r;
            put_row16(p_base16 + ws16_qd(HEAD_K) + a16_off(i, d, HEAD_K), s_at[src_slot(i, q)]);
        }
    }
    return true;
}

// P[i][j] as f16 (kda's put_ap and P's zeros).
fn put_p16(i: u32, j: u32, pv: f32) -> bool {
    ws16[p_base16 + ws16_p(HEAD_K) + a16_off(i, j, 64u)] = f16(pv);
    return true;
}

// solve_t (intra.wgsl) leaves the packed triangular Tᵀ in s_x: kda's step 4 reads it.
const PACK_T: bool = true;

// kda's step 4 on cooperative matrices lives in kda_intra_coop.wgsl (the coop kernel's stage where
// the adapter has 48 KiB of workgroup memory); here the stage runs its f32 stream.
const KDA_MMA4: bool = false;

fn kda_step4_mma(tid: u32, t0: u32, l: u32, h: u32, hv: u32, base_gam: u32, base_u: u32,
    x0: Src4, g0: Src4, gl0: vec4<f32>) {}

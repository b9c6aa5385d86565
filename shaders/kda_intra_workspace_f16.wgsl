// kda_intra_workspace_f16.wgsl: the last prelude of the `coop` kernel's kda intra stage where the
// adapter has less than the 47,888 bytes of workgroup memory kda_intra_coop.wgsl needs (lavapipe's
// 32 KiB, where CI emulates the kernel): after intra_workspace_f16.wgsl, step 4 runs its f32
// stream (kda_prefill_intra.wgsl) and these hooks write W, kdecᵀ and qdec (and P through
// put_p16) as f16 tiles into ws16 instead of f32 into wsa.
//
// SAFETY (unchecked modules): indices stay in slot (c hvb + z) of ws16_slot(K) halves (bounds
// stated for the row-major form; the tiles are a permutation of the same region):
// W (i + 3) K + d + 3 < 64 K (i <= 60, d + 3 < K), kdecᵀ 64 K + (d0 + 3) 64 + m < 128 K (m < 64,
// d0 + 3 < K), qdec ws16_qd + i K + d + 3 < ws16_p (i < 64, d + 3 < K, checked).

// kdec row m, channels d0 .. d0 + 3 as f16 into kdecᵀ (always written here).
fn put_kdec16(m: u32, d0: u32, kd: vec4<f32>) -> bool {
    let o = p_base16 + 64u * HEAD_K;
    ws16[o + tiled_off(d0, m, 64u)] = f16(kd.x);
    ws16[o + tiled_off(d0 + 1u, m, 64u)] = f16(kd.y);
    ws16[o + tiled_off(d0 + 2u, m, 64u)] = f16(kd.z);
    ws16[o + tiled_off(d0 + 3u, m, 64u)] = f16(kd.w);
    return true;
}

// W[4 g + a][c0 + 4 cq ..] as f16 (rows >= L as zeros; the block's four columns are whole or
// absent: K is a multiple of 4), as store_w does (transposed) in f32.
fn store_w16(g: u32, cq: u32, c0: u32, b: Blk, l: u32) -> bool {
    let i = 4u * g;
    let d = c0 + 4u * cq;
    if (d < HEAD_K) {
        put_row16(p_base16 + tiled_off(i, d, HEAD_K), select(vec4<f32>(0.0), b.a0, i < l));
        put_row16(p_base16 + tiled_off(i + 1u, d, HEAD_K), select(vec4<f32>(0.0), b.a1, i + 1u < l));
        put_row16(p_base16 + tiled_off(i + 2u, d, HEAD_K), select(vec4<f32>(0.0), b.a2, i + 2u < l));
        put_row16(p_base16 + tiled_off(i + 3u, d, HEAD_K), select(vec4<f32>(0.0), b.a3, i + 3u < l));
    }
    return true;
}

// Four consecutive halves from x (four columns of one tile row: d is a multiple of 4).
fn put_row16(o: u32, x: vec4<f32>) {
    ws16[o] = f16(x.x);
    ws16[o + 1u] = f16(x.y);
    ws16[o + 2u] = f16(x.z);
    ws16[o + 3u] = f16(x.w);
}

// qdec as f16 (intra.wgsl's store_qd): token i = tid / 16 + 16 r, vec4 column q = tid % 16 of
// the staged tile, so 16 invocations store 64 channels of a row.
fn store_qd16_tile(tid: u32, c0: u32) -> bool {
    let q = tid % 16u;
    let d = c0 + 4u * q;
    if (d < HEAD_K) {
        for (var r = 0u; r < 4u; r++) {
            let i = tid / 16u + 16u * r;
            put_row16(p_base16 + ws16_qd(HEAD_K) + tiled_off(i, d, HEAD_K), s_at[src_slot(i, q)]);
        }
    }
    return true;
}

// solve_t (intra.wgsl) leaves the packed triangular Tᵀ in s_x: kda's f32 step 4 reads it.
const PACK_T: bool = true;

// The stage runs its f32 step 4 (kda_intra_coop.wgsl has the one on cooperative matrices).
const KDA_STEP4_COOP: bool = false;

fn kda_step4_coop(tid: u32, t0: u32, l: u32, h: u32, hv: u32, base_gam: u32, base_u: u32,
    x0: Src4, g0: Src4, gl0: vec4<f32>) {}

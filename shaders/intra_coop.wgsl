// intra_coop.wgsl: what the two intra stages with step 4 on cooperative matrices share
// (gdn_intra_coop.wgsl and kda_intra_coop.wgsl come after it, intra_workspace_f16.wgsl before):
// T and the scaled source tile as f16 in workgroup memory, step 4's W product and the kdecᵀ
// writer. 16 x 16 x 16 tiles, f16 operands.
//
// Step 4's W tile (w_tile_product): subgroup g (= tid / 32: the subgroups are 32 consecutive
// local invocation indices, which Gpu::coop requires) takes rows 16 (g / 2) .., columns
// 32 (g % 2) + 16 j (j < 2) of W = T X over a 64-channel tile X (s_x16) with f16 accumulators
// (four k-steps, so four roundings to f16 besides the final one: the tensor-core class of the
// numerical contract, docs/spec.md), stored straight into ws16 as W tiles; kdec, staged f32 in
// s_at as [64 columns][65] by the op's stage, leaves as kdecᵀ [K][64] f16 tiles in whole rows.
// Every cooperative-matrix operation runs in workgroup-uniform control flow (the callers' loops
// run over override constants).
//
// SAFETY (unchecked modules): s_t16 indices 16 wi 64 + 16 k + r 64 + c < 4096 (wi, k < 4;
// r, c < 16), its zero block 16 + r 64 + c < 4096 and idx < 4096; s_x16 m 64 + 4 q + 3 < 4096
// (m < 64, q < 16) and (16 k + r) 64 + 32 wc + 16 j + c < 4096; the kdec staging in s_at read at
// (4 q + e) 65 + m <= 4158 < 4160 and d 65 + mm + 1 <= 4158 (d < 64, mm <= 62); ws16 halves in slot (c hvb + z) (bounds of the
// row-major form; tiles permute the same region): W (16 wi + r) K + c0 + 32 wc + 16 j + c < 64 K
// (c0 + 64 <= K), kdecᵀ 64 K + (c0 + d) 64 + mm + 1 < 128 K.

// Step 4's U tile width: 64 when 64 divides V, else 32 (the host sets it; V is a multiple of 32).
override UW: u32 = 64u;

var<workgroup> s_t16: array<f16, 4096>;   // T [64][64], row-major
var<workgroup> s_x16: array<f16, 4096>;   // scaled source tile [64][64], row-major
// (The source tile is staged row-major and its B operands loaded row-major: staged transposed
// and loaded column-major, the intra pass measured slower on the H200: gdn 1.058 -> 1.171 ms,
// kda 2.122 -> 2.248 at 1 x 8192.)

// (intra.wgsl's hooks of the f32 step 4, which these stages do not run: their step 4 writes W,
// kdecᵀ and qdec itself)
fn put_kdec16(m: u32, d0: u32, kd: vec4<f32>) -> bool {
    return true;
}

fn store_w16(g: u32, cq: u32, c0: u32, b: Blk, l: u32) -> bool {
    return true;
}

fn store_qd16_tile(tid: u32, c0: u32) -> bool {
    return true;
}

// solve_t (intra.wgsl) skips the packed triangular Tᵀ: step 4 takes its f16 T from s_at.
const PACK_T: bool = false;

// T (from the solve, T[i][m'] at s_at[m'][i]) as f16 [64][64] into s_t16. The caller's barrier
// follows (the first tile's kdec staging overwrites s_at).
fn t_to_f16(tid: u32, l: u32) {
    for (var idx = tid; idx < 4096u; idx += 256u) {
        s_t16[idx] = f16(t_at(idx / 64u, idx % 64u, l));
    }
}

// Scaled source row m, columns 4 q .. 4 q + 3 as f16 into the [64][64] tile s_x16.
fn put_x16(m: u32, q: u32, x: vec4<f32>) {
    let o = m * 64u + 4u * q;
    s_x16[o] = f16(x.x);
    s_x16[o + 1u] = f16(x.y);
    s_x16[o + 2u] = f16(x.z);
    s_x16[o + 3u] = f16(x.w);
}

// kdec row m, tile columns 4 q .. 4 q + 3, staged f32 in s_at as [64 columns][65] (row stride
// 65: the 16 column groups of a warp's store fall on different banks); (4 q + e) 65 + m <= 4158.
fn put_kd(m: u32, q: u32, x: vec4<f32>) {
    let o = 4u * q * 65u + m;
    at_set(o, x.x);
    at_set(o + 65u, x.y);
    at_set(o + 130u, x.z);
    at_set(o + 195u, x.w);
}

// kdecᵀ rows c0 .. c0 + 63 (channels; the state pass's A operand of ΔS) from the tile staged in
// s_at: pair w = tid + 256 j, channel row w / 32, tokens 2 (w % 32) and + 1, so a warp stores a
// row's 64 consecutive halves.
fn store_kd16(tid: u32, c0: u32) {
    for (var j = 0u; j < 8u; j++) {
        let w = tid + 256u * j;
        let d = w / 32u;
        let mm = 2u * (w % 32u);
        let o = p_base16 + 64u * HEAD_K + tiled_off(c0 + d, mm, 64u);
        ws16[o] = f16(at_get(d * 65u + mm));
        ws16[o + 1u] = f16(at_get(d * 65u + mm + 1u));
    }
}

// W's tiles for channels c0 .. c0 + 63 (s_x16 holds the scaled k rows, s_t16 T) and the tile's
// kdecᵀ (staged in s_at). Subgroup (wi, wc) = (g / 2, g % 2).
fn w_tile_product(tid: u32, wi: u32, wc: u32, c0: u32) {
    // f16 accumulators from T's zero block (rows 0..15, columns 16..31)
    var a0 = coopLoadT<coop_mat16x16<f16, C>>(&s_t16[16u], 64u);
    var a1 = a0;
    for (var k = 0u; k < 4u; k++) {
        let a = coopLoadT<coop_mat16x16<f16, A>>(&s_t16[16u * wi * 64u + 16u * k], 64u);
        let b0 = coopLoadT<coop_mat16x16<f16, B>>(&s_x16[16u * k * 64u + 32u * wc], 64u);
        let b1 = coopLoadT<coop_mat16x16<f16, B>>(
            &s_x16[16u * k * 64u + 32u * wc + 16u], 64u);
        a0 = coopMultiplyAdd(a, b0, a0);
        a1 = coopMultiplyAdd(a, b1, a1);
    }
    // (offsets named first: naga 30's SPIR-V writer panics on an index expression inside a
    // coopStore call)
    let wo = p_base16 + tile_first(wi, c0 / 16u + 2u * wc, HEAD_K);
    let wo1 = p_base16 + tile_first(wi, c0 / 16u + 2u * wc + 1u, HEAD_K);
    coopStoreT(a0, &ws16[wo], TILE_STRIDE);
    coopStoreT(a1, &ws16[wo1], TILE_STRIDE);
    store_kd16(tid, c0);
}

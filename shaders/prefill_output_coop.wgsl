// prefill_output_coop.wgsl: the output pass of prefill_output.wgsl (same grid, same writer of o,
// prelude output.wgsl) with its two products on cooperative matrices, for gdn in the `coop`
// kernel: O = qdec·h[c] + P·V_new over f16 operands the intra stage (qdec, P) and the state
// pass (h, V_new; OUT16 = 1) wrote into ws16 (binding 7, slot layout common.wgsl's ws16_slot),
// read by the matrix operations straight from storage: no staging, one barrier. 16 x 16 x 16
// tiles, f16 operands, f32 accumulation (the tensor-core class of SPEC.md section 9).
//
// Grid: x + y * grid_c = chunk c, z = (hv − hv0) * nvt + value tile (nvt = ceil(V / 64)).
// Subgroup g (of 8) computes rows 16 (g / 2) .. and columns 32 (g % 2) .. + 31 of the chunk's
// 64 x 64 o tile as two C tiles: K / 16 k-steps of qdec·h (qdec read row-major from qdec
// [64][K], h row-major) then 4 of P·V_new (P row-major from P [64][64], zero above the diagonal and
// beyond the chunk; V_new rows beyond the chunk are zero). The tile goes through s_o to put_o4
// (rows < L, columns < V).
//
// Needs: K in {64, 128}, V a multiple of 32 (the host's coop rule); when V is an odd multiple of
// 32 the last tile's second column half reads columns V − 32 .. again (in range) and put_o4
// drops them (e >= V).
//
// (A-operand offsets go through common.wgsl's a16_off / a16_tile: with TILED, the default, a
// permutation of the same [rows][columns] region, 16 x 16 tiles stored one after another, so the
// bounds below, stated for the row-major form, hold for both.)
// SAFETY (unchecked module): c < chunks and t0 + L <= T from the chunk table; ws16 reads in slot
// (c hvb + z) of ws16_slot(K, V) halves, sized by the host: qdec ws16_qd + (16 wi + r) K +
// 16 k + c < ws16_p (k < K / 16); P ws16_p + (16 wi + r) 64 + 16 k + c < ws16_h (k < 4);
// h ws16_h + (16 k + r) V + eb + 16 + c < ws16_vn and V_new ws16_vn + (16 k + r) V + eb + 16 + c
// < ws16_vn + 64 V, with eb = min(e0 + 32 (g % 2), V − 32) so eb + 32 <= V; s_o tiles inside
// [64][64]; s_zero 256 floats.

@group(0) @binding(7) var<storage, read> ws16: array<f16>;

var<workgroup> s_o: array<f32, 4096>;     // o tile [64][64], row-major
var<workgroup> s_zero: array<f32, 256>;   // a zero 16 x 16 tile: the accumulators start from it
// 16 bytes (every workgroup variable of a cooperative-matrix stage is a multiple of 16 bytes:
// an 8-byte one gave wrong products on the H200, sessions 3 and 8)
var<workgroup> s_mt: vec4<u32>;

@compute @workgroup_size(256)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(local_invocation_index) tid: u32,
    @builtin(subgroup_id) sg: u32,
) {
    let c = wid.x + wid.y * prm.grid_c;
    if (c >= prm.chunks) {
        return;
    }
    let K = HEAD_K;
    let V = HEAD_V;
    let z = wid.z / prm.nvt;
    let vt = wid.z % prm.nvt;
    let hv = prm.hv0 + z;
    let e0 = vt * 64u;
    if (tid == 0u) {
        s_mt = vec4<u32>(aux[prm.aux_chunks + 4u * c], aux[prm.aux_chunks + 4u * c + 1u], 0u, 0u);
    }
    s_zero[tid] = 0.0;
    // (also orders the s_zero stores before the accumulator loads)
    let mt = workgroupUniformLoad(&s_mt);
    let t0 = mt.x;
    let L = mt.y;
    let b16 = (c * prm.hvb + z) * ws16_slot(K, V);
    let qd = b16 + ws16_qd(K);
    let pp = b16 + ws16_p(K);
    let hh = b16 + ws16_h(K);
    let vn = b16 + ws16_vn(K, V);
    let wi = sg / 2u;
    let eb = min(e0 + 32u * (sg % 2u), V - 32u);

    var acc0 = coopLoadT<coop_mat16x16<f32, C>>(&s_zero[0], 16u);
    var acc1 = coopLoadT<coop_mat16x16<f32, C>>(&s_zero[0], 16u);
    for (var k = 0u; k < K / 16u; k++) {
        let a = coopLoadT<coop_mat16x16<f16, A>>(&ws16[qd + a16_tile(wi, k, K)], a16_ld(K));
        let b0 = coopLoadT<coop_mat16x16<f16, B>>(&ws16[hh + 16u * k * V + eb], V);
        let b1 = coopLoadT<coop_mat16x16<f16, B>>(&ws16[hh + 16u * k * V + eb + 16u], V);
        acc0 = coopMultiplyAdd(a, b0, acc0);
        acc1 = coopMultiplyAdd(a, b1, acc1);
    }
    for (var k = 0u; k < 4u; k++) {
        let a = coopLoadT<coop_mat16x16<f16, A>>(&ws16[pp + a16_tile(wi, k, 64u)], a16_ld(64u));
        let b0 = coopLoadT<coop_mat16x16<f16, B>>(&ws16[vn + 16u * k * V + eb], V);
        let b1 = coopLoadT<coop_mat16x16<f16, B>>(&ws16[vn + 16u * k * V + eb + 16u], V);
        acc0 = coopMultiplyAdd(a, b0, acc0);
        acc1 = coopMultiplyAdd(a, b1, acc1);
    }
    // (offsets named first: naga 30's SPIR-V writer panicked on an index expression inside a
    // coopStore call, session 8)
    let o0 = 16u * wi * 64u + 32u * (sg % 2u);
    let o1 = o0 + 16u;
    coopStoreT(acc0, &s_o[o0], 64u);
    coopStoreT(acc1, &s_o[o1], 64u);
    workgroupBarrier();

    let ty = tid / 16u;
    let tx = tid % 16u;
    let r = 4u * ty * 64u + 4u * tx;
    let a0 = vec4<f32>(s_o[r], s_o[r + 1u], s_o[r + 2u], s_o[r + 3u]);
    let a1 = vec4<f32>(s_o[r + 64u], s_o[r + 65u], s_o[r + 66u], s_o[r + 67u]);
    let a2 = vec4<f32>(s_o[r + 128u], s_o[r + 129u], s_o[r + 130u], s_o[r + 131u]);
    let a3 = vec4<f32>(s_o[r + 192u], s_o[r + 193u], s_o[r + 194u], s_o[r + 195u]);
    put_o4(t0, L, hv, e0, ty, tx, a0, a1, a2, a3);
}

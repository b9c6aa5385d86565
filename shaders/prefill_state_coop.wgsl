// prefill_state_coop.wgsl: the sequential state pass of prefill_state.wgsl (same bindings 0-6,
// workspace U, outputs and state mapping, prelude state.wgsl) with its products on cooperative
// matrices, and the output pass folded in: 16 x 16 x 16 tiles, f16 operands, f32 accumulation
// (tensor cores on NVIDIA's Vulkan driver). This is the `coop` kernel's state and output pass;
// its tolerance is the tensor-core class of the numerical contract (docs/spec.md): W, S, kdec,
// V_new, qdec and P enter the products as f16; the running state, U, every sum and o stay f32.
//
// The A operands W, kdecᵀ, qdec and P come as f16 tiles from ws16 (binding 7, written by the
// intra stage; slot layout: common.wgsl's ws16_slot) and the matrix operations read them
// straight from storage, 512 contiguous bytes a tile. Per chunk:
//   S as f16 into s_s16; barrier; the previous chunk's o leaves (below);
//   W·S: subgroup g's 16 x 16 tile of the [64][32] product (S row-major from s_s16), K / 16
//   k-steps, to s_c; beside it o's qdec·h over the same B tiles (h is S); barrier;
//   V_new = U − W·S (zero beyond the chunk) into s_v16 (f16), S scaled by e^Γ_last; barrier;
//   ΔS = kdecᵀ·V_new: subgroup g's K / 64 tiles of the [K][32] product (V_new row-major from
//   s_v16), 4 k-steps, to s_c; beside it o's P·V_new over the same B tiles; barrier; S += ΔS.
// The W and qdec tiles of a chunk, its U row and e^Γ_last are loaded one chunk ahead (chunk
// c + 1's at the end of chunk c's products, chunk c_begin's before the loop): they do not depend
// on S, so their latency runs under the S update, the stores and barriers between. The kdecᵀ
// and P tiles are issued after the chunk's W·S products, so fewer tiles are live at once (with
// all 28 A tiles of a chunk live, ~112 registers an invocation). Measured on the H200 (gdn 16/32
// and kda 32/32 1 x 8192): state pass 0.967 -> 0.955 ms and 0.963 -> 0.954 ms against loading
// them one chunk ahead with W.
//
// o = qdec·h + P·V_new: subgroup g accumulates its 16 x 16 tile of the chunk's [64][32] o tile
// (rows 16 (g / 2) .., columns 16 (g % 2) .., the W·S tile's place) over the B loads W·S and ΔS
// already make: K / 16 MMAs with the qdec tiles beside W·S, 4 with the P tiles beside ΔS. The
// tile leaves one chunk late, through s_c rows 64 .. between the next chunk's first two barriers
// (nothing else uses those rows there: no barrier added), and each invocation writes its o row
// vi, columns e_v .. e_v + 7 (put_o8); the last chunk's after the loop. h and V_new are never
// stored and no separate output pass runs: measured on the H200 (gdn 16/32 1 x 8192) the fused
// pass costs 1.021 ms against 0.815 + 0.379 ms for the state pass and a cooperative-matrix
// output pass over h and V_new stored as f16 (gdn call 2.164 against 2.332 ms). Workgroup memory
// is 29 KiB: lavapipe's 32 KiB holds it, so CI's emulation runs it.
//
// Needs: K in {64, 128}, V a multiple of 32 (the host's coop rule), a 32-column value tile (the
// host passes no BV), 256 invocations in 8 subgroups of 32 (Gpu::coop checks the adapter's
// subgroup size). Every cooperative-matrix operation runs in workgroup-uniform control flow
// (loops over override constants and the workgroup-uniform chunk range, no branch on a loop
// counter: naga treats those as non-uniform); only the tile offsets depend on the subgroup id.
//
// Grid and S mapping: as prefill_state.wgsl with BV = 32 (rows 4 sr .., sr = tid / 8, columns
// 4 sc .., sc = tid % 8). V_new mapping: row vi = tid / 4, local columns vc .. vc + 7,
// vc = 8 (tid % 4). W·S tile of subgroup g: rows 16 (g / 2) .., columns 16 (g % 2) ..; ΔS tiles
// rows 16 (g / 2) .. and, at K = 128, 16 (g / 2 + 4) ..; columns 16 (g % 2) ...
// Workgroup memory: s_s16 8 KiB, s_v16 4 KiB, s_c 16 KiB, s_zero 1 KiB, s_mt 16 B (29 KiB).
//
// SAFETY (unchecked module): as prefill_state.wgsl for wsa (e^Γ_last), wsu, st and outs (U
// columns e_v + 7 < V because V is a multiple of 32 and vt < V / 32). ws16 reads stay in slot
// (c hvb + z) of ws16_slot(K) halves, which the host sized for hvb x chunks slots (bounds of the
// row-major form; the tiles permute the same regions): W tiles at (16 wi + r) K + 16 k + c < 64 K
// (k < K / 16, wi < 4; r, c < 16), kdecᵀ tiles at 64 K + (16 td + r) 64 + 16 k + c < 128 K
// (k < 4, td < K / 16), qdec tiles at ws16_qd + (16 wi + r) K + 16 k + c < ws16_p (k < K / 16)
// and P tiles at ws16_p + (16 wi + r) 64 + 16 k + c < ws16_slot (k < 4). Workgroup indices: s_s16
// (16 k + r) 32 + 16 wc + c < 32 K <= 4096; s_v16 (16 k + r) 32 + 16 wc + c < 2048; s_c tiles
// inside [64][32] (W·S), [K][32] (ΔS) and rows 64 .. 127 (o); S copy rows d_s + 3 < K; V_new rows
// vi < 64, columns vc + 7 < 32. put_o8 writes rows vi < L of the chunk (t0 + vi < T from the
// chunk table) and columns e_v .. e_v + 7 < V (as for U): outs[off_o + ((t0 + vi) HV + hv) V + e]
// (f32), or the 16-bit pairs of o16 when pack_dt is set (((t0 + vi) HV + hv) V + e_v is even: V
// and e_v are multiples of 8).

@group(0) @binding(7) var<storage, read_write> ws16: array<f16>;

// o as the caller's 16-bit dtype (pack_dt set; else a dummy binding)
@group(0) @binding(8) var<storage, read_write> o16: array<u32>;

var<workgroup> s_s16: array<f16, 4096>;   // S [K][32] (f16, operand of W·S)
var<workgroup> s_v16: array<f16, 2048>;   // V_new [64][32] (f16, operand of ΔS)
var<workgroup> s_c: array<f32, 4096>;     // W·S [64][32], then ΔS [K][32]
// 16 bytes, like every other workgroup variable here. On the H200 the pass gives wrong sums with
// an 8-byte s_mt (vec2<u32>) and exact ones with this, all else equal; the likely cause is the
// alignment of the arrays the matrix operations address (the driver orders workgroup variables
// itself), though a probe with an 8-byte variable first does not reproduce it
// (backends/wgpu/tests/coop.rs). Keep every workgroup variable a multiple of 16 bytes.
var<workgroup> s_mt: vec4<u32>;
var<workgroup> s_zero: array<f32, 256>;   // a zero 16 x 16 tile: the accumulators start from it

// S row d, local columns c .. c + 3, as f16.
fn s_copy16(d: u32, c: u32, x: vec4<f32>) {
    let o = d * 32u + c;
    s_s16[o] = f16(x.x);
    s_s16[o + 1u] = f16(x.y);
    s_s16[o + 2u] = f16(x.z);
    s_s16[o + 3u] = f16(x.w);
}

// Row d, local columns c .. c + 3 of s_c ([*][32]).
fn s_c4(d: u32, c: u32) -> vec4<f32> {
    let o = d * 32u + c;
    return vec4<f32>(s_c[o], s_c[o + 1u], s_c[o + 2u], s_c[o + 3u]);
}

// U row i, columns e .. e + 3 (global, e + 3 < V), zero outside the chunk.
fn u4(base_u: u32, i: u32, e: u32, l: u32) -> vec4<f32> {
    if (i >= l) {
        return vec4<f32>(0.0);
    }
    let o = base_u + i * k4(HEAD_V) + e;
    return vec4<f32>(wsu[o], wsu[o + 1u], wsu[o + 2u], wsu[o + 3u]);
}

// V_new row i, local columns c .. c + 3 as f16 into s_v16 (zeros outside the chunk).
fn put_vnew16(i: u32, c: u32, l: u32, v: vec4<f32>) {
    var x = vec4<f32>(0.0);
    if (i < l) {
        x = v;
    }
    let q = i * 32u + c;
    s_v16[q] = f16(x.x);
    s_v16[q + 1u] = f16(x.y);
    s_v16[q + 2u] = f16(x.z);
    s_v16[q + 3u] = f16(x.w);
}

// o row i of a chunk (i < l), columns e .. e + 7, from s_c rows 64 .. (local columns
// c .. c + 7 of the [64][32] tile there): f32 into outs, or rounded to the caller's 16-bit dtype
// into o16 (pack_dt).
fn put_o8(t0: u32, l: u32, hv: u32, i: u32, e: u32, c: u32) {
    if (i < l) {
        let a = s_c4(64u + i, c);
        let b = s_c4(64u + i, c + 4u);
        let row = ((t0 + i) * prm.vheads + hv) * HEAD_V + e;
        if (prm.pack_dt != 0u) {
            let dt = prm.pack_dt;
            let w = row / 2u;
            o16[w] = encode16(a.x, dt) | (encode16(a.y, dt) << 16u);
            o16[w + 1u] = encode16(a.z, dt) | (encode16(a.w, dt) << 16u);
            o16[w + 2u] = encode16(b.x, dt) | (encode16(b.y, dt) << 16u);
            o16[w + 3u] = encode16(b.z, dt) | (encode16(b.w, dt) << 16u);
        } else {
            let o = prm.off_o + row;
            outs[o] = a.x;
            outs[o + 1u] = a.y;
            outs[o + 2u] = a.z;
            outs[o + 3u] = a.w;
            outs[o + 4u] = b.x;
            outs[o + 5u] = b.y;
            outs[o + 6u] = b.z;
            outs[o + 7u] = b.w;
        }
    }
}

// What a chunk's products wait for from storage besides the matrix operands: this invocation's
// U row vi (columns e_v .. e_v + 7) and the e^Γ_last vec4 of its S rows (row group sr).
struct ChunkIn {
    ua: vec4<f32>,
    ub: vec4<f32>,
    gl: vec4<f32>,
}

fn chunk_in(c: u32, z: u32, vi: u32, e_v: u32, sr: u32) -> ChunkIn {
    let l = aux[prm.aux_chunks + 4u * c + 1u];
    let slot = c * prm.hvb + z;
    let base_u = slot * 64u * k4(HEAD_V);
    let qb = slot * (ws_slot(HEAD_K, prm.is_kda) / 4u);
    let gl = wsa[qb + ws_gl(HEAD_K) / 4u + min(sr, k4(HEAD_K) / 4u - 1u)];
    return ChunkIn(u4(base_u, vi, e_v, l), u4(base_u, vi, e_v + 4u, l), gl);
}

@compute @workgroup_size(256)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(local_invocation_index) tid: u32,
    @builtin(subgroup_id) sg: u32,
) {
    let n = wid.x + wid.y * prm.grid_n;
    if (n >= prm.seqs) {
        return;
    }
    let K = HEAD_K;
    let V4 = k4(HEAD_V);
    let z = wid.z / prm.nvt;
    let vt = wid.z % prm.nvt;
    let hv = prm.hv0 + z;
    // S mapping
    let sr = tid / 8u;
    let sc = tid % 8u;
    let d_s = 4u * sr;
    let e_s = vt * 32u + 4u * sc;
    // V_new mapping
    let vi = tid / 4u;
    let vc = 8u * (tid % 4u);
    let e_v = vt * 32u + vc;
    // tiles of this subgroup
    let wi = sg / 2u;
    let wc = sg % 2u;
    let sb = prm.aux_seqs + 8u * n;
    if (tid == 0u) {
        s_mt = vec4<u32>(aux[sb + 2u], aux[sb + 3u], 0u, 0u);
    }
    s_zero[tid] = 0.0;
    // (also orders the s_zero stores before the first accumulator load)
    let mt = workgroupUniformLoad(&s_mt);
    let c_begin = mt.x;
    let c_end = mt.y;
    let init_row = aux[sb + 4u];
    let final_row = aux[sb + 5u];

    var s0 = init4(init_row, hv, d_s, e_s);
    var s1 = init4(init_row, hv, d_s + 1u, e_s);
    var s2 = init4(init_row, hv, d_s + 2u, e_s);
    var s3 = init4(init_row, hv, d_s + 3u, e_s);

    // The A operands of a chunk from storage: the K / 16 tiles of W for W·S and of qdec for o,
    // for chunk c_begin here and for chunk c + 1 at the end of chunk c's products; the 4 (K / 64)
    // tiles of kdecᵀ for ΔS and the 4 of P for o after the chunk's W·S products. (K = 64: the
    // last tiles are not loaded and not multiplied. Declared unassigned, they are loaded before
    // any use: only a sequence with chunks runs the loop.)
    var wa0: coop_mat16x16<f16, A>;
    var wa1: coop_mat16x16<f16, A>;
    var wa2: coop_mat16x16<f16, A>;
    var wa3: coop_mat16x16<f16, A>;
    var wa4: coop_mat16x16<f16, A>;
    var wa5: coop_mat16x16<f16, A>;
    var wa6: coop_mat16x16<f16, A>;
    var wa7: coop_mat16x16<f16, A>;
    var ka0: coop_mat16x16<f16, A>;
    var ka1: coop_mat16x16<f16, A>;
    var ka2: coop_mat16x16<f16, A>;
    var ka3: coop_mat16x16<f16, A>;
    var kb0: coop_mat16x16<f16, A>;
    var kb1: coop_mat16x16<f16, A>;
    var kb2: coop_mat16x16<f16, A>;
    var kb3: coop_mat16x16<f16, A>;
    // the qdec tiles (beside W) and P tiles (beside kdecᵀ) of o's products
    var qa0: coop_mat16x16<f16, A>;
    var qa1: coop_mat16x16<f16, A>;
    var qa2: coop_mat16x16<f16, A>;
    var qa3: coop_mat16x16<f16, A>;
    var qa4: coop_mat16x16<f16, A>;
    var qa5: coop_mat16x16<f16, A>;
    var qa6: coop_mat16x16<f16, A>;
    var qa7: coop_mat16x16<f16, A>;
    var pa0: coop_mat16x16<f16, A>;
    var pa1: coop_mat16x16<f16, A>;
    var pa2: coop_mat16x16<f16, A>;
    var pa3: coop_mat16x16<f16, A>;
    // (the branches test c_begin and c_end, never the loop counter: naga's uniformity analysis
    // takes a branch on a loop counter as non-uniform, and the matrix operations need uniform
    // control flow; the loads are written out twice, as WGSL has no arrays of matrices)
    // (U and e^Γ_last likewise one chunk ahead, `nxt`)
    var nxt: ChunkIn;
    // chunk c's o tile leaves one chunk late (through s_c rows 64 .., which nothing else uses
    // between the top barrier and the ΔS store), so it adds no barrier; po_* name its rows
    var acc_o = coopLoadT<coop_mat16x16<f32, C>>(&s_zero[0], 16u);
    var po_t0 = 0u;
    var po_l = 0u;
    if (c_begin < c_end) {
        nxt = chunk_in(c_begin, z, vi, e_v, sr);
        {
            let wl = (c_begin * prm.hvb + z) * ws16_slot(K);
            wa0 = coopLoadT<coop_mat16x16<f16, A>>(&ws16[wl + tile_first(wi, 0u, K)], TILE_STRIDE);
            wa1 = coopLoadT<coop_mat16x16<f16, A>>(&ws16[wl + tile_first(wi, 1u, K)], TILE_STRIDE);
            wa2 = coopLoadT<coop_mat16x16<f16, A>>(&ws16[wl + tile_first(wi, 2u, K)], TILE_STRIDE);
            wa3 = coopLoadT<coop_mat16x16<f16, A>>(&ws16[wl + tile_first(wi, 3u, K)], TILE_STRIDE);
            if (K == 128u) {
                wa4 = coopLoadT<coop_mat16x16<f16, A>>(&ws16[wl + tile_first(wi, 4u, K)], TILE_STRIDE);
                wa5 = coopLoadT<coop_mat16x16<f16, A>>(&ws16[wl + tile_first(wi, 5u, K)], TILE_STRIDE);
                wa6 = coopLoadT<coop_mat16x16<f16, A>>(&ws16[wl + tile_first(wi, 6u, K)], TILE_STRIDE);
                wa7 = coopLoadT<coop_mat16x16<f16, A>>(&ws16[wl + tile_first(wi, 7u, K)], TILE_STRIDE);
            }
            {
                let ql = wl + ws16_qd(K);
                qa0 = coopLoadT<coop_mat16x16<f16, A>>(&ws16[ql + tile_first(wi, 0u, K)], TILE_STRIDE);
                qa1 = coopLoadT<coop_mat16x16<f16, A>>(&ws16[ql + tile_first(wi, 1u, K)], TILE_STRIDE);
                qa2 = coopLoadT<coop_mat16x16<f16, A>>(&ws16[ql + tile_first(wi, 2u, K)], TILE_STRIDE);
                qa3 = coopLoadT<coop_mat16x16<f16, A>>(&ws16[ql + tile_first(wi, 3u, K)], TILE_STRIDE);
                if (K == 128u) {
                    qa4 = coopLoadT<coop_mat16x16<f16, A>>(&ws16[ql + tile_first(wi, 4u, K)], TILE_STRIDE);
                    qa5 = coopLoadT<coop_mat16x16<f16, A>>(&ws16[ql + tile_first(wi, 5u, K)], TILE_STRIDE);
                    qa6 = coopLoadT<coop_mat16x16<f16, A>>(&ws16[ql + tile_first(wi, 6u, K)], TILE_STRIDE);
                    qa7 = coopLoadT<coop_mat16x16<f16, A>>(&ws16[ql + tile_first(wi, 7u, K)], TILE_STRIDE);
                }
            }
        }
    }
    for (var c = c_begin; c < c_end; c++) {
        let ca = prm.aux_chunks + 4u * c;
        let t0 = aux[ca];
        let l = aux[ca + 1u];
        let ck = aux[ca + 3u];
        let slot = c * prm.hvb + z;
        let w16 = slot * ws16_slot(K);   // the slot's first half

        let ua = nxt.ua;
        let ub = nxt.ub;
        let gl = nxt.gl;

        // S as f16 (orders the previous chunk's reads of s_s16 and s_c before these stores)
        workgroupBarrier();
        if (d_s < K) {
            s_copy16(d_s, 4u * sc, s0);
            s_copy16(d_s + 1u, 4u * sc, s1);
            s_copy16(d_s + 2u, 4u * sc, s2);
            s_copy16(d_s + 3u, 4u * sc, s3);
        }
        // the previous chunk's o tile (zeros before the first chunk, which writes none); the last
        // reads of s_c (the S update) came before the barrier above
        let po = 2048u + 16u * wi * 32u + 16u * wc;
        coopStoreT(acc_o, &s_c[po], 32u);
        workgroupBarrier();
        // (read before this invocation's W·S work; the next store into rows 64 .. is the ΔS one,
        // two barriers later)
        put_o8(po_t0, po_l, hv, vi, e_v, vc);

        // W·S: accumulators start from a zero tile (a zero-valued declaration gives garbage with
        // wgpu's own module path); beside it o's qdec·h over the same B tiles, h being this S
        var acc_w = coopLoadT<coop_mat16x16<f32, C>>(&s_zero[0], 16u);
        acc_o = coopLoadT<coop_mat16x16<f32, C>>(&s_zero[0], 16u);
        let sw = 16u * wc;
        {
            let h0 = coopLoadT<coop_mat16x16<f16, B>>(&s_s16[sw], 32u);
            let h1 = coopLoadT<coop_mat16x16<f16, B>>(&s_s16[512u + sw], 32u);
            let h2 = coopLoadT<coop_mat16x16<f16, B>>(&s_s16[1024u + sw], 32u);
            let h3 = coopLoadT<coop_mat16x16<f16, B>>(&s_s16[1536u + sw], 32u);
            acc_w = coopMultiplyAdd(wa0, h0, acc_w);
            acc_w = coopMultiplyAdd(wa1, h1, acc_w);
            acc_w = coopMultiplyAdd(wa2, h2, acc_w);
            acc_w = coopMultiplyAdd(wa3, h3, acc_w);
            acc_o = coopMultiplyAdd(qa0, h0, acc_o);
            acc_o = coopMultiplyAdd(qa1, h1, acc_o);
            acc_o = coopMultiplyAdd(qa2, h2, acc_o);
            acc_o = coopMultiplyAdd(qa3, h3, acc_o);
        }
        if (K == 128u) {
            let h4 = coopLoadT<coop_mat16x16<f16, B>>(&s_s16[2048u + sw], 32u);
            let h5 = coopLoadT<coop_mat16x16<f16, B>>(&s_s16[2560u + sw], 32u);
            let h6 = coopLoadT<coop_mat16x16<f16, B>>(&s_s16[3072u + sw], 32u);
            let h7 = coopLoadT<coop_mat16x16<f16, B>>(&s_s16[3584u + sw], 32u);
            acc_w = coopMultiplyAdd(wa4, h4, acc_w);
            acc_w = coopMultiplyAdd(wa5, h5, acc_w);
            acc_w = coopMultiplyAdd(wa6, h6, acc_w);
            acc_w = coopMultiplyAdd(wa7, h7, acc_w);
            acc_o = coopMultiplyAdd(qa4, h4, acc_o);
            acc_o = coopMultiplyAdd(qa5, h5, acc_o);
            acc_o = coopMultiplyAdd(qa6, h6, acc_o);
            acc_o = coopMultiplyAdd(qa7, h7, acc_o);
        }
        // this chunk's kdecᵀ and P tiles, issued after W·S
        {
            let kl = w16 + 64u * K;
            ka0 = coopLoadT<coop_mat16x16<f16, A>>(&ws16[kl + tile_first(wi, 0u, 64u)], TILE_STRIDE);
            ka1 = coopLoadT<coop_mat16x16<f16, A>>(&ws16[kl + tile_first(wi, 1u, 64u)], TILE_STRIDE);
            ka2 = coopLoadT<coop_mat16x16<f16, A>>(&ws16[kl + tile_first(wi, 2u, 64u)], TILE_STRIDE);
            ka3 = coopLoadT<coop_mat16x16<f16, A>>(&ws16[kl + tile_first(wi, 3u, 64u)], TILE_STRIDE);
            if (K == 128u) {
                kb0 = coopLoadT<coop_mat16x16<f16, A>>(&ws16[kl + tile_first(wi + 4u, 0u, 64u)], TILE_STRIDE);
                kb1 = coopLoadT<coop_mat16x16<f16, A>>(&ws16[kl + tile_first(wi + 4u, 1u, 64u)], TILE_STRIDE);
                kb2 = coopLoadT<coop_mat16x16<f16, A>>(&ws16[kl + tile_first(wi + 4u, 2u, 64u)], TILE_STRIDE);
                kb3 = coopLoadT<coop_mat16x16<f16, A>>(&ws16[kl + tile_first(wi + 4u, 3u, 64u)], TILE_STRIDE);
            }
            {
                let pl = w16 + ws16_p(K);
                pa0 = coopLoadT<coop_mat16x16<f16, A>>(&ws16[pl + tile_first(wi, 0u, 64u)], TILE_STRIDE);
                pa1 = coopLoadT<coop_mat16x16<f16, A>>(&ws16[pl + tile_first(wi, 1u, 64u)], TILE_STRIDE);
                pa2 = coopLoadT<coop_mat16x16<f16, A>>(&ws16[pl + tile_first(wi, 2u, 64u)], TILE_STRIDE);
                pa3 = coopLoadT<coop_mat16x16<f16, A>>(&ws16[pl + tile_first(wi, 3u, 64u)], TILE_STRIDE);
            }
        }
        coopStoreT(acc_w, &s_c[16u * wi * 32u + 16u * wc], 32u);
        workgroupBarrier();

        // V_new = U − W·S, S scaled
        put_vnew16(vi, vc, l, ua - s_c4(vi, vc));
        put_vnew16(vi, vc + 4u, l, ub - s_c4(vi, vc + 4u));
        s0 *= gl.x;
        s1 *= gl.y;
        s2 *= gl.z;
        s3 *= gl.w;
        workgroupBarrier();

        // ΔS = kdecᵀ·V_new over the 64 rows of the chunk (V_new and kdec are zero beyond it)
        var acc_d0 = coopLoadT<coop_mat16x16<f32, C>>(&s_zero[0], 16u);
        var acc_d1 = coopLoadT<coop_mat16x16<f32, C>>(&s_zero[0], 16u);
        let b0 = coopLoadT<coop_mat16x16<f16, B>>(&s_v16[sw], 32u);
        let b1 = coopLoadT<coop_mat16x16<f16, B>>(&s_v16[512u + sw], 32u);
        let b2 = coopLoadT<coop_mat16x16<f16, B>>(&s_v16[1024u + sw], 32u);
        let b3 = coopLoadT<coop_mat16x16<f16, B>>(&s_v16[1536u + sw], 32u);
        acc_d0 = coopMultiplyAdd(ka0, b0, acc_d0);
        acc_d0 = coopMultiplyAdd(ka1, b1, acc_d0);
        acc_d0 = coopMultiplyAdd(ka2, b2, acc_d0);
        acc_d0 = coopMultiplyAdd(ka3, b3, acc_d0);
        if (K == 128u) {
            acc_d1 = coopMultiplyAdd(kb0, b0, acc_d1);
            acc_d1 = coopMultiplyAdd(kb1, b1, acc_d1);
            acc_d1 = coopMultiplyAdd(kb2, b2, acc_d1);
            acc_d1 = coopMultiplyAdd(kb3, b3, acc_d1);
        }
        acc_o = coopMultiplyAdd(pa0, b0, acc_o);
        acc_o = coopMultiplyAdd(pa1, b1, acc_o);
        acc_o = coopMultiplyAdd(pa2, b2, acc_o);
        acc_o = coopMultiplyAdd(pa3, b3, acc_o);
        // the next chunk's operands (this chunk's are dead now; the last chunk reloads its own)
        nxt = chunk_in(min(c + 1u, c_end - 1u), z, vi, e_v, sr);
        {
            let wl = (min(c + 1u, c_end - 1u) * prm.hvb + z) * ws16_slot(K);
            wa0 = coopLoadT<coop_mat16x16<f16, A>>(&ws16[wl + tile_first(wi, 0u, K)], TILE_STRIDE);
            wa1 = coopLoadT<coop_mat16x16<f16, A>>(&ws16[wl + tile_first(wi, 1u, K)], TILE_STRIDE);
            wa2 = coopLoadT<coop_mat16x16<f16, A>>(&ws16[wl + tile_first(wi, 2u, K)], TILE_STRIDE);
            wa3 = coopLoadT<coop_mat16x16<f16, A>>(&ws16[wl + tile_first(wi, 3u, K)], TILE_STRIDE);
            if (K == 128u) {
                wa4 = coopLoadT<coop_mat16x16<f16, A>>(&ws16[wl + tile_first(wi, 4u, K)], TILE_STRIDE);
                wa5 = coopLoadT<coop_mat16x16<f16, A>>(&ws16[wl + tile_first(wi, 5u, K)], TILE_STRIDE);
                wa6 = coopLoadT<coop_mat16x16<f16, A>>(&ws16[wl + tile_first(wi, 6u, K)], TILE_STRIDE);
                wa7 = coopLoadT<coop_mat16x16<f16, A>>(&ws16[wl + tile_first(wi, 7u, K)], TILE_STRIDE);
            }
            {
                let ql = wl + ws16_qd(K);
                qa0 = coopLoadT<coop_mat16x16<f16, A>>(&ws16[ql + tile_first(wi, 0u, K)], TILE_STRIDE);
                qa1 = coopLoadT<coop_mat16x16<f16, A>>(&ws16[ql + tile_first(wi, 1u, K)], TILE_STRIDE);
                qa2 = coopLoadT<coop_mat16x16<f16, A>>(&ws16[ql + tile_first(wi, 2u, K)], TILE_STRIDE);
                qa3 = coopLoadT<coop_mat16x16<f16, A>>(&ws16[ql + tile_first(wi, 3u, K)], TILE_STRIDE);
                if (K == 128u) {
                    qa4 = coopLoadT<coop_mat16x16<f16, A>>(&ws16[ql + tile_first(wi, 4u, K)], TILE_STRIDE);
                    qa5 = coopLoadT<coop_mat16x16<f16, A>>(&ws16[ql + tile_first(wi, 5u, K)], TILE_STRIDE);
                    qa6 = coopLoadT<coop_mat16x16<f16, A>>(&ws16[ql + tile_first(wi, 6u, K)], TILE_STRIDE);
                    qa7 = coopLoadT<coop_mat16x16<f16, A>>(&ws16[ql + tile_first(wi, 7u, K)], TILE_STRIDE);
                }
            }
        }
        // (every invocation read the W·S tile of s_c before the last barrier)
        coopStoreT(acc_d0, &s_c[16u * wi * 32u + 16u * wc], 32u);
        if (K == 128u) {
            coopStoreT(acc_d1, &s_c[16u * (wi + 4u) * 32u + 16u * wc], 32u);
        }
        workgroupBarrier();
        // S ← e^Γ_last ⊙ S + ΔS
        if (d_s < K) {
            s0 += s_c4(d_s, 4u * sc);
            s1 += s_c4(d_s + 1u, 4u * sc);
            s2 += s_c4(d_s + 2u, 4u * sc);
            s3 += s_c4(d_s + 3u, 4u * sc);
        }
        po_t0 = t0;
        po_l = l;

        put_ckpt(ck, hv, d_s, e_s, s0, s1, s2, s3);
    }

    // the last chunk's o (none without chunks: po_l = 0)
    workgroupBarrier();
    coopStoreT(acc_o, &s_c[2048u + 16u * wi * 32u + 16u * wc], 32u);
    workgroupBarrier();
    put_o8(po_t0, po_l, hv, vi, e_v, vc);
    put_final(final_row, hv, d_s, e_s, s0, s1, s2, s3);
}

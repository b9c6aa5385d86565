// intra.wgsl: the prelude of the two chunk-parallel intra stages (gdn and kda), after common.wgsl
// and inputs.wgsl: their workspace bindings, the A / T matrix in workgroup memory, the solve of
// T = (I + A)^-1 and the W/U/qdec writer (a register-tiled product over 64 x 64 source tiles).
// Each stage declares s_x as a vec4 workgroup array of >= 544 vec4s and x_get / x_set over it
// (the solve's scratch); after the solve s_x holds T as packed triangular Tᵀ row groups and s_at
// holds the staged source tiles.
//
// The W/U writer takes 64 x 64 source tiles (K = V = 128: 2 k, 2 v, 2 q tiles) with a 4 x 4
// block per invocation (8 vec4 workgroup loads per 64 FMAs, unrolled by 4, no branches inside),
// row factors precomputed per row, and Wᵀ stores that fill whole 32-byte sectors.
//
// The last prelude before the stage decides where W, kdec, qdec and P go (the hooks set_base16,
// put_kdec16, store_w16, store_qd16_tile, put_p16, the constants PACK_T and KDA_STEP4_COOP):
// intra_workspace_f32.wgsl (f32 into wsa, the `chunked` kernel), kda_intra_workspace_f16.wgsl,
// gdn_intra_workspace_f16.wgsl and kda_intra_coop.wgsl (f16 into ws16, the `coop` kernel).
//
// SAFETY (unchecked modules): s_at holds 4160 scalars (1040 vec4s) and every solve index is
// i * AS + j with i, j < 64 (< 4160); source tile slots are src_slot(m, q) = 16 m + (q ^ (m & 15))
// with m < 64, q < 16 (< 1024 vec4s); the packed Tᵀ has 544 vec4s (tp_base(15) + 63 = 543) and
// t_product reads tp_base(g) + m with m < mend <= 4 g + 4 (g < 16); the solve's scratch indices
// are < 1024 scalars (merge_y's Y blocks: yb + r0 n + c0 + n + 1 <= yb + n², yb + n² <= 1024);
// the W/U/qdec/kdec writes are guarded by the head dims (d < K, columns < V4)
// and land in the (chunk, head) slot the caller passes. The q/k/v loaders read token t0 + i only
// for i < L (t0 + L <= T from the chunk table of validated cu_seqlens), else token t0, and channel
// d < K (e < V), else 0: inside q, k, v. ld4 (16-bit inputs) reads words e / 2 and e / 2 + 1 of
// elements e .. e + 3, which its callers keep inside one row (d + 3 < K when K is a multiple of
// 4 and d < K, likewise for V).

@group(0) @binding(7) var<storage, read_write> wsa: array<f32>;
@group(0) @binding(8) var<storage, read_write> wsu: array<f32>;

// kdec row m, channels d0 .. d0 + 3 (d0 a multiple of 4): f32 into wsa, or f16 into ws16 where
// the last prelude's put_kdec16 takes it (returns true).
fn put_kdec(base_kd: u32, m: u32, d0: u32, kd: vec4<f32>) {
    if (put_kdec16(m, d0, kd)) {
        return;
    }
    for (var e = 0u; e < 4u; e++) {
        let d = d0 + e;
        if (d < HEAD_K) {
            wsa[base_kd + m * k4(HEAD_K) + d] = kd[e];
        }
    }
}

// Register blocks of the gdn stage's hooks (gdn_intra_f32.wgsl, gdn_intra_coop.wgsl; unused by
// kda). Pre2: the raw operands of step 2's first tile, loaded before the gates (the mapping is
// the hook file's).
struct Pre2 {
    a: vec4<f32>,
    b: vec4<f32>,
    c: vec4<f32>,
    d: vec4<f32>,
}

// Step 2's results for invocation (ty, tx) = (tid / 16, tid % 16): rows 4 ty + a of K Kᵀ (kk_a)
// and Q Kᵀ (qk_a), columns 4 tx ..; ss: the summed squares of row tid % 64 of k (tid < 64) or
// q (tid < 128).
struct Dots {
    kk0: vec4<f32>,
    kk1: vec4<f32>,
    kk2: vec4<f32>,
    kk3: vec4<f32>,
    qk0: vec4<f32>,
    qk1: vec4<f32>,
    qk2: vec4<f32>,
    qk3: vec4<f32>,
    ss: f32,
}

// The raw values of one step-4 source tile held by an invocation (mapping: the hook file's).
struct Src4 {
    r0: vec4<f32>,
    r1: vec4<f32>,
    r2: vec4<f32>,
    r3: vec4<f32>,
}

// The q/k/v loaders of the two stages (inputs.wgsl's `ld` at clamped indices).

// q (which 0) or k (1) of chunk row i, channel d: an unconditional load (row t0, channel 0 when
// outside the chunk or K) zeroed by selection, so a batch of these issues back to back.
fn qk_at(which: u32, i: u32, d: u32, t0: u32, l: u32, h: u32) -> f32 {
    let ok = i < l && d < HEAD_K;
    let x = ld(which, ((t0 + select(0u, i, ok)) * prm.heads + h) * HEAD_K + select(0u, d, ok));
    return select(0.0, x, ok);
}

// v of chunk row i, column e (same scheme).
fn v_at(i: u32, e: u32, t0: u32, l: u32, hv: u32) -> f32 {
    let ok = i < l && e < HEAD_V;
    let x = ld(2u, ((t0 + select(0u, i, ok)) * prm.vheads + hv) * HEAD_V + select(0u, e, ok));
    return select(0.0, x, ok);
}

// Four consecutive elements e .. e + 3 (e a multiple of 4) of q (which 0), k (1) or v (2): for
// 16-bit inputs two word loads and four decodes (inputs.wgsl's `ld` loads a word per element).
fn ld4(which: u32, e: u32) -> vec4<f32> {
    if (QKV_DT == DT_F32) {
        return vec4<f32>(ld(which, e), ld(which, e + 1u), ld(which, e + 2u), ld(which, e + 3u));
    }
    let w = e >> 1u;
    var w0: u32;
    var w1: u32;
    if (which == 0u) {
        w0 = qb[w];
        w1 = qb[w + 1u];
    } else if (which == 1u) {
        w0 = kb[w];
        w1 = kb[w + 1u];
    } else {
        w0 = vb[w];
        w1 = vb[w + 1u];
    }
    return vec4<f32>(decode16(w0, 0u, QKV_DT), decode16(w0, 1u, QKV_DT),
        decode16(w1, 0u, QKV_DT), decode16(w1, 1u, QKV_DT));
}

// q (which 0) or k (1) of row m, channels d .. d + 3 (d a multiple of 4): two word loads when
// K is a multiple of 4 (then d < K covers d + 3 and the element offset is a multiple of 4), else
// four qk_at; zeros beyond K or the chunk, loads at row t0, channel 0 there.
fn qk4_at(which: u32, m: u32, d: u32, t0: u32, l: u32, h: u32) -> vec4<f32> {
    if (HEAD_K % 4u == 0u) {
        let ok = m < l && d < HEAD_K;
        let row = (t0 + select(0u, m, ok)) * prm.heads + h;
        return select(vec4<f32>(0.0), ld4(which, row * HEAD_K + select(0u, d, ok)), ok);
    }
    return vec4<f32>(qk_at(which, m, d, t0, l, h), qk_at(which, m, d + 1u, t0, l, h),
        qk_at(which, m, d + 2u, t0, l, h), qk_at(which, m, d + 3u, t0, l, h));
}

// v of row m, columns e .. e + 3 (e a multiple of 4), as qk4_at.
fn v4_at(m: u32, e: u32, t0: u32, l: u32, hv: u32) -> vec4<f32> {
    if (HEAD_V % 4u == 0u) {
        let ok = m < l && e < HEAD_V;
        let row = (t0 + select(0u, m, ok)) * prm.vheads + hv;
        return select(vec4<f32>(0.0), ld4(2u, row * HEAD_V + select(0u, e, ok)), ok);
    }
    return vec4<f32>(v_at(m, e, t0, l, hv), v_at(m, e + 1u, t0, l, hv),
        v_at(m, e + 2u, t0, l, hv), v_at(m, e + 3u, t0, l, hv));
}

// Raw source elements (row m, columns 4 q .. 4 q + 3) of tile `tile` of the W/U/qdec stream: k for
// the first ntk tiles, v for the next ntv, q for the last ntk (64 columns a tile). Unconditional
// loads at clamped indices, zeroed by selection (rows >= L, columns beyond K or V).
fn src4(tile: u32, m: u32, q: u32, t0: u32, l: u32, h: u32, hv: u32) -> vec4<f32> {
    let ntk = (HEAD_K + 63u) / 64u;
    let ntv = (k4(HEAD_V) + 63u) / 64u;
    if (tile < ntk) {
        return qk4_at(1u, m, tile * 64u + 4u * q, t0, l, h);
    }
    if (tile < ntk + ntv) {
        return v4_at(m, (tile - ntk) * 64u + 4u * q, t0, l, hv);
    }
    return qk4_at(0u, m, (tile - ntk - ntv) * 64u + 4u * q, t0, l, h);
}

// The reciprocal L2 norms from the summed squares: invocations 0..63 hold k row `nrow`'s sum,
// 64..127 q's (1 when l2norm is off or the row is past the chunk). Each stage declares s_rk, s_rq.
fn store_norm(tid: u32, nrow: u32, ss: f32, l: u32) {
    if (tid < 128u) {
        var r = 1.0;
        if (prm.l2norm == 1u && nrow < l) {
            r = 1.0 / sqrt(ss + 1e-6);
        }
        if (tid < 64u) { s_rk[nrow] = r; } else { s_rq[nrow] = r; }
    }
}

const AS: u32 = 65u;       // row stride of the A / T matrix

// A (strictly lower, rows scaled by beta) and then T, T[i][j] stored at s_at[j][i]; rows padded
// to AS so column walks do not conflict.
var<workgroup> s_at: array<vec4<f32>, 1040>;

fn at_get(x: u32) -> f32 {
    return s_at[x >> 2u][x & 3u];
}

fn at_set(x: u32, v: f32) {
    s_at[x >> 2u][x & 3u] = v;
}

// One term A[i][m] T[m][j] of the diagonal-block substitution, zero unless j < m < i (the loads
// are unconditional at m' = min(m, i − 1): row i's A part and row j's A/T part, both settled, so
// four terms issue their loads together).
fn sub_term(i: u32, j: u32, m: u32) -> f32 {
    let mm = min(m, i - 1u);
    let p = at_get(i * AS + mm) * at_get(j * AS + mm);
    return select(0.0, p, j < m && m < i);
}

// Block merge, first half: Y = A_RC T_CC for the n x n blocks at rows rb, columns cb (T_CC, the
// diagonal block at cb, is solved: T[k][c] = 1 for k == c, 0 for k < c), into s_x at yb (row-major
// [n][n]). Invocation u < (n / 2)² takes a 2 x 2 block of Y, rows r0 = 2 (u % (n / 2)) .. (so a
// warp's lanes share c0 and the trip count), columns c0, c0 + 1; the terms k = c0, c0 + 1 (where
// T is 1 or 0) are taken out of the loop, which then needs no selection: 4 loads for 4 FMAs.
fn merge_y(u: u32, rb: u32, cb: u32, n: u32, yb: u32) {
    let h = n / 2u;
    let r0 = 2u * (u % h);
    let c0 = 2u * (u / h);
    let a0 = (rb + r0) * AS + cb;   // A[rb + r0][cb + k] at a0 + k
    let a1 = a0 + AS;
    let t0 = (cb + c0) * AS + cb;   // T[cb + k][cb + c0] at t0 + k (k > c0)
    let t1 = t0 + AS;
    let t = at_get(t0 + c0 + 1u);
    let a0d = at_get(a0 + c0 + 1u);
    let a1d = at_get(a1 + c0 + 1u);
    var y00 = at_get(a0 + c0) + a0d * t;
    var y01 = a0d;
    var y10 = at_get(a1 + c0) + a1d * t;
    var y11 = a1d;
    for (var k = c0 + 2u; k < n; k++) {
        let x0 = at_get(a0 + k);
        let x1 = at_get(a1 + k);
        let s0 = at_get(t0 + k);
        let s1 = at_get(t1 + k);
        y00 += x0 * s0;
        y01 += x0 * s1;
        y10 += x1 * s0;
        y11 += x1 * s1;
    }
    let o = yb + r0 * n + c0;
    x_set(o, y00);
    x_set(o + 1u, y01);
    x_set(o + n, y10);
    x_set(o + n + 1u, y11);
}

// Block merge, second half: T_RC = −T_RR Y (T_RR, the diagonal block at rb, solved), stored in
// the solve's layout (T[i][j] at s_at[j][i]). Invocation u takes rows r0, r0 + 1 and columns
// c0 = 2 (u % (n / 2)), c0 + 1 (a warp's lanes share r0 and the trip count).
fn merge_t(u: u32, rb: u32, cb: u32, n: u32, yb: u32) {
    let h = n / 2u;
    let c0 = 2u * (u % h);
    let r0 = 2u * (u / h);
    let y0 = yb + r0 * n + c0;
    let yr0 = x_get(y0);
    let yr1 = x_get(y0 + 1u);
    var s00 = yr0;
    var s01 = yr1;
    var s10 = x_get(y0 + n);
    var s11 = x_get(y0 + n + 1u);
    for (var rr = 0u; rr < r0; rr++) {
        let tr = (rb + rr) * AS + rb + r0;   // T[rb + r0][rb + rr], then row r0 + 1
        let u0 = at_get(tr);
        let u1 = at_get(tr + 1u);
        let x0 = x_get(yb + rr * n + c0);
        let x1 = x_get(yb + rr * n + c0 + 1u);
        s00 += u0 * x0;
        s01 += u0 * x1;
        s10 += u1 * x0;
        s11 += u1 * x1;
    }
    let t = at_get((rb + r0) * AS + rb + r0 + 1u);   // T[rb + r0 + 1][rb + r0]
    s10 += t * yr0;
    s11 += t * yr1;
    let o = (cb + c0) * AS + rb + r0;
    at_set(o, -s00);
    at_set(o + 1u, -s10);
    at_set(o + AS, -s01);
    at_set(o + AS + 1u, -s11);
}

// T[i][m] as the W/U product reads it: the solved entry for m < i < L, 1 on the diagonal, 0
// elsewhere (read from the solve's layout, T[i][m] at s_at[m][i]).
fn t_at(i: u32, m: u32, l: u32) -> f32 {
    if (m < i && i < l) {
        return at_get(m * AS + i);
    }
    return select(0.0, 1.0, m == i);
}

// First vec4 of row group g (rows 4 g .. 4 g + 3) in the packed triangular Tᵀ: group g keeps
// columns m <= 4 g + 3 only, 4 g + 4 vec4s, so the 16 groups take 2 g (g + 1) .. : 544 vec4s.
fn tp_base(g: u32) -> u32 {
    return 2u * g * (g + 1u);
}

// Slot of vec4 column q (< 16) of row m (< 64) of a 64 x 64 source tile in s_at, XOR-swizzled so
// that both the product's row reads (16 columns of one row) and the qdec transpose's column
// reads (one column of 32 rows) spread over the banks. < 1024 of s_at's 1040 vec4s.
fn src_slot(m: u32, q: u32) -> u32 {
    return m * 16u + (q ^ (m & 15u));
}

// The 4 x 4 output block of the W/U product: rows 4 g + a (a < 4, the fields), columns 4 cq ..
struct Blk {
    a0: vec4<f32>,
    a1: vec4<f32>,
    a2: vec4<f32>,
    a3: vec4<f32>,
}

// out[i] = sum_{m <= i} T[i][m] X[m] for rows i = 4 g + a, vec4 column cq of the staged source
// tile X (rows >= L of X are zero, so the sum stops at the chunk's rows rounded up to 4). Four
// rows of m a step, 8 vec4 workgroup loads for 64 multiply-adds, no branches inside; the terms are
// added in row order.
fn t_product(g: u32, cq: u32, l: u32) -> Blk {
    let pb = tp_base(g);
    let mend = min(4u * g + 4u, (l + 3u) & ~3u);
    var b = Blk(vec4<f32>(0.0), vec4<f32>(0.0), vec4<f32>(0.0), vec4<f32>(0.0));
    for (var m = 0u; m < mend; m += 4u) {
        let t0 = s_x[pb + m];
        let t1 = s_x[pb + m + 1u];
        let t2 = s_x[pb + m + 2u];
        let t3 = s_x[pb + m + 3u];
        let x0 = s_at[src_slot(m, cq)];
        let x1 = s_at[src_slot(m + 1u, cq)];
        let x2 = s_at[src_slot(m + 2u, cq)];
        let x3 = s_at[src_slot(m + 3u, cq)];
        b.a0 += t0.x * x0;
        b.a1 += t0.y * x0;
        b.a2 += t0.z * x0;
        b.a3 += t0.w * x0;
        b.a0 += t1.x * x1;
        b.a1 += t1.y * x1;
        b.a2 += t1.z * x1;
        b.a3 += t1.w * x1;
        b.a0 += t2.x * x2;
        b.a1 += t2.y * x2;
        b.a2 += t2.z * x2;
        b.a3 += t2.w * x2;
        b.a0 += t3.x * x3;
        b.a1 += t3.y * x3;
        b.a2 += t3.z * x3;
        b.a3 += t3.w * x3;
    }
    return b;
}

// Wᵀ[d][4 g .. 4 g + 3] for the block's columns d = c0 + 4 cq + e < K (rows >= L as zeros): the
// two row groups of a warp fill one 32-byte sector per column.
fn store_w(base_w: u32, g: u32, cq: u32, c0: u32, b: Blk, l: u32) {
    let i = 4u * g;
    if (store_w16(g, cq, c0, b, l)) {
        return;
    }
    for (var e = 0u; e < 4u; e++) {
        let d = c0 + 4u * cq + e;
        if (d < HEAD_K) {
            let o = base_w + d * 64u + i;
            wsa[o] = select(0.0, b.a0[e], i < l);
            wsa[o + 1u] = select(0.0, b.a1[e], i + 1u < l);
            wsa[o + 2u] = select(0.0, b.a2[e], i + 2u < l);
            wsa[o + 3u] = select(0.0, b.a3[e], i + 3u < l);
        }
    }
}

// U[4 g + a][c0 + 4 cq ..] (row-major [64][V4], rows >= L as zeros; columns < V4 come whole).
fn store_u(base_u: u32, g: u32, cq: u32, c0: u32, b: Blk, l: u32) {
    let V4 = k4(HEAD_V);
    let col = c0 + 4u * cq;
    if (col < V4) {
        let i = 4u * g;
        store_u_row(base_u + i * V4 + col, b.a0, i < l);
        store_u_row(base_u + (i + 1u) * V4 + col, b.a1, i + 1u < l);
        store_u_row(base_u + (i + 2u) * V4 + col, b.a2, i + 2u < l);
        store_u_row(base_u + (i + 3u) * V4 + col, b.a3, i + 3u < l);
    }
}

fn store_u_row(o: u32, x: vec4<f32>, live: bool) {
    let y = select(vec4<f32>(0.0), x, live);
    wsu[o] = y.x;
    wsu[o + 1u] = y.y;
    wsu[o + 2u] = y.z;
    wsu[o + 3u] = y.w;
}

// qdecᵀ rows c0 + 4 q + e (< K) from the staged q tile: invocation tid reads token i = tid % 64,
// vec4 columns q = tid / 64 + 4 r, and stores 64 contiguous tokens per row across the warp.
// (Where the last prelude's store_qd16_tile takes it, qdec goes to ws16 as f16 tiles instead.)
fn store_qd(base_qd: u32, tid: u32, c0: u32) {
    if (store_qd16_tile(tid, c0)) {
        return;
    }
    let i = tid % 64u;
    for (var r = 0u; r < 4u; r++) {
        let q = tid / 64u + 4u * r;
        let x = s_at[src_slot(i, q)];
        for (var e = 0u; e < 4u; e++) {
            let d = c0 + 4u * q + e;
            if (d < HEAD_K) {
                wsa[base_qd + d * 64u + i] = x[e];
            }
        }
    }
}

// Step 3 of the chunked algorithm (docs/spec.md): T = (I + A)^-1, unit lower triangular, by
// blocks of 16 (T[i][j] stored at s_at[j][i]):
//    the eight diagonal blocks of 8 x 8 by forward substitution, one column per invocation,
//    T[i][j] = -A[i][j] - sum_{j < m < i} A[i][m] T[m][j]; then by doubling, as the inverse of
//    [[L11, 0], [A21, L22]] is [[T11, 0], [-T22 A21 T11, T22]]: the 8 x 8 blocks below the
//    diagonal of each 16 x 16 one, the 16 x 16 blocks (1, 0) and (3, 2), then the 32 x 32 block
//    below the diagonal, each as Y = A21 T11 into s_x and T21 = -T22 Y (merge_y, merge_t: 2 x 2
//    register blocks). Rows >= L have A = 0: identity.
// Called by every invocation (it holds workgroup barriers); l = the chunk length.
fn solve_t(tid: u32, l: u32) {
    if (tid < 64u) {
        let j = tid;
        let bend = (j / 8u) * 8u + 8u;
        let b0 = bend - 8u;
        for (var i = j + 1u; i < bend; i++) {
            var acc = -at_get(i * AS + j);
            for (var m = b0; m < bend; m += 4u) {
                acc -= sub_term(i, j, m);
                acc -= sub_term(i, j, m + 1u);
                acc -= sub_term(i, j, m + 2u);
                acc -= sub_term(i, j, m + 3u);
            }
            at_set(j * AS + i, acc);
        }
    }
    workgroupBarrier();
    // the 8 x 8 blocks below the diagonal of each 16 x 16 one: Y into s_x (free during the solve)
    if (tid < 64u) {
        let b = tid / 16u;
        merge_y(tid % 16u, 16u * b + 8u, 16u * b, 8u, 64u * b);
    }
    workgroupBarrier();
    if (tid < 64u) {
        let b = tid / 16u;
        merge_t(tid % 16u, 16u * b + 8u, 16u * b, 8u, 64u * b);
    }
    workgroupBarrier();
    // blocks (1, 0) and (3, 2) of 16 x 16: Y at 0 and 256
    if (tid < 128u) {
        let two = tid / 64u;
        merge_y(tid % 64u, 16u + 32u * two, 32u * two, 16u, 256u * two);
    }
    workgroupBarrier();
    if (tid < 128u) {
        let two = tid / 64u;
        merge_t(tid % 64u, 16u + 32u * two, 32u * two, 16u, 256u * two);
    }
    workgroupBarrier();
    // rows 32..63 x columns 0..31
    merge_y(tid, 32u, 0u, 32u, 0u);
    workgroupBarrier();
    merge_t(tid, 32u, 0u, 32u, 0u);
    workgroupBarrier();
    // Packed triangular Tᵀ into s_x (the solve's scratch, free after the last barrier): vec4
    // (g, m) = T[4 g .. 4 g + 3][m] at tp_base(g) + m, m <= 4 g + 3. PACK_T (the last prelude's
    // const) is false where step 4 does not read it (the stages with step 4 on cooperative
    // matrices).
    for (var idx = tid; PACK_T && idx < 544u; idx += 256u) {
        var g = 0u;
        for (var gg = 1u; gg < 16u; gg++) {
            g = select(g, gg, tp_base(gg) <= idx);
        }
        let m = idx - tp_base(g);
        let i = 4u * g;
        s_x[idx] = vec4<f32>(t_at(i, m, l), t_at(i + 1u, m, l), t_at(i + 2u, m, l),
            t_at(i + 3u, m, l));
    }
    // s_at is the source tile area from here on
    workgroupBarrier();
}

// intra.wgsl: the prelude of the two chunk-parallel intra stages (gdn and kda), after common.wgsl
// and inputs.wgsl: their workspace bindings, the A / T matrix in workgroup memory, the solve of
// T = (I + A)^-1 and the W/U writer. Each stage defines x_get / x_set over its own s_x tile (the
// solve's scratch).
//
// SAFETY (unchecked modules): s_at holds 4160 scalars and every index is i * AS + j with
// i, j < 64 (< 4160); the scratch indices are < 768; the W/U writes are guarded by the head dims
// and land in the (chunk, head) slot the caller passes.

@group(0) @binding(7) var<storage, read_write> wsa: array<f32>;
@group(0) @binding(8) var<storage, read_write> wsu: array<f32>;

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

// One term A[i][k] T[k][j] of a block merge (T[k][j] = 1 for k == j, 0 for k < j).
fn merge_term(i: u32, j: u32, k: u32) -> f32 {
    let tk = at_get(j * AS + k);
    let t = select(select(0.0, tk, k > j), 1.0, k == j);
    return at_get(i * AS + k) * t;
}

// Tᵀ[m][i] (row stride 64) at flat index idx = 64 m + i: T[i][m] for m < i < L, 1 on the
// diagonal, 0 elsewhere (read from the solve's layout).
fn t_entry(idx: u32, l: u32) -> f32 {
    let m = idx / 64u;
    let i = idx % 64u;
    if (m < i && i < l) {
        return at_get(m * AS + i);
    }
    return select(0.0, 1.0, m == i);
}

// W or U rows 4 ty .. 4 ty + 3 (acc_a), columns c0 + 2 tx, + 1.
fn put_wu(is_w: bool, i: u32, col: u32, acc: vec2<f32>, l: u32, base_w: u32, base_u: u32) {
    let V4 = k4(HEAD_V);
    for (var b = 0u; b < 2u; b++) {
        let cc = col + b;
        let out = select(acc[b], 0.0, i >= l);
        if (is_w) {
            if (cc < HEAD_K) {
                wsa[base_w + cc * 64u + i] = out;
            }
        } else if (cc < V4) {
            wsu[base_u + i * V4 + cc] = out;
        }
    }
}

// Step 3 of SPEC.md section 5: T = (I + A)^-1, unit lower triangular, by blocks of 16 (T[i][j]
// stored at s_at[j][i]):
//    the four diagonal blocks by forward substitution, one column per invocation,
//    T[i][j] = -A[i][j] - sum_{j < m < i} A[i][m] T[m][j]; then the blocks below them by
//    distance, T_IJ = -T_II sum_{J <= K < I} A_IK T_KJ (rows >= L have A = 0: identity).
// Called by every invocation (it holds workgroup barriers); l = the chunk length.
fn solve_t(tid: u32, l: u32) {
    if (tid < 64u) {
        let j = tid;
        let bend = (j / 16u) * 16u + 16u;
        let b0 = bend - 16u;
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
    for (var dist = 1u; dist < 4u; dist++) {
        let nb = 4u - dist;
        // X_IJ = sum_K A_IK T_KJ into s_x (free during the solve), block (I, J) = (J + dist, J)
        for (var idx = tid; idx < nb * 256u; idx += 256u) {
            let bj = idx / 256u;
            let bi = bj + dist;
            let i = bi * 16u + (idx % 256u) / 16u;
            let j = bj * 16u + idx % 16u;
            var x = 0.0;
            for (var k = bj * 16u; k < bi * 16u; k += 4u) {
                x += merge_term(i, j, k);
                x += merge_term(i, j, k + 1u);
                x += merge_term(i, j, k + 2u);
                x += merge_term(i, j, k + 3u);
            }
            x_set(idx, x);
        }
        workgroupBarrier();
        for (var idx = tid; idx < nb * 256u; idx += 256u) {
            let bj = idx / 256u;
            let bi = bj + dist;
            let r = (idx % 256u) / 16u;
            let i = bi * 16u + r;
            let j = bj * 16u + idx % 16u;
            var acc = x_get(idx);
            for (var rr = 0u; rr < r; rr++) {
                acc += at_get((bi * 16u + rr) * AS + i) * x_get(bj * 256u + rr * 16u + idx % 16u);
            }
            at_set(j * AS + i, -acc);
        }
        workgroupBarrier();
    }
    // Tᵀ[m][i] (row stride 64) through registers: 16 entries an invocation
    let tt0 = vec4<f32>(t_entry(tid, l), t_entry(tid + 256u, l), t_entry(tid + 512u, l),
        t_entry(tid + 768u, l));
    let tt1 = vec4<f32>(t_entry(tid + 1024u, l), t_entry(tid + 1280u, l),
        t_entry(tid + 1536u, l), t_entry(tid + 1792u, l));
    let tt2 = vec4<f32>(t_entry(tid + 2048u, l), t_entry(tid + 2304u, l),
        t_entry(tid + 2560u, l), t_entry(tid + 2816u, l));
    let tt3 = vec4<f32>(t_entry(tid + 3072u, l), t_entry(tid + 3328u, l),
        t_entry(tid + 3584u, l), t_entry(tid + 3840u, l));
    workgroupBarrier();
    at_set(tid, tt0.x);
    at_set(tid + 256u, tt0.y);
    at_set(tid + 512u, tt0.z);
    at_set(tid + 768u, tt0.w);
    at_set(tid + 1024u, tt1.x);
    at_set(tid + 1280u, tt1.y);
    at_set(tid + 1536u, tt1.z);
    at_set(tid + 1792u, tt1.w);
    at_set(tid + 2048u, tt2.x);
    at_set(tid + 2304u, tt2.y);
    at_set(tid + 2560u, tt2.z);
    at_set(tid + 2816u, tt2.w);
    at_set(tid + 3072u, tt3.x);
    at_set(tid + 3328u, tt3.y);
    at_set(tid + 3584u, tt3.z);
    at_set(tid + 3840u, tt3.w);
}

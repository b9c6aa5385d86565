// prefill_output.wgsl: the chunk-parallel output pass of the chunked prefill (SPEC.md section 5,
// step 5), shared by gdn and kda: O = qdec·h[c] + P·V_new for the L rows of chunk c, where
// qdec = scale q e^Γ, P the masked intra-chunk read-out matrix and V_new, h[c] come from the state
// pass. One workgroup per (chunk, value head, 64-column value tile); 256 invocations with a
// 4 x 4 block each.
//
// Grid: x + y * grid_c = chunk c, z = (hv − hv0) * nvt + value tile (nvt = ceil(V / 64)).
// Writes: outs[off_o + ((t0 + i) * HV + hv) * V + e] (f32) for i < L, e < V.
//
// SAFETY (unchecked module): c < chunks and t0 + L <= T from the chunk table; workspace slots
// (c * hvb + z) were sized by the host; loads are guarded by d < K, e < V, j < 64; workgroup
// indices stay below 64 * 17 and 16 * 64.

override HEAD_K: u32 = 64u;
override HEAD_V: u32 = 64u;

@group(0) @binding(0) var<uniform> prm: Params;
@group(0) @binding(1) var<storage, read> aux: array<u32>;
@group(0) @binding(2) var<storage, read> wsa: array<f32>;
@group(0) @binding(3) var<storage, read> wsu: array<f32>;
@group(0) @binding(4) var<storage, read> wsh: array<f32>;
@group(0) @binding(5) var<storage, read_write> outs: array<f32>;

var<workgroup> s_a: array<f32, 1088>;   // [64][17]: qdec or P columns
var<workgroup> s_b: array<f32, 1024>;   // [16][64]: h or V_new rows
var<workgroup> s_meta: vec2<u32>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) tid: u32) {
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
        s_meta = vec2<u32>(aux[prm.aux_chunks + 4u * c], aux[prm.aux_chunks + 4u * c + 1u]);
    }
    let mt = workgroupUniformLoad(&s_meta);
    let t0 = mt.x;
    let L = mt.y;
    let slot = c * prm.hvb + z;
    let base_w = slot * ws_slot(K, prm.is_kda);
    let base_qd = base_w + ws_qd(K);
    let base_p = base_w + ws_p(K);
    let base_u = slot * 64u * V;
    let base_h = slot * K * V;
    let ty = tid / 16u;
    let tx = tid % 16u;
    var acc: array<f32, 16>;
    for (var x = 0u; x < 16u; x++) { acc[x] = 0.0; }

    // qdec·h
    for (var d0 = 0u; d0 < K; d0 += 16u) {
        for (var q = 0u; q < 4u; q++) {
            let idx = tid + 256u * q;
            let i = idx / 16u;
            let dd = idx % 16u;
            var a = 0.0;
            if (d0 + dd < K) {
                a = wsa[base_qd + i * K + d0 + dd];
            }
            s_a[i * 17u + dd] = a;
            let bd = idx / 64u;
            let be = idx % 64u;
            var b = 0.0;
            if (d0 + bd < K && e0 + be < V) {
                b = wsh[base_h + (d0 + bd) * V + e0 + be];
            }
            s_b[bd * 64u + be] = b;
        }
        workgroupBarrier();
        for (var dd = 0u; dd < 16u; dd++) {
            var av: array<f32, 4>;
            var bv: array<f32, 4>;
            for (var a = 0u; a < 4u; a++) { av[a] = s_a[(ty * 4u + a) * 17u + dd]; }
            for (var b = 0u; b < 4u; b++) { bv[b] = s_b[dd * 64u + tx * 4u + b]; }
            for (var a = 0u; a < 4u; a++) {
                for (var b = 0u; b < 4u; b++) {
                    acc[a * 4u + b] += av[a] * bv[b];
                }
            }
        }
        workgroupBarrier();
    }

    // P·V_new over the L rows (P is zero above the diagonal and beyond L)
    for (var j0 = 0u; j0 < L; j0 += 16u) {
        for (var q = 0u; q < 4u; q++) {
            let idx = tid + 256u * q;
            let i = idx / 16u;
            let jj = idx % 16u;
            s_a[i * 17u + jj] = wsa[base_p + i * 64u + j0 + jj];
            let bj = idx / 64u;
            let be = idx % 64u;
            var b = 0.0;
            if (e0 + be < V) {
                b = wsu[base_u + (j0 + bj) * V + e0 + be];
            }
            s_b[bj * 64u + be] = b;
        }
        workgroupBarrier();
        if (ty * 4u + 3u >= j0) {
            for (var jj = 0u; jj < 16u; jj++) {
                var av: array<f32, 4>;
                var bv: array<f32, 4>;
                for (var a = 0u; a < 4u; a++) { av[a] = s_a[(ty * 4u + a) * 17u + jj]; }
                for (var b = 0u; b < 4u; b++) { bv[b] = s_b[jj * 64u + tx * 4u + b]; }
                for (var a = 0u; a < 4u; a++) {
                    for (var b = 0u; b < 4u; b++) {
                        acc[a * 4u + b] += av[a] * bv[b];
                    }
                }
            }
        }
        workgroupBarrier();
    }

    for (var a = 0u; a < 4u; a++) {
        let i = ty * 4u + a;
        if (i < L) {
            for (var b = 0u; b < 4u; b++) {
                let e = e0 + tx * 4u + b;
                if (e < V) {
                    outs[prm.off_o + ((t0 + i) * prm.vheads + hv) * V + e] = acc[a * 4u + b];
                }
            }
        }
    }
}

// pack16.wgsl: rounds f32 results to bf16 or f16 (round to nearest even) into u32 words, so that
// 16-bit device tensors are written whole words at a time without races.
//
// pack_mode 0 (dense: o, checkpoints, dense final states): word w = (x + y * grid_c) * 256 + tid
// of dst takes elements 2w and 2w + 1 of src[off_o ..] (a missing odd tail element packs as 0).
// pack_mode 1 (state pool rows, in place): workgroup y = sequence n whose pool row r is named
// (aux sequence table word 7); x * 256 + tid walks the words that overlap row r. A word that
// straddles two rows belongs to the row of its first element when that row is named, else to
// the next row; halves of rows that no sequence names keep their bits (rowmap = -1), so pool
// rows not named stay bit-for-bit untouched. Source: the staged f32 states at off_o, row n.
//
// SAFETY (unchecked module): dense words < ceil(total / 2) = the dst length; pool elements
// < rows * row_len and rowmap entries < rows by construction; sources < the staged rows.

@group(0) @binding(0) var<uniform> prm: Params;
@group(0) @binding(1) var<storage, read> aux: array<u32>;
@group(0) @binding(2) var<storage, read> src: array<f32>;
@group(0) @binding(3) var<storage, read_write> dst: array<u32>;

fn pool_half(e: u32, old: u32) -> u32 {
    let row = e / prm.row_len;
    if (row >= prm.rows) {
        return old;
    }
    let seq = aux[prm.aux_rowmap + row];
    if (seq == NONE) {
        return old;
    }
    return encode16(src[prm.off_o + seq * prm.row_len + (e - row * prm.row_len)], prm.pack_dt);
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) tid: u32) {
    if (prm.pack_mode == 0u) {
        let w = (wid.x + wid.y * prm.grid_c) * 256u + tid;
        let e = 2u * w;
        if (e >= prm.total) {
            return;
        }
        let lo = encode16(src[prm.off_o + e], prm.pack_dt);
        var hi = 0u;
        if (e + 1u < prm.total) {
            hi = encode16(src[prm.off_o + e + 1u], prm.pack_dt);
        }
        dst[w] = lo | (hi << 16u);
        return;
    }
    let n = wid.y;
    let r = aux[prm.aux_seqs + 8u * n + 7u];
    if (n >= prm.seqs || r == NONE) {
        return;
    }
    let first = (r * prm.row_len) / 2u;
    let last = ((r + 1u) * prm.row_len - 1u) / 2u;
    let w = first + wid.x * 256u + tid;
    if (w > last) {
        return;
    }
    let r0 = (2u * w) / prm.row_len;
    let mine = r0 == r || aux[prm.aux_rowmap + r0] == NONE;
    if (!mine) {
        return;
    }
    let old = dst[w];
    let lo = pool_half(2u * w, old & 0xffffu);
    let hi = pool_half(2u * w + 1u, old >> 16u);
    dst[w] = lo | (hi << 16u);
}

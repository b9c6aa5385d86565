// state.wgsl: the prelude of the two state-pass stages (prefill_state.wgsl, f32 products, and
// prefill_state_coop.wgsl, cooperative-matrix products): bindings, the state loaders and
// writers, the stage spans of the Wᵀ/kdec staging and the checkpoint and final writes. Both
// stages hold the state slice in the same invocation mapping: rows d_s .. d_s + 3, columns
// e_s .. e_s + 3 as four vec4s.
//
// SAFETY (unchecked modules): see the stage files; every index here is guarded by d < K, e < V
// (state tensors and pools: rows and slots from host-built, validated tables), e_s < V4 (h),
// or clamped to the slot's span (stage_ld, touch).

override HEAD_K: u32 = 64u;
override HEAD_V: u32 = 64u;

@group(0) @binding(0) var<uniform> prm: Params;
@group(0) @binding(1) var<storage, read> aux: array<u32>;
@group(0) @binding(2) var<storage, read> wsa: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read_write> wsu: array<f32>;
@group(0) @binding(4) var<storage, read_write> wsh: array<vec4<f32>>;
@group(0) @binding(5) var<storage, read_write> st: array<u32>;
@group(0) @binding(6) var<storage, read_write> outs: array<f32>;

fn load_state(row: u32, hv: u32, d: u32, e: u32) -> f32 {
    let K = HEAD_K;
    let V = HEAD_V;
    let idx = (row * prm.vheads + hv) * K * V + state_offset(d, e, K, V, prm.state_layout);
    if (prm.state_dt == DT_F32) {
        return bitcast<f32>(st[idx]);
    }
    return decode16(st[idx >> 1u], idx, prm.state_dt);
}

fn init1(ok: bool, row: u32, hv: u32, d: u32, e: u32) -> f32 {
    if (ok && e < HEAD_V) {
        return load_state(row, hv, d, e);
    }
    return 0.0;
}

// Initial state row d, columns e .. e + 3 (zeros beyond K, V or without an initial state).
fn init4(row: u32, hv: u32, d: u32, e: u32) -> vec4<f32> {
    let ok = d < HEAD_K && prm.state_in == 1u && row != NONE;
    return vec4<f32>(
        init1(ok, row, hv, d, e),
        init1(ok, row, hv, d, e + 1u),
        init1(ok, row, hv, d, e + 2u),
        init1(ok, row, hv, d, e + 3u)
    );
}

// State row d, columns e .. e + 3 into outs[base + layout offset] (f32), inside K x V.
fn put_out(base: u32, d: u32, e: u32, x: vec4<f32>) {
    if (d < HEAD_K) {
        for (var b = 0u; b < 4u; b++) {
            if (e + b < HEAD_V) {
                outs[base + state_offset(d, e + b, HEAD_K, HEAD_V, prm.state_layout)] = x[b];
            }
        }
    }
}

// The same into the in-place f32 pool `st`.
fn put_st(base: u32, d: u32, e: u32, x: vec4<f32>) {
    if (d < HEAD_K) {
        for (var b = 0u; b < 4u; b++) {
            if (e + b < HEAD_V) {
                st[base + state_offset(d, e + b, HEAD_K, HEAD_V, prm.state_layout)] =
                    bitcast<u32>(x[b]);
            }
        }
    }
}

// One 32-byte sector of the Wᵀ/kdec span of a slot (q0: its first vec4), clamped to the span.
fn touch(q0: u32, sector: u32) -> f32 {
    let span = 16u * (HEAD_K + k4(HEAD_K));   // vec4s of Wᵀ [K][64] then kdec [64][K4]
    return wsa[q0 + min(2u * sector, span - 1u)].x;
}

// Wᵀ parts (64 rows d each).
fn n_wparts() -> u32 {
    return (HEAD_K + 63u) / 64u;
}

// Rows i of a kdec part: as many as fit 1024 vec4s, a multiple of 4 (16 at K = 256).
fn kd_rows() -> u32 {
    let KQ = k4(HEAD_K) / 4u;
    return min(64u, (1024u / KQ) & ~3u);
}

fn n_uparts() -> u32 {
    return (64u + kd_rows() - 1u) / kd_rows();
}

// Stage s of a chunk: (first vec4 relative to the slot, vec4s); len >= 1 and <= 1024.
fn stage_span(s: u32) -> vec2<u32> {
    let NW = n_wparts();
    if (s < NW) {
        return vec2<u32>(1024u * s, min(64u, HEAD_K - 64u * s) * 16u);
    }
    let KQ = k4(HEAD_K) / 4u;
    let IP = kd_rows();
    let j = s - NW;
    return vec2<u32>(16u * HEAD_K + j * IP * KQ, min(IP, 64u - j * IP) * KQ);
}

// vec4 x of a stage's span (slot at vec4 q), zero beyond it.
fn stage_ld(q: u32, sp: vec2<u32>, x: u32) -> vec4<f32> {
    let v = wsa[q + sp.x + min(x, sp.y - 1u)];
    return select(vec4<f32>(0.0), v, x < sp.y);
}

// Checkpoint slot ck (none: NONE) of value head hv after a chunk.
fn put_ckpt(ck: u32, hv: u32, d_s: u32, e_s: u32, s0: vec4<f32>, s1: vec4<f32>, s2: vec4<f32>, s3: vec4<f32>) {
    if (prm.ckpt == 1u && ck != NONE) {
        let cbase = prm.off_ckpt + (ck * prm.vheads + hv) * HEAD_K * HEAD_V;
        put_out(cbase, d_s, e_s, s0);
        put_out(cbase, d_s + 1u, e_s, s1);
        put_out(cbase, d_s + 2u, e_s, s2);
        put_out(cbase, d_s + 3u, e_s, s3);
    }
}

// The final state of the sequence into row final_row (NONE: not asked for): dense or staged
// (outs, f32) or in place into an f32 pool (st).
fn put_final(final_row: u32, hv: u32, d_s: u32, e_s: u32, s0: vec4<f32>, s1: vec4<f32>, s2: vec4<f32>, s3: vec4<f32>) {
    if (final_row != NONE) {
        let fbase = (final_row * prm.vheads + hv) * HEAD_K * HEAD_V;
        if (prm.final_mode == 1u) {
            put_out(prm.off_final + fbase, d_s, e_s, s0);
            put_out(prm.off_final + fbase, d_s + 1u, e_s, s1);
            put_out(prm.off_final + fbase, d_s + 2u, e_s, s2);
            put_out(prm.off_final + fbase, d_s + 3u, e_s, s3);
        } else if (prm.final_mode == 2u) {
            put_st(fbase, d_s, e_s, s0);
            put_st(fbase, d_s + 1u, e_s, s1);
            put_st(fbase, d_s + 2u, e_s, s2);
            put_st(fbase, d_s + 3u, e_s, s3);
        }
    }
}

// common.wgsl: the prelude of every stage shader. `Shader::source()` concatenates it in front of
// each stage file, and the validation test parses exactly that concatenation, so what is
// validated is byte-identical to what runs. It declares no bindings: only the parameter block
// (one layout for every stage, written by `launch::Params` on the host) and pure helpers.

// One uniform block for every stage (36 words; the host writes them in this order).
struct Params {
    tokens: u32,      // T
    heads: u32,       // H
    vheads: u32,      // HV
    seqs: u32,        // N
    chunks: u32,      // rows of the chunk table
    hv0: u32,         // first value head of this head batch
    hvb: u32,         // value heads in this batch
    gate: u32,        // 0 log, 1 softplus, 2 lower_bound
    beta_mode: u32,   // 0 prob, 1 logit, 2 logit2
    l2norm: u32,
    has_a_log: u32,
    scale: f32,
    lb: f32,
    state_layout: u32, // 0 kv ([.., K, V]), 1 vk ([.., V, K])
    state_in: u32,    // 0 zeros, 1 read from the `st` binding (dtype state_dt)
    state_dt: u32,    // 0 f32, 1 bf16, 2 f16
    final_mode: u32,  // 0 none, 1 f32 into outs[off_final..], 2 f32 bits in place into `st`
    ckpt: u32,        // 1: write checkpoints (f32) into outs[off_ckpt..]
    aux_chunks: u32,  // word offset of the chunk table in aux (4 words a chunk)
    aux_seqs: u32,    // word offset of the sequence table in aux (8 words a sequence)
    aux_params: u32,  // word offset of A_log [HV] then dt_bias (f32 bits)
    aux_rowmap: u32,  // word offset of the pool row -> sequence map (i32, -1 = not named)
    group: u32,       // HV / H
    total: u32,       // pack: elements of a dense tensor
    row_len: u32,     // pack: elements of one pool row (HV * K * V)
    pack_mode: u32,   // pack: 0 dense, 1 pool rows
    pack_dt: u32,     // pack: 1 bf16, 2 f16
    rows: u32,        // pack: pool rows
    grid_c: u32,      // workgroups along x when a grid is linearised over chunks
    off_o: u32,       // element offset of o (f32) in outs; pack: source offset
    off_ckpt: u32,    // element offset of the checkpoints (f32) in outs
    off_final: u32,   // element offset of the final states (f32) in outs
    every: u32,       // checkpoint interval (decode), 0 = none
    grid_n: u32,      // workgroups along x when a grid is linearised over sequences
    nvt: u32,         // value tiles per head
    is_kda: u32,      // 1 for kda (its wsa slot also holds Γ)
}

const DT_F32: u32 = 0u;
const DT_BF16: u32 = 1u;
const DT_F16: u32 = 2u;
const NONE: u32 = 0xffffffffu;

// Element `e` of a packed 16-bit tensor, given the u32 word that holds it.
fn decode16(word: u32, e: u32, dt: u32) -> f32 {
    let bits = (word >> ((e & 1u) * 16u)) & 0xffffu;
    if (dt == DT_BF16) {
        return bitcast<f32>(bits << 16u);
    }
    return f16_to_f32(bits);
}

// IEEE half to f32 with bit operations (unpack2x16float would need a device capability).
fn f16_to_f32(h: u32) -> f32 {
    let sign = (h & 0x8000u) << 16u;
    let ex = (h >> 10u) & 0x1fu;
    let man = h & 0x3ffu;
    if (ex == 0u) {
        let mag = f32(man) * 5.9604645e-8;
        return bitcast<f32>(bitcast<u32>(mag) | sign);
    }
    if (ex == 31u) {
        return bitcast<f32>(sign | 0x7f800000u | (man << 13u));
    }
    return bitcast<f32>(sign | ((ex + 112u) << 23u) | (man << 13u));
}

// Round to nearest even, as the host's `half` crate does (NaN stays NaN).
fn f32_to_bf16(x: f32) -> u32 {
    let b = bitcast<u32>(x);
    if ((b & 0x7fffffffu) > 0x7f800000u) {
        return ((b >> 16u) & 0x8000u) | 0x7fc0u;
    }
    return (b + 0x7fffu + ((b >> 16u) & 1u)) >> 16u;
}

// Round to nearest even, written out so every driver rounds the same way.
fn f32_to_f16(x: f32) -> u32 {
    let b = bitcast<u32>(x);
    let sign = (b >> 16u) & 0x8000u;
    let a = b & 0x7fffffffu;
    if (a > 0x7f800000u) {
        return sign | 0x7e00u;
    }
    if (a >= 0x47800000u) {
        return sign | 0x7c00u;
    }
    if (a >= 0x38800000u) {
        return sign | ((a - 0x38000000u + 0xfffu + ((a >> 13u) & 1u)) >> 13u);
    }
    let e = a >> 23u;
    if (e < 102u) {
        return sign;
    }
    let m = (a & 0x7fffffu) | 0x800000u;
    let s = 126u - e;
    var q = m >> s;
    let rem = m & ((1u << s) - 1u);
    let half = 1u << (s - 1u);
    if (rem > half || (rem == half && (q & 1u) == 1u)) {
        q = q + 1u;
    }
    return sign | q;
}

fn encode16(x: f32, dt: u32) -> u32 {
    if (dt == DT_BF16) {
        return f32_to_bf16(x);
    }
    return f32_to_f16(x);
}

fn sigmoid(x: f32) -> f32 {
    return 1.0 / (1.0 + exp(-x));
}

// log(1 + x) accurate for small x (the classic u - 1 correction).
fn log1p(x: f32) -> f32 {
    let u = 1.0 + x;
    if (u == 1.0) {
        return x;
    }
    return log(u) * (x / (u - 1.0));
}

// softplus(x) = x for x > 20, else log(1 + e^x) (docs/spec.md, gate and beta options).
fn softplus(x: f32) -> f32 {
    if (x > 20.0) {
        return x;
    }
    return log1p(exp(x));
}

// The log decay of one gate input (docs/spec.md, gate and beta options). `a` is exp(A_log[hv])
// (1 when absent).
fn gate_value(x: f32, mode: u32, a: f32, bias: f32, has_a: u32, lb: f32) -> f32 {
    if (mode == 1u) {
        return -a * softplus(x + bias);
    }
    if (mode == 2u) {
        var z = x + bias;
        if (has_a == 1u) {
            z = a * z;
        }
        return lb * sigmoid(z);
    }
    return x;
}

// Gates of any size in the chunked stages (docs/spec.md, the chunked algorithm): each log decay is
// clamped to LOG_DECAY_FLOOR, whose exponential is exactly 0 in f32 (e^-128 lies far below the
// smallest subnormal, e^-103.3), so -inf stays an exact reset and no -inf - (-inf) arises; and Γ
// is kept as two running sums, B over the decays below LARGE_DECAY and s over the others, with
// Γ_i − Γ_j = (B_i − B_j) + (s_i − s_j): exactly the small sums' difference where no large decay
// lies between j and i, and a factor of at most e^-4 where one does.
const LOG_DECAY_FLOOR: f32 = -128.0;
const LARGE_DECAY: f32 = -4.0;

fn clamp_decay(g: f32) -> f32 {
    return max(g, LOG_DECAY_FLOOR);
}

fn beta_value(b: f32, mode: u32) -> f32 {
    if (mode == 1u) {
        return sigmoid(b);
    }
    if (mode == 2u) {
        return 2.0 * sigmoid(b);
    }
    return b;
}

// The wsa workspace slot of one (chunk, value head), in f32 words; every offset is a multiple of
// 4 so the state pass can read vec4s:
//   Wᵀ [K][64] | kdec [64][K4] | qdec [64][K] | P [64][64] | e^Γ_last [K4] |
//   (kda) Γ [64][K] | (kda) Γ_last − Γ [64][K]
// where K4 = K rounded up to 4 (the padding columns of kdec are zero).
fn k4(k: u32) -> u32 {
    return (k + 3u) & ~3u;
}
fn ws_kd(k: u32) -> u32 {
    return 64u * k;
}
fn ws_qd(k: u32) -> u32 {
    return 64u * k + 64u * k4(k);
}
fn ws_p(k: u32) -> u32 {
    return 128u * k + 64u * k4(k);
}
fn ws_gl(k: u32) -> u32 {
    return ws_p(k) + 4096u;
}
fn ws_gam(k: u32) -> u32 {
    return ws_gl(k) + k4(k);
}
fn ws_dec(k: u32) -> u32 {
    return ws_gam(k) + 64u * k;
}
fn ws_slot(k: u32, kda: u32) -> u32 {
    return ws_gam(k) + kda * 128u * k;
}

// The ws16 workspace slot of one (chunk, value head) of the coop kernel, in f16 halves, the same
// for gdn and kda (every offset a multiple of 256 halves: K is 64 or 128 there):
//   W [64][K] | kdecᵀ [K][64] | qdec [64][K] | P [64][64]
// W and kdecᵀ are the A operands of the state pass's products W·S and kdecᵀ·V_new, qdec and P
// those of o = qdec·h + P·V_new, which the same pass computes. Each is stored as its 16 x 16
// tiles one after another (tile (tr, tc) of an nc-column matrix at (tr (nc / 16) + tc) 256,
// row-major inside, row stride TILE_STRIDE), so one matrix load reads 512 contiguous bytes; the
// tiles are a permutation of the [rows][nc] region, so every offset stays inside it
// (tiled_off < rows nc for r < rows, c < nc, both multiples of 16). Measured on the H200: the
// coop state pass 0.95 -> 0.60 ms at gdn 16/32 and kda 32/32 1 x 8192 against row-major
// operands, whose tile loads touch 16 rows 2 nc bytes apart.

// The row stride of a matrix load or store of one tile.
const TILE_STRIDE: u32 = 16u;

// Offset of element (r, c) of an A operand with nc columns (nc a multiple of 16).
fn tiled_off(r: u32, c: u32, nc: u32) -> u32 {
    return ((r >> 4u) * (nc >> 4u) + (c >> 4u)) * 256u + (r & 15u) * 16u + (c & 15u);
}

// First element of tile (tr, tc) (rows 16 tr .., columns 16 tc ..).
fn tile_first(tr: u32, tc: u32, nc: u32) -> u32 {
    return (tr * (nc >> 4u) + tc) * 256u;
}

fn ws16_slot(k: u32) -> u32 {
    return 192u * k + 4096u;
}
fn ws16_qd(k: u32) -> u32 {
    return 128u * k;
}
fn ws16_p(k: u32) -> u32 {
    return 192u * k;
}

// Flat offset of state element (d, e) in the declared layout.
fn state_offset(d: u32, e: u32, k: u32, v: u32, lay: u32) -> u32 {
    if (lay == 1u) {
        return e * k + d;
    }
    return d * v + e;
}

// prefill_layout.cuh: the chunked prefill (docs/spec.md section 5) shared by gdn_prefill.cu
// and kda_prefill.cu: its compile-time constants and the layouts that more than one kernel reads
// (the intra stage's shared-memory arena, the small-bh workspace block, the T-form block, the fused
// T-form's arena, the order of U in the workspace).
//
// A prefill module is common.cuh, then these files in this order (backends/cuda/src/kernels.rs):
//   prefill_layout.cuh       constants and shared layouts (this file)
//   mma.cuh                  tensor-core products (mma.sync), ldmatrix, bulk copies, mbarriers
//   prefill_intra.cuh        the intra-chunk stage (intra_chunk) of the fused and intra kernels
//   prefill_fused.cuh        the classic fused kernel and the state-chunk helpers
//   prefill_fused_tform.cuh  the fused T-form (gdn's module only: 16-bit inputs, f32 final state)
//   prefill_segments.cuh     the segmented T-form pair's setup, combine and finish (gdn's module only)
//   prefill_smallbh.cuh      the small-bh intra kernels (one chunk a CTA), the overlapped pair
//   prefill_state.cuh        the small-bh state pass on mma.sync
//   prefill_state_wgmma.cuh  the small-bh state passes on wgmma (sm_90a), workspace and T-form
//   prefill_sizes.cuh        the size table the host reads
//
// Compile-time constants (NVRTC -D): HEAD_K, HEAD_V in {32, 64, 128}; MMA_F16 (0: bf16 tensor-core
// operands, used for bf16 and f32 inputs; 1: f16 operands for f16 inputs). Everything else (dtypes,
// gates, betas, layouts, pools, checkpoints) is a run-time field of `Params`.
//
// Stages (one chunk = 64 tokens of one sequence, one value head; rows past the chunk's length are
// zero-padded, with zero log decay, so they contribute nothing):
//   intra_chunk: Γ (cumsum, f32), A (strictly lower, β folded) and P (lower incl. diagonal, scale
//     folded), T = (I + A)^-1 in f32 (16x16 diagonal blocks by forward substitution, one warp each,
//     merged by doubling on tensor cores, 16 -> 32 -> 64 rows, T_21 = -T_22 A_21 T_11 with bf16
//     hi + lo operands), T' = T diag(β) split into bf16 hi + lo,
//     W = T' (K ⊙ e^Γ), U = T' V (f32), q̃ = scale Q ⊙ e^Γ, k̃ = K ⊙ e^{Γ_last - Γ}, e^{Γ_last}.
//     gdn: K Kᵀ and Q Kᵀ on tensor cores, then the scalar decay e^{Γ_i - Γ_j} selected for j <= i.
//     kda: off-diagonal 16x16 sub-blocks (row sub-chunk r > column sub-chunk c) on tensor cores
//     through the reference point Γ_n at the first token of the row sub-chunk (n = 16 r):
//     A_rc = (K_r ⊙ e^{Γ_r - Γ_n}) · (K_c ⊙ e^{Γ_n - Γ_c})ᵀ, both exponents <= 0; A with hi + lo
//     operands (hi·hi + hi·lo + lo·hi, ~f32), P = (Q_r ⊙ e^{Γ_r - Γ_n}) · (hi + lo of the K side)
//     (P is stored in the mma type anyway). Diagonal sub-blocks elementwise in f32 on CUDA cores
//     (exponent Γ_i - Γ_j, j <= i, never positive). X, q̃, k̃ and e^Γlast are made at the end of
//     step 2, so the f32 Γ [64][K] is dead before T is built (the small-bh intra fits two CTAs
//     per SM: see ChunkSmem<true, DIRECT>).
//   (the T-form, gdn with 16-bit inputs on sm_90a: intra_chunk<.., TONLY> stops after T and
//   writes T_w, T_u, P and per-token factors; smallbh_state_tform_wgmma builds W·S and U itself.)
//   state_chunk (fused kernel): V_new = U - W·S, O = q̃·S + P·V_new, S <- e^{Γ_last} ⊙ S + k̃ᵀ·V_new,
//     with the running state S in f32 registers (mma accumulator layout) and its bf16 copy in
//     shared memory. The small-bh state pass (smallbh_state) computes the same on transposes with
//     Sᵀ in registers as the A operand (see its comment).
//
// mma.sync.m16n8k16 operands are read from shared memory with ldmatrix (see mma_tiles): A stored
// row-major [M][K], B stored as [N][K] (its transpose); rows are padded by 8 elements (16 bytes)
// so the 8 rows of every 8x8 ldmatrix matrix hit distinct bank groups.

#ifndef HEAD_K
#error "HEAD_K must be defined (-DHEAD_K=...)"
#endif
#ifndef HEAD_V
#error "HEAD_V must be defined (-DHEAD_V=...)"
#endif
#ifndef MMA_F16
#define MMA_F16 0
#endif

constexpr int KD = HEAD_K;
constexpr int VD = HEAD_V;
constexpr int CH = 64;        // chunk
constexpr int KP = KD + 8;    // padded row of [64][KD] operands (elements)
constexpr int CP = CH + 8;    // padded row of [*][64] operands
constexpr int VP = VD + 8;    // padded row of [*][VD] operands
constexpr int NTH = 256;      // threads of the intra stage and of the fused kernel
constexpr int MSB = 32 * 33 * 4;  // bytes of the T merge scratch (a [32][33] f32 block)
static_assert(KD == 32 || KD == 64 || KD == 128, "HEAD_K must be 32, 64 or 128");
static_assert(VD == 32 || VD == 64 || VD == 128, "HEAD_V must be 32, 64 or 128");

__host__ __device__ constexpr int align16(int x) { return (x + 15) / 16 * 16; }
__host__ __device__ constexpr int imax(int a, int b) { return a > b ? a : b; }
__device__ __forceinline__ int imin(int a, int b) { return a < b ? a : b; }

// Shared-memory arena of the intra stage (byte offsets). The first part (W, q̃, k̃, P, U, e^Γlast)
// is what the state pass reads; the scratch after it is reused: Ks becomes W, Qs becomes q̃ (in
// place), X/Vb overwrite A/T once T' is built, and in the fused kernel the state pass puts its
// bf16 state copy Sb [KD][VP] and V_new [64][VP] over the scratch. Every mma operand is stored
// token- or channel-major exactly as produced (no transposed stores): the products that need the
// other orientation read it with ldmatrix.trans (mma_tiles AT/BT).
template <bool KDA, bool DIRECT = false>
struct ChunkSmem {
    static constexpr int UST = VD + 8;                      // row of U (f32; float2 reads of a
                                                            // half-warp hit distinct banks)
    static constexpr int WM = 0;                            // Ks -> W   [64][KP] u16
    static constexpr int QD = WM + 64 * KP * 2;             // Qs -> q̃   [64][KP] u16
    static constexpr int KDT = QD + 64 * KP * 2;            // k̃         [64][KP] u16
    static constexpr int PM = KDT + 64 * KP * 2;            // P         [64][CP] u16
    static constexpr int UF = PM + (DIRECT ? 0 : 64 * CP * 2);  // U      [64][UST] f32
    static constexpr int GL = UF + (DIRECT ? 0 : 64 * UST * 4); // e^Γlast [KD] f32
    // (DIRECT: P goes from registers straight to the small-bh workspace; U is staged over X and
    // V at the end, see USG.)
    static constexpr int SCR = align16(GL + KD * 4);        // scratch
    static constexpr int GK = KDA ? KD : 1;
    static constexpr int G = SCR;                           // Γ         [64][GK] f32
    static constexpr int BETA = align16(G + 64 * GK * 4);   // β         [64] f32
    static constexpr int AF = BETA + 64 * 4;                // A         [64][65] f32
    static constexpr int TF = AF + 64 * 65 * 4;             // T         [64][65] f32
    static constexpr int TMP = TF + 64 * 65 * 4;            // merge     [32][33] f32 (MSB)
    static constexpr int DS = 16;                           // kda channel slice
    static constexpr int DSP = DS + 1;                      // padded slice row (bank-conflict free)
    // (kda uses the specialisation ChunkSmem<true, DIRECT> below: the KDA-dependent members here are
    // unused; kept so gdn's offsets do not move)
    static constexpr int SL = TMP + 3 * 16 * 17 * 4;        // kda: KT, QT [64][DSP], KH [96][DSP],
                                                            //      raw k, q, Γ slices [64][DSP]
    static constexpr int SL_END = SL + (KDA ? 416 * DSP * 4 : 0);
    static constexpr int XT = AF;                           // X = K ⊙ e^Γ [64][KP] u16 (after T')
    static constexpr int VBT = XT + 64 * KP * 2;            // V         [64][VP] u16
    static constexpr int TB = align16(imax(SL_END, VBT + 64 * VP * 2)); // T' hi, lo [64][CP] u16
    static constexpr int SB = SCR;                          // fused state pass: S bf16 [KD][VP]
    static constexpr int VNT = SB + KD * VP * 2;            //                   V_new  [64][VP]
    // T-form intra (gdn, TONLY): the per-token factors of the state pass and e^Γlast (TformBlock::FACB
    // bytes), built in step 3
    static constexpr int FAC = TB + 2 * 64 * CP * 2;
    // T-form intra: the stash, [rq, rk] [2][64] f32 (the rows' L2-norm reciprocals from step 1a,
    // read by step 3 and by the next head of a GVA group that reuses the chunk's q, k rows: see
    // PAIR_REUSE), then two slots of that next head's raw β and gate [2][2][64] f32
    static constexpr int STASH = align16(imax(FAC + 528, VNT + 64 * VP * 2));
    static constexpr int STASH_BYTES = 6 * 64 * 4 + 48;  // (+ the fused T-form's item, FtItem)
    static constexpr int TOTAL = STASH + STASH_BYTES;
    static_assert(TOTAL <= 232448, "shared memory of the intra stage");
    // (the merge scratch may run into T', which is built after the merges)
    static_assert(TMP + MSB <= TB + 2 * 64 * CP * 2 && TB >= TMP, "merge scratch");
    // DIRECT: U is staged over X and V (dead after step 5's products) when they are adjacent and
    // large enough, then leaves with one bulk copy (otherwise with per-thread stores)
    static constexpr int USG = XT;
    static constexpr bool USTAGE = DIRECT && VBT == XT + 64 * KP * 2 && KP + VP >= 2 * VD;
};

// kda arena. The head (W, q̃, k̃, P, U, e^Γlast) is laid out as in the primary template; the scratch
// is reused by lifetime (steps of intra_chunk):
//   BETA (1-5) | G: Γ log2(e) [64][KD] f32 (1-2), then T [64][65] f32 and the merge scratch (3) |
//   SLF: f32 k, q, Γ·log2(e) slices [3][64][DSP] (2), then A [64][65] f32 (2-3), then T' hi, lo
//   [2][64][CP] (3-5).
// SLT: the tensor-core operands of one 16-channel slice (step 2), [336][TSP] mma type:
//   KTh, KTl (hi + lo of K_i e^{Γ_i - Γ_n}, rows i = 16..63), QT (Q_i e^{Γ_i - Γ_n}), KHh, KHl
//   (hi + lo of K_j e^{Γ_n - Γ_j} for each reference n = 16, 32, 48 and j < n: 16 + 32 + 48 rows).
// DIRECT (small-bh intra, ~104 KB at K = V = 128, two CTAs per SM): q̃ and k̃ go straight to the
// workspace, so X = K e^Γ takes the Qs slot (written in place), and the k̃ slot holds SLT in step 2
// and V in steps 4-5 (when they fit; otherwise they get their own slot after the scratch).
// Fused (!DIRECT): q̃ in place over Qs, k̃ in its slot, X, V and SLT in their own slots.
template <bool DIRECT>
struct ChunkSmem<true, DIRECT> {
    static constexpr int UST = VD + 8;
    static constexpr int WM = 0;                                // Ks -> W   [64][KP] u16
    static constexpr int QD = WM + 64 * KP * 2;                 // Qs -> q̃ (fused) / X (DIRECT)
    static constexpr int KDT = QD + 64 * KP * 2;                // k̃ (fused) / SLT, V (DIRECT)
    static constexpr int PM = KDT + 64 * KP * 2;                // P         [64][CP] u16
    static constexpr int UF = PM + (DIRECT ? 0 : 64 * CP * 2);  // U         [64][UST] f32
    static constexpr int GL = UF + (DIRECT ? 0 : 64 * UST * 4); // e^Γlast   [KD] f32
    static constexpr int SCR = align16(GL + KD * 4);
    static constexpr int DS = 16;                               // channel slice (one mma k step)
    static constexpr int DSP = DS + 1;                          // f32 slice row (conflict-free)
    static constexpr int TSP = DS + 8;                          // SLT row (ldmatrix conflict-free)
    static constexpr int SLT_ROWS = 48 * 3 + 96 * 2;
    static constexpr int SLT_BYTES = SLT_ROWS * TSP * 2;
    static constexpr int BETA = SCR;                            // β [64] f32
    static constexpr int G = BETA + 256;                        // Γ log2(e) [64][KD] f32 (log2 units)
    static constexpr int TF = G;                                // T [64][65] f32
    static constexpr int TMP = TF + 64 * 65 * 4;                // merge [32][33] f32 (MSB)
    static constexpr int SLF = G + imax(64 * KD * 4, 64 * 65 * 4 + MSB);
    static constexpr int AF = SLF;                              // A [64][65] f32
    static constexpr int TB = SLF;                              // T' hi, lo [64][CP] u16
    static constexpr int AFTER = SLF + imax(imax(3 * 64 * DSP * 4, 64 * 65 * 4), 2 * 64 * CP * 2);
    static constexpr bool SLT_IN_KDT = DIRECT && SLT_BYTES <= 64 * KP * 2;
    static constexpr bool V_IN_KDT = DIRECT && VD <= KD;
    static constexpr int XT = DIRECT ? QD : AFTER;              // X = K ⊙ e^Γ [64][KP] u16
    static constexpr int VBT = V_IN_KDT ? KDT : AFTER + (DIRECT ? 0 : 64 * KP * 2); // V [64][VP]
    static constexpr int SLT = SLT_IN_KDT ? KDT : AFTER;        // (step 2 only)
    static constexpr int END = imax(imax(AFTER + (DIRECT ? 0 : 64 * KP * 2),
                                         V_IN_KDT ? 0 : VBT + 64 * VP * 2),
                                    SLT_IN_KDT ? 0 : SLT + SLT_BYTES);
    static constexpr int SB = SCR;                              // fused state pass: S bf16 [KD][VP]
    static constexpr int VNT = SB + KD * VP * 2;                //                   V_new  [64][VP]
    static constexpr int TOTAL = DIRECT ? END : imax(END, VNT + 64 * VP * 2);
    static_assert(TOTAL <= 232448, "shared memory of the kda intra stage");
    static_assert(TMP + MSB <= SLF, "T and the merge scratch fit over Γ");
    static constexpr int USG = XT;  // (as in the primary template)
    static constexpr bool USTAGE = DIRECT && VBT == XT + 64 * KP * 2 && KP + VP >= 2 * VD;
};

// Workspace block of one (chunk row, value head), written by the intra kernel. The first part
// (W, q̃, k̃, P, e^Γlast) is stored exactly as the state pass holds it in shared memory (rows padded
// to KP / CP elements for conflict-free ldmatrix), so the state pass fetches it with one bulk copy.
// U follows as Uᵀ in mma-fragment order, VD / 16 panels of 16 V columns: panel p, token tile nt
// (8 tokens), lane l = 4 g + q, element e = 2 h + j holds U[t = 8 nt + 2 q + j][v = 16 p + g + 8 h]
// (the accumulator element e of lane l in a 16 x 8 tile of V_newᵀ), so a V tile's U is contiguous
// and each lane reads its four values with one 16-byte load.
struct WorkspaceBlock {
    static constexpr int W = 0;                  // [64][KP] mma type
    static constexpr int Q = W + 64 * KP * 2;    // [64][KP]
    static constexpr int KT = Q + 64 * KP * 2;   // k̃ [64][KP]
    static constexpr int P = KT + 64 * KP * 2;   // [64][CP]
    static constexpr int GL = P + 64 * CP * 2;   // [KD] f32
    static constexpr int MAIN = align16(GL + KD * 4);
    static constexpr int U = MAIN;               // Uᵀ fragments [VD / 16][8][32][4] f32
    static constexpr int BLOCK = U + 64 * VD * 4;
};
// The workspace block of the T-form (gdn with 16-bit inputs and the wgmma state pass: the
// intra kernel `gdn_prefill_intra_tform` writes it, `gdn_prefill_state_tform_wgmma` reads it). The
// state pass computes W·S and U itself from the inputs' k and v rows (see
// smallbh_state_tform_wgmma), so the block holds only the chunk's matrices and per-token factors,
// ~37 KB instead of WorkspaceBlock's ~92 KB at K = V = 128: T_w = T diag(β e^Γ / |k|) (hi),
// T_u = T diag(β) (hi, lo), P, each [64][CP] in the mma type (one tensor map views the four as
// [256][64]), then FQ = scale e^Γ / |q| [64], FK = e^{Γlast - Γ} / |k| [64] and e^Γlast (f32; zero
// past the chunk's length).
struct TformBlock {
    static constexpr int TWH = 0;
    static constexpr int TUH = TWH + 64 * CP * 2;
    static constexpr int TUL = TUH + 64 * CP * 2;
    static constexpr int P = TUL + 64 * CP * 2;
    static constexpr int FAC = P + 64 * CP * 2;
    static constexpr int FACB = 528;  // FQ [64], FK [64], e^Γlast, pad to 16 bytes
    static constexpr int END = FAC + FACB;
    // (the T-form exists for K, V >= 64 only: see gdn_prefill.cu)
    static_assert(END <= WorkspaceBlock::BLOCK || KD < 64 || VD < 64,
                  "the T-form block fits the workspace block");
};
// The fused T-form (gdn, `gdn_prefill_fused_tform`, K and V >= 64): one CTA per (sequence, value
// head) runs the T-form intra stage (intra_chunk<false, true, true, true>: the block stays in
// shared memory, q and k rows kept L2-normalised, so T_w = T diag(β e^Γ), FQ = scale e^Γ, FK =
// e^{Γlast - Γ}), then the chunk's state work over 64-column V tiles on mma.sync (fused_tform).
// The intra arena (ChunkSmem<false, true>) keeps Ks (normalised k), Qs (normalised q), P (k̃
// slot), T_u hi, lo (TB) and the factors (FAC); T_w goes over the dead f32 A (AF). The state part
// uses the dead T scratch for Sb (bf16 S tile [KD][VTP]) and the FK-scaled V_new (Vs, [64][VTP],
// 64 rows in), and one more [64][VTP] tile XV (the V tile, then -K·S, then V_new) where it fits.
struct FusedTformSmem {
    typedef ChunkSmem<false, true> LY;
    static constexpr int VT = 64, VTP = VT + 8, TILE = 64 * VTP * 2;
    static constexpr int TW = LY::AF;                            // T_w [64][CP]
    static constexpr int SR = align16(TW + 64 * CP * 2);         // Sb [KD][VTP], Vs [64][VTP]
    static constexpr int SRB = imax(KD * VTP * 2, 2 * TILE);
    static constexpr int XV = LY::KDT + 64 * CP * 2 + TILE <= LY::AF ? LY::KDT + 64 * CP * 2
                                                                      : LY::TOTAL;  // (after the stash)
    static constexpr int TOTAL = imax(LY::TOTAL, XV + TILE);
    static constexpr bool ON = KD >= 64 && VD >= 64;  // (P in the k̃ slot needs CP <= KP)
    static_assert(!ON || TW + 64 * CP * 2 <= LY::TF, "T_w over A, before T (read while T_w is built)");
    static_assert(!ON || SR + SRB <= LY::TB, "the S tile over the dead T scratch, before T_u");
    static_assert(!ON || (XV >= LY::KDT + 64 * CP * 2 && (XV + TILE <= LY::AF || XV >= LY::FAC + TformBlock::FACB)),
                  "XV clear of P, T_w and the factors");
    static_assert(!ON || TOTAL <= 232448, "shared memory of the fused T-form");
    static_assert(!ON || 2 * (TOTAL + 1024) <= 233472, "two CTAs per SM (228 KB, 1 KB reserved a CTA)");
};

// Offset (floats) of U[t][v] in the Uᵀ fragment order above.
__host__ __device__ constexpr int ut_off(int t, int v) {
    const int g = v & 7, h = (v >> 3) & 1, q = (t >> 1) & 3, j = t & 1;
    return (((v >> 4) * 8 + (t >> 3)) * 32 + g * 4 + q) * 4 + 2 * h + j;
}
// The intra stage stores U from mma accumulators of 16x8 tiles (rows r0 + lane / 4, + 8;
// columns c0 + 2 (lane % 4), + 1) as pairs of tokens (t, t + 1) after a lane swap: lane l keeps
// (t, v) = (r0 + (l / 4 & ~1), c0 + 2 (l % 4) + (l / 4 & 1)) and the row 8 below. Its offset splits
// into a tile part and a lane part (no per-store arithmetic on both), checked against ut_off below.
__host__ __device__ constexpr int ut_tile(int r0, int c0) {
    return ((c0 >> 4) * 8 + (r0 >> 3)) * 128 + 2 * ((c0 >> 3) & 1);
}
__host__ __device__ constexpr int ut_lane(int lane) {
    return (2 * (lane & 3) + ((lane >> 2) & 1)) * 16 + (lane >> 3) * 4;
}
constexpr bool ut_split_matches() {
    for (int r0 = 0; r0 < 64; r0 += 16)
        for (int c0 = 0; c0 < VD; c0 += 8)
            for (int l = 0; l < 32; ++l) {
                const int t = r0 + ((l >> 2) & ~1), v = c0 + 2 * (l & 3) + ((l >> 2) & 1);
                if (ut_off(t, v) != ut_tile(r0, c0) + ut_lane(l) || ut_off(t + 8, v) != ut_off(t, v) + 128)
                    return false;
            }
    return true;
}
static_assert(ut_split_matches(), "U's store offsets (ut_tile + ut_lane) must be ut_off's");

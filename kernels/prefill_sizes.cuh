// prefill_sizes.cuh: the size table of a prefill module (the last file before the op's entry file).
//
// The size table of a prefill module, read by the host once per loaded module (cuModuleGetGlobal):
// dynamic shared memory of the fused kernel, of the small-bh state kernel, the workspace block per
// (chunk, head), the dynamic shared memory of the small-bh intra kernel, the threads of the
// small-bh state kernel, the dynamic shared memory and threads of its 16-column variant, and of
// its 64-column variant (0 where V < 64: no such kernel), and of the wgmma variant (0 where it is
// not compiled: not sm_90a, K not 64 or 128, or V < 64), then of the T-form wgmma pass (gdn only,
// else 0), then of the fused T-form (gdn with K, V >= 64, else 0). Each .cu file defines
// `{op}_prefill_sizes[14] = PREFILL_SIZES(KDA)`.
#if HEAD_V >= 64
#define PREFILL_SIZES64(KDA) StateSmem<64>::TOTAL, 256
#else
#define PREFILL_SIZES64(KDA) 0, 0
#endif
#if HAS_STATE_WG
#define PREFILL_SIZES_WG WgmmaStateSmem::TOTAL, 160
#else
#define PREFILL_SIZES_WG 0, 0
#endif
// (the T-form pass: gdn only)
#if HAS_STATE_WG
#define PREFILL_SIZES_WGT(KDA) (KDA ? 0 : TformWgmmaSmem::TOTAL), (KDA ? 0 : 160)
#else
#define PREFILL_SIZES_WGT(KDA) 0, 0
#endif
// (the fused T-form: gdn, K and V >= 64)
#define PREFILL_SIZES_FT(KDA) ((KDA || !FusedTformSmem::ON) ? 0 : FusedTformSmem::TOTAL)
#define PREFILL_SIZES(KDA)                                                                          \
    {ChunkSmem<KDA>::TOTAL, StateSmem<32>::TOTAL, WorkspaceBlock::BLOCK, ChunkSmem<KDA, true>::TOTAL,  \
     128, StateSmem<16>::TOTAL, 64, PREFILL_SIZES64(KDA), PREFILL_SIZES_WG, PREFILL_SIZES_WGT(KDA),    \
     PREFILL_SIZES_FT(KDA)}

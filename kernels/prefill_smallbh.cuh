// prefill_smallbh.cuh: the small-bh intra kernels (the first kernel of the two-kernel `small-bh`
// form: chunk-parallel intra products into the workspace, read by a state pass of
// prefill_state.cuh or prefill_state_wgmma.cuh), and the overlapped T-form pair's intra kernel.

// ------------------------------------------------------------------------------ small-bh
// Intra kernel: grid (table_rows, HV), NTH threads, dynamic shared memory ChunkSmem<KDA, true>::TOTAL.
// Row r of the chunk table (sentinel rows skipped) -> workspace block (r, hv) in WorkspaceBlock
// layout (the T-form: TformBlock). The T-form with FLAG_GROUP_HEADS: grid (table_rows, HV / group),
// the CTA writes the blocks of every value head of its GVA group in turn; q and k are loaded once
// (intra_chunk's `pair`; gdn 16/32 16x1024 on an H200: 0.547 against 0.575 ms one head a CTA,
// 0.522 with all three FLAG_* of common.cuh).
template <bool KDA, bool TONLY = false>
__device__ void smallbh_intra(const Params& p) {
    extern __shared__ __align__(16) char sm[];
    if constexpr (TONLY) pdl_trigger();  // (FLAG_DEPENDENT_LAUNCH: the state pass may launch; a no-op otherwise)
    const int row = blockIdx.x;
    const int n = p.chunk_table[2 * row], c = p.chunk_table[2 * row + 1];
    if (n < 0) return;
    const i64 bos = seq_start(p, n), eos = seq_start(p, n + 1);
    const int t0 = (int)bos + c * CH;
    const int L = imin(CH, (int)(eos - t0));
    if (!(TONLY && (p.mode & FLAG_GROUP_HEADS)) || p.group == 1) {
        const int hv = blockIdx.y;
        intra_chunk<KDA, true, TONLY>(p, sm, t0, L, hv, (char*)p.work + ((i64)row * p.HV + hv) * WorkspaceBlock::BLOCK);
        return;
    }
    if constexpr (TONLY) {
        // (t0 and L through shared memory, read at each head's top: values kept in registers
        // across the heads' stages spill, ptxas)
        int* tl = (int*)(sm + ChunkSmem<KDA, true>::STASH + 6 * 64 * 4);
        if (threadIdx.x == 0) tl[0] = t0, tl[1] = L;
        __syncthreads();
#pragma unroll 1
        for (int j = 0; j < p.group; ++j) {
            const int hv = (int)blockIdx.y * p.group + j;
            char* dst = (char*)p.work + ((i64)blockIdx.x * p.HV + hv) * WorkspaceBlock::BLOCK;
            // (no barrier between heads: intra_chunk's last shared reads precede its last
            // barrier, and thread 0 waits for the bulk copies' reads before the next head's first)
            const bool defer = p.mode & FLAG_DEFERRED_WAIT;
            const int pair = (j > 0 ? PAIR_REUSE : 0) | (j + 1 < p.group ? PAIR_NEXT : 0) | ((j & 1) ? PAIR_SLOT : 0) |
                             (defer && j + 1 < p.group ? PAIR_DEFER : 0) | (defer && j > 0 ? PAIR_WAITPREV : 0);
            intra_chunk<KDA, true, TONLY>(p, sm, tl[0], tl[1], hv, dst, -1, pair);  // (writes the whole block)
        }
    }
}

// ---------------------------------------------------- the overlapped T-form pair (few pairs)
// Where the state pass has few CTAs (one per 64 V columns, value head and sequence: gdn 16/32
// 1x8192 has 64 on 132 SMs) its serial chain leaves most SMs idle while the intra kernel, before
// it, has them all. The overlapped pair runs both at once:
//  * the intra kernel is persistent (two CTAs per SM) and takes (row, value head) items in row
//    order from a counter (sync[0]); after an item's block has reached global memory it sets the
//    item's ready flag (sync[SYNC_FLAGS + item], release; thread 0, after the next item's loads);
//  * it triggers the state pass at once (programmatic dependent launch: that kernel is launched
//    with the PDL attribute on the same stream and may start when every intra CTA has started);
//  * once ov_tau items are taken, the intra CTAs of the first ov_free SMs to notice stop taking
//    work and exit, so the state CTAs (ov_free of them, too large to share an SM with intra
//    CTAs) land there while the other SMs go on with the intra work;
//  * the state pass's fetch thread waits for a chunk's ready flag (acquire) before its workspace
//    loads, and the state CTAs wait for the intra grid's completion before they exit.
// No deadlock: the state pass starts only after all intra CTAs have started, and one intra CTA
// at least never leaves early (a leave ticket below gridDim.x - 1), so every item is done. The
// varlen kernel zeroes sync each call.
template <bool KDA>
__device__ void smallbh_intra_overlap(const Params& p) {
    static_assert(!KDA, "the T-form is gdn's");
    extern __shared__ __align__(16) char sm[];
    // (the item, after the arena: the host adds 16 bytes to the intra kernel's shared memory;
    // prefill kernels have no static shared memory, see the host's function attributes)
    int& item = *(int*)(sm + align16(ChunkSmem<false, true>::TOTAL));
    pdl_trigger();
    const u32 smid = sm_id();
    const int total = p.table_rows * p.HV;
    int pending = -1;  // thread 0: the item whose flag is not set yet
    const u64 tstart = p.ov_trace ? gtimer() : 0;
    int done = 0;
    for (;;) {
        if (threadIdx.x == 0) {
            // Past ov_tau items, the first ov_free SMs to get here are freed for the state pass:
            // the first CTA of an SM decides for both (a rule on the id itself, id < ov_free,
            // would assume dense SM ids, which PTX does not promise).
            bool leave = false;
            // A CTA leaves only with a ticket below gridDim.x - 1: one at least stays, whatever
            // the CTAs' placement (a small grid may sit entirely on freed SMs).
            if (smid < SYNC_SMS && *(volatile int*)p.sync >= p.ov_tau) {
                int* mark = p.sync + SYNC_MARKS + smid;
                int m = *(volatile int*)mark;
                if (m == 0 && atomicCAS(mark, 0, 3) == 0) {
                    m = atomicAdd(p.sync + 1, 1) < p.ov_free ? 1 : 2;
                    st_release(mark, m);
                }
                while (m == 0 || m == 3) m = ld_acquire(mark);
                if (m == 1) {
                    leave = atomicAdd(p.sync + 2, 1) < (int)gridDim.x - 1;
                    if (!leave) {
                        atomicSub(p.sync + 2, 1);
                        atomicExch(mark, 2);  // (the SM stays: no more tickets asked here)
                    }
                }
            }
            int it = -1;
            if (!leave) {
                it = atomicAdd(p.sync, 1);
                if (it >= total) it = -1;
            }
            if (it < 0 && pending >= 0) publish_ready(p, pending);
            if (it < 0 && p.ov_trace && blockIdx.x < TRACE_INTRA) {
                u64* r = trace_base(p) + 4 * blockIdx.x;
                r[0] = smid;
                r[1] = tstart;
                r[2] = gtimer();
                r[3] = (u64)done | ((u64)leave << 32);
            }
            item = it;
        }
        __syncthreads();
        const int it = item;
        if (it < 0) return;
        const int row = it / p.HV, hv = it - row * p.HV;
        const int n = p.chunk_table[2 * row], c = p.chunk_table[2 * row + 1];
        if (n >= 0) {
            const i64 bos = seq_start(p, n), eos = seq_start(p, n + 1);
            const int t0 = (int)bos + c * CH;
            const int L = imin(CH, (int)(eos - t0));
            // (publishes the previous item's flag after its loads; this item's at the next)
            intra_chunk<false, true, true>(p, sm, t0, L, hv, (char*)p.work + (i64)it * WorkspaceBlock::BLOCK, pending);
            pending = it;
            ++done;
        }
        __syncthreads();  // (`item` and the shared memory are reused)
    }
}

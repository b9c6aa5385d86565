// varlen.cu: variable-length metadata built on the device (docs/spec.md section 7), so a
// launch needs no host synchronisation and can be captured in a CUDA graph.
//
// varlen_build_tables: grid (1), 1024 threads. From cu_seqlens [N + 1] (i32/i64) writes
//   chunk_table   [table_rows, 2]: (sequence, chunk) rows in sequence order, then (-1, -1) rows up to
//                 the static size table_rows = ceil(T / 64) + N - 1 (skipped by the kernels);
//   chunk_offsets [N + 1]: first table row of each sequence;
//   ck_offsets    [N + 1]: first checkpoint slot of each sequence (floor(len / ck_every) each).
// Any of the three pointers may be null. Where `sync` is set (the overlapped small-bh pair) its
// SYNC_FLAGS + table_rows * HV words are zeroed: every call starts with no chunk ready, no work
// taken and no SM freed. Each thread scans a contiguous range of sequences, then a
// block-wide scan of the per-thread sums.
extern "C" __global__ void __launch_bounds__(1024) varlen_build_tables(const Params p) {
    __shared__ int sc[1024];
    __shared__ int sk[1024];
    const int tid = threadIdx.x;
    const int per = (p.N + 1023) / 1024;
    const int n0 = tid * per < p.N ? tid * per : p.N;
    const int n1 = n0 + per < p.N ? n0 + per : p.N;
    int cc = 0, kc = 0;
    for (int n = n0; n < n1; ++n) {
        const int len = (int)(ld_i(p.cu_seqlens, n + 1, p.off_dt) - ld_i(p.cu_seqlens, n, p.off_dt));
        cc += (len + 63) / 64;
        kc += p.ck_every > 0 ? len / p.ck_every : 0;
    }
    sc[tid] = cc;
    sk[tid] = kc;
    __syncthreads();
    for (int off = 1; off < 1024; off <<= 1) {
        const int a = tid >= off ? sc[tid - off] : 0;
        const int b = tid >= off ? sk[tid - off] : 0;
        __syncthreads();
        sc[tid] += a;
        sk[tid] += b;
        __syncthreads();
    }
    int base = sc[tid] - cc, kbase = sk[tid] - kc;
    for (int n = n0; n < n1; ++n) {
        const int len = (int)(ld_i(p.cu_seqlens, n + 1, p.off_dt) - ld_i(p.cu_seqlens, n, p.off_dt));
        const int nc = (len + 63) / 64;
        if (p.chunk_offsets) p.chunk_offsets[n] = base;
        if (p.ck_offsets) p.ck_offsets[n] = kbase;
        if (p.chunk_table)
            for (int j = 0; j < nc; ++j) {
                p.chunk_table[2 * (base + j)] = n;
                p.chunk_table[2 * (base + j) + 1] = j;
            }
        base += nc;
        kbase += p.ck_every > 0 ? len / p.ck_every : 0;
    }
    const int total = sc[1023];
    if (tid == 0) {
        if (p.chunk_offsets) p.chunk_offsets[p.N] = total;
        if (p.ck_offsets) p.ck_offsets[p.N] = sk[1023];
    }
    if (p.sync)
        for (int i = tid; i < SYNC_FLAGS + p.table_rows * p.HV; i += 1024) p.sync[i] = 0;
    if (p.sync && p.ov_trace)
        for (int i = tid; i < 4 * (TRACE_INTRA + TRACE_STATE); i += 1024) trace_base(p)[i] = 0;
    if (p.chunk_table)
        for (int r = total + tid; r < p.table_rows; r += 1024) {
            p.chunk_table[2 * r] = -1;
            p.chunk_table[2 * r + 1] = -1;
        }
}

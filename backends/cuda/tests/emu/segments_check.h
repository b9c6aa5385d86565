// segments_check.h: the emulator's program for the segmented pair's own kernels
// (kernels/prefill_segments.cuh: setup, combine, finish), included after common.cuh and that
// file (backends/cuda/tests/emulated.rs). Runs each kernel on the CPU emulator (3-D grids, block
// after block) on generated sequences and states and checks every array against plain loops:
// the cuts (offsets, first segments, skip marks, padding), the identity and zero rows, the
// combine's chain S_in(j + 1) = M_j S_in(j) + F_j from a dense or pooled, f32 or bf16, kv or vk
// initial state, and the finish into a dense or pooled final state. Prints "ok" and exits 0, or
// names the first mismatch and exits 1. Usage: emu SEED
#include <cinttypes>

namespace segcheck {
inline int bad = 0;
inline void expect(bool ok, const std::string& what) {
    if (!ok && bad++ < 10) std::fprintf(stderr, "mismatch: %s\n", what.c_str());
}
// a 3-D grid of `n`-thread blocks, block after block (kernels with (Params, SegArgs))
template <class K>
void launch3(K kernel, const Params& p, const SegArgs& s, uint3 grid, unsigned n) {
    static const Params* pp;
    static const SegArgs* ss;
    static K* kk;
    pp = &p;
    ss = &s;
    kk = &kernel;
    emu::entry = [](const void*) { (*kk)(*pp, *ss); };
    gridDim = grid;
    blockDim = {n, 1, 1};
    for (unsigned z = 0; z < grid.z; ++z)
        for (unsigned y = 0; y < grid.y; ++y)
            for (unsigned x = 0; x < grid.x; ++x) {
                blockIdx = {x, y, z};
                emu::run_block((int)n);
            }
}
inline float rnd() { return (float)((emu::next_rand() >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f; }
inline float bf16_round(float x) { return bf16_to_f32(f32_to_bf16(x)); }
} // namespace segcheck

int main(int argc, char** argv) {
    using namespace segcheck;
    emu::rng = 0x9e3779b97f4a7c15ull ^ (uint64_t)(argc > 1 ? std::atoi(argv[1]) : 1) * 0x2545f4914f6cdd1dull;
    const int HV = 2, L = 128;  // two value heads, segments of two chunks
    const std::vector<int64_t> lens = {300, 0, 128, 129, 64, 1000, 1};
    const int N = (int)lens.size();
    std::vector<int64_t> cu(N + 1, 0);
    for (int n = 0; n < N; ++n) cu[n + 1] = cu[n] + lens[n];
    const int T = (int)cu[N], NS = N + T / L;
    const size_t KK = (size_t)KD * KD, KV = (size_t)KD * VD;
    std::vector<int> seg_cu(NS + 1, -7), seg_of(N + 1, -7), skip(NS, -7), zidx(NS, -7);
    std::vector<float> ident(HV * KK, NAN), fin(NS * HV * KV), trans(NS * HV * KK), sin(NS * HV * KV, NAN);
    std::vector<uint16_t> zero_v(64 * HV * VD, 0xffff);
    Params p{};
    p.cu_seqlens = cu.data();
    p.off_dt = DT_I64;
    p.N = N;
    p.T = T;
    p.HV = HV;
    SegArgs s{seg_cu.data(), seg_of.data(), skip.data(), zidx.data(), ident.data(), (u16*)zero_v.data(),
              fin.data(), trans.data(), sin.data(), L, NS};
    launch3(gdn_prefill_segments_setup, p, s, {3, 1, 1}, 1024);
    // the cuts
    int j = 0;
    for (int n = 0; n < N; ++n) {
        const int ns = lens[n] > L ? (int)((lens[n] + L - 1) / L) : 1;
        expect(seg_of[n] == j, "seg_of[" + std::to_string(n) + "]");
        for (int i = 0; i < ns; ++i, ++j) {
            expect(seg_cu[j] == (int)(cu[n] + (int64_t)i * L), "seg_cu[" + std::to_string(j) + "]");
            expect(skip[j] == (i == ns - 1), "skip[" + std::to_string(j) + "]");
        }
    }
    expect(seg_of[N] == j, "seg_of[N]");
    for (int i = j; i <= NS; ++i) expect(seg_cu[i] == T, "padding seg_cu[" + std::to_string(i) + "]");
    for (int i = j; i < NS; ++i) expect(skip[i] == 1, "padding skip[" + std::to_string(i) + "]");
    for (int i = 0; i < NS; ++i) expect(zidx[i] == 0, "zidx");
    for (size_t i = 0; i < ident.size(); ++i) expect(ident[i] == ((i / KD) % KD == i % KD ? 1.0f : 0.0f), "ident");
    for (uint16_t z : zero_v) expect(z == 0, "zero_v");
    const int used = j;

    // combine and finish, from each initial-state form
    for (int form = 0; form < 4; ++form) {
        // 0: none; 1: dense f32 kv; 2: pool bf16 vk in place (N + 1 rows, one index -1); 3: dense f32 vk
        const int rows = form == 2 ? N + 1 : N;
        std::vector<float> h0f(rows * HV * KV);
        std::vector<uint16_t> h0b(rows * HV * KV);
        for (size_t i = 0; i < h0f.size(); ++i) {
            h0f[i] = rnd();
            h0b[i] = f32_to_bf16(h0f[i]);
        }
        std::vector<int64_t> idx(N);
        for (int n = 0; n < N; ++n) idx[n] = n == 1 ? -1 : N - n;  // (distinct rows)
        Params q = p;
        q.layout = (form >= 2) ? LAYOUT_VK : LAYOUT_KV;
        q.initial = form == 0 ? INIT_NONE : form == 2 ? INIT_POOL : INIT_DENSE;
        q.state_in = form == 0 ? nullptr : form == 2 ? (const void*)h0b.data() : (const void*)h0f.data();
        q.s_in_dt = form == 2 ? DT_BF16 : DT_F32;
        q.state_indices = idx.data();
        q.idx_dt = DT_I64;
        q.final_mode = form == 2 ? FINAL_INPLACE : FINAL_DENSE;
        q.s_out_dt = form == 2 ? DT_BF16 : DT_F32;
        std::vector<float> outf(rows * HV * KV, NAN);
        std::vector<uint16_t> outb(h0b);
        q.state_out = form == 2 ? (void*)outb.data() : (void*)outf.data();
        for (auto& x : fin) x = rnd();
        // (a transition is a contraction: entries of about 1 / sqrt(K) keep the chain's states O(1))
        for (auto& x : trans) x = rnd() / std::sqrt((float)KD);
        std::fill(sin.begin(), sin.end(), NAN);
        launch3(gdn_prefill_segments_combine, q, s, {VD / 16, (unsigned)HV, (unsigned)N}, 256);
        launch3(gdn_prefill_segments_finish, q, s, {(KD * VD + 255) / 256, (unsigned)HV, (unsigned)N}, 256);
        for (int n = 0; n < N; ++n)
            for (int hv = 0; hv < HV; ++hv) {
                // the chain in double
                std::vector<double> S(KV, 0.0), Y(KV);
                const int64_t row = form == 0 ? -1 : form == 2 ? idx[n] : n;
                if (row >= 0)
                    for (int d = 0; d < KD; ++d)
                        for (int e = 0; e < VD; ++e) {
                            const size_t o = (size_t)(row * HV + hv) * KV +
                                             (q.layout == LAYOUT_KV ? (size_t)d * VD + e : (size_t)e * KD + d);
                            S[d * VD + e] = form == 2 ? bf16_to_f32(h0b[o]) : h0f[o];
                        }
                for (int sg = seg_of[n]; sg < seg_of[n + 1]; ++sg) {
                    const size_t base = ((size_t)sg * HV + hv) * KV;
                    for (size_t i = 0; i < KV; ++i) {
                        const double got = sin[base + i];
                        expect(std::fabs(got - S[i]) <= 1e-5 * (1.0 + std::fabs(S[i])),
                               "form " + std::to_string(form) + " S_in of segment " + std::to_string(sg) +
                                   " head " + std::to_string(hv) + " element " + std::to_string(i));
                    }
                    if (sg + 1 == seg_of[n + 1]) break;
                    const float* M = trans.data() + ((size_t)sg * HV + hv) * KK;
                    for (int d = 0; d < KD; ++d)
                        for (int e = 0; e < VD; ++e) {
                            double y = fin[base + d * VD + e];
                            for (int k = 0; k < KD; ++k) y += (double)M[d * KD + k] * S[k * VD + e];
                            Y[d * VD + e] = y;
                        }
                    S = Y;
                }
                // finish: the last segment's `fin` to the caller's final row
                const int64_t frow = form == 2 ? idx[n] : n;
                if (frow < 0) continue;
                const int last = seg_of[n + 1] - 1;
                for (int d = 0; d < KD; ++d)
                    for (int e = 0; e < VD; ++e) {
                        const float want = fin[((size_t)last * HV + hv) * KV + d * VD + e];
                        const size_t o = (size_t)(frow * HV + hv) * KV +
                                         (q.layout == LAYOUT_KV ? (size_t)d * VD + e : (size_t)e * KD + d);
                        const float got = form == 2 ? bf16_to_f32(outb[o]) : outf[o];
                        expect(got == (form == 2 ? bf16_round(want) : want),
                               "form " + std::to_string(form) + " final state of sequence " + std::to_string(n));
                    }
            }
    }
    (void)used;
    if (bad) {
        std::fprintf(stderr, "%d mismatches\n", bad);
        return 1;
    }
    std::printf("ok\n");
    return 0;
}

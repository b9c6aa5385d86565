// emu.h: a CPU emulator for the kernels of the decode modules (kernels/common.cuh, decode.cuh,
// {gdn,kda}_decode.cu, varlen.cu) and of prefill_segments.cuh, so their indexing and their barrier protocol run in CI without
// a GPU (backends/cuda/tests/emulated.rs). Included before a module's source, which is compiled
// as C++ by the host compiler with DELTARULE_EMU defined: the PTX helpers of the kernels are
// replaced by the C++ ones below (see the `#ifndef DELTARULE_EMU` blocks there).
//
// A block's threads are fibers (ucontext) on one OS thread; its shared memory starts as 0xff
// bytes. A fiber runs until it reaches a block barrier or a warp shuffle, or returns; the
// scheduler then runs the other fibers, in an order
// drawn from the seed, so a read that no barrier orders after its write sees a different value
// under another seed. It completes a warp's shuffle when every lane of the warp that has not
// returned has reached one, and the block barrier when every fiber that has not returned waits
// there. It stops with an error (exit 3) on:
//   * a deadlock: fibers waiting, none releasable (a shuffle that part of a warp skips, a
//     barrier that part of the block skips while the rest shuffles);
//   * fibers of one block that passed different numbers of block barriers (the kernels here
//     pass the same number on every thread; CUDA would count returned threads out, which hides
//     a protocol error instead of showing it);
//   * a shuffle from a lane that has returned.
// cp.async writes NaN bytes (0xff) into its destination when issued and copies the source only
// when a `cp.async.wait_group` covers it: a read of a stage before its wait sees NaN.
// Each buffer of the launch ends at a page with no access, so a read or write past its end
// stops the emulator with SIGSEGV (the host test reports the signal).
#pragma once
#include <cmath>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>
#include <vector>

#define DELTARULE_EMU 1
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static
// Follows each `__shared__` declaration (the test adds it to the source): the first thread of a
// block that passes it fills the variable with 0xff bytes, so a read of shared memory that the
// block did not write first sees NaN or garbage, as on a device, where a block finds what an
// earlier block left. (A section attribute cannot gather them: GCC ignores it on the statics
// of templates.)
#define EMU_SHARED_FRESH(x) emu::fresh(&(x), sizeof(x))
#define __align__(n) __attribute__((aligned(n)))
#define __restrict__

struct uint3 {
    unsigned x, y, z;
};
struct alignas(16) uint4 {
    unsigned x, y, z, w;
};
struct alignas(8) uint2 {
    unsigned x, y;
};
struct alignas(16) float4 {
    float x, y, z, w;
};
struct alignas(8) float2 {
    float x, y;
};
inline float2 make_float2(float x, float y) { return {x, y}; }
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return {x, y, z, w}; }

inline uint3 threadIdx, blockIdx, gridDim, blockDim;

namespace emu {

[[noreturn]] inline void fail(const std::string& what) {
    std::fprintf(stderr, "emulator: %s\n", what.c_str());
    std::fflush(stderr);
    std::_Exit(3);
}

enum class St { Run, Bar, Warp, Done };
struct Copy {
    void* dst;
    const void* src;
    int bytes;
};
struct Fiber {
    ucontext_t ctx;
    St st = St::Done;
    long bars = 0;      // block barriers passed
    uint64_t val = 0;   // shuffle: the value offered
    int src = 0;        // shuffle: the lane read
    uint64_t res = 0;   // shuffle: the value received
    std::vector<Copy> open;                // cp.async: not yet committed
    std::vector<std::vector<Copy>> groups; // cp.async: committed, not landed
};

inline std::vector<Fiber> fibers;
inline std::vector<char*> stacks;
inline ucontext_t sched;
inline int cur = -1;
inline void (*entry)(const void*) = nullptr;
inline const void* entry_arg = nullptr;
inline uint64_t rng = 1;
constexpr size_t STACK = 256 * 1024;

inline uint64_t next_rand() {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

inline void yield_to_scheduler() {
    asm volatile("" ::: "memory");
    if (swapcontext(&fibers[cur].ctx, &sched) != 0) fail("swapcontext");
    asm volatile("" ::: "memory");
}

inline void fiber_main() {
    entry(entry_arg);
    fibers[cur].st = St::Done;
    // (returns to `sched` through uc_link)
}

inline long block_epoch = 0; // blocks started
struct Fresh {
    const void* at;
    long epoch;
};
inline std::vector<Fresh> fresh_vars;
inline void fresh(void* at, size_t bytes) {
    for (Fresh& f : fresh_vars)
        if (f.at == at) {
            if (f.epoch != block_epoch) {
                f.epoch = block_epoch;
                std::memset(at, 0xff, bytes);
            }
            return;
        }
    fresh_vars.push_back({at, block_epoch});
    std::memset(at, 0xff, bytes);
}

// Runs one block of `n` threads to completion.
inline void run_block(int n) {
    ++block_epoch;
    const int warps = (n + 31) / 32;
    if ((int)fibers.size() < n) fibers.resize(n);
    while ((int)stacks.size() < n) {
        // a page with no access below each stack: an overflow stops the run (SIGSEGV)
        const size_t page = (size_t)sysconf(_SC_PAGESIZE);
        char* s = (char*)mmap(nullptr, STACK + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (s == MAP_FAILED || mprotect(s, page, PROT_NONE) != 0) fail("no memory for fiber stacks");
        stacks.push_back(s + page);
    }
    for (int t = 0; t < n; ++t) {
        Fiber& f = fibers[t];
        f.st = St::Run;
        f.bars = 0;
        f.open.clear();
        f.groups.clear();
        if (getcontext(&f.ctx) != 0) fail("getcontext");
        f.ctx.uc_stack.ss_sp = stacks[t];
        f.ctx.uc_stack.ss_size = STACK;
        f.ctx.uc_link = &sched;
        makecontext(&f.ctx, fiber_main, 0);
    }
    std::vector<int> order(n);
    for (;;) {
        // every fiber that can run, to its next barrier or shuffle, in a seeded order
        for (int t = 0; t < n; ++t) order[t] = t;
        for (int t = n - 1; t > 0; --t) std::swap(order[t], order[next_rand() % (t + 1)]);
        for (int t : order) {
            if (fibers[t].st != St::Run) continue;
            cur = t;
            threadIdx = {(unsigned)t, 0, 0};
            if (swapcontext(&sched, &fibers[t].ctx) != 0) fail("swapcontext");
        }
        cur = -1;
        // warps whose live lanes all wait in a shuffle
        bool released = false;
        for (int w = 0; w < warps; ++w) {
            const int l0 = 32 * w, l1 = std::min(n, l0 + 32);
            int live = 0, waiting = 0;
            for (int t = l0; t < l1; ++t) {
                live += fibers[t].st != St::Done;
                waiting += fibers[t].st == St::Warp;
            }
            if (waiting == 0 || waiting < live) continue;
            for (int t = l0; t < l1; ++t) {
                if (fibers[t].st != St::Warp) continue;
                const int s = l0 + (fibers[t].src & 31);
                if (s >= l1 || fibers[s].st != St::Warp)
                    fail("thread " + std::to_string(t) + " shuffles from lane " + std::to_string(fibers[t].src & 31) +
                         ", which is not in the shuffle");
                fibers[t].res = fibers[s].val;
            }
            for (int t = l0; t < l1; ++t)
                if (fibers[t].st == St::Warp) fibers[t].st = St::Run;
            released = true;
        }
        if (released) continue;
        int live = 0, at_bar = 0;
        for (int t = 0; t < n; ++t) {
            live += fibers[t].st != St::Done;
            at_bar += fibers[t].st == St::Bar;
        }
        if (live == 0) break;
        if (at_bar < live) {
            std::string who;
            for (int t = 0; t < n; ++t)
                if (fibers[t].st == St::Warp) who += " " + std::to_string(t);
            fail("deadlock in block " + std::to_string(blockIdx.x) + ": threads" + who +
                 " wait in a shuffle that other live threads of their warp do not reach (they wait at a "
                 "block barrier: a shuffle under a divergent branch, or block barriers that do not pair up)");
        }
        for (int t = 0; t < n; ++t)
            if (fibers[t].st == St::Bar) fibers[t].st = St::Run;
    }
    for (int t = 1; t < n; ++t)
        if (fibers[t].bars != fibers[0].bars)
            fail("block " + std::to_string(blockIdx.x) + ": thread " + std::to_string(t) + " passed " +
                 std::to_string(fibers[t].bars) + " block barriers, thread 0 " + std::to_string(fibers[0].bars));
}

// Runs a kernel on a 1-D grid of `grid` blocks of `n` threads, block after block.
template <class P>
inline void launch(void (*kernel)(const P), const P& p, unsigned grid, unsigned n) {
    static const P* arg;
    static void (*k)(const P);
    arg = &p;
    k = kernel;
    entry = [](const void*) { k(*arg); };
    gridDim = {grid, 1, 1};
    blockDim = {n, 1, 1};
    for (unsigned b = 0; b < grid; ++b) {
        blockIdx = {b, 0, 0};
        run_block((int)n);
    }
}

template <class T>
inline T shuffle(T v, int src) {
    static_assert(sizeof(T) <= 8, "shuffle of at most 8 bytes");
    Fiber& f = fibers[cur];
    f.val = 0;
    std::memcpy(&f.val, &v, sizeof(T));
    f.src = src;
    f.st = St::Warp;
    yield_to_scheduler();
    T r;
    std::memcpy(&r, &fibers[cur].res, sizeof(T));
    return r;
}

} // namespace emu

inline void __syncthreads() {
    emu::fibers[emu::cur].st = emu::St::Bar;
    emu::fibers[emu::cur].bars += 1;
    emu::yield_to_scheduler();
}
template <class T>
inline T __shfl_xor_sync(unsigned mask, T v, int m) {
    if (mask != 0xffffffffu) emu::fail("a shuffle with a partial mask");
    return emu::shuffle(v, (int)(threadIdx.x & 31) ^ m);
}
template <class T>
inline T __shfl_sync(unsigned mask, T v, int src) {
    if (mask != 0xffffffffu) emu::fail("a shuffle with a partial mask");
    return emu::shuffle(v, src);
}
inline float __uint_as_float(unsigned x) {
    float f;
    std::memcpy(&f, &x, 4);
    return f;
}
inline unsigned __float_as_uint(float f) {
    unsigned x;
    std::memcpy(&x, &f, 4);
    return x;
}

// ---- the PTX helpers of common.cuh and decode.cuh
inline unsigned short f32_to_bf16(float f) {
    const unsigned x = __float_as_uint(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((x >> 16) | 0x40u); // NaN stays NaN
    return (unsigned short)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}
inline float f16_to_f32(unsigned short h) {
    _Float16 v;
    std::memcpy(&v, &h, 2);
    return (float)v;
}
inline unsigned short f32_to_f16(float f) {
    const _Float16 v = (_Float16)f;
    unsigned short h;
    std::memcpy(&h, &v, 2);
    return h;
}
inline unsigned pack_bf16x2(float x, float y) { return f32_to_bf16(x) | ((unsigned)f32_to_bf16(y) << 16); }
inline unsigned pack_f16x2(float x, float y) { return f32_to_f16(x) | ((unsigned)f32_to_f16(y) << 16); }
inline float fexp2(float x) { return std::exp2(x); }
inline float flog2(float x) { return std::log2(x); }
inline float frsqrt(float x) { return 1.0f / std::sqrt(x); }
inline void st_cs_f4(float* p, float a, float b, float c, float d) {
    p[0] = a;
    p[1] = b;
    p[2] = c;
    p[3] = d;
}
inline void st_cs_u2(unsigned short* p, unsigned a, unsigned b) {
    unsigned* q = (unsigned*)p;
    q[0] = a;
    q[1] = b;
}
inline void cp_async(void* s, const void* g, int bytes) {
    if (((uintptr_t)s | (uintptr_t)g) % bytes != 0) emu::fail("cp.async of " + std::to_string(bytes) + " bytes, not aligned");
    std::memset(s, 0xff, bytes); // NaN until a wait covers it
    emu::fibers[emu::cur].open.push_back({s, g, bytes});
}
inline void cp_async_16(void* s, const void* g) { cp_async(s, g, 16); }
inline void cp_async_8(void* s, const void* g) { cp_async(s, g, 8); }
inline void cp_async_4(void* s, const void* g) { cp_async(s, g, 4); }
inline void cp_async_commit() {
    emu::Fiber& f = emu::fibers[emu::cur];
    f.groups.push_back(std::move(f.open));
    f.open.clear();
}
template <int N>
inline void cp_async_wait_group() {
    asm volatile("" ::: "memory");
    emu::Fiber& f = emu::fibers[emu::cur];
    while (f.groups.size() > (size_t)N) {
        for (const emu::Copy& c : f.groups.front()) std::memcpy(c.dst, c.src, c.bytes);
        f.groups.erase(f.groups.begin());
    }
    asm volatile("" ::: "memory");
}

// emu_main.h: the emulator's program, included after a module's source and its entry table
// `EMU_ENTRIES` (backends/cuda/tests/emulated.rs writes both). Usage: emu IN OUT
//
// IN (little endian): "DRE1", u32 seed, u32 buffers, u64 bytes of each, u32 launches, each a
// 64-byte entry name and u32 grid, u32 threads; the 256-byte Params, whose 18 pointer fields hold
// (buffer + 1) << 40 | byte offset, or 0 for null; then every buffer's bytes. OUT: every buffer's
// bytes after the launches, in the same order.
#include <sys/mman.h>

namespace emu {
struct Reader {
    FILE* f;
    template <class T>
    T get() {
        T v;
        if (std::fread(&v, sizeof(T), 1, f) != 1) fail("input file truncated");
        return v;
    }
};
// `bytes` ending at an inaccessible page (rounded up to 16 bytes: the start stays aligned).
inline char* guarded(size_t bytes) {
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    const size_t body = (bytes + 15) / 16 * 16;
    const size_t span = (body + page - 1) / page * page;
    char* m = (char*)mmap(nullptr, span + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) fail("mmap");
    if (mprotect(m + span, page, PROT_NONE) != 0) fail("mprotect");
    return m + span - body;
}
} // namespace emu

int main(int argc, char** argv) {
    using namespace emu;
    if (argc != 3) fail("usage: emu IN OUT");
    FILE* in = std::fopen(argv[1], "rb");
    if (!in) fail(std::string("cannot open ") + argv[1]);
    Reader r{in};
    if (r.get<uint32_t>() != 0x31455244u) fail("not an emulator input (magic)");
    rng = 0x9e3779b97f4a7c15ull ^ (uint64_t)r.get<uint32_t>() * 0x2545f4914f6cdd1dull;
    if (rng == 0) rng = 1;
    const uint32_t nb = r.get<uint32_t>();
    std::vector<uint64_t> sizes(nb);
    for (auto& s : sizes) s = r.get<uint64_t>();
    struct Launch {
        char name[64];
        uint32_t grid, threads;
    };
    std::vector<Launch> launches(r.get<uint32_t>());
    for (auto& l : launches) {
        if (std::fread(l.name, 64, 1, in) != 1) fail("input file truncated");
        l.name[63] = 0;
        l.grid = r.get<uint32_t>();
        l.threads = r.get<uint32_t>();
    }
    static_assert(sizeof(Params) == 264, "Params mirrors launch::Params");
    Params p = r.get<Params>();
    std::vector<char*> bufs(nb);
    for (uint32_t b = 0; b < nb; ++b) {
        bufs[b] = guarded(sizes[b]);
        if (sizes[b] && std::fread(bufs[b], sizes[b], 1, in) != 1) fail("input file truncated");
    }
    std::fclose(in);
    uint64_t ptr[18];
    std::memcpy(ptr, &p, sizeof(ptr));
    for (uint64_t& v : ptr) {
        if (v == 0) continue;
        const uint64_t b = (v >> 40) - 1, off = v & ((1ull << 40) - 1);
        if (b >= nb || off > sizes[b]) fail("a pointer outside its buffer");
        v = (uint64_t)(uintptr_t)(bufs[b] + off);
    }
    std::memcpy(&p, ptr, sizeof(ptr));
    for (const Launch& l : launches) {
        bool found = false;
        for (const auto& e : EMU_ENTRIES)
            if (std::strcmp(e.name, l.name) == 0) {
                launch(e.fn, p, l.grid, l.threads);
                found = true;
            }
        if (!found) fail(std::string("no entry point ") + l.name);
    }
    FILE* out = std::fopen(argv[2], "wb");
    if (!out) fail(std::string("cannot create ") + argv[2]);
    for (uint32_t b = 0; b < nb; ++b)
        if (sizes[b] && std::fwrite(bufs[b], sizes[b], 1, out) != 1) fail("write failed");
    if (std::fclose(out) != 0) fail("write failed");
    return 0;
}

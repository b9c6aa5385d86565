"""bench/py_host_split.py: host time per call of the pieces of a torch-op call (gdn 16/32, 1x8192
and 1x512, K = V = 128): the whole op, the workspace tensor alone, the workspace-size lookup, the
spec build, and the native launch alone; since session 7 also the public wrapper and its eager
fast path (no custom-op dispatch); since session 23 the offsets check (versioned cache hit, with
the max_seq hint of session 18), the capture query inside it and the current-stream lookup.
Prints microseconds per call (mean of 200)."""
import time

import torch

import deltarule  # noqa: F401
from deltarule import _native, _offsets, _spec, ops

DEV = "cuda"


def timeit(f, n=200):
    for _ in range(10):
        f()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        f()
    dt = (time.perf_counter() - t0) / n * 1e6
    torch.cuda.synchronize()
    return dt


for T in (8192, 512):
    H, HV, K = 16, 32, 128
    q = torch.randn(T, H, K, device=DEV).bfloat16()
    k = torch.nn.functional.normalize(torch.randn(T, H, K, device=DEV), dim=-1).bfloat16()
    v = torch.randn(T, HV, K, device=DEV).bfloat16()
    g = torch.nn.functional.logsigmoid(3 + torch.randn(T, HV, device=DEV))
    beta = torch.sigmoid(torch.randn(T, HV, device=DEV))
    cu = torch.tensor([0, T], dtype=torch.int32, device=DEV)
    h0 = torch.randn(1, HV, K, K, device=DEV)
    o = torch.empty(T, HV, K, dtype=torch.bfloat16, device=DEV)
    fin = torch.empty_like(h0)
    args = (q, k, v, g, beta, cu, o, h0, fin, None, None, None, None, None, 0.0, False, "log", -5.0,
            "prob", "vk", 0, "auto")
    f = torch.ops.deltarule.gdn_prefill
    whole = timeit(lambda: f(*args))
    spec = _spec.cached_spec("gdn", "prefill", (q, k, v, g, beta, cu, o, h0, fin, None, None, None,
                                                 None, None), (0.0, False, "log", -5.0, "prob", "vk", 0))
    nat = spec.native()
    hint = _offsets.validate(spec, cu, None, None)
    need = _native.workspace_bytes("gdn", "prefill", "auto", nat, 0, max_seq=hint)[1]
    t_spec = timeit(lambda: _spec.cached_spec("gdn", "prefill", (q, k, v, g, beta, cu, o, h0, fin, None,
                                                                  None, None, None, None),
                                              (0.0, False, "log", -5.0, "prob", "vk", 0)))
    t_empty = timeit(lambda: torch.empty(need, dtype=torch.uint8, device=DEV))
    t_wsb = timeit(lambda: _native.workspace_bytes("gdn", "prefill", "auto", nat, 0, max_seq=hint))
    t_wsc = timeit(lambda: ops._workspace("gdn", "prefill", "auto", nat, q.device, hint))
    t_off = timeit(lambda: _offsets.validate(spec, cu, None, None))
    t_cap = timeit(lambda: torch.cuda.is_current_stream_capturing())
    t_stream = timeit(lambda: torch.cuda.current_stream(q.device).cuda_stream)
    ws = torch.empty(need, dtype=torch.uint8, device=DEV)
    ptrs = [q.data_ptr(), k.data_ptr(), v.data_ptr(), g.data_ptr(), beta.data_ptr(), cu.data_ptr(), 0,
            0, h0.data_ptr(), 0, o.data_ptr(), fin.data_ptr(), 0]
    stream = torch.cuda.current_stream().cuda_stream
    t_launch = timeit(lambda: _native.launch("gdn", "prefill", "auto", nat, ptrs, stream, 0,
                                             ws.data_ptr(), need, max_seq=hint))
    # the public wrapper (eager fast path, ops.call_eager: no custom-op dispatch), session 7
    kw = dict(initial_state=h0, final_state=fin, out=o, state_layout="vk")
    wrapper = timeit(lambda: deltarule.gdn_prefill(q, k, v, g, beta, cu, **kw))
    fast = timeit(lambda: ops.call_eager("gdn_prefill", "gdn", "prefill", args[:14], args[14:21], "auto"))
    print(f"1x{T}: deltarule.gdn_prefill {wrapper:.1f} us; ops.call_eager {fast:.1f} us")
    print(f"1x{T}: whole op {whole:.1f} us; cached_spec {t_spec:.1f}; torch.empty({need >> 20} MiB) "
          f"{t_empty:.1f}; workspace_bytes (native) {t_wsb:.1f}; _workspace (cached) {t_wsc:.1f}; "
          f"native launch {t_launch:.1f}; offsets check {t_off:.1f} (capture query {t_cap:.1f}); "
          f"current stream {t_stream:.1f}; hint {hint}")

# session 23: the max_seq hint through the torch path (built in session 18, not run on a GPU
# then): gdn 16/32 256x64 should select the fused kernel, as `deltarule bench` does; GPU time of
# the wrapper by CUDA events for the same call's CLI figure
N, L, H, HV, K = 256, 64, 16, 32, 128
T = N * L
q = torch.randn(T, H, K, device=DEV).bfloat16()
k = torch.nn.functional.normalize(torch.randn(T, H, K, device=DEV), dim=-1).bfloat16()
v = torch.randn(T, HV, K, device=DEV).bfloat16()
g = torch.nn.functional.logsigmoid(3 + torch.randn(T, HV, device=DEV))
beta = torch.sigmoid(torch.randn(T, HV, device=DEV))
cu = torch.arange(0, T + 1, L, dtype=torch.int32, device=DEV)
h0 = torch.randn(N, HV, K, K, device=DEV)
o = torch.empty(T, HV, K, dtype=torch.bfloat16, device=DEV)
fin = torch.empty_like(h0)
spec = _spec.cached_spec("gdn", "prefill", (q, k, v, g, beta, cu, o, h0, fin, None, None, None,
                                             None, None), (0.0, False, "log", -5.0, "prob", "vk", 0))
hint = _offsets.validate(spec, cu, None, None)
with_hint = _native.select("gdn", "prefill", "auto", spec.native(), 0, max_seq=hint)[0]
without = _native.select("gdn", "prefill", "auto", spec.native(), 0)[0]
kw = dict(initial_state=h0, final_state=fin, out=o, state_layout="vk")
# back to back between the events (one call between them would also time the GPU waiting for
# the wrapper's host side: s23host's first version printed 1.00-1.02 ms that way)
for _ in range(10):
    deltarule.gdn_prefill(q, k, v, g, beta, cu, **kw)
times = []
for _ in range(7):
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(10):
        deltarule.gdn_prefill(q, k, v, g, beta, cu, **kw)
    e.record()
    torch.cuda.synchronize()
    times.append(s.elapsed_time(e) / 10)
times.sort()
print(f"{N}x{L}: hint {hint}: auto selects {with_hint} (without the hint: {without}); wrapper GPU "
      f"{times[3]:.4f} ms a call (median of 7 rounds of 10 back to back; min {times[0]:.4f}, "
      f"max {times[-1]:.4f}; inputs not rotated, state layout vk)")
